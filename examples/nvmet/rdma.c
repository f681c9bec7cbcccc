/* qsm-nvmet: the NVMe/RDMA transport as an rdma-qsm passive-queue class.
 *
 *   REQUESTED.enter  validates the NVMe/RDMA CM request (recfmt, qid, hsqsize, hrqsize),
 *                    checks the target's caps (-c controllers, -q I/O queues each) and
 *                    accepts with the REP private data (crqsize), or rejects with the
 *                    NVMe/RDMA reject format and its reason, before any buffer exists;
 *   qp_ready         registers the queue's buffers and posts one receive per queue entry
 *                    before the accept goes out;
 *   completion       the capsule state machine: RECV (a command capsule) -> [RDMA READ of
 *                    host data, or its copy out of the capsule] -> execute -> [RDMA WRITE of
 *                    controller data] -> SEND (the response capsule) -> the request slot is
 *                    free again;
 *   device_removed   drops the queue's MRs (the base class releases the QP and the id);
 *   release          frees everything the queue allocated.  A handler that returns non-zero
 *                    gets no release (the library destroys the queue at once): it frees the
 *                    queue itself before it returns.
 * Every other edge is the base class's: CONNECTED -> ready, losses drain and close. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "nvmet.h"

enum { WR_RECV = 1, WR_SEND, WR_READ, WR_WRITE, WR_SRQ_RECV };
#define WR_ID(kind, idx) ((uint64_t)(idx) << 8 | (kind))
/* an SRQ receive: its device's record (srqs[]) and its buffer there */
#define WR_ID_SRQ(rec, idx) ((uint64_t)(rec) << 40 | (uint64_t)(idx) << 8 | WR_SRQ_RECV)

static uint32_t next_serial;   /* every thread's: atomic */

/* ---- the threads (-T) ----
 * Each known by its ctx, before any of them runs (nvmet_thread_init): a queue finds its thread
 * when its request comes (nq_requested), an SRQ when it is made. */
static struct nvmet_thread *threads[NVMET_MAX_THREADS];
static unsigned nthreads;

int nvmet_thread_init(struct nvmet_thread *t, struct qsm_ctx *ctx)
{
	int r;

	if (nthreads == NVMET_MAX_THREADS)
		return -ENOSPC;
	memset(t, 0, sizeof(*t));
	t->ctx = ctx;
	t->index = nthreads;
	/* a write's data is read into the namespace from the host (QSM_ACCESS_READ_SINK: on
	 * iWARP the read response is a remote write) */
	if ((r = qsm_ctx_reg_pool(ctx, g_ns, g_opts.ns_size, QSM_ACCESS_READ_SINK, &t->ns_pool)) < 0)
		return r;
	threads[nthreads++] = t;
	return 0;
}

static struct nvmet_thread *thread_of(struct qsm_ctx *ctx)
{
	for (unsigned i = 0; i < nthreads; i++)
		if (threads[i]->ctx == ctx)
			return threads[i];
	return NULL;
}

static void nq_link(struct nvmet_queue *nq)
{
	struct nvmet_thread *t = nq->t;

	nq->next = t->queues;
	if (t->queues)
		t->queues->prev = nq;
	t->queues = nq;
}

static void nq_unlink(struct nvmet_queue *nq)
{
	if (nq->prev)
		nq->prev->next = nq->next;
	else if (nq->t->queues == nq)
		nq->t->queues = nq->next;
	if (nq->next)
		nq->next->prev = nq->prev;
	nq->next = nq->prev = NULL;
}

/* Room for one more queue, reserved before it allocates anything: at most -c admin queues and
 * -c x (1 + -q) queues in all, over every thread, so hosts that open queues and never Connect
 * hold bounded memory.  Only queues that get that far count (not one rejected before), until
 * they are freed.  Atomics: a queue reserves on its own thread, and gives back on it. */
static unsigned held_all, held_admin;

static int nq_reserve(struct nvmet_queue *nq)
{
	if (__atomic_add_fetch(&held_all, 1, __ATOMIC_RELAXED) >
	    g_opts.max_ctrls * (1u + g_opts.max_io_queues)) {
		__atomic_sub_fetch(&held_all, 1, __ATOMIC_RELAXED);
		return 0;
	}
	if (nq->qid == 0 && __atomic_add_fetch(&held_admin, 1, __ATOMIC_RELAXED) > g_opts.max_ctrls) {
		__atomic_sub_fetch(&held_admin, 1, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&held_all, 1, __ATOMIC_RELAXED);
		return 0;
	}
	nq->reserved = 1;
	return 1;
}

static void nq_unreserve(struct nvmet_queue *nq)
{
	if (!nq->reserved)
		return;
	nq->reserved = 0;
	__atomic_sub_fetch(&held_all, 1, __ATOMIC_RELAXED);
	if (nq->qid == 0)
		__atomic_sub_fetch(&held_admin, 1, __ATOMIC_RELAXED);
}

unsigned nvmet_queues_live(const struct nvmet_thread *t)
{
	unsigned n = 0;

	for (struct nvmet_queue *nq = t->queues; nq; nq = nq->next)
		n++;
	return n;
}

/* A queue closed from another thread: found on its own by its serial, if still there. */
struct nvmet_close {
	struct nvmet_thread *t;
	uint32_t serial;
};

static void close_call(struct qsm_ctx *ctx, void *arg, int status)
{
	struct nvmet_close *c = arg;

	(void)ctx;
	for (struct nvmet_queue *nq = c->t->queues; status == 0 && nq; nq = nq->next)
		if (nq->serial == c->serial) {
			qsm_conn_disconnect(nq->q);
			break;
		}
	free(c);
}

void nvmet_queue_close(struct nvmet_thread *from, struct nvmet_queue *nq)
{
	struct nvmet_close *c;

	if (nq->t == from) {
		qsm_conn_disconnect(nq->q);
		return;
	}
	if ((c = malloc(sizeof(*c)))) {
		*c = (struct nvmet_close){ .t = nq->t, .serial = nq->serial };
		if (qsm_ctx_call(nq->t->ctx, close_call, c) == 0)
			return;
		free(c);
	}
	/* no memory for the call: the queue stays until its host closes it (or, with -K, the RC
	 * retries find a host gone); say so */
	LOG("queue %u (qid %u): cannot reach its thread to close it", nq->serial, nq->qid);
}

