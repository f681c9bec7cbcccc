/* rdma-qsm tests: the fabric contract (src/fabric/fabric.h), written once against a fixture
 * (contract.h) and run on the sim in make check and on rdmacm over soft-RoCE in the VM. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <qsm/events.h>

#include "contract.h"

const struct contract_fixture *contract_fx;
struct qsm_fabric *fc, *fs;
struct qsm_fabric_event ev;
struct qsm_fabric_cqe cqe;
char CLI, CLI2, SRV, SRV2, LIS, LIS2, SENT, SRQ;

const struct qsm_fabric_qp_attr qp_attr = {
	.max_send_wr = 16, .max_recv_wr = 16,
	.max_send_sge = QSM_FABRIC_MAX_SGE, .max_recv_sge = QSM_FABRIC_MAX_SGE,
	.max_inline_data = 64,
};





struct sockaddr_storage ip(const char *text, uint16_t port)
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


/* An address for one call; a few live at once, enough for one call's arguments. */
const struct sockaddr *at(const char *text, uint16_t port)
{
	static struct sockaddr_storage ring[4];
	static unsigned next;
	struct sockaddr_storage *ss = &ring[next++ % 4];

	*ss = ip(text, port);
	return (const struct sockaddr *)ss;
}

unsigned port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

int fd_readable(struct qsm_fabric *f)
{
	struct pollfd p = { .fd = f->ops->fd(f), .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}


/* Waits until f's fd is readable, at most @ms (the sim: 0, everything is queued already). */
static void wait_readable(struct qsm_fabric *f, int ms)
{
	struct pollfd p = { .fd = f->ops->fd(f), .events = POLLIN };

	if (ms > 0)
		poll(&p, 1, ms);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The next event of f within @ms: 0, or what get_event() last said (-EAGAIN: none came). */
static int next_event(struct qsm_fabric *f, int ms)
{
	int64_t end = now_ms() + ms;
	int r;

	for (;;) {
		/* one completion at a time, seen as an event of its own (batches: their own test) */
		r = f->ops->get_event(f, &ev, &cqe, 1);
		if (r == 1) {
			memset(&ev, 0, offsetof(struct qsm_fabric_event, private_data));
			ev.event = QSM_EV_COMPLETION;
			ev.owner = cqe.owner;
			ev.id = cqe.id;
			return 0;
		}
		if (r != -EAGAIN || now_ms() >= end)
			return r;
		wait_readable(f, (int)(end - now_ms()));
	}
}

/* Take the next event of f and check its kind and owner; the caller's line is in the message. */
struct qsm_fabric_event *expect_at(int line, struct qsm_fabric *f, int event, void *owner)
{
	int r = next_event(f, contract_fx->event_wait_ms);

	ck_assert_msg(r == 0, "line %d: expected event %d (%s), got none (%d)", line, event,
		      qsm_event_name(event) ? qsm_event_name(event) : "?", r);
	ck_assert_msg(ev.event == event, "line %d: expected event %d (%s), got %d (%s, status %d)", line, event,
		      qsm_event_name(event) ? qsm_event_name(event) : "?", ev.event,
		      qsm_event_name(ev.event) ? qsm_event_name(ev.event) : "?", ev.status);
	ck_assert_msg(ev.owner == owner, "line %d: event %d for the wrong owner", line, event);
	return &ev;
}

void expect_none_at(int line, struct qsm_fabric *f)
{
	int r = next_event(f, contract_fx->quiet_ms);

	ck_assert_msg(r == -EAGAIN, "line %d: expected no event, got %d (event %d%s%s, status %d, wr_id %llu, wc status %d)",
		      line, r, r ? 0 : ev.event, r ? "" : " ", r || !qsm_event_name(ev.event) ? "" : qsm_event_name(ev.event),
		      r ? 0 : ev.status, r ? 0ull : (unsigned long long)cqe.wc.wr_id, r ? 0 : (int)cqe.wc.status);
	if (contract_fx->fd_exact)
		ck_assert_msg(!fd_readable(f), "line %d: fd readable with an empty queue", line);
}

/* The end of an id's timewait, after its DISCONNECTED and its own disconnect.  iWARP has none:
 * iw_cm (drivers/infiniband/core/iwcm.c) never reports IW_CM_EVENT for a timewait, so rdma_cm
 * sends no RDMA_CM_EVENT_TIMEWAIT_EXIT on an iWARP id: nothing more comes for it. */
void expect_timewait_exit_at(int line, struct qsm_fabric *f, void *owner)
{
	if (contract_fx->iwarp)
		expect_none_at(line, f);
	else
		expect_at(line, f, QSM_EV_TIMEWAIT_EXIT, owner);
}

void expect_qp_at(int line, struct qsm_fabric *f, void *owner, int state)
{
	if (contract_fx->qp_state)
		ck_assert_msg(contract_fx->qp_state(f, owner) == state, "line %d: QP in state %d, expected %d", line,
			      contract_fx->qp_state(f, owner), state);
}

void expect_nothing_pending(void)
{
	if (contract_fx->check_no_pending)
		contract_fx->check_no_pending();
}

void assert_clean(void)
{
	expect_none(fc);
	expect_none(fs);
	if (contract_fx->check_clean)
		contract_fx->check_clean();
}


struct qsm_fid *listener_on(struct qsm_fabric *f, void *owner, const char *addr, uint16_t port)
{
	struct qsm_fid *id;
	struct sockaddr_storage ss = ip(addr, port);

	ck_assert_int_eq(f->ops->create_id(f, owner, &id), 0);
	ck_assert_int_eq(f->ops->bind(id, SA(ss)), 0);
	ck_assert_int_eq(f->ops->listen(id, 16), 0);
	return id;
}

/* An active id with route and a QP of @caps, ready to connect; src NULL lets the destination
 * pick the device. */
static struct qsm_fid *active_ready_caps(void *owner, const char *src, const char *dst, uint16_t port,
					 const struct qsm_fabric_qp_attr *caps)
{
	struct qsm_fid *id;
	struct sockaddr_storage s = src ? ip(src, 0) : ip("0.0.0.0", 0), d = ip(dst, port);

	ck_assert_int_eq(fc->ops->create_id(fc, owner, &id), 0);
	ck_assert_int_eq(fc->ops->resolve_addr(id, src ? SA(s) : NULL, SA(d), 1000), 0);
	expect(fc, QSM_EV_ADDR_RESOLVED, owner);
	ck_assert_int_eq(fc->ops->resolve_route(id, 1000), 0);
	expect(fc, QSM_EV_ROUTE_RESOLVED, owner);
	ck_assert_int_eq(fc->ops->create_qp(id, caps), 0);
	return id;
}

/* An active id with route and QP, ready to connect; src NULL lets the destination pick the device. */
struct qsm_fid *active_ready(void *owner, const char *src, const char *dst, uint16_t port)
{
	return active_ready_caps(owner, src, dst, port, &qp_attr);
}

/* The passive id of the CONNECT_REQUEST the server fabric has next, adopted with a QP of @caps. */
static struct qsm_fid *take_request_caps(void *listen_owner, void *owner, const struct qsm_fabric_qp_attr *caps)
{
	struct qsm_fid *p;

	expect(fs, QSM_EV_CONNECT_REQUEST, listen_owner);   /* for the listener: the id has none */
	p = ev.id;
	fs->ops->set_owner(p, owner);
	ck_assert_int_eq(fs->ops->create_qp(p, caps), 0);
	return p;
}

/* The passive id of the CONNECT_REQUEST the server fabric has next, adopted with a QP. */
struct qsm_fid *take_request(void *listen_owner, void *owner)
{
	return take_request_caps(listen_owner, owner, &qp_attr);
}

/* Client (A_IP, fabric fc, owner CLI) connected to server (B_IP:PORT, fabric fs, owner SRV), both
 * QPs of @caps. */
static void connect_pair_caps(struct qsm_fid **a, struct qsm_fid **p, const struct qsm_fabric_qp_attr *caps)
{
	int depth;

	*a = active_ready_caps(&CLI, A_IP, B_IP, PORT, caps);
	ck_assert_int_eq(fc->ops->connect(*a, NULL, 0), 0);
	*p = take_request_caps(&LIS, &SRV, caps);
	/* The READ depth: the passive side's from its request on (what its accept offers), the
	 * active side's once the reply came.  Both ends are the same kind of device in every
	 * fixture, so both directions negotiate the same figure, at most the 16 offered. */
	ck_assert_int_eq(fc->ops->read_depth(*a), -ENOTCONN);
	depth = fs->ops->read_depth(*p);
	ck_assert_int_ge(depth, 1);
	ck_assert_int_le(depth, 16);
	ck_assert_int_eq(fs->ops->accept(*p, NULL, 0), 0);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
	ck_assert_int_eq(fc->ops->read_depth(*a), depth);
	ck_assert_int_eq(fs->ops->read_depth(*p), depth);
}

/* Client (A_IP, fabric fc, owner CLI) connected to server (B_IP:PORT, fabric fs, owner SRV). */
void connect_pair(struct qsm_fid **a, struct qsm_fid **p)
{
	connect_pair_caps(a, p, &qp_attr);
}

void destroy_all(struct qsm_fabric *f, struct qsm_fid **ids, int n)
{
	for (int i = 0; i < n; i++)
		f->ops->destroy_id(ids[i]);
}


struct region reg(struct qsm_fabric *f, struct qsm_fid *id, void *mem, size_t len, int access)
{
	struct region r = { .mem = mem };

	ck_assert_int_eq(f->ops->reg_mr(f->ops->id_device(id), mem, len, access, &r.mr, &r.lkey, &r.rkey), 0);
	return r;
}

struct qsm_fabric_sge sge(const struct region *r, size_t off, uint32_t len)
{
	return (struct qsm_fabric_sge){ .addr = (uintptr_t)(r->mem + off), .length = len, .lkey = r->lkey };
}

int post_wr(struct qsm_fabric *f, struct qsm_fid *id, uint64_t wr_id, enum qsm_wr_opcode op,
		   const struct qsm_fabric_sge *sg, int n, uint64_t remote_addr, uint32_t rkey)
{
	struct qsm_fabric_wr wr = { .wr_id = wr_id, .opcode = op, .sg_list = sg, .num_sge = n,
				    .remote_addr = remote_addr, .rkey = rkey, .flags = QSM_POST_SIGNALED };

	return f->ops->post_send(id, &wr, 1, NULL);
}

int post_send1(struct qsm_fabric *f, struct qsm_fid *id, uint64_t wr_id, struct qsm_fabric_sge sg)
{
	return post_wr(f, id, wr_id, QSM_WR_SEND, &sg, 1, 0, 0);
}

int post_recv1(struct qsm_fabric *f, struct qsm_fid *id, uint64_t wr_id, struct qsm_fabric_sge sg)
{
	return f->ops->post_recv(id, wr_id, &sg, 1);
}

/* Take the next event of f: a completion of `wr_id` with that status and opcode. */
struct qsm_fabric_wc *expect_wc_at(int line, struct qsm_fabric *f, void *owner, uint64_t wr_id,
					  enum qsm_wc_status status, enum qsm_wr_opcode opcode)
{
	expect_at(line, f, QSM_EV_COMPLETION, owner);
	ck_assert_msg(cqe.wc.wr_id == wr_id, "line %d: completion of wr %llu, expected %llu", line,
		      (unsigned long long)cqe.wc.wr_id, (unsigned long long)wr_id);
	ck_assert_msg(cqe.wc.status == status, "line %d: wr %llu status %d, expected %d", line,
		      (unsigned long long)wr_id, cqe.wc.status, status);
	ck_assert_msg(cqe.wc.opcode == opcode, "line %d: wr %llu opcode %d, expected %d", line,
		      (unsigned long long)wr_id, cqe.wc.opcode, opcode);
	return &cqe.wc;
}

void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

void expect_bytes_at(int line, const uint8_t *got, const uint8_t *want, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(got[i] == want[i], "line %d: byte %zu is %u, expected %u", line, i, got[i], want[i]);
}

void expect_zero_at(int line, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(p[i] == 0, "line %d: byte %zu written (%u)", line, i, p[i]);
}

/* Disconnect a connected pair from the client side, the server answering as a ULP does, and
 * destroy it (and the listener, if given). */
void pair_down(struct qsm_fid *l, struct qsm_fid *a, struct qsm_fid *p)
{
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	/* as every ULP does on DISCONNECTED: the kernel answers the DREQ (DREP) and enters timewait only now */
	ck_assert_int_eq(fs->ops->disconnect(p), 0);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect_timewait_exit(fc, &CLI);
	expect_timewait_exit(fs, &SRV);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(p);
	if (l)
		fs->ops->destroy_id(l);
}

/* The end of a data case: the client's region rs and the server's rd deregistered, the pair
 * down (pair_down), and nothing left. */
void data_pair_down(struct qsm_fid *l, struct qsm_fid *a, struct qsm_fid *p, const struct region *rs,
		    const struct region *rd)
{
	fc->ops->dereg_mr(rs->mr);
	fs->ops->dereg_mr(rd->mr);
	pair_down(l, a, p);
	assert_clean();
}


/* ---- what the transport says ---- */

/* The private data length an event reports for @sent bytes in a CM message whose IB size is
 * @ib_size: IB and RoCE pad to the message size; iWARP's MPA carries the length sent. */
static size_t pdata_len(size_t sent, size_t ib_size)
{
	return contract_fx->iwarp ? sent : ib_size;
}

/* The most private data a connect, accept or reject takes (more: -EINVAL, no effect), and what
 * reaches the peer: the IB CM's REQ 56, REP 196, REJ 148; iWARP: 251, the rdmacm fabric's bound
 * (rdma_conn_param's 8-bit private_data_len, less MPA v2's 4-byte IRD/ORD header, which siw
 * puts before the private data: a request of 252 bytes or more never reached the listener, its
 * kernel rejected it, the active side's REJECTED -ECONNRESET). */
static size_t pdata_max(size_t ib_size)
{
	return contract_fx->iwarp ? 251 : ib_size;
}

static size_t pdata_carried(size_t ib_size)
{
	return pdata_max(ib_size);
}

/* The status of the REJECTED a consumer's reject gives the active side: the IB CM's reason
 * (IB_CM_REJ_CONSUMER_DEFINED, 28); iWARP has no reasons: siw answers with an MPA reply whose
 * reject bit is set, iw_cm reports that CONNECT_REPLY with -ECONNRESET and rdma_cm passes it on
 * as REJECTED's status. */
static int rej_consumer(void)
{
	return contract_fx->iwarp ? -ECONNRESET : QSM_SIM_REJ_CONSUMER;
}


/* ---- the cases ---- */

START_TEST(test_connect_accept_establishes_both_sides_across_two_fabrics)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;
	const char req[] = "login", rep[] = "welcome";

	expect_qp(fc, &CLI, QSM_QP_INIT);
	ck_assert_int_eq(fc->ops->connect(a, req, sizeof(req)), 0);
	expect_none(fc);

	/* The request is a new id, unowned, for the listener, in its fabric, on the server's
	 * device. */
	expect(fs, QSM_EV_CONNECT_REQUEST, &LIS);
	ck_assert_ptr_nonnull(ev.id);
	ck_assert_ptr_ne(ev.id, l);
	ck_assert_uint_eq(ev.private_data_len, pdata_len(sizeof(req), QSM_SIM_REQ_PDATA));
	ck_assert_mem_eq(ev.private_data, req, sizeof(req));
	if (!contract_fx->iwarp)   /* the IB CM's padding */
		ck_assert_uint_eq(ev.private_data[sizeof(req)], 0);
	p = ev.id;
	ck_assert_str_eq(fs->ops->device_name(fs->ops->id_device(p)), B_DEV);
	ck_assert_str_eq(fc->ops->device_name(fc->ops->id_device(a)), A_DEV);

	fs->ops->set_owner(p, &SRV);
	ck_assert_int_eq(fs->ops->create_qp(p, &qp_attr), 0);
	ck_assert_int_eq(fs->ops->accept(p, rep, sizeof(rep)), 0);

	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	ck_assert_int_eq(ev.status, 0);
	ck_assert_uint_eq(ev.private_data_len, pdata_len(sizeof(rep), QSM_SIM_REP_PDATA));
	ck_assert_mem_eq(ev.private_data, rep, sizeof(rep));
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
	ck_assert_uint_eq(ev.private_data_len, 0);
	expect_qp(fc, &CLI, QSM_QP_RTS);
	expect_qp(fs, &SRV, QSM_QP_RTS);

	fc->ops->destroy_id(a);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	/* as every ULP does on DISCONNECTED: the kernel answers the DREQ (DREP) and enters timewait only now */
	ck_assert_int_eq(fs->ops->disconnect(p), 0);
	expect_timewait_exit(fs, &SRV);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_disconnect_gives_each_side_disconnected_once_then_timewait_exit)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	connect_pair(&a, &p);
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	/* The peer, handling its DISCONNECTED, disconnects too, as every ULP does (only
	 * after the event: a disconnect racing the DREQ leaves the kernel's order to timing). */
	ck_assert_int_eq(fs->ops->disconnect(p), 0);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	expect_timewait_exit(fc, &CLI);
	expect_none(fc);
	expect_timewait_exit(fs, &SRV);
	expect_none(fs);
	expect_qp(fc, &CLI, QSM_QP_ERR);
	expect_qp(fs, &SRV, QSM_QP_ERR);

	fc->ops->destroy_id(a);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_reject_with_private_data_reaches_active_side_only)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;
	const char why[] = "no such subsystem";

	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_int_eq(fs->ops->reject(p, why, sizeof(why)), 0);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_int_eq(ev.status, rej_consumer());
	ck_assert_uint_eq(ev.private_data_len, pdata_len(sizeof(why), QSM_SIM_REJ_PDATA));
	ck_assert_mem_eq(ev.private_data, why, sizeof(why));
	expect_qp(fc, &CLI, QSM_QP_ERR);
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

	if (contract_fx->iwarp) {
		/* iWARP connects over TCP first, and siw makes that connect inside rdma_connect()
		 * (siw_connect: "connect() is called in blocking mode"): the peer's RST is the call's
		 * -ECONNREFUSED, and no event follows (a call that fails has no effect). */
		ck_assert_int_eq(fc->ops->connect(a, "x", 1), -ECONNREFUSED);
		expect_none(fc);
	} else {
		ck_assert_int_eq(fc->ops->connect(a, "x", 1), 0);
		expect(fc, QSM_EV_REJECTED, &CLI);
		ck_assert_int_eq(ev.status, QSM_SIM_REJ_INVALID_SERVICE_ID);
	}
	expect_none(fs);
	fc->ops->destroy_id(a);
	assert_clean();
}
END_TEST

