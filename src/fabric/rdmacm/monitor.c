/* rdma-qsm: the rdmacm fabric's device monitor: the kernel's uevents (RDMA devices registered and
 * unregistered) and rtnetlink's address messages, two netlink sockets in the fabric's epoll. */
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <unistd.h>

#include "fabric/rdmacm/rdmacm.h"

#define UEVENT_GROUP_KERNEL 1     /* the kernel's own uevents (udevd re-sends them on group 2) */
#define MON_BUF 8192              /* a uevent is at most UEVENT_BUFFER_SIZE (2048) plus its header */

static int nl_open(int proto, unsigned groups)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = groups };
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

void qsm_rc_monitor_close(struct rc_fabric *f)
{
	if (f->uev_fd >= 0) {
		epoll_del(f, f->uev_fd);
		close(f->uev_fd);
	}
	if (f->rtnl_fd >= 0) {
		epoll_del(f, f->rtnl_fd);
		close(f->rtnl_fd);
	}
	f->uev_fd = f->rtnl_fd = -1;
}

/* Joining either group needs no privilege (both are NL_CFG_F_NONROOT_RECV in the kernel). */
int qsm_rc_monitor_open(struct rc_fabric *f)
{
	int r;

	f->uev_fd = nl_open(NETLINK_KOBJECT_UEVENT, UEVENT_GROUP_KERNEL);
	f->rtnl_fd = nl_open(NETLINK_ROUTE, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR);
	r = f->uev_fd < 0 ? f->uev_fd : f->rtnl_fd < 0 ? f->rtnl_fd : 0;
	if (!r && (r = epoll_add(f, f->uev_fd)) == 0 && (r = epoll_add(f, f->rtnl_fd)) < 0)
		epoll_del(f, f->uev_fd);
	if (r < 0) {
		if (f->uev_fd >= 0)
			close(f->uev_fd);
		if (f->rtnl_fd >= 0)
			close(f->rtnl_fd);
		f->uev_fd = f->rtnl_fd = -1;
	}
	return r;
}

/*
 * A kernel uevent: "ACTION@DEVPATH" then KEY=VALUE strings, each ended by a NUL (the last one
 * may not be, in a message cut short).  Relevant: SUBSYSTEM=infiniband, whatever the action
 * (add, remove, move on a rename): ib_register_device() sends its "add" only once the device's
 * clients (uverbs, rdma_cm) and its GID table are set up, so a device it names is usable.
 */
unsigned qsm_rc_monitor_parse_uevent(const char *buf, size_t len)
{
	static const char want[] = "SUBSYSTEM=infiniband";
	const char *end = buf + len, *s = buf;
	const char *nul = buf ? memchr(buf, 0, len) : NULL;

	/* the header: a kernel message names its action and path; libudev's start "libudev" */
	if (!nul || !memchr(buf, '@', (size_t)(nul - buf)))
		return 0;
	for (s = nul + 1; s < end; s = nul + 1) {
		size_t n;

		nul = memchr(s, 0, (size_t)(end - s));
		n = nul ? (size_t)(nul - s) : (size_t)(end - s);
		if (n == sizeof(want) - 1 && !memcmp(s, want, n))
			return MON_DEVICES;
		if (!nul)
			break;
	}
	return 0;
}

/* An IFA_LOCAL / IFA_ADDRESS payload as a socket address of the family; false if it is not one. */
static bool ifa_sockaddr(const struct ifaddrmsg *ifa, const struct rtattr *rta, struct sockaddr_storage *ss)
{
	size_t n = RTA_PAYLOAD(rta);

	memset(ss, 0, sizeof(*ss));
	if (ifa->ifa_family == AF_INET && n == 4) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, RTA_DATA(rta), 4);
		return true;
	}
	if (ifa->ifa_family == AF_INET6 && n == 16) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		memcpy(&sin6->sin6_addr, RTA_DATA(rta), 16);
		if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr))
			sin6->sin6_scope_id = ifa->ifa_index;
		return true;
	}
	return false;
}

/* One RTM_NEWADDR: its address, unless IPv6 still checks it is unique (tentative: the kernel
 * sends RTM_NEWADDR again once it is usable).  IPv4's own address is IFA_LOCAL (IFA_ADDRESS is
 * the peer's on a point-to-point link); IPv6 has IFA_ADDRESS only. */
