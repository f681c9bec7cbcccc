/* rdma-qsm internal: the one interface between the runtime and a fabric backend
 * (rdmacm: librdmacm + libibverbs, the product; sim: deterministic, in-process). */
#ifndef QSM_FABRIC_H
#define QSM_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <qsm/data.h>
#include <qsm/events.h>

/*
 * Contract, shaped on librdmacm so that the rdmacm backend is a thin mapping:
 *
 * - A fabric belongs to one ctx (one thread): its calls are never made concurrently.  A
 *   backend whose resources are process-wide (rdmacm: librdmacm's verbs contexts, their
 *   async-event fds) guards those behind its own lock, so ctxs on other threads may share them.
 * - An id is the fabric's rdma_cm_id.  It is created with an *owner* (an opaque
 *   pointer of the runtime's: a queue, a listener or a device sentinel) and every
 *   event for the id carries that owner back.  set_owner() changes it.
 * - Calls never invoke the runtime: everything asynchronous comes back as an event
 *   from get_event() (or, inside get_event(), through the sink it was handed).  A call that fails returns a negative errno, has no effect,
 *   and produces no event (e.g. resolve_addr() failing means no ADDR_ERROR follows).
 * - get_event() never blocks: 0 and *ev filled, n > 0 completions in cqe[0..n) (n <= max,
 *   max >= 1, n <= QSM_FABRIC_CQE_BATCH: max may be larger, cqe[] is not), or -EAGAIN.  (A
 *   fabric with set_sink() also delivers completions straight, max counting them too: see
 *   below.)  Events are copied (private data included) and acked before it
 *   returns, so destroy_id() never waits on user code.  fd() is readable whenever get_event()
 *   may return something (level triggered; spurious wake-ups are allowed).
 * - destroy_id() destroys the id's QP first if there is one, then the id; after it,
 *   no event for that id is ever returned (pending ones are dropped) -- except that
 *   a CONNECT_REQUEST already returned hands ownership of the new id to the runtime.
 * - Device removal: every id on the device gets QSM_EV_DEVICE_REMOVAL, including an
 *   id that is only bound (the sentinel).  The runtime then destroys every QP and id
 *   on the device and calls device_put() for each reference it holds; the removal
 *   completes when all are gone.  QSM_EV_DEVICE_ADDED (owner NULL, ev->device set)
 *   reports a device that appeared; the backend reports it when it can (the sim
 *   always does; rdmacm hears of new devices and addresses from the kernel's uevents and
 *   rtnetlink, and polls the device list only without them).
 * - A struct qsm_fdev stays valid until the fabric is destroyed (events carry no
 *   reference); device_get() refs are what keep its resources (PD, CQs) alive.
 * - private_data_len is what the wire carried: IB/RoCE pad to the CM message size
 *   (REQ 56, REP 196, REJ 148 bytes), iWARP does not.  Handlers must not rely on it.
 *   Those sizes are also the limits: connect(), accept() or reject() with more private
 *   data is -EINVAL and has no effect (the kernel's own rdma_accept() would reject).
 * - A CONNECT_REQUEST never returned when its listening id is destroyed: the backend
 *   destroys the new id and the active side is rejected.
 * - An event the backend cannot name (rdmacm: an rdma_cm event this build's rdma-core did
 *   not define) is QSM_EV_CM_UNKNOWN, status its raw number, for the id's owner; no machine
 *   has an edge for it, so the owner counts and traces it as unexpected.  Never an index
 *   past a table.
 */

struct qsm_fabric;
struct qsm_fid;          /* an rdma_cm_id */
struct qsm_fdev;         /* an RDMA device (ibv_context) */
struct qsm_fmr;          /* a memory region registered on a device (ibv_mr) */
struct qsm_fsrq;         /* a shared receive queue on a device (ibv_srq) */
struct qsm_fmw;          /* a type-2 memory window on a device (ibv_mw) */

