/* rdma-qsm tests: examples/nvmet's target logic (rdma.c + cmd.c) on the sim fabric, driven by a
 * tiny hand-written NVMe/RDMA host that sends crafted CM requests and capsules. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/qsm.h>
#include <qsm/sim.h>

#include "check_main.h"
#include "harness.h"
#include "nvmet.h"

/* What examples/nvmet/main.c owns in the real target: here the test is the target's host program. */
struct nvmet_opts g_opts;
struct nvmet_stats g_stats;
uint8_t *g_ns;
struct qsm_pool *g_ns_pool;

#define NS_SIZE (1u << 20)
#define HOSTNQN "nqn.2014-08.org.nvmexpress:uuid:check-nvmet-host"
#define NSLOTS 8                /* capsules a test host has in flight at most */
#define NHOSTS 16

/*
 * Failure injection at the library's door: the test links with --wrap=qsm_conn_accept and
 * --wrap=qsm_conn_reject, so the calls nvmet makes go through these; armed, the next call fails
 * with that errno (what the library returns when its FIFO cannot grow is -ENOMEM).
 */
static int accept_fails, reject_fails;
int __real_qsm_conn_accept(struct qsm_conn *q, const void *pdata, size_t len);
int __real_qsm_conn_reject(struct qsm_conn *q, const void *pdata, size_t len);
int __wrap_qsm_conn_accept(struct qsm_conn *q, const void *pdata, size_t len);
int __wrap_qsm_conn_reject(struct qsm_conn *q, const void *pdata, size_t len);

int __wrap_qsm_conn_accept(struct qsm_conn *q, const void *pdata, size_t len)
{
	int e = accept_fails;

	accept_fails = 0;
	return e ? -e : __real_qsm_conn_accept(q, pdata, len);
}

int __wrap_qsm_conn_reject(struct qsm_conn *q, const void *pdata, size_t len)
{
	int e = reject_fails;

	reject_fails = 0;
	return e ? -e : __real_qsm_conn_reject(q, pdata, len);
}

/* ---- the test host: one active queue per struct host (its qsm_conn_user) ---- */

struct host {
	struct qsm_conn *q;
	struct nvme_sqe sqe[NSLOTS];
	struct nvme_cqe cqe[NSLOTS];             /* receive buffers for responses */
	struct nvmf_connect_data data;           /* the Connect data the target RDMA READs */
	struct qsm_mr *sqe_mr, *cqe_mr, *data_mr;
	unsigned nsent;
	struct nvme_cqe rsp[4 * NSLOTS];         /* responses, in arrival order */
	unsigned nrsp;
	int live, rejected, lost, released;
	uint16_t rej_sts;                        /* the NVMe/RDMA reject status, if rejected */
};

static struct qsm_sim *sim;
static struct qsm_ctx *tctx, *hctx;          /* target, host */
static struct harness world = { .ctx = { &hctx, &tctx }, .bound = 100000, .now_ns = 1000 * HARNESS_MS };
static struct sockaddr_in addr;
static struct host hosts[NHOSTS];

static int host_post_recv(struct host *h, unsigned i)
{
	struct qsm_sge s = { (uintptr_t)&h->cqe[i], sizeof(h->cqe[i]), qsm_mr_lkey(h->cqe_mr) };

	return qsm_conn_post_recv(h->q, i, &s, 1);
}

static int host_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct host *h = qsm_conn_user(q);

	(void)ev;
	h->q = q;
	ck_assert_int_eq(qsm_conn_reg_mr(q, h->sqe, sizeof(h->sqe), 0, &h->sqe_mr), 0);
	ck_assert_int_eq(qsm_conn_reg_mr(q, h->cqe, sizeof(h->cqe), QSM_ACCESS_LOCAL_WRITE,
					 &h->cqe_mr), 0);
	ck_assert_int_eq(qsm_conn_reg_mr(q, &h->data, sizeof(h->data), QSM_ACCESS_REMOTE_READ,
					 &h->data_mr), 0);
	for (unsigned i = 0; i < NSLOTS; i++)
		ck_assert_int_eq(host_post_recv(h, i), 0);
	return 0;
}

