/* rdma-qsm: the public, side-effect-free view of the generated machines (names, edges),
 * and the map from the stable state names to Ragel's internal state numbers. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sm.h"

#define MAX_CS 64

static const struct qsm_sm *const machines[QSM_MACHINE_COUNT] = {
	[QSM_MACHINE_CM_ID] = &qsm_sm_cm_id,
	[QSM_MACHINE_ACCEPT] = &qsm_sm_accept,
	[QSM_MACHINE_LISTENER] = &qsm_sm_listener,
	[QSM_MACHINE_QP] = &qsm_sm_qp,
	[QSM_MACHINE_DEVICE] = &qsm_sm_device,
};

static const char *const event_names[QSM_EV_LIMIT] = {
#define EV(n) [QSM_EV_##n] = #n
	EV(ADDR_RESOLVED), EV(ADDR_ERROR), EV(ROUTE_RESOLVED), EV(ROUTE_ERROR),
	EV(CONNECT_REQUEST), EV(CONNECT_RESPONSE), EV(CONNECT_ERROR), EV(UNREACHABLE),
	EV(REJECTED), EV(ESTABLISHED), EV(DISCONNECTED), EV(DEVICE_REMOVAL),
	EV(MULTICAST_JOIN), EV(MULTICAST_ERROR), EV(ADDR_CHANGE), EV(TIMEWAIT_EXIT), EV(REJECTED_STALE),
	EV(CM_UNKNOWN),
	EV(CONNECT), EV(ACCEPT), EV(REJECT), EV(DISCONNECT), EV(DESTROY), EV(LISTEN), EV(READY),
	EV(RETRY), EV(TIMEOUT), EV(GIVE_UP),
	EV(QP_FATAL), EV(DRAINED), EV(WC_ERROR), EV(SQ_ERROR), EV(SQ_DRAINED), EV(COMM_EST),
	EV(LAST_WQE), EV(SRQ_LIMIT), EV(QP_TO_RESET), EV(QP_TO_INIT), EV(QP_TO_RTR), EV(QP_TO_RTS),
	EV(QP_TO_SQD), EV(QP_TO_ERR), EV(PATH_MIG), EV(PATH_MIG_ERR),
	EV(DEVICE_ADDED), EV(PORT_ERR), EV(PORT_ACTIVE), EV(GID_CHANGE), EV(LID_CHANGE),
	EV(PKEY_CHANGE), EV(CLIENT_REREGISTER),
	EV(ABORT),
#undef EV
};

_Static_assert(QSM_ACT_NOTIFY == QSM_ACT_SRQ_LOW + 1 && QSM_ACT_LIMIT == QSM_ACT_PROBE + 1,
	       "the queue actions added later follow the device's");

static const char *const action_names[QSM_ACT_LIMIT] = {
	[QSM_ACT_RESOLVE_ADDR] = "resolve_addr",
	[QSM_ACT_RESOLVE_ROUTE] = "resolve_route",
	[QSM_ACT_CREATE_QP] = "create_qp",
	[QSM_ACT_QP_READY] = "qp_ready",
	[QSM_ACT_CONNECT] = "connect",
	[QSM_ACT_QP_TO_RTR] = "qp_to_rtr",
	[QSM_ACT_QP_TO_RTS] = "qp_to_rts",
	[QSM_ACT_DISCONNECT] = "disconnect",
	[QSM_ACT_MARK_LOST] = "mark_lost",
	[QSM_ACT_START_DRAIN] = "start_drain",
	[QSM_ACT_RELEASE_ID] = "release_id",
	[QSM_ACT_ARM_RETRY] = "arm_retry",
	[QSM_ACT_RETRY_NOW] = "retry_now",
	[QSM_ACT_RELEASE_DEVICE] = "release_device",
	[QSM_ACT_RELEASE_ALL] = "release_all",
	[QSM_ACT_ACCEPT] = "accept",
	[QSM_ACT_REJECT] = "reject",
	[QSM_ACT_RESET_BACKOFF] = "reset_backoff",
	[QSM_ACT_SPAWN_PASSIVE] = "spawn_passive",
	[QSM_ACT_RELEASE_LISTEN_ID] = "release_listen_id",
	[QSM_ACT_TRY_LISTEN] = "try_listen",
	[QSM_ACT_ARM_RELISTEN] = "arm_relisten",
	[QSM_ACT_RELEASE_LISTENER] = "release_listener",
	[QSM_ACT_RELEASE_SENTINEL] = "release_sentinel",
	[QSM_ACT_NOTIFY_QUEUES] = "notify_queues",
	[QSM_ACT_RELEASE_REGISTRY] = "release_registry",
	[QSM_ACT_SRQ_LOW] = "srq_low",
	[QSM_ACT_NOTIFY] = "notify",
	[QSM_ACT_ARM_FAST_RETRY] = "arm_fast_retry",
	[QSM_ACT_PROBE] = "probe",
};

const char *qsm_event_name(int event)
{
	if (event <= 0 || event >= QSM_EV_LIMIT)
		return NULL;
	return event_names[event];
}

int qsm_event_from_name(const char *name)
{
	if (!name)
		return -EINVAL;
	for (int ev = 1; ev < QSM_EV_LIMIT; ev++)
		if (event_names[ev] && strcmp(event_names[ev], name) == 0)
			return ev;
	return -EINVAL;
}

const char *qsm_action_name(int a)
{
	if (a <= 0 || a >= QSM_ACT_LIMIT)
		return NULL;
	return action_names[a];
}

const struct qsm_sm *qsm_sm_get(enum qsm_machine m)
{
	if ((unsigned int)m >= QSM_MACHINE_COUNT)
		return NULL;
	return machines[m];
}

/*
 * Ragel numbers its states as it likes; the .rl names each state on arrival.
 * Walking every edge from the start state once gives the name -> number map.
 * Every named state must be reachable, which the machine tests check.
 */
