/* rdma-qsm: the real fabric backend (src/fabric.h, public API qsm/rdmacm.h): librdmacm for the
 * connection manager, libibverbs for PDs, CQs, QPs, completions and async events. */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <qsm/rdmacm.h>

#include "fabric/fabric.h"
#include "addr.h"
#include "fabric/rdmacm/cm_event.h"
#include "fabric/rdmacm/pending.h"
#include "list.h"

#define DEV_NAME_MAX 64           /* IB_DEVICE_NAME_MAX, terminator included */
#define CQ_INITIAL 1024           /* entries of a device's shared CQ; resized as QPs come */
#define QP_BUCKETS 256            /* qp_num -> QP, for completions */
#define DEVICE_POLL_SEC 1         /* how often new devices are looked for */
#define MARKER_BIT (1ull << 63)   /* wr_id of a drain marker: the bit and the QP's serial */
#define TAG_RECV (1ull << 62)     /* wr_id of a posted WR: recv bit, QP serial (30 bits), seq */
#define TAG_SERIAL_MASK 0x3fffffffull
#define RD_ATOM_MAX 16            /* RDMA READs in flight we offer / ask for, at most */



/*
 * ---- verbs contexts: process-wide, because librdmacm's are ----
 *
 * librdmacm opens one ibv_context per device for the whole process and (rdma-core 44)
 * closes it only when a later rdma_get_devices() or address lookup finds the device gone
 * from a *non-empty* device list and nobody references it.  When the removed device was
 * the only one, that never happens, and soft-RoCE's unregister waits for the context
 * forever.  So the backend pins every context it sees with a bound id of its own that it
 * never destroys (librdmacm's reference count never drops to 0, so librdmacm never closes
 * the context itself), counts its own users of the context across every fabric of the
 * process, and closes the context itself once the device is removed and the last of
 * those users is gone.
 */

struct vctx {
	struct qsm_list node;                /* in vctxs */
	struct ibv_context *verbs;
	struct rdma_cm_id *pin;          /* NULL: could not pin; then librdmacm closes it (or not) */
	unsigned users;                  /* ids with this context + fabric devices holding a PD/CQ */
	bool removed;
	struct qsm_list fdevs;               /* qsm_fdev.vnode: devices of every fabric with a PD/CQ here */
};

static pthread_mutex_t vctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qsm_list vctxs = { &vctxs, &vctxs };
static struct rdma_event_channel *pin_channel;   /* pins only ever get DEVICE_REMOVAL */

/* ---- objects ---- */

struct rc_fabric;

struct qsm_fdev {
	struct qsm_list node;                /* in rc_fabric.devs */
	struct rc_fabric *fab;
	int index;                       /* kernel device index: unique across remove + add */
	uint64_t guid;
	char name[DEV_NAME_MAX];
	struct ibv_context *verbs;       /* librdmacm's context, once an id showed it */
	bool present;                    /* in the device list, as far as we know */
	unsigned gets, nqps, nids, nmrs;
	/* shared resources, while gets + nqps + nmrs > 0 and a QP or MR was created once */
	struct vctx *vc;
	struct qsm_list vnode;               /* in vc->fdevs while the resources exist */
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	int cq_cap, cq_need, max_cqe;
	uint8_t max_rd_atom, max_init_rd_atom;   /* device limits, for rdma_conn_param */
	struct qsm_list qps[QP_BUCKETS];
	uint64_t async_other;
};

/* A registered memory region: holds its device's resources (PD) like a device_get(). */
struct qsm_fmr {
	struct ibv_mr *mr;
	struct qsm_fdev *dev;
};

/*
 * One WR posted on a QP, kept in post order per work queue until it completes.  The wr_id
 * given to verbs is a tag (work queue, QP serial, sequence number), never a pointer, so a
 * completion left in the shared CQ by a destroyed QP (whose number may be reused) or one for
 * a WR whose flush the backend already synthesised is recognised and dropped.
 */
struct wr_rec {
	struct qsm_pending done;         /* first: the record is its own completion (fabric_pending.h) */
	struct qsm_list node;                /* in qsm_fid.wq[] */
	uint64_t wr_id;                  /* the ULP's */
	uint32_t seq;
	uint8_t opcode;                  /* enum qsm_wr_opcode */
	bool signaled;
	bool hw;                         /* on the QP; else posted after ERR: flushed by us */
};

enum { WQ_SEND = 0, WQ_RECV = 1 };

struct qsm_fid {
	struct qsm_list node;                /* in rc_fabric.ids */
	struct rc_fabric *fab;
	struct rdma_cm_id *cm;
	void *owner;
	struct qsm_fdev *dev;            /* counted in dev->nids */
	struct vctx *vc;                 /* counted in vc->users */
	/* the QP */
	struct qsm_list qp_node;             /* in dev->qps[] */
	bool has_qp, draining, wc_error_sent, fatal_sent;
	bool qp_err;                     /* the QP is known to be in ERR: posts are flushed by us */
	uint64_t qp_serial;
	uint32_t qp_num;
	int qp_wrs;                      /* CQ entries it may use */
	struct qsm_list wq[2];               /* outstanding WRs (wr_rec), WQ_SEND and WQ_RECV */
	unsigned wq_hw[2], wq_cap[2];    /* WRs on the QP per work queue, and the ULP's limit */
	uint32_t next_seq;
	/* CONNECT_REQUEST: what the active side offered (for accept's conn_param) */
	uint8_t req_initiator_depth, req_responder_resources;
};

struct rc_fabric {
	struct qsm_fabric base;
	struct rdma_event_channel *ch;
	int epfd, tfd;
	struct qsm_list ids, devs;
	struct qsm_pending_queue pq;     /* what get_event() reports after the CM's events */
	bool polled_once;
	uint64_t next_qp_serial;
	/* completions polled: success, flush, error, dropped (stale or flushed by us already);
	 * flushes synthesised (WRs rxe did not flush, or posted after ERR); for QSM_RDMACM_STATS */
	uint64_t wc_ok, wc_flush, wc_err, wc_stale, wc_synth, posts;
};

static const struct qsm_fabric_ops rc_ops;

static struct rc_fabric *to_fab(struct qsm_fabric *f)
{
	return qsm_container_of(f, struct rc_fabric, base);
}

/* ---- pending events (fabric_pending.c) ---- */

/* Not a completion: lost if memory is short, which the runtime's state timeouts cover. */
static void pending_push(struct rc_fabric *f, int event, int status, struct qsm_fid *id,
			 struct qsm_fdev *dev, bool device_wide)
{
	(void)qsm_pending_push_event(&f->pq, event, status, id, dev, device_wide);
}

/* ---- verbs contexts ---- */

static struct vctx *vctx_find(struct ibv_context *verbs)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &vctxs) {
		struct vctx *v = qsm_container_of(pos, struct vctx, node);

		if (v->verbs == verbs)
			return v;
	}
	return NULL;
}

/* A bound id that keeps librdmacm's reference on the context: bound to the local
 * address of `via`, an id that has just shown us the context. */
