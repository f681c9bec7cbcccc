/* rdma-qsm: the memory regions and memory windows of the rdmacm fabric: on the device's PD, which
 * each keeps alive like a device_get() reference. */
#include <stdlib.h>

#include "fabric/rdmacm/rdmacm.h"

/* Memory for an object on d's PD (an MR, a window), the PD made first if need be; NULL with *err
 * set.  errno is 0 on return, for the verbs call that makes the object. */
static void *pd_obj_alloc(struct qsm_fdev *d, size_t size, int *err)
{
	void *o;

	if (!d->present) {
		*err = -ENODEV;
		return NULL;
	}
	if (!(o = calloc(1, size))) {
		*err = -ENOMEM;
		return NULL;
	}
	/* the PD: created with the first QP or MR on the device */
	if ((*err = qsm_rc_dev_get_resources(d, NULL)) < 0) {
		free(o);
		return NULL;
	}
	errno = 0;
	return o;
}

/* The verbs object was made: it holds the device's resources (counted in nmrs); else its
 * memory goes, and the PD with it if nothing else holds it: what verbs said, or fallback. */
static int pd_obj_made(struct qsm_fdev *d, void *o, bool made, int fallback)
{
	int r;

	if (made) {
		d->nmrs++;
		return 0;
	}
	r = errno_or(fallback);
	free(o);
	qsm_rc_dev_settle(d);
	return r;
}

static void pd_obj_free(struct qsm_fdev *d, void *o)
{
	free(o);
	d->nmrs--;
	qsm_rc_dev_settle(d);
}

int qsm_rc_reg_mr(struct qsm_fdev *d, void *addr, size_t len, int access, struct qsm_fmr **ret,
		  uint32_t *lkey, uint32_t *rkey)
{
	struct qsm_fmr *m;
	int ibv_access = 0, r;

	if (!d || !addr || !len || !ret || !lkey || !rkey ||
	    (access & ~(QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_REMOTE_READ |
			QSM_ACCESS_MW_BIND | QSM_ACCESS_READ_SINK)))
		return -EINVAL;
	if (access & (QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_READ_SINK))
		ibv_access |= IBV_ACCESS_LOCAL_WRITE;
	/* iWARP: an RDMA read's response is a tagged write into its sink (RFC 5040), which the
	 * device allows only with remote write */
	if ((access & QSM_ACCESS_READ_SINK) && d->verbs &&
	    d->verbs->device->transport_type == IBV_TRANSPORT_IWARP)
		ibv_access |= IBV_ACCESS_REMOTE_WRITE;
	if (access & QSM_ACCESS_REMOTE_WRITE)
		ibv_access |= IBV_ACCESS_REMOTE_WRITE;
	if (access & QSM_ACCESS_REMOTE_READ)
		ibv_access |= IBV_ACCESS_REMOTE_READ;
	if (access & QSM_ACCESS_MW_BIND)
		ibv_access |= IBV_ACCESS_MW_BIND;
	if (!(m = pd_obj_alloc(d, sizeof(*m), &r)))
		return r;
	m->mr = ibv_reg_mr(d->pd, addr, len, ibv_access);
	if ((r = pd_obj_made(d, m, m->mr != NULL, ENOMEM)) < 0)
		return r;
	m->dev = d;
	m->access = access;
	*lkey = m->mr->lkey;
	*rkey = m->mr->rkey;
	*ret = m;
	return 0;
}

/* Refused while a window is bound to the MR (IBA 10.6.7.2.6): the MR stays registered and
 * counted.  ibv_dereg_mr returns the errno; rxe says EINVAL for a bound MR (rxe_dereg_mr:
 * "mr has mw's bound"), which is the only EINVAL an MR of ours can get, so it reads EBUSY as
 * the other providers say it. */
int qsm_rc_dereg_mr(struct qsm_fmr *m)
{
	int r;

	if (!m)
		return 0;
	if ((r = ibv_dereg_mr(m->mr)) != 0) {
		r = r > 0 ? r : errno > 0 ? errno : EIO;
		return r == EINVAL ? -EBUSY : -r;
	}
	pd_obj_free(m->dev, m);
	return 0;
}

/* A type-2 window, unbound; it holds the device's resources as an MR does (counted in nmrs). */
int qsm_rc_alloc_mw(struct qsm_fdev *d, struct qsm_fmw **ret)
{
	struct qsm_fmw *w;
	int r;

	if (!d || !ret)
		return -EINVAL;
	if (!(w = pd_obj_alloc(d, sizeof(*w), &r)))
		return r;
	w->mw = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
	if ((r = pd_obj_made(d, w, w->mw != NULL, EOPNOTSUPP)) < 0)
		return r;
	w->dev = d;
	w->rkey = w->mw->rkey;
	*ret = w;
	return 0;
}

void qsm_rc_dealloc_mw(struct qsm_fmw *w)
{
	if (!w)
		return;
	ibv_dealloc_mw(w->mw);
	pd_obj_free(w->dev, w);
}
