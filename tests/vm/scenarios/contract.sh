#!/bin/bash
# qsm-vm: transports rxe siw
# qsm-vm: families 4 6:siw (IPv6 on one transport, for make check's time: rxe's run is 130 s, its timewaits; QSM_VM_EVERY_FAMILY=1 runs it on both)
# VM scenario: the fabric contract (tests/contract.c) on the rdmacm fabric over soft-RoCE or
# soft-iWARP (tests/vm/contract.c): the cases make check runs on the sim, here against the kernel's
# rdma_cm; on siw each case asserts iWARP's facts where they differ (tests/vm/README.md).
#   tests/vm/run tests/vm/scenarios/contract.sh [BINARY]
# The binary: BINARY, else $QSM_CONTRACT_BIN, else ./tests/vm/contract (run from the top of the
# build tree).  Every wait in the cases is bounded; the whole run is killed after 600 s.
set -u
# tests/vm/run copies only this file into the guest: the library comes from the (read-only) host tree.
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup contract 1 QSM_CONTRACT_BIN 1 "${1:-}"
echo "== $bin (Check output; CK_VERBOSITY=verbose names every case)"
CK_VERBOSITY=verbose timeout --signal=KILL 600 "$bin"
rc=$?
if [[ $rc != 0 ]]; then
	echo "== dmesg (tail)"
	dmesg | tail -n 30
	fail "contract on rdmacm exited $rc"
fi
echo "PASS: the fabric contract on rdmacm"
