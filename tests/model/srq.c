/* rdma-qsm model test: the SRQ class's shared receive queues (S1-S5): one per device per ctx,
 * filled by srq_low from the model's pool, each receive checked from its post to its completion. */
#include "model.h"

struct msrq msrq[NCTX][NDEV];
static uint8_t *srq_mem[NCTX];
static struct qsm_pool *srq_pool[NCTX];

#define SRQ_TAG (1ull << 63)

static int dev_index(const char *name)
{
	for (int d = 0; d < NDEV; d++)
		if (name && !strcmp(name, dev_name[d]))
			return d;
	return -1;
}

static unsigned srqs_of(int c)
{
	unsigned n = 0;

	for (int d = 0; d < NDEV; d++)
		n += msrq[c][d].s != NULL;
	return n;
}

struct msrq *msrq_of(int c, const struct qsm_srq *s)
{
	for (int d = 0; s && d < NDEV; d++)
		if (msrq[c][d].s == s)
			return &msrq[c][d];
	return NULL;
}

void srq_world_new(void)
{
	for (int c = 0; c < NCTX; c++) {
		for (int d = 0; d < NDEV; d++)
			msrq[c][d] = (struct msrq){ .c = c, .d = d };
		srq_mem[c] = calloc(NDEV, NSRQBUF * SLOT);
		ck_assert_ptr_nonnull(srq_mem[c]);
		CHECK(qsm_ctx_reg_pool(ctx[c], srq_mem[c], NDEV * NSRQBUF * SLOT, QSM_ACCESS_LOCAL_WRITE,
				       &srq_pool[c]) == 0, "reg_pool");
	}
}

/* Before the ctxs go: no queue uses the pool's keys any more. */
void srq_world_end(void)
{
	for (int c = 0; c < NCTX; c++) {
		CHECK(qsm_pool_dereg(srq_pool[c]) == 0, "pool_dereg");
		srq_pool[c] = NULL;
	}
}

void srq_world_free(void)
{
	for (int c = 0; c < NCTX; c++) {
		for (int d = 0; d < NDEV; d++)
			free(msrq[c][d].rv);
		free(srq_mem[c]);
		srq_mem[c] = NULL;
	}
	memset(msrq, 0, sizeof(msrq));
}

/* The pool's registrations the sim holds: one per device in each ctx's registry. */
/* One counter, summed over the ctxs. */
static unsigned counter_sum(size_t off)
{
	unsigned n = 0;

	for (int c = 0; c < NCTX; c++) {
		struct qsm_counters k;

		CHECK(qsm_ctx_counters(ctx[c], &k, sizeof(k)) == 0, "counters");
		n += (unsigned)*(const uint64_t *)((const char *)&k + off);
	}
	return n;
}

/* What the ctxs counted as failed actions: at least every pool registration that failed. */
unsigned pool_reg_failures_bound(void)
{
	return counter_sum(offsetof(struct qsm_counters, action_errors));
}

/* The SRQ pool's registrations: one per device of each ctx's registry. */
unsigned srq_pool_mrs(void)
{
	return counter_sum(offsetof(struct qsm_counters, devices_live));
}

static void srq_finish(struct msrq *m, struct wrec *w, enum wr_state st)
{
	w->st = (uint8_t)st;
	m->n_out--;
	if (w->slot >= 0)
		m->used &= ~(1u << w->slot);
	if (st != W_DONE) {
		ds.discarded++;
		ds.srq_lost += st == W_GONE_QP;
	}
	while (m->scan < m->nrv && m->rv[m->scan].st != W_OUT)
		m->scan++;
}

/* Its OUT receives: those that may have gone with a QP without a completion (S3). */
static unsigned unsure(const struct msrq *m)
{
	unsigned n = 0;

	if (m->dying)
		return m->n_out;
	for (unsigned i = m->scan; i < m->loss_mark && i < m->nrv; i++)
		n += m->rv[i].st == W_OUT;
	return n;
}

