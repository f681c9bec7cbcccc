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

static int fake_req_notify(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

/* A provider's device, context (its ops, no async fd) and CQ. */
static void provider_init(struct ibv_device *dev, struct ibv_context *ctx, struct ibv_cq *cq, int cqe,
			  const struct ibv_context_ops *ops)
{
	dev->transport_type = IBV_TRANSPORT_IB;
	ctx->device = dev;
	ctx->ops = *ops;
	ctx->async_fd = -1;
	cq->context = ctx;
	cq->cqe = cqe;
}

void prov_init(void)
{
	memset(&prov, 0, sizeof(prov));
	provider_init(&prov.dev, &prov.ctx, &prov.cq, 1 << 20, &(struct ibv_context_ops){
		.poll_cq = fake_poll_cq, .post_recv = fake_post_recv,
		.req_notify_cq = fake_req_notify, .post_send = fake_post_send });
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

/* ---- many ids (bench/dispatch): the CM channel's queue, an id and a QP per connection ---- */

struct fake_many many;

/* A channel: its queue of events, one handed out at a time (acked before the next). */
struct fake_chan {
	struct rdma_event_channel ch;        /* first: what librdmacm hands out */
	struct fake_cm_ev {
		struct rdma_cm_id *cm;
		int event, status;
	} *q;
	uint32_t head, len, cap;             /* cap a power of two */
	struct rdma_cm_event out;
	bool out_held;
};

/* An id of many: librdmacm's, and whether its connection's DISCONNECTED came. */
struct fake_id {
	struct rdma_cm_id cm;                /* first */
	struct fake_id *next_free;
	bool disconnected;
};

struct fake_qp {
	struct ibv_qp qp;                    /* first */
	struct fake_qp *next_free;
	bool err;
};

static struct fake_chan *chan_of(struct rdma_event_channel *ch)
{
	return (struct fake_chan *)ch;
}

/* The event queued on the id's channel; the channel's fd readable from the first. */
static void many_push(struct rdma_cm_id *cm, enum rdma_cm_event_type event, int status)
{
	struct fake_chan *c = chan_of(cm->channel);

	if (many.silent)
		return;
	if (c->len == c->cap)
		abort();   /* sized for two an id (many.chan_cap): an id has one, DISCONNECTED two */
	c->q[(c->head + c->len++) & (c->cap - 1)] = (struct fake_cm_ev){ cm, event, status };
	many.queued++;
	if (c->len == 1 && eventfd_write(c->ch.fd, 1) < 0)
		abort();
}

static int many_get_event(struct fake_chan *c, struct rdma_cm_event **event)
{
	struct fake_cm_ev e;
	eventfd_t v;

	if (!c->len) {
		errno = EAGAIN;
		return -1;
	}
	if (c->out_held)
		abort();   /* the fake hands out one event at a time: ack it first */
	e = c->q[c->head];
	c->head = (c->head + 1) & (c->cap - 1);
	many.queued--;
	if (!--c->len)
		(void)eventfd_read(c->ch.fd, &v);
	c->out.id = e.cm;
	c->out.event = (enum rdma_cm_event_type)e.event;
	c->out.status = e.status;
	c->out.param.conn.private_data = NULL;
	c->out.param.conn.private_data_len = 0;
	c->out.param.conn.responder_resources = 1;
	c->out.param.conn.initiator_depth = 1;   /* the peer's responder resources, from our side */
	c->out_held = true;
	many.events++;
	/* the peer hangs up as soon as the connection is up */
	if (e.event == RDMA_CM_EVENT_ESTABLISHED) {
		((struct fake_id *)e.cm)->disconnected = true;
		many_push(e.cm, RDMA_CM_EVENT_DISCONNECTED, 0);
	}
	*event = &c->out;
	return 0;
}

static int many_poll_cq(struct ibv_cq *cq, int max, struct ibv_wc *wc)
{
	int n = 0;

	(void)cq;
	for (; n < max && many.done_len; n++) {
		struct fake_done *d = &many.done[many.done_head];

		many.done_head = (many.done_head + 1) & (many.done_cap - 1);
		many.done_len--;
		wc[n] = (struct ibv_wc){ .wr_id = d->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
					 .opcode = IBV_WC_SEND, .qp_num = d->qp_num };
	}
	return n;
}

static int many_req_notify(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	many.armed = true;
	return 0;
}

/* A send on a QP in ERR (the drain's marker) completes at once, flushed; the CQ's channel
 * fires if it was armed. */
static int many_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;

	for (; wr; wr = wr->next) {
		if (!q->err) {
			*bad = wr;   /* nothing else is posted in this bench */
			return EINVAL;
		}
		if (many.done_len == many.done_cap) {
			*bad = wr;
			return ENOMEM;
		}
		many.done[(many.done_head + many.done_len++) & (many.done_cap - 1)] =
			(struct fake_done){ wr->wr_id, qp->qp_num };
		if (many.armed) {
			many.armed = false;
			many.cq_events++;
			if (eventfd_write(many.cc.fd, 1) < 0)
				abort();
		}
	}
	return 0;
}

static int many_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	(void)qp;
	*bad = wr;
	return EINVAL;
}

