/*-------------------------------------------------------------------------
 *
 * deadlock.c
 *	  Deadlock detection for zklock waits: across clusters, through other
 *	  zklock backends' waits, and through PostgreSQL's own lock waits on
 *	  this cluster.
 *
 * No lock client built on ZooKeeper's recipe detects deadlocks: a waiter
 * only sees its own queue.  zklock waiters make the rest visible.  One
 * that has waited deadlock_timeout (PostgreSQL's setting) publishes a
 * wait record: an ephemeral node <zklock.root>/%waits/<session id>, whose
 * data names its cluster, pid, mode, waiting node and resource ("%" never
 * starts an encoded resource level, so no lock parent can be called
 * that).  Nobody watches these nodes, so publishing wakes nobody; the
 * record goes when the wait ends (or with the session, like every
 * ephemeral node).
 *
 * The search then follows, from our own waiting node, "waits for" edges:
 * a waiting node waits for the conflicting contenders ahead of it in its
 * queue (as the recipe says), and those belong to ZooKeeper sessions
 * (their ephemeralOwner).  A session with a record (written by
 * waitrecord.c) waits itself, for the
 * contenders ahead of its own node.  A session without one is a holder;
 * if it is a backend that waits in PostgreSQL's lock manager for a zklock
 * waiter of its own cluster (directly, or through other backends that
 * wait there), that is an edge too, but only a backend of that cluster
 * can see it.  A path back to our own session is a cycle.  Clients that
 * publish nothing (Curator, kazoo) end a path: they can be part of no
 * cycle that zklock could see.
 *
 * Every member must search the same graph, or the one that must act may
 * not see what another sees (issue 30: X on cluster A waits for H on B, H
 * waits for a row lock of W on B, W waits for X: only W could see H's
 * wait, and the rule below picked X).  So the PostgreSQL-local edges are
 * published too, by their heads: each record lists the backends of its
 * cluster that wait in the lock manager for its waiter ("blocked=", found
 * by walking pg_blocking_pids backwards from our own pid), and a search
 * takes those edges from the records only, never from what its own
 * cluster alone shows.  Every edge of the graph is then either a queue
 * in ZooKeeper or a line of a record in ZooKeeper, and two searches that
 * read the same state of the ensemble build the same graph, wherever
 * they run.  A waiter looks at the lock manager every deadlock_timeout
 * while it waits (no request unless the list changed, then one setData),
 * so a local edge that closes a cycle late is published within
 * deadlock_timeout, and the waiter then searches at once.
 *
 * Exactly one member of a cycle acts: the one whose record ZooKeeper
 * created last (greatest czxid).  Every member that sees the cycle
 * computes the same one, whatever the clocks of their hosts, and that
 * member published last, so its own search already sees every record of
 * the cycle.  A member that finds a cycle whose victim is another wakes
 * it: it writes the victim's record back unchanged (setData with the
 * version it read, so it never overwrites a newer list), which fires the
 * data watch the victim keeps on its own record, and the victim searches
 * at once instead of at its next scheduled search.  Before acting the
 * victim searches again and acts only if the same cycle, with the same
 * records, is still there: a cycle pieced together from moments apart (a
 * member granted or gone meanwhile) is not acted on.  The victim raises
 * ERROR 40P01; its node and record go, and the others proceed.
 *
 * Why no cycle is broken twice, although searchers read the ensemble at
 * different moments: a member acts only on its own search, and only if it
 * is the youngest record of everything on a cycle with it (its strongly
 * connected component, so overlapping cycles give one answer).  If two
 * members A and B both acted, each was the youngest in what it saw; if
 * each had seen the other in its component, each would be younger than
 * the other.  So one of them, say B, did not see A on a cycle with it:
 * B's cycle is another cycle, made of records and queues B read, which A
 * breaking its own leaves intact.  Why none is missed: the victim of a
 * cycle is a member with a record; once every member's record lists its
 * local edges (within deadlock_timeout of the edge closing) every search
 * that starts on the cycle finds it, each such member names the same
 * victim, and a member's search is never more than its schedule away;
 * the victim's own search, woken by the first member that sees the
 * cycle, or by its own schedule, finds it too.  A wait record that lies
 * (written by a client without zklock.auth_file's credentials, see
 * README) is read only as far as it parses, and a record whose waiting
 * node is not its own session's is ignored.
 *
 * A search is a few round trips: the records (one listing, their data
 * sent back to back), then for each waiter on the path its queue and the
 * owners of its own node and of the contenders ahead of it; a queue is
 * listed, and each of its nodes read, once per search, however many of
 * its waiters are followed.  It runs at deadlock_timeout and again at
 * growing intervals, and at once when the waiter's local edges change or
 * another member wakes it; a lock granted at once or within
 * deadlock_timeout costs nothing.
 *
 * src/deadlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "deadlock.h"
#include "waitrecord.h"
#include "waitgraph.h"
#include "zklock.h"

#define MAX_MEMBERS		64		/* sessions followed in one search */
#define MAX_EDGES		512
#define MAX_RECORDS		4096
#define MAX_INTERVAL_FACTOR 8	/* re-search at most every 8 x deadlock_timeout */
#define CONFIRM_NAP_MS	50		/* between a victim's confirming searches */

