/* qsm-bw: perftest's ib_send_bw / ib_write_bw (-R, over rdma_cm) on rdma-qsm, for side-by-side
 * bandwidth figures (tests/vm/scenarios/datapath.sh).  Written against the public API only.
 *
 * As perftest: one queue, the client keeps its send queue full to the tx depth (posts while
 * fewer than -t are outstanding, one work request in every -Q signaled, re-posts on each
 * completion), the server keeps -r receives posted (send) or exposes one registered buffer
 * (write: RDMA WRITEs into it, its address and rkey in the accept's private data).  The client
 * times from its first post to its last completion and prints "BW average" in MB/sec (2^20
 * bytes, as perftest) and the message rate.  Unlike perftest it checks the data: every message
 * carries its sequence number at both ends, and a fixed body the server compares now and then
 * (send) or in every slot of its buffer at the end (write); the server answers with a result
 * message, and either end exits non-zero on any mismatch or error.  Receives complete in the
 * order they were posted, each once (their wr_ids are their post sequence), or the run fails.
 *
 * Each message has a slot of its own (tx depth slots at the client, rx depth or tx depth at
 * the server).  -B uses perftest's buffers instead, for a comparison that touches the same
 * memory: one message buffer per side, that every message uses (perftest does so for any
 * message over half a page).  The sequence numbers then cannot be carried; what is checked is
 * what survives the sharing: every message's length, the receives' order, and the body (every
 * message has the same bytes, so a buffer being written while compared still compares equal)
 * in a receive buffer that starts zeroed.
 *
 * The same work per message as perftest 4.5 (Debian 12's; src/perftest_resources.c run_iter_bw):
 * one WR per post (its post_list 1), the same WRs signaled (i % cq_mod == cq_mod - 1, and the
 * last), the same tx depth, completions polled 16 at a time (its CTX_POLL_BATCH, the rdmacm
 * fabric's batch), and nothing inline: perftest's default inline size applies to its latency
 * tests only (ctx_set_max_inline sets 0 for a BW test) and is 0 on any device it does not
 * know, rxe among them (its log says "Max inline data : 0[B]"), so its 64 B writes and sends
 * are gathered from the registered buffer, as qsm-bw's are.
 *
 * -C (send): credits, for a transport with no RNR retry.  iWARP has none: a send that finds no
 * receive posted ends the connection (RFC 5040 terminates the stream), so a sender that outruns
 * the receiver's polling -- its sends complete once handed to TCP, not once received -- kills
 * the run, where IB and RoCE only retry.  With -C the client sends message i only after the
 * server has posted the receive for it: it starts with the server's rx depth, and the server
 * tells it how many it has posted (a CREDIT message, every quarter of the rx depth).  perftest
 * has no such scheme (on iWARP it relies on its rx depth being deep enough), so the scenario
 * gives -C on iWARP only.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <qsm/qsm.h>
#include <qsm/rdmacm.h>

#define BW_MAGIC 0x71736d62u /* "qsmb" */
#define TRAILER_XOR 0x5a5aa5a5c3c33c3cull
#define BODY_CHECK_EVERY 64   /* send: the body of every 64th message (and the last) is compared */

enum mode { MODE_SEND = 1, MODE_WRITE = 2 };

static struct opts {
	int server, events, one_buf, credits;
	enum mode mode;
	unsigned size, iters, tx_depth, rx_depth, cq_mod;
	const char *addr;
	uint16_t port;
	int timeout_s;
} o = { .mode = MODE_SEND, .size = 65536, .iters = 1000, .tx_depth = 128, .rx_depth = 512,
	.cq_mod = 100, .port = 18516, .timeout_s = 60 };

/* The client's connect private data (at most 56 bytes), big endian. */
struct bw_req {
	uint32_t magic, mode, size, iters, tx_depth, cq_mod, one_buf, credits, rx_depth;
};

/* The server's accept private data (write), big endian. */
struct bw_rep {
	uint64_t addr;
	uint32_t rkey, slots;
};

/* Control messages: the client's DONE (write), the server's RESULT (both) and CREDIT (-C). */
struct bw_ctl {
	uint32_t magic, status, count, kind;  /* status: 0 ok, else which check failed */
	uint64_t usec;                        /* RESULT: the server's first-to-last receive time */
};

