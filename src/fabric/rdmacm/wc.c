/* rdma-qsm: what the rdmacm fabric's work queues share with its SRQs: completion statuses and
 * receives as the runtime sees them, and SGEs made verbs'. */
#include "fabric/rdmacm/rdmacm.h"
#include "fabric/rdmacm/wc.h"

/* Every ibv_wc_status by name (STYLE: foreign enums mapped explicitly); one this build's
 * rdma-core does not define is GENERAL_ERR, counted in wc_unknown and shown by
 * QSM_RDMACM_STATS. */
enum qsm_wc_status qsm_rc_wc_status(struct rc_fabric *f, enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS: return QSM_WC_SUCCESS;
	case IBV_WC_LOC_LEN_ERR: return QSM_WC_LOC_LEN_ERR;
	case IBV_WC_LOC_QP_OP_ERR: return QSM_WC_LOC_QP_OP_ERR;
	case IBV_WC_LOC_EEC_OP_ERR: return QSM_WC_LOC_EEC_OP_ERR;
	case IBV_WC_LOC_PROT_ERR: return QSM_WC_LOC_PROT_ERR;
	case IBV_WC_WR_FLUSH_ERR: return QSM_WC_WR_FLUSH_ERR;
	case IBV_WC_MW_BIND_ERR: return QSM_WC_MW_BIND_ERR;
	case IBV_WC_BAD_RESP_ERR: return QSM_WC_BAD_RESP_ERR;
	case IBV_WC_LOC_ACCESS_ERR: return QSM_WC_LOC_ACCESS_ERR;
	case IBV_WC_REM_INV_REQ_ERR: return QSM_WC_REM_INV_REQ_ERR;
	case IBV_WC_REM_ACCESS_ERR: return QSM_WC_REM_ACCESS_ERR;
	case IBV_WC_REM_OP_ERR: return QSM_WC_REM_OP_ERR;
	case IBV_WC_RETRY_EXC_ERR: return QSM_WC_RETRY_EXC_ERR;
	case IBV_WC_RNR_RETRY_EXC_ERR: return QSM_WC_RNR_RETRY_EXC_ERR;
	case IBV_WC_LOC_RDD_VIOL_ERR: return QSM_WC_LOC_RDD_VIOL_ERR;
	case IBV_WC_REM_INV_RD_REQ_ERR: return QSM_WC_REM_INV_RD_REQ_ERR;
	case IBV_WC_REM_ABORT_ERR: return QSM_WC_REM_ABORT_ERR;
	case IBV_WC_INV_EECN_ERR: return QSM_WC_INV_EECN_ERR;
	case IBV_WC_INV_EEC_STATE_ERR: return QSM_WC_INV_EEC_STATE_ERR;
	case IBV_WC_FATAL_ERR: return QSM_WC_FATAL_ERR;
	case IBV_WC_RESP_TIMEOUT_ERR: return QSM_WC_RESP_TIMEOUT_ERR;
	case IBV_WC_GENERAL_ERR: return QSM_WC_GENERAL_ERR;
	/* tag matching: SRQs with TM only, never on the fabric's QPs */
	case IBV_WC_TM_ERR:
	case IBV_WC_TM_RNDV_INCOMPLETE:
		break;
	}
	f->wc_unknown++;
	return QSM_WC_GENERAL_ERR;
}

void qsm_rc_recv_flags(const struct ibv_wc *wc, struct qsm_fabric_wc *w)
{
	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
		w->opcode = QSM_WR_RECV_RDMA_WITH_IMM;
	if (wc->wc_flags & IBV_WC_WITH_IMM) {
		w->wc_flags |= QSM_WC_WITH_IMM;
		w->imm_data = wc->imm_data;   /* carried as is, as the sender set it */
	}
	/* rxe (and every provider whose CQEs the kernel writes) leaves the kernel's
	 * IB_WC_WITH_INVALIDATE, bit 2, as it is: libibverbs names that bit IBV_WC_IP_CSUM_OK,
	 * which no RC receive ever carries (checksums are raw packet and UD QPs'); measured over
	 * soft-RoCE, a SEND_WITH_INV's receive reports only it. */
	if (wc->wc_flags & (IBV_WC_WITH_INV | IBV_WC_IP_CSUM_OK)) {
		w->wc_flags |= QSM_WC_WITH_INV;
		w->invalidated_rkey = wc->invalidated_rkey;
	}
}

void qsm_rc_sges_to_ibv(struct ibv_sge *sge, const struct qsm_fabric_sge *sg, int n)
{
	for (int i = 0; i < n; i++)
		sge[i] = (struct ibv_sge){ .addr = sg[i].addr, .length = sg[i].length, .lkey = sg[i].lkey };
}
