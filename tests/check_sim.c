/* rdma-qsm: the simulated fabric (src/fabric_sim.c, qsm/sim.h) against the kernel rdma_cm
 * behaviour it stands in for: one test per behaviour, each asserting what the runtime would see. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/sim.h>

#include "fabric.h"

#include "check_main.h"

/* A world with two devices and two fabrics: a client ctx and a server ctx. */
static struct qsm_sim *sim;
static struct qsm_fabric *fc, *fs;

/* Owners are opaque to the fabric: distinct addresses are all it needs. */
static char CLI, CLI2, SRV, SRV2, LIS, LIS2, SENT;

static const struct qsm_fabric_qp_attr qp_attr = {
	.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1,
};

static struct qsm_fabric_event ev;

#define A_IP "10.0.0.1"   /* mlx5_0: the client's device */
#define B_IP "10.0.0.2"   /* mlx5_1: the server's device */
#define PORT 4420

static void setup(void)
{
	ck_assert_int_eq(qsm_sim_new(&sim), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "mlx5_0", A_IP), 0);
	ck_assert_int_eq(qsm_sim_device_add(sim, "mlx5_1", B_IP), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &fc), 0);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, &fs), 0);
}

static void teardown(void)
{
	if (fc)
		fc->ops->destroy(fc);
	if (fs)
		fs->ops->destroy(fs);
	fc = fs = NULL;
	qsm_sim_free(sim);
	sim = NULL;
}

static struct sockaddr_storage ip(const char *text, uint16_t port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
	} else {
		ck_assert_int_eq(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
	}
	return ss;
}

#define SA(ss) ((const struct sockaddr *)&(ss))

/* An address for one call; a few live at once, enough for one call's arguments. */
static const struct sockaddr *at(const char *text, uint16_t port)
{
	static struct sockaddr_storage ring[4];
	static unsigned next;
	struct sockaddr_storage *ss = &ring[next++ % 4];

	*ss = ip(text, port);
	return (const struct sockaddr *)ss;
}

static unsigned port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

