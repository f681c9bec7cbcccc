/* rdma-qsm model test: the data path's model: MRs (D5) and posts (D1, D7): what each call must
 * answer, and what a WR that went is owed; its completion is completion.c's. */
#include "model.h"

const struct mr_spec mr_spec[NMR] = {
	[MR_LOCAL] = { 0, BUF_LEN, QSM_ACCESS_LOCAL_WRITE },
	[MR_RW] = { RW_OFF, RW_LEN, QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ },
	[MR_RO] = { RO_OFF, RO_LEN, QSM_ACCESS_REMOTE_READ },
};

const char *const kind_names[] = { "RECV", "SEND", "WRITE", "READ" };
const enum qsm_wr_opcode kind_op[] = { QSM_WR_RECV, QSM_WR_SEND, QSM_WR_RDMA_WRITE, QSM_WR_RDMA_READ };

const char *const wr_state_names[] = {
	"whose post failed", "", "already completed", "whose QP was destroyed",
	"whose QP was drained (DRAINED)", "whose queue was destroyed",
};

struct msg *msgs;
unsigned nmsgs, msgs_cap;
struct data_stats ds;

/* ---- the data path: MRs ---- */

bool all_devices_up(void)
{
	for (int d = 0; d < NDEV; d++)
		if (qsm_sim_device_state(sim, dev_name[d]) != QSM_SIM_DEVICE_UP)
			return false;
	return true;
}

int sim_qp(const struct rec *r)
{
	return qsm_sim_qp_state(sim, fab[r->c], r->q);
}

bool mr_ok(const struct rec *r, int m)
{
	return !r->gone && r->mr[m] && qsm_mr_valid(r->mr[m]);
}

void reg_one(struct rec *r, int m)
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

void dereg_one(struct rec *r, int m)
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

void ensure_mrs(struct rec *r)
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

void op_mr(struct rec *r)
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

/* ---- the data path: posts and lists (D1, D7) ---- */

bool drain_started(const struct rec *r)
{
	int s = qsm_conn_state(r->q);

	return r->passive ? s == QSM_ACCEPT_DRAINING : s == QSM_CM_DRAINING || s == QSM_CM_CLOSING;
}

/* The man page: "The queue has no QP" in these states. */
bool doc_no_qp(const struct rec *r)
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

/* D1: no QP, or the drain started: -ENOTCONN.  No QP to the runtime already while its WRs
 * complete as the queue lets go of it, the sim's QP still there. */
static bool no_door(struct rec *r)
{
	return sim_qp(r) == -ENOENT || drain_started(r) || qsm_conn_qp_state(r->q) == -ENOENT;
}

/* Everything settled: every completion is in, the model's count of receives outstanding
 * is the QP's (else it may count some that a send used already). */
bool settled;

/* D1 for a call posting n WRs (a receive: one): what the door refuses, then the QP. */
static int expect_n(struct rec *r, bool door_bad, bool recv, unsigned n, int *sq)
{
	*sq = sim_qp(r);
	if (*sq != -ENOENT && doc_no_qp(r) && !r->in_qp_ready)
		violate("%s queue in %s has a QP (%d) outside qp_ready", r->passive ? "passive" : "active",
			qsm_conn_state_name(r->q), *sq);
	if (door_bad)
		return -EINVAL;
	if (no_door(r))
		return -ENOTCONN;
	if (*sq == QSM_QP_ERR)
		return 0;       /* flushed */
	if (!recv && *sq != QSM_QP_RTS)
		return -EINVAL; /* the sim: not ready to send */
	if (recv && r->n_out_recv >= r->ci->max_recv_wr)
		return settled ? -ENOBUFS : MAYBE_ENOBUFS;
	/* the sim frees a slot when the runtime takes the completion, at the latest when it is
	 * handled: the model's count is never below the sim's */
	if (!recv && r->n_sq_held + n > r->ci->max_send_wr)
		return settled ? -ENOBUFS : MAYBE_ENOBUFS;
	return 0;
}

