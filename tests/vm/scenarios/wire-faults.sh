#!/bin/bash
# qsm-vm: hosts 2
# qsm-vm: timeout 800
# qsm-vm: transports rxe siw
# qsm-vm: families 4 6:rxe (IPv6 on one transport, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# VM scenario on two guests joined by a virtual wire (tests/vm/run --hosts 2): the faults of a
# network and of a host that only two hosts show, each step's edges asserted from the trace.
#   1. partitions: b pings a on one connection; the wire drops every packet both ways (tc netem
#      loss 100% on both hosts' egress), then heals.  6 s: the RC retries absorb it, no edge on
#      either side.  30 s, longer than the RC retry limit: b's QP gives up (an error completion:
#      WC_ERROR, never DISCONNECTED: nothing crosses the wire), drains and tries again; its
#      attempt goes through once the wire heals, and its pings finish.  a's old queue, idle,
#      learns it from its keepalive probe (keepalive_ms), which fails the same way, and closes;
#   2. device removal on one host: b's RDMA device is deleted and added again under its pings;
#      b's queues take DEVICE_REMOVAL, wait in the gap and come back; a's other queues (a client
#      of its own, on a's device) see nothing: LIVE once, every ping, no error edge;
#   3. a's guest powered off under b's pings (no process exits, no DREQ, no FIN): b's QP gives up
#      (WC_ERROR after the RC retries; no DISCONNECTED ever); then b takes over a's address, as
#      the other half of an HA pair would, and serves there: b's queue reconnects to the new
#      server and finishes its pings.  Last: a is gone after it.
# On siw (iWARP) the connection is a TCP connection: TCP's retransmissions, not the RC retries,
# absorb a cut or give up, after tcp_retries2's bound (15 by default: some 15 minutes).  The
# scenario sets it to 6 on both hosts (~25 s, what an iWARP operator tunes for a failover
# budget), so the short cut is absorbed and the long one is not, as on rxe.  The loss then shows
# as the TCP connection's abort: iw_cm's CLOSE (DISCONNECTED), or a flushed WR's error
# completion (WC_ERROR), whichever comes first -- never a DREQ from the peer, which no packet
# carried.
# Both hosts run this script; QSM_VM_HOST says which one they are.
#   tests/vm/run --hosts 2 tests/vm/scenarios/wire-faults.sh
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

bin=./examples/qsm-ping
me=${QSM_VM_ADDR:-}
peer=${QSM_VM_PEER:-}
host=${QSM_VM_HOST:-}
netdev=${QSM_VM_NETDEV:-eth0}
transport=${QSM_VM_TRANSPORT:-rxe}
dev=${QSM_VM_DEV:-${transport}0}
tmp=${TMPDIR:-/tmp}
out=${QSM_VM_OUT:-$tmp}
export QSM_TRACE=1 QSM_RDMACM_STATS=1

pings_of() { grep -c '^ping data: rdma-ping-' "$1"; }
# wait_edge LOG PATTERN SECS: until LOG's trace shows an edge matching PATTERN (bounded)
wait_edge() {
	local end=$(($(usec) + $3 * 1000000))
	until grep -Eq -- "$2" "$1" 2>/dev/null; do
		(($(usec) < end)) || return 1
		sleep 0.05
	done
}
# wait_pings LOG N SECS: until LOG shows N validated pings (bounded)
wait_pings() {
	local end=$(($(usec) + $3 * 1000000))
	until (($(pings_of "$1") >= $2)); do
		(($(usec) < end)) || return 1
		sleep 0.05
	done
}
# server PORT CONNS SECS LOG: qsm-ping's server in the background (spid)
server() {
	timeout -s KILL "$3" stdbuf -oL "$bin" -s -a "$me" -p "$1" -n "$2" >"$4" 2>&1 &
	spid=$!
	vm_wait_listen "$1" || echo "   (no LISTEN cm_id seen for port $1; going on)"
}
# client ADDR PORT CONNS PINGS ATTEMPTS SECS LOG [OPTION...]: qsm-ping's client in the
# background (cpid)
client() {
	timeout -s KILL "$6" stdbuf -oL "$bin" -c -v -a "$1" -p "$2" -n "$3" -C "$4" -A "$5" "${@:8}" >"$7" 2>&1 &
	cpid=$!
}
# netem_all NETEM: every packet this host sends goes through tc netem NETEM ("" removes it)
netem_all() {
	tc qdisc del dev "$netdev" root 2>/dev/null
	# shellcheck disable=SC2086 # netem's words
	[[ -z $1 ]] || tc qdisc add dev "$netdev" root netem $1
}
# no_flap LOG WHAT [server]: no error edge out of LIVE in LOG (a client's queues: nor a
# DISCONNECTED; a server's end by its client's DISCONNECTED)
no_flap() {
	local flap='LIVE --(WC_ERROR|QP_FATAL|UNREACHABLE|DEVICE_REMOVAL|PORT_ERR)'
	[[ ${3:-} == server ]] || flap='LIVE --(DISCONNECTED|WC_ERROR|QP_FATAL|UNREACHABLE|DEVICE_REMOVAL|PORT_ERR)'
	! grep -Eq -- "$flap" "$1" ||
		vm_bad "$2: $(grep -Eo -- "${flap}[^>]*-->" "$1" | sort | uniq -c | tr '\n' ' ')"
}

