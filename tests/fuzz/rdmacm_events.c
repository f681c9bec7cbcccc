/* rdma-qsm fuzzing: the rdmacm fabric's mapping of rdma_cm's events, and the runtime above it,
 * fed a stream of CM events by a fake librdmacm (fake_cm.c, fake_verbs.c).  libFuzzer target
 * (make fuzz).
 *
 * One ctx on qsm_rdmacm_fabric_new(), the fabric's own code throughout; below it the fake channel,
 * ids, devices and a small provider.  The input is a script, one byte an operation (enum op,
 * modulo its count) and the bytes it takes: queues and listeners made and driven by downcalls,
 * and -- the point -- CM events of any type (those librdmacm names and numbers it does not),
 * status and private data, to any id (the queues', listeners', the registry's sentinels, the
 * pins'), requests with a new id, device removal and return, the device-list tick, completions,
 * QP errors and async events, calls of librdmacm and verbs that fail.  Time is a virtual clock.
 *
 * Checked, aborting on a violation so that libFuzzer reports the input:
 *  - every CM event the channel hands out comes out of the fabric at once, named as librdmacm
 *    names it (rdma_event_str(); CM_UNKNOWN with its raw number as status when librdmacm has no
 *    name), with its status, private data, and its id's owner (a request: its listener's);
 *  - then it reaches an edge or its machine's unexpected path (events[] of its type), or is
 *    dropped (its owner let go of the id), or is an orphan (nobody owns the id);
 *  - after every operation the counter identities of src/core/ctx.h (popped + aborts +
 *    device_closes == dispatched + dropped + completions; events[] sum to dispatched, which is
 *    transitions + unexpected);
 *  - no callback for a queue after its destroy, a non-zero return, or its release;
 *  - at the end (everything destroyed, dispatched until quiet, time run out): no queue, device
 *    or SRQ live, and every id, QP, CQ, PD, channel and MR the fabric got from below given back;
 *    ASan's leak check runs per input.
 *
 * QSM_FUZZ_TRACE=1 prints each operation on stderr (for a reproducer).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <qsm/ctx.h>
#include <qsm/data.h>
#include <qsm/rdmacm.h>

#include "fabric/rdmacm/rdmacm.h"
#include "fuzz/fake_rdma.h"
#include "fuzz/script.h"

#define MAX_OPS 256
#define MAX_LISTENERS 4
#define MS 1000000ull

static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "qsm fuzz: rdmacm: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

#define CHECK(cond, ...) do { if (!(cond)) fail(__VA_ARGS__); } while (0)

/* ---- the world of one input ---- */

static struct qsm_ctx *ctx;
static struct qsm_fabric *fab;
static uint64_t now_ns;
static struct qsm_listener *listeners[MAX_LISTENERS];
static unsigned nlisteners;

/* A queue the script knows: made by it (active) or at a request (passive, at its first call). */
struct rec {
	struct qsm_conn *q;
	bool passive, gone;
	int abort_state;            /* its enter there returns non-zero (-1: never) */
	int decide;                 /* passive, REQUESTED.enter: 0 accept, 1 reject, 2 leave it */
	struct qsm_mr *mr;
	uint8_t buf[256];
};

static struct rec **recs;
static unsigned nrecs, recs_cap;
static int next_decide, next_abort = -1;   /* what the next passive queue does */

static uint64_t clock_now(void *arg)
{
	(void)arg;
	return now_ns;
}

/* ---- the class: every callback checked ---- */

static struct rec *rec_new(struct qsm_conn *q, bool passive)
{
	struct rec *r = calloc(1, sizeof(*r));

	if (nrecs == recs_cap) {
		recs_cap = recs_cap ? 2 * recs_cap : 64;
		recs = realloc(recs, recs_cap * sizeof(*recs));
	}
	CHECK(r && recs, "out of memory");
	recs[nrecs++] = r;
	r->q = q;
	r->passive = passive;
	r->abort_state = -1;
	*(struct rec **)qsm_conn_priv(q) = r;
	return r;
}

static struct rec *cb(struct qsm_conn *q, const char *what)
{
	struct rec *r = *(struct rec **)qsm_conn_priv(q);

