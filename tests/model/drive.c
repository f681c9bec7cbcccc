/* rdma-qsm model test: the class whose every slot checks its callback, and the random steps that
 * drive the world (new queues and listeners, downcalls, dispatch, time, faults). */
#include "model.h"

const char *const cb_names[] = { "enter", "exit", "on_event", "unexpected", "device_removed",
					"qp_ready", "release", "completion" };

struct rec *cb(struct qsm_conn *q, enum cb_kind k)
{
	struct rec *r = *(struct rec **)qsm_conn_priv(q);

	if (!r) /* a passive queue's first callback */
		r = rec_new(q, ctx_index(qsm_conn_ctx(q)), true);
	if (r->gone)
		violate("%s (%s) on a %s queue after its destroy", cb_names[k], qsm_conn_state_name(q),
			r->passive ? "passive" : "active");
	return r;
}

uint32_t state_timeout_ms(const struct rec *r, int s)
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

/* Who is at the other end: the request's private data names the active queue, the accept's
 * (in the active queue's ESTABLISHED) the passive one. */
void learn_peer(struct rec *r, const struct qsm_event_info *ev)
{
	int p;

	if (r->passive && ev->event == QSM_EV_CONNECT_REQUEST) {
		p = get_tag(ev, 'M');
		if (p == -2 || (p >= 0 && all[p]->passive))
			violate("passive queue: CONNECT_REQUEST with private data of no active queue");
		if (p >= 0)
			r->peer = p;
	} else if (!r->passive && ev->event == QSM_EV_ESTABLISHED && ev->from == QSM_CM_CONNECTING &&
		   ev->to == QSM_CM_CONNECTED) {
		p = get_tag(ev, 'P');
		if (p == -2 || (p >= 0 && !all[p]->passive))
			violate("active queue: ESTABLISHED with private data of no passive queue");
		if (p >= 0) {
			if (all[p]->peer != (int32_t)r->idx)
				violate("active queue #%u connected to passive #%d, whose request came from #%d",
					r->idx, p, all[p]->peer);
			r->peer = p;
			r->peer_gen = r->gen;
		}
	}
}

int handle(struct qsm_conn *q, const struct qsm_event_info *ev, enum cb_kind k)
{
	struct rec *r = cb(q, k);
	unsigned x;

	if (r->gone)
		return 0;
	if (k == CB_EVENT) {
		pend.r = r;
		pend.event = ev->event;
	}
	observe(r);
	learn_peer(r, ev);
	if (k == CB_EVENT || k == CB_UNEXPECTED)
		srq_event(r, ev, k == CB_UNEXPECTED);
	if (ev->event == QSM_EV_TIMEOUT && (k == CB_EVENT || k == CB_UNEXPECTED)) {
		uint32_t t = state_timeout_ms(r, ev->from);
		uint64_t in = world.now_ns - r->entered_ns;

		if (!t || in < t * MS)
			violate("TIMEOUT reached %s %s after %llu ms there (its timeout: %u ms)",
				r->passive ? "passive" : "active", qsm_state_name(machine_of(r), ev->from),
				(unsigned long long)(in / MS), t);
	}
	if (k == CB_UNEXPECTED && (ev->event == QSM_EV_RETRY || ev->event == QSM_EV_DEVICE_ADDED))
		violate("stale %s reached %s %s", qsm_event_name(ev->event), r->passive ? "passive" : "active",
			qsm_state_name(machine_of(r), ev->from));
	if (k == CB_EVENT && ev->to != ev->from)
		r->entered_ns = world.now_ns;

	if (k == CB_ENTER) {
		if (ev->to == (r->passive ? QSM_ACCEPT_CONNECTED : QSM_CM_CONNECTED) && r->auto_ready)
			do_ready(r);
		if (r->passive && ev->to == QSM_ACCEPT_REQUESTED && (!r->defer || quiet))
			do_decide(r, quiet || !chance(r->reject_pct));
		if (!quiet && !r->gone && (ev->to == (r->passive ? QSM_ACCEPT_LIVE : QSM_CM_LIVE) ||
					   ev->to == (r->passive ? QSM_ACCEPT_CONNECTED : QSM_CM_CONNECTED)) &&
		    chance(30))
			op_send(r, false);
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
	} else if (x - r->downcall_pm < r->data_pm) {
		data_op(chance(70) || !nlive ? r : live[below(nlive)]);
	}
	if (k == CB_DEVICE_REMOVED && !r->gone)
		r->expect_mrs_dead = true;  /* released right after this handler */
	return 0;
}

