/* rdma-qsm fuzzing: the fake librdmacm below the rdmacm fabric (fake_rdma.h): devices, the device
 * list, CM event channels and ids. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz/fake_int.h"

struct fake_counts fake_n;
struct fake_handed fake_last;

static struct fdevice devs[FAKE_NDEV];
static int next_index = 1;
uint32_t next_qpn = 0x100;
static struct qsm_list ids = { &ids, &ids }, chans = { &chans, &chans };
struct qsm_list contexts = { &contexts, &contexts }, cqs = { &cqs, &cqs }, qps = { &qps, &qps };
struct qsm_list compchs = { &compchs, &compchs };
static struct fchan *cm_chan;
static unsigned fail_n[FAKE_CALLS];
static int fail_errno[FAKE_CALLS];

bool failing(enum fake_call c)
{
	if (!fail_n[c])
		return false;
	fail_n[c]--;
	errno = fail_errno[c];
	return true;
}

void fake_fail_next(enum fake_call c, unsigned n, int e)
{
	fail_n[c] = n;
	fail_errno[c] = e;
}

/* ---- devices and their contexts ---- */

static struct fctx *ctx_new(struct fdevice *d)
{
	struct fctx *c = zalloc(sizeof(*c));

	c->dev = d;
	c->ctx.device = &d->ibdev;
	c->ctx.ops.poll_cq = fake_poll_cq;
	c->ctx.ops.req_notify_cq = fake_req_notify;
	c->ctx.ops.post_send = fake_post_send;
	c->ctx.ops.post_recv = fake_post_recv;
	c->ctx.cmd_fd = -1;
	c->ctx.async_fd = efd_new();
	qsm_list_init(&c->async);
	qsm_list_add_tail(&contexts, &c->node);
	return c;
}

static void ctx_free(struct fctx *c)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &c->async) {
		qsm_list_del(pos);
		free(qsm_container_of(pos, struct fasync, node));
	}
	close(c->ctx.async_fd);
	qsm_list_del(&c->node);
	free(c);
}

void fake_device_add(int d)
{
	struct fdevice *v = &devs[d];

	if (v->present)
		return;
	v->present = true;
	v->index = next_index++;
	v->cur = ctx_new(v);
}

bool fake_device_present(int d)
{
	return devs[d].present;
}

static struct fdevice *dev_of_addr(const struct sockaddr *sa)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)sa;

	if (!sa || sa->sa_family != AF_INET)
		return NULL;
	for (int d = 0; d < FAKE_NDEV; d++)
		if (devs[d].present && devs[d].addr.sin_addr.s_addr == sin->sin_addr.s_addr)
			return &devs[d];
	return NULL;
}

void fake_each_context(void (*fn)(struct ibv_context *c))
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &contexts)
		fn(&qsm_container_of(pos, struct fctx, node)->ctx);
}

/* ---- the reset and the end ---- */

void fake_reset(void)
{
	memset(&fake_n, 0, sizeof(fake_n));
	memset(fail_n, 0, sizeof(fail_n));
	next_qpn = 0x100;
	for (int d = 0; d < FAKE_NDEV; d++) {
		struct fdevice *v = &devs[d];

		memset(v, 0, sizeof(*v));
		v->ibdev.transport_type = IBV_TRANSPORT_IB;
		v->ibdev.node_type = IBV_NODE_CA;
		snprintf(v->ibdev.name, sizeof(v->ibdev.name), "fake%d", d);
		v->guid = 0x1000 + (uint64_t)d;
		v->addr.sin_family = AF_INET;
		v->addr.sin_addr.s_addr = htonl(0xc0000201u + (uint32_t)d);   /* 192.0.2.1, .2 */
		fake_device_add(d);
	}
}

void fake_set_cm_channel(struct rdma_event_channel *ch)
{
	struct qsm_list *pos, *tmp;

	cm_chan = qsm_container_of(ch, struct fchan, ch);
	/* the other one is the pins': made once, for the process */
	qsm_list_each(pos, tmp, &chans) {
		struct fchan *c = qsm_container_of(pos, struct fchan, node);

		if (c != cm_chan && !c->pins) {
			c->pins = true;
			fake_n.channels--;
		}
	}
}

