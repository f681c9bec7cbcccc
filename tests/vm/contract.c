/* rdma-qsm VM test: the fabric contract (tests/contract.c) on the rdmacm fabric, over the kernel's
 * soft-RoCE device: the same cases the sim passes in make check, with real time and bounded waits.
 *
 * Run by tests/vm/scenarios/contract.sh inside the VM (one rxe device; client and server fabrics in
 * this process, both on QSM_VM_ADDR).  Environment: QSM_VM_ADDR (192.0.2.1), QSM_VM_DEV (rxe0),
 * QSM_CONTRACT_PORT (7479).  Exit 0 only if every case passed.
 */
#include <check.h>
#include <stdlib.h>

#include <qsm/machine.h>
#include <qsm/rdmacm.h>

#include "contract.h"
#include "fabric/rdmacm/rdmacm.h"   /* the fabric's ids, to find an owner's QP */

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return v && *v ? v : dflt;
}

static void rdmacm_setup(struct qsm_fabric **c, struct qsm_fabric **s)
{
	ck_assert_int_eq(qsm_rdmacm_fabric_new(c), 0);
	ck_assert_int_eq(qsm_rdmacm_fabric_new(s), 0);
}

/* The QP state the kernel reports (ibv_query_qp) for the QP of @owner's id on @f; -1: none. */
static int rdmacm_qp_state(struct qsm_fabric *f, void *owner)
{
	static const int state[] = { [IBV_QPS_RESET] = QSM_QP_RESET, [IBV_QPS_INIT] = QSM_QP_INIT,
				     [IBV_QPS_RTR] = QSM_QP_RTR, [IBV_QPS_RTS] = QSM_QP_RTS,
				     [IBV_QPS_SQD] = QSM_QP_SQD, [IBV_QPS_SQE] = QSM_QP_SQE,
				     [IBV_QPS_ERR] = QSM_QP_ERR };
	struct rc_fabric *rf = to_fab(f);
	struct qsm_list *pos, *tmp;

	qsm_list_each(pos, tmp, &rf->ids) {
		struct qsm_fid *id = qsm_container_of(pos, struct qsm_fid, node);
		struct ibv_qp_attr attr;
		struct ibv_qp_init_attr init;

		if (id->owner != owner || !id->cm->qp)
			continue;
		if (ibv_query_qp(id->cm->qp, &attr, IBV_QP_STATE, &init))
			return -1;
		return (unsigned)attr.qp_state < sizeof(state) / sizeof(state[0]) ? state[attr.qp_state] : -1;
	}
	return -1;
}

int main(void)
{
	static struct contract_fixture rdmacm = {
		.name = "rdmacm",
		.event_wait_ms = 10000,    /* TIMEWAIT_EXIT takes the CM's timewait, well under this */
		.quiet_ms = 300,
		.fd_exact = false,         /* the contract allows spurious wake-ups */
		.case_timeout_s = 120,
		.setup = rdmacm_setup,
		.qp_state = rdmacm_qp_state,
		/* no check_clean or check_no_pending: the kernel keeps no count we can read */
	};
	static const struct contract_fixture *const fixtures[] = { &rdmacm };

	rdmacm.cli_ip = rdmacm.srv_ip = env_or("QSM_VM_ADDR", "192.0.2.1");
	rdmacm.cli_dev = rdmacm.srv_dev = env_or("QSM_VM_DEV", "rxe0");
	rdmacm.port = (uint16_t)atoi(env_or("QSM_CONTRACT_PORT", "7479"));
	return contract_main(fixtures, 1, NULL);
}
