/* rdma-qsm: the one event alphabet shared by every state machine (the sm/ directory).
 * Numbers are explicit and stable: Ragel imports them, traces and tools print them. */
#ifndef QSM_EVENTS_H
#define QSM_EVENTS_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Ragel's `import` reads the "NAME = number" lines below, so keep exactly one
 * event per line in that form.  0 is never an event.
 */
enum qsm_event {
	/* rdma_cm events: RDMA_CM_EVENT_X is QSM_EV_X, mapped by name (the rdmacm fabric's
	 * switch), not by arithmetic: the numbers are ours.  CM_UNKNOWN is an rdma_cm event
	 * this build has no name for (a newer rdma-core's), status = its raw number; no machine
	 * has an edge for it, so it is always unexpected. */
	QSM_EV_ADDR_RESOLVED = 1,
	QSM_EV_ADDR_ERROR = 2,
	QSM_EV_ROUTE_RESOLVED = 3,
	QSM_EV_ROUTE_ERROR = 4,
	QSM_EV_CONNECT_REQUEST = 5,
	QSM_EV_CONNECT_RESPONSE = 6,
	QSM_EV_CONNECT_ERROR = 7,
	QSM_EV_UNREACHABLE = 8,
	QSM_EV_REJECTED = 9,
	QSM_EV_ESTABLISHED = 10,
	QSM_EV_DISCONNECTED = 11,
	QSM_EV_DEVICE_REMOVAL = 12,
	QSM_EV_MULTICAST_JOIN = 13,
	QSM_EV_MULTICAST_ERROR = 14,
	QSM_EV_ADDR_CHANGE = 15,
	QSM_EV_TIMEWAIT_EXIT = 16,
	/* REJECTED for a stale connection (the IB CM's reject reason 10): the peer's CM still
	 * holds an earlier connection of this QP number, in timewait; a new attempt soon clears */
	QSM_EV_REJECTED_STALE = 30,
	QSM_EV_CM_UNKNOWN = 31,

	/* downcalls: the ULP asked for something */
	QSM_EV_CONNECT = 32,
	QSM_EV_ACCEPT = 33,
	QSM_EV_REJECT = 34,
	QSM_EV_DISCONNECT = 35,
	QSM_EV_DESTROY = 36,
	QSM_EV_LISTEN = 37,
	QSM_EV_READY = 38,

	/* timers and the reconnect policy */
	QSM_EV_RETRY = 48,
	QSM_EV_TIMEOUT = 49,
	QSM_EV_GIVE_UP = 50,

	/* QP and CQ: async events, error completions, the drain marker, modifies */
	QSM_EV_QP_FATAL = 64,
	QSM_EV_DRAINED = 65,
	QSM_EV_WC_ERROR = 66,
	QSM_EV_SQ_ERROR = 67,
	QSM_EV_SQ_DRAINED = 68,
	QSM_EV_COMM_EST = 69,
	QSM_EV_LAST_WQE = 70,
	QSM_EV_SRQ_LIMIT = 71,
	QSM_EV_QP_TO_RESET = 72,
	QSM_EV_QP_TO_INIT = 73,
	QSM_EV_QP_TO_RTR = 74,
	QSM_EV_QP_TO_RTS = 75,
	QSM_EV_QP_TO_SQD = 76,
	QSM_EV_QP_TO_ERR = 77,
	/* automatic path migration (IBV_EVENT_PATH_MIG, _ERR): the QP moved to its alternate path,
	 * or the alternate could not be loaded; the connection stays */
	QSM_EV_PATH_MIG = 78,
	QSM_EV_PATH_MIG_ERR = 79,

	/* device monitor (DEVICE_REMOVAL above is also delivered in the gap).  DEVICE_ADDED goes
	 * only to active queues in RECONNECT_WAIT or ADDR_RESOLVING and listeners in
	 * RELISTEN_WAIT, any device. */
	QSM_EV_DEVICE_ADDED = 80,
	/* a port's async events (status: the port number).  PORT_ERR goes to every queue with a
	 * QP on that port: the port's queues fail over now rather than after the RC retry limit.
	 * PORT_ACTIVE goes, like DEVICE_ADDED, to whoever waits (RECONNECT_WAIT, ADDR_RESOLVING,
	 * RELISTEN_WAIT).
	 * The others go to the device's registry entry, which counts and traces them. */
	QSM_EV_PORT_ERR = 81,
	QSM_EV_PORT_ACTIVE = 82,
	QSM_EV_GID_CHANGE = 83,
	QSM_EV_LID_CHANGE = 84,
	QSM_EV_PKEY_CHANGE = 85,
	QSM_EV_CLIENT_REREGISTER = 86,

	/* handler outcome: a handler returned non-zero */
	QSM_EV_ABORT = 96,
};

/* One past the largest event number: arrays indexed by event use this. */
#define QSM_EV_LIMIT 97

/* Name of an event without the QSM_EV_ prefix ("DISCONNECTED"), or NULL. */
const char *qsm_event_name(int event);

/* Event number for a name as qsm_event_name() prints it, or -EINVAL. */
int qsm_event_from_name(const char *name);

#ifdef __cplusplus
}
#endif

#endif
