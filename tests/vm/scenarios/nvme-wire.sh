#!/bin/bash
# qsm-vm: hosts 2
# qsm-vm: timeout 600
# qsm-vm: transports rxe siw (siw: with the test VM's fix of siw's TX-thread race, tests/vm/siw-tx-thread-user-copy.patch)
# qsm-vm: families 4 6:siw (IPv6 on one transport, for make check's time; QSM_VM_EVERY_FAMILY=1 runs it on both)
# VM scenario on two guests joined by a virtual wire (tests/vm/run --hosts 2) (issue 18): a runs
# examples/nvmet/qsm-nvmet (keepalive 2 s: -K 2000), b is the Linux kernel's NVMe-oF host,
# connected across the wire with a 1 s reconnect delay and a 120 s controller loss timeout.
#   1. fio's verified random writes through 1% loss on both hosts' egress (tc netem): every
#      write completes, and the verify pass (on the clean wire) reads every block back intact;
#   2. a partition (100% loss both ways) for 20 s, longer than the RC retry limit (~15 s on
#      rxe), in the middle of fio's writes: the host's keep-alive fails, it tears its queues down
#      and connects again once the wire heals (its requests wait and are sent again); the
#      target's old controller ends on its Keep Alive Timer (no command for the host's KATO:
#      the association's queues disconnected, the controller freed) -- its queues' keepalive
#      probes cannot tell it on rxe, whose QPs take the host's REQ retry_count 7 as "retry
#      forever"; fio's verify pass, from its saved state, reads back every acknowledged write
#      intact.
# Then the host disconnects (its controller freed), the target stops: exit 0, no unexpected
# event, no protocol error. Both hosts run this script; QSM_VM_HOST says which one they are.
#   tests/vm/run --hosts 2 tests/vm/scenarios/nvme-wire.sh
set -u

me=${QSM_VM_ADDR:-192.0.2.1}
peer=${QSM_VM_PEER:-}
host=${QSM_VM_HOST:-}
transport=${QSM_VM_TRANSPORT:-rxe}
dev=${QSM_VM_DEV:-${transport}0}
netdev=${QSM_VM_NETDEV:-eth0}
out=${QSM_VM_OUT:-/tmp}
bin=./examples/nvmet/qsm-nvmet
port=4420
nqn=nqn.2024-01.io.rdma-qsm:nvme-wire
tlog=$out/nvme-wire-target.log
tmp=${TMPDIR:-/tmp}
cut=20
# lib.sh (the rendezvous), then nvme-lib.sh, whose fail shows the target's log
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }
# shellcheck source=tests/vm/nvme-lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../nvme-lib.sh" || { echo "FAIL: tests/vm/nvme-lib.sh not found"; exit 1; }

[[ -n $host && -n $peer && -n ${QSM_VM_SYNC:-} ]] || fail "two hosts only: tests/vm/run --hosts 2"
# netem_all NETEM: every packet this host sends goes through tc netem NETEM ("" removes it)
netem_all() {
	tc qdisc del dev "$netdev" root 2>/dev/null
	# shellcheck disable=SC2086 # netem's words
	[[ -z $1 ]] || tc qdisc add dev "$netdev" root netem $1
}
vm_sync up 120 || fail "the peer never came up (120 s)"

