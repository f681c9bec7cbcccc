/* rdma-qsm benchmark baseline: the rdma_cm event loop a careful ULP author writes by hand on
 * librdmacm and libibverbs, doing the work qsm does (FIFO, step timeouts, backoff with jitter,
 * counters, stale ids). */
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "dispatch.h"
#include "fake_rdmacm.h"
#include "instr.h"

/*
 * One rdma_cm event channel and one CQ (with its completion channel) in an epoll, read only
 * when epoll says so: rdma_get_cm_event() until EAGAIN, each event's connection found from
 * event->id->context, the event acked before anything runs (so that rdma_destroy_id never waits
 * on one), then the CQ polled, 16 at a time, re-armed and polled once more when empty, as every
 * verbs loop does.  The rdma_cm calls are the ones qsm's fabric makes: rdma_create_id and
 * rdma_resolve_addr, rdma_resolve_route on ADDR_RESOLVED, rdma_create_qp (one more WR of each
 * for the drain's marker) and rdma_connect on ROUTE_RESOLVED, rdma_disconnect and the drain (the
 * QP to ERR, a signaled send behind everything, as the kernel's ib_drain_qp) on DISCONNECTED,
 * rdma_destroy_qp and rdma_destroy_id once the marker's flush comes back.
 *
 * One FIFO ring (run to completion: what a handler causes is queued, never
 * recursed into), one `switch` per state, a step timeout per transient state in a lazy
 * min-heap (re-armed on every state change, O(1)), exponential reconnect backoff with
 * xorshift jitter, per-event counters, and a generation per connection that marks events of
 * an id it let go of as stale.  Written as tight as a careful author writes it: the clock is
 * read once per dispatch pass; the ring is a power of two (a mask, no modulo) of 32-byte slots
 * (private data out of line, allocated only when an event has some); the push is inline with
 * its growth out of line; an event is dispatched from its ring slot, not copied; the ring
 * shrinks after a pass that left it mostly empty (as qsm's FIFO trim does); a re-armed timer
 * already in the heap costs two stores; no eventfd is written for work queued and dispatched
 * in the same pass.
 *
 * And what a ULP needs of any multiplexer, as qsm gives it: the connect step's timeout never
 * fires before the CM's own bound (a timer that races the CM tears down connections the CM
 * would still complete); the completions left on a QP are taken before its id is destroyed
 * (every WR completes exactly once); a failure for lack of a resource is counted and ends the
 * retries after max_exhausted in a row, and a loss that lasts loss_timeout_ms gives up (a
 * resource exhausted is reported, never retried silently).
 */

/* The mux's own events, after rdma_cm's (RDMA_CM_EVENT_*, switched on as they come). */
enum {
	MUX_EV_CONNECT = 32, MUX_EV_READY, MUX_EV_DISCONNECT, MUX_EV_DESTROY, MUX_EV_TIMEOUT,
	MUX_EV_RETRY, MUX_EV_DRAINED, MUX_EV_GIVE_UP, MUX_EV_QP_FATAL, MUX_EV_WC_ERROR, MUX_EV_LIMIT
};

static const char *const mux_event_names[MUX_EV_LIMIT - MUX_EV_CONNECT] = {
	"CONNECT", "READY", "DISCONNECT", "DESTROY", "TIMEOUT", "RETRY", "DRAINED", "GIVE_UP",
	"QP_FATAL", "WC_ERROR",
};

static const char *mux_event_name(int e)
{
	return e < MUX_EV_CONNECT ? rdma_event_str((enum rdma_cm_event_type)e) :
				    mux_event_names[e - MUX_EV_CONNECT];
}

enum mux_state {
	MUX_IDLE, MUX_ADDR, MUX_ROUTE, MUX_CONNECTING, MUX_CONNECTED, MUX_LIVE, MUX_DISCONNECTING,
	MUX_DRAINING, MUX_CLOSING, MUX_WAIT, MUX_FAILED, MUX_CLOSED, MUX_NSTATES
};
enum mux_qp { MUX_QP_NONE, MUX_QP_INIT, MUX_QP_RTR, MUX_QP_RTS, MUX_QP_ERR };

static const char *const mux_state_names[MUX_NSTATES] = {
	"IDLE", "ADDR_RESOLVING", "ROUTE_RESOLVING", "CONNECTING", "CONNECTED", "LIVE",
	"DISCONNECTING", "DRAINING", "CLOSING", "RECONNECT_WAIT", "FAILED", "CLOSED",
};

struct mux_timer {
	uint64_t key_ns, deadline_ns;     /* lazy: key <= deadline, or the timer is disarmed */
	uint32_t idx;                     /* in the heap, or UINT32_MAX */
	int event;
	bool armed;
};

struct mux_conn;

struct mux_ulp {
	int (*qp_ready)(struct mux_conn *c);
	int (*connected)(struct mux_conn *c);
	int (*live)(struct mux_conn *c);
	void (*unexpected)(struct mux_conn *c, int event);
	int (*completion)(struct mux_conn *c, const struct ibv_wc *wc);
};

struct mux_policy {
	uint32_t initial_delay_ms, max_delay_ms, multiplier_pct, jitter_pct, max_attempts;
	uint32_t loss_timeout_ms;         /* 0: none */
	uint32_t max_exhausted;           /* resource failures in a row; UINT32_MAX: no limit */
};

struct mux;

