/* rdma-qsm benchmarks and tests: the fake provider under the rdmacm fabric (fake_rdmacm.h), and
 * below the fabric what needs a kernel, wrapped by the linker (FAKE_RDMACM_WRAP in Makefile.am). */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fake_rdmacm.h"

struct fake_prov prov;

/* A poll past the receives' common case: in ERR the receives just taken are flushes; then the
 * sends, in post order (flushes in ERR). */
static __attribute__((noinline)) int fake_poll_rest(struct fake_prov *p, int max, struct ibv_wc *wc, int n)
{
	unsigned k = 0;

	for (int i = 0; p->err && i < n; i++)
		wc[i].status = IBV_WC_WR_FLUSH_ERR;
	for (; n < max && k < p->nsends; n++, k++)
		wc[n] = (struct ibv_wc){ .wr_id = p->sends[k], .opcode = IBV_WC_SEND, .qp_num = FAKE_QP_NUM,
					 .status = p->err ? IBV_WC_WR_FLUSH_ERR : IBV_WC_SUCCESS };
	memmove(p->sends, p->sends + k, (p->nsends - k) * sizeof(p->sends[0]));
	p->nsends -= k;
	return n;
}

static int fake_poll_cq(struct ibv_cq *cq, int max, struct ibv_wc *wc)
{
	struct fake_prov *p = qsm_container_of(cq, struct fake_prov, cq);
	uint64_t left = p->tail - p->head;
	int n = left < (uint64_t)max ? (int)left : max;

	for (int i = 0; i < n; i++) {
		uint64_t k = (p->head + (uint64_t)i) & (FAKE_ROUND - 1);

		wc[i] = p->tmpl[k];
		wc[i].wr_id = p->posted[k];
	}
	p->head += (uint64_t)n;
	if (__builtin_expect(p->err || (n < max && p->nsends), 0))
		return fake_poll_rest(p, max, wc, n);
	return n;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_prov *p = qsm_container_of(qp, struct fake_prov, qp);

	for (; wr; wr = wr->next) {
		if (p->tail - p->head == FAKE_ROUND) {
			*bad = wr;
			return ENOMEM;
		}
		p->posted[p->tail++ & (FAKE_ROUND - 1)] = wr->wr_id;
	}
	return 0;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fake_prov *p = qsm_container_of(qp, struct fake_prov, qp);

	for (; wr; wr = wr->next) {
		if (p->nsends == sizeof(p->sends) / sizeof(p->sends[0])) {
			*bad = wr;
			return ENOMEM;
		}
		p->sends[p->nsends++] = wr->wr_id;
	}
	return 0;
}

/* ibv_modify_qp is libibverbs' own (no context op): wrapped.  ERR: the rest flushes. */
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct fake_prov *p = qsm_container_of(qp, struct fake_prov, qp);

	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
		p->err = true;
	return 0;
}

static int fake_req_notify(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

void prov_init(void)
{
	memset(&prov, 0, sizeof(prov));
	prov.dev.transport_type = IBV_TRANSPORT_IB;
	prov.ctx.device = &prov.dev;
	prov.ctx.ops.poll_cq = fake_poll_cq;
	prov.ctx.ops.post_recv = fake_post_recv;
	prov.ctx.ops.req_notify_cq = fake_req_notify;
	prov.ctx.ops.post_send = fake_post_send;
	prov.ctx.async_fd = -1;
	prov.cq.context = &prov.ctx;
	prov.cq.cqe = 1 << 20;
	prov.qp.context = &prov.ctx;
	prov.qp.qp_num = FAKE_QP_NUM;
	prov.qp.send_cq = prov.qp.recv_cq = &prov.cq;
	prov.pd.context = &prov.ctx;
	prov.cc.context = &prov.ctx;
	prov.cc.fd = -1;
	for (unsigned i = 0; i < FAKE_ROUND; i++)
		prov.tmpl[i] = (struct ibv_wc){ .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
						.byte_len = 64 + (i & 511), .qp_num = FAKE_QP_NUM };
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
	prov.ids_destroyed++;
	prov.watch_destroyed += cm == prov.watch;
	free(cm);
	return 0;
}

/* The one event fake_cm_event() left on the channel, then EAGAIN (the channel's eventfd read
 * back to unreadable). */
int __wrap_rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **event);
int __wrap_rdma_ack_cm_event(struct rdma_cm_event *event);

