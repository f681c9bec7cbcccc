/* rdma-qsm: a queue's step: each event through the queue's generated machine; the edge's
 * actions carried out in order, the class's handlers called around them (run to completion). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "queue/queue.h"
#include "sm/edges.h"

static void conn_free(struct qsm_obj *o);

/* What the trace calls a queue: its machine's kind (P: the passive machine, accept). */
static const char *kind_name(bool passive)
{
	return passive ? "passive" : "conn";
}

static const char *state_name(const struct qsm_conn *q, int s)
{
	return qsm_conn_sm(q)->state_names[s];
}

/* ---- the QP machine: fed by every modify, async event and error completion ---- */

#define QP_EDGE(from, event, to, timeout, final, actions) \
	case (event): \
		q->qp_state = (uint8_t)(to); \
		qsm_edge_taken(q->ctx, QSM_MACHINE_QP, from, event); \
		break;

/* Inline: every caller feeds one event it names, so only that event's cases are left. */
QSM_ALWAYS_INLINE void qp_feed(struct qsm_conn *q, int event)
{
	/* no QP (its final state): no edge there either */
	QSM_SWITCH_QP(q->qp_state, event, QP_EDGE, QSM_EDGE_NO_ACTION, (void)0)
}

/* ---- handler calls: none once the queue is dead; non-zero return aborts it ---- */

/* A handler said no: no callback from now on, and the ABORT edge once this step is done. */
static void refused(struct qsm_conn *q, int r)
{
	if (r != 0 && !q->dead) {
		qsm_conn_mark_dead(q);
		q->abort_pending = true;
	}
}

/*
 * What a step's handlers are told: its item (event, status, private data), the state it was
 * in and the one it goes to.  Put together for the first handler that runs, as most steps
 * run none: info->event is 0 until then.
 */
QSM_ALWAYS_INLINE const struct qsm_event_info *told(struct qsm_event_info *info,
						     const struct qsm_item *it, int from, int to)
{
	if (!info->event)
		*info = (struct qsm_event_info){
			.event = it->event, .status = it->status, .from = from, .to = to,
			.private_data = it->pdata_len ? it->pdata : NULL,
			.private_data_len = it->pdata_len,
		};
	return info;
}

/* true: the handler refused, or destroyed its queue (it is dead now, and was not before) */
QSM_ALWAYS_INLINE bool call(struct qsm_conn *q, qsm_handler_fn fn, struct qsm_event_info *info,
			    const struct qsm_item *it, int from, int to)
{
	int r;

	if (!fn || q->dead)
		return false;
	if ((r = fn(q, told(info, it, from, to))) != 0)
		refused(q, r);
	return q->dead;
}

/*
 * The first error completion of a QP other than a flush is the QP's WC_ERROR (-EIO), once per
 * QP; the fabrics deliver completions only.  It is queued before the completion handler runs,
 * so it is the next item of the ctx, ahead of whatever the handler queues: a completion is
 * taken from the fabric into an empty FIFO, whose slot it just left, so the push does not
 * allocate.  -ENOMEM all the same: the caller steps it at once after the handler, never lost.
 * A queue the handler aborts drops it, as it drops every event once dead.
 */
static int queue_wc_error(struct qsm_conn *q, const struct qsm_fabric_cqe *c)
{
	struct qsm_item wce;

	if (c->wc.status == QSM_WC_SUCCESS || c->wc.status == QSM_WC_WR_FLUSH_ERR ||
	    q->wc_error_queued)
		return 0;
	q->wc_error_queued = true;
	/* its id: stale, like the completion, once the queue lets go of the id */
	wce.id = c->id;
	wce.event = QSM_EV_WC_ERROR;
	wce.status = -EIO;
	wce.pdata_len = 0;
	return qsm_post_copy(q->ctx, &q->obj, &wce);
}

/* A completion is not a machine event: it goes to the completion handler (or nowhere, once
 * the queue is destroyed). */
static void completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	q->ctx->counters.completions++;
	if (q->vt->completion && !q->dead)
		refused(q, q->vt->completion(q, wc));
}

/* ---- actions ---- */

