/* rdma-qsm: the rdmacm fabric's queue of the events it makes itself.  Completions travel in
 * their WR's record, allocated at post time, so that none is ever lost to a failed malloc. */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fabric/rdmacm/pending.h"

/* Ctxs on other threads allocate too: relaxed atomics keep the test hook race-free. */
static unsigned fail_allocs;

void qsm_pending_fail_allocs(unsigned n)
{
	__atomic_store_n(&fail_allocs, n, __ATOMIC_RELAXED);
}

void *qsm_pending_alloc(size_t size)
{
	unsigned n = __atomic_load_n(&fail_allocs, __ATOMIC_RELAXED);

	while (n && !__atomic_compare_exchange_n(&fail_allocs, &n, n - 1, false, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
		;
	return n ? NULL : calloc(1, size);
}

int qsm_pending_init(struct qsm_pending_queue *q)
{
	q->kicked = false;
	qsm_list_init(&q->list);
	q->kfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (q->kfd < 0)
		return -errno;
	pthread_mutex_init(&q->lock, NULL);
	return 0;
}

void qsm_pending_fini(struct qsm_pending_queue *q)
{
	struct qsm_pending *p;

	if (q->kfd < 0)
		return;
	while ((p = qsm_pending_pop(q)))
		qsm_pending_release(p);
	close(q->kfd);
	q->kfd = -1;
	pthread_mutex_destroy(&q->lock);
}

static void push(struct qsm_pending_queue *q, struct qsm_pending *p)
{
	pthread_mutex_lock(&q->lock);
	qsm_list_add_tail(&q->list, &p->node);
	if (!q->kicked) {
		__atomic_store_n(&q->kicked, true, __ATOMIC_RELEASE);
		(void)eventfd_write(q->kfd, 1);
	}
	pthread_mutex_unlock(&q->lock);
}

/* The record itself is queued: the memory was taken when the WR was posted. */
void qsm_pending_complete(struct qsm_pending_queue *q, struct qsm_pending *rec, struct qsm_fid *id,
			  const struct qsm_fabric_wc *wc)
{
	rec->event = QSM_EV_COMPLETION;
	rec->status = 0;
	rec->id = id;
	rec->dev = NULL;
	rec->device_wide = false;
	rec->wc = *wc;
	push(q, rec);
}

int qsm_pending_push_event(struct qsm_pending_queue *q, int event, int status, struct qsm_fid *id,
			   struct qsm_fdev *dev, bool device_wide)
{
	struct qsm_pending *p = qsm_pending_alloc(sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->event = event;
	p->status = status;
	p->id = id;
	p->dev = dev;
	p->device_wide = device_wide;
	push(q, p);
	return 0;
}

int qsm_pending_push_srq(struct qsm_pending_queue *q, struct qsm_fsrq *srq, void *owner)
{
	struct qsm_pending *p = qsm_pending_alloc(sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->event = QSM_EV_SRQ_LIMIT;
	p->srq = srq;
	p->srq_owner = owner;
	push(q, p);
	return 0;
}

void qsm_pending_drop_srq(struct qsm_pending_queue *q, const struct qsm_fsrq *srq)
{
	struct qsm_list *pos, *tmp;

	pthread_mutex_lock(&q->lock);
	qsm_list_each(pos, tmp, &q->list) {
		struct qsm_pending *p = qsm_container_of(pos, struct qsm_pending, node);

		if (p->srq == srq) {
			qsm_list_del(&p->node);
			qsm_pending_release(p);
		}
	}
	pthread_mutex_unlock(&q->lock);
}

struct qsm_pending *qsm_pending_pop(struct qsm_pending_queue *q)
{
	struct qsm_pending *p = NULL;

	/* kicked is true while the list holds something (set under the lock with the first
	 * push): an empty queue costs the owner's poll loop no lock */
	if (!__atomic_load_n(&q->kicked, __ATOMIC_ACQUIRE))
		return NULL;
	pthread_mutex_lock(&q->lock);
	if (!qsm_list_empty(&q->list)) {
		p = qsm_container_of(q->list.next, struct qsm_pending, node);
		qsm_list_del(&p->node);
	}
	if (qsm_list_empty(&q->list) && q->kicked) {
		eventfd_t v;

		__atomic_store_n(&q->kicked, false, __ATOMIC_RELAXED);
		(void)eventfd_read(q->kfd, &v);
	}
	pthread_mutex_unlock(&q->lock);
	return p;
}

void qsm_pending_release(struct qsm_pending *p)
{
	free(p);
}

void qsm_pending_drop(struct qsm_pending_queue *q, const struct qsm_fid *id, const struct qsm_fdev *dev)
{
	struct qsm_list *pos, *tmp;

	pthread_mutex_lock(&q->lock);
	qsm_list_each(pos, tmp, &q->list) {
		struct qsm_pending *p = qsm_container_of(pos, struct qsm_pending, node);

		if ((id && p->id == id) || (dev && p->dev == dev && !p->id)) {
			qsm_list_del(&p->node);
			qsm_pending_release(p);
		}
	}
	pthread_mutex_unlock(&q->lock);
}
