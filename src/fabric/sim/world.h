/* rdma-qsm internal: the sim fabric's shared structs (the world, its devices, fabrics, ids, QPs,
 * MRs and events) and the functions its files call across; not the public <qsm/sim.h>. */
#ifndef QSM_FABRIC_SIM_WORLD_H
#define QSM_FABRIC_SIM_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <qsm/sim.h>

#include "fabric/fabric.h"
#include "list.h"

/*
 * The sim's files, each calling only into those below it:
 *   api.c      the public qsm_sim_* API (qsm/sim.h) and the fabric ops table
 *   cm_conn.c  CM connections: connect, accept, reject, disconnect, destroy_id, device removal
 *   cm_id.c    CM ids: the port space, bind, listen, address and route resolution
 *   verbs.c    QPs, MRs, posts and their completions
 *   events.c   the fabrics' event queues, held events, injected faults
 *   world.c    addresses, devices, the world's fabrics
 */

#define DEV_NAME_MAX 64          /* IB_DEVICE_NAME_MAX, terminator included */
#define PORT_FIRST 32768         /* the default ip_local_port_range */
#define PORT_LAST 60999

/* Every object sits in exactly one ordered list (list.h), which is the order the sim walks it
 * in, so that what it does is deterministic. */

struct sim_device {
	struct qsm_list node;                    /* in qsm_sim.devices, order of first add */
	struct qsm_sim *sim;
	char name[DEV_NAME_MAX];
	struct sockaddr_storage addr;        /* port 0 */
	enum qsm_sim_device_state state;
	unsigned nids, nqps, refs, nmrs, nsrqs; /* what keeps a removed device REMOVING (nmrs:
	                                           MRs and memory windows) */
	struct qsm_list mrs;                     /* its MRs, registration order */
	struct qsm_list mws;                     /* its memory windows, allocation order */
};

/* A type-2 memory window: while bound, its rkey reaches [addr, addr + len) of its MR. */
#define SIM_WINDOW_KEYS 0x80000000u        /* the bit of a window's rkey; an MR key never has it */
#define SIM_WINDOW_INDEX_MAX ((SIM_WINDOW_KEYS >> 8) - 1)

struct sim_mw {
	struct qsm_list node;                    /* in sim_device.mws */
	struct sim_device *dev;
	uint32_t rkey;
	bool bound;
	struct sim_mr *mr;                   /* while bound: the MR it is bound to (held: no dereg) */
	uint64_t addr, len;
	int access;                          /* QSM_ACCESS_REMOTE_* */
};

/* A shared receive queue: receives posted to it wait, in order, for a SEND to any of its QPs. */
struct sim_srq {
	struct sim_fabric *fab;              /* whose ctx hears its SRQ_LIMIT */
	struct sim_device *dev;
	void *owner;
	struct qsm_list recvs;                   /* struct sim_recv, post order */
	unsigned queued;                     /* in recvs */
	unsigned held;                       /* slots: queued, or taken and completion not taken */
	struct qsm_fabric_srq_attr cap;
	uint32_t limit;                      /* armed: SRQ_LIMIT once queued < limit; 0: not */
	unsigned nqps;
};

/* A memory region: what the keys of a WR are checked against when the WR executes. */
struct sim_mr {
	struct qsm_list node;                    /* in sim_device.mrs */
	struct sim_device *dev;
	uint64_t addr;
	size_t len;
	int access;                          /* QSM_ACCESS_* */
	uint32_t lkey, rkey;
};

/* A posted receive, waiting on its QP for a SEND; its SGEs are checked when one lands. */
struct sim_recv {
	struct qsm_list node;                    /* in sim_id.recvs, post order */
	uint64_t wr_id;
	int num_sge;
	struct qsm_fabric_sge sge[QSM_FABRIC_MAX_SGE];
};

/* An id's connection state, reduced to what changes the answer of some call. */
enum id_state {
	ID_IDLE,
	ID_BOUND,            /* bind(), or the implicit bind of an address resolution that failed */
	ID_ADDR_RESOLVED,
	ID_ROUTE_RESOLVED,
	ID_LISTEN,
	ID_CONNECT,          /* active: REQ sent, no answer yet */
	ID_REQ_RCVD,         /* passive: CONNECT_REQUEST posted, neither accepted nor rejected */
	ID_ESTABLISHED,
	ID_DISCONNECTED,     /* was established, is not any more */
	ID_FAILED,           /* a connection was tried and never came up */
};

