/* rdma-qsm example: a ULP class that overrides three states of the base class -- login on
 * CONNECTED, fail I/O over in RECONNECT_WAIT, drop its memory on device removal -- on the sim. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <qsm/qsm.h>
#include <qsm/sim.h>

/* Per-queue state of the ULP: qsm allocates it (priv_size) next to the queue. */
struct session {
	unsigned logins;
	unsigned failovers;
	unsigned mrs_registered;
};

/* CONNECTED: the transport is up; run the ULP handshake, then say READY. */
static int session_connected(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct session *s = qsm_conn_priv(q);

	(void)ev;
	s->logins++;
	s->mrs_registered = 1; /* a real ULP registers its buffers on the device here */
	return qsm_conn_ready(q);
}

/* RECONNECT_WAIT: no cm_id.  Entered after every failed attempt too; only a loss of a
 * working session (from CONNECTED, LIVE or DRAINING) makes the upper layer fail I/O over. */
static int session_lost(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct session *s = qsm_conn_priv(q);

	if (ev->from != QSM_CM_CONNECTED && ev->from != QSM_CM_LIVE && ev->from != QSM_CM_DRAINING)
		return 0;
	printf("  session#%p lost (%s): failing I/O over\n", (void *)q, qsm_event_name(ev->event));
	s->failovers++;
	return 0;
}

/* The device is going away: drop what we registered on it, or the removal hangs. */
static int session_device_removed(struct qsm_conn *q, const struct qsm_event_info *ev)
{
	struct session *s = qsm_conn_priv(q);

	(void)ev;
	s->mrs_registered = 0;
	return 0;
}

static const struct qsm_class session_class = {
	.name = "session",
	.priv_size = sizeof(struct session),
	.active = {
		[QSM_CM_CONNECTED] = { .enter = session_connected },
		[QSM_CM_RECONNECT_WAIT] = { .enter = session_lost },
	},
	.device_removed = session_device_removed,
};

/* The server side keeps every default of the base class: accept, then LIVE. */
static const struct qsm_class target_class = { .name = "target" };

static void print_trace(const struct qsm_trace_record *r, void *arg)
{
	printf("  %-8s %s#%u %-15s --%s--> %s\n", (const char *)arg, r->class_name ? r->class_name : "-",
	       r->id, r->from, r->event, r->to ? r->to : "(unexpected)");
}

static void pump(struct qsm_ctx *a, struct qsm_ctx *b, int rounds)
{
	for (int i = 0; i < rounds; i++) {
		int n = qsm_ctx_dispatch(a, 0) + qsm_ctx_dispatch(b, 0);

		if (n == 0) {
			int ta = qsm_ctx_next_timeout_ms(a), tb = qsm_ctx_next_timeout_ms(b);

			if (ta < 0 && tb < 0)
				return;
			struct timespec ts = { 0, 2000000 };
			nanosleep(&ts, NULL);
		}
	}
}

int main(void)
{
	struct qsm_sim *sim;
	struct qsm_fabric *fs, *fc;
	struct qsm_ctx *server, *client;
	struct qsm_listener *l;
	struct qsm_conn *q;
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(4420) };
	struct session *s;
	int ok;

	inet_pton(AF_INET, "192.0.2.1", &addr.sin_addr);
	if (qsm_sim_new(&sim) || qsm_sim_device_add(sim, "sim0", "192.0.2.1") ||
	    qsm_sim_fabric_new(sim, &fs) || qsm_sim_fabric_new(sim, &fc))
		return 1;
	if (qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = fs }, &server) ||
	    qsm_ctx_new(&(struct qsm_ctx_opts){ .fabric = fc }, &client))
		return 1;
	qsm_ctx_set_trace(client, print_trace, "client");
	qsm_ctx_set_trace(server, print_trace, "server");
	if (qsm_listener_new(server, &(struct qsm_listener_opts){ .addr = (struct sockaddr *)&addr,
			     .cls = &target_class, .relisten = { .initial_delay_ms = 5 } }, &l))
		return 1;
	if (qsm_conn_new(client, &(struct qsm_conn_opts){ .cls = &session_class,
			 .dst = (struct sockaddr *)&addr, .policy = { .initial_delay_ms = 5, .max_delay_ms = 20 } }, &q))
		return 1;
	s = qsm_conn_priv(q);

	printf("== connect\n");
	qsm_conn_connect(q);
	pump(server, client, 200);
	printf("== remove the device\n");
	qsm_sim_device_remove(sim, "sim0");
	pump(server, client, 20);
	printf("   device is %s, session holds %u MRs\n",
	       qsm_sim_device_state(sim, "sim0") == QSM_SIM_DEVICE_GONE ? "GONE" : "still busy",
	       s->mrs_registered);
	printf("== add it back\n");
	qsm_sim_device_add(sim, "sim0", "192.0.2.1");
	pump(server, client, 400);

	ok = qsm_conn_state(q) == QSM_CM_LIVE && s->logins == 2 && s->failovers == 1;
	printf("== session is %s after %u logins, %u failover(s): %s\n", qsm_conn_state_name(q),
	       s->logins, s->failovers, ok ? "ok" : "FAILED");
	qsm_ctx_free(client);
	qsm_ctx_free(server);
	qsm_sim_free(sim);
	return ok ? 0 : 1;
}
