/* rdma-qsm benchmark: one completion through the rdmacm fabric's real completion path and the
 * ctx to the class's handler, against a raw ibv_poll_cq(16) loop on the same fake provider. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <qsm/ctx.h>
#include <qsm/data.h>
#include <qsm/rdmacm.h>

#include "fabric/rdmacm/rdmacm.h"
#include "instr.h"

/*
 * The fake provider: a real struct ibv_context whose ops (poll_cq, post_recv, req_notify_cq)
 * are this file's, one ibv_cq and one ibv_qp on it.  A receive posted (ibv_post_recv, inline:
 * qp->context->ops.post_recv) is recorded; the message for it has arrived, and ibv_poll_cq
 * (inline: cq->context->ops.poll_cq) hands out its completion, a whole ibv_wc copied from a
 * prepared one as a provider writes it (varied lengths).
 *
 * qsm's side is the product: qsm_rdmacm_fabric_new() with its epoll, hot fd and pending queue,
 * a device whose PD, channel and CQ are the fake provider's, the queue's id, QP and rings made by
 * the fabric's own create_id / create_qp; receives posted by qsm_conn_post_recv(), completions
 * taken by qsm_ctx_dispatch() -> rc_get_event -> qsm_rc_poll_cqs -> wc_take -> conn_complete ->
 * the class's handler.  Faked below the fabric (the linker's --wrap): what needs a kernel --
 * rdma_cm's channel, ids and QP creation, the device list -- and the CM events that bring the
 * queue to LIVE come through the fabric's pending queue, not the CM channel.  A CQ that went
 * cold between two rounds is made hot again as its channel's event would (not counted).
 *
 * Both sides post a round of receives, then drain them; only the drain is measured.
 */
#define POLL_BATCH 16
#define ROUND 4096                 /* receives posted per round: the receive queue's size */
#define QP_NUM 0x1234

struct fake_prov {
	struct ibv_device dev;
	struct ibv_context ctx;
	struct ibv_cq cq;
	struct ibv_qp qp;
	struct ibv_pd pd;
	struct ibv_comp_channel cc;
	struct ibv_wc tmpl[ROUND];     /* what arrives, by post seq */
	uint64_t posted[ROUND];        /* wr_ids of receives posted, not yet completed */
	uint64_t head, tail;
};

static struct fake_prov prov;

static int fake_poll_cq(struct ibv_cq *cq, int max, struct ibv_wc *wc)
{
	struct fake_prov *p = qsm_container_of(cq, struct fake_prov, cq);
	uint64_t left = p->tail - p->head;
	int n = left < (uint64_t)max ? (int)left : max;

	for (int i = 0; i < n; i++) {
		uint64_t k = (p->head + (uint64_t)i) & (ROUND - 1);

		wc[i] = p->tmpl[k];
		wc[i].wr_id = p->posted[k];
	}
	p->head += (uint64_t)n;
	return n;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_prov *p = qsm_container_of(qp, struct fake_prov, qp);

	for (; wr; wr = wr->next) {
		if (p->tail - p->head == ROUND) {
			*bad = wr;
			return ENOMEM;
		}
		p->posted[p->tail++ & (ROUND - 1)] = wr->wr_id;
	}
	return 0;
}

static int fake_req_notify(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

static void prov_init(void)
{
	memset(&prov, 0, sizeof(prov));
	prov.dev.transport_type = IBV_TRANSPORT_IB;
	prov.ctx.device = &prov.dev;
	prov.ctx.ops.poll_cq = fake_poll_cq;
	prov.ctx.ops.post_recv = fake_post_recv;
	prov.ctx.ops.req_notify_cq = fake_req_notify;
	prov.ctx.async_fd = -1;
	prov.cq.context = &prov.ctx;
	prov.cq.cqe = 1 << 20;
	prov.qp.context = &prov.ctx;
	prov.qp.qp_num = QP_NUM;
	prov.qp.send_cq = prov.qp.recv_cq = &prov.cq;
	prov.pd.context = &prov.ctx;
	prov.cc.context = &prov.ctx;
	prov.cc.fd = -1;
	for (unsigned i = 0; i < ROUND; i++)
		prov.tmpl[i] = (struct ibv_wc){ .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
						.byte_len = 64 + (i & 511), .qp_num = QP_NUM };
}

/* ---- below the fabric: what needs a kernel ---- */

struct rdma_event_channel *__wrap_rdma_create_event_channel(void);
void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *ch);
struct ibv_device **__wrap_ibv_get_device_list(int *n);
void __wrap_ibv_free_device_list(struct ibv_device **list);
int __wrap_rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **ret, void *ctx,
			  enum rdma_port_space ps);
