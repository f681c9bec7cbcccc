/* rdma-qsm: the data path of the rdmacm fabric: QPs on the CQs of a device's pool, MRs, posts, completions
 * matched to their WRs by tag, the drain marker, and the flushes the provider does not make. */
#include <stdlib.h>
#include <string.h>

#include "fabric/rdmacm/rdmacm.h"

#define MARKER_BIT (1ull << 63)   /* wr_id of a drain marker: the bit and the QP's serial */
#define TAG_RECV (1ull << 62)     /* wr_id of a posted WR: recv bit, QP serial (30 bits), seq */
#define TAG_SERIAL_MASK 0x3fffffffull

/* A registered memory region: holds its device's resources (PD) like a device_get(). */
struct qsm_fmr {
	struct ibv_mr *mr;
	struct qsm_fdev *dev;
};

/*
 * One WR posted on a QP, kept in post order per work queue until it completes.  The wr_id
 * given to verbs is a tag (work queue, QP serial, sequence number), never a pointer, so a
 * completion left in a CQ of the pool by a destroyed QP (whose number may be reused) or one for
 * a WR whose flush the backend already synthesised is recognised and dropped.
 */
struct wr_rec {
	struct qsm_pending done;         /* first: the record is its own completion (pending.h) */
	struct qsm_list node;            /* in qsm_fid.wq[] */
	uint64_t wr_id;                  /* the ULP's */
	uint32_t seq;
	uint8_t opcode;                  /* enum qsm_wr_opcode */
	bool signaled;
	bool hw;                         /* on the QP; else posted after ERR: flushed by us */
};

static void qp_unhash(struct qsm_fid *id)
{
	qsm_list_del(&id->qp_node);
}

static struct qsm_fid *qp_lookup(struct qsm_fdev *d, uint32_t qp_num)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &d->qps[qp_num % QP_BUCKETS]) {
		struct qsm_fid *id = qsm_container_of(pos, struct qsm_fid, qp_node);

		if (id->qp_num == qp_num)
			return id;
	}
	return NULL;
}

/* Every ibv_wc_status by name (STYLE: foreign enums mapped explicitly); one this build's
 * rdma-core does not define is GENERAL_ERR, counted in wc_unknown and shown by
 * QSM_RDMACM_STATS. */
static enum qsm_wc_status wc_status(struct rc_fabric *f, enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS: return QSM_WC_SUCCESS;
	case IBV_WC_LOC_LEN_ERR: return QSM_WC_LOC_LEN_ERR;
	case IBV_WC_LOC_QP_OP_ERR: return QSM_WC_LOC_QP_OP_ERR;
	case IBV_WC_LOC_EEC_OP_ERR: return QSM_WC_LOC_EEC_OP_ERR;
	case IBV_WC_LOC_PROT_ERR: return QSM_WC_LOC_PROT_ERR;
	case IBV_WC_WR_FLUSH_ERR: return QSM_WC_WR_FLUSH_ERR;
	case IBV_WC_MW_BIND_ERR: return QSM_WC_MW_BIND_ERR;
	case IBV_WC_BAD_RESP_ERR: return QSM_WC_BAD_RESP_ERR;
	case IBV_WC_LOC_ACCESS_ERR: return QSM_WC_LOC_ACCESS_ERR;
	case IBV_WC_REM_INV_REQ_ERR: return QSM_WC_REM_INV_REQ_ERR;
	case IBV_WC_REM_ACCESS_ERR: return QSM_WC_REM_ACCESS_ERR;
	case IBV_WC_REM_OP_ERR: return QSM_WC_REM_OP_ERR;
	case IBV_WC_RETRY_EXC_ERR: return QSM_WC_RETRY_EXC_ERR;
	case IBV_WC_RNR_RETRY_EXC_ERR: return QSM_WC_RNR_RETRY_EXC_ERR;
	case IBV_WC_LOC_RDD_VIOL_ERR: return QSM_WC_LOC_RDD_VIOL_ERR;
	case IBV_WC_REM_INV_RD_REQ_ERR: return QSM_WC_REM_INV_RD_REQ_ERR;
	case IBV_WC_REM_ABORT_ERR: return QSM_WC_REM_ABORT_ERR;
	case IBV_WC_INV_EECN_ERR: return QSM_WC_INV_EECN_ERR;
	case IBV_WC_INV_EEC_STATE_ERR: return QSM_WC_INV_EEC_STATE_ERR;
	case IBV_WC_FATAL_ERR: return QSM_WC_FATAL_ERR;
	case IBV_WC_RESP_TIMEOUT_ERR: return QSM_WC_RESP_TIMEOUT_ERR;
	case IBV_WC_GENERAL_ERR: return QSM_WC_GENERAL_ERR;
	/* tag matching: SRQs with TM only, never on the fabric's QPs */
	case IBV_WC_TM_ERR:
	case IBV_WC_TM_RNDV_INCOMPLETE:
		break;
	}
	f->wc_unknown++;
	return QSM_WC_GENERAL_ERR;
}

