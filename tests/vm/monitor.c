/* rdma-qsm VM test: the rdmacm fabric's device monitor on the real kernel RDMA stack.
 * N queues LIVE and idle: how often each ctx wakes (no periodic tick: 0.0/s by design).  Then
 * `rdma link delete`, every queue in RECONNECT_WAIT, and `rdma link add`: how long after it
 * returned DEVICE_ADDED reached the client ctx (the kernel's uevent, not a 1 s poll), and the
 * reconnect.  Then the address path: the device deleted again, the netdev's address deleted,
 * the device added back without it (usable by nobody), and the address added: DEVICE_ADDED
 * once rdma_cm can bind it (rtnetlink, then RoCE's GID), measured from `ip addr add`'s return.
 *
 *   monitor [N [TRACE_FILE]]     N queues (default 100); trace to TRACE_FILE ("-" = stdout,
 *                                default: no trace).  Env: QSM_VM_DEV (rxe0), QSM_VM_NETDEV
 *                                (veth0), QSM_VM_ADDR (192.0.2.1), QSM_MONITOR_PORT (7473),
 *                                QSM_MONITOR_IDLE_MS (10000).
 * Prints `idle wakeups/s X.X` (the client ctx, N active queues; the server's on its own line)
 * and `device_added latency_ms X` (after rdma link add; the address path's on its own line).
 * Exit 0 only if every check passed.  Needs root (rdma link, ip addr) and a soft-RoCE device.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <qsm/qsm.h>

#include "common.h"

#define CONNECT_LIMIT_MS 60000
#define SETTLE_MS 2000            /* after all are LIVE: the CQs go cold, the last events */
#define CMD_LIMIT_MS 30000
#define GAP_LIMIT_MS 10000
#define RECONNECT_LIMIT_MS 60000
#define CLOSE_LIMIT_MS 30000
#define TIMERS_LIMIT_MS 30000    /* the connect's timers, left in the ctxs' heaps, run out */
#define NOADDR_MS 1500            /* the device back without its address: the queues' tries fail */

struct queue {
	bool released;
};

static void client_release(struct qsm_conn *q)
{
	((struct queue *)qsm_conn_user(q))->released = true;
}

/* The base class: connect, READY at once, reconnect with backoff. */
static const struct qsm_class client_class = {
	.name = "monitor_client",
	.super = &qsm_base_class,
	.release = client_release,
};

static const struct qsm_class server_class = {
	.name = "monitor_server",
	.super = &qsm_base_class,
};

/* When the client ctx first dispatched DEVICE_ADDED since `watching` was set (vm_now). */
static bool watching;
static double added_at;

static void client_trace(const struct qsm_trace_record *r, void *arg)
{
	if (watching && !added_at && r->event && !strcmp(r->event, "DEVICE_ADDED"))
		added_at = vm_now();
	vm_trace_print(r, arg);
}

/*
 * The host loop a storage target runs: sleep on the ctx fds until one is readable or a ctx's
 * timer is due, then dispatch.  Every return of epoll_wait before the window's end is a
 * wake-up of the ctx it was for (its fd, or its timer).
 */
static void idle_window(struct qsm_ctx *ctx[2], int ms, unsigned wakes[2], unsigned timer_wakes[2])
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	double end = vm_now() + ms / 1000.0;

	for (int i = 0; i < 2; i++) {
		wakes[i] = timer_wakes[i] = 0;
		epoll_ctl(ep, EPOLL_CTL_ADD, qsm_ctx_fd(ctx[i]),
			  &(struct epoll_event){ .events = EPOLLIN, .data.u32 = (uint32_t)i });
	}
	for (;;) {
		struct epoll_event evs[2];
		double left = end - vm_now();
		int wait = (int)(left * 1000) + 1, who = -1, n;

		if (left <= 0)
			break;
		for (int i = 0; i < 2; i++) {
			int t = qsm_ctx_next_timeout_ms(ctx[i]);

			if (t >= 0 && t < wait) {
				wait = t;
				who = i;
			}
		}
		n = epoll_wait(ep, evs, 2, wait);
		for (int k = 0; k < n; k++)
			wakes[evs[k].data.u32]++;
		if (n == 0 && who >= 0) {
			wakes[who]++;
			timer_wakes[who]++;
		}
		if (n == 0 && who < 0)
			continue;    /* the window's end */
		for (int i = 0; i < 2; i++)
			while (qsm_ctx_dispatch(ctx[i], 64) > 0)
				;
	}
	close(ep);
}

