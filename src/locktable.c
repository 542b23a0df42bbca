/*-------------------------------------------------------------------------
 *
 * locktable.c
 *	  The backend's zklock locks: taking one by ZooKeeper's lock recipe,
 *	  counting re-entrant holds per scope, and releasing them when the
 *	  transaction, subtransaction or session that owns them ends.
 *
 * A lock is one EPHEMERAL_SEQUENTIAL node under the lock parent
 * <zklock.root>/<encoded resource>, shared by every hold of the same
 * resource and mode in this backend, whatever the scope (as for
 * PostgreSQL's advisory locks).  Transaction-level holds remember the
 * subtransaction that took them, so ROLLBACK TO SAVEPOINT drops exactly
 * those, and RELEASE SAVEPOINT hands them to the parent.  When the last
 * hold goes, the node is deleted without waiting for the reply: releases
 * run inside transaction callbacks, which must neither fail nor block.
 *
 * Taking a lock sends the create and the children listing back to back
 * (ZooKeeper answers a session's requests in order, so the listing already
 * contains the new node): one round trip when the lock is free.  A waiter
 * watches only the contender the recipe names (recipe.c) and lists the
 * parent again after every notification.  Whatever ends a wait without
 * the lock -- try, timeout, cancel, any ERROR -- deletes the node it
 * created, including one whose create completes only later (session.c).
 *
 * src/locktable.c
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

#include "deadlock.h"
#include "locktable.h"
#include "session.h"
#include "zklock.h"

/*
 * The key points at the resource name: in an entry, at a copy in
 * TopMemoryContext that the entry owns; in a lookup, at the caller's
 * string.  (A fixed array for the longest name would cost half a kilobyte
 * per held lock.)
 */
typedef struct ZklLockKey
{
	const char *resource;
	ZkrMode		mode;
} ZklLockKey;

/* Why a held lock is no longer ours. */
typedef enum ZklLost
{
	ZKL_LOST_NONE = 0,
	ZKL_LOST_SESSION,			/* the session that held the node ended */
	ZKL_LOST_DELETED			/* the node was deleted (or replaced) */
} ZklLost;

/*
 * Transaction-level holds taken in one subtransaction: a count, so that a
 * re-entrant call in a loop costs no memory.
 */
typedef struct XactHold
{
	SubTransactionId subid;
	int			count;
} XactHold;

typedef struct ZklLock
{
	ZklLockKey	key;			/* hash key: must be first */
	char	   *parent;			/* lock parent path */
	char	   *node;			/* full path of our node */
	const char *name;			/* last component of node */
	char	   *prefix;			/* the "_c_<uuid>-..." prefix of our node */
	bool		sweep;			/* a create's reply was lost: at release,
								 * also delete any stray node with prefix */
	int64		token;			/* czxid of the node */
	int64		session_id;		/* session the node belongs to */
	ZklLost		lost;
	TimestampTz since;
	int			session_count;
	int			xact_count;		/* sum of the counts in xact_holds */
	int			nholds;			/* entries in xact_holds ... */
	int			holds_cap;		/* ... and room for them */
	XactHold   *xact_holds;		/* per subtransaction, oldest first */

	/*
	 * A shared lock asked while this backend holds the exclusive one is
	 * granted on the exclusive node at once (a node of its own would sort
	 * behind foreign waiters that wait for our exclusive node: a deadlock).
	 * Its entry then borrows the exclusive entry's node; when the exclusive
	 * holds go first, the node is handed over and stays until the last
	 * shared hold goes.  node_mode is the mode the node was created for.
	 */
	bool		borrowed;		/* node belongs to the other mode's entry */
	ZkrMode		node_mode;
} ZklLock;

/* One acquisition in progress; everything PG_CATCH must undo. */
typedef struct Attempt
{
	const char *resource;
	ZkrMode		mode;
	bool		try_only;
	char	   *parent;
	char	   *create_path;	/* parent/prefix: ZooKeeper appends digits */
	char		prefix[ZKR_MAX_PREFIX_BYTES];
	char	   *data;			/* the node's data: its owner */
	const char *own_other;		/* our node for the other mode, if any */
	const char *own_other_prefix;	/* its prefix, if it may have strays */
	TimestampTz deadline;		/* 0: none */
	int64		deadline_ms;	/* the limit that set the deadline */
	bool		by_lock_timeout;
	ZksRequest *creq;			/* create in flight */
	ZksRequest *lreq;			/* listing in flight */
	ZksRequest *ereq;			/* exists (watch) in flight */
	List	   *preqs;			/* creates of the lock parent and ancestors */
	List	   *ppaths;			/* ... and their paths */
	char	   *node;			/* our node, once known */
	const char *name;
	int64		token;
	bool		uncertain;		/* a create's reply was lost */
	bool		waited;			/* had to wait for another contender */
	ZkdWait		dl;				/* deadlock detection while waiting */
} Attempt;

static HTAB *lock_table = NULL;

/* Counters for zk_status() */
static uint64 n_grants = 0;
static uint64 n_waits = 0;
static uint64 n_lost = 0;

static void zkl_xact_callback(XactEvent event, void *arg);

/* Longest timeout taken as such (100 years); beyond it, none. */
#define MAX_TIMEOUT_MS (INT64CONST(100) * 366 * 24 * 3600 * 1000)

/* How often a create is retried when its parent keeps vanishing. */
#define MAX_CREATE_TRIES 10

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

static ZklLock *
find_lock(const char *resource, ZkrMode mode)
{
	ZklLockKey	key;

	make_key(&key, resource, mode);
	return (ZklLock *) hash_search(lock_table, &key, HASH_FIND, NULL);
}

/* ----------------------------------------------------------------
 * Holds and release
 * ----------------------------------------------------------------
 */

