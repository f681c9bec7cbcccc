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

/* The WR's completion, carried by its own record: no memory needed, so none is ever lost. */
static void rec_complete(struct qsm_fid *id, int wq, struct wr_rec *r, enum qsm_wc_status status,
			 uint32_t byte_len)
{
	struct qsm_fabric_wc wc = { .wr_id = r->wr_id, .status = status,
				    .opcode = (enum qsm_wr_opcode)r->opcode,
				    .byte_len = status == QSM_WC_SUCCESS ? byte_len : 0 };

	rec_unlink(id, wq, r);
	qsm_pending_complete(&id->fab->pq, &r->done, id, &wc);
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
	/* Unsignaled sends before it completed silently (a send queue completes in order). */
	if (wq == WQ_SEND)
		qsm_list_each(pos, tmp, &id->wq[wq]) {
			struct wr_rec *c = qsm_container_of(pos, struct wr_rec, node);

			if (c == r)
				break;
			if (c->hw && !c->signaled)
				rec_free(id, wq, c);
		}
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
	if (wq == WQ_RECV || r->signaled || st != QSM_WC_SUCCESS)
		rec_complete(id, wq, r, st, wc->byte_len);
	else
		rec_free(id, wq, r);
	if (id->qp_err)
		qsm_rc_wq_flush_heads(id);
}

void qsm_rc_harvest_completions(struct rc_fabric *f)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);

		if (d->cc)
			qsm_rc_cq_harvest(d, wc_take);
	}
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
	id->qp_serial = ++id->fab->next_qp_serial;
	id->qp_num = id->cm->qp->qp_num;
	id->cq = cq;
	id->qp_wrs = wrs;
	d->nqps++;
	qsm_list_add_tail(&d->qps[id->qp_num % QP_BUCKETS], &id->qp_node);
	return 0;
fail:
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
static int post_flushed(struct qsm_fid *id, int wq, uint64_t wr_id, enum qsm_wr_opcode op)
{
	struct wr_rec *r = rec_new(id, wr_id, op, true);

	if (!r)
		return -ENOMEM;
	if (qsm_list_empty(&id->wq[wq])) {
		id->fab->wc_synth++;
		rec_complete(id, wq, r, QSM_WC_WR_FLUSH_ERR, 0);
		return 0;
	}
	qsm_list_add_tail(&id->wq[wq], &r->node);
	return 0;
}

int qsm_rc_post_send(struct qsm_fid *id, const struct qsm_fabric_wr *wr)
{
	struct ibv_sge sge[QSM_FABRIC_MAX_SGE];
	struct ibv_send_wr swr, *bad;
	struct wr_rec *r;

	if (!id || !wr || !qsm_rc_fid_has_qp(id) || !sges_ok(wr->sg_list, wr->num_sge))
		return -EINVAL;
	memset(&swr, 0, sizeof(swr));
	switch (wr->opcode) {
	case QSM_WR_SEND:
		swr.opcode = IBV_WR_SEND;
		break;
	case QSM_WR_RDMA_WRITE:
		swr.opcode = IBV_WR_RDMA_WRITE;
		break;
	case QSM_WR_RDMA_READ:
		swr.opcode = IBV_WR_RDMA_READ;
		break;
	default:
		return -EINVAL;
	}
	if (id->qp_err)
		return post_flushed(id, WQ_SEND, wr->wr_id, wr->opcode);
	/* Refused here, not by verbs: rxe's provider queues the WR in the shared send queue
	 * before the kernel refuses the doorbell (-EINVAL before RTS), and the QP sends it once
	 * it reaches RTS -- a failed post that takes effect later, and a completion nobody
	 * expects (a peer's receive taken by it). */
	if (!id->qp_rts)
		return -EINVAL;
	if (id->wq_hw[WQ_SEND] >= id->wq_cap[WQ_SEND])
		return -ENOMEM;   /* the last slot is the drain marker's */
	r = rec_new(id, wr->wr_id, wr->opcode, wr->signaled);
	if (!r)
		return -ENOMEM;
	sges_to_ibv(sge, wr->sg_list, wr->num_sge);
	swr.wr_id = wr_tag(id, WQ_SEND, r->seq);
	swr.sg_list = wr->num_sge ? sge : NULL;
	swr.num_sge = wr->num_sge;
	swr.send_flags = wr->signaled ? IBV_SEND_SIGNALED : 0;
	if (wr->opcode != QSM_WR_SEND) {
		swr.wr.rdma.remote_addr = wr->remote_addr;
		swr.wr.rdma.rkey = wr->rkey;
	}
	return rec_posted(id, WQ_SEND, r, ibv_post_send(id->cm->qp, &swr, &bad));
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
		return -ENOMEM;
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