static struct rdma_cm_id *pin_context(struct ibv_context *verbs, struct rdma_cm_id *via)
{
	struct sockaddr_storage ss;
	struct sockaddr *sa;
	struct rdma_cm_id *pin;

	if (!via)   /* reg_mr before any id of ours showed the context: unpinned */
		return NULL;
	sa = rdma_get_local_addr(via);
	if (sa->sa_family == AF_INET) {
		memcpy(&ss, sa, sizeof(struct sockaddr_in));
		((struct sockaddr_in *)(void *)&ss)->sin_port = 0;
	} else if (sa->sa_family == AF_INET6) {
		memcpy(&ss, sa, sizeof(struct sockaddr_in6));
		((struct sockaddr_in6 *)(void *)&ss)->sin6_port = 0;
	} else {
		return NULL;
	}
	if (!pin_channel || rdma_create_id(pin_channel, &pin, NULL, RDMA_PS_TCP) < 0)
		return NULL;
	if (rdma_bind_addr(pin, (struct sockaddr *)&ss) < 0 || pin->verbs != verbs) {
		rdma_destroy_id(pin);
		return NULL;
	}
	return pin;
}

/* Called with vctx_lock held. */
static void vctx_settle(struct vctx *v)
{
	if (!v->removed || v->users)
		return;
	qsm_list_del(&v->node);
	/* Pinned: librdmacm will never touch the context again (its entry stays referenced and
	 * is marked dead at its next device-list sync), so closing it here is ours to do. */
	if (v->pin)
		ibv_close_device(v->verbs);
	free(v);
}

static struct vctx *vctx_get(struct ibv_context *verbs, struct rdma_cm_id *via)
{
	struct vctx *v;

	pthread_mutex_lock(&vctx_lock);
	v = vctx_find(verbs);
	if (!v) {
		v = calloc(1, sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&vctx_lock);
			return NULL;
		}
		v->verbs = verbs;
		qsm_list_init(&v->fdevs);
		v->pin = pin_context(verbs, via);
		qsm_list_add_tail(&vctxs, &v->node);
	}
	v->users++;
	pthread_mutex_unlock(&vctx_lock);
	return v;
}

static void vctx_put(struct vctx *v)
{
	if (!v)
		return;
	pthread_mutex_lock(&vctx_lock);
	v->users--;
	vctx_settle(v);
	pthread_mutex_unlock(&vctx_lock);
}

/* A pin heard DEVICE_REMOVAL: the context's device is going, even if no id of ours is on it. */
static void take_pin_events(void)
{
	struct rdma_cm_event *ce;

	while (pin_channel && rdma_get_cm_event(pin_channel, &ce) == 0) {
		struct rdma_cm_id *pin = ce->id;
		bool removal = ce->event == RDMA_CM_EVENT_DEVICE_REMOVAL;
		struct qsm_list *pos, *tmp;

		rdma_ack_cm_event(ce);
		if (!removal)
			continue;
		pthread_mutex_lock(&vctx_lock);
		/* by the pin, never by the context pointer: a closed context's may be reused */
		qsm_list_each(pos, tmp, &vctxs) {
			struct vctx *v = qsm_container_of(pos, struct vctx, node);

			if (v->pin == pin) {
				v->removed = true;
				vctx_settle(v);
				break;
			}
		}
		pthread_mutex_unlock(&vctx_lock);
	}
}

static void vctx_removed(struct ibv_context *verbs)
{
	struct vctx *v;

	pthread_mutex_lock(&vctx_lock);
	v = vctx_find(verbs);
	if (v) {
		v->removed = true;
		vctx_settle(v);
	}
	pthread_mutex_unlock(&vctx_lock);
}

/* ---- devices ---- */

static int errno_or(int def)
{
	return errno > 0 ? -errno : -def;
}

static bool dev_match(const struct qsm_fdev *d, int index, uint64_t guid, const char *name)
{
	if (d->index >= 0 && index >= 0)
		return d->index == index && !strcmp(d->name, name);
	return d->guid == guid && !strcmp(d->name, name);
}

/* The device object for a device; a removed one too when `any` (an id of it may still
 * report it: the kernel index never comes back, so this cannot confuse two devices). */
static struct qsm_fdev *dev_find(struct rc_fabric *f, int index, uint64_t guid, const char *name,
				 bool any)
{
	struct qsm_list *pos, *tmp;
	struct qsm_fdev *gone = NULL;

	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);

		if (!dev_match(d, index, guid, name))
			continue;
		if (d->present)
			return d;
		if (!gone && index >= 0)
			gone = d;
	}
	return any ? gone : NULL;
}

static struct qsm_fdev *dev_new(struct rc_fabric *f, struct ibv_device *ibdev)
{
	struct qsm_fdev *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->fab = f;
	d->index = ibv_get_device_index(ibdev);
	d->guid = ibv_get_device_guid(ibdev);
	snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(ibdev));
	d->present = true;
	qsm_list_init(&d->vnode);
	for (int i = 0; i < QP_BUCKETS; i++)
		qsm_list_init(&d->qps[i]);
	qsm_list_add_tail(&f->devs, &d->node);
	return d;
}

static struct qsm_fdev *dev_of_verbs(struct rc_fabric *f, struct ibv_context *verbs)
{
	struct ibv_device *ibdev = verbs->device;
	struct qsm_fdev *d = dev_find(f, ibv_get_device_index(ibdev), ibv_get_device_guid(ibdev),
				      ibv_get_device_name(ibdev), true);

	if (!d) {
		d = dev_new(f, ibdev);
		/* An id met the device before the poll did: it is new all the same, and
		 * the queues waiting in the gap must hear of it now, not after their backoff. */
		if (d && f->polled_once)
			pending_push(f, QSM_EV_DEVICE_ADDED, 0, NULL, d, false);
	}
	if (d && !d->verbs)
		d->verbs = verbs;
	return d;
}

