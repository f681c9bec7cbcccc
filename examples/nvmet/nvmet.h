/* qsm-nvmet: a userspace NVMe over Fabrics RDMA target on rdma-qsm.  What the transport
 * (rdma.c: the passive-queue class), the controller (cmd.c: Fabrics, admin and I/O commands)
 * and the host loop (main.c) share. */
#ifndef QSM_NVMET_H
#define QSM_NVMET_H

#include <stdint.h>
#include <stdio.h>

#include <qsm/qsm.h>

#include "nvme.h"

#define NVMET_MAX_DEPTH 128      /* entries of an I/O queue (CAP.MQES + 1) */
#define NVMET_AQ_DEPTH 32        /* entries of an admin queue (the host asks for 32) */
#define NVMET_MAX_QID 64         /* I/O queues per controller (-q at most) */
#define NVMET_MAX_CTRLS 0xffef   /* controllers per target (-c at most): cntlids 1..0xffef */
#define NVMET_BUF_SIZE 4096      /* per-request buffer: connect data, identify, log pages */
#define NVMET_MDTS 8             /* 2^8 * 4 KiB = 1 MiB per command */
#define NVMET_MAX_XFER (4096u << NVMET_MDTS)
/* In-capsule data an I/O queue's command capsule may carry after its SQE (-I): IOCCSZ is the SQE
 * and that.  4 KiB by default, as the kernel's nvmet-rdma (a page) and SPDK's target offer; at
 * most 16 KiB, as the kernel's; 16-byte units, as IOCCSZ counts.  The admin queue takes none. */
#define NVMET_ICD_DEFAULT 4096u
#define NVMET_ICD_MAX (16u << 10)
#define NVMET_LBA_SHIFT 9        /* 512-byte LBAs */
#define NVMET_MAX_AER 4          /* AERL + 1 */

struct nvmet_opts {
	const char *addr;
	uint16_t port;
	char subnqn[224];
	uint64_t ns_size;
	unsigned max_io_queues;  /* per controller */
	unsigned max_ctrls;      /* per target */
	/* per controller, over its I/O queues (-R, -M): what a host may have in flight beyond what
	 * one queue's depth bounds; a command over either is answered Command Interrupted */
	unsigned max_ctrl_cmds;  /* I/O commands outstanding */
	uint64_t max_ctrl_data;  /* bytes of their data in flight (>= NVMET_MAX_XFER) */
	unsigned max_reads;      /* -D: RDMA READs in flight per queue, at most (0: the connection's) */
	uint32_t icd_size;       /* -I: in-capsule data of an I/O queue's capsule, bytes */
	uint32_t srq_depth;      /* -Q: capsules of each device's shared receive queue (0: none) */
	int verbose;
	int family;              /* AF_INET / AF_INET6 of addr */
};

struct nvmet_stats {
	uint64_t queues_requested, queues_rejected, queues_accepted, queues_live, queues_released;
	uint64_t device_removals, wc_errors, protocol_errors;
	uint64_t connects, connect_errors;
	uint64_t cmds, admin_cmds, io_cmds, errors, reads, writes, flushes;
	uint64_t interrupted;    /* commands turned away by the per-controller limits */
	uint64_t kato_expired;   /* controllers whose Keep Alive Timer expired */
	uint64_t reads_waited;   /* RDMA READs that waited for the queue's read window */
	uint64_t in_capsule;     /* commands whose host data came in their capsule (no READ) */
	uint64_t srqs_made;      /* shared receive queues made and filled (-Q) */
	uint64_t capsules_waited; /* capsules that came before a request slot was free again */
	uint64_t remote_invalidates; /* responses posted SEND_WITH_INV (the host's rkey) */
	uint64_t bytes_read, bytes_written;
	/* for the identities (nvmet_identities) */
	uint64_t queues_dropped; /* given up before the accept went out: no release follows */
	uint64_t answered;       /* commands answered (a response built and posted, or tried) */
	uint64_t unanswered;     /* commands whose queue closed before they were answered */
};

extern struct nvmet_opts g_opts;
extern uint8_t *g_ns;            /* the namespace: g_opts.ns_size bytes of RAM */

struct nvmet_queue;
struct nvmet_ctrl;
struct nvmet_srq;

#define NVMET_MAX_THREADS 64     /* -T at most */
#define NVMET_MAX_SRQS 64        /* devices a thread's SRQs are kept for */

/* One thread of the target (-T): a ctx of its own, as SPDK's poll groups; the listener spreads
 * the queues over the threads' ctxs (qsm_listener_spread), and a queue's every callback runs on
 * its ctx's thread.  What is the thread's alone, touched by nothing else while it runs: its
 * queues, their counters, its SRQs (a ctx's devices are its own), the namespace's registration
 * on its ctx.  What threads share is the controllers (cmd.c: a table under a lock; a
 * controller's queues may be on several threads) and the caps on queues over all of them. */
