/* rdma-qsm: work requests on a queue's QP: checked at the door, refused while the queue
 * drains (the machine says where), completions handed to the class's completion handler. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "argcheck.h"
#include "data/data.h"

/* Once the drain marker is posted, a new WR would complete after DRAINED, when the QP is
 * already gone: refuse it, the buffer stays the ULP's.  The machine says which states drain. */
static bool draining(const struct qsm_conn *q)
{
	return q->sm->facts[q->state].drains;
}

static int check_sge(const struct qsm_sge *sge, int nsge)
{
	if (nsge < 0 || nsge > QSM_MAX_SGE || (nsge && !sge))
		return -EINVAL;
	return 0;
}

#define POST_FLAGS (QSM_POST_SIGNALED | QSM_POST_INLINE)

/* What the door can tell of a send WR: its opcode and flags, and no more SGEs than the class
 * asked its QPs to take (all or nothing: a device checks num_sge only as it reaches the WR, with
 * the WRs before it already posted).  The QP's inline size is the fabric's to check. */
static bool wr_ok(const struct qsm_conn *q, const struct qsm_wr *wr)
{
	if (wr->num_sge > (int)q->vt->qp.max_send_sge)
		return false;
	switch (wr->opcode) {
	case QSM_WR_RDMA_READ:
		if (wr->flags & QSM_POST_INLINE)
			return false;   /* a READ has no data to carry inline */
		break;
	case QSM_WR_LOCAL_INV:
		if (wr->num_sge || (wr->flags & QSM_POST_INLINE))
			return false;   /* it carries no data */
		break;
	case QSM_WR_SEND:
	case QSM_WR_RDMA_WRITE:
	case QSM_WR_SEND_WITH_IMM:
	case QSM_WR_RDMA_WRITE_WITH_IMM:
	case QSM_WR_SEND_WITH_INV:
		break;
	default:
		return false;
	}
	return !(wr->flags & ~POST_FLAGS) && check_sge(wr->sg_list, wr->num_sge) >= 0;
}

int qsm_conn_post_list(struct qsm_conn *q, const struct qsm_wr *wrs, int n, int *posted)
{
	if (posted)
		*posted = 0;
	qsm_check(q && n >= 0 && (!n || wrs), -EINVAL);
	for (int i = 0; i < n; i++)
		qsm_check(wr_ok(q, &wrs[i]), -EINVAL);
	if (q->dead)
		return -ESTALE;
	if (!q->id || !qsm_conn_has_qp(q) || draining(q))
		return -ENOTCONN;
	if (!q->ctx->ops->post_send)
		return -EOPNOTSUPP;
	if (!n)
		return 0;
	return q->ctx->ops->post_send(q->id, wrs, n, posted);
}

static int post(struct qsm_conn *q, enum qsm_wr_opcode op, uint64_t wr_id, const struct qsm_sge *sge,
		int nsge, uint64_t remote_addr, uint32_t rkey, unsigned int flags)
{
	struct qsm_wr wr = {
		.wr_id = wr_id, .opcode = op, .sg_list = sge, .num_sge = nsge,
		.remote_addr = remote_addr, .rkey = rkey, .flags = flags,
	};

	return qsm_conn_post_list(q, &wr, 1, NULL);
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
	qsm_check(q && check_sge(sge, nsge) >= 0 && nsge <= (int)q->vt->qp.max_recv_sge, -EINVAL);
	qsm_check(!q->vt->srq.max_wr, -EINVAL);   /* its receives are its SRQ's (qsm_srq_post_recv) */
	if (q->dead)
		return -ESTALE;
	if (!q->id || !qsm_conn_has_qp(q) || draining(q))
		return -ENOTCONN;
	if (!q->ctx->ops->post_recv)
		return -EOPNOTSUPP;
	return q->ctx->ops->post_recv(q->id, wr_id, sge, nsge);
}

int qsm_conn_bind_mw(struct qsm_conn *q, uint64_t wr_id, struct qsm_mw *mw, const struct qsm_mr *mr,
		     uint64_t addr, uint64_t len, int access, unsigned int flags)
{
	qsm_check(q && mw && mr && mw->q == q && mr->q == q && len, -EINVAL);
	qsm_check(!(access & ~(QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ)) &&
		  !(flags & ~QSM_POST_SIGNALED), -EINVAL);
	if (q->dead)
		return -ESTALE;
	if (!q->id || !qsm_conn_has_qp(q) || draining(q))
		return -ENOTCONN;
	if (!mw->fmw || !mr->fmr)
		return -ENODEV;   /* released with a device that went */
	if (!q->ctx->ops->bind_mw)
		return -EOPNOTSUPP;
	return q->ctx->ops->bind_mw(q->id, wr_id, mw->fmw, mr->fmr, addr, len, access, flags, &mw->rkey);
}
