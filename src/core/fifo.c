/* rdma-qsm: the ctx's FIFO: every event on its way to an object, in order, private data
 * copied in; an object is freed through its ops once closed and no queued event points at it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fifo.h"

#define FIFO_MIN 64

/* The ring at a new capacity (a power of two: slots are masked), its items in order from
 * slot 0.  -ENOMEM leaves it as it was.  The old ring goes at once unless an item that is
 * being dispatched lies in it (pinned): then it goes when that item returns. */
static int fifo_resize(struct qsm_ctx *ctx, size_t cap)
{
	size_t nretired = sizeof(ctx->fifo_retired) / sizeof(ctx->fifo_retired[0]);
	struct qsm_item *n;

	if (ctx->fifo_pinned && ctx->fifo_nretired == nretired)
		return -ENOMEM;
	n = malloc(cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (size_t i = 0; i < ctx->fifo_len; i++)
		n[i] = ctx->fifo[(ctx->fifo_head + i) & (ctx->fifo_cap - 1)];
	if (ctx->fifo_pinned)
		ctx->fifo_retired[ctx->fifo_nretired++] = ctx->fifo;
	else
		free(ctx->fifo);
	ctx->fifo = n;
	ctx->fifo_cap = cap;
	ctx->fifo_head = 0;
	ctx->fifo_pinned = 0; /* what is pinned is in the retired ring */
	ctx->counters.fifo_bytes = cap * sizeof(*n);
	return 0;
}

/* The ring grown (doubled) until it has `want` slots: 0, or -ENOMEM as it was. */
static int fifo_grow(struct qsm_ctx *ctx, size_t want)
{
	size_t cap = ctx->fifo_cap ? ctx->fifo_cap : FIFO_MIN;

	while (cap < want)
		cap *= 2;
	return cap == ctx->fifo_cap ? 0 : fifo_resize(ctx, cap);
}

int qsm_fifo_reserve(struct qsm_ctx *ctx, size_t n)
{
	/* A downcall's item may hold any slot beyond the reserve: the new room comes on top of
	 * everything queued or pinned now. */
	if (fifo_grow(ctx, ctx->fifo_len + ctx->fifo_pinned + ctx->fifo_reserve + n) < 0)
		return -ENOMEM;
	ctx->fifo_reserve += n;
	return 0;
}

void qsm_fifo_unreserve(struct qsm_ctx *ctx, size_t n)
{
	ctx->fifo_reserve -= n;
}

/* What both pushes share once the slot is there. */
static int fifo_take(struct qsm_ctx *ctx, struct qsm_item **slot)
{
	*slot = &ctx->fifo[(ctx->fifo_head + ctx->fifo_len) & (ctx->fifo_cap - 1)];
	ctx->fifo_len++;
	if (ctx->fifo_len > ctx->fifo_hwm)
		ctx->fifo_hwm = ctx->fifo_len;
	if (!ctx->kicked && !ctx->dispatching)
		qsm_fifo_kick(ctx); /* inside a pass, the pass takes it: no system call */
	return 0;
}

/* qsm_fifo_push(), when the ring is full or the fd must say there is work.  Full: only past
 * the reserve (a bug in its bound), so growing is a last resort that cannot fail in practice. */
int qsm_fifo_push_slow(struct qsm_ctx *ctx, struct qsm_item **slot)
{
	if (ctx->fifo_len + ctx->fifo_pinned == ctx->fifo_cap &&
	    fifo_resize(ctx, ctx->fifo_cap ? ctx->fifo_cap * 2 : FIFO_MIN) < 0)
		return -ENOMEM;
	return fifo_take(ctx, slot);
}

/* qsm_fifo_push_op(), when the slots beyond the reserve are taken or the fd must say there is
 * work: the ring grows for the downcall, or the downcall fails. */
int qsm_fifo_push_op_slow(struct qsm_ctx *ctx, struct qsm_item **slot)
{
	if (fifo_grow(ctx, ctx->fifo_len + ctx->fifo_pinned + ctx->fifo_reserve + 1) < 0)
		return -ENOMEM;
	return fifo_take(ctx, slot);
}

/*
 * After a burst (a connect storm of 100k queues leaves a ring of ~40 MB), give memory back:
 * at the end of a dispatch pass that left the FIFO empty, size it to twice what the pass
 * queued (a power of two, at least FIFO_MIN) when that is under a quarter of it.  A steady
 * load keeps the room it uses; a ring never shrinks while it holds an item.
 */
void qsm_fifo_trim(struct qsm_ctx *ctx)
{
	size_t want = FIFO_MIN, keep = FIFO_MIN;

	while (want < 2 * ctx->fifo_hwm)
		want *= 2;
	ctx->fifo_hwm = 0;
	/* never below the reserve: the live objects' events need no allocation */
	while (keep < ctx->fifo_reserve)
		keep *= 2;
	if (ctx->fifo_len || ctx->fifo_cap < 4 * want || ctx->fifo_cap <= keep)
		return;
	fifo_resize(ctx, want > keep ? want : keep); /* -ENOMEM: keep the larger one, nothing lost */
}

/* The rings that grew while an item in them was dispatched: that item has returned. */
void qsm_fifo_free_retired(struct qsm_ctx *ctx)
{
	while (ctx->fifo_nretired)
		free(ctx->fifo_retired[--ctx->fifo_nretired]);
}

/* Make the ctx's fd readable: there is queued work for the next qsm_ctx_dispatch(). */
void qsm_fifo_kick(struct qsm_ctx *ctx)
{
	uint64_t one = 1;

	ctx->kicked = write(ctx->kickfd, &one, sizeof(one)) == sizeof(one);
}

/* An event for target, in a slot of the reserve if need be. */
int qsm_post(struct qsm_ctx *ctx, struct qsm_obj *target, int event, int status)
{
	struct qsm_item *it;
	int r = qsm_fifo_push(ctx, &it);

	if (r == 0)
		qsm_item_fill(it, target, event, status);
	return r;
}


int qsm_item_set_pdata(struct qsm_item *it, const void *pdata, size_t len)
{
	it->pdata = NULL;
	it->pdata_len = 0;
	if (!len)
		return 0;
	if (len > QSM_FABRIC_PDATA_MAX)
		len = QSM_FABRIC_PDATA_MAX;
	it->pdata = malloc(len);
	if (!it->pdata)
		return -ENOMEM;
	memcpy(it->pdata, pdata, len);
	it->pdata_len = (uint32_t)len;
	return 0;
}

/* Queue a copy of an item (its id and private data) for another object. */
int qsm_post_copy(struct qsm_ctx *ctx, struct qsm_obj *target, const struct qsm_item *src)
{
	struct qsm_item *it;
	int r = qsm_fifo_push(ctx, &it);

	if (r < 0)
		return r;
	*it = *src;
	it->pdata_len = 0;
	if (qsm_item_set_pdata(it, src->pdata, src->pdata_len) < 0) {
		ctx->fifo_len--;   /* the slot just pushed goes back */
		return -ENOMEM;
	}
	it->target = target;
	it->gen = target->id_gen;
	target->refs++;
	return 0;
}
