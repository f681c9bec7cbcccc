/* rdma-qsm: a queue's data path on the sim fabric: MRs owned by the queue and released with its
 * device, sends/receives/RDMA through the QP, completions to the class's handler, flushes. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <qsm/qsm.h>
#include <qsm/sim.h>

#include "check_main.h"
#include "fabric/fabric.h"
#include "harness.h"

static struct qsm_sim *sim;
static struct qsm_ctx *sctx, *cctx;
static struct qsm_ctx *wctx;   /* a worker: the server's queues handed to it (spread) */
static struct harness world = { .ctx = { &cctx, &sctx, &wctx }, .bound = 10000, .now_ns = 1000 * HARNESS_MS };
static struct sockaddr_in addr;

struct buf {
	char data[64];
	struct qsm_mr *mr;
	int completions, flushed, errors;
	struct qsm_wc last, last_recv;
};

static struct buf srv, cli;
static struct qsm_conn *srv_queue;     /* the server's latest passive queue */
static int after_destroy;
static struct qsm_conn *destroyed;

static int reg(struct qsm_conn *q, struct buf *b)
{
	if (qsm_mr_valid(b->mr))
		return 0;
	if (b->mr)
		qsm_mr_dereg(b->mr);
	return qsm_conn_reg_mr(q, b->data, sizeof(b->data), QSM_ACCESS_LOCAL_WRITE |
			       QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ | QSM_ACCESS_MW_BIND, &b->mr);
}

static int post_recv(struct qsm_conn *q, struct buf *b)
{
	struct qsm_sge s = { (uintptr_t)b->data, sizeof(b->data), qsm_mr_lkey(b->mr) };

	return qsm_conn_post_recv(q, 7, &s, 1);
}

static int on_completion(struct qsm_conn *q, const struct qsm_wc *wc, struct buf *b)
{
	if (q == destroyed)
		after_destroy++;
	b->completions++;
	b->last = *wc;
	if (wc->opcode == QSM_WR_RECV || wc->opcode == QSM_WR_RECV_RDMA_WITH_IMM)
		b->last_recv = *wc;
	if (wc->status == QSM_WC_WR_FLUSH_ERR)
		b->flushed++;
	else if (wc->status != QSM_WC_SUCCESS)
		b->errors++;
	return 0;
}

/* Server: receives posted before the accept goes out; echoes every message back. */
static int srv_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	srv_queue = q;
	srv.mr = NULL; /* a new passive queue: the last one's MR went with it */
	/* the QP exists, the accept is not sent yet: still deciding, QP in INIT */
	ck_assert_int_eq(ev->event, QSM_EV_ACCEPT);
	ck_assert_int_eq(qsm_conn_state(q), QSM_ACCEPT_REQUESTED);
	ck_assert_int_eq(qsm_conn_qp_state(q), QSM_QP_INIT);
	ck_assert_int_eq(reg(q, &srv), 0);
	return post_recv(q, &srv);
}

static int srv_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	on_completion(q, wc, &srv);
	if (wc->status == QSM_WC_SUCCESS && wc->opcode == QSM_WR_RECV) {
		struct qsm_sge s = { (uintptr_t)srv.data, wc->byte_len, qsm_mr_lkey(srv.mr) };

		post_recv(q, &srv); /* may fail once the QP is gone: the next test says so */
		return qsm_conn_post_send(q, 9, &s, 1, QSM_POST_SIGNALED) < 0;
	}
	return 0;
}

static const struct qsm_class srv_class = {
	.name = "echo-server",
	.qp_ready = srv_qp_ready,
	.completion = srv_completion,
};

static int cli_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	ck_assert_int_eq(ev->event, QSM_EV_ROUTE_RESOLVED);
	ck_assert_int_eq(qsm_conn_qp_state(q), QSM_QP_INIT);
	ck_assert_int_eq(reg(q, &cli), 0);
	return post_recv(q, &cli);
}

static int cli_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	return on_completion(q, wc, &cli);
}

static int cli_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	/* still registered while the handler runs; released right after it */
	ck_assert(qsm_mr_valid(cli.mr));
	ck_assert_ptr_eq(qsm_conn_ctx(q), cctx);
	return 0;
}

static const struct qsm_class cli_class = {
	.name = "echo-client",
	.qp_ready = cli_qp_ready,
	.completion = cli_completion,
	.device_removed = cli_device_removed,
};

/* Dispatches both ctxs until idle; the virtual clock stands still, so no timer fires. */
static void pump(void)
{
	harness_settle(&world);
}

/* A queue of @cls connected to the server's listener (there already), LIVE. */
static struct qsm_conn *client_of(const struct qsm_class *cls)
{
	struct qsm_conn *q;

	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = cls,
		.dst = (struct sockaddr *)&addr, .policy = { .initial_delay_ms = 3600000 } }, &q), 0);
	ck_assert_int_eq(qsm_conn_connect(q), 0);
	pump();
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);
	return q;
}

static struct qsm_listener *listen_server(void)
{
	struct qsm_listener *l;

	ck_assert_int_eq(qsm_listener_new(sctx, &(struct qsm_listener_opts){
		.addr = (struct sockaddr *)&addr, .cls = &srv_class }, &l), 0);
	return l;
}

static struct qsm_conn *connect_client(void)
{
	listen_server();
	return client_of(&cli_class);
}

static void setup(void)
{
	struct qsm_fabric *f;

	memset(&srv, 0, sizeof(srv));
	memset(&cli, 0, sizeof(cli));
	after_destroy = 0;
	destroyed = NULL;
	srv_queue = NULL;
	ck_assert_int_eq(qsm_sim_new(&sim), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &sctx), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &cctx), 0);
	addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(4420) };
	inet_pton(AF_INET, "192.0.2.1", &addr.sin_addr);
}

static void teardown(void)
{
	struct qsm_sim_stats st;

	qsm_ctx_free(cctx);
	qsm_ctx_free(sctx);
	qsm_ctx_free(wctx);
	wctx = NULL;
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids + st.qps + st.device_refs + st.mrs + st.mws, 0);
	qsm_sim_free(sim);
}

START_TEST(test_send_is_received_and_echoed_through_completion_handlers)
{
	struct qsm_conn *q = connect_client();
	struct qsm_sge s;

	strcpy(cli.data, "hello, target");
	s = (struct qsm_sge){ (uintptr_t)cli.data, 14, qsm_mr_lkey(cli.mr) };
	/* the client's own recv buffer is cli.data too: the echo lands where it left */
	ck_assert_int_eq(qsm_conn_post_send(q, 1, &s, 1, QSM_POST_SIGNALED), 0);
	memset(cli.data, 0, sizeof(cli.data));
	pump();
	ck_assert_str_eq(srv.data, "hello, target");
	ck_assert_str_eq(cli.data, "hello, target");
	ck_assert_int_eq(cli.last.opcode, QSM_WR_RECV);
	ck_assert_uint_eq(cli.last.byte_len, 14);
	ck_assert_int_eq(cli.errors + srv.errors, 0);
}
END_TEST

