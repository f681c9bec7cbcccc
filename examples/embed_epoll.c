/* rdma-qsm example: a ctx embedded in a host's own event loop (epoll here; libev, libuv,
 * sd-event or an SPDK-style poller work the same way): one fd, bounded dispatch, no thread. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <qsm/qsm.h>
#include <qsm/sim.h>

/*
 * The host owns the loop and has work of its own (a 10 ms tick standing for its I/O); it
 * adds qsm_ctx_fd() to its epoll set, bounds each dispatch (a storage target must not let
 * a storm of connection events starve its I/O) and asks the ctx how long it may sleep.
 */
#define BUDGET 16

static unsigned live;

static int on_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)q;
	(void)ev;
	live++;
	return 0;
}

static const struct qsm_class client_class = {
	.name = "embedded",
	.active = { [QSM_CM_LIVE] = { .enter = on_live } },
};
static const struct qsm_class target_class = { .name = "target" };

int main(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(4420) };
	struct itimerspec tick = { { 0, 10000000 }, { 0, 10000000 } };
	struct qsm_sim *sim;
	struct qsm_fabric *f[2];
	struct qsm_ctx *ctx[2];
	struct qsm_listener *l;
	unsigned ticks = 0, max_batch = 0;
	int ep, tfd;

	inet_pton(AF_INET, "192.0.2.1", &a.sin_addr);
	if (qsm_sim_new(&sim) || qsm_sim_device_add(sim, "sim0", "192.0.2.1"))
		return 1;
	for (int i = 0; i < 2; i++)
		if (qsm_sim_fabric_new(sim, &f[i]) || qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f[i] }, &ctx[i]))
			return 1;
	if (qsm_listener_new(ctx[0], &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&a,
			     .cls = &target_class }, &l))
		return 1;
	for (int i = 0; i < 64; i++) {
		struct qsm_conn *q;

		if (qsm_conn_new(ctx[1], &(struct qsm_conn_opts){ .cls = &client_class,
				 .dst = (struct sockaddr *)&a }, &q) || qsm_conn_connect(q))
			return 1;
	}

	/* the host's loop: its own timer, and one fd per ctx */
	ep = epoll_create1(EPOLL_CLOEXEC);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	timerfd_settime(tfd, 0, &tick, NULL);
	epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &(struct epoll_event){ .events = EPOLLIN, .data.ptr = NULL });
	for (int i = 0; i < 2; i++)
		epoll_ctl(ep, EPOLL_CTL_ADD, qsm_ctx_fd(ctx[i]),
			  &(struct epoll_event){ .events = EPOLLIN, .data.ptr = ctx[i] });

	while (live < 64 && ticks < 500) {
		struct epoll_event evs[4];
		int wait = 10, n;

		/* sleep no longer than the ctxs' next timers allow */
		for (int i = 0; i < 2; i++) {
			int t = qsm_ctx_next_timeout_ms(ctx[i]);

			if (t >= 0 && t < wait)
				wait = t;
		}
		n = epoll_wait(ep, evs, 4, wait);
		for (int i = 0; i < n; i++) {
			if (!evs[i].data.ptr) {
				uint64_t x;

				if (read(tfd, &x, sizeof(x)) == sizeof(x))
					ticks += (unsigned)x; /* the host's own work */
				continue;
			}
			/* bounded: at most BUDGET events, then back to the host */
			int done = qsm_ctx_dispatch(evs[i].data.ptr, BUDGET);

			if (done > (int)max_batch)
				max_batch = (unsigned)done;
		}
		for (int i = 0; i < 2; i++) /* timers due without fd activity */
			if (qsm_ctx_next_timeout_ms(ctx[i]) == 0)
				qsm_ctx_dispatch(ctx[i], BUDGET);
	}
	printf("embed_epoll: %u/64 queues LIVE after %u host ticks; largest batch %u (budget %d)\n",
	       live, ticks, max_batch, BUDGET);
	close(tfd);
	close(ep);
	qsm_ctx_free(ctx[1]);
	qsm_ctx_free(ctx[0]);
	qsm_sim_free(sim);
	return live == 64 && max_batch <= BUDGET ? 0 : 1;
}
