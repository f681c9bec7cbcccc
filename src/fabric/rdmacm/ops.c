/* rdma-qsm: the rdmacm fabric (public API qsm/rdmacm.h): its qsm_fabric_ops, one epoll fd over
 * every source, get_event() in order (CM channel, then completions, async and device events). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <qsm/rdmacm.h>

#include "fabric/rdmacm/rdmacm.h"

#define DEVICE_POLL_SEC 1         /* without the device monitor: how often the device list is read */

static void rc_destroy(struct qsm_fabric *base)
{
	struct rc_fabric *f = to_fab(base);
	struct qsm_list *pos, *tmp;

	if (!base)
		return;
	if (getenv("QSM_RDMACM_STATS"))
		fprintf(stderr, "qsm rdmacm: posts %llu; completions: ok %llu (straight to the handler %llu), "
			"flush %llu, error %llu, dropped %llu, unknown status %llu, out of order %llu; "
			"flushes synthesised %llu\n",
			(unsigned long long)f->posts, (unsigned long long)f->wc_ok,
			(unsigned long long)f->wc_straight, (unsigned long long)f->wc_flush,
			(unsigned long long)f->wc_err, (unsigned long long)f->wc_stale,
			(unsigned long long)f->wc_unknown, (unsigned long long)f->wc_order,
			(unsigned long long)f->wc_synth);
	if (getenv("QSM_RDMACM_STATS") && f->probes)
		fprintf(stderr, "qsm rdmacm: keepalive probes %llu, failed %llu\n",
			(unsigned long long)f->probes, (unsigned long long)f->probes_failed);
	if (getenv("QSM_RDMACM_STATS") && f->parked)
		fprintf(stderr, "qsm rdmacm: ids destroyed while an iWARP connect was outstanding: %llu "
			"parked, %llu destroyed at their connect's outcome, the rest now\n",
			(unsigned long long)f->parked, (unsigned long long)f->unparked);
	if (getenv("QSM_RDMACM_STATS"))
		fprintf(stderr, "qsm rdmacm: CQ pool: at most %u CQs on a device; created %llu, freed %llu "
			"(%llu after %d+ s empty, the rest with the device), reused empty %llu times, "
			"resized %llu\n", f->cq_peak, (unsigned long long)f->cq_created,
			(unsigned long long)f->cq_freed, (unsigned long long)f->cq_idle_freed,
			CQ_IDLE_TICKS - 1, (unsigned long long)f->cq_reused,
			(unsigned long long)f->cq_resized);
	if (getenv("QSM_RDMACM_STATS"))
		fprintf(stderr, "qsm rdmacm: get_event %llu calls, %llu epoll_waits (sources read only when ready); "
			"hot CQs re-armed after %u empty polls; CQs waiting for their events polled anyway %llu "
			"times, %llu of them holding completions no event announced\n",
			(unsigned long long)f->get_calls, (unsigned long long)f->epoll_waits, f->hot_idle,
			(unsigned long long)f->cq_checks, (unsigned long long)f->cq_rescued);
	if (getenv("QSM_RDMACM_STATS"))
		fprintf(stderr, "qsm rdmacm: bytes per QP %llu (ours: id, table entry, rings; the average of %llu "
			"QPs created; not the provider's or the kernel's)\n",
			(unsigned long long)(f->qps_created ? f->qp_bytes / f->qps_created : 0),
			(unsigned long long)f->qps_created);
	if (getenv("QSM_RDMACM_STATS")) {
		if (f->mon_err)
			fprintf(stderr, "qsm rdmacm: device monitor: none (netlink: %s): the device list read "
				"every %d s; %llu scans, %llu timer expirations\n", strerror(-f->mon_err),
				DEVICE_POLL_SEC, (unsigned long long)f->scans, (unsigned long long)f->timer_fires);
		else
			fprintf(stderr, "qsm rdmacm: device monitor: uevent + rtnetlink, %llu datagrams (%llu "
				"overruns); %llu device-list scans, %llu DEVICE_ADDED for addresses; %llu timer "
				"expirations (CQ trim, address tries; no periodic wake-up)\n",
				(unsigned long long)f->mon_msgs, (unsigned long long)f->mon_lost,
				(unsigned long long)f->scans, (unsigned long long)f->addr_added,
				(unsigned long long)f->timer_fires);
	}
	/* The runtime destroyed every id; what is left is the device list's knowledge. */
	qsm_list_each(pos, tmp, &f->ids) {
		struct qsm_fid *id = qsm_container_of(pos, struct qsm_fid, node);

		/* gone for good: parked or not (not counted as unparked), the destroy may wait */
		id->iw_connecting = id->parked = false;
		qsm_rc_destroy_id(id);
	}
	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);

		d->gets = 0;
		d->present = false;
		qsm_rc_dev_settle(d);
	}
	qsm_pending_fini(&f->pq);
	qsm_rc_table_fini(&f->qpt);
	qsm_rc_table_fini(&f->srqt);
	qsm_rc_qpn_fini(&f->qpn);
	qsm_rc_send_lists_free(f);
	qsm_rc_monitor_close(f);
	rdma_destroy_event_channel(f->ch);
	close(f->epfd);
	close(f->tfd);
	close(f->hot_fd);
	free(f);
}

