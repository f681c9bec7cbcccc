/* rdma-qsm benchmark: cost of one event through ctx -> generated machine -> handler, against
 * a same-work hand-written multiplexer (bench/mux.c) and a bare switch, same stream, same run. */
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dispatch.h"
#include "instr.h"

/*
 * The stream: every queue goes round one reconnect cycle after another, queues interleaved
 * round-robin (so 100,000 queues walk 100,000 queue objects between two events of one):
 *   ADDR_RESOLVING -ADDR_RESOLVED-> ROUTE_RESOLVING -ROUTE_RESOLVED-> CONNECTING
 *   -ESTABLISHED-> CONNECTED (handler: READY -> LIVE) -DISCONNECTED-> DRAINING
 *   -TIMEWAIT_EXIT-> DRAINING -DRAINED-> RECONNECT_WAIT -RETRY-> ADDR_RESOLVING
 * 7 events from the fabric, plus the READY the handler posts: 8 dispatches per cycle.
 */
const int bench_cycle[] = {
	QSM_EV_ADDR_RESOLVED, QSM_EV_ROUTE_RESOLVED, QSM_EV_ESTABLISHED, QSM_EV_DISCONNECTED,
	QSM_EV_TIMEWAIT_EXIT, QSM_EV_DRAINED, QSM_EV_RETRY,
};
#define CYCLE_LEN (sizeof(bench_cycle) / sizeof(bench_cycle[0]))
const size_t bench_cycle_len = CYCLE_LEN;

int stream_next(struct stream *s, size_t *queue, int *event)
{
	if (s->next == s->end)
		return -EAGAIN;
	*queue = s->next % s->nqueues;
	*event = bench_cycle[(s->next / s->nqueues) % CYCLE_LEN];
	s->next++;
	return 0;
}

/* ---- the fabric replays the stream; every other call succeeds and costs nothing ---- */

static int replay_get_event(struct qsm_fabric *f, struct qsm_fabric_event *ev,
			    struct qsm_fabric_cqe *cqe, int max)
{
	struct bench_fabric *b = bf_of(f);
	size_t q;
	int e;

	if (stream_next(b->source, &q, &e) < 0)
		return -EAGAIN;
	ev->event = e;
	ev->status = 0;
	/* RETRY stands for the ctx's own timer: it comes on no id */
	ev->id = e == QSM_EV_RETRY ? NULL : &b->ids[q];
	ev->owner = b->ids[q].owner;
	ev->private_data_len = 0;
	(void)cqe;
	(void)max;
	return 0;
}

static struct qsm_fabric_ops replay_ops;

/* bench_noop_ops with the stream's get_event; before the first fabric */
static void replay_ops_init(void)
{
	replay_ops = bench_noop_ops;
	replay_ops.name = "replay";
	replay_ops.get_event = replay_get_event;
}

struct bench_fabric *replay_fabric_new(size_t nqueues, size_t (*index_of)(void *owner), struct stream *s)
{
	return bench_fabric_new(nqueues, index_of, &replay_ops, s);
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

/* An owner is its queue (see src/queue/queue.h); the queue's user pointer carries its index. */
static size_t qsm_index_of(void *owner)
{
	return (size_t)(uintptr_t)qsm_conn_user(owner);
}

/* One side's objects: the fabric replaying `s`, the ctx, its queues made from `tmpl`, every
 * queue connected and the ctx settled. */
struct qsm_run {
	struct stream s;
	struct bench_fabric *b;
	struct qsm_ctx *ctx;
	struct qsm_conn **qs;
	double bytes_per_queue;          /* malloc'd by qsm_conn_new */
	double bytes_connected;          /* ... and once connected and settled (its timer in the
	                                    heap, the FIFO trimmed, all the ctx keeps per queue) */
};

static void qsm_run_start(struct qsm_run *r, size_t nqueues, const struct qsm_conn_opts *tmpl,
			  uint64_t (*clock)(void *arg))
{
	struct mallinfo2 m0, m1;

	r->s = (struct stream){ .nqueues = nqueues };
	r->b = replay_fabric_new(nqueues, qsm_index_of, &r->s);
	r->qs = malloc(nqueues * sizeof(*r->qs));
	if (!r->qs || qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = &r->b->f, .now_ns = clock }, &r->ctx) < 0)
		abort();
	memset(&bench_qp_asked, 0, sizeof(bench_qp_asked));
	m0 = mallinfo2();
	for (size_t i = 0; i < nqueues; i++) {
		struct qsm_conn_opts o = *tmpl;

		o.user = (void *)(uintptr_t)i;
		if (qsm_conn_new(r->ctx, &o, &r->qs[i]) < 0)
			abort();
		r->b->ids[i].owner = r->qs[i];
	}
	m1 = mallinfo2();
	r->bytes_per_queue = (double)(m1.uordblks - m0.uordblks) / (double)nqueues;
	for (size_t i = 0; i < nqueues; i++)
		qsm_conn_connect(r->qs[i]);
	while (qsm_ctx_dispatch(r->ctx, 4096) > 0) {
	}
	qsm_ctx_dispatch(r->ctx, 4096);   /* a pass with nothing queued: the FIFO trimmed */
	r->bytes_connected = (double)(mallinfo2().uordblks - m0.uordblks) / (double)nqueues;
}

