/* rdma-qsm internal, core/: the clock (read at most once a dispatch pass) and the timers, one
 * per object, in a lazy binary heap behind one timerfd (timer.c); arming is inline. */
#ifndef QSM_CORE_TIMER_H
#define QSM_CORE_TIMER_H

#include "core/ctx.h"

uint64_t qsm_monotonic_ns(void *arg);
uint64_t qsm_coarse_slack_ns(void);
void qsm_pass_clock(struct qsm_ctx *ctx);
void qsm_timers_fire_due(struct qsm_ctx *ctx);
void qsm_timerfd_rearm(struct qsm_ctx *ctx);
void qsm_timer_arm_slow(struct qsm_ctx *ctx, struct qsm_timer *t, int event, uint64_t deadline);
void qsm_timer_remove(struct qsm_ctx *ctx, struct qsm_timer *t);
void qsm_timers_shrink(struct qsm_ctx *ctx, uint32_t hwm);
/* A slot in the heap for a new object's timer, so that arming it never allocates: 0, or
 * -ENOMEM for the object's maker; given back when the object is freed. */
int qsm_timer_reserve(struct qsm_ctx *ctx);
void qsm_timer_unreserve(struct qsm_ctx *ctx);

/* The longest a due timer waits for the ctx to take what the fabric already has ready. */
#define QSM_CATCHUP_NS (30ull * 1000000000ull)

#define QSM_HEAP_MIN 64             /* the heap's first and smallest size, in timers */

/* The clock is read at most once per dispatch pass, when first needed: everything a pass does
 * (timer arms, expiries, trace stamps) happens "at" that moment, and a pass that needs no time
 * (completions with no timer armed: a data path's busy loop) reads none -- a system call on a
 * machine whose clocksource has no vDSO.  Outside a pass, it is read each time. */
QSM_ALWAYS_INLINE uint64_t qsm_now(struct qsm_ctx *ctx)
{
	if (ctx->pass_now_read)   /* only ever true inside a pass */
		return ctx->pass_now_ns;
	if (!ctx->dispatching)
		return ctx->now_ns(ctx->now_arg);
	ctx->pass_now_ns = ctx->now_ns(ctx->now_arg);
	ctx->pass_now_read = true;
	return ctx->pass_now_ns;
}

/* Fire the timers that are due (true: something was queued); a glance at the heap's top
 * when none is.  Inside a
 * dispatch pass only: the clock is the pass's, set whenever the heap holds a timer (at the
 * pass's start, or by the arm that put one there) -- read, or a lower bound that shows the
 * heap's top is not due (qsm_pass_clock). */
static inline bool qsm_timers_fire(struct qsm_ctx *ctx)
{
	if (ctx->heap_top_ns > ctx->pass_now_ns)
		return false;
	qsm_timers_fire_due(ctx);
	return ctx->fifo_len != 0;   /* (due timers may wait for the fabric's backlog) */
}

/*
 * After a crowd of timers has gone (20,000 queues destroyed left 256 KiB behind), give memory
 * back as the FIFO does (qsm_fifo_trim), at the end of a dispatch pass: size the heap to
 * twice the most it held in the pass (a power of two, at least QSM_HEAP_MIN) when that is
 * under a quarter of it -- with a power-of-two heap, when it held an eighth at most.
 * Hysteresis both ways: it grows again only past twice what it held and shrinks only to a
 * quarter of what it was, so a load that comes and goes does not realloc each pass.
 */
static inline void qsm_timers_trim(struct qsm_ctx *ctx)
{
	uint32_t hwm = ctx->heap_hwm;

	ctx->heap_hwm = ctx->heap_len; /* timers outlive the pass, unlike the FIFO's items */
	if (ctx->heap_cap >= 4 * QSM_HEAP_MIN && hwm <= ctx->heap_cap / 8)
		qsm_timers_shrink(ctx, hwm);
}

/* One timer per object: arming replaces whatever was armed.  Inline, O(1), when the timer
 * is in the heap with a key no later than the new deadline (a lazy re-arm: the common case). */
QSM_ALWAYS_INLINE void qsm_timer_arm(struct qsm_ctx *ctx, struct qsm_timer *t, int event, uint64_t delay_ms)
{
	uint64_t deadline = qsm_now(ctx) + delay_ms * 1000000ull;

	if (t->heap_idx == UINT32_MAX || deadline < t->key_ns) {
		qsm_timer_arm_slow(ctx, t, event, deadline);
		return;
	}
	t->event = (uint8_t)event;  /* armed */
	t->deadline_ns = deadline;
}

/* O(1): the timer is left in the heap; qsm_timers_fire_due() drops it when its key is due. */
static inline void qsm_timer_cancel(struct qsm_ctx *ctx, struct qsm_timer *t)
{
	(void)ctx;
	t->event = 0;
}

#endif