START_TEST(test_rdma_write_and_read_move_data_with_the_peers_rkey)
{
	struct qsm_conn *q = connect_client();
	struct qsm_sge s;
	char local[16] = "written by rdma";

	/* the client registered cli.data; the "remote" is the server's buffer */
	ck_assert_int_eq(reg(q, &cli), 0);
	struct qsm_mr *lmr;
	ck_assert_int_eq(qsm_conn_reg_mr(q, local, sizeof(local), QSM_ACCESS_LOCAL_WRITE, &lmr), 0);
	s = (struct qsm_sge){ (uintptr_t)local, sizeof(local), qsm_mr_lkey(lmr) };
	ck_assert_int_eq(qsm_conn_post_write(q, 2, &s, 1, (uintptr_t)srv.data, qsm_mr_rkey(srv.mr),
					     QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_str_eq(srv.data, "written by rdma");
	strcpy(srv.data, "read back");
	memset(local, 0, sizeof(local));
	ck_assert_int_eq(qsm_conn_post_read(q, 3, &s, 1, (uintptr_t)srv.data, qsm_mr_rkey(srv.mr),
					    QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_str_eq(local, "read back");
	ck_assert_int_eq(cli.last.opcode, QSM_WR_RDMA_READ);
	ck_assert_int_eq(qsm_mr_dereg(lmr), 0);
}
END_TEST

/* QSM_ACCESS_READ_SINK alone is a read's sink on every transport (the sim is IB/RoCE: local
 * write); a bit past it is refused at the door. */
START_TEST(test_a_read_sink_registration_takes_an_rdma_read)
{
	struct qsm_conn *q = connect_client();
	struct qsm_mr *lmr, *bad = NULL;
	struct qsm_pool *pbad = NULL;
	char local[16] = "";
	struct qsm_sge s;

	ck_assert_int_eq(reg(q, &cli), 0);
	ck_assert_int_eq(qsm_conn_reg_mr(q, local, sizeof(local), QSM_ACCESS_READ_SINK, &lmr), 0);
	s = (struct qsm_sge){ (uintptr_t)local, sizeof(local), qsm_mr_lkey(lmr) };
	strcpy(srv.data, "sunk by a read");
	ck_assert_int_eq(qsm_conn_post_read(q, 3, &s, 1, (uintptr_t)srv.data, qsm_mr_rkey(srv.mr),
					    QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_str_eq(local, "sunk by a read");
	ck_assert_int_eq(cli.last.opcode, QSM_WR_RDMA_READ);
	ck_assert_int_eq(cli.errors, 0);
	ck_assert_int_eq(qsm_conn_reg_mr(q, local, sizeof(local), QSM_ACCESS_READ_SINK << 1, &bad), -EINVAL);
	ck_assert_ptr_null(bad);
	ck_assert_int_eq(qsm_ctx_reg_pool(qsm_conn_ctx(q), local, sizeof(local), QSM_ACCESS_READ_SINK << 1,
					  &pbad), -EINVAL);
	ck_assert_ptr_null(pbad);
	ck_assert_int_eq(qsm_mr_dereg(lmr), 0);
}
END_TEST

START_TEST(test_bad_rkey_is_an_error_completion_and_the_queue_drains)
{
	struct qsm_conn *q = connect_client();
	struct qsm_sge s = { (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };

	ck_assert_int_eq(qsm_conn_post_write(q, 4, &s, 1, (uintptr_t)srv.data, 0xdead, QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_int_eq(cli.errors, 1);
	ck_assert_int_eq(cli.last.status == QSM_WC_REM_ACCESS_ERR || cli.flushed > 0, 1);
	/* the error took the queue's WC_ERROR edge (lost): drained, then the gap */
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_RECONNECT_WAIT);
}
END_TEST

START_TEST(test_disconnect_flushes_posted_receives_back_to_the_ulp)
{
	struct qsm_conn *q = connect_client();

	/* the queue is freed once CLOSED: q must not be used after the pump */
	ck_assert_int_eq(qsm_conn_disconnect(q), 0);
	pump();
	ck_assert_int_ge(cli.flushed, 1); /* the posted receive came back */
	ck_assert_int_ge(srv.flushed, 1);
}
END_TEST

START_TEST(test_device_removal_releases_mrs_after_device_removed_handler)
{
	struct qsm_conn *q = connect_client();

	ck_assert(qsm_mr_valid(cli.mr));
	ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
	pump();
	ck_assert(!qsm_mr_valid(cli.mr));
	ck_assert_int_eq(qsm_sim_device_state(sim, "sim0"), QSM_SIM_DEVICE_GONE);
	ck_assert_int_eq(qsm_conn_reg_mr(q, cli.data, 8, 0, &cli.mr), -ENODEV);
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_RECONNECT_WAIT);
}
END_TEST

START_TEST(test_no_completion_after_destroy)
{
	struct qsm_conn *q = connect_client();
	struct qsm_sge s = { (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };

	ck_assert_int_eq(qsm_conn_post_send(q, 5, &s, 1, QSM_POST_SIGNALED), 0);
	ck_assert_int_eq(qsm_conn_destroy(q), 0);
	destroyed = q;
	pump();
	ck_assert_int_eq(after_destroy, 0);
}
END_TEST

START_TEST(test_data_path_argument_checks)
{
	struct qsm_conn *q;
	struct qsm_sge s[QSM_MAX_SGE + 1] = { { 0 } };
	struct qsm_mr *mr;

	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &cli_class,
		.dst = (struct sockaddr *)&addr }, &q), 0);
	ck_assert_int_eq(qsm_conn_reg_mr(q, cli.data, 8, 0, &mr), -ENODEV);   /* no device yet */
	ck_assert_int_eq(qsm_conn_reg_mr(q, NULL, 8, 0, &mr), -EINVAL);
	ck_assert_int_eq(qsm_conn_reg_mr(q, cli.data, 0, 0, &mr), -EINVAL);
	ck_assert_int_eq(qsm_conn_reg_mr(q, cli.data, 8, 0x100, &mr), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_send(q, 1, s, 1, 0), -ENOTCONN);
	ck_assert_int_eq(qsm_conn_post_send(q, 1, s, QSM_MAX_SGE + 1, 0), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_send(q, 1, s, 1, 0x80), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_recv(q, 1, NULL, 1), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_recv(NULL, 1, s, 1), -EINVAL);
	ck_assert_int_eq(qsm_mr_dereg(NULL), -EINVAL);
	ck_assert_int_eq(qsm_mr_valid(NULL), 0);
}
END_TEST

/* A caller's bad argument is -EINVAL whatever the queue's state: checked before -ENODEV and
 * -ENOTCONN, and before a pool is taken with no device to refuse it. */
START_TEST(test_bad_arguments_are_einval_before_the_state_is_looked_at)
{
	static char pool_mem[64];
	struct qsm_conn *q;
	struct qsm_sge s[QSM_MAX_SGE + 1] = { { 0 } };
	struct qsm_mr *mr = NULL;
	struct qsm_pool *pool = NULL;
	struct qsm_counters k;
	void *top = (void *)(UINTPTR_MAX - 7);

	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &cli_class,
		.dst = (struct sockaddr *)&addr }, &q), 0);
	/* no device yet, so a state check first would say -ENODEV */
	ck_assert_int_eq(qsm_conn_reg_mr(q, cli.data, 8, QSM_ACCESS_REMOTE_WRITE, &mr), -EINVAL);
	ck_assert_int_eq(qsm_conn_reg_mr(q, top, 16, 0, &mr), -EINVAL);
	ck_assert_ptr_null(mr);
	/* no QP yet, so a state check first would say -ENOTCONN */
	ck_assert_int_eq(qsm_conn_post_write(q, 1, s, -1, 0, 0, 0), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_read(q, 1, s, 1, 0, 0, 0x80), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_recv(q, 1, s, QSM_MAX_SGE + 1), -EINVAL);
	/* the server's ctx has no device in its registry: nothing would refuse these later */
	ck_assert_int_eq(qsm_ctx_counters(sctx, &k, sizeof(k)), 0);
	ck_assert_uint_eq(k.devices_live, 0);
	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, pool_mem, sizeof(pool_mem), QSM_ACCESS_REMOTE_WRITE,
					  &pool), -EINVAL);
	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, top, 16, 0, &pool), -EINVAL);
	ck_assert_ptr_null(pool);
}
END_TEST

/* Caps the library cannot honour (more SGEs than QSM_MAX_SGE, which no post may carry) are
 * refused where the class is given, anywhere along its chain: -EINVAL from qsm_conn_new() and
 * qsm_listener_new(), nothing made.  QSM_MAX_SGE itself is taken. */
START_TEST(test_class_caps_above_qsm_max_sge_are_einval_at_qsm_conn_new_and_qsm_listener_new)
{
	static const struct qsm_class send_over = { .name = "send-over",
		.qp = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = QSM_MAX_SGE + 1 } };
	static const struct qsm_class recv_over = { .name = "recv-over",
		.qp = { .max_send_wr = 4, .max_recv_wr = 4, .max_recv_sge = QSM_MAX_SGE + 1 } };
	static const struct qsm_class srq_over = { .name = "srq-over",
		.srq = { .max_wr = 4, .max_sge = QSM_MAX_SGE + 1 } };
	static const struct qsm_class sub_of_over = { .name = "sub", .super = &srq_over };
	static const struct qsm_class at_max = { .name = "at-max",
		.qp = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = QSM_MAX_SGE,
			.max_recv_sge = QSM_MAX_SGE }, .srq = { .max_wr = 4, .max_sge = QSM_MAX_SGE } };
	const struct qsm_class *over[] = { &send_over, &recv_over, &srq_over, &sub_of_over };
	struct qsm_conn *q;
	struct qsm_listener *l;
	struct qsm_counters k;

	for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
		q = NULL;
		l = NULL;
		ck_assert_msg(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = over[i],
			.dst = (struct sockaddr *)&addr }, &q) == -EINVAL, "qsm_conn_new took %s", over[i]->name);
		ck_assert_ptr_null(q);
		ck_assert_msg(qsm_listener_new(sctx, &(struct qsm_listener_opts){ .cls = over[i],
			.addr = (struct sockaddr *)&addr }, &l) == -EINVAL, "qsm_listener_new took %s",
			over[i]->name);
		ck_assert_ptr_null(l);
	}
	ck_assert_int_eq(qsm_ctx_counters(cctx, &k, sizeof(k)), 0);
	ck_assert_uint_eq(k.queues_live, 0);
	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &at_max,
		.dst = (struct sockaddr *)&addr }, &q), 0);
	ck_assert_int_eq(qsm_listener_new(sctx, &(struct qsm_listener_opts){ .cls = &at_max,
		.addr = (struct sockaddr *)&addr }, &l), 0);
}
END_TEST

/* A list is checked whole, at the door, before the queue's state: none of it is posted. */
START_TEST(test_post_list_checks_every_wr_before_the_state_and_posts_none)
{
	struct qsm_conn *q;
	struct qsm_sge s = { 0 }, two[2] = { { 0 } };
	struct qsm_wr wrs[3] = {
		{ .wr_id = 1, .opcode = QSM_WR_SEND, .sg_list = &s, .num_sge = 1 },
		{ .wr_id = 2, .opcode = QSM_WR_RDMA_WRITE_WITH_IMM, .sg_list = &s, .num_sge = 1 },
		{ .wr_id = 3, .opcode = QSM_WR_SEND_WITH_IMM, .flags = QSM_POST_INLINE },
	};
	int posted = -1;

	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &cli_class,
		.dst = (struct sockaddr *)&addr }, &q), 0);
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 3, &posted), -ENOTCONN);
	ck_assert_int_eq(posted, 0);
	wrs[2].opcode = QSM_WR_RECV;              /* not a send queue WR */
	posted = -1;
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 3, &posted), -EINVAL);
	ck_assert_int_eq(posted, 0);
	wrs[2].opcode = QSM_WR_RDMA_READ;         /* a READ has nothing to inline */
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 3, NULL), -EINVAL);
	wrs[2].flags = 0x80;
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 3, NULL), -EINVAL);
	wrs[2].flags = 0;
	wrs[2].num_sge = QSM_MAX_SGE + 1;
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 3, NULL), -EINVAL);
	wrs[2].sg_list = two;                     /* more SGEs than the class asked for */
	wrs[2].num_sge = 2;
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 3, NULL), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_list(q, NULL, 1, NULL), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, -1, NULL), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_list(NULL, wrs, 1, NULL), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_send(q, 1, &s, 1, QSM_POST_INLINE), -ENOTCONN);
}
END_TEST

