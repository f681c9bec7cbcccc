#!/bin/bash
# qsm-vm: timeout 900
# qsm-vm: smp 8 (the kernel host makes at most one I/O queue of each kind per CPU)
# qsm-vm: mem 3G (1,000 queues on both ends in one guest: with 1G the OOM killer took the target)
# qsm-vm: transports rxe siw (siw: with the test VM's fix of siw's TX-thread race, tests/vm/siw-tx-thread-user-copy.patch)
# qsm-vm: families 4 6:rxe (IPv6 on one transport and smaller, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# qsm-vm: ipv6-args 4 8 10 24 (IPv6: 4 x 8, then 10 x 24 = 250 queues)
# VM scenario: many hosts on examples/nvmet/qsm-nvmet.  The Linux kernel's NVMe-oF host connects
# as several hosts (each its own host NQN and id, so each its own controller of the subsystem,
# all under one multipath head, I/O policy round-robin so every controller's queues carry I/O):
#   1. HOSTS (default 4) controllers x QUEUES (default 8) I/O queues, fio verified random writes
#      over the head (4 jobs, disjoint ranges, crc32c, read back and checked);
#   2. all disconnected, then BIG_CTRLS (default 40) controllers x BIG_QUEUES (default 24) I/O
#      queues of 32 entries: 1,000 queues in all with the admin queues, the same fio verify.
# The target runs as a storage target for many hosts would: its queues on one shared receive
# queue per device (-Q SRQ, default 4096 capsules; SRQ 0: each queue its own receives, depth x
# 4160 bytes), on THREADS threads (-T, default 2: each host's queues spread over both, so that
# its controller is shared across threads; its I/O queues ended from another thread when its
# admin queue goes).  Each phase prints the target's peak resident memory (VmHWM).
# Each phase asserts: the target counted every queue LIVE, every controller's path did I/O, fio's
# verify clean; at the end every controller freed, no unexpected event, no error, the target's
# counter identities.
#   tests/vm/run --timeout 900 tests/vm/scenarios/nvmet-hosts.sh [HOSTS QUEUES [BIG_CTRLS BIG_QUEUES [BINARY [SRQ]]]]
set -u

addr=${QSM_VM_ADDR:-192.0.2.1}
transport=${QSM_VM_TRANSPORT:-rxe}
dev=${QSM_VM_DEV:-${transport}0}
out=${QSM_VM_OUT:-/tmp}
hosts=${1:-4}
queues=${2:-8}
big_ctrls=${3:-40}
big_queues=${4:-24}
bin=${5:-./examples/nvmet/qsm-nvmet}
port=4420
nqn=nqn.2024-01.io.rdma-qsm:nvmet-hosts
tlog=$out/nvmet-hosts.log
tmp=${TMPDIR:-/tmp}
# shellcheck source=tests/vm/nvme-lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../nvme-lib.sh" || { echo "FAIL: tests/vm/nvme-lib.sh not found"; exit 1; }

nvme_host_ready fio
for v in "$hosts" "$queues" "$big_ctrls" "$big_queues"; do
	[[ $v =~ ^[1-9][0-9]*$ ]] || fail "HOSTS QUEUES BIG_CTRLS BIG_QUEUES: positive integers"
done
maxc=$((hosts > big_ctrls ? hosts : big_ctrls))
maxq=$((queues > big_queues ? queues : big_queues))
srq=${6:-4096}
[[ $srq =~ ^[0-9]+$ ]] || fail "SRQ: a number (0: each queue its own receives)"
srq_args=()
((srq)) && srq_args=(-Q "$srq")
threads=${7:-2}
[[ $threads =~ ^[1-9][0-9]*$ ]] || fail "THREADS: a positive number"
target_start -a "$addr" -p "$port" -n "$nqn" -s 64M -c "$maxc" -q "$maxq" -v -T "$threads" "${srq_args[@]}"

# host_nqn K: the K-th host's NQN (and, its last 12 digits, its host id)
host_uuid() { printf '5a1c0de0-0000-4000-8000-%012d' "$1"; }
lives() { grep -c ": LIVE$" "$tlog"; }

