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
	double bytes_connected;   /* qsm: bytes_per_queue once connected and settled */
	/* qsm only: what the rdmacm fabric holds per QP of the caps the runtime asked for, and those
	 * caps (send/recv WRs; 0/0: no QP was asked for) */
	size_t fabric_bytes_per_queue;
	uint32_t qp_send_wr, qp_recv_wr;
};

/* The same-work multiplexer (bench/mux.c): timed, or counted under callgrind (instr). */
struct result run_mux(size_t nqueues, uint64_t events, int instr);

/*
 * The timer case: no fabric event ever comes, so every queue's step timeout fires, then its
 * backoff: ADDR_RESOLVING -TIMEOUT-> RECONNECT_WAIT -RETRY-> ADDR_RESOLVING, each re-arming a
 * timer, on a virtual clock both sides read, which the driver moves to the next timer `rounds`
 * times (each time every queue's timer fires: no jitter).
 */
#define BENCH_TIMER_MS 1000            /* resolve_ms (the state's timeout: 1000 ms more), backoff */
#define BENCH_VCLOCK_START 1000000000ull
extern uint64_t bench_vclock_ns;
struct result run_mux_timers(size_t nqueues, uint64_t rounds, int instr);

#endif
