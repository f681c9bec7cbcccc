/* rdma-qsm: the sim fabric's shared receive queues: receives posted to one device-wide queue,
 * taken in order by whichever of its QPs a SEND lands on, and the limit event. */
#include <errno.h>
#include <stdlib.h>

#include "world.h"

static struct sim_srq *to_srq(struct qsm_fsrq *fs)
{
	return (struct sim_srq *)(void *)fs;
}

int sim_create_srq(struct qsm_fabric *base, struct qsm_fdev *fdev, void *owner,
		   const struct qsm_fabric_srq_attr *attr, struct qsm_fsrq **ret)
{
	struct sim_device *d = to_dev(fdev);
	struct sim_srq *s;

	if (!base || !d || !attr || !ret || !attr->max_wr)
		return -EINVAL;
	if (!device_up(d))
		return -ENODEV;
	if (sim_fault_take(d->sim, QSM_SIM_FAULT_ENOMEM))
		return -ENOMEM;
	s = sim_zalloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->fab = to_fabric(base);
	s->dev = d;
	s->owner = owner;
	s->cap = *attr;
	qsm_list_init(&s->recvs);
	d->nsrqs++;
	d->sim->st.srqs++;
	*ret = (struct qsm_fsrq *)(void *)s;
	return 0;
}

/* Its QPs are gone (the contract); what is still posted is discarded, with no completion. */
void sim_destroy_srq(struct qsm_fsrq *fs)
{
	struct sim_srq *s = to_srq(fs);
	struct sim_device *d;

	if (!s)
		return;
	d = s->dev;
	while (!qsm_list_empty(&s->recvs)) {
		struct sim_recv *r = qsm_container_of(s->recvs.next, struct sim_recv, node);

		qsm_list_del(&r->node);
		free(r);
	}
	sim_drop_srq_events(s);
	d->nsrqs--;
	d->sim->st.srqs--;
	free(s);
	sim_device_settle(d);
}

int sim_post_srq_recv(struct qsm_fsrq *fs, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
		      int num_sge)
{
	struct sim_srq *s = to_srq(fs);
	struct sim_recv *r;

	if (!s || sim_sges_over(num_sge, s->cap.max_sge))
		return -EINVAL;   /* the device's own check: its max_sge */
	if (s->held >= s->cap.max_wr)
		return -ENOBUFS;
	if (!(r = sim_recv_new(wr_id, sg_list, num_sge)))
		return -ENOMEM;
	qsm_list_add_tail(&s->recvs, &r->node);
	s->queued++;
	s->held++;
	return 0;
}

int sim_arm_srq(struct qsm_fsrq *fs, uint32_t limit)
{
	struct sim_srq *s = to_srq(fs);

	if (!s || limit > s->cap.max_wr)
		return -EINVAL;
	s->limit = limit;
	return 0;
}

struct sim_recv *sim_srq_peek(struct sim_srq *s)
{
	return qsm_list_empty(&s->recvs) ? NULL : qsm_container_of(s->recvs.next, struct sim_recv, node);
}

/* As verbs: the event once fewer than `limit` are posted, and the limit disarmed. */
void sim_srq_consumed(struct sim_srq *s)
{
	s->queued--;
	if (s->limit && s->queued < s->limit) {
		s->limit = 0;
		sim_post(&(struct post){ .fab = s->fab, .srq = s, .event = QSM_EV_SRQ_LIMIT });
	}
}
