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
 * (their ephemeralOwner).  A session with a record waits itself, for the
 * contenders ahead of its own node; a session without one is a holder,
 * and if it is a zklock backend of this cluster its pid may wait in
 * PostgreSQL's lock manager (pg_blocking_pids) for a backend that waits
 * for a zklock in turn, maybe for us.  A path back to our own session is
 * a cycle.  Clients that publish nothing (Curator, kazoo) end a path:
 * they can be part of no cycle that zklock could see.
 *
 * Exactly one member of a cycle acts: the one whose record ZooKeeper
 * created last (greatest czxid).  Every member that sees the cycle
 * computes the same one, whatever the clocks of their hosts, and that
 * member published last, so its own search already sees every record of
 * the cycle.  Before acting it searches again and acts only if the same
 * cycle, with the same records, is still there: a cycle pieced together
 * from moments apart (a member granted or gone meanwhile) is not acted
 * on.  The victim raises ERROR 40P01; its node and record go, and the
 * others proceed.
 *
 * A search is a few round trips: the records (one listing, their data
 * sent back to back), then for each waiter on the path its queue and the
 * owners of the contenders ahead of it; a queue is listed, and each of
 * its nodes read, once per search, however many of its waiters are
 * followed.  It runs at deadlock_timeout and again at growing intervals
 * (a cycle through PostgreSQL's lock manager can close after our first
 * search, and only we can see it); a lock granted at once or within
 * deadlock_timeout costs nothing.
 *
 * src/deadlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "deadlock.h"
#include "waitgraph.h"
#include "zklock.h"

#define WAITS_DIR		"%waits"
#define MAX_MEMBERS		64		/* sessions followed in one search */
#define MAX_EDGES		512
#define MAX_PIDS		64		/* PostgreSQL waits followed per holder */
#define MAX_RECORDS		4096
#define MAX_INTERVAL_FACTOR 8	/* re-search at most every 8 x deadlock_timeout */

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
	bool		queued;
} Member;

typedef struct Record
{
	int64		session;
	int64		czxid;
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
	if (deadline == 0 || w->check_at < deadline)
		return w->check_at;
	return deadline;
}

void
zkd_wait_end(ZkdWait *w)
{
	zks_done(w->req);
	w->req = NULL;
	if (w->record != NULL)
		zks_delete_async(w->record);
	w->record = NULL;
	w->check_at = 0;
	w->checks = 0;
}

static char *
waits_parent(void)
{
	return psprintf("%s/%s", zklock_root, WAITS_DIR);
}

/*
 * Publish our record.  Returns false if ZooKeeper would not have it now
 * (the search is then tried again later).
 */
static bool
publish(ZkdWait *w, const char *resource, const char *node, ZkrMode mode,
		TimestampTz deadline)
{
	char	   *path = psprintf("%s/%016llx", waits_parent(),
								(unsigned long long) zks_session_id());
	ZkwRecord	r;
	size_t		size;
	char	   *data;
	int			len;

	r.sysid = GetSystemIdentifier();
	r.pid = MyProcPid;
	r.mode = mode;
	r.node = node;
	r.node_len = strlen(node);
	r.resource = resource;
	r.resource_len = strlen(resource);
	size = r.node_len + r.resource_len + 128;
	data = palloc(size);
	len = (int) zkw_format_record(&r, data, size);
	if (len == 0)
		return false;

	for (int tries = 0; tries < 3; tries++)
	{
		ZksRc		rc;

		w->req = zks_send_create(path, data, len, ZKS_EPHEMERAL);
		rc = zks_wait(w->req, deadline);
		if (rc == ZKS_OK)
		{
			ZksStat		st;

			zks_get_stat(w->req, &st);
			w->record = zks_take_created_path(w->req);
			w->record_czxid = st.czxid;
			zks_done(w->req);
			w->req = NULL;
			return true;
		}
		zks_done(w->req);
		w->req = NULL;
		if (rc == ZKS_NONODE)
		{
			/* the records' parent: a container, like a lock parent */
			w->req = zks_send_create(waits_parent(), "", 0, ZKS_CONTAINER);
			rc = zks_wait(w->req, deadline);	/* an ERROR: zkd_wait_end */
			zks_done(w->req);
			w->req = NULL;
			if (rc != ZKS_OK && rc != ZKS_NODEEXISTS)
				return false;
		}
		else if (rc == ZKS_NODEEXISTS)
			zks_delete_async(path); /* an old one of ours; sent before */
		else
			return false;
	}
	return false;
}