/*
 * Data path (the same contract: calls never call back, results come from get_event()):
 * - Completions come in batches: get_event() returns the completions at the head of the
 *   fabric's order, as many as are ready up to `max`, in that order, straight from the
 *   device's poll where it can (no copy of a whole event, no allocation, no lock).  An event
 *   that is not a completion (DRAINED, QP_FATAL, CM) ends a batch: it is returned alone, by
 *   a later call.  The caller may take fewer per call (max 1: one at a time).
 * - WRs are checked once, at the runtime's door (src/data/post.c): opcode, flags, SGEs (0 ..
 *   QSM_FABRIC_MAX_SGE and the class's caps, an array), INLINE (none on a READ or LOCAL_INV,
 *   at most the class's max_inline_data), a LOCAL_INV's rkey, a bind's window, MR, range and
 *   access, n >= 0 and a list.  A fabric checks none of that again: it is handed only WRs the
 *   door let through (tests/contract.c, calling a fabric directly, keeps to that).  It keeps
 *   what a device checks itself, and what its own state needs (a QP, RTS, room).
 * - post_send() posts a list wr[0..n) with one doorbell; n more WRs than the send queue has
 *   free is -ENOBUFS and posts none.  What the device checks as it reaches each WR -- SGEs
 *   beyond the QP's max_send_sge, inline data beyond its max_inline_data (rxe's provider,
 *   validate_send_wr, and the sim's device alike) -- refuses that WR with -EINVAL, the WRs
 *   before it posted.  Only the device refuses part way: *posted (may be NULL) says how many
 *   went, 0 returned iff all n did.  (Through the runtime this is rare: its door checks the
 *   class's caps first, so only a device that took less than asked refuses.)
 * - Work queue accounting, the same on both fabrics: a send WR holds a slot of max_send_wr
 *   (as asked for in create_qp; rdmacm keeps one more for the drain marker) from its post
 *   until its completion is taken by get_event() -- an unsignaled one until that of a later
 *   WR of the send queue, or the DRAINED that ends the drain; a receive until its own.
 *   Posts beyond: -ENOBUFS.  A post to a QP in ERR holds none (it is flushed, not queued).
 * - reg_mr() registers memory with the device's PD; dereg_mr() releases it: 0, or -EBUSY
 *   while a memory window is bound to it (ibv_dereg_mr fails so, IBA 10.6.7.2.6: the peer may
 *   still reach the memory through the window's rkey), or what the device says; on an error
 *   the MR stays registered, keys and accounting unchanged.  An MR keeps its device's
 *   resources alive like a device_get() reference does.
 * - post_send()/post_recv() post on the id's QP.  Every signaled send WR and every recv WR
 *   comes back as exactly one completion (a struct qsm_fabric_cqe: owner = the id's owner, `wc`
 *   filled), in the order the QP completes them; unsignaled sends come back only in error.
 *   After the QP went to ERR (drain, disconnect, fatal error) outstanding WRs complete
 *   with QSM_WC_WR_FLUSH_ERR, and posting returns 0 and completes the WR with FLUSH_ERR too,
 *   so the ULP always gets its buffers back.  The drain marker is never reported as a
 *   completion: its flush is the DRAINED event.  (iWARP has no marker: see drain().)
 *   This rule stays with the fabrics; the runtime does not complete a post itself when its QP
 *   machine says ERR (see "Why the flush of a post in ERR stays below" after this list).
 * - Completions only: an error completion is no other event.  The runtime (src/queue/step.c)
 *   follows a QP's first completion with a status other than SUCCESS and
 *   QSM_WC_WR_FLUSH_ERR by QSM_EV_WC_ERROR (-EIO), once per QP, for both fabrics alike.
 * - Completions of one QP keep their order; between CM events and completions there is
 *   none (a DISCONNECTED may come before completions that happened earlier).
 * - A peer's disconnect does not move our QP to ERR on IB and RoCE (the kernel leaves user QPs
 *   alone): posts between DISCONNECTED and the drain go to the device, which flushes them.  On
 *   soft-iWARP the stream's end moves the QP to ERR and flushes its rings then; what is posted
 *   after stays in them unflushed until the drain, whose flushes of ours cover it.
 */

