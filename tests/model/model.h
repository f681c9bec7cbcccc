/* rdma-qsm tests: what the files of the model test (tests/model/) share: its constants, the world
 * and its records, the data path's model, and every function one file calls in another. */
#ifndef QSM_TESTS_MODEL_H
#define QSM_TESTS_MODEL_H

/* rdma-qsm: a seeded randomized model test of the runtime on the simulated fabric: random
 * interleavings of user calls, handler behaviours and faults, with invariants after every step. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <qsm/ctx.h>
#include <qsm/data.h>
#include <qsm/sim.h>

#include "harness.h"

/*
 * QSM_MODEL_SEED picks the seed (default: a fixed one, so CI is deterministic), and
 * QSM_MODEL_STEPS the number of steps (default 50000, about 3-5 s, 40 s under valgrind).
 * Every failure names the seed and the step, and the same seed replays the same run.
 *
 * Invariants, after every step:
 *  (a) accounting, per ctx: popped + aborts == dispatched + dropped + completions; every
 *      dispatch is traced exactly once and counted once in events[], every orphan traced
 *      once; the ctxs took from the fabric exactly what the sim delivered; `completions`
 *      is exactly the number of completion handler calls;
 *  (b) no callback for a queue after qsm_conn_destroy() or a non-zero return;
 *  (c) every live queue is in a non-final state of its machine, its QP state fits that
 *      state (no QP in IDLE, RECONNECT_WAIT, FAILED, NEW, REQUESTED; RTS when connected;
 *      ERR while disconnecting or draining, or none for a passive queue whose accept
 *      could not create one), and the runtime has a QP exactly when the sim does;
 *  (e) a downcall returns 0 exactly when the machine has an edge for it;
 *  (g) a TIMEOUT reaches only the state that armed it, after that state's timeout; no
 *      RETRY or DEVICE_ADDED is ever unexpected (they would be stale);
 * and every 250 steps, once held events are released and the timeouts have run out,
 *  (f) no removed device is still REMOVING (nothing holds it);
 * and at the end, after destroying everything:
 *  (d) nothing leaked: sim ids, qps, MRs, device refs, pending events, queues, devices all 0.
 *
 * The data path (qsm/data.h): every queue has a buffer with a receive area, a send area, a
 * remotely writable area, a remotely readable area (a known pattern) and a read landing area,
 * registered as three MRs (in qp_ready, or later), and posts receives, sends, RDMA writes and
 * reads (valid, and sometimes with bad keys, ranges, SGE counts or flags) from random steps
 * and from every kind of handler, including the completion handler, which also aborts or
 * destroys its queue now and then.  Every post is tracked (wr_id, kind, signaled, QP
 * generation), and:
 *  (D1) a post returns -EINVAL for bad flags / SGE counts (QSM_MAX_SGE, the class's caps),
 *       INLINE on a READ or beyond max_inline_data, whatever the state (the door checks them
 *       first), else -ENOTCONN exactly when the queue has no QP or its drain started (active
 *       DRAINING/CLOSING, passive DRAINING), -EINVAL for a send before the QP is RTS,
 *       -ENOBUFS for a receive only with max_recv_wr receives outstanding and for a send,
 *       write or read only with max_send_wr slots held
 *       (a WR holds one until its completion is handled, an unsignaled one until a later
 *       WR's of its QP, or DRAINED), 0 otherwise; a QP never exists in a state the man page
 *       says has none, except inside qp_ready;
 *  (D2) every completion names a WR posted successfully on that queue's current QP, and
 *       comes at most once: none after the QP was destroyed, after DRAINED (trace record),
 *       after destroy / abort / release; with the WR's opcode, byte_len 0 unless SUCCESS,
 *       never SUCCESS for an unsignaled WR, for a WR that had to fail (bad key, range) or
 *       after an error completion on the same QP, FLUSH_ERR for a WR posted in ERR, no
 *       LOC_PROT_ERR while the lkey's MR is still registered; a destroyed queue's data
 *       calls return -EINVAL;
 *  (D3) at DRAINED every receive and signaled WR of that QP has completed (unless a held
 *       event may have been reordered), and once everything settled every signaled WR of a
 *       live QP, and every receive of a QP in ERR, has completed;
 *  (D4) data: a receive holds exactly the message a send of its peer carried (byte_len,
 *       header, payload), each message is received at most once; a read returns the
 *       pattern of the memory its rkey names; a write's bytes are in the target's memory;
 *  (D5) MRs: reg_mr works on a queue that has a QP while every device is up, gives distinct
 *       non-zero keys; MRs are invalid after device_removed; once settled the sim holds
 *       exactly the MRs the live queues hold valid, and none at the end;
 *  (D6) a work queue completes in post order (the send queue's WRs, the receives): no WR
 *       still outstanding completes after a later one of its queue, unless HOLD reordered;
 *  (D7) lists (qsm_conn_post_list of 2..LIST_MAX sends, writes and reads, signaled or not,
 *       INLINE within the class's max_inline_data or beyond it, SEND_WITH_IMM and
 *       WRITE_WITH_IMM among them) are checked whole: a bad WR anywhere (flags, SGEs, opcode,
 *       INLINE on a READ or beyond max_inline_data) is -EINVAL, more WRs than the send slots
 *       left is -ENOBUFS (exactly once settled, else maybe), and either posts none (*posted 0,
 *       no completion ever) or, 0, all n (*posted n), each then outstanding, holding its slot
 *       and completing as a single post does (D2, D3, D6); a receive a WITH_IMM used carries
 *       its imm_data (WITH_IMM; the message's number), a WRITE_WITH_IMM's says
 *       RECV_RDMA_WITH_IMM with the bytes written and leaves its memory as it was; every
 *       other completion has no wc_flags, imm_data or invalidated_rkey; an INLINE WR never
 *       fails with LOC_PROT_ERR (it needs no lkey).
 *
 * The SRQ class (model-srq, srq.c) gives its queues one SRQ per device per ctx, which its
 * srq_low fills from a pool the model registered in each ctx, and which its queues' receives go
 * to (from qp_ready, every handler and the completion handler, as for the others):
 *  (S1) srq_low is called once when the SRQ is made (srqs_live one more than the model knew,
 *       on a device of the ctx that had none) and then only on its limit, each such call right
 *       before the device's SRQ_LIMIT edge in IN_USE; none in REMOVING (a self-loop), never
 *       unexpected; after a device removal and re-add the SRQ is made again;
 *  (S2) qsm_srq_post_recv() returns -EINVAL for more SGEs than QSM_MAX_SGE or srq.max_sge
 *       (whatever the device's state: the door checks them first), else -ENODEV once the device
 *       is REMOVING, -ENOBUFS with srq.max_wr receives outstanding (exactly once settled
 *       and none may have gone unseen, else maybe), 0 otherwise; once
 *       settled, filling the SRQ takes exactly what is free (less none, more only by the
 *       receives that may have gone with a QP: then those are the oldest outstanding ones);
 *       qsm_conn_post_recv() on a queue of the class is -EINVAL; qsm_conn_srq() is set exactly
 *       while the queue has a QP, and names an SRQ of its ctx;
 *  (S3) each SRQ receive completes at most once, on a queue of that SRQ, with QSM_WC_SRQ,
 *       never flushed, in SRQ post order across the queues (one before it that no hold could
 *       have delayed is then known to have gone with its QP), its data as sent (D4);
 *  (S4) srqs_live of each ctx is the model's count, their sum the sim's qsm_sim_stats.srqs;
 *       an SRQ goes when its device leaves the registry (its DESTROY edge), with what is still
 *       posted; at the end none is left;
 *  (S5) LAST_WQE comes only to a queue of the SRQ class, always as an edge, and before its
 *       QP's DRAINED (unless a hold may have reordered them).
 */

