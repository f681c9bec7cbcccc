/* rdma-qsm: shared receive queues of the device registry: one per device per class that asks,
 * made with the first QP that needs it, filled by the class's srq_low, gone with the device. */
#include <errno.h>
#include <stdlib.h>

#include "argcheck.h"
#include "registry/registry.h"

static struct qsm_srq *srq_of(struct qsm_device *d, struct qsm_fsrq *fsrq)
{
	for (struct qsm_list *n = d->srqs.next; n != &d->srqs; n = n->next) {
		struct qsm_srq *s = qsm_container_of(n, struct qsm_srq, node);

		if (s->fsrq == fsrq)
			return s;
	}
	return NULL;
}

/* Its class posts receives (srq_low), then the limit is armed again. */
static void low(struct qsm_srq *s)
{
	if (s->vt->srq_low)
		s->vt->srq_low(s);
	if (s->vt->srq.limit)
		(void)s->dev->ctx->ops->arm_srq(s->fsrq, s->vt->srq.limit);
}

/* The SRQ of class vt on device d (NULL: none attached), made now if it is the first: 0 with
 * *srq and *fsrq (both NULL when the class asks for none), or the errno of making it (the QP
 * is not made either). */
int qsm_srq_for(struct qsm_device *d, const struct qsm_vtable *vt, struct qsm_srq **srq,
		struct qsm_fsrq **fsrq)
{
	struct qsm_srq *s;
	int r;

	*fsrq = NULL;
	*srq = NULL;
	if (!vt->srq.max_wr)
		return 0;   /* (the caller looks first: the common case costs no call) */
	if (!d || !d->ctx->ops->create_srq)
		return d ? -EOPNOTSUPP : -ENODEV;
	for (struct qsm_list *n = d->srqs.next; n != &d->srqs; n = n->next) {
		s = qsm_container_of(n, struct qsm_srq, node);
		if (s->vt == vt)
			goto found;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	r = d->ctx->ops->create_srq(d->ctx->fabric, d->fdev, &d->obj,
				    &(struct qsm_fabric_srq_attr){ .max_wr = vt->srq.max_wr,
								   .max_sge = vt->srq.max_sge },
				    &s->fsrq);
	if (r < 0) {
		free(s);
		return r;
	}
	s->dev = d;
	s->vt = vt;
	qsm_list_add_tail(&d->srqs, &s->node);
	d->ctx->counters.srqs_live++;
	low(s);   /* empty: the class fills it before any QP takes from it */
found:
	*srq = s;
	*fsrq = s->fsrq;
	return 0;
}

/* The device leaves the registry: every queue on it let go of its QP already. */
void qsm_srqs_release(struct qsm_device *d)
{
	while (!qsm_list_empty(&d->srqs)) {
		struct qsm_srq *s = qsm_container_of(d->srqs.next, struct qsm_srq, node);

		qsm_list_del(&s->node);
		d->ctx->ops->destroy_srq(s->fsrq);
		d->ctx->counters.srqs_live--;
		free(s);
	}
}

/* SRQ_LIMIT of one of the device's SRQs. */
void qsm_srq_limit(struct qsm_device *d, struct qsm_fsrq *fsrq)
{
	struct qsm_srq *s = srq_of(d, fsrq);

	if (s)
		low(s);
}

struct qsm_ctx *qsm_srq_ctx(const struct qsm_srq *s)
{
	qsm_check(s, NULL);
	return s->dev->ctx;
}

const char *qsm_srq_device_name(const struct qsm_srq *s)
{
	qsm_check(s, NULL);
	return s->dev->ctx->ops->device_name(s->dev->fdev);
}
