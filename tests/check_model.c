/* rdma-qsm: a seeded randomized model test of the runtime on the simulated fabric: random
 * interleavings of user calls, handler behaviours and faults, with invariants after every step. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <qsm/ctx.h>
#include <qsm/sim.h>

#include "check_main.h"

/*
 * QSM_MODEL_SEED picks the seed (default: a fixed one, so CI is deterministic), and
 * QSM_MODEL_STEPS the number of steps (default 50000, about 2 s, 14 s under valgrind).
 * Every failure names the seed and the step, and the same seed replays the same run.
 *
 * Invariants, after every step:
 *  (a) accounting, per ctx: popped + aborts == dispatched + dropped + completions; every
 *      dispatch is traced exactly once and counted once in events[], every orphan traced
 *      once; the ctxs took from the fabric exactly what the sim delivered;
 *  (b) no callback for a queue after qsm_conn_destroy() or a non-zero return;
 *  (c) every live queue is in a non-final state of its machine, its QP state fits that
 *      state (no QP in IDLE, RECONNECT_WAIT, FAILED, NEW, REQUESTED; RTS when connected;
 *      ERR while disconnecting or draining, or none for a passive queue whose accept
 *      could not create one), and the runtime has a QP exactly when the sim does;
 *  (e) a downcall returns 0 exactly when the machine has an edge for it;
 *  (g) a TIMEOUT reaches only the state that armed it, after that state's timeout; no
 *      RETRY or DEVICE_ADDED is ever unexpected (they would be stale);
 * and every 250 steps, once held events are released and the timeouts have run out,
 *  (f) no removed device is still REMOVING (nothing holds it);
 * and at the end, after destroying everything:
 *  (d) nothing leaked: sim ids, qps, device refs, pending events, queues, devices all 0.
 */

#define MS 1000000ull
#define DEFAULT_SEED 20261130ull
#define DEFAULT_STEPS 50000u
#define MAX_LIVE_ACTIVE 80      /* per ctx: with their passive peers, > 100 queues at once */
#define MAX_LISTENERS 6
#define NCTX 2
#define NDEV 2

static uint64_t seed, rng;
static unsigned step_no, nsteps;
static char violation[512];

static void __attribute__((format(printf, 1, 2))) model_fail(const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ck_abort_msg("QSM_MODEL_SEED=%llu step %u: %s", (unsigned long long)seed, step_no, msg);
}

/* A problem seen inside a callback: reported after the step (never unwinding the runtime). */
static void __attribute__((format(printf, 1, 2))) violate(const char *fmt, ...)
{
	va_list ap;

	if (violation[0])
		return;
	va_start(ap, fmt);
	vsnprintf(violation, sizeof(violation), fmt, ap);
	va_end(ap);
}

#define CHECK(cond, ...) do { if (!(cond)) model_fail(__VA_ARGS__); } while (0)

