/* rdma-qsm internal, core/: the objects every layer shares -- the ctx, the objects it dispatches
 * to (seen only through their ops), the items its FIFO holds and the timers of its heap. */
#ifndef QSM_CORE_CTX_H
#define QSM_CORE_CTX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <qsm/ctx.h>

#include "fabric/fabric.h"
#include "list.h"
#include "sm.h"

/* A fast path the compiler must inline whatever its size heuristics say: a step's edges are
 * compiled from constants, and only inlining folds them. */
#define QSM_ALWAYS_INLINE static inline __attribute__((always_inline))

/* What an id's owner pointer points at: the first member of each owner.  The loop knows
 * objects only through their ops; the kinds only order the ctx's lists (and its teardown). */
enum qsm_obj_kind { QSM_OBJ_LISTENER, QSM_OBJ_CONN, QSM_OBJ_DEVICE, QSM_OBJ_KINDS };
struct qsm_obj;
struct qsm_item;
struct qsm_conn_cfg;
struct qsm_inbox_item;
struct qsm_obj_ops {
	void (*dispatch)(struct qsm_obj *o, const struct qsm_item *it);
	/* Completions c[0..n), each to its owner, in order, while the FIFO stays empty: how many
	 * were taken.  gen[i]: the owner's id_gen when c[i] was set aside (NULL: a batch just
	 * taken).  An owner that closes on the way and has no reference goes to ctx->held.  Only
	 * a queue has a QP, so only queues own the ids completions come on: one kind's op. */
	unsigned (*complete)(struct qsm_ctx *ctx, const struct qsm_fabric_cqe *c, unsigned n,
			     const uint32_t *gen);
	/* A completion the fabric delivered straight to the owner's handler, refused by it (r,
	 * non-zero): what complete() does then, the owner held if it closed (fabric.h,
	 * "Completions delivered straight").  Only a queue's op. */
	void (*refused)(struct qsm_obj *o, int r);
	/* ctx teardown: no callbacks, no events; release everything now */
	void (*teardown)(struct qsm_obj *o);
	void (*free)(struct qsm_obj *o);
	/* The machine and state that decide what it hears (-1: nothing, it is going away),
	 * or NULL: not a machine's object. */
	int (*state)(const struct qsm_obj *o, enum qsm_machine *m);
	/* Its QP's state (the QP machine), -1: none; NULL: an object with no QP. */
	int (*qp_state)(const struct qsm_obj *o);
	bool teardown_last;         /* torn down after the queued events are dropped */
};
struct qsm_obj {
	const struct qsm_obj_ops *ops;
	uint32_t serial;
	uint32_t refs;              /* queued events that point here; freed at 0 once closed */
	uint32_t id_gen;            /* bumped whenever it lets go of an id: queued events of
	                               an older id are stale (ids' addresses get reused) */
	uint8_t kind;               /* enum qsm_obj_kind */
	bool closed;                /* reached the final state: no more events, no callbacks */
	struct qsm_list node;       /* ctx->objs[kind] */
};

/*
 * An object's timer (one per object that has one: queues and listeners).  It holds no pointer
 * to its owner: an owner keeps it right after its struct qsm_obj (QSM_TIMER_AFTER_OBJ where
 * each is declared), and qsm_timer_owner() steps back to it.  24 bytes: one per queue.
 */
struct qsm_timer {
	uint64_t deadline_ns;       /* when it fires, if armed */
	uint64_t key_ns;            /* its place in the heap: <= deadline_ns (lazy re-arm) */
	uint32_t heap_idx;          /* UINT32_MAX: not in the heap */
	uint8_t event;              /* what it fires, QSM_EV_RETRY or QSM_EV_TIMEOUT (< QSM_EV_LIMIT);
	                               0 (never an event): disarmed */
};

_Static_assert(QSM_EV_LIMIT <= 256, "a timer keeps its event in a byte");

/* Where an owner's timer must be: right after its struct qsm_obj, itself the owner's first
 * member.  For a struct declared `{ struct qsm_obj obj; struct qsm_timer timer; ... }`. */
