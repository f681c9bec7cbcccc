#!/bin/bash
# qsm-vm: transports rxe (siw: the kernel host's writes time out, I/O timeout and reconnect, in 2 of 3 runs even with the namespace registered QSM_ACCESS_READ_SINK; tests/vm/README.md)
# VM scenario: examples/nvmet/qsm-nvmet (a userspace NVMe over Fabrics RDMA target on rdma-qsm)
# with the Linux kernel's NVMe-oF host (nvme-rdma, driven by nvme-cli) as its client:
#   discover, connect, 4 MiB written with dd and read back identical, then (unless the first
#   argument is "noremoval") `rdma link delete` under the connected host: the target releases
#   everything (the delete returns; the kernel host deletes its controller), re-add, the
#   target listens again, `nvme connect` again and the data reads back; disconnect; the target
#   exits 0 with no unexpected event.
#   tests/vm/run tests/vm/scenarios/nvmeof.sh [removal|noremoval [BINARY]]
set -u

addr=${QSM_VM_ADDR:-192.0.2.1}
transport=${QSM_VM_TRANSPORT:-rxe}
dev=${QSM_VM_DEV:-${transport}0}
netdev=${QSM_VM_NETDEV:-veth0}
out=${QSM_VM_OUT:-/tmp}
removal=${1:-removal}
bin=${2:-./examples/nvmet/qsm-nvmet}
port=4420
nqn=nqn.2024-01.io.rdma-qsm:nvmet-vm
hostnqn=nqn.2014-08.org.nvmexpress:uuid:5a1c0de0-0000-4000-8000-00000000c0de
hostid=5a1c0de0-0000-4000-8000-00000000c0de
tlog=$out/nvmet.log
tmp=${TMPDIR:-/tmp}
tpid=

step() { echo "== $*"; }
usec() { echo "${EPOCHREALTIME/[.,]/}"; }
ms_since() { echo $((($(usec) - $1) / 1000)); }
diag() {
	echo "== target log (tail)"
	tail -n 40 "$tlog" 2>/dev/null
	echo "== dmesg (tail)"
	dmesg | tail -n 40
}
fail() {
	echo "FAIL: $*"
	diag
	[[ -n $tpid ]] && kill -TERM "$tpid" 2>/dev/null
	exit 1
}
# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s, bounded by the wall clock.
wait_for() {
	local end=$(($(usec) + $1 * 1000000))
	shift
	while (($(usec) < end)); do
		"$@" && return 0
		sleep 0.2
	done
	"$@"
}
dev_active() {
	rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE' && compgen -G '/dev/infiniband/uverbs*' >/dev/null
}
target_says() { grep -q -- "$1" "$tlog"; }
# the controller of our subsystem: nvmeN, and its namespace block device
ctrl_of_nqn() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ -e $c/subsysnqn && $(<"$c/subsysnqn") == "$nqn" ]] && { basename "$c"; return 0; }
	done
	return 1
}
find_ns() {
	local c b
	c=$(ctrl_of_nqn) || return 1
	for b in /sys/block/nvme*; do
		[[ -e $b/device && $(basename "$(readlink -f "$b/device")") == "$c" ]] && { ns=/dev/$(basename "$b"); [[ -b $ns ]] && return 0; }
		# multipath heads: nvmeXcYnZ hidden, nvmeXnZ on the subsystem
		[[ -e $b/device/subsysnqn && $(<"$b/device/subsysnqn") == "$nqn" ]] && { ns=/dev/$(basename "$b"); [[ -b $ns ]] && return 0; }
	done
	return 1
}
all_freed() { [[ $(grep -c "controller .* freed" "$tlog") -ge $(grep -c "(admin queue" "$tlog") ]]; }

