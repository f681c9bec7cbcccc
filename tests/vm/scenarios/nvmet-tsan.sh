#!/bin/bash
# qsm-vm: timeout 900
# qsm-vm: smp 4 (the kernel host makes one I/O queue of each kind per CPU)
# qsm-vm: mem 3G (TSan's shadow memory beside the target's)
# qsm-vm: transports rxe (the races TSan looks for are the target's threads', not the transport's)
# qsm-vm: families 4 (the threads are not the address family's)
# VM scenario: nvmet-hosts.sh's test, smaller (2 hosts x 4 I/O queues, then 8 x 4), on
# examples/nvmet/qsm-nvmet built -fsanitize=thread with the library (qsm-nvmet-tsan, which make
# check builds when configure's TSAN_CC can), on 2 threads (-T 2): each host's queues spread
# over both, its controller shared by them, its I/O queues ended from the admin queue's thread,
# the Keep Alive Timers on both.  Any data race ThreadSanitizer reports ends the target
# (halt_on_error, exit 66) and fails it.  Where configure found that CC cannot build
# -fsanitize=thread programs there is no such binary: it says so and passes, as `make tsan` does.
set -u
bin=./examples/nvmet/qsm-nvmet-tsan
if [[ ! -e $bin ]]; then
	echo "NOTE: $bin was not built (configure: CC cannot build -fsanitize=thread programs): nothing run"
	echo "PASS: nvmet-tsan: not run (no TSan)"
	exit 0
fi
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}"
exec bash "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/nvmet-hosts.sh" 2 4 8 4 "$bin" 4096 2