static uint64_t qsm_dispatched(struct qsm_ctx *ctx)
{
	struct qsm_counters c;

	qsm_ctx_counters(ctx, &c, sizeof(c));
	if (c.unexpected)
		fprintf(stderr, "bench: %llu unexpected events\n", (unsigned long long)c.unexpected);
	return c.dispatched;
}

static void qsm_run_end(struct qsm_run *r, const char *what, uint64_t events, uint64_t ns)
{
	if (getenv("BENCH_DEBUG")) {
		struct qsm_counters c;

		qsm_ctx_counters(r->ctx, &c, sizeof(c));
		fprintf(stderr, "qsm%s: %zu queues: %llu events, %.3f s, popped %llu dropped %llu\n", what,
			r->s.nqueues, (unsigned long long)events, (double)ns / 1e9,
			(unsigned long long)c.popped, (unsigned long long)c.dropped);
	}
	qsm_ctx_free(r->ctx);
	free(r->qs);
}

static struct sockaddr_in bench_dst = { .sin_family = AF_INET };

static struct result run_qsm(size_t nqueues, uint64_t events, int instr)
{
	const struct qsm_conn_opts tmpl = {
		.cls = &bench_class, .dst = (struct sockaddr *)&bench_dst,
		.policy = { .initial_delay_ms = 3600000, .max_delay_ms = 3600000, .jitter_pct = 10 },
		.timeouts = { .resolve_ms = 3600000, .connect_ms = 3600000, .drain_ms = 3600000 },
	};
	struct qsm_run run;
	struct result r = { 0 };
	uint64_t t0, ns, before;

	qsm_run_start(&run, nqueues, &tmpl, NULL);
	run.s.end = events;
	before = qsm_dispatched(run.ctx);
	t0 = measure_start(instr);
	while (qsm_ctx_dispatch(run.ctx, 4096) > 0) {
	}
	ns = measure_stop(instr, t0);
	r.events = qsm_dispatched(run.ctx) - before;
	r.ns_per_event = r.events ? (double)ns / (double)r.events : 0;
	r.bytes_per_queue = run.bytes_per_queue;
	r.bytes_connected = run.bytes_connected;
	r.qp_send_wr = bench_qp_asked.max_send_wr;
	r.qp_recv_wr = bench_qp_asked.max_recv_wr;
	r.fabric_bytes_per_queue = r.qp_send_wr || r.qp_recv_wr ?
				   bench_rdmacm_qp_bytes(r.qp_send_wr, r.qp_recv_wr) : 0;
	qsm_run_end(&run, "", r.events, ns);
	return r;
}

uint64_t bench_vclock_ns;

static uint64_t qsm_vclock(void *arg)
{
	(void)arg;
	return bench_vclock_ns;
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
	qsm_run_start(&run, nqueues, &tmpl, qsm_vclock);
	before = qsm_dispatched(run.ctx);
	t0 = measure_start(instr);
	for (uint64_t k = 0; k < rounds; k++) {
		int ms = qsm_ctx_next_timeout_ms(run.ctx);

		bench_vclock_ns += (uint64_t)(ms > 0 ? ms : 1) * 1000000ull;
		while (qsm_ctx_dispatch(run.ctx, 4096) > 0) {
		}
	}
	ns = measure_stop(instr, t0);
	r.events = qsm_dispatched(run.ctx) - before;
	r.ns_per_event = r.events ? (double)ns / (double)r.events : 0;
	r.bytes_per_queue = run.bytes_per_queue;
	qsm_run_end(&run, " timers", r.events, ns);
	return r;
}

/* ---- the floor: one event channel, one switch, one state enum per connection; no timers,
 * no FIFO, no accounting: less work than either multiplexer, shown, not compared ---- */

enum sw_state { SW_ADDR, SW_ROUTE, SW_CONNECTING, SW_CONNECTED, SW_LIVE, SW_DRAINING, SW_WAIT, SW_CLOSED };

