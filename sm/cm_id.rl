/* rdma-qsm: the active queue (client side) lifecycle, rdma_cm_id + QP, as a Ragel state chart.
 * One line per edge; the actions only record what the runtime must do (src/sm.h). */
#include "sm.h"
#include "state_tables.h"

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
	action arm_fast_retry { QSM_SM_QUEUE_ACT(QSM_ACT_ARM_FAST_RETRY); }
	action probe          { QSM_SM_QUEUE_ACT(QSM_ACT_PROBE); }
	action retry_now      { QSM_SM_QUEUE_ACT(QSM_ACT_RETRY_NOW); }
	action release_device { QSM_SM_QUEUE_ACT(QSM_ACT_RELEASE_DEVICE); }
	action release_all    { QSM_SM_QUEUE_ACT(QSM_ACT_RELEASE_ALL); }

	# The states, named only here: first the start, last the final (doc/machines.md, "A state").
	# states qsm_cm_state QSM_CM_ "Active queue"
	# state IDLE            -                       "created, never connected; no cm_id"
	# state ADDR_RESOLVING  timeout=resolve_ms      "cm_id created, rdma_resolve_addr in flight"
	# state ROUTE_RESOLVING timeout=resolve_ms      "rdma_resolve_route in flight"
	# state CONNECTING      timeout=connect_ms,after_cm "QP created, rdma_connect sent"
	# state CONNECTED       timeout=handshake_ms    "ESTABLISHED; the ULP's handshake runs"
	# state LIVE            timeout=keepalive_ms    "the ULP said READY: I/O flows"
	# state DISCONNECTING   timeout=disconnect_ms,after_cm "the ULP asked to disconnect; DREQ sent"
	# state DRAINING        timeout=drain_ms,drains "connection lost; flushing the QP, then reconnect"
	# state CLOSING         timeout=drain_ms,drains "flushing the QP, then close for good"
	# state RECONNECT_WAIT  -                       "the gap: no cm_id, no QP; retry timer armed"
	# state FAILED          -                       "reconnect policy exhausted; no cm_id"
	# state CLOSED          -                       "final: everything released"
	include "state_actions.rl";

	# Event classes that share an edge.
	gone    = QSM_EV_DESTROY | QSM_EV_ABORT;
	# The QP failed: a fatal async event, an error completion (not a flush), or -- on an SRQ --
	# LAST_WQE, which a QP reports only once it is in ERR.
	qp_error = QSM_EV_QP_FATAL | QSM_EV_WC_ERROR | QSM_EV_LAST_WQE;
	# Its port went down: fail over now, not after the RC retry limit.
	# The CM gave up on a connection it had established: the kernel keeps an established id in
	# RDMA_CM_CONNECT, so a late IB CM REQ/REP error still reaches it as UNREACHABLE (seen on
	# rxe, LIVE queues, after an IPv6 address came back through DAD; tests/vm/README.md).
	lost    = QSM_EV_DISCONNECTED | qp_error | QSM_EV_ADDR_CHANGE | QSM_EV_PORT_ERR |
	          QSM_EV_UNREACHABLE;
	benign  = QSM_EV_DISCONNECTED | QSM_EV_TIMEWAIT_EXIT | qp_error | QSM_EV_ADDR_CHANGE |
	          QSM_EV_PORT_ERR | QSM_EV_UNREACHABLE;
	# What the QP reports that changes nothing here: a message before the RTU (the active
	# side's CM has sent it already), its send queue drained, a path migration.
	qp_note = QSM_EV_COMM_EST | QSM_EV_SQ_DRAINED | QSM_EV_PATH_MIG | QSM_EV_PATH_MIG_ERR;
	# Someone waits for a device or a port: try now.
	came    = QSM_EV_DEVICE_ADDED | QSM_EV_PORT_ACTIVE;

	main := (
	start:
	Idle: (
		QSM_EV_CONNECT                      @resolve_addr                 -> AddrResolving |
		gone                                @release_all                  -> Closed
	) >~IDLE,

	# A device or port that came while the kernel resolves: its address resolution (ib_core's
	# addr.c) parks a request that found no usable source or neighbour until its timeout, and
	# an address leaving IPv6 DAD or a port coming up does not wake it: start over, now.
	AddrResolving: (
		QSM_EV_ADDR_RESOLVED                @resolve_route                -> RouteResolving |
		( QSM_EV_ADDR_ERROR | QSM_EV_ADDR_CHANGE | QSM_EV_TIMEOUT )
		                                    @release_id @arm_retry        -> ReconnectWait |
		came                                @release_id @retry_now        -> ReconnectWait |
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
		  QSM_EV_ADDR_CHANGE | QSM_EV_PORT_ERR | qp_error | QSM_EV_TIMEOUT )
		                                    @release_id @arm_retry        -> ReconnectWait |
		QSM_EV_REJECTED_STALE               @release_id @arm_fast_retry   -> ReconnectWait |
		qp_note                                                           -> Connecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		( QSM_EV_DISCONNECT | gone )        @release_all                  -> Closed
	) >~CONNECTING,

	Connected: (
		QSM_EV_READY                                                      -> Live |
		( lost | QSM_EV_TIMEOUT )           @mark_lost @start_drain       -> Draining |
		qp_note                                                           -> Connected |
		QSM_EV_DISCONNECT                   @disconnect                   -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		gone                                @release_all                  -> Closed
	) >~CONNECTED,

	# keepalive_ms (0: none): a probe the peer's QP answers; a peer that vanished without a
	# DREQ (its host died, the wire was cut) fails it after the RC retries: WC_ERROR, lost.
	Live: (
		lost                                @mark_lost @start_drain       -> Draining |
		QSM_EV_TIMEOUT                      @probe                        -> Live |
		qp_note                                                           -> Live |
		QSM_EV_DISCONNECT                   @disconnect                   -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		gone                                @release_all                  -> Closed
	) >~LIVE,

	Disconnecting: (
		( QSM_EV_DISCONNECTED | qp_error | QSM_EV_PORT_ERR | QSM_EV_UNREACHABLE | QSM_EV_TIMEOUT )
		                                    @start_drain                  -> Closing |
		( QSM_EV_DISCONNECT | qp_note )                                   -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~DISCONNECTING,

	Draining: (
		( QSM_EV_DRAINED | QSM_EV_TIMEOUT ) @release_id @arm_retry        -> ReconnectWait |
		( benign | qp_note )                                              -> Draining |
		QSM_EV_DISCONNECT                                                 -> Closing |
		QSM_EV_DEVICE_REMOVAL               @release_device @arm_retry    -> ReconnectWait |
		gone                                @release_all                  -> Closed
	) >~DRAINING,

	Closing: (
		( QSM_EV_DRAINED | QSM_EV_TIMEOUT ) @release_all                  -> Closed |
		( benign | qp_note | QSM_EV_DISCONNECT )                          -> Closing |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~CLOSING,

	# The gap: no cm_id and no QP.  The device registry's sentinel id still
	# delivers DEVICE_REMOVAL for the device this queue last used.
	ReconnectWait: (
		( QSM_EV_RETRY | QSM_EV_CONNECT )   @resolve_addr                 -> AddrResolving |
		QSM_EV_GIVE_UP                                                    -> Failed |
		QSM_EV_DEVICE_REMOVAL               @release_device               -> ReconnectWait |
		came                                @retry_now                    -> ReconnectWait |
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

const struct qsm_sm qsm_sm_cm_id = {
	.id = QSM_MACHINE_CM_ID,
	.name = "cm_id",
	QSM_SM_CM_ID_STATES,
	.start_cs = cm_id_start,
	.error_cs = cm_id_error,
	.exec = cm_id_exec,
};
