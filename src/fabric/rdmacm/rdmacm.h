/* rdma-qsm internal: what the files of the rdmacm fabric share: its objects (fabric, device, id)
 * and the calls between its layers, ops -> ids -> verbs -> drain -> devices -> pins, pending; none
 * upward. */
#ifndef QSM_FABRIC_RDMACM_H
#define QSM_FABRIC_RDMACM_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "fabric/fabric.h"
#include "fabric/rdmacm/pending.h"
#include "list.h"

#define DEV_NAME_MAX 64           /* IB_DEVICE_NAME_MAX, terminator included */
#define QP_BUCKETS 256            /* qp_num -> QP, for completions */
#define RD_ATOM_MAX 16            /* RDMA READs in flight we offer / ask for, at most */

/* ---- objects ---- */

/* A registered memory region: holds its device's resources (PD) like a device_get(). */
struct qsm_fmr {
	struct ibv_mr *mr;
	struct qsm_fdev *dev;
	int access;                      /* QSM_ACCESS_* (ibv_mr keeps the range, not these) */
};

/* A type-2 memory window (mr.c); its rkey is the last bind's (qsm_rc_bind_mw). */
struct qsm_fmw {
	struct ibv_mw *mw;
	struct qsm_fdev *dev;
	uint32_t rkey;
};

struct rc_srq_slot {
	uint64_t wr_id;                  /* the ULP's */
	uint16_t gen;                    /* bumped as the slot is freed: a stale tag never matches */
	bool used;
};

/* A shared receive queue (srq.c). */
struct qsm_fsrq {
	struct rc_fabric *fab;
	struct qsm_fdev *dev;            /* counted in dev->nsrqs: it holds the device's PD */
	void *owner;
	uint64_t key;                    /* its slot in fab->srqt, as tags carry it */
	struct ibv_srq *srq;
	struct rc_cq *cq;                /* the receive CQ of its QPs: room for every receive */
	struct rc_srq_slot *slot;
	uint32_t *free;                  /* indices of free slots, a stack */
	uint32_t cap, nfree;
};


/*
 * A WR's wr_id given to verbs is a tag, never a pointer: bit 63 the drain marker, bit 62 a
 * receive, bit 61 a receive of an SRQ; bits 32-60 the key of its QP or SRQ (its slot in the
 * fabric's table, 20 bits, and the slot's generation, 9 bits); bits 0-31 the WR's seq in its
 * work queue (an SRQ's: its slot and that slot's generation).  A completion left in a CQ by a
 * destroyed QP, or for a WR whose flush we made already, is recognised and dropped.  Under
 * TAG_MARKER, seq 0 is the drain marker and TAG_PROBE the keepalive probe (qsm_rc_probe).
 */
#define TAG_MARKER (1ull << 63)
#define TAG_RECV (1ull << 62)
#define TAG_SRQ (1ull << 61)
#define TAG_PROBE 1ull
#define TAG_RECV_HI ((uint32_t)(TAG_RECV >> 32))   /* TAG_RECV in a tag's high half */
#define TAG_KEY_SHIFT 32
#define TAG_SLOT_BITS 20
#define TAG_GEN_MASK 0x1ffu
#define TAG_KEY_MASK ((TAG_GEN_MASK << TAG_SLOT_BITS) | ((1u << TAG_SLOT_BITS) - 1))

/* Slots named by tags (table.c): a freed slot's generation moves on. */
struct rc_tent {
	void *obj;                       /* NULL: free, next_free links it */
	uint32_t gen;
	uint32_t next_free;
};

struct rc_table {
	struct rc_tent *e;
	uint32_t len, cap, free;
};

/* qp_num -> QP (table.c), for the receives of an SRQ, which name no QP in their tags. */
struct rc_qpn {
	struct qsm_fid **slot;
	uint32_t cap, live;
};

struct vctx;                      /* a process-wide verbs context (pins.c) */
struct rc_fabric;

/* One CQ of a device's pool (devices.c): the send and receive CQ of the QPs placed on it, on the
 * device's completion channel, its cq_context this record.  It holds every completion its QPs can
 * have outstanding (`need`, their WRs and drain markers); a QP goes to a CQ with room for its
 * share, grown up to max_cqe, or to a new one.  A CQ left without QPs stays in the pool, as
 * large as it grew, for the QPs of a reconnect storm: only the fabric's 1 s tick frees it, once
 * it has been empty for CQ_IDLE_TICKS of them (qsm_rc_cq_trim).  With the device monitor the
 * tick runs only while some pool has such a CQ (qsm_rc_timer_run). */