/*
 * The hardware QP of an id, as far as the sim models it: no QP, or one that takes receives
 * (INIT), sends too (RTS), or flushes everything (ERR).  The verbs states between (RTR, SQD,
 * SQE) last no time here; qsm_sim_qp_state() maps these to enum qsm_qp_state.
 */
enum sim_qp {
	SIM_QP_NONE,
	SIM_QP_INIT,
	SIM_QP_RTS,
	SIM_QP_ERR,
};

struct sim_fabric;

struct sim_id {
	struct qsm_list node;                    /* in sim_fabric.ids, creation order */
	struct sim_fabric *fab;
	void *owner;
	enum id_state state;
	struct sim_device *dev;              /* the device the id is on; never changes once set */
	bool has_src;                        /* src is meaningful */
	bool holds_port;                     /* src's port is taken in the world's port space */
	struct sockaddr_storage src, dst;
	struct sim_id *peer;                 /* the other end while CONNECT, REQ_RCVD or ESTABLISHED */
	enum sim_qp qp;
	/* The QP's data path.  Sends execute when posted, so only receives wait. */
	struct qsm_list recvs;
	unsigned nrecvs;                     /* receive slots held: posted, completion not taken */
	/* Send queue slots held: by WRs whose completion is not taken yet, and by the unsignaled
	 * ones since the last completion of the send queue (sends_unsig of them). */
	unsigned nsends, sends_unsig;
	struct qsm_fabric_qp_attr cap;       /* as asked for; 0 SGEs means 1, as rdmacm does */
};

struct sim_event {
	struct qsm_list node;                    /* in its fabric's queue, or in qsm_sim.held */
	struct sim_fabric *fab;
	bool held;
	struct sim_id *id;
	struct sim_id *listener;             /* CONNECT_REQUEST: the listening id */
	struct sim_device *dev;
	struct sim_srq *srq;                 /* SRQ_LIMIT's; a completion's: the SRQ slot it frees */
	int event;
	int status;
	struct qsm_fabric_wc wc;             /* QSM_EV_COMPLETION */
	unsigned sq_frees;                   /* send queue slots freed when it is taken */
	bool rq_free;                        /* a receive's: its slot is freed when it is taken */
	size_t len;
	uint8_t pdata[QSM_SIM_REP_PDATA];    /* the largest CM private data */
};

struct sim_fabric {
	struct qsm_fabric base;
	struct qsm_list node;                    /* in qsm_sim.fabrics */
	struct qsm_sim *sim;
	int efd;                             /* readable while queue is not empty */
	struct qsm_list ids;
	struct qsm_list queue;
};

struct qsm_sim {
	struct qsm_list devices;
	struct qsm_list fabrics;
	struct qsm_list held;                    /* events held by QSM_SIM_FAULT_HOLD, in post order */
	unsigned nfabrics;
	bool free_pending;                   /* qsm_sim_free() came while fabrics were alive */
	unsigned faults[QSM_SIM_FAULT_COUNT];
	unsigned next_port;
	/* Keys are never reused in the world's life, so a stale key never matches: MR keys count
	 * up below SIM_WINDOW_KEYS, window rkeys are SIM_WINDOW_KEYS | index << 8 | the key byte
	 * each bind moves on (as verbs' index and key); the two spaces never meet, and a space
	 * that runs out is -ENOMEM, never a wrap. */
	uint32_t next_mr_key, next_mw_index;
	struct qsm_sim_stats st;
};

/* The fabric.h handles are opaque; the sim's objects stand behind them. */

/* The fabric.h handles are opaque; the sim's objects stand behind them. */
static inline struct sim_id *to_id(struct qsm_fid *fid)
{
	return (struct sim_id *)(void *)fid;
}

static inline struct qsm_fid *fid_of(struct sim_id *id)
{
	return (struct qsm_fid *)(void *)id;
}

static inline struct sim_device *to_dev(struct qsm_fdev *fdev)
{
	return (struct sim_device *)(void *)fdev;
}

static inline struct qsm_fdev *fdev_of(struct sim_device *d)
{
	return (struct qsm_fdev *)(void *)d;
}

