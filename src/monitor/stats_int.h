/*-------------------------------------------------------------------------
 *
 * stats_int.h
 *	  Internal interface between the counting front of zklock's cumulative
 *	  statistics (stats.c: the counting calls, the SQL functions, the
 *	  settings) and the storage behind it, which depends on the major:
 *
 *	  - stats_shmem.c (PostgreSQL 15-17): a fixed-size dynahash table in
 *		plain shared memory under one LWLock; a restart starts afresh.
 *	  - stats_pgstat.c (PostgreSQL 18+): two custom cumulative statistics
 *		kinds of PostgreSQL's own statistics system, so that the figures
 *		are written at a clean shutdown and read back at the next start
 *		(and discarded after a crash), exactly as pg_stat_* are.
 *
 * Exactly one of the two is compiled (each file is empty on the other
 * majors).  The front computes everything that can raise ERROR (name
 * conversion, times, session events) before it calls the storage; the
 * storage takes its locks only around integer arithmetic.
 *
 * src/monitor/stats_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_STATS_INT_H
#define ZKLOCK_STATS_INT_H

#include "datatype/timestamp.h"

#include "recipe/recipe.h"

/* The kinds of zk_stat_locks.kind, indexed by ZkrMode. */
#define ZKST_NKINDS 4

/*
 * A row's identity: the lock's kind and its name in UTF-8 (as ZooKeeper
 * sees it, so that databases of different encodings count one lock once),
 * NUL-padded so that the whole struct can be hashed and compared as bytes.
 */
typedef struct StatKey
{
	int32		kind;			/* a ZkrMode */
	char		name[ZKR_MAX_RESOURCE_BYTES + 1];
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
	int64		failed_tries;	/* zk_try_* calls that returned false (1.7) */
} StatCounts;

/* One row of zk_stat_locks, as stored. */
typedef struct StatEntry
{
	StatKey		key;			/* dynahash key on 15-17: must be first */
	StatCounts	c;
	uint64		last_used;		/* the cluster clock at the last update */
	TimestampTz since;
} StatEntry;

/* The row of zk_stat_cluster, as stored. */
typedef struct StatCluster
{
	StatCounts	total;
	int64		reconnects;
	int64		expirations;
	int64		evictions;
	int64		nentries;		/* rows tracked */
	uint64		clock;			/* ticks at each counted event (LRU order) */
	TimestampTz since;
} StatCluster;

/* What one counting call adds. */
typedef enum StatEvent
{
	EV_ACQUIRED,
	EV_TIMEOUT,
	EV_CANCEL,
	EV_DEADLOCK,
	EV_LOST,
	EV_REFUSED,
	EV_RELEASED,
	EV_TRY_FAILED
} StatEvent;

/* One counting call, fully computed before any lock is taken. */
typedef struct StatUpdate
{
	StatKey		key;
	StatEvent	ev;
	bool		waited;
	int64		us;
	int64		reconnects;		/* session events not yet added */
	int64		expirations;
	TimestampTz now;

	/*
	 * False when the call comes from a transaction callback at COMMIT
	 * (a release): nothing that can raise ERROR may run there, so the
	 * storage must not create a row; a name no longer tracked is then
	 * counted in the totals only.
	 */
	bool		may_create;
} StatUpdate;

/* stats.c */
extern void zkst_add_event(StatCounts *c, StatEvent ev, bool waited, int64 us);

/* The storage: stats_shmem.c or stats_pgstat.c. */

/* From _PG_init while shared_preload_libraries is processed. */
extern void zkst_store_preload(void);

/* Whether this process can count and read (zklock was preloaded). */
extern bool zkst_store_available(void);

/* Count one event; never raises ERROR on the !may_create path. */
extern void zkst_store_count(const StatUpdate *u);

/* Add session events alone (reading zk_stat_cluster). */
extern void zkst_store_session_events(int64 reconnects, int64 expirations);

/* A palloc'd copy of every row; *n is set to their number. */
extern StatEntry *zkst_store_rows(int *n);

/* A copy of the cluster row. */
extern void zkst_store_cluster(StatCluster *out);

/* Drop one name's rows, every kind (key->kind is ignored). */
extern void zkst_store_reset_name(const StatKey *key);

/* Drop every row and reset the cluster row, since = now. */
extern void zkst_store_reset_all(TimestampTz now);

#endif							/* ZKLOCK_STATS_INT_H */