static uint64_t wr_tag(const struct qsm_fid *id, int wq, uint32_t seq)
{
	return ((id->qp_serial & TAG_SERIAL_MASK) << 32) | (wq == WQ_RECV ? TAG_RECV : 0) | seq;
}

static void rec_unlink(struct qsm_fid *id, int wq, struct wr_rec *r)
{
	qsm_list_del(&r->node);
	if (r->hw)
		id->wq_hw[wq]--;
}

/* A WR that completes without a completion (an unsignaled send, or its QP is gone). */
static void rec_free(struct qsm_fid *id, int wq, struct wr_rec *r)
{
	rec_unlink(id, wq, r);
	free(r);
}

/* The WR's completion, carried by its own record: no memory needed, so none is ever lost.
 * `wc` has what the device said beyond the status (byte_len, opcode of a receive, imm). */
static void rec_complete_wc(struct qsm_fid *id, int wq, struct wr_rec *r, struct qsm_fabric_wc *wc)
{
	wc->wr_id = r->wr_id;
	if (wc->status != QSM_WC_SUCCESS) {
		wc->byte_len = wc->imm_data = wc->invalidated_rkey = wc->wc_flags = 0;
		wc->opcode = (enum qsm_wr_opcode)r->opcode;
	}
	rec_unlink(id, wq, r);
	qsm_pending_complete(&id->fab->pq, &r->done, id, wc);
}

static void rec_complete(struct qsm_fid *id, int wq, struct wr_rec *r, enum qsm_wc_status status,
			 uint32_t byte_len)
{
	rec_complete_wc(id, wq, r, &(struct qsm_fabric_wc){ .status = status, .byte_len = byte_len,
							    .opcode = (enum qsm_wr_opcode)r->opcode });
}

/* A successful receive: what arrived (a SEND or a WRITE_WITH_IMM), imm data, invalidation. */
static struct qsm_fabric_wc recv_wc(const struct ibv_wc *wc)
{
	struct qsm_fabric_wc w = { .status = QSM_WC_SUCCESS, .byte_len = wc->byte_len,
				   .opcode = wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM ?
					     QSM_WR_RECV_RDMA_WITH_IMM : QSM_WR_RECV };

	if (wc->wc_flags & IBV_WC_WITH_IMM) {
		w.wc_flags |= QSM_WC_WITH_IMM;
		w.imm_data = wc->imm_data;   /* carried as is, as the sender set it */
	}
	if (wc->wc_flags & IBV_WC_WITH_INV) {
		w.wc_flags |= QSM_WC_WITH_INV;
		w.invalidated_rkey = wc->invalidated_rkey;
	}
	return w;
}

/* Unsignaled sends before `upto` (NULL: all) completed silently: a send queue completes in
 * order, so a later WR's completion (or the drain marker's) frees their slots. */
static void sends_retire_unsignaled(struct qsm_fid *id, struct wr_rec *upto)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &id->wq[WQ_SEND]) {
		struct wr_rec *c = qsm_container_of(pos, struct wr_rec, node);

		if (c == upto)
			break;
		if (c->hw && !c->signaled)
			rec_free(id, WQ_SEND, c);
	}
}

