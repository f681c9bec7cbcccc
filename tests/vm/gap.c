/* rdma-qsm VM test: device removal in the reconnect gap, on the real kernel RDMA stack (rdmacm fabric).
 * N queues connect to a listener and register an MR each (qp_ready, qsm_conn_reg_mr); then the
 * server goes down (listener destroyed, every passive queue disconnected), so every client queue
 * sits in RECONNECT_WAIT -- no cm_id, no QP, only its MR on the device -- retrying with backoff
 * into a port nobody listens on.  `rdma link delete` must then complete while the process lives
 * on: the device registry's sentinel id delivers DEVICE_REMOVAL, every queue takes the gap's
 * self-loop RECONNECT_WAIT --DEVICE_REMOVAL--> RECONNECT_WAIT once (or, if a retry was under
 * way, that attempt's DEVICE_REMOVAL edge into RECONNECT_WAIT), its device_removed handler
 * runs once, its MR is deregistered (qsm_mr_valid() 0) and the registries are empty.  After
 * `rdma link add` and a new listener every queue is LIVE again, with its MR registered anew.
 *
 *   gap [N [TRACE_FILE]]     N queues (default 100); trace to TRACE_FILE ("-" = stdout,
 *                            default: no trace).  Env: QSM_VM_DEV (rxe0), QSM_VM_NETDEV
 *                            (veth0), QSM_VM_ADDR (192.0.2.1), QSM_GAP_PORT (7472).
 * Exit 0 only if every check passed.  Needs root (rdma link) and a soft-RoCE device.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <qsm/qsm.h>

#include "common.h"

#define CONNECT_LIMIT_MS 60000
#define DOWN_LIMIT_MS 30000       /* server down: every queue in the gap, retrying at the cap */
#define DELETE_LIMIT_MS 5000      /* the requirement */
#define DELETE_WAIT_MS 30000      /* how long we wait anyway, to show a hung delete's stack */
#define SETTLE_MS 2000            /* after the delete: the last removal edges */
#define LISTEN_LIMIT_MS 20000     /* a new listener after the re-add */
#define RECONNECT_LIMIT_MS 60000
#define CLOSE_LIMIT_MS 30000

#define RETRY_INITIAL_MS 200
#define RETRY_MAX_MS 1000
/* attempts (failed, since the last ESTABLISHED) after which the next delay is the cap:
 * 200, 400, 800, 1000 */
#define ATTEMPTS_AT_CAP 4
#define BUF_LEN 4096

/* Per client queue, outside the queue (qsm_conn_user) so that it outlives it. */
struct queue {
	unsigned index;
	struct qsm_conn *q;         /* NULL once released */
	unsigned lives;             /* LIVE.enter calls */
	unsigned regs;              /* qsm_conn_reg_mr() successes */
	unsigned removals;          /* device_removed handler calls */
	int removal_from, removal_to;   /* the edge of the last one */
	int mr_valid_in_handler;    /* qsm_mr_valid() while device_removed ran (still registered) */
	unsigned errors;
	double gap_entered;         /* last RECONNECT_WAIT.enter (vm_now) */
	bool released;
	struct qsm_mr *mr;
	char buf[BUF_LEN];
};

/* The server's passive queues, to disconnect them when the server goes down. */
static struct qsm_conn **passive;
static unsigned npassive_max;

/* The buffer registered on the queue's current device: again after the device went away. */
static int reg_buffer(struct qsm_conn *q, struct queue *u)
{
	bool needed = !qsm_mr_valid(u->mr);   /* counted only when it registers anew */
	int r = vm_reg_buffer(q, &u->mr, u->buf, sizeof(u->buf));

	if (r == 0 && needed)
		u->regs++;
	return r;
}

/* The QP exists, nothing is sent: the MR is registered here, so it lives on into the gap. */
static int client_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);

	(void)ev;
	if (reg_buffer(q, u) < 0)
		u->errors++;
	return 0;
}

static int client_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	((struct queue *)qsm_conn_user(q))->lives++;
	return 0;
}

static int client_gap(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	((struct queue *)qsm_conn_user(q))->gap_entered = vm_now();
	return 0;
}

static int client_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);

	u->removals++;
	u->removal_from = ev->from;
	u->removal_to = ev->to;
	u->mr_valid_in_handler = qsm_mr_valid(u->mr);
	return 0;
}

static void client_release(struct qsm_conn *q)
{
	struct queue *u = qsm_conn_user(q);

	u->released = true;
	u->q = NULL;
	u->mr = NULL;   /* freed with the queue */
}

