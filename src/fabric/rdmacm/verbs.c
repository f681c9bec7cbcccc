/* rdma-qsm: the data path of the rdmacm fabric: QPs on the CQs of a device's pool, posts into
 * per-QP rings, completions polled in batches straight to the caller (wr_id -> WR in O(1));
 * the drain and the flushes the provider does not make are drain.c's. */
#include <stdlib.h>
#include <string.h>

#include "fabric/rdmacm/rdmacm.h"
#include "fabric/rdmacm/wc.h"

/* ---- completions ---- */

/* A completion whose tag is not a WR of a QP's own work queue: an SRQ's receive (its QP's id,
 * or NULL when stale), the drain marker (NULL: DRAINED follows our flushes) or a keepalive
 * probe (NULL: its failure is an event).  Out of line: rare, or the SRQ's. */
static __attribute__((noinline)) struct qsm_fid *wc_take_other(struct rc_fabric *f, const struct ibv_wc *wc,
						   struct qsm_fabric_cqe *out)
{
	struct qsm_fid *id;

	if (wc->wr_id & TAG_SRQ) {
		if (!qsm_rc_srq_wc_take(f, wc, out))
			return NULL;
		if (out->wc.status != QSM_WC_SUCCESS) {
			out->id->qp_err = true;   /* an error completion moves an RC QP to ERR */
			qsm_rc_wq_flush_heads(out->id);
		}
		return out->id;
	}
	id = qsm_rc_table_find(&f->qpt, wc->wr_id);
	if (!id || id->qp_num != wc->qp_num)
		return NULL;
	if (wc->wr_id & TAG_PROBE)
		qsm_rc_probe_came(id, wc->status);
	else if (id->draining)
		qsm_rc_marker_came(id);
	return NULL;
}

/* An error completion of the WR in slot s (taken): the QP is in ERR; the WR's own opcode is
 * reported, wc->opcode being undefined in error completions. */
static __attribute__((noinline)) struct qsm_fid *wc_error(struct qsm_fid *id, const struct rc_wq *w,
					      const struct rc_slot *s, enum ibv_wc_status status,
					      struct qsm_fabric_cqe *out)
{
	enum qsm_wc_status st = qsm_rc_wc_status(id->fab, status);

	if (st == QSM_WC_WR_FLUSH_ERR)
		id->fab->wc_flush++;
	else
		id->fab->wc_err++;
	id->qp_err = true;   /* an error completion moves an RC QP to ERR */
	if (w->head == w->tail)
		qsm_rc_wq_flush_heads(id);
	out->owner = id->owner;
	out->id = id;
	out->wc = (struct qsm_fabric_wc){ .wr_id = s->wr_id, .status = st,
					  .opcode = (enum qsm_wr_opcode)s->opcode };
	return id;
}

/* A completion of the WR it names in the QP's work queue q (a constant where it is called, so
 * that each work queue's is straight-line code): the head's WR taken inline, the rest out of
 * line.  A success writes out->wc only (owner and id are the caller's to write, if it goes
 * into the batch); id, or NULL: nothing to report. */
static inline __attribute__((always_inline)) struct qsm_fid *wc_take_wq(struct rc_fabric *f, struct qsm_fid *id,
							    const struct ibv_wc *wc,
							    struct qsm_fabric_cqe *out, int q,
							    bool *direct)
{
	struct rc_wq *w = &id->wq[q];
	uint32_t seq = (uint32_t)wc->wr_id, head = w->head;
	struct rc_slot *s;

	if (__builtin_expect(seq == head && head != w->tail, 1)) {
		s = &w->ring[head & w->mask];
		w->head = head + 1;
		if (q == WQ_SEND && __builtin_expect(w->ahead != 0, 0))
			qsm_rc_wq_catch_up(w);   /* a receive queue completes in order: never ahead */
	} else if (!(s = qsm_rc_wq_take_slow(f, w, q == WQ_RECV, seq))) {
		f->wc_stale++;
		return NULL;
	}
	if (__builtin_expect(wc->status != IBV_WC_SUCCESS, 0)) {
		*direct = false;   /* this one and the rest of the poll: the batch's */
		return wc_error(id, w, s, wc->status, out);
	}
	f->wc_ok++;
	out->wc.wr_id = s->wr_id;
	if (q == WQ_RECV) {
		qsm_rc_recv_wc(wc, &out->wc);
		return id;
	}
	out->wc.status = QSM_WC_SUCCESS;
	out->wc.opcode = (enum qsm_wr_opcode)s->opcode;
	out->wc.byte_len = wc->byte_len;
	out->wc.imm_data = out->wc.invalidated_rkey = out->wc.wc_flags = 0;
	return s->signaled ? id : NULL;   /* an unsignaled send's: written, not handed out */
}