static void event_free(struct fevent *e);

bool fake_end(void)
{
	struct qsm_list *pos, *tmp;
	bool clean = !fake_n.ids && !fake_n.qps && !fake_n.cqs && !fake_n.pds && !fake_n.comp_channels &&
		     !fake_n.channels && !fake_n.mrs;

	qsm_list_each(pos, tmp, &chans) {
		struct fchan *c = qsm_container_of(pos, struct fchan, node);

		while (!qsm_list_empty(&c->events))
			event_free(qsm_container_of(c->events.next, struct fevent, node));
		fd_quiet(c->ch.fd);
	}
	/* the pins' ids: the fabric never destroys them (pins.c); gone with the input */
	qsm_list_each(pos, tmp, &ids) {
		struct fid *i = qsm_container_of(pos, struct fid, node);

		qsm_list_del(&i->node);
		free(i);
	}
	qsm_list_each(pos, tmp, &contexts)
		ctx_free(qsm_container_of(pos, struct fctx, node));
	for (int d = 0; d < FAKE_NDEV; d++)
		devs[d].cur = NULL;
	cm_chan = NULL;
	return clean;
}

/* ---- the device list ---- */

struct ibv_device **__wrap_ibv_get_device_list(int *n);
void __wrap_ibv_free_device_list(struct ibv_device **list);
int __wrap_ibv_get_device_index(struct ibv_device *d);
__be64 __wrap_ibv_get_device_guid(struct ibv_device *d);
const char *__wrap_ibv_get_device_name(struct ibv_device *d);
int __wrap_ibv_close_device(struct ibv_context *c);
int __wrap_ibv_query_device(struct ibv_context *c, struct ibv_device_attr *attr);
int __wrap_getifaddrs(struct ifaddrs **ret);
void __wrap_freeifaddrs(struct ifaddrs *ifa);

struct ibv_device **__wrap_ibv_get_device_list(int *n)
{
	struct ibv_device **list = zalloc((FAKE_NDEV + 1) * sizeof(*list));

	*n = 0;
	for (int d = 0; d < FAKE_NDEV; d++)
		if (devs[d].present)
			list[(*n)++] = &devs[d].ibdev;
	return list;
}

void __wrap_ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

static struct fdevice *fdev(struct ibv_device *d)
{
	return qsm_container_of(d, struct fdevice, ibdev);
}

int __wrap_ibv_get_device_index(struct ibv_device *d)
{
	return fdev(d)->index;
}

__be64 __wrap_ibv_get_device_guid(struct ibv_device *d)
{
	return htobe64(fdev(d)->guid);
}

const char *__wrap_ibv_get_device_name(struct ibv_device *d)
{
	return d->name;
}

/* A context the pins closed: it stays in contexts (an event may still name it) until the end. */
int __wrap_ibv_close_device(struct ibv_context *c)
{
	(void)c;
	return 0;
}

int __wrap_ibv_query_device(struct ibv_context *c, struct ibv_device_attr *attr)
{
	(void)c;
	if (failing(FAKE_QUERY_DEVICE))
		return errno;
	memset(attr, 0, sizeof(*attr));
	attr->max_cqe = 4096;
	attr->max_cq = 4;
	attr->max_qp_rd_atom = 16;
	attr->max_qp_init_rd_atom = 16;
	return 0;
}

/* The host's interfaces: one per device, with its address. */
int __wrap_getifaddrs(struct ifaddrs **ret)
{
	struct ifaddrs *head = NULL;

	for (int d = FAKE_NDEV - 1; d >= 0; d--) {
		struct { struct ifaddrs ifa; struct sockaddr_in sin; char name[8]; } *e = zalloc(sizeof(*e));

		e->sin = devs[d].addr;
		snprintf(e->name, sizeof(e->name), "eth%d", d);
		e->ifa.ifa_name = e->name;
		e->ifa.ifa_flags = IFF_UP;
		e->ifa.ifa_addr = (struct sockaddr *)&e->sin;
		e->ifa.ifa_next = head;
		head = &e->ifa;
	}
	*ret = head;
	return 0;
}

