/* rdma-qsm: the ctx's loop.  One ctx per thread: it owns the fabric, and runs every callback
 * from qsm_ctx_dispatch(), bounded, never blocking; it sees objects only through their ops. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "argcheck.h"
#include "core/core.h"

#define DEFAULT_BUDGET 64

static int epoll_add(int epfd, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* A completion delivered straight that its handler refused: its owner's op takes it. */
static void sink_refused(void *owner, int r)
{
	struct qsm_obj *o = owner;

	o->ops->refused(o, r);
}

/* In parentheses: <qsm/ctx.h> makes the name a type-checking macro. */
int (qsm_ctx_new)(const struct qsm_ctx_opts *opts, struct qsm_ctx **ret)
{
	struct qsm_ctx *ctx;
	const char *env;
	int r;

	qsm_check(ret && opts && opts->fabric && opts->fabric->ops, -EINVAL);
	qsm_check_mask(opts->comp_mask, QSM_COMP_MASK_KNOWN);
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->epfd = ctx->timerfd = ctx->kickfd = ctx->inboxfd = -1;
	ctx->now_ns = opts->now_ns ? opts->now_ns : qsm_monotonic_ns;
	ctx->coarse_slack_ns = opts->now_ns ? 0 : qsm_coarse_slack_ns();
	ctx->now_arg = opts->now_arg;
	ctx->rng = opts->seed ? opts->seed : 0x9e3779b97f4a7c15ull;
	ctx->heap_top_ns = UINT64_MAX;
	for (int k = 0; k < QSM_OBJ_KINDS; k++)
		qsm_list_init(&ctx->objs[k]);
	qsm_list_init(&ctx->pools);

	ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
	ctx->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ctx->kickfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ctx->epfd < 0 || ctx->timerfd < 0 || ctx->kickfd < 0) {
		r = -errno;
		goto fail;
	}
	if ((r = epoll_add(ctx->epfd, ctx->timerfd)) < 0 || (r = epoll_add(ctx->epfd, ctx->kickfd)) < 0 ||
	    (r = epoll_add(ctx->epfd, opts->fabric->ops->fd(opts->fabric))) < 0 ||
	    (r = qsm_inbox_init(ctx)) < 0)
		goto fail;

	/* the slots the pass pins: no event ever waits for the ring to grow (fifo.h) */
	if ((r = qsm_fifo_reserve(ctx, QSM_FIFO_PIN_SLACK)) < 0)
		goto fail;
	ctx->fabric = opts->fabric;
	ctx->ops = opts->fabric->ops;
	if (ctx->ops->set_sink) {
		/* completions straight to the handlers while nothing is queued ahead of them */
		const struct qsm_fabric_sink sink = { .hold = &ctx->fifo_len, .delivered = &ctx->straight,
						      .refused = sink_refused };

		ctx->ops->set_sink(ctx->fabric, &sink);   /* the fabric keeps a copy */
	}
	env = getenv("QSM_COVERAGE");
	if (env && *env && !(ctx->coverage_file = strdup(env))) {
		r = -ENOMEM;
		goto fail;
	}
	env = getenv("QSM_TRACE");
	ctx->trace_stderr = env && *env && strcmp(env, "0") != 0;
	ctx->tracing = ctx->trace_stderr;
	ctx->t0_ns = qsm_now(ctx);
	*ret = ctx;
	return 0;
fail:
	qsm_inbox_fini(ctx);
	if (ctx->epfd >= 0)
		close(ctx->epfd);
	if (ctx->timerfd >= 0)
		close(ctx->timerfd);
	if (ctx->kickfd >= 0)
		close(ctx->kickfd);
	free(ctx->fifo);
	free(ctx->coverage_file);
	free(ctx);
	return r;
}

/* Kind by kind, in the order of enum qsm_obj_kind (listeners first: no new queue comes).
 * A teardown takes its object off the list; the objects of a kind share one teardown pass. */
static void teardown_objects(struct qsm_ctx *ctx, bool last)
{
	for (int k = 0; k < QSM_OBJ_KINDS; k++) {
		while (!qsm_list_empty(&ctx->objs[k])) {
			struct qsm_obj *o = qsm_container_of(ctx->objs[k].next, struct qsm_obj, node);

			if (o->ops->teardown_last != last)
				break;
			o->ops->teardown(o);
		}
	}
}

