/* rdma-qsm fuzzing: examples/nvmet's transport and controller (rdma.c, cmd.c) fed arbitrary
 * capsules by a host on the sim fabric.  libFuzzer target (make fuzz).
 *
 * The target runs as in tests/check_nvmet: its passive class on one ctx, a hand-written host on
 * another, both on one sim device; the capsules reach on_capsule() as received, so the parsing
 * (flags, DPTR), the Connect (its data read by RDMA from the host) and every command run the
 * target's own path.  The input's first bytes set the target's limits (I/O queues, controllers,
 * commands and data in flight, in-capsule data of 0, 512, 1K or 4K); the rest is a script, one
 * byte an operation (enum op, modulo its count) and the bytes it takes: open a host queue (any
 * qid, any queue size), send a Connect (any qid, sqsize, cntlid, NQNs terminated or not, its
 * data descriptor whole or cut), send a capsule from the input (raw, or its SGL pointed at the
 * host's buffer with a valid key, or that and an opcode the target knows; or its SGL a data
 * block at an offset into the capsule, as long as the command's blocks or any length; an SQE,
 * or shorter, or with in-capsule data after it, up to more than the target's receives hold),
 * enable the controller, ask for I/O queues, dispatch until idle, close a queue, stop taking
 * responses on a queue.  Bytes that run out read as 0.
 *
 * Checked, aborting on a violation so that libFuzzer reports the input:
 *  - a response names a command its queue sent and not yet answered (one response a command),
 *    its SQID the queue's; its status is one the target gives (a list, below), phase, CRD and
 *    More clear, DNR set on every error but Command Interrupted (which the host retries);
 *  - the target's work requests fail only as a host can make them fail (its keys, a capsule
 *    longer than that queue's receives: 64 bytes on an admin queue, 64 + ICD on an I/O queue),
 *    never with another local error: no access out of the target's own registered memory;
 *  - once both sides are idle, every command on a queue still live has its response, but an
 *    Asynchronous Event Request (held while there is nothing to report);
 *  - at the end every host queue is closed: every target queue and controller goes, the
 *    target ctx saw no unexpected event, and once the ctxs are freed the sim holds nothing
 *    (ids, QPs, MRs, device references); ASan's leak check runs per input.
 *  ASan and UBSan watch every access of the target's parsing and execution.
 *
 * QSM_FUZZ_TRACE=1 prints each operation, and the target's log, on stderr / stdout.
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/qsm.h>
#include <qsm/sim.h>

#include "harness.h"
#include "nvmet.h"
#include "fuzz/script.h"

/* What examples/nvmet/main.c owns in the real target. */
struct nvmet_opts g_opts;
uint8_t *g_ns;

/* The target's thread (its ctx: tctx), as main.c makes each of its threads (-T) */
static struct nvmet_thread tt;

static int flush_posts(void)
{
	return nvmet_flush_posts(&tt);
}

#define MAX_OPS 256
#define NQUEUES 6               /* host queues an input may open */
#define NSLOTS 8                /* commands a host queue has unanswered at most */
#define NCIDS 512               /* commands a host queue may send in one input */
#define IOBUF 8192
#define ICD_MAX 4096            /* the largest -I an input picks */
#define CAPSULE_MAX (NVME_SQE_SIZE + ICD_MAX + 64)   /* what a host may send: more than the target takes */
#define NS_SIZE (64u << 10)
#define SUBNQN "nqn.2024-01.io.rdma-qsm:fuzz"
#define HOSTNQN "nqn.2014-08.org.nvmexpress:uuid:fuzz-host"

enum { KIND_OTHER, KIND_AER, KIND_CONNECT };   /* an AER on an admin queue may stay unanswered */

static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "qsm fuzz: nvmet: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

#define CHECK(cond, ...) do { if (!(cond)) fail(__VA_ARGS__); } while (0)

static void harness_failed(const char *msg)
{
	fail("harness: %s", msg);
}

