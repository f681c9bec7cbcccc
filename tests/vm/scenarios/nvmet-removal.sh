#!/bin/bash
# qsm-vm: transports rxe siw (siw: with the test VM's fix of siw's TX-thread race, tests/vm/siw-tx-thread-user-copy.patch)
# qsm-vm: timeout 600
# VM scenario: device removal in the middle of fio, on examples/nvmet/qsm-nvmet with the Linux
# kernel's NVMe-oF host (issue 19). fio writes random 4 KiB blocks (iodepth 16, 1,500/s) with crc32c
# verify headers and saves its verify state when it stops (verify_state_save: which writes
# completed); 3 s in, `rdma link delete` under it: the host deletes its controller and fio's
# outstanding I/O fails; the target releases everything. Then the device comes back, the host
# connects again, and fio's verify-only pass, from the saved state, reads back every write
# issued before the removal: each acknowledged one must be intact (the ones the removal failed
# with EIO may hold the old data). The target exits 0 with no
# unexpected event.
#   tests/vm/run tests/vm/scenarios/nvmet-removal.sh [BINARY]
set -u

addr=${QSM_VM_ADDR:-192.0.2.1}
transport=${QSM_VM_TRANSPORT:-rxe}
dev=${QSM_VM_DEV:-${transport}0}
netdev=${QSM_VM_NETDEV:-veth0}
out=${QSM_VM_OUT:-/tmp}
bin=${1:-./examples/nvmet/qsm-nvmet}
port=4420
nqn=nqn.2024-01.io.rdma-qsm:nvmet-removal
tlog=$out/nvmet-removal.log
tmp=${TMPDIR:-/tmp}
# shellcheck source=tests/vm/nvme-lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../nvme-lib.sh" || { echo "FAIL: tests/vm/nvme-lib.sh not found"; exit 1; }

nvme_host_ready fio
target_start -a "$addr" -p "$port" -n "$nqn" -s 64M -v
nvme_connect "$nqn" "$port"

# the same job both times: the verify pass replays the write pass's random sequence up to the
# saved state (fio's state file is named for the job and lives in the cwd)
# (one pass over 56 MiB, 14,336 blocks, at 1,500 writes/s: still writing when the device goes)
job=(--name=rmw --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 --size=56M
	--offset=8M --verify=crc32c --verify_state_save=1 --randseed=4242)
cd "$tmp" || fail "cd $tmp"
step "fio: random 4 KiB writes with crc32c headers on $ns (iodepth 16); rdma link delete 3 s in"
t0=$(usec)
timeout 300 fio "${job[@]}" --filename="$ns" --do_verify=0 --rate_iops=1500 >"$tmp/fio-write.log" 2>&1 &
fpid=$!
sleep 3
kill -0 "$fpid" 2>/dev/null || { cat "$tmp/fio-write.log"; fail "fio ended before the removal"; }
device_remove
wait "$fpid"
frc=$?
grep -E 'err=|write:|error|state' "$tmp/fio-write.log" | head -n 8 | sed 's/^/   fio: /'
echo "   fio exited $frc ($(ms_since "$t0") ms after it started)"
[[ $frc != 0 ]] || fail "fio's writes all succeeded: the removal did not cut them (fio too short?)"
ls "$tmp"/*rmw*verify.state >/dev/null 2>&1 || fail "fio saved no verify state"

device_readd_connect
step "fio: verify pass from the saved state on $ns: every acknowledged write read back"
t0=$(usec)
timeout 300 fio "${job[@]}" --filename="$ns" --verify_only --verify_state_load=1 \
	>"$tmp/fio-verify.log" 2>&1
vrc=$?
# A write the removal cut failed with EIO (fio: "io_u error ... write offset=O"): never
# acknowledged, so its block may hold the old data; fio's saved state still counts it, and its
# verify flags it. Every block the verify flags must be one of those; any other is an
# acknowledged write lost or torn.
grep -o 'write offset=[0-9]*' "$tmp/fio-write.log" | cut -d= -f2 | sort -u >"$tmp/failed-writes"
grep -o 'verify: .* at file [^ ]* offset [0-9]*' "$tmp/fio-verify.log" | awk '{ print $NF }' | sort -u \
	>"$tmp/flagged"
lost=$(comm -13 "$tmp/failed-writes" "$tmp/flagged" | wc -l)
grep -E ' read: IOPS=|err=' "$tmp/fio-verify.log" | head -n 3 | sed 's/^/   fio: /'
echo "   writes that failed at the removal: $(wc -l <"$tmp/failed-writes"); blocks the verify flagged:" \
	"$(wc -l <"$tmp/flagged"), of them among the failed writes: $(($(wc -l <"$tmp/flagged") - lost))" \
	"(fio exit $vrc)"
((lost == 0)) || { comm -13 "$tmp/failed-writes" "$tmp/flagged" | head -n 5 | sed 's/^/   lost at offset /'
	fail "$lost acknowledged write(s) lost or torn"; }
grep -q ' read: IOPS=' "$tmp/fio-verify.log" || fail "the verify pass read nothing"
((vrc == 0)) || [[ -s $tmp/flagged ]] || { tail -n 20 "$tmp/fio-verify.log"; fail "fio's verify pass failed (exit $vrc) for no block"; }
echo "   ok: every acknowledged write read back intact ($(ms_since "$t0") ms)"

nvme_disconnect "$nqn"
target_stop
echo "PASS: device removal under fio, reconnect, every acknowledged write intact"
