/*-------------------------------------------------------------------------
 *
 * callorder.c
 *	  Keeping zklock's pre-commit check ahead of every other transaction
 *	  callback that can make work durable elsewhere.
 *
 * PostgreSQL calls transaction callbacks most recently registered first
 * (RegisterXactCallback prepends to one list), and another extension may
 * register its callback at any time: postgres_fdw does at the first remote
 * connection of the backend, and commits its remote transactions in it at
 * PRE_COMMIT.  If that runs before zklock's check, a lost lock fails only
 * the local half of the commit; the remote half is already committed.
 *
 * zklock has two ways to get in front again:
 *
 * Moving: unregister its main callback and register it again, which makes
 * it the head.  That frees the old list item, so it is done only where no
 * walk of the list (CallXactCallbacks) can be under way: the walk holds a
 * pointer into the list, and depending on the release it either fetches
 * the next item before calling one (then freeing that next item makes it
 * read freed memory) or after (then freeing the item it is in makes it
 * read freed memory, and unlinking the next one makes it skip it).
 *
 * Guards: register one more callback, with an argument of its own, and
 * free nothing.  Registering only prepends: an item that a walk under way
 * has not reached yet is unaffected, and the new head is not visited by
 * that walk at all, whichever way the release walks.  So a guard can be
 * added at any moment, during a walk too.
 *
 * Both happen after each statement's run and its end (ExecutorRun,
 * ExecutorEnd, and each utility statement), at each lock call and before
 * an explicit COMMIT or PREPARE TRANSACTION, while the backend holds a
 * lock.  A client's statement runs
 * in a portal (ActivePortal is set), and the commit of its transaction
 * runs after the portal is done, with ActivePortal unset: inside a portal
 * zklock moves, outside one it adds a guard.  The case of issue 30:
 * CommitTransaction fires deferred triggers (AfterTriggerFireDeferred,
 * PreCommit_Portals) right before it calls the PRE_COMMIT callbacks, so a
 * deferred trigger that is the backend's first use of postgres_fdw
 * registers postgres_fdw's callback during the commit; the guard added at
 * the end of the trigger's statement lands in front of it and runs first.
 * (A procedure's own COMMIT runs inside the CALL's portal, so there zklock
 * moves; the deferred triggers still fire before the walk.)
 *
 * A guard added during a walk (another extension's PRE_COMMIT callback
 * runs a query) is harmless: that walk does not visit it, the check is
 * done by whichever zklock callback comes first, and the guard goes at
 * the end of the transaction like the others.
 *
 * Whichever zklock callback runs first at PRE_COMMIT or PRE_PREPARE does
 * the check; the others see it done for this commit and do nothing.
 *
 * A procedure's COMMIT (or ROLLBACK) ends its transaction inside the
 * CALL's portal: ActivePortal is set during that walk.  If a callback
 * behind zklock's ran a statement there (another extension's PRE_COMMIT
 * callback using SPI), zklock's executor hooks would move its callback
 * mid-walk and free the list item the walk is about to read.  So once a
 * zklock callback has run at this PRE_COMMIT or PRE_PREPARE (the check is
 * marked done), zklock only adds guards until the transaction ends.  A
 * walk that has not reached a zklock callback yet means a callback ahead
 * of zklock's runs: one registered after zklock last came first with no
 * statement or function begun since, which the paragraph "What stays out
 * of reach" below already names; zklock's order is lost to it either way.
 * Deferred triggers fire before the walk, so their statements still move.
 *
 * No guard outlives its transaction.  Every move drops all guards first
 * (they are redundant once the main callback is the head), so every guard
 * alive was registered after the main callback's latest registration and
 * sits before it in the list.  At COMMIT, ABORT or PREPARE the main
 * callback drops them: a walk that has reached the main callback has
 * passed them, and freeing items a walk has passed is safe however it
 * walks.  (A guard never unregisters itself: some releases read an item's
 * next pointer after calling it.)  Guards are added only while the
 * transaction is in progress (IsTransactionState), never during the walks
 * that end it, nor while a failed subtransaction or transaction is being
 * cleaned up; a check that fails with ERROR leads to the ABORT walk, which
 * drops them the same way.
 *
 * A guard is added only if something began since zklock last came first
 * (moved or added a guard): a statement (ExecutorStart, a utility
 * statement) or a function prepared for execution (the function-execute
 * hook, which also sees a fast-path call).  Code that registers a callback
 * runs inside one of those.  So a top-level SELECT, whose executor ends
 * outside its portal (when the portal is dropped), adds none: zklock moved
 * at the end of its run, inside the portal, and nothing began since.  A
 * long transaction of such statements under a lock keeps its memory flat
 * (1.5 added a guard for each: 6 MB over 100,000 statements).
 *
 * The cost: one small list item per statement that begins and ends
 * outside a portal while a lock is held (a deferred trigger's statements
 * at COMMIT), freed at the end of the transaction; each is found at once
 * when dropped, newest first, near the head of the list.
 *
 * What stays out of reach: a callback registered with no statement ending
 * after it (by C code called directly, not through the executor, or by an
 * executor's end itself, such as a foreign-data wrapper's End callback
 * with no statement or function begun since its run) and one
 * registered by a query that another extension's PRE_COMMIT callback runs
 * (that walk does not call it at PRE_COMMIT at all); and a move made by a
 * lock call or a statement inside a portal that another extension's
 * commit callback runs (SPI cursors set ActivePortal) while PostgreSQL
 * walks the list.  None of PostgreSQL's own extensions does these.
 *
 * src/xact/callorder.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "tcop/pquery.h"
#include "utils/memutils.h"

#include "xact/callorder.h"
#include "xact/locktable.h"
#include "xact/locktable_int.h"

/* the guards alive, oldest first: each one's argument */
static uintptr_t *guards = NULL;
static int	nguards = 0;
static int	guards_cap = 0;
static uintptr_t last_guard_id = 0;