/* ---- the host: one active queue a struct fq ---- */

struct fq {
	struct qsm_conn *q;
	uint16_t qid;
	uint8_t sqe[NSLOTS][CAPSULE_MAX];
	struct nvme_cqe cqe[NSLOTS];
	struct nvmf_connect_data data;
	uint8_t io[IOBUF];
	struct qsm_mr *sqe_mr, *cqe_mr, *data_mr, *io_mr;
	uint16_t ncids;                          /* cids 0 .. ncids-1 sent */
	uint8_t answered[NCIDS];                 /* responses to each */
	uint8_t kind[NCIDS];                     /* KIND_*: what the answer to each may be */
	unsigned unanswered;
	bool live, lost, released;
	bool starved;                            /* posts no more receives for responses */
};

static struct qsm_sim *sim;
static struct qsm_ctx *tctx, *hctx;
static struct harness world = { .ctx = { &hctx, &tctx }, .bound = 100000,
				.now_ns = 1000 * HARNESS_MS, .on_failure = harness_failed,
				.after_dispatch = flush_posts };
static struct sockaddr_in addr;
static struct fq fqs[NQUEUES];
static unsigned nfq;
static uint16_t cntlids[4];                 /* the last controllers the target named */
static unsigned ncntlids;
static bool long_capsule;                   /* a capsule longer than its queue's receives went */
static bool starved;                        /* a host queue stopped taking responses */

static int fq_post_recv(struct fq *f, unsigned i)
{
	struct qsm_sge s = { (uintptr_t)&f->cqe[i], sizeof(f->cqe[i]), qsm_mr_lkey(f->cqe_mr) };

	return qsm_conn_post_recv(f->q, i, &s, 1);
}

static int fq_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct fq *f = qsm_conn_user(q);

	(void)ev;
	f->q = q;
	CHECK(qsm_conn_reg_mr(q, f->sqe, sizeof(f->sqe), 0, &f->sqe_mr) == 0 &&
	      qsm_conn_reg_mr(q, f->cqe, sizeof(f->cqe), QSM_ACCESS_LOCAL_WRITE, &f->cqe_mr) == 0 &&
	      qsm_conn_reg_mr(q, &f->data, sizeof(f->data), QSM_ACCESS_REMOTE_READ, &f->data_mr) == 0 &&
	      qsm_conn_reg_mr(q, f->io, sizeof(f->io), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_READ |
			      QSM_ACCESS_REMOTE_WRITE, &f->io_mr) == 0, "host MRs");
	for (unsigned i = 0; i < NSLOTS; i++)
		CHECK(fq_post_recv(f, i) == 0, "host receive");
	return 0;
}

/* The statuses the target gives (SCT << 8 | SC). */
static bool status_known(unsigned st)
{
	static const uint16_t known[] = {
		NVME_SC_SUCCESS, NVME_SC_INVALID_OPCODE, NVME_SC_INVALID_FIELD, NVME_SC_INVALID_NS,
		NVME_SC_CMD_SEQ_ERROR, NVME_SC_SGL_INVALID_LENGTH, NVME_SC_SGL_INVALID_TYPE,
		NVME_SC_SGL_INVALID_OFFSET, NVME_SC_CMD_INTERRUPTED, NVME_SC_LBA_RANGE,
		NVME_SC_ASYNC_LIMIT, NVME_SC_CONNECT_INCOMPATIBLE, NVME_SC_CONNECT_CTRL_BUSY,
		NVME_SC_CONNECT_INVALID_PARAM,
	};

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (known[i] == st)
			return true;
	return false;
}

