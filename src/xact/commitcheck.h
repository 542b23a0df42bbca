/*-------------------------------------------------------------------------
 *
 * commitcheck.h
 *	  Confirming with the ensemble, before a commit, that held nodes still
 *	  exist, belong to this session and are the nodes that were granted.
 *
 * The lock table (locktable.c) decides when to ask and what a loss means
 * for the transaction; this file asks, as cheaply as is safe: one sync and
 * one exists per node sent back to back (one round trip), or multi
 * "check" requests for many nodes.
 *
 * src/xact/commitcheck.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_COMMITCHECK_H
#define ZKLOCK_COMMITCHECK_H

#include "pg_compat.h"

#include "datatype/timestamp.h"
#include "recipe/recipe.h"
#include "session/session.h"

typedef enum ZkcVerdict
{
	ZKC_UNKNOWN = 0,			/* not judged (yet) */
	ZKC_HELD,					/* exists, ours, the granted node */
	ZKC_LOST_SESSION,			/* the session that held it ended */
	ZKC_LOST_DELETED			/* deleted, or replaced by another node */
} ZkcVerdict;

typedef struct ZkcNode
{
	const char *path;			/* full path of the held node */
	int64		token;			/* its czxid when granted */
	ZkcVerdict	verdict;		/* out */
} ZkcNode;

/*
 * Judge every node of nodes[0..n-1].  While the connection is down, wait
 * for it until deadline (if wait_for_connection).  Returns ZKS_OK if every
 * node was judged, or what kept the answer from coming (ZKS_TIMEDOUT: not
 * in time); the nodes not judged stay ZKC_UNKNOWN then, and a caller about
 * to commit must fail.
 */
/*
 * From this many locks on, the pre-commit check asks with multi requests
 * of "check" operations (up to 1,000 nodes each) instead of one exists per
 * node.  A multi is a write, answered by the leader after its log is
 * written, so for a few locks the exists are cheaper.  Below it, a held
 * node's own watch saves its exists; so the lock table watches held nodes
 * up to this many locks (locktable.c), and no further.
 */
#define ZKC_MULTI_CHECK_MIN 16

extern ZksRc zkc_confirm(ZkcNode *nodes, int n, TimestampTz deadline,
						 bool wait_for_connection);

/*
 * ERROR 40001: the check could not be completed (rc from zkc_confirm).
 * resource and mode name the lock left unconfirmed (others: how many more
 * are); resource NULL if none is known.
 */
pg_noreturn extern void zkc_unconfirmed_error(ZksRc rc, const char *resource,
											  ZkrMode mode, int others);

#endif							/* ZKLOCK_COMMITCHECK_H */
