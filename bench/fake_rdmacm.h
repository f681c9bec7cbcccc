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

/* Dispatch until the ctx has nothing left to do, at most @bound calls (a test's settle). */
static inline void fake_drain(struct qsm_ctx *ctx, int bound)
{
	for (int i = 0; i < bound && qsm_ctx_dispatch(ctx, 0) > 0; i++)
		;
}

/* The ctx's counters, by value. */
static inline struct qsm_counters fake_counters(struct qsm_ctx *ctx)
{
	struct qsm_counters c;

	qsm_ctx_counters(ctx, &c, sizeof(c));
	return c;
}

/* prov_init() and an rdmacm fabric whose device list holds the fake device: 0, or -1 with a
 * message on stderr.  For a test that makes its own ctx, listener and queues on it. */
int fake_rdmacm_fabric(struct qsm_fabric **fab);

/* An event of the id cm through the fabric's CM channel (rdma_get_cm_event), as the kernel
 * reports one: read at the fabric's next look at its channel. */
void fake_cm_event(struct rdma_cm_id *cm, enum rdma_cm_event_type event, int status);

/* The CQ's channel fired: it goes hot, as qsm_rc_cq_events() makes it. */
void fake_cq_event(struct rc_fabric *f);

/* The fake CQ is hot: polled while the fabric is asked for events, not waited for. */
int fake_cq_hot(void);

/*
 * Many ids (bench/dispatch), after fake_many_init(): the CM of many connections, each
 * rdma_cm_id its own and each QP its own (a provider of their own, apart from prov's), every
 * call answered at once as the kernel's CM would answer it, the event queued on the id's
 * channel and handed out by rdma_get_cm_event() one at a time, in order (acked before the
 * next); the channel's fd readable while events are queued.  rdma_resolve_addr brings
 * ADDR_RESOLVED, rdma_resolve_route ROUTE_RESOLVED, rdma_connect ESTABLISHED; the peer hangs up
 * as soon as its ESTABLISHED is taken (DISCONNECTED queued behind it), and rdma_disconnect brings
 * TIMEWAIT_EXIT.  A QP in ERR completes a send (the drain's marker) at once, flushed, on the one
 * CQ, whose channel (an eventfd) fires if the CQ was armed.  Ids and QPs come from pools made at
 * init: nothing is allocated per call, so the fake's own cost is a few stores a call, the same for
 * whoever calls it.  Silent: no event answers a call (held: the resolves kept, answered by
 * fake_many_answer()).
 */
struct fake_done {
	uint64_t wr_id;
	uint32_t qp_num;
};

struct fake_many {
	bool on, silent, hold;
	struct ibv_device dev;
	struct ibv_context ctx;
	struct ibv_cq cq;
	struct ibv_pd pd;
	struct ibv_comp_channel cc;          /* an eventfd: readable while cq_events */
	bool armed;
	unsigned cq_events;
	struct fake_done *done;              /* completions in the CQ, a ring */
	uint32_t done_head, done_len, done_cap;
	struct fake_id *free_ids;
	struct fake_qp *free_qps;
	uint32_t qpn;
	struct ibv_qp_cap qp_cap;            /* the last QP's, as asked */
	struct rdma_cm_id **held;            /* resolves answered by fake_many_answer() */
	size_t nheld;
	uint64_t events;                     /* CM events handed out */
	uint64_t queued;                     /* CM events on the channels, not handed out yet */
	uint32_t chan_cap;                   /* events a channel made now holds (two an id) */
	/* the rdmacm fabric's side: what librdmacm's context tells the fabric of the id's device
	 * (the fake device), set when its address resolves */
	void (*attach)(struct rdma_cm_id *cm);
};

extern struct fake_many many;

/* Many ids on, with pools for nids ids and QPs; off again (everything freed). */
void fake_many_init(size_t nids);
void fake_many_fini(void);
/* Something for the caller to take: a CM event queued, a completion in the CQ. */
static inline bool fake_many_pending(void)
{
	return many.queued || many.done_len;
}

/* ADDR_RESOLVED for each resolve held while silent. */
void fake_many_answer(void);
/* The provider's objects, as a ULP opens them (ibv_alloc_pd, ibv_create_comp_channel,
 * ibv_create_cq on the id's context). */
void fake_many_device(struct ibv_context **verbs, struct ibv_pd **pd, struct ibv_cq **cq,
		      struct ibv_comp_channel **cc);
/* An rdmacm fabric (qsm_rdmacm_fabric_new) whose device is the many ids' provider, its
 * completion channel in the fabric's epoll; every id's device once its address resolves.
 * Freed by its destroy op (or the ctx's free). */
int fake_many_fabric(struct qsm_fabric **fab);

#endif
