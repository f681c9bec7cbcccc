/* rdma-qsm tests: a QP's async events through the rdmacm fabric's own code, over bench/fake_rdmacm.c's
 * provider: the device's async fd in the fabric's epoll, ibv_get_async_event() read until empty
 * (src/fabric/rdmacm/devices.c, qsm_rc_harvest_async), the event routed to the QP's owner
 * (ops.c, take_pending), its edge, and the action the edge takes (ids.c, qsm_rc_notify).
 *
 * COMM_EST is the one a passive side must act on: the peer's first message reached a QP whose RTU
 * has not come (lost, or slow), and the kernel's CM must be told to take it as the RTU
 * (rdma_notify, as nvmet-rdma and SPDK do), else the connection waits for the RTU's retries.
 * Soft-RoCE and soft-iWARP never raise it (doc/coverage.md), so this is where the library's own
 * handling of it is tested against librdmacm's calls; the machines' edges are the fault
 * matrix's (check_faults). */
#include <check.h>
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <qsm/ctx.h>

#include "check_main.h"
#include "fake_rdmacm.h"

/* librdmacm and libibverbs calls the fake does not answer, answered here (-Wl,--wrap) */
int __wrap_rdma_listen(struct rdma_cm_id *cm, int backlog);
int __wrap_rdma_accept(struct rdma_cm_id *cm, struct rdma_conn_param *p);
int __wrap_rdma_notify(struct rdma_cm_id *cm, enum ibv_event_type event);
int __wrap_ibv_get_async_event(struct ibv_context *verbs, struct ibv_async_event *ev);
void __wrap_ibv_ack_async_event(struct ibv_async_event *ev);
int __wrap_ibv_get_device_index(struct ibv_device *dev);
__be64 __wrap_ibv_get_device_guid(struct ibv_device *dev);

/* The request's id is on the fake device: the fabric finds it by name and guid (no kernel
 * index: the fake is no verbs_device, whose index libibverbs would read). */
int __wrap_ibv_get_device_index(struct ibv_device *dev)
{
	(void)dev;
	return -1;
}

__be64 __wrap_ibv_get_device_guid(struct ibv_device *dev)
{
	(void)dev;
	return 0;
}

static struct {
	unsigned listens, accepts, notifies, acks;
	struct rdma_cm_id *notified;
	enum ibv_event_type notified_event;
	struct ibv_async_event queue[8];   /* the device's async events not read yet */
	unsigned queued;
	char edges[16][96];                /* the passive queues' edges, "FROM --EVENT--> TO" */
	unsigned nedges, unexpected;
} fk;

int __wrap_rdma_listen(struct rdma_cm_id *cm, int backlog)
{
	(void)cm;
	(void)backlog;
	fk.listens++;
	return 0;
}

/* The REP goes; no RTU comes back (no ESTABLISHED): the queue waits in ACCEPTING. */
int __wrap_rdma_accept(struct rdma_cm_id *cm, struct rdma_conn_param *p)
{
	(void)cm;
	(void)p;
	fk.accepts++;
	return 0;
}

int __wrap_rdma_notify(struct rdma_cm_id *cm, enum ibv_event_type event)
{
	fk.notifies++;
	fk.notified = cm;
	fk.notified_event = event;
	return 0;
}

/* One queued event, as the kernel hands them out in order; none: EAGAIN, the fd read back to
 * unreadable (the fabric made it non-blocking, as verbs' own). */
