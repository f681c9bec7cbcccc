/* rdma-qsm internal: classes (class.c).  Every handler slot of a class is looked up through
 * its supers once, into a table per class and ctx that the queues' hot path reads. */
#ifndef QSM_CLASS_H
#define QSM_CLASS_H

#include "core/core.h"

struct qsm_srq;

/* A class with every slot looked up through its supers once: the hot path reads this. */
struct qsm_vtable {
	const struct qsm_class *cls;
	struct qsm_state_handlers state[2][QSM_CM_STATE_COUNT]; /* [passive][state] */
	/* bit s: state s has an on_event or exit handler (leaving) / an enter handler
	 * (arriving): an edge between states that have none tests one word each way */
	uint32_t leave_mask[2], enter_mask[2];
	qsm_handler_fn unexpected, device_removed, qp_ready;
	int (*completion)(struct qsm_conn *q, const struct qsm_wc *wc);
	void (*release)(struct qsm_conn *q);
	size_t priv_size;
	struct qsm_fabric_qp_attr qp;    /* caps of the QP its queues create */
	struct qsm_srq_caps srq;         /* max_wr 0: no SRQ */
	void (*srq_low)(struct qsm_srq *s);
	struct qsm_vtable *next;
};

/* Whether every class up c's chain asks for caps a queue can have: no SGE count above
 * QSM_MAX_SGE (qp.max_send_sge, qp.max_recv_sge, srq.max_sge).  qsm_conn_new() and
 * qsm_listener_new() refuse another class with -EINVAL. */
bool qsm_class_caps_ok(const struct qsm_class *c);

/* The table of class c in ctx (made at first use), the lookup ending in base. */
const struct qsm_vtable *qsm_vtable_get(struct qsm_ctx *ctx, const struct qsm_class *c,
					const struct qsm_class *base);

#endif
