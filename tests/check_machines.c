/* rdma-qsm: the machines against their specification (doc/design.md, doc/machines.md).
 * The expected edges are written here by hand, never derived from the machine under test. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/machine.h>

#include "check_main.h"

#define A(x) QSM_ACT_##x

struct spec_edge {
	int state;
	int event;
	int target;
	int acts[QSM_EDGE_MAX_ACTIONS];
};

#define CM(s, e, t, ...) { QSM_CM_##s, QSM_EV_##e, QSM_CM_##t, { __VA_ARGS__ } }
#define PA(s, e, t, ...) { QSM_ACCEPT_##s, QSM_EV_##e, QSM_ACCEPT_##t, { __VA_ARGS__ } }
#define LI(s, e, t, ...) { QSM_LISTENER_##s, QSM_EV_##e, QSM_LISTENER_##t, { __VA_ARGS__ } }
#define QP(s, e, t) { QSM_QP_##s, QSM_EV_##e, QSM_QP_##t, { 0 } }

/* Active queue.  Everything not listed is unexpected. */
static const struct spec_edge cm_spec[] = {
	CM(IDLE, CONNECT, ADDR_RESOLVING, A(RESOLVE_ADDR)),
	CM(IDLE, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(IDLE, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(ADDR_RESOLVING, ADDR_RESOLVED, ROUTE_RESOLVING, A(RESOLVE_ROUTE)),
	CM(ADDR_RESOLVING, ADDR_ERROR, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(ADDR_RESOLVING, ADDR_CHANGE, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(ADDR_RESOLVING, TIMEOUT, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(ADDR_RESOLVING, DEVICE_ADDED, RECONNECT_WAIT, A(RELEASE_ID), A(RETRY_NOW)),
	CM(ADDR_RESOLVING, PORT_ACTIVE, RECONNECT_WAIT, A(RELEASE_ID), A(RETRY_NOW)),
	CM(ADDR_RESOLVING, DEVICE_REMOVAL, RECONNECT_WAIT, A(RELEASE_DEVICE), A(ARM_RETRY)),
	CM(ADDR_RESOLVING, DISCONNECT, CLOSED, A(RELEASE_ALL)),
	CM(ADDR_RESOLVING, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(ADDR_RESOLVING, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(ROUTE_RESOLVING, ROUTE_RESOLVED, CONNECTING, A(CREATE_QP), A(QP_READY), A(CONNECT)),
	CM(ROUTE_RESOLVING, ROUTE_ERROR, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(ROUTE_RESOLVING, ADDR_CHANGE, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(ROUTE_RESOLVING, TIMEOUT, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(ROUTE_RESOLVING, DEVICE_REMOVAL, RECONNECT_WAIT, A(RELEASE_DEVICE), A(ARM_RETRY)),
	CM(ROUTE_RESOLVING, DISCONNECT, CLOSED, A(RELEASE_ALL)),
	CM(ROUTE_RESOLVING, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(ROUTE_RESOLVING, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(CONNECTING, ESTABLISHED, CONNECTED, A(QP_TO_RTR), A(QP_TO_RTS), A(RESET_BACKOFF)),
	CM(CONNECTING, REJECTED, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, UNREACHABLE, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, CONNECT_ERROR, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, ADDR_CHANGE, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, PORT_ERR, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, REJECTED_STALE, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_FAST_RETRY)),
	CM(CONNECTING, COMM_EST, CONNECTING),
	CM(CONNECTING, SQ_DRAINED, CONNECTING),
	CM(CONNECTING, PATH_MIG, CONNECTING),
	CM(CONNECTING, PATH_MIG_ERR, CONNECTING),
	CM(CONNECTING, QP_FATAL, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, WC_ERROR, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, LAST_WQE, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, TIMEOUT, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(CONNECTING, DEVICE_REMOVAL, RECONNECT_WAIT, A(RELEASE_DEVICE), A(ARM_RETRY)),
	CM(CONNECTING, DISCONNECT, CLOSED, A(RELEASE_ALL)),
	CM(CONNECTING, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(CONNECTING, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(CONNECTED, READY, LIVE),
	CM(CONNECTED, DISCONNECTED, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(CONNECTED, QP_FATAL, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(CONNECTED, WC_ERROR, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(CONNECTED, LAST_WQE, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(CONNECTED, ADDR_CHANGE, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(CONNECTED, PORT_ERR, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(CONNECTED, UNREACHABLE, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(CONNECTED, COMM_EST, CONNECTED),
	CM(CONNECTED, SQ_DRAINED, CONNECTED),
	CM(CONNECTED, PATH_MIG, CONNECTED),
	CM(CONNECTED, PATH_MIG_ERR, CONNECTED),
	CM(CONNECTED, TIMEOUT, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(CONNECTED, DISCONNECT, DISCONNECTING, A(DISCONNECT)),
	CM(CONNECTED, DEVICE_REMOVAL, RECONNECT_WAIT, A(RELEASE_DEVICE), A(ARM_RETRY)),
	CM(CONNECTED, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(CONNECTED, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(LIVE, DISCONNECTED, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(LIVE, QP_FATAL, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(LIVE, WC_ERROR, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(LIVE, LAST_WQE, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(LIVE, ADDR_CHANGE, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(LIVE, PORT_ERR, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(LIVE, UNREACHABLE, DRAINING, A(MARK_LOST), A(START_DRAIN)),
	CM(LIVE, COMM_EST, LIVE),
	CM(LIVE, SQ_DRAINED, LIVE),
	CM(LIVE, PATH_MIG, LIVE),
	CM(LIVE, PATH_MIG_ERR, LIVE),
	CM(LIVE, TIMEOUT, LIVE, A(PROBE)),
	CM(LIVE, DISCONNECT, DISCONNECTING, A(DISCONNECT)),
	CM(LIVE, DEVICE_REMOVAL, RECONNECT_WAIT, A(RELEASE_DEVICE), A(ARM_RETRY)),
	CM(LIVE, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(LIVE, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(DISCONNECTING, DISCONNECTED, CLOSING, A(START_DRAIN)),
	CM(DISCONNECTING, QP_FATAL, CLOSING, A(START_DRAIN)),
	CM(DISCONNECTING, WC_ERROR, CLOSING, A(START_DRAIN)),
	CM(DISCONNECTING, LAST_WQE, CLOSING, A(START_DRAIN)),
	CM(DISCONNECTING, PORT_ERR, CLOSING, A(START_DRAIN)),
	CM(DISCONNECTING, UNREACHABLE, CLOSING, A(START_DRAIN)),
	CM(DISCONNECTING, COMM_EST, DISCONNECTING),
	CM(DISCONNECTING, SQ_DRAINED, DISCONNECTING),
	CM(DISCONNECTING, PATH_MIG, DISCONNECTING),
	CM(DISCONNECTING, PATH_MIG_ERR, DISCONNECTING),
	CM(DISCONNECTING, TIMEOUT, CLOSING, A(START_DRAIN)),
	CM(DISCONNECTING, DISCONNECT, DISCONNECTING),
	CM(DISCONNECTING, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	CM(DISCONNECTING, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(DISCONNECTING, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(DRAINING, DRAINED, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(DRAINING, TIMEOUT, RECONNECT_WAIT, A(RELEASE_ID), A(ARM_RETRY)),
	CM(DRAINING, DISCONNECTED, DRAINING),
	CM(DRAINING, TIMEWAIT_EXIT, DRAINING),
	CM(DRAINING, QP_FATAL, DRAINING),
	CM(DRAINING, WC_ERROR, DRAINING),
	CM(DRAINING, LAST_WQE, DRAINING),
	CM(DRAINING, ADDR_CHANGE, DRAINING),
	CM(DRAINING, PORT_ERR, DRAINING),
	CM(DRAINING, UNREACHABLE, DRAINING),
	CM(DRAINING, COMM_EST, DRAINING),
	CM(DRAINING, SQ_DRAINED, DRAINING),
	CM(DRAINING, PATH_MIG, DRAINING),
	CM(DRAINING, PATH_MIG_ERR, DRAINING),
	CM(DRAINING, DISCONNECT, CLOSING),
	CM(DRAINING, DEVICE_REMOVAL, RECONNECT_WAIT, A(RELEASE_DEVICE), A(ARM_RETRY)),
	CM(DRAINING, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(DRAINING, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(CLOSING, DRAINED, CLOSED, A(RELEASE_ALL)),
	CM(CLOSING, TIMEOUT, CLOSED, A(RELEASE_ALL)),
	CM(CLOSING, DISCONNECTED, CLOSING),
	CM(CLOSING, TIMEWAIT_EXIT, CLOSING),
	CM(CLOSING, QP_FATAL, CLOSING),
	CM(CLOSING, WC_ERROR, CLOSING),
	CM(CLOSING, LAST_WQE, CLOSING),
	CM(CLOSING, ADDR_CHANGE, CLOSING),
	CM(CLOSING, PORT_ERR, CLOSING),
	CM(CLOSING, UNREACHABLE, CLOSING),
	CM(CLOSING, COMM_EST, CLOSING),
	CM(CLOSING, SQ_DRAINED, CLOSING),
	CM(CLOSING, PATH_MIG, CLOSING),
	CM(CLOSING, PATH_MIG_ERR, CLOSING),
	CM(CLOSING, DISCONNECT, CLOSING),
	CM(CLOSING, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	CM(CLOSING, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(CLOSING, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(RECONNECT_WAIT, RETRY, ADDR_RESOLVING, A(RESOLVE_ADDR)),
	CM(RECONNECT_WAIT, CONNECT, ADDR_RESOLVING, A(RESOLVE_ADDR)),
	CM(RECONNECT_WAIT, GIVE_UP, FAILED),
	CM(RECONNECT_WAIT, DEVICE_REMOVAL, RECONNECT_WAIT, A(RELEASE_DEVICE)),
	CM(RECONNECT_WAIT, DEVICE_ADDED, RECONNECT_WAIT, A(RETRY_NOW)),
	CM(RECONNECT_WAIT, PORT_ACTIVE, RECONNECT_WAIT, A(RETRY_NOW)),
	CM(RECONNECT_WAIT, DISCONNECT, CLOSED, A(RELEASE_ALL)),
	CM(RECONNECT_WAIT, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(RECONNECT_WAIT, ABORT, CLOSED, A(RELEASE_ALL)),

	CM(FAILED, CONNECT, ADDR_RESOLVING, A(RESET_BACKOFF), A(RESOLVE_ADDR)),
	CM(FAILED, DEVICE_REMOVAL, FAILED, A(RELEASE_DEVICE)),
	CM(FAILED, DISCONNECT, CLOSED, A(RELEASE_ALL)),
	CM(FAILED, DESTROY, CLOSED, A(RELEASE_ALL)),
	CM(FAILED, ABORT, CLOSED, A(RELEASE_ALL)),
};

/* Passive queue. */
static const struct spec_edge accept_spec[] = {
	PA(NEW, CONNECT_REQUEST, REQUESTED),
	PA(NEW, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	PA(NEW, DESTROY, CLOSED, A(RELEASE_ALL)),
	PA(NEW, ABORT, CLOSED, A(RELEASE_ALL)),

	PA(REQUESTED, ACCEPT, ACCEPTING, A(CREATE_QP), A(QP_READY), A(ACCEPT), A(QP_TO_RTR),
	   A(QP_TO_RTS)),
	PA(REQUESTED, REJECT, CLOSED, A(REJECT), A(RELEASE_ALL)),
	PA(REQUESTED, TIMEOUT, CLOSED, A(REJECT), A(RELEASE_ALL)),
	PA(REQUESTED, DISCONNECT, CLOSED, A(REJECT), A(RELEASE_ALL)),
	PA(REQUESTED, DESTROY, CLOSED, A(REJECT), A(RELEASE_ALL)),
	PA(REQUESTED, ABORT, CLOSED, A(REJECT), A(RELEASE_ALL)),
	PA(REQUESTED, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	PA(REQUESTED, REJECTED, CLOSED, A(RELEASE_ALL)),
	PA(REQUESTED, REJECTED_STALE, CLOSED, A(RELEASE_ALL)),

	PA(ACCEPTING, ESTABLISHED, CONNECTED),
	PA(ACCEPTING, CONNECT_ERROR, CLOSED, A(RELEASE_ALL)),
	PA(ACCEPTING, UNREACHABLE, CLOSED, A(RELEASE_ALL)),
	PA(ACCEPTING, REJECTED, CLOSED, A(RELEASE_ALL)),
	PA(ACCEPTING, REJECTED_STALE, CLOSED, A(RELEASE_ALL)),
	PA(ACCEPTING, TIMEOUT, CLOSED, A(RELEASE_ALL)),
	PA(ACCEPTING, DISCONNECTED, DRAINING, A(START_DRAIN)),
	PA(ACCEPTING, QP_FATAL, DRAINING, A(START_DRAIN)),
	PA(ACCEPTING, WC_ERROR, DRAINING, A(START_DRAIN)),
	PA(ACCEPTING, LAST_WQE, DRAINING, A(START_DRAIN)),
	PA(ACCEPTING, PORT_ERR, DRAINING, A(START_DRAIN)),
	PA(ACCEPTING, COMM_EST, ACCEPTING, A(NOTIFY)),
	PA(ACCEPTING, SQ_DRAINED, ACCEPTING),
	PA(ACCEPTING, PATH_MIG, ACCEPTING),
	PA(ACCEPTING, PATH_MIG_ERR, ACCEPTING),
	PA(ACCEPTING, DISCONNECT, DISCONNECTING, A(DISCONNECT)),
	PA(ACCEPTING, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	PA(ACCEPTING, DESTROY, CLOSED, A(RELEASE_ALL)),
	PA(ACCEPTING, ABORT, CLOSED, A(RELEASE_ALL)),

	PA(CONNECTED, READY, LIVE),
	PA(CONNECTED, DISCONNECTED, DRAINING, A(START_DRAIN)),
	PA(CONNECTED, QP_FATAL, DRAINING, A(START_DRAIN)),
	PA(CONNECTED, WC_ERROR, DRAINING, A(START_DRAIN)),
	PA(CONNECTED, LAST_WQE, DRAINING, A(START_DRAIN)),
	PA(CONNECTED, ADDR_CHANGE, DRAINING, A(START_DRAIN)),
	PA(CONNECTED, PORT_ERR, DRAINING, A(START_DRAIN)),
	PA(CONNECTED, UNREACHABLE, DRAINING, A(START_DRAIN)),
	PA(CONNECTED, COMM_EST, CONNECTED),
	PA(CONNECTED, SQ_DRAINED, CONNECTED),
	PA(CONNECTED, PATH_MIG, CONNECTED),
	PA(CONNECTED, PATH_MIG_ERR, CONNECTED),
	PA(CONNECTED, TIMEOUT, DRAINING, A(START_DRAIN)),
	PA(CONNECTED, DISCONNECT, DISCONNECTING, A(DISCONNECT)),
	PA(CONNECTED, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	PA(CONNECTED, DESTROY, CLOSED, A(RELEASE_ALL)),
	PA(CONNECTED, ABORT, CLOSED, A(RELEASE_ALL)),

	PA(LIVE, DISCONNECTED, DRAINING, A(START_DRAIN)),
	PA(LIVE, QP_FATAL, DRAINING, A(START_DRAIN)),
	PA(LIVE, WC_ERROR, DRAINING, A(START_DRAIN)),
	PA(LIVE, LAST_WQE, DRAINING, A(START_DRAIN)),
	PA(LIVE, ADDR_CHANGE, DRAINING, A(START_DRAIN)),
	PA(LIVE, PORT_ERR, DRAINING, A(START_DRAIN)),
	PA(LIVE, UNREACHABLE, DRAINING, A(START_DRAIN)),
	PA(LIVE, COMM_EST, LIVE),
	PA(LIVE, SQ_DRAINED, LIVE),
	PA(LIVE, PATH_MIG, LIVE),
	PA(LIVE, PATH_MIG_ERR, LIVE),
	PA(LIVE, TIMEOUT, LIVE, A(PROBE)),
	PA(LIVE, DISCONNECT, DISCONNECTING, A(DISCONNECT)),
	PA(LIVE, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	PA(LIVE, DESTROY, CLOSED, A(RELEASE_ALL)),
	PA(LIVE, ABORT, CLOSED, A(RELEASE_ALL)),

	PA(DISCONNECTING, ESTABLISHED, DISCONNECTING, A(DISCONNECT)),
	PA(DISCONNECTING, DISCONNECTED, DRAINING, A(START_DRAIN)),
	PA(DISCONNECTING, QP_FATAL, DRAINING, A(START_DRAIN)),
	PA(DISCONNECTING, WC_ERROR, DRAINING, A(START_DRAIN)),
	PA(DISCONNECTING, LAST_WQE, DRAINING, A(START_DRAIN)),
	PA(DISCONNECTING, PORT_ERR, DRAINING, A(START_DRAIN)),
	PA(DISCONNECTING, COMM_EST, DISCONNECTING, A(NOTIFY)),
	PA(DISCONNECTING, SQ_DRAINED, DISCONNECTING),
	PA(DISCONNECTING, PATH_MIG, DISCONNECTING),
	PA(DISCONNECTING, PATH_MIG_ERR, DISCONNECTING),
	PA(DISCONNECTING, TIMEOUT, DRAINING, A(START_DRAIN)),
	PA(DISCONNECTING, CONNECT_ERROR, CLOSED, A(RELEASE_ALL)),
	PA(DISCONNECTING, UNREACHABLE, CLOSED, A(RELEASE_ALL)),
	PA(DISCONNECTING, REJECTED, CLOSED, A(RELEASE_ALL)),
	PA(DISCONNECTING, REJECTED_STALE, CLOSED, A(RELEASE_ALL)),
	PA(DISCONNECTING, DISCONNECT, DISCONNECTING),
	PA(DISCONNECTING, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	PA(DISCONNECTING, DESTROY, CLOSED, A(RELEASE_ALL)),
	PA(DISCONNECTING, ABORT, CLOSED, A(RELEASE_ALL)),

	PA(DRAINING, DRAINED, CLOSED, A(RELEASE_ALL)),
	PA(DRAINING, TIMEOUT, CLOSED, A(RELEASE_ALL)),
	PA(DRAINING, DISCONNECTED, DRAINING),
	PA(DRAINING, TIMEWAIT_EXIT, DRAINING),
	PA(DRAINING, QP_FATAL, DRAINING),
	PA(DRAINING, WC_ERROR, DRAINING),
	PA(DRAINING, LAST_WQE, DRAINING),
	PA(DRAINING, ADDR_CHANGE, DRAINING),
	PA(DRAINING, PORT_ERR, DRAINING),
	PA(DRAINING, UNREACHABLE, DRAINING),
	PA(DRAINING, COMM_EST, DRAINING),
	PA(DRAINING, SQ_DRAINED, DRAINING),
	PA(DRAINING, PATH_MIG, DRAINING),
	PA(DRAINING, PATH_MIG_ERR, DRAINING),
	PA(DRAINING, DISCONNECT, DRAINING),
	PA(DRAINING, DEVICE_REMOVAL, CLOSED, A(RELEASE_DEVICE), A(RELEASE_ALL)),
	PA(DRAINING, DESTROY, CLOSED, A(RELEASE_ALL)),
	PA(DRAINING, ABORT, CLOSED, A(RELEASE_ALL)),
};

/* Listener. */
static const struct spec_edge listener_spec[] = {
	LI(IDLE, LISTEN, LISTENING),
	LI(IDLE, DESTROY, CLOSED, A(RELEASE_LISTENER)),
	LI(IDLE, ABORT, CLOSED, A(RELEASE_LISTENER)),

	LI(LISTENING, CONNECT_REQUEST, LISTENING, A(SPAWN_PASSIVE)),
	LI(LISTENING, ADDR_CHANGE, RELISTEN_WAIT, A(RELEASE_LISTEN_ID), A(TRY_LISTEN)),
	LI(LISTENING, DEVICE_REMOVAL, RELISTEN_WAIT, A(RELEASE_LISTEN_ID), A(ARM_RELISTEN)),
	LI(LISTENING, DESTROY, CLOSED, A(RELEASE_LISTENER)),
	LI(LISTENING, ABORT, CLOSED, A(RELEASE_LISTENER)),

	LI(RELISTEN_WAIT, RETRY, RELISTEN_WAIT, A(TRY_LISTEN)),
	LI(RELISTEN_WAIT, DEVICE_ADDED, RELISTEN_WAIT, A(TRY_LISTEN)),
	LI(RELISTEN_WAIT, PORT_ACTIVE, RELISTEN_WAIT, A(TRY_LISTEN)),
	LI(RELISTEN_WAIT, LISTEN, LISTENING),
	LI(RELISTEN_WAIT, DESTROY, CLOSED, A(RELEASE_LISTENER)),
	LI(RELISTEN_WAIT, ABORT, CLOSED, A(RELEASE_LISTENER)),
};

/* Queue pair: IB spec transitions, plus what async events and completions do. */
static const struct spec_edge qp_spec[] = {
	QP(RESET, QP_TO_INIT, INIT), QP(RESET, QP_TO_RESET, RESET), QP(RESET, QP_TO_ERR, ERR),
	QP(RESET, DESTROY, DESTROYED), QP(RESET, DEVICE_REMOVAL, DESTROYED),

	QP(INIT, QP_TO_INIT, INIT), QP(INIT, QP_TO_RTR, RTR), QP(INIT, QP_TO_RESET, RESET),
	QP(INIT, QP_TO_ERR, ERR), QP(INIT, QP_FATAL, ERR), QP(INIT, LAST_WQE, ERR),
	QP(INIT, DESTROY, DESTROYED), QP(INIT, DEVICE_REMOVAL, DESTROYED),

	QP(RTR, QP_TO_RTS, RTS), QP(RTR, COMM_EST, RTR), QP(RTR, QP_TO_RESET, RESET),
	QP(RTR, QP_TO_ERR, ERR), QP(RTR, QP_FATAL, ERR), QP(RTR, WC_ERROR, ERR), QP(RTR, LAST_WQE, ERR),
	QP(RTR, DESTROY, DESTROYED), QP(RTR, DEVICE_REMOVAL, DESTROYED),

	QP(RTS, QP_TO_RTS, RTS), QP(RTS, COMM_EST, RTS), QP(RTS, QP_TO_SQD, SQD),
	QP(RTS, SQ_ERROR, SQE), QP(RTS, QP_TO_RESET, RESET),
	QP(RTS, QP_TO_ERR, ERR), QP(RTS, QP_FATAL, ERR), QP(RTS, WC_ERROR, ERR), QP(RTS, LAST_WQE, ERR),
	QP(RTS, DESTROY, DESTROYED), QP(RTS, DEVICE_REMOVAL, DESTROYED),
	QP(RTS, PATH_MIG, RTS), QP(RTS, PATH_MIG_ERR, RTS),

	QP(SQD, QP_TO_SQD, SQD), QP(SQD, SQ_DRAINED, SQD), QP(SQD, QP_TO_RTS, RTS),
	QP(SQD, QP_TO_RESET, RESET),
	QP(SQD, QP_TO_ERR, ERR), QP(SQD, QP_FATAL, ERR), QP(SQD, WC_ERROR, ERR), QP(SQD, LAST_WQE, ERR),
	QP(SQD, DESTROY, DESTROYED), QP(SQD, DEVICE_REMOVAL, DESTROYED),
	QP(SQD, PATH_MIG, SQD), QP(SQD, PATH_MIG_ERR, SQD),

	QP(SQE, QP_TO_RTS, RTS), QP(SQE, QP_TO_RESET, RESET),
	QP(SQE, QP_TO_ERR, ERR), QP(SQE, QP_FATAL, ERR), QP(SQE, WC_ERROR, ERR), QP(SQE, LAST_WQE, ERR),
	QP(SQE, DESTROY, DESTROYED), QP(SQE, DEVICE_REMOVAL, DESTROYED),

	QP(ERR, QP_TO_ERR, ERR), QP(ERR, QP_FATAL, ERR), QP(ERR, WC_ERROR, ERR),
	QP(ERR, DRAINED, ERR), QP(ERR, LAST_WQE, ERR), QP(ERR, QP_TO_RESET, RESET),
	QP(ERR, DESTROY, DESTROYED), QP(ERR, DEVICE_REMOVAL, DESTROYED),
};

/* A device of the registry: removed once, closed when its last queue lets go. */
#define DV(s, e, t, ...) { QSM_DEVICE_##s, QSM_EV_##e, QSM_DEVICE_##t, { __VA_ARGS__ } }
static const struct spec_edge device_spec[] = {
	DV(IN_USE, DEVICE_REMOVAL, REMOVING, A(RELEASE_SENTINEL), A(NOTIFY_QUEUES)),
	DV(IN_USE, SRQ_LIMIT, IN_USE, A(SRQ_LOW)),
	DV(REMOVING, SRQ_LIMIT, REMOVING),
	DV(IN_USE, GID_CHANGE, IN_USE),
	DV(REMOVING, GID_CHANGE, REMOVING),
	DV(IN_USE, LID_CHANGE, IN_USE),
	DV(REMOVING, LID_CHANGE, REMOVING),
	DV(IN_USE, PKEY_CHANGE, IN_USE),
	DV(REMOVING, PKEY_CHANGE, REMOVING),
	DV(IN_USE, CLIENT_REREGISTER, IN_USE),
	DV(REMOVING, CLIENT_REREGISTER, REMOVING),
	DV(IN_USE, ADDR_CHANGE, IN_USE),
	DV(REMOVING, ADDR_CHANGE, REMOVING),
	DV(IN_USE, DESTROY, CLOSED, A(RELEASE_REGISTRY)),
	DV(REMOVING, DESTROY, CLOSED, A(RELEASE_REGISTRY)),
};

struct spec {
	enum qsm_machine m;
	const struct spec_edge *edges;
	size_t n;
};

#define SPEC(m, t) { m, t, sizeof(t) / sizeof((t)[0]) }
static const struct spec specs[QSM_MACHINE_COUNT] = {
	SPEC(QSM_MACHINE_CM_ID, cm_spec),
	SPEC(QSM_MACHINE_ACCEPT, accept_spec),
	SPEC(QSM_MACHINE_LISTENER, listener_spec),
	SPEC(QSM_MACHINE_QP, qp_spec),
	SPEC(QSM_MACHINE_DEVICE, device_spec),
};

static const struct spec_edge *spec_find(const struct spec *sp, int state, int event)
{
	for (size_t i = 0; i < sp->n; i++)
		if (sp->edges[i].state == state && sp->edges[i].event == event)
			return &sp->edges[i];
	return NULL;
}

static unsigned int nacts(const struct spec_edge *e)
{
	unsigned int n = 0;

	while (n < QSM_EDGE_MAX_ACTIONS && e->acts[n])
		n++;
	return n;
}

/* Every machine x state x event: the edge the spec names, or unexpected. */
START_TEST(test_every_state_event_pair_matches_spec)
{
	const struct spec *sp = &specs[_i];
	int nstates = qsm_machine_state_count(sp->m);
	unsigned long pairs = 0, edges = 0;

	ck_assert_int_gt(nstates, 0);
	for (int s = 0; s < nstates; s++) {
		for (int ev = 1; ev < QSM_EV_LIMIT; ev++) {
			const struct spec_edge *want;
			struct qsm_edge got;
			int r;

			if (!qsm_event_name(ev))
				continue;
			pairs++;
			want = spec_find(sp, s, ev);
			r = qsm_machine_next(sp->m, s, ev, &got);
			if (!want) {
				ck_assert_msg(r == -ENOMSG, "%s: %s --%s--> %s, spec says unexpected",
					      qsm_machine_name(sp->m), qsm_state_name(sp->m, s),
					      qsm_event_name(ev), r >= 0 ? qsm_state_name(sp->m, r) : "error");
				continue;
			}
			edges++;
			ck_assert_msg(r == want->target, "%s: %s --%s--> %s, spec says %s",
				      qsm_machine_name(sp->m), qsm_state_name(sp->m, s),
				      qsm_event_name(ev), r >= 0 ? qsm_state_name(sp->m, r) : "unexpected",
				      qsm_state_name(sp->m, want->target));
			ck_assert_uint_eq(got.nactions, nacts(want));
			for (unsigned int a = 0; a < got.nactions; a++)
				ck_assert_msg(got.actions[a] == want->acts[a], "%s: %s --%s--> action %u is %s, spec says %s",
					      qsm_machine_name(sp->m), qsm_state_name(sp->m, s),
					      qsm_event_name(ev), a, qsm_action_name(got.actions[a]),
					      qsm_action_name(want->acts[a]));
		}
	}
	ck_assert_uint_eq(edges, sp->n);
	printf("machine %-8s: %d states x %lu events = %lu pairs checked, %lu edges\n",
	       qsm_machine_name(sp->m), nstates, pairs / (unsigned long)nstates, pairs, edges);
}
END_TEST

/* The spec itself: no duplicate pairs, every non-final state reachable and leavable. */
START_TEST(test_spec_is_well_formed)
{
	const struct spec *sp = &specs[_i];
	int nstates = qsm_machine_state_count(sp->m);
	int start = qsm_machine_start_state(sp->m);

	for (size_t i = 0; i < sp->n; i++)
		for (size_t j = i + 1; j < sp->n; j++)
			ck_assert(!(sp->edges[i].state == sp->edges[j].state &&
				    sp->edges[i].event == sp->edges[j].event));
	for (int s = 0; s < nstates; s++) {
		int out = 0, in = (s == start);

		for (size_t i = 0; i < sp->n; i++) {
			out += sp->edges[i].state == s;
			in += sp->edges[i].target == s && sp->edges[i].state != s;
		}
		ck_assert_msg(in > 0, "%s unreachable", qsm_state_name(sp->m, s));
		ck_assert_int_eq(out == 0, qsm_machine_is_final(sp->m, s));
	}
}
END_TEST

/* What each state does besides its edges, written here by hand (doc/machines.md's per-state
 * facts, qsm_conn_new(3)'s timeouts), never derived from the machine: which step timeout,
 * drains, rejects, retiring, after the CM's end. */
struct spec_facts {
	enum qsm_machine m;
	int state;
	const char *timeout;
	int drains, rejects, retiring, after_cm;
};

static const struct spec_facts facts_spec[] = {
	{ QSM_MACHINE_CM_ID, QSM_CM_ADDR_RESOLVING, "resolve_ms", 0, 0, 0, 0 },
	{ QSM_MACHINE_CM_ID, QSM_CM_ROUTE_RESOLVING, "resolve_ms", 0, 0, 0, 0 },
	{ QSM_MACHINE_CM_ID, QSM_CM_CONNECTING, "connect_ms", 0, 0, 0, 1 },
	{ QSM_MACHINE_CM_ID, QSM_CM_CONNECTED, "handshake_ms", 0, 0, 0, 0 },
	{ QSM_MACHINE_CM_ID, QSM_CM_LIVE, "keepalive_ms", 0, 0, 0, 0 },
	{ QSM_MACHINE_CM_ID, QSM_CM_DISCONNECTING, "disconnect_ms", 0, 0, 0, 1 },
	{ QSM_MACHINE_CM_ID, QSM_CM_DRAINING, "drain_ms", 1, 0, 0, 0 },
	{ QSM_MACHINE_CM_ID, QSM_CM_CLOSING, "drain_ms", 1, 0, 0, 0 },
	{ QSM_MACHINE_ACCEPT, QSM_ACCEPT_REQUESTED, "request_ms", 0, 1, 0, 0 },
	{ QSM_MACHINE_ACCEPT, QSM_ACCEPT_ACCEPTING, "connect_ms", 0, 0, 0, 1 },
	{ QSM_MACHINE_ACCEPT, QSM_ACCEPT_CONNECTED, "handshake_ms", 0, 0, 0, 0 },
	{ QSM_MACHINE_ACCEPT, QSM_ACCEPT_LIVE, "keepalive_ms", 0, 0, 0, 0 },
	{ QSM_MACHINE_ACCEPT, QSM_ACCEPT_DISCONNECTING, "disconnect_ms", 0, 0, 0, 1 },
	{ QSM_MACHINE_ACCEPT, QSM_ACCEPT_DRAINING, "drain_ms", 1, 0, 0, 0 },
	{ QSM_MACHINE_DEVICE, QSM_DEVICE_REMOVING, NULL, 0, 0, 1, 0 },
	{ QSM_MACHINE_DEVICE, QSM_DEVICE_CLOSED, NULL, 0, 0, 1, 0 },
	/* every other state of every machine: no timer, no drain, nothing on teardown */
};

START_TEST(test_state_facts_match_spec)
{
	for (int m = 0; m < QSM_MACHINE_COUNT; m++) {
		for (int st = 0; st < qsm_machine_state_count(m); st++) {
			struct spec_facts want = { m, st, NULL, 0, 0, 0, 0 };
			struct qsm_state_info got;

			for (size_t i = 0; i < sizeof(facts_spec) / sizeof(facts_spec[0]); i++)
				if (facts_spec[i].m == (enum qsm_machine)m && facts_spec[i].state == st)
					want = facts_spec[i];
			ck_assert_int_eq(qsm_machine_state_info(m, st, &got), 0);
			ck_assert_msg(want.timeout ? got.timeout && !strcmp(got.timeout, want.timeout) : !got.timeout,
				      "%s %s: timer %s, spec %s", qsm_machine_name(m), qsm_state_name(m, st),
				      got.timeout ? got.timeout : "none", want.timeout ? want.timeout : "none");
			ck_assert_int_eq(got.drains, want.drains);
			ck_assert_int_eq(got.rejects_on_teardown, want.rejects);
			ck_assert_int_eq(got.retiring, want.retiring);
			ck_assert_int_eq(got.after_cm, want.after_cm);
		}
	}
	ck_assert_int_eq(qsm_machine_state_info(QSM_MACHINE_COUNT, 0, &(struct qsm_state_info){ 0 }), -EINVAL);
	ck_assert_int_eq(qsm_machine_state_info(QSM_MACHINE_CM_ID, QSM_CM_STATE_COUNT, &(struct qsm_state_info){ 0 }), -EINVAL);
	ck_assert_int_eq(qsm_machine_state_info(QSM_MACHINE_CM_ID, 0, NULL), -EINVAL);
}
END_TEST

/* Every state that a queue can be in while it holds something takes DESTROY. */
START_TEST(test_destroy_and_device_removal_have_edges_wherever_they_can_occur)
{
	const struct spec *sp = &specs[_i];
	int nstates = qsm_machine_state_count(sp->m);

	for (int s = 0; s < nstates; s++) {
		if (qsm_machine_is_final(sp->m, s))
			continue;
		ck_assert_int_ge(qsm_machine_next(sp->m, s, QSM_EV_DESTROY, NULL), 0);
		/* DEVICE_REMOVAL needs a device: not before the first resolve, not in a listener's
		 * wait, not to a removed device (its sentinel, the only id it has, is gone). */
		if ((sp->m == QSM_MACHINE_CM_ID && s == QSM_CM_IDLE) ||
		    (sp->m == QSM_MACHINE_LISTENER && s != QSM_LISTENER_LISTENING) ||
		    (sp->m == QSM_MACHINE_DEVICE && s == QSM_DEVICE_REMOVING))
			continue;
		ck_assert_msg(qsm_machine_next(sp->m, s, QSM_EV_DEVICE_REMOVAL, NULL) >= 0,
			      "%s: no DEVICE_REMOVAL edge from %s", qsm_machine_name(sp->m),
			      qsm_state_name(sp->m, s));
	}
}
END_TEST

START_TEST(test_bad_arguments_are_rejected_with_einval)
{
	struct qsm_edge e;

	ck_assert_int_eq(qsm_machine_next(QSM_MACHINE_COUNT, 0, QSM_EV_CONNECT, &e), -EINVAL);
	ck_assert_int_eq(qsm_machine_next((enum qsm_machine)-1, 0, QSM_EV_CONNECT, &e), -EINVAL);
	ck_assert_int_eq(qsm_machine_next(QSM_MACHINE_CM_ID, -1, QSM_EV_CONNECT, &e), -EINVAL);
	ck_assert_int_eq(qsm_machine_next(QSM_MACHINE_CM_ID, QSM_CM_STATE_COUNT, QSM_EV_CONNECT, &e), -EINVAL);
	ck_assert_int_eq(qsm_machine_next(QSM_MACHINE_CM_ID, 0, 0, &e), -EINVAL);
	ck_assert_int_eq(qsm_machine_next(QSM_MACHINE_CM_ID, 0, 17, &e), -EINVAL);
	ck_assert_int_eq(qsm_machine_next(QSM_MACHINE_CM_ID, 0, QSM_EV_LIMIT, &e), -EINVAL);
	ck_assert_int_eq(qsm_machine_next(QSM_MACHINE_CM_ID, 0, -5, &e), -EINVAL);
	ck_assert_ptr_null(qsm_state_name(QSM_MACHINE_QP, QSM_QP_STATE_COUNT));
	ck_assert_ptr_null(qsm_machine_name(QSM_MACHINE_COUNT));
	ck_assert_int_eq(qsm_machine_state_count(QSM_MACHINE_COUNT), -EINVAL);
	ck_assert_int_eq(qsm_machine_is_final(QSM_MACHINE_QP, 99), -EINVAL);
	ck_assert_ptr_null(qsm_event_name(0));
	ck_assert_ptr_null(qsm_action_name(0));
	ck_assert_int_eq(qsm_event_from_name("NOPE"), -EINVAL);
	ck_assert_int_eq(qsm_event_from_name(NULL), -EINVAL);
}
END_TEST

START_TEST(test_names_round_trip_and_are_unique)
{
	for (int ev = 1; ev < QSM_EV_LIMIT; ev++) {
		const char *n = qsm_event_name(ev);

		if (n)
			ck_assert_int_eq(qsm_event_from_name(n), ev);
	}
	ck_assert_int_eq(qsm_event_from_name("DEVICE_REMOVAL"), QSM_EV_DEVICE_REMOVAL);
	for (int m = 0; m < QSM_MACHINE_COUNT; m++) {
		int n = qsm_machine_state_count(m);

		for (int a = 0; a < n; a++) {
			ck_assert_ptr_nonnull(qsm_state_name(m, a));
			for (int b = a + 1; b < n; b++)
				ck_assert_str_ne(qsm_state_name(m, a), qsm_state_name(m, b));
		}
	}
	for (int a = 1; a < QSM_ACT_LIMIT; a++)
		ck_assert_ptr_nonnull(qsm_action_name(a));
}
END_TEST

/* ---- sequence tests: replay event paths from the start state ---- */

struct run {
	enum qsm_machine m;
	int state;
	unsigned int unexpected;
	unsigned int transitions;
};

static void feed(struct run *r, int event)
{
	int t = qsm_machine_next(r->m, r->state, event, NULL);

	ck_assert_int_ne(t, -EINVAL);
	if (t == -ENOMSG) {
		r->unexpected++;
		return;
	}
	r->transitions++;
	r->state = t;
}

static struct run replay(enum qsm_machine m, const int *events)
{
	struct run r = { .m = m, .state = qsm_machine_start_state(m) };

	for (; *events; events++)
		feed(&r, *events);
	return r;
}

#define PATH(...) ((const int[]){ __VA_ARGS__, 0 })
#define EV(x) QSM_EV_##x

#define TO_LIVE EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_RESOLVED), EV(ESTABLISHED), EV(READY)

START_TEST(test_active_happy_path_reaches_live_and_closes)
{
	struct run r = replay(QSM_MACHINE_CM_ID, PATH(TO_LIVE));

	ck_assert_int_eq(r.state, QSM_CM_LIVE);
	r = replay(QSM_MACHINE_CM_ID, PATH(TO_LIVE, EV(DISCONNECT), EV(DISCONNECTED),
					   EV(TIMEWAIT_EXIT), EV(DRAINED)));
	ck_assert_int_eq(r.state, QSM_CM_CLOSED);
	ck_assert_uint_eq(r.unexpected, 0);
	ck_assert_uint_eq(r.transitions, 9);
}
END_TEST

/* Each failure on the way up lands in the gap, and RETRY starts over. */
static const int error_paths[][8] = {
	{ EV(CONNECT), EV(ADDR_ERROR), 0 },
	{ EV(CONNECT), EV(TIMEOUT), 0 },
	{ EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_ERROR), 0 },
	{ EV(CONNECT), EV(ADDR_RESOLVED), EV(TIMEOUT), 0 },
	{ EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_RESOLVED), EV(REJECTED), 0 },
	{ EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_RESOLVED), EV(UNREACHABLE), 0 },
	{ EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_RESOLVED), EV(CONNECT_ERROR), 0 },
	{ EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_RESOLVED), EV(TIMEOUT), 0 },
	{ EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_RESOLVED), EV(ADDR_CHANGE), 0 },
	{ TO_LIVE, EV(DISCONNECTED), EV(DRAINED), 0 },
	{ TO_LIVE, EV(QP_FATAL), EV(TIMEOUT), 0 },
};

START_TEST(test_error_path_ends_in_reconnect_wait_then_retries)
{
	struct run r = replay(QSM_MACHINE_CM_ID, error_paths[_i]);

	ck_assert_int_eq(r.state, QSM_CM_RECONNECT_WAIT);
	ck_assert_uint_eq(r.unexpected, 0);
	feed(&r, EV(RETRY));
	ck_assert_int_eq(r.state, QSM_CM_ADDR_RESOLVING);
	feed(&r, EV(ADDR_ERROR));
	feed(&r, EV(GIVE_UP));
	ck_assert_int_eq(r.state, QSM_CM_FAILED);
	feed(&r, EV(RETRY));
	ck_assert_uint_eq(r.unexpected, 1);
	ck_assert_int_eq(r.state, QSM_CM_FAILED);
}
END_TEST

START_TEST(test_reconnect_loop_returns_to_live_each_time)
{
	struct run r = replay(QSM_MACHINE_CM_ID, PATH(TO_LIVE));

	for (int i = 0; i < 3; i++) {
		feed(&r, EV(DISCONNECTED));
		ck_assert_int_eq(r.state, QSM_CM_DRAINING);
		feed(&r, EV(DISCONNECTED)); /* twice: benign */
		feed(&r, EV(ESTABLISHED));  /* after DISCONNECTED: unexpected, stays */
		ck_assert_int_eq(r.state, QSM_CM_DRAINING);
		feed(&r, EV(DRAINED));
		ck_assert_int_eq(r.state, QSM_CM_RECONNECT_WAIT);
		feed(&r, EV(RETRY));
		feed(&r, EV(ADDR_RESOLVED));
		feed(&r, EV(ROUTE_RESOLVED));
		feed(&r, EV(ESTABLISHED));
		feed(&r, EV(READY));
		ck_assert_int_eq(r.state, QSM_CM_LIVE);
	}
	ck_assert_uint_eq(r.unexpected, 3);
}
END_TEST

/* Paths that reach each active state, for the "from every state" tests. */
static const int *const cm_paths[QSM_CM_STATE_COUNT] = {
	[QSM_CM_IDLE] = PATH(EV(READY)), /* unexpected; stays IDLE */
	[QSM_CM_ADDR_RESOLVING] = PATH(EV(CONNECT)),
	[QSM_CM_ROUTE_RESOLVING] = PATH(EV(CONNECT), EV(ADDR_RESOLVED)),
	[QSM_CM_CONNECTING] = PATH(EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_RESOLVED)),
	[QSM_CM_CONNECTED] = PATH(EV(CONNECT), EV(ADDR_RESOLVED), EV(ROUTE_RESOLVED), EV(ESTABLISHED)),
	[QSM_CM_LIVE] = PATH(TO_LIVE),
	[QSM_CM_DISCONNECTING] = PATH(TO_LIVE, EV(DISCONNECT)),
	[QSM_CM_DRAINING] = PATH(TO_LIVE, EV(ADDR_CHANGE)),
	[QSM_CM_CLOSING] = PATH(TO_LIVE, EV(DISCONNECT), EV(TIMEOUT)),
	[QSM_CM_RECONNECT_WAIT] = PATH(EV(CONNECT), EV(ADDR_ERROR)),
	[QSM_CM_FAILED] = PATH(EV(CONNECT), EV(ADDR_ERROR), EV(GIVE_UP)),
	[QSM_CM_CLOSED] = PATH(EV(DESTROY)),
};

START_TEST(test_device_removal_from_every_active_state)
{
	static const int want[QSM_CM_STATE_COUNT] = {
		[QSM_CM_IDLE] = QSM_CM_IDLE, /* nothing on a device yet: unexpected */
		[QSM_CM_ADDR_RESOLVING] = QSM_CM_RECONNECT_WAIT,
		[QSM_CM_ROUTE_RESOLVING] = QSM_CM_RECONNECT_WAIT,
		[QSM_CM_CONNECTING] = QSM_CM_RECONNECT_WAIT,
		[QSM_CM_CONNECTED] = QSM_CM_RECONNECT_WAIT,
		[QSM_CM_LIVE] = QSM_CM_RECONNECT_WAIT,
		[QSM_CM_DISCONNECTING] = QSM_CM_CLOSED,
		[QSM_CM_DRAINING] = QSM_CM_RECONNECT_WAIT,
		[QSM_CM_CLOSING] = QSM_CM_CLOSED,
		[QSM_CM_RECONNECT_WAIT] = QSM_CM_RECONNECT_WAIT, /* the gap */
		[QSM_CM_FAILED] = QSM_CM_FAILED,
		[QSM_CM_CLOSED] = QSM_CM_CLOSED, /* final: unexpected */
	};
	struct run r = replay(QSM_MACHINE_CM_ID, cm_paths[_i]);

	ck_assert_int_eq(r.state, _i);
	feed(&r, EV(DEVICE_REMOVAL));
	ck_assert_msg(r.state == want[_i], "DEVICE_REMOVAL in %s went to %s",
		      qsm_state_name(QSM_MACHINE_CM_ID, _i), qsm_state_name(QSM_MACHINE_CM_ID, r.state));
	ck_assert_uint_eq(r.unexpected, (_i == QSM_CM_IDLE ? 2 : 0) + (_i == QSM_CM_CLOSED));
	/* after removal a queue that may reconnect does so when the device is back */
	if (r.state == QSM_CM_RECONNECT_WAIT) {
		feed(&r, EV(DEVICE_ADDED));
		feed(&r, EV(RETRY));
		ck_assert_int_eq(r.state, QSM_CM_ADDR_RESOLVING);
	}
}
END_TEST

START_TEST(test_destroy_from_every_active_state_closes)
{
	struct run r = replay(QSM_MACHINE_CM_ID, cm_paths[_i]);
	unsigned int before = r.unexpected;

	ck_assert_int_eq(r.state, _i);
	feed(&r, EV(DESTROY));
	ck_assert_int_eq(r.state, QSM_CM_CLOSED);
	ck_assert_uint_eq(r.unexpected, before + (_i == QSM_CM_CLOSED));
	/* nothing leaves CLOSED */
	for (int ev = 1; ev < QSM_EV_LIMIT; ev++)
		if (qsm_event_name(ev))
			ck_assert_int_eq(qsm_machine_next(QSM_MACHINE_CM_ID, QSM_CM_CLOSED, ev, NULL), -ENOMSG);
}
END_TEST

START_TEST(test_passive_paths)
{
	struct run r = replay(QSM_MACHINE_ACCEPT, PATH(EV(CONNECT_REQUEST), EV(ACCEPT), EV(ESTABLISHED),
						       EV(READY), EV(DISCONNECTED), EV(DISCONNECTED),
						       EV(TIMEWAIT_EXIT), EV(DRAINED)));

	ck_assert_int_eq(r.state, QSM_ACCEPT_CLOSED);
	ck_assert_uint_eq(r.unexpected, 0);
	r = replay(QSM_MACHINE_ACCEPT, PATH(EV(CONNECT_REQUEST), EV(REJECT)));
	ck_assert_int_eq(r.state, QSM_ACCEPT_CLOSED);
	r = replay(QSM_MACHINE_ACCEPT, PATH(EV(CONNECT_REQUEST), EV(ACCEPT), EV(ESTABLISHED),
					    EV(DEVICE_REMOVAL)));
	ck_assert_int_eq(r.state, QSM_ACCEPT_CLOSED);
	/* ESTABLISHED after DISCONNECTED: unexpected, the queue keeps draining */
	r = replay(QSM_MACHINE_ACCEPT, PATH(EV(CONNECT_REQUEST), EV(ACCEPT), EV(DISCONNECTED),
					    EV(ESTABLISHED)));
	ck_assert_int_eq(r.state, QSM_ACCEPT_DRAINING);
	ck_assert_uint_eq(r.unexpected, 1);
}
END_TEST

START_TEST(test_listener_survives_device_removal)
{
	struct run r = replay(QSM_MACHINE_LISTENER,
			      PATH(EV(LISTEN), EV(CONNECT_REQUEST), EV(DEVICE_REMOVAL), EV(CONNECT_REQUEST),
				   EV(RETRY), EV(DEVICE_ADDED), EV(LISTEN), EV(CONNECT_REQUEST)));

	ck_assert_int_eq(r.state, QSM_LISTENER_LISTENING);
	ck_assert_uint_eq(r.unexpected, 1); /* a request with no listening id */
	feed(&r, EV(DESTROY));
	ck_assert_int_eq(r.state, QSM_LISTENER_CLOSED);
}
END_TEST

START_TEST(test_qp_lifecycle_through_connect_error_and_drain)
{
	struct run r = replay(QSM_MACHINE_QP, PATH(EV(QP_TO_INIT), EV(QP_TO_RTR), EV(COMM_EST),
						   EV(QP_TO_RTS), EV(QP_TO_SQD), EV(SQ_DRAINED),
						   EV(QP_TO_RTS), EV(WC_ERROR), EV(WC_ERROR), EV(DRAINED)));

	ck_assert_int_eq(r.state, QSM_QP_ERR);
	ck_assert_uint_eq(r.unexpected, 0);
	feed(&r, EV(QP_TO_RTS)); /* illegal modify: stays */
	ck_assert_int_eq(r.state, QSM_QP_ERR);
	ck_assert_uint_eq(r.unexpected, 1);
	feed(&r, EV(QP_TO_RESET));
	feed(&r, EV(DEVICE_REMOVAL));
	ck_assert_int_eq(r.state, QSM_QP_DESTROYED);
}
END_TEST

static Suite *machines_suite(void)
{
	Suite *s = suite_create("machines");
	TCase *t = tcase_create("table");

	tcase_add_test(t, test_state_facts_match_spec);
	tcase_add_loop_test(t, test_every_state_event_pair_matches_spec, 0, QSM_MACHINE_COUNT);
	tcase_add_loop_test(t, test_spec_is_well_formed, 0, QSM_MACHINE_COUNT);
	tcase_add_loop_test(t, test_destroy_and_device_removal_have_edges_wherever_they_can_occur, 0,
			    QSM_MACHINE_COUNT);
	tcase_add_test(t, test_bad_arguments_are_rejected_with_einval);
	tcase_add_test(t, test_names_round_trip_and_are_unique);
	suite_add_tcase(s, t);

	t = tcase_create("sequences");
	tcase_add_test(t, test_active_happy_path_reaches_live_and_closes);
	tcase_add_loop_test(t, test_error_path_ends_in_reconnect_wait_then_retries, 0,
			    sizeof(error_paths) / sizeof(error_paths[0]));
	tcase_add_test(t, test_reconnect_loop_returns_to_live_each_time);
	tcase_add_loop_test(t, test_device_removal_from_every_active_state, 0, QSM_CM_STATE_COUNT);
	tcase_add_loop_test(t, test_destroy_from_every_active_state_closes, 0, QSM_CM_STATE_COUNT);
	tcase_add_test(t, test_passive_paths);
	tcase_add_test(t, test_listener_survives_device_removal);
	tcase_add_test(t, test_qp_lifecycle_through_connect_error_and_drain);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(machines_suite)