/* No QP: what a poll's last QP is before it found one (its tag_hi matches no tag). */
static struct qsm_fid no_fid;

/* The id of a completion of a QP's own work queue, looked up by its tag, or NULL (stale: the
 * slot's generation or qp_num is another QP's, or every WR left is flushed by us since the
 * marker came).  Out of line: once a poll per QP. */
static __attribute__((noinline)) struct qsm_fid *wc_find(struct rc_fabric *f, const struct ibv_wc *wc)
{
	struct qsm_fid *id = qsm_rc_table_find(&f->qpt, wc->wr_id);

	/* a slot reused as often as its generation wraps is still not ours (qp_num) */
	if (__builtin_expect(!id || id->qp_num != wc->qp_num || id->flush_all, 0)) {
		f->wc_stale++;
		return NULL;
	}
	return id;
}

/*
 * One completion polled: its WR found from the tag in O(1), the slot freed, the completion
 * written to out->wc in place, its id returned -- or nothing (NULL): the drain marker (DRAINED
 * follows our flushes), an unsignaled send, a stale completion.  *last: the QP the poll's last
 * completion named, found and checked then; the next one whose tag has its key (the high
 * half but for TAG_RECV: generation, table slot) and its qp_num is that QP's too, with no
 * lookup.  Forgotten (&no_fid) when a completion goes out of line (a marker sets flush_all).
 * Inline, the success of a QP's own WR straight through; the rest out of line.
 */
static inline __attribute__((always_inline)) struct qsm_fid *wc_take(struct rc_fabric *f, const struct ibv_wc *wc,
								    struct qsm_fabric_cqe *out,
								    struct qsm_fid **last, bool *direct)
{
	uint64_t tag = wc->wr_id;
	uint32_t hi = (uint32_t)(tag >> 32);
	struct qsm_fid *id = *last;

	if (__builtin_expect((hi | TAG_RECV_HI) != id->tag_hi || wc->qp_num != id->qp_num, 0)) {
		if (__builtin_expect(tag & (TAG_SRQ | TAG_MARKER), 0)) {
			*last = &no_fid;
			*direct = false;   /* an SRQ's receive: the batch's, and the rest of the poll */
			return wc_take_other(f, wc, out);
		}
		if (!(id = wc_find(f, wc)))
			return NULL;
		*last = id;
	}
	return hi & TAG_RECV_HI ? wc_take_wq(f, id, wc, out, WQ_RECV, direct) :
				  wc_take_wq(f, id, wc, out, WQ_SEND, direct);
}

/* Up to max completions of a hot CQ (qsm_rc_cq_poll_empty when it has none).  Inline: once
 * per poll of the hot path. */
static inline int cq_poll(struct qsm_fdev *d, struct rc_cq *c, struct ibv_wc *wc, int max)
{
	int n = ibv_poll_cq(c->cq, max, wc);

	if (__builtin_expect(n > 0, 1)) {
		c->idle = 0;
		if (__builtin_expect(c->checked, 0))
			qsm_rc_cq_rescued(d->fab, c);
		return n;
	}
	return qsm_rc_cq_poll_empty(d, c, wc, max);
}

/* ibv_wc's status and opcode side by side, read as one word: a plain receive's (wc_plain_recv) */
_Static_assert(offsetof(struct ibv_wc, opcode) == offsetof(struct ibv_wc, status) + 4 &&
		       sizeof(((struct ibv_wc *)0)->status) == 4 && sizeof(((struct ibv_wc *)0)->opcode) == 4,
	       "struct ibv_wc: status and opcode adjacent");
