/* rdma-qsm: the data path of a queue: its memory regions (owned by the queue, released with its
 * device), work requests on its QP, completions handed to the class's completion handler. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime.h"

/*
 * What ibv_reg_mr refuses whatever the device: checked here, at the door, so that a caller's
 * mistake is -EINVAL in every state (not -ENODEV before a device is attached), and so that a
 * pool taken while the registry holds no device cannot fail later, unseen, on each device.
 */
static bool mr_args_valid(const void *addr, size_t len, int access)
{
	if (!addr || !len || (uintptr_t)addr + len < (uintptr_t)addr)
		return false;
	if (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ))
		return false;
	/* remote write needs local write (ibv_reg_mr(3)) */
	return !(access & QSM_ACCESS_REMOTE_WRITE) || (access & QSM_ACCESS_LOCAL_WRITE);
}

int qsm_conn_reg_mr(struct qsm_conn *q, void *addr, size_t len, int access, struct qsm_mr **ret)
{
	struct qsm_mr *mr;
	int r;

	if (!q || !ret || q->dead || !mr_args_valid(addr, len, access))
		return -EINVAL;
	if (!q->dev || q->dev->removing)
		return -ENODEV;
	if (!q->ctx->ops->reg_mr)
		return -EOPNOTSUPP;
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
	if (!mr)
		return -EINVAL;
	mr_release(mr);
	qsm_list_del(&mr->node);
	free(mr);
	return 0;
}

/* The device goes (or the queue moves to another one, or closes): deregister everything;
 * the handles stay the ULP's unless the queue itself is being freed. */
void qsm_conn_release_mrs(struct qsm_conn *q, bool free_handles)
{
	struct qsm_list *n, *next;

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
	return mr ? mr->lkey : 0;
}

uint32_t qsm_mr_rkey(const struct qsm_mr *mr)
{
	return mr ? mr->rkey : 0;
}

int qsm_mr_valid(const struct qsm_mr *mr)
{
	return mr && mr->fmr;
}

/* Once the drain marker is posted, a new WR would complete after DRAINED, when the QP is
 * already gone: refuse it, the buffer stays the ULP's.  The machine says which states drain. */
static bool draining(const struct qsm_conn *q)
{
	return q->sm->facts[q->state].drains;
}

/* ---- pools: one registration per device of the registry ---- */

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
	reg->pool->ctx->ops->dereg_mr(reg->fmr);
	qsm_list_del(&reg->pool_node);
	qsm_list_del(&reg->dev_node);
	free(reg);
}

int qsm_ctx_reg_pool(struct qsm_ctx *ctx, void *addr, size_t len, int access, struct qsm_pool **ret)
{
	struct qsm_pool *pool;
	struct qsm_list *n, *tmp;
	int r = 0;

	if (!ctx || !ret || !mr_args_valid(addr, len, access))
		return -EINVAL;
	if (!ctx->ops->reg_mr)
		return -EOPNOTSUPP;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	*pool = (struct qsm_pool){ .ctx = ctx, .addr = addr, .len = len, .access = access };
	qsm_list_init(&pool->regs);
	qsm_list_each(n, tmp, &ctx->devices) {
		struct qsm_device *d = qsm_container_of(n, struct qsm_device, node);

		if (!d->removing && (r = pool_reg_on(pool, d)) < 0)
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

int qsm_pool_keys(const struct qsm_pool *pool, const struct qsm_conn *q, uint32_t *lkey,
		  uint32_t *rkey)
{
	const struct qsm_list *n;

	if (!pool || !q || q->ctx != pool->ctx)
		return -EINVAL;
	for (n = pool->regs.next; n != &pool->regs; n = n->next) {
		const struct qsm_pool_reg *reg = qsm_container_of(n, struct qsm_pool_reg, pool_node);

		if (reg->dev == q->dev && !reg->dev->removing) {
			if (lkey)
				*lkey = reg->lkey;
			if (rkey)
				*rkey = reg->rkey;
			return 0;
		}
	}
	return -ENODEV;
}

int qsm_pool_dereg(struct qsm_pool *pool)
{
	if (!pool)
		return -EINVAL;
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

void qsm_pools_free(struct qsm_ctx *ctx)
{
	while (!qsm_list_empty(&ctx->pools))
		qsm_pool_dereg(qsm_container_of(ctx->pools.next, struct qsm_pool, node));
}

static int check_sge(const struct qsm_sge *sge, int nsge)
{
	if (nsge < 0 || nsge > QSM_MAX_SGE || (nsge && !sge))
		return -EINVAL;
	return 0;
}

static int post(struct qsm_conn *q, enum qsm_wr_opcode op, uint64_t wr_id, const struct qsm_sge *sge,
		int nsge, uint64_t remote_addr, uint32_t rkey, unsigned int flags)
{
	struct qsm_fabric_wr wr = {
		.wr_id = wr_id, .opcode = op, .sg_list = sge, .num_sge = nsge,
		.remote_addr = remote_addr, .rkey = rkey, .signaled = flags & QSM_POST_SIGNALED,
	};
	int r;

	if (!q || q->dead || (flags & ~QSM_POST_SIGNALED) || (r = check_sge(sge, nsge)) < 0)
		return -EINVAL;
	if (!q->id || !qsm_conn_has_qp(q) || draining(q))
		return -ENOTCONN;
	if (!q->ctx->ops->post_send)
		return -EOPNOTSUPP;
	return q->ctx->ops->post_send(q->id, &wr);
}

int qsm_conn_post_send(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sge, int nsge,
		       unsigned int flags)
{
	return post(q, QSM_WR_SEND, wr_id, sge, nsge, 0, 0, flags);
}

int qsm_conn_post_write(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sge, int nsge,
			uint64_t remote_addr, uint32_t rkey, unsigned int flags)
{
	return post(q, QSM_WR_RDMA_WRITE, wr_id, sge, nsge, remote_addr, rkey, flags);
}

int qsm_conn_post_read(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sge, int nsge,
		       uint64_t remote_addr, uint32_t rkey, unsigned int flags)
{
	return post(q, QSM_WR_RDMA_READ, wr_id, sge, nsge, remote_addr, rkey, flags);
}

int qsm_conn_post_recv(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sge, int nsge)
{
	if (!q || q->dead || check_sge(sge, nsge) < 0)
		return -EINVAL;
	if (!q->id || !qsm_conn_has_qp(q) || draining(q))
		return -ENOTCONN;
	if (!q->ctx->ops->post_recv)
		return -EOPNOTSUPP;
	return q->ctx->ops->post_recv(q->id, wr_id, sge, nsge);
}
