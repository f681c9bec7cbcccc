/* rdma-qsm VM test: the ULP's calls in every state that can hold them, on the real kernel RDMA
 * stack (rdmacm fabric), so that each of those edges is taken on the real stack, not only on
 * the sim (doc/coverage.md).
 *
 * A plan is a (side, state, call): the client's active queue or the server's passive queue,
 * entering that state, makes that call from its enter handler -- qsm_conn_destroy(),
 * qsm_conn_disconnect(), qsm_conn_connect(), qsm_conn_reject(), or a non-zero return (ABORT).
 * A call made while the queue enters a state is the next event it takes (a downcall's event is
 * queued ahead of whatever the fabric brings), so the edge (state, call) is taken whatever the
 * kernel does meanwhile.  States that the normal connect path does not stop in are reached by a
 * route: the client or the server disconnecting in LIVE (DISCONNECTING, CLOSING, DRAINING,
 * RECONNECT_WAIT), a connect to a port nobody listens on with one attempt allowed (REJECTED,
 * GIVE_UP: FAILED).  The client tells the server its plan in the connect's private data.
 *
 * Besides the calls: a send with a key the device does not know, in a state that stays until
 * its error completion (CONNECTED with no READY, LIVE), takes that state's WC_ERROR edge; and
 * in phase 2 queues held in a state (CONNECTED with no READY, FAILED, CONNECTING against a
 * request the server leaves undecided, the server's REQUESTED and CONNECTED) while rxe is
 * deleted take that state's DEVICE_REMOVAL edge.
 *
 * Some plans make no call: the state is held (no READY, no decision) until the peer disconnects
 * or the state's own timer fires (handshake_ms, request_ms set short), and main destroys a queue
 * never connected, a listener never dispatched, and at the end the listeners waiting to listen
 * again after the removal.
 *
 * Phase 1's plans run at once, one client queue each.  Checks: every plan's edge in the trace of
 * its side, every queue of both sides gone in the end (queues_live 0), no event with no edge
 * on either side (the first runs found one: the RTU after a disconnect in ACCEPTING).  Prints "edges driven T/N" and each edge it did not see.
 *
 * A passive queue whose connect fails in ACCEPTING is shown as it happens, with its status (a
 * client that destroys its id in CONNECTING makes some; the QPs soft-iWARP could not make,
 * tests/vm/siw-mmap-key.patch, made 14 in one batch), and counted at the end.
 *
 *   edges [N [TRACE_FILE]]   N is ignored (every plan runs once); TRACE_FILE as the other VM
 *                            tests.  Env: QSM_VM_ADDR (192.0.2.1), QSM_EDGES_PORT (7475).
 * Exit 0 only if every check passed.  Needs a soft-RoCE device.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <qsm/qsm.h>
#include <qsm/rdmacm.h>

#include "common.h"

/* Every queue of both sides gone.  Most plans settle in seconds; a client that destroys its id
 * in CONNECTING sends a REJ that can overtake its own REQ on loopback, and the passive queue
 * then sits in ACCEPTING until the kernel's CM gives up on its REP (about 66 s here): the
 * library's own connect timer never races the CM (doc/machines.md), so that is the wait. */
#define SETTLE_LIMIT_MS 150000
#define PEER_GRACE_MS 3000        /* a server plan done: its client is destroyed after this */

/* The calls; then what is not a call: a send the device refuses (its error completion: the
 * edge is WC_ERROR), and a queue held in its state while the device is removed (DEVICE_REMOVAL). */
enum call { C_DESTROY, C_ABORT, C_DISCONNECT, C_CONNECT, C_REJECT, C_BAD_SEND, C_HOLD,
	     C_WAIT_DISCONNECTED, C_WAIT_TIMEOUT };
static const int call_event[] = {
	[C_DESTROY] = QSM_EV_DESTROY, [C_ABORT] = QSM_EV_ABORT, [C_DISCONNECT] = QSM_EV_DISCONNECT,
	[C_CONNECT] = QSM_EV_CONNECT, [C_REJECT] = QSM_EV_REJECT, [C_BAD_SEND] = QSM_EV_WC_ERROR,
	[C_HOLD] = QSM_EV_DEVICE_REMOVAL,
	/* no call: the state is held (no READY, no decision) until the peer's DREQ or its timer */
	[C_WAIT_DISCONNECTED] = QSM_EV_DISCONNECTED, [C_WAIT_TIMEOUT] = QSM_EV_TIMEOUT,
};