static int rc_fd(struct qsm_fabric *base)
{
	return base ? to_fab(base)->epfd : -EINVAL;
}

/*
 * Which sources are ready, from the fabric's own epoll (level-triggered, so a source not read
 * dry is reported again): the CM channel, the pin channel, the timer, the device monitor's
 * sockets, and the devices' completion channels and async fds.  Returns the number of ready fds.
 */
#define HOT_EPOLL_EVERY 16

static int learn_ready(struct rc_fabric *f)
{
	struct epoll_event evs[32];
	int n = epoll_wait(f->epfd, evs, sizeof(evs) / sizeof(evs[0]), 0);

	f->epoll_waits++;
	for (int i = 0; i < n; i++) {
		int fd = evs[i].data.fd;

		if (fd == f->ch->fd)
			f->ready_cm = true;
		else if (fd == f->pin_fd)
			f->ready_pins = true;
		else if (fd == f->tfd)
			f->ready_tick = true;
		else if (fd == f->uev_fd || fd == f->rtnl_fd)
			f->ready_mon = true;
		else if (fd != f->pq.kfd && fd != f->hot_fd)
			f->ready_devs = true; /* a completion channel or an async fd */
	}
	return n < 0 ? 0 : n;
}

/* Every device's completion channel read and its CQs marked hot; async events taken. */
static void take_device_sources(struct rc_fabric *f)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);

		if (d->cc)
			qsm_rc_cq_events(d);
	}
	qsm_rc_harvest_async(f);
}

/* A QP's async event that moves nothing but its machines' state. */
static bool qp_note(int event)
{
	return event == QSM_EV_COMM_EST || event == QSM_EV_SQ_DRAINED || event == QSM_EV_PATH_MIG ||
	       event == QSM_EV_PATH_MIG_ERR || event == QSM_EV_PORT_ERR;
}

/* The events pushed here and by other threads' fabrics (QP_FATAL of a shared context, DEVICE_ADDED). */
static int take_pending(struct rc_fabric *f, struct qsm_fabric_event *ev)
{
	struct qsm_pending *p;

	while ((p = qsm_pending_pop(&f->pq))) {
		if (p->device_wide) {
			/* expanded here, in the fabric's own thread, where its QP list is safe:
			 * QP_FATAL to every QP of the device, PORT_ERR to those on its port */
			for (int b = 0; b < QP_BUCKETS; b++) {
				struct qsm_list *pos, *tmp;

				qsm_list_each(pos, tmp, &p->dev->qps[b]) {
					struct qsm_fid *id = qsm_container_of(pos, struct qsm_fid, qp_node);

					if (p->event == QSM_EV_PORT_ERR && id->cm->port_num != p->status)
						continue;
					pending_push(f, p->event, p->status, id, NULL, false);
				}
			}
			qsm_pending_release(p);
			continue;
		}
		if (p->id && p->event == QSM_EV_QP_FATAL) {
			if (!qsm_rc_fid_has_qp(p->id) || p->id->fatal_sent) {
				qsm_pending_release(p);
				continue;
			}
			p->id->fatal_sent = true;
			p->id->qp_err = true;
			qsm_rc_wq_flush_heads(p->id);
		}
		if (p->id && qp_note(p->event) && !qsm_rc_fid_has_qp(p->id)) {
			/* a QP's async event (COMM_EST, PORT_ERR ...) that its QP did not outlive */
			f->async_stale++;
			qsm_pending_release(p);
			continue;
		}
		if (p->id && p->event == QSM_EV_LAST_WQE) {
			if (!qsm_rc_fid_has_qp(p->id) || p->id->last_wqe) {
				qsm_pending_release(p);
				continue;
			}
			qsm_rc_last_wqe(p->id);   /* reported first; DRAINED (if due) next */
		}
		memset(ev, 0, offsetof(struct qsm_fabric_event, private_data));
		ev->event = p->event;
		ev->status = p->status;
		if (p->id)
			ev->id = p->id;
		else
			ev->srq = p->srq;
		ev->owner = p->id ? p->id->owner : p->srq_owner;
		ev->device = p->id ? p->id->dev : p->dev;
		qsm_pending_release(p);
		return 0;
	}
	return -EAGAIN;
}

