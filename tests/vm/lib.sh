# shellcheck shell=bash
# rdma-qsm VM scenarios: what the scenarios that run a test program (removal, gap, abort) share,
# and the bounded waits of ping and datapath.
# Sourced, not run; it lives outside scenarios/ because tests/vm.test runs every scenarios/*.sh.
#
# tests/vm/run copies only the scenario file into the guest, so a scenario sources this file
# through the host tree (read-only in the guest), at $QSM_VM_SCENARIO_DIR/../lib.sh:
#   . "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || exit 1

fail() {
	echo "FAIL: $*"
	exit 1
}
step() { echo "== $*"; }
# usec: the wall clock in microseconds; ms_since USEC: milliseconds since then
usec() { echo "${EPOCHREALTIME/[.,]/}"; }
ms_since() { echo $((($(usec) - $1) / 1000)); }

# vm_setup NAME DEFAULT_N BIN_VAR [N [BINARY]]
# Sets n, bin (BINARY, else $BIN_VAR, else ./tests/vm/NAME), dev, out, trace
# ($QSM_VM_OUT/NAME.trace) and log ($QSM_VM_OUT/NAME.log: the program's output), and fails unless this is the test VM, the binary is there, rdma is
# installed and the device is ACTIVE.
vm_setup() {
	local name=$1 default_n=$2 bin_var=$3
	shift 3
	n=${1:-$default_n}
	bin=${2:-${!bin_var:-./tests/vm/$name}}
	dev=${QSM_VM_DEV:-${QSM_VM_TRANSPORT:-rxe}0}
	out=${QSM_VM_OUT:-/tmp}
	trace=$out/$name.trace
	log=$out/$name.log

	[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
	[[ -x $bin ]] || fail "$bin not found or not executable (build it, or set $bin_var)"
	command -v rdma >/dev/null || fail "rdma (iproute2) not installed"

	# The device must be up before the test starts (bounded by wall clock: rdma itself may be slow).
	local end=$((${EPOCHREALTIME/./} + 10000000))
	while ((${EPOCHREALTIME/./} < end)); do
		rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE' && break
		sleep 0.1
	done
	rdma link show "$dev/1" | grep -q 'state ACTIVE' || fail "$dev is not ACTIVE"
}

# vm_run_test NAME LIMIT_S [--link-show]
# Runs "$bin $n $trace", killed after LIMIT_S seconds, its output kept in $log too. If it fails: the trace's tail, the
# links (with --link-show), the kernel log's tail, then FAIL. Otherwise the trace's length.
vm_run_test() {
	local name=$1 limit=$2 link_show=${3:-} rc
	echo "== $bin $n (trace: $trace, output: $log)"
	timeout --signal=KILL "$limit" "$bin" "$n" "$trace" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	if [[ $rc != 0 ]]; then
		echo "== last 60 trace lines"
		tail -n 60 "$trace" 2>/dev/null
		if [[ $link_show == --link-show ]]; then
			echo "== rdma link show"
			rdma link show
		fi
		echo "== dmesg (tail)"
		dmesg | tail -n 30
		fail "$name test exited $rc"
	fi
	echo "   trace: $(wc -l <"$trace") transitions"
}

# The client queues' reconnects, from the trace: a queue that came back went
# CONNECTED --READY--> LIVE twice (it was LIVE once before).

# The last such line of each client queue, in queue order.
vm_trace_last_live() {
	grep -E '^client .* CONNECTED --READY--> LIVE' "$1" | awk '{ last[$4] = $0 } END { for (q in last) print last[q] }' | sort -k4,4V
}

# How many client queues reached LIVE at least twice.
vm_trace_relive_count() {
	grep -E '^client .* CONNECTED --READY--> LIVE' "$1" | awk '{ n[$4]++ } END { c = 0; for (q in n) if (n[q] >= 2) c++; print c }'
}

# vm_removal_trace_checks --print|--count
# After the removal program (tests/vm/removal.c): the trace shows every one of the $n client
# queues take LIVE --DEVICE_REMOVAL--> RECONNECT_WAIT and reach LIVE again. --print prints
# those lines (one per queue) first; --count only the counts.
vm_removal_trace_checks() {
	local removed relive
	if [[ $1 == --print ]]; then
		# The evidence, per queue: its DEVICE_REMOVAL edge, and the reconnect that followed.
		echo "== trace: every client queue's DEVICE_REMOVAL edge"
		grep -E '^client .* --DEVICE_REMOVAL' "$trace"
		echo "== trace: every client queue's way back to LIVE (the last CONNECTED --READY--> LIVE of each)"
		vm_trace_last_live "$trace"
	fi
	removed=$(grep -cE '^client .* LIVE --DEVICE_REMOVAL(.*)--> RECONNECT_WAIT' "$trace")
	relive=$(vm_trace_relive_count "$trace")
	echo "   trace: $removed queues took LIVE --DEVICE_REMOVAL--> RECONNECT_WAIT, $relive reached LIVE again"
	[[ $removed == "$n" && $relive == "$n" ]] || fail "trace shows $removed removals and $relive reconnects, want $n each"
}

# vm_wait_bounded PID SECS [WHAT]: wait (bounded, wall clock) until a background process ends;
# its exit code, or 124 (then it is killed).  With WHAT, a process still there at half the bound
# is shown as the kernel sees it (vm_kernel_view), once, while it and its peer still hold their
# connections: where a stalled connection's data sits.
vm_wait_bounded() {
	local pid=$1 secs=$2 what=${3:-} end half rc=0
	end=$((${EPOCHREALTIME/[.,]/} + secs * 1000000))
	half=$((end - secs * 500000))
	while kill -0 "$pid" 2>/dev/null && ((${EPOCHREALTIME/[.,]/} < end)); do
		if [[ -n $what ]] && ((${EPOCHREALTIME/[.,]/} >= half)); then
			vm_kernel_view "$what still running after $((secs / 2)) s"
			what=
		fi
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		return 124
	fi
	wait "$pid" || rc=$?
	return $rc
}

# vm_kernel_view TITLE: the kernel's view of this host's RDMA connections: the TCP sockets with
# their queues (siw's connections are kernel sockets: bytes unsent, unacknowledged, unread), the
# QPs, CQs and cm_ids rdma_cm and the verbs hold, the device's counters.
vm_kernel_view() {
	echo "   == $1: the kernel's view"
	{
		ss -tnoie 2>&1
		rdma resource show qp 2>&1
		rdma resource show cq 2>&1
		rdma resource show cm_id 2>&1
		rdma statistic show 2>&1
	} | sed 's/^/   kernel| /'
}

# vm_wait_listen PORT: wait (bounded, 10 s) until something listens on an rdma_cm port: rdma_cm
# listeners are not in /proc/net; `rdma resource show cm_id` lists them.
vm_wait_listen() {
	local port=$1 end
	end=$((${EPOCHREALTIME/[.,]/} + 10000000))
	while ((${EPOCHREALTIME/[.,]/} < end)); do
		rdma resource show cm_id 2>/dev/null | grep LISTEN | grep -q ":$port\b" && return 0
		sleep 0.05
	done
	return 1
}

# Two guests (tests/vm/run --hosts 2): rendezvous through the directory both mount (QSM_VM_SYNC).
# vm_post NAME [TEXT]: this host says NAME happened (TEXT for the peer to read with vm_read).
vm_post() {
	local tmp="$QSM_VM_SYNC/.$1.$QSM_VM_HOST.$$"
	printf '%s\n' "${2:-}" >"$tmp" && mv -f "$tmp" "$QSM_VM_SYNC/$1.$QSM_VM_HOST"
}
# vm_peer_host: the other guest's name (a or b)
vm_peer_host() { if [[ $QSM_VM_HOST == a ]]; then echo b; else echo a; fi; }
# vm_await NAME SECS: wait (bounded) until the peer posted NAME; 1 on timeout.
vm_await() {
	local f="$QSM_VM_SYNC/$1.$(vm_peer_host)" end
	end=$((${EPOCHREALTIME/[.,]/} + $2 * 1000000))
	until [[ -e $f ]]; do
		((${EPOCHREALTIME/[.,]/} < end)) || return 1
		sleep 0.05
	done
}
# vm_read NAME: what the peer posted with NAME
vm_read() { cat "$QSM_VM_SYNC/$1.$(vm_peer_host)"; }
# vm_sync NAME SECS: both hosts reach NAME before either goes on; 1 if the peer did not within SECS.
vm_sync() {
	vm_post "$1" && vm_await "$1" "$2"
}

# Assertions that count instead of exiting (the two-host scenarios check every step, then fail).
vm_failures=0
# vm_bad WHAT: a failed check, counted
vm_bad() {
	echo "FAIL: $*"
	vm_failures=$((vm_failures + 1))
}
# vm_expect LOG PATTERN WHAT: the trace in LOG shows an edge matching PATTERN (grep -E), printed
# with its count, else a failed check
vm_expect() {
	local m
	m=$(grep -Eo -- '[A-Z_]+ --[^>]*--> [A-Z_]+' "$1" | grep -E -- "$2" | sort | uniq -c)
	if [[ -n $m ]]; then
		echo "   asserted: $3:"
		echo "$m" | sed 's/^ */      /; s/^\(      [0-9]*\) /\1 x /'
	else
		vm_bad "$(basename "$1"): no $3 (/$2/)"
	fi
}
# vm_identity LOG: qsm-ping's ctx in LOG printed its counter identity (popped + aborts +
# device_closes == dispatched + dropped + completions), and it holds
vm_identity() {
	if ! grep -q 'counter identity: .*: holds$' "$1" || grep -q 'counter identity: .*BROKEN' "$1"; then
		vm_bad "$(basename "$1"): the counter identity is broken, or was not printed"
	fi
}
# vm_edges LOG: every edge of LOG's trace, in order, repeats counted
vm_edges() { grep -Eo -- '[A-Z_]+ --[^>]*--> [A-Z_]+' "$1" | uniq -c | sed 's/^ */      /'; }

# vm_power_off RC [NAME]: this guest ends as a host that loses power: its exit code RC written
# for tests/vm/run first (and NAME posted for the peer), then the kernel powers off at once
# (sysrq o): no process exits, no file is closed, no connection ended (no DREQ, no FIN).
vm_power_off() {
	echo "$1" >/run/qsm-vm/rc
	[[ -z ${2:-} ]] || vm_post "$2"
	sync
	echo o >/proc/sysrq-trigger
	sleep 10
	exit "$1"
}
