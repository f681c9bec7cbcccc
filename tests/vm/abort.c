/* rdma-qsm VM test: a handler returning non-zero, on the real kernel RDMA stack (rdmacm fabric).
 * N client queues connect to an echo server.  Every other queue's LIVE.enter posts a send and
 * returns -1; queue 1's completion handler returns -1 when its first echo arrives (a receive
 * still posted).  Every handler slot of the client class is instrumented (enter, exit and
 * on_event of every state, unexpected, device_removed, qp_ready, completion, release): after a
 * handler returned non-zero, no callback of any kind may reach its queue.  The aborted queues
 * are destroyed (counters.aborts, queues_live), the server hears their disconnects and closes
 * its passive queues, the other queues stay LIVE and keep exchanging messages, and at the end
 * nothing is left: every queue closed, no QP and no cm_id of ours (`rdma res show`) but the
 * backend's context pin, then qsm_ctx_free().
 *
 *   abort [N [TRACE_FILE]]   N queues (default 10, at least 3); trace to TRACE_FILE ("-" =
 *                            stdout, default: no trace).  Env: QSM_VM_ADDR (192.0.2.1),
 *                            QSM_ABORT_PORT (7473).
 * Exit 0 only if every check passed.  Needs a soft-RoCE device.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <qsm/qsm.h>
#include <qsm/rdmacm.h>

#include "common.h"

#define CONNECT_LIMIT_MS 60000    /* all aborts taken, survivors LIVE with ROUNDS exchanged */
#define QUIET_MS 3000             /* afterwards: any late callback for an aborted queue shows up */
#define EXCHANGE_LIMIT_MS 30000
#define CLOSE_LIMIT_MS 30000
#define ROUNDS 3
#define MSG_LEN VM_MSG_LEN

enum { WR_RECV = 1, WR_SEND };

enum role {
	ROLE_LIVE = 0,            /* stays LIVE, exchanges messages */
	ROLE_ABORT_LIVE,          /* LIVE.enter posts a send and returns -1 */
	ROLE_ABORT_COMPLETION,    /* completion returns -1 on the first echo */
};

static const char *const role_names[] = { "live", "abort in LIVE.enter", "abort in completion" };

/* Per client queue, outside the queue, looked up by the queue's pointer (never through it). */
struct queue {
	unsigned index;
	enum role role;
	struct qsm_conn *q;         /* the pointer as created; kept after the queue is gone */
	bool aborted;               /* a handler of ours returned non-zero */
	bool released;
	bool gone;                  /* aborted or released: the queue's memory is freed */
	unsigned calls;             /* handler calls of any kind */
	unsigned calls_after;       /* ... after `aborted` or `released` */
	char first_after[96];
	unsigned lives, exchanged, target, errors, unexpected;
	int abort_state;            /* state (from ev) of the aborting handler, or -1 */
	struct qsm_mr *mr;
	char rbuf[MSG_LEN], sbuf[MSG_LEN];
};

/* Per client index, the server's view of the passive queue it accepted. */
struct peer {
	bool accepted, released;
	unsigned disconnected;      /* DISCONNECTED events seen by the passive queue */
	unsigned echoes, errors, bad_status;
};

/* Passive queue private data. */
struct echo {
	int client;
	struct vm_echo buf;
};

static struct queue *u;
static struct peer *peers;
static unsigned n;
static unsigned verbs_ok;          /* LIVE queues whose qsm_conn_verbs() objects checked out */

/* The escape hatch in LIVE: the queue's own cm_id, its RTS QP on the device's PD. */
static bool verbs_check(struct qsm_conn *q)
{
	struct qsm_verbs v;
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	if (qsm_conn_verbs(q, &v) != 0 || !v.cm_id || !v.qp || !v.pd)
		return false;
	if (v.cm_id->qp != v.qp || v.qp->pd != v.pd)
		return false;
	if (ibv_query_qp(v.qp, &attr, IBV_QP_STATE, &init))
		return false;
	/* soft-iWARP's query_qp reports no state (6.1's siw_query_qp fills only the caps and
	 * access flags: an RTS QP reads RESET, in `rdma res show qp` too) */
	if (attr.qp_state != IBV_QPS_RTS && strcmp(vm_env("QSM_VM_TRANSPORT", "rxe"), "siw") != 0)
		return false;
	return qsm_conn_verbs(NULL, &v) == -EINVAL;
}

