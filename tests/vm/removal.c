/* rdma-qsm VM test: device removal with live queues on the real kernel RDMA stack (rdmacm fabric).
 * N queues connect to a listener, `rdma link delete` must complete while the process lives on,
 * every client queue waits in RECONNECT_WAIT, and after `rdma link add` all N are LIVE again.
 * The data path runs through it: every time a queue is LIVE it exchanges one message (send,
 * echoed by the server, received), with one spare receive left posted, so MRs and WRs are
 * outstanding when the device goes.  At the end every queue disconnects and posts a receive
 * after its QP went to ERR: both receives must come back flushed, before DRAINED.  Every WR a
 * client queue posted completes exactly once, those outstanding when the device went too (flushed
 * as the queue lets go of the QP: qsm_conn_post_send(3), "Flushes"): `completions lost 0`.  No
 * connection is torn down but by the removal and the final disconnect: `spurious teardowns 0`
 * (a passive queue's ACCEPTING timeout, a connection lost while connecting or reconnecting, a
 * client LIVE more than once per device); no edge is missing (`unexpected 0`) and no attempt ran
 * out of a resource (exhausted 0).  The queues use the default
 * caps (64/64): with N=1000 (scenarios/scale.sh) the fabric needs several CQs per device.
 *
 * With QSM_REMOVAL_SRQ=1 the server's queues take their receives from one SRQ per device
 * (qsm_srq_post_recv(3)), filled from a pool by its srq_low handler: the SRQ is made with the
 * first QP, released with the device at removal, made again after the re-add, and gone at the
 * end (srqs_live 0).
 *
 *   removal [N [TRACE_FILE]]     N queues (default 100); trace to TRACE_FILE ("-" = stdout,
 *                                default: no trace).  Env: QSM_VM_DEV (rxe0), QSM_VM_NETDEV
 *                                (veth0), QSM_VM_ADDR (192.0.2.1), QSM_REMOVAL_PORT (7471),
 *                                QSM_REMOVAL_SRQ (0), QSM_REMOVAL_ROUND (removal; connect: N
 *                                connect, exchange, stay LIVE 6 s and close, no removal).
 * Exit 0 only if every check passed.  Needs root (rdma link) and a soft-RoCE device.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <qsm/qsm.h>

#include "common.h"

#define CONNECT_LIMIT_MS 240000   /* 2,000 queues on a loaded host: tens of seconds */
#define DELETE_LIMIT_MS 30000
#define GAP_LIMIT_MS 10000
#define RECONNECT_LIMIT_MS 240000

#define EXCHANGE_LIMIT_MS 30000
#define HOLD_MS 6000
#define CLOSE_LIMIT_MS 120000
#define MSG_LEN VM_MSG_LEN

enum { WR_RECV = 1, WR_SPARE, WR_LATE, WR_SEND };

/* Per client queue, outside the queue (qsm_conn_user) so that it outlives it. */
struct queue {
	unsigned index;
	struct qsm_conn *q;         /* NULL once released */
	unsigned removals;          /* device_removed handler calls */
	unsigned lives;             /* LIVE.enter calls */
	unsigned exchanged;         /* echoes received and verified */
	unsigned flushed;           /* FLUSH_ERR completions */
	unsigned flushed_conn;      /* of them, on this connection (since its LIVE) */
	unsigned flushed_at_drained;   /* flushed_conn when DRAINED came */
	unsigned flushed_at_close;     /* flushed_conn when the queue was released */
	unsigned late;              /* completions after DRAINED */
	unsigned errors;            /* bad completions, bad echoes, failed posts */
	int late_post;              /* qsm_conn_post_recv() after ERR: its return */
	unsigned posted, completed; /* WRs posted (accepted), completions received */
	unsigned outstanding_at_removal;   /* WRs outstanding when the device went: flushed then */
	bool drained, released;
	struct qsm_mr *mr;
	char rbuf[MSG_LEN], sbuf[MSG_LEN];
};

static int on_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);

	(void)ev;
	u->removals++;
	/* the QP is destroyed after this handler: its outstanding WRs complete, flushed, first */
	u->outstanding_at_removal += u->posted - u->completed;
	return 0;
}

/* What phase the run is in: a connection lost while connecting or reconnecting is spurious. */
enum phase { PH_CONNECT, PH_REMOVE, PH_READD, PH_CLOSE };
static enum phase phase;
static unsigned spurious_accept_timeouts, spurious_losses;