[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run --hosts 2)"
[[ -n $host && -n $peer && -n ${QSM_VM_SYNC:-} ]] || fail "two hosts only: tests/vm/run --hosts 2"
[[ -x $bin ]] || fail "$bin not found (make, from the top of the build tree)"
echo "host $host: $me on $netdev ($dev), peer $peer"
vm_sync up 120 || fail "the peer never came up (120 s)"
busybox ping -c 2 -W 2 "$peer" >/dev/null || fail "no IP path to the peer over the wire"
# the edge a connection's loss takes on this transport (the header)
lost='WC_ERROR'
if [[ $transport == siw ]]; then
	sysctl -qw net.ipv4.tcp_retries2=6 || fail "cannot set net.ipv4.tcp_retries2"
	lost='(WC_ERROR|DISCONNECTED)'
	echo "siw: net.ipv4.tcp_retries2=6 (TCP gives up after ~25 s); a loss is LIVE --$lost"
fi

# ---- 1. partitions: one the RC retries absorb, one they do not ---------------------------------
# cut NAME SECS PORT: b pings a 2,000 times on one connection; 100 pings in, both hosts drop
# everything they send for SECS s, then the wire heals.  a's server and b's client probe their
# queues every 2 s (keepalive_ms, qsm-ping -K): rping's protocol leaves one side waiting for the
# other's message, with nothing of its own on the wire.  short: the RC
# retries outlast the cut: nothing happens to either queue but a pause.  long: each side's QP
# gives up (a WR's or the probe's error completion: WC_ERROR, never DISCONNECTED: nothing
# crossed the wire); b drains and tries again until the wire heals; a's old queue closes; a
# serves b again.
cut() {
	local name=$1 secs=$2 port=$3 log rc t0 conns=1
	[[ $name == long ]] && conns=2
	if [[ $host == a ]]; then
		step "1 ($name): a serves on port $port (-K 2000); the wire is cut for $secs s under b's pings"
		log=$tmp/faults1-$name-server.log
		timeout -s KILL 200 stdbuf -oL "$bin" -s -a "$me" -p "$port" -n $conns -K 2000 >"$log" 2>&1 &
		spid=$!
		vm_wait_listen "$port" || echo "   (no LISTEN cm_id seen for port $port; going on)"
		vm_post "listening-$name"
		vm_await "cut-$name" 90 || vm_bad "b never cut the wire"
		netem_all "loss 100%"
		t0=$(usec)
		vm_await "healed-$name" 90 || vm_bad "b never healed the wire"
		netem_all ""
		vm_wait_bounded "$spid" 180
		rc=$?
		grep -v '^qsm \|ping data' "$log" | sed 's/^/   server: /'
		grep '^qsm rdmacm: keepalive' "$log" | sed 's/^/   server: /'
		echo "   server exit $rc; its edges, in order:"
		vm_edges "$log"
		grep -q "^qsm-ping: $conns connection(s)" "$log" || vm_bad "the server did not serve $conns connection(s)"
		grep -q 'unexpected 0,' "$log" || vm_bad "the server saw an unexpected event"
		vm_identity "$log"
		vm_expect "$log" "LIVE --TIMEOUT--> LIVE" "keepalive probes"
		if [[ $name == short ]]; then
			[[ $rc == 0 ]] || vm_bad "the server exited $rc"
			no_flap "$log" "the server's queue through a cut the RC retries absorb" server
		else
			vm_expect "$log" "LIVE --${lost}[^>]*--> DRAINING" "its probe failed (siw: TCP gave up): the old queue's peer is gone"
			# the new queue's end (and on siw the old one's, if TCP's abort came first)
			[[ $transport == siw ]] || [[ $(grep -c -- 'LIVE --DISCONNECTED--> DRAINING' "$log") == 1 ]] ||
				vm_bad "DISCONNECTED $(grep -c -- 'LIVE --DISCONNECTED--> DRAINING' "$log") times, expected once (the new queue's end)"
		fi
	else
		step "1 ($name): b pings a 2,000 times on port $port (-K 2000); 100 pings in, the wire is cut for $secs s"
		log=$tmp/faults1-$name-client.log
		vm_await "listening-$name" 60 || fail "a never listened"
		client "$peer" "$port" 1 2000 20 200 "$log" -K 2000
		wait_pings "$log" 100 60 || vm_bad "b's first 100 pings never came"
		netem_all "loss 100%"
		vm_post "cut-$name"
		t0=$(usec)
		# how long the RC retries (or the probe's) take to give up: b's queue leaves LIVE
		if [[ $name == long ]] && wait_edge "$log" "LIVE --$lost" "$secs"; then
			echo "   b's queue left LIVE $(ms_since "$t0") ms into the cut"
		fi
		while (($(ms_since "$t0") < secs * 1000)); do sleep 0.1; done
		netem_all ""
		vm_post "healed-$name"
		echo "   the wire healed after $(ms_since "$t0") ms; $(pings_of "$log") pings by then"
		vm_wait_bounded "$cpid" 190
		rc=$?
		grep -v '^qsm \|ping data' "$log" | sed 's/^/   client: /'
		grep '^qsm rdmacm: keepalive' "$log" | sed 's/^/   client: /'
		echo "   client exit $rc, $(ms_since "$t0") ms after the cut; its edges, in order:"
		vm_edges "$log"
		[[ $(pings_of "$log") == 2000 ]] || vm_bad "$(pings_of "$log") of 2,000 pings validated"
		grep -q 'unexpected 0,' "$log" || vm_bad "the client saw an unexpected event"
		vm_identity "$log"
		[[ $transport == siw ]] || ! grep -q -- 'LIVE --DISCONNECTED-->' "$log" || vm_bad "DISCONNECTED through a cut wire"
		if [[ $name == short ]]; then
			[[ $rc == 0 ]] || vm_bad "the client exited $rc"
			no_flap "$log" "the client's queue through a cut the RC retries absorb"
			[[ $(grep -c -- '--READY--> LIVE' "$log") == 1 ]] || vm_bad "LIVE $(grep -c -- '--READY--> LIVE' "$log") times, expected once"
		else
			vm_expect "$log" "LIVE --${lost}[^>]*--> DRAINING" "its QP gave up on the cut wire (RC retries; siw: TCP's)"
			vm_expect "$log" "DRAINING --DRAINED[^>]*--> RECONNECT_WAIT" "drained, then the gap"
			[[ $(grep -c -- '--READY--> LIVE' "$log") == 2 ]] || vm_bad "LIVE $(grep -c -- '--READY--> LIVE' "$log") times, expected 2"
		fi
	fi
	vm_sync "done-$name" 200 || vm_bad "the peer did not finish step 1 ($name)"
}
cut short 6 7330
cut long 30 7331

