/* rdma-qsm internal: what queue/ offers the layers above -- queues (struct qsm_conn) and
 * what they own (MRs, windows), the passive queue a listener spawns, the reconnect policy. */
#ifndef QSM_QUEUE_H
#define QSM_QUEUE_H

#include "addr.h"
#include "class.h"
#include "core/core.h"
#include "registry/registry.h"

/*
 * What a queue was made with, its defaults applied once, shared: the queues of a ctx made
 * with equal settings (every passive queue of a listener, most active queues of a ULP) point
 * at one block, counted and interned in the ctx (policy.c), instead of 56 bytes each.
 */
struct qsm_conn_cfg {
	uint32_t step_ms[QSM_STEP_COUNT]; /* each step timeout, its default applied (0: none) */
	struct qsm_reconnect_policy policy; /* resolved (passive queues: all 0, never read) */
	uint32_t refs;                 /* the queues that point here; freed at 0 */
	uint32_t hash;                 /* of the two above */
	struct qsm_conn_cfg *next;     /* its chain in ctx->cfgs */
};

/*
 * A queue: one allocation, its class's private area at its end.  Every byte counts a
 * thousandfold (bench/dispatch prints bytes_per_queue): no holes, flags in bytes, its class
 * reached through its table (vt->cls), its timer owned by position (QSM_TIMER_AFTER_OBJ).
 */
struct qsm_conn {
	struct qsm_obj obj;
	struct qsm_timer timer;
	struct qsm_dev_user du;      /* its device (du.dev), while it has one: after the timer */
	struct qsm_ctx *ctx;
	const struct qsm_vtable *vt; /* its class's table (vt->cls: the class) */
	struct qsm_fid *id;
	struct qsm_srq *srq;         /* its QP's SRQ (its class asks for one), while it has a QP */
	uint8_t state;
	uint8_t qp_state;           /* the QP machine's state; its final state: no QP */
	bool passive;
	bool dead;                  /* destroyed or aborted: no callback ever again */
	bool abort_pending;
	bool decided : 1;           /* passive: accept or reject was called */
	bool wc_error_queued : 1;   /* this QP's first error completion had its WC_ERROR */
	uint8_t stale_rejects : 2;  /* fast retries after stale-connection rejects, in a row */
	uint8_t pdata_len;          /* connect / accept / reject private data */
	uint32_t attempts;
	uint32_t exhausted;          /* attempts in a row that failed for lack of a resource */
	uint32_t next_delay_ms;
	uint32_t send_depth;         /* qsm_conn_set_qp_depth(): its next QP's, 0 = its class's */
	uint32_t recv_depth;
	uint64_t lost_at_ns;
	struct qsm_conn_cfg *cfg;    /* its timeouts and policy, shared: never written here */
	void *user;
	struct qsm_hlist mrs;       /* struct qsm_mr.node: registered through this queue */
	struct qsm_hlist mws;       /* struct qsm_mw.node: its memory windows */
	uint8_t *pdata;             /* [pdata_len], allocated only when there is some: most
	                               queues send none, and a queue stays small */
	/* Active queues only: a passive queue never resolves, and its allocation ends here
	 * (QSM_CONN_PASSIVE_SIZE), its class's area next (qsm_conn_priv). */
	union qsm_addr dst;
	union qsm_addr *src;        /* its own allocation, only when the ULP gave one */
	_Alignas(16) unsigned char priv[];
};
QSM_TIMER_AFTER_OBJ(struct qsm_conn);
QSM_DEV_USER_AFTER_TIMER(struct qsm_conn);

/* Its machine: accept (passive) or cm_id (active); a queue keeps no pointer to it. */
static inline const struct qsm_sm *qsm_conn_sm(const struct qsm_conn *q)
{
	return q->passive ? &qsm_sm_accept : &qsm_sm_cm_id;
}
#define QSM_CONN_PASSIVE_SIZE offsetof(struct qsm_conn, dst)
#define QSM_CONN_PASSIVE_PRIV ((QSM_CONN_PASSIVE_SIZE + 15) & ~(size_t)15)