static double run_cmd(struct qsm_ctx *server, struct qsm_ctx *client, char *const argv[], int *st)
{
	double t = vm_run_dispatching(server, client, argv, CMD_LIMIT_MS, st);

	vm_check(t >= 0 && vm_exit_code(*st) == 0, "%s %s %s %s: %.3f s, exit %d", argv[0], argv[1], argv[2],
		 argv[3] ? argv[3] : "", t, vm_exit_code(*st));
	return t;
}

/* The device deleted while both ctxs dispatch, and every client queue in the gap. */
static bool delete_device(struct qsm_ctx *server, struct qsm_ctx *client, struct qsm_conn **q, unsigned n,
			  const char *dev)
{
	int st = 0;
	double t = vm_rdma_link_delete(server, client, dev, CMD_LIMIT_MS, &st);

	vm_check(t >= 0 && vm_exit_code(st) == 0, "rdma link delete %s: %.3f s, exit %d", dev, t, vm_exit_code(st));
	if (t < 0 || vm_exit_code(st))
		return false;
	t = vm_wait_all(server, client, q, n, QSM_CM_RECONNECT_WAIT, GAP_LIMIT_MS);
	vm_check(t >= 0, "%u/%u client queues in RECONNECT_WAIT", vm_count_state(q, n, QSM_CM_RECONNECT_WAIT), n);
	return t >= 0;
}

/* How long after `cmd` (started at t0, took `took` s) returned DEVICE_ADDED reached the client
 * ctx, in ms (negative: before it returned); printed as `device_added latency_ms X`. */
