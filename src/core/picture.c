/* rdma-qsm: what a ctx's machines did, drawn and counted.  qsm_ctx_write_dot(3): every machine as
 * Graphviz dot, with the ctx's objects in each state now and the times each edge was taken (never:
 * dashed).  QSM_COVERAGE=FILE: the edges a ctx took, appended to FILE as it is freed, one line
 * each, "machine from event to count" (tools/qsm-cover merges runs). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <qsm/machine.h>

#include "argcheck.h"
#include "core/core.h"

_Static_assert(QSM_CM_STATE_COUNT <= QSM_EDGE_STATES && QSM_ACCEPT_STATE_COUNT <= QSM_EDGE_STATES &&
	       QSM_LISTENER_STATE_COUNT <= QSM_EDGE_STATES && QSM_QP_STATE_COUNT <= QSM_EDGE_STATES &&
	       QSM_DEVICE_STATE_COUNT <= QSM_EDGE_STATES, "QSM_EDGE_STATES holds every machine's states");

static uint32_t taken(const struct qsm_ctx *ctx, int m, int from, int event)
{
	return ctx->edge_taken[((unsigned)m * QSM_EDGE_STATES + (unsigned)from) * QSM_EV_LIMIT + (unsigned)event];
}

/* The ctx's objects in each state of each machine now (a queue counts in its QP's state too). */
static void count_objects(struct qsm_ctx *ctx, unsigned now[QSM_MACHINE_COUNT][QSM_EDGE_STATES])
{
	for (int k = 0; k < QSM_OBJ_KINDS; k++) {
		struct qsm_list *pos, *tmp;

		qsm_list_each(pos, tmp, &ctx->objs[k]) {
			const struct qsm_obj *o = qsm_container_of(pos, struct qsm_obj, node);
			enum qsm_machine m;
			int s;

			if (o->ops->state && (s = o->ops->state(o, &m)) >= 0 && s < QSM_EDGE_STATES &&
			    (unsigned)m < QSM_MACHINE_COUNT)
				now[m][s]++;
			if (o->ops->qp_state && (s = o->ops->qp_state(o)) >= 0 && s < QSM_EDGE_STATES)
				now[QSM_MACHINE_QP][s]++;
		}
	}
}

/* Each edge of the machines, with the times the ctx took it: fn(m, from, event, to, count). */
static void each_edge(const struct qsm_ctx *ctx, void (*fn)(FILE *out, int m, int from, int event, int to,
							    uint32_t count), FILE *out)
{
	for (int m = 0; m < QSM_MACHINE_COUNT; m++)
		for (int s = 0; s < qsm_machine_state_count((enum qsm_machine)m); s++)
			for (int ev = 0; ev < QSM_EV_LIMIT; ev++) {
				int to = qsm_machine_next((enum qsm_machine)m, s, ev, NULL);

				if (to >= 0)
					fn(out, m, s, ev, to, taken(ctx, m, s, ev));
			}
}

static void dot_edge(FILE *out, int m, int from, int event, int to, uint32_t count)
{
	const char *mn = qsm_machine_name((enum qsm_machine)m);

	fprintf(out, "\t\t\"%s.%s\" -> \"%s.%s\" [label=\"%s %u\"%s];\n", mn,
		qsm_state_name((enum qsm_machine)m, from), mn, qsm_state_name((enum qsm_machine)m, to),
		qsm_event_name(event), count, count ? ", penwidth=2" : ", style=dashed, color=gray50");
}

int qsm_ctx_write_dot(struct qsm_ctx *ctx, FILE *out)
{
	unsigned now[QSM_MACHINE_COUNT][QSM_EDGE_STATES] = { { 0 } };

	qsm_check(ctx && out, -EINVAL);
	count_objects(ctx, now);
	fprintf(out, "digraph qsm_ctx {\n\trankdir=LR;\n\tnode [shape=box, style=rounded, fontname=Helvetica];\n"
		"\tedge [fontname=Helvetica, fontsize=9];\n");
	for (int m = 0; m < QSM_MACHINE_COUNT; m++) {
		const char *mn = qsm_machine_name((enum qsm_machine)m);

		fprintf(out, "\tsubgraph cluster_%s {\n\t\tlabel=\"%s\";\n", mn, mn);
		for (int s = 0; s < qsm_machine_state_count((enum qsm_machine)m); s++)
			fprintf(out, "\t\t\"%s.%s\" [label=\"%s\\n%u now\"%s];\n", mn,
				qsm_state_name((enum qsm_machine)m, s), qsm_state_name((enum qsm_machine)m, s),
				now[m][s], now[m][s] ? ", penwidth=2" : "");
		fprintf(out, "\t}\n");
	}
	each_edge(ctx, dot_edge, out);
	fprintf(out, "}\n");
	return fflush(out) == 0 && !ferror(out) ? 0 : -EIO;
}

static void coverage_line(FILE *out, int m, int from, int event, int to, uint32_t count)
{
	if (count)
		fprintf(out, "%s %s %s %s %u\n", qsm_machine_name((enum qsm_machine)m),
			qsm_state_name((enum qsm_machine)m, from), qsm_event_name(event),
			qsm_state_name((enum qsm_machine)m, to), count);
}

/*
 * One write(2) with O_APPEND per ctx, so that the ctxs of several processes (make check's
 * suites, in parallel) may share the file: each one's lines stay together.  Nothing to say on
 * failure: the ctx is going, and the file is a test's, not the ULP's.
 */
void qsm_coverage_append(struct qsm_ctx *ctx)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *mem;
	int fd;

	if (!ctx->coverage_file || !(mem = open_memstream(&buf, &len)))
		return;
	each_edge(ctx, coverage_line, mem);
	if (fclose(mem) == 0 && len &&
	    (fd = open(ctx->coverage_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) >= 0) {
		if (write(fd, buf, len) != (ssize_t)len) {
			/* a short write to a test's file: its merge will say what is missing */
		}
		close(fd);
	}
	free(buf);
}
