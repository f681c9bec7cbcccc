/* rdma-qsm: the fault matrix.  Every fault of the simulated fabric, device removal and re-add and
 * QP errors, injected in every state of the active queue, the passive queue and the listener. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/ctx.h>
#include <qsm/sim.h>

#include "check_main.h"
#include "harness.h"

/*
 * How a combination runs (one loop-test iteration each):
 *   1. drive the queue to the state, stopping it there by holding (QSM_SIM_FAULT_HOLD)
 *      the event that would move it on; where it can post, fill its send queue with one
 *      list and its receive queue;
 *   2. inject the fault with the held events still held, then *provoke* what the state
 *      waits for (release the held events, connect from IDLE/FAILED, lose or close a
 *      live connection), and let virtual time run;
 *   3. recover (faults disarmed, held events released, device back, ready/connect) and
 *      run again;
 * then assert the edge the fault must take (as the .rl files and doc/machines.md give it),
 * the state the queue ends in, that every WR it posted completed as qsm_conn_post_send(3)
 * says (once, or not at all), that a LIVE queue fills its queues again, that no callback
 * came after a destroy, that every event was accounted for, and that nothing leaked once
 * both ctxs are freed.
 */

#define MS 1000000ull
#define HORIZON_MS 10000
#define RECOVER_MS 30000

static struct qsm_sim *sim;
static struct qsm_fabric *cfab, *sfab;
static struct qsm_ctx *cctx, *sctx;
static struct harness world;
static struct qsm_listener *listener;
static struct sockaddr_in addr;
static uint32_t request_ms;    /* the server's passive queues: REQUESTED timeout, 0 = default */

/* ---- what the test class saw, per queue ---- */

#define LOG_MAX 1024
#define REC_MAX 128
#define UNEXPECTED (-1)
#define ANY (-2)

struct step {
	int from, event, to;        /* to == UNEXPECTED: no edge */
};

struct rec {
	struct qsm_conn *q;
	bool passive;
	bool gone;                  /* destroyed, aborted or released: no callback may follow */
	bool released;
	bool auto_ready;            /* CONNECTED.enter calls qsm_conn_ready() */
	bool defer;                 /* passive: REQUESTED.enter decides nothing */
	int device_removed;
	int qps_made;               /* qp_ready calls: a new one is a new QP */
	unsigned nlog;
	struct step log[LOG_MAX];
};

static struct rec recs[REC_MAX];
static unsigned nrecs;
static unsigned calls_after_gone;
static char after_gone_msg[200];
static bool srv_defer, srv_auto_ready;
static struct rec *last_passive;

static struct rec *rec_new(struct qsm_conn *q, bool passive)
{
	struct rec *r;

	ck_assert_uint_lt(nrecs, REC_MAX);
	r = &recs[nrecs++];
	memset(r, 0, sizeof(*r));
	r->q = q;
	r->passive = passive;
	r->auto_ready = passive ? srv_auto_ready : true;
	r->defer = passive && srv_defer;
	*(struct rec **)qsm_conn_priv(q) = r;
	if (passive)
		last_passive = r;
	return r;
}

/* Every callback comes through here: a passive queue gets its record on its first one. */
static struct rec *cb(struct qsm_conn *q, const char *what)
{
	struct rec *r = *(struct rec **)qsm_conn_priv(q);

	if (!r)
		r = rec_new(q, true);
	if (r->gone && !calls_after_gone++)
		snprintf(after_gone_msg, sizeof(after_gone_msg), "%s on %s queue #%td after its destroy",
			 what, r->passive ? "passive" : "active", r - recs);
	return r;
}

static void log_step(struct rec *r, int from, int event, int to)
{
	if (r->nlog < LOG_MAX)
		r->log[r->nlog++] = (struct step){ from, event, to };
}

static int srq_lows, srq_posted;   /* srq_class (below): its srq_low calls, receives posted */
static int lows_at_connect_error;   /* srq_lows at the first CONNECT_ERROR edge, or -1 */

static int h_on_event(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	if (ev->event == QSM_EV_CONNECT_ERROR && lows_at_connect_error < 0)
		lows_at_connect_error = srq_lows;
	log_step(cb(q, "on_event"), ev->from, ev->event, ev->to);
	return 0;
}

static int h_unexpected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	log_step(cb(q, "unexpected"), ev->from, ev->event, UNEXPECTED);
	return 0;
}

static int h_exit(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	cb(q, "exit");
	return 0;
}

static int h_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct rec *r = cb(q, "enter");

	if (!r->passive && ev->to == QSM_CM_CONNECTED && r->auto_ready)
		ck_assert_int_eq(qsm_conn_ready(q), 0);
	if (r->passive && ev->to == QSM_ACCEPT_CONNECTED && r->auto_ready)
		ck_assert_int_eq(qsm_conn_ready(q), 0);
	if (r->passive && ev->to == QSM_ACCEPT_REQUESTED && !r->defer)
		ck_assert_int_eq(qsm_conn_accept(q, NULL, 0), 0);
	return 0;
}

static int h_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	cb(q, "device_removed")->device_removed++;
	return 0;
}

static int h_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	cb(q, "qp_ready")->qps_made++;
	return 0;
}

static void h_release(struct qsm_conn *q)
{
	struct rec *r = cb(q, "release");

	r->released = true;
	r->gone = true;
}

/*
 * Work requests: the queue under test posts lists that fill its send queue and receives that
 * fill its receive queue; every completion is counted here, by wr_id, against what the
 * contract says of its WR (qsm_conn_post_send(3) "Completions" and "Flushes").
 */
#define SQ_WR 4                 /* the matrix's QPs are small: a full queue is cheap to post */
#define RQ_WR 4
#define WR_TAG 0x5100000000000000ull   /* our wr_ids: WR_TAG + index (the SRQ's are 0..SRQ_WR-1) */
#define WR_REFUSED (WR_TAG + 0x10000)  /* a list that must be refused: none may complete */
#define WR_MAX 64

enum want {
	W_NOTHING,                  /* an unsignaled WR that succeeded: no completion */
	W_SUCCESS,                  /* a signaled WR on a QP in RTS */
	W_FLUSH,                    /* posted to a QP in ERR */
	W_HELD,                     /* a receive on the QP: flushed, gone with it, or still posted */
};

struct wr_rec {
	struct qsm_conn *q;
	enum want want;
	unsigned completions;
	enum qsm_wc_status status;
};
static struct wr_rec wrs[WR_MAX];
static unsigned nwrs;
static unsigned wr_strays;      /* completions of a wr_id never posted, or on another queue */

static int h_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	uint64_t i = wc->wr_id - WR_TAG;

	cb(q, "completion");
	if (wc->wr_id < WR_TAG || i >= nwrs || wrs[i].q != q) {
		wr_strays++;
		return 0;
	}
	wrs[i].completions++;
	wrs[i].status = wc->status;
	return 0;
}

#define H { .enter = h_enter, .exit = h_exit, .on_event = h_on_event }
static const struct qsm_class test_class = {
	.name = "faults",
	.priv_size = sizeof(struct rec *),
	.active = { [0 ... QSM_CM_STATE_COUNT - 1] = H },
	.passive = { [0 ... QSM_ACCEPT_STATE_COUNT - 1] = H },
	.unexpected = h_unexpected,
	.device_removed = h_device_removed,
	.qp_ready = h_qp_ready,
	.completion = h_completion,
	.release = h_release,
	.qp = { .max_send_wr = SQ_WR, .max_recv_wr = RQ_WR },
};

/* The same class on a shared receive queue (qsm_srq_post_recv(3)): srq_low fills it from a pool
 * of the queue's ctx.  The matrices run again with it (the *_on_an_srq tests). */
#define SRQ_WR 16
static char srq_buf[SRQ_WR][64];
static struct qsm_pool *srq_pool[2];   /* the client's ctx, the server's */

static void h_srq_low(struct qsm_srq *s)
{
	struct qsm_pool *p = srq_pool[qsm_srq_ctx(s) == sctx];
	uint32_t lkey, rkey;

	srq_lows++;
	ck_assert_int_eq(qsm_pool_srq_keys(p, s, &lkey, &rkey), 0);
	for (int i = 0; i < SRQ_WR; i++) {
		struct qsm_sge sge = { (uintptr_t)srq_buf[i], sizeof(srq_buf[i]), lkey };
		int r = qsm_srq_post_recv(s, (uint64_t)i, &sge, 1);

		if (r == -ENOBUFS)
			break;
		ck_assert_int_eq(r, 0);
		srq_posted++;
	}
}

static const struct qsm_class srq_class = {
	.name = "faults-srq", .super = &test_class,
	.srq = { .max_wr = SRQ_WR, .limit = 4 }, .srq_low = h_srq_low,
};
static const struct qsm_class *srv_cls, *cli_cls;   /* the class of each side's queues */
static bool on_srq;   /* the queue under test is of srq_class */

/* ---- trace: every dispatched event is traced once; the listener's edges are logged ---- */

struct tally {
	uint64_t records;           /* conn, passive, listener, device */
	uint64_t fabric;            /* events the ctx could give to no object */
};
static struct tally ctally, stally;
static struct step llog[LOG_MAX];
static unsigned nllog;

static int lstate_of(const char *name)
{
	for (int s = 0; s < QSM_LISTENER_STATE_COUNT; s++)
		if (!strcmp(qsm_state_name(QSM_MACHINE_LISTENER, s), name))
			return s;
	ck_abort_msg("unknown listener state %s", name);
	return -1;
}

static void tracer(const struct qsm_trace_record *t, void *arg)
{
	struct tally *y = arg;

	if (!strcmp(t->kind, "fabric")) {
		y->fabric++;
		return;
	}
	y->records++;
	if (!strcmp(t->kind, "listener") && nllog < LOG_MAX)
		llog[nllog++] = (struct step){ lstate_of(t->from), qsm_event_from_name(t->event),
					       t->to ? lstate_of(t->to) : UNEXPECTED };
}

/* ---- the world: one device, a client ctx and a server ctx ---- */

/* The server's ctx dispatches first when @server_first (its own calls post first). */
static void dispatch_order(bool server_first)
{
	world.ctx[0] = server_first ? &sctx : &cctx;
	world.ctx[1] = server_first ? &cctx : &sctx;
}

static struct qsm_ctx *new_ctx(struct qsm_fabric **fab, struct tally *y)
{
	struct qsm_ctx *c;
	struct qsm_ctx_opts o = { .now_ns = harness_clock, .now_arg = &world, .seed = 7 };

	ck_assert_int_eq(qsm_sim_fabric_new(sim, fab), 0);
	o.fabric = *fab;
	ck_assert_int_eq(qsm_ctx_new(&o, &c), 0);
	ck_assert_int_eq(qsm_ctx_set_trace(c, tracer, y), 0);
	return c;
}

static void setup(void)
{
	world = (struct harness){ .now_ns = 1000 * MS };
	memset(recs, 0, sizeof(recs));
	nrecs = 0;
	calls_after_gone = 0;
	srv_defer = false;
	srv_auto_ready = true;
	dispatch_order(false);
	request_ms = 0;
	srv_cls = cli_cls = &test_class;
	on_srq = false;
	srq_lows = srq_posted = 0;
	lows_at_connect_error = -1;
	srq_pool[0] = srq_pool[1] = NULL;
	last_passive = NULL;
	memset(wrs, 0, sizeof(wrs));
	nwrs = wr_strays = 0;
	listener = NULL;
	memset(&ctally, 0, sizeof(ctally));
	memset(&stally, 0, sizeof(stally));
	nllog = 0;
	ck_assert_int_eq(qsm_sim_new(&sim), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	cctx = new_ctx(&cfab, &ctally);
	sctx = new_ctx(&sfab, &stally);
	addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(4420) };
	inet_pton(AF_INET, "192.0.2.1", &addr.sin_addr);
}

static void teardown(void)
{
	qsm_ctx_free(cctx);
	qsm_ctx_free(sctx);
	qsm_sim_free(sim);
}

static void hold_all(void)
{
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_HOLD, 1000000), 0);
}

static void unhold(void)
{
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_HOLD, 0), 0); /* held stay held */
}

static void release_held(void)
{
	ck_assert_int_ge(qsm_sim_release(sim), 0);
}

static void disarm_all(void)
{
	for (int f = 0; f < QSM_SIM_FAULT_COUNT; f++)
		ck_assert_int_eq(qsm_sim_inject(sim, (enum qsm_sim_fault)f, 0), 0);
}

static void listen_server(void)
{
	struct qsm_listener_opts o = { .addr = (struct sockaddr *)&addr, .cls = srv_cls,
				       .relisten = { .initial_delay_ms = 50, .max_delay_ms = 200 },
				       .timeouts = { .request_ms = request_ms } };

	ck_assert_int_eq(qsm_listener_new(sctx, &o, &listener), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_listener_state(listener), QSM_LISTENER_LISTENING);
}

static struct rec *new_client(uint32_t max_attempts)
{
	struct qsm_conn *q;
	struct qsm_conn_opts o = {
		.cls = cli_cls, .dst = (struct sockaddr *)&addr,
		.policy = { .initial_delay_ms = 10, .max_delay_ms = 100, .max_attempts = max_attempts },
	};

	ck_assert_int_eq(qsm_conn_new(cctx, &o, &q), 0);
	return rec_new(q, false);
}

static int state_of(struct rec *r)
{
	if (r->released)
		return r->passive ? QSM_ACCEPT_CLOSED : QSM_CM_CLOSED;
	return qsm_conn_state(r->q);
}

static uint64_t counter(struct qsm_ctx *c, size_t off)
{
	struct qsm_counters k;

	ck_assert_int_eq(qsm_ctx_counters(c, &k, sizeof(k)), 0);
	return *(uint64_t *)((char *)&k + off);
}
#define COUNT(c, f) counter(c, offsetof(struct qsm_counters, f))