/* A WR the QP will never complete (posted after ERR, or not flushed): its flush, from us. */
static void rec_flush(struct qsm_fid *id, int wq, struct wr_rec *r)
{
	id->fab->wc_synth++;
	rec_complete(id, wq, r, QSM_WC_WR_FLUSH_ERR, 0);
}

/* WRs posted after ERR that nothing on the QP precedes any more: flushed now, in order. */
void qsm_rc_wq_flush_heads(struct qsm_fid *id)
{
	for (int wq = WQ_SEND; wq <= WQ_RECV; wq++)
		while (!qsm_list_empty(&id->wq[wq])) {
			struct wr_rec *r = qsm_container_of(id->wq[wq].next, struct wr_rec, node);

			if (r->hw)
				break;
			rec_flush(id, wq, r);
		}
}

/* The drain marker completed: whatever is still outstanding will never complete on rxe (it
 * may not flush receives) or completes late; flush it all now, before DRAINED. */
static void wq_flush_all(struct qsm_fid *id)
{
	for (int wq = WQ_SEND; wq <= WQ_RECV; wq++)
		while (!qsm_list_empty(&id->wq[wq]))
			rec_flush(id, wq, qsm_container_of(id->wq[wq].next, struct wr_rec, node));
}

/* The QP is gone with its WRs: no completion for them (the contract). */
static void wq_discard(struct qsm_fid *id)
{
	for (int wq = WQ_SEND; wq <= WQ_RECV; wq++)
		while (!qsm_list_empty(&id->wq[wq]))
			rec_free(id, wq, qsm_container_of(id->wq[wq].next, struct wr_rec, node));
}

static void wc_take(struct qsm_fdev *d, const struct ibv_wc *wc)
{
	struct qsm_fid *id = qp_lookup(d, wc->qp_num);
	enum qsm_wc_status st;
	struct wr_rec *r = NULL;
	struct qsm_list *pos, *tmp;
	uint32_t seq;
	int wq;

	if (wc->wr_id & MARKER_BIT) {
		if (id && id->draining && id->qp_serial == (wc->wr_id & ~MARKER_BIT)) {
			id->draining = false;
			id->qp_err = true;
			sends_retire_unsignaled(id, NULL);
			wq_flush_all(id);
			pending_push(d->fab, QSM_EV_DRAINED, 0, id, NULL, false);
		}
		return;
	}
	/* a destroyed QP's leftovers (its number may be reused), or a WR flushed by us already */
	if (!id || ((wc->wr_id >> 32) & TAG_SERIAL_MASK) != (id->qp_serial & TAG_SERIAL_MASK)) {
		d->fab->wc_stale++;
		return;
	}
	wq = wc->wr_id & TAG_RECV ? WQ_RECV : WQ_SEND;
	seq = (uint32_t)wc->wr_id;
	qsm_list_each(pos, tmp, &id->wq[wq]) {
		struct wr_rec *c = qsm_container_of(pos, struct wr_rec, node);

		if (c->seq == seq) {
			r = c;
			break;
		}
	}
	if (!r || !r->hw) {
		d->fab->wc_stale++;
		return;
	}
	if (wq == WQ_SEND)
		sends_retire_unsignaled(id, r);
	st = wc_status(d->fab, wc->status);
	if (st == QSM_WC_SUCCESS)
		d->fab->wc_ok++;
	else if (st == QSM_WC_WR_FLUSH_ERR)
		d->fab->wc_flush++;
	else
		d->fab->wc_err++;
	if (st != QSM_WC_SUCCESS)
		id->qp_err = true;   /* an error completion moves an RC QP to ERR */
	/* wc->opcode is undefined in error completions: the WR's own is reported */
	if (wq == WQ_RECV && st == QSM_WC_SUCCESS) {
		struct qsm_fabric_wc w = recv_wc(wc);

		rec_complete_wc(id, wq, r, &w);
	} else if (wq == WQ_RECV || r->signaled || st != QSM_WC_SUCCESS)
		rec_complete(id, wq, r, st, wc->byte_len);
	else
		rec_free(id, wq, r);
	if (id->qp_err)
		qsm_rc_wq_flush_heads(id);
}