enum { CTL_RESULT, CTL_CREDIT };   /* bw_ctl.kind; CREDIT: count = receives posted so far */

/* Control buffers each way: a CREDIT every quarter of the rx depth, so at most 4 of them and
 * the RESULT are ever in flight before the client reposts (it may send no more meanwhile). */
#define NCTL 8
enum { WR_CTL_RECV = 1u << 30, WR_CTL_SEND = WR_CTL_RECV + NCTL };
#define WR_IS_CTL_RECV(id) ((id) >= WR_CTL_RECV && (id) < WR_CTL_RECV + NCTL)
#define WR_IS_CTL_SEND(id) ((id) >= WR_CTL_SEND && (id) < WR_CTL_SEND + NCTL)

struct bw {
	char *buf;                /* message slots */
	size_t slots;
	struct qsm_mr *buf_mr, *ctl_mr;
	struct bw_ctl ctl_in[NCTL], ctl_out[NCTL];   /* adjacent: one MR covers both */
	unsigned ctl_next;                /* the next ctl_out to use */
	unsigned ctl_inflight;            /* ctl_out sent, not completed */
	uint64_t scnt, ccnt, rcnt, posted_recv;
	uint64_t credit;                  /* -C client: messages it may send; server: last told */
	uint64_t remote_addr;
	uint32_t rkey;
	double t0, t1;
	int failed, done, result_seen;
	int was_live;
};

static char *body_ref;        /* what the body of every message holds */
static struct qsm_ctx *g_ctx;
static int g_failed, g_finished;

