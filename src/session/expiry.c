/*-------------------------------------------------------------------------
 *
 * expiry.c
 *	  When a ZooKeeper session was seen expired, and since when it had had
 *	  no connection before that, so that the error about a lock lost with
 *	  the session can say what happened and when.
 *
 * The session watcher runs on libzookeeper's thread, where nothing of
 * PostgreSQL may run: it only copies the C library's clock and the
 * session id into the plain values below, under zks_mutex.  The backend
 * converts them to timestamps when it asks.  The record of the last
 * expiry outlives the handle, because the handle of an expired session
 * may be replaced before the lock table looks at its locks.
 *
 * src/session/expiry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pg_compat.h"

#include <time.h>

#include "utils/timestamp.h"

#include "session/session.h"
#include "session/session_int.h"

/* Under zks_mutex. */
static int64 connected_sid = 0; /* the session of the last CONNECTED */
static int64 expired_sid = 0;	/* the session last seen expired ... */
static struct timespec expired_at = {0, 0}; /* ... when ... */
static struct timespec expired_unreachable_at = {0, 0};	/* ... and since
															 * when it had no
															 * connection then
															 * (0: had one) */

void
zkx_session_event_locked(zhandle_t *h, int state,
						 const struct timespec *unreachable_at)
{
	if (state == ZOO_CONNECTED_STATE)
	{
		const clientid_t *id = zoo_client_id(h);

		connected_sid = id != NULL ? id->client_id : 0;
	}
	else if (state == ZOO_EXPIRED_SESSION_STATE)
	{
		/*
		 * The reconnect that learns of the expiry no longer knows the old
		 * id for sure, so the expiry is put on the session last connected.
		 */
		expired_sid = connected_sid;
		(void) clock_gettime(CLOCK_REALTIME, &expired_at);
		expired_unreachable_at = *unreachable_at;
	}
}

void
zkx_handle_closed_locked(void)
{
	connected_sid = 0;
}

TimestampTz
zks_timespec_to_timestamptz(const struct timespec *ts)
{
	return time_t_to_timestamptz(ts->tv_sec) + ts->tv_nsec / 1000;
}

bool
zks_session_expiry(int64 session_id, TimestampTz *at,
				   TimestampTz *unreachable_since)
{
	struct timespec when;
	struct timespec since;
	bool		known;

	pthread_mutex_lock(&zks_mutex);
	known = session_id != 0 && session_id == expired_sid &&
		expired_at.tv_sec != 0;
	when = expired_at;
	since = expired_unreachable_at;
	pthread_mutex_unlock(&zks_mutex);
	if (!known)
		return false;
	*at = zks_timespec_to_timestamptz(&when);
	*unreachable_since = since.tv_sec != 0 ?
		zks_timespec_to_timestamptz(&since) : 0;
	return true;
}
