/*-------------------------------------------------------------------------
 *
 * waitsearch.c
 *	  One search of the wait-for graph for deadlock.c: the wait records,
 *	  the queues and leases they name, the owners of the nodes ahead, and
 *	  the PostgreSQL-local edges the records list; then the cycle through
 *	  us, its component and its victim.
 *
 * The argument for what a search sees and why every member that reads
 * the same state builds the same graph is in deadlock.c's head comment.
 *
 * src/deadlock/waitsearch.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "deadlock/deadlock_int.h"
#include "deadlock/waitrecord.h"

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
	char	   *parent;			/* the records' */
	int64	   *listed_sessions;	/* whose records the listing showed */
	int			nlisted;
	Record	  **cache;			/* records read (NULL: the session has none) */
	int64	   *cached;			/* ... of these sessions */
	int			ncache;
	int			cache_room;
	Record	   *twins;			/* the lists of local edges, all read */
	int			ntwins;
	int64		kept;			/* bytes of record data read */
	Queue		q[MAX_MEMBERS];
	int			nq;
	Member		m[MAX_MEMBERS];
	int			n;
	ZkwEdge    *e;				/* grown as needed, MAX_EDGES at most */
	bool	   *pg_edge;
	int			ne;
	int			edge_room;
	uint8	   *adjacent;		/* bit from * MAX_MEMBERS + to: an edge */
	int			queue[MAX_MEMBERS];
	int			qhead;
	int			qtail;
	TimestampTz deadline;
	int			listed;			/* our own semaphore wait's last listing */
	bool		failed;			/* ZooKeeper did not answer as needed */
	bool		incomplete;		/* a path left out: the answer is not final */
	bool		own_twin;		/* the listing shows our own twin */
} Search;

/*
 * Is this reply a wait record of session (named so, owned by it, and
 * parsing as one)?  Fills rec if so.  A record that does not parse was
 * not written by zklock (README, Security): read as no record.
 */
static bool
take_record(Search *s, ZksRequest *get, const char *name, int64 session,
			Record *rec)
{
	ZksStat		st;
	char	   *data;
	int			len;

	zks_get_stat(get, &st);
	data = zks_get_data(get, &len);
	if (session != st.ephemeral_owner || !zkw_parse_record(data, len, &rec->r))
	{
		pfree(data);
		return false;
	}
	s->kept += len;
	if (s->kept > MAX_SEARCH_BYTES)
	{
		s->failed = true;
		return false;
	}
	rec->session = session;
	rec->czxid = st.czxid;
	rec->version = st.version;
	rec->path = psprintf("%s/%s", s->parent, name);
	rec->data = data;
	rec->len = len;
	return true;
}

/*
 * List the records (with a sync first, in the same round trip), and read
 * the lists of PostgreSQL-local edges ("<session>-blocked" beside a
 * record whose list is not empty, see waitrecord.c), sent back to back.
 * The records themselves are read when the search meets their sessions.
 */
static void
list_records(Search *s)
{
	ZksRequest *sreq;
	ZksRequest *lreq;
	ZksRequest **gets = NULL;
	char	  **names = NULL;
	char	  **twin_names;
	int64	   *twin_sessions;
	volatile int ntwin_names = 0;
	int			n = 0;
	ZksRc		rc;

	/*
	 * A server that lags the leader could still show records of waits
	 * that have ended (and the queues as they were): sync it first, in
	 * the same round trip, so that a search sees the ensemble as of now.
	 */
	s->parent = zkwr_waits_parent();
	sreq = zks_send_sync(s->parent);
	lreq = zks_send_children(s->parent, false);
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

	s->listed_sessions = palloc(sizeof(int64) * Max(n, 1));
	twin_names = palloc(sizeof(char *) * Max(n, 1));
	twin_sessions = palloc(sizeof(int64) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		char	   *end;
		int64		session = (int64) strtoull(names[i], &end, 16);

		if (end == names[i])
			continue;			/* not a record of ours */
		if (*end == '\0')
			s->listed_sessions[s->nlisted++] = session;
		else if (strcmp(end, ZKWR_TWIN_SUFFIX) != 0)
			continue;
		else if (ntwin_names == MAX_RECORDS)
			s->incomplete = true;	/* (lists left out: not final) */
		else
		{
			s->own_twin |= (session == zks_session_id());
			twin_names[ntwin_names] = names[i];
			twin_sessions[ntwin_names++] = session;
		}
	}

	s->twins = palloc0(sizeof(Record) * Max(ntwin_names, 1));
	gets = palloc0(sizeof(ZksRequest *) * Max(ntwin_names, 1));
	PG_TRY();
	{
		/* READ_WINDOW reads in flight, the next sent as each is read */
		for (int i = 0; i < ntwin_names && i < READ_WINDOW; i++)
			gets[i] = zks_send_get(psprintf("%s/%s", s->parent, twin_names[i]));
		for (int i = 0; i < ntwin_names && !s->failed; i++)
		{
			if (i + READ_WINDOW < ntwin_names)
				gets[i + READ_WINDOW] =
					zks_send_get(psprintf("%s/%s", s->parent,
										  twin_names[i + READ_WINDOW]));
			rc = zks_wait(gets[i], s->deadline);
			if (rc == ZKS_NONODE)
				continue;		/* its list emptied, or its wait ended */
			if (rc != ZKS_OK)
			{
				s->failed = true;
				break;
			}
			if (take_record(s, gets[i], twin_names[i], twin_sessions[i],
							&s->twins[s->ntwins]))
				s->ntwins++;
		}
	}
	PG_FINALLY();
	{
		for (int i = 0; i < ntwin_names; i++)
			zks_done(gets[i]);
	}
	PG_END_TRY();
}

