/* rdma-qsm internal, core/: the ctx's FIFO of items (fifo.c): events queued to objects and
 * dispatched in order, one pass at a time; the push and pop are inline, growing is not. */
#ifndef QSM_CORE_FIFO_H
#define QSM_CORE_FIFO_H

#include <stdlib.h>

#include "core/ctx.h"

/*
 * No event is lost to memory: the ring always has a slot for every event the live objects
 * may have queued at once, reserved when each object is made (-ENOMEM fails the making).  An
 * object has at most QSM_OBJ_EVENTS of its own queued: every event but a downcall's is queued
 * into an empty FIFO (a timer's expiry, a fabric event's step, the registry's fan-out, an error
 * completion's WC_ERROR: at most one each, for each object it reaches), or by a step of the
 * object taking one of its own items (a failed action's feedback, GIVE_UP, LISTEN), which
 * frees that one.  QSM_FIFO_PIN_SLACK more for the items a pass pins (a nested pass pops no
 * more than that).  Downcalls queue only beyond the reserve, growing the ring if they must:
 * -ENOMEM to their caller.
 */
#define QSM_OBJ_EVENTS 1
#define QSM_FIFO_PIN_SLACK 16

int qsm_fifo_push_slow(struct qsm_ctx *ctx, struct qsm_item **slot);
int qsm_fifo_push_op_slow(struct qsm_ctx *ctx, struct qsm_item **slot);
/* Room for n more objects' events: 0, or -ENOMEM (nothing reserved) for the object's maker. */
int qsm_fifo_reserve(struct qsm_ctx *ctx, size_t n);
void qsm_fifo_unreserve(struct qsm_ctx *ctx, size_t n);
void qsm_fifo_trim(struct qsm_ctx *ctx);
void qsm_fifo_kick(struct qsm_ctx *ctx);
void qsm_fifo_free_retired(struct qsm_ctx *ctx);
/* An event to target, queued (a downcall's, a timer's, the fan-out's): dispatched next. */
int qsm_post(struct qsm_ctx *ctx, struct qsm_obj *target, int event, int status);
int qsm_post_copy(struct qsm_ctx *ctx, struct qsm_obj *target, const struct qsm_item *src);
/* A copy of len bytes of private data for an item (NULL and 0: none): 0 or -ENOMEM. */
int qsm_item_set_pdata(struct qsm_item *it, const void *pdata, size_t len);

/* A slot at the FIFO's tail for the caller to fill (the ring's size is a power of two).
 * Out of line only to grow the ring, or to make the fd readable outside a pass. */
static inline int qsm_fifo_push(struct qsm_ctx *ctx, struct qsm_item **slot)
{
	if (ctx->fifo_len + ctx->fifo_pinned == ctx->fifo_cap || (!ctx->dispatching && !ctx->kicked))
		return qsm_fifo_push_slow(ctx, slot);
	*slot = &ctx->fifo[(ctx->fifo_head + ctx->fifo_len++) & (ctx->fifo_cap - 1)];
	if (ctx->fifo_len > ctx->fifo_hwm)
		ctx->fifo_hwm = ctx->fifo_len;
	return 0;
}

/* qsm_fifo_push() for a downcall: never into the reserve. */
static inline int qsm_fifo_push_op(struct qsm_ctx *ctx, struct qsm_item **slot)
{
	if (ctx->fifo_len + ctx->fifo_pinned + ctx->fifo_reserve >= ctx->fifo_cap ||
	    (!ctx->dispatching && !ctx->kicked))
		return qsm_fifo_push_op_slow(ctx, slot);
	*slot = &ctx->fifo[(ctx->fifo_head + ctx->fifo_len++) & (ctx->fifo_cap - 1)];
	if (ctx->fifo_len > ctx->fifo_hwm)
		ctx->fifo_hwm = ctx->fifo_len;
	return 0;
}

/* A slot just pushed, for target: an event of no id, with no private data; target is held
 * while it is queued. */
static inline void qsm_item_fill(struct qsm_item *it, struct qsm_obj *target, int event, int status)
{
	it->target = target;
	it->id = NULL;
	it->gen = target->id_gen;
	it->event = event;
	it->status = status;
	it->pdata_len = 0;
	target->refs++;
}

/* A downcall's event (the ULP's call): queued beyond the reserve, -ENOMEM to the caller.
 * Inline: a downcall is a handler's usual answer (READY from the connected handler). */
static inline int qsm_post_op(struct qsm_ctx *ctx, struct qsm_obj *target, int event, int status)
{
	struct qsm_item *it;
	int r = qsm_fifo_push_op(ctx, &it);

	if (r == 0)
		qsm_item_fill(it, target, event, status);
	return r;
}

/* The FIFO's head, taken off it but left in its slot (no copy): pinned until the pass's
 * outermost item returns (qsm_fifo_unpin), so that nothing queued meanwhile overwrites it. */
static inline struct qsm_item *qsm_fifo_pop(struct qsm_ctx *ctx)
{
	struct qsm_item *it = &ctx->fifo[ctx->fifo_head];

	ctx->fifo_head = (ctx->fifo_head + 1) & (ctx->fifo_cap - 1);
	ctx->fifo_len--;
	ctx->fifo_pinned++;
	return it;
}

/* An item is done with (dispatched, or dropped): what it owns goes. */
static inline void qsm_item_done(struct qsm_item *it)
{
	if (it->pdata_len) {
		free(it->pdata);
		it->pdata_len = 0;
	}
}

/* The pass's outermost item returned: no popped item is read any more. */
static inline void qsm_fifo_unpin(struct qsm_ctx *ctx)
{
	ctx->fifo_pinned = 0;
	if (ctx->fifo_nretired)
		qsm_fifo_free_retired(ctx);
}

#endif
