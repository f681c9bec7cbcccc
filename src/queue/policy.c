/* rdma-qsm: the reconnect policy: exponential backoff with jitter (deterministic under the ctx
 * seed), bounded by max_attempts and loss_timeout_ms, after which GIVE_UP. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the settings a queue was made with, shared ---- */

_Static_assert(offsetof(struct qsm_conn_cfg, refs) ==
	       sizeof(((struct qsm_conn_cfg *)0)->step_ms) + sizeof(struct qsm_reconnect_policy),
	       "a cfg's key (step_ms, policy) has no padding: compared and hashed as bytes");
#define CFG_KEY offsetof(struct qsm_conn_cfg, refs)

static uint32_t cfg_hash(const struct qsm_conn_cfg *c)
{
	const unsigned char *b = (const unsigned char *)c;
	uint32_t h = 2166136261u;   /* FNV-1a */

	for (size_t i = 0; i < CFG_KEY; i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

/* The chains at a new capacity (a power of two); -ENOMEM leaves them as they were. */
static int cfgs_resize(struct qsm_ctx *ctx, uint32_t cap)
{
	struct qsm_conn_cfg **n = calloc(cap, sizeof(*n));

	if (!n)
		return -ENOMEM;
	for (uint32_t i = 0; i < ctx->cfgs_cap; i++)
		while (ctx->cfgs[i]) {
			struct qsm_conn_cfg *c = ctx->cfgs[i];

			ctx->cfgs[i] = c->next;
			c->next = n[c->hash & (cap - 1)];
			n[c->hash & (cap - 1)] = c;
		}
	free(ctx->cfgs);
	ctx->cfgs = n;
	ctx->cfgs_cap = cap;
	return 0;
}

struct qsm_conn_cfg *qsm_conn_cfg_get(struct qsm_ctx *ctx, const struct qsm_timeouts *t,
				      const struct qsm_reconnect_policy *p)
{
	struct qsm_conn_cfg key = { .step_ms = {
		[QSM_STEP_NONE] = 0,
		[QSM_STEP_RESOLVE] = qsm_or_default(t->resolve_ms, 2000) + 1000, /* <= INT_MAX */
		[QSM_STEP_CONNECT] = qsm_or_default(t->connect_ms, 5000),
		[QSM_STEP_REQUEST] = qsm_or_default(t->request_ms, 5000),
		[QSM_STEP_HANDSHAKE] = t->handshake_ms,
		[QSM_STEP_DISCONNECT] = qsm_or_default(t->disconnect_ms, 2000),
		[QSM_STEP_DRAIN] = qsm_or_default(t->drain_ms, 2000),
		[QSM_STEP_KEEPALIVE] = t->keepalive_ms,
	} };
	struct qsm_conn_cfg *c;

	if (p)
		key.policy = qsm_policy_resolved(p);
	key.hash = cfg_hash(&key);
	for (c = ctx->cfgs_cap ? ctx->cfgs[key.hash & (ctx->cfgs_cap - 1)] : NULL; c; c = c->next)
		if (c->hash == key.hash && !memcmp(c, &key, CFG_KEY)) {
			c->refs++;
			return c;
		}
	/* at most one block per chain on average: a ULP may give each queue its own */
	if (ctx->ncfgs >= ctx->cfgs_cap && cfgs_resize(ctx, ctx->cfgs_cap ? 2 * ctx->cfgs_cap : 8) < 0)
		return NULL;
	c = malloc(sizeof(*c));
	if (!c) {
		if (!ctx->ncfgs) {
			/* the set was made for this one: nothing else would ever free it */
			free(ctx->cfgs);
			ctx->cfgs = NULL;
			ctx->cfgs_cap = 0;
		}
		return NULL;
	}
	*c = key;
	c->refs = 1;
	c->next = ctx->cfgs[c->hash & (ctx->cfgs_cap - 1)];
	ctx->cfgs[c->hash & (ctx->cfgs_cap - 1)] = c;
	ctx->ncfgs++;
	return c;
}

void qsm_conn_cfg_put(struct qsm_ctx *ctx, struct qsm_conn_cfg *c)
{
	struct qsm_conn_cfg **pp = &ctx->cfgs[c->hash & (ctx->cfgs_cap - 1)];

	if (--c->refs)
		return;
	while (*pp != c)
		pp = &(*pp)->next;
	*pp = c->next;
	free(c);
	if (!--ctx->ncfgs) {
		/* the last queue went: so does the set (a ctx's teardown leaves nothing behind) */
		free(ctx->cfgs);
		ctx->cfgs = NULL;
		ctx->cfgs_cap = 0;
	}
}

/* 64 bits: a delay near UINT32_MAX ms plus its jitter must not wrap to a short one.
 * @p: resolved (qsm_policy_resolved).  Inline in a queue's arm_retry, on every failed attempt. */
QSM_ALWAYS_INLINE uint64_t backoff_next(struct qsm_ctx *ctx, const struct qsm_reconnect_policy *p,
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

uint64_t qsm_backoff_next(struct qsm_ctx *ctx, const struct qsm_reconnect_policy *p,
			  uint32_t *next_delay_ms)
{
	return backoff_next(ctx, p, next_delay_ms);
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
	const struct qsm_reconnect_policy *p = &q->cfg->policy;
	uint32_t max_exhausted = p->max_exhausted;

	q->attempts++;
	if (!q->lost_at_ns)
		q->lost_at_ns = now;
	if (exhaustion(status)) {
		q->exhausted++;
		ctx->counters.exhausted++;
	} else {
		q->exhausted = 0; /* in a row: another kind of failure starts the count over */
	}
	if ((p->max_attempts && q->attempts >= p->max_attempts) ||
	    (p->loss_timeout_ms &&
	     now - q->lost_at_ns >= (uint64_t)p->loss_timeout_ms * 1000000ull) ||
	    (max_exhausted != UINT32_MAX && q->exhausted >= max_exhausted)) {
		qsm_post(ctx, &q->obj, QSM_EV_GIVE_UP, status);
		return;
	}
	qsm_timer_arm(ctx, &q->timer, QSM_EV_RETRY, backoff_next(ctx, p, &q->next_delay_ms));
}

/*
 * A stale-connection reject: the peer's CM still holds an earlier connection of our QP
 * number, and the next attempt (a new QP) is usually accepted.  So retry after
 * QSM_STALE_RETRY_MS, QSM_STALE_RETRIES times in a row, not counted as attempts (as SPDK's
 * host does); after that the policy's backoff, as any failed attempt.
 */
void qsm_conn_arm_fast_retry(struct qsm_conn *q, int status)
{
	if (q->stale_rejects >= QSM_STALE_RETRIES) {
		qsm_conn_arm_retry(q, status);
		return;
	}
	q->stale_rejects++;
	q->ctx->counters.stale_retries++;
	qsm_timer_arm(q->ctx, &q->timer, QSM_EV_RETRY, QSM_STALE_RETRY_MS);
}
