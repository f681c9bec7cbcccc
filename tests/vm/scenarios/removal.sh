#!/bin/bash
# VM scenario: device removal with N live queues on the rdmacm fabric (tests/vm/removal.c).
#   tests/vm/run tests/vm/scenarios/removal.sh [N [BINARY]]
# The binary: BINARY, else $QSM_REMOVAL_BIN, else ./tests/vm/removal (built by make; run from
# the top of the build tree). tests/vm/run starts the guest with a clean environment, so from
# the host pass the binary as an argument; the variable is for running this script by hand. The transition trace goes to $QSM_VM_OUT/removal.trace; its
# tail is printed when the test fails.
set -u

n=${1:-100}
bin=${2:-${QSM_REMOVAL_BIN:-./tests/vm/removal}}
dev=${QSM_VM_DEV:-rxe0}
out=${QSM_VM_OUT:-/tmp}
trace=$out/removal.trace

fail() {
	echo "FAIL: $*"
	exit 1
}

[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
[[ -x $bin ]] || fail "$bin not found or not executable (build it, or set QSM_REMOVAL_BIN)"
command -v rdma >/dev/null || fail "rdma (iproute2) not installed"

# rxe0 must be up before the test starts.
for ((i = 0; i < 100; i++)); do
	rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE' && break
	sleep 0.1
done
rdma link show "$dev/1" | grep -q 'state ACTIVE' || fail "$dev is not ACTIVE"

echo "== $bin $n (trace: $trace)"
timeout --signal=KILL 240 "$bin" "$n" "$trace"
rc=$?
if [[ $rc != 0 ]]; then
	echo "== last 60 trace lines"
	tail -n 60 "$trace" 2>/dev/null
	echo "== rdma link show"
	rdma link show
	echo "== dmesg (tail)"
	dmesg | tail -n 30
	fail "removal test exited $rc"
fi
echo "   trace: $(wc -l <"$trace") transitions"
# The evidence, per queue: its DEVICE_REMOVAL edge, and the reconnect that followed.
echo "== trace: every client queue's DEVICE_REMOVAL edge"
grep -E '^client .* --DEVICE_REMOVAL' "$trace"
echo "== trace: every client queue's way back to LIVE (the last CONNECTED --READY--> LIVE of each)"
grep -E '^client .* CONNECTED --READY--> LIVE' "$trace" | awk '{ last[$4] = $0 } END { for (q in last) print last[q] }' | sort -k4,4V
removed=$(grep -cE '^client .* LIVE --DEVICE_REMOVAL(.*)--> RECONNECT_WAIT' "$trace")
relive=$(grep -E '^client .* CONNECTED --READY--> LIVE' "$trace" | awk '{ n[$4]++ } END { c = 0; for (q in n) if (n[q] >= 2) c++; print c }')
echo "   trace: $removed queues took LIVE --DEVICE_REMOVAL--> RECONNECT_WAIT, $relive reached LIVE again"
[[ $removed == "$n" && $relive == "$n" ]] || fail "trace shows $removed removals and $relive reconnects, want $n each"
rdma link show
echo "PASS: removal with $n live queues, re-add and reconnect"
