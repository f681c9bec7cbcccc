#!/bin/bash
# VM scenario: two-device failover (tests/vm/twodev.c). A second netdev with its own address and a
# second RDMA device on it, made here (guest/init brings up only the first): group A's queues on
# device 1, group B's on device 2; `rdma link delete` of device 1: A's queues reconnect through
# device 2 (qsm_conn_set_dst(3) in their device_removed handler) while B's take no edge and keep
# exchanging; device 1 re-added: no queue moves, new queues connect through it. Twice: a listener
# per address, then one on the wildcard address. Device 2's address: 198.51.100.1/24, or on IPv6
# (QSM_VM_FAMILY=6) 2001:db8:1::1/64 added nodad, as guest/init adds veth0's.
#   tests/vm/run tests/vm/scenarios/twodev.sh [N [BINARY]]
# qsm-vm: timeout 420
# N queues per group (50). The binary: BINARY, else $QSM_TWODEV_BIN, else ./tests/vm/twodev (run
# from the top of the build tree). Traces: $QSM_VM_OUT/twodev-{each,wildcard}.trace.
set -u
# tests/vm/run copies only this file into the guest: the library comes from the (read-only) host tree.
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

command -v ip >/dev/null || fail "ip (iproute2) not installed"
vm_setup twodev 50 QSM_TWODEV_BIN "$@"

# Device 2: its own veth pair, address and subnet. Both ends of one pair in one namespace, each
# with an address, made address resolution time out (-110, /work/shared/TESTBED.md): so a pair
# of its own, the address on one end only, as veth0's, and every connection rxe loopback.
transport=${QSM_VM_TRANSPORT:-rxe}
dev2=${transport}1
if [[ ${QSM_VM_FAMILY:-4} == 6 ]]; then
	addr2=2001:db8:1::1 cidr2=2001:db8:1::1/64 nodad=nodad
else
	addr2=198.51.100.1 cidr2=198.51.100.1/24 nodad=
fi
ip link add veth2 type veth peer name veth3 || fail "ip link add veth2 type veth"
ip link set veth2 up || fail "ip link set veth2 up"
ip link set veth3 up || fail "ip link set veth3 up"
# shellcheck disable=SC2086 # nodad: one word or none
ip addr add "$cidr2" dev veth2 $nodad || fail "ip addr add $cidr2 dev veth2 $nodad"
rdma link add "$dev2" type "$transport" netdev veth2 || fail "rdma link add $dev2 type $transport netdev veth2"
end=$((${EPOCHREALTIME/[.,]/} + 10000000))
until rdma link show "$dev2/1" 2>/dev/null | grep -q 'state ACTIVE'; do
	((${EPOCHREALTIME/[.,]/} < end)) || fail "$dev2 is not ACTIVE"
	sleep 0.1
done
rdma link show
ip -br addr show
export QSM_TWODEV_DEV2=$dev2 QSM_TWODEV_ADDR2=$addr2

for listen in each wildcard; do
	trace=$out/twodev-$listen.trace
	log=$out/twodev-$listen.log
	echo "==== listeners: $listen"
	export QSM_TWODEV_LISTEN=$listen
	vm_run_test twodev 180 --link-show
	# The trace says the same as the program's counts: every group A queue took DEVICE_REMOVAL
	# out of LIVE and came back, no group B queue took it or connected twice.
	a_removed=$(grep -cE '^client .* twodev_a#[0-9]+ LIVE --DEVICE_REMOVAL--> RECONNECT_WAIT' "$trace")
	a_live=$(grep -cE '^client .* twodev_a#[0-9]+ CONNECTED --READY--> LIVE' "$trace")
	b_removed=$(grep -cE '^client .* twodev_b#.* --DEVICE_REMOVAL' "$trace")
	b_live=$(grep -cE '^client .* twodev_b#[0-9]+ CONNECTED --READY--> LIVE' "$trace")
	echo "   trace: group A $a_removed removals, $a_live LIVE edges; group B $b_removed removals, $b_live LIVE edges"
	# group A: n queues LIVE twice each, and 4 probes once after the re-add
	[[ $a_removed == "$n" && $a_live == $((2 * n + 4)) && $b_removed == 0 && $b_live == "$n" ]] ||
		fail "trace: want group A $n removals and $((2 * n + 4)) LIVE edges, group B none and $n"
	grep -m1 -E '^client .* twodev_a#[0-9]+ LIVE --DEVICE_REMOVAL' "$trace"
	grep -E '^client .* twodev_a#[0-9]+ CONNECTED --READY--> LIVE' "$trace" | sed -n "$((n + 1))p"
done
rdma link show
echo "PASS: two devices: group A failed over to $dev2, group B took no edge, both listener kinds"