/* (S2) One receive posted to the SRQ: what it must answer.  odd: bad arguments now and then. */
static int srq_post(struct msrq *m, bool odd)
{
	struct qsm_sge sge[QSM_MAX_SGE + 1];
	uint32_t lkey = 0, rkey, cap = 0;
	int slot = free_slot(m->used, NSRQBUF), nsge = 0, want, got;
	bool door_bad = false, bad = false;
	uint8_t *base = NULL;
	struct wrec *w;
	uint64_t wr_id;

	if (qsm_pool_srq_keys(srq_pool[m->c], m->s, &lkey, &rkey) < 0) {
		ds.srq_nokeys++;
		bad = true;
	}
	if (slot >= 0 && !chance(3)) {
		base = srq_mem[m->c] + ((size_t)m->d * NSRQBUF + (unsigned)slot) * SLOT;
		cap = chance(75) ? SLOT : chance(65) ? 48 + below(SLOT - 48) : HDR + below(48 - HDR);
		nsge = lay_out(sge, base, cap, lkey, SRQ_MAX_SGE);
		memset(base, POISON, SLOT);
	} else {
		slot = -1;
	}
	if (odd && chance(3)) {
		int n = chance(30) ? QSM_MAX_SGE + 1 : SRQ_MAX_SGE + 1;

		for (int i = nsge; i < n; i++)
			sge[i] = (struct qsm_sge){ (uintptr_t)srq_mem[m->c], 0, lkey };
		nsge = n;
		door_bad = true;   /* beyond QSM_MAX_SGE or srq.max_sge: the door's */
	}
	if (m->nrv == m->cap)
		m->rv = grow_to(m->rv, &m->cap, sizeof(*m->rv), 64);
	wr_id = SRQ_TAG | ((uint64_t)(m->gen & 0x7fff) << 48) | ((uint64_t)m->c << 40) |
		((uint64_t)m->d << 32) | m->nrv;
	w = &m->rv[m->nrv++];
	wr_init(w, K_RECV, m->gen);
	w->signaled = w->required = true;
	w->len = cap;
	w->lkey = nsge > 0 ? lkey : 0;
	w->must_fail = bad && nsge > 0;
	w->local_ok = !bad;
	w->nsge = (uint8_t)(nsge < 2 ? nsge : 2);
	memcpy(w->sge, sge, sizeof(w->sge));
	want = door_bad ? -EINVAL : m->removing ? -ENODEV
	       : m->n_out < SRQ_MAX_WR ? 0 : settled && !unsure(m) ? -ENOBUFS : MAYBE_ENOBUFS;
	got = qsm_srq_post_recv(m->s, wr_id, sge, nsge);
	ds.srq_posts++;
	ds.srq_einval += got == -EINVAL;
	ds.srq_enodev += got == -ENODEV;
	ds.srq_enobufs += got == -ENOBUFS;
	ds.srq_enobufs_strict += got == -ENOBUFS && want == -ENOBUFS;
	if (want == MAYBE_ENOBUFS ? got != 0 && got != -ENOBUFS : got != want) {
		violate("post to the SRQ of ctx%d on %s (%u outstanding of %u, %u unsure%s): %d, want %d", m->c,
			dev_name[m->d], m->n_out, SRQ_MAX_WR, unsure(m), m->removing ? ", removing" : "", got,
			want == MAYBE_ENOBUFS ? 0 : want);
		return got;
	}
	if (got == 0) {
		w->st = W_OUT;
		w->slot = (int8_t)slot;
		if (slot >= 0)
			m->used |= 1u << slot;
		m->n_out++;
		ds.posted[K_RECV]++;
	}
	return got;
}

/* (S1) Made with the first QP of the class on the device, then on each limit. */
void h_srq_low(struct qsm_srq *s)
{
	int c = ctx_index(qsm_srq_ctx(s)), d = dev_index(qsm_srq_device_name(s));
	struct qsm_counters k;
	struct msrq *m;
	unsigned n;

	CHECK(d >= 0, "srq_low on device %s", qsm_srq_device_name(s));
	m = &msrq[c][d];
	CHECK(qsm_ctx_counters(ctx[c], &k, sizeof(k)) == 0, "counters");
	if (!m->s) {
		if (k.srqs_live != srqs_of(c) + 1)
			violate("srq_low of a new SRQ on %s: ctx%d counts %llu SRQs, the model %u before it",
				dev_name[d], c, (unsigned long long)k.srqs_live, srqs_of(c));
		ds.srq_made++;
		ds.srq_remade += m->gen > 0;
		*m = (struct msrq){ .s = s, .c = c, .d = d, .gen = m->gen + 1, .rv = m->rv, .cap = m->cap };
	} else if (m->s != s) {
		violate("srq_low of a second SRQ of the class on ctx%d %s", c, dev_name[d]);
		return;
	} else {
		if (k.srqs_live != srqs_of(c))
			violate("srq_low of the limit on %s: ctx%d counts %llu SRQs, the model %u", dev_name[d], c,
				(unsigned long long)k.srqs_live, srqs_of(c));
		m->pending_low++;
		ds.srq_limit_lows++;
	}
	if (m->removing)
		violate("srq_low on ctx%d %s while it is being removed", c, dev_name[d]);
	if (quiet)
		return;
	n = chance(50) ? SRQ_MAX_WR : below(SRQ_MAX_WR + 1);
	for (unsigned i = 0; i < n && !violation[0]; i++)
		if (srq_post(m, true) == -ENOBUFS)
			break;
}

