/* rdma-qsm internal: the one intrusive doubly-linked list of the library (runtime and both
 * fabrics).  A head is a node linked to itself; nodes are embedded in their owners. */
#ifndef QSM_LIST_H
#define QSM_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct qsm_list {
	struct qsm_list *next, *prev;
};

#define qsm_container_of(p, type, member) ((type *)(void *)((char *)(p) - offsetof(type, member)))

static inline void qsm_list_init(struct qsm_list *l) { l->next = l->prev = l; }
static inline bool qsm_list_empty(const struct qsm_list *l) { return l->next == l; }
static inline void qsm_list_add_tail(struct qsm_list *l, struct qsm_list *n)
{
	n->prev = l->prev;
	n->next = l;
	l->prev->next = n;
	l->prev = n;
}
static inline void qsm_list_del(struct qsm_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

/*
 * A list whose head is one pointer (the kernel's hlist), for lists an object holds many of and
 * mostly leaves empty: a node is two pointers, the second at the pointer that points at it.
 */
struct qsm_hnode {
	struct qsm_hnode *next, **pprev;
};
struct qsm_hlist {
	struct qsm_hnode *first;
};

static inline void qsm_hlist_add(struct qsm_hlist *h, struct qsm_hnode *n)
{
	n->next = h->first;
	if (h->first)
		h->first->pprev = &n->next;
	h->first = n;
	n->pprev = &h->first;
}
static inline void qsm_hlist_del(struct qsm_hnode *n)
{
	*n->pprev = n->next;
	if (n->next)
		n->next->pprev = n->pprev;
	n->next = NULL;
	n->pprev = NULL;
}

/* Every node of a list; `pos` may be unlinked inside the loop. */
#define qsm_list_each(pos, tmp, head) \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

#endif