/* A session met in the search. */
typedef struct Member
{
	int64		session;
	bool		has_record;		/* waits in zklock: it published */
	int64		czxid;			/* its record's */
	bool		known;			/* sysid and pid known */
	uint64		sysid;
	int			pid;
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

/*
 * A queue listed in this search, and its nodes read so far.  Members that
 * wait in the same queue (a long line of zklock waiters) are followed
 * from one listing and one read per node: the search then costs requests
 * in proportion to the queue, not to its square.  Reading a queue once
 * per search also makes the graph one snapshot of it.  A waiter whose
 * node was created after that listing is not followed from it; that
 * cannot hide a cycle from its victim: the victim published its record
 * last, every member's node exists before the member's record, and the
 * records are read before any queue, so every member's node is in every
 * listing the victim's search takes (a member whose node is gone by then
 * has left the cycle).
 */
typedef struct Queue
{
	char	   *parent;
	bool		gone;			/* the parent no longer exists */
	int			ncs;
	ZkrContender *cs;			/* zkr_collect's, names in the search's memory */
	bool	   *read;			/* per contender: asked already */
	ZksRc	   *rc;				/* ... the answer: ZKS_OK or ZKS_NONODE */
	ZksStat    *st;
	char	  **data;
} Queue;

typedef struct Search
{
	Record	   *records;
	int			nrecords;
	Queue		q[MAX_MEMBERS];
	int			nq;
	Member		m[MAX_MEMBERS];
	int			n;
	ZkwEdge		e[MAX_EDGES];
	bool		pg_edge[MAX_EDGES];
	int			ne;
	int			queue[MAX_MEMBERS];
	int			qhead;
	int			qtail;
	TimestampTz deadline;
	bool		failed;			/* ZooKeeper did not answer as needed */
} Search;

/* Result of a search: the cycle's members, in order, if we are its victim. */
typedef struct Cycle
{
	int			len;
	Member		m[MAX_MEMBERS];
	bool		pg_edge[MAX_MEMBERS];	/* edge from m[k] to m[k + 1] */
	Record	   *other;			/* else: the victim's record, to wake it */
} Cycle;

void
zkd_wait_begin(ZkdWait *w)
{
	if (w->check_at == 0)
		w->check_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  DeadlockTimeout);
}

TimestampTz
zkd_wake_at(ZkdWait *w, TimestampTz deadline)
{
	if (w->check_at == 0)
		return deadline;
	if (zkwr_woken(w))
		return GetCurrentTimestamp();
	if (deadline == 0 || w->check_at < deadline)
		return w->check_at;
	return deadline;
}