/* Through the runtime: a list beyond the class's max_send_wr (64 by default) posts none; one
 * WR with immediate data reaches the server's completion handler with it. */
START_TEST(test_post_list_is_enobufs_beyond_max_send_wr_and_imm_reaches_the_handler)
{
	struct qsm_conn *q = connect_client();
	struct qsm_sge s = { (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };
	struct qsm_wr wrs[65];
	int posted = -1;

	for (int i = 0; i < 65; i++)
		wrs[i] = (struct qsm_wr){ .wr_id = 100 + (uint64_t)i, .opcode = QSM_WR_RDMA_WRITE,
					  .sg_list = &s, .num_sge = 1, .remote_addr = (uintptr_t)srv.data,
					  .rkey = qsm_mr_rkey(srv.mr), .flags = QSM_POST_SIGNALED };
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 65, &posted), -ENOBUFS);
	ck_assert_int_eq(posted, 0);
	pump();
	ck_assert_int_eq(cli.completions, 0);

	strcpy(cli.data, "imm");
	wrs[0] = (struct qsm_wr){ .wr_id = 1, .opcode = QSM_WR_SEND_WITH_IMM, .sg_list = &s,
				  .num_sge = 1, .flags = QSM_POST_SIGNALED, .imm_data = 0xabcd0001 };
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 1, &posted), 0);
	ck_assert_int_eq(posted, 1);
	pump();
	ck_assert_int_eq(srv.last_recv.status, QSM_WC_SUCCESS);
	ck_assert_int_eq(srv.last_recv.opcode, QSM_WR_RECV);
	ck_assert_uint_eq(srv.last_recv.byte_len, 8);
	ck_assert_uint_eq(srv.last_recv.wc_flags, QSM_WC_WITH_IMM);
	ck_assert_uint_eq(srv.last_recv.imm_data, 0xabcd0001);
	/* the echo (a plain send) carries none */
	ck_assert_int_eq(cli.last_recv.status, QSM_WC_SUCCESS);
	ck_assert_uint_eq(cli.last_recv.byte_len, 8);
	ck_assert_uint_eq(cli.last_recv.wc_flags, 0);
	ck_assert_str_eq(cli.data, "imm");
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);
}
END_TEST

/* A target's pool: registered once per device, used by every queue, released with the device. */
/* SGEs beyond what the class asked for (cli_class: the default, 1) are refused at the door,
 * all or nothing, whatever the device would take: a list with one such WR posts none. */
START_TEST(test_a_wr_with_more_sges_than_the_class_asked_for_fails_its_whole_list)
{
	struct qsm_conn *q = connect_client();
	struct qsm_sge s[2] = { { (uintptr_t)cli.data, 4, qsm_mr_lkey(cli.mr) },
				{ (uintptr_t)cli.data + 4, 4, qsm_mr_lkey(cli.mr) } };
	struct qsm_wr wrs[3];
	int posted = -1;

	for (int i = 0; i < 3; i++)
		wrs[i] = (struct qsm_wr){ .wr_id = 200 + (uint64_t)i, .opcode = QSM_WR_RDMA_WRITE,
					  .sg_list = s, .num_sge = 1, .remote_addr = (uintptr_t)srv.data,
					  .rkey = qsm_mr_rkey(srv.mr), .flags = QSM_POST_SIGNALED };
	wrs[2].num_sge = 2;
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 3, &posted), -EINVAL);
	ck_assert_int_eq(posted, 0);
	ck_assert_int_eq(qsm_conn_post_write(q, 9, s, 2, (uintptr_t)srv.data, qsm_mr_rkey(srv.mr),
					     QSM_POST_SIGNALED), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_recv(q, 10, s, 2), -EINVAL);
	pump();
	ck_assert_int_eq(cli.completions, 0);
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);
	/* the same list within the caps goes whole */
	wrs[2].num_sge = 1;
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 3, &posted), 0);
	ck_assert_int_eq(posted, 3);
	pump();
	ck_assert_int_eq(cli.completions, 3);
}
END_TEST

START_TEST(test_pool_is_registered_per_device_and_released_with_it)
{
	static char pool_mem[256];
	struct qsm_pool *pool, *late;
	struct qsm_conn *q;
	struct qsm_sge s;
	uint32_t lkey, rkey, rkey2;
	char local[16] = "into the pool";
	struct qsm_mr *lmr;

	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, pool_mem, sizeof(pool_mem), QSM_ACCESS_LOCAL_WRITE |
					  QSM_ACCESS_REMOTE_WRITE, &pool), 0);
	q = connect_client();
	/* the client's queue is not the pool's ctx: refused */
	ck_assert_int_eq(qsm_pool_keys(pool, q, &lkey, &rkey), -EINVAL);
	/* the server's passive queue is on the device: the pool was registered there */
	ck_assert_ptr_nonnull(srv_queue);
	ck_assert_int_eq(qsm_pool_keys(pool, srv_queue, &lkey, &rkey), 0);
	ck_assert_int_ne(rkey, 0);
	ck_assert_int_eq(qsm_conn_reg_mr(q, local, sizeof(local), QSM_ACCESS_LOCAL_WRITE, &lmr), 0);
	s = (struct qsm_sge){ (uintptr_t)local, sizeof(local), qsm_mr_lkey(lmr) };
	ck_assert_int_eq(qsm_conn_post_write(q, 6, &s, 1, (uintptr_t)pool_mem + 100, rkey,
					     QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_str_eq(pool_mem + 100, "into the pool");
	/* a pool made while a device is in use is registered there at once */
	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, pool_mem, 64, 0, &late), 0);
	ck_assert_int_eq(qsm_pool_keys(late, srv_queue, NULL, NULL), 0);
	ck_assert_int_eq(qsm_pool_dereg(late), 0);

	/* the device goes: the pool lets go of it, so the removal completes */
	ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
	pump();
	ck_assert_int_eq(qsm_sim_device_state(sim, "sim0"), QSM_SIM_DEVICE_GONE);
	/* it comes back, the client reconnects: the pool is registered on it again */
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	srv_queue = NULL;
	pump(); /* the listener listens again (DEVICE_ADDED) */
	if (qsm_conn_state(q) != QSM_CM_LIVE) {
		/* the client's own retry may have raced the listener: reconnect now */
		ck_assert_int_eq(qsm_conn_state(q), QSM_CM_RECONNECT_WAIT);
		ck_assert_int_eq(qsm_conn_connect(q), 0);
		pump();
	}
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);
	ck_assert_ptr_nonnull(srv_queue);
	ck_assert_int_eq(qsm_pool_keys(pool, srv_queue, NULL, &rkey2), 0);
	ck_assert_int_ne(rkey2, rkey); /* a new registration on the new device */
	ck_assert_int_eq(qsm_pool_dereg(pool), 0);
	ck_assert_int_eq(qsm_pool_keys(NULL, q, NULL, NULL), -EINVAL);
	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, NULL, 8, 0, &pool), -EINVAL);
	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, pool_mem, 0, 0, &pool), -EINVAL);
	ck_assert_int_eq(qsm_ctx_reg_pool(sctx, pool_mem, 8, 0x40, &pool), -EINVAL);
}
END_TEST

/* ---- the runtime's WC_ERROR: once per QP, right behind the QP's first error completion ---- */

/* The sim's ops with get_event wrapped: a non-flush error completion is followed by a second
 * one of the same QP (wr_id + 1000), as an HCA may complete a send and a receive in error. */
static const struct qsm_fabric_ops *inner_ops;
static struct qsm_fabric_ops twice_ops;
static struct qsm_fabric_cqe second_error;
static bool has_second_error;

static int get_event_errors_twice(struct qsm_fabric *f, struct qsm_fabric_event *ev,
				  struct qsm_fabric_cqe *cqe, int max)
{
	int r;

	if (has_second_error) {
		cqe[0] = second_error;
		has_second_error = false;
		return 1;
	}
	/* room for the second error right behind the first, inside the same batch: what the
	 * ctx has not dispatched of a batch when a WC_ERROR is queued waits behind it */
	r = inner_ops->get_event(f, ev, cqe, max > 1 ? max - 1 : 1);
	for (int j = 0; j < r; j++) {
		if (cqe[j].wc.status == QSM_WC_SUCCESS || cqe[j].wc.status == QSM_WC_WR_FLUSH_ERR)
			continue;
		second_error = cqe[j];
		second_error.wc.wr_id += 1000;
		if (max == 1) {
			has_second_error = true;
			break;
		}
		memmove(&cqe[j + 2], &cqe[j + 1], (size_t)(r - j - 1) * sizeof(*cqe));
		cqe[j + 1] = second_error;
		r++;
		break;
	}
	return r;
}

/* What the client's queue saw, in order: completions ("c<wr_id>/<status>") from its handler,
 * edges ("<from> <EVENT> <to>/<status>") from the trace. */
static char seen_log[1024];
static int disconnect_on_error;