static uint64_t rnd(void)
{
	/* xorshift64* */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

static unsigned below(unsigned n)
{
	return n ? (unsigned)(rnd() % n) : 0;
}

static bool chance(unsigned pct)
{
	return below(100) < pct;
}

static uint64_t vnow;
static uint64_t vclock(void *arg)
{
	(void)arg;
	return vnow;
}

/* ---- the world ---- */

static struct qsm_sim *sim;
static struct qsm_fabric *fab[NCTX];
static struct qsm_ctx *ctx[NCTX];
static const char *const dev_name[NDEV] = { "sim0", "sim1" };
static const char *const dev_addr[NDEV] = { "192.0.2.1", "192.0.2.2" };
static const uint16_t ports[] = { 4420, 4421, 4422 };
static struct qsm_timeouts listen_timeouts;   /* every listener's, so passive queues know theirs */

struct tally {
	uint64_t records, fabric;
};
static struct tally tally[NCTX];

static void tracer(const struct qsm_trace_record *t, void *arg)
{
	struct tally *y = arg;

	if (!strcmp(t->kind, "fabric")) {
		y->fabric++;
		return;
	}
	y->records++;
	if (!strcmp(t->kind, "listener") && !t->to && t->event &&
	    (!strcmp(t->event, "RETRY") || !strcmp(t->event, "LISTEN") || !strcmp(t->event, "DEVICE_ADDED")))
		violate("listener#%u: stale %s in %s", t->id, t->event, t->from);
}

/* ---- queues the model knows ---- */

struct rec {
	struct qsm_conn *q;
	int c;                      /* its ctx */
	bool passive;
	bool gone;                  /* destroyed, aborted, released: no callback may follow */
	unsigned live_idx;
	uint64_t entered_ns;        /* arrival in the current state */
	struct qsm_timeouts timeouts;
	/* behaviour */
	bool auto_ready;
	bool defer;                 /* passive: the request handler decides nothing */
	unsigned abort_pm, destroy_pm, downcall_pm;   /* per mille of callbacks */
	unsigned reject_pct;
	bool decided;               /* passive: accept or reject returned 0 once */
};

static struct rec **all;
static unsigned nall, all_cap;
static struct rec **live;
static unsigned nlive, live_cap, peak_live;
static unsigned n_active_made, n_passive_made, n_listeners_made;
static bool quiet;              /* the end: default behaviour only */

struct lst {
	struct qsm_listener *l;
	int c;
};
static struct lst listeners[MAX_LISTENERS];
static unsigned nlisteners;

static void *grow(void *p, unsigned *cap, size_t elem)
{
	*cap = *cap ? *cap * 2 : 256;
	p = realloc(p, *cap * elem);
	ck_assert_ptr_nonnull(p);
	return p;
}

static struct rec *rec_new(struct qsm_conn *q, int c, bool passive)
{
	struct rec *r = calloc(1, sizeof(*r));

	ck_assert_ptr_nonnull(r);
	r->q = q;
	r->c = c;
	r->passive = passive;
	r->entered_ns = vnow;
	r->auto_ready = !chance(15);
	r->defer = passive && chance(20);
	r->reject_pct = passive ? (chance(20) ? 50 : 0) : 0;
	r->abort_pm = chance(20) ? 1 + below(10) : 0;
	r->destroy_pm = chance(20) ? 1 + below(10) : 0;
	r->downcall_pm = chance(50) ? 20 + below(100) : 0;
	if (passive)
		r->timeouts = listen_timeouts;
	if (nall == all_cap)
		all = grow(all, &all_cap, sizeof(*all));
	all[nall++] = r;
	if (nlive == live_cap)
		live = grow(live, &live_cap, sizeof(*live));
	r->live_idx = nlive;
	live[nlive++] = r;
	if (nlive > peak_live)
		peak_live = nlive;
	*(struct rec **)qsm_conn_priv(q) = r;
	if (passive)
		n_passive_made++;
	else
		n_active_made++;
	return r;
}

static void mark_gone(struct rec *r)
{
	if (r->gone)
		return;
	r->gone = true;
	live[r->live_idx] = live[--nlive];
	live[r->live_idx]->live_idx = r->live_idx;
}

static int ctx_index(struct qsm_ctx *c)
{
	for (int i = 0; i < NCTX; i++)
		if (ctx[i] == c)
			return i;
	ck_abort_msg("unknown ctx");
	return -1;
}

/* ---- downcalls, each checked against the machine (e) ---- */

static enum qsm_machine machine_of(const struct rec *r)
{
	return r->passive ? QSM_MACHINE_ACCEPT : QSM_MACHINE_CM_ID;
}

static bool has_edge(const struct rec *r, int event)
{
	return qsm_machine_next(machine_of(r), qsm_conn_state(r->q), event, NULL) >= 0;
}

static void do_connect(struct rec *r)
{
	int want = r->passive ? -EOPNOTSUPP : has_edge(r, QSM_EV_CONNECT) ? 0 : -EINVAL;
	int got = qsm_conn_connect(r->q);

	if (got != want)
		violate("connect in %s returned %d, want %d", qsm_conn_state_name(r->q), got, want);
}

static void do_disconnect(struct rec *r)
{
	int want = has_edge(r, QSM_EV_DISCONNECT) ? 0 : -EINVAL;
	int got = qsm_conn_disconnect(r->q);

	if (got != want)
		violate("disconnect in %s returned %d, want %d", qsm_conn_state_name(r->q), got, want);
}

static void do_ready(struct rec *r)
{
	int want = has_edge(r, QSM_EV_READY) ? 0 : -EINVAL;
	int got = qsm_conn_ready(r->q);

	if (got != want)
		violate("ready in %s returned %d, want %d", qsm_conn_state_name(r->q), got, want);
}

static void do_decide(struct rec *r, bool accept)
{
	int want = !r->passive ? -EOPNOTSUPP
		   : qsm_conn_state(r->q) != QSM_ACCEPT_REQUESTED ||
			     !has_edge(r, accept ? QSM_EV_ACCEPT : QSM_EV_REJECT) ? -EINVAL
		   : r->decided ? -EALREADY : 0; /* one decision per request */
	int got = accept ? qsm_conn_accept(r->q, "ok", 2) : qsm_conn_reject(r->q, "no", 2);

	if (got == 0)
		r->decided = true;
	if (got != want)
		violate("%s in %s returned %d, want %d", accept ? "accept" : "reject",
			qsm_conn_state_name(r->q), got, want);
}

static void do_destroy(struct rec *r)
{
	int got = qsm_conn_destroy(r->q);

	if (got != 0)
		violate("destroy of a live queue in %s returned %d", qsm_conn_state_name(r->q), got);
	mark_gone(r);
}

static void random_downcall(struct rec *r)
{
	switch (below(20)) {
	case 0: case 1: case 2: case 3: case 4: do_connect(r); break;
	case 5: case 6: case 7: do_disconnect(r); break;
	case 8: case 9: case 10: case 11: do_ready(r); break;
	case 12: case 13: case 14: do_decide(r, true); break;
	case 15: case 16: do_decide(r, false); break;
	case 17: do_destroy(r); break;
	default: break;
	}
}

/* ---- the class: every slot, every callback checked ---- */

enum cb_kind { CB_ENTER, CB_EXIT, CB_EVENT, CB_UNEXPECTED, CB_DEVICE_REMOVED, CB_QP_READY, CB_RELEASE };
static const char *const cb_names[] = { "enter", "exit", "on_event", "unexpected", "device_removed",
					"qp_ready", "release" };

static struct rec *cb(struct qsm_conn *q, enum cb_kind k)
{
	struct rec *r = *(struct rec **)qsm_conn_priv(q);

	if (!r) /* a passive queue's first callback */
		r = rec_new(q, ctx_index(qsm_conn_ctx(q)), true);
	if (r->gone)
		violate("%s (%s) on a %s queue after its destroy", cb_names[k], qsm_conn_state_name(q),
			r->passive ? "passive" : "active");
	return r;
}

static uint32_t state_timeout_ms(const struct rec *r, int s)
{
	const struct qsm_timeouts *t = &r->timeouts;
#define OR(v, d) ((v) ? (v) : (d))
	if (r->passive) {
		switch (s) {
		case QSM_ACCEPT_REQUESTED: return OR(t->request_ms, 5000);
		case QSM_ACCEPT_ACCEPTING: return OR(t->connect_ms, 5000);
		case QSM_ACCEPT_CONNECTED: return t->handshake_ms;
		case QSM_ACCEPT_DISCONNECTING: return OR(t->disconnect_ms, 2000);
		case QSM_ACCEPT_DRAINING: return OR(t->drain_ms, 2000);
		default: return 0;
		}
	}
	switch (s) {
	case QSM_CM_ADDR_RESOLVING:
	case QSM_CM_ROUTE_RESOLVING: return OR(t->resolve_ms, 2000);
	case QSM_CM_CONNECTING: return OR(t->connect_ms, 5000);
	case QSM_CM_CONNECTED: return t->handshake_ms;
	case QSM_CM_DISCONNECTING: return OR(t->disconnect_ms, 2000);
	case QSM_CM_DRAINING:
	case QSM_CM_CLOSING: return OR(t->drain_ms, 2000);
	default: return 0;
	}
#undef OR
}

static int handle(struct qsm_conn *q, const struct qsm_event_info *ev, enum cb_kind k)
{
	struct rec *r = cb(q, k);
	unsigned x;

	if (r->gone)
		return 0;
	if (ev->event == QSM_EV_TIMEOUT && (k == CB_EVENT || k == CB_UNEXPECTED)) {
		uint32_t t = state_timeout_ms(r, ev->from);
		uint64_t in = vnow - r->entered_ns;

		if (!t || in < t * MS)
			violate("TIMEOUT reached %s %s after %llu ms there (its timeout: %u ms)",
				r->passive ? "passive" : "active", qsm_state_name(machine_of(r), ev->from),
				(unsigned long long)(in / MS), t);
	}
	if (k == CB_UNEXPECTED && (ev->event == QSM_EV_RETRY || ev->event == QSM_EV_DEVICE_ADDED))
		violate("stale %s reached %s %s", qsm_event_name(ev->event), r->passive ? "passive" : "active",
			qsm_state_name(machine_of(r), ev->from));
	if (k == CB_EVENT && ev->to != ev->from)
		r->entered_ns = vnow;

	if (k == CB_ENTER) {
		if (ev->to == (r->passive ? QSM_ACCEPT_CONNECTED : QSM_CM_CONNECTED) && r->auto_ready)
			do_ready(r);
		if (r->passive && ev->to == QSM_ACCEPT_REQUESTED && (!r->defer || quiet))
			do_decide(r, quiet || !chance(r->reject_pct));
	}
	if (quiet)
		return 0;
	x = below(1000);
	if (x < r->abort_pm) {
		mark_gone(r);
		return -1 - (int)below(3);
	}
	x -= r->abort_pm;
	if (x < r->destroy_pm) {
		do_destroy(r);
		return chance(50) ? 0 : 1; /* non-zero after a destroy changes nothing */
	}
	x -= r->destroy_pm;
	if (x < r->downcall_pm) {
		struct rec *t = chance(50) || !nlive ? r : live[below(nlive)];

		if (!t->gone)
			random_downcall(t);
	}
	return 0;
}

static int h_enter(struct qsm_conn *q, const struct qsm_event_info *ev) { return handle(q, ev, CB_ENTER); }
static int h_exit(struct qsm_conn *q, const struct qsm_event_info *ev) { return handle(q, ev, CB_EXIT); }
static int h_event(struct qsm_conn *q, const struct qsm_event_info *ev) { return handle(q, ev, CB_EVENT); }
static int h_unexpected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	return handle(q, ev, CB_UNEXPECTED);
}
static int h_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	return handle(q, ev, CB_DEVICE_REMOVED);
}
/* Inside the CONNECT / ACCEPT action: aborting or destroying here must send nothing. */
static int h_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	return handle(q, ev, CB_QP_READY);
}
static void h_release(struct qsm_conn *q)
{
	mark_gone(cb(q, CB_RELEASE));
}

