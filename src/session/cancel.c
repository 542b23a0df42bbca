/*-------------------------------------------------------------------------
 *
 * cancel.c
 *	  Fail fast: the session layer's half.  When the session watcher learns
 *	  that a lock this backend holds is gone -- a held node deleted, the
 *	  session expired -- it cancels the statement the backend is running,
 *	  at once, instead of leaving the loss for COMMIT to find.
 *
 * PostgreSQL 15-19 give an extension no interrupt of its own: the one
 * ERROR an extension can make PostgreSQL raise at an arbitrary
 * CHECK_FOR_INTERRUPTS() is the query cancel.  So the watcher, on
 * libzookeeper's thread, does what StatementCancelHandler does (postgres.c):
 * QueryCancelPending, a barrier, InterruptPending, then SetLatch (after
 * zks_mutex is released: an armed cancel always wakes, see
 * zks_take_wake_locked).  These are aligned
 * sig_atomic_t stores that the backend already tolerates at any instruction,
 * since a signal handler makes them; nothing else of PostgreSQL runs on the
 * thread (the reply nudge's thread, for the loss clock of session/nudge.c,
 * does the same).  Why not kill(getpid(), SIGINT), as Citus cancels a backend for a
 * distributed deadlock: a signal's delivery time is unknown, so it cannot
 * be taken back -- it may cancel a later statement, in a later transaction,
 * as "canceling statement due to user request".  A store under zks_mutex
 * can be taken back under the same mutex: the backend clears it when its
 * statement ends and when its transaction ends (failfast.c), and knows
 * then that no cancel of zklock's is in flight.
 *
 * The cancel is armed only while the backend runs a statement inside one
 * of zklock's frames (failfast.c: the executor and utility hooks), where
 * zklock's error context callback turns PostgreSQL's 57014 into the
 * loss's 40001 before anyone sees it.  Outside a frame (idle, between
 * statements, in a statement's parse and plan phase) a cancel would read
 * as the user's, so none is armed then: the loss is counted, and the next
 * statement is refused before it runs, or the COMMIT fails.
 *
 * src/session/cancel.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "miscadmin.h"
#include "storage/latch.h"

#include "session/session.h"
#include "session/session_int.h"

/* Under zks_mutex. */
static bool cancel_enabled = true;	/* zklock.cancel_on_loss */
static bool revoke_cancels = true;	/* zklock.on_revoke = cancel */
static bool in_statement = false;	/* inside a zklock frame */
static bool xact_busy = false;	/* a transaction has run something */
static bool cancel_out = false; /* armed, not yet turned into the error */
static int	holding = 0;		/* lock table entries */
static uint64 losses = 0;		/* losses noticed by the session layer */
static uint64 clock_losses = 0; /* of them, by the loss clock */
static struct timespec clock_lost_at;	/* the last of those */
static int	clock_timeout_ms = 0;	/* the timeout it ran out for */

/*
 * Write the flags StatementCancelHandler writes: QueryCancelPending
 * before InterruptPending, so that CHECK_FOR_INTERRUPTS(), which tests
 * InterruptPending alone, finds the cause once it sees the flag.  (The
 * fence is the compiler's builtin, not PostgreSQL's barrier macro: this
 * runs on libzookeeper's thread too.)
 */
static void
arm_locked(void)
{
	QueryCancelPending = true;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	InterruptPending = true;
	cancel_out = true;
	zks_owe_wake_locked();
}

/*
 * A lock held by this backend is gone (zks_mutex held; any thread).  The
 * caller wakes the backend after releasing the mutex.
 */
void
zksc_loss_locked(void)
{
	losses++;
	if (cancel_enabled && in_statement && !cancel_out)
		arm_locked();
}

/*
 * A held node was asked back (session/watch.c; zks_mutex held, any
 * thread).  With zklock.on_revoke = cancel the request is a loss, which
 * cancels the statement running under the lock like any other.
 *
 * Between transactions the node is given back at once instead: nothing
 * runs under it, and an idle holder -- a session lock held for days --
 * would otherwise never let go.  That is safe because every transaction
 * marks itself busy, under this mutex, at its first statement's executor
 * or utility start, *before* it looks for losses there (failfast.c), and
 * only its end clears the mark: either the request is counted before that
 * look, which then refuses the statement, or the transaction is busy.
 * Inside a transaction and outside a frame -- idle in it, between one
 * statement's executor and the next, running deferred triggers or
 * PL/pgSQL expressions at COMMIT, which pass no hook -- code may run under
 * the lock, so the node is kept: the loss refuses the next statement and
 * the COMMIT, and the node goes when the loss is taken in (the next
 * frame's end or start, the transaction's end).  Needs cancel_on_loss
 * too: without it nothing is canceled or refused, and the node is not
 * watched.
 */
ZkscRevoke
zksc_revoked_locked(void)
{
	if (!revoke_cancels || !cancel_enabled || holding == 0)
		return ZKSC_REVOKE_IGNORED;
	losses++;
	if (in_statement)
	{
		if (!cancel_out)
			arm_locked();
		return ZKSC_REVOKE_CANCELED;
	}
	return xact_busy ? ZKSC_REVOKE_NOTED : ZKSC_REVOKE_RELEASE;
}

/* The session ended (expired, authentication failed): zks_mutex held. */
void
zksc_session_ended_locked(void)
{
	if (holding > 0)
		zksc_loss_locked();
}

