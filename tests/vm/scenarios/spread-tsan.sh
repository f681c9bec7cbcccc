#!/bin/bash
# qsm-vm: transports rxe (the races TSan looks for are the library's threads', not the transport's: spread.sh runs on both)
# qsm-vm: families 4 (the spread is the runtime's, not the address family's)
# qsm-vm: timeout 600
# VM scenario: spread.sh's test (tests/vm/spread.c: 64 client queues, their passive queues on 2
# worker threads' ctxs, echoed there, `rdma link delete` under them, the re-add) with the library
# and the test built -fsanitize=thread (tests/vm/spread-tsan, which make check builds when
# configure's TSAN_CC can): any data race ThreadSanitizer reports ends it (halt_on_error, exit
# 66) and fails it.  Where configure found that CC cannot build -fsanitize=thread programs there
# is no such binary: it says so and passes, as `make tsan` does.
set -u
bin=./tests/vm/spread-tsan
if [[ ! -e $bin ]]; then
	echo "NOTE: $bin was not built (configure: CC cannot build -fsanitize=thread programs): nothing run"
	echo "PASS: spread-tsan: not run (no TSan)"
	exit 0
fi
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}"
exec bash "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/spread.sh" "${1:-64}" "$bin"