static int fd_readable(struct qsm_fabric *f)
{
	struct pollfd p = { .fd = f->ops->fd(f), .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Take the next event of f and check its kind and owner; the caller's line is in the message. */
#define expect(f, event, owner) expect_at(__LINE__, f, event, owner)
static struct qsm_fabric_event *expect_at(int line, struct qsm_fabric *f, int event, void *owner)
{
	int r = f->ops->get_event(f, &ev);

	ck_assert_msg(r == 0, "line %d: expected event %d, got none (%d)", line, event, r);
	ck_assert_msg(ev.event == event, "line %d: expected event %d, got %d", line, event, ev.event);
	ck_assert_msg(ev.owner == owner, "line %d: event %d for the wrong owner", line, event);
	return &ev;
}

#define expect_none(f) expect_none_at(__LINE__, f)
static void expect_none_at(int line, struct qsm_fabric *f)
{
	int r = f->ops->get_event(f, &ev);

	ck_assert_msg(r == -EAGAIN, "line %d: expected no event, got %d (event %d)", line, r, r ? 0 : ev.event);
	ck_assert_msg(!fd_readable(f), "line %d: fd readable with an empty queue", line);
}

static void assert_clean(void)
{
	struct qsm_sim_stats st;

	expect_none(fc);
	expect_none(fs);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids, 0);
	ck_assert_uint_eq(st.qps, 0);
	ck_assert_uint_eq(st.device_refs, 0);
	ck_assert_uint_eq(st.events_pending, 0);
	ck_assert_uint_eq(st.ids_leaked, 0);
}

static struct qsm_fid *listener_on(struct qsm_fabric *f, void *owner, const char *addr, uint16_t port)
{
	struct qsm_fid *id;
	struct sockaddr_storage ss = ip(addr, port);

	ck_assert_int_eq(f->ops->create_id(f, owner, &id), 0);
	ck_assert_int_eq(f->ops->bind(id, SA(ss)), 0);
	ck_assert_int_eq(f->ops->listen(id, 16), 0);
	return id;
}

/* An active id with route and QP, ready to connect; src NULL lets the destination pick the device. */
static struct qsm_fid *active_ready(void *owner, const char *src, const char *dst, uint16_t port)
{
	struct qsm_fid *id;
	struct sockaddr_storage s = src ? ip(src, 0) : ip("0.0.0.0", 0), d = ip(dst, port);

	ck_assert_int_eq(fc->ops->create_id(fc, owner, &id), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(id, src ? SA(s) : NULL, SA(d), 1000), 0);
	expect(fc, QSM_EV_ADDR_RESOLVED, owner);
	ck_assert_int_eq(fc->ops->resolve_route(id, 1000), 0);
	expect(fc, QSM_EV_ROUTE_RESOLVED, owner);
	ck_assert_int_eq(fc->ops->create_qp(id, &qp_attr), 0);
	return id;
}

/* The passive id of the CONNECT_REQUEST the server fabric has next, adopted with a QP. */
static struct qsm_fid *take_request(void *listen_owner, void *owner)
{
	struct qsm_fid *p;

	expect(fs, QSM_EV_CONNECT_REQUEST, NULL);
	ck_assert_ptr_eq(ev.listen_owner, listen_owner);
	p = ev.id;
	fs->ops->set_owner(p, owner);
	ck_assert_int_eq(fs->ops->create_qp(p, &qp_attr), 0);
	return p;
}

/* Client (A_IP, fabric fc, owner CLI) connected to server (B_IP:PORT, fabric fs, owner SRV). */
static void connect_pair(struct qsm_fid **a, struct qsm_fid **p)
{
	*a = active_ready(&CLI, A_IP, B_IP, PORT);
	ck_assert_int_eq(fc->ops->connect(*a, NULL, 0), 0);
	*p = take_request(&LIS, &SRV);
	ck_assert_int_eq(fs->ops->accept(*p, NULL, 0), 0);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
}

static void destroy_all(struct qsm_fabric *f, struct qsm_fid **ids, int n)
{
	for (int i = 0; i < n; i++)
		f->ops->destroy_id(ids[i]);
}

/* ---- connection establishment ---- */

START_TEST(test_connect_accept_establishes_both_sides_across_two_fabrics)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;
	const char req[] = "login", rep[] = "welcome";

	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), QSM_QP_INIT);
	ck_assert_int_eq(fc->ops->connect(a, req, sizeof(req)), 0);
	expect_none(fc);

	/* The request is a new id, unowned, in the listener's fabric, on the server's device. */
	expect(fs, QSM_EV_CONNECT_REQUEST, NULL);
	ck_assert_ptr_eq(ev.listen_owner, &LIS);
	ck_assert_ptr_nonnull(ev.id);
	ck_assert_ptr_ne(ev.id, l);
	ck_assert_uint_eq(ev.private_data_len, QSM_SIM_REQ_PDATA);
	ck_assert_mem_eq(ev.private_data, req, sizeof(req));
	ck_assert_uint_eq(ev.private_data[sizeof(req)], 0);
	p = ev.id;
	ck_assert_str_eq(fs->ops->device_name(fs->ops->id_device(p)), "mlx5_1");
	ck_assert_str_eq(fc->ops->device_name(fc->ops->id_device(a)), "mlx5_0");

	fs->ops->set_owner(p, &SRV);
	ck_assert_int_eq(fs->ops->create_qp(p, &qp_attr), 0);
	ck_assert_int_eq(fs->ops->accept(p, rep, sizeof(rep)), 0);

	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	ck_assert_int_eq(ev.status, 0);
	ck_assert_uint_eq(ev.private_data_len, QSM_SIM_REP_PDATA);
	ck_assert_mem_eq(ev.private_data, rep, sizeof(rep));
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
	ck_assert_uint_eq(ev.private_data_len, 0);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), QSM_QP_RTS);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fs, &SRV), QSM_QP_RTS);

	fc->ops->destroy_id(a);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_TIMEWAIT_EXIT, &SRV);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_disconnect_gives_each_side_disconnected_once_then_timewait_exit)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	connect_pair(&a, &p);
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	/* The peer, handling its DISCONNECTED, disconnects too, as every ULP does. */
	ck_assert_int_eq(fs->ops->disconnect(p), 0);
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect(fc, QSM_EV_TIMEWAIT_EXIT, &CLI);
	expect_none(fc);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_TIMEWAIT_EXIT, &SRV);
	expect_none(fs);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), QSM_QP_ERR);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fs, &SRV), QSM_QP_ERR);

	fc->ops->destroy_id(a);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_ids_in_one_fabric_connect_to_each_other_on_loopback)
{
	struct qsm_fid *l = listener_on(fc, &LIS, B_IP, PORT), *a, *p;
	struct sockaddr_storage d = ip(B_IP, PORT), src;

	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	expect(fc, QSM_EV_ADDR_RESOLVED, &CLI);
	/* No source: the device that serves the destination carries it. */
	ck_assert_str_eq(fc->ops->device_name(fc->ops->id_device(a)), "mlx5_1");
	ck_assert_int_eq(fc->ops->id_src_addr(a, &src), 0);
	ck_assert_int_eq(port_of(&src) >= 32768, 1);
	ck_assert_int_eq(fc->ops->resolve_route(a, 1000), 0);
	expect(fc, QSM_EV_ROUTE_RESOLVED, &CLI);
	ck_assert_int_eq(fc->ops->create_qp(a, &qp_attr), 0);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	expect(fc, QSM_EV_CONNECT_REQUEST, NULL);
	ck_assert_ptr_eq(ev.listen_owner, &LIS);
	p = ev.id;
	ck_assert_int_eq(fc->ops->id_src_addr(p, &src), 0);
	ck_assert_uint_eq(port_of(&src), PORT);
	fc->ops->set_owner(p, &SRV);
	ck_assert_int_eq(fc->ops->create_qp(p, &qp_attr), 0);
	ck_assert_int_eq(fc->ops->accept(p, NULL, 0), 0);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	expect(fc, QSM_EV_ESTABLISHED, &SRV);
	ck_assert_int_eq(fc->ops->disconnect(p), 0);
	/* Both DISCONNECTED come before either TIMEWAIT_EXIT. */
	expect(fc, QSM_EV_DISCONNECTED, &SRV);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect(fc, QSM_EV_TIMEWAIT_EXIT, &SRV);
	expect(fc, QSM_EV_TIMEWAIT_EXIT, &CLI);
	destroy_all(fc, (struct qsm_fid *[]){ a, p, l }, 3);
	assert_clean();
}
END_TEST

START_TEST(test_ipv6_devices_connect)
{
	struct qsm_fid *l, *a, *p;

	ck_assert_int_eq(qsm_sim_device_add(sim, "rxe6", "fd00::2"), 0);
	expect(fc, QSM_EV_DEVICE_ADDED, NULL);
	expect(fs, QSM_EV_DEVICE_ADDED, NULL);
	ck_assert_str_eq(fs->ops->device_name(ev.device), "rxe6");
	l = listener_on(fs, &LIS, "::", PORT);
	a = active_ready(&CLI, NULL, "fd00::2", PORT);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_str_eq(fs->ops->device_name(fs->ops->id_device(p)), "rxe6");
	ck_assert_int_eq(fs->ops->accept(p, NULL, 0), 0);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
	fc->ops->destroy_id(a);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_TIMEWAIT_EXIT, &SRV);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

/* ---- rejects ---- */

START_TEST(test_reject_with_private_data_reaches_active_side_only)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;
	const char why[] = "no such subsystem";

	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_int_eq(fs->ops->reject(p, why, sizeof(why)), 0);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_CONSUMER);
	ck_assert_uint_eq(ev.private_data_len, QSM_SIM_REJ_PDATA);
	ck_assert_mem_eq(ev.private_data, why, sizeof(why));
	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), QSM_QP_ERR);
	expect_none(fs);
	/* The rejected id stays until the runtime destroys it; no second answer is possible. */
	ck_assert_int_eq(fs->ops->accept(p, NULL, 0), -EINVAL);
	ck_assert_int_eq(fs->ops->reject(p, NULL, 0), -EINVAL);
	fs->ops->destroy_id(p);
	expect_none(fc);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

