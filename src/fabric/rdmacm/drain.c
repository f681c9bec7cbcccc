/* rdma-qsm: the drain of the rdmacm fabric's QPs (a marker, or on iWARP a poll that finds the
 * CQ empty) and the flushes we make that the provider does not: what a drain left, late WRs. */
#include <stdlib.h>
#include <string.h>

#include "fabric/rdmacm/rdmacm.h"

/* A WR posted once the QP was known to be in ERR: flushed by us, behind the ring. */
struct rc_late {
	struct qsm_list node;
	uint64_t wr_id;
	uint8_t opcode;
	uint8_t wq;
};

/* ---- lq: the flushes we make, handed out in each QP's order ---- */

static void lq_add(struct qsm_fid *id)
{
	struct rc_fabric *f = id->fab;

	if (id->on_lq)
		return;
	if (qsm_list_empty(&f->lq))
		qsm_rc_hot_changed(f, 1);
	id->on_lq = true;
	qsm_list_add_tail(&f->lq, &id->lq_node);
}

static void lq_del(struct qsm_fid *id)
{
	struct rc_fabric *f = id->fab;

	if (!id->on_lq)
		return;
	id->on_lq = false;
	qsm_list_del(&id->lq_node);
	if (qsm_list_empty(&f->lq))
		qsm_rc_hot_changed(f, -1);
}

/* A late WR of this work queue may be flushed now: nothing of it is left on the QP. */
static bool late_due(const struct qsm_fid *id, int q)
{
	return id->flush_all || id->wq[q].head == id->wq[q].tail;
}

void qsm_rc_wq_flush_heads(struct qsm_fid *id)
{
	if (!qsm_list_empty(&id->late) && (late_due(id, WQ_SEND) || late_due(id, WQ_RECV)))
		lq_add(id);
}

static void flush_cqe(struct qsm_fid *id, struct qsm_fabric_cqe *out, uint64_t wr_id, uint8_t opcode)
{
	id->fab->wc_synth++;
	out->owner = id->owner;
	out->id = id;
	out->wc = (struct qsm_fabric_wc){ .wr_id = wr_id, .status = QSM_WC_WR_FLUSH_ERR,
					  .opcode = (enum qsm_wr_opcode)opcode };
}

/* The drain's marker came (or, on iWARP, the point in the CQ that stands for it): every WR
 * still on the QP is flushed by us from now on, and DRAINED follows. */
void qsm_rc_marker_came(struct qsm_fid *id)
{
	id->draining = false;
	id->qp_err = true;
	id->flush_all = true;
	id->drained_due = true;
	lq_add(id);
}

/* ---- dq: iWARP drains waiting for a poll to find their CQ empty ---- */

static void dq_add(struct qsm_fid *id)
{
	id->on_dq = true;
	id->cq->drains++;
	qsm_list_add_tail(&id->fab->dq, &id->dq_node);
	qsm_rc_cq_heat(id->fab, id->cq);   /* polled at the next get_event, event or not */
}

static void dq_del(struct qsm_fid *id)
{
	if (!id->on_dq)
		return;
	id->on_dq = false;
	id->cq->drains--;
	qsm_list_del(&id->dq_node);
}

/* A poll found CQ c empty: the device's completions of every QP drained on it before this poll
 * were all taken, so each such drain is where its marker's completion would have been. */
void qsm_rc_cq_found_empty(struct rc_fabric *f, struct rc_cq *c)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->dq) {
		struct qsm_fid *id = qsm_container_of(pos, struct qsm_fid, dq_node);

		if (id->cq != c)
			continue;
		dq_del(id);
		qsm_rc_marker_came(id);
	}
}

void qsm_rc_flushes_forget(struct qsm_fid *id)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &id->late) {
		qsm_list_del(pos);
		free(qsm_container_of(pos, struct rc_late, node));
	}
	lq_del(id);
	dq_del(id);
}

void qsm_rc_last_wqe(struct qsm_fid *id)
{
	id->last_wqe = true;
	if (id->drained_due)
		lq_add(id);
}

/* The next flush of ours for the QP: what the drain left on the QP, then the late WRs in post
 * order, each once its work queue has nothing left on the QP.  1, or 0 when none is due. */