/* No netlink here: the fabric runs without its device monitor, on its 1 s tick, which the
 * fuzzer drives (its tfd made an eventfd: rdmacm_events.c).  Nothing else of the library's
 * opens a socket. */
int __wrap_socket(int domain, int type, int protocol);
int __real_socket(int domain, int type, int protocol);

int __wrap_socket(int domain, int type, int protocol)
{
	if (domain == AF_NETLINK) {
		errno = EPERM;
		return -1;
	}
	return __real_socket(domain, type, protocol);
}

void __wrap_freeifaddrs(struct ifaddrs *ifa)
{
	while (ifa) {
		struct ifaddrs *next = ifa->ifa_next;

		free(ifa);
		ifa = next;
	}
}

/* ---- CM event channels and ids ---- */

struct rdma_event_channel *__wrap_rdma_create_event_channel(void);
void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *ch);
int __wrap_rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ret);
int __wrap_rdma_ack_cm_event(struct rdma_cm_event *ev);
int __wrap_rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **ret, void *ctx,
			  enum rdma_port_space ps);
int __wrap_rdma_destroy_id(struct rdma_cm_id *cm);
int __wrap_rdma_bind_addr(struct rdma_cm_id *cm, struct sockaddr *addr);
int __wrap_rdma_listen(struct rdma_cm_id *cm, int backlog);
int __wrap_rdma_resolve_addr(struct rdma_cm_id *cm, struct sockaddr *src, struct sockaddr *dst,
			     int timeout_ms);
int __wrap_rdma_resolve_route(struct rdma_cm_id *cm, int timeout_ms);
int __wrap_rdma_connect(struct rdma_cm_id *cm, struct rdma_conn_param *p);
int __wrap_rdma_accept(struct rdma_cm_id *cm, struct rdma_conn_param *p);
int __wrap_rdma_reject(struct rdma_cm_id *cm, const void *pdata, uint8_t len);
int __wrap_rdma_disconnect(struct rdma_cm_id *cm);

struct rdma_event_channel *__wrap_rdma_create_event_channel(void)
{
	struct fchan *c = zalloc(sizeof(*c));

	c->ch.fd = efd_new();
	qsm_list_init(&c->events);
	qsm_list_add_tail(&chans, &c->node);
	fake_n.channels++;
	return &c->ch;
}

void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
	struct fchan *c = qsm_container_of(ch, struct fchan, ch);

	while (!qsm_list_empty(&c->events))
		event_free(qsm_container_of(c->events.next, struct fevent, node));
	close(ch->fd);
	qsm_list_del(&c->node);
	if (c == cm_chan)
		cm_chan = NULL;
	if (!c->pins)
		fake_n.channels--;
	free(c);
}

static struct fid *fid_of(struct rdma_cm_id *cm)
{
	return qsm_container_of(cm, struct fid, cm);
}

static struct fid *id_new(struct rdma_event_channel *ch, void *ctx)
{
	struct fid *i = zalloc(sizeof(*i));

	i->cm.channel = ch;
	i->cm.context = ctx;
	i->cm.ps = RDMA_PS_TCP;
	i->cm.qp_type = IBV_QPT_RC;
	i->pin = qsm_container_of(ch, struct fchan, ch)->pins;
	qsm_list_add_tail(&ids, &i->node);
	if (i->pin)
		fake_n.pin_ids++;
	else
		fake_n.ids++;
	return i;
}

static void id_free(struct fid *i)
{
	qsm_list_del(&i->node);
	if (i->pin)
		fake_n.pin_ids--;
	else
		fake_n.ids--;
	free(i);
}

/* The events the channels still hold for an id (and, for a listener, its requests): gone
 * with it, as the kernel drops them.  Freeing a request frees its new id and that id's events
 * too, so the walk starts again after each. */
static void drop_events_of(struct fid *i)
{
	struct qsm_list *pos, *tmp, *p2, *t2;

again:
	qsm_list_each(pos, tmp, &chans) {
		struct fchan *c = qsm_container_of(pos, struct fchan, node);

		qsm_list_each(p2, t2, &c->events) {
			struct fevent *e = qsm_container_of(p2, struct fevent, node);

			if (e->id == i || e->listen == i) {
				event_free(e);
				goto again;
			}
		}
	}
}