/* Every event a ctx took reached a handler path, the unexpected path, the drop count or the
 * orphan count, exactly once; every dispatch and every orphan was traced once. */
static void check_accounting(struct qsm_ctx *c, const struct tally *y, const char *who)
{
	struct qsm_counters k;
	uint64_t sum = 0;

	ck_assert_int_eq(qsm_ctx_counters(c, &k, sizeof(k)), 0);
	ck_assert_msg(k.popped + k.aborts + k.device_closes == k.dispatched + k.dropped + k.completions,
		      "%s: popped %llu + aborts %llu + device closes %llu != dispatched %llu + dropped %llu + completions %llu",
		      who, (unsigned long long)k.popped, (unsigned long long)k.aborts, (unsigned long long)k.device_closes,
		      (unsigned long long)k.dispatched, (unsigned long long)k.dropped,
		      (unsigned long long)k.completions);
	ck_assert_msg(k.dispatched == y->records, "%s: dispatched %llu, traced %llu", who,
		      (unsigned long long)k.dispatched, (unsigned long long)y->records);
	ck_assert_msg(k.orphans == y->fabric, "%s: %llu orphans, %llu traced", who,
		      (unsigned long long)k.orphans, (unsigned long long)y->fabric);
	for (int e = 0; e < QSM_EV_LIMIT; e++)
		sum += k.events[e];
	ck_assert_msg(sum == k.dispatched, "%s: events[] sum to %llu, dispatched %llu", who,
		      (unsigned long long)sum, (unsigned long long)k.dispatched);
}

static void check_fabric_accounting(void)
{
	struct qsm_sim_stats st;

	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(COUNT(cctx, fabric_events) + COUNT(sctx, fabric_events), st.events_delivered);
}

/* Destroys whatever is alive, lets it close, and checks nothing is left anywhere. */
static void finish(void)
{
	struct qsm_sim_stats st;

	disarm_all();
	release_held();
	srv_defer = false;
	srv_auto_ready = true;
	for (int round = 0; round < 8; round++) {
		bool any = false;

		for (unsigned i = 0; i < nrecs; i++)
			if (!recs[i].gone) {
				ck_assert_int_eq(qsm_conn_destroy(recs[i].q), 0);
				recs[i].gone = true;
				any = true;
			}
		if (listener) {
			ck_assert_int_eq(qsm_listener_destroy(listener), 0);
			listener = NULL;
			any = true;
		}
		harness_run_for(&world, RECOVER_MS);
		if (!any)
			break;
	}
	ck_assert_msg(calls_after_gone == 0, "%s", after_gone_msg);
	ck_assert_uint_eq(COUNT(cctx, queues_live), 0);
	ck_assert_uint_eq(COUNT(sctx, queues_live), 0);
	ck_assert_uint_eq(COUNT(cctx, devices_live), 0);
	ck_assert_uint_eq(COUNT(sctx, devices_live), 0);
	ck_assert_uint_eq(COUNT(cctx, srqs_live), 0);   /* an SRQ goes with its device's entry */
	ck_assert_uint_eq(COUNT(sctx, srqs_live), 0);
	check_accounting(cctx, &ctally, "client");
	check_accounting(sctx, &stally, "server");
	check_fabric_accounting();
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids, 0);
	ck_assert_uint_eq(st.qps, 0);
	ck_assert_uint_eq(st.device_refs, 0);
	ck_assert_uint_eq(st.events_pending, 0);
	ck_assert_uint_eq(st.srqs, 0);

	qsm_ctx_free(cctx);
	qsm_ctx_free(sctx);
	cctx = sctx = NULL;
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids, 0);
	ck_assert_uint_eq(st.qps, 0);
	ck_assert_uint_eq(st.device_refs, 0);
	ck_assert_uint_eq(st.events_pending, 0);
	ck_assert_uint_eq(st.ids_leaked, 0);
}

/* ---- the matrix's vocabulary ---- */

enum fault {
	F_NONE,                     /* control: the provocation alone */
	F_ADDR_ERROR, F_ROUTE_ERROR, F_REJECT, F_UNREACHABLE, F_CONNECT_ERROR,
	F_NO_TIMEWAIT_EXIT, F_DUP_DISCONNECTED, F_LATE_ESTABLISHED, F_NO_DRAINED, F_ENOMEM,
	F_HOLD,                     /* delayed events: held through the horizon, then released */
	F_DEVICE_REMOVAL,           /* the device goes; re-added on recovery */
	F_DEVICE_ADDED,             /* another device appears */
	F_QP_FATAL,                 /* qsm_sim_qp_fatal() on the queue */
	F_REJECT_STALE,             /* armed: a connect is rejected for a stale connection */
	F_PORT_ERR,                 /* the device's port goes down (qsm_sim_port_event) */
	F_PORT_ACTIVE,              /* ... and comes back */
	F_GID_CHANGE,               /* a port's event for the device's registry entry only */
	F_COMM_EST,                 /* the QP hears a message before the RTU (qsm_sim_qp_event) */
	F_ADDR_CHANGE,              /* the device's address moved (qsm_sim_addr_change) */
	F_COUNT
};

static const char *const fault_names[F_COUNT] = {
	"none", "ADDR_ERROR", "ROUTE_ERROR", "REJECT", "UNREACHABLE", "CONNECT_ERROR",
	"NO_TIMEWAIT_EXIT", "DUP_DISCONNECTED", "LATE_ESTABLISHED", "NO_DRAINED", "ENOMEM",
	"HOLD", "device removal", "device added", "qp_fatal", "REJECT_STALE", "PORT_ERR", "PORT_ACTIVE",
	"GID_CHANGE", "COMM_EST", "ADDR_CHANGE",
};

static const enum qsm_sim_fault sim_fault[F_COUNT] = {
	[F_ADDR_ERROR] = QSM_SIM_FAULT_ADDR_ERROR, [F_ROUTE_ERROR] = QSM_SIM_FAULT_ROUTE_ERROR,
	[F_REJECT] = QSM_SIM_FAULT_REJECT, [F_UNREACHABLE] = QSM_SIM_FAULT_UNREACHABLE,
	[F_CONNECT_ERROR] = QSM_SIM_FAULT_CONNECT_ERROR,
	[F_NO_TIMEWAIT_EXIT] = QSM_SIM_FAULT_NO_TIMEWAIT_EXIT,
	[F_DUP_DISCONNECTED] = QSM_SIM_FAULT_DUP_DISCONNECTED,
	[F_LATE_ESTABLISHED] = QSM_SIM_FAULT_LATE_ESTABLISHED,
	[F_NO_DRAINED] = QSM_SIM_FAULT_NO_DRAINED, [F_ENOMEM] = QSM_SIM_FAULT_ENOMEM,
	[F_REJECT_STALE] = QSM_SIM_FAULT_REJECT_STALE,
};

static bool is_armed(enum fault f)
{
	return (f >= F_ADDR_ERROR && f <= F_ENOMEM) || f == F_REJECT_STALE;
}

/* The port's and the QP's events (on the one device, and the queue's QP if it has one):
 * what the call returns tells whether it reached anything. */
static void port_or_qp_event(enum fault f, struct qsm_fabric *fab, struct qsm_conn *q, bool has_qp)
{
	static const int port_ev[F_COUNT] = {
		[F_PORT_ERR] = QSM_EV_PORT_ERR, [F_PORT_ACTIVE] = QSM_EV_PORT_ACTIVE,
		[F_GID_CHANGE] = QSM_EV_GID_CHANGE,
	};

	if (f == F_COMM_EST)
		ck_assert_int_eq(qsm_sim_qp_event(sim, fab, q, QSM_EV_COMM_EST), has_qp ? 0 : -ENOENT);
	else if (f == F_ADDR_CHANGE)
		ck_assert_int_eq(qsm_sim_addr_change(sim, "sim0"), 0);
	else
		ck_assert_int_eq(qsm_sim_port_event(sim, "sim0", port_ev[f]), 0);
}

static bool port_or_qp_fault(enum fault f)
{
	return f >= F_PORT_ERR && f <= F_ADDR_CHANGE;
}

/*
 * One combination: after fault `fault` in state `state`, the queue's log holds the edge
 * from --event--> to exactly `count` times (count < 0: at least -count times), and the
 * queue ends in `final`.  `applicable` is false where the fault cannot reach this queue
 * from this state (its trigger already happened, or never comes): then only the end
 * state, the leak and the callback checks apply.
 */
struct row {
	enum fault fault;
	int state;
	bool applicable;
	int from, event, to, count;
	int final;
};

static unsigned count_edges(const struct rec *r, unsigned from_idx, int from, int event, int to)
{
	unsigned n = 0;

	for (unsigned i = from_idx; i < r->nlog; i++) {
		const struct step *s = &r->log[i];

		if ((from == ANY || s->from == from) && s->event == event && (to == ANY || s->to == to))
			n++;
	}
	return n;
}

static void log_text(enum qsm_machine m, const struct step *log, unsigned from_idx, unsigned n,
		     char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = 0;
	for (unsigned i = from_idx; i < n && o + 64 < len; i++)
		o += (size_t)snprintf(buf + o, len - o, " %s-%s->%s", qsm_state_name(m, log[i].from),
				      qsm_event_name(log[i].event),
				      log[i].to == UNEXPECTED ? "?" : qsm_state_name(m, log[i].to));
}

static void check_row(const struct row *w, enum qsm_machine m, const struct step *log, unsigned nlog,
		      unsigned mark, int final)
{
	char text[4096];
	const char *sname = qsm_state_name(m, w->state);

	log_text(m, log, mark, nlog, text, sizeof(text));
	if (w->applicable) {
		unsigned n = 0;

		for (unsigned i = mark; i < nlog; i++)
			if ((w->from == ANY || log[i].from == w->from) && log[i].event == w->event &&
			    (w->to == ANY || log[i].to == w->to))
				n++;
		ck_assert_msg(w->count < 0 ? n >= (unsigned)-w->count : n == (unsigned)w->count,
			      "%s in %s: edge %s --%s--> %s seen %u times, want %s%d; log:%s",
			      fault_names[w->fault], sname,
			      w->from == ANY ? "*" : qsm_state_name(m, w->from), qsm_event_name(w->event),
			      w->to == ANY ? "*" : w->to == UNEXPECTED ? "(unexpected)" : qsm_state_name(m, w->to),
			      n, w->count < 0 ? ">= " : "", w->count < 0 ? -w->count : w->count, text);
	}
	ck_assert_msg(final == w->final, "%s in %s: ends in %s, want %s; log:%s", fault_names[w->fault], sname,
		      qsm_state_name(m, final), qsm_state_name(m, w->final), text);
}

/* ---- queues on an SRQ ---- */


/*
 * A row on an SRQ.  A QP that enters ERR says so with LAST_WQE first (the sim posts it then,
 * before QP_FATAL), so that is the edge out of a state whose QP was not in ERR yet; a local
 * disconnect moves the QP to ERR at once (librdmacm's rdma_disconnect does too), so DISCONNECTING
 * leaves by LAST_WQE, before the peer's DISCONNECTED (a duplicate one then lands twice after).
 * A REJECTED or CONNECT_ERROR comes before the LAST_WQE of the QP it errs (librdmacm reads
 * the CM event, then moves the QP), so those rows keep their edges.
 */
static const struct row *srq_row(const struct row *w, struct row *x, bool active)
{
	bool disc;

	if (!on_srq)
		return w;
	*x = *w;
	disc = x->from == (active ? QSM_CM_DISCONNECTING : QSM_ACCEPT_DISCONNECTING);
	if (x->applicable && x->event == QSM_EV_QP_FATAL && x->count > 0 && x->from != x->to && !disc)
		x->event = QSM_EV_LAST_WQE;
	if (x->applicable && x->event == QSM_EV_DISCONNECTED && disc)
		x->event = QSM_EV_LAST_WQE;
	if (x->applicable && x->fault == F_DUP_DISCONNECTED && x->count == 1 &&
	    x->state == (active ? QSM_CM_LIVE : QSM_ACCEPT_LIVE))
		x->count = 2;
	return x;
}

/* The state's first QP is made by the fault's provocation (its ENOMEM row names the create_qp
 * edge): ENOMEM is then create_srq's, and the QP is not made either. */
static void srq_after_fault(const struct row *w, struct qsm_ctx *c, bool creates_qp)
{
	if (!on_srq || w->fault != F_ENOMEM || !creates_qp)
		return;
	ck_assert_int_eq(lows_at_connect_error, 0);   /* no SRQ then: srq_low never ran */
	ck_assert_uint_ge(COUNT(c, action_errors), 1);
	ck_assert_int_le(srq_lows, 1);                /* the retry made it, once */
	ck_assert_uint_le(COUNT(c, srqs_live), 1);
}

/* The device is GONE: its SRQ went with its registry entry, with the receives posted to it
 * (srq_low filled it when the queue's QP was made). */
static void srq_after_removal(struct qsm_ctx *c, bool had_qp)
{
	struct qsm_sim_stats st;

	if (!on_srq)
		return;
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(COUNT(c, srqs_live), 0);
	ck_assert_uint_eq(st.srqs, 0);
	if (had_qp)
		ck_assert_int_ge(srq_posted, SRQ_WR);
	srq_lows = 0;   /* the re-added device gets a new SRQ */
}