/* The device machine's records: removal (posts -ENODEV), the entry gone (the SRQ with it), the
 * limit (its srq_low came just before, in IN_USE only). */
void srq_trace(int c, const struct qsm_trace_record *t)
{
	int d = dev_index(t->class_name);
	struct msrq *m;

	if (d < 0 || !t->event)
		return;
	m = &msrq[c][d];
	if (!strcmp(t->event, "SRQ_LIMIT")) {
		bool in_use = t->from && !strcmp(t->from, "IN_USE");

		if (!t->to)
			violate("ctx%d %s: SRQ_LIMIT unexpected in %s", c, dev_name[d], t->from);
		else if (in_use && (!m->s || m->pending_low != 1))
			violate("ctx%d %s: SRQ_LIMIT in IN_USE after %u srq_low calls (SRQ %s)", c, dev_name[d],
				m->pending_low, m->s ? "live" : "none");
		else if (!in_use && m->pending_low)
			violate("ctx%d %s: srq_low on SRQ_LIMIT in %s", c, dev_name[d], t->from);
		ds.srq_limit_removing += !in_use;
		m->pending_low = 0;
		return;
	}
	if (!t->to)
		return;
	if (!strcmp(t->event, "DEVICE_REMOVAL") && !strcmp(t->to, "REMOVING")) {
		m->removing = true;
	} else if (!strcmp(t->event, "DESTROY") && !strcmp(t->to, "CLOSED") && m->s) {
		/* what is still posted goes with the SRQ, with no completion */
		for (unsigned i = m->scan; i < m->nrv; i++)
			if (m->rv[i].st == W_OUT)
				srq_finish(m, &m->rv[i], W_GONE_DEAD);
		m->s = NULL;
		m->removing = false;
		m->pending_low = 0;
		m->nrv = m->scan = 0;
		ds.srq_gone++;
	}
}

/* A queue of the SRQ class lost its QP: a receive the QP took may go without a completion. */
void srq_qp_gone(struct rec *r)
{
	if (r->msq)
		r->msq->dying = true;
	r->msq = NULL;
}

void srq_qp_created(struct rec *r)
{
	struct qsm_srq *s = qsm_conn_srq(r->q);

	r->msq = msrq_of(r->c, s);
	if (!r->msq)
		violate("%s queue's new QP on SRQ %p, not one of its ctx's", r->passive ? "passive" : "active",
			(void *)s);
	r->qp_hold_epoch = hold_epoch;
	r->qp_hold_armed = hold_armed;
}

/* A receive for a queue of the SRQ class: to its SRQ; qsm_conn_post_recv() is -EINVAL. */
void srq_op_recv(struct rec *r)
{
	struct qsm_srq *s;
	struct msrq *m;

	if (chance(10)) {
		struct qsm_sge sge = { (uintptr_t)r->buf, 16, r->lkey[MR_LOCAL] };
		int got = qsm_conn_post_recv(r->q, 1, &sge, 1);

		ds.srq_conn_einval++;
		if (got != -EINVAL)
			violate("qsm_conn_post_recv on a queue of the SRQ class in %s: %d, want -EINVAL",
				qsm_conn_state_name(r->q), got);
		return;
	}
	if (chance(1) && qsm_srq_post_recv(NULL, 1, NULL, 0) != -EINVAL)
		violate("qsm_srq_post_recv(NULL): not -EINVAL");
	s = qsm_conn_srq(r->q);
	if ((s != NULL) != (qsm_conn_qp_state(r->q) != -ENOENT))
		violate("%s queue in %s: SRQ %p, QP %d", r->passive ? "passive" : "active",
			qsm_conn_state_name(r->q), (void *)s, qsm_conn_qp_state(r->q));
	if (!s)
		return;
	if (!(m = msrq_of(r->c, s))) {
		violate("%s queue in %s: its SRQ is none the model knows", r->passive ? "passive" : "active",
			qsm_conn_state_name(r->q));
		return;
	}
	srq_post(m, true);
}