void qsm_ctx_free(struct qsm_ctx *ctx)
{
	if (!ctx)
		return;
	/* No callbacks from here on: what other ctxs handed this one goes first (its ids are
	 * this fabric's now), then every object, then the queued events. */
	qsm_inbox_fini(ctx);
	teardown_objects(ctx, false);
	while (ctx->fifo_len) {
		struct qsm_item *it = &ctx->fifo[ctx->fifo_head];

		ctx->fifo_head = (ctx->fifo_head + 1) & (ctx->fifo_cap - 1);
		ctx->fifo_len--;
		qsm_item_done(it);
		qsm_obj_put(ctx, it->target);
	}
	while (ctx->cqe_next < ctx->cqe_len)
		qsm_obj_put(ctx, ctx->cqe[ctx->cqe_next++].owner);
	teardown_objects(ctx, true);
	for (size_t i = 0; i < sizeof(ctx->on_free) / sizeof(ctx->on_free[0]); i++)
		if (ctx->on_free[i])
			ctx->on_free[i](ctx);
	ctx->ops->destroy(ctx->fabric);
	qsm_coverage_append(ctx);
	free(ctx->coverage_file);
	close(ctx->epfd);
	close(ctx->timerfd);
	close(ctx->kickfd);
	qsm_fifo_free_retired(ctx);
	free(ctx->fifo);
	free(ctx->heap);
	free(ctx);
}

/* A layer's own cleanup, run once by qsm_ctx_free() before the fabric goes. */
int qsm_ctx_on_free(struct qsm_ctx *ctx, void (*fn)(struct qsm_ctx *ctx))
{
	size_t i, n = sizeof(ctx->on_free) / sizeof(ctx->on_free[0]);

	for (i = 0; i < n && ctx->on_free[i] && ctx->on_free[i] != fn; i++)
		;
	if (i == n)
		return -ENOSPC;
	ctx->on_free[i] = fn;
	return 0;
}

int qsm_ctx_fd(struct qsm_ctx *ctx)
{
	qsm_check(ctx, -EINVAL);
	return ctx->epfd;
}


/* A CONNECT_REQUEST nobody can take: refused, its id destroyed. */
static void refuse_request(struct qsm_ctx *ctx, const struct qsm_fabric_event *ev)
{
	if (ev->event == QSM_EV_CONNECT_REQUEST && ev->id) {
		ctx->ops->reject(ev->id, NULL, 0);
		ctx->ops->destroy_id(ev->id);
	}
}

static void release_held(struct qsm_ctx *ctx)
{
	while (ctx->nheld)
		qsm_obj_put(ctx, ctx->held[--ctx->nheld]);
}

/*
 * A batch of completions, each straight to its queue's handler, in order, with nothing held
 * per completion (only a queue the batch closes is held, by its op).  If a handler queues an
 * event (a WC_ERROR, a downcall), the rest waits in ctx->cqe behind the FIFO, holding its
 * owners, with their id_gen of now (none let go of its id unseen: the op checks the id).
 * Counted as if each had passed the FIFO.  Returns how many were dispatched.
 */
static unsigned run_batch(struct qsm_ctx *ctx, const struct qsm_fabric_cqe *cqe, unsigned n)
{
	const struct qsm_obj_ops *ops = ((const struct qsm_obj *)cqe[0].owner)->ops;
	unsigned i = ops->complete(ctx, cqe, n, NULL);

	ctx->counters.fabric_events += n;
	ctx->counters.popped += i;
	ctx->cqe_next = 0;
	ctx->cqe_len = n - i;
	for (unsigned k = 0; k < n - i; k++) {
		struct qsm_obj *o = cqe[i + k].owner;

		o->refs++;
		ctx->cqe[k] = cqe[i + k];
		ctx->cqe_gen[k] = o->id_gen;
	}
	release_held(ctx);
	return i;
}

/* What is left of a batch, at most `room`, while the FIFO is empty. */
static unsigned dispatch_left(struct qsm_ctx *ctx, unsigned room)
{
	unsigned next = ctx->cqe_next, left = ctx->cqe_len - next, k;
	const struct qsm_obj_ops *ops = ((const struct qsm_obj *)ctx->cqe[next].owner)->ops;

	k = ops->complete(ctx, &ctx->cqe[next], left < room ? left : room, &ctx->cqe_gen[next]);
	for (unsigned j = next; j < next + k; j++)
		qsm_obj_put(ctx, ctx->cqe[j].owner);
	ctx->cqe_next = next + k;
	ctx->counters.popped += k;
	release_held(ctx);
	return k;
}

