/* rdma-qsm model test: the data path's completions (D2, D4, D6, D7): each checked against the WR it
 * names, every byte that lands against what was sent or written. */
#include "model.h"

/* The message a receive got: its sender is the queue's peer, and it came once. */
static void received(struct rec *r, struct msg *m, uint64_t seq)
{
	if (m->received++)
		violate("message %llu received twice", (unsigned long long)seq);
	if (r->peer >= 0 && (r->passive || r->peer_gen == r->gen) && m->sender != r->peer)
		violate("%s queue #%u received message %llu of queue #%d, its peer is #%d",
			r->passive ? "passive" : "active", r->idx, (unsigned long long)seq, m->sender, r->peer);
}

/* A receive with immediate data: imm_data names a SEND_WITH_IMM whose bytes it holds, or a
 * WRITE_WITH_IMM of byte_len bytes, which leaves the receive's memory as it was. */
void check_recv_imm(struct rec *r, const struct wrec *w, const struct qsm_wc *wc, unsigned wi)
{
	bool write = wc->opcode == QSM_WR_RECV_RDMA_WITH_IMM;
	uint64_t seq = wc->imm_data & 0x7fffffffu;
	uint8_t got[SLOT], want[SLOT];
	struct msg *m;

	if (!(wc->imm_data & 0x80000000u) || !seq || seq >= nmsgs) {
		violate("RECV wr %u: imm_data %#x names no message", wi, wc->imm_data);
		return;
	}
	m = &msgs[seq];
	if (m->imm != (write ? QSM_WR_RDMA_WRITE_WITH_IMM : QSM_WR_SEND_WITH_IMM) || m->len != wc->byte_len) {
		violate("RECV wr %u: opcode %d, byte_len %u, imm_data of message %llu, a %s of %u bytes (imm "
			"opcode %d)", wi, wc->opcode, wc->byte_len, (unsigned long long)seq,
			m->kind < K_COUNT ? kind_names[m->kind] : "post that failed", m->len, m->imm);
		return;
	}
	if (!write && wc->byte_len > w->len) {
		violate("RECV wr %u: byte_len %u in a receive of %u bytes", wi, wc->byte_len, w->len);
		return;
	}
	if (write) {
		gather(w->sge, w->nsge, got, w->len);
		for (uint32_t i = 0; i < w->len; i++)
			if (got[i] != POISON) {
				violate("RECV wr %u of a WRITE_WITH_IMM: byte %u of its memory was written", wi, i);
				return;
			}
	} else if (wc->byte_len) {
		gather(w->sge, w->nsge, got, wc->byte_len);
		build_msg(want, seq, wc->byte_len);
		if (wc->byte_len < HDR || memcmp(got, want, wc->byte_len)) {
			violate("RECV wr %u: SEND_WITH_IMM message %llu arrived corrupted", wi,
				(unsigned long long)seq);
			return;
		}
	}
	received(r, m, seq);
	ds.imm_checked++;
}

