/* rdma-qsm benchmarks: a fabric whose every call succeeds at once and costs nothing; each
 * benchmark brings its own get_event (a replayed CM stream, a fake CQ). */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fabric.h"

struct bench_fabric *bf_of(struct qsm_fabric *f)
{
	return (struct bench_fabric *)f;
}

static void bf_destroy(struct qsm_fabric *f)
{
	close(bf_of(f)->fd);
	free(bf_of(f)->ids);
	free(f);
}

static int bf_fd(struct qsm_fabric *f)
{
	return bf_of(f)->fd;
}

/* Queue i owns ids[i]; the side under test says which i an owner is. */
static int bf_create_id(struct qsm_fabric *f, void *owner, struct qsm_fid **ret)
{
	struct bench_fabric *b = bf_of(f);
	size_t i = b->index_of(owner);

	if (i >= b->nids)
		return -ENOENT;
	*ret = &b->ids[i];
	return 0;
}

static int ok_id(struct qsm_fid *id) { (void)id; return 0; }
static void noop_id(struct qsm_fid *id) { (void)id; }
static void bf_set_owner(struct qsm_fid *id, void *owner) { id->owner = owner; }
static int bf_bind(struct qsm_fid *id, const struct sockaddr *a) { (void)id; (void)a; return 0; }
static int bf_listen(struct qsm_fid *id, int b) { (void)id; (void)b; return 0; }
static int bf_resolve_addr(struct qsm_fid *id, const struct sockaddr *s, const struct sockaddr *d, int t)
{
	(void)id; (void)s; (void)d; (void)t;
	return 0;
}
static int bf_resolve_route(struct qsm_fid *id, int t) { (void)id; (void)t; return 0; }
struct qsm_fabric_qp_attr bench_qp_asked;

static int bf_create_qp(struct qsm_fid *id, const struct qsm_fabric_qp_attr *a)
{
	(void)id;
	bench_qp_asked = *a;
	return 0;
}
static int bf_pdata(struct qsm_fid *id, const void *p, size_t l) { (void)id; (void)p; (void)l; return 0; }
static struct qsm_fdev *bf_id_device(struct qsm_fid *id) { (void)id; return NULL; }
static void bf_dev(struct qsm_fdev *d) { (void)d; }
static const char *bf_dev_name(struct qsm_fdev *d) { (void)d; return "bench"; }
static int bf_dev_addr(struct qsm_fdev *d, struct sockaddr_storage *ss) { (void)d; (void)ss; return -ENOENT; }
static int bf_src_addr(struct qsm_fid *id, struct sockaddr_storage *ss) { (void)id; (void)ss; return -ENOENT; }
/* Its QPs hold no WR: nothing is left to flush when a queue lets go of one. */
static int bf_flush_qp(struct qsm_fid *id, struct qsm_fabric_cqe *c, int max) { (void)id; (void)c; (void)max; return 0; }

const struct qsm_fabric_ops bench_noop_ops = {
	.name = "bench", .destroy = bf_destroy, .fd = bf_fd,
	.create_id = bf_create_id, .set_owner = bf_set_owner, .destroy_id = noop_id, .bind = bf_bind,
	.listen = bf_listen, .resolve_addr = bf_resolve_addr, .resolve_route = bf_resolve_route,
	.create_qp = bf_create_qp, .destroy_qp = noop_id, .connect = bf_pdata, .accept = bf_pdata,
	.reject = bf_pdata, .disconnect = ok_id, .drain = ok_id, .id_device = bf_id_device,
	.device_get = bf_dev, .device_put = bf_dev, .device_name = bf_dev_name,
	.device_addr = bf_dev_addr, .id_src_addr = bf_src_addr, .flush_qp = bf_flush_qp,
};

struct bench_fabric *bench_fabric_new(size_t nqueues, size_t (*index_of)(void *owner),
				      const struct qsm_fabric_ops *ops, void *source)
{
	struct bench_fabric *b = calloc(1, sizeof(*b));

	if (!b)
		abort();
	b->f.ops = ops;
	b->source = source;
	b->fd = eventfd(1, EFD_NONBLOCK);
	b->ids = calloc(nqueues, sizeof(*b->ids));
	b->nids = nqueues;
	b->index_of = index_of;
	if (b->fd < 0 || !b->ids)
		abort();
	return b;
}