int h_enter(struct qsm_conn *q, const struct qsm_event_info *ev) { return handle(q, ev, CB_ENTER); }
int h_exit(struct qsm_conn *q, const struct qsm_event_info *ev) { return handle(q, ev, CB_EXIT); }
int h_event(struct qsm_conn *q, const struct qsm_event_info *ev) { return handle(q, ev, CB_EVENT); }
int h_unexpected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	return handle(q, ev, CB_UNEXPECTED);
}

int h_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	return handle(q, ev, CB_DEVICE_REMOVED);
}

/* Inside the CONNECT / ACCEPT action: aborting or destroying here must send nothing. */
int h_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct rec *r = cb(q, CB_QP_READY);
	int ret;

	if (r->gone)
		return 0;
	r->in_qp_ready = true;
	qp_created(r);
	ret = handle(q, ev, CB_QP_READY);
	r->in_qp_ready = false;
	return ret;
}

int h_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct rec *r = cb(q, CB_COMPLETION);
	bool recv;
	unsigned x;

	compl_seen[r->c]++;
	if (r->gone)
		return 0;
	check_completion(r, wc);
	if (quiet)
		return 0;
	recv = wc->opcode == QSM_WR_RECV || wc->opcode == QSM_WR_RECV_RDMA_WITH_IMM;
	x = below(1000);
	if (x < r->abort_pm / 4) {
		mark_gone(r);
		return 1 + (int)below(3);
	}
	x -= r->abort_pm / 4;
	if (x < r->destroy_pm / 4) {
		do_destroy(r);
		return chance(50) ? 0 : -1;
	}
	observe(r);
	/* a receive back for each one used; now and then one into a QP in ERR (flushed) */
	if (recv && r->repost && chance(wc->status == QSM_WC_SUCCESS ? 85 : 10))
		op_recv(r);
	if (chance(20))
		data_op(r);
	if (chance(5) && nlive)
		data_op(live[below(nlive)]);
	if (!r->gone && below(1000) < r->downcall_pm / 4)
		random_downcall(chance(70) || !nlive ? r : live[below(nlive)]);
	return 0;
}

void h_release(struct qsm_conn *q)
{
	struct rec *r = cb(q, CB_RELEASE);

	/* CLOSED: no QP any more, posts are -ENOTCONN (D1) */
	if (!r->gone && !quiet && chance(25)) {
		observe(r);
		if (chance(50))
			op_recv(r);
		else
			op_send(r, true);
	}
	mark_gone(r);
}

const struct qsm_class model_class = {
	.name = "model",
	.priv_size = sizeof(struct rec *),
	.active = { [0 ... QSM_CM_STATE_COUNT - 1] = H },
	.passive = { [0 ... QSM_ACCEPT_STATE_COUNT - 1] = H },
	.unexpected = h_unexpected,
	.device_removed = h_device_removed,
	.qp_ready = h_qp_ready,
	.completion = h_completion,
	.release = h_release,
	.qp = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 2, .max_inline_data = 40 },
};

/* Every slot and the caps through super. */
const struct qsm_class model_sub = { .name = "model-sub", .super = &model_class };

/* Its own caps: 4 receives, the rest the library's defaults (64 sends, 1 SGE each, no inline). */
const struct qsm_class model_narrow = {
	.name = "model-narrow", .super = &model_class, .qp = { .max_recv_wr = 4 },
};

