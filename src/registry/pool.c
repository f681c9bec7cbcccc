/* rdma-qsm: pools: memory registered once per device of the registry for every queue of a ctx,
 * on each device as it is taken into use, released when it goes (so removal completes). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "argcheck.h"
#include "registry/registry.h"

/*
 * What ibv_reg_mr refuses whatever the device: checked here, at the door, so that a caller's
 * mistake is -EINVAL in every state (not -ENODEV before a device is attached), and so that a
 * pool taken while the registry holds no device cannot fail later, unseen, on each device.
 */
bool qsm_mr_args_valid(const void *addr, size_t len, int access)
{
	if (!addr || !len || (uintptr_t)addr + len < (uintptr_t)addr)
		return false;
	if (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ |
		       QSM_ACCESS_MW_BIND | QSM_ACCESS_READ_SINK))
		return false;
	/* remote write needs local write (ibv_reg_mr(3)) */
	return !(access & QSM_ACCESS_REMOTE_WRITE) || (access & QSM_ACCESS_LOCAL_WRITE);
}

/* ---- pools: one registration per device of the registry ---- */

static void pools_free(struct qsm_ctx *ctx);

static int pool_reg_on(struct qsm_pool *pool, struct qsm_device *d)
{
	struct qsm_pool_reg *reg = calloc(1, sizeof(*reg));
	int r;

	if (!reg)
		return -ENOMEM;
	r = pool->ctx->ops->reg_mr(d->fdev, pool->addr, pool->len, pool->access, &reg->fmr,
				   &reg->lkey, &reg->rkey);
	if (r < 0) {
		free(reg);
		return r;
	}
	reg->pool = pool;
	reg->dev = d;
	qsm_list_add_tail(&pool->regs, &reg->pool_node);
	qsm_list_add_tail(&d->pool_regs, &reg->dev_node);
	return 0;
}

static void pool_reg_drop(struct qsm_pool_reg *reg)
{
	/* no window is ever bound to a pool's MR (a bind names a queue's own MR), so no -EBUSY */
	(void)reg->pool->ctx->ops->dereg_mr(reg->fmr);
	qsm_list_del(&reg->pool_node);
	qsm_list_del(&reg->dev_node);
	free(reg);
}

int qsm_ctx_reg_pool(struct qsm_ctx *ctx, void *addr, size_t len, int access, struct qsm_pool **ret)
{
	struct qsm_pool *pool;
	struct qsm_list *n, *tmp;
	int r = 0;

	qsm_check(ctx && ret && !(!qsm_mr_args_valid(addr, len, access)), -EINVAL);
	if (!ctx->ops->reg_mr)
		return -EOPNOTSUPP;
	if ((r = qsm_ctx_on_free(ctx, pools_free)) < 0)
		return r;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	*pool = (struct qsm_pool){ .ctx = ctx, .addr = addr, .len = len, .access = access };
	qsm_list_init(&pool->regs);
	qsm_list_each(n, tmp, &ctx->objs[QSM_OBJ_DEVICE]) {
		struct qsm_device *d = qsm_container_of(n, struct qsm_device, obj.node);

		if (qsm_device_usable(d) && (r = pool_reg_on(pool, d)) < 0)
			break;
	}
	if (r < 0) {
		/* all or nothing: a pool the caller never got must hold nothing */
		while (!qsm_list_empty(&pool->regs))
			pool_reg_drop(qsm_container_of(pool->regs.next, struct qsm_pool_reg, pool_node));
		free(pool);
		return r;
	}
	qsm_list_add_tail(&ctx->pools, &pool->node);
	*ret = pool;
	return 0;
}

int qsm_pool_keys_on(const struct qsm_pool *pool, const struct qsm_device *d, uint32_t *lkey,
		   uint32_t *rkey)
{
	const struct qsm_list *n;

	for (n = pool->regs.next; n != &pool->regs; n = n->next) {
		const struct qsm_pool_reg *reg = qsm_container_of(n, struct qsm_pool_reg, pool_node);

		if (d && reg->dev == d && qsm_device_usable(reg->dev)) {
			if (lkey)
				*lkey = reg->lkey;
			if (rkey)
				*rkey = reg->rkey;
			return 0;
		}
	}
	return -ENODEV;
}


int qsm_pool_srq_keys(const struct qsm_pool *pool, const struct qsm_srq *s, uint32_t *lkey,
		      uint32_t *rkey)
{
	qsm_check(pool && s && !(s->dev->ctx != pool->ctx), -EINVAL);
	return qsm_pool_keys_on(pool, s->dev, lkey, rkey);
}

int qsm_pool_dereg(struct qsm_pool *pool)
{
	qsm_check(pool, -EINVAL);
	while (!qsm_list_empty(&pool->regs))
		pool_reg_drop(qsm_container_of(pool->regs.next, struct qsm_pool_reg, pool_node));
	qsm_list_del(&pool->node);
	free(pool);
	return 0;
}

/* A device enters the registry: every pool gets registered there.  A failure leaves that
 * pool without keys on the device (qsm_pool_keys: -ENODEV), counted. */
void qsm_pools_attach_device(struct qsm_device *d)
{
	struct qsm_list *n, *tmp;

	qsm_list_each(n, tmp, &d->ctx->pools)
		if (pool_reg_on(qsm_container_of(n, struct qsm_pool, node), d) < 0)
			d->ctx->counters.action_errors++;
}

/* The registry lets a device go: its pool registrations go with it. */
void qsm_pools_detach_device(struct qsm_device *d)
{
	while (!qsm_list_empty(&d->pool_regs))
		pool_reg_drop(qsm_container_of(d->pool_regs.next, struct qsm_pool_reg, dev_node));
}

static void pools_free(struct qsm_ctx *ctx)
{
	while (!qsm_list_empty(&ctx->pools))
		qsm_pool_dereg(qsm_container_of(ctx->pools.next, struct qsm_pool, node));
}
