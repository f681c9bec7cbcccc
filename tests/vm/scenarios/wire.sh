#!/bin/bash
# qsm-vm: hosts 2
# qsm-vm: timeout 400
# VM scenario on two guests joined by a virtual wire (tests/vm/run --hosts 2): what only a
# network between two hosts shows, each step's edges asserted from the trace.
#   1. a serves, b connects across the wire: N connections (default 10) x 3 pings each way, the
#      data validated, every queue drained, no unexpected event on either host;
#   2. b connects to a port of a's where nothing listens: the attempt is refused by a's kernel
#      (RoCE: its CM answers REJ, REJECTED; iWARP: its TCP resets, the connect call fails) and
#      b's queue gives up after its 2 attempts (GIVE_UP --> FAILED), within seconds;
#   3. b connects to an address no host has (192.0.2.99, 2001:db8::99): no neighbour answers, so
#      the address is never resolved (ADDR_ERROR, or the step's timeout), and b gives up;
#   4. tc netem on both hosts' egress: 1% loss (4 connections x 50 pings), then 10% loss with
#      50 ms delay and reordering (2 x 10): every ping validated, no queue flaps, every
#      disconnect reaches the peer; both sides probe every 100 ms (keepalive_ms): no probe
#      fails (IPv4 only: it tests the transport);
#   5. a's server killed with SIGKILL under b's pings: b takes DISCONNECTED (a's kernel ends the
#      connection), is refused until a's new server is up, is LIVE again and finishes its pings.
# Both hosts run this script; QSM_VM_HOST says which one they are.
#   tests/vm/run --hosts 2 tests/vm/scenarios/wire.sh [N]
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

n=${1:-10}
bin=./examples/qsm-ping
me=${QSM_VM_ADDR:-}
peer=${QSM_VM_PEER:-}
host=${QSM_VM_HOST:-}
tmp=${TMPDIR:-/tmp}
out=${QSM_VM_OUT:-$tmp}
export QSM_TRACE=1 QSM_RDMACM_STATS=1
# qsm-ping's output and its trace share one log: stdbuf -oL keeps its lines whole (a ping's line
# cut by a trace line is not counted)


[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run --hosts 2)"
[[ -n $host && -n $peer && -n ${QSM_VM_SYNC:-} ]] || fail "two hosts only: tests/vm/run --hosts 2"
[[ -x $bin ]] || fail "$bin not found (make, from the top of the build tree)"
echo "host $host: $me on ${QSM_VM_NETDEV:-?} (${QSM_VM_DEV:-?}), peer $peer"

# ---- 0. the wire ------------------------------------------------------------------------------
vm_sync up 120 || fail "the peer never came up (120 s)"
step "0: the wire: ping $peer"
busybox ping -c 3 -W 2 "$peer" | tail -n 2 | sed 's/^/   /'
[[ ${PIPESTATUS[0]} == 0 ]] || fail "no IP path to the peer over the wire"

# ---- 1. connections across the wire -------------------------------------------------------------
port=7300
if [[ $host == a ]]; then
	step "1: a serves $n connections on $me port $port"
	slog=$tmp/wire1-server.log
	t0=$(usec)
	timeout -s KILL 150 stdbuf -oL "$bin" -s -a "$me" -p $port -n "$n" -d "$out/wire-server.dot" >"$slog" 2>&1 &
	spid=$!
	vm_wait_listen $port || echo "   (no LISTEN cm_id seen for port $port; going on)"
	vm_post listening1
	vm_wait_bounded "$spid" 140
	src=$?
	grep -v '^qsm ' "$slog" | sed 's/^/   server: /'
	echo "   server exit $src ($(ms_since "$t0") ms)"
	[[ $src == 0 ]] || vm_bad "the server exited $src"
	grep -q "^qsm-ping: $n connection(s), 0 failed" "$slog" || vm_bad "the server did not serve $n connections cleanly"
	grep -q 'unexpected 0,' "$slog" || vm_bad "the server saw an unexpected event"
	vm_identity "$slog"
	vm_expect "$slog" "NEW --CONNECT_REQUEST--> REQUESTED" "a connection request from the peer"
	vm_expect "$slog" "ACCEPTING --ESTABLISHED--> CONNECTED" "ESTABLISHED across the wire"
	vm_expect "$slog" "LIVE --DISCONNECTED--> DRAINING" "the peer's disconnect (DREQ or stream end) received"
	d=$(grep -c -- '--DRAINED--> CLOSED' "$slog")
	[[ $d == "$n" ]] || vm_bad "the server drained $d queues of $n"
	echo "   $d queue(s) drained; $(grep -h '^qsm rdmacm: posts' "$slog" | sed 's/^qsm rdmacm: //')"