void qsm_rc_harvest_completions(struct rc_fabric *f, bool from_channel)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);

		if (d->cc)
			qsm_rc_cq_harvest(d, from_channel, wc_take);
	}
}

static void send_lists_free(struct qsm_fid *id)
{
	free(id->swr);
	free(id->ssge);
	id->swr = NULL;
	id->ssge = NULL;
}

int qsm_rc_create_qp(struct qsm_fid *id, const struct qsm_fabric_qp_attr *a)
{
	struct qsm_fdev *d;
	struct ibv_qp_init_attr init;
	struct rc_cq *cq;
	int r, wrs;

	if (!id || !a)
		return -EINVAL;
	if (qsm_rc_fid_has_qp(id))
		return -EEXIST;
	qsm_rc_fid_attach(id);
	d = id->dev;
	if (!d)
		return -EINVAL;
	if (!d->present)
		return -ENODEV;
	r = qsm_rc_dev_get_resources(d, id->cm);
	if (r < 0)
		return r;
	/* A list's WRs, built where no post allocates; at least one, for a cap of 0. */
	id->swr = calloc(a->max_send_wr + 1, sizeof(*id->swr));
	id->ssge = calloc((size_t)(a->max_send_wr + 1) * QSM_FABRIC_MAX_SGE, sizeof(*id->ssge));
	if (!id->swr || !id->ssge) {
		r = -ENOMEM;
		goto fail;
	}
	/* One more of each for the drain marker. */
	wrs = (int)a->max_send_wr + 1 + (int)a->max_recv_wr + 1;
	cq = qsm_rc_cq_get(d, wrs, &r);
	if (!cq)
		goto fail;
	memset(&init, 0, sizeof(init));
	init.qp_context = id;
	init.send_cq = cq->cq;
	init.recv_cq = cq->cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = a->max_send_wr + 1;
	init.cap.max_recv_wr = a->max_recv_wr + 1;
	init.cap.max_send_sge = a->max_send_sge ? a->max_send_sge : 1;
	init.cap.max_recv_sge = a->max_recv_sge ? a->max_recv_sge : 1;
	init.cap.max_inline_data = a->max_inline_data;
	if (rdma_create_qp(id->cm, d->pd, &init) < 0) {
		r = errno_or(ENOMEM);
		qsm_rc_cq_put(d, cq, wrs);
		goto fail;
	}
	id->draining = id->fatal_sent = id->qp_err = id->qp_rts = false;
	id->wq_cap[WQ_SEND] = a->max_send_wr;
	id->wq_cap[WQ_RECV] = a->max_recv_wr;
	id->inline_cap = a->max_inline_data;
	id->qp_serial = ++id->fab->next_qp_serial;
	id->qp_num = id->cm->qp->qp_num;
	id->cq = cq;
	id->qp_wrs = wrs;
	d->nqps++;
	qsm_list_add_tail(&d->qps[id->qp_num % QP_BUCKETS], &id->qp_node);
	return 0;
fail:
	send_lists_free(id);
	qsm_rc_dev_settle(d);
	return r;
}

void qsm_rc_destroy_qp(struct qsm_fid *id)
{
	struct qsm_fdev *d;

	if (!id || !qsm_rc_fid_has_qp(id))
		return;
	d = id->dev;
	rdma_destroy_qp(id->cm);
	qp_unhash(id);
	wq_discard(id);
	id->draining = false;
	id->qp_err = id->qp_rts = false;
	qsm_pending_drop(&id->fab->pq, id, NULL);
	qsm_rc_cq_put(d, id->cq, id->qp_wrs);
	id->cq = NULL;
	send_lists_free(id);
	d->nqps--;
	qsm_rc_dev_settle(d);
}

