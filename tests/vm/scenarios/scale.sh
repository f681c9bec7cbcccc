#!/bin/bash
# qsm-vm: transports rxe siw (siw: 2,000 per side need the guest's RLIMIT_MEMLOCK raised, guest/init: siw pins against it even for root)
# qsm-vm: families 4 6:siw (IPv6 on one transport, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# qsm-vm: timeout 600
# VM scenario: 2,000 queues per side, each side one ctx, default caps (64/64 WRs), through device
# removal and re-add (tests/vm/removal.c with N=2000): more QPs than one CQ can serve (rxe's
# max_cqe 32768 holds 252 of them), so each fabric's device needs a pool of several CQs.
# removal.c asserts and prints spurious teardowns 0, completions lost 0, unexpected 0.
#   tests/vm/run tests/vm/scenarios/scale.sh [N [BINARY]]
# The binary: BINARY, else $QSM_REMOVAL_BIN, else ./tests/vm/removal (run from the top of the
# build tree). Its output, with the fabrics' QSM_RDMACM_STATS lines, goes to $QSM_VM_OUT/scale.log.
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

vm_setup scale 2000 QSM_REMOVAL_BIN "${1:-2000}" "${2:-${QSM_REMOVAL_BIN:-./tests/vm/removal}}"
vm_run_test scale 540 --link-show
vm_removal_trace_checks --count
# Each fabric (client, then server) prints its CQ pool at destroy: more than one CQ each.
pools=$(grep -oE 'CQ pool: at most [0-9]+ CQs' "$log" | grep -oE '[0-9]+' | tr '\n' ' ')
echo "   CQ pools (client, server): at most ${pools% } CQs on the device"
npools=0
for p in $pools; do
	npools=$((npools + 1))
	((p > 1)) || fail "a fabric served $n queues with $p CQ(s): want a pool of more than one"
done
((npools == 2)) || fail "want 2 'CQ pool' lines (QSM_RDMACM_STATS) in $log, found $npools"
# The churn, reported, not judged: the removal frees every CQ with the device, so each pool
# creates its CQs twice at least; reconnects beyond that reuse the CQs the pool kept.
churn=$(sed -nE 's/.*CQ pool: .*created ([0-9]+), freed ([0-9]+) \(([0-9]+) after.*reused empty ([0-9]+) times.*/created \1, freed \2 (\3 idle), reused \4/p' "$log" |
	tr '\n' ';')
churn=${churn%;}
echo "   CQ churn (client; server): ${churn//;/; }"
echo "PASS: $n live queues per side on pools of ${pools% } CQs, removal, re-add and reconnect"
