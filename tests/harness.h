/* rdma-qsm tests: the one driver of a virtual clock over a few ctxs on the sim fabric.
 * Dispatch until idle, jump the clock to the next timer, settle again; every loop bounded. */
#ifndef QSM_TESTS_HARNESS_H
#define QSM_TESTS_HARNESS_H

#include <stdint.h>

#include <qsm/ctx.h>

#define HARNESS_MAX_CTX 4
#define HARNESS_MS 1000000ull
#define HARNESS_FOREVER (~0u)      /* no bound on the time or on the number of timer jumps */

/*
 * A suite keeps one of these (usually static).  ctx[] holds the addresses of the suite's own
 * ctx variables, so a suite that swaps or frees a ctx needs no second bookkeeping: a slot whose
 * ctx is NULL is skipped, and the ctxs are dispatched in slot order (an order is part of what a
 * deterministic test pins).  Give the ctxs `.now_ns = harness_clock, .now_arg = &h`.
 */
struct harness {
	struct qsm_ctx **ctx[HARNESS_MAX_CTX];
	uint64_t now_ns;                 /* the virtual clock */
	unsigned bound;                  /* dispatch passes per settle, timer jumps per run; 0: 100000 */
	void (*on_failure)(const char *msg); /* how a bound or a dispatch error fails; NULL: ck_abort_msg */
	/* after every ctx's dispatch, as a ULP's loop runs it (examples/nvmet: the responses it
	 * gathered, posted); returns work it made (counted as events: the settle goes on) */
	int (*after_dispatch)(void);
};

/* qsm_ctx_opts.now_ns, with now_arg the harness. */
uint64_t harness_clock(void *harness);
/* One qsm_ctx_dispatch(ctx, 0) of every ctx, in order; returns how many events that took. */
int harness_dispatch(struct harness *h);
/* Everything that can happen without time passing: dispatches until a pass takes nothing. */
void harness_settle(struct harness *h);
/* The nearest timer of all ctxs in ms (0: due now), or -1 if none is armed. */
int harness_next_timer_ms(struct harness *h);
/*
 * Settles, then jumps the clock to the next timer (at least 1 ms ahead, so a due timer never
 * stalls the loop) and settles again, at most @jumps times and never beyond now + @ms.
 * Returns when no timer is left, @jumps are used up, or the next timer lies beyond @ms.
 */
void harness_run(struct harness *h, unsigned ms, unsigned jumps);
/* harness_run(h, ms, HARNESS_FOREVER): what @ms of virtual time brings. */
void harness_run_for(struct harness *h, unsigned ms);

#endif