enum route {
	R_PATH = 0,       /* on the way to LIVE */
	R_CLIENT_DISC,    /* the client disconnects in LIVE: DISCONNECTING, then CLOSING */
	R_SERVER_DISC,    /* the server disconnects in LIVE: the client DRAINING, RECONNECT_WAIT */
	R_NO_LISTENER,    /* a port nobody listens on, one attempt: REJECTED, GIVE_UP, FAILED */
	R_HELD,           /* the server holds its request undecided: the client stays CONNECTING */
	R_QUICK,          /* to the listener whose request_ms and handshake_ms are short; a
	                     client's own handshake_ms short */
	R_IDLE,           /* made, never connected: main destroys it */
};

struct plan {
	bool server;            /* the passive queue makes the call, else the client's */
	bool listener;          /* the server's listener takes the edge (main's call) */
	int state;              /* enum qsm_cm_state, qsm_accept_state if server, or
	                           qsm_listener_state if listener */
	enum call call;
	enum route route;
	/* as it runs */
	struct qsm_conn *q;     /* the client queue; NULL once it is gone */
	struct qsm_conn *sq;    /* the server's passive queue for it; NULL once it is gone */
	bool called;            /* the call was made (its side's handler) */
	double called_at;
	bool seen;              /* its edge is in the side's trace */
	bool disc_first;        /* C_HOLD: DISCONNECTED left its state once the device was going */
	/* each side's way so far, " EVENT[status]>STATE" an edge (show_pending: where a plan
	 * that never got to its call went instead) */
	char path[2][200];
};

static bool removing;           /* rdma link delete has started (phase 2) */
static unsigned accepts_failed; /* passive queues whose connect failed (ACCEPTING --CONNECT_ERROR-->) */

#define CLIENT(s, c, r) { .server = false, .state = QSM_CM_##s, .call = C_##c, .route = R_##r }
#define SERVER(s, c, r) { .server = true, .state = QSM_ACCEPT_##s, .call = C_##c, .route = R_##r }
#define CLIENT3(s, r) CLIENT(s, DESTROY, r), CLIENT(s, ABORT, r), CLIENT(s, DISCONNECT, r)
#define SERVER3(s, r) SERVER(s, DESTROY, r), SERVER(s, ABORT, r), SERVER(s, DISCONNECT, r)

static struct plan plans[] = {
	CLIENT3(ADDR_RESOLVING, PATH), CLIENT3(ROUTE_RESOLVING, PATH), CLIENT3(CONNECTING, PATH),
	CLIENT3(CONNECTED, PATH), CLIENT3(LIVE, PATH),
	CLIENT3(DISCONNECTING, CLIENT_DISC), CLIENT3(CLOSING, CLIENT_DISC),
	CLIENT3(DRAINING, SERVER_DISC), CLIENT3(RECONNECT_WAIT, SERVER_DISC),
	CLIENT(RECONNECT_WAIT, CONNECT, SERVER_DISC),
	CLIENT3(FAILED, NO_LISTENER), CLIENT(FAILED, CONNECT, NO_LISTENER),
	SERVER3(REQUESTED, PATH), SERVER(REQUESTED, REJECT, PATH),
	SERVER3(ACCEPTING, PATH), SERVER3(CONNECTED, PATH), SERVER3(LIVE, PATH),
	SERVER3(DISCONNECTING, SERVER_DISC), SERVER3(DRAINING, CLIENT_DISC),
	/* a send with a key the device does not know, in a state that stays until its error
	 * completion (CONNECTED: the handshake never ends, READY is not called) */
	CLIENT(CONNECTED, BAD_SEND, PATH), CLIENT(LIVE, BAD_SEND, PATH),
	SERVER(CONNECTED, BAD_SEND, PATH), SERVER(LIVE, BAD_SEND, PATH),
	/* held until the peer disconnects, or until the state's own timer fires */
	CLIENT(CONNECTED, WAIT_DISCONNECTED, SERVER_DISC), SERVER(CONNECTED, WAIT_DISCONNECTED, CLIENT_DISC),
	CLIENT(CONNECTED, WAIT_TIMEOUT, QUICK), SERVER(CONNECTED, WAIT_TIMEOUT, QUICK),
	SERVER(REQUESTED, WAIT_TIMEOUT, QUICK),
	/* main's: a queue never connected, a listener never dispatched, and (after phase 2) the
	 * listeners waiting to listen again */
	CLIENT(IDLE, DESTROY, IDLE),
	{ .listener = true, .state = QSM_LISTENER_IDLE, .call = C_DESTROY, .route = R_IDLE },
	{ .listener = true, .state = QSM_LISTENER_RELISTEN_WAIT, .call = C_DESTROY, .route = R_HELD },
	/* phase 2: held while rxe is deleted */
	CLIENT(CONNECTED, HOLD, PATH), CLIENT(FAILED, HOLD, NO_LISTENER), CLIENT(CONNECTING, HOLD, HELD),
	SERVER(REQUESTED, HOLD, PATH), SERVER(CONNECTED, HOLD, PATH),
};
#define NPLANS (sizeof(plans) / sizeof(plans[0]))
#define PHASE2(p) ((p)->call == C_HOLD || (p)->route == R_HELD)
#define MAIN_CALL(p) ((p)->listener || (p)->route == R_IDLE)

