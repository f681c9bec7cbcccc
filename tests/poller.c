/* rdma-qsm: what an empty qsm_ctx_dispatch() costs a poller host (SPDK-style: it calls dispatch
 * from a busy loop and never waits on the fd), in system calls, counted by ptrace(2). */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "embed_scenario.h"
#include "fake_rdmacm.h"

/*
 * The poller runs in a child traced by this process, which counts every system call the child
 * enters (any thread, any library: a vDSO clock read is none, as it is none for the host)
 * between two markers, a getppid(2) each, that the library never makes.  At the closing marker
 * the counts go back to the child through a pipe, and the child reports and checks them.
 *
 * The cases, each measured after a warm-up so that only the steady state is counted:
 *  - sim, idle: embed_scenario's two ctxs, polled (never waited on) until its 64 queues are
 *    LIVE, then empty rounds over both;
 *  - sim, a timer armed: one more queue, in RECONNECT_WAIT for 10 s;
 *  - rdmacm, idle: the rdmacm fabric's own code over bench/fake_rdmacm.c's provider (no system
 *    call in the provider, as in a kernel-bypass one), one LIVE queue, no CQ hot;
 *  - rdmacm, a CQ hot: a receive completes every HOT_EVERY calls, so that its CQ stays hot;
 *    the dispatches that take a completion and the reposts are counted too;
 *  - rdmacm, the CQ going cold: the calls right after the last completion.
 * Each prints "syscalls per empty dispatch X.XX" and fails above the bound that qsm_ctx_fd(3)
 * documents for it.  The counter itself is checked first: a window of a known number of calls.
 */
#define BUDGET 64
#define WARMUP 256              /* rounds before a window: the fabric knows the caller polls */
#define ROUNDS 8000             /* rounds in a window */
#define HOT_EVERY 32            /* calls between two completions, a CQ hot */
#define COLD_CALLS 1024         /* calls measured after the last one */
#define TOP 4                   /* system calls named in a report */
/* The rdmacm fabric's promise to a poller (qsm_ctx_fd(3)): one epoll_wait(2) in EPOLL_EVERY calls
 * (src/fabric/rdmacm/ops.c's HOT_EPOLL_EVERY) once BUSY_EMPTY_CALLS calls in a row found nothing
 * or while a CQ is hot; a CQ is re-armed after CQ_HOT_IDLE_POLLS empty polls (fabric/rdmacm/rdmacm.h) */
#define EPOLL_EVERY 16
#define SLACK 0.01              /* what a window may catch once: a timer, a netlink message */

/* What the tracer counted in a window. */
struct window {
	uint64_t n;
	struct {
		long nr;
		uint64_t n;
	} top[TOP];
};

/* ---- the tracer ---- */

struct tally {
	bool on;
	uint64_t n;
	long nr[64];
	uint64_t count[64];
	unsigned kinds;
};

static void tally_add(struct tally *t, long nr)
{
	unsigned k;

	t->n++;
	for (k = 0; k < t->kinds && t->nr[k] != nr; k++)
		;
	if (k == t->kinds) {
		if (k == sizeof(t->nr) / sizeof(t->nr[0]))
			return;
		t->nr[k] = nr;
		t->count[k] = 0;
		t->kinds++;
	}
	t->count[k]++;
}

static struct window tally_window(const struct tally *t)
{
	struct window w = { .n = t->n };
	bool taken[64] = { false };

	for (int i = 0; i < TOP; i++) {
		int best = -1;

		for (unsigned k = 0; k < t->kinds; k++)
			if (!taken[k] && (best < 0 || t->count[k] > t->count[best]))
				best = (int)k;
		if (best < 0)
			break;
		taken[best] = true;
		w.top[i].nr = t->nr[best];
		w.top[i].n = t->count[best];
	}
	return w;
}

