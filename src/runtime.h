/* rdma-qsm internal: the runtime's objects (ctx, queues, listeners, devices, timers) and the
 * calls between its layers: core/ (the loop), queue/, listener.c, registry/, data/, class.c. */
#ifndef QSM_RUNTIME_H
#define QSM_RUNTIME_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include <qsm/ctx.h>

#include "fabric/fabric.h"
#include "list.h"
#include "sm.h"

/* What an id's owner pointer points at: the first member of each owner.  The loop knows
 * objects only through their ops; the kinds only order the ctx's lists (and its teardown). */
enum qsm_obj_kind { QSM_OBJ_LISTENER, QSM_OBJ_CONN, QSM_OBJ_DEVICE, QSM_OBJ_KINDS };
struct qsm_obj;
struct qsm_item;
struct qsm_obj_ops {
	void (*dispatch)(struct qsm_obj *o, const struct qsm_item *it);
	/* Completions c[0..n), each to its owner, in order, while the FIFO stays empty: how many
	 * were taken.  gen[i]: the owner's id_gen when c[i] was set aside (NULL: a batch just
	 * taken).  An owner that closes on the way and has no reference goes to ctx->held.  Only
	 * a queue has a QP, so only queues own the ids completions come on: one kind's op. */
	unsigned (*complete)(struct qsm_ctx *ctx, const struct qsm_fabric_cqe *c, unsigned n,
			     const uint32_t *gen);
	/* ctx teardown: no callbacks, no events; release everything now */
	void (*teardown)(struct qsm_obj *o);
	void (*free)(struct qsm_obj *o);
	/* The machine and state that decide what it hears (-1: nothing, it is going away),
	 * or NULL: not a machine's object. */
	int (*state)(const struct qsm_obj *o, enum qsm_machine *m);
	bool teardown_last;         /* torn down after the queued events are dropped */
};
struct qsm_obj {
	const struct qsm_obj_ops *ops;
	enum qsm_obj_kind kind;
	uint32_t serial;
	uint32_t refs;              /* queued events that point here; freed at 0 once closed */
	uint32_t id_gen;            /* bumped whenever it lets go of an id: queued events of
	                               an older id are stale (ids' addresses get reused) */
	bool closed;                /* reached the final state: no more events, no callbacks */
	struct qsm_list node;       /* ctx->objs[kind] */
};

struct qsm_timer {
	uint64_t deadline_ns;       /* when it fires, if armed */
	uint64_t key_ns;            /* its place in the heap: <= deadline_ns (lazy re-arm) */
	uint32_t heap_idx;          /* UINT32_MAX: not in the heap */
	bool armed;
	int event;                  /* QSM_EV_RETRY or QSM_EV_TIMEOUT */
	struct qsm_obj *owner;
};

union qsm_addr {
	struct sockaddr sa;
	struct sockaddr_in sin;
	struct sockaddr_in6 sin6;
};

