/*-------------------------------------------------------------------------
 *
 * test_recipe.c
 *	  Unit tests of the pure recipe logic (src/recipe/recipe.c), run without any
 *	  PostgreSQL or ZooKeeper server.
 *
 * Covers how child names are recognised (every recipe zklock interoperates
 * with, including the negative sequence numbers ZooKeeper produces once a
 * parent's counter wraps past 2^31), the RFC 1982 ordering of sequence
 * numbers, sorting, the "who holds / whom to watch" decision for exclusive
 * and shared waiters, the resource-name encoding, and node-name prefixes.
 *
 * In short: name parsing for every recipe, serial-number order across the
 * 2^31 wrap, predecessor choice, resource encoding, node layouts, the
 * certain deadlock through one backend's own nodes, a queue's holders and
 * whom each waiter waits for (against the pairwise rule, and linear on
 * 200,000 contenders), the wait-for graph of deadlock detection (blockers,
 * wait records, cycle search, victim rule).
 *
 * Output is TAP: one "ok K - ..." or "not ok K - ..." line per assertion,
 * the "1..N" plan at the end, and exit status 1 if anything failed.
 *
 * test/unit/test_recipe.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recipe/recipe.h"
#include "recipe/revokeform.h"
#include "recipe/statevict.h"
#include "recipe/connfail.h"
#include "recipe/waitgraph.h"
#include "tap.h"

static int
sign(int v)
{
	return (v > 0) - (v < 0);
}

/* A fixed-seed generator, so that every run tests the same inputs. */
static uint32_t rng_state = 0x2545F491u;

static uint32_t
rng(void)
{
	/* xorshift32 */
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 17;
	rng_state ^= rng_state << 5;
	return rng_state;
}

#define UUID1 "0f8fad5b-d9cb-469f-a165-70867728950e"
#define UUID2 "7c9e6679-7425-40de-944b-e07fc1f90ae7"
#define HEX32 "4f1e7a2b9c3d4e5f6a7b8c9d0e1f2a3b"

/* ----------------------------------------------------------------
 * zkr_parse_child
 * ----------------------------------------------------------------
 */

/* Expect name to be a contender of the given mode, seq and prefix_len. */
static void
expect_contender(const char *name, ZkrMode mode, uint32_t seq,
				 size_t prefix_len)
{
	ZkrContender c;
	bool		r;

	memset(&c, 0x7F, sizeof(c));
	r = zkr_parse_child(name, &c);
	if (!ok(r, "parse \"%s\": recognised as a contender", name))
		return;
	ok(c.mode == mode, "parse \"%s\": mode %s", name, zkr_mode_name(mode));
	if (!ok(c.seq == seq, "parse \"%s\": seq 0x%08X", name, (unsigned) seq))
		diag("got seq 0x%08X", (unsigned) c.seq);
	if (!ok(c.prefix_len == prefix_len, "parse \"%s\": prefix_len %zu",
			name, prefix_len))
		diag("got prefix_len %zu", c.prefix_len);
	ok(c.name == name, "parse \"%s\": name points to the caller's string",
	   name);
}

/* Expect name not to be recognised. */
static void
expect_not_contender(const char *name, const char *why)
{
	ZkrContender c;
	bool		r;

	memset(&c, 0x7F, sizeof(c));
	r = zkr_parse_child(name, &c);
	ok(!r && c.mode == ZKR_MODE_NONE,
	   "parse \"%s\": not a contender (%s), mode none", name, why);
}

static void
test_parse_child(void)
{
	/* Curator InterProcessReadWriteLock, protected: what zklock creates */
	expect_contender("_c_" UUID1 "-__WRIT__0000000042",
					 ZKR_MODE_EXCLUSIVE, 42, 40);
	expect_contender("_c_" UUID1 "-__READ__0000000043",
					 ZKR_MODE_SHARED, 43, 40);
	/* Curator InterProcessMutex, protected and plain */
	expect_contender("_c_" UUID2 "-lock-0000000001",
					 ZKR_MODE_EXCLUSIVE, 1, 40);
	expect_contender("lock-0000000001", ZKR_MODE_EXCLUSIVE, 1, 0);
	/* kazoo Lock and ReadLock */
	expect_contender(HEX32 "__lock__0000000007", ZKR_MODE_EXCLUSIVE, 7, 32);
	expect_contender(HEX32 "__rlock__0000000008", ZKR_MODE_SHARED, 8, 32);
	/* bare markers, no prefix */
	expect_contender("__WRIT__0000000000", ZKR_MODE_EXCLUSIVE, 0, 0);
	expect_contender("__READ__2147483647", ZKR_MODE_SHARED, 0x7FFFFFFFu, 0);
	expect_contender("__rlock__0000000010", ZKR_MODE_SHARED, 10, 0);
	/* the last marker is the one that counts */
	expect_contender("__READ__lock-0000000005", ZKR_MODE_EXCLUSIVE, 5, 8);
	expect_contender("lock-__READ__0000000005", ZKR_MODE_SHARED, 5, 5);

	/* wrapped counters: "%010d" of a negative int */
	expect_contender("__WRIT__-2147483648", ZKR_MODE_EXCLUSIVE,
					 0x80000000u, 0);
	expect_contender("lock--2147483647", ZKR_MODE_EXCLUSIVE, 0x80000001u, 0);
	expect_contender("__READ__-000000001", ZKR_MODE_SHARED, 0xFFFFFFFFu, 0);
	expect_contender("_c_" UUID1 "-__READ__-000000002",
					 ZKR_MODE_SHARED, 0xFFFFFFFEu, 40);
	expect_contender(HEX32 "__rlock__-1000000000", ZKR_MODE_SHARED,
					 (uint32_t) -1000000000, 32);

	/* not contenders */
	expect_not_contender("foo", "no marker");
	expect_not_contender("", "empty string");
	expect_not_contender("lock-123", "3 digits");
	expect_not_contender("lock-000000001", "9 digits without sign");
	expect_not_contender("__WRIT__00000000x1", "non-digit in sequence");
	expect_not_contender("__WRIT__00000000001", "11 digits without sign");
	expect_not_contender("__READ__-00000000001", "sign and 11 digits");
	expect_not_contender("__READ__-00000001", "sign and 8 digits");
	expect_not_contender("__READ__--000000001", "two signs");
	expect_not_contender("__READ__+000000001", "plus sign");
	expect_not_contender("__WRIT__", "marker with no digits");
	expect_not_contender("lock-", "lock- with no digits");
	expect_not_contender("__READ__-", "marker and sign, no digits");
	expect_not_contender("leader-0000000001", "unknown marker");
	expect_not_contender("_c_" UUID1 "-__WRITE__0000000001",
						 "misspelt marker");
	expect_not_contender("__write__0000000001", "lower-case WRIT");
	expect_not_contender("__WRIT__0000000001x", "trailing byte");
	expect_not_contender("__WRIT__0000000001-lease", "marker in the middle");
	expect_not_contender("a__READ__b0000000001", "marker in the middle");
	expect_not_contender("0000000001", "digits only");
	expect_not_contender(" lock-0000000001 ", "trailing space");
}

/* ----------------------------------------------------------------
 * zkr_seq_cmp
 * ----------------------------------------------------------------
 */

static void
test_seq_cmp(void)
{
	int			i;
	bool		antisym = true;
	bool		refl = true;
	bool		window = true;

	ok(zkr_seq_cmp(1, 2) < 0, "seq_cmp: 1 precedes 2");
	ok(zkr_seq_cmp(2, 1) > 0, "seq_cmp: 2 follows 1");
	ok(zkr_seq_cmp(42, 42) == 0, "seq_cmp: 42 equals 42");
	ok(zkr_seq_cmp(0, 0) == 0, "seq_cmp: 0 equals 0");
	ok(zkr_seq_cmp(0xFFFFFFFFu, 0xFFFFFFFFu) == 0,
	   "seq_cmp: 0xFFFFFFFF equals itself");
	ok(zkr_seq_cmp(0, 0x7FFFFFFFu) < 0,
	   "seq_cmp: 0 precedes 0x7FFFFFFF (2^31 - 1 apart)");
	ok(zkr_seq_cmp(0x7FFFFFFFu, 0x80000000u) < 0,
	   "seq_cmp: 0x7FFFFFFF precedes 0x80000000");
	ok(zkr_seq_cmp(0x80000000u, 0x7FFFFFFFu) > 0,
	   "seq_cmp: 0x80000000 follows 0x7FFFFFFF");
	ok(zkr_seq_cmp(2147483647u, (uint32_t) INT32_MIN) < 0,
	   "seq_cmp: 2147483647 precedes (uint32) -2147483648");
	ok(zkr_seq_cmp(0xFFFFFFFFu, 0) < 0, "seq_cmp: 0xFFFFFFFF precedes 0");
	ok(zkr_seq_cmp(0xFFFFFFFFu, 1) < 0, "seq_cmp: 0xFFFFFFFF precedes 1");
	ok(zkr_seq_cmp(0, 0xFFFFFFFFu) > 0, "seq_cmp: 0 follows 0xFFFFFFFF");
	ok(zkr_seq_cmp(0x80000002u, 1) < 0,
	   "seq_cmp: 0x80000002 precedes 1 (2^31 - 1 apart, wrapped)");
	ok(zkr_seq_cmp(1, 0x80000002u) > 0,
	   "seq_cmp: 1 follows 0x80000002 (2^31 + 1 apart)");

	/* exactly 2^31 apart: ordered by raw value, antisymmetric */
	ok(zkr_seq_cmp(0, 0x80000000u) < 0,
	   "seq_cmp: 0 vs 0x80000000 (2^31 apart) ordered by raw value");
	ok(zkr_seq_cmp(0x80000000u, 0) > 0,
	   "seq_cmp: 0x80000000 vs 0 (2^31 apart) ordered by raw value");
	ok(zkr_seq_cmp(5, 0x80000005u) < 0 && zkr_seq_cmp(0x80000005u, 5) > 0,
	   "seq_cmp: 5 and 0x80000005 (2^31 apart) antisymmetric");
	ok(zkr_seq_cmp(0x7FFFFFFFu, 0xFFFFFFFFu) < 0 &&
	   zkr_seq_cmp(0xFFFFFFFFu, 0x7FFFFFFFu) > 0,
	   "seq_cmp: 0x7FFFFFFF and 0xFFFFFFFF (2^31 apart) antisymmetric");

	/* properties over pseudo-random pairs */
	for (i = 0; i < 20000; i++)
	{
		uint32_t	a = rng();
		uint32_t	b = (i % 4 == 0) ? a + 0x80000000u : rng();
		uint32_t	d = (rng() % 0x7FFFFFFFu) + 1;	/* 1 .. 2^31 - 1 */

		if (sign(zkr_seq_cmp(a, b)) != -sign(zkr_seq_cmp(b, a)) ||
			(a != b && zkr_seq_cmp(a, b) == 0))
		{
			if (antisym)
				diag("antisymmetry fails for 0x%08X, 0x%08X",
					 (unsigned) a, (unsigned) b);
			antisym = false;
		}
		if (zkr_seq_cmp(a, a) != 0)
			refl = false;
		if (!(zkr_seq_cmp(a, a + d) < 0 && zkr_seq_cmp(a + d, a) > 0))
		{
			if (window)
				diag("0x%08X should precede 0x%08X",
					 (unsigned) a, (unsigned) (a + d));
			window = false;
		}
	}
	ok(antisym, "seq_cmp: antisymmetric and total on 20000 random pairs");
	ok(refl, "seq_cmp: every number equals itself (20000 random)");
	ok(window,
	   "seq_cmp: a precedes a + d for d in 1..2^31-1 (20000 random)");
}

/* ----------------------------------------------------------------
 * zkr_contender_cmp, zkr_sort, zkr_collect
 * ----------------------------------------------------------------
 */

