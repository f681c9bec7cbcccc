/* rdma-qsm benchmarks: what the rdmacm fabric holds per QP, for the bytes-per-queue figure; a
 * file of its own, because rdmacm.h's struct qsm_fid is not the no-op fabric's (fabric.h). */
#include "fabric/rdmacm/rdmacm.h"

size_t bench_rdmacm_qp_bytes(uint32_t max_send_wr, uint32_t max_recv_wr);

size_t bench_rdmacm_qp_bytes(uint32_t max_send_wr, uint32_t max_recv_wr)
{
	return qsm_rc_qp_bytes(max_send_wr, max_recv_wr);
}
