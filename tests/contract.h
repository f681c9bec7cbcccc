/* rdma-qsm tests: the fabric contract (src/fabric/fabric.h) written once, run on any fabric a
 * fixture makes: the sim in make check (check_sim), rdmacm on soft-RoCE and soft-iWARP in the VM
 * (tests/vm/contract). */
#ifndef QSM_TESTS_CONTRACT_H
#define QSM_TESTS_CONTRACT_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <qsm/sim.h>   /* the IB CM constants (reject reasons, private data sizes) both fabrics follow */

#include "fabric/fabric.h"

/*
 * What a fabric needs to run the contract.  The cases talk to two fabrics, a client's (fc) and a
 * server's (fs), and wait for events only through expect() and expect_none(): on the sim every
 * event is queued by the time a call returns (no wait, exact emptiness); on rdmacm the kernel
 * answers asynchronously, so each wait is bounded by event_wait_ms and emptiness is "nothing came
 * within quiet_ms".
 */
struct contract_fixture {
	const char *name;
	const char *cli_ip, *srv_ip;     /* the client's and the server's device address (may be one) */
	const char *cli_dev, *srv_dev;   /* their device names */
	uint16_t port;
	int event_wait_ms;               /* 0: an event is due at once */
	int quiet_ms;                    /* how long expect_none() watches */
	bool fd_exact;                   /* fd readable exactly while an event waits (no spurious wake-ups) */
	/* A QP on an SRQ that enters ERR reports LAST_WQE (the sim, always); false: it may or may
	 * not (rxe), and the cases accept either. */
	bool last_wqe;
	/* The devices are iWARP (soft-iWARP in the VM): the cases assert iWARP's CM and verbs facts
	 * where they differ from IB's and RoCE's (no TIMEWAIT_EXIT, MPA's private data, errno
	 * rejects, no immediate data or memory windows...), each named where it is checked.  false:
	 * IB CM and rxe's facts (the sim, soft-RoCE). */
	bool iwarp;
	int case_timeout_s;              /* Check's per-case limit */
	void (*setup)(struct qsm_fabric **fc, struct qsm_fabric **fs);
	void (*teardown)(void);          /* after both fabrics are destroyed */
	/* QSM_QP_* of the QP of @owner's id on @f; NULL: the fabric cannot tell (expect_qp checks nothing) */
	int (*qp_state)(struct qsm_fabric *f, void *owner);
	/* Asserts that nothing is left: no id, QP, MR, device reference or queued event; NULL: none to count */
	void (*check_clean)(void);
	/* Asserts that no event is queued anywhere; NULL: none to count */
	void (*check_no_pending)(void);
};

/* The fixture running now, and what the cases share. */
extern const struct contract_fixture *contract_fx;
extern struct qsm_fabric *fc, *fs;
extern struct qsm_fabric_event ev;
extern struct qsm_fabric_cqe cqe;   /* the last completion (ev.event QSM_EV_COMPLETION) */
extern char CLI, CLI2, SRV, SRV2, LIS, LIS2, SENT, SRQ;   /* owners: distinct addresses are all a fabric needs */
extern const struct qsm_fabric_qp_attr qp_attr;

#define A_IP (contract_fx->cli_ip)
#define B_IP (contract_fx->srv_ip)
#define A_DEV (contract_fx->cli_dev)
#define B_DEV (contract_fx->srv_dev)
#define PORT (contract_fx->port)
#define SA(ss) ((const struct sockaddr *)&(ss))

struct sockaddr_storage ip(const char *text, uint16_t port);
const struct sockaddr *at(const char *text, uint16_t port);
unsigned port_of(const struct sockaddr_storage *ss);
int fd_readable(struct qsm_fabric *f);

/* The next event of f, of that kind and owner (waiting at most event_wait_ms). */
#define expect(f, event, owner) expect_at(__LINE__, f, event, owner)
struct qsm_fabric_event *expect_at(int line, struct qsm_fabric *f, int event, void *owner);
#define expect_none(f) expect_none_at(__LINE__, f)
void expect_none_at(int line, struct qsm_fabric *f);
#define expect_timewait_exit(f, owner) expect_timewait_exit_at(__LINE__, f, owner)
void expect_timewait_exit_at(int line, struct qsm_fabric *f, void *owner);
#define expect_qp(f, owner, state) expect_qp_at(__LINE__, f, owner, state)
void expect_qp_at(int line, struct qsm_fabric *f, void *owner, int state);
void expect_nothing_pending(void);
void assert_clean(void);

struct qsm_fid *listener_on(struct qsm_fabric *f, void *owner, const char *addr, uint16_t port);
struct qsm_fid *active_ready(void *owner, const char *src, const char *dst, uint16_t port);
struct qsm_fid *take_request(void *listen_owner, void *owner);
void connect_pair(struct qsm_fid **a, struct qsm_fid **p);
void destroy_all(struct qsm_fabric *f, struct qsm_fid **ids, int n);

/* ---- the data path ---- */

struct region {            /* a buffer registered on an id's device */
	uint8_t *mem;
	struct qsm_fmr *mr;
	uint32_t lkey, rkey;
};

struct region reg(struct qsm_fabric *f, struct qsm_fid *id, void *mem, size_t len, int access);
struct qsm_fabric_sge sge(const struct region *r, size_t off, uint32_t len);
int post_wr(struct qsm_fabric *f, struct qsm_fid *id, uint64_t wr_id, enum qsm_wr_opcode op,
	    const struct qsm_fabric_sge *sg, int n, uint64_t remote_addr, uint32_t rkey);
int post_send1(struct qsm_fabric *f, struct qsm_fid *id, uint64_t wr_id, struct qsm_fabric_sge sg);
int post_recv1(struct qsm_fabric *f, struct qsm_fid *id, uint64_t wr_id, struct qsm_fabric_sge sg);
#define expect_wc(f, owner, wr_id, status, opcode) expect_wc_at(__LINE__, f, owner, wr_id, status, opcode)
struct qsm_fabric_wc *expect_wc_at(int line, struct qsm_fabric *f, void *owner, uint64_t wr_id,
				   enum qsm_wc_status status, enum qsm_wr_opcode opcode);
void fill(uint8_t *p, size_t n, uint8_t seed);
#define expect_bytes(got, want, n) expect_bytes_at(__LINE__, got, want, n)
void expect_bytes_at(int line, const uint8_t *got, const uint8_t *want, size_t n);
#define expect_zero(p, n) expect_zero_at(__LINE__, p, n)
void expect_zero_at(int line, const uint8_t *p, size_t n);
void pair_down(struct qsm_fid *l, struct qsm_fid *a, struct qsm_fid *p);
void data_pair_down(struct qsm_fid *l, struct qsm_fid *a, struct qsm_fid *p, const struct region *rs,
		    const struct region *rd);

/* A TCase on contract_fx: its setup makes the fabrics, its teardown destroys them. */
TCase *contract_tcase(const char *name);
/* The contract's cases, added to @tc; returns how many. */
int contract_add_cases(TCase *tc);
/* Runs one suite per fixture (the contract, plus @extra's cases on fixture 0 if given); the exit code. */
int contract_main(const struct contract_fixture *const *fxs, int n, void (*extra)(TCase *tc));

#endif
