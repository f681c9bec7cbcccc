/* rdma-qsm VM test: the fabric contract (tests/contract.c) on the rdmacm fabric, over the kernel's
 * soft-RoCE or soft-iWARP device: the same cases the sim passes in make check, with real time and
 * bounded waits, and iWARP's facts where its device's transport type is iWARP.
 *
 * Run by tests/vm/scenarios/contract.sh inside the VM (one rxe or siw device; client and server
 * fabrics in this process, both on QSM_VM_ADDR).  Environment: QSM_VM_ADDR (192.0.2.1), QSM_VM_DEV
 * (rxe0), QSM_CONTRACT_PORT (7479).  Exit 0 only if every case passed.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The transport of device @name as verbs reports it (soft-iWARP: IBV_TRANSPORT_IWARP, node type
 * RNIC); -1: no such device. */
static int transport_of(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	int t = -1;

	for (int i = 0; list && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			t = list[i]->transport_type;
	if (list)
		ibv_free_device_list(list);
	return t;
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
	rdmacm.iwarp = transport_of(rdmacm.cli_dev) == IBV_TRANSPORT_IWARP;
	/* soft-iWARP reports no QP state: 6.1's siw_query_qp fills caps and access flags only, so
	 * every QP reads RESET (`rdma res show qp` too); the QP checks have nothing to read */
	if (rdmacm.iwarp)
		rdmacm.qp_state = NULL;
	printf("contract: %s is %s\n", rdmacm.cli_dev, rdmacm.iwarp ? "iWARP" : "IB/RoCE");
	fflush(stdout);
	return contract_main(fixtures, 1, NULL);
}
