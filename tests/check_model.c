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
#include <qsm/data.h>
#include <qsm/sim.h>

#include "check_main.h"
#include "harness.h"

/*
 * QSM_MODEL_SEED picks the seed (default: a fixed one, so CI is deterministic), and
 * QSM_MODEL_STEPS the number of steps (default 50000, about 3-5 s, 40 s under valgrind).
 * Every failure names the seed and the step, and the same seed replays the same run.
 *
 * Invariants, after every step:
 *  (a) accounting, per ctx: popped + aborts == dispatched + dropped + completions; every
 *      dispatch is traced exactly once and counted once in events[], every orphan traced
 *      once; the ctxs took from the fabric exactly what the sim delivered; `completions`
 *      is exactly the number of completion handler calls;
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
 *  (d) nothing leaked: sim ids, qps, MRs, device refs, pending events, queues, devices all 0.
 *
 * The data path (qsm/data.h): every queue has a buffer with a receive area, a send area, a
 * remotely writable area, a remotely readable area (a known pattern) and a read landing area,
 * registered as three MRs (in qp_ready, or later), and posts receives, sends, RDMA writes and
 * reads (valid, and sometimes with bad keys, ranges, SGE counts or flags) from random steps
 * and from every kind of handler, including the completion handler, which also aborts or
 * destroys its queue now and then.  Every post is tracked (wr_id, kind, signaled, QP
 * generation), and:
 *  (D1) a post returns -ENOTCONN exactly when the queue has no QP or its drain started
 *       (active DRAINING/CLOSING, passive DRAINING), -EINVAL for bad flags / SGE counts
 *       (QSM_MAX_SGE, then the class's caps) and for a send before the QP is RTS, -ENOMEM
 *       for a receive only with max_recv_wr receives outstanding, 0 otherwise; a QP never
 *       exists in a state the man page says has none, except inside qp_ready;
 *  (D2) every completion names a WR posted successfully on that queue's current QP, and
 *       comes at most once: none after the QP was destroyed, after DRAINED (trace record),
 *       after destroy / abort / release; with the WR's opcode, byte_len 0 unless SUCCESS,
 *       never SUCCESS for an unsignaled WR, for a WR that had to fail (bad key, range) or
 *       after an error completion on the same QP, FLUSH_ERR for a WR posted in ERR, no
 *       LOC_PROT_ERR while the lkey's MR is still registered; a destroyed queue's data
 *       calls return -EINVAL;
 *  (D3) at DRAINED every receive and signaled WR of that QP has completed (unless a held
 *       event may have been reordered), and once everything settled every signaled WR of a
 *       live QP, and every receive of a QP in ERR, has completed;
 *  (D4) data: a receive holds exactly the message a send of its peer carried (byte_len,
 *       header, payload), each message is received at most once; a read returns the
 *       pattern of the memory its rkey names; a write's bytes are in the target's memory;
 *  (D5) MRs: reg_mr works on a queue that has a QP while every device is up, gives distinct
 *       non-zero keys; MRs are invalid after device_removed; once settled the sim holds
 *       exactly the MRs the live queues hold valid, and none at the end.
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

static void world_fail(const char *msg)
{
	model_fail("%s", msg);
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

/* splitmix64: nearby seeds (1, 2, 3...) start far apart, so a sweep over them explores */
static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z ? z : 1;
}

static unsigned below(unsigned n)
{
	return n ? (unsigned)(rnd() % n) : 0;
}

static bool chance(unsigned pct)
{
	return below(100) < pct;
}

/* ---- the world ---- */

static struct qsm_sim *sim;
static struct qsm_fabric *fab[NCTX];
static struct qsm_ctx *ctx[NCTX];
/* the virtual clock and the order ctxs are dispatched in: ctx[0] first */
static struct harness world = { .ctx = { &ctx[0], &ctx[1] }, .bound = 200000, .on_failure = world_fail };
static const char *const dev_name[NDEV] = { "sim0", "sim1" };
static const char *const dev_addr[NDEV] = { "192.0.2.1", "192.0.2.2" };
static const uint16_t ports[] = { 4420, 4421, 4422 };
static struct qsm_timeouts listen_timeouts;   /* every listener's, so passive queues know theirs */

/* HOLD may put a completion behind the DRAINED of its QP: WRs posted while one could be
 * held are not required to complete before DRAINED (D3 at DRAINED; the settled check holds). */
static uint32_t hold_epoch;
static bool hold_armed;

/* A create_id that QSM_SIM_FAULT_ENOMEM failed while a queue attached to its device (the
 * registry's sentinel id) used to leave the queue connected with no device (reg_mr -ENODEV
 * for the whole connection); the runtime now retries such an attempt.  Strict by default:
 * QSM_MODEL_STRICT=0 tolerates it again, for bisecting old builds. */
static bool strict;
static bool enomem_injected;
static unsigned enomem_settle;
static unsigned n_settles;

static int sim_release(void)
{
	hold_armed = false;
	return qsm_sim_release(sim);
}

/* ---- the data path's model ---- */

#define SLOT 64                 /* the largest message, write, read and receive */
#define NRSLOT 10               /* receive slots (more than max_recv_wr: -ENOMEM is tried) */
#define NSSLOT 2                /* send / write sources */
#define NWSLOT 8                /* remotely writable slots */
#define NLSLOT 4                /* read landing slots; the last one for unsignaled reads */
#define RECV_OFF 0u
#define SEND_OFF (RECV_OFF + NRSLOT * SLOT)
#define RW_OFF (SEND_OFF + NSSLOT * SLOT)
#define RW_LEN (NWSLOT * SLOT)
#define RO_OFF (RW_OFF + RW_LEN)
#define RO_LEN 256u
#define RD_OFF (RO_OFF + RO_LEN)
#define BUF_LEN (RD_OFF + NLSLOT * SLOT)
#define HDR 16u                 /* magic, length, message sequence number */
#define MSG_MAGIC 0x51534d44u
#define POISON 0xee

enum { MR_LOCAL, MR_RW, MR_RO, NMR };
static const struct {
	uint32_t off, len;
	int access;
} mr_spec[NMR] = {
	[MR_LOCAL] = { 0, BUF_LEN, QSM_ACCESS_LOCAL_WRITE },
	[MR_RW] = { RW_OFF, RW_LEN, QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ },
	[MR_RO] = { RO_OFF, RO_LEN, QSM_ACCESS_REMOTE_READ },
};

enum wr_kind { K_RECV, K_SEND, K_WRITE, K_READ, K_COUNT };
static const char *const kind_names[] = { "RECV", "SEND", "WRITE", "READ" };
static const enum qsm_wr_opcode kind_op[] = { QSM_WR_RECV, QSM_WR_SEND, QSM_WR_RDMA_WRITE, QSM_WR_RDMA_READ };

enum wr_state {
	W_NEVER,                /* its post failed */
	W_OUT,                  /* posted, no completion yet */
	W_DONE,                 /* completed */
	W_GONE_QP,              /* its QP was destroyed first: no completion, ever */
	W_GONE_DRAINED,         /* its QP reached DRAINED first */
	W_GONE_DEAD,            /* its queue was destroyed, aborted or released first */
};
static const char *const wr_state_names[] = {
	"whose post failed", "", "already completed", "whose QP was destroyed",
	"whose QP was drained (DRAINED)", "whose queue was destroyed",
};