struct nvmet_thread {
	struct qsm_ctx *ctx;
	unsigned index;                  /* 0: the listener's */
	struct qsm_pool *ns_pool;        /* g_ns, registered on the ctx's devices */
	struct nvmet_stats stats;
	uint64_t ka_now;                 /* the loop's clock, ms, before each dispatch */
	struct nvmet_queue *queues;      /* every queue alive here */
	struct nvmet_queue *dirty;       /* queues with responses gathered (nvmet_flush_posts) */
	struct nvmet_srq *srqs[NVMET_MAX_SRQS];
	unsigned nsrqs;
};

/* Before ctx dispatches anything, on one thread, before any other thread runs: t made ctx's
 * (g_ns registered on it, t known for the ctx's queues).  0 or -errno. */
int nvmet_thread_init(struct nvmet_thread *t, struct qsm_ctx *ctx);
/* After its ctx is freed: t's SRQ buffers freed, t forgotten. */
void nvmet_thread_fini(struct nvmet_thread *t);

/* What the target counts, summed over threads: each thread's counters and what its queues hold
 * now, taken on its own thread (or once it stopped). */
struct nvmet_tally {
	struct nvmet_stats s;
	uint64_t open, in_flight, holding, held;
	int srq_ok;                      /* every thread's SRQ buffers counted right */
};
void nvmet_tally(const struct nvmet_thread *t, struct nvmet_tally *sum);
/* Counters summed: size bytes of uint64_t counters from into to (a struct of counters only). */
static inline void nvmet_sum_counters(void *to, const void *from, size_t size)
{
	uint64_t *t = to;
	const uint64_t *f = from;

	for (size_t i = 0; i < size / sizeof(uint64_t); i++)
		t[i] += f[i];
}

#define LOG(...) do { flockfile(stdout); printf("qsm-nvmet: " __VA_ARGS__); putchar('\n'); \
			     fflush(stdout); funlockfile(stdout); } while (0)   /* one line, whatever the threads */
#define VLOG(...) do { if (g_opts.verbose) LOG(__VA_ARGS__); } while (0)

/* One command in flight: its capsule copied out of the receive buffer, its response capsule
 * and a 4 KiB buffer (both registered), and where its data goes. */
struct nvmet_req {
	struct nvmet_queue *nq;
	uint32_t idx;
	int busy;
	struct nvme_sqe cmd;
	struct nvme_cqe *rsp;
	uint8_t *buf;
	/* the host's data: rlen bytes, in its buffer (a keyed SGL data block descriptor) or in the
	 * capsule (a data block with an offset: icd points into the receive buffer, which the
	 * request holds, recv, until the data is taken or the command answered) */
	uint64_t raddr;
	uint32_t rkey, rlen;
	/* the descriptor's subtype asked for Remote Invalidation: the response is SEND_WITH_INV of
	 * rkey, so the host need not post a LOCAL_INV for it (NVMe/RDMA, as nvmet-rdma and SPDK) */
	int invalidate;
	const uint8_t *icd;
	int32_t recv;            /* the receive buffer held, or -1 */
	struct nvmet_srq *srq;   /* whose buffer recv is: the device's SRQ's, or NULL: the queue's */
	/* controller -> host data to RDMA WRITE before the response */
	void *c2h;
	uint32_t c2h_len, c2h_lkey;
	/* host -> controller data arrived (RDMA READ completed) */
	void (*then)(struct nvmet_req *r);
	/* the READ to post once the queue's window has room (nvmet_fetch) */
	void *rd_dst;
	uint32_t rd_lkey, rd_len;
	int32_t rd_next;         /* next request waiting to READ, or -1 */
	/* counted against its controller's limits (an I/O command), with its data's bytes; given
	 * back when the slot is free again, or when the queue leaves the controller */
	int counted;
	uint32_t held;
	int answered;            /* nvmet_complete ran for it */
};

/* A command capsule waiting for a request slot (on_capsule), holding its receive buffer. */
struct nvmet_capsule {
	const uint8_t *buf;
	uint32_t len, idx;
	struct nvmet_srq *srq;
};

