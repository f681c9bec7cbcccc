/* rdma-qsm: the simulated fabric backend (src/fabric.h, public API qsm/sim.h): a deterministic,
 * in-process rdma_cm world with fault injection, for the library's tests and for ULP authors. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <qsm/sim.h>

#include "argcheck.h"
#include "fabric/fabric.h"
#include "addr.h"
#include "list.h"

#define DEV_NAME_MAX 64          /* IB_DEVICE_NAME_MAX, terminator included */
#define PORT_FIRST 32768         /* the default ip_local_port_range */
#define PORT_LAST 60999
#define MSG_MAX (1ull << 31)     /* max_msg_sz of every RC HCA */

/* Every object sits in exactly one ordered list (list.h), which is the order the sim walks it
 * in, so that what it does is deterministic. */

/* ---- objects ---- */

struct sim_device {
	struct qsm_list node;                    /* in qsm_sim.devices, order of first add */
	struct qsm_sim *sim;
	char name[DEV_NAME_MAX];
	struct sockaddr_storage addr;        /* port 0 */
	enum qsm_sim_device_state state;
	unsigned nids, nqps, refs, nmrs;     /* what keeps a removed device REMOVING */
	struct qsm_list mrs;                     /* its MRs, registration order */
};

/* A memory region: what the keys of a WR are checked against when the WR executes. */
struct sim_mr {
	struct qsm_list node;                    /* in sim_device.mrs */
	struct sim_device *dev;
	uint64_t addr;
	size_t len;
	int access;                          /* QSM_ACCESS_* */
	uint32_t lkey, rkey;
};

/* A posted receive, waiting on its QP for a SEND; its SGEs are checked when one lands. */
struct sim_recv {
	struct qsm_list node;                    /* in sim_id.recvs, post order */
	uint64_t wr_id;
	int num_sge;
	struct qsm_fabric_sge sge[QSM_FABRIC_MAX_SGE];
};

/* An id's connection state, reduced to what changes the answer of some call. */
enum id_state {
	ID_IDLE,
	ID_BOUND,            /* bind(), or the implicit bind of an address resolution that failed */
	ID_ADDR_RESOLVED,
	ID_ROUTE_RESOLVED,
	ID_LISTEN,
	ID_CONNECT,          /* active: REQ sent, no answer yet */
	ID_REQ_RCVD,         /* passive: CONNECT_REQUEST posted, neither accepted nor rejected */
	ID_ESTABLISHED,
	ID_DISCONNECTED,     /* was established, is not any more */
	ID_FAILED,           /* a connection was tried and never came up */
};

/*
 * The hardware QP of an id, as far as the sim models it: no QP, or one that takes receives
 * (INIT), sends too (RTS), or flushes everything (ERR).  The verbs states between (RTR, SQD,
 * SQE) last no time here; qsm_sim_qp_state() maps these to enum qsm_qp_state.
 */
enum sim_qp {
	SIM_QP_NONE,
	SIM_QP_INIT,
	SIM_QP_RTS,
	SIM_QP_ERR,
};

struct sim_fabric;

struct sim_id {
	struct qsm_list node;                    /* in sim_fabric.ids, creation order */
	struct sim_fabric *fab;
	void *owner;
	enum id_state state;
	struct sim_device *dev;              /* the device the id is on; never changes once set */
	bool has_src;                        /* src is meaningful */
	bool holds_port;                     /* src's port is taken in the world's port space */
	struct sockaddr_storage src, dst;
	struct sim_id *peer;                 /* the other end while CONNECT, REQ_RCVD or ESTABLISHED */
	enum sim_qp qp;
	/* The QP's data path.  Sends execute when posted, so only receives wait. */
	struct qsm_list recvs;
	unsigned nrecvs;
	struct qsm_fabric_qp_attr cap;       /* as asked for; 0 SGEs means 1, as rdmacm does */
	bool wc_error_sent;                  /* WC_ERROR is once per QP */
};

struct sim_event {
	struct qsm_list node;                    /* in its fabric's queue, or in qsm_sim.held */
	struct sim_fabric *fab;
	bool held;
	struct sim_id *id;
	struct sim_id *listener;             /* CONNECT_REQUEST: the listening id */
	struct sim_device *dev;
	int event;
	int status;
	struct qsm_fabric_wc wc;             /* QSM_EV_COMPLETION */
	size_t len;
	uint8_t pdata[QSM_SIM_REP_PDATA];    /* the largest CM private data */
};

struct sim_fabric {
	struct qsm_fabric base;
	struct qsm_list node;                    /* in qsm_sim.fabrics */
	struct qsm_sim *sim;
	int efd;                             /* readable while queue is not empty */
	struct qsm_list ids;
	struct qsm_list queue;
};

struct qsm_sim {
	struct qsm_list devices;
	struct qsm_list fabrics;
	struct qsm_list held;                    /* events held by QSM_SIM_FAULT_HOLD, in post order */
	unsigned nfabrics;
	bool free_pending;                   /* qsm_sim_free() came while fabrics were alive */
	unsigned faults[QSM_SIM_FAULT_COUNT];
	unsigned next_port;
	uint32_t next_key;                   /* MR keys: never reused, so a stale key never matches */
	struct qsm_sim_stats st;
};

static const struct qsm_fabric_ops sim_ops;

/* The fabric.h handles are opaque; the sim's objects stand behind them. */
static struct sim_id *to_id(struct qsm_fid *fid)
{
	return (struct sim_id *)(void *)fid;
}

static struct qsm_fid *fid_of(struct sim_id *id)
{
	return (struct qsm_fid *)(void *)id;
}

static struct sim_device *to_dev(struct qsm_fdev *fdev)
{
	return (struct sim_device *)(void *)fdev;
}

static struct qsm_fdev *fdev_of(struct sim_device *d)
{
	return (struct qsm_fdev *)(void *)d;
}

static struct sim_fabric *to_fabric(struct qsm_fabric *f)
{
	return qsm_container_of(f, struct sim_fabric, base);
}

/* Posting an event has no failure path: a call that posts has already taken effect. */
static void *zalloc_or_die(size_t n)
{
	void *p = calloc(1, n);

	if (!p) {
		fputs("qsm sim: out of memory posting an event\n", stderr);
		abort();
	}
	return p;
}

static bool fault_take(struct qsm_sim *sim, enum qsm_sim_fault f)
{
	if (!sim->faults[f])
		return false;
	sim->faults[f]--;
	return true;
}

/* ---- addresses (addr.h copies them in) ---- */

static const void *addr_ip(const struct sockaddr_storage *ss, size_t *len)
{
	if (ss->ss_family == AF_INET) {
		*len = sizeof(struct in_addr);
		return &((const struct sockaddr_in *)(const void *)ss)->sin_addr;
	}
	*len = sizeof(struct in6_addr);
	return &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr;
}

static bool addr_same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	size_t la, lb;
	const void *ia = addr_ip(a, &la), *ib = addr_ip(b, &lb);

	return a->ss_family == b->ss_family && !memcmp(ia, ib, la);
}

static bool addr_is_any(const struct sockaddr_storage *ss)
{
	static const uint8_t zero[sizeof(struct in6_addr)];
	size_t len;
	const void *ip = addr_ip(ss, &len);

	return !memcmp(ip, zero, len);
}

static uint16_t addr_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)(const void *)ss)->sin6_port);
}

static void addr_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)(void *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)(void *)ss)->sin6_port = htons(port);
}

