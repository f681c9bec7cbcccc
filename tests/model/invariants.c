/* rdma-qsm model test: the invariants checked after every step, and the run: QSM_MODEL_SEED and
 * QSM_MODEL_STEPS pick it, the same seed replays the same run. */
#include "check_main.h"
#include "model.h"

/* ---- the invariants ---- */

void check_accounting(void)
{
	struct qsm_sim_stats st;
	uint64_t taken = 0;

	for (int c = 0; c < NCTX; c++) {
		struct qsm_counters k;
		uint64_t sum = 0;

		CHECK(qsm_ctx_counters(ctx[c], &k, sizeof(k)) == 0, "counters");
		CHECK(k.popped + k.aborts + k.device_closes == k.dispatched + k.dropped + k.completions,
		      "ctx%d: popped %llu + aborts %llu + device closes %llu != dispatched %llu + dropped %llu + completions %llu",
		      c, (unsigned long long)k.popped, (unsigned long long)k.aborts, (unsigned long long)k.device_closes,
		      (unsigned long long)k.dispatched, (unsigned long long)k.dropped,
		      (unsigned long long)k.completions);
		CHECK(k.completions == compl_seen[c], "ctx%d: %llu completions counted, %llu handed to handlers",
		      c, (unsigned long long)k.completions, (unsigned long long)compl_seen[c]);
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
	srq_check_accounting();
}

void check_queue(struct rec *r)
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
	observe(r);
	if (r->expect_mrs_dead)
		for (int m = 0; m < NMR; m++)
			CHECK(!mr_ok(r, m), "%s queue in %s: MR %d still valid after device_removed",
			      r->passive ? "passive" : "active", name, m);
}

void check_all(void)
{
	CHECK(!violation[0], "%s", violation);
	check_accounting();
	for (unsigned i = 0; i < nlive; i++)
		check_queue(live[i]);
	CHECK(!violation[0], "%s", violation);
}

/* ---- the run ---- */

uint64_t env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : def;
}

void world_new(void)
{
	CHECK(qsm_sim_new(&sim) == 0, "sim");
	for (int d = 0; d < NDEV; d++)
		CHECK(qsm_sim_device_add(sim, dev_name[d], dev_addr[d]) == 0, "device_add");
	for (int c = 0; c < NCTX; c++) {
		struct qsm_ctx_opts o = { .now_ns = harness_clock, .now_arg = &world, .seed = seed + (uint64_t)c };

		CHECK(qsm_sim_fabric_new(sim, &fab[c]) == 0, "fabric");
		o.fabric = fab[c];
		CHECK(qsm_ctx_new(&o, &ctx[c]) == 0, "ctx");
		CHECK(qsm_ctx_set_trace(ctx[c], tracer, &tally[c]) == 0, "trace");
	}
	new_msg(); /* sequence number 0: no message */
	srq_world_new();
}