/* Runs until the child is gone; its exit status, or 1 if it died of a signal. */
static int trace(pid_t child, int answer_fd)
{
	struct tally t = { .on = false };
	int status, rc = 1;
	pid_t tid;

	if (waitpid(child, &status, 0) != child) {
		perror("poller: waitpid");
		return 1;
	}
	if (!WIFSTOPPED(status))
		return WIFEXITED(status) ? WEXITSTATUS(status) : 1;   /* 77: it could not be traced */
	if (ptrace(PTRACE_SETOPTIONS, child, 0, PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL |
		   PTRACE_O_TRACECLONE) < 0 || ptrace(PTRACE_SYSCALL, child, 0, 0) < 0) {
		perror("poller: ptrace");
		kill(child, SIGKILL);
		return 1;
	}
	while ((tid = waitpid(-1, &status, __WALL)) > 0) {
		int sig = 0;

		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			if (tid == child)
				rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
			continue;
		}
		if (WSTOPSIG(status) == (SIGTRAP | 0x80)) {
			struct __ptrace_syscall_info si;

			if (ptrace(PTRACE_GET_SYSCALL_INFO, tid, sizeof(si), &si) <= 0) {
				printf("SKIP: ptrace cannot tell which system call this is (PTRACE_GET_SYSCALL_INFO: %s)\n",
				       strerror(errno));
				kill(child, SIGKILL);
				rc = 77;
				continue;
			}
			if (si.op == PTRACE_SYSCALL_INFO_ENTRY && si.entry.nr == SYS_getppid) {
				if (t.on) {   /* the closing marker: the window goes back to the child */
					struct window w = tally_window(&t);

					if (write(answer_fd, &w, sizeof(w)) != sizeof(w))
						kill(child, SIGKILL);
				}
				t = (struct tally){ .on = !t.on };
			} else if (si.op == PTRACE_SYSCALL_INFO_ENTRY && t.on) {
				tally_add(&t, (long)si.entry.nr);
			}
		} else if (status >> 16) {
			/* a ptrace event (a new thread): nothing to pass on */
		} else if (WSTOPSIG(status) != SIGSTOP) {
			sig = WSTOPSIG(status);   /* SIGSTOP: a new thread's first stop */
		}
		ptrace(PTRACE_SYSCALL, tid, 0, sig);
	}
	return rc;
}

/* ---- the poller (the traced child) ---- */

static int answer_fd;
static int failed;

static void window_open(void)
{
	fflush(stdout);
	fflush(stderr);
	syscall(SYS_getppid);
}

static struct window window_close(void)
{
	struct window w;

	syscall(SYS_getppid);
	if (read(answer_fd, &w, sizeof(w)) != sizeof(w)) {
		printf("FAIL: the tracer sent no count\n");
		fflush(stdout);
		_exit(1);
	}
	return w;
}

static const char *syscall_name(long nr)
{
	static char other[32];
	static const struct {
		long nr;
		const char *name;
	} names[] = {
		{ SYS_epoll_wait, "epoll_wait" }, { SYS_epoll_pwait, "epoll_pwait" }, { SYS_read, "read" },
		{ SYS_write, "write" }, { SYS_timerfd_settime, "timerfd_settime" },
		{ SYS_clock_gettime, "clock_gettime" }, { SYS_poll, "poll" }, { SYS_ppoll, "ppoll" },
		{ SYS_ioctl, "ioctl" }, { SYS_getpid, "getpid" }, { SYS_mmap, "mmap" },
		{ SYS_munmap, "munmap" }, { SYS_brk, "brk" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].nr == nr)
			return names[i].name;
	snprintf(other, sizeof(other), "syscall %ld", nr);
	return other;
}

static void print_top(const struct window *w)
{
	printf("(");
	for (int i = 0; i < TOP && w->top[i].n; i++)
		printf("%s%s %llu", i ? ", " : "", syscall_name(w->top[i].nr), (unsigned long long)w->top[i].n);
	printf("%s)", w->n ? "" : "none");
}

/* The counter counts: a window of 10 getpid(2), then an empty one. */
static void check_counter(void)
{
	struct window w[2];

	window_open();
	for (int i = 0; i < 10; i++)
		syscall(SYS_getpid);
	w[0] = window_close();
	window_open();
	w[1] = window_close();
	printf("counter: %llu system calls counted for 10 getpid, %llu for none\n",
	       (unsigned long long)w[0].n, (unsigned long long)w[1].n);
	if (w[0].n != 10 || w[0].top[0].nr != SYS_getpid || w[1].n != 0) {
		printf("FAIL: the system call counter is off\n");
		failed = 1;
	}
}