void check_recv_data(struct rec *r, const struct wrec *w, const struct qsm_wc *wc, unsigned wi)
{
	uint8_t got[SLOT], want[SLOT];
	uint64_t seq;
	uint32_t magic, len;
	struct msg *m;

	if (wc->wc_flags & ~(unsigned)QSM_WC_WITH_IMM || (!(wc->wc_flags & QSM_WC_WITH_IMM) && wc->imm_data) ||
	    (!(wc->wc_flags & QSM_WC_WITH_IMM) && wc->opcode == QSM_WR_RECV_RDMA_WITH_IMM)) {
		violate("RECV wr %u: opcode %d, wc_flags %#x, imm_data %#x", wi, wc->opcode, wc->wc_flags,
			wc->imm_data);
		return;
	}
	if (wc->wc_flags & QSM_WC_WITH_IMM) {
		check_recv_imm(r, w, wc, wi);
		return;
	}
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
	if (m->kind != K_SEND || m->imm || len != wc->byte_len || m->len != wc->byte_len) {
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
	received(r, m, seq);
	ds.recv_checked++;
}

void check_rdma_data(const struct wrec *w, const struct qsm_wc *wc, unsigned wi)
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

/* (D6) A work queue (sends, writes and reads; receives) completes in post order: nothing
 * still outstanding before w may complete after it (unless HOLD reordered them). */
void check_order(struct rec *r, struct wrec *w, unsigned wi)
{
	bool rq = w->kind == K_RECV;

	if (w->passed && !tainted(w))
		violate("%s wr %u of QP #%u completes after a later WR of its work queue", kind_names[w->kind], wi,
			w->gen);
	for (struct wrec *e = r->wr + r->wr_scan; e < w; e++) {
		if (e->st != W_OUT || e->gen != w->gen || (e->kind == K_RECV) != rq)
			continue;
		if (e->required && !tainted(e) && !tainted(w))
			violate("%s wr %u of QP #%u completes before %s%s wr %u posted before it",
				kind_names[w->kind], wi, w->gen, e->signaled ? "signaled " : "",
				kind_names[e->kind], (unsigned)(e - r->wr));
		e->passed = true;
	}
	ds.order_checked++;
}

void check_completion(struct rec *r, const struct qsm_wc *wc)
{
	uint64_t owner = wc->wr_id >> 32;
	unsigned wi = (unsigned)(wc->wr_id & 0xffffffffu);
	const char *who = r->passive ? "passive" : "active";
	struct wrec *w;

	ds.completions++;
	if (wc->wr_id >> 63) {
		srq_completion(r, wc);
		return;
	}
	if (wc->wc_flags & QSM_WC_SRQ)
		violate("completion of wr_id %#llx, no SRQ receive, with QSM_WC_SRQ", (unsigned long long)wc->wr_id);
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
	/* the queue lets go of its QP: what it held completes first, the sim's QP still there */
	if (qsm_conn_qp_state(r->q) == -ENOENT && sim_qp(r) == -ENOENT)
		violate("%s queue in %s: completion of %s wr %u with no QP", who, qsm_conn_state_name(r->q),
			kind_names[w->kind], wi);
	if (w->gen != r->gen)
		violate("completion of %s wr %u of QP #%u on QP #%u", kind_names[w->kind], wi, w->gen, r->gen);
	/* a receive a WRITE_WITH_IMM used says so; its failures and flushes say RECV */
	if (wc->opcode != w->op && !(w->kind == K_RECV && wc->status == QSM_WC_SUCCESS &&
				     wc->opcode == QSM_WR_RECV_RDMA_WITH_IMM))
		violate("%s wr %u (opcode %d) completes with opcode %d", kind_names[w->kind], wi, w->op, wc->opcode);
	if (wc->status != QSM_WC_SUCCESS && (wc->wc_flags || wc->imm_data || wc->invalidated_rkey))
		violate("%s wr %u: status %d with wc_flags %#x, imm_data %#x", kind_names[w->kind], wi, wc->status,
			wc->wc_flags, wc->imm_data);
	if (wc->status != QSM_WC_SUCCESS && wc->byte_len)
		violate("%s wr %u: status %d with byte_len %u", kind_names[w->kind], wi, wc->status, wc->byte_len);
	if (wc->status == QSM_WC_SUCCESS && !w->signaled)
		violate("unsignaled %s wr %u completed with SUCCESS", kind_names[w->kind], wi);
	/* (a WRITE_WITH_IMM touches no memory of the receive it uses) */
	if (wc->status == QSM_WC_SUCCESS && w->must_fail && wc->opcode != QSM_WR_RECV_RDMA_WITH_IMM)
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
	if (wc->status == QSM_WC_LOC_PROT_ERR && w->inl)
		violate("%s queue in %s: INLINE %s wr %u failed with LOC_PROT_ERR (inline data needs no lkey)", who,
			qsm_conn_state_name(r->q), kind_names[w->kind], wi);
	check_order(r, w, wi);
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