int qsm_rc_drain(struct qsm_fid *id)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	struct ibv_qp *qp;
	uint64_t tag;
	int r;

	if (!id || !qsm_rc_fid_has_qp(id))
		return -EINVAL;
	qp = id->cm->qp;
	tag = MARKER_BIT | id->qp_serial;
	r = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
	if (r)
		return -r;
	id->qp_err = true;
	/* The marker flushes behind everything posted before it: a send first, because the
	 * send queue flushes on every provider; a receive if the send queue is full. */
	{
		struct ibv_send_wr swr = { .wr_id = tag, .opcode = IBV_WR_SEND,
					   .send_flags = IBV_SEND_SIGNALED }, *bad_s;
		struct ibv_recv_wr rwr = { .wr_id = tag }, *bad_r;

		r = ibv_post_send(qp, &swr, &bad_s);
		if (r)
			r = ibv_post_recv(qp, &rwr, &bad_r);
	}
	if (r)
		return -r;
	id->draining = true;
	return 0;
}

int qsm_rc_reg_mr(struct qsm_fdev *d, void *addr, size_t len, int access, struct qsm_fmr **ret,
		  uint32_t *lkey, uint32_t *rkey)
{
	struct qsm_fmr *m;
	int ibv_access = 0, r;

	if (!d || !addr || !len || !ret || !lkey || !rkey ||
	    (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ)))
		return -EINVAL;
	if (!d->present)
		return -ENODEV;
	if (access & QSM_ACCESS_LOCAL_WRITE)
		ibv_access |= IBV_ACCESS_LOCAL_WRITE;
	if (access & QSM_ACCESS_REMOTE_WRITE)
		ibv_access |= IBV_ACCESS_REMOTE_WRITE;
	if (access & QSM_ACCESS_REMOTE_READ)
		ibv_access |= IBV_ACCESS_REMOTE_READ;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	/* the PD: created with the first QP or MR on the device */
	r = qsm_rc_dev_get_resources(d, NULL);
	if (r < 0) {
		free(m);
		return r;
	}
	errno = 0;
	m->mr = ibv_reg_mr(d->pd, addr, len, ibv_access);
	if (!m->mr) {
		r = errno_or(ENOMEM);
		free(m);
		qsm_rc_dev_settle(d);
		return r;
	}
	m->dev = d;
	d->nmrs++;
	*lkey = m->mr->lkey;
	*rkey = m->mr->rkey;
	*ret = m;
	return 0;
}

void qsm_rc_dereg_mr(struct qsm_fmr *m)
{
	struct qsm_fdev *d;

	if (!m)
		return;
	d = m->dev;
	ibv_dereg_mr(m->mr);
	free(m);
	d->nmrs--;
	qsm_rc_dev_settle(d);
}

static int sges_ok(const struct qsm_fabric_sge *sg, int n)
{
	return n >= 0 && n <= QSM_FABRIC_MAX_SGE && (!n || sg);
}

static void sges_to_ibv(struct ibv_sge *sge, const struct qsm_fabric_sge *sg, int n)
{
	for (int i = 0; i < n; i++)
		sge[i] = (struct ibv_sge){ .addr = sg[i].addr, .length = sg[i].length, .lkey = sg[i].lkey };
}

static struct wr_rec *rec_new(struct qsm_fid *id, uint64_t wr_id, enum qsm_wr_opcode op,
			      bool signaled)
{
	/* the completion's memory too, now: the post fails if memory is short, never the WC */
	struct wr_rec *r = qsm_pending_alloc(sizeof(*r));

	if (!r)
		return NULL;
	qsm_list_init(&r->node);
	r->wr_id = wr_id;
	r->opcode = (uint8_t)op;
	r->signaled = signaled;
	r->seq = id->next_seq++;
	return r;
}

/* What verbs answered the post of `r`: kept in post order if the WR is on the QP, else freed. */
static int rec_posted(struct qsm_fid *id, int wq, struct wr_rec *r, int ret)
{
	if (ret) {
		free(r);
		return ret > 0 ? -ret : -EINVAL;
	}
	r->hw = true;
	id->fab->posts++;
	id->wq_hw[wq]++;
	qsm_list_add_tail(&id->wq[wq], &r->node);
	return 0;
}

/* Posted to a QP known to be in ERR: not given to the QP (rxe 6.1 may never flush a receive
 * posted in ERR), flushed by us, behind what the work queue still holds. */