/* The base class's behaviour (connect, READY at once), plus what this test checks. */
static const struct qsm_class client_class = {
	.name = "gap_client",
	.super = &qsm_base_class,
	.active = {
		[QSM_CM_LIVE] = { .enter = client_live },
		[QSM_CM_RECONNECT_WAIT] = { .enter = client_gap },
	},
	.qp_ready = client_qp_ready,
	.device_removed = client_device_removed,
	.release = client_release,
};

static int server_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	for (unsigned i = 0; i < npassive_max; i++)
		if (!passive[i]) {
			passive[i] = q;
			break;
		}
	return 0;
}

static void server_release(struct qsm_conn *q)
{
	for (unsigned i = 0; i < npassive_max; i++)
		if (passive[i] == q)
			passive[i] = NULL;
}

/* The server side: the base class (accepts every request); its live queues are remembered. */
static const struct qsm_class server_class = {
	.name = "gap_server",
	.super = &qsm_base_class,
	.passive = {
		[QSM_ACCEPT_LIVE] = { .enter = server_live },
	},
	.release = server_release,
};

static unsigned count_passive(void)
{
	unsigned c = 0;

	for (unsigned i = 0; i < npassive_max; i++)
		c += passive[i] != NULL;
	return c;
}

static unsigned sum_errors(const struct queue *u, unsigned n)
{
	unsigned c = 0;

	for (unsigned i = 0; i < n; i++)
		c += u[i].errors;
	return c;
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100;
	const char *dev = vm_env("QSM_VM_DEV", "rxe0"), *netdev = vm_env("QSM_VM_NETDEV", "veth0");
	const char *ip = vm_env("QSM_VM_ADDR", "192.0.2.1");
	struct sockaddr_storage addr;
	bool addr_ok = vm_parse_addr(&addr, ip, "QSM_GAP_PORT", "7472");
	struct qsm_listener_opts lopts = { .addr = (struct sockaddr *)&addr, .cls = &server_class,
					   .backlog = 1024,
					   .relisten = { .initial_delay_ms = 500, .max_delay_ms = 1000 } };
	struct qsm_ctx *server, *client;
	struct qsm_listener *l = NULL;
	struct qsm_conn **q;
	struct qsm_counters cc, sc, cc_down;
	double t0, t_connect = -1, t_down = -1, t_delete = -1, t_add = -1, t_listen = -1, t_reconnect = -1;
	double t_close = -1, quiet = -1;
	struct queue *u;
	unsigned live;
	int r, st = 0;

	vm_init_stdio();
	if (!n || n > 10000 || !addr_ok) {
		fprintf(stderr, "usage: gap [N (1..10000) [TRACE_FILE|-]]\n");
		return 2;
	}
	if (vm_trace_open(argc, argv) < 0)
		return 2;
	q = calloc(n, sizeof(*q));
	u = calloc(n, sizeof(*u));
	npassive_max = 2 * n;
	passive = calloc(npassive_max, sizeof(*passive));
	if (!q || !u || !passive)
		return 2;

	if (vm_ctxs_new(&server, &client) < 0 || vm_listener_new(server, &lopts, ip, &l) < 0)
		return 1;

	/* ---- phase 1: connect to a live server; each queue registers its MR in qp_ready ---- */
	printf("== %u queues connect to %s port %u (retry policy %u ms .. %u ms, no jitter)\n", n, ip,
	       vm_addr_port(&addr), RETRY_INITIAL_MS, RETRY_MAX_MS);
	for (unsigned i = 0; i < n; i++) {
		u[i].index = i;
		u[i].removal_from = u[i].removal_to = -1;
		if (vm_conn_start(client, &(struct qsm_conn_opts){ .cls = &client_class,
				  .dst = (struct sockaddr *)&addr,
				  .policy = { .initial_delay_ms = RETRY_INITIAL_MS, .max_delay_ms = RETRY_MAX_MS },
				  .user = &u[i] }, i, &q[i]) < 0)
			return 1;
		u[i].q = q[i];
	}
	t0 = vm_now();
	while ((live = vm_count_state(q, n, QSM_CM_LIVE)) < n && (vm_now() - t0) * 1000 < CONNECT_LIMIT_MS)
		vm_pump(server, client);
	t_connect = vm_now() - t0;
	/* the server's ESTABLISHED (the RTU's) may still be on its way: each pump is bounded in time */
	while (count_passive() < n && (vm_now() - t0) * 1000 < CONNECT_LIMIT_MS)
		vm_pump(server, client);
	qsm_ctx_counters(server, &sc, sizeof(sc));
	vm_check(live == n, "%u/%u client queues LIVE after %.3f s", live, n, t_connect);
	vm_check(count_passive() == n, "server holds %u live passive queues (expected %u)", count_passive(), n);
	{
		unsigned valid = 0;

		for (unsigned i = 0; i < n; i++)
			valid += qsm_mr_valid(u[i].mr) && u[i].regs == 1;
		vm_check(valid == n && !sum_errors(u, n), "%u/%u queues registered their MR in qp_ready (errors %u)",
		         valid, n, sum_errors(u, n));
	}
	if (vm_failures)
		goto out;

	/* ---- phase 2: the server goes down: no listener, every passive queue disconnected ---- */
	printf("== server down: listener destroyed, %u passive queues disconnected\n", count_passive());
	t0 = vm_now();
	vm_check(qsm_listener_destroy(l) == 0, "qsm_listener_destroy");
	l = NULL;
	for (unsigned i = 0; i < npassive_max; i++)
		if (passive[i] && qsm_conn_disconnect(passive[i]) < 0)
			printf("   passive queue %u: disconnect refused (state %s)\n", i,
			       qsm_conn_state_name(passive[i]));
	/* Wait until the server holds nothing, and the clients' retries have reached the cap and
	 * one burst of them has just failed: every queue in the gap, the next retry ~1 s away. */
	for (;;) {
		double last = 0;
		unsigned gap = 0, capped = 0, noqp = 0;

		vm_pump(server, client);
		for (unsigned i = 0; i < n; i++) {
			if (qsm_conn_state(q[i]) != QSM_CM_RECONNECT_WAIT)
				continue;
			gap++;
			capped += qsm_conn_attempts(q[i]) >= ATTEMPTS_AT_CAP;
			noqp += qsm_conn_qp_state(q[i]) == -ENOENT;
			if (u[i].gap_entered > last)
				last = u[i].gap_entered;
		}
		qsm_ctx_counters(server, &sc, sizeof(sc));
		if (gap == n && capped == n && noqp == n && sc.queues_live == 0 && sc.devices_live == 0 &&
		    vm_now() - last < 0.25) {
			t_down = vm_now() - t0;
			quiet = vm_now() - last;
			break;
		}
		if ((vm_now() - t0) * 1000 >= DOWN_LIMIT_MS) {
			printf("   after %d ms: %u in RECONNECT_WAIT (%u at the backoff cap, %u without QP), "
			       "server queues %llu devices %llu\n", DOWN_LIMIT_MS, gap, capped, noqp,
			       (unsigned long long)sc.queues_live, (unsigned long long)sc.devices_live);
			break;
		}
	}
	vm_check(t_down >= 0, "server down after %.3f s; all %u client queues in RECONNECT_WAIT, no QP, "
	         "retries at the %u ms cap; the last one entered the gap %.0f ms ago", t_down, n,
	         RETRY_MAX_MS, quiet * 1000);
	qsm_ctx_counters(client, &cc_down, sizeof(cc_down));
	qsm_ctx_counters(server, &sc, sizeof(sc));
	vm_check(sc.queues_live == 0 && sc.devices_live == 0, "server holds no queue (%llu) and no device (%llu)",
	         (unsigned long long)sc.queues_live, (unsigned long long)sc.devices_live);
	vm_check(cc_down.devices_live == 1, "client device registry holds the device of the gap (%llu)",
	         (unsigned long long)cc_down.devices_live);
	{
		unsigned valid = 0;

		for (unsigned i = 0; i < n; i++)
			valid += qsm_mr_valid(u[i].mr);
		vm_check(valid == n, "%u/%u queues hold their MR in the gap", valid, n);
	}
	printf("   client counters so far: reconnects %llu, unexpected %llu, action_errors %llu\n",
	       (unsigned long long)cc_down.reconnects, (unsigned long long)cc_down.unexpected,
	       (unsigned long long)cc_down.action_errors);
	if (vm_failures)
		goto out;

	/* ---- phase 3: remove the device with every queue in the gap ---- */
	printf("== rdma link delete %s (limit %d ms), dispatching meanwhile\n", dev, DELETE_LIMIT_MS);
	t_delete = vm_rdma_link_delete(server, client, dev, DELETE_WAIT_MS, &st);
	vm_check(t_delete >= 0 && t_delete * 1000 < DELETE_LIMIT_MS, "rdma link delete %s returned after %.3f s "
	         "(limit %d ms)", dev, t_delete, DELETE_LIMIT_MS);
	if (t_delete < 0)
		goto out;
	vm_check(vm_exit_code(st) == 0, "rdma link delete exit status %d", vm_exit_code(st));
	t0 = vm_now();
	while ((vm_now() - t0) * 1000 < SETTLE_MS)
		vm_pump(server, client);
	{
		unsigned once = 0, selfloop = 0, to_gap = 0, invalid = 0, valid_in_handler = 0, nodev = 0;

		for (unsigned i = 0; i < n; i++) {
			struct qsm_mr *m = NULL;

			once += u[i].removals == 1;
			selfloop += u[i].removal_from == QSM_CM_RECONNECT_WAIT &&
				    u[i].removal_to == QSM_CM_RECONNECT_WAIT;
			to_gap += u[i].removal_to == QSM_CM_RECONNECT_WAIT;
			invalid += u[i].mr && !qsm_mr_valid(u[i].mr);
			valid_in_handler += u[i].mr_valid_in_handler == 1;
			/* no device now: a registration must be refused */
			r = qsm_conn_reg_mr(q[i], u[i].buf, sizeof(u[i].buf), QSM_ACCESS_LOCAL_WRITE, &m);
			nodev += r == -ENODEV;
			if (r == 0)
				qsm_mr_dereg(m);
		}
		vm_check(once == n, "%u/%u device_removed handlers ran exactly once", once, n);
		/* a queue whose retry was under way (a connect into the port nobody listens on: a few
		 * in flight at any moment, more on a loaded host) hears it on that attempt's cm_id */
		vm_check(to_gap == n && selfloop >= n / 2, "%u/%u queues took DEVICE_REMOVAL into RECONNECT_WAIT, "
		         "%u of them the gap's self-loop RECONNECT_WAIT --DEVICE_REMOVAL--> RECONNECT_WAIT (the "
		         "rest from a retry under way)", to_gap, n, selfloop);
		vm_check(valid_in_handler == n, "%u/%u MRs still valid inside device_removed", valid_in_handler, n);
		vm_check(invalid == n, "%u/%u MRs invalid after the removal (qsm_mr_valid 0)", invalid, n);
		vm_check(nodev == n, "%u/%u qsm_conn_reg_mr in the deviceless gap: -ENODEV", nodev, n);
		for (unsigned i = 0; i < n && (once < n || to_gap < n); i++)
			if (u[i].removals != 1 || u[i].removal_to != QSM_CM_RECONNECT_WAIT)
				printf("   queue %u: %u removals, last %s -> %s\n", i, u[i].removals,
				       vm_cm_state_name(u[i].removal_from), vm_cm_state_name(u[i].removal_to));
	}
	qsm_ctx_counters(server, &sc, sizeof(sc));
	qsm_ctx_counters(client, &cc, sizeof(cc));
	vm_check(cc.device_removals - cc_down.device_removals == n, "client counters: %llu DEVICE_REMOVAL edges",
	         (unsigned long long)(cc.device_removals - cc_down.device_removals));
	vm_check(cc.devices_live == 0 && sc.devices_live == 0, "device registries empty (client %llu, server %llu)",
	         (unsigned long long)cc.devices_live, (unsigned long long)sc.devices_live);
	vm_check(cc.queues_live == n, "client still holds %llu queues", (unsigned long long)cc.queues_live);
	vm_check(kill(getpid(), 0) == 0, "process alive (pid %d)", (int)getpid());
	if (vm_failures)
		goto out;

	/* ---- phase 4: the device and the server come back ---- */
	printf("== rdma link add %s type rxe netdev %s; a new listener; waiting for %u queues (limit %d ms)\n",
	       dev, netdev, n, RECONNECT_LIMIT_MS);
	t0 = vm_now();
	t_add = vm_rdma_link_add(server, client, dev, netdev, DELETE_WAIT_MS, &st);
	vm_check(t_add >= 0 && vm_exit_code(st) == 0, "rdma link add: %.3f s, exit %d", t_add,
	         vm_exit_code(st));
	if (t_add < 0)
		goto out;
	/* binding the listener's address fails until the device serves it */
	{
		double next = 0;
		int last_err = 0;

		while ((vm_now() - t0) * 1000 < LISTEN_LIMIT_MS) {
			if (vm_now() >= next) {
				r = qsm_listener_new(server, &lopts, &l);
				if (r == 0) {
					t_listen = vm_now() - t0;
					break;
				}
				last_err = r;
				l = NULL;
				next = vm_now() + 0.1;
			}
			vm_pump(server, client);
		}
		vm_check(l != NULL, "new listener after %.3f s (last error: %s)", t_listen,
		         last_err ? strerror(-last_err) : "none");
	}
	if (!l)
		goto out;
	while ((live = vm_count_state(q, n, QSM_CM_LIVE)) < n && (vm_now() - t0) * 1000 < RECONNECT_LIMIT_MS)
		vm_pump(server, client);
	if (live == n)
		t_reconnect = vm_now() - t0;
	vm_check(live == n, "%u/%u client queues LIVE again, %.3f s after rdma link add started", live, n,
	         t_reconnect);
	vm_check(qsm_listener_state(l) == QSM_LISTENER_LISTENING, "listener LISTENING");
	{
		unsigned valid = 0, twice = 0;

		for (unsigned i = 0; i < n; i++) {
			valid += qsm_mr_valid(u[i].mr);
			twice += u[i].regs == 2 && u[i].lives == 2;
		}
		vm_check(valid == n && twice == n && !sum_errors(u, n),
		         "%u/%u MRs registered again on the new device (%u with 2 registrations and 2 LIVEs; errors %u)",
		         valid, n, twice, sum_errors(u, n));
	}
	qsm_ctx_counters(client, &cc, sizeof(cc));
	qsm_ctx_counters(server, &sc, sizeof(sc));
	vm_check(cc.devices_live == 1 && sc.devices_live == 1 && sc.queues_live == n,
	         "registries hold the new device (client %llu, server %llu); server queues %llu",
	         (unsigned long long)cc.devices_live, (unsigned long long)sc.devices_live,
	         (unsigned long long)sc.queues_live);
	if (vm_failures)
		goto out;

	/* ---- phase 5: close for good ---- */
	printf("== %u queues disconnect (limit %d ms)\n", n, CLOSE_LIMIT_MS);
	for (unsigned i = 0; i < n; i++)
		if (qsm_conn_disconnect(q[i]) < 0)
			u[i].errors++;
	t0 = vm_now();
	for (;;) {
		unsigned closed = 0;

		for (unsigned i = 0; i < n; i++) {
			if (u[i].released)
				q[i] = NULL;
			closed += u[i].released;
		}
		qsm_ctx_counters(server, &sc, sizeof(sc));
		if (closed == n && sc.queues_live == 0) {
			t_close = vm_now() - t0;
			break;
		}
		if ((vm_now() - t0) * 1000 >= CLOSE_LIMIT_MS)
			break;
		vm_pump(server, client);
	}
	qsm_ctx_counters(client, &cc, sizeof(cc));
	vm_check(t_close >= 0 && cc.queues_live == 0 && cc.devices_live == 0 && sc.devices_live == 0,
	         "all closed after %.3f s (client queues %llu, server queues %llu, devices %llu/%llu)", t_close,
	         (unsigned long long)cc.queues_live, (unsigned long long)sc.queues_live,
	         (unsigned long long)cc.devices_live, (unsigned long long)sc.devices_live);

out:
	qsm_ctx_counters(server, &sc, sizeof(sc));
	qsm_ctx_counters(client, &cc, sizeof(cc));
	printf("== counters: client reconnects %llu, device_removals %llu, unexpected %llu, action_errors %llu, "
	       "dropped %llu, DEVICE_ADDED events %llu, devices_live %llu, queues_live %llu; server device_removals %llu, unexpected %llu, "
	       "devices_live %llu, queues_live %llu\n",
	       (unsigned long long)cc.reconnects, (unsigned long long)cc.device_removals,
	       (unsigned long long)cc.unexpected, (unsigned long long)cc.action_errors,
	       (unsigned long long)cc.dropped, (unsigned long long)cc.events[QSM_EV_DEVICE_ADDED],
	       (unsigned long long)cc.devices_live,
	       (unsigned long long)cc.queues_live, (unsigned long long)sc.device_removals,
	       (unsigned long long)sc.unexpected, (unsigned long long)sc.devices_live,
	       (unsigned long long)sc.queues_live);
	if (vm_failures)
		for (unsigned i = 0; i < n; i++)
			if (q[i] && qsm_conn_state(q[i]) != QSM_CM_LIVE)
				printf("   queue %u: %s, %u removals, %u attempts, %u lives, %u regs\n", i,
				       qsm_conn_state_name(q[i]), u[i].removals, qsm_conn_attempts(q[i]),
				       u[i].lives, u[i].regs);
	vm_ctxs_free(server, client);
	free(q);
	free(u);
	free(passive);
	printf("== summary: N=%u connect %.3f s, server down -> all in the gap %.3f s, delete %.3f s, "
	       "re-add %.3f s, new listener %.3f s and all LIVE %.3f s after re-add started, close %.3f s: %s\n",
	       n, t_connect, t_down, t_delete, t_add, t_listen, t_reconnect, t_close,
	       vm_failures ? "FAILED" : "PASS");
	return vm_failures ? 1 : 0;
}