void
zkd_wait_end(ZkdWait *w)
{
	zks_done(w->req);
	w->req = NULL;
	if (w->watching)
		zks_unwatch_node(w->record);	/* (it fires at the delete) */
	w->watching = false;
	if (w->record != NULL)
		zks_delete_async(w->record);
	w->record = NULL;
	w->check_at = 0;
	w->search_at = 0;
	w->checks = 0;
	w->nblocked = 0;
}

/* Read every record (one listing, the data sent back to back). */
static void
read_records(Search *s)
{
	char	   *parent = zkwr_waits_parent();
	ZksRequest *sreq;
	ZksRequest *lreq;
	ZksRequest **gets = NULL;
	char	  **names = NULL;
	int			n = 0;
	ZksRc		rc;

	/*
	 * A server that lags the leader could still show records of waits
	 * that have ended (and the queues as they were): sync it first, in
	 * the same round trip, so that a search sees the ensemble as of now.
	 */
	sreq = zks_send_sync(parent);
	lreq = zks_send_children(parent, false);
	rc = zks_wait(sreq, s->deadline);
	zks_done(sreq);
	if (rc != ZKS_OK)
	{
		zks_done(lreq);
		s->failed = true;
		return;
	}
	rc = zks_wait(lreq, s->deadline);
	if (rc == ZKS_OK)
		names = zks_get_children(lreq, &n);
	zks_done(lreq);
	if (rc != ZKS_OK)
	{
		s->failed = true;
		return;
	}
	n = Min(n, MAX_RECORDS);
	s->records = palloc0(sizeof(Record) * Max(n, 1));
	gets = palloc0(sizeof(ZksRequest *) * Max(n, 1));
	PG_TRY();
	{
		for (int i = 0; i < n; i++)
			gets[i] = zks_send_get(psprintf("%s/%s", parent, names[i]));
		for (int i = 0; i < n; i++)
		{
			Record	   *rec = &s->records[s->nrecords];
			ZksStat		st;
			char	   *data;
			int			len;
			char	   *end;

			rc = zks_wait(gets[i], s->deadline);
			if (rc == ZKS_NONODE)
				continue;		/* its wait ended meanwhile */
			if (rc != ZKS_OK)
			{
				s->failed = true;
				break;
			}
			zks_get_stat(gets[i], &st);
			data = zks_get_data(gets[i], &len);
			rec->session = (int64) strtoull(names[i], &end, 16);
			if (*end != '\0' || rec->session != st.ephemeral_owner ||
				!zkw_parse_record(data, len, &rec->r))
				continue;		/* not a record of ours */
			rec->czxid = st.czxid;
			rec->version = st.version;
			rec->path = psprintf("%s/%s", parent, names[i]);
			rec->data = data;
			rec->len = len;
			s->nrecords++;
		}
	}
	PG_FINALLY();
	{
		for (int i = 0; i < n; i++)
			zks_done(gets[i]);
	}
	PG_END_TRY();
}

static Record *
record_of_session(Search *s, int64 session)
{
	for (int i = 0; i < s->nrecords; i++)
		if (s->records[i].session == session)
			return &s->records[i];
	return NULL;
}

/* The member for session, added (and queued) if new; -1 if full. */
static int
member(Search *s, int64 session)
{
	Member	   *m;
	Record	   *rec;

	for (int i = 0; i < s->n; i++)
		if (s->m[i].session == session)
			return i;
	if (s->n == MAX_MEMBERS)
		return -1;
	m = &s->m[s->n];
	memset(m, 0, sizeof(Member));
	m->session = session;
	rec = record_of_session(s, session);
	if (rec != NULL)
	{
		m->rec = rec;
		m->has_record = true;
		m->czxid = rec->czxid;
		m->known = true;
		m->sysid = rec->r.sysid;
		m->pid = rec->r.pid;
		m->mode = rec->r.mode;
		m->node = pnstrdup(rec->r.node, rec->r.node_len);
		m->resource = pnstrdup(rec->r.resource, rec->r.resource_len);
		if (rec->r.leases != NULL)
			m->leases = pnstrdup(rec->r.leases, rec->r.leases_len);
		m->queued = true;
		s->queue[s->qtail++] = s->n;
	}
	return s->n++;
}

