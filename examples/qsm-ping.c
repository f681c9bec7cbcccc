/* qsm-ping: rping's wire protocol (rdma-core's librdmacm/examples/rping) on rdma-qsm, client and
 * server, so that either end interoperates with rping; --sim runs both ends on the sim fabric. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qsm/qsm.h>
#include <qsm/rdmacm.h>
#include <qsm/sim.h>

/*
 * One ping, as rping does it:
 *   client: SEND {start_buf, rkey, size}         server: RDMA READ start_buf -> rdma_buf
 *                                                 server: SEND "go ahead"
 *   client: SEND {rdma_buf, rkey, size}           server: RDMA WRITE rdma_buf -> client rdma_buf
 *                                                 server: SEND "done"
 *   client: compares start_buf with rdma_buf, next ping.
 */
struct rping_info {           /* rping's struct rping_rdma_info, big endian on the wire */
	uint64_t buf;
	uint32_t rkey;
	uint32_t size;
};

enum { WR_RECV = 1, WR_SEND, WR_READ, WR_WRITE };

/* rping's -S range: RPING_MIN_BUFSIZE is sizeof("INT_MAX") + sizeof("rdma-ping-%d: ") (its
 * stringify() sees INT_MAX undefined), 8 + 15 = 23; sizes up to RPING_BUFSIZE - 1.  23 bytes hold
 * the longest header, "rdma-ping-4294967295: " and its NUL; a longer header is truncated. */
#define PING_MIN_SIZE 23
#define PING_MAX_SIZE 65535

struct opts {
	int server, sim, verbose, validate;
	unsigned count, size, conns;
	unsigned attempts;        /* -A: a client's connection attempts before it gives up */
	unsigned backoff_ms;      /* -B: a client's first retry delay */
	unsigned keepalive_ms;    /* -K: keepalive_ms of every queue (0: none) */
	const char *addr;
	const char *dot;          /* -d: the ctx's machines as dot at exit */
	uint16_t port;
} o = { .count = 3, .size = 64, .conns = 1, .port = 7174, .validate = 1, .attempts = 10,
      .backoff_ms = 100 };

/* Per connection (qsm allocates it: priv_size). */
struct ping {
	char *start_buf, *rdma_buf;
	struct rping_info send_info, recv_info;
	struct qsm_mr *start_mr, *rdma_mr, *send_mr, *recv_mr;
	unsigned pings;
	int phase;
	int failed;
	int counted;              /* in done_conns already */
};

static unsigned done_conns, failed_conns, abandoned_conns;
static struct qsm_ctx *stop_ctx[2];

static void stop_all(void)
{
	for (int i = 0; i < 2; i++)
		if (stop_ctx[i])
			qsm_ctx_stop(stop_ctx[i]);
}

/* A connection is over (released, given up or aborted): counted once. */
static void conn_done(struct ping *p, int failed)
{
	if (p->counted)
		return;
	p->counted = 1;
	if (failed)
		failed_conns++;
	if (++done_conns == o.conns)
		stop_all();
}

/* Something went wrong on a live connection: disconnect it (it is counted as failed when it
 * closes); non-zero (abort the queue) only if even that is refused. */
static int fail_conn(struct qsm_conn *q, struct ping *p)
{
	p->failed = 1;
	if (qsm_conn_disconnect(q) == 0)
		return 0;
	conn_done(p, 1);
	return 1;
}

/* A post refused: -ENOTCONN is a queue whose drain has started (a loss edge taken in the same
 * dispatch as this completion): its machine reconnects or closes it, the ping starts again on
 * LIVE.  Anything else fails the connection. */
static int post_failed(struct qsm_conn *q, struct ping *p, int r)
{
	return r == -ENOTCONN ? 0 : fail_conn(q, p);
}

/* A completion that is no news: a flush (the queue drains), or the RC retries running out --
 * the peer stopped answering (its host died, the wire was cut), which is the connection's loss,
 * not this ping's error: the queue's WC_ERROR edge drains it, and a client connects again. */
