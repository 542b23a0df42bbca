/*-------------------------------------------------------------------------
 *
 * locktable.c
 *	  The backend's zklock locks and semaphore leases: counting re-entrant
 *	  holds per scope, releasing them when the transaction, subtransaction
 *	  or session that owns them ends, and refusing to commit on a lost one.
 *
 * A lock is one EPHEMERAL_SEQUENTIAL node under the lock parent
 * <zklock.root>/<encoded resource> (a semaphore: one lease node, see
 * semaphore.c), shared by every hold of the same resource and mode in this
 * backend, whatever the scope (as for PostgreSQL's advisory locks).
 * Transaction-level holds remember the subtransaction that took them, so
 * ROLLBACK TO SAVEPOINT drops exactly those, and RELEASE SAVEPOINT hands
 * them to the parent.  When the last hold goes, the node is deleted
 * without waiting for the reply: releases run inside transaction
 * callbacks, which must neither fail nor block.
 *
 * Filling the table from a lock call is lockrequest.c's (the entries are
 * in locktable_int.h); taking the node in ZooKeeper is acquire.c's,
 * lockset.c's and semaphore.c's; refusing a commit on a lost lock is
 * precommit.c's, confirming held nodes with the ensemble for it
 * commitcheck.c's; keeping the check ahead of other extensions'
 * transaction callbacks is callorder.c's.
 *
 * src/xact/locktable.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "acquire/acquire.h"
#include "xact/callorder.h"
#include "xact/commitcheck.h"
#include "session/cursessions.h"
#include "xact/locktable.h"
#include "xact/locktable_int.h"
#include "xact/lookonly.h"
#include "printable.h"
#include "session/session.h"
#include "monitor/stats.h"
#include "zklock.h"


static HTAB *lock_table = NULL;

/* Counters for zk_status() */
static uint64 n_grants = 0;
static uint64 n_waits = 0;
static uint64 n_lost = 0;

/*
 * Entries marked lost, and how many losses the session layer had noticed
 * when the table last took them in (zkl_fold_losses): while both say
 * nothing new, a statement's start costs no scan.
 */
static int	lost_entries = 0;
static uint64 folded_losses = 0;

/*
 * The number of entries changed: zk_sessions shows it (counting entries,
 * as zk_status() does), and a session's expiry cancels a statement only
 * while there are some (session/cancel.c).
 */
static void
note_entries(void)
{
	long		n = hash_get_num_entries(lock_table);

	zkcs_set_locks_held(n);
	zks_note_holding(n);
}

const char *
zkl_scope_name(ZklScope scope)
{
	return scope == ZKL_SCOPE_SESSION ? "session" : "transaction";
}

static bool
have_locks(void)
{
	return lock_table != NULL && hash_get_num_entries(lock_table) > 0;
}

/* Walk every entry (hash_seq_search; the table exists once zkl_init ran). */
void
zkl_seq_init(HASH_SEQ_STATUS *status)
{
	hash_seq_init(status, lock_table);
}

long
zkl_entry_count(void)
{
	return lock_table != NULL ? hash_get_num_entries(lock_table) : 0;
}

/* Does any lock have a transaction-level hold? */
bool
zkl_have_xact_holds(void)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;

	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
		if (lock->xact_count > 0)
		{
			hash_seq_term(&status);
			return true;
		}
	return false;
}

static void
make_key(ZklLockKey *key, const char *resource, ZkrMode mode)
{
	memset(key, 0, sizeof(ZklLockKey));
	key->resource = resource;
	key->mode = mode;
}

static uint32
key_hash(const void *key, Size keysize)
{
	const ZklLockKey *k = (const ZklLockKey *) key;

	return hash_bytes((const unsigned char *) k->resource,
					  strlen(k->resource)) ^ (uint32) k->mode;
}

