/* rdma-qsm: the memory regions and memory windows of the rdmacm fabric: on the device's PD, which
 * each keeps alive like a device_get() reference. */
#include <stdlib.h>

#include "fabric/rdmacm/rdmacm.h"

int qsm_rc_reg_mr(struct qsm_fdev *d, void *addr, size_t len, int access, struct qsm_fmr **ret,
		  uint32_t *lkey, uint32_t *rkey)
{
	struct qsm_fmr *m;
	int ibv_access = 0, r;

	if (!d || !addr || !len || !ret || !lkey || !rkey ||
	    (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ |
			QSM_ACCESS_MW_BIND)))
		return -EINVAL;
	if (!d->present)
		return -ENODEV;
	if (access & QSM_ACCESS_LOCAL_WRITE)
		ibv_access |= IBV_ACCESS_LOCAL_WRITE;
	if (access & QSM_ACCESS_REMOTE_WRITE)
		ibv_access |= IBV_ACCESS_REMOTE_WRITE;
	if (access & QSM_ACCESS_REMOTE_READ)
		ibv_access |= IBV_ACCESS_REMOTE_READ;
	if (access & QSM_ACCESS_MW_BIND)
		ibv_access |= IBV_ACCESS_MW_BIND;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	/* the PD: created with the first QP or MR on the device */
	r = qsm_rc_dev_get_resources(d, NULL);
	if (r < 0) {
		free(m);
		return r;
	}
	errno = 0;
	m->mr = ibv_reg_mr(d->pd, addr, len, ibv_access);
	if (!m->mr) {
		r = errno_or(ENOMEM);
		free(m);
		qsm_rc_dev_settle(d);
		return r;
	}
	m->dev = d;
	m->access = access;
	d->nmrs++;
	*lkey = m->mr->lkey;
	*rkey = m->mr->rkey;
	*ret = m;
	return 0;
}

void qsm_rc_dereg_mr(struct qsm_fmr *m)
{
	struct qsm_fdev *d;

	if (!m)
		return;
	d = m->dev;
	ibv_dereg_mr(m->mr);
	free(m);
	d->nmrs--;
	qsm_rc_dev_settle(d);
}

/* A type-2 window, unbound; it holds the device's resources as an MR does (counted in nmrs). */
int qsm_rc_alloc_mw(struct qsm_fdev *d, struct qsm_fmw **ret)
{
	struct qsm_fmw *w;
	int r;

	if (!d || !ret)
		return -EINVAL;
	if (!d->present)
		return -ENODEV;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	if ((r = qsm_rc_dev_get_resources(d, NULL)) < 0) {
		free(w);
		return r;
	}
	errno = 0;
	w->mw = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
	if (!w->mw) {
		r = errno_or(EOPNOTSUPP);
		free(w);
		qsm_rc_dev_settle(d);
		return r;
	}
	w->dev = d;
	w->rkey = w->mw->rkey;
	d->nmrs++;
	*ret = w;
	return 0;
}

void qsm_rc_dealloc_mw(struct qsm_fmw *w)
{
	struct qsm_fdev *d;

	if (!w)
		return;
	d = w->dev;
	ibv_dealloc_mw(w->mw);
	free(w);
	d->nmrs--;
	qsm_rc_dev_settle(d);
}
