#!/bin/bash
# qsm-vm: timeout 900
# qsm-vm: transports rxe siw (siw: with the test VM's fix of siw's TX-thread race, tests/vm/siw-tx-thread-user-copy.patch)
# qsm-vm: families 4 6:siw (IPv6 on one transport, one round, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# qsm-vm: ipv6-args 1 3 (IPv6: one round of 3 s; the figures are IPv4's)
# VM scenario: examples/nvmet/qsm-nvmet against the Linux kernel's own NVMe-oF target
# (nvmet-rdma), side by side in one boot, for the same kernel host (nvme-rdma):
#   qsm:    qsm-nvmet, its namespace 64 MiB of its own anonymous memory (the RDMA moves data
#           straight into and out of it), each queue receiving into buffers of its own;
#   qsm-srq: a second qsm-nvmet, the same but its queues on one shared receive queue per device
#           (-Q 1024), as the kernel's target (nvmet-rdma's use_srq, on by default);
#   kernel: nvmet-rdma configured through configfs, its namespace a 64 MiB memory-backed
#           null_blk device (RAM too; the kernel target's bio is copied into null_blk's pages);
# all listening on the same address and device (ports 4420, 4422 and 4421), connected at once
# (the kernel host's default queues: one I/O queue per CPU, 128 entries).  fio (libaio,
# O_DIRECT, 64 MiB span) runs each job on each, in an order that rotates each round,
# ROUNDS (default 2) rounds of SECS (default 4) seconds after a 1 s ramp:
#   randread / randwrite 4 KiB at iodepth 1 and 32, read / write 128 KiB sequential at iodepth 8.
# Prints each run's IOPS and, per job, `ratio nvmet_JOB qsm/kernel X.XX` and `ratio
# nvmet_srq_JOB qsm-srq/kernel X.XX` (the means' ratios; design: >= 1.0).  Fails if a job errs
# on any target, or a qsm-nvmet counts an unexpected event or an error, or its identities break.
# Figures under TCG compare the targets only within one boot.
#   tests/vm/run --timeout 900 tests/vm/scenarios/nvmet-perf.sh [ROUNDS [SECS [BINARY]]]
set -u

addr=${QSM_VM_ADDR:-192.0.2.1}
adrfam=ipv4
[[ $addr == *:* ]] && adrfam=ipv6
transport=${QSM_VM_TRANSPORT:-rxe}
dev=${QSM_VM_DEV:-${transport}0}
out=${QSM_VM_OUT:-/tmp}
rounds=${1:-2}
secs=${2:-4}
bin=${3:-./examples/nvmet/qsm-nvmet}
qport=4420
sport=4422
kport=4421
nqn=nqn.2024-01.io.rdma-qsm:nvmet-perf
knqn=nqn.2024-01.io.rdma-qsm:kernel-nvmet
snqn=nqn.2024-01.io.rdma-qsm:nvmet-perf-srq
tlog=$out/nvmet-perf.log
slog=$out/nvmet-perf-srq.log
tmp=${TMPDIR:-/tmp}
cfg=/sys/kernel/config/nvmet
nullb=/sys/kernel/config/nullb/qsmperf
# shellcheck source=tests/vm/nvme-lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../nvme-lib.sh" || { echo "FAIL: tests/vm/nvme-lib.sh not found"; exit 1; }

nvme_host_ready fio
[[ $rounds =~ ^[1-9][0-9]*$ && $secs =~ ^[1-9][0-9]*$ ]] || fail "ROUNDS and SECS: positive integers"

step "kernel target: nvmet-rdma on $addr:$kport, namespace a 64 MiB memory-backed null_blk"
for m in nvmet nvmet_rdma null_blk; do
	[[ -d /sys/module/$m ]] || timeout 20 modprobe "$m" || fail "cannot load $m"
done
[[ -d $cfg && -d /sys/kernel/config/nullb ]] || fail "no configfs for nvmet or null_blk"
mkdir "$nullb" || fail "cannot make a null_blk device"
echo 64 >"$nullb/size" && echo 1 >"$nullb/memory_backed" && echo 512 >"$nullb/blocksize" &&
	echo 1 >"$nullb/power" || fail "cannot configure the null_blk device"
# 6.1 names the disk for its configfs directory (null_blk: disk qsmperf created); older, nullbN
kdev=/dev/qsmperf
[[ -b $kdev ]] || kdev=/dev/nullb$(<"$nullb/index")
[[ -b $kdev ]] || fail "no $kdev"
mkdir "$cfg/subsystems/$knqn" && echo 1 >"$cfg/subsystems/$knqn/attr_allow_any_host" &&
	mkdir "$cfg/subsystems/$knqn/namespaces/1" &&
	echo -n "$kdev" >"$cfg/subsystems/$knqn/namespaces/1/device_path" &&
	echo 1 >"$cfg/subsystems/$knqn/namespaces/1/enable" || fail "cannot make the kernel's subsystem"