START_TEST(test_destroy_connected_id_disconnects_the_peer_with_timewait)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;

	connect_pair(&a, &p);
	fs->ops->destroy_id(p);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	/* as every ULP does on DISCONNECTED: the kernel answers the DREQ (DREP) and enters timewait only now */
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	expect_timewait_exit(fc, &CLI);
	expect_qp(fc, &CLI, QSM_QP_ERR);
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
	ck_assert_int_eq(ev.status, rej_consumer());
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

/* IB and RoCE: 56, 196, 148; iWARP: 251 each (pdata_max()). */
START_TEST(test_private_data_limits_are_56_196_148)
{
	static const char big[256];
	const size_t req_max = pdata_carried(QSM_SIM_REQ_PDATA), rep_max = pdata_carried(QSM_SIM_REP_PDATA),
		     rej_max = pdata_carried(QSM_SIM_REJ_PDATA);
	const size_t req_bound = pdata_max(QSM_SIM_REQ_PDATA), rep_bound = pdata_max(QSM_SIM_REP_PDATA),
		     rej_bound = pdata_max(QSM_SIM_REJ_PDATA);
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p;

	ck_assert_int_eq(fc->ops->connect(a, big, req_bound + 1), -EINVAL);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 1), -EINVAL);
	expect_none(fc);
	expect_none(fs);
	ck_assert_int_eq(fc->ops->connect(a, big, req_max), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_uint_eq(ev.private_data_len, req_max);
	ck_assert_int_eq(fs->ops->accept(p, big, rep_bound + 1), -EINVAL);
	ck_assert_int_eq(fs->ops->reject(p, big, rej_bound + 1), -EINVAL);
	expect_none(fc);
	ck_assert_int_eq(fs->ops->reject(p, big, rej_max), 0);
	expect(fc, QSM_EV_REJECTED, &CLI);
	ck_assert_uint_eq(ev.private_data_len, rej_max);
	fc->ops->destroy_id(a);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);

	l = listener_on(fs, &LIS, B_IP, PORT);
	a = active_ready(&CLI, A_IP, B_IP, PORT);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	ck_assert_int_eq(fs->ops->accept(p, big, rep_max), 0);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	ck_assert_uint_eq(ev.private_data_len, rep_max);
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
	fc->ops->destroy_id(a);
	expect(fs, QSM_EV_DISCONNECTED, &SRV);
	/* as every ULP does on DISCONNECTED: the kernel answers the DREQ (DREP) and enters timewait only now */
	ck_assert_int_eq(fs->ops->disconnect(p), 0);
	expect_timewait_exit(fs, &SRV);
	destroy_all(fs, (struct qsm_fid *[]){ p, l }, 2);
	assert_clean();
}
END_TEST

