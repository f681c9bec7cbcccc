/* rdma-qsm: the sim fabric's verbs: the hardware QP of an id (enum sim_qp), memory regions, and
 * RC work requests that execute when posted, with their completions and errors as on the wire. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "world.h"

#define MSG_MAX (1ull << 31)     /* max_msg_sz of every RC HCA */

/* ---- QPs and their completions ---- */

/* One work completion, to the id's owner.  Completions only: the runtime makes the QP's
 * WC_ERROR of its first error completion (src/fabric/fabric.h). */
/* sq_frees: send queue slots its taking frees; rq_free: a receive's that held a slot. */
static void complete_wc(struct sim_id *id, struct qsm_fabric_wc *wc, unsigned sq_frees, bool rq_free)
{
	if (wc->status != QSM_WC_SUCCESS)
		wc->byte_len = wc->imm_data = wc->wc_flags = 0;
	if (rq_free && id->cap.srq)
		wc->wc_flags |= QSM_WC_SRQ;
	/* a receive of the QP's SRQ frees the SRQ's slot, not the QP's */
	sim_post(&(struct post){ .id = id, .event = QSM_EV_COMPLETION, .wc = wc, .sq_frees = sq_frees,
				 .rq_free = rq_free && !id->cap.srq,
				 .srq = rq_free && id->cap.srq ? (struct sim_srq *)(void *)id->cap.srq : NULL });
}

/* The receive a SEND to `id` lands in: the first of its own, or of its SRQ's; or NULL. */
static struct sim_recv *next_recv(struct sim_id *id)
{
	if (id->cap.srq)
		return sim_srq_peek((struct sim_srq *)(void *)id->cap.srq);
	return qsm_list_empty(&id->recvs) ? NULL : qsm_container_of(id->recvs.next, struct sim_recv, node);
}

/* A flush: of a receive the QP held (`held`), or of a WR posted in ERR, which holds no slot. */
static void flush(struct sim_id *id, uint64_t wr_id, enum qsm_wr_opcode opcode, bool held)
{
	complete_wc(id, &(struct qsm_fabric_wc){ .wr_id = wr_id, .status = QSM_WC_WR_FLUSH_ERR,
						 .opcode = opcode }, 0, held);
}

/* The completion of a send WR on the send queue: taking it frees its slot and those of the
 * unsignaled WRs before it (a send queue completes in order). */
static void send_complete(struct sim_id *id, const struct qsm_fabric_wr *wr, enum qsm_wc_status status,
			  uint32_t byte_len)
{
	unsigned frees = id->sends_unsig + 1;

	id->sends_unsig = 0;
	complete_wc(id, &(struct qsm_fabric_wc){ .wr_id = wr->wr_id, .status = status,
						 .opcode = wr->opcode, .byte_len = byte_len }, frees, false);
}

/* A receive consumed (or flushed, or discarded): off its QP's or its SRQ's list. */
static void recv_free(struct sim_id *id, struct sim_recv *r)
{
	if (id->cap.srq)
		sim_srq_consumed((struct sim_srq *)(void *)id->cap.srq);
	qsm_list_del(&r->node);   /* its slot: until its completion is taken (nrecvs) */
	free(r);
}

/*
 * The QP enters ERR: what it still holds flushes, in post order, at once, so the
 * completions precede whatever reports the cause (DISCONNECTED, DRAINED, ...).
 */
void sim_qp_err_after(struct sim_id *id, const struct post *cause)
{
	bool was_err = id->qp == SIM_QP_NONE || id->qp == SIM_QP_ERR;

	if (!was_err) {
		id->qp = SIM_QP_ERR;
		while (!qsm_list_empty(&id->recvs)) {
			struct sim_recv *r = qsm_container_of(id->recvs.next, struct sim_recv, node);

			flush(id, r->wr_id, QSM_WR_RECV, true);
			recv_free(id, r);
		}
	}
	if (cause)
		sim_post(cause);
	/* On an SRQ: it takes no more of the SRQ's receives (they stay there), and says so, after
	 * what made it err -- the CM event a librdmacm reads before it moves the QP. */
	if (!was_err && id->cap.srq)
		sim_post_simple(id, QSM_EV_LAST_WQE, 0);
}

