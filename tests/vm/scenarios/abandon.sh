#!/bin/bash
# VM scenario: queues let go while their connects are outstanding (tests/vm/abandon.c): N queues
# connect to a TCP port that no RDMA listener serves; on soft-iWARP the MPA request is never
# answered and the kernel's iw_cm would hold a destroy until the provider gives up, so the
# rdmacm fabric parks those ids: the destroys must not hold the ctx, each connect's outcome
# comes later as an event nobody owns, and no cm_id is left.  On soft-RoCE the REQ is rejected
# at once: the same checks, with nothing to park.
#   tests/vm/run tests/vm/scenarios/abandon.sh [N [BINARY]]
# The binary: BINARY, else $QSM_ABANDON_BIN, else ./tests/vm/abandon (run from the top of the
# build tree). The transition trace goes to $QSM_VM_OUT/abandon.trace.
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup abandon 10 QSM_ABANDON_BIN "$@"
export QSM_RDMACM_STATS=1
vm_run_test abandon 240
echo "== trace: every client edge out of CONNECTING (count, edge)"
grep -E '^client .* conn .* CONNECTING --' "$trace" |
	sed -E 's/^.* conn [^ ]+ (CONNECTING --[A-Z_]+( status=-?[0-9]+)?--> [A-Z_]+)$/\1/' | sort | uniq -c
echo "== trace: events nobody owned"
grep -cE '^client .* fabric ' "$trace" || true
echo "PASS: $n queues let go with their connects outstanding"
