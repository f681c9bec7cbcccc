/* rdma-qsm internal, core/: trace records, one per transition or unexpected event (trace.c),
 * to the ULP's trace function and/or stderr; nothing is worked out when nobody listens. */
#ifndef QSM_CORE_TRACE_H
#define QSM_CORE_TRACE_H

#include "core/ctx.h"

void qsm_trace_emit(struct qsm_ctx *ctx, const char *kind, const char *cls, uint32_t serial,
		    const char *from, int event, const char *to, int status);

/* One trace record per transition or unexpected event (qsm_trace_emit's arguments); free
 * when nobody listens: a macro, so that not even its arguments are worked out then. */
#define qsm_trace(ctx, ...) do { \
		struct qsm_ctx *trace_ctx_ = (ctx); \
		if (trace_ctx_->tracing) \
			qsm_trace_emit(trace_ctx_, __VA_ARGS__); \
	} while (0)

/* What every object's step records, whatever its machine: the event dispatched to it, then
 * the edge it took (a transition, traced) or that there was none (unexpected, traced). */
static inline void qsm_step_counted(struct qsm_ctx *ctx, int event)
{
	ctx->counters.dispatched++;
	ctx->counters.events[event]++;
}

/* The edge (m, from, event) was taken: counted for qsm_ctx_write_dot() and QSM_COVERAGE. */
static inline void qsm_edge_taken(struct qsm_ctx *ctx, enum qsm_machine m, int from, int event)
{
	ctx->edge_taken[((unsigned)m * QSM_EDGE_STATES + (unsigned)from) * QSM_EV_LIMIT + (unsigned)event]++;
}

/* macros, as qsm_trace is: the trace's arguments are worked out only when somebody listens */
#define qsm_step_taken(ctx, kind, name, serial, from, event, to, status) do { \
		struct qsm_ctx *taken_ctx_ = (ctx); \
		qsm_trace(taken_ctx_, kind, name, serial, from, event, to, status); \
		taken_ctx_->counters.transitions++; \
	} while (0)

#define qsm_step_unexpected(ctx, kind, name, serial, from, event, status) do { \
		struct qsm_ctx *unexpected_ctx_ = (ctx); \
		unexpected_ctx_->counters.unexpected++; \
		qsm_trace(unexpected_ctx_, kind, name, serial, from, event, NULL, status); \
	} while (0)

#endif
