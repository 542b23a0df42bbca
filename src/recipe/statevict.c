/*-------------------------------------------------------------------------
 *
 * statevict.c
 *	  Which rows a full statistics table gives up (see statevict.h).
 *
 * A stream of lock names never used before (a name per job run, per
 * customer) keeps the table full, and every new name must make room.
 * Evicting one row per new name would cost a scan of the whole table
 * under its lock for every such call: measured with 16 clients taking
 * fresh names, about 20 us of backend CPU per lock cycle with the default
 * 1000 rows, and proportionally more with a larger zklock.stat_max_names.
 * pg_stat_statements faces the same trade and evicts the least used 5 %
 * at once; so does zklock, by last use: one scan, a selection in place
 * (no allocation: the caller holds an LWLock and must not raise), and a
 * second scan that removes what is at or below the bound, every 5 % of
 * the table's size in new names.  A table of fewer than 20 rows still
 * evicts exactly the least recently used one.
 *
 * No PostgreSQL here: test/unit exercises it.
 *
 * src/recipe/statevict.c
 *
 *-------------------------------------------------------------------------
 */
#include "recipe/statevict.h"

int
zkst_evict_count(int cap)
{
	int			k = cap / 20;

	return k < 1 ? 1 : k;
}

static void
swap(uint64_t *a, int i, int j)
{
	uint64_t	t = a[i];

	a[i] = a[j];
	a[j] = t;
}

/*
 * Hoare's selection, middle element as pivot: the clocks of a table that
 * evicts by age come in hash order, not sorted, so the middle pivot is as
 * good as a random one, and needs no random state.
 */
uint64_t
zkst_evict_bound(uint64_t *clocks, int n, int k)
{
	int			lo = 0;
	int			hi = n - 1;
	int			want = k - 1;

	if (n <= 0)
		return 0;
	if (want < 0)
		want = 0;
	if (want >= n)
		want = n - 1;
	while (lo < hi)
	{
		uint64_t	pivot = clocks[lo + (hi - lo) / 2];
		int			i = lo;
		int			j = hi;

		while (i <= j)
		{
			while (clocks[i] < pivot)
				i++;
			while (clocks[j] > pivot)
				j--;
			if (i <= j)
			{
				swap(clocks, i, j);
				i++;
				j--;
			}
		}
		if (want <= j)
			hi = j;
		else if (want >= i)
			lo = i;
		else
			break;
	}
	return clocks[want];
}