static void event_free(struct fevent *e)
{
	struct fid *n = e->listen ? e->id : NULL;

	qsm_list_del(&e->node);
	free(e);
	/* an event that came with a new id (a request's) takes it along when it is not taken */
	if (n) {
		drop_events_of(n);
		id_free(n);
	}
}

int __wrap_rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **ret, void *ctx,
			  enum rdma_port_space ps)
{
	(void)ps;
	if (failing(FAKE_CREATE_ID))
		return -1;
	*ret = &id_new(ch, ctx)->cm;
	return 0;
}

int __wrap_rdma_destroy_id(struct rdma_cm_id *cm)
{
	struct fid *i = fid_of(cm);

	drop_events_of(i);
	id_free(i);
	return 0;
}

/* librdmacm binds the id to the device of the address (none for the wildcard). */
int __wrap_rdma_bind_addr(struct rdma_cm_id *cm, struct sockaddr *addr)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)addr;
	struct fdevice *d;

	if (failing(FAKE_BIND))
		return -1;
	if (addr->sa_family != AF_INET) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	d = dev_of_addr(addr);
	if (!d && sin->sin_addr.s_addr != htonl(INADDR_ANY)) {
		errno = EADDRNOTAVAIL;
		return -1;
	}
	memcpy(&cm->route.addr.src_addr, addr, sizeof(*sin));
	cm->verbs = d ? &d->cur->ctx : NULL;
	return 0;
}

int __wrap_rdma_listen(struct rdma_cm_id *cm, int backlog)
{
	(void)backlog;
	if (failing(FAKE_LISTEN))
		return -1;
	fid_of(cm)->listening = true;
	return 0;
}

int __wrap_rdma_resolve_addr(struct rdma_cm_id *cm, struct sockaddr *src, struct sockaddr *dst,
			     int timeout_ms)
{
	(void)src;
	(void)timeout_ms;
	if (failing(FAKE_RESOLVE_ADDR))
		return -1;
	if (dst->sa_family == AF_INET)
		memcpy(&cm->route.addr.dst_addr, dst, sizeof(struct sockaddr_in));
	return 0;
}

#define SIMPLE_CALL(name, call, args, use) \
	int __wrap_##name args \
	{ \
		use; \
		return failing(call) ? -1 : 0; \
	}
SIMPLE_CALL(rdma_resolve_route, FAKE_RESOLVE_ROUTE, (struct rdma_cm_id *cm, int timeout_ms), (void)cm; (void)timeout_ms)
SIMPLE_CALL(rdma_connect, FAKE_CONNECT, (struct rdma_cm_id *cm, struct rdma_conn_param *p), (void)cm; (void)p)
SIMPLE_CALL(rdma_accept, FAKE_ACCEPT, (struct rdma_cm_id *cm, struct rdma_conn_param *p), (void)cm; (void)p)
SIMPLE_CALL(rdma_reject, FAKE_REJECT, (struct rdma_cm_id *cm, const void *pdata, uint8_t len),
	    (void)cm; (void)pdata; (void)len)

/* librdmacm moves an IB QP to ERR. */
int __wrap_rdma_disconnect(struct rdma_cm_id *cm)
{
	if (failing(FAKE_DISCONNECT))
		return -1;
	if (cm->qp)
		fake_qp_to_err(qsm_container_of(cm->qp, struct fqp, qp));
	return 0;
}

int __wrap_rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ret)
{
	struct fchan *c = qsm_container_of(ch, struct fchan, ch);
	struct fevent *e;

	if (qsm_list_empty(&c->events)) {
		fd_quiet(ch->fd);
		errno = EAGAIN;
		return -1;
	}
	e = qsm_container_of(c->events.next, struct fevent, node);
	qsm_list_del(&e->node);
	qsm_list_init(&e->node);
	if (c == cm_chan) {
		fake_n.events_handed++;
		fake_last.raw = (int)e->ev.event;
		fake_last.status = e->ev.status;
		fake_last.owner_ctx = e->ev.id->context;
		fake_last.listen_ctx = e->ev.listen_id ? e->ev.listen_id->context : NULL;
		fake_last.pdata_len = e->ev.param.conn.private_data_len;
		memcpy(fake_last.pdata, e->pdata, sizeof(e->pdata));
	}
	*ret = &e->ev;
	return 0;
}

