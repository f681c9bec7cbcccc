/* rdma-qsm: a queue's memory regions: owned by the queue, registered on its device, released
 * with the device (the handle stays valid, its keys do not) or with the queue. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "argcheck.h"
#include "runtime.h"

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
		       QSM_ACCESS_MW_BIND))
		return false;
	/* remote write needs local write (ibv_reg_mr(3)) */
	return !(access & QSM_ACCESS_REMOTE_WRITE) || (access & QSM_ACCESS_LOCAL_WRITE);
}

/* Whether q may make an MR or a window now (the fabric can: supported): 0, or why not. */
static int key_door(const struct qsm_conn *q, bool supported)
{
	if (q->dead)
		return -ESTALE;
	if (!q->dev || !qsm_device_usable(q->dev))
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
	r = q->ctx->ops->reg_mr(q->dev->fdev, addr, len, access, &mr->fmr, &mr->lkey, &mr->rkey);
	if (r < 0) {
		free(mr);
		return r;
	}
	mr->q = q;
	mr->dev = q->dev;
	qsm_list_add_tail(&q->mrs, &mr->node);
	*ret = mr;
	return 0;
}

static void mr_release(struct qsm_mr *mr)
{
	if (mr->fmr) {
		mr->q->ctx->ops->dereg_mr(mr->fmr);
		mr->fmr = NULL;
		mr->lkey = mr->rkey = 0;
	}
}

int qsm_mr_dereg(struct qsm_mr *mr)
{
	qsm_check(mr, -EINVAL);
	mr_release(mr);
	qsm_list_del(&mr->node);
	free(mr);
	return 0;
}

static void mw_release(struct qsm_mw *mw)
{
	if (mw->fmw) {
		mw->q->ctx->ops->dealloc_mw(mw->fmw);
		mw->fmw = NULL;
		mw->rkey = 0;
	}
}

/* The device goes (or the queue moves to another one, or closes): deregister everything,
 * windows first (they are bound to the MRs); the handles stay the ULP's unless the queue
 * itself is being freed. */
void qsm_conn_release_mrs(struct qsm_conn *q, bool free_handles)
{
	struct qsm_list *n, *next;

	for (n = q->mws.next; n != &q->mws; n = next) {
		struct qsm_mw *mw = qsm_container_of(n, struct qsm_mw, node);

		next = n->next;
		mw_release(mw);
		if (free_handles) {
			qsm_list_del(&mw->node);
			free(mw);
		}
	}

	for (n = q->mrs.next; n != &q->mrs; n = next) {
		struct qsm_mr *mr = qsm_container_of(n, struct qsm_mr, node);

		next = n->next;
		mr_release(mr);
		if (free_handles) {
			qsm_list_del(&mr->node);
			free(mr);
		}
	}
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
	r = q->ctx->ops->alloc_mw(q->dev->fdev, &mw->fmw);
	if (r < 0) {
		free(mw);
		return r;
	}
	mw->q = q;
	qsm_list_add_tail(&q->mws, &mw->node);
	*ret = mw;
	return 0;
}

int qsm_mw_free(struct qsm_mw *mw)
{
	qsm_check(mw, -EINVAL);
	mw_release(mw);
	qsm_list_del(&mw->node);
	free(mw);
	return 0;
}

uint32_t qsm_mw_rkey(const struct qsm_mw *mw)
{
	qsm_check(mw, 0);
	return mw->rkey;
}
