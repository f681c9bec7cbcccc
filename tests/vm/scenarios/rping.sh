#!/bin/bash
# Smoke scenario for tests/vm/run: rping over soft-RoCE, then device removal + re-add.
#   tests/vm/run tests/vm/scenarios/rping.sh
set -u

addr=${QSM_VM_ADDR:-192.0.2.1}
transport=${QSM_VM_TRANSPORT:-rxe}
dev=${QSM_VM_DEV:-${transport}0}
netdev=${QSM_VM_NETDEV:-veth0}

fail() {
	echo "FAIL: $*"
	exit 1
}
step() { echo "== $*"; }
now() { echo "${EPOCHREALTIME/,/.}"; }
usec() { echo "${EPOCHREALTIME/[.,]/}"; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.0f", (b-a)*1000}'; }

[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
for t in rping rdma ibv_devices timeout; do
	command -v "$t" >/dev/null || fail "$t not installed"
done

# Wait (bounded) until $dev is ACTIVE and its uverbs node exists.
wait_dev_active() {
	local end=$(($(usec) + 10000000))
	while (($(usec) < end)); do
		if rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE' &&
			compgen -G '/dev/infiniband/uverbs*' >/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	rdma link show
	fail "$dev did not become ACTIVE within 10 s"
}

# One rping exchange: server in the background, client with bounded retries (the server may not
# be listening yet). Both must exit 0 and the client must print 3 pings.
rping_round() {
	local label=$1 slog clog spid crc src n try t0 t1 end
	slog=${TMPDIR:-/tmp}/rping-server-$label.log
	clog=${TMPDIR:-/tmp}/rping-client-$label.log
	: >"$clog"
	step "rping ($label)"
	t0=$(now)
	timeout 60 rping -s -a "$addr" -C 3 -v >"$slog" 2>&1 &
	spid=$!
	crc=1
	end=$(($(usec) + 60000000))
	for ((try = 1; try <= 20 && $(usec) < end; try++)); do
		sleep 0.3
		kill -0 "$spid" 2>/dev/null || break
		timeout 30 rping -c -a "$addr" -C 3 -v >"$clog" 2>&1
		crc=$?
		[[ $crc == 0 ]] && break
		echo "   client attempt $try exited $crc: $(tr '\n' ' ' <"$clog")"
	done
	src=0
	wait "$spid" || src=$?
	t1=$(now)
	sed 's/^/   client: /' "$clog"
	sed 's/^/   server: /' "$slog"
	[[ $crc == 0 ]] || fail "rping client ($label) exited $crc"
	[[ $src == 0 ]] || fail "rping server ($label) exited $src"
	n=$(grep -c 'ping data: rdma-ping-' "$clog")
	[[ $n == 3 ]] || fail "rping client ($label) printed $n pings, expected 3"
	echo "   ok: 3 pings, client and server exit 0 ($(ms "$t0" "$t1") ms, $try client attempt(s))"
}

step "devices"
rdma link show
ibv_devices
wait_dev_active

rping_round first

# Device removal: bounded even if the kernel blocks (a blocked `rdma link delete` sits in D
# state and cannot be killed, so poll instead of waiting on it).
step "rdma link delete $dev (20 s limit)"
t0=$(now)
rdma link delete "$dev" &
dpid=$!
deleted=0
end=$(($(usec) + 20000000)) # wall clock: each fork is slow under TCG, so do not count iterations
while (($(usec) < end)); do
	if ! kill -0 "$dpid" 2>/dev/null; then
		deleted=1
		break
	fi
	sleep 0.1
done
t1=$(now)
if [[ $deleted == 0 ]]; then
	grep -H . /proc/"$dpid"/stack 2>/dev/null
	fail "rdma link delete $dev still blocked after $(ms "$t0" "$t1") ms"
fi
wait "$dpid" || fail "rdma link delete $dev exited $?"
echo "   delete latency: $(ms "$t0" "$t1") ms"
[[ ! -e /sys/class/infiniband/$dev ]] || fail "$dev still in /sys/class/infiniband after delete"

step "rdma link add $dev type $transport netdev $netdev"
t0=$(now)
rdma link add "$dev" type "$transport" netdev "$netdev" || fail "rdma link add $dev failed"
wait_dev_active
echo "   re-add ready in $(ms "$t0" "$(now)") ms"
rdma link show

rping_round after-readd

echo "PASS: rping x2, device delete + re-add"
