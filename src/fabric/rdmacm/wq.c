/* rdma-qsm: a QP's work queue rings in the rdmacm fabric (struct rc_wq): made and sized, and
 * what a completion that is not the head's does to them -- a skip over unsignaled sends, a
 * send queue completed out of post order, a stale completion.  The head's is verbs.c's. */
#include <errno.h>
#include <stdlib.h>

#include "fabric/rdmacm/rdmacm.h"

static uint32_t ring_size(uint32_t cap)
{
	uint32_t size = 1;

	while (size < cap)
		size <<= 1;
	return size;
}

int qsm_rc_wq_init(struct rc_wq *w, uint32_t cap)
{
	uint32_t size = ring_size(cap);

	w->ring = calloc(size, sizeof(*w->ring));
	if (!w->ring)
		return -ENOMEM;
	w->mask = size - 1;
	w->cap = cap;
	w->head = w->tail = w->ahead = 0;
	return 0;
}

void qsm_rc_wq_fini(struct rc_wq *w)
{
	free(w->ring);
	w->ring = NULL;
	w->head = w->tail = w->cap = w->mask = w->ahead = 0;
}

size_t qsm_rc_qp_bytes(uint32_t max_send_wr, uint32_t max_recv_wr)
{
	return sizeof(struct qsm_fid) + sizeof(struct rc_tent) +
	       (ring_size(max_send_wr) + ring_size(max_recv_wr)) * sizeof(struct rc_slot);
}

/* head passes what is done: the slots completed out of order, and the unsignaled sends before
 * them (a later WR completed, so they are done too, as anywhere in the ring).  It stops at a
 * signaled WR still out, or once no slot ahead is done. */
void qsm_rc_wq_catch_up(struct rc_wq *w)
{
	for (; w->ahead && w->head != w->tail; w->head++) {
		struct rc_slot *s = &w->ring[w->head & w->mask];

		if (s->done) {
			s->done = false;
			w->ahead--;
		} else if (s->signaled) {
			return;
		}
	}
}

/* The WRs before seq completed without a completion: unsignaled sends (a work queue completes
 * in order), else a provider that broke the order, counted.  On the send queue seq's slot is
 * marked done and head catches up: through it, or up to a signaled WR before it still out
 * (the provider reordered: soft-iWARP completes a SEND once TCP has it, ahead of a READ posted
 * before it), which head then waits for.  NULL: seq's completion came already. */
static struct rc_slot *wq_skip_to(struct rc_fabric *f, struct rc_wq *w, bool recv, uint32_t seq)
{
	struct rc_slot *s = &w->ring[seq & w->mask];

	if (recv) {
		f->wc_order += seq - w->head;
		w->head = seq + 1;
		return s;
	}
	if (s->done)
		return NULL;
	for (uint32_t i = w->head; i != seq; i++) {
		const struct rc_slot *o = &w->ring[i & w->mask];

		if (o->signaled && !o->done) {
			f->wc_order++;
			break;
		}
	}
	s->done = true;
	w->ahead++;
	qsm_rc_wq_catch_up(w);
	return s;
}

struct rc_slot *qsm_rc_wq_take_slow(struct rc_fabric *f, struct rc_wq *w, bool recv, uint32_t seq)
{
	if (seq == w->head || seq - w->head >= w->tail - w->head)
		return NULL;   /* the head's with nothing posted, or outside head..tail-1 */
	return wq_skip_to(f, w, recv, seq);
}
