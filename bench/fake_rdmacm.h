/* rdma-qsm benchmarks and tests: the rdmacm fabric's own code over a fake provider, with what
 * needs a kernel (rdma_cm's channel and ids, QP creation, the device list) wrapped (-Wl,--wrap). */
#ifndef QSM_BENCH_FAKE_RDMACM_H
#define QSM_BENCH_FAKE_RDMACM_H

#include <stdbool.h>
#include <stdint.h>

#include <qsm/ctx.h>
#include <qsm/rdmacm.h>

#include "fabric/rdmacm/rdmacm.h"

/*
 * The fake provider: a real struct ibv_context whose ops (poll_cq, post_recv, req_notify_cq)
 * are fake_rdmacm.c's, one ibv_cq and one ibv_qp on it.  A receive posted (ibv_post_recv, inline:
 * qp->context->ops.post_recv) is recorded; the message for it has arrived, and ibv_poll_cq
 * (inline: cq->context->ops.poll_cq) hands out its completion, a whole ibv_wc copied from a
 * prepared one as a provider writes it (varied lengths).  None of them makes a system call, as
 * a kernel-bypass provider's do not.
 *
 * qsm's side is the product: qsm_rdmacm_fabric_new() with its epoll, hot fd and pending queue,
 * a device whose PD, channel and CQ are the fake provider's, the queue's id, QP and rings made by
 * the fabric's own create_id / create_qp.  The CM events that bring the queue to LIVE come
 * through the fabric's pending queue, not the CM channel (whose fd is an eventfd never readable).
 * The completion channel has no fd: a CQ is made hot as its channel's event would make it
 * (fake_cq_event).
 */
#define FAKE_ROUND 4096                 /* receives the fake QP holds: its receive queue's size */
#define FAKE_QP_NUM 0x1234

struct fake_prov {
	struct ibv_device dev;
	struct ibv_context ctx;
	struct ibv_cq cq;
	struct ibv_qp qp;
	struct ibv_pd pd;
	struct ibv_comp_channel cc;
	struct ibv_wc tmpl[FAKE_ROUND];     /* what arrives, by post seq */
	uint64_t posted[FAKE_ROUND];        /* wr_ids of receives posted, not yet completed */
	uint64_t head, tail;
	/* Sends posted (the drain's marker among them), completed after the receives posted
	 * before them are; the QP moved to ERR (ibv_modify_qp): what is left completes with
	 * IBV_WC_WR_FLUSH_ERR. */
	uint64_t sends[64];
	unsigned nsends;
	bool err;
	/* The CM, for tests of what it reports: a connect that no event answers (as a silent iWARP
	 * peer's: prov.dev.transport_type says which transport), the kernel ids destroyed, and one
	 * event at a time through the CM channel (fake_cm_event). */
	bool connect_silent;
	unsigned ids_destroyed;
	struct rdma_cm_id *watch;            /* an id whose destroy is counted in watch_destroyed */
	unsigned watch_destroyed;
	struct rdma_cm_event cm_ev;
	bool cm_ev_pending;
};

extern struct fake_prov prov;

/* The provider afresh: no receive posted. */
void prov_init(void);

/* prov_init(), an rdmacm fabric whose device list holds the fake device, a ctx on it, and one
 * queue of cls connected and dispatched to LIVE.  0, or -1 with a message on stderr.  The ctx
 * frees it all (qsm_ctx_free); one at a time. */
int fake_rdmacm_live(const struct qsm_class *cls, struct qsm_ctx **ctx, struct qsm_conn **q,
		     struct rc_fabric **f);

/* As fake_rdmacm_live(), but the queue's connect is left unanswered (prov.connect_silent) on a
 * device of the given transport: the queue stays in CONNECTING. */
int fake_rdmacm_connecting(const struct qsm_class *cls, enum ibv_transport_type transport,
			   struct qsm_ctx **ctx, struct qsm_conn **q, struct rc_fabric **f);

/* An event of the id cm through the fabric's CM channel (rdma_get_cm_event), as the kernel
 * reports one: read at the fabric's next look at its channel. */
void fake_cm_event(struct rdma_cm_id *cm, enum rdma_cm_event_type event, int status);

/* The CQ's channel fired: it goes hot, as qsm_rc_cq_events() makes it. */
void fake_cq_event(struct rc_fabric *f);

/* The fake CQ is hot: polled while the fabric is asked for events, not waited for. */
int fake_cq_hot(void);

#endif
