/* rdma-qsm benchmarks: a no-op fabric (struct qsm_fabric_ops) for benchmarks to replay events
 * through; one id per queue, owned as the side under test says. */
#ifndef QSM_BENCH_FABRIC_H
#define QSM_BENCH_FABRIC_H

#include <stddef.h>
#include <stdint.h>

#include <qsm/ctx.h>

#include "fabric/fabric.h"

struct qsm_fid {
	void *owner;
};

struct bench_fabric {
	struct qsm_fabric f;
	int fd;                   /* an eventfd, always readable */
	void *source;             /* what the benchmark's get_event hands out */
	struct qsm_fid *ids;      /* one id per queue, reused for every attempt */
	size_t nids;
	size_t (*index_of)(void *owner);  /* which ids[] create_id hands an owner */
};

struct bench_fabric *bf_of(struct qsm_fabric *f);

/* The caps of the last QP a side asked for (the runtime: its class's, or the defaults). */
extern struct qsm_fabric_qp_attr bench_qp_asked;

/* What the rdmacm fabric holds per QP of those caps (bench/qp_bytes.c: qsm_rc_qp_bytes). */
size_t bench_rdmacm_qp_bytes(uint32_t max_send_wr, uint32_t max_recv_wr);

/* Every call succeeds (id_device: NULL, device_addr: -ENOENT); get_event is NULL: copy the
 * ops and set your own. */
extern const struct qsm_fabric_ops bench_noop_ops;

struct bench_fabric *bench_fabric_new(size_t nqueues, size_t (*index_of)(void *owner),
				      const struct qsm_fabric_ops *ops, void *source);

#endif