START_TEST(test_send_lands_in_the_peers_recv_byte_for_byte_across_two_fabrics)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[64], dst[64] = { 0 };
	struct region rs, rd;
	struct qsm_fabric_wc *wc;

	connect_pair(&a, &p);
	fill(src, sizeof(src), 1);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, sizeof(dst))), 0);
	expect_none(fs);
	ck_assert_int_eq(post_send1(fc, a, 1, sge(&rs, 0, 40)), 0);

	wc = expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV);
	ck_assert_uint_eq(wc->byte_len, 40);
	ck_assert_ptr_eq(ev.id, p);
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND);
	ck_assert_ptr_eq(ev.id, a);
	expect_bytes(dst, src, 40);
	expect_zero(dst + 40, sizeof(dst) - 40);
	expect_none(fc);
	expect_none(fs);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_recvs_are_consumed_in_post_order)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[8] = { 'a', 'b', 'c', 'd', 'e' }, dst[3 * 8] = { 0 };
	struct region rs, rd;

	connect_pair(&a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(post_recv1(fs, p, 100 + i, sge(&rd, 8 * i, 8)), 0);
	/* Message i is i + 1 bytes long, from src + i. */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(post_send1(fc, a, 1 + i, sge(&rs, i, i + 1)), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(expect_wc(fs, &SRV, 100 + i, QSM_WC_SUCCESS, QSM_WR_RECV)->byte_len, i + 1);
		expect_bytes(dst + 8 * i, src + i, i + 1);
		expect_zero(dst + 8 * i + i + 1, 8 - (i + 1));
	}
	for (int i = 0; i < 3; i++)
		expect_wc(fc, &CLI, 1 + i, QSM_WC_SUCCESS, QSM_WR_SEND);
	expect_none(fs);
	expect_none(fc);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_send_gathers_its_sges_and_the_recv_scatters_them)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[64], dst[64] = { 0 }, want[18];
	struct region rs, rd;
	struct qsm_fabric_sge gather[3], scatter[2];

	connect_pair(&a, &p);
	fill(src, sizeof(src), 3);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	gather[0] = sge(&rs, 50, 5);
	gather[1] = sge(&rs, 0, 10);
	gather[2] = sge(&rs, 30, 3);
	memcpy(want, src + 50, 5);
	memcpy(want + 5, src, 10);
	memcpy(want + 15, src + 30, 3);
	scatter[0] = sge(&rd, 40, 7);
	scatter[1] = sge(&rd, 4, 20);
	ck_assert_int_eq(fs->ops->post_recv(p, 100, scatter, 2), 0);
	ck_assert_int_eq(post_wr(fc, a, 1, QSM_WR_SEND, gather, 3, 0, 0), 0);

	ck_assert_uint_eq(expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV)->byte_len, 18);
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND);
	expect_bytes(dst + 40, want, 7);
	expect_bytes(dst + 4, want + 7, 11);
	expect_zero(dst, 4);
	expect_zero(dst + 15, 40 - 15);
	expect_zero(dst + 47, sizeof(dst) - 47);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_rdma_write_places_data_at_the_rkey_and_completes_only_at_the_writer)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[32], dst[64] = { 0 };
	struct region rs, rd;
	struct qsm_fabric_sge gather[2];

	connect_pair(&a, &p);
	fill(src, sizeof(src), 5);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE);
	gather[0] = sge(&rs, 16, 16);
	gather[1] = sge(&rs, 0, 8);
	ck_assert_int_eq(post_wr(fc, a, 7, QSM_WR_RDMA_WRITE, gather, 2, (uintptr_t)(dst + 8), rd.rkey), 0);
	expect_wc(fc, &CLI, 7, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_none(fs);
	expect_zero(dst, 8);
	expect_bytes(dst + 8, src + 16, 16);
	expect_bytes(dst + 24, src, 8);
	expect_zero(dst + 32, sizeof(dst) - 32);

	/* A zero-length write checks no rkey (IB spec): it succeeds with a key that names nothing. */
	ck_assert_int_eq(post_wr(fc, a, 8, QSM_WR_RDMA_WRITE, NULL, 0, 0, 0xdead), 0);
	expect_wc(fc, &CLI, 8, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_qp(fc, &CLI, QSM_QP_RTS);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_zero_length_rdma_checks_no_rkey_and_touches_no_memory)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t local[16], want[16];
	struct region rl;
	struct qsm_fabric_sge empty;

	connect_pair(&a, &p);
	fill(local, sizeof(local), 3);
	memcpy(want, local, sizeof(want));
	rl = reg(fc, a, local, sizeof(local), QSM_ACCESS_LOCAL_WRITE);
	empty = sge(&rl, 0, 0);
	ck_assert_int_eq(post_wr(fc, a, 1, QSM_WR_RDMA_WRITE, &empty, 1, 0, 0xdead), 0);
	ck_assert_uint_eq(expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE)->byte_len, 0);
	ck_assert_int_eq(post_wr(fc, a, 2, QSM_WR_RDMA_READ, &empty, 1, 0, 0xdead), 0);
	ck_assert_uint_eq(expect_wc(fc, &CLI, 2, QSM_WC_SUCCESS, QSM_WR_RDMA_READ)->byte_len, 0);
	ck_assert_int_eq(post_wr(fc, a, 3, QSM_WR_RDMA_READ, NULL, 0, 0, 0), 0);
	ck_assert_uint_eq(expect_wc(fc, &CLI, 3, QSM_WC_SUCCESS, QSM_WR_RDMA_READ)->byte_len, 0);
	expect_none(fc);
	expect_none(fs);
	expect_bytes(local, want, sizeof(local));
	expect_qp(fc, &CLI, QSM_QP_RTS);
	expect_qp(fs, &SRV, QSM_QP_RTS);

	fc->ops->dereg_mr(rl.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

START_TEST(test_rdma_read_fetches_from_the_rkey_into_local_sges)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t remote[64], local[32] = { 0 };
	struct region rl, rr;
	struct qsm_fabric_sge scatter[2];

	connect_pair(&a, &p);
	fill(remote, sizeof(remote), 9);
	rl = reg(fc, a, local, sizeof(local), QSM_ACCESS_LOCAL_WRITE);
	rr = reg(fs, p, remote, sizeof(remote), QSM_ACCESS_REMOTE_READ);
	if (contract_fx->iwarp) {
		/* iWARP's read sink is one SGE: a Read Request names one sink STag, offset and
		 * length (RFC 5040 4.4), and siw reads sge[0] only -- a READ of 4 + 12 bytes into two
		 * SGEs would complete with byte_len 4 and leave the second SGE untouched (libsiw posts
		 * it without a word; the kernel's siw_post_send refuses num_sge != 1).  The device says
		 * max_sge_rd 1, so the fabric refuses such a READ at the post, nothing of it posted. */
		scatter[0] = sge(&rl, 20, 4);
		scatter[1] = sge(&rl, 0, 12);
		ck_assert_int_eq(post_wr(fc, a, 8, QSM_WR_RDMA_READ, scatter, 2, (uintptr_t)(remote + 48), rr.rkey), -EINVAL);
		expect_none(fc);
		expect_zero(local, sizeof(local));
		scatter[0] = sge(&rl, 4, 16);
		ck_assert_int_eq(post_wr(fc, a, 9, QSM_WR_RDMA_READ, scatter, 1, (uintptr_t)(remote + 48), rr.rkey), 0);
		ck_assert_uint_eq(expect_wc(fc, &CLI, 9, QSM_WC_SUCCESS, QSM_WR_RDMA_READ)->byte_len, 16);
		expect_none(fs);
		expect_zero(local, 4);
		expect_bytes(local + 4, remote + 48, 16);
		expect_zero(local + 20, 12);
	} else {
		scatter[0] = sge(&rl, 20, 4);
		scatter[1] = sge(&rl, 0, 12);
		ck_assert_int_eq(post_wr(fc, a, 9, QSM_WR_RDMA_READ, scatter, 2, (uintptr_t)(remote + 48), rr.rkey), 0);
		ck_assert_uint_eq(expect_wc(fc, &CLI, 9, QSM_WC_SUCCESS, QSM_WR_RDMA_READ)->byte_len, 16);
		expect_none(fs);
		expect_bytes(local + 20, remote + 48, 4);
		expect_bytes(local, remote + 52, 12);
		expect_zero(local + 12, 8);
		expect_zero(local + 24, 8);
	}

	fc->ops->dereg_mr(rl.mr);
	fs->ops->dereg_mr(rr.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

/*
 * iWARP ends a connection on a remote error: the side that finds it sends a TERMINATE (RFC 5040
 * 7) and siw closes the stream (`siw: got TERMINATE` at the peer), so each side gets DISCONNECTED
 * and its QP's receives flush; between CM events and completions there is no order (fabric.h).
 * An expected event: kind, owner and, for a completion, wr_id, status and opcode.
 */
struct want {
	int event;
	void *owner;
	uint64_t wr_id;
	enum qsm_wc_status status;
	enum qsm_wr_opcode opcode;
};
#define WANT_EV(e, o) ((struct want){ .event = (e), .owner = (o) })
#define WANT_WC(o, id, st, op) ((struct want){ .event = QSM_EV_COMPLETION, .owner = (o), .wr_id = (id), \
					       .status = (st), .opcode = (op) })

/* Every event of @f until none came for quiet_ms (within event_wait_ms in all) is one of want[0..n),
 * each of those exactly once; completions and DRAINED in want's order (one QP's order), CM and
 * async events anywhere among them.  What came is printed (the case's line, the fabric's name). */
#define expect_set(f, name, ...) expect_set_at(__LINE__, f, name, (const struct want[]){ __VA_ARGS__ }, \
					       sizeof((const struct want[]){ __VA_ARGS__ }) / sizeof(struct want))
static void expect_set_at(int line, struct qsm_fabric *f, const char *name, const struct want *want, int n)
{
	bool got[32] = { false };
	int64_t end = now_ms() + contract_fx->event_wait_ms;
	int left = n;

	ck_assert_int_le(n, 32);
	while (now_ms() < end) {
		int i, r = next_event(f, left ? (int)(end - now_ms()) : contract_fx->quiet_ms);

		if (r == -EAGAIN)
			break;
		ck_assert_msg(r == 0, "line %d: get_event %d", line, r);
		fprintf(stderr, "contract (%s) line %d %s: event %d (%s) status %d wr %llu wc status %d opcode %d\n",
			contract_fx->name, line, name, ev.event, qsm_event_name(ev.event) ? qsm_event_name(ev.event) : "?",
			ev.status, ev.event == QSM_EV_COMPLETION ? (unsigned long long)cqe.wc.wr_id : 0ull,
			ev.event == QSM_EV_COMPLETION ? (int)cqe.wc.status : 0,
			ev.event == QSM_EV_COMPLETION ? (int)cqe.wc.opcode : 0);
		for (i = 0; i < n; i++) {
			bool ordered = want[i].event == QSM_EV_COMPLETION || want[i].event == QSM_EV_DRAINED;

			if (!got[i] && want[i].event == ev.event && want[i].owner == ev.owner &&
			    (ev.event != QSM_EV_COMPLETION ||
			     (cqe.wc.wr_id == want[i].wr_id && cqe.wc.status == want[i].status &&
			      cqe.wc.opcode == want[i].opcode)))
				break;
			if (!got[i] && ordered && (ev.event == QSM_EV_COMPLETION || ev.event == QSM_EV_DRAINED)) {
				i = n;   /* the next completion due is another */
				break;
			}
		}
		ck_assert_msg(i < n, "line %d: %s: event %d (status %d, wr %llu, wc status %d) not expected", line,
			      name, ev.event, ev.status, ev.event == QSM_EV_COMPLETION ? (unsigned long long)cqe.wc.wr_id : 0ull,
			      ev.event == QSM_EV_COMPLETION ? (int)cqe.wc.status : 0);
		got[i] = true;
		left--;
	}
	ck_assert_msg(left == 0, "line %d: %s: %d expected event(s) never came", line, name, left);
}

/*
 * A drain on iWARP ends the connection: moving the QP to ERR closes its stream (siw_qp_modify to
 * ERROR drops the connection, RFC 5040's QP is bound to its stream), so the drained side gets
 * DISCONNECTED besides its flushes and DRAINED, and so does the peer.  The drained side's events
 * (the receives of @owner's QP flushed, wr_ids first..first + n - 1, then DRAINED; DISCONNECTED
 * anywhere among them) and the peer's DISCONNECTED.
 */
static void expect_iwarp_drain_at(int line, struct qsm_fabric *f, void *owner, uint64_t first, int n,
				  struct qsm_fabric *peer, void *peer_owner)
{
	struct want w[32];
	int k = 0;

	ck_assert_int_le(n, 30);
	for (int i = 0; i < n; i++)
		w[k++] = WANT_WC(owner, first + (uint64_t)i, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
	w[k++] = WANT_EV(QSM_EV_DRAINED, owner);
	w[k++] = WANT_EV(QSM_EV_DISCONNECTED, owner);
	expect_set_at(line, f, "drained", w, k);
	w[0] = WANT_EV(QSM_EV_DISCONNECTED, peer_owner);
	expect_set_at(line, peer, "drained's peer", w, 1);
}
#define expect_iwarp_drain(f, owner, first, n, peer, peer_owner) \
	expect_iwarp_drain_at(__LINE__, f, owner, first, n, peer, peer_owner)

/* The end of a case whose connection iWARP ended: both ids destroyed, nothing more comes. */
static void ended_pair_down(struct qsm_fid *a, struct qsm_fid *p)
{
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(p);
	expect_none(fc);
	expect_none(fs);
}

/* ended_pair_down() for a data case (data_pair_down()'s regions deregistered first), and the
 * listener destroyed: nothing left. */
static void ended_data_pair_down(struct qsm_fid *l, struct qsm_fid *a, struct qsm_fid *p, const struct region *rs,
				 const struct region *rd)
{
	fc->ops->dereg_mr(rs->mr);
	fs->ops->dereg_mr(rd->mr);
	ended_pair_down(a, p);
	fs->ops->destroy_id(l);
	assert_clean();
}

/* rxe's lkey is its rkey (an MR with remote access has one key), so an lkey used as an rkey
 * is no refusal there: a key that names no MR is. */
START_TEST(test_refused_rkey_is_rem_access_err_at_the_requester_and_errs_the_responder_silently)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[16] = { 1 }, dst[32] = { 0 }, rbuf[8] = { 0 };
	struct region rs, rd, rr;
	enum { NO_REMOTE_WRITE, PAST_THE_END, UNKNOWN_KEY, READ_WITHOUT_REMOTE_READ, CASES };

	for (int c = 0; c < CASES; c++) {
		enum qsm_wr_opcode op = c == READ_WITHOUT_REMOTE_READ ? QSM_WR_RDMA_READ : QSM_WR_RDMA_WRITE;
		int access = c == NO_REMOTE_WRITE ? QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_READ
						  : QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE;
		uint64_t raddr = (uintptr_t)(c == PAST_THE_END ? dst + 20 : dst);
		struct qsm_fabric_sge s;

		connect_pair(&a, &p);
		rs = reg(fc, a, src, sizeof(src), QSM_ACCESS_LOCAL_WRITE);
		rd = reg(fs, p, dst, sizeof(dst), access);
		rr = reg(fs, p, rbuf, sizeof(rbuf), QSM_ACCESS_LOCAL_WRITE);
		ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rr, 0, 8)), 0);
		s = sge(&rs, 0, sizeof(src));
		ck_assert_int_eq(post_wr(fc, a, 1, op, &s, 1, raddr, c == UNKNOWN_KEY ? rd.rkey + 0x1000 : rd.rkey), 0);
		if (contract_fx->iwarp) {
			/* iWARP: an RDMA WRITE is not acknowledged (RFC 5040): it completes at the
			 * writer once sent, SUCCESS.  The responder refuses the tagged segment with a
			 * TERMINATE and the connection ends: DISCONNECTED on both sides, the responder's
			 * receive flushed, and the responder's QP_FATAL (siw raises IB_EVENT_QP_FATAL on
			 * the side that terminates, but not for a key that names no memory at all). */
			if (op == QSM_WR_RDMA_READ) {
				/* A soft-iWARP defect (6.1): siw never checks a READ's source for remote
				 * read (siw_qp_tx takes a READ response's memory with no access bits), so
				 * the READ succeeds and the bytes are read; the connection stays. */
				expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, op);
				expect_none(fc);
				expect_none(fs);
				expect_zero(src, sizeof(src));
				fc->ops->dereg_mr(rs.mr);
				fs->ops->dereg_mr(rd.mr);
				fs->ops->dereg_mr(rr.mr);
				fs->ops->destroy_id(p);   /* its receive goes with it, no completion */
				expect(fc, QSM_EV_DISCONNECTED, &CLI);
				fc->ops->destroy_id(a);
				expect_none(fc);
				expect_none(fs);
				continue;
			}
			expect_set(fc, "writer", WANT_WC(&CLI, 1, QSM_WC_SUCCESS, op), WANT_EV(QSM_EV_DISCONNECTED, &CLI));
			if (c == UNKNOWN_KEY)
				expect_set(fs, "responder", WANT_WC(&SRV, 100, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV),
					   WANT_EV(QSM_EV_DISCONNECTED, &SRV));
			else
				expect_set(fs, "responder", WANT_WC(&SRV, 100, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV),
					   WANT_EV(QSM_EV_DISCONNECTED, &SRV), WANT_EV(QSM_EV_QP_FATAL, &SRV));
			expect_zero(dst, sizeof(dst));
			expect_zero(rbuf, sizeof(rbuf));
			fc->ops->dereg_mr(rs.mr);
			fs->ops->dereg_mr(rd.mr);
			fs->ops->dereg_mr(rr.mr);
			ended_pair_down(a, p);
			continue;
		}
		/* A completion only: the QP's WC_ERROR is the runtime's to make, not the fabric's. */
		expect_wc(fc, &CLI, 1, QSM_WC_REM_ACCESS_ERR, op);
		expect_none(fc);
		/* The responder's QP goes to ERR as rxe does it: no async event (no QP_FATAL), only
		 * its posted receives flush. */
		expect_wc(fs, &SRV, 100, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
		expect_none(fs);
		expect_qp(fc, &CLI, QSM_QP_ERR);
		expect_qp(fs, &SRV, QSM_QP_ERR);
		expect_zero(dst, sizeof(dst));
		expect_zero(rbuf, sizeof(rbuf));
		fc->ops->dereg_mr(rs.mr);
		fs->ops->dereg_mr(rd.mr);
		fs->ops->dereg_mr(rr.mr);
		pair_down(NULL, a, p);
	}
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

