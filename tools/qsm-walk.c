/* qsm-walk: replay named events through one of the library's machines and print each
 * step (state --EVENT / actions--> state), or "unexpected"; a ULP author's what-if tool.
 * `qsm-walk --edges [MACHINE]` lists every edge instead, one per line:
 *     MACHINE STATE EVENT TARGET ACTION,ACTION   (`-`: no action)
 * in state, then event, order (tests/man.test holds qsm-machines(7) to it). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <qsm/machine.h>

static int machine_by_name(const char *name)
{
	for (int m = 0; m < QSM_MACHINE_COUNT; m++)
		if (strcmp(name, qsm_machine_name(m)) == 0)
			return m;
	return -EINVAL;
}

/* Every edge of machine @m, as the header says. */
static void edges(int m)
{
	for (int s = 0; s < qsm_machine_state_count(m); s++)
		for (int ev = 0; ev < QSM_EV_LIMIT; ev++) {
			struct qsm_edge e;
			int to = qsm_machine_next(m, s, ev, &e);

			if (to < 0)
				continue;
			printf("%s %s %s %s ", qsm_machine_name(m), qsm_state_name(m, s), qsm_event_name(ev),
			       qsm_state_name(m, to));
			for (unsigned int a = 0; a < e.nactions; a++)
				printf("%s%s", a ? "," : "", qsm_action_name(e.actions[a]));
			printf("%s\n", e.nactions ? "" : "-");
		}
}

int main(int argc, char **argv)
{
	int m, state, unexpected = 0;

	bool list = argc >= 2 && strcmp(argv[1], "--edges") == 0;
	const char *name = list ? (argc > 2 ? argv[2] : NULL) : argc > 1 ? argv[1] : NULL;

	if (!list && !name) {
		fprintf(stderr, "usage: qsm-walk cm_id|accept|listener|qp|device EVENT...\n"
				"       qsm-walk --edges [MACHINE]\n");
		return 2;
	}
	m = name ? machine_by_name(name) : 0;
	if (m < 0) {
		fprintf(stderr, "qsm-walk: no machine named '%s'\n", name);
		return 2;
	}
	if (list) {
		for (int k = name ? m : 0; k < (name ? m + 1 : QSM_MACHINE_COUNT); k++)
			edges(k);
		return 0;
	}
	state = qsm_machine_start_state(m);
	printf("%s: start in %s\n", argv[1], qsm_state_name(m, state));
	for (int i = 2; i < argc; i++) {
		int ev = qsm_event_from_name(argv[i]);
		struct qsm_edge e;
		int to;

		if (ev < 0) {
			fprintf(stderr, "qsm-walk: no event named '%s'\n", argv[i]);
			return 2;
		}
		to = qsm_machine_next(m, state, ev, &e);
		if (to == -ENOMSG) {
			printf("  %-15s --%s--> unexpected: stays %s\n", qsm_state_name(m, state), argv[i],
			       qsm_state_name(m, state));
			unexpected++;
			continue;
		}
		printf("  %-15s --%s", qsm_state_name(m, state), argv[i]);
		for (unsigned int a = 0; a < e.nactions; a++)
			printf("%s%s", a ? ", " : " / ", qsm_action_name(e.actions[a]));
		printf("--> %s\n", qsm_state_name(m, to));
		state = to;
	}
	printf("%s: ends in %s, %d unexpected\n", argv[1], qsm_state_name(m, state), unexpected);
	return 0;
}