static ZkrContender
mk(const char *name)
{
	ZkrContender c;

	if (!zkr_parse_child(name, &c))
	{
		diag("test setup: \"%s\" should be a contender", name);
		memset(&c, 0, sizeof(c));
		c.name = name;
	}
	return c;
}

/* Do the names of c[0..n-1] equal expected[0..n-1], in order? */
static bool
names_are(const ZkrContender *c, int n, const char *const *expected)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		if (c[i].name == NULL || strcmp(c[i].name, expected[i]) != 0)
		{
			diag("position %d: got \"%s\", expected \"%s\"", i,
				 c[i].name ? c[i].name : "(null)", expected[i]);
			return false;
		}
	}
	return true;
}

static void
test_sort_collect(void)
{
	ZkrContender a,
				b;
	ZkrContender c[8];
	ZkrContender out[16];
	int			i,
				n;

	a = mk("__WRIT__0000000005");
	b = mk("__READ__0000000006");
	ok(zkr_contender_cmp(&a, &b) < 0 && zkr_contender_cmp(&b, &a) > 0,
	   "contender_cmp: ordered by sequence, not by name");
	a = mk("_c_" UUID1 "-__READ__0000000009");
	b = mk("__WRIT__0000000010");
	ok(zkr_contender_cmp(&a, &b) < 0,
	   "contender_cmp: lower sequence first even if its name sorts later");
	a = mk("a-lock-0000000005");
	b = mk("b-lock-0000000005");
	ok(zkr_contender_cmp(&a, &b) < 0 && zkr_contender_cmp(&b, &a) > 0,
	   "contender_cmp: equal sequences broken by full name");
	ok(zkr_contender_cmp(&a, &a) == 0,
	   "contender_cmp: a contender equals itself");
	a = mk("__WRIT__2147483647");
	b = mk("__READ__-2147483648");
	ok(zkr_contender_cmp(&a, &b) < 0,
	   "contender_cmp: 2147483647 precedes -2147483648 (wrap)");

	/* sort across the 2^31 wrap, given in scrambled order */
	{
		const char *const expected[] = {
			"__WRIT__2147483646",
			"x__READ__2147483647",
			"_c_" UUID1 "-__WRIT__-2147483648",
			"lock--2147483647",
			HEX32 "__rlock__-2147483646",
		};

		c[0] = mk(expected[3]);
		c[1] = mk(expected[0]);
		c[2] = mk(expected[4]);
		c[3] = mk(expected[2]);
		c[4] = mk(expected[1]);
		zkr_sort(c, 5);
		ok(names_are(c, 5, expected),
		   "sort: queue order across the 2^31 wrap");
	}

	/* sort across the 2^32 wrap (-1 precedes 0) */
	{
		const char *const expected[] = {
			"__READ__-000000002",
			"__READ__-000000001",
			"__WRIT__0000000000",
			"__READ__0000000001",
		};

		c[0] = mk(expected[2]);
		c[1] = mk(expected[3]);
		c[2] = mk(expected[0]);
		c[3] = mk(expected[1]);
		zkr_sort(c, 4);
		ok(names_are(c, 4, expected),
		   "sort: queue order across the 2^32 wrap (-1 before 0)");
	}

	/* ties broken by name */
	{
		const char *const expected[] = {
			"__READ__0000000003",
			"_c_" UUID1 "-__WRIT__0000000003",
			"_c_" UUID2 "-__WRIT__0000000003",
			"lock-0000000003",
			"__WRIT__0000000004",
		};

		c[0] = mk(expected[4]);
		c[1] = mk(expected[3]);
		c[2] = mk(expected[2]);
		c[3] = mk(expected[1]);
		c[4] = mk(expected[0]);
		zkr_sort(c, 5);
		ok(names_are(c, 5, expected),
		   "sort: equal sequences in name (strcmp) order");
	}

	/* already sorted, single element, empty */
	{
		const char *const expected[] = {
			"lock-0000000001", "lock-0000000002", "lock-0000000003",
		};

		for (i = 0; i < 3; i++)
			c[i] = mk(expected[i]);
		zkr_sort(c, 3);
		ok(names_are(c, 3, expected), "sort: sorted input stays sorted");
		c[0] = mk("lock-0000000009");
		zkr_sort(c, 1);
		ok(strcmp(c[0].name, "lock-0000000009") == 0 &&
		   c[0].seq == 9, "sort: single element unchanged");
		zkr_sort(c, 0);
		ok(strcmp(c[0].name, "lock-0000000009") == 0,
		   "sort: zero elements touches nothing");
	}

	/* collect: drops non-contenders, sorts the rest */
	{
		const char *const names[] = {
			"_c_" UUID2 "-__READ__0000000012",
			"foo",
			"leader-0000000001",
			HEX32 "__lock__0000000010",
			"",
			"lock-123",
			"_c_" UUID1 "-__WRIT__0000000011",
			"__WRIT__00000000x1",
			"__READ__-2147483648",
		};
		const char *const expected[] = {
			HEX32 "__lock__0000000010",
			"_c_" UUID1 "-__WRIT__0000000011",
			"_c_" UUID2 "-__READ__0000000012",
			"__READ__-2147483648",
		};

		memset(out, 0, sizeof(out));
		n = zkr_collect(names, 9, out);
		if (ok(n == 4, "collect: 4 contenders out of 9 children"))
		{
			ok(names_are(out, 4, expected),
			   "collect: contenders in queue order");
			ok(out[0].name == names[3] && out[1].name == names[6] &&
			   out[2].name == names[0] && out[3].name == names[8],
			   "collect: names point to the caller's strings");
			ok(out[0].mode == ZKR_MODE_EXCLUSIVE &&
			   out[1].mode == ZKR_MODE_EXCLUSIVE &&
			   out[2].mode == ZKR_MODE_SHARED &&
			   out[3].mode == ZKR_MODE_SHARED,
			   "collect: modes parsed");
			ok(out[0].seq == 10 && out[3].seq == 0x80000000u,
			   "collect: sequences parsed");
		}
		else
			diag("got %d", n);
	}
	{
		const char *const names[] = {"foo", "bar", "lock-"};

		ok(zkr_collect(names, 3, out) == 0,
		   "collect: no contenders among 3 other children");
		ok(zkr_collect(names, 0, out) == 0, "collect: empty list");
	}
}

/* ----------------------------------------------------------------
 * zkr_decide
 * ----------------------------------------------------------------
 */

/*
 * Run zkr_decide on the given children (any order; collected and sorted
 * here) and compare with the expected outcome.  expect_pred is the name of
 * the node to watch, or NULL if the lock is held.
 */
static void
expect_decision(const char *what,
				const char *const *names, int n,
				const char *self, ZkrMode mode,
				const char *const *own, int n_own,
				const char *expect_pred, int expect_blockers)
{
	ZkrContender c[16];
	ZkrDecision d;
	int			nc;
	int			self_idx = -1;
	int			i;
	bool		good;

	nc = zkr_collect(names, n, c);
	for (i = 0; i < nc; i++)
		if (strcmp(c[i].name, self) == 0)
			self_idx = i;
	d = zkr_decide(c, nc, self, mode, own, n_own);

	ok(d.found && d.self == self_idx,
	   "decide %s: self found at index %d", what, self_idx);
	if (expect_pred == NULL)
	{
		good = ok(d.held && d.predecessor == -1,
				  "decide %s: held, watches nothing", what);
	}
	else
	{
		good = ok(!d.held && d.predecessor >= 0 && d.predecessor < nc &&
				  strcmp(c[d.predecessor].name, expect_pred) == 0,
				  "decide %s: waits, watches %s", what, expect_pred);
	}
	if (!good)
		diag("got held=%d predecessor=%d (%s)", d.held, d.predecessor,
			 d.predecessor >= 0 && d.predecessor < nc ?
			 c[d.predecessor].name : "-");
	if (!ok(d.blockers == expect_blockers, "decide %s: %d blocker(s)",
			what, expect_blockers))
		diag("got %d", d.blockers);
}

static void
test_decide(void)
{
	const char *const none[] = {NULL};

	/* alone */
	{
		const char *const q[] = {"_c_" UUID1 "-__WRIT__0000000001"};

		expect_decision("exclusive alone", q, 1, q[0], ZKR_MODE_EXCLUSIVE,
						none, 0, NULL, 0);
	}
	{
		const char *const q[] = {"_c_" UUID1 "-__READ__0000000001"};

		expect_decision("shared alone", q, 1, q[0], ZKR_MODE_SHARED,
						none, 0, NULL, 0);
	}
	/* first in a queue, with others and non-contenders around */
	{
		const char *const q[] = {
			"__READ__0000000009", "leader", "__WRIT__0000000007",
			"lock-0000000008",
		};

		expect_decision("exclusive at the head", q, 4, q[2],
						ZKR_MODE_EXCLUSIVE, none, 0, NULL, 0);
	}

	/* exclusive behind anything watches the immediate predecessor */
	{
		const char *const q[] = {
			"__READ__0000000001", "__READ__0000000002",
			"__WRIT__0000000003",
		};

		expect_decision("exclusive behind R1 R2", q, 3, q[2],
						ZKR_MODE_EXCLUSIVE, none, 0, q[1], 2);
	}
	{
		const char *const q[] = {
			"__WRIT__0000000004", HEX32 "__lock__0000000001",
			"lock-0000000002", "__READ__0000000003",
		};

		expect_decision("exclusive behind W1 W2 R3", q, 4, q[0],
						ZKR_MODE_EXCLUSIVE, none, 0, q[3], 3);
	}
	{
		const char *const q[] = {
			"__WRIT__0000000001", "__WRIT__0000000002",
			"__WRIT__0000000003",
		};

		expect_decision("exclusive in the middle W1 [W2] W3", q, 3, q[1],
						ZKR_MODE_EXCLUSIVE, none, 0, q[0], 1);
	}
	/* exclusive across the wrap */
	{
		const char *const q[] = {
			"__WRIT__-2147483648", "__READ__2147483647",
		};

		expect_decision("exclusive behind R(2^31-1), across the wrap", q, 2,
						q[0], ZKR_MODE_EXCLUSIVE, none, 0, q[1], 1);
	}

	/* shared behind shared only: held */
	{
		const char *const q[] = {
			"__READ__0000000001", HEX32 "__rlock__0000000002",
			"__READ__0000000003",
		};

		expect_decision("shared behind R1 R2", q, 3, q[2], ZKR_MODE_SHARED,
						none, 0, NULL, 0);
	}
	/* shared behind W then R: watches the greatest lower exclusive */
	{
		const char *const q[] = {
			"__WRIT__0000000001", "__READ__0000000002",
			"__READ__0000000003",
		};

		expect_decision("shared behind W1 R2", q, 3, q[2], ZKR_MODE_SHARED,
						none, 0, q[0], 1);
	}
	{
		const char *const q[] = {
			"lock-0000000001", "__WRIT__0000000002", "__READ__0000000003",
			"__READ__0000000004", "__WRIT__0000000006",
		};

		expect_decision("shared behind W1 W2 R3", q, 5, q[3],
						ZKR_MODE_SHARED, none, 0, q[1], 2);
	}
	/* shared ahead of an exclusive is not blocked by it */
	{
		const char *const q[] = {
			"__READ__0000000001", "__WRIT__0000000003", "__READ__0000000002",
		};

		expect_decision("shared R2 before W3", q, 3, q[2], ZKR_MODE_SHARED,
						none, 0, NULL, 0);
	}

	/* W1 held, R2 waiting, W3 queued */
	{
		const char *const q[] = {
			"__WRIT__0000000001", "__READ__0000000002",
			"__WRIT__0000000003",
		};

		expect_decision("W1 of [W1 R2 W3]", q, 3, q[0], ZKR_MODE_EXCLUSIVE,
						none, 0, NULL, 0);
		expect_decision("R2 of [W1 R2 W3]", q, 3, q[1], ZKR_MODE_SHARED,
						none, 0, q[0], 1);
		expect_decision("W3 of [W1 R2 W3]", q, 3, q[2], ZKR_MODE_EXCLUSIVE,
						none, 0, q[1], 2);
	}

	/* own nodes never conflict */
	{
		const char *const q[] = {
			"_c_" UUID1 "-__READ__0000000001",
			"_c_" UUID1 "-__WRIT__0000000002",
		};
		const char *const own[] = {q[0]};

		expect_decision("own R1, self W2", q, 2, q[1], ZKR_MODE_EXCLUSIVE,
						own, 1, NULL, 0);
	}
	{
		const char *const q[] = {
			"_c_" UUID1 "-__WRIT__0000000001",
			"_c_" UUID1 "-__READ__0000000002",
		};
		const char *const own[] = {q[0]};

		expect_decision("own W1, self R2", q, 2, q[1], ZKR_MODE_SHARED,
						own, 1, NULL, 0);
	}
	{
		const char *const q[] = {
			"_c_" UUID1 "-__READ__0000000001",
			"_c_" UUID2 "-__WRIT__0000000002",
			"_c_" UUID1 "-__WRIT__0000000003",
		};
		const char *const own[] = {q[0]};

		expect_decision("own R1, other W2, self W3", q, 3, q[2],
						ZKR_MODE_EXCLUSIVE, own, 1, q[1], 1);
	}
	{
		const char *const q[] = {
			"_c_" UUID2 "-__READ__0000000001",
			"_c_" UUID1 "-__READ__0000000002",
			"_c_" UUID1 "-__WRIT__0000000003",
		};
		const char *const own[] = {q[1]};

		expect_decision("other R1, own R2, self W3", q, 3, q[2],
						ZKR_MODE_EXCLUSIVE, own, 1, q[0], 1);
	}
	{
		const char *const q[] = {
			"_c_" UUID2 "-__WRIT__0000000001",
			"_c_" UUID1 "-__WRIT__0000000002",
			"_c_" UUID1 "-__READ__0000000003",
		};
		const char *const own[] = {q[1]};

		expect_decision("other W1, own W2, self R3", q, 3, q[2],
						ZKR_MODE_SHARED, own, 1, q[0], 1);
	}
	{
		/* an own node passed in but not (any more) among the children */
		const char *const q[] = {
			"_c_" UUID2 "-__READ__0000000005",
			"_c_" UUID1 "-__WRIT__0000000006",
		};
		const char *const own[] = {"_c_" UUID1 "-__READ__0000000004"};

		expect_decision("gone own R4, other R5, self W6", q, 2, q[1],
						ZKR_MODE_EXCLUSIVE, own, 1, q[0], 1);
	}

	/* self not among the contenders */
	{
		const char *const q[] = {
			"__WRIT__0000000001", "__READ__0000000002",
		};
		ZkrContender c[2];
		ZkrDecision d;
		int			n;

		n = zkr_collect(q, 2, c);
		d = zkr_decide(c, n, "__WRIT__0000000003", ZKR_MODE_EXCLUSIVE,
					   none, 0);
		ok(!d.found, "decide: self absent from the list -> found=false");
		d = zkr_decide(c, 0, "__WRIT__0000000001", ZKR_MODE_EXCLUSIVE,
					   none, 0);
		ok(!d.found, "decide: empty list -> found=false");
	}
}