struct sw_conn {
	enum sw_state state;
	struct qsm_fid *cm_id;
	int (*on_connected)(struct sw_conn *c);
	int (*on_live)(struct sw_conn *c);
	uint32_t attempts;
	uint64_t retry_at;
	unsigned unexpected;
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

/* The same no-op fabric calls qsm makes, so both sides do the same work on the fabric. */
static const struct qsm_fabric_ops *volatile sw_ops = &replay_ops; /* a real indirect call */
static const struct qsm_fabric_qp_attr sw_qp = { .max_send_wr = 64, .max_recv_wr = 64,
						       .max_send_sge = 1, .max_recv_sge = 1 };

/* The rdma_cm event handler everyone writes: switch on the event, then on the state. */
static void sw_handle(struct sw_conn *c, int event)
{
	switch (event) {
	case QSM_EV_ADDR_RESOLVED:
		if (c->state == SW_ADDR) {
			c->state = SW_ROUTE;
			sw_ops->resolve_route(c->cm_id, 2000);
		} else {
			c->unexpected++;
		}
		break;
	case QSM_EV_ROUTE_RESOLVED:
		if (c->state == SW_ROUTE) {
			c->state = SW_CONNECTING;
			if (sw_ops->create_qp(c->cm_id, &sw_qp) == 0)
				sw_ops->connect(c->cm_id, NULL, 0);
		} else {
			c->unexpected++;
		}
		break;
	case QSM_EV_ESTABLISHED:
		if (c->state == SW_CONNECTING) {
			c->state = SW_CONNECTED;
			c->attempts = 0;
			if (c->on_connected(c))
				c->state = SW_CLOSED;
		} else {
			c->unexpected++;
		}
		break;
	case QSM_EV_DISCONNECTED:
		if (c->state == SW_CONNECTED || c->state == SW_LIVE) {
			c->state = SW_DRAINING;
			sw_ops->disconnect(c->cm_id);
			sw_ops->drain(c->cm_id);
		} else if (c->state != SW_DRAINING)
			c->unexpected++;
		break;
	case QSM_EV_TIMEWAIT_EXIT:
		if (c->state != SW_DRAINING)
			c->unexpected++;
		break;
	case QSM_EV_DRAINED:
		if (c->state == SW_DRAINING) {
			sw_ops->destroy_id(c->cm_id);
			c->state = SW_WAIT;
			c->attempts++;
			c->retry_at = 1;
		} else {
			c->unexpected++;
		}
		break;
	case QSM_EV_RETRY:
		if (c->state == SW_WAIT) {
			c->state = SW_ADDR;
			sw_ops->resolve_addr(c->cm_id, NULL, NULL, 2000);
		} else
			c->unexpected++;
		break;
	default:
		c->unexpected++;
	}
}

static int (*volatile sw_get_event)(struct stream *s, size_t *q, int *e) = stream_next;

static struct result run_switch(size_t nqueues, uint64_t events, int instr)
{
	struct sw_conn *cs;
	struct stream s = { .nqueues = nqueues, .end = events };
	struct mallinfo2 m0, m1;
	struct result r;
	uint64_t t0, ns, n = 0, unexpected = 0;
	size_t q;
	int e;

	m0 = mallinfo2();
	cs = calloc(nqueues, sizeof(*cs));
	m1 = mallinfo2();
	for (size_t i = 0; i < nqueues; i++)
		cs[i] = (struct sw_conn){ .state = SW_ADDR, .on_connected = sw_connected, .on_live = sw_live,
					  .cm_id = (struct qsm_fid *)&cs[i] };
	t0 = measure_start(instr);
	while (sw_get_event(&s, &q, &e) == 0) {
		sw_handle(&cs[q], e);
		n++;
	}
	ns = measure_stop(instr, t0);
	for (size_t i = 0; i < nqueues; i++)
		unexpected += cs[i].unexpected;
	if (unexpected)
		fprintf(stderr, "baseline: %llu unexpected events\n", (unsigned long long)unexpected);
	/* the baseline's READY costs nothing: count it as qsm counts its dispatch */
	r.events = n + n / CYCLE_LEN;
	r.ns_per_event = r.events ? (double)ns / (double)r.events : 0;
	r.bytes_per_queue = (double)(m1.uordblks - m0.uordblks) / (double)nqueues;
	free(cs);
	return r;
}

typedef struct result (*run_fn)(size_t nqueues, uint64_t events, int instr);

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

/* Whole cycles of every queue, at least one. */
static uint64_t fabric_events(size_t nq, uint64_t total)
{
	uint64_t cycles = total / (CYCLE_LEN * nq) ? total / (CYCLE_LEN * nq) : 1;

	return cycles * CYCLE_LEN * nq;
}

/* `dispatch --instr SIDE NQUEUES EVENTS`: one side alone, counted under callgrind. */
static int instr_child(char **argv)
{
	for (size_t i = 0; i < NSIDES; i++)
		if (!strcmp(argv[2], sides[i].name)) {
			sides[i].run(strtoul(argv[3], NULL, 10), strtoull(argv[4], NULL, 10), 1);
			return 0;
		}
	for (size_t i = 0; i < 2; i++)
		if (!strcmp(argv[2], timer_sides[i].name)) {
			timer_sides[i].run(strtoul(argv[3], NULL, 10), strtoull(argv[4], NULL, 10), 1);
			return 0;
		}
	return 2;
}

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
	printf("ratio dispatch_timer_instr qsm/mux %.2f\n", ir[1] > 0 ? ir[0] / ir[1] : 0);
}

