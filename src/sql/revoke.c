/*-------------------------------------------------------------------------
 *
 * revoke.c
 *	  Asking a lock's holders to give it back, in the protocol each of them
 *	  speaks; and telling a job whether its own lock was asked back.
 *
 * A request is a write into the holder's own node, never a new node: a
 * child of the lock's parent would stand in Curator's queue (it sorts
 * every child), and a holder has a watch on its own node only.  What is
 * written depends on the holder (revokeform.c): a zklock holder keeps its
 * owner line first and gets a second line naming the requester; a Curator
 * holder gets "__REVOKE__", which a lock made revocable gives up; a kazoo
 * holder gets "unlock", the recipe's word, which kazoo does not act on
 * (zk_lock_queue shows it, nothing else happens).  Each write carries the
 * version just read, so a request never overwrites a change it did not
 * see; ZooKeeper's node ACLs decide who may write at all (with
 * zklock.auth_file, only the holder's identity: the request is "denied").
 *
 * The holders are judged as zk_lock_queue judges them, after a sync: a
 * read from a follower can be behind the leader, and a holder granted
 * since would not be asked.  One granted after the listing is not asked
 * either: a request is for the holders of its moment, as Curator's
 * Revoker is for the node it is given.
 *
 * src/sql/revoke.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "acquire/acquire.h"
#include "sql/inspect.h"
#include "xact/locktable.h"
#include "sql/revoke.h"
#include "recipe/revokeform.h"
#include "session/session.h"
#include "zklock.h"

static int	ask_holders(ZkqEntry *q, int nq, const char *path, int64 me,
						ZkvAsked *asked, ZksRequest **sets, char **paths);

static void wait_rounds(ZkvAsked *asked, char **paths, ZksRequest **reqs,
						int n, TimestampTz deadline);

static const char *ask_again(const char *path, ZkvAsked *a,
							 ZksRequest **slot);

/*
 * Read a node's data (data not NULL), or sync path; the request is handed
 * back however the wait ends.
 */
static ZksRc
read_or_sync(const char *path, char **data, int *len)
{
	ZksRequest *req = data != NULL ? zks_send_get(path) : zks_send_sync(path);
	volatile ZksRc rc = ZKS_ERROR;

	PG_TRY();
	{
		rc = zks_wait(req, 0);
		if (rc == ZKS_OK && data != NULL)
			*data = zks_get_data(req, len);
	}
	PG_FINALLY();
	{
		zks_done(req);
	}
	PG_END_TRY();
	return rc;
}

static const char *
outcome_of(ZksRc rc)
{
	switch (rc)
	{
		case ZKS_OK:
			return "requested";
		case ZKS_NONODE:
			return "gone";
		case ZKS_NOAUTH:
			return "denied";
		case ZKS_BADVERSION:
			return "changed";
		default:
			return "failed";
	}
}

/*
 * What to write into a holder's node, or NULL when the node already asks
 * (then *request says in whose words) or its holder has no revocation
 * (*request NULL).
 */
static char *
request_for(const ZkqEntry *e, const char **request, int *len)
{
	const char *by;
	size_t		by_len;
	ZkvForm		form = zkv_parse(e->data, (size_t) e->data_len, &by, &by_len);
	char	   *me = zka_owner_line();
	size_t		room = (size_t) e->data_len + strlen(me) + 16;
	char	   *out;

	if (form == ZKV_CURATOR || form == ZKV_RECIPE)
	{
		*request = form == ZKV_CURATOR ? ZKV_CURATOR_WORD : ZKV_RECIPE_WORD;
		return NULL;
	}
	if (form == ZKV_ZKLOCK)
	{
		*request = "zklock";
		return NULL;
	}
	out = palloc(room);
	*len = (int) zkv_build(e->data, (size_t) e->data_len, me, out, room);
	if (*len > 0)
	{
		*request = "zklock";
		return out;
	}
	*request = zkv_word_for_node(e->node);
	if (*request == NULL)
		return NULL;			/* no revocation in its protocol */
	*len = (int) strlen(*request);
	return pstrdup(*request);
}

