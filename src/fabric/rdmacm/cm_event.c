/* rdma-qsm: rdma_cm's event numbers to the library's alphabet, named one by one, so that an
 * event of a newer rdma-core (ADDRINFO_*, USER, ...) is CM_UNKNOWN, never an index past a table. */
#include <rdma/rdma_cma.h>

#include <qsm/events.h>

#include "fabric/rdmacm/cm_event.h"

int qsm_cm_event_map(int raw)
{
	/* int, not the enum: librdmacm may hand us a value its header (our build) never named */
	switch (raw) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return QSM_EV_ADDR_RESOLVED;
	case RDMA_CM_EVENT_ADDR_ERROR: return QSM_EV_ADDR_ERROR;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return QSM_EV_ROUTE_RESOLVED;
	case RDMA_CM_EVENT_ROUTE_ERROR: return QSM_EV_ROUTE_ERROR;
	case RDMA_CM_EVENT_CONNECT_REQUEST: return QSM_EV_CONNECT_REQUEST;
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return QSM_EV_CONNECT_RESPONSE;
	case RDMA_CM_EVENT_CONNECT_ERROR: return QSM_EV_CONNECT_ERROR;
	case RDMA_CM_EVENT_UNREACHABLE: return QSM_EV_UNREACHABLE;
	case RDMA_CM_EVENT_REJECTED: return QSM_EV_REJECTED;
	case RDMA_CM_EVENT_ESTABLISHED: return QSM_EV_ESTABLISHED;
	case RDMA_CM_EVENT_DISCONNECTED: return QSM_EV_DISCONNECTED;
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return QSM_EV_DEVICE_REMOVAL;
	case RDMA_CM_EVENT_MULTICAST_JOIN: return QSM_EV_MULTICAST_JOIN;
	case RDMA_CM_EVENT_MULTICAST_ERROR: return QSM_EV_MULTICAST_ERROR;
	case RDMA_CM_EVENT_ADDR_CHANGE: return QSM_EV_ADDR_CHANGE;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return QSM_EV_TIMEWAIT_EXIT;
	default: return QSM_EV_CM_UNKNOWN;
	}
}

#define CM_REJ_STALE_CONN 10

int qsm_cm_rejected(int status, int iwarp)
{
	return !iwarp && status == CM_REJ_STALE_CONN ? QSM_EV_REJECTED_STALE : QSM_EV_REJECTED;
}
