/*-------------------------------------------------------------------------
 *
 * stats_shmem.c
 *	  Storage of zklock's cumulative statistics on PostgreSQL 15-17: a
 *	  fixed-size dynahash table in plain shared memory, one LWLock.
 *
 * PostgreSQL before 18 has no way for an extension to add a kind of
 * cumulative statistics, so the rows live in memory asked for at server
 * start (zklock.stat_max_names of them) and a restart starts afresh.
 *
 * Every call takes the LWLock only around hash_search on a fixed-size
 * table (HASH_ENTER_NULL: NULL rather than an ERROR when full) and integer
 * arithmetic, so nothing under it can raise, and a backend killed in
 * between leaves counters that are merely one event short: the LWLock is
 * released at process exit, and no pointer or list is ever half-updated,
 * since the table is changed only by hash_search under the lock.  A full
 * table makes room by evicting the least recently used 5 % of its rows
 * (statevict.c).
 *
 * src/monitor/stats_shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#if PG_VERSION_NUM < 180000

#include "miscadmin.h"
#include "utils/memutils.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "recipe/statevict.h"
#include "monitor/stats.h"
#include "monitor/stats_int.h"

typedef struct StatShared
{
	LWLock	   *lock;
	StatCluster cl;
} StatShared;

static StatShared *shared = NULL;
static HTAB *stat_table = NULL;
static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

/* this backend's buffer for an eviction's selection (see evict_oldest) */
static uint64 *evict_clocks = NULL;

static Size
stats_size(void)
{
	return add_size(MAXALIGN(sizeof(StatShared)),
					hash_estimate_size(zklock_stat_max_names,
									   sizeof(StatEntry)));
}

static void
stats_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	RequestAddinShmemSpace(stats_size());
	RequestNamedLWLockTranche("zklock_stats", 1);
}

