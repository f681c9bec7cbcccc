/* rdma-qsm model test: the world (seed, PRNG, sim, ctxs on the virtual clock), the trace that
 * feeds the model, the queues it knows and the downcalls, each checked against the machine. */
#include "model.h"

uint64_t seed, rng;
unsigned step_no, nsteps;
char violation[512];

void __attribute__((format(printf, 1, 2))) model_fail(const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ck_abort_msg("QSM_MODEL_SEED=%llu step %u: %s", (unsigned long long)seed, step_no, msg);
}

/* A problem seen inside a callback: reported after the step (never unwinding the runtime). */
void __attribute__((format(printf, 1, 2))) violate(const char *fmt, ...)
{
	va_list ap;

	if (violation[0])
		return;
	va_start(ap, fmt);
	vsnprintf(violation, sizeof(violation), fmt, ap);
	va_end(ap);
}

void world_fail(const char *msg)
{
	model_fail("%s", msg);
}

uint64_t rnd(void)
{
	/* xorshift64* */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

/* splitmix64: nearby seeds (1, 2, 3...) start far apart, so a sweep over them explores */
uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z ? z : 1;
}

unsigned below(unsigned n)
{
	return n ? (unsigned)(rnd() % n) : 0;
}

bool chance(unsigned pct)
{
	return below(100) < pct;
}

/* ---- the world ---- */

struct qsm_sim *sim;
struct qsm_fabric *fab[NCTX];
struct qsm_ctx *ctx[NCTX];

/* the virtual clock and the order ctxs are dispatched in: ctx[0] first */
struct harness world = { .ctx = { &ctx[0], &ctx[1] }, .bound = 200000, .on_failure = world_fail };
const char *const dev_name[NDEV] = { "sim0", "sim1" };
const char *const dev_addr[NDEV] = { "192.0.2.1", "192.0.2.2" };
const uint16_t ports[] = { 4420, 4421, 4422 };
struct qsm_timeouts listen_timeouts;   /* every listener's, so passive queues know theirs */

/* HOLD may put a completion behind the DRAINED of its QP: WRs posted while one could be
 * held are not required to complete before DRAINED (D3 at DRAINED; the settled check holds). */
uint32_t hold_epoch;
bool hold_armed;

/* A create_id that QSM_SIM_FAULT_ENOMEM failed while a queue attached to its device (the
 * registry's sentinel id) used to leave the queue connected with no device (reg_mr -ENODEV
 * for the whole connection); the runtime now retries such an attempt.  Strict by default:
 * QSM_MODEL_STRICT=0 tolerates it again, for bisecting old builds. */
bool strict;
bool enomem_injected;
unsigned enomem_settle;
unsigned n_settles;

int sim_release(void)
{
	hold_armed = false;
	return qsm_sim_release(sim);
}

uint64_t compl_seen[NCTX];
struct tally tally[NCTX];
struct rec **by_serial[NCTX];  /* a queue's trace id (per-ctx serial) -> rec */
unsigned by_serial_cap[NCTX];
struct pending_event pend;                               /* the on_event just called: its trace record follows */

void *grow_to(void *p, unsigned *cap, size_t elem, unsigned first)
{
	*cap = *cap ? *cap * 2 : first;
	p = realloc(p, (size_t)*cap * elem);
	ck_assert_ptr_nonnull(p);
	return p;
}

void *grow(void *p, unsigned *cap, size_t elem)
{
	return grow_to(p, cap, elem, 256);
}

void tracer(const struct qsm_trace_record *t, void *arg)
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
	if (!strcmp(t->kind, "device"))
		srq_trace(c, t);
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

struct rec **all;
unsigned nall, all_cap;
struct rec **live;
unsigned nlive, live_cap, peak_live;
unsigned n_active_made, n_passive_made, n_listeners_made;
bool quiet;              /* the end: default behaviour only */
struct lst listeners[MAX_LISTENERS];
unsigned nlisteners;

uint8_t ro_byte(unsigned idx, uint32_t j)
{
	return (uint8_t)(idx * 29u + j * 13u + 5u);
}

struct rec *rec_new(struct qsm_conn *q, int c, bool passive)
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

static void sq_release(struct rec *r, struct wrec *w)
{
	if (w->sq_held) {
		w->sq_held = false;
		r->n_sq_held--;
	}
}

void wr_finish(struct rec *r, struct wrec *w, enum wr_state st)
{
	w->st = (uint8_t)st;
	/* a send queue completes in order: a completion frees the unsignaled WRs before it */
	if (st == W_DONE && w->sq_held)
		for (struct wrec *e = r->wr + r->wr_scan; e < w; e++)
			if (e->sq_held && !e->signaled && e->gen == w->gen)
				sq_release(r, e);
	sq_release(r, w);
	if (w->kind == K_RECV) {
		r->n_out_recv--;
		r->rslots &= (uint16_t)~(1u << w->slot);
	} else if (w->kind == K_READ && w->slot >= 0 && w->slot < NLSLOT - 1) {
		r->lslots &= (uint8_t)~(1u << w->slot);
	}
	if (st != W_DONE)
		ds.discarded++;
}

/* Every WR still outstanding gets no completion from now on.  A QP that is gone completed each
 * of its WRs as its queue let go of it (a drain that timed out included): only an unsignaled
 * send, which succeeded unreported, may be left (D4, qsm_conn_post_send(3)). */
