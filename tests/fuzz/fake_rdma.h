/* rdma-qsm fuzzing: a fake librdmacm and libibverbs below the rdmacm fabric (fake_cm.c and fake_verbs.c, linked
 * with -Wl,--wrap for each call it stands in for), driven by tests/fuzz/rdmacm_events.c.
 *
 * What needs a kernel is this file's: the CM event channels (an eventfd each, readable while
 * events are queued), the cm_ids (bind and resolve set an id's device and address as librdmacm
 * does; a CONNECT_REQUEST brings a new id, context NULL), the device list, the device's PD,
 * completion channel and async events, its CQs and QPs (a small provider: posts are recorded in
 * each QP's rings, a QP in ERR flushes them in post order, the fuzzer completes the head of a
 * work queue; a CQ armed with completions in it raises its channel's event).  The fabric's code
 * above it is the product, unchanged.  Everything the fake hands out is counted: at the end of
 * an input every id, QP, CQ, PD, channel and MR the fabric made must have been given back.
 */
#ifndef QSM_TESTS_FAKE_RDMA_H
#define QSM_TESTS_FAKE_RDMA_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define FAKE_NDEV 2

/* Calls that can be made to fail (fake_fail_next). */
enum fake_call {
	FAKE_CREATE_ID, FAKE_BIND, FAKE_LISTEN, FAKE_RESOLVE_ADDR, FAKE_RESOLVE_ROUTE, FAKE_CONNECT,
	FAKE_ACCEPT, FAKE_REJECT, FAKE_DISCONNECT, FAKE_CREATE_QP, FAKE_CREATE_CQ, FAKE_ALLOC_PD,
	FAKE_QUERY_DEVICE, FAKE_POST, FAKE_CALLS
};

/* Live objects the fabric got from the fake and has not given back. */
struct fake_counts {
	unsigned ids, pin_ids, qps, cqs, pds, comp_channels, channels, mrs;
	unsigned events_handed;      /* CM events rdma_get_cm_event() handed to the fabric's channel */
};

/* One CM event handed out (the last one): what the fabric must make of it. */
struct fake_handed {
	int raw;                     /* rdma_cm's event number */
	int status;
	void *owner_ctx;             /* the id's context (a struct qsm_fid *), or NULL */
	void *listen_ctx;            /* CONNECT_REQUEST: the listening id's context */
	uint8_t pdata[255];
	unsigned pdata_len;
};

extern struct fake_counts fake_n;
extern struct fake_handed fake_last;

/* A fresh world: devices present, nothing else.  The channel of the fabric made next is its CM
 * channel; the pins' channel (process-wide, made once) is recognised as the other one. */
void fake_reset(void);
/* After qsm_rdmacm_fabric_new(): the fabric's CM channel (its f->ch). */
void fake_set_cm_channel(struct rdma_event_channel *ch);
/* The end of an input, after qsm_ctx_free(): what is left (the pins' ids, the device contexts)
 * is freed.  Returns false if anything of the fabric's was left (fake_n says what). */
bool fake_end(void);

/* fn(c) for each device context made in this input. */
void fake_each_context(void (*fn)(struct ibv_context *c));

/* Live ids, in creation order (the pins' among them). */
unsigned fake_id_count(void);
struct rdma_cm_id *fake_id(unsigned i);
bool fake_id_is_pin(const struct rdma_cm_id *cm);
bool fake_id_listening(const struct rdma_cm_id *cm);
/* Queue a CM event for an id (a CONNECT_REQUEST: for a listening id, with a new id the kernel
 * made on device `dev`; new_id: for any other event, a new id with no context, as the kernel
 * makes for a request -- only for an event librdmacm cannot name). */
void fake_cm_event(struct rdma_cm_id *cm, int raw, int status, const uint8_t *pdata, unsigned len,
		   int dev, bool new_id);
/* Device `d` unplugged: gone from the device list, DEVICE_REMOVAL to every id on it. */
void fake_device_remove(int d);
/* Device `d` back (a new kernel index, a new context), in the device list. */
void fake_device_add(int d);
bool fake_device_present(int d);

/* Live QPs, in creation order. */
unsigned fake_qp_count(void);
/* The head WR of a work queue (recv: its receive queue) completes with `status` (IBV_WC_*;
 * an error moves the QP to ERR, which flushes the rest). */
void fake_qp_complete(unsigned i, bool recv, enum ibv_wc_status status, uint32_t byte_len);
/* The QP goes to ERR by itself: its WRs flush. */
void fake_qp_error(unsigned i);
/* An async event: on QP i (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, LAST_WQE...), or of the device
 * of QP i (CQ_ERR, DEVICE_FATAL, PORT_ERR...). */
void fake_async(unsigned i, enum ibv_event_type type);
/* The next n calls of `c` fail with errno e. */
void fake_fail_next(enum fake_call c, unsigned n, int e);

#endif
