/* rdma-qsm: work requests on a queue's QP and on its SRQ: every WR checked once, here, at the
 * runtime's door (the fabrics keep only what a device checks), refused while the queue drains
 * (the machine says where), completions handed to the class's completion handler. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "argcheck.h"
#include "data/data.h"

/*
 * The door.  What is wrong with a WR is -EINVAL whatever the queue's state, checked before
 * the state (qsm_conn_post_send(3)), and nothing of a list is posted: the WR's opcode and flags,
 * its SGEs (0 .. QSM_MAX_SGE, and no more than the class asked its QPs or its SRQ to take: a
 * provider may allocate more, and a device checks num_sge only as it reaches the WR, with the
 * WRs before it already posted), INLINE data (none on a READ or a LOCAL_INV, at most the
 * class's max_inline_data), a LOCAL_INV's rkey (one of the queue's windows), a bind's window
 * and MR (the queue's, the range inside the MR, which allows binds).  Then the state
 * (qp_door).  What only the device can know (a key's MR, the peer's rkey, the message's size)
 * comes back as the WR's completion; what the device refuses part way (it may take less than
 * the class asked for) is the fabric's to pass on.  One pass over the WRs, no call per WR.
 */

/* Once the drain marker is posted, a new WR would complete after DRAINED, when the QP is
 * already gone: refuse it, the buffer stays the ULP's.  The machine says which states drain. */
static bool draining(const struct qsm_conn *q)
{
	return qsm_conn_sm(q)->facts[q->state].drains;
}

/* Whether q's QP takes work requests now (the fabric has the op: `supported`): 0, or why not. */
static inline int qp_door(const struct qsm_conn *q, bool supported)
{
	if (q->dead)
		return -ESTALE;
	if (!q->id || !qsm_conn_has_qp(q) || draining(q))
		return -ENOTCONN;
	return supported ? 0 : -EOPNOTSUPP;
}

/* A scatter/gather list: 0 .. QSM_MAX_SGE elements and no more than `cap` (the class's), an
 * array unless there are none. */
static inline bool sges_ok(const struct qsm_sge *sge, int nsge, uint32_t cap)
{
	return nsge >= 0 && nsge <= QSM_MAX_SGE && (uint32_t)nsge <= cap && (nsge == 0 || sge);
}

/* The bytes an INLINE WR carries: at most the class's max_inline_data (a READ has none). */
static inline bool inline_ok(const struct qsm_conn *q, const struct qsm_wr *wr)
{
	uint64_t len = 0;

	if (wr->opcode == QSM_WR_RDMA_READ)
		return false;
	for (int i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	return len <= q->vt->qp.max_inline_data;
}

/* A LOCAL_INV invalidates one of our own windows: its rkey must be one the queue's windows
 * have now (the runtime knows each bind's rkey when it posts it). */
static bool own_rkey(const struct qsm_conn *q, uint32_t rkey)
{
	for (const struct qsm_hnode *n = q->mws.first; n; n = n->next) {
		const struct qsm_mw *mw = qsm_container_of(n, const struct qsm_mw, node);

		if (mw->rkey && mw->rkey == rkey)
			return true;
	}
	return false;
}

#define POST_FLAGS (QSM_POST_SIGNALED | QSM_POST_INLINE)

/* Everything the door can tell of a send WR. */
static inline bool wr_ok(const struct qsm_conn *q, const struct qsm_wr *wr)
{
	if ((wr->flags & ~POST_FLAGS) || !sges_ok(wr->sg_list, wr->num_sge, q->vt->qp.max_send_sge))
		return false;
	switch (wr->opcode) {
	case QSM_WR_LOCAL_INV:
		/* it carries no data, and names one of our windows */
		return !wr->num_sge && !(wr->flags & QSM_POST_INLINE) && own_rkey(q, wr->imm_data);
	case QSM_WR_SEND:
	case QSM_WR_RDMA_WRITE:
	case QSM_WR_RDMA_READ:
	case QSM_WR_SEND_WITH_IMM:
	case QSM_WR_RDMA_WRITE_WITH_IMM:
	case QSM_WR_SEND_WITH_INV:
		return !(wr->flags & QSM_POST_INLINE) || inline_ok(q, wr);
	default:
		return false;   /* RECV, BIND_MW (qsm_conn_bind_mw), or no opcode at all */
	}
}

int qsm_conn_post_list(struct qsm_conn *q, const struct qsm_wr *wrs, int n, int *posted)
{
	int r;

	if (posted)
		*posted = 0;
	qsm_check(q && n >= 0 && (!n || wrs), -EINVAL);
	for (int i = 0; i < n; i++)
		qsm_check(wr_ok(q, &wrs[i]), -EINVAL);
	if ((r = qp_door(q, q->ctx->ops->post_send != NULL)) < 0 || !n)
		return r;
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
	int r;

	qsm_check(q && sges_ok(sge, nsge, q->vt->qp.max_recv_sge), -EINVAL);
	qsm_check(!q->vt->srq.max_wr, -EINVAL);   /* its receives are its SRQ's (qsm_srq_post_recv) */
	if ((r = qp_door(q, q->ctx->ops->post_recv != NULL)) < 0)
		return r;
	return q->ctx->ops->post_recv(q->id, wr_id, sge, nsge);
}

/* A bind names the queue's own window and MR, on the device the queue is on now, a range of
 * the MR (which allows binds), and remote access only. */
static bool bind_ok(const struct qsm_conn *q, const struct qsm_mw *mw, const struct qsm_mr *mr,
		    uint64_t addr, uint64_t len, int access, unsigned int flags)
{
	return mw && mr && mw->q == q && mr->q == q && len &&
	       !(access & ~(QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ)) &&
	       !(flags & ~QSM_POST_SIGNALED) && (mr->access & QSM_ACCESS_MW_BIND) &&
	       addr >= mr->addr && len <= mr->len && addr - mr->addr <= mr->len - len;
}

int qsm_conn_bind_mw(struct qsm_conn *q, uint64_t wr_id, struct qsm_mw *mw, const struct qsm_mr *mr,
		     uint64_t addr, uint64_t len, int access, unsigned int flags)
{
	int r;

	qsm_check(q && bind_ok(q, mw, mr, addr, len, access, flags), -EINVAL);
	if ((r = qp_door(q, q->ctx->ops->bind_mw != NULL)) < 0)
		return r;
	if (!mw->fmw || !mr->fmr)
		return -ENODEV;   /* released with a device that went */
	return q->ctx->ops->bind_mw(q->id, wr_id, mw->fmw, mr->fmr, addr, len, access, flags, &mw->rkey);
}

int qsm_srq_post_recv(struct qsm_srq *s, uint64_t wr_id, const struct qsm_sge *sge, int nsge)
{
	qsm_check(s && sges_ok(sge, nsge, s->vt->srq.max_sge ? s->vt->srq.max_sge : 1), -EINVAL);
	if (!qsm_device_usable(s->dev))
		return -ENODEV;
	return s->dev->ctx->ops->post_srq_recv(s->fsrq, wr_id, sge, nsge);
}