/* One of them: to the handler, or dropped once a handler refused (a dead queue hears none). */
static void complete_left(struct qsm_obj *o, const struct qsm_fabric_cqe *c)
{
	struct qsm_conn *q = qsm_container_of(o, struct qsm_conn, obj);

	if (q->dead)
		q->ctx->counters.dropped++;
	else
		completion(q, &c->wc);
}

/*
 * The WRs still on a QP the queue lets go of (a drain ended by its timeout, a device removal, a
 * close) complete now, before the edge arrives, in each work queue's order: those a batch left
 * behind the FIFO, then what the fabric still holds for the QP, the rest flushed.  Whatever the
 * device reports for them later is stale to the fabric, dropped and counted there: each WR
 * completes exactly once.  The queue has no QP from the first of them on (qsm_conn_qp_state()
 * -ENOENT, a post -ENOTCONN), so a handler that posts again on a flush cannot keep the QP alive.
 * A dead queue hears of none of them.
 */
QSM_ALWAYS_INLINE void flush_left(struct qsm_conn *q, struct qsm_fid *id)
{
	struct qsm_ctx *ctx = q->ctx;
	struct qsm_fabric_cqe c[QSM_FABRIC_CQE_BATCH];
	int n;

	if (ctx->cqe_next < ctx->cqe_len)
		qsm_ctx_take_left(ctx, &q->obj, id, complete_left);
	while ((n = ctx->ops->flush_qp(id, c, QSM_FABRIC_CQE_BATCH)) > 0) {
		ctx->counters.fabric_events += (uint64_t)n;
		ctx->counters.popped += (uint64_t)n;
		for (int i = 0; i < n; i++)
			complete_left(&q->obj, &c[i]);
	}
}

/* The queue's id goes (and its QP, if it has one): its events from now on are stale. */
static void release_id_now(struct qsm_conn *q, struct qsm_fid *id)
{
	bool had_qp = qsm_conn_has_qp(q);

	q->id = NULL;
	q->srq = NULL;
	qp_feed(q, QSM_EV_DESTROY);
	q->qp_state = (uint8_t)qsm_sm_qp.final_state; /* no QP, whatever the machine made of it */
	if (had_qp && !q->dead)
		flush_left(q, id);
	q->ctx->ops->destroy_id(id);
	q->obj.id_gen++;
}

/* Inline: a retry's RESOLVE_ADDR finds none (the failed attempt's edge let go of it). */
QSM_ALWAYS_INLINE void release_id(struct qsm_conn *q)
{
	if (q->id)
		release_id_now(q, q->id);
}

/* A call that failed now is fed back as the event its asynchronous failure would be. */
static void feed_back(struct qsm_conn *q, int event, int err)
{
	q->ctx->counters.action_errors++;
	qsm_post(q->ctx, &q->obj, event, err);
}

QSM_ALWAYS_INLINE int create_qp(struct qsm_conn *q)
{
	struct qsm_fabric_qp_attr attr;
	int r;

	/* on its class's SRQ of the device, if it asks for one: made now if this is the first */
	if (q->vt->srq.max_wr || q->send_depth || q->recv_depth) {
		attr = q->vt->qp;
		attr.max_send_wr = q->send_depth ? q->send_depth : attr.max_send_wr;
		attr.max_recv_wr = q->recv_depth ? q->recv_depth : attr.max_recv_wr;
		if (q->vt->srq.max_wr && (r = qsm_srq_for(q->du.dev, q->vt, &q->srq, &attr.srq)) < 0)
			return r;
		r = q->ctx->ops->create_qp(q->id, &attr);
	} else {
		r = q->ctx->ops->create_qp(q->id, &q->vt->qp);
	}
	if (r < 0) {
		q->srq = NULL;
		return r;
	}
	q->qp_state = (uint8_t)qsm_sm_qp.start_state;
	q->wc_error_queued = false;   /* a new QP: its first error completion is a WC_ERROR */
	/* its successes straight from the fabric's poll to the handler, where the fabric can
	 * (conn_complete's checks hold: taken back when the queue dies; the id goes with it) */
	if (q->ctx->ops->set_complete && q->vt->completion)
		q->ctx->ops->set_complete(q->id, q->vt->completion, q);
	qp_feed(q, QSM_EV_QP_TO_INIT);
	return 0;
}

