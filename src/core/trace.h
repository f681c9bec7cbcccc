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

#endif