#define WC_RECV_OK ((uint64_t)IBV_WC_RECV << 32 | (uint64_t)IBV_WC_SUCCESS)

/* A successful SEND's receive with nothing else to report (no imm data, no invalidation, no
 * checksum flag): status and opcode in one compare. */
static inline __attribute__((always_inline)) bool wc_plain_recv(const struct ibv_wc *wc)
{
	uint64_t so;

	memcpy(&so, &wc->status, sizeof(so));
	return so == WC_RECV_OK && !(wc->wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV | IBV_WC_IP_CSUM_OK));
}

/* What a call's completions delivered straight leave behind: how many, and the first refusal. */
struct straight {
	/* what a plain receive's handler gets: its constant fields written once per call */
	struct qsm_fabric_wc rw;
	const size_t *hold;   /* the sink's */
	int sent;             /* straight in all */
	int refusal;
	void *refused;        /* the owner whose handler refused its completion, told last */
};

/*
 * CQ c polled, 16 at a time, its completions straight to their handlers while they may go so
 * (fabric.h, "Completions delivered straight"), until it has no more or the call's max are
 * taken, or one must go into the batch (an error, an SRQ's receive, an id with no handler:
 * written at *out, the batch's first entry, which moves on), or the runtime holds (a handler
 * queued an event), or a handler refuses; then *direct is false and the rest of that poll is
 * the batch's, in order, from *rest.  Returns what the last poll got (*want: what it asked).
 *
 * The common case, a plain receive of the QP the poll's last completion named, with a
 * handler, at its work queue's head, is handled here with the least work: the handler gets a
 * completion whose constant fields were written once per call (st->rw), and it is counted
 * once per poll.  Everything else takes the general way, wc_take, one completion at a time.
 */
static inline __attribute__((always_inline)) int
poll_straight(struct rc_fabric *f, struct qsm_fdev *d, struct rc_cq *c, struct ibv_wc *wc, int max,
	      struct qsm_fabric_cqe **out, struct qsm_fid **last, bool *direct, struct straight *st,
	      const struct ibv_wc **rest, int *want)
{
	struct qsm_fabric_wc *rw = &st->rw;
	const size_t *hold = st->hold;
	struct qsm_fid *id = *last, *gid = NULL;
	const struct ibv_wc *w = wc, *end;
	int got, r = 0;

	do {
		int general = 0;

		*want = max - st->sent < QSM_FABRIC_CQE_BATCH ? max - st->sent : QSM_FABRIC_CQE_BATCH;
		got = cq_poll(d, c, wc, *want);
		if (got <= 0)
			break;
		for (w = wc, end = wc + got; w != end; w++) {
			uint64_t tag = w->wr_id;
			qsm_fabric_complete_fn fn;

			if (__builtin_expect((uint32_t)(tag >> 32) == id->tag_hi && w->qp_num == id->qp_num &&
					     wc_plain_recv(w) && (fn = id->complete) != NULL, 1)) {
				struct rc_wq *q = &id->wq[WQ_RECV];
				uint32_t head = q->head;

				if (__builtin_expect((uint32_t)tag == head && head != q->tail, 1)) {
					rw->wr_id = q->ring[head & q->mask].wr_id;
					q->head = head + 1;
					rw->byte_len = w->byte_len;
					r = fn(id->complete_q, rw);
					if (__builtin_expect(r != 0, 0)) {
						gid = id;
						goto refused;
					}
					if (__builtin_expect(*hold != 0, 0))
						goto held;
					continue;
				}
			}
			/* the general way: not a plain receive (those are w - wc - general) */
			general++;
			gid = wc_take(f, w, *out, last, direct);
			id = *last;
			if (!gid) {
				if (!*direct)
					goto batch;   /* the rest of the poll is the batch's */
				continue;
			}
			if (!*direct || !gid->complete) {
				(*out)->owner = gid->owner;
				(*out)->id = gid;
				(*out)++;
				*direct = false;
				goto batch;
			}
			st->sent++;
			r = gid->complete(gid->complete_q, &(*out)->wc);
			if (__builtin_expect(r != 0, 0))
				goto refused;
			if (*hold)
				goto held;
		}
		st->sent += got - general;
		f->wc_ok += (uint64_t)(got - general);
		continue;
refused:
		st->refused = gid->owner;
		st->refusal = r;
held:
		*direct = false;
batch:
		w++;   /* this one taken: straight, into the batch, or nothing to report */
		st->sent += (int)(w - wc) - general;
		f->wc_ok += (uint64_t)((w - wc) - general);
		break;
	} while (got == *want && st->sent < max);
	*rest = w;
	return got;
}

