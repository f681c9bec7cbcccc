/* rdma-qsm: the reconnect policy: exponential backoff with jitter (deterministic under the ctx
 * seed), bounded by max_attempts and loss_timeout_ms, after which GIVE_UP. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "queue/queue.h"

/* A policy as the ULP gave it, its defaults (its 0s) applied once: a retry reads it as is. */
struct qsm_reconnect_policy qsm_policy_resolved(const struct qsm_reconnect_policy *p)
{
	struct qsm_reconnect_policy r = *p;

	r.initial_delay_ms = qsm_or_default(p->initial_delay_ms, 100);
	r.max_delay_ms = qsm_or_default(p->max_delay_ms, 10000);
	r.multiplier_pct = qsm_or_default(p->multiplier_pct, 200);
	r.max_exhausted = qsm_or_default(p->max_exhausted, 8);
	return r;
}

/* 64 bits: a delay near UINT32_MAX ms plus its jitter must not wrap to a short one.
 * @p: resolved (qsm_policy_resolved). */
uint64_t qsm_backoff_next(struct qsm_ctx *ctx, const struct qsm_reconnect_policy *p,
			  uint32_t *next_delay_ms)
{
	uint32_t max = p->max_delay_ms, mult = p->multiplier_pct;
	uint64_t d = *next_delay_ms ? *next_delay_ms : p->initial_delay_ms, n;

	if (d > max)
		d = max;
	n = d * mult / 100;
	*next_delay_ms = (uint32_t)(n > max ? max : n);
	if (p->jitter_pct && d) {
		uint64_t span = d * (p->jitter_pct > 100 ? 100 : p->jitter_pct) / 100;

		/* xorshift64: deterministic under the ctx seed */
		ctx->rng ^= ctx->rng << 13;
		ctx->rng ^= ctx->rng >> 7;
		ctx->rng ^= ctx->rng << 17;
		if (span)
			d = d - span + ctx->rng % (2 * span + 1);
	}
	return d;
}

/* A failure for lack of a resource: retrying at once will not help, retrying forever hides it. */
static bool exhaustion(int status)
{
	switch (status) {
	case -ENOMEM:
	case -ENOSPC:
	case -ENOBUFS:
	case -EMFILE:
	case -ENFILE:
		return true;
	default:
		return false;
	}
}

/* @status: why the attempt failed (the edge's event status), given to GIVE_UP. */
void qsm_conn_arm_retry(struct qsm_conn *q, int status)
{
	struct qsm_ctx *ctx = q->ctx;
	uint64_t now = qsm_now(ctx);
	uint32_t max_exhausted = q->policy.max_exhausted;

	q->attempts++;
	if (!q->lost_at_ns)
		q->lost_at_ns = now;
	if (exhaustion(status)) {
		q->exhausted++;
		ctx->counters.exhausted++;
	} else {
		q->exhausted = 0; /* in a row: another kind of failure starts the count over */
	}
	if ((q->policy.max_attempts && q->attempts >= q->policy.max_attempts) ||
	    (q->policy.loss_timeout_ms &&
	     now - q->lost_at_ns >= (uint64_t)q->policy.loss_timeout_ms * 1000000ull) ||
	    (max_exhausted != UINT32_MAX && q->exhausted >= max_exhausted)) {
		qsm_post(ctx, &q->obj, QSM_EV_GIVE_UP, status);
		return;
	}
	qsm_timer_arm(ctx, &q->timer, QSM_EV_RETRY, qsm_backoff_next(ctx, &q->policy, &q->next_delay_ms));
}

void qsm_conn_reset_backoff(struct qsm_conn *q)
{
	q->attempts = 0;
	q->exhausted = 0;
	q->next_delay_ms = 0;
	q->lost_at_ns = 0;
}