struct mux_conn {
	struct mux *m;
	const struct mux_ulp *ulp;
	size_t index;
	struct rdma_cm_id *id;            /* its context: this connection */
	uint32_t gen;                     /* bumped on every id released */
	/* The wr_ids of the WRs on its QP, send and receive, in post order (a work queue completes
	 * in order): made with its first QP, kept for the next ones, so that every WR completes
	 * exactly once, by the device or, at a release, flushed by the mux.  A post records its
	 * wr_id at the tail (the bench posts none but the drain's marker, which is not in them). */
	struct mux_wq {
		uint64_t *wr_id;
		uint32_t mask, head, tail;
	} wq[2];
	uint32_t refs;                    /* events in the ring that point here */
	uint8_t state, qp;
	bool dead;
	struct mux_timer timer;
	struct mux_policy policy;
	uint32_t attempts, exhausted, next_delay_ms;
	uint64_t lost_at_ns;
	uint32_t timeout_ms[MUX_NSTATES]; /* per-state step timeouts, 0 = none */
};

/* A ring slot stays small (32 bytes): private data, when an event has any, lives out of line. */
struct mux_event {
	struct mux_conn *c;
	struct rdma_cm_id *id;            /* the id it came on; NULL for the mux's own */
	uint32_t gen;
	int16_t event;
	uint16_t pdata_len;
	int status;
	uint8_t *pdata;                   /* malloc'd, only when pdata_len */
};

struct mux_counters {
	uint64_t events[MUX_EV_LIMIT];
	uint64_t fabric_events, popped, dispatched, transitions, unexpected, dropped, reconnects;
	uint64_t action_errors, exhausted, completions;
};

struct mux {
	struct rdma_event_channel *ch;
	struct ibv_context *verbs;        /* the device the PD and CQ are on */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_comp_channel *cc;
	int epfd;                         /* ch's fd and cc's */
	bool ready_cm, ready_cc, ready_cq;   /* said readable, not read to EAGAIN yet */
	struct sockaddr_in dst;
	struct mux_event *ring;
	size_t head, len, cap;            /* cap: a power of two */
	size_t hwm;                       /* most events queued at once since the last trim */
	struct mux_conn **heap;
	uint32_t heap_len, heap_cap;
	uint64_t now;                     /* read once per pass */
	uint64_t (*clock)(void);          /* now_ns, or the timer case's virtual clock */
	int timerfd;
	uint64_t timerfd_at;
	uint64_t rng;
	struct mux_counters cnt;
	void (*trace)(struct mux_conn *c, int from, int event, int to);
};

/* ---- the ring ---- */

#define RING_MIN 64

/* The ring at a new capacity (a power of two), its events in order from slot 0. */
static int ring_resize(struct mux *m, size_t cap)
{
	struct mux_event *n = malloc(cap * sizeof(*n));

	if (!n)
		return -ENOMEM;
	for (size_t i = 0; i < m->len; i++)
		n[i] = m->ring[(m->head + i) & (m->cap - 1)];
	free(m->ring);
	m->ring = n;
	m->cap = cap;
	m->head = 0;
	return 0;
}

/* Out of line and cold: the push that finds the ring full. */
static __attribute__((noinline, cold)) int ring_grow(struct mux *m)
{
	return ring_resize(m, m->cap ? m->cap * 2 : RING_MIN);
}

/* After a pass that left the ring empty, as the product's FIFO trim does: sized to twice what
 * the pass queued (at least RING_MIN) when that is under a quarter of it. */
static void ring_trim(struct mux *m)
{
	size_t want = RING_MIN;

	while (want < 2 * m->hwm)
		want *= 2;
	m->hwm = 0;
	if (m->len || m->cap < 4 * want)
		return;
	(void)ring_resize(m, want);
}

static inline struct mux_event *mux_push(struct mux *m, struct mux_conn *c, int event, int status)
{
	struct mux_event *e;

	if (__builtin_expect(m->len == m->cap, 0) && ring_grow(m) < 0)
		return NULL;
	e = &m->ring[(m->head + m->len++) & (m->cap - 1)];
	if (m->len > m->hwm)
		m->hwm = m->len;
	e->c = c;
	e->id = NULL;
	e->gen = c->gen;
	e->event = (int16_t)event;
	e->status = status;
	e->pdata_len = 0;
	c->refs++;
	return e;
}

static void mux_put(struct mux_conn *c)
{
	if (!--c->refs && c->state == MUX_CLOSED)
		free(c);
}

/* ---- timers: a lazy binary min-heap, as any event loop keeps ---- */

static void heap_swap(struct mux *m, uint32_t a, uint32_t b)
{
	struct mux_conn *t = m->heap[a];

	m->heap[a] = m->heap[b];
	m->heap[b] = t;
	m->heap[a]->timer.idx = a;
	m->heap[b]->timer.idx = b;
}

