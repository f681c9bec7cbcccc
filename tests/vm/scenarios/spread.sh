#!/bin/bash
# qsm-vm: families 4 6:rxe (IPv6 on one transport: the spread is the runtime's, not the address family's)
# VM scenario: one listener's requests spread over worker ctxs on their own threads
# (tests/vm/spread.c, qsm_listener_spread(3)): N (default 64) client queues connect and each
# echoes once through its passive queue on a worker; every worker holds N/W of them; `rdma link
# delete` under them returns (each worker's ctx lets go of the device on its own thread), the
# re-add brings every queue back, spread again; the clients close.  Asserts handed off ==
# adopted, each ctx's counter identity, unexpected 0.
#   tests/vm/run tests/vm/scenarios/spread.sh [N [BINARY]]
# The binary: BINARY, else $QSM_SPREAD_BIN, else ./tests/vm/spread (from the top of the build tree).
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup spread 64 QSM_SPREAD_BIN "$@"
QSM_SPREAD_WORKERS=${QSM_SPREAD_WORKERS:-2} vm_run_test spread 240 --link-show
grep -E '^worker .* REQUESTED --ACCEPT--> ' "$trace" | head -2
echo "PASS: spread: every request handed to a worker thread's ctx, echoed there, through a device removal"