/* The IP of `from` with the port of `to`: what a resolved or accepted id's source becomes. */
static void addr_set_ip(struct sockaddr_storage *to, const struct sockaddr_storage *from)
{
	uint16_t port = addr_port(to);

	*to = *from;
	addr_set_port(to, port);
}

static int addr_parse(const char *text, struct sockaddr_storage *ss)
{
	struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		return 0;
	}
	return -EINVAL;
}

/* ---- devices ---- */

static struct sim_device *device_by_name(struct qsm_sim *sim, const char *name)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &sim->devices) {
		struct sim_device *d = qsm_container_of(pos, struct sim_device, node);

		if (!strcmp(d->name, name))
			return d;
	}
	return NULL;
}

/* Only an UP device serves its address: a removed one no longer answers for it. */
static struct sim_device *device_serving(struct qsm_sim *sim, const struct sockaddr_storage *ip)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &sim->devices) {
		struct sim_device *d = qsm_container_of(pos, struct sim_device, node);

		if (d->state == QSM_SIM_DEVICE_UP && addr_same_ip(&d->addr, ip))
			return d;
	}
	return NULL;
}

/* The one place a removed device becomes GONE: when its last reference goes. */
static void device_settle(struct sim_device *d)
{
	if (d->state == QSM_SIM_DEVICE_REMOVING && !d->nids && !d->nqps && !d->refs && !d->nmrs)
		d->state = QSM_SIM_DEVICE_GONE;
}

static bool device_up(const struct sim_device *d)
{
	return d->state == QSM_SIM_DEVICE_UP;
}

/* ---- events ---- */

static void fabric_signal(struct sim_fabric *f)
{
	(void)eventfd_write(f->efd, 1);
}

static void fabric_quiet(struct sim_fabric *f)
{
	eventfd_t v;

	(void)eventfd_read(f->efd, &v);
}

static void fabric_push(struct sim_fabric *f, struct sim_event *e)
{
	bool was_empty = qsm_list_empty(&f->queue);

	e->held = false;
	qsm_list_add_tail(&f->queue, &e->node);
	if (was_empty)
		fabric_signal(f);
}

static void enqueue(struct qsm_sim *sim, struct sim_event *e)
{
	sim->st.events_pending++;
	if (fault_take(sim, QSM_SIM_FAULT_HOLD)) {
		e->held = true;
		qsm_list_add_tail(&sim->held, &e->node);
	} else {
		fabric_push(e->fab, e);
	}
}

/* Out of its queue; the eventfd follows the queue, so it goes quiet with the last event. */
static void event_remove(struct sim_event *e)
{
	qsm_list_del(&e->node);
	e->fab->sim->st.events_pending--;
	if (!e->held && qsm_list_empty(&e->fab->queue))
		fabric_quiet(e->fab);
}

static void event_drop(struct sim_event *e)
{
	event_remove(e);
	e->fab->sim->st.events_dropped++;
	free(e);
}

struct post {
	struct sim_fabric *fab;              /* NULL: the id's fabric */
	struct sim_id *id;
	struct sim_id *listener;
	struct sim_device *dev;
	int event;
	int status;
	const struct qsm_fabric_wc *wc;      /* QSM_EV_COMPLETION */
	const void *pdata;
	size_t len;
	size_t wire;                         /* the CM message's private data size: len is padded to it */
};

static struct sim_event *event_new(struct sim_fabric *fab, const struct post *p)
{
	struct sim_event *e = zalloc_or_die(sizeof(*e));

	assert(p->len <= p->wire && p->wire <= sizeof(e->pdata));
	e->fab = fab;
	e->id = p->id;
	e->listener = p->listener;
	e->dev = p->dev;
	e->event = p->event;
	e->status = p->status;
	if (p->wc)
		e->wc = *p->wc;
	e->len = p->wire;
	if (p->len)
		memcpy(e->pdata, p->pdata, p->len);
	return e;
}

/*
 * Every event goes through here, so the faults that bend the event stream (lost,
 * duplicated, stray events) apply to every path that produces the event.
 */
static void post(const struct post *p)
{
	struct sim_fabric *fab = p->fab ? p->fab : p->id->fab;
	struct qsm_sim *sim = fab->sim;

	if ((p->event == QSM_EV_TIMEWAIT_EXIT && fault_take(sim, QSM_SIM_FAULT_NO_TIMEWAIT_EXIT)) ||
	    (p->event == QSM_EV_DRAINED && fault_take(sim, QSM_SIM_FAULT_NO_DRAINED))) {
		sim->st.events_dropped++;
		return;
	}
	enqueue(sim, event_new(fab, p));
	if (p->event != QSM_EV_DISCONNECTED)
		return;
	if (fault_take(sim, QSM_SIM_FAULT_DUP_DISCONNECTED))
		enqueue(sim, event_new(fab, p));
	if (fault_take(sim, QSM_SIM_FAULT_LATE_ESTABLISHED))
		enqueue(sim, event_new(fab, &(struct post){ .id = p->id, .event = QSM_EV_ESTABLISHED }));
}

static void post_simple(struct sim_id *id, int event, int status)
{
	post(&(struct post){ .id = id, .event = event, .status = status });
}

/* Drop the pending events of `id`, queued or held: all of them (event 0), or one kind. */
static void drop_events(struct sim_id *id, int event)
{
	struct qsm_list *heads[2] = { &id->fab->queue, &id->fab->sim->held };
	struct qsm_list *pos, *tmp;

	for (int i = 0; i < 2; i++) {
		qsm_list_each(pos, tmp, heads[i]) {
			struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

			if (e->id == id && (!event || e->event == event))
				event_drop(e);
		}
	}
}

/* After destroy_id nothing of the id is returned. */
static void drop_events_of(struct sim_id *id)
{
	drop_events(id, 0);
}

/* A CONNECT_REQUEST of `listener` not yet returned, queued or held, or NULL. */
static struct sim_event *unreported_request(struct sim_id *listener)
{
	struct qsm_list *heads[2] = { &listener->fab->queue, &listener->fab->sim->held };
	struct qsm_list *pos, *tmp;

	for (int i = 0; i < 2; i++) {
		qsm_list_each(pos, tmp, heads[i]) {
			struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

			if (e->event == QSM_EV_CONNECT_REQUEST && e->listener == listener)
				return e;
		}
	}
	return NULL;
}

/* ---- QPs ---- */

/*
 * One work completion, to the id's owner.  An error other than a flush is also the
 * QP's WC_ERROR, once per QP, right behind it (-EIO, as the rdmacm backend reports it).
 */
static void complete(struct sim_id *id, uint64_t wr_id, enum qsm_wr_opcode opcode,
		     enum qsm_wc_status status, uint32_t byte_len)
{
	struct qsm_fabric_wc wc = { .wr_id = wr_id, .status = status, .opcode = opcode,
				    .byte_len = status == QSM_WC_SUCCESS ? byte_len : 0 };

	post(&(struct post){ .id = id, .event = QSM_EV_COMPLETION, .wc = &wc });
	if (status != QSM_WC_SUCCESS && status != QSM_WC_WR_FLUSH_ERR && !id->wc_error_sent) {
		id->wc_error_sent = true;
		post_simple(id, QSM_EV_WC_ERROR, -EIO);
	}
}

static void recv_free(struct sim_id *id, struct sim_recv *r)
{
	qsm_list_del(&r->node);
	id->nrecvs--;
	free(r);
}

/*
 * The QP enters ERR: what it still holds flushes, in post order, at once, so the
 * completions precede whatever reports the cause (DISCONNECTED, DRAINED, ...).
 */