/* ----------------------------------------------------------------
 * zkr_encode_resource
 * ----------------------------------------------------------------
 */

static void
expect_encode(const char *in, size_t len, const char *expected,
			  const char *what)
{
	char		out[ZKR_MAX_ENCODED_BYTES + 1];
	ZkrEncodeResult r;

	memset(out, 'Z', sizeof(out));
	r = zkr_encode_resource(in, len, out, sizeof(out));
	if (!ok(r == ZKR_ENCODE_OK && strcmp(out, expected) == 0,
			"encode %s -> \"%s\"", what, expected))
		diag("got result %d, \"%.*s\"", (int) r, 60, out);
}

static void
expect_encode_error(const char *in, size_t len, ZkrEncodeResult expected,
					const char *what)
{
	char		out[ZKR_MAX_ENCODED_BYTES + 1];
	ZkrEncodeResult r;

	r = zkr_encode_resource(in, len, out, sizeof(out));
	if (!ok(r == expected, "encode %s -> error %d", what, (int) expected))
		diag("got result %d", (int) r);
}

/*
 * Encode into a heap buffer of exactly outsize bytes, so that valgrind
 * catches any write past it.
 */
static ZkrEncodeResult
encode_exact(const char *in, size_t outsize, char *copy)
{
	char	   *out = malloc(outsize > 0 ? outsize : 1);
	ZkrEncodeResult r;

	r = zkr_encode_resource(in, strlen(in), out, outsize);
	if (r == ZKR_ENCODE_OK && copy != NULL)
		strcpy(copy, out);
	free(out);
	return r;
}

static int
hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;					/* lower case is not allowed */
}

/*
 * Decode an encoded path back into bytes; returns the length, or -1 if it
 * has a malformed escape.
 */
static long
decode(const char *s, unsigned char *buf)
{
	long		n = 0;

	while (*s)
	{
		if (*s == '%')
		{
			int			h = hexval(s[1]);
			int			l = (h < 0) ? -1 : hexval(s[2]);

			if (h < 0 || l < 0)
				return -1;
			buf[n++] = (unsigned char) (h * 16 + l);
			s += 3;
		}
		else
			buf[n++] = (unsigned char) *s++;
	}
	return n;
}

/* Does the raw name have a leading, trailing or doubled '/'? */
static bool
has_empty_level(const unsigned char *s, size_t len)
{
	size_t		i;

	if (s[0] == '/' || s[len - 1] == '/')
		return true;
	for (i = 1; i < len; i++)
		if (s[i] == '/' && s[i - 1] == '/')
			return true;
	return false;
}

static void
test_encode_property(void)
{
	const int	rounds = 5000;
	unsigned char in[ZKR_MAX_RESOURCE_BYTES + 1];
	unsigned char back[ZKR_MAX_ENCODED_BYTES + 1];
	char		out[ZKR_MAX_ENCODED_BYTES + 1];
	int			i;
	int			n_ok = 0;
	bool		code_ok = true;
	bool		no_dot_level = true;
	bool		charset_ok = true;
	bool		slash_ok = true;
	bool		roundtrip_ok = true;

	for (i = 0; i < rounds; i++)
	{
		size_t		len;
		size_t		j;
		ZkrEncodeResult r;
		bool		empty_level;
		const char *p;

		/* mostly short names, rich in '/' and '.', some long ones */
		len = (i % 10 == 0) ? 1 + rng() % ZKR_MAX_RESOURCE_BYTES
			: 1 + rng() % 12;
		for (j = 0; j < len; j++)
		{
			uint32_t	k = rng() % 8;

			if (k < 2)
				in[j] = '.';
			else if (k < 3)
				in[j] = '/';
			else if (k < 4)
				in[j] = "aZ9_-%"[rng() % 6];
			else
				in[j] = (unsigned char) (1 + rng() % 255);
		}
		in[len] = '\0';
		empty_level = has_empty_level(in, len);

		memset(out, 'Z', sizeof(out));
		r = zkr_encode_resource((const char *) in, len, out, sizeof(out));
		if (r != (empty_level ? ZKR_ENCODE_EMPTY_LEVEL : ZKR_ENCODE_OK))
		{
			if (code_ok)
				diag("round %d (len %zu): got result %d", i, len, (int) r);
			code_ok = false;
		}
		if (r != ZKR_ENCODE_OK)
			continue;
		n_ok++;

		/* only [A-Za-z0-9._%/-] */
		for (p = out; *p; p++)
		{
			if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
				  (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
				  *p == '%' || *p == '/' || *p == '-'))
			{
				if (charset_ok)
					diag("round %d: byte 0x%02X in output", i,
						 (unsigned char) *p);
				charset_ok = false;
			}
		}
		/* never starts or ends with '/' */
		if (out[0] == '/' || out[0] == '\0' || out[strlen(out) - 1] == '/')
			slash_ok = false;
		/* no level is "." or ".." */
		p = out;
		while (*p)
		{
			size_t		l = strcspn(p, "/");

			if ((l == 1 && p[0] == '.') ||
				(l == 2 && p[0] == '.' && p[1] == '.'))
			{
				if (no_dot_level)
					diag("round %d: \"%s\" has a dot level", i, out);
				no_dot_level = false;
			}
			p += l;
			if (*p == '/')
				p++;
		}
		/* decoding gives the input back */
		{
			long		n = decode(out, back);

			if (n != (long) len || memcmp(back, in, len) != 0)
			{
				if (roundtrip_ok)
					diag("round %d: decoding \"%s\" does not give the input",
						 i, out);
				roundtrip_ok = false;
			}
		}
	}
	ok(code_ok,
	   "encode property: %d random names give OK, or EMPTY_LEVEL "
	   "exactly when a level is empty", rounds);
	ok(n_ok > rounds / 10,
	   "encode property: a fair share of names encoded (%d of %d)",
	   n_ok, rounds);
	ok(charset_ok, "encode property: output only uses [A-Za-z0-9._%%/-]");
	ok(slash_ok, "encode property: output non-empty, no leading/trailing '/'");
	ok(no_dot_level, "encode property: no level of the output is . or ..");
	ok(roundtrip_ok,
	   "encode property: decoding %%XX gives back the input bytes");
}

