/* rdma-qsm build tool: writes sm/edges.h, every edge of the five compiled machines as an
 * X-macro list, so that the runtime compiles each (state, event) into straight-line code. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "sm.h"

/*
 * For each machine M, sm/edges.h defines QSM_SWITCH_M(state, event, EDGE, A, NO_EDGE): a
 * switch on the state holding a switch on the event, with one
 *     EDGE(from, event, to, timeout, final, A(action) A(action) ...)
 * per edge (so EDGE starts with `case (event):`), the enum names of the states, the event and
 * the actions, `timeout` the step timeout the target state arms on arrival (QSM_STEP_*),
 * `final` 1 when the target is the machine's final state, and NO_EDGE what no edge does; and
 * qsm_edges_m_has(state, event) from the same switch.  It walks the machines Ragel
 * compiled (their exec), so it is exact whatever the .rl's expressions look like; and it pins
 * each state's enum value to its place in the machine's names, both written from the machine's
 * table of states (sm/states.awk), so that a hand edit of either cannot drift.
 */

static const char *const prefix[QSM_MACHINE_COUNT] = {
	[QSM_MACHINE_CM_ID] = "QSM_CM_",
	[QSM_MACHINE_ACCEPT] = "QSM_ACCEPT_",
	[QSM_MACHINE_LISTENER] = "QSM_LISTENER_",
	[QSM_MACHINE_QP] = "QSM_QP_",
	[QSM_MACHINE_DEVICE] = "QSM_DEVICE_",
};

static const char *const timeout_names[QSM_STEP_COUNT] = {
	[QSM_STEP_NONE] = "QSM_STEP_NONE",
	[QSM_STEP_RESOLVE] = "QSM_STEP_RESOLVE",
	[QSM_STEP_CONNECT] = "QSM_STEP_CONNECT",
	[QSM_STEP_REQUEST] = "QSM_STEP_REQUEST",
	[QSM_STEP_HANDSHAKE] = "QSM_STEP_HANDSHAKE",
	[QSM_STEP_DISCONNECT] = "QSM_STEP_DISCONNECT",
	[QSM_STEP_DRAIN] = "QSM_STEP_DRAIN",
	[QSM_STEP_KEEPALIVE] = "QSM_STEP_KEEPALIVE",
};

static void upper(char *dst, size_t n, const char *src)
{
	size_t i;

	for (i = 0; src[i] && i + 1 < n; i++)
		dst[i] = (char)toupper((unsigned char)src[i]);
	dst[i] = '\0';
}

static void upper_name(const char *s)
{
	char buf[64];

	upper(buf, sizeof(buf), s);
	fputs(buf, stdout);
}

/* One edge of sm (state s, event ev), or -1: none. */
static int edge_of(const struct qsm_sm *sm, int s, int ev, struct qsm_edge *e)
{
	int cs = qsm_sm_cs(sm, s);

	/* a final state takes no event (its .rl says zlen), whatever exec says */
	if (cs < 0 || s == sm->final_state || sm->exec(&cs, ev, e) < 0 || e->target < 0 ||
	    e->target >= sm->nstates)
		return -1;
	return 0;
}

/* EDGE(from, ...), or EDGE(n, from, ...) when the edge is numbered (n > 0) */
static void print_edge(enum qsm_machine m, const struct qsm_sm *sm, int s, int ev,
		       const struct qsm_edge *e, const char *indent, int n)
{
	printf("%sEDGE(", indent);
	if (n > 0)
		printf("%d, ", n);
	printf("%s%s, QSM_EV_%s, %s%s, %s, %d,", prefix[m], sm->state_names[s],
	       qsm_event_name(ev), prefix[m], sm->state_names[e->target],
	       timeout_names[sm->facts[e->target].timeout], e->target == sm->final_state);
	for (unsigned int i = 0; i < e->nactions; i++) {
		printf(" A(QSM_ACT_");
		upper_name(qsm_action_name(e->actions[i]));
		printf(")");
	}
	printf(") \\\n");
}