static void qp_err(struct sim_id *id)
{
	if (id->qp == SIM_QP_NONE)
		return;
	id->qp = SIM_QP_ERR;
	while (!qsm_list_empty(&id->recvs)) {
		struct sim_recv *r = qsm_container_of(id->recvs.next, struct sim_recv, node);

		complete(id, r->wr_id, QSM_WR_RECV, QSM_WC_WR_FLUSH_ERR, 0);
		recv_free(id, r);
	}
}

/* An affiliated asynchronous error (IBV_EVENT_QP_FATAL, QP_ACCESS_ERR, ...). */
static void qp_fatal(struct sim_id *id)
{
	qp_err(id);
	post_simple(id, QSM_EV_QP_FATAL, 0);
}

/* The QP is gone with what it held: no completion for its WRs, as with
 * ibv_destroy_qp, which also cleans its CQEs not yet polled from the CQ. */
static void qp_destroy(struct sim_id *id)
{
	struct qsm_sim *sim = id->fab->sim;

	if (id->qp == SIM_QP_NONE)
		return;
	while (!qsm_list_empty(&id->recvs))
		recv_free(id, qsm_container_of(id->recvs.next, struct sim_recv, node));
	drop_events(id, QSM_EV_COMPLETION);
	id->qp = SIM_QP_NONE;
	id->dev->nqps--;
	sim->st.qps--;
	device_settle(id->dev);
}

/* ---- connections: each rule of the CM's wire protocol lives in exactly one function ---- */

static int pdata_check(const void *pdata, size_t len, size_t max)
{
	if (len > max || (len && !pdata))
		return -EINVAL;
	return 0;
}

static void peer_unlink(struct sim_id *id)
{
	id->peer->peer = NULL;
	id->peer = NULL;
}

/* An id that leaves its connection: down if it was up, failed if it never came up. */
static void leave_connection(struct sim_id *id)
{
	id->state = id->state == ID_ESTABLISHED ? ID_DISCONNECTED : ID_FAILED;
}

/*
 * A connection attempt that ends without ESTABLISHED, as seen by `id`.  A REJ
 * moves the QP to ERR (cma_ib_handler); an unanswered REQ leaves it alone.
 * REJECTED carries the REJ's whole private data field, as on IB/RoCE.
 */
static void connect_failed(struct sim_id *id, int event, int status, const void *pdata, size_t len)
{
	id->state = ID_FAILED;
	if (event != QSM_EV_UNREACHABLE)
		qp_err(id);
	post(&(struct post){ .id = id, .event = event, .status = status, .pdata = pdata, .len = len,
			     .wire = event == QSM_EV_REJECTED ? QSM_SIM_REJ_PDATA : 0 });
}

static void connection_up(struct sim_id *active, struct sim_id *passive, const void *pdata, size_t len)
{
	active->state = passive->state = ID_ESTABLISHED;
	active->qp = passive->qp = SIM_QP_RTS;
	/* The active side learns from the REP (its private data), the passive side from the RTU (none). */
	post(&(struct post){ .id = active, .event = QSM_EV_ESTABLISHED, .pdata = pdata, .len = len,
			     .wire = QSM_SIM_REP_PDATA });
	post_simple(passive, QSM_EV_ESTABLISHED, 0);
}

static void connection_down(struct sim_id *id)
{
	id->state = ID_DISCONNECTED;
	qp_err(id);
	post_simple(id, QSM_EV_DISCONNECTED, 0);
}

static void timewait_exit(struct sim_id *id)
{
	post_simple(id, QSM_EV_TIMEWAIT_EXIT, 0);
}

/*
 * `id` leaves its connection without a word of its own (destroyed, or its device
 * is gone): the peer hears what the kernel's CM sends on the dying id's behalf.
 */
static void peer_lost(struct sim_id *id)
{
	struct sim_id *peer = id->peer;

	if (!peer)
		return;
	peer_unlink(id);
	leave_connection(id);
	switch (peer->state) {
	case ID_ESTABLISHED:     /* DREQ */
		connection_down(peer);
		timewait_exit(peer);
		break;
	case ID_CONNECT:         /* an unanswered request destroyed: REJ, consumer defined */
		connect_failed(peer, QSM_EV_REJECTED, QSM_SIM_REJ_CONSUMER, NULL, 0);
		break;
	case ID_REQ_RCVD:        /* the requester gave up: REJ, timeout */
		connect_failed(peer, QSM_EV_REJECTED, QSM_SIM_REJ_TIMEOUT, NULL, 0);
		break;
	default:
		assert(!"a linked peer is always connecting or connected");
	}
}

/* ---- port space: the kernel's cma_check_port without SO_REUSEADDR ---- */

static int port_conflict(struct qsm_sim *sim, const struct sockaddr_storage *ss)
{
	struct qsm_list *fpos, *ftmp, *pos, *tmp;

	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *o = qsm_container_of(pos, struct sim_id, node);

			if (!o->holds_port || addr_port(&o->src) != addr_port(ss))
				continue;
			if (addr_is_any(&o->src) || addr_is_any(ss))
				return -EADDRNOTAVAIL;
			if (addr_same_ip(&o->src, ss))
				return -EADDRINUSE;
		}
	}
	return 0;
}

static bool port_used(struct qsm_sim *sim, unsigned port)
{
	struct qsm_list *fpos, *ftmp, *pos, *tmp;

	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *o = qsm_container_of(pos, struct sim_id, node);

			if (o->holds_port && addr_port(&o->src) == port)
				return true;
		}
	}
	return false;
}

/* Ephemeral ports go round in order, never random, so that runs repeat. */
static int port_pick(struct qsm_sim *sim, uint16_t *ret)
{
	for (unsigned n = 0; n <= PORT_LAST - PORT_FIRST; n++) {
		unsigned p = sim->next_port;

		sim->next_port = p == PORT_LAST ? PORT_FIRST : p + 1;
		if (!port_used(sim, p)) {
			*ret = (uint16_t)p;
			return 0;
		}
	}
	return -EADDRNOTAVAIL;
}

/* ---- ids ---- */

static struct sim_id *id_alloc(struct sim_fabric *f, void *owner)
{
	struct sim_id *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->fab = f;
	id->owner = owner;
	id->state = ID_IDLE;
	qsm_list_init(&id->recvs);
	qsm_list_add_tail(&f->ids, &id->node);
	f->sim->st.ids++;
	return id;
}

static void id_set_device(struct sim_id *id, struct sim_device *d)
{
	assert(!id->dev);
	id->dev = d;
	d->nids++;
}

/* Bind checks everything before it changes anything, so a failed bind has no effect. */
static int id_bind(struct sim_id *id, const struct sockaddr *sa)
{
	struct qsm_sim *sim = id->fab->sim;
	struct sockaddr_storage ss;
	struct sim_device *d = NULL;
	uint16_t port;
	int r;

	r = qsm_sockaddr_copy(&ss, sa);
	if (r < 0)
		return r;
	if (!addr_is_any(&ss)) {
		d = device_serving(sim, &ss);
		if (!d)
			return -EADDRNOTAVAIL;
	}
	if (addr_port(&ss) == 0) {
		r = port_pick(sim, &port);
		if (r < 0)
			return r;
		addr_set_port(&ss, port);
	} else {
		r = port_conflict(sim, &ss);
		if (r < 0)
			return r;
	}
	id->src = ss;
	id->has_src = true;
	id->holds_port = true;
	id->state = ID_BOUND;
	if (d)
		id_set_device(id, d);
	return 0;
}