void sim_qp_err(struct sim_id *id)
{
	sim_qp_err_after(id, NULL);
}

/* A connection came up: the sim moves its QPs through RTR to RTS at once. */
void sim_qp_rts(struct sim_id *id)
{
	id->qp = SIM_QP_RTS;
}

/* An affiliated asynchronous error (IBV_EVENT_QP_FATAL, QP_ACCESS_ERR, ...). */
void sim_qp_fatal(struct sim_id *id)
{
	sim_qp_err(id);
	sim_post_simple(id, QSM_EV_QP_FATAL, 0);
}

/* The completions of receives the QP took from its SRQ, not yet taken, go with it: the
 * slots they hold are free again (rdmacm frees them when it polls a CQE whose QP is gone). */
static void srq_slots_free(struct sim_id *id)
{
	struct qsm_list *heads[2] = { &id->fab->queue, &id->fab->sim->held };
	struct qsm_list *pos, *tmp;

	for (int i = 0; i < 2; i++) {
		qsm_list_each(pos, tmp, heads[i]) {
			struct sim_event *e = qsm_container_of(pos, struct sim_event, node);

			if (e->id == id && e->event == QSM_EV_COMPLETION && e->srq) {
				e->srq->held--;
				e->srq = NULL;
			}
		}
	}
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
	srq_slots_free(id);
	sim_drop_events(id, QSM_EV_COMPLETION);
	sim_drop_events(id, QSM_EV_LAST_WQE);
	if (id->cap.srq)
		((struct sim_srq *)(void *)id->cap.srq)->nqps--;
	id->cap.srq = NULL;
	id->nsends = id->sends_unsig = id->nrecvs = 0;
	id->qp = SIM_QP_NONE;
	id->dev->nqps--;
	sim->st.qps--;
	sim_device_settle(id->dev);
}

int sim_create_qp(struct qsm_fid *fid, const struct qsm_fabric_qp_attr *attr)
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
	if (attr->srq && ((struct sim_srq *)(void *)attr->srq)->dev != id->dev)
		return -EINVAL;   /* an SRQ serves the QPs of its own device */
	if (sim_fault_take(sim, QSM_SIM_FAULT_ENOMEM))
		return -ENOMEM;
	id->qp = SIM_QP_INIT;
	id->cap = *attr;
	if (attr->srq)
		((struct sim_srq *)(void *)attr->srq)->nqps++;
	id->nsends = id->sends_unsig = id->nrecvs = 0;
	id->dev->nqps++;
	sim->st.qps++;
	return 0;
}

void sim_destroy_qp(struct qsm_fid *fid)
{
	if (fid)
		qp_destroy(to_id(fid));
}

int sim_drain(struct qsm_fid *fid)
{
	struct sim_id *id = to_id(fid);

	if (!id)
		return -EINVAL;
	if (id->qp == SIM_QP_NONE)
		return -EINVAL;
	/* No device check: draining is how the runtime lets go of a device being removed.
	 * The marker is posted last, so it flushes behind every WR posted before it. */
	sim_qp_err(id);
	/* the marker's completion frees the unsignaled WRs' slots, as any of the send queue's */
	sim_post(&(struct post){ .id = id, .event = QSM_EV_DRAINED, .sq_frees = id->sends_unsig });
	id->sends_unsig = 0;
	return 0;
}

/*
 * What the QP still holds, taken now (the runtime is about to destroy it): the completions it
 * made that were not taken yet, then its receives still posted, flushed.  Its sends ran when
 * posted, so theirs are among the completions; a DRAINED still due will not come.  The QP is in
 * ERR from here (no LAST_WQE for that: it is going).
 */
