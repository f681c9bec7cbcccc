/* qsm-nvmet: a userspace NVMe over Fabrics RDMA target on rdma-qsm, embedded in its own epoll
 * loop (qsm_ctx_fd() + bounded qsm_ctx_dispatch(), as examples/embed_epoll.c), serving one
 * RAM-backed namespace to the Linux kernel's nvme-rdma host.
 *
 *   qsm-nvmet -a 192.0.2.1 [-p 4420] [-n NQN] [-s 64M] [-q IOQUEUES] [-c CTRLS]
 *             [-R CMDS] [-M SIZE] [-D READS] [-I ICD] [-T THREADS] [-P] [-v]
 *
 * -T THREADS: that many threads, each with a ctx of its own and that loop (SPDK's poll groups):
 * the listener, on the first, spreads the queues over all of them (qsm_listener_spread(3)),
 * and a queue lives on its thread from its request to its release.
 *
 * What a remote host can make it allocate is bounded: CTRLS controllers (default 16), each
 * with IOQUEUES I/O queues (default 8); a connection request beyond is rejected before
 * anything is allocated for it, a Connect beyond is refused with the NVMe-oF status.  What a
 * host keeps in flight is bounded per controller too, over all its I/O queues: CMDS commands
 * (default 1024: 8 full queues) and SIZE bytes of their data (default 128M: a full queue of
 * 1 MiB commands); a command beyond is answered Command Interrupted, which the host retries.
 * A write of at most ICD bytes (default 4K) may come in its command capsule, no RDMA READ.
 *
 * SIGINT / SIGTERM: stop, print the counters, exit 0 unless an event was unexpected.
 * SIGUSR1: print the counters and go on. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <qsm/rdmacm.h>

#include "nvmet.h"

#define BUDGET 32   /* events per dispatch: the host's own work is never starved */

struct nvmet_opts g_opts = {
	.port = 4420,
	.subnqn = "nqn.2024-01.io.rdma-qsm:nvmet",
	.ns_size = 64ull << 20,
	.max_io_queues = 8,
	.max_ctrls = 16,
	.max_ctrl_cmds = 8 * NVMET_MAX_DEPTH,
	.max_ctrl_data = 128ull << 20,
	.icd_size = NVMET_ICD_DEFAULT,
};
uint8_t *g_ns;

static void usage(void)
{
	fprintf(stderr,
		"usage: qsm-nvmet -a ADDR [-p PORT] [-n SUBNQN] [-s SIZE[K|M|G]] [-q IOQUEUES]\n"
		"                 [-c CTRLS] [-R CMDS] [-M DATA[K|M|G]] [-D READS] [-I ICD[K]]\n"
		"                 [-Q SRQ] [-K MS] [-T THREADS] [-d DOTFILE] [-P] [-v]\n"
		"  An NVMe over Fabrics RDMA target: one namespace of SIZE bytes of RAM (512-byte\n"
		"  LBAs, default 64M), subsystem SUBNQN, listening on ADDR:PORT (default 4420),\n"
		"  plus the discovery subsystem.  At most CTRLS controllers (1..65519, default 16,\n"
		"  discovery ones included), each with at most IOQUEUES I/O queues (1..64, default\n"
		"  8); beyond, a connection is rejected.  Each controller has at most CMDS I/O\n"
		"  commands (1..8192, default 1024) and DATA bytes of their data (1M..1G, default\n"
		"  128M) in flight over all its I/O queues; a command beyond is answered Command\n"
		"  Interrupted (the host retries it).  A queue has at most READS RDMA READs in\n"
		"  flight (default: its connection's read depth, qsm_conn_read_depth(3)); the rest\n"
		"  wait in order.  An I/O queue's command capsule carries up to ICD bytes of\n"
		"  in-capsule data (0..16K, a multiple of 16, default 4K; 0: none): the host sends\n"
		"  a write that small with its command, no RDMA READ (each I/O queue receives into\n"
		"  depth x (64 + ICD) bytes).  QSM_TRACE=1 traces every transition.\n"
		"  -T THREADS: serve on THREADS threads (1..64, default 1), a ctx each; the\n"
		"  listener spreads the queues over them (qsm_listener_spread(3)), a host's\n"
		"  queues over several: one host's I/O on several cores, as SPDK's poll groups.\n"
		"  -d: the ctx's machines as dot (qsm_ctx_write_dot(3)) to DOTFILE on SIGUSR1 and at\n"
		"  exit (objects by state now, edges taken; thread N's ctx to DOTFILE.N); SIGUSR1\n"
		"  also prints the counters (summed over the threads).\n"
		"  -P: poll mode: the loop never sleeps (epoll_wait with no timeout, dispatch again at\n"
		"  once), as a storage target's poll-mode reactor: no interrupt, a core busy.\n"
		"  -Q SRQ: the queues receive their command capsules on one shared receive queue per\n"
		"  device of SRQ capsules (128..64K; default: none, each I/O queue receives into its\n"
		"  own depth x (64 + ICD) bytes), as the kernel's nvmet-rdma and SPDK do.\n"
		"  -K MS: every queue probes its host every MS ms (keepalive_ms, qsm_conn_new(3)): a\n"
		"  host that vanished without a word (powered off, the network cut) is found once\n"
		"  the RC retries run out, and its queues and controller are freed (default 0: none).\n"
		"  A host that sends no command for its KATO loses its association whatever -K says\n"
		"  (the Keep Alive Timer; KAS 1 s).\n");
	exit(2);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);

	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	return *end ? 0 : v;
}

