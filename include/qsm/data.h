/* rdma-qsm: a queue's data path: memory registered on the queue's device, work requests on its
 * QP, and every completion delivered to the class's `completion` handler. */
#ifndef QSM_DATA_H
#define QSM_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct qsm_conn;
struct qsm_ctx;
struct qsm_mr;
struct qsm_pool;

/* Access bits for qsm_conn_reg_mr(), as IBV_ACCESS_*. */
#define QSM_ACCESS_LOCAL_WRITE 1
#define QSM_ACCESS_REMOTE_WRITE 2
#define QSM_ACCESS_REMOTE_READ 4
#define QSM_ACCESS_MW_BIND 8         /* memory windows may be bound to the MR (qsm_mw(3)) */
/* RDMA reads land here: QSM_ACCESS_LOCAL_WRITE, and what the transport needs more (iWARP: the
 * read response is a tagged write into the sink, so REMOTE_WRITE too; IB and RoCE: nothing). */
#define QSM_ACCESS_READ_SINK 16

/* Completion status: enum ibv_wc_status, value for value (every one a verbs provider reports on
 * an RC QP; a status this build does not know is reported as QSM_WC_GENERAL_ERR). */
enum qsm_wc_status {
	QSM_WC_SUCCESS = 0,
	QSM_WC_LOC_LEN_ERR = 1,
	QSM_WC_LOC_QP_OP_ERR = 2,
	QSM_WC_LOC_EEC_OP_ERR = 3,
	QSM_WC_LOC_PROT_ERR = 4,
	QSM_WC_WR_FLUSH_ERR = 5,     /* the QP went to ERR: the buffer is yours again */
	QSM_WC_MW_BIND_ERR = 6,
	QSM_WC_BAD_RESP_ERR = 7,
	QSM_WC_LOC_ACCESS_ERR = 8,
	QSM_WC_REM_INV_REQ_ERR = 9,  /* the peer refused the request (e.g. its receive was too short) */
	QSM_WC_REM_ACCESS_ERR = 10,
	QSM_WC_REM_OP_ERR = 11,      /* the peer failed to carry it out (e.g. its receive's lkey) */
	QSM_WC_RETRY_EXC_ERR = 12,
	QSM_WC_RNR_RETRY_EXC_ERR = 13,
	QSM_WC_LOC_RDD_VIOL_ERR = 14,
	QSM_WC_REM_INV_RD_REQ_ERR = 15,
	QSM_WC_REM_ABORT_ERR = 16,
	QSM_WC_INV_EECN_ERR = 17,
	QSM_WC_INV_EEC_STATE_ERR = 18,
	QSM_WC_FATAL_ERR = 19,
	QSM_WC_RESP_TIMEOUT_ERR = 20,
	QSM_WC_GENERAL_ERR = 21,
};

enum qsm_wr_opcode {
	QSM_WR_SEND = 1,
	QSM_WR_RDMA_WRITE,
	QSM_WR_RDMA_READ,
	QSM_WR_RECV,                 /* in completions of posted receives: a SEND arrived */
	QSM_WR_SEND_WITH_IMM,        /* a SEND carrying imm_data to the receiver's completion */
	QSM_WR_RDMA_WRITE_WITH_IMM,  /* a WRITE that also consumes a receive of the peer's */
	QSM_WR_RECV_RDMA_WITH_IMM,   /* in completions of posted receives: a WRITE_WITH_IMM arrived */
	QSM_WR_SEND_WITH_INV,        /* a SEND that invalidates the receiver's rkey imm_data */
	QSM_WR_LOCAL_INV,            /* invalidates our own rkey imm_data (a memory window's) */
	QSM_WR_BIND_MW,              /* in completions: a qsm_conn_bind_mw() */
};

struct qsm_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

#define QSM_MAX_SGE 4

/* wc_flags of a completion, as IBV_WC_WITH_IMM / IBV_WC_WITH_INV (mapped, not equal). */
#define QSM_WC_WITH_IMM 1            /* imm_data is the sender's */
#define QSM_WC_WITH_INV 2            /* the peer invalidated invalidated_rkey (SEND_WITH_INV) */
#define QSM_WC_SRQ 4                 /* a receive of the queue's SRQ: its buffer goes back there */

struct qsm_wc {
	uint64_t wr_id;
	enum qsm_wc_status status;
	enum qsm_wr_opcode opcode;
	uint32_t byte_len;           /* receives: bytes that arrived (written, for RECV_RDMA_WITH_IMM) */
	uint32_t imm_data;           /* QSM_WC_WITH_IMM: as the sender set it, no byte swap */
	uint32_t invalidated_rkey;   /* QSM_WC_WITH_INV */
	unsigned int wc_flags;       /* QSM_WC_WITH_* (receives only) */
};