int expect_post(struct rec *r, int kind, int nsge, bool bad_flags, int *sq)
{
	uint32_t cap = kind == K_RECV ? r->ci->recv_sge : r->ci->send_sge;

	/* SGEs beyond the class's caps are the door's to refuse, as those beyond QSM_MAX_SGE */
	return expect_n(r, bad_flags || nsge < 0 || nsge > QSM_MAX_SGE || (uint32_t)nsge > cap,
			kind == K_RECV, 1, sq);
}

/* A list is checked whole (fabric.h): one bad WR fails it all, n WRs need n free slots. */
int expect_list(struct rec *r, const struct spost *p, unsigned n, int *sq)
{
	bool door_bad = false;

	for (unsigned i = 0; i < n; i++)
		door_bad |= p[i].door_bad;
	return expect_n(r, door_bad, false, n, sq);
}

/* A WR the queue is about to post: its wr_id is its index, never reused. */
struct wrec *wr_add(struct rec *r, int kind, uint64_t *wr_id)
{
	struct wrec *w;

	if (r->nwr == r->wr_cap)
		r->wr = grow_to(r->wr, &r->wr_cap, sizeof(*r->wr), 8);
	*wr_id = ((uint64_t)(r->idx + 1) << 32) | r->nwr;
	w = &r->wr[r->nwr++];
	wr_init(w, kind, r->gen);
	return w;
}

/* A WR not posted yet, of QP (or SRQ) generation gen, in the hold epoch of now. */
void wr_init(struct wrec *w, int kind, uint32_t gen)
{
	memset(w, 0, sizeof(*w));
	w->kind = (uint8_t)kind;
	w->op = (uint8_t)kind_op[kind];
	w->st = W_NEVER;
	w->gen = gen;
	w->hold_epoch = hold_epoch;
	w->hold_armed = hold_armed;
	w->slot = -1;
	w->target = -1;
}

/* Checks a post call's return (D1) and counts it; true if what it posts went.  n: the WRs of
 * a list, 0 for a single post. */
bool post_ok(struct rec *r, int kind, unsigned n, int want, int got, int sq, int nsge)
{
	ds.post_calls++;
	ds.enotconn += got == -ENOTCONN;
	ds.einval += got == -EINVAL;
	ds.enobufs += got == -ENOBUFS;
	ds.sq_full += got == -ENOBUFS && kind != K_RECV;
	if (n) {
		ds.lists++;
		ds.list_einval += got == -EINVAL;
		ds.list_enobufs += got == -ENOBUFS;
		ds.list_enobufs_strict += got == -ENOBUFS && want == -ENOBUFS;
		ds.list_enotconn += got == -ENOTCONN;
	}
	if (want == MAYBE_ENOBUFS ? got != 0 && got != -ENOBUFS : got != want) {
		char what[32];

		if (n)
			snprintf(what, sizeof(what), "a list of %u", n);
		else
			snprintf(what, sizeof(what), "%s (nsge %d)", kind_names[kind], nsge);
		violate("post %s on a %s queue in %s (QP %d, sim QP %d, %u receives out, %u send slots held of "
			"%u): %d, want %d", what, r->passive ? "passive" : "active", qsm_conn_state_name(r->q),
			qsm_conn_qp_state(r->q), sq, r->n_out_recv, r->n_sq_held, r->ci->max_send_wr, got,
			want == MAYBE_ENOBUFS ? 0 : want);
		return false;
	}
	return got == 0;
}

/* The WR went: it is outstanding, and holds a send queue slot unless its QP flushes it. */
void post_took(struct rec *r, struct wrec *w, int sq)
{
	w->st = W_OUT;
	w->in_err = sq == QSM_QP_ERR;
	w->required = w->kind == K_RECV || w->signaled || w->in_err;
	ds.posted[w->kind]++;
	ds.must_fail += w->must_fail;
	if (w->kind == K_RECV)
		r->n_out_recv++;
	else if (!w->in_err) {
		w->sq_held = true;
		r->n_sq_held++;
	}
}

/* Checks a single post's return (D1); true if the WR is posted. */
bool posted(struct rec *r, struct wrec *w, int want, int got, int sq, int nsge)
{
	if (!post_ok(r, w->kind, 0, want, got, sq, nsge))
		return false;
	post_took(r, w, sq);
	return true;
}