static void
add_hold(ZklLock *lock, ZklScope scope)
{
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
	if (lock->nholds == lock->holds_cap)
	{
		int			newcap = Max(4, lock->holds_cap * 2);

		if (lock->xact_holds == NULL)
			lock->xact_holds = MemoryContextAlloc(TopMemoryContext,
												  newcap * sizeof(XactHold));
		else
			lock->xact_holds = repalloc(lock->xact_holds,
										newcap * sizeof(XactHold));
		lock->holds_cap = newcap;
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
	return find_lock(lock->key.resource,
					 lock->key.mode == ZKR_MODE_EXCLUSIVE ?
					 ZKR_MODE_SHARED : ZKR_MODE_EXCLUSIVE);
}

/*
 * Drop the entry and its node once no hold is left.  Runs in transaction
 * callbacks: nothing here may raise ERROR or wait.
 */
static void
release_if_unused(ZklLock *lock)
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
	 * or replaced is not ours to delete.
	 */
	else if (!lock->borrowed &&
			 lock->session_id == zks_session_id() && lock->lost == ZKL_LOST_NONE)
	{
		zks_delete_async(lock->node);
		if (lock->sweep)
			zks_sweep_async(lock->parent, lock->prefix);
	}
	pfree(lock->parent);
	pfree(lock->node);
	pfree(lock->prefix);
	if (lock->xact_holds)
		pfree(lock->xact_holds);
	resource = (char *) lock->key.resource;
	hash_search(lock_table, &lock->key, HASH_REMOVE, NULL);
	pfree(resource);
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
		release_if_unused(lock);
	}
	zks_batch_end();
}


static void
mark_lost(ZklLock *lock, ZklLost why)
{
	if (lock->lost == ZKL_LOST_NONE)
	{
		lock->lost = why;
		n_lost++;
	}
}

/* A lock whose session ended is lost; no round trip needed to know. */
static void
mark_if_session_lost(ZklLock *lock)
{
	if (lock->session_id != zks_session_id() || zks_session_expired())
		mark_lost(lock, ZKL_LOST_SESSION);
}

typedef struct NodeCheck
{
	ZklLock    *lock;
	ZksRequest *req;
	bool		done;
} NodeCheck;

typedef struct CheckRound
{
	NodeCheck  *checks;
	int			n;
	ZksRequest **multis;		/* check_by_multi's requests */
	int			nmultis;
	ZksRequest *sync;			/* the sync in front of the exists */
} CheckRound;

/*
 * From this many locks on, the pre-commit check asks with multi requests
 * of "check" operations (up to 1,000 nodes each) instead of one exists per
 * node.  A multi is a write, answered by the leader after its log is
 * written, so for a few locks the exists are cheaper.
 */
#define MULTI_CHECK_MIN 16

static void
end_round(CheckRound *r)
{
	for (int i = 0; i < r->n; i++)
	{
		zks_done(r->checks[i].req);
		r->checks[i].req = NULL;
	}
	for (int i = 0; i < r->nmultis; i++)
		zks_done(r->multis[i]);
	r->nmultis = 0;
	zks_done(r->sync);
	r->sync = NULL;
}

/*
 * Confirm the unconfirmed nodes with multi "check" requests.  A multi is
 * all or nothing, so the nodes of one that failed stay unconfirmed: the
 * exists that follow tell which is gone and why.  Returns ZKS_TIMEDOUT,
 * ZKS_SESSION_EXPIRED or ZKS_CONNECTION_LOSS if any request ended so,
 * else ZKS_OK.
 */
static ZksRc
check_by_multi(CheckRound *r, TimestampTz deadline)
{
	const char **paths = palloc(sizeof(char *) * r->n);
	int		   *which = palloc(sizeof(int) * r->n);
	int		   *first = palloc(sizeof(int) * (r->n + 1));
	int			n = 0;
	ZksRc		result = ZKS_OK;

	for (int i = 0; i < r->n; i++)
		if (!r->checks[i].done)
		{
			which[n] = i;
			paths[n++] = r->checks[i].lock->node;
		}

	r->multis = palloc(sizeof(ZksRequest *) * Max(n, 1));
	first[0] = 0;
	while (first[r->nmultis] < n)
	{
		int			start = first[r->nmultis];
		int			taken;

		r->multis[r->nmultis] = zks_send_checks(paths + start, n - start,
												&taken);
		r->nmultis++;
		first[r->nmultis] = start + taken;
	}

	for (int m = 0; m < r->nmultis; m++)
	{
		ZksRc		rc = zks_wait(r->multis[m], deadline);

		if (rc == ZKS_OK)
		{
			for (int k = first[m]; k < first[m + 1]; k++)
				r->checks[which[k]].done = true;
		}
		else if (rc == ZKS_TIMEDOUT)
			return ZKS_TIMEDOUT;
		else if (rc == ZKS_SESSION_EXPIRED)
			result = ZKS_SESSION_EXPIRED;
		else if (rc == ZKS_CONNECTION_LOSS && result == ZKS_OK)
			result = ZKS_CONNECTION_LOSS;
	}
	pfree(paths);
	pfree(which);
	pfree(first);
	return result;
}

static int
count_unconfirmed(CheckRound *r)
{
	int			n = 0;

	for (int i = 0; i < r->n; i++)
		if (!r->checks[i].done)
			n++;
	return n;
}

/* The session ended: every node not yet confirmed went with it. */
static bool
all_lost_with_session(CheckRound *r)
{
	for (int i = 0; i < r->n; i++)
		if (!r->checks[i].done)
		{
			mark_lost(r->checks[i].lock, ZKL_LOST_SESSION);
			r->checks[i].done = true;
		}
	return true;
}

/*
 * One round: an exists per unconfirmed node, all sent back to back behind
 * a sync.  Returns false if the round must be repeated after a reconnect,
 * and sets *failure (ZKS_TIMEDOUT if the deadline passed, or an error
 * that asking again would not cure) if it must not.
 *
 * The sync: the server we are connected to may be a follower cut off from
 * the leader, which keeps answering reads from its own copy until it gives
 * up on the leader (syncLimit x tickTime, which can be longer than our
 * session timeout).  Meanwhile the leader may have expired our session and
 * granted the lock to someone else.  A sync makes the server catch up with
 * the leader before it answers the reads queued behind it (a session's
 * requests run in order), and a follower that cannot reach the leader
 * cannot complete it: the check then waits, and fails closed.  So a loss
 * the leader knew of when the sync reached it fails the commit.
 */