/* the check has run in this commit or prepare */
static bool checked = false;

/*
 * Statements and function calls begun in this backend, and their number
 * when zklock last came first: equal, nothing can have registered a
 * callback in front of it since.
 */
static uint64 activity = 0;
static uint64 activity_at_front = PG_UINT64_MAX;

static void
guard_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PRE_PREPARE)
		zkl_order_pre_commit(event);
}

static void
add_guard(void)
{
	/* room first: a failed allocation leaves nothing half registered */
	if (nguards == guards_cap)
	{
		int			newcap = Max(16, guards_cap * 2);

		if (guards == NULL)
			guards = MemoryContextAlloc(TopMemoryContext,
										newcap * sizeof(uintptr_t));
		else
			guards = repalloc(guards, newcap * sizeof(uintptr_t));
		guards_cap = newcap;
	}
	RegisterXactCallback(guard_callback, (void *) (last_guard_id + 1));
	guards[nguards++] = ++last_guard_id;
}

/*
 * Unregister every guard, newest first: each is then the first guard from
 * the head, behind only what other extensions registered after it.  An
 * array grown by a long commit (a deferred trigger fired for many rows)
 * is not kept for the rest of the session.
 */
static void
drop_guards(void)
{
	while (nguards > 0)
		UnregisterXactCallback(guard_callback, (void *) guards[--nguards]);
	if (guards_cap > 64)
	{
		pfree(guards);
		guards = NULL;
		guards_cap = 0;
	}
}

void
zkl_activity(void)
{
	activity++;
}

void
zkl_callbacks_first(void)
{
	if (!zkl_have_locks())
		return;
	/*
	 * Never move once a zklock callback has run at this PRE_COMMIT (or
	 * PRE_PREPARE): a walk is under way then, even inside a portal (see
	 * "A procedure's COMMIT" above).
	 */
	if (ActivePortal != NULL && !checked)
	{
		drop_guards();
		UnregisterXactCallback(zkl_xact_callback, NULL);
		RegisterXactCallback(zkl_xact_callback, NULL);
		activity_at_front = activity;
	}
	else if (IsTransactionState() && activity != activity_at_front)
	{
		add_guard();
		activity_at_front = activity;
	}
}

void
zkl_order_pre_commit(XactEvent event)
{
	if (checked)
		return;
	/* set first: a failed check aborts, and the ABORT event resets it */
	checked = true;
	zkl_pre_commit_checks(event);
}

void
zkl_order_xact_end(void)
{
	checked = false;
	drop_guards();
}