/* ---- the shared receive queue of each device (-Q) ----
 * With -Q N the queues take their command capsules from one SRQ per device (the class's srq,
 * qsm_srq_post_recv(3)) instead of depth receives each: N buffers of 64 + ICD bytes per device,
 * whatever the number of queues, as the kernel's nvmet-rdma and SPDK's target do (1,000 queues
 * of 128 entries would hold 128,000 receives without it).  A device's buffers are allocated
 * and registered (a pool, qsm_ctx_reg_pool(3)) when its first SRQ is made, and kept for the
 * target's life under the device's name.  Each buffer is FREE (ours), POSTED (the device's) or
 * HELD (its capsule's request has it: in-capsule data not yet taken).  The limit is 0, so
 * srq_low is called only when an SRQ is made: a new one (the first QP on the device, or after a
 * removal took the old one and whatever was posted to it): every buffer not HELD goes to it.
 * A buffer is posted back as its request lets it go, on the SRQ of the queue it came in on (the
 * queue's QP is on it); one whose queue closed first is FREE, and goes back with the next
 * buffer any queue of the device posts. */
enum { SRQ_FREE, SRQ_POSTED, SRQ_HELD };

struct nvmet_srq {
	char dev[64];
	uint8_t *bufs;           /* n capsules of size bytes */
	uint8_t *state;          /* SRQ_* per buffer */
	struct qsm_pool *pool;   /* bufs, registered on every device */
	uint32_t n, size, nfree;
	unsigned rec;            /* its index in srqs[], in its receives' wr_ids */
};


/* FREE (or HELD, let go) buffer i to the device's SRQ s; FREE if it cannot go. */
static int srq_post(struct nvmet_srq *rec, struct qsm_srq *s, uint32_t i)
{
	struct qsm_sge sge = { .addr = (uintptr_t)(rec->bufs + (size_t)i * rec->size), .length = rec->size };
	int r;

	if (!s || (r = qsm_pool_srq_keys(rec->pool, s, &sge.lkey, NULL)) < 0 ||
	    (r = qsm_srq_post_recv(s, WR_ID_SRQ(rec->rec, i), &sge, 1)) < 0) {
		if (rec->state[i] != SRQ_FREE)
			rec->nfree++;
		rec->state[i] = SRQ_FREE;
		return s ? r : -ENODEV;
	}
	if (rec->state[i] == SRQ_FREE)
		rec->nfree--;
	rec->state[i] = SRQ_POSTED;
	return 0;
}

static struct nvmet_srq *srq_find(const struct nvmet_thread *t, const char *dev)
{
	for (unsigned i = 0; t && i < t->nsrqs; i++)
		if (!strcmp(t->srqs[i]->dev, dev))
			return t->srqs[i];
	return NULL;
}

/* The record of s's device on its ctx's thread t: found by name, or made (its buffers
 * allocated and registered). */
static struct nvmet_srq *srq_record(struct nvmet_thread *t, struct qsm_srq *s)
{
	const char *dev = qsm_srq_device_name(s);
	struct nvmet_srq *rec = srq_find(t, dev);

	if (rec || !t)
		return rec;
	if (t->nsrqs == NVMET_MAX_SRQS || !(rec = calloc(1, sizeof(*rec))))
		return NULL;
	snprintf(rec->dev, sizeof(rec->dev), "%s", dev);
	rec->n = g_opts.srq_depth;
	rec->size = NVME_SQE_SIZE + g_opts.icd_size;
	rec->nfree = rec->n;
	rec->state = calloc(rec->n, 1);
	if (posix_memalign((void **)&rec->bufs, 4096, (size_t)rec->n * rec->size))
		rec->bufs = NULL;
	if (!rec->state || !rec->bufs ||
	    qsm_ctx_reg_pool(qsm_srq_ctx(s), rec->bufs, (size_t)rec->n * rec->size,
			     QSM_ACCESS_LOCAL_WRITE, &rec->pool) < 0) {
		free(rec->state);
		free(rec->bufs);
		free(rec);
		return NULL;
	}
	rec->rec = t->nsrqs;
	t->srqs[t->nsrqs++] = rec;
	LOG("%s: a shared receive queue of %u capsules of %u bytes", dev, rec->n, rec->size);
	return rec;
}

/* A new SRQ on a device (limit 0: srq_low runs only then): every buffer not HELD goes to it;
 * what was POSTED went with the old one. */
static void nq_srq_low(struct qsm_srq *s)
{
	struct nvmet_thread *t = thread_of(qsm_srq_ctx(s));
	struct nvmet_srq *rec = srq_record(t, s);
	uint32_t posted = 0;

	if (!rec) {
		LOG("%s: no buffers for its shared receive queue: its queues will receive nothing",
		    qsm_srq_device_name(s));
		return;
	}
	t->stats.srqs_made++;
	for (uint32_t i = 0; i < rec->n; i++) {
		if (rec->state[i] == SRQ_HELD)
			continue;
		if (rec->state[i] == SRQ_POSTED) {   /* the old SRQ's: gone with it */
			rec->state[i] = SRQ_FREE;
			rec->nfree++;
		}
		posted += srq_post(rec, s, i) == 0;
	}
	VLOG("%s: %u receives posted to its new shared receive queue", rec->dev, posted);
}

/* An SRQ receive came in on nq: its buffer is HELD, or NULL for a wr_id of no buffer. */
static uint8_t *srq_take(const struct nvmet_thread *t, uint64_t wr_id, struct nvmet_srq **recp,
			 uint32_t *idxp)
{
	uint64_t ri = wr_id >> 40;
	uint32_t i = (uint32_t)(wr_id >> 8) & 0xffffffffu;
	struct nvmet_srq *rec;

	if (ri >= t->nsrqs || i >= (rec = t->srqs[ri])->n || rec->state[i] != SRQ_POSTED)
		return NULL;
	rec->state[i] = SRQ_HELD;
	*recp = rec;
	*idxp = i;
	return rec->bufs + (size_t)i * rec->size;
}

/* A HELD buffer let go by a request of nq: back to the SRQ of nq's QP (none: FREE), with any
 * FREE buffers of the device, whose queues closed while holding them. */
