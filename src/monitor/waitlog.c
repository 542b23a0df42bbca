/*-------------------------------------------------------------------------
 *
 * waitlog.c
 *	  zklock.log_lock_waits: a LOG line when a zklock wait passes
 *	  deadlock_timeout, and one when that wait ends, worded as
 *	  PostgreSQL's own log_lock_waits lines (proc.c, ProcSleep), so that
 *	  log analysers that know those find these.
 *
 * A wait shorter than deadlock_timeout costs nothing but a timestamp.  At
 * the LOG time the holder's node is read once (its data is the owner line
 * zka_owner_line writes: host, system identifier, postmaster start time,
 * pid), bounded by the
 * call's deadline and one second; a node without such a line belongs to a
 * client outside PostgreSQL.  The wait loops wake at deadlock_timeout for
 * deadlock detection anyway, so logging adds no wake-up of its own.
 *
 * src/monitor/waitlog.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/elog.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "session/cursessions.h"
#include "monitor/curwaits.h"
#include "deadlock/deadlock.h"
#include "printable.h"
#include "session/session.h"
#include "monitor/stats.h"
#include "monitor/waitlog.h"

bool		zklock_log_lock_waits = true;

/* The current call's wait. */
static TimestampTz wait_start = 0;	/* 0: has not waited */
static bool logged = false;		/* "still waiting" was logged */
static char *w_resource = NULL;	/* TopMemoryContext copies */
static char *w_holder = NULL;
static ZkrMode w_mode = ZKR_MODE_NONE;
static int	w_ahead = 0;

static void
set_copy(char **dst, const char *src)
{
	if (*dst != NULL)
		pfree(*dst);
	*dst = src ? MemoryContextStrdup(TopMemoryContext, src) : NULL;
}

void
zkwl_call_begin(void)
{
	wait_start = 0;
	logged = false;
	zkcw_clear();
	zkcs_set_waiting(false);
}

void
zkwl_waiting(const char *resource, ZkrMode msg_mode, const char *holder,
			 int ahead, TimestampTz deadline, int64 deadline_ms)
{
	bool		changed;

	if (wait_start == 0)
		wait_start = GetCurrentTimestamp();
	changed = w_resource == NULL || strcmp(w_resource, resource) != 0 ||
		w_mode != msg_mode;
	set_copy(&w_resource, resource);
	set_copy(&w_holder, holder);
	w_mode = msg_mode;
	w_ahead = ahead;
	/* since the call's first wait, as the statistics measure it */
	if (changed || !zkcw_published())
		zkcw_publish(resource, msg_mode, wait_start, deadline, deadline_ms);
	zkcs_set_waiting(true);
}

static TimestampTz
log_at(void)
{
	return TimestampTzPlusMilliseconds(wait_start, DeadlockTimeout);
}

TimestampTz
zkwl_wake_at(TimestampTz wake)
{
	TimestampTz at;

	if (!zklock_log_lock_waits || logged || wait_start == 0)
		return wake;
	at = log_at();
	return (wake == 0 || at < wake) ? at : wake;
}

const char *
zkwl_waited_for(void)
{
	return wait_start != 0 ? w_resource : NULL;
}

int64
zkwl_waited_us(void)
{
	if (wait_start == 0)
		return 0;
	return Max(GetCurrentTimestamp() - wait_start, 1);
}

/* What is waited for, as PostgreSQL's DescribeLockTag words it. */
static char *
describe(void)
{
	if (w_mode == ZKR_MODE_SEMAPHORE)
		return psprintf(_("a lease of zklock semaphore \"%s\""), w_resource);
	if (w_mode == ZKR_MODE_SHARED)
		return psprintf(_("shared zklock on \"%s\""), w_resource);
	return psprintf(_("exclusive zklock on \"%s\""), w_resource);
}

/* Wait for the read; an interrupt goes on once the request is dropped. */
static ZksRc
await_read(ZksRequest *req, TimestampTz limit)
{
	volatile ZksRc rc = ZKS_TIMEDOUT;

	PG_TRY();
	{
		rc = zks_wait(req, limit);
	}
	PG_CATCH();
	{
		zks_done(req);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return rc;
}

/* The holder's node data, read once; NULL if it cannot be read now. */
static char *
read_holder(ZksRequest *req, TimestampTz limit)
{
	char	   *data = NULL;
	int			len;

	if (await_read(req, limit) == ZKS_OK)
		data = zks_get_data(req, &len);
	zks_done(req);
	return data;
}

/* Send the read of the holder's node; bounded by deadline and 1 s. */
static char *
holder_data(TimestampTz deadline)
{
	TimestampTz limit = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													1000);

	if (deadline != 0 && deadline < limit)
		limit = deadline;
	if (!zks_is_connected())
		return NULL;
	return read_holder(zks_send_get(w_holder), limit);
}

/*
 * Split an owner line ("zklock host=H port=P sysid=S start=T pid=N ...
 * application_name=A").  The host is the word after "host=", the
 * application name the rest of the line (it may hold spaces), cut at
 * NAMEDATALEN; both come from another client's node and are cleaned
 * (printable.h) before they reach the server log.  A line without an
 * application name (an older zklock) gives "".
 */
static bool
parse_owner_line(const char *data, char *host, size_t hostlen,
				 char *app, size_t applen, ZkwBackend *who)
{
	const char *h;
	const char *a;

	if (data == NULL || !zkw_parse_owner(data, who) ||
		(h = strstr(data, " host=")) == NULL)
		return false;
	h += 6;
	zk_copy_printable(host, hostlen, h, strcspn(h, " "));

	app[0] = '\0';
	if ((a = strstr(data, " application_name=")) != NULL)
	{
		a += 18;
		zk_copy_printable(app, applen, a, strcspn(a, "\n"));
	}
	return true;
}

