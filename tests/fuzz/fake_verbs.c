/* rdma-qsm fuzzing: the fake libibverbs below the rdmacm fabric (fake_rdma.h): a device's PD,
 * completion channel, CQs, async events, MRs, and a small provider's QPs. */
#include <errno.h>
#include <string.h>

#include "fuzz/fake_int.h"

/* ---- the device's PD, completion channel, CQs ---- */

struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *c);
int __wrap_ibv_dealloc_pd(struct ibv_pd *pd);
struct ibv_comp_channel *__wrap_ibv_create_comp_channel(struct ibv_context *c);
int __wrap_ibv_destroy_comp_channel(struct ibv_comp_channel *cc);
struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector);
int __wrap_ibv_resize_cq(struct ibv_cq *cq, int cqe);
int __wrap_ibv_destroy_cq(struct ibv_cq *cq);
int __wrap_ibv_get_cq_event(struct ibv_comp_channel *cc, struct ibv_cq **cq, void **cq_context);
void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
int __wrap_ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev);
void __wrap_ibv_ack_async_event(struct ibv_async_event *ev);
struct ibv_mr *__wrap_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
struct ibv_mr *__wrap_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				       unsigned int access);
int __wrap_ibv_dereg_mr(struct ibv_mr *mr);

struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *c)
{
	struct ibv_pd *pd;

	if (failing(FAKE_ALLOC_PD))
		return NULL;
	pd = zalloc(sizeof(*pd));
	pd->context = c;
	fake_n.pds++;
	return pd;
}

int __wrap_ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	fake_n.pds--;
	return 0;
}

struct ibv_comp_channel *__wrap_ibv_create_comp_channel(struct ibv_context *c)
{
	struct fcompch *f = zalloc(sizeof(*f));

	f->cc.context = c;
	f->cc.fd = efd_new();
	qsm_list_init(&f->fired);
	qsm_list_add_tail(&compchs, &f->node);
	fake_n.comp_channels++;
	return &f->cc;
}

int __wrap_ibv_destroy_comp_channel(struct ibv_comp_channel *cc)
{
	struct fcompch *f = qsm_container_of(cc, struct fcompch, cc);
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->fired) {
		qsm_list_del(pos);
		free(qsm_container_of(pos, struct ffire, node));
	}
	close(cc->fd);
	qsm_list_del(&f->node);
	free(f);
	fake_n.comp_channels--;
	return 0;
}

static struct fcq *fcq_of(struct ibv_cq *cq)
{
	return qsm_container_of(cq, struct fcq, cq);
}

/* An armed CQ with completions raises its channel's event, once. */
static void cq_fire(struct fcq *c)
{
	struct fcompch *f;
	struct ffire *x;

	if (!c->armed || !c->len || !c->cq.channel)
		return;
	c->armed = false;
	f = qsm_container_of(c->cq.channel, struct fcompch, cc);
	x = zalloc(sizeof(*x));
	x->cq = c;
	qsm_list_add_tail(&f->fired, &x->node);
	fd_signal(f->cc.fd);
}

static void cq_push(struct fcq *c, const struct ibv_wc *wc)
{
	if (c->len == c->cap) {
		struct ibv_wc *n = zalloc((c->cap ? 2 * c->cap : 64) * sizeof(*n));

		for (unsigned k = 0; k < c->len; k++)
			n[k] = c->wc[(c->head + k) % c->cap];
		free(c->wc);
		c->wc = n;
		c->head = 0;
		c->cap = c->cap ? 2 * c->cap : 64;
	}
	c->wc[(c->head + c->len++) % c->cap] = *wc;
	cq_fire(c);
}

struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct fcq *f;

	(void)comp_vector;
	if (failing(FAKE_CREATE_CQ))
		return NULL;
	f = zalloc(sizeof(*f));
	f->cq.context = c;
	f->cq.channel = channel;
	f->cq.cq_context = cq_context;
	f->cq.cqe = cqe;
	qsm_list_add_tail(&cqs, &f->node);
	fake_n.cqs++;
	return &f->cq;
}

int __wrap_ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	cq->cqe = cqe;
	return 0;
}

