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
 * src/recipe/waitgraph.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_WAITGRAPH_H
#define ZKLOCK_WAITGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe/recipe.h"

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

/*
 * The contenders ahead of self that hold the lock by the recipe's order
 * and mode alone (exclusive: nothing ahead of it; shared: no exclusive
 * ahead), whoever owns them: the queue's holders, every one of them
 * ahead of every waiter.  Writes their indexes to out[] (room for n) and
 * returns how many; -1 if self is not among the contenders.  Linear in n.
 */
extern int	zkw_holders_ahead(const ZkrContender *c, int n, const char *self,
							  int *out);

/*
 * A backend, as owner lines and wait records name it: a cluster instance
 * (system identifier and postmaster start time) and a pid in it.
 *
 * The pid alone names a backend only inside one postmaster, and the
 * system identifier alone does not name one postmaster: a hot standby,
 * and any cluster made from a base backup or a copy of a data directory,
 * has its original's.  Up to zklock 1.5 a backend was (system identifier,
 * pid), so a standby's backend and one of its primary's with the same pid
 * (a PID namespace each, as in containers, gives small colliding pids)
 * were one backend to the deadlock search: a false 40P01 (issue 37).
 *
 * Why two live backends never share a name now.  In one postmaster two
 * live backends have distinct pids (the kernel's, in the postmaster's PID
 * namespace, where all its backends live).  Two postmasters with
 * different system identifiers are different clusters: initdb draws it
 * from the clock and its pid, so only a copy of a cluster has another's.
 * Two postmasters of one system identifier (a primary and its standby,
 * two clones, a cluster and itself restarted) each read their start time
 * from their own clock as they start, in microseconds, and a copy's
 * postmaster can only start once the copy exists: equal names would take
 * two copies of one cluster whose postmasters read the same microsecond
 * at start, which no deployment arranges (two postmasters started by one
 * script on one host are forks and execs apart, far more than a
 * microsecond).  The host name is no help: containers share or reuse it.
 *
 * Names written by zklock 1.5 and earlier have no start time
 * (has_start false).  zkw_same_backend() matches such a name only with
 * another one without a start time, by system identifier and pid as 1.5
 * did; never with a newer name, which 1.5's could be the standby's twin
 * of.  So a newer backend is never taken for an older one: no false
 * cycle, at the cost of a cycle through a 1.5 backend and a newer one of
 * the same cluster during a rolling upgrade, which ends by its timeout.
 */
typedef struct ZkwBackend
{
	uint64_t	sysid;			/* PostgreSQL cluster's system identifier */
	bool		has_start;		/* false: named by zklock 1.5 or earlier */
	uint64_t	start;			/* postmaster start (PgStartTime, in µs) */
	int			pid;			/* backend pid */
} ZkwBackend;

/*
 * Parse a zklock node's owner line, "zklock host=<h> port=<p>
 * sysid=<u64>[ start=<u64>] pid=<int> db=... role=...
 * application_name=..." (NUL-terminated): the owner's name.  The start
 * time is read only where it follows the system identifier, so a
 * database or application name that holds " start=" can give an owner
 * line of 1.5 no start time.  Returns false for any other data (a
 * Curator or kazoo node's, or a line without a positive pid).
 */
extern bool zkw_parse_owner(const char *data, ZkwBackend *b);

/* Are a and b one backend (see ZkwBackend for names of 1.5)? */
extern bool zkw_same_backend(const ZkwBackend *a, const ZkwBackend *b);

/* Of one cluster instance (one postmaster): a and b, their pids aside? */
extern bool zkw_same_instance(const ZkwBackend *a, const ZkwBackend *b);

/* Backends of the waiter's cluster a record names as waiting for it. */
#define ZKW_MAX_BLOCKED 64

/* A wait record, as published by a waiter past deadlock_timeout. */
typedef struct ZkwRecord
{
	uint64_t	sysid;			/* PostgreSQL cluster's system identifier */
	bool		has_start;		/* start given (records after zklock 1.5) */
	uint64_t	start;			/* its postmaster's start (see ZkwBackend) */
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
	 * backend of its own cluster can see (deadlock.c).  Their pids are of
	 * the waiter's postmaster: each is named by (sysid, start, pid).
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
 *	 "zklock-wait sysid=<u64> [start=<u64>] pid=<int> mode=<mode>
 *	  node=<len>:<path> beat=<u64> [blocked=<pid>,<pid>...]
 *	  [leases=<len>:<path>] resource=<text>"
 * (one line; the start time is there if has_start, which every record
 * after zklock 1.5 has: 1.5 refuses such a record whole, and a 1.5
 * record, without it, still parses; the blocked list is left out when
 * empty, the leases' parent is there for mode semaphore only).  The resource
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
