/* rdma-qsm: a device of the ctx's registry, as a Ragel state chart.  While any queue uses the
 * device, its sentinel id (bound, never connected) hears DEVICE_REMOVAL even in the gap. */
#include "sm.h"
#include "state_tables.h"

%%{
	machine device;
	alphtype int;
	import "events.h";

	# What an edge does (enum qsm_device_action; the registry carries it out).
	action release_sentinel { QSM_SM_DEVICE_ACT(QSM_ACT_RELEASE_SENTINEL); }
	action notify_queues    { QSM_SM_DEVICE_ACT(QSM_ACT_NOTIFY_QUEUES); }
	action release_registry { QSM_SM_DEVICE_ACT(QSM_ACT_RELEASE_REGISTRY); }
	action srq_low          { QSM_SM_DEVICE_ACT(QSM_ACT_SRQ_LOW); }

	# The states, named only here: first the start, last the final (doc/machines.md, "A state").
	# states qsm_device_state QSM_DEVICE_ "A device of the ctx's registry"
	# state IN_USE   -        "queues use it; its sentinel id hears DEVICE_REMOVAL"
	# state REMOVING retiring "removed: its queues take their DEVICE_REMOVAL edges"
	# state CLOSED   retiring "final: its last queue let go (or the ctx went)"
	include "state_actions.rl";

	# A port's events that move no queue: counted and traced here (the address a queue used
	# may have moved with GID_CHANGE; its connection then fails, and it resolves again).
	# ADDR_CHANGE: the sentinel is bound to the address that moved; the queues on the
	# device hear it on their own ids.
	port_note = QSM_EV_GID_CHANGE | QSM_EV_LID_CHANGE | QSM_EV_PKEY_CHANGE |
	            QSM_EV_CLIENT_REREGISTER | QSM_EV_ADDR_CHANGE;

	main := (
	start:
	# In the registry: at least one queue uses it; its sentinel is bound.
	# Its SRQs (one per class that asks) fire SRQ_LIMIT here: the class's srq_low posts more.
	InUse: (
		QSM_EV_DEVICE_REMOVAL  @release_sentinel @notify_queues   -> Removing |
		QSM_EV_SRQ_LIMIT       @srq_low                           -> InUse |
		port_note                                                 -> InUse |
		QSM_EV_DESTROY         @release_registry                  -> Closed
	) >~IN_USE,

	# Going away: every queue on it takes its DEVICE_REMOVAL edge; the device stays out of
	# the registry's reach (a new attach makes a new entry) until the last one has let go.
	Removing: (
		( QSM_EV_SRQ_LIMIT | port_note )                          -> Removing |
		QSM_EV_DESTROY         @release_registry                  -> Closed
	) >~REMOVING,

	Closed: ( zlen ) >~CLOSED
	);

	write data;
}%%

static int device_exec(int *csp, int event, struct qsm_edge *edge)
{
	QSM_SM_EXEC_PROLOGUE;
	%% write exec;
	if (cs == device_error)
		return -ENOMSG;
	*csp = cs;
	return 0;
}

const struct qsm_sm qsm_sm_device = {
	.id = QSM_MACHINE_DEVICE,
	.name = "device",
	QSM_SM_DEVICE_STATES,
	.start_cs = device_start,
	.error_cs = device_error,
	.exec = device_exec,
};
