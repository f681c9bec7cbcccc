/* rdma-qsm: one ctx per thread, two threads at once, built with -fsanitize=thread (make tsan).
 * The library promises that ctxs on different threads share nothing mutable (qsm(7): one ctx
 * per thread); a static in src/ that two ctxs write, or that one writes and one reads, is a data
 * race ThreadSanitizer reports here, with both stacks.
 *
 * Each thread has its own sim world, device, fabric and ctx (with a virtual clock of its own),
 * and runs ROUNDS rounds of: a listener and QUEUES active queues that connect to it, each side
 * registering memory and posting receives in qp_ready, every active queue sending MSGS messages
 * once LIVE and its passive peer receiving them, the device removed and added back while the
 * queues are live (every queue through the gap and back to LIVE, messages again), then every
 * active queue disconnects and closes, the listener and the passive queues go, the ctx is freed
 * and the world with it.  Every count is checked: a round that does not go the whole way fails,
 * so the test cannot pass on a scenario that stopped early.  Then one thread's qsm_ctx_call()s
 * into a ctx another thread runs (calls_across_threads).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/qsm.h>
#include <qsm/sim.h>

#define THREADS 2
#define ROUNDS 40
#define QUEUES 6
#define MSGS 4                  /* the receives the peer posted in qp_ready: the sim runs a send at once */
#define SLOT 64
#define MS 1000000ull

struct world {
	int id;
	uint64_t now_ns;
	struct qsm_sim *sim;
	struct qsm_ctx *ctx;
	char dev[16];
	unsigned live[2];               /* queues LIVE now: active, passive */
	unsigned sent, received, closed;   /* this round's */
	unsigned total;                 /* messages received in every round */
	const char *failed;
};

/* Each queue's buffers, with the queue (priv_size); its world is its user pointer (a passive
 * queue's: its listener's). */
struct ulp {
	struct qsm_mr *mr;
	uint8_t buf[4 * SLOT];
};

static uint64_t clock_now(void *arg)
{
	return ((struct world *)arg)->now_ns;
}

static struct world *world_of(struct qsm_conn *q)
{
	return qsm_conn_user(q);
}

static void post_recv(struct qsm_conn *q, unsigned slot)
{
	struct ulp *u = qsm_conn_priv(q);
	struct qsm_sge sge = { (uintptr_t)u->buf + slot * SLOT, SLOT, qsm_mr_lkey(u->mr) };

	(void)qsm_conn_post_recv(q, slot, &sge, 1);
}

/* The QP is there: memory (again after a removal: the old MR went with the device), receives. */
static int qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct ulp *u = qsm_conn_priv(q);

	(void)ev;
	if (!u->mr || !qsm_mr_valid(u->mr))
		if (qsm_conn_reg_mr(q, u->buf, sizeof(u->buf), QSM_ACCESS_LOCAL_WRITE, &u->mr) < 0)
			return -1;
	for (unsigned s = 0; s < 4; s++)
		post_recv(q, s);
	return 0;
}

static int device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	((struct ulp *)qsm_conn_priv(q))->mr = NULL;   /* released by the library right after */
	return 0;
}

static int live_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct ulp *u = qsm_conn_priv(q);
	struct world *w = world_of(q);

	(void)ev;
	w->live[qsm_conn_is_passive(q)]++;
	if (qsm_conn_is_passive(q))
		return 0;
	for (unsigned m = 0; m < MSGS; m++) {
		struct qsm_sge sge = { (uintptr_t)u->buf + 3 * SLOT, 16, qsm_mr_lkey(u->mr) };

		snprintf((char *)u->buf + 3 * SLOT, 16, "t%d m%u", w->id, m);
		if (qsm_conn_post_send(q, 100 + m, &sge, 1, m == MSGS - 1 ? QSM_POST_SIGNALED : 0) == 0)
			w->sent++;
	}
	return 0;
}

static int live_exit(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	world_of(q)->live[qsm_conn_is_passive(q)]--;
	return 0;
}

static int completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct world *w = world_of(q);

	if (wc->opcode == QSM_WR_RECV && wc->status == QSM_WC_SUCCESS) {
		struct ulp *u = qsm_conn_priv(q);
		char want[16];

		snprintf(want, sizeof(want), "t%d m", w->id);
		if (strncmp((char *)u->buf + wc->wr_id * SLOT, want, strlen(want)) != 0)
			w->failed = "a message of another thread's, or none";
		w->received++;
		post_recv(q, (unsigned)wc->wr_id);
	}
	return 0;
}