static int srq_release(struct nvmet_queue *nq, struct nvmet_srq *rec, uint32_t i)
{
	struct qsm_srq *s = nq->q ? qsm_conn_srq(nq->q) : NULL;
	int r = srq_post(rec, s, i);

	for (uint32_t j = 0; s && rec->nfree && j < rec->n; j++)
		if (rec->state[j] == SRQ_FREE)
			srq_post(rec, s, j);
	return r;
}

void nvmet_thread_fini(struct nvmet_thread *t)
{
	for (unsigned i = 0; i < t->nsrqs; i++) {
		free(t->srqs[i]->state);
		free(t->srqs[i]->bufs);
		free(t->srqs[i]);
		t->srqs[i] = NULL;
	}
	t->nsrqs = 0;
	for (unsigned i = 0; i < nthreads; i++)
		if (threads[i] == t) {
			threads[i] = threads[--nthreads];
			break;
		}
}

void nvmet_tally(const struct nvmet_thread *t, struct nvmet_tally *sum)
{
	uint64_t held = 0, holding = 0;

	_Static_assert(sizeof(struct nvmet_stats) % sizeof(uint64_t) == 0, "counters only");
	nvmet_sum_counters(&sum->s, &t->stats, sizeof(t->stats));
	sum->open += nvmet_queues_live(t);
	for (const struct nvmet_queue *nq = t->queues; nq; nq = nq->next) {
		for (uint32_t i = 0; nq->reqs && i < nq->nreqs; i++) {
			sum->in_flight += nq->reqs[i].busy && !nq->reqs[i].answered;
			holding += nq->reqs[i].busy && nq->reqs[i].recv >= 0 && nq->reqs[i].srq;
		}
		for (uint32_t k = 0; k < nq->nwait; k++)   /* capsules waiting hold theirs */
			holding += nq->wait[(nq->wait_head + k) % nq->depth].srq != NULL;
	}
	/* -Q: every SRQ buffer HELD is a request's, and FREE ones are counted */
	for (unsigned i = 0; i < t->nsrqs; i++) {
		const struct nvmet_srq *rec = t->srqs[i];
		uint32_t nfree = 0;

		for (uint32_t j = 0; j < rec->n; j++) {
			held += rec->state[j] == SRQ_HELD;
			nfree += rec->state[j] == SRQ_FREE;
		}
		sum->srq_ok &= nfree == rec->nfree;
	}
	sum->srq_ok &= held == holding;
	sum->held += held;
	sum->holding += holding;
}

int nvmet_identities(const struct nvmet_tally *sum, char *buf, size_t len)
{
	const struct nvmet_stats *st = &sum->s;
	uint64_t in_flight = sum->in_flight, holding = sum->holding, held = sum->held, open = sum->open;
	uint64_t created, freed;
	unsigned ctrls = nvmet_ctrls_live();
	int q_ok, c_ok, cmd_ok, srq_ok = sum->srq_ok;

	nvmet_ctrls_counted(&created, &freed);
	q_ok = st->queues_requested == st->queues_released + st->queues_dropped + open;
	c_ok = created == freed + ctrls;
	cmd_ok = st->cmds == st->answered + st->unanswered + in_flight;
	len -= (size_t)snprintf(buf, len, "shared receive buffers held %" PRIu64 " == by requests %"
				PRIu64 " (free ones counted): %s; ", held, holding,
				srq_ok ? "holds" : "BROKEN");
	buf += strlen(buf);
	snprintf(buf, len, "queues requested %" PRIu64 " == released %" PRIu64 " + dropped %" PRIu64
		 " + open %" PRIu64 ": %s; controllers created %" PRIu64 " == freed %" PRIu64 " + live %u: %s; "
		 "commands %" PRIu64 " == answered %" PRIu64 " + unanswered at close %" PRIu64
		 " + in flight %" PRIu64 ": %s", st->queues_requested, st->queues_released,
		 st->queues_dropped, open, q_ok ? "holds" : "BROKEN", created,
		 freed, ctrls, c_ok ? "holds" : "BROKEN", st->cmds, st->answered,
		 st->unanswered, in_flight, cmd_ok ? "holds" : "BROKEN");
	return q_ok && c_ok && cmd_ok && srq_ok;
}

/* nq's gathered responses let go, never posted (the host hears of the queue's end instead),
 * and nq off that list. */
static void pend_drop(struct nvmet_queue *nq)
{
	for (struct nvmet_queue **p = &nq->t->dirty; nq->npend && *p; p = &(*p)->dirty_next) {
		if (*p == nq) {
			*p = nq->dirty_next;
			break;
		}
	}
	nq->npend = 0;
	free(nq->pend);
	free(nq->pend_sge);
	nq->pend = NULL;
	nq->pend_sge = NULL;
}

/* What the queue allocated itself (the MR handles go with the queue). */
static void nq_free(struct nvmet_queue *nq)
{
	nq_unlink(nq);
	nq_unreserve(nq);
	for (uint32_t i = 0; nq->reqs && i < nq->nreqs; i++) {
		struct nvmet_req *r = &nq->reqs[i];

		nq->t->stats.unanswered += r->busy && !r->answered;
		if (r->busy && r->recv >= 0 && r->srq) {   /* its queue is gone: FREE */
			r->srq->state[r->recv] = SRQ_FREE;
			r->srq->nfree++;
		}
	}
	for (; nq->nwait; nq->nwait--, nq->wait_head = (nq->wait_head + 1) % nq->depth) {
		struct nvmet_capsule *w = &nq->wait[nq->wait_head];

		if (w->srq) {   /* a capsule that waited: its SRQ buffer FREE */
			w->srq->state[w->idx] = SRQ_FREE;
			w->srq->nfree++;
		}
	}
	pend_drop(nq);
	free(nq->wait);
	nq->wait = NULL;
	free(nq->recv_bufs);
	free(nq->rsps);
	free(nq->bufs);
	free(nq->reqs);
	free(nq->free_list);
	nq->recv_bufs = NULL;
	nq->rsps = NULL;
	nq->bufs = NULL;
	nq->reqs = NULL;
	nq->free_list = NULL;
}

