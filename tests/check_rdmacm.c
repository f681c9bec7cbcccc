/* rdma-qsm: the pieces of the rdmacm fabric (src/fabric_rdmacm.c) that need no RDMA device,
 * tested alone: how rdma_cm's events are named in the library's alphabet. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include <qsm/events.h>

#include "cm_event.h"

#include "check_main.h"

/* Every event this rdma-core defines, by name: librdmacm's own rdma_event_str() is the spec,
 * never the numbers, so the test cannot share a mistake with the mapping. */
START_TEST(test_every_known_cm_event_maps_to_the_qsm_event_of_its_name)
{
	int known = 0;

	for (int raw = 0; raw < 64; raw++) {
		const char *str = rdma_event_str((enum rdma_cm_event_type)raw);
		int ev = qsm_cm_event_map(raw);
		char want[64];

		if (strncmp(str, "RDMA_CM_EVENT_", 14) != 0) {
			/* librdmacm has no name for it: neither do we */
			ck_assert_int_eq(ev, QSM_EV_CM_UNKNOWN);
			continue;
		}
		known++;
		ck_assert_msg(qsm_event_name(ev) != NULL, "%s maps to %d, which has no name", str, ev);
		snprintf(want, sizeof(want), "RDMA_CM_EVENT_%s", qsm_event_name(ev));
		ck_assert_str_eq(want, str);
	}
	ck_assert_int_ge(known, RDMA_CM_EVENT_TIMEWAIT_EXIT + 1);
}
END_TEST

START_TEST(test_out_of_range_cm_event_maps_to_cm_unknown)
{
	const int raw[] = { -1, RDMA_CM_EVENT_TIMEWAIT_EXIT + 1, 95, 96, 1000, -1000, 0x7fffffff };

	for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
		int ev = qsm_cm_event_map(raw[i]);

		if (raw[i] >= 0 && raw[i] <= RDMA_CM_EVENT_TIMEWAIT_EXIT)
			continue;
		if (strncmp(rdma_event_str((enum rdma_cm_event_type)raw[i]), "RDMA_CM_EVENT_", 14) == 0)
			continue; /* a newer rdma-core knows it: the first test checks it */
		ck_assert_msg(ev == QSM_EV_CM_UNKNOWN, "raw %d maps to %d", raw[i], ev);
	}
	ck_assert_str_eq(qsm_event_name(QSM_EV_CM_UNKNOWN), "CM_UNKNOWN");
	ck_assert_int_lt(QSM_EV_CM_UNKNOWN, QSM_EV_LIMIT);
}
END_TEST

static Suite *rdmacm_suite(void)
{
	Suite *s = suite_create("rdmacm");
	TCase *t = tcase_create("cm_event");

	tcase_add_test(t, test_every_known_cm_event_maps_to_the_qsm_event_of_its_name);
	tcase_add_test(t, test_out_of_range_cm_event_maps_to_cm_unknown);
	suite_add_tcase(s, t);
	return s;
}

QSM_CHECK_MAIN(rdmacm_suite)
