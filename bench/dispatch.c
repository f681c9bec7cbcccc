/* rdma-qsm benchmark: cost of one CM event through the rdmacm fabric -> ctx -> generated machine ->
 * handler, against a same-work hand-written rdma_cm loop (bench/mux.c) and a bare switch, on the
 * same fake librdmacm, same cycle, same run. */
#include <malloc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "fake_rdmacm.h"
#include "instr.h"

/*
 * The cycle: every queue goes round one reconnect cycle after another, on the rdmacm fabric
 * (qsm) or a hand-written rdma_cm loop (mux) over the same fake librdmacm (fake_rdmacm.h, many
 * ids), whose CM channel answers each call as the kernel's CM would:
 *   RECONNECT_WAIT -RETRY (the side's own timer)-> ADDR_RESOLVING (rdma_create_id,
 *   rdma_resolve_addr) -ADDR_RESOLVED-> ROUTE_RESOLVING (rdma_resolve_route) -ROUTE_RESOLVED->
 *   CONNECTING (rdma_create_qp, rdma_connect) -ESTABLISHED-> CONNECTED (handler: READY -> LIVE)
 *   -DISCONNECTED (the peer)-> DRAINING (rdma_disconnect; the QP to ERR and the drain's marker
 *   posted) -TIMEWAIT_EXIT-> DRAINING -DRAINED (the marker's flush, polled from the CQ once its
 *   channel fired)-> RECONNECT_WAIT (rdma_destroy_qp, rdma_destroy_id; the backoff armed)
 * 5 CM events, DRAINED and RETRY, plus the READY the handler posts: 8 dispatches per cycle.  The
 * queues interleave as the channel's queue orders them: each event's answer queued behind every
 * other queue's (so 100,000 queues walk 100,000 queue objects between two events of one).  All
 * the queues wait to reconnect at a cycle's end, and the driver moves the virtual clock so that
 * every RETRY is due (BENCH_CYCLE_JUMP_MS).
 */
#define CYCLE_LEN BENCH_CYCLE_EVENTS

bool bench_check(const char *side, uint64_t dispatched, uint64_t handler_calls, uint64_t cm_events,
		 size_t nqueues, uint64_t cycles)
{
	uint64_t qc = (uint64_t)nqueues * cycles;

	if (dispatched == BENCH_CYCLE_DISPATCHES * qc && handler_calls == 2 * qc &&
	    cm_events == BENCH_CYCLE_CM * qc)
		return true;
	fprintf(stderr, "bench: %s, %zu queues, %llu cycles: %llu dispatches (want %llu), %llu handler "
		"calls (want %llu), %llu CM events (want %llu)\n", side, nqueues,
		(unsigned long long)cycles, (unsigned long long)dispatched,
		(unsigned long long)(BENCH_CYCLE_DISPATCHES * qc), (unsigned long long)handler_calls,
		(unsigned long long)(2 * qc), (unsigned long long)cm_events,
		(unsigned long long)(BENCH_CYCLE_CM * qc));
	return false;
}

/* ---- the library under test ---- */

uint64_t ulp_handler_calls;

/* A ULP's CONNECTED.enter: what the base class does, plus a counter as "work". */
static int bench_connected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	ulp_handler_calls++;
	return qsm_conn_ready(q);
}

static int bench_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)q;
	(void)ev;
	ulp_handler_calls++;
	return 0;
}

static const struct qsm_class bench_class = {
	.name = "bench",
	.active = {
		[QSM_CM_CONNECTED] = { .enter = bench_connected },
		[QSM_CM_LIVE] = { .enter = bench_live },
	},
};

uint64_t bench_vclock_ns;

static uint64_t qsm_vclock(void *arg)
{
	(void)arg;
	return bench_vclock_ns;
}

/* One side's objects: the rdmacm fabric over the fake, the ctx, its queues made from `tmpl`,
 * every queue connecting (the fake silent: no answer yet) and the ctx settled. */
