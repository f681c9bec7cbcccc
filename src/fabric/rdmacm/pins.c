/* rdma-qsm: the verbs contexts of the rdmacm fabric, process-wide as librdmacm's are: each pinned
 * with an id of ours and closed by us once its device is removed (librdmacm 44 never would). */
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/rdmacm/rdmacm.h"

/*
 * librdmacm opens one ibv_context per device for the whole process and (rdma-core 44)
 * closes it only when a later rdma_get_devices() or address lookup finds the device gone
 * from a *non-empty* device list and nobody references it.  When the removed device was
 * the only one, that never happens, and soft-RoCE's unregister waits for the context
 * forever.  So the backend pins every context it sees with a bound id of its own that it
 * never destroys (librdmacm's reference count never drops to 0, so librdmacm never closes
 * the context itself), counts its own users of the context across every fabric of the
 * process, and closes the context itself once the device is removed and the last of
 * those users is gone.
 */
struct vctx {
	struct qsm_list node;            /* in vctxs */
	struct ibv_context *verbs;
	struct rdma_cm_id *pin;          /* NULL: could not pin; then librdmacm closes it (or not) */
	unsigned users;                  /* ids with this context + fabric devices holding a PD/CQ */
	bool removed;
	struct qsm_list fdevs;           /* qsm_fdev.vnode: devices of every fabric with a PD/CQ here */
};

static pthread_mutex_t vctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qsm_list vctxs = { &vctxs, &vctxs };
static struct rdma_event_channel *pin_channel;   /* pins only ever get DEVICE_REMOVAL */

int qsm_rc_pins_open(void)
{
	int fd;

	pthread_mutex_lock(&vctx_lock);
	if (!pin_channel) {
		pin_channel = rdma_create_event_channel();
		if (pin_channel && set_nonblock(pin_channel->fd) < 0) {
			rdma_destroy_event_channel(pin_channel);
			pin_channel = NULL;
		}
	}
	fd = pin_channel ? pin_channel->fd : errno_or(ENODEV);
	pthread_mutex_unlock(&vctx_lock);
	return fd;
}

static struct vctx *vctx_find(struct ibv_context *verbs)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &vctxs) {
		struct vctx *v = qsm_container_of(pos, struct vctx, node);

		if (v->verbs == verbs)
			return v;
	}
	return NULL;
}

/* A bound id that keeps librdmacm's reference on the context: bound to the local
 * address of `via`, an id that has just shown us the context. */
static struct rdma_cm_id *pin_context(struct ibv_context *verbs, struct rdma_cm_id *via)
{
	struct sockaddr_storage ss;
	struct sockaddr *sa;
	struct rdma_cm_id *pin;

	if (!via)   /* reg_mr before any id of ours showed the context: unpinned */
		return NULL;
	sa = rdma_get_local_addr(via);
	if (sa->sa_family == AF_INET) {
		memcpy(&ss, sa, sizeof(struct sockaddr_in));
		((struct sockaddr_in *)(void *)&ss)->sin_port = 0;
	} else if (sa->sa_family == AF_INET6) {
		memcpy(&ss, sa, sizeof(struct sockaddr_in6));
		((struct sockaddr_in6 *)(void *)&ss)->sin6_port = 0;
	} else {
		return NULL;
	}
	if (!pin_channel || rdma_create_id(pin_channel, &pin, NULL, RDMA_PS_TCP) < 0)
		return NULL;
	if (rdma_bind_addr(pin, (struct sockaddr *)&ss) < 0 || pin->verbs != verbs) {
		rdma_destroy_id(pin);
		return NULL;
	}
	return pin;
}

/* Called with vctx_lock held. */
static void vctx_settle(struct vctx *v)
{
	if (!v->removed || v->users)
		return;
	qsm_list_del(&v->node);
	/* Pinned: librdmacm will never touch the context again (its entry stays referenced and
	 * is marked dead at its next device-list sync), so closing it here is ours to do. */
	if (v->pin)
		ibv_close_device(v->verbs);
	free(v);
}

struct vctx *qsm_rc_vctx_get(struct ibv_context *verbs, struct rdma_cm_id *via)
{
	struct vctx *v;

	pthread_mutex_lock(&vctx_lock);
	v = vctx_find(verbs);
	if (!v) {
		v = calloc(1, sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&vctx_lock);
			return NULL;
		}
		v->verbs = verbs;
		qsm_list_init(&v->fdevs);
		v->pin = pin_context(verbs, via);
		qsm_list_add_tail(&vctxs, &v->node);
	}
	v->users++;
	pthread_mutex_unlock(&vctx_lock);
	return v;
}

void qsm_rc_vctx_put(struct vctx *v)
{
	if (!v)
		return;
	pthread_mutex_lock(&vctx_lock);
	v->users--;
	vctx_settle(v);
	pthread_mutex_unlock(&vctx_lock);
}

/* A pin heard DEVICE_REMOVAL: the context's device is going, even if no id of ours is on it. */
void qsm_rc_pins_take_events(void)
{
	struct rdma_cm_event *ce;

	while (pin_channel && rdma_get_cm_event(pin_channel, &ce) == 0) {
		struct rdma_cm_id *pin = ce->id;
		bool removal = ce->event == RDMA_CM_EVENT_DEVICE_REMOVAL;
		struct qsm_list *pos, *tmp;

		rdma_ack_cm_event(ce);
		if (!removal)
			continue;
		pthread_mutex_lock(&vctx_lock);
		/* by the pin, never by the context pointer: a closed context's may be reused */
		qsm_list_each(pos, tmp, &vctxs) {
			struct vctx *v = qsm_container_of(pos, struct vctx, node);

			if (v->pin == pin) {
				v->removed = true;
				vctx_settle(v);
				break;
			}
		}
		pthread_mutex_unlock(&vctx_lock);
	}
}

void qsm_rc_vctx_removed(struct ibv_context *verbs)
{
	struct vctx *v;

	pthread_mutex_lock(&vctx_lock);
	v = vctx_find(verbs);
	if (v) {
		v->removed = true;
		vctx_settle(v);
	}
	pthread_mutex_unlock(&vctx_lock);
}

void qsm_rc_vctx_link(struct vctx *v, struct qsm_list *vnode)
{
	pthread_mutex_lock(&vctx_lock);
	qsm_list_add_tail(&v->fdevs, vnode);
	pthread_mutex_unlock(&vctx_lock);
}

void qsm_rc_vctx_unlink(struct qsm_list *vnode)
{
	pthread_mutex_lock(&vctx_lock);
	qsm_list_del(vnode);
	pthread_mutex_unlock(&vctx_lock);
}

void qsm_rc_vctx_each_link(struct ibv_context *verbs, void (*fn)(struct qsm_list *vnode, const void *arg),
			   const void *arg)
{
	struct vctx *v;
	struct qsm_list *pos, *tmp;

	pthread_mutex_lock(&vctx_lock);
	v = vctx_find(verbs);
	if (v)
		qsm_list_each(pos, tmp, &v->fdevs)
			fn(pos, arg);
	pthread_mutex_unlock(&vctx_lock);
}