int sim_flush_qp(struct qsm_fid *fid, struct qsm_fabric_cqe *cqe, int max)
{
	struct sim_id *id = to_id(fid);
	int n;

	if (!id || id->qp == SIM_QP_NONE)
		return 0;
	id->qp = SIM_QP_ERR;
	n = sim_take_completions(id, cqe, max);
	while (n < max && !qsm_list_empty(&id->recvs)) {
		struct sim_recv *r = qsm_container_of(id->recvs.next, struct sim_recv, node);

		cqe[n].owner = id->owner;
		cqe[n].id = fid;
		cqe[n].wc = (struct qsm_fabric_wc){ .wr_id = r->wr_id, .status = QSM_WC_WR_FLUSH_ERR,
						    .opcode = QSM_WR_RECV };
		n++;
		id->nrecvs--;   /* its slot: freed as its completion is taken, which is now */
		id->fab->sim->st.events_delivered++;   /* a completion delivered, as if queued */
		recv_free(id, r);
	}
	if (n < max)
		sim_drop_events(id, QSM_EV_DRAINED);
	return n;
}

/* ---- MRs ---- */

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

int sim_reg_mr(struct qsm_fdev *fdev, void *addr, size_t len, int access, struct qsm_fmr **ret,
	       uint32_t *lkey, uint32_t *rkey)
{
	struct sim_device *d = to_dev(fdev);
	struct sim_mr *mr;

	if (!d || !addr || !len || !ret || !lkey || !rkey)
		return -EINVAL;
	if (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ |
		       QSM_ACCESS_MW_BIND | QSM_ACCESS_READ_SINK))
		return -EINVAL;
	/* the sim is an IB/RoCE device: a read's sink needs local write only */
	if (access & QSM_ACCESS_READ_SINK)
		access = (access & ~QSM_ACCESS_READ_SINK) | QSM_ACCESS_LOCAL_WRITE;
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
	/* out of keys: the device can register no more (a key is never given twice) */
	if (d->sim->next_mr_key >= SIM_WINDOW_KEYS - 2)
		return -ENOMEM;
	mr = sim_zalloc(sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->dev = d;
	mr->addr = (uintptr_t)addr;
	mr->len = len;
	mr->access = access;
	/* Distinct lkey and rkey, so that a ULP that mixes them up fails here as on some HCAs. */
	mr->lkey = ++d->sim->next_mr_key;
	mr->rkey = ++d->sim->next_mr_key;
	qsm_list_add_tail(&d->mrs, &mr->node);
	d->nmrs++;
	d->sim->st.mrs++;
	*ret = (struct qsm_fmr *)(void *)mr;
	*lkey = mr->lkey;
	*rkey = mr->rkey;
	return 0;
}

/* An MR or a window of d goes: off its list, its hold on d and its count (*stat) let go. */
static void dev_key_free(struct sim_device *d, struct qsm_list *node, unsigned *stat, void *o)
{
	qsm_list_del(node);
	d->nmrs--;
	(*stat)--;
	free(o);
	sim_device_settle(d);
}

static bool mr_has_window(const struct sim_mr *mr)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &mr->dev->mws) {
		const struct sim_mw *w = qsm_container_of(pos, struct sim_mw, node);

		if (w->bound && w->mr == mr)
			return true;
	}
	return false;
}

/* Refused while a window is bound to the MR, as ibv_dereg_mr refuses it (IBA 10.6.7.2.6): a
 * peer that still holds the window's rkey would write into memory its owner takes as free. */
int sim_dereg_mr(struct qsm_fmr *fmr)
{
	struct sim_mr *mr = (struct sim_mr *)(void *)fmr;

	if (!mr)
		return 0;
	if (mr_has_window(mr))
		return -EBUSY;
	dev_key_free(mr->dev, &mr->node, &mr->dev->sim->st.mrs, mr);
	return 0;
}

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
/* The bound window of `d` that `rkey` names, or NULL. */
static struct sim_mw *mw_by_rkey(struct sim_device *d, uint32_t rkey)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &d->mws) {
		struct sim_mw *w = qsm_container_of(pos, struct sim_mw, node);

		if (w->bound && w->rkey == rkey)
			return w;
	}
	return NULL;
}