void fake_many_init(size_t nids)
{
	size_t cap = 64;

	while (cap < nids + 1)
		cap *= 2;
	memset(&many, 0, sizeof(many));
	many.on = true;
	provider_init(&many.dev, &many.ctx, &many.cq, 1 << 30, &(struct ibv_context_ops){
		.poll_cq = many_poll_cq, .req_notify_cq = many_req_notify,
		.post_send = many_post_send, .post_recv = many_post_recv });
	many.chan_cap = (uint32_t)(2 * cap);
	many.pd.context = &many.ctx;
	many.cc.context = &many.ctx;
	many.cc.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	many.armed = true;   /* as a CQ is armed when it is made */
	many.done_cap = (uint32_t)cap;
	many.done = malloc(cap * sizeof(*many.done));
	many.held = malloc(cap * sizeof(*many.held));
	/* every id and QP the run needs, made now: none allocated while it is measured */
	for (size_t i = 0; i < nids + 2; i++) {
		struct fake_id *id = calloc(1, sizeof(*id));
		struct fake_qp *q = calloc(1, sizeof(*q));

		if (!id || !q)
			abort();
		id->next_free = many.free_ids;
		many.free_ids = id;
		q->next_free = many.free_qps;
		many.free_qps = q;
	}
	if (many.cc.fd < 0 || !many.done || !many.held)
		abort();
}

void fake_many_fini(void)
{
	while (many.free_ids) {
		struct fake_id *id = many.free_ids;

		many.free_ids = id->next_free;
		free(id);
	}
	while (many.free_qps) {
		struct fake_qp *q = many.free_qps;

		many.free_qps = q->next_free;
		free(q);
	}
	close(many.cc.fd);
	free(many.done);
	free(many.held);
	memset(&many, 0, sizeof(many));
}

void fake_many_answer(void)
{
	bool silent = many.silent;

	many.silent = false;
	for (size_t i = 0; i < many.nheld; i++)
		many_push(many.held[i], RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	many.nheld = 0;
	many.silent = silent;
}

void fake_many_device(struct ibv_context **verbs, struct ibv_pd **pd, struct ibv_cq **cq,
		      struct ibv_comp_channel **cc)
{
	*verbs = &many.ctx;
	*pd = &many.pd;
	*cq = &many.cq;
	*cc = &many.cc;
}

static int many_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **ret, void *ctx,
			  enum rdma_port_space ps)
{
	struct fake_id *id = many.free_ids;

	if (!id) {
		errno = ENOMEM;
		return -1;
	}
	/* what librdmacm sets of a new id (the pool's are zeroed once, and given back without a
	 * route, an address or a QP) */
	many.free_ids = id->next_free;
	id->cm.channel = ch;
	id->cm.context = ctx;
	id->cm.ps = ps;
	id->cm.verbs = NULL;
	id->disconnected = false;
	*ret = &id->cm;
	return 0;
}

static void many_destroy_id(struct rdma_cm_id *cm)
{
	struct fake_id *id = (struct fake_id *)cm;

	id->next_free = many.free_ids;
	many.free_ids = id;
}