static void id_destroy(struct sim_id *id)
{
	struct qsm_sim *sim = id->fab->sim;
	struct sim_event *req;

	qp_destroy(id);
	drop_events_of(id);
	/* Requests the runtime never saw die with their listener, as ucma does for unreported events. */
	while ((req = unreported_request(id))) {
		struct sim_id *child = req->id;

		event_drop(req);
		id_destroy(child);
	}
	peer_lost(id);
	if (id->dev) {
		id->dev->nids--;
		device_settle(id->dev);
	}
	qsm_list_del(&id->node);
	sim->st.ids--;
	free(id);
}

/* ---- the listener a REQ reaches ---- */

static bool wildcard_takes(const struct sim_id *l, const struct sockaddr_storage *dst)
{
	/* A v6 wildcard is dual stack (bindv6only = 0), a v4 one is not. */
	return l->src.ss_family == dst->ss_family || l->src.ss_family == AF_INET6;
}

/*
 * The listening id for `dst`, searched in every fabric of the world; a listener on
 * the exact address wins over a wildcard one.  With none, *reason is the REJ the
 * passive CM sends: no listener on the port at all is an unknown service; a
 * listener on the port but not on this address is turned down by rdma_cm itself.
 */
static struct sim_id *listener_for(struct qsm_sim *sim, const struct sockaddr_storage *dst, int *reason)
{
	struct qsm_list *fpos, *ftmp, *pos, *tmp;
	struct sim_id *wild = NULL;
	bool port_seen = false;

	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *l = qsm_container_of(pos, struct sim_id, node);

			if (l->state != ID_LISTEN || addr_port(&l->src) != addr_port(dst))
				continue;
			port_seen = true;
			if (addr_is_any(&l->src)) {
				if (!wild && wildcard_takes(l, dst))
					wild = l;
			} else if (addr_same_ip(&l->src, dst) && device_up(l->dev)) {
				return l;
			}
		}
	}
	if (wild)
		return wild;
	*reason = port_seen ? QSM_SIM_REJ_CONSUMER : QSM_SIM_REJ_INVALID_SERVICE_ID;
	return NULL;
}

/* ---- the data path: WRs execute when posted, against the MRs their keys name ---- */

static bool mr_covers(const struct sim_mr *mr, uint64_t addr, uint64_t len)
{
	return addr >= mr->addr && len <= mr->len && addr - mr->addr <= mr->len - len;
}

/* The MR of `d` that `key` names (an lkey, or an rkey if `remote`), or NULL. */
static struct sim_mr *mr_by_key(struct sim_device *d, uint32_t key, bool remote)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &d->mrs) {
		struct sim_mr *mr = qsm_container_of(pos, struct sim_mr, node);

		if ((remote ? mr->rkey : mr->lkey) == key)
			return mr;
	}
	return NULL;
}

/* Does `key` on `d` grant `access` to [addr, addr + len)? */
static bool mr_grants(struct sim_device *d, uint32_t key, bool remote, uint64_t addr, uint64_t len,
		      int access)
{
	struct sim_mr *mr = mr_by_key(d, key, remote);

	return mr && (mr->access & access) == access && mr_covers(mr, addr, len);
}

/* Every SGE of a local list names an MR of `d` that covers it with `access`. */
static bool sges_valid(struct sim_device *d, const struct qsm_fabric_sge *sg, int n, int access)
{
	for (int i = 0; i < n; i++)
		if (!mr_grants(d, sg[i].lkey, false, sg[i].addr, sg[i].length, access))
			return false;
	return true;
}

static uint64_t sges_len(const struct qsm_fabric_sge *sg, int n)
{
	uint64_t len = 0;

	for (int i = 0; i < n; i++)
		len += sg[i].length;
	return len;
}

/* Gather from `src` and scatter into `dst`, as far as both go; memmove, as a loopback
 * transfer may overlap itself. */
static void sges_copy(const struct qsm_fabric_sge *dst, int dn, const struct qsm_fabric_sge *src, int sn)
{
	int di = 0, si = 0;
	uint32_t doff = 0, soff = 0;

	while (di < dn && si < sn) {
		uint32_t n = dst[di].length - doff;

		if (n > src[si].length - soff)
			n = src[si].length - soff;
		/* an empty SGE may have any address, NULL included, which memmove must not get */
		if (n)
			memmove((void *)(uintptr_t)(dst[di].addr + doff),
				(const void *)(uintptr_t)(src[si].addr + soff), n);
		doff += n;
		soff += n;
		if (doff == dst[di].length) {
			di++;
			doff = 0;
		}
		if (soff == src[si].length) {
			si++;
			soff = 0;
		}
	}
}

/* A send WR that failed: its completion, signaled or not, and the QP goes to ERR. */
static void send_failed(struct sim_id *id, const struct qsm_fabric_wr *wr, enum qsm_wc_status status)
{
	complete(id, wr->wr_id, wr->opcode, status, 0);
	qp_err(id);
}

static void send_done(struct sim_id *id, const struct qsm_fabric_wr *wr, uint32_t byte_len)
{
	if (wr->signaled)
		complete(id, wr->wr_id, wr->opcode, QSM_WC_SUCCESS, byte_len);
}

/*
 * A SEND lands in the peer's first posted receive.  The responder detects its errors
 * first and completes that receive in error; the requester then gets the NAK: REM_INV_REQ
 * or REM_OP_ERR on hardware, GENERAL_ERR here (the subset of fabric.h has neither).
 */
static void send_to(struct sim_id *id, struct sim_id *peer, const struct qsm_fabric_wr *wr)
{
	uint64_t len = sges_len(wr->sg_list, wr->num_sge);
	struct sim_recv *r;
	enum qsm_wc_status rstatus = QSM_WC_SUCCESS;

	if (qsm_list_empty(&peer->recvs)) {
		/* RNR NAKs until the retries run out.  An RNR NAK is flow control: the responder's
		 * QP stays in RTS and hears nothing. */
		send_failed(id, wr, QSM_WC_RNR_RETRY_EXC_ERR);
		return;
	}
	r = qsm_container_of(peer->recvs.next, struct sim_recv, node);
	if (!sges_valid(peer->dev, r->sge, r->num_sge, QSM_ACCESS_LOCAL_WRITE))
		rstatus = QSM_WC_LOC_PROT_ERR;
	else if (len > sges_len(r->sge, r->num_sge))
		rstatus = QSM_WC_LOC_LEN_ERR;
	if (rstatus != QSM_WC_SUCCESS) {
		complete(peer, r->wr_id, QSM_WR_RECV, rstatus, 0);
		recv_free(peer, r);
		qp_err(peer);
		send_failed(id, wr, QSM_WC_GENERAL_ERR);
		return;
	}
	sges_copy(r->sge, r->num_sge, wr->sg_list, wr->num_sge);
	complete(peer, r->wr_id, QSM_WR_RECV, QSM_WC_SUCCESS, (uint32_t)len);
	recv_free(peer, r);
	send_done(id, wr, 0);
}

/*
 * RDMA WRITE and READ reach the peer's memory through its rkey; the peer's owner sees
 * nothing unless the rkey is refused: then the responder's QP goes to ERR with an
 * affiliated async error (IBV_EVENT_QP_ACCESS_ERR, reported as QP_FATAL) and the
 * requester gets REM_ACCESS_ERR.  A zero-length transfer checks neither rkey nor remote
 * address and moves nothing (IBA C9-88; rxe's check_rkey does the same).
 */
