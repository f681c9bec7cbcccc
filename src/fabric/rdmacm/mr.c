/* rdma-qsm: the memory regions of the rdmacm fabric: registered with the device's PD, which each
 * keeps alive like a device_get() reference. */
#include <stdlib.h>

#include "fabric/rdmacm/rdmacm.h"

/* A registered memory region: holds its device's resources (PD) like a device_get(). */
struct qsm_fmr {
	struct ibv_mr *mr;
	struct qsm_fdev *dev;
};

int qsm_rc_reg_mr(struct qsm_fdev *d, void *addr, size_t len, int access, struct qsm_fmr **ret,
		  uint32_t *lkey, uint32_t *rkey)
{
	struct qsm_fmr *m;
	int ibv_access = 0, r;

	if (!d || !addr || !len || !ret || !lkey || !rkey ||
	    (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ)))
		return -EINVAL;
	if (!d->present)
		return -ENODEV;
	if (access & QSM_ACCESS_LOCAL_WRITE)
		ibv_access |= IBV_ACCESS_LOCAL_WRITE;
	if (access & QSM_ACCESS_REMOTE_WRITE)
		ibv_access |= IBV_ACCESS_REMOTE_WRITE;
	if (access & QSM_ACCESS_REMOTE_READ)
		ibv_access |= IBV_ACCESS_REMOTE_READ;
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