/* Did the listing show a record of session? */
static bool
session_listed(Search *s, int64 session)
{
	for (int i = 0; i < s->nlisted; i++)
		if (s->listed_sessions[i] == session)
			return true;
	return false;
}

/*
 * The record of session, read the first time it is asked for; NULL if it
 * has none (not in the listing: no request), it went since, or it is not
 * a record of ours.  A record published after the listing is not seen:
 * that cannot hide a cycle from the search of the member that closed it
 * (deadlock.c's head comment), which listed after its own write.
 */
static Record *
record_of_session(Search *s, int64 session)
{
	bool		listed = false;
	char	   *name;
	ZksRequest *get;
	Record	   *rec;
	volatile ZksRc rc = ZKS_OK;

	for (int i = 0; i < s->ncache; i++)
		if (s->cached[i] == session)
			return s->cache[i];
	listed = session_listed(s, session);
	if (!listed || s->failed)
		return NULL;
	if (s->ncache == s->cache_room)
	{
		s->cache_room = Max(16, s->cache_room * 2);
		s->cache = s->cache ? repalloc(s->cache, sizeof(Record *) * s->cache_room) :
			palloc(sizeof(Record *) * s->cache_room);
		s->cached = s->cached ? repalloc(s->cached, sizeof(int64) * s->cache_room) :
			palloc(sizeof(int64) * s->cache_room);
	}

	name = psprintf("%016llx", (unsigned long long) session);
	rec = palloc0(sizeof(Record));
	get = zks_send_get(psprintf("%s/%s", s->parent, name));
	PG_TRY();
	{
		rc = zks_wait(get, s->deadline);
		if (rc == ZKS_OK && !take_record(s, get, name, session, rec))
			rc = ZKS_NONODE;
		else if (rc != ZKS_OK && rc != ZKS_NONODE)
			s->failed = true;
	}
	PG_FINALLY();
	{
		zks_done(get);
	}
	PG_END_TRY();
	if (s->failed)
		return NULL;			/* (not kept: the search is over) */
	s->cached[s->ncache] = session;
	s->cache[s->ncache++] = (rc == ZKS_OK) ? rec : NULL;
	return s->cache[s->ncache - 1];
}

/*
 * Is this twin the list of its owner's wait as it is now?  A twin is
 * written just before its record, with the same data, and deleted just
 * before the record is written without a list; so one that differs from
 * the record read in this same search is a list of another moment: being
 * replaced, being deleted (the member was woken by a victim and its list
 * emptied: the twin read before the delete, the record after its beat),
 * or left by an earlier wait of that session.  Its edges are not used,
 * and the search is not final.
 */
static bool
twin_is_current(Search *s, const Record *twin)
{
	Record	   *rec = record_of_session(s, twin->session);

	if (rec != NULL && rec->len == twin->len &&
		memcmp(rec->data, twin->data, twin->len) == 0)
		return true;
	s->incomplete = true;
	return false;
}

