/* rdma-qsm: the downcalls: what a ULP asks of a queue becomes an event, queued and taken
 * next, never a callback from inside the call; refused when the machine has no edge for it. */
#include <errno.h>
#include <string.h>

#include "argcheck.h"
#include "queue/queue.h"
#include "sm/edges.h"

/*
 * One errno per kind of failure, the same for every downcall: -EINVAL for a caller's bad
 * argument (NULL, private data too long), -ESTALE for a queue already destroyed or aborted
 * (no callback will ever come for it), -ENOMSG when its machine has no edge for the event in
 * the state it is in (as qsm_machine_next(3) says), -EOPNOTSUPP for a call of the other side
 * (accept on an active queue, connect on a passive one).
 */
static int check_edge(struct qsm_conn *q, int event)
{
	if (q->dead)
		return -ESTALE;
	/* what qsm_machine_next(3) answers: the edge tables the step looks up (one load) */
	if (!(q->passive ? qsm_edge_index_accept[q->state][event] : qsm_edge_index_cm_id[q->state][event]))
		return -ENOMSG;
	return 0;
}

static int downcall(struct qsm_conn *q, int event)
{
	int r = check_edge(q, event);

	return r < 0 ? r : qsm_post_op(q->ctx, &q->obj, event, 0);
}

int qsm_conn_connect(struct qsm_conn *q)
{
	qsm_check(q, -EINVAL);
	if (q->passive)
		return -EOPNOTSUPP;
	return downcall(q, QSM_EV_CONNECT);
}

int qsm_conn_disconnect(struct qsm_conn *q)
{
	qsm_check(q, -EINVAL);
	return downcall(q, QSM_EV_DISCONNECT);
}

int qsm_conn_ready(struct qsm_conn *q)
{
	qsm_check(q, -EINVAL);
	return downcall(q, QSM_EV_READY);
}

static int decide(struct qsm_conn *q, int event, const void *pdata, size_t len, size_t max)
{
	int r;

	qsm_check(q, -EINVAL);
	qsm_check(len <= max && (!len || pdata), -EINVAL);
	if (!q->passive)
		return -EOPNOTSUPP;
	if ((r = check_edge(q, event)) < 0)
		return r;
	if (q->decided)
		return -EALREADY; /* one decision per request: the first one stands */
	if ((r = qsm_conn_set_pdata(q, pdata, len)) < 0)
		return r;
	r = qsm_post_op(q->ctx, &q->obj, event, 0);
	if (r == 0)
		q->decided = true;
	return r;
}

int qsm_conn_accept(struct qsm_conn *q, const void *pdata, size_t len)
{
	return decide(q, QSM_EV_ACCEPT, pdata, len, QSM_PDATA_REP_MAX);
}

int qsm_conn_reject(struct qsm_conn *q, const void *pdata, size_t len)
{
	return decide(q, QSM_EV_REJECT, pdata, len, QSM_PDATA_REJ_MAX);
}

int qsm_conn_destroy(struct qsm_conn *q)
{
	int r;

	qsm_check(q, -EINVAL);
	if (q->dead)
		return -ESTALE;
	r = qsm_post_op(q->ctx, &q->obj, QSM_EV_DESTROY, 0);
	if (r < 0)
		return r;
	qsm_conn_mark_dead(q); /* from now on: no callback */
	return 0;
}
