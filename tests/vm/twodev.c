/* rdma-qsm VM test: two-device failover on the real kernel RDMA stack (rdmacm fabric).
 * Group A's queues connect to device 1's address, group B's to device 2's; `rdma link delete`
 * of device 1 sends group A's queues into RECONNECT_WAIT, and their class's device_removed
 * handler points them at device 2's address (qsm_conn_set_dst(3)): they are LIVE again through
 * device 2 while device 1 is still gone.  Group B's queues notice nothing: no edge at all for
 * them, on the client's side or the server's, from the command's start until group A is back,
 * and their data exchange goes on meanwhile.  Then device 1 comes back (`rdma link add`): no
 * queue takes an edge, a few new queues connect through it, every queue exchanges again, and
 * all close.  Every WR a client queue posted completes exactly once (`completions lost 0`),
 * no event went without an edge (`unexpected 0`), and it prints the failover time.
 *
 * Every LIVE queue exchanges messages one at a time (send, echoed by the server, received),
 * the next one TICK_MS after the last came back, so data flows through the removal.
 *
 *   twodev [N [TRACE_FILE]]      N queues per group (default 50); trace to TRACE_FILE ("-" =
 *                                stdout).  Env: QSM_VM_DEV (rxe0), QSM_VM_NETDEV (veth0),
 *                                QSM_VM_ADDR (192.0.2.1): device 1; QSM_TWODEV_DEV2 (rxe1),
 *                                QSM_TWODEV_ADDR2 (198.51.100.1): device 2; QSM_TWODEV_PORT
 *                                (7481); QSM_TWODEV_LISTEN: "each" (a listener per address,
 *                                default) or "wildcard" (one on 0.0.0.0, or :: when
 *                                QSM_VM_ADDR is IPv6).
 * Exit 0 only if every check passed.  Needs root (rdma link) and both devices up.
 */
#include <arpa/inet.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <qsm/qsm.h>
#include <qsm/rdmacm.h>

#include "common.h"

#define CONNECT_LIMIT_MS 120000
#define DELETE_LIMIT_MS 30000
#define FAILOVER_LIMIT_MS 60000
#define SETTLE_MS 2000
#define EXCHANGE_LIMIT_MS 30000
#define CLOSE_LIMIT_MS 60000
#define TICK_MS 20
#define PROBES 4
#define MSG_LEN VM_MSG_LEN

enum { GROUP_A, GROUP_B };
enum { WR_RECV = 1, WR_SEND };

/* Per client queue, outside the queue (qsm_conn_user) so that it outlives it. */
struct queue {
	unsigned index, group;
	struct qsm_conn *q;         /* NULL once released */
	unsigned removals, lives, exchanged, errors;
	unsigned posted, completed; /* WRs accepted by the library, completions received */
	unsigned edges;             /* edges taken while `watching` (on_event and unexpected) */
	bool inflight;              /* a message out, its echo not back */
	bool released;
	double t_removed, t_live, t_sent;
	char dev[2][IBV_SYSFS_NAME_MAX];   /* the device of its first two lives */
	struct qsm_mr *mr;
	char rbuf[MSG_LEN], sbuf[MSG_LEN];
};

static struct sockaddr_storage addr_a, addr_b;
static bool watching;               /* the windows in which no watched queue may take an edge */
static bool sending = true;         /* step() sends every LIVE queue's next message */
static unsigned server_edges[2];
static unsigned server_live[2];     /* passive queues in LIVE, by group */

/* ---- the client ---- */

/* A client data path error: counted, and the first few said with what went wrong. */
static void client_error(struct queue *u, const char *what, long v)
{
	static unsigned said;

	u->errors++;
	if (said++ < 10)
		printf("   client error: queue %c%u: %s (%ld)\n", 'A' + u->group, u->index, what, v);
}

static int on_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);

	(void)ev;
	u->removals++;
	u->t_removed = vm_now();
	/* the other path: the retry after the policy's first delay resolves through device 2 */
	if (qsm_conn_set_dst(q, (struct sockaddr *)&addr_b, NULL) < 0)
		client_error(u, "qsm_conn_set_dst", -1);
	return 0;
}