static void epoll_del(struct rc_fabric *f, int fd)
{
	(void)epoll_ctl(f->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static int epoll_add(struct rc_fabric *f, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };

	return epoll_ctl(f->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static void dev_release_resources(struct qsm_fdev *d)
{
	struct rc_fabric *f = d->fab;

	if (!d->pd)
		return;
	pthread_mutex_lock(&vctx_lock);
	qsm_list_del(&d->vnode);
	pthread_mutex_unlock(&vctx_lock);
	epoll_del(f, d->cc->fd);
	epoll_del(f, d->verbs->async_fd);
	ibv_destroy_cq(d->cq);
	ibv_destroy_comp_channel(d->cc);
	ibv_dealloc_pd(d->pd);
	d->cq = NULL;
	d->cc = NULL;
	d->pd = NULL;
	qsm_pending_drop(&f->pq, NULL, d);
	vctx_put(d->vc);
	d->vc = NULL;
}

/* Every reference of a device is checked here: resources go when unused, the object
 * when nothing refers to it and it is no longer in the device list. */
static void dev_settle(struct qsm_fdev *d)
{
	if (!d->gets && !d->nqps && !d->nmrs)
		dev_release_resources(d);
	if (d->present || d->gets || d->nqps || d->nmrs || d->nids)
		return;
	qsm_pending_drop(&d->fab->pq, NULL, d);
	qsm_list_del(&d->node);
	free(d);
}

/* rdma_cm said so: the device is being unregistered. */
static void dev_removed(struct qsm_fdev *d)
{
	d->present = false;
	if (d->verbs)
		vctx_removed(d->verbs);
	dev_settle(d);
}

static int dev_get_resources(struct qsm_fdev *d, struct rdma_cm_id *via)
{
	struct rc_fabric *f = d->fab;
	struct ibv_device_attr attr;
	int r;

	if (d->pd)
		return 0;
	if (!d->verbs)
		return -ENODEV;
	if (ibv_query_device(d->verbs, &attr))
		return -ENODEV;
	d->vc = vctx_get(d->verbs, via);
	if (!d->vc)
		return -ENOMEM;
	d->max_cqe = attr.max_cqe;
	d->max_rd_atom = (uint8_t)(attr.max_qp_rd_atom > RD_ATOM_MAX ? RD_ATOM_MAX : attr.max_qp_rd_atom);
	d->max_init_rd_atom = (uint8_t)(attr.max_qp_init_rd_atom > RD_ATOM_MAX ? RD_ATOM_MAX :
					attr.max_qp_init_rd_atom);
	d->cq_cap = CQ_INITIAL < attr.max_cqe ? CQ_INITIAL : attr.max_cqe;
	d->pd = ibv_alloc_pd(d->verbs);
	if (!d->pd) {
		r = errno_or(ENOMEM);
		goto fail;
	}
	d->cc = ibv_create_comp_channel(d->verbs);
	if (!d->cc) {
		r = errno_or(ENOMEM);
		goto fail;
	}
	d->cq = ibv_create_cq(d->verbs, d->cq_cap, d, d->cc, 0);
	if (!d->cq) {
		r = errno_or(ENOMEM);
		goto fail;
	}
	d->cq_cap = d->cq->cqe;
	if ((r = -ibv_req_notify_cq(d->cq, 0)) < 0 || (r = set_nonblock(d->cc->fd)) < 0 ||
	    (r = set_nonblock(d->verbs->async_fd)) < 0 || (r = epoll_add(f, d->cc->fd)) < 0)
		goto fail;
	/* Another fabric of the process may watch the same async fd: that is fine. */
	r = epoll_add(f, d->verbs->async_fd);
	if (r < 0 && r != -EEXIST) {
		epoll_del(f, d->cc->fd);
		goto fail;
	}
	pthread_mutex_lock(&vctx_lock);
	qsm_list_add_tail(&d->vc->fdevs, &d->vnode);
	pthread_mutex_unlock(&vctx_lock);
	return 0;
fail:
	if (d->cq)
		ibv_destroy_cq(d->cq);
	if (d->cc)
		ibv_destroy_comp_channel(d->cc);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	d->cq = NULL;
	d->cc = NULL;
	d->pd = NULL;
	vctx_put(d->vc);
	d->vc = NULL;
	return r;
}

/* ---- ids ---- */

static struct qsm_fid *fid_new(struct rc_fabric *f, struct rdma_cm_id *cm, void *owner)
{
	struct qsm_fid *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->fab = f;
	id->cm = cm;
	id->owner = owner;
	qsm_list_init(&id->qp_node);
	qsm_list_init(&id->wq[WQ_SEND]);
	qsm_list_init(&id->wq[WQ_RECV]);
	cm->context = id;
	qsm_list_add_tail(&f->ids, &id->node);
	return id;
}

/* The id's device, once librdmacm knows it (bind, address resolution, a request). */
static void fid_attach(struct qsm_fid *id)
{
	if (id->dev || !id->cm->verbs)
		return;
	id->dev = dev_of_verbs(id->fab, id->cm->verbs);
	if (id->dev)
		id->dev->nids++;
	id->vc = vctx_get(id->cm->verbs, id->cm);
}

static void qp_unhash(struct qsm_fid *id)
{
	qsm_list_del(&id->qp_node);
}

static struct qsm_fid *qp_lookup(struct qsm_fdev *d, uint32_t qp_num)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &d->qps[qp_num % QP_BUCKETS]) {
		struct qsm_fid *id = qsm_container_of(pos, struct qsm_fid, qp_node);

		if (id->qp_num == qp_num)
			return id;
	}
	return NULL;
}

/* ---- fabric ops ---- */

static void rc_destroy_qp(struct qsm_fid *id);

static void rc_destroy(struct qsm_fabric *base)
{
	struct rc_fabric *f = to_fab(base);
	struct qsm_list *pos, *tmp;

	if (!base)
		return;
	if (getenv("QSM_RDMACM_STATS"))
		fprintf(stderr, "qsm rdmacm: posts %llu; completions: ok %llu, flush %llu, error %llu, "
			"dropped %llu; flushes synthesised %llu\n", (unsigned long long)f->posts,
			(unsigned long long)f->wc_ok, (unsigned long long)f->wc_flush,
			(unsigned long long)f->wc_err, (unsigned long long)f->wc_stale,
			(unsigned long long)f->wc_synth);
	/* The runtime destroyed every id; what is left is the device list's knowledge. */
	qsm_list_each(pos, tmp, &f->ids) {
		struct qsm_fid *id = qsm_container_of(pos, struct qsm_fid, node);

		rc_ops.destroy_id(id);
	}
	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);

		d->gets = 0;
		d->present = false;
		dev_settle(d);
	}
	qsm_pending_fini(&f->pq);
	rdma_destroy_event_channel(f->ch);
	close(f->epfd);
	close(f->tfd);
	free(f);
}

static int rc_fd(struct qsm_fabric *base)
{
	return base ? to_fab(base)->epfd : -EINVAL;
}

static void fill_pdata(struct qsm_fabric_event *ev, const struct rdma_cm_event *ce)
{
	size_t len = ce->param.conn.private_data_len;

	if (!ce->param.conn.private_data)
		len = 0;
	if (len > QSM_FABRIC_PDATA_MAX)
		len = QSM_FABRIC_PDATA_MAX;
	ev->private_data_len = len;
	if (len)
		memcpy(ev->private_data, ce->param.conn.private_data, len);
}

