/* rdma-qsm model test: the data path's model: MRs (D5) and posts (D1): what each call must
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

/* ---- the data path: posts (D1) ---- */

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

/* Everything settled: every completion is in, the model's count of receives outstanding
 * is the QP's (else it may count some that a send used already). */
bool settled;

int expect_post(struct rec *r, int kind, int nsge, bool bad_flags, int *sq)
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
		return settled ? -ENOBUFS : MAYBE_ENOBUFS;
	/* the sim frees a slot when the runtime takes the completion, at the latest when it is
	 * handled: the model's count is never below the sim's */
	if (kind != K_RECV && r->n_sq_held >= r->ci->max_send_wr)
		return settled ? -ENOBUFS : MAYBE_ENOBUFS;
	return 0;
}

/* A WR the queue is about to post: its wr_id is its index, never reused. */
struct wrec *wr_add(struct rec *r, int kind, uint64_t *wr_id)
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
bool posted(struct rec *r, struct wrec *w, int want, int got, int sq, int nsge)
{
	ds.post_calls++;
	ds.enotconn += got == -ENOTCONN;
	ds.einval += got == -EINVAL;
	ds.enobufs += got == -ENOBUFS;
	ds.sq_full += got == -ENOBUFS && w->kind != K_RECV;
	if (want == MAYBE_ENOBUFS ? got != 0 && got != -ENOBUFS : got != want) {
		violate("post %s (nsge %d) on a %s queue in %s (QP %d, sim QP %d, %u receives out): %d, want %d",
			kind_names[w->kind], nsge, r->passive ? "passive" : "active", qsm_conn_state_name(r->q),
			qsm_conn_qp_state(r->q), sq, r->n_out_recv, got, want == MAYBE_ENOBUFS ? 0 : want);
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
	else if (!w->in_err) {
		w->sq_held = true;
		r->n_sq_held++;
	}
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

unsigned post_flags(struct wrec *w, bool *bad_flags)
{
	w->signaled = chance(70);
	*bad_flags = chance(1);
	return (w->signaled ? QSM_POST_SIGNALED : 0) | (*bad_flags ? 0x80u : 0u);
}

void op_send(struct rec *r, bool force)
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
struct rec *rdma_target(struct rec *r)
{
	if (r->peer >= 0 && (r->passive || r->peer_gen == r->gen) && chance(85))
		return all[r->peer];
	return chance(50) ? r : all[below(nall)];
}

void op_rdma(struct rec *r, bool write)
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
	if (chance(20)) {
		/* the same WR as a list of one: the same answers (D1) */
		struct qsm_wr one = { .wr_id = wr_id, .opcode = kind_op[w->kind], .sg_list = sge,
				      .num_sge = nsge, .remote_addr = raddr, .rkey = rkey, .flags = flags };
		int n = -1;

		got = qsm_conn_post_list(r->q, &one, 1, &n);
		if (n != (got == 0))
			violate("post_list of one returned %d with *posted %d", got, n);
	} else {
		got = write ? qsm_conn_post_write(r->q, wr_id, sge, nsge, raddr, rkey, flags)
			    : qsm_conn_post_read(r->q, wr_id, sge, nsge, raddr, rkey, flags);
	}
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

void data_op(struct rec *r)
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
void qp_created(struct rec *r)
{
	discard(r, W_GONE_QP);  /* a new QP: the old one is gone */
	r->gen++;
	r->qp_up = true;
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