START_TEST(test_connect_without_listener_is_rejected_as_invalid_service)
{
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT);

	ck_assert_int_eq(fc->ops->connect(a, "x", 1), 0);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_INVALID_SERVICE_ID);
	expect_none(fs);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_connect_to_port_listened_on_another_address_is_rejected_by_consumer)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, NULL, A_IP, PORT);

	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_CONSUMER);
	expect_none(fs);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

START_TEST(test_wildcard_listener_takes_requests_for_every_device_address)
{
	struct qsm_fid *l = listener_on(fs, &LIS, "0.0.0.0", PORT);
	struct qsm_fid *a1 = active_ready(&CLI, NULL, A_IP, PORT);
	struct qsm_fid *a2 = active_ready(&CLI2, NULL, B_IP, PORT);
	struct qsm_fid *p1, *p2;

	ck_assert_ptr_null(fs->ops->id_device(l));
	ck_assert_int_eq(fc->ops->connect(a1, NULL, 0), 0);
	ck_assert_int_eq(fc->ops->connect(a2, NULL, 0), 0);
	p1 = take_request(&LIS, &SRV);
	p2 = take_request(&LIS, &SRV2);
	ck_assert_str_eq(fs->ops->device_name(fs->ops->id_device(p1)), "mlx5_0");
	ck_assert_str_eq(fs->ops->device_name(fs->ops->id_device(p2)), "mlx5_1");
	/* Destroying unanswered requests rejects them, like the kernel's destroy of a REQ_RCVD id. */
	fs->ops->destroy_id(p1);
	fs->ops->destroy_id(p2);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_CONSUMER);
	expect(fc, QSM_EV_REJECTED, &CLI2);
	destroy_all(fc, (struct qsm_fid *[]){ a1, a2 }, 2);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

/* ---- faults ---- */

START_TEST(test_fault_addr_error_posts_addr_error_and_a_retry_resolves)
{
	struct qsm_fid *a;
	struct sockaddr_storage d = ip(B_IP, PORT);

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_ADDR_ERROR, 1), 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	expect(fc, QSM_EV_ADDR_ERROR, &CLI);
	ck_assert_int_eq(ev.status, -EHOSTUNREACH);
	ck_assert_ptr_null(fc->ops->id_device(a));
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	expect(fc, QSM_EV_ADDR_RESOLVED, &CLI);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_fault_route_error_posts_route_error)
{
	struct qsm_fid *a;
	struct sockaddr_storage d = ip(B_IP, PORT);

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_ROUTE_ERROR, 1), 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	expect(fc, QSM_EV_ADDR_RESOLVED, &CLI);
	ck_assert_int_eq(fc->ops->resolve_route(a, 1000), 0);
	expect(fc, QSM_EV_ROUTE_ERROR, &CLI);
	ck_assert_int_eq(ev.status, -ETIMEDOUT);
	ck_assert_int_eq(fc->ops->resolve_route(a, 1000), 0);
	expect(fc, QSM_EV_ROUTE_RESOLVED, &CLI);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_fault_reject_rejects_the_active_side_and_the_listener_sees_nothing)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT);

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_REJECT, 1), 0);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_CONSUMER);
	expect_none(fs);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

START_TEST(test_fault_unreachable_posts_unreachable_timed_out)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT);

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_UNREACHABLE, 1), 0);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	expect(fc, QSM_EV_UNREACHABLE, &CLI);
	ck_assert_int_eq(ev.status, -ETIMEDOUT);
	expect_none(fs);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

START_TEST(test_fault_connect_error_on_accept_hits_both_sides_instead_of_established)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;

	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_CONNECT_ERROR, 1), 0);
	ck_assert_int_eq(fs->ops->accept(p, NULL, 0), 0);
	expect(fc, QSM_EV_CONNECT_ERROR, &CLI);
	ck_assert_int_lt(ev.status, 0);
	expect(fs, QSM_EV_CONNECT_ERROR, &SRV);
	expect_none(fc);
	expect_none(fs);
	/* Never connected, so nothing to disconnect: each side's destroy is silent. */
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(p);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

