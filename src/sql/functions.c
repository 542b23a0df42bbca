/*-------------------------------------------------------------------------
 *
 * functions.c
 *	  The SQL-callable functions of zklock.  They check their arguments,
 *	  turn the resource name into a znode path, and call the lock table
 *	  (locks and semaphores alike) or the queue reader.
 *
 * The interface mirrors PostgreSQL's advisory-lock functions
 * (src/backend/utils/adt/lockfuncs.c): transaction- and session-level
 * variants, try variants that return boolean, and unlock functions that
 * warn and return false when the lock is not held.
 *
 * src/sql/functions.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "sql/inspect.h"
#include "xact/locktable.h"
#include "mb/pg_wchar.h"
#include "recipe/recipe.h"
#include "sql/revoke.h"
#include "session/session.h"
#include "monitor/showtext.h"

PG_FUNCTION_INFO_V1(zk_lock_exclusive);
PG_FUNCTION_INFO_V1(zk_lock_shared);
PG_FUNCTION_INFO_V1(zk_try_lock_exclusive);
PG_FUNCTION_INFO_V1(zk_try_lock_shared);
PG_FUNCTION_INFO_V1(zk_session_lock_exclusive);
PG_FUNCTION_INFO_V1(zk_session_lock_shared);
PG_FUNCTION_INFO_V1(zk_try_session_lock_exclusive);
PG_FUNCTION_INFO_V1(zk_try_session_lock_shared);
PG_FUNCTION_INFO_V1(zk_unlock);
PG_FUNCTION_INFO_V1(zk_unlock_shared);
PG_FUNCTION_INFO_V1(zk_unlock_all);
PG_FUNCTION_INFO_V1(zk_lock_semaphore);
PG_FUNCTION_INFO_V1(zk_try_lock_semaphore);
PG_FUNCTION_INFO_V1(zk_session_lock_semaphore);
PG_FUNCTION_INFO_V1(zk_try_session_lock_semaphore);
PG_FUNCTION_INFO_V1(zk_unlock_semaphore);
PG_FUNCTION_INFO_V1(zk_lock_exclusive_array);
PG_FUNCTION_INFO_V1(zk_lock_shared_array);
PG_FUNCTION_INFO_V1(zk_try_lock_exclusive_array);
PG_FUNCTION_INFO_V1(zk_try_lock_shared_array);
PG_FUNCTION_INFO_V1(zk_session_lock_exclusive_array);
PG_FUNCTION_INFO_V1(zk_session_lock_shared_array);
PG_FUNCTION_INFO_V1(zk_try_session_lock_exclusive_array);
PG_FUNCTION_INFO_V1(zk_try_session_lock_shared_array);
PG_FUNCTION_INFO_V1(zk_unlock_array);
PG_FUNCTION_INFO_V1(zk_unlock_shared_array);
PG_FUNCTION_INFO_V1(zk_locks);
PG_FUNCTION_INFO_V1(zk_lock_queue);
PG_FUNCTION_INFO_V1(zk_lock_revoke);
PG_FUNCTION_INFO_V1(zk_lock_revoked);
PG_FUNCTION_INFO_V1(zk_status);

/*
 * A resource name: text of 1 to 512 bytes without empty levels.  Returns
 * it as a C string and sets *relpath to its encoding.
 */
static char *
encode_resource(text *t, char **relpath)
{
	char	   *res;
	char	   *utf8;
	size_t		utf8_len;
	char	   *out;

	res = text_to_cstring(t);
	out = palloc(ZKR_MAX_ENCODED_BYTES + 1);

	/*
	 * The lock is named by the name's UTF-8 bytes, whatever the database
	 * encoding, so 'café' is one lock on every cluster (and for Curator
	 * and kazoo, which use UTF-8).  SQL_ASCII bytes are taken as they are.
	 */
	if (GetDatabaseEncoding() == PG_SQL_ASCII)
		utf8 = res;
	else
		utf8 = pg_server_to_any(res, strlen(res), PG_UTF8);
	utf8_len = strlen(utf8);

	switch (zkr_encode_resource(utf8, utf8_len, out,
								ZKR_MAX_ENCODED_BYTES + 1))
	{
		case ZKR_ENCODE_OK:
			break;
		case ZKR_ENCODE_EMPTY:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock resource name must not be empty")));
			break;
		case ZKR_ENCODE_TOO_LONG:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock resource name is too long"),
					 errdetail("The name is %d bytes in UTF-8; at most %d are allowed.",
							   (int) utf8_len, ZKR_MAX_RESOURCE_BYTES)));
			break;
		case ZKR_ENCODE_EMPTY_LEVEL:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock resource name \"%s\" has an empty level", res),
					 errdetail("\"/\" separates levels; a name must not start or end with \"/\" nor contain \"//\".")));
			break;
		case ZKR_ENCODE_NO_ROOM:
			elog(ERROR, "encoded zklock resource name does not fit");
			break;
	}
	*relpath = out;
	return res;
}