int __wrap_rdma_ack_cm_event(struct rdma_cm_event *ev)
{
	free(qsm_container_of(ev, struct fevent, ev));
	return 0;
}

void fake_cm_event(struct rdma_cm_id *cm, int raw, int status, const uint8_t *pdata, unsigned len,
		   int dev, bool new_id)
{
	struct fid *i = fid_of(cm);
	struct fchan *c = qsm_container_of(cm->channel, struct fchan, ch);
	struct fevent *e = zalloc(sizeof(*e));

	e->id = i;
	e->ev.id = cm;
	e->ev.event = (enum rdma_cm_event_type)raw;
	e->ev.status = status;
	if (len > sizeof(e->pdata))
		len = sizeof(e->pdata);
	if (len)
		memcpy(e->pdata, pdata, len);
	e->ev.param.conn.private_data = len ? e->pdata : NULL;
	e->ev.param.conn.private_data_len = (uint8_t)len;
	if (raw == RDMA_CM_EVENT_CONNECT_REQUEST || new_id) {
		/* the kernel's new id for the request, on a device (the listener's, if bound) */
		struct fid *n = id_new(cm->channel, NULL);
		struct fdevice *d = cm->verbs ? qsm_container_of(cm->verbs, struct fctx, ctx)->dev : &devs[dev];

		if (d->cur) {
			n->cm.verbs = &d->cur->ctx;
			memcpy(&n->cm.route.addr.src_addr, &d->addr, sizeof(d->addr));
		}
		e->listen = i;
		e->id = n;
		e->ev.id = &n->cm;
		e->ev.listen_id = raw == RDMA_CM_EVENT_CONNECT_REQUEST ? cm : NULL;
		e->ev.param.conn.initiator_depth = (uint8_t)status;
		e->ev.param.conn.responder_resources = (uint8_t)(status >> 4);
	} else if (raw == RDMA_CM_EVENT_ADDR_RESOLVED && !cm->verbs) {
		/* librdmacm learns the id's device with the event: the destination's, or any */
		struct fdevice *d = dev_of_addr((struct sockaddr *)&cm->route.addr.dst_addr);

		if (!d && devs[dev].present)
			d = &devs[dev];
		if (d) {
			cm->verbs = &d->cur->ctx;
			memcpy(&cm->route.addr.src_addr, &d->addr, sizeof(d->addr));
		}
	}
	qsm_list_add_tail(&c->events, &e->node);
	fd_signal(c->ch.fd);
}

unsigned fake_id_count(void)
{
	unsigned n = 0;
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &ids)
		n++;
	return n;
}

struct rdma_cm_id *fake_id(unsigned k)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &ids)
		if (!k--)
			return &qsm_container_of(pos, struct fid, node)->cm;
	return NULL;
}

bool fake_id_is_pin(const struct rdma_cm_id *cm)
{
	return qsm_container_of(cm, struct fid, cm)->pin;
}

bool fake_id_listening(const struct rdma_cm_id *cm)
{
	return qsm_container_of(cm, struct fid, cm)->listening;
}

void fake_device_remove(int d)
{
	struct fdevice *v = &devs[d];
	struct qsm_list *pos, *tmp;

	if (!v->present)
		return;
	v->present = false;
	qsm_list_each(pos, tmp, &ids) {
		struct fid *i = qsm_container_of(pos, struct fid, node);

		if (i->cm.verbs && qsm_container_of(i->cm.verbs, struct fctx, ctx)->dev == v && i->cm.context)
			fake_cm_event(&i->cm, RDMA_CM_EVENT_DEVICE_REMOVAL, 0, NULL, 0, d, false);
		else if (i->pin && i->cm.verbs && qsm_container_of(i->cm.verbs, struct fctx, ctx)->dev == v)
			fake_cm_event(&i->cm, RDMA_CM_EVENT_DEVICE_REMOVAL, 0, NULL, 0, d, false);
	}
	v->cur = NULL;   /* its context lives on until the end: ids still name it */
}
