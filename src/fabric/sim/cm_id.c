/* rdma-qsm: the sim fabric's CM ids: creating them, the world's port space and bind, listen and
 * the listener a REQ reaches, and address and route resolution on the one loopback network. */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>

#include "addr.h"
#include "world.h"

/* ---- port space: the kernel's cma_check_port without SO_REUSEADDR ---- */

static int port_conflict(struct qsm_sim *sim, const struct sockaddr_storage *ss)
{
	struct qsm_list *fpos, *ftmp, *pos, *tmp;

	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *o = qsm_container_of(pos, struct sim_id, node);

			if (!o->holds_port || sim_addr_port(&o->src) != sim_addr_port(ss))
				continue;
			if (sim_addr_is_any(&o->src) || sim_addr_is_any(ss))
				return -EADDRNOTAVAIL;
			if (sim_addr_same_ip(&o->src, ss))
				return -EADDRINUSE;
		}
	}
	return 0;
}

static bool port_used(struct qsm_sim *sim, unsigned port)
{
	struct qsm_list *fpos, *ftmp, *pos, *tmp;

	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *o = qsm_container_of(pos, struct sim_id, node);

			if (o->holds_port && sim_addr_port(&o->src) == port)
				return true;
		}
	}
	return false;
}

/* Ephemeral ports go round in order, never random, so that runs repeat. */
static int port_pick(struct qsm_sim *sim, uint16_t *ret)
{
	for (unsigned n = 0; n <= PORT_LAST - PORT_FIRST; n++) {
		unsigned p = sim->next_port;

		sim->next_port = p == PORT_LAST ? PORT_FIRST : p + 1;
		if (!port_used(sim, p)) {
			*ret = (uint16_t)p;
			return 0;
		}
	}
	return -EADDRNOTAVAIL;
}

/* ---- ids ---- */

struct sim_id *sim_id_alloc(struct sim_fabric *f, void *owner)
{
	struct sim_id *id = sim_zalloc(sizeof(*id));

	if (!id)
		return NULL;
	id->fab = f;
	id->owner = owner;
	id->state = ID_IDLE;
	qsm_list_init(&id->recvs);
	qsm_list_add_tail(&f->ids, &id->node);
	f->sim->st.ids++;
	return id;
}

void sim_id_set_device(struct sim_id *id, struct sim_device *d)
{
	assert(!id->dev);
	id->dev = d;
	d->nids++;
}

/* Bind checks everything before it changes anything, so a failed bind has no effect. */
static int id_bind(struct sim_id *id, const struct sockaddr *sa)
{
	struct qsm_sim *sim = id->fab->sim;
	struct sockaddr_storage ss;
	struct sim_device *d = NULL;
	uint16_t port;
	int r;

	r = qsm_sockaddr_copy(&ss, sa);
	if (r < 0)
		return r;
	if (!sim_addr_is_any(&ss)) {
		d = sim_device_serving(sim, &ss);
		if (!d)
			return -EADDRNOTAVAIL;
	}
	if (sim_addr_port(&ss) == 0) {
		r = port_pick(sim, &port);
		if (r < 0)
			return r;
		sim_addr_set_port(&ss, port);
	} else {
		r = port_conflict(sim, &ss);
		if (r < 0)
			return r;
	}
	id->src = ss;
	id->has_src = true;
	id->holds_port = true;
	id->state = ID_BOUND;
	if (d)
		sim_id_set_device(id, d);
	return 0;
}

int sim_create_id(struct qsm_fabric *base, void *owner, struct qsm_fid **ret)
{
	struct sim_fabric *f;
	struct sim_id *id;

	if (!base || !ret)
		return -EINVAL;
	f = to_fabric(base);
	if (sim_fault_take(f->sim, QSM_SIM_FAULT_ENOMEM))
		return -ENOMEM;
	id = sim_id_alloc(f, owner);
	if (!id)
		return -ENOMEM;
	*ret = fid_of(id);
	return 0;
}

void sim_set_owner(struct qsm_fid *fid, void *owner)
{
	if (fid)
		to_id(fid)->owner = owner;
}

/* A request's id to another fabric of the same world: its events (queued, held, to come)
 * are `to`'s from now on.  The sim runs every fabric on one thread, so nothing needs holding
 * until the adopt: the runtime takes its inbox before its fabric. */
int sim_handoff(struct qsm_fid *fid, struct qsm_fabric *to_base)
{
	struct sim_id *id = to_id(fid);
	struct sim_fabric *to = to_base ? to_fabric(to_base) : NULL;

	if (!id || !to || to->sim != id->fab->sim || id->state != ID_REQ_RCVD)
		return -EINVAL;
	if (to == id->fab)
		return 0;
	sim_events_move(id, to);
	qsm_list_del(&id->node);
	qsm_list_add_tail(&to->ids, &id->node);
	id->fab = to;
	id->owner = NULL;
	return 0;
}

void sim_adopt(struct qsm_fabric *f, struct qsm_fid *fid)
{
	(void)f;
	(void)fid;
}

int sim_bind(struct qsm_fid *fid, const struct sockaddr *addr)
{
	struct sim_id *id = to_id(fid);

	if (!id || !addr)
		return -EINVAL;
	if (id->state != ID_IDLE)
		return -EINVAL;
	return id_bind(id, addr);
}

int sim_listen(struct qsm_fid *fid, int backlog)
{
	struct sim_id *id = to_id(fid);

	(void)backlog;   /* nothing queues up in the sim: requests are reported at once */
	if (!id)
		return -EINVAL;
	if (id->state != ID_BOUND)
		return -EINVAL;
	if (id->dev && !device_up(id->dev))
		return -ENODEV;
	id->state = ID_LISTEN;
	return 0;
}