struct wrec {
	uint64_t seq;           /* send / write: the message */
	uint32_t gen;           /* the queue's QP generation at the post */
	uint32_t hold_epoch;
	uint32_t len;           /* bytes sent / written / read; a receive's capacity */
	uint32_t toff;          /* write / read: offset in the target's area */
	int32_t target;         /* write / read: the rec whose memory the rkey names, or -1 */
	uint8_t kind, st, nsge;
	int8_t slot;            /* receive / read landing slot, or -1 */
	bool signaled, required, must_fail, in_err, hold_armed, check;
	bool local_ok;          /* its SGEs are covered by the queue's valid local MR */
	uint32_t lkey;          /* the lkey of its SGEs (0: none) */
	struct qsm_sge sge[2];  /* receive / read: where the data lands */
};

/* Messages (sends and writes) by sequence number. */
struct msg {
	int32_t sender;
	uint32_t len;
	uint8_t kind;           /* K_SEND, K_WRITE, or K_COUNT: never posted */
	uint8_t received;
};
static struct msg *msgs;
static unsigned nmsgs, msgs_cap;

/* Per class: the QP caps it asks for (as the runtime resolves them through super). */
struct cinfo {
	const struct qsm_class *cls;
	uint32_t max_recv_wr, send_sge, recv_sge;
};
static struct cinfo cinfo[3];

static struct {
	unsigned posted[K_COUNT], post_calls, enotconn, einval, enomem, must_fail;
	unsigned completions, ok, flushed, errors, discarded, drained, drained_strict;
	unsigned recv_checked, recv_empty, read_checked, write_checked, regs, deregs, enodev_tolerated;
} ds;
static uint64_t compl_seen[NCTX];

/* ---- tracing ---- */

struct tally {
	uint64_t records, fabric;
};
static struct tally tally[NCTX];

struct rec;
static struct rec **by_serial[NCTX];  /* a queue's trace id (per-ctx serial) -> rec */
static unsigned by_serial_cap[NCTX];
static struct {
	struct rec *r;
	int event;
} pend;                               /* the on_event just called: its trace record follows */

static void drained(struct rec *r, int status);

static void *grow_to(void *p, unsigned *cap, size_t elem, unsigned first)
{
	*cap = *cap ? *cap * 2 : first;
	p = realloc(p, (size_t)*cap * elem);
	ck_assert_ptr_nonnull(p);
	return p;
}

static void *grow(void *p, unsigned *cap, size_t elem)
{
	return grow_to(p, cap, elem, 256);
}

static void tracer(const struct qsm_trace_record *t, void *arg)
{
	struct tally *y = arg;
	int c = (int)(y - tally);
	struct rec *r;

	if (!strcmp(t->kind, "fabric")) {
		y->fabric++;
		return;
	}
	y->records++;
	if (!strcmp(t->kind, "listener") && !t->to && t->event &&
	    (!strcmp(t->event, "RETRY") || !strcmp(t->event, "LISTEN") || !strcmp(t->event, "DEVICE_ADDED")))
		violate("listener#%u: stale %s in %s", t->id, t->event, t->from);
	if (strcmp(t->kind, "conn") && strcmp(t->kind, "passive"))
		return;
	/* Learn the queue's serial from the on_event handler called in the same step. */
	if (pend.r && t->to && t->event && !strcmp(t->event, qsm_event_name(pend.event))) {
		while (t->id >= by_serial_cap[c]) {
			unsigned old = by_serial_cap[c];

			by_serial[c] = grow(by_serial[c], &by_serial_cap[c], sizeof(**by_serial));
			memset(by_serial[c] + old, 0, (by_serial_cap[c] - old) * sizeof(**by_serial));
		}
		if (by_serial[c][t->id] && by_serial[c][t->id] != pend.r)
			violate("trace id %u of ctx%d names two queues", t->id, c);
		by_serial[c][t->id] = pend.r;
	}
	pend.r = NULL;
	if (t->to && t->event && !strcmp(t->event, "DRAINED") && t->id < by_serial_cap[c] &&
	    (r = by_serial[c][t->id]))
		drained(r, t->status);
}

/* ---- queues the model knows ---- */

struct rec {
	struct qsm_conn *q;
	int c;                      /* its ctx */
	unsigned idx;               /* in all[] */
	bool passive;
	bool gone;                  /* destroyed, aborted, released: no callback may follow */
	unsigned live_idx;
	uint64_t entered_ns;        /* arrival in the current state */
	struct qsm_timeouts timeouts;
	/* behaviour */
	bool auto_ready;
	bool defer;                 /* passive: the request handler decides nothing */
	unsigned abort_pm, destroy_pm, downcall_pm, data_pm;   /* per mille of callbacks */
	unsigned reject_pct;
	bool decided;               /* passive: accept or reject returned 0 once */
	bool lazy_mr;               /* registers later, not in qp_ready */
	bool repost;                /* posts a receive for each one completed */
	unsigned init_recvs;
	/* data path */
	const struct cinfo *ci;
	uint8_t *buf;               /* freed two settles after the queue is gone */
	struct qsm_mr *mr[NMR];
	uint32_t rkey[NMR], old_rkey[NMR], lkey[NMR];
	struct wrec *wr;
	unsigned nwr, wr_cap, wr_scan;   /* below wr_scan nothing is outstanding */
	unsigned n_out_recv;
	uint32_t gen;               /* QP generation: qp_ready counts them */
	uint32_t err_gen;           /* the generation that had an error completion */
	unsigned err_wi;            /* its first one */
	int err_status;
	bool qp_up;                 /* the model believes gen's QP exists */
	bool in_qp_ready;
	bool expect_mrs_dead;       /* device_removed ran: every MR is deregistered now */
	int32_t peer;               /* the rec at the other end (private data), or -1 */
	uint32_t peer_gen;          /* active: the generation it was learnt for */
	uint64_t rw_last[NWSLOT];   /* the last write posted to each writable slot */
	uint16_t rslots;            /* receive slots in use */
	uint8_t lslots;             /* read landing slots in use */
	unsigned send_rr;
	unsigned gone_at;           /* settles done when it went */
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

static uint8_t ro_byte(unsigned idx, uint32_t j)
{
	return (uint8_t)(idx * 29u + j * 13u + 5u);
}

static struct rec *rec_new(struct qsm_conn *q, int c, bool passive)
{
	struct rec *r = calloc(1, sizeof(*r));