int free_slot(unsigned used, int n)
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
int lay_out(struct qsm_sge *sge, uint8_t *base, uint32_t len, uint32_t lkey, uint32_t max_sge)
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

void gather(const struct qsm_sge *sge, int nsge, uint8_t *out, uint32_t len)
{
	uint32_t done = 0;

	for (int i = 0; i < nsge && done < len; i++) {
		uint32_t n = sge[i].length < len - done ? sge[i].length : len - done;

		memcpy(out + done, (const void *)(uintptr_t)sge[i].addr, n);
		done += n;
	}
}

void scatter(const struct qsm_sge *sge, int nsge, const uint8_t *in)
{
	for (int i = 0, off = 0; i < nsge; off += (int)sge[i].length, i++)
		memcpy((void *)(uintptr_t)sge[i].addr, in + off, sge[i].length);
}

void build_msg(uint8_t *out, uint64_t seq, uint32_t len)
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

uint64_t new_msg(void)
{
	if (nmsgs == msgs_cap)
		msgs = grow(msgs, &msgs_cap, sizeof(*msgs));
	msgs[nmsgs] = (struct msg){ .sender = -1, .kind = K_COUNT };
	return nmsgs++;
}

/* Sometimes an SGE count the QP does not take (its caps, or QSM_MAX_SGE). */
int odd_nsge(const struct rec *r, int kind, int nsge, struct qsm_sge *sge)
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