#define H { .enter = h_enter, .exit = h_exit, .on_event = h_event }
static const struct qsm_class model_class = {
	.name = "model",
	.priv_size = sizeof(struct rec *),
	.active = { [0 ... QSM_CM_STATE_COUNT - 1] = H },
	.passive = { [0 ... QSM_ACCEPT_STATE_COUNT - 1] = H },
	.unexpected = h_unexpected,
	.device_removed = h_device_removed,
	.qp_ready = h_qp_ready,
	.release = h_release,
};

/* ---- driving ---- */

static int dispatch(int c, unsigned budget)
{
	int n = qsm_ctx_dispatch(ctx[c], budget);

	CHECK(n >= 0, "dispatch returned %d", n);
	return n;
}

static void settle(void)
{
	for (int guard = 0; guard < 200000; guard++) {
		int n = 0;

		for (int c = 0; c < NCTX; c++)
			n += dispatch(c, 0);
		if (!n)
			return;
	}
	model_fail("no quiescence");
}

static int next_timer_ms(void)
{
	int best = -1;

	for (int c = 0; c < NCTX; c++) {
		int t = qsm_ctx_next_timeout_ms(ctx[c]);

		if (t >= 0 && (best < 0 || t < best))
			best = t;
	}
	return best;
}

static void run_for(unsigned ms)
{
	uint64_t end = vnow + ms * MS;

	for (int guard = 0; guard < 200000; guard++) {
		int t;

		settle();
		t = next_timer_ms();
		if (t < 0 || vnow + (uint64_t)(t ? t : 1) * MS > end)
			return;
		vnow += (uint64_t)(t ? t : 1) * MS;
	}
	model_fail("run_for: endless timers");
}