static void
test_encode(void)
{
	char		big[ZKR_MAX_RESOURCE_BYTES + 2];
	char		expect_big[ZKR_MAX_ENCODED_BYTES + 1];
	char		copy[ZKR_MAX_ENCODED_BYTES + 1];
	ZkrEncodeResult r;
	int			i;

	expect_encode("nightly-rollup", 14, "nightly-rollup", "plain name");
	expect_encode("a.b_c-D9", 8, "a.b_c-D9", "[A-Za-z0-9._-] kept");
	expect_encode("x", 1, "x", "one byte");
	expect_encode("app/nightly", 11, "app/nightly", "'/' separates levels");
	expect_encode("a/b/c/d", 7, "a/b/c/d", "four levels");
	expect_encode(".", 1, "%2E", "level \".\"");
	expect_encode("..", 2, "%2E%2E", "level \"..\"");
	expect_encode("a/../b", 6, "a/%2E%2E/b", "\"..\" in the middle");
	expect_encode("./a", 3, "%2E/a", "leading \".\" level");
	expect_encode("a/..", 4, "a/%2E%2E", "trailing \"..\" level");
	expect_encode("../..", 5, "%2E%2E/%2E%2E", "\"../..\"");
	expect_encode("...", 3, "...", "\"...\" is not special");
	expect_encode(".a", 2, ".a", "\".a\" is not special");
	expect_encode("a.", 2, "a.", "\"a.\" is not special");
	expect_encode("..b/c..", 7, "..b/c..", "dots inside levels kept");
	expect_encode("100%", 4, "100%25", "'%' escaped");
	expect_encode("%2E", 3, "%252E", "literal \"%2E\" escaped");
	expect_encode("a b", 3, "a%20b", "space escaped");
	expect_encode("caf\xC3\xA9", 5, "caf%C3%A9", "UTF-8 e-acute");
	expect_encode("\x01\x1F\x7F", 3, "%01%1F%7F", "control bytes");
	expect_encode("\t\n", 2, "%09%0A", "tab and newline");
	expect_encode("\xAB\xFF", 2, "%AB%FF", "upper-case hex");
	expect_encode("a:b*c?d\\e", 9, "a%3Ab%2Ac%3Fd%5Ce", "punctuation escaped");
	expect_encode("app/nightly-rollup", 11, "app/nightly",
				  "only len bytes read (not NUL-terminated)");

	/* length limits */
	memset(big, 'a', ZKR_MAX_RESOURCE_BYTES + 1);
	big[ZKR_MAX_RESOURCE_BYTES + 1] = '\0';
	memcpy(expect_big, big, ZKR_MAX_RESOURCE_BYTES);
	expect_big[ZKR_MAX_RESOURCE_BYTES] = '\0';
	expect_encode(big, ZKR_MAX_RESOURCE_BYTES, expect_big,
				  "512 bytes accepted");
	expect_encode_error(big, ZKR_MAX_RESOURCE_BYTES + 1, ZKR_ENCODE_TOO_LONG,
						"513 bytes");
	memset(big, '\xFF', ZKR_MAX_RESOURCE_BYTES);
	for (i = 0; i < ZKR_MAX_RESOURCE_BYTES; i++)
		memcpy(expect_big + 3 * i, "%FF", 3);
	expect_big[ZKR_MAX_ENCODED_BYTES] = '\0';
	expect_encode(big, ZKR_MAX_RESOURCE_BYTES, expect_big,
				  "512 bytes that all need escaping (worst case)");

	/* errors */
	expect_encode_error("", 0, ZKR_ENCODE_EMPTY, "empty name");
	expect_encode_error("abc", 0, ZKR_ENCODE_EMPTY, "zero length");
	expect_encode_error("/", 1, ZKR_ENCODE_EMPTY_LEVEL, "\"/\"");
	expect_encode_error("/app", 4, ZKR_ENCODE_EMPTY_LEVEL, "leading '/'");
	expect_encode_error("app/", 4, ZKR_ENCODE_EMPTY_LEVEL, "trailing '/'");
	expect_encode_error("a//b", 4, ZKR_ENCODE_EMPTY_LEVEL, "\"a//b\"");
	expect_encode_error("a/b//", 5, ZKR_ENCODE_EMPTY_LEVEL, "\"a/b//\"");

	/* output buffer sizes, exact-size heap buffers */
	ok(encode_exact("abc", 4, copy) == ZKR_ENCODE_OK &&
	   strcmp(copy, "abc") == 0,
	   "encode: \"abc\" fits in 4 bytes");
	ok(encode_exact("abc", 3, NULL) == ZKR_ENCODE_NO_ROOM,
	   "encode: \"abc\" into 3 bytes -> NO_ROOM");
	ok(encode_exact("abc", 1, NULL) == ZKR_ENCODE_NO_ROOM,
	   "encode: \"abc\" into 1 byte -> NO_ROOM");
	ok(encode_exact("caf\xC3\xA9", 10, copy) == ZKR_ENCODE_OK &&
	   strcmp(copy, "caf%C3%A9") == 0,
	   "encode: \"caf%%C3%%A9\" fits in 10 bytes");
	ok(encode_exact("caf\xC3\xA9", 9, NULL) == ZKR_ENCODE_NO_ROOM,
	   "encode: \"caf%%C3%%A9\" into 9 bytes -> NO_ROOM");
	ok(encode_exact("caf\xC3\xA9", 6, NULL) == ZKR_ENCODE_NO_ROOM,
	   "encode: \"caf%%C3%%A9\" into 6 bytes (escape cut) -> NO_ROOM");
	ok(encode_exact("a/..", 9, copy) == ZKR_ENCODE_OK &&
	   strcmp(copy, "a/%2E%2E") == 0,
	   "encode: \"a/%%2E%%2E\" fits in 9 bytes");
	ok(encode_exact("a/..", 8, NULL) == ZKR_ENCODE_NO_ROOM,
	   "encode: \"a/%%2E%%2E\" into 8 bytes -> NO_ROOM");
	r = encode_exact("a b", 4, NULL);
	ok(r == ZKR_ENCODE_NO_ROOM, "encode: \"a%%20b\" into 4 bytes -> NO_ROOM");

	/*
	 * Every buffer size from 1 up: NO_ROOM until the result and its NUL
	 * fit, then OK.  Run under valgrind, this also catches any write past
	 * the end of the buffer (e.g. an escape cut at the last byte).
	 */
	{
		static const struct
		{
			const char *in;
			const char *out;
		}			sweep[] = {
			{"a b", "a%20b"},
			{"\xC3\xA9", "%C3%A9"},
			{"x/..", "x/%2E%2E"},
			{"ab/c d/.", "ab/c%20d/%2E"},
			{"nightly", "nightly"},
		};

		for (i = 0; i < (int) (sizeof(sweep) / sizeof(sweep[0])); i++)
		{
			size_t		need = strlen(sweep[i].out) + 1;
			size_t		sz;
			bool		good = true;

			for (sz = 1; sz <= need + 1; sz++)
			{
				r = encode_exact(sweep[i].in, sz, copy);
				if (sz < need ? r != ZKR_ENCODE_NO_ROOM :
					(r != ZKR_ENCODE_OK || strcmp(copy, sweep[i].out) != 0))
				{
					if (good)
						diag("outsize %zu: got result %d", sz, (int) r);
					good = false;
				}
			}
			ok(good, "encode: \"%s\" NO_ROOM below %zu bytes, OK from %zu",
			   sweep[i].out, need, need);
		}
	}

	test_encode_property();
}

/* ----------------------------------------------------------------
 * zkr_format_uuid, zkr_protocol_prefix (curator-rw), zkr_has_prefix, zkr_mode_name
 * ----------------------------------------------------------------
 */

static void
test_names(void)
{
	uint8_t		bytes[16];
	char		uuid[ZKR_UUID_LEN + 1];
	char		prefix[ZKR_MAX_PREFIX_BYTES];
	char		name[ZKR_MAX_PREFIX_BYTES + 16];
	ZkrContender c;
	size_t		n;
	char	   *small;
	int			i;

	for (i = 0; i < 16; i++)
		bytes[i] = (uint8_t) i;
	memset(uuid, 'Z', sizeof(uuid));
	zkr_format_uuid(bytes, uuid);
	ok(strcmp(uuid, "00010203-0405-0607-0809-0a0b0c0d0e0f") == 0,
	   "format_uuid: bytes 00..0f");
	for (i = 0; i < 16; i++)
		bytes[i] = (uint8_t) (0xF0 + i);
	zkr_format_uuid(bytes, uuid);
	ok(strcmp(uuid, "f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff") == 0,
	   "format_uuid: lower-case hex");
	ok(strlen(uuid) == ZKR_UUID_LEN, "format_uuid: 36 characters");

	/* node prefixes */
	memset(prefix, 'Z', sizeof(prefix));
	n = zkr_protocol_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_EXCLUSIVE, UUID1, prefix, sizeof(prefix));
	ok(n == 48 && strcmp(prefix, "_c_" UUID1 "-__WRIT__") == 0,
	   "node_prefix: exclusive is _c_<uuid>-__WRIT__, length 48");
	n = zkr_protocol_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_SHARED, UUID2, prefix, sizeof(prefix));
	ok(n == 48 && strcmp(prefix, "_c_" UUID2 "-__READ__") == 0,
	   "node_prefix: shared is _c_<uuid>-__READ__, length 48");

	small = malloc(49);
	n = zkr_protocol_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_SHARED, UUID1, small, 49);
	ok(n == 48 && strcmp(small, "_c_" UUID1 "-__READ__") == 0,
	   "node_prefix: fits in exactly 49 bytes");
	free(small);
	small = malloc(48);
	ok(zkr_protocol_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_SHARED, UUID1, small, 48) == 0,
	   "node_prefix: 48-byte buffer too small -> 0");
	free(small);
	small = malloc(10);
	ok(zkr_protocol_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_EXCLUSIVE, UUID1, small, 10) == 0,
	   "node_prefix: 10-byte buffer too small -> 0");
	free(small);

	/* what ZooKeeper will name the node parses back to the same thing */
	zkr_protocol_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_EXCLUSIVE, UUID1, prefix, sizeof(prefix));
	snprintf(name, sizeof(name), "%s%010d", prefix, 42);
	ok(zkr_parse_child(name, &c) && c.mode == ZKR_MODE_EXCLUSIVE &&
	   c.seq == 42 && c.prefix_len == 40,
	   "node_prefix: exclusive node parses back (mode, seq, prefix_len)");
	ok(zkr_has_prefix(name, prefix),
	   "has_prefix: exclusive node carries its prefix");
	zkr_protocol_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_SHARED, UUID1, prefix, sizeof(prefix));
	snprintf(name, sizeof(name), "%s%010d", prefix, INT32_MIN);
	ok(zkr_parse_child(name, &c) && c.mode == ZKR_MODE_SHARED &&
	   c.seq == 0x80000000u,
	   "node_prefix: shared node with wrapped counter parses back");

	/* has_prefix */
	ok(zkr_has_prefix("_c_" UUID1 "-__READ__0000000007",
					  "_c_" UUID1 "-__READ__"),
	   "has_prefix: matching prefix");
	ok(!zkr_has_prefix("_c_" UUID2 "-__READ__0000000007",
					   "_c_" UUID1 "-__READ__"),
	   "has_prefix: other uuid does not match");
	ok(!zkr_has_prefix("_c_" UUID1 "-__WRIT__0000000007",
					   "_c_" UUID1 "-__READ__"),
	   "has_prefix: other mode does not match");
	ok(!zkr_has_prefix("_c_" UUID1, "_c_" UUID1 "-__READ__"),
	   "has_prefix: name shorter than the prefix does not match");
	ok(!zkr_has_prefix("x_c_" UUID1 "-__READ__0000000007",
					   "_c_" UUID1 "-__READ__"),
	   "has_prefix: prefix must be at the start");

	/* mode names */
	ok(strcmp(zkr_mode_name(ZKR_MODE_EXCLUSIVE), "exclusive") == 0,
	   "mode_name: exclusive");
	ok(strcmp(zkr_mode_name(ZKR_MODE_SHARED), "shared") == 0,
	   "mode_name: shared");
	ok(strcmp(zkr_mode_name(ZKR_MODE_NONE), "none") == 0,
	   "mode_name: none");
}

/* ----------------------------------------------------------------
 * zkr_protocol_prefix, zkr_protocol_has_mode: the three node layouts
 * ----------------------------------------------------------------
 */

