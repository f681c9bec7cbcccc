/* rdma-qsm: the queue pair's state, tracked on every modify, async event and error
 * completion, so that qsm_qp_state() never needs ibv_query_qp.  States as the IB spec names them. */
#include "sm.h"
#include "state_tables.h"

%%{
	machine qp;
	alphtype int;
	import "events.h";

	# The states, named only here: first the start, last the final (doc/machines.md, "A state").
	# states qsm_qp_state QSM_QP_ "Queue pair, as the IB spec names its states"
	# state RESET     - "created, or modified back to reset"
	# state INIT      - "initialised: receives may be posted"
	# state RTR       - "ready to receive"
	# state RTS       - "ready to send"
	# state SQD       - "send queue drained"
	# state SQE       - "send queue error (unreliable transports)"
	# state ERR       - "error: work requests flush"
	# state DESTROYED - "final"
	include "state_actions.rl";

	# Any state may be modified to RESET or ERR (IB spec 10.3.1); a fatal
	# async event or a non-flush error completion puts the QP in ERR; LAST_WQE (a QP on an
	# SRQ) says it is there.
	to_reset = QSM_EV_QP_TO_RESET;
	broken   = QSM_EV_QP_TO_ERR | QSM_EV_QP_FATAL | QSM_EV_WC_ERROR | QSM_EV_LAST_WQE;
	gone     = QSM_EV_DESTROY | QSM_EV_DEVICE_REMOVAL;
	# automatic path migration: to the alternate path, or the alternate failed to load
	path_mig = QSM_EV_PATH_MIG | QSM_EV_PATH_MIG_ERR;

	main := (
	start:
	Reset: (
		QSM_EV_QP_TO_INIT                         -> Init |
		to_reset                                  -> Reset |
		QSM_EV_QP_TO_ERR                          -> Err |
		gone                                      -> Destroyed
	) >~RESET,

	Init: (
		QSM_EV_QP_TO_INIT                         -> Init |
		QSM_EV_QP_TO_RTR                          -> Rtr |
		to_reset                                  -> Reset |
		( QSM_EV_QP_TO_ERR | QSM_EV_QP_FATAL | QSM_EV_LAST_WQE ) -> Err |
		gone                                      -> Destroyed
	) >~INIT,

	Rtr: (
		QSM_EV_QP_TO_RTS                          -> Rts |
		QSM_EV_COMM_EST                           -> Rtr |
		to_reset                                  -> Reset |
		broken                                    -> Err |
		gone                                      -> Destroyed
	) >~RTR,

	Rts: (
		( QSM_EV_QP_TO_RTS | QSM_EV_COMM_EST | path_mig ) -> Rts |
		QSM_EV_QP_TO_SQD                          -> Sqd |
		QSM_EV_SQ_ERROR                           -> Sqe |
		to_reset                                  -> Reset |
		broken                                    -> Err |
		gone                                      -> Destroyed
	) >~RTS,

	Sqd: (
		( QSM_EV_QP_TO_SQD | QSM_EV_SQ_DRAINED | path_mig ) -> Sqd |
		QSM_EV_QP_TO_RTS                          -> Rts |
		to_reset                                  -> Reset |
		broken                                    -> Err |
		gone                                      -> Destroyed
	) >~SQD,

	# Send queue error: unreliable transports only; RC goes straight to ERR.
	Sqe: (
		QSM_EV_QP_TO_RTS                          -> Rts |
		to_reset                                  -> Reset |
		broken                                    -> Err |
		gone                                      -> Destroyed
	) >~SQE,

	# Flushed completions, the drain marker and LAST_WQE all arrive here.
	Err: (
		( broken | QSM_EV_DRAINED | QSM_EV_LAST_WQE ) -> Err |
		to_reset                                  -> Reset |
		gone                                      -> Destroyed
	) >~ERR,

	Destroyed: ( zlen ) >~DESTROYED
	);

	write data;
}%%

static int qp_exec(int *csp, int event, struct qsm_edge *edge)
{
	QSM_SM_EXEC_PROLOGUE;
	%% write exec;
	if (cs == qp_error)
		return -ENOMSG;
	*csp = cs;
	return 0;
}

const struct qsm_sm qsm_sm_qp = {
	.id = QSM_MACHINE_QP,
	.name = "qp",
	QSM_SM_QP_STATES,
	.start_cs = qp_start,
	.error_cs = qp_error,
	.exec = qp_exec,
};
