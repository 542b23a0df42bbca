/*-------------------------------------------------------------------------
 *
 * deadlock_int.h
 *	  What deadlock.c (detection, the victim's confirmation, 40P01) and
 *	  waitsearch.c (one search of the wait-for graph) share.
 *
 * src/deadlock/deadlock_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_DEADLOCK_INT_H
#define ZKLOCK_DEADLOCK_INT_H

#include "deadlock/deadlock.h"
#include "recipe/waitgraph.h"

/*
 * Sessions and edges one search follows.  A search that meets more leaves
 * paths out and is not final (it is made again later).  Since issue 38 a
 * queue's waiters lead to its holders only (waitsearch.c), so a long
 * queue is a few members, not one per waiter; 1.6 had an edge from each
 * waiter to everyone ahead, and a queue of 33 filled its 512 edges.
 * Edges are kept in a growing array and told apart with a bitmap of
 * MAX_MEMBERS squared bits (8 kB).
 */
#define MAX_MEMBERS		256
#define MAX_EDGES		(MAX_MEMBERS * MAX_MEMBERS)
#define MAX_RECORDS		4096	/* twins (local edges) read in one search */

/*
 * Reads of wait records in flight at once, and the most record data one
 * search keeps.  Every twin (a list of local edges) is read, and the
 * records of the sessions the search meets (ZKS_MAX_VALUE_BYTES at most
 * each), but only READ_WINDOW replies wait at once, and a search whose records
 * add up to more than MAX_SEARCH_BYTES gives up this round: zklock's own
 * records are at most a few kB, one per waiting session, so only a client
 * that writes large records under %waits (one per session it opens: a
 * record is an ephemeral node named by its owner's session) gets there.
 * Such a client can delay detection, as it can forge a cycle through
 * itself (README, Security); it cannot make every waiter allocate
 * gigabytes (4,096 records of 1 MB each before).
 */
#define READ_WINDOW		64
#define MAX_SEARCH_BYTES (16 * 1024 * 1024)

/* A session met in the search. */
typedef struct Member
{
	int64		session;
	bool		has_record;		/* waits in zklock: it published */
	int64		czxid;			/* its record's */
	bool		known;			/* who known */
	ZkwBackend	who;			/* its backend (record or owner line) */
	ZkrMode		mode;			/* what it waits for (with a record) */
	char	   *resource;
	char	   *node;
	char	   *leases;			/* a semaphore's waiter: its leases' parent */
	bool		queued;
	struct Record *rec;			/* its record, as read (with a record) */
} Member;

typedef struct Record
{
	int64		session;
	int64		czxid;
	int32		version;		/* of its data, as read */
	char	   *path;
	char	   *data;			/* as read: written back to wake its waiter */
	int			len;
	ZkwRecord	r;
} Record;

/* Result of a search: the cycle's members, in order, if we are its victim. */
typedef struct Cycle
{
	int			len;
	Member		m[MAX_MEMBERS];
	bool		pg_edge[MAX_MEMBERS];	/* edge from m[k] to m[k + 1] */
	Record	   *other;			/* else: the victim's record, to wake it */
	bool		again;			/* no final answer: search again later */
} Cycle;

/*
 * One search for a cycle through us (waitsearch.c).  Returns true and
 * fills *cycle if there is one whose victim is us; otherwise, if there is
 * one whose victim is another member, cycle->other is that member's
 * record.  Any trouble asking ZooKeeper makes it return false.  Sets
 * cycle->again unless its answer is final: no cycle through us now, and
 * none until a member publishes, writes its local edges or wakes us (see
 * deadlock.c's head comment).
 */
extern bool zkd_search(ZkdWait *w, TimestampTz deadline, Cycle *cycle);

#endif							/* ZKLOCK_DEADLOCK_INT_H */