/* One report line, and its check. */
static void report(const char *what, const struct window *w, unsigned empty, unsigned calls, double bound)
{
	double per = empty ? (double)w->n / empty : 1e9;

	printf("syscalls per empty dispatch %.2f  %s: %llu in %u empty calls of %u ", per, what,
	       (unsigned long long)w->n, empty, calls);
	print_top(w);
	printf("\n");
	if (per > bound) {
		printf("FAIL: %s: %.4f system calls per empty dispatch, over the %.4f documented\n", what, per,
		       bound);
		failed = 1;
	}
}

/* Busy rounds over the ctxs, calling each() (if any) before every call. */
struct rounds {
	unsigned calls, empty;
};

static struct rounds poll_rounds(struct qsm_ctx **ctx, int nctx, unsigned rounds, void (*each)(unsigned call))
{
	struct rounds r = { 0, 0 };

	for (unsigned i = 0; i < rounds; i++)
		for (int c = 0; c < nctx; c++) {
			if (each)
				each(r.calls);
			r.empty += qsm_ctx_dispatch(ctx[c], BUDGET) == 0;
			r.calls++;
		}
	return r;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* embed_scenario from a poller, then its idle cost, and with a timer armed. */
static void sim_cases(void)
{
	static const struct qsm_class lone_class = { .name = "lone" };
	struct sockaddr_in nowhere = { .sin_family = AF_INET, .sin_port = htons(4421) };
	struct embed e;
	struct qsm_conn *lone;
	struct window w;
	struct rounds r;
	uint64_t t0;

	if (embed_start(&e, "poller")) {
		failed = 1;
		return;
	}
	t0 = mono_ms();
	while (!embed_done(&e)) {
		for (int i = 0; i < EMBED_CTXS; i++)
			embed_dispatch(&e, e.ctx[i], EMBED_WAKE_POLL);
		embed_tick(&e, (unsigned)((mono_ms() - t0) / EMBED_TICK_MS) - e.ticks);
	}
	poll_rounds(e.ctx, EMBED_CTXS, WARMUP, NULL);
	window_open();
	r = poll_rounds(e.ctx, EMBED_CTXS, ROUNDS, NULL);
	w = window_close();
	report("sim, idle (64 LIVE queues and their peers, 2 ctxs)", &w, r.empty, r.calls, SLACK);

	/* a queue whose attempt failed (no listener there), to retry in 10 s */
	inet_pton(AF_INET, "192.0.2.1", &nowhere.sin_addr);
	if (qsm_conn_new(e.ctx[1], &(struct qsm_conn_opts){ .cls = &lone_class, .dst = (struct sockaddr *)&nowhere,
			 .policy = { .initial_delay_ms = 10000 } }, &lone) || qsm_conn_connect(lone)) {
		printf("FAIL: no queue for the timer case\n");
		failed = 1;
	} else {
		for (int i = 0; i < 1000 && qsm_conn_state(lone) != QSM_CM_RECONNECT_WAIT; i++)
			poll_rounds(e.ctx, EMBED_CTXS, 1, NULL);
		poll_rounds(e.ctx, EMBED_CTXS, WARMUP, NULL);
		window_open();
		r = poll_rounds(e.ctx, EMBED_CTXS, ROUNDS, NULL);
		w = window_close();
		if (qsm_conn_state(lone) != QSM_CM_RECONNECT_WAIT || qsm_ctx_next_timeout_ms(e.ctx[1]) < 1000) {
			printf("FAIL: the queue is %s, its ctx's next timeout %d ms: not a timer 10 s out\n",
			       qsm_conn_state_name(lone), qsm_ctx_next_timeout_ms(e.ctx[1]));
			failed = 1;
		}
		report("sim, a timer armed (a queue in RECONNECT_WAIT for 10 s)", &w, r.empty, r.calls, SLACK);
	}
	failed |= embed_finish(&e);
}

/* ---- the rdmacm fabric over the fake provider ---- */

static unsigned completions;
static struct qsm_conn *rc_queue;

static int on_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	(void)q;
	completions++;
	return wc->status != QSM_WC_SUCCESS;
}

