/* rdma-qsm fuzzing: what the two files of the fake librdmacm and libibverbs share (fake_cm.c: the
 * devices, CM channels and ids; fake_verbs.c: PDs, completion channels, CQs, QPs, async events). */
#ifndef QSM_TESTS_FAKE_INT_H
#define QSM_TESTS_FAKE_INT_H

#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "list.h"
#include "fuzz/fake_rdma.h"

#define RING 4096                  /* WRs a work queue of the fake QP holds, at most */

static inline void *zalloc(size_t n)
{
	void *p = calloc(1, n);

	if (!p)
		abort();
	return p;
}

/* An eventfd: what stands for a kernel channel's fd (readable while it holds something). */
static inline int efd_new(void)
{
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	if (fd < 0)
		abort();
	return fd;
}

static inline void fd_signal(int fd)
{
	(void)!write(fd, &(uint64_t){ 1 }, sizeof(uint64_t));
}

static inline void fd_quiet(int fd)
{
	uint64_t v;

	(void)!read(fd, &v, sizeof(v));
}

struct fdevice;

struct fctx {                       /* a device's verbs context, one per time it is added */
	struct ibv_context ctx;
	struct fdevice *dev;
	struct qsm_list node;           /* in contexts */
	struct qsm_list async;          /* struct fasync */
};

struct fdevice {
	struct ibv_device ibdev;
	int index;                      /* the kernel's: never the same twice */
	uint64_t guid;
	bool present;
	struct sockaddr_in addr;
	struct fctx *cur;               /* its context now */
};

struct fchan {                      /* a CM event channel */
	struct rdma_event_channel ch;
	struct qsm_list node;
	struct qsm_list events;         /* struct fevent */
	bool pins;
};

struct fid {
	struct rdma_cm_id cm;
	struct qsm_list node;           /* in ids */
	bool listening, pin;
};

struct fevent {
	struct rdma_cm_event ev;
	struct qsm_list node;
	struct fid *id, *listen;        /* listen: CONNECT_REQUEST's listening id */
	uint8_t pdata[255];
};

struct fcq {
	struct ibv_cq cq;
	struct qsm_list node;
	struct ibv_wc *wc;              /* the CQEs not yet polled, a FIFO */
	unsigned head, len, cap;
	bool armed;
};

struct fcompch {
	struct ibv_comp_channel cc;
	struct qsm_list node;
	struct qsm_list fired;          /* struct ffire: a CQ's event each */
};

struct ffire {
	struct qsm_list node;
	struct fcq *cq;
};

struct fwr {
	uint64_t wr_id;
	enum ibv_wc_opcode opcode;
	bool signaled;
};

struct fqp {
	struct ibv_qp qp;
	struct qsm_list node;
	struct rdma_cm_id *cm;
	struct fwr wq[2][RING];         /* 0: send queue, 1: receive queue */
	unsigned head[2], tail[2], cap[2];
	bool err;
};

struct fasync {
	struct qsm_list node;
	struct ibv_async_event ev;
};

/* the objects live now (fake_cm.c) */
extern struct qsm_list contexts, cqs, qps, compchs;
extern uint32_t next_qpn;
/* A call armed to fail (fake_fail_next): true, with errno set. */
bool failing(enum fake_call c);
/* fake_verbs.c: the provider's ops, and a QP that goes to ERR (librdmacm's disconnect) */
int fake_poll_cq(struct ibv_cq *cq, int max, struct ibv_wc *wc);
int fake_req_notify(struct ibv_cq *cq, int solicited_only);
int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
void fake_qp_to_err(struct fqp *q);

#endif
