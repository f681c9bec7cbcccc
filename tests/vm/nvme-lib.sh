# shellcheck shell=bash
# rdma-qsm VM scenarios: what the NVMe-oF scenarios (nvmeof, nvmet-perf) share: the kernel host's
# modules, examples/nvmet/qsm-nvmet started and stopped, a controller and its namespace found
# from the subsystem NQN, every wait bounded by the wall clock.
# Sourced, not run (outside scenarios/: tests/vm.test runs every scenarios/*.sh), through the host
# tree: . "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../nvme-lib.sh" || exit 1
# The scenario sets: bin (the target), tlog (its log), tmp (a writable directory), dev (the RDMA
# device), and nqn (its subsystem: the default NQN of the functions below).

hostnqn=nqn.2014-08.org.nvmexpress:uuid:5a1c0de0-0000-4000-8000-00000000c0de
hostid=5a1c0de0-0000-4000-8000-00000000c0de
tpid=

step() { echo "== $*"; }
usec() { echo "${EPOCHREALTIME/[.,]/}"; }
ms_since() { echo $((($(usec) - $1) / 1000)); }
diag() {
	echo "== target log (tail)"
	tail -n 40 "$tlog" 2>/dev/null
	echo "== dmesg (tail)"
	dmesg | tail -n 40
}
fail() {
	echo "FAIL: $*"
	diag
	[[ -n $tpid ]] && kill -TERM "$tpid" 2>/dev/null
	exit 1
}
# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s, bounded by the wall clock.
wait_for() {
	local end=$(($(usec) + $1 * 1000000))
	shift
	while (($(usec) < end)); do
		"$@" && return 0
		sleep 0.2
	done
	"$@"
}
dev_active() {
	rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE' && compgen -G '/dev/infiniband/uverbs*' >/dev/null
}
target_says() { grep -q -- "$1" "$tlog"; }
# ctrl_of_nqn [NQN]: the host's controller of the subsystem (nvmeN)
ctrl_of_nqn() {
	local c want=${1:-$nqn}
	for c in /sys/class/nvme/nvme*; do
		[[ -e $c/subsysnqn && $(<"$c/subsysnqn") == "$want" ]] && { basename "$c"; return 0; }
	done
	return 1
}
# find_ns [NQN]: sets ns to the namespace block device of the subsystem's controller
find_ns() {
	local c b want=${1:-$nqn}
	c=$(ctrl_of_nqn "$want") || return 1
	for b in /sys/block/nvme*; do
		[[ -e $b/device && $(basename "$(readlink -f "$b/device")") == "$c" ]] && { ns=/dev/$(basename "$b"); [[ -b $ns ]] && return 0; }
		# multipath heads: nvmeXcYnZ hidden, nvmeXnZ on the subsystem
		[[ -e $b/device/subsysnqn && $(<"$b/device/subsysnqn") == "$want" ]] && { ns=/dev/$(basename "$b"); [[ -b $ns ]] && return 0; }
	done
	return 1
}
all_freed() { [[ $(grep -c "controller .* freed" "$tlog") -ge $(grep -c "(admin queue" "$tlog") ]]; }

# The test VM, the tools, the kernel host's modules, the device up.
nvme_host_ready() {
	local t m
	[[ ${QSM_VM:-} == 1 ]] || fail "not inside the test VM (run it with tests/vm/run)"
	[[ -x $bin ]] || fail "$bin not found or not executable (make, from the top of the build tree)"
	for t in nvme rdma timeout "$@"; do
		command -v "$t" >/dev/null || fail "$t not installed"
	done
	step "kernel NVMe-oF host modules"
	for m in nvme_fabrics nvme_rdma; do
		if [[ ! -d /sys/module/$m ]]; then
			timeout 20 modprobe "$m" || fail "cannot load $m"
		fi
	done
	ls -d /sys/module/nvme_rdma /sys/module/nvme_fabrics || fail "nvme-rdma not loaded"
	[[ -c /dev/nvme-fabrics ]] || fail "/dev/nvme-fabrics missing"
	wait_for 10 dev_active || fail "$dev is not ACTIVE"
}

# target_start ARGS...: qsm-nvmet with ARGS, its output in $tlog, listening
target_start() {
	step "target: $bin $*"
	"$bin" "$@" >"$tlog" 2>&1 &
	tpid=$!
	wait_for 10 target_says "listening on" || fail "the target is not listening"
	head -n 1 "$tlog" | sed 's/^/   /'
}

# nvme_connect NQN PORT [ARGS...]: connects the kernel host; sets ns and ctrl
nvme_connect() {
	local want=$1 p=$2 rc t0
	shift 2
	step "nvme connect -t rdma -n $want -a $addr -s $p $*"
	t0=$(usec)
	timeout 60 nvme connect -t rdma -n "$want" -a "$addr" -s "$p" --hostnqn="$hostnqn" \
		--hostid="$hostid" "$@" >"$tmp/connect.log" 2>&1
	rc=$?
	sed 's/^/   /' "$tmp/connect.log"
	[[ $rc == 0 ]] || fail "nvme connect exited $rc"
	ns=
	wait_for 20 find_ns "$want" || fail "no namespace block device for $want"
	ctrl=$(ctrl_of_nqn "$want")
	echo "   ok: $ctrl, namespace $ns, $(blockdev --getsize64 "$ns") bytes ($(ms_since "$t0") ms)"
}

