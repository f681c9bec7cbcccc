#!/bin/bash
# VM scenario: device removal in the reconnect gap (tests/vm/gap.c): N queues whose server went
# down sit in RECONNECT_WAIT holding an MR each; `rdma link delete` must return within 5 s, every
# queue takes the gap's DEVICE_REMOVAL self-loop once; after `rdma link add` and a new listener
# all N are LIVE again.
#   tests/vm/run tests/vm/scenarios/gap.sh [N [BINARY]]
# The binary: BINARY, else $QSM_GAP_BIN, else ./tests/vm/gap (run from the top of the build
# tree). The transition trace goes to $QSM_VM_OUT/gap.trace; its tail is printed on failure.
set -u

n=${1:-100}
bin=${2:-${QSM_GAP_BIN:-./tests/vm/gap}}
dev=${QSM_VM_DEV:-rxe0}
out=${QSM_VM_OUT:-/tmp}
trace=$out/gap.trace

fail() {
	echo "FAIL: $*"
	exit 1
}

[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
[[ -x $bin ]] || fail "$bin not found or not executable (build it, or set QSM_GAP_BIN)"
command -v rdma >/dev/null || fail "rdma (iproute2) not installed"

# rxe0 must be up before the test starts (bounded by wall clock).
end=$((${EPOCHREALTIME/./} + 10000000))
while ((${EPOCHREALTIME/./} < end)); do
	rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE' && break
	sleep 0.1
done
rdma link show "$dev/1" | grep -q 'state ACTIVE' || fail "$dev is not ACTIVE"

echo "== $bin $n (trace: $trace)"
timeout --signal=KILL 240 "$bin" "$n" "$trace"
rc=$?
if [[ $rc != 0 ]]; then
	echo "== last 60 trace lines"
	tail -n 60 "$trace" 2>/dev/null
	echo "== rdma link show"
	rdma link show
	echo "== dmesg (tail)"
	dmesg | tail -n 30
	fail "gap test exited $rc"
fi
echo "   trace: $(wc -l <"$trace") transitions"
# Every way into the gap: the loss (DRAINED), the retries into the dead server (REJECTED), the
# removal (the self-loop), the retries while no device was there (ADDR_ERROR), DEVICE_ADDED.
echo "== trace: every client edge into RECONNECT_WAIT (count, edge)"
grep -E '^client .* conn .*--> RECONNECT_WAIT$' "$trace" |
	sed -E 's/^.* conn [^ ]+ ([A-Z_]+) --([A-Z_]+)( status=-?[0-9]+)?-->.*$/\1 --\2\3--> RECONNECT_WAIT/' | sort | uniq -c
# The evidence, per queue: the device sentinel's removal, every queue's gap self-loop, and
# the reconnect that followed.
echo "== trace: the device registry's sentinel"
grep -E '^client .* device .*--DEVICE_REMOVAL' "$trace"
echo "== trace: every client queue's DEVICE_REMOVAL edge"
grep -E '^client .* conn .*--DEVICE_REMOVAL' "$trace"
echo "== trace: every client queue's way back to LIVE (the last CONNECTED --READY--> LIVE of each)"
grep -E '^client .* CONNECTED --READY--> LIVE' "$trace" | awk '{ last[$4] = $0 } END { for (q in last) print last[q] }' | sort -k4,4V
removed=$(grep -cE '^client .* conn .* RECONNECT_WAIT --DEVICE_REMOVAL(.*)--> RECONNECT_WAIT$' "$trace")
other=$(grep -E '^client .* conn .*--DEVICE_REMOVAL' "$trace" | grep -cvE 'RECONNECT_WAIT --DEVICE_REMOVAL(.*)--> RECONNECT_WAIT$')
queues=$(grep -E '^client .* conn .* RECONNECT_WAIT --DEVICE_REMOVAL(.*)--> RECONNECT_WAIT$' "$trace" | awk '{ print $4 }' | sort -u | wc -l)
relive=$(grep -E '^client .* CONNECTED --READY--> LIVE' "$trace" | awk '{ n[$4]++ } END { c = 0; for (q in n) if (n[q] >= 2) c++; print c }')
echo "   trace: $removed gap self-loops on $queues queues, $other other DEVICE_REMOVAL edges, $relive queues LIVE again"
[[ $removed == "$n" && $queues == "$n" && $other == 0 && $relive == "$n" ]] ||
	fail "trace shows $removed gap removals on $queues queues ($other other), $relive reconnects; want $n, $n, 0, $n"
rdma link show
echo "PASS: removal in the reconnect gap with $n queues, re-add and reconnect"