static void sockaddr_of(struct sockaddr_in *sa, const char *ip, uint16_t port)
{
	*sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &sa->sin_addr);
}

static uint32_t some_ms(unsigned pct_set, unsigned lo, unsigned hi)
{
	return chance(pct_set) ? lo + below(hi - lo) : 0;
}

static void step_new_queue(void)
{
	int c = (int)below(NCTX);
	unsigned n = 0;
	struct sockaddr_in dst;
	struct qsm_conn *q;
	struct qsm_conn_opts o = { .cls = &model_class, .dst = (struct sockaddr *)&dst };
	struct rec *r;
	int ret;

	for (unsigned i = 0; i < nlive; i++)
		n += live[i]->c == c && !live[i]->passive;
	if (n >= MAX_LIVE_ACTIVE)
		return;
	sockaddr_of(&dst, chance(10) ? "192.0.2.9" : dev_addr[below(NDEV)], ports[below(3)]);
	o.policy = (struct qsm_reconnect_policy){
		.initial_delay_ms = 1 + below(200), .max_delay_ms = 100 + below(2000),
		.multiplier_pct = chance(50) ? 0 : 100 + below(200), .jitter_pct = below(40),
		.max_attempts = chance(60) ? 0 : 1 + below(5), .loss_timeout_ms = some_ms(15, 500, 8000),
	};
	o.timeouts = (struct qsm_timeouts){
		.resolve_ms = some_ms(30, 50, 3000), .connect_ms = some_ms(30, 50, 3000),
		.handshake_ms = some_ms(30, 50, 3000), .disconnect_ms = some_ms(30, 50, 3000),
		.drain_ms = some_ms(30, 50, 3000),
	};
	if (chance(30)) {
		o.private_data = "LOGIN model";
		o.private_data_len = 11;
	}
	ret = qsm_conn_new(ctx[c], &o, &q);
	CHECK(ret == 0, "qsm_conn_new: %d", ret);
	r = rec_new(q, c, false);
	r->timeouts = o.timeouts;
	if (chance(70))
		do_connect(r);
}

