/* rdma-qsm: classes.  A slot a class leaves empty is looked up in its super class, ending
 * in qsm_base_class, whose handlers are the correct default for every edge. */
#include <stddef.h>
#include <stdlib.h>

#include "runtime.h"

/* No ULP handshake: a connection is usable as soon as it is established. */
static int base_connected_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	qsm_conn_ready(q);
	return 0;
}

/* A ULP that does not look at requests accepts them. */
static int base_requested_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	qsm_conn_accept(q, NULL, 0);
	return 0;
}

/* Counting and tracing are done by the runtime before this runs: nothing else to do. */
static int base_unexpected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)q;
	(void)ev;
	return 0;
}

const struct qsm_class qsm_base_class = {
	.name = "qsm_base",
	.active = {
		[QSM_CM_CONNECTED] = { .enter = base_connected_enter },
	},
	.passive = {
		[QSM_ACCEPT_REQUESTED] = { .enter = base_requested_enter },
		[QSM_ACCEPT_CONNECTED] = { .enter = base_connected_enter },
	},
	.unexpected = base_unexpected,
};

static const struct qsm_state_handlers *slot(const struct qsm_class *c, bool passive, int state)
{
	return passive ? &c->passive[state] : &c->active[state];
}

/* Walk to the base class; a class that forgot `super` still ends there. */
#define LOOKUP(c, expr) do { \
		for (const struct qsm_class *k = (c); k; \
		     k = k->super ? k->super : (k == &qsm_base_class ? NULL : &qsm_base_class)) \
			if (expr) \
				return expr; \
		return NULL; \
	} while (0)

qsm_handler_fn qsm_class_enter(const struct qsm_class *c, bool passive, int state)
{
	LOOKUP(c, slot(k, passive, state)->enter);
}

qsm_handler_fn qsm_class_exit(const struct qsm_class *c, bool passive, int state)
{
	LOOKUP(c, slot(k, passive, state)->exit);
}

qsm_handler_fn qsm_class_on_event(const struct qsm_class *c, bool passive, int state)
{
	LOOKUP(c, slot(k, passive, state)->on_event);
}

qsm_handler_fn qsm_class_unexpected(const struct qsm_class *c)
{
	LOOKUP(c, k->unexpected);
}

qsm_handler_fn qsm_class_device_removed(const struct qsm_class *c)
{
	LOOKUP(c, k->device_removed);
}

qsm_handler_fn qsm_class_qp_ready(const struct qsm_class *c)
{
	LOOKUP(c, k->qp_ready);
}

int (*qsm_class_completion(const struct qsm_class *c))(struct qsm_conn *q, const struct qsm_wc *wc)
{
	LOOKUP(c, k->completion);
}

void (*qsm_class_release(const struct qsm_class *c))(struct qsm_conn *q)
{
	LOOKUP(c, k->release);
}

/* The largest priv_size along the chain: a subclass embeds its super's struct. */
size_t qsm_class_priv_size(const struct qsm_class *c)
{
	size_t n = 0;

	for (const struct qsm_class *k = c; k; k = k->super)
		if (k->priv_size > n)
			n = k->priv_size;
	return n;
}

/* Resolved once per class and ctx (a ctx is one thread: no locking), freed with the ctx. */
const struct qsm_vtable *qsm_vtable_get(struct qsm_ctx *ctx, const struct qsm_class *c)
{
	struct qsm_vtable *vt;

	for (vt = ctx->vtables; vt; vt = vt->next)
		if (vt->cls == c)
			return vt;
	vt = calloc(1, sizeof(*vt));
	if (!vt)
		return NULL;
	vt->cls = c;
	for (int p = 0; p < 2; p++) {
		int n = p ? QSM_ACCEPT_STATE_COUNT : QSM_CM_STATE_COUNT;

		for (int st = 0; st < n; st++) {
			vt->state[p][st].enter = qsm_class_enter(c, p, st);
			vt->state[p][st].exit = qsm_class_exit(c, p, st);
			vt->state[p][st].on_event = qsm_class_on_event(c, p, st);
		}
	}
	vt->unexpected = qsm_class_unexpected(c);
	vt->device_removed = qsm_class_device_removed(c);
	vt->qp_ready = qsm_class_qp_ready(c);
	vt->completion = qsm_class_completion(c);
	vt->release = qsm_class_release(c);
	vt->priv_size = qsm_class_priv_size(c);
	vt->next = ctx->vtables;
	ctx->vtables = vt;
	return vt;
}

void qsm_vtables_free(struct qsm_ctx *ctx)
{
	while (ctx->vtables) {
		struct qsm_vtable *vt = ctx->vtables;

		ctx->vtables = vt->next;
		free(vt);
	}
}