static int many_resolve_addr(struct rdma_cm_id *cm)
{
	cm->verbs = &many.ctx;
	if (many.attach)
		many.attach(cm);
	if (many.silent && many.hold)
		many.held[many.nheld++] = cm;
	many_push(cm, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	return 0;
}

static int many_create_qp(struct rdma_cm_id *cm, struct ibv_qp_init_attr *a)
{
	struct fake_qp *q = many.free_qps;

	if (!q || a->send_cq != &many.cq || a->recv_cq != &many.cq) {
		errno = q ? EINVAL : ENOMEM;
		return -1;
	}
	many.free_qps = q->next_free;
	q->qp.context = &many.ctx;
	q->qp.qp_context = a->qp_context;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.qp_num = ++many.qpn;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_INIT;
	q->err = false;
	many.qp_cap = a->cap;
	cm->qp = &q->qp;
	return 0;
}

static void many_destroy_qp(struct rdma_cm_id *cm)
{
	struct fake_qp *q = (struct fake_qp *)cm->qp;

	q->next_free = many.free_qps;
	many.free_qps = q;
	cm->qp = NULL;
}

/* The peer's DISCONNECTED if it did not come yet, then TIMEWAIT_EXIT, as the kernel's CM
 * reports a connection's end. */
static int many_disconnect(struct rdma_cm_id *cm)
{
	struct fake_id *id = (struct fake_id *)cm;

	if (cm->qp)
		((struct fake_qp *)cm->qp)->err = true;   /* librdmacm moves it to ERR */
	if (!id->disconnected) {
		id->disconnected = true;
		many_push(cm, RDMA_CM_EVENT_DISCONNECTED, 0);
	}
	many_push(cm, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
	return 0;
}

/* ibv_modify_qp is libibverbs' own (no context op): wrapped.  ERR: the rest flushes (prov's),
 * a send posted after it completes flushed (many ids'). */
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	bool err = (mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR;

	if (qp->context == &many.ctx)
		((struct fake_qp *)qp)->err |= err;
	else
		qsm_container_of(qp, struct fake_prov, qp)->err |= err;
	return 0;
}

/* The completion channel's events (libibverbs reads them from the channel's fd): many ids'
 * CQ's, one per arm that a completion fired; prov's channel has none. */
int __wrap_ibv_get_cq_event(struct ibv_comp_channel *cc, struct ibv_cq **cq, void **cq_ctx);
void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n);

int __wrap_ibv_get_cq_event(struct ibv_comp_channel *cc, struct ibv_cq **cq, void **cq_ctx)
{
	eventfd_t v;

	if (cc != &many.cc || !many.cq_events) {
		errno = EAGAIN;
		return -1;
	}
	if (!--many.cq_events)
		(void)eventfd_read(many.cc.fd, &v);
	*cq = &many.cq;
	*cq_ctx = many.cq.cq_context;
	return 0;
}

void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	(void)n;
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
	struct fake_chan *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	if (many.on) {
		c->cap = many.chan_cap;
		c->q = malloc(c->cap * sizeof(*c->q));
		if (!c->q) {
			free(c);
			return NULL;
		}
	}
	/* never readable but for many ids' events */
	c->ch.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return &c->ch;
}

void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
	close(ch->fd);
	free(chan_of(ch)->q);
	free(chan_of(ch));
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
	struct rdma_cm_id *cm;

	if (many.on)
		return many_create_id(ch, ret, ctx, ps);
	cm = calloc(1, sizeof(*cm));
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
	if (many.on) {
		many_destroy_id(cm);
		return 0;
	}
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

	if (many.on)
		return many_get_event(chan_of(ch), event);
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
	if (many.on)
		chan_of(event->id->channel)->out_held = false;
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
	struct qsm_fid *id;

	(void)src;
	(void)dst;
	(void)timeout_ms;
	if (many.on)
		return many_resolve_addr(cm);
	id = fid_of(cm);
	cm->verbs = &prov.ctx;
	id->dev = fake_dev;
	fake_dev->nids++;
	pending_push(id->fab, QSM_EV_ADDR_RESOLVED, 0, id, NULL, false);
	return 0;
}