#define MS 1000000ull

#define DEFAULT_SEED 20261130ull

#define DEFAULT_STEPS 50000u

#define MAX_LIVE_ACTIVE 80      /* per ctx: with their passive peers, > 100 queues at once */

#define MAX_LISTENERS 6

#define NCTX 2

#define NDEV 2

extern uint64_t seed, rng;
extern unsigned step_no, nsteps;
extern char violation[512];
void __attribute__((format(printf, 1, 2))) model_fail(const char *fmt, ...);
void __attribute__((format(printf, 1, 2))) violate(const char *fmt, ...);
void world_fail(const char *msg);

#define CHECK(cond, ...) do { if (!(cond)) model_fail(__VA_ARGS__); } while (0)

uint64_t rnd(void);
uint64_t mix(uint64_t z);
unsigned below(unsigned n);
bool chance(unsigned pct);
extern struct qsm_sim *sim;
extern struct qsm_fabric *fab[NCTX];
extern struct qsm_ctx *ctx[NCTX];
extern struct harness world;
extern const char *const dev_name[NDEV];
extern const char *const dev_addr[NDEV];
extern const uint16_t ports[];
extern struct qsm_timeouts listen_timeouts;
extern uint32_t hold_epoch;
extern bool hold_armed;
extern bool strict;
extern bool enomem_injected;
extern unsigned enomem_settle;
extern unsigned n_settles;
int sim_release(void);

