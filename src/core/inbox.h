/* rdma-qsm internal, core/: a ctx's inbox, the one door between threads.  Another ctx (on its
 * own thread) hands work to this one: an item pushed from any thread wakes the ctx's fd and is
 * taken by the ctx's own thread, at the start of its next dispatch pass. */
#ifndef QSM_CORE_INBOX_H
#define QSM_CORE_INBOX_H

#include <stdbool.h>

struct qsm_ctx;

/* Embedded first in what is handed over; the inbox never allocates. */
struct qsm_inbox_item {
	struct qsm_inbox_item *next;
	/* On the receiving ctx's thread: take it; `dropping`: the ctx is being freed, let it go
	 * (no callbacks).  Frees the item either way. */
	void (*run)(struct qsm_ctx *ctx, struct qsm_inbox_item *it, bool dropping);
};

/* qsm_ctx_new(): its lock and eventfd (in the ctx's epoll); 0 or -errno. */
int qsm_inbox_init(struct qsm_ctx *ctx);
/* qsm_ctx_free(), first: what is still in it let go (run with dropping), then the eventfd. */
void qsm_inbox_fini(struct qsm_ctx *ctx);
/* From any thread: it is ctx's to take.  ctx must outlive the call. */
void qsm_inbox_push(struct qsm_ctx *ctx, struct qsm_inbox_item *it);
/* The ctx's thread: every item pushed so far, run in push order. */
void qsm_inbox_take(struct qsm_ctx *ctx);

/* Something may be waiting: one load, for the start of a pass. */
static inline bool qsm_inbox_nonempty(const unsigned *n)
{
	return __atomic_load_n(n, __ATOMIC_ACQUIRE) != 0;
}

#endif