/* After the recovery: LAST_WQE is never unexpected; a LIVE queue has its SRQ, made once. */
static void srq_check(const struct rec *q, struct qsm_ctx *c, int live_state)
{
	struct qsm_sim_stats st;

	if (!on_srq)
		return;
	qsm_sim_get_stats(sim, &st);
	ck_assert_int_eq(count_edges(q, 0, ANY, QSM_EV_LAST_WQE, UNEXPECTED), 0);
	ck_assert_uint_le(COUNT(c, srqs_live), 1);
	ck_assert_uint_eq(st.srqs, COUNT(cctx, srqs_live) + COUNT(sctx, srqs_live));
	if (!q->released && state_of((struct rec *)q) == live_state) {
		ck_assert_ptr_nonnull(qsm_conn_srq(q->q));
		ck_assert_uint_eq(COUNT(c, srqs_live), 1);
		ck_assert_int_eq(srq_lows, 1);
	}
}

/* The SRQ variants: that side's queues of srq_class, a pool in each ctx for its srq_low. */
static void srq_begin(bool passive)
{
	on_srq = true;
	*(passive ? &srv_cls : &cli_cls) = &srq_class;
	ck_assert_int_eq(qsm_ctx_reg_pool(cctx, srq_buf, sizeof(srq_buf), QSM_ACCESS_LOCAL_WRITE, &srq_pool[0]), 0);
	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, srq_buf, sizeof(srq_buf), QSM_ACCESS_LOCAL_WRITE, &srq_pool[1]), 0);
}

/* ---- work-request lists and the send queue's accounting ---- */

/* n zero-length RDMA WRITEs (they need no rkey: IBA C9-88), unsignaled but the last; their
 * ids from `first` (WR_REFUSED: a list that must post none). */
static void wr_list(struct qsm_wr *list, int n, uint64_t first)
{
	for (int i = 0; i < n; i++)
		list[i] = (struct qsm_wr){ .wr_id = first + (uint64_t)i, .opcode = QSM_WR_RDMA_WRITE,
					   .flags = i == n - 1 ? QSM_POST_SIGNALED : 0 };
}

/* Posts n WRs as one list, which must all go (rc 0), recorded with what each must report. */
static void post_list_ok(struct rec *r, int n, bool err)
{
	struct qsm_wr list[WR_MAX];
	int posted = -1;

	ck_assert_uint_le(nwrs + (unsigned)n, WR_MAX);
	wr_list(list, n, WR_TAG + nwrs);
	ck_assert_int_eq(qsm_conn_post_list(r->q, list, n, &posted), 0);
	ck_assert_int_eq(posted, n);
	for (int i = 0; i < n; i++)
		wrs[nwrs++] = (struct wr_rec){ .q = r->q, .want = err ? W_FLUSH : i == n - 1 ? W_SUCCESS : W_NOTHING };
}

/* A list of n refused with `rc`: nothing posted (*posted 0), nothing to complete. */
static void post_list_refused(struct rec *r, int n, int rc)
{
	struct qsm_wr list[WR_MAX];
	int posted = -1;

	wr_list(list, n, WR_REFUSED);
	ck_assert_int_eq(qsm_conn_post_list(r->q, list, n, &posted), rc);
	ck_assert_int_eq(posted, 0);
}

/* Receives of no length (nsge 0): n that go, then, unless the QP is in ERR (a receive posted
 * there is flushed and holds no slot), one more that finds the receive queue full. */
static void post_recvs(struct rec *r, int n, bool err)
{
	for (int i = 0; i < n; i++) {
		ck_assert_uint_lt(nwrs, WR_MAX);
		ck_assert_int_eq(qsm_conn_post_recv(r->q, WR_TAG + nwrs, NULL, 0), 0);
		wrs[nwrs++] = (struct wr_rec){ .q = r->q, .want = err ? W_FLUSH : W_HELD };
	}
	if (!err)
		ck_assert_int_eq(qsm_conn_post_recv(r->q, WR_REFUSED, NULL, 0), -ENOBUFS);
}

/*
 * Before the fault: the queue fills its send queue with one list and its receive queue, where
 * it can post at all (qsm_conn_post_send(3) ERRORS).  No QP, or its drain has started: -ENOTCONN.
 * A QP not yet ready to send (INIT; the sim's rule): sends -EINVAL, receives go.  RTS: a list
 * one longer than the queue is -ENOBUFS, the full list goes, then not one more (the unsignaled
 * WRs hold their slots until the last one's completion is taken).  ERR: everything goes and is
 * flushed, holding no slot.  A queue on an SRQ posts no receive of its own (-EINVAL).
 */
static void fill_queues(struct rec *r, enum qsm_machine m, struct qsm_fabric *fab)
{
	struct qsm_state_info info;
	bool srq = on_srq;   /* r is the queue under test */
	int hw;

	ck_assert_int_eq(qsm_machine_state_info(m, qsm_conn_state(r->q), &info), 0);
	if (srq)
		ck_assert_int_eq(qsm_conn_post_recv(r->q, WR_REFUSED, NULL, 0), -EINVAL);
	if (qsm_conn_qp_state(r->q) == -ENOENT || info.drains) {
		post_list_refused(r, SQ_WR, -ENOTCONN);
		if (!srq)
			ck_assert_int_eq(qsm_conn_post_recv(r->q, WR_REFUSED, NULL, 0), -ENOTCONN);
		return;
	}
	hw = qsm_sim_qp_state(sim, fab, r->q);
	switch (hw) {
	case QSM_QP_INIT:
		post_list_refused(r, SQ_WR, -EINVAL);
		break;
	case QSM_QP_RTS:
		post_list_refused(r, SQ_WR + 1, -ENOBUFS);
		post_list_ok(r, SQ_WR, false);
		post_list_refused(r, 1, -ENOBUFS);
		break;
	case QSM_QP_ERR:
		post_list_ok(r, SQ_WR, true);
		post_list_ok(r, SQ_WR + 1, true);
		break;
	default:
		ck_abort_msg("%s: QP in state %d", qsm_conn_state_name(r->q), hw);
	}
	if (!srq)
		post_recvs(r, hw == QSM_QP_ERR ? RQ_WR + 1 : RQ_WR, hw == QSM_QP_ERR);
}

/* What became of the receives on the QP the queue had at the fault (qsm_conn_post_send(3),
 * "Flushes"). */
enum recvs_fate {
	R_POSTED,                   /* the queue is LIVE on that QP still: no completion yet */
	R_FLUSHED,                  /* one completion each: a flush */
};

/*
 * The QP erred (QP_FATAL, DISCONNECTED, REJECTED, CONNECT_ERROR, the drain) and its receives
 * flushed before anything reported the cause; or the queue let go of it with its receives still
 * on it (the device removed: its DEVICE_REMOVAL comes before the flushes; HOLD kept back what
 * the queue waited for until a timeout: a connect that never came up, a drain whose flushes
 * and DRAINED were held), and they completed then, flushed, before the edge arrived.  Or the
 * queue is on it still.
 */
static enum recvs_fate recvs_fate(struct rec *r, int live, int qps_at_fill)
{
	if (!r->released && state_of(r) == live && r->qps_made == qps_at_fill)
		return R_POSTED;
	return R_FLUSHED;
}

/* After the recovery: every WR posted before the fault completed as the contract says, exactly
 * once, or not at all where no completion is due. */
static void check_wrs(const struct row *w, enum qsm_machine m, enum recvs_fate fate)
{
	const char *sname = qsm_state_name(m, w->state);

	ck_assert_msg(wr_strays == 0, "%s in %s: %u completions of no WR of the queue", fault_names[w->fault],
		      sname, wr_strays);
	for (unsigned i = 0; i < nwrs; i++) {
		const struct wr_rec *x = &wrs[i];
		enum want want = x->want != W_HELD ? x->want : fate == R_FLUSHED ? W_FLUSH : W_NOTHING;
		enum qsm_wc_status status = want == W_SUCCESS ? QSM_WC_SUCCESS : QSM_WC_WR_FLUSH_ERR;

		ck_assert_msg(x->completions == (want != W_NOTHING) && (want == W_NOTHING || x->status == status),
			      "%s in %s: WR %u (%s) completed %u times, status %d", fault_names[w->fault], sname, i,
			      want == W_NOTHING ? "no completion" : want == W_SUCCESS ? "success" : "flush",
			      x->completions, x->status);
	}
}

/*
 * The queue is LIVE after the recovery: its send queue takes a full list again, and not one WR
 * more, so no slot leaked across the fault.  On a new QP so does its receive queue; on the QP it
 * had, the receives posted before the fault still hold theirs.
 */
static void refill_after_recovery(struct rec *r, int qps_at_fill)
{
	unsigned first = nwrs;

	post_list_refused(r, SQ_WR + 1, -ENOBUFS);
	post_list_ok(r, SQ_WR, false);
	post_list_refused(r, 1, -ENOBUFS);
	if (!on_srq && r->qps_made > qps_at_fill)
		post_recvs(r, RQ_WR, false);
	else if (!on_srq)
		ck_assert_int_eq(qsm_conn_post_recv(r->q, WR_REFUSED, NULL, 0), -ENOBUFS);
	harness_settle(&world);
	for (unsigned i = first; i < nwrs; i++)
		ck_assert_uint_eq(wrs[i].completions, wrs[i].want == W_SUCCESS);
	/* the list's completion was taken: its slots are free again */
	post_list_ok(r, SQ_WR, false);
	harness_settle(&world);
	ck_assert_uint_eq(wrs[nwrs - 1].completions, 1);
	ck_assert_int_eq(wrs[nwrs - 1].status, QSM_WC_SUCCESS);
}

/* ---- the active queue ---- */

#define A(x) QSM_CM_##x
#define EV(x) QSM_EV_##x
#define EDGE(f, s, fr, ev, to, n, fin) { F_##f, A(s), true, A(fr), EV(ev), A(to), n, A(fin) }
#define UNEXP(f, s, fr, ev, n, fin) { F_##f, A(s), true, A(fr), EV(ev), UNEXPECTED, n, A(fin) }
#define NONE_OF(f, s, ev, fin) { F_##f, A(s), true, ANY, EV(ev), ANY, 0, A(fin) }
#define NA(f, s, fin) { F_##f, A(s), false, 0, 0, 0, 0, A(fin) }

/*
 * Provocations, by state: IDLE and FAILED connect; CONNECTED loses the connection (its QP
 * fails); LIVE closes it (the ULP disconnects); RECONNECT_WAIT waits for its retry; the
 * others get the event they were held from.  FAILED queues allow 2 attempts, others retry
 * forever every 10..100 ms; the server accepts and is ready at once.
 */
