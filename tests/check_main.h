/* rdma-qsm tests: the one main() every Check suite uses.
 * QSM_CHECK_MAIN(f) runs the suite that f() builds and exits non-zero on any failure. */
#ifndef QSM_CHECK_MAIN_H
#define QSM_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

#define QSM_CHECK_MAIN(suite_fn) \
	int main(void) \
	{ \
		SRunner *sr = srunner_create(suite_fn()); \
		int failed; \
		srunner_run_all(sr, CK_NORMAL); \
		failed = srunner_ntests_failed(sr); \
		srunner_free(sr); \
		return failed ? EXIT_FAILURE : EXIT_SUCCESS; \
	}

#endif
