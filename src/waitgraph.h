/*-------------------------------------------------------------------------
 *
 * waitgraph.h
 *	  Pure logic of zklock's deadlock detection: who waits for whom in a
 *	  lock's queue, the wait records waiters publish, the search for a
 *	  cycle through them, and the rule that picks the one victim.
 *
 * Nothing declared here calls PostgreSQL or ZooKeeper (deadlock.c does);
 * it is linked into the unit tests as well.  The caller owns all memory.
 *
 * src/waitgraph.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_WAITGRAPH_H
#define ZKLOCK_WAITGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe.h"

/*
 * The contenders a waiter waits for: every contender ahead of self that
 * conflicts with it (exclusive: all; shared: exclusive ones), except
 * those owned by the waiter's own session (a backend never conflicts
 * with its own nodes).  c[] and owners[] are parallel (owners: each
 * node's ephemeralOwner).  Writes their indexes to out[] (room for n) and
 * returns how many; -1 if self is not among the contenders.
 */
extern int	zkw_blockers(const ZkrContender *c, const int64_t *owners, int n,
						 const char *self, ZkrMode mode, int64_t self_owner,
						 int *out);

/* Backends of the waiter's cluster a record names as waiting for it. */
#define ZKW_MAX_BLOCKED 64

/* A wait record, as published by a waiter past deadlock_timeout. */
typedef struct ZkwRecord
{
	uint64_t	sysid;			/* PostgreSQL cluster's system identifier */
	int			pid;			/* backend pid */
	ZkrMode		mode;
	const char *node;			/* full path of the waiting node */
	size_t		node_len;
	const char *resource;		/* the resource as given to zk_lock_* */
	size_t		resource_len;

	/*
	 * The backends of the same cluster that wait in PostgreSQL's lock
	 * manager for this one, directly or through other backends that wait
	 * there: the PostgreSQL-local edges into this waiter, which only a
	 * backend of its own cluster can see (deadlock.c).
	 */
	int			nblocked;
	int			blocked[ZKW_MAX_BLOCKED];

	/*
	 * Advanced by the waiter at every check while it waits, and by nobody
	 * else: the proof that the wait still goes on (records of 1.4 have
	 * none, has_beat false).
	 */
	bool		has_beat;
	uint64_t	beat;

	/*
	 * A semaphore's waiter (mode semaphore) waits for room: for any one
	 * lease under this parent to go.  Its node is the one it holds while
	 * it waits (its own lease, or the semaphore's internal mutex).
	 */
	const char *leases;
	size_t		leases_len;
} ZkwRecord;

/*
 * Format a record as its node's data:
 *	 "zklock-wait sysid=<u64> pid=<int> mode=<mode> node=<len>:<path>
 *	  beat=<u64> [blocked=<pid>,<pid>...] [leases=<len>:<path>]
 *	  resource=<text>"
 * (one line; the blocked list is left out when empty, the leases' parent
 * is there for mode semaphore only).  The resource
 * comes last and runs to the end of the data (it may hold any byte).
 * Returns the length written (without NUL), or 0 if it does not fit in
 * outsize.
 */
extern size_t zkw_format_record(const ZkwRecord *r, char *out, size_t outsize);

/*
 * Parse a record's data (len bytes, need not be NUL-terminated).  The
 * record's node and resource point into data.  Returns false if it is not
 * a record: anything malformed (any client without zklock.auth_file's
 * credentials may have written it) is refused whole, never half read.
 */
extern bool zkw_parse_record(const char *data, size_t len, ZkwRecord *r);

/*
 * The wait-for graph: vertices are ZooKeeper sessions; an edge u -> v
 * means u waits for v (a node of v's is ahead of u's waiting node, or u's
 * holder backend waits in PostgreSQL's lock manager for v's backend).
 * Only vertices with a record (has_record) are waiting in zklock; their
 * record's czxid orders the waits: the greatest is the youngest.
 */
typedef struct ZkwVertex
{
	int64_t		session;
	bool		has_record;
	int64_t		record_czxid;
} ZkwVertex;

typedef struct ZkwEdge
{
	int			from;
	int			to;
} ZkwEdge;

/*
 * Find a cycle through vertex start.  Writes its vertices, start first,
 * in the order of the edges, to cycle[] (room for nv) and returns its
 * length; 0 if there is none.  Bounded by the graph's size.
 */
extern int	zkw_find_cycle(int nv, const ZkwEdge *e, int ne, int start,
						   int *cycle);

/*
 * The strongly connected component of start: the vertices start reaches
 * and that reach start.  Writes them to members[] (room for nv), start
 * first, and returns how many (1 if start is on no cycle).  Every member
 * of a component that searches from itself finds the same component, so
 * a victim chosen in it is the same for all, even where cycles overlap.
 */
extern int	zkw_component(int nv, const ZkwEdge *e, int ne, int start,
						  int *members);

/*
 * Is the component comp (ncomp vertices, from zkw_component) certainly
 * stuck?  Most vertices wait for all their successors (a lock waits for
 * every conflicting contender ahead); a vertex with any_of[v] set (a
 * semaphore's waiter) waits for any one of them (any lease going makes
 * room).  Such a vertex is stuck for good only if all its successors are
 * in the component; if one is outside and can still move, everyone in the
 * component waits, through the others, for that one.  When every any_of
 * vertex of the component has all its successors inside, nobody there can
 * move first: a deadlock.
 */
extern bool zkw_certain(int nv, const ZkwEdge *e, int ne, const int *comp,
						int ncomp, const bool *any_of);

/*
 * The victim among the members of a cycle or component: the one with a record whose wait is the
 * youngest (greatest record czxid; ZooKeeper orders every create, so all
 * members compute the same, whatever their clocks).  That member also
 * published last, so its own search sees every record of the cycle.
 * Returns an index into cycle[], or -1 if no member has a record.
 */
extern int	zkw_victim(const ZkwVertex *v, const int *cycle, int len);

#endif							/* ZKLOCK_WAITGRAPH_H */