/* An rkey is an MR's or a bound window's (whose range lies in its MR: the bind checked it). */
static bool mr_grants(struct sim_device *d, uint32_t key, bool remote, uint64_t addr, uint64_t len,
		      int access)
{
	struct sim_mr *mr = mr_by_key(d, key, remote);
	struct sim_mw *w;

	if (mr)
		return (mr->access & access) == access && mr_covers(mr, addr, len);
	w = remote ? mw_by_rkey(d, key) : NULL;
	return w && (w->access & access) == access && addr >= w->addr && len <= w->len &&
	       addr - w->addr <= w->len - len;
}

/* ---- memory windows (type 2): bound by a WR, invalidated by the peer's SEND_WITH_INV or
 * our LOCAL_INV ---- */

int sim_alloc_mw(struct qsm_fdev *fdev, struct qsm_fmw **ret)
{
	struct sim_device *d = to_dev(fdev);
	struct sim_mw *w;

	if (!d || !ret)
		return -EINVAL;
	if (!device_up(d))
		return -ENODEV;
	if (d->sim->next_mw_index >= SIM_WINDOW_INDEX_MAX)
		return -ENOMEM;   /* out of window indexes: never one given twice */
	w = sim_zalloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->dev = d;
	/* its own space (world.h): no MR key ever equals one of its rkeys, stale ones included */
	w->rkey = SIM_WINDOW_KEYS | (++d->sim->next_mw_index) << 8;   /* the low byte: the key */
	qsm_list_add_tail(&d->mws, &w->node);
	d->nmrs++;
	d->sim->st.mws++;
	*ret = (struct qsm_fmw *)(void *)w;
	return 0;
}

void sim_dealloc_mw(struct qsm_fmw *fmw)
{
	struct sim_mw *w = (struct sim_mw *)(void *)fmw;

	if (w)
		dev_key_free(w->dev, &w->node, &w->dev->sim->st.mws, w);
}

/* The window with that rkey on `d`, bound, is invalidated: true, else false. */
static bool mw_invalidate(struct sim_device *d, uint32_t rkey)
{
	struct sim_mw *w = mw_by_rkey(d, rkey);

	if (w)
		w->bound = false;
	return w != NULL;
}

/* ---- posts: WRs execute when posted, against the MRs their keys name ---- */

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
	send_complete(id, wr, status, 0);
	sim_qp_err(id);
}

static void send_done(struct sim_id *id, const struct qsm_fabric_wr *wr, uint32_t byte_len)
{
	if (wr->flags & QSM_POST_SIGNALED)
		send_complete(id, wr, QSM_WC_SUCCESS, byte_len);
	else
		id->sends_unsig++;
}

static bool has_imm(const struct qsm_fabric_wr *wr)
{
	return wr->opcode == QSM_WR_SEND_WITH_IMM || wr->opcode == QSM_WR_RDMA_WRITE_WITH_IMM;
}

/* The receive a SEND or WRITE_WITH_IMM consumed, completed at the responder. */
static void recv_done(struct sim_id *peer, struct sim_recv *r, const struct qsm_fabric_wr *wr,
		      uint32_t len)
{
	struct qsm_fabric_wc wc = {
		.wr_id = r->wr_id, .status = QSM_WC_SUCCESS, .byte_len = len,
		.opcode = wr->opcode == QSM_WR_RDMA_WRITE_WITH_IMM ? QSM_WR_RECV_RDMA_WITH_IMM : QSM_WR_RECV,
	};

	if (has_imm(wr)) {
		wc.wc_flags = QSM_WC_WITH_IMM;
		wc.imm_data = wr->imm_data;
	}
	if (wr->opcode == QSM_WR_SEND_WITH_INV) {
		wc.wc_flags = QSM_WC_WITH_INV;
		wc.invalidated_rkey = wr->imm_data;
	}
	complete_wc(peer, &wc, 0, true);
	recv_free(peer, r);
}

