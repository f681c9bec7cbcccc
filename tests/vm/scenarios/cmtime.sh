#!/bin/bash
# qsm-vm: timeout 900
# qsm-vm: families 4 6:siw (IPv6 on one transport, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# VM scenario: a connect storm of N (default 1,000) connections, rdma-core's cmtime against
# rdma-qsm, side by side in one boot, alternating, ROUNDS (default 3) rounds each.
#   cmtime: its server (-b) and client (-s) processes; its time to connect N is the sum of its
#           client's steps up to and including "connect" (create id, bind addr, resolve addr,
#           resolve route, create qp, connect: each done for all N before the next starts).
#   qsm:    tests/vm/removal with QSM_REMOVAL_ROUND=connect: N queues and a listener in one
#           process, from qsm_conn_connect() of all to all LIVE (resolve, route, QP, connect,
#           accept, READY), then an exchange each, 6 s LIVE (past connect_ms: a timeout racing
#           the CM would close queues there) and a close; it asserts spurious teardowns 0,
#           completions lost 0, unexpected 0.
# Prints each round's times, then `ratio connect_1000 qsm/cmtime X.XX` (medians; design <= 1.0)
# and fails if any connection failed on either side (cmtime's client exits non-zero on any error,
# its server exits at once, where it would otherwise serve until it is stopped).
#   tests/vm/run tests/vm/scenarios/cmtime.sh [N [ROUNDS]]
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

# On siw the default N is 64: cmtime's client (two CQs and a completion channel of its own per
# connection) gets no QP past its 71st there ('failure creating qp: No such file or directory',
# the same 71 at 250 and at 1,000 connections), while rdma-qsm (its CQ pool) holds 2,000 per
# side on siw (scale.sh); the comparison is made where the baseline works.
if [[ ${QSM_VM_TRANSPORT:-rxe} == siw ]]; then
	n=${1:-64}
else
	n=${1:-1000}
fi
rounds=${2:-3}
addr=${QSM_VM_ADDR:-192.0.2.1}
bin=${QSM_REMOVAL_BIN:-./tests/vm/removal}
out=${QSM_VM_OUT:-/tmp}
[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
command -v cmtime >/dev/null || fail "cmtime (rdmacm-utils) not installed"
[[ -x $bin ]] || fail "$bin not found (build it first)"

# cmtime's client output: the total ms of each step up to the connect, summed.
cmtime_connect_s() {
	awk -F: '/^(create id|bind addr|resolve addr|resolve route|create qp|connect) *:/ {
		split($2, f, " "); s += f[1]; k++ }
		END { if (k < 5) exit 1; printf "%.3f", s / 1000 }' "$1"
}

median() {
	tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
		else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

cm_times=
qsm_times=
for r in $(seq 1 "$rounds"); do
	port=$((7600 + r))
	echo "== round $r: cmtime, $n connections (port $port)"
	timeout --signal=KILL 300 cmtime -b "$addr" -p "$port" -c "$n" >"$out/cmtime-server.$r.log" 2>&1 &
	spid=$!
	vm_wait_listen "$port" || fail "cmtime's server is not listening on $port"
	timeout --signal=KILL 300 cmtime -s "$addr" -p "$port" -c "$n" >"$out/cmtime-client.$r.log" 2>&1
	crc=$?
	# cmtime's server serves until it is stopped; it exits at once on any failed connection
	# (exit(EXIT_FAILURE) on an error event): still running now means none failed
	if kill -0 "$spid" 2>/dev/null; then
		kill -TERM "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		src=0
	else
		wait "$spid"
		src=$?
	fi
	sed 's/^/   cmtime client| /' "$out/cmtime-client.$r.log"
	((crc == 0 && src == 0)) || { sed 's/^/   cmtime server| /' "$out/cmtime-server.$r.log";
		fail "cmtime round $r: client exit $crc, server exit $src (a connection failed)"; }
	# cmtime's client goes on (and exits 0) after a step that failed for some connections:
	# its figure then times fewer than n connections, no baseline at all
	nf=$(grep -ci 'fail' "$out/cmtime-client.$r.log")
	first=$(grep -i -m1 'fail' "$out/cmtime-client.$r.log")
	((nf == 0)) || fail "cmtime round $r: its client reported $nf failures (first: $first): its time is not of $n connections"
	t=$(cmtime_connect_s "$out/cmtime-client.$r.log") || fail "cannot read cmtime's steps"
	echo "   cmtime: $n connections in $t s"
	cm_times="$cm_times $t"

	echo "== round $r: rdma-qsm, $n queues (port $((port + 100)))"
	QSM_REMOVAL_ROUND=connect QSM_REMOVAL_PORT=$((port + 100)) timeout --signal=KILL 300 \
		"$bin" "$n" "$out/cmtime-qsm.$r.trace" >"$out/cmtime-qsm.$r.log" 2>&1
	qrc=$?
	grep -E '^(ok|FAIL) *:|^== summary' "$out/cmtime-qsm.$r.log" | sed 's/^/   qsm| /'
	((qrc == 0)) || fail "rdma-qsm round $r exited $qrc"
	t=$(sed -n 's/^== summary: N=[0-9]* connect \([0-9.]*\) s.*/\1/p' "$out/cmtime-qsm.$r.log")
	[[ -n $t ]] || fail "no connect time in $out/cmtime-qsm.$r.log"
	echo "   rdma-qsm: $n queues LIVE in $t s"
	qsm_times="$qsm_times $t"
done
cm=$(echo "$cm_times" | median)
qsm=$(echo "$qsm_times" | median)
echo "   connect $n: cmtime $cm_times s; rdma-qsm $qsm_times s (medians $cm, $qsm)"
echo "ratio connect_$n qsm/cmtime $(awk -v a="$qsm" -v b="$cm" 'BEGIN { printf "%.2f", a / b }')"
echo "PASS: $n connections, $rounds rounds each side, no failed connection on either"