static int send_message(struct queue *u)
{
	struct qsm_sge rs = vm_sge(u->rbuf, sizeof(u->rbuf), u->mr), ss;
	int r;

	memset(u->rbuf, 0, sizeof(u->rbuf));
	snprintf(u->sbuf, sizeof(u->sbuf), "queue %c%u message %u", 'A' + u->group, u->index, u->exchanged);
	ss = vm_sge(u->sbuf, (uint32_t)strlen(u->sbuf) + 1, u->mr);
	if ((r = qsm_conn_post_recv(u->q, WR_RECV, &rs, 1)) < 0)
		return r;
	u->posted++;
	if ((r = qsm_conn_post_send(u->q, WR_SEND, &ss, 1, QSM_POST_SIGNALED)) < 0)
		return 1000 * r;   /* the send's errno, told apart from the receive's */
	u->posted++;
	u->inflight = true;
	u->t_sent = vm_now();
	return 0;
}

static int on_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);
	struct qsm_verbs v;
	int r;

	(void)ev;
	if (u->lives < 2 && qsm_conn_verbs(q, &v) == 0 && v.cm_id && v.cm_id->verbs)
		snprintf(u->dev[u->lives], sizeof(u->dev[0]), "%s", ibv_get_device_name(v.cm_id->verbs->device));
	u->lives++;
	u->t_live = vm_now();
	u->inflight = false;   /* a message of the last connection came back flushed, or not at all */
	if (vm_reg_buffer(q, &u->mr, u, sizeof(*u)) < 0)
		client_error(u, "LIVE: register", -1);
	else if ((r = send_message(u)) < 0)
		client_error(u, "LIVE: post (receive -errno, send -errno x 1000)", r);
	return 0;
}

static int count_edge(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct queue *u = qsm_conn_user(q);

	(void)ev;
	u->edges += watching;
	return 0;
}

static int client_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct queue *u = qsm_conn_user(q);
	char want[MSG_LEN + 8];

	u->completed++;
	if (wc->status == QSM_WC_WR_FLUSH_ERR)
		return 0;
	if (wc->status != QSM_WC_SUCCESS) {
		client_error(u, "completion status", wc->status);
		return 0;
	}
	if (wc->wr_id == WR_RECV) {
		snprintf(want, sizeof(want), "echo: %s", u->sbuf);
		if (wc->opcode != QSM_WR_RECV)
			client_error(u, "receive's opcode", wc->opcode);
		else if (strcmp(u->rbuf, want))
			client_error(u, u->rbuf[0] ? "received another message than the echo" : "received nothing",
				     (long)wc->byte_len);
		else
			u->exchanged++;
		u->inflight = false;
	} else if (wc->wr_id != WR_SEND || wc->opcode != QSM_WR_SEND) {
		client_error(u, "send's wr_id or opcode", (long)wc->wr_id);
	}
	return 0;
}

static void client_release(struct qsm_conn *q)
{
	struct queue *u = qsm_conn_user(q);

	u->released = true;
	u->q = NULL;
	u->mr = NULL;   /* freed with the queue */
}

/* Both groups' classes: every edge counted (on_event of every state, filled in by main), and
 * group A's fail over; the names tell them apart in the trace. */
static struct qsm_class class_a = {
	.name = "twodev_a",
	.super = &qsm_base_class,
	.unexpected = count_edge,
	.device_removed = on_device_removed,
	.completion = client_completion,
	.release = client_release,
};
static struct qsm_class class_b = {
	.name = "twodev_b",
	.super = &qsm_base_class,
	.unexpected = count_edge,
	.completion = client_completion,
	.release = client_release,
};

/* ---- the server: echoes every message; the client's private data names its group ---- */

struct passive {
	struct vm_echo echo;        /* first: vm_echo_qp_ready() and vm_echo_completion() take it */
	int group;
};

static int server_requested(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct passive *p = qsm_conn_priv(q);

	/* IB and RoCE's CM hand over the whole private data area (56 bytes, zero-filled) */
	p->group = ev->private_data_len >= 1 && *(const char *)ev->private_data == 'B' ? GROUP_B : GROUP_A;
	return qsm_conn_accept(q, NULL, 0) < 0 ? -1 : 0;
}

