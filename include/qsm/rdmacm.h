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
 * device one protection domain and one completion queue shared by every QP of the
 * fabric on that device, created when the first QP needs them and released when the
 * last user lets go, or when the device is removed and the runtime has released
 * everything on it (so that `rdma link delete` and driver unbinds complete while the
 * process lives on).  New devices are looked for once a second and reported as
 * QSM_EV_DEVICE_ADDED.
 *
 * Like everything of a ctx, the fabric is not thread safe: one thread uses it.
 *
 * Returns 0, or a negative errno: -ENODEV when librdmacm cannot start (no RDMA
 * device at all, or rdma_ucm not loaded), -ENOMEM, or what a system call failed with.
 */
int qsm_rdmacm_fabric_new(struct qsm_fabric **ret);

#ifdef __cplusplus
}
#endif

#endif