/* What rxe reports (6.1, measured): the responder's copy fails, LOC_QP_OP_ERR, and the
 * requester gets REM_OP_ERR; hardware may say LOC_LEN_ERR and REM_INV_REQ_ERR. */
START_TEST(test_message_larger_than_the_recv_is_loc_qp_op_err_at_the_receiver_and_rem_op_err_at_the_sender)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[16] = { 1, 2, 3 }, dst[72] = { 0 };
	struct region rs, rd;

	connect_pair(&a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, 8)), 0);
	ck_assert_int_eq(post_recv1(fs, p, 101, sge(&rd, 8, 64)), 0);
	ck_assert_int_eq(post_send1(fc, a, 1, sge(&rs, 0, 16)), 0);
	if (contract_fx->iwarp) {
		/* iWARP: the send completes once sent; the receiver's placement fails, it completes
		 * the receive in error (siw: LOC_LEN_ERR), raises QP_FATAL, sends a TERMINATE and the
		 * connection ends. */
		expect_set(fs, "receiver", WANT_WC(&SRV, 100, QSM_WC_LOC_LEN_ERR, QSM_WR_RECV),
			   WANT_WC(&SRV, 101, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV), WANT_EV(QSM_EV_DISCONNECTED, &SRV),
			   WANT_EV(QSM_EV_QP_FATAL, &SRV));
		expect_set(fc, "sender", WANT_WC(&CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND),
			   WANT_EV(QSM_EV_DISCONNECTED, &CLI));
		expect_zero(dst, sizeof(dst));
		ended_data_pair_down(l, a, p, &rs, &rd);
		return;
	}
	/* The receiver completes the recv in error, then its QP's other recvs flush. */
	expect_wc(fs, &SRV, 100, QSM_WC_LOC_QP_OP_ERR, QSM_WR_RECV);
	ck_assert_uint_eq(cqe.wc.byte_len, 0);
	/* Completions only, no WC_ERROR between them (the runtime makes that). */
	expect_wc(fs, &SRV, 101, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
	expect_none(fs);
	expect_wc(fc, &CLI, 1, QSM_WC_REM_OP_ERR, QSM_WR_SEND);
	expect_none(fc);
	expect_qp(fc, &CLI, QSM_QP_ERR);
	expect_qp(fs, &SRV, QSM_QP_ERR);
	expect_zero(dst, sizeof(dst));

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

/* rxe (6.1, measured) as for a receive too short: LOC_QP_OP_ERR and REM_OP_ERR; hardware
 * may say LOC_PROT_ERR at the receiver. */
START_TEST(test_recv_whose_lkey_does_not_grant_local_write_is_loc_qp_op_err_when_a_send_lands)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[8] = { 1 }, dst[8] = { 0 };
	struct region rs, rd;

	connect_pair(&a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_REMOTE_READ);
	/* Like hardware, the post succeeds: the key is checked when data is placed. */
	ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, 8)), 0);
	expect_none(fs);
	ck_assert_int_eq(post_send1(fc, a, 1, sge(&rs, 0, 8)), 0);
	if (contract_fx->iwarp) {
		/* iWARP: the send completes once sent; the receiver's placement is refused (siw
		 * completes the receive GENERAL_ERR), it raises QP_FATAL, sends a TERMINATE and the
		 * connection ends. */
		expect_set(fs, "receiver", WANT_WC(&SRV, 100, QSM_WC_GENERAL_ERR, QSM_WR_RECV),
			   WANT_EV(QSM_EV_DISCONNECTED, &SRV), WANT_EV(QSM_EV_QP_FATAL, &SRV));
		expect_set(fc, "sender", WANT_WC(&CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND),
			   WANT_EV(QSM_EV_DISCONNECTED, &CLI));
		expect_zero(dst, sizeof(dst));
		ended_data_pair_down(l, a, p, &rs, &rd);
		return;
	}
	expect_wc(fs, &SRV, 100, QSM_WC_LOC_QP_OP_ERR, QSM_WR_RECV);
	expect_none(fs);   /* no WC_ERROR from the fabric */
	expect_wc(fc, &CLI, 1, QSM_WC_REM_OP_ERR, QSM_WR_SEND);
	expect_none(fc);
	expect_qp(fs, &SRV, QSM_QP_ERR);
	expect_zero(dst, sizeof(dst));

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_unsignaled_send_completes_only_at_the_receiver)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[8] = { 4, 3, 2, 1 }, dst[16] = { 0 };
	struct region rs, rd;
	struct qsm_fabric_sge s;

	connect_pair(&a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, 8)), 0);
	ck_assert_int_eq(post_recv1(fs, p, 101, sge(&rd, 8, 8)), 0);
	s = sge(&rs, 0, 4);
	ck_assert_int_eq(fc->ops->post_send(a, &(struct qsm_fabric_wr){ .wr_id = 1, .opcode = QSM_WR_SEND,
									 .sg_list = &s, .num_sge = 1 }, 1, NULL), 0);
	ck_assert_uint_eq(expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV)->byte_len, 4);
	expect_bytes(dst, src, 4);
	expect_none(fc);
	ck_assert_int_eq(post_send1(fc, a, 2, sge(&rs, 0, 8)), 0);
	expect_wc(fs, &SRV, 101, QSM_WC_SUCCESS, QSM_WR_RECV);
	expect_wc(fc, &CLI, 2, QSM_WC_SUCCESS, QSM_WR_SEND);
	expect_none(fc);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_drain_flushes_posted_recvs_in_post_order_before_drained)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t dst[24] = { 0 };
	struct region rd;

	connect_pair(&a, &p);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(post_recv1(fs, p, 100 + i, sge(&rd, 8 * i, 8)), 0);
	ck_assert_int_eq(fs->ops->drain(p), 0);
	if (contract_fx->iwarp) {
		expect_iwarp_drain(fs, &SRV, 100, 3, fc, &CLI);
		expect_nothing_pending();
		fs->ops->dereg_mr(rd.mr);
		ended_pair_down(a, p);
		fs->ops->destroy_id(l);
		assert_clean();
		return;
	}
	for (int i = 0; i < 3; i++)
		expect_wc(fs, &SRV, 100 + i, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
	/* The marker flushes last and is no completion: DRAINED is. Flushes are no WC_ERROR. */
	expect(fs, QSM_EV_DRAINED, &SRV);
	expect_none(fs);
	expect_none(fc);
	expect_nothing_pending();

	fs->ops->dereg_mr(rd.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

/* One completion flush_qp wrote: the receive `wr_id` of `owner`'s id, flushed. */
static void expect_flushed_at(int line, const struct qsm_fabric_cqe *c, void *owner, uint64_t wr_id)
{
	ck_assert_msg(c->owner == owner && c->wc.wr_id == wr_id && c->wc.status == QSM_WC_WR_FLUSH_ERR &&
		      c->wc.opcode == QSM_WR_RECV, "line %d: wr %llu status %d opcode %d, expected wr %llu "
		      "flushed", line, (unsigned long long)c->wc.wr_id, c->wc.status, c->wc.opcode,
		      (unsigned long long)wr_id);
}
#define expect_flushed(c, owner, wr_id) expect_flushed_at(__LINE__, c, owner, wr_id)

START_TEST(test_flush_qp_takes_what_the_qp_holds_once_and_nothing_comes_for_it_after)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t sbuf[16] = { 0 }, cbuf[16] = { 0 };
	struct qsm_fabric_cqe c[4];
	struct region rs, rc;

	connect_pair(&a, &p);
	rs = reg(fs, p, sbuf, sizeof(sbuf), QSM_ACCESS_LOCAL_WRITE);
	rc = reg(fc, a, cbuf, sizeof(cbuf), QSM_ACCESS_LOCAL_WRITE);
	/* a QP in RTS: its receives, flushed, in post order, as many per call as asked for */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(post_recv1(fs, p, 100 + i, sge(&rs, 4 * i, 4)), 0);
	ck_assert_int_eq(fs->ops->flush_qp(p, c, 2), 2);
	expect_flushed(&c[0], &SRV, 100);
	expect_flushed(&c[1], &SRV, 101);
	ck_assert_int_eq(fs->ops->flush_qp(p, c, 4), 1);
	expect_flushed(&c[0], &SRV, 102);
	ck_assert_int_eq(fs->ops->flush_qp(p, c, 4), 0);
	expect_none(fs);
	/* a drain under way: its flushes taken now; neither the device's (stale) nor DRAINED after */
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(post_recv1(fc, a, 200 + i, sge(&rc, 4 * i, 4)), 0);
	ck_assert_int_eq(fc->ops->drain(a), 0);
	ck_assert_int_eq(fc->ops->flush_qp(a, c, 4), 2);
	expect_flushed(&c[0], &CLI, 200);
	expect_flushed(&c[1], &CLI, 201);
	ck_assert_int_eq(fc->ops->flush_qp(a, c, 4), 0);
	if (contract_fx->iwarp) {
		/* the drain ended the connection (expect_iwarp_drain): its DISCONNECTED on both sides */
		expect_set(fc, "drained", WANT_EV(QSM_EV_DISCONNECTED, &CLI));
		expect_set(fs, "drained's peer", WANT_EV(QSM_EV_DISCONNECTED, &SRV));
		fs->ops->destroy_id(p);
	} else {
		expect_none(fc);
		fs->ops->destroy_id(p);
		expect(fc, QSM_EV_DISCONNECTED, &CLI);
		ck_assert_int_eq(fc->ops->disconnect(a), 0);
		expect_timewait_exit(fc, &CLI);
	}
	fs->ops->dereg_mr(rs.mr);
	fc->ops->dereg_mr(rc.mr);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

START_TEST(test_post_after_err_returns_0_and_completes_with_flush_err)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t buf[8] = { 0 };
	struct region r;
	struct qsm_fabric_sge s;

	connect_pair(&a, &p);
	r = reg(fc, a, buf, sizeof(buf), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE);
	ck_assert_int_eq(fc->ops->drain(a), 0);
	if (contract_fx->iwarp)
		expect_iwarp_drain(fc, &CLI, 0, 0, fs, &SRV);
	else
		expect(fc, QSM_EV_DRAINED, &CLI);
	s = sge(&r, 0, 8);
	ck_assert_int_eq(post_recv1(fc, a, 100, s), 0);
	ck_assert_int_eq(post_send1(fc, a, 1, s), 0);
	/* Unsignaled too: the ULP always gets its buffers back. */
	ck_assert_int_eq(fc->ops->post_send(a, &(struct qsm_fabric_wr){ .wr_id = 2, .opcode = QSM_WR_RDMA_WRITE,
									 .sg_list = &s, .num_sge = 1 }, 1, NULL), 0);
	ck_assert_int_eq(post_wr(fc, a, 3, QSM_WR_RDMA_READ, &s, 1, (uintptr_t)buf, r.rkey), 0);
	expect_wc(fc, &CLI, 100, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
	expect_wc(fc, &CLI, 1, QSM_WC_WR_FLUSH_ERR, QSM_WR_SEND);
	expect_wc(fc, &CLI, 2, QSM_WC_WR_FLUSH_ERR, QSM_WR_RDMA_WRITE);
	expect_wc(fc, &CLI, 3, QSM_WC_WR_FLUSH_ERR, QSM_WR_RDMA_READ);
	expect_none(fc);
	expect_none(fs);

	fc->ops->dereg_mr(r.mr);
	if (contract_fx->iwarp) {
		ended_pair_down(a, p);
		fs->ops->destroy_id(l);
	} else {
		pair_down(l, a, p);
	}
	assert_clean();
}
END_TEST

START_TEST(test_post_send_needs_an_established_qp_and_post_recv_works_from_init)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT);
	struct qsm_fid *a = active_ready(&CLI, A_IP, B_IP, PORT), *p, *bare;
	uint8_t cbuf[8] = { 0 }, sbuf[8] = { 8, 7, 6, 5, 4, 3, 2, 1 };
	struct region rc, rsv;

	rc = reg(fc, a, cbuf, sizeof(cbuf), QSM_ACCESS_LOCAL_WRITE);
	expect_qp(fc, &CLI, QSM_QP_INIT);
	ck_assert_int_eq(post_send1(fc, a, 1, sge(&rc, 0, 8)), -EINVAL);
	ck_assert_int_eq(post_recv1(fc, a, 100, sge(&rc, 0, 8)), 0);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	p = take_request(&LIS, &SRV);
	rsv = reg(fs, p, sbuf, sizeof(sbuf), 0);
	/* The passive QP is RTR at most until the accept: no sends yet. */
	ck_assert_int_eq(post_send1(fs, p, 2, sge(&rsv, 0, 8)), -EINVAL);
	expect_none(fc);
	expect_none(fs);
	ck_assert_int_eq(fs->ops->accept(p, NULL, 0), 0);
	expect(fc, QSM_EV_ESTABLISHED, &CLI);
	expect(fs, QSM_EV_ESTABLISHED, &SRV);
	/* The recv posted before the connection came up takes the first message. */
	ck_assert_int_eq(post_send1(fs, p, 2, sge(&rsv, 0, 8)), 0);
	ck_assert_uint_eq(expect_wc(fc, &CLI, 100, QSM_WC_SUCCESS, QSM_WR_RECV)->byte_len, 8);
	expect_bytes(cbuf, sbuf, 8);
	expect_wc(fs, &SRV, 2, QSM_WC_SUCCESS, QSM_WR_SEND);

	/* No QP, no posting. */
	ck_assert_int_eq(fc->ops->create_id(fc, &CLI2, &bare), 0);
	ck_assert_int_eq(post_recv1(fc, bare, 1, sge(&rc, 0, 8)), -EINVAL);
	ck_assert_int_eq(post_send1(fc, bare, 1, sge(&rc, 0, 8)), -EINVAL);
	fc->ops->destroy_id(bare);

	fc->ops->dereg_mr(rc.mr);
	fs->ops->dereg_mr(rsv.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

START_TEST(test_destroy_id_discards_outstanding_recvs_without_completions)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t dst[8] = { 0 };
	struct region rd;

	connect_pair(&a, &p);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, 8)), 0);
	fs->ops->destroy_id(p);
	expect_none(fs);
	expect(fc, QSM_EV_DISCONNECTED, &CLI);
	/* as every ULP does on DISCONNECTED: the kernel answers the DREQ (DREP) and enters timewait only now */
	ck_assert_int_eq(fc->ops->disconnect(a), 0);
	expect_timewait_exit(fc, &CLI);
	fs->ops->dereg_mr(rd.mr);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	assert_clean();
}
END_TEST

