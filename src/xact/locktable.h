/*-------------------------------------------------------------------------
 *
 * locktable.h
 *	  The backend's table of zklock locks and semaphore leases: re-entrancy
 *	  counts per scope, release at transaction, subtransaction and session
 *	  end, and the lost-lock check before COMMIT and PREPARE.
 *
 * src/xact/locktable.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_LOCKTABLE_H
#define ZKLOCK_LOCKTABLE_H

#include "datatype/timestamp.h"
#include "recipe/recipe.h"

typedef enum ZklScope
{
	ZKL_SCOPE_TRANSACTION,
	ZKL_SCOPE_SESSION
} ZklScope;

/* One row of zk_locks(): a lock held in one scope. */
typedef struct ZklLockInfo
{
	char	   *resource;
	ZkrMode		mode;
	ZklScope	scope;
	int			count;
	char	   *node;
	int64		token;
	bool		lost;
	bool		revoked;		/* lost: asked back and given back */
	TimestampTz since;
	int			max_holders;	/* a semaphore's; 0 for a lock */
	TimestampTz revoke_at;		/* asked back when (0: not asked, or not
								 * known) ... */
	char	   *revoke_by;		/* ... and by whom (cleaned), or NULL */
} ZklLockInfo;

/* Register transaction callbacks and create the table (from _PG_init). */
extern void zkl_init(void);

/*
 * Take a lock on resource (already encoded as relpath, relative to
 * zklock.root), or, with mode ZKR_MODE_SEMAPHORE, a lease of the
 * semaphore of max_holders (semaphore.c).  timeout_ms < 0 means no
 * timeout of the call's own (lock_timeout still applies).  With try_only,
 * return false at once instead of waiting.  On success sets *token (the
 * node's czxid).
 */
extern bool zkl_acquire(const char *resource, const char *relpath,
						ZkrMode mode, int max_holders, ZklScope scope,
						int64 timeout_ms, bool try_only, int64 *token);

/*
 * Take the locks of resources[0..n-1] (encoded as relpaths) in one mode
 * and scope, all or none (lockset.c): a name given twice counts two holds,
 * a lock already held counts a hold without a request.  Sets tokens[i]
 * for resources[i].  With try_only, returns false at once, holding none,
 * if one is taken.
 */
extern bool zkl_acquire_many(const char *const *resources,
							 const char *const *relpaths, int n,
							 ZkrMode mode, ZklScope scope, int64 timeout_ms,
							 bool try_only, int64 *tokens);

/* Release one session-level hold; WARNING and false if none is held. */
extern bool zkl_release_session(const char *resource, ZkrMode mode);

/*
 * The same for each of resources[0..n-1] (a name given twice releases two
 * holds), the deletes sent together; true if every one was held.
 */
extern bool zkl_release_session_many(const char *const *resources, int n,
									 ZkrMode mode);

/* Release every session-level hold of this backend. */
extern void zkl_release_all_session(void);

/*
 * Snapshot of this backend's locks, palloc'd; *n rows.  Held nodes are
 * confirmed with the ensemble first when connected (one round trip), so
 * a deleted node shows as lost.
 */
extern ZklLockInfo *zkl_snapshot(int *n);

/* The nodes this backend holds for resource (any mode); palloc'd paths. */
extern int	zkl_held_nodes(const char *resource, char ***nodes);

/* Counters for zk_status(). */
typedef struct ZklCounters
{
	int			locks_held;		/* nodes held (each resource and mode) */
	uint64		grants;			/* nodes granted */
	uint64		waits;			/* grants that had to wait */
	uint64		lost;			/* locks found lost */
} ZklCounters;

extern void zkl_counters(ZklCounters *c);

/* Does this backend hold any zklock lock? */
extern bool zkl_have_locks(void);

/*
 * Fail fast (failfast.c).  zkl_any_loss: is a held lock known to be lost
 * (cheap while nothing new was noticed)?  zkl_refuse_if_lost: before a statement runs,
 * ERROR 40001 naming a held lock known to be lost (its node's watch fired,
 * its session ended).  zkl_lost_fields_now: from an error context
 * callback, give the error being raised the fields of that ERROR.
 */
extern bool zkl_any_loss(void);
extern void zkl_refuse_if_lost(void);
extern void zkl_lost_fields_now(void);

extern const char *zkl_scope_name(ZklScope scope);

#endif							/* ZKLOCK_LOCKTABLE_H */
