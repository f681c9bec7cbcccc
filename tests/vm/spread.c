/* rdma-qsm VM test: one listener, its requests spread over worker ctxs on their own threads
 * (qsm_listener_spread(3), SPDK's poll groups), on the real kernel RDMA stack.
 *   1. W workers (threads, one ctx each, each in qsm_ctx_run), a listener on the main thread's
 *      server ctx spread over them; N client queues (the main thread's client ctx) connect and
 *      each sends one message, echoed by its passive queue on a worker: every queue LIVE,
 *      every echo back, each worker holding N/W queues (round robin), the listener's ctx none.
 *   2. `rdma link delete` under them: the command returns (every worker's ctx lets go of the
 *      device on its own thread), the clients wait in the gap; `rdma link add`: they connect
 *      again, spread again, every echo back.
 *   3. The clients disconnect: every worker's queues close; the threads stop.
 * Asserts: handed_off == adopted == every request; each ctx's counter identity; no unexpected
 * event, no echo error, in any ctx.
 *   spread [N [TRACE_FILE]]    N queues (default 64); trace to TRACE_FILE ("-" = stdout).
 *   Env: QSM_SPREAD_WORKERS (2, at most 8), QSM_VM_ADDR (192.0.2.1), QSM_SPREAD_PORT (7477),
 *   QSM_VM_DEV (rxe0), QSM_VM_NETDEV (veth0).
 * Exit 0 only if every check passed.  Needs root (rdma link) and an RDMA device.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/qsm.h>

#include "common.h"

#define MAX_WORKERS 8
#define CONNECT_LIMIT_MS 60000
#define ECHO_LIMIT_MS 30000
#define LINK_LIMIT_MS 30000
#define CLOSE_LIMIT_MS 30000

struct worker {
	pthread_t thread;
	struct qsm_ctx *ctx;
	unsigned live, closed, sent, errors;   /* written on its thread, read with atomics */
	int stop;
	struct qsm_counters c;                 /* taken on its thread as it stops */
};
static struct worker workers[MAX_WORKERS];
static unsigned nworkers;

static struct worker *worker_of(struct qsm_conn *q)
{
	struct qsm_ctx *ctx = qsm_conn_ctx(q);

	for (unsigned i = 0; i < nworkers; i++)
		if (workers[i].ctx == ctx)
			return &workers[i];
	return NULL;
}

static void bump(unsigned *v)
{
	__atomic_add_fetch(v, 1, __ATOMIC_RELAXED);
}

static unsigned sum(size_t field)
{
	unsigned s = 0;

	for (unsigned i = 0; i < nworkers; i++)
		s += __atomic_load_n((unsigned *)((char *)&workers[i] + field), __ATOMIC_RELAXED);
	return s;
}

/* ---- the server's passive queues, on the workers ---- */

static unsigned srv_misplaced;   /* a passive queue on a ctx that is no worker's (main thread) */

static int srv_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct worker *w = worker_of(q);

	(void)ev;
	if (!w) {
		srv_misplaced++;
		return 1;
	}
	if (vm_echo_qp_ready(q, qsm_conn_priv(q)) < 0)
		bump(&w->errors);
	return 0;
}

static int srv_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	bump(&worker_of(q)->live);
	return 0;
}

static int srv_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct worker *w = worker_of(q);

	switch (vm_echo_completion(q, qsm_conn_priv(q), wc)) {
	case VM_ECHO_SENT:
		bump(&w->sent);
		break;
	case VM_ECHO_BAD_STATUS:
	case VM_ECHO_POST_FAILED:
		bump(&w->errors);
		break;
	case VM_ECHO_NOTHING:
		break;
	}
	return 0;
}

static void srv_release(struct qsm_conn *q)
{
	bump(&worker_of(q)->closed);
}