#define QSM_TIMER_AFTER_OBJ(type)                                                        \
	_Static_assert(offsetof(type, obj) == 0 &&                                       \
		       offsetof(type, timer) == sizeof(struct qsm_obj),                  \
		       #type ": its timer right after its qsm_obj")

static inline struct qsm_obj *qsm_timer_owner(struct qsm_timer *t)
{
	return (struct qsm_obj *)(void *)((char *)t - sizeof(struct qsm_obj));
}

/* One event on its way to an object; private data copied in. */
struct qsm_item {
	struct qsm_obj *target;
	union {
		struct qsm_fid *id;     /* fabric events: the id it came on; else NULL */
		struct qsm_fsrq *srq;   /* SRQ_LIMIT (from the fabric only, to a device): the SRQ */
	};
	int event;                  /* event and status together (8-aligned): one copy from the */
	int status;                 /* fabric's event, which has them side by side too */
	uint32_t gen;               /* the target's id_gen when it was queued */
	uint32_t pdata_len;
	uint8_t *pdata;             /* [pdata_len], the item's own copy, only when there is some
	                               (most events carry none): freed with the item */
};

#define QSM_EDGE_STATES 16           /* room for each machine's states (picture.c checks) */
#define QSM_EDGE_SLOTS (QSM_MACHINE_COUNT * QSM_EDGE_STATES * QSM_EV_LIMIT)

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
	/* Slots kept for the events the live objects may have queued at once and for the items a
	 * pass pins (qsm_fifo_reserve): the ring never holds fewer, so that no event but a
	 * downcall's ever needs it to grow.  A downcall's item takes a slot only beyond them. */
	size_t fifo_reserve;
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
	uint64_t straight;          /* delivered straight by the get_event() call just made */

	/* timers: binary min-heap; it grows as timers come and shrinks back (qsm_timers_trim) */
	struct qsm_timer **heap;
	uint32_t heap_len, heap_cap;
	uint64_t heap_top_ns;             /* heap[0]->key_ns, UINT64_MAX when empty: a pass's
	                                     glance at whether a timer may be due */
	uint32_t heap_hwm;                /* most timers it held at once since the last trim */
	uint32_t heap_reserve;            /* objects with a timer: the heap never holds fewer slots,
	                                     so arming one never allocates (qsm_timer_reserve) */

	struct qsm_list objs[QSM_OBJ_KINDS];   /* every live object, by kind */
	struct qsm_list pools;
	struct qsm_vtable *vtables;       /* one per class in use */
	/* queue/'s settings shared by the queues made with equal ones (struct qsm_conn_cfg):
	 * a hash set of cfgs_cap chains (a power of two; NULL while there is none) */
	struct qsm_conn_cfg **cfgs;
	uint32_t ncfgs, cfgs_cap;
	/* Set by the layers above the loop, which the loop calls only through these: a
	 * device's event that no object owns -- DEVICE_ADDED and PORT_ACTIVE to whoever waits
	 * (the registry's fan-out), the others to the device's registry entry (-ENOENT: it has
	 * none) -- and what the layers free with the ctx (class tables, pools), before the
	 * fabric goes. */
	void (*device_added)(struct qsm_ctx *ctx, int event);
	int (*device_event)(struct qsm_ctx *ctx, struct qsm_fdev *d, int event, int status);
	void (*on_free[4])(struct qsm_ctx *ctx);
	struct qsm_counters counters;
	/* The inbox (core/inbox.h): what other threads hand this ctx, behind its own lock. */
	pthread_mutex_t inbox_lock;
	struct qsm_inbox_item *inbox_head, **inbox_tail;
	unsigned inbox_n;             /* items waiting: read without the lock at a pass's start */
	int inboxfd;
	/* The private data of the fabric event being dispatched straight from the fabric (not
	 * through the FIFO): copied here, never allocated; busy while that event is dispatched. */
	bool now_pdata_busy;
	uint8_t now_pdata[QSM_FABRIC_PDATA_MAX];

	qsm_trace_fn trace;
	void *trace_arg;
	bool trace_stderr;
	bool tracing;                 /* trace || trace_stderr: the hot path reads one flag */
	uint64_t t0_ns;
	/* QSM_COVERAGE: the file edge_taken is appended to when the ctx is freed (NULL: none). */
	char *coverage_file;
	/* Times each edge was taken, for the live picture and edge coverage (picture.c):
	 * [machine][from state][event] (qsm_edge_taken).  In the ctx itself (31 KiB), last: an
	 * edge counts with one add at a constant offset from the ctx it already has. */
	uint32_t edge_taken[QSM_EDGE_SLOTS];
};

/* A setting the ULP left 0: its default. */
static inline uint32_t qsm_or_default(uint32_t v, uint32_t def)
{
	return v ? v : def;
}

/* A batch's owner that closed with no reference: kept until the batch is done. */
static inline void qsm_obj_hold(struct qsm_ctx *ctx, struct qsm_obj *o)
{
	if (o->closed && !o->refs) {
		o->refs++;
		ctx->held[ctx->nheld++] = o;
	}
}

/* One queued event less that points at o: freed through its ops once closed and at 0. */
static inline void qsm_obj_put(struct qsm_ctx *ctx, struct qsm_obj *o)
{
	(void)ctx;
	if (--o->refs || !o->closed)
		return;
	o->ops->free(o);
}

/* An event of an id its target has let go of since it was queued. */
static inline bool qsm_item_stale(const struct qsm_item *it, const struct qsm_obj *o)
{
	return it->id && it->gen != o->id_gen;
}

#endif
