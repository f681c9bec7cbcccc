/* rdma-qsm: the rdmacm fabric's lookups for completions: a table of slots named in wr_id tags
 * (QPs, SRQs: O(1), a generation against reuse) and qp_num -> QP (an SRQ's receives). */
#include <stdlib.h>

#include "fabric/rdmacm/rdmacm.h"

#define TABLE_MAX (1u << TAG_SLOT_BITS)
#define NONE UINT32_MAX

void qsm_rc_table_init(struct rc_table *t)
{
	t->e = NULL;
	t->len = t->cap = 0;
	t->free = NONE;
}

void qsm_rc_table_fini(struct rc_table *t)
{
	free(t->e);
	qsm_rc_table_init(t);
}

int qsm_rc_table_add(struct rc_table *t, void *obj, uint64_t *key)
{
	uint32_t i = t->free;
	struct rc_tent *e;

	if (i != NONE) {
		t->free = t->e[i].next_free;
	} else {
		if (t->len == t->cap) {
			uint32_t cap = t->cap ? t->cap * 2 : 64;
			struct rc_tent *n;

			if (cap > TABLE_MAX)
				cap = TABLE_MAX;
			if (cap == t->len)
				return -ENOMEM;   /* a million of them in one fabric */
			n = realloc(t->e, cap * sizeof(*n));
			if (!n)
				return -ENOMEM;
			t->e = n;
			t->cap = cap;
		}
		i = t->len++;
		t->e[i].gen = 0;
	}
	e = &t->e[i];
	e->obj = obj;
	*key = (((uint64_t)(e->gen & TAG_GEN_MASK) << TAG_SLOT_BITS) | i) << TAG_KEY_SHIFT;
	return 0;
}

void qsm_rc_table_del(struct rc_table *t, uint64_t key)
{
	uint32_t i = (uint32_t)(key >> TAG_KEY_SHIFT) & (TABLE_MAX - 1);
	struct rc_tent *e = &t->e[i];

	e->obj = NULL;
	e->gen++;
	e->next_free = t->free;
	t->free = i;
}

/* ---- qp_num -> QP: open addressing, linear probing, deletion by backward shift ---- */

static uint32_t qpn_hash(uint32_t qpn, uint32_t mask)
{
	return (qpn * 0x9e3779b1u) & mask;
}

static void qpn_place(struct rc_qpn *h, struct qsm_fid *id)
{
	uint32_t mask = h->cap - 1, i = qpn_hash(id->qp_num, mask);

	while (h->slot[i])
		i = (i + 1) & mask;
	h->slot[i] = id;
}

int qsm_rc_qpn_add(struct rc_qpn *h, struct qsm_fid *id)
{
	if ((h->live + 1) * 2 > h->cap) {
		uint32_t cap = h->cap ? h->cap * 2 : 64;
		struct qsm_fid **old = h->slot, **n = calloc(cap, sizeof(*n));
		uint32_t ocap = h->cap;

		if (!n)
			return -ENOMEM;
		h->slot = n;
		h->cap = cap;
		for (uint32_t i = 0; i < ocap; i++)
			if (old[i])
				qpn_place(h, old[i]);
		free(old);
	}
	qpn_place(h, id);
	h->live++;
	return 0;
}

struct qsm_fid *qsm_rc_qpn_find(const struct rc_qpn *h, uint32_t qpn)
{
	uint32_t mask = h->cap - 1, i;

	if (!h->cap)
		return NULL;
	for (i = qpn_hash(qpn, mask); h->slot[i]; i = (i + 1) & mask)
		if (h->slot[i]->qp_num == qpn)
			return h->slot[i];
	return NULL;
}

void qsm_rc_qpn_del(struct rc_qpn *h, const struct qsm_fid *id)
{
	uint32_t mask = h->cap - 1, i, j;

	for (i = qpn_hash(id->qp_num, mask); h->slot[i] != id; i = (i + 1) & mask)
		if (!h->slot[i])
			return;
	/* what follows in the run moves up unless it sits at or after its home */
	for (j = (i + 1) & mask; h->slot[j]; j = (j + 1) & mask) {
		uint32_t home = qpn_hash(h->slot[j]->qp_num, mask);

		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			h->slot[i] = h->slot[j];
			i = j;
		}
	}
	h->slot[i] = NULL;
	h->live--;
}

void qsm_rc_qpn_fini(struct rc_qpn *h)
{
	free(h->slot);
	h->slot = NULL;
	h->cap = h->live = 0;
}