int __wrap_ibv_get_async_event(struct ibv_context *verbs, struct ibv_async_event *ev)
{
	uint64_t v;

	if (!fk.queued) {
		if (read(verbs->async_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			abort();
		errno = EAGAIN;
		return -1;
	}
	*ev = fk.queue[0];
	memmove(fk.queue, fk.queue + 1, --fk.queued * sizeof(fk.queue[0]));
	return 0;
}

void __wrap_ibv_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
	fk.acks++;
}

static void async_event(enum ibv_event_type type, struct ibv_qp *qp)
{
	uint64_t one = 1;

	ck_assert_uint_lt(fk.queued, sizeof(fk.queue) / sizeof(fk.queue[0]));
	fk.queue[fk.queued++] = (struct ibv_async_event){ .event_type = type, .element.qp = qp };
	ck_assert_int_eq(write(prov.ctx.async_fd, &one, sizeof(one)), (int)sizeof(one));
}

static void trace_passive(const struct qsm_trace_record *r, void *arg)
{
	(void)arg;
	if (strcmp(r->kind, "passive"))
		return;
	if (!r->to) {
		fk.unexpected++;
		return;
	}
	if (fk.nedges < sizeof(fk.edges) / sizeof(fk.edges[0]))
		snprintf(fk.edges[fk.nedges++], sizeof(fk.edges[0]), "%s --%s--> %s", r->from, r->event, r->to);
}

static bool took(const char *edge)
{
	for (unsigned i = 0; i < fk.nedges; i++)
		if (!strcmp(fk.edges[i], edge))
			return true;
	return false;
}

static const struct qsm_class srv_class = {
	.name = "srv",
	.super = &qsm_base_class,
	.qp = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
};

static struct qsm_ctx *ctx;
static struct rc_fabric *f;
static int efd = -1;             /* the device's async fd */
static struct rdma_cm_id *req;   /* the kernel's id for the request */

/* A listener on the fake device's address, a request through its CM channel, accepted by the
 * base class: a passive queue in ACCEPTING, its QP the provider's (prov.qp). */
static void accepting(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(4420),
				   .sin_addr.s_addr = htonl(0xc0000201) };
	struct qsm_fabric *fab;
	struct qsm_listener *l;
	struct qsm_fid *lid;

	memset(&fk, 0, sizeof(fk));
	ck_assert_int_eq(fake_rdmacm_fabric(&fab), 0);
	snprintf(prov.dev.name, sizeof(prov.dev.name), "fake0");   /* fake_rdmacm.c's device */
	f = to_fab(fab);
	/* the device's async fd, in the fabric's epoll as qsm_rc_dev_get_resources() puts it */
	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(efd, 0);
	prov.ctx.async_fd = efd;
	ck_assert_int_eq(epoll_add(f, efd), 0);
	ck_assert_int_eq(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = fab }, &ctx), 0);
	ck_assert_int_eq(qsm_ctx_set_trace(ctx, trace_passive, NULL), 0);
	ck_assert_int_eq(qsm_listener_new(ctx, &(struct qsm_listener_opts){
		.addr = (struct sockaddr *)&sin, .cls = &srv_class }, &l), 0);
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(fk.listens, 1);
	lid = qsm_container_of(f->ids.prev, struct qsm_fid, node);   /* the listener's, the latest */
	req = calloc(1, sizeof(*req));
	ck_assert_ptr_nonnull(req);
	req->channel = lid->cm->channel;
	req->verbs = &prov.ctx;
	req->route.addr.src_addr = *(struct sockaddr *)&sin;
	fake_cm_event(req, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	prov.cm_ev.listen_id = lid->cm;
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(fk.accepts, 1);
	ck_assert(took("REQUESTED --ACCEPT--> ACCEPTING"));
	ck_assert_ptr_eq(req->qp, &prov.qp);
}

/* the ctx with its fabric (and the request's id), then the async fd */
static void done(void)
{
	qsm_ctx_free(ctx);
	close(efd);
	efd = -1;
}

START_TEST(test_comm_est_on_a_passive_queue_waiting_for_its_rtu_is_told_to_the_cm)
{
	accepting();
	async_event(IBV_EVENT_COMM_EST, &prov.qp);
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(fk.acks, 1);                  /* read, and acknowledged */
	ck_assert(took("ACCEPTING --COMM_EST--> ACCEPTING"));
	ck_assert_uint_eq(fk.notifies, 1);              /* rdma_notify(id, IBV_EVENT_COMM_EST) */
	ck_assert_ptr_eq(fk.notified, req);
	ck_assert_int_eq(fk.notified_event, IBV_EVENT_COMM_EST);
	/* the CM's ESTABLISHED follows (the kernel's rdma_notify establishes the id) */
	fake_cm_event(req, RDMA_CM_EVENT_ESTABLISHED, 0);
	fake_drain(ctx, 1000);
	ck_assert(took("ACCEPTING --ESTABLISHED--> CONNECTED"));
	ck_assert_uint_eq(fk.unexpected, 0);
	ck_assert_uint_eq(fake_counters(ctx).unexpected, 0);
	done();
}
END_TEST

/* Once established, COMM_EST (the kernel's late report of the same message) changes nothing
 * and tells the CM nothing more; SQ_DRAINED and PATH_MIG likewise. */
START_TEST(test_qp_notes_after_the_connection_are_self_loops_and_call_nothing)
{
	accepting();
	fake_cm_event(req, RDMA_CM_EVENT_ESTABLISHED, 0);
	fake_drain(ctx, 1000);
	ck_assert(took("ACCEPTING --ESTABLISHED--> CONNECTED"));
	async_event(IBV_EVENT_COMM_EST, &prov.qp);
	async_event(IBV_EVENT_SQ_DRAINED, &prov.qp);
	async_event(IBV_EVENT_PATH_MIG, &prov.qp);
	fake_drain(ctx, 1000);
	ck_assert_uint_eq(fk.acks, 3);
	ck_assert(took("LIVE --COMM_EST--> LIVE"));
	ck_assert(took("LIVE --SQ_DRAINED--> LIVE"));
	ck_assert(took("LIVE --PATH_MIG--> LIVE"));
	ck_assert_uint_eq(fk.notifies, 0);
	ck_assert_uint_eq(fk.unexpected, 0);
	done();
}
END_TEST

static Suite *async_suite(void)
{
	Suite *s = suite_create("async");
	TCase *tc = tcase_create("async");

	tcase_add_test(tc, test_comm_est_on_a_passive_queue_waiting_for_its_rtu_is_told_to_the_cm);
	tcase_add_test(tc, test_qp_notes_after_the_connection_are_self_loops_and_call_nothing);
	suite_add_tcase(s, tc);
	return s;
}

QSM_CHECK_MAIN(async_suite)