static const char *g_dot;   /* -d: where the live picture goes */
static int g_poll;           /* -P: never sleep in epoll_wait */
static unsigned g_keepalive_ms; /* -K: the queues' keepalive_ms */

/* The live picture, to -d's file (replaced whole: a reader never sees half of one). */
/* The live picture of thread t's ctx, to -d's file (replaced whole: a reader never sees half
 * of one); on t's thread, or once it stopped. */
static void write_picture(const struct nvmet_thread *t)
{
	char name[4096], tmp[4200];
	FILE *f;

	if (!g_dot)
		return;
	if ((t->index ? snprintf(name, sizeof(name), "%s.%u", g_dot, t->index)
		      : snprintf(name, sizeof(name), "%s", g_dot)) >= (int)sizeof(name))
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	f = fopen(tmp, "w");
	if (!f || qsm_ctx_write_dot(t->ctx, f) < 0 || fclose(f) != 0 || rename(tmp, name) < 0)
		LOG("cannot write the picture to %s", name);
	else
		LOG("picture of the machines written to %s", name);
}

/* ---- the threads ---- */
struct worker {
	struct nvmet_thread t;
	pthread_t thread;
	int stop;                /* its own: set on it (stop_call) */
	unsigned max_batch;      /* the largest dispatch */
	int rc;                  /* its loop's end: 0, or it failed */
};
static struct worker *g_workers;
static unsigned g_nworkers = 1;   /* -T; worker 0 is the main thread */

/* What every thread counts, summed: each taken on its own thread (a call to its ctx, which
 * the main thread waits for), or, once the thread stopped, by the main thread. */
struct tally_req {
	pthread_mutex_t lock;
	pthread_cond_t done;
	unsigned pending;
	struct nvmet_tally sum;
	struct qsm_counters c;
};

static void tally_one(struct worker *w, struct tally_req *q)
{
	struct qsm_counters c;

	nvmet_tally(&w->t, &q->sum);
	if (qsm_ctx_counters(w->t.ctx, &c, sizeof(c)) == 0)
		nvmet_sum_counters(&q->c, &c, sizeof(c));
	write_picture(&w->t);
}

static void tally_call(struct qsm_ctx *ctx, void *arg, int status)
{
	struct tally_req *q = arg;

	pthread_mutex_lock(&q->lock);
	for (unsigned i = 1; status == 0 && i < g_nworkers; i++)
		if (g_workers[i].t.ctx == ctx)
			tally_one(&g_workers[i], q);
	q->pending--;
	pthread_cond_signal(&q->done);
	pthread_mutex_unlock(&q->lock);
}