static double added_latency(const char *label, const char *cmd, double t0, double took)
{
	double ms = (added_at - (t0 + took)) * 1000;

	vm_check(added_at > 0, "DEVICE_ADDED reached the client ctx after %s", cmd);
	if (added_at <= 0)
		return -1e9;
	printf("device_added latency_ms%s %.1f\n", label, ms);
	printf("   (after %s returned, which took %.0f ms: DEVICE_ADDED %.1f ms after it started)\n", cmd,
	       took * 1000, (added_at - t0) * 1000);
	return ms;
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100;
	const char *dev = vm_env("QSM_VM_DEV", "rxe0"), *netdev = vm_env("QSM_VM_NETDEV", "veth0");
	const char *ip = vm_env("QSM_VM_ADDR", "192.0.2.1");
	int idle_ms = atoi(vm_env("QSM_MONITOR_IDLE_MS", "10000"));
	struct sockaddr_storage addr;
	bool addr_ok = vm_parse_addr(&addr, ip, "QSM_MONITOR_PORT", "7473");
	char cidr[64];
	char *addr_del[] = { "ip", "addr", "del", cidr, "dev", (char *)netdev, NULL };
	/* IPv6: added with duplicate address detection, as a host adds one (tentative for about
	 * a second): DEVICE_ADDED comes when DAD ends, and reaches the queues waiting in the gap
	 * and those resolving (the kernel parks their resolution until resolve_ms otherwise:
	 * tests/vm/README.md).  QSM_MONITOR_DAD=0 adds it `nodad`, usable at once. */
	char *addr_add[] = { "ip", "addr", "add", cidr, "dev", (char *)netdev, NULL, NULL };
	struct qsm_ctx *server, *client, *both[2];
	struct qsm_listener *l;
	struct qsm_conn **q;
	struct queue *u;
	unsigned wakes[2] = { 0, 0 }, twakes[2];
	double t0, t, t_connect, t_add = -1, t_relive = -1, t_addr = -1, t_relive2 = -1;
	double lat_add = -1e9, lat_addr = -1e9;
	int st = 0;

	vm_init_stdio();
	setenv("QSM_RDMACM_STATS", "1", 0);   /* the fabric says whether its monitor runs */
	if (!n || n > 10000 || !addr_ok || idle_ms <= 0) {
		fprintf(stderr, "usage: monitor [N (1..10000) [TRACE_FILE|-]]\n");
		return 2;
	}
	snprintf(cidr, sizeof(cidr), "%s/%d", ip, addr.ss_family == AF_INET6 ? 64 : 24);
	if (addr.ss_family == AF_INET6 && !strcmp(vm_env("QSM_MONITOR_DAD", "1"), "0"))
		addr_add[6] = "nodad";
	if (vm_trace_open(argc, argv) < 0)
		return 2;
	q = calloc(n, sizeof(*q));
	u = calloc(n, sizeof(*u));
	if (!q || !u || vm_ctxs_new(&server, &client) < 0)
		return 1;
	qsm_ctx_set_trace(client, client_trace, "client");
	both[0] = client;
	both[1] = server;
	if (vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
			    .cls = &server_class, .backlog = 1024,
			    .relisten = { .initial_delay_ms = 500, .max_delay_ms = 1000 } }, ip, &l) < 0)
		return 1;

	/* ---- N queues LIVE, then idle ---- */
	for (unsigned i = 0; i < n; i++)
		if (vm_conn_start(client, &(struct qsm_conn_opts){ .cls = &client_class,
				  .dst = (struct sockaddr *)&addr,
				  .policy = { .initial_delay_ms = 1000, .max_delay_ms = 2000, .jitter_pct = 20 },
				  .user = &u[i] }, i, &q[i]) < 0)
			return 1;
	t_connect = vm_wait_all(server, client, q, n, QSM_CM_LIVE, CONNECT_LIMIT_MS);
	vm_check(t_connect >= 0, "%u/%u client queues LIVE after %.3f s", vm_count_state(q, n, QSM_CM_LIVE), n,
		 t_connect);
	if (vm_failures)
		goto out;
	vm_pump_for(server, client, SETTLE_MS);
	/* the timers the connect armed (a state's timeout, left lazily in the ctx's heap when the
	 * state is left) run out first: those are the runtime's, not a periodic wake-up */
	t0 = vm_now();
	idle_window(both, SETTLE_MS, wakes, twakes);
	while ((qsm_ctx_next_timeout_ms(client) >= 0 || qsm_ctx_next_timeout_ms(server) >= 0) &&
	       vm_now() - t0 < TIMERS_LIMIT_MS / 1000.0)
		vm_pump(server, client);
	printf("== timers left from the connect: client next %d ms, server next %d ms (-1: none), %.1f s after "
	       "the queues were LIVE and %u + %u wake-ups\n", qsm_ctx_next_timeout_ms(client),
	       qsm_ctx_next_timeout_ms(server), vm_now() - t0 + SETTLE_MS / 1000.0, wakes[0], wakes[1]);
	printf("== idle: %u LIVE queues, each ctx asleep on its fd for %d ms\n", n, idle_ms);
	idle_window(both, idle_ms, wakes, twakes);
	printf("   wake-ups: client %u (%u of them a timer of the ctx), server %u (%u)\n", wakes[0], twakes[0],
	       wakes[1], twakes[1]);
	printf("idle wakeups/s %.1f\n", wakes[0] * 1000.0 / idle_ms);
	printf("idle wakeups/s (the server ctx, %u passive queues) %.1f\n", n, wakes[1] * 1000.0 / idle_ms);
	/* the 1 s device-list poll woke each ctx once a second: 1.0 */
	vm_check(wakes[0] * 1000.0 / idle_ms < 0.5 && wakes[1] * 1000.0 / idle_ms < 0.5,
		 "idle ctxs woke %u (client) and %u (server) times in %d ms", wakes[0], wakes[1], idle_ms);
	vm_check(vm_count_state(q, n, QSM_CM_LIVE) == n, "%u/%u still LIVE", vm_count_state(q, n, QSM_CM_LIVE), n);

	/* ---- the device deleted and added back: DEVICE_ADDED from the uevent ---- */
	printf("== rdma link delete %s, then add\n", dev);
	if (!delete_device(server, client, q, n, dev))
		goto out;
	watching = true;
	added_at = 0;
	t0 = vm_now();
	t_add = vm_rdma_link_add(server, client, dev, netdev, CMD_LIMIT_MS, &st);
	vm_check(t_add >= 0 && vm_exit_code(st) == 0, "rdma link add: %.3f s, exit %d", t_add, vm_exit_code(st));
	t_relive = vm_wait_all(server, client, q, n, QSM_CM_LIVE, RECONNECT_LIMIT_MS);
	watching = false;
	lat_add = added_latency("", "rdma link add", t0, t_add);
	vm_check(t_relive >= 0, "%u/%u client queues LIVE again, %.3f s after rdma link add returned",
		 vm_count_state(q, n, QSM_CM_LIVE), n, t_relive);
	if (vm_failures)
		goto out;

	/* ---- the address path: the device back before its address ---- */
	printf("== rdma link delete %s; ip addr del %s; rdma link add %s; ip addr add %s\n", dev, cidr, dev, cidr);
	if (!delete_device(server, client, q, n, dev))
		goto out;
	run_cmd(server, client, addr_del, &st);
	t = vm_rdma_link_add(server, client, dev, netdev, CMD_LIMIT_MS, &st);
	vm_check(t >= 0 && vm_exit_code(st) == 0, "rdma link add without an address: %.3f s, exit %d", t,
		 vm_exit_code(st));
	vm_pump_for(server, client, NOADDR_MS);
	vm_check(vm_count_state(q, n, QSM_CM_LIVE) == 0, "no queue LIVE while %s has no address (%u)", netdev,
		 vm_count_state(q, n, QSM_CM_LIVE));
	watching = true;
	added_at = 0;
	t0 = vm_now();
	t_addr = run_cmd(server, client, addr_add, &st);
	t_relive2 = vm_wait_all(server, client, q, n, QSM_CM_LIVE, RECONNECT_LIMIT_MS);
	watching = false;
	lat_addr = added_latency(" (address added after the device)", "ip addr add", t0, t_addr);
	vm_check(t_relive2 >= 0, "%u/%u client queues LIVE again, %.3f s after ip addr add returned",
		 vm_count_state(q, n, QSM_CM_LIVE), n, t_relive2);