static double clock_s(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* For the deadline, read at every turn of the busy loop: the coarse clock costs no system
 * call, where CLOCK_MONOTONIC does whenever the clocksource has no vDSO (hpet: in the test
 * VM, each read a system call and an emulated device read, perftest's loop reads none). */
static double coarse_s(void)
{
	return clock_s(CLOCK_MONOTONIC_COARSE);
}

static void finish(int failed)
{
	if (failed)
		g_failed = 1;
	g_finished = 1;
	qsm_ctx_stop(g_ctx);
}

static const char *mode_name(void)
{
	return o.mode == MODE_SEND ? "send" : "write";
}

/* Message i: header = i, trailer = i ^ TRAILER_XOR, body = body_ref (set once per slot). */
static void stamp(char *m, uint64_t i)
{
	uint64_t t = i ^ TRAILER_XOR;

	if (o.one_buf)
		return;   /* one buffer for all: the body only */
	memcpy(m, &i, 8);
	memcpy(m + o.size - 8, &t, 8);
}

/* 0 if message slot m holds message i (with its body if @body), else the check that failed. */
static unsigned check_msg(const char *m, uint64_t i, int body)
{
	uint64_t h, t;

	if (o.one_buf)   /* no sequence numbers: the whole message is the body */
		return body && memcmp(m, body_ref, o.size) != 0 ? 4 : 0;
	memcpy(&h, m, 8);
	memcpy(&t, m + o.size - 8, 8);
	if (h != i)
		return 2;
	if (t != (i ^ TRAILER_XOR))
		return 3;
	if (body && memcmp(m + 8, body_ref + 8, o.size - 16) != 0)
		return 4;
	return 0;
}

/* The message slots; receive: zeroed, else each holds the body.  -B: one slot, as perftest. */
static int alloc_slots(struct bw *b, size_t slots, int receive)
{
	b->slots = o.one_buf ? 1 : slots;
	b->buf = malloc(b->slots * o.size);
	if (!b->buf)
		return -ENOMEM;
	for (size_t k = 0; k < b->slots; k++) {
		if (receive)
			memset(b->buf + k * o.size, 0, o.size);
		else
			memcpy(b->buf + k * o.size, body_ref, o.size);
	}
	return 0;
}

static int reg_ctl(struct qsm_conn *q, struct bw *b)
{
	/* ctl_in and ctl_out are adjacent: one MR for both */
	return qsm_conn_reg_mr(q, b->ctl_in, sizeof(b->ctl_in) + sizeof(b->ctl_out),
			       QSM_ACCESS_LOCAL_WRITE, &b->ctl_mr);
}

/* Control receive k (its buffer ctl_in[k], its wr_id WR_CTL_RECV + k). */
static int post_ctl_recv(struct qsm_conn *q, struct bw *b, unsigned k)
{
	struct qsm_sge s = { (uintptr_t)&b->ctl_in[k], sizeof(b->ctl_in[k]), qsm_mr_lkey(b->ctl_mr) };

	return qsm_conn_post_recv(q, WR_CTL_RECV + k, &s, 1);
}

/* Every control receive the peer may need at once (one without -C). */
static int post_ctl_recvs(struct qsm_conn *q, struct bw *b, unsigned n)
{
	int r = 0;

	for (unsigned k = 0; k < n && r == 0; k++)
		r = post_ctl_recv(q, b, k);
	return r;
}

static int post_ctl_send(struct qsm_conn *q, struct bw *b, uint32_t kind, uint32_t status,
			 uint32_t count, uint64_t usec)
{
	unsigned k = b->ctl_next++ % NCTL;   /* (NCTL ahead of what has completed: see NCTL) */
	struct qsm_sge s = { (uintptr_t)&b->ctl_out[k], sizeof(b->ctl_out[k]), qsm_mr_lkey(b->ctl_mr) };

	int r;

	b->ctl_out[k] = (struct bw_ctl){ .magic = BW_MAGIC, .kind = kind, .status = status,
					 .count = count, .usec = usec };
	r = qsm_conn_post_send(q, WR_CTL_SEND + k, &s, 1, QSM_POST_SIGNALED);
	if (r == 0)
		b->ctl_inflight++;
	return r;
}

static const struct bw_ctl *ctl_of(const struct bw *b, const struct qsm_wc *wc)
{
	const struct bw_ctl *c = &b->ctl_in[wc->wr_id - WR_CTL_RECV];

	return wc->byte_len == sizeof(*c) && c->magic == BW_MAGIC ? c : NULL;
}

/* -C: the receives a quarter of the rx depth apart, told to the client. */
static unsigned credit_step(void)
{
	return o.rx_depth / 4 ? o.rx_depth / 4 : 1;
}

/* A completion's status: 0 success, 1 a flush after the run ended, or of a connection that
 * never came up (an attempt that failed -- the server not listening yet -- returns the receive
 * posted in qp_ready; the next attempt posts it again): nothing to do; -1 an error (printed). */
static int wc_status(const struct qsm_wc *wc, int over, int never_live, const char *who, uint64_t count)
{
	if (wc->status == QSM_WC_SUCCESS)
		return 0;
	if (wc->status == QSM_WC_WR_FLUSH_ERR && (over || never_live))
		return 1;
	fprintf(stderr, "qsm-bw: %s: completion error %d (wr %llu) after %llu\n", who, wc->status,
		(unsigned long long)wc->wr_id, (unsigned long long)count);
	return -1;
}

/* ---- client ---- */

/* perftest's loop: post while fewer than tx_depth are outstanding; every cq_mod-th (and the
 * last) signaled. */
static int client_fill(struct qsm_conn *q, struct bw *b)
{
	uint32_t lkey = qsm_mr_lkey(b->buf_mr);

	while (b->scnt < o.iters && b->scnt - b->ccnt < o.tx_depth && (!o.credits || b->scnt < b->credit)) {
		uint64_t i = b->scnt;
		size_t slot = i % b->slots;
		char *m = b->buf + slot * o.size;
		struct qsm_sge s = { (uintptr_t)m, o.size, lkey };
		unsigned flags = (i % o.cq_mod == o.cq_mod - 1 || i == o.iters - 1) ? QSM_POST_SIGNALED : 0;
		int r;

		stamp(m, i);
		if (o.mode == MODE_SEND)
			r = qsm_conn_post_send(q, i, &s, 1, flags);
		else
			r = qsm_conn_post_write(q, i, &s, 1, b->remote_addr + slot * o.size, b->rkey, flags);
		if (r < 0) {
			fprintf(stderr, "qsm-bw: post %s #%llu: %s\n", mode_name(), (unsigned long long)i,
				strerror(-r));
			return r;
		}
		b->scnt++;
	}
	return 0;
}

static int client_fail(struct qsm_conn *q, struct bw *b)
{
	b->failed = 1;
	if (qsm_conn_disconnect(q) == 0)
		return 0;
	finish(1);
	return 1;
}

static int client_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct bw *b = qsm_conn_priv(q);
	int r;

	(void)ev;
	if (!b->buf && (r = alloc_slots(b, o.tx_depth, 0)) < 0)
		goto fail;
	if ((r = qsm_conn_reg_mr(q, b->buf, b->slots * o.size, QSM_ACCESS_LOCAL_WRITE, &b->buf_mr)) < 0 ||
	    (r = reg_ctl(q, b)) < 0 || (r = post_ctl_recvs(q, b, o.credits ? NCTL : 1)) < 0)
		goto fail;
	b->credit = o.rx_depth;   /* what the server posts before it accepts */
	return 0;
fail:
	fprintf(stderr, "qsm-bw: client buffers: %s\n", strerror(-r));
	finish(1);
	return 1;
}

/* The reply's private data (write: the server's buffer) comes with ESTABLISHED. */
static int client_connected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct bw *b = qsm_conn_priv(q);

	if (o.mode == MODE_WRITE) {
		struct bw_rep rep;

		if (ev->private_data_len < sizeof(rep)) {
			fprintf(stderr, "qsm-bw: accept carries %zu bytes of private data, want %zu\n",
				ev->private_data_len, sizeof(rep));
			return client_fail(q, b);
		}
		memcpy(&rep, ev->private_data, sizeof(rep));
		b->remote_addr = be64toh(rep.addr);
		b->rkey = be32toh(rep.rkey);
		if (be32toh(rep.slots) != b->slots) {
			fprintf(stderr, "qsm-bw: server buffer has %u slots, want %zu\n",
				be32toh(rep.slots), b->slots);
			return client_fail(q, b);
		}
	}
	return qsm_conn_ready(q) < 0;
}

