/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  How the backend sleeps while it waits for ZooKeeper: on its latch,
 *	  interruptible, under a wait event that says what it waits for.
 *
 * Part of the session layer, but it does not talk to libzookeeper: the
 * library's threads set the latch (session.c, session/request.c), and the
 * layers above say what the backend is doing (zks_set_activity), which
 * names the wait event of every sleep.
 *
 * src/session/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pg_compat.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "session/session.h"
#include "session/session_int.h"

static long
ms_until(TimestampTz deadline)
{
	long		secs;
	int			usecs;

	TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
	return secs * 1000 + usecs / 1000 + (usecs % 1000 ? 1 : 0);
}

/*
 * What the backend is doing for zklock, set by the layers above (the lock
 * and semaphore calls, the commit check, the deadlock search) and reset
 * at the end of every transaction; it names the wait event of a wait.
 */
static ZksActivity activity = ZKS_ACTIVITY_NONE;

ZksActivity
zks_set_activity(ZksActivity a)
{
	ZksActivity old = activity;

	activity = a;
	return old;
}

/*
 * The wait event a wait of this kind shows in pg_stat_activity during the
 * current activity.  On PostgreSQL 17 and later each has a name of its
 * own (pg_wait_events, type Extension), made at its first use; before,
 * all are "Extension" (pg_compat.h).
 */
static uint32
wait_event_for(ZksWaitKind kind)
{
	static const char *const names[] = {
		[ZKS_EV_CONNECT] = "ZklockConnect",
		[ZKS_EV_REPLY] = "ZklockReply",
		[ZKS_EV_QUEUE] = "ZklockQueue",
		[ZKS_EV_SEMAPHORE] = "ZklockSemaphore",
		[ZKS_EV_COMMIT_CHECK] = "ZklockCommitCheck",
		[ZKS_EV_DEADLOCK_SEARCH] = "ZklockDeadlockSearch",
	};
	static uint32 infos[lengthof(names)];
	int			ev;

	if (kind == ZKS_WAIT_CONNECTION)
		ev = ZKS_EV_CONNECT;
	else if (kind == ZKS_WAIT_NOTIFICATION)
		ev = activity == ZKS_ACTIVITY_SEMAPHORE ? ZKS_EV_SEMAPHORE : ZKS_EV_QUEUE;
	else if (activity == ZKS_ACTIVITY_COMMIT)
		ev = ZKS_EV_COMMIT_CHECK;
	else if (activity == ZKS_ACTIVITY_DEADLOCK)
		ev = ZKS_EV_DEADLOCK_SEARCH;
	else
		ev = ZKS_EV_REPLY;
	if (infos[ev] == 0)
		infos[ev] = zk_wait_event_info(names[ev]);
	return infos[ev];
}

/*
 * Sleep on the latch until woken or until the deadline (0: at most a
 * second, to re-check).  Interrupts are processed here.
 */
void
zks_sleep_on_latch(TimestampTz deadline, ZksWaitKind kind)
{
	long		timeout = 1000;

	if (deadline != 0)
		timeout = Min(timeout, Max(ms_until(deadline), 0));
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout, wait_event_for(kind));
	ResetLatch(MyLatch);
	/* what libzookeeper logged meanwhile (an outage: its retries) */
	zks_log_drain();
	CHECK_FOR_INTERRUPTS();
}

bool
zks_deadline_passed(TimestampTz deadline)
{
	return deadline != 0 && GetCurrentTimestamp() >= deadline;
}
