/* rdma-qsm: the rdma_cm ids of the rdmacm fabric: create, bind, resolve, connect, accept, reject,
 * disconnect, destroy, and the CM channel whose events are copied and acked one at a time. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "fabric/rdmacm/cm_event.h"
#include "fabric/rdmacm/rdmacm.h"

static struct qsm_fid *fid_new(struct rc_fabric *f, struct rdma_cm_id *cm, void *owner)
{
	struct qsm_fid *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->fab = f;
	id->cm = cm;
	id->owner = owner;
	id->ord = -1;
	qsm_list_init(&id->qp_node);
	qsm_list_init(&id->late);
	qsm_list_init(&id->lq_node);
	qsm_list_init(&id->held);
	cm->context = id;
	qsm_list_add_tail(&f->ids, &id->node);
	return id;
}

int qsm_rc_create_id(struct qsm_fabric *base, void *owner, struct qsm_fid **ret)
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

void qsm_rc_set_owner(struct qsm_fid *id, void *owner)
{
	if (id)
		id->owner = owner;
}

/* Off this fabric before the kernel moves it: from the migrate on, `to`'s thread may read its
 * events, and finds it marked adopting (those are held until qsm_rc_adopt). */
int qsm_rc_handoff(struct qsm_fid *id, struct qsm_fabric *to_base)
{
	struct rc_fabric *from, *to;
	struct qsm_fdev *d;

	if (!id || !to_base || to_base->ops != id->fab->base.ops || !id->requested ||
	    qsm_rc_fid_has_qp(id))
		return -EINVAL;
	from = id->fab;
	to = to_fab(to_base);
	if (to == from)
		return 0;
	d = id->dev;
	qsm_pending_drop(&from->pq, id, NULL);
	qsm_list_del(&id->node);
	id->dev = NULL;
	id->fab = to;
	id->owner = NULL;
	id->adopting = true;
	if (rdma_migrate_id(id->cm, to->ch) < 0) {
		int r = errno_or(EIO);

		id->adopting = false;
		id->fab = from;
		id->dev = d;
		qsm_list_add_tail(&from->ids, &id->node);
		return r;
	}
	if (d) {
		d->nids--;
		qsm_rc_dev_settle(d);
	}
	return 0;
}

/* The id gone for good: its kernel id, and what the fabric kept of it. */
static void fid_free(struct qsm_fid *id)
{
	struct qsm_fdev *d = id->dev;

	/* Acked events only, so this cannot wait on anything of ours (but an iWARP connect's
	 * outcome, for an id destroyed with the fabric: qsm_rc_destroy_id parks it otherwise). */
	rdma_destroy_id(id->cm);
	qsm_list_del(&id->node);
	while (!qsm_list_empty(&id->held)) {
		struct qsm_pending *p = qsm_container_of(id->held.next, struct qsm_pending, node);

		qsm_list_del(&p->node);
		qsm_pending_release(p);
	}
	qsm_rc_vctx_put(id->vc);
	free(id);
	if (d) {
		d->nids--;
		qsm_rc_dev_settle(d);
	}
}

/*
 * The owner lets go of the id: its QP and whatever was pending for it go now, and the kernel
 * id, unless an iWARP connect is outstanding: iw_cm's destroy (as its disconnect) waits for the
 * connect's outcome, and so does soft-iWARP's destroy of the QP (the connect holds it), which a
 * silent peer puts off to the provider's connect timeout (the whole ctx stalled in one system
 * call: 9 s a queue measured on siw).  Such an id is parked: owned by nobody, its QP no longer
 * the owner's (qsm_rc_unhook_qp), both destroyed when the id's next event comes
 * (qsm_rc_take_cm_event: the outcome, reported as an event nobody owns), or with the fabric.
 */