static void step_new_listener_at(const char *ip, uint16_t port)
{
	struct sockaddr_in a;
	struct qsm_listener_opts o = { .addr = (struct sockaddr *)&a, .cls = &model_class,
				       .timeouts = listen_timeouts,
				       .relisten = { .initial_delay_ms = 1 + below(300), .max_delay_ms = 2000,
						     .jitter_pct = below(30) } };
	int c = (int)below(NCTX), r;

	if (nlisteners == MAX_LISTENERS)
		return;
	sockaddr_of(&a, ip, port);
	r = qsm_listener_new(ctx[c], &o, &listeners[nlisteners].l);
	if (r == 0) {
		listeners[nlisteners++].c = c;
		n_listeners_made++;
		return;
	}
	CHECK(r == -EADDRINUSE || r == -EADDRNOTAVAIL || r == -ENOMEM || r == -ENODEV,
	      "qsm_listener_new: %d", r);
}

static void step_new_listener(void)
{
	step_new_listener_at(chance(20) ? "0.0.0.0" : dev_addr[below(NDEV)], ports[below(3)]);
}

static void step_destroy_listener(void)
{
	unsigned i;
	int r;

	if (!nlisteners)
		return;
	i = below(nlisteners);
	r = qsm_listener_destroy(listeners[i].l);
	CHECK(r == 0, "qsm_listener_destroy: %d", r);
	listeners[i] = listeners[--nlisteners];
}

static struct rec *some_live(bool passive_only)
{
	if (!nlive)
		return NULL;
	for (int tries = 0; tries < 8; tries++) {
		struct rec *r = live[below(nlive)];

		if (!passive_only || r->passive)
			return r;
	}
	return NULL;
}

static const enum qsm_sim_fault armed_faults[] = {
	QSM_SIM_FAULT_ADDR_ERROR, QSM_SIM_FAULT_ROUTE_ERROR, QSM_SIM_FAULT_REJECT,
	QSM_SIM_FAULT_UNREACHABLE, QSM_SIM_FAULT_CONNECT_ERROR, QSM_SIM_FAULT_NO_TIMEWAIT_EXIT,
	QSM_SIM_FAULT_DUP_DISCONNECTED, QSM_SIM_FAULT_LATE_ESTABLISHED, QSM_SIM_FAULT_NO_DRAINED,
	QSM_SIM_FAULT_ENOMEM,
};

static unsigned n_faults, n_removals, n_adds, n_fatals;