/* At exit: qsm_ctx_free() frees the queues (and their private areas) without callbacks, and
 * their QPs may use the buffers until then.  So: take the buffers out of the queues first,
 * free them once the ctx is gone. */
static void **exit_bufs;
static size_t exit_nbufs;

void nvmet_queues_take_all(struct nvmet_thread *t)
{
	size_t n = exit_nbufs;
	void **grown;

	for (struct nvmet_queue *nq = t->queues; nq; nq = nq->next)
		n += 6;
	grown = realloc(exit_bufs, (n ? n : 1) * sizeof(void *));
	if (grown)
		exit_bufs = grown;
	while (t->queues) {
		struct nvmet_queue *nq = t->queues;

		if (grown) {
			exit_bufs[exit_nbufs++] = nq->recv_bufs;
			exit_bufs[exit_nbufs++] = nq->rsps;
			exit_bufs[exit_nbufs++] = nq->bufs;
			exit_bufs[exit_nbufs++] = nq->reqs;
			exit_bufs[exit_nbufs++] = nq->free_list;
			exit_bufs[exit_nbufs++] = nq->wait;
		}
		pend_drop(nq);   /* ours alone (a post copies them), never posted now */
		nq_unlink(nq);
		nq_unreserve(nq);
	}
}

void nvmet_queues_free_all(void)
{
	for (size_t i = 0; i < exit_nbufs; i++)
		free(exit_bufs[i]);
	free(exit_bufs);
	exit_bufs = NULL;
	exit_nbufs = 0;
}

static int nq_alloc(struct nvmet_queue *nq)
{
	/* a slot per command the host may have outstanding (depth), and one per response sent
	 * whose send completion we have not seen yet while the host already sends the next
	 * command: at most what its receive queue holds (hrqsize), at most depth */
	nq->nreqs = nq->depth + (nq->hrqsize < nq->depth ? nq->hrqsize : nq->depth);
	/* a data buffer per slot on the admin queue (Connect data, Identify, log pages); an I/O
	 * queue moves data straight to and from the namespace and needs one, for its Connect
	 * (one Connect at a time: exec_connect) */
	nq->nbufs = nq->qid ? 1 : nq->nreqs;
	/* in-capsule data on I/O queues only: the NVMe/RDMA admin capsule is the SQE (the kernel
	 * host sizes it so, and its target gives the admin queue no in-capsule pages) */
	nq->icd = nq->qid ? g_opts.icd_size : 0;
	/* on an SRQ (-Q) the capsules come into the device's buffers */
	nq->recv_bufs = g_opts.srq_depth ? NULL : calloc(nq->depth, NVME_SQE_SIZE + nq->icd);
	nq->rsps = calloc(nq->nreqs, sizeof(*nq->rsps));
	if (posix_memalign((void **)&nq->bufs, 4096, (size_t)nq->nbufs * NVMET_BUF_SIZE))
		nq->bufs = NULL;
	nq->reqs = calloc(nq->nreqs, sizeof(*nq->reqs));
	nq->free_list = calloc(nq->nreqs, sizeof(*nq->free_list));
	nq->wait = calloc(nq->depth, sizeof(*nq->wait));
	nq->pend = calloc(2 * (size_t)nq->nreqs, sizeof(*nq->pend));
	nq->pend_sge = calloc(2 * (size_t)nq->nreqs, sizeof(*nq->pend_sge));
	if ((!nq->recv_bufs && !g_opts.srq_depth) || !nq->rsps || !nq->bufs || !nq->reqs ||
	    !nq->free_list || !nq->wait || !nq->pend || !nq->pend_sge)
		return -ENOMEM;
	for (uint32_t i = 0; i < nq->nreqs; i++) {
		struct nvmet_req *r = &nq->reqs[i];

		r->nq = nq;
		r->idx = i;
		r->rsp = &nq->rsps[i];
		r->buf = nq->bufs + (size_t)(i % nq->nbufs) * NVMET_BUF_SIZE;
		nq->free_list[i] = nq->nreqs - 1 - i;
	}
	nq->nfree = nq->nreqs;
	nq->rd_out = 0;
	nq->rd_head = nq->rd_tail = -1;
	return 0;
}

static struct nvmet_req *req_get(struct nvmet_queue *nq)
{
	struct nvmet_req *r;

	if (!nq->nfree)
		return NULL;
	r = &nq->reqs[nq->free_list[--nq->nfree]];
	r->busy = 1;
	r->answered = 0;
	r->c2h = NULL;
	r->c2h_len = 0;
	r->then = NULL;
	r->icd = NULL;
	r->recv = -1;
	r->srq = NULL;
	return r;
}

static void req_put(struct nvmet_req *r)
{
	struct nvmet_queue *nq = r->nq;

	if (!r->busy)
		return;
	/* a command given up unanswered: its queue is closing (nq_fail, or no longer connected) */
	nq->t->stats.unanswered += !r->answered;
	nvmet_req_done(r);
	r->busy = 0;
	nq->free_list[nq->nfree++] = r->idx;
}

static uint8_t *recv_buf(const struct nvmet_queue *nq, uint32_t i)
{
	return nq->recv_bufs + (size_t)i * (NVME_SQE_SIZE + nq->icd);
}

static int post_recv(struct nvmet_queue *nq, uint32_t i)
{
	struct qsm_sge s = { .addr = (uintptr_t)recv_buf(nq, i), .length = NVME_SQE_SIZE + nq->icd,
			     .lkey = qsm_mr_lkey(nq->recv_mr) };

	return qsm_conn_post_recv(nq->q, WR_ID(WR_RECV, i), &s, 1);
}

/* The queue cannot go on (a protocol error, or no slot): disconnect; the machine drains
 * and closes, and release frees it. */
static void nq_fail(struct nvmet_queue *nq, const char *why)
{
	nq->t->stats.protocol_errors++;
	LOG("queue %u (qid %u): %s: disconnecting", nq->serial, nq->qid, why);
	qsm_conn_disconnect(nq->q);
}

/* ---- the capsule state machine ---- */

/* The receive buffer r's in-capsule data came in is free again: posted before r's response goes
 * out, so that the host's next capsule, which that response allows, finds it. */