static bool peer_gone(const struct qsm_wc *wc, const char *who)
{
	if (wc->status == QSM_WC_RETRY_EXC_ERR)
		fprintf(stderr, "%s: the peer stopped answering (wr %llu: RC retries exceeded)\n", who,
			(unsigned long long)wc->wr_id);
	return wc->status == QSM_WC_WR_FLUSH_ERR || wc->status == QSM_WC_RETRY_EXC_ERR;
}

static struct qsm_sge sge_of(void *buf, uint32_t len, struct qsm_mr *mr)
{
	return (struct qsm_sge){ .addr = (uintptr_t)buf, .length = len, .lkey = qsm_mr_lkey(mr) };
}

static int post_recv(struct qsm_conn *q, struct ping *p)
{
	struct qsm_sge s = sge_of(&p->recv_info, sizeof(p->recv_info), p->recv_mr);

	return qsm_conn_post_recv(q, WR_RECV, &s, 1);
}

static int send_info(struct qsm_conn *q, struct ping *p, void *buf, struct qsm_mr *mr)
{
	struct qsm_sge s = sge_of(&p->send_info, sizeof(p->send_info), p->send_mr);

	p->send_info.buf = htobe64((uintptr_t)buf);
	p->send_info.rkey = htobe32(qsm_mr_rkey(mr));
	p->send_info.size = htobe32(o.size);
	return qsm_conn_post_send(q, WR_SEND, &s, 1, QSM_POST_SIGNALED);
}

/* Buffers are registered once per device: again only after a device went away. */
static int setup_buffers(struct qsm_conn *q, struct ping *p)
{
	int r = 0;

	if (!p->start_buf) {
		p->start_buf = calloc(1, o.size);
		p->rdma_buf = calloc(1, o.size);
		if (!p->start_buf || !p->rdma_buf)
			return -ENOMEM;
	}
	if (!qsm_mr_valid(p->recv_mr)) {
		if (p->recv_mr)
			qsm_mr_dereg(p->recv_mr), qsm_mr_dereg(p->send_mr), qsm_mr_dereg(p->start_mr),
				qsm_mr_dereg(p->rdma_mr);
		if ((r = qsm_conn_reg_mr(q, &p->recv_info, sizeof(p->recv_info), QSM_ACCESS_LOCAL_WRITE,
					 &p->recv_mr)) < 0 ||
		    (r = qsm_conn_reg_mr(q, &p->send_info, sizeof(p->send_info), 0, &p->send_mr)) < 0 ||
		    (r = qsm_conn_reg_mr(q, p->start_buf, o.size, QSM_ACCESS_REMOTE_READ, &p->start_mr)) < 0 ||
		    (r = qsm_conn_reg_mr(q, p->rdma_buf, o.size, QSM_ACCESS_LOCAL_WRITE |
					 QSM_ACCESS_REMOTE_WRITE, &p->rdma_mr)) < 0)
			return r;
	}
	return post_recv(q, p);
}

static void free_buffers(struct qsm_conn *q)
{
	struct ping *p = qsm_conn_priv(q);

	/* the MRs go with the queue; the memory is ours */
	free(p->start_buf);
	free(p->rdma_buf);
	p->start_buf = p->rdma_buf = NULL;
}

/* ---- client ---- */

static void fill_start(struct ping *p)
{
	static int start = 65;
	int cc = snprintf(p->start_buf, o.size, "rdma-ping-%u: ", p->pings);

	for (unsigned i = (unsigned)cc, c = (unsigned)start; i < o.size; i++) {
		p->start_buf[i] = (char)c;
		if (++c > 122)
			c = 65;
	}
	if (++start > 122)
		start = 65;
	p->start_buf[o.size - 1] = 0;
}

static int client_ping(struct qsm_conn *q, struct ping *p)
{
	fill_start(p);
	p->phase = 1;
	return send_info(q, p, p->start_buf, p->start_mr);
}

static int client_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct ping *p = qsm_conn_priv(q);
	int r;

	(void)ev;
	r = setup_buffers(q, p);
	if (r < 0) {
		fprintf(stderr, "qsm-ping: buffers: %s\n", strerror(-r));
		conn_done(p, 1);
		free_buffers(q);
		return 1;
	}
	return 0;
}