int __wrap_rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **event)
{
	uint64_t v;

	if (!prov.cm_ev_pending || prov.cm_ev.id->channel != ch) {
		errno = EAGAIN;
		return -1;
	}
	prov.cm_ev_pending = false;
	if (read(ch->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		abort();
	*event = &prov.cm_ev;
	return 0;
}

int __wrap_rdma_ack_cm_event(struct rdma_cm_event *event)
{
	(void)event;
	return 0;
}

void fake_cm_event(struct rdma_cm_id *cm, enum rdma_cm_event_type event, int status)
{
	uint64_t one = 1;

	prov.cm_ev = (struct rdma_cm_event){ .id = cm, .event = event, .status = status };
	prov.cm_ev_pending = true;
	if (write(cm->channel->fd, &one, sizeof(one)) != sizeof(one))
		abort();
}

/* The device's sentinel id binds to the device's address (fake_device_addr). */
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
	if (prov.connect_silent)
		return 0;
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
	if (a->recv_cq != &prov.cq || a->cap.max_recv_wr > FAKE_ROUND + 1) {
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
	d->max_sge_rd = QSM_FABRIC_MAX_SGE;
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
void fake_cq_event(struct rc_fabric *f)
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
static struct qsm_fabric_ops fake_rc_ops;

static int fake_device_addr(struct qsm_fdev *d, struct sockaddr_storage *ss)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;

	(void)d;
	memset(ss, 0, sizeof(*ss));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(0xc0000201);
	return 0;
}

static void fake_rc_destroy(struct qsm_fabric *base)
{
	struct rc_cq *c = qsm_container_of(fake_dev->cqs.next, struct rc_cq, node);

	struct qsm_list *pos, *tmp;

	if (c->hot)
		qsm_rc_hot_changed(to_fab(base), -1);
	/* ids the fabric still holds (parked ones) go first, as the fabric's destroy makes them
	 * go, while the fake device they are on is there */
	qsm_list_each(pos, tmp, &to_fab(base)->ids) {
		struct qsm_fid *id = qsm_container_of(pos, struct qsm_fid, node);

		id->iw_connecting = id->parked = false;
		qsm_rc_destroy_id(id);
	}
	qsm_list_del(&fake_dev->node);
	free(c);
	free(fake_dev);
	fake_dev = NULL;
	rc_destroy(base);
}

int fake_cq_hot(void)
{
	return fake_dev && qsm_container_of(fake_dev->cqs.next, struct rc_cq, node)->hot;
}

static int fake_rdmacm_to(const struct qsm_class *cls, int state, struct qsm_ctx **ctx,
			  struct qsm_conn **q, struct rc_fabric **f)
{
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct qsm_conn_opts o = { .cls = cls, .dst = (struct sockaddr *)&dst };
	struct qsm_fabric *fab;

	if (qsm_rdmacm_fabric_new(&fab) < 0) {
		fprintf(stderr, "fake rdmacm: no fabric\n");
		return -1;
	}
	*f = to_fab(fab);
	fake_dev = fake_dev_add(*f);
	rc_destroy = fab->ops->destroy;
	fake_rc_ops = *fab->ops;
	fake_rc_ops.destroy = fake_rc_destroy;
	fake_rc_ops.device_addr = fake_device_addr;
	fab->ops = &fake_rc_ops;
	if (qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = fab }, ctx) < 0) {
		fab->ops->destroy(fab);
		fprintf(stderr, "fake rdmacm: no ctx\n");
		return -1;
	}
	if (qsm_conn_new(*ctx, &o, q) < 0 || qsm_conn_connect(*q) < 0) {
		fprintf(stderr, "fake rdmacm: no queue\n");
		return -1;
	}
	while (qsm_ctx_dispatch(*ctx, 64) > 0) {
	}
	if (qsm_conn_state(*q) != state) {
		fprintf(stderr, "fake rdmacm: the queue is %s\n", qsm_conn_state_name(*q));
		return -1;
	}
	return 0;
}

int fake_rdmacm_live(const struct qsm_class *cls, struct qsm_ctx **ctx, struct qsm_conn **q,
		     struct rc_fabric **f)
{
	prov_init();
	return fake_rdmacm_to(cls, QSM_CM_LIVE, ctx, q, f);
}

int fake_rdmacm_connecting(const struct qsm_class *cls, enum ibv_transport_type transport,
			   struct qsm_ctx **ctx, struct qsm_conn **q, struct rc_fabric **f)
{
	prov_init();
	prov.dev.transport_type = transport;
	prov.connect_silent = true;
	return fake_rdmacm_to(cls, QSM_CM_CONNECTING, ctx, q, f);
}
