/* qsm-nvmet: the controller.  Fabrics commands (Connect, Property Get/Set), the admin commands
 * the Linux host sends (Identify, Get Log Page, Set/Get Features, Keep Alive, Asynchronous
 * Event Request, Abort) and the NVM I/O commands (Read, Write, Flush) on one RAM namespace.
 * One controller per host association: created by the admin queue's Connect (dynamic
 * controller model), found by cntlid by the I/O queues' Connect, freed with its last queue. */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "nvmet.h"

struct nvmet_ctrl {
	uint16_t cntlid;
	int discovery;
	char hostnqn[256];
	uint8_t hostid[16];
	uint32_t cc, aec;                       /* the admin queue's thread's */
	uint32_t csts;                          /* atomic: I/O queues read it, the KATO sets CFS */
	uint32_t kato;                          /* under ctrl_lock */
	uint64_t ka_last;                       /* atomic: ms, the loop's clock: its last command */
	int ka_expired;                         /* its Keep Alive Timer expired: it is ending */
	unsigned nr_io_queues;                  /* granted by Set Features Number of Queues */
	struct nvmet_queue *queues[NVMET_MAX_QID + 1];   /* under ctrl_lock */
	unsigned nqueues;
	struct nvmet_req *aer[NVMET_MAX_AER];   /* held: there is nothing to report */
	unsigned naer;
	unsigned cmds;                          /* atomic: I/O commands counted (-R) */
	uint64_t data;                          /* atomic: their data's bytes (-M) */
	struct nvmet_ctrl *next;
};

/* The controllers, shared by the threads (-T): a host's admin queue and each of its I/O queues
 * may be on a thread of their own.  ctrl_lock guards the table (the list, the cntlids, the
 * counts), each controller's queue table and life (it goes with its last queue, on whichever
 * thread that closes), and what an I/O queue's Connect reads of it (kato, nr_io_queues).  The
 * I/O path takes no lock: a command reads CSTS, stamps its Keep Alive Timer and counts against
 * the per-controller limits with relaxed atomics.  What only the admin queue's commands touch
 * (CC, AEC, the AERs) is its thread's. */
static pthread_mutex_t ctrl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmet_ctrl *ctrls;
static uint16_t last_cntlid;
static unsigned nctrls;
static uint64_t ctrls_created, ctrls_freed;

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* ---- the Keep Alive Timer ----
 * A fabrics controller must support Keep Alive (NVMe-oF; KAS is 1 s here): a host that sends no
 * command for KATO ms (rounded up to KAS, as the base spec rounds it) is gone, and its
 * association ends -- the only way a target learns that a host vanished without a word on a
 * transport that retries forever (soft-RoCE takes the kernel host's RC retry count 7 so).  Any
 * command on any of the controller's queues restarts the timer (traffic based, as TBKAS lets a
 * host count on; a Keep Alive is one of them): one store per command, on the loop's clock
 * (nvmet_keep_alive_clock), no clock read.  The timers are looked at only after a dispatch that
 * caught up (nvmet_keep_alive_tick): a target that was itself held up (descheduled, or behind
 * a storm) first takes the commands that waited for it, and never ends an association for
 * its own delay.  Any thread's tick may find a controller due (each on its own clock), and ends
 * its queues on their own threads (nvmet_queue_close).  KATO 0 turns the timer off (a discovery controller,
 * usually).  A controller is due KAS after KATO: slack for the loop's clock and the command's
 * transit, so that a host keeping to KATO (older Linux hosts send a Keep Alive every KATO, newer
 * ones every half) is never taken for gone.  The controllers are scanned only when the earliest
 * can be due (ka_next). */
#define NVMET_KAS_MS 1000
static uint64_t ka_next = UINT64_MAX;    /* written under ctrl_lock, read without */

static uint64_t kato_of(const struct nvmet_ctrl *c)
{
	return (c->kato + NVMET_KAS_MS - 1ull) / NVMET_KAS_MS * NVMET_KAS_MS;
}

static uint64_t ka_due(const struct nvmet_ctrl *c)
{
	return LOAD(c->ka_last) + kato_of(c) + NVMET_KAS_MS;
}

/* Under ctrl_lock. */
static void ka_arm(struct nvmet_ctrl *c, uint64_t now_ms)
{
	STORE(c->ka_last, now_ms);
	if (c->kato && ka_due(c) < ka_next)
		STORE(ka_next, ka_due(c));
}

/* Expired (under ctrl_lock, on thread t): CSTS.CFS, and every queue of the association
 * disconnected; the controller goes with its last queue (nvmet_queue_detach), as when the host
 * closes them. */
static void ka_expire(struct nvmet_thread *t, struct nvmet_ctrl *c)
{
	c->ka_expired = 1;
	__atomic_fetch_or(&c->csts, NVME_CSTS_CFS, __ATOMIC_RELAXED);
	t->stats.kato_expired++;
	LOG("controller %u (%s): no command in %" PRIu64 " ms (KATO %" PRIu64 " ms): keep alive "
	    "timeout, ending the association", c->cntlid, c->hostnqn, t->ka_now - LOAD(c->ka_last),
	    kato_of(c));
	for (unsigned i = 0; i <= NVMET_MAX_QID; i++)
		if (c->queues[i])
			nvmet_queue_close(t, c->queues[i]);
}