/* ---- work queue accounting, lists, inline and immediate data ---- */

/* A signaled or unsignaled RDMA WRITE of `len` bytes from src to the region `rd` of the peer. */
static struct qsm_fabric_wr write_wr(uint64_t wr_id, const struct qsm_fabric_sge *s, const struct region *rd,
				     unsigned flags)
{
	return (struct qsm_fabric_wr){ .wr_id = wr_id, .opcode = QSM_WR_RDMA_WRITE, .sg_list = s,
				       .num_sge = 1, .remote_addr = (uintptr_t)rd->mem, .rkey = rd->rkey,
				       .flags = flags };
}

START_TEST(test_send_queue_holds_max_send_wr_until_their_completions_are_taken)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[8] = { 1, 2, 3 }, dst[8] = { 0 };
	struct region rs, rd;
	struct qsm_fabric_sge s;
	struct qsm_fabric_wr wr;
	unsigned n = qp_attr.max_send_wr;

	connect_pair(&a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE);
	s = sge(&rs, 0, 8);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(post_wr(fc, a, 1 + i, QSM_WR_RDMA_WRITE, &s, 1, (uintptr_t)dst, rd.rkey), 0);
	/* Full: refused, not posted, whatever the kind. */
	ck_assert_int_eq(post_wr(fc, a, 99, QSM_WR_RDMA_WRITE, &s, 1, (uintptr_t)dst, rd.rkey), -ENOBUFS);
	ck_assert_int_eq(post_send1(fc, a, 99, s), -ENOBUFS);
	ck_assert_int_eq(post_wr(fc, a, 99, QSM_WR_RDMA_READ, &s, 0, (uintptr_t)dst, rd.rkey), -ENOBUFS);
	for (unsigned i = 0; i < n; i++)
		expect_wc(fc, &CLI, 1 + i, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_none(fc);

	/* Unsignaled WRs hold their slots until a later one's completion is taken. */
	for (unsigned i = 0; i < n - 1; i++) {
		wr = write_wr(100 + i, &s, &rd, 0);
		ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), 0);
	}
	wr = write_wr(200, &s, &rd, QSM_POST_SIGNALED);
	ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), 0);
	ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), -ENOBUFS);
	expect_wc(fc, &CLI, 200, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_none(fc);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(post_wr(fc, a, 300 + i, QSM_WR_RDMA_WRITE, &s, 1, (uintptr_t)dst, rd.rkey), 0);
	ck_assert_int_eq(post_wr(fc, a, 399, QSM_WR_RDMA_WRITE, &s, 1, (uintptr_t)dst, rd.rkey), -ENOBUFS);
	for (unsigned i = 0; i < n; i++)
		expect_wc(fc, &CLI, 300 + i, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_bytes(dst, src, 8);
	expect_none(fc);
	expect_none(fs);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_drain_frees_the_slots_of_unsignaled_sends_without_a_completion)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[8] = { 9 }, dst[8] = { 0 };
	struct region rs, rd;
	struct qsm_fabric_sge s;
	struct qsm_fabric_wr wr;

	connect_pair(&a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE);
	s = sge(&rs, 0, 8);
	for (int i = 0; i < 3; i++) {
		wr = write_wr(1 + i, &s, &rd, 0);
		ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), 0);
	}
	expect_none(fc);
	/* They succeeded: the drain's end frees them, and reports none (only errors come back). */
	ck_assert_int_eq(fc->ops->drain(a), 0);
	if (contract_fx->iwarp) {
		expect_iwarp_drain(fc, &CLI, 0, 0, fs, &SRV);
		expect_bytes(dst, src, 8);
		ended_data_pair_down(l, a, p, &rs, &rd);
		return;
	}
	expect(fc, QSM_EV_DRAINED, &CLI);
	expect_none(fc);
	expect_bytes(dst, src, 8);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_full_receive_queue_is_enobufs_until_a_receive_completion_is_taken)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[4] = { 7 }, dst[4] = { 0 };
	struct region rs, rd;
	unsigned n = qp_attr.max_recv_wr;

	connect_pair(&a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(post_recv1(fs, p, 100 + i, sge(&rd, 0, 4)), 0);
	ck_assert_int_eq(post_recv1(fs, p, 199, sge(&rd, 0, 4)), -ENOBUFS);
	ck_assert_int_eq(post_send1(fc, a, 1, sge(&rs, 0, 4)), 0);
	expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV);
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND);
	ck_assert_int_eq(post_recv1(fs, p, 200, sge(&rd, 0, 4)), 0);
	ck_assert_int_eq(post_recv1(fs, p, 201, sge(&rd, 0, 4)), -ENOBUFS);
	expect_none(fs);
	ck_assert_int_eq(fs->ops->drain(p), 0);
	if (contract_fx->iwarp) {
		struct want w[32];
		int k = 0;

		/* the drain ends the connection (expect_iwarp_drain), its DISCONNECTED among these */
		for (unsigned i = 1; i < n; i++)
			w[k++] = WANT_WC(&SRV, 100 + i, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
		w[k++] = WANT_WC(&SRV, 200, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
		w[k++] = WANT_EV(QSM_EV_DRAINED, &SRV);
		w[k++] = WANT_EV(QSM_EV_DISCONNECTED, &SRV);
		expect_set_at(__LINE__, fs, "drained", w, k);
		expect_set(fc, "drained's peer", WANT_EV(QSM_EV_DISCONNECTED, &CLI));
		ended_data_pair_down(l, a, p, &rs, &rd);
		return;
	}
	for (unsigned i = 1; i < n; i++)
		expect_wc(fs, &SRV, 100 + i, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
	expect_wc(fs, &SRV, 200, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
	expect(fs, QSM_EV_DRAINED, &SRV);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

START_TEST(test_list_posts_in_order_and_a_too_long_list_posts_none)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[16], dst[3 * 8] = { 0 }, wdst[16] = { 0 };
	struct region rs, rd, rw;
	struct qsm_fabric_sge s[4];
	struct qsm_fabric_wr wrs[17];
	int posted = -1;

	connect_pair(&a, &p);
	fill(src, sizeof(src), 3);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	rw = reg(fs, p, wdst, sizeof(wdst), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(post_recv1(fs, p, 100 + i, sge(&rd, 8 * i, 8)), 0);
		s[i] = sge(&rs, i, i + 1);
		wrs[i] = (struct qsm_fabric_wr){ .wr_id = 1 + i, .opcode = QSM_WR_SEND, .sg_list = &s[i],
						 .num_sge = 1, .flags = QSM_POST_SIGNALED };
	}
	s[3] = sge(&rs, 0, 16);
	wrs[3] = write_wr(4, &s[3], &rw, QSM_POST_SIGNALED);

	/* (A bad WR is the runtime's door's to refuse, before any fabric: tests/check_data.c.)
	 * More than the send queue has room for: nothing is posted. */
	for (int i = 4; i < 17; i++)
		wrs[i] = write_wr(10 + i, &s[3], &rw, QSM_POST_SIGNALED);
	ck_assert_int_eq(fc->ops->post_send(a, wrs, (int)qp_attr.max_send_wr + 1, &posted), -ENOBUFS);
	ck_assert_int_eq(posted, 0);
	expect_none(fs);
	expect_none(fc);

	ck_assert_int_eq(fc->ops->post_send(a, wrs, 4, &posted), 0);
	ck_assert_int_eq(posted, 4);
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(expect_wc(fs, &SRV, 100 + i, QSM_WC_SUCCESS, QSM_WR_RECV)->byte_len, i + 1);
		ck_assert_uint_eq(cqe.wc.wc_flags, 0);
		expect_bytes(dst + 8 * i, src + i, i + 1);
	}
	for (int i = 0; i < 3; i++)
		expect_wc(fc, &CLI, 1 + i, QSM_WC_SUCCESS, QSM_WR_SEND);
	expect_wc(fc, &CLI, 4, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_bytes(wdst, src, 16);
	ck_assert_int_eq(fc->ops->post_send(a, wrs, 0, &posted), 0);
	ck_assert_int_eq(posted, 0);
	expect_none(fs);
	expect_none(fc);

	fc->ops->dereg_mr(rs.mr);
	fs->ops->dereg_mr(rd.mr);
	fs->ops->dereg_mr(rw.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

/*
 * fabric.h: "Only the device may refuse part way: *posted says how many went".  The checks a
 * fabric leaves to the device are a WR's SGEs against the QP's max_send_sge and its inline
 * data against the QP's max_inline_data: rdmacm gives the list to verbs and rxe's provider
 * (validate_send_wr: num_sge > sq->max_sge) refuses that WR with the ones before it already on
 * the send queue; the sim's device does the same.  (The runtime checks every WR, SGEs against
 * the class's caps included, before any of this: qsm_conn_post_list() is all or nothing.)
 * max_inline_data 0: rxe sizes a WQE for max(max_send_sge SGEs, max_inline_data bytes), so
 * the QP's max_sge stays 1.
 */
START_TEST(test_device_refusing_a_wr_part_way_posts_the_prefix_only_and_holds_only_its_slots)
{
	static const struct qsm_fabric_qp_attr one_sge = { .max_send_wr = 8, .max_recv_wr = 8,
							   .max_send_sge = 1, .max_recv_sge = 1 };
	enum { N = 6, PREFIX = 3, DEPTH = 8 };
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[4 * N], dst[4 * N] = { 0 }, zero[4 * N] = { 0 };
	struct region rs, rd;
	struct qsm_fabric_sge s[N], two[2], s0;
	struct qsm_fabric_wr wrs[DEPTH + 1];
	int posted = -1, r;

	connect_pair_caps(&a, &p, &one_sge);
	fill(src, sizeof(src), 5);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE);
	/* WR i writes src[4i..4i+4) to dst[4i..4i+4): what landed tells which WRs ran. */
	for (int i = 0; i < N; i++) {
		s[i] = sge(&rs, 4 * (size_t)i, 4);
		wrs[i] = write_wr(1 + (uint64_t)i, &s[i], &rd, QSM_POST_SIGNALED);
		wrs[i].remote_addr += 4 * (uint64_t)i;
	}
	wrs[1].flags = 0;   /* unsignaled in the prefix: its slot comes back with WR 3's completion */
	/* WR 4 (index PREFIX): the same 4 bytes in two SGEs, one more than the QP takes.  libsiw
	 * checks SGEs against its SIW_MAX_SGE (6) only, not the QP's: on iWARP the WR the device
	 * refuses is a WRITE_WITH_IMM (no immediate data on iWARP: -EINVAL). */
	two[0] = sge(&rs, 4 * PREFIX, 2);
	two[1] = sge(&rs, 4 * PREFIX + 2, 2);
	wrs[PREFIX].sg_list = two;
	wrs[PREFIX].num_sge = 2;
	if (contract_fx->iwarp) {
		wrs[PREFIX].num_sge = 1;
		wrs[PREFIX].opcode = QSM_WR_RDMA_WRITE_WITH_IMM;
	}

	r = fc->ops->post_send(a, wrs, N, &posted);
	ck_assert_msg(r < 0, "a list refused part way returned %d", r);
	ck_assert_int_eq(posted, PREFIX);
	/* A refused post leaves the QP as it was. */
	expect_qp(fc, &CLI, QSM_QP_RTS);
	/* Only the prefix's slots are held (no completion taken yet): DEPTH - PREFIX more fit,
	 * one more does not. */
	s0 = sge(&rs, 0, 4);
	for (int i = 0; i <= DEPTH; i++)
		wrs[i] = write_wr(100 + (uint64_t)i, &s0, &rd, QSM_POST_SIGNALED);
	ck_assert_int_eq(fc->ops->post_send(a, wrs, DEPTH - PREFIX + 1, &posted), -ENOBUFS);
	ck_assert_int_eq(posted, 0);
	ck_assert_int_eq(fc->ops->post_send(a, wrs, DEPTH - PREFIX, &posted), 0);
	ck_assert_int_eq(posted, DEPTH - PREFIX);
	/* Exactly the prefix's signaled WRs complete, then the later list's; the refused WR and
	 * those behind it never do. */
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_wc(fc, &CLI, 3, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	for (int i = 0; i < DEPTH - PREFIX; i++)
		expect_wc(fc, &CLI, 100 + (uint64_t)i, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_none(fc);
	expect_none(fs);
	/* (the later list wrote src[0..4) over dst[0..4), as WR 1 had) */
	expect_bytes(dst, src, 4 * PREFIX);
	expect_bytes(dst + 4 * PREFIX, zero, 4 * (N - PREFIX));

	/* Every slot is free again: a full-depth list goes, one WR more does not. */
	for (int i = 0; i <= DEPTH; i++)
		wrs[i] = write_wr(200 + (uint64_t)i, &s0, &rd, QSM_POST_SIGNALED);
	ck_assert_int_eq(fc->ops->post_send(a, wrs, DEPTH + 1, &posted), -ENOBUFS);
	ck_assert_int_eq(posted, 0);
	ck_assert_int_eq(fc->ops->post_send(a, wrs, DEPTH, &posted), 0);
	ck_assert_int_eq(posted, DEPTH);
	for (int i = 0; i < DEPTH; i++)
		expect_wc(fc, &CLI, 200 + (uint64_t)i, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_none(fc);
	expect_bytes(dst + 4 * PREFIX, zero, 4 * (N - PREFIX));

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

/* soft-iWARP's bound is its own: libsiw copies up to SIW_MAX_INLINE (80) bytes whatever the QP
 * asked for (push_send_wqe), so 65 bytes post and arrive there and 81 are refused. */
#define SIW_MAX_INLINE 80

START_TEST(test_inline_data_is_copied_at_post_needs_no_lkey_and_is_bounded_by_max_inline_data)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[96], want[96], dst[96] = { 0 }, wdst[96] = { 0 };
	struct region rd, rw;
	struct qsm_fabric_sge s = { .addr = (uintptr_t)src, .length = qp_attr.max_inline_data, .lkey = 0 };
	struct qsm_fabric_wr wr = { .wr_id = 1, .opcode = QSM_WR_SEND, .sg_list = &s, .num_sge = 1,
				    .flags = QSM_POST_SIGNALED | QSM_POST_INLINE };

	connect_pair(&a, &p);
	fill(src, sizeof(src), 11);
	memcpy(want, src, sizeof(want));
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	rw = reg(fs, p, wdst, sizeof(wdst), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE);
	ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, sizeof(dst))), 0);

	/* One byte beyond max_inline_data: the device refuses the WR (rxe's provider, with the
	 * max_inline it gave these caps: 64, as asked; the sim's device alike), nothing posted.
	 * (Inline on a READ is the runtime's door's to refuse: tests/check_data.c.) */
	s.length = qp_attr.max_inline_data + 1;
	if (contract_fx->iwarp) {
		ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), 0);
		ck_assert_uint_eq(expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV)->byte_len, s.length);
		expect_bytes(dst, want, s.length);
		expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND);
		memset(dst, 0, sizeof(dst));
		s.length = SIW_MAX_INLINE + 1;
		ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), -EINVAL);
		ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, sizeof(dst))), 0);
	} else {
		ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), -EINVAL);
	}
	expect_none(fs);
	expect_none(fc);

	/* Unregistered memory (lkey 0), changed right after the post: the copy was taken. */
	s.length = qp_attr.max_inline_data;
	ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), 0);
	memset(src, 0xee, sizeof(src));
	ck_assert_uint_eq(expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV)->byte_len, qp_attr.max_inline_data);
	expect_bytes(dst, want, qp_attr.max_inline_data);
	expect_zero(dst + qp_attr.max_inline_data, sizeof(dst) - qp_attr.max_inline_data);
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND);

	memcpy(src, want, sizeof(src));
	wr = write_wr(2, &s, &rw, QSM_POST_SIGNALED | QSM_POST_INLINE);
	s.length = 24;
	ck_assert_int_eq(fc->ops->post_send(a, &wr, 1, NULL), 0);
	memset(src, 0xee, sizeof(src));
	expect_wc(fc, &CLI, 2, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_bytes(wdst, want, 24);
	expect_zero(wdst + 24, sizeof(wdst) - 24);
	expect_none(fs);
	expect_none(fc);

	fs->ops->dereg_mr(rd.mr);
	fs->ops->dereg_mr(rw.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

START_TEST(test_immediate_data_reaches_the_receive_of_a_send_and_of_a_write_with_imm)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[32], dst[32] = { 0 }, wdst[32] = { 0 };
	struct region rs, rd, rw;
	struct qsm_fabric_sge s[2];
	struct qsm_fabric_wr wrs[2];
	struct qsm_fabric_wc *wc;

	connect_pair(&a, &p);
	fill(src, sizeof(src), 21);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	rw = reg(fs, p, wdst, sizeof(wdst), QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE);
	ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, 16)), 0);
	ck_assert_int_eq(post_recv1(fs, p, 101, sge(&rd, 16, 16)), 0);
	s[0] = sge(&rs, 0, 12);
	s[1] = sge(&rs, 8, 20);
	wrs[0] = (struct qsm_fabric_wr){ .wr_id = 1, .opcode = QSM_WR_SEND_WITH_IMM, .sg_list = &s[0],
					 .num_sge = 1, .flags = QSM_POST_SIGNALED, .imm_data = 0x12345678 };
	wrs[1] = write_wr(2, &s[1], &rw, QSM_POST_SIGNALED);
	wrs[1].opcode = QSM_WR_RDMA_WRITE_WITH_IMM;
	wrs[1].remote_addr = (uintptr_t)(wdst + 4);
	wrs[1].imm_data = 0xfedcba98;
	if (contract_fx->iwarp) {
		int posted = -1;

		/* iWARP (RFC 5040) has no immediate data: libsiw maps both opcodes to none it has
		 * and refuses the WR, -EINVAL, nothing posted; the receives stay for what comes. */
		ck_assert_int_eq(fc->ops->post_send(a, &wrs[1], 1, &posted), -EINVAL);
		ck_assert_int_eq(posted, 0);
		ck_assert_int_eq(fc->ops->post_send(a, wrs, 2, &posted), -EINVAL);
		ck_assert_int_eq(posted, 0);
		expect_none(fs);
		expect_none(fc);
		ck_assert_int_eq(post_send1(fc, a, 3, s[0]), 0);
		ck_assert_uint_eq(expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV)->byte_len, 12);
		ck_assert_uint_eq(cqe.wc.wc_flags, 0);
		expect_wc(fc, &CLI, 3, QSM_WC_SUCCESS, QSM_WR_SEND);
		/* the drain flushes the other receive before DRAINED (and ends the connection) */
		ck_assert_int_eq(fs->ops->drain(p), 0);
		expect_iwarp_drain(fs, &SRV, 101, 1, fc, &CLI);
		expect_bytes(dst, src, 12);
		expect_zero(dst + 16, 16);
		expect_zero(wdst, sizeof(wdst));
		fs->ops->dereg_mr(rw.mr);
		ended_data_pair_down(l, a, p, &rs, &rd);
		return;
	}
	ck_assert_int_eq(fc->ops->post_send(a, wrs, 2, NULL), 0);

	wc = expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV);
	ck_assert_uint_eq(wc->byte_len, 12);
	ck_assert_uint_eq(wc->wc_flags, QSM_WC_WITH_IMM);
	ck_assert_uint_eq(wc->imm_data, 0x12345678);
	ck_assert_uint_eq(wc->invalidated_rkey, 0);
	expect_bytes(dst, src, 12);
	/* The write consumed the next receive: its memory untouched, the length written reported. */
	wc = expect_wc(fs, &SRV, 101, QSM_WC_SUCCESS, QSM_WR_RECV_RDMA_WITH_IMM);
	ck_assert_uint_eq(wc->byte_len, 20);
	ck_assert_uint_eq(wc->wc_flags, QSM_WC_WITH_IMM);
	ck_assert_uint_eq(wc->imm_data, 0xfedcba98);
	expect_zero(dst + 16, 16);
	expect_zero(wdst, 4);
	expect_bytes(wdst + 4, src + 8, 20);
	expect_zero(wdst + 24, 8);
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND_WITH_IMM);
	ck_assert_uint_eq(cqe.wc.wc_flags, 0);
	expect_wc(fc, &CLI, 2, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE_WITH_IMM);
	expect_none(fs);
	expect_none(fc);

	fc->ops->dereg_mr(rs.mr);
	fs->ops->dereg_mr(rd.mr);
	fs->ops->dereg_mr(rw.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

/* Up to max completions of f within @ms, as get_event() hands them out: n > 0, 0 (*ev filled),
 * or -EAGAIN. */
static int next_batch(struct qsm_fabric *f, struct qsm_fabric_cqe *c, int max, int ms)
{
	int64_t end = now_ms() + ms;
	int r;

	for (;;) {
		r = f->ops->get_event(f, &ev, c, max);
		if (r != -EAGAIN || now_ms() >= end)
			return r;
		wait_readable(f, (int)(end - now_ms()));
	}
}

/* Take n completions of `owner` in batches of at most max; their wr_ids are first, first + 1.. */
static void expect_batches(struct qsm_fabric *f, void *owner, int n, int max, uint64_t first,
			   enum qsm_wc_status status, enum qsm_wr_opcode opcode)
{
	struct qsm_fabric_cqe c[QSM_FABRIC_CQE_BATCH];
	int got = 0;

	while (got < n) {
		int r = next_batch(f, c, max, contract_fx->event_wait_ms);

		ck_assert_msg(r > 0 && r <= max, "completion %d of %d: get_event gave %d (max %d)", got, n, r, max);
		ck_assert_msg(got + r <= n, "%d completions, expected %d", got + r, n);
		for (int i = 0; i < r; i++, got++) {
			ck_assert_ptr_eq(c[i].owner, owner);
			ck_assert_uint_eq(c[i].wc.wr_id, first + (uint64_t)got);
			ck_assert_int_eq(c[i].wc.status, status);
			ck_assert_int_eq(c[i].wc.opcode, opcode);
		}
	}
}

START_TEST(test_completions_come_in_batches_of_at_most_max_in_post_order_and_drained_comes_alone)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[8] = { 0 }, dst[16 * 8] = { 0 };
	struct qsm_fabric_wr wrs[12];
	struct qsm_fabric_sge one;
	struct region rs, rd;
	int posted;

	connect_pair(&a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	one = sge(&rs, 0, 8);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 12; i++)
		ck_assert_int_eq(post_recv1(fs, p, 100 + i, sge(&rd, 8 * i, 8)), 0);
	for (int i = 0; i < 12; i++)
		wrs[i] = (struct qsm_fabric_wr){ .wr_id = 1 + i, .opcode = QSM_WR_SEND, .flags = QSM_POST_SIGNALED,
						 .sg_list = &one, .num_sge = 1 };
	ck_assert_int_eq(fc->ops->post_send(a, wrs, 12, &posted), 0);
	ck_assert_int_eq(posted, 12);
	expect_batches(fs, &SRV, 12, 5, 100, QSM_WC_SUCCESS, QSM_WR_RECV);
	expect_batches(fc, &CLI, 12, QSM_FABRIC_CQE_BATCH, 1, QSM_WC_SUCCESS, QSM_WR_SEND);

	/* Flushes in batches; DRAINED is no completion: it ends them, returned alone. */
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(post_recv1(fs, p, 200 + i, sge(&rd, 8 * i, 8)), 0);
	ck_assert_int_eq(fs->ops->drain(p), 0);
	if (contract_fx->iwarp) {
		/* the drain ends the connection (expect_iwarp_drain): its DISCONNECTED, a CM event,
		 * comes apart from the batches, before, between or after them */
		expect_iwarp_drain(fs, &SRV, 200, 4, fc, &CLI);
		ended_data_pair_down(l, a, p, &rs, &rd);
		return;
	}
	expect_batches(fs, &SRV, 4, QSM_FABRIC_CQE_BATCH, 200, QSM_WC_WR_FLUSH_ERR, QSM_WR_RECV);
	expect(fs, QSM_EV_DRAINED, &SRV);
	expect_none(fs);
	expect_none(fc);

	data_pair_down(l, a, p, &rs, &rd);
}
END_TEST

