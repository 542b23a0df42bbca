/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *	  What differs between the PostgreSQL majors zklock supports (15 to
 *	  19), in one place: every other file is written against one API and
 *	  includes this header instead of testing PG_VERSION_NUM itself.
 *
 * 19 (tested on 19beta3) needs nothing here beyond the accepted version:
 * the hooks, wait events, GUC lookups and custom statistics zklock uses
 * kept their 18 signatures.  What 19 did change that zklock meets is
 * which header declares what (get_database_name moved to lsyscache.h;
 * funcapi.h, through executor.h, no longer pulls in tuplestore.h and
 * htup_details.h), and each file includes those headers itself.
 *
 * Include it right after postgres.h.
 *
 * src/pg_compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_PG_COMPAT_H
#define ZKLOCK_PG_COMPAT_H

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 200000
#error "zklock supports PostgreSQL 15, 16, 17, 18 and 19"
#endif

/*
 * A function that never returns.  PostgreSQL 18 and 19 spell it
 * pg_noreturn, placed before the declaration (C11 _Noreturn; C23's
 * [[noreturn]], which 19 uses when the compiler is in C23 mode, must
 * come first of all, so zklock writes "pg_noreturn extern void f(...)"),
 * and has dropped pg_attribute_noreturn(), which earlier majors place
 * after it.  GCC and Clang take the attribute in front as well.
 */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * Wait events.  PostgreSQL 17 lets an extension name its own
 * (WaitEventExtensionNew, in shared memory, the same number for the same
 * name in every backend): pg_stat_activity.wait_event then says what a
 * backend waits for, and pg_wait_events lists the names.  Earlier majors
 * have only the one event "Extension", which every name maps to.
 */
#include "utils/wait_event.h"

static inline uint32
zk_wait_event_info(const char *name)
{
#if PG_VERSION_NUM >= 170000
	return WaitEventExtensionNew(name);
#else
	(void) name;
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * Every setting PostgreSQL knows, placeholders included.  PostgreSQL 16
 * keeps them in a hash table and builds the array on request, with its
 * length; earlier majors return their own array and count it apart.
 */
#include "utils/guc_tables.h"

static inline struct config_generic **
zk_guc_variables(int *num_vars)
{
#if PG_VERSION_NUM >= 160000
	return get_guc_variables(num_vars);
#else
	*num_vars = GetNumConfigOptions();
	return get_guc_variables();
#endif
}

/*
 * The ExecutorRun hook.  PostgreSQL 18 dropped its execute_once argument
 * (19 kept 18's signature).
 */
#if PG_VERSION_NUM >= 180000
#define ZK_EXECUTOR_RUN_PARAMS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count
#define ZK_EXECUTOR_RUN_ARGS queryDesc, direction, count
#else
#define ZK_EXECUTOR_RUN_PARAMS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count, \
	bool execute_once
#define ZK_EXECUTOR_RUN_ARGS queryDesc, direction, count, execute_once
#endif

/*
 * This backend's process number: the index of its slot in a table of
 * MaxBackends entries (curwaits.c, cursessions.c), or -1 outside a
 * process with a PGPROC.  17 renamed PGPROC's pgprocno to MyProcNumber.
 */
#include "storage/proc.h"

static inline int
zk_my_proc_number(void)
{
	if (MyProc == NULL)
		return -1;
#if PG_VERSION_NUM >= 170000
	return MyProcNumber;
#else
	return MyProc->pgprocno;
#endif
}

#endif							/* ZKLOCK_PG_COMPAT_H */
