#!/bin/bash
# qsm-vm: transports rxe siw
# qsm-vm: families 4 6:rxe (IPv6 on one transport, one round, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# qsm-vm: ipv6-args 1 (IPv6: one round of qsm-bw, every message checked; no perftest over IPv6, below)
# VM scenario: the data path's bandwidth against perftest, on soft-RoCE, in one VM boot.
# perftest's ib_send_bw -R and ib_write_bw -R (rdma_cm) against examples/qsm-bw doing the same
# transfers: message sizes 64 B, 4 KiB, 64 KiB, the same tx depth (-t), cq moderation (-Q), rx
# depth (-r, send) and iterations (-n) on both command lines, and the same memory: qsm-bw -B uses
# one message buffer per side, as perftest does (a slot per message touched 8 MiB at the client
# and 32 MiB at the server where perftest touches 64 KiB).  Runs alternate (perftest, qsm,
# perftest, qsm, ...) so that noise hits both, and rounds go over every figure in turn, so that
# each figure's runs spread over the boot.  After the rounds one more qsm-bw run per figure,
# untimed, a quarter of the iterations, a slot per message (no -B), checks every message's
# sequence number at both ends.  Prints a table and one line per figure, judged on the median
# of the rounds' ratios (each round's qsm run over the perftest run just before it):
#   ratio send_bw_64 qsm/perftest X.XX range LO-HI (N rounds)   (BW average, > 1 = qsm faster)
# The ratios are figures, not thresholds: the scenario fails only if a qsm-bw transfer fails,
# its data is wrong (qsm-bw checks every message's sequence number and the bodies; perftest
# checks nothing), or it errs or hangs (every run is bounded).  A perftest run that fails twice
# leaves its round without a perftest figure (shown, with its logs): the baseline's own failure
# says nothing about qsm.  A round starts only if it fits before the VM's deadline
# (QSM_VM_TIMEOUT), judged by the longest round so far; fewer rounds are said so.
# Over IPv6 perftest needs --ipv6-addr (its rdma_cm mode trades parameters over an AF_INET
# socket otherwise), which Debian 12's perftest 4.5+0.17 lacks: there qsm-bw runs alone, every
# message checked, and the ratio lines say n/a.
#   tests/vm/run tests/vm/scenarios/datapath.sh [ROUNDS [QSM_BW_BINARY]]
# ROUNDS (default 5).  Iterations: QSM_DATAPATH_ITERS="64:N 4096:N 65536:N" (default 20000,
# 5000 and 1000: ~0.5 s, 0.4 s, 1 s of transfer each).
set -u
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

rounds=${1:-5}
bin=${2:-${QSM_BW_BIN:-./examples/qsm-bw}}
addr=${QSM_VM_ADDR:-192.0.2.1}
dev=${QSM_VM_DEV:-${QSM_VM_TRANSPORT:-rxe}0}
tmp=${TMPDIR:-/tmp}
out=${QSM_VM_OUT:-$tmp}
iters_spec=${QSM_DATAPATH_ITERS:-64:20000 4096:5000 65536:1000}
tx_depth=128 cq_mod=100 rx_depth=512   # perftest's defaults, given to both explicitly
# Every run listens on a port of its own (perftest from 18600, qsm-bw from 18800), so no run waits
# for the cm_id of the one before to go, and nothing polls the kernel's restrack (`rdma resource
# show`) while a run starts: once, in CI, that dump and ib_send_bw's rdma_cm calls locked up both
# vCPUs of the guest for good.
pt_base=18600 qsm_base=18800 run_no=0
failures=0
export QSM_RDMACM_STATS=1   # qsm-bw's completion statistics (batches per poll), in its logs