START_TEST(test_fault_no_timewait_exit_loses_exactly_one_timewait_exit)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	struct qsm_sim_stats st;

	connect_pair(&a, &p);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_NO_TIMEWAIT_EXIT, 1), 0);
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect_none(fc);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_TIMEWAIT_EXIT, &SRV);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.events_dropped, 1);
	fc->ops->destroy_id(a);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_fault_dup_disconnected_delivers_disconnected_twice)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	connect_pair(&a, &p);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_DUP_DISCONNECTED, 1), 0);
	ck_assert_int_eq(fs->ops->disconnect(p), 0);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_TIMEWAIT_EXIT, &SRV);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect(fc, QSM_EV_TIMEWAIT_EXIT, &CLI);
	fc->ops->destroy_id(a);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_fault_late_established_follows_disconnected_on_the_same_id)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	connect_pair(&a, &p);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_LATE_ESTABLISHED, 1), 0);
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	expect(fc, QSM_EV_TIMEWAIT_EXIT, &CLI);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_TIMEWAIT_EXIT, &SRV);
	fc->ops->destroy_id(a);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_fault_no_drained_hangs_one_drain)
{
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT);

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_NO_DRAINED, 1), 0);
	ck_assert_int_eq(fc->ops->drain(a), 0);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), QSM_QP_ERR);
	expect_none(fc);
	ck_assert_int_eq(fc->ops->drain(a), 0);
	expect(fc, QSM_EV_DRAINED, &CLI);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_fault_enomem_fails_the_next_allocating_calls)
{
	struct qsm_fid *a = NULL;
	struct sockaddr_storage d = ip(B_IP, PORT);
	struct qsm_sim_stats st;

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_ENOMEM, 2), 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), -ENOMEM);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), -ENOMEM);
	ck_assert_ptr_null(a);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids, 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	expect(fc, QSM_EV_ADDR_RESOLVED, &CLI);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_ENOMEM, 1), 0);
	ck_assert_int_eq(fc->ops->create_qp(a, &qp_attr), -ENOMEM);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.qps, 0);
	ck_assert_int_eq(fc->ops->create_qp(a, &qp_attr), 0);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_fault_hold_keeps_events_back_until_release_in_order)
{
	struct qsm_fid *a;
	struct sockaddr_storage d = ip(B_IP, PORT);
	struct qsm_sim_stats st;

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_HOLD, 2), 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	ck_assert_int_eq(fc->ops->resolve_route(a, 1000), 0);
	ck_assert_int_eq(fc->ops->create_qp(a, &qp_attr), 0);
	ck_assert_int_eq(fc->ops->drain(a), 0);
	/* Only the third event was past the hold: it overtakes the held two. */
	expect(fc, QSM_EV_DRAINED, &CLI);
	expect_none(fc);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.events_pending, 2);
	ck_assert_int_eq(qsm_sim_release(sim), 2);
	ck_assert_int_eq(fd_readable(fc), 1);
	expect(fc, QSM_EV_ADDR_RESOLVED, &CLI);
	expect(fc, QSM_EV_ROUTE_RESOLVED, &CLI);
	ck_assert_int_eq(qsm_sim_release(sim), 0);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_fault_hold_drops_held_events_of_a_destroyed_id)
{
	struct qsm_fid *a;
	struct sockaddr_storage d = ip(B_IP, PORT);
	struct qsm_sim_stats st;

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_HOLD, 10), 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	fc->ops->destroy_id(a);
	ck_assert_int_eq(qsm_sim_release(sim), 0);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.events_dropped, 1);
	assert_clean();
}
END_TEST

START_TEST(test_fault_count_zero_disarms_and_unknown_fault_is_einval)
{
	struct qsm_fid *a;

	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_ENOMEM, 3), 0);
	ck_assert_int_eq(qsm_sim_inject(sim, QSM_SIM_FAULT_ENOMEM, 0), 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	fc->ops->destroy_id(a);
	ck_assert_int_eq(qsm_sim_inject(sim, (enum qsm_sim_fault)QSM_SIM_FAULT_COUNT, 1), -EINVAL);
	ck_assert_int_eq(qsm_sim_inject(sim, (enum qsm_sim_fault)-1, 1), -EINVAL);
	ck_assert_int_eq(qsm_sim_inject(NULL, QSM_SIM_FAULT_ENOMEM, 1), -EINVAL);
	assert_clean();
}
END_TEST

START_TEST(test_qp_fatal_posts_qp_fatal_and_moves_only_that_qp_to_err)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	connect_pair(&a, &p);
	ck_assert_int_eq(qsm_sim_qp_fatal(sim, fc, &CLI), 0);
	expect(fc, QSM_EV_QP_FATAL, &CLI);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), QSM_QP_ERR);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fs, &SRV), QSM_QP_RTS);
	expect_none(fs);
	ck_assert_int_eq(qsm_sim_qp_fatal(sim, fc, &SRV), -ENOENT);
	ck_assert_int_eq(qsm_sim_qp_fatal(sim, fs, &LIS), -ENOENT);
	ck_assert_int_eq(qsm_sim_qp_fatal(NULL, fc, &CLI), -EINVAL);
	ck_assert_int_eq(qsm_sim_qp_fatal(sim, NULL, &CLI), -EINVAL);
	fc->ops->destroy_id(a);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_TIMEWAIT_EXIT, &SRV);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

/* ---- device removal ---- */

START_TEST(test_device_removal_reaches_connected_ids_and_disconnects_peers_on_other_devices)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	connect_pair(&a, &p);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_1"), 0);
	/* The server's side (listener, passive) is on mlx5_1; the client is on mlx5_0. */
	expect(fs, QSM_EV_DEVICE_REMOVAL, &LIS);
	ck_assert_int_eq(ev.status, 0);
	ck_assert_str_eq(fs->ops->device_name(ev.device), "mlx5_1");
	expect(fs, QSM_EV_DEVICE_REMOVAL, &SRV);
	expect_none(fs);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect(fc, QSM_EV_TIMEWAIT_EXIT, &CLI);
	expect_none(fc);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fs, &SRV), QSM_QP_ERR);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_1"), QSM_SIM_DEVICE_REMOVING);
	/* The removed side's teardown is silent: the peer already heard. */
	ck_assert_int_eq(fs->ops->disconnect(p), 0);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_1"), QSM_SIM_DEVICE_GONE);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_device_removal_between_ids_on_the_same_device_posts_only_device_removal)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	a = active_ready(&CLI, NULL, B_IP, PORT);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_int_eq(fs->ops->accept(p, NULL, 0), 0);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_1"), 0);
	expect(fc, QSM_EV_DEVICE_REMOVAL, &CLI);
	expect_none(fc);
	expect(fs, QSM_EV_DEVICE_REMOVAL, &LIS);
	expect(fs, QSM_EV_DEVICE_REMOVAL, &SRV);
	expect_none(fs);
	fc->ops->destroy_id(a);
	expect_none(fs);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_device_removal_reaches_a_bound_only_sentinel_id)
{
	struct qsm_fid *s;
	struct sockaddr_storage ss;
	struct qsm_fdev *dev;

	/* What the runtime's device registry does: bind a sentinel to one of the device's addresses. */
	ck_assert_int_eq(fc->ops->create_id(fc, &SENT, &s), 0);
	ck_assert_int_eq(fc->ops->bind(s, at(A_IP, 0)), 0);
	dev = fc->ops->id_device(s);
	ck_assert_ptr_nonnull(dev);
	ck_assert_int_eq(fc->ops->device_addr(dev, &ss), 0);
	ck_assert_int_eq(ss.ss_family, AF_INET);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_0"), 0);
	expect(fc, QSM_EV_DEVICE_REMOVAL, &SENT);
	ck_assert_ptr_eq(ev.device, dev);
	ck_assert_int_eq(fc->ops->device_addr(dev, &ss), -ENOENT);
	fc->ops->destroy_id(s);
	assert_clean();
}
END_TEST