static int state_cs[QSM_MACHINE_COUNT][MAX_CS];
static pthread_once_t map_once = PTHREAD_ONCE_INIT;

static void map_machine(const struct qsm_sm *sm)
{
	int *map = state_cs[sm->id];
	int queue[MAX_CS], head = 0, tail = 0;
	char seen[MAX_CS] = { 0 };

	for (int s = 0; s < MAX_CS; s++)
		map[s] = -1;
	map[sm->start_state] = sm->start_cs;
	queue[tail++] = sm->start_cs;
	seen[sm->start_cs] = 1;
	while (head < tail) {
		int from = queue[head++];

		for (int ev = 1; ev < QSM_EV_LIMIT; ev++) {
			struct qsm_edge edge;
			int cs = from;

			if (!event_names[ev] || sm->exec(&cs, ev, &edge) < 0)
				continue;
			if (cs < 0 || cs >= MAX_CS || edge.target < 0 || edge.target >= sm->nstates)
				continue;
			map[edge.target] = cs;
			if (!seen[cs]) {
				seen[cs] = 1;
				queue[tail++] = cs;
			}
		}
	}
}

static int mapped;

static void map_all(void)
{
	for (int m = 0; m < QSM_MACHINE_COUNT; m++)
		map_machine(machines[m]);
	__atomic_store_n(&mapped, 1, __ATOMIC_RELEASE);
}

/* The maps, once per process (the public queries and tools/qsm-edges walk the machines; the
 * runtime steps them through sm/edges.h). */
void qsm_sm_init(void)
{
	if (!__atomic_load_n(&mapped, __ATOMIC_ACQUIRE))
		pthread_once(&map_once, map_all);
}

int qsm_sm_cs(const struct qsm_sm *sm, int state)
{
	/* the map is written once; after that this is a plain load on the hot path */
	qsm_sm_init();
	if (state < 0 || state >= sm->nstates)
		return -EINVAL;
	return state_cs[sm->id][state];
}

const char *qsm_machine_name(enum qsm_machine m)
{
	const struct qsm_sm *sm = qsm_sm_get(m);

	return sm ? sm->name : NULL;
}

int qsm_machine_state_count(enum qsm_machine m)
{
	const struct qsm_sm *sm = qsm_sm_get(m);

	return sm ? sm->nstates : -EINVAL;
}

int qsm_machine_start_state(enum qsm_machine m)
{
	const struct qsm_sm *sm = qsm_sm_get(m);

	return sm ? sm->start_state : -EINVAL;
}

int qsm_machine_is_final(enum qsm_machine m, int state)
{
	const struct qsm_sm *sm = qsm_sm_get(m);

	if (!sm || state < 0 || state >= sm->nstates)
		return -EINVAL;
	return state == sm->final_state;
}

const char *qsm_state_name(enum qsm_machine m, int state)
{
	const struct qsm_sm *sm = qsm_sm_get(m);

	if (!sm || state < 0 || state >= sm->nstates)
		return NULL;
	return sm->state_names[state];
}

int qsm_machine_next(enum qsm_machine m, int state, int event, struct qsm_edge *edge)
{
	const struct qsm_sm *sm = qsm_sm_get(m);
	struct qsm_edge scratch;
	int cs, r;

	if (!sm || !qsm_event_name(event))
		return -EINVAL;
	cs = qsm_sm_cs(sm, state);
	if (cs < 0)
		return -EINVAL;
	r = sm->exec(&cs, event, edge ? edge : &scratch);
	if (r < 0)
		return r;
	return (edge ? edge : &scratch)->target;
}

/* The struct qsm_timeouts field each step timeout reads (enum qsm_step_timeout). */
static const char *const step_timeout_names[QSM_STEP_COUNT] = {
	[QSM_STEP_RESOLVE] = "resolve_ms",
	[QSM_STEP_CONNECT] = "connect_ms",
	[QSM_STEP_REQUEST] = "request_ms",
	[QSM_STEP_HANDSHAKE] = "handshake_ms",
	[QSM_STEP_DISCONNECT] = "disconnect_ms",
	[QSM_STEP_DRAIN] = "drain_ms",
	[QSM_STEP_KEEPALIVE] = "keepalive_ms",
};

int qsm_machine_state_info(enum qsm_machine m, int state, struct qsm_state_info *info)
{
	const struct qsm_sm *sm = qsm_sm_get(m);
	const struct qsm_state_facts *f;

	if (!sm || !info || state < 0 || state >= sm->nstates)
		return -EINVAL;
	f = &sm->facts[state];
	*info = (struct qsm_state_info){
		.timeout = step_timeout_names[f->timeout],
		.drains = f->drains,
		.rejects_on_teardown = f->teardown == QSM_TEARDOWN_REJECT,
		.retiring = f->retiring,
		.after_cm = f->after_cm,
	};
	return 0;
}