/* Every thread's, summed; running: whether the workers still run (else the main thread reads
 * theirs: they stopped). */
static void tally_all(struct tally_req *q, int running)
{
	memset(q, 0, sizeof(*q));
	q->sum.srq_ok = 1;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->done, NULL);
	pthread_mutex_lock(&q->lock);
	tally_one(&g_workers[0], q);
	for (unsigned i = 1; i < g_nworkers; i++) {
		if (running && qsm_ctx_call(g_workers[i].t.ctx, tally_call, q) == 0)
			q->pending++;
		else if (running)
			LOG("thread %u: cannot ask for its counters", i);
		else
			tally_one(&g_workers[i], q);
	}
	while (q->pending)
		pthread_cond_wait(&q->done, &q->lock);
	pthread_mutex_unlock(&q->lock);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->done);
}

static void print_counters(const struct tally_req *q)
{
	const struct qsm_counters *c = &q->c;
	const struct nvmet_stats *st = &q->sum.s;
	uint64_t created, freed;
	char line[512];

	LOG("qsm counters: unexpected %" PRIu64 ", dispatched %" PRIu64 ", transitions %" PRIu64
	    ", completions %" PRIu64 ", dropped %" PRIu64 ", orphans %" PRIu64 ", aborts %" PRIu64
	    ", action_errors %" PRIu64 ", device_removals %" PRIu64 ", queues_live %" PRIu64
	    ", devices_live %" PRIu64,   /* summed over the threads' ctxs */
	    c->unexpected, c->dispatched, c->transitions, c->completions, c->dropped, c->orphans,
	    c->aborts, c->action_errors, c->device_removals, c->queues_live, c->devices_live);
	/* every item taken went somewhere */
	LOG("ctx counter identity: popped + aborts + device_closes %" PRIu64 ", dispatched + "
	    "dropped + completions %" PRIu64 ": %s", c->popped + c->aborts + c->device_closes,
	    c->dispatched + c->dropped + c->completions,
	    c->popped + c->aborts + c->device_closes == c->dispatched + c->dropped + c->completions
		    ? "holds" : "BROKEN");
	nvmet_identities(&q->sum, line, sizeof(line));
	LOG("target identities: %s", line);
	nvmet_ctrls_counted(&created, &freed);
	LOG("target counters: queues requested %" PRIu64 " rejected %" PRIu64 " accepted %" PRIu64
	    " live %" PRIu64 " released %" PRIu64 "; controllers created %" PRIu64 " freed %" PRIu64
	    " live %u; connects %" PRIu64 " (errors %" PRIu64 "); commands %" PRIu64 " (admin %" PRIu64
	    ", io %" PRIu64 ", error status %" PRIu64 ", interrupted by the limits %" PRIu64 "); reads %"
	    PRIu64 " (%" PRIu64 " bytes), writes %"
	    PRIu64 " (%" PRIu64 " bytes), flushes %" PRIu64 "; wc errors %" PRIu64 ", protocol errors %"
	    PRIu64 ", device removals %" PRIu64 "; RDMA READs that waited for the read window %" PRIu64
	    "; data in the capsule %" PRIu64 "; keep alive timeouts %" PRIu64
	    "; shared receive queues made %" PRIu64 "; capsules that waited for a request slot %" PRIu64
	    "; responses posted SEND_WITH_INV %" PRIu64,
	    st->queues_requested, st->queues_rejected, st->queues_accepted,
	    st->queues_live, st->queues_released, created, freed,
	    nvmet_ctrls_live(), st->connects, st->connect_errors, st->cmds,
	    st->admin_cmds, st->io_cmds, st->errors, st->interrupted, st->reads, st->bytes_read,
	    st->writes, st->bytes_written, st->flushes, st->wc_errors,
	    st->protocol_errors, st->device_removals, st->reads_waited,
	    st->in_capsule, st->kato_expired, st->srqs_made,
	    st->capsules_waited, st->remote_invalidates);
}