/* What rdma_resolve_addr/route are given: the step's timeout fires 1 s after theirs. */
static int resolve_ms(const struct qsm_conn *q)
{
	return (int)(q->cfg->step_ms[QSM_STEP_RESOLVE] - 1000);
}

/*
 * One action of an edge.  0: go on with the edge's next action; < 0: this one failed (its
 * failure is queued as the event an asynchronous failure would be) or a handler refused, and
 * the rest of the edge's actions are skipped: nothing is sent on a QP that is not there.
 */
QSM_ALWAYS_INLINE int run_action(struct qsm_conn *q, enum qsm_queue_action a,
				  struct qsm_event_info *info, const struct qsm_item *it, int to)
{
	struct qsm_ctx *ctx = q->ctx;
	const struct qsm_fabric_ops *ops = ctx->ops;
	bool cancelled = false; /* only a handler can kill its queue */
	int r = 0, fail_ev = 0;

	switch (a) {
	case QSM_ACT_RESOLVE_ADDR:
		release_id(q);
		r = ops->create_id(ctx->fabric, &q->obj, &q->id);
		if (r < 0)
			q->id = NULL;
		else
			r = ops->resolve_addr(q->id, q->src ? &q->src->sa : NULL, &q->dst.sa,
					      resolve_ms(q));
		fail_ev = QSM_EV_ADDR_ERROR;
		break;
	case QSM_ACT_RESOLVE_ROUTE: {
		struct qsm_fdev *d = ops->id_device(q->id);

		if (d && (!q->du.dev || q->du.dev->fdev != d)) {
			/* another device now: what was registered on the old one goes */
			qsm_conn_release_mrs(q, false);
			qsm_device_detach(&q->du);
			r = qsm_device_attach(q->ctx, &q->du, d);
		}
		/* no registry entry (no sentinel, no memory): this attempt cannot work, retry */
		if (r == 0)
			r = ops->resolve_route(q->id, resolve_ms(q));
		fail_ev = QSM_EV_ROUTE_ERROR;
		break;
	}
	case QSM_ACT_CREATE_QP:
		r = create_qp(q);
		fail_ev = QSM_EV_CONNECT_ERROR;
		break;
	case QSM_ACT_QP_READY:
		/* the QP is there and nothing is sent yet: the ULP posts its receives now */
		cancelled = call(q, q->vt->qp_ready, info, it, q->state, to);
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
		qsm_conn_reset_backoff(q);
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
		qsm_conn_arm_retry(q, it->status);
		break;
	case QSM_ACT_ARM_FAST_RETRY:
		qsm_conn_arm_fast_retry(q, it->status);
		break;
	case QSM_ACT_NOTIFY:
		/* An error is the RTU winning the race (the CM established meanwhile): its
		 * ESTABLISHED is on its way, and nothing is left to do. */
		if (ops->notify)
			(void)ops->notify(q->id);
		break;
	case QSM_ACT_RETRY_NOW:
		q->next_delay_ms = 0;
		qsm_timer_arm(ctx, &q->timer, QSM_EV_RETRY, 0);
		break;
	case QSM_ACT_PROBE:
		/* The last probe still out (-EBUSY) is still the probe; a QP already in ERR has
		 * its event on the way.  Nothing here ends the edge: the next probe is armed. */
		if (ops->probe)
			(void)ops->probe(q->id);
		qsm_timer_arm(ctx, &q->timer, QSM_EV_TIMEOUT, q->cfg->step_ms[QSM_STEP_KEEPALIVE]);
		break;
	case QSM_ACT_RELEASE_DEVICE:
		ctx->counters.device_removals++;
		cancelled = call(q, q->vt->device_removed, info, it, q->state, to);
		release_id(q);
		qsm_conn_release_mrs(q, false);
		qsm_device_detach(&q->du);
		break;
	case QSM_ACT_RELEASE_ALL:
		qsm_timer_cancel(ctx, &q->timer);
		release_id(q);
		qsm_conn_release_mrs(q, false);
		qsm_device_detach(&q->du);
		break;
	}
	if (r < 0) {
		feed_back(q, fail_ev, r);
		return r;
	}
	/* a handler refused (or destroyed its queue) in this action: ABORT or DESTROY follows */
	return cancelled ? -ECANCELED : 0;
}

