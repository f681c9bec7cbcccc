/* rdma-qsm tests: an id let go while its iWARP connect is outstanding (src/fabric/rdmacm/ids.c,
 * qsm_rc_destroy_id).  The kernel's iw_cm makes rdma_destroy_id() wait for such a connect's
 * outcome, up to the provider's connect timeout: the fabric parks the id instead and destroys
 * it at its next event, which the ctx counts as an event nobody owns.  On the fabric's own code
 * over bench/fake_rdmacm.c's provider, whose CM answers no connect (prov.connect_silent) and
 * reports what the test says through the CM channel (fake_cm_event). */
#include <check.h>

#include <qsm/ctx.h>

#include "check_main.h"
#include "fake_rdmacm.h"

static const struct qsm_class park_class = {
	.name = "park",
	.super = &qsm_base_class,
	.qp = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
};

static struct qsm_ctx *ctx;
static struct qsm_conn *q;
static struct rc_fabric *f;

/* a queue in CONNECTING on a device of transport t, and its kernel id */
static struct rdma_cm_id *connecting(enum ibv_transport_type t)
{
	struct qsm_fid *id;

	ck_assert_int_eq(fake_rdmacm_connecting(&park_class, t, &ctx, &q, &f), 0);
	ck_assert_ptr_nonnull(f->ids.next);
	/* the queue's id: the fabric's only one (the device's sentinel is the fake's own) */
	id = qsm_container_of(f->ids.next, struct qsm_fid, node);
	ck_assert_ptr_eq(id->owner, (void *)q);
	prov.watch = id->cm;   /* the fabric's own ids (a context's pin, probes) are not counted */
	return id->cm;
}

/* the queue destroyed: its kernel id with it, nothing parked */
static void destroyed_at_once(void)
{
	ck_assert_int_eq(qsm_conn_destroy(q), 0);
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(prov.watch_destroyed, 1);
	ck_assert_uint_eq(f->parked, 0);
	qsm_ctx_free(ctx);
}

START_TEST(test_an_iwarp_id_let_go_while_connecting_is_destroyed_at_its_connects_outcome)
{
	struct rdma_cm_id *cm = connecting(IBV_TRANSPORT_IWARP);
	struct qsm_counters c0 = fake_counters(ctx), c1;

	ck_assert_int_eq(qsm_conn_destroy(q), 0);
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(prov.watch_destroyed, 0);   /* parked: a destroy now would wait */
	ck_assert_uint_eq(f->parked, 1);
	fake_cm_event(cm, RDMA_CM_EVENT_CONNECT_ERROR, -110);
	fake_drain(ctx, 1000);
	c1 = fake_counters(ctx);
	ck_assert_uint_eq(prov.watch_destroyed, 1);   /* the outcome came: gone */
	ck_assert_uint_eq(f->unparked, 1);
	ck_assert_uint_eq(c1.orphans - c0.orphans, 1);   /* reported, owned by nobody */
	ck_assert_uint_eq(c1.unexpected, 0);
	ck_assert_ptr_eq(f->ids.next, &f->ids);
	qsm_ctx_free(ctx);
	ck_assert_uint_eq(prov.watch_destroyed, 1);
}
END_TEST

START_TEST(test_an_addr_change_is_no_outcome_the_id_stays_parked)
{
	struct rdma_cm_id *cm = connecting(IBV_TRANSPORT_IWARP);
	struct qsm_counters c0 = fake_counters(ctx);

	ck_assert_int_eq(qsm_conn_destroy(q), 0);
	fake_cm_event(cm, RDMA_CM_EVENT_ADDR_CHANGE, 0);
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(prov.watch_destroyed, 0);
	ck_assert_uint_eq(fake_counters(ctx).orphans - c0.orphans, 1);
	fake_cm_event(cm, RDMA_CM_EVENT_REJECTED, 0);
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(prov.watch_destroyed, 1);
	ck_assert_uint_eq(fake_counters(ctx).orphans - c0.orphans, 2);
	qsm_ctx_free(ctx);
}
END_TEST

START_TEST(test_a_parked_id_goes_with_the_fabric)
{
	connecting(IBV_TRANSPORT_IWARP);
	ck_assert_int_eq(qsm_conn_destroy(q), 0);
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(prov.watch_destroyed, 0);
	qsm_ctx_free(ctx);   /* no outcome ever came: destroyed now, whatever it waits for */
	ck_assert_uint_eq(prov.watch_destroyed, 1);
}
END_TEST

START_TEST(test_an_ib_id_is_destroyed_at_once_while_connecting)
{
	connecting(IBV_TRANSPORT_IB);   /* the IB CM cancels a connect: nothing waits */
	destroyed_at_once();
}
END_TEST

START_TEST(test_an_iwarp_id_whose_connect_was_answered_is_destroyed_at_once)
{
	struct rdma_cm_id *cm = connecting(IBV_TRANSPORT_IWARP);

	fake_cm_event(cm, RDMA_CM_EVENT_ESTABLISHED, 0);
	fake_drain(ctx, 1000);
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);
	destroyed_at_once();
}
END_TEST

START_TEST(test_a_connect_the_cm_gave_up_on_releases_the_id_at_once_and_the_queue_retries)
{
	struct rdma_cm_id *cm = connecting(IBV_TRANSPORT_IWARP);

	/* the CM's own end of the connect (its timeout) is its outcome: the queue releases the id,
	 * destroyed at once, and waits to retry */
	fake_cm_event(cm, RDMA_CM_EVENT_UNREACHABLE, -110);
	fake_drain(ctx, 1000);
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_RECONNECT_WAIT);
	ck_assert_uint_eq(prov.watch_destroyed, 1);   /* the outcome came first: no park */
	ck_assert_uint_eq(f->parked, 0);
	qsm_ctx_free(ctx);
}
END_TEST

static Suite *park_suite(void)
{
	Suite *s = suite_create("park");
	TCase *tc = tcase_create("park");

	tcase_add_test(tc, test_an_iwarp_id_let_go_while_connecting_is_destroyed_at_its_connects_outcome);
	tcase_add_test(tc, test_an_addr_change_is_no_outcome_the_id_stays_parked);
	tcase_add_test(tc, test_a_parked_id_goes_with_the_fabric);
	tcase_add_test(tc, test_an_ib_id_is_destroyed_at_once_while_connecting);
	tcase_add_test(tc, test_an_iwarp_id_whose_connect_was_answered_is_destroyed_at_once);
	tcase_add_test(tc, test_a_connect_the_cm_gave_up_on_releases_the_id_at_once_and_the_queue_retries);
	suite_add_tcase(s, tc);
	return s;
}

QSM_CHECK_MAIN(park_suite)