/* A queue (passive rdma-qsm queue): the class's private area. */
struct nvmet_queue {
	struct qsm_conn *q;
	struct nvmet_thread *t;  /* its ctx's thread */
	uint32_t serial;
	uint16_t qid;
	uint16_t depth;          /* receives posted = host's hsqsize + 1 (our crqsize) */
	uint16_t hrqsize;
	uint16_t sqhd;
	struct nvmet_ctrl *ctrl;
	int reserved;            /* counted against the caps on queues (nq_reserve) */
	int connecting;          /* a Connect's data is being read: one Connect at a time */
	uint32_t icd;            /* in-capsule data a capsule may carry: -I on an I/O queue, else 0 */
	uint8_t *recv_bufs;      /* depth command capsules of NVME_SQE_SIZE + icd bytes (none on an SRQ) */
	struct nvme_cqe *rsps;   /* nreqs response capsules */
	uint8_t *bufs;           /* nbufs * NVMET_BUF_SIZE */
	struct nvmet_req *reqs;
	uint32_t nreqs, nfree, nbufs;
	uint32_t *free_list;
	struct nvmet_capsule *wait;   /* depth capsules waiting for a slot, a ring */
	uint32_t wait_head, nwait;
	struct qsm_mr *recv_mr, *rsp_mr, *buf_mr;
	uint32_t buf_lkey, ns_lkey;
	/* RDMA READs in flight, at most rd_max (the connection's read depth): the rest wait in
	 * software, in order, so that a READ beyond the peer's depth never holds the responses
	 * behind it in the send queue */
	uint32_t rd_out, rd_max;
	int32_t rd_head, rd_tail; /* requests waiting to READ (rd_next), -1: none */
	/* Responses (a read's data WRITE, then its response SEND) gathered while the ctx
	 * dispatches, posted as one list after it (nvmet_flush_posts): one doorbell for them all,
	 * as SPDK's poll groups post at the end of each poll.  At most 2 WRs a request. */
	struct qsm_wr *pend;
	struct qsm_sge *pend_sge;
	uint32_t npend;                   /* > 0: on the list of queues with WRs to post */
	struct nvmet_queue *dirty_next;
	struct nvmet_queue *next, *prev;   /* every queue alive, for the exit */
};

/* rdma.c: the transport */
extern const struct qsm_class nvmet_queue_class;
/* The listener's class: nvmet_queue_class, or with -Q (g_opts.srq_depth) its subclass whose
 * queues receive on their device's SRQ. */
const struct qsm_class *nvmet_class(void);
/* Sends the response (after the RDMA WRITE of r->c2h, if any) and frees r when it is sent.
 * status: SCT << 8 | SC, | NVME_STATUS_DNR. */
void nvmet_complete(struct nvmet_req *r, uint16_t status, uint64_t result);
/* After each qsm_ctx_dispatch(): the responses it made, posted, one list per queue.  Returns
 * how many WRs it posted (work the ctx will hear of). */
int nvmet_flush_posts(struct nvmet_thread *t);
/* Takes r's host data (len bytes) into dst (lkey), then calls then(r): copied from the capsule
 * at once if it came in it, else by an RDMA READ within the queue's read window. */
void nvmet_fetch(struct nvmet_req *r, void *dst, uint32_t lkey, uint32_t len,
		 void (*then)(struct nvmet_req *r));
unsigned nvmet_queues_live(const struct nvmet_thread *t);   /* requested, not yet released */
/* At exit: t's queues' buffers taken (its thread stopped, or on it), before its qsm_ctx_free(). */
void nvmet_queues_take_all(struct nvmet_thread *t);
void nvmet_queues_free_all(void);      /* at exit, after every qsm_ctx_free() */
/* The queue to close, from thread from: disconnected at once if it is from's, else on its own
 * thread, by its serial (qsm_ctx_call): a queue gone by then is left alone. */
void nvmet_queue_close(struct nvmet_thread *from, struct nvmet_queue *nq);
/* The target's counter identities, at any time: every queue requested is released, dropped or
 * still open; every controller created is freed or live; every command capsule is answered,
 * was left unanswered by its queue's close, or is in flight.  1 if all hold; the figures as one
 * line in buf. */
int nvmet_identities(const struct nvmet_tally *sum, char *buf, size_t len);

/* cmd.c: the controller */
void nvmet_exec(struct nvmet_req *r);  /* a new command capsule */
void nvmet_queue_detach(struct nvmet_queue *nq);   /* the queue is closing */
void nvmet_req_done(struct nvmet_req *r);          /* its slot is free again */
unsigned nvmet_ctrls_live(void);
void nvmet_ctrls_counted(uint64_t *created, uint64_t *freed);
void nvmet_ctrls_free_all(void);
/* The Keep Alive Timers.  The loop's clock, in ms (CLOCK_MONOTONIC), before each dispatch: the
 * commands it runs are stamped with it.  The tick, after a dispatch that caught up (took every
 * event there was): a controller whose host sent no command for its KATO ends its association.
 * It returns the ms until the next controller can be due (at most INT_MAX), -1 if none has a
 * timer: the loop's wait, at most. */
static inline void nvmet_keep_alive_clock(struct nvmet_thread *t, uint64_t now_ms)
{
	t->ka_now = now_ms;
}
int nvmet_keep_alive_tick(struct nvmet_thread *t);

#endif