static void log_add(const char *s)
{
	size_t n = strlen(seen_log);

	snprintf(seen_log + n, sizeof(seen_log) - n, "%s%s", n ? ", " : "", s);
}

static void trace_client(const struct qsm_trace_record *r, void *arg)
{
	char line[96];

	(void)arg;
	if (strcmp(r->kind, "conn") != 0)
		return;
	snprintf(line, sizeof(line), "%s %s %s/%d", r->from, r->event, r->to ? r->to : "-", r->status);
	log_add(line);
}

static int log_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	char line[48];

	snprintf(line, sizeof(line), "c%llu/%d", (unsigned long long)wc->wr_id, (int)wc->status);
	log_add(line);
	if (disconnect_on_error && wc->status != QSM_WC_SUCCESS && wc->status != QSM_WC_WR_FLUSH_ERR) {
		disconnect_on_error = 0;
		ck_assert_int_eq(qsm_conn_disconnect(q), 0);
	}
	return on_completion(q, wc, &cli);
}

static const struct qsm_class logging_cli_class = {
	.name = "logging-client",
	.qp_ready = cli_qp_ready,
	.completion = log_completion,
};

/* A client ctx whose fabric errs twice, tracing into seen_log; a live queue on it. */
static struct qsm_conn *connect_logging_client(void)
{
	struct qsm_ctx *old = cctx;
	struct qsm_fabric *f;
	struct qsm_conn *q;

	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	inner_ops = f->ops;
	twice_ops = *f->ops;
	twice_ops.get_event = get_event_errors_twice;
	f->ops = &twice_ops;
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock,
							     .now_arg = &world }, &cctx), 0);
	qsm_ctx_free(old);
	has_second_error = false;
	disconnect_on_error = 0;
	listen_server();
	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &logging_cli_class,
		.dst = (struct sockaddr *)&addr, .policy = { .initial_delay_ms = 100 } }, &q), 0);
	ck_assert_int_eq(qsm_conn_connect(q), 0);
	pump();
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);
	seen_log[0] = 0;
	qsm_ctx_set_trace(cctx, trace_client, NULL);
	return q;
}

static struct qsm_counters count(struct qsm_ctx *c)
{
	struct qsm_counters k;

	ck_assert_int_eq(qsm_ctx_counters(c, &k, sizeof(k)), 0);
	return k;
}

/* A write with a bad rkey: two error completions of the QP (the wrapper's second one), one
 * WC_ERROR right behind the first, then the posted receive's flush, the drain and the gap. */
static void bad_write_errs_once(struct qsm_conn *q, uint64_t wr_id, uint64_t wc_errors)
{
	struct qsm_sge s = { (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };
	char want[512];

	seen_log[0] = 0;
	ck_assert_int_eq(qsm_conn_post_write(q, wr_id, &s, 1, (uintptr_t)srv.data, 0xdead,
					     QSM_POST_SIGNALED), 0);
	pump();
	snprintf(want, sizeof(want), "c%llu/%d, LIVE WC_ERROR DRAINING/%d, c%llu/%d, c7/%d, "
		 "DRAINING DISCONNECTED DRAINING/0, DRAINING TIMEWAIT_EXIT DRAINING/0, "
		 "DRAINING DRAINED RECONNECT_WAIT/0", (unsigned long long)wr_id, QSM_WC_REM_ACCESS_ERR,
		 -EIO, (unsigned long long)wr_id + 1000, QSM_WC_REM_ACCESS_ERR, QSM_WC_WR_FLUSH_ERR);
	ck_assert_str_eq(seen_log, want);
	ck_assert_uint_eq(count(cctx).events[QSM_EV_WC_ERROR], wc_errors);
}

/* Two error completions of one QP: one WC_ERROR (-EIO), right behind the first, before the
 * second and before the flush; a new QP (after the reconnect) has its own WC_ERROR. */
START_TEST(test_first_error_completion_of_a_qp_is_followed_by_one_wc_error_and_a_new_qp_has_its_own)
{
	struct qsm_conn *q = connect_logging_client();

	bad_write_errs_once(q, 4, 1);
	ck_assert_uint_eq(count(cctx).completions, 3);
	/* the retry makes a new QP: its first error completion is a WC_ERROR again */
	harness_run_for(&world, 1000);
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);
	bad_write_errs_once(q, 5, 2);
}
END_TEST

/* The WC_ERROR comes before anything the completion handler queues: a disconnect asked for
 * in the handler of the error completion finds the queue DRAINING already. */
