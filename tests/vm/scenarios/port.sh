#!/bin/bash
# VM scenario: a port's asynchronous events as edges (tests/vm/port.c): N LIVE queues, `ip link
# set veth0 down` (IBV_EVENT_PORT_ERR: every queue fails over at once, `port_err failover_ms`),
# `ip link set veth0 up` (PORT_ACTIVE: the gap retries now, not after its 120 s backoff,
# `port_active relive_ms`), `ip addr add` (GID_CHANGE: the device entry's self-loop, no queue
# moves); unexpected 0.  On siw the link's fall ends every connection's TCP stream first (LIVE
# --DISCONNECTED--> on both sides, PORT_ERR read after, for no queue), PORT_ACTIVE retries the
# gap as on rxe and every queue is LIVE again (asserted: siw's CM works after a flap), and there
# is no GID_CHANGE step (iWARP has no GID table; siw reports nothing for `ip addr add`). On IPv6
# the second address is 2001:db8::77/64, added nodad, and veth0 keeps its addresses over the flap
# (keep_addr_on_down, as IPv4's are kept).
#   tests/vm/run tests/vm/scenarios/port.sh [N [BINARY]]
# The binary: BINARY, else $QSM_PORT_BIN, else ./tests/vm/port (run from the top of the build
# tree). The transition trace goes to $QSM_VM_OUT/port.trace; its tail is printed on failure.
set -u
# tests/vm/run copies only this file into the guest: the library comes from the (read-only) host tree.
# shellcheck source=tests/vm/lib.sh
. "${QSM_VM_SCENARIO_DIR:-$(dirname "$0")}/../lib.sh" || { echo "FAIL: tests/vm/lib.sh not found"; exit 1; }

command -v ip >/dev/null || fail "ip (iproute2) not installed"
vm_setup port 20 QSM_PORT_BIN "$@"
# IPv6: a link that goes down loses its static IPv6 addresses unless keep_addr_on_down is set
# (IPv4's stay): without it, the flap would also take 2001:db8::1 away, and no queue could
# reconnect after `up` (tried: siw 0/20 LIVE again). A host with static addresses keeps them.
if [[ ${QSM_VM_FAMILY:-4} == 6 ]]; then
	sysctl -qw "net.ipv6.conf.${QSM_VM_NETDEV:-veth0}.keep_addr_on_down=1" || fail "sysctl keep_addr_on_down=1"
fi
vm_run_test port 180 --link-show
grep -E '^client .* LIVE --PORT_ERR' "$trace" | head -2
grep -E '^client .* (RECONNECT_WAIT|CONNECTING) --PORT_ACTIVE' "$trace" | head -3
grep -E 'GID_CHANGE' "$trace" | head -2
if [[ ${QSM_VM_TRANSPORT:-rxe} == siw ]]; then
	echo "PASS: port events on siw: the link's fall ends every connection at once, PORT_ACTIVE retries now and every queue is LIVE again"
else
	echo "PASS: port events: PORT_ERR fails over at once, PORT_ACTIVE retries now, GID_CHANGE moves no queue"
fi