static int server_edge(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct passive *p = qsm_conn_priv(q);

	(void)ev;
	server_edges[p->group] += watching;
	return 0;
}

static int server_live_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct passive *p = qsm_conn_priv(q);

	(void)ev;
	server_live[p->group]++;
	return 0;
}

static int server_live_exit(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct passive *p = qsm_conn_priv(q);

	(void)ev;
	server_live[p->group]--;
	return 0;
}

static struct qsm_class server_class = {
	.name = "twodev_server",
	.super = &qsm_base_class,
	.priv_size = sizeof(struct passive),
	.qp_ready = vm_echo_server_qp_ready,
	.completion = vm_echo_server_completion,
	.unexpected = server_edge,
};

static void classes_init(void)
{
	for (int s = 0; s < QSM_CM_STATE_COUNT; s++)
		class_a.active[s].on_event = class_b.active[s].on_event = count_edge;
	class_a.active[QSM_CM_LIVE].enter = class_b.active[QSM_CM_LIVE].enter = on_live;
	for (int s = 0; s < QSM_ACCEPT_STATE_COUNT; s++)
		server_class.passive[s].on_event = server_edge;
	server_class.passive[QSM_ACCEPT_REQUESTED].enter = server_requested;
	server_class.passive[QSM_ACCEPT_LIVE].enter = server_live_enter;
	server_class.passive[QSM_ACCEPT_LIVE].exit = server_live_exit;
}

/* ---- the host loop: both ctxs, and the next message of every LIVE queue ---- */

struct world {
	struct qsm_ctx *server, *client;
	struct queue *u;
	unsigned n;                 /* queues in u: 2N, then the probes */
};

static void step(struct world *w)
{
	double now = vm_now();

	vm_pump(w->server, w->client);
	for (unsigned i = 0; i < w->n; i++) {
		struct queue *u = &w->u[i];

		int r;

		if (sending && u->q && !u->inflight && qsm_conn_state(u->q) == QSM_CM_LIVE &&
		    (now - u->t_sent) * 1000 >= TICK_MS && (r = send_message(u)) < 0)
			client_error(u, "post (receive -errno, send -errno x 1000)", r);
	}
}

static void step_for(struct world *w, int ms)
{
	double t0 = vm_now();

	while ((vm_now() - t0) * 1000 < ms)
		step(w);
}

static unsigned count_live(const struct world *w, unsigned from, unsigned to)
{
	unsigned c = 0;

	for (unsigned i = from; i < to; i++)
		c += w->u[i].q && qsm_conn_state(w->u[i].q) == QSM_CM_LIVE;
	return c;
}

/* Until u[from..to) are all LIVE, or the limit; the time it took, -1 at the limit. */
static double wait_live(struct world *w, unsigned from, unsigned to, int limit_ms)
{
	double t0 = vm_now();

	while ((vm_now() - t0) * 1000 < limit_ms) {
		if (count_live(w, from, to) == to - from)
			return vm_now() - t0;
		step(w);
	}
	return -1;
}

/* Until every queue of u[from..to) exchanged `more` messages beyond `base`, or the limit. */
static bool wait_exchanged(struct world *w, unsigned from, unsigned to, const unsigned *base, unsigned more)
{
	double t0 = vm_now();

	while ((vm_now() - t0) * 1000 < EXCHANGE_LIMIT_MS) {
		unsigned c = 0;

		for (unsigned i = from; i < to; i++)
			c += w->u[i].exchanged >= base[i] + more;
		if (c == to - from)
			return true;
		step(w);
	}
	return false;
}

static int start(struct world *w, unsigned i, unsigned group, const struct sockaddr_storage *dst)
{
	struct queue *u = &w->u[i];

	u->index = i;
	u->group = group;
	if (vm_conn_start(w->client, &(struct qsm_conn_opts){ .cls = group == GROUP_A ? &class_a : &class_b,
			  .dst = (const struct sockaddr *)dst,
			  .policy = { .initial_delay_ms = 50, .max_delay_ms = 1000, .jitter_pct = 20 },
			  .private_data = group == GROUP_A ? "A" : "B", .private_data_len = 1,
			  .user = u }, i, &u->q) < 0)
		return -1;
	return 0;
}