if [[ $host == a ]]; then
	addr=$me
	[[ -x $bin ]] || fail "$bin not found (make, from the top of the build tree)"
	wait_for 10 dev_active || fail "$dev is not ACTIVE"
	export QSM_TRACE=1 QSM_RDMACM_STATS=1
	target_start -a "$addr" -p "$port" -n "$nqn" -s 64M -v -K 2000
	vm_post listening
	# b says when: 1% loss, then the cut
	vm_await loss1 120 || fail "b never asked for the lossy wire"
	netem_all "loss 1%"
	vm_post loss1-on
	vm_await loss1-end 300 || fail "b never ended the lossy step"
	netem_all ""
	vm_await cut 300 || fail "b never cut the wire"
	netem_all "loss 100%"
	t0=$(usec)
	vm_await heal 60 || fail "b never healed the wire"
	netem_all ""
	echo "   the wire was cut for $(ms_since "$t0") ms"
	vm_await finished 400 || fail "b did not finish"
	step "target: its queues' edges out of LIVE"
	grep -Eo -- 'LIVE --[A-Z_]+[^>]*--> [A-Z_]+' "$tlog" | grep -v 'TIMEOUT--> LIVE' | sort | uniq -c | sed 's/^/   /'
	echo "   keepalive probes taken: $(grep -c -- 'LIVE --TIMEOUT--> LIVE' "$tlog")"
	# The controller of before the cut: the host asked for retry_count 7 in its REQ
	# (nvme-rdma), the target's QPs take the REQ's count, and rxe takes 7 as "retry forever", so
	# the old queues' probes never fail (tests/vm/README.md); the controller's Keep Alive Timer
	# ends it (the host's KATO, 5 s by default, and KAS's second).  Every controller is freed.
	grep -q "keep alive timeout, ending the association" "$tlog" ||
		fail "the old controller's Keep Alive Timer never ended it"
	wait_for 20 all_freed || fail "the target did not free every controller"
	step "target: controllers created $(grep -c '(admin queue' "$tlog"), freed $(grep -c 'controller .* freed' "$tlog")"
	grep -E 'keep alive timeout' "$tlog" | sed 's/^/   /'
	kill -TERM "$tpid"
	vm_wait_bounded "$tpid" 10
	trc=$?
	tpid=
	grep -E "counters|stopping" "$tlog" | sed 's/^/   /'
	grep -h '^qsm rdmacm: keepalive' "$tlog" | sed 's/^/   /'
	[[ $trc == 0 ]] || fail "the target exited $trc"
	grep -q "qsm counters: unexpected 0," "$tlog" || fail "the target counted unexpected events"
	grep -q "protocol errors 0" "$tlog" || fail "the target counted protocol errors"
	target_identities
	vm_post stopped
	echo "PASS: host a: the target served through loss and a partition, the host's old controller ended by its Keep Alive Timer, every controller freed, a clean stop"
	exit 0
fi

# ---- b: the kernel's NVMe-oF host ------------------------------------------------------------
addr=$peer
tlog=/dev/null
nvme_host_ready fio
vm_await listening 60 || fail "a never listened"
nvme_connect "$nqn" "$port" --reconnect-delay=1 --ctrl-loss-tmo=120
cd "$tmp" || fail "cd $tmp"

# fio_check NAME WRITE_LOG VERIFY_LOG VERIFY_RC: every block fio's verify flags must be a write
# that failed (EIO: never acknowledged); any other is an acknowledged write lost or torn
fio_check() {
	local lost
	grep -o 'write offset=[0-9]*' "$2" | cut -d= -f2 | sort -u >"$tmp/$1-failed"
	grep -o 'verify: .* at file [^ ]* offset [0-9]*' "$3" | awk '{ print $NF }' | sort -u >"$tmp/$1-flagged"
	lost=$(comm -13 "$tmp/$1-failed" "$tmp/$1-flagged" | wc -l)
	grep -E ' read: IOPS=|err=' "$3" | head -n 3 | sed 's/^/   fio: /'
	echo "   writes that failed: $(wc -l <"$tmp/$1-failed"); blocks the verify flagged:" \
		"$(wc -l <"$tmp/$1-flagged"), of them among the failed writes: $(($(wc -l <"$tmp/$1-flagged") - lost))" \
		"(fio exit $4)"
	((lost == 0)) || { comm -13 "$tmp/$1-failed" "$tmp/$1-flagged" | head -n 5 | sed 's/^/   lost at offset /'
		fail "$1: $lost acknowledged write(s) lost or torn"; }
	grep -q ' read: IOPS=' "$3" || fail "$1: the verify pass read nothing"
	(($4 == 0)) || [[ -s $tmp/$1-flagged ]] || { tail -n 20 "$3"; fail "$1: fio's verify pass failed (exit $4) for no block"; }
}