static void
add_edge(Search *s, int from, int to, bool pg)
{
	if (from < 0 || to < 0 || s->ne == MAX_EDGES)
		return;
	for (int i = 0; i < s->ne; i++)
		if (s->e[i].from == from && s->e[i].to == to)
			return;
	s->e[s->ne].from = from;
	s->e[s->ne].to = to;
	s->pg_edge[s->ne] = pg;
	s->ne++;
}

/*
 * A zklock holder (a member without a record, of cluster sysid, backend
 * pid): the records that list it as waiting for their waiter in its
 * cluster's lock manager give its PostgreSQL-local edges.  Only records
 * are asked, never this backend's own lock manager, so that every
 * member's search builds the same graph (see the head comment).
 */
static void
pg_edges_from(Search *s, int holder, uint64 sysid, int pid)
{
	for (int i = 0; i < s->nrecords; i++)
	{
		const ZkwRecord *r = &s->records[i].r;

		if (r->sysid != sysid)
			continue;
		for (int k = 0; k < r->nblocked; k++)
			if (r->blocked[k] == pid)
				add_edge(s, holder, member(s, s->records[i].session), true);
	}
}

/* Owner line of a zklock node: "zklock host=... sysid=N pid=P ..." */
bool
zkd_parse_owner(const char *data, uint64 *sysid, int *pid)
{
	const char *s;
	const char *p;

	if (strncmp(data, "zklock ", 7) != 0 ||
		(s = strstr(data, " sysid=")) == NULL ||
		(p = strstr(data, " pid=")) == NULL)
		return false;
	*sysid = strtoull(s + 7, NULL, 10);
	*pid = (int) strtol(p + 5, NULL, 10);
	return *pid > 0;
}

/*
 * The queue under parent, listed the first time a search meets it; NULL
 * if it cannot be listed now (s->failed set) or the search is full.
 */
static Queue *
queue_of(Search *s, const char *parent)
{
	Queue	   *q;
	ZksRequest *lreq;
	char	  **children = NULL;
	int			nchildren = 0;
	ZksRc		rc;

	for (int i = 0; i < s->nq; i++)
		if (strcmp(s->q[i].parent, parent) == 0)
			return &s->q[i];
	if (s->nq == MAX_MEMBERS)
		return NULL;

	lreq = zks_send_children(parent, false);
	rc = zks_wait(lreq, s->deadline);
	if (rc == ZKS_OK)
		children = zks_get_children(lreq, &nchildren);
	zks_done(lreq);
	if (rc != ZKS_OK && rc != ZKS_NONODE)
	{
		s->failed = true;
		return NULL;
	}

	q = &s->q[s->nq++];
	memset(q, 0, sizeof(Queue));
	q->parent = pstrdup(parent);
	q->gone = (rc == ZKS_NONODE);
	q->cs = palloc(sizeof(ZkrContender) * Max(nchildren, 1));
	q->ncs = zkr_collect((const char *const *) children, nchildren, q->cs);
	q->read = palloc0(sizeof(bool) * Max(q->ncs, 1));
	q->rc = palloc0(sizeof(ZksRc) * Max(q->ncs, 1));
	q->st = palloc0(sizeof(ZksStat) * Max(q->ncs, 1));
	q->data = palloc0(sizeof(char *) * Max(q->ncs, 1));
	return q;
}

/*
 * Read the nodes of q at the indexes idx[] not read yet in this search:
 * their owners (ephemeralOwner) and data, the requests sent back to back.
 */
