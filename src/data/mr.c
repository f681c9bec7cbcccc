/* rdma-qsm: a queue's memory regions: owned by the queue, registered on its device, released
 * with the device (the handle stays valid, its keys do not) or with the queue. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "argcheck.h"
#include "data/data.h"

/* Whether q may make an MR or a window now (the fabric can: supported): 0, or why not. */
static int key_door(const struct qsm_conn *q, bool supported)
{
	if (q->dead)
		return -ESTALE;
	if (!q->du.dev || !qsm_device_usable(q->du.dev))
		return -ENODEV;
	return supported ? 0 : -EOPNOTSUPP;
}

int qsm_conn_reg_mr(struct qsm_conn *q, void *addr, size_t len, int access, struct qsm_mr **ret)
{
	struct qsm_mr *mr;
	int r;

	qsm_check(q && ret && qsm_mr_args_valid(addr, len, access), -EINVAL);
	if ((r = key_door(q, q->ctx->ops->reg_mr != NULL)) < 0)
		return r;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	r = q->ctx->ops->reg_mr(q->du.dev->fdev, addr, len, access, &mr->fmr, &mr->lkey, &mr->rkey);
	if (r < 0) {
		free(mr);
		return r;
	}
	mr->q = q;
	mr->dev = q->du.dev;
	mr->addr = (uintptr_t)addr;
	mr->len = len;
	mr->access = access;
	qsm_hlist_add(&q->mrs, &mr->node);
	*ret = mr;
	return 0;
}

/* Refused (-EBUSY) while a window is bound to it: the handle and the registration stay, so the
 * ULP does not free memory the peer can still write through the window. */
int qsm_mr_dereg(struct qsm_mr *mr)
{
	int r;

	qsm_check(mr, -EINVAL);
	if ((r = qsm_mr_release(mr)) < 0)
		return r;
	qsm_hlist_del(&mr->node);
	free(mr);
	return 0;
}

uint32_t qsm_mr_lkey(const struct qsm_mr *mr)
{
	qsm_check(mr, 0); /* 0: no key (keys are 32-bit, so no errno fits) */
	return mr->lkey;
}

uint32_t qsm_mr_rkey(const struct qsm_mr *mr)
{
	qsm_check(mr, 0);
	return mr->rkey;
}

int qsm_mr_valid(const struct qsm_mr *mr)
{
	return mr && mr->fmr;
}

int qsm_conn_alloc_mw(struct qsm_conn *q, struct qsm_mw **ret)
{
	struct qsm_mw *mw;
	int r;

	qsm_check(q && ret, -EINVAL);
	if ((r = key_door(q, q->ctx->ops->alloc_mw != NULL)) < 0)
		return r;
	mw = calloc(1, sizeof(*mw));
	if (!mw)
		return -ENOMEM;
	r = q->ctx->ops->alloc_mw(q->du.dev->fdev, &mw->fmw);
	if (r < 0) {
		free(mw);
		return r;
	}
	mw->q = q;
	qsm_hlist_add(&q->mws, &mw->node);
	*ret = mw;
	return 0;
}

int qsm_mw_free(struct qsm_mw *mw)
{
	qsm_check(mw, -EINVAL);
	qsm_mw_release(mw);
	qsm_hlist_del(&mw->node);
	free(mw);
	return 0;
}

uint32_t qsm_mw_rkey(const struct qsm_mw *mw)
{
	qsm_check(mw, 0);
	return mw->rkey;
}

/* A pool's keys for q: those of its registration on q's device. */
int qsm_pool_keys(const struct qsm_pool *pool, const struct qsm_conn *q, uint32_t *lkey,
		  uint32_t *rkey)
{
	qsm_check(pool && q && !(q->ctx != pool->ctx), -EINVAL);
	return qsm_pool_keys_on(pool, q->du.dev, lkey, rkey);
}
