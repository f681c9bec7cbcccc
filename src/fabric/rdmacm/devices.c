/* rdma-qsm: the devices of the rdmacm fabric: one object per RDMA device, its PD and pool of CQs,
 * its async events, the device list scanned for DEVICE_ADDED, and the fabric's timer. */
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"
#include "fabric/rdmacm/rdmacm.h"

#define CQ_INITIAL 1024           /* entries of a new CQ of a pool; resized as QPs come */

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
	qsm_list_init(&d->cqs);
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

void qsm_rc_fid_attach(struct qsm_fid *id)
{
	if (id->dev || !id->cm->verbs)
		return;
	id->dev = dev_of_verbs(id->fab, id->cm->verbs);
	if (id->dev)
		id->dev->nids++;
	id->vc = qsm_rc_vctx_get(id->cm->verbs, id->cm);
}

void qsm_rc_adopt(struct qsm_fabric *base, struct qsm_fid *id)
{
	struct rc_fabric *f = to_fab(base);

	id->adopting = false;
	qsm_list_add_tail(&f->ids, &id->node);
	if (id->cm->verbs && (id->dev = dev_of_verbs(f, id->cm->verbs)))
		id->dev->nids++;
	while (!qsm_list_empty(&id->held)) {
		struct qsm_pending *p = qsm_container_of(id->held.next, struct qsm_pending, node);

		qsm_list_del(&p->node);
		if (p->event == QSM_EV_DEVICE_REMOVAL && id->dev)
			qsm_rc_dev_removed(id->dev);
		(void)qsm_pending_push_event(&f->pq, p->event, p->status, id,
					     p->event == QSM_EV_DEVICE_REMOVAL ? id->dev : NULL, false);
		qsm_pending_release(p);
	}
}

/* ---- the CQ pool ---- */

/* Never blocks: ibv_destroy_cq waits only for events read and not acked, and those are acked
 * here; the kernel discards the ones still unread in the channel. */
/* The reasons to be called at once change (hot CQs, lq not empty): hot_fd is readable exactly
 * while there is one. */
void qsm_rc_hot_changed(struct rc_fabric *f, int delta)
{
	uint64_t v;

	if (!f->hot && delta > 0)
		(void)!write(f->hot_fd, &(uint64_t){ 1 }, sizeof(uint64_t));
	f->hot += delta;
	if (!f->hot) {
		(void)!read(f->hot_fd, &v, sizeof(v));
		f->empty_run = 0;
	}
}

static void cq_free(struct qsm_fdev *d, struct rc_cq *c)
{
	if (c->hot)
		qsm_rc_hot_changed(d->fab, -1);
	if (c->events)
		ibv_ack_cq_events(c->cq, c->events);
	ibv_destroy_cq(c->cq);
	qsm_list_del(&c->node);
	d->ncqs--;
	d->fab->cq_freed++;
	free(c);
}

static struct rc_cq *cq_new(struct qsm_fdev *d, int entries, int *err)
{
	struct rc_cq *c;

	if (d->ncqs >= d->max_cq) {
		*err = -ENOMEM;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		*err = -ENOMEM;
		return NULL;
	}
	errno = 0;
	c->cq = ibv_create_cq(d->verbs, entries, c, d->cc, 0);
	if (!c->cq) {
		*err = errno_or(ENOMEM);
		free(c);
		return NULL;
	}
	/* armed before any QP is on it: its first completion wakes the channel */
	*err = -ibv_req_notify_cq(c->cq, 0);
	if (*err) {
		ibv_destroy_cq(c->cq);
		free(c);
		return NULL;
	}
	c->cap = c->cq->cqe;
	qsm_list_add_tail(&d->cqs, &c->node);
	d->ncqs++;
	d->fab->cq_created++;
	if (d->ncqs > d->fab->cq_peak)
		d->fab->cq_peak = d->ncqs;
	return c;
}

/* The CQ grown to hold `need` entries, doubling up to max_cqe. */
static bool cq_grow(struct qsm_fdev *d, struct rc_cq *c, int need)
{
	int cap = c->cap;

	if (need > d->max_cqe)
		return false;
	while (cap < need)
		cap = cap > d->max_cqe / 2 ? d->max_cqe : cap * 2;
	if (ibv_resize_cq(c->cq, cap))
		return false;
	d->fab->cq_resized++;
	c->cap = c->cq->cqe;
	return c->cap >= need;
}

struct rc_cq *qsm_rc_cq_get(struct qsm_fdev *d, int wrs, int *err)
{
	struct qsm_list *pos, *tmp;
	struct rc_cq *c;

