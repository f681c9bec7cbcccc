/* rdma-qsm: queues (active and passive connections).  Each event goes through the queue's
 * generated machine; the runtime carries out the edge's actions and calls the class's handlers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

#define PDATA_CONNECT_MAX 56
#define PDATA_ACCEPT_MAX 196
#define PDATA_REJECT_MAX 148

static const char *kind_of(const struct qsm_conn *q)
{
	return q->passive ? "passive" : "conn";
}

static const char *state_name(const struct qsm_conn *q, int s)
{
	return q->sm->state_names[s];
}

/* ---- the QP machine: fed by every modify, async event and error completion ---- */

static void qp_feed(struct qsm_conn *q, int event)
{
	struct qsm_edge e;
	int cs;

	if (!qsm_conn_has_qp(q))
		return;
	cs = qsm_sm_cs(&qsm_sm_qp, q->qp_state);
	if (qsm_sm_qp.exec(&cs, event, &e) == 0)
		q->qp_state = (uint8_t)e.target;
}

/* ---- handler calls: none once the queue is dead; non-zero return aborts it ---- */

/* A handler said no: no callback from now on, and the ABORT edge once this step is done. */
static void refused(struct qsm_conn *q, int r)
{
	if (r != 0 && !q->dead) {
		q->dead = true;
		q->abort_pending = true;
	}
}

static void call(struct qsm_conn *q, qsm_handler_fn fn, const struct qsm_event_info *ev)
{
	if (fn && !q->dead)
		refused(q, fn(q, ev));
}

/* A completion is not a machine event: it goes to the completion handler (or nowhere, once
 * the queue is destroyed).  An error completion is followed by the fabric's WC_ERROR. */
static void completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	q->ctx->counters.completions++;
	if (q->vt->completion && !q->dead)
		refused(q, q->vt->completion(q, wc));
}

/* ---- actions ---- */

static void release_id(struct qsm_conn *q)
{
	if (!q->id)
		return;
	qp_feed(q, QSM_EV_DESTROY);
	q->qp_state = (uint8_t)qsm_sm_qp.final_state; /* no QP, whatever the machine made of it */
	q->ctx->ops->destroy_id(q->id);
	q->obj.id_gen++;
	q->id = NULL;
}

/* A call that failed now is fed back as the event its asynchronous failure would be. */
static void feed_back(struct qsm_conn *q, int event, int err)
{
	q->ctx->counters.action_errors++;
	qsm_post(q->ctx, &q->obj, event, err);
}

static int create_qp(struct qsm_conn *q)
{
	int r;

	r = q->ctx->ops->create_qp(q->id, &q->vt->qp);
	if (r < 0)
		return r;
	q->qp_state = (uint8_t)qsm_sm_qp.start_state;
	qp_feed(q, QSM_EV_QP_TO_INIT);
	return 0;
}

static uint32_t ms_or(uint32_t v, uint32_t def)
{
	return v ? v : def;
}

/* Refused, not clamped: a ULP that asked for more than an int of milliseconds made a mistake
 * it should hear about.  The bound keeps resolve_ms an int for rdma_resolve_addr() and its
 * state's timer (resolve_ms + 1000) within one. */
int qsm_timeouts_check(const struct qsm_timeouts *t)
{
	const uint32_t all[] = { t->resolve_ms, t->connect_ms, t->handshake_ms, t->disconnect_ms,
				 t->drain_ms, t->request_ms };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i] > QSM_TIMEOUT_MAX_MS)
			return -EINVAL;
	return 0;
}

static void arm_retry(struct qsm_conn *q)
{
	struct qsm_ctx *ctx = q->ctx;
	uint64_t now = qsm_now(ctx);

	q->attempts++;
	if (!q->lost_at_ns)
		q->lost_at_ns = now;
	if ((q->policy.max_attempts && q->attempts >= q->policy.max_attempts) ||
	    (q->policy.loss_timeout_ms &&
	     now - q->lost_at_ns >= (uint64_t)q->policy.loss_timeout_ms * 1000000ull)) {
		qsm_post(ctx, &q->obj, QSM_EV_GIVE_UP, 0);
		return;
	}
	qsm_timer_arm(ctx, &q->timer, QSM_EV_RETRY, qsm_backoff_next(ctx, &q->policy, &q->next_delay_ms));
}

