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
uint8_t *g_ns;

/* The target's thread (its ctx: tctx), as main.c makes each of its threads (-T), and a second one (tt2, its
 * ctx tctx2) in the tests of a target on two threads */
static struct nvmet_thread tt, tt2;

static int flush_posts(void)
{
	return nvmet_flush_posts(&tt) + (tt2.ctx ? nvmet_flush_posts(&tt2) : 0);
}

static uint64_t ctrls_counted(int freed)
{
	uint64_t created, gone;

	nvmet_ctrls_counted(&created, &gone);
	return freed ? gone : created;
}

#define NS_SIZE (1u << 20)
#define HOSTNQN "nqn.2014-08.org.nvmexpress:uuid:check-nvmet-host"
#define NSLOTS 8                /* capsules a test host has in flight at most */
#define NHOSTS 16
#define IOBUF (16u << 10)       /* a test host's buffer for I/O data */
#define CAPSULE (NVME_SQE_SIZE + NVMET_ICD_MAX + 16)   /* a capsule a test host may send */

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

/* And --wrap=qsm_conn_post_read, _recv, _list: the RDMA READs the target posts, counted, and the
 * order of its receives ('r') and of its lists of sends ('[...]'), logged. */
static struct qsm_ctx *tctx;
static unsigned reads_posted;
static char posts[64];
static unsigned nposts;
static unsigned srq_posts;
int __real_qsm_conn_post_read(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sg, int n,
			      uint64_t raddr, uint32_t rkey, unsigned flags);
int __wrap_qsm_conn_post_read(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sg, int n,
			      uint64_t raddr, uint32_t rkey, unsigned flags);
int __real_qsm_conn_post_recv(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sg, int n);
int __wrap_qsm_conn_post_recv(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sg, int n);

int __wrap_qsm_conn_post_read(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sg, int n,
			      uint64_t raddr, uint32_t rkey, unsigned flags)
{
	reads_posted++;
	return __real_qsm_conn_post_read(q, wr_id, sg, n, raddr, rkey, flags);
}

static void post_logged(struct qsm_conn *q, char what)
{
	if (qsm_conn_ctx(q) == tctx && nposts < sizeof(posts) - 1)
		posts[nposts++] = what;
}

int __wrap_qsm_conn_post_recv(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sg, int n)
{
	post_logged(q, 'r');
	return __real_qsm_conn_post_recv(q, wr_id, sg, n);
}

/* A receive posted to the target's SRQ (-Q) is logged as one of a queue's: 'r'. */
int __real_qsm_srq_post_recv(struct qsm_srq *s, uint64_t wr_id, const struct qsm_sge *sg, int n);
int __wrap_qsm_srq_post_recv(struct qsm_srq *s, uint64_t wr_id, const struct qsm_sge *sg, int n);
int __wrap_qsm_srq_post_recv(struct qsm_srq *s, uint64_t wr_id, const struct qsm_sge *sg, int n)
{
	srq_posts++;
	if (qsm_srq_ctx(s) == tctx && nposts < sizeof(posts) - 1)
		posts[nposts++] = 'r';
	return __real_qsm_srq_post_recv(s, wr_id, sg, n);
}


/* A list posted at once (one doorbell): '[', then each WR ('w' an RDMA WRITE, 's' a SEND, 'i' a
 * SEND_WITH_INV, 'R' a READ), then ']'. */
int __real_qsm_conn_post_list(struct qsm_conn *q, const struct qsm_wr *wrs, int n, int *posted);
int __wrap_qsm_conn_post_list(struct qsm_conn *q, const struct qsm_wr *wrs, int n, int *posted);
int __wrap_qsm_conn_post_list(struct qsm_conn *q, const struct qsm_wr *wrs, int n, int *posted)
{
	post_logged(q, '[');
	for (int i = 0; i < n; i++)
		post_logged(q, wrs[i].opcode == QSM_WR_RDMA_WRITE ? 'w' :
			       wrs[i].opcode == QSM_WR_SEND ? 's' : wrs[i].opcode == QSM_WR_SEND_WITH_INV ? 'i' :
			       wrs[i].opcode == QSM_WR_RDMA_READ ? 'R' : '?');
	post_logged(q, ']');
	return __real_qsm_conn_post_list(q, wrs, n, posted);
}

/* --wrap=qsm_ctx_reg_pool: the next pool_fails registrations fail, -ENOMEM (the SRQ's buffers). */
static unsigned pool_fails;
int __real_qsm_ctx_reg_pool(struct qsm_ctx *ctx, void *addr, size_t len, int access, struct qsm_pool **ret);
int __wrap_qsm_ctx_reg_pool(struct qsm_ctx *ctx, void *addr, size_t len, int access, struct qsm_pool **ret);
int __wrap_qsm_ctx_reg_pool(struct qsm_ctx *ctx, void *addr, size_t len, int access, struct qsm_pool **ret)
{
	if (pool_fails) {
		pool_fails--;
		return -ENOMEM;
	}
	return __real_qsm_ctx_reg_pool(ctx, addr, len, access, ret);
}

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
	uint8_t sqe[NSLOTS][CAPSULE];            /* command capsules: the SQE, in-capsule data */
	struct nvme_cqe cqe[NSLOTS];             /* receive buffers for responses */
	struct nvmf_connect_data data;           /* the Connect data the target RDMA READs */
	uint8_t io[IOBUF];                       /* I/O data, both ways */
	struct qsm_mr *sqe_mr, *cqe_mr, *data_mr, *io_mr;
	unsigned nsent;
	struct nvme_cqe rsp[4 * NSLOTS];         /* responses, in arrival order */
	unsigned nrsp;
	unsigned ninv;                           /* responses that came SEND_WITH_INV */
	uint32_t inv_rkey;                       /* the last one's invalidated rkey */
	int live, rejected, lost, released;
	uint16_t rej_sts;                        /* the NVMe/RDMA reject status, if rejected */
};

static struct qsm_sim *sim;
static struct qsm_ctx *hctx;                 /* the host's; the target's is tctx */
static struct qsm_ctx *tctx2;                /* the target's second thread's (setup_two) */
static struct qsm_listener *tl;              /* the target's listener, on tctx */
static struct harness world = { .ctx = { &hctx, &tctx, &tctx2 }, .bound = 100000, .now_ns = 1000 * HARNESS_MS,
				 .after_dispatch = flush_posts };
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
	ck_assert_int_eq(qsm_conn_reg_mr(q, h->io, sizeof(h->io), QSM_ACCESS_LOCAL_WRITE |
					 QSM_ACCESS_REMOTE_READ | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_MW_BIND,
					 &h->io_mr), 0);
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
	if (wc->wc_flags & QSM_WC_WITH_INV) {
		h->ninv++;
		h->inv_rkey = wc->invalidated_rkey;
	}
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

/* Sends a capsule: the SQE, then len bytes of in-capsule data (none: len 0). */
static void host_send_capsule(struct host *h, const void *sqe, const void *data, uint32_t len)
{
	unsigned slot = h->nsent++ % NSLOTS;
	struct qsm_sge s = { (uintptr_t)h->sqe[slot], NVME_SQE_SIZE + len, qsm_mr_lkey(h->sqe_mr) };

	ck_assert_uint_le(NVME_SQE_SIZE + len, CAPSULE);
	memcpy(h->sqe[slot], sqe, NVME_SQE_SIZE);
	if (len)
		memcpy(h->sqe[slot] + NVME_SQE_SIZE, data, len);
	/* signaled: a test may send more capsules than the send queue holds, over time */
	ck_assert_int_eq(qsm_conn_post_send(h->q, 100 + slot, &s, 1, QSM_POST_SIGNALED), 0);
}

static void host_send(struct host *h, const void *sqe)
{
	host_send_capsule(h, sqe, NULL, 0);
}