struct qsm_device {
	struct qsm_obj obj;
	struct qsm_ctx *ctx;
	struct qsm_fdev *fdev;
	struct qsm_list pool_regs;  /* struct qsm_pool_reg.dev_node */
	struct qsm_fid *sentinel;   /* bound to the device: DEVICE_REMOVAL even in the gap */
	struct qsm_list conns;      /* queues attached (by qsm_conn.dev_node) */
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

/* A class with every slot looked up through its supers once: the hot path reads this. */
struct qsm_vtable {
	const struct qsm_class *cls;
	struct qsm_state_handlers state[2][QSM_CM_STATE_COUNT]; /* [passive][state] */
	qsm_handler_fn unexpected, device_removed, qp_ready;
	int (*completion)(struct qsm_conn *q, const struct qsm_wc *wc);
	void (*release)(struct qsm_conn *q);
	size_t priv_size;
	struct qsm_fabric_qp_attr qp;    /* caps of the QP its queues create */
	struct qsm_srq_caps srq;         /* max_wr 0: no SRQ */
	void (*srq_low)(struct qsm_srq *s);
	struct qsm_vtable *next;
};

struct qsm_conn {
	struct qsm_obj obj;
	struct qsm_ctx *ctx;
	const struct qsm_class *cls;
	const struct qsm_vtable *vt;
	const struct qsm_sm *sm;    /* cm_id (active) or accept (passive) */
	const struct qsm_sm_step *steps;     /* qsm_sm_steps[sm->id]: its machine's edges */
	const struct qsm_state_handlers *hs; /* vt->state[passive]: its handlers, by state */
	uint8_t state;
	uint8_t qp_state;           /* the QP machine's state; its final state: no QP */
	bool passive;
	bool dead;                  /* destroyed or aborted: no callback ever again */
	bool abort_pending;
	bool decided;               /* passive: accept or reject was called */
	bool wc_error_queued;       /* this QP's first error completion had its WC_ERROR */
	uint8_t pdata_len;          /* connect / accept / reject private data */
	struct qsm_fid *id;
	struct qsm_device *dev;
	struct qsm_srq *srq;         /* its QP's SRQ (its class asks for one), while it has a QP */
	struct qsm_list dev_node;
	struct qsm_timer timer;
	uint32_t attempts;
	uint32_t exhausted;          /* attempts in a row that failed for lack of a resource */
	uint32_t next_delay_ms;
	uint64_t lost_at_ns;
	struct qsm_reconnect_policy policy;
	uint32_t step_ms[QSM_STEP_COUNT]; /* each step timeout, its default applied (0: none) */
	union qsm_addr dst, src;
	bool has_src;
	void *user;
	struct qsm_list mrs;        /* struct qsm_mr.node: registered through this queue */
	struct qsm_list mws;        /* struct qsm_mw.node: its memory windows */
	uint8_t *pdata;             /* [pdata_len], allocated only when there is some: most
	                               queues send none, and a queue stays small */
	_Alignas(16) unsigned char priv[];
};

struct qsm_listener {
	struct qsm_obj obj;
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
	struct qsm_timer timer;
	void *user;
};

struct qsm_mr {
	struct qsm_conn *q;
	struct qsm_fmr *fmr;        /* NULL once its device went away */
	struct qsm_device *dev;
	uint32_t lkey, rkey;
	struct qsm_list node;
};

/* A memory window of a queue: released with its MRs (the device goes, the queue closes). */
struct qsm_mw {
	struct qsm_conn *q;
	struct qsm_fmw *fmw;        /* NULL once its device went away */
	uint32_t rkey;              /* its last bind's */
	struct qsm_list node;       /* in q->mws */
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

/* One event on its way to an object; private data copied in. */
struct qsm_item {
	struct qsm_obj *target;
	struct qsm_fid *id;         /* fabric events: the id it came on; else NULL */
	struct qsm_fsrq *srq;       /* SRQ_LIMIT (from the fabric only): the SRQ; else unset */
	uint32_t gen;               /* the target's id_gen when it was queued */
	int event;
	int status;
	size_t pdata_len;
	uint8_t pdata[QSM_FABRIC_PDATA_MAX];
};

struct qsm_ctx {
	struct qsm_fabric *fabric;
	const struct qsm_fabric_ops *ops;
	int epfd, timerfd, kickfd;
	uint64_t timerfd_at;         /* what the timerfd is armed for (0: disarmed) */
	bool kicked;
	bool dispatching;             /* inside qsm_ctx_dispatch(): the clock is pass_now_ns */
	bool pass_now_read;           /* pass_now_ns was read in this pass (false outside one) */
	uint64_t pass_now_ns;         /* read once a pass, when first needed; else a lower bound */
	/* How far CLOCK_MONOTONIC_COARSE may lag the clock (a few of its ticks); 0: the ctx has
	 * a clock of its own (opts->now_ns), and no coarse one to look at first */
	uint64_t coarse_slack_ns;
	bool stop;
	uint64_t (*now_ns)(void *arg);
	void *now_arg;
	uint64_t rng;
	uint32_t next_serial;