/* Flags of the post calls; any other bit is -EINVAL. */
#define QSM_POST_SIGNALED 1          /* a completion even on success (sends, writes, reads) */
#define QSM_POST_INLINE 2            /* data copied at post time; no lkey; up to max_inline_data */

/* One work request of qsm_conn_post_list(): SEND, RDMA_WRITE, RDMA_READ, SEND_WITH_IMM or
 * RDMA_WRITE_WITH_IMM. */
struct qsm_wr {
	uint64_t wr_id;
	enum qsm_wr_opcode opcode;
	const struct qsm_sge *sg_list;
	int num_sge;                 /* 0 .. QSM_MAX_SGE */
	uint64_t remote_addr;        /* RDMA_WRITE*, RDMA_READ */
	uint32_t rkey;
	unsigned int flags;          /* QSM_POST_* */
	uint32_t imm_data;           /* *_WITH_IMM: carried as is; SEND_WITH_INV, LOCAL_INV: the
	                                rkey invalidated (verbs' union of the two) */
	/* Zero.  A list is an array, so a qsm_wr cannot grow: a later field takes this room and
	 * a QSM_POST_* flag of its own says it is set (a library that does not know the flag
	 * refuses the WR with -EINVAL, as any unknown flag). */
	uint32_t reserved[5];
};

/*
 * Registers [addr, addr+len) on the device the queue is on (its PD).  The MR belongs to the
 * queue: it is deregistered when the queue closes, and -- right after the class's
 * device_removed handler -- when its device is removed, so that the removal completes.
 * Then qsm_mr_valid() turns 0; the handle itself stays yours until qsm_mr_dereg() or the
 * queue's release.  Errors: -EINVAL (bad arguments), -ENODEV (the queue is on no device:
 * not resolved yet, or its device is gone), or what the device says (-ENOMEM...).
 * qsm_mr_dereg(): 0 (deregistered, the handle freed); -EBUSY while a memory window is bound
 * to the MR (free or invalidate the window first: verbs refuses the same), or what the device
 * says, and then the MR stays registered, its keys and handle valid.
 */
int qsm_conn_reg_mr(struct qsm_conn *q, void *addr, size_t len, int access, struct qsm_mr **ret);
int qsm_mr_dereg(struct qsm_mr *mr);
uint32_t qsm_mr_lkey(const struct qsm_mr *mr);
uint32_t qsm_mr_rkey(const struct qsm_mr *mr);
int qsm_mr_valid(const struct qsm_mr *mr);

/*
 * A pool: memory every queue of the ctx may use (a target's buffer pool, a namespace),
 * registered once per device rather than once per queue.  The ctx registers it on every
 * device its registry holds now and on each device it takes into use later; a device's
 * registration is released when the registry lets the device go (after the queues on it
 * ran their device_removed handlers and released what they held, so removal completes),
 * and made again when a device is taken into use again.  Keys are per device: ask with the
 * queue that will use them.  qsm_pool_keys() returns -ENODEV when that queue's device has
 * no registration (no device yet, being removed, or registering failed there).
 */
int qsm_ctx_reg_pool(struct qsm_ctx *ctx, void *addr, size_t len, int access, struct qsm_pool **ret);
int qsm_pool_keys(const struct qsm_pool *pool, const struct qsm_conn *q, uint32_t *lkey,
		  uint32_t *rkey);
struct qsm_srq;
/* The pool's keys on an SRQ's device (qsm_srq_post_recv(3)): for its srq_low handler. */
int qsm_pool_srq_keys(const struct qsm_pool *pool, const struct qsm_srq *s, uint32_t *lkey,
		      uint32_t *rkey);
/* Deregisters it on every device and frees it; no queue may still use its keys. */
int qsm_pool_dereg(struct qsm_pool *pool);

/*
 * Work requests on the queue's QP.  Receives from the class's qp_ready handler on (the QP
 * is in INIT), sends, writes and reads once the QP is RTS: from CONNECTED on, and for a
 * passive queue from ACCEPTING on (the accept moved the QP to RTS; see
 * qsm_conn_post_send(3) for what a send before ESTABLISHED meets on the wire).
 * -ENOTCONN without a QP or once the drain started, -EINVAL for bad arguments.
 * Every receive and every signaled send/write/read comes back as one call of the class's
 * `completion` handler, inside qsm_ctx_dispatch(); after the QP went to ERR they complete
 * with QSM_WC_WR_FLUSH_ERR, and a queue that is destroyed gets none.
 * -ENOBUFS when the work queue is full: max_send_wr sends/writes/reads outstanding (an
 * unsignaled one until a later signaled one's completion, or a flush, was taken), or
 * max_recv_wr receives; nothing is posted, the hardware queue is never overrun.
 */