/* A Fabrics Connect for qid (cntlid 0xffff: any, for the admin queue), its data in h->data. */
static struct nvmf_connect_cmd connect_capsule(struct host *h, uint16_t cid, uint16_t qid,
					       uint16_t sqsize, uint16_t cntlid)
{
	struct nvmf_connect_cmd c = { .opcode = NVME_FABRICS_COMMAND, .rsvd1 = NVME_CMD_PSDT_SGL,
				      .cid = htole16(cid), .fctype = NVMF_FCTYPE_CONNECT, .qid = htole16(qid),
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
	struct nvmf_prop_cmd p = { .opcode = NVME_FABRICS_COMMAND, .rsvd1 = NVME_CMD_PSDT_SGL,
				   .cid = htole16(cid), .fctype = NVMF_FCTYPE_PROP_SET, .attrib = 0,
				   .offset = htole32(NVME_REG_CC), .value = htole64(cc) };

	((struct nvme_sqe *)(void *)&p)->sgl.type = NVME_SGL_KEYED_DATA << 4;   /* null keyed */
	host_send(h, &p);
}

/* Set Features, Number of Queues: n I/O queues asked for. */
static void host_send_set_nr_queues(struct host *h, uint16_t cid, unsigned n)
{
	struct nvme_sqe s = { .opcode = NVME_ADMIN_SET_FEATURES, .flags = NVME_CMD_PSDT_SGL,
			      .cid = htole16(cid), .cdw10 = htole32(NVME_FEAT_NUM_QUEUES),
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

/* The response to cid: whether it says Do Not Retry. */
static int host_dnr(const struct host *h, uint16_t cid)
{
	for (unsigned i = 0; i < h->nrsp; i++)
		if (le16toh(h->rsp[i].cid) == cid)
			return (le16toh(h->rsp[i].status) >> 1 & NVME_STATUS_DNR) != 0;
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

/* A command capsule as the kernel host sends one: PSDT 01b, a null keyed SGL data block. */
static struct nvme_sqe sqe_of(uint8_t opcode, uint16_t cid)
{
	struct nvme_sqe s = { .opcode = opcode, .flags = NVME_CMD_PSDT_SGL, .cid = htole16(cid) };

	s.sgl.type = NVME_SGL_KEYED_DATA << 4 | NVME_SGL_SUB_ADDRESS;
	return s;
}

/* DPTR: a keyed SGL data block of len bytes at h->io (len may be what h->io cannot hold: the
 * target is to refuse such a descriptor before it moves a byte). */
static void sgl_keyed(struct host *h, struct nvme_sqe *s, uint32_t len)
{
	s->sgl.addr = htole64((uintptr_t)h->io);
	s->sgl.length[0] = len & 0xff;
	s->sgl.length[1] = (len >> 8) & 0xff;
	s->sgl.length[2] = (len >> 16) & 0xff;
	memcpy(s->sgl.key, &(uint32_t){ htole32(qsm_mr_rkey(h->io_mr)) }, 4);
	s->sgl.type = NVME_SGL_KEYED_DATA << 4 | NVME_SGL_SUB_ADDRESS;
}

/* DPTR: a data block descriptor with an offset into the capsule (in-capsule data). */
static void sgl_in_capsule(struct nvme_sqe *s, uint64_t offset, uint32_t len)
{
	s->sgl.addr = htole64(offset);
	memcpy(s->sgl.length, &(uint32_t){ htole32(len) }, 4);   /* 32 bits: into the key's place */
	s->sgl.type = NVME_SGL_DATA_BLOCK << 4 | NVME_SGL_SUB_OFFSET;
}

/* Read or Write of nlb blocks (1's based) at slba on namespace 1, its data at h->io, the SGL
 * describing len bytes. */
static struct nvme_sqe rw_capsule(struct host *h, uint8_t opcode, uint16_t cid, uint64_t slba,
				  uint32_t nlb, uint32_t len)
{
	struct nvme_sqe s = sqe_of(opcode, cid);

	s.nsid = htole32(1);
	s.cdw10 = htole32((uint32_t)slba);
	s.cdw11 = htole32((uint32_t)(slba >> 32));
	s.cdw12 = htole32(nlb - 1);
	sgl_keyed(h, &s, len);
	return s;
}

/* An admin queue up as host_admin_up, and I/O queue 1 of its controller, connected (hosts 0, 1). */
static struct host *host_io_up(struct host **admin)
{
	uint16_t cntlid = host_admin_up(0, admin, 1);
	struct host *io = host_up(1, 1, 15);

	host_send_connect(io, 1, 1, 15, cntlid);
	pump();
	ck_assert_int_eq(host_status(io, 1, NULL), NVME_SC_SUCCESS);
	return io;
}

static void host_close(struct host *h)
{
	ck_assert_ptr_nonnull(h->q);
	ck_assert_int_eq(qsm_conn_disconnect(h->q), 0);
	pump();
	ck_assert(h->released);
}

/* The target as main.c makes it, its queues on an SRQ per device when srq_depth is not 0 (-Q). */
static void setup_with(uint32_t srq_depth)
{
	struct qsm_fabric *f;

	memset(hosts, 0, sizeof(hosts));
	accept_fails = reject_fails = 0;
	pool_fails = 0;
	reads_posted = 0;
	g_opts = (struct nvmet_opts){ .addr = "192.0.2.1", .port = 4420,
		.subnqn = "nqn.2024-01.io.rdma-qsm:check", .ns_size = NS_SIZE, .max_io_queues = 4,
		.max_ctrls = 4, .max_ctrl_cmds = 1024, .max_ctrl_data = 128u << 20,
		.icd_size = NVMET_ICD_DEFAULT, .family = AF_INET, .srq_depth = srq_depth };
	srq_posts = 0;
	ck_assert_ptr_nonnull(g_ns = calloc(1, NS_SIZE));
	ck_assert_int_eq(qsm_sim_new(&sim), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &tctx), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &hctx), 0);
	ck_assert_int_eq(nvmet_thread_init(&tt, tctx), 0);
	addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(4420) };
	inet_pton(AF_INET, "192.0.2.1", &addr.sin_addr);
	ck_assert_int_eq(qsm_listener_new(tctx, &(struct qsm_listener_opts){
		.addr = (struct sockaddr *)&addr, .cls = nvmet_class(),
		.relisten = { .initial_delay_ms = 100, .max_delay_ms = 100 } }, &tl), 0);
}

static void setup(void)
{
	setup_with(0);
}

static void setup_srq(void)
{
	setup_with(NVMET_MAX_DEPTH);
}

/* The target on two threads (-T 2), as main.c makes it: a second ctx, its thread tt2, the
 * listener spread over both.  One test thread runs both ctxs, in turn: what crosses from one
 * to the other goes as it does between threads (qsm_ctx_call). */
static void setup_two(void)
{
	struct qsm_fabric *f;

	setup_with(0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &f), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f, .now_ns = harness_clock, .now_arg = &world }, &tctx2), 0);
	ck_assert_int_eq(nvmet_thread_init(&tt2, tctx2), 0);
	ck_assert_int_eq(qsm_listener_spread(tl, (struct qsm_ctx *[]){ tctx, tctx2 }, 2), 0);
}

/* As main.c ends: the target's queues and controllers go without callbacks; nothing leaks. */
static void teardown(void)
{
	struct qsm_sim_stats st;
	struct qsm_counters c;

	char line[512];

	struct nvmet_tally sum = { .srq_ok = 1 };

	ck_assert_int_eq(qsm_ctx_counters(tctx, &c, sizeof(c)), 0);
	ck_assert_uint_eq(c.unexpected, 0);
	nvmet_tally(&tt, &sum);
	if (tctx2) {
		ck_assert_int_eq(qsm_ctx_counters(tctx2, &c, sizeof(c)), 0);
		ck_assert_uint_eq(c.unexpected, 0);
		nvmet_tally(&tt2, &sum);
	}
	ck_assert_msg(nvmet_identities(&sum, line, sizeof(line)), "target identities: %s", line);
	qsm_ctx_free(hctx);
	nvmet_queues_take_all(&tt);
	if (tctx2)
		nvmet_queues_take_all(&tt2);
	qsm_ctx_free(tctx);   /* the listener's first: it spreads to tctx2 */
	qsm_ctx_free(tctx2);
	tctx2 = NULL;
	nvmet_queues_free_all();
	nvmet_thread_fini(&tt);
	if (tt2.ctx)
		nvmet_thread_fini(&tt2);
	tt2.ctx = NULL;
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
	ck_assert_uint_eq(nvmet_queues_live(&tt), 2);
	host_close(io);
	host_close(a);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 0);
	ck_assert_uint_eq(ctrls_counted(0), 1);
	ck_assert_uint_eq(ctrls_counted(1), 1);
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
	ck_assert_uint_eq(nvmet_queues_live(&tt), 0);

	/* a request nvmet turns down (hsqsize 0: a queue of one entry), and the reject fails */
	reject_fails = ENOMEM;
	h = host_start(1, 0, 0, 1);
	pump();
	ck_assert_int_eq(reject_fails, 0);
	ck_assert(h->rejected);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 0);
	ck_assert_uint_eq(tt.stats.queues_requested, 2);

	host_admin_up(2, &a, 1);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 1);
	host_close(a);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 0);
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
	ck_assert_uint_eq(ctrls_counted(0), 1);

	host_send_connect(h, 3, 0, NVMET_AQ_DEPTH - 1, 0xffff);
	pump();
	ck_assert_int_eq(host_status(h, 3, NULL), NVME_SC_CMD_SEQ_ERROR);
	ck_assert_uint_eq(nvmet_ctrls_live(), 1);

	host_close(h);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
	ck_assert_uint_eq(ctrls_counted(1), 1);
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
	ck_assert_uint_eq(nvmet_queues_live(&tt), 0);
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
	ck_assert_uint_eq(nvmet_queues_live(&tt), 2);

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
	ck_assert_uint_eq(nvmet_queues_live(&tt), 3);
	host_close(&hosts[2]);
	host_up(5, 1, 15);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 3);
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

/* ---- malformed capsules: each answered with the spec's status, the queue goes on ---- */

/* An opcode the queue does not know: Invalid Command Opcode, on the admin and the I/O queue; a
 * Fabrics command of an unknown fctype likewise (the kernel nvmet's answer), and any command
 * but Connect on a queue not yet connected is a Command Sequence Error. */
START_TEST(test_unknown_opcode_or_fctype_is_invalid_opcode_and_before_connect_a_sequence_error)
{
	struct host *a, *io = host_io_up(&a), *fresh = host_up(2, 0, NVMET_AQ_DEPTH - 1);
	struct nvme_sqe s;

	s = sqe_of(0xc1, 10);
	host_send(a, &s);
	s = sqe_of(NVME_FABRICS_COMMAND, 11);
	((uint8_t *)&s)[4] = 0x05;   /* fctype */
	host_send(a, &s);
	s = sqe_of(0x7e, 10);
	host_send(io, &s);
	s = sqe_of(NVME_FABRICS_COMMAND, 1);
	((uint8_t *)&s)[4] = NVMF_FCTYPE_PROP_GET;
	host_send(fresh, &s);
	s = sqe_of(NVME_ADMIN_IDENTIFY, 2);
	host_send(fresh, &s);
	pump();
	ck_assert_int_eq(host_status(a, 10, NULL), NVME_SC_INVALID_OPCODE);
	ck_assert_int_eq(host_status(a, 11, NULL), NVME_SC_INVALID_OPCODE);
	ck_assert_int_eq(host_status(io, 10, NULL), NVME_SC_INVALID_OPCODE);
	ck_assert_int_eq(host_status(fresh, 1, NULL), NVME_SC_CMD_SEQ_ERROR);
	ck_assert_int_eq(host_status(fresh, 2, NULL), NVME_SC_CMD_SEQ_ERROR);
	ck_assert_int_eq(host_dnr(a, 10), 1);
	ck_assert_uint_eq(tt.stats.protocol_errors, 0);
	ck_assert(io->live && a->live && fresh->live);
}
END_TEST