static int client_live(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct ping *p = qsm_conn_priv(q);

	(void)ev;
	if (client_ping(q, p) < 0)
		return fail_conn(q, p);
	return 0;
}

static int client_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct ping *p = qsm_conn_priv(q);
	int r;

	if (peer_gone(wc, "qsm-ping"))
		return 0;
	if (wc->status != QSM_WC_SUCCESS) {
		fprintf(stderr, "qsm-ping: completion error %d (wr %llu)\n", wc->status,
			(unsigned long long)wc->wr_id);
		return fail_conn(q, p);
	}
	if (wc->wr_id != WR_RECV)
		return 0;
	/* as rping: every message is one struct rping_rdma_info */
	if (wc->byte_len != sizeof(p->recv_info)) {
		fprintf(stderr, "qsm-ping: received %u bytes, expected %zu\n", wc->byte_len,
			sizeof(p->recv_info));
		return fail_conn(q, p);
	}
	if ((r = post_recv(q, p)) < 0)
		return post_failed(q, p, r);
	if (p->phase == 1) {          /* server read our start buffer: hand it the sink */
		p->phase = 2;
		if ((r = send_info(q, p, p->rdma_buf, p->rdma_mr)) < 0)
			return post_failed(q, p, r);
		return 0;
	}
	if (p->phase != 2) {
		fprintf(stderr, "qsm-ping: unexpected message in phase %d\n", p->phase);
		return fail_conn(q, p);
	}
	/* server wrote it back */
	p->phase = 0;
	if (o.validate && memcmp(p->start_buf, p->rdma_buf, o.size) != 0) {
		fprintf(stderr, "qsm-ping: data mismatch at ping %u\n", p->pings);
		return fail_conn(q, p);
	}
	if (o.verbose)
		printf("ping data: %s\n", p->rdma_buf);
	if (++p->pings < o.count) {
		memset(p->rdma_buf, 0, o.size);   /* the next ping must be written again */
		if ((r = client_ping(q, p)) < 0)
			return post_failed(q, p, r);
		return 0;
	}
	return qsm_conn_disconnect(q) < 0;
}

static void client_release(struct qsm_conn *q)
{
	struct ping *p = qsm_conn_priv(q);

	conn_done(p, p->failed || p->pings < o.count);
	free_buffers(q);
}

/* qsm_conn_destroy() means no more callbacks, release included: count it here. */
static int client_failed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	(void)ev;
	fprintf(stderr, "qsm-ping: cannot connect, giving up\n");
	conn_done(qsm_conn_priv(q), 1);
	free_buffers(q);
	qsm_conn_destroy(q);
	return 0;
}

static const struct qsm_class client_class = {
	.name = "qsm-ping-client",
	.priv_size = sizeof(struct ping),
	.active = {
		[QSM_CM_LIVE] = { .enter = client_live },
		[QSM_CM_FAILED] = { .enter = client_failed },
	},
	.qp_ready = client_qp_ready,
	.completion = client_completion,
	.release = client_release,
	.qp = { .max_send_wr = 16, .max_recv_wr = 4 },
};

/* ---- server ---- */

static int server_qp_ready(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct ping *p = qsm_conn_priv(q);
	int r;

	(void)ev;
	r = setup_buffers(q, p);
	if (r < 0) {
		fprintf(stderr, "qsm-ping server: buffers: %s\n", strerror(-r));
		conn_done(p, 1);
		free_buffers(q);
		return 1;
	}
	return 0;
}