/*
 * No reply for the negotiated timeout while holding (session/nudge.c's
 * thread): the session counts as expired.  Every lock held now is lost;
 * one granted later, after a reply, is not (zks_clock_losses).
 */
void
zksc_clock_lost(int timeout_ms)
{
	pthread_mutex_lock(&zks_mutex);
	if (holding > 0)
	{
		clock_losses++;
		(void) clock_gettime(CLOCK_REALTIME, &clock_lost_at);
		clock_timeout_ms = timeout_ms;
		zksc_loss_locked();
	}
	(void) zks_take_wake_locked();	/* woken here, whatever it owed */
	pthread_mutex_unlock(&zks_mutex);
	zks_wake_backend();
}

/* ----------------------------------------------------------------
 * Backend side.
 * ----------------------------------------------------------------
 */

/* Take back a cancel of ours that nobody consumed (zks_mutex held). */
static void
disarm_locked(void)
{
	if (cancel_out)
	{
		QueryCancelPending = false;
		cancel_out = false;
	}
}

/*
 * The loss clock (session/nudge.c) runs while the backend holds a lock
 * and cancel_on_loss is on: off is 1.7's behaviour, which has no clock.
 */
static void
update_clock(void)
{
	bool		run;

	pthread_mutex_lock(&zks_mutex);
	run = holding > 0 && cancel_enabled;
	pthread_mutex_unlock(&zks_mutex);
	zkn_set_holding(run);
}

void
zks_cancel_setting(bool enabled)
{
	pthread_mutex_lock(&zks_mutex);
	cancel_enabled = enabled;
	if (!enabled)
		disarm_locked();
	pthread_mutex_unlock(&zks_mutex);
	update_clock();
}

void
zks_revoke_setting(bool cancel)
{
	pthread_mutex_lock(&zks_mutex);
	revoke_cancels = cancel;
	pthread_mutex_unlock(&zks_mutex);
}

void
zks_note_holding(int entries)
{
	pthread_mutex_lock(&zks_mutex);
	holding = entries;
	pthread_mutex_unlock(&zks_mutex);
	update_clock();
}

uint64
zks_clock_losses(TimestampTz *at, int *timeout_ms)
{
	uint64		n;
	struct timespec when;

	pthread_mutex_lock(&zks_mutex);
	n = clock_losses;
	when = clock_lost_at;
	*timeout_ms = clock_timeout_ms;
	pthread_mutex_unlock(&zks_mutex);
	*at = n > 0 ? zks_timespec_to_timestamptz(&when) : 0;
	return n;
}

uint64
zks_loss_count(void)
{
	uint64		n;

	pthread_mutex_lock(&zks_mutex);
	n = losses;
	pthread_mutex_unlock(&zks_mutex);
	return n;
}

void
zks_statement_begin(void)
{
	pthread_mutex_lock(&zks_mutex);
	in_statement = true;
	xact_busy = true;
	pthread_mutex_unlock(&zks_mutex);
}

/*
 * The transaction runs something (an executor or utility start): no idle
 * give-back until it ends.  A backend-local copy spares the mutex after
 * the first statement.
 */
static bool busy_here = false;

void
zks_xact_busy(void)
{
	if (busy_here)
		return;
	pthread_mutex_lock(&zks_mutex);
	xact_busy = true;
	pthread_mutex_unlock(&zks_mutex);
	busy_here = true;
}

/* The transaction ended (after its locks were released). */
void
zks_xact_idle(void)
{
	pthread_mutex_lock(&zks_mutex);
	xact_busy = false;
	pthread_mutex_unlock(&zks_mutex);
	busy_here = false;
}

/*
 * The outermost frame ends, normally or by an error: a cancel still
 * pending now would land outside any frame, in the next statement's parse
 * phase, read as the user's.  The loss it stood for is still recorded:
 * the next statement is refused, or the COMMIT fails.  (A user's cancel
 * that arrived in the same instant is dropped with it, as PostgreSQL
 * drops a cancel that arrives while the backend is idle.)
 */
void
zks_statement_end(void)
{
	pthread_mutex_lock(&zks_mutex);
	in_statement = false;
	disarm_locked();
	pthread_mutex_unlock(&zks_mutex);
}

/* At the end of every transaction: no cancel of ours survives it. */
void
zks_cancel_disarm(void)
{
	pthread_mutex_lock(&zks_mutex);
	disarm_locked();
	pthread_mutex_unlock(&zks_mutex);
}

/*
 * Is the cancel PostgreSQL is raising ours?  It is if we armed one and
 * QueryCancelPending has been consumed since: ProcessInterrupts clears it
 * before it raises.  Then it is taken: the caller turns the error into the
 * loss, and the next cancel is the user's again.
 */
bool
zks_cancel_take(void)
{
	bool		ours;

	pthread_mutex_lock(&zks_mutex);
	ours = cancel_out && !QueryCancelPending;
	if (ours)
		cancel_out = false;
	pthread_mutex_unlock(&zks_mutex);
	return ours;
}

/*
 * A subtransaction was rolled back (a PL/pgSQL handler is about to run)
 * while a lost lock still belongs to the transaction: cancel again, so
 * the handler's first statement raises the loss once more.
 */
void
zks_cancel_rearm(void)
{
	pthread_mutex_lock(&zks_mutex);
	if (cancel_enabled && in_statement && !cancel_out)
		arm_locked();
	pthread_mutex_unlock(&zks_mutex);
	SetLatch(MyLatch);
}