	/* FIFO of items (ring buffer, grows) */
	struct qsm_item *fifo;
	size_t fifo_cap, fifo_head, fifo_len;
	size_t fifo_hwm;                  /* most items queued at once since the last trim */
	/* An item is dispatched in its slot: the slots just behind fifo_head that the pass's
	 * outermost item (and what it dispatched again) came from are not reused until it
	 * returns, and a ring that grows meanwhile is kept, retired, until then too. */
	size_t fifo_pinned;
	unsigned int fifo_nretired;
	struct qsm_item *fifo_retired[48];    /* the ring doubles: never more than this */

	/* What is left of a batch of completions: cqe[cqe_next..cqe_len), each holding its owner,
	 * with the owner's id_gen.  They go after what the FIFO holds (a WC_ERROR a handler of
	 * the batch queued comes first) and before the fabric is asked again. */
	struct qsm_fabric_cqe cqe[QSM_FABRIC_CQE_BATCH];
	uint32_t cqe_gen[QSM_FABRIC_CQE_BATCH];
	unsigned cqe_next, cqe_len;
	/* Owners a batch closed (an abort, an error completion's step): held, one reference
	 * each, until the batch is done, so that its later completions find them. */
	struct qsm_obj *held[QSM_FABRIC_CQE_BATCH];
	unsigned nheld;

	/* timers: binary min-heap */
	struct qsm_timer **heap;
	uint32_t heap_len, heap_cap;

	struct qsm_list objs[QSM_OBJ_KINDS];   /* every live object, by kind */
	struct qsm_list pools;
	struct qsm_vtable *vtables;       /* one per class in use */
	/* Set by the layers above the loop, which the loop calls only through these:
	 * DEVICE_ADDED that no object owns (the registry's fan-out), and what the layers
	 * free with the ctx (class tables, pools), before the fabric goes. */
	void (*device_added)(struct qsm_ctx *ctx);
	void (*on_free[4])(struct qsm_ctx *ctx);
	struct qsm_counters counters;