void op_recv(struct rec *r)
{
	struct qsm_sge sge[QSM_MAX_SGE + 1];
	uint64_t wr_id;
	struct wrec *w;
	int slot, nsge, want, got, sq;
	uint32_t cap, lkey = r->lkey[MR_LOCAL];
	bool bad = !mr_ok(r, MR_LOCAL);
	uint8_t *base;

	if (!r->gone && r->ci->srq) {
		srq_op_recv(r);
		return;
	}
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

/* Signaled mostly; INLINE now and then (a READ's is refused at the door); a bad bit rarely. */
unsigned post_flags(struct wrec *w, bool *bad_flags, bool read)
{
	bool bad_bit;

	w->signaled = chance(70);
	w->inl = chance(read ? 1 : 12);
	bad_bit = chance(1);
	*bad_flags = bad_bit || (read && w->inl);
	return (w->signaled ? QSM_POST_SIGNALED : 0) | (w->inl ? QSM_POST_INLINE : 0) | (bad_bit ? 0x80u : 0u);
}

/* The peer has a receive posted for one more message (after `used` of this call). */
bool credit(const struct rec *r, unsigned used)
{
	const struct rec *p = r->peer >= 0 ? all[r->peer] : NULL;

	if (p && !p->gone && p->ci->srq)
		return srq_credit(p, used);
	return !p || !(r->passive || r->peer_gen == r->gen) || p->gone || p->n_out_recv > used;
}

/* The immediate data of message seq: the receive's completion names it. */
static uint32_t imm_of(uint64_t seq)
{
	return 0x80000000u | (uint32_t)seq;
}

/* A WR's local part: lkey (a bad one now and then), its SGEs over `base`; INLINE needs no lkey. */
static void prep_local(struct rec *r, struct wrec *w, struct spost *p, uint8_t *base, bool *bad_local)
{
	uint32_t lkey = r->lkey[MR_LOCAL];

	*bad_local = !mr_ok(r, MR_LOCAL);
	if (chance(3)) {
		lkey = r->lkey[MR_RW];   /* an lkey whose MR does not cover the slot */
		*bad_local = true;
	}
	p->nsge = !w->len && chance(50) ? 0 : lay_out(p->sge, base, w->len, lkey, r->ci->send_sge);
	w->lkey = p->nsge > 0 ? p->sge[0].lkey : 0;
	if (w->inl)
		*bad_local = false;
	w->local_ok = !*bad_local;
}

/* The door's and the caps' view of a send WR (D1). */
static void prep_checks(struct rec *r, struct wrec *w, struct spost *p, bool bad_flags)
{
	uint32_t len = 0;

	p->nsge = odd_nsge(r, w->kind, p->nsge, p->sge);
	for (int i = 0; i < p->nsge && i <= QSM_MAX_SGE; i++)
		len += p->sge[i].length;
	p->door_bad = bad_flags || p->nsge > QSM_MAX_SGE || (uint32_t)p->nsge > r->ci->send_sge ||
		      (w->inl && len > r->ci->max_inline);
	w->nsge = (uint8_t)(p->nsge < 2 ? p->nsge : 2);
	memcpy(w->sge, p->sge, sizeof(w->sge));
}

/* A send: false if the queue is gone or (unless forced) the peer has no receive for it. */
bool prep_send(struct rec *r, bool force, bool in_list, struct spost *p)
{
	uint8_t data[SLOT];
	uint64_t seq = 0;
	struct wrec *w;
	bool bad, bad_flags, imm = in_list && chance(25);
	uint8_t *base;

	if (r->gone)
		return false;
	/* credits: mostly only when the peer has a receive posted */
	if (!force && !credit(r, 0) && chance(80))
		return false;
	memset(p, 0, sizeof(*p));
	p->slot = -1;
	w = wr_add(r, K_SEND, &p->wr_id);
	p->wi = (unsigned)(w - r->wr);
	base = r->buf + SEND_OFF + (r->send_rr++ % NSSLOT) * SLOT;
	w->len = chance(8) ? 0 : chance(85) ? HDR + below(48 - HDR + 1) : 49 + below(SLOT - 49 + 1);
	if (w->len || imm)
		seq = new_msg();
	build_msg(data, seq, w->len);
	p->flags = post_flags(w, &bad_flags, false);
	prep_local(r, w, p, base, &bad);
	scatter(p->sge, p->nsge, data);
	if (imm) {
		w->op = QSM_WR_SEND_WITH_IMM;
		p->imm = imm_of(seq);
	}
	w->must_fail = bad && p->nsge > 0;
	w->seq = seq;
	prep_checks(r, w, p, bad_flags);
	return true;
}

void op_send(struct rec *r, bool force)
{
	struct spost p;

	if (prep_send(r, force, false, &p))
		post_one(r, &p);
}

/* The memory an RDMA names: the peer's mostly, another queue's, or the queue's own. */
struct rec *rdma_target(struct rec *r)
{
	if (r->peer >= 0 && (r->passive || r->peer_gen == r->gen) && chance(85))
		return all[r->peer];
	return chance(50) ? r : all[below(nall)];
}

/* A write or read (a WRITE_WITH_IMM only in a list); the queue is not gone. */
void prep_rdma(struct rec *r, bool write, bool in_list, struct spost *p)
{
	uint8_t data[SLOT];
	uint64_t seq = 0;
	struct wrec *w;
	struct rec *x;
	int m = write ? MR_RW : MR_RO;
	uint32_t len, toff, area, area_len;
	bool bad_local, bad_remote, bad_flags, check = true, imm = write && in_list && chance(25);
	unsigned mode = below(100);
	uint8_t *base;

	memset(p, 0, sizeof(*p));
	p->slot = -1;
	x = rdma_target(r);
	if (!write && chance(10)) {
		m = MR_RW;      /* readable too, but its bytes are not known: not checked */
		check = false;
	}
	area = mr_spec[m].off;
	area_len = mr_spec[m].len;
	/* the rkey: valid unless the queue is known to have dropped it; if gone: unknown */
	p->rkey = mr_ok(x, m) ? qsm_mr_rkey(x->mr[m]) : x->rkey[m];
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
		p->rkey = write ? x->rkey[MR_RO] : x->lkey[MR_LOCAL];
		bad_remote = true;
	} else if (mode < 15) {
		p->rkey = 0x40000000u | (uint32_t)below(1u << 24);
		bad_remote = true;
	} else if (mode < 18 && x->old_rkey[m] && x->old_rkey[m] != x->rkey[m]) {
		p->rkey = x->old_rkey[m];
		bad_remote = true;
	}
	if (!x->buf)
		bad_remote = true;  /* gone two settles ago: its MRs are deregistered */
	p->raddr = (x->buf ? (uintptr_t)x->buf : (uintptr_t)0x10000) + area + toff;
	w = wr_add(r, write ? K_WRITE : K_READ, &p->wr_id);
	p->wi = (unsigned)(w - r->wr);
	w->len = len;
	p->flags = post_flags(w, &bad_flags, !write);
	if (write) {
		base = r->buf + SEND_OFF + (r->send_rr++ % NSSLOT) * SLOT;
		if (len || imm)
			seq = new_msg();
		build_msg(data, seq, len);
	} else {
		/* a signaled read keeps its landing slot until it completes; unsignaled ones share one */
		p->slot = w->signaled ? free_slot(r->lslots, NLSLOT - 1) : NLSLOT - 1;
		if (p->slot < 0) {
			p->slot = NLSLOT - 1;
			check = false;
		}
		if (p->slot < NLSLOT - 1)
			r->lslots |= (uint8_t)(1u << p->slot);  /* taken now: a later WR of the list needs another */
		base = r->buf + RD_OFF + (uint32_t)p->slot * SLOT;
		memset(base, POISON, SLOT);
	}
	prep_local(r, w, p, base, &bad_local);
	if (write)
		scatter(p->sge, p->nsge, data);
	if (imm) {
		w->op = QSM_WR_RDMA_WRITE_WITH_IMM;
		p->imm = imm_of(seq);
	}
	w->must_fail = len > 0 && (bad_remote || (bad_local && p->nsge > 0));
	w->seq = seq;
	w->target = (int32_t)x->idx;
	w->toff = toff;
	w->check = check && len > 0 && !w->must_fail && (write || p->slot < NLSLOT - 1);
	prep_checks(r, w, p, bad_flags);
}