START_TEST(test_device_removal_reaches_a_device_listener_but_not_a_wildcard_listener)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *w = listener_on(fs, &LIS2, "0.0.0.0", PORT + 1);

	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_1"), 0);
	expect(fs, QSM_EV_DEVICE_REMOVAL, &LIS);
	expect_none(fs);
	fs->ops->destroy_id(l);
	fs->ops->destroy_id(w);
	assert_clean();
}
END_TEST

START_TEST(test_device_stays_removing_until_every_reference_is_dropped_then_gone_then_readded)
{
	struct qsm_fid *s, *a;
	struct qsm_fdev *dev;
	struct sockaddr_storage ss = ip(A_IP, 0);

	ck_assert_int_eq(fc->ops->create_id(fc, &SENT, &s), 0);
	ck_assert_int_eq(fc->ops->bind(s, SA(ss)), 0);
	a = active_ready(&CLI, A_IP, B_IP, PORT);
	dev = fc->ops->id_device(a);
	fc->ops->device_get(dev);
	fc->ops->device_get(dev);

	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_0"), 0);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_0"), -EALREADY);
	expect(fc, QSM_EV_DEVICE_REMOVAL, &SENT);
	expect(fc, QSM_EV_DEVICE_REMOVAL, &CLI);
	ck_assert_int_eq(qsm_sim_device_add(sim, "mlx5_0", A_IP), -EBUSY);

	fc->ops->destroy_qp(a);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_0"), QSM_SIM_DEVICE_REMOVING);
	fc->ops->destroy_id(a);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_0"), QSM_SIM_DEVICE_REMOVING);
	fc->ops->destroy_id(s);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_0"), QSM_SIM_DEVICE_REMOVING);
	fc->ops->device_put(dev);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_0"), QSM_SIM_DEVICE_REMOVING);
	fc->ops->device_put(dev);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_0"), QSM_SIM_DEVICE_GONE);
	expect_none(fc);

	/* Back, with another address, as the same device object, announced to every fabric. */
	ck_assert_int_eq(qsm_sim_device_add(sim, "mlx5_0", "10.0.0.11"), 0);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_0"), QSM_SIM_DEVICE_UP);
	expect(fc, QSM_EV_DEVICE_ADDED, NULL);
	ck_assert_ptr_null(ev.id);
	ck_assert_ptr_eq(ev.device, dev);
	expect(fs, QSM_EV_DEVICE_ADDED, NULL);
	ck_assert_ptr_eq(ev.device, dev);
	ck_assert_int_eq(fc->ops->device_addr(dev, &ss), 0);
	{
		struct sockaddr_storage want = ip("10.0.0.11", 0);

		ck_assert_mem_eq(&ss, &want, sizeof(struct sockaddr_in));
	}
	ss = ip("10.0.0.11", 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &SENT, &s), 0);
	ck_assert_int_eq(fc->ops->bind(s, SA(ss)), 0);
	ck_assert_ptr_eq(fc->ops->id_device(s), dev);
	fc->ops->destroy_id(s);
	assert_clean();
}
END_TEST

START_TEST(test_device_not_up_refuses_bind_and_fails_address_resolution)
{
	struct qsm_fid *a;
	struct sockaddr_storage b = ip(B_IP, 0), d = ip(B_IP, PORT);

	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_1"), 0);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_1"), QSM_SIM_DEVICE_GONE);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->bind(a, SA(b)), -EADDRNOTAVAIL);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	expect(fc, QSM_EV_ADDR_ERROR, &CLI);
	ck_assert_int_eq(ev.status, -EHOSTUNREACH);
	fc->ops->destroy_id(a);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "nope"), -ENOENT);
	ck_assert_int_eq(qsm_sim_device_state(sim, "nope"), -ENOENT);
	ck_assert_int_eq(qsm_sim_device_add(sim, "mlx5_0", "10.0.0.9"), -EEXIST);
	ck_assert_int_eq(qsm_sim_device_add(sim, "rxe1", A_IP), -EADDRINUSE);
	ck_assert_int_eq(qsm_sim_device_add(sim, "rxe1", "not-an-ip"), -EINVAL);
	ck_assert_int_eq(qsm_sim_device_add(sim, "rxe1", "0.0.0.0"), -EINVAL);
	ck_assert_int_eq(qsm_sim_device_add(sim, "", "10.0.0.9"), -EINVAL);
	assert_clean();
}
END_TEST

START_TEST(test_removal_of_the_device_under_a_pending_request_rejects_the_active_side)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;

	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_1"), 0);
	/* The request was never reported: the listener's fabric still has it, then the removals. */
	expect(fs, QSM_EV_CONNECT_REQUEST, NULL);
	p = ev.id;
	fs->ops->set_owner(p, &SRV);
	ck_assert_int_eq(fs->ops->create_qp(p, &qp_attr), -ENODEV);
	expect(fs, QSM_EV_DEVICE_REMOVAL, &LIS);
	expect(fs, QSM_EV_DEVICE_REMOVAL, &SRV);
	ck_assert_ptr_eq(ev.id, p);
	ck_assert_int_eq(fs->ops->accept(p, NULL, 0), -EINVAL);
	expect(fc, QSM_EV_REJECTED, &CLI);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

/* ---- destroy ---- */

START_TEST(test_destroy_id_drops_its_pending_events)
{
	struct qsm_fid *a;
	struct sockaddr_storage d = ip(B_IP, PORT);
	struct qsm_sim_stats st;

	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1000), 0);
	ck_assert_int_eq(fc->ops->resolve_route(a, 1000), 0);
	ck_assert_int_eq(fd_readable(fc), 1);
	fc->ops->destroy_id(a);
	expect_none(fc);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.events_dropped, 2);
	ck_assert_uint_eq(st.events_delivered, 0);
	assert_clean();
}
END_TEST