/* Everything settles; held events come out; every timeout runs out: no removed device may
 * still be waiting for a reference (f). */
static void quiesce_check(void)
{
	CHECK(qsm_sim_release(sim) >= 0, "release");
	run_for(8000);
	for (int d = 0; d < NDEV; d++)
		CHECK(qsm_sim_device_state(sim, dev_name[d]) != QSM_SIM_DEVICE_REMOVING,
		      "%s still REMOVING after everything settled and timed out", dev_name[d]);
}

static void one_step(void)
{
	unsigned x = below(1000);
	struct rec *r;

	if (x < 70) { step_new_queue(); return; } x -= 70;
	if (x < 90) { if ((r = some_live(false))) do_connect(r); return; } x -= 90;
	if (x < 15) { if ((r = some_live(false))) do_disconnect(r); return; } x -= 15;
	if (x < 8) { if ((r = some_live(false))) do_destroy(r); return; } x -= 8;
	if (x < 30) { if ((r = some_live(false))) do_ready(r); return; } x -= 30;
	if (x < 40) { if ((r = some_live(true))) do_decide(r, chance(70)); return; } x -= 40;
	if (x < 20) { step_new_listener(); return; } x -= 20;
	if (x < 6) { step_destroy_listener(); return; } x -= 6;
	if (x < 170) { dispatch((int)below(NCTX), 1 + below(8)); return; } x -= 170;
	if (x < 120) { settle(); return; } x -= 120;
	if (x < 90) {
		int t = next_timer_ms();

		if (t > 0 && chance(70))
			vnow += (uint64_t)t * MS;
		else
			vnow += (uint64_t)below(3000) * MS;
		return;
	}
	x -= 90;
	if (x < 60) {
		enum qsm_sim_fault f = armed_faults[below(sizeof(armed_faults) / sizeof(armed_faults[0]))];

		CHECK(qsm_sim_inject(sim, f, 1 + below(3)) == 0, "inject");
		n_faults++;
		return;
	}
	x -= 60;
	if (x < 25) { CHECK(qsm_sim_inject(sim, QSM_SIM_FAULT_HOLD, 1 + below(6)) == 0, "hold"); n_faults++; return; }
	x -= 25;
	if (x < 45) { CHECK(qsm_sim_release(sim) >= 0, "release"); return; } x -= 45;
	if (x < 15) {
		int d = (int)below(NDEV), ret = qsm_sim_device_remove(sim, dev_name[d]);

		CHECK(ret == 0 || ret == -EALREADY, "device_remove: %d", ret);
		n_removals += ret == 0;
		return;
	}
	x -= 15;
	if (x < 25) {
		int d = (int)below(NDEV), ret = qsm_sim_device_add(sim, dev_name[d], dev_addr[d]);

		CHECK(ret == 0 || ret == -EEXIST || ret == -EBUSY, "device_add: %d", ret);
		n_adds += ret == 0;
		return;
	}
	x -= 25;
	if (x < 40) {
		if ((r = some_live(false))) {
			int want = qsm_conn_qp_state(r->q) == -ENOENT ? -ENOENT : 0;
			int got = qsm_sim_qp_fatal(sim, fab[r->c], r->q);

			CHECK(got == want, "qp_fatal in %s: %d, want %d", qsm_conn_state_name(r->q), got, want);
			n_fatals += got == 0;
		}
		return;
	}
	x -= 40;
	/* the rest: handlers' own calls carry the step */
	settle();
}

/* ---- the invariants ---- */