static void release(struct qsm_conn *q)
{
	world_of(q)->closed++;
}

static int requested(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	return qsm_conn_accept(q, NULL, 0);
}

static const struct qsm_class ulp_class = {
	.name = "tsan",
	.priv_size = sizeof(struct ulp),
	.active = {
		[QSM_CM_LIVE] = { .enter = live_enter, .exit = live_exit },
	},
	.passive = {
		[QSM_ACCEPT_REQUESTED] = { .enter = requested },
		[QSM_ACCEPT_LIVE] = { .enter = live_enter, .exit = live_exit },
	},
	.qp_ready = qp_ready,
	.device_removed = device_removed,
	.completion = completion,
	.release = release,
};

/* Dispatch until nothing is left now, then jump the clock to the next timer, up to @ms. */
static void run(struct world *w, unsigned ms)
{
	uint64_t end = w->now_ns + ms * MS;

	for (unsigned guard = 0; guard < 100000; guard++) {
		int t;

		while (qsm_ctx_dispatch(w->ctx, 0) > 0)
			;
		t = qsm_ctx_next_timeout_ms(w->ctx);
		if (t < 0 || w->now_ns + (uint64_t)(t ? t : 1) * MS > end)
			return;
		w->now_ns += (uint64_t)(t ? t : 1) * MS;
	}
	w->failed = "endless timers";
}

#define WANT(cond, what) do { if (!(cond)) { w->failed = (what); return; } } while (0)

static void one_round(struct world *w, unsigned round)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(4420) };
	struct qsm_fabric *f;
	struct qsm_listener *l;
	struct qsm_conn *q[QUEUES];
	struct qsm_sim_stats st;
	unsigned sent0;

	w->live[0] = w->live[1] = w->sent = w->received = w->closed = 0;
	inet_pton(AF_INET, "192.0.2.1", &sa.sin_addr);
	snprintf(w->dev, sizeof(w->dev), "sim%d", w->id);
	WANT(qsm_sim_new(&w->sim) == 0, "qsm_sim_new");
	WANT(qsm_sim_device_add(w->sim, w->dev, "192.0.2.1") == 0, "device_add");
	WANT(qsm_sim_fabric_new(w->sim, &f) == 0, "qsm_sim_fabric_new");
	WANT(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .seed = 1 + round, .now_ns = clock_now,
						.now_arg = w }, &w->ctx) == 0, "qsm_ctx_new");
	WANT(qsm_listener_new(w->ctx, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&sa,
						  .cls = &ulp_class, .user = w }, &l) == 0, "listener");
	for (int i = 0; i < QUEUES; i++) {
		WANT(qsm_conn_new(w->ctx, &(struct qsm_conn_opts){ .cls = &ulp_class, .dst = (struct sockaddr *)&sa,
						  .policy = { .initial_delay_ms = 10 }, .user = w }, &q[i]) == 0,
		     "conn_new");
		WANT(qsm_conn_connect(q[i]) == 0, "connect");
	}
	run(w, 1000);
	WANT(w->live[0] == QUEUES && w->live[1] == QUEUES, "not every queue LIVE");
	WANT(w->received == w->sent && w->sent == QUEUES * MSGS, "messages lost");
	/* the device goes and comes back: every queue through the gap, LIVE again */
	sent0 = w->sent;
	WANT(qsm_sim_device_remove(w->sim, w->dev) == 0, "device_remove");
	run(w, 100);
	WANT(w->live[0] == 0 && qsm_sim_device_state(w->sim, w->dev) == QSM_SIM_DEVICE_GONE, "removal held");
	WANT(qsm_sim_device_add(w->sim, w->dev, "192.0.2.1") == 0, "device_add again");
	run(w, 5000);
	WANT(w->live[0] == QUEUES && w->sent == sent0 + QUEUES * MSGS && w->received == w->sent,
	     "not every queue LIVE again after the removal, or messages lost");
	for (int i = 0; i < QUEUES; i++)
		WANT(qsm_conn_disconnect(q[i]) == 0, "disconnect");
	run(w, 10000);
	/* closed by themselves: the active queues now, their passive peers now and at the removal */
	WANT(w->live[0] == 0 && w->live[1] == 0 && w->closed == 3 * QUEUES, "still LIVE after disconnect, or not closed");
	WANT(qsm_listener_destroy(l) == 0, "listener_destroy");
	run(w, 1000);
	qsm_ctx_free(w->ctx);
	w->ctx = NULL;
	qsm_sim_get_stats(w->sim, &st);
	WANT(!st.ids && !st.qps && !st.mrs && !st.device_refs && !st.ids_leaked, "left in the sim");
	qsm_sim_free(w->sim);
	w->sim = NULL;
	w->total += w->received;
}