static void
read_nodes(Search *s, Queue *q, const int *idx, int n)
{
	ZksRequest **gets = palloc0(sizeof(ZksRequest *) * Max(n, 1));

	PG_TRY();
	{
		for (int i = 0; i < n; i++)
			if (!q->read[idx[i]])
				gets[i] = zks_send_get(psprintf("%s/%s", q->parent,
												q->cs[idx[i]].name));
		for (int i = 0; i < n && !s->failed; i++)
		{
			int			c = idx[i];
			ZksRc		rc;
			int			len;

			if (gets[i] == NULL)
				continue;
			rc = zks_wait(gets[i], s->deadline);
			if (rc != ZKS_OK && rc != ZKS_NONODE)
			{
				s->failed = true;
				break;
			}
			q->read[c] = true;
			q->rc[c] = rc;
			if (rc == ZKS_OK)
			{
				zks_get_stat(gets[i], &q->st[c]);
				q->data[c] = zks_get_data(gets[i], &len);
			}
		}
	}
	PG_FINALLY();
	{
		for (int i = 0; i < n; i++)
			zks_done(gets[i]);
	}
	PG_END_TRY();
}

static void expand_semaphore(Search *s, int u);

/*
 * u waits for a node of session owner, whose data is data: the edge, and
 * for a session met for the first time without a record (a holder), the
 * PostgreSQL-local edges the records give it.
 */
static void
meet_owner(Search *s, int u, int64 owner, const char *data)
{
	int			v;
	uint64		sysid;
	int			pid;

	if (owner == s->m[u].session || owner == 0)
		return;					/* its own node, or no session's */
	v = member(s, owner);
	if (v < 0)
		return;
	add_edge(s, u, v, false);
	if (!s->m[v].known && zkd_parse_owner(data, &sysid, &pid))
	{
		s->m[v].known = true;
		s->m[v].sysid = sysid;
		s->m[v].pid = pid;
		if (!s->m[v].has_record && !s->m[v].queued)
		{
			s->m[v].queued = true;
			pg_edges_from(s, v, sysid, pid);
		}
	}
}

/* Edges out of waiting member u: the owners of the contenders ahead. */
static void
expand(Search *s, int u)
{
	const char *node = s->m[u].node;
	const char *slash = strrchr(node, '/');
	Queue	   *q;
	int64	   *nobody;
	int		   *ahead;
	int			nahead;
	int			me;

	if (s->m[u].leases != NULL)
	{
		expand_semaphore(s, u);
		return;
	}
	if (slash == NULL || slash == node)
		return;
	q = queue_of(s, pnstrdup(node, slash - node));
	if (q == NULL || q->gone)
		return;					/* (its queue is gone: no longer waits) */

	nobody = palloc0(sizeof(int64) * Max(q->ncs, 1));
	ahead = palloc(sizeof(int) * (Max(q->ncs, 1) + 1));
	/* by position and mode first; whose they are is asked below */
	nahead = zkw_blockers(q->cs, nobody, q->ncs, slash + 1, s->m[u].mode, -1,
						  ahead);
	if (nahead <= 0)
		return;					/* granted meanwhile, or gone */

	/*
	 * The waiting node must be the member's own: a record naming another
	 * session's node (one written by hand, see README) waits for nothing.
	 */
	for (me = 0; me < q->ncs; me++)
		if (strcmp(q->cs[me].name, slash + 1) == 0)
			break;
	ahead[nahead] = me;
	read_nodes(s, q, ahead, nahead + 1);
	if (s->failed || q->rc[me] != ZKS_OK ||
		q->st[me].ephemeral_owner != s->m[u].session)
		return;
	for (int i = 0; i < nahead && !s->failed; i++)
	{
		int			c = ahead[i];

		if (q->rc[c] == ZKS_OK)
			meet_owner(s, u, q->st[c].ephemeral_owner, q->data[c]);
	}
}

/*
 * Edges out of a semaphore's waiter u: it waits for room, that is for any
 * one of the leases under its leases' parent to go (kazoo and Curator
 * alike).  An edge to each lease's owner; search() treats u as waiting for
 * all of them at once only where that is certain (see there).
 */