START_TEST(test_destroy_connected_id_disconnects_the_peer_with_timewait)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	connect_pair(&a, &p);
	fs->ops->destroy_id(p);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect(fc, QSM_EV_TIMEWAIT_EXIT, &CLI);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), QSM_QP_ERR);
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	expect_none(fc);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

START_TEST(test_destroy_unanswered_request_rejects_the_active_side)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;

	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	fs->ops->destroy_id(p);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_CONSUMER);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

START_TEST(test_destroy_active_id_while_request_pending_rejects_the_passive_side)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;

	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	fc->ops->destroy_id(a);
	expect(fs, QSM_EV_REJECTED, &SRV);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_TIMEOUT);
	ck_assert_int_eq(fs->ops->accept(p, NULL, 0), -EINVAL);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_destroy_listener_with_unreported_request_destroys_it_and_rejects_the_active_side)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT);
	struct qsm_sim_stats st;

	ck_assert_int_eq(fc->ops->connect(a, "hi", 2), 0);
	fs->ops->destroy_id(l);
	expect_none(fs);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_CONSUMER);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids, 1);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_disconnect_while_request_pending_turns_the_accept_into_connect_error)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;

	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), QSM_QP_ERR);
	p = take_request(&LIS, &SRV);
	ck_assert_int_eq(fs->ops->accept(p, NULL, 0), 0);
	expect(fc, QSM_EV_CONNECT_ERROR, &CLI);
	expect(fs, QSM_EV_REJECTED, &SRV);
	ck_assert_int_eq(ev.status, QSM_SIM_REJ_CONSUMER);
	fc->ops->destroy_id(a);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_fabric_destroy_frees_leftover_ids_and_counts_them_leaked)
{
	struct qsm_fid *a, *p;
	struct qsm_sim_stats st;

	listener_on(fs, &LIS, B_IP, PORT);
	connect_pair(&a, &p);
	fs->ops->destroy(fs);
	fs = NULL;
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect(fc, QSM_EV_TIMEWAIT_EXIT, &CLI);
	fc->ops->destroy_id(a);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.ids_leaked, 2);
	ck_assert_uint_eq(st.ids, 0);
	ck_assert_uint_eq(st.qps, 0);
	ck_assert_uint_eq(st.events_pending, 0);
	ck_assert_int_eq(qsm_sim_device_remove(sim, "mlx5_1"), 0);
	ck_assert_int_eq(qsm_sim_device_state(sim, "mlx5_1"), QSM_SIM_DEVICE_GONE);
}
END_TEST

/* ---- limits and argument checks ---- */