/* Its queues' receives go to one SRQ per device per ctx (the QP caps are model_class's). */
const struct qsm_class model_srq = {
	.name = "model-srq", .super = &model_class,
	.srq = { .max_wr = SRQ_MAX_WR, .max_sge = SRQ_MAX_SGE, .limit = SRQ_LIMIT }, .srq_low = h_srq_low,
};

struct cinfo cinfo[NCLASS] = {
	{ &model_class, 8, 2, 2, 8, 40, false },
	{ &model_sub, 8, 2, 2, 8, 40, false },
	{ &model_narrow, 4, 1, 1, 64, 0, false },
	{ &model_srq, 8, 2, 2, 8, 40, true },
};

/* ---- driving ---- */

int dispatch(int c, unsigned budget)
{
	int n = qsm_ctx_dispatch(ctx[c], budget);

	CHECK(n >= 0, "dispatch returned %d", n);
	return n;
}

void sockaddr_of(struct sockaddr_in *sa, const char *ip, uint16_t port)
{
	*sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &sa->sin_addr);
}

uint32_t some_ms(unsigned pct_set, unsigned lo, unsigned hi)
{
	return chance(pct_set) ? lo + below(hi - lo) : 0;
}

void step_new_queue(void)
{
	int c = (int)below(NCTX);
	unsigned n = 0;
	struct sockaddr_in dst;
	struct qsm_conn *q;
	struct cinfo *ci = &cinfo[below(NCLASS)];
	struct qsm_conn_opts o = { .cls = ci->cls, .dst = (struct sockaddr *)&dst, .user = ci };
	uint8_t pdata[6 + 11];
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
	/* the rec's index, so that the passive side knows who connects */
	put_tag(pdata, 'M', nall);
	memcpy(pdata + 6, "LOGIN model", 11);
	o.private_data = pdata;
	o.private_data_len = chance(30) ? sizeof(pdata) : 6;
	ret = qsm_conn_new(ctx[c], &o, &q);
	CHECK(ret == 0, "qsm_conn_new: %d", ret);
	r = rec_new(q, c, false);
	r->timeouts = o.timeouts;
	if (chance(70))
		do_connect(r);
}