static int
key_match(const void *key1, const void *key2, Size keysize)
{
	const ZklLockKey *a = (const ZklLockKey *) key1;
	const ZklLockKey *b = (const ZklLockKey *) key2;

	if (a->mode != b->mode)
		return 1;
	return strcmp(a->resource, b->resource);
}

ZklLock *
zkl_find_lock(const char *resource, ZkrMode mode)
{
	ZklLockKey	key;

	make_key(&key, resource, mode);
	return (ZklLock *) hash_search(lock_table, &key, HASH_FIND, NULL);
}

/* ----------------------------------------------------------------
 * Holds and release
 * ----------------------------------------------------------------
 */

/*
 * Make sure add_hold cannot fail: room for a new subtransaction's hold.
 */
void
zkl_reserve_hold(ZklLock *lock, ZklScope scope)
{
	int			newcap;

	if (scope == ZKL_SCOPE_SESSION ||
		(lock->nholds > 0 &&
		 lock->xact_holds[lock->nholds - 1].subid == GetCurrentSubTransactionId()) ||
		lock->nholds < lock->holds_cap)
		return;
	newcap = Max(4, lock->holds_cap * 2);
	if (lock->xact_holds == NULL)
		lock->xact_holds = MemoryContextAlloc(TopMemoryContext,
											  newcap * sizeof(XactHold));
	else
		lock->xact_holds = repalloc(lock->xact_holds,
									newcap * sizeof(XactHold));
	lock->holds_cap = newcap;
}

void
zkl_add_hold(ZklLock *lock, ZklScope scope)
{
	zkl_reserve_hold(lock, scope);
	if (scope == ZKL_SCOPE_SESSION)
	{
		lock->session_count++;
		return;
	}
	if (lock->nholds > 0 &&
		lock->xact_holds[lock->nholds - 1].subid == GetCurrentSubTransactionId())
	{
		lock->xact_holds[lock->nholds - 1].count++;
		lock->xact_count++;
		return;
	}
	lock->xact_holds[lock->nholds].subid = GetCurrentSubTransactionId();
	lock->xact_holds[lock->nholds].count = 1;
	lock->nholds++;
	lock->xact_count++;
}

/* The entry of the other mode on the same resource, if any. */
static ZklLock *
other_mode_lock(ZklLock *lock)
{
	if (lock->key.mode == ZKR_MODE_SEMAPHORE)
		return NULL;
	return zkl_find_lock(lock->key.resource,
						 lock->key.mode == ZKR_MODE_EXCLUSIVE ?
						 ZKR_MODE_SHARED : ZKR_MODE_EXCLUSIVE);
}

/*
 * Drop the entry and its node once no hold is left.  Runs in transaction
 * callbacks: nothing here may raise ERROR or wait.
 */
void
zkl_release_if_unused(ZklLock *lock)
{
	char	   *resource;

	ZklLock    *other;

	if (lock->session_count > 0 || lock->xact_count > 0)
		return;

	/*
	 * A node shared by both modes' entries goes with the last of them: a
	 * borrower just leaves, an owner with a borrower hands the node over.
	 * (Only the entry at hand is removed: release_xact_holds scans the
	 * table, and the scan allows that alone.)
	 */
	other = lock->borrowed ? NULL : other_mode_lock(lock);
	if (other != NULL && other->borrowed)
	{
		other->borrowed = false;
		other->sweep = lock->sweep;
	}
	/*
	 * A node of a session that is gone went with it; a node found deleted
	 * or replaced is not ours to delete, and one asked back was given back
	 * when the loss was marked.  A lock lost by the clock is released like
	 * a held one: its session may have lived on (an outage of the whole
	 * ensemble), and with it the node.
	 */
	else if (!lock->borrowed &&
			 lock->session_id == zks_session_id() &&
			 (lock->lost == ZKL_LOST_NONE || lock->lost == ZKL_LOST_CLOCK))
	{
		zks_delete_async(lock->node);
		if (lock->sweep)
			zks_sweep_async(lock->parent, lock->prefix);
	}
	else if (!lock->borrowed)
		zks_unwatch_node(lock->node);	/* lost: forget its watch */
	if (lock->lost != ZKL_LOST_NONE)
		lost_entries--;
	pfree(lock->parent);
	pfree(lock->node);
	pfree(lock->prefix);
	if (lock->xact_holds)
		pfree(lock->xact_holds);
	zkst_released(lock->key.resource, lock->key.mode,
				  GetCurrentTimestamp() - lock->since);
	resource = (char *) lock->key.resource;
	hash_search(lock_table, &lock->key, HASH_REMOVE, NULL);
	pfree(resource);
	note_entries();
}

