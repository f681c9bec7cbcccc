/* rdma-qsm: qsm_base_class, where every class's lookup ends: the correct default for every
 * slot a ULP leaves empty (no handshake, accept every request, unexpected only counted). */
#include <stddef.h>

#include "queue/queue.h"

/* No ULP handshake: a connection is usable as soon as it is established. */
static int base_connected_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	qsm_conn_ready(q);
	return 0;
}

/* A ULP that does not look at requests accepts them. */
static int base_requested_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	qsm_conn_accept(q, NULL, 0);
	return 0;
}

/* Counting and tracing are done by the runtime before this runs: nothing else to do. */
static int base_unexpected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)q;
	(void)ev;
	return 0;
}

const struct qsm_class qsm_base_class = {
	.name = "qsm_base",
	.active = {
		[QSM_CM_CONNECTED] = { .enter = base_connected_enter },
	},
	.passive = {
		[QSM_ACCEPT_REQUESTED] = { .enter = base_requested_enter },
		[QSM_ACCEPT_CONNECTED] = { .enter = base_connected_enter },
	},
	.unexpected = base_unexpected,
};