/* The resource argument (the first): a resource name, not NULL. */
static char *
resource_arg(FunctionCallInfo fcinfo, char **relpath)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock resource name must not be null")));
	return encode_resource(PG_GETARG_TEXT_PP(0), relpath);
}

/*
 * The resources argument (the first) of the array functions: a
 * one-dimensional text array without NULLs, each element a resource name.
 * Returns the number of elements; sets *names and *relpaths.
 */
static int
resources_arg(FunctionCallInfo fcinfo, char ***names, char ***relpaths)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock resource array must not be null")));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("zklock resource array must be one-dimensional"),
				 errdetail("The array given has %d dimensions.", ARR_NDIM(arr))));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	*names = palloc(sizeof(char *) * Max(n, 1));
	*relpaths = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("zklock resource name must not be null"),
					 errdetail("Element %d of the array is null.",
							   ARR_LBOUND(arr)[0] + i)));
		(*names)[i] = encode_resource(DatumGetTextPP(elems[i]),
									  &(*relpaths)[i]);
	}
	return n;
}

/* The timeout argument (number argno): NULL means none; negative is an error. */
static int64
timeout_arg(FunctionCallInfo fcinfo, int argno)
{
	Interval   *iv;
	int64		us;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return -1;
	iv = PG_GETARG_INTERVAL_P(argno);
	if (pg_mul_s64_overflow((int64) iv->month * DAYS_PER_MONTH + iv->day,
							USECS_PER_DAY, &us) ||
		pg_add_s64_overflow(us, iv->time, &us))
	{
		/* beyond any real wait: the sign still matters */
		if (iv->month < 0 || iv->day < 0 || iv->time < 0)
			us = -1;
		else
			return -1;
	}
	if (us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock timeout must not be negative")));
	return (us + 999) / 1000;
}

static Datum
lock_common(FunctionCallInfo fcinfo, ZkrMode mode, ZklScope scope)
{
	char	   *relpath;
	char	   *res = resource_arg(fcinfo, &relpath);
	int64		timeout = timeout_arg(fcinfo, 1);
	int64		token;

	(void) zkl_acquire(res, relpath, mode, 0, scope, timeout, false, &token);
	PG_RETURN_INT64(token);
}

static Datum
try_common(FunctionCallInfo fcinfo, ZkrMode mode, ZklScope scope)
{
	char	   *relpath;
	char	   *res = resource_arg(fcinfo, &relpath);
	int64		token;

	PG_RETURN_BOOL(zkl_acquire(res, relpath, mode, 0, scope, -1, true, &token));
}

Datum
zk_lock_exclusive(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, ZKR_MODE_EXCLUSIVE, ZKL_SCOPE_TRANSACTION);
}

Datum
zk_lock_shared(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, ZKR_MODE_SHARED, ZKL_SCOPE_TRANSACTION);
}

Datum
zk_try_lock_exclusive(PG_FUNCTION_ARGS)
{
	return try_common(fcinfo, ZKR_MODE_EXCLUSIVE, ZKL_SCOPE_TRANSACTION);
}

Datum
zk_try_lock_shared(PG_FUNCTION_ARGS)
{
	return try_common(fcinfo, ZKR_MODE_SHARED, ZKL_SCOPE_TRANSACTION);
}

Datum
zk_session_lock_exclusive(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, ZKR_MODE_EXCLUSIVE, ZKL_SCOPE_SESSION);
}

Datum
zk_session_lock_shared(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, ZKR_MODE_SHARED, ZKL_SCOPE_SESSION);
}

Datum
zk_try_session_lock_exclusive(PG_FUNCTION_ARGS)
{
	return try_common(fcinfo, ZKR_MODE_EXCLUSIVE, ZKL_SCOPE_SESSION);
}

Datum
zk_try_session_lock_shared(PG_FUNCTION_ARGS)
{
	return try_common(fcinfo, ZKR_MODE_SHARED, ZKL_SCOPE_SESSION);
}