/* Every client callback starts here: which queue (by pointer only), and was it already gone? */
static struct queue *note(struct qsm_conn *q, const char *slot, int state)
{
	for (unsigned i = 0; i < n; i++) {
		struct queue *x = &u[i];

		if (x->q != q)
			continue;
		x->calls++;
		if (x->gone) {
			if (!x->calls_after++)
				snprintf(x->first_after, sizeof(x->first_after), "%s (state %s)", slot,
					 vm_cm_state_name(state));
			printf("   queue %u: callback %s in state %s after it was %s\n", i, slot,
			       vm_cm_state_name(state), x->aborted ? "aborted" : "released");
			return NULL;
		}
		return x;
	}
	printf("   callback %s for an unknown queue %p\n", slot, (void *)q);
	return NULL;
}

static int abort_queue(struct queue *x, int state)
{
	x->aborted = x->gone = true;
	x->abort_state = state;
	return -1;
}

static int send_msg(struct qsm_conn *q, struct queue *x)
{
	struct qsm_sge ss;

	snprintf(x->sbuf, sizeof(x->sbuf), "queue %u msg %u", x->index, x->exchanged);
	ss = vm_sge(x->sbuf, (uint32_t)strlen(x->sbuf) + 1, x->mr);
	return qsm_conn_post_send(q, WR_SEND, &ss, 1, QSM_POST_SIGNALED);
}

static int c_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *x = note(q, "enter", ev->to);

	if (!x)
		return 0;
	if (ev->to == QSM_CM_CONNECTED) {
		/* the base class's CONNECTED.enter, which this slot overrides */
		if (qsm_conn_ready(q) < 0)
			x->errors++;
	} else if (ev->to == QSM_CM_LIVE) {
		x->lives++;
		if (verbs_check(q))
			verbs_ok++;
		else
			x->errors++;
		if (send_msg(q, x) < 0)
			x->errors++;
		if (x->role == ROLE_ABORT_LIVE)
			return abort_queue(x, ev->to);
	}
	return 0;
}

static int c_exit(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	note(q, "exit", ev->from);
	return 0;
}

static int c_on_event(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	note(q, "on_event", ev->from);
	return 0;
}

static int c_unexpected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *x = note(q, "unexpected", ev->from);

	if (x)
		x->unexpected++;
	return 0;
}

static int c_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	note(q, "device_removed", ev->from);
	return 0;
}

/* The MR and the first receive, before the connect is sent. */
static int c_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *x = note(q, "qp_ready", ev->to);
	struct qsm_sge rs;

	if (!x)
		return 0;
	if (vm_reg_buffer(q, &x->mr, x, sizeof(*x)) < 0) {
		x->errors++;
		return 0;
	}
	rs = vm_sge(x->rbuf, sizeof(x->rbuf), x->mr);
	if (qsm_conn_post_recv(q, WR_RECV, &rs, 1) < 0)
		x->errors++;
	return 0;
}

static int c_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct queue *x = note(q, "completion", qsm_conn_state(q));
	char want[MSG_LEN];
	struct qsm_sge rs;

	if (!x)
		return 0;
	if (wc->status == QSM_WC_WR_FLUSH_ERR)
		return 0;
	if (wc->status != QSM_WC_SUCCESS) {
		x->errors++;
		return 0;
	}
	if (wc->wr_id == WR_SEND)
		return 0;
	snprintf(want, sizeof(want), "echo: queue %u msg %u", x->index, x->exchanged);
	if (wc->wr_id != WR_RECV || wc->byte_len != strlen(want) + 1 || strcmp(x->rbuf, want)) {
		x->errors++;
		return 0;
	}
	x->exchanged++;
	rs = vm_sge(x->rbuf, sizeof(x->rbuf), x->mr);
	if (qsm_conn_post_recv(q, WR_RECV, &rs, 1) < 0)
		x->errors++;
	/* a receive is posted: it must never come back, not even flushed */
	if (x->role == ROLE_ABORT_COMPLETION)
		return abort_queue(x, qsm_conn_state(q));
	if (x->exchanged < x->target && send_msg(q, x) < 0)
		x->errors++;
	return 0;
}