/* One rdma_cm event, copied and acked; 0, or -EAGAIN when there is none. */
static int take_cm_event(struct rc_fabric *f, struct qsm_fabric_event *ev)
{
	for (;;) {
		struct rdma_cm_event *ce;
		struct qsm_fid *id, *lid = NULL;

		if (rdma_get_cm_event(f->ch, &ce) < 0) {
			/* ENODEV: librdmacm has no device at all right now, so no event either */
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENODEV || errno == EINTR)
				return -EAGAIN;
			return -errno;
		}
		memset(ev, 0, offsetof(struct qsm_fabric_event, private_data));
		ev->event = qsm_cm_event_map((int)ce->event);
		ev->status = ev->event == QSM_EV_CM_UNKNOWN ? (int)ce->event : ce->status;
		fill_pdata(ev, ce);
		if (ev->event == QSM_EV_CM_UNKNOWN && !ce->id->context) {
			/* Every id of ours has a context: this is one the kernel made for us (as it does
			 * for a request) for an event we cannot name.  Nobody owns it: the ctx counts it
			 * as an orphan, and the id goes, so that nothing is left behind. */
			rdma_ack_cm_event(ce);
			rdma_destroy_id(ce->id);
			return 0;
		}
		if (ce->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			lid = ce->listen_id->context;
			id = fid_new(f, ce->id, NULL);
			if (!id) {
				rdma_reject(ce->id, NULL, 0);
				rdma_ack_cm_event(ce);
				rdma_destroy_id(ce->id);
				continue;
			}
			ev->listen_owner = lid ? lid->owner : NULL;
			id->req_initiator_depth = ce->param.conn.initiator_depth;
			id->req_responder_resources = ce->param.conn.responder_resources;
		} else {
			id = ce->id->context;
		}
		rdma_ack_cm_event(ce);
		fid_attach(id);
		ev->id = id;
		ev->owner = id->owner;
		if (ev->event == QSM_EV_DEVICE_REMOVAL) {
			ev->device = id->dev;
			if (id->dev)
				dev_removed(id->dev);
			else if (id->cm->verbs)
				vctx_removed(id->cm->verbs);
		}
		return 0;
	}
}

/* ---- the data path: outstanding WRs, completions ---- */

static enum qsm_wc_status wc_status(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS: return QSM_WC_SUCCESS;
	case IBV_WC_LOC_LEN_ERR: return QSM_WC_LOC_LEN_ERR;
	case IBV_WC_LOC_PROT_ERR: return QSM_WC_LOC_PROT_ERR;
	case IBV_WC_WR_FLUSH_ERR: return QSM_WC_WR_FLUSH_ERR;
	case IBV_WC_REM_ACCESS_ERR: return QSM_WC_REM_ACCESS_ERR;
	case IBV_WC_RETRY_EXC_ERR: return QSM_WC_RETRY_EXC_ERR;
	case IBV_WC_RNR_RETRY_EXC_ERR: return QSM_WC_RNR_RETRY_EXC_ERR;
	default: return QSM_WC_GENERAL_ERR;
	}
}

static uint64_t wr_tag(const struct qsm_fid *id, int wq, uint32_t seq)
{
	return ((id->qp_serial & TAG_SERIAL_MASK) << 32) | (wq == WQ_RECV ? TAG_RECV : 0) | seq;
}

static void rec_unlink(struct qsm_fid *id, int wq, struct wr_rec *r)
{
	qsm_list_del(&r->node);
	if (r->hw)
		id->wq_hw[wq]--;
}

/* A WR that completes without a completion (an unsignaled send, or its QP is gone). */
static void rec_free(struct qsm_fid *id, int wq, struct wr_rec *r)
{
	rec_unlink(id, wq, r);
	free(r);
}

/* The WR's completion, carried by its own record: no memory needed, so none is ever lost. */
static void rec_complete(struct qsm_fid *id, int wq, struct wr_rec *r, enum qsm_wc_status status,
			 uint32_t byte_len)
{
	struct qsm_fabric_wc wc = { .wr_id = r->wr_id, .status = status,
				    .opcode = (enum qsm_wr_opcode)r->opcode,
				    .byte_len = status == QSM_WC_SUCCESS ? byte_len : 0 };

	rec_unlink(id, wq, r);
	qsm_pending_complete(&id->fab->pq, &r->done, id, &wc);
}

/* A WR the QP will never complete (posted after ERR, or not flushed): its flush, from us. */
static void rec_flush(struct qsm_fid *id, int wq, struct wr_rec *r)
{
	id->fab->wc_synth++;
	rec_complete(id, wq, r, QSM_WC_WR_FLUSH_ERR, 0);
}

/* WRs posted after ERR that nothing on the QP precedes any more: flushed now, in order. */
static void wq_flush_heads(struct qsm_fid *id)
{
	for (int wq = WQ_SEND; wq <= WQ_RECV; wq++)
		while (!qsm_list_empty(&id->wq[wq])) {
			struct wr_rec *r = qsm_container_of(id->wq[wq].next, struct wr_rec, node);

			if (r->hw)
				break;
			rec_flush(id, wq, r);
		}
}

/* The drain marker completed: whatever is still outstanding will never complete on rxe (it
 * may not flush receives) or completes late; flush it all now, before DRAINED. */
static void wq_flush_all(struct qsm_fid *id)
{
	for (int wq = WQ_SEND; wq <= WQ_RECV; wq++)
		while (!qsm_list_empty(&id->wq[wq]))
			rec_flush(id, wq, qsm_container_of(id->wq[wq].next, struct wr_rec, node));
}

/* The QP is gone with its WRs: no completion for them (the contract). */
static void wq_discard(struct qsm_fid *id)
{
	for (int wq = WQ_SEND; wq <= WQ_RECV; wq++)
		while (!qsm_list_empty(&id->wq[wq]))
			rec_free(id, wq, qsm_container_of(id->wq[wq].next, struct wr_rec, node));
}

static void wc_take(struct qsm_fdev *d, const struct ibv_wc *wc)
{
	struct qsm_fid *id = qp_lookup(d, wc->qp_num);
	enum qsm_wc_status st;
	struct wr_rec *r = NULL;
	struct qsm_list *pos, *tmp;
	uint32_t seq;
	int wq;

	if (wc->wr_id & MARKER_BIT) {
		if (id && id->draining && id->qp_serial == (wc->wr_id & ~MARKER_BIT)) {
			id->draining = false;
			id->qp_err = true;
			wq_flush_all(id);
			pending_push(d->fab, QSM_EV_DRAINED, 0, id, NULL, false);
		}
		return;
	}
	/* a destroyed QP's leftovers (its number may be reused), or a WR flushed by us already */
	if (!id || ((wc->wr_id >> 32) & TAG_SERIAL_MASK) != (id->qp_serial & TAG_SERIAL_MASK)) {
		d->fab->wc_stale++;
		return;
	}
	wq = wc->wr_id & TAG_RECV ? WQ_RECV : WQ_SEND;
	seq = (uint32_t)wc->wr_id;
	qsm_list_each(pos, tmp, &id->wq[wq]) {
		struct wr_rec *c = qsm_container_of(pos, struct wr_rec, node);

		if (c->seq == seq) {
			r = c;
			break;
		}
	}
	if (!r || !r->hw) {
		d->fab->wc_stale++;
		return;
	}
	/* Unsignaled sends before it completed silently (a send queue completes in order). */
	if (wq == WQ_SEND)
		qsm_list_each(pos, tmp, &id->wq[wq]) {
			struct wr_rec *c = qsm_container_of(pos, struct wr_rec, node);

			if (c == r)
				break;
			if (c->hw && !c->signaled)
				rec_free(id, wq, c);
		}
	st = wc_status(wc->status);
	if (st == QSM_WC_SUCCESS)
		d->fab->wc_ok++;
	else if (st == QSM_WC_WR_FLUSH_ERR)
		d->fab->wc_flush++;
	else
		d->fab->wc_err++;
	if (st != QSM_WC_SUCCESS)
		id->qp_err = true;   /* an error completion moves an RC QP to ERR */
	/* wc->opcode is undefined in error completions: the WR's own is reported */
	if (wq == WQ_RECV || r->signaled || st != QSM_WC_SUCCESS)
		rec_complete(id, wq, r, st, wc->byte_len);
	else
		rec_free(id, wq, r);
	if (st != QSM_WC_SUCCESS && st != QSM_WC_WR_FLUSH_ERR && !id->wc_error_sent) {
		id->wc_error_sent = true;
		pending_push(d->fab, QSM_EV_WC_ERROR, -EIO, id, NULL, false);
	}
	if (id->qp_err)
		wq_flush_heads(id);
}

