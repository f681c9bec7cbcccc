/* rdma-qsm: the listener lifecycle, as a Ragel state chart.
 * A listener outlives its device: it waits in RELISTEN_WAIT and listens again when it can. */
#include "sm.h"

%%{
	machine listener;
	alphtype int;
	import "events.h";

	action spawn_passive     { QSM_SM_LISTENER_ACT(QSM_ACT_SPAWN_PASSIVE); }
	action release_listen_id { QSM_SM_LISTENER_ACT(QSM_ACT_RELEASE_LISTEN_ID); }
	action arm_relisten      { QSM_SM_LISTENER_ACT(QSM_ACT_ARM_RELISTEN); }
	action try_listen        { QSM_SM_LISTENER_ACT(QSM_ACT_TRY_LISTEN); }
	action release_listener  { QSM_SM_LISTENER_ACT(QSM_ACT_RELEASE_LISTENER); }

	action IDLE           { QSM_SM_TO(QSM_LISTENER_IDLE); }
	action LISTENING      { QSM_SM_TO(QSM_LISTENER_LISTENING); }
	action RELISTEN_WAIT  { QSM_SM_TO(QSM_LISTENER_RELISTEN_WAIT); }
	action CLOSED         { QSM_SM_TO(QSM_LISTENER_CLOSED); }

	gone = QSM_EV_DESTROY | QSM_EV_ABORT;

	main := (
	start:
	# LISTEN is posted once rdma_listen has succeeded.
	Idle: (
		QSM_EV_LISTEN                                                     -> Listening |
		gone                                @release_listener             -> Closed
	) >~IDLE,

	Listening: (
		QSM_EV_CONNECT_REQUEST              @spawn_passive                -> Listening |
		QSM_EV_ADDR_CHANGE                                                -> Listening |
		QSM_EV_DEVICE_REMOVAL               @release_listen_id @arm_relisten -> RelistenWait |
		gone                                @release_listener             -> Closed
	) >~LISTENING,

	# No listening id: a retry timer, or a device coming back, tries again.
	RelistenWait: (
		( QSM_EV_RETRY | QSM_EV_DEVICE_ADDED ) @try_listen                -> RelistenWait |
		QSM_EV_LISTEN                                                     -> Listening |
		gone                                @release_listener             -> Closed
	) >~RELISTEN_WAIT,

	Closed: ( zlen ) >~CLOSED
	);

	write data;
}%%

static int listener_exec(int *csp, int event, struct qsm_edge *edge)
{
	QSM_SM_EXEC_PROLOGUE;
	%% write exec;
	if (cs == listener_error)
		return -ENOMSG;
	*csp = cs;
	return 0;
}

static const char *const listener_state_names[] = {
	[QSM_LISTENER_IDLE] = "IDLE",
	[QSM_LISTENER_LISTENING] = "LISTENING",
	[QSM_LISTENER_RELISTEN_WAIT] = "RELISTEN_WAIT",
	[QSM_LISTENER_CLOSED] = "CLOSED",
};

/* Beside the states: none arms a step timeout or carries work requests of its own. */
static const struct qsm_state_facts listener_facts[QSM_LISTENER_STATE_COUNT] = { { 0 } };

const struct qsm_sm qsm_sm_listener = {
	.id = QSM_MACHINE_LISTENER,
	.name = "listener",
	.nstates = QSM_LISTENER_STATE_COUNT,
	.start_state = QSM_LISTENER_IDLE,
	.final_state = QSM_LISTENER_CLOSED,
	.state_names = listener_state_names,
	.facts = listener_facts,
	.start_cs = listener_start,
	.error_cs = listener_error,
	.exec = listener_exec,
};