void qsm_ctx_take_left(struct qsm_ctx *ctx, struct qsm_obj *o, const struct qsm_fid *id,
		       void (*fn)(struct qsm_obj *o, const struct qsm_fabric_cqe *c))
{
	unsigned k = ctx->cqe_next;

	for (unsigned j = ctx->cqe_next; j < ctx->cqe_len; j++) {
		if (ctx->cqe[j].owner == o && ctx->cqe[j].id == id && ctx->cqe_gen[j] == o->id_gen) {
			ctx->counters.popped++;
			fn(o, &ctx->cqe[j]);
			qsm_obj_put(ctx, o);   /* the batch's hold; o's caller holds it too */
			continue;
		}
		if (k != j) {
			ctx->cqe[k] = ctx->cqe[j];
			ctx->cqe_gen[k] = ctx->cqe_gen[j];
		}
		k++;
	}
	ctx->cqe_len = k;
}

/*
 * Completions the fabric delivered straight to their handlers in its get_event() (it said
 * QSM_FABRIC_STRAIGHT + its batch's size; the number in ctx->straight), counted as if each had
 * passed the FIFO, as a batch's are; then its batch, and the queues a refusal closed let go
 * of.  How many were dispatched.  Out of line: once per call that polled any, with the
 * completions' own cost far above it.
 */
static __attribute__((noinline)) int take_straight(struct qsm_ctx *ctx, const struct qsm_fabric_cqe *cqe,
						   int batch)
{
	uint64_t n = ctx->straight;

	ctx->straight = 0;
	ctx->counters.completions += n;
	ctx->counters.fabric_events += n;
	ctx->counters.popped += n;
	if (batch > 0)
		return (int)(n + run_batch(ctx, cqe, (unsigned)batch));   /* it lets go of them */
	release_held(ctx);
	return (int)n;
}

/* Once a pass, inline: its frame (an event, a batch) would otherwise keep it out of line, at a
 * call per event. */
static inline int take_fabric_event(struct qsm_ctx *ctx, unsigned room, struct qsm_item *it)
	__attribute__((always_inline));

/*
 * Ask the fabric once, with the FIFO empty and no batch left, for at most `room` completions:
 * a batch goes to the queues' handlers (the number dispatched); any other event is written to
 * *it, addressed to whoever must see it, to be dispatched at once (0, it->target set; NULL:
 * nothing to dispatch).  Nothing is queued ahead of it, so it need not pass through the FIFO.
 */
static int take_fabric_event(struct qsm_ctx *ctx, unsigned room, struct qsm_item *it)
{
	struct qsm_fabric_cqe cqe[QSM_FABRIC_CQE_BATCH];
	struct qsm_fabric_event ev;
	struct qsm_obj *target;
	int r;

	/* A handler of an event with private data dispatches again: its copy (ctx->now_pdata)
	 * is still read, so this nested pass takes nothing more from the fabric. */
	if (ctx->now_pdata_busy)
		return -EBUSY;
	r = ctx->ops->get_event(ctx->fabric, &ev, cqe, (int)room);   /* room <= INT_MAX */
	if (r < 0)
		return r;
	if (r > 0) {
		it->target = NULL;   /* (here, not for every event: most are for someone) */
		if (__builtin_expect(r >= QSM_FABRIC_STRAIGHT, 0))
			return take_straight(ctx, cqe, r - QSM_FABRIC_STRAIGHT);
		return (int)run_batch(ctx, cqe, (unsigned)r);
	}
	ctx->counters.fabric_events++;
	target = ev.owner;   /* a request's is its listener's (the fabric's rule) */
	if (!target) {
		it->target = NULL;
		if (ev.event == QSM_EV_DEVICE_ADDED || ev.event == QSM_EV_PORT_ACTIVE) {
			/* Everyone who waits for a device hears about it: the registry knows who.
			 * Counted in events[] as each fan-out item is dispatched, not here. */
			if (ctx->device_added)
				ctx->device_added(ctx, ev.event);
			return 0;
		}
		/* a port's event for the device's registry entry, if a queue uses the device */
		if (ev.device && ctx->device_event &&
		    ctx->device_event(ctx, ev.device, ev.event, ev.status) == 0)
			return 0;
		/* An event nobody owns: a request whose listener is gone (rejected), or a port's
		 * event of a device no queue uses. */
		ctx->counters.orphans++;
		qsm_trace(ctx, "fabric", NULL, 0, "-", ev.event, NULL, ev.status);
		refuse_request(ctx, &ev);
		return 0;
	}
	it->target = target;
	it->id = ev.id;   /* or SRQ_LIMIT's srq: the same union in both */
	it->gen = target->id_gen;
	it->event = ev.event;
	it->status = ev.status;
	it->pdata_len = 0;
	if (ev.private_data_len) {
		/* into the ctx's own buffer: reporting an event never allocates */
		it->pdata_len = ev.private_data_len < QSM_FABRIC_PDATA_MAX ?
				(uint32_t)ev.private_data_len : QSM_FABRIC_PDATA_MAX;
		it->pdata = ctx->now_pdata;
		memcpy(ctx->now_pdata, ev.private_data, it->pdata_len);
		ctx->now_pdata_busy = true;
	}
	target->refs++;
	return 0;
}