struct qsm_run {
	size_t nqueues;
	struct qsm_fabric *fab;
	struct qsm_ctx *ctx;
	struct qsm_conn **qs;
	double bytes_per_queue;          /* malloc'd by qsm_conn_new */
	double bytes_connected;          /* ... and once connecting and settled (its timer in the
	                                    heap, the FIFO trimmed, all the ctx keeps per queue) */
};

/* What the fabric holds for its ids (struct qsm_fid, malloc's chunks): the fabric's, not the
 * runtime's. */
static size_t fabric_id_bytes(struct qsm_fabric *fab)
{
	struct rc_fabric *f = to_fab(fab);
	struct qsm_list *pos, *tmp;
	size_t n = 0;

	qsm_list_each(pos, tmp, &f->ids)
		n += malloc_usable_size(qsm_container_of(pos, struct qsm_fid, node)) + sizeof(size_t);
	return n;
}

static void qsm_run_start(struct qsm_run *r, size_t nqueues, const struct qsm_conn_opts *tmpl, bool hold)
{
	struct mallinfo2 m0, m1;

	r->nqueues = nqueues;
	fake_many_init(nqueues);
	many.silent = true;
	many.hold = hold;
	r->qs = malloc(nqueues * sizeof(*r->qs));
	if (!r->qs || fake_many_fabric(&r->fab) < 0 ||
	    qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = r->fab, .now_ns = qsm_vclock }, &r->ctx) < 0)
		abort();
	m0 = mallinfo2();
	for (size_t i = 0; i < nqueues; i++) {
		struct qsm_conn_opts o = *tmpl;

		o.user = (void *)(uintptr_t)i;
		if (qsm_conn_new(r->ctx, &o, &r->qs[i]) < 0)
			abort();
	}
	m1 = mallinfo2();
	r->bytes_per_queue = (double)(m1.uordblks - m0.uordblks) / (double)nqueues;
	for (size_t i = 0; i < nqueues; i++)
		qsm_conn_connect(r->qs[i]);
	while (qsm_ctx_dispatch(r->ctx, 4096) > 0) {
	}
	qsm_ctx_dispatch(r->ctx, 4096);   /* a pass with nothing queued: the FIFO trimmed */
	r->bytes_connected = (double)(mallinfo2().uordblks - m0.uordblks - fabric_id_bytes(r->fab)) /
			     (double)nqueues;
	many.silent = false;
}

static struct qsm_counters qsm_counts(struct qsm_ctx *ctx)
{
	struct qsm_counters c;

	qsm_ctx_counters(ctx, &c, sizeof(c));
	return c;
}

/* Every queue in `state`, nothing unexpected or dropped. */
static bool qsm_settled(const struct qsm_run *r, int state)
{
	struct qsm_counters c = qsm_counts(r->ctx);

	for (size_t i = 0; i < r->nqueues; i++)
		if (qsm_conn_state(r->qs[i]) != state) {
			fprintf(stderr, "bench: qsm queue %zu is %s\n", i, qsm_conn_state_name(r->qs[i]));
			return false;
		}
	if (c.unexpected || c.dropped) {
		fprintf(stderr, "bench: qsm: %llu unexpected, %llu dropped events\n",
			(unsigned long long)c.unexpected, (unsigned long long)c.dropped);
		return false;
	}
	return true;
}

static void qsm_run_end(struct qsm_run *r, const char *what, uint64_t events, uint64_t ns)
{
	if (getenv("BENCH_DEBUG")) {
		struct qsm_counters c = qsm_counts(r->ctx);

		fprintf(stderr, "qsm%s: %zu queues: %llu events, %.3f s, popped %llu dropped %llu\n", what,
			r->nqueues, (unsigned long long)events, (double)ns / 1e9,
			(unsigned long long)c.popped, (unsigned long long)c.dropped);
	}
	qsm_ctx_free(r->ctx);
	free(r->qs);
	fake_many_fini();
}