/* Sends one capsule (whose cid is cid) and returns the status of its response. */
static int host_ask(struct host *h, const void *capsule, uint16_t cid, uint64_t *result)
{
	host_send(h, capsule);
	pump();
	return host_status(h, cid, result);
}

/* Sends caps[0..n) (cids 10, 11, ...) at once, then expects status st[i] for each. */
static void host_expect(struct host *h, struct nvme_sqe *caps, const int *st, unsigned n)
{
	ck_assert_uint_le(n, NSLOTS);
	for (unsigned i = 0; i < n; i++) {
		caps[i].cid = htole16((uint16_t)(10 + i));
		host_send(h, &caps[i]);
	}
	pump();
	for (unsigned i = 0; i < n; i++)
		ck_assert_msg(host_status(h, (uint16_t)(10 + i), NULL) == st[i],
			      "capsule %u: status 0x%03x, expected 0x%03x", i,
			      host_status(h, (uint16_t)(10 + i), NULL), st[i]);
}

/* DPTR of a type or subtype the RDMA binding does not take (a keyed block of a reserved subtype,
 * a segment descriptor, an unkeyed block with an address): SGL Descriptor Type Invalid.  PSDT
 * other than SGLs, or a fused command: Invalid Field in Command.  (A keyed block asking for
 * remote invalidation is taken: test_a_keyed_block_asking_for_invalidation_...) */
START_TEST(test_sgl_of_wrong_type_or_subtype_and_prp_or_fused_flags_are_refused)
{
	struct host *a, *io = host_io_up(&a);
	struct nvme_sqe c[6];
	const int st[6] = { NVME_SC_SGL_INVALID_TYPE, NVME_SC_SGL_INVALID_TYPE,
			    NVME_SC_SGL_INVALID_TYPE, NVME_SC_INVALID_FIELD, NVME_SC_INVALID_FIELD,
			    NVME_SC_SUCCESS };

	for (unsigned i = 0; i < 6; i++)
		c[i] = rw_capsule(io, NVME_CMD_READ, 0, 0, 1, 512);
	c[0].sgl.type = NVME_SGL_KEYED_DATA << 4 | 0x2;
	c[1].sgl.type = 0x2 << 4;                                   /* a segment descriptor */
	c[2].sgl.type = NVME_SGL_DATA_BLOCK << 4 | NVME_SGL_SUB_ADDRESS;
	c[3].flags = 0;                                             /* PRPs */
	c[4].flags = NVME_CMD_PSDT_SGL | 1;                         /* fused, first */
	host_expect(io, c, st, 6);
	ck_assert_uint_eq(tt.stats.reads, 1);
}
END_TEST

/* The SGL's length is the command's transfer, no more and no less (SGLS offers no longer SGL):
 * a keyed block beyond MDTS, one of length 0 for a command with data, one longer or shorter
 * than the data, one for a command with none: Data SGL Length Invalid; a command whose own
 * transfer is beyond MDTS: Invalid Field in Command (MDTS's own answer). */
START_TEST(test_sgl_length_zero_beyond_mdts_or_unlike_the_transfer_is_data_sgl_length_invalid)
{
	struct host *a, *io = host_io_up(&a);
	struct nvmf_connect_cmd cc;
	struct nvme_sqe c[6];
	const int st[6] = { NVME_SC_SGL_INVALID_LENGTH, NVME_SC_SGL_INVALID_LENGTH,
			    NVME_SC_SGL_INVALID_LENGTH, NVME_SC_SGL_INVALID_LENGTH,
			    NVME_SC_INVALID_FIELD, NVME_SC_SGL_INVALID_LENGTH };

	c[0] = rw_capsule(io, NVME_CMD_WRITE, 0, 0, 8, NVMET_MAX_XFER + 512);
	c[1] = rw_capsule(io, NVME_CMD_READ, 0, 0, 1, 0);
	c[2] = rw_capsule(io, NVME_CMD_READ, 0, 0, 1, 1024);
	c[3] = rw_capsule(io, NVME_CMD_WRITE, 0, 0, 2, 512);
	c[4] = rw_capsule(io, NVME_CMD_READ, 0, 0, (NVMET_MAX_XFER >> NVMET_LBA_SHIFT) + 1, 512);
	c[5] = sqe_of(NVME_CMD_FLUSH, 0);
	c[5].nsid = htole32(1);
	sgl_keyed(io, &c[5], 512);
	host_expect(io, c, st, 6);

	c[0] = sqe_of(NVME_ADMIN_IDENTIFY, 0);
	c[0].cdw10 = htole32(NVME_ID_CNS_CTRL);
	sgl_keyed(a, &c[0], 0);
	c[1] = sqe_of(NVME_ADMIN_KEEP_ALIVE, 0);
	sgl_keyed(a, &c[1], 64);
	host_expect(a, c, st, 2);
	ck_assert_uint_eq(tt.stats.reads + tt.stats.writes, 0);

	/* a Connect whose data descriptor is empty */
	io = host_up(2, 2, 15);
	cc = connect_capsule(io, 1, 2, 15, 1);
	cc.sgl.length[0] = cc.sgl.length[1] = cc.sgl.length[2] = 0;
	ck_assert_int_eq(host_ask(io, &cc, 1, NULL), NVME_SC_SGL_INVALID_LENGTH);
}
END_TEST

/* A capsule that is the SQE alone (what a host sends but for a small write): a data block
 * descriptor with an offset beyond the capsule's data is SGL Offset Invalid, one with a length
 * beyond it Data SGL Length Invalid, whatever -I offers; one naming nothing is a command with no
 * data. */
START_TEST(test_in_capsule_offset_beyond_the_capsule_is_sgl_offset_invalid)
{
	struct host *a, *io = host_io_up(&a);
	struct nvme_sqe c[4];
	const int st[4] = { NVME_SC_SGL_INVALID_OFFSET, NVME_SC_SGL_INVALID_LENGTH,
			    NVME_SC_SGL_INVALID_OFFSET, NVME_SC_SUCCESS };

	for (unsigned i = 0; i < 3; i++)
		c[i] = rw_capsule(io, NVME_CMD_WRITE, 0, 0, 1, 512);
	sgl_in_capsule(&c[0], 64, 512);
	sgl_in_capsule(&c[1], 0, 512);
	sgl_in_capsule(&c[2], ~0ull, 0);
	c[3] = sqe_of(NVME_CMD_FLUSH, 0);
	c[3].nsid = htole32(1);
	sgl_in_capsule(&c[3], 0, 0);
	host_expect(io, c, st, 4);
	ck_assert_uint_eq(tt.stats.writes, 0);
}
END_TEST

/* ---- in-capsule data (-I): a small write's data in its command capsule ---- */

/* A Write of nlb blocks at slba whose SGL is a data block at offset off into the capsule, of len
 * bytes; its capsule is sent with the cap bytes of data (the SGL and the capsule may disagree). */
static void host_send_icd_write(struct host *h, uint16_t cid, uint64_t slba, uint32_t nlb,
				uint64_t off, uint32_t len, const uint8_t *data, uint32_t cap)
{
	struct nvme_sqe s = rw_capsule(h, NVME_CMD_WRITE, cid, slba, nlb, 0);

	sgl_in_capsule(&s, off, len);
	host_send_capsule(h, &s, data, cap);
}

/* A write of len bytes (whole LBAs) in the capsule at slba, the target's posts logged from
 * here; pumped, and answered success. */
static void host_icd_write_logged(struct host *h, uint16_t cid, uint64_t slba, const uint8_t *data,
				  uint32_t len)
{
	memset(posts, 0, sizeof(posts));
	nposts = 0;
	host_send_icd_write(h, cid, slba, len >> NVMET_LBA_SHIFT, 0, len, data, len);
	pump();
	ck_assert_int_eq(host_status(h, cid, NULL), NVME_SC_SUCCESS);
}

/* Reads len bytes at slba into h->io: answered success, and what data holds. */
static void host_read_back(struct host *h, uint16_t cid, uint64_t slba, const uint8_t *data,
			   uint32_t len)
{
	struct nvme_sqe s = rw_capsule(h, NVME_CMD_READ, cid, slba, len >> NVMET_LBA_SHIFT, len);

	memset(h->io, 0, len);
	ck_assert_int_eq(host_ask(h, &s, cid, NULL), NVME_SC_SUCCESS);
	ck_assert_mem_eq(h->io, data, len);
}