/* The peer's SRQ has receives (credit for a send). */
bool srq_credit(const struct rec *p, unsigned used)
{
	const struct msrq *m = msrq_of(p->c, qsm_conn_srq(p->q));

	return !m || m->n_out > used;
}

/* (S3) A completion of an SRQ receive: on a queue of that SRQ, once, in SRQ post order, with
 * QSM_WC_SRQ, never a flush, its data as sent (D4). */
void srq_completion(struct rec *r, const struct qsm_wc *wc)
{
	int c = (int)((wc->wr_id >> 40) & 0xff), d = (int)((wc->wr_id >> 32) & 0xff);
	unsigned wi = (unsigned)(wc->wr_id & 0xffffffffu);
	const char *who = r->passive ? "passive" : "active";
	struct qsm_wc plain = *wc;
	struct msrq *m;
	struct wrec *w;

	ds.srq_completions++;
	if (c != r->c || d >= NDEV || !(m = &msrq[c][d])->s || ((wc->wr_id >> 48) & 0x7fff) != (m->gen & 0x7fff) ||
	    wi >= m->nrv) {
		violate("%s queue #%u: completion of SRQ wr_id %#llx, of no SRQ receive posted in its ctx", who,
			r->idx, (unsigned long long)wc->wr_id);
		return;
	}
	w = &m->rv[wi];
	/* (as its queue lets go of the QP, the queue has no SRQ, the sim's QP still there) */
	if (!r->ci->srq || (qsm_conn_srq(r->q) != m->s && !(!qsm_conn_srq(r->q) && sim_qp(r) != -ENOENT)))
		violate("%s queue #%u (class %s): completion of a receive of ctx%d %s's SRQ, not its own", who,
			r->idx, r->ci->cls->name, c, dev_name[d]);
	if (!(wc->wc_flags & QSM_WC_SRQ))
		violate("SRQ receive %u completes without QSM_WC_SRQ (wc_flags %#x)", wi, wc->wc_flags);
	if (w->st != W_OUT) {
		violate("%s queue in %s: completion (status %d) of SRQ receive %u of %s %s%s", who,
			qsm_conn_state_name(r->q), wc->status, wi, dev_name[d], wr_state_names[w->st],
			w->st == W_GONE_QP ? " (a later one completed first: out of post order)" : "");
		return;
	}
	if (wc->status == QSM_WC_WR_FLUSH_ERR)
		violate("SRQ receive %u flushed: a QP in ERR leaves the SRQ's receives there", wi);
	if (wc->status != QSM_WC_SUCCESS && (wc->wc_flags != QSM_WC_SRQ || wc->imm_data || wc->byte_len))
		violate("SRQ receive %u: status %d with wc_flags %#x, imm_data %#x, byte_len %u", wi, wc->status,
			wc->wc_flags, wc->imm_data, wc->byte_len);
	if (wc->opcode != QSM_WR_RECV && !(wc->status == QSM_WC_SUCCESS && wc->opcode == QSM_WR_RECV_RDMA_WITH_IMM))
		violate("SRQ receive %u completes with opcode %d", wi, wc->opcode);
	if (wc->status == QSM_WC_SUCCESS && w->must_fail && wc->opcode != QSM_WR_RECV_RDMA_WITH_IMM)
		violate("SRQ receive %u with no keys completed with SUCCESS", wi);
	/* the SRQ is taken in post order, and its QPs' completions share the ctx's queue: one
	 * before it that no hold could have delayed went with its QP -- unless this one comes as
	 * its queue lets go of its QP (no QP from the first of those on): the runtime takes what
	 * the fabric still holds for that QP then, ahead of the other QPs' completions */
	for (unsigned i = m->scan; i < wi && qsm_conn_qp_state(r->q) != -ENOENT; i++) {
		struct wrec *e = &m->rv[i];

		if (e->st != W_OUT)
			continue;
		if (!tainted(e))
			srq_finish(m, e, W_GONE_QP);
		else
			e->passed = true;
	}
	ds.srq_ok += wc->status == QSM_WC_SUCCESS;
	if (wc->status == QSM_WC_SUCCESS) {
		plain.wc_flags &= ~(unsigned)QSM_WC_SRQ;
		check_recv_data(r, w, &plain, wi);
		ds.srq_checked++;
	}
	srq_finish(m, w, W_DONE);
}