/* Destroy everything, let it close, and account for every object (d). */
void world_end(void)
{
	struct qsm_sim_stats st;

	quiet = true;
	for (int f = 0; f < QSM_SIM_FAULT_COUNT; f++)
		CHECK(qsm_sim_inject(sim, (enum qsm_sim_fault)f, 0) == 0, "disarm");
	CHECK(sim_release() >= 0, "release");
	for (int round = 0; round < 10; round++) {
		struct qsm_counters k0, k1;

		while (nlive)
			do_destroy(live[0]);
		while (nlisteners)
			step_destroy_listener();
		harness_run_for(&world, 60000);
		check_all();
		qsm_ctx_counters(ctx[0], &k0, sizeof(k0));
		qsm_ctx_counters(ctx[1], &k1, sizeof(k1));
		if (!nlive && !k0.queues_live && !k1.queues_live)
			break;
	}
	for (int c = 0; c < NCTX; c++) {
		struct qsm_counters k;

		qsm_ctx_counters(ctx[c], &k, sizeof(k));
		CHECK(k.queues_live == 0, "ctx%d: %llu queues live at the end", c, (unsigned long long)k.queues_live);
		CHECK(k.devices_live == 0, "ctx%d: %llu devices live at the end", c,
		      (unsigned long long)k.devices_live);
		CHECK(k.srqs_live == 0, "ctx%d: %llu SRQs live at the end", c, (unsigned long long)k.srqs_live);
	}
	srq_world_end();
	qsm_sim_get_stats(sim, &st);
	CHECK(!st.ids && !st.qps && !st.mrs && !st.device_refs && !st.events_pending && !st.srqs,
	      "left in the sim: %u ids, %u qps, %u mrs, %u device refs, %u events, %u SRQs", st.ids, st.qps,
	      st.mrs, st.device_refs, st.events_pending, st.srqs);
	for (int c = 0; c < NCTX; c++) {
		qsm_ctx_free(ctx[c]);
		ctx[c] = NULL;
	}
	qsm_sim_get_stats(sim, &st);
	CHECK(!st.ids && !st.qps && !st.mrs && !st.device_refs && !st.events_pending && !st.ids_leaked && !st.srqs,
	      "after freeing the ctxs: %u ids, %u qps, %u mrs, %u device refs, %u events, %u ids leaked",
	      st.ids, st.qps, st.mrs, st.device_refs, st.events_pending, st.ids_leaked);
	for (int d = 0; d < NDEV; d++)
		CHECK(qsm_sim_device_state(sim, dev_name[d]) != QSM_SIM_DEVICE_REMOVING,
		      "%s still REMOVING at the end", dev_name[d]);
	qsm_sim_free(sim);
	sim = NULL;
}

#ifdef QSM_MODEL_ALLOC
static const bool model_alloc_mode = true;
#else
static const bool model_alloc_mode = false;
#endif

