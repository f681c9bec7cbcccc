/* rdma-qsm: queues: making them (active, or spawned from a listener's request) and what
 * a ULP may ask of one at any time. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/rdmacm.h>

#include "argcheck.h"
#include "queue/queue.h"

/* Refused, not clamped: a ULP that asked for more than an int of milliseconds made a mistake
 * it should hear about.  The bound keeps resolve_ms an int for rdma_resolve_addr() and its
 * state's timer (resolve_ms + 1000) within one. */
int qsm_timeouts_take(struct qsm_timeouts *dst, const struct qsm_timeouts *t, uint32_t comp_mask)
{
	*dst = *t;
	/* a field the caller's comp_mask does not claim was reserved room when it was built */
	if (!(comp_mask & QSM_OPTS_KEEPALIVE))
		dst->keepalive_ms = 0;
	const uint32_t all[] = { dst->resolve_ms, dst->connect_ms, dst->handshake_ms, dst->disconnect_ms,
				 dst->drain_ms, dst->request_ms, dst->keepalive_ms };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i] > QSM_TIMEOUT_MAX_MS)
			return -EINVAL;
	return 0;
}

/* ---- construction and the public calls ---- */

static int addr_copy(union qsm_addr *dst, const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		memcpy(&dst->sin, sa, sizeof(dst->sin));
	else if (sa->sa_family == AF_INET6)
		memcpy(&dst->sin6, sa, sizeof(dst->sin6));
	else
		return -EAFNOSUPPORT;
	return 0;
}

static struct qsm_conn *conn_alloc(struct qsm_ctx *ctx, const struct qsm_class *cls, bool passive)
{
	const struct qsm_vtable *vt = qsm_vtable_get(ctx, cls, &qsm_base_class);
	/* a passive queue's allocation ends before the addresses (queue.h) */
	size_t size = !passive ? sizeof(struct qsm_conn) + (vt ? vt->priv_size : 0) :
		      vt && vt->priv_size ? QSM_CONN_PASSIVE_PRIV + vt->priv_size : QSM_CONN_PASSIVE_SIZE;
	struct qsm_conn *q = vt ? calloc(1, size) : NULL;

	if (!q)
		return NULL;
	/* its events and its timer have their room before it can have any (core/fifo.h) */
	if (qsm_timer_reserve(ctx) < 0) {
		free(q);
		return NULL;
	}
	if (qsm_fifo_reserve(ctx, QSM_OBJ_EVENTS) < 0) {
		qsm_timer_unreserve(ctx);
		free(q);
		return NULL;
	}
	q->vt = vt;
	q->obj.ops = &qsm_conn_ops;
	q->obj.kind = QSM_OBJ_CONN;
	q->obj.serial = ++ctx->next_serial;
	q->ctx = ctx;
	q->passive = passive;
	q->state = (uint8_t)qsm_conn_sm(q)->start_state;
	q->qp_state = (uint8_t)qsm_sm_qp.final_state; /* no QP yet */
	q->timer.heap_idx = UINT32_MAX;
	qsm_list_init(&q->du.node);
	qsm_list_add_tail(&ctx->objs[QSM_OBJ_CONN], &q->obj.node);
	qsm_registry_hook(ctx);
	ctx->counters.queues_live++;
	return q;
}

int (qsm_conn_new)(struct qsm_ctx *ctx, const struct qsm_conn_opts *o, struct qsm_conn **ret)
{
	struct qsm_conn *q;
	union qsm_addr dst, src;
	struct qsm_timeouts t;
	int r;

	qsm_check(ctx && o && ret && o->cls && o->dst, -EINVAL);
	qsm_check_mask(o->comp_mask, QSM_OPTS_MASK_KNOWN);
	qsm_check_class_mask(o->cls);
	qsm_check(qsm_class_caps_ok(o->cls), -EINVAL);
	qsm_check(o->private_data_len <= QSM_PDATA_REQ_MAX && (!o->private_data_len || o->private_data),
		  -EINVAL);
	if ((r = qsm_timeouts_take(&t, &o->timeouts, o->comp_mask)) < 0)
		return r;
	if ((r = addr_copy(&dst, o->dst)) < 0 || (o->src && (r = addr_copy(&src, o->src)) < 0))
		return r;
	qsm_check(!o->src || o->src->sa_family == o->dst->sa_family, -EINVAL);
	q = conn_alloc(ctx, o->cls, false);
	if (!q)
		return -ENOMEM;
	q->dst = dst;
	q->cfg = qsm_conn_cfg_get(ctx, &t, &o->policy);
	q->user = o->user;
	if (o->src && (q->src = malloc(sizeof(*q->src))))
		*q->src = src;
	if (!q->cfg || (o->src && !q->src) ||
	    (o->private_data_len && qsm_conn_set_pdata(q, o->private_data, o->private_data_len) < 0)) {
		qsm_conn_teardown(q);
		return -ENOMEM;
	}
	*ret = q;
	return 0;
}

/* The address of the next attempt: the one under way (its id resolved already) is left alone,
 * so a handler may call this in any state; a failover is the ULP's policy, not the library's. */
