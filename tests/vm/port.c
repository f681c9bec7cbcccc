/* rdma-qsm VM test: a port's asynchronous events on the real kernel RDMA stack, as edges.
 * N queues LIVE, then `ip link set NETDEV down`: soft-RoCE reports IBV_EVENT_PORT_ERR, and every
 * queue with a QP on the port takes a PORT_ERR edge at once (LIVE --PORT_ERR--> DRAINING, then
 * the gap; the passive ones close), rather than after the RC retry limit.  (With the client and
 * the server on one device, a passive queue's drain may disconnect its peer first: the
 * client's PORT_ERR is then a DRAINING self-loop, or comes after its QP went, and is dropped.)
 * The client's reconnect backoff is long (BACKOFF_MS), so the queues wait in RECONNECT_WAIT
 * until `ip link set NETDEV up`: IBV_EVENT_PORT_ACTIVE, RECONNECT_WAIT --PORT_ACTIVE-->
 * (retry_now) at once, not after the backoff.  Not asserted: that those attempts connect.
 * They cannot on soft-RoCE (Debian 12's 6.1): after a flap that broke live connections, the
 * device's CM receives no MAD at all.  Found with rdma-core's rping alone, no qsm: a live rping
 * pair across `ip link set veth0 down`, then after `up` a fresh rping pair times out (its REQ
 * sent: rxe's sent_pkts grows, rcvd_pkts does not), while rping across a flap with no live
 * connection connects at once.  In this scenario's state a function_graph trace of rxe_rcv shows
 * every packet dropped by check_type_state (the GSI QP's responder not ready) although `rdma res
 * show qp lqpn 1` says RTS: most likely the MAD layer's send-error recovery (SQE -> RTS) on a QP
 * that rxe had put in ERR, which restores the requester only.  Re-creating the device (`rdma
 * link delete` + `add`, removal.sh) is what brings the CM back.  The scenario prints how many
 * queues are LIVE after RELIVE_LOOK_MS (`port_active relive N/M`: 0 on rxe 6.1).
 * (Pulling the cable instead, `ip link set veth1 down`, cuts the carrier only: soft-RoCE's
 * loopback traffic does not pass the netdev, and on soft-iWARP nothing is reported.)  Then `ip addr add` of a second
 * address: IBV_EVENT_GID_CHANGE, the device's registry entry's self-loop in each ctx, and no
 * queue moves.  No event without an edge (unexpected 0) in either ctx.
 * On soft-iWARP (QSM_VM_TRANSPORT=siw) the link's fall ends the connections' TCP streams before
 * siw's PORT_ERR is read: every queue on both sides leaves LIVE by DISCONNECTED (asserted), and
 * PORT_ERR then finds no id of a queue.  PORT_ACTIVE comes when the link returns (ibv_asyncwatch
 * shows both), the gap retries at once, and siw's CM connects after the flap: every queue LIVE
 * again within RELIVE_LOOK_MS (asserted there).  siw has no GID table and reports nothing for
 * `ip addr add`: no GID_CHANGE step.
 *
 *   port [N [TRACE_FILE]]        N queues (default 20); trace to TRACE_FILE ("-" = stdout,
 *                                default: no trace).  Env: QSM_VM_NETDEV (veth0), QSM_VM_ADDR
 *                                (192.0.2.1), QSM_PORT_PORT (7475), QSM_PORT_EXTRA_ADDR
 *                                (192.0.2.77).
 * Prints `port_err failover_ms X` (link down to every client queue out of LIVE) and
 * `port_active relive N/M` (queues LIVE RELIVE_LOOK_MS after the link came up).
 * Exit 0 only if every check passed.  Needs root (ip link) and a soft-RoCE device.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <qsm/qsm.h>

#include "common.h"

#define CONNECT_LIMIT_MS 60000
#define CMD_LIMIT_MS 30000
#define FAILOVER_LIMIT_MS 10000   /* the RC retry limit would take longer; PORT_ERR is at once */
#define GAP_LIMIT_MS 20000
#define BACKOFF_MS 120000         /* the gap's own retry: far beyond RELIVE_LIMIT_MS */
#define RELIVE_LOOK_MS 10000
#define GID_LIMIT_MS 10000
#define CLOSE_LIMIT_MS 30000
#define UP_SETTLE_MS 2000

static const struct qsm_class client_class = {
	.name = "port_client",
	.super = &qsm_base_class,
};

static const struct qsm_class server_class = {
	.name = "port_server",
	.super = &qsm_base_class,
};