static void heap_up(struct mux *m, uint32_t i)
{
	while (i && m->heap[(i - 1) / 2]->timer.key_ns > m->heap[i]->timer.key_ns) {
		heap_swap(m, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(struct mux *m, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, s = i;

		if (l < m->heap_len && m->heap[l]->timer.key_ns < m->heap[s]->timer.key_ns)
			s = l;
		if (r < m->heap_len && m->heap[r]->timer.key_ns < m->heap[s]->timer.key_ns)
			s = r;
		if (s == i)
			return;
		heap_swap(m, i, s);
		i = s;
	}
}

static void timer_remove(struct mux *m, struct mux_conn *c)
{
	uint32_t i = c->timer.idx;

	c->timer.armed = false;
	if (i == UINT32_MAX)
		return;
	c->timer.idx = UINT32_MAX;
	if (i == --m->heap_len)
		return;
	m->heap[i] = m->heap[m->heap_len];
	m->heap[i]->timer.idx = i;
	heap_up(m, i);
	heap_down(m, m->heap[i]->timer.idx);
}

/* A timer not in the heap goes in: out of line, with the heap's growth. */
static __attribute__((noinline)) void timer_insert(struct mux *m, struct mux_conn *c, uint64_t deadline)
{
	struct mux_timer *t = &c->timer;

	if (m->heap_len == m->heap_cap) {
		uint32_t cap = m->heap_cap ? m->heap_cap * 2 : 64;
		struct mux_conn **n = realloc(m->heap, cap * sizeof(*n));

		if (!n)
			abort();
		m->heap = n;
		m->heap_cap = cap;
	}
	t->key_ns = deadline;
	t->idx = m->heap_len;
	m->heap[m->heap_len++] = c;
	heap_up(m, t->idx);
}

/* Lazy: a timer in the heap with an earlier key only has its deadline moved. */
static inline void timer_arm(struct mux *m, struct mux_conn *c, int event, uint64_t delay_ms)
{
	struct mux_timer *t = &c->timer;
	uint64_t deadline = m->now + delay_ms * 1000000ull;

	t->event = event;
	t->deadline_ns = deadline;
	t->armed = true;
	if (t->idx == UINT32_MAX) {
		timer_insert(m, c, deadline);
	} else if (deadline < t->key_ns) {
		t->key_ns = deadline;
		heap_up(m, t->idx);
	}
}

static void timers_fire(struct mux *m)
{
	while (m->heap_len && m->heap[0]->timer.key_ns <= m->now) {
		struct mux_conn *c = m->heap[0];
		struct mux_timer *t = &c->timer;
		bool due;

		if (t->armed && t->key_ns < t->deadline_ns) {
			t->key_ns = t->deadline_ns;
			heap_down(m, 0);
			continue;
		}
		due = t->armed;
		timer_remove(m, c);
		if (due)
			mux_push(m, c, t->event, 0);
	}
}

static void timerfd_rearm(struct mux *m)
{
	uint64_t want = m->heap_len ? m->heap[0]->timer.key_ns : 0;
	struct itimerspec its = { { 0, 0 }, { (time_t)(want / 1000000000ull), (long)(want % 1000000000ull) } };

	if (want == m->timerfd_at)
		return;
	if (timerfd_settime(m->timerfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		m->timerfd_at = want;
}

/* ---- actions ---- */

static void refused(struct mux_conn *c, int r);

static void ulp_completion(struct mux_conn *c, const struct ibv_wc *wc)
{
	c->m->cnt.completions++;
	if (c->ulp->completion && !c->dead)
		refused(c, c->ulp->completion(c, wc));
}

enum { MUX_WQ_SEND, MUX_WQ_RECV };
#define MUX_WQ_SLOTS 128                      /* a power of two over the QP's 65 WRs */

/* What the QP still holds (a drain ended by its timeout) completes now, flushed, before its id
 * goes: every WR exactly once. */
static __attribute__((noinline)) void flush_left(struct mux_conn *c)
{
	struct ibv_wc flushed = { .status = IBV_WC_WR_FLUSH_ERR, .qp_num = c->id->qp->qp_num };

	for (int q = MUX_WQ_SEND; q <= MUX_WQ_RECV; q++) {
		struct mux_wq *w = &c->wq[q];

		flushed.opcode = q == MUX_WQ_RECV ? IBV_WC_RECV : IBV_WC_SEND;
		while (w->head != w->tail) {
			flushed.wr_id = w->wr_id[w->head++ & w->mask];
			ulp_completion(c, &flushed);
		}
	}
}

/* The work queues' rings, at the connection's first QP. */
static __attribute__((noinline, cold)) int wq_alloc(struct mux_conn *c)
{
	for (int q = MUX_WQ_SEND; q <= MUX_WQ_RECV; q++) {
		c->wq[q].wr_id = malloc(MUX_WQ_SLOTS * sizeof(uint64_t));
		if (!c->wq[q].wr_id)
			return -ENOMEM;
		c->wq[q].mask = MUX_WQ_SLOTS - 1;
	}
	return 0;
}

static void release_id(struct mux_conn *c)
{
	if (!c->id)
		return;
	if (c->id->qp) {
		if ((c->wq[MUX_WQ_SEND].head != c->wq[MUX_WQ_SEND].tail || c->wq[MUX_WQ_RECV].head != c->wq[MUX_WQ_RECV].tail) &&
		    !c->dead)
			flush_left(c);
		rdma_destroy_qp(c->id);
	}
	rdma_destroy_id(c->id);
	c->id = NULL;
	c->gen++;
	c->qp = MUX_QP_NONE;
}

/* A call that failed is handled as the event its asynchronous failure would be. */
static void feed_back(struct mux_conn *c, int r, int event)
{
	if (r >= 0)
		return;
	c->m->cnt.action_errors++;
	mux_push(c->m, c, event, r);
}

static uint64_t backoff(struct mux_conn *c)
{
	const struct mux_policy *p = &c->policy;
	uint64_t d = c->next_delay_ms ? c->next_delay_ms : p->initial_delay_ms, n;

	if (d > p->max_delay_ms)
		d = p->max_delay_ms;
	n = d * p->multiplier_pct / 100;
	c->next_delay_ms = (uint32_t)(n > p->max_delay_ms ? p->max_delay_ms : n);
	if (p->jitter_pct && d) {
		uint64_t span = d * p->jitter_pct / 100;
		struct mux *m = c->m;

		m->rng ^= m->rng << 13;
		m->rng ^= m->rng >> 7;
		m->rng ^= m->rng << 17;
		if (span)
			d = d - span + m->rng % (2 * span + 1);
	}
	return d;
}

static bool exhaustion(int status)
{
	return status == -ENOMEM || status == -ENOSPC || status == -ENOBUFS || status == -EMFILE ||
	       status == -ENFILE;
}

/* @status: why the attempt failed. */
static void arm_retry(struct mux_conn *c, int status)
{
	const struct mux_policy *p = &c->policy;

	c->attempts++;
	if (!c->lost_at_ns)
		c->lost_at_ns = c->m->now;
	if (exhaustion(status)) {
		c->exhausted++;
		c->m->cnt.exhausted++;
	} else {
		c->exhausted = 0;
	}
	if ((p->max_attempts && c->attempts >= p->max_attempts) ||
	    (p->loss_timeout_ms && c->m->now - c->lost_at_ns >= p->loss_timeout_ms * 1000000ull) ||
	    c->exhausted >= p->max_exhausted)
		mux_push(c->m, c, MUX_EV_GIVE_UP, status);
	else
		timer_arm(c->m, c, MUX_EV_RETRY, backoff(c));
}

/* librdmacm's calls: 0, or -errno */
static int cm_call(int r)
{
	return r < 0 ? (errno > 0 ? -errno : -EINVAL) : 0;
}

static void resolve_addr(struct mux_conn *c)
{
	struct mux *m = c->m;
	int r;

	release_id(c);
	r = cm_call(rdma_create_id(m->ch, &c->id, c, RDMA_PS_TCP));
	if (r < 0)
		c->id = NULL;
	else
		r = cm_call(rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&m->dst, 2000));
	feed_back(c, r, RDMA_CM_EVENT_ADDR_ERROR);
}

/* The QP in ERR and a signaled send behind everything posted (wr_id: the connection, bit 0
 * set): its flush says every WR before it completed (the kernel's ib_drain_qp). */
static int drain(struct mux_conn *c)
{
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct ibv_send_wr marker = { .wr_id = (uintptr_t)c | 1, .opcode = IBV_WR_SEND,
				      .send_flags = IBV_SEND_SIGNALED }, *bad;
	int r = ibv_modify_qp(c->id->qp, &err, IBV_QP_STATE);

	if (!r)
		r = ibv_post_send(c->id->qp, &marker, &bad);
	return -r;
}

static void start_drain(struct mux_conn *c)
{
	rdma_disconnect(c->id); /* the peer may be gone already: drain anyway */
	feed_back(c, c->qp != MUX_QP_NONE ? drain(c) : -ENOENT, MUX_EV_DRAINED);
	c->qp = MUX_QP_ERR;
}

/*
 * How long the CM may take to end a connect by itself (IB and RoCE: the REQ sent up to 16
 * times, each waiting 2 x the packet lifetime + the peer's response time, 4.096 us x 2^value;
 * RoCE's lifetime 18, response 20: 98 s; iWARP: TCP's SYN retries, 127 s), as the kernel's
 * cma.c and cm.c count it.
 */
static uint32_t iba_ms(unsigned t)
{
	return 1u << (t > 8 ? (t > 31 ? 23 : t - 8) : 0);
}

static uint32_t cm_timeout_ms(const struct rdma_cm_id *id)
{
	unsigned plt = 18;

	if (id->verbs && id->verbs->device->transport_type == IBV_TRANSPORT_IWARP)
		return 127000;
	if (id->route.num_paths > 0 && id->route.path_rec && (id->route.path_rec->packet_life_time & 0x3f) > plt)
		plt = id->route.path_rec->packet_life_time & 0x3f;
	return 16 * (2 * iba_ms(plt) + iba_ms(20));
}

static void mux_close(struct mux_conn *c)
{
	timer_remove(c->m, c);
	release_id(c);
	c->dead = true;
	c->state = MUX_CLOSED;
}

/* A handler returned non-zero: the connection goes, and no callback for it ever again. */
static void refused(struct mux_conn *c, int r)
{
	if (r)
		mux_close(c);
}

/* A state change: the old step timeout is void (lazily), the new state's is armed. */
static inline void to(struct mux_conn *c, int event, enum mux_state s)
{
	struct mux *m = c->m;
	int from = c->state;

	m->cnt.transitions++;
	if (m->trace)
		m->trace(c, from, event, s);
	if (from == (int)s)
		return;
	c->timer.armed = false;
	c->state = (uint8_t)s;
	if (c->timeout_ms[s]) {
		uint32_t ms = c->timeout_ms[s], cm;

		/* after the CM's own bound, a quarter more, as qsm's after_cm states */
		if (s == MUX_CONNECTING && c->id && (cm = cm_timeout_ms(c->id)) && cm + cm / 4 > ms)
			ms = cm + cm / 4;
		timer_arm(m, c, MUX_EV_TIMEOUT, ms);
	}
}

static void unexpected(struct mux_conn *c, int event)
{
	c->m->cnt.unexpected++;
	if (c->m->trace)
		c->m->trace(c, c->state, event, -1);
	if (c->ulp->unexpected)
		c->ulp->unexpected(c, event);
}

static bool is_lost(int e)
{
	return e == RDMA_CM_EVENT_DISCONNECTED || e == RDMA_CM_EVENT_ADDR_CHANGE || e == MUX_EV_QP_FATAL ||
	       e == MUX_EV_WC_ERROR;
}

/* The ULP says its handshake is done: CONNECTED -> LIVE, queued like any event. */
static int mux_ready(struct mux_conn *c)
{
	if (c->dead)
		return -ESTALE;
	if (c->state != MUX_CONNECTED)
		return -ENOMSG;
	return mux_push(c->m, c, MUX_EV_READY, 0) ? 0 : -ENOMEM;
}

/* The rdma_cm event handler: switch on the state, then on the event. */
static void handle(struct mux_conn *c, int e, int status)
{
	if (e == MUX_EV_DESTROY) {
		mux_close(c);
		return;
	}
	switch (c->state) {
	case MUX_IDLE:
		if (e != MUX_EV_CONNECT)
			break;
		to(c, e, MUX_ADDR);
		resolve_addr(c);
		return;
	case MUX_ADDR:
		if (e == RDMA_CM_EVENT_ADDR_RESOLVED) {
			to(c, e, MUX_ROUTE);
			/* the PD and CQ are this device's: an id on another one cannot use them */
			if (__builtin_expect(c->id->verbs != c->m->verbs, 0)) {
				feed_back(c, -ENODEV, RDMA_CM_EVENT_ROUTE_ERROR);
				return;
			}
			feed_back(c, cm_call(rdma_resolve_route(c->id, 2000)), RDMA_CM_EVENT_ROUTE_ERROR);
			return;
		}
		if (e == RDMA_CM_EVENT_ADDR_ERROR || e == RDMA_CM_EVENT_ADDR_CHANGE || e == MUX_EV_TIMEOUT)
			goto retry;
		break;
	case MUX_ROUTE:
		if (e == RDMA_CM_EVENT_ROUTE_RESOLVED) {
			struct mux *m = c->m;
			/* one more WR of each for the drain's marker */
			struct ibv_qp_init_attr qp = {
				.qp_context = c, .send_cq = m->cq, .recv_cq = m->cq, .qp_type = IBV_QPT_RC,
				.cap = { .max_send_wr = 65, .max_recv_wr = 65, .max_send_sge = 1,
					 .max_recv_sge = 1 } };
			/* RDMA READ both ways, retries at the maximum (as rping, and qsm's fabric) */
			struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
						     .flow_control = 1, .retry_count = 6, .rnr_retry_count = 7 };
			int r;

			to(c, e, MUX_CONNECTING);
			r = !c->wq[MUX_WQ_RECV].wr_id ? wq_alloc(c) : 0;
			if (r == 0)
				r = cm_call(rdma_create_qp(c->id, m->pd, &qp));
			if (r == 0) {
				c->qp = MUX_QP_INIT;
				c->wq[MUX_WQ_SEND].head = c->wq[MUX_WQ_SEND].tail = 0;
				c->wq[MUX_WQ_RECV].head = c->wq[MUX_WQ_RECV].tail = 0;
				if (c->ulp->qp_ready && c->ulp->qp_ready(c)) {
					refused(c, 1);
					return;
				}
				r = cm_call(rdma_connect(c->id, &p));
			}
			feed_back(c, r, RDMA_CM_EVENT_CONNECT_ERROR);
			return;
		}
		if (e == RDMA_CM_EVENT_ROUTE_ERROR || e == RDMA_CM_EVENT_ADDR_CHANGE || e == MUX_EV_TIMEOUT)
			goto retry;
		break;
	case MUX_CONNECTING:
		if (e == RDMA_CM_EVENT_ESTABLISHED) {
			c->qp = MUX_QP_RTS;
			c->attempts = 0;
			c->next_delay_ms = 0;
			c->lost_at_ns = 0;
			to(c, e, MUX_CONNECTED);
			refused(c, c->ulp->connected(c));
			return;
		}
		if (e == RDMA_CM_EVENT_REJECTED || e == RDMA_CM_EVENT_UNREACHABLE || e == RDMA_CM_EVENT_CONNECT_ERROR ||
		    e == RDMA_CM_EVENT_ADDR_CHANGE || e == MUX_EV_QP_FATAL || e == MUX_EV_TIMEOUT)
			goto retry;
		break;
	case MUX_CONNECTED:
		if (e == MUX_EV_READY) {
			to(c, e, MUX_LIVE);
			refused(c, c->ulp->live(c));
			return;
		}
		/* what is not READY, CONNECTED takes as LIVE does */
		/* fall through */
	case MUX_LIVE:
		if (is_lost(e) || (e == MUX_EV_TIMEOUT && c->state == MUX_CONNECTED)) {
			if (!c->lost_at_ns)
				c->lost_at_ns = c->m->now;
			to(c, e, MUX_DRAINING);
			start_drain(c);
			return;
		}
		if (e == MUX_EV_DISCONNECT) {
			to(c, e, MUX_DISCONNECTING);
			feed_back(c, cm_call(rdma_disconnect(c->id)), RDMA_CM_EVENT_DISCONNECTED);
			c->qp = MUX_QP_ERR;
			return;
		}
		break;
	case MUX_DISCONNECTING:
		if (e == RDMA_CM_EVENT_DISCONNECTED || e == MUX_EV_QP_FATAL || e == MUX_EV_TIMEOUT) {
			to(c, e, MUX_CLOSING);
			start_drain(c);
			return;
		}
		if (e == MUX_EV_DISCONNECT)
			return;
		break;
	case MUX_DRAINING:
		if (e == MUX_EV_DRAINED || e == MUX_EV_TIMEOUT) {
			release_id(c);
			to(c, e, MUX_WAIT);
			arm_retry(c, status);
			return;
		}
		if (is_lost(e) || e == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
			to(c, e, MUX_DRAINING);
			return;
		}
		if (e == MUX_EV_DISCONNECT) {
			to(c, e, MUX_CLOSING);
			return;
		}
		break;
	case MUX_CLOSING:
		if (e == MUX_EV_DRAINED || e == MUX_EV_TIMEOUT) {
			mux_close(c);
			return;
		}
		if (is_lost(e) || e == RDMA_CM_EVENT_TIMEWAIT_EXIT || e == MUX_EV_DISCONNECT)
			return;
		break;
	case MUX_WAIT:
		if (e == MUX_EV_RETRY || e == MUX_EV_CONNECT) {
			c->m->cnt.reconnects++;
			to(c, e, MUX_ADDR);
			resolve_addr(c);
			return;
		}
		if (e == MUX_EV_GIVE_UP) {
			to(c, e, MUX_FAILED);
			return;
		}
		break;
	}
	unexpected(c, e);
	return;
retry:
	release_id(c);
	to(c, e, MUX_WAIT);
	arm_retry(c, status);
}

/* ---- the loop ---- */

/* One rdma_cm event into the ring, copied (private data out of line) and acked first. */
static inline __attribute__((always_inline)) int take_cm_event(struct mux *m)
{
	struct rdma_cm_event *ce;
	struct mux_event *ev;
	struct mux_conn *c;
	const void *pdata;
	size_t len;

	if (rdma_get_cm_event(m->ch, &ce) < 0)
		return -EAGAIN;
	m->cnt.fabric_events++;
	c = ce->id->context;   /* every id is one of ours here: no request comes (no listener) */
	ev = mux_push(m, c, (int)ce->event, ce->status);
	if (!ev) {
		rdma_ack_cm_event(ce);
		return -ENOMEM;
	}
	ev->id = ce->id;
	pdata = ce->param.conn.private_data;
	len = ce->param.conn.private_data_len;
	if (__builtin_expect(pdata && len, 0)) {
		ev->pdata = malloc(len);
		if (ev->pdata) {
			memcpy(ev->pdata, pdata, len);
			ev->pdata_len = (uint16_t)len;
		}
	}
	rdma_ack_cm_event(ce);
	return 0;
}

/* The CQ's completions, 16 at a time: the drain's marker (bit 0 of its wr_id) as DRAINED, the
 * rest to the ULP with the wr_id at its work queue's head (bit 1: a receive), an error as
 * WC_ERROR too; one of a QP let go of since is dropped.  Empty: re-armed
 * and polled once more, as every verbs loop does (a completion between the two would be
 * missed).  -EAGAIN when there was none. */
static int poll_cq(struct mux *m)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(m->cq, 16, wc);

	if (n <= 0) {
		ibv_req_notify_cq(m->cq, 0);
		n = ibv_poll_cq(m->cq, 16, wc);
		if (n <= 0) {
			m->ready_cq = false;
			return -EAGAIN;
		}
	}
	for (int i = 0; i < n; i++) {
		struct mux_conn *c = (struct mux_conn *)(uintptr_t)(wc[i].wr_id & ~(uint64_t)3);
		struct mux_event *ev;

		if (!c->id || !c->id->qp || c->id->qp->qp_num != wc[i].qp_num) {
			m->cnt.dropped++;
			continue;
		}
		if (!(wc[i].wr_id & 1)) {
			struct mux_wq *w = &c->wq[wc[i].wr_id & 2 ? MUX_WQ_RECV : MUX_WQ_SEND];

			wc[i].wr_id = w->wr_id[w->head++ & w->mask];
			ulp_completion(c, &wc[i]);
			if (wc[i].status == IBV_WC_SUCCESS)
				continue;
		}
		ev = mux_push(m, c, wc[i].wr_id & 1 ? MUX_EV_DRAINED : MUX_EV_WC_ERROR, 0);
		if (ev)
			ev->id = c->id;
	}
	return 0;
}

/* The completion channel read dry: the CQ is polled from now on. */
static void cq_events(struct mux *m)
{
	struct ibv_cq *cq;
	void *ctx;
	unsigned n = 0;

	while (ibv_get_cq_event(m->cc, &cq, &ctx) == 0)
		n++;
	if (n)
		ibv_ack_cq_events(m->cq, n);
	m->ready_cq = true;
}

/* Which sources are readable (level-triggered: one not read dry is said again). */
static bool learn_ready(struct mux *m)
{
	struct epoll_event evs[4];
	int n = epoll_wait(m->epfd, evs, 4, 0);

	for (int i = 0; i < n; i++) {
		if (evs[i].data.fd == m->ch->fd)
			m->ready_cm = true;
		else
			m->ready_cc = true;
	}
	return n > 0;
}

/* The next event into the ring: the CM channel first, then the CQ; epoll asked only when no
 * source is known to be ready. */
static inline __attribute__((always_inline)) int take_event(struct mux *m)
{
	bool asked = false;

	for (;;) {
		if (m->ready_cm) {
			int r = take_cm_event(m);

			if (r != -EAGAIN)
				return r;
			m->ready_cm = false;
		}
		if (m->ready_cc) {
			m->ready_cc = false;
			cq_events(m);
		}
		if (m->ready_cq && poll_cq(m) == 0)
			return 0;
		if (asked || !learn_ready(m))
			return -EAGAIN;
		asked = true;
	}
}

static int mux_dispatch(struct mux *m, unsigned int budget)
{
	unsigned int n = 0;

	m->now = m->clock();
	timers_fire(m);
	while (n < budget) {
		const struct mux_event *h;
		struct mux_conn *c;
		uint8_t *pdata;
		int e, status;

		if (!m->len && take_event(m) < 0)
			break;
		if (!m->len)
			continue;
		/* dispatched from its slot: what the handler needs is read before the slot is freed
		 * for what the handler queues */
		h = &m->ring[m->head];
		c = h->c;
		e = h->event;
		status = h->status;
		pdata = h->pdata_len ? h->pdata : NULL;
		m->head = (m->head + 1) & (m->cap - 1);
		m->len--;
		m->cnt.popped++;
		if (c->dead || (h->id && h->gen != c->gen)) {
			m->cnt.dropped++;
		} else {
			m->cnt.dispatched++;
			m->cnt.events[e]++;
			handle(c, e, status);
		}
		if (pdata)
			free(pdata);
		mux_put(c);
		n++;
	}
	if (!m->len)
		ring_trim(m);
	timerfd_rearm(m);
	return (int)n;
}

/* ---- the ULP on the baseline: the same handler work as on qsm ---- */

static int ulp_connected(struct mux_conn *c)
{
	ulp_handler_calls++;
	return mux_ready(c);
}

static int ulp_live(struct mux_conn *c)
{
	(void)c;
	ulp_handler_calls++;
	return 0;
}

static const struct mux_ulp bench_ulp = { .connected = ulp_connected, .live = ulp_live };

/* As QSM_TRACE does for qsm: one line per transition or unexpected event (to -1). */
static void trace_stderr(struct mux_conn *c, int from, int event, int to_state)
{
	fprintf(stderr, "mux: conn %zu %s --%s--> %s\n", c->index, mux_state_names[from],
		mux_event_name(event), to_state < 0 ? "(unexpected)" : mux_state_names[to_state]);
}

/* Dispatch until nothing is left to do: the fake has nothing for the mux either (as qsm's). */
static void mux_until_idle(struct mux *m)
{
	do {
		while (mux_dispatch(m, 4096) > 0) {
		}
	} while (fake_many_pending());
}

/* The virtual clock (dispatch.h) */
static uint64_t vclock(void)
{
	return bench_vclock_ns;
}

/* One side's objects: the mux on the fake librdmacm, its connections made from `tmpl`, every
 * one connecting (the fake silent: no answer yet). */
struct mux_run {
	struct mux m;
	struct mux_conn **cs;
	size_t n;
	double bytes_per_queue;
};

static void mux_run_start(struct mux_run *r, size_t nqueues, const struct mux_conn *tmpl,
			  uint64_t (*clock)(void), bool hold)
{
	const char *trace = getenv("BENCH_MUX_TRACE");
	struct mallinfo2 m0, m1;
	struct mux *m = &r->m;

	fake_many_init(nqueues);
	many.silent = true;
	many.hold = hold;
	*m = (struct mux){ .rng = 0x9e3779b97f4a7c15ull, .clock = clock,
			   .dst = { .sin_family = AF_INET } };
	/* the device's PD, CQ and completion channel, as the ULP opens them before it connects */
	fake_many_device(&m->verbs, &m->pd, &m->cq, &m->cc);
	m->ch = rdma_create_event_channel();
	m->epfd = epoll_create1(EPOLL_CLOEXEC);
	m->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	r->cs = malloc(nqueues * sizeof(*r->cs));
	r->n = nqueues;
	if (trace && *trace)
		m->trace = trace_stderr;
	if (!r->cs || !m->ch || m->epfd < 0 || m->timerfd < 0 ||
	    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->ch->fd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.fd = m->ch->fd }) < 0 ||
	    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->cc->fd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.fd = m->cc->fd }) < 0)
		abort();
	m0 = mallinfo2();
	for (size_t i = 0; i < nqueues; i++) {
		struct mux_conn *c = malloc(sizeof(*c));

		if (!c)
			abort();
		*c = *tmpl;
		c->m = m;
		c->index = i;
		r->cs[i] = c;
	}
	m1 = mallinfo2();
	r->bytes_per_queue = (double)(m1.uordblks - m0.uordblks) / (double)nqueues;
	for (size_t i = 0; i < nqueues; i++)
		mux_push(m, r->cs[i], MUX_EV_CONNECT, 0);
	while (mux_dispatch(m, 4096) > 0) {
	}
	many.silent = false;
}

