/*-------------------------------------------------------------------------
 *
 * locktable_int.h
 *	  The lock table's entries, shared by the table (locktable.c) and the
 *	  code that fills it from lock calls (lockrequest.c); nothing else
 *	  sees them.  Also the table's transaction callback and the
 *	  pre-commit checks (precommit.c), which the callback ordering
 *	  (callorder.c) calls.
 *
 * src/xact/locktable_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_LOCKTABLE_INT_H
#define ZKLOCK_LOCKTABLE_INT_H

#include "pg_compat.h"

#include "access/xact.h"
#include "datatype/timestamp.h"
#include "utils/hsearch.h"

#include "xact/locktable.h"
#include "recipe/recipe.h"
#include "session/session.h"

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
	ZKL_LOST_DELETED,			/* the node was deleted (or replaced) */
	ZKL_LOST_CLOCK,				/* no reply for a session timeout: the
								 * session counts as expired, and may live
								 * on (session/nudge.c, the loss clock) */
	ZKL_LOST_REVOKED			/* asked back, and given back
								 * (zklock.on_revoke = cancel) */
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
	TimestampTz lost_at;		/* when the loss was noticed */
	TimestampTz expired_at;		/* ZKL_LOST_SESSION: when the session was
								 * seen expired (0: not known) ... */
	TimestampTz unreachable_since;	/* ... and since when it had had no
									 * connection then (0: not known) */
	uint64		clock_seen;		/* the loss clock's count at the grant */
	int			clock_timeout_ms;	/* ZKL_LOST_CLOCK: the timeout it ran
									 * out for */
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
	int			max_holders;	/* a semaphore's; 0 for a lock */
} ZklLock;

/* The entry of resource in mode, or NULL. */
extern ZklLock *zkl_find_lock(const char *resource, ZkrMode mode);

/*
 * A new entry without holds, owning node (or, with borrowed, sharing the
 * other mode's).  Everything that can fail happens before it is live.
 */
extern ZklLock *zkl_new_entry(const char *resource, ZkrMode mode,
							  const char *parent, const char *node,
							  const char *prefix, bool sweep, int64 token,
							  int64 session_id, ZkrMode node_mode,
							  int max_holders, bool borrowed);

/* A new entry for resource in mode on owner's node (ZklLock.borrowed). */
extern ZklLock *zkl_borrow_node(ZklLock *owner, const char *resource,
								ZkrMode mode);

/* Room for one more hold (may fail); then zkl_add_hold cannot. */
extern void zkl_reserve_hold(ZklLock *lock, ZklScope scope);
extern void zkl_add_hold(ZklLock *lock, ZklScope scope);

/*
 * Drop the entry and delete its node once no hold is left.  Never raises
 * ERROR and never waits.
 */
extern void zkl_release_if_unused(ZklLock *lock);

/* Walk every entry with hash_seq_search; how many there are. */
extern void zkl_seq_init(HASH_SEQ_STATUS *status);
extern long zkl_entry_count(void);

/* Does any lock have a transaction-level hold? */
extern bool zkl_have_xact_holds(void);

/* Mark lock lost for why (counted once; a lock asked back is given back). */
extern void zkl_mark_lost(ZklLock *lock, ZklLost why);

/* A lock whose session ended is lost; no round trip needed to know. */
extern void zkl_mark_if_session_lost(ZklLock *lock);

/*
 * Mark every lock known lost (its session gone, its node's watch fired);
 * returns how many are lost, the one to name in *first (may be NULL).
 */
extern int	zkl_fold_losses(ZklLock **first);

/* lostreason.c: what is known of a loss, and the error that reports it */

/* Note why and when lock was found lost (its lost is still NONE). */
extern void zkl_record_loss(ZklLock *lock, ZklLost why);

/* Of two lost locks, is a the one to name in the error? */
extern bool zkl_report_before(const ZklLock *a, const ZklLock *b);

/* ERROR 40001: the lock was lost, and others more locks with it. */
pg_noreturn extern void zkl_lost_error(ZklLock *lock, int others);

/* The same error's fields, on an error being raised (returns 0). */
extern int	zkl_lost_fields(ZklLock *lock, int others);

/*
 * precommit.c.  Confirm every held node with the ensemble (commitcheck.c)
 * and mark the ones found gone; with unconfirmed, name one left unjudged
 * and count the others.
 */
extern ZksRc zkl_confirm_held_nodes(TimestampTz deadline,
									bool wait_for_connection,
									ZklLock **unconfirmed, int *others);

/* For zk_status(): a node granted, after a wait or not. */
extern void zkl_count_grant(bool waited);

/* zklock's main transaction callback (registered by zkl_init) */
extern void zkl_xact_callback(XactEvent event, void *arg);

/*
 * precommit.c.  Before COMMIT (PRE_COMMIT) or PREPARE TRANSACTION (PRE_PREPARE): ERROR
 * if the transaction must not commit (a lost lock; PREPARE with a
 * transaction-level lock).  Once per commit: see zkl_order_pre_commit.
 */
extern void zkl_pre_commit_checks(XactEvent event);

#endif							/* ZKLOCK_LOCKTABLE_INT_H */