static int host_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct host *h = qsm_conn_user(q);

	if (wc->status != QSM_WC_SUCCESS || wc->opcode != QSM_WR_RECV)
		return 0;
	ck_assert_uint_lt(h->nrsp, sizeof(h->rsp) / sizeof(h->rsp[0]));
	h->rsp[h->nrsp++] = h->cqe[wc->wr_id];
	return host_post_recv(h, (unsigned)wc->wr_id) < 0;
}

static int host_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct host *h = qsm_conn_user(q);

	(void)ev;
	h->live = 1;
	return 0;
}

/* Refused or lost: a test host never retries. */
static int host_wait(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct host *h = qsm_conn_user(q);
	struct nvme_rdma_cm_rej rej;

	if (ev->event == QSM_EV_REJECTED) {
		h->rejected = 1;
		if (ev->private_data && ev->private_data_len >= sizeof(rej)) {
			memcpy(&rej, ev->private_data, sizeof(rej));
			h->rej_sts = le16toh(rej.sts);
		}
	} else {
		h->lost = 1;
	}
	h->live = 0;
	return qsm_conn_disconnect(q);
}

static void host_release(struct qsm_conn *q)
{
	struct host *h = qsm_conn_user(q);

	h->released = 1;
	h->live = 0;
	h->q = NULL;
}

static const struct qsm_class host_class = {
	.name = "check-nvme-host",
	.active = {
		[QSM_CM_LIVE] = { .enter = host_live },
		[QSM_CM_RECONNECT_WAIT] = { .enter = host_wait },
	},
	.qp_ready = host_qp_ready,
	.completion = host_completion,
	.release = host_release,
	.qp = { .max_send_wr = 2 * NSLOTS, .max_recv_wr = NSLOTS },
};

/* Dispatches both ctxs until idle; the virtual clock stands still, so no timer fires. */
static void pump(void)
{
	harness_settle(&world);
}

/* A host queue asking for queue qid with hsqsize (0's based) and hrqsize; not pumped. */
static struct host *host_start(unsigned i, uint16_t qid, uint16_t hsqsize, uint16_t hrqsize)
{
	struct host *h = &hosts[i];
	struct nvme_rdma_cm_req req = { .recfmt = 0, .qid = htole16(qid), .hrqsize = htole16(hrqsize),
					.hsqsize = htole16(hsqsize) };
	struct qsm_conn *q;

	ck_assert_uint_lt(i, NHOSTS);
	memset(h, 0, sizeof(*h));
	ck_assert_int_eq(qsm_conn_new(hctx, &(struct qsm_conn_opts){ .cls = &host_class,
		.dst = (struct sockaddr *)&addr, .private_data = &req, .private_data_len = sizeof(req),
		.policy = { .initial_delay_ms = 3600000 }, .user = h }, &q), 0);
	ck_assert_int_eq(qsm_conn_connect(q), 0);
	return h;
}

static struct host *host_up(unsigned i, uint16_t qid, uint16_t hsqsize)
{
	struct host *h = host_start(i, qid, hsqsize, hsqsize + 1);

	pump();
	ck_assert_msg(h->live, "host %u (qid %u) is not live", i, qid);
	return h;
}

static void host_send(struct host *h, const void *sqe)
{
	unsigned slot = h->nsent++ % NSLOTS;
	struct qsm_sge s = { (uintptr_t)&h->sqe[slot], NVME_SQE_SIZE, qsm_mr_lkey(h->sqe_mr) };

	memcpy(&h->sqe[slot], sqe, NVME_SQE_SIZE);
	ck_assert_int_eq(qsm_conn_post_send(h->q, 100 + slot, &s, 1, 0), 0);
}

