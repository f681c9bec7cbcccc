/* rdma-qsm benchmarks: instruction counts under callgrind, the stable CPU figure on shared
 * VMs without hardware counters; each side runs alone in a child under valgrind. */
#ifndef QSM_BENCH_INSTR_H
#define QSM_BENCH_INSTR_H

#include <stdint.h>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define BENCH_HAVE_CALLGRIND_H 1
#endif
#endif
#ifndef BENCH_HAVE_CALLGRIND_H
#define CALLGRIND_START_INSTRUMENTATION do { } while (0)
#define CALLGRIND_STOP_INSTRUMENTATION do { } while (0)
#endif

uint64_t now_ns(void);

/* Around a measured loop: the clock, and callgrind's instrumentation in a counting child. */
static inline uint64_t measure_start(int instr)
{
	if (instr)
		CALLGRIND_START_INSTRUMENTATION;
	return now_ns();
}

/* ns since measure_start() */
static inline uint64_t measure_stop(int instr, uint64_t t0)
{
	uint64_t t1 = now_ns();

	if (instr)
		CALLGRIND_STOP_INSTRUMENTATION;
	return t1 - t0;
}

/* The child's first argument: `self --instr SIDE SIZE EVENTS` runs one side, then exits. */
#define BENCH_INSTR_ARG "--instr"

/* valgrind is on PATH and BENCH_NO_CALLGRIND is unset or empty */
int instr_available(void);

/*
 * Instructions (callgrind's Ir) of one side's measured loop: with callgrind.h, counted only
 * between CALLGRIND_START/STOP_INSTRUMENTATION in the child; without it, the whole child
 * minus the same child with 0 events.  0 when valgrind failed.
 */
uint64_t instr_count(const char *side, unsigned long size, unsigned long long events);

#endif
