/*-------------------------------------------------------------------------
 *
 * curwaits.h
 *	  The zklock waits in progress in this cluster (zk_waits): every
 *	  backend publishes the wait of its current lock call in a slot of a
 *	  shared table, and clears it when the call ends.
 *
 * The table exists only when zklock is in shared_preload_libraries (its
 * shared memory is set aside while the server starts); without it the
 * publishing calls do nothing and zk_waits() raises 55000 with a hint.
 * Publishing and clearing never raise ERROR and take no lock: a slot is
 * the backend's own (indexed by its process number) and readers copy it
 * under a change counter, as pg_stat_activity reads PgBackendStatus.
 *
 * src/monitor/curwaits.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_CURWAITS_H
#define ZKLOCK_CURWAITS_H

#include "datatype/timestamp.h"

#include "recipe/recipe.h"

/* Shared-memory hooks; from _PG_init. */
extern void zkcw_init(void);

/*
 * This backend waits (since `since`) for resource in mode; the call gives
 * up at deadline (0: none), set by a limit of timeout_ms (< 0: none).
 * Called again when the wait moves to another lock of an array call.
 */
extern void zkcw_publish(const char *resource, ZkrMode mode,
						 TimestampTz since, TimestampTz deadline,
						 int64 timeout_ms);

/* The call's wait is over (or there was none). */
extern void zkcw_clear(void);

/* Whether this backend's slot shows a wait now. */
extern bool zkcw_published(void);

#endif							/* ZKLOCK_CURWAITS_H */