	if (!r) {   /* a passive queue's first call */
		r = rec_new(q, true);
		r->decide = next_decide;
		r->abort_state = next_abort;
	}
	CHECK(!r->gone, "%s (%s) on a %s queue after its destroy, abort or release", what,
	      qsm_conn_state_name(q), r->passive ? "passive" : "active");
	return r;
}

static void gone(struct rec *r)
{
	r->gone = true;
	r->mr = NULL;   /* the queue's: deregistered as it closes */
}

static int h_enter(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct rec *r = cb(q, "enter");

	if (ev->to == r->abort_state) {
		gone(r);
		return -1;
	}
	if (!r->passive && ev->to == QSM_CM_CONNECTED)
		(void)qsm_conn_ready(q);
	if (r->passive && ev->to == QSM_ACCEPT_CONNECTED)
		(void)qsm_conn_ready(q);
	if (r->passive && ev->to == QSM_ACCEPT_REQUESTED) {
		if (r->decide == 0)
			(void)qsm_conn_accept(q, "qsm-fuzz", 8);
		else if (r->decide == 1)
			(void)qsm_conn_reject(q, "no", 2);
	}
	return 0;
}

static int h_other(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	cb(q, "handler");
	return 0;
}

static int h_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	cb(q, "device_removed")->mr = NULL;   /* released right after this */
	return 0;
}

/* The QP is there (INIT): memory and two receives. */
static int h_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct rec *r = cb(q, "qp_ready");

	(void)ev;
	if (!r->mr && qsm_conn_reg_mr(q, r->buf, sizeof(r->buf), QSM_ACCESS_LOCAL_WRITE, &r->mr) < 0)
		r->mr = NULL;
	for (uint64_t i = 0; r->mr && i < 2; i++) {
		struct qsm_sge sge = { (uintptr_t)r->buf + i * 128, 128, qsm_mr_lkey(r->mr) };

		(void)qsm_conn_post_recv(q, i, &sge, 1);
	}
	return 0;
}

static int h_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct rec *r = cb(q, "completion");

	if (wc->status == QSM_WC_SUCCESS && wc->opcode == QSM_WR_RECV && r->mr) {
		struct qsm_sge sge = { (uintptr_t)r->buf + (wc->wr_id & 1) * 128, 128, qsm_mr_lkey(r->mr) };

		(void)qsm_conn_post_recv(q, wc->wr_id, &sge, 1);
	}
	return 0;
}

static void h_release(struct qsm_conn *q)
{
	gone(cb(q, "release"));
}

#define H { .enter = h_enter, .exit = h_other, .on_event = h_other }
static const struct qsm_class fuzz_class = {
	.name = "fuzz",
	.priv_size = sizeof(struct rec *),
	.active = { [0 ... QSM_CM_STATE_COUNT - 1] = H },
	.passive = { [0 ... QSM_ACCEPT_STATE_COUNT - 1] = H },
	.unexpected = h_other,
	.device_removed = h_device_removed,
	.qp_ready = h_qp_ready,
	.completion = h_completion,
	.release = h_release,
	.qp = { .max_send_wr = 4, .max_recv_wr = 4 },
};

/* ---- what comes out of the fabric: every CM event handed out, checked ---- */

static const struct qsm_fabric_ops *real_ops;
static struct qsm_fabric_ops checked_ops;
static unsigned handed_in_call;          /* CM events the fabric returned in this dispatch */
static bool handed_type[QSM_EV_LIMIT];

/* What librdmacm calls the event, as the library's alphabet names it. */
static int expected_event(int raw)
{
	const char *s = rdma_event_str((enum rdma_cm_event_type)raw);

	if (strncmp(s, "RDMA_CM_EVENT_", 14) != 0)
		return QSM_EV_CM_UNKNOWN;
	return qsm_event_from_name(s + 14);
}

