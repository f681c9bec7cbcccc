/* rdma-qsm: the simulated RDMA fabric, a deterministic in-process stand-in for the kernel's
 * rdma_cm, so that a ULP's state handlers can be tested without hardware, with fault injection. */
#ifndef QSM_SIM_H
#define QSM_SIM_H

#include <qsm/machine.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The model.
 *
 * A `struct qsm_sim` is a *world*: RDMA devices, each serving one IPv4 or IPv6
 * address, and one port space.  Any number of fabrics attach to a world, one per
 * ctx (for instance a client ctx and a server ctx that connect to each other):
 * qsm_sim_fabric_new() makes one for qsm_ctx_new().  A fabric stands in for one
 * rdma_cm event channel; the ids in it (rdma_cm_ids) are those of the ctx's queues,
 * listeners and device registry.
 *
 * There is no time.  Every asynchronous outcome of a call (ADDR_RESOLVED,
 * CONNECT_REQUEST, ESTABLISHED, ...) is queued the moment the call is made, in a
 * deterministic FIFO order, on the event queue of the fabric that owns the id the
 * event is for.  Each fabric has an eventfd, behind qsm_ctx_fd() of its ctx, that
 * is readable exactly while its queue is not empty.  The same calls in the same
 * order give the same events in the same order, always.  Time passes only in the
 * ctxs' timers (see qsm_ctx_opts.now_ns for a virtual clock).
 *
 * What the sim reports follows the kernel rdma_cm on RoCE/IB:
 * - private data arrives padded with zeros to the size of the CM message that
 *   carried it: QSM_SIM_REQ_PDATA (CONNECT_REQUEST), QSM_SIM_REP_PDATA (the active
 *   side's ESTABLISHED), QSM_SIM_REJ_PDATA (every REJECTED); the passive side's
 *   ESTABLISHED carries none.  connect/accept/reject refuse more than that (-EINVAL).
 * - REJECTED carries an IB CM reject reason in `status`: QSM_SIM_REJ_CONSUMER for
 *   a consumer's reject (and for a listener on the port but not on the address),
 *   QSM_SIM_REJ_INVALID_SERVICE_ID when nothing listens on the port at all,
 *   QSM_SIM_REJ_TIMEOUT to a passive id whose active side went away unanswered.
 * - ADDR_ERROR has status -EHOSTUNREACH, ROUTE_ERROR and UNREACHABLE -ETIMEDOUT.
 * - Ports: binding an address+port that another id holds is -EADDRINUSE, and
 *   overlapping a wildcard bind on the same port is -EADDRNOTAVAIL (the kernel's
 *   cma_check_port without SO_REUSEADDR).  Port 0 picks the next free port from
 *   32768 up.
 *
 * The data path of <qsm/data.h> (qsm_conn_reg_mr(), qsm_ctx_reg_pool(),
 * qsm_conn_post_send() and the other posts) is RC verbs on that same clock: a work
 * request executes the moment it is posted, memcpy'ing between registered memory,
 * and its completions are queued behind the events already queued, and reach the
 * class's `completion` handler in that order.
 * - Memory: registering needs an UP device (qsm_conn_reg_mr() returns -ENODEV) and
 *   gives distinct, world-unique lkey and rkey, never reused, nor ever a memory window's
 *   rkey (a space of their own; a space used up is -ENOMEM).  A memory region keeps
 *   its device REMOVING until it is deregistered (qsm_mr_dereg(), or the library
 *   right after the class's device_removed handler).  QSM_ACCESS_REMOTE_WRITE
 *   without QSM_ACCESS_LOCAL_WRITE is -EINVAL, as with ibv_reg_mr.  As the kernel, which
 *   pins every page, registering refuses a length of 0, more than QSM_SIM_MAX_MR_SIZE
 *   (the sim device's max_mr_size) or a range past the end of the address space
 *   (-EINVAL), and a range with a page that is not mapped (-EFAULT, found with
 *   mincore(2)); it cannot tell memory that is mapped but not the caller's to give
 *   (another buffer's), so a range longer than its buffer but within mapped memory is
 *   still taken.
 * - Posts: qsm_conn_post_recv() works once the QP exists (INIT: from the class's
 *   qp_ready handler on); sends, writes and reads need RTS, and are -EINVAL before
 *   (in qp_ready, for example).  A passive queue's QP is RTS from its accept on,
 *   so it may send in ACCEPTING, before its ESTABLISHED.  In ERR every post
 *   completes with QSM_WC_WR_FLUSH_ERR, and entering ERR flushes the posted
 *   receives at once, in post order, before the event that reports the cause
 *   (DISCONNECTED, DRAINED, QP_FATAL, ...; only DEVICE_REMOVAL comes before its
 *   consequences).  Flushes carry the work request's opcode, which hardware leaves
 *   undefined: do not rely on it.  The class's QP caps (struct qsm_qp_caps) are
 *   enforced: nsge up to max_send_sge / max_recv_sge (0 means 1; never more than
 *   QSM_MAX_SGE), else -EINVAL; more than max_recv_wr receives, or max_send_wr send
 *   WRs, outstanding is -ENOBUFS; QSM_POST_INLINE beyond max_inline_data (or on a
 *   READ) is -EINVAL, as on the real fabric.  When the
 *   library destroys a QP (on the edges into RECONNECT_WAIT and CLOSED, and after
 *   device_removed) its work requests and the completions not yet taken are
 *   discarded, as ibv_destroy_qp does.
 * - A SEND fills the peer's first posted receive (RECV completion with byte_len to
 *   the peer, then the send's completion if signaled).  Its errors, as on the wire:
 *   no receive posted: RNR_RETRY_EXC_ERR to the sender, whose QP goes to ERR (the
 *   receiver's stays RTS: an RNR NAK is flow control); the receive too small or its
 *   lkey without local write: LOC_QP_OP_ERR on it, REM_OP_ERR to the sender (what rxe
 *   reports; hardware may say LOC_LEN_ERR / LOC_PROT_ERR and REM_INV_REQ_ERR), both
 *   QPs to ERR.
 * - RDMA_WRITE / RDMA_READ need an rkey of the peer's device granting REMOTE_WRITE /
 *   REMOTE_READ over the range; only the sender completes.  A zero-length one checks
 *   neither rkey nor remote address and succeeds (IBA C9-88, as rxe does).  A refused rkey is
 *   REM_ACCESS_ERR to the sender; the peer's QP goes to ERR without an event, as on rxe
 *   (its posted receives flush; hardware may add IBV_EVENT_QP_ACCESS_ERR).
 * - A local SGE that its lkey does not cover (with LOCAL_WRITE where data is
 *   written into it) is LOC_PROT_ERR; a peer QP gone or not RTS is RETRY_EXC_ERR;
 *   both move only the sender's QP to ERR.
 * - The sim reports completions only; the library follows a QP's first error
 *   completion other than a flush by the queue's QSM_EV_WC_ERROR (status -EIO), once
 *   per QP, as on every fabric.
 *
 * The sim abort()s the process if malloc fails where a call has already taken
 * effect (posting an event): a sim that silently lost an event would make every
 * test that uses it lie.
 */

struct qsm_sim;
struct qsm_fabric;

/* The sim device's max_mr_size (ibv_device_attr): reg_mr refuses longer (-EINVAL). */
#define QSM_SIM_MAX_MR_SIZE (1ull << 32)

/* The RDMA READs a sim connection's each side may have in flight (qsm_conn_read_depth(3)):
 * both sides' devices offer this initiator depth and responder resources. */
#define QSM_SIM_READ_DEPTH 16

#define QSM_SIM_REQ_PDATA 56   /* IB CM REQ private data less the rdma_cm header */
#define QSM_SIM_REP_PDATA 196  /* IB CM REP private data */
#define QSM_SIM_REJ_PDATA 148  /* IB CM REJ private data */

#define QSM_SIM_REJ_TIMEOUT 1             /* IB_CM_REJ_TIMEOUT */
#define QSM_SIM_REJ_INVALID_SERVICE_ID 8  /* IB_CM_REJ_INVALID_SERVICE_ID */
#define QSM_SIM_REJ_STALE_CONN 10         /* IB_CM_REJ_STALE_CONN: reported as REJECTED_STALE */
#define QSM_SIM_REJ_CONSUMER 28           /* IB_CM_REJ_CONSUMER_DEFINED */

/*
 * Create an empty world (no devices, no fabrics, no faults armed).
 * Returns 0 and *ret, -EINVAL if ret is NULL, -ENOMEM.
 */
int qsm_sim_new(struct qsm_sim **ret);

/*
 * Free a world, its devices and the memory regions still registered on them.  NULL is
 * a no-op.  Every fabric of the world must have been destroyed first: qsm_ctx_free()
 * destroys the fabric of its ctx.  A fabric still alive is the caller's bug: the free
 * is then deferred until the last fabric is destroyed, so nothing dangles, and
 * qsm_sim_fabric_new() on the world fails with -EINVAL meanwhile.  A debug build
 * (./configure --enable-debug) also prints "qsm: qsm_sim_free: check failed: ..." on
 * stderr, and abort()s there if QSM_DEBUG_ABORT is set (see qsm(7)).
 */
void qsm_sim_free(struct qsm_sim *sim);

/*
 * Attach a new fabric to the world, for qsm_ctx_opts.fabric: the backend one ctx runs
 * on.  The ctx owns it from then on, and qsm_ctx_free() destroys it after the ctx's
 * queues and listeners; ids they left behind are destroyed too and counted in
 * qsm_sim_stats.ids_leaked.  No other call destroys a fabric (see qsm_ctx_new(3)).
 * Returns 0 and *ret; -EINVAL for NULL arguments, or if qsm_sim_free() was already
 * called for sim while it had fabrics; -ENOMEM; -errno of eventfd().
 */
int qsm_sim_fabric_new(struct qsm_sim *sim, struct qsm_fabric **ret);

/*
 * Add a device `name` serving the address `addr` (IPv4 or IPv6 text; not a
 * wildcard).  Every fabric of the world then reports QSM_EV_DEVICE_ADDED to its ctx,
 * which hands it on only to the active queues waiting in RECONNECT_WAIT (they retry
 * at once) and the listeners waiting in RELISTEN_WAIT (they listen again); no other
 * queue or state sees it (see qsm(7)).  A name that was removed and is GONE comes
 * back up, with `addr` (it may differ), as the same device.
 * Returns 0; -EINVAL for NULL/empty/too long (>= 64) name or a bad address;
 * -EEXIST if the name is UP; -EBUSY if it is still REMOVING; -EADDRINUSE if
 * another UP device serves that address; -ENOMEM.
 */
int qsm_sim_device_add(struct qsm_sim *sim, const char *name, const char *addr);

/*
 * Hot-unplug a device.  Every id on it (connected, connecting, listening,
 * bound only) gets QSM_EV_DEVICE_REMOVAL (status 0, device set) and its QP goes
 * to ERR; then each connection it had with an id on another device breaks as
 * if the id had been destroyed (DISCONNECTED + TIMEWAIT_EXIT, or REJECTED for a
 * connection not yet answered).  The device stays REMOVING, refusing new work
 * on it (-ENODEV) and serving no address, until every id on it, every QP on it,
 * every memory region registered on it and every reference to it (a ctx's device
 * registry holds one while any of its queues uses the device) is gone; the library
 * lets go of all of them as the queues take their DEVICE_REMOVAL edges.  Then it is
 * GONE: dispatch the removal, then check qsm_sim_device_state() to test that a
 * ULP's classes let go of the device.
 * Returns 0; -EINVAL for NULL; -ENOENT if unknown; -EALREADY if not UP.
 */
int qsm_sim_device_remove(struct qsm_sim *sim, const char *name);

enum qsm_sim_device_state {
	QSM_SIM_DEVICE_UP,
	QSM_SIM_DEVICE_REMOVING,  /* removed; references to it remain */
	QSM_SIM_DEVICE_GONE,      /* removed and released; may be added again */
};

/* The enum qsm_sim_device_state of `name`; -EINVAL for NULL; -ENOENT if unknown. */
int qsm_sim_device_state(struct qsm_sim *sim, const char *name);

/*
 * Live objects across all fabrics of the world, for leak checks: after a test
 * that cleaned up (every ctx freed), ids, qps, device_refs, mrs, events_pending and
 * ids_leaked are all 0.  Every event posted ends up delivered (taken by a ctx),
 * dropped (its id or fabric was destroyed first, or a fault lost it), or is still
 * pending (queued or held).
 */
struct qsm_sim_stats {
	unsigned ids;               /* live ids, including those of requests not yet reported */
	unsigned qps;               /* live QPs */
	unsigned device_refs;      /* references to devices that the ctxs' registries hold */
	unsigned mrs;              /* memory regions registered, not yet deregistered */
	unsigned srqs;             /* shared receive queues not yet destroyed */
	unsigned mws;              /* memory windows not yet freed */
	unsigned events_pending;   /* queued on a fabric or held by QSM_SIM_FAULT_HOLD */
	unsigned events_delivered; /* taken by the fabrics' ctxs, since qsm_sim_new() */
	unsigned events_dropped;   /* never to be delivered, since qsm_sim_new() */
	unsigned ids_leaked;       /* ids that qsm_ctx_free() left and its fabric destroyed */
	unsigned reserved[6];      /* 0: room for later counts, so a test built before keeps working */
};

/* Fill *st (zeroed if sim is NULL).  NULL st is a no-op. */
void qsm_sim_get_stats(struct qsm_sim *sim, struct qsm_sim_stats *st);

/*
 * Fault injection: qsm_sim_inject(sim, f, n) arms the next n occurrences of the
 * fault (replacing what was armed; 0 disarms).  A call that fails its argument
 * checks consumes nothing.
 */
enum qsm_sim_fault {
	QSM_SIM_FAULT_ADDR_ERROR,        /* address resolution -> ADDR_ERROR (-EHOSTUNREACH) */
	QSM_SIM_FAULT_ROUTE_ERROR,       /* route resolution -> ROUTE_ERROR (-ETIMEDOUT) */
	QSM_SIM_FAULT_REJECT,            /* a connect -> REJECTED (QSM_SIM_REJ_CONSUMER); the passive side sees nothing */
	QSM_SIM_FAULT_UNREACHABLE,       /* a connect -> UNREACHABLE (-ETIMEDOUT); the passive side sees nothing */
	QSM_SIM_FAULT_CONNECT_ERROR,     /* an accept -> CONNECT_ERROR (-ECONNABORTED) on both sides, no ESTABLISHED */
	QSM_SIM_FAULT_NO_TIMEWAIT_EXIT,  /* a TIMEWAIT_EXIT is lost */
	QSM_SIM_FAULT_DUP_DISCONNECTED,  /* a DISCONNECTED is delivered twice */
	QSM_SIM_FAULT_LATE_ESTABLISHED,  /* a DISCONNECTED is followed by a stray ESTABLISHED on the same id */
	QSM_SIM_FAULT_NO_DRAINED,        /* a drain never produces DRAINED (QP hung) */
	QSM_SIM_FAULT_ENOMEM,            /* creating an id or a QP fails with -ENOMEM, fed back as the
	                                    step's error event (ids of listeners and device
	                                    registries take the fault too) */
	QSM_SIM_FAULT_HOLD,              /* the next n events posted are held back until qsm_sim_release() */
	QSM_SIM_FAULT_REJECT_STALE,      /* a connect -> REJECTED_STALE (QSM_SIM_REJ_STALE_CONN): the
	                                    peer's CM still holds an earlier connection of the QP */
};
#define QSM_SIM_FAULT_COUNT (QSM_SIM_FAULT_REJECT_STALE + 1)

/* Arm a fault.  Returns 0; -EINVAL for NULL sim or an unknown fault. */
int qsm_sim_inject(struct qsm_sim *sim, enum qsm_sim_fault f, unsigned count);

/*
 * Deliver the events held by QSM_SIM_FAULT_HOLD to their fabrics' queues, in the
 * order they were posted, behind whatever was queued meanwhile; disarms HOLD.
 * Held events of ids destroyed meanwhile were dropped.
 * Returns how many were released; -EINVAL for NULL.
 */
int qsm_sim_release(struct qsm_sim *sim);

/*
 * An asynchronous QP error (IBV_EVENT_QP_FATAL) on the QP of the oldest id of
 * fabric `f` whose owner is `owner` and that has a QP; on a fabric of a ctx a
 * queue owns its ids, so pass the struct qsm_conn *.  The QP goes to ERR, its
 * posted receives are flushed, and the queue gets QSM_EV_QP_FATAL (status 0): a
 * CONNECTED or LIVE queue drains.  The peer notices nothing (as on the wire).
 * Returns 0; -EINVAL for NULL sim/f or f not of this world; -ENOENT if no such
 * id has a QP.
 */
int qsm_sim_qp_fatal(struct qsm_sim *sim, struct qsm_fabric *f, void *owner);

/*
 * Another asynchronous event of that same QP: QSM_EV_COMM_EST (a message before the RTU),
 * QSM_EV_SQ_DRAINED, QSM_EV_PATH_MIG or QSM_EV_PATH_MIG_ERR; the QP's state does not change.
 * Returns 0; -EINVAL for another event or as above; -ENOENT if no such id has a QP.
 */
int qsm_sim_qp_event(struct qsm_sim *sim, struct qsm_fabric *f, void *owner, int event);

/*
 * The connection of that same id (ESTABLISHED) is cut both ways, and nobody is told: a
 * partition that never heals, or a peer whose host lost power.  No CM event on either side;
 * from then on a WR either side posts fails with QSM_WC_RETRY_EXC_ERR (the RC retries run
 * out; the QP goes to ERR, WC_ERROR), and so does a keepalive probe (keepalive_ms); a
 * disconnect gets DISCONNECTED on its own side only, as its DREQ times out.
 * Returns 0; -EINVAL as above; -ENOENT if no such id has a QP; -ENOTCONN if it is not
 * connected.
 */
int qsm_sim_partition(struct qsm_sim *sim, struct qsm_fabric *f, void *owner);

/*
 * A port's asynchronous event on device `name` (its one port, 1): QSM_EV_PORT_ERR goes to
 * every QP on the device, of every fabric; QSM_EV_PORT_ACTIVE, QSM_EV_GID_CHANGE,
 * QSM_EV_LID_CHANGE, QSM_EV_PKEY_CHANGE and QSM_EV_CLIENT_REREGISTER to every fabric for the
 * device (status 1, the port), as the rdmacm fabric reports them.  Nothing else changes: a
 * QP stays as it was (on the wire, a port that is down fails its sends later).
 * Returns 0; -EINVAL for NULL or another event; -ENOENT: no such device; -ENODEV: removed.
 */
int qsm_sim_port_event(struct qsm_sim *sim, const char *name, int event);

/*
 * The address of device `name` moved (a bond failed over to another port): every id on
 * the device, of every fabric -- listening, bound (the registry's sentinels) or connected
 * -- gets QSM_EV_ADDR_CHANGE, as rdma_cm reports it.  Nothing else changes.
 * Returns 0; -EINVAL for NULL; -ENOENT: no such device; -ENODEV: removed.
 */
int qsm_sim_addr_change(struct qsm_sim *sim, const char *name);

/*
 * The state of that same QP, as the hardware would report it: QSM_QP_INIT after
 * create, QSM_QP_RTS once connected, QSM_QP_ERR after a disconnect, drain,
 * reject, fatal error or device removal.  -EINVAL / -ENOENT as above.
 */
int qsm_sim_qp_state(struct qsm_sim *sim, struct qsm_fabric *f, void *owner);

#ifdef __cplusplus
}
#endif

#endif
