/* rdma-qsm: the pieces of the rdmacm fabric (src/fabric/rdmacm/) that need no RDMA device,
 * tested alone: how rdma_cm's events are named, the queue that must never lose a completion, the
 * CQ pool (on fake CQs: ibv_create_cq and its kin are wrapped, -Wl,--wrap) and its timer, and
 * the device monitor's parsers of uevents and rtnetlink messages. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <rdma/rdma_cma.h>

#include <qsm/events.h>

#include "fabric/rdmacm/cm_event.h"
#include "fabric/rdmacm/rdmacm.h"
#include "fabric/rdmacm/pending.h"

#include "check_main.h"

/* Every event this rdma-core defines, by name: librdmacm's own rdma_event_str() is the spec,
 * never the numbers, so the test cannot share a mistake with the mapping. */
START_TEST(test_every_known_cm_event_maps_to_the_qsm_event_of_its_name)
{
	int known = 0;

	for (int raw = 0; raw < 64; raw++) {
		const char *str = rdma_event_str((enum rdma_cm_event_type)raw);
		int ev = qsm_cm_event_map(raw);
		char want[64];

		if (strncmp(str, "RDMA_CM_EVENT_", 14) != 0) {
			/* librdmacm has no name for it: neither do we */
			ck_assert_int_eq(ev, QSM_EV_CM_UNKNOWN);
			continue;
		}
		known++;
		ck_assert_msg(qsm_event_name(ev) != NULL, "%s maps to %d, which has no name", str, ev);
		snprintf(want, sizeof(want), "RDMA_CM_EVENT_%s", qsm_event_name(ev));
		ck_assert_str_eq(want, str);
	}
	ck_assert_int_ge(known, RDMA_CM_EVENT_TIMEWAIT_EXIT + 1);
}
END_TEST

START_TEST(test_out_of_range_cm_event_maps_to_cm_unknown)
{
	const int raw[] = { -1, RDMA_CM_EVENT_TIMEWAIT_EXIT + 1, 95, 96, 1000, -1000, 0x7fffffff };

	for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
		int ev = qsm_cm_event_map(raw[i]);

		if (raw[i] >= 0 && raw[i] <= RDMA_CM_EVENT_TIMEWAIT_EXIT)
			continue;
		if (strncmp(rdma_event_str((enum rdma_cm_event_type)raw[i]), "RDMA_CM_EVENT_", 14) == 0)
			continue; /* a newer rdma-core knows it: the first test checks it */
		ck_assert_msg(ev == QSM_EV_CM_UNKNOWN, "raw %d maps to %d", raw[i], ev);
	}
	ck_assert_str_eq(qsm_event_name(QSM_EV_CM_UNKNOWN), "CM_UNKNOWN");
	ck_assert_int_lt(QSM_EV_CM_UNKNOWN, QSM_EV_LIMIT);
}
END_TEST

/* A stale-connection reject is its own event on IB and RoCE, whose status is the IB CM's
 * reason (IBTA table 112: 10); on iWARP the status is an errno, and 10 means nothing. */
START_TEST(test_stale_connection_reject_is_rejected_stale_on_ib_only)
{
	ck_assert_int_eq(qsm_cm_rejected(10, 0), QSM_EV_REJECTED_STALE);
	ck_assert_int_eq(qsm_cm_rejected(10, 1), QSM_EV_REJECTED);
	ck_assert_int_eq(qsm_cm_rejected(28, 0), QSM_EV_REJECTED);   /* consumer defined */
	ck_assert_int_eq(qsm_cm_rejected(8, 0), QSM_EV_REJECTED);    /* invalid service id */
	ck_assert_int_eq(qsm_cm_rejected(-ECONNREFUSED, 1), QSM_EV_REJECTED);
	ck_assert_str_eq(qsm_event_name(QSM_EV_REJECTED_STALE), "REJECTED_STALE");
}
END_TEST

/* ---- the pending queue: every WR that was posted completes exactly once ---- */

static char ID_A, ID_B, DEV;
#define FID(x) ((struct qsm_fid *)(void *)&(x))
#define FDEV(x) ((struct qsm_fdev *)(void *)&(x))

static bool readable(const struct qsm_pending_queue *q)
{
	struct pollfd pfd = { .fd = q->kfd, .events = POLLIN };

	return poll(&pfd, 1, 0) == 1;
}

/* As the fabric does: a WR's record is allocated when it is posted, and is its completion. */
START_TEST(test_completions_of_posted_wrs_survive_allocation_failures)
{
	struct qsm_pending_queue q;
	struct qsm_pending *rec[8], *p;
	int posted = 0;

	ck_assert_int_eq(qsm_pending_init(&q), 0);
	/* memory short at post time: every other post fails, and has nothing to complete */
	for (int i = 0; i < 8; i++) {
		qsm_pending_fail_allocs(i % 2);
		rec[posted] = qsm_pending_alloc(sizeof(*rec[posted]));
		if (rec[posted])
			rec[posted++]->wc.wr_id = (uint64_t)i;
	}
	ck_assert_int_eq(posted, 4);
	/* memory gone when the completions come: none of them may be lost */
	qsm_pending_fail_allocs(UINT_MAX);
	for (int i = 0; i < posted; i++) {
		struct qsm_fabric_wc wc = { .wr_id = rec[i]->wc.wr_id, .status = QSM_WC_SUCCESS,
					    .opcode = QSM_WR_RECV, .byte_len = 40 + (uint32_t)i };

		qsm_pending_complete(&q, rec[i], FID(ID_A), &wc);
	}
	/* an event that is not a completion may be lost, and says so */
	ck_assert_int_eq(qsm_pending_push_event(&q, QSM_EV_QP_FATAL, -EIO, FID(ID_A), NULL, false), -ENOMEM);
	ck_assert(readable(&q));
	for (int i = 0; i < posted; i++) {
		p = qsm_pending_pop(&q);
		ck_assert_ptr_nonnull(p);
		ck_assert_int_eq(p->event, QSM_EV_COMPLETION);
		ck_assert_ptr_eq(p->id, FID(ID_A));
		ck_assert_uint_eq(p->wc.wr_id, (uint64_t)(2 * i)); /* post order: 0, 2, 4, 6 */
		ck_assert_int_eq(p->wc.status, QSM_WC_SUCCESS);
		ck_assert_int_eq(p->wc.opcode, QSM_WR_RECV);
		ck_assert_uint_eq(p->wc.byte_len, 40 + (uint32_t)i);
		qsm_pending_release(p);
	}
	ck_assert_ptr_null(qsm_pending_pop(&q));
	ck_assert(!readable(&q));
	qsm_pending_fail_allocs(0);
	qsm_pending_fini(&q);
}
END_TEST

START_TEST(test_drop_releases_only_what_is_queued_for_that_id_or_device)
{
	struct qsm_pending_queue q;
	struct qsm_fabric_wc wc = { .wr_id = 9 };
	struct qsm_pending *p;

	ck_assert_int_eq(qsm_pending_init(&q), 0);
	qsm_pending_complete(&q, qsm_pending_alloc(sizeof(*p)), FID(ID_A), &wc);
	ck_assert_int_eq(qsm_pending_push_event(&q, QSM_EV_DRAINED, 0, FID(ID_B), NULL, false), 0);
	ck_assert_int_eq(qsm_pending_push_event(&q, QSM_EV_DEVICE_ADDED, 0, NULL, FDEV(DEV), false), 0);
	ck_assert_int_eq(qsm_pending_push_event(&q, QSM_EV_WC_ERROR, -EIO, FID(ID_A), NULL, false), 0);
	qsm_pending_drop(&q, FID(ID_A), NULL);
	p = qsm_pending_pop(&q);
	ck_assert_int_eq(p->event, QSM_EV_DRAINED);
	qsm_pending_release(p);
	qsm_pending_drop(&q, NULL, FDEV(DEV));
	ck_assert_ptr_null(qsm_pending_pop(&q));
	/* what is left at the end is released with the queue (ASan: no leak) */
	qsm_pending_complete(&q, qsm_pending_alloc(sizeof(*p)), FID(ID_B), &wc);
	qsm_pending_fini(&q);
}
END_TEST

/* ---- the CQ pool, on fake CQs ---- */

#define RXE_MAX_CQE 32768
#define WRS_64_64 (64 + 1 + 64 + 1)   /* a QP with the default caps, drain markers included */

static int cqs_alive, resizes, fail_resize, fail_create;
static unsigned acked;

static int fake_req_notify(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

static struct ibv_context fake_verbs = { .ops = { .req_notify_cq = fake_req_notify } };

struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *verbs, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector);
int __wrap_ibv_resize_cq(struct ibv_cq *cq, int cqe);
int __wrap_ibv_destroy_cq(struct ibv_cq *cq);
void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);

struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *verbs, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct ibv_cq *cq;

	(void)comp_vector;
	if (fail_create || cqe > RXE_MAX_CQE || !(cq = calloc(1, sizeof(*cq)))) {
		errno = ENOMEM;
		return NULL;
	}
	cq->context = verbs;
	cq->channel = channel;
	cq->cq_context = cq_context;
	cq->cqe = cqe;
	cqs_alive++;
	return cq;
}

int __wrap_ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	resizes++;
	if (cqe > RXE_MAX_CQE || fail_resize)
		return EINVAL;
	cq->cqe = cqe;
	return 0;
}

int __wrap_ibv_destroy_cq(struct ibv_cq *cq)
{
	cqs_alive--;
	free(cq);
	return 0;
}

void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	(void)cq;
	acked += nevents;
}

static struct qsm_fdev *pool_dev(unsigned max_cq)
{
	struct rc_fabric *f = calloc(1, sizeof(*f));
	struct qsm_fdev *d = calloc(1, sizeof(*d));

	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(d);
	d->fab = f;
	d->verbs = &fake_verbs;
	d->max_cqe = RXE_MAX_CQE;
	d->max_cq = max_cq;
	d->present = true;
	qsm_list_init(&d->cqs);
	qsm_list_init(&f->devs);
	qsm_list_add_tail(&f->devs, &d->node);
	/* a fabric with the device monitor: its timer armed only while something is due */
	f->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	f->uev_fd = f->rtnl_fd = -1;
	ck_assert_int_ge(f->tfd, 0);
	cqs_alive = resizes = fail_resize = fail_create = 0;
	return d;
}

/* What the device's resources' release would free: every CQ left in the pool. */
static void pool_dev_free(struct qsm_fdev *d)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &d->cqs) {
		struct rc_cq *c = qsm_container_of(pos, struct rc_cq, node);

		__wrap_ibv_destroy_cq(c->cq);
		free(c);
	}
	ck_assert_int_eq(cqs_alive, 0);
	close(d->fab->tfd);
	free(d->fab);
	free(d);
}