static void check_response(struct fq *f, const struct nvme_cqe *c)
{
	uint16_t cid = le16toh(c->cid), word = le16toh(c->status);
	unsigned st = (word >> 1) & 0x7ff;
	bool dnr = word & (NVME_STATUS_DNR << 1);

	CHECK(cid < f->ncids, "qid %u: a response to cid %u, never sent", f->qid, cid);
	CHECK(!f->answered[cid], "qid %u: a second response to cid %u", f->qid, cid);
	f->answered[cid] = 1;
	f->unanswered--;
	CHECK(le16toh(c->sqid) == f->qid, "qid %u: a response with sqid %u", f->qid, le16toh(c->sqid));
	CHECK(status_known(st), "qid %u cid %u: status 0x%03x", f->qid, cid, st);
	CHECK((word & 1) == 0 && (word & 0x3800 << 1) == 0, "qid %u cid %u: status word 0x%04x",
	      f->qid, cid, word);
	CHECK(dnr == (st != NVME_SC_SUCCESS && st != NVME_SC_CMD_INTERRUPTED),
	      "qid %u cid %u: status 0x%03x with DNR %d", f->qid, cid, st, dnr);
}

static int fq_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct fq *f = qsm_conn_user(q);
	struct nvme_cqe c;

	if (wc->status != QSM_WC_SUCCESS || wc->opcode != QSM_WR_RECV)
		return 0;
	CHECK(wc->byte_len == sizeof(c), "qid %u: a response of %u bytes", f->qid, wc->byte_len);
	c = f->cqe[wc->wr_id];
	check_response(f, &c);
	/* a Connect's answer names a controller the next Connects may name */
	if (f->kind[le16toh(c.cid)] == KIND_CONNECT && le16toh(c.status) == 0)
		cntlids[ncntlids++ % 4] = (uint16_t)le64toh(c.result);
	return f->starved ? 0 : fq_post_recv(f, (unsigned)wc->wr_id) < 0;
}

static int fq_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct fq *f = qsm_conn_user(q);

	(void)ev;
	f->live = true;
	return 0;
}

static int fq_lost(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct fq *f = qsm_conn_user(q);

	(void)ev;
	f->live = false;
	f->lost = true;
	return qsm_conn_disconnect(q);
}

static void fq_release(struct qsm_conn *q)
{
	struct fq *f = qsm_conn_user(q);

	f->released = true;
	f->live = false;
	f->q = NULL;
}

static const struct qsm_class fq_class = {
	.name = "fuzz-nvme-host",
	.active = {
		[QSM_CM_LIVE] = { .enter = fq_live },
		[QSM_CM_RECONNECT_WAIT] = { .enter = fq_lost },
	},
	.qp_ready = fq_qp_ready,
	.completion = fq_completion,
	.release = fq_release,
	.qp = { .max_send_wr = 2 * NSLOTS, .max_recv_wr = NSLOTS },
};

/* Every queue whose both sides are idle has its answers: only a held AER may be missing. */
static void settle(void)
{
	harness_settle(&world);
	for (unsigned i = 0; i < nfq; i++) {
		struct fq *f = &fqs[i];

		if (!f->live || f->lost || f->starved)
			continue;
		for (uint16_t cid = 0; cid < f->ncids; cid++)
			CHECK(f->answered[cid] || f->kind[cid] == KIND_AER, "qid %u: cid %u never answered", f->qid, cid);
	}
}

/* ---- the target, its completions watched ---- */

static struct qsm_class target_class;

/* What a host can make the target's work requests fail with: a key or an address of its own
 * that it does not grant (REM_ACCESS_ERR), a capsule longer than a receive (when it sent one:
 * LOC_QP_OP_ERR on the sim as on rxe, LOC_LEN_ERR on other devices), and the flush of what was
 * posted after; a response sent to a host that posts no receive (RNR_RETRY_EXC_ERR, when one
 * stopped).  Any other local error (protection) would be the target's own access out of
 * its MRs: the sim, as a device, refuses it instead of corrupting memory, so ASan would never
 * see it. */