static int recv_release(struct nvmet_req *r)
{
	struct nvmet_queue *nq = r->nq;
	int rc;

	if (r->recv < 0)
		return 0;
	rc = r->srq ? srq_release(nq, r->srq, (uint32_t)r->recv) : post_recv(nq, (uint32_t)r->recv);
	r->recv = -1;
	r->srq = NULL;
	r->icd = NULL;
	/* no QP any more (the queue is closing), or its device being removed: nothing to post */
	if (rc < 0 && rc != -ENOTCONN && rc != -ENODEV) {
		nq_fail(nq, "cannot repost a receive");
		return rc;
	}
	return 0;
}

void nvmet_complete(struct nvmet_req *r, uint16_t status, uint64_t result)
{
	struct nvmet_queue *nq = r->nq;
	struct qsm_sge *sge;
	struct qsm_wr *wr;

	r->answered = 1;
	nq->t->stats.answered++;
	recv_release(r);
	if (status)
		nq->t->stats.errors++;
	if (status && g_opts.verbose)
		LOG("queue %u (qid %u): cid %u opcode 0x%02x cdw10 0x%08x: status 0x%03x", nq->serial,
		    nq->qid, le16toh(r->cmd.cid), r->cmd.opcode, le32toh(r->cmd.cdw10), status & 0x7ff);
	memset(r->rsp, 0, sizeof(*r->rsp));
	r->rsp->result = htole64(result);
	r->rsp->sqhd = htole16(nq->sqhd);
	r->rsp->sqid = htole16(nq->qid);
	r->rsp->cid = r->cmd.cid;
	r->rsp->status = htole16((uint16_t)(status << 1));
	/* A read's data and its response, in that order (RC ordering places the data before the
	 * response that follows it), gathered with the other responses of this dispatch and
	 * posted with them after it.  The WRITE is unsignaled: the response's completion covers
	 * it. */
	if (!nq->npend) {   /* its first of this dispatch: on the list */
		nq->dirty_next = nq->t->dirty;
		nq->t->dirty = nq;
	}
	wr = &nq->pend[nq->npend];
	sge = &nq->pend_sge[nq->npend];
	if (!status && r->c2h_len) {
		*sge = (struct qsm_sge){ .addr = (uintptr_t)r->c2h, .length = r->c2h_len, .lkey = r->c2h_lkey };
		*wr++ = (struct qsm_wr){ .wr_id = WR_ID(WR_WRITE, r->idx), .opcode = QSM_WR_RDMA_WRITE,
					 .sg_list = sge++, .num_sge = 1, .remote_addr = r->raddr,
					 .rkey = r->rkey };
		nq->npend++;
	}
	*sge = (struct qsm_sge){ .addr = (uintptr_t)r->rsp, .length = sizeof(*r->rsp),
				 .lkey = qsm_mr_lkey(nq->rsp_mr) };
	*wr = (struct qsm_wr){ .wr_id = WR_ID(WR_SEND, r->idx), .opcode = QSM_WR_SEND, .sg_list = sge,
			       .num_sge = 1, .flags = QSM_POST_SIGNALED };
	/* The host asked to have its rkey invalidated with the response (the keyed descriptor's
	 * subtype): whatever the status, as the kernel's nvmet-rdma does, since the host waits for
	 * the response either way and otherwise posts a LOCAL_INV of its own before it may reuse
	 * the registration. */
	if (r->invalidate) {
		wr->opcode = QSM_WR_SEND_WITH_INV;
		wr->imm_data = r->rkey;
		nq->t->stats.remote_invalidates++;
	}
	nq->npend++;
}

/* nq's gathered responses, posted as one list.  What was not posted never completes to us: a
 * response that did not go frees its request (an unsignaled WRITE posted before it completes
 * with nothing). */
static void flush_queue(struct nvmet_queue *nq)
{
	int n = (int)nq->npend, posted = 0, rc;

	nq->npend = 0;
	rc = qsm_conn_post_list(nq->q, nq->pend, n, &posted);
	if (rc >= 0)
		return;
	for (int k = posted; k < n; k++)
		if (nq->pend[k].opcode != QSM_WR_RDMA_WRITE)
			req_put(&nq->reqs[nq->pend[k].wr_id >> 8]);
	if (rc != -ENOTCONN)
		nq_fail(nq, posted < n && nq->pend[posted].opcode == QSM_WR_RDMA_WRITE ?
				    "cannot post RDMA WRITE" : "cannot post the response");
}

int nvmet_flush_posts(struct nvmet_thread *t)
{
	int n = 0;

	while (t->dirty) {
		struct nvmet_queue *nq = t->dirty;

		t->dirty = nq->dirty_next;
		n += (int)nq->npend;
		flush_queue(nq);
	}
	return n;
}

static void post_read(struct nvmet_req *r)
{
	struct nvmet_queue *nq = r->nq;
	struct qsm_sge s = { .addr = (uintptr_t)r->rd_dst, .length = r->rd_len, .lkey = r->rd_lkey };
	int rc;

	rc = qsm_conn_post_read(nq->q, WR_ID(WR_READ, r->idx), &s, 1, r->raddr, r->rkey,
				QSM_POST_SIGNALED);
	if (rc < 0) {
		req_put(r);
		if (rc != -ENOTCONN)
			nq_fail(nq, "cannot post RDMA READ");
		return;
	}
	nq->rd_out++;
}

void nvmet_fetch(struct nvmet_req *r, void *dst, uint32_t lkey, uint32_t len,
		 void (*then)(struct nvmet_req *r))
{
	struct nvmet_queue *nq = r->nq;

	if (r->icd) {
		/* in the capsule: one copy (at most -I bytes), no READ and no slot of the window */
		nq->t->stats.in_capsule++;
		memcpy(dst, r->icd, len);
		recv_release(r);
		then(r);
		return;
	}
	r->then = then;
	r->rd_dst = dst;
	r->rd_lkey = lkey;
	r->rd_len = len;
	if (nq->rd_out < nq->rd_max && nq->rd_head < 0) {
		post_read(r);
		return;
	}
	/* the window is full: wait, in order, for a READ of the queue's to complete */
	nq->t->stats.reads_waited++;
	r->rd_next = -1;
	if (nq->rd_tail >= 0)
		nq->reqs[nq->rd_tail].rd_next = (int32_t)r->idx;
	else
		nq->rd_head = (int32_t)r->idx;
	nq->rd_tail = (int32_t)r->idx;
}