static int checked_get_event(struct qsm_fabric *f, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe,
			     int max)
{
	unsigned before = fake_n.events_handed;
	int r = real_ops->get_event(f, ev, cqe, max), want;
	const struct qsm_fid *id, *lid;

	if (r != 0 || fake_n.events_handed == before)
		return r;
	CHECK(fake_n.events_handed == before + 1, "%u CM events taken for one returned",
	      fake_n.events_handed - before);
	want = expected_event(fake_last.raw);
	CHECK(want >= 0, "librdmacm's %s has no event of the library's name", rdma_event_str(fake_last.raw));
	/* a reject for a stale connection (the IB CM's reason 10; the fake's devices are IB) is
	 * its own event */
	if (want == QSM_EV_REJECTED && fake_last.status == 10)
		want = QSM_EV_REJECTED_STALE;
	CHECK(ev->event == want, "rdma_cm event %d (%s) came out as %s", fake_last.raw,
	      rdma_event_str(fake_last.raw), qsm_event_name(ev->event));
	CHECK(ev->status == (want == QSM_EV_CM_UNKNOWN ? fake_last.raw : fake_last.status),
	      "%s: status %d, rdma_cm said %d", qsm_event_name(want), ev->status, fake_last.status);
	CHECK(ev->private_data_len == fake_last.pdata_len &&
	      !memcmp(ev->private_data, fake_last.pdata, fake_last.pdata_len),
	      "%s: %zu bytes of private data, rdma_cm carried %u", qsm_event_name(want), ev->private_data_len,
	      fake_last.pdata_len);
	id = fake_last.owner_ctx;
	lid = fake_last.listen_ctx;
	if (want == QSM_EV_CONNECT_REQUEST)
		CHECK(ev->id && ev->owner == (lid ? lid->owner : NULL),
		      "CONNECT_REQUEST: for %p, the listener's owner %p", ev->owner, lid ? lid->owner : NULL);
	else
		CHECK(ev->owner == (id ? id->owner : NULL), "%s: owner %p, the id's %p", qsm_event_name(want),
		      ev->owner, id ? id->owner : NULL);
	handed_in_call++;
	handed_type[want] = true;
	return 0;
}

/* ---- checks after each dispatch and each operation ---- */

static struct qsm_counters counters(void)
{
	struct qsm_counters k;

	CHECK(qsm_ctx_counters(ctx, &k, sizeof(k)) == 0, "qsm_ctx_counters");
	return k;
}

static void check_identities(void)
{
	struct qsm_counters k = counters();
	uint64_t sum = 0;

	CHECK(k.popped + k.aborts + k.device_closes == k.dispatched + k.dropped + k.completions,
	      "popped %llu + aborts %llu + device closes %llu != dispatched %llu + dropped %llu + completions %llu",
	      (unsigned long long)k.popped, (unsigned long long)k.aborts, (unsigned long long)k.device_closes,
	      (unsigned long long)k.dispatched, (unsigned long long)k.dropped, (unsigned long long)k.completions);
	for (int e = 0; e < QSM_EV_LIMIT; e++)
		sum += k.events[e];
	CHECK(sum == k.dispatched, "events[] sum to %llu, dispatched %llu", (unsigned long long)sum,
	      (unsigned long long)k.dispatched);
	CHECK(k.dispatched == k.transitions + k.unexpected, "dispatched %llu != transitions %llu + unexpected %llu",
	      (unsigned long long)k.dispatched, (unsigned long long)k.transitions,
	      (unsigned long long)k.unexpected);
}

/* One dispatch of at most one item; what the fabric handed out in it reached a machine. */
static int dispatch_one(void)
{
	struct qsm_counters k0 = counters(), k1;
	uint64_t reached;
	int n;

	handed_in_call = 0;
	memset(handed_type, 0, sizeof(handed_type));
	n = qsm_ctx_dispatch(ctx, 1);
	CHECK(n >= 0, "qsm_ctx_dispatch: %d", n);
	if (!handed_in_call)
		return n;
	k1 = counters();
	reached = (k1.dropped - k0.dropped) + (k1.orphans - k0.orphans);
	for (int e = 0; e < QSM_EV_LIMIT; e++)
		if (handed_type[e])
			reached += k1.events[e] - k0.events[e];
	CHECK(reached >= handed_in_call, "%u CM events handed to the ctx, %llu reached a machine, were "
	      "dropped or orphaned", handed_in_call, (unsigned long long)reached);
	return n;
}

static void settle(void)
{
	for (unsigned i = 0; i < 100000; i++)
		if (!dispatch_one())
			return;
	fail("no quiescence");
}