static void check_accounting(void)
{
	struct qsm_sim_stats st;
	uint64_t taken = 0;

	for (int c = 0; c < NCTX; c++) {
		struct qsm_counters k;
		uint64_t sum = 0;

		CHECK(qsm_ctx_counters(ctx[c], &k) == 0, "counters");
		CHECK(k.popped + k.aborts == k.dispatched + k.dropped + k.completions,
		      "ctx%d: popped %llu + aborts %llu != dispatched %llu + dropped %llu + completions %llu",
		      c, (unsigned long long)k.popped, (unsigned long long)k.aborts,
		      (unsigned long long)k.dispatched, (unsigned long long)k.dropped,
		      (unsigned long long)k.completions);
		CHECK(k.dispatched == tally[c].records, "ctx%d: dispatched %llu, traced %llu", c,
		      (unsigned long long)k.dispatched, (unsigned long long)tally[c].records);
		CHECK(k.orphans == tally[c].fabric, "ctx%d: %llu orphans, %llu traced", c,
		      (unsigned long long)k.orphans, (unsigned long long)tally[c].fabric);
		for (int e = 0; e < QSM_EV_LIMIT; e++)
			sum += k.events[e];
		CHECK(sum == k.dispatched, "ctx%d: events[] sum to %llu, dispatched %llu", c,
		      (unsigned long long)sum, (unsigned long long)k.dispatched);
		taken += k.fabric_events;
	}
	qsm_sim_get_stats(sim, &st);
	CHECK(taken == st.events_delivered, "ctxs took %llu fabric events, the sim delivered %u",
	      (unsigned long long)taken, st.events_delivered);
}

static void check_queue(const struct rec *r)
{
	int s = qsm_conn_state(r->q), qp = qsm_conn_qp_state(r->q);
	int sim_qp = qsm_sim_qp_state(sim, fab[r->c], r->q);
	const char *name = qsm_conn_state_name(r->q);
	bool ok;

	CHECK(s >= 0 && s < (r->passive ? QSM_ACCEPT_STATE_COUNT : QSM_CM_STATE_COUNT) &&
	      !qsm_machine_is_final(machine_of(r), s), "live queue in state %d", s);
	CHECK((qp == -ENOENT) == (sim_qp == -ENOENT), "%s queue in %s: runtime QP %d, sim QP %d",
	      r->passive ? "passive" : "active", name, qp, sim_qp);
	if (r->passive) {
		switch (s) {
		case QSM_ACCEPT_NEW:
		case QSM_ACCEPT_REQUESTED: ok = qp == -ENOENT; break;
		case QSM_ACCEPT_ACCEPTING: ok = qp == -ENOENT || qp == QSM_QP_INIT || qp == QSM_QP_RTS; break;
		case QSM_ACCEPT_CONNECTED:
		case QSM_ACCEPT_LIVE: ok = qp == QSM_QP_RTS; break;
		/* A DISCONNECT queued before an accept whose create_qp failed takes ACCEPTING to
		 * DISCONNECTING (then DRAINING) with no QP: the fed-back CONNECT_ERROR comes after. */
		default: ok = qp == QSM_QP_ERR || qp == -ENOENT; break;
		}
	} else {
		switch (s) {
		case QSM_CM_CONNECTING: ok = qp == -ENOENT || qp == QSM_QP_INIT; break;
		case QSM_CM_CONNECTED:
		case QSM_CM_LIVE: ok = qp == QSM_QP_RTS; break;
		case QSM_CM_DISCONNECTING:
		case QSM_CM_DRAINING:
		case QSM_CM_CLOSING: ok = qp == QSM_QP_ERR; break;
		default: ok = qp == -ENOENT; break;
		}
	}
	CHECK(ok, "%s queue in %s with QP state %d", r->passive ? "passive" : "active", name, qp);
}

static void check_all(void)
{
	CHECK(!violation[0], "%s", violation);
	check_accounting();
	for (unsigned i = 0; i < nlive; i++)
		check_queue(live[i]);
}

/* ---- the run ---- */

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : def;
}

static void world_new(void)
{
	CHECK(qsm_sim_new(&sim) == 0, "sim");
	for (int d = 0; d < NDEV; d++)
		CHECK(qsm_sim_device_add(sim, dev_name[d], dev_addr[d]) == 0, "device_add");
	for (int c = 0; c < NCTX; c++) {
		struct qsm_ctx_opts o = { .now_ns = vclock, .seed = seed + (uint64_t)c };

		CHECK(qsm_sim_fabric_new(sim, &fab[c]) == 0, "fabric");
		o.fabric = fab[c];
		CHECK(qsm_ctx_new(&ctx[c], &o) == 0, "ctx");
		CHECK(qsm_ctx_set_trace(ctx[c], tracer, &tally[c]) == 0, "trace");
	}
}

