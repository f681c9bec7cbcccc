/* rdma-qsm: the device registry.  While any queue uses a device, a sentinel id bound to the
 * device receives DEVICE_REMOVAL, so that queues in the reconnect gap (no id) hear it too. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "registry/registry.h"
#include "sm/edges.h"

static void device_dispatch(struct qsm_obj *o, const struct qsm_item *it);
static void device_teardown(struct qsm_obj *o);

static void device_free(struct qsm_obj *o)
{
	free(qsm_container_of(o, struct qsm_device, obj));
}

static int device_state(const struct qsm_obj *o, enum qsm_machine *m)
{
	*m = QSM_MACHINE_DEVICE;
	return qsm_container_of(o, struct qsm_device, obj)->state;
}

/* (Its machine has no DEVICE_ADDED edge: a device is a registry entry, not a waiter.  A
 * port's events other than PORT_ERR and PORT_ACTIVE come to it: qsm_registry_device_event.) */
static const struct qsm_obj_ops device_ops = {
	.dispatch = device_dispatch,
	.teardown = device_teardown,
	.free = device_free,
	.state = device_state,
	.teardown_last = true, /* after the queued events that point at it are dropped */
};

static struct qsm_device *find(struct qsm_ctx *ctx, struct qsm_fdev *fdev)
{
	struct qsm_list *head = &ctx->objs[QSM_OBJ_DEVICE];

	for (struct qsm_list *n = head->next; n != head; n = n->next) {
		struct qsm_device *d = qsm_container_of(n, struct qsm_device, obj.node);

		if (d->fdev == fdev && qsm_device_usable(d))
			return d;
	}
	return NULL;
}

static void open_sentinel(struct qsm_device *d)
{
	const struct qsm_fabric_ops *ops = d->ctx->ops;
	struct sockaddr_storage ss;

	if (ops->device_addr(d->fdev, &ss) < 0 || ops->create_id(d->ctx->fabric, &d->obj, &d->sentinel) < 0) {
		d->sentinel = NULL;
		return;
	}
	if (ops->bind(d->sentinel, (struct sockaddr *)&ss) < 0) {
		ops->destroy_id(d->sentinel);
		d->sentinel = NULL;
	}
}

int qsm_device_attach(struct qsm_ctx *ctx, struct qsm_dev_user *u, struct qsm_fdev *fdev)
{
	struct qsm_device *d = find(ctx, fdev);

	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d)
			return -ENOMEM;
		d->obj.ops = &device_ops;
		d->obj.kind = QSM_OBJ_DEVICE;
		d->state = (uint8_t)qsm_sm_device.start_state;
		d->obj.serial = ++ctx->next_serial;
		d->ctx = ctx;
		d->fdev = fdev;
		qsm_list_init(&d->users);
		qsm_list_init(&d->pool_regs);
		qsm_list_init(&d->srqs);
		open_sentinel(d);
		if (!d->sentinel) {
			/* Nothing would tell a queue in the gap that this device went away (it may
			 * be going already), so holding it there could block its removal forever:
			 * no registry entry; the next attach tries again. */
			free(d);
			return -ENODEV;
		}
		ctx->ops->device_get(fdev);
		qsm_list_add_tail(&ctx->objs[QSM_OBJ_DEVICE], &d->obj.node);
		ctx->counters.devices_live++;
		qsm_pools_attach_device(d);
	}
	u->dev = d;
	qsm_list_add_tail(&d->users, &u->node);
	return 0;
}

static void run_action(struct qsm_device *d, enum qsm_device_action a, int status,
		       struct qsm_fsrq *srq)
{
	struct qsm_ctx *ctx = d->ctx;

	switch (a) {
	case QSM_ACT_RELEASE_SENTINEL:
		if (d->sentinel) {
			ctx->ops->destroy_id(d->sentinel);
			d->obj.id_gen++;
			d->sentinel = NULL;
		}
		break;
	case QSM_ACT_NOTIFY_QUEUES:
		for (struct qsm_list *n = d->users.next; n != &d->users; n = n->next)
			qsm_post(ctx, qsm_dev_user_owner(qsm_container_of(n, struct qsm_dev_user, node)),
				 QSM_EV_DEVICE_REMOVAL, status);
		break;
	case QSM_ACT_RELEASE_REGISTRY:
		qsm_pools_detach_device(d);
		qsm_srqs_release(d);   /* no queue is on the device: no QP is on them */
		run_action(d, QSM_ACT_RELEASE_SENTINEL, status, NULL);
		ctx->ops->device_put(d->fdev);
		qsm_list_del(&d->obj.node);
		ctx->counters.devices_live--;
		break;
	case QSM_ACT_SRQ_LOW:
		qsm_srq_limit(d, srq);
		break;
	}
}

