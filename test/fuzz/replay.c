/*-------------------------------------------------------------------------
 *
 * replay.c
 *	  Regression test of the fuzz corpus, without libFuzzer: runs every
 *	  file of test/fuzz/corpus/<target>/ through the same property checks
 *	  as the fuzz targets (checks.c) and prints TAP, one result per target
 *	  ("ok 1 - corpus encode: 212 inputs"), a "#" line per failing input.
 *	  Built with plain gcc by test/unit/Makefile (test_corpus) and run by
 *	  "make test" in the unit suite.
 *
 * Usage: test_corpus [CORPUS_DIR]   (default: the directory compiled in)
 * Exit status 1 if any input fails or a corpus directory is missing or
 * empty.
 *
 * test/fuzz/replay.c
 *
 *-------------------------------------------------------------------------
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"

#ifndef CORPUS_DIR
#define CORPUS_DIR "corpus"
#endif

static const struct
{
	const char *name;
	const char *(*check) (const uint8_t *data, size_t size);
}			targets[] =
{
	{"encode", zkf_check_encode},
	{"queue", zkf_check_queue},
};

static int
not_hidden(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* Read a whole file; NULL if it cannot be read. */
static uint8_t *
slurp(const char *path, size_t *size)
{
	FILE	   *f = fopen(path, "rb");
	uint8_t    *buf = NULL;
	size_t		cap = 0;
	size_t		n = 0;

	if (f == NULL)
		return NULL;
	for (;;)
	{
		size_t		got;

		if (n == cap)
		{
			uint8_t    *nb;

			cap = cap ? cap * 2 : 4096;
			nb = realloc(buf, cap);
			if (nb == NULL)
			{
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f))
	{
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*size = n;
	return buf;
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : CORPUS_DIR;
	int			failed_targets = 0;
	int			t;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("1..%d\n", (int) (sizeof(targets) / sizeof(targets[0])));
	for (t = 0; t < (int) (sizeof(targets) / sizeof(targets[0])); t++)
	{
		char		path[4096];
		struct dirent **list = NULL;
		int			n;
		int			bad = 0;
		int			inputs = 0;

		snprintf(path, sizeof(path), "%s/%s", dir, targets[t].name);
		n = scandir(path, &list, not_hidden, alphasort);
		if (n < 0)
		{
			printf("not ok %d - corpus %s: cannot read %s\n", t + 1,
				   targets[t].name, path);
			failed_targets++;
			continue;
		}
		for (int i = 0; i < n; i++)
		{
			char		file[4096 + 256];
			uint8_t    *data;
			size_t		size = 0;
			const char *why;

			snprintf(file, sizeof(file), "%s/%s", path, list[i]->d_name);
			data = slurp(file, &size);
			if (data == NULL)
			{
				printf("# %s: cannot read\n", file);
				bad++;
			}
			else
			{
				inputs++;
				why = targets[t].check(data, size);
				if (why != NULL)
				{
					printf("# %s: %s\n", file, why);
					bad++;
				}
				free(data);
			}
			free(list[i]);
		}
		free(list);
		if (inputs == 0 && bad == 0)
		{
			printf("not ok %d - corpus %s: no input in %s\n", t + 1,
				   targets[t].name, path);
			failed_targets++;
		}
		else if (bad > 0)
		{
			printf("not ok %d - corpus %s: %d of %d inputs fail\n", t + 1,
				   targets[t].name, bad, inputs);
			failed_targets++;
		}
		else
			printf("ok %d - corpus %s: %d inputs pass the property checks\n",
				   t + 1, targets[t].name, inputs);
	}
	return failed_targets ? 1 : 0;
}