usec() { echo "${EPOCHREALTIME/[.,]/}"; }
# Wait (bounded, 10 s) until a server's log shows PATTERN (it is listening): 1 if it never does.
wait_log() {
	local log=$1 pattern=$2 end
	end=$(($(usec) + 10000000))
	while (($(usec) < end)); do
		grep -q "$pattern" "$log" 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
bad_run() { # LABEL SLOG CLOG MESSAGE
	echo "FAIL: $1: $4"
	sed "s/^/   server: /" "$2" | tail -n 20
	sed "s/^/   client: /" "$3" | tail -n 20
	echo "   -- dmesg (tail)"
	dmesg | tail -n 10 | sed 's/^/   /'
	failures=$((failures + 1))
}

# run_perftest MODE SIZE ITERS LABEL: sets bw (the client's BW average, MB/sec), or returns 2:
# the round has no perftest figure.  perftest is the baseline, not what is tested: a run of it
# that fails (ib_write_bw and ib_send_bw have died of a general protection fault inside
# librdmacm here, and hung after) is run once more, on a port of its own; if that fails too the
# round goes without its figure, with the logs shown.  qsm-bw's runs are checked whatever it did.
run_perftest() {
	local try
	[[ $pt_family == none ]] && return 2
	for try in 1 2; do
		run_perftest_once "$@" "$try" && return 0
	done
	echo "   perftest $4 failed twice: no perftest figure for this round"
	return 2
}

run_perftest_once() {
	local mode=$1 size=$2 iters=$3 label=$4 try=$5 slog clog spid crc src args port
	slog=$out/$label-perftest-server.log
	clog=$out/$label-perftest-client.log
	((try > 1)) && slog=$out/$label-perftest-server.$try.log clog=$out/$label-perftest-client.$try.log
	run_no=$((run_no + 1))   # a retry too: the failed run's server may still hold its port
	port=$((pt_base + run_no))
	args=(-R -s "$size" -n "$iters" -t "$tx_depth" -Q "$cq_mod" -p "$port" -F)
	[[ -n $pt_family ]] && args+=("$pt_family")
	[[ $mode == send ]] && args+=(-r "$rx_depth")
	bw=
	timeout -s KILL 60 stdbuf -oL "ib_${mode}_bw" "${args[@]}" >"$slog" 2>&1 &
	spid=$!
	wait_log "$slog" 'Waiting for client' || echo "   (perftest's server never said it listens on $port; trying anyway)"
	timeout -s KILL 60 "ib_${mode}_bw" "${args[@]}" "$addr" >"$clog" 2>&1
	crc=$?
	vm_wait_bounded "$spid" 20
	src=$?
	# the result row: #bytes #iterations BW-peak BW-average MsgRate
	bw=$(awk -v s="$size" -v n="$iters" '$1 == s && $2 == n && NF >= 5 { print $4; exit }' "$clog")
	if [[ $crc != 0 || $src != 0 || -z $bw ]]; then
		echo "   perftest $label (try $try): client exit $crc, server exit $src, BW '${bw}'"
		sed "s/^/     server: /" "$slog" | tail -n 5
		sed "s/^/     client: /" "$clog" | tail -n 5
		dmesg | tail -n 3 | sed 's/^/     /'
		bw=
		return 1
	fi
}

# run_qsm MODE SIZE ITERS LABEL [QSM_BW_OPTION...]: sets bw (the client's BW average, MB/sec)
# or fails.
run_qsm() {
	local mode=$1 size=$2 iters=$3 label=$4 slog clog spid crc src args
	shift 4
	slog=$out/$label-qsm-server.log
	clog=$out/$label-qsm-client.log
	run_no=$((run_no + 1))
	args=(-a "$addr" -p "$((qsm_base + run_no))" -m "$mode" -S "$size" -n "$iters" -t "$tx_depth" -Q "$cq_mod"
		-r "$rx_depth" -T 50 "$@")
	# iWARP has no RNR retry: a send that finds no receive posted ends the connection, so on
	# siw qsm-bw's sends wait for the server's credits (-C; perftest has none, and relies on
	# its rx depth)
	[[ $mode == send && ${QSM_VM_TRANSPORT:-rxe} == siw ]] && args+=(-C)
	bw=
	timeout -s KILL 60 "$bin" -s "${args[@]}" >"$slog" 2>&1 &
	spid=$!
	sleep 0.2   # the client retries a connect that finds no listener yet (its reconnect policy)
	timeout -s KILL 60 "$bin" -c "${args[@]}" >"$clog" 2>&1
	crc=$?
	vm_wait_bounded "$spid" 20
	src=$?
	bw=$(sed -n 's/^qsm-bw: .* client: .*BW average \([0-9.]*\) MB\/sec.*/\1/p' "$clog")
	if [[ $crc != 0 || $src != 0 || -z $bw ]] || ! grep -q "^qsm-bw: $mode server: .*data ok" "$slog" ||
		! grep -q "^qsm-bw: server: $iters message(s) checked, status 0 (ok)" "$clog"; then
		bad_run "qsm $label" "$slog" "$clog" "client exit $crc, server exit $src, BW '${bw}'"
		bw=
		return 1
	fi
}

[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
[[ -x $bin ]] || fail "$bin not found or not executable (build it, or set QSM_BW_BIN)"
for t in ib_send_bw ib_write_bw rdma timeout awk; do
	command -v "$t" >/dev/null || fail "$t not installed (tests/vm/setup installs perftest)"
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || fail "ROUNDS must be a positive number, not '$rounds'"
# perftest's rdma_cm mode exchanges its parameters over a socket of AF_INET unless told
# --ipv6-addr, which Debian 12's perftest (4.5+0.17) does not have: there, on IPv6, the rounds
# run qsm-bw alone (every message still checked) and the ratios are IPv4's to give.
pt_family=
if [[ $addr == *:* ]]; then
	pt_family=none
	ib_send_bw --help 2>&1 | grep -q -- '--ipv6-addr' && pt_family=--ipv6-addr
	[[ $pt_family == none ]] &&
		echo "== perftest has no --ipv6-addr (its rdma_cm mode is IPv4 only): no baseline over IPv6, qsm-bw's runs only"
fi
end=$(($(usec) + 10000000))
until rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE'; do
	(($(usec) < end)) || fail "$dev is not ACTIVE"
	sleep 0.1
done

declare -A iters_of
for spec in $iters_spec; do
	iters_of[${spec%%:*}]=${spec#*:}
done
sizes=(64 4096 65536)
declare -A size_name=([64]=64 [4096]=4k [65536]=64k)
figs=()
for mode in send write; do
	for size in "${sizes[@]}"; do
		figs+=("${mode}_bw_${size_name[$size]}")
	done
done
fig_mode() { echo "${1%%_*}"; }
fig_size() { local n=${1##*_}; case $n in 64) echo 64 ;; 4k) echo 4096 ;; 64k) echo 65536 ;; esac; }
declare -A pt_all qsm_all ratio_all
for fig in "${figs[@]}"; do
	pt_all[$fig]='' qsm_all[$fig]='' ratio_all[$fig]=''
done

# The VM's deadline (QSM_VM_TIMEOUT, from qemu's launch: the guest's uptime is close to it)
# bounds the rounds: a round starts only if it, the checked runs after the last and a margin
# fit before it, judged by the longest round so far (a loaded host slows everything at once).
deadline_s=${QSM_VM_TIMEOUT:-0}
uptime_s() { local u _; read -r u _ </proc/uptime; echo "${u%.*}"; }
round_max_ms=0

for fig in "${figs[@]}"; do
	mode=$(fig_mode "$fig") size=$(fig_size "$fig")
	echo "== $fig: ib_${mode}_bw -R -s $size -n ${iters_of[$size]:-1000} -t $tx_depth -Q $cq_mod$([[ $mode == send ]] && echo " -r $rx_depth")  vs  qsm-bw -m $mode -B (same)"
done
echo "== $rounds round(s); each runs every figure, perftest then qsm-bw, so that a figure's runs spread over the boot"
t_start=$(usec)
rounds_run=0
for ((r = 1; r <= rounds; r++)); do
	if ((r > 1 && deadline_s > 0)); then
		need=$(((round_max_ms * 3 / 2 + round_max_ms / 2 + 999) / 1000 + 30))
		if (($(uptime_s) + need > deadline_s)); then
			echo "== round $r not started: ~$need s more would pass the VM's deadline ($deadline_s s, uptime $(uptime_s) s)"
			break
		fi
	fi
	t_round=$(usec)
	for fig in "${figs[@]}"; do
		mode=$(fig_mode "$fig") size=$(fig_size "$fig") iters=${iters_of[$size]:-1000}
		t0=$(usec)
		pt_rc=0
		run_perftest "$mode" "$size" "$iters" "$fig-$r" || pt_rc=$?
		pt_bw=
		if ((pt_rc)); then
			:   # failed twice: no perftest figure this round; qsm's run is still checked
		elif awk -v b="$bw" 'BEGIN { exit !(b > 0) }'; then
			pt_bw=$bw
			pt_all[$fig]+=" $bw"
		else
			# seen once: ib_send_bw exiting 0 with a BW average of 0.00, a reading, not a
			# rate; counting it would halve perftest's figure
			echo "   $fig round $r: perftest reported $bw MB/s although it exited 0: left out"
		fi
		t1=$(usec)
		run_qsm "$mode" "$size" "$iters" "$fig-$r" -B || continue
		qsm_all[$fig]+=" $bw"
		[[ -n $pt_bw ]] && ratio_all[$fig]+=" $(awk -v q="$bw" -v p="$pt_bw" 'BEGIN { printf "%.4f", q / p }')"
		if ((r == 1)); then
			# what perftest says it inlines (4.5: nothing in a BW test, nothing on a device it
			# does not know, rxe among them; qsm-bw posts nothing inline either)
			grep -h -m1 'Max inline data' "$out/$fig-$r-perftest-client.log" 2>/dev/null | sed "s/^ */   $fig perftest: /"
			grep -h '^qsm rdmacm: .*' "$out/$fig-$r-qsm-server.log" "$out/$fig-$r-qsm-client.log" |
				sed 's/^/   /' | head -n 4
		fi
		printf '   %-12s round %d: perftest %8s MB/s (%5d ms),  qsm %8s MB/s (%5d ms)\n' "$fig" "$r" \
			"${pt_bw:--}" $(((t1 - t0) / 1000)) "$bw" $((($(usec) - t1) / 1000))
	done
	ms=$((($(usec) - t_round) / 1000))
	((ms > round_max_ms)) && round_max_ms=$ms
	rounds_run=$r
	echo "   round $r: $ms ms"
done
# every message's sequence number, a slot each: not a figure, a check
for fig in "${figs[@]}"; do
	mode=$(fig_mode "$fig") size=$(fig_size "$fig") iters=${iters_of[$size]:-1000}
	run_qsm "$mode" "$size" "$(((iters + 3) / 4))" "$fig-checked" &&
		echo "   $fig checked (a slot per message, sequence numbers at both ends): $bw MB/s, data ok"
done
echo "== scenario time for the runs: $((($(usec) - t_start) / 1000)) ms, $rounds_run round(s)"

# median and range of a list of numbers: "MEDIAN MIN MAX N"
stats() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END {
	if (NR == 0) { print "- - - 0"; exit }
	m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	printf "%.2f %.2f %.2f %d\n", m, v[1], v[NR], NR }'; }

echo "== BW average, MB/sec (2^20 bytes/s), client side: medians of the rounds; the ratio is the median"
echo "   of each round's qsm/perftest (the two runs next to each other), its range the lowest and highest"
printf '%-14s %7s %10s %10s %7s %11s  %s\n' figure iters perftest qsm ratio range "runs (perftest | qsm)"
ratios=()
for fig in "${figs[@]}"; do
	size=$(fig_size "$fig")
	read -r pm _ _ _ <<<"$(stats "${pt_all[$fig]}")"
	read -r qm _ _ _ <<<"$(stats "${qsm_all[$fig]}")"
	read -r rm rlo rhi rn <<<"$(stats "${ratio_all[$fig]}")"
	if ((rn == 0)); then
		printf '%-14s %7s %10s %10s %7s %11s\n' "$fig" "${iters_of[$size]:-1000}" "$pm" "$qm" - -
		if [[ $pt_family == none ]]; then
			ratios+=("ratio $fig qsm/perftest n/a (no perftest over IPv6)")
		else
			ratios+=("ratio $fig qsm/perftest n/a (no round with both figures)")
		fi
		continue
	fi
	printf '%-14s %7s %10s %10s %7s %11s  %s |%s\n' "$fig" "${iters_of[$size]:-1000}" "$pm" "$qm" \
		"$rm" "$rlo-$rhi" "${pt_all[$fig]# }" "${qsm_all[$fig]}"
	ratios+=("ratio $fig qsm/perftest $rm range $rlo-$rhi ($rn rounds)")
done
printf '%s\n' "${ratios[@]}"

if ((failures)); then
	echo "FAIL: $failures run(s) failed"
	exit 1
fi
if [[ $pt_family == none ]]; then
	echo "PASS: datapath: every qsm-bw run completed, its data checked (no perftest over IPv6)"
else
	echo "PASS: datapath: every perftest and qsm-bw run completed, qsm-bw's data checked"
fi
