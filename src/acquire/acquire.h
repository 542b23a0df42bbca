/*-------------------------------------------------------------------------
 *
 * acquire.h
 *	  The run of one acquisition: creating a node under a parent (and the
 *	  parent, as CONTAINER nodes), finding it again when the reply was
 *	  lost, listing, watching, waiting within a deadline, and giving up
 *	  without leaving anything behind.
 *
 * Locks (locktable.c) and semaphores (semaphore.c) are both made of these
 * steps: a lock runs ZooKeeper's lock recipe on one parent (zka_run_queue);
 * a semaphore runs it on its internal mutex and then takes a lease.  What
 * the recipe decides is pure code in recipe.c; what happens to a granted
 * node afterwards (holds, release, the commit check) is the lock table's.
 *
 * src/acquire/acquire.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_ACQUIRE_H
#define ZKLOCK_ACQUIRE_H

#include "pg_compat.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "deadlock/deadlock.h"
#include "recipe/recipe.h"
#include "session/session.h"

/* One acquisition in progress; everything zka_abandon must undo. */
typedef struct ZkaAttempt
{
	const char *resource;		/* as the user named it, for messages */
	ZkrMode		mode;			/* the mode the recipe decides for */
	ZkrMode		msg_mode;		/* what the user asked for, for messages */
	bool		try_only;
	bool		follow_deadlocks;	/* search for cycles while waiting */
	char	   *parent;
	char	   *create_path;	/* parent/prefix (sequential: ZooKeeper
								 * appends digits) */
	char		prefix[ZKR_MAX_PREFIX_BYTES];
	ZksCreateMode create_mode;
	bool		list_after_create;	/* send a listing behind the create */
	bool		watch_listing;	/* ... with a child watch */
	char	   *data;			/* the node's data: its owner */
	const char *own_other;		/* our node for the other mode, if any */
	const char *own_other_prefix;	/* its prefix, if it may have strays */
	TimestampTz deadline;		/* 0: none */
	int64		deadline_ms;	/* the limit that set the deadline */
	bool		by_lock_timeout;
	ZksRequest *creq;			/* create in flight */
	ZksRequest *lreq;			/* listing in flight */
	ZksRequest *ereq;			/* exists (watch) in flight */
	ZksRequest *oreq;			/* the own node's watch, in flight */
	char	   *watched;		/* the predecessor we watch (session/watch.c) */
	List	   *preqs;			/* creates of the parent and ancestors */
	List	   *ppaths;			/* ... and their paths */
	char	   *node;			/* our node, once known */
	const char *name;
	int64		token;
	bool		uncertain;		/* a create's reply was lost */
	bool		waited;			/* had to wait for another contender */
	bool		grant_by_listing;	/* never granted by the watches alone
									 * (what follows reads the tree and
									 * needs a reply past the predecessor's
									 * delete; see semaphore.c) */
	ZkdWait		dl;				/* deadlock detection while waiting */
} ZkaAttempt;

/*
 * Start an attempt: zero it, and set its deadline from timeout_ms (< 0:
 * none of its own) and lock_timeout.  A try, and a timeout of zero, never
 * wait for other contenders; only round trips bound them.
 */
extern void zka_begin(ZkaAttempt *a, const char *resource, ZkrMode mode,
					  bool try_only, int64 timeout_ms);

/* Make sure a session exists within the attempt's deadline (else 55P03). */
extern void zka_connect(ZkaAttempt *a, bool may_reconnect);

/*
 * A fresh random (version 4) UUID, as Curator's protected mode and
 * kazoo's hex names use; 37 bytes with the NUL.
 */
extern void zka_new_uuid(char uuid[ZKR_UUID_LEN + 1]);

/*
 * Set where the attempt's node goes: parent (full path) and the name's
 * prefix (sequential modes: ZooKeeper appends the digits).  The node is an
 * EPHEMERAL_SEQUENTIAL contender with a listing sent behind its create,
 * unless the caller changes create_mode, list_after_create, watch_listing.
 */
extern void zka_set_node(ZkaAttempt *a, const char *parent,
						 const char *prefix);

/*
 * Create the ancestors of a->parent (not a->parent itself) as CONTAINER
 * nodes, waiting for the replies; existing ones are fine.
 */
extern void zka_create_ancestors(ZkaAttempt *a);



/* The data every node of this backend carries: one line naming it. */
extern char *zka_owner_line(void);

/*
 * Create the attempt's node (and its missing parents), finding it again
 * by prefix after a lost reply; a->node, a->name and a->token are set on
 * return, and, with list_after_create, a->lreq is a listing of the parent
 * sent right behind the create (so it contains the node).
 */
extern void zka_create_node(ZkaAttempt *a);

/*
 * The same in two steps, so that many creates can be in flight at once:
 * send the create (and the listing behind it), then wait for it, with
 * every retry zka_create_node makes.
 */
extern void zka_send_create(ZkaAttempt *a);
extern void zka_complete_create(ZkaAttempt *a);

/*
 * ZooKeeper's lock recipe on a->parent: create, list, watch only the
 * contender in our way, list again after every notification.  Returns
 * true once the node holds, false for a try that found it taken.
 */
extern bool zka_run_queue(ZkaAttempt *a);

/*
 * The same once the node exists (a->node, a->name set): decides from the
 * listing in a->lreq, or from a new one if a->lreq is NULL.  With
 * try_only, returns false instead of waiting (a->lreq is then NULL).
 */
extern bool zka_await_turn(ZkaAttempt *a);

/* Wait for a reply; a deadline that passes first ends the attempt (55P03). */
extern ZksRc zka_await_reply(ZkaAttempt *a, ZksRequest *req);

/* After a connection loss: wait for the session within the deadlines. */
extern void zka_await_reconnect(ZkaAttempt *a);

/* zks_done() the request and clear the pointer. */
extern void zka_done_req(ZksRequest **req);

/* ERROR 55P03: the attempt's timeout (or lock_timeout) expired. */
pg_noreturn extern void zka_timeout_error(ZkaAttempt *a);

/* What an attempt asked ZooKeeper for, to name it in an error. */
typedef enum ZkaOp
{
	ZKA_OP_CREATE_PARENT,
	ZKA_OP_CREATE_NODE,
	ZKA_OP_LIST,
	ZKA_OP_WATCH,
	ZKA_OP_READ
} ZkaOp;

/* ERROR for a request ZooKeeper refused or could not answer. */
pg_noreturn extern void zka_failure(ZkaAttempt *a, ZkaOp op, ZksRc rc);

/* ERROR for our own node found gone while we waited (55000 or 08006). */
pg_noreturn extern void zka_vanished_error(ZkaAttempt *a);

/*
 * The node is granted: hand back the requests, end the wait's deadlock
 * state.  The node itself now belongs to the caller.
 */
extern void zka_finish(ZkaAttempt *a);

/* Undo an attempt that ends without its node.  Never raises ERROR. */
extern void zka_abandon(ZkaAttempt *a);

#endif							/* ZKLOCK_ACQUIRE_H */
