/*-------------------------------------------------------------------------
 *
 * callorder.h
 *	  Keeping zklock's pre-commit check ahead of other extensions'
 *	  transaction callbacks (see callorder.c).
 *
 * src/xact/callorder.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_CALLORDER_H
#define ZKLOCK_CALLORDER_H

#include "access/xact.h"

/*
 * Put a zklock callback in front of any registered since, so that zklock
 * confirms its locks before another extension commits remote work: moves
 * the main callback inside a portal, adds a guard outside one (only if
 * something began since it last came first).  Called after each
 * statement's run and end and each lock, and before COMMIT and PREPARE,
 * while locks are held.
 */
extern void zkl_callbacks_first(void);

/*
 * A statement or a function call begins (executor start, utility
 * statement, function-execute hook): code that may register a callback
 * in front of zklock's runs after this.
 */
extern void zkl_activity(void);

/*
 * Called by whichever zklock callback runs at PRE_COMMIT or PRE_PREPARE:
 * runs the pre-commit checks once per commit.
 */
extern void zkl_order_pre_commit(XactEvent event);

/*
 * Called by the main callback at COMMIT, ABORT and PREPARE: drops the
 * guards (all of them are before it in the list) and forgets the check.
 */
extern void zkl_order_xact_end(void);

#endif							/* ZKLOCK_CALLORDER_H */
