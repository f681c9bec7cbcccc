/* rdma-qsm benchmark: one completion through qsm_ctx_dispatch -> the class's completion
 * handler, against a raw `n = poll16(cq, wc); for each: fn(wc)` loop on the same fake CQ. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "instr.h"

/*
 * The fake CQ: a ring of prepared completions (receives of varied lengths), handed out until
 * `end`, at most 16 per poll through a function pointer, as ibv_poll_cq calls its provider.
 * qsm's fabric polls it exactly so (16 at a time, as the rdmacm fabric does) and hands the
 * batch to the ctx, which calls the handler for each; the raw loop calls the handler itself.
 */
#define CQ_RING 1024
#define POLL_BATCH 16

struct fake_cq {
	struct qsm_wc ring[CQ_RING];
	uint64_t next, end;
};

static int poll_fake_cq(struct fake_cq *cq, int max, struct qsm_wc *wc)
{
	uint64_t left = cq->end - cq->next;
	int n = left < (uint64_t)max ? (int)left : max;

	for (int i = 0; i < n; i++)
		wc[i] = cq->ring[(cq->next + (uint64_t)i) & (CQ_RING - 1)];
	cq->next += (uint64_t)n;
	return n;
}

static int (*volatile poll_cq)(struct fake_cq *cq, int max, struct qsm_wc *wc) = poll_fake_cq;

static void fake_cq_init(struct fake_cq *cq, uint64_t end)
{
	for (unsigned i = 0; i < CQ_RING; i++)
		cq->ring[i] = (struct qsm_wc){ .wr_id = i, .status = QSM_WC_SUCCESS, .opcode = QSM_WR_RECV,
					       .byte_len = 64 + (i & 511) };
	cq->next = 0;
	cq->end = end;
}

/* ---- the ULP's completion handler: the same on both sides ---- */

static uint64_t ulp_completions, ulp_bytes;

static int ulp_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	(void)q;
	ulp_completions++;
	ulp_bytes += wc->byte_len;
	return wc->status != QSM_WC_SUCCESS;
}

/* ---- qsm: a fabric whose CM events bring one queue to LIVE, then the fake CQ's ---- */

static const int to_live[] = { QSM_EV_ADDR_RESOLVED, QSM_EV_ROUTE_RESOLVED, QSM_EV_ESTABLISHED };
#define TO_LIVE_LEN (sizeof(to_live) / sizeof(to_live[0]))

struct cq_source {
	struct fake_cq *cq;
	unsigned cm_next;                /* CM events handed out so far */
};

/* As the rdmacm fabric does: the CQ polled into a local array, each entry then written to the
 * caller's batch with its owner. */
static int cq_get_event(struct qsm_fabric *f, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe,
			int max)
{
	struct bench_fabric *b = bf_of(f);
	struct cq_source *s = b->source;
	struct qsm_wc wc[POLL_BATCH];
	int n;

	if (s->cm_next < TO_LIVE_LEN) {
		ev->id = &b->ids[0];
		ev->owner = b->ids[0].owner;
		ev->status = 0;
		ev->private_data_len = 0;
		ev->event = to_live[s->cm_next++];
		return 0;
	}
	n = poll_cq(s->cq, max < POLL_BATCH ? max : POLL_BATCH, wc);
	for (int i = 0; i < n; i++) {
		cqe[i].owner = b->ids[0].owner;
		cqe[i].id = &b->ids[0];
		cqe[i].wc = wc[i];
	}
	return n ? n : -EAGAIN;
}

static struct qsm_fabric_ops cq_ops;

static size_t only_queue(void *owner)
{
	(void)owner;
	return 0;
}

static const struct qsm_class bench_class = {
	.name = "bench-completions",
	.completion = ulp_completion,
};

struct result {
	double ns;
	uint64_t completions;
};

static struct result run_qsm(uint64_t n, int instr)
{
	struct fake_cq *cq = malloc(sizeof(*cq));
	struct cq_source src = { .cq = cq };
	struct bench_fabric *b = bench_fabric_new(1, only_queue, &cq_ops, &src);
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct qsm_conn_opts o = { .cls = &bench_class, .dst = (struct sockaddr *)&dst };
	struct qsm_ctx *ctx;
	struct qsm_conn *q;
	struct qsm_counters c0, c1;
	uint64_t t0, ns;