static int client_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct bw *b = qsm_conn_priv(q);

	(void)ev;
	b->was_live = 1;
	b->t0 = now_s();
	if (client_fill(q, b) < 0)
		return client_fail(q, b);
	return 0;
}

static void client_report(const struct bw *b)
{
	double secs = b->t1 - b->t0;
	double mbs = (double)o.size * (double)o.iters / secs / 1048576.0;

	printf(" #bytes     #iterations    BW average[MB/sec]   MsgRate[Mpps]   seconds\n");
	printf(" %-10u %-14u %-20.2f %-15.6f %.6f\n", o.size, o.iters, mbs,
	       (double)o.iters / secs / 1e6, secs);
	printf("qsm-bw: %s client: %u B x %u, tx depth %u, cq_mod %u, %s: %.6f s, BW average %.2f "
	       "MB/sec, MsgRate %.6f Mpps\n", mode_name(), o.size, o.iters, o.tx_depth, o.cq_mod,
	       o.events ? "events" : "busy poll", secs, mbs, (double)o.iters / secs / 1e6);
}

static int client_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct bw *b = qsm_conn_priv(q);

	switch (wc_status(wc, b->failed || b->result_seen, !b->was_live, "client", b->ccnt)) {
	case 1: return 0;
	case -1: return client_fail(q, b);
	}
	if (WR_IS_CTL_SEND(wc->wr_id))
		return 0;
	if (WR_IS_CTL_RECV(wc->wr_id)) {
		const struct bw_ctl *c = ctl_of(b, wc);

		if (c && o.credits && c->kind == CTL_CREDIT) {
			/* more receives posted: send on, and take the next CREDIT in this buffer */
			if (c->count > b->credit)
				b->credit = c->count;
			if (post_ctl_recv(q, b, (unsigned)(wc->wr_id - WR_CTL_RECV)) < 0 ||
			    (b->was_live && client_fill(q, b) < 0))
				return client_fail(q, b);
			return 0;
		}
		if (!c || c->kind != CTL_RESULT || b->ccnt != o.iters) {
			fprintf(stderr, "qsm-bw: bad result message (%u bytes) after %llu completed\n",
				wc->byte_len, (unsigned long long)b->ccnt);
			return client_fail(q, b);
		}
		b->result_seen = 1;
		printf("qsm-bw: server: %u message(s) checked, status %u%s, first to last %.6f s\n",
		       c->count, c->status, c->status ? " (DATA WRONG)" : " (ok)", (double)c->usec / 1e6);
		if (c->status || c->count != o.iters)
			b->failed = 1;
		return qsm_conn_disconnect(q) < 0;
	}
	/* a signaled data WR: it and every one before it are done */
	if (wc->wr_id >= o.iters || wc->wr_id + 1 <= b->ccnt) {
		fprintf(stderr, "qsm-bw: completion of unknown wr %llu\n", (unsigned long long)wc->wr_id);
		return client_fail(q, b);
	}
	b->ccnt = wc->wr_id + 1;
	if (b->ccnt < o.iters)
		return client_fill(q, b) < 0 ? client_fail(q, b) : 0;
	b->t1 = now_s();
	client_report(b);
	/* write: tell the server we are done (send: it counts the messages itself) */
	if (o.mode == MODE_WRITE && post_ctl_send(q, b, CTL_RESULT, 0, o.iters, 0) < 0)
		return client_fail(q, b);
	return 0;
}

