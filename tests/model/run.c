/* rdma-qsm model test: the run (QSM_MODEL_SEED and QSM_MODEL_STEPS pick it, the same seed replays
 * the same run) and its Check suite; the world and the invariants are invariants.c's. */
#include "check_main.h"
#include "model.h"

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
	clock_gettime(CLOCK_MONOTONIC, &t0);
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
	world_free();
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
