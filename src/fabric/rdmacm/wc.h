/* rdma-qsm internal, the rdmacm fabric: what a successful receive reports (wc.c), written in
 * place into a batch's entry; the common case inline, imm data and invalidation out of line. */
#ifndef QSM_RDMACM_WC_H
#define QSM_RDMACM_WC_H

#include "fabric/rdmacm/rdmacm.h"

/* A receive's opcode when it is not a SEND's, its imm data and invalidation (recv_wc, when its
 * opcode is not IBV_WC_RECV or its wc_flags carry any). */
void qsm_rc_recv_flags(const struct ibv_wc *wc, struct qsm_fabric_wc *w);
/* A successful receive, written in place: what arrived (a SEND or a WRITE_WITH_IMM), its length,
 * imm data, invalidation; wr_id is the caller's to write.  Inline: once per completion. */
static inline void qsm_rc_recv_wc(const struct ibv_wc *wc, struct qsm_fabric_wc *w)
{
	w->status = QSM_WC_SUCCESS;
	w->opcode = QSM_WR_RECV;
	w->byte_len = wc->byte_len;
	w->imm_data = 0;
	w->invalidated_rkey = 0;
	w->wc_flags = 0;
	if (__builtin_expect(wc->opcode != IBV_WC_RECV ||
			     (wc->wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV | IBV_WC_IP_CSUM_OK)), 0))
		qsm_rc_recv_flags(wc, w);
}

#endif
