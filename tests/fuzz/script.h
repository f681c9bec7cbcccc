/* rdma-qsm fuzzing: an input read as a script, a byte at a time; bytes that run out read as 0. */
#ifndef QSM_TESTS_FUZZ_SCRIPT_H
#define QSM_TESTS_FUZZ_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

struct script {
	const uint8_t *p;
	size_t n;
};

static inline unsigned take(struct script *s)
{
	if (!s->n)
		return 0;
	s->n--;
	return *s->p++;
}

#endif