/* ---- the data path's model ---- */

#define SLOT 64                 /* the largest message, write, read and receive */

#define NRSLOT 10               /* receive slots (more than max_recv_wr: -ENOMEM is tried) */

#define NSSLOT 8                /* send / write sources: a list of LIST_MAX has one each */

#define NWSLOT 8                /* remotely writable slots */

#define NLSLOT 4                /* read landing slots; the last one for unsignaled reads */

#define RECV_OFF 0u

#define SEND_OFF (RECV_OFF + NRSLOT * SLOT)

#define RW_OFF (SEND_OFF + NSSLOT * SLOT)

#define RW_LEN (NWSLOT * SLOT)

#define RO_OFF (RW_OFF + RW_LEN)

#define RO_LEN 256u

#define RD_OFF (RO_OFF + RO_LEN)

#define BUF_LEN (RD_OFF + NLSLOT * SLOT)

#define LIST_MAX 6              /* the longest list of WRs one post call takes */

#define HDR 16u                 /* magic, length, message sequence number */

#define MSG_MAGIC 0x51534d44u

#define POISON 0xee

enum { MR_LOCAL, MR_RW, MR_RO, NMR };

struct mr_spec {
	uint32_t off, len;
	int access;
};

extern const struct mr_spec mr_spec[NMR];

enum wr_kind { K_RECV, K_SEND, K_WRITE, K_READ, K_COUNT };

extern const char *const kind_names[];
extern const enum qsm_wr_opcode kind_op[];

enum wr_state {
	W_NEVER,                /* its post failed */
	W_OUT,                  /* posted, no completion yet */
	W_DONE,                 /* completed */
	W_GONE_QP,              /* its QP was destroyed first: no completion, ever */
	W_GONE_DRAINED,         /* its QP reached DRAINED first */
	W_GONE_DEAD,            /* its queue was destroyed, aborted or released first */
};

extern const char *const wr_state_names[];

struct wrec {
	uint64_t seq;           /* send / write: the message */
	uint32_t gen;           /* the queue's QP generation at the post */
	uint32_t hold_epoch;
	uint32_t len;           /* bytes sent / written / read; a receive's capacity */
	uint32_t toff;          /* write / read: offset in the target's area */
	int32_t target;         /* write / read: the rec whose memory the rkey names, or -1 */
	uint8_t kind, st, nsge;
	uint8_t op;             /* its opcode (enum qsm_wr_opcode), WITH_IMM ones included */
	int8_t slot;            /* receive / read landing slot, or -1 */
	bool signaled, required, must_fail, in_err, hold_armed, check;
	bool inl;               /* QSM_POST_INLINE: no lkey needed */
	bool passed;            /* a later WR of its work queue completed: none may come for it */
	bool sq_held;           /* holds a send queue slot: until its completion, or a later one's */
	bool local_ok;          /* its SGEs are covered by the queue's valid local MR */
	uint32_t lkey;          /* the lkey of its SGEs (0: none) */
	struct qsm_sge sge[2];  /* receive / read: where the data lands */
};

/* Messages (sends and writes) by sequence number. */
struct msg {
	int32_t sender;
	uint32_t len;
	uint8_t kind;           /* K_SEND, K_WRITE, or K_COUNT: never posted */
	uint8_t imm;            /* QSM_WR_SEND_WITH_IMM / QSM_WR_RDMA_WRITE_WITH_IMM: imm_data carries it */
	uint8_t received;
};

extern struct msg *msgs;
extern unsigned nmsgs, msgs_cap;

/* Per class: the QP caps it asks for (as the runtime resolves them through super). */
struct cinfo {
	const struct qsm_class *cls;
	uint32_t max_recv_wr, send_sge, recv_sge, max_send_wr, max_inline;
	bool srq;               /* its receives go to its SRQ */
};

