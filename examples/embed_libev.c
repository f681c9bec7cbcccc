/* rdma-qsm example: a ctx embedded in a libev loop: an ev_io on qsm_ctx_fd() and an ev_timer
 * re-armed from qsm_ctx_next_timeout_ms() after every dispatch (embed_scenario.h's scenario). */
#include <ev.h>

#include "embed_scenario.h"

/* One per ctx: its fd's watcher and its timer, both pointing back here (watcher.data). */
struct side {
	struct qsm_ctx *ctx;
	ev_io io;
	ev_timer timer;
};

static struct embed e;
static struct side sides[EMBED_CTXS];

/* -1: no timer of the ctx's is armed, nothing to wake for but the fd */
static void rearm(struct ev_loop *loop, struct side *s, int ms)
{
	ev_timer_stop(loop, &s->timer);
	if (ms < 0)
		return;
	ev_timer_set(&s->timer, ms / 1000.0, 0.);
	ev_timer_start(loop, &s->timer);
}

static void run(struct ev_loop *loop, struct side *s, enum embed_wake wake)
{
	rearm(loop, s, embed_dispatch(&e, s->ctx, wake));
	if (embed_done(&e))
		ev_break(loop, EVBREAK_ALL);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)revents;
	run(loop, w->data, EMBED_WAKE_FD);
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)revents;
	run(loop, w->data, EMBED_WAKE_TIMER);
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	embed_tick(&e, 1);    /* the host's own work */
	if (embed_done(&e))
		ev_break(loop, EVBREAK_ALL);
}

int main(void)
{
	struct ev_loop *loop;
	ev_timer tick;

	if (embed_start(&e, "embed_libev") || !(loop = ev_loop_new(EVFLAG_AUTO)))
		return 1;
	for (int i = 0; i < EMBED_CTXS; i++) {
		struct side *s = &sides[i];

		s->ctx = e.ctx[i];
		ev_io_init(&s->io, on_io, qsm_ctx_fd(s->ctx), EV_READ);
		ev_init(&s->timer, on_timer);
		s->io.data = s->timer.data = s;
		ev_io_start(loop, &s->io);
		rearm(loop, s, qsm_ctx_next_timeout_ms(s->ctx));
	}
	ev_timer_init(&tick, on_tick, EMBED_TICK_MS / 1000.0, EMBED_TICK_MS / 1000.0);
	ev_timer_start(loop, &tick);
	ev_run(loop, 0);
	for (int i = 0; i < EMBED_CTXS; i++) {
		ev_io_stop(loop, &sides[i].io);
		ev_timer_stop(loop, &sides[i].timer);
	}
	ev_timer_stop(loop, &tick);
	ev_loop_destroy(loop);
	return embed_finish(&e);
}
