/*-------------------------------------------------------------------------
 *
 * lockrequest.c
 *	  What a lock call asks of the lock table: one more hold of a lock the
 *	  backend has, the other mode's node lent at once, or a new node taken
 *	  in ZooKeeper -- for one resource (acquire.c, semaphore.c) or for a
 *	  set of them, all or none (lockset.c) -- and its entry.
 *
 * src/xact/lockrequest.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"
#include "utils/memutils.h"

#include "acquire/acquire.h"
#include "xact/callorder.h"
#include "acquire/lockset.h"
#include "xact/locktable.h"
#include "xact/locktable_int.h"
#include "acquire/semaphore.h"
#include "session/session.h"
#include "monitor/stats.h"
#include "monitor/waitlog.h"
#include "zklock.h"

/* The entry of the other mode whose node grants this one at once, if any. */
static ZklLock *
lender_for(const char *resource, ZkrMode mode)
{
	ZklLock    *other;

	if (mode == ZKR_MODE_SEMAPHORE)
		return NULL;
	other = zkl_find_lock(resource, mode == ZKR_MODE_EXCLUSIVE ?
						  ZKR_MODE_SHARED : ZKR_MODE_EXCLUSIVE);
	if (other == NULL)
		return NULL;
	zkl_mark_if_session_lost(other);
	if (other->lost == ZKL_LOST_NONE && !other->borrowed &&
		other->node_mode == ZKR_MODE_EXCLUSIVE)
		return other;
	return NULL;
}

/*
 * Our node of the other mode, which the recipe must not count against a
 * new node of ours (zka_run_queue: own_other).
 */
static void
set_own_other(ZkaAttempt *a, const char *resource, ZkrMode mode)
{
	ZklLock    *other;

	if (mode == ZKR_MODE_SEMAPHORE)
		return;
	other = zkl_find_lock(resource, mode == ZKR_MODE_EXCLUSIVE ?
						  ZKR_MODE_SHARED : ZKR_MODE_EXCLUSIVE);
	if (other != NULL && other->session_id == zks_session_id() &&
		other->lost == ZKL_LOST_NONE)
	{
		a->own_other = other->name;
		if (other->sweep)
			a->own_other_prefix = other->prefix;
	}
}

static void
check_protocol_mode(ZkrMode mode)
{
	if (mode != ZKR_MODE_SEMAPHORE &&
		!zkr_protocol_has_mode((ZkrProtocol) zklock_protocol, mode))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock.protocol \"%s\" has no shared locks",
						GetConfigOption("zklock.protocol", false, false)),
				 errdetail("Curator's InterProcessMutex, whose node names this protocol writes, only takes exclusive locks."),
				 errhint("Use zklock.protocol \"curator-rw\" or \"kazoo\" for shared locks.")));
}

/*
 * A session-level hold is refused while zklock.session_locks is off, before
 * anything is asked of the lock table or ZooKeeper: behind a pooler that
 * gives this backend to another client after each transaction, the hold
 * would outlive the client that took it and pass to whoever comes next.
 * Transaction-level holds end with the transaction, inside one client's
 * turn.  Releasing is never refused, so nothing can get stuck.
 */
static void
check_scope_allowed(ZklScope scope)
{
	if (scope == ZKL_SCOPE_SESSION && !zklock_session_locks)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("session-level zklock locks are disabled"),
				 errdetail("\"zklock.session_locks\" is off: a transaction-pooling connection pooler may hand this server connection to other clients, and a session-level lock would pass to them."),
				 errhint("Use the transaction-level functions (zk_lock_exclusive and friends), which end with the transaction.")));
}

/*
 * A call that ended without its lock (sqlerrcode: its ERROR): the wait
 * log's last line and the statistics.  Runs in PG_CATCH, before the
 * error goes on; neither raises ERROR.
 */
static void
call_failed(const char *resource, ZkrMode mode, int sqlerrcode)
{
	zkwl_call_end(false, sqlerrcode);
	zkst_failed(resource, mode, zkst_failure_of(sqlerrcode));
}