static unsigned sum(const struct world *w, unsigned from, unsigned to, size_t off)
{
	unsigned c = 0;

	for (unsigned i = from; i < to; i++)
		c += *(const unsigned *)((const char *)&w->u[i] + off);
	return c;
}
#define SUM(w, from, to, field) sum(w, from, to, offsetof(struct queue, field))

/* How many queues have a flag set: released, inflight. */
static unsigned count_flag(const struct world *w, size_t off)
{
	unsigned c = 0;

	for (unsigned i = 0; i < w->n; i++)
		c += *(const bool *)((const char *)&w->u[i] + off);
	return c;
}
#define count_released(w) count_flag(w, offsetof(struct queue, released))

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 50;
	const char *dev1 = vm_env("QSM_VM_DEV", "rxe0"), *netdev1 = vm_env("QSM_VM_NETDEV", "veth0");
	const char *dev2 = vm_env("QSM_TWODEV_DEV2", "rxe1");
	const char *ip_a = vm_env("QSM_VM_ADDR", "192.0.2.1"), *ip_b = vm_env("QSM_TWODEV_ADDR2", "198.51.100.1");
	bool wildcard = strcmp(vm_env("QSM_TWODEV_LISTEN", "each"), "wildcard") == 0;
	/* the wildcard of the scenario's family: "::" takes IPv4 too, as rdma_cm's AF_INET6 listen does */
	const char *any_ip = strchr(ip_a, ':') ? "::" : "0.0.0.0";
	struct sockaddr_storage any;
	struct qsm_listener *la = NULL, *lb = NULL;
	struct qsm_counters cc, sc;
	struct world w = { 0 };
	unsigned *base, lost = 0, unmatched = 0, on_dev, client_edges_b, client_edges_all;
	double t0, t_connect = -1, t_delete = -1, t_failover = -1, t_server = -1, t_add, *per_queue;
	int st = 0;

	vm_init_stdio();
	if (!n || n > 1000 || !vm_parse_addr(&addr_a, ip_a, "QSM_TWODEV_PORT", "7481") ||
	    !vm_parse_addr(&addr_b, ip_b, "QSM_TWODEV_PORT", "7481") ||
	    !vm_parse_addr(&any, any_ip, "QSM_TWODEV_PORT", "7481")) {
		fprintf(stderr, "usage: twodev [N (1..1000) per group [TRACE_FILE|-]]\n");
		return 2;
	}
	if (vm_trace_open(argc, argv) < 0)
		return 2;
	classes_init();
	w.u = calloc(2 * n + PROBES, sizeof(*w.u));
	base = calloc(2 * n + PROBES, sizeof(*base));
	per_queue = calloc(n, sizeof(*per_queue));
	if (!w.u || !base || !per_queue || vm_ctxs_new(&w.server, &w.client) < 0)
		return 1;

	/* ---- listen: one listener per address, or one on the wildcard address ---- */
	if (wildcard) {
		if (vm_listener_new(w.server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&any,
				    .cls = &server_class, .backlog = 1024 }, any_ip, &la) < 0)
			return 1;
		printf("== one listener on %s port %u\n", any_ip, vm_addr_port(&any));
	} else {
		struct qsm_reconnect_policy relisten = { .initial_delay_ms = 200, .max_delay_ms = 500 };

		if (vm_listener_new(w.server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr_a,
				    .cls = &server_class, .backlog = 1024, .relisten = relisten }, ip_a, &la) < 0 ||
		    vm_listener_new(w.server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr_b,
				    .cls = &server_class, .backlog = 1024, .relisten = relisten }, ip_b, &lb) < 0)
			return 1;
		printf("== a listener on %s:%u (%s) and one on %s:%u (%s)\n", ip_a, vm_addr_port(&addr_a), dev1,
		       ip_b, vm_addr_port(&addr_b), dev2);
	}

	/* ---- connect: group A (u[0..n)) to device 1, group B (u[n..2n)) to device 2 ---- */
	printf("== %u queues connect to %s (group A), %u to %s (group B)\n", n, ip_a, n, ip_b);
	for (unsigned i = 0; i < 2 * n; i++)
		if (start(&w, i, i < n ? GROUP_A : GROUP_B, i < n ? &addr_a : &addr_b) < 0)
			return 1;
	w.n = 2 * n;
	t_connect = wait_live(&w, 0, 2 * n, CONNECT_LIMIT_MS);
	vm_check(t_connect >= 0, "%u/%u client queues LIVE after %.3f s", count_live(&w, 0, 2 * n), 2 * n, t_connect);
	on_dev = 0;
	for (unsigned i = 0; i < 2 * n; i++)
		on_dev += !strcmp(w.u[i].dev[0], i < n ? dev1 : dev2);
	vm_check(on_dev == 2 * n, "%u/%u queues on their group's device (A on %s, B on %s)", on_dev, 2 * n, dev1, dev2);
	vm_check(wait_exchanged(&w, 0, 2 * n, base, 2) && !SUM(&w, 0, 2 * n, errors) && !vm_echo_errors,
	         "every queue exchanged 2 messages; errors: client %u, server %u", SUM(&w, 0, 2 * n, errors),
	         vm_echo_errors);
	if (vm_failures)
		goto out;

	/* ---- device 1 goes: A fails over to device 2, B takes no edge ---- */
	for (unsigned i = 0; i < 2 * n; i++)
		base[i] = w.u[i].exchanged;
	watching = true;
	printf("== rdma link delete %s with every queue LIVE and exchanging (limit %d ms)\n", dev1, DELETE_LIMIT_MS);
	t0 = vm_now();
	{
		char *del[] = { "rdma", "link", "delete", (char *)dev1, NULL };

		/* step() rather than vm_rdma_link_delete(): group B's messages go on meanwhile */
		pid_t pid = fork();

		if (pid == 0) {
			execvp(del[0], del);
			_exit(127);
		}
		while (pid > 0 && (vm_now() - t0) * 1000 < DELETE_LIMIT_MS) {
			if (waitpid(pid, &st, WNOHANG) == pid) {
				t_delete = vm_now() - t0;
				break;
			}
			step(&w);
		}
		if (t_delete < 0 && pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
		}
	}
	vm_check(t_delete >= 0 && vm_exit_code(st) == 0, "rdma link delete %s: %.3f s, exit %d", dev1, t_delete,
	         vm_exit_code(st));
	while ((vm_now() - t0) * 1000 < FAILOVER_LIMIT_MS) {
		unsigned back = 0;

		for (unsigned i = 0; i < n; i++)
			back += w.u[i].lives == 2 && w.u[i].q && qsm_conn_state(w.u[i].q) == QSM_CM_LIVE;
		if (back == n) {
			t_failover = vm_now() - t0;
			break;
		}
		step(&w);
	}
	vm_check(t_failover >= 0, "%u/%u group A queues took DEVICE_REMOVAL and are LIVE again: failover %.3f s "
	         "after rdma link delete started", SUM(&w, 0, n, removals), n, t_failover);
	/* the server's side of those connections: LIVE once the kernel's CM says ESTABLISHED there
	 * (its RTU, or the first message: COMM_EST), which may come after the client's */
	while (server_live[GROUP_A] < n && (vm_now() - t0) * 1000 < FAILOVER_LIMIT_MS)
		step(&w);
	t_server = vm_now() - t0;
	vm_check(server_live[GROUP_A] == n && server_live[GROUP_B] == n, "the server's side LIVE too: group A "
	         "%u/%u, %.3f s after rdma link delete started; group B %u/%u", server_live[GROUP_A], n, t_server,
	         server_live[GROUP_B], n);
	on_dev = 0;
	for (unsigned i = 0; i < n; i++) {
		on_dev += !strcmp(w.u[i].dev[1], dev2);
		per_queue[i] = w.u[i].t_live - w.u[i].t_removed;
	}
	vm_check(on_dev == n, "%u/%u group A queues reconnected through %s", on_dev, n, dev2);
	qsort(per_queue, n, sizeof(*per_queue), cmp_double);
	printf("   per queue, DEVICE_REMOVAL to LIVE again: min %.3f s, median %.3f s, max %.3f s\n", per_queue[0],
	       per_queue[n / 2], per_queue[n - 1]);
	/* group A exchanges on device 2: the data path follows the failover */
	vm_check(wait_exchanged(&w, 0, n, base, 1), "every group A queue exchanged again through %s (server "
	         "errors so far %u)", dev2, vm_echo_errors);
	client_edges_b = SUM(&w, n, 2 * n, edges);
	vm_check(!client_edges_b && !server_edges[GROUP_B], "group B took no edge during the removal: client %u, "
	         "server %u (group A's server side %u, its queues closed with %s)", client_edges_b,
	         server_edges[GROUP_B], server_edges[GROUP_A], dev1);
	{
		unsigned lives_b = 0, flowing = 0, during = 0;

		for (unsigned i = n; i < 2 * n; i++) {
			lives_b += w.u[i].lives == 1 && !w.u[i].removals;
			flowing += w.u[i].exchanged >= base[i] + 2;
			during += w.u[i].exchanged - base[i];
		}
		vm_check(lives_b == n && count_live(&w, n, 2 * n) == n, "%u/%u group B queues LIVE all along, "
		         "one connection each", lives_b, n);
		vm_check(flowing == n, "%u/%u group B queues exchanged during the removal (%u messages in all)",
		         flowing, n, during);
	}
	qsm_ctx_counters(w.server, &sc, sizeof(sc));
	vm_check(sc.queues_live == 2 * n, "server holds %llu passive queues (expected %u)",
	         (unsigned long long)sc.queues_live, 2 * n);
	if (!wildcard)
		vm_check(qsm_listener_state(lb) == QSM_LISTENER_LISTENING, "the listener on %s LISTENING all along "
		         "(the one on %s: %s)", ip_b, ip_a, qsm_listener_state(la) == QSM_LISTENER_RELISTEN_WAIT ?
		         "RELISTEN_WAIT" : "not RELISTEN_WAIT");
	else
		vm_check(qsm_listener_state(la) == QSM_LISTENER_LISTENING, "the wildcard listener LISTENING all along");
	if (vm_failures)
		goto out;

	/* ---- device 1 comes back: nobody moves; new queues connect through it ---- */
	for (unsigned i = 0; i < 2 * n; i++)
		w.u[i].edges = 0;
	server_edges[GROUP_A] = server_edges[GROUP_B] = 0;
	printf("== rdma link add %s type %s netdev %s\n", dev1, vm_env("QSM_VM_TRANSPORT", "rxe"), netdev1);
	t_add = vm_rdma_link_add(w.server, w.client, dev1, netdev1, DELETE_LIMIT_MS, &st);
	vm_check(t_add >= 0 && vm_exit_code(st) == 0, "rdma link add: %.3f s, exit %d", t_add, vm_exit_code(st));
	step_for(&w, SETTLE_MS);
	client_edges_all = SUM(&w, 0, 2 * n, edges);
	vm_check(!client_edges_all && !server_edges[GROUP_A] && !server_edges[GROUP_B] &&
	         count_live(&w, 0, 2 * n) == 2 * n, "no queue took an edge in the %d ms after the re-add "
	         "(client %u, server %u); %u/%u LIVE", SETTLE_MS, client_edges_all,
	         server_edges[GROUP_A] + server_edges[GROUP_B], count_live(&w, 0, 2 * n), 2 * n);
	watching = false;
	if (!wildcard) {
		t0 = vm_now();
		while (qsm_listener_state(la) != QSM_LISTENER_LISTENING && (vm_now() - t0) * 1000 < 10000)
			step(&w);
		vm_check(qsm_listener_state(la) == QSM_LISTENER_LISTENING, "the listener on %s LISTENING again", ip_a);
	}
	for (unsigned i = 2 * n; i < 2 * n + PROBES; i++)
		if (start(&w, i, GROUP_A, &addr_a) < 0)
			goto out;
	w.n = 2 * n + PROBES;
	t0 = wait_live(&w, 2 * n, 2 * n + PROBES, CONNECT_LIMIT_MS);
	on_dev = 0;
	for (unsigned i = 2 * n; i < 2 * n + PROBES; i++)
		on_dev += !strcmp(w.u[i].dev[0], dev1);
	vm_check(t0 >= 0 && on_dev == PROBES, "%u new queues to %s LIVE through %s again (%u), %.3f s", PROBES,
	         ip_a, dev1, on_dev, t0);
	for (unsigned i = 0; i < w.n; i++)
		base[i] = w.u[i].exchanged;
	vm_check(wait_exchanged(&w, 0, w.n, base, 1), "every queue, old and new, exchanged after the re-add");
	vm_check(count_live(&w, 0, w.n) == w.n, "%u/%u queues LIVE at the end (2 x %u and %u new)",
	         count_live(&w, 0, w.n), w.n, n, PROBES);

	/* ---- close, once the last messages came back: an echo racing the DREQ would fail ---- */
	sending = false;
	t0 = vm_now();
	while (count_flag(&w, offsetof(struct queue, inflight)) && (vm_now() - t0) * 1000 < EXCHANGE_LIMIT_MS)
		vm_pump(w.server, w.client);
	printf("== %u queues disconnect (server errors so far %u)\n", w.n, vm_echo_errors);
	for (unsigned i = 0; i < w.n; i++)
		if (w.u[i].q && qsm_conn_disconnect(w.u[i].q) < 0)
			client_error(&w.u[i], "qsm_conn_disconnect", -1);
	t0 = vm_now();
	for (;;) {
		qsm_ctx_counters(w.server, &sc, sizeof(sc));
		if ((count_released(&w) == w.n && !sc.queues_live) || (vm_now() - t0) * 1000 >= CLOSE_LIMIT_MS)
			break;
		vm_pump(w.server, w.client);
	}
	for (unsigned i = 0; i < w.n; i++) {
		lost += w.u[i].posted - w.u[i].completed;
		unmatched += w.u[i].posted != w.u[i].completed;
	}
	vm_check(count_released(&w) == w.n && !sc.queues_live, "%u/%u client queues closed, %llu passive queues "
	         "left (%.3f s)", count_released(&w), w.n, (unsigned long long)sc.queues_live, vm_now() - t0);
	vm_check(!lost && !unmatched, "completions lost %u: every WR completed exactly once (client posted %u, "
	         "completed %u; %u queues off)", lost, SUM(&w, 0, w.n, posted), SUM(&w, 0, w.n, completed), unmatched);
	vm_check(!SUM(&w, 0, w.n, errors) && !vm_echo_errors, "no data path errors (client %u, server %u; the server "
	         "echoed %u messages)", SUM(&w, 0, w.n, errors), vm_echo_errors, vm_echo_sent);