static void stop_call(struct qsm_ctx *ctx, void *arg, int status)
{
	struct worker *w = arg;

	(void)ctx;
	(void)status;
	w->stop = 1;
}

/* A thread's loop: its ctx's one fd (and, on the main thread, the signals), bounded dispatch,
 * the responses posted after each, the Keep Alive Timers once caught up.  Until stop (a
 * worker: stop_call; the main thread: SIGINT / SIGTERM). */
static int serve(struct worker *w, int sfd)
{
	struct nvmet_thread *t = &w->t;
	int ep = epoll_create1(EPOLL_CLOEXEC), r, ka = -1;

	if (ep < 0 ||
	    (sfd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, sfd,
				   &(struct epoll_event){ .events = EPOLLIN, .data.u32 = 0 })) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, qsm_ctx_fd(t->ctx),
		      &(struct epoll_event){ .events = EPOLLIN, .data.u32 = 1 })) {
		perror("qsm-nvmet: epoll");
		if (ep >= 0)
			close(ep);
		if (sfd >= 0)
			return -1;
		/* a worker: the target stops, and until then this thread still takes its calls
		 * (the counters, the stop) */
		kill(getpid(), SIGTERM);
		while (!w->stop)
			qsm_ctx_run(t->ctx, 100);
		return -1;
	}
	while (!w->stop) {
		struct epoll_event evs[4];
		struct timespec now;
		int wait = qsm_ctx_next_timeout_ms(t->ctx), n;

		if (wait < 0 || wait > 1000)
			wait = 1000;
		if (ka >= 0 && ka < wait)   /* the next Keep Alive Timer that can be due */
			wait = ka;
		if (g_poll)
			wait = 0;
		n = epoll_wait(ep, evs, 4, wait);
		if (n < 0 && errno != EINTR) {
			perror("qsm-nvmet: epoll_wait");
			w->rc = -1;
			break;
		}
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u32 == 0) {
				struct signalfd_siginfo si;

				while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
					if (si.ssi_signo == SIGUSR1) {
						struct tally_req q;

						tally_all(&q, 1);
						print_counters(&q);
					} else {
						w->stop = 1;
					}
				}
			}
		}
		/* bounded: at most BUDGET events, then back to the loop (timers due included); the
		 * commands it runs are stamped with the loop's clock (the Keep Alive Timers) */
		clock_gettime(CLOCK_MONOTONIC, &now);
		nvmet_keep_alive_clock(t, (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000);
		r = qsm_ctx_dispatch(t->ctx, BUDGET);
		if (r < 0) {
			fprintf(stderr, "qsm-nvmet: thread %u: dispatch: %s\n", t->index, strerror(-r));
			if (sfd >= 0) {   /* the main thread: the target stops, and says it failed */
				w->rc = -1;
				break;
			}
			/* a worker: the target stops; this thread goes on until it is told */
			if (!w->rc)
				kill(getpid(), SIGTERM);
			w->rc = -1;
			continue;
		}
		nvmet_flush_posts(t);   /* the responses it made: one post list per queue */
		/* caught up: the Keep Alive Timers; not before, or a host would pay for the
		 * target's own delay (a queue the tick disconnected is work pending now) */
		ka = r < BUDGET ? nvmet_keep_alive_tick(t) : 0;
		if ((unsigned)r > w->max_batch)
			w->max_batch = (unsigned)r;
	}
	close(ep);
	return w->rc;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	if (serve(w, -1) < 0)
		w->rc = -1;
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST }, *res;
	struct qsm_listener *l;
	struct qsm_ctx *ctxs[NVMET_MAX_THREADS];
	struct tally_req q;
	sigset_t sigs;
	int c, r, sfd = -1, rc = 1;
	unsigned max_batch = 0, made = 0, started = 0;
	uint64_t icd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt(argc, argv, "a:p:n:s:q:c:R:M:D:I:Q:K:T:d:Pvh")) != -1) {
		switch (c) {
		case 'a': g_opts.addr = optarg; break;
		case 'p': g_opts.port = (uint16_t)atoi(optarg); break;
		case 'n':
			if (strlen(optarg) >= sizeof(g_opts.subnqn))
				usage();
			strcpy(g_opts.subnqn, optarg);
			break;
		case 's': g_opts.ns_size = parse_size(optarg); break;
		case 'q': g_opts.max_io_queues = (unsigned)atoi(optarg); break;
		case 'c': g_opts.max_ctrls = (unsigned)atoi(optarg); break;
		case 'R': g_opts.max_ctrl_cmds = (unsigned)atoi(optarg); break;
		case 'M': g_opts.max_ctrl_data = parse_size(optarg); break;
		case 'D': g_opts.max_reads = (unsigned)atoi(optarg); break;
		case 'I':
			icd = parse_size(optarg);
			if ((icd == 0 && strcmp(optarg, "0") != 0) || icd > NVMET_ICD_MAX || icd % 16)
				usage();
			g_opts.icd_size = (uint32_t)icd;
			break;
		case 'Q': g_opts.srq_depth = (uint32_t)parse_size(optarg); if (!g_opts.srq_depth) usage(); break;
		case 'd': g_dot = optarg; break;
		case 'P': g_poll = 1; break;
		case 'K': g_keepalive_ms = (unsigned)atoi(optarg); break;
		case 'T': g_nworkers = (unsigned)atoi(optarg); break;
		case 'v': g_opts.verbose = 1; break;
		default: usage();
		}
	}
	if (!g_opts.addr || optind != argc || g_opts.ns_size < 4096 ||
	    (g_opts.ns_size & ((1u << NVMET_LBA_SHIFT) - 1)) || g_opts.max_io_queues < 1 ||
	    g_opts.max_io_queues > NVMET_MAX_QID || g_opts.max_ctrls < 1 ||
	    g_opts.max_ctrls > NVMET_MAX_CTRLS || !strcmp(g_opts.subnqn, NVME_DISC_SUBSYS_NAME) ||
	    /* a command alone always fits the data limit: a retried command can succeed */
	    g_opts.max_ctrl_cmds < 1 || g_opts.max_ctrl_cmds > NVMET_MAX_QID * NVMET_MAX_DEPTH ||
	    g_opts.max_ctrl_data < NVMET_MAX_XFER || g_opts.max_ctrl_data > 1ull << 30 ||
	    g_opts.max_reads > NVMET_MAX_DEPTH ||
	    (g_opts.srq_depth && (g_opts.srq_depth < NVMET_MAX_DEPTH || g_opts.srq_depth > 65536)) ||
	    g_nworkers < 1 || g_nworkers > NVMET_MAX_THREADS)
		usage();
	if (getaddrinfo(g_opts.addr, NULL, &hints, &res) != 0) {
		fprintf(stderr, "qsm-nvmet: %s is not a numeric address\n", g_opts.addr);
		return 2;
	}
	memcpy(&ss, res->ai_addr, res->ai_addrlen);
	g_opts.family = res->ai_family;
	freeaddrinfo(res);
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons(g_opts.port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = htons(g_opts.port);

	/* the namespace: anonymous memory, zero, registered on each device of each thread's ctx */
	g_ns = mmap(NULL, g_opts.ns_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g_ns == MAP_FAILED) {
		perror("qsm-nvmet: mmap");
		return 1;
	}
	if (!(g_workers = calloc(g_nworkers, sizeof(*g_workers)))) {
		perror("qsm-nvmet: calloc");
		return 1;
	}
	/* a ctx per thread, its fabric its own; the listener on the first, spread over all */
	for (; made < g_nworkers; made++) {
		struct qsm_fabric *f;
		struct qsm_ctx *ctx;

		if ((r = qsm_rdmacm_fabric_new(&f)) < 0 ||
		    (r = qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f }, &ctx)) < 0) {
			fprintf(stderr, "qsm-nvmet: %s\n", strerror(-r));
			goto out;
		}
		ctxs[made] = ctx;
		if ((r = nvmet_thread_init(&g_workers[made].t, ctx)) < 0) {
			qsm_ctx_free(ctx);
			fprintf(stderr, "qsm-nvmet: %s\n", strerror(-r));
			goto out;
		}
	}
	r = qsm_listener_new(ctxs[0], &(struct qsm_listener_opts){ .comp_mask = QSM_OPTS_KEEPALIVE,
		.addr = (struct sockaddr *)&ss, .cls = nvmet_class(),
		.relisten = { .initial_delay_ms = 200, .max_delay_ms = 1000 },
		.timeouts = { .keepalive_ms = g_keepalive_ms } }, &l);
	if (r < 0) {
		fprintf(stderr, "qsm-nvmet: listen on %s:%u: %s\n", g_opts.addr, g_opts.port, strerror(-r));
		goto out;
	}
	if (g_nworkers > 1 && (r = qsm_listener_spread(l, ctxs, g_nworkers)) < 0) {
		fprintf(stderr, "qsm-nvmet: spread over %u threads: %s\n", g_nworkers, strerror(-r));
		goto out;
	}

	/* the signals: the main thread's signalfd; every thread blocks them (they inherit it) */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGUSR1);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0) {
		perror("qsm-nvmet: signalfd");
		goto out;
	}
	for (; started + 1 < g_nworkers; started++)
		if ((r = pthread_create(&g_workers[started + 1].thread, NULL, worker_main,
					&g_workers[started + 1])) != 0) {
			fprintf(stderr, "qsm-nvmet: thread: %s\n", strerror(r));
			goto stop;
		}
	LOG("listening on %s port %u: subsystem %s, namespace 1: %" PRIu64 " MiB (%" PRIu64
	    " LBAs of 512 bytes), up to %u controllers of up to %u I/O queues, %u commands and %"
	    PRIu64 " KiB of data in flight each, %u bytes of in-capsule data, %s, %u thread%s",
	    g_opts.addr, g_opts.port, g_opts.subnqn,
	    g_opts.ns_size >> 20, g_opts.ns_size >> NVMET_LBA_SHIFT, g_opts.max_ctrls,
	    g_opts.max_io_queues, g_opts.max_ctrl_cmds, g_opts.max_ctrl_data >> 10, g_opts.icd_size,
	    g_opts.srq_depth ? "receives on each device's shared receive queue (-Q)" : "receives per queue",
	    g_nworkers, g_nworkers > 1 ? "s (the queues spread over them)" : "");

	rc = serve(&g_workers[0], sfd) < 0;
