/* rdma-qsm tests: completions delivered straight from the rdmacm fabric's poll to the class's
 * handler (src/fabric/fabric.h, "Completions delivered straight"), on the fabric's own code over
 * bench/fake_rdmacm.c's provider: order, the budget, and what a handler may do on the way
 * (refuse, destroy its queue, queue a downcall) or an error completion does, each against what
 * the batch path did before: the same completions, in the same order, nothing after a queue's
 * end, every WR completed once. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include <qsm/ctx.h>
#include <qsm/data.h>

#include "check_main.h"
#include "fake_rdmacm.h"

#define MAXSEEN 4096

/* what the handler saw, and what it does at the completion numbered `at` (from 1) */
static struct {
	uint64_t wr_id[MAXSEEN];
	int status[MAXSEEN];
	struct qsm_wc wc[MAXSEEN];   /* all of it */
	unsigned n;
	unsigned at;
	enum { NOTHING, REFUSE, DESTROY, DISCONNECT } act;
	int act_ret;
	unsigned fifo_seen;   /* trace records of the queue after the act, before the next completion */
	unsigned after_act;   /* completions the handler saw after it acted */
	bool acted;
} seen;

static int on_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	ck_assert_uint_lt(seen.n, MAXSEEN);
	seen.wr_id[seen.n] = wc->wr_id;
	seen.status[seen.n] = wc->status;
	seen.wc[seen.n] = *wc;
	seen.n++;
	if (seen.acted)
		seen.after_act++;
	if (seen.n != seen.at)
		return 0;
	seen.acted = true;
	switch (seen.act) {
	case REFUSE:
		return -1;
	case DESTROY:
		seen.act_ret = qsm_conn_destroy(q);
		break;
	case DISCONNECT:
		seen.act_ret = qsm_conn_disconnect(q);
		break;
	case NOTHING:
		break;
	}
	return 0;
}

static const struct qsm_class straight_class = {
	.name = "straight",
	.qp = { .max_send_wr = 16, .max_recv_wr = FAKE_ROUND, .max_send_sge = 1, .max_recv_sge = 1 },
	.completion = on_completion,
};

/* what the trace says happened to the queue, in order with the completions */
static char edges[64][64];
static unsigned nedges, edge_at[64];

static void trace(const struct qsm_trace_record *r, void *arg)
{
	(void)arg;
	if (nedges < 64 && strcmp(r->kind, "device") != 0) {
		snprintf(edges[nedges], sizeof(edges[0]), "%s --%s--> %s", r->from, r->event, r->to);
		edge_at[nedges++] = seen.n;
	}
}

static struct qsm_ctx *ctx;
static struct qsm_conn *q;
static struct rc_fabric *f;

static void live(unsigned posts)
{
	struct qsm_sge sge = { .addr = 4096, .length = 4096, .lkey = 1 };

	memset(&seen, 0, sizeof(seen));
	nedges = 0;
	ck_assert_int_eq(fake_rdmacm_live(&straight_class, &ctx, &q, &f), 0);
	for (unsigned i = 0; i < posts; i++)
		ck_assert_int_eq(qsm_conn_post_recv(q, 1000 + i, &sge, 1), 0);
	qsm_ctx_set_trace(ctx, trace, NULL);
	fake_cq_event(f);
}

static void counters(struct qsm_counters *c)
{
	qsm_ctx_counters(ctx, c, sizeof(*c));
}

START_TEST(test_successes_reach_the_handler_in_post_order_straight_from_the_poll)
{
	struct qsm_counters c0, c1;

	live(100);
	counters(&c0);
	fake_drain(ctx, 10000);
	counters(&c1);
	ck_assert_uint_eq(seen.n, 100);
	for (unsigned i = 0; i < 100; i++) {
		ck_assert_uint_eq(seen.wr_id[i], 1000 + i);
		ck_assert_int_eq(seen.status[i], QSM_WC_SUCCESS);
	}
	ck_assert_uint_eq(c1.completions - c0.completions, 100);
	/* counted as a batch's are: as if each had passed the FIFO */
	ck_assert_uint_eq(c1.popped - c0.popped, 100);
	ck_assert_uint_eq(c1.fabric_events - c0.fabric_events, 100);
	ck_assert_uint_ge(f->wc_ok, 100);
	ck_assert_uint_eq(f->wc_straight, 100);   /* none of them through the batch */
	qsm_ctx_free(ctx);
}
END_TEST