/* As on rxe (tests/vm/README.md, scale.sh): max_cqe 32768 holds 252 QPs of 64/64 WRs; 1000
 * take 4 CQs, none beyond it. */
START_TEST(test_cq_pool_places_1000_default_qps_on_4_cqs_and_frees_the_idle_extras)
{
	struct qsm_fdev *d = pool_dev(16);
	static struct rc_cq *on[1000];
	struct qsm_list *pos, *tmp;
	int err = 0, k = 0;

	for (int i = 0; i < 1000; i++) {
		on[i] = qsm_rc_cq_get(d, WRS_64_64, &err);
		ck_assert_msg(on[i] != NULL, "QP %d: %d", i, err);
	}
	ck_assert_uint_eq(d->ncqs, 4);
	ck_assert_int_eq(cqs_alive, 4);
	ck_assert_uint_eq(d->fab->cq_peak, 4);
	qsm_list_each(pos, tmp, &d->cqs) {
		struct rc_cq *c = qsm_container_of(pos, struct rc_cq, node);

		ck_assert_int_le(c->cap, RXE_MAX_CQE);
		ck_assert_int_le(c->need, c->cap);
		ck_assert_uint_eq(c->nqps, k < 3 ? 252 : 1000 - 3 * 252);
		ck_assert_int_eq(c->need, (int)c->nqps * WRS_64_64);
		k++;
	}
	/* the second CQ's QPs go: it stays, empty, until the idle trim */
	for (int i = 252; i < 504; i++)
		qsm_rc_cq_put(d, on[i], WRS_64_64);
	ck_assert_uint_eq(d->ncqs, 4);
	qsm_rc_cq_trim(d, CQ_IDLE_TICKS - 1);
	ck_assert_uint_eq(d->ncqs, 4);
	/* a new QP fills the room a departed one left on the first CQ before anything else */
	qsm_rc_cq_put(d, on[0], WRS_64_64);
	on[0] = qsm_rc_cq_get(d, WRS_64_64, &err);
	ck_assert_ptr_eq(on[0], on[1]);
	qsm_rc_cq_trim(d, 1);
	ck_assert_uint_eq(d->ncqs, 3);
	ck_assert_int_eq(cqs_alive, 3);
	ck_assert_uint_eq(d->fab->cq_idle_freed, 1);
	for (int i = 0; i < 1000; i++)
		if (i < 252 || i >= 504)
			qsm_rc_cq_put(d, on[i], WRS_64_64);
	/* idle: the extras go; the oldest CQ stays, empty, until the device's resources go */
	qsm_rc_cq_trim(d, CQ_IDLE_TICKS);
	ck_assert_uint_eq(d->ncqs, 1);
	ck_assert_int_eq(cqs_alive, 1);
	ck_assert_ptr_eq(qsm_container_of(d->cqs.next, struct rc_cq, node), on[1]);
	ck_assert_uint_eq(d->fab->cq_created - d->fab->cq_freed, 1);
	ck_assert_int_gt(resizes, 0);
	pool_dev_free(d);
}
END_TEST

/* A reconnect storm: 1000 default QPs connect, all go, all come back, 10 times, with up to
 * CQ_IDLE_TICKS - 1 device-list ticks in each gap.  The pool keeps its CQs across it: the 4 CQs
 * the peak needs are created once, grown once, and reused (before issue 15's fix: 31 created,
 * 30 freed).  Idle for CQ_IDLE_TICKS ticks it shrinks back to one; a device removal frees
 * every empty CQ at once, and each other as its last QP goes, with no tick. */
#define STORM_QPS 1000
#define STORM_ROUNDS 10

static void storm_round(struct qsm_fdev *d, struct rc_cq **on)
{
	int err = 0;

	for (int i = 0; i < STORM_QPS; i++) {
		on[i] = qsm_rc_cq_get(d, WRS_64_64, &err);
		ck_assert_msg(on[i] != NULL, "QP %d: %d", i, err);
	}
	ck_assert_uint_eq(d->ncqs, 4);
}

static void storm_all_go(struct qsm_fdev *d, struct rc_cq **on)
{
	for (int i = 0; i < STORM_QPS; i++)
		qsm_rc_cq_put(d, on[i], WRS_64_64);
}

START_TEST(test_cq_pool_keeps_its_cqs_across_a_reconnect_storm)
{
	struct qsm_fdev *d = pool_dev(16);
	static struct rc_cq *on[STORM_QPS];
	int grown;

	storm_round(d, on);
	grown = resizes;
	for (int r = 1; r < STORM_ROUNDS; r++) {
		storm_all_go(d, on);
		qsm_rc_cq_trim(d, CQ_IDLE_TICKS - 1);   /* a gap of up to 4 s: not idle */
		storm_round(d, on);
	}
	ck_assert_msg(d->fab->cq_created == 4 && d->fab->cq_freed == 0,
		      "%d rounds of %d QPs: %llu CQs created, %llu freed (the peak needs 4)", STORM_ROUNDS,
		      STORM_QPS, (unsigned long long)d->fab->cq_created, (unsigned long long)d->fab->cq_freed);
	ck_assert_int_eq(resizes, grown);
	ck_assert_uint_eq(d->fab->cq_reused, (STORM_ROUNDS - 1) * 4);
	ck_assert_int_eq(cqs_alive, 4);

	/* idle: the tick that ends CQ_IDLE_TICKS empty ones (4-5 s) shrinks the pool to one */
	storm_all_go(d, on);
	for (int t = 1; t < CQ_IDLE_TICKS; t++) {
		qsm_rc_cq_trim(d, 1);
		ck_assert_uint_eq(d->ncqs, 4);
	}
	qsm_rc_cq_trim(d, 1);
	ck_assert_uint_eq(d->ncqs, 1);
	ck_assert_int_eq(cqs_alive, 1);
	ck_assert_uint_eq(d->fab->cq_idle_freed, 3);

	/* the storm again, then the device is removed with 496 QPs still on it: the two CQs
	 * already empty go with the removal, the others as their QPs are destroyed (each
	 * followed by the settle destroy_qp does), and nothing waits for a tick */
	storm_round(d, on);
	ck_assert_uint_eq(d->fab->cq_created, 7);
	for (int i = 0; i < 2 * 252; i++)
		qsm_rc_cq_put(d, on[i], WRS_64_64);
	ck_assert_uint_eq(d->ncqs, 4);
	d->nids = 1;             /* its ids hold the device object; not its resources */
	qsm_rc_dev_removed(d);
	ck_assert_uint_eq(d->ncqs, 2);
	for (int i = 2 * 252; i < STORM_QPS; i++) {
		qsm_rc_cq_put(d, on[i], WRS_64_64);
		qsm_rc_dev_settle(d);
	}
	ck_assert_uint_eq(d->ncqs, 0);
	ck_assert_int_eq(cqs_alive, 0);
	ck_assert_uint_eq(d->fab->cq_freed, d->fab->cq_created);
	pool_dev_free(d);
}
END_TEST

START_TEST(test_cq_pool_refuses_with_enomem_beyond_max_cq_or_max_cqe)
{
	struct qsm_fdev *d = pool_dev(2);
	int err = 0;

	ck_assert_ptr_null(qsm_rc_cq_get(d, RXE_MAX_CQE + 1, &err));
	ck_assert_int_eq(err, -ENOMEM);
	ck_assert_uint_eq(d->ncqs, 0);
	for (int i = 0; i < 2 * 252; i++)
		ck_assert_ptr_nonnull(qsm_rc_cq_get(d, WRS_64_64, &err));
	err = 0;
	ck_assert_ptr_null(qsm_rc_cq_get(d, WRS_64_64, &err));
	ck_assert_int_eq(err, -ENOMEM);
	ck_assert_uint_eq(d->ncqs, 2);
	pool_dev_free(d);
}
END_TEST

/* A CQ that cannot grow is passed over (a new one is made), never the QP refused for it. */
START_TEST(test_cq_pool_takes_a_new_cq_when_a_resize_fails)
{
	struct qsm_fdev *d = pool_dev(4);
	struct rc_cq *a, *b;
	int err = 0, n = 1024 / WRS_64_64;

	for (int i = 0; i < n; i++)
		a = qsm_rc_cq_get(d, WRS_64_64, &err);
	fail_resize = 1;
	b = qsm_rc_cq_get(d, WRS_64_64, &err);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_ne(a, b);
	ck_assert_uint_eq(d->ncqs, 2);
	/* and one that cannot be created either is an outcome: -ENOMEM, once b is full */
	fail_create = 1;
	for (int i = 1; i < n; i++)
		ck_assert_ptr_eq(qsm_rc_cq_get(d, WRS_64_64, &err), b);
	err = 0;
	ck_assert_ptr_null(qsm_rc_cq_get(d, WRS_64_64, &err));
	ck_assert_int_eq(err, -ENOMEM);
	ck_assert_uint_eq(d->ncqs, 2);
	pool_dev_free(d);
}
END_TEST

/* ---- the fabric's timer with the device monitor: the CQ pool's tick runs only while a pool
 * has an empty CQ to trim, so an idle fabric is never woken ---- */

/* tfd armed (its deadline pending, or passed and not read yet). */
static bool timer_armed(struct rc_fabric *f)
{
	struct itimerspec its;
	struct pollfd pfd = { .fd = f->tfd, .events = POLLIN };

	ck_assert_int_eq(timerfd_gettime(f->tfd, &its), 0);
	return its.it_value.tv_sec || its.it_value.tv_nsec || poll(&pfd, 1, 0) == 1;
}