/* ---- shared receive queues ---- */

/* A client of @owner connected to the server's listener, the server's QP (owner @sowner) on @srq,
 * which is created on the request's device first if *srq is NULL. */
static void connect_on_srq(void *owner, void *sowner, struct qsm_fsrq **srq, struct qsm_fid **a,
			   struct qsm_fid **p)
{
	struct qsm_fabric_qp_attr attr = qp_attr;

	*a = active_ready(owner, A_IP, B_IP, PORT);
	ck_assert_int_eq(fc->ops->connect(*a, NULL, 0), 0);
	expect(fs, QSM_EV_CONNECT_REQUEST, &LIS);
	*p = ev.id;
	fs->ops->set_owner(*p, sowner);
	if (!*srq)
		ck_assert_int_eq(fs->ops->create_srq(fs, fs->ops->id_device(*p), &SRQ,
						     &(struct qsm_fabric_srq_attr){ .max_wr = 4, .max_sge = 1 },
						     srq), 0);
	attr.srq = *srq;
	ck_assert_int_eq(fs->ops->create_qp(*p, &attr), 0);
	ck_assert_int_eq(fs->ops->accept(*p, NULL, 0), 0);
	expect(fc, QSM_EV_ESTABLISHED, owner);
	expect(fs, QSM_EV_ESTABLISHED, sowner);
}

