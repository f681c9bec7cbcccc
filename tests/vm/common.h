/* rdma-qsm VM tests: what the real-stack test programs (removal, gap, abort) share.
 * A server and a client ctx in one process on the rdmacm fabric, one host loop for both, checks. */
#ifndef QSM_TESTS_VM_COMMON_H
#define QSM_TESTS_VM_COMMON_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <qsm/qsm.h>

#define VM_MSG_LEN 64

/* ---- checks ---- */

/* The number of failed checks so far; the tests skip ahead and exit 1 once it is non-zero. */
extern unsigned vm_failures;

/* One "ok  : ..." or "FAIL: ..." line, flushed at once so that a hang shows how far it got. */
void vm_check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

double vm_now(void);                                   /* monotonic seconds */
const char *vm_env(const char *name, const char *def); /* def also for an empty variable */
const char *vm_cm_state_name(int state);               /* an active queue's state, "?" if none */

/* ---- setup and teardown ---- */

/* Line-buffered stdout (the guest streams it), and no SIGPIPE from a peer that went away. */
void vm_init_stdio(void);

/* addr = ip, port $port_env (default port_def): a sockaddr_in or sockaddr_in6 (getaddrinfo,
 * AI_NUMERICHOST: 192.0.2.1 or 2001:db8::1, never a name); false if ip is neither. */
bool vm_parse_addr(struct sockaddr_storage *addr, const char *ip, const char *port_env, const char *port_def);
uint16_t vm_addr_port(const struct sockaddr_storage *addr);                /* host order */

/* argv[2], if given, is the trace file ("-" = stdout); -1 (after perror) if it cannot be opened. */
int vm_trace_open(int argc, char **argv);

/* The trace file's line for r (nothing without a trace file): for a test's own trace function. */
void vm_trace_print(const struct qsm_trace_record *r, const char *side);

/* One ctx on an rdmacm fabric of its own, traced as `side` (a string that outlives it) if a
 * trace file is open; -1 after a "FAIL: ..." line. */
int vm_ctx_new(struct qsm_ctx **ctx, const char *side);
/* A server and a client ctx, as vm_ctx_new makes them. */
int vm_ctxs_new(struct qsm_ctx **server, struct qsm_ctx **client);

/* Frees both ctxs, then closes the trace file (the ctxs trace until they are gone). */
void vm_ctxs_free(struct qsm_ctx *server, struct qsm_ctx *client);

/* qsm_listener_new(); -1 after a "FAIL: qsm_listener_new ip:port: ..." line. */
int vm_listener_new(struct qsm_ctx *server, const struct qsm_listener_opts *o, const char *ip,
		    struct qsm_listener **l);

/* qsm_conn_new() and qsm_conn_connect(); -1 after a "FAIL: queue INDEX: ..." line. */
int vm_conn_start(struct qsm_ctx *client, const struct qsm_conn_opts *o, unsigned index, struct qsm_conn **q);

/* ---- the host loop ---- */

/* One round: wait on both ctxs (at most 10 ms), dispatch both until idle. */
void vm_pump(struct qsm_ctx *a, struct qsm_ctx *b);
void vm_pump_for(struct qsm_ctx *a, struct qsm_ctx *b, int ms);

/* How many of q[0..n) (NULL ones skipped) are in the active-queue state `state`. */
unsigned vm_count_state(struct qsm_conn **q, unsigned n, int state);
/* Pump until every one of q[0..n) is in `state`: the seconds it took, or -1 at limit_ms. */
double vm_wait_all(struct qsm_ctx *a, struct qsm_ctx *b, struct qsm_conn **q, unsigned n, int state,
		   int limit_ms);

/* ---- commands run while dispatching ---- */

/* Runs argv in a child while both ctxs keep dispatching (the kernel waits on them to release the
 * device); its wall time, or < 0 if it did not end in limit_ms (its kernel stack is printed). */
double vm_run_dispatching(struct qsm_ctx *a, struct qsm_ctx *b, char *const argv[], int limit_ms,
			  int *status);
double vm_rdma_link_delete(struct qsm_ctx *a, struct qsm_ctx *b, const char *dev, int limit_ms, int *status);
double vm_rdma_link_add(struct qsm_ctx *a, struct qsm_ctx *b, const char *dev, const char *netdev,
			int limit_ms, int *status);
int vm_exit_code(int status);                          /* the exit code, -1 if killed */

/* ---- the data path ---- */

struct qsm_sge vm_sge(void *buf, uint32_t len, struct qsm_mr *mr);

/* buf registered on the queue's current device: again after the device went away (the old MR,
 * invalid then, is deregistered). */
int vm_reg_buffer(struct qsm_conn *q, struct qsm_mr **mr, void *buf, size_t len);

/* The echo server's per passive queue buffers: every message comes back as "echo: <message>". */
struct vm_echo {
	struct qsm_mr *mr;
	char rbuf[VM_MSG_LEN], sbuf[VM_MSG_LEN + 8];
};

enum { VM_ECHO_WR_RECV = 1, VM_ECHO_WR_SEND };

/* qp_ready: the buffers registered, the first receive posted; < 0 on failure. */
int vm_echo_qp_ready(struct qsm_conn *q, struct vm_echo *e);

enum vm_echo_result {
	VM_ECHO_NOTHING,        /* a flushed WR or a send completion: nothing to do */
	VM_ECHO_SENT,           /* a message came in: the next receive and the echo posted */
	VM_ECHO_BAD_STATUS,     /* a completion with an error status */
	VM_ECHO_POST_FAILED,    /* a message came in, but a post failed */
};

/* completion: echo a received message. */
enum vm_echo_result vm_echo_completion(struct qsm_conn *q, struct vm_echo *e, const struct qsm_wc *wc);

/* The echo server's class hooks, its struct vm_echo in qsm_conn_priv(): what they did, counted
 * for the whole process (a failed post or an error completion, messages echoed). */
extern unsigned vm_echo_errors, vm_echo_sent;
int vm_echo_server_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev);
int vm_echo_server_completion(struct qsm_conn *q, const struct qsm_wc *wc);

#endif