static inline struct sim_fabric *to_fabric(struct qsm_fabric *f)
{
	return qsm_container_of(f, struct sim_fabric, base);
}

static inline bool device_up(const struct sim_device *d)
{
	return d->state == QSM_SIM_DEVICE_UP;
}

/* SGEs a QP or SRQ takes: as asked, 0 meaning 1, at most QSM_FABRIC_MAX_SGE. */
static inline uint32_t sim_sge_cap(uint32_t asked)
{
	uint32_t n = asked ? asked : 1;

	return n < QSM_FABRIC_MAX_SGE ? n : QSM_FABRIC_MAX_SGE;
}

/* More SGEs than a receive queue (a QP's, an SRQ's) takes: the device's own check at post (the
 * runtime's door checked the list itself). */
static inline bool sim_sges_over(int n, uint32_t asked)
{
	return (uint32_t)n > sim_sge_cap(asked);
}

/* Every allocation the sim makes (zeroed), counted in qsm_sim_allocating while it is made: a
 * test that fails the library's allocations (tests/check_alloc.c) leaves the sim's alone by it. */
void *sim_zalloc(size_t n);
extern _Thread_local volatile unsigned qsm_sim_allocating; /* volatile: calloc reads it */

/* A receive of a QP or an SRQ, its SGEs copied (checked when a SEND lands); NULL: no memory. */
static inline struct sim_recv *sim_recv_new(uint64_t wr_id, const struct qsm_fabric_sge *sg, int n)
{
	struct sim_recv *r = sim_zalloc(sizeof(*r));

	if (r) {
		r->wr_id = wr_id;
		r->num_sge = n;
		if (n)
			memcpy(r->sge, sg, (size_t)n * sizeof(*sg));
	}
	return r;
}

/* What sim_post() makes an event of. */
struct post {
	struct sim_fabric *fab;              /* NULL: the id's fabric */
	struct sim_id *id;
	struct sim_id *listener;
	struct sim_device *dev;
	struct sim_srq *srq;
	int event;
	int status;
	const struct qsm_fabric_wc *wc;      /* QSM_EV_COMPLETION */
	unsigned sq_frees;
	bool rq_free;
	const void *pdata;
	size_t len;
	size_t wire;                         /* the CM message's private data size: len is padded to it */
};

/* ---- world.c ---- */

bool sim_addr_same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b);
bool sim_addr_is_any(const struct sockaddr_storage *ss);
uint16_t sim_addr_port(const struct sockaddr_storage *ss);
void sim_addr_set_port(struct sockaddr_storage *ss, uint16_t port);
void sim_addr_set_ip(struct sockaddr_storage *to, const struct sockaddr_storage *from);
int sim_addr_parse(const char *text, struct sockaddr_storage *ss);
struct sim_device *sim_device_by_name(struct qsm_sim *sim, const char *name);
struct sim_device *sim_device_serving(struct qsm_sim *sim, const struct sockaddr_storage *ip);
void sim_device_settle(struct sim_device *d);
void sim_device_get(struct qsm_fdev *fdev);
void sim_device_put(struct qsm_fdev *fdev);
const char *sim_device_name(struct qsm_fdev *fdev);
int sim_device_addr(struct qsm_fdev *fdev, struct sockaddr_storage *ss);
struct sim_fabric *sim_world_fabric(struct qsm_sim *sim, struct qsm_fabric *base);

/* ---- events.c ---- */

bool sim_fault_take(struct qsm_sim *sim, enum qsm_sim_fault f);
void sim_event_drop(struct sim_event *e);
void sim_post(const struct post *p);
void sim_post_simple(struct sim_id *id, int event, int status);
void sim_events_move(struct sim_id *id, struct sim_fabric *to);
void sim_drop_events(struct sim_id *id, int event);
void sim_drop_srq_events(struct sim_srq *s);
struct sim_event *sim_unreported_request(struct sim_id *listener);
int sim_held_release(struct qsm_sim *sim);
void sim_fabric_drop_events(struct sim_fabric *f);
int sim_fd(struct qsm_fabric *base);
int sim_get_event(struct qsm_fabric *base, struct qsm_fabric_event *ev, struct qsm_fabric_cqe *cqe,
		  int max);

/* ---- verbs.c ---- */

