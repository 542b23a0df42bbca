/*-------------------------------------------------------------------------
 *
 * cursessions.c
 *	  zk_sessions(): the zklock ZooKeeper session of every backend of this
 *	  cluster that has one (or whose last connect failed), as it is now:
 *	  state, session id, server, since when connected or unreachable, the
 *	  negotiated timeout, how many locks the backend holds and whether it
 *	  waits.  zk_status() shows only the calling backend's session.
 *
 * A table of MaxBackends slots in shared memory, set aside when zklock is
 * in shared_preload_libraries (about 0.2 kB per slot), indexed by process
 * number as curwaits.c's is.  A backend's slot has two parts, each with a
 * change counter that is odd while a write is under way, so that a reader
 * (another backend) copies a part without any lock and retries a copy
 * that a write overlapped (pgstat_begin_write_activity's protocol):
 *
 * The session part (the row's identity, state, id, server, times) has two
 * writers in the backend's process: the backend's own thread, when it
 * opens and closes the handle, and libzookeeper's completion thread, whose
 * session watcher writes it at every state change, so that the row stays
 * current while the backend is idle.  Both write only while they hold
 * zks_mutex (session.c holds it at every one of those points anyway), so
 * two writes never overlap: each one moves the counter from even to odd,
 * writes, and moves it back to even inside one critical section, and the
 * mutex orders one writer's critical section wholly before the other's.
 * A reader thus sees the usual single-writer protocol.  The watcher's
 * side calls nothing of PostgreSQL: plain stores and memcpy between
 * __atomic fences (not even pg_atomic_*), times from clock_gettime
 * converted by hand.  After the backend releases its row (the handle is
 * closed, or the backend exits) the watcher writes nothing more: the
 * "claimed" flag is read under the same mutex.
 *
 * The activity part (locks held, waiting) has one writer, the backend's
 * own thread, at its lock calls, so it needs no mutex: a lock call takes
 * no lock here and makes no system call.  The two parts are copied each
 * under its own counter; they are separate facts, and a row may show one
 * a moment older than the other.
 *
 * Visibility follows pg_stat_activity: superusers and members of
 * pg_read_all_stats see every row; any other role (one given SELECT on
 * the view) sees only its own backend's row and those of backends whose
 * session user it has the privileges of; the others are left out, not
 * shown with NULLs (a row's pid, times and lock counts say as much as its
 * server does).
 *
 * src/session/cursessions.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pg_compat.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "session/cursessions.h"
#include "session/session.h"

PG_FUNCTION_INFO_V1(zk_sessions);

typedef struct SessionPart
{
	uint32		changecount;	/* odd while written; __atomic only */
	int32		pid;			/* 0: no row */
	Oid			dbid;
	Oid			userid;			/* the backend's session user */
	ZkcsSession s;
} SessionPart;

typedef struct ActivityPart
{
	uint32		changecount;	/* odd while written; __atomic only */
	int32		locks_held;
	bool		waiting;
} ActivityPart;

typedef struct SessionSlot
{
	SessionPart session;
	ActivityPart activity;
} SessionSlot;

typedef struct SessionTable
{
	int			nslots;
	SessionSlot slots[FLEXIBLE_ARRAY_MEMBER];
} SessionTable;

static SessionTable *table = NULL;
static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

/*
 * This backend's slot while it shows a row (under zks_mutex: the watcher
 * reads it), and what the activity part says (the backend's thread only).
 */
static SessionSlot *claimed = NULL;
static int	my_locks_held = 0;
static bool my_waiting = false;

static Size
table_size(void)
{
	return add_size(offsetof(SessionTable, slots),
					mul_size(MaxBackends, sizeof(SessionSlot)));
}

static void
cursessions_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	RequestAddinShmemSpace(table_size());
}

static void
cursessions_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup)
		prev_shmem_startup();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	table = ShmemInitStruct("zklock sessions", table_size(), &found);
	if (!found)
	{
		memset(table, 0, table_size());
		table->nslots = MaxBackends;
	}
	LWLockRelease(AddinShmemInitLock);
}

void
zkcs_init(void)
{
	/* shared memory can only be set aside while the server starts */
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = cursessions_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = cursessions_shmem_startup;
}

/*
 * The writer's side of a change counter (any thread): odd, then the
 * stores, then even.  The release fence keeps the stores after the odd
 * value; the release store of the even value keeps them before it.
 */