START_TEST(test_cq_trim_tick_runs_only_while_a_pool_has_an_empty_cq_to_trim)
{
	struct qsm_fdev *d = pool_dev(16);
	struct rc_fabric *f = d->fab;
	static struct rc_cq *on[300];
	uint64_t t;
	int err = 0;

	d->pd = (struct ibv_pd *)&fake_verbs;   /* never used: says the pool's resources exist */
	for (int i = 0; i < 300; i++)
		ck_assert_ptr_nonnull(on[i] = qsm_rc_cq_get(d, WRS_64_64, &err));
	ck_assert_uint_eq(d->ncqs, 2);
	ck_assert(!f->tick_at && !timer_armed(f));
	/* the second CQ's QPs go: a CQ to trim, so the tick starts */
	for (int i = 252; i < 300; i++)
		qsm_rc_cq_put(d, on[i], WRS_64_64);
	ck_assert(f->tick_at && timer_armed(f));
	ck_assert_uint_eq(f->timer_at, f->tick_at);
	/* CQ_IDLE_TICKS ticks later it is freed, and with nothing left to trim the tick stops */
	t = f->tick_at;
	for (int k = 1; k < CQ_IDLE_TICKS; k++) {
		qsm_rc_timer_run(f, 0, t);
		t += TICK_NS;
		ck_assert_uint_eq(d->ncqs, 2);
		ck_assert_uint_eq(f->tick_at, t);
		ck_assert(timer_armed(f));
	}
	qsm_rc_timer_run(f, 0, t);
	ck_assert_uint_eq(d->ncqs, 1);
	ck_assert_uint_eq(f->cq_idle_freed, 1);
	ck_assert(!f->tick_at && !f->timer_at && !timer_armed(f));
	/* the last QPs go: the oldest CQ stays for the next ones; one tick sees nothing to trim */
	for (int i = 0; i < 252; i++)
		qsm_rc_cq_put(d, on[i], WRS_64_64);
	ck_assert(f->tick_at && timer_armed(f));
	qsm_rc_timer_run(f, 0, f->tick_at);
	ck_assert_uint_eq(d->ncqs, 1);
	ck_assert(!f->tick_at && !timer_armed(f));
	/* a timer run late counts every tick that went by: one run frees what 5 ticks free */
	for (int i = 0; i < 300; i++)
		on[i] = qsm_rc_cq_get(d, WRS_64_64, &err);
	for (int i = 252; i < 300; i++)
		qsm_rc_cq_put(d, on[i], WRS_64_64);
	qsm_rc_timer_run(f, 0, f->tick_at + (CQ_IDLE_TICKS - 1) * TICK_NS);
	ck_assert_uint_eq(d->ncqs, 1);
	ck_assert(!f->tick_at && !timer_armed(f));
	/* without the monitor the tick always runs (armed by the fabric): cq_put leaves it */
	f->mon_err = -EPERM;
	for (int i = 0; i < 252; i++)
		qsm_rc_cq_put(d, on[i], WRS_64_64);
	ck_assert(!f->tick_at && !timer_armed(f));
	d->pd = NULL;
	pool_dev_free(d);
}
END_TEST

/* ---- the device monitor's parsers: what a message says, whatever its bytes ---- */

/* As the kernel sends it once rxe0 is registered (kobject_uevent_env: ACTION, DEVPATH,
 * SUBSYSTEM first); the last string ends with the datagram, NUL included here. */
static const char UEV_ADD[] = "add@/devices/virtual/net/veth0/rxe0\0ACTION=add\0"
	"DEVPATH=/devices/virtual/net/veth0/rxe0\0SUBSYSTEM=infiniband\0NAME=rxe0\0SEQNUM=2041";

/* A heap copy of exactly n bytes, so that a read past them is caught (ASan, valgrind). */
static void *exact(const void *src, size_t n)
{
	void *p = malloc(n ? n : 1);

	ck_assert_ptr_nonnull(p);
	memcpy(p, src, n);
	return p;
}

static unsigned uevent(const char *msg, size_t n)
{
	char *b = exact(msg, n);
	unsigned what = qsm_rc_monitor_parse_uevent(b, n);

	free(b);
	return what;
}

START_TEST(test_uevent_of_an_infiniband_device_asks_for_a_scan_and_nothing_else_does)
{
	static const char rm[] = "remove@/devices/virtual/net/veth0/rxe0\0ACTION=remove\0SUBSYSTEM=infiniband";
	static const char verbs[] = "add@/devices/virtual/infiniband_verbs/uverbs0\0ACTION=add\0"
		"SUBSYSTEM=infiniband_verbs\0";
	static const char net[] = "add@/devices/virtual/net/veth0\0ACTION=add\0SUBSYSTEM=net\0";
	/* udevd's re-send (group 2, which we do not join): not the kernel's format */
	static const char udev[] = "libudev\0\xfe\xed\xca\xfe" "SUBSYSTEM=infiniband\0";
	static const char nohdr[] = "ACTION=add\0SUBSYSTEM=infiniband\0";
	static const char prefix[] = "add@/x\0SUBSYSTEM=infinibandX\0SUBSYSTEM=infiniban\0";

	ck_assert_uint_eq(uevent(UEV_ADD, sizeof(UEV_ADD)), MON_DEVICES);
	ck_assert_uint_eq(uevent(rm, sizeof(rm) - 1), MON_DEVICES);   /* no NUL at its end */
	ck_assert_uint_eq(uevent(verbs, sizeof(verbs)), 0);
	ck_assert_uint_eq(uevent(net, sizeof(net)), 0);
	ck_assert_uint_eq(uevent(udev, sizeof(udev)), 0);
	ck_assert_uint_eq(uevent(nohdr, sizeof(nohdr)), 0);
	ck_assert_uint_eq(uevent(prefix, sizeof(prefix)), 0);
	ck_assert_uint_eq(qsm_rc_monitor_parse_uevent(NULL, 0), 0);
	ck_assert_uint_eq(uevent("", 0), 0);
	ck_assert_uint_eq(uevent("add@/x", 6), 0);   /* a header with no NUL */
}
END_TEST

/* Cut anywhere: a scan only once the whole SUBSYSTEM=infiniband string is in; nothing read
 * past the cut. */
START_TEST(test_uevent_cut_short_anywhere_is_read_within_its_length)
{
	const char *key = NULL;
	size_t end;

	for (size_t i = 0; i + 20 <= sizeof(UEV_ADD); i++)
		if (!memcmp(UEV_ADD + i, "SUBSYSTEM=infiniband", 20))
			key = UEV_ADD + i;
	ck_assert_ptr_nonnull(key);
	end = (size_t)(key - UEV_ADD) + 20;
	for (size_t n = 0; n <= sizeof(UEV_ADD); n++)
		ck_assert_msg(uevent(UEV_ADD, n) == (n >= end ? MON_DEVICES : 0u), "cut at %zu of %zu", n,
			      sizeof(UEV_ADD));
}
END_TEST

/* An address message as rtnetlink sends it: header, ifaddrmsg, then up to two attributes. */
static size_t rtm_addr(void *at, uint16_t type, uint8_t family, uint8_t flags, uint32_t index,
		       uint16_t t1, const void *a1, size_t n1, uint16_t t2, const void *a2, size_t n2)
{
	struct nlmsghdr *nh = at;
	struct ifaddrmsg *ifa = NLMSG_DATA(nh);
	struct rtattr *rta = IFA_RTA(ifa);
	size_t len = NLMSG_LENGTH(sizeof(*ifa));

	memset(nh, 0, NLMSG_SPACE(sizeof(*ifa)));
	*ifa = (struct ifaddrmsg){ .ifa_family = family, .ifa_flags = flags, .ifa_index = index };
	for (int k = 0; k < 2; k++) {
		uint16_t t = k ? t2 : t1;
		const void *a = k ? a2 : a1;
		size_t n = k ? n2 : n1;

		if (!t)
			continue;
		rta->rta_type = t;
		rta->rta_len = (unsigned short)RTA_LENGTH(n);
		memcpy(RTA_DATA(rta), a, n);
		len += RTA_SPACE(n);
		rta = (struct rtattr *)((char *)rta + RTA_SPACE(n));
	}
	nh->nlmsg_len = (uint32_t)len;
	nh->nlmsg_type = type;
	return NLMSG_ALIGN(len);
}

static const uint8_t V4_LOCAL[4] = { 192, 0, 2, 1 }, V4_PEER[4] = { 10, 0, 0, 9 };
static const uint8_t V6_LL[16] = { 0xfe, 0x80, [15] = 1 }, V6_GLOBAL[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };

static unsigned rtnl(const void *msg, size_t n, struct sockaddr_storage *addrs, unsigned max, unsigned *got)
{
	void *b = exact(msg, n);
	unsigned what = qsm_rc_monitor_parse_rtnl(b, n, addrs, max, got);

	free(b);
	return what;
}

