/* rdma-qsm: the real fabric, librdmacm + libibverbs.  Hand it to qsm_ctx_new() (struct
 * qsm_ctx_opts.fabric); the ctx owns it from then on and frees it in qsm_ctx_free(). */
#ifndef QSM_RDMACM_H
#define QSM_RDMACM_H

#ifdef __cplusplus
extern "C" {
#endif

struct qsm_fabric;

/*
 * A new fabric on the kernel's RDMA stack: one rdma_cm event channel, and per RDMA
 * device one protection domain and a pool of completion queues on one completion
 * channel: each QP of the fabric on that device is placed on a CQ of the pool with room
 * for its work requests (a CQ is grown up to the device's max_cqe, and a new one made when
 * none has room, up to its max_cq); a CQ that no QP uses any more is kept for the next
 * QPs (a reconnect storm reuses the pool's CQs, it does not create them again) and freed
 * once it has stayed empty for 4-5 s, at the once-a-second device-list tick, unless it is
 * the last one; an SRQ has a receive CQ of its own (see qsm_rdmacm_fabric_new(3)).
 * They are created when the first QP needs them and released when the last user lets go,
 * or when the device is removed and the runtime has released everything on it (so that
 * `rdma link delete` and driver unbinds complete while the process lives on).  New
 * devices are looked for once a second and reported as QSM_EV_DEVICE_ADDED.
 *
 * Like everything of a ctx, the fabric is not thread safe: one thread uses it.
 *
 * Returns 0, or a negative errno: -ENODEV when librdmacm cannot start (no RDMA
 * device at all, or rdma_ucm not loaded), -ENOMEM, or what a system call failed with.
 */
int qsm_rdmacm_fabric_new(struct qsm_fabric **ret);

struct rdma_cm_id;
struct ibv_qp;
struct ibv_pd;
struct qsm_conn;

/* A queue's verbs objects, for what the API does not cover (qsm_conn_verbs(3)). */
struct qsm_verbs {
	struct rdma_cm_id *cm_id;   /* NULL in the states without one (IDLE, RECONNECT_WAIT, ...) */
	struct ibv_qp *qp;          /* NULL without a QP */
	struct ibv_pd *pd;          /* the device's PD, shared by every queue on the device */
	void *reserved[2];          /* NULL: room for later objects (the library fills it whole) */
};

/*
 * The escape hatch.  Fills *out with what the queue has now; valid until the queue's next
 * transition (a handler may use them until it returns; between dispatches, until the next
 * qsm_ctx_dispatch()).  The library still owns them: never destroy, modify the state of,
 * disconnect, migrate or ack anything through them; a work request posted on the QP directly
 * bypasses the library's accounting and its completion reaches the class as any other (its
 * wr_id must not collide with the queue's).  Returns 0; -EINVAL for a NULL argument;
 * -ESTALE for a destroyed queue; -ENOENT when the queue has no cm_id now; -EOPNOTSUPP on a
 * fabric without verbs (the sim).
 */
int qsm_conn_verbs(struct qsm_conn *q, struct qsm_verbs *out);

#ifdef __cplusplus
}
#endif

#endif