/* ---- qsm_ctx_call(): another thread's calls into a ctx that runs on its own thread ---- */

#define CALLS 2000

struct callee {
	struct qsm_sim *sim;
	struct qsm_ctx *ctx;
	struct qsm_conn *q;     /* made and destroyed by calls, on the ctx's thread */
	unsigned ran, queues;   /* the ctx's thread's alone */
	int run_rc;
};

static void call_step(struct qsm_ctx *ctx, void *arg, int status)
{
	struct callee *c = arg;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(4420) };

	if (status != 0)
		return;
	c->ran++;
	/* the library called on the ctx's objects from inside the call, as a handler would */
	if (!c->q) {
		inet_pton(AF_INET, "192.0.2.1", &sa.sin_addr);
		if (qsm_conn_new(ctx, &(struct qsm_conn_opts){ .cls = &ulp_class, .dst = (struct sockaddr *)&sa,
								.user = NULL }, &c->q) == 0)
			c->queues++;
	} else {
		qsm_conn_destroy(c->q);
		c->q = NULL;
	}
	if (c->ran == CALLS)
		qsm_ctx_stop(ctx);
}

static void *callee_main(void *arg)
{
	struct callee *c = arg;

	c->run_rc = qsm_ctx_run(c->ctx, 60000);
	return NULL;
}

/* CALLS calls from this thread into a ctx that another thread runs (qsm_ctx_run, asleep on its
 * fd between them): each runs there once, the last stops it. */
static int calls_across_threads(void)
{
	struct callee c = { 0 };
	struct qsm_fabric *f;
	pthread_t t;

	if (qsm_sim_new(&c.sim) || qsm_sim_device_add(c.sim, "simc", "192.0.2.1") ||
	    qsm_sim_fabric_new(c.sim, &f) || qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f }, &c.ctx))
		return fprintf(stderr, "tsan: calls: setup failed\n"), 1;
	if (pthread_create(&t, NULL, callee_main, &c) != 0)
		return 1;
	for (unsigned i = 0; i < CALLS; i++)
		if (qsm_ctx_call(c.ctx, call_step, &c) != 0)
			return fprintf(stderr, "tsan: calls: qsm_ctx_call failed\n"), 1;
	pthread_join(t, NULL);
	if (c.q)
		qsm_conn_destroy(c.q);
	qsm_ctx_free(c.ctx);
	qsm_sim_free(c.sim);
	if (c.run_rc != 0 || c.ran != CALLS || c.queues != CALLS / 2) {
		fprintf(stderr, "tsan: calls: run %d, %u of %d calls ran, %u queues made\n", c.run_rc, c.ran,
			CALLS, c.queues);
		return 1;
	}
	printf("tsan: %d calls from another thread ran on the ctx's thread, each once\n", CALLS);
	return 0;
}

static pthread_barrier_t start;   /* both threads run their rounds at once */

static void *thread_main(void *arg)
{
	struct world *w = arg;

	pthread_barrier_wait(&start);
	for (unsigned r = 0; r < ROUNDS && !w->failed; r++)
		one_round(w, r);
	return NULL;
}

int main(void)
{
	struct world w[THREADS];
	pthread_t t[THREADS];
	int failed = 0;

	pthread_barrier_init(&start, NULL, THREADS);
	for (int i = 0; i < THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		w[i].now_ns = 1000 * MS;
		if (pthread_create(&t[i], NULL, thread_main, &w[i]) != 0)
			return 1;
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		if (w[i].failed) {
			fprintf(stderr, "tsan: thread %d: %s\n", i, w[i].failed);
			failed = 1;
		} else {
			printf("tsan: thread %d: %d rounds of %d queues, LIVE, %u messages checked, "
			       "device removed and back, closed\n", i, ROUNDS, QUEUES, w[i].total);
		}
	}
	return failed | calls_across_threads();
}