START_TEST(test_rtnetlink_new_addresses_come_out_as_socket_addresses)
{
	union { struct nlmsghdr nh; char b[1024]; } m;
	struct sockaddr_storage a[4];
	const struct sockaddr_in *sin = (const void *)&a[0];
	const struct sockaddr_in6 *sin6 = (const void *)&a[1], *g6 = (const void *)&a[2];
	size_t len = 0;
	unsigned n = 99;

	/* IPv4: its own address is IFA_LOCAL (IFA_ADDRESS is a point-to-point peer's) */
	len += rtm_addr(m.b + len, RTM_NEWADDR, AF_INET, 0, 3, IFA_ADDRESS, V4_PEER, 4, IFA_LOCAL, V4_LOCAL, 4);
	/* IPv6 link-local: scoped to its interface; a global one is not */
	len += rtm_addr(m.b + len, RTM_NEWADDR, AF_INET6, 0, 7, IFA_ADDRESS, V6_LL, 16, 0, NULL, 0);
	len += rtm_addr(m.b + len, RTM_NEWADDR, AF_INET6, 0, 7, IFA_ADDRESS, V6_GLOBAL, 16, 0, NULL, 0);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), MON_ADDRS);
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(sin->sin_family, AF_INET);
	ck_assert(!memcmp(&sin->sin_addr, V4_LOCAL, 4));
	ck_assert_int_eq(sin6->sin6_family, AF_INET6);
	ck_assert(!memcmp(&sin6->sin6_addr, V6_LL, 16));
	ck_assert_uint_eq(sin6->sin6_scope_id, 7);
	ck_assert(!memcmp(&g6->sin6_addr, V6_GLOBAL, 16));
	ck_assert_uint_eq(g6->sin6_scope_id, 0);
	/* no more than the caller has room for */
	ck_assert_uint_eq(rtnl(m.b, len, a, 1, &n), MON_ADDRS);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(rtnl(m.b, len, a, 0, &n), 0);
	ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(test_rtnetlink_messages_that_name_no_usable_address_give_none)
{
	union { struct nlmsghdr nh; char b[1024]; } m;
	struct sockaddr_storage a[4];
	uint32_t tentative = IFA_F_TENTATIVE;
	size_t len;
	unsigned n = 99;

	/* IPv6 still checking the address is unique, in ifa_flags or in IFA_FLAGS: a later
	 * RTM_NEWADDR says when it is usable */
	len = rtm_addr(m.b, RTM_NEWADDR, AF_INET6, IFA_F_TENTATIVE, 7, IFA_ADDRESS, V6_GLOBAL, 16, 0, NULL, 0);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	len = rtm_addr(m.b, RTM_NEWADDR, AF_INET6, 0, 7, IFA_ADDRESS, V6_GLOBAL, 16, IFA_FLAGS, &tentative, 4);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* an address gone asks for nothing but is told */
	len = rtm_addr(m.b, RTM_DELADDR, AF_INET, 0, 3, IFA_LOCAL, V4_LOCAL, 4, 0, NULL, 0);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), MON_ADDR_GONE);
	ck_assert_uint_eq(n, 0);
	/* a payload of the wrong size for its family; no address attribute at all */
	len = rtm_addr(m.b, RTM_NEWADDR, AF_INET, 0, 3, IFA_LOCAL, V6_GLOBAL, 16, 0, NULL, 0);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	len = rtm_addr(m.b, RTM_NEWADDR, AF_INET6, 0, 3, IFA_LOCAL, V4_LOCAL, 4, 0, NULL, 0);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	len = rtm_addr(m.b, RTM_NEWADDR, AF_INET, 0, 3, 0, NULL, 0, 0, NULL, 0);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	/* other families and other messages */
	len = rtm_addr(m.b, RTM_NEWADDR, AF_PACKET, 0, 3, IFA_LOCAL, V4_LOCAL, 4, 0, NULL, 0);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	len = rtm_addr(m.b, RTM_NEWLINK, AF_INET, 0, 3, IFA_LOCAL, V4_LOCAL, 4, 0, NULL, 0);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	ck_assert_uint_eq(qsm_rc_monitor_parse_rtnl(NULL, 0, a, 4, &n), 0);
	ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(test_rtnetlink_lengths_that_lie_are_never_followed_past_the_datagram)
{
	union { struct nlmsghdr nh; char b[1024]; } m;
	struct sockaddr_storage a[4];
	struct rtattr *rta = IFA_RTA((struct ifaddrmsg *)NLMSG_DATA(&m.nh));
	size_t len, l1;
	unsigned n = 99;

	/* a message longer than the datagram */
	len = rtm_addr(m.b, RTM_NEWADDR, AF_INET, 0, 3, IFA_LOCAL, V4_LOCAL, 4, 0, NULL, 0);
	m.nh.nlmsg_len = (uint32_t)len + 4;
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	/* a message too short for its ifaddrmsg */
	m.nh.nlmsg_len = NLMSG_LENGTH(2);
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	/* an attribute longer than its message */
	m.nh.nlmsg_len = (uint32_t)len;
	rta->rta_len = 200;
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	rta->rta_len = 2;
	ck_assert_uint_eq(rtnl(m.b, len, a, 4, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* two messages, cut anywhere: each address only once its message is whole */
	l1 = rtm_addr(m.b, RTM_NEWADDR, AF_INET, 0, 3, IFA_LOCAL, V4_LOCAL, 4, 0, NULL, 0);
	len = l1 + rtm_addr(m.b + l1, RTM_NEWADDR, AF_INET6, 0, 7, IFA_ADDRESS, V6_LL, 16, 0, NULL, 0);
	for (size_t cut = 0; cut <= len; cut++) {
		unsigned want = (cut >= l1) + (cut >= len);

		rtnl(m.b, cut, a, 4, &n);
		ck_assert_msg(n == want, "cut at %zu of %zu: %u addresses, want %u", cut, len, n, want);
	}
}
END_TEST

/* Bytes from a fixed seed as datagrams of every length up to 512: whatever they say, the parse
 * stays within them (ASan, valgrind) and never reports more addresses than it has room for. */
START_TEST(test_monitor_parsers_take_garbage_safely)
{
	union { struct nlmsghdr nh; char b[512]; } m;
	struct sockaddr_storage a[2];
	uint32_t x = 2463534242u;

	for (int round = 0; round < 2000; round++) {
		size_t len = (size_t)(round % 512);
		unsigned n = 99;

		for (size_t i = 0; i < len; i++) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			m.b[i] = (char)x;
		}
		/* half of them with a plausible header, so the parse goes deeper */
		if (round % 2 && len >= sizeof(struct nlmsghdr)) {
			m.nh.nlmsg_len = (uint32_t)(x % (len + 8));
			m.nh.nlmsg_type = round % 4 == 1 ? RTM_NEWADDR : RTM_DELADDR;
		}
		(void)uevent(m.b, len);
		(void)rtnl(m.b, len, a, 2, &n);
		ck_assert_uint_le(n, 2);
	}
}
END_TEST

/* ---- completions: qsm_rc_poll_cqs on a fake CQ (its context's poll_cq hands out prepared
 * ibv_wc entries), a QP's rings filled as its posts would fill them ---- */

#define WC_QPN 77

static struct ibv_wc wc_in[16];
static int wc_in_len, wc_in_next;

static int wc_fake_poll(struct ibv_cq *cq, int max, struct ibv_wc *wc)
{
	int n = 0;

	(void)cq;
	while (n < max && wc_in_next < wc_in_len)
		wc[n++] = wc_in[wc_in_next++];
	return n;
}

static struct ibv_context wc_verbs = { .ops = { .poll_cq = wc_fake_poll, .req_notify_cq = fake_req_notify } };
static struct ibv_cq wc_cq = { .context = &wc_verbs };
static struct ibv_comp_channel wc_cc = { .fd = -1 };

struct wc_rig {
	struct rc_fabric *f;
	struct qsm_fdev *d;
	struct rc_cq *c;
	struct qsm_fid *id;
};

static void wc_rig_wq(struct rc_wq *w)
{
	w->ring = calloc(4, sizeof(*w->ring));
	ck_assert_ptr_nonnull(w->ring);
	w->mask = 3;
	w->cap = 4;
}

static const size_t wc_no_sink = 1;

static void wc_rig_new(struct wc_rig *r)
{
	r->f = calloc(1, sizeof(*r->f));
	r->d = calloc(1, sizeof(*r->d));
	r->c = calloc(1, sizeof(*r->c));
	r->id = calloc(1, sizeof(*r->id));
	ck_assert(r->f && r->d && r->c && r->id);
	qsm_list_init(&r->f->devs);
	qsm_list_init(&r->f->lq);
	qsm_rc_table_init(&r->f->qpt);
	r->f->hot_fd = eventfd(0, EFD_NONBLOCK);
	r->f->hot_idle = 1000;
	r->d->fab = r->f;
	r->d->cc = &wc_cc;
	qsm_list_init(&r->d->cqs);
	qsm_list_add_tail(&r->f->devs, &r->d->node);
	r->c->cq = &wc_cq;
	r->c->hot = true;
	r->f->hot = 1;
	qsm_list_add_tail(&r->d->cqs, &r->c->node);
	r->id->fab = r->f;
	r->id->owner = r;
	r->id->qp_num = WC_QPN;
	r->id->max_sge_rd = QSM_FABRIC_MAX_SGE;
	qsm_list_init(&r->id->late);
	qsm_list_init(&r->id->lq_node);
	wc_rig_wq(&r->id->wq[WQ_SEND]);
	wc_rig_wq(&r->id->wq[WQ_RECV]);
	ck_assert_int_eq(qsm_rc_table_add(&r->f->qpt, r->id, &r->id->qp_key), 0);
	r->id->tag_hi = (uint32_t)(r->id->qp_key >> 32) | TAG_RECV_HI;   /* as create_qp keys it */
	r->f->sink.hold = &wc_no_sink;   /* no runtime: every completion into the batch */
	wc_in_len = wc_in_next = 0;
}

static void wc_rig_free(struct wc_rig *r)
{
	free(r->id->wq[WQ_SEND].ring);
	free(r->id->wq[WQ_RECV].ring);
	qsm_rc_table_fini(&r->f->qpt);
	close(r->f->hot_fd);
	free(r->id);
	free(r->c);
	free(r->d);
	free(r->f);
}

/* A WR on the QP's work queue, as post_send / post_recv record it; its tag. */
static uint64_t wc_rig_post(struct wc_rig *r, int q, uint64_t wr_id, enum qsm_wr_opcode op, bool signaled)
{
	struct rc_wq *w = &r->id->wq[q];
	struct rc_slot *s = &w->ring[w->tail & w->mask];

	s->wr_id = wr_id;
	s->opcode = (uint8_t)op;
	s->signaled = signaled;
	return r->id->qp_key | (q == WQ_RECV ? TAG_RECV : 0) | w->tail++;
}

static void wc_push(uint64_t tag, enum ibv_wc_status st, uint32_t qpn, uint32_t len, unsigned int flags,
		    uint32_t imm)
{
	wc_in[wc_in_len++] = (struct ibv_wc){ .wr_id = tag, .status = st, .opcode = IBV_WC_RECV,
					      .byte_len = len, .qp_num = qpn, .wc_flags = flags,
					      .imm_data = imm };
}

/* A provider that loses a CQ's notification (soft-iWARP under load: tests/vm/README.md): the CQ
 * waits, armed as far as the fabric knows, with a completion in it and no event coming.  The
 * next time the fabric wakes for anything else (at most every CQ_COLD_CHECK_NS) it polls that
 * CQ once, hands the completion over and counts it; a cold CQ with nothing in it is re-armed
 * and left cold at its first empty poll. */
START_TEST(test_a_cold_cq_whose_notification_was_lost_is_polled_at_the_next_wake_up)
{
	struct wc_rig r;
	struct qsm_fabric_cqe out[16];
	uint64_t r0;

	wc_rig_new(&r);
	r.c->hot = false;   /* armed, waiting for its event */
	r.f->hot = 0;
	r.c->nqps = 1;
	r0 = wc_rig_post(&r, WQ_RECV, 100, QSM_WR_RECV, true);
	wc_push(r0, IBV_WC_SUCCESS, WC_QPN, 10, 0, 0);   /* in the CQ; its event never comes */
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	r.f->cold_check_at = qsm_rc_now_ns() - CQ_COLD_CHECK_NS;
	qsm_rc_cq_check_cold(r.f);
	ck_assert(r.c->hot && r.c->checked);
	ck_assert_uint_eq(r.f->hot, 1);
	ck_assert_uint_eq(r.f->cq_checks, 1);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 1);
	ck_assert_uint_eq(out[0].wc.wr_id, 100);
	ck_assert_uint_eq(r.f->cq_rescued, 1);
	ck_assert(!r.c->checked);
	/* hot now, as any CQ with completions: it goes cold after hot_idle empty polls */
	for (unsigned k = 0; k < r.f->hot_idle; k++)
		ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	ck_assert(!r.c->hot);
	ck_assert_uint_eq(r.f->hot, 0);
	/* within CQ_COLD_CHECK_NS of the last: nothing */
	qsm_rc_cq_check_cold(r.f);
	ck_assert(!r.c->hot);
	ck_assert_uint_eq(r.f->cq_checks, 1);
	/* later, the CQ empty: one poll, re-armed, cold again; nothing counted as rescued */
	r.f->cold_check_at = qsm_rc_now_ns() - CQ_COLD_CHECK_NS;
	qsm_rc_cq_check_cold(r.f);
	ck_assert(r.c->hot);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	ck_assert(!r.c->hot && !r.c->checked);
	ck_assert_uint_eq(r.f->hot, 0);
	ck_assert_uint_eq(r.f->cq_checks, 2);
	ck_assert_uint_eq(r.f->cq_rescued, 1);
	/* a CQ of the pool without QPs is not polled */
	r.c->nqps = 0;
	r.f->cold_check_at = qsm_rc_now_ns() - CQ_COLD_CHECK_NS;
	qsm_rc_cq_check_cold(r.f);
	ck_assert(!r.c->hot);
	ck_assert_uint_eq(r.f->cq_checks, 2);
	wc_rig_free(&r);
}
END_TEST