static enum qsm_machine machine_of(const struct plan *p)
{
	return p->listener ? QSM_MACHINE_LISTENER : p->server ? QSM_MACHINE_ACCEPT : QSM_MACHINE_CM_ID;
}

static const char *kind_of(const struct plan *p)
{
	return p->listener ? "listener" : p->server ? "passive" : "conn";
}

static char bad_buf[64];

/* ---- the trace: which (side, from, event) each side took ---- */

static void seen(const struct qsm_trace_record *r, void *arg)
{
	bool server = arg != NULL;

	vm_trace_print(r, server ? "server" : "client");
	if (!r->to) {
		/* counted by the ctx; shown, so that the count at the end says which */
		printf("   unexpected: %s %s#%u %s --%s-->\n", server ? "server" : "client", r->kind, r->id,
		       r->from, r->event ? r->event : "?");
		return;
	}
	if (server && !strcmp(r->kind, "passive") &&
	    !strcmp(r->from, qsm_state_name(QSM_MACHINE_ACCEPT, QSM_ACCEPT_ACCEPTING)) &&
	    !strcmp(r->event, qsm_event_name(QSM_EV_CONNECT_ERROR))) {
		accepts_failed++;
		printf("   server: passive#%u ACCEPTING --CONNECT_ERROR[%d]--> %s (%s)\n", r->id,
		       r->status, r->to, strerror(-r->status));
	}
	for (unsigned i = 0; i < NPLANS; i++) {
		struct plan *p = &plans[i];
		enum qsm_machine m = machine_of(p);

		if ((p->server || p->listener) == server && !p->seen && !strcmp(r->kind, kind_of(p)) &&
		    !strcmp(r->from, qsm_state_name(m, p->state)) &&
		    !strcmp(r->event, qsm_event_name(call_event[p->call])))
			p->seen = true;
		/* The kernel tears a device's ids down in no order it promises: the peer's id on the
		 * same rxe device may go first, its DREQ reaching this one as DISCONNECTED before
		 * this one's DEVICE_REMOVAL (seen once in 43 runs, server CONNECTED over IPv6). */
		if (removing && p->call == C_HOLD && (p->server || p->listener) == server && !p->seen &&
		    !strcmp(r->kind, kind_of(p)) && !strcmp(r->from, qsm_state_name(m, p->state)) &&
		    !strcmp(r->event, qsm_event_name(QSM_EV_DISCONNECTED)))
			p->disc_first = true;
	}
}

/* ---- both sides' handlers: the plan's call where it says, the route otherwise ---- */

/* The edge a side's queue of the plan took, on its way (cut where its buffer ends). */
static void walk(struct plan *p, bool server, const struct qsm_event_info *ev)
{
	char *path = p->path[server];
	size_t len = strlen(path);
	char st[16] = "";

	if (ev->status)
		snprintf(st, sizeof(st), "[%d]", ev->status);
	snprintf(path + len, sizeof(p->path[0]) - len, " %s%s>%s", qsm_event_name(ev->event), st,
		 qsm_state_name(server ? QSM_MACHINE_ACCEPT : QSM_MACHINE_CM_ID, ev->to));
}

