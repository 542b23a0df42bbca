/*-------------------------------------------------------------------------
 *
 * inspect.c
 *	  A lock's queue as ZooKeeper has it: every contender of every client
 *	  (other clusters, Curator, kazoo), in recipe order, with its data and
 *	  whether the recipe grants it the lock.
 *
 * The children are listed once and every contender's data is then fetched
 * with requests sent back to back, so the whole queue costs two round
 * trips whatever its length.  A contender that vanishes in between is left
 * out: the queue is a snapshot, not a lock.
 *
 * src/inspect.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "inspect.h"
#include "locktable.h"
#include "session.h"
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
	ZksRequest *list;
	ZksRequest **gets;
	int			n;
} QueueReads;

static void
end_reads(QueueReads *r)
{
	zks_done(r->list);
	r->list = NULL;
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

ZkqEntry *
zkq_queue(const char *relpath, int *n)
{
	char	   *parent = psprintf("%s/%s", zklock_root, relpath);
	QueueReads	r = {NULL, NULL, 0};
	ZkqEntry   *q = NULL;
	int			k = 0;

	(void) zks_connect(!zkl_have_locks(), 0);

	PG_TRY();
	{
		ZksRc		rc;
		char	  **children;
		int			nchildren;
		ZkrContender *cs;
		int			ncs;

		r.list = zks_send_children(parent, false);
		rc = zks_wait(r.list, 0);
		if (rc == ZKS_NONODE)
			nchildren = 0, children = NULL;
		else if (rc != ZKS_OK)
			read_failed(parent, rc);
		else
			children = zks_get_children(r.list, &nchildren);

		cs = palloc(sizeof(ZkrContender) * Max(nchildren, 1));
		ncs = nchildren > 0 ?
			zkr_collect((const char *const *) children, nchildren, cs) : 0;

		r.gets = palloc0(sizeof(ZksRequest *) * Max(ncs, 1));
		for (int i = 0; i < ncs; i++)
		{
			char	   *path = psprintf("%s/%s", parent, cs[i].name);

			r.gets[i] = zks_send_get(path);
			r.n = i + 1;
			pfree(path);
		}

		q = palloc0(sizeof(ZkqEntry) * Max(ncs, 1));
		for (int i = 0; i < ncs; i++)
		{
			ZksStat		st;

			rc = zks_wait(r.gets[i], 0);
			if (rc == ZKS_NONODE)
				continue;		/* gone meanwhile */
			if (rc != ZKS_OK)
				read_failed(parent, rc);
			zks_get_stat(r.gets[i], &st);
			q[k].mode = cs[i].mode;
			q[k].node = pstrdup(cs[i].name);
			q[k].data = zks_get_data(r.gets[i], &q[k].data_len);
			q[k].session_id = st.ephemeral_owner;
			q[k].czxid = st.czxid;
			q[k].position = k + 1;
			k++;
		}
	}
	PG_FINALLY();
	{
		end_reads(&r);
	}
	PG_END_TRY();

	{
		ZkrQueued  *judged = palloc(sizeof(ZkrQueued) * Max(k, 1));

		for (int i = 0; i < k; i++)
		{
			judged[i].mode = q[i].mode;
			judged[i].zklock = is_zklock_node(&q[i]);
			judged[i].session = q[i].session_id;
		}
		zkr_mark_holding(judged, k);
		for (int i = 0; i < k; i++)
		{
			q[i].holding = judged[i].holding;
			q[i].waits_for = judged[i].waits_for >= 0 ?
				q[judged[i].waits_for].node : NULL;
		}
		pfree(judged);
	}
	*n = k;
	return q;
}