static const struct qsm_class rc_class = {
	.name = "poller",
	.qp = { .max_send_wr = 16, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
	.completion = on_completion,
};

/* Every HOT_EVERY calls a receive is posted, whose message has arrived: the next poll takes it. */
static void post_every(unsigned call)
{
	struct qsm_sge sge = { .addr = 4096, .length = 4096, .lkey = 1 };

	if (call % HOT_EVERY == 0 && qsm_conn_post_recv(rc_queue, call, &sge, 1) < 0)
		failed = 1;
}

static void rdmacm_cases(void)
{
	struct rc_fabric *f;
	struct qsm_ctx *ctx;
	struct window w;
	struct rounds r;
	unsigned before;

	if (fake_rdmacm_live(&rc_class, &ctx, &rc_queue, &f) < 0) {
		failed = 1;
		return;
	}
	poll_rounds(&ctx, 1, WARMUP, NULL);
	window_open();
	r = poll_rounds(&ctx, 1, ROUNDS * 2, NULL);
	w = window_close();
	report("rdmacm, idle (1 LIVE queue, no CQ hot)", &w, r.empty, r.calls, 1.0 / EPOLL_EVERY + SLACK);

	fake_cq_event(f);
	before = completions;
	window_open();
	r = poll_rounds(&ctx, 1, ROUNDS * 2, post_every);
	w = window_close();
	/* a call that takes a completion asks the fabric again, and finds nothing: that ask counts
	 * among the EPOLL_EVERY */
	report("rdmacm, a CQ hot (a completion every 32 calls, taken and reposted)", &w, r.empty, r.calls,
	       (double)(r.calls + r.calls - r.empty) / EPOLL_EVERY / r.empty + SLACK);
	if (completions - before != ROUNDS * 2 / HOT_EVERY || !fake_cq_hot()) {
		printf("FAIL: %u completions of %d, the CQ %s\n", completions - before, ROUNDS * 2 / HOT_EVERY,
		       fake_cq_hot() ? "hot" : "cold: not the case measured");
		failed = 1;
	}

	/* Cold after CQ_HOT_IDLE_POLLS empty polls (1 in EPOLL_EVERY asks epoll meanwhile): a read(2)
	 * of the fabric's hot fd, then an epoll_wait on each of the BUSY_EMPTY_CALLS calls before
	 * the fabric takes the caller for a poller again, and 1 in EPOLL_EVERY after. */
	window_open();
	r = poll_rounds(&ctx, 1, COLD_CALLS, NULL);
	w = window_close();
	report("rdmacm, the CQ going cold (the 1024 calls after its last completion)", &w, r.empty, r.calls,
	       (CQ_HOT_IDLE_POLLS / EPOLL_EVERY + 1 + BUSY_EMPTY_CALLS +
		(COLD_CALLS - CQ_HOT_IDLE_POLLS - BUSY_EMPTY_CALLS) / EPOLL_EVERY + 1.0) / COLD_CALLS + SLACK);
	if (fake_cq_hot()) {
		printf("FAIL: the CQ is still hot after %d empty calls\n", COLD_CALLS);
		failed = 1;
	}
	qsm_ctx_free(ctx);
}

int main(void)
{
	int fds[2];
	pid_t child;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pipe(fds) < 0) {
		perror("poller: pipe");
		return 1;
	}
	child = fork();
	if (child < 0) {
		perror("poller: fork");
		return 1;
	}
	if (child) {
		close(fds[0]);
		return trace(child, fds[1]);
	}
	close(fds[1]);
	answer_fd = fds[0];
	if (ptrace(PTRACE_TRACEME, 0, 0, 0) < 0) {
		printf("SKIP: ptrace refused (%s): no system call can be counted here\n", strerror(errno));
		fflush(stdout);
		_exit(77);
	}
	raise(SIGSTOP);
	check_counter();
	sim_cases();
	rdmacm_cases();
	fflush(stdout);
	_exit(failed ? 1 : 0);   /* not exit(): LeakSanitizer's exit-time ptrace fails in a tracee */
}