static void run_model(unsigned default_steps)
{
	struct timespec t0, t1;

	seed = env_u64("QSM_MODEL_SEED", DEFAULT_SEED);
	nsteps = (unsigned)env_u64("QSM_MODEL_STEPS", default_steps);
	strict = env_u64("QSM_MODEL_STRICT", 1) != 0;
	rng = mix(seed);
	world.now_ns = 1000 * MS;
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
	       (double)(world.now_ns - 1000 * MS) / 1e9,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	printf("model: data: %u posts (-ENOTCONN %u, -EINVAL %u, -ENOBUFS %u, %u of them a full send queue), posted recv %u send %u "
	       "write %u read %u (%u had to fail); completions %u (success %u, flushed %u, errors %u), "
	       "%u discarded; completions lost %u; checked: %u receives (+%u empty), %u reads, %u writes; DRAINED %u (%u strict); "
	       "MRs registered %u, deregistered %u; reg_mr -ENODEV with a QP tolerated %u\n"
	       "model: lists: %u post_list calls of 2..%u WRs (%u went, %u WRs; -EINVAL %u, -ENOBUFS %u (%u settled), "
	       "-ENOTCONN %u); posted WITH_IMM %u, INLINE %u; checked: %u receives with imm_data, %u "
	       "completions in post order\n",
	       ds.post_calls, ds.enotconn, ds.einval, ds.enobufs, ds.sq_full, ds.posted[K_RECV], ds.posted[K_SEND],
	       ds.posted[K_WRITE], ds.posted[K_READ], ds.must_fail, ds.completions, ds.ok, ds.flushed,
	       ds.errors, ds.discarded, ds.lost, ds.recv_checked, ds.recv_empty, ds.read_checked, ds.write_checked,
	       ds.drained, ds.drained_strict, ds.regs, ds.deregs, ds.enodev_tolerated, ds.lists, LIST_MAX,
	       ds.lists - ds.list_einval - ds.list_enobufs - ds.list_enotconn, ds.list_wrs, ds.list_einval,
	       ds.list_enobufs, ds.list_enobufs_strict, ds.list_enotconn, ds.imm_posted, ds.inline_posted, ds.imm_checked,
	       ds.order_checked);
	printf("model: srq: %u made (%u again after their device left), %u gone; srq_low on the limit %u, SRQ_LIMIT "
	       "in REMOVING %u; %u posts (-EINVAL %u, -ENODEV %u, -ENOBUFS %u, %u settled), qsm_conn_post_recv "
	       "-EINVAL %u; completions %u (success %u, data checked %u); gone with their QP %u (%u found "
	       "filling the SRQ settled, in %u fills); LAST_WQE %u, DRAINED %u\n",
	       ds.srq_made, ds.srq_remade, ds.srq_gone, ds.srq_limit_lows, ds.srq_limit_removing, ds.srq_posts,
	       ds.srq_einval, ds.srq_enodev, ds.srq_enobufs, ds.srq_enobufs_strict, ds.srq_conn_einval,
	       ds.srq_completions, ds.srq_ok, ds.srq_checked, ds.srq_lost, ds.srq_probe_lost, ds.srq_probes,
	       ds.srq_last_wqe, ds.srq_drained);
	if (nsteps >= 10000 && !model_alloc_mode) {   /* enough of everything happened: not when memory is short */
		CHECK(n_active_made + n_passive_made >= 100 && peak_live >= 100,
		      "only %u queues, %u at once", n_active_made + n_passive_made, peak_live);
		CHECK(ds.recv_checked >= 50 && ds.read_checked >= 20 && ds.write_checked >= 20 &&
		      ds.enotconn >= 50 && ds.drained_strict >= 20 && ds.flushed >= 50,
		      "too little data path coverage: %u receives, %u reads, %u writes checked, "
		      "%u -ENOTCONN, %u DRAINED, %u flushes", ds.recv_checked, ds.read_checked,
		      ds.write_checked, ds.enotconn, ds.drained_strict, ds.flushed);
		CHECK(ds.list_wrs >= 2000 && ds.list_einval >= 200 && ds.list_enobufs_strict >= 10 &&
		      ds.imm_checked >= 50 && ds.inline_posted >= 200,
		      "too little list coverage: %u WRs posted in lists, %u lists -EINVAL, %u -ENOBUFS settled, "
		      "%u receives with imm_data, %u INLINE posted", ds.list_wrs, ds.list_einval,
		      ds.list_enobufs_strict, ds.imm_checked, ds.inline_posted);
		CHECK(ds.srq_remade >= 10 && ds.srq_limit_lows >= 20 && ds.srq_checked >= 50 &&
		      ds.srq_enobufs_strict >= 10 && ds.srq_last_wqe >= 20 && ds.srq_enodev >= 1,
		      "too little SRQ coverage: %u made again, %u limit calls, %u receives checked, %u -ENOBUFS "
		      "settled, %u LAST_WQE, %u -ENODEV", ds.srq_remade, ds.srq_limit_lows, ds.srq_checked,
		      ds.srq_enobufs_strict, ds.srq_last_wqe, ds.srq_enodev);
	}
	for (unsigned i = 0; i < nall; i++) {
		free(all[i]->buf);
		free(all[i]->wr);
		free(all[i]);
	}
	free(all);
	free(live);
	free(msgs);
	srq_world_free();
	for (int c = 0; c < NCTX; c++)
		free(by_serial[c]);
}

#ifndef QSM_MODEL_ALLOC
START_TEST(test_random_interleavings_keep_every_invariant)
{
	run_model(DEFAULT_STEPS);
}
END_TEST
#endif

#ifdef QSM_MODEL_ALLOC
/* tests/check_model_alloc (model/alloc.c): the same run with every Nth allocation the library
 * makes while it dispatches failing; a child process per N (Check's fork), each from scratch. */
static const unsigned alloc_every[] = { 3, 7, 13, 50, 200, 1000 };

START_TEST(test_model_under_allocation_failure)
{
	model_alloc_every(alloc_every[_i]);
	run_model(10000);
	model_alloc_every(0);
	printf("model under alloc-fail every %u: events lost 0 (%lu of %lu allocations the library made "
	       "while dispatching failed; every invariant held after each of %u steps, every queue ended)\n",
	       alloc_every[_i], alloc_failed, alloc_seen, nsteps);
}
END_TEST
#endif

static Suite *model_suite(void)
{
	Suite *s = suite_create("model");
	TCase *t = tcase_create("random");

	tcase_set_timeout(t, 600);
#ifdef QSM_MODEL_ALLOC
	tcase_add_loop_test(t, test_model_under_allocation_failure, 0,
			    (int)(sizeof(alloc_every) / sizeof(alloc_every[0])));
#else
	tcase_add_test(t, test_random_interleavings_keep_every_invariant);
#endif
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(model_suite)
