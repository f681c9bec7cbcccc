/* rdma-qsm dispatch benchmark: what its sides share -- the event stream, the fabric that
 * replays it (no-op calls), the ULP's handler work and the clock. */
#ifndef QSM_BENCH_DISPATCH_H
#define QSM_BENCH_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include <qsm/ctx.h>

#include "fabric/fabric.h"

struct stream {
	size_t nqueues;
	uint64_t next, end;
};

int stream_next(struct stream *s, size_t *queue, int *event);
extern const int bench_cycle[];
extern const size_t bench_cycle_len;

struct qsm_fid {
	void *owner;
};

/* Replays `s` through get_event; create_id hands queue index_of(owner) its one id. */
struct bench_fabric {
	struct qsm_fabric f;
	int fd;
	struct stream s;
	struct qsm_fid *ids;      /* one id per queue, reused for every attempt */
	size_t nids;
	size_t (*index_of)(void *owner);
};

struct bench_fabric *bench_fabric_new(size_t nqueues, size_t (*index_of)(void *owner));
extern const struct qsm_fabric_ops bench_ops;

/* The ULP's own work in its handlers: the same on every side. */
extern uint64_t ulp_handler_calls;

uint64_t now_ns(void);

struct result {
	double ns_per_event;
	uint64_t events;
	double bytes_per_queue;
};

/* The same-work multiplexer (bench/mux.c): timed, or counted under callgrind (instr). */
struct result run_mux(size_t nqueues, uint64_t events, int instr);

#endif