static bool lost_event(int event)
{
	return event == QSM_EV_DISCONNECTED || event == QSM_EV_WC_ERROR || event == QSM_EV_QP_FATAL ||
	       event == QSM_EV_TIMEOUT;
}

/* LIVE left by a loss while nothing was being removed or closed. */
static int on_live_event(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)q;
	if ((phase == PH_CONNECT || phase == PH_READD) && lost_event(ev->event))
		spurious_losses++;
	return 0;
}

/* A passive queue that gave up on the CM (connect_ms) or lost its connection while clients
 * connect: its client may hold it LIVE (issue 15). */
static int server_accepting_event(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)q;
	if (ev->event == QSM_EV_TIMEOUT)
		spurious_accept_timeouts++;
	return 0;
}

static int server_live_event(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	return on_live_event(q, ev);
}

/* LIVE: receive posted first, then one message that the server echoes. */
static int on_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);
	struct qsm_sge rs, ss;

	(void)ev;
	u->lives++;
	u->flushed_conn = 0;   /* a new connection: its own flushes from here */
	if (vm_reg_buffer(q, &u->mr, u, sizeof(*u)) < 0) {
		u->errors++;
		return 0;
	}
	memset(u->rbuf, 0, sizeof(u->rbuf));
	snprintf(u->sbuf, sizeof(u->sbuf), "queue %u life %u", u->index, u->lives);
	rs = vm_sge(u->rbuf, sizeof(u->rbuf), u->mr);
	ss = vm_sge(u->sbuf, (uint32_t)strlen(u->sbuf) + 1, u->mr);
	if (qsm_conn_post_recv(q, WR_RECV, &rs, 1) < 0)
		u->errors++;
	else
		u->posted++;
	if (qsm_conn_post_send(q, WR_SEND, &ss, 1, QSM_POST_SIGNALED) < 0)
		u->errors++;
	else
		u->posted++;
	return 0;
}

/* The QP is in ERR now (rdma_disconnect): a receive posted here must come back flushed. */
static int on_disconnecting(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);
	struct qsm_sge rs = vm_sge(u->rbuf, sizeof(u->rbuf), u->mr);

	(void)ev;
	u->late_post = qsm_conn_post_recv(q, WR_LATE, &rs, 1);
	u->posted += u->late_post == 0;
	return 0;
}

static int on_closing_event(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);

	if (ev->event == QSM_EV_DRAINED) {
		u->drained = true;
		u->flushed_at_drained = u->flushed_conn;
	}
	return 0;
}

static int client_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct queue *u = qsm_conn_user(q);
	char want[MSG_LEN];

	u->completed++;
	if (u->drained)
		u->late++;
	if (wc->status == QSM_WC_WR_FLUSH_ERR) {
		u->flushed++;
		u->flushed_conn++;
		return 0;
	}
	if (wc->status != QSM_WC_SUCCESS) {
		u->errors++;
		return 0;
	}
	if (wc->wr_id == WR_RECV) {
		struct qsm_sge rs = vm_sge(u->rbuf, sizeof(u->rbuf), u->mr);

		snprintf(want, sizeof(want), "echo: queue %u life %u", u->index, u->lives);
		if (wc->opcode != QSM_WR_RECV || wc->byte_len != strlen(want) + 1 || strcmp(u->rbuf, want)) {
			u->errors++;
			return 0;
		}
		u->exchanged++;
		/* a spare receive stays posted: outstanding at removal, flushed at the end */
		if (qsm_conn_post_recv(q, WR_SPARE, &rs, 1) < 0)
			u->errors++;
		else
			u->posted++;
	} else if (wc->wr_id != WR_SEND || wc->opcode != QSM_WR_SEND) {
		u->errors++;
	}
	return 0;
}

static void client_release(struct qsm_conn *q)
{
	struct queue *u = qsm_conn_user(q);

	u->released = true;
	u->flushed_at_close = u->flushed_conn;
	u->q = NULL;
	u->mr = NULL;   /* freed with the queue */
}

/* The base class's behaviour (connect, READY at once), plus counting what this test checks. */
static const struct qsm_class client_class = {
	.name = "removal_client",
	.super = &qsm_base_class,
	.active = {
		[QSM_CM_LIVE] = { .enter = on_live, .on_event = on_live_event },
		[QSM_CM_DISCONNECTING] = { .enter = on_disconnecting },
		[QSM_CM_CLOSING] = { .on_event = on_closing_event },
	},
	.device_removed = on_device_removed,
	.completion = client_completion,
	.release = client_release,
};