	if (wrs > d->max_cqe) {
		*err = -ENOMEM;
		return NULL;
	}
	/* room as it is, else room once grown, else a new CQ: as the kernel's ib_cq_pool_get */
	qsm_list_each(pos, tmp, &d->cqs) {
		c = qsm_container_of(pos, struct rc_cq, node);
		if (!c->own && c->need + wrs <= c->cap)
			goto found;
	}
	qsm_list_each(pos, tmp, &d->cqs) {
		c = qsm_container_of(pos, struct rc_cq, node);
		if (!c->own && c->need + wrs <= d->max_cqe && cq_grow(d, c, c->need + wrs))
			goto found;
	}
	c = cq_new(d, wrs > CQ_INITIAL ? wrs : CQ_INITIAL < d->max_cqe ? CQ_INITIAL : d->max_cqe, err);
	if (!c)
		return NULL;
	if (c->cap < wrs && !cq_grow(d, c, wrs)) {
		cq_free(d, c);
		*err = -ENOMEM;
		return NULL;
	}
	goto place;
found:
	if (!c->nqps)
		d->fab->cq_reused++;    /* one the pool kept empty: a CQ not created again */
place:
	c->need += wrs;
	c->nqps++;
	return c;
}

struct rc_cq *qsm_rc_cq_own(struct qsm_fdev *d, int entries, int *err)
{
	struct rc_cq *c;

	if (entries > d->max_cqe) {
		*err = -ENOMEM;
		return NULL;
	}
	c = cq_new(d, entries, err);
	if (c)
		c->own = true;
	return c;
}

void qsm_rc_cq_own_free(struct qsm_fdev *d, struct rc_cq *c)
{
	cq_free(d, c);
}

/* An empty CQ is not freed here: in a reconnect storm its QPs come back within seconds, and
 * freeing it made each of them create (and grow) a CQ again -- 592 CQs of 32768 entries in
 * one loaded storm of issue 15.  The tick frees it once it stayed empty; with the device
 * monitor the tick runs only from here on, until the trim finds nothing left to wait for. */
void qsm_rc_cq_put(struct qsm_fdev *d, struct rc_cq *c, int wrs)
{
	struct rc_fabric *f = d->fab;

	c->need -= wrs;
	if (--c->nqps)
		return;
	c->empty_ticks = 0;
	if (!f->mon_err && !f->tick_at) {
		f->tick_at = qsm_rc_now_ns() + TICK_NS;
		qsm_rc_timer_arm(f);
	}
}

bool qsm_rc_cq_trim(struct qsm_fdev *d, unsigned ticks)
{
	struct qsm_list *pos, *tmp;
	bool keep = true;    /* while no CQ of the pool has a QP, the oldest stays for the next */
	bool left = false;

	qsm_list_each(pos, tmp, &d->cqs) {
		struct rc_cq *c = qsm_container_of(pos, struct rc_cq, node);

		if (!c->own && c->nqps) {
			keep = false;
			break;
		}
	}
	qsm_list_each(pos, tmp, &d->cqs) {
		struct rc_cq *c = qsm_container_of(pos, struct rc_cq, node);

		if (c->own || c->nqps)
			continue;
		if (keep) {
			keep = false;
			c->empty_ticks = 0;
			continue;
		}
		/* the tick's expirations, so a ctx that dispatched late does not keep it longer */
		c->empty_ticks = ticks >= CQ_IDLE_TICKS - c->empty_ticks ? CQ_IDLE_TICKS : c->empty_ticks + ticks;
		if (c->empty_ticks < CQ_IDLE_TICKS) {
			left = true;
			continue;
		}
		d->fab->cq_idle_freed++;
		cq_free(d, c);
	}
	return left;
}

/* The device is gone from the list (rdma_cm's DEVICE_REMOVAL, or the poll): it takes no QP
 * again, so what the pool kept empty goes now, not after the idle ticks. */
static void cq_free_empty(struct qsm_fdev *d)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &d->cqs) {
		struct rc_cq *c = qsm_container_of(pos, struct rc_cq, node);

		if (!c->own && !c->nqps)
			cq_free(d, c);
	}
}

/*
 * A CQ whose event came goes hot: it is acked and polled, and not re-armed, so that while
 * completions keep coming it costs no channel read and no re-arm per batch.  A hot CQ whose
 * polls found nothing hot_idle times in a row is re-armed and polled once more (what
 * came in between is not missed); if that finds nothing either it goes cold and waits for its
 * next event.  While any CQ is hot the fabric's fd stays readable, so a caller that sleeps on
 * it spins at most that many times before it sleeps.  "That many" is the fabric's hot_idle
 * (rdmacm.h): CQ_HOT_IDLE_POLLS for a caller that sleeps, more for one that polls busily
 * anyway, whose CQ then never goes cold between two completions: as a poll loop's.
 */