static const struct qsm_class server_class = {
	.name = "spread_server",
	.super = &qsm_base_class,
	.priv_size = sizeof(struct vm_echo),
	.passive = { [QSM_ACCEPT_LIVE] = { .enter = srv_live } },
	.qp_ready = srv_qp_ready,
	.completion = srv_completion,
	.release = srv_release,
};

/* ---- the clients, on the main thread ---- */

struct client {
	struct qsm_mr *mr;
	char sbuf[VM_MSG_LEN], rbuf[VM_MSG_LEN + 8];
	unsigned index;
};
static unsigned cli_echoes, cli_errors;

static int cli_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct client *c = qsm_conn_priv(q);
	struct qsm_sge rs;

	(void)ev;
	if (vm_reg_buffer(q, &c->mr, c, sizeof(*c)) < 0)
		return 1;
	rs = vm_sge(c->rbuf, sizeof(c->rbuf), c->mr);
	return qsm_conn_post_recv(q, 1, &rs, 1) < 0;
}

static int cli_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct client *c = qsm_conn_priv(q);
	struct qsm_sge ss;

	(void)ev;
	c->index = (unsigned)(uintptr_t)qsm_conn_user(q);
	snprintf(c->sbuf, sizeof(c->sbuf), "queue %u", c->index);
	ss = vm_sge(c->sbuf, (uint32_t)strlen(c->sbuf) + 1, c->mr);
	if (qsm_conn_post_send(q, 2, &ss, 1, QSM_POST_SIGNALED) < 0)
		cli_errors++;
	return 0;
}

static int cli_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct client *c = qsm_conn_priv(q);
	char want[VM_MSG_LEN + 8];

	if (wc->status == QSM_WC_WR_FLUSH_ERR || wc->wr_id != 1)
		return 0;
	if (wc->status != QSM_WC_SUCCESS) {
		cli_errors++;
		return 0;
	}
	c->rbuf[sizeof(c->rbuf) - 1] = 0;
	snprintf(want, sizeof(want), "echo: queue %u", c->index);
	if (strcmp(c->rbuf, want) != 0)
		cli_errors++;
	else
		cli_echoes++;
	return 0;
}

static const struct qsm_class client_class = {
	.name = "spread_client",
	.super = &qsm_base_class,
	.priv_size = sizeof(struct client),
	.active = { [QSM_CM_LIVE] = { .enter = cli_live } },
	.qp_ready = cli_qp_ready,
	.completion = cli_completion,
};

/* ---- the workers' threads ---- */

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		int r = qsm_ctx_run(w->ctx, 50);

		if (r < 0 && r != -ETIMEDOUT) {
			fprintf(stderr, "worker: qsm_ctx_run: %s\n", strerror(-r));
			bump(&w->errors);
			break;
		}
	}
	qsm_ctx_counters(w->ctx, &w->c, sizeof(w->c));
	return NULL;
}

static bool identity_ok(const struct qsm_counters *c)
{
	return c->popped + c->aborts + c->device_closes == c->dispatched + c->dropped + c->completions;
}

/* Pump the main thread's two ctxs until every client queue is LIVE and `echoes` came back. */
static double wait_echoes(struct qsm_ctx *server, struct qsm_ctx *client, struct qsm_conn **q,
			  unsigned n, unsigned echoes)
{
	double t0 = vm_now(), t = vm_wait_all(server, client, q, n, QSM_CM_LIVE, CONNECT_LIMIT_MS);

	while (t >= 0 && cli_echoes < echoes) {
		if ((vm_now() - t0) * 1000 >= ECHO_LIMIT_MS + CONNECT_LIMIT_MS)
			return -1;
		vm_pump(server, client);
	}
	return t < 0 ? -1 : vm_now() - t0;
}