	qsm_trace_fn trace;
	void *trace_arg;
	bool trace_stderr;
	bool tracing;                 /* trace || trace_stderr: the hot path reads one flag */
	uint64_t t0_ns;
};

/* core/: the loop (loop.c), the FIFO (fifo.c), clock and timers (timer.c), trace (trace.c) */
uint64_t qsm_monotonic_ns(void *arg);
uint64_t qsm_coarse_slack_ns(void);
void qsm_pass_clock(struct qsm_ctx *ctx);
int qsm_ctx_on_free(struct qsm_ctx *ctx, void (*fn)(struct qsm_ctx *ctx));
int qsm_fifo_push_slow(struct qsm_ctx *ctx, struct qsm_item **slot);
void qsm_fifo_trim(struct qsm_ctx *ctx);
void qsm_fifo_kick(struct qsm_ctx *ctx);
void qsm_fifo_free_retired(struct qsm_ctx *ctx);
void qsm_timers_fire_due(struct qsm_ctx *ctx);
void qsm_timerfd_rearm(struct qsm_ctx *ctx);
int qsm_post(struct qsm_ctx *ctx, struct qsm_obj *target, int event, int status);
int qsm_post_copy(struct qsm_ctx *ctx, struct qsm_obj *target, const struct qsm_item *src);
void qsm_timer_arm_slow(struct qsm_ctx *ctx, struct qsm_timer *t, int event, uint64_t deadline);
void qsm_timer_remove(struct qsm_ctx *ctx, struct qsm_timer *t);
void qsm_trace_emit(struct qsm_ctx *ctx, const char *kind, const char *cls, uint32_t serial,
		    const char *from, int event, const char *to, int status);

/* A batch's owner that closed with no reference: kept until the batch is done. */
static inline void qsm_obj_hold(struct qsm_ctx *ctx, struct qsm_obj *o)
{
	if (o->closed && !o->refs) {
		o->refs++;
		ctx->held[ctx->nheld++] = o;
	}
}

/* A setting the ULP left 0: its default. */
static inline uint32_t qsm_or_default(uint32_t v, uint32_t def)
{
	return v ? v : def;
}

/* The clock is read at most once per dispatch pass, when first needed: everything a pass does
 * (timer arms, expiries, trace stamps) happens "at" that moment, and a pass that needs no time
 * (completions with no timer armed: a data path's busy loop) reads none -- a system call on a
 * machine whose clocksource has no vDSO.  Outside a pass, it is read each time. */
static inline uint64_t qsm_now(struct qsm_ctx *ctx)
{
	if (ctx->pass_now_read)   /* only ever true inside a pass */
		return ctx->pass_now_ns;
	if (!ctx->dispatching)
		return ctx->now_ns(ctx->now_arg);
	ctx->pass_now_ns = ctx->now_ns(ctx->now_arg);
	ctx->pass_now_read = true;
	return ctx->pass_now_ns;
}

/* A slot at the FIFO's tail for the caller to fill (the ring's size is a power of two).
 * Out of line only to grow the ring, or to make the fd readable outside a pass. */
static inline int qsm_fifo_push(struct qsm_ctx *ctx, struct qsm_item **slot)
{
	if (ctx->fifo_len + ctx->fifo_pinned == ctx->fifo_cap || (!ctx->dispatching && !ctx->kicked))
		return qsm_fifo_push_slow(ctx, slot);
	*slot = &ctx->fifo[(ctx->fifo_head + ctx->fifo_len++) & (ctx->fifo_cap - 1)];
	if (ctx->fifo_len > ctx->fifo_hwm)
		ctx->fifo_hwm = ctx->fifo_len;
	return 0;
}

/* The FIFO's head, taken off it but left in its slot (no copy): pinned until the pass's
 * outermost item returns (qsm_fifo_unpin), so that nothing queued meanwhile overwrites it. */
static inline const struct qsm_item *qsm_fifo_pop(struct qsm_ctx *ctx)
{
	const struct qsm_item *it = &ctx->fifo[ctx->fifo_head];

	ctx->fifo_head = (ctx->fifo_head + 1) & (ctx->fifo_cap - 1);
	ctx->fifo_len--;
	ctx->fifo_pinned++;
	return it;
}

/* The pass's outermost item returned: no popped item is read any more. */
static inline void qsm_fifo_unpin(struct qsm_ctx *ctx)
{
	ctx->fifo_pinned = 0;
	if (ctx->fifo_nretired)
		qsm_fifo_free_retired(ctx);
}

/* Fire the timers that are due; a glance at the heap's top when none is.  Inside a
 * dispatch pass only: the clock is the pass's, set whenever the heap holds a timer (at the
 * pass's start, or by the arm that put one there) -- read, or a lower bound that shows the
 * heap's top is not due (qsm_pass_clock). */
static inline void qsm_timers_fire(struct qsm_ctx *ctx)
{
	if (ctx->heap_len && ctx->heap[0]->key_ns <= ctx->pass_now_ns)
		qsm_timers_fire_due(ctx);
}

/* One timer per object: arming replaces whatever was armed.  Inline, O(1), when the timer
 * is in the heap with a key no later than the new deadline (a lazy re-arm: the common case). */
static inline void qsm_timer_arm(struct qsm_ctx *ctx, struct qsm_timer *t, int event, uint64_t delay_ms)
{
	uint64_t deadline = qsm_now(ctx) + delay_ms * 1000000ull;

	if (t->heap_idx == UINT32_MAX || deadline < t->key_ns) {
		qsm_timer_arm_slow(ctx, t, event, deadline);
		return;
	}
	t->event = event;
	t->deadline_ns = deadline;
	t->armed = true;
}

/* O(1): the timer is left in the heap; qsm_timers_fire_due() drops it when its key is due. */
static inline void qsm_timer_cancel(struct qsm_ctx *ctx, struct qsm_timer *t)
{
	(void)ctx;
	t->armed = false;
}

/* One queued event less that points at o: freed through its ops once closed and at 0. */
static inline void qsm_obj_put(struct qsm_ctx *ctx, struct qsm_obj *o)
{
	(void)ctx;
	if (--o->refs || !o->closed)
		return;
	o->ops->free(o);
}

/* A queue has a QP unless its QP machine is in its final state (DESTROYED: none). */
static inline bool qsm_conn_has_qp(const struct qsm_conn *q)
{
	return q->qp_state != qsm_sm_qp.final_state;
}

/* A device takes new users and registrations unless its machine says it is retiring. */
static inline bool qsm_device_usable(const struct qsm_device *d)
{
	return !qsm_sm_device.facts[d->state].retiring;
}

/* An event of an id its target has let go of since it was queued. */
static inline bool qsm_item_stale(const struct qsm_item *it, const struct qsm_obj *o)
{
	return it->id && it->gen != o->id_gen;
}

/* One trace record per transition or unexpected event (qsm_trace_emit's arguments); free
 * when nobody listens: a macro, so that not even its arguments are worked out then. */
#define qsm_trace(ctx, ...) do { \
		struct qsm_ctx *trace_ctx_ = (ctx); \
		if (trace_ctx_->tracing) \
			qsm_trace_emit(trace_ctx_, __VA_ARGS__); \
	} while (0)

/* queue/: making queues (api.c), their step (step.c), downcalls (downcall.c), the
 * reconnect policy (policy.c), the base class (base.c) */
extern const struct qsm_obj_ops qsm_conn_ops;
int qsm_conn_spawn_passive(struct qsm_listener *l, const struct qsm_item *it);
void qsm_conn_teardown(struct qsm_conn *q);
int qsm_conn_set_pdata(struct qsm_conn *q, const void *pdata, size_t len);
void qsm_conn_set_timeouts(struct qsm_conn *q, const struct qsm_timeouts *t);
int qsm_timeouts_check(const struct qsm_timeouts *t);
void qsm_conn_arm_retry(struct qsm_conn *q, int status);
void qsm_conn_reset_backoff(struct qsm_conn *q);
struct qsm_reconnect_policy qsm_policy_resolved(const struct qsm_reconnect_policy *p);
uint64_t qsm_backoff_next(struct qsm_ctx *ctx, const struct qsm_reconnect_policy *p,
			  uint32_t *next_delay_ms);

/* data/: MRs and posts; registry/pool.c: pools */
void qsm_pools_attach_device(struct qsm_device *d);
void qsm_pools_detach_device(struct qsm_device *d);
void qsm_conn_release_mrs(struct qsm_conn *q, bool free_handles);
bool qsm_mr_args_valid(const void *addr, size_t len, int access);

/* registry/srq.c: a queue's QP on its class's SRQ of its device (made when first asked) */
int qsm_srq_for(struct qsm_conn *q, struct qsm_fsrq **fsrq);
void qsm_srqs_release(struct qsm_device *d);
void qsm_srq_limit(struct qsm_device *d, struct qsm_fsrq *fsrq);

/* registry/device.c */
int qsm_device_attach(struct qsm_conn *q, struct qsm_fdev *fdev);
void qsm_device_detach(struct qsm_conn *q);
void qsm_registry_device_added(struct qsm_ctx *ctx);

/* class.c: every slot resolved once per class, the lookup ending in @base */
const struct qsm_vtable *qsm_vtable_get(struct qsm_ctx *ctx, const struct qsm_class *c,
					const struct qsm_class *base);

#endif
