/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  Cumulative lock statistics of the cluster (zk_stat_locks,
 *	  zk_stat_cluster, zk_stat_reset), kept in shared memory when zklock
 *	  is in shared_preload_libraries.
 *
 * The counting calls are cheap and never raise ERROR: without the shared
 * table (zklock loaded per backend) they do nothing.  Each computes what
 * it adds first, then takes the table's LWLock, adds plain integers and
 * releases it.
 *
 * src/monitor/stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_STATS_H
#define ZKLOCK_STATS_H

#include "recipe/recipe.h"

/* How a lock call that did not get its lock ended. */
typedef enum ZkstFailure
{
	ZKST_TIMEOUT,				/* 55P03: timeout, lock_timeout */
	ZKST_CANCEL,				/* 57014: cancel, statement_timeout */
	ZKST_DEADLOCK,				/* 40P01: this backend was the victim */
	ZKST_OTHER					/* any other error: counted nowhere */
} ZkstFailure;

extern int	zklock_stat_max_names;
extern bool zklock_track_stats;

/* Settings and shared-memory hooks; from _PG_init. */
extern void zkst_init(void);

/* The failure an ERROR's SQLSTATE stands for. */
extern ZkstFailure zkst_failure_of(int sqlerrcode);

/* A lock granted to a call; waited_us > 0 if the call had to wait. */
extern void zkst_acquired(const char *resource, ZkrMode mode, bool waited,
						  int64 waited_us);

/* A lock call that ended without its lock. */
extern void zkst_failed(const char *resource, ZkrMode mode, ZkstFailure why);

/* A try (zk_try_*) that returned false: the lock was not free. */
extern void zkst_try_failed(const char *resource, ZkrMode mode);

/* A held lock found lost (node deleted, session expired). */
extern void zkst_lost(const char *resource, ZkrMode mode);

/* A COMMIT or PREPARE refused because of this lost lock. */
extern void zkst_refused_commit(const char *resource, ZkrMode mode);

/* A lock released (its entry gone) after being held held_us. */
extern void zkst_released(const char *resource, ZkrMode mode, int64 held_us);

#endif							/* ZKLOCK_STATS_H */