/* ... and a lost notification in a conversation that went quiet (each side waiting for the
 * other: nothing else wakes either fabric) is found all the same: once the fabric has posted and
 * then finds nothing to do, tfd is armed for a check CQ_COLD_CHECK_NS later, which polls the
 * cold CQ once.  A fabric that posted nothing since is never woken (idle: no timer). */
START_TEST(test_a_check_of_the_cold_cqs_is_due_a_second_after_the_last_posts)
{
	struct wc_rig r;
	struct qsm_fabric_cqe out[16];
	struct itimerspec its;
	uint64_t r0, due;

	wc_rig_new(&r);
	r.f->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ck_assert_int_ge(r.f->tfd, 0);
	r.c->hot = false;
	r.f->hot = 0;
	r.c->nqps = 1;
	/* nothing posted: nothing due, tfd disarmed */
	qsm_rc_cq_watch(r.f);
	ck_assert_uint_eq(r.f->cold_at, 0);
	r0 = wc_rig_post(&r, WQ_RECV, 7, QSM_WR_RECV, true);
	r.f->posts++;
	wc_push(r0, IBV_WC_SUCCESS, WC_QPN, 10, 0, 0);   /* its event never comes */
	r.f->cold_check_at = qsm_rc_now_ns();           /* a wake-up's check ran just now */
	qsm_rc_cq_watch(r.f);
	due = r.f->cold_at;
	ck_assert_uint_gt(due, qsm_rc_now_ns() + CQ_COLD_CHECK_NS / 2);
	ck_assert_uint_le(due, qsm_rc_now_ns() + CQ_COLD_CHECK_NS);
	ck_assert_int_eq(timerfd_gettime(r.f->tfd, &its), 0);
	ck_assert(its.it_value.tv_sec || its.it_value.tv_nsec);
	/* due once: more calls with nothing posted move nothing */
	qsm_rc_cq_watch(r.f);
	ck_assert_uint_eq(r.f->cold_at, due);
	/* the timer before it is due runs nothing */
	qsm_rc_timer_run(r.f, 1, due - 1);
	ck_assert(!r.c->hot);
	/* due: the CQ is checked whenever the last wake-up's check ran */
	qsm_rc_timer_run(r.f, 1, due);
	ck_assert(r.c->hot && r.c->checked);
	ck_assert_uint_eq(r.f->cold_at, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 1);
	ck_assert_uint_eq(out[0].wc.wr_id, 7);
	ck_assert_uint_eq(r.f->cq_rescued, 1);
	for (unsigned k = 0; k < r.f->hot_idle; k++)
		ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	ck_assert(!r.c->hot);
	/* quiet now, nothing posted since: no check due, tfd disarmed (no periodic wake-up) */
	qsm_rc_cq_watch(r.f);
	ck_assert_uint_eq(r.f->cold_at, 0);
	ck_assert_int_eq(timerfd_gettime(r.f->tfd, &its), 0);
	ck_assert(!its.it_value.tv_sec && !its.it_value.tv_nsec);
	/* without the device monitor the periodic tick wakes the fabric anyway: no cold_at */
	r.f->posts++;
	r.f->mon_err = -EPERM;
	qsm_rc_cq_watch(r.f);
	ck_assert_uint_eq(r.f->cold_at, 0);
	close(r.f->tfd);
	wc_rig_free(&r);
}
END_TEST

START_TEST(test_poll_completes_each_wr_once_and_drops_stale_tags)
{
	struct wc_rig r;
	struct qsm_fabric_cqe out[16];
	uint64_t r0, r1, s0, s1;

	wc_rig_new(&r);
	r0 = wc_rig_post(&r, WQ_RECV, 100, QSM_WR_RECV, true);
	r1 = wc_rig_post(&r, WQ_RECV, 101, QSM_WR_RECV, true);
	s0 = wc_rig_post(&r, WQ_SEND, 200, QSM_WR_SEND, false);
	s1 = wc_rig_post(&r, WQ_SEND, 201, QSM_WR_RDMA_WRITE, true);
	wc_push(r0, IBV_WC_SUCCESS, WC_QPN, 10, 0, 0);
	wc_push(r0, IBV_WC_SUCCESS, WC_QPN, 10, 0, 0);                    /* again: completed */
	wc_push(r1 + (1ull << (TAG_KEY_SHIFT + TAG_SLOT_BITS)), IBV_WC_SUCCESS, WC_QPN, 1, 0, 0); /* gen */
	wc_push(r1, IBV_WC_SUCCESS, WC_QPN + 1, 1, 0, 0);                 /* another QP's */
	wc_push(s1, IBV_WC_SUCCESS, WC_QPN, 4096, 0, 0);                  /* s0 unsignaled before it */
	wc_push(r1, IBV_WC_SUCCESS, WC_QPN, 20, IBV_WC_WITH_IMM, 0xabcd);
	wc_push(r1 + 1, IBV_WC_SUCCESS, WC_QPN, 1, 0, 0);                 /* never posted */
	wc_push(s0, IBV_WC_SUCCESS, WC_QPN, 1, 0, 0);                     /* passed by s1 already */
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 3);
	ck_assert_ptr_eq(out[0].owner, &r);
	ck_assert_ptr_eq(out[0].id, r.id);
	ck_assert_uint_eq(out[0].wc.wr_id, 100);
	ck_assert_int_eq(out[0].wc.status, QSM_WC_SUCCESS);
	ck_assert_int_eq(out[0].wc.opcode, QSM_WR_RECV);
	ck_assert_uint_eq(out[0].wc.byte_len, 10);
	ck_assert_uint_eq(out[0].wc.wc_flags, 0);
	ck_assert_uint_eq(out[1].wc.wr_id, 201);
	ck_assert_int_eq(out[1].wc.opcode, QSM_WR_RDMA_WRITE);
	ck_assert_uint_eq(out[1].wc.byte_len, 4096);
	ck_assert_uint_eq(out[2].wc.wr_id, 101);
	ck_assert_uint_eq(out[2].wc.wc_flags, QSM_WC_WITH_IMM);
	ck_assert_uint_eq(out[2].wc.imm_data, 0xabcd);
	ck_assert_uint_eq(out[2].wc.byte_len, 20);
	ck_assert_uint_eq(r.f->wc_ok, 3);
	ck_assert_uint_eq(r.f->wc_stale, 5);
	ck_assert_uint_eq(r.f->wc_order, 0);
	for (int q = WQ_SEND; q <= WQ_RECV; q++)
		ck_assert_uint_eq(r.id->wq[q].head, r.id->wq[q].tail);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	wc_rig_free(&r);
}
END_TEST

/* An error moves the QP to ERR and reports the WR's own opcode; after the drain marker every
 * WR left is flushed by the fabric, so the provider's completions of them are dropped. */
