/* rdma-qsm tests: the one virtual-clock driver (harness.h); every suite that runs ctxs on the
 * sim fabric settles and advances time through it. */
#include <check.h>
#include <stdio.h>

#include "harness.h"

#define DEFAULT_BOUND 100000u

static void harness_fail(struct harness *h, const char *msg)
{
	if (h->on_failure)
		h->on_failure(msg);
	ck_abort_msg("harness: %s", msg);
}

static unsigned bound_of(const struct harness *h)
{
	return h->bound ? h->bound : DEFAULT_BOUND;
}

uint64_t harness_clock(void *harness)
{
	return ((const struct harness *)harness)->now_ns;
}

int harness_dispatch(struct harness *h)
{
	int total = 0;

	for (int i = 0; i < HARNESS_MAX_CTX; i++) {
		struct qsm_ctx *c = h->ctx[i] ? *h->ctx[i] : NULL;
		int n;

		if (!c)
			continue;
		n = qsm_ctx_dispatch(c, 0);
		if (n < 0) {
			char msg[64];

			snprintf(msg, sizeof(msg), "qsm_ctx_dispatch of ctx %d returned %d", i, n);
			harness_fail(h, msg);
			return total;
		}
		total += n;
		if (h->after_dispatch)
			total += h->after_dispatch();
	}
	return total;
}

void harness_settle(struct harness *h)
{
	for (unsigned pass = 0; pass < bound_of(h); pass++)
		if (!harness_dispatch(h))
			return;
	harness_fail(h, "no quiescence");
}

int harness_next_timer_ms(struct harness *h)
{
	int best = -1;

	for (int i = 0; i < HARNESS_MAX_CTX; i++) {
		struct qsm_ctx *c = h->ctx[i] ? *h->ctx[i] : NULL;
		int t;

		if (!c)
			continue;
		t = qsm_ctx_next_timeout_ms(c);
		if (t >= 0 && (best < 0 || t < best))
			best = t;
	}
	return best;
}

void harness_run(struct harness *h, unsigned ms, unsigned jumps)
{
	uint64_t end = ms == HARNESS_FOREVER ? UINT64_MAX : h->now_ns + ms * HARNESS_MS;

	for (unsigned guard = 0; guard < bound_of(h); guard++) {
		uint64_t step;
		int t;

		harness_settle(h);
		if (jumps != HARNESS_FOREVER && !jumps--)
			return;
		t = harness_next_timer_ms(h);
		if (t < 0)
			return;
		step = (uint64_t)(t ? t : 1) * HARNESS_MS;
		if (h->now_ns + step > end)
			return;
		h->now_ns += step;
	}
	harness_fail(h, "endless timers");
}

void harness_run_for(struct harness *h, unsigned ms)
{
	harness_run(h, ms, HARNESS_FOREVER);
}
