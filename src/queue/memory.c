/* rdma-qsm: the memory a queue holds -- its MRs and windows -- let go of when its device goes,
 * when it moves to another device, and when it is freed (data/ registers them). */
#include <stdlib.h>

#include "queue/queue.h"

/* 0, or why the fabric refused (-EBUSY: a window is bound to it): then the MR stays
 * registered, its keys valid. */
int qsm_mr_release(struct qsm_mr *mr)
{
	int r;

	if (mr->fmr) {
		if ((r = mr->q->ctx->ops->dereg_mr(mr->fmr)) < 0)
			return r;
		mr->fmr = NULL;
		mr->lkey = mr->rkey = 0;
	}
	return 0;
}

void qsm_mw_release(struct qsm_mw *mw)
{
	if (mw->fmw) {
		mw->q->ctx->ops->dealloc_mw(mw->fmw);
		mw->fmw = NULL;
		mw->rkey = 0;
	}
}

/* The device goes (or the queue moves to another one, or closes): deregister everything,
 * windows first (they are bound to the MRs, and a bound window makes the fabric refuse its
 * MR's dereg; a queue binds only its own windows to its own MRs, so none is left bound here);
 * the handles stay the ULP's unless the queue itself is being freed. */
void qsm_conn_release_mrs(struct qsm_conn *q, bool free_handles)
{
	struct qsm_hnode *n, *next;

	for (n = q->mws.first; n; n = next) {
		struct qsm_mw *mw = qsm_container_of(n, struct qsm_mw, node);

		next = n->next;
		qsm_mw_release(mw);
		if (free_handles) {
			qsm_hlist_del(&mw->node);
			free(mw);
		}
	}

	for (n = q->mrs.first; n; n = next) {
		struct qsm_mr *mr = qsm_container_of(n, struct qsm_mr, node);

		next = n->next;
		qsm_mr_release(mr);
		if (free_handles) {
			qsm_hlist_del(&mr->node);
			free(mr);
		}
	}
}
