#!/bin/bash
# qsm-vm: transports rxe siw (siw: needs the guest's RLIMIT_MEMLOCK raised, guest/init: siw pins against it even for root)
# qsm-vm: families 4 6:rxe (IPv6 on one transport, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# qsm-vm: host-load 2
# qsm-vm: timeout 900
# VM scenario: scale-srq.sh (2,000 queues per side, the server's on one SRQ per device, through device removal and re-add) with the
# host's two cores busy beside the VM (tests/vm.test starts the busy loops this header asks for):
# the connect storms, the drains and the removal under load, where timeouts that race the CM
# and drains that end by their timeout show.  The same checks: spurious teardowns 0,
# completions lost 0, unexpected 0.
#   tests/vm/run tests/vm/scenarios/scale-srq-loaded.sh [N [BINARY]]   (no load without vm.test)
exec bash "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/scale-srq.sh" "$@"
