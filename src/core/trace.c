/* rdma-qsm: the ctx's trace and counters: one record per transition or unexpected event,
 * to the ULP's trace function and/or stderr (QSM_TRACE=1). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "argcheck.h"
#include "core/timer.h"
#include "core/trace.h"

_Static_assert(QSM_EV_LIMIT <= QSM_COUNTERS_EVENT_ROOM, "qsm_counters.events has no room for every event");

/* The struct of libqsm.so.1's first version: no caller's is smaller.  When counters are
 * appended, this stays offsetof() the first of them. */
#define COUNTERS_SIZE_1_0 sizeof(struct qsm_counters)

int qsm_ctx_counters(struct qsm_ctx *ctx, struct qsm_counters *out, size_t size)
{
	size_t n = size < sizeof(ctx->counters) ? size : sizeof(ctx->counters);

	qsm_check(ctx && out && size >= COUNTERS_SIZE_1_0, -EINVAL);
	memcpy(out, &ctx->counters, n);
	memset((char *)out + n, 0, size - n);   /* a newer caller's counters this library lacks */
	return 0;
}

int qsm_ctx_set_trace(struct qsm_ctx *ctx, qsm_trace_fn fn, void *arg)
{
	qsm_check(ctx, -EINVAL);
	ctx->trace = fn;
	ctx->trace_arg = arg;
	ctx->tracing = fn || ctx->trace_stderr;
	return 0;
}

void qsm_trace_emit(struct qsm_ctx *ctx, const char *kind, const char *cls, uint32_t serial,
		    const char *from, int event, const char *to, int status)
{
	struct qsm_trace_record r;

	r = (struct qsm_trace_record){
		.time_ns = qsm_now(ctx) - ctx->t0_ns, .kind = kind, .class_name = cls, .id = serial,
		.from = from, .event = qsm_event_name(event), .to = to, .status = status,
	};
	if (ctx->trace)
		ctx->trace(&r, ctx->trace_arg);
	if (ctx->trace_stderr)
		fprintf(stderr, "qsm %10.6f %s %s#%u %s --%s%s%.0d--> %s\n", (double)r.time_ns / 1e9,
			kind, cls ? cls : "-", serial, from, r.event ? r.event : "?", status ? " status=" : "",
			status, to ? to : "(unexpected: stays)");
}
