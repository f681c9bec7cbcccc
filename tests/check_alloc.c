/* rdma-qsm: no event lost to memory pressure (issue 15).  Every Nth malloc, calloc or realloc of
 * the library's fails, for N swept (the sim's own are left alone: qsm_sim_allocating), while a
 * world of queues connects, loses its device, gets it back, disconnects, and listeners come and
 * go.  What may fail is an operation (a creation, a QP, an id, a downcall: -ENOMEM to its
 * caller, a retry); no event may be lost: once memory is back every queue ends in the state its
 * calls ask for (LIVE, CLOSED, or IDLE if its connect never took), the listener LISTENING, the
 * device not held in REMOVING, no orphan, the ctxs took what the sim delivered and accounted for
 * all of it, and once everything is destroyed the sim holds nothing. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/ctx.h>
#include <qsm/sim.h>

#include "fabric/sim/world.h"
#include "check_main.h"
#include "harness.h"

#define MS 1000000ull
#define NQ 120
#define ROUNDS 4
#define PORT 4420
#define CHURN_PORT 4421           /* the listeners that come and go: nothing connects to them */

/* ---- the injection: -Wl,--wrap for the allocators and for the harness's dispatch ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
int __real_qsm_ctx_dispatch(struct qsm_ctx *ctx, unsigned int budget);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
int __wrap_qsm_ctx_dispatch(struct qsm_ctx *ctx, unsigned int budget);

static unsigned every;       /* 0: nothing fails */
static unsigned in_lib;      /* inside a call into the library: a dispatch, or LIB() */
static int lib_ret;
static unsigned long allocs, nfailed;

/* A call of this file's into the library, its allocations failed as a dispatch's are. */
#define LIB(call) (in_lib++, lib_ret = (call), in_lib--, lib_ret)

/* Only the library's allocations fail: not Check's (linked in statically), not the sim's
 * (it says when it allocates: qsm_sim_allocating); the harness and this file make none. */
static bool fail_now(void)
{
	return in_lib && !qsm_sim_allocating && ++allocs && every && allocs % every == 0 && ++nfailed;
}

void *__wrap_malloc(size_t n)
{
	return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
	return fail_now() ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
	return fail_now() ? NULL : __real_realloc(p, n);
}

int __wrap_qsm_ctx_dispatch(struct qsm_ctx *ctx, unsigned int budget)
{
	int r;

	in_lib++;
	r = __real_qsm_ctx_dispatch(ctx, budget);
	in_lib--;
	return r;
}

/* ---- the world ---- */

static struct qsm_sim *sim;
static struct qsm_fabric *cfab, *sfab;
static struct qsm_ctx *cctx, *sctx;
static struct harness world;
static struct qsm_listener *listener, *churn;
static struct qsm_conn *q[NQ];
static bool connecting[NQ];       /* its connect was taken: it ends LIVE (or CLOSED) */
static bool closing[NQ];          /* its disconnect was taken: it ends CLOSED, released */
static bool released[NQ];         /* CLOSED: released and freed */

/* Handlers: they allocate nothing of their own, and a downcall's -ENOMEM is legal (the
 * queue's step timeout ends what it would have ended). */
static int h_ready(struct qsm_conn *c, const struct qsm_event_info *ev)
{
	(void)ev;
	(void)qsm_conn_ready(c);
	return 0;
}

static int h_request(struct qsm_conn *c, const struct qsm_event_info *ev)
{
	(void)ev;
	(void)qsm_conn_accept(c, "rep", 3);
	return 0;
}

static void h_release(struct qsm_conn *c)
{
	for (int i = 0; i < NQ; i++)
		if (q[i] == c) {
			released[i] = true;
			q[i] = NULL;
		}
}

static const struct qsm_class cls = {
	.name = "alloc",
	.release = h_release,
	.active[QSM_CM_CONNECTED] = { .enter = h_ready },
	.passive[QSM_ACCEPT_REQUESTED] = { .enter = h_request },
	.passive[QSM_ACCEPT_CONNECTED] = { .enter = h_ready },
};