START_TEST(test_a_dispatch_takes_no_more_completions_than_its_budget)
{
	live(40);
	ck_assert_int_eq(qsm_ctx_dispatch(ctx, 5), 5);
	ck_assert_uint_eq(seen.n, 5);
	ck_assert_int_eq(qsm_ctx_dispatch(ctx, 30), 30);
	ck_assert_uint_eq(seen.n, 35);
	/* less than the budget: nothing was left */
	ck_assert_int_eq(qsm_ctx_dispatch(ctx, 64), 5);
	ck_assert_uint_eq(seen.n, 40);
	for (unsigned i = 0; i < 40; i++)
		ck_assert_uint_eq(seen.wr_id[i], 1000 + i);
	qsm_ctx_free(ctx);
}
END_TEST

/* 50 receives; the handler acts at completion `at`; then everything dispatched: the counters */
static struct qsm_counters act_at(unsigned at, int act)
{
	struct qsm_counters c;

	live(50);
	seen.at = at;
	seen.act = act;
	fake_drain(ctx, 10000);
	counters(&c);
	return c;
}

START_TEST(test_a_refusal_aborts_the_queue_and_its_later_completions_are_dropped)
{
	struct qsm_counters c = act_at(7, REFUSE);

	ck_assert_uint_eq(seen.n, 7);   /* nothing after the refusal reaches the handler */
	ck_assert_uint_eq(f->wc_straight, 7);
	ck_assert_uint_eq(c.aborts, 1);   /* and q is gone: not to be touched */
	ck_assert_uint_eq(c.queues_live, 0);
	qsm_ctx_free(ctx);
}
END_TEST

START_TEST(test_a_queue_destroyed_by_its_handler_gets_nothing_more)
{
	struct qsm_counters c = act_at(3, DESTROY);

	ck_assert_int_eq(seen.act_ret, 0);
	ck_assert_uint_eq(seen.n, 3);
	ck_assert_uint_eq(c.queues_live, 0);
	/* polled in the same call after the DESTROY was queued: behind it, then dropped */
	ck_assert_uint_ge(c.dropped, 1);
	qsm_ctx_free(ctx);
}
END_TEST

START_TEST(test_a_downcall_in_a_handler_is_dispatched_before_the_next_completion)
{
	unsigned i, disc = 64;

	act_at(4, DISCONNECT);
	ck_assert_int_eq(seen.act_ret, 0);
	for (i = 0; i < nedges; i++)
		if (strstr(edges[i], "LIVE --DISCONNECT-->")) {
			disc = i;
			break;
		}
	ck_assert_msg(disc < nedges, "no LIVE --DISCONNECT--> edge");
	/* the edge came after the 4th completion and before any later one */
	ck_assert_uint_eq(edge_at[disc], 4);
	/* every receive completed once: successes first, then the drain's flushes */
	ck_assert_uint_eq(seen.n, 50);
	for (i = 0; i < 50; i++)
		ck_assert_uint_eq(seen.wr_id[i], 1000 + i);
	qsm_ctx_free(ctx);
}
END_TEST

START_TEST(test_an_error_completion_goes_after_the_successes_before_it_and_its_wc_error_after_it)
{
	unsigned i, err_edge = 64;

	live(30);
	prov.tmpl[10].status = IBV_WC_LOC_PROT_ERR;
	fake_drain(ctx, 10000);
	/* every receive completed exactly once, in order, the 11th with its error */
	ck_assert_uint_eq(seen.n, 30);
	for (i = 0; i < 30; i++)
		ck_assert_uint_eq(seen.wr_id[i], 1000 + i);
	for (i = 0; i < 10; i++)
		ck_assert_int_eq(seen.status[i], QSM_WC_SUCCESS);
	ck_assert_int_eq(seen.status[10], QSM_WC_LOC_PROT_ERR);
	for (i = 0; i < nedges; i++)
		if (strstr(edges[i], "--WC_ERROR-->")) {
			err_edge = i;
			break;
		}
	ck_assert_msg(err_edge < nedges, "no WC_ERROR edge");
	ck_assert_uint_eq(edge_at[err_edge], 11);   /* right after the error, before the next */
	qsm_ctx_free(ctx);
}
END_TEST