static bool newaddr(const struct nlmsghdr *nh, struct sockaddr_storage *ss)
{
	const struct ifaddrmsg *ifa = NLMSG_DATA(nh);
	const struct rtattr *rta = IFA_RTA(ifa), *local = NULL, *addr = NULL;
	int left = (int)nh->nlmsg_len - (int)NLMSG_LENGTH(sizeof(*ifa));
	uint32_t flags = ifa->ifa_flags;

	for (; RTA_OK(rta, left); rta = RTA_NEXT(rta, left)) {
		if (rta->rta_type == IFA_LOCAL)
			local = rta;
		else if (rta->rta_type == IFA_ADDRESS)
			addr = rta;
		else if (rta->rta_type == IFA_FLAGS && RTA_PAYLOAD(rta) == sizeof(uint32_t))
			memcpy(&flags, RTA_DATA(rta), sizeof(flags));
	}
	if (flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED))
		return false;
	return (local && ifa_sockaddr(ifa, local, ss)) || (addr && ifa_sockaddr(ifa, addr, ss));
}

/*
 * One rtnetlink datagram (one or more messages): MON_ADDRS and up to max of the addresses that
 * came (RTM_NEWADDR), in addrs[0..*n); MON_ADDR_GONE for an RTM_DELADDR, which asks nothing of
 * us (rdma_cm tells the ids bound to it).  A message cut short or malformed ends the parse.
 */
unsigned qsm_rc_monitor_parse_rtnl(const void *buf, size_t len, struct sockaddr_storage *addrs,
				   unsigned max, unsigned *n)
{
	const struct nlmsghdr *nh = buf;
	int left = len > MON_BUF ? MON_BUF : (int)len;
	unsigned what = 0;

	*n = 0;
	for (; buf && NLMSG_OK(nh, left); nh = NLMSG_NEXT(nh, left)) {
		if (nh->nlmsg_type == NLMSG_DONE)
			break;
		if (nh->nlmsg_type != RTM_NEWADDR && nh->nlmsg_type != RTM_DELADDR)
			continue;
		if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifaddrmsg)))
			break;
		if (nh->nlmsg_type == RTM_DELADDR) {
			what |= MON_ADDR_GONE;
			continue;
		}
		if (*n < max && newaddr(nh, &addrs[*n])) {
			(*n)++;
			what |= MON_ADDRS;
		}
	}
	return what;
}

/* Reads a socket dry: every datagram from the kernel (port 0) parsed; MON_LOST if the socket's
 * buffer overran (messages were dropped: anything may have changed). */
static unsigned drain(struct rc_fabric *f, int fd, bool uevent, struct sockaddr_storage *addrs,
		      unsigned max, unsigned *n)
{
	char buf[MON_BUF] __attribute__((aligned(NLMSG_ALIGNTO)));
	unsigned what = 0;

	for (;;) {
		struct sockaddr_nl from;
		socklen_t fl = sizeof(from);
		ssize_t got = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		unsigned k = 0;

		if (got < 0) {
			if (errno == ENOBUFS) {
				what |= MON_LOST;
				continue;
			}
			if (errno == EINTR)
				continue;
			return what;
		}
		f->mon_msgs++;
		if (fl < sizeof(from) || from.nl_family != AF_NETLINK || from.nl_pid != 0)
			continue;           /* not the kernel's */
		if (uevent) {
			what |= qsm_rc_monitor_parse_uevent(buf, (size_t)got);
			continue;
		}
		what |= qsm_rc_monitor_parse_rtnl(buf, (size_t)got, addrs + *n, max - *n, &k);
		*n += k;
	}
}

/* ---- addresses that appeared, tried until rdma_cm can use them ---- */

/* Whether rdma_cm binds the address now (its device has a GID for it); if so, that device is
 * usable by queues in the gap: DEVICE_ADDED for it (the scan's, for a device the list did not
 * have yet). */
static bool addr_usable(struct rc_fabric *f, const struct sockaddr_storage *ss)
{
	struct rdma_cm_id *tmp;
	bool ok;

	if (rdma_create_id(f->ch, &tmp, NULL, RDMA_PS_TCP) < 0)
		return false;
	ok = rdma_bind_addr(tmp, (struct sockaddr *)ss) == 0 && tmp->verbs;
	if (ok) {
		struct qsm_fdev *d = qsm_rc_dev_present(f, tmp->verbs->device);

		if (d) {
			pending_push(f, QSM_EV_DEVICE_ADDED, 0, NULL, d, false);
			f->addr_added++;
		} else {
			qsm_rc_poll_devices(f);
		}
	}
	rdma_destroy_id(tmp);
	return ok;
}