int __wrap_ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fcq *c = fcq_of(cq);
	struct qsm_list *pos, *tmp;

	/* its events not yet read go with it */
	qsm_list_each(pos, tmp, &compchs) {
		struct fcompch *f = qsm_container_of(pos, struct fcompch, node);
		struct qsm_list *p2, *t2;

		qsm_list_each(p2, t2, &f->fired) {
			struct ffire *x = qsm_container_of(p2, struct ffire, node);

			if (x->cq == c) {
				qsm_list_del(p2);
				free(x);
			}
		}
	}
	qsm_list_del(&c->node);
	free(c->wc);
	free(c);
	fake_n.cqs--;
	return 0;
}

int __wrap_ibv_get_cq_event(struct ibv_comp_channel *cc, struct ibv_cq **cq, void **cq_context)
{
	struct fcompch *f = qsm_container_of(cc, struct fcompch, cc);
	struct ffire *x;

	if (qsm_list_empty(&f->fired)) {
		fd_quiet(cc->fd);
		errno = EAGAIN;
		return -1;
	}
	x = qsm_container_of(f->fired.next, struct ffire, node);
	qsm_list_del(&x->node);
	*cq = &x->cq->cq;
	*cq_context = x->cq->cq.cq_context;
	free(x);
	return 0;
}

void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	(void)cq;
	(void)nevents;
}

int fake_poll_cq(struct ibv_cq *cq, int max, struct ibv_wc *wc)
{
	struct fcq *c = fcq_of(cq);
	int n = 0;

	while (n < max && c->len) {
		wc[n++] = c->wc[c->head];
		c->head = (c->head + 1) % c->cap;
		c->len--;
	}
	return n;
}

int fake_req_notify(struct ibv_cq *cq, int solicited_only)
{
	(void)solicited_only;
	fcq_of(cq)->armed = true;
	cq_fire(fcq_of(cq));
	return 0;
}

int __wrap_ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
	struct fctx *f = qsm_container_of(c, struct fctx, ctx);
	struct fasync *a;

	if (qsm_list_empty(&f->async)) {
		fd_quiet(c->async_fd);
		errno = EAGAIN;
		return -1;
	}
	a = qsm_container_of(f->async.next, struct fasync, node);
	qsm_list_del(&a->node);
	*ev = a->ev;
	free(a);
	return 0;
}

void __wrap_ibv_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
}

struct ibv_mr *__wrap_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	static uint32_t key = 0x10;
	struct ibv_mr *mr = zalloc(sizeof(*mr));

	(void)access;
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = mr->rkey = key++;
	fake_n.mrs++;
	return mr;
}

/* (what ibv_reg_mr() calls when its access flags are not a constant) */
struct ibv_mr *__wrap_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				       unsigned int access)
{
	(void)iova;
	return __wrap_ibv_reg_mr(pd, addr, len, (int)access);
}

int __wrap_ibv_dereg_mr(struct ibv_mr *mr)
{
	free(mr);
	fake_n.mrs--;
	return 0;
}

/* ---- QPs ---- */

int __wrap_rdma_create_qp(struct rdma_cm_id *cm, struct ibv_pd *pd, struct ibv_qp_init_attr *a);
void __wrap_rdma_destroy_qp(struct rdma_cm_id *cm);
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);

int __wrap_rdma_create_qp(struct rdma_cm_id *cm, struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct fqp *q;

	if (failing(FAKE_CREATE_QP))
		return -1;
	if (a->cap.max_send_wr > RING || a->cap.max_recv_wr > RING) {
		errno = EINVAL;
		return -1;
	}
	q = zalloc(sizeof(*q));
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.srq = a->srq;
	q->qp.qp_num = next_qpn++;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_INIT;
	q->cap[0] = a->cap.max_send_wr;
	q->cap[1] = a->cap.max_recv_wr;
	q->cm = cm;
	qsm_list_add_tail(&qps, &q->node);
	cm->qp = &q->qp;
	fake_n.qps++;
	return 0;
}

void __wrap_rdma_destroy_qp(struct rdma_cm_id *cm)
{
	struct fqp *q = qsm_container_of(cm->qp, struct fqp, qp);
	struct qsm_list *pos, *tmp;

	/* ibv_destroy_qp waits for its async events: none of them is read after it */
	qsm_list_each(pos, tmp, &contexts) {
		struct fctx *c = qsm_container_of(pos, struct fctx, node);
		struct qsm_list *p2, *t2;

		qsm_list_each(p2, t2, &c->async) {
			struct fasync *a = qsm_container_of(p2, struct fasync, node);

			if (a->ev.element.qp == &q->qp) {
				qsm_list_del(p2);
				free(a);
			}
		}
	}
	/* (its CQEs stay in the CQ: the fabric's tags make them stale) */
	qsm_list_del(&q->node);
	free(q);
	cm->qp = NULL;
	fake_n.qps--;
}

