/*-------------------------------------------------------------------------
 *
 * failfast.h
 *	  A lost lock stops the statement running under it (see failfast.c).
 *
 * src/failfast.h
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
extern void zkff_frame_push(ErrorContextCallback *cb);
extern void zkff_frame_pop(void);

/* Before a statement, or a utility statement, runs: refuse it after a loss. */
extern void zkff_statement_start(PlannedStmt *stmt);
extern void zkff_utility_start(Node *parsetree);

#endif							/* ZKLOCK_FAILFAST_H */