struct rc_cq {
	struct qsm_list node;            /* in qsm_fdev.cqs, oldest first */
	struct ibv_cq *cq;
	int cap, need;                   /* entries, and what its QPs reserved */
	unsigned nqps;
	unsigned events;                 /* completion events read from the channel, not yet acked */
	bool hot;                        /* its last poll found completions: polled again at the
	                                    next get_event, unarmed, until polls find none */
	unsigned idle;                   /* polls in a row that found none, while hot */
	bool own;                        /* an SRQ's receive CQ, not the pool's: no QP is placed on it */
	unsigned drains;                 /* QPs in rc_fabric.dq waiting for a poll to find it empty */
	unsigned empty_ticks;            /* ticks (1 s) seen while it had no QP */
	bool checked;                    /* heated by qsm_rc_cq_check_cold(), not polled since */
};

#define CQ_IDLE_TICKS 5                  /* ticks an empty CQ is kept: 4-5 s after its last QP */

#define TICK_NS 1000000000ull           /* the fabric's tick: the CQ trim, the poll without a monitor */
#define ADDR_WAIT_MS 1024                /* how long an address that appeared is tried (monitor.c) */
#define MON_ADDRS_MAX 16                 /* addresses waiting to be tried, at most */

/* What the monitor's messages said (qsm_rc_monitor_parse_*). */
enum {
	MON_DEVICES = 1 << 0,            /* an RDMA device registered, unregistered or renamed */
	MON_ADDRS = 1 << 1,              /* an address appeared (RTM_NEWADDR) */
	MON_ADDR_GONE = 1 << 2,          /* an address went (RTM_DELADDR) */
	MON_LOST = 1 << 3,               /* the socket overran: messages were lost */
};

/* How often, at most, the CQs that wait for their events are polled once anyway, when the
 * fabric wakes for something else (qsm_rc_cq_check_cold), and how long after the fabric's last
 * posts it is woken for that (qsm_rc_cq_watch): a provider can lose a notification. */
#define CQ_COLD_CHECK_NS 1000000000ull

#define CQ_HOT_IDLE_POLLS 64             /* ... before a hot CQ is re-armed and may go cold: */
#define CQ_HOT_IDLE_MAX 65536            /* the fabric's hot_idle, between these two */
#define CQ_COLD_FEW 8                    /* get_event calls while cold: the caller slept */
#define BUSY_EMPTY_CALLS 64              /* empty get_event calls in a row: a busy caller */

struct qsm_fdev {
	struct qsm_list node;            /* in rc_fabric.devs */
	struct rc_fabric *fab;
	int index;                       /* kernel device index: unique across remove + add */
	uint64_t guid;
	char name[DEV_NAME_MAX];
	struct ibv_context *verbs;       /* librdmacm's context, once an id showed it */
	bool present;                    /* in the device list, as far as we know */
	unsigned gets, nqps, nids, nmrs, nsrqs;
	/* shared resources, while gets + nqps + nmrs > 0 and a QP or MR was created once */
	struct vctx *vc;
	struct qsm_list vnode;           /* linked to vc (qsm_rc_vctx_link) while the resources exist */
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;     /* every CQ of the pool is on it: one fd in the epoll */
	struct qsm_list cqs;             /* the CQ pool (struct rc_cq), created as QPs need them */
	unsigned ncqs, max_cq;           /* CQs in the pool; the device's limit */
	int max_cqe;
	uint8_t max_rd_atom, max_init_rd_atom;   /* device limits, for rdma_conn_param */
	uint8_t max_sge_rd;              /* SGEs an RDMA READ may scatter into (siw: 1), at most 255 */
	struct qsm_list qps[QP_BUCKETS];
	uint64_t async_other;
};

enum { WQ_SEND = 0, WQ_RECV = 1 };

/* A WR on the QP, in its work queue's ring at seq & mask (verbs.c). */
struct rc_slot {
	uint64_t wr_id;                  /* the ULP's */
	uint8_t opcode;                  /* enum qsm_wr_opcode */
	bool signaled;
	bool done;                       /* completed ahead of a signaled WR before it (verbs.c) */
};

/*
 * One work queue of a QP.  Its WRs complete in post order (the IB spec, for an RC QP without
 * SRQ), so the WRs on the QP are the seqs head..tail-1 and a completion's WR is found from the
 * seq in its wr_id in O(1), with nothing allocated per post.  Not every provider keeps that
 * order on the send queue: soft-iWARP completes a SEND once TCP has it, ahead of an RDMA READ
 * posted before it that waits for its response.  Such a completion is taken where it stands
 * and its slot marked done (`ahead` counts them); head stays at the signaled WR still out and
 * passes the done slots when it completes.  A WR posted once the QP is in ERR is not given to
 * the QP: it waits on the QP's `late` list, behind its work queue's ring, for its flush from us.
 */
struct rc_wq {
	struct rc_slot *ring;
	uint32_t mask;                   /* ring size - 1 (a power of two, >= cap) */
	uint32_t cap;                    /* the ULP's limit: tail - head <= cap */
	uint32_t head, tail;
	uint32_t ahead;                  /* slots in head..tail-1 done: completed out of order */
};