struct data_stats {
	unsigned posted[K_COUNT], post_calls, enotconn, einval, enobufs, sq_full, must_fail;
	unsigned lists, list_wrs, list_einval, list_enobufs, list_enobufs_strict, list_enotconn, imm_posted, inline_posted;
	unsigned imm_checked, order_checked;
	unsigned completions, ok, flushed, errors, discarded, drained, drained_strict;
	unsigned lost;           /* WRs whose QP went with no completion for them: 0 */
	unsigned recv_checked, recv_empty, read_checked, write_checked, regs, deregs, enodev_tolerated;
	unsigned srq_posts, srq_einval, srq_enodev, srq_enobufs, srq_enobufs_strict, srq_nokeys, srq_conn_einval;
	unsigned srq_made, srq_remade, srq_gone, srq_limit_lows, srq_limit_removing, srq_completions, srq_ok;
	unsigned srq_checked, srq_lost, srq_probes, srq_probe_lost, srq_last_wqe, srq_drained;
};

extern struct data_stats ds;
extern uint64_t compl_seen[NCTX];

/* ---- tracing ---- */

struct tally {
	uint64_t records, fabric;
};

extern struct tally tally[NCTX];

struct rec;

extern struct rec **by_serial[NCTX];
extern unsigned by_serial_cap[NCTX];

struct pending_event {
	struct rec *r;
	int event;
};

extern struct pending_event pend;
void drained(struct rec *r, int status);
void *grow_to(void *p, unsigned *cap, size_t elem, unsigned first);
void *grow(void *p, unsigned *cap, size_t elem);
void tracer(const struct qsm_trace_record *t, void *arg);

/* ---- queues the model knows ---- */

struct rec {
	struct qsm_conn *q;
	int c;                      /* its ctx */
	unsigned idx;               /* in all[] */
	bool passive;
	bool gone;                  /* destroyed, aborted, released: no callback may follow */
	unsigned live_idx;
	uint64_t entered_ns;        /* arrival in the current state */
	struct qsm_timeouts timeouts;
	/* behaviour */
	bool auto_ready;
	bool defer;                 /* passive: the request handler decides nothing */
	unsigned abort_pm, destroy_pm, downcall_pm, data_pm;   /* per mille of callbacks */
	unsigned reject_pct;
	bool decided;               /* passive: accept or reject returned 0 once */
	bool lazy_mr;               /* registers later, not in qp_ready */
	bool repost;                /* posts a receive for each one completed */
	unsigned init_recvs;
	/* data path */
	const struct cinfo *ci;
	uint8_t *buf;               /* freed two settles after the queue is gone */
	struct qsm_mr *mr[NMR];
	uint32_t rkey[NMR], old_rkey[NMR], lkey[NMR];
	struct wrec *wr;
	unsigned nwr, wr_cap, wr_scan;   /* below wr_scan nothing is outstanding */
	unsigned n_out_recv;
	unsigned n_sq_held;     /* send queue slots its current QP's WRs hold (D1: -ENOBUFS) */
	uint32_t gen;               /* QP generation: qp_ready counts them */
	uint32_t err_gen;           /* the generation that had an error completion */
	unsigned err_wi;            /* its first one */
	int err_status;
	bool qp_up;                 /* the model believes gen's QP exists */
	bool in_qp_ready;
	bool expect_mrs_dead;       /* device_removed ran: every MR is deregistered now */
	int32_t peer;               /* the rec at the other end (private data), or -1 */
	uint32_t peer_gen;          /* active: the generation it was learnt for */
	uint64_t rw_last[NWSLOT];   /* the last write posted to each writable slot */
	uint16_t rslots;            /* receive slots in use */
	uint8_t lslots;             /* read landing slots in use */
	unsigned send_rr;
	unsigned gone_at;           /* settles done when it went */
	struct msrq *msq;           /* the SRQ class: its QP's SRQ */
	uint32_t last_wqe_gen;      /* the QP generation that reported LAST_WQE */
	uint32_t qp_hold_epoch;     /* at its QP's creation */
	bool qp_hold_armed;
};

extern struct rec **all;
extern unsigned nall, all_cap;
extern struct rec **live;
extern unsigned nlive, live_cap, peak_live;
extern unsigned n_active_made, n_passive_made, n_listeners_made;
extern bool quiet;

struct lst {
	struct qsm_listener *l;
	int c;
};