/* What each side's trace showed: its edges of interest, and events with no edge. */
struct tally {
	unsigned port_err_out_of_live;   /* LIVE --PORT_ERR--> DRAINING */
	unsigned port_err;               /* any PORT_ERR edge */
	unsigned lost_out_of_live;       /* LIVE --PORT_ERR|DISCONNECTED--> (siw: its streams end first) */
	unsigned port_active;            /* RECONNECT_WAIT --PORT_ACTIVE--> RECONNECT_WAIT */
	unsigned port_active_connecting; /* CONNECTING --PORT_ACTIVE--> RECONNECT_WAIT */
	unsigned gid_change;             /* the device's GID_CHANGE self-loop */
	unsigned queue_edges;            /* edges of queues (kind conn or passive) */
	unsigned unexpected;
};
static struct tally tallies[2];   /* client, server */

static void trace(const struct qsm_trace_record *r, void *arg)
{
	struct tally *t = &tallies[strcmp(arg, "client") != 0];
	bool queue = !strcmp(r->kind, "conn") || !strcmp(r->kind, "passive");

	vm_trace_print(r, arg);
	if (!r->event || !strcmp(r->kind, "fabric"))
		return;
	if (!r->to) {
		t->unexpected++;
		return;
	}
	t->queue_edges += queue;
	if (!strcmp(r->event, "PORT_ERR")) {
		t->port_err++;
		t->port_err_out_of_live += queue && !strcmp(r->from, "LIVE");
	}
	t->lost_out_of_live += queue && !strcmp(r->from, "LIVE") &&
			       (!strcmp(r->event, "PORT_ERR") || !strcmp(r->event, "DISCONNECTED"));
	t->port_active += queue && !strcmp(r->event, "PORT_ACTIVE") && !strcmp(r->from, "RECONNECT_WAIT");
	t->port_active_connecting += queue && !strcmp(r->event, "PORT_ACTIVE") && !strcmp(r->from, "CONNECTING");
	t->gid_change += !strcmp(r->kind, "device") && !strcmp(r->event, "GID_CHANGE");
}