	if (!cq)
		abort();
	fake_cq_init(cq, 0);
	if (qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = &b->f }, &ctx) < 0 ||
	    qsm_conn_new(ctx, &o, &q) < 0)
		abort();
	b->ids[0].owner = q;
	qsm_conn_connect(q);
	while (qsm_ctx_dispatch(ctx, 64) > 0) {
	}
	if (qsm_conn_state(q) != QSM_CM_LIVE) {
		fprintf(stderr, "completions: the queue is %s, not LIVE\n", qsm_conn_state_name(q));
		abort();
	}
	cq->end = n;
	qsm_ctx_counters(ctx, &c0, sizeof(c0));
	t0 = measure_start(instr);
	while (qsm_ctx_dispatch(ctx, 4096) > 0) {
	}
	ns = measure_stop(instr, t0);
	qsm_ctx_counters(ctx, &c1, sizeof(c1));
	qsm_ctx_free(ctx);
	free(cq);
	return (struct result){ .ns = (double)ns, .completions = c1.completions - c0.completions };
}

/* ---- the baseline: the loop every verbs program has ---- */

static int (*volatile raw_handler)(struct qsm_conn *q, const struct qsm_wc *wc) = ulp_completion;

static struct result run_raw(uint64_t n, int instr)
{
	struct fake_cq *cq = malloc(sizeof(*cq));
	struct qsm_wc wc[POLL_BATCH];
	uint64_t t0, ns, done = 0;
	int got;

	if (!cq)
		abort();
	fake_cq_init(cq, n);
	t0 = measure_start(instr);
	while ((got = poll_cq(cq, POLL_BATCH, wc)) > 0)
		for (int i = 0; i < got; i++) {
			if (raw_handler(NULL, &wc[i]))
				abort(); /* the ULP would destroy the queue; none fail here */
			done++;
		}
	ns = measure_stop(instr, t0);
	free(cq);
	return (struct result){ .ns = (double)ns, .completions = done };
}

static const struct side {
	const char *name;
	struct result (*run)(uint64_t n, int instr);
} sides[] = { { "qsm", run_qsm }, { "raw_poll16", run_raw } };
#define NSIDES (sizeof(sides) / sizeof(sides[0]))

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 4000000;
	double best[NSIDES], ratio;

	cq_ops = bench_noop_ops;
	cq_ops.name = "fake-cq";
	cq_ops.get_event = cq_get_event;
	/* `completions --instr SIDE 1 N`: one side alone, counted under callgrind */
	if (argc == 5 && !strcmp(argv[1], BENCH_INSTR_ARG)) {
		for (size_t s = 0; s < NSIDES; s++)
			if (!strcmp(argv[2], sides[s].name)) {
				sides[s].run(strtoull(argv[4], NULL, 10), 1);
				return 0;
			}
		return 2;
	}
	printf("rdma-qsm completions benchmark: qsm_ctx_dispatch -> the class's completion handler,\n"
	       "against a raw `n = poll16(cq, wc); for each: fn(wc)` loop; the same fake CQ (a ring\n"
	       "of prepared completions, polled 16 at a time on both sides) and the same handler,\n"
	       "one live queue, same run; best of 3; %llu completions\n\n", (unsigned long long)n);
	for (size_t s = 0; s < NSIDES; s++)
		best[s] = 1e18;
	for (int rep = 0; rep < 3; rep++)
		for (size_t s = 0; s < NSIDES; s++) {
			struct result r = sides[s].run(n, 0);

			if (r.completions != n) {
				fprintf(stderr, "completions: %s handled %llu of %llu\n", sides[s].name,
					(unsigned long long)r.completions, (unsigned long long)n);
				return 1;
			}
			if (r.ns / (double)n < best[s])
				best[s] = r.ns / (double)n;
		}
	ratio = best[0] / best[1];
	printf("%14s %14s %8s\n", "qsm ns/compl", "raw ns/compl", "ratio");
	printf("%14.1f %14.1f %7.2fx\n\n", best[0], best[1], ratio);
	printf("qsm takes a batch of up to 16 from the fabric and calls the queue's handler for each\n"
	       "(stale check, WC_ERROR rule, counters; no reference per completion); the data-path target is <= 2x.\n");
	printf("ratio completions qsm/raw_poll16 %.2f\n", ratio);
	fflush(stdout);
	if (instr_available()) {
		uint64_t cn = 200000;
		double ir[NSIDES];

		for (size_t s = 0; s < NSIDES; s++)
			ir[s] = (double)instr_count(sides[s].name, 1, cn) / (double)cn;
		printf("\nUnder callgrind (%llu completions, each side alone, only its loop counted):\n"
		       "%14s %14s %8s\n%14.0f %14.0f %7.2fx\n\n", (unsigned long long)cn, "qsm Ir/compl",
		       "raw Ir/compl", "ratio", ir[0], ir[1], ir[1] > 0 ? ir[0] / ir[1] : 0);
		printf("ratio completions_instr qsm/raw_poll16 %.2f\n", ir[1] > 0 ? ir[0] / ir[1] : 0);
	} else {
		printf("\n(valgrind not found: no instruction counts)\n");
	}
	return 0;
}