void qsm_rc_destroy_id(struct qsm_fid *id)
{
	if (!id)
		return;
	qsm_pending_drop(&id->fab->pq, id, NULL);
	if (id->iw_connecting && !id->parked) {
		/* the QP too: siw's destroy waits for the iw_cm's hold on it, the connect's */
		qsm_rc_unhook_qp(id);
		id->parked = true;
		id->owner = NULL;
		id->fab->parked++;
		return;
	}
	qsm_rc_destroy_qp(id);
	if (id->parked)
		id->fab->unparked++;
	fid_free(id);
}

int qsm_rc_bind(struct qsm_fid *id, const struct sockaddr *addr)
{
	struct sockaddr_storage ss;
	int r;

	if (!id || !addr)
		return -EINVAL;
	if ((r = qsm_sockaddr_copy(&ss, addr)) < 0)
		return r;
	if (rdma_bind_addr(id->cm, (struct sockaddr *)&ss) < 0)
		return errno_or(EINVAL);
	qsm_rc_fid_attach(id);
	return 0;
}

int qsm_rc_listen(struct qsm_fid *id, int backlog)
{
	if (!id)
		return -EINVAL;
	if (rdma_listen(id->cm, backlog) < 0)
		return errno_or(EINVAL);
	qsm_rc_fid_attach(id);
	return 0;
}

