/* rdma-qsm benchmark: one completion through the rdmacm fabric's real completion path and the
 * ctx to the class's handler, against a raw ibv_poll_cq(16) loop on the same fake provider. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/ctx.h>
#include <qsm/data.h>

#include "fake_rdmacm.h"
#include "instr.h"

/*
 * The fake provider and the fabric over it: fake_rdmacm.h.  Receives posted by
 * qsm_conn_post_recv(), completions taken by qsm_ctx_dispatch() -> rc_get_event ->
 * qsm_rc_poll_cqs -> wc_take -> the class's handler, straight from the poll (an error or an
 * SRQ receive would go through the batch, conn_complete).  A CQ that went cold
 * between two rounds is made hot again as its channel's event would (not counted).
 *
 * Both sides post a round of receives, then drain them; only the drain is measured.
 */
#define POLL_BATCH 16
#define ROUND FAKE_ROUND           /* receives posted per round: the receive queue's size */

/* ---- the ULP's completion handler: the same work on both sides ---- */

static uint64_t ulp_completions, ulp_bytes;

static int ulp_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	(void)q;
	ulp_completions++;
	ulp_bytes += wc->byte_len;
	return wc->status != QSM_WC_SUCCESS;
}

static int raw_completion(const struct ibv_wc *wc)
{
	ulp_completions++;
	ulp_bytes += wc->byte_len;
	return wc->status != IBV_WC_SUCCESS;
}

static const struct qsm_class bench_class = {
	.name = "bench-completions",
	.qp = { .max_send_wr = 16, .max_recv_wr = ROUND, .max_send_sge = 1, .max_recv_sge = 1 },
	.completion = ulp_completion,
};

struct result {
	double ns;
	uint64_t completions;
};

static uint64_t rounds_of(uint64_t n)
{
	return (n + ROUND - 1) / ROUND;
}

static struct result run_qsm(uint64_t n, int instr)
{
	struct rc_fabric *f;
	struct qsm_ctx *ctx;
	struct qsm_conn *q;
	struct qsm_counters c0, c1;
	uint64_t ns = 0, posted = 0;

	if (fake_rdmacm_live(&bench_class, &ctx, &q, &f) < 0)
		abort();
	qsm_ctx_counters(ctx, &c0, sizeof(c0));
	for (uint64_t r = rounds_of(n); r; r--) {
		uint64_t k = n - posted < ROUND ? n - posted : ROUND, t0;
		struct qsm_sge sge = { .addr = 4096, .length = 4096, .lkey = 1 };

		for (uint64_t i = 0; i < k; i++)
			if (qsm_conn_post_recv(q, posted + i, &sge, 1) < 0)
				abort();
		posted += k;
		fake_cq_event(f);
		t0 = measure_start(instr);
		while (qsm_ctx_dispatch(ctx, 4096) > 0) {
		}
		ns += measure_stop(instr, t0);
	}
	qsm_ctx_counters(ctx, &c1, sizeof(c1));
	qsm_ctx_free(ctx);
	return (struct result){ .ns = (double)ns, .completions = c1.completions - c0.completions };
}

/* ---- the baseline: the loop every verbs program has, on the same provider ---- */

static int (*volatile raw_handler)(const struct ibv_wc *wc) = raw_completion;

static struct result run_raw(uint64_t n, int instr)
{
	struct ibv_wc wc[POLL_BATCH];
	uint64_t ns = 0, done = 0, posted = 0;
	int got;

	prov_init();
	for (uint64_t r = rounds_of(n); r; r--) {
		uint64_t k = n - posted < ROUND ? n - posted : ROUND, t0;
		struct ibv_sge sge = { .addr = 4096, .length = 4096, .lkey = 1 };

		for (uint64_t i = 0; i < k; i++) {
			struct ibv_recv_wr wr = { .wr_id = posted + i, .sg_list = &sge, .num_sge = 1 }, *bad;

			if (ibv_post_recv(&prov.qp, &wr, &bad))
				abort();
		}
		posted += k;
		t0 = measure_start(instr);
		while ((got = ibv_poll_cq(&prov.cq, POLL_BATCH, wc)) > 0)
			for (int i = 0; i < got; i++) {
				if (raw_handler(&wc[i]))
					abort(); /* the ULP would destroy the queue; none fail here */
				done++;
			}
		ns += measure_stop(instr, t0);
	}
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

	/* `completions --instr SIDE 1 N`: one side alone, counted under callgrind */
	if (argc == 5 && !strcmp(argv[1], BENCH_INSTR_ARG)) {
		for (size_t s = 0; s < NSIDES; s++)
			if (!strcmp(argv[2], sides[s].name)) {
				struct result r = sides[s].run(strtoull(argv[4], NULL, 10), 1);

				return r.completions == strtoull(argv[4], NULL, 10) ? 0 : 1;
			}
		return 2;
	}
	printf("rdma-qsm completions benchmark: receives completed through the rdmacm fabric\n"
	       "(rc_get_event -> qsm_rc_poll_cqs -> wc_take) straight to the class's handler,\n"
	       "against a raw `n = ibv_poll_cq(cq, 16, wc); for each: handler(wc)` loop; the same fake\n"
	       "provider (ibv_context ops: poll_cq, post_recv), the same handler work, one live queue,\n"
	       "rounds of %d receives posted then drained (the drain timed), same run; best of 3;\n"
	       "%llu completions\n\n", ROUND, (unsigned long long)n);
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
	printf("ratio completions qsm/raw_poll16 %.2f\n", ratio);
	fflush(stdout);
	if (instr_available()) {
		uint64_t cn = 200000;
		double ir[NSIDES];

		for (size_t s = 0; s < NSIDES; s++)
			ir[s] = (double)instr_count(sides[s].name, 1, cn) / (double)cn;
		printf("\nUnder callgrind (%llu completions, each side alone, only its drain counted):\n"
		       "%14s %14s %8s\n%14.0f %14.0f %7.2fx\n\n", (unsigned long long)cn, "qsm Ir/compl",
		       "raw Ir/compl", "ratio", ir[0], ir[1], ir[1] > 0 ? ir[0] / ir[1] : 0);
		printf("ratio completions_instr qsm/raw_poll16 %.2f\n", ir[1] > 0 ? ir[0] / ir[1] : 0);
	} else {
		printf("\n(valgrind not found: no instruction counts)\n");
	}
	return 0;
}
