/* rdma-qsm: a class's shared receive queue on the sim fabric: one per device per ctx, filled by
 * srq_low, receives to whichever queue a message lands on, LAST_WQE in the drain, the limit,
 * and the SRQ going with its device. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <qsm/qsm.h>
#include <qsm/sim.h>

#include "check_main.h"
#include "harness.h"

#define NBUF 8
#define NCLI 3

static struct qsm_sim *sim;
static struct qsm_ctx *sctx, *cctx;
static struct harness world = { .ctx = { &cctx, &sctx }, .bound = 10000, .now_ns = 1000 * HARNESS_MS };
static struct sockaddr_in addr;

/* The server's buffers, registered on its device once (a pool), posted to its SRQ. */
static char sbuf[NBUF][32];
static struct qsm_pool *spool;
static bool posted[NBUF];
static int lows, srq_recvs, flushed, last_wqe_edges;
static struct qsm_srq *seen_srq;
static struct qsm_conn *last_q;   /* the queue of the last SRQ receive */
static struct qsm_conn *srv_q[NCLI];
static int nsrv;

static int post_buf(struct qsm_srq *s, int i)
{
	uint32_t lkey, rkey;
	struct qsm_sge sge;
	int r;

	if (qsm_pool_srq_keys(spool, s, &lkey, &rkey) < 0)
		return -ENODEV;
	sge = (struct qsm_sge){ (uintptr_t)sbuf[i], sizeof(sbuf[i]), lkey };
	r = qsm_srq_post_recv(s, (uint64_t)i, &sge, 1);
	if (r == 0)
		posted[i] = true;
	return r;
}

static void srv_srq_low(struct qsm_srq *s)
{
	lows++;
	seen_srq = s;
	ck_assert_ptr_eq(qsm_srq_ctx(s), sctx);
	ck_assert_str_eq(qsm_srq_device_name(s), "sim0");
	for (int i = 0; i < NBUF; i++)
		if (!posted[i])
			ck_assert_int_eq(post_buf(s, i), 0);
}

static int srv_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	ck_assert_ptr_nonnull(qsm_conn_srq(q));
	ck_assert_ptr_eq(qsm_conn_srq(q), seen_srq);   /* one SRQ for every queue on the device */
	/* its receives are the SRQ's */
	ck_assert_int_eq(qsm_conn_post_recv(q, 1, &(struct qsm_sge){ 0, 0, 0 }, 0), -EINVAL);
	/* and it has no receive queue to size; its send queue's depth is its own */
	ck_assert_int_eq(qsm_conn_set_qp_depth(q, 0, 8), -EINVAL);
	ck_assert_int_eq(qsm_conn_set_qp_depth(q, 8, 0), 0);
	if (nsrv < NCLI)
		srv_q[nsrv++] = q;
	return 0;
}

static int srv_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	ck_assert_uint_eq(wc->wc_flags & QSM_WC_SRQ, QSM_WC_SRQ);
	posted[wc->wr_id] = false;
	if (wc->status == QSM_WC_WR_FLUSH_ERR) {
		flushed++;
		return 0;
	}
	ck_assert_int_eq(wc->status, QSM_WC_SUCCESS);
	srq_recvs++;
	last_q = q;
	return 0;
}

static int srv_on_last_wqe(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)q;
	if (ev->event == QSM_EV_LAST_WQE)
		last_wqe_edges++;
	return 0;
}

static const struct qsm_class srv_class = {
	.name = "srq-target",
	.qp_ready = srv_qp_ready,
	.completion = srv_completion,
	.srq = { .max_wr = NBUF, .limit = 3 },
	.srq_low = srv_srq_low,
	.passive = { [QSM_ACCEPT_LIVE] = { .on_event = srv_on_last_wqe },
		     [QSM_ACCEPT_DRAINING] = { .on_event = srv_on_last_wqe } },
};

static char cbuf[NCLI][32];
static struct qsm_mr *cmr[NCLI];
static int cli_sends;