int qsm_conn_post_recv(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sge, int nsge);
int qsm_conn_post_send(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sge, int nsge,
		       unsigned int flags);
int qsm_conn_post_write(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sge, int nsge,
			uint64_t remote_addr, uint32_t rkey, unsigned int flags);
int qsm_conn_post_read(struct qsm_conn *q, uint64_t wr_id, const struct qsm_sge *sge, int nsge,
		       uint64_t remote_addr, uint32_t rkey, unsigned int flags);
/*
 * Posts wrs[0..n) with one doorbell (one ibv_post_send of a chained list).  The checks are
 * all-or-nothing: a bad WR (-EINVAL) or too little room for all n (-ENOBUFS) posts none.
 * Only the device may refuse part way (rdmacm: ibv_post_send's bad_wr): then the WRs before
 * the refused one are posted and complete as usual.  *posted (if not NULL) is how many were
 * posted: n when 0 is returned, else what a negative errno left posted (0 but for the device).
 */
int qsm_conn_post_list(struct qsm_conn *q, const struct qsm_wr *wrs, int n, int *posted);

/*
 * Memory windows (qsm_conn_alloc_mw(3)): a type-2 window on the queue's device, bound with a
 * work request to a range of one of the queue's MRs registered with QSM_ACCESS_MW_BIND, which
 * the peer then reaches with the window's rkey until it is invalidated: by the peer's
 * SEND_WITH_INV (our receive completes with QSM_WC_WITH_INV and invalidated_rkey), or by our
 * LOCAL_INV.  Each bind gives the window a new rkey (qsm_mw_rkey()), so a peer holding an old
 * one reaches nothing.  The window belongs to the queue, as its MRs do.
 */
struct qsm_mw;
int qsm_conn_alloc_mw(struct qsm_conn *q, struct qsm_mw **ret);
int qsm_mw_free(struct qsm_mw *mw);
/* The rkey its last bind gave it (valid once the bind completed), 0 before any. */
uint32_t qsm_mw_rkey(const struct qsm_mw *mw);
/* Binds mw to [addr, addr + len) of mr with access (QSM_ACCESS_REMOTE_*), as one WR on the send
 * queue (completion opcode QSM_WR_BIND_MW when QSM_POST_SIGNALED); -EINVAL also for an MR
 * without QSM_ACCESS_MW_BIND or a range outside it. */
int qsm_conn_bind_mw(struct qsm_conn *q, uint64_t wr_id, struct qsm_mw *mw, const struct qsm_mr *mr,
		     uint64_t addr, uint64_t len, int access, unsigned int flags);

/*
 * Shared receive queues (qsm_srq(3)).  A class whose srq.max_wr is not 0 gives its queues one
 * SRQ per device per ctx: their QPs take their receives from it (qsm_conn_post_recv() is then
 * -EINVAL), and a receive completes on whichever queue's QP took it, with QSM_WC_SRQ in its
 * wc_flags.  The SRQ is made with the first such queue's QP on the device, when the class's
 * srq_low handler is called to fill it, and again whenever fewer than srq.limit receives are
 * posted (then the limit is armed again).  It goes when the device leaves the ctx's registry
 * (its last queue let go, or it was removed and every queue released it): what is still posted
 * goes with it, with no completion, as with a destroyed QP.
 */
struct qsm_srq;
/* The SRQ of the queue's QP, or NULL (no QP now, or its class has none). */
struct qsm_srq *qsm_conn_srq(const struct qsm_conn *q);
/* -EINVAL bad arguments (SGEs beyond srq.max_sge), -ENOBUFS max_wr receives outstanding,
 * -ENODEV its device is being removed; else what the device says. */
int qsm_srq_post_recv(struct qsm_srq *s, uint64_t wr_id, const struct qsm_sge *sge, int nsge);
struct qsm_ctx *qsm_srq_ctx(const struct qsm_srq *s);
/* The name of its device ("rxe0"), for the srq_low handler. */
const char *qsm_srq_device_name(const struct qsm_srq *s);

#ifdef __cplusplus
}
#endif

#endif
