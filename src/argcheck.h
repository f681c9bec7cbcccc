/* rdma-qsm internal: argument checks at the API's doors.  A failed check returns a negative
 * errno to the caller; a debug build (./configure --enable-debug, QSM_DEBUG) says so on stderr. */
#ifndef QSM_ARGCHECK_H
#define QSM_ARGCHECK_H

#ifdef QSM_DEBUG
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A caller's bug made loud: one line, and abort() when QSM_DEBUG_ABORT is set (not "" or "0"). */
static inline void qsm_check_report(const char *func, const char *file, int line, const char *cond)
{
	const char *a = getenv("QSM_DEBUG_ABORT");

	fprintf(stderr, "qsm: %s: check failed: %s (%s:%d)\n", func, cond, file, line);
	if (a && *a && strcmp(a, "0") != 0)
		abort();
}
#define QSM_CHECK_REPORT(text) qsm_check_report(__func__, __FILE__, __LINE__, text)
#else
#define QSM_CHECK_REPORT(text) ((void)0)
#endif

/* cond, as an expression: 1 if it holds; else 0, reported in a debug build. */
#define qsm_checked(cond) (__builtin_expect(!!(cond), 1) ? 1 : (QSM_CHECK_REPORT(#cond), 0))

/* Return err (a negative errno, or NULL from a function returning a pointer) unless cond holds. */
#define qsm_check(cond, err) do { \
	if (!qsm_checked(cond)) \
		return (err); \
} while (0)

/* A caller-filled public struct's comp_mask (include/qsm/ctx.h, "Growing"): a bit beyond
 * @known comes from a binary built against a newer library, whose fields this one cannot
 * read: -EOPNOTSUPP.  The classes' has no bits: every field of 1.0 is there always; the queues'
 * and listeners' opts have QSM_OPTS_KEEPALIVE (their timeouts.keepalive_ms, after 0.2.0). */
#define QSM_COMP_MASK_KNOWN 0u
#define QSM_OPTS_MASK_KNOWN QSM_OPTS_KEEPALIVE
#define qsm_check_mask(mask, known) qsm_check(!((mask) & ~(uint32_t)(known)), -EOPNOTSUPP)

/* The class and every class up its super chain (qsm_class.comp_mask). */
#define qsm_check_class_mask(cls) do { \
	for (const struct qsm_class *k_ = (cls); k_; k_ = k_->super) \
		qsm_check_mask(k_->comp_mask, QSM_COMP_MASK_KNOWN); \
} while (0)

#endif