static void
test_protocols(void)
{
	char		prefix[ZKR_MAX_PREFIX_BYTES];
	char		name[ZKR_MAX_PREFIX_BYTES + 16];
	ZkrContender c;
	size_t		n;
	static const struct
	{
		ZkrProtocol protocol;
		ZkrMode		mode;
		const char *expect;
	}			cases[] = {
		{ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_EXCLUSIVE, "_c_" UUID1 "-__WRIT__"},
		{ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_SHARED, "_c_" UUID1 "-__READ__"},
		{ZKR_PROTOCOL_CURATOR_MUTEX, ZKR_MODE_EXCLUSIVE, "_c_" UUID1 "-lock-"},
		{ZKR_PROTOCOL_KAZOO, ZKR_MODE_EXCLUSIVE, NULL},
		{ZKR_PROTOCOL_KAZOO, ZKR_MODE_SHARED, NULL},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		char		expect[ZKR_MAX_PREFIX_BYTES];

		if (cases[i].expect != NULL)
			strcpy(expect, cases[i].expect);
		else
		{
			/* kazoo: uuid4().hex, no dashes, then its marker */
			int			k = 0;

			for (const char *p = UUID1; *p; p++)
				if (*p != '-')
					expect[k++] = *p;
			strcpy(expect + k, cases[i].mode == ZKR_MODE_EXCLUSIVE ?
				   "__lock__" : "__rlock__");
		}
		n = zkr_protocol_prefix(cases[i].protocol, cases[i].mode, UUID1,
								prefix, sizeof(prefix));
		ok(n == strlen(expect) && strcmp(prefix, expect) == 0,
		   "protocol_prefix: case %zu is %s", i, expect);

		/* the node ZooKeeper makes of it is recognised, in the right mode */
		snprintf(name, sizeof(name), "%s%010d", prefix, 7);
		ok(zkr_parse_child(name, &c) && c.mode == cases[i].mode && c.seq == 7,
		   "protocol_prefix: case %zu parses back as %s", i,
		   zkr_mode_name(cases[i].mode));
		ok(zkr_has_prefix(name, prefix),
		   "protocol_prefix: case %zu node carries its prefix", i);
	}

	ok(strlen("0123456789abcdef0123456789abcdef__lock__") ==
	   zkr_protocol_prefix(ZKR_PROTOCOL_KAZOO, ZKR_MODE_EXCLUSIVE, UUID1,
						   prefix, sizeof(prefix)),
	   "protocol_prefix: kazoo prefix is 32 hex + __lock__");
	ok(zkr_protocol_prefix(ZKR_PROTOCOL_CURATOR_MUTEX, ZKR_MODE_SHARED, UUID1,
						   prefix, sizeof(prefix)) == 0,
	   "protocol_prefix: curator-mutex has no shared mode -> 0");
	ok(!zkr_protocol_has_mode(ZKR_PROTOCOL_CURATOR_MUTEX, ZKR_MODE_SHARED),
	   "protocol_has_mode: curator-mutex shared is refused");
	ok(zkr_protocol_has_mode(ZKR_PROTOCOL_CURATOR_MUTEX, ZKR_MODE_EXCLUSIVE) &&
	   zkr_protocol_has_mode(ZKR_PROTOCOL_KAZOO, ZKR_MODE_SHARED) &&
	   zkr_protocol_has_mode(ZKR_PROTOCOL_CURATOR_RW, ZKR_MODE_SHARED),
	   "protocol_has_mode: the other combinations are allowed");
	ok(!zkr_protocol_has_mode(ZKR_PROTOCOL_KAZOO, ZKR_MODE_NONE),
	   "protocol_has_mode: mode none is refused");
	ok(zkr_protocol_prefix(ZKR_PROTOCOL_KAZOO, ZKR_MODE_SHARED, UUID1,
						   prefix, 41) == 0,
	   "protocol_prefix: kazoo shared needs 42 bytes, 41 -> 0");
}

/* ----------------------------------------------------------------
 * zkr_decide with sequence numbers spread over more than 2^31 (only
 * hand-made names can do that): serial order is not transitive there, so
 * listings sorted in different orders must still never let two exclusive
 * contenders hold together (found by the queue fuzzer).
 * ----------------------------------------------------------------
 */

static void
test_decide_non_transitive(void)
{
	const char *names[] = {
		"A__WRIT__0000000016", "B__WRIT__0000000017",
		"F__lock__0762782973", "G__lock__2022663300",
		"H__lock__-882329497", "I__lock__0693271881",
	};
	int			n = 6;
	int			both = 0;
	int			rounds = 0;
	unsigned	seed = 12345;

	/*
	 * A lists before B exists, B lists after; every permutation of each
	 * listing (the order ZooKeeper returns children in is unspecified).
	 */
	for (int r = 0; r < 300; r++)
	{
		const char *la[5] = {names[0], names[2], names[3], names[4], names[5]};
		const char *lb[6];
		ZkrContender ca[5],
					cb[6];
		ZkrDecision da,
					db;
		int			ka,
					kb;

		memcpy(lb, names, sizeof(lb));
		for (int pass = 0; pass < 2; pass++)
		{
			const char **l = pass == 0 ? la : lb;
			int			len = pass == 0 ? 5 : 6;

			for (int i = len - 1; i > 0; i--)
			{
				int			j;
				const char *t;

				seed = seed * 1103515245u + 12345u;
				j = (int) ((seed >> 16) % (unsigned) (i + 1));
				t = l[i];
				l[i] = l[j];
				l[j] = t;
			}
		}
		ka = zkr_collect(la, 5, ca);
		kb = zkr_collect(lb, 6, cb);
		da = zkr_decide(ca, ka, names[0], ZKR_MODE_EXCLUSIVE, NULL, 0);
		db = zkr_decide(cb, kb, names[1], ZKR_MODE_EXCLUSIVE, NULL, 0);
		if (da.held && db.held)
			both++;
		rounds++;
	}
	ok(both == 0, "decide: spread over 2^31, %d listing pairs, never two exclusive holders (%d)",
	   rounds, both);

	/* and pairwise: exactly one of any two contenders blocks the other */
	{
		ZkrContender cs[6];
		int			k = zkr_collect(names, n, cs);
		int			bad = 0;

		for (int i = 0; i < k; i++)
			for (int j = 0; j < k; j++)
			{
				ZkrContender two[2];
				ZkrDecision di,
							dj;

				if (i == j)
					continue;
				two[0] = cs[i];
				two[1] = cs[j];
				di = zkr_decide(two, 2, cs[i].name, ZKR_MODE_EXCLUSIVE, NULL, 0);
				dj = zkr_decide(two, 2, cs[j].name, ZKR_MODE_EXCLUSIVE, NULL, 0);
				if (di.held == dj.held)
					bad++;
			}
		ok(bad == 0, "decide: of any two contenders exactly one holds (%d bad pairs)", bad);
	}
}

/* ----------------------------------------------------------------
 * zkr_foreign_exclusive_between
 * ----------------------------------------------------------------
 */

static int
between(const char *const *names, int n, const char *held, const char *self,
		const char *const *own, int n_own, const char **found)
{
	static ZkrContender c[16];
	int			nc = zkr_collect(names, n, c);
	int			f = zkr_foreign_exclusive_between(c, nc, held, self, own, n_own);

	*found = f >= 0 ? c[f].name : NULL;
	return f;
}

static void
test_certain_deadlock(void)
{
	const char *found;

	{
		/* our shared 1, a foreign exclusive 2, our exclusive 3 */
		const char *const names[] = {"_c_a-__READ__0000000001",
			"_c_f-__WRIT__0000000002", "_c_b-__WRIT__0000000003"};

		ok(between(names, 3, names[0], names[2], NULL, 0, &found) >= 0 &&
		   strcmp(found, names[1]) == 0,
		   "deadlock: foreign exclusive between our shared and our exclusive");
	}
	{
		/* only a foreign shared between: it is granted beside ours */
		const char *const names[] = {"_c_a-__READ__0000000001",
			"_c_f-__READ__0000000002", "_c_b-__WRIT__0000000003"};

		ok(between(names, 3, names[0], names[2], NULL, 0, &found) == -1,
		   "deadlock: none with a foreign shared between");
	}
	{
		/* the foreign exclusive is ahead of our shared: no cycle */
		const char *const names[] = {"_c_f-__WRIT__0000000001",
			"_c_a-__READ__0000000002", "_c_b-__WRIT__0000000003"};

		ok(between(names, 3, names[1], names[2], NULL, 0, &found) == -1,
		   "deadlock: none when the exclusive is ahead of our shared");
	}
	{
		/* behind our new node: it waits for us, we do not wait for it */
		const char *const names[] = {"_c_a-__READ__0000000001",
			"_c_b-__WRIT__0000000002", "_c_f-__WRIT__0000000003"};

		ok(between(names, 3, names[0], names[1], NULL, 0, &found) == -1,
		   "deadlock: none when the foreign exclusive is behind us");
	}
	{
		/* a stray of our own between is not a foreign contender */
		const char *const names[] = {"_c_a-__READ__0000000001",
			"_c_b-__WRIT__0000000002", "_c_b-__WRIT__0000000003"};
		const char *const own[] = {"_c_b-__WRIT__0000000002"};

		ok(between(names, 3, names[0], names[2], own, 1, &found) == -1,
		   "deadlock: our own stray between is not counted");
	}
	{
		/* kazoo and Curator-mutex exclusive names count too */
		const char *const names[] = {"_c_a-__READ__0000000001",
			"0123456789abcdef0123456789abcdef__lock__0000000002",
			"_c_b-__WRIT__0000000003"};

		ok(between(names, 3, names[0], names[2], NULL, 0, &found) >= 0,
		   "deadlock: a kazoo exclusive between counts");
	}
	{
		/* across the wrap of the sequence counter */
		const char *const names[] = {"_c_a-__READ__2147483647",
			"_c_f-__WRIT__-2147483648", "_c_b-__WRIT__-2147483647"};

		ok(between(names, 3, names[0], names[2], NULL, 0, &found) >= 0,
		   "deadlock: found across the counter wrap");
	}
}

/* ----------------------------------------------------------------
 * zkr_mark_holding
 * ----------------------------------------------------------------
 */

/* The rule as written, pair by pair (quadratic): does j block i? */
static bool
blocks(const ZkrQueued *q, int i, int j)
{
	if (q[i].mode == ZKR_MODE_SHARED && q[j].mode != ZKR_MODE_EXCLUSIVE)
		return false;
	if (q[j].session == q[i].session && q[i].zklock && q[j].zklock)
		return false;
	return true;
}

static bool
holding_reference(const ZkrQueued *q, int i)
{
	for (int j = 0; j < i; j++)
		if (blocks(q, i, j))
			return false;
	return true;
}

static int
waits_for_reference(const ZkrQueued *q, int i)
{
	for (int j = i - 1; j >= 0; j--)
		if (blocks(q, i, j))
			return j;
	return -1;
}

static void
test_mark_holding(void)
{
	static ZkrQueued q[200000];
	unsigned int seed = 12345;
	int			mismatches = 0;
	clock_t		t0;
	double		secs;

	/* random small queues against the reference */
	for (int round = 0; round < 20000; round++)
	{
		int			n = 1 + (int) ((seed = seed * 1103515245u + 12345u) >> 16) % 10;

		for (int i = 0; i < n; i++)
		{
			unsigned int r = (seed = seed * 1103515245u + 12345u) >> 16;

			q[i].mode = (r & 1) ? ZKR_MODE_EXCLUSIVE : ZKR_MODE_SHARED;
			q[i].zklock = (r & 6) != 0;
			q[i].session = 1 + (r >> 3) % 3;
		}
		zkr_mark_holding(q, n);
		for (int i = 0; i < n; i++)
			if (q[i].holding != holding_reference(q, i) ||
				q[i].waits_for != waits_for_reference(q, i))
				mismatches++;
	}
	ok(mismatches == 0, "mark_holding: 20000 random queues agree with the pairwise rule (holding, waits_for)");
	if (mismatches)
		diag("%d mismatches", mismatches);

	/* a long queue: linear, so a moment; the pairwise rule takes minutes */
	for (int i = 0; i < 200000; i++)
	{
		q[i].mode = ZKR_MODE_SHARED;
		q[i].zklock = true;
		q[i].session = 7;
	}
	q[199999].mode = ZKR_MODE_EXCLUSIVE;
	t0 = clock();
	zkr_mark_holding(q, 200000);
	secs = (double) (clock() - t0) / CLOCKS_PER_SEC;
	ok(q[199999].holding && q[0].holding,
	   "mark_holding: one backend's 200,000 nodes all hold");
	ok(secs < 1.0, "mark_holding: 200,000 contenders in %.3f s (the pairwise rule: about 5 s)", secs);
}

/* ----------------------------------------------------------------
 * waitgraph: blockers, records, cycles, victims
 * ----------------------------------------------------------------
 */