static int synth_one(struct qsm_fid *id, struct qsm_fabric_cqe *out)
{
	struct qsm_list *pos, *tmp;

	for (int q = WQ_SEND; q <= WQ_RECV && id->flush_all; q++) {
		struct rc_wq *w = &id->wq[q];

		while (w->head != w->tail) {
			struct rc_slot *s = &w->ring[w->head++ & w->mask];

			if (s->done) {   /* completed out of order: reported then */
				s->done = false;
				w->ahead--;
				continue;
			}
			/* before the marker, which completed: an unsignaled send is done */
			if (q == WQ_SEND && !s->signaled)
				continue;
			flush_cqe(id, out, s->wr_id, s->opcode);
			return 1;
		}
	}
	qsm_list_each(pos, tmp, &id->late) {
		struct rc_late *l = qsm_container_of(pos, struct rc_late, node);

		if (!late_due(id, l->wq))
			continue;
		flush_cqe(id, out, l->wr_id, l->opcode);
		qsm_list_del(&l->node);
		free(l);
		return 1;
	}
	return 0;
}

int qsm_rc_lq_take(struct rc_fabric *f, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe, int max)
{
	int n = 0;

	while (!qsm_list_empty(&f->lq)) {
		struct qsm_fid *id = qsm_container_of(f->lq.next, struct qsm_fid, lq_node);

		while (n < max && synth_one(id, &cqe[n]))
			n++;
		if (n == max)
			return n;   /* the QP may have more: it stays first */
		if (id->drained_due && id->srq && !id->last_wqe) {
			/* on an SRQ the QP is drained once it also takes no more of the SRQ's
			 * receives (the kernel's ib_drain_qp waits for LAST_WQE too) */
			lq_del(id);
			continue;
		}
		if (id->drained_due) {
			if (n)
				return n;   /* DRAINED after the completions, alone */
			id->drained_due = false;
			lq_del(id);
			memset(ev, 0, offsetof(struct qsm_fabric_event, private_data));
			ev->event = QSM_EV_DRAINED;
			ev->id = id;
			ev->owner = id->owner;
			ev->device = id->dev;
			return 0;
		}
		lq_del(id);
	}
	return n ? n : -EAGAIN;
}

/*
 * What the QP still holds, taken now (a drain ended by its timeout, a device removal): every WR
 * on its work queues and every late one, as our flushes, in post order.  flush_all stays set
 * until the QP is destroyed, so whatever the device reports for them meanwhile is stale
 * (wc_take), and no DRAINED follows: the runtime is done waiting for one.
 */
int qsm_rc_flush_qp(struct qsm_fid *id, struct qsm_fabric_cqe *cqe, int max)
{
	int n = 0;

	if (!id || !qsm_rc_fid_has_qp(id))
		return 0;
	id->flush_all = true;
	id->draining = id->drained_due = false;
	dq_del(id);
	while (n < max && synth_one(id, &cqe[n]))
		n++;
	if (n < max)
		lq_del(id);   /* nothing left of it for qsm_rc_lq_take */
	return n;
}

/* A WR posted to a QP known to be in ERR: not given to the QP (rxe 6.1 may never flush a
 * receive posted in ERR), flushed by us behind what the work queue still holds. */
static struct rc_late *late_new(int q, uint64_t wr_id, enum qsm_wr_opcode op)
{
	struct rc_late *l = qsm_pending_alloc(sizeof(*l));

	if (l) {
		l->wr_id = wr_id;
		l->opcode = (uint8_t)op;
		l->wq = (uint8_t)q;
	}
	return l;
}

int qsm_rc_post_late(struct qsm_fid *id, int q, const struct qsm_fabric_wr *wr, int n, uint64_t recv_wr_id)
{
	struct qsm_list list, *pos, *tmp;

	qsm_list_init(&list);
	for (int i = 0; i < n; i++) {
		struct rc_late *l = late_new(q, wr ? wr[i].wr_id : recv_wr_id, wr ? wr[i].opcode : QSM_WR_RECV);

		if (!l) {
			qsm_list_each(pos, tmp, &list) {
				qsm_list_del(pos);
				free(qsm_container_of(pos, struct rc_late, node));
			}
			return -ENOMEM;
		}
		qsm_list_add_tail(&list, &l->node);
	}
	qsm_list_each(pos, tmp, &list) {
		qsm_list_del(pos);
		qsm_list_add_tail(&id->late, pos);
	}
	qsm_rc_wq_flush_heads(id);
	return 0;
}

