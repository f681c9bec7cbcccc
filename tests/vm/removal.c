/* rdma-qsm VM test: device removal with live queues on the real kernel RDMA stack (rdmacm fabric).
 * N queues connect to a listener, `rdma link delete` must complete while the process lives on,
 * every client queue waits in RECONNECT_WAIT, and after `rdma link add` all N are LIVE again.
 *
 *   removal [N [TRACE_FILE]]     N queues (default 100); trace to TRACE_FILE ("-" = stdout,
 *                                default: no trace).  Env: QSM_VM_DEV (rxe0), QSM_VM_NETDEV
 *                                (veth0), QSM_VM_ADDR (192.0.2.1), QSM_REMOVAL_PORT (7471).
 * Exit 0 only if every check passed.  Needs root (rdma link) and a soft-RoCE device.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <qsm/qsm.h>
#include <qsm/rdmacm.h>

#define CONNECT_LIMIT_MS 60000
#define DELETE_LIMIT_MS 30000
#define GAP_LIMIT_MS 10000
#define RECONNECT_LIMIT_MS 60000

struct queue {
	unsigned removals;          /* device_removed handler calls */
	unsigned lives;             /* LIVE.enter calls */
};

static FILE *trace_out;
static unsigned failures;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", ok ? "ok  " : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!ok)
		failures++;
}

static int on_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	((struct queue *)qsm_conn_priv(q))->removals++;
	return 0;
}

static int on_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	((struct queue *)qsm_conn_priv(q))->lives++;
	return 0;
}

/* The base class's behaviour (connect, READY at once), plus counting what this test checks. */
static const struct qsm_class client_class = {
	.name = "removal_client",
	.super = &qsm_base_class,
	.priv_size = sizeof(struct queue),
	.active = { [QSM_CM_LIVE] = { .enter = on_live } },
	.device_removed = on_device_removed,
};

/* The server side is the base class as is: it accepts every request. */
static const struct qsm_class server_class = {
	.name = "removal_server",
	.super = &qsm_base_class,
};

static void print_trace(const struct qsm_trace_record *r, void *arg)
{
	fprintf(trace_out, "%s %10.6f %s %s#%u %s --%s%s%.0d--> %s\n", (const char *)arg,
		(double)r->time_ns / 1e9, r->kind, r->class_name ? r->class_name : "-", r->id, r->from,
		r->event ? r->event : "?", r->status ? " status=" : "", r->status,
		r->to ? r->to : "(unexpected: stays)");
}

/* One round of the host loop: wait on both ctxs (at most 10 ms), dispatch both until idle. */
static void pump(struct qsm_ctx *a, struct qsm_ctx *b)
{
	struct pollfd pfd[2] = { { .fd = qsm_ctx_fd(a), .events = POLLIN },
				 { .fd = qsm_ctx_fd(b), .events = POLLIN } };
	int ta = qsm_ctx_next_timeout_ms(a), tb = qsm_ctx_next_timeout_ms(b), wait = 10;

	if (ta >= 0 && ta < wait)
		wait = ta;
	if (tb >= 0 && tb < wait)
		wait = tb;
	if (wait > 0)
		poll(pfd, 2, wait);
	for (int round = 0; round < 1000; round++) {
		int n = qsm_ctx_dispatch(a, 0), m = qsm_ctx_dispatch(b, 0);

		if (n <= 0 && m <= 0)
			break;
	}
}

static unsigned count_state(struct qsm_conn **q, unsigned n, int state)
{
	unsigned c = 0;

	for (unsigned i = 0; i < n; i++)
		c += qsm_conn_state(q[i]) == state;
	return c;
}