/* Every connection in `state`, nothing unexpected or dropped. */
static bool mux_settled(const struct mux_run *r, int state)
{
	const struct mux *m = &r->m;

	for (size_t i = 0; i < r->n; i++)
		if (r->cs[i]->state != state) {
			fprintf(stderr, "bench: mux connection %zu is %s\n", i, mux_state_names[r->cs[i]->state]);
			return false;
		}
	if (m->cnt.unexpected || m->cnt.dropped) {
		fprintf(stderr, "bench: mux: %llu unexpected, %llu dropped events\n",
			(unsigned long long)m->cnt.unexpected, (unsigned long long)m->cnt.dropped);
		return false;
	}
	return true;
}

static void mux_run_end(struct mux_run *r, const char *what, uint64_t events, uint64_t ns)
{
	struct mux *m = &r->m;

	if (getenv("BENCH_DEBUG"))
		fprintf(stderr, "mux%s: %zu queues: %llu events, %.3f s, popped %llu dropped %llu "
			"reconnects %llu\n", what, r->n, (unsigned long long)events, (double)ns / 1e9,
			(unsigned long long)m->cnt.popped, (unsigned long long)m->cnt.dropped,
			(unsigned long long)m->cnt.reconnects);
	for (size_t i = 0; i < r->n; i++) {
		mux_close(r->cs[i]);
		free(r->cs[i]->wq[MUX_WQ_SEND].wr_id);
		free(r->cs[i]->wq[MUX_WQ_RECV].wr_id);
		r->cs[i]->wq[MUX_WQ_SEND].wr_id = r->cs[i]->wq[MUX_WQ_RECV].wr_id = NULL;
		if (!r->cs[i]->refs)
			free(r->cs[i]);
	}
	free(r->cs);
	free(m->ring);
	free(m->heap);
	close(m->timerfd);
	close(m->epfd);
	rdma_destroy_event_channel(m->ch);
	fake_many_fini();
}