static void instructions(void)
{
	double ratio[NSIZES][NSIDES];

	printf("\nInstructions per event under callgrind (each side alone in a child, only its\n"
	       "measured loop counted; the stable CPU figure on this VM):\n\n");
	printf("%9s %10s %12s %12s %12s %9s %9s\n", "queues", "events", "qsm Ir/ev", "mux Ir/ev",
	       "switch Ir/ev", "qsm/mux", "qsm/sw");
	for (size_t i = 0; i < NSIZES; i++) {
		/* enough for a stable count, few enough for valgrind: 10 cycles, or one of 100k */
		uint64_t ev = fabric_events(sizes[i], 70000), dispatched = ev + ev / CYCLE_LEN;
		double ir[NSIDES];

		for (size_t s = 0; s < NSIDES; s++)
			ir[s] = (double)instr_count(sides[s].name, sizes[i], ev) / (double)dispatched;
		for (size_t s = 0; s < NSIDES; s++)
			ratio[i][s] = ir[s] > 0 ? ir[0] / ir[s] : 0;
		printf("%9zu %10llu %12.0f %12.0f %12.0f %8.2fx %8.2fx\n", sizes[i],
		       (unsigned long long)dispatched, ir[0], ir[1], ir[2], ratio[i][1], ratio[i][2]);
	}
	printf("\n");
	for (size_t i = 0; i < NSIZES; i++)
		printf("ratio dispatch_instr_%s qsm/mux %.2f\n", size_names[i], ratio[i][1]);
	for (size_t i = 0; i < NSIZES; i++)
		printf("ratio dispatch_instr_%s qsm/bare_switch %.2f\n", size_names[i], ratio[i][2]);
}

int main(int argc, char **argv)
{
	uint64_t total = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
	double ratio[NSIZES][NSIDES];
	struct result qsm_best[NSIZES];

	replay_ops_init();
	if (argc == 5 && !strcmp(argv[1], BENCH_INSTR_ARG))
		return instr_child(argv);
	printf("rdma-qsm dispatch benchmark: ctx -> machine -> handler, against a same-work\n"
	       "hand-written multiplexer (mux) and a bare switch (a floor), same event stream,\n"
	       "same run; best of 3; %llu events per row\n\n", (unsigned long long)total);
	printf("%9s %9s %9s %9s %8s %8s %9s %9s %9s\n", "queues", "qsm ns", "mux ns", "switch ns",
	       "qsm/mux", "qsm/sw", "qsm B/q", "mux B/q", "sw B/q");
	for (size_t i = 0; i < NSIZES; i++) {
		uint64_t ev = fabric_events(sizes[i], total);
		struct result best[NSIDES];

		for (size_t s = 0; s < NSIDES; s++)
			best[s].ns_per_event = 1e18;
		for (int rep = 0; rep < 3; rep++)
			for (size_t s = 0; s < NSIDES; s++) {
				struct result r = sides[s].run(sizes[i], ev, 0);

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
	printf("\nAll sides take the same events from the same replaying fabric, make the same\n"
	       "(no-op) fabric calls and call the same ULP handlers (%llu calls).\n"
	       "mux: one FIFO ring, a step timeout per transient state in a lazy min-heap re-armed\n"
	       "on every state change, reconnect backoff with jitter, per-event counters, a stale\n"
	       "check by id generation; it reads the clock once per pass. bare switch: none of\n"
	       "that (a floor, not the comparison).\n",
	       (unsigned long long)ulp_handler_calls);
	/* one line per figure, for whoever compares runs */
	for (size_t i = 0; i < NSIZES; i++)
		printf("ratio dispatch_%s qsm/mux %.2f\n", size_names[i], ratio[i][1]);
	for (size_t i = 0; i < NSIZES; i++)
		printf("ratio dispatch_%s qsm/bare_switch %.2f\n", size_names[i], ratio[i][2]);
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
	 * before the first qsm_conn_new to after every queue connected and the ctx settled (its
	 * struct, its timer's heap slot, the FIFO trimmed back): not sizeof. */
	for (size_t i = 0; i < NSIZES; i++)
		printf("bytes per queue %s %.0f\n", size_names[i], qsm_best[i].bytes_connected);
	timers_timed(total);
	fflush(stdout);
	if (instr_available()) {
		instructions();
		timers_instr();
	} else
		printf("\n(valgrind not found: no instruction counts)\n");
	return 0;
}