START_TEST(test_wc_error_comes_before_what_the_completion_handler_queues)
{
	struct qsm_conn *q = connect_logging_client();
	struct qsm_sge s = { (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };
	char want[512];

	disconnect_on_error = 1;
	ck_assert_int_eq(qsm_conn_post_write(q, 4, &s, 1, (uintptr_t)srv.data, 0xdead,
					     QSM_POST_SIGNALED), 0);
	pump();
	snprintf(want, sizeof(want), "c4/%d, LIVE WC_ERROR DRAINING/%d, DRAINING DISCONNECT CLOSING/0, "
		 "c1004/%d, c7/%d, CLOSING DISCONNECTED CLOSING/0, CLOSING TIMEWAIT_EXIT CLOSING/0, "
		 "CLOSING DRAINED CLOSED/0", QSM_WC_REM_ACCESS_ERR, -EIO, QSM_WC_REM_ACCESS_ERR,
		 QSM_WC_WR_FLUSH_ERR);
	ck_assert_str_eq(seen_log, want);
	ck_assert_uint_eq(count(cctx).events[QSM_EV_WC_ERROR], 1);
}
END_TEST

/* ---- memory windows ---- */

/* The server binds a window to part of its buffer; the client writes through the window's
 * rkey, then invalidates it with its SEND_WITH_INV, which the server's receive reports. */
START_TEST(test_a_window_bound_by_the_server_takes_the_clients_write_and_its_send_with_inv)
{
	struct qsm_conn *q = connect_client();
	struct qsm_sge s = { (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };
	struct qsm_mw *mw;
	uint32_t rkey;
	int posted;

	ck_assert_ptr_nonnull(srv_queue);
	ck_assert_int_eq(qsm_conn_alloc_mw(srv_queue, &mw), 0);
	ck_assert_uint_eq(qsm_mw_rkey(mw), 0);
	/* the client's MR is not the server queue's; a local access bit is not a window's */
	ck_assert_int_eq(qsm_conn_bind_mw(srv_queue, 60, mw, cli.mr, (uintptr_t)cli.data, 8,
					  QSM_ACCESS_REMOTE_WRITE, QSM_POST_SIGNALED), -EINVAL);
	ck_assert_int_eq(qsm_conn_bind_mw(srv_queue, 60, mw, srv.mr, (uintptr_t)srv.data, 8,
					  QSM_ACCESS_LOCAL_WRITE, QSM_POST_SIGNALED), -EINVAL);
	ck_assert_int_eq(qsm_conn_bind_mw(srv_queue, 61, mw, srv.mr, (uintptr_t)srv.data + 32, 16,
					  QSM_ACCESS_REMOTE_WRITE, QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_int_eq(srv.last.opcode, QSM_WR_BIND_MW);
	ck_assert_uint_eq(srv.last.wr_id, 61);
	rkey = qsm_mw_rkey(mw);
	ck_assert_uint_ne(rkey, 0);
	ck_assert_uint_ne(rkey, qsm_mr_rkey(srv.mr));
	strcpy(cli.data, "via mw");
	ck_assert_int_eq(qsm_conn_post_write(q, 62, &s, 1, (uintptr_t)srv.data + 32, rkey, QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_str_eq(srv.data + 32, "via mw");
	ck_assert_int_eq(cli.errors, 0);
	/* LOCAL_INV carries no data: -EINVAL with an SGE, nothing posted */
	ck_assert_int_eq(qsm_conn_post_list(q, &(struct qsm_wr){ .wr_id = 63, .opcode = QSM_WR_LOCAL_INV,
		.sg_list = &s, .num_sge = 1, .imm_data = rkey }, 1, &posted), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_list(q, &(struct qsm_wr){ .wr_id = 64, .opcode = QSM_WR_SEND_WITH_INV,
		.sg_list = &s, .num_sge = 1, .flags = QSM_POST_SIGNALED, .imm_data = rkey }, 1, &posted), 0);
	ck_assert_int_eq(posted, 1);
	pump();
	ck_assert_uint_eq(srv.last_recv.wc_flags & QSM_WC_WITH_INV, QSM_WC_WITH_INV);
	ck_assert_uint_eq(srv.last_recv.invalidated_rkey, rkey);
	ck_assert_int_eq(srv.errors + cli.errors, 0);
	ck_assert_int_eq(qsm_conn_bind_mw(q, 65, mw, cli.mr, (uintptr_t)cli.data, 8,
					  QSM_ACCESS_REMOTE_WRITE, 0), -EINVAL);   /* not q's window */
	/* a window goes with its queue's device: released, its rkey gone, the handle still the
	 * ULP's while the queue lives (the server's went with its queue) */
	ck_assert_int_eq(qsm_conn_alloc_mw(q, &mw), 0);
	ck_assert_int_eq(qsm_conn_bind_mw(q, 66, mw, cli.mr, (uintptr_t)cli.data, 8,
					  QSM_ACCESS_REMOTE_READ, QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_uint_ne(qsm_mw_rkey(mw), 0);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
	pump();
	ck_assert_uint_eq(qsm_mw_rkey(mw), 0);
	ck_assert_int_eq(qsm_mw_free(mw), 0);
}
END_TEST

/* A window bound to an MR holds it: qsm_mr_dereg() is -EBUSY and the MR stays registered and
 * usable (a ULP that freed the memory on a 0 would have the peer's write land in freed memory);
 * with the window freed, the dereg goes through. */
START_TEST(test_dereg_of_an_mr_with_a_bound_window_is_ebusy_and_the_mr_stays_usable)
{
	struct qsm_conn *q = connect_client();
	struct qsm_sge s = { (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };
	struct qsm_mw *mw;
	uint32_t rkey, mr_rkey = qsm_mr_rkey(srv.mr);

	ck_assert_ptr_nonnull(srv_queue);
	ck_assert_int_eq(qsm_conn_alloc_mw(srv_queue, &mw), 0);
	ck_assert_int_eq(qsm_conn_bind_mw(srv_queue, 70, mw, srv.mr, (uintptr_t)srv.data + 32, 16,
					  QSM_ACCESS_REMOTE_WRITE, QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_int_eq(srv.last.opcode, QSM_WR_BIND_MW);
	rkey = qsm_mw_rkey(mw);
	ck_assert_int_eq(qsm_mr_dereg(srv.mr), -EBUSY);
	ck_assert(qsm_mr_valid(srv.mr));
	ck_assert_uint_eq(qsm_mr_rkey(srv.mr), mr_rkey);
	strcpy(cli.data, "held");
	ck_assert_int_eq(qsm_conn_post_write(q, 71, &s, 1, (uintptr_t)srv.data + 32, rkey, QSM_POST_SIGNALED), 0);
	ck_assert_int_eq(qsm_conn_post_write(q, 72, &s, 1, (uintptr_t)srv.data + 8, mr_rkey, QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_str_eq(srv.data + 32, "held");
	ck_assert_str_eq(srv.data + 8, "held");
	ck_assert_int_eq(srv.errors + cli.errors, 0);
	ck_assert_int_eq(qsm_mw_free(mw), 0);
	ck_assert_int_eq(qsm_mr_dereg(srv.mr), 0);
	srv.mr = NULL;
}
END_TEST

/* ---- the door: each check of a WR, one kind of bad WR each (src/data/post.c) ---- */

/* Known caps: 4 sends, 4 receives, 2 SGEs each way, 16 bytes inline. */
static const struct qsm_class door_class = {
	.name = "door-client",
	.qp = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 2,
		.max_inline_data = 16 },
	.qp_ready = cli_qp_ready,
	.completion = cli_completion,
};

enum { DOOR_SEND_WR = 4, DOOR_RECV_WR = 4, DOOR_SGE = 2, DOOR_INLINE = 16 };

/* The k-th kind of bad send WR, made from a good one (w, a signaled 8-byte write); NULL past
 * the last.  sg is an array of QSM_MAX_SGE + 1 SGEs of cli.data; own_rkey is a bound window's
 * of the queue (so that each LOCAL_INV case fails for its own reason alone), other_rkey names
 * none of the queue's windows. */
static const char *spoil_wr(int k, struct qsm_wr *w, const struct qsm_sge *sg, uint32_t own_rkey,
			    uint32_t other_rkey)
{
	switch (k) {
	case 0: w->opcode = QSM_WR_RECV; return "a receive's opcode";
	case 1: w->opcode = QSM_WR_BIND_MW; return "BIND_MW (qsm_conn_bind_mw's)";
	case 2: w->opcode = 0; return "no opcode";
	case 3: w->opcode = (enum qsm_wr_opcode)99; return "an unknown opcode";
	case 4: w->flags |= 0x80; return "an unknown flag";
	case 5: w->num_sge = -1; return "num_sge < 0";
	case 6: w->num_sge = QSM_MAX_SGE + 1; return "num_sge > QSM_MAX_SGE";
	case 7: w->num_sge = DOOR_SGE + 1; return "num_sge > the class's max_send_sge";
	case 8: w->sg_list = NULL; return "no sg_list for num_sge 1";
	case 9: w->opcode = QSM_WR_RDMA_READ; w->flags |= QSM_POST_INLINE; return "INLINE on a READ";
	case 10: /* 2 SGEs, 8 + 9 bytes */
		w->sg_list = sg + QSM_MAX_SGE - 1;
		w->num_sge = 2;
		w->flags |= QSM_POST_INLINE;
		return "INLINE beyond max_inline_data";
	case 11: w->opcode = QSM_WR_LOCAL_INV; w->imm_data = other_rkey; w->num_sge = 0;
		return "LOCAL_INV of an rkey none of the queue's windows has";
	case 12: w->opcode = QSM_WR_LOCAL_INV; w->imm_data = 0; w->num_sge = 0;
		return "LOCAL_INV of rkey 0 (a window never bound)";
	case 13: w->opcode = QSM_WR_LOCAL_INV; w->imm_data = own_rkey; w->num_sge = 1;
		return "LOCAL_INV with an SGE";
	case 14: w->opcode = QSM_WR_LOCAL_INV; w->imm_data = own_rkey; w->num_sge = 0;
		w->flags |= QSM_POST_INLINE;
		return "LOCAL_INV with INLINE";
	default: return NULL;
	}
}

/* Every kind of bad send WR, alone and behind a good one in a list: -EINVAL, *posted 0, before
 * the state is looked at (q without a QP: -EINVAL, not -ENOTCONN). */
static void door_refuses_each_bad_wr(struct qsm_conn *q, uint32_t own_rkey, uint32_t other_rkey)
{
	struct qsm_sge sg[QSM_MAX_SGE + 1];
	const char *what;

	for (int i = 0; i <= QSM_MAX_SGE; i++)
		sg[i] = (struct qsm_sge){ (uintptr_t)cli.data + 8 * (unsigned)i, 8, qsm_mr_lkey(cli.mr) };
	sg[QSM_MAX_SGE].length = 9;
	for (int k = 0; ; k++) {
		struct qsm_wr good = { .wr_id = 300, .opcode = QSM_WR_RDMA_WRITE, .sg_list = sg,
				       .num_sge = 1, .remote_addr = (uintptr_t)srv.data,
				       .rkey = srv.mr ? qsm_mr_rkey(srv.mr) : 0, .flags = QSM_POST_SIGNALED };
		struct qsm_wr wrs[2] = { good, good };
		int posted = -1;

		wrs[1].wr_id = 301;
		if (!(what = spoil_wr(k, &wrs[1], sg, own_rkey, other_rkey)))
			break;
		ck_assert_msg(qsm_conn_post_list(q, &wrs[1], 1, &posted) == -EINVAL && posted == 0,
			      "%s alone: not refused", what);
		posted = -1;
		ck_assert_msg(qsm_conn_post_list(q, wrs, 2, &posted) == -EINVAL && posted == 0,
			      "%s behind a good WR: not refused whole", what);
	}
	/* the calls of one WR each go through the same door */
	ck_assert_int_eq(qsm_conn_post_send(q, 302, sg, DOOR_SGE + 1, 0), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_write(q, 303, sg + QSM_MAX_SGE - 1, 2, (uintptr_t)srv.data, 0,
					     QSM_POST_INLINE), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_read(q, 304, sg, 1, (uintptr_t)srv.data, 0, QSM_POST_INLINE), -EINVAL);
	/* and receives: SGEs (< 0, beyond QSM_MAX_SGE, beyond the class's max_recv_sge, no array) */
	ck_assert_int_eq(qsm_conn_post_recv(q, 305, sg, -1), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_recv(q, 305, sg, QSM_MAX_SGE + 1), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_recv(q, 305, sg, DOOR_SGE + 1), -EINVAL);
	ck_assert_int_eq(qsm_conn_post_recv(q, 305, NULL, 1), -EINVAL);
}

/* A bad WR holds no slot and never completes: after all of them, the queues still take their
 * full depth, and only the good WRs complete. */
START_TEST(test_the_door_refuses_each_kind_of_bad_wr_posts_nothing_and_holds_no_slot)
{
	struct qsm_conn *idle, *q, *other;
	struct qsm_mw *mw, *unbound, *theirs;
	struct qsm_sge s[2];
	struct qsm_wr full[DOOR_SEND_WR];
	uint32_t rkey;
	int posted = -1;

	/* no QP yet: the WR is checked first */
	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &door_class,
		.dst = (struct sockaddr *)&addr }, &idle), 0);
	door_refuses_each_bad_wr(idle, 0, 0);   /* (no windows: every LOCAL_INV names none) */
	ck_assert_int_eq(qsm_conn_destroy(idle), 0);

	listen_server();
	q = client_of(&door_class);
	other = srv_queue;
	/* windows of q's, one bound and one not (rkey 0), and one of the server queue's, bound */
	ck_assert_int_eq(qsm_conn_alloc_mw(q, &mw), 0);
	ck_assert_int_eq(qsm_conn_alloc_mw(q, &unbound), 0);
	ck_assert_int_eq(qsm_conn_alloc_mw(other, &theirs), 0);
	ck_assert_int_eq(qsm_conn_bind_mw(q, 310, mw, cli.mr, (uintptr_t)cli.data, 8,
					  QSM_ACCESS_REMOTE_WRITE, QSM_POST_SIGNALED), 0);
	ck_assert_int_eq(qsm_conn_bind_mw(other, 311, theirs, srv.mr, (uintptr_t)srv.data, 8,
					  QSM_ACCESS_REMOTE_WRITE, QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_int_eq(cli.completions, 1);   /* the bind */
	cli.completions = 0;
	rkey = qsm_mw_rkey(mw);
	ck_assert_uint_ne(rkey, 0);
	ck_assert_uint_ne(qsm_mw_rkey(theirs), 0);
	ck_assert_uint_eq(qsm_mw_rkey(unbound), 0);
	door_refuses_each_bad_wr(q, rkey, qsm_mw_rkey(theirs));
	pump();
	ck_assert_int_eq(cli.completions, 0);
	ck_assert_int_eq(srv.errors, 0);
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);

	/* every send slot is free: a list of the full depth goes (one WR more would not), with
	 * inline data up to max_inline_data exactly */
	s[0] = (struct qsm_sge){ (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };
	s[1] = (struct qsm_sge){ (uintptr_t)cli.data + 8, DOOR_INLINE - 8, 0 };
	for (int i = 0; i < DOOR_SEND_WR; i++)
		full[i] = (struct qsm_wr){ .wr_id = 320 + (uint64_t)i, .opcode = QSM_WR_RDMA_WRITE,
					   .sg_list = s, .num_sge = i ? 1 : DOOR_SGE,
					   .remote_addr = (uintptr_t)srv.data, .rkey = qsm_mr_rkey(srv.mr),
					   .flags = QSM_POST_SIGNALED | (i ? 0 : QSM_POST_INLINE) };
	ck_assert_int_eq(qsm_conn_post_list(q, full, DOOR_SEND_WR, &posted), 0);
	ck_assert_int_eq(posted, DOOR_SEND_WR);
	ck_assert_int_eq(qsm_conn_post_write(q, 330, s, 1, (uintptr_t)srv.data, qsm_mr_rkey(srv.mr),
					     QSM_POST_SIGNALED), -ENOBUFS);
	/* every receive slot but qp_ready's is free: three more go, a fourth does not */
	for (int i = 1; i < DOOR_RECV_WR; i++)
		ck_assert_int_eq(qsm_conn_post_recv(q, 340 + (uint64_t)i, s, DOOR_SGE), 0);
	ck_assert_int_eq(qsm_conn_post_recv(q, 349, s, 1), -ENOBUFS);
	pump();
	ck_assert_int_eq(cli.completions, DOOR_SEND_WR);
	ck_assert_int_eq(cli.errors + srv.errors, 0);

	/* the LOCAL_INV the door lets through: of q's own bound window's rkey */
	ck_assert_int_eq(qsm_conn_post_list(q, &(struct qsm_wr){ .wr_id = 351, .opcode = QSM_WR_LOCAL_INV,
		.flags = QSM_POST_SIGNALED, .imm_data = rkey }, 1, &posted), 0);
	pump();
	ck_assert_int_eq(cli.last.opcode, QSM_WR_LOCAL_INV);
	ck_assert_int_eq(cli.last.status, QSM_WC_SUCCESS);
	ck_assert_int_eq(cli.completions, DOOR_SEND_WR + 1);
	ck_assert_int_eq(cli.errors, 0);
}
END_TEST

/* qsm_listener_spread(): the server's listener on sctx hands its requests to a worker ctx
 * (wctx, as a ULP's other thread would run it); the passive queue lives there -- its
 * REQUESTED, qp_ready, completions and close -- and echoes as if the worker had listened. */
static void worker_new(void)
{
	struct qsm_fabric *f;

	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock,
								.now_arg = &world }, &wctx), 0);
}

static struct qsm_counters counters_of(struct qsm_ctx *ctx)
{
	struct qsm_counters c;

	ck_assert_int_eq(qsm_ctx_counters(ctx, &c, sizeof(c)), 0);
	return c;
}

static void echo_once(struct qsm_conn *q, const char *msg)
{
	struct qsm_sge s;

	strcpy(cli.data, msg);
	s = (struct qsm_sge){ (uintptr_t)cli.data, (uint32_t)strlen(msg) + 1, qsm_mr_lkey(cli.mr) };
	ck_assert_int_eq(qsm_conn_post_send(q, 1, &s, 1, QSM_POST_SIGNALED), 0);
	memset(cli.data, 0, sizeof(cli.data));
	pump();
	ck_assert_str_eq(cli.data, msg);
}

START_TEST(test_a_spread_listener_hands_each_request_to_the_next_ctx)
{
	struct qsm_listener *l = listen_server();
	struct qsm_ctx *both[2];
	struct qsm_conn *q, *q2;

	worker_new();
	both[0] = sctx;
	both[1] = wctx;
	ck_assert_int_eq(qsm_listener_spread(NULL, &wctx, 1), -EINVAL);
	ck_assert_int_eq(qsm_listener_spread(l, NULL, 1), -EINVAL);
	ck_assert_int_eq(qsm_listener_spread(l, (struct qsm_ctx *[]){ NULL }, 1), -EINVAL);
	ck_assert_int_eq(qsm_listener_spread(l, &wctx, 1), 0);

	q = client_of(&cli_class);
	ck_assert_ptr_nonnull(srv_queue);
	ck_assert_ptr_eq(qsm_conn_ctx(srv_queue), wctx);
	ck_assert_int_eq(qsm_conn_state(srv_queue), QSM_ACCEPT_LIVE);
	echo_once(q, "to the worker");
	ck_assert_uint_eq(counters_of(sctx).handed_off, 1);
	ck_assert_uint_eq(counters_of(sctx).queues_live, 0);
	ck_assert_uint_eq(counters_of(wctx).adopted, 1);
	ck_assert_uint_eq(counters_of(wctx).queues_live, 1);
	ck_assert_uint_eq(counters_of(wctx).events[QSM_EV_CONNECT_REQUEST], 1);

	/* in turn: the listener's own ctx, then the worker again */
	ck_assert_int_eq(qsm_listener_spread(l, both, 2), 0);
	srv_queue = NULL;
	q2 = client_of(&cli_class);
	ck_assert_ptr_eq(qsm_conn_ctx(srv_queue), sctx);
	qsm_conn_destroy(q2);
	pump();
	srv_queue = NULL;
	q2 = client_of(&cli_class);
	ck_assert_ptr_eq(qsm_conn_ctx(srv_queue), wctx);
	ck_assert_uint_eq(counters_of(wctx).adopted, 2);
	ck_assert_uint_eq(counters_of(wctx).queues_live, 2);

	/* closes on the worker's own thread: the client's disconnect ends both of its queues */
	ck_assert_int_eq(qsm_conn_disconnect(q), 0);
	ck_assert_int_eq(qsm_conn_disconnect(q2), 0);
	harness_run_for(&world, 10000);
	ck_assert_uint_eq(counters_of(wctx).queues_live, 0);
	ck_assert_uint_eq(counters_of(wctx).unexpected + counters_of(sctx).unexpected, 0);
	/* back to its own ctx */
	ck_assert_int_eq(qsm_listener_spread(l, NULL, 0), 0);
	srv_queue = NULL;
	cli.mr = NULL;   /* it went with its queue */
	q = client_of(&cli_class);
	ck_assert_ptr_eq(qsm_conn_ctx(srv_queue), sctx);
	ck_assert_uint_eq(counters_of(sctx).handed_off, 2);
}
END_TEST

/* A ctx freed with a request handed to it and not taken yet refuses it: the client hears a
 * reject, and nothing of the id is left. */
START_TEST(test_a_request_handed_to_a_ctx_freed_before_taking_it_is_refused)
{
	struct qsm_listener *l = listen_server();
	struct qsm_conn *q;

	worker_new();
	ck_assert_int_eq(qsm_listener_spread(l, &wctx, 1), 0);
	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &cli_class,
		.dst = (struct sockaddr *)&addr, .policy = { .initial_delay_ms = 3600000 } }, &q), 0);
	ck_assert_int_eq(qsm_conn_connect(q), 0);
	for (int i = 0; i < 20 && !counters_of(sctx).handed_off; i++) {
		qsm_ctx_dispatch(cctx, 0);
		qsm_ctx_dispatch(sctx, 0);
	}
	ck_assert_uint_eq(counters_of(sctx).handed_off, 1);
	qsm_ctx_free(wctx);
	wctx = NULL;
	pump();
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_RECONNECT_WAIT);
	ck_assert_int_eq(qsm_conn_attempts(q), 1);
}
END_TEST

/* qsm_conn_set_qp_depth(): a passive queue sized in REQUESTED, before its accept, and an
 * active one before its connect, each instead of its class's caps (64 and 64 by default): the
 * fabric holds each QP to its own depths; 0 leaves the class's. */
static int sized_requested(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	ck_assert_int_eq(qsm_conn_set_qp_depth(q, 4, 3), 0);
	return qsm_conn_accept(q, NULL, 0);
}

static const struct qsm_class sized_srv_class = {
	.name = "sized-server",
	.super = &srv_class,
	.passive[QSM_ACCEPT_REQUESTED].enter = sized_requested,
};

static void writes_refused_beyond(struct qsm_conn *q, struct buf *from, struct buf *to,
				  int depth)
{
	struct qsm_sge s = { (uintptr_t)from->data, 8, qsm_mr_lkey(from->mr) };
	struct qsm_wr wrs[65];
	int posted = -1;

	for (int i = 0; i <= depth; i++)
		wrs[i] = (struct qsm_wr){ .wr_id = 500 + (uint64_t)i, .opcode = QSM_WR_RDMA_WRITE,
					  .sg_list = &s, .num_sge = 1, .remote_addr = (uintptr_t)to->data,
					  .rkey = qsm_mr_rkey(to->mr), .flags = QSM_POST_SIGNALED };
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, depth + 1, &posted), -ENOBUFS);
	ck_assert_int_eq(posted, 0);
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, depth, &posted), 0);
	ck_assert_int_eq(posted, depth);
	ck_assert_int_eq(qsm_conn_post_list(q, wrs, 1, NULL), -ENOBUFS);
}