/* Last step of a queue: off every list; memory goes when no queued event points here. */
static void conn_close(struct qsm_conn *q)
{
	void (*release)(struct qsm_conn *) = q->vt->release;

	if (release && !q->dead)
		release(q);
	q->dead = true;   /* (its id goes next, and with it the fabric's handler of it) */
	q->obj.closed = true;
	qsm_timer_remove(q->ctx, &q->timer);
	release_id(q);
	qsm_conn_release_mrs(q, true);
	qsm_device_detach(&q->du);
	qsm_list_del(&q->obj.node);
	q->ctx->counters.queues_live--;
}


/* The QP's own events, one bit each from QP_FATAL on: what the QP itself went through, fed
 * to the QP machine before the queue's machine hears of it.  In an edge's function the event
 * is a constant, and the test is gone from every edge but these. */
#define QP_BIT(e) (1u << (QSM_EV_##e - QSM_EV_QP_FATAL))
#define QP_EVENTS (QP_BIT(QP_FATAL) | QP_BIT(WC_ERROR) | QP_BIT(DRAINED) | QP_BIT(LAST_WQE) | \
		   QP_BIT(COMM_EST) | QP_BIT(SQ_DRAINED) | QP_BIT(PATH_MIG) | QP_BIT(PATH_MIG_ERR))
_Static_assert(QSM_EV_PATH_MIG_ERR - QSM_EV_QP_FATAL < 32, "the QP's events fit one word");
QSM_ALWAYS_INLINE void qp_event(struct qsm_conn *q, int event)
{
	if ((unsigned)(event - QSM_EV_QP_FATAL) < 32 && (QP_EVENTS >> (event - QSM_EV_QP_FATAL)) & 1)
		qp_feed(q, event);
}

static void take_abort(struct qsm_conn *q);

/* No edge for the event here: counted, traced, told to the class; the machine stays. */
static void unexpected(struct qsm_conn *q, const struct qsm_item *it)
{
	struct qsm_event_info info = { .event = 0 };

	qsm_step_counted(q->ctx, it->event);
	qp_event(q, it->event);
	qsm_step_unexpected(q->ctx, kind_name(q->passive), q->vt->cls->name, q->obj.serial, state_name(q, q->state),
			    it->event, it->status);
	call(q, q->vt->unexpected, &info, it, q->state, q->state);
	take_abort(q);
}

/*
 * An edge, as the machine's edge list (sm/edges.h) gives it: the class's handlers around it,
 * its actions in order (inline: a is a constant in each case), the target's step timeout armed
 * on arrival.  P is 1 for the passive machine (accept), 0 for the active one (cm_id).  Every
 * argument but q, info and it is a constant of its edge, so each edge compiles into the code
 * one would write by hand for it.
 */
QSM_ALWAYS_INLINE void leave(struct qsm_conn *q, int P, struct qsm_event_info *info,
			     const struct qsm_item *it, int from, int to)
{
	if (q->vt->leave_mask[P] & (1u << from)) {
		const struct qsm_state_handlers *hs = q->vt->state[P];

		call(q, hs[from].on_event, info, it, from, to);
		if (to != from)
			call(q, hs[from].exit, info, it, from, to);
	}
	if (to != from) {
		/* O(1): the old state's timer is void; an action may arm a new one (arm_retry) */
		qsm_timer_cancel(q->ctx, &q->timer);
	}
}

/*
 * A state whose machine says after_cm (CONNECTING's and ACCEPTING's connect_ms): its timer is a
 * last resort.  The kernel's CM ends an attempt by itself, after its own retries (REJECTED,
 * UNREACHABLE, CONNECT_ERROR), and a timer that fires first tears down a connection the CM would
 * still complete (a REP or RTU lost in a connect storm is sent again seconds later).  So it
 * never fires before the fabric's CM bound and a quarter more, for the CM's event to get
 * through a loaded host and ctx.
 */
