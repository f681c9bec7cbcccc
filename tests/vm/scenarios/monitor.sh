#!/bin/bash
# VM scenario: the rdmacm fabric's device monitor (tests/vm/monitor.c): N LIVE queues idle for
# 10 s (`idle wakeups/s`, 0.0 by design: no periodic tick), then DEVICE_ADDED after `rdma link
# add` from the kernel's uevent and after `ip addr add` from rtnetlink (`device_added
# latency_ms`), every queue LIVE again after each.
#   tests/vm/run tests/vm/scenarios/monitor.sh [N [BINARY]]
# The binary: BINARY, else $QSM_MONITOR_BIN, else ./tests/vm/monitor (run from the top of the
# build tree). The transition trace goes to $QSM_VM_OUT/monitor.trace; its tail is printed on failure.
set -u
# tests/vm/run copies only this file into the guest: the library comes from the (read-only) host tree.
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

command -v ip >/dev/null || fail "ip (iproute2) not installed"
vm_setup monitor 100 QSM_MONITOR_BIN "$@"
vm_run_test monitor 240 --link-show
# Both fabrics ran on the monitor, not on the 1 s poll (QSM_RDMACM_STATS, at each ctx's end).
mon=$(grep -c 'device monitor: uevent + rtnetlink' "$log")
echo "== the fabrics' device monitors (QSM_RDMACM_STATS)"
grep 'device monitor' "$log"
[[ $mon == 2 ]] || fail "$mon of 2 fabrics ran the device monitor"
grep -E '^client .* RECONNECT_WAIT --DEVICE_ADDED' "$trace" | head -3
rdma link show
ip -br addr show dev "${QSM_VM_NETDEV:-veth0}"
echo "PASS: device monitor: no idle wake-up, DEVICE_ADDED from the uevent and from the address"
