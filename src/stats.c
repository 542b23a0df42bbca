/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Cumulative lock statistics of the cluster: one row per lock name and
 *	  kind (zk_stat_locks) and one of totals (zk_stat_cluster), kept in
 *	  shared memory, and their reset (zk_stat_reset).
 *
 * The table exists only when zklock is in shared_preload_libraries: its
 * size is fixed at server start (zklock.stat_max_names rows), so it must
 * be asked for before shared memory is created.  Without it the counting
 * calls do nothing and the SQL functions raise 55000 with a hint.
 *
 * Every counting call computes what it adds (the key, the times) before it
 * takes the LWLock, then adds plain integers and releases it: nothing that
 * can raise ERROR runs under the lock, and a backend killed in between
 * leaves counters that are merely one event short (the LWLock is released
 * at process exit; no pointer or list is ever half-updated, since the
 * dynahash table is changed only by hash_search under the lock).  A full
 * table makes room by evicting the least recently used 5 % of its rows
 * (statevict.c); the cluster row counts evictions, and its totals include
 * evicted names.
 *
 * Names are stored in UTF-8, as ZooKeeper sees them, so that databases of
 * different encodings count one lock once.
 *
 * src/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "session.h"
#include "statevict.h"
#include "stats.h"

PG_FUNCTION_INFO_V1(zk_stat_locks);
PG_FUNCTION_INFO_V1(zk_stat_cluster);
PG_FUNCTION_INFO_V1(zk_stat_reset);

int			zklock_stat_max_names = 1000;
bool		zklock_track_stats = true;

/* The kinds of zk_stat_locks.kind, indexed by ZkrMode. */
#define NKINDS 4

typedef struct StatKey
{
	int32		kind;			/* a ZkrMode */
	char		name[ZKR_MAX_RESOURCE_BYTES + 1];	/* UTF-8, NUL-padded */
} StatKey;

/* What both a name's row and the cluster's totals count. */
typedef struct StatCounts
{
	int64		acquisitions;
	int64		waits;
	int64		wait_us;
	int64		max_wait_us;
	int64		timeouts;
	int64		cancels;
	int64		deadlocks;
	int64		lost;
	int64		refused_commits;
	int64		held_us;
} StatCounts;

typedef struct StatEntry
{
	StatKey		key;			/* hash key: must be first */
	StatCounts	c;
	uint64		last_used;		/* the table's clock at the last update */
	TimestampTz since;
} StatEntry;

typedef struct StatShared
{
	LWLock	   *lock;
	uint64		clock;
	int			nentries;
	StatCounts	total;
	int64		reconnects;
	int64		expirations;
	int64		evictions;
	TimestampTz since;
} StatShared;

/* What one counting call adds. */
typedef enum StatEvent
{
	EV_ACQUIRED,
	EV_TIMEOUT,
	EV_CANCEL,
	EV_DEADLOCK,
	EV_LOST,
	EV_REFUSED,
	EV_RELEASED
} StatEvent;

static StatShared *shared = NULL;
static HTAB *stat_table = NULL;
static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