static int machine(enum qsm_machine m)
{
	const struct qsm_sm *sm = qsm_sm_get(m);
	struct qsm_edge e;
	int edges = 0;

	printf("\n/* %s: sm/%s.rl */\n", sm->name, sm->name);
	for (int s = 0; s < sm->nstates; s++) {
		if (qsm_sm_cs(sm, s) < 0) {
			fprintf(stderr, "qsm-edges: %s: state %s unreachable\n", sm->name,
				sm->state_names[s]);
			return -1;
		}
		printf("_Static_assert(%s%s == %d, \"sm/%s.rl numbers %s as %d\");\n", prefix[m],
		       sm->state_names[s], s, sm->name, sm->state_names[s], s);
	}

	/* the step: a switch on the state, in each a switch on the event, one case an edge */
	printf("#define QSM_SWITCH_");
	upper_name(sm->name);
	printf("(state, event, EDGE, A, NO_EDGE) \\\n\tswitch (state) { \\\n");
	for (int s = 0; s < sm->nstates; s++) {
		printf("\tcase %s%s: \\\n\t\tswitch (event) { \\\n", prefix[m], sm->state_names[s]);
		for (int ev = 1; ev < QSM_EV_LIMIT; ev++)
			if (edge_of(sm, s, ev, &e) == 0) {
				print_edge(m, sm, s, ev, &e, "\t\t", 0);
				edges++;
			}
		printf("\t\tdefault: \\\n\t\t\tNO_EDGE; \\\n\t\t} \\\n\t\tbreak; \\\n");
	}
	printf("\tdefault: \\\n\t\tNO_EDGE; \\\n\t}\n/* %d edges */\n\n", edges);

	/* the same edges numbered 1..n as a list, and a table (state, event) -> number, 0 for
	 * none: a step is one load from the table and a call through an array of functions,
	 * one compiled per edge */
	printf("#define QSM_EDGES_");
	upper_name(sm->name);
	printf("(EDGE, A) \\\n");
	for (int s = 0, n = 0; s < sm->nstates; s++)
		for (int ev = 1; ev < QSM_EV_LIMIT; ev++)
			if (edge_of(sm, s, ev, &e) == 0)
				print_edge(m, sm, s, ev, &e, "\t", ++n);
	printf("\n#define QSM_EDGE_COUNT_");
	upper_name(sm->name);
	printf(" %d\n", edges);
	printf("static const uint8_t qsm_edge_index_%s[%d][QSM_EDGE_ROW] = {\n", sm->name, sm->nstates);
	for (int s = 0, n = 0; s < sm->nstates; s++) {
		printf("\t[%s%s] = {", prefix[m], sm->state_names[s]);
		for (int ev = 1; ev < QSM_EV_LIMIT; ev++)
			if (edge_of(sm, s, ev, &e) == 0)
				printf(" [QSM_EV_%s] = %d,", qsm_event_name(ev), ++n);
		printf(" },\n");
	}
	printf("};\n_Static_assert(%d < 256, \"an edge's number fits a byte\");\n\n", edges);

	/* a state fact the steps need as a constant of the edge (sm.h, after_cm) */
	printf("#define QSM_AFTER_CM_");
	upper_name(sm->name);
	printf("(s) (0");
	for (int s = 0; s < sm->nstates; s++)
		if (sm->facts[s].after_cm)
			printf(" || (s) == %s%s", prefix[m], sm->state_names[s]);
	printf(")\n");

	/* whether an edge is there (a downcall's -ENOMSG, the registry's fan-out) */
	printf("static inline bool qsm_edges_%s_has(int state, int event)\n{\n\tQSM_SWITCH_",
	       sm->name);
	upper_name(sm->name);
	printf("(state, event, QSM_EDGE_HAS, QSM_EDGE_NO_ACTION, return false)\n}\n");
	return 0;
}

int main(void)
{
	printf("/* sm/edges.h: written by tools/qsm-edges from the compiled machines (sm/\\*.rl).\n"
	       " * Do not edit: change the .rl, and the build writes this again. */\n"
	       "#ifndef QSM_SM_EDGES_H\n#define QSM_SM_EDGES_H\n\n#include \"sm.h\"\n\n"
	       "/* a row of qsm_edge_index_M: every event, rounded up to a power of two (a shift) */\n"
	       "#define QSM_EDGE_ROW 128\n"
	       "_Static_assert(QSM_EV_LIMIT <= QSM_EDGE_ROW, \"a row holds every event\");\n");
	for (int m = 0; m < QSM_MACHINE_COUNT; m++)
		if (machine((enum qsm_machine)m) < 0)
			return 1;
	printf("\n/* whether machine m has an edge for (state, event) */\n"
	       "static inline bool qsm_edges_has(enum qsm_machine m, int state, int event)\n{\n"
	       "\tswitch (m) {\n");
	for (int m = 0; m < QSM_MACHINE_COUNT; m++)
		printf("\tcase %d:\n\t\treturn qsm_edges_%s_has(state, event);\n", m,
		       qsm_sm_get((enum qsm_machine)m)->name);
	printf("\tdefault:\n\t\treturn false;\n\t}\n}\n\n#endif\n");
	return fflush(stdout) ? 1 : 0;
}
