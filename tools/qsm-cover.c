/* rdma-qsm: edge coverage.  Merges the files QSM_COVERAGE=FILE makes ctxs write (one line per
 * edge a ctx took: "machine from event to count", qsm_ctx_write_dot(3)) and holds them against the
 * machines' own edges (qsm_machine_next(3), so it never drifts from the library):
 *   qsm-cover [-n NAME] FILE...          one line, "edge coverage NAME cm_id T/N accept T/N ...",
 *                                        then the edges never taken, one per line
 *   qsm-cover -d MACHINE FILE...         that machine as dot, the edges taken bold with their
 *                                        counts, the others dashed
 * Exit 0; 1 when a file cannot be read or names an edge the machines do not have; 2: usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <qsm/events.h>
#include <qsm/machine.h>

#define STATES 16
#define EVENTS 128

static unsigned long long count[QSM_MACHINE_COUNT][STATES][EVENTS];

static int machine_of(const char *name)
{
	for (int m = 0; m < QSM_MACHINE_COUNT; m++)
		if (!strcmp(qsm_machine_name((enum qsm_machine)m), name))
			return m;
	return -1;
}

static int state_of(int m, const char *name)
{
	for (int s = 0; s < qsm_machine_state_count((enum qsm_machine)m) && s < STATES; s++)
		if (!strcmp(qsm_state_name((enum qsm_machine)m, s), name))
			return s;
	return -1;
}

static int read_file(const char *path)
{
	char mn[64], from[64], ev[64], to[64];
	unsigned long long n;
	int line = 0, bad = 0;
	FILE *f = fopen(path, "r");

	if (!f) {
		fprintf(stderr, "qsm-cover: cannot read %s\n", path);
		return -1;
	}
	while (fscanf(f, "%63s %63s %63s %63s %llu", mn, from, ev, to, &n) == 5) {
		int m = machine_of(mn), s = m < 0 ? -1 : state_of(m, from), e = qsm_event_from_name(ev);

		line++;
		if (m < 0 || s < 0 || e < 0 || e >= EVENTS || qsm_machine_next((enum qsm_machine)m, s, e, NULL) < 0 ||
		    state_of(m, to) != qsm_machine_next((enum qsm_machine)m, s, e, NULL)) {
			fprintf(stderr, "qsm-cover: %s:%d: no such edge: %s %s %s %s\n", path, line, mn, from, ev, to);
			bad = 1;
			continue;
		}
		count[m][s][e] += n;
	}
	fclose(f);
	return bad ? -1 : 0;
}

static void draw(int m)
{
	const char *mn = qsm_machine_name((enum qsm_machine)m);

	printf("digraph %s_coverage {\n\trankdir=LR;\n\tnode [shape=box, style=rounded, fontname=Helvetica];\n"
	       "\tedge [fontname=Helvetica, fontsize=9];\n", mn);
	for (int s = 0; s < qsm_machine_state_count((enum qsm_machine)m) && s < STATES; s++)
		for (int e = 0; e < EVENTS && e < QSM_EV_LIMIT; e++) {
			int to = qsm_machine_next((enum qsm_machine)m, s, e, NULL);

			if (to < 0)
				continue;
			printf("\t\"%s\" -> \"%s\" [label=\"%s %llu\"%s];\n", qsm_state_name((enum qsm_machine)m, s),
			       qsm_state_name((enum qsm_machine)m, to), qsm_event_name(e), count[m][s][e],
			       count[m][s][e] ? ", penwidth=2.5" : ", style=dashed, color=gray50");
		}
	printf("}\n");
}

int main(int argc, char **argv)
{
	const char *name = "", *dot = NULL;
	int opt, bad = 0;

	while ((opt = getopt(argc, argv, "n:d:")) != -1) {
		if (opt == 'n')
			name = optarg;
		else if (opt == 'd')
			dot = optarg;
		else
			return 2;
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: qsm-cover [-n NAME | -d MACHINE] FILE...\n");
		return 2;
	}
	for (int i = optind; i < argc; i++)
		bad |= read_file(argv[i]) < 0;
	if (dot) {
		int m = machine_of(dot);

		if (m < 0) {
			fprintf(stderr, "qsm-cover: no machine %s\n", dot);
			return 2;
		}
		draw(m);
		return bad;
	}
	printf("edge coverage%s%s", *name ? " " : "", name);
	for (int m = 0; m < QSM_MACHINE_COUNT; m++) {
		unsigned taken = 0, total = 0;

		for (int s = 0; s < qsm_machine_state_count((enum qsm_machine)m) && s < STATES; s++)
			for (int e = 0; e < EVENTS && e < QSM_EV_LIMIT; e++)
				if (qsm_machine_next((enum qsm_machine)m, s, e, NULL) >= 0) {
					total++;
					taken += count[m][s][e] > 0;
				}
		printf(" %s %u/%u", qsm_machine_name((enum qsm_machine)m), taken, total);
	}
	printf("\n");
	for (int m = 0; m < QSM_MACHINE_COUNT; m++)
		for (int s = 0; s < qsm_machine_state_count((enum qsm_machine)m) && s < STATES; s++)
			for (int e = 0; e < EVENTS && e < QSM_EV_LIMIT; e++) {
				int to = qsm_machine_next((enum qsm_machine)m, s, e, NULL);

				if (to >= 0 && !count[m][s][e])
					printf("  never taken: %s %s --%s--> %s\n", qsm_machine_name((enum qsm_machine)m),
					       qsm_state_name((enum qsm_machine)m, s), qsm_event_name(e),
					       qsm_state_name((enum qsm_machine)m, to));
			}
	return bad;
}