static const struct row active_rows[] = {
	/* control: the provocation alone, the edge it leads to */
	EDGE(NONE, IDLE, ADDR_RESOLVING, ADDR_RESOLVED, ROUTE_RESOLVING, 1, LIVE),
	EDGE(NONE, ADDR_RESOLVING, ADDR_RESOLVING, ADDR_RESOLVED, ROUTE_RESOLVING, 1, LIVE),
	EDGE(NONE, ROUTE_RESOLVING, ROUTE_RESOLVING, ROUTE_RESOLVED, CONNECTING, 1, LIVE),
	EDGE(NONE, CONNECTING, CONNECTING, ESTABLISHED, CONNECTED, 1, LIVE),
	EDGE(NONE, CONNECTED, DRAINING, TIMEWAIT_EXIT, DRAINING, 1, LIVE),
	EDGE(NONE, LIVE, CLOSING, TIMEWAIT_EXIT, CLOSING, 1, CLOSED),
	EDGE(NONE, DISCONNECTING, DISCONNECTING, DISCONNECTED, CLOSING, 1, CLOSED),
	EDGE(NONE, DRAINING, DRAINING, DRAINED, RECONNECT_WAIT, 1, LIVE),
	EDGE(NONE, CLOSING, CLOSING, DRAINED, CLOSED, 1, CLOSED),
	EDGE(NONE, RECONNECT_WAIT, RECONNECT_WAIT, RETRY, ADDR_RESOLVING, 1, LIVE),
	EDGE(NONE, FAILED, FAILED, CONNECT, ADDR_RESOLVING, 1, LIVE),

	/* rdma_resolve_addr fails: ADDR_RESOLVING --ADDR_ERROR--> RECONNECT_WAIT, then retry */
	EDGE(ADDR_ERROR, IDLE, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(ADDR_ERROR, ADDR_RESOLVING, LIVE),
	NA(ADDR_ERROR, ROUTE_RESOLVING, LIVE),
	NA(ADDR_ERROR, CONNECTING, LIVE),
	EDGE(ADDR_ERROR, CONNECTED, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(ADDR_ERROR, LIVE, CLOSED),
	NA(ADDR_ERROR, DISCONNECTING, CLOSED),
	EDGE(ADDR_ERROR, DRAINING, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(ADDR_ERROR, CLOSING, CLOSED),
	EDGE(ADDR_ERROR, RECONNECT_WAIT, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(ADDR_ERROR, FAILED, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),

	/* rdma_resolve_route fails */
	EDGE(ROUTE_ERROR, IDLE, ROUTE_RESOLVING, ROUTE_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(ROUTE_ERROR, ADDR_RESOLVING, ROUTE_RESOLVING, ROUTE_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(ROUTE_ERROR, ROUTE_RESOLVING, LIVE),
	NA(ROUTE_ERROR, CONNECTING, LIVE),
	EDGE(ROUTE_ERROR, CONNECTED, ROUTE_RESOLVING, ROUTE_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(ROUTE_ERROR, LIVE, CLOSED),
	NA(ROUTE_ERROR, DISCONNECTING, CLOSED),
	EDGE(ROUTE_ERROR, DRAINING, ROUTE_RESOLVING, ROUTE_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(ROUTE_ERROR, CLOSING, CLOSED),
	EDGE(ROUTE_ERROR, RECONNECT_WAIT, ROUTE_RESOLVING, ROUTE_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(ROUTE_ERROR, FAILED, ROUTE_RESOLVING, ROUTE_ERROR, RECONNECT_WAIT, 1, LIVE),

	/* the connect is rejected */
	EDGE(REJECT, IDLE, CONNECTING, REJECTED, RECONNECT_WAIT, 1, LIVE),
	EDGE(REJECT, ADDR_RESOLVING, CONNECTING, REJECTED, RECONNECT_WAIT, 1, LIVE),
	EDGE(REJECT, ROUTE_RESOLVING, CONNECTING, REJECTED, RECONNECT_WAIT, 1, LIVE),
	NA(REJECT, CONNECTING, LIVE),
	EDGE(REJECT, CONNECTED, CONNECTING, REJECTED, RECONNECT_WAIT, 1, LIVE),
	NA(REJECT, LIVE, CLOSED),
	NA(REJECT, DISCONNECTING, CLOSED),
	EDGE(REJECT, DRAINING, CONNECTING, REJECTED, RECONNECT_WAIT, 1, LIVE),
	NA(REJECT, CLOSING, CLOSED),
	EDGE(REJECT, RECONNECT_WAIT, CONNECTING, REJECTED, RECONNECT_WAIT, 1, LIVE),
	EDGE(REJECT, FAILED, CONNECTING, REJECTED, RECONNECT_WAIT, 1, LIVE),

	/* the REQ goes unanswered */
	EDGE(UNREACHABLE, IDLE, CONNECTING, UNREACHABLE, RECONNECT_WAIT, 1, LIVE),
	EDGE(UNREACHABLE, ADDR_RESOLVING, CONNECTING, UNREACHABLE, RECONNECT_WAIT, 1, LIVE),
	EDGE(UNREACHABLE, ROUTE_RESOLVING, CONNECTING, UNREACHABLE, RECONNECT_WAIT, 1, LIVE),
	NA(UNREACHABLE, CONNECTING, LIVE),
	EDGE(UNREACHABLE, CONNECTED, CONNECTING, UNREACHABLE, RECONNECT_WAIT, 1, LIVE),
	NA(UNREACHABLE, LIVE, CLOSED),
	NA(UNREACHABLE, DISCONNECTING, CLOSED),
	EDGE(UNREACHABLE, DRAINING, CONNECTING, UNREACHABLE, RECONNECT_WAIT, 1, LIVE),
	NA(UNREACHABLE, CLOSING, CLOSED),
	EDGE(UNREACHABLE, RECONNECT_WAIT, CONNECTING, UNREACHABLE, RECONNECT_WAIT, 1, LIVE),
	EDGE(UNREACHABLE, FAILED, CONNECTING, UNREACHABLE, RECONNECT_WAIT, 1, LIVE),

	/* the server's accept fails: both sides see CONNECT_ERROR */
	EDGE(CONNECT_ERROR, IDLE, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(CONNECT_ERROR, ADDR_RESOLVING, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(CONNECT_ERROR, ROUTE_RESOLVING, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(CONNECT_ERROR, CONNECTING, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(CONNECT_ERROR, CONNECTED, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(CONNECT_ERROR, LIVE, CLOSED),
	NA(CONNECT_ERROR, DISCONNECTING, CLOSED),
	EDGE(CONNECT_ERROR, DRAINING, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(CONNECT_ERROR, CLOSING, CLOSED),
	EDGE(CONNECT_ERROR, RECONNECT_WAIT, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(CONNECT_ERROR, FAILED, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),

	/* TIMEWAIT_EXIT is never waited for: losing it changes nothing but its self-loop */
	NA(NO_TIMEWAIT_EXIT, IDLE, LIVE),
	NA(NO_TIMEWAIT_EXIT, ADDR_RESOLVING, LIVE),
	NA(NO_TIMEWAIT_EXIT, ROUTE_RESOLVING, LIVE),
	NA(NO_TIMEWAIT_EXIT, CONNECTING, LIVE),
	EDGE(NO_TIMEWAIT_EXIT, CONNECTED, DRAINING, TIMEWAIT_EXIT, DRAINING, 0, LIVE),
	EDGE(NO_TIMEWAIT_EXIT, LIVE, CLOSING, TIMEWAIT_EXIT, CLOSING, 0, CLOSED),
	NA(NO_TIMEWAIT_EXIT, DISCONNECTING, CLOSED),
	NA(NO_TIMEWAIT_EXIT, DRAINING, LIVE),
	NA(NO_TIMEWAIT_EXIT, CLOSING, CLOSED),
	NA(NO_TIMEWAIT_EXIT, RECONNECT_WAIT, LIVE),
	NA(NO_TIMEWAIT_EXIT, FAILED, LIVE),

	/* a second DISCONNECTED is a harmless self-loop while draining or closing */
	NA(DUP_DISCONNECTED, IDLE, LIVE),
	NA(DUP_DISCONNECTED, ADDR_RESOLVING, LIVE),
	NA(DUP_DISCONNECTED, ROUTE_RESOLVING, LIVE),
	NA(DUP_DISCONNECTED, CONNECTING, LIVE),
	EDGE(DUP_DISCONNECTED, CONNECTED, DRAINING, DISCONNECTED, DRAINING, 2, LIVE),
	EDGE(DUP_DISCONNECTED, LIVE, CLOSING, DISCONNECTED, CLOSING, 1, CLOSED),
	NA(DUP_DISCONNECTED, DISCONNECTING, CLOSED),
	NA(DUP_DISCONNECTED, DRAINING, LIVE),
	NA(DUP_DISCONNECTED, CLOSING, CLOSED),
	NA(DUP_DISCONNECTED, RECONNECT_WAIT, LIVE),
	NA(DUP_DISCONNECTED, FAILED, LIVE),

	/* ESTABLISHED after DISCONNECTED has no edge: unexpected, the queue stays */
	NA(LATE_ESTABLISHED, IDLE, LIVE),
	NA(LATE_ESTABLISHED, ADDR_RESOLVING, LIVE),
	NA(LATE_ESTABLISHED, ROUTE_RESOLVING, LIVE),
	NA(LATE_ESTABLISHED, CONNECTING, LIVE),
	UNEXP(LATE_ESTABLISHED, CONNECTED, DRAINING, ESTABLISHED, 1, LIVE),
	UNEXP(LATE_ESTABLISHED, LIVE, CLOSING, ESTABLISHED, 1, CLOSED),
	NA(LATE_ESTABLISHED, DISCONNECTING, CLOSED),
	NA(LATE_ESTABLISHED, DRAINING, LIVE),
	NA(LATE_ESTABLISHED, CLOSING, CLOSED),
	NA(LATE_ESTABLISHED, RECONNECT_WAIT, LIVE),
	NA(LATE_ESTABLISHED, FAILED, LIVE),

	/* a hung drain ends by its timeout */
	NA(NO_DRAINED, IDLE, LIVE),
	NA(NO_DRAINED, ADDR_RESOLVING, LIVE),
	NA(NO_DRAINED, ROUTE_RESOLVING, LIVE),
	NA(NO_DRAINED, CONNECTING, LIVE),
	EDGE(NO_DRAINED, CONNECTED, DRAINING, TIMEOUT, RECONNECT_WAIT, 1, LIVE),
	EDGE(NO_DRAINED, LIVE, CLOSING, TIMEOUT, CLOSED, 1, CLOSED),
	EDGE(NO_DRAINED, DISCONNECTING, CLOSING, TIMEOUT, CLOSED, 1, CLOSED),
	NA(NO_DRAINED, DRAINING, LIVE),
	NA(NO_DRAINED, CLOSING, CLOSED),
	NA(NO_DRAINED, RECONNECT_WAIT, LIVE),
	NA(NO_DRAINED, FAILED, LIVE),

	/* ENOMEM hits the next create_id/create_qp, fed back as the async failure would be;
	 * in ADDR_RESOLVING and CONNECTING that is a device sentinel's id (the client's, the
	 * server's): the connection is not hurt */
	EDGE(ENOMEM, IDLE, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(ENOMEM, ADDR_RESOLVING, ROUTE_RESOLVING, ROUTE_RESOLVED, CONNECTING, 1, LIVE),
	EDGE(ENOMEM, ROUTE_RESOLVING, CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(ENOMEM, CONNECTING, CONNECTING, ESTABLISHED, CONNECTED, 1, LIVE), /* server's sentinel */
	EDGE(ENOMEM, CONNECTED, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(ENOMEM, LIVE, CLOSED),
	NA(ENOMEM, DISCONNECTING, CLOSED),
	EDGE(ENOMEM, DRAINING, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),
	NA(ENOMEM, CLOSING, CLOSED),
	EDGE(ENOMEM, RECONNECT_WAIT, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),
	EDGE(ENOMEM, FAILED, ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, 1, LIVE),

	/* delayed events: each waiting state ends by its own timeout */
	EDGE(HOLD, IDLE, ADDR_RESOLVING, TIMEOUT, RECONNECT_WAIT, -1, LIVE),
	EDGE(HOLD, ADDR_RESOLVING, ADDR_RESOLVING, TIMEOUT, RECONNECT_WAIT, -1, LIVE),
	EDGE(HOLD, ROUTE_RESOLVING, ROUTE_RESOLVING, TIMEOUT, RECONNECT_WAIT, -1, LIVE),
	EDGE(HOLD, CONNECTING, CONNECTING, TIMEOUT, RECONNECT_WAIT, -1, LIVE),
	EDGE(HOLD, CONNECTED, CONNECTED, QP_FATAL, DRAINING, 1, LIVE), /* no handshake timeout */
	EDGE(HOLD, LIVE, DISCONNECTING, TIMEOUT, CLOSING, 1, CLOSED),
	EDGE(HOLD, DISCONNECTING, DISCONNECTING, TIMEOUT, CLOSING, 1, CLOSED),
	EDGE(HOLD, DRAINING, DRAINING, TIMEOUT, RECONNECT_WAIT, 1, LIVE),
	EDGE(HOLD, CLOSING, CLOSING, TIMEOUT, CLOSED, 1, CLOSED),
	EDGE(HOLD, RECONNECT_WAIT, ADDR_RESOLVING, TIMEOUT, RECONNECT_WAIT, -1, LIVE),
	EDGE(HOLD, FAILED, ADDR_RESOLVING, TIMEOUT, RECONNECT_WAIT, 2, FAILED), /* 2 attempts */

	/* device removal: into the gap, or closed if the ULP was closing; the gap's
	 * self-loop releases the device too */
	NONE_OF(DEVICE_REMOVAL, IDLE, DEVICE_REMOVAL, LIVE),
	EDGE(DEVICE_REMOVAL, ADDR_RESOLVING, ADDR_RESOLVING, DEVICE_REMOVAL, RECONNECT_WAIT, 1, LIVE),
	EDGE(DEVICE_REMOVAL, ROUTE_RESOLVING, ROUTE_RESOLVING, DEVICE_REMOVAL, RECONNECT_WAIT, 1, LIVE),
	EDGE(DEVICE_REMOVAL, CONNECTING, CONNECTING, DEVICE_REMOVAL, RECONNECT_WAIT, 1, LIVE),
	EDGE(DEVICE_REMOVAL, CONNECTED, CONNECTED, DEVICE_REMOVAL, RECONNECT_WAIT, 1, LIVE),
	EDGE(DEVICE_REMOVAL, LIVE, LIVE, DEVICE_REMOVAL, RECONNECT_WAIT, 1, LIVE),
	EDGE(DEVICE_REMOVAL, DISCONNECTING, DISCONNECTING, DEVICE_REMOVAL, CLOSED, 1, CLOSED),
	EDGE(DEVICE_REMOVAL, DRAINING, DRAINING, DEVICE_REMOVAL, RECONNECT_WAIT, 1, LIVE),
	EDGE(DEVICE_REMOVAL, CLOSING, CLOSING, DEVICE_REMOVAL, CLOSED, 1, CLOSED),
	EDGE(DEVICE_REMOVAL, RECONNECT_WAIT, RECONNECT_WAIT, DEVICE_REMOVAL, RECONNECT_WAIT, 1, LIVE),
	EDGE(DEVICE_REMOVAL, FAILED, FAILED, DEVICE_REMOVAL, FAILED, 1, LIVE),

	/* a device appearing is news in the gap (retry at once) and to an address resolution,
	 * which the kernel may have parked until its timeout (start it over, from the gap) */
	NONE_OF(DEVICE_ADDED, IDLE, DEVICE_ADDED, LIVE),
	EDGE(DEVICE_ADDED, ADDR_RESOLVING, ADDR_RESOLVING, DEVICE_ADDED, RECONNECT_WAIT, 1, LIVE),
	NONE_OF(DEVICE_ADDED, ROUTE_RESOLVING, DEVICE_ADDED, LIVE),
	NONE_OF(DEVICE_ADDED, CONNECTING, DEVICE_ADDED, LIVE),
	NONE_OF(DEVICE_ADDED, CONNECTED, DEVICE_ADDED, LIVE),
	NONE_OF(DEVICE_ADDED, LIVE, DEVICE_ADDED, LIVE),
	NONE_OF(DEVICE_ADDED, DISCONNECTING, DEVICE_ADDED, CLOSED),
	NONE_OF(DEVICE_ADDED, DRAINING, DEVICE_ADDED, LIVE),
	NONE_OF(DEVICE_ADDED, CLOSING, DEVICE_ADDED, CLOSED),
	EDGE(DEVICE_ADDED, RECONNECT_WAIT, RECONNECT_WAIT, DEVICE_ADDED, RECONNECT_WAIT, 1, LIVE),
	NONE_OF(DEVICE_ADDED, FAILED, DEVICE_ADDED, LIVE),

	/* an asynchronous QP error: only where there is a QP */
	NONE_OF(QP_FATAL, IDLE, QP_FATAL, LIVE),
	NONE_OF(QP_FATAL, ADDR_RESOLVING, QP_FATAL, LIVE),
	NONE_OF(QP_FATAL, ROUTE_RESOLVING, QP_FATAL, LIVE),
	EDGE(QP_FATAL, CONNECTING, CONNECTING, QP_FATAL, RECONNECT_WAIT, 1, LIVE),
	EDGE(QP_FATAL, CONNECTED, CONNECTED, QP_FATAL, DRAINING, 1, LIVE),
	EDGE(QP_FATAL, LIVE, LIVE, QP_FATAL, DRAINING, 1, LIVE),
	EDGE(QP_FATAL, DISCONNECTING, DISCONNECTING, QP_FATAL, CLOSING, 1, CLOSED),
	EDGE(QP_FATAL, DRAINING, DRAINING, QP_FATAL, DRAINING, 1, LIVE),
	EDGE(QP_FATAL, CLOSING, CLOSING, QP_FATAL, CLOSING, 1, CLOSED),
	NONE_OF(QP_FATAL, RECONNECT_WAIT, QP_FATAL, LIVE),
	NONE_OF(QP_FATAL, FAILED, QP_FATAL, LIVE),

	/* a stale-connection reject: a fast retry, then the connection is made */
	EDGE(REJECT_STALE, IDLE, CONNECTING, REJECTED_STALE, RECONNECT_WAIT, 1, LIVE),
	EDGE(REJECT_STALE, ADDR_RESOLVING, CONNECTING, REJECTED_STALE, RECONNECT_WAIT, 1, LIVE),
	EDGE(REJECT_STALE, ROUTE_RESOLVING, CONNECTING, REJECTED_STALE, RECONNECT_WAIT, 1, LIVE),
	NA(REJECT_STALE, CONNECTING, LIVE),
	EDGE(REJECT_STALE, CONNECTED, CONNECTING, REJECTED_STALE, RECONNECT_WAIT, 1, LIVE),
	NA(REJECT_STALE, LIVE, CLOSED),
	NA(REJECT_STALE, DISCONNECTING, CLOSED),
	EDGE(REJECT_STALE, DRAINING, CONNECTING, REJECTED_STALE, RECONNECT_WAIT, 1, LIVE),
	NA(REJECT_STALE, CLOSING, CLOSED),
	EDGE(REJECT_STALE, RECONNECT_WAIT, CONNECTING, REJECTED_STALE, RECONNECT_WAIT, 1, LIVE),
	EDGE(REJECT_STALE, FAILED, CONNECTING, REJECTED_STALE, RECONNECT_WAIT, 1, LIVE),

	/* the port goes down: every queue with a QP on it fails over now */
	NONE_OF(PORT_ERR, IDLE, PORT_ERR, LIVE),
	NONE_OF(PORT_ERR, ADDR_RESOLVING, PORT_ERR, LIVE),
	NONE_OF(PORT_ERR, ROUTE_RESOLVING, PORT_ERR, LIVE),
	EDGE(PORT_ERR, CONNECTING, CONNECTING, PORT_ERR, RECONNECT_WAIT, 1, LIVE),
	EDGE(PORT_ERR, CONNECTED, CONNECTED, PORT_ERR, DRAINING, 1, LIVE),
	EDGE(PORT_ERR, LIVE, LIVE, PORT_ERR, DRAINING, 1, LIVE),
	EDGE(PORT_ERR, DISCONNECTING, DISCONNECTING, PORT_ERR, CLOSING, 1, CLOSED),
	EDGE(PORT_ERR, DRAINING, DRAINING, PORT_ERR, DRAINING, 1, LIVE),
	EDGE(PORT_ERR, CLOSING, CLOSING, PORT_ERR, CLOSING, 1, CLOSED),
	NONE_OF(PORT_ERR, RECONNECT_WAIT, PORT_ERR, LIVE),
	NONE_OF(PORT_ERR, FAILED, PORT_ERR, LIVE),

	/* a port coming back is news where a device is: in the gap and to an address resolution */
	NONE_OF(PORT_ACTIVE, IDLE, PORT_ACTIVE, LIVE),
	EDGE(PORT_ACTIVE, ADDR_RESOLVING, ADDR_RESOLVING, PORT_ACTIVE, RECONNECT_WAIT, 1, LIVE),
	NONE_OF(PORT_ACTIVE, ROUTE_RESOLVING, PORT_ACTIVE, LIVE),
	NONE_OF(PORT_ACTIVE, CONNECTING, PORT_ACTIVE, LIVE),
	NONE_OF(PORT_ACTIVE, CONNECTED, PORT_ACTIVE, LIVE),
	NONE_OF(PORT_ACTIVE, LIVE, PORT_ACTIVE, LIVE),
	NONE_OF(PORT_ACTIVE, DISCONNECTING, PORT_ACTIVE, CLOSED),
	NONE_OF(PORT_ACTIVE, DRAINING, PORT_ACTIVE, LIVE),
	NONE_OF(PORT_ACTIVE, CLOSING, PORT_ACTIVE, CLOSED),
	EDGE(PORT_ACTIVE, RECONNECT_WAIT, RECONNECT_WAIT, PORT_ACTIVE, RECONNECT_WAIT, 1, LIVE),
	NONE_OF(PORT_ACTIVE, FAILED, PORT_ACTIVE, LIVE),

	/* the registry's device hears it; no queue does */
	NONE_OF(GID_CHANGE, IDLE, GID_CHANGE, LIVE),
	NONE_OF(GID_CHANGE, ADDR_RESOLVING, GID_CHANGE, LIVE),
	NONE_OF(GID_CHANGE, ROUTE_RESOLVING, GID_CHANGE, LIVE),
	NONE_OF(GID_CHANGE, CONNECTING, GID_CHANGE, LIVE),
	NONE_OF(GID_CHANGE, CONNECTED, GID_CHANGE, LIVE),
	NONE_OF(GID_CHANGE, LIVE, GID_CHANGE, LIVE),
	NONE_OF(GID_CHANGE, DISCONNECTING, GID_CHANGE, CLOSED),
	NONE_OF(GID_CHANGE, DRAINING, GID_CHANGE, LIVE),
	NONE_OF(GID_CHANGE, CLOSING, GID_CHANGE, CLOSED),
	NONE_OF(GID_CHANGE, RECONNECT_WAIT, GID_CHANGE, LIVE),
	NONE_OF(GID_CHANGE, FAILED, GID_CHANGE, LIVE),

	/* a message before the RTU: the active side's CM sent it already; nothing moves */
	NONE_OF(COMM_EST, IDLE, COMM_EST, LIVE),
	NONE_OF(COMM_EST, ADDR_RESOLVING, COMM_EST, LIVE),
	NONE_OF(COMM_EST, ROUTE_RESOLVING, COMM_EST, LIVE),
	EDGE(COMM_EST, CONNECTING, CONNECTING, COMM_EST, CONNECTING, 1, LIVE),
	EDGE(COMM_EST, CONNECTED, CONNECTED, COMM_EST, CONNECTED, 1, LIVE),
	EDGE(COMM_EST, LIVE, LIVE, COMM_EST, LIVE, 1, LIVE),
	EDGE(COMM_EST, DISCONNECTING, DISCONNECTING, COMM_EST, DISCONNECTING, 1, CLOSED),
	EDGE(COMM_EST, DRAINING, DRAINING, COMM_EST, DRAINING, 1, LIVE),
	EDGE(COMM_EST, CLOSING, CLOSING, COMM_EST, CLOSING, 1, CLOSED),
	NONE_OF(COMM_EST, RECONNECT_WAIT, COMM_EST, LIVE),
	NONE_OF(COMM_EST, FAILED, COMM_EST, LIVE),
};
#define N_ACTIVE (sizeof(active_rows) / sizeof(active_rows[0]))

static void step_until(struct rec *r, int state)
{
	for (int i = 0; i < 20 && qsm_conn_state(r->q) != state; i++) {
		release_held();
		hold_all();
		harness_settle(&world);
	}
	ck_assert_str_eq(qsm_conn_state_name(r->q), qsm_state_name(QSM_MACHINE_CM_ID, state));
}

static struct rec *server_queue(void)
{
	ck_assert_ptr_nonnull(last_passive);
	ck_assert(!last_passive->gone);
	return last_passive;
}

/* To the state, with what would move it on held (HOLD disarmed, the held events kept). */
static void drive_active(struct rec *r, int state)
{
	switch (state) {
	case QSM_CM_IDLE:
		break;
	case QSM_CM_ADDR_RESOLVING:
	case QSM_CM_ROUTE_RESOLVING:
	case QSM_CM_CONNECTING:
	case QSM_CM_CONNECTED:
		r->auto_ready = state != QSM_CM_CONNECTED;
		hold_all();
		ck_assert_int_eq(qsm_conn_connect(r->q), 0);
		harness_settle(&world);
		step_until(r, state);
		break;
	case QSM_CM_LIVE:
	case QSM_CM_DISCONNECTING:
	case QSM_CM_CLOSING:
		ck_assert_int_eq(qsm_conn_connect(r->q), 0);
		harness_settle(&world);
		ck_assert_int_eq(qsm_conn_state(r->q), QSM_CM_LIVE);
		if (state == QSM_CM_LIVE)
			break;
		hold_all();
		ck_assert_int_eq(qsm_conn_disconnect(r->q), 0);
		harness_settle(&world);
		step_until(r, state);
		break;
	case QSM_CM_DRAINING:
		/* the peer disconnects: DISCONNECTED arrives, the drain marker's flush is held */
		ck_assert_int_eq(qsm_conn_connect(r->q), 0);
		harness_settle(&world);
		ck_assert_int_eq(qsm_conn_disconnect(server_queue()->q), 0);
		ck_assert_int_eq(qsm_ctx_dispatch(sctx, 1), 1);
		hold_all();
		harness_settle(&world);
		break;
	case QSM_CM_RECONNECT_WAIT:
		ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_REJECT, 1), 0);
		ck_assert_int_eq(qsm_conn_connect(r->q), 0);
		harness_settle(&world);
		break;
	case QSM_CM_FAILED:
		ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_REJECT, 2), 0);
		ck_assert_int_eq(qsm_conn_connect(r->q), 0);
		harness_run_for(&world, 1000);
		break;
	}
	unhold();
	ck_assert_str_eq(qsm_conn_state_name(r->q), qsm_state_name(QSM_MACHINE_CM_ID, state));
}

static bool active_has_qp(int state)
{
	return state >= QSM_CM_CONNECTING && state <= QSM_CM_CLOSING;
}

/* What the state waits for; @release: let the held events go. */
static bool provoke_active(struct rec *r, int state, bool release)
{
	switch (state) {
	case QSM_CM_IDLE:
	case QSM_CM_FAILED:
		ck_assert_int_eq(qsm_conn_connect(r->q), 0);
		return true;
	case QSM_CM_CONNECTED:
		ck_assert_int_eq(qsm_sim_qp_fatal(sim, cfab, r->q), 0);
		break;
	case QSM_CM_LIVE:
		ck_assert_int_eq(qsm_conn_disconnect(r->q), 0);
		break;
	case QSM_CM_RECONNECT_WAIT:
		break;
	default:
		if (release)
			release_held();
		break;
	}
	return false;
}

static void active_case(const struct row *row)
{
	struct row x;
	const struct row *w = srq_row(row, &x, true);
	struct rec *r;
	bool connected = false;
	unsigned mark;
	int qps_at_fill;

	listen_server();
	r = new_client(w->state == QSM_CM_FAILED ? 2 : 0);
	drive_active(r, w->state);
	mark = r->nlog;
	fill_queues(r, QSM_MACHINE_CM_ID, cfab);
	qps_at_fill = r->qps_made;

	/* the fault, in the state */
	if (is_armed(w->fault)) {
		ck_assert_int_eq(qsm_sim_inject(sim, sim_fault[w->fault], 1), 0);
		connected = provoke_active(r, w->state, true);
		harness_run_for(&world, HORIZON_MS);
	} else if (w->fault == F_NONE) {
		connected = provoke_active(r, w->state, true);
		harness_run_for(&world, HORIZON_MS);
	} else if (w->fault == F_HOLD) {
		hold_all();
		connected = provoke_active(r, w->state, false);
		harness_run_for(&world, HORIZON_MS);
	} else if (w->fault == F_DEVICE_REMOVAL) {
		ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
		harness_run_for(&world, HORIZON_MS);
	} else if (w->fault == F_DEVICE_ADDED) {
		ck_assert_int_eq(qsm_sim_device_add(sim, "sim1", "192.0.2.2"), 0);
		harness_settle(&world);
	} else if (w->fault == F_QP_FATAL) {
		ck_assert_int_eq(qsm_sim_qp_fatal(sim, cfab, r->q), active_has_qp(w->state) ? 0 : -ENOENT);
		harness_settle(&world);
	} else if (port_or_qp_fault(w->fault)) {
		port_or_qp_event(w->fault, cfab, r->q, active_has_qp(w->state));
		harness_settle(&world);
	}
	srq_after_fault(w, cctx, w->state == QSM_CM_ROUTE_RESOLVING);

	/* recovery */
	disarm_all();
	release_held();
	harness_settle(&world);
	if (w->fault == F_DEVICE_REMOVAL) {
		/* every reference was released, in the gap too: the removal completed */
		ck_assert_int_eq(qsm_sim_device_state(sim, "sim0"), QSM_SIM_DEVICE_GONE);
		ck_assert_int_eq(r->device_removed, w->state == QSM_CM_IDLE ? 0 : 1);
		srq_after_removal(cctx, active_has_qp(w->state));
		ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	}
	if (!r->released) {
		int s = qsm_conn_state(r->q);

		if (!connected && (s == QSM_CM_IDLE || s == QSM_CM_FAILED))
			ck_assert_int_eq(qsm_conn_connect(r->q), 0);
		r->auto_ready = true;
		if (s == QSM_CM_CONNECTED)
			ck_assert_int_eq(qsm_conn_ready(r->q), 0);
	}
	harness_run_for(&world, RECOVER_MS);

	check_row(w, QSM_MACHINE_CM_ID, r->log, r->nlog, mark, state_of(r));
	if (!r->released && state_of(r) == QSM_CM_LIVE)
		ck_assert_int_eq(qsm_conn_qp_state(r->q), QSM_QP_RTS);
	srq_check(r, cctx, QSM_CM_LIVE);
	check_wrs(w, QSM_MACHINE_CM_ID, recvs_fate(r, QSM_CM_LIVE, qps_at_fill));
	if (!r->released && state_of(r) == QSM_CM_LIVE)
		refill_after_recovery(r, qps_at_fill);
	finish();
}

START_TEST(test_active_queue_takes_the_documented_edge_for_every_fault_in_every_state)
{
	active_case(&active_rows[_i]);
}
END_TEST

START_TEST(test_active_queue_on_an_srq_takes_the_documented_edge_for_every_fault_in_every_state)
{
	srq_begin(false);
	active_case(&active_rows[_i]);
}
END_TEST

/* ---- the passive queue ---- */

#define P(x) QSM_ACCEPT_##x
#define PEDGE(f, s, fr, ev, to, n, fin) { F_##f, P(s), true, P(fr), EV(ev), P(to), n, P(fin) }
#define PUNEXP(f, s, fr, ev, n, fin) { F_##f, P(s), true, P(fr), EV(ev), UNEXPECTED, n, P(fin) }
#define PNONE_OF(f, s, ev, fin) { F_##f, P(s), true, ANY, EV(ev), ANY, 0, P(fin) }
#define PNA(f, s, fin) { F_##f, P(s), false, 0, 0, 0, 0, P(fin) }

/*
 * NEW is left within the dispatch that creates the queue (its CONNECT_REQUEST is first in
 * the FIFO), so no fault can reach it there.  Provocations: REQUESTED accepts, CONNECTED
 * loses the connection (its QP fails), LIVE closes it (the ULP disconnects), the others get
 * the events they were held from.  The faults of the active side's own calls (address,
 * route, reject, unreachable) never reach a passive queue.
 */
static const struct row passive_rows[] = {
	PEDGE(NONE, REQUESTED, REQUESTED, ACCEPT, ACCEPTING, 1, LIVE),
	PEDGE(NONE, ACCEPTING, ACCEPTING, ESTABLISHED, CONNECTED, 1, LIVE),
	PEDGE(NONE, CONNECTED, DRAINING, TIMEWAIT_EXIT, DRAINING, 1, CLOSED),
	PEDGE(NONE, LIVE, DRAINING, TIMEWAIT_EXIT, DRAINING, 1, CLOSED),
	PEDGE(NONE, DISCONNECTING, DISCONNECTING, DISCONNECTED, DRAINING, 1, CLOSED),
	PEDGE(NONE, DRAINING, DRAINING, DRAINED, CLOSED, 1, CLOSED),

	PEDGE(CONNECT_ERROR, REQUESTED, ACCEPTING, CONNECT_ERROR, CLOSED, 1, CLOSED),
	PNA(CONNECT_ERROR, ACCEPTING, LIVE),
	PNA(CONNECT_ERROR, CONNECTED, CLOSED),
	PNA(CONNECT_ERROR, LIVE, CLOSED),
	PNA(CONNECT_ERROR, DISCONNECTING, CLOSED),
	PNA(CONNECT_ERROR, DRAINING, CLOSED),

	PEDGE(ENOMEM, REQUESTED, ACCEPTING, CONNECT_ERROR, CLOSED, 1, CLOSED), /* create_qp */
	PNA(ENOMEM, ACCEPTING, LIVE),
	PNA(ENOMEM, CONNECTED, CLOSED),
	PNA(ENOMEM, LIVE, CLOSED),
	PNA(ENOMEM, DISCONNECTING, CLOSED),
	PNA(ENOMEM, DRAINING, CLOSED),

	PNA(NO_TIMEWAIT_EXIT, REQUESTED, LIVE),
	PNA(NO_TIMEWAIT_EXIT, ACCEPTING, LIVE),
	PEDGE(NO_TIMEWAIT_EXIT, CONNECTED, DRAINING, TIMEWAIT_EXIT, DRAINING, 0, CLOSED),
	PEDGE(NO_TIMEWAIT_EXIT, LIVE, DRAINING, TIMEWAIT_EXIT, DRAINING, 0, CLOSED),
	PNA(NO_TIMEWAIT_EXIT, DISCONNECTING, CLOSED),
	PNA(NO_TIMEWAIT_EXIT, DRAINING, CLOSED),

	PNA(DUP_DISCONNECTED, REQUESTED, LIVE),
	PNA(DUP_DISCONNECTED, ACCEPTING, LIVE),
	PEDGE(DUP_DISCONNECTED, CONNECTED, DRAINING, DISCONNECTED, DRAINING, 2, CLOSED),
	PEDGE(DUP_DISCONNECTED, LIVE, DRAINING, DISCONNECTED, DRAINING, 1, CLOSED),
	PNA(DUP_DISCONNECTED, DISCONNECTING, CLOSED),
	PNA(DUP_DISCONNECTED, DRAINING, CLOSED),

	PNA(LATE_ESTABLISHED, REQUESTED, LIVE),
	PNA(LATE_ESTABLISHED, ACCEPTING, LIVE),
	PUNEXP(LATE_ESTABLISHED, CONNECTED, DRAINING, ESTABLISHED, 1, CLOSED),
	PUNEXP(LATE_ESTABLISHED, LIVE, DRAINING, ESTABLISHED, 1, CLOSED),
	PNA(LATE_ESTABLISHED, DISCONNECTING, CLOSED),
	PNA(LATE_ESTABLISHED, DRAINING, CLOSED),

	PNA(NO_DRAINED, REQUESTED, LIVE),
	PNA(NO_DRAINED, ACCEPTING, LIVE),
	PEDGE(NO_DRAINED, CONNECTED, DRAINING, TIMEOUT, CLOSED, 1, CLOSED),
	PEDGE(NO_DRAINED, LIVE, DRAINING, TIMEOUT, CLOSED, 1, CLOSED),
	PEDGE(NO_DRAINED, DISCONNECTING, DRAINING, TIMEOUT, CLOSED, 1, CLOSED),
	PNA(NO_DRAINED, DRAINING, CLOSED),

	PEDGE(HOLD, REQUESTED, ACCEPTING, TIMEOUT, CLOSED, 1, CLOSED),
	PEDGE(HOLD, ACCEPTING, ACCEPTING, TIMEOUT, CLOSED, 1, CLOSED),
	PEDGE(HOLD, CONNECTED, CONNECTED, QP_FATAL, DRAINING, 1, CLOSED),
	PEDGE(HOLD, LIVE, DISCONNECTING, TIMEOUT, DRAINING, 1, CLOSED),
	PEDGE(HOLD, DISCONNECTING, DISCONNECTING, TIMEOUT, DRAINING, 1, CLOSED),
	PEDGE(HOLD, DRAINING, DRAINING, TIMEOUT, CLOSED, 1, CLOSED),

	PEDGE(DEVICE_REMOVAL, REQUESTED, REQUESTED, DEVICE_REMOVAL, CLOSED, 1, CLOSED),
	PEDGE(DEVICE_REMOVAL, ACCEPTING, ACCEPTING, DEVICE_REMOVAL, CLOSED, 1, CLOSED),
	PEDGE(DEVICE_REMOVAL, CONNECTED, CONNECTED, DEVICE_REMOVAL, CLOSED, 1, CLOSED),
	PEDGE(DEVICE_REMOVAL, LIVE, LIVE, DEVICE_REMOVAL, CLOSED, 1, CLOSED),
	PEDGE(DEVICE_REMOVAL, DISCONNECTING, DISCONNECTING, DEVICE_REMOVAL, CLOSED, 1, CLOSED),
	PEDGE(DEVICE_REMOVAL, DRAINING, DRAINING, DEVICE_REMOVAL, CLOSED, 1, CLOSED),

	PNONE_OF(DEVICE_ADDED, REQUESTED, DEVICE_ADDED, LIVE),
	PNONE_OF(DEVICE_ADDED, ACCEPTING, DEVICE_ADDED, LIVE),
	PNONE_OF(DEVICE_ADDED, CONNECTED, DEVICE_ADDED, LIVE),
	PNONE_OF(DEVICE_ADDED, LIVE, DEVICE_ADDED, LIVE),
	PNONE_OF(DEVICE_ADDED, DISCONNECTING, DEVICE_ADDED, CLOSED),
	PNONE_OF(DEVICE_ADDED, DRAINING, DEVICE_ADDED, CLOSED),

	PNONE_OF(QP_FATAL, REQUESTED, QP_FATAL, LIVE),
	PEDGE(QP_FATAL, ACCEPTING, ACCEPTING, QP_FATAL, DRAINING, 1, CLOSED),
	PEDGE(QP_FATAL, CONNECTED, CONNECTED, QP_FATAL, DRAINING, 1, CLOSED),
	PEDGE(QP_FATAL, LIVE, LIVE, QP_FATAL, DRAINING, 1, CLOSED),
	PEDGE(QP_FATAL, DISCONNECTING, DISCONNECTING, QP_FATAL, DRAINING, 1, CLOSED),
	PEDGE(QP_FATAL, DRAINING, DRAINING, QP_FATAL, DRAINING, 1, CLOSED),

	/* the active side rejects the accept as stale: as any reject of it (the sim's REJECT
	 * fault is the active side's own, so this one never reaches a passive queue) */
	PNA(REJECT_STALE, REQUESTED, LIVE),

	/* undecided, no QP: the client's QP is on the port, and its failover lets go of the
	 * request: the REJ it sends reaches the passive queue first */
	PEDGE(PORT_ERR, REQUESTED, REQUESTED, REJECTED, CLOSED, 1, CLOSED),
	PEDGE(PORT_ERR, ACCEPTING, ACCEPTING, PORT_ERR, DRAINING, 1, CLOSED),
	PEDGE(PORT_ERR, CONNECTED, CONNECTED, PORT_ERR, DRAINING, 1, CLOSED),
	PEDGE(PORT_ERR, LIVE, LIVE, PORT_ERR, DRAINING, 1, CLOSED),
	PEDGE(PORT_ERR, DISCONNECTING, DISCONNECTING, PORT_ERR, DRAINING, 1, CLOSED),
	PEDGE(PORT_ERR, DRAINING, DRAINING, PORT_ERR, DRAINING, 1, CLOSED),

	PNONE_OF(PORT_ACTIVE, REQUESTED, PORT_ACTIVE, LIVE),
	PNONE_OF(PORT_ACTIVE, ACCEPTING, PORT_ACTIVE, LIVE),
	PNONE_OF(PORT_ACTIVE, CONNECTED, PORT_ACTIVE, LIVE),
	PNONE_OF(PORT_ACTIVE, LIVE, PORT_ACTIVE, LIVE),
	PNONE_OF(PORT_ACTIVE, DISCONNECTING, PORT_ACTIVE, CLOSED),
	PNONE_OF(PORT_ACTIVE, DRAINING, PORT_ACTIVE, CLOSED),

	PNONE_OF(GID_CHANGE, REQUESTED, GID_CHANGE, LIVE),
	PNONE_OF(GID_CHANGE, ACCEPTING, GID_CHANGE, LIVE),
	PNONE_OF(GID_CHANGE, CONNECTED, GID_CHANGE, LIVE),
	PNONE_OF(GID_CHANGE, LIVE, GID_CHANGE, LIVE),
	PNONE_OF(GID_CHANGE, DISCONNECTING, GID_CHANGE, CLOSED),
	PNONE_OF(GID_CHANGE, DRAINING, GID_CHANGE, CLOSED),

	/* a message before the RTU: ACCEPTING tells the CM (rdma_notify), so does DISCONNECTING
	 * (entered from ACCEPTING, its DREQ waits for ESTABLISHED); elsewhere nothing moves */
	PNONE_OF(COMM_EST, REQUESTED, COMM_EST, LIVE),
	PEDGE(COMM_EST, ACCEPTING, ACCEPTING, COMM_EST, ACCEPTING, 1, LIVE),
	PEDGE(COMM_EST, CONNECTED, CONNECTED, COMM_EST, CONNECTED, 1, LIVE),
	PEDGE(COMM_EST, LIVE, LIVE, COMM_EST, LIVE, 1, LIVE),
	PEDGE(COMM_EST, DISCONNECTING, DISCONNECTING, COMM_EST, DISCONNECTING, 1, CLOSED),
	PEDGE(COMM_EST, DRAINING, DRAINING, COMM_EST, DRAINING, 1, CLOSED),
};
#define N_PASSIVE (sizeof(passive_rows) / sizeof(passive_rows[0]))

static struct rec *drive_passive(struct rec *c, int state)
{
	struct rec *s;

	srv_defer = state == QSM_ACCEPT_REQUESTED || state == QSM_ACCEPT_ACCEPTING;
	srv_auto_ready = state != QSM_ACCEPT_CONNECTED;
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	s = server_queue();
	switch (state) {
	case QSM_ACCEPT_ACCEPTING:
		hold_all();
		ck_assert_int_eq(qsm_conn_accept(s->q, NULL, 0), 0);
		harness_settle(&world);
		break;
	case QSM_ACCEPT_DISCONNECTING:
		hold_all();
		ck_assert_int_eq(qsm_conn_disconnect(s->q), 0);
		harness_settle(&world);
		break;
	case QSM_ACCEPT_DRAINING:
		/* the peer disconnects */
		ck_assert_int_eq(qsm_conn_disconnect(c->q), 0);
		ck_assert_int_eq(qsm_ctx_dispatch(cctx, 1), 1);
		hold_all();
		harness_settle(&world);
		break;
	}
	unhold();
	srv_defer = false;
	srv_auto_ready = true;
	ck_assert_str_eq(qsm_conn_state_name(s->q), qsm_state_name(QSM_MACHINE_ACCEPT, state));
	return s;
}

static void provoke_passive(struct rec *s, int state, bool release)
{
	switch (state) {
	case QSM_ACCEPT_REQUESTED:
		ck_assert_int_eq(qsm_conn_accept(s->q, NULL, 0), 0);
		break;
	case QSM_ACCEPT_CONNECTED:
		ck_assert_int_eq(qsm_sim_qp_fatal(sim, sfab, s->q), 0);
		break;
	case QSM_ACCEPT_LIVE:
		ck_assert_int_eq(qsm_conn_disconnect(s->q), 0);
		break;
	default:
		if (release)
			release_held();
		break;
	}
}

static void passive_case(const struct row *row)
{
	struct row x;
	const struct row *w = srq_row(row, &x, false);
	struct rec *c, *s;
	unsigned mark;
	int qps_at_fill;

	dispatch_order(true); /* the server's own calls post first */
	listen_server();
	c = new_client(0);
	s = drive_passive(c, w->state);
	mark = s->nlog;
	fill_queues(s, QSM_MACHINE_ACCEPT, sfab);
	qps_at_fill = s->qps_made;

	if (is_armed(w->fault)) {
		ck_assert_int_eq(qsm_sim_inject(sim, sim_fault[w->fault], 1), 0);
		provoke_passive(s, w->state, true);
		harness_run_for(&world, HORIZON_MS);
	} else if (w->fault == F_NONE) {
		provoke_passive(s, w->state, true);
		harness_run_for(&world, HORIZON_MS);
	} else if (w->fault == F_HOLD) {
		hold_all();
		provoke_passive(s, w->state, false);
		harness_run_for(&world, HORIZON_MS);
	} else if (w->fault == F_DEVICE_REMOVAL) {
		ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
		harness_run_for(&world, HORIZON_MS);
	} else if (w->fault == F_DEVICE_ADDED) {
		ck_assert_int_eq(qsm_sim_device_add(sim, "sim1", "192.0.2.2"), 0);
		harness_settle(&world);
	} else if (w->fault == F_QP_FATAL) {
		ck_assert_int_eq(qsm_sim_qp_fatal(sim, sfab, s->q),
				 w->state == QSM_ACCEPT_REQUESTED ? -ENOENT : 0);
		harness_settle(&world);
	} else if (port_or_qp_fault(w->fault)) {
		port_or_qp_event(w->fault, sfab, s->q, w->state != QSM_ACCEPT_REQUESTED);
		harness_settle(&world);
	}
	srq_after_fault(w, sctx, w->state == QSM_ACCEPT_REQUESTED);

	disarm_all();
	release_held();
	harness_settle(&world);
	if (w->fault == F_DEVICE_REMOVAL) {
		ck_assert_int_eq(qsm_sim_device_state(sim, "sim0"), QSM_SIM_DEVICE_GONE);
		ck_assert_int_eq(s->device_removed, 1);
		srq_after_removal(sctx, w->state != QSM_ACCEPT_REQUESTED);
		ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	}
	if (!s->released) {
		int st = qsm_conn_state(s->q);

		if (st == QSM_ACCEPT_REQUESTED)
			ck_assert_int_eq(qsm_conn_accept(s->q, NULL, 0), 0);
		s->auto_ready = true;
		if (st == QSM_ACCEPT_CONNECTED)
			ck_assert_int_eq(qsm_conn_ready(s->q), 0);
	}
	harness_run_for(&world, RECOVER_MS);

	check_row(w, QSM_MACHINE_ACCEPT, s->log, s->nlog, mark, state_of(s));
	/* the active side comes back, unless it was the one that closed */
	ck_assert_int_eq(state_of(c), w->state == QSM_ACCEPT_DRAINING ? QSM_CM_CLOSED : QSM_CM_LIVE);
	srq_check(s, sctx, QSM_ACCEPT_LIVE);
	check_wrs(w, QSM_MACHINE_ACCEPT, recvs_fate(s, QSM_ACCEPT_LIVE, qps_at_fill));
	if (!s->released && state_of(s) == QSM_ACCEPT_LIVE)
		refill_after_recovery(s, qps_at_fill);
	finish();
}

START_TEST(test_passive_queue_takes_the_documented_edge_for_every_fault_in_every_state)
{
	passive_case(&passive_rows[_i]);
}
END_TEST

START_TEST(test_passive_queue_on_an_srq_takes_the_documented_edge_for_every_fault_in_every_state)
{
	srq_begin(true);
	passive_case(&passive_rows[_i]);
}
END_TEST

/* ---- the listener ---- */

#define L(x) QSM_LISTENER_##x
#define LEDGE(f, s, fr, ev, to, n, fin) { F_##f, L(s), true, L(fr), EV(ev), L(to), n, L(fin) }
#define LNONE_OF(f, s, ev, fin) { F_##f, L(s), true, ANY, EV(ev), ANY, 0, L(fin) }
#define LNA(f, s, fin) { F_##f, L(s), false, 0, 0, 0, 0, L(fin) }

/*
 * IDLE: created, LISTEN not dispatched yet.  RELISTEN_WAIT: its device was removed.
 * A listener outlives its device: it always ends LISTENING once the device is back.
 * Faults of the connection setup reach the listener only as a CONNECT_REQUEST or not.
 */
static const struct row listener_rows[] = {
	LEDGE(DEVICE_REMOVAL, IDLE, LISTENING, DEVICE_REMOVAL, RELISTEN_WAIT, 1, LISTENING),
	LEDGE(DEVICE_REMOVAL, LISTENING, LISTENING, DEVICE_REMOVAL, RELISTEN_WAIT, 1, LISTENING),
	LNA(DEVICE_REMOVAL, RELISTEN_WAIT, LISTENING), /* already gone: -EALREADY */
	LNONE_OF(DEVICE_ADDED, IDLE, DEVICE_ADDED, LISTENING),      /* another device */
	LNONE_OF(DEVICE_ADDED, LISTENING, DEVICE_ADDED, LISTENING), /* another device */
	LEDGE(DEVICE_ADDED, RELISTEN_WAIT, RELISTEN_WAIT, DEVICE_ADDED, RELISTEN_WAIT, 1, LISTENING),
	LNA(ENOMEM, IDLE, LISTENING),      /* its id exists: nothing to create */
	LNA(ENOMEM, LISTENING, LISTENING),
	LEDGE(ENOMEM, RELISTEN_WAIT, RELISTEN_WAIT, RETRY, RELISTEN_WAIT, -1, LISTENING),
	LEDGE(HOLD, IDLE, LISTENING, CONNECT_REQUEST, LISTENING, -1, LISTENING),
	LEDGE(HOLD, LISTENING, LISTENING, CONNECT_REQUEST, LISTENING, -1, LISTENING),
	LNA(HOLD, RELISTEN_WAIT, LISTENING),
	LEDGE(CONNECT_ERROR, IDLE, LISTENING, CONNECT_REQUEST, LISTENING, 2, LISTENING),
	LEDGE(CONNECT_ERROR, LISTENING, LISTENING, CONNECT_REQUEST, LISTENING, 2, LISTENING),
	LNA(CONNECT_ERROR, RELISTEN_WAIT, LISTENING),
	/* its address moved: it listens again at once (LISTEN from RELISTEN_WAIT) */
	LEDGE(ADDR_CHANGE, IDLE, LISTENING, ADDR_CHANGE, RELISTEN_WAIT, 1, LISTENING),
	LEDGE(ADDR_CHANGE, LISTENING, LISTENING, ADDR_CHANGE, RELISTEN_WAIT, 1, LISTENING),
	LNA(ADDR_CHANGE, RELISTEN_WAIT, LISTENING),   /* no device: -ENODEV */
	/* a port that comes back: a listener waiting for its device tries at once */
	LNONE_OF(PORT_ACTIVE, IDLE, PORT_ACTIVE, LISTENING),
	LNONE_OF(PORT_ACTIVE, LISTENING, PORT_ACTIVE, LISTENING),
	LNA(PORT_ACTIVE, RELISTEN_WAIT, LISTENING),   /* no device: -ENODEV */
};
#define N_LISTENER (sizeof(listener_rows) / sizeof(listener_rows[0]))

START_TEST(test_listener_takes_the_documented_edge_for_every_fault_in_every_state)
{
	const struct row *w = &listener_rows[_i];
	struct qsm_listener_opts o = { .addr = (struct sockaddr *)&addr, .cls = &test_class,
				       .relisten = { .initial_delay_ms = 50, .max_delay_ms = 200 } };
	struct rec *c = NULL;
	unsigned mark;

	ck_assert_int_eq(qsm_listener_new(sctx, &o, &listener), 0);
	if (w->state != QSM_LISTENER_IDLE)
		harness_settle(&world);
	if (w->state == QSM_LISTENER_RELISTEN_WAIT) {
		ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
		harness_settle(&world);
	}
	ck_assert_int_eq(qsm_listener_state(listener), w->state);
	mark = nllog;

	switch (w->fault) {
	case F_DEVICE_REMOVAL:
		ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"),
				 w->state == QSM_LISTENER_RELISTEN_WAIT ? -EALREADY : 0);
		harness_run_for(&world, HORIZON_MS);
		break;
	case F_DEVICE_ADDED:
		if (w->state == QSM_LISTENER_RELISTEN_WAIT)
			ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
		else
			ck_assert_int_eq(qsm_sim_device_add(sim, "sim1", "192.0.2.2"), 0);
		harness_settle(&world);
		break;
	case F_ENOMEM:
		ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_ENOMEM, 1), 0);
		if (w->state == QSM_LISTENER_RELISTEN_WAIT) {
			harness_run_for(&world, 1000); /* retries fail on the missing device, one on ENOMEM */
			ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
		}
		harness_run_for(&world, HORIZON_MS);
		break;
	case F_ADDR_CHANGE:
	case F_PORT_ACTIVE:
		ck_assert_int_eq(w->fault == F_ADDR_CHANGE ? qsm_sim_addr_change(sim, "sim0") :
				 qsm_sim_port_event(sim, "sim0", QSM_EV_PORT_ACTIVE),
				 w->state == QSM_LISTENER_RELISTEN_WAIT ? -ENODEV : 0);
		harness_settle(&world);
		break;
	case F_HOLD:
	case F_CONNECT_ERROR:
		/* a client connects while the fault is armed */
		if (w->fault == F_HOLD)
			hold_all();
		else
			ck_assert_int_eq(qsm_sim_inject(sim, sim_fault[w->fault], 1), 0);
		c = new_client(0);
		ck_assert_int_eq(qsm_conn_connect(c->q), 0);
		harness_run_for(&world, HORIZON_MS);
		break;
	default:
		ck_abort_msg("no listener scenario for %s", fault_names[w->fault]);
	}

	disarm_all();
	release_held();
	harness_settle(&world);
	if (qsm_sim_device_state(sim, "sim0") == QSM_SIM_DEVICE_GONE)
		ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	harness_run_for(&world, RECOVER_MS);

	check_row(w, QSM_MACHINE_LISTENER, llog, nllog, mark, qsm_listener_state(listener));
	if (c)
		ck_assert_int_eq(state_of(c), QSM_CM_LIVE);
	/* a client can connect now */
	c = new_client(0);
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_run_for(&world, 1000);
	ck_assert_int_eq(state_of(c), QSM_CM_LIVE);
	finish();
}
END_TEST

/* ---- races the matrix does not reach by itself ---- */

/* A RETRY timer that expires while a DEVICE_ADDED is already queued for the listener must
 * not make it listen twice (the first listening id would be overwritten and leak). */
START_TEST(test_listener_relisten_timer_and_device_added_together_listen_once)
{
	struct rec *gap;
	struct sockaddr_in nowhere = addr;
	struct qsm_conn_opts o = { .cls = &test_class, .dst = (struct sockaddr *)&nowhere,
				   .policy = { .initial_delay_ms = 1000 } };
	struct qsm_conn *q;

	listen_server();
	/* a queue of the server ctx waits in the gap, so DEVICE_ADDED fans out to two objects */
	nowhere.sin_port = htons(9);
	ck_assert_int_eq(qsm_conn_new(sctx, &o, &q), 0);
	gap = rec_new(q, false);
	ck_assert_int_eq(qsm_conn_connect(q), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_RECONNECT_WAIT);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_listener_state(listener), QSM_LISTENER_RELISTEN_WAIT);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	/* the gap queue's DEVICE_ADDED is dispatched, the listener's stays queued ... */
	ck_assert_int_eq(qsm_ctx_dispatch(sctx, 1), 1);
	/* ... while its relisten timer expires */
	world.now_ns += 60 * MS;
	harness_settle(&world);
	ck_assert_int_eq(qsm_listener_state(listener), QSM_LISTENER_LISTENING);
	harness_run_for(&world, 1000);
	ck_assert_int_eq(qsm_listener_state(listener), QSM_LISTENER_LISTENING);
	for (unsigned i = 0; i < nllog; i++)
		ck_assert_msg(llog[i].to != UNEXPECTED, "listener: unexpected %s in %s",
			      qsm_event_name(llog[i].event), qsm_state_name(QSM_MACHINE_LISTENER, llog[i].from));
	/* it listened once: destroying it and the gap queue leaves no id behind */
	ck_assert_int_eq(qsm_conn_destroy(gap->q), 0);
	gap->gone = true;
	ck_assert_int_eq(qsm_listener_destroy(listener), 0);
	listener = NULL;
	harness_settle(&world);
	{
		struct qsm_sim_stats st;

		qsm_sim_get_stats(sim, &st);
		ck_assert_uint_eq(st.ids, 0);
	}
	finish();
}
END_TEST

/* A timer that expired behind a downcall must not be delivered to the state the downcall
 * led to: an accept that comes at the request's deadline is not torn down by it. */
START_TEST(test_accept_at_the_request_deadline_is_not_undone_by_the_old_timeout)
{
	struct rec *c, *s;

	request_ms = 1000;
	listen_server();
	c = new_client(0);
	srv_defer = true;
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	s = server_queue();
	ck_assert_int_eq(qsm_conn_state(s->q), QSM_ACCEPT_REQUESTED);
	world.now_ns += 1000 * MS; /* request_ms: the request timer is due, the client's is not */
	ck_assert_int_eq(qsm_conn_accept(s->q, NULL, 0), 0);
	harness_settle(&world);
	ck_assert_int_eq(count_edges(s, 0, ANY, QSM_EV_TIMEOUT, ANY), 0);
	ck_assert_int_eq(state_of(s), QSM_ACCEPT_LIVE);
	ck_assert_int_eq(state_of(c), QSM_CM_LIVE);
	finish();
}
END_TEST

/* The same for the reconnect timer: a connect that races it leaves no stray RETRY. */
START_TEST(test_connect_at_the_retry_deadline_leaves_no_stray_retry)
{
	struct rec *c;

	listen_server();
	c = new_client(0);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_REJECT, 1), 0);
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_RECONNECT_WAIT);
	world.now_ns += 1000 * MS;
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	ck_assert_int_eq(state_of(c), QSM_CM_LIVE);
	ck_assert_int_eq(count_edges(c, 0, ANY, QSM_EV_RETRY, UNEXPECTED), 0);
	finish();
}
END_TEST

/* The device sentinel's id could not be created (ENOMEM): the device must still be let go
 * of when it is removed while the queue waits in the gap, or its removal never completes. */
START_TEST(test_device_without_sentinel_is_not_held_through_the_gap)
{
	struct rec *c;

	listen_server();
	c = new_client(0);
	hold_all();
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	unhold();
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_ADDR_RESOLVING);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_ENOMEM, 1), 0); /* the sentinel's id */
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_REJECT, 1), 0);
	release_held();
	harness_settle(&world);
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_RECONNECT_WAIT);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
	harness_run_for(&world, 2000);
	ck_assert_int_eq(qsm_sim_device_state(sim, "sim0"), QSM_SIM_DEVICE_GONE);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	harness_run_for(&world, 5000);
	ck_assert_int_eq(state_of(c), QSM_CM_LIVE);
	finish();
}
END_TEST

/* The device went away between ADDR_RESOLVED and the route resolution: the registry must
 * not take a reference on a device that is already being removed. */
START_TEST(test_device_removed_before_route_resolution_is_not_held)
{
	struct rec *c;

	listen_server();
	c = new_client(0);
	hold_all();
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_ADDR_RESOLVING);
	/* ADDR_RESOLVED, then DEVICE_REMOVAL, both held: released in that order */
	ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
	release_held();
	harness_run_for(&world, 2000);
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_RECONNECT_WAIT);
	ck_assert_int_eq(qsm_sim_device_state(sim, "sim0"), QSM_SIM_DEVICE_GONE);
	ck_assert_uint_eq(COUNT(cctx, devices_live), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	harness_run_for(&world, 5000);
	ck_assert_int_eq(state_of(c), QSM_CM_LIVE);
	finish();
}
END_TEST

/* A handler that returns non-zero on the edge into CLOSED: nothing more is called, and the
 * abort is accounted for like every other (popped + aborts == dispatched + dropped). */
static int fail_on_drained(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct rec *r = cb(q, "on_event");

	log_step(r, ev->from, ev->event, ev->to);
	if (ev->event == QSM_EV_DRAINED) {
		r->gone = true;
		return -1;
	}
	return 0;
}

static const struct qsm_class fail_on_close_class = {
	.name = "fail_on_close",
	.super = &test_class,
	.active = { [QSM_CM_CLOSING] = { .on_event = fail_on_drained } },
};

START_TEST(test_nonzero_return_on_the_edge_into_closed_is_accounted)
{
	struct qsm_conn *q;
	struct qsm_conn_opts o = { .cls = &fail_on_close_class, .dst = (struct sockaddr *)&addr };
	struct rec *r;

	listen_server();
	ck_assert_int_eq(qsm_conn_new(cctx, &o, &q), 0);
	r = rec_new(q, false);
	ck_assert_int_eq(qsm_conn_connect(q), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_conn_disconnect(q), 0);
	harness_settle(&world);
	ck_assert(r->gone);
	ck_assert(!r->released); /* no release after a non-zero return */
	ck_assert_uint_eq(COUNT(cctx, queues_live), 0);
	check_accounting(cctx, &ctally, "client");
	finish();
}
END_TEST

/* An event for a passive id whose CONNECT_REQUEST is still held (delivered out of order)
 * finds no queue: it is an orphan, counted and traced as one. */
START_TEST(test_event_before_its_connect_request_is_counted_as_an_orphan)
{
	struct rec *c;

	listen_server();
	c = new_client(0);
	hold_all();
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	step_until(c, QSM_CM_CONNECTING); /* the CONNECT_REQUEST is held */
	unhold();
	/* the client gives up: the passive id is rejected (REJECTED is not held) */
	ck_assert_int_eq(qsm_sim_qp_fatal(sim, cfab, c->q), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_RECONNECT_WAIT);
	check_accounting(sctx, &stally, "server");
	release_held();
	harness_run_for(&world, 5000);
	ck_assert_int_eq(state_of(c), QSM_CM_LIVE);
	check_accounting(sctx, &stally, "server");
	ck_assert_uint_eq(COUNT(sctx, orphans), 1);
	ck_assert_uint_eq(stally.fabric, 1);
	finish();
}
END_TEST

/* DEVICE_ADDED is counted once per dispatch, like every event (events[] sums to dispatched). */
START_TEST(test_device_added_is_counted_once_per_dispatch)
{
	struct rec *c;

	listen_server();
	c = new_client(0);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_REJECT, 1), 0);
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim1", "192.0.2.2"), 0);
	harness_settle(&world);
	ck_assert_int_eq(count_edges(c, 0, QSM_CM_RECONNECT_WAIT, QSM_EV_DEVICE_ADDED, QSM_CM_RECONNECT_WAIT), 1);
	check_accounting(cctx, &ctally, "client");
	check_accounting(sctx, &stally, "server");
	finish();
}
END_TEST