/* `ip ARGS...` while both ctxs dispatch: 0, or -1 after a FAIL line. */
static int ip_cmd(struct qsm_ctx *server, struct qsm_ctx *client, char *const argv[])
{
	int st = 0;
	double t = vm_run_dispatching(server, client, argv, CMD_LIMIT_MS, &st);

	vm_check(t >= 0 && vm_exit_code(st) == 0, "ip %s %s %s %s: %.3f s, exit %d", argv[1], argv[2], argv[3],
		 argv[4] ? argv[4] : "", t, vm_exit_code(st));
	return vm_failures ? -1 : 0;
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 20;
	const char *netdev = vm_env("QSM_VM_NETDEV", "veth0"), *ip = vm_env("QSM_VM_ADDR", "192.0.2.1");
	/* IPv6: a second address in veth0's prefix, added nodad so it is usable (and a GID) at once */
	bool v6 = strchr(ip, ':') != NULL;
	const char *extra = vm_env("QSM_PORT_EXTRA_ADDR", v6 ? "2001:db8::77" : "192.0.2.77");
	char cidr[64];
	struct sockaddr_storage addr;
	bool addr_ok = vm_parse_addr(&addr, ip, "QSM_PORT_PORT", "7475");
	struct qsm_ctx *server, *client;
	struct qsm_listener *l;
	struct qsm_conn **q;
	struct qsm_counters cc, sc;
	double t, t0;
	unsigned edges_before;
	/* soft-iWARP ends its connections' TCP streams as the link goes down, before its PORT_ERR
	 * is read, and has no GID table (no GID_CHANGE); its CM works again after the flap */
	bool iwarp = !strcmp(vm_env("QSM_VM_TRANSPORT", "rxe"), "siw");

	vm_init_stdio();
	if (!n || n > 1000 || !addr_ok) {
		fprintf(stderr, "usage: port [N (1..1000) [TRACE_FILE|-]]\n");
		return 2;
	}
	snprintf(cidr, sizeof(cidr), "%s/%d", extra, v6 ? 64 : 24);
	if (vm_trace_open(argc, argv) < 0)
		return 2;
	q = calloc(n, sizeof(*q));
	if (!q || vm_ctxs_new(&server, &client) < 0)
		return 1;
	qsm_ctx_set_trace(client, trace, "client");
	qsm_ctx_set_trace(server, trace, "server");
	if (vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
			    .cls = &server_class, .backlog = 1024,
			    .relisten = { .initial_delay_ms = 500, .max_delay_ms = 1000 } }, ip, &l) < 0)
		return 1;

	/* ---- N queues LIVE ---- */
	for (unsigned i = 0; i < n; i++)
		if (vm_conn_start(client, &(struct qsm_conn_opts){ .cls = &client_class,
				  .dst = (struct sockaddr *)&addr,
				  .policy = { .initial_delay_ms = BACKOFF_MS, .max_delay_ms = BACKOFF_MS } },
				  i, &q[i]) < 0)
			return 1;
	t = vm_wait_all(server, client, q, n, QSM_CM_LIVE, CONNECT_LIMIT_MS);
	vm_check(t >= 0, "%u/%u client queues LIVE after %.3f s", vm_count_state(q, n, QSM_CM_LIVE), n, t);
	if (vm_failures)
		goto out;
	/* and their passive ends: a passive queue is LIVE once its own ESTABLISHED is dispatched,
	 * which may come after its client's (siw's is asserted on both sides below) */
	t0 = vm_now();
	qsm_ctx_counters(server, &sc, sizeof(sc));
	while (sc.queues_live < n && (vm_now() - t0) * 1000 < CONNECT_LIMIT_MS) {
		vm_pump(server, client);
		qsm_ctx_counters(server, &sc, sizeof(sc));
	}
	vm_check(sc.queues_live == n, "%llu/%u server passive queues LIVE after %.3f s",
		 (unsigned long long)sc.queues_live, n, vm_now() - t0);
	if (vm_failures)
		goto out;

	/* ---- the link down: PORT_ERR, every queue fails over at once ---- */
	printf("== ip link set %s down, %u LIVE queues\n", netdev, n);
	t0 = vm_now();
	if (ip_cmd(server, client, (char *const[]){ "ip", "link", "set", (char *)netdev, "down", NULL }) < 0)
		goto out;
	while (vm_count_state(q, n, QSM_CM_LIVE) > 0 && (vm_now() - t0) * 1000 < FAILOVER_LIMIT_MS)
		vm_pump(server, client);
	t = vm_now() - t0;
	vm_check(vm_count_state(q, n, QSM_CM_LIVE) == 0, "%u/%u client queues left LIVE within %d ms",
		 n - vm_count_state(q, n, QSM_CM_LIVE), n, FAILOVER_LIMIT_MS);
	printf("port_err failover_ms %.1f\n", t * 1000);
	t = vm_wait_all(server, client, q, n, QSM_CM_RECONNECT_WAIT, GAP_LIMIT_MS);
	if (!iwarp)
		vm_check(tallies[0].port_err_out_of_live + tallies[1].port_err_out_of_live >= n,
			 "%u client and %u server queues took LIVE --PORT_ERR--> DRAINING (at least %u in all: "
			 "one side of each connection), PORT_ERR edges in all: client %u, server %u",
			 tallies[0].port_err_out_of_live, tallies[1].port_err_out_of_live, n,
			 tallies[0].port_err, tallies[1].port_err);
	else
		vm_check(tallies[0].lost_out_of_live >= n && tallies[1].lost_out_of_live >= n,
			 "siw: %u client and %u server queues left LIVE by DISCONNECTED or PORT_ERR (each "
			 "side of each connection: siw ends its TCP streams as the link goes down), PORT_ERR "
			 "edges: client %u, server %u", tallies[0].lost_out_of_live,
			 tallies[1].lost_out_of_live, tallies[0].port_err, tallies[1].port_err);
	vm_check(t >= 0, "%u/%u client queues in RECONNECT_WAIT, their retry %d ms away",
		 vm_count_state(q, n, QSM_CM_RECONNECT_WAIT), n, BACKOFF_MS);
	qsm_ctx_counters(server, &sc, sizeof(sc));
	for (int i = 0; i < 2000 && sc.queues_live; i += 10) {
		vm_pump(server, client);
		qsm_ctx_counters(server, &sc, sizeof(sc));
	}
	vm_check(sc.queues_live == 0, "server passive queues closed (%llu left)", (unsigned long long)sc.queues_live);
	if (vm_failures)
		goto out;

	/* ---- the link up: PORT_ACTIVE, the gap retries now, not after the backoff ---- */
	printf("== ip link set %s up\n", netdev);
	t0 = vm_now();
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "ip link set %s up", netdev);
		vm_check(system(cmd) == 0, "%s", cmd);   /* no dispatch meanwhile: see the top */
		usleep(UP_SETTLE_MS * 1000);
	}
	while (tallies[0].port_active < n && (vm_now() - t0) * 1000 < RELIVE_LOOK_MS)
		vm_pump(server, client);
	vm_check(tallies[0].port_active >= n, "%u client queues took RECONNECT_WAIT --PORT_ACTIVE--> (at least %u), "
		 "%.3f s after the link came up (their backoff: %d ms)", tallies[0].port_active, n, vm_now() - t0,
		 BACKOFF_MS);
	while (vm_count_state(q, n, QSM_CM_LIVE) < n && (vm_now() - t0) * 1000 < RELIVE_LOOK_MS)
		vm_pump(server, client);
	printf("port_active relive %u/%u LIVE %.1f s after the link came up (%u CONNECTING; %s)\n",
	       vm_count_state(q, n, QSM_CM_LIVE), n, vm_now() - t0, vm_count_state(q, n, QSM_CM_CONNECTING),
	       iwarp ? "asserted on siw" : "not asserted on rxe: see port.c");
	if (iwarp)
		vm_check(vm_count_state(q, n, QSM_CM_LIVE) == n, "siw: %u/%u client queues LIVE again "
			 "within %d ms of the link's return, long before their %d ms backoff",
			 vm_count_state(q, n, QSM_CM_LIVE), n, RELIVE_LOOK_MS, BACKOFF_MS);
	if (vm_failures)
		goto out;
	if (iwarp) {
		/* `ip addr add` on siw: no async event at all (ibv_asyncwatch shows none) */
		printf("== no GID_CHANGE step on siw: iWARP has no GID table, siw reports nothing\n");
		goto close;
	}

	/* ---- a second address: GID_CHANGE, the device entry's; no queue moves ---- */
	printf("== ip addr add %s dev %s\n", cidr, netdev);
	edges_before = tallies[0].queue_edges + tallies[1].queue_edges;
	tallies[0].gid_change = tallies[1].gid_change = 0;   /* the link's own came before */
	t0 = vm_now();
	if (ip_cmd(server, client, (char *const[]){ "ip", "addr", "add", cidr, "dev", (char *)netdev,
						    v6 ? "nodad" : NULL, NULL }) < 0)
		goto out;
	while (!tallies[0].gid_change && (vm_now() - t0) * 1000 < GID_LIMIT_MS)
		vm_pump(server, client);
	vm_pump_for(server, client, 500);
	/* the client's queues hold its registry entry for the device; the server's has one only
	 * while a passive queue is on the device (else the event is an orphan, counted) */
	vm_check(tallies[0].gid_change > 0, "the device entry's GID_CHANGE self-loop in the client ctx (%u; "
		 "server %u), %.3f s after ip addr add", tallies[0].gid_change, tallies[1].gid_change,
		 vm_now() - t0);
	vm_check(tallies[0].queue_edges + tallies[1].queue_edges == edges_before,
		 "no queue moved on GID_CHANGE (%u queue edges since)",
		 tallies[0].queue_edges + tallies[1].queue_edges - edges_before);
	(void)ip_cmd(server, client, (char *const[]){ "ip", "addr", "del", cidr, "dev", (char *)netdev, NULL });

	/* ---- close ---- */