static int cli_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	int i = (int)(uintptr_t)qsm_conn_user(q);

	(void)ev;
	ck_assert_ptr_null(qsm_conn_srq(q));   /* its class asks for none */
	return qsm_conn_reg_mr(q, cbuf[i], sizeof(cbuf[i]), QSM_ACCESS_LOCAL_WRITE, &cmr[i]);
}

static int cli_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	(void)q;
	ck_assert_int_eq(wc->status, QSM_WC_SUCCESS);
	cli_sends++;
	return 0;
}

static const struct qsm_class cli_class = {
	.name = "srq-initiator",
	.qp_ready = cli_qp_ready,
	.completion = cli_completion,
};

static struct qsm_conn *cli[NCLI];

static void setup(void)
{
	struct qsm_fabric *f;
	struct qsm_listener *l;

	memset(posted, 0, sizeof(posted));
	lows = srq_recvs = flushed = last_wqe_edges = cli_sends = nsrv = 0;
	seen_srq = NULL;
	last_q = NULL;
	ck_assert_int_eq(qsm_sim_new(&sim), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &sctx), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &cctx), 0);
	addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(4420) };
	inet_pton(AF_INET, "192.0.2.1", &addr.sin_addr);
	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, sbuf, sizeof(sbuf), QSM_ACCESS_LOCAL_WRITE, &spool), 0);
	ck_assert_int_eq(qsm_listener_new(sctx, &(struct qsm_listener_opts){
		.addr = (struct sockaddr *)&addr, .cls = &srv_class }, &l), 0);
	for (int i = 0; i < NCLI; i++) {
		ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &cli_class,
			.dst = (struct sockaddr *)&addr, .user = (void *)(uintptr_t)i,
			.policy = { .initial_delay_ms = 3600000 } }, &cli[i]), 0);
		ck_assert_int_eq(qsm_conn_connect(cli[i]), 0);
	}
	harness_settle(&world);
	for (int i = 0; i < NCLI; i++)
		ck_assert_int_eq(qsm_conn_state(cli[i]), QSM_CM_LIVE);
	ck_assert_int_eq(nsrv, NCLI);
}

static void teardown(void)
{
	struct qsm_sim_stats st;

	qsm_ctx_free(cctx);
	qsm_pool_dereg(spool);
	qsm_ctx_free(sctx);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids + st.qps + st.device_refs + st.mrs + st.srqs, 0);
	qsm_sim_free(sim);
}

static struct qsm_counters count(struct qsm_ctx *c)
{
	struct qsm_counters k;

	ck_assert_int_eq(qsm_ctx_counters(c, &k, sizeof(k)), 0);
	return k;
}

static void send_from(int i, int n)
{
	struct qsm_sge s = { (uintptr_t)cbuf[i], 8, qsm_mr_lkey(cmr[i]) };

	for (int k = 0; k < n; k++)
		ck_assert_int_eq(qsm_conn_post_send(cli[i], (uint64_t)k, &s, 1, QSM_POST_SIGNALED), 0);
}

/* One SRQ for the three queues, filled at once; messages land in it whatever the queue. */
START_TEST(test_one_srq_per_device_serves_every_queue_of_the_class)
{
	ck_assert_int_eq(lows, 1);   /* made with the first QP, filled by srq_low */
	ck_assert_uint_eq(count(sctx).srqs_live, 1);
	ck_assert_uint_eq(count(cctx).srqs_live, 0);
	send_from(0, 1);
	send_from(1, 1);
	send_from(2, 1);
	harness_settle(&world);
	ck_assert_int_eq(srq_recvs, 3);
	ck_assert_int_eq(cli_sends, 3);
}
END_TEST