int __wrap_rdma_resolve_route(struct rdma_cm_id *cm, int timeout_ms)
{
	(void)timeout_ms;
	if (many.on) {
		many_push(cm, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
		return 0;
	}
	pending_push(fid_of(cm)->fab, QSM_EV_ROUTE_RESOLVED, 0, fid_of(cm), NULL, false);
	return 0;
}

int __wrap_rdma_connect(struct rdma_cm_id *cm, struct rdma_conn_param *p)
{
	(void)p;
	if (many.on) {
		many_push(cm, RDMA_CM_EVENT_ESTABLISHED, 0);
		return 0;
	}
	if (prov.connect_silent)
		return 0;
	fid_of(cm)->qp_rts = true;   /* as the fabric marks it when ESTABLISHED comes */
	pending_push(fid_of(cm)->fab, QSM_EV_ESTABLISHED, 0, fid_of(cm), NULL, false);
	return 0;
}

int __wrap_rdma_disconnect(struct rdma_cm_id *cm)
{
	if (many.on)
		return many_disconnect(cm);
	return 0;
}

int __wrap_rdma_create_qp(struct rdma_cm_id *cm, struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	(void)pd;
	if (many.on)
		return many_create_qp(cm, a);
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
	if (many.on) {
		many_destroy_qp(cm);
		return;
	}
	cm->qp = NULL;
}

/* The fake provider's device, as the fabric would hold it once a QP was made on it: PD,
 * channel, one CQ in the pool; held (gets) by the benchmark so it outlives the queue. */
static struct qsm_fdev *fake_dev_add(struct rc_fabric *f, struct ibv_context *verbs, struct ibv_pd *pd,
				     struct ibv_cq *cq, struct ibv_comp_channel *cc)
{
	struct qsm_fdev *d = calloc(1, sizeof(*d));
	struct rc_cq *c = calloc(1, sizeof(*c));

	if (!d || !c)
		abort();
	d->fab = f;
	snprintf(d->name, sizeof(d->name), "fake0");
	d->verbs = verbs;
	d->present = true;
	d->gets = 1;
	d->pd = pd;
	d->cc = cc;
	d->max_cqe = cq->cqe;
	d->max_cq = 1;
	d->max_sge_rd = QSM_FABRIC_MAX_SGE;
	qsm_list_init(&d->cqs);
	qsm_list_init(&d->vnode);
	for (int b = 0; b < QP_BUCKETS; b++)
		qsm_list_init(&d->qps[b]);
	c->cq = cq;
	c->cap = cq->cqe;
	cq->cq_context = c;
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

/* The rdmacm fabric with the fake device on the provider's objects; 0 or -1 (said on stderr). */
static int fake_fabric_new(struct qsm_fabric **fab, struct ibv_context *verbs, struct ibv_pd *pd,
			   struct ibv_cq *cq, struct ibv_comp_channel *cc)
{
	if (qsm_rdmacm_fabric_new(fab) < 0) {
		fprintf(stderr, "fake rdmacm: no fabric\n");
		return -1;
	}
	fake_dev = fake_dev_add(to_fab(*fab), verbs, pd, cq, cc);
	rc_destroy = (*fab)->ops->destroy;
	fake_rc_ops = *(*fab)->ops;
	fake_rc_ops.destroy = fake_rc_destroy;
	fake_rc_ops.device_addr = fake_device_addr;
	(*fab)->ops = &fake_rc_ops;
	return 0;
}

/* The id's device, as the fabric's qsm_rc_fid_attach() finds it from the id's context. */
static void many_attach(struct rdma_cm_id *cm)
{
	struct qsm_fid *id = fid_of(cm);

	id->dev = fake_dev;
	fake_dev->nids++;
}

int fake_many_fabric(struct qsm_fabric **fab)
{
	if (fake_fabric_new(fab, &many.ctx, &many.pd, &many.cq, &many.cc) < 0)
		return -1;
	/* as qsm_rc_dev_get_resources() puts a device's channel in the epoll */
	if (epoll_add(to_fab(*fab), many.cc.fd) < 0)
		abort();
	many.attach = many_attach;
	return 0;
}

static int fake_rdmacm_to(const struct qsm_class *cls, int state, struct qsm_ctx **ctx,
			  struct qsm_conn **q, struct rc_fabric **f)
{
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct qsm_conn_opts o = { .cls = cls, .dst = (struct sockaddr *)&dst };
	struct qsm_fabric *fab;

	if (fake_fabric_new(&fab, &prov.ctx, &prov.pd, &prov.cq, &prov.cc) < 0)
		return -1;
	*f = to_fab(fab);
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

int fake_rdmacm_fabric(struct qsm_fabric **fab)
{
	prov_init();
	return fake_fabric_new(fab, &prov.ctx, &prov.pd, &prov.cq, &prov.cc);
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
