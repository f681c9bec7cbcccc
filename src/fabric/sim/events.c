/* rdma-qsm: the sim fabric's events: each fabric's FIFO queue and its eventfd, the events held
 * by QSM_SIM_FAULT_HOLD, and the injected faults that bend the event stream. */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "world.h"

/* Posting an event has no failure path: a call that posts has already taken effect. */
static void *zalloc_or_die(size_t n)
{
	void *p = sim_zalloc(n);

	if (!p) {
		fputs("qsm sim: out of memory posting an event\n", stderr);
		abort();
	}
	return p;
}

bool sim_fault_take(struct qsm_sim *sim, enum qsm_sim_fault f)
{
	if (!sim->faults[f])
		return false;
	sim->faults[f]--;
	return true;
}

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
	if (sim_fault_take(sim, QSM_SIM_FAULT_HOLD)) {
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

void sim_event_drop(struct sim_event *e)
{
	event_remove(e);
	e->fab->sim->st.events_dropped++;
	free(e);
}

static struct sim_event *event_new(struct sim_fabric *fab, const struct post *p)
{
	struct sim_event *e = zalloc_or_die(sizeof(*e));

	assert(p->len <= p->wire && p->wire <= sizeof(e->pdata));
	e->fab = fab;
	e->id = p->id;
	e->listener = p->listener;
	e->dev = p->dev;
	e->srq = p->srq;
	e->event = p->event;
	e->status = p->status;
	if (p->wc)
		e->wc = *p->wc;
	e->sq_frees = p->sq_frees;
	e->rq_free = p->rq_free;
	e->len = p->wire;
	if (p->len)
		memcpy(e->pdata, p->pdata, p->len);
	return e;
}

/*
 * Every event goes through here, so the faults that bend the event stream (lost,
 * duplicated, stray events) apply to every path that produces the event.
 */
void sim_post(const struct post *p)
{
	struct sim_fabric *fab = p->fab ? p->fab : p->id->fab;
	struct qsm_sim *sim = fab->sim;

	if ((p->event == QSM_EV_TIMEWAIT_EXIT && sim_fault_take(sim, QSM_SIM_FAULT_NO_TIMEWAIT_EXIT)) ||
	    (p->event == QSM_EV_DRAINED && sim_fault_take(sim, QSM_SIM_FAULT_NO_DRAINED))) {
		sim->st.events_dropped++;
		return;
	}
	enqueue(sim, event_new(fab, p));
	if (p->event != QSM_EV_DISCONNECTED)
		return;
	if (sim_fault_take(sim, QSM_SIM_FAULT_DUP_DISCONNECTED))
		enqueue(sim, event_new(fab, p));
	if (sim_fault_take(sim, QSM_SIM_FAULT_LATE_ESTABLISHED))
		enqueue(sim, event_new(fab, &(struct post){ .id = p->id, .event = QSM_EV_ESTABLISHED }));
}

void sim_post_simple(struct sim_id *id, int event, int status)
{
	sim_post(&(struct post){ .id = id, .event = event, .status = status });
}

/* Drop the pending events of `id`, queued or held: all of them (event 0), or one kind. */
void sim_drop_events(struct sim_id *id, int event)
{
	struct qsm_list *heads[2] = { &id->fab->queue, &id->fab->sim->held };
	struct qsm_list *pos, *tmp;

	for (int i = 0; i < 2; i++) {
		qsm_list_each(pos, tmp, heads[i]) {
			struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

			if (e->id == id && (!event || e->event == event))
				sim_event_drop(e);
		}
	}
}

/* `id` is `to`'s now: its queued events move to `to`'s queue in their order, held ones will
 * be released there. */
void sim_events_move(struct sim_id *id, struct sim_fabric *to)
{
	struct sim_fabric *from = id->fab;
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &from->queue) {
		struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

		if (e->id != id)
			continue;
		qsm_list_del(&e->node);
		if (qsm_list_empty(&from->queue))
			fabric_quiet(from);
		e->fab = to;
		fabric_push(to, e);
	}
	qsm_list_each(pos, tmp, &from->sim->held) {
		struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

		if (e->id == id)
			e->fab = to;
	}
}

/* Drop the pending events of an SRQ (its SRQ_LIMIT), queued or held. */
void sim_drop_srq_events(struct sim_srq *s)
{
	struct qsm_list *heads[2] = { &s->fab->queue, &s->fab->sim->held };
	struct qsm_list *pos, *tmp;

	for (int i = 0; i < 2; i++) {
		qsm_list_each(pos, tmp, heads[i]) {
			struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

			if (e->srq == s && !e->id)
				sim_event_drop(e);
		}
	}
}