static void
test_waitgraph(void)
{
	{
		/* queue: A holds S, B waits S (shared beside A), C waits X */
		const char *const names[] = {"_c_a-__READ__0000000001",
			"_c_b-__READ__0000000002", "_c_c-__WRIT__0000000003",
			"_c_d-__WRIT__0000000004"};
		ZkrContender c[4];
		int64_t		owners[4];
		int			out[4];
		int			nc = zkr_collect(names, 4, c);
		int			k;

		for (int i = 0; i < nc; i++)
			owners[i] = (int64_t) (c[i].name[3] - 'a' + 1);	/* a=1, b=2 ... */
		k = zkw_blockers(c, owners, nc, names[2], ZKR_MODE_EXCLUSIVE, 3, out);
		ok(k == 2, "blockers: an exclusive waiter waits for both shared ahead");
		k = zkw_blockers(c, owners, nc, names[1], ZKR_MODE_SHARED, 2, out);
		ok(k == 0, "blockers: a shared waiter does not wait for shared ahead");
		k = zkw_blockers(c, owners, nc, names[3], ZKR_MODE_EXCLUSIVE, 4, out);
		ok(k == 3, "blockers: the last exclusive waits for everyone ahead");
		/* d's own earlier node never blocks it */
		owners[0] = 4;
		k = zkw_blockers(c, owners, nc, names[3], ZKR_MODE_EXCLUSIVE, 4, out);
		ok(k == 2, "blockers: a node of the waiter's own session is not a blocker");
		ok(zkw_blockers(c, owners, nc, "_c_z-__WRIT__0000000009",
						ZKR_MODE_EXCLUSIVE, 9, out) == -1,
		   "blockers: -1 when self is not in the queue");
	}
	{
		/* holders ahead: the shared prefix, or the one exclusive first */
		const char *const names[] = {"_c_a-__READ__0000000001",
			"_c_b-__READ__0000000002", "_c_c-__WRIT__0000000003",
			"_c_d-__READ__0000000004", "_c_e-__WRIT__0000000005"};
		const char *const xs[] = {"_c_p-__WRIT__0000000007",
			"_c_q-__READ__0000000008", "_c_r-__WRIT__0000000009"};
		ZkrContender c[5];
		int			out[5];
		int			nc = zkr_collect(names, 5, c);
		int			k;

		k = zkw_holders_ahead(c, nc, names[4], out);
		ok(k == 2 && out[0] + out[1] == 1,
		   "holders ahead: the shared prefix, not the waiters between");
		ok(zkw_holders_ahead(c, nc, names[2], out) == 2,
		   "holders ahead: an exclusive waiter behind two shared holders");
		ok(zkw_holders_ahead(c, nc, names[1], out) == 1,
		   "holders ahead: a holder has the holders ahead of it");
		ok(zkw_holders_ahead(c, nc, names[0], out) == 0,
		   "holders ahead: none ahead of the first");
		nc = zkr_collect(xs, 3, c);
		k = zkw_holders_ahead(c, nc, xs[2], out);
		ok(k == 1 && strcmp(c[out[0]].name, xs[0]) == 0,
		   "holders ahead: only the exclusive holder, not the shared waiter");
		ok(zkw_holders_ahead(c, nc, "_c_z-__WRIT__0000000099", out) == -1,
		   "holders ahead: -1 when self is not in the queue");
	}
	{
		ZkwRecord	r;
		ZkwRecord	back;
		char		buf[512];
		size_t		len;

		memset(&r, 0, sizeof(r));
		r.sysid = 7290123456789012345ULL;
		r.pid = 4242;
		r.mode = ZKR_MODE_SHARED;
		r.node = "/zk lock/a b/_c_x-__READ__0000000001";
		r.resource = "a b\nc=d";

		r.node_len = strlen(r.node);
		r.resource_len = strlen(r.resource);
		len = zkw_format_record(&r, buf, sizeof(buf));
		ok(len > 0 && zkw_parse_record(buf, len, &back) &&
		   back.sysid == r.sysid && back.pid == r.pid &&
		   back.mode == r.mode && back.node_len == r.node_len &&
		   memcmp(back.node, r.node, r.node_len) == 0 &&
		   back.resource_len == r.resource_len &&
		   memcmp(back.resource, r.resource, r.resource_len) == 0,
		   "record: spaces and newlines in node and resource survive");
		ok(zkw_format_record(&r, buf, 40) == 0,
		   "record: too small a buffer is refused");
		ok(!zkw_parse_record("zklock host=x", 13, &back),
		   "record: a lock node's owner line is not a record");
		ok(!zkw_parse_record(buf, 30, &back),
		   "record: a truncated record is refused");
		len = zkw_format_record(&r, buf, sizeof(buf));
		*(strstr(buf, " beat=") - 3) = 'X';	/* inside the node: its length holds */
		ok(zkw_parse_record(buf, len, &back), "record: node bytes are opaque");
		ok(!zkw_parse_record("zklock-wait sysid=1 pid=2 mode=shared node=999:/a resource=",
							 59, &back),
		   "record: a node length past the end is refused");
	}
	{
		/*
		 * Semaphore waiter 0 (any_of) waits for lease holders 1 and 2;
		 * 1 waits for 0 (a row lock).  With 2 free the component {0, 1}
		 * is no deadlock; once 2 waits for 0 too, {0, 1, 2} is.
		 */
		ZkwEdge		e[4] = {{0, 1}, {0, 2}, {1, 0}, {2, 0}};
		bool		any_of[3] = {true, false, false};
		bool		and_only[3] = {false, false, false};
		int			comp[3];
		int			n;

		n = zkw_component(3, e, 3, 0, comp);
		ok(n == 2 && !zkw_certain(3, e, 3, comp, n, any_of),
		   "certain: a semaphore waiter with a free holder is no deadlock");
		ok(zkw_certain(3, e, 3, comp, n, and_only),
		   "certain: the same edges as lock waits are one");
		n = zkw_component(3, e, 4, 0, comp);
		ok(n == 3 && zkw_certain(3, e, 4, comp, n, any_of),
		   "certain: every holder on the cycle: a deadlock");
	}
	{
		/* the PostgreSQL-local edges a record publishes (issue 30) */
		ZkwRecord	r;
		ZkwRecord	back;
		char		buf[2048];
		size_t		len;
		const char *old = "zklock-wait sysid=5 pid=6 mode=exclusive node=2:/a resource=r";
		const char *bad[] = {
			"zklock-wait sysid=5 pid=6 mode=exclusive node=2:/a blocked= resource=r",
			"zklock-wait sysid=5 pid=6 mode=exclusive node=2:/a blocked=0 resource=r",
			"zklock-wait sysid=5 pid=6 mode=exclusive node=2:/a blocked=7, resource=r",
			"zklock-wait sysid=5 pid=6 mode=exclusive node=2:/a blocked=2147483648 resource=r",
			"zklock-wait sysid=5 pid=6 mode=exclusive node=2:/a blocked=7x resource=r",
			"zklock-wait sysid=18446744073709551616 pid=6 mode=exclusive node=2:/a resource=r",
		};
		bool		all_refused = true;
		bool		same = true;

		memset(&r, 0, sizeof(r));
		r.sysid = 18446744073709551615ULL;
		r.pid = 99;
		r.mode = ZKR_MODE_EXCLUSIVE;
		r.node = "/l/_c_a-__WRIT__0000000002";
		r.node_len = strlen(r.node);
		r.resource = "x blocked=1 resource=y";
		r.resource_len = strlen(r.resource);
		r.nblocked = ZKW_MAX_BLOCKED;
		for (int i = 0; i < ZKW_MAX_BLOCKED; i++)
			r.blocked[i] = 2147483647 - i;
		len = zkw_format_record(&r, buf, sizeof(buf));
		ok(len > 0 && zkw_parse_record(buf, len, &back) &&
		   back.sysid == r.sysid && back.nblocked == ZKW_MAX_BLOCKED &&
		   back.resource_len == r.resource_len &&
		   memcmp(back.resource, r.resource, r.resource_len) == 0,
		   "record: %d blocked pids, the greatest sysid and a resource that looks like fields survive",
		   ZKW_MAX_BLOCKED);
		for (int i = 0; i < back.nblocked; i++)
			same &= (back.blocked[i] == r.blocked[i]);
		ok(same, "record: the blocked pids come back in order");
		r.nblocked = 0;
		len = zkw_format_record(&r, buf, sizeof(buf));
		ok(len > 0 && strstr(buf, "blocked") == strstr(buf, "x blocked") + 2 &&
		   zkw_parse_record(buf, len, &back) && back.nblocked == 0,
		   "record: an empty list is left out");
		ok(zkw_parse_record(old, strlen(old), &back) && back.nblocked == 0 &&
		   back.resource_len == 1,
		   "record: a record of 1.4 still parses, with no local edges");
		for (int i = 0; i < (int) (sizeof(bad) / sizeof(bad[0])); i++)
			if (zkw_parse_record(bad[i], strlen(bad[i]), &back))
			{
				all_refused = false;
				diag("parsed: %s", bad[i]);
			}
		ok(all_refused, "record: malformed lists and numbers past 2^64 - 1 are refused whole");
		r.mode = ZKR_MODE_SEMAPHORE;
		ok(zkw_format_record(&r, buf, sizeof(buf)) == 0,
		   "record: a semaphore's record without its leases' parent is refused");
		r.leases = "/zk/sem/leases";
		r.leases_len = strlen(r.leases);
		len = zkw_format_record(&r, buf, sizeof(buf));
		ok(len > 0 && zkw_parse_record(buf, len, &back) &&
		   back.mode == ZKR_MODE_SEMAPHORE && back.leases_len == r.leases_len &&
		   memcmp(back.leases, r.leases, r.leases_len) == 0 &&
		   back.resource_len == r.resource_len,
		   "record: a semaphore's record keeps its leases' parent");
		ok(!zkw_parse_record("zklock-wait sysid=5 pid=6 mode=semaphore node=2:/a beat=1 resource=r",
							 68, &back) &&
		   !zkw_parse_record("zklock-wait sysid=5 pid=6 mode=shared node=2:/a beat=1 leases=2:/l resource=r",
							 77, &back),
		   "record: leases go with mode semaphore, and only with it");
		r.mode = ZKR_MODE_EXCLUSIVE;
		r.leases = NULL;
		r.leases_len = 0;
		{
			/* 65 pids: one more than a record may list */
			char		many[2048];
			int			n = snprintf(many, sizeof(many),
									 "zklock-wait sysid=5 pid=6 mode=shared node=2:/a blocked=1");

			for (int i = 2; i <= ZKW_MAX_BLOCKED + 1; i++)
				n += snprintf(many + n, sizeof(many) - n, ",%d", i);
			n += snprintf(many + n, sizeof(many) - n, " resource=r");
			ok(!zkw_parse_record(many, n, &back),
			   "record: a list longer than %d is refused", ZKW_MAX_BLOCKED);
		}
	}
	{
		/*
		 * A backend's name: system identifier, postmaster start time and
		 * pid (issue 37: a standby has its primary's system identifier,
		 * and in PID namespaces their pids collide).
		 */
		ZkwRecord	r;
		ZkwRecord	back;
		ZkwBackend	b;
		char		buf[512];
		size_t		len;
		const char *rec15 = "zklock-wait sysid=5 pid=6 mode=exclusive node=2:/a beat=3 blocked=7,8 resource=r";
		const char *badstart[] = {
			"zklock-wait sysid=5 start= pid=6 mode=exclusive node=2:/a resource=r",
			"zklock-wait sysid=5 start=1x pid=6 mode=exclusive node=2:/a resource=r",
			"zklock-wait sysid=5 start=18446744073709551616 pid=6 mode=exclusive node=2:/a resource=r",
			"zklock-wait sysid=5 pid=6 start=1 mode=exclusive node=2:/a resource=r",
		};
		bool		all_refused = true;
		ZkwBackend	primary = {5, true, 849000000000000ULL, 15};
		ZkwBackend	standby = {5, true, 849000000000001ULL, 15};
		ZkwBackend	old = {5, false, 0, 15};
		ZkwBackend	old_too = {5, false, 0, 15};
		ZkwBackend	other_pid = {5, true, 849000000000000ULL, 16};

		memset(&r, 0, sizeof(r));
		r.sysid = 7290123456789012345ULL;
		r.has_start = true;
		r.start = 18446744073709551615ULL;
		r.pid = 15;
		r.mode = ZKR_MODE_EXCLUSIVE;
		r.node = "/l/_c_a-__WRIT__0000000002";
		r.node_len = strlen(r.node);
		r.resource = "x start=1 pid=2";
		r.resource_len = strlen(r.resource);
		len = zkw_format_record(&r, buf, sizeof(buf));
		ok(len > 0 &&
		   strncmp(buf, "zklock-wait sysid=7290123456789012345 start=18446744073709551615 pid=15 ", 72) == 0 &&
		   zkw_parse_record(buf, len, &back) && back.has_start &&
		   back.start == r.start && back.sysid == r.sysid && back.pid == 15 &&
		   back.resource_len == r.resource_len,
		   "identity: a record names its postmaster's start between sysid and pid");
		ok(zkw_parse_record(rec15, strlen(rec15), &back) && !back.has_start &&
		   back.sysid == 5 && back.pid == 6 && back.nblocked == 2 &&
		   back.has_beat && back.beat == 3,
		   "identity: a record of 1.5 (no start) still parses");
		for (int i = 0; i < (int) (sizeof(badstart) / sizeof(badstart[0])); i++)
			if (zkw_parse_record(badstart[i], strlen(badstart[i]), &back))
			{
				all_refused = false;
				diag("parsed: %s", badstart[i]);
			}
		ok(all_refused, "identity: a malformed or misplaced start is refused whole");

		ok(zkw_parse_owner("zklock host=h port=5432 sysid=5 start=849000000000001 pid=15 db=d role=r application_name=a", &b) &&
		   b.sysid == 5 && b.has_start && b.start == 849000000000001ULL &&
		   b.pid == 15 && zkw_same_backend(&b, &standby),
		   "identity: an owner line names sysid, start and pid");
		ok(zkw_parse_owner("zklock host=h port=5432 sysid=5 pid=15 db=d role=r application_name=a", &b) &&
		   !b.has_start && b.sysid == 5 && b.pid == 15,
		   "identity: an owner line of 1.5 has no start");
		ok(zkw_parse_owner("zklock host=h port=1 sysid=5 pid=7 db=x start=9 role=r application_name= start=3", &b) &&
		   !b.has_start && b.pid == 7,
		   "identity: \" start=\" in a 1.5 line's names is no start time");
		ok(!zkw_parse_owner("zklock host=h port=1 sysid=5 start= pid=7 db=x", &b) &&
		   !zkw_parse_owner("zklock host=h port=1 sysid=5 start=9", &b) &&
		   !zkw_parse_owner("zklock host=h port=1 sysid=5 pid=0 db=x", &b) &&
		   !zkw_parse_owner("zklock host=x", &b) &&
		   !zkw_parse_owner("192.168.0.7", &b) &&
		   !zkw_parse_owner(NULL, &b),
		   "identity: malformed owner lines and other clients' data are refused");

		ok(!zkw_same_backend(&primary, &standby) &&
		   !zkw_same_instance(&primary, &standby),
		   "identity: a standby's backend is not its primary's with the same pid");
		ok(zkw_same_backend(&primary, &primary) &&
		   !zkw_same_backend(&primary, &other_pid) &&
		   zkw_same_instance(&primary, &other_pid),
		   "identity: one postmaster, pids tell its backends apart");
		ok(zkw_same_backend(&old, &old_too),
		   "identity: two names of 1.5 match by sysid and pid, as in 1.5");
		ok(!zkw_same_backend(&old, &primary) && !zkw_same_backend(&standby, &old),
		   "identity: a name of 1.5 never matches a newer one");
	}
	{
		/* 0 -> 1 -> 2 -> 0, and 2 -> 3 (a dead end) */
		ZkwVertex	v[4] = {{10, true, 100}, {11, true, 300}, {12, false, 0},
		{13, true, 200}};
		ZkwEdge		e[4] = {{0, 1}, {1, 2}, {2, 3}, {2, 0}};
		int			cyc[4];
		int			len = zkw_find_cycle(4, e, 4, 0, cyc);
		int			vi;

		ok(len == 3 && cyc[0] == 0 && cyc[1] == 1 && cyc[2] == 2,
		   "cycle: 0 -> 1 -> 2 -> 0 found past a dead end");
		vi = zkw_victim(v, cyc, len);
		ok(vi == 1, "victim: the youngest record (czxid 300)");
		ok(zkw_find_cycle(4, e, 4, 3, cyc) == 0,
		   "cycle: none through a vertex that waits for nobody");
	}
	{
		/* no cycle: a chain and a cycle not through start */
		ZkwEdge		e[3] = {{0, 1}, {1, 2}, {2, 1}};
		int			cyc[3];

		ok(zkw_find_cycle(3, e, 3, 0, cyc) == 0,
		   "cycle: a cycle that does not pass through start is not ours");
	}
	{
		/* every member computes the same victim */
		ZkwVertex	v[3] = {{5, true, 70}, {6, true, 90}, {7, true, 80}};
		ZkwEdge		e[3] = {{0, 1}, {1, 2}, {2, 0}};
		int			cyc[3];
		int			victims[3];

		for (int s = 0; s < 3; s++)
		{
			int			len = zkw_find_cycle(3, e, 3, s, cyc);

			victims[s] = len == 3 ? cyc[zkw_victim(v, cyc, len)] : -1;
		}
		ok(victims[0] == 1 && victims[1] == 1 && victims[2] == 1,
		   "victim: the same member whoever searches");
	}
	{
		ZkwVertex	v[2] = {{1, false, 0}, {2, false, 0}};
		int			cyc[2] = {0, 1};

		ok(zkw_victim(v, cyc, 2) == -1, "victim: none without records");
	}
	{
		/*
		 * Overlapping cycles A->B->A and A->B->C->A (A=0, B=1, C=2), C
		 * the youngest: whoever searches, the component is {A, B, C} and
		 * the victim C; victims per cycle found would be A and C, two.
		 */
		ZkwVertex	v[4] = {{1, true, 200}, {2, true, 100}, {3, true, 300},
		{4, true, 400}};
		ZkwEdge		e[5] = {{0, 1}, {1, 0}, {1, 2}, {2, 0}, {3, 0}};
		int			comp[4];
		int			victims[3];
		int			len;

		for (int s = 0; s < 3; s++)
		{
			len = zkw_component(4, e, 5, s, comp);
			victims[s] = len == 3 ? comp[zkw_victim(v, comp, len)] : -1;
		}
		ok(victims[0] == 2 && victims[1] == 2 && victims[2] == 2,
		   "component: overlapping cycles give one victim (got %d %d %d)",
		   victims[0], victims[1], victims[2]);
		len = zkw_component(4, e, 5, 3, comp);
		ok(len == 1 && comp[0] == 3,
		   "component: a vertex that only waits into a cycle is not in it");
	}
}