/* Completions from w to end into the batch from out, in order (wc_take); returns where the
 * batch ends. */
static inline __attribute__((always_inline)) struct qsm_fabric_cqe *
poll_batch(struct rc_fabric *f, const struct ibv_wc *w, const struct ibv_wc *end,
	   struct qsm_fabric_cqe *out, struct qsm_fid **last)
{
	bool direct = false;

	for (; w != end; w++) {
		struct qsm_fid *id = wc_take(f, w, out, last, &direct);

		if (!id)
			continue;
		out->owner = id->owner;
		out->id = id;
		out++;
	}
	return out;
}

int qsm_rc_poll_cqs(struct rc_fabric *f, struct qsm_fabric_cqe *cqe, int max)
{
	struct ibv_wc wc[QSM_FABRIC_CQE_BATCH];
	struct qsm_list *dpos, *dtmp, *pos, *tmp;
	struct qsm_fid *last = &no_fid;
	struct straight st = { .rw = { .status = QSM_WC_SUCCESS, .opcode = QSM_WR_RECV },
			       .hold = f->sink.hold };
	int n = 0;
	/* straight to the handlers (poll_straight) until the batch takes one; then the rest of
	 * the call goes into the batch, in order */
	bool direct = !*f->sink.hold;

	if (!f->hot)
		return 0;
	qsm_list_each(dpos, dtmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(dpos, struct qsm_fdev, node);

		if (!d->cc)
			continue;
		qsm_list_each(pos, tmp, &d->cqs) {
			struct rc_cq *c = qsm_container_of(pos, struct rc_cq, node);
			int want, got;

			if (!c->hot)
				continue;
			if (direct) {
				/* nothing in the batch yet (n == 0): it starts at cqe */
				struct qsm_fabric_cqe *out = cqe;
				const struct ibv_wc *w;

				got = poll_straight(f, d, c, wc, max, &out, &last, &direct, &st, &w, &want);
				if (!direct && got > 0)
					out = poll_batch(f, w, wc + got, out, &last);
				n = (int)(out - cqe);
			} else {
				/* the batch holds at most QSM_FABRIC_CQE_BATCH, the call max in all */
				want = max - n - st.sent;
				if (want > QSM_FABRIC_CQE_BATCH - n)
					want = QSM_FABRIC_CQE_BATCH - n;
				got = cq_poll(d, c, wc, want);
				if (got > 0)
					n = (int)(poll_batch(f, wc, wc + got, cqe + n, &last) - cqe);
			}
			if (__builtin_expect(c->drains != 0, 0) && got >= 0 && got < want) {
				qsm_rc_cq_found_empty(f, c);
				last = &no_fid;   /* those QPs' reports are ours now (flush_all) */
			}
			if (n + st.sent == max) {
				/* full: this CQ and device go last, so the others are polled first next
				 * (each moved only if it is not last already: one CQ on one device,
				 * the common case, moves nothing) */
				if (c->node.next != &d->cqs) {
					qsm_list_del(&c->node);
					qsm_list_add_tail(&d->cqs, &c->node);
				}
				if (d->node.next != &f->devs) {
					qsm_list_del(&d->node);
					qsm_list_add_tail(&f->devs, &d->node);
				}
				goto out;
			}
		}
	}
out:
	if (st.sent) {
		f->sent += st.sent;
		f->wc_straight += (uint64_t)st.sent;
		*f->sink.delivered += (uint64_t)st.sent;
	}
	if (__builtin_expect(st.refused != NULL, 0))
		f->sink.refused(st.refused, st.refusal);   /* last: it may close the queue, its QP, a CQ */
	return n;
}

void qsm_rc_set_sink(struct qsm_fabric *base, const struct qsm_fabric_sink *sink)
{
	to_fab(base)->sink = *sink;
}