START_TEST(test_poll_reports_errors_with_the_wrs_opcode_and_drops_all_after_the_marker)
{
	struct wc_rig r;
	struct qsm_fabric_cqe out[16];
	uint64_t r0, r1, s0;

	wc_rig_new(&r);
	r0 = wc_rig_post(&r, WQ_RECV, 100, QSM_WR_RECV, true);
	r1 = wc_rig_post(&r, WQ_RECV, 101, QSM_WR_RECV, true);
	s0 = wc_rig_post(&r, WQ_SEND, 200, QSM_WR_SEND, true);
	wc_push(s0, IBV_WC_RETRY_EXC_ERR, WC_QPN, 0, 0, 0);
	wc_push(r0, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 2);
	ck_assert_uint_eq(out[0].wc.wr_id, 200);
	ck_assert_int_eq(out[0].wc.status, QSM_WC_RETRY_EXC_ERR);
	ck_assert_int_eq(out[0].wc.opcode, QSM_WR_SEND);
	ck_assert_uint_eq(out[1].wc.wr_id, 100);
	ck_assert_int_eq(out[1].wc.status, QSM_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(out[1].wc.opcode, QSM_WR_RECV);
	ck_assert(r.id->qp_err);
	ck_assert_uint_eq(r.f->wc_err, 1);
	ck_assert_uint_eq(r.f->wc_flush, 1);
	/* the marker: r1 is flushed by the fabric from now on, never by the provider's completion */
	r.id->draining = true;
	wc_in_len = wc_in_next = 0;
	wc_push(TAG_MARKER | r.id->qp_key, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	wc_push(r1, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	ck_assert(r.id->flush_all && r.id->drained_due && !r.id->draining);
	ck_assert(r.id->on_lq);
	ck_assert_uint_eq(r.f->wc_stale, 1);
	ck_assert_uint_eq(r.id->wq[WQ_RECV].head, 1);   /* r1 is left for the fabric's flush */
	wc_rig_free(&r);
}
END_TEST

/* The keepalive probe's completion is never the ULP's: its success and its flush change nothing;
 * its failure (the RC retries ran out: the peer is gone) moves the QP to ERR and is the id's
 * WC_ERROR, an event, once; a probe asked for after that pushes the WC_ERROR again (the first
 * may have been lost for memory), and a probe of another QP is dropped. */
START_TEST(test_a_probe_completes_to_no_ulp_and_its_failure_is_the_ids_wc_error)
{
	struct wc_rig r;
	struct qsm_fabric_cqe out[16];
	struct qsm_pending *p;
	uint64_t probe;

	wc_rig_new(&r);
	ck_assert_int_eq(qsm_pending_init(&r.f->pq), 0);
	probe = TAG_MARKER | r.id->qp_key | TAG_PROBE;
	r.id->probe_out = true;
	wc_push(probe, IBV_WC_SUCCESS, WC_QPN, 0, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	ck_assert(!r.id->probe_out && !r.id->qp_err);
	ck_assert_ptr_null(qsm_pending_pop(&r.f->pq));
	r.id->probe_out = true;
	wc_in_len = wc_in_next = 0;
	wc_push(probe, IBV_WC_RETRY_EXC_ERR, WC_QPN + 1, 0, 0, 0);   /* another QP's: stale */
	wc_push(probe, IBV_WC_RETRY_EXC_ERR, WC_QPN, 0, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	ck_assert(r.id->qp_err && r.id->probe_failed && !r.id->probe_out);
	ck_assert_uint_eq(r.f->probes_failed, 1);
	ck_assert_ptr_nonnull(p = qsm_pending_pop(&r.f->pq));
	ck_assert_int_eq(p->event, QSM_EV_WC_ERROR);
	ck_assert_int_eq(p->status, -EIO);
	ck_assert_ptr_eq(p->id, r.id);
	qsm_pending_release(p);
	ck_assert_ptr_null(qsm_pending_pop(&r.f->pq));
	/* still probed: the queue never took it, so it is pushed again */
	ck_assert_int_eq(qsm_rc_probe(r.id), 0);
	ck_assert_ptr_nonnull(p = qsm_pending_pop(&r.f->pq));
	ck_assert_int_eq(p->event, QSM_EV_WC_ERROR);
	qsm_pending_release(p);
	/* a flushed probe (the QP drained with it out) is nothing either */
	r.id->probe_failed = false;
	r.id->probe_out = true;
	wc_in_len = wc_in_next = 0;
	wc_push(probe, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	ck_assert(!r.id->probe_out && !r.id->probe_failed);
	ck_assert_ptr_null(qsm_pending_pop(&r.f->pq));
	ck_assert_int_eq(qsm_rc_probe(NULL), -ENOTCONN);
	qsm_pending_fini(&r.f->pq);
	wc_rig_free(&r);
}
END_TEST

/* A QP let go of with WRs on it (a drain past its timeout): flush_qp takes each once, in each
 * work queue's post order, as the fabric's flush (an unsignaled send only as the device reports
 * it); the provider's reports after that are stale, and no DRAINED is due. */
START_TEST(test_flush_qp_takes_every_wr_left_once_and_the_providers_reports_after_are_stale)
{
	struct rdma_cm_id cm = { 0 };
	struct ibv_qp qp = { 0 };
	struct qsm_fabric_cqe out[16];
	struct wc_rig r;
	uint64_t r0, r1, s1;

	wc_rig_new(&r);
	cm.qp = &qp;
	r.id->cm = &cm;
	r0 = wc_rig_post(&r, WQ_RECV, 100, QSM_WR_RECV, true);
	r1 = wc_rig_post(&r, WQ_RECV, 101, QSM_WR_RECV, true);
	(void)wc_rig_post(&r, WQ_SEND, 200, QSM_WR_SEND, false);
	s1 = wc_rig_post(&r, WQ_SEND, 201, QSM_WR_RDMA_WRITE, true);
	r.id->draining = true;   /* a drain under way: its marker is not back */
	ck_assert_int_eq(qsm_rc_flush_qp(r.id, out, 2), 2);
	ck_assert_uint_eq(out[0].wc.wr_id, 201);
	ck_assert_int_eq(out[0].wc.status, QSM_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(out[0].wc.opcode, QSM_WR_RDMA_WRITE);
	ck_assert_uint_eq(out[1].wc.wr_id, 100);
	ck_assert_int_eq(out[1].wc.status, QSM_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(out[1].wc.opcode, QSM_WR_RECV);
	ck_assert_ptr_eq(out[1].owner, &r);
	ck_assert_int_eq(qsm_rc_flush_qp(r.id, out, 16), 1);
	ck_assert_uint_eq(out[0].wc.wr_id, 101);
	ck_assert_int_eq(qsm_rc_flush_qp(r.id, out, 16), 0);
	ck_assert(!r.id->on_lq && !r.id->drained_due);
	/* what the device reports for them now, and the marker, hands out nothing */
	wc_push(r0, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	wc_push(s1, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	wc_push(r1, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	wc_push(TAG_MARKER | r.id->qp_key, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 0);
	ck_assert_uint_eq(r.f->wc_stale, 3);
	ck_assert_uint_eq(r.f->wc_synth, 3);
	ck_assert(!r.id->on_lq && !r.id->drained_due);
	wc_rig_free(&r);
}
END_TEST

/* A provider that completes a send queue out of post order (soft-iWARP: a SEND completes once
 * TCP has it, ahead of an RDMA READ posted before it that waits for its response): each WR is
 * still handed out exactly once, the READ's when it comes, and the ring's head waits for it. */
START_TEST(test_a_send_completed_ahead_of_a_read_before_it_leaves_the_read_to_complete_once)
{
	struct wc_rig r;
	struct qsm_fabric_cqe out[16];
	uint64_t a, b, c, d;

	wc_rig_new(&r);
	a = wc_rig_post(&r, WQ_SEND, 300, QSM_WR_RDMA_READ, true);
	b = wc_rig_post(&r, WQ_SEND, 301, QSM_WR_RDMA_READ, true);
	(void)wc_rig_post(&r, WQ_SEND, 302, QSM_WR_SEND, false);
	c = wc_rig_post(&r, WQ_SEND, 303, QSM_WR_SEND, true);
	wc_push(a, IBV_WC_SUCCESS, WC_QPN, 512, 0, 0);
	wc_push(c, IBV_WC_SUCCESS, WC_QPN, 16, 0, 0);   /* ahead of b, still out */
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 2);
	ck_assert_uint_eq(out[0].wc.wr_id, 300);
	ck_assert_int_eq(out[0].wc.opcode, QSM_WR_RDMA_READ);
	ck_assert_uint_eq(out[1].wc.wr_id, 303);
	ck_assert_int_eq(out[1].wc.opcode, QSM_WR_SEND);
	ck_assert_uint_eq(r.id->wq[WQ_SEND].head, 1);   /* waits for b */
	ck_assert_uint_eq(r.id->wq[WQ_SEND].ahead, 1);
	ck_assert_uint_eq(r.f->wc_order, 1);
	wc_in_len = wc_in_next = 0;
	wc_push(c, IBV_WC_SUCCESS, WC_QPN, 16, 0, 0);   /* again: taken already */
	wc_push(b, IBV_WC_SUCCESS, WC_QPN, 512, 0, 0);
	wc_push(c, IBV_WC_SUCCESS, WC_QPN, 16, 0, 0);   /* and once head passed it */
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 1);
	ck_assert_uint_eq(out[0].wc.wr_id, 301);
	ck_assert_int_eq(out[0].wc.opcode, QSM_WR_RDMA_READ);
	ck_assert_uint_eq(out[0].wc.byte_len, 512);
	ck_assert_uint_eq(r.id->wq[WQ_SEND].head, r.id->wq[WQ_SEND].tail);
	ck_assert_uint_eq(r.id->wq[WQ_SEND].ahead, 0);
	ck_assert_uint_eq(r.f->wc_stale, 2);
	ck_assert_uint_eq(r.f->wc_ok, 3);
	/* the ring goes round: the slot that was done ahead is a plain slot again */
	wc_in_len = wc_in_next = 0;
	for (int i = 0; i < 4; i++)
		d = wc_rig_post(&r, WQ_SEND, 310 + (uint64_t)i, QSM_WR_SEND, true);
	wc_push(d, IBV_WC_SUCCESS, WC_QPN, 1, 0, 0);    /* the last first: three still out */
	wc_push(d - 3, IBV_WC_SUCCESS, WC_QPN, 1, 0, 0);
	wc_push(d - 1, IBV_WC_SUCCESS, WC_QPN, 1, 0, 0);
	wc_push(d - 2, IBV_WC_SUCCESS, WC_QPN, 1, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 4);
	ck_assert_uint_eq(out[0].wc.wr_id, 313);
	ck_assert_uint_eq(out[1].wc.wr_id, 310);
	ck_assert_uint_eq(out[2].wc.wr_id, 312);
	ck_assert_uint_eq(out[3].wc.wr_id, 311);
	ck_assert_uint_eq(r.id->wq[WQ_SEND].head, r.id->wq[WQ_SEND].tail);
	ck_assert_uint_eq(r.id->wq[WQ_SEND].ahead, 0);
	wc_rig_free(&r);
}
END_TEST

/* A drain past its timeout flushes what is left once: a send that completed ahead of a READ
 * is not flushed again, the READ is. */
START_TEST(test_flush_qp_skips_a_send_that_completed_ahead_of_the_read_before_it)
{
	struct rdma_cm_id cm = { 0 };
	struct ibv_qp qp = { 0 };
	struct qsm_fabric_cqe out[16];
	struct wc_rig r;
	uint64_t c;

	wc_rig_new(&r);
	cm.qp = &qp;
	r.id->cm = &cm;
	(void)wc_rig_post(&r, WQ_SEND, 400, QSM_WR_RDMA_READ, true);
	c = wc_rig_post(&r, WQ_SEND, 401, QSM_WR_SEND, true);
	wc_push(c, IBV_WC_SUCCESS, WC_QPN, 16, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(r.f, out, 16), 1);
	ck_assert_uint_eq(out[0].wc.wr_id, 401);
	r.id->draining = true;
	ck_assert_int_eq(qsm_rc_flush_qp(r.id, out, 16), 1);
	ck_assert_uint_eq(out[0].wc.wr_id, 400);
	ck_assert_int_eq(out[0].wc.status, QSM_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(out[0].wc.opcode, QSM_WR_RDMA_READ);
	ck_assert_int_eq(qsm_rc_flush_qp(r.id, out, 16), 0);
	ck_assert_uint_eq(r.id->wq[WQ_SEND].head, r.id->wq[WQ_SEND].tail);
	ck_assert_uint_eq(r.id->wq[WQ_SEND].ahead, 0);
	wc_rig_free(&r);
}
END_TEST

/* qsm_rc_drain on a fake QP: ibv_modify_qp wrapped (it only records the state asked for), the
 * QP's context counts the posts (the drain marker's). */
static int modify_calls, modify_state, marker_posts;
static uint64_t marker_wr_id;

int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);

int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	(void)qp;
	modify_calls++;
	if (mask & IBV_QP_STATE)
		modify_state = attr->qp_state;
	return 0;
}

static int drain_fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	(void)bad;
	marker_posts++;
	marker_wr_id = wr->wr_id;
	return 0;
}

struct drain_rig {
	struct wc_rig r;
	struct ibv_device dev;
	struct ibv_context verbs;
	struct ibv_qp qp;
	struct rdma_cm_id cm;
};

static void drain_rig_new(struct drain_rig *x, enum ibv_transport_type transport)
{
	memset(x, 0, sizeof(*x));
	wc_rig_new(&x->r);
	qsm_list_init(&x->r.f->dq);
	x->dev.transport_type = transport;
	x->verbs.device = &x->dev;
	x->verbs.ops.post_send = drain_fake_post_send;
	x->qp.context = &x->verbs;
	x->cm.verbs = &x->verbs;
	x->cm.qp = &x->qp;
	x->r.id->cm = &x->cm;
	x->r.id->cq = x->r.c;
	x->r.id->qp_rts = true;
	x->r.c->hot = false;   /* armed, waiting for its event */
	x->r.f->hot = 0;
	modify_calls = marker_posts = 0;
	modify_state = -1;
}

/* The fabric's list of n WRs for one doorbell, as send_lists_reserve() makes it */
static void drain_rig_lists(struct drain_rig *x, unsigned n)
{
	x->r.f->swr = calloc(n, sizeof(*x->r.f->swr));
	x->r.f->ssge = calloc(n * QSM_FABRIC_MAX_SGE, sizeof(*x->r.f->ssge));
	ck_assert(x->r.f->swr && x->r.f->ssge);
	x->r.f->swr_cap = n;
}

static void drain_rig_free(struct drain_rig *x)
{
	free(x->r.f->swr);
	free(x->r.f->ssge);
	wc_rig_free(&x->r);
}

/* IB and RoCE: ERR, then the marker, a signaled send that the device flushes behind the rest;
 * its completion is what drains the QP (as the kernel's ib_drain_qp). */
START_TEST(test_drain_on_ib_moves_the_qp_to_err_and_posts_a_marker)
{
	struct drain_rig x;

	drain_rig_new(&x, IBV_TRANSPORT_IB);
	ck_assert_int_eq(qsm_rc_drain(x.r.id), 0);
	ck_assert_int_eq(modify_calls, 1);
	ck_assert_int_eq(modify_state, IBV_QPS_ERR);
	ck_assert_int_eq(marker_posts, 1);
	ck_assert_uint_eq(marker_wr_id, TAG_MARKER | x.r.id->qp_key);
	ck_assert(x.r.id->draining && x.r.id->qp_err && !x.r.id->on_dq);
	ck_assert_uint_eq(x.r.c->drains, 0);
	ck_assert(!x.r.c->hot);
	wc_rig_free(&x.r);
}
END_TEST

/* libsiw's siw_post_send: the WR it refuses is *bad_wr, but with WRs before it queued on an idle
 * send queue it returns its doorbell's 0.  Here the second of the list is refused so. */
static int siw_like_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	*bad = wr->next;
	return 0;
}

/* A set bad_wr is the refusal whatever the provider returned: the WRs before it posted (their
 * slots held), the refused one and those behind it not (-EINVAL, *posted says how many went). */
START_TEST(test_post_send_takes_a_set_bad_wr_as_a_refusal_even_when_the_provider_returns_0)
{
	struct drain_rig x;
	struct qsm_fabric_wr wrs[3];
	int posted = -1;
	uint32_t tail;

	drain_rig_new(&x, IBV_TRANSPORT_IWARP);
	x.verbs.ops.post_send = siw_like_post_send;
	drain_rig_lists(&x, 3);
	for (int i = 0; i < 3; i++)
		wrs[i] = (struct qsm_fabric_wr){ .wr_id = 1 + (uint64_t)i, .opcode = QSM_WR_SEND,
						 .flags = QSM_POST_SIGNALED };
	tail = x.r.id->wq[WQ_SEND].tail;
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, wrs, 3, &posted), -EINVAL);
	ck_assert_int_eq(posted, 1);
	ck_assert_uint_eq(x.r.id->wq[WQ_SEND].tail - tail, 1);
	drain_rig_free(&x);
}
END_TEST

/* A QP on an SRQ: a send posted heats its send CQ, which was cold (armed): its receives complete
 * on the SRQ's CQ, hot under load, and epoll, which would report the send CQ's event, is asked
 * only every few calls while a CQ is hot.  A QP of its own receives leaves its CQ as it is. */
START_TEST(test_a_send_on_an_srq_qp_heats_its_cold_send_cq)
{
	struct drain_rig x;
	struct qsm_fabric_wr wr = { .wr_id = 1, .opcode = QSM_WR_SEND, .flags = QSM_POST_SIGNALED };
	int fake_srq;

	drain_rig_new(&x, IBV_TRANSPORT_IB);
	drain_rig_lists(&x, 1);
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, &wr, 1, NULL), 0);
	ck_assert(!x.r.c->hot && x.r.f->hot == 0);
	x.r.id->srq = (struct qsm_fsrq *)&fake_srq;
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, &wr, 1, NULL), 0);
	ck_assert(x.r.c->hot && x.r.f->hot == 1);
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, &wr, 1, NULL), 0);   /* hot already: once */
	ck_assert_int_eq(x.r.f->hot, 1);
	x.r.id->srq = NULL;
	drain_rig_free(&x);
}
END_TEST