static __attribute__((noinline)) uint32_t after_cm_bound(const struct qsm_conn *q, uint32_t ms)
{
	uint32_t cm = q->ctx->ops->cm_timeout_ms(q->id);

	return cm && cm + cm / 4 > ms ? cm + cm / 4 : ms;
}

/* Inline: a fabric with no CM bound (the sim's) asks nothing. */
QSM_ALWAYS_INLINE uint32_t after_cm_ms(const struct qsm_conn *q, uint32_t ms)
{
	return q->id && q->ctx->ops->cm_timeout_ms ? after_cm_bound(q, ms) : ms;
}

QSM_ALWAYS_INLINE void arrive(struct qsm_conn *q, int P, struct qsm_event_info *info,
			      const struct qsm_item *it, int from, int event, int to,
			      enum qsm_step_timeout timeout, bool final)
{
	struct qsm_ctx *ctx = q->ctx;

	qsm_step_taken(ctx, kind_name(P), q->vt->cls->name, q->obj.serial,
		       state_name(q, from), event, state_name(q, to), it->status);
	q->state = (uint8_t)to;
	if (event == QSM_EV_RETRY)
		ctx->counters.reconnects++;
	if (final) {
		conn_close(q);
		return;
	}
	if (to != from) {
		if (timeout != QSM_STEP_NONE && q->cfg->step_ms[timeout])
			qsm_timer_arm(ctx, &q->timer, QSM_EV_TIMEOUT,
				      (P ? QSM_AFTER_CM_ACCEPT(to) : QSM_AFTER_CM_CM_ID(to))
					      ? after_cm_ms(q, q->cfg->step_ms[timeout])
					      : q->cfg->step_ms[timeout]);
		if (q->vt->enter_mask[P] & (1u << to))
			call(q, q->vt->state[P][to].enter, info, it, from, to);
	}
}

/* An action that failed, or a handler that refused, skips the edge's other actions. */
#define QUEUE_ACTION(a) \
	if (run_action(q, a, info, it, to_) < 0) \
		break;

/* Nothing told yet: what the handlers are told is put together for the first that runs. */
QSM_ALWAYS_INLINE void untold(struct qsm_event_info *info)
{
	info->event = 0;
}

/* One edge of machine M: a function of its own, all of whose constants are the edge's. */
#define QUEUE_EDGE_BODY(M, P, from, event, to, timeout, final, actions) \
	{ \
		struct qsm_event_info info_, *const info = &info_; \
		const int to_ = (to); \
		untold(info); \
		qsm_step_counted(q->ctx, event); \
		qp_event(q, event); \
		leave(q, P, info, it, from, to_); \
		do { \
			actions \
		} while (0); \
		qsm_edge_taken(q->ctx, M, from, event); \
		arrive(q, P, info, it, from, event, to_, timeout, final); \
		take_abort(q); \
	}

typedef void queue_edge_fn(struct qsm_conn *q, const struct qsm_item *it);

#define CM_ID_EDGE(n, from, event, to, timeout, final, actions) \
	static void cm_id_edge_##n(struct qsm_conn *q, const struct qsm_item *it) \
	QUEUE_EDGE_BODY(QSM_MACHINE_CM_ID, 0, from, event, to, timeout, final, actions)
#define ACCEPT_EDGE(n, from, event, to, timeout, final, actions) \
	static void accept_edge_##n(struct qsm_conn *q, const struct qsm_item *it) \
	QUEUE_EDGE_BODY(QSM_MACHINE_ACCEPT, 1, from, event, to, timeout, final, actions)
QSM_EDGES_CM_ID(CM_ID_EDGE, QUEUE_ACTION)
QSM_EDGES_ACCEPT(ACCEPT_EDGE, QUEUE_ACTION)

