#!/bin/bash
# qsm-vm: transports rxe siw
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
	device_remove
	device_readd_connect
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