static void harvest_completions(struct rc_fabric *f)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);
		struct ibv_cq *cq;
		void *cq_ctx;
		struct ibv_wc wc[16];
		unsigned got = 0;
		int n;

		if (!d->cq)
			continue;
		while (ibv_get_cq_event(d->cc, &cq, &cq_ctx) == 0)
			got++;
		if (got) {
			ibv_ack_cq_events(d->cq, got);
			ibv_req_notify_cq(d->cq, 0);
		}
		/* Poll after re-arming: nothing that arrived in between is missed. */
		while ((n = ibv_poll_cq(d->cq, 16, wc)) > 0)
			for (int i = 0; i < n; i++)
				wc_take(d, &wc[i]);
	}
}

/* QP_FATAL for an id; from whichever fabric read the async event. */
static void route_qp_fatal(struct ibv_qp *qp)
{
	struct qsm_fid *id = qp->qp_context;

	if (id)
		pending_push(id->fab, QSM_EV_QP_FATAL, -EIO, id, NULL, false);
}

static void route_device_fatal(struct ibv_context *verbs)
{
	struct vctx *v;
	struct qsm_list *pos, *tmp;

	pthread_mutex_lock(&vctx_lock);
	v = vctx_find(verbs);
	if (v) {
		qsm_list_each(pos, tmp, &v->fdevs) {
			struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, vnode);

			pending_push(d->fab, QSM_EV_QP_FATAL, -EIO, NULL, d, true);
		}
	}
	pthread_mutex_unlock(&vctx_lock);
}

static void harvest_async(struct rc_fabric *f)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);
		struct ibv_async_event ae;

		if (!d->pd)
			continue;
		while (ibv_get_async_event(d->verbs, &ae) == 0) {
			switch (ae.event_type) {
			case IBV_EVENT_QP_FATAL:
			case IBV_EVENT_QP_REQ_ERR:
			case IBV_EVENT_QP_ACCESS_ERR:
				route_qp_fatal(ae.element.qp);
				break;
			case IBV_EVENT_CQ_ERR:
			case IBV_EVENT_DEVICE_FATAL:
				/* a shared CQ that overflowed is as dead as the device */
				route_device_fatal(d->verbs);
				break;
			default:
				d->async_other++;
				break;
			}
			ibv_ack_async_event(&ae);
		}
	}
}

/* The device list, at most once a second: new devices become DEVICE_ADDED. */
static void poll_devices(struct rc_fabric *f)
{
	uint64_t ticks;
	struct ibv_device **list;
	struct qsm_list *pos, *tmp;
	int n;

	if (f->polled_once && read(f->tfd, &ticks, sizeof(ticks)) != sizeof(ticks))
		return;
	list = ibv_get_device_list(&n);
	if (!list)
		return;
	{
		bool seen[n > 0 ? n : 1];

		memset(seen, 0, sizeof(seen));
		qsm_list_each(pos, tmp, &f->devs) {
			struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);
			bool found = false;

			if (!d->present)
				continue;
			for (int i = 0; i < n; i++) {
				if (dev_match(d, ibv_get_device_index(list[i]), ibv_get_device_guid(list[i]),
					      ibv_get_device_name(list[i]))) {
					seen[i] = found = true;
					break;
				}
			}
			/* Not authoritative for the context: only rdma_cm's DEVICE_REMOVAL is. */
			if (!found) {
				d->present = false;
				dev_settle(d);
			}
		}
		for (int i = 0; i < n; i++) {
			struct qsm_fdev *d;

			if (seen[i])
				continue;
			d = dev_new(f, list[i]);
			if (d && f->polled_once)
				pending_push(f, QSM_EV_DEVICE_ADDED, 0, NULL, d, false);
		}
	}
	ibv_free_device_list(list);
	f->polled_once = true;
}

static int rc_get_event(struct qsm_fabric *base, struct qsm_fabric_event *ev)
{
	struct rc_fabric *f;
	struct qsm_pending *p;
	int r;

	if (!base || !ev)
		return -EINVAL;
	f = to_fab(base);
	r = take_cm_event(f, ev);
	if (r != -EAGAIN)
		return r;
	take_pin_events();
	harvest_completions(f);
	harvest_async(f);
	poll_devices(f);
	while ((p = qsm_pending_pop(&f->pq))) {
		if (p->device_wide) {
			/* expanded here, in the fabric's own thread, where its QP list is safe */
			for (int b = 0; b < QP_BUCKETS; b++) {
				struct qsm_list *pos, *tmp;

				qsm_list_each(pos, tmp, &p->dev->qps[b])
					pending_push(f, p->event, p->status,
						     qsm_container_of(pos, struct qsm_fid, qp_node), NULL, false);
			}
			qsm_pending_release(p);
			continue;
		}
		if (p->id && p->event == QSM_EV_QP_FATAL) {
			if (!p->id->has_qp || p->id->fatal_sent) {
				qsm_pending_release(p);
				continue;
			}
			p->id->fatal_sent = true;
			p->id->qp_err = true;
			wq_flush_heads(p->id);
		}
		memset(ev, 0, offsetof(struct qsm_fabric_event, private_data));
		ev->wc = p->wc;
		ev->event = p->event;
		ev->status = p->status;
		ev->id = p->id;
		ev->owner = p->id ? p->id->owner : NULL;
		ev->device = p->id ? p->id->dev : p->dev;
		qsm_pending_release(p);
		return 0;
	}
	return -EAGAIN;
}

static int rc_create_id(struct qsm_fabric *base, void *owner, struct qsm_fid **ret)
{
	struct rc_fabric *f;
	struct rdma_cm_id *cm;
	struct qsm_fid *id;

	if (!base || !ret)
		return -EINVAL;
	f = to_fab(base);
	if (rdma_create_id(f->ch, &cm, NULL, RDMA_PS_TCP) < 0)
		return errno_or(ENOMEM);
	id = fid_new(f, cm, owner);
	if (!id) {
		rdma_destroy_id(cm);
		return -ENOMEM;
	}
	*ret = id;
	return 0;
}

static void rc_set_owner(struct qsm_fid *id, void *owner)
{
	if (id)
		id->owner = owner;
}

static void rc_destroy_id(struct qsm_fid *id)
{
	struct qsm_fdev *d;

	if (!id)
		return;
	rc_destroy_qp(id);
	qsm_pending_drop(&id->fab->pq, id, NULL);
	/* Acked events only, so this cannot wait on anything of ours. */
	rdma_destroy_id(id->cm);
	qsm_list_del(&id->node);
	d = id->dev;
	vctx_put(id->vc);
	free(id);
	if (d) {
		d->nids--;
		dev_settle(d);
	}
}