/* The call, made by the queue entering the plan's state: non-zero only for ABORT. */
static int make_call(struct qsm_conn *q, struct plan *p)
{
	int r = 0;

	p->called = true;
	p->called_at = vm_now();
	if (p->server && (p->call == C_DESTROY || p->call == C_ABORT))
		p->sq = NULL;   /* gone with this call */
	switch (p->call) {
	case C_DESTROY:
		r = qsm_conn_destroy(q);
		break;
	case C_ABORT:
		return -1;
	case C_DISCONNECT:
		r = qsm_conn_disconnect(q);
		break;
	case C_CONNECT:
		r = qsm_conn_connect(q);
		break;
	case C_REJECT:
		r = qsm_conn_reject(q, NULL, 0);
		break;
	case C_BAD_SEND: {
		struct qsm_sge sge = { .addr = (uintptr_t)bad_buf, .length = sizeof(bad_buf),
				       .lkey = 0xbad0bad0 };

		r = qsm_conn_post_send(q, 1, &sge, 1, QSM_POST_SIGNALED);
		break;
	}
	case C_HOLD:
	case C_WAIT_DISCONNECTED:
	case C_WAIT_TIMEOUT:
		break;   /* nothing: the state's way on (READY, a decision) is not taken */
	}
	if (r < 0)
		printf("FAIL: plan %u: the call in %s returned %s\n", (unsigned)(p - plans),
		       qsm_state_name(machine_of(p), p->state), strerror(-r));
	vm_failures += r < 0;
	return 0;
}

/* The client's plan: its queue's user pointer. */
static int c_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct plan *p = qsm_conn_user(q);

	walk(p, false, ev);
	if (!p->server && ev->to == p->state && !p->called) {
		if (p->call == C_DESTROY || p->call == C_ABORT)
			p->q = NULL;   /* gone with this call */
		return make_call(q, p);
	}
	switch (ev->to) {
	case QSM_CM_CONNECTED:
		return qsm_conn_ready(q) < 0;   /* the base class's, as this slot replaces it */
	case QSM_CM_LIVE:
		if (p->route == R_CLIENT_DISC)
			return qsm_conn_disconnect(q) < 0;
		/* a plan that reconnected after its call is done: nothing more to see */
		if (!p->server && p->called) {
			p->q = NULL;
			return qsm_conn_destroy(q) < 0;
		}
		return 0;
	case QSM_CM_FAILED:
	case QSM_CM_RECONNECT_WAIT:
		/* the CONNECT from FAILED failed again; a bad send's queue after its drain */
		if (!p->server && p->called && p->call != C_HOLD) {
			p->q = NULL;
			return qsm_conn_destroy(q) < 0;
		}
		return 0;
	default:
		return 0;
	}
}

/* A queue that closed by itself (after its DISCONNECT): gone. */
static void c_release(struct qsm_conn *q)
{
	struct plan *p = qsm_conn_user(q);

	p->q = NULL;
}

#define C_ENTER { .enter = c_enter }

static const struct qsm_class client_class = {
	.name = "edges_client",
	.super = &qsm_base_class,
	.active = {
		[QSM_CM_ADDR_RESOLVING] = C_ENTER, [QSM_CM_ROUTE_RESOLVING] = C_ENTER,
		[QSM_CM_CONNECTING] = C_ENTER, [QSM_CM_CONNECTED] = C_ENTER, [QSM_CM_LIVE] = C_ENTER,
		[QSM_CM_DISCONNECTING] = C_ENTER, [QSM_CM_DRAINING] = C_ENTER,
		[QSM_CM_CLOSING] = C_ENTER, [QSM_CM_RECONNECT_WAIT] = C_ENTER,
		[QSM_CM_FAILED] = C_ENTER,
	},
	.release = c_release,
};

/* A passive queue knows its plan from the request's private data (the plan's index). */
struct peer {
	struct plan *p;
};