/* One receive of 8 bytes at dst + off to the SRQ. */
static int srq_recv(struct qsm_fsrq *srq, uint64_t wr_id, const struct region *rd, size_t off)
{
	struct qsm_fabric_sge one = sge(rd, off, 8);

	return fs->ops->post_srq_recv(srq, wr_id, &one, 1);
}

/* The send of @a lands in the SRQ's next receive, @wr_id, completed on the server's QP of @sowner. */
static void send_lands(struct qsm_fid *a, void *owner, struct region *rs, uint64_t wr_id, void *sowner,
		       uint32_t len)
{
	struct qsm_fabric_wc *wc;

	ck_assert_int_eq(post_send1(fc, a, 1, sge(rs, 0, len)), 0);
	wc = expect_wc(fs, sowner, wr_id, QSM_WC_SUCCESS, QSM_WR_RECV);
	ck_assert_uint_eq(wc->byte_len, len);
	ck_assert_uint_eq(wc->wc_flags, QSM_WC_SRQ);   /* the SRQ's: its buffer goes back there */
	expect_wc(fc, owner, 1, QSM_WC_SUCCESS, QSM_WR_SEND);
}

START_TEST(test_srq_receives_go_in_post_order_to_whichever_qp_a_send_lands_on_and_stay_when_one_errs)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a1, *p1, *a2, *p2;
	struct qsm_fsrq *srq = NULL;
	uint8_t src[16], dst[8 * 8] = { 0 };
	struct region rs1, rs2, rd;
	bool last_wqe = false;

	connect_on_srq(&CLI, &SRV, &srq, &a1, &p1);
	connect_on_srq(&CLI2, &SRV2, &srq, &a2, &p2);
	fill(src, sizeof(src), 7);
	rs1 = reg(fc, a1, src, sizeof(src), 0);
	rs2 = reg(fc, a2, src, sizeof(src), 0);
	rd = reg(fs, p1, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	/* a QP on an SRQ takes no receive of its own */
	ck_assert_int_eq(post_recv1(fs, p1, 99, sge(&rd, 0, 8)), -EINVAL);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(srq_recv(srq, 100 + i, &rd, 8 * i), 0);
	/* in post order, to whichever QP the send lands on */
	send_lands(a2, &CLI2, &rs2, 100, &SRV2, 5);
	send_lands(a1, &CLI, &rs1, 101, &SRV, 6);
	send_lands(a2, &CLI2, &rs2, 102, &SRV2, 7);
	expect_bytes(dst, src, 5);
	expect_bytes(dst + 8, src, 6);
	expect_bytes(dst + 16, src, 7);
	/* max_wr receives held at most (their completions are taken: 4 free) */
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(srq_recv(srq, 200 + i, &rd, 8 * i), 0);
	ck_assert_int_eq(srq_recv(srq, 204, &rd, 0), -ENOBUFS);
	/* p1 errs: none of the SRQ's receives flushes (they are the SRQ's).  Drained once the
	 * marker flushed and LAST_WQE came: LAST_WQE, then DRAINED; a device that never says
	 * LAST_WQE never says DRAINED either (the runtime's drain timeout ends that wait). */
	ck_assert_int_eq(fs->ops->drain(p1), 0);
	if (contract_fx->iwarp) {
		/* soft-iWARP never raises IB_EVENT_QP_LAST_WQE_REACHED (6.1's siw has no such
		 * event), so neither LAST_WQE nor DRAINED comes: the runtime's drain timeout ends
		 * that wait.  The drain ends p1's connection (expect_iwarp_drain): DISCONNECTED on
		 * both of its sides. */
		expect_set(fs, "drained", WANT_EV(QSM_EV_DISCONNECTED, &SRV));
		expect_set(fc, "drained's peer", WANT_EV(QSM_EV_DISCONNECTED, &CLI));
	} else if (next_event(fs, contract_fx->event_wait_ms) == 0) {
		ck_assert_int_eq(ev.event, QSM_EV_LAST_WQE);
		ck_assert_ptr_eq(ev.owner, &SRV);
		last_wqe = true;
		expect(fs, QSM_EV_DRAINED, &SRV);
	}
	ck_assert(last_wqe || !contract_fx->last_wqe);
	if (!contract_fx->last_wqe)
		fprintf(stderr, "contract (%s): a QP on an SRQ in ERR: LAST_WQE %s\n", contract_fx->name,
			last_wqe ? "came, then DRAINED" : "never came, nor DRAINED");
	expect_none(fs);
	/* still there for p2 */
	send_lands(a2, &CLI2, &rs2, 200, &SRV2, 3);
	ck_assert_int_eq(srq_recv(srq, 204, &rd, 0), 0);

	/* the QPs first, then the SRQ: its 4 receives go with it, with no completion */
	destroy_all(fs, (struct qsm_fid *[]){ p1, p2 }, 2);
	fs->ops->destroy_srq(srq);
	fc->ops->dereg_mr(rs1.mr);
	fc->ops->dereg_mr(rs2.mr);
	fs->ops->dereg_mr(rd.mr);
	destroy_all(fc, (struct qsm_fid *[]){ a1, a2 }, 2);
	fs->ops->destroy_id(l);
	expect_none(fs);
	expect_none(fc);
	assert_clean();
}
END_TEST

START_TEST(test_srq_limit_fires_once_below_the_limit_then_is_disarmed)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	struct qsm_fsrq *srq = NULL;
	uint8_t src[8] = { 1 }, dst[4 * 8] = { 0 };
	struct region rs, rd;

	connect_on_srq(&CLI, &SRV, &srq, &a, &p);
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fs, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(srq_recv(srq, 100 + i, &rd, 8 * i), 0);
	ck_assert_int_eq(fs->ops->arm_srq(srq, 5), -EINVAL);   /* beyond max_wr */
	ck_assert_int_eq(fs->ops->arm_srq(srq, 3), 0);
	send_lands(a, &CLI, &rs, 100, &SRV, 4);   /* 3 left: not below 3 */
	expect_none(fs);
	ck_assert_int_eq(post_send1(fc, a, 1, sge(&rs, 0, 4)), 0);   /* 2 left: below */
	for (int got = 0; got < 2; got++) {
		ck_assert_int_eq(next_event(fs, contract_fx->event_wait_ms), 0);
		if (ev.event == QSM_EV_SRQ_LIMIT) {
			ck_assert_ptr_eq(ev.owner, &SRQ);
			ck_assert_ptr_eq(ev.srq, srq);   /* (in id's place: an SRQ's event has none) */
		} else {
			ck_assert_int_eq(ev.event, QSM_EV_COMPLETION);
			ck_assert_uint_eq(cqe.wc.wr_id, 101);
		}
	}
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND);
	send_lands(a, &CLI, &rs, 102, &SRV, 4);   /* disarmed: no second event */
	expect_none(fs);

	fs->ops->destroy_id(p);
	fs->ops->destroy_srq(srq);
	fc->ops->dereg_mr(rs.mr);
	fs->ops->dereg_mr(rd.mr);
	fc->ops->destroy_id(a);
	fs->ops->destroy_id(l);
	expect_none(fs);
	expect_none(fc);
	assert_clean();
}
END_TEST

/* ---- memory windows ---- */

static int mw_bind(struct qsm_fid *p, uint64_t wr_id, struct qsm_fmw *mw, const struct region *r, size_t off,
		uint64_t len, uint32_t *rkey)
{
	return fs->ops->bind_mw(p, wr_id, mw, r->mr, (uintptr_t)(r->mem + off), len, QSM_ACCESS_REMOTE_WRITE,
				QSM_POST_SIGNALED, rkey);
}

/* The window cases' start: a connected pair (*a, *p), the client's source src (filled from
 * seed) in *rs, the server's dst in *rd (it takes windows), and an unbound window on p's device. */
static struct qsm_fmw *mw_pair_up(struct qsm_fid **a, struct qsm_fid **p, uint8_t *src, size_t nsrc,
				  uint8_t *dst, size_t ndst, uint8_t seed, struct region *rs, struct region *rd)
{
	struct qsm_fmw *mw;

	connect_pair(a, p);
	fill(src, nsrc, seed);
	*rs = reg(fc, *a, src, nsrc, 0);
	*rd = reg(fs, *p, dst, ndst, QSM_ACCESS_LOCAL_WRITE | QSM_ACCESS_REMOTE_WRITE | QSM_ACCESS_MW_BIND);
	if (contract_fx->iwarp) {
		/* soft-iWARP has no memory windows (libsiw has no alloc_mw, nor BIND_MW and
		 * LOCAL_INV opcodes): the fabric's alloc_mw is -EOPNOTSUPP and makes nothing. */
		mw = NULL;
		ck_assert_int_eq(fs->ops->alloc_mw(fs->ops->id_device(*p), &mw), -EOPNOTSUPP);
		ck_assert_ptr_null(mw);
		return NULL;
	}
	ck_assert_int_eq(fs->ops->alloc_mw(fs->ops->id_device(*p), &mw), 0);
	return mw;
}

/* The end of a window case on a device without windows (mw_pair_up() gave NULL). */
static void mw_pair_down(struct qsm_fid *l, struct qsm_fid *a, struct qsm_fid *p, struct region *rs,
			 struct region *rd)
{
	expect_none(fs);
	expect_none(fc);
	data_pair_down(l, a, p, rs, rd);
}