/* (S2) Settled: nothing is in flight, so the receives that went with their QPs are the oldest
 * outstanding ones; filling the SRQ to -ENOBUFS counts them, and the SRQ takes exactly
 * srq.max_wr less what is outstanding. */
static void srq_probe(struct msrq *m)
{
	/* (more may be outstanding than max_wr: some went with their QPs, unseen) */
	unsigned free_model = m->n_out < SRQ_MAX_WR ? SRQ_MAX_WR - m->n_out : 0, maybe = unsure(m), ok = 0;
	unsigned lost = 0, x = m->n_out > SRQ_MAX_WR ? m->n_out - SRQ_MAX_WR : 0;
	int got;

	for (;;) {
		if (ok >= free_model + maybe) {
			/* exact from here: the next one is -ENOBUFS */
			m->dying = false;
			m->loss_mark = 0;
		}
		got = srq_post(m, false);
		if (got != 0 || violation[0])
			break;
		ok++;
		if (ok > free_model + maybe) {
			violate("the SRQ of ctx%d on %s took %u receives with %u of %u outstanding, %u unsure",
				m->c, dev_name[m->d], ok, m->n_out - ok, SRQ_MAX_WR, maybe);
			return;
		}
	}
	ds.srq_enobufs_strict += got == -ENOBUFS && ok >= free_model;
	if (got == -ENOBUFS && ok < free_model)
		violate("the SRQ of ctx%d on %s: -ENOBUFS after %u receives with %u of %u outstanding", m->c,
			dev_name[m->d], ok, m->n_out - ok, SRQ_MAX_WR);
	if (got != -ENOBUFS)
		return;
	x += ok > free_model ? ok - free_model : 0;
	for (unsigned i = m->scan; lost < x && i < m->nrv; i++)
		if (m->rv[i].st == W_OUT) {
			srq_finish(m, &m->rv[i], W_GONE_QP);
			lost++;
		}
	ds.srq_probes++;
	ds.srq_probe_lost += lost;
	m->dying = false;
	m->loss_mark = 0;
}

/* Called with `settled` true. */
void srq_settled(void)
{
	for (int c = 0; c < NCTX; c++)
		for (int d = 0; d < NDEV; d++) {
			struct msrq *m = &msrq[c][d];

			if (!m->s || m->removing)
				continue;
			if (m->dying) {
				m->dying = false;
				m->loss_mark = m->nrv;
			}
			if (chance(40) || unsure(m))
				srq_probe(m);
		}
}

/* (S4) SRQs the ctxs count are those the model saw made and not gone, and the sim's. */
void srq_check_accounting(void)
{
	struct qsm_sim_stats st;
	uint64_t all_live = 0;

	for (int c = 0; c < NCTX; c++) {
		struct qsm_counters k;

		CHECK(qsm_ctx_counters(ctx[c], &k, sizeof(k)) == 0, "counters");
		CHECK(k.srqs_live == srqs_of(c), "ctx%d counts %llu SRQs, the model %u", c,
		      (unsigned long long)k.srqs_live, srqs_of(c));
		all_live += k.srqs_live;
	}
	qsm_sim_get_stats(sim, &st);
	CHECK(st.srqs == all_live, "the sim holds %u SRQs, the ctxs %llu", st.srqs, (unsigned long long)all_live);
}

/* (S5) LAST_WQE: only on a queue of the SRQ class, always an edge. */
void srq_event(struct rec *r, const struct qsm_event_info *ev, bool unexpected)
{
	if (ev->event != QSM_EV_LAST_WQE)
		return;
	ds.srq_last_wqe++;
	if (!r->ci->srq)
		violate("LAST_WQE on a %s queue of class %s, which has no SRQ", r->passive ? "passive" : "active",
			r->ci->cls->name);
	if (unexpected)
		violate("LAST_WQE unexpected in %s %s", r->passive ? "passive" : "active",
			qsm_state_name(machine_of(r), ev->from));
	r->last_wqe_gen = r->gen;
}

/* (S5) On an SRQ, DRAINED only after LAST_WQE (unless a hold may have reordered them). */
void srq_drained(struct rec *r)
{
	if (r->ci->srq && r->last_wqe_gen != r->gen && !r->qp_hold_armed && r->qp_hold_epoch == hold_epoch)
		violate("%s queue of the SRQ class: DRAINED of QP #%u before its LAST_WQE",
			r->passive ? "passive" : "active", r->gen);
	ds.srq_drained += r->ci->srq;
}