static int s_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct peer *pe = qsm_conn_priv(q);
	struct plan *p;

	if (ev->to == QSM_ACCEPT_REQUESTED) {
		unsigned i = ev->private_data_len >= 1 ? ((const unsigned char *)ev->private_data)[0] : NPLANS;

		pe->p = i < NPLANS ? &plans[i] : NULL;
		if (pe->p)
			pe->p->sq = q;
	}
	p = pe->p;
	if (p)
		walk(p, true, ev);
	if (p && p->server && ev->to == p->state && !p->called)
		return make_call(q, p);
	switch (ev->to) {
	case QSM_ACCEPT_REQUESTED:
		if (p && p->route == R_HELD)
			return 0;   /* undecided (the listener's request_ms is long): its client waits */
		return qsm_conn_accept(q, NULL, 0) < 0;
	case QSM_ACCEPT_CONNECTED:
		return qsm_conn_ready(q) < 0;
	case QSM_ACCEPT_LIVE:
		return p && p->route == R_SERVER_DISC ? qsm_conn_disconnect(q) < 0 : 0;
	default:
		return 0;
	}
}

/* A passive queue that closed by itself: gone. */
static void s_release(struct qsm_conn *q)
{
	struct peer *pe = qsm_conn_priv(q);

	if (pe->p && pe->p->sq == q)
		pe->p->sq = NULL;
}

#define S_ENTER { .enter = s_enter }

static const struct qsm_class server_class = {
	.name = "edges_server",
	.super = &qsm_base_class,
	.priv_size = sizeof(struct peer),
	.passive = {
		[QSM_ACCEPT_REQUESTED] = S_ENTER, [QSM_ACCEPT_ACCEPTING] = S_ENTER,
		[QSM_ACCEPT_CONNECTED] = S_ENTER, [QSM_ACCEPT_LIVE] = S_ENTER,
		[QSM_ACCEPT_DISCONNECTING] = S_ENTER, [QSM_ACCEPT_DRAINING] = S_ENTER,
	},
	.release = s_release,
};

static struct qsm_counters counters(struct qsm_ctx *ctx)
{
	struct qsm_counters c;

	qsm_ctx_counters(ctx, &c, sizeof(c));
	return c;
}

/* Every client queue gone, every passive queue of the server gone. */
static bool settled(struct qsm_ctx *server, struct qsm_ctx *client)
{
	return counters(client).queues_live == 0 && counters(server).queues_live == 0;
}

/* Every 10 s while not settled: the plans whose queues are still there, and where they are. */
static void show_pending(void)
{
	for (unsigned i = 0; i < NPLANS; i++) {
		const struct plan *p = &plans[i];

		if (!p->q && !p->sq)
			continue;
		printf("   plan %u (%s %s %s, call %s): client %s, server %s\n", i, p->server ? "server" : "client",
		       qsm_state_name(machine_of(p), p->state),
		       qsm_event_name(call_event[p->call]), p->called ? "made" : "not made",
		       p->q ? qsm_conn_state_name(p->q) : "gone", p->sq ? qsm_conn_state_name(p->sq) : "gone");
		printf("      client's way:%s\n      server's way:%s\n", p->path[0], p->path[1]);
	}
}

/* A server plan whose call was made a while ago: its client has seen what it will see. */
static void end_clients(void)
{
	for (unsigned i = 0; i < NPLANS; i++) {
		struct plan *p = &plans[i];

		if (p->server && p->q && p->called && vm_now() - p->called_at > PEER_GRACE_MS / 1000.0) {
			qsm_conn_destroy(p->q);
			p->q = NULL;
		}
	}
}

