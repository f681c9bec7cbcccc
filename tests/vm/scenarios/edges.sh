#!/bin/bash
# qsm-vm: timeout 420
# VM scenario: the ULP's calls in every state that can hold them, refused sends, and queues held
# in a state while rxe is deleted, on the real stack
# (tests/vm/edges.c): destroy, abort, disconnect, connect and reject, each made by a queue's
# enter handler on one side, so that each (state, call) edge of the cm_id and accept machines is
# taken on soft-RoCE and counted in the real-stack coverage (doc/coverage.md).
#   tests/vm/run tests/vm/scenarios/edges.sh [N [BINARY]]
# The binary: BINARY, else $QSM_EDGES_BIN, else ./tests/vm/edges (run from the top of the build
# tree). The transition trace goes to $QSM_VM_OUT/edges.trace; its tail is printed on failure.
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup edges 1 QSM_EDGES_BIN "$@"
vm_run_test edges 300
echo "== trace: the calls' edges, by side and machine"
grep -E -- '--(DESTROY|ABORT|DISCONNECT|CONNECT|REJECT|WC_ERROR|DEVICE_REMOVAL)--> ' "$trace" | awk '{ print $1, $3, $5, $6 }' | sort | uniq -c
echo "== rdma res show qp / cm_id after the test process exited"
left=$(rdma res show qp | grep -c ' pid [1-9]')
ids=$(rdma res show cm_id | grep -c .)
echo "   user QPs left: $left, cm_ids left: $ids"
[[ $left == 0 && $ids == 0 ]] || fail "resources left after the process exited: $left user QPs, $ids cm_ids"
echo "PASS: $(grep -E '^edges driven' "$log")"