/*
 * Shared receive queues (SRQ), the same contract:
 * - create_srq() makes one on a device, with an owner for its events; it keeps the device's
 *   resources alive like an MR.  destroy_srq() needs every QP on it destroyed first; receives
 *   still posted are discarded without completions, as a destroyed QP's are.
 * - post_srq_recv() posts a receive; a receive holds a slot of max_wr from its post until its
 *   completion is taken (more: -ENOBUFS).  SGEs beyond the SRQ's max_sge: the device's
 *   -EINVAL (the rest of the receive, the runtime's door).
 * - A QP created with attr->srq takes its receives from the SRQ (max_recv_wr and max_recv_sge
 *   are not used; post_recv() on it is -EINVAL).  A receive one of its QPs takes completes on
 *   that QP, as one of its own would (owner the QP id's owner), in the order that QP took them.
 *   A QP in ERR flushes no receive of the SRQ: they stay there for the other QPs.
 * - QSM_EV_LAST_WQE (owner the QP id's owner) says a QP on an SRQ that is in ERR will take no
 *   more receives from it (IBV_EVENT_QP_LAST_WQE_REACHED).  The sim reports it when the QP
 *   enters ERR; rdmacm passes on what the device reports (soft-RoCE may never), once per QP.
 * - arm_srq(limit) asks for one QSM_EV_SRQ_LIMIT (owner the SRQ's owner, id NULL) once fewer
 *   than `limit` receives are posted; it is then disarmed (IBV_EVENT_SRQ_LIMIT_REACHED).
 *   limit 0 disarms it.
 * - Drain of a QP on an SRQ: DRAINED when the marker posted to its send queue has flushed and
 *   LAST_WQE has come, after both (the kernel's ib_drain_qp waits for LAST_WQE too: a receive
 *   the QP took from the SRQ may complete until then).  A device that never reports LAST_WQE
 *   never reports that DRAINED either: the runtime's drain timeout (the TIMEOUT edge of
 *   DRAINING and CLOSING) bounds the wait.
 */

/*
 * Memory windows (type 2), the same contract:
 * - alloc_mw() makes one on a device (it keeps the device's resources alive like an MR) with
 *   no binding; dealloc_mw() frees it.
 * - bind_mw() posts one WR on the id's send queue that binds the window to [addr, addr + len)
 *   of an MR of the same device registered with QSM_ACCESS_MW_BIND, for access
 *   (QSM_ACCESS_REMOTE_*), and gives it a new rkey (*rkey, valid once the bind completed: its
 *   completion has opcode QSM_WR_BIND_MW).  It holds a send slot like any send WR; a QP in ERR
 *   flushes it.  The window, the MR (with MW_BIND), the range and the access were checked at
 *   the runtime's door; a bind the device still cannot make completes with MW_BIND_ERR and
 *   errs the QP (as rxe reports one; the sim's device alike).
 * - SEND_WITH_INV (imm_data the peer's rkey) invalidates the window with that rkey at the
 *   responder, whose receive completes with QSM_WC_WITH_INV and invalidated_rkey; LOCAL_INV
 *   (imm_data our rkey, no SGEs) invalidates our own.  An invalidated window reaches nothing:
 *   the peer's RDMA through it fails as with any refused rkey.
 * - A bound window holds its MR: dereg_mr() of it is -EBUSY until the window is invalidated
 *   or freed.
 */

/*
 * Why the flush of a post in ERR stays below, in each fabric, and is not made once by the
 * runtime from q->qp_state (both would be needed, which is more code, not less):
 * - The runtime's QP machine lags the QP.  A QP goes to ERR with nothing the runtime has
 *   dispatched yet: an error completion or QP_FATAL still queued, or no event at all (a refused
 *   rkey errs the responder's QP silently, on rxe and in the sim).  A post in that window
 *   reaches the fabric, which must flush it itself or the WR is lost (exactly once is the
 *   contract), so each fabric keeps its check whatever the runtime does.
 * - Order.  Completions of one work queue come back in post order.  When the runtime's machine
 *   is in ERR (after disconnect, QP_FATAL, WC_ERROR) the QP may still hold WRs whose flushes
 *   the device has not reported: rdmacm queues a new WR's flush behind them (post_flushed,
 *   qsm_rc_wq_flush_heads).  A flush the runtime queued at once would overtake them; only the
 *   fabric sees what its work queues still hold.
 * The fabrics differ only in how: the sim flushes a QP's WRs as it enters ERR, so a post's
 * flush follows at once; rdmacm keeps the WR's record in order behind those still on the QP.
 * The rule is written once, here, and pinned once for both by tests/contract.c
 * (test_post_after_err_returns_0_and_completes_with_flush_err).
 */

/* Not a machine event: completions go to the class's completion handler directly.  The
 * fabrics return them as struct qsm_fabric_cqe, never in a qsm_fabric_event; the number names
 * them in traces and in the sim's queue. */
#define QSM_EV_COMPLETION 112

/* The data path's public types (sge, completion status, opcodes, access bits) are shared. */
#define QSM_FABRIC_MAX_SGE QSM_MAX_SGE
#define qsm_fabric_sge qsm_sge
#define qsm_fabric_wc qsm_wc