else
	step "1: b connects $n queues to $peer port $port, 3 pings each"
	clog=$tmp/wire1-client.log
	vm_await listening1 60 || fail "a never listened"
	t0=$(usec)
	timeout -s KILL 120 stdbuf -oL "$bin" -c -v -a "$peer" -p $port -n "$n" -C 3 -d "$out/wire-client.dot" >"$clog" 2>&1
	crc=$?
	grep -v '^qsm \|ping data' "$clog" | sed 's/^/   client: /'
	echo "   client exit $crc ($(ms_since "$t0") ms), pings $(grep -c '^ping data: rdma-ping-' "$clog")"
	[[ $crc == 0 ]] || vm_bad "the client exited $crc"
	grep -q "^qsm-ping: $n connection(s), 0 failed" "$clog" || vm_bad "the client's $n connections did not all succeed"
	grep -q 'unexpected 0,' "$clog" || vm_bad "the client saw an unexpected event"
	vm_identity "$clog"
	[[ $(grep -c '^ping data: rdma-ping-' "$clog") == $((3 * n)) ]] || vm_bad "pings: expected $((3 * n))"
	vm_expect "$clog" "ADDR_RESOLVING --ADDR_RESOLVED--> ROUTE_RESOLVING" "the peer's address resolved (ARP/ND on the wire)"
	vm_expect "$clog" "CONNECTING --ESTABLISHED--> CONNECTED" "ESTABLISHED across the wire"
	vm_expect "$clog" "LIVE --DISCONNECT--> DISCONNECTING" "its own disconnect"
	d=$(grep -c -- '--DRAINED--> CLOSED' "$clog")
	[[ $d == "$n" ]] || vm_bad "the client drained $d queues of $n"
fi
vm_sync done1 150 || vm_bad "the peer did not finish step 1"

# give_up LOG SECS ADDR PORT: b's client connects to ADDR PORT (2 attempts) and must give up:
# exit 1, no unexpected event, the trace shown; el = its wall time in ms
give_up() {
	local t0 crc
	t0=$(usec)
	timeout -s KILL "$2" stdbuf -oL "$bin" -c -a "$3" -p "$4" -A 2 -C 1 >"$1" 2>&1
	crc=$?
	el=$(ms_since "$t0")
	grep -E -- '-->' "$1" | sed 's/^/   /'
	echo "   client exit $crc after $el ms: $(grep -h 'giving up\|connection(s)' "$1" | tr '\n' ' ')"
	[[ $crc == 1 ]] || vm_bad "the client exited $crc, expected 1 (gave up)"
	grep -q 'unexpected 0,' "$1" || vm_bad "an unexpected event"
	vm_identity "$1"
	vm_expect "$1" "--GIVE_UP[^>]*--> FAILED" "giving up after its attempts"
}