static void rdma_to(struct sim_id *id, struct sim_id *peer, const struct qsm_fabric_wr *wr)
{
	bool write = wr->opcode == QSM_WR_RDMA_WRITE;
	uint64_t len = sges_len(wr->sg_list, wr->num_sge);
	struct qsm_fabric_sge remote = { .addr = wr->remote_addr, .length = (uint32_t)len };

	if (!len) {
		send_done(id, wr, 0);
		return;
	}
	if (!mr_grants(peer->dev, wr->rkey, true, wr->remote_addr, len,
		       write ? QSM_ACCESS_REMOTE_WRITE : QSM_ACCESS_REMOTE_READ)) {
		qp_fatal(peer);
		send_failed(id, wr, QSM_WC_REM_ACCESS_ERR);
		return;
	}
	if (write)
		sges_copy(&remote, 1, wr->sg_list, wr->num_sge);
	else
		sges_copy(wr->sg_list, wr->num_sge, &remote, 1);
	send_done(id, wr, write ? 0 : (uint32_t)len);
}

static uint32_t sge_cap(uint32_t asked)
{
	uint32_t n = asked ? asked : 1;

	return n < QSM_FABRIC_MAX_SGE ? n : QSM_FABRIC_MAX_SGE;
}

static int sges_check(const struct qsm_fabric_sge *sg, int n, uint32_t asked)
{
	if (n < 0 || (uint32_t)n > sge_cap(asked) || (n && !sg))
		return -EINVAL;
	return 0;
}

/* ---- the fabric ops ---- */

static void sim_destroy(struct qsm_fabric *base)
{
	struct sim_fabric *f;
	struct qsm_sim *sim;
	struct qsm_list *pos, *tmp;

	if (!base)
		return;
	f = to_fabric(base);
	sim = f->sim;
	/* Ids left behind are the runtime's bug; freeing them as destroy_id would keeps peers,
	 * devices and counts consistent, and ids_leaked tells the test. */
	while (!qsm_list_empty(&f->ids)) {
		sim->st.ids_leaked++;
		id_destroy(qsm_container_of(f->ids.next, struct sim_id, node));
	}
	qsm_list_each(pos, tmp, &f->queue)
		event_drop(qsm_container_of(pos, struct sim_event, node));
	qsm_list_each(pos, tmp, &sim->held) {
		struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

		if (e->fab == f)
			event_drop(e);
	}
	close(f->efd);
	qsm_list_del(&f->node);
	sim->nfabrics--;
	free(f);
	if (sim->free_pending && !sim->nfabrics)
		qsm_sim_free(sim);
}

static int sim_fd(struct qsm_fabric *base)
{
	if (!base)
		return -EINVAL;
	return to_fabric(base)->efd;
}

static int sim_get_event(struct qsm_fabric *base, struct qsm_fabric_event *ev)
{
	struct sim_fabric *f;
	struct sim_event *e;

	if (!base || !ev)
		return -EINVAL;
	f = to_fabric(base);
	if (qsm_list_empty(&f->queue))
		return -EAGAIN;
	e = qsm_container_of(f->queue.next, struct sim_event, node);
	event_remove(e);
	memset(ev, 0, sizeof(*ev));
	ev->event = e->event;
	ev->status = e->status;
	ev->id = e->id ? fid_of(e->id) : NULL;
	ev->owner = e->id ? e->id->owner : NULL;
	ev->listen_owner = e->listener ? e->listener->owner : NULL;
	ev->device = e->dev ? fdev_of(e->dev) : NULL;
	ev->private_data_len = e->len;
	memcpy(ev->private_data, e->pdata, e->len);
	ev->wc = e->wc;
	f->sim->st.events_delivered++;
	free(e);
	return 0;
}

static int sim_create_id(struct qsm_fabric *base, void *owner, struct qsm_fid **ret)
{
	struct sim_fabric *f;
	struct sim_id *id;

	if (!base || !ret)
		return -EINVAL;
	f = to_fabric(base);
	if (fault_take(f->sim, QSM_SIM_FAULT_ENOMEM))
		return -ENOMEM;
	id = id_alloc(f, owner);
	if (!id)
		return -ENOMEM;
	*ret = fid_of(id);
	return 0;
}

static void sim_set_owner(struct qsm_fid *fid, void *owner)
{
	if (fid)
		to_id(fid)->owner = owner;
}

static void sim_destroy_id(struct qsm_fid *fid)
{
	if (fid)
		id_destroy(to_id(fid));
}

static int sim_bind(struct qsm_fid *fid, const struct sockaddr *addr)
{
	struct sim_id *id = to_id(fid);

	if (!id || !addr)
		return -EINVAL;
	if (id->state != ID_IDLE)
		return -EINVAL;
	return id_bind(id, addr);
}

static int sim_listen(struct qsm_fid *fid, int backlog)
{
	struct sim_id *id = to_id(fid);

	(void)backlog;   /* nothing queues up in the sim: requests are reported at once */
	if (!id)
		return -EINVAL;
	if (id->state != ID_BOUND)
		return -EINVAL;
	if (id->dev && !device_up(id->dev))
		return -ENODEV;
	id->state = ID_LISTEN;
	return 0;
}

/*
 * The world is one loopback network: a destination is reachable while an UP device
 * serves it.  The id goes on the device it was bound to, or else on the device
 * that serves the destination.
 */
static int sim_resolve_addr(struct qsm_fid *fid, const struct sockaddr *src,
			    const struct sockaddr *dst, int timeout_ms)
{
	struct sim_id *id = to_id(fid);
	struct qsm_sim *sim;
	struct sockaddr_storage daddr;
	struct sim_device *target, *via;
	int r;

	(void)timeout_ms;   /* no time passes in the sim */
	if (!id || !dst)
		return -EINVAL;
	sim = id->fab->sim;
	if (id->state != ID_IDLE && id->state != ID_BOUND)
		return -EINVAL;
	r = qsm_sockaddr_copy(&daddr, dst);
	if (r < 0)
		return r;
	if (id->state == ID_IDLE) {
		/* src only counts for an unbound id (resolve_prepare_src); no src binds to the wildcard. */
		struct sockaddr_storage any = { .ss_family = daddr.ss_family };

		if (src && src->sa_family != daddr.ss_family)
			return -EINVAL;
		r = id_bind(id, src ? src : (const struct sockaddr *)&any);
		if (r < 0)
			return r;
	} else if (id->src.ss_family != daddr.ss_family) {
		return -EINVAL;
	}

	id->dst = daddr;
	target = device_serving(sim, &daddr);
	via = id->dev ? id->dev : target;
	if (fault_take(sim, QSM_SIM_FAULT_ADDR_ERROR) || !target || !device_up(via)) {
		post_simple(id, QSM_EV_ADDR_ERROR, -EHOSTUNREACH);
		return 0;
	}
	if (!id->dev)
		id_set_device(id, via);
	addr_set_ip(&id->src, &via->addr);
	id->state = ID_ADDR_RESOLVED;
	post_simple(id, QSM_EV_ADDR_RESOLVED, 0);
	return 0;
}

static int sim_resolve_route(struct qsm_fid *fid, int timeout_ms)
{
	struct sim_id *id = to_id(fid);

	(void)timeout_ms;
	if (!id)
		return -EINVAL;
	if (id->state != ID_ADDR_RESOLVED)
		return -EINVAL;
	if (!device_up(id->dev))
		return -ENODEV;
	if (fault_take(id->fab->sim, QSM_SIM_FAULT_ROUTE_ERROR)) {
		post_simple(id, QSM_EV_ROUTE_ERROR, -ETIMEDOUT);
		return 0;
	}
	id->state = ID_ROUTE_RESOLVED;
	post_simple(id, QSM_EV_ROUTE_RESOLVED, 0);
	return 0;
}