struct qsm_fid {
	struct qsm_list node;            /* in rc_fabric.ids */
	struct rc_fabric *fab;
	struct rdma_cm_id *cm;           /* its qp: the id's QP (qsm_rc_fid_has_qp) */
	void *owner;
	struct qsm_fdev *dev;            /* counted in dev->nids */
	struct vctx *vc;                 /* counted in the context's users */
	/* the QP */
	struct qsm_list qp_node;         /* in dev->qps[] */
	bool draining, fatal_sent;
	bool probe_out;                  /* a keepalive probe is on the QP (qsm_rc_probe) */
	bool probe_failed;               /* and it failed: WC_ERROR was pushed */
	bool qp_err;                     /* the QP is known to be in ERR: posts are flushed by us */
	bool qp_rts;                     /* librdmacm moved the QP to RTS (accept, or ESTABLISHED) */
	bool flush_all;                  /* the drain marker came: every WR left is flushed by us */
	bool drained_due;                /* DRAINED follows those flushes (on an SRQ: and LAST_WQE) */
	bool last_wqe;                   /* on an SRQ: LAST_WQE came for this QP */
	bool on_lq;                      /* in rc_fabric.lq: flushes of ours to hand out */
	struct qsm_list lq_node;
	bool on_dq;                      /* in rc_fabric.dq: an iWARP drain waiting for its CQ */
	struct qsm_list dq_node;
	uint64_t qp_key;                 /* its slot in rc_fabric.qpt and its generation, as tags
	                                    carry them */
	struct qsm_fsrq *srq;            /* its receives come from this SRQ, or NULL */
	uint32_t qp_num;
	uint8_t max_sge_rd;              /* its device's, for the posts (qsm_rc_post_send) */
	uint32_t tag_hi;                 /* its tags' high half, TAG_RECV set (wc_take) */
	struct rc_cq *cq;                /* the pool's CQ it is on, while it has a QP */
	int qp_wrs;                      /* CQ entries it reserved there */
	struct rc_wq wq[2];              /* WQ_SEND and WQ_RECV */
	/* its owner's completion handler, for completions delivered straight (set_complete) */
	qsm_fabric_complete_fn complete;
	struct qsm_conn *complete_q;
	struct qsm_list late;            /* struct rc_late of both, in post order */
	/* CONNECT_REQUEST: what the active side offered, from our side (initiator_depth: its
	 * responder resources; ids.c, passive_ord), for accept's conn_param */
	uint8_t req_initiator_depth, req_responder_resources;
	bool requested;                  /* made for a CONNECT_REQUEST: a passive id */
	int16_t ord;                     /* active: the READ depth ESTABLISHED gave, -1 before */
	/* iWARP: rdma_connect() made and no outcome yet.  The kernel's iw_cm makes a destroy (and a
	 * disconnect) wait for that outcome, up to the provider's connect timeout, so a destroy
	 * then parks the id instead (qsm_rc_destroy_id) */
	bool iw_connecting;
	bool parked;                     /* released by its owner, destroyed at its next event */
	bool qp_unhooked;                /* its QP the owner's no more (qsm_rc_unhook_qp) */
	/* Handed to another fabric and not adopted by it yet (qsm_rc_handoff): its events are
	 * held here (struct qsm_pending), in order, until qsm_rc_adopt() */
	bool adopting;
	struct qsm_list held;
};