static pid_t spawn(char *const argv[])
{
	pid_t pid = fork();

	if (pid == 0) {
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Run a command while both ctxs keep dispatching; its wall time, or < 0 if it did not end. */
static double run_dispatching(struct qsm_ctx *a, struct qsm_ctx *b, char *const argv[], int limit_ms,
			      int *status)
{
	double t0 = now_s();
	pid_t pid = spawn(argv);

	if (pid < 0)
		return -1;
	while ((now_s() - t0) * 1000 < limit_ms) {
		pid_t w = waitpid(pid, status, WNOHANG);

		if (w == pid)
			return now_s() - t0;
		pump(a, b);
	}
	{
		char path[64], line[256];
		FILE *st;

		snprintf(path, sizeof(path), "/proc/%d/stack", (int)pid);
		st = fopen(path, "r");
		printf("   '%s %s ...' still running after %d ms; its kernel stack:\n", argv[0], argv[1],
		       limit_ms);
		while (st && fgets(line, sizeof(line), st))
			printf("     %s", line);
		if (st)
			fclose(st);
	}
	return -1;
}

static const char *env_or(const char *name, const char *def)
{
	const char *v = getenv(name);

	return v && *v ? v : def;
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100;
	const char *dev = env_or("QSM_VM_DEV", "rxe0"), *netdev = env_or("QSM_VM_NETDEV", "veth0");
	const char *ip = env_or("QSM_VM_ADDR", "192.0.2.1");
	struct sockaddr_in addr = { .sin_family = AF_INET,
				    .sin_port = htons((uint16_t)atoi(env_or("QSM_REMOVAL_PORT", "7471"))) };
	struct qsm_fabric *fs, *fc;
	struct qsm_ctx *server, *client;
	struct qsm_listener *l;
	struct qsm_conn **q;
	struct qsm_counters cc, sc;
	char *del_cmd[] = { "rdma", "link", "delete", (char *)dev, NULL };
	char *add_cmd[] = { "rdma", "link", "add", (char *)dev, "type", "rxe", "netdev", (char *)netdev, NULL };
	double t0, t_connect, t_delete = -1, t_gap = -1, t_add, t_reconnect = -1;
	unsigned removed = 0, live;
	int r, st = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (!n || n > 10000 || inet_pton(AF_INET, ip, &addr.sin_addr) != 1) {
		fprintf(stderr, "usage: removal [N (1..10000) [TRACE_FILE|-]]\n");
		return 2;
	}
	if (argc > 2) {
		trace_out = strcmp(argv[2], "-") ? fopen(argv[2], "w") : stdout;
		if (!trace_out) {
			perror(argv[2]);
			return 2;
		}
	}
	q = calloc(n, sizeof(*q));
	if (!q)
		return 2;

	if ((r = qsm_rdmacm_fabric_new(&fs)) < 0 || (r = qsm_rdmacm_fabric_new(&fc)) < 0) {
		printf("FAIL: qsm_rdmacm_fabric_new: %s\n", strerror(-r));
		return 1;
	}
	if ((r = qsm_ctx_new(&server, &(struct qsm_ctx_opts){ .fabric = fs })) < 0 ||
	    (r = qsm_ctx_new(&client, &(struct qsm_ctx_opts){ .fabric = fc })) < 0) {
		printf("FAIL: qsm_ctx_new: %s\n", strerror(-r));
		return 1;
	}
	if (trace_out) {
		qsm_ctx_set_trace(server, print_trace, "server");
		qsm_ctx_set_trace(client, print_trace, "client");
	}
	r = qsm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
			     .cls = &server_class, .backlog = 1024,
			     .relisten = { .initial_delay_ms = 500, .max_delay_ms = 1000 } }, &l);
	if (r < 0) {
		printf("FAIL: qsm_listener_new %s:%u: %s\n", ip, ntohs(addr.sin_port), strerror(-r));
		return 1;
	}

	/* ---- connect ---- */
	printf("== %u queues connect to %s:%u\n", n, ip, ntohs(addr.sin_port));
	for (unsigned i = 0; i < n; i++) {
		r = qsm_conn_new(client, &(struct qsm_conn_opts){ .cls = &client_class,
				 .dst = (struct sockaddr *)&addr,
				 .policy = { .initial_delay_ms = 1000, .max_delay_ms = 2000, .jitter_pct = 20 } },
				 &q[i]);
		if (r == 0)
			r = qsm_conn_connect(q[i]);
		if (r < 0) {
			printf("FAIL: queue %u: %s\n", i, strerror(-r));
			return 1;
		}
	}
	t0 = now_s();
	while ((live = count_state(q, n, QSM_CM_LIVE)) < n && (now_s() - t0) * 1000 < CONNECT_LIMIT_MS)
		pump(server, client);
	t_connect = now_s() - t0;
	qsm_ctx_counters(server, &sc);
	check(live == n, "%u/%u client queues LIVE after %.3f s", live, n, t_connect);
	check(sc.queues_live == n, "server holds %llu passive queues (expected %u)",
	      (unsigned long long)sc.queues_live, n);
	check(qsm_listener_state(l) == QSM_LISTENER_LISTENING, "listener LISTENING");
	if (failures)
		goto out;

	/* ---- remove the device with every queue live ---- */
	printf("== rdma link delete %s (limit %d ms), dispatching meanwhile\n", dev, DELETE_LIMIT_MS);
	t_delete = run_dispatching(server, client, del_cmd, DELETE_LIMIT_MS, &st);
	check(t_delete >= 0, "rdma link delete %s completed: %.3f s", dev, t_delete);
	if (t_delete < 0)
		goto out;
	check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rdma link delete exit status %d",
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1);

	/* Every client queue heard DEVICE_REMOVAL and waits in the gap; retries into a
	 * deviceless network keep them cycling, so sample until all sit there at once. */
	t0 = now_s();
	while ((now_s() - t0) * 1000 < GAP_LIMIT_MS) {
		pump(server, client);
		if (count_state(q, n, QSM_CM_RECONNECT_WAIT) == n) {
			t_gap = now_s() - t0;
			break;
		}
	}
	for (unsigned i = 0; i < n; i++)
		removed += ((struct queue *)qsm_conn_priv(q[i]))->removals >= 1;
	check(removed == n, "%u/%u client queues took DEVICE_REMOVAL", removed, n);
	check(t_gap >= 0, "%u/%u client queues in RECONNECT_WAIT (%u seen at the end)", t_gap >= 0 ? n : 0,
	      n, count_state(q, n, QSM_CM_RECONNECT_WAIT));
	qsm_ctx_counters(server, &sc);
	qsm_ctx_counters(client, &cc);
	check(sc.queues_live == 0, "server passive queues closed (%llu left)", (unsigned long long)sc.queues_live);
	check(cc.devices_live == 0 && sc.devices_live == 0, "device registries empty (client %llu, server %llu)",
	      (unsigned long long)cc.devices_live, (unsigned long long)sc.devices_live);
	check(qsm_listener_state(l) == QSM_LISTENER_RELISTEN_WAIT, "listener in RELISTEN_WAIT (state %d)",
	      qsm_listener_state(l));
	check(kill(getpid(), 0) == 0, "process alive (pid %d)", (int)getpid());

	/* ---- add it back ---- */
	printf("== rdma link add %s type rxe netdev %s; waiting for %u queues (limit %d ms)\n", dev, netdev,
	       n, RECONNECT_LIMIT_MS);
	t0 = now_s();
	t_add = run_dispatching(server, client, add_cmd, DELETE_LIMIT_MS, &st);
	check(t_add >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "rdma link add: %.3f s, exit %d", t_add,
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	while ((live = count_state(q, n, QSM_CM_LIVE)) < n && (now_s() - t0) * 1000 < RECONNECT_LIMIT_MS)
		pump(server, client);
	if (live == n)
		t_reconnect = now_s() - t0;
	check(live == n, "%u/%u client queues LIVE again, %.3f s after rdma link add started", live, n,
	      t_reconnect);
	check(qsm_listener_state(l) == QSM_LISTENER_LISTENING, "listener LISTENING again");

out:
	qsm_ctx_counters(server, &sc);
	qsm_ctx_counters(client, &cc);
	printf("== counters: client reconnects %llu, device_removals %llu, unexpected %llu, action_errors %llu;"
	       " server device_removals %llu, unexpected %llu, queues %llu\n",
	       (unsigned long long)cc.reconnects, (unsigned long long)cc.device_removals,
	       (unsigned long long)cc.unexpected, (unsigned long long)cc.action_errors,
	       (unsigned long long)sc.device_removals, (unsigned long long)sc.unexpected,
	       (unsigned long long)sc.queues_live);
	if (failures)
		for (unsigned i = 0; i < n; i++)
			if (qsm_conn_state(q[i]) != QSM_CM_LIVE)
				printf("   queue %u: %s, %u removals, %u attempts\n", i, qsm_conn_state_name(q[i]),
				       ((struct queue *)qsm_conn_priv(q[i]))->removals, qsm_conn_attempts(q[i]));
	qsm_ctx_free(client);
	qsm_ctx_free(server);
	if (trace_out && trace_out != stdout)
		fclose(trace_out);
	free(q);
	printf("== summary: N=%u connect %.3f s, delete %.3f s, all in RECONNECT_WAIT %.3f s after, "
	       "reconnect %.3f s after re-add: %s\n", n, t_connect, t_delete, t_gap, t_reconnect,
	       failures ? "FAILED" : "PASS");
	return failures ? 1 : 0;
}