/* A Fabrics Connect for qid (cntlid 0xffff: any, for the admin queue), its data in h->data. */
static struct nvmf_connect_cmd connect_capsule(struct host *h, uint16_t cid, uint16_t qid,
					       uint16_t sqsize, uint16_t cntlid)
{
	struct nvmf_connect_cmd c = { .opcode = NVME_FABRICS_COMMAND, .cid = htole16(cid),
				      .fctype = NVMF_FCTYPE_CONNECT, .qid = htole16(qid),
				      .sqsize = htole16(sqsize), .kato = htole32(15000) };
	uint32_t len = sizeof(h->data), rkey = qsm_mr_rkey(h->data_mr);

	memset(&h->data, 0, sizeof(h->data));
	h->data.cntlid = htole16(cntlid);
	snprintf(h->data.subsysnqn, sizeof(h->data.subsysnqn), "%s", g_opts.subnqn);
	snprintf(h->data.hostnqn, sizeof(h->data.hostnqn), "%s", HOSTNQN);
	c.sgl.addr = htole64((uintptr_t)&h->data);
	c.sgl.length[0] = len & 0xff;
	c.sgl.length[1] = (len >> 8) & 0xff;
	c.sgl.length[2] = (len >> 16) & 0xff;
	memcpy(c.sgl.key, &(uint32_t){ htole32(rkey) }, 4);
	c.sgl.type = NVME_SGL_KEYED_DATA << 4 | NVME_SGL_SUB_ADDRESS;
	return c;
}

/* Sends that Connect; not pumped. */
static void host_send_connect(struct host *h, uint16_t cid, uint16_t qid, uint16_t sqsize,
			      uint16_t cntlid)
{
	struct nvmf_connect_cmd c = connect_capsule(h, cid, qid, sqsize, cntlid);

	host_send(h, &c);
}

static void host_send_prop_set_cc(struct host *h, uint16_t cid, uint32_t cc)
{
	struct nvmf_prop_cmd p = { .opcode = NVME_FABRICS_COMMAND, .cid = htole16(cid),
				   .fctype = NVMF_FCTYPE_PROP_SET, .attrib = 0,
				   .offset = htole32(NVME_REG_CC), .value = htole64(cc) };

	((struct nvme_sqe *)(void *)&p)->sgl.type = NVME_SGL_KEYED_DATA << 4;   /* null keyed */
	host_send(h, &p);
}

/* Set Features, Number of Queues: n I/O queues asked for. */
static void host_send_set_nr_queues(struct host *h, uint16_t cid, unsigned n)
{
	struct nvme_sqe s = { .opcode = NVME_ADMIN_SET_FEATURES, .cid = htole16(cid),
			      .cdw10 = htole32(NVME_FEAT_NUM_QUEUES),
			      .cdw11 = htole32((n - 1) | (n - 1) << 16) };

	s.sgl.type = NVME_SGL_KEYED_DATA << 4;   /* a null keyed descriptor, as the kernel sends */
	host_send(h, &s);
}

/* The response to cid: its status without phase and DNR (SCT << 8 | SC), result in *result. */
static int host_status(const struct host *h, uint16_t cid, uint64_t *result)
{
	for (unsigned i = 0; i < h->nrsp; i++)
		if (le16toh(h->rsp[i].cid) == cid) {
			if (result)
				*result = le64toh(h->rsp[i].result);
			return (le16toh(h->rsp[i].status) >> 1) & 0x7ff;
		}
	return -1;
}

static unsigned host_responses(const struct host *h, uint16_t cid)
{
	unsigned n = 0;

	for (unsigned i = 0; i < h->nrsp; i++)
		n += le16toh(h->rsp[i].cid) == cid;
	return n;
}

