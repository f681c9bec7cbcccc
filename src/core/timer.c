/* rdma-qsm: the ctx's clock and timers: a lazy binary min-heap (re-arm and cancel O(1)),
 * one timerfd on its earliest key, expiries queued as events. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "argcheck.h"
#include "core/fifo.h"
#include "core/timer.h"

uint64_t qsm_monotonic_ns(void *arg)
{
	struct timespec ts;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A few ticks of CLOCK_MONOTONIC_COARSE: it is the clock as of the last tick, read from the
 * vDSO without the clocksource (no system call even where the clock itself needs one, as
 * on hpet), and never more than about a tick behind. */
uint64_t qsm_coarse_slack_ns(void)
{
	struct timespec res;

	if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) != 0)
		return 0;
	return 4 * ((uint64_t)res.tv_sec * 1000000000ull + (uint64_t)res.tv_nsec);
}

/*
 * The clock for a pass whose heap holds a timer: read -- unless the coarse clock shows that
 * the heap's top is further out than the coarse clock can lag, when that lower bound serves
 * (nothing fires by it) and the pass reads no clock.  A ctx whose timers were all cancelled
 * or re-armed far out (a state timeout left behind when its state was: the lazy heap keeps
 * the key) then costs no clock read per pass until the key is near.  A timer armed in the
 * pass reads the clock itself (qsm_now: pass_now_read stays false here).
 */
void qsm_pass_clock(struct qsm_ctx *ctx)
{
	if (ctx->coarse_slack_ns) {
		struct timespec ts;
		uint64_t coarse;

		clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
		coarse = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		if (ctx->heap[0]->key_ns > coarse + ctx->coarse_slack_ns) {
			ctx->pass_now_ns = coarse;
			return;
		}
	}
	(void)qsm_now(ctx);
}

/* ---- timers: a binary min-heap, lazy ----
 *
 * Nearly every timer is re-armed or cancelled long before it fires (a state timeout, then
 * the next state's), so both are O(1) here: a re-arm to a later deadline only records it,
 * a cancel only disarms.  The heap key (key_ns) may thus be earlier than the deadline, or
 * belong to a disarmed timer; fire_timers() sorts that out when the key comes due.
 */

/* After every change to the heap: what qsm_timers_fire() glances at. */
static void top_refresh(struct qsm_ctx *ctx)
{
	ctx->heap_top_ns = ctx->heap_len ? ctx->heap[0]->key_ns : UINT64_MAX;
}

static void heap_swap(struct qsm_ctx *ctx, uint32_t a, uint32_t b)
{
	struct qsm_timer *t = ctx->heap[a];

	ctx->heap[a] = ctx->heap[b];
	ctx->heap[b] = t;
	ctx->heap[a]->heap_idx = a;
	ctx->heap[b]->heap_idx = b;
}