static struct sockaddr_in bench_dst = { .sin_family = AF_INET };

/* Dispatch until nothing is left to do: the fake has nothing for the fabric either (a loop that
 * sleeps on the fd would be woken for it; the fabric may return before it looked). */
static void qsm_until_idle(struct qsm_ctx *ctx)
{
	do {
		while (qsm_ctx_dispatch(ctx, 4096) > 0) {
		}
	} while (fake_many_pending());
}

static struct result run_qsm(size_t nqueues, uint64_t cycles, int instr)
{
	const struct qsm_conn_opts tmpl = {
		.cls = &bench_class, .dst = (struct sockaddr *)&bench_dst,
		.policy = { .initial_delay_ms = BENCH_RETRY_MS, .max_delay_ms = BENCH_RETRY_MS, .jitter_pct = 10 },
		.timeouts = { .resolve_ms = BENCH_RETRY_MS, .connect_ms = BENCH_RETRY_MS,
			      .drain_ms = BENCH_RETRY_MS },
	};
	struct qsm_run run;
	struct result r = { 0 };
	uint64_t t0, ns, before, calls, cm;
	struct rc_fabric *f;

	bench_vclock_ns = BENCH_VCLOCK_START;
	qsm_run_start(&run, nqueues, &tmpl, true);
	/* the first cycle, not measured: every queue's answers come, and it waits to reconnect */
	fake_many_answer();
	qsm_until_idle(run.ctx);
	r.ok = qsm_settled(&run, QSM_CM_RECONNECT_WAIT);
	before = qsm_counts(run.ctx).dispatched;
	calls = ulp_handler_calls;
	cm = many.events;
	t0 = measure_start(instr);
	for (uint64_t k = 0; k < cycles; k++) {
		bench_vclock_ns += BENCH_CYCLE_JUMP_MS * 1000000ull;
		qsm_until_idle(run.ctx);
	}
	ns = measure_stop(instr, t0);
	r.events = qsm_counts(run.ctx).dispatched - before;
	r.ok = r.ok && qsm_settled(&run, QSM_CM_RECONNECT_WAIT) &&
	       bench_check("qsm", r.events, ulp_handler_calls - calls, many.events - cm, nqueues, cycles);
	r.ns_per_event = r.events ? (double)ns / (double)r.events : 0;
	r.bytes_per_queue = run.bytes_per_queue;
	r.bytes_connected = run.bytes_connected;
	f = to_fab(run.fab);
	/* the fabric asks one more of each for the drain's marker */
	r.qp_send_wr = many.qp_cap.max_send_wr - 1;
	r.qp_recv_wr = many.qp_cap.max_recv_wr - 1;
	r.fabric_bytes_per_queue = f->qps_created ? (size_t)(f->qp_bytes / f->qps_created) : 0;
	qsm_run_end(&run, "", r.events, ns);
	return r;
}

static struct result run_qsm_timers(size_t nqueues, uint64_t rounds, int instr)
{
	const struct qsm_conn_opts tmpl = {
		.cls = &bench_class, .dst = (struct sockaddr *)&bench_dst,
		.policy = { .initial_delay_ms = BENCH_TIMER_MS, .max_delay_ms = BENCH_TIMER_MS },
		.timeouts = { .resolve_ms = BENCH_TIMER_MS, .connect_ms = BENCH_TIMER_MS,
			      .drain_ms = BENCH_TIMER_MS },
	};
	struct qsm_run run;
	struct result r = { 0 };
	uint64_t t0, ns, before;