/* Each address left tried; the next try twice as late, until ADDR_WAIT_MS (2 s in all). */
static void addrs_try(struct rc_fabric *f, uint64_t now)
{
	unsigned k = 0;

	for (unsigned i = 0; i < f->naddr; i++)
		if (!addr_usable(f, &f->addr[i]))
			f->addr[k++] = f->addr[i];
	f->naddr = k;
	f->addr_delay_ms = f->addr_delay_ms ? f->addr_delay_ms * 2 : 1;
	if (!k || f->addr_delay_ms > ADDR_WAIT_MS) {
		f->naddr = 0;    /* an address no RDMA device serves: given up */
		f->addr_at = 0;
		return;
	}
	f->addr_at = now + (uint64_t)f->addr_delay_ms * 1000000ull;
}

void qsm_rc_addrs_new(struct rc_fabric *f, const struct sockaddr_storage *addrs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		bool known = false;

		for (unsigned j = 0; j < f->naddr && !known; j++)
			known = !memcmp(&f->addr[j], &addrs[i], sizeof(addrs[i]));
		if (known)
			continue;
		if (f->naddr == MON_ADDRS_MAX) {     /* the oldest gives way */
			memmove(f->addr, f->addr + 1, (MON_ADDRS_MAX - 1) * sizeof(f->addr[0]));
			f->naddr--;
		}
		f->addr[f->naddr++] = addrs[i];
	}
	f->addr_delay_ms = 0;   /* tried now, then 1 ms on */
	addrs_try(f, qsm_rc_now_ns());
	qsm_rc_timer_arm(f);
}

/* Messages were lost: whatever address came among them, every waiter tries again. */
static void addrs_lost(struct rc_fabric *f)
{
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &f->devs) {
		struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);

		if (d->present) {
			pending_push(f, QSM_EV_DEVICE_ADDED, 0, NULL, d, false);
			return;
		}
	}
}

/* ---- the timer ---- */

void qsm_rc_timer_run(struct rc_fabric *f, uint64_t n, uint64_t now)
{
	struct qsm_list *pos, *tmp;
	uint64_t ticks = 0;
	bool left = false;

	f->timer_fires++;
	if (f->mon_err) {
		ticks = n;     /* the periodic tick: each expiration one */
	} else if (f->tick_at && now >= f->tick_at) {
		ticks = 1 + (now - f->tick_at) / TICK_NS;
		f->tick_at += ticks * TICK_NS;
	}
	if (ticks) {
		qsm_list_each(pos, tmp, &f->devs) {
			struct qsm_fdev *d = qsm_container_of(pos, struct qsm_fdev, node);

			if (d->pd)
				left |= qsm_rc_cq_trim(d, ticks > CQ_IDLE_TICKS ? CQ_IDLE_TICKS : (unsigned)ticks);
		}
		if (f->mon_err)
			qsm_rc_poll_devices(f);
		else if (!left)
			f->tick_at = 0;    /* nothing left to trim: no more ticks */
	}
	if (f->mon_err)
		return;
	if (f->naddr && now >= f->addr_at)
		addrs_try(f, now);
	if (f->cold_at && now >= f->cold_at) {
		f->cold_at = 0;
		f->cold_check_at = 0;     /* due whenever the last check ran */
		qsm_rc_cq_check_cold(f);
	}
	f->timer_at = ~0ull;   /* it expired, or not (a test, a read that lost a race): set anew */
	qsm_rc_timer_arm(f);
}

void qsm_rc_cq_watch(struct rc_fabric *f)
{
	if (f->posts == f->cold_posts || f->cold_at || f->mon_err)
		return;
	f->cold_posts = f->posts;
	f->cold_at = qsm_rc_now_ns() + CQ_COLD_CHECK_NS;
	qsm_rc_timer_arm(f);
}

void qsm_rc_timer_fired(struct rc_fabric *f)
{
	uint64_t n = 0;

	/* with the monitor a re-arm may have reset the count: what is due runs all the same */
	if (read(f->tfd, &n, sizeof(n)) != sizeof(n) && f->mon_err)
		return;
	qsm_rc_timer_run(f, n, qsm_rc_now_ns());
}

void qsm_rc_monitor_take(struct rc_fabric *f)
{
	struct sockaddr_storage addrs[MON_ADDRS_MAX];
	unsigned what = 0, n = 0;

	what |= drain(f, f->uev_fd, true, addrs, MON_ADDRS_MAX, &n);
	what |= drain(f, f->rtnl_fd, false, addrs, MON_ADDRS_MAX, &n);
	if (what & MON_LOST)
		f->mon_lost++;
	/* however many messages came: one scan */
	if (what & (MON_DEVICES | MON_LOST))
		qsm_rc_poll_devices(f);
	if (n)
		qsm_rc_addrs_new(f, addrs, n);
	if (what & MON_LOST)
		addrs_lost(f);
}