/* A READ of the queue's completed: the first waiting READ takes its place. */
static void read_done(struct nvmet_queue *nq)
{
	nq->rd_out--;
	while (nq->rd_head >= 0 && nq->rd_out < nq->rd_max) {
		struct nvmet_req *w = &nq->reqs[nq->rd_head];

		nq->rd_head = w->rd_next;
		if (nq->rd_head < 0)
			nq->rd_tail = -1;
		post_read(w);
	}
}

/* Whether the command moves data from the host to the controller: the data transfer bits of its
 * opcode, of its fctype for a Fabrics command (Connect: yes; Property Get and Set: no). */
static bool host_to_ctrl(const struct nvme_sqe *cmd)
{
	uint8_t op = cmd->opcode == NVME_FABRICS_COMMAND ? ((const uint8_t *)cmd)[4] : cmd->opcode;

	return (op & 3) == 1;
}

/* The capsule's flags and DPTR, as the NVMe/RDMA binding allows them: no fused commands, PSDT
 * 01b (SGLs; the kernel host sets it on every capsule), and one descriptor: a keyed SGL data
 * block (address, or address with remote invalidation) for data moved by RDMA, at most MDTS; or
 * a data block with an offset into the capsule's own data, the icd_len bytes that came after the
 * SQE (at most the queue's -I; none on the admin queue).  The statuses are the NVMe base spec's,
 * told apart as SPDK does: an offset beyond the data, a length beyond what is there or beyond
 * MDTS, a descriptor of another type or subtype; in-capsule data for a command that moves none
 * to the controller is Invalid Field, as the kernel's nvmet answers (a capsule carries data one
 * way only: a response capsule is the CQE, IORCSZ 1).  Whether the length is the command's own
 * is the command's check. */
static uint16_t parse_sgl(struct nvmet_req *r, const uint8_t *capsule, uint32_t icd_len)
{
	const struct nvme_sgl *sgl = &r->cmd.sgl;
	unsigned type = sgl->type >> 4, subtype = sgl->type & 0xf;
	uint64_t addr = le64toh(sgl->addr);

	r->raddr = 0;
	r->rkey = 0;
	r->rlen = 0;
	r->invalidate = 0;
	if ((r->cmd.flags & NVME_CMD_FUSE_MASK) ||
	    (r->cmd.flags & NVME_CMD_PSDT_MASK) != NVME_CMD_PSDT_SGL)
		return NVME_SC_INVALID_FIELD | NVME_STATUS_DNR;
	if (type == NVME_SGL_KEYED_DATA &&
	    (subtype == NVME_SGL_SUB_ADDRESS || subtype == NVME_SGL_SUB_INVALIDATE)) {
		if (get_le24(sgl->length) > NVMET_MAX_XFER)
			return NVME_SC_SGL_INVALID_LENGTH | NVME_STATUS_DNR;
		r->raddr = addr;
		r->rlen = get_le24(sgl->length);
		r->rkey = get_le32b(sgl->key);
		r->invalidate = subtype == NVME_SGL_SUB_INVALIDATE;
		return 0;
	}
	if (type == NVME_SGL_DATA_BLOCK && subtype == NVME_SGL_SUB_OFFSET) {
		/* an unkeyed descriptor's length is 32 bits: bytes 8..11 */
		uint32_t len = get_le32b(sgl->length);

		if (addr > icd_len)
			return NVME_SC_SGL_INVALID_OFFSET | NVME_STATUS_DNR;
		if (len > icd_len - addr)
			return NVME_SC_SGL_INVALID_LENGTH | NVME_STATUS_DNR;
		if (len && !host_to_ctrl(&r->cmd))
			return NVME_SC_INVALID_FIELD | NVME_STATUS_DNR;
		r->rlen = len;
		if (len)
			r->icd = capsule + NVME_SQE_SIZE + addr;
		return 0;
	}
	return NVME_SC_SGL_INVALID_TYPE | NVME_STATUS_DNR;
}

/* Runs the capsule in receive buffer i (the queue's own, or the device's SRQ's: rec) with
 * request r. */
static void capsule_run(struct nvmet_queue *nq, struct nvmet_req *r, const uint8_t *buf,
			uint32_t len, struct nvmet_srq *rec, uint32_t i)
{
	uint32_t icd_len;
	uint16_t st;

	memcpy(&r->cmd, buf, NVME_SQE_SIZE);
	if (++nq->sqhd == nq->depth)
		nq->sqhd = 0;
	nq->t->stats.cmds++;
	/* what came after the SQE: never more than the receive holds, but say so */
	icd_len = len - NVME_SQE_SIZE;
	if (icd_len > nq->icd)
		icd_len = nq->icd;
	st = parse_sgl(r, buf, icd_len);
	/* the receive buffer is free again unless the command's data is in it: post it before
	 * running the command; else the request holds it until the data is taken (nvmet_fetch) or
	 * the command answered, and at the latest until it is run */
	r->recv = (int32_t)i;
	r->srq = rec;
	if (!r->icd && recv_release(r) < 0) {
		req_put(r);
		return;
	}
	if (st != 0)
		nvmet_complete(r, st, 0);
	else
		nvmet_exec(r);
	if (r->busy && r->recv >= 0)
		recv_release(r);
}

/* A command capsule of len bytes in receive buffer i (rec: of the device's SRQ).  Its request
 * slot may still be taken: a slot is free again only once its response's SEND completed, and
 * the host, which has its response already, may send the next command before that completion
 * is taken (with an SRQ nothing slows it: no receive of the queue's own runs out).  Such a
 * capsule waits, in order, holding its buffer, until a SEND completion frees a slot
 * (capsules_run), as SPDK's target queues a request short of resources (the kernel's allocates
 * one more).  More waiting than the queue's depth is a host beyond its submission queue. */
static int on_capsule(struct nvmet_queue *nq, const uint8_t *buf, uint32_t len,
		      struct nvmet_srq *rec, uint32_t i)
{
	struct nvmet_capsule *w;
	struct nvmet_req *r;