static void post_flushed_rec(struct qsm_fid *id, int wq, struct wr_rec *r)
{
	if (qsm_list_empty(&id->wq[wq])) {
		id->fab->wc_synth++;
		rec_complete(id, wq, r, QSM_WC_WR_FLUSH_ERR, 0);
		return;
	}
	qsm_list_add_tail(&id->wq[wq], &r->node);
}

static int post_flushed(struct qsm_fid *id, int wq, uint64_t wr_id, enum qsm_wr_opcode op)
{
	struct wr_rec *r = rec_new(id, wr_id, op, true);

	if (!r)
		return -ENOMEM;
	post_flushed_rec(id, wq, r);
	return 0;
}

static int send_opcode(enum qsm_wr_opcode op)
{
	switch (op) {
	case QSM_WR_SEND: return IBV_WR_SEND;
	case QSM_WR_RDMA_WRITE: return IBV_WR_RDMA_WRITE;
	case QSM_WR_RDMA_READ: return IBV_WR_RDMA_READ;
	case QSM_WR_SEND_WITH_IMM: return IBV_WR_SEND_WITH_IMM;
	case QSM_WR_RDMA_WRITE_WITH_IMM: return IBV_WR_RDMA_WRITE_WITH_IMM;
	default: return -1;
	}
}

static uint64_t sges_len(const struct qsm_fabric_sge *sg, int n)
{
	uint64_t len = 0;

	for (int i = 0; i < n; i++)
		len += sg[i].length;
	return len;
}

/* What is wrong with the WR itself: the call fails, nothing of the list is posted. */
static bool wr_ok(const struct qsm_fid *id, const struct qsm_fabric_wr *wr)
{
	if (send_opcode(wr->opcode) < 0 || !sges_ok(wr->sg_list, wr->num_sge) ||
	    (wr->flags & ~(QSM_POST_SIGNALED | QSM_POST_INLINE)))
		return false;
	if (wr->flags & QSM_POST_INLINE)
		return wr->opcode != QSM_WR_RDMA_READ &&
		       sges_len(wr->sg_list, wr->num_sge) <= id->inline_cap;
	return true;
}

/* Records for n WRs on `list`, or none and false if memory is short. */
static bool recs_new(struct qsm_fid *id, const struct qsm_fabric_wr *wr, int n, struct qsm_list *list)
{
	qsm_list_init(list);
	for (int i = 0; i < n; i++) {
		struct wr_rec *r = rec_new(id, wr[i].wr_id, wr[i].opcode,
					   id->qp_err || (wr[i].flags & QSM_POST_SIGNALED));

		if (!r) {
			struct qsm_list *pos, *tmp;

			qsm_list_each(pos, tmp, list) {
				qsm_list_del(pos);
				free(qsm_container_of(pos, struct wr_rec, node));
			}
			return false;
		}
		qsm_list_add_tail(list, &r->node);
	}
	return true;
}

static void swr_fill(struct qsm_fid *id, int i, const struct qsm_fabric_wr *wr, uint32_t seq, bool last)
{
	struct ibv_send_wr *s = &id->swr[i];
	struct ibv_sge *sge = &id->ssge[(size_t)i * QSM_FABRIC_MAX_SGE];

	memset(s, 0, sizeof(*s));
	sges_to_ibv(sge, wr->sg_list, wr->num_sge);
	s->wr_id = wr_tag(id, WQ_SEND, seq);
	s->next = last ? NULL : &id->swr[i + 1];
	s->sg_list = wr->num_sge ? sge : NULL;
	s->num_sge = wr->num_sge;
	s->opcode = (enum ibv_wr_opcode)send_opcode(wr->opcode);
	if (wr->flags & QSM_POST_SIGNALED)
		s->send_flags |= IBV_SEND_SIGNALED;
	if (wr->flags & QSM_POST_INLINE)
		s->send_flags |= IBV_SEND_INLINE;   /* the provider copies the data now, no lkey */
	if (wr->opcode == QSM_WR_SEND_WITH_IMM || wr->opcode == QSM_WR_RDMA_WRITE_WITH_IMM)
		s->imm_data = wr->imm_data;         /* carried as is: the receiver sees this value */
	if (wr->opcode != QSM_WR_SEND && wr->opcode != QSM_WR_SEND_WITH_IMM) {
		s->wr.rdma.remote_addr = wr->remote_addr;
		s->wr.rdma.rkey = wr->rkey;
	}
}