static bool
check_round(CheckRound *r, TimestampTz deadline, ZksRc *failure)
{
	int64		sid = zks_session_id();
	bool		complete = true;
	ZksRc		rc;

	if (count_unconfirmed(r) >= MULTI_CHECK_MIN)
	{
		/* multi requests are writes: the leader itself answers them */
		rc = check_by_multi(r, deadline);
		if (rc == ZKS_TIMEDOUT)
		{
			*failure = ZKS_TIMEDOUT;
			return false;
		}
		if (rc == ZKS_CONNECTION_LOSS)
			return false;		/* ask again after the reconnect */
		if (rc == ZKS_SESSION_EXPIRED)
			return all_lost_with_session(r);
	}
	if (count_unconfirmed(r) == 0)
		return true;

	r->sync = zks_send_sync(zklock_root);
	for (int i = 0; i < r->n; i++)
		if (!r->checks[i].done)
			r->checks[i].req = zks_send_exists(r->checks[i].lock->node, false);

	rc = zks_wait(r->sync, deadline);
	if (rc == ZKS_CONNECTION_LOSS)
		return false;
	if (rc == ZKS_SESSION_EXPIRED)
		return all_lost_with_session(r);
	if (rc != ZKS_OK)
	{
		*failure = rc;
		return false;
	}

	for (int i = 0; i < r->n; i++)
	{
		NodeCheck  *c = &r->checks[i];
		ZksStat		st;

		if (c->done)
			continue;
		rc = zks_wait(c->req, deadline);
		switch (rc)
		{
			case ZKS_OK:
				zks_get_stat(c->req, &st);
				if (st.ephemeral_owner != sid || st.czxid != c->lock->token)
					mark_lost(c->lock, ZKL_LOST_DELETED);
				c->done = true;
				break;
			case ZKS_NONODE:
				mark_lost(c->lock, ZKL_LOST_DELETED);
				c->done = true;
				break;
			case ZKS_SESSION_EXPIRED:
				mark_lost(c->lock, ZKL_LOST_SESSION);
				c->done = true;
				break;
			case ZKS_CONNECTION_LOSS:
				complete = false;	/* ask again after the reconnect */
				break;
			default:
				/* timed out, or an error asking again would not cure */
				*failure = rc;
				return false;
		}
	}
	return complete;
}

/*
 * Confirm with the ensemble that every held node still exists, belongs to
 * this session and is the node we were granted; mark the others lost.
 * While the connection is down, wait for it until deadline (if
 * wait_for_connection).  Returns ZKS_OK if every node was judged, or what
 * kept the answer from coming (ZKS_TIMEDOUT: not in time): nothing is
 * confirmed then, and a caller about to commit must fail.
 */
static ZksRc
confirm_held_nodes(TimestampTz deadline, bool wait_for_connection)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;
	CheckRound	r;
	volatile ZksRc result = ZKS_TIMEDOUT;

	r.checks = palloc0(sizeof(NodeCheck) * (hash_get_num_entries(lock_table) + 1));
	r.n = 0;
	r.multis = NULL;
	r.nmultis = 0;
	r.sync = NULL;
	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		mark_if_session_lost(lock);
		if (lock->lost == ZKL_LOST_NONE)
			r.checks[r.n++].lock = lock;
	}
	if (r.n == 0)
	{
		pfree(r.checks);
		return ZKS_OK;
	}
	if (!wait_for_connection && !zks_is_connected())
	{
		pfree(r.checks);
		return ZKS_CONNECTION_LOSS;
	}

	PG_TRY();
	{
		for (;;)
		{
			ZksRc		failure = ZKS_OK;
			ZksRc		rc = zks_await_connection(deadline);

			if (rc == ZKS_SESSION_EXPIRED || rc == ZKS_NOAUTH)
			{
				for (int i = 0; i < r.n; i++)
					mark_lost(r.checks[i].lock, ZKL_LOST_SESSION);
				result = ZKS_OK;
				break;
			}
			if (rc != ZKS_OK)
			{
				result = rc;
				break;
			}
			if (check_round(&r, deadline, &failure))
			{
				result = ZKS_OK;
				break;
			}
			end_round(&r);
			if (failure != ZKS_OK)
			{
				result = failure;
				break;
			}
		}
	}
	PG_FINALLY();
	{
		end_round(&r);
	}
	PG_END_TRY();
	pfree(r.checks);
	return result;
}

static void
lost_error(ZklLock *lock)
{
	bool		session_scope = lock->session_count > 0;
	const char *unlock_fn = lock->key.mode == ZKR_MODE_SHARED ?
		"zk_unlock_shared" : "zk_unlock";

	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("%s zklock on \"%s\" was lost",
					zkr_mode_name(lock->key.mode), lock->key.resource),
			 lock->lost == ZKL_LOST_SESSION ?
			 errdetail("The ZooKeeper session that held node \"%s\" expired.",
					   lock->node) :
			 errdetail("Node \"%s\" was deleted from ZooKeeper while the lock was held.",
					   lock->node),
			 session_scope ?
			 errhint("Acknowledge the loss with %s(%s) or zk_unlock_all(); until then every commit of this session fails.",
					 unlock_fn, quote_literal_cstr(lock->key.resource)) :
			 errhint("The transaction cannot commit: another holder may have run meanwhile.")));
}

/*
 * Before COMMIT or PREPARE TRANSACTION: a transaction that relied on a
 * lock that is gone must not commit.  Known losses fail at once; with
 * zklock.verify_at_commit, every held node is confirmed with the ensemble
 * first (one round trip), waiting through a suspended connection at most
 * one session timeout, and failing closed if no answer comes.
 */
