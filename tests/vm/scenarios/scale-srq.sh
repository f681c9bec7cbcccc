#!/bin/bash
# qsm-vm: transports rxe siw (siw: needs the guest's RLIMIT_MEMLOCK raised, guest/init: siw pins against it even for root)
# qsm-vm: families 4 6:rxe (IPv6 on one transport, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# qsm-vm: timeout 600
# VM scenario: scale.sh with the server's 1,000 queues on one shared receive queue per device
# (QSM_REMOVAL_SRQ=1): made with the first QP, released with the device at `rdma link delete`,
# made again after the re-add, gone at the end; every receive from it echoed.
#   tests/vm/run tests/vm/scenarios/scale-srq.sh [N [BINARY]]
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

export QSM_REMOVAL_SRQ=1
vm_setup scale-srq 2000 QSM_REMOVAL_BIN "${1:-2000}" "${2:-${QSM_REMOVAL_BIN:-./tests/vm/removal}}"
vm_run_test scale-srq 540 --link-show
vm_removal_trace_checks --count
grep -q 'share one SRQ per device' "$log" || fail "the server did not run on an SRQ ($log)"
echo "PASS: $n live queues per side, the server's on one SRQ per device, through removal, re-add and reconnect"