/*
 * The node changed between the read and the write (another request, most
 * likely): read it once more and ask again, in the words it now needs.
 * The request in flight sits in *slot, for the caller's clean-up.
 */
static const char *
ask_again(const char *path, ZkvAsked *a, ZksRequest **slot)
{
	ZkqEntry	e = {0};
	ZksStat		st;
	ZksRc		rc;
	char	   *data;
	int			len = 0;

	*slot = zks_send_get(path);
	rc = zks_wait(*slot, 0);
	if (rc == ZKS_OK)
	{
		zks_get_stat(*slot, &st);
		e.node = (char *) path;
		e.data = zks_get_data(*slot, &e.data_len);
	}
	zks_done(*slot);
	*slot = NULL;
	if (rc != ZKS_OK)
		return outcome_of(rc);
	data = request_for(&e, &a->request, &len);
	if (data == NULL)
		return a->request != NULL ? "already requested" : "not revocable";
	*slot = zks_send_set(path, data, len, st.version);
	rc = zks_wait(*slot, 0);
	zks_done(*slot);
	*slot = NULL;
	return outcome_of(rc);
}

/*
 * Wait until every node asked is gone or the deadline passes.  Each round
 * reads the remaining nodes with a data watch and sleeps until any watch
 * of this session fires: no polling, one read per node per event.  A
 * NONODE needs no sync before it is believed: this session wrote the
 * request into the node (or read it after a sync), so the server
 * answering has applied a state in which the node existed, and a node it
 * no longer has was deleted since.
 */
static void
wait_released(ZkvAsked *asked, char **paths, int n, TimestampTz deadline)
{
	ZksRequest **reqs = palloc0(sizeof(ZksRequest *) * Max(n, 1));

	PG_TRY();
	{
		wait_rounds(asked, paths, reqs, n, deadline);
	}
	PG_FINALLY();
	{
		for (int i = 0; i < n; i++)
			zks_done(reqs[i]);
	}
	PG_END_TRY();
	for (int i = 0; i < n; i++)
		if (paths[i] != NULL)
			asked[i].outcome = "still held";
}

static void
wait_rounds(ZkvAsked *asked, char **paths, ZksRequest **reqs, int n,
			TimestampTz deadline)
{
	for (;;)
	{
		ZksEventMark mark = zks_event_mark();
		int			left = 0;

		for (int i = 0; i < n; i++)
			if (paths[i] != NULL)
				reqs[i] = zks_send_watch_data(paths[i]);
		for (int i = 0; i < n; i++)
		{
			ZksRc		rc;

			if (reqs[i] == NULL)
				continue;
			rc = zks_wait(reqs[i], 0);
			zks_done(reqs[i]);
			reqs[i] = NULL;
			if (rc == ZKS_NONODE)
			{
				asked[i].outcome = "released";
				paths[i] = NULL;
			}
			else if (rc != ZKS_OK)
			{
				asked[i].outcome = "unknown";
				paths[i] = NULL;
			}
			else
				left++;
		}
		if (left == 0 || !zks_wait_event(mark, deadline))
			break;
	}
}