START_TEST(test_private_data_limits_are_56_196_148)
{
	static const char big[QSM_SIM_REP_PDATA + 1];
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;

	ck_assert_int_eq(fc->ops->connect(a, big, QSM_SIM_REQ_PDATA + 1), -EINVAL);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 1), -EINVAL);
	expect_none(fc);
	expect_none(fs);
	ck_assert_int_eq(fc->ops->connect(a, big, QSM_SIM_REQ_PDATA), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_int_eq(fs->ops->accept(p, big, QSM_SIM_REP_PDATA + 1), -EINVAL);
	ck_assert_int_eq(fs->ops->reject(p, big, QSM_SIM_REJ_PDATA + 1), -EINVAL);
	expect_none(fc);
	ck_assert_int_eq(fs->ops->reject(p, big, QSM_SIM_REJ_PDATA), 0);
	expect(fc, QSM_EV_REJECTED, &CLI);
	fc->ops->destroy_id(a);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);

	l = listener_on(fs, &LIS, B_IP, PORT);
	a = active_ready(&CLI, A_IP, B_IP, PORT);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_int_eq(fs->ops->accept(p, big, QSM_SIM_REP_PDATA), 0);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
	fc->ops->destroy_id(a);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	expect(fs, QSM_EV_TIMEWAIT_EXIT, &SRV);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_argument_and_state_checks_fail_without_effect)
{
	const struct qsm_fabric_ops *o = fc->ops;
	struct qsm_fid *a, *b;
	struct sockaddr_storage d = ip(B_IP, PORT), ss, v6 = ip("fd00::1", 0);
	struct sockaddr bad = { .sa_family = AF_UNIX };
	struct qsm_sim_stats st;

	/* NULLs */
	ck_assert_int_eq(qsm_sim_new(NULL), -EINVAL);
	ck_assert_int_eq(qsm_sim_fabric_new(NULL, &fc), -EINVAL);
	ck_assert_int_eq(qsm_sim_fabric_new(sim, NULL), -EINVAL);
	ck_assert_int_eq(qsm_sim_device_add(NULL, "x", A_IP), -EINVAL);
	ck_assert_int_eq(qsm_sim_device_add(sim, NULL, A_IP), -EINVAL);
	ck_assert_int_eq(qsm_sim_device_add(sim, "x", NULL), -EINVAL);
	ck_assert_int_eq(qsm_sim_device_remove(sim, NULL), -EINVAL);
	ck_assert_int_eq(qsm_sim_device_state(NULL, "mlx5_0"), -EINVAL);
	ck_assert_int_eq(qsm_sim_release(NULL), -EINVAL);
	ck_assert_int_eq(qsm_sim_qp_state(sim, fc, &CLI), -ENOENT);
	ck_assert_int_eq(o->fd(NULL), -EINVAL);
	ck_assert_int_eq(o->get_event(NULL, &ev), -EINVAL);
	ck_assert_int_eq(o->get_event(fc, NULL), -EINVAL);
	ck_assert_int_eq(o->create_id(NULL, &CLI, &a), -EINVAL);
	ck_assert_int_eq(o->create_id(fc, &CLI, NULL), -EINVAL);
	ck_assert_int_eq(o->bind(NULL, SA(d)), -EINVAL);
	ck_assert_int_eq(o->listen(NULL, 1), -EINVAL);
	ck_assert_int_eq(o->resolve_addr(NULL, NULL, SA(d), 1), -EINVAL);
	ck_assert_int_eq(o->resolve_route(NULL, 1), -EINVAL);
	ck_assert_int_eq(o->create_qp(NULL, &qp_attr), -EINVAL);
	ck_assert_int_eq(o->connect(NULL, NULL, 0), -EINVAL);
	ck_assert_int_eq(o->accept(NULL, NULL, 0), -EINVAL);
	ck_assert_int_eq(o->reject(NULL, NULL, 0), -EINVAL);
	ck_assert_int_eq(o->disconnect(NULL), -EINVAL);
	ck_assert_int_eq(o->drain(NULL), -EINVAL);
	ck_assert_ptr_null(o->id_device(NULL));
	ck_assert_ptr_null(o->device_name(NULL));
	ck_assert_int_eq(o->device_addr(NULL, &ss), -EINVAL);
	ck_assert_int_eq(o->id_src_addr(NULL, &ss), -EINVAL);
	o->destroy_id(NULL);
	o->destroy_qp(NULL);
	o->set_owner(NULL, &CLI);
	o->device_get(NULL);
	o->device_put(NULL);
	o->destroy(NULL);
	qsm_sim_free(NULL);

	/* Out-of-order calls on a fresh id */
	ck_assert_int_eq(o->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(o->id_src_addr(a, &ss), -ENOENT);
	ck_assert_int_eq(o->bind(a, NULL), -EINVAL);
	ck_assert_int_eq(o->bind(a, &bad), -EAFNOSUPPORT);
	ck_assert_int_eq(o->resolve_addr(a, NULL, NULL, 1), -EINVAL);
	ck_assert_int_eq(o->resolve_addr(a, SA(v6), SA(d), 1), -EINVAL);
	ck_assert_int_eq(o->listen(a, 1), -EINVAL);
	ck_assert_int_eq(o->resolve_route(a, 1), -EINVAL);
	ck_assert_int_eq(o->create_qp(a, &qp_attr), -EINVAL);
	ck_assert_int_eq(o->connect(a, NULL, 0), -EINVAL);
	ck_assert_int_eq(o->accept(a, NULL, 0), -EINVAL);
	ck_assert_int_eq(o->reject(a, NULL, 0), -EINVAL);
	ck_assert_int_eq(o->disconnect(a), -EINVAL);
	ck_assert_int_eq(o->drain(a), -EINVAL);
	expect_none(fc);

	ck_assert_int_eq(o->resolve_addr(a, NULL, SA(d), 1), 0);
	expect(fc, QSM_EV_ADDR_RESOLVED, &CLI);
	ck_assert_int_eq(o->resolve_addr(a, NULL, SA(d), 1), -EINVAL);
	ck_assert_int_eq(o->bind(a, SA(d)), -EINVAL);
	ck_assert_int_eq(o->create_qp(a, NULL), -EINVAL);
	ck_assert_int_eq(o->create_qp(a, &qp_attr), 0);
	ck_assert_int_eq(o->create_qp(a, &qp_attr), -EEXIST);
	ck_assert_int_eq(o->connect(a, NULL, 0), -EINVAL);   /* route not resolved */
	ck_assert_int_eq(o->disconnect(a), -EINVAL);
	expect_none(fc);

	/* A wildcard-bound id is on no device: no QP there. */
	ck_assert_int_eq(o->create_id(fc, &CLI2, &b), 0);
	ck_assert_int_eq(o->bind(b, at("0.0.0.0", 0)), 0);
	ck_assert_ptr_null(o->id_device(b));
	ck_assert_int_eq(o->create_qp(b, &qp_attr), -EINVAL);
	ck_assert_int_eq(qsm_sim_qp_fatal(sim, fs, &CLI), -ENOENT);
	o->destroy_id(b);

	o->destroy_id(a);
	qsm_sim_get_stats(NULL, &st);
	ck_assert_uint_eq(st.ids, 0);
	qsm_sim_get_stats(sim, NULL);
	assert_clean();
}
END_TEST

START_TEST(test_bind_takes_device_addresses_and_follows_the_kernel_port_rules)
{
	const struct qsm_fabric_ops *o = fs->ops;
	struct qsm_fid *l1, *x, *y;
	struct sockaddr_storage ss;

	l1 = listener_on(fs, &LIS, B_IP, PORT);
	ck_assert_int_eq(o->create_id(fs, &LIS2, &x), 0);
	ck_assert_int_eq(o->bind(x, at("10.9.9.9", PORT)), -EADDRNOTAVAIL);
	ck_assert_int_eq(o->bind(x, at(B_IP, PORT)), -EADDRINUSE);
	ck_assert_int_eq(o->bind(x, at("0.0.0.0", PORT)), -EADDRNOTAVAIL);
	/* Same port on another device's address is a different endpoint. */
	ck_assert_int_eq(o->bind(x, at(A_IP, PORT)), 0);
	ck_assert_int_eq(o->listen(x, 1), 0);
	ck_assert_int_eq(o->listen(x, 1), -EINVAL);

	/* Port 0: ephemeral ports, distinct, reported by id_src_addr. */
	ck_assert_int_eq(o->create_id(fs, &SENT, &y), 0);
	ck_assert_int_eq(o->bind(y, at(B_IP, 0)), 0);
	ck_assert_int_eq(o->id_src_addr(y, &ss), 0);
	ck_assert_uint_eq(port_of(&ss), 32768);
	o->destroy_id(y);
	ck_assert_int_eq(o->create_id(fs, &SENT, &y), 0);
	ck_assert_int_eq(o->bind(y, at(B_IP, 0)), 0);
	ck_assert_int_eq(o->id_src_addr(y, &ss), 0);
	ck_assert_uint_eq(port_of(&ss), 32769);
	o->destroy_id(y);

	/* The port is free again once its holder is destroyed. */
	o->destroy_id(l1);
	ck_assert_int_eq(o->create_id(fs, &LIS, &l1), 0);
	ck_assert_int_eq(o->bind(l1, at(B_IP, PORT)), 0);
	o->destroy_id(l1);
	o->destroy_id(x);
	assert_clean();
}
END_TEST

START_TEST(test_fd_is_readable_exactly_while_the_queue_is_not_empty)
{
	struct qsm_fid *a;
	struct sockaddr_storage d = ip(B_IP, PORT);

	ck_assert_int_ge(fc->ops->fd(fc), 0);
	ck_assert_int_ne(fc->ops->fd(fc), fs->ops->fd(fs));
	ck_assert_int_eq(fd_readable(fc), 0);
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI, &a), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(a, NULL, SA(d), 1), 0);
	ck_assert_int_eq(fc->ops->resolve_route(a, 1), 0);
	ck_assert_int_eq(fd_readable(fc), 1);
	ck_assert_int_eq(fd_readable(fs), 0);
	expect(fc, QSM_EV_ADDR_RESOLVED, &CLI);
	ck_assert_int_eq(fd_readable(fc), 1);
	/* set_owner takes effect on events already queued: owner is read at take time. */
	fc->ops->set_owner(a, &CLI2);
	expect(fc, QSM_EV_ROUTE_RESOLVED, &CLI2);
	ck_assert_int_eq(fd_readable(fc), 0);
	ck_assert_int_eq(fc->ops->get_event(fc, &ev), -EAGAIN);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_stats_count_every_event_delivered_or_dropped)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	struct qsm_sim_stats st;

	connect_pair(&a, &p);   /* 2 + CONNECT_REQUEST + 2 ESTABLISHED */
	fc->ops->destroy_id(a);    /* DISCONNECTED + TIMEWAIT_EXIT to p, dropped below */
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	qsm_sim_get_stats(sim, &st);
	ck_assert_uint_eq(st.events_delivered, 5);
	ck_assert_uint_eq(st.events_dropped, 2);
	assert_clean();
}
END_TEST