/* An admin queue, connected to a new controller, enabled, n I/O queues granted: its cntlid. */
static uint16_t host_admin_up(unsigned i, struct host **ret, unsigned nio)
{
	struct host *h = host_up(i, 0, NVMET_AQ_DEPTH - 1);
	uint64_t cntlid;

	host_send_connect(h, 1, 0, NVMET_AQ_DEPTH - 1, 0xffff);
	pump();
	ck_assert_int_eq(host_status(h, 1, &cntlid), NVME_SC_SUCCESS);
	host_send_prop_set_cc(h, 2, NVME_CC_EN);
	host_send_set_nr_queues(h, 3, nio);
	pump();
	ck_assert_int_eq(host_status(h, 2, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(h, 3, NULL), NVME_SC_SUCCESS);
	*ret = h;
	return (uint16_t)cntlid;
}

static void host_close(struct host *h)
{
	ck_assert_ptr_nonnull(h->q);
	ck_assert_int_eq(qsm_conn_disconnect(h->q), 0);
	pump();
	ck_assert(h->released);
}

static void setup(void)
{
	struct qsm_fabric *f;
	struct qsm_listener *l;

	memset(&g_stats, 0, sizeof(g_stats));
	memset(hosts, 0, sizeof(hosts));
	accept_fails = reject_fails = 0;
	g_opts = (struct nvmet_opts){ .addr = "192.0.2.1", .port = 4420,
		.subnqn = "nqn.2024-01.io.rdma-qsm:check", .ns_size = NS_SIZE, .max_io_queues = 4,
		.max_ctrls = 4, .family = AF_INET };
	ck_assert_ptr_nonnull(g_ns = calloc(1, NS_SIZE));
	ck_assert_int_eq(qsm_sim_new(&sim), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &tctx), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &hctx), 0);
	ck_assert_int_eq(qsm_ctx_reg_pool(tctx, g_ns, NS_SIZE, QSM_ACCESS_LOCAL_WRITE, &g_ns_pool), 0);
	addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(4420) };
	inet_pton(AF_INET, "192.0.2.1", &addr.sin_addr);
	ck_assert_int_eq(qsm_listener_new(tctx, &(struct qsm_listener_opts){
		.addr = (struct sockaddr *)&addr, .cls = &nvmet_queue_class }, &l), 0);
}

/* As main.c ends: the target's queues and controllers go without callbacks; nothing leaks. */
static void teardown(void)
{
	struct qsm_sim_stats st;
	struct qsm_counters c;

	ck_assert_int_eq(qsm_ctx_counters(tctx, &c, sizeof(c)), 0);
	ck_assert_uint_eq(c.unexpected, 0);
	qsm_ctx_free(hctx);
	nvmet_queues_take_all();
	qsm_ctx_free(tctx);
	nvmet_queues_free_all();
	nvmet_ctrls_free_all();
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids + st.qps + st.device_refs + st.mrs, 0);
	qsm_sim_free(sim);
	free(g_ns);
}

/* The baseline the other tests refine: admin queue, Connect, enable, an I/O queue, and every
 * queue and controller gone once the host has closed its queues. */
START_TEST(test_host_connects_admin_and_io_queues_and_closing_frees_all)
{
	struct host *a, *io;
	uint16_t cntlid = host_admin_up(0, &a, 1);
	uint64_t r;

	ck_assert_uint_eq(nvmet_ctrls_live(), 1);
	io = host_up(1, 1, 15);
	host_send_connect(io, 1, 1, 15, cntlid);
	pump();
	ck_assert_int_eq(host_status(io, 1, &r), NVME_SC_SUCCESS);
	ck_assert_uint_eq(r, cntlid);
	ck_assert_uint_eq(nvmet_queues_live(), 2);
	host_close(io);
	host_close(a);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
	ck_assert_uint_eq(nvmet_queues_live(), 0);
	ck_assert_uint_eq(g_stats.ctrls_created, 1);
	ck_assert_uint_eq(g_stats.ctrls_freed, 1);
}
END_TEST

/* (a) The request handler's accept or reject fails: its non-zero return destroys the queue
 * without release (qsm_class(3)), so nvmet must unlink and free the queue itself.  The library
 * turns the host down, and the queue list stays sound for the next host. */
