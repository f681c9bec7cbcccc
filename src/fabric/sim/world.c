/* rdma-qsm: the sim fabric's world: the addresses it serves, its devices and their lifetime
 * (UP, REMOVING, GONE), and the fabrics attached to it. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "world.h"

/* ---- memory ---- */

_Thread_local volatile unsigned qsm_sim_allocating;

void *sim_zalloc(size_t n)
{
	void *p;

	qsm_sim_allocating++;
	p = calloc(1, n);
	qsm_sim_allocating--;
	return p;
}

/* ---- addresses (addr.h copies them in) ---- */

static const void *addr_ip(const struct sockaddr_storage *ss, size_t *len)
{
	if (ss->ss_family == AF_INET) {
		*len = sizeof(struct in_addr);
		return &((const struct sockaddr_in *)(const void *)ss)->sin_addr;
	}
	*len = sizeof(struct in6_addr);
	return &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr;
}

bool sim_addr_same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	size_t la, lb;
	const void *ia = addr_ip(a, &la), *ib = addr_ip(b, &lb);

	return a->ss_family == b->ss_family && !memcmp(ia, ib, la);
}

bool sim_addr_is_any(const struct sockaddr_storage *ss)
{
	static const uint8_t zero[sizeof(struct in6_addr)];
	size_t len;
	const void *ip = addr_ip(ss, &len);

	return !memcmp(ip, zero, len);
}

uint16_t sim_addr_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)(const void *)ss)->sin6_port);
}

void sim_addr_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)(void *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)(void *)ss)->sin6_port = htons(port);
}

/* The IP of `from` with the port of `to`: what a resolved or accepted id's source becomes. */
void sim_addr_set_ip(struct sockaddr_storage *to, const struct sockaddr_storage *from)
{
	uint16_t port = sim_addr_port(to);

	*to = *from;
	sim_addr_set_port(to, port);
}

int sim_addr_parse(const char *text, struct sockaddr_storage *ss)
{
	struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		return 0;
	}
	return -EINVAL;
}

/* ---- devices ---- */

struct sim_device *sim_device_by_name(struct qsm_sim *sim, const char *name)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &sim->devices) {
		struct sim_device *d = qsm_container_of(pos, struct sim_device, node);

		if (!strcmp(d->name, name))
			return d;
	}
	return NULL;
}

/* Only an UP device serves its address: a removed one no longer answers for it. */
struct sim_device *sim_device_serving(struct qsm_sim *sim, const struct sockaddr_storage *ip)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &sim->devices) {
		struct sim_device *d = qsm_container_of(pos, struct sim_device, node);

		if (d->state == QSM_SIM_DEVICE_UP && sim_addr_same_ip(&d->addr, ip))
			return d;
	}
	return NULL;
}

/* The one place a removed device becomes GONE: when its last reference goes. */
void sim_device_settle(struct sim_device *d)
{
	if (d->state == QSM_SIM_DEVICE_REMOVING && !d->nids && !d->nqps && !d->refs && !d->nmrs &&
	    !d->nsrqs)
		d->state = QSM_SIM_DEVICE_GONE;
}

void sim_device_get(struct qsm_fdev *fdev)
{
	struct sim_device *d = to_dev(fdev);

	if (!d)
		return;
	d->refs++;
	d->sim->st.device_refs++;
}

void sim_device_put(struct qsm_fdev *fdev)
{
	struct sim_device *d = to_dev(fdev);

	if (!d)
		return;
	assert(d->refs > 0 && "device_put without device_get");
	if (!d->refs)
		return;
	d->refs--;
	d->sim->st.device_refs--;
	sim_device_settle(d);
}

const char *sim_device_name(struct qsm_fdev *fdev)
{
	struct sim_device *d = to_dev(fdev);

	return d ? d->name : NULL;
}

int sim_device_addr(struct qsm_fdev *fdev, struct sockaddr_storage *ss)
{
	struct sim_device *d = to_dev(fdev);

	if (!d || !ss)
		return -EINVAL;
	if (!device_up(d))
		return -ENOENT;
	*ss = d->addr;
	return 0;
}

/* ---- fabrics ---- */

/* Reject what is not a fabric of this world: a sim API given the wrong pointer. */
struct sim_fabric *sim_world_fabric(struct qsm_sim *sim, struct qsm_fabric *base)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &sim->fabrics) {
		struct sim_fabric *f = qsm_container_of(pos, struct sim_fabric, node);

		if (&f->base == base)
			return f;
	}
	return NULL;
}