static int target_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	CHECK(wc->status == QSM_WC_SUCCESS || wc->status == QSM_WC_WR_FLUSH_ERR ||
	      wc->status == QSM_WC_REM_ACCESS_ERR ||
	      ((wc->status == QSM_WC_LOC_QP_OP_ERR || wc->status == QSM_WC_LOC_LEN_ERR) &&
	       long_capsule) || (wc->status == QSM_WC_RNR_RETRY_EXC_ERR && starved),
	      "a target work request failed with status %d", wc->status);
	return nvmet_queue_class.completion(q, wc);
}

/* ---- the script's operations ---- */

static struct fq *pick(struct script *s)
{
	unsigned b = take(s);

	for (unsigned k = 0; k < nfq; k++) {
		struct fq *f = &fqs[(b + k) % nfq];

		if (f->live)
			return f;
	}
	return NULL;
}

static void op_open(struct script *s)
{
	static const uint16_t sizes[] = { 0, 1, 7, 15, 31, 32, 127, 128 };
	unsigned b = take(s), b2 = take(s);
	struct nvme_rdma_cm_req req = { .recfmt = 0, .qid = htole16((uint16_t)(b % 5)),
					.hsqsize = htole16(sizes[b2 % 8]),
					.hrqsize = htole16(b2 & 0x80 ? 0 : NSLOTS) };
	struct fq *f;
	struct qsm_conn *q;

	if (nfq == NQUEUES)
		return;
	f = &fqs[nfq++];
	memset(f, 0, sizeof(*f));
	f->qid = (uint16_t)(b % 5);
	CHECK(qsm_conn_new(hctx, &(struct qsm_conn_opts){ .cls = &fq_class,
		.dst = (struct sockaddr *)&addr, .private_data = &req, .private_data_len = sizeof(req),
		.policy = { .initial_delay_ms = 3600000 }, .user = f }, &q) == 0, "host queue");
	CHECK(qsm_conn_connect(q) == 0, "host connect");
	settle();
}

/* Sends capsule on f as its next cid, if the host may (not over NSLOTS unanswered): the SQE c,
 * len bytes in all (cut short, or followed by what icd holds). */
static void fq_send_capsule(struct fq *f, struct nvme_sqe *c, const uint8_t *icd, unsigned len)
{
	unsigned slot;
	struct qsm_sge sg;

	if (f->unanswered >= NSLOTS)
		settle();
	if (!f->live || f->unanswered >= NSLOTS || f->ncids == NCIDS)
		return;
	c->cid = htole16(f->ncids);
	f->kind[f->ncids] = f->qid == 0 && c->opcode == NVME_ADMIN_ASYNC_EVENT ? KIND_AER :
			    c->opcode == NVME_FABRICS_COMMAND && ((uint8_t *)c)[4] == NVMF_FCTYPE_CONNECT ?
			    KIND_CONNECT : KIND_OTHER;
	slot = f->ncids % NSLOTS;
	memcpy(f->sqe[slot], c, NVME_SQE_SIZE);
	if (len > NVME_SQE_SIZE)
		memcpy(f->sqe[slot] + NVME_SQE_SIZE, icd, len - NVME_SQE_SIZE);
	sg = (struct qsm_sge){ (uintptr_t)f->sqe[slot], len, qsm_mr_lkey(f->sqe_mr) };
	if (qsm_conn_post_send(f->q, 100 + slot, &sg, 1, 0) == 0) {
		f->ncids++;
		f->unanswered++;
		long_capsule |= len > NVME_SQE_SIZE + (f->qid ? g_opts.icd_size : 0);
	}
}

static void fq_send(struct fq *f, struct nvme_sqe *c)
{
	fq_send_capsule(f, c, NULL, NVME_SQE_SIZE);
}

static void sgl_keyed(struct nvme_sqe *c, const void *buf, uint32_t len, uint32_t rkey)
{
	c->flags = NVME_CMD_PSDT_SGL;
	c->sgl.addr = htole64((uintptr_t)buf);
	c->sgl.length[0] = len & 0xff;
	c->sgl.length[1] = (len >> 8) & 0xff;
	c->sgl.length[2] = (len >> 16) & 0xff;
	memcpy(c->sgl.key, &(uint32_t){ htole32(rkey) }, 4);
	c->sgl.type = NVME_SGL_KEYED_DATA << 4 | NVME_SGL_SUB_ADDRESS;
}