/*
 * In order: our own flushes (lq), then -- while CQs are hot, or the caller polls busily, and
 * epoll was asked within the last HOT_EPOLL_EVERY calls -- completions only; else what epoll
 * says is ready: the CM channel, the pins, the devices' channels and async fds, the device
 * monitor, the timer; then the completions of the hot CQs, and the events pushed to the
 * pending queue.
 */
static int get_event(struct rc_fabric *f, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe, int max)
{
	int r;

	if (!qsm_list_empty(&f->lq))
		return qsm_rc_lq_take(f, ev, cqe, max < QSM_FABRIC_CQE_BATCH ? max : QSM_FABRIC_CQE_BATCH);
	/* Nothing known to be ready: one epoll_wait, not a read of every source.  (The pending
	 * queue's eventfd is readable while it holds something, so it counts as a source.) */
	if (!f->ready_cm && !f->ready_pins && !f->ready_devs && !f->ready_tick && !f->ready_mon) {
		if ((f->hot || f->empty_run >= BUSY_EMPTY_CALLS) && ++f->hot_skips < HOT_EPOLL_EVERY) {
			r = qsm_rc_poll_cqs(f, cqe, max); /* busy: poll, do not ask epoll */
			if (f->sent)
				return QSM_FABRIC_STRAIGHT + r;   /* what went straight: nothing else now */
			if (r)
				return r;
			goto rest;
		}
		f->hot_skips = 0;
		r = learn_ready(f);
		qsm_rc_cq_check_cold(f);
		if (!r && !f->hot)
			return -EAGAIN;
	}
	if (f->ready_cm) {
		r = qsm_rc_take_cm_event(f, ev);
		if (r != -EAGAIN)
			return r;
		f->ready_cm = false;
	}
	if (f->ready_pins) {
		f->ready_pins = false;
		qsm_rc_pins_take_events();
	}
	if (f->ready_devs) {
		f->ready_devs = false;
		take_device_sources(f);
	}
	if (f->ready_mon) {
		f->ready_mon = false;
		qsm_rc_monitor_take(f);
	}
	if (f->ready_tick) {
		f->ready_tick = false;
		qsm_rc_timer_fired(f);
	}
	r = qsm_rc_poll_cqs(f, cqe, max);
	if (f->sent)
		return QSM_FABRIC_STRAIGHT + r;
	if (r)
		return r;
rest:
	/* a marker or an error polled just now may have put flushes of ours on lq */
	if (!qsm_list_empty(&f->lq))
		return qsm_rc_lq_take(f, ev, cqe, max < QSM_FABRIC_CQE_BATCH ? max : QSM_FABRIC_CQE_BATCH);
	return take_pending(f, ev);
}

static int rc_get_event(struct qsm_fabric *base, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe,
			int max)
{
	struct rc_fabric *f;
	int r;

	if (!base || !ev || !cqe || max < 1)
		return -EINVAL;
	f = to_fab(base);
	f->get_calls++;
	if (!f->hot)
		f->cold_calls++;
	f->sent = 0;
	r = get_event(f, ev, cqe, max);
	if (r != -EAGAIN) {
		f->empty_run = 0;
		return r;
	}
	if (f->empty_run < BUSY_EMPTY_CALLS)
		f->empty_run++;
	if (f->posts != f->cold_posts)
		qsm_rc_cq_watch(f);
	return r;
}

/* create_qp, with what the QP holds of ours counted for QSM_RDMACM_STATS. */
static int rc_create_qp(struct qsm_fid *id, const struct qsm_fabric_qp_attr *a)
{
	int r = qsm_rc_create_qp(id, a);

	if (r == 0) {
		id->fab->qps_created++;
		id->fab->qp_bytes += qsm_rc_qp_bytes(a->max_send_wr, a->max_recv_wr);
	}
	return r;
}

/* The CM channel (and the pins, the devices' channels) said readable and were not read to EAGAIN
 * yet: events that came before a timer's expiry may be there. */
static bool rc_backlog(struct qsm_fabric *base)
{
	struct rc_fabric *f = to_fab(base);

	return f->ready_cm || f->ready_pins || f->ready_devs;
}

static const size_t no_sink = 1;

