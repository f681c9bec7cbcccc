/* rdma-qsm example: a ctx embedded in a host's own event loop (epoll here; embed_libuv.c,
 * embed_sdevent.c and embed_libev.c do the same in those loops): one fd, bounded dispatch. */
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "embed_scenario.h"

/*
 * The host owns the loop and has work of its own (a 10 ms tick standing for its I/O); it
 * adds qsm_ctx_fd() to its epoll set, bounds each dispatch and asks the ctx how long it may
 * sleep (embed_scenario.h has the scenario).
 */
int main(void)
{
	struct itimerspec tick = { { 0, EMBED_TICK_MS * 1000000 }, { 0, EMBED_TICK_MS * 1000000 } };
	struct embed e;
	int ep, tfd;

	if (embed_start(&e, "embed_epoll"))
		return 1;

	/* the host's loop: its own timer, and one fd per ctx */
	ep = epoll_create1(EPOLL_CLOEXEC);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (ep < 0 || tfd < 0 || timerfd_settime(tfd, 0, &tick, NULL) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &(struct epoll_event){ .events = EPOLLIN, .data.ptr = NULL }))
		return 1;
	for (int i = 0; i < EMBED_CTXS; i++)
		if (epoll_ctl(ep, EPOLL_CTL_ADD, qsm_ctx_fd(e.ctx[i]),
			      &(struct epoll_event){ .events = EPOLLIN, .data.ptr = e.ctx[i] }))
			return 1;

	while (!embed_done(&e)) {
		struct epoll_event evs[4];
		int wait = EMBED_TICK_MS, n;

		/* sleep no longer than the ctxs' next timers allow */
		for (int i = 0; i < EMBED_CTXS; i++) {
			int t = qsm_ctx_next_timeout_ms(e.ctx[i]);

			if (t >= 0 && t < wait)
				wait = t;
		}
		n = epoll_wait(ep, evs, 4, wait);
		for (int i = 0; i < n; i++) {
			if (!evs[i].data.ptr) {
				uint64_t x;

				if (read(tfd, &x, sizeof(x)) == sizeof(x))
					embed_tick(&e, (unsigned)x); /* the host's own work */
				continue;
			}
			embed_dispatch(&e, evs[i].data.ptr, EMBED_WAKE_FD);
		}
		for (int i = 0; i < EMBED_CTXS; i++) /* timers due without fd activity */
			if (qsm_ctx_next_timeout_ms(e.ctx[i]) == 0)
				embed_dispatch(&e, e.ctx[i], EMBED_WAKE_TIMER);
	}
	close(tfd);
	close(ep);
	return embed_finish(&e);
}