static void op_connect(struct script *s)
{
	struct fq *f = pick(s);
	unsigned how = take(s), b = take(s), nqn = take(s);
	struct nvmf_connect_cmd c = { .opcode = NVME_FABRICS_COMMAND, .fctype = NVMF_FCTYPE_CONNECT,
				      .kato = htole32(15000) };
	uint16_t cntlid;

	if (!f)
		return;
	c.qid = htole16(how & 1 ? (uint16_t)(b % 5) : f->qid);
	c.sqsize = htole16(how & 2 ? (uint16_t)b : f->qid ? 15 : NVMET_AQ_DEPTH - 1);
	c.recfmt = htole16(how & 4 ? 1 : 0);
	cntlid = f->qid == 0 ? 0xffff : ncntlids ? cntlids[(ncntlids - 1) % 4] : 1;
	if (how & 8)
		cntlid = (uint16_t)(b * 257);
	memset(&f->data, 0, sizeof(f->data));
	f->data.cntlid = htole16(cntlid);
	snprintf(f->data.subsysnqn, sizeof(f->data.subsysnqn), "%s",
		 nqn & 1 ? NVME_DISC_SUBSYS_NAME : SUBNQN);
	snprintf(f->data.hostnqn, sizeof(f->data.hostnqn), "%s", HOSTNQN);
	if (nqn & 2)
		memset(f->data.subsysnqn, 'n', sizeof(f->data.subsysnqn));
	if (nqn & 4)
		memset(f->data.hostnqn, 'h', sizeof(f->data.hostnqn));
	sgl_keyed((struct nvme_sqe *)(void *)&c, &f->data,
		  how & 16 ? b * 8u : sizeof(f->data), qsm_mr_rkey(f->data_mr));
	fq_send(f, (struct nvme_sqe *)(void *)&c);
}

/* 64 bytes of the input as a capsule; mode: raw, its SGL onto the host's buffer (its length
 * the input's, up to the buffer), or that and an opcode of the queue's kind; with bit 5, its SGL
 * a data block at an offset (0..48) into the capsule, of the command's 1..8 blocks or of a length
 * from the input, and that much data from the input after the SQE; with bit 6, the capsule's
 * length from the input instead (shorter than an SQE, or up to more than any receive). */
static void op_capsule(struct script *s)
{
	static const uint8_t admin[] = { NVME_ADMIN_IDENTIFY, NVME_ADMIN_GET_LOG_PAGE,
		NVME_ADMIN_SET_FEATURES, NVME_ADMIN_GET_FEATURES, NVME_ADMIN_KEEP_ALIVE,
		NVME_ADMIN_ASYNC_EVENT, NVME_ADMIN_ABORT, NVME_FABRICS_COMMAND };
	static const uint8_t io[] = { NVME_CMD_READ, NVME_CMD_WRITE, NVME_CMD_FLUSH, 0x7f };
	struct fq *f = pick(s);
	unsigned mode = take(s);
	struct nvme_sqe c;
	uint8_t *p = (uint8_t *)&c, icd[CAPSULE_MAX - NVME_SQE_SIZE];
	unsigned len = NVME_SQE_SIZE, off = 0, icd_len = 0, b;

	for (unsigned i = 0; i < sizeof(c); i++)
		p[i] = (uint8_t)take(s);
	if (mode & 0x20) {
		b = take(s);
		c.cdw12 = htole32(le32toh(c.cdw12) & 7);
		off = (b & 3) * 16;
		icd_len = b & 4 ? take(s) | take(s) << 8 : (le32toh(c.cdw12) + 1) << NVMET_LBA_SHIFT;
		len = NVME_SQE_SIZE + off + icd_len;
	}
	if (mode & 0x40)
		len = 1 + (take(s) | take(s) << 8);
	if (len > CAPSULE_MAX)
		len = CAPSULE_MAX;
	for (unsigned i = NVME_SQE_SIZE; i < len; i++)
		icd[i - NVME_SQE_SIZE] = (uint8_t)take(s);
	if (!f)
		return;
	if (mode % 3 >= 1)
		sgl_keyed(&c, f->io, get_le24(c.sgl.length) % (IOBUF + 1), qsm_mr_rkey(f->io_mr));
	if (mode % 3 == 2) {
		c.opcode = f->qid ? io[c.opcode % 4] : admin[c.opcode % 8];
		if (f->qid)
			c.nsid = htole32(mode & 0x80 ? le32toh(c.nsid) : 1);
	}
	if (mode & 0x20) {
		c.flags = NVME_CMD_PSDT_SGL;
		c.sgl.addr = htole64(off);
		memcpy(c.sgl.length, &(uint32_t){ htole32(icd_len) }, 4);
		c.sgl.type = NVME_SGL_DATA_BLOCK << 4 | NVME_SGL_SUB_OFFSET;
	}
	fq_send_capsule(f, &c, icd, len);
}

