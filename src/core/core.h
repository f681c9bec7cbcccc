/* rdma-qsm internal: what core/ offers the layers above it -- the ctx and its objects, the
 * FIFO, the clock and timers, trace -- and what the loop (loop.c) lets them hook into. */
#ifndef QSM_CORE_H
#define QSM_CORE_H

#include "core/ctx.h"
#include "core/fifo.h"
#include "core/inbox.h"
#include "core/timer.h"
#include "core/trace.h"

/* fn(ctx) runs when the ctx is freed, before its fabric goes (a layer's own teardown:
 * class tables, pools); at most a few, in the order registered. */
int qsm_ctx_on_free(struct qsm_ctx *ctx, void (*fn)(struct qsm_ctx *ctx));

/* QSM_COVERAGE: the edges the ctx took, appended to that file (picture.c), as its free ends. */
void qsm_coverage_append(struct qsm_ctx *ctx);

/* The completions of o's id `id` a batch left behind the FIFO (with o's id_gen of now), taken
 * out of it in their order and handed to fn(o, c), each counted as popped; the rest stay, in
 * theirs.  For an object about to let go of the QP they are of. */
void qsm_ctx_take_left(struct qsm_ctx *ctx, struct qsm_obj *o, const struct qsm_fid *id,
		       void (*fn)(struct qsm_obj *o, const struct qsm_fabric_cqe *c));

#endif