	if (len < NVME_SQE_SIZE || (!(r = nq->nwait ? NULL : req_get(nq)) && nq->nwait == nq->depth)) {
		if (rec)   /* the buffer back to the SRQ: the other queues need it */
			srq_release(nq, rec, i);
		nq_fail(nq, len < NVME_SQE_SIZE ? "short command capsule"
						 : "more commands than its submission queue holds");
		return 0;
	}
	if (r) {
		capsule_run(nq, r, buf, len, rec, i);
		return 0;
	}
	w = &nq->wait[(nq->wait_head + nq->nwait++) % nq->depth];
	*w = (struct nvmet_capsule){ .buf = buf, .len = len, .srq = rec, .idx = i };
	nq->t->stats.capsules_waited++;
	return 0;
}

/* Slots free again: the capsules that waited for one, in order. */
static void capsules_run(struct nvmet_queue *nq)
{
	while (nq->nwait && nq->nfree) {
		struct nvmet_capsule w = nq->wait[nq->wait_head];

		nq->wait_head = (nq->wait_head + 1) % nq->depth;
		nq->nwait--;
		capsule_run(nq, req_get(nq), w.buf, w.len, w.srq, w.idx);
	}
}

static int nq_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct nvmet_queue *nq = qsm_conn_priv(q);
	unsigned kind = wc->wr_id & 0xff;
	uint32_t idx = (uint32_t)(wc->wr_id >> 8);

	struct nvmet_srq *rec;
	const uint8_t *buf;

	if (wc->status != QSM_WC_SUCCESS) {
		/* an SRQ receive the QP flushed: its buffer goes back for the device's other queues */
		if (kind == WR_SRQ_RECV && srq_take(nq->t, wc->wr_id, &rec, &idx))
			srq_release(nq, rec, idx);
		/* the QP is in ERR: the queue's machine takes the loss (WC_ERROR) and drains */
		if (wc->status != QSM_WC_WR_FLUSH_ERR) {
			nq->t->stats.wc_errors++;
			LOG("queue %u (qid %u): completion error %d (kind %u)", nq->serial, nq->qid,
			    wc->status, kind);
		}
		return 0;
	}
	switch (kind) {
	case WR_RECV:
		return idx < nq->depth ? on_capsule(nq, recv_buf(nq, idx), wc->byte_len, NULL, idx) : 0;
	case WR_SRQ_RECV:
		buf = srq_take(nq->t, wc->wr_id, &rec, &idx);
		return buf ? on_capsule(nq, buf, wc->byte_len, rec, idx) : 0;
	case WR_READ:
		read_done(nq);
		if (idx < nq->nreqs && nq->reqs[idx].busy && nq->reqs[idx].then)
			nq->reqs[idx].then(&nq->reqs[idx]);
		return 0;
	case WR_SEND:
		if (idx < nq->nreqs)
			req_put(&nq->reqs[idx]);
		capsules_run(nq);
		return 0;
	default:
		return 0;
	}
}

/* ---- the queue's states ---- */

/* The library refused the decision (its FIFO could not grow): the handler's non-zero return
 * destroys the queue and release is never called for it (qsm_class(3)), so free it here. */
static int nq_undecided(struct nvmet_queue *nq, const char *what, int r)
{
	LOG("queue %u: cannot %s the connection request: %s", nq->serial, what, strerror(-r));
	nq->t->stats.queues_dropped++;
	nq_free(nq);
	return 1;
}

static int nq_reject(struct qsm_conn *q, struct nvmet_queue *nq, uint16_t sts)
{
	struct nvme_rdma_cm_rej rej = { .recfmt = 0, .sts = htole16(sts) };
	int r;

	nq->t->stats.queues_rejected++;
	LOG("queue %u: rejecting the connection request: NVMe/RDMA status %u", nq->serial, sts);
	r = qsm_conn_reject(q, &rej, sizeof(rej));
	return r < 0 ? nq_undecided(nq, "reject", r) : 0;
}

/* REQUESTED.enter: the request handler. */
static int nq_requested(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct nvmet_queue *nq = qsm_conn_priv(q);
	struct nvme_rdma_cm_req req;
	struct nvme_rdma_cm_rep rep;
	unsigned depth;
	int r;

	nq->q = q;
	nq->t = thread_of(qsm_conn_ctx(q));
	nq->serial = __atomic_add_fetch(&next_serial, 1, __ATOMIC_RELAXED);
	if (!nq->t) {   /* a ctx nvmet_thread_init() never saw: a bug of the target's own */
		LOG("queue %u: on a ctx of no thread of the target's: dropped", nq->serial);
		return 1;
	}
	nq_link(nq);
	nq->t->stats.queues_requested++;
	if (!ev->private_data || ev->private_data_len < sizeof(req))
		return nq_reject(q, nq, NVME_RDMA_CM_INVALID_LEN);
	memcpy(&req, ev->private_data, sizeof(req));
	if (le16toh(req.recfmt) != 0)
		return nq_reject(q, nq, NVME_RDMA_CM_INVALID_RECFMT);
	nq->qid = le16toh(req.qid);
	if (nq->qid > g_opts.max_io_queues)
		return nq_reject(q, nq, NVME_RDMA_CM_INVALID_QID);
	depth = le16toh(req.hsqsize) + 1u;
	if (depth < 2 || depth > (nq->qid ? NVMET_MAX_DEPTH : NVMET_AQ_DEPTH))
		return nq_reject(q, nq, NVME_RDMA_CM_INVALID_HSQSIZE);
	nq->hrqsize = le16toh(req.hrqsize);
	if (nq->hrqsize < 1)
		return nq_reject(q, nq, NVME_RDMA_CM_INVALID_HRQSIZE);
	nq->depth = (uint16_t)depth;
	if (!nq_reserve(nq))
		return nq_reject(q, nq, NVME_RDMA_CM_NO_RSC);
	if (nq_alloc(nq) < 0)
		return nq_reject(q, nq, NVME_RDMA_CM_NO_RSC);
	/* its QP as large as its host asked for, not the class's largest: per request slot at
	 * most an RDMA transfer and a SEND in flight, and its depth of receives (none on -Q) */
	r = qsm_conn_set_qp_depth(q, 2u * nq->nreqs + 8, g_opts.srq_depth ? 0 : depth);
	if (r < 0)
		return nq_undecided(nq, "size the QP of", r);
	VLOG("queue %u: request qid %u hsqsize %u hrqsize %u: accepting, crqsize %u", nq->serial,
	     nq->qid, depth - 1, nq->hrqsize, depth);
	memset(&rep, 0, sizeof(rep));
	rep.crqsize = htole16((uint16_t)depth);
	r = qsm_conn_accept(q, &rep, sizeof(rep));
	return r < 0 ? nq_undecided(nq, "accept", r) : 0;
}