# ---- 2. no listener on the peer ----------------------------------------------------------------
if [[ $host == b ]]; then
	step "2: b connects to $peer port 7399, where nothing listens (2 attempts)"
	clog=$tmp/wire2-client.log
	give_up "$clog" 60 "$peer" 7399
	if [[ ${QSM_VM_TRANSPORT:-rxe} == siw ]]; then
		# iWARP: the TCP connect inside rdma_connect is refused: the call fails
		vm_expect "$clog" "CONNECTING --(CONNECT_ERROR|REJECTED)[^>]*--> RECONNECT_WAIT" "the refused connect"
	else
		vm_expect "$clog" "CONNECTING --REJECTED[^>]*--> RECONNECT_WAIT" "REJECTED by the peer's CM (no listener)"
	fi
	((el < 20000)) || vm_bad "giving up took $el ms (a refusal is immediate; 2 attempts, 100 ms apart)"
fi
vm_sync done2 90 || vm_bad "the peer did not finish step 2"

# ---- 3. an address no host has -----------------------------------------------------------------------
if [[ $host == b ]]; then
	nobody=192.0.2.99
	[[ $me == *:* ]] && nobody=2001:db8::99
	step "3: b connects to $nobody, which no host has (2 attempts)"
	clog=$tmp/wire3-client.log
	give_up "$clog" 90 "$nobody" 7300
	vm_expect "$clog" "ADDR_RESOLVING --(ADDR_ERROR|TIMEOUT)[^>]*--> RECONNECT_WAIT" "the address never resolved"
	! grep -q -- "--ADDR_RESOLVED-->" "$clog" || vm_bad "an address no host has was resolved"
fi
vm_sync done3 120 || vm_bad "the peer did not finish step 3"