/* Stale-connection rejects: three retries 10 ms apart, not counted as attempts; a fourth in a
 * row waits out the policy's backoff.  The client's policy starts at 10 s here. */
static struct rec *stale_client(unsigned rejects)
{
	struct qsm_conn *q;
	struct rec *r;
	struct qsm_conn_opts o = {
		.cls = cli_cls, .dst = (struct sockaddr *)&addr,
		.policy = { .initial_delay_ms = 10000, .max_delay_ms = 10000, .max_attempts = 2 },
	};

	listen_server();
	ck_assert_int_eq(qsm_conn_new(cctx, &o, &q), 0);
	r = rec_new(q, false);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_REJECT_STALE, rejects), 0);
	ck_assert_int_eq(qsm_conn_connect(q), 0);
	harness_run_for(&world, 200);
	return r;
}

START_TEST(test_stale_rejects_retry_fast_three_times_then_back_off)
{
	struct rec *c = stale_client(3);

	/* 3 fast retries (30 ms), not attempts: max_attempts 2 did not give up */
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_LIVE);
	ck_assert_uint_eq(COUNT(cctx, stale_retries), 3);
	ck_assert_uint_eq(COUNT(cctx, reconnects), 3);
	disarm_all();
	finish();
}
END_TEST

START_TEST(test_a_fourth_stale_reject_in_a_row_waits_for_the_backoff)
{
	struct rec *c = stale_client(4);

	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_RECONNECT_WAIT);
	ck_assert_uint_eq(COUNT(cctx, stale_retries), 3);
	harness_run_for(&world, 10000);   /* the backoff: its one attempt connects */
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_LIVE);
	ck_assert_uint_eq(COUNT(cctx, stale_retries), 3);
	disarm_all();
	finish();
}
END_TEST