/* The QP exists, the accept is not sent yet: register, then a receive per queue entry. */
static int nq_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct nvmet_queue *nq = qsm_conn_priv(q);
	int r;

	(void)ev;
	/* the READs in flight: what the accept offers (the host's responder resources, at most
	 * the device's), at most -D */
	r = qsm_conn_read_depth(q);
	nq->rd_max = r > 0 ? (uint32_t)r : 1;
	if (g_opts.max_reads && g_opts.max_reads < nq->rd_max)
		nq->rd_max = g_opts.max_reads;
	VLOG("queue %u (qid %u): at most %u RDMA READs in flight", nq->serial, nq->qid, nq->rd_max);
	/* on an SRQ: the device's SRQ exists (made with this QP) with its buffers (nq_srq_low;
	 * if they could not be had then, once more now: else this queue could receive nothing) */
	if (g_opts.srq_depth) {
		struct qsm_srq *s = qsm_conn_srq(q);

		if (s && !srq_find(nq->t, qsm_srq_device_name(s)))
			nq_srq_low(s);
		if (!s || !srq_find(nq->t, qsm_srq_device_name(s))) {
			r = s ? -ENOMEM : -ENODEV;
			goto fail;
		}
	}
	if ((nq->recv_bufs &&
	     (r = qsm_conn_reg_mr(q, nq->recv_bufs, (size_t)nq->depth * (NVME_SQE_SIZE + nq->icd),
				  QSM_ACCESS_LOCAL_WRITE, &nq->recv_mr)) < 0) ||
	    (r = qsm_conn_reg_mr(q, nq->rsps, (size_t)nq->nreqs * sizeof(*nq->rsps), 0, &nq->rsp_mr)) < 0 ||
	    (r = qsm_conn_reg_mr(q, nq->bufs, (size_t)nq->nbufs * NVMET_BUF_SIZE,
				 QSM_ACCESS_LOCAL_WRITE, &nq->buf_mr)) < 0)
		goto fail;
	nq->buf_lkey = qsm_mr_lkey(nq->buf_mr);
	/* I/O queues move data straight between the namespace and the host's buffers: the
	 * namespace is a pool, registered once on this device for every queue on it */
	if (nq->qid && (r = qsm_pool_keys(nq->t->ns_pool, q, &nq->ns_lkey, NULL)) < 0)
		goto fail;
	for (uint32_t i = 0; nq->recv_bufs && i < nq->depth; i++)
		if ((r = post_recv(nq, i)) < 0)
			goto fail;
	nq->t->stats.queues_accepted++;
	return 0;
fail:
	/* non-zero destroys the queue before the accept is sent, without release */
	LOG("queue %u (qid %u): cannot set up its buffers: %s", nq->serial, nq->qid, strerror(-r));
	nq->t->stats.queues_dropped++;
	nq_free(nq);
	return 1;
}

static int nq_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct nvmet_queue *nq = qsm_conn_priv(q);

	(void)ev;
	nq->t->stats.queues_live++;
	VLOG("queue %u (qid %u): LIVE", nq->serial, nq->qid);
	return 0;
}

static int nq_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct nvmet_queue *nq = qsm_conn_priv(q);
	struct qsm_mr **mrs[] = { &nq->recv_mr, &nq->rsp_mr, &nq->buf_mr };

	(void)ev;
	nq->t->stats.device_removals++;
	LOG("queue %u (qid %u): device removed, dropping its memory registrations", nq->serial, nq->qid);
	for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
		if (*mrs[i]) {
			qsm_mr_dereg(*mrs[i]);
			*mrs[i] = NULL;
		}
	return 0;
}

static int nq_unexpected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct nvmet_queue *nq = qsm_conn_priv(q);

	LOG("queue %u (qid %u): unexpected event %s in %s", nq->serial, nq->qid,
	    qsm_event_name(ev->event), qsm_conn_state_name(q));
	return 0;
}

static void nq_release(struct qsm_conn *q)
{
	struct nvmet_queue *nq = qsm_conn_priv(q);

	if (nq->ctrl)
		nvmet_queue_detach(nq);
	if (nq->reqs)   /* accepted, not only requested */
		VLOG("queue %u (qid %u): closed", nq->serial, nq->qid);
	nq->t->stats.queues_released++;
	nq_free(nq);
}

const struct qsm_class nvmet_queue_class = {
	.name = "nvmet-rdma",
	.priv_size = sizeof(struct nvmet_queue),
	.passive = {
		[QSM_ACCEPT_REQUESTED] = { .enter = nq_requested },
		[QSM_ACCEPT_LIVE] = { .enter = nq_live },
	},
	.qp_ready = nq_qp_ready,
	.completion = nq_completion,
	.device_removed = nq_device_removed,
	.unexpected = nq_unexpected,
	.release = nq_release,
	/* the largest queue's; each queue's own from its request (nq_requested) */
	.qp = { .max_send_wr = 4 * NVMET_MAX_DEPTH + 8, .max_recv_wr = NVMET_MAX_DEPTH },
};

/* -Q: the same queues, their capsules received on the device's SRQ (srq.max_wr set at start,
 * before the listener exists; limit 0: srq_low only when an SRQ is made) */
static struct qsm_class nvmet_queue_srq_class = {
	.name = "nvmet-rdma-srq",
	.super = &nvmet_queue_class,
	.srq_low = nq_srq_low,
};

const struct qsm_class *nvmet_class(void)
{
	if (!g_opts.srq_depth)
		return &nvmet_queue_class;
	nvmet_queue_srq_class.srq = (struct qsm_srq_caps){ .max_wr = g_opts.srq_depth, .max_sge = 1 };
	return &nvmet_queue_srq_class;
}