	bench_vclock_ns = BENCH_VCLOCK_START;
	qsm_run_start(&run, nqueues, &tmpl, false);
	many.silent = true;   /* no answer, ever */
	before = qsm_counts(run.ctx).dispatched;
	t0 = measure_start(instr);
	for (uint64_t k = 0; k < rounds; k++) {
		int ms = qsm_ctx_next_timeout_ms(run.ctx);

		bench_vclock_ns += (uint64_t)(ms > 0 ? ms : 1) * 1000000ull;
		while (qsm_ctx_dispatch(run.ctx, 4096) > 0) {
		}
	}
	ns = measure_stop(instr, t0);
	r.events = qsm_counts(run.ctx).dispatched - before;
	r.ok = r.events == rounds * nqueues && qsm_settled(&run, rounds % 2 ? QSM_CM_RECONNECT_WAIT :
								     QSM_CM_ADDR_RESOLVING);
	if (r.events != rounds * nqueues)
		fprintf(stderr, "bench: qsm timers: %llu dispatches (want %llu)\n",
			(unsigned long long)r.events, (unsigned long long)(rounds * nqueues));
	r.ns_per_event = r.events ? (double)ns / (double)r.events : 0;
	r.bytes_per_queue = run.bytes_per_queue;
	qsm_run_end(&run, " timers", r.events, ns);
	return r;
}

/* ---- the floor: one event channel, one switch, one state enum per connection, the same
 * calls of the fake librdmacm; no timers (the reconnect at once), no FIFO, no accounting, no
 * epoll: less work than either multiplexer, shown, not compared ---- */

enum sw_state { SW_ADDR, SW_ROUTE, SW_CONNECTING, SW_CONNECTED, SW_LIVE, SW_DRAINING, SW_WAIT, SW_CLOSED };
#define SW_DRAINED 64   /* after rdma_cm's events: the drain's marker came back */

struct sw_conn {
	enum sw_state state;
	struct rdma_cm_id *id;
	int (*on_connected)(struct sw_conn *c);
	int (*on_live)(struct sw_conn *c);
	uint32_t attempts;
	uint64_t cycles_left;
	unsigned unexpected;
};

struct sw {
	struct rdma_event_channel *ch;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp_init_attr qp;
	struct rdma_conn_param conn;
};

static int sw_connected(struct sw_conn *c)
{
	ulp_handler_calls++;
	c->state = SW_LIVE; /* "ready": the baseline goes straight on */
	return c->on_live(c);
}

static int sw_live(struct sw_conn *c)
{
	(void)c;
	ulp_handler_calls++;
	return 0;
}

static void sw_connect(struct sw *w, struct sw_conn *c)
{
	c->state = SW_ADDR;
	if (rdma_create_id(w->ch, &c->id, c, RDMA_PS_TCP) < 0 ||
	    rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&bench_dst, 2000) < 0)
		c->unexpected++;
}

/* The rdma_cm event handler everyone writes: switch on the event, then on the state. */
static void sw_handle(struct sw *w, struct sw_conn *c, int event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (c->state == SW_ADDR) {
			c->state = SW_ROUTE;
			rdma_resolve_route(c->id, 2000);
		} else {
			c->unexpected++;
		}
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (c->state == SW_ROUTE) {
			c->state = SW_CONNECTING;
			w->qp.qp_context = c;
			if (rdma_create_qp(c->id, w->pd, &w->qp) == 0)
				rdma_connect(c->id, &w->conn);
		} else {
			c->unexpected++;
		}
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (c->state == SW_CONNECTING) {
			c->state = SW_CONNECTED;
			c->attempts = 0;
			if (c->on_connected(c))
				c->state = SW_CLOSED;
		} else {
			c->unexpected++;
		}
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (c->state == SW_CONNECTED || c->state == SW_LIVE) {
			struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
			struct ibv_send_wr marker = { .wr_id = (uintptr_t)c, .opcode = IBV_WR_SEND,
						      .send_flags = IBV_SEND_SIGNALED }, *bad;

			c->state = SW_DRAINING;
			rdma_disconnect(c->id);
			if (ibv_modify_qp(c->id->qp, &err, IBV_QP_STATE) || ibv_post_send(c->id->qp, &marker, &bad))
				c->unexpected++;
		} else if (c->state != SW_DRAINING)
			c->unexpected++;
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		if (c->state != SW_DRAINING)
			c->unexpected++;
		break;
	case SW_DRAINED:
		if (c->state == SW_DRAINING) {
			rdma_destroy_qp(c->id);
			rdma_destroy_id(c->id);
			c->id = NULL;
			c->state = SW_WAIT;
			c->attempts++;
			if (--c->cycles_left)
				sw_connect(w, c);   /* the retry, at once */
		} else {
			c->unexpected++;
		}
		break;
	default:
		c->unexpected++;
	}
}