static void c_release(struct qsm_conn *q)
{
	struct queue *x = note(q, "release", -1);

	if (x) {
		x->released = x->gone = true;
		x->mr = NULL;   /* freed with the queue */
	}
}

#define ALL3 { .enter = c_enter, .exit = c_exit, .on_event = c_on_event }

/* Every slot filled: no callback of any kind goes to the base class unseen. */
static const struct qsm_class client_class = {
	.name = "abort_client",
	.super = &qsm_base_class,
	.active = {
		[QSM_CM_IDLE] = ALL3, [QSM_CM_ADDR_RESOLVING] = ALL3, [QSM_CM_ROUTE_RESOLVING] = ALL3,
		[QSM_CM_CONNECTING] = ALL3, [QSM_CM_CONNECTED] = ALL3, [QSM_CM_LIVE] = ALL3,
		[QSM_CM_DISCONNECTING] = ALL3, [QSM_CM_DRAINING] = ALL3, [QSM_CM_CLOSING] = ALL3,
		[QSM_CM_RECONNECT_WAIT] = ALL3, [QSM_CM_FAILED] = ALL3, [QSM_CM_CLOSED] = ALL3,
	},
	.unexpected = c_unexpected,
	.device_removed = c_device_removed,
	.qp_ready = c_qp_ready,
	.completion = c_completion,
	.release = c_release,
};

/* ---- the echo server; its passive queues know which client they serve ---- */

static struct peer *peer_of(struct qsm_conn *q)
{
	struct echo *e = qsm_conn_priv(q);

	return e->client >= 0 && (unsigned)e->client < n ? &peers[e->client] : NULL;
}

static int s_requested(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct echo *e = qsm_conn_priv(q);

	e->client = ev->private_data_len >= 1 ? ((const unsigned char *)ev->private_data)[0] : -1;
	if (peer_of(q))
		peer_of(q)->accepted = true;
	return qsm_conn_accept(q, NULL, 0) < 0;
}

static int s_on_event(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct peer *p = peer_of(q);

	if (p && ev->event == QSM_EV_DISCONNECTED)
		p->disconnected++;
	return 0;
}

static int s_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct echo *e = qsm_conn_priv(q);
	struct peer *p = peer_of(q);

	(void)ev;
	if (vm_echo_qp_ready(q, &e->buf) < 0 && p)
		p->errors++;
	return 0;
}

static int s_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct echo *e = qsm_conn_priv(q);
	struct peer *p = peer_of(q);

	if (!p)
		return 0;
	switch (vm_echo_completion(q, &e->buf, wc)) {
	case VM_ECHO_SENT:
		p->echoes++;
		break;
	case VM_ECHO_BAD_STATUS:
		p->bad_status++;   /* e.g. an echo to a peer that destroyed its QP meanwhile */
		break;
	case VM_ECHO_POST_FAILED:
		p->errors++;
		break;
	case VM_ECHO_NOTHING:
		break;
	}
	return 0;
}

static void s_release(struct qsm_conn *q)
{
	struct peer *p = peer_of(q);

	if (p)
		p->released = true;
}

#define S_ON { .on_event = s_on_event }

static const struct qsm_class server_class = {
	.name = "abort_server",
	.super = &qsm_base_class,
	.priv_size = sizeof(struct echo),
	.passive = {
		[QSM_ACCEPT_NEW] = S_ON,
		[QSM_ACCEPT_REQUESTED] = { .enter = s_requested, .on_event = s_on_event },
		[QSM_ACCEPT_ACCEPTING] = S_ON, [QSM_ACCEPT_CONNECTED] = S_ON, [QSM_ACCEPT_LIVE] = S_ON,
		[QSM_ACCEPT_DISCONNECTING] = S_ON, [QSM_ACCEPT_DRAINING] = S_ON,
	},
	.qp_ready = s_qp_ready,
	.completion = s_completion,
	.release = s_release,
};

/* Aborts taken, the server closed their peers, the survivors LIVE with their rounds done. */
static bool settled(void)
{
	for (unsigned i = 0; i < n; i++) {
		const struct queue *x = &u[i];

		if (x->role != ROLE_LIVE && (!x->aborted || !peers[i].released))
			return false;
		if (x->role == ROLE_LIVE &&
		    (x->gone || qsm_conn_state(x->q) != QSM_CM_LIVE || x->exchanged < x->target))
			return false;
	}
	return true;
}