static void
verify_before_commit(void)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;
	ZksRc		rc = ZKS_OK;

	if (zklock_verify_at_commit)
		rc = confirm_held_nodes(
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										zks_negotiated_timeout()), true);

	hash_seq_init(&status, lock_table);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		mark_if_session_lost(lock);
		if (lock->lost != ZKL_LOST_NONE)
		{
			hash_seq_term(&status);
			lost_error(lock);
		}
	}
	if (rc == ZKS_TIMEDOUT)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not confirm zklock locks with ZooKeeper before commit"),
				 errdetail("No server of \"%s\" answered within the session timeout (%d ms); the locks may be lost.",
						   zklock_hosts, zks_negotiated_timeout()),
				 errhint("Set \"zklock.verify_at_commit\" to off to commit without this check.")));
	if (rc != ZKS_OK)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not confirm zklock locks with ZooKeeper before commit"),
				 zks_errdetail(rc),
				 errhint("Set \"zklock.verify_at_commit\" to off to commit without this check.")));
}

/*
 * PostgreSQL calls transaction callbacks most recently registered first.
 * An extension that registers its own later (postgres_fdw does, at its
 * first remote connection) would commit its remote work before zklock has
 * confirmed its locks.  So while this backend holds locks, zklock
 * registers again after each statement, at each lock and before an
 * explicit COMMIT or PREPARE (zklock.c), which puts its callback in front.
 * Never call this while PostgreSQL walks the callback list (a commit):
 * freeing our item there could make it skip our callback.
 */
void
zkl_callbacks_first(void)
{
	if (!have_locks())
		return;
	UnregisterXactCallback(zkl_xact_callback, NULL);
	RegisterXactCallback(zkl_xact_callback, NULL);
}

static void
zkl_xact_callback(XactEvent event, void *arg)
{
	if (!have_locks())
		return;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			verify_before_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			{
				HASH_SEQ_STATUS status;
				ZklLock    *lock;

				hash_seq_init(&status, lock_table);
				while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
				{
					if (lock->xact_count > 0)
					{
						hash_seq_term(&status);
						ereport(ERROR,
								(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
								 errmsg("cannot PREPARE a transaction that holds a transaction-level zklock lock"),
								 errdetail("The lock on \"%s\" lives in this backend's ZooKeeper session, which cannot outlive the backend.",
										   lock->key.resource),
								 errhint("Use a session-level lock (zk_session_lock_exclusive) and release it after COMMIT PREPARED.")));
					}
				}
				/* a lost session-level lock must not commit through 2PC */
				verify_before_commit();
				break;
			}
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			release_xact_holds();
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
		release_if_unused(lock);
	}
	zks_batch_end();
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
 * Acquisition
 * ----------------------------------------------------------------
 */

/*
 * The data of a contender node: one short line naming its owner, so an
 * operator (or zk_lock_queue) can tell who holds or waits.  Built once per
 * backend (catalog lookups, gethostname) and again only when the role or
 * application_name changes.
 */
static char *
owner_line(void)
{
	static char *cached = NULL;
	static Oid	cached_role = InvalidOid;
	static char *cached_app = NULL;
	const char *app = application_name ? application_name : "";
	char		host[256];
	const char *db;
	const char *role;

	if (cached != NULL && cached_role == GetUserId() &&
		strcmp(cached_app, app) == 0)
		return cached;

	db = get_database_name(MyDatabaseId);
	role = GetUserNameFromId(GetUserId(), true);
	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "?", sizeof(host));
	host[sizeof(host) - 1] = '\0';

	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		char	   *line = psprintf("zklock host=%s port=%d sysid=" UINT64_FORMAT " pid=%d db=%s role=%s application_name=%s",
									host, PostPortNumber, GetSystemIdentifier(),
									MyProcPid, db ? db : "?", role ? role : "?",
									app);
		char	   *app_copy = pstrdup(app);

		MemoryContextSwitchTo(old);
		if (cached)
			pfree(cached);
		if (cached_app)
			pfree(cached_app);
		cached = line;
		cached_app = app_copy;
		cached_role = GetUserId();
	}
	return cached;
}

static void
timeout_error(Attempt *a)
{
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("could not obtain %s zklock on \"%s\"",
					zkr_mode_name(a->mode), a->resource),
			 a->by_lock_timeout ?
			 errdetail("\"lock_timeout\" (%lld ms) expired while waiting.",
					   (long long) a->deadline_ms) :
			 errdetail("The timeout of %lld ms given to the call expired while waiting.",
					   (long long) a->deadline_ms)));
}

/* What an attempt asked ZooKeeper for, to name it in an error. */
typedef enum ZklOp
{
	OP_CREATE_PARENT,
	OP_CREATE_NODE,
	OP_LIST,
	OP_WATCH
} ZklOp;

/*
 * ERROR for a request ZooKeeper refused.  The messages are whole format
 * strings, marked for translation with gettext_noop and translated by
 * errmsg(), as PostgreSQL's own aclchk.c does.
 */
static void
zk_failure(Attempt *a, ZklOp op, ZksRc rc)
{
	const char *refused = NULL;
	const char *failed = NULL;

	switch (op)
	{
		case OP_CREATE_PARENT:
			refused = gettext_noop("ZooKeeper refused to create lock parent \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not create lock parent \"%s\" for zklock on \"%s\"");
			break;
		case OP_CREATE_NODE:
			refused = gettext_noop("ZooKeeper refused to create a node under \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not create a node under \"%s\" for zklock on \"%s\"");
			break;
		case OP_LIST:
			refused = gettext_noop("ZooKeeper refused to list \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not list \"%s\" for zklock on \"%s\"");
			break;
		case OP_WATCH:
			refused = gettext_noop("ZooKeeper refused to watch a contender under \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not watch a contender under \"%s\" for zklock on \"%s\"");
			break;
	}
	if (rc == ZKS_NOAUTH)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg(refused, a->parent, a->resource),
				 errdetail("The node's ACL belongs to another identity."),
				 errhint("Check the identity in \"zklock.auth_file\" against the one that created \"%s\".",
						 a->parent)));
	ereport(ERROR,
			(errcode(rc == ZKS_SESSION_EXPIRED || rc == ZKS_CONNECTION_LOSS ?
					 ERRCODE_CONNECTION_FAILURE : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg(failed, a->parent, a->resource),
			 zks_errdetail(rc)));
}