/* Below the limit: srq_low again, which posts the buffers back; the limit is armed again. */
START_TEST(test_the_limit_calls_srq_low_again_and_is_rearmed)
{
	send_from(0, 6);   /* 8 posted: 2 left, below 3 */
	harness_settle(&world);
	ck_assert_int_eq(srq_recvs, 6);
	ck_assert_int_eq(lows, 2);
	send_from(1, 6);   /* refilled to 8 by that call: below 3 again */
	harness_settle(&world);
	ck_assert_int_eq(srq_recvs, 12);
	ck_assert_int_eq(lows, 3);
	ck_assert_uint_eq(count(sctx).unexpected, 0);
}
END_TEST

/* A queue's QP errs: none of the SRQ's receives flushes, the queue hears LAST_WQE (an edge)
 * and drains; the others keep receiving from the SRQ. */
START_TEST(test_a_queue_that_drains_leaves_the_srq_to_the_others)
{
	ck_assert_int_eq(qsm_conn_disconnect(cli[0]), 0);
	harness_settle(&world);
	ck_assert_int_eq(flushed, 0);
	ck_assert_int_ge(last_wqe_edges, 1);
	ck_assert_uint_eq(count(sctx).unexpected, 0);
	ck_assert_uint_eq(count(sctx).srqs_live, 1);
	send_from(1, 2);
	harness_settle(&world);
	ck_assert_int_eq(srq_recvs, 2);
}
END_TEST

/* Device removal: the queues let go, then the SRQ goes with the device's registry entry. */
START_TEST(test_device_removal_releases_the_srq)
{
	struct qsm_sim_stats st;

	ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
	harness_settle(&world);
	ck_assert_uint_eq(count(sctx).srqs_live, 0);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.srqs, 0);
	ck_assert_int_eq(qsm_sim_device_state(sim, "sim0"), QSM_SIM_DEVICE_GONE);
}
END_TEST

/* A QP goes (its queue destroyed) with completions of receives it took from the SRQ not yet
 * taken: they are discarded with it, as ibv_destroy_qp cleans its CQEs, and their slots of
 * srq.max_wr are free again (the receives are gone: the rdmacm fabric frees the slot when it
 * polls their CQE and finds the QP gone). */
START_TEST(test_receives_discarded_with_their_qp_free_their_srq_slots)
{
	struct qsm_sge sge = { (uintptr_t)sbuf[0], sizeof(sbuf[0]), 0 };
	uint32_t rkey;
	int ok = 0;

	send_from(0, 1);   /* which queue is cli[0]'s peer; 7 of 8 posted then */
	harness_settle(&world);
	ck_assert_int_eq(srq_recvs, 1);
	ck_assert_ptr_nonnull(last_q);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_HOLD, 1000), 0);
	send_from(0, 2);   /* its QP takes 2 more: 5 posted, 2 completions held */
	ck_assert_int_eq(qsm_conn_destroy(last_q), 0);
	harness_settle(&world);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_HOLD, 0), 0);
	ck_assert_int_ge(qsm_sim_release(sim), 0);
	harness_settle(&world);
	ck_assert_int_eq(srq_recvs, 1);   /* discarded: no completion */
	ck_assert_int_eq(qsm_pool_srq_keys(spool, seen_srq, &sge.lkey, &rkey), 0);
	/* 5 held: 3 more go, the 4th is -ENOBUFS */
	while (ok < NBUF && qsm_srq_post_recv(seen_srq, (uint64_t)(100 + ok), &sge, 1) == 0)
		ok++;
	ck_assert_int_eq(ok, 3);
	ck_assert_int_eq(qsm_srq_post_recv(seen_srq, 200, &sge, 1), -ENOBUFS);
}
END_TEST

static Suite *srq_suite(void)
{
	Suite *s = suite_create("srq");
	TCase *t = tcase_create("srq");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_one_srq_per_device_serves_every_queue_of_the_class);
	tcase_add_test(t, test_the_limit_calls_srq_low_again_and_is_rearmed);
	tcase_add_test(t, test_a_queue_that_drains_leaves_the_srq_to_the_others);
	tcase_add_test(t, test_device_removal_releases_the_srq);
	tcase_add_test(t, test_receives_discarded_with_their_qp_free_their_srq_slots);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(srq_suite)