# ---- 1. 1% loss ----------------------------------------------------------------------------------
step "1: fio's verified random writes through 1% loss on both hosts' egress"
vm_post loss1
vm_await loss1-on 30 || fail "a never set up its netem"
netem_all "loss 1%"
job=(--name=lossy --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 --size=8M
	--offset=0 --verify=crc32c --verify_state_save=1 --randseed=1111)
t0=$(usec)
timeout 300 fio "${job[@]}" --filename="$ns" --do_verify=0 --rate_iops=800 >"$tmp/fio-lossy.log" 2>&1
frc=$?
grep -E 'err=|write:' "$tmp/fio-lossy.log" | head -n 3 | sed 's/^/   fio: /'
tc -s qdisc show dev "$netdev" | grep -E 'Sent|dropped' | head -n 1 | sed 's/^/   tc: /'
echo "   fio exited $frc ($(ms_since "$t0") ms)"
((frc == 0)) || fail "fio's writes through 1% loss failed"
# the wire is clean again for the read-back (under loss each lost packet waits out rxe's ~2 s
# retransmit timer: a verify pass there took minutes)
netem_all ""
vm_post loss1-end
timeout 300 fio "${job[@]}" --filename="$ns" --verify_only --verify_state_load=1 >"$tmp/fio-lossy-verify.log" 2>&1
vrc=$?
fio_check lossy "$tmp/fio-lossy.log" "$tmp/fio-lossy-verify.log" "$vrc"
[[ -s $tmp/lossy-flagged || $vrc != 0 ]] && fail "1: the verify pass flagged blocks written through a lossy wire"
echo "   ok: every write through 1% loss read back intact"

# ---- 2. a partition under fio's writes -------------------------------------------------------------
step "2: fio's verified random writes; 3 s in, the wire is cut for $cut s, then heals"
job=(--name=cut --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 --size=24M
	--offset=24M --verify=crc32c --verify_state_save=1 --randseed=2222)
kmsg0=$(dmesg | wc -l)
t0=$(usec)
timeout 300 fio "${job[@]}" --filename="$ns" --do_verify=0 --rate_iops=500 >"$tmp/fio-cut.log" 2>&1 &
fpid=$!
sleep 3
kill -0 "$fpid" 2>/dev/null || { cat "$tmp/fio-cut.log"; fail "fio ended before the cut"; }
netem_all "loss 100%"
vm_post cut
tc0=$(usec)
sleep "$cut"
netem_all ""
vm_post heal
echo "   the wire healed after $(ms_since "$tc0") ms"
# the host's way back: its controller LIVE again (bounded)
ctrl_live() { [[ $(cat "/sys/class/nvme/$ctrl/state" 2>/dev/null) == live ]]; }
wait_for 90 ctrl_live || fail "$ctrl not live again 90 s after the heal ($(cat "/sys/class/nvme/$ctrl/state" 2>/dev/null))"
echo "   $ctrl live again $(ms_since "$tc0") ms after the cut began"
dmesg | tail -n +$((kmsg0 + 1)) | grep -E 'nvme nvme[0-9]+:' | head -n 8 | sed 's/^/   dmesg: /'
wait "$fpid"
frc=$?
grep -E 'err=|write:' "$tmp/fio-cut.log" | head -n 3 | sed 's/^/   fio: /'
echo "   fio exited $frc ($(ms_since "$t0") ms after it started)"
ls "$tmp"/*cut*verify.state >/dev/null 2>&1 || fail "fio saved no verify state"
step "fio: verify pass from the saved state: every acknowledged write read back"
timeout 300 fio "${job[@]}" --filename="$ns" --verify_only --verify_state_load=1 >"$tmp/fio-cut-verify.log" 2>&1
vrc=$?
fio_check cut "$tmp/fio-cut.log" "$tmp/fio-cut-verify.log" "$vrc"
echo "   ok: every acknowledged write read back intact through the partition"

nvme_disconnect "$nqn"
vm_post finished
vm_await stopped 120 || fail "a's target did not stop cleanly (its log: share-a)"
echo "PASS: host b: fio verified through 1% loss and a ${cut} s partition"
