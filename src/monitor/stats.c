/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Cumulative lock statistics of the cluster: one row per lock name and
 *	  kind (zk_stat_locks), one of totals (zk_stat_cluster), their reset
 *	  (zk_stat_reset), the counting calls and the settings.
 *
 * This file is the front, the same on every major: it turns a counting
 * call into a StatUpdate (the key in UTF-8, the times, this backend's new
 * session events), computing everything that can raise ERROR first, and
 * hands it to the storage (stats_int.h), which only takes its locks around
 * integer arithmetic.  The storage is plain shared memory on 15-17
 * (stats_shmem.c) and PostgreSQL's cumulative statistics system on 18+
 * (stats_pgstat.c), which keeps the figures across a clean restart.
 *
 * Either way the rows exist only when zklock is in shared_preload_libraries
 * (shared memory, or a statistics kind, can only be set up while the
 * server starts).  Without it the counting calls do nothing and the SQL
 * functions raise 55000 with a hint.  A full table makes room by evicting
 * the least recently used 5 % of its rows (statevict.c); the cluster row
 * counts evictions, and its totals include evicted names.
 *
 * Names are stored in UTF-8, as ZooKeeper sees them, so that databases of
 * different encodings count one lock once.
 *
 * src/monitor/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "session/session.h"
#include "monitor/showtext.h"
#include "monitor/stats.h"
#include "monitor/stats_int.h"

PG_FUNCTION_INFO_V1(zk_stat_locks);
PG_FUNCTION_INFO_V1(zk_stat_cluster);
PG_FUNCTION_INFO_V1(zk_stat_reset);

int			zklock_stat_max_names = 1000;
bool		zklock_track_stats = true;

/* this backend's session counters already added to the cluster row */
static uint64 seen_reconnects = 0;
static uint64 seen_expirations = 0;

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

	zkst_store_preload();
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

void
zkst_add_event(StatCounts *c, StatEvent ev, bool waited, int64 us)
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
		case EV_TRY_FAILED:
			c->failed_tries++;
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
	zkst_store_session_events(r, e);
}

/*
 * Count one event.  Everything that may fail or allocate (the name's
 * conversion, the clock, the session's counters) happens here, before the
 * storage takes any lock.
 */
static void
count(const char *resource, ZkrMode mode, StatEvent ev, bool waited, int64 us,
	  bool may_create)
{
	StatUpdate	u;
	const char *utf8;

	if (!zklock_track_stats || !zkst_store_available())
		return;

	memset(&u, 0, sizeof(u));
	u.key.kind = (int32) mode;
	utf8 = GetDatabaseEncoding() == PG_SQL_ASCII ? resource :
		pg_server_to_any(resource, strlen(resource), PG_UTF8);
	strlcpy(u.key.name, utf8, sizeof(u.key.name));
	u.ev = ev;
	u.waited = waited;
	u.us = us;
	u.now = GetCurrentTimestamp();
	u.may_create = may_create;
	take_session_events(&u.reconnects, &u.expirations);
	zkst_store_count(&u);
}

void
zkst_acquired(const char *resource, ZkrMode mode, bool waited,
			  int64 waited_us)
{
	count(resource, mode, EV_ACQUIRED, waited, waited_us, true);
}

void
zkst_failed(const char *resource, ZkrMode mode, ZkstFailure why)
{
	if (why == ZKST_TIMEOUT)
		count(resource, mode, EV_TIMEOUT, false, 0, true);
	else if (why == ZKST_CANCEL)
		count(resource, mode, EV_CANCEL, false, 0, true);
	else if (why == ZKST_DEADLOCK)
		count(resource, mode, EV_DEADLOCK, false, 0, true);
}

void
zkst_try_failed(const char *resource, ZkrMode mode)
{
	count(resource, mode, EV_TRY_FAILED, false, 0, true);
}

void
zkst_lost(const char *resource, ZkrMode mode)
{
	count(resource, mode, EV_LOST, false, 0, true);
}

void
zkst_refused_commit(const char *resource, ZkrMode mode)
{
	count(resource, mode, EV_REFUSED, false, 0, true);
}

void
zkst_released(const char *resource, ZkrMode mode, int64 held_us)
{
	count(resource, mode, EV_RELEASED, false, Max(held_us, 0), false);
}

/* ----------------------------------------------------------------
 * SQL functions
 * ----------------------------------------------------------------
 */

static void
require_shared(void)
{
	if (!zkst_store_available())
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
	StatEntry  *copy;
	int			n;

	require_shared();
	InitMaterializedSRF(fcinfo, 0);

	/* the storage copies the rows under its locks; tuples are built after */
	copy = zkst_store_rows(&n);

	for (int i = 0; i < n; i++)
	{
		StatCounts *c = &copy[i].c;
		Datum		values[14];
		bool		nulls[14] = {0};
		const char *name = copy[i].key.name;

		/*
		 * A SQL_ASCII database counted its names' bytes as they are, and
		 * shows every name so.  Any other database shows a name it cannot
		 * hold (counted by a database of another encoding) as \x hex, as
		 * zk_lock_queue shows such owner data: converting with ERROR
		 * would fail the whole view here for as long as the row is kept.
		 */
		if (GetDatabaseEncoding() == PG_SQL_ASCII)
			values[0] = CStringGetTextDatum(name);
		else
		{
			StringInfoData shown;

			initStringInfo(&shown);
			zkt_append_utf8(&shown, name, strlen(name));
			values[0] = PointerGetDatum(cstring_to_text_with_len(shown.data,
																 shown.len));
		}
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
		/* 1.5's and 1.6's zk_stat_locks() end at stats_since */
		if (rsinfo->setDesc->natts > 13)
			values[13] = Int64GetDatum(c->failed_tries);
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
	StatCluster s;
	Datum		values[16];
	bool		nulls[16] = {0};

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	/* this backend's own session events, at least, are up to date */
	count_session_events();

	zkst_store_cluster(&s);

	values[0] = Int32GetDatum((int32) s.nentries);
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
	/* 1.5's and 1.6's zk_stat_cluster() end at stats_since */
	if (tupdesc->natts > 15)
		values[15] = Int64GetDatum(s.total.failed_tries);
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

	if (!PG_ARGISNULL(0))
		zkst_store_reset_name(&key);
	else
		zkst_store_reset_all(now);
	PG_RETURN_VOID();
}