out:
	/* ---- close ---- */
	for (unsigned i = 0; i < n; i++)
		if (q[i])
			qsm_conn_destroy(q[i]);
	t0 = vm_now();
	while ((vm_now() - t0) * 1000 < CLOSE_LIMIT_MS) {
		struct qsm_counters cc;

		qsm_ctx_counters(client, &cc, sizeof(cc));
		if (!cc.queues_live)
			break;
		vm_pump(server, client);
	}
	{
		struct qsm_counters cc, sc;

		qsm_ctx_counters(client, &cc, sizeof(cc));
		qsm_ctx_counters(server, &sc, sizeof(sc));
		vm_check(!cc.unexpected && !sc.unexpected, "unexpected: client %llu, server %llu",
			 (unsigned long long)cc.unexpected, (unsigned long long)sc.unexpected);
	}
	qsm_listener_destroy(l);
	vm_ctxs_free(server, client);
	free(q);
	free(u);
	printf("== summary: N=%u connect %.3f s, idle wakeups/s %.1f (server %.1f), device_added latency_ms %.1f "
	       "(address %.1f), LIVE again %.3f s after rdma link add returned (%.3f s after ip addr add): %s\n",
	       n, t_connect, wakes[0] * 1000.0 / idle_ms, wakes[1] * 1000.0 / idle_ms, lat_add, lat_addr, t_relive,
	       t_relive2, vm_failures ? "FAILED" : "PASS");
	return vm_failures ? 1 : 0;
}