static void reset_backoff(struct qsm_conn *q)
{
	q->attempts = 0;
	q->next_delay_ms = 0;
	q->lost_at_ns = 0;
}

/*
 * One action of an edge.  0: go on with the edge's next action; < 0: this one failed (its
 * failure is queued as the event an asynchronous failure would be) or a handler refused, and
 * the rest of the edge's actions are skipped: nothing is sent on a QP that is not there.
 */
static int run_action(struct qsm_conn *q, enum qsm_action a, const struct qsm_event_info *ev)
{
	struct qsm_ctx *ctx = q->ctx;
	const struct qsm_fabric_ops *ops = ctx->ops;
	bool was_dead = q->dead;
	int r = 0, fail_ev = 0;

	switch (a) {
	case QSM_ACT_RESOLVE_ADDR:
		release_id(q);
		r = ops->create_id(ctx->fabric, &q->obj, &q->id);
		if (r < 0)
			q->id = NULL;
		else
			r = ops->resolve_addr(q->id, q->has_src ? &q->src.sa : NULL, &q->dst.sa,
					      (int)ms_or(q->timeouts.resolve_ms, 2000));
		fail_ev = QSM_EV_ADDR_ERROR;
		break;
	case QSM_ACT_RESOLVE_ROUTE: {
		struct qsm_fdev *d = ops->id_device(q->id);

		if (d && (!q->dev || q->dev->fdev != d)) {
			/* another device now: what was registered on the old one goes */
			qsm_conn_release_mrs(q, false);
			qsm_device_detach(q);
			r = qsm_device_attach(q, d);
		}
		/* no registry entry (no sentinel, no memory): this attempt cannot work, retry */
		if (r == 0)
			r = ops->resolve_route(q->id, (int)ms_or(q->timeouts.resolve_ms, 2000));
		fail_ev = QSM_EV_ROUTE_ERROR;
		break;
	}
	case QSM_ACT_CREATE_QP:
		r = create_qp(q);
		fail_ev = QSM_EV_CONNECT_ERROR;
		break;
	case QSM_ACT_QP_READY:
		/* the QP is there and nothing is sent yet: the ULP posts its receives now */
		call(q, q->vt->qp_ready, ev);
		break;
	case QSM_ACT_CONNECT:
		r = ops->connect(q->id, q->pdata, q->pdata_len);
		fail_ev = QSM_EV_CONNECT_ERROR;
		break;
	case QSM_ACT_ACCEPT:
		r = ops->accept(q->id, q->pdata, q->pdata_len);
		fail_ev = QSM_EV_CONNECT_ERROR;
		break;
	case QSM_ACT_QP_TO_RTR:
		qp_feed(q, QSM_EV_QP_TO_RTR);
		break;
	case QSM_ACT_QP_TO_RTS:
		qp_feed(q, QSM_EV_QP_TO_RTS);
		break;
	case QSM_ACT_REJECT:
		if (q->id)
			ops->reject(q->id, q->pdata, q->pdata_len);
		break;
	case QSM_ACT_RESET_BACKOFF:
		reset_backoff(q);
		break;
	case QSM_ACT_DISCONNECT:
		r = ops->disconnect(q->id);
		qp_feed(q, QSM_EV_QP_TO_ERR);
		fail_ev = QSM_EV_DISCONNECTED;
		break;
	case QSM_ACT_MARK_LOST:
		if (!q->lost_at_ns)
			q->lost_at_ns = qsm_now(ctx);
		break;
	case QSM_ACT_START_DRAIN:
		/* The peer may already be gone: a failed DREQ does not stop the drain. */
		ops->disconnect(q->id);
		r = qsm_conn_has_qp(q) ? ops->drain(q->id) : -ENOENT;
		qp_feed(q, QSM_EV_QP_TO_ERR);
		fail_ev = QSM_EV_DRAINED;
		break;
	case QSM_ACT_RELEASE_ID:
		release_id(q);
		break;
	case QSM_ACT_ARM_RETRY:
		arm_retry(q);
		break;
	case QSM_ACT_RETRY_NOW:
		q->next_delay_ms = 0;
		qsm_timer_arm(ctx, &q->timer, QSM_EV_RETRY, 0);
		break;
	case QSM_ACT_RELEASE_DEVICE:
		ctx->counters.device_removals++;
		call(q, q->vt->device_removed, ev);
		release_id(q);
		qsm_conn_release_mrs(q, false);
		qsm_device_detach(q);
		break;
	case QSM_ACT_RELEASE_ALL:
		qsm_timer_cancel(ctx, &q->timer);
		release_id(q);
		qsm_conn_release_mrs(q, false);
		qsm_device_detach(q);
		break;
	case QSM_ACT_SPAWN_PASSIVE:
	case QSM_ACT_RELEASE_LISTEN_ID:
	case QSM_ACT_TRY_LISTEN:
		break; /* listener actions: no queue machine names them */
	}
	if (r < 0) {
		feed_back(q, fail_ev, r);
		return r;
	}
	/* a handler refused (or destroyed its queue) in this action: ABORT or DESTROY follows */
	return q->dead && !was_dead ? -ECANCELED : 0;
}