/* The server side: the base class (accepts every request), echoing every message. */
static const struct qsm_class server_class = {
	.name = "removal_server",
	.super = &qsm_base_class,
	.priv_size = sizeof(struct vm_echo),
	.qp_ready = vm_echo_server_qp_ready,
	.completion = vm_echo_server_completion,
	.passive = {
		[QSM_ACCEPT_ACCEPTING] = { .on_event = server_accepting_event },
		[QSM_ACCEPT_LIVE] = { .on_event = server_live_event },
	},
};

/* ---- the server on an SRQ (QSM_REMOVAL_SRQ=1): receives from a pool, echoes from the queue ---- */

#define SRQ_MAX 4096
static char (*srq_buf)[MSG_LEN];
static bool *srq_posted;
static unsigned srq_n, srq_lows, srq_recvs;
static struct qsm_pool *srq_pool;

static int srq_post(struct qsm_srq *s, unsigned i)
{
	uint32_t lkey, rkey;
	struct qsm_sge sge;

	if (qsm_pool_srq_keys(srq_pool, s, &lkey, &rkey) < 0)
		return -ENODEV;
	sge = (struct qsm_sge){ (uintptr_t)srq_buf[i], MSG_LEN, lkey };
	if (qsm_srq_post_recv(s, i, &sge, 1) < 0)
		return -1;
	srq_posted[i] = true;
	return 0;
}

/* A new SRQ (the first QP on the device, again after the re-add): every buffer goes to it. */
static void server_srq_low(struct qsm_srq *s)
{
	srq_lows++;
	for (unsigned i = 0; i < srq_n; i++) {
		srq_posted[i] = false;   /* a new SRQ: the old one's went with it */
		if (srq_post(s, i) < 0)
			vm_echo_errors++;
	}
}

static int server_srq_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct vm_echo *e = qsm_conn_priv(q);

	(void)ev;
	if (!qsm_conn_srq(q) || vm_reg_buffer(q, &e->mr, e, sizeof(*e)) < 0)
		vm_echo_errors++;
	return 0;
}

static int server_srq_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct vm_echo *e = qsm_conn_priv(q);
	struct qsm_sge ss;

	if (!(wc->wc_flags & QSM_WC_SRQ)) {   /* an echo's send */
		if (wc->status != QSM_WC_SUCCESS && wc->status != QSM_WC_WR_FLUSH_ERR)
			vm_echo_errors++;
		return 0;
	}
	srq_posted[wc->wr_id] = false;
	if (wc->status == QSM_WC_WR_FLUSH_ERR)
		return 0;
	if (wc->status != QSM_WC_SUCCESS) {
		vm_echo_errors++;
		return 0;
	}
	srq_recvs++;
	srq_buf[wc->wr_id][MSG_LEN - 1] = 0;   /* the peer's message may lack its NUL */
	snprintf(e->sbuf, sizeof(e->sbuf), "echo: %s", srq_buf[wc->wr_id]);
	ss = vm_sge(e->sbuf, (uint32_t)strlen(e->sbuf) + 1, e->mr);
	/* the buffer back to the SRQ before the echo: the peer may send again at once */
	if (srq_post(qsm_conn_srq(q), (unsigned)wc->wr_id) < 0 ||
	    qsm_conn_post_send(q, VM_ECHO_WR_SEND, &ss, 1, QSM_POST_SIGNALED) < 0)
		vm_echo_errors++;
	else
		vm_echo_sent++;
	return 0;
}

static struct qsm_class server_srq_class = {
	.name = "removal_server_srq",
	.super = &qsm_base_class,
	.priv_size = sizeof(struct vm_echo),
	.qp_ready = server_srq_qp_ready,
	.completion = server_srq_completion,
	.srq_low = server_srq_low,
	.passive = {
		[QSM_ACCEPT_ACCEPTING] = { .on_event = server_accepting_event },
		[QSM_ACCEPT_LIVE] = { .on_event = server_live_event },
	},
};

/* The SRQ's buffers, a pool of the server's ctx: one per queue, and some more. */
static int srq_mode(struct qsm_ctx *server, unsigned n)
{
	srq_n = n + 64 < SRQ_MAX ? n + 64 : SRQ_MAX;
	srq_buf = calloc(srq_n, MSG_LEN);
	srq_posted = calloc(srq_n, sizeof(*srq_posted));
	if (!srq_buf || !srq_posted)
		return -1;
	server_srq_class.srq = (struct qsm_srq_caps){ .max_wr = srq_n, .limit = 0 };
	if (qsm_ctx_reg_pool(server, srq_buf, (size_t)srq_n * MSG_LEN, QSM_ACCESS_LOCAL_WRITE, &srq_pool) < 0)
		return -1;
	printf("== the server's queues share one SRQ per device: %u receives from a pool\n", srq_n);
	return 0;
}

