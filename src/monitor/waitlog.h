/*-------------------------------------------------------------------------
 *
 * waitlog.h
 *	  zklock.log_lock_waits: LOG lines for a lock call that waits longer
 *	  than deadlock_timeout, in the style of PostgreSQL's log_lock_waits,
 *	  and the measure of how long the current call waited.
 *
 * One lock call runs at a time in a backend, and at most one of its
 * attempts waits at a time (arrays wait for one lock after the other), so
 * the state is the backend's: begun with the call, told by the wait loops
 * (acquire.c, semaphore.c) what they wait for, ended by the call.
 *
 * src/monitor/waitlog.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_WAITLOG_H
#define ZKLOCK_WAITLOG_H

#include "datatype/timestamp.h"
#include "recipe/recipe.h"

extern bool zklock_log_lock_waits;

/* A lock call starts: nothing waited yet. */
extern void zkwl_call_begin(void);

/*
 * A wait starts (or starts again after a listing): for resource in
 * msg_mode, behind holder (the full path of the node that holds it, or
 * NULL) with ahead contenders queued before ours; for a semaphore's room,
 * holder is NULL and ahead the number of leases held.  The call gives up
 * at deadline (0: none), set by a limit of deadline_ms (< 0: none).  The
 * wait is shown in zk_waits until the call ends (curwaits.c).
 */
extern void zkwl_waiting(const char *resource, ZkrMode msg_mode,
						 const char *holder, int ahead,
						 TimestampTz deadline, int64 deadline_ms);

/* When the wait loop must wake at the latest: wake, or the LOG time. */
extern TimestampTz zkwl_wake_at(TimestampTz wake);

/*
 * In the wait loop after a wake-up: past deadlock_timeout, LOG "still
 * waiting" once (reading the holder's node once, within deadline).
 */
extern void zkwl_tick(TimestampTz deadline);

/* The resource the current call waits or waited for, or NULL. */
extern const char *zkwl_waited_for(void);

/* How long the current call has waited (0: it has not). */
extern int64 zkwl_waited_us(void);

/*
 * The call ends: acquired, or failed with sqlerrcode.  If "still
 * waiting" was logged, LOG how it ended.  Never raises ERROR.
 */
extern void zkwl_call_end(bool acquired, int sqlerrcode);

#endif							/* ZKLOCK_WAITLOG_H */