static struct qsm_wr wr_of(const struct rec *r, const struct spost *p)
{
	const struct wrec *w = &r->wr[p->wi];

	return (struct qsm_wr){ .wr_id = p->wr_id, .opcode = w->op, .sg_list = p->sge, .num_sge = p->nsge,
				.remote_addr = p->raddr, .rkey = p->rkey, .flags = p->flags, .imm_data = p->imm };
}

/* After the call: a posted WR's message is known, its landing slot kept; else the slot is free. */
void post_done(struct rec *r, struct spost *p, bool ok)
{
	struct wrec *w = &r->wr[p->wi];

	if (!ok) {
		if (w->kind == K_READ && p->slot >= 0 && p->slot < NLSLOT - 1)
			r->lslots &= (uint8_t)~(1u << p->slot);
		return;
	}
	ds.imm_posted += w->op == QSM_WR_SEND_WITH_IMM || w->op == QSM_WR_RDMA_WRITE_WITH_IMM;
	ds.inline_posted += w->inl;
	if (w->seq)
		msgs[w->seq] = (struct msg){ .sender = (int32_t)r->idx, .len = w->len, .kind = w->kind,
					     .imm = w->op == kind_op[w->kind] ? 0 : w->op };
	/* it may land (its key may be good): an earlier write there is not checked then */
	if (w->kind == K_WRITE && w->len && !w->must_fail && w->toff % SLOT == 0)
		all[w->target]->rw_last[w->toff / SLOT] = w->seq;
	if (w->kind == K_READ && p->slot < NLSLOT - 1)
		w->slot = (int8_t)p->slot;
}

/* One WR: its own call, or now and then a list of one, which answers the same (D1). */
void post_one(struct rec *r, struct spost *p)
{
	struct qsm_wr one = wr_of(r, p);
	struct wrec *w = &r->wr[p->wi];
	int sq, got, want = expect_list(r, p, 1, &sq);

	if (chance(20)) {
		int n = -1;

		got = qsm_conn_post_list(r->q, &one, 1, &n);
		if (n != (got == 0))
			violate("post_list of one returned %d with *posted %d", got, n);
	} else if (w->kind == K_SEND) {
		got = qsm_conn_post_send(r->q, p->wr_id, p->sge, p->nsge, p->flags);
	} else if (w->kind == K_WRITE) {
		got = qsm_conn_post_write(r->q, p->wr_id, p->sge, p->nsge, p->raddr, p->rkey, p->flags);
	} else {
		got = qsm_conn_post_read(r->q, p->wr_id, p->sge, p->nsge, p->raddr, p->rkey, p->flags);
	}
	post_done(r, p, posted(r, w, want, got, sq, p->nsge));
}