void qsm_rc_cq_events(struct qsm_fdev *d)
{
	struct qsm_list *pos, *tmp;
	struct ibv_cq *cq;
	void *cq_ctx;

	while (ibv_get_cq_event(d->cc, &cq, &cq_ctx) == 0)
		((struct rc_cq *)cq_ctx)->events++;
	qsm_list_each(pos, tmp, &d->cqs) {
		struct rc_cq *c = qsm_container_of(pos, struct rc_cq, node);

		if (!c->events)
			continue;
		ibv_ack_cq_events(c->cq, c->events);
		c->events = 0;
		if (!c->hot && !d->fab->hot) {
			struct rc_fabric *f = d->fab;

			if (f->cold_calls >= f->hot_idle && f->hot_idle < CQ_HOT_IDLE_MAX)
				f->hot_idle *= 2;
			else if (f->cold_calls < CQ_COLD_FEW && f->hot_idle > CQ_HOT_IDLE_POLLS)
				f->hot_idle /= 2;
			f->cold_calls = 0;
		}
		qsm_rc_cq_heat(d->fab, c);
	}
}

void qsm_rc_cq_heat(struct rc_fabric *f, struct rc_cq *c)
{
	if (c->hot)
		return;
	c->hot = true;
	c->idle = 0;
	qsm_rc_hot_changed(f, 1);
}

void qsm_rc_cq_check_cold(struct rc_fabric *f)
{
	struct qsm_list *dpos, *dtmp, *pos, *tmp;
	uint64_t now = qsm_rc_now_ns();

	if (now - f->cold_check_at < CQ_COLD_CHECK_NS)
		return;
	f->cold_check_at = now;
	qsm_list_each(dpos, dtmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(dpos, struct qsm_fdev, node);

		if (!d->cc)
			continue;
		/* the events the channel holds first: a CQ whose event is there is not checked, so
		 * what a check finds is what no event announced */
		qsm_rc_cq_events(d);
		qsm_list_each(pos, tmp, &d->cqs) {
			struct rc_cq *c = qsm_container_of(pos, struct rc_cq, node);

			if (c->hot || (!c->nqps && !c->own))
				continue;
			qsm_rc_cq_heat(f, c);
			c->checked = true;
			c->idle = f->hot_idle - 1;   /* an empty first poll re-arms it and lets it go */
			f->cq_checks++;
		}
	}
}

void qsm_rc_cq_rescued(struct rc_fabric *f, struct rc_cq *c)
{
	c->checked = false;
	f->cq_rescued++;
}

int qsm_rc_cq_poll_empty(struct qsm_fdev *d, struct rc_cq *c, struct ibv_wc *wc, int max)
{
	int n;

	c->checked = false;
	/* A busy CQ between two completions: polled again, still unarmed, a few times (a poll
	 * costs no system call; a re-arm and the channel read that follows cost two). */
	if (++c->idle < d->fab->hot_idle)
		return 0;
	c->idle = 0;
	ibv_req_notify_cq(c->cq, 0);
	n = ibv_poll_cq(c->cq, max, wc);
	if (n > 0)
		return n;
	c->hot = false;
	qsm_rc_hot_changed(d->fab, -1);
	return 0;
}

/* ---- the device's resources ---- */

static void dev_release_resources(struct qsm_fdev *d)
{
	struct rc_fabric *f = d->fab;
	struct qsm_list *pos, *tmp;

	if (!d->pd)
		return;
	qsm_rc_vctx_unlink(&d->vnode);
	epoll_del(f, d->cc->fd);
	epoll_del(f, d->verbs->async_fd);
	qsm_list_each(pos, tmp, &d->cqs)
		cq_free(d, qsm_container_of(pos, struct rc_cq, node));
	ibv_destroy_comp_channel(d->cc);
	ibv_dealloc_pd(d->pd);
	d->cc = NULL;
	d->pd = NULL;
	qsm_pending_drop(&f->pq, NULL, d);
	qsm_rc_vctx_put(d->vc);
	d->vc = NULL;
}

void qsm_rc_dev_settle(struct qsm_fdev *d)
{
	if (!d->present)
		cq_free_empty(d);
	if (!d->gets && !d->nqps && !d->nmrs && !d->nsrqs)
		dev_release_resources(d);
	if (d->present || d->gets || d->nqps || d->nmrs || d->nsrqs || d->nids)
		return;
	qsm_pending_drop(&d->fab->pq, NULL, d);
	qsm_list_del(&d->node);
	free(d);
}