/* Per-state step timeouts (the machine names which, sm/\*.rl), armed on arrival. */
static uint32_t state_timeout_ms(const struct qsm_conn *q, int s)
{
	const struct qsm_timeouts *t = &q->timeouts;

	switch ((enum qsm_step_timeout)q->sm->facts[s].timeout) {
	case QSM_STEP_NONE: return 0;
	case QSM_STEP_RESOLVE: return ms_or(t->resolve_ms, 2000) + 1000; /* <= INT_MAX */
	case QSM_STEP_CONNECT: return ms_or(t->connect_ms, 5000);
	case QSM_STEP_REQUEST: return ms_or(t->request_ms, 5000);
	case QSM_STEP_HANDSHAKE: return t->handshake_ms;
	case QSM_STEP_DISCONNECT: return ms_or(t->disconnect_ms, 2000);
	case QSM_STEP_DRAIN: return ms_or(t->drain_ms, 2000);
	case QSM_STEP_COUNT: break;
	}
	return 0;
}

/* Last step of a queue: off every list; memory goes when no queued event points here. */
static void conn_close(struct qsm_conn *q)
{
	void (*release)(struct qsm_conn *) = q->vt->release;

	if (release && !q->dead)
		release(q);
	q->dead = true;
	q->obj.closed = true;
	qsm_timer_remove(q->ctx, &q->timer);
	release_id(q);
	qsm_conn_release_mrs(q, true);
	qsm_device_detach(q);
	qsm_list_del(&q->node);
	q->ctx->counters.queues_live--;
}

static void step(struct qsm_conn *q, int event, int status, const void *pdata, size_t pdata_len)
{
	struct qsm_ctx *ctx = q->ctx;
	struct qsm_event_info info = {
		.event = event, .status = status, .from = q->state, .to = q->state,
		.private_data = pdata_len ? pdata : NULL, .private_data_len = pdata_len,
	};
	struct qsm_edge edge;
	int cs = qsm_sm_cs(q->sm, q->state); /* one store: the state; Ragel's number from it */
	bool moved;

	ctx->counters.dispatched++;
	ctx->counters.events[event]++;
	if (q->sm->exec(&cs, event, &edge) < 0) {
		ctx->counters.unexpected++;
		qsm_trace(ctx, kind_of(q), q->cls->name, q->obj.serial, state_name(q, q->state), event,
			  NULL, status);
		call(q, q->vt->unexpected, &info);
		return;
	}
	info.to = edge.target;
	moved = edge.target != q->state;
	call(q, q->vt->state[q->passive][q->state].on_event, &info);
	if (moved) {
		call(q, q->vt->state[q->passive][q->state].exit, &info);
		/* O(1): the old state's timer is void; an action may arm a new one (arm_retry) */
		qsm_timer_cancel(ctx, &q->timer);
	}
	for (unsigned int i = 0; i < edge.nactions; i++)
		if (run_action(q, edge.actions[i], &info) < 0)
			break;
	qsm_trace(ctx, kind_of(q), q->cls->name, q->obj.serial, state_name(q, q->state), event,
		  state_name(q, edge.target), status);
	q->state = (uint8_t)edge.target;
	ctx->counters.transitions++;
	if (event == QSM_EV_RETRY)
		ctx->counters.reconnects++;
	if (q->state == q->sm->final_state) {
		conn_close(q);
		return;
	}
	if (moved) {
		uint32_t t = state_timeout_ms(q, q->state);

		if (t)
			qsm_timer_arm(ctx, &q->timer, QSM_EV_TIMEOUT, t);
		call(q, q->vt->state[q->passive][q->state].enter, &info);
	}
}

