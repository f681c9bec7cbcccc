/* rdma-qsm: the runtime.  A ctx drives queues (connections), listeners and devices through
 * the generated machines and calls the ULP's per-state handlers; it never owns the event loop. */
#ifndef QSM_CTX_H
#define QSM_CTX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include <qsm/data.h>
#include <qsm/events.h>
#include <qsm/machine.h>

#ifdef __cplusplus
extern "C" {
#endif

struct qsm_ctx;
struct qsm_conn;
struct qsm_listener;
struct qsm_fabric;

/*
 * Lifetime rules (see qsm(7)):
 * - One ctx per thread.  Every callback runs inside qsm_ctx_dispatch() of the queue's ctx,
 *   one at a time, so callbacks of one queue are serialised by construction.
 * - A downcall (connect, accept, disconnect, ready, destroy) never calls back from inside
 *   itself: the event it causes is queued and dispatched next.
 * - A handler returning non-zero destroys its queue: the queue takes its ABORT edge and no
 *   callback is made for it ever again.  So does qsm_conn_destroy(), from anywhere,
 *   including the queue's own handler (memory is freed after that handler returns).
 * - Every event reaches a handler of the queue's class (or of its super classes, ending in
 *   the base class), or the `unexpected` handler when the machine has no edge for it.
 */

/*
 * Growing without breaking (the ABI, as verbs' _ex structs keep it; see NEWS):
 * - Every struct you fill for the library (qsm_ctx_opts, qsm_conn_opts, qsm_listener_opts,
 *   qsm_class) starts with `comp_mask`.  Leave it 0 for the fields of this version (an
 *   initialiser that names its fields does).  A field added later goes at the end of its
 *   struct, or into the `reserved` room of the structs they hold (qsm_reconnect_policy,
 *   qsm_timeouts, qsm_qp_caps, qsm_srq_caps), with a bit of its own in that comp_mask: the
 *   library reads a later field only when the bit says the caller has it, so a binary built
 *   against this version runs unchanged on a later library.  A bit the library does not know
 *   (a binary built against a newer one) is refused with -EOPNOTSUPP, never read blind.
 *   Zero `reserved` (initialisers do); this version reads none of it.
 * - What the library fills in for you takes your size (qsm_ctx_counters()) or keeps room of
 *   its own (qsm_state_info, qsm_verbs): fields are only ever appended, or take that room.
 * - What the library hands to your callbacks (qsm_event_info, qsm_wc, qsm_trace_record) is
 *   the library's memory: later fields are appended, so read only what your header declares.
 * - Enum values never change meaning; new states, events and actions take new numbers.
 *   qsm_class keeps room for QSM_CLASS_STATE_ROOM states per machine.
 * - A change that breaks a built binary anyway moves the soname (libqsm.so.N).
 */

/* What a handler is told about the event that ran it. */
struct qsm_event_info {
	int event;                  /* QSM_EV_* */
	int status;                 /* rdma_cm status (negative errno or reject reason), or 0 */
	int from;                   /* state before the edge */
	int to;                     /* state after it (== from for a self-loop or unexpected) */
	const void *private_data;   /* CONNECT_REQUEST, ESTABLISHED, REJECTED: peer's bytes */
	size_t private_data_len;
};

typedef int (*qsm_handler_fn)(struct qsm_conn *q, const struct qsm_event_info *ev);

/* Per-state hooks; an empty slot falls back to the super class. */
struct qsm_state_handlers {
	qsm_handler_fn enter;       /* after the edge's actions, on arrival (not on self-loops) */
	qsm_handler_fn exit;        /* before the edge's actions, on leaving */
	qsm_handler_fn on_event;    /* every event that has an edge here, before exit */
};

/*
 * Taken from the first class up the super chain that sets max_send_wr or max_recv_wr.
 * max_inline_data goes as is into the real fabric's rdma_create_qp() caps (the device may
 * refuse it); both fabrics refuse a QSM_POST_INLINE send beyond it with -EINVAL.
 * An SGE count above QSM_MAX_SGE (here or in qsm_srq_caps.max_sge, in any class up the
 * chain) cannot be honoured: qsm_conn_new() and qsm_listener_new() refuse the class, -EINVAL.
 */
/* max_sge 0 means 1; limit 0: srq_low only when the SRQ is made. */
struct qsm_srq_caps {
	uint32_t max_wr, max_sge, limit;
	uint32_t reserved[1];       /* zero: room for a later field (see "Growing" above) */
};

struct qsm_srq;

struct qsm_qp_caps {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
	uint32_t reserved[3];       /* zero: room for a later field (see "Growing" above) */
};

/* Room for the states of the active and passive machines in a class: a new state takes a new
 * number within it, so a class built before keeps its layout.  At least QSM_CM_STATE_COUNT
 * and QSM_ACCEPT_STATE_COUNT (the library's build checks). */
#define QSM_CLASS_STATE_ROOM 16

/*
 * A class: the ULP's "subclass" of the library's base class.  Static and const; the
 * library never writes to it.  Slots left NULL are looked up in `super`, then in the
 * base class (qsm_base_class), whose defaults are correct for every edge:
 *   - CONNECTED.enter: calls qsm_conn_ready() (no ULP handshake)
 *   - passive REQUESTED.enter: accepts with no private data
 *   - unexpected: counts the event and traces it, returns 0
 *   - device_removed: nothing (the library releases everything on the device)
 */
struct qsm_class {
	uint32_t comp_mask;                                /* 0 (see "Growing" above) */
	const char *name;
	const struct qsm_class *super;
	size_t priv_size;                                  /* bytes of qsm_conn_priv(); 0 ok */
	struct qsm_state_handlers active[QSM_CLASS_STATE_ROOM];   /* by enum qsm_cm_state */
	struct qsm_state_handlers passive[QSM_CLASS_STATE_ROOM];  /* by enum qsm_accept_state */
	qsm_handler_fn unexpected;
	qsm_handler_fn device_removed;                     /* drop your MRs on the device here */
	/* The QP exists (INIT) and the connect / accept is not sent yet: post receives and
	 * register memory here, so that nothing the peer sends first can find no receive.
	 * Non-zero destroys the queue (the connect / accept is not sent). */
	qsm_handler_fn qp_ready;
	/* Every receive and signaled send/write/read (qsm/data.h); non-zero destroys the queue. */
	int (*completion)(struct qsm_conn *q, const struct qsm_wc *wc);
	/* The last call of a queue that closed by itself (disconnect, reject, a passive loss); not
	 * made after qsm_conn_destroy() or a non-zero return: then you cleaned up already. */
	void (*release)(struct qsm_conn *q);
	struct qsm_qp_caps qp;                             /* 0 = library default */
	/* max_wr > 0: the class's queues take their receives from one SRQ per device (qsm/data.h;
	 * qp.max_recv_wr and max_recv_sge are then unused).  Taken from the first class up the
	 * super chain that sets max_wr, as qp is. */
	struct qsm_srq_caps srq;
	/* The SRQ needs receives: it was just made (none posted), or fewer than srq.limit are. */
	void (*srq_low)(struct qsm_srq *s);
};

extern const struct qsm_class qsm_base_class;

struct qsm_reconnect_policy {
	/* Delays take the whole uint32_t range: timers are 64-bit, jitter included. */
	uint32_t initial_delay_ms;  /* first retry after this; 0 = 100 ms */
	uint32_t max_delay_ms;      /* backoff cap; 0 = 10 s */
	uint32_t multiplier_pct;    /* next = prev * pct / 100; 0 = 200 */
	uint32_t jitter_pct;        /* +- this % of each delay, from the ctx's seeded PRNG */
	uint32_t max_attempts;      /* 0 = unlimited; GIVE_UP after this many failed attempts */
	uint32_t loss_timeout_ms;   /* 0 = never; GIVE_UP this long after the connection was lost */
	uint32_t max_exhausted;     /* GIVE_UP after this many attempts in a row failed for lack of
	                               a resource (-ENOMEM, -ENOSPC, -ENOBUFS, -EMFILE, -ENFILE:
	                               CQ, QP, MR, memory); 0 = 8; UINT32_MAX = never.  GIVE_UP
	                               carries the last failure's errno in its status. */
	uint32_t reserved[5];       /* zero: room for a later field (see "Growing" above) */
};

/* Per-step timeouts; 0 = default.  Each is at most QSM_TIMEOUT_MAX_MS: qsm_conn_new() and
 * qsm_listener_new() refuse more with -EINVAL, since resolve_ms goes to rdma_resolve_addr()'s
 * int timeout_ms and its state times out 1000 ms later, both of which must fit an int. */
#define QSM_TIMEOUT_MAX_MS 2147482647u   /* INT_MAX - 1000: about 24.8 days */
struct qsm_timeouts {
	uint32_t resolve_ms;        /* addr and route resolution (default 2000) */
	uint32_t connect_ms;        /* CONNECTING / ACCEPTING (default 5000; never before the CM's own end) */
	uint32_t handshake_ms;      /* CONNECTED until READY (default 0 = none) */
	uint32_t disconnect_ms;     /* DISCONNECTING (default 2000; never before the CM's own end) */
	uint32_t drain_ms;          /* DRAINING / CLOSING (default 2000) */
	uint32_t request_ms;        /* passive REQUESTED undecided (default 5000) */
	uint32_t keepalive_ms;      /* LIVE: a probe of the peer (a zero-length RDMA WRITE) this
	                               long after LIVE and after each probe; a peer that vanished
	                               (no DREQ: its host died, the wire was cut) fails it after the
	                               RC retries, as WC_ERROR.  Read only with QSM_OPTS_KEEPALIVE
	                               in the opts' comp_mask (after 0.2.0); 0 = none (default) */
	uint32_t reserved[1];       /* zero: room for a later field (see "Growing" above) */
};
/* comp_mask bit of qsm_conn_opts and qsm_listener_opts: their timeouts.keepalive_ms is set */
#define QSM_OPTS_KEEPALIVE (1u << 0)

/* Room for the events in qsm_counters: a new event takes a new number within it, so the
 * counters after it keep their offsets.  At least QSM_EV_LIMIT (the library's build checks). */
#define QSM_COUNTERS_EVENT_ROOM 128

/* Filled by qsm_ctx_counters() up to the size you pass; later counters are appended. */
struct qsm_counters {
	uint64_t events[QSM_COUNTERS_EVENT_ROOM];   /* dispatched, by event (QSM_EV_*) */
	uint64_t fabric_events;          /* taken from the fabric (each acked at once) */
	uint64_t popped;                 /* taken from the ctx's FIFO (or a completion handed
	                                    straight from the fabric): dispatched + dropped */
	uint64_t dispatched;             /* all events dispatched to a machine */
	uint64_t transitions;            /* edges taken (self-loops included) */
	uint64_t unexpected;             /* events with no edge */
	uint64_t dropped;                /* queued events for an object already destroyed, or
	                                    for an id it had let go of */
	uint64_t orphans;                /* fabric events no object owned (a request whose
	                                    listener is gone: rejected), never queued; never
	                                    for memory: each object keeps room for its events */
	uint64_t reconnects;             /* RETRY edges taken */
	uint64_t device_removals;        /* DEVICE_REMOVAL edges taken */
	uint64_t aborts;                 /* ABORT edges taken because a handler returned
	                                    non-zero (dispatched at once, not through the FIFO,
	                                    so popped + aborts + device_closes == dispatched +
	                                    dropped + completions, and fabric_events == events
	                                    queued from the fabric + orphans) */
	uint64_t action_errors;          /* actions that failed and were fed back as events */
	uint64_t completions;            /* work completions handed to completion handlers */
	uint64_t queues_live;            /* queues not yet freed */
	uint64_t devices_live;           /* devices the registry holds */
	uint64_t device_closes;          /* registry entries closed (their last queue let go,
	                                    or the ctx went): the device machine's DESTROY,
	                                    dispatched at once like an ABORT */
	uint64_t fifo_bytes;             /* memory the FIFO holds now: it doubles in a burst and
	                                    shrinks back once a dispatch pass empties it */
	uint64_t exhausted;              /* reconnect attempts that failed for lack of a resource
	                                    (see max_exhausted) */
	uint64_t srqs_live;              /* shared receive queues the registry's devices hold */
	uint64_t stale_retries;          /* fast retries after a stale-connection reject
	                                    (REJECTED_STALE), not counted as attempts */
	uint64_t handed_off;             /* requests a listener of this ctx handed to another
	                                    ctx (qsm_listener_spread) */
	uint64_t adopted;                /* requests handed to this ctx by another's listener:
	                                    each a passive queue made here, or refused */
};

struct qsm_trace_record {
	uint64_t time_ns;
	const char *kind;                /* "conn", "passive", "listener", "device" */
	const char *class_name;
	uint32_t id;                     /* per-ctx serial number of the object */
	const char *from, *event, *to;   /* to == NULL: unexpected */
	int status;
};
typedef void (*qsm_trace_fn)(const struct qsm_trace_record *r, void *arg);

struct qsm_ctx_opts {
	uint32_t comp_mask;              /* 0 (see "Growing" above) */
	struct qsm_fabric *fabric;       /* required; the ctx owns it from now on */
	uint64_t seed;                   /* PRNG for jitter; 0 = fixed default */
	/* Clock for timers (CLOCK_MONOTONIC if NULL); tests use a virtual one. */
	uint64_t (*now_ns)(void *arg);
	void *now_arg;
};

int qsm_ctx_new(const struct qsm_ctx_opts *opts, struct qsm_ctx **ret);
/* Destroys every queue and listener without callbacks, then the fabric. NULL is fine. */
void qsm_ctx_free(struct qsm_ctx *ctx);
/* One fd to poll for reading: the fabric's events and the ctx's timers. */
int qsm_ctx_fd(struct qsm_ctx *ctx);
/* Dispatches at most @budget events (0 = 64); never blocks. Returns how many, or -errno. */
int qsm_ctx_dispatch(struct qsm_ctx *ctx, unsigned int budget);
/* Milliseconds until the next timer (-1: none, 0: work is pending now), at most INT_MAX:
 * a timer further out wakes the caller early, and the next call reports what is left. */
int qsm_ctx_next_timeout_ms(struct qsm_ctx *ctx);
/* Polls and dispatches until qsm_ctx_stop() (0) or until @timeout_ms ran out (-ETIMEDOUT; it
 * dispatches at least once, so 0 is a non-blocking pass); -1 waits forever. */
int qsm_ctx_run(struct qsm_ctx *ctx, int timeout_ms);
void qsm_ctx_stop(struct qsm_ctx *ctx);
/* From any thread: fn(ctx, arg, 0) runs on ctx's own thread, at the start of its next dispatch
 * pass (before the fabric's events; not counted in the budget), inside qsm_ctx_dispatch(), where fn may
 * call the library on ctx's objects as a handler does; ctx's fd wakes for it.  Calls run in the
 * order they were made.  A ctx freed first calls fn(ctx, arg, -ECANCELED) from qsm_ctx_free()
 * (let arg go; call nothing on ctx).  0, -EINVAL, -ENOMEM.  ctx must outlive the call itself.
 * qsm_ctx_call(3). */
typedef void (*qsm_call_fn)(struct qsm_ctx *ctx, void *arg, int status);
int qsm_ctx_call(struct qsm_ctx *ctx, qsm_call_fn fn, void *arg);
/* Fills @out up to @size bytes (sizeof(*out): the counters your header declares), zeroes
 * what this library has no counter for.  -EINVAL for a size below this version's struct. */
int qsm_ctx_counters(struct qsm_ctx *ctx, struct qsm_counters *out, size_t size);
/* Trace every transition to @fn (NULL: off).  QSM_TRACE=1 in the environment prints to stderr. */
int qsm_ctx_set_trace(struct qsm_ctx *ctx, qsm_trace_fn fn, void *arg);
/* The ctx's machines as Graphviz dot: its objects in each state now, the times it took each
 * edge (never: dashed).  0, -EINVAL, -EIO.  QSM_COVERAGE=FILE appends the edges taken to FILE
 * when the ctx is freed (tools/qsm-cover). */
int qsm_ctx_write_dot(struct qsm_ctx *ctx, FILE *out);

struct qsm_conn_opts {
	uint32_t comp_mask;              /* 0 (see "Growing" above) */
	const struct qsm_class *cls;     /* required */
	const struct sockaddr *dst;      /* required */
	const struct sockaddr *src;      /* optional */
	struct qsm_reconnect_policy policy;
	struct qsm_timeouts timeouts;
	const void *private_data;        /* sent with every connect; at most 56 bytes */
	size_t private_data_len;
	void *user;                      /* qsm_conn_user() */
};

/* A new active queue in IDLE.  Freed by qsm_conn_destroy() or a handler's non-zero return. */
int qsm_conn_new(struct qsm_ctx *ctx, const struct qsm_conn_opts *opts, struct qsm_conn **ret);
int qsm_conn_connect(struct qsm_conn *q);
int qsm_conn_disconnect(struct qsm_conn *q);
int qsm_conn_ready(struct qsm_conn *q);
/* Passive queues, from the REQUESTED state: pdata at most 196 (accept) / 148 (reject) bytes. */
int qsm_conn_accept(struct qsm_conn *q, const void *pdata, size_t len);
int qsm_conn_reject(struct qsm_conn *q, const void *pdata, size_t len);
/* No callback for @q after this returns; safe inside @q's own handler. */
int qsm_conn_destroy(struct qsm_conn *q);

void *qsm_conn_priv(struct qsm_conn *q);
void *qsm_conn_user(struct qsm_conn *q);
struct qsm_ctx *qsm_conn_ctx(struct qsm_conn *q);
int qsm_conn_is_passive(struct qsm_conn *q);
/* State in the queue's machine (enum qsm_cm_state, or enum qsm_accept_state if passive). */
int qsm_conn_state(struct qsm_conn *q);
const char *qsm_conn_state_name(struct qsm_conn *q);
int qsm_conn_qp_state(struct qsm_conn *q);          /* enum qsm_qp_state; -ENOENT: no QP */
int qsm_conn_attempts(struct qsm_conn *q);          /* failed attempts since last ESTABLISHED */
/* RDMA READs q may have in flight (its negotiated initiator depth); -ENOTCONN: not known yet */
int qsm_conn_read_depth(struct qsm_conn *q);
/* Active queues: the address (and source, NULL: none) of the next connect attempt, e.g. another
 * path's after DEVICE_REMOVAL; the attempt under way keeps its own.  Any state, handlers too. */
int qsm_conn_set_dst(struct qsm_conn *q, const struct sockaddr *dst, const struct sockaddr *src);
/* The depths of q's next QP (a passive queue's at its accept, an active queue's at each attempt),
 * instead of its class's qp caps (0: the class's); e.g. from the queue size a request asks for.
 * Any state, handlers too.  At most QSM_MAX_QP_DEPTH each; the device may take less or refuse. */
#define QSM_MAX_QP_DEPTH (1u << 20)
int qsm_conn_set_qp_depth(struct qsm_conn *q, uint32_t max_send_wr, uint32_t max_recv_wr);

struct qsm_listener_opts {
	uint32_t comp_mask;              /* 0 (see "Growing" above) */
	const struct sockaddr *addr;     /* required; a device address or the wildcard */
	const struct qsm_class *cls;     /* class of the passive queues; required */
	int backlog;                     /* 0 = 128 */
	struct qsm_reconnect_policy relisten;  /* delays between listen attempts after removal */
	struct qsm_timeouts timeouts;    /* for the passive queues */
	void *user;
};

/* Binds and listens now (errors returned here), then LISTENING once dispatched. */
int qsm_listener_new(struct qsm_ctx *ctx, const struct qsm_listener_opts *opts,
		     struct qsm_listener **ret);
int qsm_listener_destroy(struct qsm_listener *l);
/* Several ctxs, one per thread (SPDK's poll groups): each request l takes from now on goes to
 * the next of ctxs[0..n) in turn, and its passive queue lives there -- its REQUESTED and every
 * callback after on that ctx's thread -- as if that ctx had listened (l's ctx may be one of
 * them; n 0: l's own again).  Each ctx must outlive l.  On l's thread; -EOPNOTSUPP for a ctx of
 * another fabric backend.  qsm_listener_spread(3). */
#define QSM_MAX_SPREAD 1024
int qsm_listener_spread(struct qsm_listener *l, struct qsm_ctx *const *ctxs, unsigned n);
int qsm_listener_state(struct qsm_listener *l);    /* enum qsm_listener_state */
void *qsm_listener_user(struct qsm_listener *l);

/*
 * The constructors' arguments type-checked: C only warns when a pointer to one struct goes
 * where a pointer to another is expected, so a call with opts and ret swapped (as 0.1.0
 * swapped them) compiled and crashed.  With GCC and Clang these calls make that an error;
 * C++ refuses by itself.  Arguments pass through as they are (compound literals too); a
 * call through (qsm_ctx_new)(...) or a function pointer reaches the same function unchecked.
 */
#if defined(__GNUC__) && !defined(__cplusplus)
#define QSM_STRICT_CALL_(call) (__extension__ ({ \
	_Pragma("GCC diagnostic push") \
	_Pragma("GCC diagnostic error \"-Wincompatible-pointer-types\"") \
	int qsm_strict_r_ = (call); \
	_Pragma("GCC diagnostic pop") \
	qsm_strict_r_; }))
#define qsm_ctx_new(...) QSM_STRICT_CALL_(qsm_ctx_new(__VA_ARGS__))
#define qsm_conn_new(...) QSM_STRICT_CALL_(qsm_conn_new(__VA_ARGS__))
#define qsm_listener_new(...) QSM_STRICT_CALL_(qsm_listener_new(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif
