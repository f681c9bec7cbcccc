/* rdma-qsm dispatch benchmark: what its sides share -- the cycle, the fake librdmacm under both
 * (bench/fake_rdmacm.h, many ids), the ULP's handler work, the virtual clock and the checks. */
#ifndef QSM_BENCH_DISPATCH_H
#define QSM_BENCH_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <qsm/ctx.h>

/*
 * The cycle (dispatch.c): per queue, 5 CM events from the fake's channel, DRAINED from the
 * drain's marker on the CQ, RETRY from the side's own reconnect timer (BENCH_CYCLE_EVENTS), and
 * the READY the ULP's CONNECTED handler posts: BENCH_CYCLE_DISPATCHES dispatches.
 */
#define BENCH_CYCLE_CM 5
#define BENCH_CYCLE_EVENTS 7
#define BENCH_CYCLE_DISPATCHES 8

/* The ULP's own work in its handlers: the same on every side (2 calls per cycle). */
extern uint64_t ulp_handler_calls;

struct result {
	double ns_per_event;
	uint64_t events;
	bool ok;                  /* the run's checks held (dispatch counts, handler calls, states) */
	double bytes_per_queue;
	double bytes_connected;   /* qsm: bytes_per_queue once connecting and settled */
	/* qsm only: what the rdmacm fabric holds per QP of the caps the runtime asked for, and those
	 * caps (send/recv WRs; 0/0: no QP was asked for) */
	size_t fabric_bytes_per_queue;
	uint32_t qp_send_wr, qp_recv_wr;
};

/*
 * The virtual clock both sides read.  The reconnect delay is BENCH_RETRY_MS (jitter 10%) and
 * every step timeout longer; between two cycles, with every queue waiting to reconnect, the
 * driver moves the clock by BENCH_CYCLE_JUMP_MS, so every queue's RETRY comes in one pass.
 */
#define BENCH_VCLOCK_START 1000000000ull
#define BENCH_RETRY_MS 3600000u
#define BENCH_CYCLE_JUMP_MS (2ull * BENCH_RETRY_MS)
extern uint64_t bench_vclock_ns;

/* What `cycles` measured cycles of every queue must have done: the dispatches, the handler
 * calls and the fake's CM events counted over them; false, said on stderr, when they differ. */
bool bench_check(const char *side, uint64_t dispatched, uint64_t handler_calls, uint64_t cm_events,
		 size_t nqueues, uint64_t cycles);

/* The same-work multiplexer (bench/mux.c): timed, or counted under callgrind (instr). */
struct result run_mux(size_t nqueues, uint64_t cycles, int instr);

/*
 * The timer case: no CM event ever answers, so every queue's step timeout fires, then its
 * backoff: ADDR_RESOLVING -TIMEOUT-> RECONNECT_WAIT -RETRY-> ADDR_RESOLVING, each re-arming a
 * timer (and giving back its id, making a new one), on the virtual clock, which the driver moves
 * to the next timer `rounds` times (each time every queue's timer fires: no jitter).
 */
#define BENCH_TIMER_MS 1000            /* resolve_ms (the state's timeout: 1000 ms more), backoff */
struct result run_mux_timers(size_t nqueues, uint64_t rounds, int instr);

#endif
