/* rdma-qsm: the five state machines as data: states, actions, and a side-effect-free
 * "what would event E do in state S" query, for tools, docs, tests and handlers. */
#ifndef QSM_MACHINE_H
#define QSM_MACHINE_H

#include <qsm/events.h>

#ifdef __cplusplus
extern "C" {
#endif

enum qsm_machine {
	QSM_MACHINE_CM_ID = 0,    /* active queue: sm/cm_id.rl */
	QSM_MACHINE_ACCEPT = 1,   /* passive (accepted) queue: sm/accept.rl */
	QSM_MACHINE_LISTENER = 2, /* listener: sm/listener.rl */
	QSM_MACHINE_QP = 3,       /* queue pair: sm/qp.rl */
	QSM_MACHINE_DEVICE = 4,   /* a device of the ctx's registry: sm/device.rl */
};
#define QSM_MACHINE_COUNT 5

/* Each machine's states (enum qsm_cm_state, qsm_accept_state, qsm_listener_state,
 * qsm_qp_state, qsm_device_state), written from the tables of states in sm/\*.rl. */
#include <qsm/states.h>

/* What the runtime does on an edge (the .rl actions), one enum per runtime that carries them
 * out: a queue's (sm/cm_id.rl, sm/accept.rl), a listener's (sm/listener.rl) and a registry
 * device's (sm/device.rl); the QP machine has none.  Numbered apart, so that an edge holds either.  Each action does one thing; the
 * ones that change the QP drive the QP machine (sm/qp.rl) with one event each, as listed. */
enum qsm_queue_action {
	QSM_ACT_RESOLVE_ADDR = 1,   /* create the cm_id, rdma_resolve_addr */
	QSM_ACT_RESOLVE_ROUTE,      /* rdma_resolve_route */
	QSM_ACT_CREATE_QP,          /* create the QP (QP: QP_TO_INIT, as rdma_create_qp does) */
	QSM_ACT_QP_READY,           /* the class's qp_ready handler: post receives before the peer sends */
	QSM_ACT_CONNECT,            /* rdma_connect with the ULP's private data */
	QSM_ACT_QP_TO_RTR,          /* the CM moved the QP to RTR (QP: QP_TO_RTR) */
	QSM_ACT_QP_TO_RTS,          /* the CM moved the QP to RTS (QP: QP_TO_RTS) */
	QSM_ACT_DISCONNECT,         /* rdma_disconnect (DREQ) (QP: QP_TO_ERR) */
	QSM_ACT_MARK_LOST,          /* remember when the connection was lost (loss_timeout_ms) */
	QSM_ACT_START_DRAIN,        /* QP to ERR, post the drain marker (QP: QP_TO_ERR) */
	QSM_ACT_RELEASE_ID,         /* destroy the QP and the cm_id (QP: DESTROY) */
	QSM_ACT_ARM_RETRY,          /* next reconnect attempt, or GIVE_UP */
	QSM_ACT_RETRY_NOW,          /* a device came back: retry without waiting */
	QSM_ACT_RELEASE_DEVICE,     /* device gone: device_removed, drop all on it */
	QSM_ACT_RELEASE_ALL,        /* final teardown (QP: DESTROY) */
	QSM_ACT_ACCEPT,             /* rdma_accept with the ULP's private data */
	QSM_ACT_REJECT,             /* rdma_reject with the ULP's reason */
	QSM_ACT_RESET_BACKOFF,      /* a fresh reconnect policy: attempts and delay from zero */
	/* added after the listener's and the device's actions were numbered (numbers never move) */
	QSM_ACT_NOTIFY = 28,        /* rdma_notify(COMM_EST): a message before the RTU completes
	                               the accept (QP: COMM_EST) */
	QSM_ACT_ARM_FAST_RETRY = 29, /* a stale-connection reject: retry after 10 ms, up to 3 in a
	                               row; then the policy's backoff, as ARM_RETRY */
	QSM_ACT_PROBE = 30,         /* keepalive: a zero-length RDMA WRITE the ULP never sees (its
	                               failure is WC_ERROR), the next probe armed */
};
enum qsm_listener_action {
	QSM_ACT_SPAWN_PASSIVE = QSM_ACT_RESET_BACKOFF + 1, /* make a passive queue for the request */
	QSM_ACT_RELEASE_LISTEN_ID,  /* destroy the listening id */
	QSM_ACT_TRY_LISTEN,         /* bind + listen again, LISTEN on success */
	QSM_ACT_ARM_RELISTEN,       /* the next listen attempt, after the relisten backoff */
	QSM_ACT_RELEASE_LISTENER,   /* final teardown: timer, listening id */
};
enum qsm_device_action {
	QSM_ACT_RELEASE_SENTINEL = QSM_ACT_RELEASE_LISTENER + 1, /* destroy the sentinel id */
	QSM_ACT_NOTIFY_QUEUES,      /* DEVICE_REMOVAL to every queue on the device */
	QSM_ACT_RELEASE_REGISTRY,   /* its pools' registrations, SRQs, sentinel, device reference */
	QSM_ACT_SRQ_LOW,            /* the SRQ that fired: its class's srq_low, the limit armed again */
};
#define QSM_ACT_LIMIT (QSM_ACT_SRQ_LOW + 4)   /* through QSM_ACT_PROBE */

/* At most this many actions on one edge (the build refuses a .rl edge with more).  Part of
 * the ABI through struct qsm_edge, which qsm_machine_next() fills: it changes only with
 * the soname (tests/abi.test fails on it). */
#define QSM_EDGE_MAX_ACTIONS 6

struct qsm_edge {
	int target;                                    /* state after the event */
	unsigned int nactions;
	int actions[QSM_EDGE_MAX_ACTIONS];             /* QSM_ACT_*, in the order the .rl runs them */
};

const char *qsm_machine_name(enum qsm_machine m);    /* "cm_id", ... or NULL */
int qsm_machine_state_count(enum qsm_machine m);     /* or -EINVAL */
int qsm_machine_start_state(enum qsm_machine m);     /* or -EINVAL */
int qsm_machine_is_final(enum qsm_machine m, int state); /* 1, 0 or -EINVAL */
const char *qsm_state_name(enum qsm_machine m, int state); /* "LIVE", or NULL */
const char *qsm_action_name(int a);                  /* "start_drain", or NULL */

/* What a state does besides its edges, as its machine declares it (sm/\*.rl). */
struct qsm_state_info {
	const char *timeout;        /* the struct qsm_timeouts field armed on arrival, e.g.
	                               "connect_ms" (its expiry is the TIMEOUT event), or NULL */
	int drains;                 /* 1: the drain marker is posted, new work requests are
	                               refused (elsewhere they may be posted while the QP exists) */
	int rejects_on_teardown;    /* 1: a ctx torn down here rejects the pending request */
	int retiring;               /* 1: on its way out, takes no new user (a removed device) */
	int after_cm;               /* 1: its timer never fires before the kernel's CM ends the
	                               attempt by itself (its retries' bound, and a quarter more) */
	int reserved[3];            /* 0: room for later facts (the library fills it whole) */
};

/* Fills @info for @state of @m: 0, or -EINVAL for an unknown machine or state, or NULL @info. */
int qsm_machine_state_info(enum qsm_machine m, int state, struct qsm_state_info *info);

/*
 * What event @event does in state @state of machine @m, without side effects.
 * Returns the target state (>= 0) and, if @edge is not NULL, fills it;
 * -ENOMSG if the event has no edge there (the runtime sends it to the class's
 * `unexpected` handler and the machine stays where it was);
 * -EINVAL for an unknown machine, state or event.
 */
int qsm_machine_next(enum qsm_machine m, int state, int event, struct qsm_edge *edge);

#ifdef __cplusplus
}
#endif

#endif
