/* rdma-qsm: a ctx's inbox (core/inbox.h): items pushed from any thread under one lock, an
 * eventfd in the ctx's epoll readable while any wait, taken in order by the ctx's thread; and
 * the one use of it the API offers, qsm_ctx_call(). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "argcheck.h"
#include "core/ctx.h"
#include "core/inbox.h"

int qsm_inbox_init(struct qsm_ctx *ctx)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int r;

	ctx->inbox_tail = &ctx->inbox_head;
	ctx->inboxfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ctx->inboxfd < 0)
		return -errno;
	if ((r = pthread_mutex_init(&ctx->inbox_lock, NULL)) != 0) {
		close(ctx->inboxfd);
		ctx->inboxfd = -1;
		return -r;
	}
	if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->inboxfd, &ev) < 0) {
		r = -errno;
		qsm_inbox_fini(ctx);
		return r;
	}
	return 0;
}

/* The list as it is now, the ctx's own from here on; the eventfd read dry under the lock, so
 * that a push after it is seen again. */
static struct qsm_inbox_item *detach(struct qsm_ctx *ctx)
{
	struct qsm_inbox_item *head;
	uint64_t buf;

	pthread_mutex_lock(&ctx->inbox_lock);
	head = ctx->inbox_head;
	ctx->inbox_head = NULL;
	ctx->inbox_tail = &ctx->inbox_head;
	__atomic_store_n(&ctx->inbox_n, 0, __ATOMIC_RELEASE);
	if (read(ctx->inboxfd, &buf, sizeof(buf)) < 0) {
		/* EAGAIN: nothing was written */
	}
	pthread_mutex_unlock(&ctx->inbox_lock);
	return head;
}

static void run_all(struct qsm_ctx *ctx, struct qsm_inbox_item *it, bool dropping)
{
	while (it) {
		struct qsm_inbox_item *next = it->next;

		it->run(ctx, it, dropping);
		it = next;
	}
}

void qsm_inbox_fini(struct qsm_ctx *ctx)
{
	if (ctx->inboxfd < 0)
		return;
	run_all(ctx, detach(ctx), true);
	pthread_mutex_destroy(&ctx->inbox_lock);
	close(ctx->inboxfd);
	ctx->inboxfd = -1;
}

void qsm_inbox_push(struct qsm_ctx *ctx, struct qsm_inbox_item *it)
{
	it->next = NULL;
	pthread_mutex_lock(&ctx->inbox_lock);
	*ctx->inbox_tail = it;
	ctx->inbox_tail = &it->next;
	__atomic_store_n(&ctx->inbox_n, ctx->inbox_n + 1, __ATOMIC_RELEASE);
	(void)!write(ctx->inboxfd, &(uint64_t){ 1 }, sizeof(uint64_t));
	pthread_mutex_unlock(&ctx->inbox_lock);
}

void qsm_inbox_take(struct qsm_ctx *ctx)
{
	run_all(ctx, detach(ctx), false);
}

/* ---- qsm_ctx_call(): a function run on the ctx's thread ---- */

struct ctx_call {
	struct qsm_inbox_item in;   /* first: the inbox hands it back as this */
	qsm_call_fn fn;
	void *arg;
};

static void call_run(struct qsm_ctx *ctx, struct qsm_inbox_item *in, bool dropping)
{
	struct ctx_call *c = (struct ctx_call *)(void *)in;
	qsm_call_fn fn = c->fn;
	void *arg = c->arg;

	free(c);   /* before the call: fn may free ctx's objects, or call again */
	fn(ctx, arg, dropping ? -ECANCELED : 0);
}

int qsm_ctx_call(struct qsm_ctx *ctx, qsm_call_fn fn, void *arg)
{
	struct ctx_call *c;

	qsm_check(ctx && fn, -EINVAL);
	c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->in.run = call_run;
	c->fn = fn;
	c->arg = arg;
	qsm_inbox_push(ctx, &c->in);
	return 0;
}