/* A WR's completion: to the CQ of its work queue. */
static void wr_complete(struct fqp *q, int w, const struct fwr *r, enum ibv_wc_status st, uint32_t len)
{
	struct ibv_wc wc = { .wr_id = r->wr_id, .status = st, .opcode = r->opcode, .qp_num = q->qp.qp_num,
			     .byte_len = st == IBV_WC_SUCCESS ? len : 0 };

	if (st == IBV_WC_SUCCESS && !r->signaled)
		return;
	cq_push(fcq_of(w ? q->qp.recv_cq : q->qp.send_cq), &wc);
}

void fake_qp_to_err(struct fqp *q)
{
	if (q->err)
		return;
	q->err = true;
	q->qp.state = IBV_QPS_ERR;
	for (int w = 0; w < 2; w++)
		for (; q->head[w] != q->tail[w]; q->head[w]++)
			wr_complete(q, w, &q->wq[w][q->head[w] % RING], IBV_WC_WR_FLUSH_ERR, 0);
}

int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
		fake_qp_to_err(qsm_container_of(qp, struct fqp, qp));
	else if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

/* One WR on a work queue; in ERR it flushes at once. */
static int wr_post(struct fqp *q, int w, uint64_t wr_id, enum ibv_wc_opcode op, bool signaled)
{
	struct fwr r = { .wr_id = wr_id, .opcode = op, .signaled = signaled || w };

	if (failing(FAKE_POST))
		return errno;
	if (q->err) {
		wr_complete(q, w, &r, IBV_WC_WR_FLUSH_ERR, 0);
		return 0;
	}
	if (q->tail[w] - q->head[w] >= q->cap[w])
		return ENOMEM;
	q->wq[w][q->tail[w]++ % RING] = r;
	return 0;
}

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
	case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
	default: return IBV_WC_SEND;
	}
}

int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	for (; wr; wr = wr->next) {
		int r = wr_post(qsm_container_of(qp, struct fqp, qp), 0, wr->wr_id, wc_opcode(wr->opcode),
				wr->send_flags & IBV_SEND_SIGNALED);

		if (r) {
			*bad = wr;
			return r;
		}
	}
	return 0;
}

int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		int r = wr_post(qsm_container_of(qp, struct fqp, qp), 1, wr->wr_id, IBV_WC_RECV, true);

		if (r) {
			*bad = wr;
			return r;
		}
	}
	return 0;
}

unsigned fake_qp_count(void)
{
	unsigned n = 0;
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &qps)
		n++;
	return n;
}

static struct fqp *qp_at(unsigned k)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &qps)
		if (!k--)
			return qsm_container_of(pos, struct fqp, node);
	return NULL;
}

void fake_qp_complete(unsigned i, bool recv, enum ibv_wc_status status, uint32_t byte_len)
{
	struct fqp *q = qp_at(i);
	int w = recv ? 1 : 0;

	if (!q || q->err || q->head[w] == q->tail[w])
		return;
	wr_complete(q, w, &q->wq[w][q->head[w]++ % RING], status, byte_len);
	if (status != IBV_WC_SUCCESS)
		fake_qp_to_err(q);
}

void fake_qp_error(unsigned i)
{
	struct fqp *q = qp_at(i);

	if (q)
		fake_qp_to_err(q);
}

void fake_async(unsigned i, enum ibv_event_type type)
{
	struct fqp *q = qp_at(i);
	struct fctx *c;
	struct fasync *a;

	if (!q)
		return;
	c = qsm_container_of(q->qp.context, struct fctx, ctx);
	a = zalloc(sizeof(*a));
	a->ev.event_type = type;
	/* each with the element a device names for it */
	switch (type) {
	case IBV_EVENT_CQ_ERR: a->ev.element.cq = q->qp.send_cq; break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
	case IBV_EVENT_WQ_FATAL:
		free(a);   /* no SRQ or WQ here */
		return;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: a->ev.element.qp = &q->qp; break;
	default: a->ev.element.port_num = 1; break;   /* the device's, a port's */
	}
	qsm_list_add_tail(&c->async, &a->node);
	fd_signal(c->ctx.async_fd);
}
