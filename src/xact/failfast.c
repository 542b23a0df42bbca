/*-------------------------------------------------------------------------
 *
 * failfast.c
 *	  A lost lock stops its holder at once: the statement running when the
 *	  loss is noticed ends with SQLSTATE 40001 naming the lock, and no
 *	  statement that does work starts after it, until the transaction
 *	  ends (a transaction-level lock) or the loss is acknowledged (a
 *	  session-level one).  zklock.cancel_on_loss turns it off.
 *
 * The session layer notices the loss on libzookeeper's thread (a held
 * node's watch fires, the session expires) and cancels the statement with
 * PostgreSQL's own query cancel (session/cancel.c says why that way).
 * PostgreSQL then raises "canceling statement due to user request", 57014,
 * at its next CHECK_FOR_INTERRUPTS(): inside a long query or sort, in
 * pg_sleep, in a row or table lock wait, in a zklock wait, at the next
 * statement of a PL/pgSQL function.  That error must not reach anyone as
 * it is.  zklock's error context callback, on the stack while a frame is
 * open, turns it into the loss's 40001 inside errfinish, which calls every
 * context callback for every ERROR before the error is thrown (elog.c).
 * So whoever catches it -- a PL/pgSQL handler, an extension's PG_TRY --,
 * the server log, every emit_log_hook and the client all see 40001, and
 * the rewrite does not depend on log_min_messages or on other extensions'
 * log hooks, where Citus's rewrite of its deadlock cancel (in its
 * emit_log_hook) loses it.  A handler that catches it (WHEN OTHERS,
 * WHEN serialization_failure) cannot carry on: the subtransaction's abort
 * cancels again (locktable.c), so its first statement raises the loss
 * once more.  WHEN query_canceled does not catch it.
 *
 * Ours or the user's: the callback rewrites a cancel (57014, or the
 * 55P03 PostgreSQL raises when a lock_timeout expired in the same check)
 * only if zklock armed one and PostgreSQL consumed it since
 * (zks_cancel_take).  A user's cancel, statement_timeout or lock_timeout
 * with no loss pending reads as theirs; when both are pending at one
 * check, PostgreSQL raises one error, and it reads as the loss.
 *
 * A loss noticed outside a frame (the backend idle, idle in a
 * transaction, or in a statement's parse and plan phase) cancels nothing:
 * the next statement is refused before it runs (zkff_statement_start),
 * except what cannot act under the lock -- looking at zklock's state,
 * unlocking, transaction control, settings (lookonly.c).  An idle
 * transaction is not ended sooner: nothing runs in it, PostgreSQL offers
 * no way to abort a transaction between statements short of ending the
 * connection, and the COMMIT fails as before.
 *
 * src/xact/failfast.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/elog.h"

#include "xact/failfast.h"
#include "xact/locktable.h"
#include "xact/lookonly.h"
#include "session/session.h"

bool		zklock_cancel_on_loss = true;

/* open frames; the outermost tells the session layer */
static int	frame_depth = 0;

/*
 * In errfinish, for every error raised while a frame is open.  Never
 * raises; allocates only in ErrorContext (errfinish's memory context).
 */
static void
loss_error_callback(void *arg)
{
	int			code = geterrcode();

	if (code != ERRCODE_QUERY_CANCELED && code != ERRCODE_LOCK_NOT_AVAILABLE)
		return;
	if (!zks_cancel_take())
		return;
	zkl_lost_fields_now();
}

void
zkff_frame_push(ErrorContextCallback *cb, bool cancellable)
{
	cb->callback = loss_error_callback;
	cb->arg = NULL;
	cb->previous = error_context_stack;
	error_context_stack = cb;
	if (frame_depth++ == 0 && cancellable)
	{
		zks_statement_begin();

		/*
		 * Look again now that a loss would cancel: one noticed between
		 * the caller's look and the begin canceled nothing, and a lock
		 * asked back then was given back at once (session/cancel.c).
		 * (Inside the caller's PG_TRY: its catch pops the frame.)
		 */
		if (zklock_cancel_on_loss && zkl_any_loss())
			zkl_refuse_if_lost();
	}
}

/*
 * The frame's callback is off the stack already: PG_TRY restores the
 * stack it found, and the push is the first thing inside it.
 */
void
zkff_frame_pop(void)
{
	if (--frame_depth == 0)
		zks_statement_end();
}

/*
 * The frame ended without an error.  A loss whose cancel came too late to
 * be raised (the statement ended first) is taken in now: a lock asked
 * back goes back at once, not at the next statement or the transaction's
 * end, which an idle holder may never reach.  (Not on the error path: the
 * abort takes it in.)
 */
void
zkff_frame_end(void)
{
	zkff_frame_pop();
	if (frame_depth == 0 && zklock_cancel_on_loss)
		(void) zkl_any_loss();
}

/*
 * Before a statement's executor starts, and before each run of it (a
 * portal's later Execute or FETCH runs with no new start).  Refuses it
 * after a known loss unless it cannot act under the lock; returns whether
 * a loss may cancel it.  A statement that may run after a loss is not
 * canceled either: looking at a lost lock must not fail because the
 * loss's notification came in the middle of the look.
 */
bool
zkff_statement_start(PlannedStmt *stmt)
{
	bool		cancellable;

	/* first, so that no lock is given back behind the look below */
	zks_xact_busy();
	cancellable = zkff_cancellable(stmt);

	/* (losses are taken in for a look too: zk_status() counts them) */
	if (zklock_cancel_on_loss && zkl_any_loss() && cancellable)
		zkl_refuse_if_lost();
	return cancellable;
}

/* May a loss cancel the statement?  (Not one that may run after a loss.) */
bool
zkff_cancellable(PlannedStmt *stmt)
{
	if (!zklock_cancel_on_loss || !zkl_have_locks())
		return true;
	return !zko_may_run_after_loss(stmt);
}

bool
zkff_utility_start(Node *parsetree)
{
	bool		exempt;

	zks_xact_busy();

	if (!zklock_cancel_on_loss || !zkl_have_locks())
		return true;
	exempt = zko_utility_may_run_after_loss(parsetree);
	if (zkl_any_loss() && !exempt)
		zkl_refuse_if_lost();
	return !exempt;
}