/*
 * After a connection loss, wait for the session to come back: no longer
 * than the lock's own deadline (55P03) nor zklock.connect_timeout (08001).
 */
static void
await_reconnect(Attempt *a)
{
	TimestampTz limit = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													zklock_connect_timeout);
	bool		lock_deadline_first = (a->deadline != 0 && a->deadline <= limit);

	if (zks_reconnect_wait(lock_deadline_first ? a->deadline : limit))
		return;
	if (lock_deadline_first)
		timeout_error(a);
	ereport(ERROR,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("lost connection to ZooKeeper ensemble \"%s\" while locking \"%s\"",
					zklock_hosts, a->resource),
			 errdetail("No server answered within \"zklock.connect_timeout\" (%d ms).",
					   zklock_connect_timeout)));
}

/* Wait for a reply; a deadline that passes first ends the attempt. */
static ZksRc
await_reply(Attempt *a, ZksRequest *req)
{
	ZksRc		rc = zks_wait(req, a->deadline);

	if (rc == ZKS_TIMEDOUT)
		timeout_error(a);
	return rc;
}

static void
done_req(ZksRequest **req)
{
	zks_done(*req);
	*req = NULL;
}

/*
 * Ancestors of lock parents (the root, intermediate levels) that exist in
 * the current session, so that a new lock parent costs one create rather
 * than one per level.  They are containers, which the server removes once
 * empty: a level that went shows up as NONODE for the create below it,
 * and the whole cache is dropped.  A new session (expiry, other hosts)
 * starts afresh; long paths are not cached.
 */
#define ANCESTOR_KEY_LEN	256
#define ANCESTOR_CACHE_MAX	1024

static HTAB *known_ancestors = NULL;
static int64 known_ancestors_session = 0;

static void
ancestors_forget(void)
{
	if (known_ancestors != NULL)
		hash_destroy(known_ancestors);
	known_ancestors = NULL;
}

static bool
ancestor_known(const char *path)
{
	bool		found = false;

	if (known_ancestors_session != zks_session_id())
		ancestors_forget();
	if (known_ancestors != NULL && strlen(path) < ANCESTOR_KEY_LEN)
		hash_search(known_ancestors, path, HASH_FIND, &found);
	return found;
}