out:
	qsm_ctx_counters(w.server, &sc, sizeof(sc));
	qsm_ctx_counters(w.client, &cc, sizeof(cc));
	vm_check(!cc.unexpected && !sc.unexpected && !cc.exhausted && !sc.exhausted, "unexpected %llu (client %llu, "
	         "server %llu); exhausted: client %llu, server %llu", (unsigned long long)(cc.unexpected + sc.unexpected),
	         (unsigned long long)cc.unexpected, (unsigned long long)sc.unexpected,
	         (unsigned long long)cc.exhausted, (unsigned long long)sc.exhausted);
	printf("== counters: client reconnects %llu, device_removals %llu; server device_removals %llu\n",
	       (unsigned long long)cc.reconnects, (unsigned long long)cc.device_removals,
	       (unsigned long long)sc.device_removals);
	if (vm_failures)
		for (unsigned i = 0; i < w.n; i++)
			if (w.u[i].q && qsm_conn_state(w.u[i].q) != QSM_CM_LIVE)
				printf("   queue %c%u: %s, %u removals, %u attempts, %u exchanged, devices %s %s\n",
				       'A' + w.u[i].group, i, qsm_conn_state_name(w.u[i].q), w.u[i].removals,
				       qsm_conn_attempts(w.u[i].q), w.u[i].exchanged, w.u[i].dev[0], w.u[i].dev[1]);
	vm_ctxs_free(w.server, w.client);
	printf("== summary: N=%u per group, listen %s, connect %.3f s, delete %.3f s, failover %.3f s (the "
	       "server's side %.3f s): %s\n", n, wildcard ? "wildcard" : "each", t_connect, t_delete, t_failover,
	       t_server, vm_failures ? "FAILED" : "PASS");
	free(w.u);
	free(base);
	free(per_queue);
	return vm_failures ? 1 : 0;
}