START_TEST(test_qp_depth_set_per_queue_replaces_the_class_caps)
{
	struct qsm_listener *l;
	struct qsm_conn *q;
	struct qsm_sge s;

	ck_assert_int_eq(qsm_listener_new(sctx, &(struct qsm_listener_opts){
		.addr = (struct sockaddr *)&addr, .cls = &sized_srv_class }, &l), 0);
	ck_assert_int_eq(qsm_conn_new(cctx, &(struct qsm_conn_opts){ .cls = &cli_class,
		.dst = (struct sockaddr *)&addr, .policy = { .initial_delay_ms = 3600000 } }, &q), 0);
	ck_assert_int_eq(qsm_conn_set_qp_depth(NULL, 1, 1), -EINVAL);
	ck_assert_int_eq(qsm_conn_set_qp_depth(q, QSM_MAX_QP_DEPTH + 1, 0), -EINVAL);
	ck_assert_int_eq(qsm_conn_set_qp_depth(q, 0, QSM_MAX_QP_DEPTH + 1), -EINVAL);
	ck_assert_int_eq(qsm_conn_set_qp_depth(q, 5, 0), 0);
	ck_assert_int_eq(qsm_conn_connect(q), 0);
	pump();
	ck_assert_int_eq(qsm_conn_state(q), QSM_CM_LIVE);
	ck_assert_ptr_nonnull(srv_queue);

	/* the client's send queue takes 5, its receive queue its class's 64 (qp_ready posted 1) */
	writes_refused_beyond(q, &cli, &srv, 5);
	s = (struct qsm_sge){ (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };
	for (int i = 1; i < 64; i++)
		ck_assert_int_eq(qsm_conn_post_recv(q, 600 + (uint64_t)i, &s, 1), 0);
	ck_assert_int_eq(qsm_conn_post_recv(q, 700, &s, 1), -ENOBUFS);
	/* the server's queue: 4 sends, 3 receives (qp_ready posted 1) */
	writes_refused_beyond(srv_queue, &srv, &cli, 4);
	s = (struct qsm_sge){ (uintptr_t)srv.data, 8, qsm_mr_lkey(srv.mr) };
	ck_assert_int_eq(qsm_conn_post_recv(srv_queue, 801, &s, 1), 0);
	ck_assert_int_eq(qsm_conn_post_recv(srv_queue, 802, &s, 1), 0);
	ck_assert_int_eq(qsm_conn_post_recv(srv_queue, 803, &s, 1), -ENOBUFS);
	pump();
	ck_assert_int_eq(cli.completions, 5);
	ck_assert_int_eq(srv.completions, 4);
	ck_assert_int_eq(cli.errors + srv.errors, 0);
	/* each of them may post their depth again */
	writes_refused_beyond(q, &cli, &srv, 5);
	pump();
	ck_assert_int_eq(cli.completions, 10);
	qsm_listener_destroy(l);
}
END_TEST

/* Each kind of bad bind: -EINVAL, nothing posted, no slot held, nothing completes. */
START_TEST(test_the_door_refuses_each_kind_of_bad_bind)
{
	struct qsm_conn *q = connect_client();
	struct qsm_mw *mw, *theirs;
	struct qsm_mr *plain;
	uint64_t at = (uintptr_t)cli.data;
	const uint64_t size = sizeof(cli.data);
	enum { NONE, OURS, THEIRS };
	struct {
		const char *what;
		int win;
		struct qsm_mr **mr;
		uint64_t addr, len;
		int access;
		unsigned int flags;
	} bad[] = {
		{ "no window", NONE, &cli.mr, at, 8, QSM_ACCESS_REMOTE_WRITE, 0 },
		{ "no MR", OURS, NULL, at, 8, QSM_ACCESS_REMOTE_WRITE, 0 },
		{ "another queue's window", THEIRS, &cli.mr, at, 8, QSM_ACCESS_REMOTE_WRITE, 0 },
		{ "another queue's MR", OURS, &srv.mr, (uintptr_t)srv.data, 8, QSM_ACCESS_REMOTE_WRITE, 0 },
		{ "an MR without MW_BIND", OURS, &plain, at, 8, QSM_ACCESS_REMOTE_WRITE, 0 },
		{ "length 0", OURS, &cli.mr, at, 0, QSM_ACCESS_REMOTE_WRITE, 0 },
		{ "a range beyond the MR's end", OURS, &cli.mr, at + 8, size - 7, QSM_ACCESS_REMOTE_WRITE, 0 },
		{ "a range before the MR", OURS, &cli.mr, at - 1, 8, QSM_ACCESS_REMOTE_WRITE, 0 },
		{ "a local access bit", OURS, &cli.mr, at, 8, QSM_ACCESS_LOCAL_WRITE, 0 },
		{ "MW_BIND as access", OURS, &cli.mr, at, 8, QSM_ACCESS_MW_BIND, 0 },
		{ "INLINE", OURS, &cli.mr, at, 8, QSM_ACCESS_REMOTE_WRITE, QSM_POST_INLINE },
	};

	ck_assert_int_eq(qsm_conn_alloc_mw(q, &mw), 0);
	ck_assert_int_eq(qsm_conn_alloc_mw(srv_queue, &theirs), 0);
	ck_assert_int_eq(qsm_conn_reg_mr(q, cli.data, sizeof(cli.data), QSM_ACCESS_LOCAL_WRITE |
					 QSM_ACCESS_REMOTE_WRITE, &plain), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct qsm_mw *w = bad[i].win == OURS ? mw : bad[i].win == THEIRS ? theirs : NULL;
		const struct qsm_mr *m = bad[i].mr ? *bad[i].mr : NULL;

		ck_assert_msg(qsm_conn_bind_mw(q, 400 + i, w, m, bad[i].addr, bad[i].len, bad[i].access,
					       QSM_POST_SIGNALED | bad[i].flags) == -EINVAL,
			      "a bind with %s: not refused", bad[i].what);
	}
	pump();
	ck_assert_int_eq(cli.completions, 0);
	ck_assert_uint_eq(qsm_mw_rkey(mw), 0);
	/* the whole MR is a range the door lets through; then every send slot is still free */
	ck_assert_int_eq(qsm_conn_bind_mw(q, 420, mw, cli.mr, at, size, QSM_ACCESS_REMOTE_WRITE |
					  QSM_ACCESS_REMOTE_READ, QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_int_eq(cli.last.opcode, QSM_WR_BIND_MW);
	ck_assert_int_eq(cli.last.status, QSM_WC_SUCCESS);
	/* the default class: 64 send slots, the bind's free again once its completion was taken */
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(qsm_conn_post_write(q, 430 + (uint64_t)i, &(struct qsm_sge){ at, 8,
			qsm_mr_lkey(cli.mr) }, 1, (uintptr_t)srv.data, qsm_mr_rkey(srv.mr), QSM_POST_SIGNALED), 0);
	pump();
	ck_assert_int_eq(cli.completions, 1 + 64);
	ck_assert_int_eq(cli.errors + srv.errors, 0);
	ck_assert_int_eq(qsm_mr_dereg(plain), 0);
}
END_TEST

/* An SRQ's receives go through the same door: an SRQ of 2 receives of 2 SGEs, never filled. */
static struct qsm_srq *door_srq;

static void door_srq_low(struct qsm_srq *s)
{
	door_srq = s;
}

static int door_srq_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	srv_queue = q;
	return reg(q, &srv);
}

static int door_srq_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	return on_completion(q, wc, &srv);
}

static const struct qsm_class door_srq_class = {
	.name = "door-srq-server",
	.qp_ready = door_srq_qp_ready,
	.completion = door_srq_completion,
	.srq = { .max_wr = 2, .max_sge = DOOR_SGE },
	.srq_low = door_srq_low,
};

START_TEST(test_the_door_refuses_each_kind_of_bad_srq_receive_and_holds_no_slot)
{
	struct qsm_listener *l;
	struct qsm_sge sg[QSM_MAX_SGE + 1];

	door_srq = NULL;
	ck_assert_int_eq(qsm_listener_new(sctx, &(struct qsm_listener_opts){
		.addr = (struct sockaddr *)&addr, .cls = &door_srq_class }, &l), 0);
	client_of(&cli_class);
	ck_assert_ptr_nonnull(door_srq);
	for (int i = 0; i <= QSM_MAX_SGE; i++)
		sg[i] = (struct qsm_sge){ (uintptr_t)srv.data + 8 * (unsigned)i, 8, qsm_mr_lkey(srv.mr) };
	ck_assert_int_eq(qsm_srq_post_recv(NULL, 1, sg, 1), -EINVAL);
	ck_assert_int_eq(qsm_srq_post_recv(door_srq, 1, sg, -1), -EINVAL);
	ck_assert_int_eq(qsm_srq_post_recv(door_srq, 1, sg, QSM_MAX_SGE + 1), -EINVAL);
	ck_assert_int_eq(qsm_srq_post_recv(door_srq, 1, sg, DOOR_SGE + 1), -EINVAL);   /* srq.max_sge */
	ck_assert_int_eq(qsm_srq_post_recv(door_srq, 1, NULL, 1), -EINVAL);
	/* no slot held: both of max_wr go, a third does not; nothing completes */
	ck_assert_int_eq(qsm_srq_post_recv(door_srq, 2, sg, DOOR_SGE), 0);
	ck_assert_int_eq(qsm_srq_post_recv(door_srq, 3, sg, 0), 0);
	ck_assert_int_eq(qsm_srq_post_recv(door_srq, 4, sg, 1), -ENOBUFS);
	pump();
	ck_assert_int_eq(srv.completions + cli.completions, 0);
}
END_TEST

/* ---- batches of completions ---- */

static struct qsm_conn *abort_at_queue;
static int abort_at, batch_seen[2];
static struct qsm_conn *batch_queue[2], *destroy_in_handler;

static int batch_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	int k = q == batch_queue[1];

	ck_assert_ptr_ne(q, destroyed);   /* nothing reaches a queue after its destroy */
	(void)wc;
	batch_seen[k]++;
	if (destroy_in_handler && q != destroy_in_handler) {
		ck_assert_int_eq(qsm_conn_destroy(destroy_in_handler), 0);
		destroyed = destroy_in_handler;
		destroy_in_handler = NULL;
	}
	return q == abort_at_queue && batch_seen[k] == abort_at;
}

