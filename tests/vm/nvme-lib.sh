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
}