/* The device's address (NULL: the wildcard) and a port. */
static struct sockaddr_in addr_of(const char *ip, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	if (ip)
		inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static struct qsm_ctx *new_ctx(struct qsm_fabric **fab)
{
	struct qsm_ctx *c;
	struct qsm_ctx_opts o = { .now_ns = harness_clock, .now_arg = &world, .seed = 11 };

	ck_assert_int_eq(qsm_sim_fabric_new(sim, fab), 0);
	o.fabric = *fab;
	ck_assert_int_eq(qsm_ctx_new(&o, &c), 0);
	return c;
}

/* A listener on CHURN_PORT of the wildcard (it may be made while the device is gone) goes if there is one, else one is made: either may fail for memory
 * (then it is as it was); a failed creation leaves nothing behind. */
static void churn_listener(void)
{
	struct sockaddr_in a = addr_of(NULL, CHURN_PORT);
	struct qsm_listener_opts lo = { .addr = (struct sockaddr *)&a, .cls = &cls };
	int r;

	if (churn) {
		r = LIB(qsm_listener_destroy(churn));
		ck_assert_msg(r == 0 || r == -ENOMEM, "listener_destroy: %d", r);
		if (r == 0)
			churn = NULL;
	} else {
		r = LIB(qsm_listener_new(sctx, &lo, &churn));
		ck_assert_msg(r == 0 || r == -ENOMEM, "listener_new: %d", r);
		if (r < 0)
			churn = NULL;
	}
}

/* Queue i made (it may not be: memory) and asked to connect (it may not take: memory). */
static void new_queue(int i)
{
	struct sockaddr_in a = addr_of("192.0.2.1", PORT);
	struct qsm_conn_opts co = { .cls = &cls, .dst = (struct sockaddr *)&a,
				    .private_data = "req", .private_data_len = 3,
				    .policy = { .max_exhausted = UINT32_MAX } };
	int r = LIB(qsm_conn_new(cctx, &co, &q[i]));

	ck_assert_msg(r == 0 || r == -ENOMEM, "conn_new: %d", r);
	if (r < 0) {
		q[i] = NULL;
		return;
	}
	r = LIB(qsm_conn_connect(q[i]));
	ck_assert_msg(r == 0 || r == -ENOMEM, "connect: %d", r);
	connecting[i] = r == 0;
}

/* What an injection run lost, observed once memory is back and everything had time to end. */
static unsigned lost(char *why, size_t len)
{
	struct qsm_counters k;
	struct qsm_ctx *ctxs[2] = { cctx, sctx };
	struct qsm_sim_stats st;
	unsigned n = 0, stuck = 0, orphans = 0, live = 0, idle = 0, closed = 0;
	uint64_t taken = 0;

	for (int i = 0; i < NQ; i++) {
		int want = connecting[i] ? QSM_CM_LIVE : QSM_CM_IDLE;

		if (released[i] != closing[i]) {
			printf("  queue %d %s\n", i, released[i] ? "released unasked" : "not released");
			stuck++;
		} else if (q[i] && qsm_conn_state(q[i]) != want) {
			printf("  queue %d in %s\n", i, qsm_conn_state_name(q[i]));
			stuck++;   /* an event it waited for never came */
		}
		live += q[i] && qsm_conn_state(q[i]) == QSM_CM_LIVE;
		idle += q[i] && qsm_conn_state(q[i]) == QSM_CM_IDLE;
		closed += released[i];
	}
	n += stuck;
	if (qsm_listener_state(listener) != QSM_LISTENER_LISTENING)
		n++;
	if (churn && qsm_listener_state(churn) != QSM_LISTENER_LISTENING)
		n++;
	if (qsm_sim_device_state(sim, "sim0") == QSM_SIM_DEVICE_REMOVING)
		n++;   /* a DEVICE_REMOVAL some object never heard: the device is held */
	for (int c = 0; c < 2; c++) {
		ck_assert_int_eq(qsm_ctx_counters(ctxs[c], &k, sizeof(k)), 0);
		orphans += (unsigned)k.orphans;   /* the listener of PORT never goes while memory is short */
		taken += k.fabric_events;
		ck_assert_uint_eq(k.popped + k.aborts + k.device_closes,
				  k.dispatched + k.dropped + k.completions);
	}
	n += orphans;
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(taken, st.events_delivered);
	snprintf(why, len, "%u live, %u closed, %u idle, %u stuck, listener %s, device %s, %u orphans",
		 live, closed, idle, stuck,
		 qsm_listener_state(listener) == QSM_LISTENER_LISTENING ? "listening" : "stuck",
		 qsm_sim_device_state(sim, "sim0") == QSM_SIM_DEVICE_REMOVING ? "held" : "free", orphans);
	return n;
}

static unsigned run_with(unsigned n)
{
	struct sockaddr_in a = addr_of("192.0.2.1", PORT);
	struct qsm_listener_opts lo = { .addr = (struct sockaddr *)&a, .cls = &cls };
	struct qsm_sim_stats st;
	char why[200];
	unsigned r;

	world = (struct harness){ .now_ns = 1000 * MS };
	ck_assert_int_eq(qsm_sim_new(&sim), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	cctx = new_ctx(&cfab);
	sctx = new_ctx(&sfab);
	world.ctx[0] = &cctx;
	world.ctx[1] = &sctx;
	ck_assert_int_eq(qsm_listener_new(sctx, &lo, &listener), 0);
	churn = NULL;
	memset(q, 0, sizeof(q));
	memset(connecting, 0, sizeof(connecting));
	memset(closing, 0, sizeof(closing));
	memset(released, 0, sizeof(released));
	allocs = nfailed = 0;
	every = n;
	/* ROUNDS times: a batch of queues joins while the device is up, it goes, the next batch
	 * joins while it is gone, it comes back, a third of the LIVE queues disconnect */
	for (int round = 0; round < ROUNDS; round++) {
		int first = round * NQ / ROUNDS, end = (round + 1) * NQ / ROUNDS, mid = (first + end) / 2;

		for (int i = first; i < mid; i++)
			new_queue(i);
		harness_run_for(&world, 3000);
		churn_listener();
		ck_assert_int_eq(LIB(qsm_sim_device_remove(sim, "sim0")), 0);
		for (int i = mid; i < end; i++)
			new_queue(i);
		harness_run_for(&world, 3000);
		churn_listener();
		ck_assert_int_eq(LIB(qsm_sim_device_add(sim, "sim0", "192.0.2.1")), 0);
		harness_run_for(&world, 5000);
		churn_listener();
		for (int i = round % 3; i < end; i += 3) {
			int d = q[i] ? LIB(qsm_conn_disconnect(q[i])) : -ENOENT;

			closing[i] |= d == 0;   /* -ENOMSG if not LIVE, -ENOMEM */
		}
		harness_run_for(&world, 3000);
	}
	every = 0;
	harness_run_for(&world, 120000);
	r = lost(why, sizeof(why));
	printf("alloc-fail every %u: events lost %u (%lu of %lu allocations failed; %s)\n",
	       n, r, nfailed, allocs, why);
	fflush(stdout);
	for (int i = 0; i < NQ; i++)
		if (q[i])
			ck_assert_int_eq(qsm_conn_destroy(q[i]), 0);
	ck_assert_int_eq(qsm_listener_destroy(listener), 0);
	if (churn)
		ck_assert_int_eq(qsm_listener_destroy(churn), 0);
	harness_run_for(&world, 30000);
	qsm_ctx_free(cctx);
	qsm_ctx_free(sctx);
	cctx = sctx = NULL;
	/* nothing left behind: no id, QP or device reference an event never came to free */
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids_leaked, 0);
	ck_assert_uint_eq(st.qps, 0);
	ck_assert_uint_eq(st.device_refs, 0);
	qsm_sim_free(sim);
	return r;
}

START_TEST(test_no_event_lost_to_memory_pressure)
{
	static const unsigned sweep[] = { 0, 3, 5, 7, 13, 50, 200, 1000 };
	unsigned total = 0;

	for (size_t i = 0; i < sizeof(sweep) / sizeof(sweep[0]); i++)
		total += run_with(sweep[i]);
	ck_assert_msg(total == 0, "%u events lost over the sweep", total);
}
END_TEST

static Suite *alloc_suite(void)
{
	Suite *s = suite_create("alloc");
	TCase *t = tcase_create("inject");

	tcase_set_timeout(t, 120);
	tcase_add_test(t, test_no_event_lost_to_memory_pressure);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(alloc_suite)
