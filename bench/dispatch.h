/* rdma-qsm dispatch benchmark: what its sides share -- the event stream, the fabric that
 * replays it (no-op calls), the ULP's handler work and the clock. */
#ifndef QSM_BENCH_DISPATCH_H
#define QSM_BENCH_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include <qsm/ctx.h>

#include "fabric.h"

struct stream {
	size_t nqueues;
	uint64_t next, end;
};

int stream_next(struct stream *s, size_t *queue, int *event);
extern const int bench_cycle[];
extern const size_t bench_cycle_len;

/* The fabric of both multiplexers: bench_noop_ops, its get_event replaying `s`. */
struct bench_fabric *replay_fabric_new(size_t nqueues, size_t (*index_of)(void *owner), struct stream *s);

/* The ULP's own work in its handlers: the same on every side. */
extern uint64_t ulp_handler_calls;

struct result {
	double ns_per_event;
	uint64_t events;
	double bytes_per_queue;
	/* qsm only: what the rdmacm fabric holds per QP of the caps the runtime asked for, and those
	 * caps (send/recv WRs; 0/0: no QP was asked for) */
	size_t fabric_bytes_per_queue;
	uint32_t qp_send_wr, qp_recv_wr;
};

/* The same-work multiplexer (bench/mux.c): timed, or counted under callgrind (instr). */
struct result run_mux(size_t nqueues, uint64_t events, int instr);

#endif
