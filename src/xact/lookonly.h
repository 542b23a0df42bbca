/*-------------------------------------------------------------------------
 *
 * lookonly.h
 *	  Which transactions did nothing but look at zklock's own state
 *	  (see lookonly.c).
 *
 * src/xact/lookonly.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_LOOKONLY_H
#define ZKLOCK_LOOKONLY_H

#include "nodes/plannodes.h"

/* Before the executor runs a statement (ExecutorStart hook). */
extern void zko_statement(PlannedStmt *stmt);

/*
 * Before any function runs, wherever it is called from (object access
 * hook, OAT_FUNCTION_EXECUTE).
 */
extern void zko_function_executed(Oid funcid);

/* Before a utility statement runs (ProcessUtility hook). */
extern void zko_utility(Node *parsetree);

/*
 * True if every statement of the current transaction only read zklock's
 * state (zk_locks, zk_status, zk_lock_queue), no other function ran in it,
 * and it has no transaction id: its commit cannot carry anything done
 * under a lock.
 */
extern bool zko_only_looked(void);

/*
 * May the statement, or the utility statement, run while a held lock is
 * known lost (failfast.c)?  Looks, unlocks, transaction control, settings.
 */
extern bool zko_may_run_after_loss(PlannedStmt *stmt);
extern bool zko_utility_may_run_after_loss(Node *parsetree);

/* At the end of every transaction. */
extern void zko_xact_end(void);

#endif							/* ZKLOCK_LOOKONLY_H */