QSM_ALWAYS_INLINE void heap_up_inline(struct qsm_ctx *ctx, uint32_t i)
{
	while (i && ctx->heap[(i - 1) / 2]->key_ns > ctx->heap[i]->key_ns) {
		heap_swap(ctx, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_up(struct qsm_ctx *ctx, uint32_t i)
{
	heap_up_inline(ctx, i);
}

static void heap_down(struct qsm_ctx *ctx, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < ctx->heap_len && ctx->heap[l]->key_ns < ctx->heap[m]->key_ns)
			m = l;
		if (r < ctx->heap_len && ctx->heap[r]->key_ns < ctx->heap[m]->key_ns)
			m = r;
		if (m == i)
			return;
		heap_swap(ctx, i, m);
		i = m;
	}
}

/* Out of the heap for good: the owner is going away. */
void qsm_timer_remove(struct qsm_ctx *ctx, struct qsm_timer *t)
{
	uint32_t i = t->heap_idx;

	t->event = 0;
	if (i == UINT32_MAX)
		return;
	t->heap_idx = UINT32_MAX;
	ctx->heap_len--;
	if (i != ctx->heap_len) {
		ctx->heap[i] = ctx->heap[ctx->heap_len];
		ctx->heap[i]->heap_idx = i;
		heap_up(ctx, i);
		heap_down(ctx, ctx->heap[i]->heap_idx);
	}
	top_refresh(ctx);
}

static int heap_resize(struct qsm_ctx *ctx, uint32_t cap)
{
	struct qsm_timer **n = realloc(ctx->heap, cap * sizeof(*n));

	if (!n)
		return -ENOMEM;
	ctx->heap = n;
	ctx->heap_cap = cap;
	return 0;
}

int qsm_timer_reserve(struct qsm_ctx *ctx)
{
	uint32_t cap = ctx->heap_cap ? ctx->heap_cap : QSM_HEAP_MIN;

	while (cap < ctx->heap_reserve + 1)
		cap *= 2;
	if (cap != ctx->heap_cap && heap_resize(ctx, cap) < 0)
		return -ENOMEM;
	ctx->heap_reserve++;
	return 0;
}

void qsm_timer_unreserve(struct qsm_ctx *ctx)
{
	ctx->heap_reserve--;
}

/* A timer whose key moved earlier: up to its place, and the top's key if it is the top now.
 * Inline: the re-arm to an earlier deadline (common with many queues) takes no frame for it. */
QSM_ALWAYS_INLINE void heap_raise(struct qsm_ctx *ctx, struct qsm_timer *t)
{
	heap_up_inline(ctx, t->heap_idx);
	if (t->heap_idx == 0)
		ctx->heap_top_ns = t->key_ns;
}

/* A timer out of the heap goes in. */
static __attribute__((noinline)) void heap_insert(struct qsm_ctx *ctx, struct qsm_timer *t, int event,
						  uint64_t deadline)
{
	if (ctx->heap_len == ctx->heap_cap &&
	    heap_resize(ctx, ctx->heap_cap ? ctx->heap_cap * 2 : QSM_HEAP_MIN) < 0) {
		/* Past the reserve (a timer of an object that reserved none): cannot wait, so
		 * fire now rather than never. */
		t->event = 0;
		if (qsm_post(ctx, qsm_timer_owner(t), event, -ENOMEM) == 0)
			ctx->counters.action_errors++;
		return;
	}
	t->key_ns = deadline;
	t->heap_idx = ctx->heap_len;
	ctx->heap[ctx->heap_len++] = t;
	if (ctx->heap_len > ctx->heap_hwm)
		ctx->heap_hwm = ctx->heap_len;
	heap_raise(ctx, t);
}

/* qsm_timer_arm() of a timer out of the heap, or to a deadline earlier than its key: no
 * frame of its own on the way to either (a re-arm earlier is common with many queues). */
void qsm_timer_arm_slow(struct qsm_ctx *ctx, struct qsm_timer *t, int event, uint64_t deadline)
{
	t->event = (uint8_t)event;
	t->deadline_ns = deadline;
	if (t->heap_idx == UINT32_MAX) {
		heap_insert(ctx, t, event, deadline);
		return;
	}
	t->key_ns = deadline;   /* its key moves earlier */
	heap_raise(ctx, t);
}

/* qsm_timers_trim(): the heap to twice hwm (a power of two, at least QSM_HEAP_MIN). */
void qsm_timers_shrink(struct qsm_ctx *ctx, uint32_t hwm)
{
	uint32_t want = QSM_HEAP_MIN;

	/* never below the reserve: every live object's timer fits without an allocation */
	while (want < 2 * hwm || want < ctx->heap_reserve)
		want *= 2;
	if (want < ctx->heap_cap)
		heap_resize(ctx, want); /* -ENOMEM: keep the larger one, nothing lost */
}

/*
 * The heap's top made true -- disarmed timers out, re-armed ones moved to their deadline --
 * once a stale key came due (a wake-up paid already), so that the timerfd and
 * qsm_ctx_next_timeout_ms() next wake the ctx for a timer that fires.  Without it, the
 * timeouts a connect storm left behind (each state's, cancelled lazily when the state was
 * left, their keys a few ms apart) woke an idle ctx once each, for nothing
 * (tests/vm/scenarios/monitor.sh counted 5 such wake-ups of a server ctx holding 100 LIVE
 * queues); now the first one clears them all.  Not on every pass: a re-arm before its old key
 * comes due stays O(1) (bench/dispatch at 100k queues paid 1.27 -> 1.67 for that).
 */
static void timers_settle(struct qsm_ctx *ctx)
{
	while (ctx->heap_len) {
		struct qsm_timer *t = ctx->heap[0];

		if (!t->event) {
			qsm_timer_remove(ctx, t);
		} else if (t->key_ns < t->deadline_ns) {
			t->key_ns = t->deadline_ns;
			heap_down(ctx, 0);
			top_refresh(ctx);
		} else {
			return;
		}
	}
}

/*
 * Fire what is due.  A due key may be a disarmed timer (dropped now) or one re-armed to a
 * later deadline (moved to its place now): each re-arm costs at most one sift, paid only if
 * its old key comes due first.  A key that is not due is a lower bound of the next deadline,
 * which is all the poll timeout needs (at worst one early wake-up).
 */
void qsm_timers_fire_due(struct qsm_ctx *ctx)
{
	uint64_t now = qsm_now(ctx);

	while (ctx->heap_len && ctx->heap[0]->key_ns <= now) {
		struct qsm_timer *t = ctx->heap[0];

		if (t->event && t->key_ns < t->deadline_ns) {
			t->key_ns = t->deadline_ns;
			heap_down(ctx, 0);
			top_refresh(ctx);
			continue;
		}
		int event = t->event;

		/* Not while the fabric holds events not taken yet (a CM channel's backlog in a
		 * storm): the answer this timeout waits for may be there, in time, and firing first
		 * would end what the kernel completed (issue 15).  They are taken first; a backlog
		 * that never ends defers a timer at most QSM_CATCHUP_NS. */
		if (event && ctx->ops->backlog && now - t->deadline_ns < QSM_CATCHUP_NS &&
		    ctx->ops->backlog(ctx->fabric))
			return;
		qsm_timer_remove(ctx, t);
		if (event)
			qsm_post(ctx, qsm_timer_owner(t), event, 0);
	}
	timers_settle(ctx);
}

/*
 * Keep the timerfd on the earliest key, touching it only when that changes, so that a
 * dispatch pass costs no system call in the common case.  The key is a lower bound of the
 * next deadline (lazy heap): at worst one early wake-up, in which nothing fires.
 */
void qsm_timerfd_rearm(struct qsm_ctx *ctx)
{
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	uint64_t want = ctx->heap_len ? ctx->heap[0]->key_ns : 0, buf;

	if (ctx->now_ns != qsm_monotonic_ns) {
		/* A virtual clock does not drive the timerfd: while timers exist, look every 1 ms. */
		want = want ? 1 : 0;
		if (want == ctx->timerfd_at)
			return;
		its.it_value.tv_nsec = want ? 1000000 : 0;
		its.it_interval.tv_nsec = its.it_value.tv_nsec;
		timerfd_settime(ctx->timerfd, 0, &its, NULL);
		ctx->timerfd_at = want;
		return;
	}
	/* want is not 0: the pass's clock was set (qsm_pass_clock), read or a lower bound that
	 * is within the slack of want, and so of timerfd_at, whenever that can have fired */
	if (ctx->timerfd_at && ctx->timerfd_at <= ctx->pass_now_ns) {
		/* it fired: a one-shot timerfd is disarmed once read */
		if (read(ctx->timerfd, &buf, sizeof(buf)) == sizeof(buf))
			ctx->timerfd_at = 0;
	}
	if (want == ctx->timerfd_at)
		return;
	its.it_value.tv_sec = (time_t)(want / 1000000000ull);
	its.it_value.tv_nsec = (long)(want % 1000000000ull);
	if (timerfd_settime(ctx->timerfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		ctx->timerfd_at = want;
}

int qsm_ctx_next_timeout_ms(struct qsm_ctx *ctx)
{
	uint64_t now, d;

	qsm_check(ctx, -EINVAL);
	if (ctx->fifo_len)
		return 0;
	if (!ctx->heap_len)
		return -1;
	now = qsm_now(ctx);
	d = ctx->heap[0]->key_ns;
	if (d <= now)
		return 0;
	d = (d - now + 999999) / 1000000;
	/* A negative poll timeout waits forever: further out than INT_MAX ms, the caller wakes
	 * early, dispatches nothing and asks again. */
	return d > INT_MAX ? INT_MAX : (int)d;
}