static void
release_xact_holds(void)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;

	zks_batch_begin();
	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		lock->xact_count = 0;
		lock->nholds = 0;
		zkl_release_if_unused(lock);
	}
	zks_batch_end();
}


void
zkl_mark_lost(ZklLock *lock, ZklLost why)
{
	if (lock->lost == ZKL_LOST_NONE)
	{
		zkl_record_loss(lock, why);
		n_lost++;
		lost_entries++;
		zkst_lost(lock->key.resource, lock->key.mode);

		/*
		 * Asked back while a statement ran: that statement is canceled
		 * and nothing runs under the lock any more (every statement is
		 * refused, the COMMIT fails), so it is given back now, not at the
		 * acknowledgement of a session-level loss.  (An idle holder's was
		 * given back by the session layer already; the delete then finds
		 * nothing.)  Its watch stays: it tells who asked, and when.
		 */
		if (why == ZKL_LOST_REVOKED && !lock->borrowed)
			zks_give_back(lock->node);
	}
}

/* A lock whose session ended is lost; no round trip needed to know. */
void
zkl_mark_if_session_lost(ZklLock *lock)
{
	if (lock->session_id != zks_session_id() || zks_session_expired())
		zkl_mark_lost(lock, ZKL_LOST_SESSION);
}

/*
 * What the backend knows of a lock's loss without asking the ensemble:
 * marked already, its session gone, its node's watch reported the
 * deletion or gave it back on request (session/watch.c), or the loss
 * clock ran out since the grant (session/nudge.c).
 */
static ZklLost
known_loss(ZklLock *lock)
{
	TimestampTz at;
	int			timeout_ms;
	ZksWatchState state;
	ZksRevoke	revoke;

	if (lock->lost != ZKL_LOST_NONE)
		return lock->lost;
	if (lock->session_id != zks_session_id() || zks_session_expired())
		return ZKL_LOST_SESSION;
	state = zks_watch_state(lock->node);
	/* (before the deletion: giving it back deletes it) */
	if (state != ZKS_WATCH_NONE && zks_watch_revoke(lock->node, &revoke) &&
		revoke.acted)
		return ZKL_LOST_REVOKED;
	if (state == ZKS_WATCH_DELETED)
		return ZKL_LOST_DELETED;
	if (zks_clock_losses(&at, &timeout_ms) != lock->clock_seen)
		return ZKL_LOST_CLOCK;
	return ZKL_LOST_NONE;
}

/*
 * Take in the losses the session layer noticed: mark (and count) every
 * lock known lost.  Returns how many are lost, with the one to name in
 * *first.  Costs no scan while nothing new was noticed and nothing is
 * marked.
 */
int
zkl_fold_losses(ZklLock **first)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;
	uint64		seen;
	int			n = 0;

	if (first != NULL)
		*first = NULL;
	if (!have_locks())
		return 0;
	seen = zks_loss_count();
	if (seen == folded_losses && lost_entries == 0)
		return 0;
	folded_losses = seen;
	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		ZklLost		why = known_loss(lock);

		if (why == ZKL_LOST_NONE)
			continue;
		zkl_mark_lost(lock, why);
		if (first != NULL && (*first == NULL || zkl_report_before(lock, *first)))
			*first = lock;
		n++;
	}
	return n;
}