/* A send WR is the public one: flags QSM_POST_SIGNALED / QSM_POST_INLINE, imm_data. */
#define qsm_fabric_wr qsm_wr

#define QSM_FABRIC_PDATA_MAX 256

/* The IB CM's private data room (RoCE's too): what a REQ (92 bytes less the rdma_cm's 36-byte
 * IP header), a REP and a REJ carry.  The runtime's limits for connect, accept and reject, and
 * the rdmacm fabric's on IB/RoCE. */
#define QSM_PDATA_REQ_MAX 56
#define QSM_PDATA_REP_MAX 196
#define QSM_PDATA_REJ_MAX 148

struct qsm_fabric_event {
	int event;                /* QSM_EV_*: rdma_cm events, DEVICE_ADDED, QP_FATAL, DRAINED */
	int status;               /* rdma_cm status: negative errno, or the reject reason for REJECTED */
	/* Whom the event is for, as it was when the event was taken: the owner of `id`; for
	 * CONNECT_REQUEST (whose new id has no owner yet) the listening id's; for SRQ_LIMIT the
	 * SRQ's.  The runtime dispatches to it as it is, with no test of the event. */
	void *owner;
	union {
		struct qsm_fid *id;   /* the id; for CONNECT_REQUEST the *new* id */
		struct qsm_fsrq *srq; /* SRQ_LIMIT (which has no id): the SRQ */
	};
	struct qsm_fdev *device;  /* DEVICE_ADDED / DEVICE_REMOVAL: the device */
	size_t private_data_len;
	uint8_t private_data[QSM_FABRIC_PDATA_MAX];
};

/* One completion of a batch: for the owner of `id` when it was taken (never NULL: an id gets
 * its QP from the runtime object that owns it). */
struct qsm_fabric_cqe {
	void *owner;
	struct qsm_fid *id;
	struct qsm_fabric_wc wc;
};

/* The most completions one get_event() call hands over, as a poll loop takes them. */
#define QSM_FABRIC_CQE_BATCH 16

/*
 * Completions delivered straight (a fabric that has set_sink; rdmacm does, the sim does not):
 * what a careful verbs program does, poll and call the handler, with no batch in between.
 * - The runtime hands the fabric one sink, and for each id whose owner takes completions the
 *   owner's handler (set_complete, once the QP is there; NULL when the owner stops taking
 *   them: destroyed, aborted, gone).  The handler is the class's own, called with the queue.
 * - In one get_event() call, while the call's batch is still empty and *sink->hold is 0
 *   (nothing queued that must be dispatched first), a successful completion of an id with a
 *   handler is counted in *sink->delivered and given to the handler at once, from inside the
 *   fabric's poll: it takes no batch entry.  Every other completion (an error, a flush, an id
 *   with no handler) and every one after it in that call goes into the batch: the order of
 *   one QP's completions holds across the two ways.  Both count against `max`.
 * - A handler that returns non-zero: what follows goes into the batch, and once the poll is
 *   over (before get_event() returns, nothing of the poll touched after),
 *   sink->refused(owner, r) is called, once.
 * - A call that delivered any straight returns QSM_FABRIC_STRAIGHT + the size of its batch
 *   (0 .. QSM_FABRIC_CQE_BATCH), never another event; the caller takes what *delivered grew
 *   by (and resets it).
 * - A handler must not dispatch the ctx (qsm_ctx_dispatch(3)); what it may do (post, downcalls,
 *   which are queued: *hold) touches no CQ or id the poll holds.
 */
#define QSM_FABRIC_STRAIGHT (1 << 16)

struct qsm_conn;
typedef int (*qsm_fabric_complete_fn)(struct qsm_conn *q, const struct qsm_fabric_wc *wc);

struct qsm_fabric_sink {
	const size_t *hold;                /* non-zero: no completion straight now */
	uint64_t *delivered;               /* += the completions delivered straight */
	void (*refused)(void *owner, int r);
};

/* What the runtime asks for when it creates a QP (RC, on the id's device). */
struct qsm_fabric_qp_attr {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
	struct qsm_fsrq *srq;     /* receives from this SRQ (on the id's device), or NULL */
};

/* What the runtime asks for when it creates an SRQ. */
struct qsm_fabric_srq_attr {
	uint32_t max_wr;
	uint32_t max_sge;
};