void qsm_rc_set_complete(struct qsm_fid *id, qsm_fabric_complete_fn fn, struct qsm_conn *q)
{
	if (!id)
		return;
	id->complete = fn;
	id->complete_q = fn ? q : NULL;
}

/* The fabric's list of WRs long enough for a send queue of `cap` (0, or -ENOMEM). */
static int send_lists_reserve(struct rc_fabric *f, uint32_t cap)
{
	struct ibv_send_wr *swr;
	struct ibv_sge *ssge;

	if (cap <= f->swr_cap)
		return 0;
	swr = calloc(cap, sizeof(*swr));
	ssge = calloc((size_t)cap * QSM_FABRIC_MAX_SGE, sizeof(*ssge));
	if (!swr || !ssge) {
		free(swr);
		free(ssge);
		return -ENOMEM;
	}
	free(f->swr);
	free(f->ssge);
	f->swr = swr;
	f->ssge = ssge;
	f->swr_cap = cap;
	return 0;
}

void qsm_rc_send_lists_free(struct rc_fabric *f)
{
	free(f->swr);
	free(f->ssge);
	f->swr = NULL;
	f->ssge = NULL;
	f->swr_cap = 0;
}

/* What the QP had of ours: rings, late WRs (no completion for them: the contract), lq, dq. */
static void qp_state_free(struct qsm_fid *id)
{
	qsm_rc_flushes_forget(id);
	qsm_rc_wq_fini(&id->wq[WQ_SEND]);
	qsm_rc_wq_fini(&id->wq[WQ_RECV]);
	id->draining = id->qp_err = id->qp_rts = id->flush_all = id->drained_due = id->last_wqe = false;
	id->probe_out = id->probe_failed = false;
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
	/* The rings: every WR's record, so that no post or completion allocates; the fabric's
	 * list of WRs long enough for this send queue (at least one, for a cap of 0). */
	if (send_lists_reserve(id->fab, a->max_send_wr + 1) < 0 ||
	    qsm_rc_wq_init(&id->wq[WQ_SEND], a->max_send_wr) < 0 || qsm_rc_wq_init(&id->wq[WQ_RECV], a->max_recv_wr) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	/* One more of each for the drain marker, and a send for the keepalive probe; on an SRQ,
	 * its receives are the SRQ CQ's. */
	wrs = (int)a->max_send_wr + 2 + (a->srq ? 0 : (int)a->max_recv_wr + 1);
	cq = qsm_rc_cq_get(d, wrs, &r);
	if (!cq)
		goto fail;
	memset(&init, 0, sizeof(init));
	init.qp_context = id;
	init.send_cq = cq->cq;
	init.recv_cq = cq->cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = a->max_send_wr + 2;
	init.cap.max_recv_wr = a->max_recv_wr + 1;
	init.cap.max_send_sge = a->max_send_sge ? a->max_send_sge : 1;
	init.cap.max_recv_sge = a->max_recv_sge ? a->max_recv_sge : 1;
	init.cap.max_inline_data = a->max_inline_data;
	if (a->srq) {
		/* its receives come from the SRQ, whose completions are on the SRQ's own CQ */
		init.srq = qsm_rc_srq_verbs(a->srq, &init.recv_cq);
		init.cap.max_recv_wr = init.cap.max_recv_sge = 0;
	}
	if ((r = qsm_rc_table_add(&id->fab->qpt, id, &id->qp_key)) < 0) {
		qsm_rc_cq_put(d, cq, wrs);
		goto fail;
	}
	if (rdma_create_qp(id->cm, d->pd, &init) < 0) {
		r = errno_or(ENOMEM);
		qsm_rc_table_del(&id->fab->qpt, id->qp_key);
		qsm_rc_cq_put(d, cq, wrs);
		goto fail;
	}
	id->qp_num = id->cm->qp->qp_num;
	id->max_sge_rd = d->max_sge_rd;
	id->tag_hi = (uint32_t)(id->qp_key >> 32) | TAG_RECV_HI;
	if (a->srq && (r = qsm_rc_qpn_add(&id->fab->qpn, id)) < 0) {
		rdma_destroy_qp(id->cm);
		qsm_rc_table_del(&id->fab->qpt, id->qp_key);
		qsm_rc_cq_put(d, cq, wrs);
		goto fail;
	}
	id->srq = a->srq;
	id->draining = id->fatal_sent = id->qp_err = id->qp_rts = id->probe_out = id->probe_failed = false;
	id->cq = cq;
	id->qp_wrs = wrs;
	d->nqps++;
	qsm_list_add_tail(&d->qps[id->qp_num % QP_BUCKETS], &id->qp_node);
	return 0;
fail:
	qp_state_free(id);
	qsm_rc_dev_settle(d);
	return r;
}

/* What makes the QP ours: its table entry (its completions stale from now on), rings and
 * pending events. */
static void qp_unhook(struct qsm_fid *id)
{
	qsm_rc_table_del(&id->fab->qpt, id->qp_key);
	if (id->srq)
		qsm_rc_qpn_del(&id->fab->qpn, id);
	id->srq = NULL;
	qp_state_free(id);
	qsm_pending_drop(&id->fab->pq, id, NULL);
}

void qsm_rc_unhook_qp(struct qsm_fid *id)
{
	if (!id || !qsm_rc_fid_has_qp(id) || id->qp_unhooked)
		return;
	qp_unhook(id);
	id->qp_unhooked = true;
}

void qsm_rc_destroy_qp(struct qsm_fid *id)
{
	struct qsm_fdev *d;

	if (!id || !qsm_rc_fid_has_qp(id))
		return;
	if (!id->qp_unhooked)
		qp_unhook(id);
	id->qp_unhooked = false;
	d = id->dev;
	rdma_destroy_qp(id->cm);
	qsm_list_del(&id->qp_node);
	qsm_rc_cq_put(d, id->cq, id->qp_wrs);
	id->cq = NULL;
	d->nqps--;
	qsm_rc_dev_settle(d);
}

static int send_opcode(enum qsm_wr_opcode op)
{
	switch (op) {
	case QSM_WR_SEND: return IBV_WR_SEND;
	case QSM_WR_RDMA_WRITE: return IBV_WR_RDMA_WRITE;
	case QSM_WR_RDMA_READ: return IBV_WR_RDMA_READ;
	case QSM_WR_SEND_WITH_IMM: return IBV_WR_SEND_WITH_IMM;
	case QSM_WR_RDMA_WRITE_WITH_IMM: return IBV_WR_RDMA_WRITE_WITH_IMM;
	case QSM_WR_SEND_WITH_INV: return IBV_WR_SEND_WITH_INV;
	case QSM_WR_LOCAL_INV: return IBV_WR_LOCAL_INV;
	default: return -1;   /* BIND_MW: qsm_rc_bind_mw() only */
	}
}

static void swr_fill(struct qsm_fid *id, int i, const struct qsm_fabric_wr *wr, uint32_t seq, bool last)
{
	struct ibv_send_wr *s = &id->fab->swr[i];
	struct ibv_sge *sge = &id->fab->ssge[(size_t)i * QSM_FABRIC_MAX_SGE];

	memset(s, 0, sizeof(*s));
	qsm_rc_sges_to_ibv(sge, wr->sg_list, wr->num_sge);
	s->wr_id = id->qp_key | seq;
	s->next = last ? NULL : &id->fab->swr[i + 1];
	s->sg_list = wr->num_sge ? sge : NULL;
	s->num_sge = wr->num_sge;
	s->opcode = (enum ibv_wr_opcode)send_opcode(wr->opcode);
	if (wr->flags & QSM_POST_SIGNALED)
		s->send_flags |= IBV_SEND_SIGNALED;
	if (wr->flags & QSM_POST_INLINE)
		s->send_flags |= IBV_SEND_INLINE;   /* the provider copies the data now, no lkey */
	if (wr->opcode == QSM_WR_SEND_WITH_IMM || wr->opcode == QSM_WR_RDMA_WRITE_WITH_IMM)
		s->imm_data = wr->imm_data;         /* carried as is: the receiver sees this value */
	if (wr->opcode == QSM_WR_SEND_WITH_INV || wr->opcode == QSM_WR_LOCAL_INV)
		s->invalidate_rkey = wr->imm_data;  /* the rkey to invalidate (verbs' union) */
	/* libsiw (rdma-core's providers/siw, push_send_wqe) takes a SEND_WITH_INV's rkey from
	 * wr.rdma.rkey, not invalidate_rkey: without this it sends the peer STag 0 to invalidate,
	 * the peer's receive fails and the response is lost (seen: the kernel's NVMe host's
	 * Connect never answered).  A SEND reads no wr.rdma on any other provider. */
	if (wr->opcode == QSM_WR_SEND_WITH_INV)
		s->wr.rdma.rkey = wr->imm_data;
	if (wr->opcode == QSM_WR_RDMA_WRITE || wr->opcode == QSM_WR_RDMA_READ ||
	    wr->opcode == QSM_WR_RDMA_WRITE_WITH_IMM) {
		s->wr.rdma.remote_addr = wr->remote_addr;
		s->wr.rdma.rkey = wr->rkey;
	}
}

/*
 * The list wr[0..n) with one doorbell.  The WRs were checked at the runtime's door
 * (src/data/post.c); here only the QP's state and room (-EINVAL before RTS, -ENOBUFS, -ENOMEM
 * post none) and the device's READ SGE bound, then one ibv_post_send of the chain: what the device checks itself (rxe's
 * provider: SGEs beyond the QP's max_sge, inline data beyond its max_inline) it refuses at its
 * bad_wr, with the WRs before it posted.  The ring's slots are written first and only the
 * posted ones are taken (tail).
 */
int qsm_rc_post_send(struct qsm_fid *id, const struct qsm_fabric_wr *wr, int n, int *posted)
{
	struct ibv_send_wr *bad = NULL;
	struct rc_wq *w;
	int k, ret;

	if (posted)
		*posted = 0;
	if (!id || !qsm_rc_fid_has_qp(id))
		return -EINVAL;
	/* Refused here, not by verbs: rxe's provider queues the WR in the shared send queue
	 * before the kernel refuses the doorbell (-EINVAL before RTS), and the QP sends it once
	 * it reaches RTS -- a failed post that takes effect later, and a completion nobody
	 * expects (a peer's receive taken by it). */
	if (!id->qp_err && !id->qp_rts)
		return -EINVAL;
	w = &id->wq[WQ_SEND];
	/* the QP's one more slot is the drain marker's */
	if (!id->qp_err && (unsigned)n > w->cap - (w->tail - w->head))
		return -ENOBUFS;
	if (!n)
		return 0;
	/* A READ that scatters into more SGEs than the device's max_sge_rd is refused here, as a
	 * device refuses at its bad_wr: libsiw (max_sge_rd 1) would post it and fill the first
	 * SGE only, a short read with a success completion.  The WRs before it are posted. */
	for (k = 0; k < n; k++)
		if (__builtin_expect(wr[k].opcode == QSM_WR_RDMA_READ && wr[k].num_sge > id->max_sge_rd, 0))
			break;
	if (k < n) {
		if (!k)
			return -EINVAL;
		ret = qsm_rc_post_send(id, wr, k, posted);
		return ret ? ret : -EINVAL;
	}
	if (id->qp_err) {
		ret = qsm_rc_post_late(id, WQ_SEND, wr, n, 0);
		if (!ret && posted)
			*posted = n;
		return ret;
	}
	for (k = 0; k < n; k++) {
		struct rc_slot *s = &w->ring[(w->tail + (uint32_t)k) & w->mask];

		s->wr_id = wr[k].wr_id;
		s->opcode = (uint8_t)wr[k].opcode;
		s->signaled = wr[k].flags & QSM_POST_SIGNALED;
		swr_fill(id, k, &wr[k], w->tail + (uint32_t)k, k == n - 1);
	}
	ret = ibv_post_send(id->cm->qp, id->fab->swr, &bad);
	/* libsiw refuses a WR (*bad_wr set) and then returns its doorbell's 0 when WRs before it
	 * were queued and the send queue was idle (siw_post_send): the refusal is bad_wr's */
	if (__builtin_expect(bad != NULL, 0) && !ret)
		ret = EINVAL;
	k = ret ? (int)(bad - id->fab->swr) : n;
	if (ret && (k < 0 || k > n))
		k = 0;
	w->tail += (uint32_t)k;
	id->fab->posts += (uint64_t)k;
	/* An SRQ's QP: its receives complete on the SRQ's (hot) CQ; the send CQ, cold, would be
	 * learned late (epoll is asked every HOT_EPOLL_EVERY calls while a CQ is hot): heat it. */
	if (__builtin_expect(id->srq != NULL, 0) && k && !id->cq->hot)
		qsm_rc_cq_heat(id->fab, id->cq);
	if (posted)
		*posted = k;
	return ret ? (ret > 0 ? -ret : -EINVAL) : 0;
}

int qsm_rc_post_recv(struct qsm_fid *id, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
		     int num_sge)
{
	struct ibv_sge sge[QSM_FABRIC_MAX_SGE];
	struct ibv_recv_wr rwr, *bad;
	struct rc_slot *s;
	struct rc_wq *w;
	int ret;

	if (!id || !qsm_rc_fid_has_qp(id) || id->srq)
		return -EINVAL;   /* a QP on an SRQ has no receive queue: it takes the SRQ's */
	if (id->qp_err)
		return qsm_rc_post_late(id, WQ_RECV, NULL, 1, wr_id);
	w = &id->wq[WQ_RECV];
	if (w->tail - w->head >= w->cap)
		return -ENOBUFS;
	s = &w->ring[w->tail & w->mask];
	s->wr_id = wr_id;
	s->opcode = QSM_WR_RECV;
	s->signaled = true;
	qsm_rc_sges_to_ibv(sge, sg_list, num_sge);
	rwr.wr_id = id->qp_key | TAG_RECV | w->tail;
	rwr.next = NULL;
	rwr.sg_list = num_sge ? sge : NULL;
	rwr.num_sge = num_sge;
	ret = ibv_post_recv(id->cm->qp, &rwr, &bad);
	if (ret)
		return ret > 0 ? -ret : -EINVAL;
	w->tail++;
	id->fab->posts++;
	return 0;
}

/* One BIND_MW on the send queue, accounted and completed as any send WR; the window's new
 * rkey (the old one's key byte moved on) is reported at once and reaches memory once the bind
 * completed.  The runtime's door checked the window, the MR, the range and the access; what
 * the device finds wrong with the bind still comes back as its completion (MW_BIND_ERR). */
int qsm_rc_bind_mw(struct qsm_fid *id, uint64_t wr_id, struct qsm_fmw *mw, struct qsm_fmr *mr,
		   uint64_t addr, uint64_t len, int access, unsigned int flags, uint32_t *rkey)
{
	struct ibv_send_wr wr = { 0 }, *bad;
	struct rc_wq *w;
	struct rc_slot *s;
	int ret;

	if (!id || !rkey || !qsm_rc_fid_has_qp(id))
		return -EINVAL;
	if (id->qp_err)
		return qsm_rc_post_late(id, WQ_SEND, &(struct qsm_fabric_wr){ .wr_id = wr_id,
								     .opcode = QSM_WR_BIND_MW }, 1, 0);
	if (!id->qp_rts)
		return -EINVAL;   /* as post_send: rxe would queue it before RTS */
	w = &id->wq[WQ_SEND];
	if (w->tail - w->head >= w->cap)
		return -ENOBUFS;
	s = &w->ring[w->tail & w->mask];
	s->wr_id = wr_id;
	s->opcode = QSM_WR_BIND_MW;
	s->signaled = flags & QSM_POST_SIGNALED;
	wr.wr_id = id->qp_key | w->tail;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = s->signaled ? IBV_SEND_SIGNALED : 0;
	wr.bind_mw.mw = mw->mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info.mr = mr->mr;
	wr.bind_mw.bind_info.addr = addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = (access & QSM_ACCESS_REMOTE_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0) |
					       (access & QSM_ACCESS_REMOTE_READ ? IBV_ACCESS_REMOTE_READ : 0);
	ret = ibv_post_send(id->cm->qp, &wr, &bad);
	if (ret)
		return ret > 0 ? -ret : -EINVAL;
	mw->rkey = wr.bind_mw.rkey;
	*rkey = mw->rkey;
	w->tail++;
	id->fab->posts++;
	return 0;
}