static void client_release(struct qsm_conn *q)
{
	struct bw *b = qsm_conn_priv(q);

	if (!b->result_seen)
		fprintf(stderr, "qsm-bw: connection closed before the server's result\n");
	free(b->buf);
	finish(b->failed || !b->result_seen);
}

/* The run is over without a result: no callback for the queue after this (non-zero). */
static int client_give_up(struct qsm_conn *q, const char *what, int status)
{
	struct bw *b = qsm_conn_priv(q);

	fprintf(stderr, "qsm-bw: %s (status %d) after %llu completed\n", what, status,
		(unsigned long long)b->ccnt);
	free(b->buf);
	b->buf = NULL;
	finish(1);
	return 1;
}

/* Lost after LIVE: no reconnect, the run failed.  Before: the policy retries (the server may
 * not listen yet). */
static int client_gap(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct bw *b = qsm_conn_priv(q);

	return b->was_live ? client_give_up(q, "connection lost", ev->status) : 0;
}

static int client_failed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	return client_give_up(q, "cannot connect, giving up", ev->status);
}

static struct qsm_class client_class = {
	.name = "qsm-bw-client",
	.priv_size = sizeof(struct bw),
	.active = {
		[QSM_CM_CONNECTED] = { .enter = client_connected },
		[QSM_CM_LIVE] = { .enter = client_live },
		[QSM_CM_RECONNECT_WAIT] = { .enter = client_gap },
		[QSM_CM_FAILED] = { .enter = client_failed },
	},
	.qp_ready = client_qp_ready,
	.completion = client_completion,
	.release = client_release,
};

/* ---- server ---- */

/* The next receive: its wr_id is its post sequence, its slot that modulo the slots. */
static int post_data_recv(struct qsm_conn *q, struct bw *b)
{
	size_t slot = b->posted_recv % b->slots;
	struct qsm_sge s = { (uintptr_t)(b->buf + slot * o.size), o.size, qsm_mr_lkey(b->buf_mr) };
	int r = qsm_conn_post_recv(q, b->posted_recv, &s, 1);

	if (r == 0)
		b->posted_recv++;
	return r;
}

static int server_requested(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct bw *b = qsm_conn_priv(q);
	struct bw_req req;
	struct bw_rep rep;
	int r, access = QSM_ACCESS_LOCAL_WRITE;

	if (ev->private_data_len < sizeof(req))
		goto refuse;
	memcpy(&req, ev->private_data, sizeof(req));
	if (be32toh(req.magic) != BW_MAGIC || be32toh(req.mode) != o.mode ||
	    be32toh(req.size) != o.size || be32toh(req.iters) != o.iters ||
	    be32toh(req.one_buf) != (uint32_t)o.one_buf || be32toh(req.credits) != (uint32_t)o.credits ||
	    (o.credits && be32toh(req.rx_depth) != o.rx_depth))   /* -C: the client counts on it */
		goto refuse;
	o.tx_depth = be32toh(req.tx_depth);   /* write: one slot per outstanding write */
	if (o.mode == MODE_WRITE)
		access |= QSM_ACCESS_REMOTE_WRITE;
	if ((r = alloc_slots(b, o.mode == MODE_SEND ? o.rx_depth : o.tx_depth, 1)) < 0 ||
	    (r = qsm_conn_reg_mr(q, b->buf, b->slots * o.size, access, &b->buf_mr)) < 0 ||
	    (r = reg_ctl(q, b)) < 0) {
		fprintf(stderr, "qsm-bw server: buffers: %s\n", strerror(-r));
		goto refuse;
	}
	if (o.mode == MODE_SEND)
		return qsm_conn_accept(q, NULL, 0) < 0;
	rep = (struct bw_rep){ .addr = htobe64((uintptr_t)b->buf), .rkey = htobe32(qsm_mr_rkey(b->buf_mr)),
			       .slots = htobe32((uint32_t)b->slots) };
	return qsm_conn_accept(q, &rep, sizeof(rep)) < 0;
refuse:
	fprintf(stderr, "qsm-bw server: refusing a request that does not match -m %s -S %u -n %u%s%s\n",
		mode_name(), o.size, o.iters, o.one_buf ? " -B" : "", o.credits ? " -C (and -r)" : "");
	b->failed = 1;
	return qsm_conn_reject(q, NULL, 0) < 0;
}