struct qsm_fabric_ops {
	const char *name;
	void (*destroy)(struct qsm_fabric *f);    /* every id must be gone already */
	int (*fd)(struct qsm_fabric *f);
	int (*get_event)(struct qsm_fabric *f, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe,
			 int max);
	/* Optional (NULL: every completion comes in get_event()'s batch): completions delivered
	 * straight, see "Completions delivered straight" above.  set_sink() once (the fabric keeps a copy), before the
	 * first get_event(); set_complete() per id: its owner's handler (NULL: none, take it
	 * back). */
	void (*set_sink)(struct qsm_fabric *f, const struct qsm_fabric_sink *sink);
	void (*set_complete)(struct qsm_fid *id, qsm_fabric_complete_fn fn, struct qsm_conn *q);
	/* Whether events other than completions are known to be ready and not yet returned by
	 * get_event() (rdmacm: the CM channel's backlog, read until it said EAGAIN).  The ctx
	 * fires a due timer only once this is false: the answer a state's timeout waits for may
	 * be among them.  NULL: never known. */
	bool (*backlog)(struct qsm_fabric *f);

	int (*create_id)(struct qsm_fabric *f, void *owner, struct qsm_fid **ret);
	void (*set_owner)(struct qsm_fid *id, void *owner);
	/* Optional (NULL: ids stay where they were made).  handoff() gives a passive id just
	 * returned with its CONNECT_REQUEST (no QP, not accepted or rejected) to `to`, another
	 * fabric of the same backend, whose ctx may run on another thread: 0, and every event of
	 * the id comes from `to` from now on (those that come before `to` adopted it are held for
	 * it, in their order, and follow the adopt; a CM event read after it may overtake them,
	 * as CM events come out of order anyway); or -errno, and it stays here, unchanged.
	 * Called on this fabric's thread;
	 * nothing of `to` is touched (the kernel moves the id).  adopt() is `to`'s, on its own
	 * thread, before it does anything with the id: the id is its own, its held events follow. */
	int (*handoff)(struct qsm_fid *id, struct qsm_fabric *to);
	void (*adopt)(struct qsm_fabric *f, struct qsm_fid *id);
	void (*destroy_id)(struct qsm_fid *id);
	int (*bind)(struct qsm_fid *id, const struct sockaddr *addr);
	int (*listen)(struct qsm_fid *id, int backlog);
	int (*resolve_addr)(struct qsm_fid *id, const struct sockaddr *src,
			    const struct sockaddr *dst, int timeout_ms);
	int (*resolve_route)(struct qsm_fid *id, int timeout_ms);
	int (*create_qp)(struct qsm_fid *id, const struct qsm_fabric_qp_attr *attr);
	void (*destroy_qp)(struct qsm_fid *id);
	int (*connect)(struct qsm_fid *id, const void *pdata, size_t len);
	int (*accept)(struct qsm_fid *id, const void *pdata, size_t len);
	int (*reject)(struct qsm_fid *id, const void *pdata, size_t len);
	int (*disconnect)(struct qsm_fid *id);
	/* Move the QP to ERR; DRAINED comes once every WR posted before completed.  rdmacm: on IB
	 * and RoCE a marker posted after, whose flush completion (behind the rest) is DRAINED; on
	 * iWARP (the device's transport type), where a post in ERR is not flushed (soft-iWARP never
	 * does), the first poll after the drain that finds the QP's CQ empty (siw writes a QP's
	 * flushes into its CQ as the QP enters ERR); what is left on the QP then is flushed by the
	 * fabric, as after a marker (src/fabric/rdmacm/drain.c). */
	int (*drain)(struct qsm_fid *id);
	/* The WRs still outstanding on the id's QP, each work queue's in post order, taken now as
	 * completions, at most max: what the fabric already holds for them as it is, the rest
	 * QSM_WC_WR_FLUSH_ERR (unsignaled sends only as the device reports them, as ever).  0: none
	 * left.  For a QP about to be destroyed with WRs on it (a drain ended by its timeout, a
	 * device removal): anything the device reports for them later is stale, dropped and
	 * counted by the fabric, so each WR still completes exactly once.  No other event (a
	 * DRAINED still due) comes for the QP after this. */
	int (*flush_qp)(struct qsm_fid *id, struct qsm_fabric_cqe *cqe, int max);
	/* Keepalive: a zero-length RDMA WRITE on the id's QP (no rkey, no memory: IBA C9-88) that
	 * is no WR of the ULP's and no slot of its rings (the QP keeps one more for it).  Its
	 * success and its flush are nothing; its failure (the peer's QP gone: the RC retries ran
	 * out) moves the QP to ERR, as a ULP WR's would, and is the id's QSM_EV_WC_ERROR (-EIO),
	 * an event, since there is no WR to complete.  0; -EBUSY: the last probe is still out (its
	 * retries run); -ENOTCONN: no QP in RTS.  NULL: a fabric with no probe (keepalive_ms does
	 * nothing there). */
	int (*probe)(struct qsm_fid *id);

