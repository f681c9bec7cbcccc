/* rdma-qsm: listeners.  A listener hands each CONNECT_REQUEST to a new passive queue, and
 * outlives its device: after DEVICE_REMOVAL it waits and listens again when it can. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "argcheck.h"
#include "queue/queue.h"
#include "registry/registry.h"
#include "sm/edges.h"

struct qsm_listener {
	struct qsm_obj obj;
	struct qsm_timer timer;
	struct qsm_ctx *ctx;
	uint8_t state;
	bool dead;                  /* destroy was called: no new passive queue from now on */
	struct qsm_fid *id;
	const struct qsm_class *cls;
	union qsm_addr addr;
	int backlog;
	struct qsm_reconnect_policy relisten;
	struct qsm_timeouts timeouts;
	uint32_t next_delay_ms;
	void *user;
	/* qsm_listener_spread(): the ctxs its requests go to in turn (NULL: its own) */
	struct qsm_ctx **spread;
	unsigned nspread, next;
};
QSM_TIMER_AFTER_OBJ(struct qsm_listener);

/* A request on its way to another ctx's inbox: what its passive queue is made of there. */
struct handoff {
	struct qsm_inbox_item in;
	struct qsm_fid *id;
	const struct qsm_class *cls;
	void *user;
	struct qsm_timeouts timeouts;
	int status;
	uint32_t pdata_len;
	uint8_t pdata[];
};

static const struct qsm_obj_ops listener_ops;

static void listener_free(struct qsm_obj *o)
{
	struct qsm_listener *l = qsm_container_of(o, struct qsm_listener, obj);

	qsm_fifo_unreserve(l->ctx, QSM_OBJ_EVENTS);
	qsm_timer_unreserve(l->ctx);
	free(l->spread);
	free(l);
}

/* On the receiving ctx's thread: the id is its fabric's now, and its passive queue is made
 * here as the listener's own ctx would have made it; one that cannot be made (or a ctx going
 * away) refuses the request, as the listener does. */
static void adopt_request(struct qsm_ctx *ctx, struct qsm_inbox_item *in, bool dropping)
{
	struct handoff *h = qsm_container_of(in, struct handoff, in);
	const struct qsm_item it = { .id = h->id, .event = QSM_EV_CONNECT_REQUEST, .status = h->status,
				     .pdata = h->pdata_len ? h->pdata : NULL, .pdata_len = h->pdata_len };

	ctx->ops->adopt(ctx->fabric, h->id);
	ctx->counters.adopted++;
	if (dropping || qsm_conn_spawn_passive(ctx, h->cls, h->user, &h->timeouts, &it) < 0) {
		ctx->counters.action_errors += !dropping;
		ctx->ops->reject(h->id, NULL, 0);
		ctx->ops->destroy_id(h->id);
	}
	free(h);
}

/* The request's id to `to` (another ctx, maybe on another thread), its passive queue made
 * there: 0, or -errno and the request is still here, untouched. */
static int hand_to(struct qsm_listener *l, struct qsm_ctx *to, const struct qsm_item *it)
{
	struct handoff *h = malloc(sizeof(*h) + it->pdata_len);
	int r;

	if (!h)
		return -ENOMEM;
	*h = (struct handoff){ .in.run = adopt_request, .id = it->id, .cls = l->cls, .user = l->user,
			       .timeouts = l->timeouts, .status = it->status, .pdata_len = it->pdata_len };
	if (it->pdata_len)
		memcpy(h->pdata, it->pdata, it->pdata_len);
	if ((r = l->ctx->ops->handoff(it->id, to->fabric)) < 0) {
		free(h);
		return r;
	}
	l->ctx->counters.handed_off++;
	qsm_inbox_push(to, &h->in);
	return 0;
}

/* Its own ctx, or the next of its spread; a request that cannot be handed stays here. */
static int spawn(struct qsm_listener *l, const struct qsm_item *it)
{
	struct qsm_ctx *to = l->nspread ? l->spread[l->next++ % l->nspread] : l->ctx;

	if (to != l->ctx && hand_to(l, to, it) == 0)
		return 0;
	return qsm_conn_spawn_passive(l->ctx, l->cls, l->user, &l->timeouts, it);
}

static const char *lstate(int s)
{
	return qsm_sm_listener.state_names[s];
}

