/* rdma-qsm examples: the scenario the embed_* examples share (embed_scenario.h): a target and
 * 64 connecting queues on the sim, driven by a host loop that only watches fds and timers. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "embed_scenario.h"

static int on_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct embed *e = qsm_conn_user(q);

	(void)ev;
	e->live++;
	return 0;
}

static const struct qsm_class client_class = {
	.name = "embedded",
	.active = { [QSM_CM_LIVE] = { .enter = on_live } },
};
static const struct qsm_class target_class = { .name = "target" };

int embed_start(struct embed *e, const char *name)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(4420) };
	struct qsm_listener *l;
	struct qsm_fabric *f;

	memset(e, 0, sizeof(*e));
	e->name = name;
	inet_pton(AF_INET, "192.0.2.1", &a.sin_addr);
	if (qsm_sim_new(&e->sim) || qsm_sim_device_add(e->sim, "sim0", "192.0.2.1"))
		goto fail;
	for (int i = 0; i < EMBED_CTXS; i++)
		if (qsm_sim_fabric_new(e->sim, &f) || qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f }, &e->ctx[i]))
			goto fail;
	if (qsm_listener_new(e->ctx[0], &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&a,
			     .cls = &target_class }, &l))
		goto fail;
	for (int i = 0; i < EMBED_QUEUES; i++) {
		struct qsm_conn *q;

		if (qsm_conn_new(e->ctx[1], &(struct qsm_conn_opts){ .cls = &client_class,
				 .dst = (struct sockaddr *)&a, .user = e }, &q) || qsm_conn_connect(q))
			goto fail;
	}
	return 0;
fail:
	fprintf(stderr, "%s: the scenario could not be set up\n", name);
	return -1;
}

int embed_dispatch(struct embed *e, struct qsm_ctx *ctx, enum embed_wake wake)
{
	/* bounded: at most EMBED_BUDGET events, then back to the host */
	int done = qsm_ctx_dispatch(ctx, EMBED_BUDGET);

	if (done > (int)e->max_batch)
		e->max_batch = (unsigned)done;
	e->calls[wake]++;
	return qsm_ctx_next_timeout_ms(ctx);
}

void embed_tick(struct embed *e, unsigned n)
{
	e->ticks += n;
}

bool embed_done(const struct embed *e)
{
	return e->live >= EMBED_QUEUES || e->ticks >= EMBED_MAX_TICKS;
}

int embed_finish(struct embed *e)
{
	static const char *const wakes[EMBED_WAKES] = { "by the fd", "by a timer", "poll rounds" };

	printf("%s: %u/%d queues LIVE after %u host ticks; largest batch %u (budget %d); dispatches:",
	       e->name, e->live, EMBED_QUEUES, e->ticks, e->max_batch, EMBED_BUDGET);
	for (int w = 0; w < EMBED_WAKES; w++)
		if (e->calls[w])
			printf(" %u %s", e->calls[w], wakes[w]);
	printf("\n");
	for (int i = EMBED_CTXS - 1; i >= 0; i--)
		qsm_ctx_free(e->ctx[i]);
	qsm_sim_free(e->sim);
	return e->live == EMBED_QUEUES && e->max_batch <= EMBED_BUDGET ? 0 : 1;
}
