/* rdma-qsm: the sim fabric's CM connections: connect, accept, reject, disconnect and what a
 * destroyed id or a removed device does to them; each rule of the wire protocol in one function. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "world.h"

/* The sim's public CM sizes (qsm/sim.h) are the IB CM's, which the runtime checks too. */
_Static_assert(QSM_SIM_REQ_PDATA == QSM_PDATA_REQ_MAX && QSM_SIM_REP_PDATA == QSM_PDATA_REP_MAX &&
	       QSM_SIM_REJ_PDATA == QSM_PDATA_REJ_MAX, "qsm/sim.h and fabric.h disagree on CM sizes");

static int pdata_check(const void *pdata, size_t len, size_t max)
{
	if (len > max || (len && !pdata))
		return -EINVAL;
	return 0;
}

/* (an id cut off by qsm_sim_partition() has none left) */
static void peer_unlink(struct sim_id *id)
{
	if (id->peer)
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
	struct post p = { .id = id, .event = event, .status = status, .pdata = pdata, .len = len,
			  .wire = event == QSM_EV_REJECTED || event == QSM_EV_REJECTED_STALE ? QSM_SIM_REJ_PDATA : 0 };

	id->state = ID_FAILED;
	if (event != QSM_EV_UNREACHABLE)
		sim_qp_err_after(id, &p);
	else
		sim_post(&p);
}

static void connection_up(struct sim_id *active, struct sim_id *passive, const void *pdata, size_t len)
{
	active->state = passive->state = ID_ESTABLISHED;
	sim_qp_rts(active);
	sim_qp_rts(passive);
	/* The active side learns from the REP (its private data), the passive side from the RTU (none). */
	sim_post(&(struct post){ .id = active, .event = QSM_EV_ESTABLISHED, .pdata = pdata, .len = len,
				 .wire = QSM_SIM_REP_PDATA });
	sim_post_simple(passive, QSM_EV_ESTABLISHED, 0);
}

static void connection_down(struct sim_id *id)
{
	id->state = ID_DISCONNECTED;
	sim_qp_err(id);
	sim_post_simple(id, QSM_EV_DISCONNECTED, 0);
}

static void timewait_exit(struct sim_id *id)
{
	sim_post_simple(id, QSM_EV_TIMEWAIT_EXIT, 0);
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

static void id_destroy(struct sim_id *id)
{
	struct qsm_sim *sim = id->fab->sim;
	struct sim_event *req;

	sim_destroy_qp(fid_of(id));
	/* After destroy_id nothing of the id is returned. */
	sim_drop_events(id, 0);
	/* Requests the runtime never saw die with their listener, as ucma does for unreported events. */
	while ((req = sim_unreported_request(id))) {
		struct sim_id *child = req->id;

		sim_event_drop(req);
		id_destroy(child);
	}
	peer_lost(id);
	if (id->dev) {
		id->dev->nids--;
		sim_device_settle(id->dev);
	}
	qsm_list_del(&id->node);
	sim->st.ids--;
	free(id);
}

void sim_destroy_id(struct qsm_fid *fid)
{
	if (fid)
		id_destroy(to_id(fid));
}

/* A device hot-unplugged, as the ids on it see it: what the kernel does for each of them. */
void sim_cm_device_removed(struct qsm_sim *sim, struct sim_device *d)
{
	struct qsm_list *fpos, *ftmp, *pos, *tmp;

	/* Everyone on the device hears of the removal before any consequence of it. */
	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *id = qsm_container_of(pos, struct sim_id, node);

			if (id->dev == d)
				sim_post(&(struct post){ .id = id, .dev = d, .event = QSM_EV_DEVICE_REMOVAL });
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
			sim_qp_err(id);
			if (id->peer && id->peer->dev == d) {
				leave_connection(id->peer);
				leave_connection(id);
				peer_unlink(id);
			} else {
				peer_lost(id);
			}
		}
	}
}

int sim_connect(struct qsm_fid *fid, const void *pdata, size_t len)
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

	target = sim_device_serving(sim, &id->dst);
	listener = target ? sim_listener_for(sim, &id->dst, &reason) : NULL;
	/* The only step that can fail comes before anything changes, faults included. */
	if (listener && !sim->faults[QSM_SIM_FAULT_REJECT] && !sim->faults[QSM_SIM_FAULT_REJECT_STALE] &&
	    !sim->faults[QSM_SIM_FAULT_UNREACHABLE]) {
		passive = sim_id_alloc(listener->fab, NULL);
		if (!passive)
			return -ENOMEM;
	}

	id->state = ID_CONNECT;
	if (sim_fault_take(sim, QSM_SIM_FAULT_REJECT)) {
		connect_failed(id, QSM_EV_REJECTED, QSM_SIM_REJ_CONSUMER, NULL, 0);
		return 0;
	}
	if (sim_fault_take(sim, QSM_SIM_FAULT_REJECT_STALE)) {
		connect_failed(id, QSM_EV_REJECTED_STALE, QSM_SIM_REJ_STALE_CONN, NULL, 0);
		return 0;
	}
	/* The destination's device went away after resolution: the REQ goes unanswered. */
	if (sim_fault_take(sim, QSM_SIM_FAULT_UNREACHABLE) || !target) {
		connect_failed(id, QSM_EV_UNREACHABLE, -ETIMEDOUT, NULL, 0);
		return 0;
	}
	if (!listener) {
		connect_failed(id, QSM_EV_REJECTED, reason, NULL, 0);
		return 0;
	}

	/* The passive id is rdma_cm's new id for the request: on the device that took the
	 * REQ, its source the address the active side dialled. */
	sim_id_set_device(passive, target);
	passive->src = id->dst;
	passive->has_src = true;
	passive->dst = id->src;
	passive->state = ID_REQ_RCVD;
	passive->peer = id;
	id->peer = passive;
	sim_post(&(struct post){ .id = passive, .listener = listener, .event = QSM_EV_CONNECT_REQUEST,
				 .pdata = pdata, .len = len, .wire = QSM_SIM_REQ_PDATA });
	return 0;
}

int sim_accept(struct qsm_fid *fid, const void *pdata, size_t len)
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
	if (sim_fault_take(sim, QSM_SIM_FAULT_CONNECT_ERROR)) {
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

int sim_reject(struct qsm_fid *fid, const void *pdata, size_t len)
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

/* qsm_sim_partition(): the connection is cut both ways and nobody is told. */
int sim_partition(struct sim_id *id)
{
	if (id->state != ID_ESTABLISHED || !id->peer)
		return -ENOTCONN;
	peer_unlink(id);
	return 0;
}

int sim_disconnect(struct qsm_fid *fid)
{
	struct sim_id *id = to_id(fid);
	struct sim_id *peer;

	if (!id)
		return -EINVAL;
	switch (id->state) {
	case ID_ESTABLISHED:
		/* Both ends get DISCONNECTED once (DREQ, DREP), then both leave timewait; across a
		 * partition only this one, as its CM's DREQ times out. */
		peer = id->peer;
		peer_unlink(id);
		connection_down(id);
		if (peer)
			connection_down(peer);
		timewait_exit(id);
		if (peer)
			timewait_exit(peer);
		return 0;
	case ID_CONNECT:
	case ID_REQ_RCVD:
	case ID_DISCONNECTED:
	case ID_FAILED:
		/* Once a connection was tried the kernel id has a CM id: rdma_disconnect moves
		 * the QP to ERR, and a DREQ that cannot be sent in this state is no error. */
		sim_qp_err(id);
		return 0;
	default:
		return -EINVAL;
	}
}