/* this backend's session counters already added to the cluster row */
static uint64 seen_reconnects = 0;
static uint64 seen_expirations = 0;

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
		shared->since = GetCurrentTimestamp();
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
zkst_init(void)
{
	/*
	 * Superuser-only, as PostgreSQL's track_counts is: a user must not be
	 * able to hide their own waits from the DBA's figures.  Defined with
	 * or without preloading so that a setting in postgresql.conf is never
	 * a placeholder.
	 */
	DefineCustomBoolVariable("zklock.track_stats",
							 "Collects zklock's cumulative lock statistics.",
							 "Off, a backend's lock calls are not counted in zk_stat_locks and zk_stat_cluster.",
							 &zklock_track_stats,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	/*
	 * A PGC_POSTMASTER setting can only be defined while the server
	 * starts; loaded later, zklock has no table to size.
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("zklock.stat_max_names",
							"How many lock names (per kind) zklock's statistics track.",
							"The least recently used name is evicted when the table is full. Needs zklock in shared_preload_libraries.",
							&zklock_stat_max_names,
							1000, 10, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

ZkstFailure
zkst_failure_of(int sqlerrcode)
{
	if (sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
		return ZKST_TIMEOUT;
	if (sqlerrcode == ERRCODE_QUERY_CANCELED)
		return ZKST_CANCEL;
	if (sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED)
		return ZKST_DEADLOCK;
	return ZKST_OTHER;
}

static void
add_event(StatCounts *c, StatEvent ev, bool waited, int64 us)
{
	switch (ev)
	{
		case EV_ACQUIRED:
			c->acquisitions++;
			if (waited)
			{
				c->waits++;
				c->wait_us += us;
				if (us > c->max_wait_us)
					c->max_wait_us = us;
			}
			break;
		case EV_TIMEOUT:
			c->timeouts++;
			break;
		case EV_CANCEL:
			c->cancels++;
			break;
		case EV_DEADLOCK:
			c->deadlocks++;
			break;
		case EV_LOST:
			c->lost++;
			break;
		case EV_REFUSED:
			c->refused_commits++;
			break;
		case EV_RELEASED:
			c->held_us += us;
			break;
	}
}

/*
 * The reconnects and expirations of this backend's ZooKeeper session not
 * yet added to the cluster row (the session layer counts them on its own
 * threads, which must not touch shared memory; they are added at the
 * backend's next counting call).
 */
static void
take_session_events(int64 *reconnects, int64 *expirations)
{
	uint64		r;
	uint64		e;

	zks_session_counts(&r, &e);
	*reconnects = (int64) (r - seen_reconnects);
	*expirations = (int64) (e - seen_expirations);
	seen_reconnects = r;
	seen_expirations = e;
}

static void
count_session_events(void)
{
	int64		r;
	int64		e;

	take_session_events(&r, &e);
	if (r == 0 && e == 0)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->reconnects += r;
	shared->expirations += e;
	LWLockRelease(shared->lock);
}

/*
 * Room for a new row: the least recently used 5 % go (statevict.c says
 * why not one); called with the lock held.  clocks is this backend's
 * buffer of zklock_stat_max_names entries, allocated before the lock was
 * taken; without one (the table filled up between the unlocked look and
 * the lock) only the least recently used row goes.
 */
static void
evict_oldest(uint64 *clocks)
{
	HASH_SEQ_STATUS status;
	StatEntry  *e;
	StatEntry  *oldest = NULL;
	uint64		bound;
	int			n = 0;

	hash_seq_init(&status, stat_table);
	while ((e = (StatEntry *) hash_seq_search(&status)) != NULL)
	{
		if (oldest == NULL || e->last_used < oldest->last_used)
			oldest = e;
		if (clocks != NULL && n < zklock_stat_max_names)
			clocks[n++] = e->last_used;
	}
	if (oldest == NULL)
		return;
	bound = clocks != NULL ?
		zkst_evict_bound(clocks, n, zkst_evict_count(zklock_stat_max_names)) :
		oldest->last_used;

	/* removing the entry just returned is what dynahash allows */
	hash_seq_init(&status, stat_table);
	while ((e = (StatEntry *) hash_seq_search(&status)) != NULL)
		if (e->last_used <= bound &&
			hash_search(stat_table, &e->key, HASH_REMOVE, NULL) != NULL)
		{
			shared->nentries--;
			shared->evictions++;
		}
}

/*
 * Count one event.  Everything that may fail or allocate happens before
 * the LWLock; under it, only hash_search on a fixed-size table (which
 * returns NULL rather than raising when full: HASH_ENTER_NULL) and
 * integer arithmetic.
 */
static void
count(const char *resource, ZkrMode mode, StatEvent ev, bool waited, int64 us)
{
	StatKey		key;
	const char *utf8;
	int64		new_reconnects;
	int64		new_expirations;
	TimestampTz now;

	if (shared == NULL || stat_table == NULL || !zklock_track_stats)
		return;

	memset(&key, 0, sizeof(key));
	key.kind = (int32) mode;
	utf8 = GetDatabaseEncoding() == PG_SQL_ASCII ? resource :
		pg_server_to_any(resource, strlen(resource), PG_UTF8);
	strlcpy(key.name, utf8, sizeof(key.name));
	now = GetCurrentTimestamp();

	take_session_events(&new_reconnects, &new_expirations);

	/*
	 * The eviction buffer, once the table is nearly full (an unlocked look
	 * at an int: at worst a stale hint).  Allocated here because nothing
	 * under the lock may raise.
	 */
	if (evict_clocks == NULL &&
		shared->nentries >= zklock_stat_max_names - zklock_stat_max_names / 10)
		evict_clocks = MemoryContextAlloc(TopMemoryContext,
										  sizeof(uint64) * zklock_stat_max_names);

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	{
		StatEntry  *e;
		bool		found;

		shared->reconnects += new_reconnects;
		shared->expirations += new_expirations;
		add_event(&shared->total, ev, waited, us);

		e = (StatEntry *) hash_search(stat_table, &key, HASH_FIND, NULL);
		if (e == NULL)
		{
			if (shared->nentries >= zklock_stat_max_names)
				evict_oldest(evict_clocks);
			e = (StatEntry *) hash_search(stat_table, &key, HASH_ENTER_NULL,
										  &found);
			if (e != NULL && !found)
			{
				memset(&e->c, 0, sizeof(StatCounts));
				e->since = now;
				shared->nentries++;
			}
		}
		if (e != NULL)
		{
			e->last_used = ++shared->clock;
			add_event(&e->c, ev, waited, us);
		}
	}
	LWLockRelease(shared->lock);
}

void
zkst_acquired(const char *resource, ZkrMode mode, bool waited,
			  int64 waited_us)
{
	count(resource, mode, EV_ACQUIRED, waited, waited_us);
}

void
zkst_failed(const char *resource, ZkrMode mode, ZkstFailure why)
{
	if (why == ZKST_TIMEOUT)
		count(resource, mode, EV_TIMEOUT, false, 0);
	else if (why == ZKST_CANCEL)
		count(resource, mode, EV_CANCEL, false, 0);
	else if (why == ZKST_DEADLOCK)
		count(resource, mode, EV_DEADLOCK, false, 0);
}

void
zkst_lost(const char *resource, ZkrMode mode)
{
	count(resource, mode, EV_LOST, false, 0);
}

void
zkst_refused_commit(const char *resource, ZkrMode mode)
{
	count(resource, mode, EV_REFUSED, false, 0);
}

void
zkst_released(const char *resource, ZkrMode mode, int64 held_us)
{
	count(resource, mode, EV_RELEASED, false, Max(held_us, 0));
}

/* ----------------------------------------------------------------
 * SQL functions
 * ----------------------------------------------------------------
 */

static void
require_shared(void)
{
	if (shared == NULL || stat_table == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock statistics are not available"),
				 errdetail("zklock was not loaded by \"shared_preload_libraries\", so no shared memory was set aside for them."),
				 errhint("Add zklock to \"shared_preload_libraries\" and restart the server.")));
}

static Datum
ms_datum(int64 us)
{
	return Float8GetDatum((double) us / 1000.0);
}

static const char *
kind_name(int32 kind)
{
	return zkr_mode_name((ZkrMode) kind);
}

/* zk_stat_locks(): one row per lock name and kind. */
Datum
zk_stat_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	StatEntry  *e;
	StatEntry  *copy;
	int			n = 0;
	int			cap;

	require_shared();
	InitMaterializedSRF(fcinfo, 0);

	/* copy under a shared lock, build the tuples after it */
	cap = zklock_stat_max_names + 1;
	copy = palloc(sizeof(StatEntry) * cap);
	LWLockAcquire(shared->lock, LW_SHARED);
	hash_seq_init(&status, stat_table);
	while ((e = (StatEntry *) hash_seq_search(&status)) != NULL)
	{
		if (n < cap)
			memcpy(&copy[n++], e, sizeof(StatEntry));
	}
	LWLockRelease(shared->lock);

	for (int i = 0; i < n; i++)
	{
		StatCounts *c = &copy[i].c;
		Datum		values[13];
		bool		nulls[13] = {0};
		const char *name = copy[i].key.name;

		if (GetDatabaseEncoding() != PG_SQL_ASCII)
			name = pg_any_to_server(name, strlen(name), PG_UTF8);
		values[0] = CStringGetTextDatum(name);
		values[1] = CStringGetTextDatum(kind_name(copy[i].key.kind));
		values[2] = Int64GetDatum(c->acquisitions);
		values[3] = Int64GetDatum(c->waits);
		values[4] = ms_datum(c->wait_us);
		values[5] = ms_datum(c->max_wait_us);
		values[6] = Int64GetDatum(c->timeouts);
		values[7] = Int64GetDatum(c->cancels);
		values[8] = Int64GetDatum(c->deadlocks);
		values[9] = Int64GetDatum(c->lost);
		values[10] = Int64GetDatum(c->refused_commits);
		values[11] = ms_datum(c->held_us);
		values[12] = TimestampTzGetDatum(copy[i].since);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	return (Datum) 0;
}

/* zk_stat_cluster(): the totals, the names tracked and the evictions. */
Datum
zk_stat_cluster(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	StatShared	s;
	Datum		values[15];
	bool		nulls[15] = {0};

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	/* this backend's own session events, at least, are up to date */
	count_session_events();

	LWLockAcquire(shared->lock, LW_SHARED);
	memcpy(&s, shared, sizeof(StatShared));
	LWLockRelease(shared->lock);

	values[0] = Int32GetDatum(s.nentries);
	values[1] = Int64GetDatum(s.total.acquisitions);
	values[2] = Int64GetDatum(s.total.waits);
	values[3] = ms_datum(s.total.wait_us);
	values[4] = ms_datum(s.total.max_wait_us);
	values[5] = Int64GetDatum(s.total.timeouts);
	values[6] = Int64GetDatum(s.total.cancels);
	values[7] = Int64GetDatum(s.total.deadlocks);
	values[8] = Int64GetDatum(s.total.lost);
	values[9] = Int64GetDatum(s.total.refused_commits);
	values[10] = ms_datum(s.total.held_us);
	values[11] = Int64GetDatum(s.reconnects);
	values[12] = Int64GetDatum(s.expirations);
	values[13] = Int64GetDatum(s.evictions);
	values[14] = TimestampTzGetDatum(s.since);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* zk_stat_reset(name): one name's rows (every kind), or everything. */
Datum
zk_stat_reset(PG_FUNCTION_ARGS)
{
	StatKey		key;
	TimestampTz now = GetCurrentTimestamp();

	require_shared();
	memset(&key, 0, sizeof(key));
	if (!PG_ARGISNULL(0))
	{
		char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
		const char *utf8 = GetDatabaseEncoding() == PG_SQL_ASCII ? name :
			pg_server_to_any(name, strlen(name), PG_UTF8);

		if (strlen(utf8) > ZKR_MAX_RESOURCE_BYTES)
			PG_RETURN_VOID();	/* never tracked */
		strlcpy(key.name, utf8, sizeof(key.name));
	}

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (!PG_ARGISNULL(0))
	{
		for (int k = 0; k < NKINDS; k++)
		{
			key.kind = k;
			if (hash_search(stat_table, &key, HASH_REMOVE, NULL) != NULL)
				shared->nentries--;
		}
	}
	else
	{
		HASH_SEQ_STATUS status;
		StatEntry  *e;

		/* removing the entry just returned is what dynahash allows */
		hash_seq_init(&status, stat_table);
		while ((e = (StatEntry *) hash_seq_search(&status)) != NULL)
			if (hash_search(stat_table, &e->key, HASH_REMOVE, NULL) != NULL)
				shared->nentries--;
		memset(&shared->total, 0, sizeof(StatCounts));
		shared->reconnects = 0;
		shared->expirations = 0;
		shared->evictions = 0;
		shared->since = now;
	}
	LWLockRelease(shared->lock);
	PG_RETURN_VOID();
}