static unsigned count_exchanged(const struct queue *u, unsigned n, unsigned at_least)
{
	unsigned c = 0;

	for (unsigned i = 0; i < n; i++)
		c += u[i].exchanged >= at_least;
	return c;
}

/* Until every queue exchanged `rounds` messages in all, or the limit; the time it took. */
static double wait_exchanged(struct qsm_ctx *a, struct qsm_ctx *b, const struct queue *u, unsigned n,
			     unsigned rounds)
{
	double t0 = vm_now();

	while (count_exchanged(u, n, rounds) < n && (vm_now() - t0) * 1000 < EXCHANGE_LIMIT_MS)
		vm_pump(a, b);
	return vm_now() - t0;
}

static unsigned sum_errors(const struct queue *u, unsigned n)
{
	unsigned c = 0;

	for (unsigned i = 0; i < n; i++)
		c += u[i].errors;
	return c;
}

/* ---- a connect round (QSM_REMOVAL_ROUND=connect; tests/vm/scenarios/cmtime.sh) ----
 * As cmtime runs it: the server in a process of its own (forked before any RDMA resource is
 * made), the client here.  N queues connect, exchange a message each, stay LIVE past connect_ms
 * (where a timeout racing the CM closed queues), then close; each process checks its side. */

/* The server process: listens, says so on `up`, serves until `ctl` says 'c' (the client is
 * closing: losses from then on are not spurious) and then EOF, and until its queues are gone. */
static int serve_round(struct sockaddr_storage *addr, const char *ip, int up, int ctl)
{
	struct qsm_listener_opts lo = { .addr = (struct sockaddr *)addr, .cls = &server_class, .backlog = 1024 };
	struct qsm_ctx *server;
	struct qsm_listener *l;
	struct qsm_counters sc;
	double t0 = 0;
	bool eof = false;

	if (vm_ctx_new(&server, "server") < 0 || vm_listener_new(server, &lo, ip, &l) < 0)
		return 1;
	while (qsm_listener_state(l) != QSM_LISTENER_LISTENING)
		vm_pump(server, server);
	if (write(up, "l", 1) != 1)
		return 1;
	for (;;) {
		struct pollfd p = { .fd = ctl, .events = POLLIN };
		char c;

		if (!eof && poll(&p, 1, 0) == 1) {
			if (read(ctl, &c, 1) == 1) {
				phase = PH_CLOSE;
			} else {
				eof = true;
				t0 = vm_now();
			}
		}
		vm_pump(server, server);
		qsm_ctx_counters(server, &sc, sizeof(sc));
		if (eof && (!sc.queues_live || (vm_now() - t0) * 1000 > CLOSE_LIMIT_MS))
			break;
	}
	vm_check(!sc.queues_live, "server: its passive queues closed (%llu left)", (unsigned long long)sc.queues_live);
	vm_check(!spurious_accept_timeouts && !spurious_losses, "server: spurious teardowns %u (ACCEPTING timeouts "
	         "%u, connections lost while connecting %u)", spurious_accept_timeouts + spurious_losses,
	         spurious_accept_timeouts, spurious_losses);
	vm_check(!sc.unexpected && !vm_echo_errors, "server: unexpected %llu, data path errors %u, echoed %u",
	         (unsigned long long)sc.unexpected, vm_echo_errors, vm_echo_sent);
	qsm_listener_destroy(l);
	qsm_ctx_free(server);
	fflush(stdout);
	return vm_failures ? 1 : 0;
}