/* Identify Controller on admin queue a, its page into a->io. */
static const uint8_t *host_identify_ctrl(struct host *a, uint16_t cid)
{
	struct nvme_sqe s = sqe_of(NVME_ADMIN_IDENTIFY, cid);

	s.cdw10 = htole32(NVME_ID_CNS_CTRL);
	sgl_keyed(a, &s, NVMET_BUF_SIZE);
	ck_assert_int_eq(host_ask(a, &s, cid, NULL), NVME_SC_SUCCESS);
	return a->io;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

/* Identify Controller offers -I to the host: IOCCSZ = (64 + ICD) / 16, IORCSZ 1 (the CQE),
 * ICDOFF 0, and SGLS bit 20 (a data block's address as an offset), without which the kernel
 * host sends no in-capsule data; a discovery controller has no I/O queues and offers none. */
START_TEST(test_identify_reports_the_in_capsule_data_size_in_ioccsz)
{
	struct host *a, *d;
	const uint8_t *id;
	struct nvmf_connect_cmd c;

	g_opts.icd_size = 8192;
	host_admin_up(0, &a, 1);
	id = host_identify_ctrl(a, 10);
	ck_assert_uint_eq(get_le32b(id + 1792), (64 + 8192) / 16);
	ck_assert_uint_eq(get_le32b(id + 1796), 1);
	ck_assert_uint_eq(id[1800] | id[1801] << 8, 0);
	ck_assert_uint_eq(get_le32b(id + 536), 1u << 0 | 1u << 2 | 1u << 20);

	d = host_up(1, 0, NVMET_AQ_DEPTH - 1);
	c = connect_capsule(d, 1, 0, NVMET_AQ_DEPTH - 1, 0xffff);
	snprintf(d->data.subsysnqn, sizeof(d->data.subsysnqn), "%s", NVME_DISC_SUBSYS_NAME);
	ck_assert_int_eq(host_ask(d, &c, 1, NULL), NVME_SC_SUCCESS);
	id = host_identify_ctrl(d, 2);
	ck_assert_uint_eq(get_le32b(id + 1792), 64 / 16);
	ck_assert_uint_eq(get_le32b(id + 536), 1u << 0 | 1u << 2);
}
END_TEST

/* A write whose data is in its capsule: the target takes it from there, posts no RDMA READ,
 * posts the receive again before the response, and the data is in the namespace and reads back
 * (the read's data and response posted as one list); so is an I/O queue's Connect, whose 1024 bytes
 * the kernel host sends in the capsule once IOCCSZ has room. */
START_TEST(test_a_write_in_the_capsule_lands_and_reads_back_without_an_rdma_read)
{
	struct host *a, *io;
	uint16_t cntlid = host_admin_up(0, &a, 1);
	uint8_t data[NVMET_ICD_DEFAULT];
	struct nvmf_connect_cmd c;
	struct nvme_sqe s;

	io = host_up(1, 1, 15);
	c = connect_capsule(io, 1, 1, 15, cntlid);
	sgl_in_capsule((struct nvme_sqe *)(void *)&c, 0, sizeof(io->data));
	reads_posted = 0;
	host_send_capsule(io, &c, &io->data, sizeof(io->data));
	pump();
	ck_assert_int_eq(host_status(io, 1, NULL), NVME_SC_SUCCESS);

	fill(data, sizeof(data), 1);
	host_icd_write_logged(io, 10, 40, data, sizeof(data));
	/* the receive the data came in is posted again before the response that frees the host
	 * to send its next capsule */
	ck_assert_str_eq(posts, "r[s]");
	ck_assert_uint_eq(reads_posted, 0);
	ck_assert_uint_eq(tt.stats.in_capsule, 2);
	ck_assert_uint_eq(tt.stats.writes, 1);
	ck_assert_mem_eq(g_ns + (40 << NVMET_LBA_SHIFT), data, sizeof(data));

	/* the read's data and its response go in one list, one doorbell: the WRITE, then the SEND */
	memset(io->io, 0, sizeof(data));
	memset(posts, 0, sizeof(posts));
	nposts = 0;
	s = rw_capsule(io, NVME_CMD_READ, 11, 40, 8, sizeof(data));
	ck_assert_int_eq(host_ask(io, &s, 11, NULL), NVME_SC_SUCCESS);
	ck_assert_str_eq(posts, "r[ws]");
	ck_assert_mem_eq(io->io, data, sizeof(data));
}
END_TEST

/* A keyed block whose subtype asks for Remote Invalidation (what the kernel host sends for every
 * FRWR-registered buffer): the response goes SEND_WITH_INV of that rkey, after the data, so the
 * host's receive says which rkey is gone and it posts no LOCAL_INV of its own; the rkey is then
 * really gone: a second read through it fails at the host's side and is never answered.  A plain
 * keyed block's response is a plain SEND.  (The sim invalidates memory windows: the host's rkey
 * here is a window's.) */
START_TEST(test_a_keyed_block_asking_for_invalidation_is_answered_with_send_with_inv)
{
	struct host *a, *io = host_io_up(&a);
	uint8_t data[4096];
	struct qsm_mw *mw;
	struct nvme_sqe s;
	uint32_t rkey;

	fill(data, sizeof(data), 3);
	host_icd_write_logged(io, 10, 8, data, NVMET_ICD_DEFAULT);
	host_read_back(io, 11, 8, data, NVMET_ICD_DEFAULT);
	ck_assert_uint_eq(io->ninv, 0);

	ck_assert_int_eq(qsm_conn_alloc_mw(io->q, &mw), 0);
	ck_assert_int_eq(qsm_conn_bind_mw(io->q, 70, mw, io->io_mr, (uintptr_t)io->io, NVMET_ICD_DEFAULT,
					  QSM_ACCESS_REMOTE_WRITE, QSM_POST_SIGNALED), 0);
	pump();
	rkey = qsm_mw_rkey(mw);
	ck_assert_uint_ne(rkey, 0);

	s = rw_capsule(io, NVME_CMD_READ, 12, 8, NVMET_ICD_DEFAULT >> NVMET_LBA_SHIFT, NVMET_ICD_DEFAULT);
	memcpy(s.sgl.key, &(uint32_t){ htole32(rkey) }, 4);
	s.sgl.type = NVME_SGL_KEYED_DATA << 4 | NVME_SGL_SUB_INVALIDATE;
	memset(io->io, 0, NVMET_ICD_DEFAULT);
	memset(posts, 0, sizeof(posts));
	nposts = 0;
	ck_assert_int_eq(host_ask(io, &s, 12, NULL), NVME_SC_SUCCESS);
	ck_assert_str_eq(posts, "r[wi]");
	ck_assert_mem_eq(io->io, data, NVMET_ICD_DEFAULT);
	ck_assert_uint_eq(io->ninv, 1);
	ck_assert_uint_eq(io->inv_rkey, rkey);
	ck_assert_uint_eq(tt.stats.remote_invalidates, 1);
	ck_assert_uint_eq(tt.stats.wc_errors, 0);

	/* the window is invalid now: the target's WRITE through it is refused */
	s.cid = htole16(13);
	host_send(io, &s);
	pump();
	ck_assert_uint_eq(host_responses(io, 13), 0);
	ck_assert_uint_ge(tt.stats.wc_errors, 1);
	ck_assert_uint_eq(tt.stats.remote_invalidates, 2);   /* posted behind the refused WRITE */
	/* the host's QP went to ERR with it: the queue is gone, and its window with it */
	ck_assert(io->lost && io->released);
}
END_TEST

/* The edges of -I (1024 here): exactly ICD bytes land; a block at an offset within the data
 * lands from there; an offset at the end with a block after it is Data SGL Length Invalid, one
 * past the end SGL Offset Invalid; a block more than ICD is Data SGL Length Invalid, and so is
 * an SGL unlike the command's transfer; in-capsule data for a Read or a Flush (no data to the
 * controller) is Invalid Field, as the kernel's nvmet answers, and so is none of it a READ.  A
 * capsule longer than IOCCSZ fits no receive: the queue ends (no status can answer it). */
START_TEST(test_in_capsule_data_at_the_edges_of_icd)
{
	struct host *a, *io;
	uint8_t data[1024 + 16];
	struct nvme_sqe s;
	const int st[8] = { NVME_SC_SUCCESS, NVME_SC_SUCCESS, NVME_SC_SGL_INVALID_LENGTH,
			    NVME_SC_SGL_INVALID_OFFSET, NVME_SC_SGL_INVALID_LENGTH,
			    NVME_SC_SGL_INVALID_LENGTH, NVME_SC_INVALID_FIELD, NVME_SC_INVALID_FIELD };

	g_opts.icd_size = 1024;
	io = host_io_up(&a);
	reads_posted = 0;
	fill(data, sizeof(data), 3);
	host_send_icd_write(io, 10, 0, 2, 0, 1024, data, 1024);
	host_send_icd_write(io, 11, 8, 1, 512, 512, data, 1024);
	host_send_icd_write(io, 12, 16, 1, 1024, 512, data, 1024);
	host_send_icd_write(io, 13, 16, 1, 1040, 512, data, 1024);
	host_send_icd_write(io, 14, 16, 3, 0, 1536, data, 1024);
	host_send_icd_write(io, 15, 16, 2, 0, 512, data, 1024);
	s = rw_capsule(io, NVME_CMD_READ, 16, 16, 1, 0);
	sgl_in_capsule(&s, 0, 512);
	host_send_capsule(io, &s, data, 512);
	s = sqe_of(NVME_CMD_FLUSH, 17);
	s.nsid = htole32(1);
	sgl_in_capsule(&s, 0, 16);
	host_send_capsule(io, &s, data, 16);
	pump();
	for (uint16_t i = 0; i < 8; i++)
		ck_assert_msg(host_status(io, (uint16_t)(10 + i), NULL) == st[i],
			      "capsule %u: status 0x%03x, expected 0x%03x", i,
			      host_status(io, (uint16_t)(10 + i), NULL), st[i]);
	ck_assert_mem_eq(g_ns, data, 1024);
	ck_assert_mem_eq(g_ns + (8 << NVMET_LBA_SHIFT), data + 512, 512);
	ck_assert_uint_eq(tt.stats.writes, 2);
	ck_assert_uint_eq(tt.stats.in_capsule, 2);
	ck_assert_uint_eq(reads_posted, 0);
	ck_assert(io->live);

	host_send_icd_write(io, 20, 0, 2, 0, 1024, data, 1024 + 16);
	pump();
	ck_assert(io->lost);
	ck_assert_int_eq(host_status(io, 20, NULL), -1);
	ck_assert_uint_eq(tt.stats.wc_errors, 1);
}
END_TEST

/* The admin queue takes no in-capsule data (its capsule is the SQE, as the NVMe/RDMA host sizes
 * it): a descriptor naming some is Data SGL Length Invalid, and a capsule that carries some fits
 * no receive (the queue ends, and its association with it).  -I 0 offers none on I/O queues
 * either: IOCCSZ is the SQE, SGLS bit 20 clear, a descriptor naming data in the capsule (a
 * write's, a Connect's) is refused as before, and a keyed write is READ. */
START_TEST(test_no_in_capsule_data_on_the_admin_queue_nor_with_icd_zero)
{
	struct host *a, *io;
	const uint8_t *id;
	struct nvme_sqe s;
	struct nvmf_connect_cmd c;

	io = host_io_up(&a);
	s = sqe_of(NVME_ADMIN_SET_FEATURES, 10);
	s.cdw10 = htole32(NVME_FEAT_KATO);
	sgl_in_capsule(&s, 0, 16);
	ck_assert_int_eq(host_ask(a, &s, 10, NULL), NVME_SC_SGL_INVALID_LENGTH);
	host_send_capsule(a, &s, a->io, 16);
	pump();
	ck_assert(a->released && io->released);
	ck_assert_uint_eq(tt.stats.wc_errors, 1);

	g_opts.icd_size = 0;
	io = host_io_up(&a);
	id = host_identify_ctrl(a, 11);
	ck_assert_uint_eq(get_le32b(id + 1792), 64 / 16);
	ck_assert_uint_eq(get_le32b(id + 536), 1u << 0 | 1u << 2);
	host_send_icd_write(io, 10, 0, 1, 0, 512, NULL, 0);
	pump();
	ck_assert_int_eq(host_status(io, 10, NULL), NVME_SC_SGL_INVALID_LENGTH);
	c = connect_capsule(io, 11, 1, 15, 1);
	sgl_in_capsule((struct nvme_sqe *)(void *)&c, 0, sizeof(io->data));
	ck_assert_int_eq(host_ask(io, &c, 11, NULL), NVME_SC_SGL_INVALID_LENGTH);
	reads_posted = 0;
	s = rw_capsule(io, NVME_CMD_WRITE, 12, 0, 1, 512);
	ck_assert_int_eq(host_ask(io, &s, 12, NULL), NVME_SC_SUCCESS);
	ck_assert_uint_eq(reads_posted, 1);
	ck_assert_uint_eq(tt.stats.in_capsule, 0);
}
END_TEST

/* In-capsule and keyed writes mixed on one queue with a read window of 1: the in-capsule ones
 * take no READ slot and wait for none (only the keyed ones behind the first wait), every write
 * lands, and over more in-capsule writes than the queue has entries (20, 16) every receive a
 * capsule's data held is posted again (a capsule finding none would end the queue). */
START_TEST(test_in_capsule_and_keyed_writes_mix_and_in_capsule_ones_take_no_read_slot)
{
	struct host *a, *io;
	uint8_t data[NSLOTS][512];
	struct nvme_sqe s;

	g_opts.max_reads = 1;
	io = host_io_up(&a);
	reads_posted = 0;
	for (unsigned round = 0; round < 5; round++) {
		for (unsigned i = 0; i < NSLOTS; i++) {
			uint16_t cid = (uint16_t)(10 + round * NSLOTS + i);

			fill(data[i], 512, round * 16 + i);
			if (i % 2) {
				host_send_icd_write(io, cid, 200 + i, 1, 0, 512, data[i], 512);
				continue;
			}
			memcpy(io->io + i * 512, data[i], 512);
			s = rw_capsule(io, NVME_CMD_WRITE, cid, 200 + i, 1, 512);
			s.sgl.addr = htole64((uintptr_t)(io->io + i * 512));
			host_send(io, &s);
		}
		pump();
		for (unsigned i = 0; i < NSLOTS; i++) {
			ck_assert_int_eq(host_status(io, (uint16_t)(10 + round * NSLOTS + i), NULL),
					 NVME_SC_SUCCESS);
			ck_assert_mem_eq(g_ns + ((200 + i) << NVMET_LBA_SHIFT), data[i], 512);
		}
		io->nrsp = 0;
	}
	ck_assert(io->live);
	ck_assert_uint_eq(tt.stats.writes, 5 * NSLOTS);
	ck_assert_uint_eq(tt.stats.in_capsule, 5 * NSLOTS / 2);
	ck_assert_uint_eq(reads_posted, 5 * NSLOTS / 2);
	ck_assert_uint_eq(tt.stats.reads_waited, 5 * (NSLOTS / 2 - 1));
}
END_TEST

/* LBAs past the namespace, and an SLBA + NLB that wraps 64 bits: LBA Out of Range; the last
 * block itself is read. */
START_TEST(test_lbas_beyond_the_namespace_or_wrapping_are_lba_out_of_range)
{
	struct host *a, *io = host_io_up(&a);
	uint64_t blocks = NS_SIZE >> NVMET_LBA_SHIFT;
	struct nvme_sqe c[5];
	const int st[5] = { NVME_SC_LBA_RANGE, NVME_SC_LBA_RANGE, NVME_SC_LBA_RANGE,
			    NVME_SC_LBA_RANGE, NVME_SC_SUCCESS };

	c[0] = rw_capsule(io, NVME_CMD_READ, 0, blocks, 1, 512);
	c[1] = rw_capsule(io, NVME_CMD_WRITE, 0, blocks - 1, 2, 1024);
	c[2] = rw_capsule(io, NVME_CMD_READ, 0, ~0ull, 2, 1024);
	c[3] = rw_capsule(io, NVME_CMD_WRITE, 0, ~0ull - 1, 8, 4096);
	c[4] = rw_capsule(io, NVME_CMD_READ, 0, blocks - 1, 1, 512);
	host_expect(io, c, st, 5);
	ck_assert_uint_eq(tt.stats.reads, 1);
	ck_assert_uint_eq(tt.stats.writes, 0);
}
END_TEST

/* ---- Connect: every parameter out of place is Connect Invalid Parameters, with IATTR (1: in
 * the data) and IPO (its byte offset) in the result ---- */

START_TEST(test_connect_of_wrong_qid_or_sqsize_is_invalid_parameters_in_the_command)
{
	struct host *h = host_up(0, 0, NVMET_AQ_DEPTH - 1), *io;
	struct nvmf_connect_cmd c;
	uint64_t r;

	c = connect_capsule(h, 1, 1, NVMET_AQ_DEPTH - 1, 0xffff);   /* qid 1 on the admin queue */
	ck_assert_int_eq(host_ask(h, &c, 1, &r), NVME_SC_CONNECT_INVALID_PARAM);
	ck_assert_uint_eq(r, NVMF_CONNECT_CMD_QID);
	c = connect_capsule(h, 2, 0, 0, 0xffff);
	ck_assert_int_eq(host_ask(h, &c, 2, &r), NVME_SC_CONNECT_INVALID_PARAM);
	ck_assert_uint_eq(r, NVMF_CONNECT_CMD_SQSIZE);
	c = connect_capsule(h, 3, 0, NVMET_AQ_DEPTH, 0xffff);        /* the queue holds 32 */
	ck_assert_int_eq(host_ask(h, &c, 3, &r), NVME_SC_CONNECT_INVALID_PARAM);
	ck_assert_uint_eq(r, NVMF_CONNECT_CMD_SQSIZE);
	ck_assert_int_eq(host_dnr(h, 3), 1);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);

	/* an I/O queue of 8 entries asking for 16 */
	io = host_up(1, 1, 7);
	c = connect_capsule(io, 1, 1, 15, 1);
	ck_assert_int_eq(host_ask(io, &c, 1, &r), NVME_SC_CONNECT_INVALID_PARAM);
	ck_assert_uint_eq(r, NVMF_CONNECT_CMD_SQSIZE);

	/* after all that the queue still connects */
	c = connect_capsule(h, 4, 0, NVMET_AQ_DEPTH - 1, 0xffff);
	ck_assert_int_eq(host_ask(h, &c, 4, &r), NVME_SC_SUCCESS);
	ck_assert_uint_eq(nvmet_ctrls_live(), 1);
}
END_TEST