/*
 * The list wr[0..n) with one doorbell.  Checked whole first (-EINVAL, -ENOBUFS, -ENOMEM post
 * none); then one ibv_post_send of the chain, whose bad_wr may leave a prefix posted.
 */
int qsm_rc_post_send(struct qsm_fid *id, const struct qsm_fabric_wr *wr, int n, int *posted)
{
	struct ibv_send_wr *bad = NULL;
	struct qsm_list list, *pos, *tmp;
	int i = 0, k, ret;

	if (posted)
		*posted = 0;
	if (!id || n < 0 || (n && !wr) || !qsm_rc_fid_has_qp(id))
		return -EINVAL;
	for (k = 0; k < n; k++)
		if (!wr_ok(id, &wr[k]))
			return -EINVAL;
	/* Refused here, not by verbs: rxe's provider queues the WR in the shared send queue
	 * before the kernel refuses the doorbell (-EINVAL before RTS), and the QP sends it once
	 * it reaches RTS -- a failed post that takes effect later, and a completion nobody
	 * expects (a peer's receive taken by it). */
	if (!id->qp_err && !id->qp_rts)
		return -EINVAL;
	/* the last slot is the drain marker's */
	if (!id->qp_err && (unsigned)n > id->wq_cap[WQ_SEND] - id->wq_hw[WQ_SEND])
		return -ENOBUFS;
	if (!n)
		return 0;
	if (!recs_new(id, wr, n, &list))
		return -ENOMEM;
	if (id->qp_err) {
		/* not given to the QP (see post_flushed): flushed by us, in order */
		qsm_list_each(pos, tmp, &list) {
			struct wr_rec *r = qsm_container_of(pos, struct wr_rec, node);

			qsm_list_del(&r->node);
			post_flushed_rec(id, WQ_SEND, r);
		}
		if (posted)
			*posted = n;
		return 0;
	}
	qsm_list_each(pos, tmp, &list) {
		swr_fill(id, i, &wr[i], qsm_container_of(pos, struct wr_rec, node)->seq, i == n - 1);
		i++;
	}
	ret = ibv_post_send(id->cm->qp, id->swr, &bad);
	k = ret ? (int)(bad - id->swr) : n;
	if (ret && (k < 0 || k > n))
		k = 0;
	i = 0;
	qsm_list_each(pos, tmp, &list) {
		struct wr_rec *r = qsm_container_of(pos, struct wr_rec, node);

		qsm_list_del(&r->node);
		rec_posted(id, WQ_SEND, r, i++ < k ? 0 : ret);
	}
	if (posted)
		*posted = k;
	return ret ? (ret > 0 ? -ret : -EINVAL) : 0;
}

int qsm_rc_post_recv(struct qsm_fid *id, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
		     int num_sge)
{
	struct ibv_sge sge[QSM_FABRIC_MAX_SGE];
	struct ibv_recv_wr rwr, *bad;
	struct wr_rec *r;

	if (!id || !qsm_rc_fid_has_qp(id) || !sges_ok(sg_list, num_sge))
		return -EINVAL;
	if (id->qp_err)
		return post_flushed(id, WQ_RECV, wr_id, QSM_WR_RECV);
	if (id->wq_hw[WQ_RECV] >= id->wq_cap[WQ_RECV])
		return -ENOBUFS;
	r = rec_new(id, wr_id, QSM_WR_RECV, true);
	if (!r)
		return -ENOMEM;
	sges_to_ibv(sge, sg_list, num_sge);
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = wr_tag(id, WQ_RECV, r->seq);
	rwr.sg_list = num_sge ? sge : NULL;
	rwr.num_sge = num_sge;
	return rec_posted(id, WQ_RECV, r, ibv_post_recv(id->cm->qp, &rwr, &bad));
}