static int connect_round(unsigned n, struct sockaddr_storage *addr, const char *ip)
{
	int up[2], ctl[2], st = 0;
	struct qsm_conn **q = calloc(n, sizeof(*q));
	struct queue *u = calloc(n, sizeof(*u));
	struct qsm_ctx *client;
	struct qsm_counters cc;
	double t0, t_connect, t_data, t_close = -1;
	unsigned live, closed = 0, lost = 0, extra = 0;
	pid_t pid;
	char c;

	if (!q || !u || pipe(up) < 0 || pipe(ctl) < 0)
		return 2;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		close(up[0]);
		close(ctl[1]);
		_exit(serve_round(addr, ip, up[1], ctl[0]));
	}
	close(up[1]);
	close(ctl[0]);
	if (read(up[0], &c, 1) != 1) {
		printf("FAIL: the server process did not come up\n");
		waitpid(pid, &st, 0);
		return 1;
	}
	if (vm_ctx_new(&client, "client") < 0)
		return 1;
	printf("== %u queues connect to %s port %u (the server in process %d)\n", n, ip, vm_addr_port(addr), (int)pid);
	t0 = vm_now();
	for (unsigned i = 0; i < n; i++) {
		u[i].index = i;
		if (vm_conn_start(client, &(struct qsm_conn_opts){ .cls = &client_class,
				  .dst = (struct sockaddr *)addr,
				  .policy = { .initial_delay_ms = 1000, .max_delay_ms = 2000, .jitter_pct = 20 },
				  .user = &u[i] }, i, &q[i]) < 0)
			return 1;
		u[i].q = q[i];
	}
	while ((live = vm_count_state(q, n, QSM_CM_LIVE)) < n && (vm_now() - t0) * 1000 < CONNECT_LIMIT_MS)
		vm_pump(client, client);
	t_connect = vm_now() - t0;
	vm_check(live == n, "%u/%u client queues LIVE after %.3f s", live, n, t_connect);
	t_data = wait_exchanged(client, client, u, n, 1);
	vm_check(count_exchanged(u, n, 1) == n && !sum_errors(u, n), "%u/%u queues exchanged a message, %.3f s "
	         "after all were LIVE; errors %u", count_exchanged(u, n, 1), n, t_data, sum_errors(u, n));
	vm_pump_for(client, client, HOLD_MS);
	vm_check(vm_count_state(q, n, QSM_CM_LIVE) == n, "%u/%u still LIVE %d ms later",
	         vm_count_state(q, n, QSM_CM_LIVE), n, HOLD_MS);

	/* the server hears it before the first DREQ can reach it (it looks at least every pump) */
	if (write(ctl[1], "c", 1) != 1)
		return 1;
	usleep(200000);
	phase = PH_CLOSE;
	for (unsigned i = 0; i < n; i++)
		if (q[i] && qsm_conn_disconnect(q[i]) < 0)
			u[i].errors++;
	t0 = vm_now();
	while ((vm_now() - t0) * 1000 < CLOSE_LIMIT_MS) {
		closed = 0;
		for (unsigned i = 0; i < n; i++)
			closed += u[i].released;
		if (closed == n) {
			t_close = vm_now() - t0;
			break;
		}
		vm_pump(client, client);
	}
	close(ctl[1]);
	for (unsigned i = 0; i < n; i++) {
		lost += u[i].posted - u[i].completed;
		extra += u[i].lives > 1 ? u[i].lives - 1 : 0;
	}
	qsm_ctx_counters(client, &cc, sizeof(cc));
	vm_check(closed == n, "%u/%u client queues closed (%.3f s)", closed, n, t_close);
	vm_check(!lost, "completions lost %u", lost);
	vm_check(!spurious_losses && !extra, "client: spurious teardowns %u (connections lost while connecting "
	         "%u, lives beyond one %u)", spurious_losses + extra, spurious_losses, extra);
	vm_check(!cc.unexpected && !cc.exhausted, "client: unexpected %llu, exhausted %llu",
	         (unsigned long long)cc.unexpected, (unsigned long long)cc.exhausted);
	waitpid(pid, &st, 0);
	vm_check(vm_exit_code(st) == 0, "the server process's checks: exit %d", vm_exit_code(st));
	qsm_ctx_free(client);
	free(q);
	free(u);
	printf("== summary: N=%u connect %.3f s, data %.3f s, disconnect+drain %.3f s (connect round): %s\n", n,
	       t_connect, t_data, t_close, vm_failures ? "FAILED" : "PASS");
	return vm_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100;
	const char *dev = vm_env("QSM_VM_DEV", "rxe0"), *netdev = vm_env("QSM_VM_NETDEV", "veth0");
	const char *ip = vm_env("QSM_VM_ADDR", "192.0.2.1");
	struct sockaddr_storage addr;
	bool addr_ok = vm_parse_addr(&addr, ip, "QSM_REMOVAL_PORT", "7471");
	struct qsm_ctx *server, *client;
	struct qsm_listener *l;
	struct qsm_conn **q;
	struct qsm_counters cc, sc;
	double t0, t_connect, t_delete = -1, t_gap = -1, t_add, t_reconnect = -1;
	double t_data1 = -1, t_data2 = -1, t_close = -1;
	struct queue *u;
	unsigned removed = 0, live;
	bool srq = strcmp(vm_env("QSM_REMOVAL_SRQ", "0"), "0") != 0;
	int st = 0;

	vm_init_stdio();
	setenv("QSM_RDMACM_STATS", "1", 0);   /* the backend's completion statistics at the end */
	if (!n || n > 10000 || !addr_ok) {
		fprintf(stderr, "usage: removal [N (1..10000) [TRACE_FILE|-]]\n");
		return 2;
	}
	if (vm_trace_open(argc, argv) < 0)
		return 2;
	if (strcmp(vm_env("QSM_REMOVAL_ROUND", "removal"), "connect") == 0)
		return connect_round(n, &addr, ip);
	q = calloc(n, sizeof(*q));
	u = calloc(n, sizeof(*u));
	if (!q || !u)
		return 2;

	if (vm_ctxs_new(&server, &client) < 0)
		return 1;
	if (srq && srq_mode(server, n) < 0)
		return 1;
	if (vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
			    .cls = srq ? &server_srq_class : &server_class, .backlog = 1024,
			    .relisten = { .initial_delay_ms = 500, .max_delay_ms = 1000 } }, ip, &l) < 0)
		return 1;

	/* ---- connect ---- */
	printf("== %u queues connect to %s port %u\n", n, ip, vm_addr_port(&addr));
	for (unsigned i = 0; i < n; i++) {
		u[i].index = i;
		if (vm_conn_start(client, &(struct qsm_conn_opts){ .cls = &client_class,
				  .dst = (struct sockaddr *)&addr,
				  .policy = { .initial_delay_ms = 1000, .max_delay_ms = 2000, .jitter_pct = 20 },
				  .user = &u[i] }, i, &q[i]) < 0)
			return 1;
		u[i].q = q[i];
	}
	t0 = vm_now();
	while ((live = vm_count_state(q, n, QSM_CM_LIVE)) < n && (vm_now() - t0) * 1000 < CONNECT_LIMIT_MS)
		vm_pump(server, client);
	t_connect = vm_now() - t0;
	qsm_ctx_counters(server, &sc, sizeof(sc));
	vm_check(live == n, "%u/%u client queues LIVE after %.3f s", live, n, t_connect);
	vm_check(sc.queues_live == n, "server holds %llu passive queues (expected %u)",
	         (unsigned long long)sc.queues_live, n);
	vm_check(qsm_listener_state(l) == QSM_LISTENER_LISTENING, "listener LISTENING");
	if (vm_failures)
		goto out;
	t_data1 = wait_exchanged(server, client, u, n, 1);
	vm_check(count_exchanged(u, n, 1) == n && !sum_errors(u, n) && !vm_echo_errors,
	         "%u/%u queues exchanged a message (send, echo, recv), %.3f s after all were LIVE; errors: client %u, server %u",
	         count_exchanged(u, n, 1), n, t_data1, sum_errors(u, n), vm_echo_errors);
	if (vm_failures)
		goto out;

	/* ---- remove the device with every queue live ---- */
	phase = PH_REMOVE;
	printf("== rdma link delete %s (limit %d ms), dispatching meanwhile\n", dev, DELETE_LIMIT_MS);
	t_delete = vm_rdma_link_delete(server, client, dev, DELETE_LIMIT_MS, &st);
	vm_check(t_delete >= 0, "rdma link delete %s completed: %.3f s", dev, t_delete);
	if (t_delete < 0)
		goto out;
	vm_check(vm_exit_code(st) == 0, "rdma link delete exit status %d", vm_exit_code(st));

	/* Every client queue heard DEVICE_REMOVAL and waits in the gap; retries into a
	 * deviceless network keep them cycling, so sample until all sit there at once. */
	t0 = vm_now();
	while ((vm_now() - t0) * 1000 < GAP_LIMIT_MS) {
		vm_pump(server, client);
		if (vm_count_state(q, n, QSM_CM_RECONNECT_WAIT) == n) {
			t_gap = vm_now() - t0;
			break;
		}
	}
	for (unsigned i = 0; i < n; i++)
		removed += u[i].removals >= 1;
	vm_check(removed == n, "%u/%u client queues took DEVICE_REMOVAL", removed, n);
	vm_check(t_gap >= 0, "%u/%u client queues in RECONNECT_WAIT (%u seen at the end)", t_gap >= 0 ? n : 0,
	         n, vm_count_state(q, n, QSM_CM_RECONNECT_WAIT));
	qsm_ctx_counters(server, &sc, sizeof(sc));
	qsm_ctx_counters(client, &cc, sizeof(cc));
	vm_check(sc.queues_live == 0, "server passive queues closed (%llu left)", (unsigned long long)sc.queues_live);
	vm_check(cc.devices_live == 0 && sc.devices_live == 0, "device registries empty (client %llu, server %llu)",
	         (unsigned long long)cc.devices_live, (unsigned long long)sc.devices_live);
	if (srq)
		vm_check(sc.srqs_live == 0, "the server's SRQ released with the removed device (%llu left)",
		         (unsigned long long)sc.srqs_live);
	vm_check(qsm_listener_state(l) == QSM_LISTENER_RELISTEN_WAIT, "listener in RELISTEN_WAIT (state %d)",
	         qsm_listener_state(l));
	vm_check(kill(getpid(), 0) == 0, "process alive (pid %d)", (int)getpid());

	/* ---- add it back ---- */
	printf("== rdma link add %s type rxe netdev %s; waiting for %u queues (limit %d ms)\n", dev, netdev,
	       n, RECONNECT_LIMIT_MS);
	t0 = vm_now();
	phase = PH_READD;
	t_add = vm_rdma_link_add(server, client, dev, netdev, DELETE_LIMIT_MS, &st);
	vm_check(t_add >= 0 && vm_exit_code(st) == 0, "rdma link add: %.3f s, exit %d", t_add,
	         vm_exit_code(st));
	while ((live = vm_count_state(q, n, QSM_CM_LIVE)) < n && (vm_now() - t0) * 1000 < RECONNECT_LIMIT_MS)
		vm_pump(server, client);
	if (live == n)
		t_reconnect = vm_now() - t0;
	vm_check(live == n, "%u/%u client queues LIVE again, %.3f s after rdma link add started", live, n,
	         t_reconnect);
	vm_check(qsm_listener_state(l) == QSM_LISTENER_LISTENING, "listener LISTENING again");
	if (vm_failures)
		goto out;

	/* ---- data again, on the new device ---- */
	t_data2 = wait_exchanged(server, client, u, n, 2);
	vm_check(count_exchanged(u, n, 2) == n && !sum_errors(u, n) && !vm_echo_errors,
	         "%u/%u queues exchanged a message again after the reconnect, %.3f s after all were LIVE; errors: client %u, "
	         "server %u", count_exchanged(u, n, 2), n, t_data2, sum_errors(u, n), vm_echo_errors);
	if (vm_failures)
		goto out;

	/* ---- disconnect all: the spare receive and one posted after ERR flush, then DRAINED ---- */
	printf("== %u queues disconnect (limit %d ms)\n", n, CLOSE_LIMIT_MS);
	phase = PH_CLOSE;
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
		if (closed == n) {
			t_close = vm_now() - t0;
			break;
		}
		if ((vm_now() - t0) * 1000 >= CLOSE_LIMIT_MS)
			break;
		vm_pump(server, client);
	}
	/* On an SRQ, the server's queues are drained once LAST_WQE came too; a device that never
	 * says it (soft-RoCE may not) leaves them to the drain timeout: wait for them. */
	while (srq && (vm_now() - t0) * 1000 < CLOSE_LIMIT_MS) {
		qsm_ctx_counters(server, &sc, sizeof(sc));
		if (!sc.queues_live)
			break;
		vm_pump(server, client);
	}
	{
		unsigned closed = 0, drained = 0, flushed2 = 0, late = 0, late_post_ok = 0;
		unsigned posted = 0, completed = 0, at_removal = 0, lost = 0, extra_lives = 0, spurious;

		for (unsigned i = 0; i < n; i++) {
			closed += u[i].released;
			drained += u[i].drained;
			flushed2 += u[i].flushed_at_close == 2 && (!u[i].drained || u[i].flushed_at_drained == 2);
			late += u[i].late;
			late_post_ok += u[i].late_post == 0;
			posted += u[i].posted;
			completed += u[i].completed;
			at_removal += u[i].outstanding_at_removal;
			lost += u[i].posted - u[i].completed;
			extra_lives += u[i].lives > 2 ? u[i].lives - 2 : 0;   /* once per device */
		}
		spurious = spurious_accept_timeouts + spurious_losses + extra_lives;
		vm_check(closed == n, "%u/%u client queues closed after disconnect (%.3f s)", closed, n, t_close);
		/* a drain may end by its timeout (drain_ms, 2 s) when 2,000 flushes come slowly: its
		 * WRs complete all the same (completions lost 0, below) */
		printf("   %u/%u drains ended by DRAINED, %u by the drain timeout\n", drained, n, n - drained);
		vm_check(late_post_ok == n, "%u/%u receives posted after ERR accepted", late_post_ok, n);
		vm_check(flushed2 == n && !late,
		         "%u/%u queues got both receives back flushed before they closed (before DRAINED, where "
		         "it came); %u completions after DRAINED", flushed2, n, late);
		vm_check(!lost, "completions lost %u: every WR completed exactly once (client posted %u, "
		         "completed %u; %u of them outstanding at the removal, flushed then)", lost, posted,
		         completed, at_removal);
		vm_check(!spurious, "spurious teardowns %u (passive ACCEPTING timeouts %u, connections lost "
		         "while connecting %u, client lives beyond one per device %u)", spurious,
		         spurious_accept_timeouts, spurious_losses, extra_lives);
		vm_check(!sum_errors(u, n) && !vm_echo_errors, "no data path errors (client %u, server %u; "
		         "server echoed %u messages)", sum_errors(u, n), vm_echo_errors, vm_echo_sent);
		for (unsigned i = 0; i < n && vm_failures; i++)
			if (!u[i].released || u[i].flushed_at_close != 2 || u[i].late ||
			    u[i].errors)
				printf("   queue %u: released %d drained %d flushed %u (at DRAINED %u) late %u "
				       "errors %u late_post %d exchanged %u\n", i, u[i].released, u[i].drained,
				       u[i].flushed, u[i].flushed_at_drained, u[i].late, u[i].errors,
				       u[i].late_post, u[i].exchanged);
		qsm_ctx_counters(server, &sc, sizeof(sc));
		qsm_ctx_counters(client, &cc, sizeof(cc));
		vm_check(!cc.unexpected && !sc.unexpected && !cc.exhausted && !sc.exhausted,
		         "unexpected %llu (client %llu, server %llu); attempts out of a resource: client %llu, "
		         "server %llu", (unsigned long long)(cc.unexpected + sc.unexpected),
		         (unsigned long long)cc.unexpected, (unsigned long long)sc.unexpected,
		         (unsigned long long)cc.exhausted, (unsigned long long)sc.exhausted);
		if (srq) {
			vm_check(srq_lows == 2, "the SRQ was made twice, at the first QP and after the re-add "
			         "(srq_low called %u times)", srq_lows);
			vm_check(srq_recvs == vm_echo_sent, "every SRQ receive echoed: %u received, %u echoed",
			         srq_recvs, vm_echo_sent);
			vm_check(sc.srqs_live == 0, "the SRQ went with the last queue (%llu left)",
			         (unsigned long long)sc.srqs_live);
		}
	}