/* An entry already held in this mode: one more hold, no request. */
static void
check_reentry(ZklLock *lock, ZkrMode mode, int max_holders)
{
	zkl_mark_if_session_lost(lock);
	if (lock->lost != ZKL_LOST_NONE)
		zkl_lost_error(lock, 0);
	if (mode == ZKR_MODE_SEMAPHORE && lock->max_holders != max_holders)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock semaphore \"%s\" is already held with max_holders %d",
						lock->key.resource, lock->max_holders),
				 errdetail("This call asked for it with max_holders %d.",
						   max_holders),
				 errhint("Every holder of a semaphore must give the same max_holders.")));
}

bool
zkl_acquire(const char *resource, const char *relpath, ZkrMode mode,
			int max_holders, ZklScope scope, int64 timeout_ms, bool try_only,
			int64 *token)
{
	ZklLock    *lock = zkl_find_lock(resource, mode);
	ZklLock    *lender;
	ZkaAttempt	a;
	volatile bool granted;

	check_scope_allowed(scope);
	zkwl_call_begin();

	/* the wait events of this call (reset at the transaction's end) */
	zks_set_activity(max_holders > 0 ? ZKS_ACTIVITY_SEMAPHORE :
					 ZKS_ACTIVITY_LOCK);

	/* Re-entrant: the same node serves every hold of resource and mode. */
	if (lock != NULL)
	{
		check_reentry(lock, mode, max_holders);
		zkl_add_hold(lock, scope);
		*token = lock->token;
		zkl_callbacks_first();
		return true;
	}

	/*
	 * An exclusive node of ours grants both modes: a shared request (or an
	 * exclusive one, once the node has passed to a shared entry) is
	 * granted on it at once.  A node of its own would sort behind every
	 * foreign waiter queued meanwhile, all of them waiting for our node.
	 */
	lender = lender_for(resource, mode);
	if (lender != NULL)
	{
		lock = zkl_borrow_node(lender, resource, mode);
		zkl_add_hold(lock, scope);	/* cannot fail: room for 4 */
		zkl_count_grant(false);
		zkst_acquired(resource, mode, false, 0);
		*token = lock->token;
		zkl_callbacks_first();
		return true;
	}

	check_protocol_mode(mode);
	zka_begin(&a, resource, mode, try_only, timeout_ms);
	zka_connect(&a, !zkl_have_locks());
	if (mode != ZKR_MODE_SEMAPHORE)
	{
		char		uuid[ZKR_UUID_LEN + 1];
		char		prefix[ZKR_MAX_PREFIX_BYTES];

		zka_new_uuid(uuid);
		if (zkr_protocol_prefix((ZkrProtocol) zklock_protocol, mode, uuid,
								prefix, sizeof(prefix)) == 0)
			elog(ERROR, "zklock node prefix does not fit");
		zka_set_node(&a, psprintf("%s/%s", zklock_root, relpath), prefix);
	}
	set_own_other(&a, resource, mode);

	lock = NULL;
	PG_TRY();
	{
		if (mode == ZKR_MODE_SEMAPHORE)
			granted = zksem_acquire(&a, relpath, max_holders);
		else
			granted = zka_run_queue(&a);
		if (granted)
		{
			lock = zkl_new_entry(resource, mode, a.parent, a.node, a.prefix,
								 a.uncertain, a.token, zks_session_id(), mode,
								 max_holders, false);
			zkl_add_hold(lock, scope);	/* cannot fail: room for 4 */
		}
	}
	PG_CATCH();
	{
		call_failed(resource, mode, geterrcode());
		zka_abandon(&a);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!granted)
	{
		zka_abandon(&a);
		if (!try_only)
		{
			call_failed(resource, mode, ERRCODE_LOCK_NOT_AVAILABLE);
			zka_timeout_error(&a);	/* timeout of zero: 55P03, not false */
		}
		zkwl_call_end(false, 0);
		zkst_try_failed(resource, mode);
		return false;
	}

	/* the node now belongs to the entry */
	zka_finish(&a);
	zkl_count_grant(a.waited);
	{
		int64		waited_us = zkwl_waited_us();

		zkwl_call_end(true, 0);
		zkst_acquired(resource, mode, a.waited, waited_us);
	}

	*token = lock->token;
	zkl_callbacks_first();
	return true;
}

