/* rdma-qsm fuzzing: what the model's and the harness's checks (Check's ck_assert_* and
 * ck_abort_msg) call, without Check: a failed check prints its message and aborts, so that
 * libFuzzer reports the input as a crash.  Linked instead of libcheck into the fuzz targets. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void _mark_point(const char *file, int line)
{
	(void)file;
	(void)line;
}

void _ck_assert_failed(const char *file, int line, const char *expr, const char *msg, ...)
{
	va_list ap;

	fprintf(stderr, "qsm fuzz: check failed at %s:%d: ", file, line);
	if (msg) {
		va_start(ap, msg);
		vfprintf(stderr, msg, ap);
		va_end(ap);
	} else {
		fputs(expr, stderr);
	}
	fputc('\n', stderr);
	abort();
}
