/*-------------------------------------------------------------------------
 *
 * fuzz_encode.c
 *	  libFuzzer target: zkr_encode_resource on arbitrary bytes taken as a
 *	  resource name.  The properties are in checks.c (zkf_check_encode).
 *	  Built and run by "make fuzz" (test/fuzz/Makefile).
 *
 * test/fuzz/fuzz_encode.c
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
	const char *why = zkf_check_encode(data, size);

	if (why != NULL)
	{
		fprintf(stderr, "zklock fuzz_encode: %s (input of %zu bytes)\n",
				why, size);
		abort();
	}
	return 0;
}