static unsigned survivors_done(void)
{
	unsigned c = 0;

	for (unsigned i = 0; i < n; i++)
		c += u[i].role == ROLE_LIVE && !u[i].gone && u[i].exchanged >= u[i].target;
	return c;
}

/* `rdma res show RES`: how many lines of this process contain `what`; with `when`, those lines
 * are printed too, under a header that says when they were taken. */
static int res_lines(const char *res, const char *what, const char *when)
{
	char cmd[64], line[512], pidw[32];
	FILE *p;
	int c = 0;

	snprintf(cmd, sizeof(cmd), "rdma res show %s 2>&1", res);
	snprintf(pidw, sizeof(pidw), " pid %d ", (int)getpid());
	p = popen(cmd, "r");
	if (!p)
		return -1;
	if (when)
		printf("   rdma res show %s (%s), lines of pid %d:\n", res, when, (int)getpid());
	while (fgets(line, sizeof(line), p))
		if (strstr(line, pidw) && strstr(line, what)) {
			if (when)
				printf("     %s", line);
			c++;
		}
	pclose(p);
	if (when && !c)
		printf("     (none)\n");
	return c;
}

static int show_res(const char *res, const char *when)
{
	return res_lines(res, "", when);
}

static int count_res_lines(const char *res, const char *what)
{
	return res_lines(res, what, NULL);
}