static int server_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct bw *b = qsm_conn_priv(q);
	int r = 0;

	(void)ev;
	if (o.mode == MODE_WRITE)
		r = post_ctl_recv(q, b, 0);
	while (o.mode == MODE_SEND && b->posted_recv < o.rx_depth && b->posted_recv < o.iters && r == 0)
		r = post_data_recv(q, b);
	b->credit = b->posted_recv;   /* -C: what the client starts with */
	if (r < 0) {
		fprintf(stderr, "qsm-bw server: post receives: %s\n", strerror(-r));
		b->failed = 1;
		return 1;
	}
	return 0;
}

static int server_fail(struct qsm_conn *q, struct bw *b)
{
	b->failed = 1;
	return qsm_conn_disconnect(q) < 0;
}

static int server_result(struct qsm_conn *q, struct bw *b, uint32_t status)
{
	b->t1 = now_s();
	if (status)
		b->failed = 1;
	printf("qsm-bw: %s server: %llu message(s), %s, first to last %.6f s\n", mode_name(),
	       (unsigned long long)b->rcnt, status ? "DATA WRONG" : "data ok", b->t1 - b->t0);
	if (post_ctl_send(q, b, CTL_RESULT, status, (uint32_t)b->rcnt, (uint64_t)((b->t1 - b->t0) * 1e6)) < 0)
		return server_fail(q, b);
	return 0;
}

/* write: every slot holds the last message written to it */
static uint32_t server_check_slots(struct bw *b)
{
	for (size_t k = 0; k < b->slots && k < o.iters; k++) {
		uint64_t last = (o.iters - 1 - k) / b->slots * b->slots + k;
		unsigned bad = check_msg(b->buf + k * o.size, last, 1);

		if (bad) {
			fprintf(stderr, "qsm-bw server: slot %zu does not hold message %llu (check %u)\n",
				k, (unsigned long long)last, bad);
			return bad;
		}
	}
	return 0;
}

/*
 * -C: every quarter of the rx depth posted again, and the last, the client hears how many
 * receives there are.  A CREDIT waits while NCTL - 1 control sends are in flight (one is kept
 * for the RESULT): the next one's completion sends it, with the count of then.
 */
static int server_credit(struct qsm_conn *q, struct bw *b)
{
	if (!o.credits || b->posted_recv <= b->credit || b->ctl_inflight >= NCTL - 1 ||
	    (b->posted_recv - b->credit < credit_step() && b->posted_recv < o.iters))
		return 0;
	b->credit = b->posted_recv;
	return post_ctl_send(q, b, CTL_CREDIT, 0, (uint32_t)b->posted_recv, 0);
}

