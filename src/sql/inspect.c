/*-------------------------------------------------------------------------
 *
 * inspect.c
 *	  A lock's queue as ZooKeeper has it: every contender of every client
 *	  (other clusters, Curator, kazoo), in recipe order, with its data and
 *	  whether the recipe grants it the lock; and a semaphore's leases and
 *	  the waiters on its internal mutex, in zklock.protocol's layout.
 *
 * The children are listed once (with a semaphore's two parts, back to back)
 * and every contender's data is then fetched with requests sent back to
 * back, so the whole queue costs two round trips whatever its length.  A contender that vanishes in between is left
 * out: the queue is a snapshot, not a lock.
 *
 * src/sql/inspect.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "sql/inspect.h"
#include "xact/locktable.h"
#include "session/session.h"
#include "zklock.h"

/* Nodes zklock created carry this at the start of their data. */
#define ZKLOCK_DATA_PREFIX "zklock "

static bool
is_zklock_node(const ZkqEntry *e)
{
	return e->data_len >= (int) strlen(ZKLOCK_DATA_PREFIX) &&
		strncmp(e->data, ZKLOCK_DATA_PREFIX, strlen(ZKLOCK_DATA_PREFIX)) == 0;
}

typedef struct QueueReads
{
	ZksRequest *list[3];		/* the lock parent, a semaphore's leases and
								 * internal mutex */
	ZksRequest **gets;
	int			n;
} QueueReads;

static void
end_reads(QueueReads *r)
{
	for (int i = 0; i < 3; i++)
	{
		zks_done(r->list[i]);
		r->list[i] = NULL;
	}
	for (int i = 0; i < r->n; i++)
	{
		zks_done(r->gets[i]);
		r->gets[i] = NULL;
	}
}

static void
read_failed(const char *parent, ZksRc rc)
{
	ereport(ERROR,
			(errcode(rc == ZKS_NOAUTH ? ERRCODE_INSUFFICIENT_PRIVILEGE :
					 ERRCODE_CONNECTION_FAILURE),
			 errmsg("could not read the zklock queue \"%s\"", parent),
			 zks_errdetail(rc)));
}

/* The children of a listing; none if the parent does not exist. */
static char **
listed(ZksRequest *req, const char *parent, int *n)
{
	ZksRc		rc = zks_wait(req, 0);

	*n = 0;
	if (rc == ZKS_NONODE)
		return NULL;
	if (rc != ZKS_OK)
		read_failed(parent, rc);
	return zks_get_children(req, n);
}

