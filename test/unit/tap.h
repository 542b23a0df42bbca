/*-------------------------------------------------------------------------
 *
 * tap.h
 *	  The TAP output the unit test programs of test/unit share: one
 *	  "ok K - ..." or "not ok K - ..." line per assertion, "# ..."
 *	  diagnostics, and the counts main() ends with (the "1..N" plan, exit
 *	  status 1 if anything failed).  Each program includes it once.
 *
 * test/unit/tap.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_TAP_H
#define ZKLOCK_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int	n_tests = 0;
static int	n_failed = 0;

/* Report one assertion; returns cond so callers can add diagnostics. */
static bool
ok(bool cond, const char *fmt,...)
{
	va_list		ap;

	n_tests++;
	if (!cond)
		n_failed++;
	printf("%sok %d - ", cond ? "" : "not ", n_tests);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	return cond;
}

/* A TAP diagnostic line. */
static void
diag(const char *fmt,...)
{
	va_list		ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

#endif							/* ZKLOCK_TAP_H */
