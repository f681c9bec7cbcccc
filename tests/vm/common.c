/* rdma-qsm VM tests: what the real-stack test programs (removal, gap, abort) share.
 * A server and a client ctx in one process on the rdmacm fabric, one host loop for both, checks. */
#include "common.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <qsm/rdmacm.h>

unsigned vm_failures;

static FILE *trace_out;

void vm_check(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", ok ? "ok  " : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!ok)
		vm_failures++;
}

double vm_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *vm_env(const char *name, const char *def)
{
	const char *v = getenv(name);

	return v && *v ? v : def;
}

const char *vm_cm_state_name(int state)
{
	static const char *const names[] = {
		"IDLE", "ADDR_RESOLVING", "ROUTE_RESOLVING", "CONNECTING", "CONNECTED", "LIVE",
		"DISCONNECTING", "DRAINING", "CLOSING", "RECONNECT_WAIT", "FAILED", "CLOSED",
	};

	return state >= 0 && state < QSM_CM_STATE_COUNT ? names[state] : "?";
}

/* ---- setup and teardown ---- */

void vm_init_stdio(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
}

bool vm_parse_addr(struct sockaddr_storage *addr, const char *ip, const char *port_env, const char *port_def)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV }, *res;
	bool ok;

	memset(addr, 0, sizeof(*addr));
	if (getaddrinfo(ip, vm_env(port_env, port_def), &hints, &res))
		return false;
	ok = (res->ai_family == AF_INET || res->ai_family == AF_INET6) && res->ai_addrlen <= sizeof(*addr);
	if (ok)
		memcpy(addr, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return ok;
}

uint16_t vm_addr_port(const struct sockaddr_storage *addr)
{
	return ntohs(addr->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)addr)->sin6_port
						 : ((const struct sockaddr_in *)addr)->sin_port);
}

int vm_trace_open(int argc, char **argv)
{
	if (argc <= 2)
		return 0;
	trace_out = strcmp(argv[2], "-") ? fopen(argv[2], "w") : stdout;
	if (!trace_out) {
		perror(argv[2]);
		return -1;
	}
	return 0;
}

/* One line a transition, labelled "server" or "client"; the scenarios grep these lines. */
static void print_trace(const struct qsm_trace_record *r, void *arg)
{
	fprintf(trace_out, "%s %10.6f %s %s#%u %s --%s%s%.0d--> %s\n", (const char *)arg,
		(double)r->time_ns / 1e9, r->kind, r->class_name ? r->class_name : "-", r->id, r->from,
		r->event ? r->event : "?", r->status ? " status=" : "", r->status,
		r->to ? r->to : "(unexpected: stays)");
}

void vm_trace_print(const struct qsm_trace_record *r, const char *side)
{
	if (trace_out)
		print_trace(r, (void *)side);
}

int vm_ctx_new(struct qsm_ctx **ctx, const char *side)
{
	struct qsm_fabric *f;
	int r;

	if ((r = qsm_rdmacm_fabric_new(&f)) < 0) {
		printf("FAIL: qsm_rdmacm_fabric_new: %s\n", strerror(-r));
		return -1;
	}
	if ((r = qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f }, ctx)) < 0) {
		printf("FAIL: qsm_ctx_new: %s\n", strerror(-r));
		return -1;
	}
	if (trace_out)
		qsm_ctx_set_trace(*ctx, print_trace, (void *)side);
	return 0;
}

int vm_ctxs_new(struct qsm_ctx **server, struct qsm_ctx **client)
{
	/* one fabric each: the two sides must not share an event channel, as two hosts would not */
	return vm_ctx_new(server, "server") < 0 || vm_ctx_new(client, "client") < 0 ? -1 : 0;
}

void vm_ctxs_free(struct qsm_ctx *server, struct qsm_ctx *client)
{
	qsm_ctx_free(client);
	qsm_ctx_free(server);
	if (trace_out && trace_out != stdout)
		fclose(trace_out);
	trace_out = NULL;
}

int vm_listener_new(struct qsm_ctx *server, const struct qsm_listener_opts *o, const char *ip,
		    struct qsm_listener **l)
{
	int r = qsm_listener_new(server, o, l);

	if (r < 0) {
		printf("FAIL: qsm_listener_new %s port %u: %s\n", ip,
		       vm_addr_port((const struct sockaddr_storage *)(const void *)o->addr), strerror(-r));
		return -1;
	}
	return 0;
}

