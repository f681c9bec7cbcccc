/* rdma-qsm: the rdmacm fabric's shared receive queues: an ibv_srq with a receive CQ of its own,
 * its receives' records in slots (they complete out of order, on any of its QPs), the limit. */
#include <stdlib.h>

#include "fabric/rdmacm/rdmacm.h"
#include "fabric/rdmacm/wc.h"

#define SRQ_MAX_WR 65536u            /* a slot's index is 16 bits of the tag */

int qsm_rc_create_srq(struct qsm_fabric *base, struct qsm_fdev *d, void *owner,
		      const struct qsm_fabric_srq_attr *attr, struct qsm_fsrq **ret)
{
	struct ibv_srq_init_attr init = { 0 };
	struct qsm_fsrq *s;
	int r;

	if (!base || !d || !attr || !ret || !attr->max_wr || attr->max_wr > SRQ_MAX_WR ||
	    attr->max_sge > QSM_FABRIC_MAX_SGE)
		return -EINVAL;
	if (!d->present)
		return -ENODEV;
	if ((r = qsm_rc_dev_get_resources(d, NULL)) < 0)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s || !(s->slot = calloc(attr->max_wr, sizeof(*s->slot))) ||
	    !(s->free = calloc(attr->max_wr, sizeof(*s->free)))) {
		r = -ENOMEM;
		goto fail;
	}
	s->fab = d->fab;
	s->dev = d;
	s->owner = owner;
	s->cap = s->nfree = attr->max_wr;
	for (uint32_t i = 0; i < s->cap; i++)
		s->free[i] = s->cap - 1 - i;
	if (!(s->cq = qsm_rc_cq_own(d, (int)attr->max_wr + 1, &r)))
		goto fail;
	init.srq_context = s;
	init.attr.max_wr = attr->max_wr;
	init.attr.max_sge = attr->max_sge ? attr->max_sge : 1;
	errno = 0;
	if (!(s->srq = ibv_create_srq(d->pd, &init))) {
		r = errno_or(ENOMEM);
		goto fail;
	}
	if ((r = qsm_rc_table_add(&d->fab->srqt, s, &s->key)) < 0)
		goto fail;
	d->nsrqs++;
	*ret = s;
	return 0;
fail:
	if (s) {
		if (s->srq)
			ibv_destroy_srq(s->srq);
		if (s->cq)
			qsm_rc_cq_own_free(d, s->cq);
		free(s->slot);
		free(s->free);
		free(s);
	}
	qsm_rc_dev_settle(d);
	return r;
}

/* Every QP on it is gone (the contract): what is still posted goes with it, no completion. */
void qsm_rc_destroy_srq(struct qsm_fsrq *s)
{
	struct qsm_fdev *d;

	if (!s)
		return;
	d = s->dev;
	ibv_destroy_srq(s->srq);
	qsm_pending_drop_srq(&s->fab->pq, s);
	qsm_rc_cq_own_free(d, s->cq);
	qsm_rc_table_del(&s->fab->srqt, s->key);
	free(s->slot);
	free(s->free);
	free(s);
	d->nsrqs--;
	qsm_rc_dev_settle(d);
}

struct ibv_srq *qsm_rc_srq_verbs(struct qsm_fsrq *s, struct ibv_cq **cq)
{
	*cq = s->cq->cq;
	return s->srq;
}

int qsm_rc_post_srq_recv(struct qsm_fsrq *s, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
			 int num_sge)
{
	struct ibv_sge sge[QSM_FABRIC_MAX_SGE];
	struct ibv_recv_wr rwr = { 0 }, *bad;
	struct rc_srq_slot *sl;
	uint32_t i;
	int r;

	if (!s)
		return -EINVAL;   /* the SGEs: the runtime's door, then the device's (max_sge) */
	if (!s->nfree)
		return -ENOBUFS;
	i = s->free[s->nfree - 1];
	sl = &s->slot[i];
	qsm_rc_sges_to_ibv(sge, sg_list, num_sge);
	rwr.wr_id = TAG_SRQ | TAG_RECV | s->key | ((uint64_t)sl->gen << 16) | i;
	rwr.sg_list = num_sge ? sge : NULL;
	rwr.num_sge = num_sge;
	r = ibv_post_srq_recv(s->srq, &rwr, &bad);
	if (r)
		return r > 0 ? -r : -EINVAL;
	sl->wr_id = wr_id;
	sl->used = true;
	s->nfree--;
	s->fab->posts++;
	return 0;
}

int qsm_rc_arm_srq(struct qsm_fsrq *s, uint32_t limit)
{
	struct ibv_srq_attr attr = { .srq_limit = limit };

	if (!s || limit > s->cap)
		return -EINVAL;
	return -ibv_modify_srq(s->srq, &attr, IBV_SRQ_LIMIT);
}

/* The receive's slot freed; its QP from qp_num (the tag names the SRQ, not the QP). */
int qsm_rc_srq_wc_take(struct rc_fabric *f, const struct ibv_wc *wc, struct qsm_fabric_cqe *out)
{
	struct qsm_fsrq *s = qsm_rc_table_find(&f->srqt, wc->wr_id);
	uint32_t i = (uint32_t)wc->wr_id & 0xffffu;
	struct rc_srq_slot *sl;
	enum qsm_wc_status st;
	struct qsm_fid *id;

	if (!s || i >= s->cap || !(sl = &s->slot[i])->used || sl->gen != (uint16_t)(wc->wr_id >> 16)) {
		f->wc_stale++;
		return 0;
	}
	sl->used = false;
	sl->gen++;
	s->free[s->nfree++] = i;
	id = qsm_rc_qpn_find(&f->qpn, wc->qp_num);
	if (!id || id->srq != s) {
		f->wc_stale++;   /* its QP is gone, and the receive with it */
		return 0;
	}
	st = wc->status == IBV_WC_SUCCESS ? QSM_WC_SUCCESS : qsm_rc_wc_status(f, wc->status);
	out->owner = id->owner;
	out->id = id;
	if (st == QSM_WC_SUCCESS) {
		f->wc_ok++;
		qsm_rc_recv_wc(wc, &out->wc);
	} else {
		if (st == QSM_WC_WR_FLUSH_ERR)
			f->wc_flush++;
		else
			f->wc_err++;
		out->wc = (struct qsm_fabric_wc){ .status = st, .opcode = QSM_WR_RECV };
	}
	out->wc.wr_id = sl->wr_id;
	out->wc.wc_flags |= QSM_WC_SRQ;
	return 1;
}