static void
ancestor_remember(const char *path)
{
	if (strlen(path) >= ANCESTOR_KEY_LEN)
		return;
	if (known_ancestors_session != zks_session_id() ||
		(known_ancestors != NULL &&
		 hash_get_num_entries(known_ancestors) >= ANCESTOR_CACHE_MAX))
		ancestors_forget();
	if (known_ancestors == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = ANCESTOR_KEY_LEN;
		ctl.entrysize = ANCESTOR_KEY_LEN;
		ctl.hcxt = TopMemoryContext;
		known_ancestors = hash_create("zklock known ancestors", 16, &ctl,
									  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		known_ancestors_session = zks_session_id();
	}
	hash_search(known_ancestors, path, HASH_ENTER, NULL);
}

/*
 * Create the lock parent and every ancestor, as CONTAINER nodes (the server
 * removes them once empty).  Only sent here: the caller sends its create
 * and listing right behind them, so the whole retry is one round trip
 * (ZooKeeper runs a session's requests in order), then checks them with
 * check_parents().
 */
static void
send_parents(Attempt *a)
{
	for (const char *p = a->parent + 1; *p; p++)
	{
		/* every prefix ending before a '/', then the parent itself */
		if (p[1] == '/' || p[1] == '\0')
		{
			char	   *path = pnstrdup(a->parent, p + 1 - a->parent);

			if (p[1] == '/' && ancestor_known(path))
			{
				pfree(path);
				continue;
			}
			a->preqs = lappend(a->preqs,
							   zks_send_create(path, "", 0, ZKS_CONTAINER));
			a->ppaths = lappend(a->ppaths, path);
		}
	}
}

static void
done_parents(Attempt *a)
{
	ListCell   *lc;

	foreach(lc, a->preqs)
		zks_done((ZksRequest *) lfirst(lc));
	list_free(a->preqs);
	list_free_deep(a->ppaths);
	a->preqs = NIL;
	a->ppaths = NIL;
}

/*
 * Existing parents are fine; a lost reply is left to the create behind
 * them (it fails the same way); anything else ends the attempt.
 */
static void
check_parents(Attempt *a)
{
	ListCell   *lc;
	ListCell   *pc;
	ZksRc		failed = ZKS_OK;
	size_t		parent_len = strlen(a->parent);

	forboth(lc, a->preqs, pc, a->ppaths)
	{
		ZksRc		rc = await_reply(a, (ZksRequest *) lfirst(lc));
		const char *path = (const char *) lfirst(pc);

		if ((rc == ZKS_OK || rc == ZKS_NODEEXISTS) &&
			strlen(path) < parent_len)
			ancestor_remember(path);
		else if (rc == ZKS_NONODE)
			ancestors_forget(); /* a level we skipped was reaped */
		if (rc != ZKS_OK && rc != ZKS_NODEEXISTS &&
			rc != ZKS_CONNECTION_LOSS && rc != ZKS_NONODE && failed == ZKS_OK)
			failed = rc;
	}
	done_parents(a);
	if (failed != ZKS_OK)
		zk_failure(a, OP_CREATE_PARENT, failed);
}

/*
 * After a create whose reply was lost: find the node by its unique prefix
 * and check it belongs to this session.  Adopts it and returns true, or
 * returns false if the create never happened.
 */
static bool
recover_create(Attempt *a)
{
	int			n;
	char	  **children;
	ZksRc		rc;

	for (;;)
	{
		ZksRc		src;

		await_reconnect(a);

		/*
		 * We may now talk to a follower that has not applied the create
		 * yet (we never saw its zxid): sync it with the leader first, or
		 * the listing could miss the node and we would create a second.
		 */
		a->ereq = zks_send_sync(a->parent);
		a->lreq = zks_send_children(a->parent);
		src = await_reply(a, a->ereq);
		done_req(&a->ereq);
		rc = await_reply(a, a->lreq);
		if (rc == ZKS_OK && src == ZKS_CONNECTION_LOSS)
			rc = ZKS_CONNECTION_LOSS;
		if (rc == ZKS_CONNECTION_LOSS)
		{
			done_req(&a->lreq);
			continue;
		}
		break;
	}
	if (rc == ZKS_NONODE)
	{
		done_req(&a->lreq);
		return false;
	}
	if (rc != ZKS_OK)
		zk_failure(a, OP_LIST, rc);

	children = zks_get_children(a->lreq, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *path;
		ZksStat		st;

		if (!zkr_has_prefix(children[i], a->prefix))
			continue;
		path = psprintf("%s/%s", a->parent, children[i]);
		a->ereq = zks_send_exists(path, false);
		rc = await_reply(a, a->ereq);
		if (rc == ZKS_OK)
		{
			zks_get_stat(a->ereq, &st);
			if (st.ephemeral_owner == zks_session_id())
			{
				done_req(&a->ereq);
				a->node = path;
				a->name = strrchr(a->node, '/') + 1;
				a->token = st.czxid;
				/* keep a->lreq: it is a listing that contains our node */
				return true;
			}
		}
		done_req(&a->ereq);
		pfree(path);
	}
	done_req(&a->lreq);
	return false;
}

/*
 * Create our contender node and leave a listing of the parent, sent right
 * behind the create, in a->lreq.
 */
static void
create_node(Attempt *a)
{
	bool		need_parents = false;

	for (int tries = 0;; tries++)
	{
		ZksRc		rc;

		if (need_parents)
			send_parents(a);
		a->creq = zks_send_create(a->create_path, a->data, strlen(a->data),
								  ZKS_EPHEMERAL_SEQUENTIAL);
		a->lreq = zks_send_children(a->parent);
		if (need_parents)
			check_parents(a);
		need_parents = false;

		rc = await_reply(a, a->creq);
		if (rc == ZKS_OK)
		{
			ZksStat		st;

			a->node = zks_take_created_path(a->creq);
			a->name = strrchr(a->node, '/') + 1;
			zks_get_stat(a->creq, &st);
			a->token = st.czxid;
			done_req(&a->creq);
			return;
		}

		done_req(&a->lreq);
		if (tries >= MAX_CREATE_TRIES)
			zk_failure(a, OP_CREATE_NODE, rc);

		if (rc == ZKS_NONODE)
		{
			/* no lock parent (yet, or reaped): create it on the next try */
			done_req(&a->creq);
			need_parents = true;
		}
		else if (rc == ZKS_CONNECTION_LOSS)
		{
			/*
			 * The create may have happened.  Until we know, the node (if
			 * any) is found by prefix; on give-up it is swept.
			 */
			a->uncertain = true;
			if (recover_create(a))
			{
				zks_claim(a->creq);
				done_req(&a->creq);
				return;
			}

			/*
			 * Not created (as far as the server we reached knows).  Create
			 * again with the same prefix; a late original would then be one
			 * of our own strays, never in our way, and swept when we are
			 * done.  No sweep now: it could take the new node.
			 */
			zks_claim(a->creq);
			done_req(&a->creq);
		}
		else
		{
			done_req(&a->creq);
			zk_failure(a, OP_CREATE_NODE, rc);
		}
	}
}

/*
 * Run the recipe until the lock is ours (true) or, for a try, until it is
 * known to be taken (false).  Every wait is bounded by a->deadline and
 * interruptible.
 */
static bool
run_attempt(Attempt *a)
{
	create_node(a);

	for (;;)
	{
		ZksRc		rc;
		int			n;
		char	  **children;
		ZkrContender *cs;
		int			ncs;
		const char **own;
		int			nown = 0;
		ZkrDecision d;
		char	   *pred;
		ZksEventMark seen;

		rc = await_reply(a, a->lreq);
		if (rc == ZKS_CONNECTION_LOSS)
		{
			done_req(&a->lreq);
			await_reconnect(a);
			a->lreq = zks_send_children(a->parent);
			continue;
		}
		if (rc != ZKS_OK)
			zk_failure(a, OP_LIST, rc);

		children = zks_get_children(a->lreq, &n);
		done_req(&a->lreq);

		cs = palloc(sizeof(ZkrContender) * Max(n, 1));
		ncs = zkr_collect((const char *const *) children, n, cs);

		/* ours never conflict: the other mode's node, strays of our prefix */
		own = palloc(sizeof(char *) * (ncs + 1));
		if (a->own_other)
			own[nown++] = a->own_other;
		for (int i = 0; i < ncs; i++)
			if ((zkr_has_prefix(cs[i].name, a->prefix) &&
				 strcmp(cs[i].name, a->name) != 0) ||
				(a->own_other_prefix &&
				 zkr_has_prefix(cs[i].name, a->own_other_prefix)))
				own[nown++] = cs[i].name;

		d = zkr_decide(cs, ncs, a->name, a->mode, own, nown);
		if (!d.found)
		{
			/* not "lock not available": retrying the same way cannot help */
			if (zks_session_expired())
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("ZooKeeper session expired while waiting for zklock on \"%s\"",
								a->resource),
						 errdetail("Node \"%s\" went with the session.", a->node)));
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("zklock node \"%s\" vanished while waiting for the lock on \"%s\"",
							a->node, a->resource),
					 errdetail("Another ZooKeeper client deleted it.")));
		}
		if (d.held)
			return true;
		if (a->try_only)
			return false;

		/*
		 * Exclusive asked while this backend holds shared, with a foreign
		 * exclusive contender queued between our two nodes: it waits for
		 * our shared node, which we keep while we wait for it.  That wait
		 * would never end; say so at once.
		 */
		if (a->mode == ZKR_MODE_EXCLUSIVE && a->own_other != NULL)
		{
			int			f = zkr_foreign_exclusive_between(cs, ncs, a->own_other,
														  a->name, own, nown);

			if (f >= 0)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
						 errmsg("deadlock detected"),
						 errdetail("This backend holds a shared zklock on \"%s\" (node \"%s\") and asked for an exclusive one; exclusive contender \"%s\" of another client is queued between them and waits for the shared lock, which this backend keeps while it waits.",
								   a->resource, a->own_other, cs[f].name),
						 errhint("Release the shared lock before asking for the exclusive one, or take the exclusive lock first: a shared lock asked while holding the exclusive one is granted at once.")));
		}

		/*
		 * Watch only the contender the recipe names.  If it is already
		 * gone, list again at once: it may have given up rather than
		 * released, and whoever precedes it is now in our way.
		 */
		a->waited = true;
		pred = psprintf("%s/%s", a->parent, cs[d.predecessor].name);
		seen = zks_event_mark();
		a->ereq = zks_send_watch_data(pred);
		rc = await_reply(a, a->ereq);
		done_req(&a->ereq);

		if (rc == ZKS_OK)
		{
			/*
			 * Wait for the watch; past deadlock_timeout, look for a cycle
			 * (deadlock.c), which may end this wait with 40P01.
			 */
			zkd_wait_begin(&a->dl);
			while (!zks_wait_event(seen, zkd_wake_at(&a->dl, a->deadline)))
			{
				if (a->deadline != 0 && GetCurrentTimestamp() >= a->deadline)
					timeout_error(a);
				zkd_check(&a->dl, a->resource, a->node, a->mode, a->deadline);
			}

			/*
			 * Always list again, even when the only contender in our way is
			 * gone: another client may have deleted our own node meanwhile,
			 * and only the listing shows it (granting without it handed out
			 * a lock that had no node, so a second holder could take it).
			 */
			if (!zks_is_connected())
				await_reconnect(a);
		}
		else if (rc == ZKS_CONNECTION_LOSS)
			await_reconnect(a);
		else if (rc != ZKS_NONODE)
			zk_failure(a, OP_WATCH, rc);

		pfree(pred);
		a->lreq = zks_send_children(a->parent);
	}
}