void step_new_listener_at(const char *ip, uint16_t port)
{
	struct sockaddr_in a;
	struct cinfo *ci = &cinfo[below(NCLASS)];
	struct qsm_listener_opts o = { .addr = (struct sockaddr *)&a, .cls = ci->cls, .user = ci,
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

void step_new_listener(void)
{
	step_new_listener_at(chance(20) ? "0.0.0.0" : dev_addr[below(NDEV)], ports[below(3)]);
}

void step_destroy_listener_at(unsigned i)
{
	int r = qsm_listener_destroy(listeners[i].l);

	CHECK(r == 0, "qsm_listener_destroy: %d", r);
	listeners[i] = listeners[--nlisteners];
}

void step_destroy_listener(void)
{
	if (nlisteners)
		step_destroy_listener_at(below(nlisteners));
}

struct rec *some_live(bool passive_only)
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

/* Mostly a queue that can carry data (QP in RTS). */
struct rec *some_data_rec(void)
{
	struct rec *r = NULL;

	if (!nlive)
		return NULL;
	for (int tries = 0; tries < 6; tries++) {
		r = live[below(nlive)];
		if (qsm_conn_qp_state(r->q) == QSM_QP_RTS)
			break;
	}
	return r;
}

const enum qsm_sim_fault armed_faults[N_ARMED_FAULTS] = {
	QSM_SIM_FAULT_ADDR_ERROR, QSM_SIM_FAULT_ROUTE_ERROR, QSM_SIM_FAULT_REJECT,
	QSM_SIM_FAULT_UNREACHABLE, QSM_SIM_FAULT_CONNECT_ERROR, QSM_SIM_FAULT_NO_TIMEWAIT_EXIT,
	QSM_SIM_FAULT_DUP_DISCONNECTED, QSM_SIM_FAULT_LATE_ESTABLISHED, QSM_SIM_FAULT_NO_DRAINED,
	QSM_SIM_FAULT_ENOMEM,
};

unsigned n_faults, n_removals, n_adds, n_fatals;

/* The sim's faults, one step each (the random steps' and the fuzzer's script's). */
void step_fault(enum qsm_sim_fault f, unsigned n)
{
	CHECK(qsm_sim_inject(sim, f, n) == 0, "inject %d", (int)f);
	if (f == QSM_SIM_FAULT_ENOMEM) {
		enomem_injected = true;
		enomem_settle = n_settles;
	} else if (f == QSM_SIM_FAULT_HOLD) {
		hold_epoch++;
		hold_armed = true;
	}
	n_faults++;
}

void step_device_remove(int d)
{
	int ret = qsm_sim_device_remove(sim, dev_name[d]);

	CHECK(ret == 0 || ret == -EALREADY, "device_remove: %d", ret);
	n_removals += ret == 0;
}

void step_device_add(int d)
{
	int ret = qsm_sim_device_add(sim, dev_name[d], dev_addr[d]);

	CHECK(ret == 0 || ret == -EEXIST || ret == -EBUSY, "device_add: %d", ret);
	n_adds += ret == 0;
}

void step_qp_fatal(struct rec *r)
{
	int want = qsm_conn_qp_state(r->q) == -ENOENT ? -ENOENT : 0;
	int got = qsm_sim_qp_fatal(sim, fab[r->c], r->q);

	CHECK(got == want, "qp_fatal in %s: %d, want %d", qsm_conn_state_name(r->q), got, want);
	n_fatals += got == 0;
}

/* Everything settled and every held event is out (D3, D5); the buffers of queues gone two
 * settles ago can go: their MRs were deregistered when they closed. */
void check_settled(void)
{
	struct qsm_sim_stats st;
	unsigned valid = 0;

	for (unsigned i = 0; i < nlive; i++) {
		struct rec *r = live[i];
		int sq;

		observe(r);
		for (int m = 0; m < NMR; m++)
			valid += mr_ok(r, m);
		if ((sq = sim_qp(r)) == -ENOENT)
			continue;
		for (unsigned j = r->wr_scan; j < r->nwr; j++) {
			const struct wrec *w = &r->wr[j];

			if (w->st == W_OUT && w->required && (w->kind != K_RECV || sq == QSM_QP_ERR))
				model_fail("%s queue in %s (sim QP %d): %s %s wr %u has no completion after "
					   "everything settled", r->passive ? "passive" : "active",
					   qsm_conn_state_name(r->q), sq, w->signaled ? "signaled" : "flushed",
					   kind_names[w->kind], j);
		}
	}
	qsm_sim_get_stats(sim, &st);
	valid += srq_pool_mrs();
#ifdef QSM_MODEL_ALLOC
	/* a pool's registration on a device that failed for memory leaves the pool without keys
	 * there (qsm_pool_srq_keys: -ENODEV), counted in action_errors: never more MRs than valid */
	CHECK(st.mrs <= valid && valid - st.mrs <= pool_reg_failures_bound(),
	      "settled: the sim holds %u MRs, the live queues and the pools %u valid ones", st.mrs, valid);
#else
	CHECK(st.mrs == valid, "settled: the sim holds %u MRs, the live queues and the pools %u valid ones",
	      st.mrs, valid);
#endif
	/* max_recv_wr, exactly: one receive more is -ENOBUFS */
	settled = true;
	srq_settled();
	for (unsigned i = 0; i < nlive; i++) {
		struct rec *r = live[i];
		int sq = sim_qp(r);

		if ((sq == QSM_QP_INIT || sq == QSM_QP_RTS) && !drain_started(r) &&
		    r->n_out_recv >= r->ci->max_recv_wr)
			op_recv(r);
		/* and max_send_wr: now and then the send queue is filled with writes, signaled or
		 * not, alone or in lists, and one more, or a list longer than the slots left, is
		 * -ENOBUFS (expect_n); their completions come later */
		for (unsigned k = 0, fill = chance(20), lists = chance(50); fill && k <= r->ci->max_send_wr; k++) {
			if (sim_qp(r) != QSM_QP_RTS || drain_started(r) || r->gone)
				break;
			if (lists && chance(60))
				op_list(r, true);
			else
				op_rdma(r, true);
		}
	}
	settled = false;
	CHECK(!violation[0], "%s", violation);
	n_settles++;
	for (unsigned i = 0; i < nall; i++) {
		struct rec *r = all[i];

		if (r->gone && r->buf && r->gone_at + 2 <= n_settles) {
			free(r->buf);
			r->buf = NULL;
			free(r->wr);
			r->wr = NULL;
			r->nwr = r->wr_cap = r->wr_scan = 0;
		}
	}
}

/* Everything settles; held events come out; every timeout runs out: no removed device may
 * still be waiting for a reference (f). */
void quiesce_check(void)
{
	CHECK(sim_release() >= 0, "release");
	harness_run_for(&world, 8000);
	for (int d = 0; d < NDEV; d++)
		CHECK(qsm_sim_device_state(sim, dev_name[d]) != QSM_SIM_DEVICE_REMOVING,
		      "%s still REMOVING after everything settled and timed out", dev_name[d]);
	CHECK(!violation[0], "%s", violation);
	check_settled();
}

void one_step(void)
{
	unsigned x = below(1000);
	struct rec *r;

	if (x < 70) { for (unsigned n = 1 + below(3); n; n--) step_new_queue(); return; } x -= 70;
	if (x < 90) { if ((r = some_live(false))) do_connect(r); return; } x -= 90;
	if (x < 15) { if ((r = some_live(false))) do_disconnect(r); return; } x -= 15;
	if (x < 8) { if ((r = some_live(false))) do_destroy(r); return; } x -= 8;
	if (x < 30) { if ((r = some_live(false))) do_ready(r); return; } x -= 30;
	if (x < 40) { if ((r = some_live(true))) do_decide(r, chance(70)); return; } x -= 40;
	if (x < 20) { step_new_listener(); return; } x -= 20;
	if (x < 6) { step_destroy_listener(); return; } x -= 6;
	if (x < 170) { dispatch((int)below(NCTX), 1 + below(8)); return; } x -= 170;
	if (x < 120) { harness_settle(&world); return; } x -= 120;
	if (x < 90) {
		int t = harness_next_timer_ms(&world);

		if (t > 0 && chance(70))
			world.now_ns += (uint64_t)t * MS;
		else
			world.now_ns += (uint64_t)below(3000) * MS;
		return;
	}
	x -= 90;
	if (x < 60) {
		enum qsm_sim_fault f = armed_faults[below(N_ARMED_FAULTS)];

		step_fault(f, 1 + below(3));
		return;
	}
	x -= 60;
	if (x < 25) { step_fault(QSM_SIM_FAULT_HOLD, 1 + below(6)); return; } x -= 25;
	if (x < 45) { CHECK(sim_release() >= 0, "release"); return; } x -= 45;
	if (x < 15) { step_device_remove((int)below(NDEV)); return; } x -= 15;
	if (x < 25) { step_device_add((int)below(NDEV)); return; } x -= 25;
	if (x < 40) { if ((r = some_live(false))) step_qp_fatal(r); return; } x -= 40;
	/* the data path */
	if (x < 30) { if ((r = some_data_rec())) { observe(r); op_recv(r); } return; } x -= 30;
	if (x < 30) { if ((r = some_data_rec())) { observe(r); op_send(r, chance(20)); } return; } x -= 30;
	if (x < 15) { if ((r = some_data_rec())) { observe(r); op_rdma(r, true); } return; } x -= 15;
	if (x < 15) { if ((r = some_data_rec())) { observe(r); op_rdma(r, false); } return; } x -= 15;
	if (x < 15) { if ((r = some_data_rec())) { observe(r); op_list(r, false); } return; } x -= 15;
	if (x < 10) { if ((r = some_live(false))) op_mr(r); return; } x -= 10;
	/* the rest: handlers' own calls carry the step */
	harness_settle(&world);
}
