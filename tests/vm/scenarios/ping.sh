#!/bin/bash
# VM scenario: the data path of the rdmacm fabric, with examples/qsm-ping speaking rping's wire
# protocol (send/recv + RDMA READ + RDMA WRITE), on soft-RoCE:
#   1. qsm-ping client  against rdma-core's rping server        (3 pings, payload validated; at
#      the default size and at rping's smallest, -S 23)
#   2. rping client -V  against the qsm-ping server             (3 pings, rping validates)
#   3. qsm-ping client  against the qsm-ping server, N connections in parallel (default 100)
#   tests/vm/run tests/vm/scenarios/ping.sh [N [QSM_PING_BINARY]]
# The binary: QSM_PING_BINARY, else $QSM_PING_BIN, else ./examples/qsm-ping (run from the top of
# the build tree). Every wait is bounded; exit 0 only if every check passed.
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

n=${1:-100}
bin=${2:-${QSM_PING_BIN:-./examples/qsm-ping}}
addr=${QSM_VM_ADDR:-192.0.2.1}
dev=${QSM_VM_DEV:-${QSM_VM_TRANSPORT:-rxe}0}
tmp=${TMPDIR:-/tmp}
out=${QSM_VM_OUT:-$tmp}
failures=0

step() { echo "== $*"; }
now() { echo "${EPOCHREALTIME/,/.}"; }
usec() { echo "${EPOCHREALTIME/[.,]/}"; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.0f", (b-a)*1000}'; }
die() {
	echo "FAIL: $*"
	exit 1
}
# check LABEL T0 COND-RESULT(0 ok) MESSAGE: one PASS/FAIL line with the check's wall time
verdict() {
	local label=$1 t0=$2 bad=$3
	shift 3
	if [[ $bad == 0 ]]; then
		echo "PASS: $label ($(ms "$t0" "$(now)") ms)"
	else
		echo "FAIL: $label ($(ms "$t0" "$(now)") ms): $*"
		failures=$((failures + 1))
		echo "   -- dmesg (tail)"
		dmesg | tail -n 15 | sed 's/^/   /'
	fi
}
show() { # LABEL FILE: a log, indented
	sed "s/^/   $1: /" "$2"
}

# LOG N: N queues drained by the DRAINED event (real flush of the drain marker), none by the
# drain timeout; prints the counts and the backend's completion statistics.
drained_ok() {
	local d t
	d=$(grep -c -- '--DRAINED--> ' "$1")
	t=$(grep -c -- '--TIMEOUT--> ' "$1")
	echo "   $(basename "$1"): $d queue(s) drained, $t timeout(s); $(grep -h '^qsm rdmacm:' "$1" | sed 's/^qsm rdmacm: //')"
	[[ $d == "$2" && $t == 0 ]]
}
# LOG: the whole trace of each queue (at most 5) whose last transition did not end in CLOSED, and
# the log's last lines that are not trace: what a failed run needs to be understood
unfinished() {
	echo "   -- $(basename "$1"): queues that did not close"
	awk '$1 == "qsm" && ($3 == "conn" || $3 == "passive") { last[$4] = $NF }
		END { for (i in last) if (last[i] != "CLOSED") print i }' "$1" | head -n 5 |
		while read -r id; do
			grep -F " $id " "$1" | sed "s/^/   $id: /"
		done
	grep -v '^qsm \|ping data' "$1" | tail -n 12 | sed 's/^/   | /'
}
export QSM_TRACE=1 QSM_RDMACM_STATS=1   # qsm-ping's transitions and completion statistics

[[ ${QSM_VM:-} == 1 ]] || die "not inside the test VM (run it with tests/vm/run)"
[[ -x $bin ]] || die "$bin not found or not executable (build it, or set QSM_PING_BIN)"
for t in rping rdma timeout; do
	command -v "$t" >/dev/null || die "$t not installed"
done
end=$(($(usec) + 10000000))
until rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE'; do
	(($(usec) < end)) || die "$dev is not ACTIVE"
	sleep 0.1
done

# ---- 1. qsm-ping client -> rping server ----------------------------------------------------
# $1: extra size arguments for both ends (empty: rping's default 64 B), $2: the label
qsm_to_rping() {
	local size=$1 label=$2 slog clog t0 t1 t2 t3 spid crc src np ns bad
	# shellcheck disable=SC2086 # $size is zero or two words on purpose
	step "1$label: $bin -c -a $addr -C 3 -v $size  against  rping -s -a $addr -C 3 -v $size"
	slog=$tmp/ping1$label-rping-server.log
	clog=$tmp/ping1$label-qsm-client.log
	t0=$(now)
	# shellcheck disable=SC2086
	timeout -s KILL 60 rping -s -a "$addr" -C 3 -v $size >"$slog" 2>&1 &
	spid=$!
	vm_wait_listen 7174 || echo "   (no LISTEN cm_id seen for port 7174; trying anyway)"
	t1=$(now)
	# shellcheck disable=SC2086
	timeout -s KILL 60 "$bin" -c -a "$addr" -C 3 -v $size >"$clog" 2>&1
	crc=$?
	t2=$(now)
	vm_wait_bounded "$spid" 30
	src=$?
	t3=$(now)
	show "qsm-ping client" "$clog"
	show "rping server" "$slog"
	np=$(grep -c '^ping data: rdma-ping-' "$clog")
	ns=$(grep -c '^server ping data: rdma-ping-' "$slog")
	echo "   timings: server listening $(ms "$t0" "$t1") ms, client $(ms "$t1" "$t2") ms, server exit $(ms "$t2" "$t3") ms later"
	echo "   client exit $crc, server exit $src; pings: client $np, server $ns"
	bad=0
	[[ $crc == 0 && $src == 0 && $np == 3 && $ns == 3 ]] || bad=1
	grep -q 'unexpected 0,' "$clog" || bad=1
	drained_ok "$clog" 1 || bad=1
	verdict "qsm-ping client -> rping server${size:+ ($size)}, 3 pings validated" "$t0" "$bad" \
		"client exit $crc, server exit $src, pings $np/$ns"
}
qsm_to_rping "" ""
# rping's smallest buffer (23 bytes, the longest ping header): qsm-ping takes rping's whole range
qsm_to_rping "-S 23" "-min"

# ---- 2. rping client -> qsm-ping server ----------------------------------------------------
step "2: rping -c -a $addr -C 3 -v -V  against  $bin -s -a $addr -v"
slog=$tmp/ping2-qsm-server.log
clog=$tmp/ping2-rping-client.log
: >"$clog"
t0=$(now)
timeout -s KILL 60 "$bin" -s -a "$addr" -v >"$slog" 2>&1 &
spid=$!
vm_wait_listen 7174 || echo "   (no LISTEN cm_id seen for port 7174; trying anyway)"
t1=$(now)
crc=1
end=$(($(usec) + 40000000))
for ((try = 1; try <= 10 && $(usec) < end; try++)); do
	kill -0 "$spid" 2>/dev/null || break
	timeout -s KILL 30 rping -c -a "$addr" -C 3 -v -V >"$clog" 2>&1
	crc=$?
	[[ $crc == 0 ]] && break
	echo "   rping client attempt $try exited $crc: $(tr '\n' ' ' <"$clog")"
	sleep 0.3
done
t2=$(now)
vm_wait_bounded "$spid" 30
src=$?
t3=$(now)
show "rping client" "$clog"
show "qsm-ping server" "$slog"
np=$(grep -c '^ping data: rdma-ping-' "$clog")
ns=$(grep -c '^server ping data: rdma-ping-' "$slog")
echo "   timings: server listening $(ms "$t0" "$t1") ms, client $(ms "$t1" "$t2") ms ($try attempt(s)), server exit $(ms "$t2" "$t3") ms later"
echo "   client exit $crc, server exit $src; pings: client $np, server $ns"
bad=0
drained_ok "$slog" 1 || bad=1
[[ $crc == 0 && $src == 0 && $np == 3 && $ns == 3 ]] || bad=1
grep -q 'connection closed after 3 pings' "$slog" || bad=1
grep -q 'unexpected 0,' "$slog" || bad=1
! grep -q 'data mismatch' "$clog" || bad=1
verdict "rping client (-V) -> qsm-ping server, 3 pings validated" "$t0" "$bad" \
	"client exit $crc, server exit $src, pings $np/$ns"

# ---- 3. qsm-ping x N in parallel ------------------------------------------------------------
port=7175
step "3: $bin -c -n $n -C 3  against  $bin -s -n $n (port $port)"
slog=$tmp/ping3-qsm-server.log
clog=$tmp/ping3-qsm-client.log
t0=$(now)
timeout -s KILL 150 "$bin" -s -a "$addr" -p $port -n "$n" -d "$out/qsm-ping-server.dot" >"$slog" 2>&1 &
spid=$!
vm_wait_listen $port || echo "   (no LISTEN cm_id seen for port $port; trying anyway)"
t1=$(now)
timeout -s KILL 120 "$bin" -c -a "$addr" -p $port -n "$n" -C 3 -d "$out/qsm-ping-client.dot" >"$clog" 2>&1
crc=$?
t2=$(now)
vm_wait_bounded "$spid" 30
src=$?
t3=$(now)
grep -v '^qsm ' "$clog" | sed 's/^/   qsm-ping client: /'
grep -v '^qsm ' "$slog" | sed 's/^/   qsm-ping server: /'
echo "   timings: server listening $(ms "$t0" "$t1") ms, client $(ms "$t1" "$t2") ms for $n connections x 3 pings, server exit $(ms "$t2" "$t3") ms later"
bad=0
drained_ok "$clog" "$n" || bad=1
drained_ok "$slog" "$n" || bad=1
[[ $crc == 0 && $src == 0 ]] || bad=1
grep -q "^qsm-ping: $n connection(s), 0 failed" "$clog" || bad=1
grep -q "^qsm-ping: $n connection(s), 0 failed" "$slog" || bad=1
grep -q 'unexpected 0,' "$clog" && grep -q 'unexpected 0,' "$slog" || bad=1
# the live pictures (qsm_ctx_write_dot(3)) each side wrote at exit: every machine, edges taken
for side in client server; do
	if [[ -s $out/qsm-ping-$side.dot ]] && grep -q '^digraph' "$out/qsm-ping-$side.dot"; then
		echo "   qsm-ping $side's picture: $(grep -c -- '->' "$out/qsm-ping-$side.dot") edges, $(grep -- '->' "$out/qsm-ping-$side.dot" | grep -c 'penwidth=2') taken"
	else
		echo "   no picture from the qsm-ping $side"
		bad=1
	fi
done
verdict "qsm-ping x $n connections in parallel, 3 pings each" "$t0" "$bad" \
	"client exit $crc, server exit $src"
((bad)) && for f in "$clog" "$slog"; do unfinished "$f"; done
cp "$tmp"/ping*.log "$out"/ 2>/dev/null

if ((failures)); then
	echo "FAIL: $failures of 4 checks failed"
	exit 1
fi
echo "PASS: all 4 ping checks"