static int rc_bind(struct qsm_fid *id, const struct sockaddr *addr)
{
	struct sockaddr_storage ss;
	int r;

	if (!id || !addr)
		return -EINVAL;
	if ((r = qsm_sockaddr_copy(&ss, addr)) < 0)
		return r;
	if (rdma_bind_addr(id->cm, (struct sockaddr *)&ss) < 0)
		return errno_or(EINVAL);
	fid_attach(id);
	return 0;
}

static int rc_listen(struct qsm_fid *id, int backlog)
{
	if (!id)
		return -EINVAL;
	if (rdma_listen(id->cm, backlog) < 0)
		return errno_or(EINVAL);
	fid_attach(id);
	return 0;
}

static int rc_resolve_addr(struct qsm_fid *id, const struct sockaddr *src, const struct sockaddr *dst,
			   int timeout_ms)
{
	struct sockaddr_storage s, d;
	int r;

	if (!id || !dst)
		return -EINVAL;
	if ((r = qsm_sockaddr_copy(&d, dst)) < 0 || (src && (r = qsm_sockaddr_copy(&s, src)) < 0))
		return r;
	if (rdma_resolve_addr(id->cm, src ? (struct sockaddr *)&s : NULL, (struct sockaddr *)&d,
			      timeout_ms) < 0)
		return errno_or(EINVAL);
	return 0;
}

static int rc_resolve_route(struct qsm_fid *id, int timeout_ms)
{
	if (!id)
		return -EINVAL;
	if (!id->cm->verbs)   /* librdmacm would dereference it */
		return -EINVAL;
	if (rdma_resolve_route(id->cm, timeout_ms) < 0)
		return errno_or(EINVAL);
	return 0;
}

/* The shared CQ must hold every completion its QPs can have outstanding. */
static int cq_reserve(struct qsm_fdev *d, int more)
{
	int need = d->cq_need + more, cap = d->cq_cap;

	if (need <= cap)
		return 0;
	if (need > d->max_cqe)
		return -ENOMEM;
	while (cap < need)
		cap = cap * 2 > d->max_cqe ? d->max_cqe : cap * 2;
	if (ibv_resize_cq(d->cq, cap))
		return -ENOMEM;
	d->cq_cap = d->cq->cqe;
	return d->cq_cap >= need ? 0 : -ENOMEM;
}

static int rc_create_qp(struct qsm_fid *id, const struct qsm_fabric_qp_attr *a)
{
	struct qsm_fdev *d;
	struct ibv_qp_init_attr init;
	int r, wrs;

	if (!id || !a)
		return -EINVAL;
	if (id->has_qp)
		return -EEXIST;
	fid_attach(id);
	d = id->dev;
	if (!d)
		return -EINVAL;
	if (!d->present)
		return -ENODEV;
	r = dev_get_resources(d, id->cm);
	if (r < 0)
		return r;
	/* One more of each for the drain marker. */
	wrs = (int)a->max_send_wr + 1 + (int)a->max_recv_wr + 1;
	r = cq_reserve(d, wrs);
	if (r < 0)
		goto fail;
	memset(&init, 0, sizeof(init));
	init.qp_context = id;
	init.send_cq = d->cq;
	init.recv_cq = d->cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = a->max_send_wr + 1;
	init.cap.max_recv_wr = a->max_recv_wr + 1;
	init.cap.max_send_sge = a->max_send_sge ? a->max_send_sge : 1;
	init.cap.max_recv_sge = a->max_recv_sge ? a->max_recv_sge : 1;
	init.cap.max_inline_data = a->max_inline_data;
	if (rdma_create_qp(id->cm, d->pd, &init) < 0) {
		r = errno_or(ENOMEM);
		goto fail;
	}
	id->has_qp = true;
	id->draining = id->wc_error_sent = id->fatal_sent = id->qp_err = false;
	id->wq_cap[WQ_SEND] = a->max_send_wr;
	id->wq_cap[WQ_RECV] = a->max_recv_wr;
	id->qp_serial = ++id->fab->next_qp_serial;
	id->qp_num = id->cm->qp->qp_num;
	id->qp_wrs = wrs;
	d->cq_need += wrs;
	d->nqps++;
	qsm_list_add_tail(&d->qps[id->qp_num % QP_BUCKETS], &id->qp_node);
	return 0;
fail:
	dev_settle(d);
	return r;
}

static void rc_destroy_qp(struct qsm_fid *id)
{
	struct qsm_fdev *d;

	if (!id || !id->has_qp)
		return;
	d = id->dev;
	rdma_destroy_qp(id->cm);
	qp_unhash(id);
	wq_discard(id);
	id->has_qp = false;
	id->draining = false;
	id->qp_err = false;
	qsm_pending_drop(&id->fab->pq, id, NULL);
	d->cq_need -= id->qp_wrs;
	d->nqps--;
	dev_settle(d);
}

static uint8_t clamp_rd(unsigned v)
{
	return (uint8_t)(v < 1 ? 1 : v > RD_ATOM_MAX ? RD_ATOM_MAX : v);
}

/*
 * As rping: RDMA READ needs responder resources (reads the peer may have in flight here) and
 * an initiator depth (reads we may have in flight there), at least 1 each; retries at the
 * maximum (rnr_retry_count 7 = retry forever on RNR NAK).  The device's limits, at most
 * RD_ATOM_MAX; accept answers no more than the request offered.
 */