static Suite *sim_suite(void)
{
	Suite *s = suite_create("sim");
	TCase *tc = tcase_create("sim");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_connect_accept_establishes_both_sides_across_two_fabrics);
	tcase_add_test(tc, test_disconnect_gives_each_side_disconnected_once_then_timewait_exit);
	tcase_add_test(tc, test_ids_in_one_fabric_connect_to_each_other_on_loopback);
	tcase_add_test(tc, test_ipv6_devices_connect);
	tcase_add_test(tc, test_reject_with_private_data_reaches_active_side_only);
	tcase_add_test(tc, test_connect_without_listener_is_rejected_as_invalid_service);
	tcase_add_test(tc, test_connect_to_port_listened_on_another_address_is_rejected_by_consumer);
	tcase_add_test(tc, test_wildcard_listener_takes_requests_for_every_device_address);
	tcase_add_test(tc, test_fault_addr_error_posts_addr_error_and_a_retry_resolves);
	tcase_add_test(tc, test_fault_route_error_posts_route_error);
	tcase_add_test(tc, test_fault_reject_rejects_the_active_side_and_the_listener_sees_nothing);
	tcase_add_test(tc, test_fault_unreachable_posts_unreachable_timed_out);
	tcase_add_test(tc, test_fault_connect_error_on_accept_hits_both_sides_instead_of_established);
	tcase_add_test(tc, test_fault_no_timewait_exit_loses_exactly_one_timewait_exit);
	tcase_add_test(tc, test_fault_dup_disconnected_delivers_disconnected_twice);
	tcase_add_test(tc, test_fault_late_established_follows_disconnected_on_the_same_id);
	tcase_add_test(tc, test_fault_no_drained_hangs_one_drain);
	tcase_add_test(tc, test_fault_enomem_fails_the_next_allocating_calls);
	tcase_add_test(tc, test_fault_hold_keeps_events_back_until_release_in_order);
	tcase_add_test(tc, test_fault_hold_drops_held_events_of_a_destroyed_id);
	tcase_add_test(tc, test_fault_count_zero_disarms_and_unknown_fault_is_einval);
	tcase_add_test(tc, test_qp_fatal_posts_qp_fatal_and_moves_only_that_qp_to_err);
	tcase_add_test(tc, test_device_removal_reaches_connected_ids_and_disconnects_peers_on_other_devices);
	tcase_add_test(tc, test_device_removal_between_ids_on_the_same_device_posts_only_device_removal);
	tcase_add_test(tc, test_device_removal_reaches_a_bound_only_sentinel_id);
	tcase_add_test(tc, test_device_removal_reaches_a_device_listener_but_not_a_wildcard_listener);
	tcase_add_test(tc, test_device_stays_removing_until_every_reference_is_dropped_then_gone_then_readded);
	tcase_add_test(tc, test_device_not_up_refuses_bind_and_fails_address_resolution);
	tcase_add_test(tc, test_removal_of_the_device_under_a_pending_request_rejects_the_active_side);
	tcase_add_test(tc, test_destroy_id_drops_its_pending_events);
	tcase_add_test(tc, test_destroy_connected_id_disconnects_the_peer_with_timewait);
	tcase_add_test(tc, test_destroy_unanswered_request_rejects_the_active_side);
	tcase_add_test(tc, test_destroy_active_id_while_request_pending_rejects_the_passive_side);
	tcase_add_test(tc, test_destroy_listener_with_unreported_request_destroys_it_and_rejects_the_active_side);
	tcase_add_test(tc, test_disconnect_while_request_pending_turns_the_accept_into_connect_error);
	tcase_add_test(tc, test_fabric_destroy_frees_leftover_ids_and_counts_them_leaked);
	tcase_add_test(tc, test_private_data_limits_are_56_196_148);
	tcase_add_test(tc, test_argument_and_state_checks_fail_without_effect);
	tcase_add_test(tc, test_bind_takes_device_addresses_and_follows_the_kernel_port_rules);
	tcase_add_test(tc, test_fd_is_readable_exactly_while_the_queue_is_not_empty);
	tcase_add_test(tc, test_stats_count_every_event_delivered_or_dropped);
	suite_add_tcase(s, tc);
	return s;
}

QSM_CHECK_MAIN(sim_suite)