/* Read every record (one listing, the data sent back to back). */
static void
read_records(Search *s)
{
	char	   *parent = waits_parent();
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

static Record *
record_of_pid(Search *s, uint64 sysid, int pid)
{
	for (int i = 0; i < s->nrecords; i++)
		if (s->records[i].r.sysid == sysid && s->records[i].r.pid == pid)
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
		m->has_record = true;
		m->czxid = rec->czxid;
		m->known = true;
		m->sysid = rec->r.sysid;
		m->pid = rec->r.pid;
		m->mode = rec->r.mode;
		m->node = pnstrdup(rec->r.node, rec->r.node_len);
		m->resource = pnstrdup(rec->r.resource, rec->r.resource_len);
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
 * A zklock holder of this cluster (pid) that has no record: does it wait
 * in PostgreSQL's lock manager, directly or through other backends, for a
 * backend that waits for a zklock?  Adds those edges.
 */
static void
follow_pg_waits(Search *s, int holder, int pid)
{
	uint64		sysid = GetSystemIdentifier();
	int			pids[MAX_PIDS];
	int			npids = 0;

	pids[npids++] = pid;
	for (int k = 0; k < npids; k++)
	{
		ArrayType  *blockers;
		Datum	   *elems;
		int			nelems;

		CHECK_FOR_INTERRUPTS();
		blockers = DatumGetArrayTypeP(DirectFunctionCall1(pg_blocking_pids,
														  Int32GetDatum(pids[k])));
		deconstruct_array(blockers, INT4OID, 4, true, TYPALIGN_INT,
						  &elems, NULL, &nelems);
		for (int j = 0; j < nelems; j++)
		{
			int			p = DatumGetInt32(elems[j]);
			bool		seen = false;
			Record	   *rec;

			for (int q = 0; q < npids; q++)
				seen |= (pids[q] == p);
			if (seen)
				continue;
			rec = (p == MyProcPid) ? record_of_session(s, zks_session_id()) :
				record_of_pid(s, sysid, p);
			if (rec != NULL)
				add_edge(s, holder, member(s, rec->session), true);
			else if (npids < MAX_PIDS)
				pids[npids++] = p;	/* waits itself? follow it */
		}
	}
}

/* Owner line of a zklock node: "zklock host=... sysid=N pid=P ..." */
static bool
parse_owner(const char *data, uint64 *sysid, int *pid)
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

	if (slash == NULL || slash == node)
		return;
	q = queue_of(s, pnstrdup(node, slash - node));
	if (q == NULL || q->gone)
		return;					/* (its queue is gone: no longer waits) */

	nobody = palloc0(sizeof(int64) * Max(q->ncs, 1));
	ahead = palloc(sizeof(int) * Max(q->ncs, 1));
	/* by position and mode first; whose they are is asked below */
	nahead = zkw_blockers(q->cs, nobody, q->ncs, slash + 1, s->m[u].mode, -1,
						  ahead);
	if (nahead <= 0)
		return;					/* granted meanwhile, or gone */

	read_nodes(s, q, ahead, nahead);
	for (int i = 0; i < nahead && !s->failed; i++)
	{
		int			c = ahead[i];
		const ZksStat *st = &q->st[c];
		int			v;
		uint64		sysid;
		int			pid;

		if (q->rc[c] != ZKS_OK)
			continue;
		if (st->ephemeral_owner == s->m[u].session ||
			st->ephemeral_owner == 0)
			continue;			/* our own node, or no session's */
		v = member(s, st->ephemeral_owner);
		if (v < 0)
			continue;
		add_edge(s, u, v, false);
		if (!s->m[v].known && parse_owner(q->data[c], &sysid, &pid))
		{
			s->m[v].known = true;
			s->m[v].sysid = sysid;
			s->m[v].pid = pid;
			if (!s->m[v].has_record && !s->m[v].queued &&
				sysid == GetSystemIdentifier() && pid != MyProcPid)
			{
				s->m[v].queued = true;
				follow_pg_waits(s, v, pid);
			}
		}
	}
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

		victim = zkw_victim(v, comp, ncomp);
		if (victim < 0 || comp[victim] != 0)
			return false;		/* another member acts */
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
		if (m->has_record)
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

void
zkd_check(ZkdWait *w, const char *resource, const char *node, ZkrMode mode,
		  TimestampTz deadline)
{
	Cycle	   *first;
	Cycle	   *again;
	int			factor;
	MemoryContext cxt;
	MemoryContext old;
	ZksActivity was;

	if (w->check_at == 0 || GetCurrentTimestamp() < w->check_at)
		return;
	/* (an ERROR leaves it set: the transaction's end resets it) */
	was = zks_set_activity(ZKS_ACTIVITY_DEADLOCK);
	w->checks++;
	factor = Min(1 << Min(w->checks, 10), MAX_INTERVAL_FACTOR);
	w->check_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											  (int64) DeadlockTimeout * factor);

	if (w->record == NULL && !publish(w, resource, node, mode, deadline))
	{
		zks_set_activity(was);
		return;
	}

	/* what a search reads is dropped with it (an ERROR drops it too) */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "zklock deadlock search",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	first = palloc0(sizeof(Cycle));
	again = palloc0(sizeof(Cycle));
	/* acted on only if seen twice, the same */
	if (search(w, deadline, first) && search(w, deadline, again) &&
		same_cycle(first, again))
		deadlock_error(again);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	zks_set_activity(was);
}