void qsm_rc_dev_removed(struct qsm_fdev *d)
{
	d->present = false;
	if (d->verbs)
		qsm_rc_vctx_removed(d->verbs);
	qsm_rc_dev_settle(d);
}

int qsm_rc_dev_get_resources(struct qsm_fdev *d, struct rdma_cm_id *via)
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
	d->vc = qsm_rc_vctx_get(d->verbs, via);
	if (!d->vc)
		return -ENOMEM;
	d->max_cqe = attr.max_cqe;
	d->max_cq = attr.max_cq > 0 ? (unsigned)attr.max_cq : 1;
	d->max_rd_atom = (uint8_t)(attr.max_qp_rd_atom > RD_ATOM_MAX ? RD_ATOM_MAX : attr.max_qp_rd_atom);
	d->max_init_rd_atom = (uint8_t)(attr.max_qp_init_rd_atom > RD_ATOM_MAX ? RD_ATOM_MAX :
					attr.max_qp_init_rd_atom);
	/* A device that says 0 names no bound of its own: its send SGEs are the bound then */
	d->max_sge_rd = (uint8_t)(attr.max_sge_rd > 255 ? 255 : attr.max_sge_rd > 0 ? attr.max_sge_rd :
				   attr.max_sge > 255 ? 255 : attr.max_sge > 0 ? attr.max_sge : 1);
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
	if ((r = set_nonblock(d->cc->fd)) < 0 ||
	    (r = set_nonblock(d->verbs->async_fd)) < 0 || (r = epoll_add(f, d->cc->fd)) < 0)
		goto fail;
	/* Another fabric of the process may watch the same async fd: that is fine. */
	r = epoll_add(f, d->verbs->async_fd);
	if (r < 0 && r != -EEXIST) {
		epoll_del(f, d->cc->fd);
		goto fail;
	}
	qsm_rc_vctx_link(d->vc, &d->vnode);
	return 0;
fail:
	if (d->cc)
		ibv_destroy_comp_channel(d->cc);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	d->cc = NULL;
	d->pd = NULL;
	qsm_rc_vctx_put(d->vc);
	d->vc = NULL;
	return r;
}

/* ---- async events ---- */

/* QP_FATAL for an id; from whichever fabric read the async event. */
static void route_qp_fatal(struct ibv_qp *qp)
{
	struct qsm_fid *id = qp->qp_context;

	if (id)
		pending_push(id->fab, QSM_EV_QP_FATAL, -EIO, id, NULL, false);
}

/* A QP's event that moves nothing but its machines (COMM_EST, SQ_DRAINED, PATH_MIG, _ERR). */
static void route_qp_event(struct ibv_qp *qp, int event)
{
	struct qsm_fid *id = qp->qp_context;

	if (id)
		pending_push(id->fab, event, 0, id, NULL, false);
}

/* SRQ_LIMIT for the SRQ's owner; from whichever fabric read the async event. */
static void srq_limit(struct qsm_fsrq *s)
{
	(void)qsm_pending_push_srq(&s->fab->pq, s, s->owner);
}

/* LAST_WQE for an id on an SRQ; from whichever fabric read the async event. */
static void route_last_wqe(struct ibv_qp *qp)
{
	struct qsm_fid *id = qp->qp_context;

	if (id)
		pending_push(id->fab, QSM_EV_LAST_WQE, 0, id, NULL, false);
}

/* Every fabric's device on the context: each expands it to its own QPs (in get_event). */
static void push_device_fatal(struct qsm_list *vnode, const void *arg)
{
	struct qsm_fdev *d = qsm_container_of(vnode, struct qsm_fdev, vnode);

	(void)arg;
	pending_push(d->fab, QSM_EV_QP_FATAL, -EIO, NULL, d, true);
}

/* A port's event, to every fabric's device on the context (status: the port).  PORT_ERR is
 * expanded to the QPs on that port in get_event; the others go to the ctx as they are. */
struct port_event {
	int event, port;
};

static void push_port_event(struct qsm_list *vnode, const void *arg)
{
	struct qsm_fdev *d = qsm_container_of(vnode, struct qsm_fdev, vnode);
	const struct port_event *pe = arg;

	pending_push(d->fab, pe->event, pe->port, NULL, d, pe->event == QSM_EV_PORT_ERR);
}

