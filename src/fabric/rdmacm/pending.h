/* rdma-qsm internal: the rdmacm fabric's queue of the events it makes itself (completions, QP
 * and device events), a unit of its own so that its no-loss rule is tested without a device. */
#ifndef QSM_FABRIC_PENDING_H
#define QSM_FABRIC_PENDING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "fabric/fabric.h"
#include "list.h"

/*
 * One event waiting for get_event().  Every entry is a heap block that starts with this
 * struct (a WR's record embeds it first), freed when it is released.
 *
 * The rule: a work completion never needs memory.  Its entry is the WR's own record,
 * allocated when the WR is posted (a post that cannot allocate fails with -ENOMEM, and
 * nothing was posted), so every WR that was posted completes exactly once, whatever the
 * allocator says later.  Only the other events (QP_FATAL, DRAINED, DEVICE_ADDED)
 * allocate; one of those lost to ENOMEM is covered by the runtime's state timeouts.
 */
struct qsm_pending {
	struct qsm_list node;
	int event;
	int status;
	struct qsm_fid *id;
	struct qsm_fdev *dev;
	struct qsm_fsrq *srq;            /* SRQ_LIMIT: the SRQ, and its owner */
	void *srq_owner;
	bool device_wide;                /* QP_FATAL for every QP of `dev`, expanded when taken */
	struct qsm_fabric_wc wc;         /* QSM_EV_COMPLETION */
};

struct qsm_pending_queue {
	pthread_mutex_t lock;            /* async events come from other fabrics' threads too */
	struct qsm_list list;
	int kfd;                         /* eventfd, readable while the queue is not empty */
	bool kicked;
};

/* 0, or -errno of eventfd(). */
int qsm_pending_init(struct qsm_pending_queue *q);
/* Releases what is left and closes the eventfd. */
void qsm_pending_fini(struct qsm_pending_queue *q);

/* Memory for an entry, or for a record that starts with one; NULL when out of memory. */
void *qsm_pending_alloc(size_t size);
/* Tests: the next n calls of qsm_pending_alloc() fail, as if memory were short. */
void qsm_pending_fail_allocs(unsigned n);

/* Queue the completion `wc` of `id` in `rec`, the WR's record: never fails. */
void qsm_pending_complete(struct qsm_pending_queue *q, struct qsm_pending *rec, struct qsm_fid *id,
			  const struct qsm_fabric_wc *wc);
/* Queue an event that is not a completion: 0, or -ENOMEM (the event is lost). */
int qsm_pending_push_event(struct qsm_pending_queue *q, int event, int status, struct qsm_fid *id,
			   struct qsm_fdev *dev, bool device_wide);
/* SRQ_LIMIT of `srq` (for `owner`): 0, or -ENOMEM (the event is lost). */
int qsm_pending_push_srq(struct qsm_pending_queue *q, struct qsm_fsrq *srq, void *owner);
/* Release what is queued for `srq`. */
void qsm_pending_drop_srq(struct qsm_pending_queue *q, const struct qsm_fsrq *srq);
/* The oldest entry, or NULL; the caller releases it. */
struct qsm_pending *qsm_pending_pop(struct qsm_pending_queue *q);
void qsm_pending_release(struct qsm_pending *p);
/* Release what is queued for `id` (if not NULL), and the device's own events of `dev`. */
void qsm_pending_drop(struct qsm_pending_queue *q, const struct qsm_fid *id, const struct qsm_fdev *dev);

#endif
