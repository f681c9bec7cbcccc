#!/bin/bash
# VM scenario: device removal in the reconnect gap (tests/vm/gap.c): N queues whose server went
# down sit in RECONNECT_WAIT holding an MR each; `rdma link delete` must return within 5 s, every
# queue takes the gap's DEVICE_REMOVAL self-loop once; after `rdma link add` and a new listener
# all N are LIVE again.
#   tests/vm/run tests/vm/scenarios/gap.sh [N [BINARY]]
# The binary: BINARY, else $QSM_GAP_BIN, else ./tests/vm/gap (run from the top of the build
# tree). The transition trace goes to $QSM_VM_OUT/gap.trace; its tail is printed on failure.
set -u
# tests/vm/run copies only this file into the guest: the library comes from the (read-only) host tree.
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup gap 100 QSM_GAP_BIN "$@"
vm_run_test gap 240 --link-show
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
vm_trace_last_live "$trace"
removed=$(grep -cE '^client .* conn .* RECONNECT_WAIT --DEVICE_REMOVAL(.*)--> RECONNECT_WAIT$' "$trace")
other=$(grep -E '^client .* conn .*--DEVICE_REMOVAL' "$trace" | grep -cvE 'RECONNECT_WAIT --DEVICE_REMOVAL(.*)--> RECONNECT_WAIT$')
queues=$(grep -E '^client .* conn .* RECONNECT_WAIT --DEVICE_REMOVAL(.*)--> RECONNECT_WAIT$' "$trace" | awk '{ print $4 }' | sort -u | wc -l)
relive=$(vm_trace_relive_count "$trace")
echo "   trace: $removed gap self-loops on $queues queues, $other other DEVICE_REMOVAL edges, $relive queues LIVE again"
[[ $removed == "$n" && $queues == "$n" && $other == 0 && $relive == "$n" ]] ||
	fail "trace shows $removed gap removals on $queues queues ($other other), $relive reconnects; want $n, $n, 0, $n"
rdma link show
echo "PASS: removal in the reconnect gap with $n queues, re-add and reconnect"
