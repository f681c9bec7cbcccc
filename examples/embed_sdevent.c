/* rdma-qsm example: a ctx embedded in an sd-event loop: sd_event_add_io() on qsm_ctx_fd() and a
 * CLOCK_MONOTONIC time source re-armed from qsm_ctx_next_timeout_ms() after every dispatch
 * (embed_scenario.h's scenario). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <systemd/sd-event.h>
#include <time.h>

#include "embed_scenario.h"

#define ACCURACY_USEC 1000   /* 0 would be sd-event's default slack, 250 ms */

/* One per ctx: its fd's source and its time source, both with this as userdata. */
struct side {
	struct qsm_ctx *ctx;
	sd_event_source *io, *timer;
};

static struct embed e;
static struct side sides[EMBED_CTXS];

/* -1: no timer of the ctx's is armed, nothing to wake for but the fd */
static int rearm(struct side *s, int ms)
{
	uint64_t now;
	int r;

	if (ms < 0)
		return sd_event_source_set_enabled(s->timer, SD_EVENT_OFF);
	if ((r = sd_event_now(sd_event_source_get_event(s->timer), CLOCK_MONOTONIC, &now)) < 0 ||
	    (r = sd_event_source_set_time(s->timer, now + (uint64_t)ms * 1000)) < 0)
		return r;
	return sd_event_source_set_enabled(s->timer, SD_EVENT_ONESHOT);
}

/* A failure ends the loop with its errno (sd_event_loop()'s return). */
static int run(struct side *s, enum embed_wake wake)
{
	int r = rearm(s, embed_dispatch(&e, s->ctx, wake));

	if (r < 0 || embed_done(&e))
		return sd_event_exit(sd_event_source_get_event(s->io), r < 0 ? r : 0);
	return 0;
}

static int on_io(sd_event_source *src, int fd, uint32_t revents, void *userdata)
{
	(void)src;
	(void)fd;
	(void)revents;
	return run(userdata, EMBED_WAKE_FD);
}

static int on_timer(sd_event_source *src, uint64_t usec, void *userdata)
{
	(void)src;
	(void)usec;
	return run(userdata, EMBED_WAKE_TIMER);
}

/* The host's own work, every EMBED_TICK_MS from its last expiry. */
static int on_tick(sd_event_source *src, uint64_t usec, void *userdata)
{
	int r;

	(void)userdata;
	embed_tick(&e, 1);
	if (embed_done(&e))
		return sd_event_exit(sd_event_source_get_event(src), 0);
	if ((r = sd_event_source_set_time(src, usec + EMBED_TICK_MS * 1000)) < 0)
		return sd_event_exit(sd_event_source_get_event(src), r);
	return 0;
}

int main(void)
{
	sd_event_source *tick = NULL;
	sd_event *ev = NULL;
	uint64_t now;
	int r;

	if (embed_start(&e, "embed_sdevent"))
		return 1;
	if ((r = sd_event_new(&ev)) < 0 || (r = sd_event_now(ev, CLOCK_MONOTONIC, &now)) < 0)
		goto out;
	for (int i = 0; i < EMBED_CTXS; i++) {
		struct side *s = &sides[i];

		s->ctx = e.ctx[i];
		if ((r = sd_event_add_io(ev, &s->io, qsm_ctx_fd(s->ctx), EPOLLIN, on_io, s)) < 0 ||
		    (r = sd_event_add_time(ev, &s->timer, CLOCK_MONOTONIC, now, ACCURACY_USEC, on_timer, s)) < 0 ||
		    (r = rearm(s, qsm_ctx_next_timeout_ms(s->ctx))) < 0)
			goto out;
	}
	if ((r = sd_event_add_time(ev, &tick, CLOCK_MONOTONIC, now + EMBED_TICK_MS * 1000, ACCURACY_USEC,
				   on_tick, NULL)) < 0 ||
	    (r = sd_event_source_set_enabled(tick, SD_EVENT_ON)) < 0)
		goto out;
	r = sd_event_loop(ev);
out:
	if (r < 0)
		fprintf(stderr, "embed_sdevent: %s\n", strerror(-r));
	for (int i = 0; i < EMBED_CTXS; i++) {
		sd_event_source_unref(sides[i].io);
		sd_event_source_unref(sides[i].timer);
	}
	sd_event_source_unref(tick);
	sd_event_unref(ev);
	return embed_finish(&e) || r < 0;
}