/* Undo an attempt that ends without the lock.  Never raises ERROR. */
static void
abandon_attempt(Attempt *a)
{
	zks_done(a->creq);
	zks_done(a->lreq);
	zks_done(a->ereq);
	a->creq = a->lreq = a->ereq = NULL;
	zkd_wait_end(&a->dl);
	done_parents(a);
	if (a->node)
		zks_delete_async(a->node);
	if (a->uncertain)
		zks_sweep_async(a->parent, a->prefix);
}

static void
set_deadline(Attempt *a, int64 timeout_ms)
{
	int64		limit = -1;

	a->by_lock_timeout = false;
	if (timeout_ms >= 0)
		limit = timeout_ms;

	/*
	 * A timeout beyond a century is no timeout: the deadline must stay
	 * within the range of a timestamp, or it would wrap and pass at once.
	 */
	if (limit > MAX_TIMEOUT_MS)
		limit = -1;
	if (LockTimeout > 0 && (limit < 0 || LockTimeout < limit))
	{
		limit = LockTimeout;
		a->by_lock_timeout = true;
	}
	a->deadline_ms = limit;
	a->deadline = limit < 0 ? 0 :
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), limit);
}

/*
 * A new entry for resource in mode that shares the node of entry owner
 * (see ZklLock.borrowed).  Everything that can fail happens before the
 * entry is live.
 */
static ZklLock *
borrow_node(ZklLock *owner, const char *resource, ZkrMode mode)
{
	char	   *parent = MemoryContextStrdup(TopMemoryContext, owner->parent);
	char	   *node = MemoryContextStrdup(TopMemoryContext, owner->node);
	char	   *prefix = MemoryContextStrdup(TopMemoryContext, owner->prefix);
	char	   *res = MemoryContextStrdup(TopMemoryContext, resource);
	XactHold   *holds = MemoryContextAlloc(TopMemoryContext, 4 * sizeof(XactHold));
	ZklLockKey	key;
	ZklLock    *lock;
	bool		found;

	make_key(&key, res, mode);
	lock = (ZklLock *) hash_search(lock_table, &key, HASH_ENTER, &found);
	Assert(!found);
	lock->parent = parent;
	lock->node = node;
	lock->name = strrchr(lock->node, '/') + 1;
	lock->prefix = prefix;
	lock->sweep = false;		/* the owner sweeps, or hands it over */
	lock->token = owner->token;
	lock->session_id = owner->session_id;
	lock->lost = ZKL_LOST_NONE;
	lock->since = GetCurrentTimestamp();
	lock->session_count = 0;
	lock->xact_count = 0;
	lock->nholds = 0;
	lock->holds_cap = 4;
	lock->xact_holds = holds;
	lock->borrowed = true;
	lock->node_mode = owner->node_mode;
	return lock;
}