int __wrap_rdma_destroy_id(struct rdma_cm_id *cm);
int __wrap_rdma_bind_addr(struct rdma_cm_id *cm, struct sockaddr *addr);
int __wrap_rdma_resolve_addr(struct rdma_cm_id *cm, struct sockaddr *src, struct sockaddr *dst,
			     int timeout_ms);
int __wrap_rdma_resolve_route(struct rdma_cm_id *cm, int timeout_ms);
int __wrap_rdma_connect(struct rdma_cm_id *cm, struct rdma_conn_param *p);
int __wrap_rdma_disconnect(struct rdma_cm_id *cm);
int __wrap_rdma_create_qp(struct rdma_cm_id *cm, struct ibv_pd *pd, struct ibv_qp_init_attr *a);
void __wrap_rdma_destroy_qp(struct rdma_cm_id *cm);

static struct qsm_fdev *fake_dev;    /* the device every id resolves to */

struct rdma_event_channel *__wrap_rdma_create_event_channel(void)
{
	struct rdma_event_channel *ch = calloc(1, sizeof(*ch));

	if (ch)
		ch->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);   /* never readable */
	return ch;
}

void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
	close(ch->fd);
	free(ch);
}

/* Empty at the fabric's first look; unreadable after, so the fake device stays present. */
struct ibv_device **__wrap_ibv_get_device_list(int *n)
{
	static int calls;

	*n = 0;
	if (calls++) {
		errno = ENOSYS;
		return NULL;
	}
	return calloc(1, sizeof(struct ibv_device *));
}

void __wrap_ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

int __wrap_rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **ret, void *ctx,
			  enum rdma_port_space ps)
{
	struct rdma_cm_id *cm = calloc(1, sizeof(*cm));

	if (!cm)
		return -1;
	cm->channel = ch;
	cm->context = ctx;
	cm->ps = ps;
	*ret = cm;
	return 0;
}

int __wrap_rdma_destroy_id(struct rdma_cm_id *cm)
{
	free(cm);
	return 0;
}

/* The device's sentinel id binds to the device's address (bench_device_addr). */
int __wrap_rdma_bind_addr(struct rdma_cm_id *cm, struct sockaddr *addr)
{
	(void)cm;
	(void)addr;
	return 0;
}

static struct qsm_fid *fid_of(struct rdma_cm_id *cm)
{
	return cm->context;
}

/* The address resolves on the fake device, as librdmacm binds an id to its context. */
int __wrap_rdma_resolve_addr(struct rdma_cm_id *cm, struct sockaddr *src, struct sockaddr *dst,
			     int timeout_ms)
{
	struct qsm_fid *id = fid_of(cm);

	(void)src;
	(void)dst;
	(void)timeout_ms;
	cm->verbs = &prov.ctx;
	id->dev = fake_dev;
	fake_dev->nids++;
	pending_push(id->fab, QSM_EV_ADDR_RESOLVED, 0, id, NULL, false);
	return 0;
}

int __wrap_rdma_resolve_route(struct rdma_cm_id *cm, int timeout_ms)
{
	(void)timeout_ms;
	pending_push(fid_of(cm)->fab, QSM_EV_ROUTE_RESOLVED, 0, fid_of(cm), NULL, false);
	return 0;
}

int __wrap_rdma_connect(struct rdma_cm_id *cm, struct rdma_conn_param *p)
{
	(void)p;
	fid_of(cm)->qp_rts = true;   /* as the fabric marks it when ESTABLISHED comes */
	pending_push(fid_of(cm)->fab, QSM_EV_ESTABLISHED, 0, fid_of(cm), NULL, false);
	return 0;
}

int __wrap_rdma_disconnect(struct rdma_cm_id *cm)
{
	(void)cm;
	return 0;
}