/* A port's event other than PORT_ERR and PORT_ACTIVE goes to the device's registry entry,
 * whose machine counts and traces it; no queue hears it, none is lost. */
START_TEST(test_gid_change_is_the_device_entrys_edge)
{
	struct rec *c;
	struct qsm_counters k;

	listen_server();
	c = new_client(0);
	ck_assert_int_eq(qsm_conn_connect(c->q), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_sim_port_event(sim, "sim0", QSM_EV_GID_CHANGE), 0);
	ck_assert_int_eq(qsm_sim_port_event(sim, "sim0", QSM_EV_CLIENT_REREGISTER), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_ctx_counters(cctx, &k, sizeof(k)), 0);
	ck_assert_uint_eq(k.events[QSM_EV_GID_CHANGE], 1);   /* the client's registry entry */
	ck_assert_uint_eq(k.events[QSM_EV_CLIENT_REREGISTER], 1);
	ck_assert_uint_eq(k.unexpected, 0);
	ck_assert_int_eq(count_edges(c, 0, ANY, QSM_EV_GID_CHANGE, ANY), 0);
	ck_assert_int_eq(qsm_conn_state(c->q), QSM_CM_LIVE);
	ck_assert_int_eq(qsm_sim_port_event(sim, "sim0", QSM_EV_QP_FATAL), -EINVAL);
	ck_assert_int_eq(qsm_sim_qp_event(sim, cfab, c->q, QSM_EV_PORT_ERR), -EINVAL);
	check_accounting(cctx, &ctally, "client");
	check_accounting(sctx, &stally, "server");
	finish();
}
END_TEST