/* A handler returned non-zero: the ABORT edge, at once, with no callback on the way. */
static void take_abort(struct qsm_conn *q)
{
	if (!q->abort_pending || q->obj.closed)
		return;
	q->abort_pending = false;
	q->ctx->counters.aborts++;
	step(q, QSM_EV_ABORT, 0, NULL, 0);
}

void qsm_conn_dispatch(struct qsm_conn *q, const struct qsm_item *it)
{
	struct qsm_ctx *ctx = q->ctx;

	if (q->obj.closed || (q->dead && it->event != QSM_EV_DESTROY && it->event != QSM_EV_ABORT) ||
	    qsm_item_stale(it, &q->obj)) {
		/* destroyed, or an event of an id this queue already let go of */
		ctx->counters.dropped++;
		return;
	}
	if (it->event == QSM_EV_COMPLETION) {
		completion(q, &it->wc);
		take_abort(q);
		return;
	}
	/* what the QP itself went through, before the queue's machine hears of it */
	if (it->event == QSM_EV_QP_FATAL || it->event == QSM_EV_WC_ERROR || it->event == QSM_EV_DRAINED)
		qp_feed(q, it->event);
	step(q, it->event, it->status, it->pdata,
	     it->pdata_len);
	take_abort(q);
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
	const struct qsm_vtable *vt = qsm_vtable_get(ctx, cls);
	struct qsm_conn *q = vt ? calloc(1, sizeof(*q) + vt->priv_size) : NULL;

	if (!q)
		return NULL;
	q->vt = vt;
	q->obj.kind = QSM_OBJ_CONN;
	q->obj.serial = ++ctx->next_serial;
	q->ctx = ctx;
	q->cls = cls;
	q->passive = passive;
	q->sm = passive ? &qsm_sm_accept : &qsm_sm_cm_id;
	q->state = (uint8_t)q->sm->start_state;
	q->qp_state = (uint8_t)qsm_sm_qp.final_state; /* no QP yet */
	q->timer.heap_idx = UINT32_MAX;
	q->timer.owner = &q->obj;
	qsm_list_init(&q->dev_node);
	qsm_list_init(&q->mrs);
	qsm_list_add_tail(&ctx->conns, &q->node);
	ctx->counters.queues_live++;
	return q;
}

int qsm_conn_new(struct qsm_ctx *ctx, const struct qsm_conn_opts *o, struct qsm_conn **ret)
{
	struct qsm_conn *q;
	union qsm_addr dst, src;
	int r;

	if (!ctx || !o || !ret || !o->cls || !o->dst)
		return -EINVAL;
	if (o->private_data_len > PDATA_CONNECT_MAX || (o->private_data_len && !o->private_data))
		return -EINVAL;
	if ((r = qsm_timeouts_check(&o->timeouts)) < 0)
		return r;
	if ((r = addr_copy(&dst, o->dst)) < 0 || (o->src && (r = addr_copy(&src, o->src)) < 0))
		return r;
	if (o->src && o->src->sa_family != o->dst->sa_family)
		return -EINVAL;
	q = conn_alloc(ctx, o->cls, false);
	if (!q)
		return -ENOMEM;
	q->dst = dst;
	if (o->src) {
		q->src = src;
		q->has_src = true;
	}
	q->policy = o->policy;
	q->timeouts = o->timeouts;
	q->user = o->user;
	q->pdata_len = (uint8_t)o->private_data_len;
	if (o->private_data_len)
		memcpy(q->pdata, o->private_data, o->private_data_len);
	*ret = q;
	return 0;
}