static void check_spread(struct qsm_ctx *server, struct qsm_ctx *client, unsigned n, unsigned round)
{
	unsigned each = n / nworkers;

	/* a passive queue may echo before its own ESTABLISHED is dispatched (its receive was
	 * posted in qp_ready): its LIVE may come a moment after the client's echo */
	for (int i = 0; i < 500 && sum(offsetof(struct worker, live)) < round * n; i++)
		vm_pump_for(server, client, 10);

	for (unsigned i = 0; i < nworkers; i++) {
		unsigned live = __atomic_load_n(&workers[i].live, __ATOMIC_RELAXED);

		vm_check(live >= round * each && live <= round * (each + 1),
			 "worker %u: %u passive queues went LIVE on its thread (round %u: %u or %u each)", i,
			 live, round, round * each, round * (each + 1));
	}
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 64;
	const char *ip = vm_env("QSM_VM_ADDR", "192.0.2.1"), *dev = vm_env("QSM_VM_DEV", "rxe0");
	const char *netdev = vm_env("QSM_VM_NETDEV", "veth0");
	struct sockaddr_storage addr;
	bool addr_ok = vm_parse_addr(&addr, ip, "QSM_SPREAD_PORT", "7477");
	struct qsm_ctx *server, *client, *ctxs[MAX_WORKERS];
	struct qsm_listener *l;
	struct qsm_conn **q;
	struct qsm_counters sc, cc;
	unsigned handed = 0, adopted = 0, unexpected = 0;
	int st = 0;
	double t;

	nworkers = (unsigned)strtoul(vm_env("QSM_SPREAD_WORKERS", "2"), NULL, 10);
	vm_init_stdio();
	if (!n || n > 4000 || !nworkers || nworkers > MAX_WORKERS || !addr_ok) {
		fprintf(stderr, "usage: spread [N (1..4000) [TRACE_FILE|-]] (QSM_SPREAD_WORKERS 1..%d)\n",
			MAX_WORKERS);
		return 2;
	}
	if (vm_trace_open(argc, argv) < 0)
		return 2;
	q = calloc(n, sizeof(*q));
	if (!q || vm_ctxs_new(&server, &client) < 0)
		return 1;
	for (unsigned i = 0; i < nworkers; i++) {
		if (vm_ctx_new(&workers[i].ctx, "worker") < 0)
			return 1;
		ctxs[i] = workers[i].ctx;
	}
	if (vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
			    .cls = &server_class, .backlog = 1024,
			    .relisten = { .initial_delay_ms = 200, .max_delay_ms = 500 } }, ip, &l) < 0)
		return 1;
	vm_check(qsm_listener_spread(l, ctxs, nworkers) == 0, "qsm_listener_spread over %u worker ctxs",
		 nworkers);
	for (unsigned i = 0; i < nworkers; i++)
		vm_check(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) == 0,
			 "worker %u's thread", i);
	if (vm_failures)
		return 1;

	/* ---- 1: N queues, spread over the workers ---- */
	printf("== %u queues, their passive ends spread over %u worker threads\n", n, nworkers);
	for (unsigned i = 0; i < n; i++)
		if (vm_conn_start(client, &(struct qsm_conn_opts){ .cls = &client_class,
				  .dst = (struct sockaddr *)&addr, .user = (void *)(uintptr_t)i,
				  .policy = { .initial_delay_ms = 200, .max_delay_ms = 1000 } }, i, &q[i]) < 0)
			goto out;
	t = wait_echoes(server, client, q, n, n);
	vm_check(t >= 0, "%u/%u client queues LIVE, %u/%u echoes back, after %.3f s",
		 vm_count_state(q, n, QSM_CM_LIVE), n, cli_echoes, n, t);
	check_spread(server, client, n, 1);
	qsm_ctx_counters(server, &sc, sizeof(sc));
	vm_check(sc.handed_off == n && sc.queues_live == 0, "the listener's ctx handed off %llu requests "
		 "and holds %llu queues", (unsigned long long)sc.handed_off, (unsigned long long)sc.queues_live);
	if (vm_failures)
		goto out;

	/* ---- 2: the device removed under every worker, and back ---- */
	printf("== rdma link delete %s under %u queues on %u threads\n", dev, n, nworkers);
	t = vm_rdma_link_delete(server, client, dev, LINK_LIMIT_MS, &st);
	vm_check(t >= 0 && vm_exit_code(st) == 0, "rdma link delete %s returned after %.3f s (exit %d): no "
		 "worker's ctx held the device", dev, t, vm_exit_code(st));
	t = vm_wait_all(server, client, q, n, QSM_CM_RECONNECT_WAIT, CONNECT_LIMIT_MS);
	vm_check(t >= 0, "%u/%u client queues in the gap", vm_count_state(q, n, QSM_CM_RECONNECT_WAIT), n);
	for (int i = 0; i < 200 && sum(offsetof(struct worker, closed)) < n; i++)
		vm_pump_for(server, client, 10);
	vm_check(sum(offsetof(struct worker, closed)) >= n, "%u/%u passive queues closed on the workers",
		 sum(offsetof(struct worker, closed)), n);
	if (vm_failures)
		goto out;
	t = vm_rdma_link_add(server, client, dev, netdev, LINK_LIMIT_MS, &st);
	vm_check(t >= 0 && vm_exit_code(st) == 0, "rdma link add %s: %.3f s", dev, t);
	t = wait_echoes(server, client, q, n, 2 * n);
	vm_check(t >= 0, "after the re-add: %u/%u client queues LIVE, %u/%u echoes back, after %.3f s",
		 vm_count_state(q, n, QSM_CM_LIVE), n, cli_echoes - n, n, t);
	check_spread(server, client, n, 2);

	/* ---- 3: close ---- */
	for (unsigned i = 0; i < n; i++)
		qsm_conn_disconnect(q[i]);
	t = vm_now();
	while (sum(offsetof(struct worker, closed)) < 2 * n && (vm_now() - t) * 1000 < CLOSE_LIMIT_MS)
		vm_pump(server, client);
	vm_check(sum(offsetof(struct worker, closed)) >= 2 * n, "%u/%u passive queues closed on the workers",
		 sum(offsetof(struct worker, closed)), 2 * n);