/* The timeouts a connect left behind (each state's, cancelled lazily when the state was left)
 * cost an idle ctx one wake-up in all, not one each: the first stale key that comes due clears
 * the rest, and the next timeout is then a timer that fires (none here: -1). */
START_TEST(test_stale_timeouts_wake_an_idle_ctx_once)
{
	struct rec *c[4];
	int t;

	listen_server();
	for (int i = 0; i < 4; i++) {
		c[i] = new_client(0);
		ck_assert_int_eq(qsm_conn_connect(c[i]->q), 0);
		harness_settle(&world);
		ck_assert_int_eq(qsm_conn_state(c[i]->q), QSM_CM_LIVE);
		world.now_ns += 10 * MS;   /* each queue's CONNECTING key 10 ms after the last's */
	}
	t = qsm_ctx_next_timeout_ms(cctx);
	ck_assert_int_gt(t, 0);              /* the first queue's: nothing will fire */
	world.now_ns += (uint64_t)t * MS;
	ck_assert_int_ge(qsm_ctx_dispatch(cctx, 0), 0);
	ck_assert_int_eq(qsm_ctx_next_timeout_ms(cctx), -1);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(qsm_conn_state(c[i]->q), QSM_CM_LIVE);
	finish();
}
END_TEST

static Suite *faults_suite(void)
{
	Suite *s = suite_create("faults");
	TCase *m = tcase_create("matrix"), *r = tcase_create("races");
	unsigned app = 0;

	for (unsigned i = 0; i < N_ACTIVE; i++)
		app += active_rows[i].applicable;
	for (unsigned i = 0; i < N_PASSIVE; i++)
		app += passive_rows[i].applicable;
	for (unsigned i = 0; i < N_LISTENER; i++)
		app += listener_rows[i].applicable;
	printf("fault matrix: checks %zu (fault, state) combinations (active %zu, passive %zu, "
	       "listener %zu), %u of them where the fault reaches the object\n", N_ACTIVE + N_PASSIVE + N_LISTENER, N_ACTIVE,
	       N_PASSIVE, N_LISTENER, app);

	tcase_add_checked_fixture(m, setup, teardown);
	tcase_set_timeout(m, 60);
	tcase_add_loop_test(m, test_active_queue_takes_the_documented_edge_for_every_fault_in_every_state,
			    0, (int)N_ACTIVE);
	tcase_add_loop_test(m, test_passive_queue_takes_the_documented_edge_for_every_fault_in_every_state,
			    0, (int)N_PASSIVE);
	tcase_add_loop_test(m, test_listener_takes_the_documented_edge_for_every_fault_in_every_state,
			    0, (int)N_LISTENER);
	tcase_add_loop_test(m, test_active_queue_on_an_srq_takes_the_documented_edge_for_every_fault_in_every_state,
			    0, (int)N_ACTIVE);
	tcase_add_loop_test(m, test_passive_queue_on_an_srq_takes_the_documented_edge_for_every_fault_in_every_state,
			    0, (int)N_PASSIVE);
	suite_add_tcase(s, m);

	tcase_add_checked_fixture(r, setup, teardown);
	tcase_set_timeout(r, 60);
	tcase_add_test(r, test_listener_relisten_timer_and_device_added_together_listen_once);
	tcase_add_test(r, test_accept_at_the_request_deadline_is_not_undone_by_the_old_timeout);
	tcase_add_test(r, test_connect_at_the_retry_deadline_leaves_no_stray_retry);
	tcase_add_test(r, test_device_without_sentinel_is_not_held_through_the_gap);
	tcase_add_test(r, test_device_removed_before_route_resolution_is_not_held);
	tcase_add_test(r, test_nonzero_return_on_the_edge_into_closed_is_accounted);
	tcase_add_test(r, test_event_before_its_connect_request_is_counted_as_an_orphan);
	tcase_add_test(r, test_device_added_is_counted_once_per_dispatch);
	tcase_add_test(r, test_stale_rejects_retry_fast_three_times_then_back_off);
	tcase_add_test(r, test_a_fourth_stale_reject_in_a_row_waits_for_the_backoff);
	tcase_add_test(r, test_gid_change_is_the_device_entrys_edge);
	tcase_add_test(r, test_stale_timeouts_wake_an_idle_ctx_once);
	suite_add_tcase(s, r);
	return s;
}

QSM_CHECK_MAIN(faults_suite)