static void
expand_semaphore(Search *s, int u)
{
	Member	   *mu = &s->m[u];
	ZksRequest *own;
	ZksRequest *lreq;
	ZksRequest **gets = NULL;
	char	  **volatile names = NULL;
	int			n = 0;
	ZksRc		orc;
	ZksRc		lrc;

	/* the node it holds must be its own; its leases, one listing */
	own = zks_send_get(mu->node);
	lreq = zks_send_children(mu->leases, false);
	orc = zks_wait(own, s->deadline);
	lrc = zks_wait(lreq, s->deadline);
	if (orc == ZKS_OK)
	{
		ZksStat		st;

		zks_get_stat(own, &st);
		if (st.ephemeral_owner != mu->session)
			orc = ZKS_NONODE;	/* not its node: it waits for nothing */
	}
	if (lrc == ZKS_OK)
		names = zks_get_children(lreq, &n);
	zks_done(own);
	zks_done(lreq);
	if ((orc != ZKS_OK && orc != ZKS_NONODE) ||
		(lrc != ZKS_OK && lrc != ZKS_NONODE))
	{
		s->failed = true;
		return;
	}
	if (orc != ZKS_OK || lrc != ZKS_OK)
		return;					/* its wait is over */

	gets = palloc0(sizeof(ZksRequest *) * Max(n, 1));
	PG_TRY();
	{
		for (int i = 0; i < n; i++)
			gets[i] = zks_send_get(psprintf("%s/%s", mu->leases, names[i]));
		for (int i = 0; i < n && !s->failed; i++)
		{
			ZksRc		rc = zks_wait(gets[i], s->deadline);
			ZksStat		st;
			int			len;

			if (rc == ZKS_NONODE)
				continue;		/* gone meanwhile: room is coming */
			if (rc != ZKS_OK)
			{
				s->failed = true;
				break;
			}
			zks_get_stat(gets[i], &st);
			meet_owner(s, u, st.ephemeral_owner, zks_get_data(gets[i], &len));
		}
	}
	PG_FINALLY();
	{
		for (int i = 0; i < n; i++)
			zks_done(gets[i]);
	}
	PG_END_TRY();
}

/*
 * Search for a cycle through us.  Returns true and fills *cycle if there
 * is one whose victim is us.
 */
static bool
search(ZkdWait *w, TimestampTz deadline, Cycle *cycle)
{
	Search	   *s = palloc0(sizeof(Search));
	ZkwVertex  *v;
	int		   *cyc;
	int			len;
	int			victim;

	s->deadline = deadline;
	read_records(s);
	if (s->failed)
		return false;
	if (record_of_session(s, zks_session_id()) == NULL)
	{
		/*
		 * Our record is gone (a sweep for an earlier create of it whose
		 * reply was lost can delete it): publish it again next time.
		 */
		w->record = NULL;
		return false;
	}
	(void) member(s, zks_session_id());	/* index 0: us */
	while (s->qhead < s->qtail && !s->failed)
	{
		CHECK_FOR_INTERRUPTS();
		expand(s, s->queue[s->qhead++]);
	}
	if (s->failed)
		return false;

	v = palloc(sizeof(ZkwVertex) * s->n);
	for (int i = 0; i < s->n; i++)
	{
		v[i].session = s->m[i].session;
		v[i].has_record = s->m[i].has_record;
		v[i].record_czxid = s->m[i].czxid;
	}
	cyc = palloc(sizeof(int) * s->n);
	len = zkw_find_cycle(s->n, s->e, s->ne, 0, cyc);
	if (len == 0)
		return false;

	/*
	 * The victim is chosen over everything on a cycle with us (our
	 * strongly connected component), not over the one cycle the search
	 * happened to find: where cycles overlap, members that found
	 * different cycles still agree.
	 */
	{
		int		   *comp = palloc(sizeof(int) * s->n);
		int			ncomp = zkw_component(s->n, s->e, s->ne, 0, comp);
		bool	   *any_of = palloc0(sizeof(bool) * s->n);

		/* a semaphore's waiter needs only one of its holders to go */
		for (int i = 0; i < s->n; i++)
			any_of[i] = (s->m[i].leases != NULL);
		if (!zkw_certain(s->n, s->e, s->ne, comp, ncomp, any_of))
			return false;

		victim = zkw_victim(v, comp, ncomp);
		if (victim < 0)
			return false;
		if (comp[victim] != 0)
		{
			/* another member acts: the caller wakes it */
			cycle->other = record_of_session(s, s->m[comp[victim]].session);
			return false;
		}
	}

	cycle->len = len;
	for (int k = 0; k < len; k++)
	{
		int			next = cyc[(k + 1) % len];

		cycle->m[k] = s->m[cyc[k]];
		cycle->pg_edge[k] = false;
		for (int i = 0; i < s->ne; i++)
			if (s->e[i].from == cyc[k] && s->e[i].to == next)
				cycle->pg_edge[k] = s->pg_edge[i];
	}
	return true;
}