int qsm_rc_resolve_addr(struct qsm_fid *id, const struct sockaddr *src, const struct sockaddr *dst,
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

int qsm_rc_resolve_route(struct qsm_fid *id, int timeout_ms)
{
	if (!id)
		return -EINVAL;
	if (!id->cm->verbs)   /* librdmacm would dereference it */
		return -EINVAL;
	if (rdma_resolve_route(id->cm, timeout_ms) < 0)
		return errno_or(EINVAL);
	return 0;
}

static uint8_t clamp_rd(unsigned v)
{
	return (uint8_t)(v < 1 ? 1 : v > RD_ATOM_MAX ? RD_ATOM_MAX : v);
}

/*
 * As rping: RDMA READ needs responder resources (reads the peer may have in flight here) and
 * an initiator depth (reads we may have in flight there), at least 1 each; rnr_retry_count 7 =
 * retry forever on RNR NAK.  The device's limits, at most RD_ATOM_MAX; accept answers no more
 * than the request offered.
 *
 * retry_count 6, not 7: IBA gives 7 no special meaning, but soft-RoCE does (rxe_completer:
 * "if (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--"), and a QP that retries forever never
 * learns that its peer vanished: on two hosts a 30 s partition, and a peer powered off, left
 * the QP retrying for good and the queue LIVE, keepalive or not
 * (tests/vm/scenarios/wire-faults.sh).  Six retries still ride out a short cut.  The REQ
 * carries it: both sides' QPs take the active side's.
 */
/* The initiator depth an active id offers: the device's, at least 1 */
static unsigned active_ord(const struct qsm_fid *id)
{
	return clamp_rd(id->dev && id->dev->max_init_rd_atom ? id->dev->max_init_rd_atom : 1);
}

/*
 * The CM hands a request's (and a reply's) two figures over from the receiver's side: its
 * initiator_depth is the peer's responder resources (the READs we may have in flight there),
 * its responder_resources the peer's initiator depth (the READs it may have in flight here) --
 * the IB CM swaps them (cm_req_handler, cm_rep_handler), iWARP's the same.  Measured on rxe and
 * siw: the kernel's NVMe host asks responder_resources 128, initiator_depth 0, and the request
 * says initiator_depth 128, responder_resources 0.  Read the other way, a passive queue of
 * qsm-nvmet had one READ in flight where the host takes 16 (and soft-iWARP then stalled it).
 */
/* The one a passive id accepts with: no more than the peer's responder resources */
static unsigned passive_ord(const struct qsm_fid *id)
{
	unsigned init = id->dev && id->dev->max_init_rd_atom ? id->dev->max_init_rd_atom : 1;

	return clamp_rd(id->req_initiator_depth < init ? id->req_initiator_depth : init);
}

static void conn_param(struct qsm_fid *id, struct rdma_conn_param *p, const void *pdata, size_t len,
		       bool accept)
{
	unsigned resp = id->dev && id->dev->max_rd_atom ? id->dev->max_rd_atom : 1;

	/* no more responder resources than the READs the peer will have in flight here */
	if (accept && id->req_responder_resources < resp)
		resp = id->req_responder_resources;
	memset(p, 0, sizeof(*p));
	p->private_data = len ? pdata : NULL;
	p->private_data_len = (uint8_t)len;
	p->responder_resources = clamp_rd(resp);
	p->initiator_depth = (uint8_t)(accept ? passive_ord(id) : active_ord(id));
	p->flow_control = 1;
	p->retry_count = 6;
	p->rnr_retry_count = 7;
}

/*
 * The longest private data a CM message of this kind carries on the id's transport.  Checked
 * before librdmacm is called: the kernel's rdma_accept() that fails on the length still rejects
 * the connection (its error path sends a REJ), and a call that fails must have no effect.  IB
 * and RoCE: the IB CM's REQ (92 bytes, less the 36 of the rdma_cm header for an IP address),
 * REP (196) and REJ (148) private data; iWARP: what fits conn_param's 8-bit length with MPA
 * v2's 4-byte IRD/ORD header in it (251: measured on soft-iWARP, a request of 251 bytes
 * arrives and one of 252 never reaches the listener, its kernel rejects it).
 */
#define QSM_PDATA_IWARP_MAX (255 - 4)
enum pdata_msg { PDATA_REQ, PDATA_REP, PDATA_REJ };

static size_t pdata_max(const struct qsm_fid *id, enum pdata_msg m)
{
	static const size_t ib[] = {
		[PDATA_REQ] = QSM_PDATA_REQ_MAX, [PDATA_REP] = QSM_PDATA_REP_MAX, [PDATA_REJ] = QSM_PDATA_REJ_MAX,
	};

	if (id->cm->verbs && id->cm->verbs->device->transport_type == IBV_TRANSPORT_IWARP)
		return QSM_PDATA_IWARP_MAX;
	return ib[m];
}

static bool pdata_ok(const struct qsm_fid *id, const void *pdata, size_t len, enum pdata_msg m)
{
	return len <= pdata_max(id, m) && (!len || pdata);
}

int qsm_rc_connect(struct qsm_fid *id, const void *pdata, size_t len)
{
	struct rdma_conn_param p;

	if (!id || !pdata_ok(id, pdata, len, PDATA_REQ))
		return -EINVAL;
	conn_param(id, &p, pdata, len, false);
	if (rdma_connect(id->cm, &p) < 0)
		return errno_or(EINVAL);
	id->iw_connecting = id->cm->verbs && id->cm->verbs->device->transport_type == IBV_TRANSPORT_IWARP;
	return 0;
}

int qsm_rc_accept(struct qsm_fid *id, const void *pdata, size_t len)
{
	struct rdma_conn_param p;

	if (!id || !pdata_ok(id, pdata, len, PDATA_REP))
		return -EINVAL;
	if (!id->cm->qp)   /* librdmacm would read the QP number from conn_param */
		return -EINVAL;
	conn_param(id, &p, pdata, len, true);
	if (rdma_accept(id->cm, &p) < 0)
		return errno_or(EINVAL);
	id->qp_rts = true;   /* librdmacm moved it there before sending the REP */
	return 0;
}

/*
 * How long the kernel's CM may take to end a connect or an accept by itself.  IB and RoCE (the
 * IB CM, drivers/infiniband/core/cm.c and cma.c): a REQ, and the REP that answers it, is sent
 * up to 1 + max_cm_retries (rdma_cm: CMA_MAX_CM_RETRIES, 15) times, each waiting
 * 2 x the path's packet lifetime + the peer's CM response time (CMA_CM_RESPONSE_TIMEOUT, 20),
 * those being 4.096 us x 2^value (the kernel's cm_convert_to_ms: 2^(value - 8) ms); then the
 * active side gets UNREACHABLE (-ETIMEDOUT) for its REQ, the passive side for its REP.  The
 * lifetime is the route's when it has one; RoCE's is the rdma_cm's constant, taken at the
 * larger of its values across kernels (16 and 18).  With RoCE's, 16 x (2 x 1024 + 4096) ms:
 * 98 s.  iWARP connects over TCP first: its SYN retries (tcp_syn_retries 6, 127 s) bound it.
 */
#define CM_MAX_RETRIES 15
#define CM_RESPONSE_TIMEOUT 20
#define CM_IBOE_PACKET_LIFETIME 18
#define CM_IWARP_MS 127000u

static uint32_t iba_ms(unsigned t)
{
	return 1u << (t > 8 ? (t > 31 ? 23 : t - 8) : 0);
}

int qsm_rc_notify(struct qsm_fid *id)
{
	if (!id)
		return -EINVAL;
	if (rdma_notify(id->cm, IBV_EVENT_COMM_EST) < 0)
		return errno_or(EINVAL);
	return 0;
}

int qsm_rc_read_depth(struct qsm_fid *id)
{
	if (!id)
		return -EINVAL;
	if (id->requested)
		return (int)passive_ord(id);
	return id->ord >= 0 ? id->ord : -ENOTCONN;
}

uint32_t qsm_rc_cm_timeout_ms(struct qsm_fid *id)
{
	unsigned plt = CM_IBOE_PACKET_LIFETIME;

	if (!id)
		return 0;
	if (id->cm->verbs && id->cm->verbs->device->transport_type == IBV_TRANSPORT_IWARP)
		return CM_IWARP_MS;
	if (id->cm->route.num_paths > 0 && id->cm->route.path_rec &&
	    (id->cm->route.path_rec->packet_life_time & 0x3f) > plt)
		plt = id->cm->route.path_rec->packet_life_time & 0x3f;
	return (CM_MAX_RETRIES + 1) * (2 * iba_ms(plt) + iba_ms(CM_RESPONSE_TIMEOUT));
}

int qsm_rc_reject(struct qsm_fid *id, const void *pdata, size_t len)
{
	if (!id || !pdata_ok(id, pdata, len, PDATA_REJ))
		return -EINVAL;
	if (rdma_reject(id->cm, pdata, (uint8_t)len) < 0)
		return errno_or(EINVAL);
	return 0;
}

int qsm_rc_disconnect(struct qsm_fid *id)
{
	if (!id)
		return -EINVAL;
	if (!id->cm->verbs)   /* never had a device: nothing to disconnect */
		return -EINVAL;
	if (rdma_disconnect(id->cm) < 0)
		return errno_or(EINVAL);
	/* librdmacm moved an IB/RoCE QP to ERR (iWARP: to SQD, and the drain follows) */
	if (qsm_rc_fid_has_qp(id) && id->cm->verbs->device->transport_type == IBV_TRANSPORT_IB)
		id->qp_err = true;
	return 0;
}

struct qsm_fdev *qsm_rc_id_device(struct qsm_fid *id)
{
	if (!id)
		return NULL;
	qsm_rc_fid_attach(id);
	return id->dev;
}

void qsm_rc_id_verbs(struct qsm_fid *id, void **cm_id, void **qp, void **pd)
{
	*cm_id = id->cm;
	*qp = qsm_rc_fid_has_qp(id) ? id->cm->qp : NULL;
	*pd = id->dev && id->dev->pd ? id->dev->pd : NULL;
}

int qsm_rc_id_src_addr(struct qsm_fid *id, struct sockaddr_storage *ss)
{
	struct sockaddr *sa;

	if (!id || !ss)
		return -EINVAL;
	sa = rdma_get_local_addr(id->cm);
	if (qsm_sockaddr_copy(ss, sa) < 0)
		return -ENOENT;
	return 0;
}

/* ---- the CM channel ---- */

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

int qsm_rc_take_cm_event(struct rc_fabric *f, struct qsm_fabric_event *ev)
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
		if (ev->event == QSM_EV_REJECTED)
			ev->event = qsm_cm_rejected(ce->status, ce->id->verbs &&
						ce->id->verbs->device->transport_type == IBV_TRANSPORT_IWARP);
		fill_pdata(ev, ce);
		if (ev->event == QSM_EV_CM_UNKNOWN && !ce->id->context) {
			/* Every id of ours has a context: this is one the kernel made for us (as it does
			 * for a request) for an event we cannot name.  Nobody owns it: the ctx counts it
			 * as an orphan, and the id goes, so that nothing is left behind (acked first:
			 * the ack frees the event, so its id is read before). */
			struct rdma_cm_id *made = ce->id;

			rdma_ack_cm_event(ce);
			rdma_destroy_id(made);
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
			id->req_initiator_depth = ce->param.conn.initiator_depth;
			id->req_responder_resources = ce->param.conn.responder_resources;
			id->requested = true;
		} else {
			id = ce->id->context;
			if (__builtin_expect(id->adopting, 0)) {
				/* handed to this fabric, its inbox item not taken yet: held for
				 * the adopt, in order (no private data: a passive id before its
				 * accept hears none the runtime reads); out of memory, lost, and
				 * the request's timeout covers it */
				struct qsm_pending *p = qsm_pending_alloc(sizeof(*p));

				if (p) {
					p->event = ev->event;
					p->status = ev->status;
					p->id = id;
					qsm_list_add_tail(&id->held, &p->node);
				}
				rdma_ack_cm_event(ce);
				continue;
			}
			/* The active side's READ depth: what it offered, at most what the peer's CM says
			 * it takes (the REP's responder resources, which the event hands over as its
			 * initiator_depth: see passive_ord), as the kernel sets the QP's max_rd_atomic */
			if (ce->event == RDMA_CM_EVENT_ESTABLISHED && !id->requested) {
				unsigned o = active_ord(id);

				id->ord = (int16_t)(ce->param.conn.initiator_depth < o ?
						    ce->param.conn.initiator_depth : o);
			}
			/* An event of an id that connected is its connect's outcome, or after it, but
			 * for ADDR_CHANGE.  DEVICE_REMOVAL too: the kernel's removal waits for the id's
			 * destroy, and drops a connect's outcome that comes after it, so the id goes
			 * now, even if the destroy waits for the provider's connect timeout. */
			if (ce->event != RDMA_CM_EVENT_ADDR_CHANGE)
				id->iw_connecting = false;
		}
		rdma_ack_cm_event(ce);
		if (__builtin_expect(id->parked, 0)) {
			/* An event of an id its owner let go while an iWARP connect was outstanding:
			 * reported as an event nobody owns (the ctx counts and traces it); the id
			 * destroyed once nothing holds the kernel's destroy (qsm_rc_destroy_id). */
			if (ev->event == QSM_EV_DEVICE_REMOVAL && id->dev)
				qsm_rc_dev_removed(id->dev);
			if (!id->iw_connecting)
				qsm_rc_destroy_id(id);
			ev->private_data_len = 0;
			return 0;
		}
		qsm_rc_fid_attach(id);
		if (ev->event == QSM_EV_ESTABLISHED && qsm_rc_fid_has_qp(id))
			id->qp_rts = true;   /* the active side's librdmacm moved it there on the REP */
		ev->id = id;
		/* a request is for its listener: the new id has no owner yet */
		ev->owner = lid ? lid->owner : id->owner;
		if (ev->event == QSM_EV_DEVICE_REMOVAL) {
			ev->device = id->dev;
			if (id->dev)
				qsm_rc_dev_removed(id->dev);
			else if (id->cm->verbs)
				qsm_rc_vctx_removed(id->cm->verbs);
		}
		return 0;
	}
}