bool
zkl_any_loss(void)
{
	return zkl_fold_losses(NULL) > 0;
}

/* Before a statement runs: ERROR 40001 if a held lock is known lost. */
void
zkl_refuse_if_lost(void)
{
	ZklLock    *first;
	int			n = zkl_fold_losses(&first);

	if (n > 0)
		zkl_lost_error(first, n - 1);
}

/*
 * Failfast.c's error context callback, on a cancel that stood for a loss:
 * give the error being raised the loss's fields.  Runs inside errfinish,
 * in ErrorContext, so it marks nothing (marking counts in the statistics):
 * it names the loss from copies, and the abort that follows marks it.
 */
void
zkl_lost_fields_now(void)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;
	ZklLock		first;
	int			n = 0;

	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		ZklLock		copy;
		ZklLost		why = known_loss(lock);

		if (why == ZKL_LOST_NONE)
			continue;
		copy = *lock;
		if (copy.lost == ZKL_LOST_NONE)
			zkl_record_loss(&copy, why);
		if (n == 0 || zkl_report_before(&copy, &first))
			first = copy;
		n++;
	}
	if (n > 0)
		(void) zkl_lost_fields(&first, n - 1);
	else
	{
		/*
		 * The lost lock was released between the cancel and this error
		 * (a column default that unlocks, say): still not the user's
		 * cancel, and still a loss.
		 */
		errcode(ERRCODE_T_R_SERIALIZATION_FAILURE);
		errmsg("a zklock lock was lost while this statement ran");
		errdetail("The lock was released before the loss was reported.");
		errhint("Roll back and run the transaction again: it takes the lock anew, and another holder may have run meanwhile.");
	}
}


/*
 * The main transaction callback.  Before COMMIT and PREPARE it runs the
 * checks unless a guard ahead of it did (callorder.c); at the end of the
 * transaction it drops the guards and releases transaction-level holds.
 */
void
zkl_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			zkl_order_pre_commit(event);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* whatever a call of this transaction was doing, it is over */
			zks_set_activity(ZKS_ACTIVITY_NONE);
			zko_xact_end();
			zkl_order_xact_end();
			if (have_locks())
			{
				/* a loss that canceled a statement counts as one */
				(void) zkl_fold_losses(NULL);
				release_xact_holds();
			}

			/*
			 * No cancel of ours may reach the next transaction; taken
			 * back after the release, so that none is armed for a lock
			 * of this transaction in between.
			 */
			zks_cancel_disarm();
			/* between transactions: a lock asked back may go at once */
			zks_xact_idle();
			break;
		default:
			break;
	}
}

static void
zkl_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;

	if (!have_locks())
		return;
	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;

	if (event == SUBXACT_EVENT_ABORT_SUB)
		(void) zkl_fold_losses(NULL);
	zks_batch_begin();
	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		int			kept = 0;

		lock->xact_count = 0;
		for (int i = 0; i < lock->nholds; i++)
		{
			XactHold	h = lock->xact_holds[i];

			if (h.subid == mySubid)
			{
				if (event == SUBXACT_EVENT_ABORT_SUB)
					continue;	/* ROLLBACK TO: these holds go */
				h.subid = parentSubid;	/* RELEASE: the parent keeps them */
			}
			if (kept > 0 && lock->xact_holds[kept - 1].subid == h.subid)
				lock->xact_holds[kept - 1].count += h.count;
			else
				lock->xact_holds[kept++] = h;
			lock->xact_count += h.count;
		}
		lock->nholds = kept;
		zkl_release_if_unused(lock);
	}
	zks_batch_end();

	/*
	 * ROLLBACK TO, or a PL/pgSQL handler about to run, while a lost lock
	 * still belongs to what goes on: the transaction can do nothing more,
	 * so its next check for interrupts raises the loss again (a lock taken
	 * inside the subtransaction went with it, and stops nothing).
	 */
	if (event == SUBXACT_EVENT_ABORT_SUB && zklock_cancel_on_loss &&
		lost_entries > 0)
		zks_cancel_rearm();
}