/* Counting semaphores: layouts, names, the two counting rules, kazoo's text */
static void
test_semaphores(void)
{
	const char *uuid = "0f8e2c1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
	char		out[128];
	int64_t		v;

	ok(zkr_semaphore_parent(ZKR_PROTOCOL_CURATOR_RW, ZKR_SEM_LEASE, "/r/job",
							out, sizeof(out)) > 0 &&
	   strcmp(out, "/r/job/leases") == 0, "semaphore: curator leases parent");
	ok(zkr_semaphore_parent(ZKR_PROTOCOL_CURATOR_MUTEX, ZKR_SEM_MUTEX, "/r/job",
							out, sizeof(out)) > 0 &&
	   strcmp(out, "/r/job/locks") == 0, "semaphore: curator mutex parent");
	ok(zkr_semaphore_parent(ZKR_PROTOCOL_KAZOO, ZKR_SEM_LEASE, "/r/job",
							out, sizeof(out)) > 0 &&
	   strcmp(out, "/r/job") == 0, "semaphore: kazoo leases under the path");
	ok(zkr_semaphore_parent(ZKR_PROTOCOL_KAZOO, ZKR_SEM_MUTEX, "/r/job",
							out, sizeof(out)) > 0 &&
	   strcmp(out, "/r/job-__lock__") == 0, "semaphore: kazoo mutex sibling");
	ok(zkr_semaphore_parent(ZKR_PROTOCOL_KAZOO, ZKR_SEM_MUTEX, "/r/job",
							out, 10) == 0, "semaphore: a parent that does not fit");

	ok(zkr_semaphore_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_SEM_LEASE, uuid,
							out, sizeof(out)) > 0 &&
	   strcmp(out, "_c_0f8e2c1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b-lease-") == 0,
	   "semaphore: curator lease prefix (protected)");
	ok(zkr_semaphore_prefix(ZKR_PROTOCOL_CURATOR_RW, ZKR_SEM_MUTEX, uuid,
							out, sizeof(out)) > 0 &&
	   strcmp(out, "_c_0f8e2c1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b-lock-") == 0,
	   "semaphore: curator mutex prefix, an exclusive contender");
	{
		ZkrContender c;
		char		name[160];

		snprintf(name, sizeof(name), "%s%s", out, "0000000007");
		ok(zkr_parse_child(name, &c) && c.mode == ZKR_MODE_EXCLUSIVE,
		   "semaphore: the curator mutex node parses as exclusive");
	}
	ok(zkr_semaphore_prefix(ZKR_PROTOCOL_KAZOO, ZKR_SEM_LEASE, uuid,
							out, sizeof(out)) > 0 &&
	   strcmp(out, "0f8e2c1a3b4d4e5f8a9b0c1d2e3f4a5b") == 0,
	   "semaphore: kazoo lease is uuid4().hex");
	{
		ZkrContender c;

		ok(!zkr_parse_child(out, &c), "semaphore: a kazoo lease is no contender");
	}
	ok(zkr_semaphore_prefix(ZKR_PROTOCOL_KAZOO, ZKR_SEM_MUTEX, uuid,
							out, sizeof(out)) > 0 &&
	   strcmp(out, "0f8e2c1a3b4d4e5f8a9b0c1d2e3f4a5b__lock__") == 0,
	   "semaphore: kazoo mutex prefix");
	ok(zkr_semaphore_counts_after_create(ZKR_PROTOCOL_CURATOR_RW) &&
	   zkr_semaphore_counts_after_create(ZKR_PROTOCOL_CURATOR_MUTEX) &&
	   !zkr_semaphore_counts_after_create(ZKR_PROTOCOL_KAZOO),
	   "semaphore: Curator counts after its create, kazoo before");

	{
		const char *three[] = {"a-lease-0000000001", "b-lease-0000000002",
		"c-lease-0000000003"};
		const char *four[] = {"a-lease-0000000001", "b-lease-0000000002",
		"c-lease-0000000003", "x"};

		ok(zkr_semaphore_decide(three, 3, "c-lease-0000000003", 3) == ZKR_SEM_HELD,
		   "semaphore: three leases of three hold");
		ok(zkr_semaphore_decide(three, 3, "c-lease-0000000003", 2) == ZKR_SEM_WAIT,
		   "semaphore: three leases of two wait");
		ok(zkr_semaphore_decide(four, 4, "a-lease-0000000001", 3) == ZKR_SEM_WAIT,
		   "semaphore: every child counts, whatever its name (as Curator)");
		ok(zkr_semaphore_decide(three, 3, "d-lease-0000000004", 5) == ZKR_SEM_MISSING,
		   "semaphore: our lease missing is told apart");
		ok(zkr_semaphore_decide(three, 0, "a-lease-0000000001", 5) == ZKR_SEM_MISSING,
		   "semaphore: an empty list misses our lease");
	}
	ok(zkr_semaphore_has_room(2, 3) && !zkr_semaphore_has_room(3, 3) &&
	   !zkr_semaphore_has_room(4, 3) && zkr_semaphore_has_room(0, 1),
	   "semaphore: kazoo has room below the count only");

	ok(zkr_parse_max_leases("3", 1, &v) && v == 3, "max_leases: \"3\"");
	ok(zkr_parse_max_leases(" 12\n", 4, &v) && v == 12,
	   "max_leases: white space around, as int() strips it");
	ok(zkr_parse_max_leases("+7", 2, &v) && v == 7, "max_leases: a plus sign");
	ok(zkr_parse_max_leases("-2", 2, &v) && v == -2, "max_leases: negative");
	ok(zkr_parse_max_leases("1_000", 5, &v) && v == 1000,
	   "max_leases: an underscore between digits");
	ok(zkr_parse_max_leases("007", 3, &v) && v == 7, "max_leases: leading zeros");
	ok(!zkr_parse_max_leases("", 0, &v), "max_leases: empty is not a number");
	ok(!zkr_parse_max_leases("  ", 2, &v), "max_leases: blanks are not a number");
	ok(!zkr_parse_max_leases("3x", 2, &v), "max_leases: trailing junk");
	ok(!zkr_parse_max_leases("1__0", 4, &v) && !zkr_parse_max_leases("_1", 2, &v) &&
	   !zkr_parse_max_leases("1_", 2, &v), "max_leases: misplaced underscores");
	ok(!zkr_parse_max_leases("3.0", 3, &v), "max_leases: not an integer");
	ok(!zkr_parse_max_leases("-", 1, &v), "max_leases: a lone sign");
	ok(zkr_parse_max_leases("99999999999999999999999", 23, &v) && v == INT64_MAX,
	   "max_leases: beyond int64 clips");
	ok(zkr_parse_max_leases("3\0", 1, &v) && v == 3,
	   "max_leases: only len bytes are read");
	ok(strcmp(zkr_mode_name(ZKR_MODE_SEMAPHORE), "semaphore") == 0,
	   "mode name: semaphore");
}