static const struct qsm_class batch_class = {
	.name = "batch-client",
	.qp_ready = cli_qp_ready,
	.completion = batch_completion,
};

/* n signaled writes of q into the server's buffer: n completions at the client's ctx. */
static void writes(struct qsm_conn *q, int n, uint64_t first)
{
	struct qsm_sge s = { (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };

	for (int i = 0; i < n; i++)
		ck_assert_int_eq(qsm_conn_post_write(q, first + (uint64_t)i, &s, 1, (uintptr_t)srv.data,
						     qsm_mr_rkey(srv.mr), QSM_POST_SIGNALED), 0);
}

static struct qsm_conn *batch_client(void)
{
	cli.mr = NULL;
	return client_of(&batch_class);
}

static void batch_setup(void)
{
	abort_at_queue = destroy_in_handler = NULL;
	abort_at = 0;
	memset(batch_seen, 0, sizeof(batch_seen));
	listen_server();
	batch_queue[0] = batch_client();
	batch_queue[1] = NULL;
}

/* The budget bounds a call even inside a batch; what is left makes the fd readable. */
START_TEST(test_a_batch_of_completions_keeps_to_the_dispatch_budget)
{
	struct pollfd p = { .fd = qsm_ctx_fd(cctx), .events = POLLIN };

	batch_setup();
	writes(batch_queue[0], 10, 1);
	ck_assert_int_eq(qsm_ctx_dispatch(cctx, 3), 3);
	ck_assert_int_eq(batch_seen[0], 3);
	ck_assert_int_eq(poll(&p, 1, 0), 1);
	ck_assert_int_eq(qsm_ctx_dispatch(cctx, 0), 7);
	ck_assert_int_eq(batch_seen[0], 10);
	ck_assert_int_eq(qsm_ctx_dispatch(cctx, 0), 0);
	ck_assert_uint_eq(count(cctx).completions, 10);
}
END_TEST

/* Issue 15 reported qsm_ctx_dispatch() returning budget + 1 when a batch filled the budget and
 * one of its completions queued an event (the WC_ERROR of an error completion).  Every place
 * of the error completion in the batch (first, just before, at and just after the budget's
 * end), for small budgets and one larger: no call returns more than its budget, and every
 * completion still reaches the handler. */
START_TEST(test_an_error_completion_inside_a_batch_never_makes_dispatch_exceed_its_budget)
{
	static const unsigned budgets[] = { 1, 2, 3, 12 };
	struct qsm_sge s = { 0 };

	batch_setup();
	for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]); b++) {
		unsigned budget = budgets[b];

		for (unsigned good = 0; good <= budget + 1; good++) {
			struct qsm_conn *q = batch_client();
			int r, calls = 0;

			memset(batch_seen, 0, sizeof(batch_seen));
			batch_queue[0] = q;
			s = (struct qsm_sge){ (uintptr_t)cli.data, 8, qsm_mr_lkey(cli.mr) };
			writes(q, (int)good, 1);
			/* refused by the peer: REM_ACCESS_ERR, the QP in ERR, the writes after it flushed */
			ck_assert_int_eq(qsm_conn_post_write(q, 100, &s, 1, (uintptr_t)srv.data, 0xdead,
							     QSM_POST_SIGNALED), 0);
			writes(q, 3, 101);
			do {
				r = qsm_ctx_dispatch(cctx, budget);
				ck_assert_msg(r >= 0 && (unsigned)r <= budget,
					      "budget %u, %u good writes before the error: dispatch returned %d",
					      budget, good, r);
			} while (r > 0 && ++calls < 1000);
			/* the writes, the refused one, the 3 flushed, and the receive qp_ready posted */
			ck_assert_int_eq(batch_seen[0], (int)good + 5);
			pump();
		}
	}
}
END_TEST