/* ---- the listener a REQ reaches ---- */

static bool wildcard_takes(const struct sim_id *l, const struct sockaddr_storage *dst)
{
	/* A v6 wildcard is dual stack (bindv6only = 0), a v4 one is not. */
	return l->src.ss_family == dst->ss_family || l->src.ss_family == AF_INET6;
}

/*
 * The listening id for `dst`, searched in every fabric of the world; a listener on
 * the exact address wins over a wildcard one.  With none, *reason is the REJ the
 * passive CM sends: no listener on the port at all is an unknown service; a
 * listener on the port but not on this address is turned down by rdma_cm itself.
 */
struct sim_id *sim_listener_for(struct qsm_sim *sim, const struct sockaddr_storage *dst, int *reason)
{
	struct qsm_list *fpos, *ftmp, *pos, *tmp;
	struct sim_id *wild = NULL;
	bool port_seen = false;

	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *l = qsm_container_of(pos, struct sim_id, node);

			if (l->state != ID_LISTEN || sim_addr_port(&l->src) != sim_addr_port(dst))
				continue;
			port_seen = true;
			if (sim_addr_is_any(&l->src)) {
				if (!wild && wildcard_takes(l, dst))
					wild = l;
			} else if (sim_addr_same_ip(&l->src, dst) && device_up(l->dev)) {
				return l;
			}
		}
	}
	if (wild)
		return wild;
	*reason = port_seen ? QSM_SIM_REJ_CONSUMER : QSM_SIM_REJ_INVALID_SERVICE_ID;
	return NULL;
}

/* ---- resolution ---- */

/*
 * The world is one loopback network: a destination is reachable while an UP device
 * serves it.  The id goes on the device it was bound to, or else on the device
 * that serves the destination.
 */
int sim_resolve_addr(struct qsm_fid *fid, const struct sockaddr *src,
		     const struct sockaddr *dst, int timeout_ms)
{
	struct sim_id *id = to_id(fid);
	struct qsm_sim *sim;
	struct sockaddr_storage daddr;
	struct sim_device *target, *via;
	int r;

	(void)timeout_ms;   /* no time passes in the sim */
	if (!id || !dst)
		return -EINVAL;
	sim = id->fab->sim;
	if (id->state != ID_IDLE && id->state != ID_BOUND)
		return -EINVAL;
	r = qsm_sockaddr_copy(&daddr, dst);
	if (r < 0)
		return r;
	if (id->state == ID_IDLE) {
		/* src only counts for an unbound id (resolve_prepare_src); no src binds to the wildcard. */
		struct sockaddr_storage any = { .ss_family = daddr.ss_family };

		if (src && src->sa_family != daddr.ss_family)
			return -EINVAL;
		r = id_bind(id, src ? src : (const struct sockaddr *)&any);
		if (r < 0)
			return r;
	} else if (id->src.ss_family != daddr.ss_family) {
		return -EINVAL;
	}

	id->dst = daddr;
	target = sim_device_serving(sim, &daddr);
	via = id->dev ? id->dev : target;
	if (sim_fault_take(sim, QSM_SIM_FAULT_ADDR_ERROR) || !target || !device_up(via)) {
		sim_post_simple(id, QSM_EV_ADDR_ERROR, -EHOSTUNREACH);
		return 0;
	}
	if (!id->dev)
		sim_id_set_device(id, via);
	sim_addr_set_ip(&id->src, &via->addr);
	id->state = ID_ADDR_RESOLVED;
	sim_post_simple(id, QSM_EV_ADDR_RESOLVED, 0);
	return 0;
}

int sim_resolve_route(struct qsm_fid *fid, int timeout_ms)
{
	struct sim_id *id = to_id(fid);

	(void)timeout_ms;
	if (!id)
		return -EINVAL;
	if (id->state != ID_ADDR_RESOLVED)
		return -EINVAL;
	if (!device_up(id->dev))
		return -ENODEV;
	if (sim_fault_take(id->fab->sim, QSM_SIM_FAULT_ROUTE_ERROR)) {
		sim_post_simple(id, QSM_EV_ROUTE_ERROR, -ETIMEDOUT);
		return 0;
	}
	id->state = ID_ROUTE_RESOLVED;
	sim_post_simple(id, QSM_EV_ROUTE_RESOLVED, 0);
	return 0;
}

/* ---- what an id is on ---- */

/* Every sim device offers QSM_SIM_READ_DEPTH both ways: a passive id knows it from its request
 * on, an active one once established. */
int sim_read_depth(struct qsm_fid *fid)
{
	struct sim_id *id = to_id(fid);

	if (!id)
		return -EINVAL;
	switch (id->state) {
	case ID_REQ_RCVD:
	case ID_ESTABLISHED:
	case ID_DISCONNECTED:
		return QSM_SIM_READ_DEPTH;
	default:
		return -ENOTCONN;
	}
}

struct qsm_fdev *sim_id_device(struct qsm_fid *fid)
{
	struct sim_id *id = to_id(fid);

	return id && id->dev ? fdev_of(id->dev) : NULL;
}

int sim_id_src_addr(struct qsm_fid *fid, struct sockaddr_storage *ss)
{
	struct sim_id *id = to_id(fid);

	if (!id || !ss)
		return -EINVAL;
	if (!id->has_src)
		return -ENOENT;
	*ss = id->src;
	return 0;
}