static Datum
unlock_common(FunctionCallInfo fcinfo, ZkrMode mode)
{
	char	   *relpath;
	char	   *res = resource_arg(fcinfo, &relpath);

	PG_RETURN_BOOL(zkl_release_session(res, mode));
}

Datum
zk_unlock(PG_FUNCTION_ARGS)
{
	return unlock_common(fcinfo, ZKR_MODE_EXCLUSIVE);
}

Datum
zk_unlock_shared(PG_FUNCTION_ARGS)
{
	return unlock_common(fcinfo, ZKR_MODE_SHARED);
}

Datum
zk_unlock_all(PG_FUNCTION_ARGS)
{
	zkl_release_all_session();
	PG_RETURN_VOID();
}

static Datum
lock_many_common(FunctionCallInfo fcinfo, ZkrMode mode, ZklScope scope)
{
	char	  **names;
	char	  **relpaths;
	int			n = resources_arg(fcinfo, &names, &relpaths);
	int64		timeout = timeout_arg(fcinfo, 1);
	int64	   *tokens = palloc(sizeof(int64) * Max(n, 1));
	Datum	   *out = palloc(sizeof(Datum) * Max(n, 1));

	(void) zkl_acquire_many((const char *const *) names,
							(const char *const *) relpaths, n, mode, scope,
							timeout, false, tokens);
	for (int i = 0; i < n; i++)
		out[i] = Int64GetDatum(tokens[i]);
	PG_RETURN_ARRAYTYPE_P(construct_array(out, n, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

static Datum
try_many_common(FunctionCallInfo fcinfo, ZkrMode mode, ZklScope scope)
{
	char	  **names;
	char	  **relpaths;
	int			n = resources_arg(fcinfo, &names, &relpaths);
	int64	   *tokens = palloc(sizeof(int64) * Max(n, 1));

	PG_RETURN_BOOL(zkl_acquire_many((const char *const *) names,
									(const char *const *) relpaths, n, mode,
									scope, -1, true, tokens));
}

Datum
zk_lock_exclusive_array(PG_FUNCTION_ARGS)
{
	return lock_many_common(fcinfo, ZKR_MODE_EXCLUSIVE, ZKL_SCOPE_TRANSACTION);
}

Datum
zk_lock_shared_array(PG_FUNCTION_ARGS)
{
	return lock_many_common(fcinfo, ZKR_MODE_SHARED, ZKL_SCOPE_TRANSACTION);
}

Datum
zk_try_lock_exclusive_array(PG_FUNCTION_ARGS)
{
	return try_many_common(fcinfo, ZKR_MODE_EXCLUSIVE, ZKL_SCOPE_TRANSACTION);
}

Datum
zk_try_lock_shared_array(PG_FUNCTION_ARGS)
{
	return try_many_common(fcinfo, ZKR_MODE_SHARED, ZKL_SCOPE_TRANSACTION);
}

Datum
zk_session_lock_exclusive_array(PG_FUNCTION_ARGS)
{
	return lock_many_common(fcinfo, ZKR_MODE_EXCLUSIVE, ZKL_SCOPE_SESSION);
}

Datum
zk_session_lock_shared_array(PG_FUNCTION_ARGS)
{
	return lock_many_common(fcinfo, ZKR_MODE_SHARED, ZKL_SCOPE_SESSION);
}

Datum
zk_try_session_lock_exclusive_array(PG_FUNCTION_ARGS)
{
	return try_many_common(fcinfo, ZKR_MODE_EXCLUSIVE, ZKL_SCOPE_SESSION);
}

Datum
zk_try_session_lock_shared_array(PG_FUNCTION_ARGS)
{
	return try_many_common(fcinfo, ZKR_MODE_SHARED, ZKL_SCOPE_SESSION);
}

static Datum
unlock_many_common(FunctionCallInfo fcinfo, ZkrMode mode)
{
	char	  **names;
	char	  **relpaths;
	int			n = resources_arg(fcinfo, &names, &relpaths);

	PG_RETURN_BOOL(zkl_release_session_many((const char *const *) names, n,
											mode));
}

Datum
zk_unlock_array(PG_FUNCTION_ARGS)
{
	return unlock_many_common(fcinfo, ZKR_MODE_EXCLUSIVE);
}

Datum
zk_unlock_shared_array(PG_FUNCTION_ARGS)
{
	return unlock_many_common(fcinfo, ZKR_MODE_SHARED);
}

/* The max_holders argument (the second): a positive integer. */
static int
max_holders_arg(FunctionCallInfo fcinfo)
{
	int32		max_holders;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock semaphore max_holders must not be null")));
	max_holders = PG_GETARG_INT32(1);
	if (max_holders < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock semaphore max_holders must be at least 1"),
				 errdetail("The call gave %d.", max_holders)));
	return max_holders;
}

static Datum
semaphore_common(FunctionCallInfo fcinfo, ZklScope scope, bool try_only)
{
	char	   *relpath;
	char	   *res = resource_arg(fcinfo, &relpath);
	int			max_holders = max_holders_arg(fcinfo);
	int64		timeout = try_only ? -1 : timeout_arg(fcinfo, 2);
	int64		token;
	bool		held;

	held = zkl_acquire(res, relpath, ZKR_MODE_SEMAPHORE, max_holders, scope,
					   timeout, try_only, &token);
	if (try_only)
		PG_RETURN_BOOL(held);
	PG_RETURN_INT64(token);
}

Datum
zk_lock_semaphore(PG_FUNCTION_ARGS)
{
	return semaphore_common(fcinfo, ZKL_SCOPE_TRANSACTION, false);
}

Datum
zk_try_lock_semaphore(PG_FUNCTION_ARGS)
{
	return semaphore_common(fcinfo, ZKL_SCOPE_TRANSACTION, true);
}

Datum
zk_session_lock_semaphore(PG_FUNCTION_ARGS)
{
	return semaphore_common(fcinfo, ZKL_SCOPE_SESSION, false);
}

Datum
zk_try_session_lock_semaphore(PG_FUNCTION_ARGS)
{
	return semaphore_common(fcinfo, ZKL_SCOPE_SESSION, true);
}

Datum
zk_unlock_semaphore(PG_FUNCTION_ARGS)
{
	return unlock_common(fcinfo, ZKR_MODE_SEMAPHORE);
}

/* zk_locks(): this backend's locks, one row per lock and scope. */
Datum
zk_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ZklLockInfo *rows;
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	rows = zkl_snapshot(&n);
	for (int i = 0; i < n; i++)
	{
		/*
		 * The 9th column came in 1.2 (a 1.1 definition reads 8), the
		 * revocation's two in 1.9.
		 */
		Datum		values[11];
		bool		nulls[11] = {0};

		values[0] = CStringGetTextDatum(rows[i].resource);
		values[1] = CStringGetTextDatum(zkr_mode_name(rows[i].mode));
		values[2] = CStringGetTextDatum(zkl_scope_name(rows[i].scope));
		values[3] = Int32GetDatum(rows[i].count);
		values[4] = CStringGetTextDatum(rows[i].node);
		values[5] = Int64GetDatum(rows[i].token);
		values[6] = CStringGetTextDatum(rows[i].revoked ? "revoked" :
										rows[i].lost ? "lost" : "held");
		values[7] = TimestampTzGetDatum(rows[i].since);
		if (rows[i].max_holders > 0)
			values[8] = Int32GetDatum(rows[i].max_holders);
		else
			nulls[8] = true;
		values[9] = TimestampTzGetDatum(rows[i].revoke_at);
		nulls[9] = rows[i].revoke_at == 0;
		if (rows[i].revoke_by != NULL)
			values[10] = CStringGetTextDatum(rows[i].revoke_by);
		else
			nulls[10] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* A session id as ZooKeeper's own tools print it. */
static Datum
session_id_datum(int64 id)
{
	return CStringGetTextDatum(zks_session_id_text(id));
}

/* Owner data longer than this is cut (another client's node may hold 1 MB). */
#define OWNER_MAX_BYTES 1024

/*
 * A node's data as text: printable UTF-8 that the database encoding can
 * hold is shown converted, anything else as hex in bytea's output form
 * (showtext.c, which zk_stat_locks' names share), so binary data or
 * terminal escapes from another client can neither fail the query nor
 * reach an operator's terminal.  Cut to OWNER_MAX_BYTES (text on a
 * character boundary), with "..." after it.
 */
static Datum
owner_datum(const char *data, int len)
{
	StringInfoData buf;
	bool		printable = true;
	bool		cut = len > OWNER_MAX_BYTES;
	int			show = cut ? OWNER_MAX_BYTES : len;

	for (int i = 0; i < len; i++)
	{
		unsigned char ch = (unsigned char) data[i];

		/* (a newline too: a request to give the lock back is a 2nd line) */
		if ((ch < 0x20 && ch != '\t' && ch != '\n') || ch == 0x7F)
			printable = false;
	}

	initStringInfo(&buf);
	if (printable && pg_verify_mbstr(PG_UTF8, data, len, true))
	{
		if (cut)
			show = pg_encoding_mbcliplen(PG_UTF8, data, len, OWNER_MAX_BYTES);
		zkt_append_utf8(&buf, data, show);
	}
	else
		zkt_append_hex(&buf, data, show);
	if (cut)
		appendStringInfoString(&buf, "...");
	return PointerGetDatum(cstring_to_text_with_len(buf.data, buf.len));
}

/* zk_lock_queue(resource): the lock's whole queue, every client included. */
Datum
zk_lock_queue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *relpath;
	ZkqEntry   *q;
	int			n;

	(void) resource_arg(fcinfo, &relpath);
	InitMaterializedSRF(fcinfo, 0);
	q = zkq_queue(relpath, &n);
	for (int i = 0; i < n; i++)
	{
		/* the 8th column came in 1.1; a 1.0 definition reads 7 */
		Datum		values[8];
		bool		nulls[8] = {0};

		values[0] = Int32GetDatum(q[i].position);
		values[1] = CStringGetTextDatum(zkr_mode_name(q[i].mode));
		values[2] = CStringGetTextDatum(q[i].node);
		values[3] = owner_datum(q[i].data, q[i].data_len);
		values[4] = BoolGetDatum(q[i].holding);
		values[5] = session_id_datum(q[i].session_id);
		values[6] = Int64GetDatum(q[i].czxid);
		if (q[i].waits_for != NULL)
			values[7] = CStringGetTextDatum(q[i].waits_for);
		else
			nulls[7] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * zk_lock_revoke(resource, wait): ask the lock's holders to give it back
 * (revoke.c); one row per holder asked.
 */
Datum
zk_lock_revoke(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *relpath;
	int64		wait_ms;
	ZkvAsked   *asked;
	int			n;

	(void) resource_arg(fcinfo, &relpath);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock revocation wait must not be null")));
	/* (-1: 'infinity', waited for until released or canceled) */
	wait_ms = timeout_arg(fcinfo, 1);
	InitMaterializedSRF(fcinfo, 0);
	asked = zkv_revoke(relpath, wait_ms, &n);
	for (int i = 0; i < n; i++)
	{
		Datum		values[4];
		bool		nulls[4] = {0};

		values[0] = CStringGetTextDatum(asked[i].node);
		values[1] = owner_datum(asked[i].data, asked[i].data_len);
		if (asked[i].request != NULL)
			values[2] = CStringGetTextDatum(asked[i].request);
		else
			nulls[2] = true;
		values[3] = CStringGetTextDatum(asked[i].outcome);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* zk_lock_revoked(resource): was a lock of ours on it asked back? */
Datum
zk_lock_revoked(PG_FUNCTION_ARGS)
{
	char	   *relpath;
	char	   *res = resource_arg(fcinfo, &relpath);

	PG_RETURN_BOOL(zkv_revoke_requested(res));
}

/* zk_status(): this backend's ZooKeeper session and lock counters. */
Datum
zk_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	ZksStatus	st;
	ZklCounters c;
	Datum		values[12];
	bool		nulls[12] = {0};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	zks_get_status(&st);
	zkl_counters(&c);

	values[0] = CStringGetTextDatum(st.state);
	if (st.session_id != 0)
		values[1] = session_id_datum(st.session_id);
	else
		nulls[1] = true;
	if (st.timeout_ms > 0)
	{
		Interval   *iv = palloc0(sizeof(Interval));

		iv->time = (int64) st.timeout_ms * 1000;
		values[2] = IntervalPGetDatum(iv);
	}
	else
		nulls[2] = true;
	if (st.server[0] != '\0')
		values[3] = CStringGetTextDatum(st.server);
	else
		nulls[3] = true;
	values[4] = Int32GetDatum(c.locks_held);
	values[5] = Int64GetDatum((int64) c.grants);
	values[6] = Int64GetDatum((int64) c.waits);
	values[7] = Int64GetDatum((int64) c.lost);
	values[8] = Int64GetDatum((int64) st.reconnects);
	/* 1.3's zk_status() has no nudges column: the library may be newer */
	if (tupdesc->natts > 9)
		values[9] = Int64GetDatum((int64) st.nudges);
	/* nor has 1.5's the counts of libzookeeper's log lines */
	if (tupdesc->natts > 11)
	{
		values[10] = Int64GetDatum((int64) st.log_lines);
		values[11] = Int64GetDatum((int64) st.log_suppressed);
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