/* The same members with the same records, in any order? */
static bool
same_cycle(const Cycle *a, const Cycle *b)
{
	if (a->len != b->len)
		return false;
	for (int i = 0; i < a->len; i++)
	{
		bool		found = false;

		for (int j = 0; j < b->len && !found; j++)
			found = a->m[i].session == b->m[j].session &&
				a->m[i].has_record == b->m[j].has_record &&
				a->m[i].czxid == b->m[j].czxid;
		if (!found)
			return false;
	}
	return true;
}

static void
describe_member(StringInfo buf, const Member *m)
{
	if (m->known)
		appendStringInfo(buf, _("process %d of cluster %llu"), m->pid,
						 (unsigned long long) m->sysid);
	else
		appendStringInfo(buf, _("ZooKeeper session 0x%llx"),
						 (unsigned long long) m->session);
}

static void
deadlock_error(const Cycle *c)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int k = 0; k < c->len; k++)
	{
		const Member *m = &c->m[k];
		const Member *next = &c->m[(k + 1) % c->len];

		if (k > 0)
			appendStringInfoChar(&buf, '\n');
		if (m->has_record && m->leases != NULL)
		{
			describe_member(&buf, m);
			appendStringInfo(&buf, _(" waits for room in zklock semaphore \"%s\", whose holders are all in this cycle; one of them is "),
							 m->resource);
		}
		else if (m->has_record)
		{
			describe_member(&buf, m);
			appendStringInfo(&buf, _(" waits for %s zklock on \"%s\"; blocked by "),
							 zkr_mode_name(m->mode), m->resource);
		}
		else
		{
			describe_member(&buf, m);
			appendStringInfoString(&buf, c->pg_edge[k] ?
								   _(" holds a zklock and waits for a PostgreSQL lock; blocked by ") :
								   _(" holds a zklock; blocked by "));
		}
		describe_member(&buf, next);
		appendStringInfoChar(&buf, '.');
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail_internal("%s", buf.data),
			 errhint("This wait was chosen to end the cycle (the youngest wait in it); the other members proceed.")));
}

/*
 * Has every other member with a record beaten since the first search?
 * Only a waiter that is connected and still in its wait advances its
 * beat.  A record that outlives its wait (its owner's connection is down,
 * so the delete waits for the reconnect, or the session expiry) shows a
 * wait that no longer exists; so does the record of a member whose wait
 * ended in an error it caught.  A cycle through such a record is no
 * deadlock, and acting on it would abort a member for nothing (issue 30).
 */
static bool
beats_advanced(const Cycle *first, const Cycle *again)
{
	for (int i = 0; i < again->len; i++)
	{
		const Member *m = &again->m[i];
		bool		beat = false;

		if (!m->has_record || m->session == zks_session_id())
			continue;
		for (int j = 0; j < first->len && !beat; j++)
			beat = first->m[j].session == m->session &&
				m->rec->r.has_beat && first->m[j].rec->r.has_beat &&
				m->rec->r.beat > first->m[j].rec->r.beat;
		if (!beat)
			return false;
	}
	return true;
}

