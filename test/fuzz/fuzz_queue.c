/*-------------------------------------------------------------------------
 *
 * fuzz_queue.c
 *	  libFuzzer target: child-name parsing, ordering and the holder /
 *	  predecessor decision (zkr_parse_child, zkr_collect, zkr_decide, ...)
 *	  on child lists built from arbitrary bytes.  The input format and the
 *	  properties are in checks.c (zkf_check_queue).  Built and run by
 *	  "make fuzz" (test/fuzz/Makefile).
 *
 * test/fuzz/fuzz_queue.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>

#include "checks.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *why = zkf_check_queue(data, size);

	if (why != NULL)
	{
		fprintf(stderr, "zklock fuzz_queue: %s (input of %zu bytes)\n",
				why, size);
		abort();
	}
	return 0;
}
