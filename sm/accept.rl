/* rdma-qsm: the passive queue lifecycle (an id a listener accepted), as a Ragel state chart.
 * A passive queue never reconnects: every loss ends in CLOSED, after the QP is drained. */
#include "sm.h"
#include "state_tables.h"

%%{
	machine accept;
	alphtype int;
	import "events.h";

	action create_qp      { QSM_SM_QUEUE_ACT(QSM_ACT_CREATE_QP); }
	action qp_ready       { QSM_SM_QUEUE_ACT(QSM_ACT_QP_READY); }
	action accept         { QSM_SM_QUEUE_ACT(QSM_ACT_ACCEPT); }
	action qp_to_rtr      { QSM_SM_QUEUE_ACT(QSM_ACT_QP_TO_RTR); }
	action qp_to_rts      { QSM_SM_QUEUE_ACT(QSM_ACT_QP_TO_RTS); }
	action reject         { QSM_SM_QUEUE_ACT(QSM_ACT_REJECT); }
	action disconnect     { QSM_SM_QUEUE_ACT(QSM_ACT_DISCONNECT); }
	action notify         { QSM_SM_QUEUE_ACT(QSM_ACT_NOTIFY); }
	action start_drain    { QSM_SM_QUEUE_ACT(QSM_ACT_START_DRAIN); }
	action release_device { QSM_SM_QUEUE_ACT(QSM_ACT_RELEASE_DEVICE); }
	action release_all    { QSM_SM_QUEUE_ACT(QSM_ACT_RELEASE_ALL); }
	action probe          { QSM_SM_QUEUE_ACT(QSM_ACT_PROBE); }

	# The states, named only here: first the start, last the final (doc/machines.md, "A state").
	# states qsm_accept_state QSM_ACCEPT_ "Passive queue, born from a listener's CONNECT_REQUEST"
	# state NEW           -                                  "id handed over by the listener, not yet told"
	# state REQUESTED     timeout=request_ms,teardown=reject "the request handler decides: accept or reject"
	# state ACCEPTING     timeout=connect_ms,after_cm        "QP created, rdma_accept sent"
	# state CONNECTED     timeout=handshake_ms               "ESTABLISHED; the ULP's handshake runs"
	# state LIVE          timeout=keepalive_ms               "the ULP said READY"
	# state DISCONNECTING timeout=disconnect_ms,after_cm     "the ULP asked to disconnect; DREQ sent"
	# state DRAINING      timeout=drain_ms,drains            "flushing the QP, then close"
	# state CLOSED        -                                  "final"
	include "state_actions.rl";

	gone    = QSM_EV_DESTROY | QSM_EV_ABORT;
	# The QP failed: a fatal async event, an error completion (not a flush), or -- on an SRQ --
	# LAST_WQE, which a QP reports only once it is in ERR.
	qp_error = QSM_EV_QP_FATAL | QSM_EV_WC_ERROR | QSM_EV_LAST_WQE;
	# Its port went down: close now, not after the RC retry limit.
	# The CM gave up on a connection it had established: the kernel keeps an established id in
	# RDMA_CM_CONNECT, so a late IB CM REQ/REP error still reaches it as UNREACHABLE (seen on
	# rxe, LIVE queues, after an IPv6 address came back through DAD; tests/vm/README.md).
	lost    = QSM_EV_DISCONNECTED | qp_error | QSM_EV_ADDR_CHANGE | QSM_EV_PORT_ERR |
	          QSM_EV_UNREACHABLE;
	benign  = QSM_EV_DISCONNECTED | QSM_EV_TIMEWAIT_EXIT | qp_error | QSM_EV_ADDR_CHANGE |
	          QSM_EV_PORT_ERR | QSM_EV_UNREACHABLE;
	# What the QP reports that changes nothing once the connection is established.
	qp_note = QSM_EV_COMM_EST | QSM_EV_SQ_DRAINED | QSM_EV_PATH_MIG | QSM_EV_PATH_MIG_ERR;

	main := (
	start:
	# REQUESTED.enter is the request handler: it accepts or rejects.
	New: (
		QSM_EV_CONNECT_REQUEST                                            -> Requested |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~NEW,

	# Undecided requests are rejected, never left to time out at the peer.
	Requested: (
		# rdma_accept moves the QP through RTR to RTS before it answers the peer.
		QSM_EV_ACCEPT                       @create_qp @qp_ready @accept @qp_to_rtr @qp_to_rts
		                                                                  -> Accepting |
		( QSM_EV_REJECT | QSM_EV_TIMEOUT | QSM_EV_DISCONNECT | gone )
		                                    @reject @release_all          -> Closed |
		# The peer gave up first (its REQ timed out, or it let go of its id): its REJ.
		( QSM_EV_REJECTED | QSM_EV_REJECTED_STALE )
		                                    @release_all                  -> Closed |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed
	) >~REQUESTED,

	# COMM_EST: the peer's first message came before its RTU (lost, or slow): the QP is
	# receiving already, so the CM is told to take it as the RTU (rdma_notify) and the
	# ESTABLISHED it then reports completes the accept, as the kernel's nvmet-rdma does.
	Accepting: (
		QSM_EV_ESTABLISHED                                                -> Connected |
		QSM_EV_COMM_EST                     @notify                       -> Accepting |
		( QSM_EV_SQ_DRAINED | QSM_EV_PATH_MIG | QSM_EV_PATH_MIG_ERR )     -> Accepting |
		( QSM_EV_CONNECT_ERROR | QSM_EV_UNREACHABLE | QSM_EV_REJECTED | QSM_EV_REJECTED_STALE |
		  QSM_EV_TIMEOUT )
		                                    @release_all                  -> Closed |
		( QSM_EV_DISCONNECTED | qp_error | QSM_EV_PORT_ERR )
		                                    @start_drain                  -> Draining |
		QSM_EV_DISCONNECT                   @disconnect                   -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~ACCEPTING,

	Connected: (
		QSM_EV_READY                                                      -> Live |
		( lost | QSM_EV_TIMEOUT )           @start_drain                  -> Draining |
		qp_note                                                           -> Connected |
		QSM_EV_DISCONNECT                   @disconnect                   -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~CONNECTED,

	# keepalive_ms (0: none): a probe the peer's QP answers; a peer that vanished without a
	# DREQ (its host died, the wire was cut) fails it after the RC retries: WC_ERROR, lost.
	Live: (
		lost                                @start_drain                  -> Draining |
		QSM_EV_TIMEOUT                      @probe                        -> Live |
		qp_note                                                           -> Live |
		QSM_EV_DISCONNECT                   @disconnect                   -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~LIVE,

	# Entered from ACCEPTING too: the accept may still fail underneath, or complete -- the peer's
	# RTU after the ULP's disconnect, which the CM could not send as a DREQ before ESTABLISHED
	# (it moved the QP to ERR only): sent now (tests/vm/scenarios/edges.sh found it).
	Disconnecting: (
		( QSM_EV_DISCONNECTED | qp_error | QSM_EV_PORT_ERR | QSM_EV_TIMEOUT )
		                                    @start_drain                  -> Draining |
		QSM_EV_ESTABLISHED                  @disconnect                   -> Disconnecting |
		QSM_EV_COMM_EST                     @notify                       -> Disconnecting |
		( QSM_EV_SQ_DRAINED | QSM_EV_PATH_MIG | QSM_EV_PATH_MIG_ERR )     -> Disconnecting |
		( QSM_EV_CONNECT_ERROR | QSM_EV_UNREACHABLE | QSM_EV_REJECTED |
		  QSM_EV_REJECTED_STALE )
		                                    @release_all                  -> Closed |
		QSM_EV_DISCONNECT                                                 -> Disconnecting |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~DISCONNECTING,

	Draining: (
		( QSM_EV_DRAINED | QSM_EV_TIMEOUT ) @release_all                  -> Closed |
		( benign | qp_note | QSM_EV_DISCONNECT )                          -> Draining |
		QSM_EV_DEVICE_REMOVAL               @release_device @release_all  -> Closed |
		gone                                @release_all                  -> Closed
	) >~DRAINING,

	Closed: ( zlen ) >~CLOSED
	);

	write data;
}%%

static int accept_exec(int *csp, int event, struct qsm_edge *edge)
{
	QSM_SM_EXEC_PROLOGUE;
	%% write exec;
	if (cs == accept_error)
		return -ENOMSG;
	*csp = cs;
	return 0;
}

const struct qsm_sm qsm_sm_accept = {
	.id = QSM_MACHINE_ACCEPT,
	.name = "accept",
	QSM_SM_ACCEPT_STATES,
	.start_cs = accept_start,
	.error_cs = accept_error,
	.exec = accept_exec,
};