/* Does a current twin list backend who as waiting in the lock manager? */
static bool
listed_as_blocked(Search *s, const ZkwBackend *who, int twin)
{
	const ZkwRecord *r = &s->twins[twin].r;
	ZkwBackend	b;

	b.sysid = r->sysid;
	b.has_start = r->has_start;
	b.start = r->start;
	for (int k = 0; k < r->nblocked; k++)
	{
		b.pid = r->blocked[k];
		if (zkw_same_backend(&b, who))
			return true;
	}
	return false;
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
	{
		s->incomplete = true;
		return -1;
	}
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
		m->who.sysid = rec->r.sysid;
		m->who.has_start = rec->r.has_start;
		m->who.start = rec->r.start;
		m->who.pid = rec->r.pid;
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
	int			bit = from * MAX_MEMBERS + to;

	if (from < 0 || to < 0)
		return;
	if (s->adjacent[bit / 8] & (1 << (bit % 8)))
		return;
	if (s->ne == MAX_EDGES)
	{
		s->incomplete = true;
		return;
	}
	if (s->ne == s->edge_room)
	{
		s->edge_room *= 2;
		s->e = repalloc(s->e, sizeof(ZkwEdge) * s->edge_room);
		s->pg_edge = repalloc(s->pg_edge, sizeof(bool) * s->edge_room);
	}
	s->adjacent[bit / 8] |= (1 << (bit % 8));
	s->e[s->ne].from = from;
	s->e[s->ne].to = to;
	s->pg_edge[s->ne] = pg;
	s->ne++;
}

/*
 * A zklock holder (a member without a record, backend who): the records
 * that list it as waiting for their waiter in its cluster's lock manager
 * give its PostgreSQL-local edges.  Only records are asked, never this
 * backend's own lock manager, so that every member's search builds the
 * same graph (see the head comment).
 *
 * A record's blocked pids are of its waiter's postmaster, so the holder
 * must be of that very instance, not merely of its system identifier: a
 * hot standby holder whose pid equals that of a primary backend blocked
 * in the primary's lock manager made a cycle that did not exist up to
 * zklock 1.5 (issue 37; zkw_same_backend says how names of 1.5 match).
 */
static void
pg_edges_from(Search *s, int holder, const ZkwBackend *who)
{
	for (int i = 0; i < s->ntwins && !s->failed; i++)
		if (listed_as_blocked(s, who, i) && twin_is_current(s, &s->twins[i]))
			add_edge(s, holder, member(s, s->twins[i].session), true);
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
	{
		s->incomplete = true;
		return NULL;
	}

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
	ZkwBackend	who;

	if (owner == s->m[u].session || owner == 0)
		return;					/* its own node, or no session's */

	/*
	 * A session that publishes no record and that no twin lists (a holder
	 * that waits for nothing, a client that publishes nothing) has no edge
	 * out: it can be on no cycle, so it takes no member's place.  Hundreds
	 * of shared holders or leases would fill the table otherwise, and a
	 * search that left paths out is made again and again.  Not for a
	 * semaphore's waiter: it waits for any one of its holders to go, so
	 * every holder must be in the graph, those free to go included
	 * (zkw_certain), or one on a cycle would look like all of them.
	 */
	if (s->m[u].leases == NULL && !session_listed(s, owner))
	{
		bool		blocked = false;

		if (zkw_parse_owner(data, &who))
			for (int i = 0; i < s->ntwins && !blocked; i++)
				blocked = listed_as_blocked(s, &who, i);
		if (!blocked)
			return;
	}
	v = member(s, owner);
	if (v < 0)
		return;
	add_edge(s, u, v, false);
	if (!s->m[v].known && zkw_parse_owner(data, &who))
	{
		s->m[v].known = true;
		s->m[v].who = who;
		if (!s->m[v].has_record && !s->m[v].queued)
		{
			s->m[v].queued = true;
			pg_edges_from(s, v, &who);
		}
	}
}