static int sim_create_qp(struct qsm_fid *fid, const struct qsm_fabric_qp_attr *attr)
{
	struct sim_id *id = to_id(fid);
	struct qsm_sim *sim;

	if (!id || !attr)
		return -EINVAL;
	sim = id->fab->sim;
	if (!id->dev)
		return -EINVAL;
	if (id->qp != SIM_QP_NONE)
		return -EEXIST;
	if (!device_up(id->dev))
		return -ENODEV;
	if (fault_take(sim, QSM_SIM_FAULT_ENOMEM))
		return -ENOMEM;
	id->qp = SIM_QP_INIT;
	id->cap = *attr;
	id->wc_error_sent = false;
	id->dev->nqps++;
	sim->st.qps++;
	return 0;
}

static void sim_destroy_qp(struct qsm_fid *fid)
{
	if (fid)
		qp_destroy(to_id(fid));
}

static int sim_connect(struct qsm_fid *fid, const void *pdata, size_t len)
{
	struct sim_id *id = to_id(fid);
	struct qsm_sim *sim;
	struct sim_id *listener, *passive = NULL;
	struct sim_device *target;
	int reason = 0;

	if (!id)
		return -EINVAL;
	sim = id->fab->sim;
	if (pdata_check(pdata, len, QSM_SIM_REQ_PDATA) < 0)
		return -EINVAL;
	if (id->state != ID_ROUTE_RESOLVED || id->qp == SIM_QP_NONE)
		return -EINVAL;
	if (!device_up(id->dev))
		return -ENODEV;

	target = device_serving(sim, &id->dst);
	listener = target ? listener_for(sim, &id->dst, &reason) : NULL;
	/* The only step that can fail comes before anything changes, faults included. */
	if (listener && !sim->faults[QSM_SIM_FAULT_REJECT] && !sim->faults[QSM_SIM_FAULT_UNREACHABLE]) {
		passive = id_alloc(listener->fab, NULL);
		if (!passive)
			return -ENOMEM;
	}

	id->state = ID_CONNECT;
	if (fault_take(sim, QSM_SIM_FAULT_REJECT)) {
		connect_failed(id, QSM_EV_REJECTED, QSM_SIM_REJ_CONSUMER, NULL, 0);
		return 0;
	}
	/* The destination's device went away after resolution: the REQ goes unanswered. */
	if (fault_take(sim, QSM_SIM_FAULT_UNREACHABLE) || !target) {
		connect_failed(id, QSM_EV_UNREACHABLE, -ETIMEDOUT, NULL, 0);
		return 0;
	}
	if (!listener) {
		connect_failed(id, QSM_EV_REJECTED, reason, NULL, 0);
		return 0;
	}

	/* The passive id is rdma_cm's new id for the request: on the device that took the
	 * REQ, its source the address the active side dialled. */
	id_set_device(passive, target);
	passive->src = id->dst;
	passive->has_src = true;
	passive->dst = id->src;
	passive->state = ID_REQ_RCVD;
	passive->peer = id;
	id->peer = passive;
	post(&(struct post){ .id = passive, .listener = listener, .event = QSM_EV_CONNECT_REQUEST,
			     .pdata = pdata, .len = len, .wire = QSM_SIM_REQ_PDATA });
	return 0;
}

static int sim_accept(struct qsm_fid *fid, const void *pdata, size_t len)
{
	struct sim_id *id = to_id(fid);
	struct qsm_sim *sim;
	struct sim_id *active;

	if (!id)
		return -EINVAL;
	sim = id->fab->sim;
	if (pdata_check(pdata, len, QSM_SIM_REP_PDATA) < 0)
		return -EINVAL;
	/* Only an INIT QP can be moved to RTR (one in ERR cannot), so rdma_accept fails before
	 * sending the REP. */
	if (id->state != ID_REQ_RCVD || id->qp != SIM_QP_INIT)
		return -EINVAL;
	if (!device_up(id->dev))
		return -ENODEV;

	active = id->peer;
	if (fault_take(sim, QSM_SIM_FAULT_CONNECT_ERROR)) {
		peer_unlink(id);
		connect_failed(active, QSM_EV_CONNECT_ERROR, -ECONNABORTED, NULL, 0);
		connect_failed(id, QSM_EV_CONNECT_ERROR, -ECONNABORTED, NULL, 0);
		return 0;
	}
	/* The active side disconnected, drained or dropped its QP while the REQ was pending:
	 * its REP handling cannot move the QP to RTR, so it reports CONNECT_ERROR and REJects. */
	if (active->qp != SIM_QP_INIT) {
		peer_unlink(id);
		connect_failed(active, QSM_EV_CONNECT_ERROR, -EINVAL, NULL, 0);
		connect_failed(id, QSM_EV_REJECTED, QSM_SIM_REJ_CONSUMER, NULL, 0);
		return 0;
	}
	connection_up(active, id, pdata, len);
	return 0;
}

static int sim_reject(struct qsm_fid *fid, const void *pdata, size_t len)
{
	struct sim_id *id = to_id(fid);
	struct sim_id *active;

	if (!id)
		return -EINVAL;
	if (pdata_check(pdata, len, QSM_SIM_REJ_PDATA) < 0)
		return -EINVAL;
	if (id->state != ID_REQ_RCVD)
		return -EINVAL;
	active = id->peer;
	peer_unlink(id);
	id->state = ID_FAILED;
	connect_failed(active, QSM_EV_REJECTED, QSM_SIM_REJ_CONSUMER, pdata, len);
	return 0;
}

static int sim_disconnect(struct qsm_fid *fid)
{
	struct sim_id *id = to_id(fid);
	struct sim_id *peer;

	if (!id)
		return -EINVAL;
	switch (id->state) {
	case ID_ESTABLISHED:
		/* Both ends get DISCONNECTED once (DREQ, DREP), then both leave timewait. */
		peer = id->peer;
		peer_unlink(id);
		connection_down(id);
		connection_down(peer);
		timewait_exit(id);
		timewait_exit(peer);
		return 0;
	case ID_CONNECT:
	case ID_REQ_RCVD:
	case ID_DISCONNECTED:
	case ID_FAILED:
		/* Once a connection was tried the kernel id has a CM id: rdma_disconnect moves
		 * the QP to ERR, and a DREQ that cannot be sent in this state is no error. */
		qp_err(id);
		return 0;
	default:
		return -EINVAL;
	}
}

static int sim_drain(struct qsm_fid *fid)
{
	struct sim_id *id = to_id(fid);

	if (!id)
		return -EINVAL;
	if (id->qp == SIM_QP_NONE)
		return -EINVAL;
	/* No device check: draining is how the runtime lets go of a device being removed.
	 * The marker is posted last, so it flushes behind every WR posted before it. */
	qp_err(id);
	post_simple(id, QSM_EV_DRAINED, 0);
	return 0;
}

static struct qsm_fdev *sim_id_device(struct qsm_fid *fid)
{
	struct sim_id *id = to_id(fid);

	return id && id->dev ? fdev_of(id->dev) : NULL;
}

static void sim_device_get(struct qsm_fdev *fdev)
{
	struct sim_device *d = to_dev(fdev);

	if (!d)
		return;
	d->refs++;
	d->sim->st.device_refs++;
}

static void sim_device_put(struct qsm_fdev *fdev)
{
	struct sim_device *d = to_dev(fdev);

	if (!d)
		return;
	assert(d->refs > 0 && "device_put without device_get");
	if (!d->refs)
		return;
	d->refs--;
	d->sim->st.device_refs--;
	device_settle(d);
}