int vm_conn_start(struct qsm_ctx *client, const struct qsm_conn_opts *o, unsigned index, struct qsm_conn **q)
{
	int r = qsm_conn_new(client, o, q);

	if (r == 0)
		r = qsm_conn_connect(*q);
	if (r < 0) {
		printf("FAIL: queue %u: %s\n", index, strerror(-r));
		return -1;
	}
	return 0;
}

/* ---- the host loop ---- */

void vm_pump(struct qsm_ctx *a, struct qsm_ctx *b)
{
	struct pollfd pfd[2] = { { .fd = qsm_ctx_fd(a), .events = POLLIN },
				 { .fd = qsm_ctx_fd(b), .events = POLLIN } };
	int ta = qsm_ctx_next_timeout_ms(a), tb = qsm_ctx_next_timeout_ms(b), wait = 10;

	/* never sleep past a due timer of either ctx */
	if (ta >= 0 && ta < wait)
		wait = ta;
	if (tb >= 0 && tb < wait)
		wait = tb;
	if (wait > 0)
		poll(pfd, 2, wait);
	/* one side's dispatch feeds the other's (a send, its receive): until both are idle, bounded
	 * in rounds and in time (50 ms), so that a caller that watches the clock (a command run
	 * while dispatching) looks again soon, however long a storm keeps both busy */
	double t0 = vm_now();

	for (int round = 0; round < 1000 && (vm_now() - t0) < 0.05; round++) {
		int k = qsm_ctx_dispatch(a, 0), m = qsm_ctx_dispatch(b, 0);

		if (k <= 0 && m <= 0)
			break;
	}
}

void vm_pump_for(struct qsm_ctx *a, struct qsm_ctx *b, int ms)
{
	double t0 = vm_now();

	while ((vm_now() - t0) * 1000 < ms)
		vm_pump(a, b);
}

unsigned vm_count_state(struct qsm_conn **q, unsigned n, int state)
{
	unsigned c = 0;

	for (unsigned i = 0; i < n; i++)
		c += q[i] && qsm_conn_state(q[i]) == state;
	return c;
}

/* ---- commands run while dispatching ---- */