void op_rdma(struct rec *r, bool write)
{
	struct spost p;

	if (r->gone)
		return;
	prep_rdma(r, write, false, &p);
	post_one(r, &p);
}

/* A list of 2..LIST_MAX sends, writes and reads in one call (D7): all of it or none.
 * plain_writes: only writes without immediate data (filling the send queue). */
void op_list(struct rec *r, bool plain_writes)
{
	struct spost p[LIST_MAX];
	struct qsm_wr wrs[LIST_MAX];
	unsigned n = 2 + below(LIST_MAX - 1), k = 0, sends = 0;
	int sq, got, want, np = -1;
	bool ok;

	if (r->gone)
		return;
	while (k < n) {
		unsigned x = below(10);

		if (plain_writes) {
			prep_rdma(r, true, false, &p[k]);
		} else if (x < 4 && (credit(r, sends) || chance(20))) {
			CHECK(prep_send(r, true, true, &p[k]), "prep_send of a list");
		} else {
			prep_rdma(r, x < 7, true, &p[k]);
		}
		sends += r->wr[p[k].wi].op != QSM_WR_RDMA_WRITE && r->wr[p[k].wi].op != QSM_WR_RDMA_READ;
		k++;
	}
	for (k = 0; k < n; k++)
		wrs[k] = wr_of(r, &p[k]);
	if (!plain_writes && chance(2)) {
		/* an opcode no send queue takes: a receive's, or none at all */
		wrs[below(n)].opcode = chance(50) ? QSM_WR_RECV : (enum qsm_wr_opcode)99;
		p[0].door_bad = true;
	}
	if (chance(3)) {
		/* n < 0, or no array: -EINVAL whatever the state; n 0 posts nothing, with a QP */
		int odd = chance(50) ? -1 : (int)n, none = no_door(r) ? -ENOTCONN : 0;

		got = qsm_conn_post_list(r->q, odd < 0 ? wrs : NULL, odd, &np);
		if (got != -EINVAL || np)
			violate("post_list of %d WRs at %s: %d, *posted %d", odd, odd < 0 ? "wrs" : "NULL", got, np);
		got = qsm_conn_post_list(r->q, NULL, 0, &np);
		if (got != none || np)
			violate("post_list of none in %s: %d, *posted %d, want %d", qsm_conn_state_name(r->q), got, np,
				none);
	}
	want = expect_list(r, p, n, &sq);
	got = qsm_conn_post_list(r->q, wrs, (int)n, &np);
	if (np != (got == 0 ? (int)n : 0))
		violate("post_list of %u returned %d with *posted %d", n, got, np);
	ok = post_ok(r, K_SEND, n, want, got, sq, 0);
	for (k = 0; k < n; k++) {
		if (ok)
			post_took(r, &r->wr[p[k].wi], sq);
		post_done(r, &p[k], ok);
	}
	ds.list_wrs += ok ? n : 0;
}

void data_op(struct rec *r)
{
	if (!r || r->gone || quiet)
		return;
	switch (below(22)) {
	case 0: case 1: case 2: case 3: case 4: case 5: op_recv(r); break;
	case 6: case 7: case 8: case 9: case 10: case 11: op_send(r, false); break;
	case 12: case 13: case 14: op_rdma(r, true); break;
	case 15: case 16: case 17: op_rdma(r, false); break;
	case 18: case 19: op_list(r, false); break;
	default: op_mr(r); break;
	}
}

/* The QP exists (INIT), nothing is sent yet: register, post the first receives. */
void qp_created(struct rec *r)
{
	discard(r, W_GONE_QP);  /* a new QP: the old one is gone */
	r->gen++;
	r->qp_up = true;
	if (r->ci->srq)
		srq_qp_created(r);
	r->n_out_recv = 0;
	r->n_sq_held = 0;
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