void
zkl_init(void)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(ZklLockKey);
	ctl.entrysize = sizeof(ZklLock);
	ctl.hash = key_hash;
	ctl.match = key_match;
	ctl.hcxt = TopMemoryContext;
	lock_table = hash_create("zklock locks", 64, &ctl,
							 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
							 HASH_CONTEXT);

	RegisterXactCallback(zkl_xact_callback, NULL);
	RegisterSubXactCallback(zkl_subxact_callback, NULL);
}

/* ----------------------------------------------------------------
 * Entries
 * ----------------------------------------------------------------
 */

/*
 * A new entry without holds.  Everything that can fail happens before the
 * entry is live.
 */
ZklLock *
zkl_new_entry(const char *resource, ZkrMode mode, const char *parent,
			  const char *node, const char *prefix, bool sweep, int64 token,
			  int64 session_id, ZkrMode node_mode, int max_holders,
			  bool borrowed)
{
	char	   *parent_copy = MemoryContextStrdup(TopMemoryContext, parent);
	char	   *node_copy = MemoryContextStrdup(TopMemoryContext, node);
	char	   *prefix_copy = MemoryContextStrdup(TopMemoryContext, prefix);
	char	   *res = MemoryContextStrdup(TopMemoryContext, resource);
	XactHold   *holds = MemoryContextAlloc(TopMemoryContext, 4 * sizeof(XactHold));
	ZklLockKey	key;
	ZklLock    *lock;
	bool		found;

	make_key(&key, res, mode);
	lock = (ZklLock *) hash_search(lock_table, &key, HASH_ENTER, &found);
	Assert(!found);
	lock->parent = parent_copy;
	lock->node = node_copy;
	lock->name = strrchr(lock->node, '/') + 1;
	lock->prefix = prefix_copy;
	lock->sweep = sweep;
	lock->token = token;
	lock->session_id = session_id;
	lock->lost = ZKL_LOST_NONE;
	{
		TimestampTz at;
		int			timeout_ms;

		lock->clock_seen = zks_clock_losses(&at, &timeout_ms);
	}
	lock->since = GetCurrentTimestamp();
	lock->session_count = 0;
	lock->xact_count = 0;
	lock->nholds = 0;
	lock->holds_cap = 4;
	lock->xact_holds = holds;
	lock->borrowed = borrowed;
	lock->node_mode = node_mode;
	lock->max_holders = max_holders;
	note_entries();

	/*
	 * Its deletion cancels the statement running under it (failfast.c).
	 * Only up to the count from which the commit check asks with multi
	 * requests: below it, the watch saves that check an exists, and costs
	 * nothing in all; beyond, one read per lock would be pure cost (a
	 * 1,000-lock array call would send a quarter more requests).  The
	 * locks beyond are found lost by their session's loss, the clock, or
	 * at COMMIT.
	 */
	if (!borrowed && zklock_cancel_on_loss &&
		hash_get_num_entries(lock_table) <= ZKC_MULTI_CHECK_MIN)
		zks_watch_held(node, zka_owner_line());
	return lock;
}

/*
 * A new entry for resource in mode that shares the node of entry owner
 * (see ZklLock.borrowed).  The owner sweeps its strays, or hands them
 * over with the node.
 */
ZklLock *
zkl_borrow_node(ZklLock *owner, const char *resource, ZkrMode mode)
{
	return zkl_new_entry(resource, mode, owner->parent, owner->node,
						 owner->prefix, false, owner->token,
						 owner->session_id, owner->node_mode, 0, true);
}