out:
	for (unsigned i = 0; i < nworkers; i++) {
		__atomic_store_n(&workers[i].stop, 1, __ATOMIC_RELEASE);
		if (workers[i].thread)
			pthread_join(workers[i].thread, NULL);
		adopted += (unsigned)workers[i].c.adopted;
		unexpected += (unsigned)workers[i].c.unexpected;
		vm_check(identity_ok(&workers[i].c), "worker %u: counter identity (adopted %llu, queues left "
			 "%llu)", i, (unsigned long long)workers[i].c.adopted,
			 (unsigned long long)workers[i].c.queues_live);
	}
	qsm_ctx_counters(server, &sc, sizeof(sc));
	qsm_ctx_counters(client, &cc, sizeof(cc));
	handed = (unsigned)sc.handed_off;
	vm_check(handed == adopted, "requests handed off %u == adopted %u", handed, adopted);
	vm_check(identity_ok(&sc) && identity_ok(&cc), "server and client counter identities");
	vm_check(!unexpected && !sc.unexpected && !cc.unexpected, "unexpected 0 (workers %u, server %llu, "
		 "client %llu)", unexpected, (unsigned long long)sc.unexpected, (unsigned long long)cc.unexpected);
	vm_check(!sum(offsetof(struct worker, errors)) && !cli_errors && !srv_misplaced,
		 "no error: workers %u, clients %u, passive queues on no worker %u",
		 sum(offsetof(struct worker, errors)), cli_errors, srv_misplaced);
	printf("== spread: %u requests handed off, %u echoes; per worker:", handed, cli_echoes);
	for (unsigned i = 0; i < nworkers; i++)
		printf(" %u", workers[i].live);
	printf(" LIVE\n");
	qsm_listener_destroy(l);
	for (unsigned i = 0; i < nworkers; i++)
		qsm_ctx_free(workers[i].ctx);
	vm_ctxs_free(server, client);
	free(q);
	return vm_failures ? 1 : 0;
}