# ---- 2. device removal on one host ---------------------------------------------------------------
# a serves 2 queues of its own client and b's 2 (twice: b's come back); b deletes its device
# 1 s into its pings and adds it again 2 s later.
port=7340
if [[ $host == a ]]; then
	step "2: a serves on port $port: 2 queues of its own and b's 2; b's device removed under them"
	log=$tmp/faults2-server.log
	clog=$tmp/faults2-local.log
	server $port 6 180 "$log"
	vm_post listening2
	client "$me" $port 2 1500 5 170 "$clog"
	lpid=$cpid
	vm_wait_bounded "$lpid" 170
	lrc=$?
	vm_wait_bounded "$spid" 30
	rc=$?
	grep -v '^qsm \|ping data' "$clog" | sed 's/^/   local client: /'
	echo "   local client exit $lrc, $(pings_of "$clog") pings; server exit $rc; the server's edges:"
	vm_edges "$log"
	[[ $lrc == 0 ]] || vm_bad "a's own client exited $lrc"
	[[ $(pings_of "$clog") == 3000 ]] || vm_bad "a's own client: $(pings_of "$clog") of 3,000 pings"
	no_flap "$clog" "a's own queues saw b's removal"
	[[ $(grep -c -- '--READY--> LIVE' "$clog") == 2 ]] || vm_bad "a's own queues LIVE $(grep -c -- '--READY--> LIVE' "$clog") times for 2"
	[[ $(grep -c -- 'NEW --CONNECT_REQUEST--> REQUESTED' "$log") == 6 ]] ||
		vm_bad "the server saw $(grep -c -- 'NEW --CONNECT_REQUEST--> REQUESTED' "$log") of 6 connections"
	vm_expect "$log" "LIVE --(DISCONNECTED|WC_ERROR)[^>]*--> DRAINING" "b's old queues ended"
	grep -q 'unexpected 0,' "$log" || vm_bad "the server saw an unexpected event"
	vm_identity "$log"
	grep -q 'unexpected 0,' "$clog" || vm_bad "a's own client saw an unexpected event"
	vm_identity "$clog"