int main(int argc, char **argv)
{
	const char *ip = vm_env("QSM_VM_ADDR", "192.0.2.1");
	struct sockaddr_storage addr;
	bool addr_ok = vm_parse_addr(&addr, ip, "QSM_ABORT_PORT", "7473");
	struct qsm_ctx *server, *client;
	struct qsm_listener *l;
	struct qsm_counters cc, sc;
	double t0, t_settle = -1, t_more = -1, t_close = -1;
	unsigned n_abort = 0, n_live = 0;

	n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 10;
	vm_init_stdio();
	if (n < 3 || n > 200 || !addr_ok) {
		fprintf(stderr, "usage: abort [N (3..200) [TRACE_FILE|-]]\n");
		return 2;
	}
	if (vm_trace_open(argc, argv) < 0)
		return 2;
	u = calloc(n, sizeof(*u));
	peers = calloc(n, sizeof(*peers));
	if (!u || !peers)
		return 2;

	if (vm_ctxs_new(&server, &client) < 0 ||
	    vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
			    .cls = &server_class, .backlog = 128 }, ip, &l) < 0)
		return 1;

	/* ---- connect: the roles play out ---- */
	for (unsigned i = 0; i < n; i++) {
		unsigned char who = (unsigned char)i;

		u[i].index = i;
		u[i].abort_state = -1;
		u[i].role = i == 1 ? ROLE_ABORT_COMPLETION : i % 2 == 0 ? ROLE_ABORT_LIVE : ROLE_LIVE;
		u[i].target = ROUNDS;
		n_abort += u[i].role != ROLE_LIVE;
		n_live += u[i].role == ROLE_LIVE;
		if (vm_conn_start(client, &(struct qsm_conn_opts){ .cls = &client_class,
				  .dst = (struct sockaddr *)&addr,
				  .policy = { .initial_delay_ms = 500, .max_delay_ms = 1000 },
				  .private_data = &who, .private_data_len = 1, .user = &u[i] }, i, &u[i].q) < 0)
			return 1;
	}
	printf("== %u queues connect to %s port %u: %u abort in LIVE.enter, 1 in completion, %u stay LIVE "
	       "(%d messages each)\n", n, ip, vm_addr_port(&addr), n_abort - 1, n_live, ROUNDS);
	t0 = vm_now();
	while (!settled() && (vm_now() - t0) * 1000 < CONNECT_LIMIT_MS)
		vm_pump(server, client);
	if (settled())
		t_settle = vm_now() - t0;
	vm_check(t_settle >= 0, "settled after %.3f s: aborts taken, their server peers closed, %u/%u others "
	         "LIVE with %d messages exchanged", t_settle, survivors_done(), n_live, ROUNDS);
	/* Late callbacks (flushed receives, a DISCONNECTED, a timer) would come now. */
	printf("== %d ms more of dispatching: nothing may reach an aborted queue\n", QUIET_MS);
	vm_pump_for(server, client, QUIET_MS);

	{
		unsigned aborted = 0, after = 0, rel = 0, disc = 0, sclosed = 0, in_state = 0;

		for (unsigned i = 0; i < n; i++) {
			const struct queue *x = &u[i];

			if (x->role == ROLE_LIVE)
				continue;
			aborted += x->aborted;
			after += x->calls_after;
			rel += x->released;
			disc += peers[i].accepted && peers[i].disconnected >= 1;
			sclosed += peers[i].released;
			in_state += x->abort_state == QSM_CM_LIVE;
			printf("   queue %u (%s): aborted in %s after %u callbacks, %u after the abort%s%s; "
			       "server peer: accepted %d, DISCONNECTED seen %u, closed %d, echoes %u, "
			       "bad completions %u\n", i, role_names[x->role], vm_cm_state_name(x->abort_state),
			       x->calls - x->calls_after, x->calls_after, x->calls_after ? ", first: " : "",
			       x->first_after, peers[i].accepted, peers[i].disconnected, peers[i].released,
			       peers[i].echoes, peers[i].bad_status);
		}
		vm_check(aborted == n_abort && in_state == n_abort, "%u/%u handlers returned -1 (all in LIVE)",
		         aborted, n_abort);
		vm_check(after == 0, "no callback of any kind for an aborted queue afterwards (%u seen)", after);
		vm_check(rel == 0, "release not called for an aborted queue (%u calls)", rel);
		vm_check(u[1].exchanged == 1, "queue 1 exchanged one message before its completion handler aborted");
		vm_check(disc == n_abort, "server saw DISCONNECTED from %u/%u aborted peers", disc, n_abort);
		vm_check(sclosed == n_abort, "server closed %u/%u passive queues of aborted peers", sclosed, n_abort);
	}
	qsm_ctx_counters(client, &cc, sizeof(cc));
	qsm_ctx_counters(server, &sc, sizeof(sc));
	vm_check(cc.aborts == n_abort, "client counters: aborts %llu (expected %u: %u from LIVE.enter, 1 from "
	         "completion)", (unsigned long long)cc.aborts, n_abort, n_abort - 1);
	vm_check(cc.popped + cc.aborts == cc.dispatched + cc.dropped + cc.completions,
	         "client counters: popped %llu + aborts %llu == dispatched %llu + dropped %llu + completions %llu",
	         (unsigned long long)cc.popped, (unsigned long long)cc.aborts, (unsigned long long)cc.dispatched,
	         (unsigned long long)cc.dropped, (unsigned long long)cc.completions);
	vm_check(cc.queues_live == n_live && sc.queues_live == n_live,
	         "queues_live: client %llu, server %llu (expected %u each)", (unsigned long long)cc.queues_live,
	         (unsigned long long)sc.queues_live, n_live);
	vm_check(cc.unexpected == 0 && sc.unexpected == 0 && cc.reconnects == 0,
	         "unexpected: client %llu, server %llu; reconnects %llu", (unsigned long long)cc.unexpected,
	         (unsigned long long)sc.unexpected, (unsigned long long)cc.reconnects);

	/* ---- the survivors go on: more messages after every abort ---- */
	t0 = vm_now();
	for (unsigned i = 0; i < n; i++)
		if (u[i].role == ROLE_LIVE && !u[i].gone) {
			u[i].target += ROUNDS;
			if (send_msg(u[i].q, &u[i]) < 0)
				u[i].errors++;
		}
	while (survivors_done() < n_live && (vm_now() - t0) * 1000 < EXCHANGE_LIMIT_MS)
		vm_pump(server, client);
	if (survivors_done() == n_live)
		t_more = vm_now() - t0;
	{
		unsigned live = 0, errs = 0, serrs = 0;

		for (unsigned i = 0; i < n; i++) {
			if (u[i].role != ROLE_LIVE)
				continue;
			live += !u[i].gone && qsm_conn_state(u[i].q) == QSM_CM_LIVE;
			errs += u[i].errors + u[i].unexpected;
			serrs += peers[i].errors + peers[i].bad_status;
		}
		vm_check(live == n_live && t_more >= 0 && !errs && !serrs,
		         "%u/%u others still LIVE, %d more messages each in %.3f s; errors: client %u, server %u",
		         live, n_live, ROUNDS, t_more, errs, serrs);
	}
	vm_check(verbs_ok >= n_live, "qsm_conn_verbs: %u queues' cm_id, QP (RTS, ibv_query_qp) and PD checked in LIVE",
		 verbs_ok);
	printf("   rdma resources while %u queues are live:\n", n_live);
	show_res("qp", "live");

	/* ---- close the rest; nothing may be left ---- */
	printf("== %u queues disconnect (limit %d ms)\n", n_live, CLOSE_LIMIT_MS);
	for (unsigned i = 0; i < n; i++)
		if (u[i].role == ROLE_LIVE && !u[i].gone && qsm_conn_disconnect(u[i].q) < 0)
			u[i].errors++;
	t0 = vm_now();
	for (;;) {
		unsigned rel = 0, srel = 0;

		for (unsigned i = 0; i < n; i++) {
			rel += u[i].released;
			srel += peers[i].released;
		}
		if (rel == n_live && srel == n) {
			t_close = vm_now() - t0;
			break;
		}
		if ((vm_now() - t0) * 1000 >= CLOSE_LIMIT_MS)
			break;
		vm_pump(server, client);
	}
	vm_pump_for(server, client, 200);
	qsm_ctx_counters(client, &cc, sizeof(cc));
	qsm_ctx_counters(server, &sc, sizeof(sc));
	{
		unsigned after = 0;

		for (unsigned i = 0; i < n; i++)
			after += u[i].calls_after;
		vm_check(t_close >= 0 && cc.queues_live == 0 && sc.queues_live == 0,
		         "all closed after %.3f s: queues_live client %llu, server %llu", t_close,
		         (unsigned long long)cc.queues_live, (unsigned long long)sc.queues_live);
		vm_check(cc.devices_live == 0 && sc.devices_live == 0, "device registries empty (client %llu, "
		         "server %llu)", (unsigned long long)cc.devices_live, (unsigned long long)sc.devices_live);
		vm_check(after == 0, "no callback after an abort or a release, to the end (%u)", after);
	}
	{
		int qps = show_res("qp", "all queues closed, listener up");
		int ids;

		show_res("cm_id", "all queues closed, listener up");
		ids = count_res_lines("cm_id", "");
		vm_check(qps == 0, "no QP of ours left (%d)", qps);
		vm_check(count_res_lines("cm_id", "state LISTEN") == 1 && ids >= 1,
		         "cm_ids of ours: %d, one of them the listener", ids);
	}
	qsm_listener_destroy(l);
	vm_pump_for(server, client, 100);
	printf("== counters: client aborts %llu, completions %llu, dropped %llu, unexpected %llu, "
	       "action_errors %llu; server completions %llu, unexpected %llu\n",
	       (unsigned long long)cc.aborts, (unsigned long long)cc.completions,
	       (unsigned long long)cc.dropped, (unsigned long long)cc.unexpected,
	       (unsigned long long)cc.action_errors, (unsigned long long)sc.completions,
	       (unsigned long long)sc.unexpected);
	vm_ctxs_free(server, client);
	{
		int qps = show_res("qp", "after qsm_ctx_free");
		int ids = show_res("cm_id", "after qsm_ctx_free");
		int pins = count_res_lines("cm_id", "state ADDR_BOUND");

		vm_check(qps == 0, "after qsm_ctx_free: no QP of ours (%d)", qps);
		/* the backend pins each verbs context it saw with one bound id, for the process */
		vm_check(ids == pins && ids <= 1, "after qsm_ctx_free: %d cm_ids of ours, all bound-only context "
		         "pins (%d)", ids, pins);
	}
	free(u);
	free(peers);
	printf("== summary: N=%u (%u aborted, %u live): settled %.3f s, more messages %.3f s, close %.3f s: %s\n",
	       n, n_abort, n_live, t_settle, t_more, t_close, vm_failures ? "FAILED" : "PASS");
	return vm_failures ? 1 : 0;
}
