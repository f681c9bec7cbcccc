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
tlog=$out/nvmet.log
tmp=${TMPDIR:-/tmp}
# shellcheck source=tests/vm/nvme-lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../nvme-lib.sh" || { echo "FAIL: tests/vm/nvme-lib.sh not found"; exit 1; }

nvme_host_ready dd cmp
target_start -a "$addr" -p "$port" -n "$nqn" -s 64M -v

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

nvme_connect "$nqn" "$port" --reconnect-delay=1 --ctrl-loss-tmo=60
size=$(blockdev --getsize64 "$ns")
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

nvme_disconnect "$nqn"
target_stop
echo "PASS: nvme discover, connect, 4 MiB dd + cmp$([[ $removal == removal ]] && echo ", device removal + re-add + connect again"), disconnect; no unexpected event"