static const char *state_name(int s)
{
	return qsm_sm_device.state_names[s];
}

/* One event through the device's machine (sm/device.rl).  DESTROY is the registry's own,
 * taken at once when the last queue lets go (or the ctx goes), not from the FIFO. */
#define DEVICE_ACTION(a) run_action(d, a, status, srq);
#define DEVICE_EDGE(from, event, to, timeout, final, actions) \
	case (event): \
		actions \
		qsm_step_taken(ctx, "device", name, d->obj.serial, \
			       state_name(from), event, state_name(to), status); \
		qsm_edge_taken(ctx, QSM_MACHINE_DEVICE, from, event); \
		d->state = (uint8_t)(to); \
		d->obj.closed = (final); \
		return;

static void step(struct qsm_device *d, int event, int status, struct qsm_fsrq *srq)
{
	struct qsm_ctx *ctx = d->ctx;
	char name[64] = "";

	/* The device's name for the trace, copied before the edge's actions: the last put of
	 * a removed device frees the fabric's record of it, name and all (seen by TSan in
	 * tests/vm/spread.c, traced, through rdma link delete) */
	if (ctx->tracing)
		snprintf(name, sizeof(name), "%s", ctx->ops->device_name(d->fdev));
	/* the sentinel is only bound: anything else (CM_UNKNOWN) has no edge */
	QSM_SWITCH_DEVICE(d->state, event, DEVICE_EDGE, DEVICE_ACTION,
			  qsm_step_unexpected(ctx, "device", name,
					      d->obj.serial, state_name(d->state), event, status))
}

/* No more users: the entry goes (its memory once no queued event points at it). */
static void device_close(struct qsm_device *d)
{
	if (d->obj.closed)
		return;
	d->ctx->counters.device_closes++;
	qsm_step_counted(d->ctx, QSM_EV_DESTROY);
	step(d, QSM_EV_DESTROY, 0, NULL);
}

void qsm_device_detach(struct qsm_dev_user *u)
{
	struct qsm_device *d = u->dev;

	if (!d)
		return;
	u->dev = NULL;
	qsm_list_del(&u->node);
	if (qsm_list_empty(&d->users)) {
		device_close(d);
		if (!d->obj.refs)
			free(d);
	}
}

/* The sentinel's DEVICE_REMOVAL (every queue on the device takes its edge), or an SRQ's limit. */
static void device_dispatch(struct qsm_obj *o, const struct qsm_item *it)
{
	struct qsm_device *d = qsm_container_of(o, struct qsm_device, obj);
	struct qsm_ctx *ctx = d->ctx;

	if (d->obj.closed) {
		ctx->counters.dropped++;
		return;
	}
	qsm_step_counted(ctx, it->event);
	step(d, it->event, it->status, it->srq);
}

static void device_teardown(struct qsm_obj *o)
{
	struct qsm_device *d = qsm_container_of(o, struct qsm_device, obj);

	/* ctx teardown: queues are gone by now */
	while (!qsm_list_empty(&d->users)) {
		struct qsm_dev_user *u = qsm_container_of(d->users.next, struct qsm_dev_user, node);

		u->dev = NULL;
		qsm_list_del(&u->node);
	}
	device_close(d);
	if (d->obj.refs == 0 || d->obj.closed)
		free(d);
}

/* Who hears DEVICE_ADDED: whoever's machine has an edge for it where it is now, queues
 * before listeners (the order of enum qsm_obj_kind after its first kind), each once. */
void qsm_registry_device_added(struct qsm_ctx *ctx, int event)
{
	static const enum qsm_obj_kind order[] = { QSM_OBJ_CONN, QSM_OBJ_LISTENER };

	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		struct qsm_list *head = &ctx->objs[order[k]];

		for (struct qsm_list *n = head->next; n != head; n = n->next) {
			struct qsm_obj *o = qsm_container_of(n, struct qsm_obj, node);
			enum qsm_machine m;
			int st = o->ops->state ? o->ops->state(o, &m) : -1;

			if (st >= 0 && qsm_edges_has(m, st, event))
				qsm_post(ctx, o, event, 0);
		}
	}
}

int qsm_registry_device_event(struct qsm_ctx *ctx, struct qsm_fdev *fdev, int event, int status)
{
	struct qsm_list *head = &ctx->objs[QSM_OBJ_DEVICE];

	/* its live entry, or the one retiring (REMOVING counts them too) */
	for (struct qsm_list *n = head->next; n != head; n = n->next) {
		struct qsm_device *d = qsm_container_of(n, struct qsm_device, obj.node);

		if (d->fdev == fdev && !d->obj.closed) {
			qsm_post(ctx, &d->obj, event, status);
			return 0;
		}
	}
	return -ENOENT;
}
