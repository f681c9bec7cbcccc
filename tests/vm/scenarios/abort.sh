#!/bin/bash
# VM scenario: handlers returning non-zero on the real stack (tests/vm/abort.c): half of N queues
# abort in LIVE.enter, one in its completion handler after an exchange; no callback may reach
# them afterwards, the server closes their peers, the others stay LIVE, nothing is left at the end.
#   tests/vm/run tests/vm/scenarios/abort.sh [N [BINARY]]
# The binary: BINARY, else $QSM_ABORT_BIN, else ./tests/vm/abort (run from the top of the build
# tree). The transition trace goes to $QSM_VM_OUT/abort.trace; its tail is printed on failure.
set -u
# tests/vm/run copies only this file into the guest: the library comes from the (read-only) host tree.
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup abort 10 QSM_ABORT_BIN "$@"
vm_run_test abort 180
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