/* One resource of a zkl_acquire_many call, in the input's order. */
typedef struct ManyItem
{
	const char *resource;
	const char *relpath;
	int			index;
	int			group;			/* its distinct resource */
} ManyItem;

/* How a distinct resource of the call is had. */
typedef enum ManyHow
{
	MANY_HELD,					/* an entry of ours in this mode */
	MANY_BORROW,				/* on our exclusive node */
	MANY_NEW					/* a node of its own: an attempt */
} ManyHow;

static int
compare_items(const void *x, const void *y)
{
	const ManyItem *a = (const ManyItem *) x;
	const ManyItem *b = (const ManyItem *) y;
	int			c = strcmp(a->relpath, b->relpath);

	if (c != 0)
		return c;
	return a->index < b->index ? -1 : a->index > b->index;
}

/*
 * Drop what a failed zkl_acquire_many made: its entries (deleting their
 * nodes) and the nodes its attempts still own.  Never raises ERROR.
 */
static void
undo_many(ZklLock **made, int nmade, ZkaAttempt *atts, int natts)
{
	zks_batch_begin();
	for (int i = 0; i < nmade; i++)
		zkl_release_if_unused(made[i]);
	for (int k = 0; k < natts; k++)
		zka_abandon(&atts[k]);
	zks_batch_end();
}