static void conn_param(struct qsm_fid *id, struct rdma_conn_param *p, const void *pdata, size_t len,
		       bool accept)
{
	unsigned resp = id->dev && id->dev->max_rd_atom ? id->dev->max_rd_atom : 1;
	unsigned init = id->dev && id->dev->max_init_rd_atom ? id->dev->max_init_rd_atom : 1;

	if (accept) {
		if (id->req_initiator_depth < resp)
			resp = id->req_initiator_depth;
		if (id->req_responder_resources < init)
			init = id->req_responder_resources;
	}
	memset(p, 0, sizeof(*p));
	p->private_data = len ? pdata : NULL;
	p->private_data_len = (uint8_t)len;
	p->responder_resources = clamp_rd(resp);
	p->initiator_depth = clamp_rd(init);
	p->flow_control = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

static int rc_connect(struct qsm_fid *id, const void *pdata, size_t len)
{
	struct rdma_conn_param p;

	if (!id || len > 255 || (len && !pdata))
		return -EINVAL;
	conn_param(id, &p, pdata, len, false);
	if (rdma_connect(id->cm, &p) < 0)
		return errno_or(EINVAL);
	return 0;
}

static int rc_accept(struct qsm_fid *id, const void *pdata, size_t len)
{
	struct rdma_conn_param p;

	if (!id || len > 255 || (len && !pdata))
		return -EINVAL;
	if (!id->cm->qp)   /* librdmacm would read the QP number from conn_param */
		return -EINVAL;
	conn_param(id, &p, pdata, len, true);
	if (rdma_accept(id->cm, &p) < 0)
		return errno_or(EINVAL);
	return 0;
}

static int rc_reject(struct qsm_fid *id, const void *pdata, size_t len)
{
	if (!id || len > 255 || (len && !pdata))
		return -EINVAL;
	if (rdma_reject(id->cm, pdata, (uint8_t)len) < 0)
		return errno_or(EINVAL);
	return 0;
}

static int rc_disconnect(struct qsm_fid *id)
{
	if (!id)
		return -EINVAL;
	if (!id->cm->verbs)   /* never had a device: nothing to disconnect */
		return -EINVAL;
	if (rdma_disconnect(id->cm) < 0)
		return errno_or(EINVAL);
	/* librdmacm moved an IB/RoCE QP to ERR (iWARP: to SQD, and the drain follows) */
	if (id->has_qp && id->cm->verbs->device->transport_type == IBV_TRANSPORT_IB)
		id->qp_err = true;
	return 0;
}

static int rc_drain(struct qsm_fid *id)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	struct ibv_qp *qp;
	uint64_t tag;
	int r;

	if (!id || !id->has_qp)
		return -EINVAL;
	qp = id->cm->qp;
	tag = MARKER_BIT | id->qp_serial;
	r = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
	if (r)
		return -r;
	id->qp_err = true;
	/* The marker flushes behind everything posted before it: a send first, because the
	 * send queue flushes on every provider; a receive if the send queue is full. */
	{
		struct ibv_send_wr swr = { .wr_id = tag, .opcode = IBV_WR_SEND,
					   .send_flags = IBV_SEND_SIGNALED }, *bad_s;
		struct ibv_recv_wr rwr = { .wr_id = tag }, *bad_r;

		r = ibv_post_send(qp, &swr, &bad_s);
		if (r)
			r = ibv_post_recv(qp, &rwr, &bad_r);
	}
	if (r)
		return -r;
	id->draining = true;
	return 0;
}

static struct qsm_fdev *rc_id_device(struct qsm_fid *id)
{
	if (!id)
		return NULL;
	fid_attach(id);
	return id->dev;
}

static void rc_device_get(struct qsm_fdev *d)
{
	if (d)
		d->gets++;
}

static void rc_device_put(struct qsm_fdev *d)
{
	if (!d || !d->gets)
		return;
	d->gets--;
	dev_settle(d);
}

static const char *rc_device_name(struct qsm_fdev *d)
{
	return d ? d->name : NULL;
}

/* An address whose interface the device serves: a temporary id bound to each candidate
 * tells which device rdma_cm picks for it. */
static int rc_device_addr(struct qsm_fdev *d, struct sockaddr_storage *ss)
{
	struct ifaddrs *ifa, *i;
	int r = -ENOENT;

	if (!d || !ss)
		return -EINVAL;
	if (!d->present)
		return -ENOENT;
	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (i = ifa; i && r == -ENOENT; i = i->ifa_next) {
		struct sockaddr_storage cand;
		struct rdma_cm_id *tmp;

		if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK) || qsm_sockaddr_copy(&cand, i->ifa_addr) < 0)
			continue;
		if (rdma_create_id(d->fab->ch, &tmp, NULL, RDMA_PS_TCP) < 0)
			continue;
		if (rdma_bind_addr(tmp, (struct sockaddr *)&cand) == 0 && tmp->verbs &&
		    dev_match(d, ibv_get_device_index(tmp->verbs->device),
			      ibv_get_device_guid(tmp->verbs->device),
			      ibv_get_device_name(tmp->verbs->device))) {
			*ss = cand;
			r = 0;
		}
		rdma_destroy_id(tmp);
	}
	freeifaddrs(ifa);
	return r;
}

static int rc_id_src_addr(struct qsm_fid *id, struct sockaddr_storage *ss)
{
	struct sockaddr *sa;

	if (!id || !ss)
		return -EINVAL;
	sa = rdma_get_local_addr(id->cm);
	if (qsm_sockaddr_copy(ss, sa) < 0)
		return -ENOENT;
	return 0;
}

/* ---- data path ops ---- */

static int rc_reg_mr(struct qsm_fdev *d, void *addr, size_t len, int access, struct qsm_fmr **ret,
		     uint32_t *lkey, uint32_t *rkey)
{
	struct qsm_fmr *m;
	int ibv_access = 0, r;

	if (!d || !addr || !len || !ret || !lkey || !rkey ||
	    (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ)))
		return -EINVAL;
	if (!d->present)
		return -ENODEV;
	if (access & QSM_ACCESS_LOCAL_WRITE)
		ibv_access |= IBV_ACCESS_LOCAL_WRITE;
	if (access & QSM_ACCESS_REMOTE_WRITE)
		ibv_access |= IBV_ACCESS_REMOTE_WRITE;
	if (access & QSM_ACCESS_REMOTE_READ)
		ibv_access |= IBV_ACCESS_REMOTE_READ;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	/* the PD: created with the first QP or MR on the device */
	r = dev_get_resources(d, NULL);
	if (r < 0) {
		free(m);
		return r;
	}
	errno = 0;
	m->mr = ibv_reg_mr(d->pd, addr, len, ibv_access);
	if (!m->mr) {
		r = errno_or(ENOMEM);
		free(m);
		dev_settle(d);
		return r;
	}
	m->dev = d;
	d->nmrs++;
	*lkey = m->mr->lkey;
	*rkey = m->mr->rkey;
	*ret = m;
	return 0;
}

static void rc_dereg_mr(struct qsm_fmr *m)
{
	struct qsm_fdev *d;

	if (!m)
		return;
	d = m->dev;
	ibv_dereg_mr(m->mr);
	free(m);
	d->nmrs--;
	dev_settle(d);
}

static int sges_ok(const struct qsm_fabric_sge *sg, int n)
{
	return n >= 0 && n <= QSM_FABRIC_MAX_SGE && (!n || sg);
}

static struct wr_rec *rec_new(struct qsm_fid *id, uint64_t wr_id, enum qsm_wr_opcode op,
			      bool signaled)
{
	/* the completion's memory too, now: the post fails if memory is short, never the WC */
	struct wr_rec *r = qsm_pending_alloc(sizeof(*r));

	if (!r)
		return NULL;
	qsm_list_init(&r->node);
	r->wr_id = wr_id;
	r->opcode = (uint8_t)op;
	r->signaled = signaled;
	r->seq = id->next_seq++;
	return r;
}

/* Posted to a QP known to be in ERR: not given to the QP (rxe 6.1 may never flush a receive
 * posted in ERR), flushed by us, behind what the work queue still holds. */
static int post_flushed(struct qsm_fid *id, int wq, uint64_t wr_id, enum qsm_wr_opcode op)
{
	struct wr_rec *r = rec_new(id, wr_id, op, true);

	if (!r)
		return -ENOMEM;
	if (qsm_list_empty(&id->wq[wq])) {
		id->fab->wc_synth++;
		rec_complete(id, wq, r, QSM_WC_WR_FLUSH_ERR, 0);
		return 0;
	}
	qsm_list_add_tail(&id->wq[wq], &r->node);
	return 0;
}