	/* The longest the fabric's CM may take to end a connect or an accept on the id by itself
	 * (ESTABLISHED, or REJECTED / UNREACHABLE / CONNECT_ERROR once its retries ran out), in
	 * ms; 0: its CM never stalls.  The runtime's CONNECTING and ACCEPTING timeouts never fire
	 * before it: a library timer that races the CM tears down connections it would complete. */
	uint32_t (*cm_timeout_ms)(struct qsm_fid *id);
	/* The QP of a passive id saw COMM_EST (a message came before the RTU): tell the CM to
	 * take it as the RTU, so that ESTABLISHED follows (rdma_notify).  0, or -errno: the CM
	 * had established already (the RTU won the race), or cannot; nothing else happens
	 * then.  NULL: a CM that needs no telling (the sim's never loses an RTU). */
	int (*notify)(struct qsm_fid *id);
	/* RDMA READs this side may have in flight on the id's connection (its initiator depth,
	 * the ORD, as the CM negotiated it), >= 0: for a passive id from its CONNECT_REQUEST on
	 * (what its accept will offer), for an active one from its ESTABLISHED on; -ENOTCONN
	 * before. */
	int (*read_depth)(struct qsm_fid *id);

	/* The device an id is on (after ADDR_RESOLVED, or bind to a device address), or NULL. */
	struct qsm_fdev *(*id_device)(struct qsm_fid *id);
	/* References that keep the device's resources (PD, CQs) alive; removal waits for 0. */
	void (*device_get)(struct qsm_fdev *d);
	void (*device_put)(struct qsm_fdev *d);
	const char *(*device_name)(struct qsm_fdev *d);
	/* One address served by the device, for the sentinel id's bind; -ENOENT if none. */
	int (*device_addr)(struct qsm_fdev *d, struct sockaddr_storage *ss);
	/* The local address an id is bound or resolved to. */
	int (*id_src_addr)(struct qsm_fid *id, struct sockaddr_storage *ss);
	/* The verbs objects behind an id, for qsm_conn_verbs(3): what the backend has of
	 * struct qsm_verbs (NULL where it has none).  NULL op: a fabric with no verbs (the sim). */
	void (*id_verbs)(struct qsm_fid *id, void **cm_id, void **qp, void **pd);

	/* ---- data path (see the contract above) ---- */
	int (*reg_mr)(struct qsm_fdev *d, void *addr, size_t len, int access, struct qsm_fmr **ret,
		      uint32_t *lkey, uint32_t *rkey);
	int (*dereg_mr)(struct qsm_fmr *mr);
	int (*post_send)(struct qsm_fid *id, const struct qsm_fabric_wr *wr, int n, int *posted);
	int (*post_recv)(struct qsm_fid *id, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
			 int num_sge);

	/* ---- SRQ (see its contract above) ---- */
	int (*create_srq)(struct qsm_fabric *f, struct qsm_fdev *d, void *owner,
			  const struct qsm_fabric_srq_attr *attr, struct qsm_fsrq **ret);
	void (*destroy_srq)(struct qsm_fsrq *s);
	int (*post_srq_recv)(struct qsm_fsrq *s, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
			     int num_sge);
	int (*arm_srq)(struct qsm_fsrq *s, uint32_t limit);

	/* ---- memory windows (see their contract above) ---- */
	int (*alloc_mw)(struct qsm_fdev *d, struct qsm_fmw **ret);
	void (*dealloc_mw)(struct qsm_fmw *mw);
	int (*bind_mw)(struct qsm_fid *id, uint64_t wr_id, struct qsm_fmw *mw, struct qsm_fmr *mr,
		       uint64_t addr, uint64_t len, int access, unsigned int flags, uint32_t *rkey);
};

struct qsm_fabric {
	const struct qsm_fabric_ops *ops;
};

#endif