/* A memory region registered through a queue: released with its queue or its device. */
struct qsm_mr {
	struct qsm_conn *q;
	struct qsm_fmr *fmr;        /* NULL once its device went away */
	struct qsm_device *dev;
	uint32_t lkey, rkey;
	uint64_t addr, len;         /* what it covers, and its access: for the door of a bind */
	int access;
	struct qsm_hnode node;      /* in q->mrs */
};

/* A memory window of a queue: released with its MRs (the device goes, the queue closes). */
struct qsm_mw {
	struct qsm_conn *q;
	struct qsm_fmw *fmw;        /* NULL once its device went away */
	uint32_t rkey;              /* its last bind's */
	struct qsm_hnode node;      /* in q->mws */
};

/* api.c: making queues; a passive one for a listener's CONNECT_REQUEST (its id in `it`) */
extern const struct qsm_obj_ops qsm_conn_ops;
int qsm_conn_spawn_passive(struct qsm_ctx *ctx, const struct qsm_class *cls, void *user,
			   const struct qsm_timeouts *timeouts, const struct qsm_item *it);
/* The caller's timeouts into *dst, the fields its comp_mask does not claim zeroed: 0, or -EINVAL
 * for one beyond QSM_TIMEOUT_MAX_MS. */
int qsm_timeouts_take(struct qsm_timeouts *dst, const struct qsm_timeouts *t, uint32_t comp_mask);

/* step.c: a queue's machine and what its actions do */
void qsm_conn_teardown(struct qsm_conn *q);
int qsm_conn_set_pdata(struct qsm_conn *q, const void *pdata, size_t len);

/* policy.c: the reconnect policy and its backoff (a listener's relisten uses it too) */
void qsm_conn_arm_retry(struct qsm_conn *q, int status);
/* After a stale-connection reject: 10 ms, 3 times in a row; then qsm_conn_arm_retry. */
#define QSM_STALE_RETRY_MS 10
#define QSM_STALE_RETRIES 3
void qsm_conn_arm_fast_retry(struct qsm_conn *q, int status);
/* Connected: the next loss starts the backoff from its first delay. */
static inline void qsm_conn_reset_backoff(struct qsm_conn *q)
{
	q->stale_rejects = 0;
	q->attempts = 0;
	q->exhausted = 0;
	q->next_delay_ms = 0;
	q->lost_at_ns = 0;
}
struct qsm_reconnect_policy qsm_policy_resolved(const struct qsm_reconnect_policy *p);
/* The shared block for these timeouts (checked) and this policy (NULL: none, a passive
 * queue's), counted once more; NULL: no memory.  _put: one queue less. */
struct qsm_conn_cfg *qsm_conn_cfg_get(struct qsm_ctx *ctx, const struct qsm_timeouts *t,
				      const struct qsm_reconnect_policy *p);
void qsm_conn_cfg_put(struct qsm_ctx *ctx, struct qsm_conn_cfg *c);
uint64_t qsm_backoff_next(struct qsm_ctx *ctx, const struct qsm_reconnect_policy *p,
			  uint32_t *next_delay_ms);

/* memory.c: what a queue registered, let go of with its device or its queue */
int qsm_mr_release(struct qsm_mr *mr);
void qsm_mw_release(struct qsm_mw *mw);
void qsm_conn_release_mrs(struct qsm_conn *q, bool free_handles);

/* A queue has a QP unless its QP machine is in its final state (DESTROYED: none). */
static inline bool qsm_conn_has_qp(const struct qsm_conn *q)
{
	return q->qp_state != qsm_sm_qp.final_state;
}

/* No callback from now on: dead, and the fabric delivers no completion straight to it. */
static inline void qsm_conn_mark_dead(struct qsm_conn *q)
{
	q->dead = true;
	if (q->id && q->ctx->ops->set_complete)
		q->ctx->ops->set_complete(q->id, NULL, NULL);
}

#endif
