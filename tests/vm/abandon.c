/* rdma-qsm VM test: queues let go while their connects are outstanding, to a peer that never
 * answers, on the real kernel RDMA stack (rdmacm fabric).
 * A plain TCP socket listens on ADDR:PORT, and no RDMA listener: on soft-iWARP each connect's
 * TCP handshake completes in the kernel and its MPA request is never answered, so the connect
 * stays outstanding until the provider gives up, and the kernel's iw_cm makes a destroy of the
 * id wait for that (before the fix: the whole ctx stalled in one system call per queue, ~30 s
 * each).  On soft-RoCE the REQ finds no listener: REJECTED comes at once, and the queues wait in
 * RECONNECT_WAIT (a long backoff) instead.
 * N queues connect; once each is in CONNECTING (siw) or past it (rxe), all are destroyed: the
 * destroys and a dispatch pass after them must take less than DESTROY_LIMIT_MS in all.  On siw
 * the fabric has parked the ids: each connect's outcome comes later as an event nobody owns
 * (counters.orphans, N of them, within OUTCOME_LIMIT_MS) and the id is destroyed then.  At the
 * end, no cm_id of ours to PORT is left (`rdma res show cm_id`), no event was unexpected, and
 * qsm_ctx_free() is quick.
 *
 *   abandon [N [TRACE_FILE]]   N queues (default 10); trace to TRACE_FILE ("-" = stdout,
 *                              default: no trace).  Env: QSM_VM_ADDR (192.0.2.1),
 *                              QSM_ABANDON_PORT (7476), QSM_VM_TRANSPORT (rxe).
 * Prints `abandon destroy_ms X` and, on siw, `abandon outcome_s X` (the destroys to the last
 * outcome).  Exit 0 only if every check passed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <qsm/qsm.h>

#include "common.h"

#define CONNECTING_LIMIT_MS 30000
#define DESTROY_LIMIT_MS 2000      /* N destroys and a dispatch pass; the provider's timeout is ~10-30 s */
#define OUTCOME_LIMIT_MS 90000
#define FREE_LIMIT_MS 2000
#define BACKOFF_MS 600000          /* rxe: REJECTED, then a wait far beyond the test */

static const struct qsm_class client_class = {
	.name = "abandon_client",
	.super = &qsm_base_class,
};

static unsigned count_in(struct qsm_conn **q, unsigned n, int a, int b)
{
	unsigned k = 0;

	for (unsigned i = 0; i < n; i++) {
		int s = qsm_conn_state(q[i]);

		k += s == a || s == b;
	}
	return k;
}

/* cm_ids to the port, as the kernel lists them (any process: this test runs alone) */
static int cm_ids_to(uint16_t port)
{
	char cmd[128], line[512], pat[16];
	int k = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "rdma res show cm_id 2>&1");
	snprintf(pat, sizeof(pat), ":%u ", (unsigned)port);
	if (!(p = popen(cmd, "r")))
		return -1;
	while (fgets(line, sizeof(line), p)) {
		size_t l = strlen(line);

		if (l && line[l - 1] == '\n')
			line[l - 1] = ' ';
		if (strstr(line, "dst-addr") && strstr(strstr(line, "dst-addr"), pat))
			k++;
	}
	return pclose(p) == 0 ? k : -1;
}