/*
 * A SEND lands in the peer's first posted receive.  The responder detects its errors
 * first and completes that receive in error; the requester then gets the NAK.  What rxe
 * (6.1) reports, measured over soft-RoCE: a receive too short and a receive whose lkey
 * does not grant local write both complete LOC_QP_OP_ERR at the responder (its copy
 * fails: a "malformed WQE") and REM_OP_ERR at the requester.  (Hardware may say
 * LOC_LEN_ERR / LOC_PROT_ERR and REM_INV_REQ_ERR; the kernel we test on is the truth.)
 */
static void send_to(struct sim_id *id, struct sim_id *peer, const struct qsm_fabric_wr *wr)
{
	uint64_t len = sges_len(wr->sg_list, wr->num_sge);
	struct sim_recv *r;
	enum qsm_wc_status rstatus = QSM_WC_SUCCESS;

	if (!(r = next_recv(peer))) {
		/* RNR NAKs until the retries run out.  An RNR NAK is flow control: the responder's
		 * QP stays in RTS and hears nothing. */
		send_failed(id, wr, QSM_WC_RNR_RETRY_EXC_ERR);
		return;
	}
	if (!sges_valid(peer->dev, r->sge, r->num_sge, QSM_ACCESS_LOCAL_WRITE) ||
	    len > sges_len(r->sge, r->num_sge))
		rstatus = QSM_WC_LOC_QP_OP_ERR;
	/* SEND_WITH_INV: the rkey must be a bound window of the responder's (the sim's choice for
	 * one that is not: the IB spec's invalid request, REM_INV_REQ_ERR, the receive flushed) */
	if (rstatus == QSM_WC_SUCCESS && wr->opcode == QSM_WR_SEND_WITH_INV &&
	    !mw_invalidate(peer->dev, wr->imm_data)) {
		sim_qp_err(peer);
		send_failed(id, wr, QSM_WC_REM_INV_REQ_ERR);
		return;
	}
	if (rstatus != QSM_WC_SUCCESS) {
		complete_wc(peer, &(struct qsm_fabric_wc){ .wr_id = r->wr_id, .status = rstatus,
							   .opcode = QSM_WR_RECV }, 0, true);
		recv_free(peer, r);
		sim_qp_err(peer);
		send_failed(id, wr, QSM_WC_REM_OP_ERR);
		return;
	}
	sges_copy(r->sge, r->num_sge, wr->sg_list, wr->num_sge);
	recv_done(peer, r, wr, (uint32_t)len);
	send_done(id, wr, 0);
}

/*
 * RDMA WRITE and READ reach the peer's memory through its rkey; the peer's owner sees
 * nothing unless the rkey is refused: then the requester gets REM_ACCESS_ERR and the
 * responder's QP goes to ERR as rxe (6.1) does it, measured over soft-RoCE: silently, no
 * async event (hardware may raise IBV_EVENT_QP_ACCESS_ERR), its posted receives flushed.  A zero-length transfer checks neither rkey nor remote
 * address and moves nothing (IBA C9-88; rxe's check_rkey does the same).
 */
static void rdma_to(struct sim_id *id, struct sim_id *peer, const struct qsm_fabric_wr *wr)
{
	bool write = wr->opcode != QSM_WR_RDMA_READ;
	uint64_t len = sges_len(wr->sg_list, wr->num_sge);
	struct qsm_fabric_sge remote = { .addr = wr->remote_addr, .length = (uint32_t)len };
	struct sim_recv *r = NULL;

	/* WRITE_WITH_IMM needs a receive as a SEND does (rxe checks it before the rkey) */
	if (has_imm(wr) && !(r = next_recv(peer))) {
		send_failed(id, wr, QSM_WC_RNR_RETRY_EXC_ERR);
		return;
	}
	if (!len) {
		if (r)
			recv_done(peer, r, wr, 0);
		send_done(id, wr, 0);
		return;
	}
	if (!mr_grants(peer->dev, wr->rkey, true, wr->remote_addr, len,
		       write ? QSM_ACCESS_REMOTE_WRITE : QSM_ACCESS_REMOTE_READ)) {
		sim_qp_err(peer);
		send_failed(id, wr, QSM_WC_REM_ACCESS_ERR);
		return;
	}
	if (write)
		sges_copy(&remote, 1, wr->sg_list, wr->num_sge);
	else
		sges_copy(wr->sg_list, wr->num_sge, &remote, 1);
	if (r)
		recv_done(peer, r, wr, (uint32_t)len);
	send_done(id, wr, write ? 0 : (uint32_t)len);
}