static pid_t spawn(char *const argv[])
{
	pid_t pid = fork();

	if (pid == 0) {
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* The lines of /proc/PID/FILE that start with `prefix` ("": all), indented.  Its state in
 * "status" ("D (disk sleep)", ...); a hung `rdma link delete` sits in the kernel, and its
 * "stack" says what it waits for. */
static void print_proc(pid_t pid, const char *file, const char *prefix)
{
	char path[64], line[256];
	FILE *st;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	st = fopen(path, "r");
	while (st && fgets(line, sizeof(line), st))
		if (!strncmp(line, prefix, strlen(prefix)))
			printf("     %s", line);
	if (st)
		fclose(st);
}

double vm_run_dispatching(struct qsm_ctx *a, struct qsm_ctx *b, char *const argv[], int limit_ms,
			  int *status)
{
	double t0 = vm_now();
	pid_t pid = spawn(argv);
	double took;

	if (pid < 0)
		return -1;
	/* not a blocking waitpid: the command may need our queues to let go of the device first */
	while ((vm_now() - t0) * 1000 < limit_ms) {
		if (waitpid(pid, status, WNOHANG) == pid)
			return vm_now() - t0;
		vm_pump(a, b);
	}
	/* the limit: it may have ended during the last pump; else say where it is, keep dispatching
	 * for as long again (it may wait for us), then kill it -- and reap it, always */
	if (waitpid(pid, status, WNOHANG) == pid)
		return vm_now() - t0;
	printf("   '%s %s ...' still running after %d ms; its state and kernel stack:\n", argv[0], argv[1],
	       limit_ms);
	print_proc(pid, "status", "State:");
	print_proc(pid, "stack", "");
	while ((vm_now() - t0) * 1000 < 2.0 * limit_ms) {
		if (waitpid(pid, status, WNOHANG) == pid) {
			took = vm_now() - t0;
			printf("   '%s %s ...' ended %.2f s after it started, over its %d ms limit: exit %d\n",
			       argv[0], argv[1], took, limit_ms, vm_exit_code(*status));
			return -1;
		}
		vm_pump(a, b);
	}
	kill(pid, SIGKILL);
	waitpid(pid, status, 0);
	printf("   '%s %s ...' killed after %.2f s (twice its limit, dispatching all along)\n", argv[0],
	       argv[1], vm_now() - t0);
	return -1;
}

double vm_rdma_link_delete(struct qsm_ctx *a, struct qsm_ctx *b, const char *dev, int limit_ms, int *status)
{
	char *argv[] = { "rdma", "link", "delete", (char *)dev, NULL };

	return vm_run_dispatching(a, b, argv, limit_ms, status);
}

double vm_rdma_link_add(struct qsm_ctx *a, struct qsm_ctx *b, const char *dev, const char *netdev,
			int limit_ms, int *status)
{
	/* the link type the guest brought the device up with (tests/vm/guest/init) */
	char *argv[] = { "rdma", "link", "add", (char *)dev, "type", (char *)vm_env("QSM_VM_TRANSPORT", "rxe"),
			 "netdev", (char *)netdev, NULL };

	return vm_run_dispatching(a, b, argv, limit_ms, status);
}

int vm_exit_code(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- the data path ---- */

struct qsm_sge vm_sge(void *buf, uint32_t len, struct qsm_mr *mr)
{
	return (struct qsm_sge){ .addr = (uintptr_t)buf, .length = len, .lkey = qsm_mr_lkey(mr) };
}

int vm_reg_buffer(struct qsm_conn *q, struct qsm_mr **mr, void *buf, size_t len)
{
	if (qsm_mr_valid(*mr))
		return 0;
	if (*mr)
		qsm_mr_dereg(*mr);
	*mr = NULL;
	return qsm_conn_reg_mr(q, buf, len, QSM_ACCESS_LOCAL_WRITE, mr);
}

int vm_echo_qp_ready(struct qsm_conn *q, struct vm_echo *e)
{
	struct qsm_sge rs;

	if (vm_reg_buffer(q, &e->mr, e, sizeof(*e)) < 0)
		return -1;
	rs = vm_sge(e->rbuf, sizeof(e->rbuf), e->mr);
	return qsm_conn_post_recv(q, VM_ECHO_WR_RECV, &rs, 1) < 0 ? -1 : 0;
}

enum vm_echo_result vm_echo_completion(struct qsm_conn *q, struct vm_echo *e, const struct qsm_wc *wc)
{
	struct qsm_sge rs = vm_sge(e->rbuf, sizeof(e->rbuf), e->mr), ss;

	if (wc->status == QSM_WC_WR_FLUSH_ERR)
		return VM_ECHO_NOTHING;
	if (wc->status != QSM_WC_SUCCESS)
		return VM_ECHO_BAD_STATUS;
	if (wc->wr_id != VM_ECHO_WR_RECV)
		return VM_ECHO_NOTHING;
	/* the peer's message may lack its NUL */
	e->rbuf[sizeof(e->rbuf) - 1] = 0;
	snprintf(e->sbuf, sizeof(e->sbuf), "echo: %s", e->rbuf);
	ss = vm_sge(e->sbuf, (uint32_t)strlen(e->sbuf) + 1, e->mr);
	/* the next receive before the echo: the peer may send again as soon as the echo lands */
	if (qsm_conn_post_recv(q, VM_ECHO_WR_RECV, &rs, 1) < 0 ||
	    qsm_conn_post_send(q, VM_ECHO_WR_SEND, &ss, 1, QSM_POST_SIGNALED) < 0)
		return VM_ECHO_POST_FAILED;
	return VM_ECHO_SENT;
}

double vm_wait_all(struct qsm_ctx *a, struct qsm_ctx *b, struct qsm_conn **q, unsigned n, int state,
		   int limit_ms)
{
	double t0 = vm_now();

	while (vm_count_state(q, n, state) < n) {
		if ((vm_now() - t0) * 1000 >= limit_ms)
			return -1;
		vm_pump(a, b);
	}
	return vm_now() - t0;
}

unsigned vm_echo_errors, vm_echo_sent;

int vm_echo_server_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	if (vm_echo_qp_ready(q, qsm_conn_priv(q)) < 0)
		vm_echo_errors++;
	return 0;
}

int vm_echo_server_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	switch (vm_echo_completion(q, qsm_conn_priv(q), wc)) {
	case VM_ECHO_SENT:
		vm_echo_sent++;
		break;
	case VM_ECHO_BAD_STATUS:
	case VM_ECHO_POST_FAILED:
		vm_echo_errors++;
		break;
	case VM_ECHO_NOTHING:
		break;
	}
	return 0;
}