START_TEST(test_accept_or_reject_failing_in_request_handler_unlinks_and_frees_the_queue)
{
	struct host *h, *a;

	accept_fails = ENOMEM;
	h = host_start(0, 0, NVMET_AQ_DEPTH - 1, NVMET_AQ_DEPTH);
	pump();
	ck_assert_int_eq(accept_fails, 0);
	ck_assert(h->rejected);
	ck_assert(h->released);
	ck_assert_uint_eq(nvmet_queues_live(), 0);

	/* a request nvmet turns down (hsqsize 0: a queue of one entry), and the reject fails */
	reject_fails = ENOMEM;
	h = host_start(1, 0, 0, 1);
	pump();
	ck_assert_int_eq(reject_fails, 0);
	ck_assert(h->rejected);
	ck_assert_uint_eq(nvmet_queues_live(), 0);
	ck_assert_uint_eq(g_stats.queues_requested, 2);

	host_admin_up(2, &a, 1);
	ck_assert_uint_eq(nvmet_queues_live(), 1);
	host_close(a);
	ck_assert_uint_eq(nvmet_queues_live(), 0);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
}
END_TEST

/* (b) Two Connect capsules pipelined on one admin queue: the second arrives while the first's
 * Connect data is still being read.  One controller is made; the second Connect, and one on the
 * queue once it is bound, is a Command Sequence Error (the queue exists or is being created,
 * as the kernel's nvmet answers a duplicate qid); the controller goes with its admin queue. */
START_TEST(test_pipelined_connects_on_one_queue_make_one_controller)
{
	struct host *h = host_up(0, 0, NVMET_AQ_DEPTH - 1);
	uint64_t cntlid;

	host_send_connect(h, 1, 0, NVMET_AQ_DEPTH - 1, 0xffff);
	host_send_connect(h, 2, 0, NVMET_AQ_DEPTH - 1, 0xffff);
	pump();
	ck_assert_uint_eq(host_responses(h, 1), 1);
	ck_assert_uint_eq(host_responses(h, 2), 1);
	ck_assert_int_eq(host_status(h, 1, &cntlid), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(h, 2, NULL), NVME_SC_CMD_SEQ_ERROR);
	ck_assert_uint_eq(nvmet_ctrls_live(), 1);
	ck_assert_uint_eq(g_stats.ctrls_created, 1);

	host_send_connect(h, 3, 0, NVMET_AQ_DEPTH - 1, 0xffff);
	pump();
	ck_assert_int_eq(host_status(h, 3, NULL), NVME_SC_CMD_SEQ_ERROR);
	ck_assert_uint_eq(nvmet_ctrls_live(), 1);

	host_close(h);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
	ck_assert_uint_eq(g_stats.ctrls_freed, 1);
}
END_TEST

/* (b) An I/O queue's Connect pipelined twice, and a second queue asking for a qid in use: one
 * binding, the rest Command Sequence Errors; closing the admin queue disconnects the I/O queue
 * and frees the controller. */
