/* rdma-qsm: the sim fabric's public API (qsm/sim.h): worlds, their fabrics, devices, stats and
 * faults, and the table of fabric ops (fabric/fabric.h) that a ctx runs the sim through. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "argcheck.h"
#include "world.h"

static void sim_destroy(struct qsm_fabric *base)
{
	struct sim_fabric *f;
	struct qsm_sim *sim;

	if (!base)
		return;
	f = to_fabric(base);
	sim = f->sim;
	/* Ids left behind are the runtime's bug; freeing them as destroy_id would keeps peers,
	 * devices and counts consistent, and ids_leaked tells the test. */
	while (!qsm_list_empty(&f->ids)) {
		sim->st.ids_leaked++;
		sim_destroy_id(fid_of(qsm_container_of(f->ids.next, struct sim_id, node)));
	}
	sim_fabric_drop_events(f);
	close(f->efd);
	qsm_list_del(&f->node);
	sim->nfabrics--;
	free(f);
	if (sim->free_pending && !sim->nfabrics)
		qsm_sim_free(sim);
}

static const struct qsm_fabric_ops sim_ops = {
	.name = "sim",
	.destroy = sim_destroy,
	.fd = sim_fd,
	.get_event = sim_get_event,
	.backlog = sim_backlog,
	.create_id = sim_create_id,
	.set_owner = sim_set_owner,
	.handoff = sim_handoff,
	.adopt = sim_adopt,
	.destroy_id = sim_destroy_id,
	.bind = sim_bind,
	.listen = sim_listen,
	.resolve_addr = sim_resolve_addr,
	.resolve_route = sim_resolve_route,
	.create_qp = sim_create_qp,
	.destroy_qp = sim_destroy_qp,
	.connect = sim_connect,
	.accept = sim_accept,
	.reject = sim_reject,
	.disconnect = sim_disconnect,
	.drain = sim_drain,
	.probe = sim_probe,
	.flush_qp = sim_flush_qp,
	.read_depth = sim_read_depth,
	.id_device = sim_id_device,
	.device_get = sim_device_get,
	.device_put = sim_device_put,
	.device_name = sim_device_name,
	.device_addr = sim_device_addr,
	.id_src_addr = sim_id_src_addr,
	.reg_mr = sim_reg_mr,
	.dereg_mr = sim_dereg_mr,
	.post_send = sim_post_send,
	.post_recv = sim_post_recv,
	.create_srq = sim_create_srq,
	.destroy_srq = sim_destroy_srq,
	.post_srq_recv = sim_post_srq_recv,
	.arm_srq = sim_arm_srq,
	.alloc_mw = sim_alloc_mw,
	.dealloc_mw = sim_dealloc_mw,
	.bind_mw = sim_bind_mw,
};

int qsm_sim_new(struct qsm_sim **ret)
{
	struct qsm_sim *sim;

	if (!ret)
		return -EINVAL;
	sim = sim_zalloc(sizeof(*sim));
	if (!sim)
		return -ENOMEM;
	qsm_list_init(&sim->devices);
	qsm_list_init(&sim->fabrics);
	qsm_list_init(&sim->held);
	sim->next_port = PORT_FIRST;
	*ret = sim;
	return 0;
}

void qsm_sim_free(struct qsm_sim *sim)
{
	struct qsm_list *pos, *tmp;

	if (!sim)
		return;
	/* A caller's bug (destroy every fabric, by qsm_ctx_free(), first), loud in a debug build;
	 * the world then goes with its last fabric, so nothing dangles. */
	if (!qsm_checked(sim->nfabrics == 0)) {
		sim->free_pending = true;
		return;
	}
	/* No fabric, so no id, no queued and no held event is left: only devices, and
	 * MRs never deregistered (they belong to a device, not to a fabric). */
	qsm_list_each(pos, tmp, &sim->devices) {
		struct sim_device *d = qsm_container_of(pos, struct sim_device, node);
		struct qsm_list *mpos, *mtmp;

		qsm_list_each(mpos, mtmp, &d->mrs)
			free(qsm_container_of(mpos, struct sim_mr, node));
		free(d);
	}
	free(sim);
}