/* Keepalive (struct qsm_fabric_ops.probe): the zero-length RDMA WRITE a peer's QP in RTS
 * acknowledges, and nothing else does -- the retries run out, the QP errs, WC_ERROR. */
int sim_probe(struct qsm_fid *fid)
{
	struct sim_id *id = to_id(fid);

	if (!id || id->qp != SIM_QP_RTS)
		return -ENOTCONN;
	if (!id->peer || id->peer->qp != SIM_QP_RTS) {
		sim_qp_err(id);
		sim_post_simple(id, QSM_EV_WC_ERROR, -EIO);
	}
	return 0;
}

/* One WR on the send queue of a QP that was RTS when the list was posted; it holds a slot. */
static void wr_execute(struct sim_id *id, const struct qsm_fabric_wr *wr)
{
	struct sim_id *peer;

	id->nsends++;
	/* an earlier WR of the same list failed: the QP flushes the rest */
	if (id->qp == SIM_QP_ERR) {
		send_complete(id, wr, QSM_WC_WR_FLUSH_ERR, 0);
		return;
	}
	/* READ writes what comes back into the local SGEs; inline data needs no lkey (it was
	 * copied at post time, which is when the sim carries every WR out). */
	if (!(wr->flags & QSM_POST_INLINE) &&
	    !sges_valid(id->dev, wr->sg_list, wr->num_sge,
			wr->opcode == QSM_WR_RDMA_READ ? QSM_ACCESS_LOCAL_WRITE : 0)) {
		send_failed(id, wr, QSM_WC_LOC_PROT_ERR);
		return;
	}
	if (sges_len(wr->sg_list, wr->num_sge) > MSG_MAX) {
		send_failed(id, wr, QSM_WC_LOC_LEN_ERR);
		return;
	}
	if (wr->opcode == QSM_WR_LOCAL_INV) {
		/* our own window: no peer involved (an rkey that names none: a local error) */
		if (mw_invalidate(id->dev, wr->imm_data))
			send_done(id, wr, 0);
		else
			send_failed(id, wr, QSM_WC_LOC_PROT_ERR);
		return;
	}
	/* A responder that is gone or in ERR drops the packets: the transport retries run out. */
	peer = id->peer;
	if (!peer || peer->qp != SIM_QP_RTS) {
		send_failed(id, wr, QSM_WC_RETRY_EXC_ERR);
		return;
	}
	if (wr->opcode == QSM_WR_SEND || wr->opcode == QSM_WR_SEND_WITH_IMM ||
	    wr->opcode == QSM_WR_SEND_WITH_INV)
		send_to(id, peer, wr);
	else
		rdma_to(id, peer, wr);
}

/* The first WR the device refuses (n if none), as rxe's provider checks each WR as it reaches
 * it (validate_send_wr), those before it already posted: more SGEs than the QP takes, more
 * inline data than its max_inline_data.  Nothing else of a WR is the device's to refuse at
 * post: the runtime's door checked the rest (src/data/post.c). */
static int device_refuses(const struct sim_id *id, const struct qsm_fabric_wr *wr, int n)
{
	int k = 0;

	while (k < n && wr[k].num_sge <= (int)sim_sge_cap(id->cap.max_send_sge) &&
	       (!(wr[k].flags & QSM_POST_INLINE) ||
		sges_len(wr[k].sg_list, wr[k].num_sge) <= id->cap.max_inline_data))
		k++;
	return k;
}

/*
 * A WR executes when it is posted.  The runtime checked every WR at its door; as with
 * ibv_post_send, the device refuses a WR it cannot take (device_refuses) part way: the WRs
 * before the refused one are posted (*posted).  What the fabric finds wrong (keys, the peer)
 * fails the WR.  The send queue of a QP not yet RTS refuses WRs; in ERR it flushes them; a
 * list with more WRs than the send queue has room for posts none.
 */