/*
 * Edges out of waiting member u: the owners of the queue's holders ahead.
 *
 * A member whose record shows a wait that is over (its queue or node
 * gone, or granted) makes the answer not final: its record may outlive
 * the wait (its delete waits for a reconnect), and meanwhile the record
 * hides what the session does now, a wait in PostgreSQL's lock manager
 * included; the delete that ends that is a write followed by no search
 * (the review of issue 38).  The search is made again, as in 1.6.
 */
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
	if (q == NULL)
		return;
	if (q->gone)
	{
		s->incomplete = true;	/* no longer waits (see above) */
		return;
	}

	nobody = palloc0(sizeof(int64) * Max(q->ncs, 1));
	ahead = palloc(sizeof(int) * (Max(q->ncs, 1) + 1));
	/* by position and mode first; whose they are is asked below */
	nahead = zkw_blockers(q->cs, nobody, q->ncs, slash + 1, s->m[u].mode, -1,
						  ahead);
	if (nahead <= 0)
	{
		s->incomplete = true;	/* granted meanwhile, or gone */
		return;
	}

	/*
	 * Edges to the queue's holders alone, not to the waiters between
	 * (issue 38).  A waiter ahead of u waits in this queue for contenders
	 * ahead of it, so nothing outside the queue is reached through it
	 * that is not reached through the holders: its session waits for
	 * nothing else (a backend waits for one thing at a time; a node of
	 * its own in the same queue either is granted at once or ends the
	 * call with 40P01 at once, see acquire.c), and every holder is
	 * ahead of every waiter.  A shared u waits for the exclusive waiter
	 * ahead of it, which waits for the shared holders: u waits for them
	 * too, even behind a client that publishes nothing.  So a cycle
	 * through u exists in this graph exactly when it does with an edge to
	 * every conflicting contender ahead, and every member builds it alike;
	 * only a waiter between u and the holders is in no cycle through u
	 * here.  A search then reads the holders' nodes and records, not the
	 * queue's: one search of a waiter behind K others cost 2K reads.
	 */
	nahead = zkw_holders_ahead(q->cs, q->ncs, slash + 1, ahead);
	if (nahead <= 0)
	{
		s->incomplete = true;
		return;
	}

	/*
	 * The waiting node must be the member's own: a record naming another
	 * session's node (one written by hand, see README) waits for nothing.
	 */
	for (me = 0; me < q->ncs; me++)
		if (strcmp(q->cs[me].name, slash + 1) == 0)
			break;
	ahead[nahead] = me;
	read_nodes(s, q, ahead, nahead + 1);
	if (s->failed)
		return;
	if (q->rc[me] != ZKS_OK || q->st[me].ephemeral_owner != s->m[u].session)
	{
		s->incomplete = true;
		return;
	}
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
	{
		s->incomplete = true;	/* its wait is over */
		return;
	}

	gets = palloc0(sizeof(ZksRequest *) * Max(n, 1));
	PG_TRY();
	{
		ZksRc	   *rcs = palloc(sizeof(ZksRc) * Max(n, 1));
		int			live = 0;
		bool		room;

		for (int i = 0; i < n; i++)
			gets[i] = zks_send_get(psprintf("%s/%s", mu->leases, names[i]));
		for (int i = 0; i < n && !s->failed; i++)
		{
			rcs[i] = zks_wait(gets[i], s->deadline);
			if (rcs[i] == ZKS_OK)
				live++;
			else if (rcs[i] != ZKS_NONODE)	/* (gone meanwhile: room is coming) */
				s->failed = true;
		}

		/*
		 * Our own wait: fewer leases now than at the listing that found
		 * no room means one has gone since, and there may be room; our
		 * child watch has fired, and the wait looks at the leases again
		 * before it is a deadlock's member (test_proxy t: a holder that
		 * was free to go released its lease during this search, and the
		 * remaining holder, on a cycle with us, made us a false victim).
		 */
		room = (u == 0 && s->listed > 0 && live < s->listed);
		s->incomplete |= room;	/* (asked again once the wait has counted) */

		for (int i = 0; i < n && !s->failed && !room; i++)
		{
			ZksStat		st;
			int			len;

			if (rcs[i] == ZKS_OK)
			{
				zks_get_stat(gets[i], &st);
				meet_owner(s, u, st.ephemeral_owner,
						   zks_get_data(gets[i], &len));
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

/*
 * Search for a cycle through us.  Returns true and fills *cycle if there
 * is one whose victim is us.
 */
bool
zkd_search(ZkdWait *w, TimestampTz deadline, Cycle *cycle)
{
	Search	   *s = palloc0(sizeof(Search));
	ZkwVertex  *v;
	int		   *cyc;
	int			len;
	int			victim;

	s->deadline = deadline;
	s->listed = w->listed;
	s->edge_room = 256;
	s->e = palloc(sizeof(ZkwEdge) * s->edge_room);
	s->pg_edge = palloc(sizeof(bool) * s->edge_room);
	s->adjacent = palloc0(MAX_MEMBERS * MAX_MEMBERS / 8);
	cycle->again = true;		/* until the answer is final */
	list_records(s);
	if (s->failed)
		return false;

	/*
	 * Our own twin, as the listing shows it: one we wrote can be gone (a
	 * sweep for a lost create's reply matches its name too, or a delete of
	 * an earlier wait's twin still on its way when we took it over), and
	 * nothing else would tell; one we did not write is an earlier wait's.
	 */
	if (w->twin != NULL && !s->own_twin)
	{
		w->twin = NULL;			/* written again at the next check */
		w->dirty = true;
		return false;
	}
	if (w->twin == NULL && s->own_twin)
	{
		zks_delete_async(psprintf("%s/%016llx%s", s->parent,
								  (unsigned long long) zks_session_id(),
								  ZKWR_TWIN_SUFFIX));
		s->incomplete = true;
	}

	if (record_of_session(s, zks_session_id()) == NULL)
	{
		if (s->failed)
			return false;
		/*
		 * Our record is gone (a sweep for an earlier create of it whose
		 * reply was lost can delete it): publish it again next time.
		 */
		zkwr_forget(w);
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
	{
		/* final, unless part of the graph was left out */
		cycle->again = s->incomplete;
		return false;
	}

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