else
	step "2: b pings a on 2 queues (1,500 each); its $dev removed under them and added again"
	log=$tmp/faults2-client.log
	vm_await listening2 60 || fail "a never listened (step 2)"
	client "$peer" $port 2 1500 30 170 "$log"
	wait_pings "$log" 100 60 || vm_bad "b's first 100 pings never came"
	t0=$(usec)
	timeout 20 rdma link delete "$dev" || vm_bad "rdma link delete $dev failed or hung"
	echo "   $dev deleted in $(ms_since "$t0") ms"
	sleep 2
	rdma link add "$dev" type "$transport" netdev "$netdev" || vm_bad "rdma link add $dev failed"
	vm_wait_bounded "$cpid" 160
	rc=$?
	grep -v '^qsm \|ping data' "$log" | sed 's/^/   client: /'
	echo "   client exit $rc; its edges, in order:"
	vm_edges "$log"
	[[ $(grep -Ec -- 'LIVE --DEVICE_REMOVAL[^>]*--> RECONNECT_WAIT' "$log") == 2 ]] ||
		vm_bad "not both queues took LIVE --DEVICE_REMOVAL--> RECONNECT_WAIT"
	vm_expect "$log" "LIVE --DEVICE_REMOVAL[^>]*--> RECONNECT_WAIT" "the removal, in the gap at once"
	[[ $(grep -c -- '--READY--> LIVE' "$log") == 4 ]] || vm_bad "LIVE $(grep -c -- '--READY--> LIVE' "$log") times, expected 4"
	[[ $(pings_of "$log") == 3000 ]] || vm_bad "$(pings_of "$log") of 3,000 pings validated"
	grep -q 'unexpected 0,' "$log" || vm_bad "the client saw an unexpected event"
	vm_identity "$log"
fi
vm_sync done2 200 || vm_bad "the peer did not finish step 2"

# ---- 3. a's guest powered off ---------------------------------------------------------------------
port=7350
if [[ $host == a ]]; then
	step "3: a serves on port $port; powered off under b's pings"
	log=$tmp/faults3-server.log
	server $port 1 120 "$log"
	vm_post listening3
	vm_await pinging3 60 || vm_bad "b never pinged"
	cp "$tmp"/faults*.log "$out"/ 2>/dev/null
	if ((vm_failures)); then
		echo "FAIL: host $host: $vm_failures check(s) failed"
		rc=1
	else
		echo "PASS: host $host: every check; powering off now, with the server LIVE"
		rc=0
	fi
	vm_power_off "$rc" poweroff3