/* A handler that aborts its queue in the middle of a batch: the queue's later completions of
 * the batch are dropped and counted, the queue outlives the batch (ASan, valgrind). */
START_TEST(test_a_queue_aborted_in_the_middle_of_a_batch_gets_nothing_more_of_it)
{
	struct qsm_counters k;

	batch_setup();
	abort_at_queue = batch_queue[0];
	abort_at = 2;
	writes(batch_queue[0], 8, 1);
	pump();
	ck_assert_int_eq(batch_seen[0], 2);
	k = count(cctx);
	ck_assert_uint_eq(k.completions, 2);
	ck_assert_uint_ge(k.dropped, 6);
	ck_assert_uint_eq(k.aborts, 1);
	ck_assert_uint_eq(k.popped + k.aborts + k.device_closes, k.dispatched + k.dropped + k.completions);
}
END_TEST

/* A handler that destroys another queue whose completions are in the same batch: the destroy
 * is queued, the rest of the batch waits behind it and the destroyed queue gets none of it. */
START_TEST(test_a_queue_destroyed_by_another_handler_in_a_batch_gets_nothing_more_of_it)
{
	struct qsm_counters k;

	batch_setup();
	batch_queue[1] = batch_client();
	destroy_in_handler = batch_queue[1];
	for (int i = 0; i < 4; i++) {
		writes(batch_queue[0], 1, 10 + (uint64_t)i);
		writes(batch_queue[1], 1, 20 + (uint64_t)i);
	}
	pump();
	ck_assert_int_eq(batch_seen[0], 4);
	ck_assert_int_eq(batch_seen[1], 0);
	k = count(cctx);
	ck_assert_uint_eq(k.completions, 4);
	ck_assert_uint_ge(k.dropped, 4);
	ck_assert_uint_eq(k.popped + k.aborts + k.device_closes, k.dispatched + k.dropped + k.completions);
}
END_TEST

static Suite *data_suite(void)
{
	Suite *s = suite_create("data");
	TCase *t = tcase_create("sim");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_send_is_received_and_echoed_through_completion_handlers);
	tcase_add_test(t, test_qp_depth_set_per_queue_replaces_the_class_caps);
	tcase_add_test(t, test_a_spread_listener_hands_each_request_to_the_next_ctx);
	tcase_add_test(t, test_a_request_handed_to_a_ctx_freed_before_taking_it_is_refused);
	tcase_add_test(t, test_rdma_write_and_read_move_data_with_the_peers_rkey);
	tcase_add_test(t, test_a_read_sink_registration_takes_an_rdma_read);
	tcase_add_test(t, test_bad_rkey_is_an_error_completion_and_the_queue_drains);
	tcase_add_test(t, test_disconnect_flushes_posted_receives_back_to_the_ulp);
	tcase_add_test(t, test_device_removal_releases_mrs_after_device_removed_handler);
	tcase_add_test(t, test_no_completion_after_destroy);
	tcase_add_test(t, test_data_path_argument_checks);
	tcase_add_test(t, test_bad_arguments_are_einval_before_the_state_is_looked_at);
	tcase_add_test(t, test_class_caps_above_qsm_max_sge_are_einval_at_qsm_conn_new_and_qsm_listener_new);
	tcase_add_test(t, test_pool_is_registered_per_device_and_released_with_it);
	tcase_add_test(t, test_post_list_checks_every_wr_before_the_state_and_posts_none);
	tcase_add_test(t, test_post_list_is_enobufs_beyond_max_send_wr_and_imm_reaches_the_handler);
	tcase_add_test(t, test_a_wr_with_more_sges_than_the_class_asked_for_fails_its_whole_list);
	tcase_add_test(t, test_first_error_completion_of_a_qp_is_followed_by_one_wc_error_and_a_new_qp_has_its_own);
	tcase_add_test(t, test_wc_error_comes_before_what_the_completion_handler_queues);
	tcase_add_test(t, test_a_window_bound_by_the_server_takes_the_clients_write_and_its_send_with_inv);
	tcase_add_test(t, test_dereg_of_an_mr_with_a_bound_window_is_ebusy_and_the_mr_stays_usable);
	tcase_add_test(t, test_the_door_refuses_each_kind_of_bad_wr_posts_nothing_and_holds_no_slot);
	tcase_add_test(t, test_the_door_refuses_each_kind_of_bad_bind);
	tcase_add_test(t, test_the_door_refuses_each_kind_of_bad_srq_receive_and_holds_no_slot);
	tcase_add_test(t, test_a_batch_of_completions_keeps_to_the_dispatch_budget);
	tcase_add_test(t, test_an_error_completion_inside_a_batch_never_makes_dispatch_exceed_its_budget);
	tcase_add_test(t, test_a_queue_aborted_in_the_middle_of_a_batch_gets_nothing_more_of_it);
	tcase_add_test(t, test_a_queue_destroyed_by_another_handler_in_a_batch_gets_nothing_more_of_it);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(data_suite)