int sim_post_send(struct qsm_fid *fid, const struct qsm_fabric_wr *wr, int n, int *posted)
{
	struct sim_id *id = to_id(fid);
	int k = n;

	if (posted)
		*posted = 0;
	if (!id || id->qp == SIM_QP_NONE)
		return -EINVAL;
	if (id->qp == SIM_QP_ERR) {
		/* not given to the device (as rdmacm's late flushes): every WR flushes */
		for (int i = 0; i < n; i++)
			flush(id, wr[i].wr_id, wr[i].opcode, false);
	} else {
		if (id->qp != SIM_QP_RTS)
			return -EINVAL;
		if ((unsigned)n > id->cap.max_send_wr - id->nsends)
			return -ENOBUFS;
		k = device_refuses(id, wr, n);
		for (int i = 0; i < k; i++)
			wr_execute(id, &wr[i]);
	}
	if (posted)
		*posted = k;
	return k < n ? -EINVAL : 0;
}

/* Receives may be posted from INIT on; they wait, in order, for SENDs; in ERR they flush. */
int sim_post_recv(struct qsm_fid *fid, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
		  int num_sge)
{
	struct sim_id *id = to_id(fid);
	struct sim_recv *r;

	if (!id || id->qp == SIM_QP_NONE)
		return -EINVAL;
	/* the device's own checks: a QP on an SRQ has no receive queue; the QP's max_recv_sge */
	if (id->cap.srq || sim_sges_over(num_sge, id->cap.max_recv_sge))
		return -EINVAL;
	if (id->qp == SIM_QP_ERR) {
		flush(id, wr_id, QSM_WR_RECV, false);
		return 0;
	}
	if (id->nrecvs >= id->cap.max_recv_wr)
		return -ENOBUFS;
	if (!(r = sim_recv_new(wr_id, sg_list, num_sge)))
		return -ENOMEM;
	qsm_list_add_tail(&id->recvs, &r->node);
	id->nrecvs++;
	return 0;
}

/* One BIND_MW on the send queue, executed at once.  The runtime's door checked the window, the
 * MR, the range and the access; the device checks them again as it binds, and a bind it cannot
 * make completes in error (MW_BIND_ERR, signaled or not, as rxe reports it) and errs the QP. */
int sim_bind_mw(struct qsm_fid *fid, uint64_t wr_id, struct qsm_fmw *fmw, struct qsm_fmr *fmr,
		uint64_t addr, uint64_t len, int access, unsigned int flags, uint32_t *rkey)
{
	struct sim_id *id = to_id(fid);
	struct sim_mw *w = (struct sim_mw *)(void *)fmw;
	struct sim_mr *mr = (struct sim_mr *)(void *)fmr;
	struct qsm_fabric_wr wr = { .wr_id = wr_id, .opcode = QSM_WR_BIND_MW, .flags = flags };

	if (!id || !rkey || id->qp == SIM_QP_NONE)
		return -EINVAL;
	if (id->qp == SIM_QP_ERR) {
		flush(id, wr_id, QSM_WR_BIND_MW, false);
		return 0;
	}
	if (id->qp != SIM_QP_RTS)
		return -EINVAL;
	if (id->nsends >= id->cap.max_send_wr)
		return -ENOBUFS;
	id->nsends++;
	if (w->dev != id->dev || mr->dev != id->dev || !(mr->access & QSM_ACCESS_MW_BIND) || !len ||
	    (access & ~(QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ)) || !mr_covers(mr, addr, len)) {
		send_failed(id, &wr, QSM_WC_MW_BIND_ERR);
		return 0;
	}
	w->rkey = (w->rkey & ~0xffu) | ((w->rkey + 1) & 0xffu);   /* as ibv_inc_rkey */
	w->bound = true;
	w->mr = mr;
	w->addr = addr;
	w->len = len;
	w->access = access;
	*rkey = w->rkey;
	send_done(id, &wr, 0);
	return 0;
}