int main(int argc, char **argv)
{
	const char *ip = vm_env("QSM_VM_ADDR", "192.0.2.1");
	struct sockaddr_storage addr, nobody;
	struct qsm_ctx *server = NULL, *client = NULL;
	struct qsm_listener *l = NULL, *l2 = NULL, *l3 = NULL, *l4 = NULL;
	const char *dev = vm_env("QSM_VM_DEV", "rxe0");
	struct sockaddr_storage held, quick, idle;
	int st;
	unsigned taken = 0;
	struct qsm_counters cs, cc;
	double t0;

	vm_init_stdio();
	if (!vm_parse_addr(&addr, ip, "QSM_EDGES_PORT", "7475") ||
	    !vm_parse_addr(&nobody, ip, "QSM_EDGES_NOBODY_PORT", "7476") ||
	    !vm_parse_addr(&held, ip, "QSM_EDGES_HELD_PORT", "7477") ||
	    !vm_parse_addr(&quick, ip, "QSM_EDGES_QUICK_PORT", "7478") ||
	    !vm_parse_addr(&idle, ip, "QSM_EDGES_IDLE_PORT", "7479")) {
		printf("FAIL: bad address %s\n", ip);
		return 1;
	}
	if (vm_trace_open(argc, argv) < 0 || vm_ctxs_new(&server, &client) < 0)
		return 1;
	/* ours, in place of the trace file's: each side's edges */
	qsm_ctx_set_trace(server, seen, (void *)1);
	qsm_ctx_set_trace(client, seen, NULL);
	if (vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
								  .cls = &server_class },
			    ip, &l) < 0)
		return 1;
	/* phase 2's: a request may wait undecided as long as the test needs */
	if (vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&held,
								  .cls = &server_class,
								  .timeouts = { .request_ms = 600000 } },
			    ip, &l2) < 0)
		return 1;
	/* the timers of REQUESTED and CONNECTED fire here */
	if (vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&quick,
								  .cls = &server_class,
								  .timeouts = { .request_ms = 500, .handshake_ms = 500 } },
			    ip, &l3) < 0)
		return 1;
	/* one destroyed before it was ever dispatched: IDLE --DESTROY--> */
	if (vm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&idle,
								  .cls = &server_class }, ip, &l4) < 0)
		return 1;
	for (unsigned i = 0; i < NPLANS; i++)
		if (plans[i].listener && plans[i].state == QSM_LISTENER_IDLE) {
			plans[i].called = true;
			qsm_listener_destroy(l4);
		}
	vm_pump_for(server, client, 200);   /* LISTENING */

	printf("== phase 1: a call in a state, on each side, or a refused send\n");
	for (unsigned i = 0; i < NPLANS; i++) {
		struct plan *p = &plans[i];
		unsigned char idx = (unsigned char)i;
		struct qsm_conn_opts o = {
			.cls = &client_class, .user = p,
			.dst = (struct sockaddr *)(p->route == R_NO_LISTENER ? &nobody
						   : p->route == R_QUICK && p->server ? &quick : &addr),
			.timeouts = { .handshake_ms = p->route == R_QUICK && !p->server ? 500 : 0 },
			.private_data = &idx, .private_data_len = 1,
			/* a queue waits in RECONNECT_WAIT until its plan ends it (no retry meanwhile);
			 * one attempt to nobody: GIVE_UP, FAILED */
			.policy = { .initial_delay_ms = 600000, .max_delay_ms = 600000,
				    .max_attempts = p->route == R_NO_LISTENER ? 1 : 0 },
		};

		if (PHASE2(p) || p->listener)
			continue;
		if (p->route == R_IDLE) {   /* made and destroyed, never connected */
			struct qsm_conn *q;

			vm_check(qsm_conn_new(client, &o, &q) == 0, "plan %u: qsm_conn_new", i);
			p->called = true;
			qsm_conn_destroy(q);
			continue;
		}
		if (vm_conn_start(client, &o, i, &p->q) < 0)
			return 1;
	}

	t0 = vm_now();
	for (double shown = t0; !settled(server, client) && (vm_now() - t0) * 1000 < SETTLE_LIMIT_MS;) {
		vm_pump(server, client);
		end_clients();
		if (vm_now() - shown >= 10) {
			printf("   %.0f s: not settled yet\n", vm_now() - t0);
			show_pending();
			shown = vm_now();
		}
	}
	cs = counters(server);
	cc = counters(client);
	vm_check(settled(server, client), "every queue of both sides gone in %.1f s (left: client %llu, server %llu)",
		 vm_now() - t0, (unsigned long long)cc.queues_live, (unsigned long long)cs.queues_live);

	printf("== phase 2: queues held in a state while %s is deleted\n", dev);
	for (unsigned i = 0; i < NPLANS; i++) {
		struct plan *p = &plans[i];
		unsigned char idx = (unsigned char)i;
		struct qsm_conn_opts o = {
			.cls = &client_class, .user = p,
			.dst = (struct sockaddr *)(p->route == R_NO_LISTENER ? &nobody : &held),
			.private_data = &idx, .private_data_len = 1,
			.policy = { .initial_delay_ms = 600000, .max_delay_ms = 600000,
				    .max_attempts = p->route == R_NO_LISTENER ? 1 : 0 },
		};

		if (PHASE2(p) && !MAIN_CALL(p) && vm_conn_start(client, &o, i, &p->q) < 0)
			return 1;
	}
	t0 = vm_now();
	for (bool all = false; !all && (vm_now() - t0) * 1000 < SETTLE_LIMIT_MS;) {
		vm_pump(server, client);
		all = true;
		for (unsigned i = 0; i < NPLANS; i++)
			all &= !PHASE2(&plans[i]) || MAIN_CALL(&plans[i]) || plans[i].called;
	}
	vm_pump_for(server, client, 500);   /* nothing more comes: every one waits */
	show_pending();
	removing = true;
	t0 = vm_rdma_link_delete(server, client, dev, 60000, &st);
	vm_check(t0 >= 0 && vm_exit_code(st) == 0, "rdma link delete %s: %.3f s, exit %d", dev, t0,
		 vm_exit_code(st));
	t0 = vm_now();
	for (bool all = false; !all && vm_now() - t0 < 30;) {
		vm_pump(server, client);
		all = true;
		for (unsigned i = 0; i < NPLANS; i++)
			all &= !PHASE2(&plans[i]) || MAIN_CALL(&plans[i]) || plans[i].seen;
	}
	for (unsigned i = 0; i < NPLANS; i++)
		if (plans[i].q) {
			qsm_conn_destroy(plans[i].q);
			plans[i].q = NULL;
		}
	/* the listeners wait to listen again (RELISTEN_WAIT): destroyed there */
	for (unsigned i = 0; i < NPLANS; i++)
		plans[i].called |= plans[i].listener;
	qsm_listener_destroy(l);
	qsm_listener_destroy(l2);
	qsm_listener_destroy(l3);
	vm_pump_for(server, client, 200);
	cs = counters(server);
	cc = counters(client);

	/* soft-iWARP ends the connection on a local protection error (siw sends a TERMINATE and
	 * closes its TCP stream), and the CM's DISCONNECTED can be dispatched before the error
	 * completion: the queue then takes WC_ERROR in DRAINING instead of in its state */
	bool siw = strcmp(vm_env("QSM_VM_TRANSPORT", "rxe"), "siw") == 0;
	unsigned overtaken = 0;

	for (unsigned i = 0; i < NPLANS; i++) {
		const struct plan *p = &plans[i];
		enum qsm_machine m = machine_of(p);
		bool excused = !p->seen && ((siw && p->call == C_BAD_SEND && p->called) || p->disc_first);

		taken += p->seen;
		overtaken += excused;
		if (!p->seen)
			printf("   not taken: %s %s %s --%s--> (call %s)%s\n", p->server || p->listener ? "server" : "client",
			       qsm_machine_name(m),
			       qsm_state_name(m, p->state), qsm_event_name(call_event[p->call]),
			       p->called ? "made" : "never made",
			       !excused ? "" : p->disc_first ? ": the peer's DISCONNECTED came first (its id went first)" :
			       ": siw's DISCONNECTED came first");
	}
	printf("edges driven %u/%zu\n", taken, NPLANS);
	printf("   passive queues whose connect failed in ACCEPTING: %u\n", accepts_failed);
	vm_check(taken + overtaken == NPLANS, "every plan's edge taken on the real stack (%u of %zu, %u overtaken)",
		 taken, NPLANS, overtaken);
	vm_check(cs.unexpected == 0 && cc.unexpected == 0, "no event without an edge on either side "
		 "(server %llu, client %llu)", (unsigned long long)cs.unexpected,
		 (unsigned long long)cc.unexpected);
	printf("   client: %llu transitions, %llu aborts, %llu unexpected; server: %llu transitions, "
	       "%llu aborts, %llu unexpected\n",
	       (unsigned long long)cc.transitions, (unsigned long long)cc.aborts,
	       (unsigned long long)cc.unexpected, (unsigned long long)cs.transitions,
	       (unsigned long long)cs.aborts, (unsigned long long)cs.unexpected);

	vm_ctxs_free(server, client);
	printf("%s\n", vm_failures ? "FAIL" : "PASS");
	return vm_failures ? 1 : 0;
}