int qsm_sim_fabric_new(struct qsm_sim *sim, struct qsm_fabric **ret)
{
	struct sim_fabric *f;

	if (!sim || !ret || sim->free_pending)
		return -EINVAL;
	f = sim_zalloc(sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->efd < 0) {
		int r = -errno;

		free(f);
		return r;
	}
	f->base.ops = &sim_ops;
	f->sim = sim;
	qsm_list_init(&f->ids);
	qsm_list_init(&f->queue);
	qsm_list_add_tail(&sim->fabrics, &f->node);
	sim->nfabrics++;
	*ret = &f->base;
	return 0;
}

int qsm_sim_device_add(struct qsm_sim *sim, const char *name, const char *addr)
{
	struct sockaddr_storage ss;
	struct sim_device *d;
	struct qsm_list *pos, *tmp;

	if (!sim || !name || !addr || !*name || strlen(name) >= DEV_NAME_MAX)
		return -EINVAL;
	if (sim_addr_parse(addr, &ss) < 0 || sim_addr_is_any(&ss))
		return -EINVAL;
	d = sim_device_by_name(sim, name);
	if (d && d->state == QSM_SIM_DEVICE_UP)
		return -EEXIST;
	if (d && d->state == QSM_SIM_DEVICE_REMOVING)
		return -EBUSY;
	if (sim_device_serving(sim, &ss))
		return -EADDRINUSE;
	if (!d) {
		d = sim_zalloc(sizeof(*d));
		if (!d)
			return -ENOMEM;
		d->sim = sim;
		qsm_list_init(&d->mrs);
		qsm_list_init(&d->mws);
		strcpy(d->name, name);
		qsm_list_add_tail(&sim->devices, &d->node);
	}
	d->addr = ss;
	d->state = QSM_SIM_DEVICE_UP;
	qsm_list_each(pos, tmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(pos, struct sim_fabric, node);

		sim_post(&(struct post){ .fab = f, .dev = d, .event = QSM_EV_DEVICE_ADDED });
	}
	return 0;
}

int qsm_sim_device_remove(struct qsm_sim *sim, const char *name)
{
	struct sim_device *d;

	if (!sim || !name)
		return -EINVAL;
	d = sim_device_by_name(sim, name);
	if (!d)
		return -ENOENT;
	if (!device_up(d))
		return -EALREADY;
	d->state = QSM_SIM_DEVICE_REMOVING;
	sim_cm_device_removed(sim, d);
	sim_device_settle(d);
	return 0;
}

int qsm_sim_device_state(struct qsm_sim *sim, const char *name)
{
	struct sim_device *d;

	if (!sim || !name)
		return -EINVAL;
	d = sim_device_by_name(sim, name);
	return d ? (int)d->state : -ENOENT;
}

void qsm_sim_get_stats(struct qsm_sim *sim, struct qsm_sim_stats *st)
{
	if (!st)
		return;
	if (!sim) {
		memset(st, 0, sizeof(*st));
		return;
	}
	*st = sim->st;
}

int qsm_sim_inject(struct qsm_sim *sim, enum qsm_sim_fault f, unsigned count)
{
	if (!sim || (unsigned)f >= QSM_SIM_FAULT_COUNT)
		return -EINVAL;
	sim->faults[f] = count;
	return 0;
}

int qsm_sim_release(struct qsm_sim *sim)
{
	if (!sim)
		return -EINVAL;
	return sim_held_release(sim);
}

static int qp_id(struct qsm_sim *sim, struct qsm_fabric *base, void *owner, struct sim_id **ret)
{
	struct sim_fabric *f;
	struct qsm_list *pos, *tmp;

	if (!sim || !base)
		return -EINVAL;
	f = sim_world_fabric(sim, base);
	if (!f)
		return -EINVAL;
	qsm_list_each(pos, tmp, &f->ids) {
		struct sim_id *id = qsm_container_of(pos, struct sim_id, node);

		if (id->owner == owner && id->qp != SIM_QP_NONE) {
			*ret = id;
			return 0;
		}
	}
	return -ENOENT;
}

