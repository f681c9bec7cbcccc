/* rdma-qsm model test under allocation failure (tests/check_model_alloc, issue 15): every Nth
 * malloc, calloc or realloc the library makes while it dispatches fails -- a passive queue made
 * at a request, a device's registry entry, whatever a step allocates -- while the model's own
 * calls (the ULP's: a registration, a downcall, a new queue) and the sim's allocations
 * (qsm_sim_allocating) are left alone, so that the model's expectations of them stand.  No
 * event may be lost: the model's invariants hold after every step, every queue ends. */
#include <stdbool.h>
#include <stdlib.h>

#include "model.h"
#include "fabric/sim/world.h"

/* The library's malloc, calloc and realloc, renamed in its copy (tests/libqsm_alloc.a). */
void *model_lib_malloc(size_t n);
void *model_lib_calloc(size_t k, size_t n);
void *model_lib_realloc(void *p, size_t n);

static unsigned every, in_dispatch, in_api;
unsigned long alloc_seen, alloc_failed;

void model_alloc_every(unsigned n)
{
	every = n;
}

static bool fail_now(void)
{
	if (!in_dispatch || in_api || qsm_sim_allocating || !every)
		return false;
	alloc_seen++;
	if (alloc_seen % every)
		return false;
	alloc_failed++;
	return true;
}

void *model_lib_malloc(size_t n)
{
	return fail_now() ? NULL : malloc(n);
}

void *model_lib_calloc(size_t k, size_t n)
{
	return fail_now() ? NULL : calloc(k, n);
}

void *model_lib_realloc(void *p, size_t n)
{
	return fail_now() ? NULL : realloc(p, n);
}

/* The library's dispatch: its allocations may fail. */
int __real_qsm_ctx_dispatch(struct qsm_ctx *c, unsigned int budget);
int __wrap_qsm_ctx_dispatch(struct qsm_ctx *c, unsigned int budget);
int __wrap_qsm_ctx_dispatch(struct qsm_ctx *c, unsigned int budget)
{
	int r;

	in_dispatch++;
	r = __real_qsm_ctx_dispatch(c, budget);
	in_dispatch--;
	return r;
}

/* The ULP's calls (the model's, from its handlers too): not failed, whatever they allocate. */
#define API(ret, name, params, args) \
	ret __real_##name params; \
	ret __wrap_##name params; \
	ret __wrap_##name params \
	{ \
		ret r; \
		in_api++; \
		r = __real_##name args; \
		in_api--; \
		return r; \
	}
API(int, qsm_conn_reg_mr, (struct qsm_conn *q, void *addr, size_t len, int access, struct qsm_mr **mr),
    (q, addr, len, access, mr))
API(int, qsm_conn_connect, (struct qsm_conn *q), (q))
API(int, qsm_conn_disconnect, (struct qsm_conn *q), (q))
API(int, qsm_conn_ready, (struct qsm_conn *q), (q))
API(int, qsm_conn_accept, (struct qsm_conn *q, const void *p, size_t len), (q, p, len))
API(int, qsm_conn_reject, (struct qsm_conn *q, const void *p, size_t len), (q, p, len))
API(int, qsm_conn_destroy, (struct qsm_conn *q), (q))
API(int, qsm_listener_destroy, (struct qsm_listener *l), (l))