int qsm_conn_set_dst(struct qsm_conn *q, const struct sockaddr *dst, const struct sockaddr *src)
{
	union qsm_addr d, s;
	int r;

	qsm_check(q && dst && !q->passive, -EINVAL);
	qsm_check(!src || src->sa_family == dst->sa_family, -EINVAL);
	if (q->dead)
		return -ESTALE;
	if ((r = addr_copy(&d, dst)) < 0 || (src && (r = addr_copy(&s, src)) < 0))
		return r;
	if (src && !q->src && !(q->src = malloc(sizeof(*q->src))))
		return -ENOMEM;
	q->dst = d;
	if (src) {
		*q->src = s;
	} else {
		free(q->src);
		q->src = NULL;
	}
	return 0;
}

/* Spawned on the listener's CONNECT_REQUEST: the new id becomes the queue's. */
int qsm_conn_spawn_passive(struct qsm_ctx *ctx, const struct qsm_class *cls, void *user,
			   const struct qsm_timeouts *timeouts, const struct qsm_item *it)
{
	struct qsm_conn *q = conn_alloc(ctx, cls, true);
	struct qsm_fdev *d;
	int r = 0;

	if (!q)
		return -ENOMEM;
	q->user = user;
	q->cfg = qsm_conn_cfg_get(ctx, timeouts, NULL);
	if (!q->cfg) {
		qsm_conn_teardown(q);
		return -ENOMEM;
	}
	/* A queue without its device in the registry could never register memory: refuse the
	 * request now (the listener rejects it) rather than accept a queue that cannot work. */
	d = ctx->ops->id_device(it->id);
	if (d)
		r = qsm_device_attach(ctx, &q->du, d);
	if (r == 0)
		r = qsm_post_copy(ctx, &q->obj, it);
	if (r < 0) {
		qsm_conn_teardown(q); /* the id is still the listener's to reject and destroy */
		return r;
	}
	q->id = it->id;
	ctx->ops->set_owner(q->id, &q->obj);
	return 0;
}

/* Getters: NULL is a caller's bug, answered alike: NULL from a pointer getter, -EINVAL from
 * the others (loud in a debug build). */
void *qsm_conn_priv(struct qsm_conn *q)
{
	qsm_check(q, NULL);
	return q->passive ? (void *)((char *)q + QSM_CONN_PASSIVE_PRIV) : q->priv;
}

void *qsm_conn_user(struct qsm_conn *q)
{
	qsm_check(q, NULL);
	return q->user;
}

struct qsm_ctx *qsm_conn_ctx(struct qsm_conn *q)
{
	qsm_check(q, NULL);
	return q->ctx;
}

int qsm_conn_is_passive(struct qsm_conn *q)
{
	qsm_check(q, -EINVAL);
	return q->passive;
}

int qsm_conn_state(struct qsm_conn *q)
{
	qsm_check(q, -EINVAL);
	return q->state;
}

const char *qsm_conn_state_name(struct qsm_conn *q)
{
	qsm_check(q, NULL);
	return qsm_conn_sm(q)->state_names[q->state];
}

int qsm_conn_qp_state(struct qsm_conn *q)
{
	qsm_check(q, -EINVAL);
	return qsm_conn_has_qp(q) ? q->qp_state : -ENOENT;
}

int qsm_conn_attempts(struct qsm_conn *q)
{
	qsm_check(q, -EINVAL);
	return q->attempts > INT_MAX ? INT_MAX : (int)q->attempts;
}

int qsm_conn_read_depth(struct qsm_conn *q)
{
	qsm_check(q, -EINVAL);
	if (q->dead)
		return -ESTALE;
	if (!q->id || !q->ctx->ops->read_depth)
		return -ENOTCONN;
	return q->ctx->ops->read_depth(q->id);
}

int qsm_conn_set_qp_depth(struct qsm_conn *q, uint32_t max_send_wr, uint32_t max_recv_wr)
{
	qsm_check(q && max_send_wr <= QSM_MAX_QP_DEPTH && max_recv_wr <= QSM_MAX_QP_DEPTH, -EINVAL);
	qsm_check(!max_recv_wr || !q->vt->srq.max_wr, -EINVAL);   /* its receives are its SRQ's */
	if (q->dead)
		return -ESTALE;
	q->send_depth = max_send_wr;
	q->recv_depth = max_recv_wr;
	return 0;
}

int qsm_conn_verbs(struct qsm_conn *q, struct qsm_verbs *out)
{
	void *cm_id, *qp, *pd;

	qsm_check(q && out, -EINVAL);
	if (q->dead)
		return -ESTALE;
	if (!q->ctx->ops->id_verbs)
		return -EOPNOTSUPP;
	if (!q->id)
		return -ENOENT;
	q->ctx->ops->id_verbs(q->id, &cm_id, &qp, &pd);
	*out = (struct qsm_verbs){ .cm_id = cm_id, .qp = qp, .pd = pd };
	return 0;
}

struct qsm_srq *qsm_conn_srq(const struct qsm_conn *q)
{
	qsm_check(q, NULL);
	return q->srq;
}