static int port_event_of(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_PORT_ERR: return QSM_EV_PORT_ERR;
	case IBV_EVENT_PORT_ACTIVE: return QSM_EV_PORT_ACTIVE;
	case IBV_EVENT_GID_CHANGE: return QSM_EV_GID_CHANGE;
	case IBV_EVENT_LID_CHANGE: return QSM_EV_LID_CHANGE;
	case IBV_EVENT_PKEY_CHANGE: return QSM_EV_PKEY_CHANGE;
	case IBV_EVENT_CLIENT_REREGISTER: return QSM_EV_CLIENT_REREGISTER;
	default: return 0;
	}
}

void qsm_rc_harvest_async(struct rc_fabric *f)
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
			case IBV_EVENT_COMM_EST:
				route_qp_event(ae.element.qp, QSM_EV_COMM_EST);
				break;
			case IBV_EVENT_SQ_DRAINED:
				route_qp_event(ae.element.qp, QSM_EV_SQ_DRAINED);
				break;
			case IBV_EVENT_PATH_MIG:
				route_qp_event(ae.element.qp, QSM_EV_PATH_MIG);
				break;
			case IBV_EVENT_PATH_MIG_ERR:
				route_qp_event(ae.element.qp, QSM_EV_PATH_MIG_ERR);
				break;
			case IBV_EVENT_PORT_ERR:
			case IBV_EVENT_PORT_ACTIVE:
			case IBV_EVENT_GID_CHANGE:
			case IBV_EVENT_LID_CHANGE:
			case IBV_EVENT_PKEY_CHANGE:
			case IBV_EVENT_CLIENT_REREGISTER:
				qsm_rc_vctx_each_link(d->verbs, push_port_event,
						      &(struct port_event){ port_event_of(ae.event_type),
									    ae.element.port_num });
				break;
			case IBV_EVENT_QP_LAST_WQE_REACHED:
				route_last_wqe(ae.element.qp);
				break;
			case IBV_EVENT_SRQ_LIMIT_REACHED:
				srq_limit(ae.element.srq->srq_context);
				break;
			case IBV_EVENT_SRQ_ERR:   /* its QPs lose their receives: as fatal as a CQ's */
			case IBV_EVENT_CQ_ERR:
			case IBV_EVENT_DEVICE_FATAL:
				/* a CQ of the pool that overflowed: its QPs' completions are
				 * lost, and which QPs were on it matters little; as fatal as
				 * the device */
				qsm_rc_vctx_each_link(d->verbs, push_device_fatal, NULL);
				break;
			default:
				d->async_other++;
				break;
			}
			ibv_ack_async_event(&ae);
		}
	}
}

/* ---- the device list ---- */

uint64_t qsm_rc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One-shot and absolute, so that re-arming for the same deadline costs no system call. */
void qsm_rc_timer_arm(struct rc_fabric *f)
{
	uint64_t at = f->tick_at;
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };

	if (f->addr_at && (!at || f->addr_at < at))
		at = f->addr_at;
	if (f->cold_at && (!at || f->cold_at < at))
		at = f->cold_at;
	if (at == f->timer_at)
		return;
	f->timer_at = at;
	its.it_value.tv_sec = (time_t)(at / 1000000000ull);
	its.it_value.tv_nsec = (long)(at % 1000000000ull);
	(void)timerfd_settime(f->tfd, TFD_TIMER_ABSTIME, &its, NULL);   /* at 0: disarmed */
}

struct qsm_fdev *qsm_rc_dev_present(struct rc_fabric *f, struct ibv_device *ibdev)
{
	return dev_find(f, ibv_get_device_index(ibdev), ibv_get_device_guid(ibdev), ibv_get_device_name(ibdev),
			false);
}

void qsm_rc_poll_devices(struct rc_fabric *f)
{
	struct ibv_device **list;
	struct qsm_list *pos, *tmp;
	int n;

	f->scans++;
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
				qsm_rc_dev_settle(d);
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

/* ---- device ops ---- */

void qsm_rc_device_get(struct qsm_fdev *d)
{
	if (d)
		d->gets++;
}

void qsm_rc_device_put(struct qsm_fdev *d)
{
	if (!d || !d->gets)
		return;
	d->gets--;
	qsm_rc_dev_settle(d);
}

const char *qsm_rc_device_name(struct qsm_fdev *d)
{
	return d ? d->name : NULL;
}

/* An address whose interface the device serves: a temporary id bound to each candidate
 * tells which device rdma_cm picks for it. */
int qsm_rc_device_addr(struct qsm_fdev *d, struct sockaddr_storage *ss)
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