static struct result run_switch(size_t nqueues, uint64_t cycles, int instr)
{
	struct sw w;
	struct ibv_context *verbs;
	struct ibv_comp_channel *cc;
	struct sw_conn *cs;
	struct mallinfo2 m0, m1;
	struct result r = { 0 };
	uint64_t t0, ns, n = 0, unexpected = 0, calls = ulp_handler_calls, cm;

	fake_many_init(nqueues);
	fake_many_device(&verbs, &w.pd, &w.cq, &cc);
	w.ch = rdma_create_event_channel();
	w.qp = (struct ibv_qp_init_attr){ .send_cq = w.cq, .recv_cq = w.cq, .qp_type = IBV_QPT_RC,
					  .cap = { .max_send_wr = 65, .max_recv_wr = 65,
						   .max_send_sge = 1, .max_recv_sge = 1 } };
	w.conn = (struct rdma_conn_param){ .responder_resources = 1, .initiator_depth = 1,
					   .flow_control = 1, .retry_count = 6, .rnr_retry_count = 7 };
	m0 = mallinfo2();
	cs = calloc(nqueues, sizeof(*cs));
	m1 = mallinfo2();
	if (!w.ch || !cs)
		abort();
	cm = many.events;
	t0 = measure_start(instr);
	for (size_t i = 0; i < nqueues; i++) {
		cs[i] = (struct sw_conn){ .on_connected = sw_connected, .on_live = sw_live,
					  .cycles_left = cycles };
		sw_connect(&w, &cs[i]);
	}
	for (;;) {
		struct rdma_cm_event *ce;
		struct ibv_wc wc[16];
		int k;

		if (rdma_get_cm_event(w.ch, &ce) == 0) {
			struct sw_conn *c = ce->id->context;
			int e = ce->event;

			rdma_ack_cm_event(ce);
			sw_handle(&w, c, e);
			n++;
			continue;
		}
		if ((k = ibv_poll_cq(w.cq, 16, wc)) <= 0)
			break;
		for (int i = 0; i < k; i++)
			sw_handle(&w, (struct sw_conn *)(uintptr_t)wc[i].wr_id, SW_DRAINED);
		n += (uint64_t)k;
	}
	ns = measure_stop(instr, t0);
	for (size_t i = 0; i < nqueues; i++)
		unexpected += cs[i].unexpected + (cs[i].state != SW_WAIT);
	/* the baseline's READY and RETRY cost nothing: count them as qsm counts its dispatches */
	r.events = n + 2 * cycles * nqueues;
	r.ok = !unexpected && bench_check("bare switch", r.events, ulp_handler_calls - calls,
					  many.events - cm, nqueues, cycles);
	if (unexpected)
		fprintf(stderr, "bare switch: %llu unexpected events or queues not waiting\n",
			(unsigned long long)unexpected);
	r.ns_per_event = r.events ? (double)ns / (double)r.events : 0;
	r.bytes_per_queue = (double)(m1.uordblks - m0.uordblks) / (double)nqueues;
	free(cs);
	rdma_destroy_event_channel(w.ch);
	fake_many_fini();
	return r;
}

/* A side: `cycles` measured cycles of every queue (the timer case: rounds of the clock). */
typedef struct result (*run_fn)(size_t nqueues, uint64_t cycles, int instr);

