/* rdma-qsm internal: socket addresses as the library takes them (a sockaddr_in or _in6,
 * never a full sockaddr_storage from the caller): read only what the family has. */
#ifndef QSM_ADDR_H
#define QSM_ADDR_H

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

/* An address as the library keeps it: the family says which member is set. */
union qsm_addr {
	struct sockaddr sa;
	struct sockaddr_in sin;
	struct sockaddr_in6 sin6;
};


static inline socklen_t qsm_sockaddr_len(int family)
{
	switch (family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

static inline int qsm_sockaddr_copy(struct sockaddr_storage *ss, const struct sockaddr *sa)
{
	socklen_t len = qsm_sockaddr_len(sa->sa_family);

	if (!len)
		return -EAFNOSUPPORT;
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, sa, len);
	return 0;
}

#endif