	ck_assert_ptr_nonnull(r);
	r->q = q;
	r->c = c;
	r->passive = passive;
	r->entered_ns = world.now_ns;
	r->auto_ready = !chance(15);
	r->defer = passive && chance(20);
	r->reject_pct = passive ? (chance(20) ? 50 : 0) : 0;
	r->abort_pm = chance(20) ? 1 + below(10) : 0;
	r->destroy_pm = chance(20) ? 1 + below(10) : 0;
	r->downcall_pm = chance(50) ? 20 + below(100) : 0;
	r->data_pm = chance(60) ? 50 + below(200) : 0;
	r->lazy_mr = chance(15);
	r->repost = !chance(15);
	r->ci = qsm_conn_user(q);
	ck_assert_ptr_nonnull(r->ci);
	r->init_recvs = chance(10) ? 0 : chance(5) ? r->ci->max_recv_wr + 1 : 1 + below(r->ci->max_recv_wr);
	r->peer = -1;
	r->buf = malloc(BUF_LEN);
	ck_assert_ptr_nonnull(r->buf);
	memset(r->buf, 0, BUF_LEN);
	if (passive)
		r->timeouts = listen_timeouts;
	if (nall == all_cap)
		all = grow(all, &all_cap, sizeof(*all));
	r->idx = nall;
	for (uint32_t j = 0; j < RO_LEN; j++)
		r->buf[RO_OFF + j] = ro_byte(r->idx, j);
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

static void wr_finish(struct rec *r, struct wrec *w, enum wr_state st)
{
	w->st = (uint8_t)st;
	if (w->kind == K_RECV) {
		r->n_out_recv--;
		r->rslots &= (uint16_t)~(1u << w->slot);
	} else if (w->kind == K_READ && w->slot >= 0 && w->slot < NLSLOT - 1) {
		r->lslots &= (uint8_t)~(1u << w->slot);
	}
	if (st != W_DONE)
		ds.discarded++;
}

/* Every WR still outstanding gets no completion from now on. */
static void discard(struct rec *r, enum wr_state st)
{
	for (unsigned i = r->wr_scan; i < r->nwr; i++)
		if (r->wr[i].st == W_OUT)
			wr_finish(r, &r->wr[i], st);
	r->wr_scan = r->nwr;
}

static void mark_gone(struct rec *r)
{
	if (r->gone)
		return;
	r->gone = true;
	r->gone_at = n_settles;
	discard(r, W_GONE_DEAD);
	/* the queue owns the handles: they go when it closes */
	for (int m = 0; m < NMR; m++)
		r->mr[m] = NULL;
	live[r->live_idx] = live[--nlive];
	live[r->live_idx]->live_idx = r->live_idx;
}

/* The QP of the current generation is gone: what it held completes never. */
static void observe(struct rec *r)
{
	if (r->gone || !r->qp_up)
		return;
	if (qsm_conn_qp_state(r->q) == -ENOENT) {
		discard(r, W_GONE_QP);
		r->qp_up = false;
	}
}

static bool tainted(const struct wrec *w)
{
	return w->hold_armed || w->hold_epoch != hold_epoch;
}

/* The queue took a DRAINED edge: the QP's flushes came before the drain marker's (D3). */
static void drained(struct rec *r, int status)
{
	if (r->gone)
		return;
	ds.drained++;
	if (qsm_conn_qp_state(r->q) != -ENOENT)
		violate("%s queue in %s still has a QP after its DRAINED edge", r->passive ? "passive" : "active",
			qsm_conn_state_name(r->q));
	if (status == 0) {
		ds.drained_strict++;
		for (unsigned i = r->wr_scan; i < r->nwr; i++) {
			const struct wrec *w = &r->wr[i];

			if (w->st == W_OUT && w->required && w->gen == r->gen && !tainted(w))
				violate("%s queue: %s %s wr %u of QP #%u has no completion at DRAINED",
					r->passive ? "passive" : "active", w->signaled ? "signaled" : "flushed",
					kind_names[w->kind], i, w->gen);
		}
	}
	discard(r, W_GONE_DRAINED);
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

/* Private data: "QM" + the active rec's index + 1 on connect, "QP" + the passive's on accept. */
static void put_tag(uint8_t *p, char side, unsigned idx)
{
	uint32_t v = idx + 1;

	p[0] = 'Q';
	p[1] = (uint8_t)side;
	memcpy(p + 2, &v, 4);
}

static int get_tag(const struct qsm_event_info *ev, char side)
{
	const uint8_t *p = ev->private_data;
	uint32_t v;

	if (!p || ev->private_data_len < 6 || p[0] != 'Q' || p[1] != (uint8_t)side)
		return -1;
	memcpy(&v, p + 2, 4);
	return v >= 1 && v <= nall ? (int)(v - 1) : -2;
}

static void do_decide(struct rec *r, bool accept)
{
	int want = !r->passive ? -EOPNOTSUPP
		   : qsm_conn_state(r->q) != QSM_ACCEPT_REQUESTED ||
			     !has_edge(r, accept ? QSM_EV_ACCEPT : QSM_EV_REJECT) ? -EINVAL
		   : r->decided ? -EALREADY : 0; /* one decision per request */
	uint8_t tag[6];
	int got;

	put_tag(tag, 'P', r->idx);
	got = accept ? qsm_conn_accept(r->q, tag, sizeof(tag)) : qsm_conn_reject(r->q, "no", 2);
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
	/* The queue stays allocated until its DESTROY is dispatched: the data calls refuse it. */
	if (!quiet && chance(10)) {
		struct qsm_sge sge = { (uintptr_t)r->buf, 16, r->lkey[MR_LOCAL] };
		struct qsm_mr *mr = NULL;
		int a = qsm_conn_post_recv(r->q, 1, &sge, 1);
		int b = qsm_conn_post_send(r->q, 2, &sge, 1, QSM_POST_SIGNALED);
		int c = qsm_conn_reg_mr(r->q, r->buf, BUF_LEN, QSM_ACCESS_LOCAL_WRITE, &mr);

		if (a != -EINVAL || b != -EINVAL || c != -EINVAL)
			violate("destroyed queue: post_recv %d, post_send %d, reg_mr %d, want -EINVAL", a, b, c);
		if (c == 0)
			qsm_mr_dereg(mr);
	}
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

/* ---- the data path: MRs ---- */

static bool all_devices_up(void)
{
	for (int d = 0; d < NDEV; d++)
		if (qsm_sim_device_state(sim, dev_name[d]) != QSM_SIM_DEVICE_UP)
			return false;
	return true;
}

static int sim_qp(const struct rec *r)
{
	return qsm_sim_qp_state(sim, fab[r->c], r->q);
}

static bool mr_ok(const struct rec *r, int m)
{
	return !r->gone && r->mr[m] && qsm_mr_valid(r->mr[m]);
}

static void reg_one(struct rec *r, int m)
{
	struct qsm_mr *mr = NULL;
	int sq = sim_qp(r);
	int ret = qsm_conn_reg_mr(r->q, r->buf + mr_spec[m].off, mr_spec[m].len, mr_spec[m].access, &mr);

	if (ret == 0) {
		uint32_t lk = qsm_mr_lkey(mr), rk = qsm_mr_rkey(mr);

		if (!qsm_mr_valid(mr) || !lk || !rk || lk == rk)
			violate("reg_mr: valid %d, lkey %u, rkey %u", qsm_mr_valid(mr), lk, rk);
		r->mr[m] = mr;
		r->old_rkey[m] = r->rkey[m];
		r->rkey[m] = rk;
		r->lkey[m] = lk;
		r->expect_mrs_dead = false;
		ds.regs++;
		return;
	}
	if (ret != -ENODEV)
		violate("reg_mr on a %s queue in %s: %d", r->passive ? "passive" : "active",
			qsm_conn_state_name(r->q), ret);
	else if (sq != -ENOENT && all_devices_up() && !strict && enomem_injected &&
		 n_settles <= enomem_settle + 2)
		ds.enodev_tolerated++;
	else if (sq != -ENOENT && all_devices_up())
		violate("reg_mr on a %s queue in %s with a QP (%d), every device up: -ENODEV",
			r->passive ? "passive" : "active", qsm_conn_state_name(r->q), sq);
}

static void dereg_one(struct rec *r, int m)
{
	int ret;

	if (!r->mr[m])
		return;
	ret = qsm_mr_dereg(r->mr[m]);
	if (ret != 0)
		violate("mr_dereg: %d", ret);
	r->mr[m] = NULL;
	ds.deregs++;
}

static void ensure_mrs(struct rec *r)
{
	for (int m = 0; m < NMR && !r->gone; m++) {
		if (mr_ok(r, m))
			continue;
		if (r->mr[m] && chance(50))
			dereg_one(r, m);  /* else the queue frees the dead handle when it closes */
		r->mr[m] = NULL;
		reg_one(r, m);
	}
}

static void op_mr(struct rec *r)
{
	unsigned x = below(20);
	int m = (int)below(NMR);

	if (r->gone)
		return;
	if (x < 8) {
		ensure_mrs(r);
	} else if (x < 13) {
		dereg_one(r, m);
	} else if (x < 18) {
		dereg_one(r, m);
		reg_one(r, m);
	} else {
		/* bad arguments: remote write without local write (ibv_reg_mr), or no length */
		struct qsm_mr *mr = NULL;
		bool nolen = x == 19;
		int ret = qsm_conn_reg_mr(r->q, r->buf, nolen ? 0 : BUF_LEN, QSM_ACCESS_REMOTE_WRITE, &mr);

		if (ret != -EINVAL) /* whatever the state: arguments are checked first */
			violate("reg_mr with %s: %d", nolen ? "length 0" : "REMOTE_WRITE alone", ret);
		if (ret == 0)
			qsm_mr_dereg(mr);
	}
}

/* ---- the data path: posts (D1) ---- */

static bool drain_started(const struct rec *r)
{
	int s = qsm_conn_state(r->q);

	return r->passive ? s == QSM_ACCEPT_DRAINING : s == QSM_CM_DRAINING || s == QSM_CM_CLOSING;
}

/* The man page: "The queue has no QP" in these states. */
static bool doc_no_qp(const struct rec *r)
{
	switch (qsm_conn_state(r->q)) {
	case QSM_CM_IDLE: case QSM_CM_ADDR_RESOLVING: case QSM_CM_ROUTE_RESOLVING:
	case QSM_CM_RECONNECT_WAIT: case QSM_CM_FAILED: case QSM_CM_CLOSED:
		return !r->passive;
	default:
		break;
	}
	switch (qsm_conn_state(r->q)) {
	case QSM_ACCEPT_NEW: case QSM_ACCEPT_REQUESTED: case QSM_ACCEPT_CLOSED:
		return r->passive;
	default:
		return false;
	}
}

#define MAYBE_ENOMEM 1
/* Everything settled: every completion is in, the model's count of receives outstanding
 * is the QP's (else it may count some that a send used already). */
static bool settled;

static int expect_post(struct rec *r, int kind, int nsge, bool bad_flags, int *sq)
{
	*sq = sim_qp(r);
	if (*sq != -ENOENT && doc_no_qp(r) && !r->in_qp_ready)
		violate("%s queue in %s has a QP (%d) outside qp_ready", r->passive ? "passive" : "active",
			qsm_conn_state_name(r->q), *sq);
	if (bad_flags || nsge < 0 || nsge > QSM_MAX_SGE)
		return -EINVAL;
	if (*sq == -ENOENT || drain_started(r))
		return -ENOTCONN;
	if ((uint32_t)nsge > (kind == K_RECV ? r->ci->recv_sge : r->ci->send_sge))
		return -EINVAL;
	if (*sq == QSM_QP_ERR)
		return 0;       /* flushed */
	if (kind != K_RECV && *sq != QSM_QP_RTS)
		return -EINVAL; /* the sim: not ready to send */
	if (kind == K_RECV && r->n_out_recv >= r->ci->max_recv_wr)
		return settled ? -ENOMEM : MAYBE_ENOMEM;
	return 0;
}

/* A WR the queue is about to post: its wr_id is its index, never reused. */
static struct wrec *wr_add(struct rec *r, int kind, uint64_t *wr_id)
{
	struct wrec *w;

	if (r->nwr == r->wr_cap)
		r->wr = grow_to(r->wr, &r->wr_cap, sizeof(*r->wr), 8);
	*wr_id = ((uint64_t)(r->idx + 1) << 32) | r->nwr;
	w = &r->wr[r->nwr++];
	memset(w, 0, sizeof(*w));
	w->kind = (uint8_t)kind;
	w->st = W_NEVER;
	w->gen = r->gen;
	w->hold_epoch = hold_epoch;
	w->hold_armed = hold_armed;
	w->slot = -1;
	w->target = -1;
	return w;
}

/* Checks a post's return (D1); true if the WR is posted. */
static bool posted(struct rec *r, struct wrec *w, int want, int got, int sq, int nsge)
{
	ds.post_calls++;
	ds.enotconn += got == -ENOTCONN;
	ds.einval += got == -EINVAL;
	ds.enomem += got == -ENOMEM;
	if (want == MAYBE_ENOMEM ? got != 0 && got != -ENOMEM : got != want) {
		violate("post %s (nsge %d) on a %s queue in %s (QP %d, sim QP %d, %u receives out): %d, want %d",
			kind_names[w->kind], nsge, r->passive ? "passive" : "active", qsm_conn_state_name(r->q),
			qsm_conn_qp_state(r->q), sq, r->n_out_recv, got, want == MAYBE_ENOMEM ? 0 : want);
		return false;
	}
	if (got != 0)
		return false;
	w->st = W_OUT;
	w->in_err = sq == QSM_QP_ERR;
	w->required = w->kind == K_RECV || w->signaled || w->in_err;
	ds.posted[w->kind]++;
	ds.must_fail += w->must_fail;
	if (w->kind == K_RECV)
		r->n_out_recv++;
	return true;
}

static int free_slot(unsigned used, int n)
{
	int start = (int)below((unsigned)n);

	for (int i = 0; i < n; i++) {
		int s = (start + i) % n;

		if (!(used & (1u << s)))
			return s;
	}
	return -1;
}

/* One or two SGEs over a slot: [0, a) and [SLOT/2, SLOT/2 + len - a). */
static int lay_out(struct qsm_sge *sge, uint8_t *base, uint32_t len, uint32_t lkey, uint32_t max_sge)
{
	if (max_sge >= 2 && len >= 2 && chance(50)) {
		uint32_t a = len / 2;

		sge[0] = (struct qsm_sge){ (uintptr_t)base, a, lkey };
		sge[1] = (struct qsm_sge){ (uintptr_t)base + SLOT / 2, len - a, lkey };
		return 2;
	}
	sge[0] = (struct qsm_sge){ (uintptr_t)base, len, lkey };
	return 1;
}

static void gather(const struct qsm_sge *sge, int nsge, uint8_t *out, uint32_t len)
{
	uint32_t done = 0;

	for (int i = 0; i < nsge && done < len; i++) {
		uint32_t n = sge[i].length < len - done ? sge[i].length : len - done;

		memcpy(out + done, (const void *)(uintptr_t)sge[i].addr, n);
		done += n;
	}
}

static void scatter(const struct qsm_sge *sge, int nsge, const uint8_t *in)
{
	for (int i = 0, off = 0; i < nsge; off += (int)sge[i].length, i++)
		memcpy((void *)(uintptr_t)sge[i].addr, in + off, sge[i].length);
}

static void build_msg(uint8_t *out, uint64_t seq, uint32_t len)
{
	uint32_t magic = MSG_MAGIC;

	if (len < HDR)
		return;
	memcpy(out, &magic, 4);
	memcpy(out + 4, &len, 4);
	memcpy(out + 8, &seq, 8);
	for (uint32_t i = HDR; i < len; i++)
		out[i] = (uint8_t)(seq * 131u + i * 7u + (seq >> 7));
}

static uint64_t new_msg(void)
{
	if (nmsgs == msgs_cap)
		msgs = grow(msgs, &msgs_cap, sizeof(*msgs));
	msgs[nmsgs] = (struct msg){ .sender = -1, .kind = K_COUNT };
	return nmsgs++;
}

/* Sometimes an SGE count the QP does not take (its caps, or QSM_MAX_SGE). */
static int odd_nsge(const struct rec *r, int kind, int nsge, struct qsm_sge *sge)
{
	uint32_t cap = kind == K_RECV ? r->ci->recv_sge : r->ci->send_sge;
	int n;

	if (!chance(3))
		return nsge;
	n = chance(30) ? QSM_MAX_SGE + 1 : (int)cap + 1;
	for (int i = nsge; i < n; i++)
		sge[i] = (struct qsm_sge){ (uintptr_t)r->buf, 0, r->lkey[MR_LOCAL] };
	return n;
}

static void op_recv(struct rec *r)
{
	struct qsm_sge sge[QSM_MAX_SGE + 1];
	uint64_t wr_id;
	struct wrec *w;
	int slot, nsge, want, got, sq;
	uint32_t cap, lkey = r->lkey[MR_LOCAL];
	bool bad = !mr_ok(r, MR_LOCAL);
	uint8_t *base;

	if (r->gone || (slot = free_slot(r->rslots, NRSLOT)) < 0)
		return;
	base = r->buf + RECV_OFF + (uint32_t)slot * SLOT;
	if (chance(3)) {
		lkey = r->lkey[MR_RW];   /* an lkey whose MR does not cover the slot */
		bad = true;
	}
	cap = chance(70) ? SLOT : chance(65) ? 48 + below(SLOT - 48) : HDR + below(48 - HDR);
	nsge = chance(2) ? 0 : lay_out(sge, base, cap, lkey, r->ci->recv_sge);
	if (!nsge)
		cap = 0;
	nsge = odd_nsge(r, K_RECV, nsge, sge);
	memset(base, POISON, SLOT);
	w = wr_add(r, K_RECV, &wr_id);
	w->signaled = true;
	w->must_fail = bad && nsge > 0;
	w->local_ok = !bad;
	w->lkey = nsge > 0 ? sge[0].lkey : 0;
	w->len = cap;
	w->nsge = (uint8_t)(nsge < 2 ? nsge : 2);
	memcpy(w->sge, sge, sizeof(w->sge));
	want = expect_post(r, K_RECV, nsge, false, &sq);
	got = qsm_conn_post_recv(r->q, wr_id, sge, nsge);
	if (posted(r, w, want, got, sq, nsge)) {
		w->slot = (int8_t)slot;
		r->rslots |= (uint16_t)(1u << slot);
	}
}

static unsigned post_flags(struct wrec *w, bool *bad_flags)
{
	w->signaled = chance(70);
	*bad_flags = chance(1);
	return (w->signaled ? QSM_POST_SIGNALED : 0) | (*bad_flags ? 2u : 0u);
}

static void op_send(struct rec *r, bool force)
{
	struct qsm_sge sge[QSM_MAX_SGE + 1];
	uint8_t data[SLOT];
	uint64_t wr_id, seq = 0;
	struct wrec *w;
	const struct rec *p = r->peer >= 0 ? all[r->peer] : NULL;
	uint32_t len, lkey = r->lkey[MR_LOCAL];
	bool bad = !mr_ok(r, MR_LOCAL), bad_flags;
	unsigned flags;
	uint8_t *base;
	int nsge, want, got, sq;

	if (r->gone)
		return;
	/* credits: mostly only when the peer has a receive posted */
	if (!force && p && (r->passive || r->peer_gen == r->gen) && !p->gone && !p->n_out_recv && chance(80))
		return;
	base = r->buf + SEND_OFF + (r->send_rr++ % NSSLOT) * SLOT;
	len = chance(8) ? 0 : chance(85) ? HDR + below(48 - HDR + 1) : 49 + below(SLOT - 49 + 1);
	if (chance(3)) {
		lkey = r->lkey[MR_RW];
		bad = true;
	}
	if (len) {
		seq = new_msg();
		build_msg(data, seq, len);
	}
	nsge = !len && chance(50) ? 0 : lay_out(sge, base, len, lkey, r->ci->send_sge);
	scatter(sge, nsge, data);
	nsge = odd_nsge(r, K_SEND, nsge, sge);
	w = wr_add(r, K_SEND, &wr_id);
	flags = post_flags(w, &bad_flags);
	w->must_fail = bad && nsge > 0;
	w->local_ok = !bad;
	w->lkey = nsge > 0 ? sge[0].lkey : 0;
	w->len = len;
	w->seq = seq;
	want = expect_post(r, K_SEND, nsge, bad_flags, &sq);
	got = qsm_conn_post_send(r->q, wr_id, sge, nsge, flags);
	if (posted(r, w, want, got, sq, nsge) && seq)
		msgs[seq] = (struct msg){ .sender = (int32_t)r->idx, .len = len, .kind = K_SEND };
}

/* The memory an RDMA names: the peer's mostly, another queue's, or the queue's own. */
static struct rec *rdma_target(struct rec *r)
{
	if (r->peer >= 0 && (r->passive || r->peer_gen == r->gen) && chance(85))
		return all[r->peer];
	return chance(50) ? r : all[below(nall)];
}

static void op_rdma(struct rec *r, bool write)
{
	struct qsm_sge sge[QSM_MAX_SGE + 1];
	uint8_t data[SLOT];
	uint64_t wr_id, seq = 0, raddr;
	struct wrec *w;
	struct rec *x;
	int m = write ? MR_RW : MR_RO, nsge, want, got, sq, slot = -1;
	uint32_t len, toff, area, area_len, rkey, lkey = r->lkey[MR_LOCAL];
	bool bad_local = !mr_ok(r, MR_LOCAL), bad_remote, bad_flags, check = true;
	unsigned flags, mode = below(100);
	uint8_t *base;

	if (r->gone)
		return;
	x = rdma_target(r);
	if (!write && chance(10)) {
		m = MR_RW;      /* readable too, but its bytes are not known: not checked */
		check = false;
	}
	area = mr_spec[m].off;
	area_len = mr_spec[m].len;
	/* the rkey: valid unless the queue is known to have dropped it; if gone: unknown */
	rkey = mr_ok(x, m) ? qsm_mr_rkey(x->mr[m]) : x->rkey[m];
	bad_remote = !x->gone && !mr_ok(x, m);
	if (write)
		len = chance(5) ? 0 : HDR + below(SLOT - HDR + 1);
	else
		len = chance(5) ? 0 : 1 + below(SLOT);
	toff = write || m == MR_RW ? below(NWSLOT) * SLOT : below(area_len - len + 1);
	if (mode < 5) {
		/* past the end of the MR */
		len = len < 8 ? 8 : len;
		toff = area_len - len / 2;
		bad_remote = true;
		check = false;
	} else if (mode < 10) {
		/* a key that grants no such access: the RO MR for a write, an lkey for a read */
		rkey = write ? x->rkey[MR_RO] : x->lkey[MR_LOCAL];
		bad_remote = true;
	} else if (mode < 15) {
		rkey = 0x40000000u | (uint32_t)below(1u << 24);
		bad_remote = true;
	} else if (mode < 18 && x->old_rkey[m] && x->old_rkey[m] != x->rkey[m]) {
		rkey = x->old_rkey[m];
		bad_remote = true;
	}
	if (!x->buf)
		bad_remote = true;  /* gone two settles ago: its MRs are deregistered */
	raddr = (x->buf ? (uintptr_t)x->buf : (uintptr_t)0x10000) + area + toff;
	if (chance(3)) {
		lkey = r->lkey[MR_RW];
		bad_local = true;
	}
	w = wr_add(r, write ? K_WRITE : K_READ, &wr_id);
	flags = post_flags(w, &bad_flags);
	if (write) {
		base = r->buf + SEND_OFF + (r->send_rr++ % NSSLOT) * SLOT;
		if (len) {
			seq = new_msg();
			build_msg(data, seq, len);
		}
	} else {
		/* a signaled read keeps its landing slot until it completes; unsignaled ones share one */
		slot = w->signaled ? free_slot(r->lslots, NLSLOT - 1) : NLSLOT - 1;
		if (slot < 0) {
			slot = NLSLOT - 1;
			check = false;
		}
		base = r->buf + RD_OFF + (uint32_t)slot * SLOT;
		memset(base, POISON, SLOT);
	}
	nsge = !len && chance(50) ? 0 : lay_out(sge, base, len, lkey, r->ci->send_sge);
	if (write)
		scatter(sge, nsge, data);
	nsge = odd_nsge(r, w->kind, nsge, sge);
	w->must_fail = len > 0 && (bad_remote || (bad_local && nsge > 0));
	w->local_ok = !bad_local;
	w->lkey = nsge > 0 ? sge[0].lkey : 0;
	w->len = len;
	w->seq = seq;
	w->target = (int32_t)x->idx;
	w->toff = toff;
	w->check = check && len > 0 && !w->must_fail && (write || slot < NLSLOT - 1);
	w->nsge = (uint8_t)(nsge < 2 ? nsge : 2);
	memcpy(w->sge, sge, sizeof(w->sge));
	want = expect_post(r, w->kind, nsge, bad_flags, &sq);
	got = write ? qsm_conn_post_write(r->q, wr_id, sge, nsge, raddr, rkey, flags)
		    : qsm_conn_post_read(r->q, wr_id, sge, nsge, raddr, rkey, flags);
	if (!posted(r, w, want, got, sq, nsge))
		return;
	if (write && seq) {
		msgs[seq] = (struct msg){ .sender = (int32_t)r->idx, .len = len, .kind = K_WRITE };
		/* it may land (its key may be good): an earlier write there is not checked then */
		if (!w->must_fail && toff % SLOT == 0)
			x->rw_last[toff / SLOT] = seq;
	}
	if (!write && slot < NLSLOT - 1) {
		w->slot = (int8_t)slot;
		r->lslots |= (uint8_t)(1u << slot);
	}
}

static void data_op(struct rec *r)
{
	if (!r || r->gone || quiet)
		return;
	switch (below(20)) {
	case 0: case 1: case 2: case 3: case 4: case 5: op_recv(r); break;
	case 6: case 7: case 8: case 9: case 10: case 11: op_send(r, false); break;
	case 12: case 13: case 14: op_rdma(r, true); break;
	case 15: case 16: case 17: op_rdma(r, false); break;
	default: op_mr(r); break;
	}
}

/* The QP exists (INIT), nothing is sent yet: register, post the first receives. */
static void qp_created(struct rec *r)
{
	discard(r, W_GONE_QP);  /* a new QP: the old one is gone */
	r->gen++;
	r->qp_up = true;
	r->n_out_recv = 0;
	if (quiet)
		return;
	if (!r->lazy_mr || chance(20))
		ensure_mrs(r);
	for (unsigned i = 0; i < r->init_recvs && !r->gone; i++)
		op_recv(r);
	if (chance(10))
		op_send(r, true);      /* the sim: -EINVAL, not RTS yet */
	if (chance(5))
		op_rdma(r, chance(50));
}

/* ---- completions (D2, D4) ---- */

static void check_recv_data(struct rec *r, const struct wrec *w, const struct qsm_wc *wc, unsigned wi)
{
	uint8_t got[SLOT], want[SLOT];
	uint64_t seq;
	uint32_t magic, len;
	struct msg *m;

	if (wc->byte_len > w->len) {
		violate("RECV wr %u: byte_len %u in a receive of %u bytes", wi, wc->byte_len, w->len);
		return;
	}
	if (!wc->byte_len) {
		ds.recv_empty++;
		return;
	}
	if (wc->byte_len < HDR) {
		violate("RECV wr %u: byte_len %u, no sender sent that", wi, wc->byte_len);
		return;
	}
	gather(w->sge, w->nsge, got, wc->byte_len);
	memcpy(&magic, got, 4);
	memcpy(&len, got + 4, 4);
	memcpy(&seq, got + 8, 8);
	if (magic != MSG_MAGIC || seq == 0 || seq >= nmsgs) {
		violate("RECV wr %u (%u bytes): no message there (magic %#x, seq %llu)", wi, wc->byte_len, magic,
			(unsigned long long)seq);
		return;
	}
	m = &msgs[seq];
	if (m->kind != K_SEND || len != wc->byte_len || m->len != wc->byte_len) {
		violate("RECV wr %u: byte_len %u, header %u, message %llu is a %s of %u bytes", wi, wc->byte_len,
			len, (unsigned long long)seq, m->kind < K_COUNT ? kind_names[m->kind] : "post that failed",
			m->len);
		return;
	}
	build_msg(want, seq, len);
	if (memcmp(got, want, len)) {
		violate("RECV wr %u: message %llu arrived corrupted", wi, (unsigned long long)seq);
		return;
	}
	if (m->received++)
		violate("message %llu received twice", (unsigned long long)seq);
	if (r->peer >= 0 && (r->passive || r->peer_gen == r->gen) && m->sender != r->peer)
		violate("%s queue #%u received message %llu of queue #%d, its peer is #%d",
			r->passive ? "passive" : "active", r->idx, (unsigned long long)seq, m->sender, r->peer);
	ds.recv_checked++;
}

static void check_rdma_data(const struct wrec *w, const struct qsm_wc *wc, unsigned wi)
{
	const struct rec *x = all[w->target];
	uint8_t got[SLOT], want[SLOT];

	if (w->kind == K_READ) {
		if (wc->byte_len != w->len)
			violate("READ wr %u of %u bytes: byte_len %u", wi, w->len, wc->byte_len);
		if (!w->check)
			return;
		gather(w->sge, w->nsge, got, w->len);
		for (uint32_t i = 0; i < w->len; i++)
			if (got[i] != ro_byte(x->idx, w->toff + i)) {
				violate("READ wr %u of queue #%u's [%u, +%u): byte %u is %#x, want %#x", wi, x->idx,
					w->toff, w->len, i, got[i], ro_byte(x->idx, w->toff + i));
				return;
			}
		ds.read_checked++;
		return;
	}
	if (!w->check || !x->buf || x->rw_last[w->toff / SLOT] != w->seq)
		return;
	build_msg(want, w->seq, w->len);
	if (memcmp(x->buf + RW_OFF + w->toff, want, w->len))
		violate("WRITE wr %u (message %llu) to queue #%u at %u succeeded, its bytes are not there", wi,
			(unsigned long long)w->seq, x->idx, w->toff);
	ds.write_checked++;
}

static void check_completion(struct rec *r, const struct qsm_wc *wc)
{
	uint64_t owner = wc->wr_id >> 32;
	unsigned wi = (unsigned)(wc->wr_id & 0xffffffffu);
	const char *who = r->passive ? "passive" : "active";
	struct wrec *w;

	ds.completions++;
	ds.ok += wc->status == QSM_WC_SUCCESS;
	ds.flushed += wc->status == QSM_WC_WR_FLUSH_ERR;
	ds.errors += wc->status != QSM_WC_SUCCESS && wc->status != QSM_WC_WR_FLUSH_ERR;
	if (owner != r->idx + 1 || wi >= r->nwr) {
		violate("%s queue #%u: completion of wr_id %#llx, never posted on it", who, r->idx,
			(unsigned long long)wc->wr_id);
		return;
	}
	w = &r->wr[wi];
	if (w->st != W_OUT) {
		violate("%s queue in %s: completion (status %d) of %s wr %u %s", who, qsm_conn_state_name(r->q),
			wc->status, kind_names[w->kind], wi, wr_state_names[w->st]);
		return;
	}
	if (qsm_conn_qp_state(r->q) == -ENOENT)
		violate("%s queue in %s: completion of %s wr %u with no QP", who, qsm_conn_state_name(r->q),
			kind_names[w->kind], wi);
	if (w->gen != r->gen)
		violate("completion of %s wr %u of QP #%u on QP #%u", kind_names[w->kind], wi, w->gen, r->gen);
	if (wc->opcode != kind_op[w->kind])
		violate("%s wr %u completes with opcode %d", kind_names[w->kind], wi, wc->opcode);
	if (wc->status != QSM_WC_SUCCESS && wc->byte_len)
		violate("%s wr %u: status %d with byte_len %u", kind_names[w->kind], wi, wc->status, wc->byte_len);
	if (wc->status == QSM_WC_SUCCESS && !w->signaled)
		violate("unsignaled %s wr %u completed with SUCCESS", kind_names[w->kind], wi);
	if (wc->status == QSM_WC_SUCCESS && w->must_fail)
		violate("%s wr %u with a bad key or range completed with SUCCESS", kind_names[w->kind], wi);
	if (w->in_err && wc->status != QSM_WC_WR_FLUSH_ERR)
		violate("%s wr %u posted on a QP in ERR completed with status %d", kind_names[w->kind], wi,
			wc->status);
	/* (HOLD releases held completions behind later ones: not in order then) */
	if (wc->status == QSM_WC_SUCCESS && r->err_gen == r->gen && !tainted(w))
		violate("%s queue #%u in %s: %s wr %u completed with SUCCESS after the error completion "
			"(status %d) of %s wr %u on its QP", who, r->idx, qsm_conn_state_name(r->q),
			kind_names[w->kind], wi, r->err_status, kind_names[r->wr[r->err_wi].kind], r->err_wi);
	/* the MR its SGEs name is still registered: it was when the WR ran */
	if (wc->status == QSM_WC_LOC_PROT_ERR && w->local_ok && w->lkey && mr_ok(r, MR_LOCAL) &&
	    r->lkey[MR_LOCAL] == w->lkey)
		violate("%s queue in %s: %s wr %u with a good lkey (%u) failed with LOC_PROT_ERR", who,
			qsm_conn_state_name(r->q), kind_names[w->kind], wi, w->lkey);
	if (wc->status != QSM_WC_SUCCESS && r->err_gen != r->gen) {
		r->err_gen = r->gen;
		r->err_wi = wi;
		r->err_status = wc->status;
	}
	if (wc->status == QSM_WC_SUCCESS) {
		if (w->kind == K_RECV)
			check_recv_data(r, w, wc, wi);
		else if (w->kind == K_READ || w->kind == K_WRITE)
			check_rdma_data(w, wc, wi);
	}
	wr_finish(r, w, W_DONE);
	while (r->wr_scan < r->nwr && r->wr[r->wr_scan].st != W_OUT)
		r->wr_scan++;
}

/* ---- the class: every slot, every callback checked ---- */

enum cb_kind { CB_ENTER, CB_EXIT, CB_EVENT, CB_UNEXPECTED, CB_DEVICE_REMOVED, CB_QP_READY, CB_RELEASE,
	       CB_COMPLETION };
static const char *const cb_names[] = { "enter", "exit", "on_event", "unexpected", "device_removed",
					"qp_ready", "release", "completion" };

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

/* Who is at the other end: the request's private data names the active queue, the accept's
 * (in the active queue's ESTABLISHED) the passive one. */
static void learn_peer(struct rec *r, const struct qsm_event_info *ev)
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

static int handle(struct qsm_conn *q, const struct qsm_event_info *ev, enum cb_kind k)
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
static int h_completion(struct qsm_conn *q, const struct qsm_wc *wc)
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
	recv = wc->opcode == QSM_WR_RECV;
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
static void h_release(struct qsm_conn *q)
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

#define H { .enter = h_enter, .exit = h_exit, .on_event = h_event }
static const struct qsm_class model_class = {
	.name = "model",
	.priv_size = sizeof(struct rec *),
	.active = { [0 ... QSM_CM_STATE_COUNT - 1] = H },
	.passive = { [0 ... QSM_ACCEPT_STATE_COUNT - 1] = H },
	.unexpected = h_unexpected,
	.device_removed = h_device_removed,
	.qp_ready = h_qp_ready,
	.completion = h_completion,
	.release = h_release,
	.qp = { .max_send_wr = 32, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 2 },
};
/* Every slot and the caps through super. */
static const struct qsm_class model_sub = { .name = "model-sub", .super = &model_class };
/* Its own caps: 4 receives, the rest the library's defaults (64 sends, 1 SGE each). */
static const struct qsm_class model_narrow = {
	.name = "model-narrow", .super = &model_class, .qp = { .max_recv_wr = 4 },
};
static struct cinfo cinfo[3] = {
	{ &model_class, 8, 2, 2 },
	{ &model_sub, 8, 2, 2 },
	{ &model_narrow, 4, 1, 1 },
};

/* ---- driving ---- */

static int dispatch(int c, unsigned budget)
{
	int n = qsm_ctx_dispatch(ctx[c], budget);

	CHECK(n >= 0, "dispatch returned %d", n);
	return n;
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
	struct cinfo *ci = &cinfo[below(3)];
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

static void step_new_listener_at(const char *ip, uint16_t port)
{
	struct sockaddr_in a;
	struct cinfo *ci = &cinfo[below(3)];
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

/* Mostly a queue that can carry data (QP in RTS). */
static struct rec *some_data_rec(void)
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

static const enum qsm_sim_fault armed_faults[] = {
	QSM_SIM_FAULT_ADDR_ERROR, QSM_SIM_FAULT_ROUTE_ERROR, QSM_SIM_FAULT_REJECT,
	QSM_SIM_FAULT_UNREACHABLE, QSM_SIM_FAULT_CONNECT_ERROR, QSM_SIM_FAULT_NO_TIMEWAIT_EXIT,
	QSM_SIM_FAULT_DUP_DISCONNECTED, QSM_SIM_FAULT_LATE_ESTABLISHED, QSM_SIM_FAULT_NO_DRAINED,
	QSM_SIM_FAULT_ENOMEM,
};

static unsigned n_faults, n_removals, n_adds, n_fatals;

/* Everything settled and every held event is out (D3, D5); the buffers of queues gone two
 * settles ago can go: their MRs were deregistered when they closed. */
static void check_settled(void)
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
	CHECK(st.mrs == valid, "settled: the sim holds %u MRs, the live queues %u valid ones", st.mrs, valid);
	/* max_recv_wr, exactly: one receive more is -ENOMEM */
	settled = true;
	for (unsigned i = 0; i < nlive; i++) {
		struct rec *r = live[i];
		int sq = sim_qp(r);

		if ((sq == QSM_QP_INIT || sq == QSM_QP_RTS) && !drain_started(r) &&
		    r->n_out_recv >= r->ci->max_recv_wr)
			op_recv(r);
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
static void quiesce_check(void)
{
	CHECK(sim_release() >= 0, "release");
	harness_run_for(&world, 8000);
	for (int d = 0; d < NDEV; d++)
		CHECK(qsm_sim_device_state(sim, dev_name[d]) != QSM_SIM_DEVICE_REMOVING,
		      "%s still REMOVING after everything settled and timed out", dev_name[d]);
	CHECK(!violation[0], "%s", violation);
	check_settled();
}

static void one_step(void)
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
		enum qsm_sim_fault f = armed_faults[below(sizeof(armed_faults) / sizeof(armed_faults[0]))];

		CHECK(qsm_sim_inject(sim, f, 1 + below(3)) == 0, "inject");
		if (f == QSM_SIM_FAULT_ENOMEM) {
			enomem_injected = true;
			enomem_settle = n_settles;
		}
		n_faults++;
		return;
	}
	x -= 60;
	if (x < 25) {
		CHECK(qsm_sim_inject(sim, QSM_SIM_FAULT_HOLD, 1 + below(6)) == 0, "hold");
		hold_epoch++;
		hold_armed = true;
		n_faults++;
		return;
	}
	x -= 25;
	if (x < 45) { CHECK(sim_release() >= 0, "release"); return; } x -= 45;
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
	/* the data path */
	if (x < 30) { if ((r = some_data_rec())) { observe(r); op_recv(r); } return; } x -= 30;
	if (x < 30) { if ((r = some_data_rec())) { observe(r); op_send(r, chance(20)); } return; } x -= 30;
	if (x < 15) { if ((r = some_data_rec())) { observe(r); op_rdma(r, true); } return; } x -= 15;
	if (x < 15) { if ((r = some_data_rec())) { observe(r); op_rdma(r, false); } return; } x -= 15;
	if (x < 10) { if ((r = some_live(false))) op_mr(r); return; } x -= 10;
	/* the rest: handlers' own calls carry the step */
	harness_settle(&world);
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
}

static void check_queue(struct rec *r)
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

static void check_all(void)
{
	CHECK(!violation[0], "%s", violation);
	check_accounting();
	for (unsigned i = 0; i < nlive; i++)
		check_queue(live[i]);
	CHECK(!violation[0], "%s", violation);
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
		struct qsm_ctx_opts o = { .now_ns = harness_clock, .now_arg = &world, .seed = seed + (uint64_t)c };

		CHECK(qsm_sim_fabric_new(sim, &fab[c]) == 0, "fabric");
		o.fabric = fab[c];
		CHECK(qsm_ctx_new(&ctx[c], &o) == 0, "ctx");
		CHECK(qsm_ctx_set_trace(ctx[c], tracer, &tally[c]) == 0, "trace");
	}
	new_msg(); /* sequence number 0: no message */
}

/* Destroy everything, let it close, and account for every object (d). */
static void world_end(void)
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
	CHECK(!st.ids && !st.qps && !st.mrs && !st.device_refs && !st.events_pending,
	      "left in the sim: %u ids, %u qps, %u mrs, %u device refs, %u events", st.ids, st.qps, st.mrs,
	      st.device_refs, st.events_pending);
	for (int c = 0; c < NCTX; c++) {
		qsm_ctx_free(ctx[c]);
		ctx[c] = NULL;
	}
	qsm_sim_get_stats(sim, &st);
	CHECK(!st.ids && !st.qps && !st.mrs && !st.device_refs && !st.events_pending && !st.ids_leaked,
	      "after freeing the ctxs: %u ids, %u qps, %u mrs, %u device refs, %u events, %u ids leaked",
	      st.ids, st.qps, st.mrs, st.device_refs, st.events_pending, st.ids_leaked);
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
	printf("model: data: %u posts (-ENOTCONN %u, -EINVAL %u, -ENOMEM %u), posted recv %u send %u "
	       "write %u read %u (%u had to fail); completions %u (success %u, flushed %u, errors %u), "
	       "%u discarded; checked: %u receives (+%u empty), %u reads, %u writes; DRAINED %u (%u strict); "
	       "MRs registered %u, deregistered %u; reg_mr -ENODEV with a QP tolerated %u\n",
	       ds.post_calls, ds.enotconn, ds.einval, ds.enomem, ds.posted[K_RECV], ds.posted[K_SEND],
	       ds.posted[K_WRITE], ds.posted[K_READ], ds.must_fail, ds.completions, ds.ok, ds.flushed,
	       ds.errors, ds.discarded, ds.recv_checked, ds.recv_empty, ds.read_checked, ds.write_checked,
	       ds.drained, ds.drained_strict, ds.regs, ds.deregs, ds.enodev_tolerated);
	if (nsteps >= 10000) {
		CHECK(n_active_made + n_passive_made >= 100 && peak_live >= 100,
		      "only %u queues, %u at once", n_active_made + n_passive_made, peak_live);
		CHECK(ds.recv_checked >= 50 && ds.read_checked >= 20 && ds.write_checked >= 20 &&
		      ds.enotconn >= 50 && ds.drained_strict >= 20 && ds.flushed >= 50,
		      "too little data path coverage: %u receives, %u reads, %u writes checked, "
		      "%u -ENOTCONN, %u DRAINED, %u flushes", ds.recv_checked, ds.read_checked,
		      ds.write_checked, ds.enotconn, ds.drained_strict, ds.flushed);
	}
	for (unsigned i = 0; i < nall; i++) {
		free(all[i]->buf);
		free(all[i]->wr);
		free(all[i]);
	}
	free(all);
	free(live);
	free(msgs);
	for (int c = 0; c < NCTX; c++)
		free(by_serial[c]);
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
