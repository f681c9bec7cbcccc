/* rdma-qsm internal: how the Ragel-generated machines (the sm/ directory) plug into the runtime.
 * A machine is pure: stepping it computes the target state and the actions, nothing else. */
#ifndef QSM_SM_H
#define QSM_SM_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <qsm/machine.h>

/* Which step timeout a state arms on arrival (struct qsm_timeouts names the fields). */
enum qsm_step_timeout {
	QSM_STEP_NONE = 0,      /* the state waits as long as it takes */
	QSM_STEP_RESOLVE,       /* resolve_ms (+1 s: the fabric's own timer fires first) */
	QSM_STEP_CONNECT,       /* connect_ms */
	QSM_STEP_REQUEST,       /* request_ms: a passive queue's handler must decide */
	QSM_STEP_HANDSHAKE,     /* handshake_ms: 0 means none */
	QSM_STEP_DISCONNECT,    /* disconnect_ms */
	QSM_STEP_DRAIN,         /* drain_ms */
	QSM_STEP_KEEPALIVE,     /* keepalive_ms: 0 means none */
	QSM_STEP_COUNT
};

/* What a queue being torn down with its ctx does in this state, besides releasing. */
enum qsm_teardown {
	QSM_TEARDOWN_RELEASE = 0,
	QSM_TEARDOWN_REJECT,    /* an undecided request: reject it, never leave the peer waiting */
};

/* What the runtime knows of a state, declared on its line of its table of states in sm/\*.rl. */
struct qsm_state_facts {
	unsigned char timeout;  /* enum qsm_step_timeout */
	unsigned char teardown; /* enum qsm_teardown */
	bool retiring;          /* on its way out: takes no new users (a device being removed) */
	bool after_cm;          /* its timer never fires before the fabric's CM bound, and a
	                           quarter more: the CM ends the attempt by itself (connect_ms) */
	bool drains;            /* the drain marker is posted: a new WR would outlive the QP, so
	                           posts are refused (elsewhere they go wherever the QP exists) */
};

struct qsm_sm {
	enum qsm_machine id;
	const char *name;
	int nstates;
	int start_state;
	int final_state;
	const char *const *state_names;
	const struct qsm_state_facts *facts;    /* [nstates] */
	int start_cs;
	int error_cs;
	/* Feed one event from Ragel state *cs.  On an edge: 0, *cs updated, edge filled.
	 * No edge: -ENOMSG, *cs untouched. */
	int (*exec)(int *cs, int event, struct qsm_edge *edge);
};

extern const struct qsm_sm qsm_sm_cm_id;
extern const struct qsm_sm qsm_sm_accept;
extern const struct qsm_sm qsm_sm_listener;
extern const struct qsm_sm qsm_sm_qp;
extern const struct qsm_sm qsm_sm_device;

/* The machine for an id, or NULL. */
const struct qsm_sm *qsm_sm_get(enum qsm_machine m);

/* Ragel's state number for a named state (found once by walking the machine). */
int qsm_sm_cs(const struct qsm_sm *sm, int state);
void qsm_sm_init(void);

/* How the runtime steps every machine: sm/edges.h (written by tools/qsm-edges from the
 * compiled machines) gives each machine as QSM_SWITCH_M(state, event, EDGE, A, NO_EDGE), a
 * switch on the state holding a switch on the event, one case per edge with its actions
 * inline: the compiler sees every edge as straight-line code.  These two serve the queries
 * (qsm_edges_M_has) and machines whose edges carry no action. */
#define QSM_EDGE_HAS(from, event, to, timeout, final, actions) case (event): return true;
#define QSM_EDGE_NO_ACTION(a)

/* Used by the .rl actions: record what the edge does and where it goes. */
#define QSM_SM_ACT(a) do { \
		if (edge->nactions < QSM_EDGE_MAX_ACTIONS) \
			edge->actions[edge->nactions++] = (a); \
	} while (0)
#define QSM_SM_TO(s) (edge->target = (s))

/* Each machine names only the actions of the runtime that carries them out. */
#define QSM_SM_QUEUE_ACT(a) do { \
		_Static_assert(((int)(a) >= QSM_ACT_RESOLVE_ADDR && (int)(a) <= QSM_ACT_RESET_BACKOFF) || \
			       ((int)(a) >= QSM_ACT_NOTIFY && (int)(a) <= QSM_ACT_PROBE), \
			       #a " is not a queue action"); \
		QSM_SM_ACT(a); \
	} while (0)
#define QSM_SM_DEVICE_ACT(a) do { \
		_Static_assert((int)(a) >= QSM_ACT_RELEASE_SENTINEL && (int)(a) <= QSM_ACT_SRQ_LOW, \
			       #a " is not a device action"); \
		QSM_SM_ACT(a); \
	} while (0)
#define QSM_SM_LISTENER_ACT(a) do { \
		_Static_assert((int)(a) >= QSM_ACT_SPAWN_PASSIVE && (int)(a) <= QSM_ACT_RELEASE_LISTENER, \
			       #a " is not a listener action"); \
		QSM_SM_ACT(a); \
	} while (0)

/* The body every generated exec function shares. */
#define QSM_SM_EXEC_PROLOGUE \
	int cs = *csp; \
	const int *p = &event; \
	const int *pe = p + 1; \
	edge->target = -1; \
	edge->nactions = 0

#endif