static const struct side {
	const char *name;
	run_fn run;
} sides[] = { { "qsm", run_qsm }, { "mux", run_mux }, { "bare_switch", run_switch } };
#define NSIDES (sizeof(sides) / sizeof(sides[0]))

/* The timer case (dispatch.h): EVENTS in a child's arguments are rounds of the clock. */
static const struct side timer_sides[] = { { "qsm_timer", run_qsm_timers }, { "mux_timer", run_mux_timers } };
#define TIMER_QUEUES 1000

static const size_t sizes[] = { 1, 1000, 100000 };
static const char *const size_names[] = { "1", "1k", "100k" };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Whole cycles of every queue for about `total` events (7 a cycle, READY not counted), at
 * least one. */
static uint64_t cycles_for(size_t nq, uint64_t total)
{
	return total / (CYCLE_LEN * nq) ? total / (CYCLE_LEN * nq) : 1;
}

/* `dispatch --instr SIDE NQUEUES CYCLES`: one side alone, counted under callgrind; exit status
 * 1 when its checks failed (instr_count() is then 0). */
static int instr_child(char **argv)
{
	for (size_t i = 0; i < NSIDES; i++)
		if (!strcmp(argv[2], sides[i].name))
			return sides[i].run(strtoul(argv[3], NULL, 10), strtoull(argv[4], NULL, 10), 1).ok ? 0 : 1;
	for (size_t i = 0; i < 2; i++)
		if (!strcmp(argv[2], timer_sides[i].name))
			return timer_sides[i].run(strtoul(argv[3], NULL, 10), strtoull(argv[4], NULL, 10), 1).ok ?
			       0 : 1;
	return 2;
}

/* A run whose checks failed prints no ratio, and the bench exits 1. */
static bool failed;

/* Timed: best of 3 of each side, same run; the events each dispatched must agree. */
static void timers_timed(uint64_t total)
{
	uint64_t rounds = total / TIMER_QUEUES ? total / TIMER_QUEUES : 1;
	struct result best[2];

	for (size_t s = 0; s < 2; s++)
		best[s].ns_per_event = 1e18;
	for (int rep = 0; rep < 3; rep++)
		for (size_t s = 0; s < 2; s++) {
			struct result r = timer_sides[s].run(TIMER_QUEUES, rounds, 0);

			failed |= !r.ok;
			if (r.ns_per_event < best[s].ns_per_event)
				best[s] = r;
		}
	if (best[0].events != best[1].events)
		fprintf(stderr, "timers: qsm dispatched %llu events, mux %llu\n",
			(unsigned long long)best[0].events, (unsigned long long)best[1].events);
	printf("\nTimer fires: %d queues whose step timeout and backoff fire and re-arm in turn\n"
	       "(ADDR_RESOLVING -TIMEOUT-> RECONNECT_WAIT -RETRY-> ADDR_RESOLVING), on a virtual clock\n"
	       "moved to the next timer %llu times; qsm's timer heap against the mux's own binary heap\n"
	       "%9s %9s %8s\n%9.1f %9.1f %7.2fx\n", TIMER_QUEUES, (unsigned long long)rounds,
	       "qsm ns", "mux ns", "qsm/mux", best[0].ns_per_event, best[1].ns_per_event,
	       best[0].ns_per_event / best[1].ns_per_event);
	if (!failed)
		printf("ratio dispatch_timer qsm/mux %.2f\n", best[0].ns_per_event / best[1].ns_per_event);
}