static const char *sim_device_name(struct qsm_fdev *fdev)
{
	struct sim_device *d = to_dev(fdev);

	return d ? d->name : NULL;
}

static int sim_device_addr(struct qsm_fdev *fdev, struct sockaddr_storage *ss)
{
	struct sim_device *d = to_dev(fdev);

	if (!d || !ss)
		return -EINVAL;
	if (!device_up(d))
		return -ENOENT;
	*ss = d->addr;
	return 0;
}

static int sim_id_src_addr(struct qsm_fid *fid, struct sockaddr_storage *ss)
{
	struct sim_id *id = to_id(fid);

	if (!id || !ss)
		return -EINVAL;
	if (!id->has_src)
		return -ENOENT;
	*ss = id->src;
	return 0;
}

/* ---- data path ops ---- */

/*
 * The kernel pins every page of an MR (ib_umem_get) and fails with -EFAULT where one is not
 * mapped; mincore() tells the same without pinning, a bounded batch of pages per call.
 */
static bool range_mapped(uintptr_t addr, size_t len)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), p = addr & ~(pg - 1), end = addr + len;
	unsigned char vec[4096];

	while (p < end) {
		size_t n = (end - p - 1) / pg + 1; /* no overflow near the top of the space */

		if (n > sizeof(vec))
			n = sizeof(vec);
		if (mincore((void *)p, n * pg, vec) < 0 && errno == ENOMEM)
			return false;
		p += n * pg;
	}
	return true;
}

static int sim_reg_mr(struct qsm_fdev *fdev, void *addr, size_t len, int access, struct qsm_fmr **ret,
		      uint32_t *lkey, uint32_t *rkey)
{
	struct sim_device *d = to_dev(fdev);
	struct sim_mr *mr;

	if (!d || !addr || !len || !ret || !lkey || !rkey)
		return -EINVAL;
	if (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ))
		return -EINVAL;
	/* ibv_reg_mr: remote write needs local write. */
	if ((access & QSM_ACCESS_REMOTE_WRITE) && !(access & QSM_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	/* A length that is really an address, or a wrapped size: no HCA would take it. */
	if (len > QSM_SIM_MAX_MR_SIZE || (uintptr_t)addr + len < (uintptr_t)addr)
		return -EINVAL;
	if (!range_mapped((uintptr_t)addr, len))
		return -EFAULT;
	if (!device_up(d))
		return -ENODEV;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->dev = d;
	mr->addr = (uintptr_t)addr;
	mr->len = len;
	mr->access = access;
	/* Distinct lkey and rkey, so that a ULP that mixes them up fails here as on some HCAs. */
	mr->lkey = ++d->sim->next_key;
	mr->rkey = ++d->sim->next_key;
	qsm_list_add_tail(&d->mrs, &mr->node);
	d->nmrs++;
	d->sim->st.mrs++;
	*ret = (struct qsm_fmr *)(void *)mr;
	*lkey = mr->lkey;
	*rkey = mr->rkey;
	return 0;
}

static void sim_dereg_mr(struct qsm_fmr *fmr)
{
	struct sim_mr *mr = (struct sim_mr *)(void *)fmr;
	struct sim_device *d;

	if (!mr)
		return;
	d = mr->dev;
	qsm_list_del(&mr->node);
	d->nmrs--;
	d->sim->st.mrs--;
	free(mr);
	device_settle(d);
}

/*
 * A WR executes when it is posted.  As with ibv_post_send, what is wrong with the WR
 * itself fails the call; what the fabric finds wrong (keys, the peer) fails the WR.
 * The send queue of a QP not yet RTS refuses WRs; in ERR it flushes them.
 */
static int sim_post_send(struct qsm_fid *fid, const struct qsm_fabric_wr *wr)
{
	struct sim_id *id = to_id(fid);
	struct sim_id *peer;

	if (!id || !wr || id->qp == SIM_QP_NONE)
		return -EINVAL;
	if (wr->opcode != QSM_WR_SEND && wr->opcode != QSM_WR_RDMA_WRITE && wr->opcode != QSM_WR_RDMA_READ)
		return -EINVAL;
	if (sges_check(wr->sg_list, wr->num_sge, id->cap.max_send_sge) < 0)
		return -EINVAL;
	if (id->qp == SIM_QP_ERR) {
		complete(id, wr->wr_id, wr->opcode, QSM_WC_WR_FLUSH_ERR, 0);
		return 0;
	}
	if (id->qp != SIM_QP_RTS)
		return -EINVAL;

	/* READ writes what comes back into the local SGEs. */
	if (!sges_valid(id->dev, wr->sg_list, wr->num_sge,
			wr->opcode == QSM_WR_RDMA_READ ? QSM_ACCESS_LOCAL_WRITE : 0)) {
		send_failed(id, wr, QSM_WC_LOC_PROT_ERR);
		return 0;
	}
	if (sges_len(wr->sg_list, wr->num_sge) > MSG_MAX) {
		send_failed(id, wr, QSM_WC_LOC_LEN_ERR);
		return 0;
	}
	/* A responder that is gone or in ERR drops the packets: the transport retries run out. */
	peer = id->peer;
	if (!peer || peer->qp != SIM_QP_RTS) {
		send_failed(id, wr, QSM_WC_RETRY_EXC_ERR);
		return 0;
	}
	if (wr->opcode == QSM_WR_SEND)
		send_to(id, peer, wr);
	else
		rdma_to(id, peer, wr);
	return 0;
}

/* Receives may be posted from INIT on; they wait, in order, for SENDs; in ERR they flush. */
static int sim_post_recv(struct qsm_fid *fid, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
			 int num_sge)
{
	struct sim_id *id = to_id(fid);
	struct sim_recv *r;

	if (!id || id->qp == SIM_QP_NONE)
		return -EINVAL;
	if (sges_check(sg_list, num_sge, id->cap.max_recv_sge) < 0)
		return -EINVAL;
	if (id->qp == SIM_QP_ERR) {
		complete(id, wr_id, QSM_WR_RECV, QSM_WC_WR_FLUSH_ERR, 0);
		return 0;
	}
	if (id->nrecvs >= id->cap.max_recv_wr)
		return -ENOMEM;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->wr_id = wr_id;
	r->num_sge = num_sge;
	if (num_sge)
		memcpy(r->sge, sg_list, (size_t)num_sge * sizeof(*sg_list));
	qsm_list_add_tail(&id->recvs, &r->node);
	id->nrecvs++;
	return 0;
}

static const struct qsm_fabric_ops sim_ops = {
	.name = "sim",
	.destroy = sim_destroy,
	.fd = sim_fd,
	.get_event = sim_get_event,
	.create_id = sim_create_id,
	.set_owner = sim_set_owner,
	.destroy_id = sim_destroy_id,
	.bind = sim_bind,
	.listen = sim_listen,
	.resolve_addr = sim_resolve_addr,
	.resolve_route = sim_resolve_route,
	.create_qp = sim_create_qp,
	.destroy_qp = sim_destroy_qp,
	.connect = sim_connect,
	.accept = sim_accept,
	.reject = sim_reject,
	.disconnect = sim_disconnect,
	.drain = sim_drain,
	.id_device = sim_id_device,
	.device_get = sim_device_get,
	.device_put = sim_device_put,
	.device_name = sim_device_name,
	.device_addr = sim_device_addr,
	.id_src_addr = sim_id_src_addr,
	.reg_mr = sim_reg_mr,
	.dereg_mr = sim_dereg_mr,
	.post_send = sim_post_send,
	.post_recv = sim_post_recv,
};

/* ---- the public world API (qsm/sim.h) ---- */

int qsm_sim_new(struct qsm_sim **ret)
{
	struct qsm_sim *sim;

	if (!ret)
		return -EINVAL;
	sim = calloc(1, sizeof(*sim));
	if (!sim)
		return -ENOMEM;
	qsm_list_init(&sim->devices);
	qsm_list_init(&sim->fabrics);
	qsm_list_init(&sim->held);
	sim->next_port = PORT_FIRST;
	*ret = sim;
	return 0;
}

void qsm_sim_free(struct qsm_sim *sim)
{
	struct qsm_list *pos, *tmp;

	if (!sim)
		return;
	/* A caller's bug (destroy every fabric, by qsm_ctx_free(), first), loud in a debug build;
	 * the world then goes with its last fabric, so nothing dangles. */
	if (!qsm_checked(sim->nfabrics == 0)) {
		sim->free_pending = true;
		return;
	}
	/* No fabric, so no id, no queued and no held event is left: only devices, and
	 * MRs never deregistered (they belong to a device, not to a fabric). */
	qsm_list_each(pos, tmp, &sim->devices) {
		struct sim_device *d = qsm_container_of(pos, struct sim_device, node);
		struct qsm_list *mpos, *mtmp;

		qsm_list_each(mpos, mtmp, &d->mrs)
			free(qsm_container_of(mpos, struct sim_mr, node));
		free(d);
	}
	free(sim);
}

int qsm_sim_fabric_new(struct qsm_sim *sim, struct qsm_fabric **ret)
{
	struct sim_fabric *f;

	if (!sim || !ret || sim->free_pending)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->efd < 0) {
		int r = -errno;

		free(f);
		return r;
	}
	f->base.ops = &sim_ops;
	f->sim = sim;
	qsm_list_init(&f->ids);
	qsm_list_init(&f->queue);
	qsm_list_add_tail(&sim->fabrics, &f->node);
	sim->nfabrics++;
	*ret = &f->base;
	return 0;
}