START_TEST(test_a_memory_window_reaches_its_range_by_its_rkey_until_the_peer_invalidates_it)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[16], dst[64] = { 0 };
	struct region rs, rd;
	struct qsm_fabric_sge one;
	struct qsm_fabric_wc *wc;
	struct qsm_fmw *mw, *mw2;
	uint32_t rkey, rkey2;

	mw = mw_pair_up(&a, &p, src, sizeof(src), dst, sizeof(dst), 3, &rs, &rd);
	if (!mw) {
		mw_pair_down(l, a, p, &rs, &rd);
		return;
	}
	/* (An MR without MW_BIND, a range beyond the MR, other access bits: the runtime's door
	 * refuses them before any fabric, tests/check_data.c.) */
	ck_assert_int_eq(mw_bind(p, 52, mw, &rd, 16, 32, &rkey), 0);
	expect_wc(fs, &SRV, 52, QSM_WC_SUCCESS, QSM_WR_BIND_MW);
	ck_assert_uint_ne(rkey, rd.rkey);
	/* the peer writes through the window's rkey */
	one = sge(&rs, 0, 8);
	ck_assert_int_eq(post_wr(fc, a, 1, QSM_WR_RDMA_WRITE, &one, 1, (uintptr_t)dst + 16, rkey), 0);
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_bytes(dst + 16, src, 8);
	/* then invalidates it with a send: our receive says which rkey went */
	ck_assert_int_eq(post_recv1(fs, p, 100, sge(&rd, 0, 16)), 0);
	ck_assert_int_eq(fc->ops->post_send(a, &(struct qsm_fabric_wr){ .wr_id = 2, .opcode = QSM_WR_SEND_WITH_INV,
		.sg_list = &one, .num_sge = 1, .flags = QSM_POST_SIGNALED, .imm_data = rkey }, 1, NULL), 0);
	wc = expect_wc(fs, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV);
	ck_assert_uint_eq(wc->wc_flags, QSM_WC_WITH_INV);
	ck_assert_uint_eq(wc->invalidated_rkey, rkey);
	ck_assert_uint_eq(wc->byte_len, 8);
	expect_wc(fc, &CLI, 2, QSM_WC_SUCCESS, QSM_WR_SEND_WITH_INV);
	/* another window: our own LOCAL_INV of it (no SGEs: the runtime's door refuses any).  (Binding
	 * the invalidated window again: rxe 6.1 reports MW_BIND_ERR, so the cases do not rely on it.) */
	ck_assert_int_eq(fs->ops->alloc_mw(fs->ops->id_device(p), &mw2), 0);
	ck_assert_int_eq(mw_bind(p, 53, mw2, &rd, 0, 16, &rkey2), 0);
	expect_wc(fs, &SRV, 53, QSM_WC_SUCCESS, QSM_WR_BIND_MW);
	ck_assert_uint_ne(rkey2, rkey);
	ck_assert_int_eq(fs->ops->post_send(p, &(struct qsm_fabric_wr){ .wr_id = 54, .opcode = QSM_WR_LOCAL_INV,
		.flags = QSM_POST_SIGNALED, .imm_data = rkey2 }, 1, NULL), 0);
	expect_wc(fs, &SRV, 54, QSM_WC_SUCCESS, QSM_WR_LOCAL_INV);
	expect_none(fs);
	expect_none(fc);

	fs->ops->dealloc_mw(mw);
	fs->ops->dealloc_mw(mw2);
	fc->ops->dereg_mr(rs.mr);
	fs->ops->dereg_mr(rd.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

/* A window bound to an MR holds the MR: its dereg is refused (-EBUSY; ibv_dereg_mr fails while
 * a type-2 window is bound, IBA 10.6.7.2.6) and leaves it registered, so a peer's write through
 * the window never lands in memory its owner believes released.  Invalidated, the window holds
 * nothing and the dereg goes through. */
START_TEST(test_dereg_of_an_mr_with_a_bound_window_is_ebusy_and_leaves_the_mr_registered)
{
	struct qsm_fid *l = listener_on(fs, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[16], dst[64] = { 0 };
	struct region rs, rd;
	struct qsm_fabric_sge one;
	struct qsm_fmw *mw;
	uint32_t rkey;

	mw = mw_pair_up(&a, &p, src, sizeof(src), dst, sizeof(dst), 5, &rs, &rd);
	if (!mw) {
		mw_pair_down(l, a, p, &rs, &rd);
		return;
	}
	ck_assert_int_eq(mw_bind(p, 55, mw, &rd, 16, 32, &rkey), 0);
	expect_wc(fs, &SRV, 55, QSM_WC_SUCCESS, QSM_WR_BIND_MW);
	ck_assert_int_eq(fs->ops->dereg_mr(rd.mr), -EBUSY);
	/* still registered: the MR's own rkey and the window's both reach the memory */
	one = sge(&rs, 0, 8);
	ck_assert_int_eq(post_wr(fc, a, 1, QSM_WR_RDMA_WRITE, &one, 1, (uintptr_t)dst, rd.rkey), 0);
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_bytes(dst, src, 8);
	ck_assert_int_eq(post_wr(fc, a, 2, QSM_WR_RDMA_WRITE, &one, 1, (uintptr_t)dst + 16, rkey), 0);
	expect_wc(fc, &CLI, 2, QSM_WC_SUCCESS, QSM_WR_RDMA_WRITE);
	expect_bytes(dst + 16, src, 8);
	ck_assert_int_eq(fs->ops->post_send(p, &(struct qsm_fabric_wr){ .wr_id = 56, .opcode = QSM_WR_LOCAL_INV,
		.flags = QSM_POST_SIGNALED, .imm_data = rkey }, 1, NULL), 0);
	expect_wc(fs, &SRV, 56, QSM_WC_SUCCESS, QSM_WR_LOCAL_INV);
	ck_assert_int_eq(fs->ops->dereg_mr(rd.mr), 0);
	expect_none(fs);
	expect_none(fc);

	fs->ops->dealloc_mw(mw);
	fc->ops->dereg_mr(rs.mr);
	pair_down(l, a, p);
	assert_clean();
}
END_TEST

START_TEST(test_loopback_send_between_ids_of_one_fabric)
{
	struct qsm_fid *l = listener_on(fc, &LIS, B_IP, PORT), *a, *p;
	uint8_t src[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, dst[8] = { 0 };
	struct region rs, rd;

	a = active_ready(&CLI, NULL, B_IP, PORT);
	ck_assert_int_eq(fc->ops->connect(a, NULL, 0), 0);
	expect(fc, QSM_EV_CONNECT_REQUEST, &LIS);
	p = ev.id;
	fc->ops->set_owner(p, &SRV);
	ck_assert_int_eq(fc->ops->create_qp(p, &qp_attr), 0);
	ck_assert_int_eq(fc->ops->accept(p, NULL, 0), 0);
	if (contract_fx->iwarp) {
		/* siw's passive side is established when its MPA reply is sent, before the active
		 * side reads it: the two ESTABLISHED in either order */
		expect_set(fc, "one fabric", WANT_EV(QSM_EV_ESTABLISHED, &CLI), WANT_EV(QSM_EV_ESTABLISHED, &SRV));
	} else {
		expect(fc, QSM_EV_ESTABLISHED, &CLI);
		expect(fc, QSM_EV_ESTABLISHED, &SRV);
	}
	rs = reg(fc, a, src, sizeof(src), 0);
	rd = reg(fc, p, dst, sizeof(dst), QSM_ACCESS_LOCAL_WRITE);
	ck_assert_int_eq(post_recv1(fc, p, 100, sge(&rd, 0, 8)), 0);
	ck_assert_int_eq(post_send1(fc, a, 1, sge(&rs, 0, 8)), 0);
	/* The receiver's completion comes first: the data lands before the ACK returns. */
	expect_wc(fc, &SRV, 100, QSM_WC_SUCCESS, QSM_WR_RECV);
	expect_wc(fc, &CLI, 1, QSM_WC_SUCCESS, QSM_WR_SEND);
	expect_bytes(dst, src, 8);
	fc->ops->dereg_mr(rs.mr);
	fc->ops->dereg_mr(rd.mr);
	destroy_all(fc, (struct qsm_fid *[]){ a, p, l }, 3);
	expect_none(fc);
	assert_clean();
}
END_TEST


/* ---- running it ---- */

static void contract_setup(void)
{
	fc = fs = NULL;
	contract_fx->setup(&fc, &fs);
}

static void contract_teardown(void)
{
	if (fc)
		fc->ops->destroy(fc);
	if (fs)
		fs->ops->destroy(fs);
	fc = fs = NULL;
	if (contract_fx->teardown)
		contract_fx->teardown();
}

TCase *contract_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, contract_setup, contract_teardown);
	tcase_set_timeout(tc, contract_fx->case_timeout_s);
	return tc;
}

int contract_add_cases(TCase *tc)
{
	int n = 0;

	/* counted as added, so the number returned cannot go stale */
#define ADD(test) (tcase_add_test(tc, test), n++)
	ADD(test_connect_accept_establishes_both_sides_across_two_fabrics);
	ADD(test_disconnect_gives_each_side_disconnected_once_then_timewait_exit);
	ADD(test_reject_with_private_data_reaches_active_side_only);
	ADD(test_connect_without_listener_is_rejected_as_invalid_service);
	ADD(test_destroy_connected_id_disconnects_the_peer_with_timewait);
	ADD(test_destroy_unanswered_request_rejects_the_active_side);
	ADD(test_private_data_limits_are_56_196_148);
	ADD(test_send_lands_in_the_peers_recv_byte_for_byte_across_two_fabrics);
	ADD(test_recvs_are_consumed_in_post_order);
	ADD(test_send_gathers_its_sges_and_the_recv_scatters_them);
	ADD(test_rdma_write_places_data_at_the_rkey_and_completes_only_at_the_writer);
	ADD(test_zero_length_rdma_checks_no_rkey_and_touches_no_memory);
	ADD(test_rdma_read_fetches_from_the_rkey_into_local_sges);
	ADD(test_refused_rkey_is_rem_access_err_at_the_requester_and_errs_the_responder_silently);
	ADD(test_message_larger_than_the_recv_is_loc_qp_op_err_at_the_receiver_and_rem_op_err_at_the_sender);
	ADD(test_recv_whose_lkey_does_not_grant_local_write_is_loc_qp_op_err_when_a_send_lands);
	ADD(test_unsignaled_send_completes_only_at_the_receiver);
	ADD(test_drain_flushes_posted_recvs_in_post_order_before_drained);
	ADD(test_post_after_err_returns_0_and_completes_with_flush_err);
	ADD(test_post_send_needs_an_established_qp_and_post_recv_works_from_init);
	ADD(test_destroy_id_discards_outstanding_recvs_without_completions);
	ADD(test_flush_qp_takes_what_the_qp_holds_once_and_nothing_comes_for_it_after);
	ADD(test_loopback_send_between_ids_of_one_fabric);
	ADD(test_send_queue_holds_max_send_wr_until_their_completions_are_taken);
	ADD(test_drain_frees_the_slots_of_unsignaled_sends_without_a_completion);
	ADD(test_full_receive_queue_is_enobufs_until_a_receive_completion_is_taken);
	ADD(test_list_posts_in_order_and_a_too_long_list_posts_none);
	ADD(test_inline_data_is_copied_at_post_needs_no_lkey_and_is_bounded_by_max_inline_data);
	ADD(test_immediate_data_reaches_the_receive_of_a_send_and_of_a_write_with_imm);
	ADD(test_completions_come_in_batches_of_at_most_max_in_post_order_and_drained_comes_alone);
	ADD(test_srq_receives_go_in_post_order_to_whichever_qp_a_send_lands_on_and_stay_when_one_errs);
	ADD(test_srq_limit_fires_once_below_the_limit_then_is_disarmed);
	ADD(test_a_memory_window_reaches_its_range_by_its_rkey_until_the_peer_invalidates_it);
	ADD(test_dereg_of_an_mr_with_a_bound_window_is_ebusy_and_leaves_the_mr_registered);
	ADD(test_device_refusing_a_wr_part_way_posts_the_prefix_only_and_holds_only_its_slots);
#undef ADD
	return n;
}

int contract_main(const struct contract_fixture *const *fxs, int n, void (*extra)(TCase *tc))
{
	int failed = 0;

	for (int i = 0; i < n; i++) {
		Suite *s;
		SRunner *sr;
		TCase *tc;
		char name[96];

		contract_fx = fxs[i];
		snprintf(name, sizeof(name), "contract on %s", fxs[i]->name);
		s = suite_create(name);
		tc = contract_tcase("contract");
		contract_add_cases(tc);
		suite_add_tcase(s, tc);
		if (extra && i == 0) {
			TCase *own = contract_tcase(fxs[i]->name);

			extra(own);
			suite_add_tcase(s, own);
		}
		sr = srunner_create(s);
		/* CK_ENV: CK_VERBOSITY=verbose names every case (tests/vm/scenarios/contract.sh sets
		 * it); unset, Check's normal output */
		srunner_run_all(sr, CK_ENV);
		failed += srunner_ntests_failed(sr);
		srunner_free(sr);
	}
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