/* A connection as the ULP configures it: `ms` the backoff and step timeouts (the address and
 * route steps 1000 ms more, as qsm's), no jitter in the timer case. */
static struct mux_conn mux_tmpl(uint32_t ms, uint32_t jitter_pct)
{
	return (struct mux_conn){
		.ulp = &bench_ulp, .state = MUX_IDLE, .timer = { .idx = UINT32_MAX },
		.policy = { .initial_delay_ms = ms, .max_delay_ms = ms, .multiplier_pct = 200,
			    .jitter_pct = jitter_pct, .max_exhausted = 8 },
		.timeout_ms = { [MUX_ADDR] = ms + 1000, [MUX_ROUTE] = ms + 1000, [MUX_CONNECTING] = ms,
				[MUX_DISCONNECTING] = 2000, [MUX_DRAINING] = ms, [MUX_CLOSING] = ms },
	};
}

/* Milliseconds to the earliest timer key (rounded up, at least 1), as qsm_ctx_next_timeout_ms. */
static uint64_t mux_next_timeout_ms(const struct mux *m)
{
	uint64_t now = vclock(), key = m->heap_len ? m->heap[0]->timer.key_ns : now;

	return key > now ? (key - now + 999999) / 1000000 : 1;
}

/* The measured loop: in the cycle case (rounds 0), `cycles` times the virtual clock moved so
 * that every RETRY is due, then dispatch until idle; in the timer case that many rounds, the
 * clock moved to the next timer before each. */