/* Each machine's edges by number (sm/edges.h's qsm_edge_index_M), 0: no edge */
#define CM_ID_ENTRY(n, ...) [n] = cm_id_edge_##n,
#define ACCEPT_ENTRY(n, ...) [n] = accept_edge_##n,
static queue_edge_fn *const cm_id_edges[QSM_EDGE_COUNT_CM_ID + 1] = {
	[0] = unexpected,
	QSM_EDGES_CM_ID(CM_ID_ENTRY, QUEUE_ACTION)
};
static queue_edge_fn *const accept_edges[QSM_EDGE_COUNT_ACCEPT + 1] = {
	[0] = unexpected,
	QSM_EDGES_ACCEPT(ACCEPT_ENTRY, QUEUE_ACTION)
};

/* One event through the queue's machine: one load from its table of edges, one call (a jump:
 * the edge counts the event and takes the ABORT edge after it if a handler refused).  (Every
 * event is below QSM_EV_LIMIT: the counters are indexed by it too.) */
QSM_ALWAYS_INLINE void step_item(struct qsm_conn *q, const struct qsm_item *it)
{
	if (q->passive)
		accept_edges[qsm_edge_index_accept[q->state][it->event]](q, it);
	else
		cm_id_edges[qsm_edge_index_cm_id[q->state][it->event]](q, it);
}

/* An event that comes from no FIFO slot (an abort, a WC_ERROR the FIFO had no room for). */
static void step(struct qsm_conn *q, int event, int status)
{
	struct qsm_item it;

	it.target = &q->obj;
	it.id = NULL;
	it.gen = q->obj.id_gen;
	it.event = event;
	it.status = status;
	it.pdata = NULL;
	it.pdata_len = 0;
	step_item(q, &it);
}

/* A handler returned non-zero: the ABORT edge, at once, with no callback on the way. */
static void take_abort(struct qsm_conn *q)
{
	if (!q->abort_pending || q->obj.closed)
		return;
	q->abort_pending = false;
	q->ctx->counters.aborts++;
	step(q, QSM_EV_ABORT, 0);
}

/* An event of a destroyed queue, or of an id it already let go of. */
static __attribute__((noinline, cold)) void conn_drop(struct qsm_conn *q)
{
	q->ctx->counters.dropped++;
}

static void conn_dispatch(struct qsm_obj *o, const struct qsm_item *it)
{
	struct qsm_conn *q = qsm_container_of(o, struct qsm_conn, obj);

	/* closed: dead as well (conn_close) */
	if ((q->dead && (q->obj.closed || (it->event != QSM_EV_DESTROY && it->event != QSM_EV_ABORT))) ||
	    qsm_item_stale(it, &q->obj)) {
		conn_drop(q);
		return;
	}
	step_item(q, it);
}

/* ctx teardown: no callbacks, no events; everything released now. */
static void conn_teardown(struct qsm_obj *o)
{
	struct qsm_conn *q = qsm_container_of(o, struct qsm_conn, obj);

	q->dead = true;   /* conn_close lets go of the id */
	if (qsm_conn_sm(q)->facts[q->state].teardown == QSM_TEARDOWN_REJECT && q->id)
		q->ctx->ops->reject(q->id, NULL, 0);
	conn_close(q);
	if (!q->obj.refs)
		conn_free(&q->obj);
}

static void conn_free(struct qsm_obj *o)
{
	struct qsm_conn *q = qsm_container_of(o, struct qsm_conn, obj);

	if (q->cfg)
		qsm_conn_cfg_put(q->ctx, q->cfg);
	qsm_fifo_unreserve(q->ctx, QSM_OBJ_EVENTS);
	qsm_timer_unreserve(q->ctx);
	free(q->pdata);
	if (!q->passive)
		free(q->src);   /* (a passive queue's allocation ends before it) */
	free(q);
}

/* The private data the next connect, accept or reject sends (a copy; len 0: none). */
int qsm_conn_set_pdata(struct qsm_conn *q, const void *pdata, size_t len)
{
	uint8_t *p = NULL;

	if (len && !(p = malloc(len)))
		return -ENOMEM;
	if (len)
		memcpy(p, pdata, len);
	free(q->pdata);
	q->pdata = p;
	q->pdata_len = (uint8_t)len;
	return 0;
}