int nvmet_keep_alive_tick(struct nvmet_thread *t)
{
	uint64_t now_ms = t->ka_now, next;

	if (now_ms >= LOAD(ka_next)) {
		pthread_mutex_lock(&ctrl_lock);
		next = UINT64_MAX;
		for (struct nvmet_ctrl *c = ctrls; c; c = c->next) {
			uint64_t due = ka_due(c);

			if (!c->kato || c->ka_expired)
				continue;
			if (due <= now_ms)
				ka_expire(t, c);
			else if (due < next)
				next = due;
		}
		STORE(ka_next, next);
		pthread_mutex_unlock(&ctrl_lock);
	}
	next = LOAD(ka_next);
	if (next == UINT64_MAX)
		return -1;
	if (next <= now_ms)   /* armed on another thread, on a clock behind this one's */
		return 0;
	return next - now_ms > INT_MAX ? INT_MAX : (int)(next - now_ms);
}

unsigned nvmet_ctrls_live(void)
{
	unsigned n;

	pthread_mutex_lock(&ctrl_lock);
	n = nctrls;
	pthread_mutex_unlock(&ctrl_lock);
	return n;
}

void nvmet_ctrls_counted(uint64_t *created, uint64_t *freed)
{
	pthread_mutex_lock(&ctrl_lock);
	*created = ctrls_created;
	*freed = ctrls_freed;
	pthread_mutex_unlock(&ctrl_lock);
}

/* At exit, every thread stopped. */
void nvmet_ctrls_free_all(void)
{
	while (ctrls) {
		struct nvmet_ctrl *c = ctrls;

		ctrls = c->next;
		free(c);
	}
	nctrls = 0;
	ctrls_created = ctrls_freed = 0;
	last_cntlid = 0;
	ka_next = UINT64_MAX;
}

/* Under ctrl_lock, as ctrl_new and ctrl_free. */
static struct nvmet_ctrl *ctrl_find(uint16_t cntlid)
{
	for (struct nvmet_ctrl *c = ctrls; c; c = c->next)
		if (c->cntlid == cntlid)
			return c;
	return NULL;
}

/* A new controller with the next free cntlid: 0 and *ret, or the Connect's status. */
static uint16_t ctrl_new(struct nvmet_ctrl **ret)
{
	struct nvmet_ctrl *c;

	/* the target's cap (-c): no controller resources is Controller Busy, as for the kernel */
	if (nctrls >= g_opts.max_ctrls)
		return NVME_SC_CONNECT_CTRL_BUSY | NVME_STATUS_DNR;
	/* cntlids 1..0xffef (0xfff0 and up are reserved), each tried once: a full range is the
	 * kernel nvmet's answer for an exhausted cntlid range, Controller Busy */
	for (unsigned n = 0; n < NVMET_MAX_CTRLS; n++) {
		if (++last_cntlid > NVMET_MAX_CTRLS)
			last_cntlid = 1;
		if (ctrl_find(last_cntlid))
			continue;
		if (!(c = calloc(1, sizeof(*c))))
			return NVME_SC_INTERNAL;
		c->cntlid = last_cntlid;
		c->next = ctrls;
		ctrls = c;
		nctrls++;
		ctrls_created++;
		*ret = c;
		return NVME_SC_SUCCESS;
	}
	return NVME_SC_CONNECT_CTRL_BUSY | NVME_STATUS_DNR;
}