/*
 * Keepalive.  A zero-length RDMA WRITE needs no rkey and touches no memory at the responder
 * (IBA C9-88; rxe's check_rkey and siw take it so), which still acknowledges it: it costs the
 * peer nothing, and a peer whose QP is gone (its host died, the wire was cut: no DREQ ever
 * came) never acknowledges it, so the RC retries run out and it fails with RETRY_EXC_ERR.
 * Signaled, in the QP's one more send slot; one at a time.  A probe asked for after one failed
 * means its WC_ERROR never moved the queue (the event was lost for memory: pending_push): it
 * is pushed again, so a queue is never left LIVE on a dead QP.
 */
int qsm_rc_probe(struct qsm_fid *id)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	int r;

	if (id && id->probe_failed) {
		pending_push(id->fab, QSM_EV_WC_ERROR, -EIO, id, NULL, false);
		return 0;
	}
	if (!id || !qsm_rc_fid_has_qp(id) || !id->qp_rts || id->qp_err || id->draining)
		return -ENOTCONN;
	if (id->probe_out)
		return -EBUSY;
	wr.wr_id = TAG_MARKER | id->qp_key | TAG_PROBE;
	if ((r = ibv_post_send(id->cm->qp, &wr, &bad)))
		return -r;
	id->probe_out = true;
	id->fab->probes++;
	return 0;
}

void qsm_rc_probe_came(struct qsm_fid *id, enum ibv_wc_status status)
{
	id->probe_out = false;
	if (status == IBV_WC_SUCCESS || status == IBV_WC_WR_FLUSH_ERR)
		return;
	/* the QP is in ERR now, as after any WR's error; the probe was no WR of the ULP's, so its
	 * failure is an event of the id, once, and the ULP's WRs flush behind it */
	id->fab->probes_failed++;
	id->probe_failed = true;
	id->qp_err = true;
	qsm_rc_wq_flush_heads(id);
	pending_push(id->fab, QSM_EV_WC_ERROR, -EIO, id, NULL, false);
}

/*
 * Move the QP to ERR; DRAINED once everything posted before has completed.  On IB and RoCE a
 * WR posted in ERR is flushed, in order behind the rest: a signaled send after the modify is
 * the marker, as the kernel's ib_drain_qp posts it.
 *
 * On iWARP (the device's transport type, IBV_TRANSPORT_IWARP) nothing promises that a post in
 * ERR is flushed, and soft-iWARP never flushes one: libsiw writes the WR into the send queue's
 * shared ring and rings the doorbell with no WR, and siw_post_send in ERROR flushes only the WRs
 * it is handed (siw_sq_flush_wr), none; the rings are flushed only on the way into ERROR
 * (siw_qp_modify: siw_sq_flush and siw_rq_flush from RTS; siw_qp_llp_close when the stream
 * ends).  A marker posted after the modify never completes, and one posted before it would go
 * on the wire while the QP is still in RTS.  So no marker there: siw writes those flushes into
 * the CQ inside the modify (or earlier, at the stream's end), so once a poll after this call
 * finds the CQ empty, the device's completions of this QP are all taken, and that poll stands
 * for the marker's completion.  What is still on the QP then is what the device will never
 * report (posted into the rings after siw left RTS by itself: the peer closed, a TERMINATE):
 * flushed by us, as after a marker; anything the device reports for it later is stale.
 */
int qsm_rc_drain(struct qsm_fid *id)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	struct ibv_qp *qp;
	uint64_t tag;
	int r;

	if (!id || !qsm_rc_fid_has_qp(id))
		return -EINVAL;
	qp = id->cm->qp;
	tag = TAG_MARKER | id->qp_key;
	r = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
	if (r)
		return -r;
	id->qp_err = true;
	if (id->cm->verbs->device->transport_type == IBV_TRANSPORT_IWARP) {
		id->draining = true;
		if (!id->on_dq)
			dq_add(id);
		return 0;
	}
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
