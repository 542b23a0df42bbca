/*-------------------------------------------------------------------------
 *
 * statevict.h
 *	  Which rows a full statistics table gives up (pure, unit-tested):
 *	  the least recently used 5 % at once, at least one.
 *
 * src/recipe/statevict.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_STATEVICT_H
#define ZKLOCK_STATEVICT_H

#include <stdint.h>

/* How many rows a full table of cap rows evicts at once. */
extern int	zkst_evict_count(int cap);

/*
 * The k-th smallest of the n last-use clocks (1 <= k <= n; reorders the
 * array): every row whose clock is at most this goes.  Clocks are
 * distinct (a table-wide counter), so exactly k rows do.
 */
extern uint64_t zkst_evict_bound(uint64_t *clocks, int n, int k);

#endif							/* ZKLOCK_STATEVICT_H */