/* A CONNECT_REQUEST of `listener` not yet returned, queued or held, or NULL. */
struct sim_event *sim_unreported_request(struct sim_id *listener)
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

/* QSM_SIM_FAULT_HOLD is disarmed; what it held goes to the fabrics' queues in post order,
 * behind whatever was queued meanwhile.  Returns how many. */
int sim_held_release(struct qsm_sim *sim)
{
	struct qsm_list *pos, *tmp;
	int n = 0;

	sim->faults[QSM_SIM_FAULT_HOLD] = 0;
	qsm_list_each(pos, tmp, &sim->held) {
		struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

		qsm_list_del(&e->node);
		fabric_push(e->fab, e);
		n++;
	}
	return n;
}

/* A fabric going away drops its events, queued or held. */
void sim_fabric_drop_events(struct sim_fabric *f)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->queue)
		sim_event_drop(qsm_container_of(pos, struct sim_event, node));
	qsm_list_each(pos, tmp, &f->sim->held) {
		struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

		if (e->fab == f)
			sim_event_drop(e);
	}
}

/* ---- the fabric ops of the event channel ---- */

int sim_fd(struct qsm_fabric *base)
{
	if (!base)
		return -EINVAL;
	return to_fabric(base)->efd;
}

/* One event taken: the slots it held (as rdmacm frees them at ibv_poll_cq), counted, freed. */
static void event_taken(struct sim_fabric *f, struct sim_event *e)
{
	if (e->id) {
		e->id->nsends -= e->sq_frees;
		e->id->nrecvs -= e->rq_free;
	}
	if (e->srq && e->event == QSM_EV_COMPLETION)
		e->srq->held--;   /* a receive of the SRQ: its slot, as a QP's own */
	f->sim->st.events_delivered++;
	free(e);
}

/* An event not a completion queued, not yet taken. */
bool sim_backlog(struct qsm_fabric *base)
{
	struct sim_fabric *f = to_fabric(base);
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->queue)
		if (qsm_container_of(pos, struct sim_event, node)->event != QSM_EV_COMPLETION)
			return true;
	return false;
}

/* The completions of `id` not yet taken, queued then held (the order in which they would be
 * taken), up to max, taken now as get_event would take them.  Returns how many. */
int sim_take_completions(struct sim_id *id, struct qsm_fabric_cqe *cqe, int max)
{
	struct qsm_list *heads[2] = { &id->fab->queue, &id->fab->sim->held };
	struct qsm_list *pos, *tmp;
	int n = 0;

	for (int i = 0; i < 2; i++) {
		qsm_list_each(pos, tmp, heads[i]) {
			struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

			if (n == max)
				return n;
			if (e->id != id || e->event != QSM_EV_COMPLETION)
				continue;
			event_remove(e);
			cqe[n].owner = id->owner;
			cqe[n].id = fid_of(id);
			cqe[n].wc = e->wc;
			n++;
			event_taken(id->fab, e);
		}
	}
	return n;
}

/* The completions at the head of the queue, up to max, or the one event there. */
int sim_get_event(struct qsm_fabric *base, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe,
		  int max)
{
	struct sim_fabric *f;
	struct sim_event *e;
	int n = 0;

	if (!base || !ev || !cqe || max < 1)
		return -EINVAL;
	f = to_fabric(base);
	if (max > QSM_FABRIC_CQE_BATCH)
		max = QSM_FABRIC_CQE_BATCH;   /* the batch's room; max may count straight ones too */
	while (n < max && !qsm_list_empty(&f->queue)) {
		e = qsm_container_of(f->queue.next, struct sim_event, node);
		if (e->event != QSM_EV_COMPLETION)
			break;
		event_remove(e);
		cqe[n].owner = e->id->owner;
		cqe[n].id = fid_of(e->id);
		cqe[n].wc = e->wc;
		n++;
		event_taken(f, e);
	}
	if (n)
		return n;
	if (qsm_list_empty(&f->queue))
		return -EAGAIN;
	e = qsm_container_of(f->queue.next, struct sim_event, node);
	event_remove(e);
	memset(ev, 0, offsetof(struct qsm_fabric_event, private_data));
	ev->event = e->event;
	ev->status = e->status;
	if (e->id)
		ev->id = fid_of(e->id);
	else
		ev->srq = (struct qsm_fsrq *)(void *)e->srq;
	/* a request is for its listener: the new id has no owner yet */
	ev->owner = e->listener ? e->listener->owner :
		    e->id ? e->id->owner : e->srq ? e->srq->owner : NULL;
	ev->device = e->dev ? fdev_of(e->dev) : NULL;
	ev->private_data_len = e->len;
	memcpy(ev->private_data, e->pdata, e->len);
	event_taken(f, e);
	return 0;
}
