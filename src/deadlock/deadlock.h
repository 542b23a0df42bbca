/*-------------------------------------------------------------------------
 *
 * deadlock.h
 *	  Deadlock detection for zklock waits, across clusters and mixed with
 *	  PostgreSQL's own lock waits on this cluster.
 *
 * A waiter that has waited deadlock_timeout publishes a wait record (an
 * ephemeral node under <zklock.root>/%waits named by its session) and
 * searches the wait-for graph the records and the lock queues describe.
 * The one member of a cycle whose record is the youngest raises 40P01.
 * A lock granted at once, and a wait shorter than deadlock_timeout, cost
 * no request.
 *
 * src/deadlock/deadlock.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_DEADLOCK_H
#define ZKLOCK_DEADLOCK_H

#include "datatype/timestamp.h"
#include "recipe/recipe.h"
#include "session/session.h"
#include "recipe/waitgraph.h"

/* One waiter's detection state (part of an attempt to lock). */
typedef struct ZkdWait
{
	TimestampTz check_at;		/* next check; 0 while not waiting */
	TimestampTz search_at;		/* next search again, or 0: none due */
	int			checks;			/* searches so far */
	char	   *record;			/* our published record's path, or NULL */
	char	   *twin;			/* its twin's (local edges listed), or NULL */
	int64		record_czxid;
	int32		record_version; /* its version as we last saw it */
	bool		rewritten;		/* another member wrote it meanwhile */
	bool		watching;		/* a data watch on our record is ours */
	bool		dirty;			/* the record must be written (beat) */
	ZksRequest *req;			/* our request of the check, while in flight */
	uint64		beat;			/* the record's, advanced at every write */
	int			listed;			/* a semaphore's leases at our last listing */
	int			nblocked;		/* the local edges the record names */
	int			blocked[ZKW_MAX_BLOCKED];
} ZkdWait;

/* The wait starts now (a no-op if it already started). */
extern void zkd_wait_begin(ZkdWait *w);

/* When the waiter must wake up: the earlier of deadline and the check. */
extern TimestampTz zkd_wake_at(ZkdWait *w, TimestampTz deadline);

/*
 * If the check is due: publish the record (first time), look at the
 * PostgreSQL-local edges and write them if they changed, search when
 * something that could close a cycle through us happened (we published,
 * those edges changed, another member woke us, or an earlier search had
 * no final answer), and raise ERROR 40P01 if this waiter is the victim of
 * a cycle seen twice.  A waiter in no cycle sends nothing after its first
 * search.  Any trouble asking ZooKeeper just defers the search.  resource
 * and mode are the lock asked for, node our waiting node's full path;
 * for a semaphore's room (mode semaphore), node is the one we hold while
 * we wait and leases the parent of its leases (NULL otherwise).
 */
extern void zkd_check(ZkdWait *w, const char *resource, const char *node,
					  ZkrMode mode, const char *leases, TimestampTz deadline);

/* The wait is over: drop the record.  Never raises ERROR. */
extern void zkd_wait_end(ZkdWait *w);

/*
 * This backend's name in owner lines and wait records: system identifier,
 * postmaster start time and pid (see ZkwBackend in waitgraph.h for why a
 * standby or a clone never shares it).
 */
extern void zkd_self(ZkwBackend *me);

#endif							/* ZKLOCK_DEADLOCK_H */