void
zkd_check(ZkdWait *w, const char *resource, const char *node, ZkrMode mode,
		  const char *leases, TimestampTz deadline)
{
	Cycle	   *first;
	int			factor;
	int			blocked[ZKW_MAX_BLOCKED];
	int			nblocked;
	bool		changed;
	bool		due;
	bool		written;
	TimestampTz now = GetCurrentTimestamp();
	MemoryContext cxt;
	MemoryContext old;
	ZksActivity was;

	if (w->check_at == 0 || (now < w->check_at && !zkwr_woken(w)))
		return;
	/* (an ERROR leaves it set: the transaction's end resets it) */
	was = zks_set_activity(ZKS_ACTIVITY_DEADLOCK);
	w->check_at = TimestampTzPlusMilliseconds(now, DeadlockTimeout);

	/* what a check reads is dropped with it (an ERROR drops it too) */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "zklock deadlock search",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);

	/* our PostgreSQL-local edges, as the lock manager shows them now */
	nblocked = zkwr_local_blocked(blocked);
	changed = (nblocked != w->nblocked ||
			   memcmp(blocked, w->blocked, sizeof(int) * nblocked) != 0);
	w->nblocked = nblocked;
	memcpy(w->blocked, blocked, sizeof(int) * nblocked);
	due = zkwr_woken(w) || changed || w->search_at == 0 || now >= w->search_at;

	/* publish, or beat (with the list as it is now) */
	w->beat++;
	if (w->record == NULL)
	{
		/* the record's path outlives this check */
		MemoryContextSwitchTo(old);
		written = zkwr_publish(w, resource, node, mode, leases, deadline);
		MemoryContextSwitchTo(cxt);
		due = true;
	}
	else
		written = zkwr_refresh(w, resource, node, mode, leases, deadline);
	if (!written)
	{
		/* (a record gone is published next time) */
		if (w->watching)
			zks_unwatch_node(w->record);
		w->watching = false;	/* no new check before check_at */
		goto out;
	}
	zkwr_watch_own(w, deadline);
	if (!due)
		goto out;

	w->checks++;
	factor = Min(1 << Min(w->checks, 10), MAX_INTERVAL_FACTOR);
	w->search_at = TimestampTzPlusMilliseconds(now,
											   (int64) DeadlockTimeout * factor);
	first = palloc0(sizeof(Cycle));
	if (search(w, deadline, first))
	{
		/*
		 * We are the victim of what we see.  Act only once every other
		 * member has shown that its wait goes on (beats_advanced): wake
		 * them, so that they beat now rather than at their next check,
		 * and search again until they have, the same cycle with the same
		 * records, for at most deadlock_timeout; the next check tries
		 * again after that.
		 */
		TimestampTz limit = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														DeadlockTimeout);

		for (int k = 0; k < first->len; k++)
			if (first->m[k].has_record && first->m[k].session != zks_session_id())
				zkwr_wake(first->m[k].rec->path, first->m[k].rec->data,
						  first->m[k].rec->len, first->m[k].rec->version);
		for (;;)
		{
			Cycle	   *again = palloc0(sizeof(Cycle));
			TimestampTz nap = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  CONFIRM_NAP_MS);

			(void) zks_wait_event(zks_event_mark(), Min(nap, limit));
			if (!search(w, deadline, again) || !same_cycle(first, again))
				break;			/* gone, or no longer ours to break */
			if (beats_advanced(first, again))
				deadlock_error(again);
			if (GetCurrentTimestamp() >= limit)
				break;
		}
	}
	else if (first->other != NULL)
		zkwr_wake(first->other->path, first->other->data,
				  first->other->len, first->other->version);

out:
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	zks_set_activity(was);
}