static void timers_instr(void)
{
	uint64_t rounds = 20;
	double ir[2];

	for (size_t s = 0; s < 2; s++)
		ir[s] = (double)instr_count(timer_sides[s].name, TIMER_QUEUES, rounds) /
			(double)(rounds * TIMER_QUEUES);
	printf("\nTimer fires under callgrind (%d queues, %llu rounds, one fire per queue a round):\n"
	       "%12s %12s %9s\n%12.0f %12.0f %8.2fx\n\n", TIMER_QUEUES, (unsigned long long)rounds,
	       "qsm Ir/fire", "mux Ir/fire", "qsm/mux", ir[0], ir[1], ir[1] > 0 ? ir[0] / ir[1] : 0);
	if (ir[0] > 0 && ir[1] > 0)
		printf("ratio dispatch_timer_instr qsm/mux %.2f\n", ir[0] / ir[1]);
	else
		failed = true;
}

static void instructions(void)
{
	double ratio[NSIZES][NSIDES];
	bool ok[NSIZES][NSIDES];

	printf("\nInstructions per event under callgrind (each side alone in a child, only its\n"
	       "measured loop counted; the stable CPU figure on this VM):\n\n");
	printf("%9s %10s %12s %12s %12s %9s %9s\n", "queues", "events", "qsm Ir/ev", "mux Ir/ev",
	       "switch Ir/ev", "qsm/mux", "qsm/sw");
	for (size_t i = 0; i < NSIZES; i++) {
		/* enough for a stable count, few enough for valgrind: 10 cycles, or one of 100k */
		uint64_t cycles = cycles_for(sizes[i], 70000),
			 dispatched = cycles * sizes[i] * BENCH_CYCLE_DISPATCHES;
		double ir[NSIDES];

		for (size_t s = 0; s < NSIDES; s++) {
			ir[s] = (double)instr_count(sides[s].name, sizes[i], cycles) / (double)dispatched;
			ok[i][s] = ir[s] > 0;   /* 0: valgrind failed, or the run's checks */
			failed |= !ok[i][s];
		}
		for (size_t s = 0; s < NSIDES; s++)
			ratio[i][s] = ir[s] > 0 ? ir[0] / ir[s] : 0;
		printf("%9zu %10llu %12.0f %12.0f %12.0f %8.2fx %8.2fx\n", sizes[i],
		       (unsigned long long)dispatched, ir[0], ir[1], ir[2], ratio[i][1], ratio[i][2]);
	}
	printf("\n");
	for (size_t i = 0; i < NSIZES; i++)
		if (ok[i][0] && ok[i][1])
			printf("ratio dispatch_instr_%s qsm/mux %.2f\n", size_names[i], ratio[i][1]);
	for (size_t i = 0; i < NSIZES; i++)
		if (ok[i][0] && ok[i][2])
			printf("ratio dispatch_instr_%s qsm/bare_switch %.2f\n", size_names[i], ratio[i][2]);
}