# ---- 4. loss, delay and reordering on the wire ---------------------------------------------------
# lossy NAME NETEM PORT CONNS PINGS: each host's egress through tc netem NETEM; a serves CONNS
# connections, b pings PINGS times on each, validated: RC retries (rxe) or TCP (siw) absorb the
# loss, every ping arrives intact and no queue flaps (no DISCONNECTED, no error completion).
lossy() {
	local name=$1 netem=$2 port=$3 conns=$4 pings=$5 log rc t0
	step "$name: netem $netem on both hosts' egress; $conns connections x $pings pings"
	vm_sync "$name-start" 60 || vm_bad "the peer did not reach $name"
	# shellcheck disable=SC2086 # netem's words
	tc qdisc add dev "$QSM_VM_NETDEV" root netem $netem || { vm_bad "tc qdisc add ... netem $netem"; return; }
	vm_sync "$name-netem" 60 || vm_bad "the peer did not set up netem"
	log=$tmp/wire-$name-$host.log
	t0=$(usec)
	if [[ $host == a ]]; then
		timeout -s KILL 200 stdbuf -oL "$bin" -s -a "$me" -p "$port" -n "$conns" -K 100 >"$log" 2>&1 &
		local spid=$!
		vm_wait_listen "$port" || echo "   (no LISTEN cm_id seen for port $port; going on)"
		vm_post "$name-listening"
		vm_wait_bounded "$spid" 190
		rc=$?
	else
		vm_await "$name-listening" 60 || vm_bad "a never listened"
		timeout -s KILL 180 stdbuf -oL "$bin" -c -v -a "$peer" -p "$port" -n "$conns" -C "$pings" -K 100 >"$log" 2>&1
		rc=$?
	fi
	tc -s qdisc show dev "$QSM_VM_NETDEV" | grep -E 'netem|Sent|dropped' | head -n 2 | sed 's/^/   tc: /'
	tc qdisc del dev "$QSM_VM_NETDEV" root
	grep -v '^qsm \|ping data' "$log" | sed 's/^/   /'
	echo "   exit $rc after $(ms_since "$t0") ms"
	[[ $rc == 0 ]] || vm_bad "$name: exited $rc"
	grep -q "^qsm-ping: $conns connection(s), 0 failed" "$log" || vm_bad "$name: not every connection succeeded"
	grep -q 'unexpected 0,' "$log" || vm_bad "$name: an unexpected event"
	vm_identity "$log"
	if [[ $host == b ]]; then
		local got
		got=$(grep -c '^ping data: rdma-ping-' "$log")
		[[ $got == $((conns * pings)) ]] || vm_bad "$name: $got pings validated, expected $((conns * pings))"
		echo "   $got pings validated"
	fi
	# keepalive (-K 100) on both sides: probes through the lossy wire, none failed (a false alarm
	# would be a WC_ERROR, a flap)
	grep '^qsm rdmacm: keepalive' "$log" | sed 's/^/   /'
	grep -Eq '^qsm rdmacm: keepalive probes [1-9][0-9]*, failed 0$' "$log" ||
		vm_bad "$name: no keepalive probe, or one failed"
	# no flap: each queue LIVE once, none left LIVE by an error; the client's queues end by their
	# own disconnect (the server's by the client's, DISCONNECTED); LIVE --TIMEOUT--> LIVE is a probe
	local flap='LIVE --(WC_ERROR|QP_FATAL|UNREACHABLE)'
	[[ $host == b ]] && flap='LIVE --(DISCONNECTED|WC_ERROR|QP_FATAL|UNREACHABLE)'
	! grep -Eq -- "$flap" "$log" ||
		vm_bad "$name: a queue flapped: $(grep -Eo -- "${flap}[^>]*-->" "$log" | sort | uniq -c | tr '\n' ' ')"
	# (siw: a client's connect call may fail after the server's side established; the client
	# connects again, and the server counts that attempt apart: abandoned, LIVE once more)
	local ab
	ab=$(sed -n 's/^qsm-ping: \([0-9]*\) connection(s) closed before their client.s first message.*/\1/p' "$log")
	ab=${ab:-0}
	((ab)) && echo "   $ab connection(s) abandoned by the client's failed connect call (CONNECT_ERROR there), connected again"
	[[ $(grep -c -- '--READY--> LIVE' "$log") == $((conns + ab)) ]] ||
		vm_bad "$name: $(grep -c -- '--READY--> LIVE' "$log") times LIVE for $conns queues (and $ab abandoned)"
	vm_expect "$log" "CONNECTED --READY--> LIVE" "LIVE through the lossy wire, once a queue"
	# every disconnect reached the peer: the client's DREQ answered (not its timer: a cm_id
	# destroyed while its DREQ is resent cancels the resends, and the server never hears), the
	# server's queues each told DISCONNECTED
	local want='DISCONNECTING --DISCONNECTED--> CLOSING'
	[[ $host == a ]] && want='LIVE --DISCONNECTED--> DRAINING'
	[[ $host == a ]] || ab=0
	[[ $(grep -c -- "$want" "$log") == $((conns + ab)) ]] ||
		vm_bad "$name: $(grep -c -- "$want" "$log") of $conns queues (and $ab abandoned) took $want"
	vm_expect "$log" "$want" "every disconnect through the lossy wire"
	vm_sync "$name-done" 200 || vm_bad "the peer did not finish $name"
}
# loss tests the transport, not the address family: IPv4 only (time)
if [[ $me != *:* ]]; then
	lossy loss1 "loss 1%" 7310 4 50
	lossy loss10 "loss 10% delay 50ms 10ms reorder 25% 50%" 7311 2 10
fi