static struct ibv_send_wr seen_wr;

static int copying_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	(void)bad;
	seen_wr = *wr;
	return 0;
}

/* SEND_WITH_INV carries the rkey to invalidate in invalidate_rkey, as verbs say, and in
 * wr.rdma.rkey too, where libsiw reads it (rdma-core's providers/siw: it sent STag 0 to be
 * invalidated, and the peer's receive failed).  LOCAL_INV: invalidate_rkey only. */
START_TEST(test_send_with_inv_names_its_rkey_where_every_provider_reads_it)
{
	struct drain_rig x;
	struct qsm_fabric_wr wr = { .wr_id = 1, .opcode = QSM_WR_SEND_WITH_INV, .imm_data = 0x1234abcd,
				    .flags = QSM_POST_SIGNALED };

	drain_rig_new(&x, IBV_TRANSPORT_IWARP);
	x.verbs.ops.post_send = copying_post_send;
	drain_rig_lists(&x, 2);
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, &wr, 1, NULL), 0);
	ck_assert_int_eq(seen_wr.opcode, IBV_WR_SEND_WITH_INV);
	ck_assert_uint_eq(seen_wr.invalidate_rkey, 0x1234abcd);
	ck_assert_uint_eq(seen_wr.wr.rdma.rkey, 0x1234abcd);
	ck_assert_uint_eq(seen_wr.wr.rdma.remote_addr, 0);
	wr.opcode = QSM_WR_LOCAL_INV;
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, &wr, 1, NULL), 0);
	ck_assert_int_eq(seen_wr.opcode, IBV_WR_LOCAL_INV);
	ck_assert_uint_eq(seen_wr.invalidate_rkey, 0x1234abcd);
	ck_assert_uint_eq(seen_wr.wr.rdma.rkey, 0);
	drain_rig_free(&x);
}
END_TEST

static int post_sends_seen;

static int counting_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	(void)bad;
	for (; wr; wr = wr->next)
		post_sends_seen++;
	return 0;
}

/* soft-iWARP's max_sge_rd is 1 and libsiw posts a READ of more SGEs filling the first only (a
 * short read that completes with success): the fabric refuses it as a device refuses at its
 * bad_wr, the WRs before it posted, nothing of it or behind it given to the provider. */
START_TEST(test_post_send_refuses_a_read_of_more_sges_than_the_device_reads_into)
{
	struct drain_rig x;
	struct qsm_fabric_wr wrs[3];
	struct qsm_fabric_sge sg[2] = { { .addr = 0x1000, .length = 4 }, { .addr = 0x2000, .length = 4 } };
	int posted = -1;
	uint32_t tail;

	drain_rig_new(&x, IBV_TRANSPORT_IWARP);
	x.verbs.ops.post_send = counting_post_send;
	x.r.id->max_sge_rd = 1;
	drain_rig_lists(&x, 3);
	wrs[0] = (struct qsm_fabric_wr){ .wr_id = 1, .opcode = QSM_WR_SEND, .flags = QSM_POST_SIGNALED };
	wrs[1] = (struct qsm_fabric_wr){ .wr_id = 2, .opcode = QSM_WR_RDMA_READ, .sg_list = sg, .num_sge = 2,
					 .flags = QSM_POST_SIGNALED };
	wrs[2] = (struct qsm_fabric_wr){ .wr_id = 3, .opcode = QSM_WR_SEND, .flags = QSM_POST_SIGNALED };
	post_sends_seen = 0;
	tail = x.r.id->wq[WQ_SEND].tail;
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, wrs, 3, &posted), -EINVAL);
	ck_assert_int_eq(posted, 1);
	ck_assert_int_eq(post_sends_seen, 1);
	ck_assert_uint_eq(x.r.id->wq[WQ_SEND].tail - tail, 1);
	/* first in the list: nothing posted at all */
	posted = -1;
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, wrs + 1, 2, &posted), -EINVAL);
	ck_assert_int_eq(posted, 0);
	ck_assert_int_eq(post_sends_seen, 1);
	/* one SGE is what it reads into */
	wrs[1].num_sge = 1;
	ck_assert_int_eq(qsm_rc_post_send(x.r.id, wrs + 1, 2, &posted), 0);
	ck_assert_int_eq(posted, 2);
	ck_assert_int_eq(post_sends_seen, 3);
	ck_assert_uint_eq(x.r.id->wq[WQ_SEND].tail - tail, 3);
	drain_rig_free(&x);
}
END_TEST

/*
 * iWARP (soft-iWARP never flushes a WR posted in ERR: tests/vm/README.md): no marker; the first
 * poll after the drain that finds the QP's CQ empty stands for it.  The device's own reports
 * (taken before it, in order) come out as they are; what it will never report (WRs posted into
 * the rings after siw left RTS by itself) is flushed by the fabric, each once, then DRAINED; a
 * late report of the device is stale.
 */