static struct result mux_measure(struct mux_run *run, uint64_t cycles, bool timers, int instr)
{
	struct result r = { 0 };
	uint64_t before = run->m.cnt.dispatched, calls = ulp_handler_calls, cm = many.events, t0, ns;

	t0 = measure_start(instr);
	for (uint64_t k = 0; k < cycles; k++) {
		bench_vclock_ns += timers ? mux_next_timeout_ms(&run->m) * 1000000ull :
					    BENCH_CYCLE_JUMP_MS * 1000000ull;
		mux_until_idle(&run->m);
	}
	ns = measure_stop(instr, t0);
	r.events = run->m.cnt.dispatched - before;
	if (timers) {
		r.ok = r.events == cycles * run->n &&
		       mux_settled(run, cycles % 2 ? MUX_WAIT : MUX_ADDR);
		if (r.events != cycles * run->n)
			fprintf(stderr, "bench: mux timers: %llu dispatches (want %llu)\n",
				(unsigned long long)r.events, (unsigned long long)(cycles * run->n));
	} else {
		r.ok = mux_settled(run, MUX_WAIT) &&
		       bench_check("mux", r.events, ulp_handler_calls - calls, many.events - cm, run->n, cycles);
	}
	r.ns_per_event = r.events ? (double)ns / (double)r.events : 0;
	r.bytes_per_queue = run->bytes_per_queue;
	mux_run_end(run, timers ? " timers" : "", r.events, ns);
	return r;
}

struct result run_mux(size_t nqueues, uint64_t cycles, int instr)
{
	const struct mux_conn tmpl = mux_tmpl(BENCH_RETRY_MS, 10);
	struct mux_run run;
	struct result r;
	bool ok;

	bench_vclock_ns = BENCH_VCLOCK_START;
	mux_run_start(&run, nqueues, &tmpl, vclock, true);
	/* the first cycle, not measured: every connection's answers come, and it waits to reconnect */
	fake_many_answer();
	mux_until_idle(&run.m);
	ok = mux_settled(&run, MUX_WAIT);
	r = mux_measure(&run, cycles, false, instr);
	r.ok &= ok;
	return r;
}

struct result run_mux_timers(size_t nqueues, uint64_t rounds, int instr)
{
	const struct mux_conn tmpl = mux_tmpl(BENCH_TIMER_MS, 0);
	struct mux_run run;

	bench_vclock_ns = BENCH_VCLOCK_START;
	mux_run_start(&run, nqueues, &tmpl, vclock, false);
	many.silent = true;   /* no answer, ever */
	return mux_measure(&run, rounds ? rounds : 1, true, instr);
}
