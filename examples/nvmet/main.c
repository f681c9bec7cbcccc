/* qsm-nvmet: a userspace NVMe over Fabrics RDMA target on rdma-qsm, embedded in its own epoll
 * loop (qsm_ctx_fd() + bounded qsm_ctx_dispatch(), as examples/embed_epoll.c), serving one
 * RAM-backed namespace to the Linux kernel's nvme-rdma host.
 *
 *   qsm-nvmet -a 192.0.2.1 [-p 4420] [-n NQN] [-s 64M] [-q IOQUEUES] [-c CTRLS]
 *             [-R CMDS] [-M SIZE] [-D READS] [-I ICD] [-P] [-v]
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
struct nvmet_stats g_stats;
uint8_t *g_ns;
struct qsm_pool *g_ns_pool;

static void usage(void)
{
	fprintf(stderr,
		"usage: qsm-nvmet -a ADDR [-p PORT] [-n SUBNQN] [-s SIZE[K|M|G]] [-q IOQUEUES]\n"
		"                 [-c CTRLS] [-R CMDS] [-M DATA[K|M|G]] [-D READS] [-I ICD[K]]\n"
		"                 [-Q SRQ] [-K MS] [-d DOTFILE] [-P] [-v]\n"
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
		"  -d: the ctx's machines as dot (qsm_ctx_write_dot(3)) to DOTFILE on SIGUSR1 and at\n"
		"  exit (objects by state now, edges taken); SIGUSR1 also prints the counters.\n"
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
static void write_picture(struct qsm_ctx *ctx)
{
	char tmp[4096];
	FILE *f;

	if (!g_dot || snprintf(tmp, sizeof(tmp), "%s.tmp", g_dot) >= (int)sizeof(tmp))
		return;
	f = fopen(tmp, "w");
	if (!f || qsm_ctx_write_dot(ctx, f) < 0 || fclose(f) != 0 || rename(tmp, g_dot) < 0)
		LOG("cannot write the picture to %s", g_dot);
	else
		LOG("picture of the machines written to %s", g_dot);
}

static void print_counters(struct qsm_ctx *ctx)
{
	struct qsm_counters c;
	char line[512];

	if (qsm_ctx_counters(ctx, &c, sizeof(c)) == 0)
		LOG("qsm counters: unexpected %" PRIu64 ", dispatched %" PRIu64 ", transitions %" PRIu64
		    ", completions %" PRIu64 ", dropped %" PRIu64 ", orphans %" PRIu64 ", aborts %" PRIu64
		    ", action_errors %" PRIu64 ", device_removals %" PRIu64 ", queues_live %" PRIu64
		    ", devices_live %" PRIu64,
		    c.unexpected, c.dispatched, c.transitions, c.completions, c.dropped, c.orphans,
		    c.aborts, c.action_errors, c.device_removals, c.queues_live, c.devices_live);
	if (qsm_ctx_counters(ctx, &c, sizeof(c)) == 0)   /* every item taken went somewhere */
		LOG("ctx counter identity: popped + aborts + device_closes %" PRIu64 ", dispatched + "
		    "dropped + completions %" PRIu64 ": %s", c.popped + c.aborts + c.device_closes,
		    c.dispatched + c.dropped + c.completions,
		    c.popped + c.aborts + c.device_closes == c.dispatched + c.dropped + c.completions
			    ? "holds" : "BROKEN");
	nvmet_identities(line, sizeof(line));
	LOG("target identities: %s", line);
	LOG("target counters: queues requested %" PRIu64 " rejected %" PRIu64 " accepted %" PRIu64
	    " live %" PRIu64 " released %" PRIu64 "; controllers created %" PRIu64 " freed %" PRIu64
	    " live %u; connects %" PRIu64 " (errors %" PRIu64 "); commands %" PRIu64 " (admin %" PRIu64
	    ", io %" PRIu64 ", error status %" PRIu64 ", interrupted by the limits %" PRIu64 "); reads %" PRIu64 " (%" PRIu64 " bytes), writes %"
	    PRIu64 " (%" PRIu64 " bytes), flushes %" PRIu64 "; wc errors %" PRIu64 ", protocol errors %"
	    PRIu64 ", device removals %" PRIu64 "; RDMA READs that waited for the read window %" PRIu64
	    "; data in the capsule %" PRIu64 "; keep alive timeouts %" PRIu64
	    "; shared receive queues made %" PRIu64 "; capsules that waited for a request slot %" PRIu64,
	    g_stats.queues_requested, g_stats.queues_rejected, g_stats.queues_accepted,
	    g_stats.queues_live, g_stats.queues_released, g_stats.ctrls_created, g_stats.ctrls_freed,
	    nvmet_ctrls_live(), g_stats.connects, g_stats.connect_errors, g_stats.cmds,
	    g_stats.admin_cmds, g_stats.io_cmds, g_stats.errors, g_stats.interrupted, g_stats.reads, g_stats.bytes_read,
	    g_stats.writes, g_stats.bytes_written, g_stats.flushes, g_stats.wc_errors,
	    g_stats.protocol_errors, g_stats.device_removals, g_stats.reads_waited,
	    g_stats.in_capsule, g_stats.kato_expired, g_stats.srqs_made,
	    g_stats.capsules_waited);
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST }, *res;
	struct qsm_fabric *f;
	struct qsm_ctx *ctx = NULL;
	struct qsm_listener *l;
	struct qsm_counters cnt;
	sigset_t sigs;
	int c, r, ep = -1, sfd = -1, stop = 0, rc = 1, ka = -1;
	unsigned max_batch = 0;
	uint64_t icd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt(argc, argv, "a:p:n:s:q:c:R:M:D:I:Q:K:d:Pvh")) != -1) {
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
	    (g_opts.srq_depth && (g_opts.srq_depth < NVMET_MAX_DEPTH || g_opts.srq_depth > 65536)))
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

	/* the namespace: anonymous memory, zero, registered on each device; a write's data is read
	 * into it from the host (QSM_ACCESS_READ_SINK: on iWARP the read response is a remote write) */
	g_ns = mmap(NULL, g_opts.ns_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g_ns == MAP_FAILED) {
		perror("qsm-nvmet: mmap");
		return 1;
	}

	if ((r = qsm_rdmacm_fabric_new(&f)) < 0 ||
	    (r = qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = f }, &ctx)) < 0 ||
	    (r = qsm_ctx_reg_pool(ctx, g_ns, g_opts.ns_size, QSM_ACCESS_READ_SINK, &g_ns_pool)) < 0) {
		fprintf(stderr, "qsm-nvmet: %s\n", strerror(-r));
		return 1;
	}
	r = qsm_listener_new(ctx, &(struct qsm_listener_opts){ .comp_mask = QSM_OPTS_KEEPALIVE,
		.addr = (struct sockaddr *)&ss, .cls = nvmet_class(),
		.relisten = { .initial_delay_ms = 200, .max_delay_ms = 1000 },
		.timeouts = { .keepalive_ms = g_keepalive_ms } }, &l);
	if (r < 0) {
		fprintf(stderr, "qsm-nvmet: listen on %s:%u: %s\n", g_opts.addr, g_opts.port, strerror(-r));
		goto out;
	}

	/* the host loop: signals and the ctx's one fd */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGUSR1);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (sfd < 0 || ep < 0 ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &(struct epoll_event){ .events = EPOLLIN, .data.u32 = 0 }) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, qsm_ctx_fd(ctx),
		      &(struct epoll_event){ .events = EPOLLIN, .data.u32 = 1 })) {
		perror("qsm-nvmet: epoll");
		goto out;
	}
	LOG("listening on %s port %u: subsystem %s, namespace 1: %" PRIu64 " MiB (%" PRIu64
	    " LBAs of 512 bytes), up to %u controllers of up to %u I/O queues, %u commands and %"
	    PRIu64 " KiB of data in flight each, %u bytes of in-capsule data, %s", g_opts.addr, g_opts.port, g_opts.subnqn,
	    g_opts.ns_size >> 20, g_opts.ns_size >> NVMET_LBA_SHIFT, g_opts.max_ctrls,
	    g_opts.max_io_queues, g_opts.max_ctrl_cmds, g_opts.max_ctrl_data >> 10, g_opts.icd_size,
	    g_opts.srq_depth ? "receives on each device's shared receive queue (-Q)" : "receives per queue");

	while (!stop) {
		struct epoll_event evs[4];
		struct timespec now;
		int wait = qsm_ctx_next_timeout_ms(ctx), n;

		if (wait < 0 || wait > 1000)
			wait = 1000;
		if (ka >= 0 && ka < wait)   /* the next Keep Alive Timer that can be due */
			wait = ka;
		if (g_poll)
			wait = 0;
		n = epoll_wait(ep, evs, 4, wait);
		if (n < 0 && errno != EINTR) {
			perror("qsm-nvmet: epoll_wait");
			break;
		}
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u32 == 0) {
				struct signalfd_siginfo si;

				while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
					if (si.ssi_signo == SIGUSR1) {
						print_counters(ctx);
						write_picture(ctx);
					} else {
						stop = 1;
					}
				}
			}
		}
		/* bounded: at most BUDGET events, then back to the loop (timers due included); the
		 * commands it runs are stamped with the loop's clock (the Keep Alive Timers) */
		clock_gettime(CLOCK_MONOTONIC, &now);
		nvmet_keep_alive_clock((uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000);
		r = qsm_ctx_dispatch(ctx, BUDGET);
		if (r < 0) {
			fprintf(stderr, "qsm-nvmet: dispatch: %s\n", strerror(-r));
			break;
		}
		nvmet_flush_posts();   /* the responses it made: one post list per queue */
		/* caught up: the Keep Alive Timers; not before, or a host would pay for the
		 * target's own delay (a queue the tick disconnected is work pending now) */
		ka = r < BUDGET ? nvmet_keep_alive_tick() : 0;
		if ((unsigned)r > max_batch)
			max_batch = (unsigned)r;
	}
	LOG("stopping (largest dispatch batch %u, budget %d)", max_batch, BUDGET);
	print_counters(ctx);
	write_picture(ctx);
	rc = qsm_ctx_counters(ctx, &cnt, sizeof(cnt)) == 0 && cnt.unexpected == 0 ? 0 : 1;
	if (rc)
		LOG("FAIL: unexpected events");
out:
	if (ep >= 0)
		close(ep);
	if (sfd >= 0)
		close(sfd);
	/* no callback is made from here: free what the queues still hold ourselves */
	nvmet_queues_take_all();
	qsm_ctx_free(ctx);
	nvmet_queues_free_all();
	nvmet_srqs_free_all();
	nvmet_ctrls_free_all();
	munmap(g_ns, g_opts.ns_size);
	return rc;
}
