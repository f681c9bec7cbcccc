/* rdma-qsm: the active queue (client side) lifecycle, rdma_cm_id + QP, as a Ragel state chart.
 * One line per edge; the actions only record what the runtime must do (src/sm.h). */
#include "sm.h"

%%{
	machine cm_id;
	alphtype int;
	import "events.h";

	# What an edge does (enum qsm_queue_action; the queue runtime carries it out).
	action resolve_addr   { QSM_SM_QUEUE_ACT(QSM_ACT_RESOLVE_ADDR); }
	action resolve_route  { QSM_SM_QUEUE_ACT(QSM_ACT_RESOLVE_ROUTE); }
	action create_qp      { QSM_SM_QUEUE_ACT(QSM_ACT_CREATE_QP); }
	action qp_ready       { QSM_SM_QUEUE_ACT(QSM_ACT_QP_READY); }
	action connect        { QSM_SM_QUEUE_ACT(QSM_ACT_CONNECT); }
	action qp_to_rtr      { QSM_SM_QUEUE_ACT(QSM_ACT_QP_TO_RTR); }
	action qp_to_rts      { QSM_SM_QUEUE_ACT(QSM_ACT_QP_TO_RTS); }
	action reset_backoff  { QSM_SM_QUEUE_ACT(QSM_ACT_RESET_BACKOFF); }
	action disconnect     { QSM_SM_QUEUE_ACT(QSM_ACT_DISCONNECT); }
	action mark_lost      { QSM_SM_QUEUE_ACT(QSM_ACT_MARK_LOST); }
	action start_drain    { QSM_SM_QUEUE_ACT(QSM_ACT_START_DRAIN); }
	action release_id     { QSM_SM_QUEUE_ACT(QSM_ACT_RELEASE_ID); }
	action arm_retry      { QSM_SM_QUEUE_ACT(QSM_ACT_ARM_RETRY); }
	action retry_now      { QSM_SM_QUEUE_ACT(QSM_ACT_RETRY_NOW); }
	action release_device { QSM_SM_QUEUE_ACT(QSM_ACT_RELEASE_DEVICE); }
	action release_all    { QSM_SM_QUEUE_ACT(QSM_ACT_RELEASE_ALL); }

	# Where it goes: each state names itself on arrival, so names survive minimisation.
	action IDLE           { QSM_SM_TO(QSM_CM_IDLE); }
	action ADDR_RESOLVING { QSM_SM_TO(QSM_CM_ADDR_RESOLVING); }
	action ROUTE_RESOLVING { QSM_SM_TO(QSM_CM_ROUTE_RESOLVING); }
	action CONNECTING     { QSM_SM_TO(QSM_CM_CONNECTING); }
	action CONNECTED      { QSM_SM_TO(QSM_CM_CONNECTED); }
	action LIVE           { QSM_SM_TO(QSM_CM_LIVE); }
	action DISCONNECTING  { QSM_SM_TO(QSM_CM_DISCONNECTING); }
	action DRAINING       { QSM_SM_TO(QSM_CM_DRAINING); }
	action CLOSING        { QSM_SM_TO(QSM_CM_CLOSING); }
	action RECONNECT_WAIT { QSM_SM_TO(QSM_CM_RECONNECT_WAIT); }
	action FAILED         { QSM_SM_TO(QSM_CM_FAILED); }
	action CLOSED         { QSM_SM_TO(QSM_CM_CLOSED); }

	# Event classes that share an edge.
	gone    = QSM_EV_DESTROY | QSM_EV_ABORT;
	# The QP failed: a fatal async event, an error completion (not a flush), or -- on an SRQ --
	# LAST_WQE, which a QP reports only once it is in ERR.
	qp_error = QSM_EV_QP_FATAL | QSM_EV_WC_ERROR | QSM_EV_LAST_WQE;
	lost    = QSM_EV_DISCONNECTED | qp_error | QSM_EV_ADDR_CHANGE;
	benign  = QSM_EV_DISCONNECTED | QSM_EV_TIMEWAIT_EXIT | qp_error | QSM_EV_ADDR_CHANGE;

	main := (
	start:
	Idle: (
		QSM_EV_CONNECT                      @resolve_addr                 -> AddrResolving |
		gone                                @release_all                  -> Closed
	) >~IDLE,

	AddrResolving: (
		QSM_EV_ADDR_RESOLVED                @resolve_route                -> RouteResolving |
		( QSM_EV_ADDR_ERROR | QSM_EV_ADDR_CHANGE | QSM_EV_TIMEOUT )
		                                    @release_id @arm_retry        -> ReconnectWait |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		( QSM_EV_DISCONNECT | gone )        @release_all                  -> Closed
	) >~ADDR_RESOLVING,

	RouteResolving: (
		QSM_EV_ROUTE_RESOLVED               @create_qp @qp_ready @connect -> Connecting |
		( QSM_EV_ROUTE_ERROR | QSM_EV_ADDR_CHANGE | QSM_EV_TIMEOUT )
		                                    @release_id @arm_retry        -> ReconnectWait |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		( QSM_EV_DISCONNECT | gone )        @release_all                  -> Closed
	) >~ROUTE_RESOLVING,

	Connecting: (
		QSM_EV_ESTABLISHED                  @qp_to_rtr @qp_to_rts @reset_backoff
		                                                                  -> Connected |
		( QSM_EV_REJECTED | QSM_EV_UNREACHABLE | QSM_EV_CONNECT_ERROR |
		  QSM_EV_ADDR_CHANGE | qp_error | QSM_EV_TIMEOUT )
		                                    @release_id @arm_retry        -> ReconnectWait |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		( QSM_EV_DISCONNECT | gone )        @release_all                  -> Closed
	) >~CONNECTING,

	Connected: (
		QSM_EV_READY                                                      -> Live |
		( lost | QSM_EV_TIMEOUT )           @mark_lost @start_drain       -> Draining |
		QSM_EV_DISCONNECT                   @disconnect                   -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		gone                                @release_all                  -> Closed
	) >~CONNECTED,

	Live: (
		lost                                @mark_lost @start_drain       -> Draining |
		QSM_EV_DISCONNECT                   @disconnect                   -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		gone                                @release_all                  -> Closed
	) >~LIVE,

	Disconnecting: (
		( QSM_EV_DISCONNECTED | qp_error | QSM_EV_TIMEOUT )
		                                    @start_drain                  -> Closing |
		QSM_EV_DISCONNECT                                                 -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~DISCONNECTING,

	Draining: (
		( QSM_EV_DRAINED | QSM_EV_TIMEOUT ) @release_id @arm_retry        -> ReconnectWait |
		benign                                                            -> Draining |
		QSM_EV_DISCONNECT                                                 -> Closing |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		gone                                @release_all                  -> Closed
	) >~DRAINING,

	Closing: (
		( QSM_EV_DRAINED | QSM_EV_TIMEOUT ) @release_all                  -> Closed |
		( benign | QSM_EV_DISCONNECT )                                    -> Closing |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~CLOSING,

	# The gap: no cm_id and no QP.  The device registry's sentinel id still
	# delivers DEVICE_REMOVAL for the device this queue last used.
	ReconnectWait: (
		( QSM_EV_RETRY | QSM_EV_CONNECT )   @resolve_addr                 -> AddrResolving |
		QSM_EV_GIVE_UP                                                    -> Failed |
		QSM_EV_DEVICE_REMOVAL               @release_device               -> ReconnectWait |
		QSM_EV_DEVICE_ADDED                 @retry_now                    -> ReconnectWait |
		( QSM_EV_DISCONNECT | gone )        @release_all                  -> Closed
	) >~RECONNECT_WAIT,

	# The ULP starts over: a fresh reconnect policy.
	Failed: (
		QSM_EV_CONNECT                      @reset_backoff @resolve_addr  -> AddrResolving |
		QSM_EV_DEVICE_REMOVAL               @release_device               -> Failed |
		( QSM_EV_DISCONNECT | gone )        @release_all                  -> Closed
	) >~FAILED,

	Closed: ( zlen ) >~CLOSED
	);

	write data;
}%%

static int cm_id_exec(int *csp, int event, struct qsm_edge *edge)
{
	QSM_SM_EXEC_PROLOGUE;
	%% write exec;
	if (cs == cm_id_error)
		return -ENOMSG;
	*csp = cs;
	return 0;
}

static const char *const cm_id_state_names[] = {
	[QSM_CM_IDLE] = "IDLE",
	[QSM_CM_ADDR_RESOLVING] = "ADDR_RESOLVING",
	[QSM_CM_ROUTE_RESOLVING] = "ROUTE_RESOLVING",
	[QSM_CM_CONNECTING] = "CONNECTING",
	[QSM_CM_CONNECTED] = "CONNECTED",
	[QSM_CM_LIVE] = "LIVE",
	[QSM_CM_DISCONNECTING] = "DISCONNECTING",
	[QSM_CM_DRAINING] = "DRAINING",
	[QSM_CM_CLOSING] = "CLOSING",
	[QSM_CM_RECONNECT_WAIT] = "RECONNECT_WAIT",
	[QSM_CM_FAILED] = "FAILED",
	[QSM_CM_CLOSED] = "CLOSED",
};

/* Beside the states: what each does besides its edges (src/sm.h, qsm_machine_state_info(3)).
 * A step timeout is armed on arrival; its expiry is the TIMEOUT event of the edges above. */
static const struct qsm_state_facts cm_id_facts[QSM_CM_STATE_COUNT] = {
	[QSM_CM_ADDR_RESOLVING]  = { .timeout = QSM_STEP_RESOLVE },
	[QSM_CM_ROUTE_RESOLVING] = { .timeout = QSM_STEP_RESOLVE },
	[QSM_CM_CONNECTING]      = { .timeout = QSM_STEP_CONNECT },
	[QSM_CM_CONNECTED]       = { .timeout = QSM_STEP_HANDSHAKE },
	[QSM_CM_LIVE]            = { 0 },
	[QSM_CM_DISCONNECTING]   = { .timeout = QSM_STEP_DISCONNECT },
	[QSM_CM_DRAINING]        = { .timeout = QSM_STEP_DRAIN,      .drains = true },
	[QSM_CM_CLOSING]         = { .timeout = QSM_STEP_DRAIN,      .drains = true },
};

const struct qsm_sm qsm_sm_cm_id = {
	.id = QSM_MACHINE_CM_ID,
	.name = "cm_id",
	.nstates = QSM_CM_STATE_COUNT,
	.start_state = QSM_CM_IDLE,
	.final_state = QSM_CM_CLOSED,
	.state_names = cm_id_state_names,
	.facts = cm_id_facts,
	.start_cs = cm_id_start,
	.error_cs = cm_id_error,
	.exec = cm_id_exec,
};
