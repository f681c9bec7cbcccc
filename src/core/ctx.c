/* rdma-qsm: the ctx.  One per thread: it owns the fabric, the event FIFO and the timers,
 * and runs every callback from qsm_ctx_dispatch(), bounded, never blocking. */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "runtime.h"

#define DEFAULT_BUDGET 64

static uint64_t monotonic_ns(void *arg)
{
	struct timespec ts;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t qsm_now(struct qsm_ctx *ctx)
{
	return ctx->now_ns(ctx->now_arg);
}

static int epoll_add(int epfd, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int qsm_ctx_new(struct qsm_ctx **ret, const struct qsm_ctx_opts *opts)
{
	struct qsm_ctx *ctx;
	const char *env;
	int r;

	if (!ret || !opts || !opts->fabric || !opts->fabric->ops)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->epfd = ctx->timerfd = ctx->kickfd = -1;
	ctx->now_ns = opts->now_ns ? opts->now_ns : monotonic_ns;
	ctx->now_arg = opts->now_arg;
	ctx->rng = opts->seed ? opts->seed : 0x9e3779b97f4a7c15ull;
	qsm_list_init(&ctx->conns);
	qsm_list_init(&ctx->listeners);
	qsm_list_init(&ctx->devices);
	qsm_list_init(&ctx->pools);

	ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
	ctx->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ctx->kickfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ctx->epfd < 0 || ctx->timerfd < 0 || ctx->kickfd < 0) {
		r = -errno;
		goto fail;
	}
	if ((r = epoll_add(ctx->epfd, ctx->timerfd)) < 0 || (r = epoll_add(ctx->epfd, ctx->kickfd)) < 0 ||
	    (r = epoll_add(ctx->epfd, opts->fabric->ops->fd(opts->fabric))) < 0)
		goto fail;

	ctx->fabric = opts->fabric;
	ctx->ops = opts->fabric->ops;
	env = getenv("QSM_TRACE");
	ctx->trace_stderr = env && *env && strcmp(env, "0") != 0;
	ctx->t0_ns = qsm_now(ctx);
	*ret = ctx;
	return 0;
fail:
	if (ctx->epfd >= 0)
		close(ctx->epfd);
	if (ctx->timerfd >= 0)
		close(ctx->timerfd);
	if (ctx->kickfd >= 0)
		close(ctx->kickfd);
	free(ctx);
	return r;
}

void qsm_ctx_free(struct qsm_ctx *ctx)
{
	if (!ctx)
		return;
	/* No callbacks from here on: tear down every object, then drop queued events. */
	while (!qsm_list_empty(&ctx->listeners))
		qsm_listener_teardown(qsm_container_of(ctx->listeners.next, struct qsm_listener, node));
	while (!qsm_list_empty(&ctx->conns))
		qsm_conn_teardown(qsm_container_of(ctx->conns.next, struct qsm_conn, node));
	while (ctx->fifo_len) {
		struct qsm_item *it = &ctx->fifo[ctx->fifo_head];

		ctx->fifo_head = (ctx->fifo_head + 1) % ctx->fifo_cap;
		ctx->fifo_len--;
		qsm_obj_put(ctx, it->target);
	}
	while (!qsm_list_empty(&ctx->devices))
		qsm_device_free(qsm_container_of(ctx->devices.next, struct qsm_device, node));
	qsm_pools_free(ctx);
	ctx->ops->destroy(ctx->fabric);
	qsm_vtables_free(ctx);
	close(ctx->epfd);
	close(ctx->timerfd);
	close(ctx->kickfd);
	free(ctx->fifo);
	free(ctx->heap);
	free(ctx);
}

int qsm_ctx_fd(struct qsm_ctx *ctx)
{
	return ctx ? ctx->epfd : -EINVAL;
}

int qsm_ctx_counters(struct qsm_ctx *ctx, struct qsm_counters *out)
{
	if (!ctx || !out)
		return -EINVAL;
	*out = ctx->counters;
	return 0;
}

int qsm_ctx_set_trace(struct qsm_ctx *ctx, qsm_trace_fn fn, void *arg)
{
	if (!ctx)
		return -EINVAL;
	ctx->trace = fn;
	ctx->trace_arg = arg;
	return 0;
}

void qsm_trace_emit(struct qsm_ctx *ctx, const char *kind, const char *cls, uint32_t serial,
		    const char *from, int event, const char *to, int status)
{
	struct qsm_trace_record r;

	r = (struct qsm_trace_record){
		.time_ns = qsm_now(ctx) - ctx->t0_ns, .kind = kind, .class_name = cls, .id = serial,
		.from = from, .event = qsm_event_name(event), .to = to, .status = status,
	};
	if (ctx->trace)
		ctx->trace(&r, ctx->trace_arg);
	if (ctx->trace_stderr)
		fprintf(stderr, "qsm %10.6f %s %s#%u %s --%s%s%.0d--> %s\n", (double)r.time_ns / 1e9,
			kind, cls ? cls : "-", serial, from, r.event ? r.event : "?", status ? " status=" : "",
			status, to ? to : "(unexpected: stays)");
}

/* ---- the FIFO ---- */

static int fifo_push(struct qsm_ctx *ctx, struct qsm_item **slot)
{
	if (ctx->fifo_len == ctx->fifo_cap) {
		size_t cap = ctx->fifo_cap ? ctx->fifo_cap * 2 : 64;
		struct qsm_item *n = malloc(cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		for (size_t i = 0; i < ctx->fifo_len; i++)
			n[i] = ctx->fifo[(ctx->fifo_head + i) % ctx->fifo_cap];
		free(ctx->fifo);
		ctx->fifo = n;
		ctx->fifo_cap = cap;
		ctx->fifo_head = 0;
	}
	*slot = &ctx->fifo[(ctx->fifo_head + ctx->fifo_len) % ctx->fifo_cap];
	ctx->fifo_len++;
	if (!ctx->kicked) {
		uint64_t one = 1;

		ctx->kicked = write(ctx->kickfd, &one, sizeof(one)) == sizeof(one);
	}
	return 0;
}

/* Queue an event for an object; it is dispatched after everything queued before it. */
int qsm_post(struct qsm_ctx *ctx, struct qsm_obj *target, int event, int status)
{
	struct qsm_item *it;
	int r = fifo_push(ctx, &it);

	if (r < 0)
		return r;
	it->target = target;
	it->id = NULL;
	it->gen = target->id_gen;
	it->event = event;
	it->status = status;
	it->pdata_len = 0;
	target->refs++;
	return 0;
}

/* Queue a copy of an item (its id and private data) for another object. */
int qsm_post_copy(struct qsm_ctx *ctx, struct qsm_obj *target, const struct qsm_item *src)
{
	struct qsm_item *it;
	int r = fifo_push(ctx, &it);

	if (r < 0)
		return r;
	*it = *src;
	it->target = target;
	it->gen = target->id_gen;
	target->refs++;
	return 0;
}

void qsm_obj_put(struct qsm_ctx *ctx, struct qsm_obj *o)
{
	(void)ctx;
	if (--o->refs || !o->closed)
		return;
	switch (o->kind) {
	case QSM_OBJ_CONN:
		qsm_conn_free(qsm_container_of(o, struct qsm_conn, obj));
		break;
	case QSM_OBJ_LISTENER:
		qsm_listener_free(qsm_container_of(o, struct qsm_listener, obj));
		break;
	case QSM_OBJ_DEVICE:
		qsm_device_free(qsm_container_of(o, struct qsm_device, obj));
		break;
	}
}

/* ---- timers: a binary min-heap, lazy ----
 *
 * Nearly every timer is re-armed or cancelled long before it fires (a state timeout, then
 * the next state's), so both are O(1) here: a re-arm to a later deadline only records it,
 * a cancel only disarms.  The heap key (key_ns) may thus be earlier than the deadline, or
 * belong to a disarmed timer; fire_timers() sorts that out when the key comes due.
 */

static void heap_swap(struct qsm_ctx *ctx, uint32_t a, uint32_t b)
{
	struct qsm_timer *t = ctx->heap[a];

	ctx->heap[a] = ctx->heap[b];
	ctx->heap[b] = t;
	ctx->heap[a]->heap_idx = a;
	ctx->heap[b]->heap_idx = b;
}

static void heap_up(struct qsm_ctx *ctx, uint32_t i)
{
	while (i && ctx->heap[(i - 1) / 2]->key_ns > ctx->heap[i]->key_ns) {
		heap_swap(ctx, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(struct qsm_ctx *ctx, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < ctx->heap_len && ctx->heap[l]->key_ns < ctx->heap[m]->key_ns)
			m = l;
		if (r < ctx->heap_len && ctx->heap[r]->key_ns < ctx->heap[m]->key_ns)
			m = r;
		if (m == i)
			return;
		heap_swap(ctx, i, m);
		i = m;
	}
}

/* Out of the heap for good: the owner is going away. */
void qsm_timer_remove(struct qsm_ctx *ctx, struct qsm_timer *t)
{
	uint32_t i = t->heap_idx;

	t->armed = false;
	if (i == UINT32_MAX)
		return;
	t->heap_idx = UINT32_MAX;
	ctx->heap_len--;
	if (i == ctx->heap_len)
		return;
	ctx->heap[i] = ctx->heap[ctx->heap_len];
	ctx->heap[i]->heap_idx = i;
	heap_up(ctx, i);
	heap_down(ctx, ctx->heap[i]->heap_idx);
}

void qsm_timer_cancel(struct qsm_ctx *ctx, struct qsm_timer *t)
{
	(void)ctx;
	t->armed = false; /* left in the heap: fire_timers() drops it when its key is due */
}

/* One timer per object: arming replaces whatever was armed. */
void qsm_timer_arm(struct qsm_ctx *ctx, struct qsm_timer *t, int event, uint64_t delay_ms)
{
	uint64_t deadline = qsm_now(ctx) + delay_ms * 1000000ull;

	t->event = event;
	t->deadline_ns = deadline;
	t->armed = true;
	if (t->heap_idx != UINT32_MAX) {
		if (deadline < t->key_ns) {
			t->key_ns = deadline;
			heap_up(ctx, t->heap_idx);
		}
		return;
	}
	if (ctx->heap_len == ctx->heap_cap) {
		uint32_t cap = ctx->heap_cap ? ctx->heap_cap * 2 : 64;
		struct qsm_timer **n = realloc(ctx->heap, cap * sizeof(*n));

		if (!n) {
			/* Cannot wait: fire now rather than never. */
			t->armed = false;
			if (qsm_post(ctx, t->owner, event, -ENOMEM) == 0)
				ctx->counters.action_errors++;
			return;
		}
		ctx->heap = n;
		ctx->heap_cap = cap;
	}
	t->key_ns = deadline;
	t->heap_idx = ctx->heap_len;
	ctx->heap[ctx->heap_len++] = t;
	heap_up(ctx, t->heap_idx);
}

/*
 * Fire what is due.  A due key may be a disarmed timer (dropped now) or one re-armed to a
 * later deadline (moved to its place now): each re-arm costs at most one sift, paid only if
 * its old key comes due first.  A key that is not due is a lower bound of the next deadline,
 * which is all the poll timeout needs (at worst one early wake-up).
 */
static void fire_timers(struct qsm_ctx *ctx)
{
	uint64_t now = qsm_now(ctx);

	while (ctx->heap_len && ctx->heap[0]->key_ns <= now) {
		struct qsm_timer *t = ctx->heap[0];

		if (t->armed && t->key_ns < t->deadline_ns) {
			t->key_ns = t->deadline_ns;
			heap_down(ctx, 0);
			continue;
		}
		bool due = t->armed && t->event;

		qsm_timer_remove(ctx, t);
		if (due)
			qsm_post(ctx, t->owner, t->event, 0);
	}
}

/*
 * Keep the timerfd on the earliest key, touching it only when that changes, so that a
 * dispatch pass costs no system call in the common case.  The key is a lower bound of the
 * next deadline (lazy heap): at worst one early wake-up, in which nothing fires.
 */
static void rearm_timerfd(struct qsm_ctx *ctx)
{
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	uint64_t want = ctx->heap_len ? ctx->heap[0]->key_ns : 0, buf;

	if (ctx->now_ns != monotonic_ns) {
		/* A virtual clock does not drive the timerfd: while timers exist, look every 1 ms. */
		want = want ? 1 : 0;
		if (want == ctx->timerfd_at)
			return;
		its.it_value.tv_nsec = want ? 1000000 : 0;
		its.it_interval.tv_nsec = its.it_value.tv_nsec;
		timerfd_settime(ctx->timerfd, 0, &its, NULL);
		ctx->timerfd_at = want;
		return;
	}
	if (ctx->timerfd_at && ctx->timerfd_at <= monotonic_ns(NULL)) {
		/* it fired (or is about to): a one-shot timerfd is disarmed once read */
		if (read(ctx->timerfd, &buf, sizeof(buf)) == sizeof(buf))
			ctx->timerfd_at = 0;
	}
	if (want == ctx->timerfd_at)
		return;
	its.it_value.tv_sec = (time_t)(want / 1000000000ull);
	its.it_value.tv_nsec = (long)(want % 1000000000ull);
	if (timerfd_settime(ctx->timerfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		ctx->timerfd_at = want;
}

int qsm_ctx_next_timeout_ms(struct qsm_ctx *ctx)
{
	uint64_t now, d;

	if (!ctx)
		return -EINVAL;
	if (ctx->fifo_len)
		return 0;
	if (!ctx->heap_len)
		return -1;
	now = qsm_now(ctx);
	d = ctx->heap[0]->key_ns;
	if (d <= now)
		return 0;
	d = (d - now + 999999) / 1000000;
	/* A negative poll timeout waits forever: further out than INT_MAX ms, the caller wakes
	 * early, dispatches nothing and asks again. */
	return d > INT_MAX ? INT_MAX : (int)d;
}

/* 64 bits: a delay near UINT32_MAX ms plus its jitter must not wrap to a short one. */
uint64_t qsm_backoff_next(struct qsm_ctx *ctx, const struct qsm_reconnect_policy *p,
			  uint32_t *next_delay_ms)
{
	uint32_t initial = p->initial_delay_ms ? p->initial_delay_ms : 100;
	uint32_t max = p->max_delay_ms ? p->max_delay_ms : 10000;
	uint32_t mult = p->multiplier_pct ? p->multiplier_pct : 200;
	uint64_t d = *next_delay_ms ? *next_delay_ms : initial, n;

	if (d > max)
		d = max;
	n = d * mult / 100;
	*next_delay_ms = (uint32_t)(n > max ? max : n);
	if (p->jitter_pct && d) {
		uint64_t span = d * (p->jitter_pct > 100 ? 100 : p->jitter_pct) / 100;

		/* xorshift64: deterministic under the ctx seed */
		ctx->rng ^= ctx->rng << 13;
		ctx->rng ^= ctx->rng >> 7;
		ctx->rng ^= ctx->rng << 17;
		if (span)
			d = d - span + ctx->rng % (2 * span + 1);
	}
	return d;
}

/* ---- dispatch ---- */

/* Copy one fabric event into the FIFO, addressed to whoever must see it. */
/* Who hears DEVICE_ADDED: whoever's machine has an edge for it where it is now. */
static bool waits_for_device(enum qsm_machine m, int state)
{
	return qsm_machine_next(m, state, QSM_EV_DEVICE_ADDED, NULL) >= 0;
}

static int take_fabric_event(struct qsm_ctx *ctx)
{
	struct qsm_fabric_event ev;
	struct qsm_obj *target;
	struct qsm_item *it;
	int r = ctx->ops->get_event(ctx->fabric, &ev);

	if (r < 0)
		return r;
	ctx->counters.fabric_events++;
	if (ev.event == QSM_EV_CONNECT_REQUEST)
		target = ev.listen_owner;
	else
		target = ev.owner;

	if (!target) {
		if (ev.event == QSM_EV_DEVICE_ADDED) {
			/* Everyone who waits for a device hears about it. */
			struct qsm_list *n;

			/* counted in events[] as each fan-out item is dispatched, not here */
			for (n = ctx->conns.next; n != &ctx->conns; n = n->next) {
				struct qsm_conn *q = qsm_container_of(n, struct qsm_conn, node);

				if (!q->dead && waits_for_device(q->sm->id, q->state))
					qsm_post(ctx, &q->obj, QSM_EV_DEVICE_ADDED, 0);
			}
			for (n = ctx->listeners.next; n != &ctx->listeners; n = n->next) {
				struct qsm_listener *l = qsm_container_of(n, struct qsm_listener, node);

				if (waits_for_device(QSM_MACHINE_LISTENER, l->state))
					qsm_post(ctx, &l->obj, QSM_EV_DEVICE_ADDED, 0);
			}
			return 0;
		}
		/* An id nobody owns: only a request whose listener is gone can be that. */
		ctx->counters.orphans++;
		qsm_trace(ctx, "fabric", NULL, 0, "-", ev.event, NULL, ev.status);
		if (ev.event == QSM_EV_CONNECT_REQUEST && ev.id) {
			ctx->ops->reject(ev.id, NULL, 0);
			ctx->ops->destroy_id(ev.id);
		}
		return 0;
	}
	r = fifo_push(ctx, &it);
	if (r < 0) {
		if (ev.event == QSM_EV_CONNECT_REQUEST && ev.id) {
			ctx->ops->reject(ev.id, NULL, 0);
			ctx->ops->destroy_id(ev.id);
		}
		ctx->counters.orphans++;
		return r;
	}
	it->target = target;
	it->id = ev.id;
	it->gen = target->id_gen;
	it->event = ev.event;
	it->status = ev.status;
	it->wc = ev.wc;
	it->pdata_len = ev.private_data_len > sizeof(it->pdata) ? sizeof(it->pdata) : ev.private_data_len;
	memcpy(it->pdata, ev.private_data, it->pdata_len);
	target->refs++;
	return 0;
}

static void dispatch_item(struct qsm_ctx *ctx, const struct qsm_item *it)
{
	ctx->current = it;
	switch (it->target->kind) {
	case QSM_OBJ_CONN:
		qsm_conn_dispatch(qsm_container_of(it->target, struct qsm_conn, obj), it);
		break;
	case QSM_OBJ_LISTENER:
		qsm_listener_dispatch(qsm_container_of(it->target, struct qsm_listener, obj), it);
		break;
	case QSM_OBJ_DEVICE:
		qsm_device_dispatch(qsm_container_of(it->target, struct qsm_device, obj), it);
		break;
	}
	ctx->current = NULL;
}

int qsm_ctx_dispatch(struct qsm_ctx *ctx, unsigned int budget)
{
	unsigned int n = 0;

	if (!ctx)
		return -EINVAL;
	if (!budget)
		budget = DEFAULT_BUDGET;
	while (n < budget) {
		struct qsm_item it;

		/* Timers fire only into an empty FIFO: an item still queued may move its object to
		 * another state (cancelling the timer), and an expiry queued behind it would then
		 * reach a state it was never armed for. */
		if (!ctx->fifo_len)
			fire_timers(ctx);
		if (!ctx->fifo_len && take_fabric_event(ctx) < 0)
			break;
		if (!ctx->fifo_len)
			continue;
		/* copy the header and only the private data that is there */
		memcpy(&it, &ctx->fifo[ctx->fifo_head],
		       offsetof(struct qsm_item, pdata) + ctx->fifo[ctx->fifo_head].pdata_len);
		ctx->fifo_head = (ctx->fifo_head + 1) % ctx->fifo_cap;
		ctx->fifo_len--;
		ctx->counters.popped++;
		dispatch_item(ctx, &it);
		qsm_obj_put(ctx, it.target);
		n++;
	}
	if (!ctx->fifo_len && ctx->kicked) {
		uint64_t buf;

		ctx->kicked = false;
		if (read(ctx->kickfd, &buf, sizeof(buf)) < 0) {
			/* EAGAIN: already drained */
		}
	}
	rearm_timerfd(ctx);
	return (int)n;
}

void qsm_ctx_stop(struct qsm_ctx *ctx)
{
	if (ctx)
		ctx->stop = true;
}

int qsm_ctx_run(struct qsm_ctx *ctx, int timeout_ms)
{
	uint64_t end;

	if (!ctx)
		return -EINVAL;
	end = timeout_ms < 0 ? UINT64_MAX : monotonic_ns(NULL) + (uint64_t)timeout_ms * 1000000ull;
	ctx->stop = false;
	while (!ctx->stop) {
		struct pollfd pfd = { .fd = ctx->epfd, .events = POLLIN };
		uint64_t now = monotonic_ns(NULL);
		int wait = qsm_ctx_next_timeout_ms(ctx), r;

		if (now >= end)
			return qsm_ctx_dispatch(ctx, 0) < 0 ? -EINVAL : -ETIMEDOUT;
		if (end != UINT64_MAX && (wait < 0 || (uint64_t)wait > (end - now) / 1000000))
			wait = (int)((end - now - 1) / 1000000) + 1; /* rounded up; fits: <= timeout_ms */
		if (wait != 0 && poll(&pfd, 1, wait) < 0 && errno != EINTR)
			return -errno;
		r = qsm_ctx_dispatch(ctx, 0);
		if (r < 0)
			return r;
	}
	return 0;
}