# ---- 5. the server's process killed (SIGKILL) under the client's pings ---------------------------
# Each prints its fabric's check of its cold CQs (QSM_RDMACM_STATS): whether a CQ held completions
# no notification announced (soft-iWARP loses some; the fabric's check a second after its last
# posts finds them).
cold_checks() {
	local line
	line=$(grep -o 'CQs waiting for their events polled anyway.*' "$2")
	echo "   $1: ${line:-no fabric statistics (the process did not end by itself)}"
}
# b pings 2,000 times on one connection (-A 20: attempts to spare); once it is LIVE, a kills its
# server with SIGKILL: a's kernel still ends the connection (its CM sends the DREQ, its TCP the
# FIN), so b takes DISCONNECTED, then tries again and is refused (nothing listens) until a's
# second server is up; b is LIVE again and finishes its pings.
port=7320
if [[ $host == a ]]; then
	step "5: a serves on port $port; SIGKILL to the server while b pings; a new server 2 s later"
	log=$tmp/wire5-server1.log
	timeout -s KILL 60 stdbuf -oL "$bin" -s -a "$me" -p $port -n 1 >"$log" 2>&1 &
	spid=$!
	vm_wait_listen $port || echo "   (no LISTEN cm_id seen for port $port; going on)"
	vm_post listening5
	vm_await live5 60 || vm_bad "b never said it was LIVE"
	# the server itself (timeout's child: stdbuf and libtool's wrapper exec it), not timeout
	pkill -KILL -P "$spid" || vm_bad "no server process to kill"
	wait "$spid" 2>/dev/null
	echo "   server 1 killed; $(grep -c -- '--READY--> LIVE' "$log") queue(s) LIVE in its trace"
	sleep 2
	log=$tmp/wire5-server2.log
	timeout -s KILL 120 stdbuf -oL "$bin" -s -a "$me" -p $port -n 1 >"$log" 2>&1 &
	spid=$!
	vm_wait_bounded "$spid" 110 "server 2"
	rc=$?
	grep -v '^qsm \|ping data' "$log" | sed 's/^/   server 2: /'
	cold_checks "server 2" "$log"
	[[ $rc == 0 ]] || vm_bad "server 2 exited $rc"
	grep -q '^qsm-ping: 1 connection(s), 0 failed' "$log" || vm_bad "server 2 did not serve the reconnected queue"
	vm_expect "$log" "NEW --CONNECT_REQUEST--> REQUESTED" "the client's queue back, at the new server"
else
	step "5: b pings a 2,000 times; a's server is killed under it, a new one comes up"
	log=$tmp/wire5-client.log
	vm_await listening5 60 || fail "a never listened (step 5)"
	timeout -s KILL 120 stdbuf -oL "$bin" -c -v -a "$peer" -p $port -A 20 -C 2000 >"$log" 2>&1 &
	cpid=$!
	wait_live() { grep -q -- '--READY--> LIVE' "$log"; }
	for ((i = 0; i < 200; i++)); do wait_live && break; sleep 0.05; done
	vm_post live5
	vm_wait_bounded "$cpid" 115 client
	rc=$?
	grep -v '^qsm \|ping data' "$log" | sed 's/^/   client: /'
	cold_checks client "$log"
	# qsm-ping counts a connection failed once it lost its QP, reconnect or not (exit 1): the
	# edges and the pings say what happened
	echo "   client exit $rc; $(grep -c '^ping data: rdma-ping-' "$log") pings validated; its edges, in order:"
	vm_edges "$log"
	vm_expect "$log" "CONNECTING --(REJECTED|CONNECT_ERROR)[^>]*--> RECONNECT_WAIT" "refused while no server listened"
	grep -q 'unexpected 0,' "$log" || vm_bad "an unexpected event"
	vm_identity "$log"
	vm_expect "$log" "LIVE --DISCONNECTED--> DRAINING" "the killed server's connection ended by its kernel"
	vm_expect "$log" "--READY--> LIVE" "LIVE, then LIVE again at the new server"
	[[ $(grep -c -- '--READY--> LIVE' "$log") == 2 ]] || vm_bad "LIVE $(grep -c -- '--READY--> LIVE' "$log") times, expected 2"
	[[ $(grep -c '^ping data: rdma-ping-' "$log") == 2000 ]] || vm_bad "not all 2,000 pings validated"
fi
vm_sync done5 130 || vm_bad "the peer did not finish step 5"

cp "$tmp"/wire*.log "$out"/ 2>/dev/null
if ((vm_failures)); then
	echo "FAIL: host $host: $vm_failures check(s) failed"
	exit 1
fi
echo "PASS: host $host: every wire check"