/* Spawned on the listener's CONNECT_REQUEST: the new id becomes the queue's. */
int qsm_conn_spawn_passive(struct qsm_listener *l, const struct qsm_item *it)
{
	struct qsm_ctx *ctx = l->ctx;
	struct qsm_conn *q = conn_alloc(ctx, l->cls, true);
	struct qsm_fdev *d;
	int r = 0;

	if (!q)
		return -ENOMEM;
	q->user = l->user;
	q->timeouts = l->timeouts;
	/* A queue without its device in the registry could never register memory: refuse the
	 * request now (the listener rejects it) rather than accept a queue that cannot work. */
	d = ctx->ops->id_device(it->id);
	if (d)
		r = qsm_device_attach(q, d);
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

static int downcall(struct qsm_conn *q, int event)
{
	if (!q || q->dead)
		return -EINVAL;
	if (qsm_machine_next(q->sm->id, q->state, event, NULL) < 0)
		return -EINVAL;
	return qsm_post(q->ctx, &q->obj, event, 0);
}

int qsm_conn_connect(struct qsm_conn *q)
{
	if (q && q->passive)
		return -EOPNOTSUPP;
	return downcall(q, QSM_EV_CONNECT);
}

int qsm_conn_disconnect(struct qsm_conn *q)
{
	return downcall(q, QSM_EV_DISCONNECT);
}

int qsm_conn_ready(struct qsm_conn *q)
{
	return downcall(q, QSM_EV_READY);
}

static int decide(struct qsm_conn *q, int event, const void *pdata, size_t len, size_t max)
{
	int r;

	if (!q || !q->passive || len > max || (len && !pdata))
		return q && !q->passive ? -EOPNOTSUPP : -EINVAL;
	if (q->dead || qsm_machine_next(q->sm->id, q->state, event, NULL) < 0)
		return -EINVAL;
	if (q->decided)
		return -EALREADY; /* one decision per request: the first one stands */
	q->pdata_len = (uint8_t)len;
	if (len)
		memcpy(q->pdata, pdata, len);
	r = qsm_post(q->ctx, &q->obj, event, 0);
	if (r == 0)
		q->decided = true;
	return r;
}

int qsm_conn_accept(struct qsm_conn *q, const void *pdata, size_t len)
{
	return decide(q, QSM_EV_ACCEPT, pdata, len, PDATA_ACCEPT_MAX);
}

int qsm_conn_reject(struct qsm_conn *q, const void *pdata, size_t len)
{
	return decide(q, QSM_EV_REJECT, pdata, len, PDATA_REJECT_MAX);
}

int qsm_conn_destroy(struct qsm_conn *q)
{
	int r;

	if (!q || q->dead)
		return -EINVAL;
	r = qsm_post(q->ctx, &q->obj, QSM_EV_DESTROY, 0);
	if (r < 0)
		return r;
	q->dead = true; /* from now on: no callback */
	return 0;
}

/* ctx teardown: no callbacks, no events; everything released now. */
void qsm_conn_teardown(struct qsm_conn *q)
{
	q->dead = true;
	if (q->sm->facts[q->state].teardown == QSM_TEARDOWN_REJECT && q->id)
		q->ctx->ops->reject(q->id, NULL, 0);
	conn_close(q);
	if (!q->obj.refs)
		qsm_conn_free(q);
}

void qsm_conn_free(struct qsm_conn *q)
{
	free(q);
}

void *qsm_conn_priv(struct qsm_conn *q)
{
	return q ? q->priv : NULL;
}

void *qsm_conn_user(struct qsm_conn *q)
{
	return q ? q->user : NULL;
}

struct qsm_ctx *qsm_conn_ctx(struct qsm_conn *q)
{
	return q ? q->ctx : NULL;
}

int qsm_conn_is_passive(struct qsm_conn *q)
{
	return q ? q->passive : -EINVAL;
}

int qsm_conn_state(struct qsm_conn *q)
{
	return q ? q->state : -EINVAL;
}

const char *qsm_conn_state_name(struct qsm_conn *q)
{
	return q ? state_name(q, q->state) : NULL;
}

int qsm_conn_qp_state(struct qsm_conn *q)
{
	if (!q)
		return -EINVAL;
	return qsm_conn_has_qp(q) ? q->qp_state : -ENOENT;
}

uint32_t qsm_conn_attempts(struct qsm_conn *q)
{
	return q ? q->attempts : 0;
}