int __wrap_rdma_create_qp(struct rdma_cm_id *cm, struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	(void)pd;
	if (a->recv_cq != &prov.cq || a->cap.max_recv_wr > ROUND + 1) {
		errno = EINVAL;
		return -1;
	}
	prov.qp.qp_context = a->qp_context;
	cm->qp = &prov.qp;
	return 0;
}

void __wrap_rdma_destroy_qp(struct rdma_cm_id *cm)
{
	cm->qp = NULL;
}

/* The fake provider's device, as the fabric would hold it once a QP was made on it: PD,
 * channel, one CQ in the pool; held (gets) by the benchmark so it outlives the queue. */
static struct qsm_fdev *fake_dev_add(struct rc_fabric *f)
{
	struct qsm_fdev *d = calloc(1, sizeof(*d));
	struct rc_cq *c = calloc(1, sizeof(*c));

	if (!d || !c)
		abort();
	d->fab = f;
	snprintf(d->name, sizeof(d->name), "fake0");
	d->verbs = &prov.ctx;
	d->present = true;
	d->gets = 1;
	d->pd = &prov.pd;
	d->cc = &prov.cc;
	d->max_cqe = prov.cq.cqe;
	d->max_cq = 1;
	qsm_list_init(&d->cqs);
	qsm_list_init(&d->vnode);
	for (int b = 0; b < QP_BUCKETS; b++)
		qsm_list_init(&d->qps[b]);
	c->cq = &prov.cq;
	c->cap = prov.cq.cqe;
	qsm_list_add_tail(&d->cqs, &c->node);
	d->ncqs = 1;
	qsm_list_add_tail(&f->devs, &d->node);
	return d;
}

/* The CQ's channel fired: it goes hot, as qsm_rc_cq_events() makes it. */
static void fake_cq_event(struct rc_fabric *f)
{
	struct rc_cq *c = qsm_container_of(fake_dev->cqs.next, struct rc_cq, node);

	if (c->hot)
		return;
	c->hot = true;
	c->idle = 0;
	qsm_rc_hot_changed(f, 1);
}

/* The fabric's ops but two: its destroy, once the fake device (none of whose objects verbs
 * made) is taken off; and the device's address, which the fabric learns by binding an id to each
 * interface's (TEST-NET-1 here). */
static void (*rc_destroy)(struct qsm_fabric *f);
static struct qsm_fabric_ops bench_rc_ops;

static int bench_device_addr(struct qsm_fdev *d, struct sockaddr_storage *ss)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;

	(void)d;
	memset(ss, 0, sizeof(*ss));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(0xc0000201);
	return 0;
}

static void bench_rc_destroy(struct qsm_fabric *base)
{
	struct rc_cq *c = qsm_container_of(fake_dev->cqs.next, struct rc_cq, node);

	if (c->hot)
		qsm_rc_hot_changed(to_fab(base), -1);
	qsm_list_del(&fake_dev->node);
	free(c);
	free(fake_dev);
	fake_dev = NULL;
	rc_destroy(base);
}

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
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct qsm_conn_opts o = { .cls = &bench_class, .dst = (struct sockaddr *)&dst };
	struct qsm_fabric *fab;
	struct rc_fabric *f;
	struct qsm_ctx *ctx;
	struct qsm_conn *q;
	struct qsm_counters c0, c1;
	uint64_t ns = 0, posted = 0;

	prov_init();
	if (qsm_rdmacm_fabric_new(&fab) < 0)
		abort();
	f = to_fab(fab);
	fake_dev = fake_dev_add(f);
	rc_destroy = fab->ops->destroy;
	bench_rc_ops = *fab->ops;
	bench_rc_ops.destroy = bench_rc_destroy;
	bench_rc_ops.device_addr = bench_device_addr;
	fab->ops = &bench_rc_ops;
	if (qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = fab }, &ctx) < 0 ||
	    qsm_conn_new(ctx, &o, &q) < 0)
		abort();
	qsm_conn_connect(q);
	while (qsm_ctx_dispatch(ctx, 64) > 0) {
	}
	if (qsm_conn_state(q) != QSM_CM_LIVE) {
		fprintf(stderr, "completions: the queue is %s, not LIVE\n", qsm_conn_state_name(q));
		abort();
	}
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
	       "(rc_get_event -> qsm_rc_poll_cqs -> wc_take -> conn_complete) to the class's handler,\n"
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