# phase NAME CTRLS IOQ QSIZE: CTRLS hosts connect with IOQ I/O queues of QSIZE entries, fio
# verifies through the head, every path did I/O, all disconnect
phase() {
	local name=$1 ctrls=$2 ioq=$3 qsize=$4 k c t0 live0 want head subsys p n r w rc
	# the kernel host takes at most one I/O queue of each kind (default, write, poll) per CPU:
	# IOQ beyond the CPUs is split over the kinds (the VM has QSM_VM_SMP CPUs: header above)
	local cpus d wq pq ioq_args
	cpus=$(nproc)
	d=$((ioq < cpus ? ioq : cpus))
	wq=$((ioq - d < cpus ? ioq - d : cpus))
	pq=$((ioq - d - wq))
	((pq <= cpus)) || fail "$ioq I/O queues a controller: more than 3 x $cpus CPUs"
	ioq_args="nr_io_queues=$d"
	((wq)) && ioq_args+=",nr_write_queues=$wq"
	((pq)) && ioq_args+=",nr_poll_queues=$pq"
	step "$name: $ctrls hosts x $ioq I/O queues ($qsize entries; $ioq_args)"
	live0=$(lives)
	t0=$(usec)
	for ((k = 1; k <= ctrls; k++)); do
		# straight to the kernel's fabrics device, as nvme-cli does: nvme-cli 2.3 refuses a
		# second controller on the same address and subsystem even for another host NQN
		# ("already connected", -D or not); the kernel tells hosts apart by their NQN
		timeout 120 sh -c 'printf "%s" "$1" >/dev/nvme-fabrics' connect \
			"transport=rdma,traddr=$addr,trsvcid=$port,nqn=$nqn,queue_size=$qsize,$ioq_args,keep_alive_tmo=$kato,hostnqn=nqn.2014-08.org.nvmexpress:uuid:$(host_uuid "$k"),hostid=$(host_uuid "$k")" \
			>"$tmp/connect.log" 2>&1 || { cat "$tmp/connect.log"; fail "connect of host $k failed"; }
	done
	want=$((ctrls * (1 + ioq)))
	wait_for 30 eval '(($(lives) - live0 >= want))' ||
		fail "the target counted $(($(lives) - live0)) queues LIVE, expected $want"
	echo "   ok: $ctrls controllers, $want queues LIVE at the target ($(ms_since "$t0") ms)"
	echo "   target memory: $(grep -E '^VmHWM' "/proc/$tpid/status" | tr -s ' \t' ' ') peak, $(grep -E '^VmRSS' "/proc/$tpid/status" | tr -s ' \t' ' ') now (${srq_args[*]:-receives per queue})"
	n=0
	for c in /sys/class/nvme/nvme*; do
		[[ -e $c/subsysnqn && $(<"$c/subsysnqn") == "$nqn" ]] || continue
		n=$((n + 1))
		[[ $(<"$c/queue_count") == $((ioq + 1)) ]] || fail "$(basename "$c") has $(<"$c/queue_count") queues, expected $((ioq + 1))"
	done
	((n == ctrls)) || fail "the host has $n controllers of $nqn, expected $ctrls"
	ns=
	wait_for 20 find_ns || fail "no namespace block device for $nqn"
	head=$ns
	for subsys in /sys/class/nvme-subsystem/nvme-subsys*; do
		[[ $(<"$subsys/subsysnqn") == "$nqn" ]] && break
	done
	[[ -e $subsys/iopolicy ]] || fail "no multipath subsystem for $nqn (nvme_core.multipath off?)"
	echo round-robin >"$subsys/iopolicy" || fail "cannot set the round-robin I/O policy"
	echo "   namespace head $head, $(basename "$subsys"), iopolicy $(<"$subsys/iopolicy")"

	step "$name: fio verified random writes through $head (4 jobs x 8 MiB, crc32c)"
	t0=$(usec)
	timeout 300 fio --name=v --filename="$head" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
		--iodepth=16 --numjobs=4 --size=8m --offset_increment=8m --verify=crc32c --verify_fatal=1 \
		--do_verify=1 --group_reporting >"$tmp/fio.log" 2>&1
	rc=$?
	grep -E "write: IOPS|read: IOPS|verify|err=" "$tmp/fio.log" | sed 's/^/   /'
	[[ $rc == 0 ]] || { tail -n 30 "$tmp/fio.log"; fail "fio verify exited $rc"; }
	grep -q "err= 0" "$tmp/fio.log" || fail "fio reported an error"
	echo "   ok: written and verified ($(ms_since "$t0") ms)"
	n=0
	for p in /sys/block/nvme*c*n*; do
		[[ -e $p/device/subsysnqn && $(<"$p/device/subsysnqn") == "$nqn" ]] || continue
		read -r r _ _ _ w _ <"$p/stat"
		((r + w > 0)) || fail "$(basename "$p") did no I/O: round-robin did not reach that controller"
		n=$((n + 1))
	done
	((n == ctrls)) || fail "$n paths did I/O, expected $ctrls"
	echo "   ok: every one of the $n controllers' paths did I/O"

	step "$name: disconnect all"
	timeout 120 nvme disconnect -n "$nqn" >"$tmp/disconnect.log" 2>&1 || { cat "$tmp/disconnect.log"; fail "nvme disconnect failed"; }
	sed 's/^/   /' "$tmp/disconnect.log"
	ctrl_of_nqn >/dev/null && fail "a controller is still present after the disconnect"
	wait_for 30 all_freed || fail "the target did not free every controller"
	return 0
}

# Keep-alive: the kernel's default (5 s) for the first phase; 60 s in the second, where 1,000
# queues connect on an emulated guest of 8 vCPUs on the host's 2 cores and the hosts' own
# keep-alives came back after 5.2-5.3 s in the storm (the first try: keep-alive timeouts and
# error recovery on the controllers already up, and the 33rd host's connect failed)
kato=5
phase "many hosts" "$hosts" "$queues" 128
kato=60
big=$((big_ctrls * (1 + big_queues)))
((big == 1000)) && big=1,000
phase "$big queues" "$big_ctrls" "$big_queues" 32
target_stop
echo "PASS: nvmet-hosts: $threads target threads, $hosts hosts x $queues I/O queues, then $big_ctrls x $big_queues ($big queues), fio verify clean through every controller; no unexpected event"