static const struct qsm_fabric_ops rc_ops = {
	.name = "rdmacm",
	.destroy = rc_destroy,
	.fd = rc_fd,
	.get_event = rc_get_event,
	.set_sink = qsm_rc_set_sink,
	.set_complete = qsm_rc_set_complete,
	.backlog = rc_backlog,
	.create_id = qsm_rc_create_id,
	.set_owner = qsm_rc_set_owner,
	.handoff = qsm_rc_handoff,
	.adopt = qsm_rc_adopt,
	.destroy_id = qsm_rc_destroy_id,
	.bind = qsm_rc_bind,
	.listen = qsm_rc_listen,
	.resolve_addr = qsm_rc_resolve_addr,
	.resolve_route = qsm_rc_resolve_route,
	.create_qp = rc_create_qp,
	.destroy_qp = qsm_rc_destroy_qp,
	.flush_qp = qsm_rc_flush_qp,
	.cm_timeout_ms = qsm_rc_cm_timeout_ms,
	.notify = qsm_rc_notify,
	.read_depth = qsm_rc_read_depth,
	.connect = qsm_rc_connect,
	.accept = qsm_rc_accept,
	.reject = qsm_rc_reject,
	.disconnect = qsm_rc_disconnect,
	.drain = qsm_rc_drain,
	.probe = qsm_rc_probe,
	.id_device = qsm_rc_id_device,
	.device_get = qsm_rc_device_get,
	.device_put = qsm_rc_device_put,
	.device_name = qsm_rc_device_name,
	.device_addr = qsm_rc_device_addr,
	.id_src_addr = qsm_rc_id_src_addr,
	.id_verbs = qsm_rc_id_verbs,
	.reg_mr = qsm_rc_reg_mr,
	.dereg_mr = qsm_rc_dereg_mr,
	.post_send = qsm_rc_post_send,
	.post_recv = qsm_rc_post_recv,
	.create_srq = qsm_rc_create_srq,
	.destroy_srq = qsm_rc_destroy_srq,
	.post_srq_recv = qsm_rc_post_srq_recv,
	.arm_srq = qsm_rc_arm_srq,
	.alloc_mw = qsm_rc_alloc_mw,
	.dealloc_mw = qsm_rc_dealloc_mw,
	.bind_mw = qsm_rc_bind_mw,
};

int qsm_rdmacm_fabric_new(struct qsm_fabric **ret)
{
	struct rc_fabric *f;
	struct itimerspec its = { { DEVICE_POLL_SEC, 0 }, { DEVICE_POLL_SEC, 0 } };
	int pin_fd, r;

	if (!ret)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->base.ops = &rc_ops;
	f->epfd = f->tfd = f->pq.kfd = f->hot_fd = f->uev_fd = f->rtnl_fd = -1;
	qsm_list_init(&f->ids);
	qsm_list_init(&f->devs);
	qsm_list_init(&f->lq);
	qsm_list_init(&f->dq);
	qsm_rc_table_init(&f->qpt);
	qsm_rc_table_init(&f->srqt);
	f->hot_idle = CQ_HOT_IDLE_POLLS;
	f->sink.hold = &no_sink;   /* nothing straight until the runtime hands its sink */
	f->ch = rdma_create_event_channel();
	if (!f->ch) {
		r = errno_or(ENODEV);
		goto fail;
	}
	pin_fd = f->pin_fd = qsm_rc_pins_open();
	if (pin_fd < 0) {
		r = pin_fd;
		goto fail;
	}
	f->epfd = epoll_create1(EPOLL_CLOEXEC);
	f->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	f->hot_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->epfd < 0 || f->tfd < 0 || f->hot_fd < 0) {
		r = -errno;
		goto fail;
	}
	if ((r = qsm_pending_init(&f->pq)) < 0)
		goto fail;
	if ((r = set_nonblock(f->ch->fd)) < 0 || (r = epoll_add(f, f->ch->fd)) < 0 ||
	    (r = epoll_add(f, f->tfd)) < 0 || (r = epoll_add(f, f->pq.kfd)) < 0 ||
	    (r = epoll_add(f, pin_fd)) < 0 || (r = epoll_add(f, f->hot_fd)) < 0)
		goto fail;
	/* With the monitor the timer is armed only when something is due (qsm_rc_timer_arm);
	 * without it, it ticks every second, as the device list is read then. */
	f->mon_err = qsm_rc_monitor_open(f);
	if (f->mon_err && timerfd_settime(f->tfd, 0, &its, NULL) < 0) {
		r = -errno;
		goto fail;
	}
	qsm_rc_poll_devices(f);   /* what is there now is not "added" */
	*ret = &f->base;
	return 0;
fail:
	qsm_rc_monitor_close(f);
	if (f->ch)
		rdma_destroy_event_channel(f->ch);
	if (f->epfd >= 0)
		close(f->epfd);
	if (f->tfd >= 0)
		close(f->tfd);
	if (f->hot_fd >= 0)
		close(f->hot_fd);
	qsm_pending_fini(&f->pq);
	free(f);
	return r;
}
