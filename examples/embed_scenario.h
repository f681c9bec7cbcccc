/* rdma-qsm examples: the one scenario every embed_* example runs in its host's own loop (epoll,
 * libuv, sd-event, libev), so that they differ only in how the loop watches a ctx. */
#ifndef EMBED_SCENARIO_H
#define EMBED_SCENARIO_H

#include <stdbool.h>

#include <qsm/qsm.h>
#include <qsm/sim.h>

/*
 * Two ctxs on one simulated fabric: a target's with a listener, a client's with 64 queues
 * connecting to it.  The host has work of its own (a 10 ms tick standing for its I/O), watches
 * qsm_ctx_fd() of each ctx, bounds each dispatch (a storage target must not let a storm of
 * connection events starve its I/O) and sleeps no longer than qsm_ctx_next_timeout_ms() allows.
 * It passes when every queue is LIVE within 500 ticks and no batch went over the budget.
 */
#define EMBED_BUDGET 16
#define EMBED_QUEUES 64
#define EMBED_TICK_MS 10
#define EMBED_MAX_TICKS 500
#define EMBED_CTXS 2

/* What made the host dispatch a ctx. */
enum embed_wake {
	EMBED_WAKE_FD,      /* its fd was readable */
	EMBED_WAKE_TIMER,   /* the host's timer (or wait) for qsm_ctx_next_timeout_ms() ran out */
	EMBED_WAKE_POLL,    /* a poller's round: no fd, no timer */
	EMBED_WAKES
};

struct embed {
	const char *name;
	struct qsm_sim *sim;
	struct qsm_ctx *ctx[EMBED_CTXS];
	unsigned live, ticks, max_batch;
	unsigned calls[EMBED_WAKES];      /* dispatches, by what woke them */
};

/* The sim, both ctxs, the listener and the 64 connects under way.  0, or -1 with a message. */
int embed_start(struct embed *e, const char *name);
/* A bounded dispatch of ctx, woken by `wake`; the largest batch is kept.  Returns
 * qsm_ctx_next_timeout_ms() after it: the host re-arms its timer for ctx with that (-1: none). */
int embed_dispatch(struct embed *e, struct qsm_ctx *ctx, enum embed_wake wake);
/* The host's own work: n ticks of it. */
void embed_tick(struct embed *e, unsigned n);
/* Every queue is LIVE, or the host gave up waiting: the loop may end. */
bool embed_done(const struct embed *e);
/* Prints the outcome, frees everything; the exit status: 0 when the scenario passed. */
int embed_finish(struct embed *e);

#endif