static int server_completion(struct qsm_conn *q, const struct qsm_wc *wc)
{
	struct ping *p = qsm_conn_priv(q);
	struct rping_info info;
	struct qsm_sge s;
	uint32_t len;

	if (peer_gone(wc, "qsm-ping server"))
		return 0;
	if (wc->status != QSM_WC_SUCCESS) {
		fprintf(stderr, "qsm-ping server: completion error %d (wr %llu)\n", wc->status,
			(unsigned long long)wc->wr_id);
		return fail_conn(q, p);
	}
	switch (wc->wr_id) {
	case WR_RECV:
		if (wc->byte_len != sizeof(p->recv_info)) {
			fprintf(stderr, "qsm-ping server: received %u bytes, expected %zu\n", wc->byte_len,
				sizeof(p->recv_info));
			return fail_conn(q, p);
		}
		/* read the message before the buffer is posted again */
		info = p->recv_info;
		if (post_recv(q, p) < 0)
			return fail_conn(q, p);
		len = be32toh(info.size);
		if (len > o.size)
			len = o.size;
		s = sge_of(p->rdma_buf, len, p->rdma_mr);
		if (p->phase == 0) {   /* the client's start buffer: read it */
			p->phase = 1;
			memset(p->rdma_buf, 0, o.size);
			if (qsm_conn_post_read(q, WR_READ, &s, 1, be64toh(info.buf), be32toh(info.rkey),
					       QSM_POST_SIGNALED) < 0)
				return fail_conn(q, p);
			return 0;
		}
		if (p->phase != 2) {
			fprintf(stderr, "qsm-ping server: unexpected message in phase %d\n", p->phase);
			return fail_conn(q, p);
		}
		/* the client's sink: write the data back */
		p->phase = 3;
		s.length = (uint32_t)strnlen(p->rdma_buf, o.size - 1) + 1;
		if (s.length > len)
			s.length = len;
		if (qsm_conn_post_write(q, WR_WRITE, &s, 1, be64toh(info.buf), be32toh(info.rkey),
					QSM_POST_SIGNALED) < 0)
			return fail_conn(q, p);
		return 0;
	case WR_READ:
		/* what rping's client sends: "rdma-ping-N: " and printable characters */
		if (o.validate && (strncmp(p->rdma_buf, "rdma-ping-", 10) != 0 ||
				   strnlen(p->rdma_buf, o.size) == o.size)) {
			fprintf(stderr, "qsm-ping server: bad ping data at ping %u\n", p->pings);
			return fail_conn(q, p);
		}
		if (o.verbose)
			printf("server ping data: %s\n", p->rdma_buf);
		p->phase = 2;
		if (send_info(q, p, p->rdma_buf, p->rdma_mr) < 0) /* go ahead */
			return fail_conn(q, p);
		return 0;
	case WR_WRITE:
		p->pings++;
		p->phase = 0;
		if (send_info(q, p, p->rdma_buf, p->rdma_mr) < 0) /* begin again */
			return fail_conn(q, p);
		return 0;
	default:
		return 0;
	}
}

static void server_release(struct qsm_conn *q)
{
	struct ping *p = qsm_conn_priv(q);

	if (o.verbose)
		printf("server: connection closed after %u pings\n", p->pings);
	/* Closed before its client's first message, with no error of ours: not one of -n's
	 * connections.  On soft-iWARP a client's connect call can fail after this side
	 * established (siw runs its TCP connect and MPA exchange inside rdma_connect), and the
	 * client connects again: that attempt is abandoned, not served.  (With both ends in one
	 * process, -S, every connection counts: the client's end decides when it is over.) */
	if (!o.sim && p->phase == 0 && !p->pings && !p->failed && !p->counted) {
		p->counted = 1;
		abandoned_conns++;
	} else {
		conn_done(p, p->failed);
	}
	free_buffers(q);
}

static const struct qsm_class server_class = {
	.name = "qsm-ping-server",
	.priv_size = sizeof(struct ping),
	.qp_ready = server_qp_ready,   /* receives are posted before rdma_accept goes out */
	.completion = server_completion,
	.release = server_release,
	.qp = { .max_send_wr = 16, .max_recv_wr = 4 },
};

/* ---- main ---- */

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC }, *res;
	int r = getaddrinfo(host, NULL, &hints, &res);

	if (r)
		return -EINVAL;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	return 0;
}