ZkvAsked *
zkv_revoke(const char *relpath, int64 wait_ms, int *n)
{
	char	   *path = psprintf("%s/%s", zklock_root, relpath);
	int64		me = 0;
	ZkqEntry   *q;
	int			nq;
	ZkvAsked   *asked;
	ZksRequest **sets;
	char	  **paths;
	int			k = 0;

	(void) zks_connect(!zkl_have_locks(), 0);
	{
		ZksRc		rc = read_or_sync(path, NULL, NULL);

		if (rc != ZKS_OK && rc != ZKS_NONODE)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not ask the holders of zklock lock \"%s\" to give it back", path),
					 zks_errdetail(rc)));
	}
	me = zks_session_id();
	q = zkq_queue(relpath, &nq);

	asked = palloc0(sizeof(ZkvAsked) * Max(nq, 1));
	sets = palloc0(sizeof(ZksRequest *) * Max(nq, 1));
	paths = palloc0(sizeof(char *) * Max(nq, 1));
	PG_TRY();
	{
		k = ask_holders(q, nq, path, me, asked, sets, paths);
	}
	PG_FINALLY();
	{
		/* (an interrupt while waiting leaves requests to hand back) */
		for (int i = 0; i < nq; i++)
			zks_done(sets[i]);
	}
	PG_END_TRY();
	for (int i = 0; i < k; i++)
		if (asked[i].request == NULL)
			paths[i] = NULL;

	if (wait_ms != 0)
		wait_released(asked, paths, k, wait_ms < 0 ? 0 :
					  TimestampTzPlusMilliseconds(GetCurrentTimestamp(), wait_ms));
	*n = k;
	return asked;
}

/*
 * Write the requests (back to back: one round trip for all) and wait for
 * their replies; returns how many holders were found.  A request taken
 * out of sets is set to NULL there.
 */
static int
ask_holders(ZkqEntry *q, int nq, const char *path, int64 me,
			ZkvAsked *asked, ZksRequest **sets, char **paths)
{
	int			k = 0;

	for (int i = 0; i < nq; i++)
	{
		char	   *data;
		int			len = 0;

		if (!q[i].holding)
			continue;
		asked[k].node = q[i].node;
		asked[k].data = q[i].data;
		asked[k].data_len = q[i].data_len;
		if (q[i].session_id == me)
		{
			/* this backend's own: it would only cancel itself */
			asked[k].request = NULL;
			asked[k].outcome = "own";
			k++;
			continue;
		}
		paths[k] = psprintf("%s/%s", path, q[i].node);
		data = request_for(&q[i], &asked[k].request, &len);
		if (data == NULL)
			asked[k].outcome = asked[k].request != NULL ?
				"already requested" : "not revocable";
		else
			sets[k] = zks_send_set(paths[k], data, len, q[i].version);
		k++;
	}
	for (int i = 0; i < k; i++)
	{
		ZksRc		rc;

		if (sets[i] == NULL)
			continue;
		rc = zks_wait(sets[i], 0);
		zks_done(sets[i]);
		sets[i] = NULL;
		asked[i].outcome = rc == ZKS_BADVERSION ?
			ask_again(paths[i], &asked[i], &sets[i]) : outcome_of(rc);
		if (strcmp(asked[i].outcome, "denied") == 0)
			ereport(WARNING,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("ZooKeeper refused to write the request into node \"%s\"", paths[i]),
					 errdetail("The node's access control list does not let this backend's identity change it."),
					 errhint("Ask with the holder's identity (zklock.auth_file), or delete the node as its owner.")));
		if (strcmp(asked[i].outcome, "requested") != 0 &&
			strcmp(asked[i].outcome, "already requested") != 0)
			paths[i] = NULL;
	}
	return k;
}

bool
zkv_revoke_requested(const char *resource)
{
	char	  **nodes;
	int			n = zkl_held_nodes(resource, &nodes);
	bool		requested = false;

	for (int i = 0; i < n && !requested; i++)
	{
		ZksRevoke	r;

		if (zks_watch_revoke(nodes[i], &r) && r.requested)
			requested = true;
		else if (!r.watched || zks_watch_state(nodes[i]) != ZKS_WATCH_ARMED)
		{
			/*
			 * Not watched (beyond the first locks, or cancel_on_loss
			 * off), or its watch not set on this connection: the node
			 * itself tells.
			 */
			char	   *data;
			int			len;
			const char *by;
			size_t		by_len;

			(void) zks_connect(false, 0);
			if (read_or_sync(nodes[i], &data, &len) == ZKS_OK)
				requested = zkv_parse(data, (size_t) len, &by,
									  &by_len) != ZKV_NONE;
		}
	}
	return requested;
}