close:
	for (unsigned i = 0; i < n; i++)
		qsm_conn_disconnect(q[i]);
	t0 = vm_now();
	for (;;) {
		qsm_ctx_counters(client, &cc, sizeof(cc));
		qsm_ctx_counters(server, &sc, sizeof(sc));
		if ((!cc.queues_live && !sc.queues_live) || (vm_now() - t0) * 1000 >= CLOSE_LIMIT_MS)
			break;
		vm_pump(server, client);
	}
	vm_check(!cc.queues_live && !sc.queues_live, "every queue closed (client %llu, server %llu left)",
		 (unsigned long long)cc.queues_live, (unsigned long long)sc.queues_live);
out:
	qsm_ctx_counters(client, &cc, sizeof(cc));
	qsm_ctx_counters(server, &sc, sizeof(sc));
	vm_check(!cc.unexpected && !sc.unexpected && !tallies[0].unexpected && !tallies[1].unexpected,
		 "unexpected 0 (client %llu, server %llu)", (unsigned long long)cc.unexpected,
		 (unsigned long long)sc.unexpected);
	printf("== edges: client PORT_ERR %u, PORT_ACTIVE %u (%u of them in CONNECTING), GID_CHANGE %u; server "
	       "PORT_ERR %u, GID_CHANGE %u\n", tallies[0].port_err, tallies[0].port_active,
	       tallies[0].port_active_connecting, tallies[0].gid_change, tallies[1].port_err,
	       tallies[1].gid_change);
	qsm_listener_destroy(l);
	vm_ctxs_free(server, client);
	free(q);
	return vm_failures ? 1 : 0;
}