static int rc_post_send(struct qsm_fid *id, const struct qsm_fabric_wr *wr)
{
	struct ibv_sge sge[QSM_FABRIC_MAX_SGE];
	struct ibv_send_wr swr, *bad;
	struct wr_rec *r;
	int ret;

	if (!id || !wr || !id->has_qp || !sges_ok(wr->sg_list, wr->num_sge))
		return -EINVAL;
	memset(&swr, 0, sizeof(swr));
	switch (wr->opcode) {
	case QSM_WR_SEND:
		swr.opcode = IBV_WR_SEND;
		break;
	case QSM_WR_RDMA_WRITE:
		swr.opcode = IBV_WR_RDMA_WRITE;
		break;
	case QSM_WR_RDMA_READ:
		swr.opcode = IBV_WR_RDMA_READ;
		break;
	default:
		return -EINVAL;
	}
	if (id->qp_err)
		return post_flushed(id, WQ_SEND, wr->wr_id, wr->opcode);
	if (id->wq_hw[WQ_SEND] >= id->wq_cap[WQ_SEND])
		return -ENOMEM;   /* the last slot is the drain marker's */
	r = rec_new(id, wr->wr_id, wr->opcode, wr->signaled);
	if (!r)
		return -ENOMEM;
	for (int i = 0; i < wr->num_sge; i++)
		sge[i] = (struct ibv_sge){ .addr = wr->sg_list[i].addr, .length = wr->sg_list[i].length,
					   .lkey = wr->sg_list[i].lkey };
	swr.wr_id = wr_tag(id, WQ_SEND, r->seq);
	swr.sg_list = wr->num_sge ? sge : NULL;
	swr.num_sge = wr->num_sge;
	swr.send_flags = wr->signaled ? IBV_SEND_SIGNALED : 0;
	if (wr->opcode != QSM_WR_SEND) {
		swr.wr.rdma.remote_addr = wr->remote_addr;
		swr.wr.rdma.rkey = wr->rkey;
	}
	ret = ibv_post_send(id->cm->qp, &swr, &bad);
	if (ret) {
		free(r);
		return ret > 0 ? -ret : -EINVAL;
	}
	r->hw = true;
	id->fab->posts++;
	id->wq_hw[WQ_SEND]++;
	qsm_list_add_tail(&id->wq[WQ_SEND], &r->node);
	return 0;
}

static int rc_post_recv(struct qsm_fid *id, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
			int num_sge)
{
	struct ibv_sge sge[QSM_FABRIC_MAX_SGE];
	struct ibv_recv_wr rwr, *bad;
	struct wr_rec *r;
	int ret;

	if (!id || !id->has_qp || !sges_ok(sg_list, num_sge))
		return -EINVAL;
	if (id->qp_err)
		return post_flushed(id, WQ_RECV, wr_id, QSM_WR_RECV);
	if (id->wq_hw[WQ_RECV] >= id->wq_cap[WQ_RECV])
		return -ENOMEM;
	r = rec_new(id, wr_id, QSM_WR_RECV, true);
	if (!r)
		return -ENOMEM;
	for (int i = 0; i < num_sge; i++)
		sge[i] = (struct ibv_sge){ .addr = sg_list[i].addr, .length = sg_list[i].length,
					   .lkey = sg_list[i].lkey };
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = wr_tag(id, WQ_RECV, r->seq);
	rwr.sg_list = num_sge ? sge : NULL;
	rwr.num_sge = num_sge;
	ret = ibv_post_recv(id->cm->qp, &rwr, &bad);
	if (ret) {
		free(r);
		return ret > 0 ? -ret : -EINVAL;
	}
	r->hw = true;
	id->fab->posts++;
	id->wq_hw[WQ_RECV]++;
	qsm_list_add_tail(&id->wq[WQ_RECV], &r->node);
	return 0;
}

static const struct qsm_fabric_ops rc_ops = {
	.name = "rdmacm",
	.destroy = rc_destroy,
	.fd = rc_fd,
	.get_event = rc_get_event,
	.create_id = rc_create_id,
	.set_owner = rc_set_owner,
	.destroy_id = rc_destroy_id,
	.bind = rc_bind,
	.listen = rc_listen,
	.resolve_addr = rc_resolve_addr,
	.resolve_route = rc_resolve_route,
	.create_qp = rc_create_qp,
	.destroy_qp = rc_destroy_qp,
	.connect = rc_connect,
	.accept = rc_accept,
	.reject = rc_reject,
	.disconnect = rc_disconnect,
	.drain = rc_drain,
	.id_device = rc_id_device,
	.device_get = rc_device_get,
	.device_put = rc_device_put,
	.device_name = rc_device_name,
	.device_addr = rc_device_addr,
	.id_src_addr = rc_id_src_addr,
	.reg_mr = rc_reg_mr,
	.dereg_mr = rc_dereg_mr,
	.post_send = rc_post_send,
	.post_recv = rc_post_recv,
};

int qsm_rdmacm_fabric_new(struct qsm_fabric **ret)
{
	struct rc_fabric *f;
	struct itimerspec its = { { DEVICE_POLL_SEC, 0 }, { DEVICE_POLL_SEC, 0 } };
	int r;

	if (!ret)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->base.ops = &rc_ops;
	f->epfd = f->tfd = f->pq.kfd = -1;
	qsm_list_init(&f->ids);
	qsm_list_init(&f->devs);
	f->ch = rdma_create_event_channel();
	if (!f->ch) {
		r = errno_or(ENODEV);
		goto fail;
	}
	pthread_mutex_lock(&vctx_lock);
	if (!pin_channel) {
		pin_channel = rdma_create_event_channel();
		if (pin_channel && set_nonblock(pin_channel->fd) < 0) {
			rdma_destroy_event_channel(pin_channel);
			pin_channel = NULL;
		}
	}
	pthread_mutex_unlock(&vctx_lock);
	if (!pin_channel) {
		r = errno_or(ENODEV);
		goto fail;
	}
	f->epfd = epoll_create1(EPOLL_CLOEXEC);
	f->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (f->epfd < 0 || f->tfd < 0) {
		r = -errno;
		goto fail;
	}
	if ((r = qsm_pending_init(&f->pq)) < 0)
		goto fail;
	if ((r = set_nonblock(f->ch->fd)) < 0 || (r = epoll_add(f, f->ch->fd)) < 0 ||
	    (r = epoll_add(f, f->tfd)) < 0 || (r = epoll_add(f, f->pq.kfd)) < 0 ||
	    (r = epoll_add(f, pin_channel->fd)) < 0)
		goto fail;
	if (timerfd_settime(f->tfd, 0, &its, NULL) < 0) {
		r = -errno;
		goto fail;
	}
	poll_devices(f);   /* what is there now is not "added" */
	*ret = &f->base;
	return 0;
fail:
	if (f->ch)
		rdma_destroy_event_channel(f->ch);
	if (f->epfd >= 0)
		close(f->epfd);
	if (f->tfd >= 0)
		close(f->tfd);
	qsm_pending_fini(&f->pq);
	free(f);
	return r;
}
