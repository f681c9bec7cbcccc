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
 * library ctx (for instance a client ctx and a server ctx that connect to each
 * other); a fabric is the runtime's view of rdma_cm, the rdma_cm_ids live in it.
 *
 * There is no time.  Every asynchronous outcome of a call (ADDR_RESOLVED,
 * CONNECT_REQUEST, ESTABLISHED, ...) is queued the moment the call is made, in a
 * deterministic FIFO order, on the event queue of the fabric that owns the id the
 * event is for.  Each fabric has an eventfd that is readable exactly while its
 * queue is not empty.  The same calls in the same order give the same events in
 * the same order, always.
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
 * The data path (fabric.h's reg_mr, post_send, post_recv) is RC verbs on that same
 * clock: a WR executes the moment it is posted, memcpy'ing between registered
 * memory, and its completions (QSM_EV_COMPLETION) are queued like any other event.
 * - MRs: reg_mr needs an UP device (-ENODEV) and gives distinct, world-unique lkey
 *   and rkey, never reused.  An MR keeps its device REMOVING until dereg_mr.
 *   REMOTE_WRITE without LOCAL_WRITE is -EINVAL, as with ibv_reg_mr.  As the kernel, which
 *   pins every page, reg_mr refuses a length of 0, more than QSM_SIM_MAX_MR_SIZE (the sim
 *   device's max_mr_size) or a range past the end of the address space (-EINVAL), and a
 *   range with a page that is not mapped (-EFAULT, found with mincore(2)); it cannot tell
 *   memory that is mapped but not the caller's to give (another buffer's), so a range
 *   longer than its buffer but within mapped memory is still taken.
 * - Queues: post_recv works from INIT on; post_send needs RTS (-EINVAL before).
 *   In ERR both complete the WR with WR_FLUSH_ERR, and entering ERR flushes the
 *   posted receives at once, in post order, before the event that reports the
 *   cause (DISCONNECTED, DRAINED, QP_FATAL, ...; only DEVICE_REMOVAL comes before
 *   its consequences).  Flushes carry the WR's opcode, which hardware leaves
 *   undefined: do not rely on it.  The QP's caps are enforced:
 *   num_sge up to max_*_sge (0 counts as 1, at most QSM_FABRIC_MAX_SGE), else
 *   -EINVAL; max_recv_wr receives outstanding, else -ENOMEM.  destroy_qp discards
 *   its WRs and its completions not yet taken, as ibv_destroy_qp does.
 * - A SEND fills the peer's first posted receive (RECV completion with byte_len to
 *   the peer, then the send's completion if signaled).  Its errors, as on the wire:
 *   no receive posted: RNR_RETRY_EXC_ERR to the sender, whose QP goes to ERR (the
 *   receiver's stays RTS: an RNR NAK is flow control); the receive too small or its
 *   lkey bad: LOC_LEN_ERR / LOC_PROT_ERR on it, GENERAL_ERR to the sender (hardware
 *   says REM_INV_REQ / REM_OP_ERR), both QPs to ERR.
 * - RDMA_WRITE / RDMA_READ need an rkey of the peer's device granting REMOTE_WRITE /
 *   REMOTE_READ over the range; only the sender completes.  A zero-length one checks
 *   neither rkey nor remote address and succeeds (IBA C9-88, as rxe does).  A refused rkey is
 *   REM_ACCESS_ERR to the sender and QP_FATAL to the peer (IBV_EVENT_QP_ACCESS_ERR),
 *   both QPs to ERR.
 * - A local SGE that its lkey does not cover (with LOCAL_WRITE where data is
 *   written into it) is LOC_PROT_ERR; a peer QP gone or not RTS is RETRY_EXC_ERR;
 *   both move only the sender's QP to ERR.
 * - Every error completion other than a flush is followed by the QP's
 *   QSM_EV_WC_ERROR (status -EIO), once per QP.
 *
 * Objects allocated by the sim abort() the process if malloc fails where a
 * call has already taken effect (posting an event): a sim that silently lost an
 * event would make every test that uses it lie.
 */

struct qsm_sim;
struct qsm_fabric;

/* The sim device's max_mr_size (ibv_device_attr): reg_mr refuses longer (-EINVAL). */
#define QSM_SIM_MAX_MR_SIZE (1ull << 32)

#define QSM_SIM_REQ_PDATA 56   /* IB CM REQ private data less the rdma_cm header */
#define QSM_SIM_REP_PDATA 196  /* IB CM REP private data */
#define QSM_SIM_REJ_PDATA 148  /* IB CM REJ private data */

#define QSM_SIM_REJ_TIMEOUT 1             /* IB_CM_REJ_TIMEOUT */
#define QSM_SIM_REJ_INVALID_SERVICE_ID 8  /* IB_CM_REJ_INVALID_SERVICE_ID */
#define QSM_SIM_REJ_CONSUMER 28           /* IB_CM_REJ_CONSUMER_DEFINED */

/*
 * Create an empty world (no devices, no fabrics, no faults armed).
 * Returns 0 and *ret, -EINVAL if ret is NULL, -ENOMEM.
 */
int qsm_sim_new(struct qsm_sim **ret);

/*
 * Free a world, its devices and their MRs.  NULL is a no-op.  Every fabric of the world
 * must have been destroyed first (fabric->ops->destroy); a debug build asserts
 * it, a release build then defers the free until the last fabric is destroyed,
 * so nothing dangles.  Device references still held (device_get) die with it.
 */
void qsm_sim_free(struct qsm_sim *sim);

/*
 * Attach a new fabric to the world: the backend one library ctx runs on.
 * The fabric is owned by whoever it is given to (the runtime), which destroys
 * it with (*ret)->ops->destroy(*ret) after destroying all of its ids; ids still
 * alive then are destroyed too and counted in qsm_sim_stats.ids_leaked.
 * Returns 0 and *ret; -EINVAL for NULL arguments; -ENOMEM; -errno of eventfd().
 */
int qsm_sim_fabric_new(struct qsm_sim *sim, struct qsm_fabric **ret);

/*
 * Add a device `name` serving the address `addr` (IPv4 or IPv6 text; not a
 * wildcard).  Every fabric of the world then gets QSM_EV_DEVICE_ADDED (owner
 * and id NULL, device set).  A name that was removed and is GONE comes back up,
 * with `addr` (it may differ), as the same struct qsm_fdev.
 * Device objects live as long as the world, so ev->device stays valid.
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
 * every MR registered on it and every device_get() reference is gone; then it is
 * GONE.
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
 * that cleaned up, ids, qps, device_refs, mrs and events_pending are all 0.
 * Every event posted ends up delivered (get_event), dropped (its id or fabric
 * was destroyed first, or a fault lost it), or is still pending (queued or held).
 */
struct qsm_sim_stats {
	unsigned ids;               /* live ids, including passive ids not yet reported */
	unsigned qps;               /* live QPs */
	unsigned device_refs;      /* device_get() not yet device_put() */
	unsigned mrs;              /* reg_mr() not yet dereg_mr() */
	unsigned events_pending;   /* queued on a fabric or held by QSM_SIM_FAULT_HOLD */
	unsigned events_delivered; /* returned by get_event(), since qsm_sim_new() */
	unsigned events_dropped;   /* never to be delivered, since qsm_sim_new() */
	unsigned ids_leaked;       /* ids a fabric destroy had to destroy itself */
};

/* Fill *st (zeroed if sim is NULL).  NULL st is a no-op. */
void qsm_sim_get_stats(struct qsm_sim *sim, struct qsm_sim_stats *st);

/*
 * Fault injection: qsm_sim_inject(sim, f, n) arms the next n occurrences of the
 * fault (replacing what was armed; 0 disarms).  A call that fails its argument
 * checks consumes nothing.
 */
enum qsm_sim_fault {
	QSM_SIM_FAULT_ADDR_ERROR,        /* resolve_addr -> ADDR_ERROR (-EHOSTUNREACH) */
	QSM_SIM_FAULT_ROUTE_ERROR,       /* resolve_route -> ROUTE_ERROR (-ETIMEDOUT) */
	QSM_SIM_FAULT_REJECT,            /* connect -> REJECTED (QSM_SIM_REJ_CONSUMER); the passive side sees nothing */
	QSM_SIM_FAULT_UNREACHABLE,       /* connect -> UNREACHABLE (-ETIMEDOUT); the passive side sees nothing */
	QSM_SIM_FAULT_CONNECT_ERROR,     /* accept -> CONNECT_ERROR (-ECONNABORTED) on both sides, no ESTABLISHED */
	QSM_SIM_FAULT_NO_TIMEWAIT_EXIT,  /* a TIMEWAIT_EXIT is lost */
	QSM_SIM_FAULT_DUP_DISCONNECTED,  /* a DISCONNECTED is delivered twice */
	QSM_SIM_FAULT_LATE_ESTABLISHED,  /* a DISCONNECTED is followed by a stray ESTABLISHED on the same id */
	QSM_SIM_FAULT_NO_DRAINED,        /* a drain never produces DRAINED (QP hung) */
	QSM_SIM_FAULT_ENOMEM,            /* create_id / create_qp fails with -ENOMEM */
	QSM_SIM_FAULT_HOLD,              /* the next n events posted are held back until qsm_sim_release() */
};
#define QSM_SIM_FAULT_COUNT (QSM_SIM_FAULT_HOLD + 1)

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
 * fabric `f` whose owner is `owner`: its QP goes to ERR and it gets
 * QSM_EV_QP_FATAL (status 0).  The peer notices nothing (as on the wire).
 * Returns 0; -EINVAL for NULL sim/f or f not of this world; -ENOENT if no such
 * id has a QP.
 */
int qsm_sim_qp_fatal(struct qsm_sim *sim, struct qsm_fabric *f, void *owner);

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
