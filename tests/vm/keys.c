/* rdma-qsm VM test: a device's user queues can be made past the mmap key libsiw takes for
 * "no mapping" (tests/vm/siw-mmap-key.patch).  siw hands a user CQ, QP or SRQ to libsiw as
 * mmap keys, each the offset of the queue's pages; libsiw fails the create, errno untouched,
 * when a key equals SIW_INVAL_UOBJ_KEY (page 144), and the object that fits there next fails
 * too.  Found through tests/vm/edges.c: 14 passive queues whose QP could not be made (the
 * library's -ENOMEM: rdma_create_qp -1, errno 0), every retry as well.
 *
 *   keys [N]   N one-page CQs (300), then a CQ and 40 QPs on it, then all freed and made
 *              again (the freed pages reused), on the device $QSM_VM_DEV (siw0).
 * Prints each create that failed and "created C CQs and Q QPs, F failed"; exit 0 only if
 * none failed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#define NQPS 40

static unsigned made_cqs, made_qps, failed;

static struct ibv_cq *cq_new(struct ibv_context *c, int cqe, int i)
{
	struct ibv_cq *cq;

	errno = 0;
	cq = ibv_create_cq(c, cqe, NULL, NULL, 0);
	if (!cq) {
		printf("   CQ %d (%d entries): failed, errno %d\n", i, cqe, errno);
		failed++;
		return NULL;
	}
	made_cqs++;
	return cq;
}

/* One round: n CQs, a CQ with NQPS QPs on it; what was made goes to cqs[] and qps[]. */
static void round_make(struct ibv_context *c, struct ibv_pd *pd, int n, struct ibv_cq **cqs,
		       struct ibv_qp **qps)
{
	for (int i = 0; i < n; i++)
		cqs[i] = cq_new(c, 64, i);
	cqs[n] = cq_new(c, 1024, n);
	for (int i = 0; i < NQPS && cqs[n]; i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = cqs[n], .recv_cq = cqs[n], .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
		};

		errno = 0;
		qps[i] = ibv_create_qp(pd, &a);
		if (!qps[i]) {
			printf("   QP %d: failed, errno %d\n", i, errno);
			failed++;
		} else {
			made_qps++;
		}
	}
}

static void round_free(int n, struct ibv_cq **cqs, struct ibv_qp **qps)
{
	for (int i = 0; i < NQPS; i++)
		if (qps[i])
			ibv_destroy_qp(qps[i]);
	for (int i = 0; i <= n; i++)
		if (cqs[i])
			ibv_destroy_cq(cqs[i]);
	memset(qps, 0, NQPS * sizeof(*qps));
	memset(cqs, 0, (size_t)(n + 1) * sizeof(*cqs));
}

int main(int argc, char **argv)
{
	const char *name = getenv("QSM_VM_DEV") ? getenv("QSM_VM_DEV") : "siw0";
	int n = argc > 1 ? atoi(argv[1]) : 300, num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct ibv_context *c = NULL;
	struct ibv_qp *qps[NQPS] = { 0 };
	struct ibv_cq **cqs;
	struct ibv_pd *pd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; list && i < num && !c; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			c = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (n < 1 || !c || !(pd = ibv_alloc_pd(c)) || !(cqs = calloc((size_t)n + 1, sizeof(*cqs)))) {
		printf("FAIL: device %s (or N %d): not opened\n", name, n);
		return 1;
	}
	for (int r = 0; r < 2; r++) {
		round_make(c, pd, n, cqs, qps);
		round_free(n, cqs, qps);
	}
	printf("created %u CQs and %u QPs on %s, %u failed\n", made_cqs, made_qps, name, failed);
	free(cqs);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	printf("%s\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
