/* rdma-qsm model test: the invariants checked after every step, and the world they are checked
 * on: made, ended (everything destroyed and accounted for) and freed.  The run is run.c's; the
 * operation-script fuzzer (tests/fuzz/sim_script.c) drives the same world and invariants. */
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
		/* every event dispatched to a machine took an edge or its unexpected path */
		CHECK(k.dispatched == k.transitions + k.unexpected,
		      "ctx%d: dispatched %llu != transitions %llu + unexpected %llu", c,
		      (unsigned long long)k.dispatched, (unsigned long long)k.transitions,
		      (unsigned long long)k.unexpected);
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

/* ---- the world ---- */

uint64_t env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : def;
}

/* The world of a run: the clock, the listeners' timeouts, the sim and its devices, the ctxs. */
void world_new(void)
{
	world.now_ns = 1000 * MS;
	listen_timeouts = (struct qsm_timeouts){
		.request_ms = some_ms(50, 50, 3000), .connect_ms = some_ms(50, 50, 3000),
		.handshake_ms = some_ms(50, 50, 3000), .disconnect_ms = some_ms(50, 50, 3000),
		.drain_ms = some_ms(50, 50, 3000),
	};
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

/* What the model itself holds, freed after world_end(), and every record and count of the run
 * back to zero: the next world_new() starts from scratch (the fuzzer runs one world per input). */
void world_free(void)
{
	for (unsigned i = 0; i < nall; i++) {
		free(all[i]->buf);
		free(all[i]->wr);
		free(all[i]);
	}
	free(all);
	free(live);
	free(msgs);
	srq_world_free();
	for (int c = 0; c < NCTX; c++) {
		free(by_serial[c]);
		by_serial[c] = NULL;
		by_serial_cap[c] = 0;
		compl_seen[c] = 0;
		tally[c] = (struct tally){ 0 };
	}
	all = live = NULL;
	msgs = NULL;
	nall = all_cap = nlive = live_cap = peak_live = nmsgs = msgs_cap = 0;
	n_active_made = n_passive_made = n_listeners_made = nlisteners = 0;
	n_faults = n_removals = n_adds = n_fatals = n_settles = enomem_settle = hold_epoch = 0;
	enomem_injected = hold_armed = quiet = settled = false;
	memset(&ds, 0, sizeof(ds));
	memset(listeners, 0, sizeof(listeners));
	pend = (struct pending_event){ 0 };
	violation[0] = 0;
}