START_TEST(test_connect_of_unknown_cntlid_or_unterminated_nqn_is_invalid_parameters_in_the_data)
{
	struct host *a, *h, *io;
	uint16_t cntlid = host_admin_up(0, &a, 2);
	struct nvmf_connect_cmd c;
	uint64_t r;

	io = host_up(1, 1, 15);
	c = connect_capsule(io, 1, 1, 15, (uint16_t)(cntlid + 1));
	ck_assert_int_eq(host_ask(io, &c, 1, &r), NVME_SC_CONNECT_INVALID_PARAM);
	ck_assert_uint_eq(r, 1u << 16 | NVMF_CONNECT_DATA_CNTLID);
	c = connect_capsule(io, 2, 1, 15, cntlid);
	memset(io->data.hostnqn, 'h', sizeof(io->data.hostnqn));
	ck_assert_int_eq(host_ask(io, &c, 2, &r), NVME_SC_CONNECT_INVALID_PARAM);
	ck_assert_uint_eq(r, 1u << 16 | NVMF_CONNECT_DATA_HOSTNQN);
	c = connect_capsule(io, 3, 1, 15, cntlid);
	memset(io->data.subsysnqn, 's', NVMF_NQN_MAX + 1);   /* the NUL where no NQN ends */
	ck_assert_int_eq(host_ask(io, &c, 3, &r), NVME_SC_CONNECT_INVALID_PARAM);
	ck_assert_uint_eq(r, 1u << 16 | NVMF_CONNECT_DATA_SUBNQN);
	c = connect_capsule(io, 4, 1, 15, cntlid);
	ck_assert_int_eq(host_ask(io, &c, 4, &r), NVME_SC_SUCCESS);
	ck_assert_uint_eq(r, cntlid);

	/* the dynamic controller model: an admin queue asks for cntlid 0xffff, no other */
	h = host_up(2, 0, NVMET_AQ_DEPTH - 1);
	c = connect_capsule(h, 1, 0, NVMET_AQ_DEPTH - 1, cntlid);
	ck_assert_int_eq(host_ask(h, &c, 1, &r), NVME_SC_CONNECT_INVALID_PARAM);
	ck_assert_uint_eq(r, 1u << 16 | NVMF_CONNECT_DATA_CNTLID);
	ck_assert_uint_eq(nvmet_ctrls_live(), 1);
}
END_TEST