stop:
	/* the workers stop on their own threads; then every thread's counters, read here */
	for (unsigned i = 1; i <= started; i++)
		if (qsm_ctx_call(g_workers[i].t.ctx, stop_call, &g_workers[i]) < 0)
			LOG("thread %u: cannot tell it to stop", i);   /* then join waits: say why */
	for (unsigned i = 1; i <= started; i++) {
		pthread_join(g_workers[i].thread, NULL);
		rc |= g_workers[i].rc < 0;
	}
	for (unsigned i = 0; i <= started; i++)
		if (g_workers[i].max_batch > max_batch)
			max_batch = g_workers[i].max_batch;
	LOG("stopping (largest dispatch batch %u, budget %d)", max_batch, BUDGET);
	if (started + 1 == g_nworkers) {
		tally_all(&q, 0);
		print_counters(&q);
		if (q.c.unexpected) {
			LOG("FAIL: unexpected events");
			rc = 1;
		}
	}
out:
	if (sfd >= 0)
		close(sfd);
	/* no callback is made from here: free what the queues still hold ourselves; the
	 * listener's ctx first (its listener spreads to the others) */
	for (unsigned i = 0; i < made; i++)
		nvmet_queues_take_all(&g_workers[i].t);
	for (unsigned i = 0; i < made; i++)
		qsm_ctx_free(ctxs[i]);
	nvmet_queues_free_all();
	for (unsigned i = 0; i < made; i++)
		nvmet_thread_fini(&g_workers[i].t);
	nvmet_ctrls_free_all();
	free(g_workers);
	munmap(g_ns, g_opts.ns_size);
	return rc;
}