out:
	qsm_ctx_counters(server, &sc, sizeof(sc));
	qsm_ctx_counters(client, &cc, sizeof(cc));
	printf("== counters: client reconnects %llu, device_removals %llu, unexpected %llu, action_errors %llu,"
	       " exhausted %llu; server device_removals %llu, unexpected %llu, exhausted %llu, queues %llu\n",
	       (unsigned long long)cc.reconnects, (unsigned long long)cc.device_removals,
	       (unsigned long long)cc.unexpected, (unsigned long long)cc.action_errors,
	       (unsigned long long)cc.exhausted, (unsigned long long)sc.device_removals,
	       (unsigned long long)sc.unexpected, (unsigned long long)sc.exhausted,
	       (unsigned long long)sc.queues_live);
	if (vm_failures)
		for (unsigned i = 0; i < n; i++)
			if (q[i] && qsm_conn_state(q[i]) != QSM_CM_LIVE)
				printf("   queue %u: %s, %u removals, %u attempts, %u exchanged\n", i,
				       qsm_conn_state_name(q[i]), u[i].removals, qsm_conn_attempts(q[i]),
				       u[i].exchanged);
	if (srq_pool)
		qsm_pool_dereg(srq_pool);
	vm_ctxs_free(server, client);
	free(srq_buf);
	free(srq_posted);
	free(q);
	free(u);
	printf("== summary: N=%u connect %.3f s, data %.3f s, delete %.3f s, all in RECONNECT_WAIT %.3f s "
	       "after, reconnect %.3f s after re-add, data %.3f s, disconnect+drain %.3f s: %s\n", n,
	       t_connect, t_data1, t_delete, t_gap, t_reconnect, t_data2, t_close,
	       vm_failures ? "FAILED" : "PASS");
	return vm_failures ? 1 : 0;
}