/* ---- the per-controller limits ---- */

/* -R: the controller's I/O commands in flight, over its queues; the one beyond is Command
 * Interrupted with DNR clear (the host is to retry), and once the others are done it goes
 * through.  The admin queue is not held by the I/O it carries. */
START_TEST(test_io_commands_beyond_the_controller_cap_are_interrupted_for_a_retry)
{
	struct host *a, *io = host_io_up(&a), *io2 = host_up(2, 2, 15);
	uint16_t cntlid;
	struct nvme_sqe s;

	cntlid = (uint16_t)le64toh(a->rsp[0].result);
	host_send_set_nr_queues(a, 4, 2);
	host_send_connect(io2, 1, 2, 15, cntlid);
	pump();
	ck_assert_int_eq(host_status(io2, 1, NULL), NVME_SC_SUCCESS);
	g_opts.max_ctrl_cmds = 3;
	for (uint16_t cid = 10; cid < 12; cid++) {
		s = rw_capsule(io, NVME_CMD_WRITE, cid, cid, 1, 512);
		host_send(io, &s);
		s = rw_capsule(io2, NVME_CMD_WRITE, cid, cid, 1, 512);
		host_send(io2, &s);
	}
	s = sqe_of(NVME_ADMIN_KEEP_ALIVE, 10);
	host_send(a, &s);
	pump();
	ck_assert_int_eq(host_status(io, 10, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(io2, 10, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(io, 11, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(io2, 11, NULL), NVME_SC_CMD_INTERRUPTED);
	ck_assert_int_eq(host_dnr(io2, 11), 0);
	ck_assert_int_eq(host_status(a, 10, NULL), NVME_SC_SUCCESS);
	ck_assert_uint_eq(tt.stats.interrupted, 1);
	ck_assert_uint_eq(tt.stats.writes, 3);

	s = rw_capsule(io2, NVME_CMD_WRITE, 12, 11, 1, 512);   /* the retry */
	ck_assert_int_eq(host_ask(io2, &s, 12, NULL), NVME_SC_SUCCESS);
}
END_TEST

/* -M: the bytes of the controller's I/O data in flight; the command that would pass it is
 * Command Interrupted, with DNR clear, and goes through once the others are done. */
START_TEST(test_io_data_beyond_the_controller_cap_is_interrupted_for_a_retry)
{
	struct host *a, *io = host_io_up(&a);
	struct nvme_sqe c[4];
	const int st[4] = { NVME_SC_SUCCESS, NVME_SC_SUCCESS, NVME_SC_CMD_INTERRUPTED,
			    NVME_SC_SUCCESS };

	g_opts.max_ctrl_data = 12 << 10;
	c[0] = rw_capsule(io, NVME_CMD_WRITE, 0, 0, 8, 4096);
	c[1] = rw_capsule(io, NVME_CMD_READ, 0, 8, 8, 4096);
	c[2] = rw_capsule(io, NVME_CMD_WRITE, 0, 16, 16, 8192);
	c[3] = rw_capsule(io, NVME_CMD_READ, 0, 32, 8, 4096);
	host_expect(io, c, st, 4);
	ck_assert_int_eq(host_dnr(io, 12), 0);
	ck_assert_uint_eq(tt.stats.interrupted, 1);

	c[2].cid = htole16(14);   /* the retry */
	ck_assert_int_eq(host_ask(io, &c[2], 14, NULL), NVME_SC_SUCCESS);
}
END_TEST

/* An I/O queue that goes with commands in flight gives their count and bytes back to the
 * controller: its next queue has the whole of the limits again. */
START_TEST(test_a_queue_closing_with_commands_in_flight_gives_back_what_they_held)
{
	struct host *a, *io = host_io_up(&a);
	uint16_t cntlid = (uint16_t)le64toh(a->rsp[0].result);
	struct nvme_sqe s;

	g_opts.max_ctrl_cmds = 2;
	g_opts.max_ctrl_data = 8 << 10;
	s = rw_capsule(io, NVME_CMD_WRITE, 10, 0, 8, 4096);
	host_send(io, &s);
	s = rw_capsule(io, NVME_CMD_WRITE, 11, 8, 8, 4096);
	host_send(io, &s);
	ck_assert_int_eq(qsm_conn_disconnect(io->q), 0);
	pump();
	ck_assert(io->released);
	ck_assert_uint_eq(tt.stats.io_cmds, 2);

	io = host_up(2, 1, 15);
	host_send_connect(io, 1, 1, 15, cntlid);
	pump();
	ck_assert_int_eq(host_status(io, 1, NULL), NVME_SC_SUCCESS);
	s = rw_capsule(io, NVME_CMD_WRITE, 10, 0, 8, 4096);
	host_send(io, &s);
	s = rw_capsule(io, NVME_CMD_READ, 11, 8, 8, 4096);
	host_send(io, &s);
	pump();
	ck_assert_int_eq(host_status(io, 10, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(io, 11, NULL), NVME_SC_SUCCESS);
	ck_assert_uint_eq(tt.stats.interrupted, 0);
}
END_TEST

/* -D (and the connection's read depth): at most that many RDMA READs in flight on a queue;
 * the writes beyond wait in order and each lands where it was meant to, all answered. */
START_TEST(test_reads_beyond_the_read_window_wait_and_every_write_lands)
{
	struct host *a, *io;
	struct nvme_sqe c[6];
	const int st[6] = { 0 };

	g_opts.max_reads = 2;
	io = host_io_up(&a);
	for (unsigned i = 0; i < 6; i++) {
		memset(io->io + i * 512, 0xa0 + (int)i, 512);
		c[i] = rw_capsule(io, NVME_CMD_WRITE, 0, 100 + 2 * i, 1, 512);
		c[i].sgl.addr = htole64((uintptr_t)(io->io + i * 512));
	}
	host_expect(io, c, st, 6);
	ck_assert_uint_eq(tt.stats.writes, 6);
	ck_assert_uint_ge(tt.stats.reads_waited, 1);
	for (unsigned i = 0; i < 6; i++)
		for (unsigned b = 0; b < 512; b++)
			ck_assert_uint_eq(g_ns[((100 + 2 * i) << 9) + b], 0xa0 + i);
}
END_TEST

/* The subsystem may have several controllers sharing its namespace (CMIC bit 1, NMIC bit 0):
 * the Linux host takes the namespace through a second controller (another host NQN, another
 * path) only then; a discovery controller says neither. */
START_TEST(test_identify_says_the_namespace_is_shared_by_the_controllers)
{
	struct host *a, *io = host_io_up(&a);
	struct nvme_sqe s;

	(void)io;
	s = sqe_of(NVME_ADMIN_IDENTIFY, 20);
	s.cdw10 = htole32(NVME_ID_CNS_CTRL);
	sgl_keyed(a, &s, 4096);
	ck_assert_int_eq(host_ask(a, &s, 20, NULL), NVME_SC_SUCCESS);
	ck_assert_uint_eq(a->io[76], 1u << 1);
	s = sqe_of(NVME_ADMIN_IDENTIFY, 21);
	s.cdw10 = htole32(NVME_ID_CNS_NS);
	s.nsid = htole32(1);
	sgl_keyed(a, &s, 4096);
	ck_assert_int_eq(host_ask(a, &s, 21, NULL), NVME_SC_SUCCESS);
	ck_assert_uint_eq(a->io[30], 1);
}
END_TEST

/* The loop's clock at now_ms, a dispatch that caught up, the tick. */
static int ka_tick(uint64_t now_ms)
{
	nvmet_keep_alive_clock(&tt, now_ms);
	return nvmet_keep_alive_tick(&tt);
}

/* Set Features Keep Alive Timer (cdw11: KATO, ms); not pumped. */
static void host_send_set_kato(struct host *h, uint16_t cid, uint32_t kato)
{
	struct nvme_sqe s = sqe_of(NVME_ADMIN_SET_FEATURES, cid);

	s.cdw10 = htole32(NVME_FEAT_KATO);
	s.cdw11 = htole32(kato);
	host_send(h, &s);
}

/* The Keep Alive Timer: a host that sends no command for KATO (15 s in its Connect) and KAS's
 * slack (1 s) loses its controller, every queue of the association disconnected and the
 * controller freed with the last; any command restarts the timer (a Keep Alive, or I/O); the
 * tick says when to look next. */
START_TEST(test_a_host_silent_for_kato_loses_its_association)
{
	struct host *a, *io;
	struct nvme_sqe ka = sqe_of(NVME_ADMIN_KEEP_ALIVE, 20), rd;

	ck_assert_int_eq(ka_tick(1000), -1);   /* no controller: no timer */
	io = host_io_up(&a);
	ck_assert_int_eq(ka_tick(1000), 16000);
	/* a Keep Alive at 11 s: due at 27 s */
	ck_assert_int_eq(ka_tick(11000), 6000);
	host_send(a, &ka);
	pump();
	ck_assert_int_eq(host_status(a, 20, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(ka_tick(17000), 10000);   /* looked at 17 s: 27 s now */
	/* a read on the I/O queue at 24 s: due at 40 s */
	ck_assert_int_eq(ka_tick(24000), 3000);
	rd = rw_capsule(io, NVME_CMD_READ, 2, 0, 1, 512);
	host_send(io, &rd);
	pump();
	ck_assert_int_eq(host_status(io, 2, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(ka_tick(27000), 13000);
	ck_assert_uint_eq(tt.stats.kato_expired, 0);
	ck_assert_int_eq(ka_tick(39999), 1);
	pump();
	ck_assert(a->live && io->live);
	/* silent from 24 s: at 40 s the association ends */
	ck_assert_int_eq(ka_tick(40000), -1);
	ck_assert_uint_eq(tt.stats.kato_expired, 1);
	pump();
	ck_assert(a->lost && a->released);
	ck_assert(io->lost && io->released);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 0);
	ck_assert_uint_eq(ctrls_counted(1), 1);
}
END_TEST

/* KATO 0 (Set Features) turns the timer off; another value is rounded up to KAS (1 s); one
 * controller's expiry leaves another's association alone. */
START_TEST(test_kato_zero_is_no_timer_and_kato_rounds_up_to_kas)
{
	struct host *a, *b;

	ka_tick(0);
	host_admin_up(0, &a, 1);
	host_admin_up(1, &b, 1);
	host_send_set_kato(a, 10, 0);
	host_send_set_kato(b, 10, 1500);
	pump();
	ck_assert_int_eq(host_status(a, 10, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(b, 10, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(ka_tick(2999), 1);   /* b's 1.5 s is 2 s, 3 s with KAS */
	ck_assert_uint_eq(tt.stats.kato_expired, 0);
	ck_assert_int_eq(ka_tick(3000), -1);  /* a has none */
	ck_assert_uint_eq(tt.stats.kato_expired, 1);
	pump();
	ck_assert(b->lost && b->released);
	ck_assert(a->live);
	ck_assert_int_eq(ka_tick(3600000), -1);
	ck_assert_uint_eq(tt.stats.kato_expired, 1);
	ck_assert_uint_eq(nvmet_ctrls_live(), 1);
	host_close(a);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
}
END_TEST

/* The timers are looked at after a dispatch that caught up: a Keep Alive that waited for a
 * target held up past the host's KATO (descheduled, or behind a storm) counts when it is
 * dispatched, and the association stays. */
START_TEST(test_a_command_that_waited_for_a_late_target_keeps_the_association)
{
	struct host *a;
	struct nvme_sqe ka = sqe_of(NVME_ADMIN_KEEP_ALIVE, 20);

	ka_tick(1000);
	host_admin_up(0, &a, 1);                  /* due at 17 s */
	host_send(a, &ka);                        /* sent in time, taken at 30 s */
	nvmet_keep_alive_clock(&tt, 30000);
	pump();
	ck_assert_int_eq(host_status(a, 20, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(nvmet_keep_alive_tick(&tt), 16000);
	ck_assert_uint_eq(tt.stats.kato_expired, 0);
	ck_assert(a->live);
	host_close(a);
}
END_TEST

/* -Q: the queues of a device take their capsules from its one SRQ, filled when it is made (the
 * first QP): an admin queue and I/O queues of two controllers, none with receives of its own;
 * a write in the capsule and a keyed one land and read back, every buffer back on the SRQ. */
START_TEST(test_srq_queues_of_several_hosts_share_the_device_buffers)
{
	struct host *a, *io, *b, *io2;
	uint16_t c2;
	uint8_t data[NVMET_ICD_DEFAULT];
	struct nvme_sqe s;

	io = host_io_up(&a);
	ck_assert_uint_eq(tt.stats.srqs_made, 1);
	ck_assert_uint_ge(srq_posts, NVMET_MAX_DEPTH);   /* filled at once */
	c2 = host_admin_up(2, &b, 1);
	io2 = host_up(3, 1, 15);
	host_send_connect(io2, 1, 1, 15, c2);
	pump();
	ck_assert_int_eq(host_status(io2, 1, NULL), NVME_SC_SUCCESS);
	ck_assert_uint_eq(tt.stats.srqs_made, 1);         /* one SRQ for the device */
	fill(data, sizeof(data), 3);
	host_icd_write_logged(io, 10, 8, data, sizeof(data));
	ck_assert_str_eq(posts, "r[s]");   /* the buffer back to the SRQ before the response */
	memcpy(io2->io, data, sizeof(data));
	s = rw_capsule(io2, NVME_CMD_WRITE, 11, 16, 8, sizeof(data));
	ck_assert_int_eq(host_ask(io2, &s, 11, NULL), NVME_SC_SUCCESS);
	ck_assert_mem_eq(g_ns + (8 << NVMET_LBA_SHIFT), data, sizeof(data));
	ck_assert_mem_eq(g_ns + (16 << NVMET_LBA_SHIFT), data, sizeof(data));
	host_read_back(io, 12, 16, data, sizeof(data));
	host_close(io2);
	host_close(b);
	host_close(io);
	host_close(a);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
}
END_TEST

/* -Q through a removal: the device's SRQ goes with it (what was posted to it with it); after the
 * re-add the first QP makes a new one, which gets every buffer again, and I/O goes on. */
START_TEST(test_srq_a_device_removal_takes_the_srq_and_the_new_one_gets_every_buffer)
{
	struct host *a, *io;
	uint8_t data[512];
	unsigned before;

	io = host_io_up(&a);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "sim0"), 0);
	harness_run_for(&world, 1000);
	ck_assert(a->released && io->released);
	ck_assert_int_eq(qsm_sim_device_state(sim, "sim0"), QSM_SIM_DEVICE_GONE);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "sim0", "192.0.2.1"), 0);
	harness_run_for(&world, 1000);   /* the listener listens again */
	before = srq_posts;
	io = host_io_up(&a);
	ck_assert_uint_eq(tt.stats.srqs_made, 2);
	ck_assert_uint_ge(srq_posts - before, NVMET_MAX_DEPTH);
	fill(data, sizeof(data), 5);
	host_icd_write_logged(io, 10, 0, data, sizeof(data));
	host_read_back(io, 11, 0, data, sizeof(data));
	host_close(io);
	host_close(a);
}
END_TEST

/* -Q: a capsule that finds every request slot taken (their responses' SEND completions not
 * taken yet: on the real stack, a host quick to send its next command while the target's ACKs
 * lag) waits, in order, for one, holding its SRQ buffer: no protocol error, every command
 * answered.  Here the slots are few (hrqsize 1: depth + 1) and the host sends depth + 2 Flushes
 * at once, which the SRQ takes in (a queue's own depth receives would not: RNR). */
START_TEST(test_srq_a_capsule_beyond_the_free_slots_waits_for_one)
{
	struct host *a, *io;
	uint16_t cntlid = host_admin_up(0, &a, 1);
	unsigned n = 6;

	io = host_start(1, 1, 3, 1);   /* depth 4, 5 slots */
	pump();
	ck_assert(io->live);
	host_send_connect(io, 1, 1, 3, cntlid);
	pump();
	ck_assert_int_eq(host_status(io, 1, NULL), NVME_SC_SUCCESS);
	for (unsigned i = 0; i < n; i++) {
		struct nvme_sqe s = sqe_of(NVME_CMD_FLUSH, (uint16_t)(10 + i));

		s.nsid = htole32(1);
		host_send(io, &s);
	}
	pump();
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(host_status(io, (uint16_t)(10 + i), NULL), NVME_SC_SUCCESS);
	ck_assert_uint_gt(tt.stats.capsules_waited, 0);
	ck_assert_uint_eq(tt.stats.protocol_errors, 0);
	ck_assert(io->live);
}
END_TEST

/* -Q: the SRQ's buffers could not be had when it was made (their registration failed): the
 * first queue's qp_ready asks once more, and with them the queue serves; when they cannot be
 * had then either, the queue is refused before its accept (no queue that receives nothing),
 * and the next one tries again. */
START_TEST(test_srq_buffers_not_had_when_it_was_made_are_asked_for_again)
{
	struct host *a, *h;
	uint64_t cntlid;

	pool_fails = 1;   /* srq_low's registration; qp_ready's goes through */
	host_admin_up(0, &a, 1);
	ck_assert_uint_eq(pool_fails, 0);
	ck_assert_uint_eq(tt.stats.srqs_made, 1);
	host_close(a);

	teardown();
	setup_srq();
	pool_fails = 2;   /* both */
	h = host_start(0, 0, NVMET_AQ_DEPTH - 1, NVMET_AQ_DEPTH);
	pump();
	ck_assert(!h->live);
	ck_assert_uint_eq(tt.stats.queues_dropped, 1);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 0);
	host_admin_up(1, &a, 1);   /* the next queue: buffers now */
	host_send_connect(a, 9, 0, NVMET_AQ_DEPTH - 1, 0xffff);
	pump();
	ck_assert_int_eq(host_status(a, 9, &cntlid), NVME_SC_CMD_SEQ_ERROR);   /* connected already */
	ck_assert_uint_eq(tt.stats.srqs_made, 1);
	host_close(a);
}
END_TEST

/* -T 2: the listener spreads a host's queues over both threads (its admin queue and I/O queue 2
 * on the first, I/O queue 1 on the second); I/O on each lands and reads back through the other;
 * the controller they share is found by the second thread's Connect; the admin queue's close
 * ends the I/O queues on both threads, the second's on its own thread (a call to its ctx), and
 * the controller goes with the last. */
START_TEST(test_two_threads_share_a_controller_and_its_admin_close_ends_queues_on_both)
{
	struct host *a, *io1, *io2;
	uint16_t cntlid = host_admin_up(0, &a, 2);
	struct nvme_sqe s;

	io1 = host_up(1, 1, 15);
	io2 = host_up(2, 2, 15);
	host_send_connect(io1, 1, 1, 15, cntlid);
	host_send_connect(io2, 1, 2, 15, cntlid);
	pump();
	ck_assert_int_eq(host_status(io1, 1, NULL), NVME_SC_SUCCESS);
	ck_assert_int_eq(host_status(io2, 1, NULL), NVME_SC_SUCCESS);
	ck_assert_uint_eq(nvmet_queues_live(&tt), 2);    /* the admin queue and I/O queue 2 */
	ck_assert_uint_eq(nvmet_queues_live(&tt2), 1);   /* I/O queue 1 */
	ck_assert_uint_eq(nvmet_ctrls_live(), 1);
	fill(io1->io, 4096, 7);
	s = rw_capsule(io1, NVME_CMD_WRITE, 2, 8, 8, 4096);
	ck_assert_int_eq(host_ask(io1, &s, 2, NULL), NVME_SC_SUCCESS);
	s = rw_capsule(io2, NVME_CMD_READ, 2, 8, 8, 4096);
	ck_assert_int_eq(host_ask(io2, &s, 2, NULL), NVME_SC_SUCCESS);
	ck_assert_mem_eq(io2->io, io1->io, 4096);
	ck_assert_uint_eq(tt2.stats.writes, 1);
	ck_assert_uint_eq(tt.stats.reads, 1);
	ck_assert_uint_eq(tt.stats.writes + tt2.stats.reads, 0);
	host_close(a);
	ck_assert(io1->lost && io1->released);
	ck_assert(io2->lost && io2->released);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
	ck_assert_uint_eq(nvmet_queues_live(&tt) + nvmet_queues_live(&tt2), 0);
	ck_assert_uint_eq(ctrls_counted(1), 1);
}
END_TEST

/* -T 2: any thread's tick may find a controller due; the second thread's finds the one whose
 * admin queue is on the first: its own I/O queue it disconnects, the admin queue on its thread
 * (a call to its ctx); the association ends as on one thread. */
START_TEST(test_two_threads_a_kato_found_on_one_ends_the_queues_on_the_other)
{
	struct host *a, *io;

	ka_tick(1000);
	nvmet_keep_alive_clock(&tt2, 1000);
	io = host_io_up(&a);   /* admin on the first thread (due at 17 s), I/O on the second */
	ck_assert_uint_eq(nvmet_queues_live(&tt), 1);
	ck_assert_uint_eq(nvmet_queues_live(&tt2), 1);
	nvmet_keep_alive_clock(&tt2, 16999);
	ck_assert_int_eq(nvmet_keep_alive_tick(&tt2), 1);
	nvmet_keep_alive_clock(&tt2, 17000);
	ck_assert_int_eq(nvmet_keep_alive_tick(&tt2), -1);
	ck_assert_uint_eq(tt2.stats.kato_expired, 1);
	ck_assert_uint_eq(tt.stats.kato_expired, 0);
	pump();
	ck_assert(a->lost && a->released);
	ck_assert(io->lost && io->released);
	ck_assert_uint_eq(nvmet_ctrls_live(), 0);
}
END_TEST

static Suite *nvmet_suite(void)
{
	Suite *s = suite_create("nvmet");
	TCase *t = tcase_create("target");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_host_connects_admin_and_io_queues_and_closing_frees_all);
	tcase_add_test(t, test_a_host_silent_for_kato_loses_its_association);
	tcase_add_test(t, test_kato_zero_is_no_timer_and_kato_rounds_up_to_kas);
	tcase_add_test(t, test_a_command_that_waited_for_a_late_target_keeps_the_association);
	tcase_add_test(t, test_accept_or_reject_failing_in_request_handler_unlinks_and_frees_the_queue);
	tcase_add_test(t, test_pipelined_connects_on_one_queue_make_one_controller);
	tcase_add_test(t, test_duplicate_io_connects_bind_once_and_admin_close_frees_the_controller);
	tcase_add_test(t, test_admin_queues_beyond_the_controller_cap_are_rejected_at_the_request);
	tcase_add_test(t, test_io_queues_beyond_the_queue_cap_are_rejected_at_the_request);
	tcase_add_test(t, test_connect_of_unknown_recfmt_is_incompatible_format);
	tcase_add_test(t, test_unknown_opcode_or_fctype_is_invalid_opcode_and_before_connect_a_sequence_error);
	tcase_add_test(t, test_sgl_of_wrong_type_or_subtype_and_prp_or_fused_flags_are_refused);
	tcase_add_test(t, test_sgl_length_zero_beyond_mdts_or_unlike_the_transfer_is_data_sgl_length_invalid);
	tcase_add_test(t, test_in_capsule_offset_beyond_the_capsule_is_sgl_offset_invalid);
	tcase_add_test(t, test_identify_reports_the_in_capsule_data_size_in_ioccsz);
	tcase_add_test(t, test_a_write_in_the_capsule_lands_and_reads_back_without_an_rdma_read);
	tcase_add_test(t, test_a_keyed_block_asking_for_invalidation_is_answered_with_send_with_inv);
	tcase_add_test(t, test_in_capsule_data_at_the_edges_of_icd);
	tcase_add_test(t, test_no_in_capsule_data_on_the_admin_queue_nor_with_icd_zero);
	tcase_add_test(t, test_in_capsule_and_keyed_writes_mix_and_in_capsule_ones_take_no_read_slot);
	tcase_add_test(t, test_lbas_beyond_the_namespace_or_wrapping_are_lba_out_of_range);
	tcase_add_test(t, test_connect_of_wrong_qid_or_sqsize_is_invalid_parameters_in_the_command);
	tcase_add_test(t, test_connect_of_unknown_cntlid_or_unterminated_nqn_is_invalid_parameters_in_the_data);
	tcase_add_test(t, test_io_commands_beyond_the_controller_cap_are_interrupted_for_a_retry);
	tcase_add_test(t, test_io_data_beyond_the_controller_cap_is_interrupted_for_a_retry);
	tcase_add_test(t, test_a_queue_closing_with_commands_in_flight_gives_back_what_they_held);
	tcase_add_test(t, test_reads_beyond_the_read_window_wait_and_every_write_lands);
	tcase_add_test(t, test_identify_says_the_namespace_is_shared_by_the_controllers);
	suite_add_tcase(s, t);
	/* -Q: the same target with its queues on an SRQ per device; the data path's tests again */
	t = tcase_create("srq");
	tcase_add_checked_fixture(t, setup_srq, teardown);
	tcase_add_test(t, test_srq_queues_of_several_hosts_share_the_device_buffers);
	tcase_add_test(t, test_srq_a_device_removal_takes_the_srq_and_the_new_one_gets_every_buffer);
	tcase_add_test(t, test_srq_buffers_not_had_when_it_was_made_are_asked_for_again);
	tcase_add_test(t, test_srq_a_capsule_beyond_the_free_slots_waits_for_one);
	tcase_add_test(t, test_host_connects_admin_and_io_queues_and_closing_frees_all);
	tcase_add_test(t, test_a_write_in_the_capsule_lands_and_reads_back_without_an_rdma_read);
	tcase_add_test(t, test_in_capsule_data_at_the_edges_of_icd);
	tcase_add_test(t, test_in_capsule_and_keyed_writes_mix_and_in_capsule_ones_take_no_read_slot);
	tcase_add_test(t, test_a_queue_closing_with_commands_in_flight_gives_back_what_they_held);
	tcase_add_test(t, test_reads_beyond_the_read_window_wait_and_every_write_lands);
	tcase_add_test(t, test_pipelined_connects_on_one_queue_make_one_controller);
	tcase_add_test(t, test_a_host_silent_for_kato_loses_its_association);
	suite_add_tcase(s, t);
	/* -T 2: the target on two threads' ctxs, the listener spread over them */
	t = tcase_create("threads");
	tcase_add_checked_fixture(t, setup_two, teardown);
	tcase_add_test(t, test_two_threads_share_a_controller_and_its_admin_close_ends_queues_on_both);
	tcase_add_test(t, test_two_threads_a_kato_found_on_one_ends_the_queues_on_the_other);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(nvmet_suite)