static void time_passes(unsigned b)
{
	int t = qsm_ctx_next_timeout_ms(ctx);

	if ((b & 1) && t > 0)
		now_ns += (uint64_t)t * MS;
	else
		now_ns += (uint64_t)(b >> 1) * 50 * MS;
}

/* ---- the script ---- */

enum op {
	OP_NEW_QUEUE, OP_NEW_LISTENER, OP_CM_EVENT, OP_CM_EVENT2, OP_CM_EVENT3, OP_DISPATCH, OP_SETTLE,
	OP_TIME, OP_TICK, OP_DEVICE_REMOVE, OP_DEVICE_ADD, OP_COMPLETE, OP_QP_ERROR, OP_ASYNC, OP_FAIL,
	OP_CONNECT, OP_DISCONNECT, OP_READY, OP_ACCEPT, OP_REJECT, OP_DESTROY, OP_DESTROY_LISTENER,
	OP_PASSIVE, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
	"new-queue", "new-listener", "cm-event", "cm-event", "cm-event", "dispatch", "settle", "time",
	"tick", "device-remove", "device-add", "complete", "qp-error", "async", "fail", "connect",
	"disconnect", "ready", "accept", "reject", "destroy", "destroy-listener", "passive",
};

static void sockaddr_of(struct sockaddr_in *sa, unsigned b, uint16_t port)
{
	static const uint32_t addrs[] = { 0xc0000201u, 0xc0000202u, 0xc0000209u, 0 };   /* 192.0.2.x, any */

	*sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(port),
				    .sin_addr.s_addr = htonl(addrs[b % 4]) };
}

static struct rec *pick(struct script *s)
{
	unsigned b = take(s);

	for (unsigned k = 0; k < nrecs; k++) {
		struct rec *r = recs[(b + k) % nrecs];

		if (!r->gone)
			return r;
	}
	return NULL;
}

static void new_queue(struct script *s)
{
	unsigned b = take(s), a = take(s), len = take(s) % 57;
	struct sockaddr_in dst;
	struct qsm_conn *q;
	uint8_t pdata[56];
	struct qsm_conn_opts o = {
		.cls = &fuzz_class, .dst = (struct sockaddr *)&dst, .private_data = pdata, .private_data_len = len,
		.policy = { .initial_delay_ms = 10 + (b & 0x30), .max_attempts = (b >> 6) },
		.timeouts = { .resolve_ms = 100 + (a & 7) * 100, .connect_ms = 200, .drain_ms = 300 },
	};

	sockaddr_of(&dst, b % 3, 4420);
	memset(pdata, 'M', sizeof(pdata));
	if (qsm_conn_new(ctx, &o, &q) != 0)
		return;
	rec_new(q, false)->abort_state = (a >> 3) < QSM_CM_STATE_COUNT ? (int)(a >> 3) : -1;
	(void)qsm_conn_connect(q);
}

static void new_listener(struct script *s)
{
	unsigned b = take(s);
	struct sockaddr_in a;
	struct qsm_listener_opts o = { .addr = (struct sockaddr *)&a, .cls = &fuzz_class,
				       .timeouts = { .request_ms = 500, .connect_ms = 500, .drain_ms = 300 },
				       .relisten = { .initial_delay_ms = 50 } };

	if (nlisteners == MAX_LISTENERS)
		return;
	sockaddr_of(&a, b % 4 == 2 ? 3 : b % 4, (uint16_t)(4420 + (b >> 2) % 2));
	if (qsm_listener_new(ctx, &o, &listeners[nlisteners]) == 0)
		nlisteners++;
}

/* rdma_cm's event numbers, and some it has no name for */
static int raw_event(unsigned b)
{
	static const int odd[] = { 16, 17, 18, 19, 99, -1, 0x7fffffff, 1000 };

	b %= 24;
	return b < 16 ? (int)b : odd[b - 16];
}