int qsm_ctx_dispatch(struct qsm_ctx *ctx, unsigned int budget)
{
	unsigned int n = 0;

	bool outer;

	qsm_check(ctx, -EINVAL);
	if (!budget)
		budget = DEFAULT_BUDGET;
	else if (budget > INT_MAX)
		budget = INT_MAX;   /* what a fabric is asked for is an int */
	outer = !ctx->dispatching; /* a handler that dispatches again stays in its pass */
	if (outer) {
		ctx->dispatching = true;
		ctx->pass_now_read = false;   /* read when first needed (qsm_now) ... */
		if (ctx->heap_len)
			qsm_pass_clock(ctx);  /* ... as a timer's expiry is, at once (if it may be due) */
		if (__builtin_expect(qsm_inbox_nonempty(&ctx->inbox_n), 0))
			qsm_inbox_take(ctx);   /* before the fabric: the ids handed here, adopted */
	}
	while (n < budget) {
		struct qsm_item *it, now;

		if (ctx->fifo_len) {
			/* a nested pass pins what it pops until the outermost item returns: no more
			 * than the reserve keeps for it (outside one, nothing is pinned here) */
			if (ctx->fifo_pinned >= QSM_FIFO_PIN_SLACK)
				break;
			it = qsm_fifo_pop(ctx);
		} else if (ctx->cqe_next < ctx->cqe_len) {
			n += dispatch_left(ctx, budget - n);   /* what a batch left, behind the FIFO */
			continue;
		} else if (qsm_timers_fire(ctx)) {
			/* Timers fire only into an empty FIFO: an item still queued may move its
			 * object to another state (cancelling the timer), and an expiry queued behind
			 * it would then reach a state it was never armed for. */
			continue;
		} else {
			int r = take_fabric_event(ctx, budget - n, &now);

			if (r < 0)
				break;
			n += (unsigned)r;   /* completions, straight to their queues' handlers */
			if (!now.target)
				continue;
			it = &now;
		}
		ctx->counters.popped++;
		it->target->ops->dispatch(it->target, it);
		if (it->pdata_len) {
			if (it == &now)
				ctx->now_pdata_busy = false;   /* ctx->now_pdata: not the item's own */
			else
				qsm_item_done(it);
		}
		qsm_obj_put(ctx, it->target);
		if (outer)
			qsm_fifo_unpin(ctx);
		n++;
	}
	if (!outer)
		return (int)n;
	ctx->dispatching = false;
	ctx->pass_now_read = false;
	if (!ctx->fifo_len && ctx->cqe_next == ctx->cqe_len && ctx->kicked) {
		uint64_t buf;

		ctx->kicked = false;
		if (read(ctx->kickfd, &buf, sizeof(buf)) < 0) {
			/* EAGAIN: already drained */
		}
	} else if ((ctx->fifo_len || ctx->cqe_next < ctx->cqe_len) && !ctx->kicked) {
		qsm_fifo_kick(ctx); /* the budget ran out with work queued: the fd says so */
	}
	qsm_fifo_trim(ctx);
	qsm_timers_trim(ctx);
	qsm_timerfd_rearm(ctx);
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

	qsm_check(ctx, -EINVAL);
	end = timeout_ms < 0 ? UINT64_MAX : qsm_monotonic_ns(NULL) + (uint64_t)timeout_ms * 1000000ull;
	ctx->stop = false;
	while (!ctx->stop) {
		struct pollfd pfd = { .fd = ctx->epfd, .events = POLLIN };
		uint64_t now = qsm_monotonic_ns(NULL);
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