/* ----------------------------------------------------------------
 * statevict: which rows a full statistics table gives up
 * ----------------------------------------------------------------
 */

/* a shuffle of 1..n, from a fixed seed: deterministic runs */
static void
shuffled_clocks(uint64_t *a, int n, unsigned seed)
{
	for (int i = 0; i < n; i++)
		a[i] = (uint64_t) i + 1;
	for (int i = n - 1; i > 0; i--)
	{
		int			j;
		uint64_t	t;

		seed = seed * 1103515245u + 12345u;
		j = (int) ((seed >> 8) % (unsigned) (i + 1));
		t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

static void
test_statevict(void)
{
	static uint64_t a[5000];
	int			sizes[] = {1, 2, 3, 10, 19, 20, 21, 1000, 5000};
	bool		all = true;

	ok(zkst_evict_count(10) == 1 && zkst_evict_count(19) == 1 &&
	   zkst_evict_count(20) == 1 && zkst_evict_count(1000) == 50 &&
	   zkst_evict_count(1000000) == 50000,
	   "evict count: 5 %% of the table, at least one");

	/* every k of every size, over shuffled distinct clocks: the k-th smallest */
	for (int s = 0; s < (int) (sizeof(sizes) / sizeof(sizes[0])); s++)
	{
		int			n = sizes[s];

		for (int k = 1; k <= n; k += (n > 100 ? 97 : 1))
		{
			shuffled_clocks(a, n, (unsigned) (n * 31 + k));
			if (zkst_evict_bound(a, n, k) != (uint64_t) k)
			{
				all = false;
				diag("n=%d k=%d: bound wrong", n, k);
			}
		}
	}
	ok(all, "evict bound: the k-th smallest clock for every k, sizes 1..5000");

	/* already sorted and reversed (hash order may be either) */
	for (int i = 0; i < 1000; i++)
		a[i] = (uint64_t) (1000 + i);
	ok(zkst_evict_bound(a, 1000, 50) == 1049, "evict bound: sorted input");
	for (int i = 0; i < 1000; i++)
		a[i] = (uint64_t) (2000 - i);
	ok(zkst_evict_bound(a, 1000, 50) == 1050, "evict bound: reversed input");

	/* k out of range is clamped, never read past the array */
	shuffled_clocks(a, 10, 7);
	ok(zkst_evict_bound(a, 10, 0) == 1 && zkst_evict_bound(a, 10, 11) == 10,
	   "evict bound: k clamped to 1..n");
}

/*
 * Revocation requests (revokeform.c): the bare words of Curator and the
 * recipe only when they are the whole data, zklock's form only as the
 * second line of a zklock owner line; the form built keeps the owner's
 * first line and drops any older request.
 */
static void
test_revoke_forms(void)
{
	const char *owner = "zklock host=db1 port=5432 sysid=1 start=2 pid=42 db=x role=r application_name=job";
	char		buf[512];
	char		built[512];
	const char *by;
	size_t		by_len;
	size_t		n;

	ok(zkv_parse("__REVOKE__", 10, &by, &by_len) == ZKV_CURATOR &&
	   by_len == 10, "revoke: Curator's word");
	ok(zkv_parse("unlock", 6, &by, &by_len) == ZKV_RECIPE && by_len == 6,
	   "revoke: the recipe's word");
	ok(zkv_parse("__REVOKE__x", 11, &by, &by_len) == ZKV_NONE,
	   "revoke: a longer word is no request");
	ok(zkv_parse("unloc", 5, &by, &by_len) == ZKV_NONE,
	   "revoke: a shorter word is no request");
	ok(zkv_parse("", 0, &by, &by_len) == ZKV_NONE,
	   "revoke: empty data (a revocable Curator node) is no request");
	ok(zkv_parse(NULL, 0, &by, &by_len) == ZKV_NONE,
	   "revoke: no data is no request");
	ok(zkv_parse(owner, strlen(owner), &by, &by_len) == ZKV_NONE,
	   "revoke: an owner line alone is no request");

	n = zkv_build(owner, strlen(owner), "zklock host=db2 pid=7", built,
				  sizeof(built));
	ok(n == strlen(owner) + 1 + 7 + 21 && strlen(built) == n,
	   "revoke: the zklock form is the owner line, a newline, the request");
	ok(strncmp(built, owner, strlen(owner)) == 0 &&
	   built[strlen(owner)] == '\n', "revoke: the owner line stays first");
	ok(zkv_parse(built, n, &by, &by_len) == ZKV_ZKLOCK &&
	   by_len == 21 && memcmp(by, "zklock host=db2 pid=7", 21) == 0,
	   "revoke: the zklock form parses back to its requester");

	/* a second request replaces the first, on the same owner line */
	n = zkv_build(built, n, "zklock host=db3 pid=8", buf, sizeof(buf));
	ok(n == strlen(owner) + 1 + 7 + 21 &&
	   zkv_parse(buf, n, &by, &by_len) == ZKV_ZKLOCK &&
	   memcmp(by, "zklock host=db3 pid=8", 21) == 0,
	   "revoke: a request built on a requested node names the new requester");

	ok(zkv_build("10.0.0.1", 8, "x", buf, sizeof(buf)) == 0,
	   "revoke: no zklock form for a node without an owner line");
	ok(zkv_build(owner, strlen(owner), "a\nb", buf, sizeof(buf)) == 0,
	   "revoke: a requester with a newline is refused");
	ok(zkv_build(owner, strlen(owner), "x", buf, 20) == 0,
	   "revoke: a form that does not fit is refused");
	ok(zkv_parse("zklock a\nrevoke", 15, &by, &by_len) == ZKV_NONE,
	   "revoke: a cut second line is no request");
	ok(zkv_parse("zklock a\nrevoke \nmore", 22, &by, &by_len) == ZKV_ZKLOCK &&
	   by_len == 0, "revoke: the requester ends at its line's end");
	ok(zkv_parse("zklock a\nrevoked x", 18, &by, &by_len) == ZKV_NONE,
	   "revoke: another second line is no request");

	ok(strcmp(zkv_word_for_node("_c_" UUID1 "-__WRIT__0000000001"),
			  ZKV_CURATOR_WORD) == 0, "revoke: Curator's write lock");
	ok(strcmp(zkv_word_for_node("_c_" UUID1 "-lock-0000000001"),
			  ZKV_CURATOR_WORD) == 0, "revoke: Curator's mutex");
	ok(zkv_word_for_node("leases/_c_" UUID1 "-lease-0000000001") == NULL,
	   "revoke: no word for Curator's lease (no revocation)");
	ok(zkv_word_for_node(HEX32 "__lock__0000000001") == NULL,
	   "revoke: no word for kazoo's lock (no revocation)");
	ok(zkv_word_for_node(HEX32 "__rlock__0000000001") == NULL,
	   "revoke: no word for kazoo's read lock");
	ok(zkv_word_for_node(HEX32) == NULL, "revoke: no word for kazoo's lease");
	ok(strcmp(zkv_word_for_node("/locks/x/_c_" UUID1 "-__READ__0000000007"),
			  ZKV_CURATOR_WORD) == 0, "revoke: Curator's read lock, by path");
}

/* ----------------------------------------------------------------
 * connfail: a failed connection, from a libzookeeper log line
 * ----------------------------------------------------------------
 */
static void
test_connfail(void)
{
	/* 3.8.0's format, as zklock's log shows it */
	ok(zkcf_classify("Socket 127.0.0.1:22181 zk retcode=-4, errno=104(Connection reset by peer): failed while receiving a server response") == ZKCF_RESET,
	   "connfail: 3.8.0's reset line");
	ok(zkcf_classify("Socket [127.0.0.1:22181] zk retcode=-4, errno=104(Connection reset by peer): failed while flushing send queue") == ZKCF_RESET,
	   "connfail: reset, address in brackets, while sending");
	ok(zkcf_classify("Socket 127.0.0.1:2181 zk retcode=-4, errno=111(Connection refused): server refused to accept the client") == ZKCF_OTHER,
	   "connfail: refused is no reset");
	ok(zkcf_classify("Socket 127.0.0.1:2181 zk retcode=-4, errno=112(Host is down): failed while receiving a server response") == ZKCF_OTHER,
	   "connfail: a closed connection (112) is no reset");
	ok(zkcf_classify("Socket 127.0.0.1:2181 zk retcode=-7, errno=104(Connection reset by peer): connection to 127.0.0.1:2181 timed out") == ZKCF_OTHER,
	   "connfail: a timeout with a stale errno 104 is no reset");
	ok(zkcf_classify("Socket 127.0.0.1:2181 zk retcode=-4, errno=1040(?): x") == ZKCF_OTHER &&
	   zkcf_classify("Socket 127.0.0.1:2181 zk retcode=-4, errno=10(?): x") == ZKCF_OTHER,
	   "connfail: only errno 104 itself");
	ok(zkcf_classify("Socket 127.0.0.1:2181 zk retcode=-4, errno=") == ZKCF_OTHER &&
	   zkcf_classify("Socket 127.0.0.1:2181 zk retcode=-4, errno=99999999999999999999104") == ZKCF_OTHER,
	   "connfail: a cut or absurd errno is some other failure");
	ok(zkcf_classify("initiated connection to server 127.0.0.1:2181") == ZKCF_NONE &&
	   zkcf_classify("Socket 127.0.0.1:2181 zk retcode=-4") == ZKCF_NONE &&
	   zkcf_classify("errno=104(Connection reset by peer)") == ZKCF_NONE &&
	   zkcf_classify("") == ZKCF_NONE,
	   "connfail: other lines are no failure");
}

int
main(void)
{
	test_parse_child();
	test_seq_cmp();
	test_sort_collect();
	test_decide();
	test_encode();
	test_names();
	test_protocols();
	test_decide_non_transitive();
	test_certain_deadlock();
	test_mark_holding();
	test_waitgraph();
	test_semaphores();
	test_statevict();
	test_revoke_forms();
	test_connfail();

	printf("1..%d\n", n_tests);
	if (n_failed > 0)
		diag("%d of %d tests failed", n_failed, n_tests);
	return n_failed > 0 ? 1 : 0;
}