static void ctrl_free(struct nvmet_ctrl *c)
{
	for (struct nvmet_ctrl **p = &ctrls; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	LOG("controller %u (%s) freed", c->cntlid, c->hostnqn);
	nctrls--;
	ctrls_freed++;
	free(c);
}

/* ---- the per-controller limits (-R, -M) ----
 * Only I/O commands count: the admin queue's slots and buffers are fixed when it is accepted,
 * and a Keep Alive must not starve behind a host's own I/O.  A command counts from its capsule
 * until its slot is free again (its response sent: a read's data is on the wire until then),
 * its data bytes with it.  Over either limit the command is answered Command Interrupted, the
 * NVMe base spec's status for a command the controller cannot complete now and the host should
 * retry (DNR clear; the kernel host retries it); a data limit of at least MDTS means one command
 * alone always fits, so a retry can succeed.  The counts are atomics, the controller's queues
 * being on several threads: a command counts itself in, and out again if that went over. */

static uint16_t ctrl_count(struct nvmet_ctrl *c, struct nvmet_req *r)
{
	if (__atomic_add_fetch(&c->cmds, 1, __ATOMIC_RELAXED) > g_opts.max_ctrl_cmds) {
		__atomic_sub_fetch(&c->cmds, 1, __ATOMIC_RELAXED);
		r->nq->t->stats.interrupted++;
		return NVME_SC_CMD_INTERRUPTED;
	}
	r->counted = 1;
	r->held = 0;
	return NVME_SC_SUCCESS;
}

static uint16_t ctrl_hold(struct nvmet_ctrl *c, struct nvmet_req *r, uint32_t bytes)
{
	if (__atomic_add_fetch(&c->data, bytes, __ATOMIC_RELAXED) > g_opts.max_ctrl_data) {
		__atomic_sub_fetch(&c->data, bytes, __ATOMIC_RELAXED);
		r->nq->t->stats.interrupted++;
		return NVME_SC_CMD_INTERRUPTED;
	}
	r->held += bytes;
	return NVME_SC_SUCCESS;
}

static void ctrl_uncount(struct nvmet_ctrl *c, struct nvmet_req *r)
{
	__atomic_sub_fetch(&c->cmds, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&c->data, r->held, __ATOMIC_RELAXED);
	r->counted = 0;
	r->held = 0;
}

void nvmet_req_done(struct nvmet_req *r)
{
	if (r->counted && r->nq->ctrl)
		ctrl_uncount(r->nq->ctrl, r);
	r->counted = 0;
	r->held = 0;
}

/* The data a command moves is exactly what its SGL describes: SGLS offers no longer SGL (bit 18
 * clear), and a shorter one cannot hold the data.  Otherwise Data SGL Length Invalid, as the
 * kernel's nvmet answers; false when r is answered so. */
static bool xfer_is(struct nvmet_req *r, uint32_t len)
{
	if (r->rlen == len)
		return true;
	nvmet_complete(r, NVME_SC_SGL_INVALID_LENGTH | NVME_STATUS_DNR, 0);
	return false;
}

void nvmet_queue_detach(struct nvmet_queue *nq)
{
	struct nvmet_ctrl *c = nq->ctrl;

	if (!c)
		return;
	/* what its commands still hold goes back now: the controller may go before their slots */
	for (uint32_t i = 0; i < nq->nreqs; i++)
		if (nq->reqs[i].busy && nq->reqs[i].counted)
			ctrl_uncount(c, &nq->reqs[i]);
	nq->ctrl = NULL;
	pthread_mutex_lock(&ctrl_lock);
	c->queues[nq->qid] = NULL;
	if (nq->qid == 0) {
		/* the admin queue is gone: so is the association; close its I/O queues, each on
		 * its own thread */
		c->naer = 0;
		for (unsigned i = 1; i <= NVMET_MAX_QID; i++)
			if (c->queues[i])
				nvmet_queue_close(nq->t, c->queues[i]);
	}
	if (--c->nqueues == 0)
		ctrl_free(c);
	pthread_mutex_unlock(&ctrl_lock);
}

/* ---- Fabrics commands ---- */

static const char *nqn_of(const struct nvmet_ctrl *c)
{
	return c->discovery ? NVME_DISC_SUBSYS_NAME : g_opts.subnqn;
}

/* Connect failed on a parameter: result = IATTR (bit 16: the parameter is in the connect data,
 * not in the command) | IPO (its byte offset). */
static void connect_invalid(struct nvmet_req *r, int in_data, uint16_t offset)
{
	r->nq->t->stats.connect_errors++;
	nvmet_complete(r, NVME_SC_CONNECT_INVALID_PARAM | NVME_STATUS_DNR,
		       (uint64_t)(in_data ? 1u << 16 : 0) | offset);
}

static void connect_data_ready(struct nvmet_req *r)
{
	struct nvmet_queue *nq = r->nq;
	const struct nvmf_connect_cmd *cmd = (const void *)&r->cmd;
	struct nvmf_connect_data *d = (void *)r->buf;
	uint16_t qid = le16toh(cmd->qid), sqsize = le16toh(cmd->sqsize);
	struct nvmet_ctrl *c;
	uint16_t st;
	int discovery;

	nq->connecting = 0;
	nq->t->stats.connects++;
	if (le16toh(cmd->recfmt) != 0) {
		nq->t->stats.connect_errors++;
		nvmet_complete(r, NVME_SC_CONNECT_INCOMPATIBLE | NVME_STATUS_DNR, 0);
		return;
	}
	/* an NQN with no NUL where an NQN can end is no NQN: an invalid parameter, as SPDK
	 * answers (not cut short into a name the host did not send) */
	if (!memchr(d->subsysnqn, 0, NVMF_NQN_MAX + 1)) {
		LOG("queue %u: Connect with an unterminated subsystem NQN", nq->serial);
		return connect_invalid(r, 1, NVMF_CONNECT_DATA_SUBNQN);
	}
	if (!memchr(d->hostnqn, 0, NVMF_NQN_MAX + 1)) {
		LOG("queue %u: Connect with an unterminated host NQN", nq->serial);
		return connect_invalid(r, 1, NVMF_CONNECT_DATA_HOSTNQN);
	}
	if (qid != nq->qid) {
		LOG("queue %u: Connect for qid %u on the queue of qid %u", nq->serial, qid, nq->qid);
		return connect_invalid(r, 0, NVMF_CONNECT_CMD_QID);
	}
	if (sqsize == 0 || sqsize + 1u > nq->depth) {
		LOG("queue %u: Connect sqsize %u, queue depth %u", nq->serial, sqsize, nq->depth);
		return connect_invalid(r, 0, NVMF_CONNECT_CMD_SQSIZE);
	}
	discovery = strcmp(d->subsysnqn, NVME_DISC_SUBSYS_NAME) == 0;
	if (!discovery && strcmp(d->subsysnqn, g_opts.subnqn) != 0) {
		LOG("queue %u: Connect to unknown subsystem %s", nq->serial, d->subsysnqn);
		return connect_invalid(r, 1, NVMF_CONNECT_DATA_SUBNQN);
	}
	/* the dynamic controller model: an admin queue's Connect asks for any controller */
	if (qid == 0 && le16toh(d->cntlid) != 0xffff) {
		LOG("queue %u: admin Connect for cntlid %u", nq->serial, le16toh(d->cntlid));
		return connect_invalid(r, 1, NVMF_CONNECT_DATA_CNTLID);
	}
	pthread_mutex_lock(&ctrl_lock);
	if (qid == 0) {
		if ((st = ctrl_new(&c)) != NVME_SC_SUCCESS) {
			pthread_mutex_unlock(&ctrl_lock);
			LOG("queue %u: no controller for %s: status 0x%03x", nq->serial, d->hostnqn,
			    st & 0x7ff);
			nq->t->stats.connect_errors++;
			nvmet_complete(r, st, 0);
			return;
		}
		c->discovery = discovery;
		c->kato = le32toh(cmd->kato);
		ka_arm(c, nq->t->ka_now);
		memcpy(c->hostid, d->hostid, sizeof(c->hostid));
		snprintf(c->hostnqn, sizeof(c->hostnqn), "%s", d->hostnqn);
		LOG("controller %u: %s for %s (admin queue %u, kato %u ms)", c->cntlid,
		    discovery ? "discovery" : g_opts.subnqn, c->hostnqn, nq->serial, c->kato);
	} else {
		c = ctrl_find(le16toh(d->cntlid));
		if (!c || c->discovery || !c->queues[0] || strcmp(c->hostnqn, d->hostnqn) != 0 ||
		    strcmp(nqn_of(c), d->subsysnqn) != 0 || !(LOAD(c->csts) & NVME_CSTS_RDY)) {
			pthread_mutex_unlock(&ctrl_lock);
			LOG("queue %u: I/O queue Connect for unknown or unready controller %u",
			    nq->serial, le16toh(d->cntlid));
			return connect_invalid(r, 1, NVMF_CONNECT_DATA_CNTLID);
		}
		if (qid > c->nr_io_queues) {
			pthread_mutex_unlock(&ctrl_lock);
			LOG("queue %u: qid %u not granted on controller %u", nq->serial, qid, c->cntlid);
			return connect_invalid(r, 0, NVMF_CONNECT_CMD_QID);
		}
		if (c->queues[qid]) {   /* the queue exists: as a second Connect on one queue */
			pthread_mutex_unlock(&ctrl_lock);
			LOG("queue %u: qid %u in use on controller %u", nq->serial, qid, le16toh(d->cntlid));
			nq->t->stats.connect_errors++;
			nvmet_complete(r, NVME_SC_CMD_SEQ_ERROR | NVME_STATUS_DNR, 0);
			return;
		}
		VLOG("controller %u: I/O queue %u (queue %u, %u entries, thread %u)", c->cntlid, qid,
		     nq->serial, sqsize + 1u, nq->t->index);
	}
	c->queues[qid] = nq;
	c->nqueues++;
	nq->ctrl = c;
	pthread_mutex_unlock(&ctrl_lock);
	nvmet_complete(r, NVME_SC_SUCCESS, nq->ctrl->cntlid);
}

/* One Connect per queue: a second one, while the first's data is read or once the queue is
 * bound, is a Command Sequence Error (the queue exists or is being created; the spec's answer
 * to a Connect for a queue that exists, and the kernel nvmet's).  Checked here, as the capsule
 * arrives, not when the data is in: a host may pipeline capsules. */
static void exec_connect(struct nvmet_req *r)
{
	struct nvmet_queue *nq = r->nq;

	if (nq->ctrl || nq->connecting) {
		nq->t->stats.connect_errors++;
		nvmet_complete(r, NVME_SC_CMD_SEQ_ERROR | NVME_STATUS_DNR, 0);
		return;
	}
	if (!xfer_is(r, sizeof(struct nvmf_connect_data)))
		return;
	nq->connecting = 1;
	nvmet_fetch(r, r->buf, nq->buf_lkey, sizeof(struct nvmf_connect_data), connect_data_ready);
}

static uint64_t reg_cap(void)
{
	return (uint64_t)(NVMET_MAX_DEPTH - 1)   /* MQES, 0's based */
	       | 1ull << 16                      /* CQR: contiguous queues required */
	       | 15ull << 24                     /* TO: 7.5 s for CSTS.RDY */
	       | 1ull << 37;                     /* CSS: the NVM command set */
	                                         /* MPSMIN = MPSMAX = 0: 4 KiB pages */
}

static void exec_prop_get(struct nvmet_req *r, struct nvmet_ctrl *c)
{
	const struct nvmf_prop_cmd *p = (const void *)&r->cmd;
	int size8 = (p->attrib & 7) == 1;
	uint64_t v;

	switch (le32toh(p->offset)) {
	case NVME_REG_CAP: v = reg_cap(); break;
	case NVME_REG_VS: v = 0x10300; break;  /* 1.3 */
	case NVME_REG_CC: v = c->cc; break;
	case NVME_REG_CSTS: v = LOAD(c->csts); break;
	default:
		nvmet_complete(r, NVME_SC_INVALID_FIELD | NVME_STATUS_DNR, 0);
		return;
	}
	if (!size8 && le32toh(p->offset) == NVME_REG_CAP)
		v &= 0xffffffffu;
	nvmet_complete(r, NVME_SC_SUCCESS, v);
}

static void exec_prop_set(struct nvmet_req *r, struct nvmet_ctrl *c)
{
	const struct nvmf_prop_cmd *p = (const void *)&r->cmd;
	uint32_t old = c->cc, cc = (uint32_t)le64toh(p->value);

	if (le32toh(p->offset) != NVME_REG_CC || (p->attrib & 7) != 0) {
		nvmet_complete(r, NVME_SC_INVALID_FIELD | NVME_STATUS_DNR, 0);
		return;
	}
	c->cc = cc;
	if ((cc & NVME_CC_EN) && !(old & NVME_CC_EN))
		__atomic_fetch_or(&c->csts, NVME_CSTS_RDY, __ATOMIC_RELAXED);
	if (!(cc & NVME_CC_EN) && (old & NVME_CC_EN))
		__atomic_fetch_and(&c->csts, ~(uint32_t)NVME_CSTS_RDY, __ATOMIC_RELAXED);
	if (NVME_CC_SHN(cc) && !NVME_CC_SHN(old)) {
		/* nothing to flush: RAM */
		__atomic_fetch_or(&c->csts, NVME_CSTS_SHST_CMPLT, __ATOMIC_RELAXED);
		VLOG("controller %u: shutdown", c->cntlid);
	}
	if (!NVME_CC_SHN(cc) && NVME_CC_SHN(old))
		__atomic_fetch_and(&c->csts, ~(uint32_t)NVME_CSTS_SHST_CMPLT, __ATOMIC_RELAXED);
	nvmet_complete(r, NVME_SC_SUCCESS, 0);
}

static void exec_fabrics(struct nvmet_req *r)
{
	struct nvmet_ctrl *c = r->nq->ctrl;
	uint8_t fctype = ((const uint8_t *)&r->cmd)[4];

	if (fctype == NVMF_FCTYPE_CONNECT) {
		exec_connect(r);
		return;
	}
	if (!c) {
		nvmet_complete(r, NVME_SC_CMD_SEQ_ERROR | NVME_STATUS_DNR, 0);
		return;
	}
	if (r->nq->qid != 0) {   /* properties live on the admin queue */
		nvmet_complete(r, NVME_SC_INVALID_OPCODE | NVME_STATUS_DNR, 0);
		return;
	}
	switch (fctype) {
	case NVMF_FCTYPE_PROP_GET:
		if (xfer_is(r, 0))
			exec_prop_get(r, c);
		break;
	case NVMF_FCTYPE_PROP_SET:
		if (xfer_is(r, 0))
			exec_prop_set(r, c);
		break;
	default:
		nvmet_complete(r, NVME_SC_INVALID_OPCODE | NVME_STATUS_DNR, 0);
		break;
	}
}

/* ---- admin commands ---- */

static void put_str(uint8_t *dst, const char *s, size_t len)   /* space padded */
{
	size_t n = strlen(s);

	memset(dst, ' ', len);
	memcpy(dst, s, n < len ? n : len);
}

/* Data for the host: len bytes, what its SGL holds (xfer_is). */
static void complete_data(struct nvmet_req *r, void *data, uint32_t len, uint32_t lkey)
{
	r->c2h = data;
	r->c2h_len = len;
	r->c2h_lkey = lkey;
	nvmet_complete(r, NVME_SC_SUCCESS, 0);
}

static void identify_ctrl(struct nvmet_ctrl *c, uint8_t *id)
{
	/* in-capsule data is for I/O queues: a discovery controller has none */
	uint32_t icd = c->discovery ? 0 : g_opts.icd_size;


	put_le16(id + 0, 0x1b36);                /* VID (unassigned use: the qemu one, as a test id) */
	put_le16(id + 2, 0x1b36);                /* SSVID */
	put_str(id + 4, c->discovery ? "qsm-nvmet-disc" : "qsm-nvmet-0001", 20);   /* SN */
	put_str(id + 24, "rdma-qsm nvmet (userspace)", 40);                        /* MN */
	put_str(id + 64, "0.1", 8);              /* FR */
	id[72] = 6;                              /* RAB */
	/* CMIC: the subsystem may have more controllers (a host's several, and other hosts'), and
	 * its namespace is shared by them (NMIC): the Linux host takes a namespace it sees through a
	 * second controller only if both say so, and puts the controllers under one multipath head */
	id[76] = c->discovery ? 0 : 1u << 1;
	id[77] = c->discovery ? 0 : NVMET_MDTS;  /* MDTS, in CAP.MPSMIN pages */
	put_le16(id + 78, c->cntlid);            /* CNTLID: the host checks it against Connect's */
	put_le32(id + 80, 0x10300);              /* VER */
	put_le32(id + 92, 0);                    /* OAES: no optional events */
	id[111] = c->discovery ? 2 : 1;          /* CNTRLTYPE: I/O or discovery controller */
	id[258] = 3;                             /* ACL */
	id[259] = NVMET_MAX_AER - 1;             /* AERL */
	id[260] = 1;                             /* FRMW: slot 1 read-only */
	id[261] = 0;                             /* LPA */
	id[263] = 0;                             /* NPSS */
	put_le16(id + 320, NVMET_KAS_MS / 100);  /* KAS: 100 ms units; mandatory for fabrics */
	id[512] = 0x66;                          /* SQES: 64 bytes */
	id[513] = 0x44;                          /* CQES: 16 bytes */
	put_le16(id + 514, NVMET_MAX_DEPTH);     /* MAXCMD */
	put_le32(id + 516, c->discovery ? 0 : 1);   /* NN */
	put_le16(id + 520, 0);                   /* ONCS */
	id[525] = 0;                             /* VWC: none, RAM is as durable as it gets */
	/* SGLS: SGLs, keyed SGL data blocks, and (SAOS) a data block's address as an offset into the
	 * capsule, the bit the kernel host wants before it sends in-capsule data */
	put_le32(id + 536, 1u << 0 | 1u << 2 | (icd ? 1u << 20 : 0));
	snprintf((char *)id + 768, 256, "%s", nqn_of(c));                          /* SUBNQN */
	put_le32(id + 1792, (NVME_SQE_SIZE + icd) / 16);   /* IOCCSZ: an I/O queue's capsule */
	put_le32(id + 1796, NVME_CQE_SIZE / 16);  /* IORCSZ: the CQE, no data in responses */
	put_le16(id + 1800, 0);                  /* ICDOFF: the data right after the SQE */
	id[1802] = 0;                            /* FCATT: dynamic controller model */
	id[1803] = 1;                            /* MSDBD */
}

static uint64_t ns_blocks(void)
{
	return g_opts.ns_size >> NVMET_LBA_SHIFT;
}

static void ns_uuid(uint8_t *u)
{
	/* stable for a subsystem NQN: FNV-1a over it, as an RFC 4122 "version 8" UUID */
	uint64_t h = 1469598103934665603ull, h2;

	for (const char *p = g_opts.subnqn; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	h2 = (h ^ 0x6e766d6574ull) * 1099511628211ull;
	memcpy(u, &h, 8);
	memcpy(u + 8, &h2, 8);
	u[6] = (uint8_t)((u[6] & 0x0f) | 0x80);
	u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
}

static void exec_identify(struct nvmet_req *r, struct nvmet_ctrl *c)
{
	uint8_t cns = le32toh(r->cmd.cdw10) & 0xff, *id = r->buf;
	uint32_t nsid = le32toh(r->cmd.nsid);

	memset(id, 0, NVMET_BUF_SIZE);
	if (c->discovery && cns != NVME_ID_CNS_CTRL)
		goto invalid;
	switch (cns) {
	case NVME_ID_CNS_CTRL:
		identify_ctrl(c, id);
		break;
	case NVME_ID_CNS_NS:
		if (nsid == 0 || nsid == 0xffffffff)
			goto bad_ns;
		if (nsid == 1) {
			put_le64(id + 0, ns_blocks());    /* NSZE */
			put_le64(id + 8, ns_blocks());    /* NCAP */
			put_le64(id + 16, ns_blocks());   /* NUSE */
			id[25] = 0;                       /* NLBAF: one format */
			id[26] = 0;                       /* FLBAS: format 0 */
			id[30] = 1;                       /* NMIC: shared by the controllers */
			id[128 + 2] = NVMET_LBA_SHIFT;    /* LBAF0.LBADS */
		}                                         /* other nsids: inactive, zeros */
		break;
	case NVME_ID_CNS_NS_ACTIVE_LIST:
		if (nsid >= 0xfffffffe)
			goto invalid;
		if (nsid < 1)
			put_le32(id, 1);
		break;
	case NVME_ID_CNS_CS_CTRL:
		/* the NVM command set's controller limits (the host asks for them from 6.x on):
		 * all zero, no limits beyond MDTS */
		if (le32toh(r->cmd.cdw11) >> 24 != NVME_CSI_NVM)
			goto invalid;
		break;
	case NVME_ID_CNS_NS_DESC_LIST:
		if (nsid != 1)
			goto bad_ns;
		id[0] = 3;        /* NIDT: UUID */
		id[1] = 16;       /* NIDL */
		ns_uuid(id + 4);
		break;
	default:
		goto invalid;
	}
	if (xfer_is(r, NVMET_BUF_SIZE))
		complete_data(r, id, NVMET_BUF_SIZE, r->nq->buf_lkey);
	return;
bad_ns:
	nvmet_complete(r, NVME_SC_INVALID_NS | NVME_STATUS_DNR, 0);
	return;
invalid:
	nvmet_complete(r, NVME_SC_INVALID_FIELD | NVME_STATUS_DNR, 0);
}

/* The discovery log page: a header, then one 1024-byte entry, our subsystem on our port. */
static uint32_t discovery_log(uint8_t *page, size_t size)
{
	uint8_t *e = page + 1024;

	if (size < 2048)
		return 0;
	memset(page, 0, 2048);
	put_le64(page + 0, 1);                   /* GENCTR */
	put_le64(page + 8, 1);                   /* NUMREC */
	put_le16(page + 16, 0);                  /* RECFMT */
	e[0] = NVMF_TRTYPE_RDMA;
	e[1] = g_opts.family == AF_INET6 ? NVMF_ADRFAM_IPV6 : NVMF_ADRFAM_IPV4;
	e[2] = NVME_NQN_NVME;                    /* SUBTYPE */
	e[3] = 0;                                /* TREQ: not specified */
	put_le16(e + 4, 1);                      /* PORTID */
	put_le16(e + 6, 0xffff);                 /* CNTLID: dynamic */
	put_le16(e + 8, NVMET_AQ_DEPTH);         /* ASQSZ */
	snprintf((char *)e + 32, 32, "%u", g_opts.port);          /* TRSVCID */
	snprintf((char *)e + 256, 256, "%s", g_opts.subnqn);      /* SUBNQN */
	snprintf((char *)e + 512, 256, "%s", g_opts.addr);        /* TRADDR */
	e[768] = NVMF_RDMA_QPTYPE_CONNECTED;     /* TSAS: RDMA QP type */
	e[769] = NVMF_RDMA_PRTYPE_NOT_SPECIFIED; /* provider type */
	e[770] = NVMF_RDMA_CMS_RDMA_CM;          /* connection management service */
	return 2048;
}

static void exec_get_log_page(struct nvmet_req *r, struct nvmet_ctrl *c)
{
	static _Thread_local uint8_t page[2048];
	uint32_t cdw10 = le32toh(r->cmd.cdw10), cdw11 = le32toh(r->cmd.cdw11);
	uint8_t lid = cdw10 & 0xff;
	uint64_t numd = (uint64_t)(cdw10 >> 16 | (cdw11 & 0xffff) << 16) + 1;
	uint64_t len = numd * 4;
	uint64_t off = le32toh(r->cmd.cdw12) | (uint64_t)le32toh(r->cmd.cdw13) << 32;
	uint32_t plen;

	if (len > NVMET_BUF_SIZE || (off & 3))
		goto invalid;
	switch (lid) {
	case NVME_LOG_DISC:
		if (!c->discovery)
			goto invalid;
		plen = discovery_log(page, sizeof(page));
		break;
	case NVME_LOG_ERROR:
	case NVME_LOG_SMART:
	case NVME_LOG_FW_SLOT:
	case NVME_LOG_CHANGED_NS:
		if (c->discovery)
			goto invalid;
		plen = lid == NVME_LOG_ERROR ? 64 : lid == NVME_LOG_CHANGED_NS ? 4096 : 512;
		memset(page, 0, sizeof(page));   /* no errors, no SMART data, no changes */
		if (plen > sizeof(page))
			plen = sizeof(page);
		break;
	default:
		goto invalid;
	}
	if (off > plen)
		goto invalid;
	if (!xfer_is(r, (uint32_t)len))
		return;
	memset(r->buf, 0, len);
	memcpy(r->buf, page + off, plen - off < len ? plen - off : len);
	complete_data(r, r->buf, (uint32_t)len, r->nq->buf_lkey);
	return;
invalid:
	nvmet_complete(r, NVME_SC_INVALID_FIELD | NVME_STATUS_DNR, 0);
}

static void exec_features(struct nvmet_req *r, struct nvmet_ctrl *c, int set)
{
	uint32_t cdw11 = le32toh(r->cmd.cdw11);
	uint8_t fid = le32toh(r->cmd.cdw10) & 0xff;
	uint64_t result = 0;
	unsigned n;

	if (!xfer_is(r, 0))   /* none of these features has data */
		return;
	switch (fid) {
	case NVME_FEAT_NUM_QUEUES:
		if (c->discovery)
			goto invalid;
		if (set) {
			if ((cdw11 & 0xffff) == 0xffff || (cdw11 >> 16) == 0xffff)
				goto invalid;
			n = (cdw11 & 0xffff) < (cdw11 >> 16) ? (cdw11 & 0xffff) + 1 : (cdw11 >> 16) + 1;
			if (n > g_opts.max_io_queues)
				n = g_opts.max_io_queues;
			pthread_mutex_lock(&ctrl_lock);   /* an I/O queue's Connect reads it */
			c->nr_io_queues = n;
			pthread_mutex_unlock(&ctrl_lock);
		}
		n = c->nr_io_queues ? c->nr_io_queues : g_opts.max_io_queues;
		result = (n - 1) | (n - 1) << 16;
		break;
	case NVME_FEAT_ASYNC_EVENT:
		if (set)
			c->aec = cdw11;
		result = c->aec;
		break;
	case NVME_FEAT_KATO:
		if (set) {
			pthread_mutex_lock(&ctrl_lock);
			c->kato = cdw11;
			ka_arm(c, r->nq->t->ka_now);
			pthread_mutex_unlock(&ctrl_lock);
		}
		result = c->kato;
		break;
	default:
		goto invalid;
	}
	nvmet_complete(r, NVME_SC_SUCCESS, result);
	return;
invalid:
	nvmet_complete(r, NVME_SC_INVALID_FIELD | NVME_STATUS_DNR, 0);
}

static void exec_admin(struct nvmet_req *r, struct nvmet_ctrl *c)
{
	r->nq->t->stats.admin_cmds++;
	switch (r->cmd.opcode) {
	case NVME_ADMIN_IDENTIFY:
		exec_identify(r, c);
		return;
	case NVME_ADMIN_GET_LOG_PAGE:
		exec_get_log_page(r, c);
		return;
	case NVME_ADMIN_SET_FEATURES:
	case NVME_ADMIN_GET_FEATURES:
		exec_features(r, c, r->cmd.opcode == NVME_ADMIN_SET_FEATURES);
		return;
	case NVME_ADMIN_KEEP_ALIVE:
		if (xfer_is(r, 0))
			nvmet_complete(r, NVME_SC_SUCCESS, 0);
		return;
	case NVME_ADMIN_ASYNC_EVENT:
		if (!xfer_is(r, 0))
			return;
		if (c->naer >= NVMET_MAX_AER) {
			nvmet_complete(r, NVME_SC_ASYNC_LIMIT | NVME_STATUS_DNR, 0);
			return;
		}
		/* held until there is an event (never: the namespace never changes) */
		c->aer[c->naer++] = r;
		return;
	case NVME_ADMIN_ABORT:
		if (xfer_is(r, 0))
			nvmet_complete(r, NVME_SC_SUCCESS, 1);   /* not aborted */
		return;
	default:
		nvmet_complete(r, NVME_SC_INVALID_OPCODE | NVME_STATUS_DNR, 0);
		return;
	}
}

/* ---- I/O commands ---- */

static void write_done(struct nvmet_req *r)
{
	nvmet_complete(r, NVME_SC_SUCCESS, 0);
}

static void exec_io(struct nvmet_req *r, struct nvmet_ctrl *c)
{
	const struct nvme_sqe *cmd = &r->cmd;
	uint32_t nsid = le32toh(cmd->nsid);
	uint64_t slba, nlb, len;
	uint16_t st;

	r->nq->t->stats.io_cmds++;
	if (!(LOAD(c->csts) & NVME_CSTS_RDY)) {
		nvmet_complete(r, NVME_SC_CMD_SEQ_ERROR | NVME_STATUS_DNR, 0);
		return;
	}
	if ((st = ctrl_count(c, r)) != NVME_SC_SUCCESS) {
		nvmet_complete(r, st, 0);
		return;
	}
	switch (cmd->opcode) {
	case NVME_CMD_FLUSH:
		r->nq->t->stats.flushes++;
		if (nsid != 1 && nsid != 0xffffffff)
			goto bad_ns;
		if (xfer_is(r, 0))
			nvmet_complete(r, NVME_SC_SUCCESS, 0);
		return;
	case NVME_CMD_READ:
	case NVME_CMD_WRITE:
		if (nsid != 1)
			goto bad_ns;
		slba = le32toh(cmd->cdw10) | (uint64_t)le32toh(cmd->cdw11) << 32;
		nlb = (le32toh(cmd->cdw12) & 0xffff) + 1u;
		len = nlb << NVMET_LBA_SHIFT;
		/* MDTS's own answer (NVMe base, Identify Controller), whatever the namespace */
		if (len > NVMET_MAX_XFER) {
			nvmet_complete(r, NVME_SC_INVALID_FIELD | NVME_STATUS_DNR, 0);
			return;
		}
		/* SLBA + NLB compared without the sum, which a host can make wrap */
		if (slba >= ns_blocks() || nlb > ns_blocks() - slba) {
			nvmet_complete(r, NVME_SC_LBA_RANGE | NVME_STATUS_DNR, 0);
			return;
		}
		if (!xfer_is(r, (uint32_t)len))
			return;
		if ((st = ctrl_hold(c, r, (uint32_t)len)) != NVME_SC_SUCCESS) {
			nvmet_complete(r, st, 0);
			return;
		}
		if (cmd->opcode == NVME_CMD_WRITE) {
			r->nq->t->stats.writes++;
			r->nq->t->stats.bytes_written += len;
			/* the host's data straight into the namespace */
			nvmet_fetch(r, g_ns + (slba << NVMET_LBA_SHIFT), r->nq->ns_lkey, (uint32_t)len,
				    write_done);
		} else {
			r->nq->t->stats.reads++;
			r->nq->t->stats.bytes_read += len;
			complete_data(r, g_ns + (slba << NVMET_LBA_SHIFT), (uint32_t)len, r->nq->ns_lkey);
		}
		return;
	default:
		nvmet_complete(r, NVME_SC_INVALID_OPCODE | NVME_STATUS_DNR, 0);
		return;
	}
bad_ns:
	nvmet_complete(r, NVME_SC_INVALID_NS | NVME_STATUS_DNR, 0);
}

void nvmet_exec(struct nvmet_req *r)
{
	struct nvmet_ctrl *c = r->nq->ctrl;

	if (c)   /* the host is there: its Keep Alive Timer starts again */
		STORE(c->ka_last, r->nq->t->ka_now);
	if (r->cmd.opcode == NVME_FABRICS_COMMAND) {
		exec_fabrics(r);
		return;
	}
	if (!c) {   /* Connect first */
		nvmet_complete(r, NVME_SC_CMD_SEQ_ERROR | NVME_STATUS_DNR, 0);
		return;
	}
	if (r->nq->qid == 0)
		exec_admin(r, c);
	else
		exec_io(r, c);
}