mkdir "$cfg/ports/1" && echo rdma >"$cfg/ports/1/addr_trtype" && echo "$adrfam" >"$cfg/ports/1/addr_adrfam" &&
	echo "$addr" >"$cfg/ports/1/addr_traddr" && echo "$kport" >"$cfg/ports/1/addr_trsvcid" &&
	ln -s "$cfg/subsystems/$knqn" "$cfg/ports/1/subsystems/$knqn" || fail "cannot make the kernel's port"
kernel_down() {
	rm -f "$cfg/ports/1/subsystems/$knqn" && rmdir "$cfg/ports/1" &&
		echo 0 >"$cfg/subsystems/$knqn/namespaces/1/enable" &&
		rmdir "$cfg/subsystems/$knqn/namespaces/1" "$cfg/subsystems/$knqn" &&
		echo 0 >"$nullb/power" && rmdir "$nullb"
}

# the SRQ one first (target_start's log and pid are then the other's)
tlog=$slog
target_start -a "$addr" -p "$sport" -n "$snqn" -s 64M -Q 1024
spid=$tpid
tlog=$out/nvmet-perf.log
target_start -a "$addr" -p "$qport" -n "$nqn" -s 64M
nvme_connect "$nqn" "$qport"
qns=$ns
nvme_connect "$snqn" "$sport"
sns=$ns
grep -q "shared receive queue of 1024 capsules" "$slog" || fail "qsm-nvmet -Q made no shared receive queue"
grep "shared receive queue of" "$slog" | sed 's/^/   /'
nvme_connect "$knqn" "$kport"
kns=$ns

# fio_iops DEV RW BS QD: one job's IOPS into iops (terse v3: read IOPS field 8, write IOPS 49)
fio_iops() {
	local f=$1 rw=$2 bs=$3 qd=$4 line
	line=$(timeout $((secs + 30)) fio --name=j --filename="$f" --direct=1 --ioengine=libaio \
		--rw="$rw" --bs="$bs" --iodepth="$qd" --size=64m --ramp_time=1 --runtime="$secs" \
		--time_based --norandommap --randrepeat=0 --output-format=terse --terse-version=3 \
		2>"$tmp/fio.err") || { cat "$tmp/fio.err"; fail "fio $rw $bs qd $qd on $f failed"; }
	case $rw in
	randread | read) iops=$(cut -d';' -f8 <<<"$line") ;;
	*) iops=$(cut -d';' -f49 <<<"$line") ;;
	esac
	[[ $(cut -d';' -f5 <<<"$line") == 0 && $iops =~ ^[0-9]+$ && $iops -gt 0 ]] ||
		fail "fio $rw $bs qd $qd on $f: error or no I/O ($line)"
}

jobs=(
	"randread_4k_qd1 randread 4k 1" "randread_4k_qd32 randread 4k 32"
	"randwrite_4k_qd1 randwrite 4k 1" "randwrite_4k_qd32 randwrite 4k 32"
	"read_128k_qd8 read 128k 8" "write_128k_qd8 write 128k 8"
)
ratios=()
for j in "${jobs[@]}"; do
	read -r name rw bs qd <<<"$j"
	step "$name: fio $rw $bs iodepth $qd, $rounds x ($secs s each: qsm, qsm-srq, kernel, rotating)"
	qsum=0 ssum=0 ksum=0
	for ((r = 1; r <= rounds; r++)); do
		# round r starts with target r mod 3: each goes first, second and last in turn
		for ((i = 0; i < 3; i++)); do
			case $(((r + i) % 3)) in
			1) fio_iops "$qns" "$rw" "$bs" "$qd"; q=$iops ;;
			2) fio_iops "$sns" "$rw" "$bs" "$qd"; sq=$iops ;;
			0) fio_iops "$kns" "$rw" "$bs" "$qd"; k=$iops ;;
			esac
		done
		echo "   round $r: qsm $q IOPS, qsm-srq $sq IOPS, kernel $k IOPS"
		qsum=$((qsum + q)) ssum=$((ssum + sq)) ksum=$((ksum + k))
	done
	ratio=$(awk -v a="$qsum" -v b="$ksum" 'BEGIN { printf "%.2f", a / b }')
	sratio=$(awk -v a="$ssum" -v b="$ksum" 'BEGIN { printf "%.2f", a / b }')
	echo "   qsm $((qsum / rounds)) IOPS, qsm-srq $((ssum / rounds)) IOPS, kernel $((ksum / rounds)) IOPS (means)"
	ratios+=("ratio nvmet_$name qsm/kernel $ratio" "ratio nvmet_srq_$name qsm-srq/kernel $sratio")
done

nvme_disconnect "$knqn"
nvme_disconnect "$nqn"
nvme_disconnect "$snqn"
kernel_down || fail "cannot take the kernel's target down"
target_stop
grep -E "RDMA READs that waited" "$tlog" | tail -n 1 | sed 's/.*; RDMA/   RDMA/'
tlog=$slog tpid=$spid
target_stop
grep -E "shared receive queues made" "$tlog" | tail -n 1 | sed 's/.*; shared/   qsm-srq: shared/'
printf '%s\n' "${ratios[@]}"
echo "PASS: nvmet-perf: ${#jobs[@]} fio jobs, $rounds rounds each, qsm-nvmet (own receives, and -Q) and the kernel's nvmet-rdma in one boot"
