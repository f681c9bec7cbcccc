/* rdma-qsm internal: what core/ offers the layers above it -- the ctx and its objects, the
 * FIFO, the clock and timers, trace -- and what the loop (loop.c) lets them hook into. */
#ifndef QSM_CORE_H
#define QSM_CORE_H

#include "core/ctx.h"
#include "core/fifo.h"
#include "core/timer.h"
#include "core/trace.h"

/* fn(ctx) runs when the ctx is freed, before its fabric goes (a layer's own teardown:
 * class tables, pools); at most a few, in the order registered. */
int qsm_ctx_on_free(struct qsm_ctx *ctx, void (*fn)(struct qsm_ctx *ctx));

#endif
