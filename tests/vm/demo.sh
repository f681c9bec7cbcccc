#!/bin/bash
# The README's demonstration, inside the VM: 4 queues connect over soft-RoCE, the device is
# deleted under them, re-added, and they reconnect; then every transition of the run is shown.
set -u
out=${QSM_VM_OUT:-${TMPDIR:-/tmp}}
trace=$out/demo.trace
./tests/vm/removal 4 "$trace"
rc=$?
echo
echo "== every transition of the run (time, side, kind, class#queue, state --EVENT--> state)"
cat "$trace"
exit $rc