bool
zkl_release_session(const char *resource, ZkrMode mode)
{
	ZklLock    *lock = zkl_find_lock(resource, mode);

	if (lock == NULL || lock->session_count == 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("you don't own a session-level %s zklock on \"%s\"",
						zkr_mode_name(mode), resource),
				 (lock != NULL) ?
				 errdetail("It is held at transaction level, which is released only when the transaction ends.") : 0));
		return false;
	}
	zkl_mark_if_session_lost(lock);
	if (lock->lost != ZKL_LOST_NONE)
		lock->session_count = 0;	/* acknowledged: every level is gone */
	else
		lock->session_count--;
	zkl_release_if_unused(lock);
	return true;
}

bool
zkl_release_session_many(const char *const *resources, int n, ZkrMode mode)
{
	volatile bool all = true;

	zks_batch_begin();
	PG_TRY();
	{
		for (int i = 0; i < n; i++)
			if (!zkl_release_session(resources[i], mode))
				all = false;
	}
	PG_FINALLY();
	{
		zks_batch_end();
	}
	PG_END_TRY();
	return all;
}

void
zkl_release_all_session(void)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;

	if (!have_locks())
		return;
	zks_batch_begin();
	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		lock->session_count = 0;
		zkl_release_if_unused(lock);
	}
	zks_batch_end();
}

ZklLockInfo *
zkl_snapshot(int *n)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;
	ZklLockInfo *rows;
	int			k = 0;
	ZksRevoke	revoke;

	/* what is gone shows as lost: ask the ensemble if it is at hand */
	if (have_locks())
		(void) zkl_confirm_held_nodes(
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										zklock_connect_timeout), false,
			NULL, NULL);

	rows = palloc(sizeof(ZklLockInfo) * (2 * hash_get_num_entries(lock_table) + 1));
	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		for (int s = 0; s < 2; s++)
		{
			ZklScope	scope = s == 0 ? ZKL_SCOPE_TRANSACTION : ZKL_SCOPE_SESSION;
			int			count = s == 0 ? lock->xact_count : lock->session_count;

			if (count == 0)
				continue;
			rows[k].resource = pstrdup(lock->key.resource);
			rows[k].mode = lock->key.mode;
			rows[k].scope = scope;
			rows[k].count = count;
			rows[k].node = pstrdup(lock->node);
			rows[k].token = lock->token;
			rows[k].lost = (lock->lost != ZKL_LOST_NONE);
			rows[k].revoked = (lock->lost == ZKL_LOST_REVOKED);
			rows[k].max_holders = lock->max_holders;
			rows[k].since = lock->since;
			rows[k].revoke_at = 0;
			rows[k].revoke_by = NULL;
			if (zks_watch_revoke(lock->node, &revoke) && revoke.requested)
			{
				char		by[ZKS_REVOKE_BY_MAX];

				zk_copy_printable(by, sizeof(by), revoke.by, strlen(revoke.by));
				rows[k].revoke_at = revoke.at;
				rows[k].revoke_by = pstrdup(by);
			}
			k++;
		}
	}
	*n = k;
	return rows;
}

int
zkl_held_nodes(const char *resource, char ***nodes)
{
	static const ZkrMode modes[] = {ZKR_MODE_EXCLUSIVE, ZKR_MODE_SHARED,
	ZKR_MODE_SEMAPHORE};
	int			n = 0;

	*nodes = palloc(sizeof(char *) * lengthof(modes));
	for (int i = 0; i < lengthof(modes); i++)
	{
		ZklLock    *lock = have_locks() ? zkl_find_lock(resource, modes[i]) : NULL;

		/* (one given back on request is asked about too) */
		if (lock != NULL)
			(*nodes)[n++] = pstrdup(lock->node);
	}
	return n;
}

bool
zkl_have_locks(void)
{
	return have_locks();
}

void
zkl_count_grant(bool waited)
{
	n_grants++;
	if (waited)
		n_waits++;
}

void
zkl_counters(ZklCounters *c)
{
	c->locks_held = have_locks() ? hash_get_num_entries(lock_table) : 0;
	c->grants = n_grants;
	c->waits = n_waits;
	c->lost = n_lost;
}