static void release_listen_id(struct qsm_listener *l)
{
	if (l->id) {
		l->ctx->ops->destroy_id(l->id);
		l->obj.id_gen++;
		l->id = NULL;
	}
}

static int do_listen(struct qsm_listener *l)
{
	const struct qsm_fabric_ops *ops = l->ctx->ops;
	int r = ops->create_id(l->ctx->fabric, &l->obj, &l->id);

	if (r < 0) {
		l->id = NULL;
		return r;
	}
	r = ops->bind(l->id, &l->addr.sa);
	if (r == 0)
		r = ops->listen(l->id, l->backlog);
	if (r < 0)
		release_listen_id(l);
	return r;
}

static void arm_relisten(struct qsm_listener *l)
{
	qsm_timer_arm(l->ctx, &l->timer, QSM_EV_RETRY,
		      qsm_backoff_next(l->ctx, &l->relisten, &l->next_delay_ms));
}

static void listener_close(struct qsm_listener *l)
{
	l->obj.closed = true;
	qsm_timer_remove(l->ctx, &l->timer);
	release_listen_id(l);
	qsm_list_del(&l->obj.node);
}

static void run_action(struct qsm_listener *l, enum qsm_listener_action a, const struct qsm_item *it)
{
	switch (a) {
	case QSM_ACT_SPAWN_PASSIVE:
		if (spawn(l, it) < 0) {
			/* No queue for it: the peer hears a reject, not a timeout. */
			l->ctx->counters.action_errors++;
			l->ctx->ops->reject(it->id, NULL, 0);
			l->ctx->ops->destroy_id(it->id);
		}
		break;
	case QSM_ACT_RELEASE_LISTEN_ID:
		release_listen_id(l);
		break;
	case QSM_ACT_ARM_RELISTEN:
		arm_relisten(l);
		break;
	case QSM_ACT_TRY_LISTEN:
		if (do_listen(l) == 0) {
			qsm_timer_cancel(l->ctx, &l->timer);
			l->next_delay_ms = 0;
			qsm_post(l->ctx, &l->obj, QSM_EV_LISTEN, 0);
		} else {
			arm_relisten(l);
		}
		break;
	case QSM_ACT_RELEASE_LISTENER:
		listener_close(l);
		break;
	}
}

/* An edge of sm/listener.rl (sm/edges.h), its actions in order. */
#define LISTENER_ACTION(a) run_action(l, a, it);
#define LISTENER_EDGE(from, event, to, timeout, final, actions) \
	case (event): \
		if ((to) != (from)) \
			qsm_timer_cancel(ctx, &l->timer); \
		actions \
		qsm_step_taken(ctx, "listener", l->cls->name, l->obj.serial, lstate(from), event, \
			       lstate(to), it->status); \
		qsm_edge_taken(ctx, QSM_MACHINE_LISTENER, from, event); \
		if ((event) == QSM_EV_DEVICE_REMOVAL) \
			ctx->counters.device_removals++; \
		l->state = (uint8_t)(to); \
		return;

static void listener_dispatch(struct qsm_obj *o, const struct qsm_item *it)
{
	struct qsm_listener *l = qsm_container_of(o, struct qsm_listener, obj);
	struct qsm_ctx *ctx = l->ctx;

	if (l->obj.closed || (l->dead && it->event != QSM_EV_DESTROY) ||
	    (it->event != QSM_EV_CONNECT_REQUEST && qsm_item_stale(it, &l->obj))) {
		ctx->counters.dropped++;
		goto release_request;
	}
	qsm_step_counted(ctx, it->event);
	QSM_SWITCH_LISTENER(l->state, it->event, LISTENER_EDGE, LISTENER_ACTION,
			    qsm_step_unexpected(ctx, "listener", l->cls->name, l->obj.serial,
						lstate(l->state), it->event, it->status))

release_request:
	/* A request that reached no listener still owns an id: refuse it, never leak it. */
	if (it->event == QSM_EV_CONNECT_REQUEST && it->id) {
		ctx->ops->reject(it->id, NULL, 0);
		ctx->ops->destroy_id(it->id);
	}
}