/* Destroy everything, let it close, and account for every object (d). */
static void world_end(void)
{
	struct qsm_sim_stats st;

	quiet = true;
	for (int f = 0; f < QSM_SIM_FAULT_COUNT; f++)
		CHECK(qsm_sim_inject(sim, (enum qsm_sim_fault)f, 0) == 0, "disarm");
	CHECK(qsm_sim_release(sim) >= 0, "release");
	for (int round = 0; round < 10; round++) {
		struct qsm_counters k0, k1;

		while (nlive)
			do_destroy(live[0]);
		while (nlisteners)
			step_destroy_listener();
		run_for(60000);
		check_all();
		qsm_ctx_counters(ctx[0], &k0);
		qsm_ctx_counters(ctx[1], &k1);
		if (!nlive && !k0.queues_live && !k1.queues_live)
			break;
	}
	for (int c = 0; c < NCTX; c++) {
		struct qsm_counters k;

		qsm_ctx_counters(ctx[c], &k);
		CHECK(k.queues_live == 0, "ctx%d: %llu queues live at the end", c, (unsigned long long)k.queues_live);
		CHECK(k.devices_live == 0, "ctx%d: %llu devices live at the end", c,
		      (unsigned long long)k.devices_live);
	}
	qsm_sim_get_stats(sim, &st);
	CHECK(!st.ids && !st.qps && !st.device_refs && !st.events_pending,
	      "left in the sim: %u ids, %u qps, %u device refs, %u events", st.ids, st.qps, st.device_refs,
	      st.events_pending);
	for (int c = 0; c < NCTX; c++) {
		qsm_ctx_free(ctx[c]);
		ctx[c] = NULL;
	}
	qsm_sim_get_stats(sim, &st);
	CHECK(!st.ids && !st.qps && !st.device_refs && !st.events_pending && !st.ids_leaked,
	      "after freeing the ctxs: %u ids, %u qps, %u device refs, %u events, %u ids leaked", st.ids,
	      st.qps, st.device_refs, st.events_pending, st.ids_leaked);
	for (int d = 0; d < NDEV; d++)
		CHECK(qsm_sim_device_state(sim, dev_name[d]) != QSM_SIM_DEVICE_REMOVING,
		      "%s still REMOVING at the end", dev_name[d]);
	qsm_sim_free(sim);
	sim = NULL;
}

START_TEST(test_random_interleavings_keep_every_invariant)
{
	struct timespec t0, t1;

	seed = env_u64("QSM_MODEL_SEED", DEFAULT_SEED);
	nsteps = (unsigned)env_u64("QSM_MODEL_STEPS", DEFAULT_STEPS);
	rng = seed ? seed : 1;
	vnow = 1000 * MS;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	listen_timeouts = (struct qsm_timeouts){
		.request_ms = some_ms(50, 50, 3000), .connect_ms = some_ms(50, 50, 3000),
		.handshake_ms = some_ms(50, 50, 3000), .disconnect_ms = some_ms(50, 50, 3000),
		.drain_ms = some_ms(50, 50, 3000),
	};
	world_new();
	for (step_no = 0; step_no < 3; step_no++)
		step_new_listener_at(dev_addr[step_no % NDEV], ports[step_no]);
	for (step_no = 1; step_no <= nsteps; step_no++) {
		one_step();
		check_all();
		if (step_no % 250 == 0) {
			quiesce_check();
			check_all();
		}
	}
	world_end();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("model: QSM_MODEL_SEED=%llu steps=%u queues=%u (active %u, passive %u, at most %u at once) "
	       "listeners=%u faults=%u removals=%u adds=%u qp_fatal=%u virtual=%.0fs in %.2fs\n",
	       (unsigned long long)seed, nsteps, n_active_made + n_passive_made, n_active_made,
	       n_passive_made, peak_live, n_listeners_made, n_faults, n_removals, n_adds, n_fatals,
	       (double)(vnow - 1000 * MS) / 1e9,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	if (nsteps >= 10000)
		CHECK(n_active_made + n_passive_made >= 100 && peak_live >= 100,
		      "only %u queues, %u at once", n_active_made + n_passive_made, peak_live);
	for (unsigned i = 0; i < nall; i++)
		free(all[i]);
	free(all);
	free(live);
}
END_TEST

static Suite *model_suite(void)
{
	Suite *s = suite_create("model");
	TCase *t = tcase_create("random");

	tcase_set_timeout(t, 600);
	tcase_add_test(t, test_random_interleavings_keep_every_invariant);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(model_suite)