static inline void
begin_write(uint32 *changecount)
{
	__atomic_store_n(changecount,
					 __atomic_load_n(changecount, __ATOMIC_RELAXED) + 1,
					 __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void
end_write(uint32 *changecount)
{
	__atomic_store_n(changecount,
					 __atomic_load_n(changecount, __ATOMIC_RELAXED) + 1,
					 __ATOMIC_RELEASE);
}

TimestampTz
zkcs_timestamp(const struct timespec *ts)
{
	/* seconds from the Unix epoch to PostgreSQL's (2000-01-01) */
	const int64 epoch_diff = (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
		SECS_PER_DAY;

	return ((int64) ts->tv_sec - epoch_diff) * USECS_PER_SEC +
		ts->tv_nsec / 1000;
}

/* This backend's slot, or NULL (no table, or not a regular backend). */
static SessionSlot *
my_slot(void)
{
	int			i = zk_my_proc_number();

	if (table == NULL)
		return NULL;
	/* auxiliary processes and prepared transactions come after these */
	if (i < 0 || i >= table->nslots)
		return NULL;
	return &table->slots[i];
}

static void
write_activity(SessionSlot *slot)
{
	begin_write(&slot->activity.changecount);
	slot->activity.locks_held = my_locks_held;
	slot->activity.waiting = my_waiting;
	end_write(&slot->activity.changecount);
}

void
zkcs_claim_locked(void)
{
	SessionSlot *slot = my_slot();

	if (slot == NULL)
		return;
	/* left by an earlier backend of this process number: ours now */
	write_activity(slot);
	begin_write(&slot->session.changecount);
	slot->session.pid = MyProcPid;
	slot->session.dbid = MyDatabaseId;
	slot->session.userid = GetSessionUserId();
	memset(&slot->session.s, 0, sizeof(ZkcsSession));
	end_write(&slot->session.changecount);
	claimed = slot;
}

void
zkcs_release_locked(void)
{
	SessionSlot *slot = claimed;

	if (slot == NULL)
		return;
	claimed = NULL;
	begin_write(&slot->session.changecount);
	slot->session.pid = 0;
	end_write(&slot->session.changecount);
}

/* On libzookeeper's thread too: nothing of PostgreSQL here. */
void
zkcs_write_session_locked(const ZkcsSession *s)
{
	SessionSlot *slot = claimed;

	if (slot == NULL)
		return;
	begin_write(&slot->session.changecount);
	memcpy(&slot->session.s, s, sizeof(ZkcsSession));
	end_write(&slot->session.changecount);
}

void
zkcs_set_locks_held(int n)
{
	if (n == my_locks_held)
		return;
	my_locks_held = n;
	/* claimed changes on this thread only: no mutex to read it here */
	if (claimed != NULL)
		write_activity(claimed);
}

void
zkcs_set_waiting(bool waiting)
{
	if (waiting == my_waiting)
		return;
	my_waiting = waiting;
	if (claimed != NULL)
		write_activity(claimed);
}

/*
 * A consistent copy of a part (len bytes at part, its counter first),
 * which its writers may be writing now.
 */
static void
copy_part(const void *part, void *out, size_t len)
{
	const uint32 *changecount = (const uint32 *) part;

	for (;;)
	{
		uint32		before = __atomic_load_n(changecount, __ATOMIC_ACQUIRE);
		uint32		after;

		memcpy(out, part, len);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		after = __atomic_load_n(changecount, __ATOMIC_RELAXED);
		if (before == after && (before & 1) == 0)
			return;
		CHECK_FOR_INTERRUPTS();
	}
}

const char *
zkcs_state_name(int32 state)
{
	switch ((ZkcsState) state)
	{
		case ZKCS_NONE:
			break;
		case ZKCS_CONNECTING:
			return "connecting";
		case ZKCS_CONNECTED:
			return "connected";
		case ZKCS_EXPIRED:
			return "expired";
		case ZKCS_AUTH_FAILED:
			return "auth_failed";
		case ZKCS_FAILED:
			return "failed";
	}
	return "none";
}

#define ZK_SESSIONS_COLS 10

/* zk_sessions(): one row per backend of the cluster with a zklock session. */
Datum
zk_sessions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		see_all;
	SessionPart sp;
	ActivityPart ap;

	if (table == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock's table of sessions is not available"),
				 errdetail("zklock was not loaded by \"shared_preload_libraries\", so no shared memory was set aside for it."),
				 errhint("Add zklock to \"shared_preload_libraries\" and restart the server; without it, zk_status() shows the session of the backend that calls it.")));

	/* as pg_stat_activity decides what a role may see of other backends */
	see_all = superuser() ||
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);

	InitMaterializedSRF(fcinfo, 0);

	for (int i = 0; i < table->nslots; i++)
	{
		Datum		values[ZK_SESSIONS_COLS];
		bool		nulls[ZK_SESSIONS_COLS] = {0};
		char	   *dbname;
		char		server[64];

		/* a cheap look first: most slots are empty */
		if (table->slots[i].session.pid == 0)
			continue;
		copy_part(&table->slots[i].session, &sp, sizeof(sp));
		if (sp.pid == 0)
			continue;
		/* a backend gone without its exit callback (a crash) shows nothing */
		if (BackendPidGetProc(sp.pid) == NULL)
			continue;
		if (!see_all && sp.pid != MyProcPid &&
			!has_privs_of_role(GetUserId(), sp.userid))
			continue;
		copy_part(&table->slots[i].activity, &ap, sizeof(ap));

		values[0] = Int32GetDatum(sp.pid);
		dbname = get_database_name(sp.dbid);
		if (dbname != NULL)
			values[1] = CStringGetTextDatum(dbname);
		else
			nulls[1] = true;
		values[2] = CStringGetTextDatum(zkcs_state_name(sp.s.state));
		if (sp.s.session_id != 0)
			values[3] = CStringGetTextDatum(zks_session_id_text(sp.s.session_id));
		else
			nulls[3] = true;
		zks_format_server(&sp.s.server, server, sizeof(server));
		if (server[0] != '\0')
			values[4] = CStringGetTextDatum(server);
		else
			nulls[4] = true;
		if (sp.s.connected_since != 0)
			values[5] = TimestampTzGetDatum(sp.s.connected_since);
		else
			nulls[5] = true;
		if (sp.s.unreachable_since != 0)
			values[6] = TimestampTzGetDatum(sp.s.unreachable_since);
		else
			nulls[6] = true;
		if (sp.s.timeout_ms > 0)
		{
			Interval   *iv = palloc0(sizeof(Interval));

			iv->time = (int64) sp.s.timeout_ms * 1000;
			values[7] = IntervalPGetDatum(iv);
		}
		else
			nulls[7] = true;
		values[8] = Int32GetDatum(ap.locks_held);
		values[9] = BoolGetDatum(ap.waiting);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	return (Datum) 0;
}