/* What a queue hears from the registry's fan-out: what its machine has edges for. */
static int conn_state(const struct qsm_obj *o, enum qsm_machine *m)
{
	const struct qsm_conn *q = qsm_container_of(o, struct qsm_conn, obj);

	*m = qsm_conn_sm(q)->id;
	return q->dead ? -1 : q->state;
}

/* An error completion: WC_ERROR, the QP's first, queued before the handler runs (stepped at
 * once after it if the FIFO had no room: then it is not counted against the dispatch budget,
 * as an ABORT is not, qsm_ctx_dispatch(3); the batch still stops at the budget's end). */
static void complete_error(struct qsm_conn *q, const struct qsm_fabric_cqe *c)
{
	bool wc_error_now = queue_wc_error(q, c) < 0;

	completion(q, &c->wc);
	take_abort(q);
	if (!wc_error_now || q->dead)
		return;
	step(q, QSM_EV_WC_ERROR, -EIO);   /* its edge feeds the QP machine first */
	take_abort(q);
}

/* One completion to its handler; a queue it closes is held until the batch is done. */
static inline void complete_one(struct qsm_ctx *ctx, struct qsm_conn *q, const struct qsm_fabric_cqe *c)
{
	int r;

	if (c->wc.status == QSM_WC_SUCCESS) {
		ctx->counters.completions++;
		if (!q->vt->completion || !(r = q->vt->completion(q, &c->wc)))
			return;
		refused(q, r);
		take_abort(q);
	} else {
		complete_error(q, c);
	}
	qsm_obj_hold(ctx, &q->obj);
}

/* A completion delivered straight, refused by the handler: complete_one's refusal. */
static void conn_refused(struct qsm_obj *o, int r)
{
	struct qsm_conn *q = qsm_container_of(o, struct qsm_conn, obj);

	refused(q, r);
	take_abort(q);
	qsm_obj_hold(q->ctx, &q->obj);
}

static inline struct qsm_conn *owner_of(const struct qsm_fabric_cqe *c)
{
	return qsm_container_of((struct qsm_obj *)c->owner, struct qsm_conn, obj);
}

/*
 * Completions of a batch, straight from the fabric to the handlers, while the FIFO stays empty.
 * Stale when the queue let go of the id since: the id itself (within the batch it came in),
 * and gen (set aside since).  Nothing is held per completion: a queue closes here only by an
 * abort or an error completion's step, and is then held until the batch is done.
 */
static unsigned conn_complete(struct qsm_ctx *ctx, const struct qsm_fabric_cqe *c, unsigned n,
			      const uint32_t *gen)
{
	unsigned i;

	if (gen) {
		/* set aside behind the FIFO: the id may have been let go of since, and reused */
		for (i = 0; i < n && !ctx->fifo_len; i++) {
			struct qsm_conn *q = owner_of(&c[i]);

			if (q->dead || c[i].id != q->id || gen[i] != q->obj.id_gen)
				ctx->counters.dropped++;
			else
				complete_one(ctx, q, &c[i]);
		}
		return i;
	}
	for (i = 0; i < n && !ctx->fifo_len; i++) {
		struct qsm_conn *q = owner_of(&c[i]);

		if (q->dead || c[i].id != q->id)
			ctx->counters.dropped++;   /* destroyed (closed too), or of an older id */
		else
			complete_one(ctx, q, &c[i]);
	}
	return i;
}

/* Its QP's state, for the live picture: -1 with no QP. */
static int conn_qp_state(const struct qsm_obj *o)
{
	const struct qsm_conn *q = qsm_container_of(o, struct qsm_conn, obj);

	return q->dead || !qsm_conn_has_qp(q) ? -1 : q->qp_state;
}

const struct qsm_obj_ops qsm_conn_ops = {
	.dispatch = conn_dispatch,
	.complete = conn_complete,
	.refused = conn_refused,
	.teardown = conn_teardown,
	.free = conn_free,
	.state = conn_state,
	.qp_state = conn_qp_state,
};

/* A queue that never took an event (spawn failed): gone now, with nothing to tell. */
void qsm_conn_teardown(struct qsm_conn *q)
{
	conn_teardown(&q->obj);
}