extern struct lst listeners[MAX_LISTENERS];
extern unsigned nlisteners;
uint8_t ro_byte(unsigned idx, uint32_t j);
struct rec *rec_new(struct qsm_conn *q, int c, bool passive);
void wr_finish(struct rec *r, struct wrec *w, enum wr_state st);
void discard(struct rec *r, enum wr_state st);
void mark_gone(struct rec *r);
void observe(struct rec *r);
bool tainted(const struct wrec *w);
void drained(struct rec *r, int status);
int ctx_index(struct qsm_ctx *c);
enum qsm_machine machine_of(const struct rec *r);
bool has_edge(const struct rec *r, int event);
void do_connect(struct rec *r);
void do_disconnect(struct rec *r);
void do_ready(struct rec *r);
void put_tag(uint8_t *p, char side, unsigned idx);
int get_tag(const struct qsm_event_info *ev, char side);
void do_decide(struct rec *r, bool accept);
void do_destroy(struct rec *r);
void random_downcall(struct rec *r);
bool all_devices_up(void);
int sim_qp(const struct rec *r);
bool mr_ok(const struct rec *r, int m);
void reg_one(struct rec *r, int m);
void dereg_one(struct rec *r, int m);
void ensure_mrs(struct rec *r);
void op_mr(struct rec *r);
bool drain_started(const struct rec *r);
bool doc_no_qp(const struct rec *r);

#define MAYBE_ENOBUFS 1

/* A send, write or read being built, alone or as one WR of a list (D1, D7). */
struct spost {
	unsigned wi;            /* its wrec */
	uint64_t wr_id, raddr;
	uint32_t rkey, imm;
	unsigned flags;
	int nsge, slot;         /* slot: the read landing slot it took, or -1 */
	bool door_bad;          /* -EINVAL at the door: flags, SGE count (QSM_MAX_SGE, the class's
	                           caps), opcode, INLINE on a READ or beyond max_inline_data */
	struct qsm_sge sge[QSM_MAX_SGE + 1];
};

extern bool settled;
int expect_post(struct rec *r, int kind, int nsge, bool bad_flags, int *sq);
int expect_list(struct rec *r, const struct spost *p, unsigned n, int *sq);
struct wrec *wr_add(struct rec *r, int kind, uint64_t *wr_id);
void wr_init(struct wrec *w, int kind, uint32_t gen);
bool post_ok(struct rec *r, int kind, unsigned n, int want, int got, int sq, int nsge);
void post_took(struct rec *r, struct wrec *w, int sq);
bool posted(struct rec *r, struct wrec *w, int want, int got, int sq, int nsge);
int free_slot(unsigned used, int n);
int lay_out(struct qsm_sge *sge, uint8_t *base, uint32_t len, uint32_t lkey, uint32_t max_sge);
void gather(const struct qsm_sge *sge, int nsge, uint8_t *out, uint32_t len);
void scatter(const struct qsm_sge *sge, int nsge, const uint8_t *in);
void build_msg(uint8_t *out, uint64_t seq, uint32_t len);
uint64_t new_msg(void);
int odd_nsge(const struct rec *r, int kind, int nsge, struct qsm_sge *sge);
void op_recv(struct rec *r);
unsigned post_flags(struct wrec *w, bool *bad_flags, bool read);
bool credit(const struct rec *r, unsigned used);
bool prep_send(struct rec *r, bool force, bool in_list, struct spost *p);
void op_send(struct rec *r, bool force);
struct rec *rdma_target(struct rec *r);
void prep_rdma(struct rec *r, bool write, bool in_list, struct spost *p);
void post_done(struct rec *r, struct spost *p, bool ok);
void post_one(struct rec *r, struct spost *p);
void op_rdma(struct rec *r, bool write);
void op_list(struct rec *r, bool plain_writes);
void data_op(struct rec *r);
void qp_created(struct rec *r);
void check_recv_data(struct rec *r, const struct wrec *w, const struct qsm_wc *wc, unsigned wi);
void check_recv_imm(struct rec *r, const struct wrec *w, const struct qsm_wc *wc, unsigned wi);
void check_order(struct rec *r, struct wrec *w, unsigned wi);
void check_rdma_data(const struct wrec *w, const struct qsm_wc *wc, unsigned wi);
void check_completion(struct rec *r, const struct qsm_wc *wc);

/* ---- the class: every slot, every callback checked ---- */

enum cb_kind { CB_ENTER, CB_EXIT, CB_EVENT, CB_UNEXPECTED, CB_DEVICE_REMOVED, CB_QP_READY, CB_RELEASE,
	       CB_COMPLETION };