[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
[[ -x $bin ]] || fail "$bin not found or not executable (make, from the top of the build tree)"
for t in nvme rdma dd cmp timeout; do
	command -v "$t" >/dev/null || fail "$t not installed"
done

step "kernel NVMe-oF host modules"
for m in nvme_fabrics nvme_rdma; do
	if [[ ! -d /sys/module/$m ]]; then
		timeout 20 modprobe "$m" || fail "cannot load $m"
	fi
done
ls -d /sys/module/nvme_rdma /sys/module/nvme_fabrics || fail "nvme-rdma not loaded"
[[ -c /dev/nvme-fabrics ]] || fail "/dev/nvme-fabrics missing"
wait_for 10 dev_active || fail "$dev is not ACTIVE"

step "target: $bin -a $addr -p $port -n $nqn -s 64M -v"
"$bin" -a "$addr" -p "$port" -n "$nqn" -s 64M -v >"$tlog" 2>&1 &
tpid=$!
wait_for 10 target_says "listening on" || fail "the target is not listening"
head -n 1 "$tlog" | sed 's/^/   /'

step "nvme discover -t rdma -a $addr -s $port"
t0=$(usec)
timeout 30 nvme discover -t rdma -a "$addr" -s "$port" --hostnqn="$hostnqn" --hostid="$hostid" \
	>"$tmp/discover.log" 2>&1
rc=$?
sed 's/^/   /' "$tmp/discover.log"
[[ $rc == 0 ]] || fail "nvme discover exited $rc"
grep -q "subnqn: *$nqn" "$tmp/discover.log" || fail "the discovery log does not list $nqn"
grep -q "traddr: *$addr" "$tmp/discover.log" || fail "the discovery log does not list $addr"
echo "   ok: $nqn listed ($(ms_since "$t0") ms)"

step "nvme connect -t rdma -n $nqn -a $addr -s $port"
t0=$(usec)
timeout 60 nvme connect -t rdma -n "$nqn" -a "$addr" -s "$port" --hostnqn="$hostnqn" \
	--hostid="$hostid" --reconnect-delay=1 --ctrl-loss-tmo=60 >"$tmp/connect.log" 2>&1
rc=$?
sed 's/^/   /' "$tmp/connect.log"
[[ $rc == 0 ]] || fail "nvme connect exited $rc"
ns=
wait_for 20 find_ns || fail "no namespace block device for $nqn"
ctrl=$(ctrl_of_nqn)
size=$(blockdev --getsize64 "$ns")
echo "   ok: $ctrl, namespace $ns, $size bytes ($(ms_since "$t0") ms)"
[[ $size == $((64 << 20)) ]] || fail "$ns has $size bytes, expected 64 MiB"
nvme list 2>/dev/null | sed 's/^/   /'

io_roundtrip() { # LABEL SEEK_MIB: 4 MiB of /dev/urandom to SEEK_MIB, read back, cmp
	local label=$1 seek=$2
	step "4 MiB write + read back ($label, at $seek MiB)"
	t0=$(usec)
	dd if=/dev/urandom of="$tmp/pattern-$label" bs=1M count=4 status=none || fail "dd urandom"
	timeout 60 dd if="$tmp/pattern-$label" of="$ns" bs=1M count=4 seek="$seek" oflag=direct conv=fsync status=none ||
		fail "dd write to $ns failed"
	timeout 60 dd if="$ns" of="$tmp/back-$label" bs=1M count=4 skip="$seek" iflag=direct status=none ||
		fail "dd read from $ns failed"
	cmp "$tmp/pattern-$label" "$tmp/back-$label" || fail "read back differs from what was written"
	echo "   ok: identical ($(ms_since "$t0") ms; md5 $(md5sum <"$tmp/back-$label" | cut -c1-12))"
}
io_roundtrip first 8

if [[ $removal == removal ]]; then
	step "rdma link delete $dev with the host connected (20 s limit)"
	t0=$(usec)
	rdma link delete "$dev" &
	dpid=$!
	end=$(($(usec) + 20000000))
	while kill -0 "$dpid" 2>/dev/null && (($(usec) < end)); do sleep 0.1; done
	if kill -0 "$dpid" 2>/dev/null; then
		echo "   rdma link delete still blocked after 20 s; kernel stack:"
		cat "/proc/$dpid/stack" 2>/dev/null | sed 's/^/   /'
		fail "rdma link delete blocked (something still holds $dev)"
	fi
	wait "$dpid" || fail "rdma link delete exited non-zero"
	echo "   ok: deleted in $(ms_since "$t0") ms"
	# the target holds nothing on the device any more (SIGUSR1: it prints its counters)
	ncnt=$(grep -c "qsm counters:" "$tlog")
	kill -USR1 "$tpid"
	counters_printed() { (($(grep -c "qsm counters:" "$tlog") > ncnt)); }
	wait_for 5 counters_printed || fail "the target printed no counters on SIGUSR1"
	grep "qsm counters:" "$tlog" | tail -n 1 | sed 's/^/   /'
	grep "qsm counters:" "$tlog" | tail -n 1 | grep -q "devices_live 0$" ||
		fail "the target still holds a device"
	echo "   target queues that took DEVICE_REMOVAL themselves: $(grep -c "device removed" "$tlog")" \
		"(the others were closed by the host first)"

	# nvme-rdma's ib_client deletes every controller on a device that goes away (it does not
	# reconnect by itself): wait until the host let go, then connect again.
	wait_for 30 eval '! ctrl_of_nqn >/dev/null' || fail "the host kept its controller after the removal"
	dmesg | grep -E 'nvme nvme[0-9]+: Removing ctrl' | tail -n 1 | sed 's/^/   dmesg: /'
	wait_for 10 all_freed || fail "the target did not free the controller after the removal"

	step "rdma link add $dev type $transport netdev $netdev; nvme connect again"
	t0=$(usec)
	rdma link add "$dev" type "$transport" netdev "$netdev" || fail "rdma link add failed"
	wait_for 10 dev_active || fail "$dev is not ACTIVE after re-add"
	# the target's listener relistens on DEVICE_ADDED (or its 1 s relisten timer)
	end=$(($(usec) + 30000000))
	for ((try = 1; ; try++)); do
		timeout 60 nvme connect -t rdma -n "$nqn" -a "$addr" -s "$port" --hostnqn="$hostnqn" \
			--hostid="$hostid" >"$tmp/connect2.log" 2>&1 && break
		(($(usec) < end)) || { cat "$tmp/connect2.log"; fail "nvme connect after re-add failed"; }
		sleep 0.5
	done
	ns=
	wait_for 20 find_ns || fail "no namespace block device after the reconnect"
	ctrl=$(ctrl_of_nqn)
	echo "   ok: $ctrl, $ns ($(ms_since "$t0") ms after re-add, $try connect attempt(s))"
	step "the data written before the removal"
	timeout 60 dd if="$ns" of="$tmp/back-again" bs=1M count=4 skip=8 iflag=direct status=none ||
		fail "dd read after reconnect failed"
	cmp "$tmp/pattern-first" "$tmp/back-again" || fail "data differs after the reconnect"
	echo "   ok: identical"
	io_roundtrip after-reconnect 32
fi

step "nvme disconnect -n $nqn"
timeout 60 nvme disconnect -n "$nqn" >"$tmp/disconnect.log" 2>&1
rc=$?
sed 's/^/   /' "$tmp/disconnect.log"
[[ $rc == 0 ]] || fail "nvme disconnect exited $rc"
grep -q "disconnected 1 controller" "$tmp/disconnect.log" || fail "nvme disconnect disconnected no controller"
ctrl_of_nqn >/dev/null && fail "controller still present after disconnect"
wait_for 10 all_freed || fail "the target did not free every controller"

step "target: stop (SIGTERM), counters"
kill -TERM "$tpid"
end=$(($(usec) + 10000000))
while kill -0 "$tpid" 2>/dev/null && (($(usec) < end)); do sleep 0.1; done
kill -0 "$tpid" 2>/dev/null && fail "the target did not exit within 10 s"
wait "$tpid"
trc=$?
tpid=
grep -E "controller|counters|stopping|unexpected|error" "$tlog" | sed 's/^/   /'
[[ $trc == 0 ]] || fail "the target exited $trc"
grep -q "qsm counters: unexpected 0," "$tlog" || fail "the target counted unexpected events"
grep -q "wc errors 0, protocol errors 0" "$tlog" || fail "the target counted errors"
echo "PASS: nvme discover, connect, 4 MiB dd + cmp$([[ $removal == removal ]] && echo ", device removal + re-add + connect again"), disconnect; no unexpected event"