int (qsm_listener_new)(struct qsm_ctx *ctx, const struct qsm_listener_opts *o, struct qsm_listener **ret)
{
	struct qsm_listener *l;
	struct qsm_timeouts t;
	int r;

	qsm_check(ctx && o && ret, -EINVAL);
	qsm_check(o->addr && o->cls, -EINVAL);
	qsm_check_mask(o->comp_mask, QSM_OPTS_MASK_KNOWN);
	qsm_check_class_mask(o->cls);
	qsm_check(qsm_class_caps_ok(o->cls), -EINVAL);
	qsm_check(o->backlog >= 0, -EINVAL);
	if ((r = qsm_timeouts_take(&t, &o->timeouts, o->comp_mask)) < 0)
		return r;
	if (o->addr->sa_family != AF_INET && o->addr->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->obj.ops = &listener_ops;
	l->obj.kind = QSM_OBJ_LISTENER;
	l->obj.serial = ++ctx->next_serial;
	l->ctx = ctx;
	l->cls = o->cls;
	memcpy(&l->addr, o->addr, o->addr->sa_family == AF_INET ? sizeof(l->addr.sin) : sizeof(l->addr.sin6));
	l->backlog = o->backlog ? o->backlog : 128;
	l->relisten = qsm_policy_resolved(&o->relisten);
	l->timeouts = t;
	l->user = o->user;
	l->timer.heap_idx = UINT32_MAX;
	/* its events and its timer have their room before it can have any (core/fifo.h) */
	if (qsm_timer_reserve(ctx) < 0) {
		free(l);
		return -ENOMEM;
	}
	if (qsm_fifo_reserve(ctx, QSM_OBJ_EVENTS) < 0) {
		qsm_timer_unreserve(ctx);
		free(l);
		return -ENOMEM;
	}
	r = do_listen(l);
	if (r == 0)
		r = qsm_post(ctx, &l->obj, QSM_EV_LISTEN, 0);
	if (r < 0) {
		release_listen_id(l);
		listener_free(&l->obj);
		return r;
	}
	qsm_list_add_tail(&ctx->objs[QSM_OBJ_LISTENER], &l->obj.node);
	qsm_registry_hook(ctx);
	*ret = l;
	return 0;
}

/* From now on no passive queue is made: requests already taken are rejected. */
int qsm_listener_destroy(struct qsm_listener *l)
{
	int r;

	qsm_check(l, -EINVAL);
	qsm_check(!l->obj.closed && !l->dead, -EINVAL);
	r = qsm_post_op(l->ctx, &l->obj, QSM_EV_DESTROY, 0);
	if (r == 0)
		l->dead = true;
	return r;
}

int qsm_listener_spread(struct qsm_listener *l, struct qsm_ctx *const *ctxs, unsigned n)
{
	struct qsm_ctx **copy = NULL;

	qsm_check(l && (ctxs || !n) && n <= QSM_MAX_SPREAD, -EINVAL);
	qsm_check(!l->obj.closed && !l->dead, -EINVAL);
	for (unsigned i = 0; i < n; i++) {
		qsm_check(ctxs[i], -EINVAL);
		/* the same backend, which can hand its ids to another of its fabrics */
		if (ctxs[i] != l->ctx && (ctxs[i]->ops != l->ctx->ops || !l->ctx->ops->handoff))
			return -EOPNOTSUPP;
	}
	if (n && !(copy = malloc(n * sizeof(*copy))))
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++)
		copy[i] = ctxs[i];
	free(l->spread);
	l->spread = copy;
	l->nspread = n;
	l->next = 0;
	return 0;
}

int qsm_listener_state(struct qsm_listener *l)
{
	qsm_check(l, -EINVAL);
	return l->state;
}

void *qsm_listener_user(struct qsm_listener *l)
{
	qsm_check(l, NULL);
	return l->user;
}


static void listener_teardown(struct qsm_obj *o)
{
	struct qsm_listener *l = qsm_container_of(o, struct qsm_listener, obj);

	listener_close(l);
	if (!l->obj.refs)
		listener_free(o);
}

static int listener_state(const struct qsm_obj *o, enum qsm_machine *m)
{
	*m = QSM_MACHINE_LISTENER;
	return qsm_container_of(o, struct qsm_listener, obj)->state;
}

static const struct qsm_obj_ops listener_ops = {
	.dispatch = listener_dispatch,
	.teardown = listener_teardown,
	.free = listener_free,
	.state = listener_state,
};