static void
stats_shmem_startup(void)
{
	HASHCTL		info;
	bool		found;

	if (prev_shmem_startup)
		prev_shmem_startup();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("zklock stats", sizeof(StatShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(StatShared));
		shared->lock = &(GetNamedLWLockTranche("zklock_stats"))->lock;
		shared->cl.since = GetCurrentTimestamp();
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(StatKey);
	info.entrysize = sizeof(StatEntry);
	stat_table = ShmemInitHash("zklock stats table",
							   zklock_stat_max_names, zklock_stat_max_names,
							   &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	LWLockRelease(AddinShmemInitLock);
}

void
zkst_store_preload(void)
{
	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

bool
zkst_store_available(void)
{
	return shared != NULL && stat_table != NULL;
}

/*
 * Room for a new row: the least recently used 5 % go at once (statevict.c
 * says why not one); called with the lock held.  clocks is this backend's
 * buffer of zklock_stat_max_names entries, allocated before the lock was
 * taken; without one (the table filled up between the unlocked look and
 * the lock) only the least recently used row goes.
 */
static void
evict_oldest(uint64 *clocks)
{
	HASH_SEQ_STATUS status;
	StatEntry  *e;
	uint64		oldest = PG_UINT64_MAX;
	uint64		bound;
	int			n = 0;

	hash_seq_init(&status, stat_table);
	while ((e = (StatEntry *) hash_seq_search(&status)) != NULL)
	{
		oldest = Min(oldest, e->last_used);
		if (clocks != NULL && n < zklock_stat_max_names)
			clocks[n++] = e->last_used;
	}
	if (oldest == PG_UINT64_MAX)
		return;
	bound = clocks != NULL ?
		zkst_evict_bound(clocks, n, zkst_evict_count(zklock_stat_max_names)) :
		oldest;

	/* removing the entry just returned is what dynahash allows */
	hash_seq_init(&status, stat_table);
	while ((e = (StatEntry *) hash_seq_search(&status)) != NULL)
		if (e->last_used <= bound &&
			hash_search(stat_table, &e->key, HASH_REMOVE, NULL) != NULL)
		{
			shared->cl.nentries--;
			shared->cl.evictions++;
		}
}

/*
 * HASH_ENTER_NULL on this fixed-size table cannot raise, so creating a row
 * would be safe even at COMMIT; a release (may_create false) still does
 * not recreate an evicted row, as on 18: a row made of a held time alone
 * would only push out a name in use.
 */
void
zkst_store_count(const StatUpdate *u)
{
	StatEntry  *e;
	bool		found;

	/*
	 * The eviction buffer, once the table is nearly full (an unlocked look
	 * at a counter: at worst a stale hint).  Allocated here because nothing
	 * under the lock may raise, and only where a row may be created.
	 */
	if (evict_clocks == NULL && u->may_create &&
		shared->cl.nentries >= zklock_stat_max_names - zklock_stat_max_names / 10)
		evict_clocks = MemoryContextAlloc(TopMemoryContext,
										  sizeof(uint64) * zklock_stat_max_names);

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->cl.reconnects += u->reconnects;
	shared->cl.expirations += u->expirations;
	zkst_add_event(&shared->cl.total, u->ev, u->waited, u->us);

	e = (StatEntry *) hash_search(stat_table, &u->key, HASH_FIND, NULL);
	if (e == NULL && u->may_create)
	{
		if (shared->cl.nentries >= zklock_stat_max_names)
			evict_oldest(evict_clocks);
		e = (StatEntry *) hash_search(stat_table, &u->key, HASH_ENTER_NULL,
									  &found);
		if (e != NULL && !found)
		{
			memset(&e->c, 0, sizeof(StatCounts));
			e->since = u->now;
			shared->cl.nentries++;
		}
	}
	if (e != NULL)
	{
		e->last_used = ++shared->cl.clock;
		zkst_add_event(&e->c, u->ev, u->waited, u->us);
	}
	LWLockRelease(shared->lock);
}

void
zkst_store_session_events(int64 reconnects, int64 expirations)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->cl.reconnects += reconnects;
	shared->cl.expirations += expirations;
	LWLockRelease(shared->lock);
}

StatEntry *
zkst_store_rows(int *n)
{
	HASH_SEQ_STATUS status;
	StatEntry  *e;
	StatEntry  *copy;
	int			cap = zklock_stat_max_names + 1;

	/* allocated before the lock: copy under it, build tuples after it */
	copy = palloc(sizeof(StatEntry) * cap);
	*n = 0;
	LWLockAcquire(shared->lock, LW_SHARED);
	hash_seq_init(&status, stat_table);
	while ((e = (StatEntry *) hash_seq_search(&status)) != NULL)
	{
		if (*n < cap)
			memcpy(&copy[(*n)++], e, sizeof(StatEntry));
	}
	LWLockRelease(shared->lock);
	return copy;
}

void
zkst_store_cluster(StatCluster *out)
{
	LWLockAcquire(shared->lock, LW_SHARED);
	memcpy(out, &shared->cl, sizeof(StatCluster));
	LWLockRelease(shared->lock);
}

void
zkst_store_reset_name(const StatKey *key)
{
	StatKey		k;

	memcpy(&k, key, sizeof(StatKey));
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int kind = 0; kind < ZKST_NKINDS; kind++)
	{
		k.kind = kind;
		if (hash_search(stat_table, &k, HASH_REMOVE, NULL) != NULL)
			shared->cl.nentries--;
	}
	LWLockRelease(shared->lock);
}

void
zkst_store_reset_all(TimestampTz now)
{
	HASH_SEQ_STATUS status;
	StatEntry  *e;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	/* removing the entry just returned is what dynahash allows */
	hash_seq_init(&status, stat_table);
	while ((e = (StatEntry *) hash_seq_search(&status)) != NULL)
		if (hash_search(stat_table, &e->key, HASH_REMOVE, NULL) != NULL)
			shared->cl.nentries--;
	memset(&shared->cl.total, 0, sizeof(StatCounts));
	shared->cl.reconnects = 0;
	shared->cl.expirations = 0;
	shared->cl.evictions = 0;
	shared->cl.since = now;
	LWLockRelease(shared->lock);
}

#endif							/* PG_VERSION_NUM < 180000 */