/* Receives that carry imm data, among plain ones: those take the poll's general way (the plain
 * ones its shortest), straight all the same, and each reaches the handler in order with exactly
 * what it carries (a plain one after one with imm data carries none). */
static bool carries_imm(unsigned i)
{
	return i % 7 == 3 || i % 11 == 5;
}

static void imm_among_plain(unsigned n)
{
	live(n);
	for (unsigned i = 0; i < n; i++)
		if (carries_imm(i)) {
			prov.tmpl[i].opcode = i % 7 == 3 ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
			prov.tmpl[i].wc_flags = IBV_WC_WITH_IMM;
			prov.tmpl[i].imm_data = 0xabc00000u + i;
		}
}

START_TEST(test_receives_with_imm_data_among_plain_ones_reach_the_handler_in_order_with_what_they_carry)
{
	uint64_t ok0;

	imm_among_plain(100);
	ok0 = f->wc_ok;
	fake_drain(ctx, 10000);
	ck_assert_uint_eq(seen.n, 100);
	for (unsigned i = 0; i < 100; i++) {
		const struct qsm_wc *w = &seen.wc[i];

		ck_assert_uint_eq(w->wr_id, 1000 + i);
		ck_assert_int_eq(w->status, QSM_WC_SUCCESS);
		ck_assert_uint_eq(w->byte_len, 64 + i);
		ck_assert_uint_eq(w->invalidated_rkey, 0);
		if (carries_imm(i)) {
			ck_assert_int_eq(w->opcode, i % 7 == 3 ? QSM_WR_RECV_RDMA_WITH_IMM : QSM_WR_RECV);
			ck_assert_uint_eq(w->wc_flags, QSM_WC_WITH_IMM);
			ck_assert_uint_eq(w->imm_data, 0xabc00000u + i);
		} else {
			ck_assert_int_eq(w->opcode, QSM_WR_RECV);
			ck_assert_uint_eq(w->wc_flags, 0);
			ck_assert_uint_eq(w->imm_data, 0);
		}
	}
	ck_assert_uint_eq(f->wc_ok - ok0, 100);   /* each success counted once, either way */
	ck_assert_uint_eq(f->wc_straight, 100);
	qsm_ctx_free(ctx);
}
END_TEST

/* A refusal of one taken the general way ends the straight path as one of a plain one does. */
START_TEST(test_a_refusal_of_a_receive_with_imm_data_aborts_the_queue)
{
	struct qsm_counters c;

	imm_among_plain(30);
	seen.at = 11;   /* wr 1010: 10 % 7 == 3 */
	seen.act = REFUSE;
	fake_drain(ctx, 10000);
	counters(&c);
	ck_assert_uint_eq(seen.n, 11);
	ck_assert_uint_eq(seen.wc[10].wc_flags, QSM_WC_WITH_IMM);
	ck_assert_uint_eq(f->wc_straight, 11);
	ck_assert_uint_eq(c.aborts, 1);
	ck_assert_uint_eq(c.queues_live, 0);
	qsm_ctx_free(ctx);
}
END_TEST

static Suite *straight_suite(void)
{
	Suite *s = suite_create("straight");
	TCase *tc = tcase_create("straight");

	tcase_add_test(tc, test_successes_reach_the_handler_in_post_order_straight_from_the_poll);
	tcase_add_test(tc, test_a_dispatch_takes_no_more_completions_than_its_budget);
	tcase_add_test(tc, test_a_refusal_aborts_the_queue_and_its_later_completions_are_dropped);
	tcase_add_test(tc, test_a_queue_destroyed_by_its_handler_gets_nothing_more);
	tcase_add_test(tc, test_a_downcall_in_a_handler_is_dispatched_before_the_next_completion);
	tcase_add_test(tc,
		       test_an_error_completion_goes_after_the_successes_before_it_and_its_wc_error_after_it);
	tcase_add_test(tc,
		       test_receives_with_imm_data_among_plain_ones_reach_the_handler_in_order_with_what_they_carry);
	tcase_add_test(tc, test_a_refusal_of_a_receive_with_imm_data_aborts_the_queue);
	suite_add_tcase(s, tc);
	return s;
}

QSM_CHECK_MAIN(straight_suite)