int qsm_sim_partition(struct qsm_sim *sim, struct qsm_fabric *f, void *owner)
{
	struct sim_id *id;
	int r = qp_id(sim, f, owner, &id);

	return r < 0 ? r : sim_partition(id);
}

int qsm_sim_qp_event(struct qsm_sim *sim, struct qsm_fabric *f, void *owner, int event)
{
	struct sim_id *id;
	int r;

	if (event != QSM_EV_COMM_EST && event != QSM_EV_SQ_DRAINED && event != QSM_EV_PATH_MIG &&
	    event != QSM_EV_PATH_MIG_ERR)
		return -EINVAL;
	if ((r = qp_id(sim, f, owner, &id)) < 0)
		return r;
	sim_post_simple(id, event, 0);
	return 0;
}

/* A device of the world that is up: 0 and *ret; -EINVAL, -ENOENT, or -ENODEV (removed). */
static int up_device(struct qsm_sim *sim, const char *name, struct sim_device **ret)
{
	if (!sim || !name)
		return -EINVAL;
	*ret = sim_device_by_name(sim, name);
	if (!*ret)
		return -ENOENT;
	return device_up(*ret) ? 0 : -ENODEV;
}

int qsm_sim_port_event(struct qsm_sim *sim, const char *name, int event)
{
	struct sim_device *d;
	struct qsm_list *fpos, *ftmp, *pos, *tmp;

	int r;

	if (event < QSM_EV_PORT_ERR || event > QSM_EV_CLIENT_REREGISTER)
		return -EINVAL;
	if ((r = up_device(sim, name, &d)) < 0)
		return r;
	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		if (event != QSM_EV_PORT_ERR) {
			sim_post(&(struct post){ .fab = f, .dev = d, .event = event, .status = 1 });
			continue;
		}
		/* to every QP on the device's (one) port, as the rdmacm fabric expands it */
		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *id = qsm_container_of(pos, struct sim_id, node);

			if (id->dev == d && id->qp != SIM_QP_NONE)
				sim_post_simple(id, QSM_EV_PORT_ERR, 1);
		}
	}
	return 0;
}

int qsm_sim_addr_change(struct qsm_sim *sim, const char *name)
{
	struct sim_device *d;
	struct qsm_list *fpos, *ftmp, *pos, *tmp;

	int r;

	if ((r = up_device(sim, name, &d)) < 0)
		return r;
	qsm_list_each(fpos, ftmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(fpos, struct sim_fabric, node);

		qsm_list_each(pos, tmp, &f->ids) {
			struct sim_id *id = qsm_container_of(pos, struct sim_id, node);

			if (id->dev == d)
				sim_post_simple(id, QSM_EV_ADDR_CHANGE, 0);
		}
	}
	return 0;
}

int qsm_sim_qp_fatal(struct qsm_sim *sim, struct qsm_fabric *f, void *owner)
{
	struct sim_id *id;
	int r = qp_id(sim, f, owner, &id);

	if (r < 0)
		return r;
	sim_qp_fatal(id);
	return 0;
}

/* What the hardware reports for each QP the sim models (qp_id() finds none of SIM_QP_NONE). */
static const enum qsm_qp_state qp_state_reported[] = {
	[SIM_QP_NONE] = QSM_QP_RESET,
	[SIM_QP_INIT] = QSM_QP_INIT,
	[SIM_QP_RTS] = QSM_QP_RTS,
	[SIM_QP_ERR] = QSM_QP_ERR,
};

int qsm_sim_qp_state(struct qsm_sim *sim, struct qsm_fabric *f, void *owner)
{
	struct sim_id *id;
	int r = qp_id(sim, f, owner, &id);

	return r < 0 ? r : (int)qp_state_reported[id->qp];
}
