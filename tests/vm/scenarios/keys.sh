#!/bin/bash
# qsm-vm: families 4 (no address is used: the queues are made and freed, never connected)
# VM scenario: a device's user queues can be made past the mmap key libsiw takes for "no
# mapping" (tests/vm/keys.c, tests/vm/siw-mmap-key.patch): N (300) one-page CQs, a CQ with 40
# QPs, freed and made again; every create that fails is printed, and any fails the scenario.
#   tests/vm/run tests/vm/scenarios/keys.sh [N [BINARY]]
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup keys 300 QSM_KEYS_BIN "$@"
step "$bin $n (device $dev)"
QSM_VM_DEV=$dev timeout --signal=KILL 120 "$bin" "$n" || fail "keys exited $?"
