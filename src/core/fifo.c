/* rdma-qsm: the ctx's FIFO: every event on its way to an object, in order, private data
 * copied in; an object is freed through its ops once closed and no queued event points at it. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime.h"

/* ---- the FIFO ---- */

int qsm_fifo_push(struct qsm_ctx *ctx, struct qsm_item **slot)
{
	if (ctx->fifo_len == ctx->fifo_cap) {
		size_t cap = ctx->fifo_cap ? ctx->fifo_cap * 2 : 64;
		struct qsm_item *n = malloc(cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		for (size_t i = 0; i < ctx->fifo_len; i++)
			n[i] = ctx->fifo[(ctx->fifo_head + i) % ctx->fifo_cap];
		free(ctx->fifo);
		ctx->fifo = n;
		ctx->fifo_cap = cap;
		ctx->fifo_head = 0;
	}
	*slot = &ctx->fifo[(ctx->fifo_head + ctx->fifo_len) % ctx->fifo_cap];
	ctx->fifo_len++;
	if (!ctx->kicked) {
		uint64_t one = 1;

		ctx->kicked = write(ctx->kickfd, &one, sizeof(one)) == sizeof(one);
	}
	return 0;
}

/* Queue an event for an object; it is dispatched after everything queued before it. */
int qsm_post(struct qsm_ctx *ctx, struct qsm_obj *target, int event, int status)
{
	struct qsm_item *it;
	int r = qsm_fifo_push(ctx, &it);

	if (r < 0)
		return r;
	it->target = target;
	it->id = NULL;
	it->gen = target->id_gen;
	it->event = event;
	it->status = status;
	it->pdata_len = 0;
	target->refs++;
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
	it->target = target;
	it->gen = target->id_gen;
	target->refs++;
	return 0;
}

void qsm_obj_put(struct qsm_ctx *ctx, struct qsm_obj *o)
{
	(void)ctx;
	if (--o->refs || !o->closed)
		return;
	o->ops->free(o);
}