# nvme_disconnect NQN: the host lets go of the subsystem's controller
nvme_disconnect() {
	local want=$1 rc
	step "nvme disconnect -n $want"
	timeout 60 nvme disconnect -n "$want" >"$tmp/disconnect.log" 2>&1
	rc=$?
	sed 's/^/   /' "$tmp/disconnect.log"
	[[ $rc == 0 ]] || fail "nvme disconnect exited $rc"
	grep -q "disconnected 1 controller" "$tmp/disconnect.log" || fail "nvme disconnect disconnected no controller"
	ctrl_of_nqn "$want" >/dev/null && fail "controller still present after disconnect"
	return 0
}

# target_stop: every controller freed, SIGTERM, exit 0 with no unexpected event and no error
target_stop() {
	local end trc
	wait_for 10 all_freed || fail "the target did not free every controller"
	step "target: stop (SIGTERM), counters"
	kill -TERM "$tpid"
	end=$(($(usec) + 10000000))
	while kill -0 "$tpid" 2>/dev/null && (($(usec) < end)); do sleep 0.1; done
	kill -0 "$tpid" 2>/dev/null && fail "the target did not exit within 10 s"
	wait "$tpid"
	trc=$?
	tpid=
	grep -E "controller|counters|stopping|unexpected|error" "$tlog" | sed 's/^/   /'
	[[ $trc == 0 ]] || fail "the target exited $trc"
	grep -q "qsm counters: unexpected 0," "$tlog" || fail "the target counted unexpected events"
	grep -q "wc errors 0, protocol errors 0" "$tlog" || fail "the target counted errors"
	target_identities
}

# target_identities: the target printed its counter identities at its stop (the ctx's: every
# item taken went somewhere; its own: every queue requested released, every controller created
# freed, every command answered or closed with its queue), and each holds
target_identities() {
	grep -E 'counter identity|target identities' "$tlog" | tail -n 2 | sed 's/^/   /'
	grep -q 'ctx counter identity: .*: holds$' "$tlog" || fail "the target's ctx counter identity was not printed"
	grep -q 'target identities: ' "$tlog" || fail "the target's identities were not printed"
	! grep -E 'counter identity|target identities' "$tlog" | grep -q BROKEN ||
		fail "a counter identity of the target is broken"
}

# device_remove: `rdma link delete $dev` under the connected host (bounded: 20 s); the target then
# holds no device (its counters on SIGUSR1), the host deleted its controller, the target freed it
device_remove() {
	local t0 dpid end ncnt
	step "rdma link delete $dev with the host connected (20 s limit)"
	t0=$(usec)
	rdma link delete "$dev" &
	dpid=$!
	end=$(($(usec) + 20000000))
	while kill -0 "$dpid" 2>/dev/null && (($(usec) < end)); do sleep 0.1; done
	if kill -0 "$dpid" 2>/dev/null; then
		echo "   rdma link delete still blocked after 20 s; kernel stack:"
		cat "/proc/$dpid/stack" 2>/dev/null | sed 's/^/   /'
		fail "rdma link delete blocked (something still holds $dev)"
	fi
	wait "$dpid" || fail "rdma link delete exited non-zero"
	echo "   ok: deleted in $(ms_since "$t0") ms"
	# the target holds nothing on the device any more (SIGUSR1: it prints its counters)
	ncnt=$(grep -c "qsm counters:" "$tlog")
	kill -USR1 "$tpid"
	counters_printed() { (($(grep -c "qsm counters:" "$tlog") > ncnt)); }
	wait_for 5 counters_printed || fail "the target printed no counters on SIGUSR1"
	grep "qsm counters:" "$tlog" | tail -n 1 | sed 's/^/   /'
	grep "qsm counters:" "$tlog" | tail -n 1 | grep -q "devices_live 0$" ||
		fail "the target still holds a device"
	echo "   target queues that took DEVICE_REMOVAL themselves: $(grep -c "device removed" "$tlog")" \
		"(the others were closed by the host first)"

	# nvme-rdma's ib_client deletes every controller on a device that goes away (it does not
	# reconnect by itself): wait until the host let go, then connect again.
	wait_for 30 eval '! ctrl_of_nqn >/dev/null' || fail "the host kept its controller after the removal"
	dmesg | grep -E 'nvme nvme[0-9]+: Removing ctrl' | tail -n 1 | sed 's/^/   dmesg: /'
	wait_for 10 all_freed || fail "the target did not free the controller after the removal"
}

# device_readd_connect: `rdma link add` again; the kernel host connects again (the target's
# listener relistens at DEVICE_ADDED); sets ns and ctrl
device_readd_connect() {
	local t0 end try
	step "rdma link add $dev type $transport netdev $netdev; nvme connect again"
	t0=$(usec)
	rdma link add "$dev" type "$transport" netdev "$netdev" || fail "rdma link add failed"
	wait_for 10 dev_active || fail "$dev is not ACTIVE after re-add"
	# the target's listener relistens on DEVICE_ADDED (or its 1 s relisten timer)
	end=$(($(usec) + 30000000))
	for ((try = 1; ; try++)); do
		timeout 60 nvme connect -t rdma -n "$nqn" -a "$addr" -s "$port" --hostnqn="$hostnqn" \
			--hostid="$hostid" >"$tmp/connect2.log" 2>&1 && break
		(($(usec) < end)) || { cat "$tmp/connect2.log"; fail "nvme connect after re-add failed"; }
		sleep 0.5
	done
	ns=
	wait_for 20 find_ns || fail "no namespace block device after the reconnect"
	ctrl=$(ctrl_of_nqn)
	echo "   ok: $ctrl, $ns ($(ms_since "$t0") ms after re-add, $try connect attempt(s))"
}
