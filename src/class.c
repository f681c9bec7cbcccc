/* rdma-qsm: classes.  A slot a class leaves empty is looked up in its super class, ending
 * in the base class its caller names (qsm_base_class, src/queue/base.c). */
#include <stddef.h>
#include <stdlib.h>

#include "class.h"

/* The next class to look in: the super, ending in the base class even if `super` is unset. */
static const struct qsm_class *up(const struct qsm_class *k, const struct qsm_class *base)
{
	return k->super ? k->super : (k == base ? NULL : base);
}

/* The first non-empty `slot` from class c up to the base class. */
#define RESOLVE(dst, c, slot) do { \
		for (const struct qsm_class *k = (c); k && !(dst); k = up(k, base)) \
			(dst) = k->slot; \
	} while (0)

_Static_assert(QSM_CM_STATE_COUNT <= 32 && QSM_ACCEPT_STATE_COUNT <= 32, "a state is a bit of a mask");
_Static_assert(QSM_CM_STATE_COUNT <= QSM_CLASS_STATE_ROOM &&
	       QSM_ACCEPT_STATE_COUNT <= QSM_CLASS_STATE_ROOM, "qsm_class has no room for every state");

static const struct qsm_fabric_qp_attr default_qp = {
	.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1,
};

/* The QP caps of the first class that sets any; the library default for what it leaves 0. */
static void resolve_qp(struct qsm_fabric_qp_attr *a, const struct qsm_class *c)
{
	*a = default_qp;
	for (const struct qsm_class *k = c; k; k = k->super) {
		const struct qsm_qp_caps *q = &k->qp;

		if (!q->max_send_wr && !q->max_recv_wr)
			continue;
		a->max_send_wr = q->max_send_wr ? q->max_send_wr : a->max_send_wr;
		a->max_recv_wr = q->max_recv_wr ? q->max_recv_wr : a->max_recv_wr;
		a->max_send_sge = q->max_send_sge ? q->max_send_sge : a->max_send_sge;
		a->max_recv_sge = q->max_recv_sge ? q->max_recv_sge : a->max_recv_sge;
		a->max_inline_data = q->max_inline_data;
		return;
	}
}

/* No WR carries more than QSM_MAX_SGE SGEs (the door's limit, the fabrics' arrays), so a cap
 * above it could never be used: accepted, the queue would go LIVE on a promise the library
 * cannot keep.  Every class of the chain is checked, not only the one whose caps apply, as
 * the comp_mask is: such a class is a mistake wherever it stands. */
bool qsm_class_caps_ok(const struct qsm_class *c)
{
	for (const struct qsm_class *k = c; k; k = k->super)
		if (k->qp.max_send_sge > QSM_MAX_SGE || k->qp.max_recv_sge > QSM_MAX_SGE ||
		    k->srq.max_sge > QSM_MAX_SGE)
			return false;
	return true;
}

/* Every slot looked up once per class and ctx (a ctx is one thread: no locking), so the
 * dispatch path reads a table; freed with the ctx. */
static void vtables_free(struct qsm_ctx *ctx)
{
	while (ctx->vtables) {
		struct qsm_vtable *vt = ctx->vtables;

		ctx->vtables = vt->next;
		free(vt);
	}
}

const struct qsm_vtable *qsm_vtable_get(struct qsm_ctx *ctx, const struct qsm_class *c,
					const struct qsm_class *base)
{
	struct qsm_vtable *vt;

	for (vt = ctx->vtables; vt; vt = vt->next)
		if (vt->cls == c)
			return vt;
	vt = calloc(1, sizeof(*vt));
	if (!vt || qsm_ctx_on_free(ctx, vtables_free) < 0) {
		free(vt);
		return NULL;
	}
	vt->cls = c;
	for (int st = 0; st < QSM_CM_STATE_COUNT; st++) {
		RESOLVE(vt->state[0][st].enter, c, active[st].enter);
		RESOLVE(vt->state[0][st].exit, c, active[st].exit);
		RESOLVE(vt->state[0][st].on_event, c, active[st].on_event);
	}
	for (int st = 0; st < QSM_ACCEPT_STATE_COUNT; st++) {
		RESOLVE(vt->state[1][st].enter, c, passive[st].enter);
		RESOLVE(vt->state[1][st].exit, c, passive[st].exit);
		RESOLVE(vt->state[1][st].on_event, c, passive[st].on_event);
	}
	for (int pas = 0; pas < 2; pas++)
		for (int st = 0; st < QSM_CM_STATE_COUNT; st++) {
			const struct qsm_state_handlers *h = &vt->state[pas][st];

			if (h->on_event || h->exit)
				vt->leave_mask[pas] |= 1u << st;
			if (h->enter)
				vt->enter_mask[pas] |= 1u << st;
		}
	RESOLVE(vt->unexpected, c, unexpected);
	RESOLVE(vt->device_removed, c, device_removed);
	RESOLVE(vt->qp_ready, c, qp_ready);
	RESOLVE(vt->completion, c, completion);
	RESOLVE(vt->release, c, release);
	RESOLVE(vt->srq_low, c, srq_low);
	/* the largest priv_size along the chain: a subclass embeds its super's struct */
	for (const struct qsm_class *k = c; k; k = k->super)
		if (k->priv_size > vt->priv_size)
			vt->priv_size = k->priv_size;
	resolve_qp(&vt->qp, c);
	for (const struct qsm_class *k = c; k && !vt->srq.max_wr; k = k->super)
		vt->srq = k->srq;   /* the first class that asks for an SRQ, as its whole */
	vt->next = ctx->vtables;
	ctx->vtables = vt;
	return vt;
}