/* 0 (refused) unless all of s is a number */
static unsigned parse_size(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	return *s && !*end && v > 0 && v <= PING_MAX_SIZE ? (unsigned)v : 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: qsm-ping -s|-c -a ADDR [-p PORT] [-A ATTEMPTS] [-B MS] [-K MS] [-C COUNT] [-S SIZE] [-n CONNS]\n"
		"                [-d DOTFILE] [-v] [-V]\n"
		"       qsm-ping --sim [-C COUNT] [-S SIZE] [-n CONNS] [-v]\n"
		"  -s server, -c client (rping's wire protocol); -n connections (client: parallel,\n"
		"  server: how many to serve before exiting); -V no data validation; --sim both\n"
		"  ends in this process on the simulated fabric; -S ping data size, 23..65535\n"
		"  (rping's range, default 64); -d the ctx's machines as dot to DOTFILE at exit\n"
		"  (qsm_ctx_write_dot(3): objects by state, edges taken; --sim: the client's ctx).\n"
		"  -A: a client's connection attempts (the first included) before it gives up\n"
		"  (default 10); -B its first retry delay (default 100 ms; it doubles, up to 10 s).\n"
		"  -K MS: keepalive, a probe of the peer every MS ms in LIVE (qsm_timeouts'\n"
		"  keepalive_ms): a peer that vanished without a word fails it (WC_ERROR) after the\n"
		"  RC retries.  QSM_TRACE=1 traces transitions.\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "sim", no_argument, NULL, 'm' }, { NULL, 0, NULL, 0 } };
	struct sockaddr_storage ss;
	struct qsm_ctx *ctx[2] = { NULL, NULL };
	struct qsm_sim *sim = NULL;
	int c, client = 0, r;

	while ((c = getopt_long(argc, argv, "sca:p:A:B:K:C:S:n:d:vV", lo, NULL)) != -1) {
		switch (c) {
		case 's': o.server = 1; break;
		case 'c': client = 1; break;
		case 'a': o.addr = optarg; break;
		case 'p': o.port = (uint16_t)atoi(optarg); break;
		case 'A': o.attempts = (unsigned)atoi(optarg); break;
		case 'B': o.backoff_ms = (unsigned)atoi(optarg); break;
		case 'K': o.keepalive_ms = (unsigned)atoi(optarg); break;
		case 'C': o.count = (unsigned)atoi(optarg); break;
		case 'S': o.size = parse_size(optarg); break;
		case 'n': o.conns = (unsigned)atoi(optarg); break;
		case 'v': o.verbose = 1; break;
		case 'V': o.validate = 0; break;
		case 'm': o.sim = 1; break;
		case 'd': o.dot = optarg; break;
		default: usage();
		}
	}
	if (o.size < PING_MIN_SIZE || o.size > PING_MAX_SIZE || o.count < 1 || o.conns < 1 || o.attempts < 1 ||
	    (!o.sim && (o.server == client || !o.addr)))
		usage();
	if (o.sim) {
		o.addr = "192.0.2.1";
		o.server = client = 1;
	}
	if (resolve(o.addr, o.port, &ss) < 0) {
		fprintf(stderr, "qsm-ping: cannot resolve %s\n", o.addr);
		return 2;
	}

	for (int i = 0; i < (o.sim ? 2 : 1); i++) {
		struct qsm_fabric *f;

		if (o.sim) {
			if (!sim && ((r = qsm_sim_new(&sim)) < 0 ||
				     (r = qsm_sim_device_add(sim, "sim0", o.addr)) < 0))
				goto fail;
			r = qsm_sim_fabric_new(sim, &f);
		} else {
			r = qsm_rdmacm_fabric_new(&f);
		}
		if (r < 0 || (r = qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f }, &ctx[i])) < 0)
			goto fail;
		stop_ctx[i] = ctx[i];
	}
	if (o.server) {
		struct qsm_listener *l;

		r = qsm_listener_new(ctx[0], &(struct qsm_listener_opts){ .comp_mask = QSM_OPTS_KEEPALIVE,
				     .addr = (struct sockaddr *)&ss, .cls = &server_class,
				     .timeouts = { .keepalive_ms = o.keepalive_ms } }, &l);
		if (r < 0)
			goto fail;
	}
	if (client) {
		struct qsm_ctx *cc = o.sim ? ctx[1] : ctx[0];

		for (unsigned i = 0; i < o.conns; i++) {
			struct qsm_conn *q;

			r = qsm_conn_new(cc, &(struct qsm_conn_opts){ .comp_mask = QSM_OPTS_KEEPALIVE,
					 .cls = &client_class, .dst = (struct sockaddr *)&ss,
					 .policy = { .initial_delay_ms = o.backoff_ms, .max_attempts = o.attempts },
					 .timeouts = { .keepalive_ms = o.keepalive_ms } }, &q);
			if (r < 0 || (r = qsm_conn_connect(q)) < 0)
				goto fail;
		}
	}
	if (o.sim) {
		/* both ends in one thread: the client's end decides when it is over */
		o.conns = o.conns * 2;
		while (done_conns < o.conns) {
			struct pollfd pfd[2] = { { .fd = qsm_ctx_fd(ctx[0]), .events = POLLIN },
						 { .fd = qsm_ctx_fd(ctx[1]), .events = POLLIN } };

			if (qsm_ctx_dispatch(ctx[0], 0) + qsm_ctx_dispatch(ctx[1], 0) == 0)
				poll(pfd, 2, 10);
		}
	} else {
		r = qsm_ctx_run(ctx[0], -1);
		if (r < 0)
			goto fail;
	}
	r = failed_conns ? 1 : 0;
	printf("qsm-ping: %u connection(s), %u failed\n", done_conns, failed_conns);
	if (abandoned_conns)
		printf("qsm-ping: %u connection(s) closed before their client's first message (not counted)\n",
		       abandoned_conns);
	for (int i = 0; i < 2; i++) {
		struct qsm_counters cnt;

		if (!ctx[i] || qsm_ctx_counters(ctx[i], &cnt, sizeof(cnt)) < 0)
			continue;
		printf("qsm-ping: %s counters: unexpected %llu, dispatched %llu, completions %llu, "
		       "dropped %llu, aborts %llu, action_errors %llu\n",
		       o.sim ? (i ? "client" : "server") : "ctx", (unsigned long long)cnt.unexpected,
		       (unsigned long long)cnt.dispatched, (unsigned long long)cnt.completions,
		       (unsigned long long)cnt.dropped, (unsigned long long)cnt.aborts,
		       (unsigned long long)cnt.action_errors);
		if (cnt.unexpected) {
			fprintf(stderr, "qsm-ping: %llu unexpected event(s)\n", (unsigned long long)cnt.unexpected);
			r = 1;
		}
		/* every item taken from the ctx went somewhere (qsm_ctx_counters(3)) */
		printf("qsm-ping: %s counter identity: popped + aborts + device_closes %llu, dispatched + "
		       "dropped + completions %llu: %s\n", o.sim ? (i ? "client" : "server") : "ctx",
		       (unsigned long long)(cnt.popped + cnt.aborts + cnt.device_closes),
		       (unsigned long long)(cnt.dispatched + cnt.dropped + cnt.completions),
		       cnt.popped + cnt.aborts + cnt.device_closes == cnt.dispatched + cnt.dropped + cnt.completions
			       ? "holds" : "BROKEN");
	}
	if (o.dot) {
		FILE *f = fopen(o.dot, "w");

		if (!f || qsm_ctx_write_dot(o.sim ? ctx[1] : ctx[0], f) < 0 || fclose(f) != 0) {
			fprintf(stderr, "qsm-ping: cannot write %s\n", o.dot);
			r = 1;
		}
	}
	fflush(stdout);
	qsm_ctx_free(ctx[1]);
	qsm_ctx_free(ctx[0]);
	qsm_sim_free(sim);
	return r;
fail:
	fprintf(stderr, "qsm-ping: %s\n", strerror(-r));
	qsm_ctx_free(ctx[1]);
	qsm_ctx_free(ctx[0]);
	qsm_sim_free(sim);
	return 1;
}