/* kazoo names a lease uuid4().hex: 32 lower-case hex digits. */
static bool
is_kazoo_lease(const char *name)
{
	int			i;

	for (i = 0; name[i]; i++)
		if (!((name[i] >= '0' && name[i] <= '9') ||
			  (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return i == 32;
}

/* One part of the queue: names under a parent, shown as label + name. */
typedef struct QueuePart
{
	const char *parent;
	const char *label;			/* "" or a path ending in '/' */
	const char **names;
	ZkrMode    *modes;
	int			n;
	int			first;			/* index of its first row in the result */
	int			count;			/* rows it kept */
} QueuePart;

/*
 * Fetch every name's data and stat (the gets sent back to back, kept in
 * r->gets for end_reads) and append the entries that still exist to q at
 * *k.
 */
static void
fetch_part(QueuePart *p, QueueReads *r, ZkqEntry *q, int *k)
{
	int			base = r->n;

	for (int i = 0; i < p->n; i++)
	{
		char	   *path = psprintf("%s/%s", p->parent, p->names[i]);

		r->gets[r->n++] = zks_send_get(path);
		pfree(path);
	}
	p->first = *k;
	for (int i = 0; i < p->n; i++)
	{
		ZksStat		st;
		ZksRc		rc = zks_wait(r->gets[base + i], 0);
		ZkqEntry   *e = &q[*k];

		if (rc == ZKS_NONODE)
			continue;			/* gone meanwhile */
		if (rc != ZKS_OK)
			read_failed(p->parent, rc);
		zks_get_stat(r->gets[base + i], &st);
		e->mode = p->modes[i];
		e->node = psprintf("%s%s", p->label, p->names[i]);
		e->data = zks_get_data(r->gets[base + i], &e->data_len);
		e->session_id = st.ephemeral_owner;
		e->czxid = st.czxid;
		e->version = st.version;
		e->position = *k + 1;
		(*k)++;
	}
	p->count = *k - p->first;
}

static int
czxid_cmp(const void *a, const void *b)
{
	int64		x = ((const ZkqEntry *) a)->czxid;
	int64		y = ((const ZkqEntry *) b)->czxid;

	return x < y ? -1 : x > y;
}

/* Contenders among names, in recipe order, as a part. */
static void
contenders_part(QueuePart *p, char **names, int n)
{
	ZkrContender *cs = palloc(sizeof(ZkrContender) * Max(n, 1));

	p->n = n > 0 ? zkr_collect((const char *const *) names, n, cs) : 0;
	p->names = palloc(sizeof(char *) * Max(p->n, 1));
	p->modes = palloc(sizeof(ZkrMode) * Max(p->n, 1));
	for (int i = 0; i < p->n; i++)
	{
		p->names[i] = cs[i].name;
		p->modes[i] = cs[i].mode;
	}
}

/*
 * Judge a run of contenders (recipe order) as zk_lock_queue shows them:
 * who holds, whom each waiter waits for.
 */
static void
judge(ZkqEntry *q, int first, int count)
{
	ZkrQueued  *judged = palloc(sizeof(ZkrQueued) * Max(count, 1));

	for (int i = 0; i < count; i++)
	{
		judged[i].mode = q[first + i].mode;
		judged[i].zklock = is_zklock_node(&q[first + i]);
		judged[i].session = q[first + i].session_id;
	}
	zkr_mark_holding(judged, count);
	for (int i = 0; i < count; i++)
	{
		q[first + i].holding = judged[i].holding;
		q[first + i].waits_for = judged[i].waits_for >= 0 ?
			q[first + judged[i].waits_for].node : NULL;
	}
	pfree(judged);
}

ZkqEntry *
zkq_queue(const char *relpath, int *n)
{
	char	   *path = psprintf("%s/%s", zklock_root, relpath);
	bool		kazoo = (zklock_protocol == ZKR_PROTOCOL_KAZOO);
	char	   *lease_parent;
	char	   *mutex_parent;
	QueueReads	r = {{NULL, NULL, NULL}, NULL, 0};
	QueuePart	locks = {0};
	QueuePart	leases = {0};
	QueuePart	mutex = {0};
	ZkqEntry   *q = NULL;
	int			k = 0;

	/* where a semaphore of this name keeps its parts (zklock.protocol) */
	lease_parent = kazoo ? path : psprintf("%s/leases", path);
	mutex_parent = psprintf(kazoo ? "%s-__lock__" : "%s/locks", path);

	(void) zks_connect(!zkl_have_locks(), 0);

	PG_TRY();
	{
		char	  **children;
		int			nchildren;
		char	  **lnames;
		int			nl;
		char	  **mnames;
		int			nm;

		/* the three listings in one round trip */
		r.list[0] = zks_send_children(path, false);
		if (!kazoo)
			r.list[1] = zks_send_children(lease_parent, false);
		r.list[2] = zks_send_children(mutex_parent, false);
		children = listed(r.list[0], path, &nchildren);
		if (kazoo)
			lnames = children, nl = nchildren;
		else
			lnames = listed(r.list[1], lease_parent, &nl);
		mnames = listed(r.list[2], mutex_parent, &nm);

		locks.parent = path;
		locks.label = "";
		contenders_part(&locks, children, nchildren);

		leases.parent = lease_parent;
		leases.label = kazoo ? "" : "leases/";
		leases.names = palloc(sizeof(char *) * Max(nl, 1));
		leases.modes = palloc(sizeof(ZkrMode) * Max(nl, 1));
		for (int i = 0; i < nl; i++)
			if (!kazoo || is_kazoo_lease(lnames[i]))
			{
				leases.modes[leases.n] = ZKR_MODE_SEMAPHORE;
				leases.names[leases.n++] = lnames[i];
			}

		mutex.parent = mutex_parent;
		mutex.label = kazoo ? psprintf("%s/", mutex_parent) : "locks/";
		contenders_part(&mutex, mnames, nm);

		r.gets = palloc0(sizeof(ZksRequest *) *
						 Max(locks.n + leases.n + mutex.n, 1));
		q = palloc0(sizeof(ZkqEntry) * Max(locks.n + leases.n + mutex.n, 1));
		fetch_part(&locks, &r, q, &k);
		fetch_part(&leases, &r, q, &k);
		fetch_part(&mutex, &r, q, &k);
	}
	PG_FINALLY();
	{
		end_reads(&r);
	}
	PG_END_TRY();

	judge(q, locks.first, locks.count);

	/*
	 * Leases in the order they were created (a listing comes in no
	 * particular order, and kazoo's names carry no sequence), then
	 * numbered again.
	 */
	qsort(q + leases.first, leases.count, sizeof(ZkqEntry), czxid_cmp);
	for (int i = leases.first; i < leases.first + leases.count; i++)
		q[i].position = i + 1;

	/*
	 * A semaphore: its leases hold, and the waiters queue on the internal
	 * mutex.  The mutex's holder is the one counting the leases; in
	 * Curator's layout its own lease already exists while it counts, so
	 * that lease is not shown as holding.  A zklock client counts its
	 * first lease after letting the mutex go (semaphore.c): nothing in
	 * ZooKeeper tells that lease from a holding one, so for that round
	 * trip it is shown as holding (README says so).
	 */
	for (int j = leases.first; j < leases.first + leases.count; j++)
		q[j].holding = true;
	judge(q, mutex.first, mutex.count);
	for (int i = mutex.first; i < mutex.first + mutex.count; i++)
	{
		if (q[i].holding && !kazoo)
			for (int j = leases.first; j < leases.first + leases.count; j++)
				if (q[j].session_id == q[i].session_id)
					q[j].holding = false;
		q[i].holding = false;
		q[i].mode = ZKR_MODE_SEMAPHORE;
	}
	*n = k;
	return q;
}