void sim_qp_err(struct sim_id *id);
/* The same, with `cause` (a CM event; may be NULL) posted after the flushes and before the
 * LAST_WQE of a QP on an SRQ. */
void sim_qp_err_after(struct sim_id *id, const struct post *cause);
void sim_qp_rts(struct sim_id *id);
void sim_qp_fatal(struct sim_id *id);
int sim_create_qp(struct qsm_fid *fid, const struct qsm_fabric_qp_attr *attr);
void sim_destroy_qp(struct qsm_fid *fid);
int sim_drain(struct qsm_fid *fid);
int sim_probe(struct qsm_fid *fid);
int sim_partition(struct sim_id *id);
int sim_flush_qp(struct qsm_fid *fid, struct qsm_fabric_cqe *cqe, int max);
bool sim_backlog(struct qsm_fabric *base);
int sim_take_completions(struct sim_id *id, struct qsm_fabric_cqe *cqe, int max);
int sim_reg_mr(struct qsm_fdev *fdev, void *addr, size_t len, int access, struct qsm_fmr **ret,
	       uint32_t *lkey, uint32_t *rkey);
int sim_dereg_mr(struct qsm_fmr *fmr);
int sim_post_send(struct qsm_fid *fid, const struct qsm_fabric_wr *wr, int n, int *posted);
int sim_post_recv(struct qsm_fid *fid, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
		  int num_sge);
int sim_alloc_mw(struct qsm_fdev *fdev, struct qsm_fmw **ret);
void sim_dealloc_mw(struct qsm_fmw *fmw);
int sim_bind_mw(struct qsm_fid *fid, uint64_t wr_id, struct qsm_fmw *fmw, struct qsm_fmr *fmr,
		uint64_t addr, uint64_t len, int access, unsigned int flags, uint32_t *rkey);

/* ---- srq.c ---- */

int sim_create_srq(struct qsm_fabric *base, struct qsm_fdev *fdev, void *owner,
		   const struct qsm_fabric_srq_attr *attr, struct qsm_fsrq **ret);
void sim_destroy_srq(struct qsm_fsrq *fs);
int sim_post_srq_recv(struct qsm_fsrq *fs, uint64_t wr_id, const struct qsm_fabric_sge *sg_list,
		      int num_sge);
int sim_arm_srq(struct qsm_fsrq *fs, uint32_t limit);
/* The SRQ's first receive, or NULL. */
struct sim_recv *sim_srq_peek(struct sim_srq *s);
/* One of its receives was consumed by a QP: the limit is checked. */
void sim_srq_consumed(struct sim_srq *s);

/* ---- cm_id.c ---- */

struct sim_id *sim_id_alloc(struct sim_fabric *f, void *owner);
void sim_id_set_device(struct sim_id *id, struct sim_device *d);
int sim_create_id(struct qsm_fabric *base, void *owner, struct qsm_fid **ret);
void sim_set_owner(struct qsm_fid *fid, void *owner);
int sim_handoff(struct qsm_fid *fid, struct qsm_fabric *to);
void sim_adopt(struct qsm_fabric *f, struct qsm_fid *fid);
int sim_bind(struct qsm_fid *fid, const struct sockaddr *addr);
int sim_listen(struct qsm_fid *fid, int backlog);
struct sim_id *sim_listener_for(struct qsm_sim *sim, const struct sockaddr_storage *dst, int *reason);
int sim_resolve_addr(struct qsm_fid *fid, const struct sockaddr *src,
		     const struct sockaddr *dst, int timeout_ms);
int sim_resolve_route(struct qsm_fid *fid, int timeout_ms);
struct qsm_fdev *sim_id_device(struct qsm_fid *fid);
int sim_read_depth(struct qsm_fid *fid);
int sim_id_src_addr(struct qsm_fid *fid, struct sockaddr_storage *ss);

/* ---- cm_conn.c ---- */

void sim_destroy_id(struct qsm_fid *fid);
void sim_cm_device_removed(struct qsm_sim *sim, struct sim_device *d);
int sim_connect(struct qsm_fid *fid, const void *pdata, size_t len);
int sim_accept(struct qsm_fid *fid, const void *pdata, size_t len);
int sim_reject(struct qsm_fid *fid, const void *pdata, size_t len);
int sim_disconnect(struct qsm_fid *fid);

#endif