int main(int argc, char **argv)
{
	uint64_t total = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
	double ratio[NSIZES][NSIDES];
	bool ok[NSIZES] = { 0 };
	struct result qsm_best[NSIZES];
	const char *only = getenv("BENCH_ONLY");

	if (argc == 5 && !strcmp(argv[1], BENCH_INSTR_ARG))
		return instr_child(argv);
	printf("rdma-qsm dispatch benchmark: a CM event from a fake librdmacm through the rdmacm\n"
	       "fabric, ctx -> machine -> handler, against a same-work hand-written rdma_cm loop (mux)\n"
	       "and a bare switch (a floor) on the same fake, same cycle, same run; best of 3;\n"
	       "%llu events per row\n\n", (unsigned long long)total);
	if (only && !strcmp(only, "instr"))
		goto instr;
	printf("%9s %9s %9s %9s %8s %8s %9s %9s %9s\n", "queues", "qsm ns", "mux ns", "switch ns",
	       "qsm/mux", "qsm/sw", "qsm B/q", "mux B/q", "sw B/q");
	for (size_t i = 0; i < NSIZES; i++) {
		uint64_t cycles = cycles_for(sizes[i], total);
		struct result best[NSIDES];

		ok[i] = true;
		for (size_t s = 0; s < NSIDES; s++)
			best[s].ns_per_event = 1e18;
		for (int rep = 0; rep < 3; rep++)
			for (size_t s = 0; s < NSIDES; s++) {
				struct result r = sides[s].run(sizes[i], cycles, 0);

				ok[i] &= r.ok;
				if (r.ns_per_event < best[s].ns_per_event)
					best[s] = r;
			}
		for (size_t s = 0; s < NSIDES; s++)
			ratio[i][s] = best[0].ns_per_event / best[s].ns_per_event;
		qsm_best[i] = best[0];
		printf("%9zu %9.1f %9.1f %9.1f %7.2fx %7.2fx %9.0f %9.0f %9.0f\n", sizes[i],
		       best[0].ns_per_event, best[1].ns_per_event, best[2].ns_per_event, ratio[i][1],
		       ratio[i][2], best[0].bytes_per_queue, best[1].bytes_per_queue,
		       best[2].bytes_per_queue);
	}
	printf("\nAll sides take the same CM events from the same fake librdmacm (each call answered\n"
	       "at once; DRAINED from the drain's marker on the CQ; RETRY from the side's own timer),\n"
	       "make the same librdmacm and verbs calls and call the same ULP handlers (%llu calls).\n"
	       "qsm: the rdmacm fabric (epoll, the CM channel, the CQ pool) under the runtime.\n"
	       "mux: an rdma_cm loop by hand: epoll over the CM and CQ channels, one FIFO ring, a step\n"
	       "timeout per transient state in a lazy min-heap re-armed on every state change,\n"
	       "reconnect backoff with jitter, per-event counters, a stale check by id generation;\n"
	       "it reads the clock once per pass. bare switch: none of that (a floor, not the\n"
	       "comparison).\n", (unsigned long long)ulp_handler_calls);
	/* one line per figure, for whoever compares runs; none for a run whose checks failed */
	for (size_t i = 0; i < NSIZES; i++)
		if (ok[i])
			printf("ratio dispatch_%s qsm/mux %.2f\n", size_names[i], ratio[i][1]);
	for (size_t i = 0; i < NSIZES; i++)
		if (ok[i])
			printf("ratio dispatch_%s qsm/bare_switch %.2f\n", size_names[i], ratio[i][2]);
	for (size_t i = 0; i < NSIZES; i++)
		failed |= !ok[i];
	/* The runtime's share (qsm B/q above: malloc'd per qsm_conn_new, the class's table spread
	 * over the queues) and the rdmacm fabric's for a QP of the caps the runtime asked for
	 * (qsm_rc_qp_bytes: the id, its QP-table entry, the rings rounded up to a power of two;
	 * the list of WRs a post builds is the fabric's, one for all QPs; what librdmacm, the provider and the kernel
	 * hold is not counted). */
	for (size_t i = 0; i < NSIZES; i++)
		printf("bytes_per_queue %s runtime %.0f fabric %zu (rdmacm, QP of %u/%u WRs)\n",
		       size_names[i], qsm_best[i].bytes_per_queue, qsm_best[i].fabric_bytes_per_queue,
		       qsm_best[i].qp_send_wr, qsm_best[i].qp_recv_wr);
	/* What the runtime holds per queue once it lives: malloc's count over N queues, from
	 * before the first qsm_conn_new to after every queue is connecting (its address asked)
	 * and the ctx settled (its struct, its timer's heap slot, the FIFO trimmed back), less the
	 * fabric's ids: not sizeof. */
	for (size_t i = 0; i < NSIZES; i++)
		printf("bytes per queue %s %.0f\n", size_names[i], qsm_best[i].bytes_connected);
	timers_timed(total);
	fflush(stdout);
instr:
	if (instr_available()) {
		instructions();
		timers_instr();
	} else
		printf("\n(valgrind not found: no instruction counts)\n");
	if (failed)
		fprintf(stderr, "bench/dispatch: a run's checks failed: no ratio printed for it\n");
	return failed ? 1 : 0;
}