static void cm_event(struct script *s)
{
	unsigned t = take(s), e = take(s), st = take(s), len = take(s), seed = take(s), count = fake_id_count();
	int raw = raw_event(e);
	uint8_t pdata[255];
	struct rdma_cm_id *cm;

	if (!count)
		return;
	cm = fake_id(t % count);
	for (unsigned i = 0; i < sizeof(pdata); i++)
		pdata[i] = (uint8_t)(seed + i);
	if (raw == RDMA_CM_EVENT_CONNECT_REQUEST) {
		/* only a listening id hears requests */
		for (unsigned k = 0; k < count && !fake_id_listening(cm); k++)
			cm = fake_id((t + k) % count);
		if (!fake_id_listening(cm))
			return;
	}
	/* an event librdmacm cannot name, on an id the kernel made for it (t's top bit) */
	fake_cm_event(cm, raw, (int)(int8_t)st, pdata, len, (int)(seed & 1),
		      (t & 0x80) && expected_event(raw) == QSM_EV_CM_UNKNOWN && !fake_id_is_pin(cm));
}

static void run_op(enum op op, struct script *s)
{
	struct rec *r;
	unsigned b;

	switch (op) {
	case OP_NEW_QUEUE: new_queue(s); break;
	case OP_NEW_LISTENER: new_listener(s); break;
	case OP_CM_EVENT: case OP_CM_EVENT2: case OP_CM_EVENT3: cm_event(s); break;
	case OP_DISPATCH:
		for (b = 1 + take(s) % 8; b; b--)
			dispatch_one();
		break;
	case OP_SETTLE: settle(); break;
	case OP_TIME: time_passes(take(s)); break;
	case OP_TICK: (void)!write(to_fab(fab)->tfd, &(uint64_t){ 1 }, sizeof(uint64_t)); break;
	case OP_DEVICE_REMOVE: fake_device_remove((int)(take(s) % FAKE_NDEV)); break;
	case OP_DEVICE_ADD: fake_device_add((int)(take(s) % FAKE_NDEV)); break;
	case OP_COMPLETE:
		b = take(s);
		if (fake_qp_count()) {
			unsigned w = take(s);
			enum ibv_wc_status st = w < 192 ? IBV_WC_SUCCESS : (enum ibv_wc_status)(1 + w % 21);

			fake_qp_complete(b % fake_qp_count(), w & 1, st, take(s));
		}
		break;
	case OP_QP_ERROR: b = take(s); if (fake_qp_count()) fake_qp_error(b % fake_qp_count()); break;
	case OP_ASYNC:
		b = take(s);
		if (fake_qp_count())
			fake_async(b % fake_qp_count(), (enum ibv_event_type)(take(s) % (IBV_EVENT_WQ_FATAL + 1)));
		break;
	case OP_FAIL:
		b = take(s);
		fake_fail_next((enum fake_call)(b % FAKE_CALLS), 1 + (b >> 6), take(s) % 2 ? ENOMEM : EINVAL);
		break;
	case OP_CONNECT: if ((r = pick(s))) (void)qsm_conn_connect(r->q); break;
	case OP_DISCONNECT: if ((r = pick(s))) (void)qsm_conn_disconnect(r->q); break;
	case OP_READY: if ((r = pick(s))) (void)qsm_conn_ready(r->q); break;
	case OP_ACCEPT: if ((r = pick(s))) (void)qsm_conn_accept(r->q, NULL, 0); break;
	case OP_REJECT: if ((r = pick(s))) (void)qsm_conn_reject(r->q, NULL, 0); break;
	case OP_DESTROY:
		if ((r = pick(s))) {
			CHECK(qsm_conn_destroy(r->q) == 0, "destroy of a live queue");
			gone(r);
		}
		break;
	case OP_DESTROY_LISTENER:
		b = take(s);
		if (nlisteners) {
			b %= nlisteners;
			CHECK(qsm_listener_destroy(listeners[b]) == 0, "qsm_listener_destroy");
			listeners[b] = listeners[--nlisteners];
		}
		break;
	case OP_PASSIVE:
		b = take(s);
		next_decide = (int)(b % 3);
		next_abort = (b >> 2) < QSM_ACCEPT_STATE_COUNT ? (int)(b >> 2) : -1;
		break;
	case OP_COUNT: break;
	}
}

/* ---- an input ---- */

