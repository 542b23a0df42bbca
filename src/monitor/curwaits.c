/*-------------------------------------------------------------------------
 *
 * curwaits.c
 *	  zk_waits(): the zklock waits in progress in this cluster, one row per
 *	  waiting backend with what it waits for and since when, for alerting
 *	  on a long wait while it lasts (the statistics count a wait only when
 *	  it ends, and the wait log writes once, at deadlock_timeout).
 *
 * A table of MaxBackends slots in shared memory, set aside when zklock is
 * in shared_preload_libraries (about 0.6 kB per slot).  A backend writes
 * only its own slot (indexed by its process number), when its lock call
 * starts to wait (waitlog.c: zkwl_waiting) and when the call ends, and at
 * exit; the writes are bracketed by a change counter, odd while a write
 * is under way, so that a reader copies a slot without any lock and
 * retries a copy that a write overlapped (pgstat_begin_write_activity's
 * protocol).  A wait costs no lock and no system call here.
 *
 * Names are kept in UTF-8, as the statistics keep them, and shown in the
 * reading database's encoding (\x hex for a name it cannot hold).
 *
 * src/monitor/curwaits.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pg_compat.h"

#include "access/htup_details.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "monitor/curwaits.h"
#include "monitor/showtext.h"

PG_FUNCTION_INFO_V1(zk_waits);

typedef struct WaitSlot
{
	pg_atomic_uint32 changecount;	/* odd while its backend writes it */
	int			pid;			/* 0: no wait */
	Oid			dbid;
	int32		mode;			/* a ZkrMode */
	TimestampTz since;
	TimestampTz deadline;		/* 0: none */
	int64		timeout_ms;		/* < 0: none */
	char		resource[ZKR_MAX_RESOURCE_BYTES + 1];	/* UTF-8 */
} WaitSlot;

typedef struct WaitTable
{
	int			nslots;
	WaitSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} WaitTable;

static WaitTable *table = NULL;
static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

/* this backend's slot has a wait in it */
static bool published = false;
static bool exit_hook_set = false;

static Size
table_size(void)
{
	return add_size(offsetof(WaitTable, slots),
					mul_size(MaxBackends, sizeof(WaitSlot)));
}

static void
curwaits_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	RequestAddinShmemSpace(table_size());
}

static void
curwaits_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup)
		prev_shmem_startup();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	table = ShmemInitStruct("zklock current waits", table_size(), &found);
	if (!found)
	{
		memset(table, 0, table_size());
		table->nslots = MaxBackends;
		for (int i = 0; i < table->nslots; i++)
			pg_atomic_init_u32(&table->slots[i].changecount, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

void
zkcw_init(void)
{
	/* shared memory can only be set aside while the server starts */
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = curwaits_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = curwaits_shmem_startup;
}

/* This backend's slot, or NULL (no table, or not a regular backend). */
static WaitSlot *
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
clear_at_exit(int code, Datum arg)
{
	zkcw_clear();
}

void
zkcw_publish(const char *resource, ZkrMode mode, TimestampTz since,
			 TimestampTz deadline, int64 timeout_ms)
{
	WaitSlot   *s = my_slot();
	const char *utf8;

	if (s == NULL)
		return;
	/* a backend that exits (FATAL too) while waiting leaves no row */
	if (!exit_hook_set)
	{
		before_shmem_exit(clear_at_exit, (Datum) 0);
		exit_hook_set = true;
	}
	/* converted before the slot is touched: the name was one already */
	utf8 = GetDatabaseEncoding() == PG_SQL_ASCII ? resource :
		pg_server_to_any(resource, strlen(resource), PG_UTF8);

	pg_atomic_add_fetch_u32(&s->changecount, 1);
	pg_write_barrier();
	s->pid = MyProcPid;
	s->dbid = MyDatabaseId;
	s->mode = (int32) mode;
	s->since = since;
	s->deadline = deadline;
	s->timeout_ms = timeout_ms;
	strlcpy(s->resource, utf8, sizeof(s->resource));
	pg_write_barrier();
	pg_atomic_add_fetch_u32(&s->changecount, 1);
	published = true;
}

void
zkcw_clear(void)
{
	WaitSlot   *s;

	if (!published)
		return;
	published = false;
	s = my_slot();
	if (s == NULL)
		return;
	pg_atomic_add_fetch_u32(&s->changecount, 1);
	pg_write_barrier();
	s->pid = 0;
	pg_write_barrier();
	pg_atomic_add_fetch_u32(&s->changecount, 1);
}

bool
zkcw_published(void)
{
	return published;
}

/* A consistent copy of slot i (its writer may be writing it now). */
static void
copy_slot(int i, WaitSlot *out)
{
	WaitSlot   *s = &table->slots[i];

	for (;;)
	{
		uint32		before = pg_atomic_read_u32(&s->changecount);
		uint32		after;

		pg_read_barrier();
		memcpy(out, s, sizeof(WaitSlot));
		pg_read_barrier();
		after = pg_atomic_read_u32(&s->changecount);
		if (before == after && (before & 1) == 0)
			return;
		CHECK_FOR_INTERRUPTS();
	}
}

/* zk_waits(): one row per backend of the cluster waiting in zklock now. */
Datum
zk_waits(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	WaitSlot	w;

	if (table == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock's table of current waits is not available"),
				 errdetail("zklock was not loaded by \"shared_preload_libraries\", so no shared memory was set aside for it."),
				 errhint("Add zklock to \"shared_preload_libraries\" and restart the server; on PostgreSQL 17 and later, pg_stat_activity.wait_event LIKE 'Zklock%%' shows which backends wait without it.")));

	InitMaterializedSRF(fcinfo, 0);

	for (int i = 0; i < table->nslots; i++)
	{
		Datum		values[7];
		bool		nulls[7] = {0};
		StringInfoData shown;
		char	   *dbname;

		/* a cheap look first: most slots are empty */
		if (table->slots[i].pid == 0)
			continue;
		copy_slot(i, &w);
		if (w.pid == 0)
			continue;
		/* a backend gone without its exit callback (a crash) shows nothing */
		if (BackendPidGetProc(w.pid) == NULL)
			continue;
		w.resource[sizeof(w.resource) - 1] = '\0';

		values[0] = Int32GetDatum(w.pid);
		dbname = get_database_name(w.dbid);
		if (dbname != NULL)
			values[1] = CStringGetTextDatum(dbname);
		else
			nulls[1] = true;
		if (GetDatabaseEncoding() == PG_SQL_ASCII)
			values[2] = CStringGetTextDatum(w.resource);
		else
		{
			initStringInfo(&shown);
			zkt_append_utf8(&shown, w.resource, strlen(w.resource));
			values[2] = PointerGetDatum(cstring_to_text_with_len(shown.data,
																 shown.len));
		}
		values[3] = CStringGetTextDatum(zkr_mode_name((ZkrMode) w.mode));
		values[4] = TimestampTzGetDatum(w.since);
		if (w.timeout_ms >= 0)
		{
			Interval   *iv = palloc0(sizeof(Interval));

			iv->time = w.timeout_ms * 1000;
			values[5] = IntervalPGetDatum(iv);
		}
		else
			nulls[5] = true;
		if (w.deadline != 0)
			values[6] = TimestampTzGetDatum(w.deadline);
		else
			nulls[6] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	return (Datum) 0;
}
