#!/bin/bash
# VM scenario: device removal with N live queues on the rdmacm fabric (tests/vm/removal.c).
#   tests/vm/run tests/vm/scenarios/removal.sh [N [BINARY]]
# The binary: BINARY, else $QSM_REMOVAL_BIN, else ./tests/vm/removal (built by make; run from
# the top of the build tree). tests/vm/run starts the guest with a clean environment, so from
# the host pass the binary as an argument; the variable is for running this script by hand. The transition trace goes to $QSM_VM_OUT/removal.trace; its
# tail is printed when the test fails.
set -u
# tests/vm/run copies only this file into the guest: the library comes from the (read-only) host tree.
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup removal 100 QSM_REMOVAL_BIN "$@"
vm_run_test removal 240 --link-show
vm_removal_trace_checks --print
rdma link show
echo "PASS: removal with $n live queues, re-add and reconnect"
