/* rdma-qsm example: a ctx embedded in a libuv loop: a uv_poll_t on qsm_ctx_fd() and a uv_timer_t
 * re-armed from qsm_ctx_next_timeout_ms() after every dispatch (embed_scenario.h's scenario). */
#include <stdio.h>
#include <uv.h>

#include "embed_scenario.h"

/* One per ctx: its fd's watcher and its timer, both pointing back here (handle.data). */
struct side {
	struct qsm_ctx *ctx;
	uv_poll_t io;
	uv_timer_t timer;
};

static struct embed e;
static struct side sides[EMBED_CTXS];
static uv_timer_t tick;
static int loop_err;

static void on_timer(uv_timer_t *t);

/* -1: no timer of the ctx's is armed, nothing to wake for but the fd */
static void rearm(struct side *s, int ms)
{
	int r = ms < 0 ? uv_timer_stop(&s->timer) : uv_timer_start(&s->timer, on_timer, (uint64_t)ms, 0);

	if (r < 0 && !loop_err)
		loop_err = r;
}

static void run(struct side *s, enum embed_wake wake)
{
	rearm(s, embed_dispatch(&e, s->ctx, wake));
	if (embed_done(&e) || loop_err)
		uv_stop(s->io.loop);
}

static void on_io(uv_poll_t *h, int status, int events)
{
	(void)events;
	if (status < 0 && !loop_err)
		loop_err = status;
	run(h->data, EMBED_WAKE_FD);
}

static void on_timer(uv_timer_t *t)
{
	run(t->data, EMBED_WAKE_TIMER);
}

static void on_tick(uv_timer_t *t)
{
	embed_tick(&e, 1);    /* the host's own work */
	if (embed_done(&e))
		uv_stop(t->loop);
}

int main(void)
{
	uv_loop_t loop;
	int r;

	if (embed_start(&e, "embed_libuv") || uv_loop_init(&loop))
		return 1;
	for (int i = 0; i < EMBED_CTXS; i++) {
		struct side *s = &sides[i];

		s->ctx = e.ctx[i];
		if ((r = uv_poll_init(&loop, &s->io, qsm_ctx_fd(s->ctx))) < 0 ||
		    (r = uv_poll_start(&s->io, UV_READABLE, on_io)) < 0 || (r = uv_timer_init(&loop, &s->timer)) < 0)
			goto fail;
		s->io.data = s->timer.data = s;   /* libuv never touches data */
		rearm(s, qsm_ctx_next_timeout_ms(s->ctx));
	}
	if ((r = uv_timer_init(&loop, &tick)) < 0 ||
	    (r = uv_timer_start(&tick, on_tick, EMBED_TICK_MS, EMBED_TICK_MS)) < 0)
		goto fail;
	uv_run(&loop, UV_RUN_DEFAULT);
	r = loop_err;
fail:
	if (r < 0)
		fprintf(stderr, "embed_libuv: %s\n", uv_strerror(r));
	/* every handle closed, the closes run, before the loop can be closed */
	for (int i = 0; i < EMBED_CTXS; i++) {
		if (sides[i].io.loop)   /* set by a successful init only */
			uv_close((uv_handle_t *)&sides[i].io, NULL);
		if (sides[i].timer.loop)
			uv_close((uv_handle_t *)&sides[i].timer, NULL);
	}
	if (tick.loop)
		uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&loop) < 0 && !r)
		r = -1;
	return embed_finish(&e) || r < 0;
}