static void op_enable(struct script *s)
{
	struct fq *f = pick(s);
	struct nvmf_prop_cmd p = { .opcode = NVME_FABRICS_COMMAND, .rsvd1 = NVME_CMD_PSDT_SGL,
				   .fctype = NVMF_FCTYPE_PROP_SET, .offset = htole32(NVME_REG_CC),
				   .value = htole64(NVME_CC_EN) };

	if (!f)
		return;
	((struct nvme_sqe *)(void *)&p)->sgl.type = NVME_SGL_KEYED_DATA << 4;
	fq_send(f, (struct nvme_sqe *)(void *)&p);
}

static void op_queues(struct script *s)
{
	struct fq *f = pick(s);
	unsigned n = 1 + take(s) % 4;
	struct nvme_sqe c = { .opcode = NVME_ADMIN_SET_FEATURES, .flags = NVME_CMD_PSDT_SGL,
			      .cdw10 = htole32(NVME_FEAT_NUM_QUEUES),
			      .cdw11 = htole32((n - 1) | (n - 1) << 16) };

	if (!f)
		return;
	c.sgl.type = NVME_SGL_KEYED_DATA << 4;
	fq_send(f, &c);
}

/* A host that takes no more responses: the target's next sends to it find no receive. */
static void op_starve(struct script *s)
{
	struct fq *f = pick(s);

	if (f)
		f->starved = starved = true;
}

static void op_close(struct script *s)
{
	struct fq *f = pick(s);

	if (f && f->q)
		CHECK(qsm_conn_disconnect(f->q) == 0, "host disconnect");
	settle();
}

enum op { OP_OPEN, OP_CONNECT, OP_CAPSULE, OP_ENABLE, OP_QUEUES, OP_SETTLE, OP_CLOSE, OP_STARVE,
	  OP_COUNT };

static const char *const op_names[OP_COUNT] = {
	"open", "connect", "capsule", "enable", "queues", "settle", "close", "starve",
};

/* ---- one input's world ---- */