fi
log=$tmp/faults3-client.log
step "3: b pings a 3,000 times; a powers off under them; b takes over $peer and serves there"
vm_await listening3 60 || fail "a never listened (step 3)"
# -B 2000: its first retry 2 s after the loss, when the address is b's already; -K 2000: a
# queue that waits for a's answer (no WR of its own out) learns of the loss from its probe
client "$peer" $port 1 3000 20 240 "$log" -B 2000 -K 2000
wait_pings "$log" 100 60 || vm_bad "b's first 100 pings never came"
vm_post pinging3
vm_await poweroff3 30 || vm_bad "a never said it powered off"
t0=$(usec)
# b's queue finds out by itself: no DREQ, no FIN comes from a host without power
wait_edge "$log" "LIVE --[A-Z_]+[^>]*--> DRAINING" 120 || vm_bad "b's queue never left LIVE"
echo "   b's queue left LIVE $(ms_since "$t0") ms after a's power-off: $(grep -Eo -- 'LIVE --[A-Z_]+[^>]*--> DRAINING' "$log" | head -n 1)"
# the other half of the pair takes the address over (a is fenced: powered off), only now: the
# old QP's packets to that address would reach b itself
if [[ $peer == *:* ]]; then
	ip -6 addr add "$peer/64" dev "$netdev" nodad
else
	ip addr add "$peer/24" dev "$netdev"
fi || vm_bad "ip addr add $peer failed"
me=$peer
# (it serves until b's client is done: the first connection to a GID just added may be lost,
# below, and the client then connects again)
slog=$tmp/faults3-server2.log
server $port 10 230 "$slog"
s2pid=$spid
echo "   $peer taken over, a new server on it ($(ms_since "$t0") ms after a's power-off)"
vm_wait_bounded "$cpid" 230
rc=$?
kill -TERM "$s2pid" 2>/dev/null
pkill -TERM -P "$s2pid" 2>/dev/null
vm_wait_bounded "$s2pid" 10
grep -v '^qsm \|ping data' "$log" | sed 's/^/   client: /'
echo "   client exit $rc, $(ms_since "$t0") ms after the power-off; the client's edges:"
vm_edges "$log"
echo "   the new server's edges:"
vm_edges "$slog"
vm_expect "$log" "LIVE --${lost}[^>]*--> DRAINING" "its QP gave up on the dead host (RC retries, or the probe's; siw: TCP's)"
# no word from a host without power: the first loss is an error completion, not a DISCONNECTED
# (siw: or TCP's abort)
[[ $(grep -Eo -- 'LIVE --[A-Z_]+' "$log" | grep -v TIMEOUT | head -n 1) =~ ^LIVE\ --$lost$ ]] ||
	vm_bad "the first loss was not WC_ERROR: $(grep -Eo -- 'LIVE --[A-Z_]+' "$log" | grep -v TIMEOUT | head -n 1)"
# rxe, measured: the first connection to the address just taken over may take
# LIVE --UNREACHABLE (-ETIMEDOUT) some 6 s after ESTABLISHED (the kernel CM's REQ timer firing
# for an id it had established, as after IPv6 DAD: cm_id.rl, lost); the queue connects again
if grep -q -- 'LIVE --UNREACHABLE' "$log"; then
	echo "   note: LIVE --UNREACHABLE on the new connection $(grep -c -- 'LIVE --UNREACHABLE' "$log") time(s) (the kernel CM on a fresh GID); reconnected"
fi
(($(grep -c -- '--READY--> LIVE' "$log") >= 2)) || vm_bad "LIVE $(grep -c -- '--READY--> LIVE' "$log") times, expected 2 or more"
[[ $(pings_of "$log") == 3000 ]] || vm_bad "$(pings_of "$log") of 3,000 pings validated"
[[ $rc == 0 || $rc == 1 ]] || vm_bad "the client exited $rc"
grep -q '^qsm-ping: 1 connection(s)' "$log" || vm_bad "the client did not finish"
grep -q 'unexpected 0,' "$log" || vm_bad "the client saw an unexpected event"
vm_identity "$log"
! grep -q -- '(unexpected: stays)' "$slog" || vm_bad "the new server saw an unexpected event"

cp "$tmp"/faults*.log "$out"/ 2>/dev/null
if ((vm_failures)); then
	echo "FAIL: host $host: $vm_failures check(s) failed"
	exit 1
fi
echo "PASS: host $host: every check"