void discard(struct rec *r, enum wr_state st)
{
	srq_qp_gone(r);
	for (unsigned i = r->wr_scan; i < r->nwr; i++)
		if (r->wr[i].st == W_OUT) {
			const struct wrec *w = &r->wr[i];

			if (st == W_GONE_QP && (w->kind == K_RECV || w->signaled)) {
				ds.lost++;
				violate("%s queue #%u in %s: its QP is gone and %s wr %u (%ssignaled) never "
					"completed", r->passive ? "passive" : "active", r->idx,
					qsm_conn_state_name(r->q), kind_names[w->kind], i, w->signaled ? "" : "un");
			}
			wr_finish(r, &r->wr[i], st);
		}
	r->wr_scan = r->nwr;
}

void mark_gone(struct rec *r)
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
void observe(struct rec *r)
{
	if (r->gone || !r->qp_up)
		return;
	/* (gone to the runtime first: what it held completes before the sim's QP goes) */
	if (qsm_conn_qp_state(r->q) == -ENOENT && sim_qp(r) == -ENOENT) {
		discard(r, W_GONE_QP);
		r->qp_up = false;
	}
}

bool tainted(const struct wrec *w)
{
	return w->hold_armed || w->hold_epoch != hold_epoch;
}

/* The queue took a DRAINED edge: the QP's flushes came before the drain marker's (D3). */
void drained(struct rec *r, int status)
{
	if (r->gone)
		return;
	ds.drained++;
	if (qsm_conn_qp_state(r->q) != -ENOENT)
		violate("%s queue in %s still has a QP after its DRAINED edge", r->passive ? "passive" : "active",
			qsm_conn_state_name(r->q));
	if (status == 0) {
		srq_drained(r);
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

int ctx_index(struct qsm_ctx *c)
{
	for (int i = 0; i < NCTX; i++)
		if (ctx[i] == c)
			return i;
	ck_abort_msg("unknown ctx");
	return -1;
}

/* ---- downcalls, each checked against the machine (e) ---- */

enum qsm_machine machine_of(const struct rec *r)
{
	return r->passive ? QSM_MACHINE_ACCEPT : QSM_MACHINE_CM_ID;
}

bool has_edge(const struct rec *r, int event)
{
	return qsm_machine_next(machine_of(r), qsm_conn_state(r->q), event, NULL) >= 0;
}

void do_connect(struct rec *r)
{
	int want = r->passive ? -EOPNOTSUPP : has_edge(r, QSM_EV_CONNECT) ? 0 : -ENOMSG;
	int got = qsm_conn_connect(r->q);

	if (got != want)
		violate("connect in %s returned %d, want %d", qsm_conn_state_name(r->q), got, want);
}

void do_disconnect(struct rec *r)
{
	int want = has_edge(r, QSM_EV_DISCONNECT) ? 0 : -ENOMSG;
	int got = qsm_conn_disconnect(r->q);

	if (got != want)
		violate("disconnect in %s returned %d, want %d", qsm_conn_state_name(r->q), got, want);
}

void do_ready(struct rec *r)
{
	int want = has_edge(r, QSM_EV_READY) ? 0 : -ENOMSG;
	int got = qsm_conn_ready(r->q);

	if (got != want)
		violate("ready in %s returned %d, want %d", qsm_conn_state_name(r->q), got, want);
}

/* Private data: "QM" + the active rec's index + 1 on connect, "QP" + the passive's on accept. */
void put_tag(uint8_t *p, char side, unsigned idx)
{
	uint32_t v = idx + 1;

	p[0] = 'Q';
	p[1] = (uint8_t)side;
	memcpy(p + 2, &v, 4);
}

int get_tag(const struct qsm_event_info *ev, char side)
{
	const uint8_t *p = ev->private_data;
	uint32_t v;

	if (!p || ev->private_data_len < 6 || p[0] != 'Q' || p[1] != (uint8_t)side)
		return -1;
	memcpy(&v, p + 2, 4);
	return v >= 1 && v <= nall ? (int)(v - 1) : -2;
}

void do_decide(struct rec *r, bool accept)
{
	int want = !r->passive ? -EOPNOTSUPP
		   : qsm_conn_state(r->q) != QSM_ACCEPT_REQUESTED ||
			     !has_edge(r, accept ? QSM_EV_ACCEPT : QSM_EV_REJECT) ? -ENOMSG
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

void do_destroy(struct rec *r)
{
	int got = qsm_conn_destroy(r->q);

	if (got != 0)
		violate("destroy of a live queue in %s returned %d", qsm_conn_state_name(r->q), got);
	mark_gone(r);
	/* The queue stays allocated until its DESTROY is dispatched: the data calls refuse it as
	 * stale (it is going), not as a bad argument. */
	if (!quiet && chance(10)) {
		struct qsm_sge sge = { (uintptr_t)r->buf, 16, r->lkey[MR_LOCAL] };
		struct qsm_mr *mr = NULL;
		int a = qsm_conn_post_recv(r->q, 1, &sge, 1);
		int b = qsm_conn_post_send(r->q, 2, &sge, 1, QSM_POST_SIGNALED);
		int c = qsm_conn_reg_mr(r->q, r->buf, BUF_LEN, QSM_ACCESS_LOCAL_WRITE, &mr);

		/* (an SRQ class's receives are never the queue's: -EINVAL whatever its state) */
		if (a != (r->ci->srq ? -EINVAL : -ESTALE) || b != -ESTALE || c != -ESTALE)
			violate("destroyed queue: post_recv %d, post_send %d, reg_mr %d, want -ESTALE", a, b, c);
		if (c == 0)
			qsm_mr_dereg(mr);
	}
}

void random_downcall(struct rec *r)
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
