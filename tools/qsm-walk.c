/* qsm-walk: replay named events through one of the library's machines and print each
 * step (state --EVENT / actions--> state), or "unexpected"; a ULP author's what-if tool. */
#include <errno.h>
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

int main(int argc, char **argv)
{
	int m, state, unexpected = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: qsm-walk cm_id|accept|listener|qp EVENT...\n");
		return 2;
	}
	m = machine_by_name(argv[1]);
	if (m < 0) {
		fprintf(stderr, "qsm-walk: no machine named '%s'\n", argv[1]);
		return 2;
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
