/* rdma-qsm internal: what registry/ offers the layers above -- a ctx's devices (device.c:
 * the users of each, its sentinel, its machine), pools registered on each (pool.c), SRQs. */
#ifndef QSM_REGISTRY_H
#define QSM_REGISTRY_H

#include "class.h"
#include "core/core.h"

/* What uses a device: a queue holds one (qsm_conn.du).  The registry knows its users only
 * through this: DEVICE_REMOVAL is queued to its owner, the object whose timer it follows
 * (QSM_DEV_USER_AFTER_TIMER where each user is declared; no pointer back, as a timer has
 * none: a queue stays small). */
struct qsm_dev_user {
	struct qsm_device *dev;     /* NULL: none attached */
	struct qsm_list node;       /* in qsm_device.users */
};

#define QSM_DEV_USER_AFTER_TIMER(type)                                                   \
	_Static_assert(offsetof(type, du) == sizeof(struct qsm_obj) + sizeof(struct qsm_timer), \
		       #type ": its device user right after its timer")

static inline struct qsm_obj *qsm_dev_user_owner(struct qsm_dev_user *u)
{
	return qsm_timer_owner((struct qsm_timer *)(void *)((char *)u - sizeof(struct qsm_timer)));
}

struct qsm_device {
	struct qsm_obj obj;
	struct qsm_ctx *ctx;
	struct qsm_fdev *fdev;
	struct qsm_list pool_regs;  /* struct qsm_pool_reg.dev_node */
	struct qsm_fid *sentinel;   /* bound to the device: DEVICE_REMOVAL even in the gap */
	struct qsm_list users;      /* struct qsm_dev_user.node: the queues on it */
	struct qsm_list srqs;       /* struct qsm_srq: one per class that asks (registry/srq.c) */
	uint8_t state;              /* its machine's (sm/device.rl) */
};

/* A shared receive queue of a device of the registry, for the queues of one class. */
struct qsm_srq {
	struct qsm_list node;       /* in qsm_device.srqs */
	struct qsm_device *dev;
	const struct qsm_vtable *vt;
	struct qsm_fsrq *fsrq;
};

/* A pool, and its registration on each device of the registry. */
struct qsm_pool {
	struct qsm_ctx *ctx;
	void *addr;
	size_t len;
	int access;
	struct qsm_list regs;       /* struct qsm_pool_reg.pool_node */
	struct qsm_list node;       /* ctx->pools */
};

struct qsm_pool_reg {
	struct qsm_pool *pool;
	struct qsm_device *dev;
	struct qsm_fmr *fmr;
	uint32_t lkey, rkey;
	struct qsm_list pool_node, dev_node;
};

/* A device takes new users and registrations unless its machine says it is retiring. */
static inline bool qsm_device_usable(const struct qsm_device *d)
{
	return !qsm_sm_device.facts[d->state].retiring;
}

/* device.c: u attaches to the registry's device of fdev (made, and its sentinel bound, if
 * it is new); detach lets go (the last user's detach closes the device). */
int qsm_device_attach(struct qsm_ctx *ctx, struct qsm_dev_user *u, struct qsm_fdev *fdev);
void qsm_device_detach(struct qsm_dev_user *u);
/* DEVICE_ADDED or PORT_ACTIVE: to every object whose machine has an edge for it where it is. */
void qsm_registry_device_added(struct qsm_ctx *ctx, int event);
/* A port's event for the registry's entry of d: 0, or -ENOENT when no queue uses d. */
int qsm_registry_device_event(struct qsm_ctx *ctx, struct qsm_fdev *d, int event, int status);
/* The loop's hooks into the registry (core/ctx.h): set by whatever may wait for a device or
 * use one -- a queue (in the gap it waits for one), a listener (a removed device may return). */
static inline void qsm_registry_hook(struct qsm_ctx *ctx)
{
	ctx->device_added = qsm_registry_device_added;
	ctx->device_event = qsm_registry_device_event;
}

/* pool.c: what ibv_reg_mr refuses whatever the device; pools on each device */
bool qsm_mr_args_valid(const void *addr, size_t len, int access);
/* The pool's keys on a device of the registry (NULL: none): 0, or -ENODEV. */
int qsm_pool_keys_on(const struct qsm_pool *pool, const struct qsm_device *d, uint32_t *lkey,
		     uint32_t *rkey);
void qsm_pools_attach_device(struct qsm_device *d);
void qsm_pools_detach_device(struct qsm_device *d);

/* srq.c: the SRQ of class vt on device d (made when first asked), for a QP about to be made */
int qsm_srq_for(struct qsm_device *d, const struct qsm_vtable *vt, struct qsm_srq **srq,
		struct qsm_fsrq **fsrq);
void qsm_srqs_release(struct qsm_device *d);
void qsm_srq_limit(struct qsm_device *d, struct qsm_fsrq *fsrq);

#endif