static void world_new(void)
{
	struct rc_fabric *rf;
	struct epoll_event e = { .events = EPOLLIN };

	fake_reset();
	CHECK(qsm_rdmacm_fabric_new(&fab) == 0, "qsm_rdmacm_fabric_new");
	rf = to_fab(fab);
	fake_set_cm_channel(rf->ch);
	/* no device monitor (fake_cm.c refuses netlink sockets): the device list is read on the
	 * tick, and the tick comes from the script, not from a 1 s timer */
	CHECK(rf->mon_err && rf->uev_fd < 0 && rf->rtnl_fd < 0, "no device monitor over the fake");
	epoll_ctl(rf->epfd, EPOLL_CTL_DEL, rf->tfd, NULL);
	close(rf->tfd);
	rf->tfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	e.data.fd = rf->tfd;
	CHECK(rf->tfd >= 0 && epoll_ctl(rf->epfd, EPOLL_CTL_ADD, rf->tfd, &e) == 0, "tick fd");
	real_ops = fab->ops;
	checked_ops = *real_ops;
	checked_ops.get_event = checked_get_event;
	fab->ops = &checked_ops;
	now_ns = 1000 * MS;
	CHECK(qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = fab, .now_ns = clock_now }, &ctx) == 0, "qsm_ctx_new");
	nrecs = nlisteners = 0;
	next_decide = 0;
	next_abort = -1;
}

/* Everything destroyed, dispatched until quiet, every timer run out; nothing left anywhere. */
static void world_end(void)
{
	struct qsm_counters k;

	for (int c = 0; c < FAKE_CALLS; c++)
		fake_fail_next((enum fake_call)c, 0, 0);
	while (nlisteners)
		CHECK(qsm_listener_destroy(listeners[--nlisteners]) == 0, "qsm_listener_destroy at the end");
	for (unsigned round = 0; round < 1000; round++) {
		/* (a request taken before its listener went makes a passive queue now) */
		for (unsigned i = 0; i < nrecs; i++)
			if (!recs[i]->gone) {
				CHECK(qsm_conn_destroy(recs[i]->q) == 0, "destroy at the end");
				gone(recs[i]);
			}
		settle();
		check_identities();
		k = counters();
		if (!k.queues_live && !k.devices_live && qsm_ctx_next_timeout_ms(ctx) < 0)
			break;
		time_passes(1);
		if (qsm_ctx_next_timeout_ms(ctx) < 0)
			now_ns += 1000 * MS;
	}
	k = counters();
	CHECK(!k.queues_live && !k.devices_live && !k.srqs_live, "at the end: %llu queues, %llu devices, "
	      "%llu SRQs live", (unsigned long long)k.queues_live, (unsigned long long)k.devices_live,
	      (unsigned long long)k.srqs_live);
	qsm_ctx_free(ctx);
	ctx = NULL;
	fab = NULL;
	/* the process-wide verbs contexts (pins.c) of this input's devices: all let go of */
	for (unsigned i = 0; i < fake_id_count(); i++)
		if (fake_id_is_pin(fake_id(i)))
			fake_cm_event(fake_id(i), RDMA_CM_EVENT_DEVICE_REMOVAL, 0, NULL, 0, 0, false);
	qsm_rc_pins_take_events();
	fake_each_context(qsm_rc_vctx_removed);
	for (unsigned i = 0; i < nrecs; i++)
		free(recs[i]);
	free(recs);
	recs = NULL;
	nrecs = recs_cap = 0;
	CHECK(fake_end(), "left below the fabric: %u ids, %u QPs, %u CQs, %u PDs, %u completion channels, "
	      "%u CM channels, %u MRs", fake_n.ids, fake_n.qps, fake_n.cqs, fake_n.pds, fake_n.comp_channels,
	      fake_n.channels, fake_n.mrs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct script s = { data, size };
	bool verbose = getenv("QSM_FUZZ_TRACE") != NULL;

	world_new();
	for (unsigned step = 1; s.n && step <= MAX_OPS; step++) {
		enum op op = (enum op)(take(&s) % OP_COUNT);

		if (verbose)
			fprintf(stderr, "qsm fuzz: step %u: %s\n", step, op_names[op]);
		run_op(op, &s);
		check_identities();
	}
	world_end();
	return 0;
}
