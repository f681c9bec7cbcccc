/* rdma-qsm: the layout of every public struct (size, and each field's offset and size) and the
 * value of every public constant, one line each, for tests/abi.test to hold against abi/libqsm.layout. */
#include <stddef.h>
#include <stdio.h>

#include <qsm/qsm.h>
#include <qsm/rdmacm.h>
#include <qsm/sim.h>

#define S(t) printf("struct %s size %zu align %zu\n", #t, sizeof(struct t), _Alignof(struct t))
#define F(t, f) printf("struct %s.%s offset %zu size %zu\n", #t, #f, offsetof(struct t, f), \
		       sizeof(((struct t *)0)->f))
#define C(c) printf("const %s %lld\n", #c, (long long)(c))

int main(void)
{
	S(qsm_event_info);
	F(qsm_event_info, event); F(qsm_event_info, status); F(qsm_event_info, from);
	F(qsm_event_info, to); F(qsm_event_info, private_data); F(qsm_event_info, private_data_len);
	S(qsm_state_handlers);
	F(qsm_state_handlers, enter); F(qsm_state_handlers, exit); F(qsm_state_handlers, on_event);
	S(qsm_srq_caps);
	F(qsm_srq_caps, max_wr); F(qsm_srq_caps, max_sge); F(qsm_srq_caps, limit); F(qsm_srq_caps, reserved);
	S(qsm_qp_caps);
	F(qsm_qp_caps, max_send_wr); F(qsm_qp_caps, max_recv_wr); F(qsm_qp_caps, max_send_sge);
	F(qsm_qp_caps, max_recv_sge); F(qsm_qp_caps, max_inline_data); F(qsm_qp_caps, reserved);
	S(qsm_class);
	F(qsm_class, comp_mask); F(qsm_class, name); F(qsm_class, super); F(qsm_class, priv_size);
	F(qsm_class, active); F(qsm_class, passive); F(qsm_class, unexpected);
	F(qsm_class, device_removed); F(qsm_class, qp_ready); F(qsm_class, completion);
	F(qsm_class, release); F(qsm_class, qp); F(qsm_class, srq); F(qsm_class, srq_low);
	S(qsm_reconnect_policy);
	F(qsm_reconnect_policy, initial_delay_ms); F(qsm_reconnect_policy, max_delay_ms);
	F(qsm_reconnect_policy, multiplier_pct); F(qsm_reconnect_policy, jitter_pct);
	F(qsm_reconnect_policy, max_attempts); F(qsm_reconnect_policy, loss_timeout_ms);
	F(qsm_reconnect_policy, max_exhausted); F(qsm_reconnect_policy, reserved);
	S(qsm_timeouts);
	F(qsm_timeouts, resolve_ms); F(qsm_timeouts, connect_ms); F(qsm_timeouts, handshake_ms);
	F(qsm_timeouts, disconnect_ms); F(qsm_timeouts, drain_ms); F(qsm_timeouts, request_ms);
	F(qsm_timeouts, keepalive_ms); F(qsm_timeouts, reserved);
	S(qsm_counters);
	F(qsm_counters, events); F(qsm_counters, fabric_events); F(qsm_counters, popped);
	F(qsm_counters, dispatched); F(qsm_counters, transitions); F(qsm_counters, unexpected);
	F(qsm_counters, dropped); F(qsm_counters, orphans); F(qsm_counters, reconnects);
	F(qsm_counters, device_removals); F(qsm_counters, aborts); F(qsm_counters, action_errors);
	F(qsm_counters, completions); F(qsm_counters, queues_live); F(qsm_counters, devices_live);
	F(qsm_counters, device_closes); F(qsm_counters, fifo_bytes); F(qsm_counters, exhausted);
	F(qsm_counters, srqs_live);
	S(qsm_trace_record);
	F(qsm_trace_record, time_ns); F(qsm_trace_record, kind); F(qsm_trace_record, class_name);
	F(qsm_trace_record, id); F(qsm_trace_record, from); F(qsm_trace_record, event);
	F(qsm_trace_record, to); F(qsm_trace_record, status);
	S(qsm_ctx_opts);
	F(qsm_ctx_opts, comp_mask); F(qsm_ctx_opts, fabric); F(qsm_ctx_opts, seed);
	F(qsm_ctx_opts, now_ns); F(qsm_ctx_opts, now_arg);
	S(qsm_conn_opts);
	F(qsm_conn_opts, comp_mask); F(qsm_conn_opts, cls); F(qsm_conn_opts, dst); F(qsm_conn_opts, src);
	F(qsm_conn_opts, policy); F(qsm_conn_opts, timeouts); F(qsm_conn_opts, private_data);
	F(qsm_conn_opts, private_data_len); F(qsm_conn_opts, user);
	S(qsm_listener_opts);
	F(qsm_listener_opts, comp_mask); F(qsm_listener_opts, addr); F(qsm_listener_opts, cls);
	F(qsm_listener_opts, backlog); F(qsm_listener_opts, relisten); F(qsm_listener_opts, timeouts);
	F(qsm_listener_opts, user);
	S(qsm_edge);
	F(qsm_edge, target); F(qsm_edge, nactions); F(qsm_edge, actions);
	S(qsm_state_info);
	F(qsm_state_info, timeout); F(qsm_state_info, drains); F(qsm_state_info, rejects_on_teardown);
	F(qsm_state_info, retiring); F(qsm_state_info, after_cm); F(qsm_state_info, reserved);
	S(qsm_sge);
	F(qsm_sge, addr); F(qsm_sge, length); F(qsm_sge, lkey);
	S(qsm_wc);
	F(qsm_wc, wr_id); F(qsm_wc, status); F(qsm_wc, opcode); F(qsm_wc, byte_len);
	F(qsm_wc, imm_data); F(qsm_wc, invalidated_rkey); F(qsm_wc, wc_flags);
	S(qsm_wr);
	F(qsm_wr, wr_id); F(qsm_wr, opcode); F(qsm_wr, sg_list); F(qsm_wr, num_sge);
	F(qsm_wr, remote_addr); F(qsm_wr, rkey); F(qsm_wr, flags); F(qsm_wr, imm_data); F(qsm_wr, reserved);
	S(qsm_verbs);
	F(qsm_verbs, cm_id); F(qsm_verbs, qp); F(qsm_verbs, pd); F(qsm_verbs, reserved);
	S(qsm_sim_stats);
	F(qsm_sim_stats, ids); F(qsm_sim_stats, qps); F(qsm_sim_stats, device_refs); F(qsm_sim_stats, mrs);
	F(qsm_sim_stats, srqs); F(qsm_sim_stats, mws); F(qsm_sim_stats, events_pending);
	F(qsm_sim_stats, events_delivered); F(qsm_sim_stats, events_dropped);
	F(qsm_sim_stats, ids_leaked); F(qsm_sim_stats, reserved);
	/* Every enum constant and valued #define of the public headers: built binaries carry them. */
#include "abi_constants.h"
	return 0;
}