struct rc_fabric {
	struct qsm_fabric base;
	struct rdma_event_channel *ch;
	int epfd, tfd;
	struct qsm_list ids, devs;
	struct qsm_pending_queue pq;     /* what get_event() reports after the CM's events */
	/* QPs with flushes of ours to hand out (and maybe DRAINED after them), made in this
	 * fabric's thread only: no lock, nothing allocated (they come from the QPs' rings). */
	struct qsm_list lq;
	/* QPs drained on an iWARP device (qsm_rc_drain): each is drained once a poll finds its CQ
	 * empty, as its marker's completion would say on another device. */
	struct qsm_list dq;
	/* A list's WRs for its one doorbell, with QSM_FABRIC_MAX_SGE SGEs each: built here, where no
	 * post allocates, for the longest send queue of the fabric's QPs (posts are never
	 * concurrent: one fabric, one thread), so a QP carries none of its own. */
	struct ibv_send_wr *swr;
	struct ibv_sge *ssge;
	uint32_t swr_cap;
	/* A completion's QP or SRQ from the key in its wr_id's tag, O(1); an SRQ receive's QP
	 * from its qp_num. */
	struct rc_table qpt, srqt;
	struct rc_qpn qpn;
	bool polled_once;
	/* completions polled: success, flush, error, dropped (stale or flushed by us already);
	 * flushes synthesised (WRs rxe did not flush, or posted after ERR); for QSM_RDMACM_STATS */
	uint64_t wc_ok, wc_flush, wc_err, wc_stale, wc_synth, posts;
	uint64_t probes, probes_failed;   /* keepalive probes posted, and failed (WC_ERROR) */
	/* the runtime's sink (fabric.h, "Completions delivered straight"): until set_sink, its
	 * hold points at a 1, and nothing goes straight; sent: delivered straight by the poll
	 * of the get_event() call in progress */
	struct qsm_fabric_sink sink;
	int sent;
	uint64_t wc_straight;             /* all delivered straight, for QSM_RDMACM_STATS */
	/* ids destroyed while an iWARP connect was outstanding: parked until its outcome came
	 * (parked), destroyed since (unparked), for QSM_RDMACM_STATS and qsm_rdmacm_parked() */
	uint64_t parked, unparked;
	uint64_t async_stale;             /* a QP's async event that came after its QP went */
	uint64_t wc_unknown;              /* completions with an ibv_wc_status this build cannot name */
	uint64_t wc_order;                /* WRs a provider skipped (completed a later one first) */
	/* the CQ pools: CQs created, freed (those of them freed by the idle trim: cq_idle_freed; the
	 * rest with the device's resources or its removal), resized; QPs placed on an empty CQ the
	 * pool had kept (each a CQ not created again); the most CQs one device's pool held at once */
	uint64_t cq_created, cq_freed, cq_idle_freed, cq_resized, cq_reused;
	unsigned cq_peak;
	/* Sources epoll said are ready and not yet read dry: get_event() reads only these. */
	int pin_fd;
	bool ready_cm, ready_pins, ready_devs, ready_tick, ready_mon;
	/* The device monitor (monitor.c): a uevent and an rtnetlink socket, -1 without one, and
	 * mon_err why (-errno; then tfd ticks every second and each tick scans the device list).
	 * With it, tfd is one-shot at the earliest of tick_at (the next tick, while a CQ pool has
	 * something to trim), addr_at (the next try of the addresses that appeared, addr[]) and
	 * cold_at (the cold CQs' check after the last posts, qsm_rc_cq_watch); none: disarmed, and
	 * an idle fabric is never woken. */
	int uev_fd, rtnl_fd, mon_err;
	uint64_t tick_at, addr_at, cold_at, timer_at;      /* CLOCK_MONOTONIC ns; 0: none */
	struct sockaddr_storage addr[MON_ADDRS_MAX];
	unsigned naddr, addr_delay_ms;
	/* for QSM_RDMACM_STATS: netlink datagrams, overruns, device-list scans, tfd expirations
	 * read, DEVICE_ADDED pushed for an address that became usable */
	uint64_t mon_msgs, mon_lost, scans, timer_fires, addr_added;
	/* Busy CQs polled without waiting for their events (as a poll loop does, but never
	 * hiding the CM: epoll is still asked every HOT_EPOLL_EVERY calls); hot_fd, in the
	 * fabric's epoll, is readable while `hot` (hot CQs, plus one while lq is not empty) is
	 * not 0, so the ctx fd says there is work. */
	unsigned hot, hot_skips;
	int hot_fd;
	/* Empty polls before a hot CQ is re-armed, adapted to the caller: one that called
	 * get_event at least that often while no CQ was hot (cold_calls) polls busily, and each
	 * of those calls cost an epoll_wait (and its CQ an arm and an event) where a hot poll
	 * costs none: doubled, up to CQ_HOT_IDLE_MAX.  One that called a few times only slept
	 * on the fd: halved, down to CQ_HOT_IDLE_POLLS, so it spins little before it sleeps. */
	unsigned hot_idle, cold_calls;
	/* get_event calls in a row that found nothing: from BUSY_EMPTY_CALLS on, the caller polls
	 * busily, and epoll is asked every HOT_EPOLL_EVERY calls even with no CQ hot (a poll loop
	 * then makes no system call per empty call, as perftest's); back to 0 with anything
	 * found, and when the last hot CQ goes cold (a caller that sleeps on the fd sleeps then,
	 * and its next wake-up is read at once). */
	unsigned empty_run;
	uint64_t get_calls, epoll_waits;  /* for QSM_RDMACM_STATS */
	/* qsm_rc_cq_check_cold(): when it last ran; CQs it heated, and of them those whose first
	 * poll found completions no event had announced (for QSM_RDMACM_STATS); `posts` when
	 * qsm_rc_cq_watch last set cold_at */
	uint64_t cold_check_at, cq_checks, cq_rescued, cold_posts;
	/* QPs created, and what they held of ours (qsm_rc_qp_bytes of their caps); for QSM_RDMACM_STATS */
	uint64_t qps_created, qp_bytes;
};