bool
zkl_acquire(const char *resource, const char *relpath, ZkrMode mode,
			ZklScope scope, int64 timeout_ms, bool try_only, int64 *token)
{
	ZklLock    *lock = find_lock(resource, mode);
	ZklLock    *other;
	Attempt		a;
	uint8		uuid_bytes[16];
	char		uuid[ZKR_UUID_LEN + 1];
	bool		granted;
	bool		found;
	ZklLockKey	key;

	/* Re-entrant: the same node serves every hold of resource and mode. */
	if (lock != NULL)
	{
		mark_if_session_lost(lock);
		if (lock->lost != ZKL_LOST_NONE)
			lost_error(lock);
		add_hold(lock, scope);
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
	other = find_lock(resource, mode == ZKR_MODE_EXCLUSIVE ?
					  ZKR_MODE_SHARED : ZKR_MODE_EXCLUSIVE);
	if (other != NULL)
		mark_if_session_lost(other);
	if (other != NULL && other->lost == ZKL_LOST_NONE && !other->borrowed &&
		other->node_mode == ZKR_MODE_EXCLUSIVE)
	{
		lock = borrow_node(other, resource, mode);
		add_hold(lock, scope);	/* cannot fail: room for 4 */
		n_grants++;
		*token = lock->token;
		zkl_callbacks_first();
		return true;
	}

	if (!zkr_protocol_has_mode((ZkrProtocol) zklock_protocol, mode))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock.protocol \"%s\" has no shared locks",
						GetConfigOption("zklock.protocol", false, false)),
				 errdetail("Curator's InterProcessMutex, whose node names this protocol writes, only takes exclusive locks."),
				 errhint("Use zklock.protocol \"curator-rw\" or \"kazoo\" for shared locks.")));

	memset(&a, 0, sizeof(a));
	a.resource = resource;
	a.mode = mode;

	/*
	 * A try, and a timeout of zero, never wait for other contenders; only
	 * the round trips to ZooKeeper bound them.  Any other timeout (and
	 * lock_timeout) bounds the whole call, the wait for a session and the
	 * round trips included.
	 */
	a.try_only = try_only || timeout_ms == 0;
	if (a.try_only)
		a.deadline = 0;
	else
		set_deadline(&a, timeout_ms);

	if (!zks_connect(!have_locks(), a.deadline))
		timeout_error(&a);
	a.parent = psprintf("%s/%s", zklock_root, relpath);
	if (!pg_strong_random(uuid_bytes, sizeof(uuid_bytes)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random node name")));
	/* a version-4 (random) UUID, as Curator's protected mode uses */
	uuid_bytes[6] = (uuid_bytes[6] & 0x0F) | 0x40;
	uuid_bytes[8] = (uuid_bytes[8] & 0x3F) | 0x80;
	zkr_format_uuid(uuid_bytes, uuid);
	if (zkr_protocol_prefix((ZkrProtocol) zklock_protocol, mode, uuid,
							a.prefix, sizeof(a.prefix)) == 0)
		elog(ERROR, "zklock node prefix does not fit");
	a.create_path = psprintf("%s/%s", a.parent, a.prefix);
	a.data = owner_line();
	if (other != NULL && other->session_id == zks_session_id() &&
		other->lost == ZKL_LOST_NONE)
	{
		a.own_other = other->name;
		if (other->sweep)
			a.own_other_prefix = other->prefix;
	}

	lock = NULL;
	PG_TRY();
	{
		granted = run_attempt(&a);
		if (granted)
		{
			/* everything that can fail happens before the entry is live */
			char	   *parent = MemoryContextStrdup(TopMemoryContext, a.parent);
			char	   *node = MemoryContextStrdup(TopMemoryContext, a.node);
			char	   *prefix = MemoryContextStrdup(TopMemoryContext, a.prefix);
			char	   *res = MemoryContextStrdup(TopMemoryContext, resource);
			XactHold   *holds = MemoryContextAlloc(TopMemoryContext,
												   4 * sizeof(XactHold));

			make_key(&key, res, mode);
			lock = (ZklLock *) hash_search(lock_table, &key, HASH_ENTER, &found);
			Assert(!found);
			lock->parent = parent;
			lock->node = node;
			lock->name = strrchr(lock->node, '/') + 1;
			lock->prefix = prefix;
			lock->sweep = a.uncertain;
			lock->token = a.token;
			lock->session_id = zks_session_id();
			lock->lost = ZKL_LOST_NONE;
			lock->since = GetCurrentTimestamp();
			lock->session_count = 0;
			lock->xact_count = 0;
			lock->nholds = 0;
			lock->holds_cap = 4;
			lock->xact_holds = holds;
			lock->borrowed = false;
			lock->node_mode = mode;
			add_hold(lock, scope);	/* cannot fail: room for 4 */
		}
	}
	PG_CATCH();
	{
		abandon_attempt(&a);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!granted)
	{
		abandon_attempt(&a);
		if (!try_only)
			timeout_error(&a);	/* timeout of zero: 55P03, not false */
		return false;
	}

	/* the node now belongs to the entry */
	zks_done(a.creq);
	zks_done(a.lreq);
	zks_done(a.ereq);
	zkd_wait_end(&a.dl);
	n_grants++;
	if (a.waited)
		n_waits++;

	*token = lock->token;
	zkl_callbacks_first();
	return true;
}

bool
zkl_release_session(const char *resource, ZkrMode mode)
{
	ZklLock    *lock = find_lock(resource, mode);

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
	mark_if_session_lost(lock);
	if (lock->lost != ZKL_LOST_NONE)
		lock->session_count = 0;	/* acknowledged: every level is gone */
	else
		lock->session_count--;
	release_if_unused(lock);
	return true;
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
		release_if_unused(lock);
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

	/* what is gone shows as lost: ask the ensemble if it is at hand */
	if (have_locks())
		(void) confirm_held_nodes(
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										zklock_connect_timeout), false);

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
			rows[k].since = lock->since;
			k++;
		}
	}
	*n = k;
	return rows;
}

bool
zkl_have_locks(void)
{
	return have_locks();
}

void
zkl_counters(ZklCounters *c)
{
	c->locks_held = have_locks() ? hash_get_num_entries(lock_table) : 0;
	c->grants = n_grants;
	c->waits = n_waits;
	c->lost = n_lost;
}