START_TEST(test_duplicate_io_connects_bind_once_and_admin_close_frees_the_controller)
{
	struct host *a, *io, *dup;
	uint16_t cntlid = host_admin_up(0, &a, 2);

	io = host_up(1, 1, 15);
	host_send_connect(io, 1, 1, 15, cntlid);
	host_send_connect(io, 2, 1, 15, cntlid);
	dup = host_up(2, 1, 15);
	host_send_connect(dup, 1, 1, 15, cntlid);
	pump();
	ck_assert_int_eq(host_status(io, 1, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(io, 2, NULL), NVME_SC_CMD_SEQ_ERROR);
	ck_assert_int_eq(host_status(dup, 1, NULL), NVME_SC_CMD_SEQ_ERROR);
	host_close(dup);

	ck_assert_uint_eq(nvmet_ctrls_live(), 1);
	ck_assert_int_eq(qsm_conn_disconnect(a->q), 0);
	pump();
	ck_assert(a->released);
	ck_assert(io->lost);
	ck_assert(io->released);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
	ck_assert_uint_eq(nvmet_queues_live(), 0);
}
END_TEST

/* (c) No more controllers than -c: an admin queue's request beyond is rejected at once, before
 * any buffer is allocated, with the NVMe/RDMA reject status "no resources"; a freed
 * controller's place is taken again. */
START_TEST(test_admin_queues_beyond_the_controller_cap_are_rejected_at_the_request)
{
	struct host *a[2], *h;

	g_opts.max_ctrls = 2;
	host_admin_up(0, &a[0], 1);
	host_admin_up(1, &a[1], 1);
	h = host_start(2, 0, NVMET_AQ_DEPTH - 1, NVMET_AQ_DEPTH);
	pump();
	ck_assert(h->rejected);
	ck_assert_uint_eq(h->rej_sts, NVME_RDMA_CM_NO_RSC);
	ck_assert_uint_eq(nvmet_ctrls_live(), 2);
	ck_assert_uint_eq(nvmet_queues_live(), 2);

	host_close(a[0]);
	host_admin_up(3, &a[0], 1);
	ck_assert_uint_eq(nvmet_ctrls_live(), 2);
	host_close(a[0]);
	host_close(a[1]);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
}
END_TEST

/* (c) No more I/O queues than -q per controller: a request for a qid beyond is rejected with
 * "invalid qid"; and queues that never send a Connect are bounded too: no more than every
 * controller's admin and I/O queues (-c x (1 + -q)) exist at once, the rest get "no resources". */
START_TEST(test_io_queues_beyond_the_queue_cap_are_rejected_at_the_request)
{
	struct host *a, *h;

	g_opts.max_ctrls = 1;
	g_opts.max_io_queues = 2;
	host_admin_up(0, &a, 2);
	h = host_start(1, 3, 15, 16);
	pump();
	ck_assert(h->rejected);
	ck_assert_uint_eq(h->rej_sts, NVME_RDMA_CM_INVALID_QID);

	host_up(2, 1, 15);
	host_up(3, 2, 15);
	h = host_start(4, 1, 15, 16);
	pump();
	ck_assert(h->rejected);
	ck_assert_uint_eq(h->rej_sts, NVME_RDMA_CM_NO_RSC);
	ck_assert_uint_eq(nvmet_queues_live(), 3);
	host_close(&hosts[2]);
	host_up(5, 1, 15);
	ck_assert_uint_eq(nvmet_queues_live(), 3);
}
END_TEST

/* A Connect of a record format the target does not know: Connect Incompatible Format (01h/80h),
 * distinct from Connect Controller Busy (01h/81h). */
START_TEST(test_connect_of_unknown_recfmt_is_incompatible_format)
{
	struct host *h = host_up(0, 0, NVMET_AQ_DEPTH - 1);
	struct nvmf_connect_cmd c = connect_capsule(h, 1, 0, NVMET_AQ_DEPTH - 1, 0xffff);

	c.recfmt = htole16(1);
	host_send(h, &c);
	pump();
	ck_assert_int_eq(host_status(h, 1, NULL), 0x180);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
}
END_TEST

static Suite *nvmet_suite(void)
{
	Suite *s = suite_create("nvmet");
	TCase *t = tcase_create("target");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_host_connects_admin_and_io_queues_and_closing_frees_all);
	tcase_add_test(t, test_accept_or_reject_failing_in_request_handler_unlinks_and_frees_the_queue);
	tcase_add_test(t, test_pipelined_connects_on_one_queue_make_one_controller);
	tcase_add_test(t, test_duplicate_io_connects_bind_once_and_admin_close_frees_the_controller);
	tcase_add_test(t, test_admin_queues_beyond_the_controller_cap_are_rejected_at_the_request);
	tcase_add_test(t, test_io_queues_beyond_the_queue_cap_are_rejected_at_the_request);
	tcase_add_test(t, test_connect_of_unknown_recfmt_is_incompatible_format);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(nvmet_suite)