static void world_new(struct script *s)
{
	struct qsm_fabric *f;
	struct qsm_listener *l;
	static const uint32_t icds[] = { 0, 512, 1024, ICD_MAX };
	unsigned b = take(s), b2 = take(s);

	memset(fqs, 0, sizeof(fqs));
	nfq = 0;
	ncntlids = 0;
	long_capsule = starved = false;
	/* small limits, so that the input reaches them */
	g_opts = (struct nvmet_opts){ .addr = "192.0.2.1", .port = 4420, .subnqn = SUBNQN,
		.ns_size = NS_SIZE, .max_io_queues = 1 + b % 4, .max_ctrls = 1 + (b >> 2) % 3,
		.max_ctrl_cmds = 1 + b2 % 8, .max_ctrl_data = (1 + (b2 >> 3) % 8) * 2048ull,
		.icd_size = icds[b2 >> 6], .family = AF_INET, .verbose = getenv("QSM_FUZZ_TRACE") != NULL };
	CHECK((g_ns = calloc(1, NS_SIZE)) != NULL, "namespace");
	CHECK(qsm_sim_new(&sim) == 0 && qsm_sim_device_add(sim, "sim0", "192.0.2.1") == 0, "sim");
	CHECK(qsm_sim_fabric_new(sim, &f) == 0 && qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f,
		.now_ns = harness_clock, .now_arg = &world }, &tctx) == 0, "target ctx");
	CHECK(qsm_sim_fabric_new(sim, &f) == 0 && qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f,
		.now_ns = harness_clock, .now_arg = &world }, &hctx) == 0, "host ctx");
	CHECK(nvmet_thread_init(&tt, tctx) == 0, "the target's thread");
	addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(4420) };
	inet_pton(AF_INET, "192.0.2.1", &addr.sin_addr);
	target_class = nvmet_queue_class;
	target_class.completion = target_completion;
	CHECK(qsm_listener_new(tctx, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
		.cls = &target_class }, &l) == 0, "listener");
}

/* Every host queue closed: the target lets go of every queue and controller; then the ctxs
 * go, as main.c ends, and the sim holds nothing. */
static void world_end(void)
{
	struct qsm_sim_stats st;
	struct qsm_counters c;

	for (unsigned i = 0; i < nfq; i++)
		if (fqs[i].q)
			CHECK(qsm_conn_disconnect(fqs[i].q) == 0, "host disconnect");
	harness_settle(&world);
	for (unsigned i = 0; i < nfq; i++)
		CHECK(fqs[i].released, "host queue %u not released", i);
	CHECK(nvmet_queues_live(&tt) == 0, "%u target queues left", nvmet_queues_live(&tt));
	CHECK(nvmet_ctrls_live() == 0, "%u controllers left", nvmet_ctrls_live());
	CHECK(qsm_ctx_counters(tctx, &c, sizeof(c)) == 0 && c.unexpected == 0,
	      "the target saw %llu unexpected events", (unsigned long long)c.unexpected);
	qsm_ctx_free(hctx);
	nvmet_queues_take_all(&tt);
	qsm_ctx_free(tctx);
	hctx = tctx = NULL;
	nvmet_queues_free_all();
	nvmet_thread_fini(&tt);
	nvmet_ctrls_free_all();
	qsm_sim_get_stats(sim, &st);
	CHECK(st.ids + st.qps + st.device_refs + st.mrs == 0, "the sim holds ids %u qps %u refs %u mrs %u",
	      st.ids, st.qps, st.device_refs, st.mrs);
	qsm_sim_free(sim);
	free(g_ns);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* the target logs every queue and controller on stdout: not at this rate */
	if (!getenv("QSM_FUZZ_TRACE") && !freopen("/dev/null", "w", stdout))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct script s = { data, size };
	bool verbose = getenv("QSM_FUZZ_TRACE") != NULL;

	world_new(&s);
	for (unsigned n = 1; s.n && n <= MAX_OPS; n++) {
		enum op op = (enum op)(take(&s) % OP_COUNT);

		if (verbose)
			fprintf(stderr, "qsm fuzz: step %u: %s\n", n, op_names[op]);
		switch (op) {
		case OP_OPEN: op_open(&s); break;
		case OP_CONNECT: op_connect(&s); break;
		case OP_CAPSULE: op_capsule(&s); break;
		case OP_ENABLE: op_enable(&s); break;
		case OP_QUEUES: op_queues(&s); break;
		case OP_SETTLE: settle(); break;
		case OP_CLOSE: op_close(&s); break;
		case OP_STARVE: op_starve(&s); break;
		case OP_COUNT: break;
		}
	}
	settle();
	world_end();
	return 0;
}
