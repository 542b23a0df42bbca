/*-------------------------------------------------------------------------
 *
 * failfast.h
 *	  A lost lock stops the statement running under it (see failfast.c).
 *
 * src/xact/failfast.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_FAILFAST_H
#define ZKLOCK_FAILFAST_H

#include "nodes/plannodes.h"

/*
 * A frame around the executor's run and finish and around a utility
 * statement: while the outermost is open, a loss cancels the statement,
 * and the cancel is raised as the loss.  The push is the first statement
 * inside a PG_TRY, whose end takes the callback off the stack again;
 * zkff_frame_pop runs on every exit: after PG_END_TRY, and in PG_CATCH
 * before the error goes on.
 */
extern void zkff_frame_push(ErrorContextCallback *cb, bool cancellable);
extern void zkff_frame_pop(void);
/* zkff_frame_pop on the normal exit, taking in a loss noticed meanwhile */
extern void zkff_frame_end(void);

/*
 * Before a statement (and each run of its executor), or a utility
 * statement, runs: refuse it after a loss unless it cannot act under the
 * lock; returns whether a loss may cancel it (its frame's cancellable).
 */
extern bool zkff_statement_start(PlannedStmt *stmt);
extern bool zkff_utility_start(Node *parsetree);

/* Whether a loss may cancel the statement (AFTER triggers' frame). */
extern bool zkff_cancellable(PlannedStmt *stmt);

#endif							/* ZKLOCK_FAILFAST_H */