static inline struct rc_fabric *to_fab(struct qsm_fabric *f)
{
	return qsm_container_of(f, struct rc_fabric, base);
}

/* The id has a QP: librdmacm sets cm->qp only when rdma_create_qp() succeeds and clears it in
 * rdma_destroy_qp(), and nothing else of ours creates one (no rdma_get_request, rdma_create_ep). */
static inline bool qsm_rc_fid_has_qp(const struct qsm_fid *id)
{
	return id->cm->qp != NULL;
}

static inline int errno_or(int def)
{
	return errno > 0 ? -errno : -def;
}

static inline int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static inline int epoll_add(struct rc_fabric *f, int fd)
{
	struct epoll_event e = { .events = EPOLLIN, .data.fd = fd };

	return epoll_ctl(f->epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? -errno : 0;
}

static inline void epoll_del(struct rc_fabric *f, int fd)
{
	(void)epoll_ctl(f->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* Not a completion: lost if memory is short, which the runtime's state timeouts cover. */
static inline void pending_push(struct rc_fabric *f, int event, int status, struct qsm_fid *id,
				struct qsm_fdev *dev, bool device_wide)
{
	(void)qsm_pending_push_event(&f->pq, event, status, id, dev, device_wide);
}

/* ---- pins.c: verbs contexts, process-wide ---- */

/* The fd of the pins' event channel (created once per process), or -errno. */
int qsm_rc_pins_open(void);
/* Read what the pins heard: a DEVICE_REMOVAL marks its context removed. */
void qsm_rc_pins_take_events(void);
/* The context's record, one more user counted; pinned with an id bound like `via` (may be
 * NULL: then unpinned).  NULL when out of memory. */
struct vctx *qsm_rc_vctx_get(struct ibv_context *verbs, struct rdma_cm_id *via);
/* One user less (v may be NULL); the context is closed once removed and unused. */
void qsm_rc_vctx_put(struct vctx *v);
/* rdma_cm reported the context's device removed. */
void qsm_rc_vctx_removed(struct ibv_context *verbs);
/* A fabric device holding a PD/CQ on the context: linked by its `vnode`, under the lock. */
void qsm_rc_vctx_link(struct vctx *v, struct qsm_list *vnode);
void qsm_rc_vctx_unlink(struct qsm_list *vnode);
/* fn(vnode) for every device linked to the context of `verbs`, under the lock. */
void qsm_rc_vctx_each_link(struct ibv_context *verbs, void (*fn)(struct qsm_list *vnode, const void *arg),
			   const void *arg);

/* ---- devices.c: devices, their PD and CQ, async events, the device list ---- */

/* The id's device, once librdmacm knows it (bind, address resolution, a request). */
void qsm_rc_fid_attach(struct qsm_fid *id);
/* A request's id from another rdmacm fabric of the process: attached here, its held events
 * queued behind what waits (devices.c, where its device is found). */
void qsm_rc_adopt(struct qsm_fabric *base, struct qsm_fid *id);
/* The PD and the completion channel (the CQs come with QPs): 0 or -errno. */
int qsm_rc_dev_get_resources(struct qsm_fdev *d, struct rdma_cm_id *via);
/* `wrs` entries reserved on a CQ of the device's pool that has room for them: one already
 * there, grown if needed, else a new one; NULL and *err -ENOMEM when none can hold them (more
 * than max_cqe, or max_cq CQs with no room). */
struct rc_cq *qsm_rc_cq_get(struct qsm_fdev *d, int wrs, int *err);
/* A CQ of the device that is not the pool's (an SRQ's receives), and its end. */
struct rc_cq *qsm_rc_cq_own(struct qsm_fdev *d, int entries, int *err);
void qsm_rc_cq_own_free(struct qsm_fdev *d, struct rc_cq *c);
/* The reservation given back (the QP is destroyed).  A CQ left empty is kept for the next QPs
 * (freed at once only on a device no longer present); the tick starts if it was not running. */
void qsm_rc_cq_put(struct qsm_fdev *d, struct rc_cq *c, int wrs);
/* `ticks` ticks went by: a pool CQ empty for CQ_IDLE_TICKS of them is freed, but for one, the
 * oldest, while none of the pool has a QP.  Whether an empty CQ is left for later ticks. */
bool qsm_rc_cq_trim(struct qsm_fdev *d, unsigned ticks);
/* The completion channel read dry: every CQ that fired is acked and goes hot. */
void qsm_rc_cq_events(struct qsm_fdev *d);
/* The CQ polled at the next get_event, without waiting for its event. */
void qsm_rc_cq_heat(struct rc_fabric *f, struct rc_cq *c);
/* The fabric woke (epoll asked): at most every CQ_COLD_CHECK_NS, each CQ waiting for its event
 * is heated, to be polled once and re-armed at once if it has nothing.  A provider that loses a
 * CQ's notification (soft-iWARP does under load: tests/vm/README.md) would leave every QP on
 * that CQ waiting for good; this finds its completions at the next wake-up for anything else,
 * and qsm_rc_cq_watch makes sure there is one after the fabric's last posts. */
void qsm_rc_cq_check_cold(struct rc_fabric *f);
/* The fabric found nothing to do (its caller may sleep now).  If anything was posted since
 * cold_at was last set, and no check is due already, one is due CQ_COLD_CHECK_NS from now
 * (tfd, qsm_rc_timer_run): a completion whose notification was lost in a conversation that
 * then went quiet (both peers waiting for each other, nothing else to wake either) is found
 * within about a second, at the cost of one wake-up a second at most while posts go on and
 * one after the last; a fabric that posts nothing is never woken.  Without the monitor the
 * periodic tick's wake-up does the same. */
void qsm_rc_cq_watch(struct rc_fabric *f);
/* A CQ the check heated had completions at its first poll: counted. */
void qsm_rc_cq_rescued(struct rc_fabric *f, struct rc_cq *c);
/* A hot CQ that had no completions: polled again, unarmed, a few times; then re-armed and
 * polled once more, and cold if that finds none either.  Completions found, or 0. */
int qsm_rc_cq_poll_empty(struct qsm_fdev *d, struct rc_cq *c, struct ibv_wc *wc, int max);
void qsm_rc_hot_changed(struct rc_fabric *f, int delta);
/* Every reference of a device is checked here: resources go when unused, the object when
 * nothing refers to it and it is no longer in the device list. */
void qsm_rc_dev_settle(struct qsm_fdev *d);
/* rdma_cm said so: the device is being unregistered. */
void qsm_rc_dev_removed(struct qsm_fdev *d);
void qsm_rc_harvest_async(struct rc_fabric *f);
/* The device list read: new devices become DEVICE_ADDED, those gone from it not present. */
void qsm_rc_poll_devices(struct rc_fabric *f);
/* The present device object of a device in the list, or NULL. */
struct qsm_fdev *qsm_rc_dev_present(struct rc_fabric *f, struct ibv_device *ibdev);
/* With the monitor: tfd armed one-shot at the earliest of tick_at, addr_at and cold_at, or disarmed. */
void qsm_rc_timer_arm(struct rc_fabric *f);
uint64_t qsm_rc_now_ns(void);
void qsm_rc_device_get(struct qsm_fdev *d);
void qsm_rc_device_put(struct qsm_fdev *d);
const char *qsm_rc_device_name(struct qsm_fdev *d);
int qsm_rc_device_addr(struct qsm_fdev *d, struct sockaddr_storage *ss);

/* ---- monitor.c: the device monitor (uevents, rtnetlink), above devices.c ---- */

/* The two sockets opened and in the epoll: 0, or -errno and none (the 1 s poll then). */
int qsm_rc_monitor_open(struct rc_fabric *f);
void qsm_rc_monitor_close(struct rc_fabric *f);
/* Both sockets read dry; one device-list scan however many messages named RDMA devices; the
 * addresses that appeared handed to qsm_rc_addrs_new. */
void qsm_rc_monitor_take(struct rc_fabric *f);
/* What one datagram says (MON_*), whatever its bytes: never a read past len. */
unsigned qsm_rc_monitor_parse_uevent(const char *buf, size_t len);
unsigned qsm_rc_monitor_parse_rtnl(const void *buf, size_t len, struct sockaddr_storage *addrs,
				   unsigned max, unsigned *n);
/* Addresses that appeared (rtnetlink): each tried at once and then 1, 2, 4 ... ms apart for
 * ADDR_WAIT_MS, until rdma_cm can bind it (RoCE adds its GID in a kernel work item after the
 * message): DEVICE_ADDED for the device that serves it, or the scan that finds that device. */
void qsm_rc_addrs_new(struct rc_fabric *f, const struct sockaddr_storage *addrs, unsigned n);
/* tfd expired: qsm_rc_timer_fired reads it (`n` its expirations) and runs what is due at `now`:
 * the tick's trim of the CQ pools (and, without a monitor, the device-list scan: each expiry
 * is a tick then), the tries of new addresses; then tfd is armed again for what is left. */
void qsm_rc_timer_fired(struct rc_fabric *f);
void qsm_rc_timer_run(struct rc_fabric *f, uint64_t n, uint64_t now);

/* ---- verbs.c: QPs, posts, completions; mr.c: MRs ---- */

int qsm_rc_create_qp(struct qsm_fid *id, const struct qsm_fabric_qp_attr *a);
void qsm_rc_destroy_qp(struct qsm_fid *id);
/* The QP no longer the owner's (its WRs, its completions stale), but the kernel's QP kept
 * until qsm_rc_destroy_qp(): a parked id's (qsm_rc_destroy_id), whose destroy would wait. */
void qsm_rc_unhook_qp(struct qsm_fid *id);
uint32_t qsm_rc_cm_timeout_ms(struct qsm_fid *id);
int qsm_rc_read_depth(struct qsm_fid *id);
int qsm_rc_notify(struct qsm_fid *id);
int qsm_rc_reg_mr(struct qsm_fdev *d, void *addr, size_t len, int access, struct qsm_fmr **ret,
		  uint32_t *lkey, uint32_t *rkey);
int qsm_rc_dereg_mr(struct qsm_fmr *m);
int qsm_rc_alloc_mw(struct qsm_fdev *d, struct qsm_fmw **ret);
void qsm_rc_dealloc_mw(struct qsm_fmw *w);
int qsm_rc_bind_mw(struct qsm_fid *id, uint64_t wr_id, struct qsm_fmw *mw, struct qsm_fmr *mr,
		   uint64_t addr, uint64_t len, int access, unsigned int flags, uint32_t *rkey);
int qsm_rc_post_send(struct qsm_fid *id, const struct qsm_fabric_wr *wr, int n, int *posted);
int qsm_rc_post_recv(struct qsm_fid *id, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
		     int num_sge);
/* ---- wc.c: every ibv_wc_status by name, what a successful receive reports, SGEs ---- */
enum qsm_wc_status qsm_rc_wc_status(struct rc_fabric *f, enum ibv_wc_status st);
void qsm_rc_sges_to_ibv(struct ibv_sge *sge, const struct qsm_fabric_sge *sg, int n);
/* Completions of the hot CQs, up to max: straight to their handlers while they may go so, the
 * rest into cqe[] (wr_id -> WR in O(1)); the number in cqe[], f->sent the number straight. */
int qsm_rc_poll_cqs(struct rc_fabric *f, struct qsm_fabric_cqe *cqe, int max);
void qsm_rc_set_sink(struct qsm_fabric *base, const struct qsm_fabric_sink *sink);
void qsm_rc_set_complete(struct qsm_fid *id, qsm_fabric_complete_fn fn, struct qsm_conn *q);
/* Bytes the fabric holds for one QP of these caps (the id, its table entry, its rings). */
size_t qsm_rc_qp_bytes(uint32_t max_send_wr, uint32_t max_recv_wr);
/* wq.c: a work queue's ring for cap WRs (0, or -ENOMEM), and let go of */
int qsm_rc_wq_init(struct rc_wq *w, uint32_t cap);
void qsm_rc_wq_fini(struct rc_wq *w);
/* head past the slots done ahead of it (w->ahead: only then is it called) */
void qsm_rc_wq_catch_up(struct rc_wq *w);
/* The slot of the WR a completion names in work queue w, taken, when it is not the head's: a
 * skip over unsignaled sends, or a send completed ahead of a signaled WR still out (marked
 * done); NULL when the completion is stale (that WR completed already: flushed by us, or a
 * destroyed QP's leftover). */
struct rc_slot *qsm_rc_wq_take_slow(struct rc_fabric *f, struct rc_wq *w, bool recv, uint32_t seq);
/* The fabric's list of WRs for posts, freed with the fabric. */
void qsm_rc_send_lists_free(struct rc_fabric *f);

/* ---- drain.c: the drain, and the flushes we make (below verbs.c) ---- */

/* ERR, and DRAINED once every WR posted before completed (a marker; on iWARP a poll that finds
 * the QP's CQ empty). */
int qsm_rc_drain(struct qsm_fid *id);
/* Keepalive: a zero-length RDMA WRITE on the QP (struct qsm_fabric_ops.probe). */
int qsm_rc_probe(struct qsm_fid *id);
/* Its completion: nothing, or its failure as the id's WC_ERROR. */
void qsm_rc_probe_came(struct qsm_fid *id, enum ibv_wc_status status);
/* The drain's marker came (or its CQ was found empty): the rest is flushed by us, DRAINED next. */
void qsm_rc_marker_came(struct qsm_fid *id);
/* A poll found CQ c empty: every iWARP drain waiting on it is where its marker would be. */
void qsm_rc_cq_found_empty(struct rc_fabric *f, struct rc_cq *c);
int qsm_rc_flush_qp(struct qsm_fid *id, struct qsm_fabric_cqe *cqe, int max);
/* n WRs of work queue q posted to a QP known to be in ERR: kept for our flush (0, or -ENOMEM
 * and none kept); a list wr[0..n), or (wr NULL) one receive of recv_wr_id. */
int qsm_rc_post_late(struct qsm_fid *id, int q, const struct qsm_fabric_wr *wr, int n, uint64_t recv_wr_id);
/* The QP is known to be in ERR: WRs posted since that nothing on the QP precedes any more
 * are flushed by us, in order (handed out from lq). */
void qsm_rc_wq_flush_heads(struct qsm_fid *id);
/* LAST_WQE came for a QP on an SRQ: its DRAINED may follow. */
void qsm_rc_last_wqe(struct qsm_fid *id);
/* lq: our flushes, up to max, in each QP's order (> 0); DRAINED in *ev after a QP's last (0);
 * -EAGAIN when lq is empty. */
int qsm_rc_lq_take(struct rc_fabric *f, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe, int max);
/* The QP is being destroyed: its late WRs freed (no completion: the contract), off lq and dq. */
void qsm_rc_flushes_forget(struct qsm_fid *id);

/* ---- table.c: the lookups of completions ---- */

void qsm_rc_table_init(struct rc_table *t);
void qsm_rc_table_fini(struct rc_table *t);
/* A slot for obj: 0 and *key (its slot and generation, shifted as tags carry them), or -ENOMEM. */
int qsm_rc_table_add(struct rc_table *t, void *obj, uint64_t *key);
void qsm_rc_table_del(struct rc_table *t, uint64_t key);
/* The object the key in wr_id names, or NULL (freed since, or reused).  Inline: once per
 * completion. */
static inline void *qsm_rc_table_find(const struct rc_table *t, uint64_t wr_id)
{
	uint32_t key = (uint32_t)(wr_id >> TAG_KEY_SHIFT) & TAG_KEY_MASK;
	uint32_t i = key & ((1u << TAG_SLOT_BITS) - 1);

	if (i >= t->len || (t->e[i].gen & TAG_GEN_MASK) != key >> TAG_SLOT_BITS)
		return NULL;
	return t->e[i].obj;
}
int qsm_rc_qpn_add(struct rc_qpn *h, struct qsm_fid *id);
struct qsm_fid *qsm_rc_qpn_find(const struct rc_qpn *h, uint32_t qpn);
void qsm_rc_qpn_del(struct rc_qpn *h, const struct qsm_fid *id);
void qsm_rc_qpn_fini(struct rc_qpn *h);

/* ---- srq.c: shared receive queues ---- */

int qsm_rc_create_srq(struct qsm_fabric *base, struct qsm_fdev *d, void *owner,
		      const struct qsm_fabric_srq_attr *attr, struct qsm_fsrq **ret);
void qsm_rc_destroy_srq(struct qsm_fsrq *s);
int qsm_rc_post_srq_recv(struct qsm_fsrq *s, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
			 int num_sge);
int qsm_rc_arm_srq(struct qsm_fsrq *s, uint32_t limit);
/* An SRQ's ibv_srq and receive CQ, for a QP created on it. */
struct ibv_srq *qsm_rc_srq_verbs(struct qsm_fsrq *s, struct ibv_cq **cq);
/* A polled completion of an SRQ receive (TAG_SRQ): its QP's, as wc_take() makes them (1; the
 * caller marks the QP in ERR for an error), or none (0: stale, or its QP is gone). */
int qsm_rc_srq_wc_take(struct rc_fabric *f, const struct ibv_wc *wc, struct qsm_fabric_cqe *out);

/* ---- ids.c: rdma_cm ids and the CM channel ---- */

int qsm_rc_create_id(struct qsm_fabric *base, void *owner, struct qsm_fid **ret);
void qsm_rc_set_owner(struct qsm_fid *id, void *owner);
int qsm_rc_handoff(struct qsm_fid *id, struct qsm_fabric *to);
void qsm_rc_destroy_id(struct qsm_fid *id);
int qsm_rc_bind(struct qsm_fid *id, const struct sockaddr *addr);
int qsm_rc_listen(struct qsm_fid *id, int backlog);
int qsm_rc_resolve_addr(struct qsm_fid *id, const struct sockaddr *src, const struct sockaddr *dst,
			int timeout_ms);
int qsm_rc_resolve_route(struct qsm_fid *id, int timeout_ms);
int qsm_rc_connect(struct qsm_fid *id, const void *pdata, size_t len);
int qsm_rc_accept(struct qsm_fid *id, const void *pdata, size_t len);
int qsm_rc_reject(struct qsm_fid *id, const void *pdata, size_t len);
int qsm_rc_disconnect(struct qsm_fid *id);
struct qsm_fdev *qsm_rc_id_device(struct qsm_fid *id);
void qsm_rc_id_verbs(struct qsm_fid *id, void **cm_id, void **qp, void **pd);
int qsm_rc_id_src_addr(struct qsm_fid *id, struct sockaddr_storage *ss);
/* One rdma_cm event, copied and acked; 0, or -EAGAIN when there is none. */
int qsm_rc_take_cm_event(struct rc_fabric *f, struct qsm_fabric_event *ev);

#endif
