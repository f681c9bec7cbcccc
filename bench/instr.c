/* rdma-qsm benchmarks: run one side of a benchmark in a child under callgrind and read
 * the total instruction count (Ir) from its output file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "instr.h"


uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int instr_available(void)
{
	const char *off = getenv("BENCH_NO_CALLGRIND");

	if (off && *off)
		return 0;
	return system("command -v valgrind >/dev/null 2>&1") == 0;
}

/* The "totals:" line of a callgrind output file (its first event is Ir); the header's
 * "summary:" is 0 when instrumentation started off, so it only stands in for a missing one. */
static uint64_t read_ir(const char *path)
{
	char line[512];
	uint64_t ir = 0, summary = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "totals:", 7))
			ir = strtoull(line + 7, NULL, 10);
		else if (!strncmp(line, "summary:", 8))
			summary = strtoull(line + 8, NULL, 10);
	}
	if (!ir)
		ir = summary;
	fclose(f);
	return ir;
}

static uint64_t run_child(const char *side, unsigned long size, unsigned long long events)
{
	char out[64], sz[32], ev[32], outarg[96];
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	uint64_t ir;
	pid_t pid;
	int st;

	if (n <= 0)
		return 0;
	self[n] = '\0';
	snprintf(out, sizeof(out), "/tmp/qsm-bench-cg.%ld", (long)getpid());
	snprintf(outarg, sizeof(outarg), "--callgrind-out-file=%s", out);
	snprintf(sz, sizeof(sz), "%lu", size);
	snprintf(ev, sizeof(ev), "%llu", events);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 0;
	if (pid == 0) {
		char *argv[] = { "valgrind", "--tool=callgrind", outarg,
#ifdef BENCH_HAVE_CALLGRIND_H
				 "--instr-atstart=no",
#endif
				 self, BENCH_INSTR_ARG, (char *)side, sz, ev, NULL };

		if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
			_exit(127);
		execvp("valgrind", argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		unlink(out);
		return 0;
	}
	ir = read_ir(out);
	unlink(out);
	return ir;
}

uint64_t instr_count(const char *side, unsigned long size, unsigned long long events)
{
	uint64_t all = run_child(side, size, events);
#ifdef BENCH_HAVE_CALLGRIND_H
	return all;
#else
	uint64_t setup = all ? run_child(side, size, 0) : 0;

	return all > setup && setup ? all - setup : 0;
#endif
}