static int server_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct bw *b = qsm_conn_priv(q);
	unsigned bad;

	switch (wc_status(wc, b->done, 0, "server", b->rcnt)) {
	case 1: return 0;
	case -1: return server_fail(q, b);
	}
	if (WR_IS_CTL_SEND(wc->wr_id)) {
		b->ctl_inflight--;
		return server_credit(q, b) < 0 ? server_fail(q, b) : 0;   /* one that waited */
	}
	if (WR_IS_CTL_RECV(wc->wr_id)) {   /* write: the client's DONE */
		const struct bw_ctl *c = ctl_of(b, wc);

		if (!c || c->count != o.iters) {
			fprintf(stderr, "qsm-bw server: bad DONE message\n");
			return server_fail(q, b);
		}
		b->rcnt = o.iters;
		b->done = 1;
		return server_result(q, b, server_check_slots(b));
	}
	/* send: message rcnt in slot wr_id */
	if (b->rcnt == 0)
		b->t0 = now_s();
	if (wc->byte_len != o.size) {
		fprintf(stderr, "qsm-bw server: message %llu has %u bytes, want %u\n",
			(unsigned long long)b->rcnt, wc->byte_len, o.size);
		return server_result(q, b, 1);
	}
	if (wc->wr_id != b->rcnt) {
		fprintf(stderr, "qsm-bw server: receive %llu completed as message %llu (out of order)\n",
			(unsigned long long)wc->wr_id, (unsigned long long)b->rcnt);
		b->done = 1;
		return server_result(q, b, 5);
	}
	bad = check_msg(b->buf + (wc->wr_id % b->slots) * o.size, b->rcnt,
			b->rcnt % BODY_CHECK_EVERY == 0 || b->rcnt == o.iters - 1);
	if (bad) {
		fprintf(stderr, "qsm-bw server: message %llu is wrong (check %u)\n",
			(unsigned long long)b->rcnt, bad);
		b->done = 1;
		return server_result(q, b, bad);
	}
	if (++b->rcnt == o.iters) {
		b->done = 1;
		return server_result(q, b, 0);
	}
	if (b->posted_recv < o.iters && post_data_recv(q, b) < 0)
		return server_fail(q, b);
	return server_credit(q, b) < 0 ? server_fail(q, b) : 0;
}

static void server_release(struct qsm_conn *q)
{
	struct bw *b = qsm_conn_priv(q);

	if (!b->done)
		fprintf(stderr, "qsm-bw server: connection closed after %llu of %u message(s)\n",
			(unsigned long long)b->rcnt, o.iters);
	free(b->buf);
	b->buf = NULL;
	finish(b->failed || !b->done);
}

static struct qsm_class server_class = {
	.name = "qsm-bw-server",
	.priv_size = sizeof(struct bw),
	.passive = {
		[QSM_ACCEPT_REQUESTED] = { .enter = server_requested },
	},
	.qp_ready = server_qp_ready,
	.completion = server_completion,
	.release = server_release,
};

/* ---- main ---- */

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC }, *res;

	if (getaddrinfo(host, NULL, &hints, &res))
		return -EINVAL;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	return 0;
}

