/* rdma-qsm internal: rdma_cm's event numbers to the library's alphabet (qsm/events.h), in a
 * file of its own so that a test can check the mapping without a device. */
#ifndef QSM_CM_EVENT_H
#define QSM_CM_EVENT_H

/* The QSM_EV_* of an rdma_cm event type. */
int qsm_cm_event_map(int raw);
/* REJECTED, or REJECTED_STALE when the IB CM's reason (status, IB and RoCE: iwarp false)
 * is a stale connection (IBTA table 112, reason 10).  iWARP's status is an errno. */
int qsm_cm_rejected(int status, int iwarp);

#endif
