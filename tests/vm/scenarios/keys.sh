#!/bin/bash
# qsm-vm: families 4 (no address is used: the queues are made and freed, never connected)
# VM scenario: a device's user queues can be made past the mmap key libsiw takes for "no
# mapping" (tests/vm/keys.c, tests/vm/siw-mmap-key.patch): 300 one-page CQs, a CQ with 40 QPs,
# freed and made again; fails on the first create that fails.
#   tests/vm/run tests/vm/scenarios/keys.sh [N]
set -u
dev=${QSM_VM_DEV:-${QSM_VM_TRANSPORT:-rxe}0}
[[ ${QSM_VM:-} == 1 ]] || { echo "FAIL: not inside the test VM (run it with tests/vm/run)"; exit 1; }
echo "== ./tests/vm/keys $dev ${1:-300}"
./tests/vm/keys "$dev" "${1:-300}"