static unsigned num(const char *s, unsigned min, unsigned max)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	return *s && !*end && v >= min && v <= max ? (unsigned)v : 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: qsm-bw -s|-c -a ADDR [-m send|write] [-p PORT] [-S SIZE] [-n ITERS] [-t TX_DEPTH]\n"
		"              [-r RX_DEPTH] [-Q CQ_MOD] [-e] [-B] [-C] [-T SECONDS]\n"
		"  ib_send_bw -R / ib_write_bw -R on rdma-qsm: -s server, -c client; -m send (default)\n"
		"  or write; -S message size, 16..1048576 (default 65536); -n iterations (1000);\n"
		"  -t tx depth (128), -r rx depth (send, 512), -Q one signaled in CQ_MOD (100), as\n"
		"  perftest; -e sleep on the ctx fd between completions (default: busy poll, as\n"
		"  perftest); -B one message buffer per side, as perftest (the body and the order are\n"
		"  checked, not sequence numbers); -C (send) credits: the client sends no message\n"
		"  before the server has posted its receive (for iWARP, which has no RNR retry); -T\n"
		"  give up after SECONDS (60).  Both ends must be given the same -m, -S, -n, -B, -C\n"
		"  (and with -C the same -r).\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	struct qsm_fabric *f;
	int c, client = 0, r;
	double deadline;

	while ((c = getopt(argc, argv, "sca:m:p:S:n:t:r:Q:eBCT:")) != -1) {
		switch (c) {
		case 's': o.server = 1; break;
		case 'c': client = 1; break;
		case 'a': o.addr = optarg; break;
		case 'm':
			if (strcmp(optarg, "send") == 0)
				o.mode = MODE_SEND;
			else if (strcmp(optarg, "write") == 0)
				o.mode = MODE_WRITE;
			else
				usage();
			break;
		case 'p': o.port = (uint16_t)num(optarg, 1, 65535); break;
		case 'S': o.size = num(optarg, 16, 1u << 20); break;
		case 'n': o.iters = num(optarg, 1, 1u << 30); break;
		case 't': o.tx_depth = num(optarg, 1, 8192); break;
		case 'r': o.rx_depth = num(optarg, 1, 8192); break;
		case 'Q': o.cq_mod = num(optarg, 1, 8192); break;
		case 'e': o.events = 1; break;
		case 'B': o.one_buf = 1; break;
		case 'C': o.credits = 1; break;
		case 'T': o.timeout_s = (int)num(optarg, 1, 86400); break;
		default: usage();
		}
	}
	if (o.server == client || !o.addr || !o.port || !o.size || !o.iters || !o.tx_depth ||
	    !o.rx_depth || !o.cq_mod || !o.timeout_s || optind != argc || (o.credits && o.mode != MODE_SEND))
		usage();
	/* as perftest: no deeper than the run, no rarer signal than the depth */
	if (o.tx_depth > o.iters)
		o.tx_depth = o.iters;
	if (o.rx_depth > o.iters)
		o.rx_depth = o.iters;
	if (o.cq_mod > o.tx_depth)
		o.cq_mod = o.tx_depth;
	if (resolve(o.addr, o.port, &ss) < 0) {
		fprintf(stderr, "qsm-bw: cannot resolve %s\n", o.addr);
		return 2;
	}
	body_ref = malloc(o.size);
	if (!body_ref)
		return 1;
	for (unsigned j = 0; j < o.size; j++)
		body_ref[j] = (char)(j * 131u + 17u);

	if ((r = qsm_rdmacm_fabric_new(&f)) < 0 ||
	    (r = qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f }, &g_ctx)) < 0)
		goto fail;
	if (o.server) {
		struct qsm_listener *l;

		/* the send queue carries only the result; the client's tx depth needs no room here */
		server_class.qp = (struct qsm_qp_caps){ .max_send_wr = NCTL, .max_recv_wr = o.rx_depth + 1 };
		r = qsm_listener_new(g_ctx, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&ss,
				     .cls = &server_class }, &l);
		if (r < 0)
			goto fail;
	} else {
		struct bw_req req = { htobe32(BW_MAGIC), htobe32(o.mode), htobe32(o.size),
				      htobe32(o.iters), htobe32(o.tx_depth), htobe32(o.cq_mod),
				      htobe32((uint32_t)o.one_buf), htobe32((uint32_t)o.credits),
				      htobe32(o.rx_depth) };
		struct qsm_conn *q;

		client_class.qp = (struct qsm_qp_caps){ .max_send_wr = o.tx_depth, .max_recv_wr = NCTL };
		r = qsm_conn_new(g_ctx, &(struct qsm_conn_opts){ .cls = &client_class,
				 .dst = (struct sockaddr *)&ss, .private_data = &req,
				 .private_data_len = sizeof(req),
				 .policy = { .initial_delay_ms = 100, .max_delay_ms = 500, .max_attempts = 20 } },
				 &q);
		if (r < 0 || (r = qsm_conn_connect(q)) < 0)
			goto fail;
	}
	deadline = coarse_s() + o.timeout_s;
	while (!g_finished) {
		if (coarse_s() > deadline) {
			fprintf(stderr, "qsm-bw: %s: no result after %d s, giving up\n",
				o.server ? "server" : "client", o.timeout_s);
			g_failed = 1;
			break;
		}
		if (o.events) {
			r = qsm_ctx_run(g_ctx, 100);
			if (r < 0 && r != -ETIMEDOUT)
				goto fail;
		} else if ((r = qsm_ctx_dispatch(g_ctx, 0)) < 0) {
			goto fail;
		}
	}
	{
		struct qsm_counters cnt;

		if (qsm_ctx_counters(g_ctx, &cnt, sizeof(cnt)) == 0) {
			printf("qsm-bw: counters: completions %llu, unexpected %llu, aborts %llu, "
			       "action_errors %llu\n", (unsigned long long)cnt.completions,
			       (unsigned long long)cnt.unexpected, (unsigned long long)cnt.aborts,
			       (unsigned long long)cnt.action_errors);
			if (cnt.unexpected)
				g_failed = 1;
		}
	}
	printf("qsm-bw: %s %s: %s\n", mode_name(), o.server ? "server" : "client",
	       g_failed ? "FAILED" : "ok");
	fflush(stdout);
	qsm_ctx_free(g_ctx);
	free(body_ref);
	return g_failed;
fail:
	fprintf(stderr, "qsm-bw: %s\n", strerror(-r));
	qsm_ctx_free(g_ctx);
	free(body_ref);
	return 1;
}