/* Reject what is not a fabric of this world: a sim API given the wrong pointer. */
static struct sim_fabric *world_fabric(struct qsm_sim *sim, struct qsm_fabric *base)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(pos, struct sim_fabric, node);

		if (&f->base == base)
			return f;
	}
	return NULL;
}

int qsm_sim_device_add(struct qsm_sim *sim, const char *name, const char *addr)
{
	struct sockaddr_storage ss;
	struct sim_device *d;
	struct qsm_list *pos, *tmp;

	if (!sim || !name || !addr || !*name || strlen(name) >= DEV_NAME_MAX)
		return -EINVAL;
	if (addr_parse(addr, &ss) < 0 || addr_is_any(&ss))
		return -EINVAL;
	d = device_by_name(sim, name);
	if (d && d->state == QSM_SIM_DEVICE_UP)
		return -EEXIST;
	if (d && d->state == QSM_SIM_DEVICE_REMOVING)
		return -EBUSY;
	if (device_serving(sim, &ss))
		return -EADDRINUSE;
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d)
			return -ENOMEM;
		d->sim = sim;
		qsm_list_init(&d->mrs);
		strcpy(d->name, name);
		qsm_list_add_tail(&sim->devices, &d->node);
	}
	d->addr = ss;
	d->state = QSM_SIM_DEVICE_UP;
	qsm_list_each(pos, tmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(pos, struct sim_fabric, node);

		post(&(struct post){ .fab = f, .dev = d, .event = QSM_EV_DEVICE_ADDED });
	}
	return 0;
}

int qsm_sim_device_remove(struct qsm_sim *sim, const char *name)
{
	struct sim_device *d;
	struct qsm_list *fpos, *ftmp, *pos, *tmp;

	if (!sim || !name)
		return -EINVAL;
	d = device_by_name(sim, name);
	if (!d)
		return -ENOENT;
	if (!device_up(d))
		return -EALREADY;
	d->state = QSM_SIM_DEVICE_REMOVING;

	/* Everyone on the device hears of the removal before any consequence of it. */
	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *id = qsm_container_of(pos, struct sim_id, node);

			if (id->dev == d)
				post(&(struct post){ .id = id, .dev = d, .event = QSM_EV_DEVICE_REMOVAL });
		}
	}
	/* The QPs flush; connections to other devices break as if the id were destroyed;
	 * between two ids on this device nothing can be sent any more, so nothing is. */
	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *id = qsm_container_of(pos, struct sim_id, node);

			if (id->dev != d)
				continue;
			qp_err(id);
			if (id->peer && id->peer->dev == d) {
				leave_connection(id->peer);
				leave_connection(id);
				peer_unlink(id);
			} else {
				peer_lost(id);
			}
		}
	}
	device_settle(d);
	return 0;
}

int qsm_sim_device_state(struct qsm_sim *sim, const char *name)
{
	struct sim_device *d;

	if (!sim || !name)
		return -EINVAL;
	d = device_by_name(sim, name);
	return d ? (int)d->state : -ENOENT;
}

void qsm_sim_get_stats(struct qsm_sim *sim, struct qsm_sim_stats *st)
{
	if (!st)
		return;
	if (!sim) {
		memset(st, 0, sizeof(*st));
		return;
	}
	*st = sim->st;
}

int qsm_sim_inject(struct qsm_sim *sim, enum qsm_sim_fault f, unsigned count)
{
	if (!sim || (unsigned)f >= QSM_SIM_FAULT_COUNT)
		return -EINVAL;
	sim->faults[f] = count;
	return 0;
}

int qsm_sim_release(struct qsm_sim *sim)
{
	struct qsm_list *pos, *tmp;
	int n = 0;

	if (!sim)
		return -EINVAL;
	sim->faults[QSM_SIM_FAULT_HOLD] = 0;
	qsm_list_each(pos, tmp, &sim->held) {
		struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

		qsm_list_del(&e->node);
		fabric_push(e->fab, e);
		n++;
	}
	return n;
}

static int qp_id(struct qsm_sim *sim, struct qsm_fabric *base, void *owner, struct sim_id **ret)
{
	struct sim_fabric *f;
	struct qsm_list *pos, *tmp;

	if (!sim || !base)
		return -EINVAL;
	f = world_fabric(sim, base);
	if (!f)
		return -EINVAL;
	qsm_list_each(pos, tmp, &f->ids) {
		struct sim_id *id = qsm_container_of(pos, struct sim_id, node);

		if (id->owner == owner && id->qp != SIM_QP_NONE) {
			*ret = id;
			return 0;
		}
	}
	return -ENOENT;
}

int qsm_sim_qp_fatal(struct qsm_sim *sim, struct qsm_fabric *f, void *owner)
{
	struct sim_id *id;
	int r = qp_id(sim, f, owner, &id);

	if (r < 0)
		return r;
	qp_fatal(id);
	return 0;
}

/* What the hardware reports for each QP the sim models (qp_id() finds none of SIM_QP_NONE). */
static const enum qsm_qp_state qp_state_reported[] = {
	[SIM_QP_NONE] = QSM_QP_RESET,
	[SIM_QP_INIT] = QSM_QP_INIT,
	[SIM_QP_RTS] = QSM_QP_RTS,
	[SIM_QP_ERR] = QSM_QP_ERR,
};

int qsm_sim_qp_state(struct qsm_sim *sim, struct qsm_fabric *f, void *owner)
{
	struct sim_id *id;
	int r = qp_id(sim, f, owner, &id);

	return r < 0 ? r : (int)qp_state_reported[id->qp];
}