START_TEST(test_drain_on_iwarp_posts_no_marker_and_drains_once_a_poll_finds_the_cq_empty)
{
	struct drain_rig x;
	struct qsm_fabric_cqe out[16];
	struct qsm_fabric_event ev;
	uint64_t r0, r1, s0, s1;

	drain_rig_new(&x, IBV_TRANSPORT_IWARP);
	r0 = wc_rig_post(&x.r, WQ_RECV, 100, QSM_WR_RECV, true);
	r1 = wc_rig_post(&x.r, WQ_RECV, 101, QSM_WR_RECV, true);
	s0 = wc_rig_post(&x.r, WQ_SEND, 200, QSM_WR_SEND, true);
	(void)wc_rig_post(&x.r, WQ_SEND, 201, QSM_WR_RDMA_WRITE, true);   /* never reported */
	(void)wc_rig_post(&x.r, WQ_RECV, 102, QSM_WR_RECV, true);         /* never reported */
	/* in the CQ when the modify returns: a receive that came, the rings' flushes (SQ first) */
	wc_push(r0, IBV_WC_SUCCESS, WC_QPN, 8, 0, 0);
	wc_push(s0, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	wc_push(r1, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	ck_assert_int_eq(qsm_rc_drain(x.r.id), 0);
	ck_assert_int_eq(modify_calls, 1);
	ck_assert_int_eq(modify_state, IBV_QPS_ERR);
	ck_assert_int_eq(marker_posts, 0);
	ck_assert(x.r.id->draining && x.r.id->qp_err && x.r.id->on_dq);
	ck_assert_uint_eq(x.r.c->drains, 1);
	ck_assert(x.r.c->hot && x.r.f->hot == 1);   /* polled without waiting for an event */
	/* a poll that fills its batch has not seen the CQ empty: not drained yet */
	ck_assert_int_eq(qsm_rc_poll_cqs(x.r.f, out, 2), 2);
	ck_assert_uint_eq(out[0].wc.wr_id, 100);
	ck_assert_int_eq(out[0].wc.status, QSM_WC_SUCCESS);
	ck_assert_uint_eq(out[1].wc.wr_id, 200);
	ck_assert_int_eq(out[1].wc.status, QSM_WC_WR_FLUSH_ERR);
	ck_assert(x.r.id->draining && x.r.id->on_dq && !x.r.id->flush_all);
	/* this one takes the last report and finds the CQ empty */
	ck_assert_int_eq(qsm_rc_poll_cqs(x.r.f, out, 16), 1);
	ck_assert_uint_eq(out[0].wc.wr_id, 101);
	ck_assert_int_eq(out[0].wc.status, QSM_WC_WR_FLUSH_ERR);
	ck_assert(!x.r.id->draining && !x.r.id->on_dq && x.r.id->flush_all && x.r.id->drained_due);
	ck_assert_uint_eq(x.r.c->drains, 0);
	ck_assert(qsm_list_empty(&x.r.f->dq));
	ck_assert(x.r.id->on_lq);
	/* the rest, ours: the send queue's, then the receive queue's; then DRAINED alone */
	ck_assert_int_eq(qsm_rc_lq_take(x.r.f, &ev, out, 16), 2);
	ck_assert_uint_eq(out[0].wc.wr_id, 201);
	ck_assert_int_eq(out[0].wc.opcode, QSM_WR_RDMA_WRITE);
	ck_assert_int_eq(out[0].wc.status, QSM_WC_WR_FLUSH_ERR);
	ck_assert_uint_eq(out[1].wc.wr_id, 102);
	ck_assert_int_eq(out[1].wc.status, QSM_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(qsm_rc_lq_take(x.r.f, &ev, out, 16), 0);
	ck_assert_int_eq(ev.event, QSM_EV_DRAINED);
	ck_assert_ptr_eq(ev.id, x.r.id);
	ck_assert_ptr_eq(ev.owner, &x.r);
	ck_assert_int_eq(qsm_rc_lq_take(x.r.f, &ev, out, 16), -EAGAIN);
	ck_assert_uint_eq(x.r.f->wc_synth, 2);
	/* the stream's end flushes the rings again later (siw_qp_llp_close): stale */
	s1 = x.r.id->qp_key | 1;
	wc_in_len = wc_in_next = 0;
	wc_push(s1, IBV_WC_WR_FLUSH_ERR, WC_QPN, 0, 0, 0);
	ck_assert_int_eq(qsm_rc_poll_cqs(x.r.f, out, 16), 0);
	ck_assert_uint_eq(x.r.f->wc_stale, 1);
	wc_rig_free(&x.r);
}
END_TEST

/* A drain on iWARP ended by its timeout: flush_qp takes the WRs, the QP waits for no poll. */
START_TEST(test_flush_qp_ends_an_iwarp_drain_waiting_for_its_cq)
{
	struct drain_rig x;
	struct qsm_fabric_cqe out[16];

	drain_rig_new(&x, IBV_TRANSPORT_IWARP);
	(void)wc_rig_post(&x.r, WQ_RECV, 100, QSM_WR_RECV, true);
	ck_assert_int_eq(qsm_rc_drain(x.r.id), 0);
	ck_assert(x.r.id->on_dq);
	ck_assert_int_eq(qsm_rc_flush_qp(x.r.id, out, 16), 1);
	ck_assert(!x.r.id->on_dq && !x.r.id->draining && !x.r.id->drained_due);
	ck_assert_uint_eq(x.r.c->drains, 0);
	ck_assert(qsm_list_empty(&x.r.f->dq));
	ck_assert_int_eq(qsm_rc_poll_cqs(x.r.f, out, 16), 0);
	ck_assert(!x.r.id->on_lq);
	wc_rig_free(&x.r);
}
END_TEST

/* The longest the kernel's CM takes to end a connect by itself: 1 + 15 sends of a REQ (or REP),
 * each waiting 2 packet lifetimes and the CM response time (2^(t-8) ms each). */
START_TEST(test_cm_timeout_covers_the_kernel_cms_retries)
{
	struct ibv_device dev = { .transport_type = IBV_TRANSPORT_IB };
	struct ibv_context verbs = { .device = &dev };
	struct ibv_sa_path_rec path = { .packet_life_time = 20 };
	struct rdma_cm_id cm = { .verbs = &verbs };
	struct qsm_fid id = { .cm = &cm };

	ck_assert_uint_eq(qsm_rc_cm_timeout_ms(&id), 16 * (2 * 1024 + 4096));   /* RoCE's lifetime */
	cm.route.path_rec = &path;
	cm.route.num_paths = 1;
	ck_assert_uint_eq(qsm_rc_cm_timeout_ms(&id), 16 * (2 * 4096 + 4096));   /* the path's */
	path.packet_life_time = 14;
	ck_assert_uint_eq(qsm_rc_cm_timeout_ms(&id), 16 * (2 * 1024 + 4096));   /* never below RoCE's */
	dev.transport_type = IBV_TRANSPORT_IWARP;
	ck_assert_uint_eq(qsm_rc_cm_timeout_ms(&id), 127000);                  /* TCP's SYN retries */
	ck_assert_uint_eq(qsm_rc_cm_timeout_ms(NULL), 0);
}
END_TEST

static Suite *rdmacm_suite(void)
{
	Suite *s = suite_create("rdmacm");
	TCase *t = tcase_create("cm_event");

	tcase_add_test(t, test_every_known_cm_event_maps_to_the_qsm_event_of_its_name);
	tcase_add_test(t, test_out_of_range_cm_event_maps_to_cm_unknown);
	tcase_add_test(t, test_stale_connection_reject_is_rejected_stale_on_ib_only);
	suite_add_tcase(s, t);
	t = tcase_create("pending");
	tcase_add_test(t, test_completions_of_posted_wrs_survive_allocation_failures);
	tcase_add_test(t, test_drop_releases_only_what_is_queued_for_that_id_or_device);
	suite_add_tcase(s, t);
	t = tcase_create("cq_pool");
	tcase_add_test(t, test_cq_pool_places_1000_default_qps_on_4_cqs_and_frees_the_idle_extras);
	tcase_add_test(t, test_cq_pool_keeps_its_cqs_across_a_reconnect_storm);
	tcase_add_test(t, test_cq_pool_refuses_with_enomem_beyond_max_cq_or_max_cqe);
	tcase_add_test(t, test_cq_pool_takes_a_new_cq_when_a_resize_fails);
	tcase_add_test(t, test_cq_trim_tick_runs_only_while_a_pool_has_an_empty_cq_to_trim);
	suite_add_tcase(s, t);
	t = tcase_create("monitor");
	tcase_add_test(t, test_uevent_of_an_infiniband_device_asks_for_a_scan_and_nothing_else_does);
	tcase_add_test(t, test_uevent_cut_short_anywhere_is_read_within_its_length);
	tcase_add_test(t, test_rtnetlink_new_addresses_come_out_as_socket_addresses);
	tcase_add_test(t, test_rtnetlink_messages_that_name_no_usable_address_give_none);
	tcase_add_test(t, test_rtnetlink_lengths_that_lie_are_never_followed_past_the_datagram);
	tcase_add_test(t, test_monitor_parsers_take_garbage_safely);
	suite_add_tcase(s, t);
	t = tcase_create("completions");
	tcase_add_test(t, test_poll_completes_each_wr_once_and_drops_stale_tags);
	tcase_add_test(t, test_a_cold_cq_whose_notification_was_lost_is_polled_at_the_next_wake_up);
	tcase_add_test(t, test_a_check_of_the_cold_cqs_is_due_a_second_after_the_last_posts);
	tcase_add_test(t, test_poll_reports_errors_with_the_wrs_opcode_and_drops_all_after_the_marker);
	tcase_add_test(t, test_a_probe_completes_to_no_ulp_and_its_failure_is_the_ids_wc_error);
	tcase_add_test(t, test_flush_qp_takes_every_wr_left_once_and_the_providers_reports_after_are_stale);
	tcase_add_test(t, test_a_send_completed_ahead_of_a_read_before_it_leaves_the_read_to_complete_once);
	tcase_add_test(t, test_flush_qp_skips_a_send_that_completed_ahead_of_the_read_before_it);
	tcase_add_test(t, test_drain_on_ib_moves_the_qp_to_err_and_posts_a_marker);
	tcase_add_test(t, test_drain_on_iwarp_posts_no_marker_and_drains_once_a_poll_finds_the_cq_empty);
	tcase_add_test(t, test_post_send_takes_a_set_bad_wr_as_a_refusal_even_when_the_provider_returns_0);
	tcase_add_test(t, test_send_with_inv_names_its_rkey_where_every_provider_reads_it);
	tcase_add_test(t, test_a_send_on_an_srq_qp_heats_its_cold_send_cq);
	tcase_add_test(t, test_post_send_refuses_a_read_of_more_sges_than_the_device_reads_into);
	tcase_add_test(t, test_flush_qp_ends_an_iwarp_drain_waiting_for_its_cq);
	tcase_add_test(t, test_cm_timeout_covers_the_kernel_cms_retries);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(rdmacm_suite)
