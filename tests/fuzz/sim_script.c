/* rdma-qsm fuzzing: an operation script over the sim fabric, checked by the model test's
 * invariants (tests/model) after every operation.  libFuzzer target (make fuzz).
 *
 * The input: its first 8 bytes seed the model's own choices (each queue's class, peer, timeouts,
 * reconnect policy and behaviour: what its handlers do, abort, destroy or post, tests/model),
 * the rest is the script: one byte an operation (enum op, modulo its count), then the bytes that
 * operation takes (which queue, which fault, how long).  Bytes that run out read as 0; at most
 * MAX_OPS operations are run.  The world is the model's: two ctxs on one sim, two devices, the
 * three listeners every run starts with.
 *
 * After every operation, check_all(): the counter identities of src/core/ctx.h and the sim's
 * delivered events, no callback after a destroy or a non-zero return, every live queue in a
 * non-final state with the QP its state allows, every downcall's return, every completion and
 * byte of data (model.h, (a)-(g), (D1)-(D7), (S1)-(S5)).  At the end, world_end(): everything is
 * destroyed and dispatched until quiet, every queue and device reached its end, the sim holds
 * nothing (ids, QPs, MRs, device references, events), the ctxs are freed; then the model's own
 * records are freed, so that ASan's leak check (libFuzzer's, per input) sees only the library.
 * A violated invariant aborts (check_shim.c): libFuzzer reports the input as a crash.
 *
 * QSM_FUZZ_TRACE=1 prints each operation of the script on stderr (for a reproducer).
 */
#include "model/model.h"
#include "fuzz/script.h"

#define MAX_OPS 256
#define MAX_QUIESCE 4           /* each runs 8 s of timers: more are settles (a fast input) */

enum op {
	OP_NEW_QUEUES, OP_CONNECT, OP_DISCONNECT, OP_DESTROY, OP_READY, OP_ACCEPT, OP_REJECT,
	OP_NEW_LISTENER, OP_DESTROY_LISTENER, OP_DISPATCH, OP_SETTLE, OP_TIME, OP_FAULT, OP_HOLD,
	OP_RELEASE, OP_DEVICE_REMOVE, OP_DEVICE_ADD, OP_QP_FATAL, OP_POST_RECV, OP_POST_SEND,
	OP_POST_WRITE, OP_POST_READ, OP_POST_LIST, OP_MR, OP_QUIESCE, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
	"new-queues", "connect", "disconnect", "destroy", "ready", "accept", "reject",
	"new-listener", "destroy-listener", "dispatch", "settle", "time", "fault", "hold",
	"release", "device-remove", "device-add", "qp-fatal", "post-recv", "post-send",
	"post-write", "post-read", "post-list", "mr", "quiesce",
};

/* A live queue by the script's byte (a passive one: the first from there). */
static struct rec *pick(struct script *s, bool passive)
{
	unsigned b = take(s);

	for (unsigned k = 0; k < nlive; k++) {
		struct rec *r = live[(b + k) % nlive];

		if (!passive || r->passive)
			return r;
	}
	return NULL;
}

static void time_passes(unsigned b)
{
	int t = harness_next_timer_ms(&world);

	if ((b & 1) && t > 0)
		world.now_ns += (uint64_t)t * MS;              /* to the next timer */
	else
		world.now_ns += (uint64_t)(b >> 1) * 25 * MS;  /* 0 to 3.2 s */
}

static unsigned quiesces;

static void run_op(enum op op, struct script *s)
{
	struct rec *r;
	unsigned b;

	switch (op) {
	case OP_NEW_QUEUES:
		for (b = 1 + take(s) % 3; b; b--)
			step_new_queue();
		break;
	case OP_CONNECT: if ((r = pick(s, false))) do_connect(r); break;
	case OP_DISCONNECT: if ((r = pick(s, false))) do_disconnect(r); break;
	case OP_DESTROY: if ((r = pick(s, false))) do_destroy(r); break;
	case OP_READY: if ((r = pick(s, false))) do_ready(r); break;
	case OP_ACCEPT: if ((r = pick(s, true))) do_decide(r, true); break;
	case OP_REJECT: if ((r = pick(s, true))) do_decide(r, false); break;
	case OP_NEW_LISTENER:
		b = take(s);
		step_new_listener_at(b & 0x80 ? "0.0.0.0" : dev_addr[b % NDEV], ports[(b >> 1) % 3]);
		break;
	case OP_DESTROY_LISTENER:
		b = take(s);
		if (nlisteners)
			step_destroy_listener_at(b % nlisteners);
		break;
	case OP_DISPATCH: b = take(s); dispatch((int)(b & 1), 1 + (b >> 1) % 8); break;
	case OP_SETTLE: harness_settle(&world); break;
	case OP_TIME: time_passes(take(s)); break;
	case OP_FAULT:
		b = take(s);
		step_fault(armed_faults[b % N_ARMED_FAULTS], 1 + take(s) % 3);
		break;
	case OP_HOLD: step_fault(QSM_SIM_FAULT_HOLD, 1 + take(s) % 6); break;
	case OP_RELEASE: CHECK(sim_release() >= 0, "release"); break;
	case OP_DEVICE_REMOVE: step_device_remove((int)(take(s) % NDEV)); break;
	case OP_DEVICE_ADD: step_device_add((int)(take(s) % NDEV)); break;
	case OP_QP_FATAL: if ((r = pick(s, false))) step_qp_fatal(r); break;
	case OP_POST_RECV: if ((r = pick(s, false))) { observe(r); op_recv(r); } break;
	case OP_POST_SEND: if ((r = pick(s, false))) { observe(r); op_send(r, take(s) & 1); } break;
	case OP_POST_WRITE: if ((r = pick(s, false))) { observe(r); op_rdma(r, true); } break;
	case OP_POST_READ: if ((r = pick(s, false))) { observe(r); op_rdma(r, false); } break;
	case OP_POST_LIST: if ((r = pick(s, false))) { observe(r); op_list(r, false); } break;
	case OP_MR: if ((r = pick(s, false))) op_mr(r); break;
	case OP_QUIESCE:
		if (quiesces++ < MAX_QUIESCE)
			quiesce_check();
		else
			harness_settle(&world);
		break;
	case OP_COUNT: break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct script s = { data, size };
	bool verbose = getenv("QSM_FUZZ_TRACE") != NULL;

	seed = 0;
	for (int i = 0; i < 8; i++)
		seed = seed << 8 | take(&s);
	rng = mix(seed);
	strict = true;
	quiesces = 0;
	world_new();
	for (step_no = 0; step_no < 3; step_no++)
		step_new_listener_at(dev_addr[step_no % NDEV], ports[step_no]);
	for (step_no = 1; s.n && step_no <= MAX_OPS; step_no++) {
		enum op op = (enum op)(take(&s) % OP_COUNT);

		if (verbose)
			fprintf(stderr, "qsm fuzz: step %u: %s (%u queues live)\n", step_no, op_names[op], nlive);
		run_op(op, &s);
		check_all();
	}
	nsteps = step_no - 1;
	world_end();
	world_free();
	return 0;
}