static int tcp_listener(const struct sockaddr_storage *addr)
{
	int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	socklen_t len = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)addr, len) < 0 || listen(fd, 128) < 0) {
		perror("tcp listener");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;   /* never accepts: the kernel completes the handshakes, nobody speaks MPA */
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 10;
	const char *ip = vm_env("QSM_VM_ADDR", "192.0.2.1");
	bool siw = !strcmp(vm_env("QSM_VM_TRANSPORT", "rxe"), "siw");
	struct sockaddr_storage addr;
	struct qsm_counters c0, c;
	struct qsm_conn **q;
	struct qsm_ctx *ctx;
	double t0, t_destroy, t_out = -1, t_free;
	int lfd, left;

	vm_init_stdio();
	if (n < 1 || n > 1000 || !vm_parse_addr(&addr, ip, "QSM_ABANDON_PORT", "7476") ||
	    vm_trace_open(argc, argv) < 0) {
		fprintf(stderr, "usage: abandon [N (1..1000) [TRACE_FILE]]; QSM_VM_ADDR an IPv4 or IPv6 address\n");
		return 2;
	}
	if ((lfd = tcp_listener(&addr)) < 0 || vm_ctx_new(&ctx, "client") < 0)
		return 1;
	q = calloc(n, sizeof(*q));
	if (!q)
		return 1;
	for (unsigned i = 0; i < n; i++)
		if (vm_conn_start(ctx, &(struct qsm_conn_opts){ .cls = &client_class,
				  .dst = (struct sockaddr *)&addr,
				  .policy = { .initial_delay_ms = BACKOFF_MS, .max_delay_ms = BACKOFF_MS } },
				  i, &q[i]) < 0)
			return 1;

	/* every connect sent: siw's wait in CONNECTING; rxe's are rejected at once */
	t0 = vm_now();
	while (count_in(q, n, QSM_CM_CONNECTING, siw ? QSM_CM_CONNECTING : QSM_CM_RECONNECT_WAIT) < n &&
	       (vm_now() - t0) * 1000 < CONNECTING_LIMIT_MS)
		vm_pump(ctx, ctx);
	vm_check(count_in(q, n, QSM_CM_CONNECTING, siw ? QSM_CM_CONNECTING : QSM_CM_RECONNECT_WAIT) == n,
		 "%u queues connecting to a TCP port no RDMA listener serves: %u in CONNECTING, %u in "
		 "RECONNECT_WAIT after %.1f s", n, count_in(q, n, QSM_CM_CONNECTING, QSM_CM_CONNECTING),
		 count_in(q, n, QSM_CM_RECONNECT_WAIT, QSM_CM_RECONNECT_WAIT), vm_now() - t0);
	if (siw) {
		/* still outstanding a second later: the peer never answers */
		vm_pump_for(ctx, ctx, 1000);
		vm_check(count_in(q, n, QSM_CM_CONNECTING, QSM_CM_CONNECTING) == n,
			 "siw: all %u still in CONNECTING a second later (the MPA request unanswered)", n);
	}
	qsm_ctx_counters(ctx, &c0, sizeof(c0));

	/* let go of all of them, then one dispatch pass */
	t0 = vm_now();
	for (unsigned i = 0; i < n; i++) {
		int r = qsm_conn_destroy(q[i]);

		vm_check(r == 0, "qsm_conn_destroy(queue %u): %d", i, r);
	}
	qsm_ctx_dispatch(ctx, 0);
	t_destroy = (vm_now() - t0) * 1000;
	printf("abandon destroy_ms %.1f\n", t_destroy);
	vm_check(t_destroy < DESTROY_LIMIT_MS, "%u destroys with their connects outstanding and a dispatch "
		 "pass took %.1f ms (limit %d): the ctx is never held by the kernel's connect", n, t_destroy,
		 DESTROY_LIMIT_MS);

	/* siw: each connect's outcome comes as an event nobody owns, and its id goes */
	t0 = vm_now();
	for (;;) {
		qsm_ctx_counters(ctx, &c, sizeof(c));
		left = cm_ids_to(vm_addr_port(&addr));
		if ((left == 0 && (!siw || c.orphans - c0.orphans >= n)) ||
		    (vm_now() - t0) * 1000 >= OUTCOME_LIMIT_MS)
			break;
		vm_pump_for(ctx, ctx, 200);
	}
	if (siw) {
		t_out = vm_now() - t0;
		printf("abandon outcome_s %.1f\n", t_out);
		vm_check(c.orphans - c0.orphans == n, "siw: %llu of %u connects' outcomes came after their "
			 "queues let go, as events nobody owns (%.1f s)",
			 (unsigned long long)(c.orphans - c0.orphans), n, t_out);
	}
	vm_check(left == 0, "no cm_id to port %u left (rdma res show cm_id: %d)", vm_addr_port(&addr), left);
	vm_check(!c.unexpected, "no unexpected event (%llu)", (unsigned long long)c.unexpected);

	t0 = vm_now();
	qsm_ctx_free(ctx);
	t_free = (vm_now() - t0) * 1000;
	vm_check(t_free < FREE_LIMIT_MS, "qsm_ctx_free took %.1f ms", t_free);
	close(lfd);
	free(q);
	return vm_failures ? 1 : 0;
}
