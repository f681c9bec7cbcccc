#!/bin/bash
# VM scenario: handlers returning non-zero on the real stack (tests/vm/abort.c): half of N queues
# abort in LIVE.enter, one in its completion handler after an exchange; no callback may reach
# them afterwards, the server closes their peers, the others stay LIVE, nothing is left at the end.
#   tests/vm/run tests/vm/scenarios/abort.sh [N [BINARY]]
# The binary: BINARY, else $QSM_ABORT_BIN, else ./tests/vm/abort (run from the top of the build
# tree). The transition trace goes to $QSM_VM_OUT/abort.trace; its tail is printed on failure.
set -u

n=${1:-10}
bin=${2:-${QSM_ABORT_BIN:-./tests/vm/abort}}
dev=${QSM_VM_DEV:-rxe0}
out=${QSM_VM_OUT:-/tmp}
trace=$out/abort.trace

fail() {
	echo "FAIL: $*"
	exit 1
}

[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
[[ -x $bin ]] || fail "$bin not found or not executable (build it, or set QSM_ABORT_BIN)"
command -v rdma >/dev/null || fail "rdma (iproute2) not installed"

# rxe0 must be up before the test starts (bounded by wall clock).
end=$((${EPOCHREALTIME/./} + 10000000))
while ((${EPOCHREALTIME/./} < end)); do
	rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE' && break
	sleep 0.1
done
rdma link show "$dev/1" | grep -q 'state ACTIVE' || fail "$dev is not ACTIVE"

echo "== $bin $n (trace: $trace)"
timeout --signal=KILL 180 "$bin" "$n" "$trace"
rc=$?
if [[ $rc != 0 ]]; then
	echo "== last 60 trace lines"
	tail -n 60 "$trace" 2>/dev/null
	echo "== dmesg (tail)"
	dmesg | tail -n 30
	fail "abort test exited $rc"
fi
echo "   trace: $(wc -l <"$trace") transitions"
echo "== trace: every client queue's ABORT edge"
grep -E '^client .* conn .* --ABORT--> ' "$trace"
aborted=$(grep -E '^client .* conn .* --ABORT--> CLOSED$' "$trace" | awk '{ print $4 }' | sort -u)
naborted=$(grep -cE '^client .* conn .* --ABORT--> CLOSED$' "$trace")
# Nothing of an aborted queue after its ABORT edge: dropped events are not traced, dispatched ones are.
late=0
for q in $aborted; do
	after=$(awk -v q="$q" '$3 == "conn" && $4 == q { if (seen) n++; if ($0 ~ /--ABORT--> CLOSED$/) seen = 1 } END { print n + 0 }' "$trace")
	((after)) && echo "   $q: $after trace lines after its ABORT edge"
	late=$((late + after))
done
echo "== trace: the server's passive queues that heard DISCONNECTED, and how they closed"
grep -E '^server .* passive .* --DISCONNECTED--> ' "$trace"
grep -E '^server .* passive .* --> CLOSED$' "$trace" | sed -E 's/^.* passive [^ ]+ //' | sort | uniq -c
echo "   trace: $naborted queues took --ABORT--> CLOSED, $late trace lines after an ABORT"
want=$(( (n + 1) / 2 + 1 ))
[[ $naborted == "$want" && $late == 0 ]] || fail "trace shows $naborted aborts (want $want) and $late lines after an abort"
# The process is gone: no QP and no cm_id of a user process may be left on the device.
echo "== rdma res show qp / cm_id after the test process exited"
rdma res show qp
rdma res show cm_id
left=$(rdma res show qp | grep -c ' pid [1-9]')
ids=$(rdma res show cm_id | grep -c .)
echo "   user QPs left: $left, cm_ids left: $ids"
[[ $left == 0 && $ids == 0 ]] || fail "resources left after the process exited: $left user QPs, $ids cm_ids"
echo "PASS: $naborted aborting handlers on the real stack, no callback after the abort, nothing left"