static void
log_still_waiting(TimestampTz deadline)
{
	long		secs;
	int			usecs;
	char	   *what = describe();
	char	   *data = NULL;
	char		host[256];
	char		app[NAMEDATALEN];
	ZkwBackend	who;
	ZkwBackend	me;
	int			ahead = w_ahead;

	TimestampDifference(wait_start, GetCurrentTimestamp(), &secs, &usecs);
	if (w_holder != NULL)
		data = holder_data(deadline);

	if (w_mode == ZKR_MODE_SEMAPHORE && w_holder == NULL)
		ereport(LOG,
				(errmsg("process %d still waiting for %s after %ld.%03d ms",
						MyProcPid, what, secs * 1000 + usecs / 1000,
						usecs % 1000),
				 errdetail_log_plural("Its %d lease is held.",
									  "All %d of its leases are held.",
									  ahead, ahead)));
	else if (data != NULL &&
			 parse_owner_line(data, host, sizeof(host), app, sizeof(app),
							  &who))
	{
		/*
		 * "This cluster" is this postmaster: a standby's holder has its
		 * primary's system identifier.  A holder named by zklock 1.5 (no
		 * start time) may be either, so it is logged with its system
		 * identifier and host, which stay true.
		 */
		zkd_self(&me);
		if (zkw_same_instance(&who, &me))
			ereport(LOG,
					(errmsg("process %d still waiting for %s after %ld.%03d ms",
							MyProcPid, what, secs * 1000 + usecs / 1000,
							usecs % 1000),
					 errdetail_log_plural("Held by process %d of this cluster, application \"%s\" (node \"%s\"); %d contender is queued ahead of this one.",
										  "Held by process %d of this cluster, application \"%s\" (node \"%s\"); %d contenders are queued ahead of this one.",
										  ahead, who.pid, app, w_holder, ahead)));
		else
			ereport(LOG,
					(errmsg("process %d still waiting for %s after %ld.%03d ms",
							MyProcPid, what, secs * 1000 + usecs / 1000,
							usecs % 1000),
					 errdetail_log_plural("Held by process %d of the cluster with system identifier %llu on host \"%s\", application \"%s\" (node \"%s\"); %d contender is queued ahead of this one.",
										  "Held by process %d of the cluster with system identifier %llu on host \"%s\", application \"%s\" (node \"%s\"); %d contenders are queued ahead of this one.",
										  ahead, who.pid,
										  (unsigned long long) who.sysid, host,
										  app, w_holder, ahead)));
	}
	else if (data != NULL)
		ereport(LOG,
				(errmsg("process %d still waiting for %s after %ld.%03d ms",
						MyProcPid, what, secs * 1000 + usecs / 1000,
						usecs % 1000),
				 errdetail_log_plural("Held by a client outside PostgreSQL (node \"%s\"); %d contender is queued ahead of this one.",
									  "Held by a client outside PostgreSQL (node \"%s\"); %d contenders are queued ahead of this one.",
									  ahead, w_holder, ahead)));
	else
		ereport(LOG,
				(errmsg("process %d still waiting for %s after %ld.%03d ms",
						MyProcPid, what, secs * 1000 + usecs / 1000,
						usecs % 1000),
				 w_holder ?
				 errdetail_log_plural("Held by the owner of node \"%s\", which could not be read; %d contender is queued ahead of this one.",
									  "Held by the owner of node \"%s\", which could not be read; %d contenders are queued ahead of this one.",
									  ahead, w_holder, ahead) : 0));
}

void
zkwl_tick(TimestampTz deadline)
{
	if (!zklock_log_lock_waits || logged || wait_start == 0 ||
		GetCurrentTimestamp() < log_at())
		return;
	logged = true;				/* once, even if reading the holder fails */
	log_still_waiting(deadline);
}

void
zkwl_call_end(bool acquired, int sqlerrcode)
{
	long		secs;
	int			usecs;
	char	   *what;
	long		ms;
	int			frac;

	/* zk_waits no longer shows it, nor zk_sessions */
	zkcw_clear();
	zkcs_set_waiting(false);
	if (!logged || w_resource == NULL)
	{
		wait_start = 0;
		return;
	}
	TimestampDifference(wait_start, GetCurrentTimestamp(), &secs, &usecs);
	ms = secs * 1000 + usecs / 1000;
	frac = usecs % 1000;
	what = describe();
	if (acquired)
		ereport(LOG,
				(errmsg("process %d acquired %s after %ld.%03d ms",
						MyProcPid, what, ms, frac)));
	else if (zkst_failure_of(sqlerrcode) == ZKST_DEADLOCK)
		ereport(LOG,
				(errmsg("process %d detected deadlock while waiting for %s after %ld.%03d ms",
						MyProcPid, what, ms, frac)));
	else if (zkst_failure_of(sqlerrcode) == ZKST_TIMEOUT)
		ereport(LOG,
				(errmsg("process %d failed to acquire %s after %ld.%03d ms",
						MyProcPid, what, ms, frac),
				 errdetail_log("The wait timed out.")));
	else if (zkst_failure_of(sqlerrcode) == ZKST_CANCEL)
		ereport(LOG,
				(errmsg("process %d failed to acquire %s after %ld.%03d ms",
						MyProcPid, what, ms, frac),
				 errdetail_log("The wait was canceled.")));
	else
		ereport(LOG,
				(errmsg("process %d failed to acquire %s after %ld.%03d ms",
						MyProcPid, what, ms, frac),
				 errdetail_log("The wait ended with an error (SQLSTATE %s).",
							   unpack_sql_state(sqlerrcode))));
	logged = false;
	wait_start = 0;
}
