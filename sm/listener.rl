/* rdma-qsm: the listener lifecycle, as a Ragel state chart.
 * A listener outlives its device: it waits in RELISTEN_WAIT and listens again when it can. */
#include "sm.h"
#include "state_tables.h"

%%{
	machine listener;
	alphtype int;
	import "events.h";

	action spawn_passive     { QSM_SM_LISTENER_ACT(QSM_ACT_SPAWN_PASSIVE); }
	action release_listen_id { QSM_SM_LISTENER_ACT(QSM_ACT_RELEASE_LISTEN_ID); }
	action arm_relisten      { QSM_SM_LISTENER_ACT(QSM_ACT_ARM_RELISTEN); }
	action try_listen        { QSM_SM_LISTENER_ACT(QSM_ACT_TRY_LISTEN); }
	action release_listener  { QSM_SM_LISTENER_ACT(QSM_ACT_RELEASE_LISTENER); }

	# The states, named only here: first the start, last the final (doc/machines.md, "A state").
	# states qsm_listener_state QSM_LISTENER_ "Listener"
	# state IDLE          - "created, not listening"
	# state LISTENING     - "bound and listening"
	# state RELISTEN_WAIT - "its device went away; waiting to listen again"
	# state CLOSED        - "final"
	include "state_actions.rl";

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
		# Its address moved (a bond failed over): listen again, as the kernel's nvmet-rdma
		# does, under the relisten policy when it cannot at once.
		QSM_EV_ADDR_CHANGE                  @release_listen_id @try_listen -> RelistenWait |
		QSM_EV_DEVICE_REMOVAL               @release_listen_id @arm_relisten -> RelistenWait |
		gone                                @release_listener             -> Closed
	) >~LISTENING,

	# No listening id: a retry timer, or a device coming back, tries again.
	RelistenWait: (
		( QSM_EV_RETRY | QSM_EV_DEVICE_ADDED | QSM_EV_PORT_ACTIVE )
		                                    @try_listen                   -> RelistenWait |
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

const struct qsm_sm qsm_sm_listener = {
	.id = QSM_MACHINE_LISTENER,
	.name = "listener",
	QSM_SM_LISTENER_STATES,
	.start_cs = listener_start,
	.error_cs = listener_error,
	.exec = listener_exec,
};