extern const char *const cb_names[];
struct rec *cb(struct qsm_conn *q, enum cb_kind k);
uint32_t state_timeout_ms(const struct rec *r, int s);
void learn_peer(struct rec *r, const struct qsm_event_info *ev);
int handle(struct qsm_conn *q, const struct qsm_event_info *ev, enum cb_kind k);

int h_enter(struct qsm_conn *q, const struct qsm_event_info *ev);
int h_exit(struct qsm_conn *q, const struct qsm_event_info *ev);
int h_event(struct qsm_conn *q, const struct qsm_event_info *ev);
int h_unexpected(struct qsm_conn *q, const struct qsm_event_info *ev);
int h_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev);
int h_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev);
int h_completion(struct qsm_conn *q, const struct qsm_wc *wc);
void h_release(struct qsm_conn *q);

#define H { .enter = h_enter, .exit = h_exit, .on_event = h_event }

extern const struct qsm_class model_class;
extern const struct qsm_class model_sub;
extern const struct qsm_class model_narrow;
extern const struct qsm_class model_srq;
#define NCLASS 4
extern struct cinfo cinfo[NCLASS];

/* ---- the SRQ class's shared receive queues (srq.c) ---- */

#define SRQ_MAX_WR 12
#define SRQ_LIMIT 9
#define SRQ_MAX_SGE 2
#define NSRQBUF 24              /* receive buffers per device per ctx (more than max_wr) */

struct msrq {
	struct qsm_srq *s;          /* NULL: none on that device of that ctx */
	int c, d;
	unsigned gen;               /* SRQs made there */
	bool removing;              /* its device is REMOVING: posts are -ENODEV */
	bool dying;                 /* a QP on it went since the last settle */
	unsigned pending_low;       /* srq_low calls of its limit, before the SRQ_LIMIT record */
	struct wrec *rv;            /* its receives, post order (wr_id: the index) */
	unsigned nrv, cap, scan;    /* below scan none is outstanding */
	unsigned n_out;
	unsigned loss_mark;         /* outstanding receives below it may have gone with a QP */
	uint32_t used;              /* buffer slots */
};

extern struct msrq msrq[NCTX][NDEV];
struct msrq *msrq_of(int c, const struct qsm_srq *s);
void srq_world_new(void);
void srq_world_end(void);
void srq_world_free(void);
unsigned srq_pool_mrs(void);
unsigned pool_reg_failures_bound(void);
void h_srq_low(struct qsm_srq *s);
void srq_trace(int c, const struct qsm_trace_record *t);
void srq_qp_gone(struct rec *r);
void srq_qp_created(struct rec *r);
void srq_op_recv(struct rec *r);
bool srq_credit(const struct rec *p, unsigned used);
void srq_completion(struct rec *r, const struct qsm_wc *wc);
void srq_settled(void);
void srq_check_accounting(void);
void srq_event(struct rec *r, const struct qsm_event_info *ev, bool unexpected);
void srq_drained(struct rec *r);
int dispatch(int c, unsigned budget);
void sockaddr_of(struct sockaddr_in *sa, const char *ip, uint16_t port);
uint32_t some_ms(unsigned pct_set, unsigned lo, unsigned hi);
void step_new_queue(void);
void step_new_listener_at(const char *ip, uint16_t port);
void step_new_listener(void);
void step_destroy_listener_at(unsigned i);
void step_destroy_listener(void);
struct rec *some_live(bool passive_only);
struct rec *some_data_rec(void);
extern const enum qsm_sim_fault armed_faults[];
#define N_ARMED_FAULTS 10       /* every fault but HOLD */
extern unsigned n_faults, n_removals, n_adds, n_fatals;
void step_fault(enum qsm_sim_fault f, unsigned n);
void step_device_remove(int d);
void step_device_add(int d);
void step_qp_fatal(struct rec *r);
void check_settled(void);
void quiesce_check(void);
void one_step(void);
void check_accounting(void);
void check_queue(struct rec *r);
void check_all(void);
uint64_t env_u64(const char *name, uint64_t def);
void world_new(void);
void world_end(void);
void world_free(void);

/* alloc.c (tests/check_model_alloc only): every nth allocation of the library while it
 * dispatches fails (0: none); what it saw and failed. */
void model_alloc_every(unsigned n);
extern unsigned long alloc_seen, alloc_failed;

#endif