bool
zkl_acquire_many(const char *const *resources, const char *const *relpaths,
				 int n, ZkrMode mode, ZklScope scope, int64 timeout_ms,
				 bool try_only, int64 *tokens)
{
	ManyItem   *items = palloc(sizeof(ManyItem) * Max(n, 1));
	int		   *first_item = palloc(sizeof(int) * Max(n, 1));
	ManyHow    *how = palloc(sizeof(ManyHow) * Max(n, 1));
	ZklLock   **locks = palloc0(sizeof(ZklLock *) * Max(n, 1));
	ZklLock   **made = palloc(sizeof(ZklLock *) * Max(n, 1));
	int		   *att_group = palloc(sizeof(int) * Max(n, 1));
	ZkaAttempt *atts = NULL;
	ZkaAttempt **todo = NULL;
	ZkaAttempt *blocked = NULL;
	int			ngroups = 0;
	int			natts = 0;
	volatile int nmade = 0;
	volatile bool granted = true;

	/* an empty array too: the call is refused, not its elements */
	check_scope_allowed(scope);
	zkwl_call_begin();

	zks_set_activity(ZKS_ACTIVITY_LOCK);	/* its wait events */

	if (n == 0)
		return true;

	/* one entry per distinct resource (the encoding is one to one) */
	for (int i = 0; i < n; i++)
	{
		items[i].resource = resources[i];
		items[i].relpath = relpaths[i];
		items[i].index = i;
	}
	qsort(items, n, sizeof(ManyItem), compare_items);
	for (int i = 0; i < n; i++)
	{
		if (i == 0 || strcmp(items[i].relpath, items[i - 1].relpath) != 0)
			first_item[ngroups++] = i;
		items[i].group = ngroups - 1;
	}

	for (int g = 0; g < ngroups; g++)
	{
		const char *res = items[first_item[g]].resource;

		locks[g] = zkl_find_lock(res, mode);
		if (locks[g] != NULL)
		{
			check_reentry(locks[g], mode, 0);
			how[g] = MANY_HELD;
		}
		else if ((locks[g] = lender_for(res, mode)) != NULL)
			how[g] = MANY_BORROW;
		else
		{
			how[g] = MANY_NEW;
			att_group[natts++] = g;
		}
	}

	if (natts > 0)
	{
		check_protocol_mode(mode);
		atts = palloc0(sizeof(ZkaAttempt) * natts);
		todo = palloc(sizeof(ZkaAttempt *) * natts);
		for (int k = 0; k < natts; k++)
		{
			const ManyItem *it = &items[first_item[att_group[k]]];
			ZkaAttempt *a = &atts[k];

			zka_begin(a, it->resource, mode, try_only, timeout_ms);
			if (k == 0)
				zka_connect(a, !zkl_have_locks());
			else
			{
				/* one deadline for the whole call */
				a->deadline = atts[0].deadline;
				a->deadline_ms = atts[0].deadline_ms;
				a->by_lock_timeout = atts[0].by_lock_timeout;
			}
			/* the prefix is lockset.c's, fresh for every round */
			zka_set_node(a, psprintf("%s/%s", zklock_root, it->relpath), "");
			set_own_other(a, it->resource, mode);
			todo[k] = a;
		}
	}

	PG_TRY();
	{
		if (natts > 0)
			granted = zkm_acquire_set(todo, natts, &blocked);
		if (granted)
		{
			for (int k = 0; k < natts; k++)
			{
				ZkaAttempt *a = &atts[k];

				locks[att_group[k]] =
					zkl_new_entry(a->resource, mode, a->parent, a->node,
								  a->prefix, a->uncertain, a->token,
								  zks_session_id(), mode, 0, false);
				made[nmade++] = locks[att_group[k]];
				/* the node (and its strays) are the entry's now */
				a->node = NULL;
				a->uncertain = false;
			}
			for (int g = 0; g < ngroups; g++)
				if (how[g] == MANY_BORROW)
				{
					locks[g] = zkl_borrow_node(locks[g],
											   items[first_item[g]].resource,
											   mode);
					made[nmade++] = locks[g];
				}
			for (int g = 0; g < ngroups; g++)
				zkl_reserve_hold(locks[g], scope);
		}
	}
	PG_CATCH();
	{
		/*
		 * Charged to the lock waited for, if any, else the first new one,
		 * else the call's first name.  With every name already held or
		 * borrowed there is no attempt (atts is NULL), and what can fail
		 * here then is only an allocation (a hold's slot, a borrowed
		 * entry): zklock 1.5 read atts[0] on that path, a crash of the
		 * backend, and so a restart of the cluster, on out-of-memory.
		 */
		const char *culprit = zkwl_waited_for();

		if (culprit == NULL)
			culprit = natts > 0 ? atts[0].resource : resources[0];
		call_failed(culprit, mode, geterrcode());
		undo_many(made, nmade, atts, natts);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!granted)
	{
		undo_many(made, nmade, atts, natts);
		if (!try_only)
		{
			call_failed(blocked->resource, mode, ERRCODE_LOCK_NOT_AVAILABLE);
			zka_timeout_error(blocked);	/* timeout of zero: 55P03 */
		}
		zkwl_call_end(false, 0);
		/* charged to the name that was not free, as a timeout would be */
		zkst_try_failed(blocked->resource, mode);
		return false;
	}

	{
		/* each lock that waited is charged the call's whole wait */
		int64		waited_us = zkwl_waited_us();

		zkwl_call_end(true, 0);
		for (int k = 0; k < natts; k++)
		{
			zka_finish(&atts[k]);
			zkl_count_grant(atts[k].waited);
			zkst_acquired(atts[k].resource, mode, atts[k].waited,
						  atts[k].waited ? waited_us : 0);
		}
	}
	for (int g = 0; g < ngroups; g++)
		if (how[g] == MANY_BORROW)
		{
			zkl_count_grant(false);
			zkst_acquired(items[first_item[g]].resource, mode, false, 0);
		}

	/* nothing below can fail: every hold has its room */
	for (int i = 0; i < n; i++)
	{
		ZklLock    *lock = locks[items[i].group];

		zkl_add_hold(lock, scope);
		tokens[items[i].index] = lock->token;
	}
	zkl_callbacks_first();
	return true;
}

