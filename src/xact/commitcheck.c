/*-------------------------------------------------------------------------
 *
 * commitcheck.c
 *	  The pre-commit check: confirm with the ensemble that held nodes still
 *	  exist, belong to this session and are the nodes that were granted.
 *
 * A transaction that relied on a lock that is gone must not commit, so the
 * lock table asks here before COMMIT and PREPARE TRANSACTION (and for
 * zk_locks).  A few nodes cost one sync and one exists each, sent back to
 * back: one round trip; a node whose own watch is armed needs no exists.
 * Many nodes are checked with multi requests of "check" operations, which
 * the leader answers.
 *
 * src/xact/commitcheck.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "xact/commitcheck.h"
#include "zklock.h"

typedef struct NodeCheck
{
	ZkcNode    *node;
	ZksRequest *req;
	bool		done;
} NodeCheck;

typedef struct CheckRound
{
	NodeCheck  *checks;
	int			n;
	ZksRequest **multis;		/* check_by_multi's requests */
	int			nmultis;
	ZksRequest *sync;			/* the sync in front of the exists */
} CheckRound;


static void
end_round(CheckRound *r)
{
	for (int i = 0; i < r->n; i++)
	{
		zks_done(r->checks[i].req);
		r->checks[i].req = NULL;
	}
	for (int i = 0; i < r->nmultis; i++)
		zks_done(r->multis[i]);
	r->nmultis = 0;
	zks_done(r->sync);
	r->sync = NULL;
}

/*
 * Confirm the unconfirmed nodes with multi "check" requests.  A multi is
 * all or nothing, so the nodes of one that failed stay unconfirmed: the
 * exists that follow tell which is gone and why.  Returns ZKS_TIMEDOUT,
 * ZKS_SESSION_EXPIRED or ZKS_CONNECTION_LOSS if any request ended so,
 * else ZKS_OK.
 */
static ZksRc
check_by_multi(CheckRound *r, TimestampTz deadline)
{
	const char **paths = palloc(sizeof(char *) * r->n);
	int		   *which = palloc(sizeof(int) * r->n);
	int		   *first = palloc(sizeof(int) * (r->n + 1));
	int			n = 0;
	ZksRc		result = ZKS_OK;

	for (int i = 0; i < r->n; i++)
		if (!r->checks[i].done)
		{
			which[n] = i;
			paths[n++] = r->checks[i].node->path;
		}

	r->multis = palloc(sizeof(ZksRequest *) * Max(n, 1));
	first[0] = 0;
	while (first[r->nmultis] < n)
	{
		int			start = first[r->nmultis];
		int			taken;

		r->multis[r->nmultis] = zks_send_checks(paths + start, n - start,
												&taken);
		r->nmultis++;
		first[r->nmultis] = start + taken;
	}

	for (int m = 0; m < r->nmultis; m++)
	{
		ZksRc		rc = zks_wait(r->multis[m], deadline);

		if (rc == ZKS_OK)
		{
			/*
			 * A check op tests existence only.  The name is unique to the
			 * attempt that created it (a sequence number, a random id), so
			 * while it exists it is the node we were granted.
			 */
			for (int k = first[m]; k < first[m + 1]; k++)
			{
				r->checks[which[k]].done = true;
				r->checks[which[k]].node->verdict = ZKC_HELD;
			}
		}
		else if (rc == ZKS_TIMEDOUT)
			return ZKS_TIMEDOUT;
		else if (rc == ZKS_SESSION_EXPIRED)
			result = ZKS_SESSION_EXPIRED;
		else if (rc == ZKS_CONNECTION_LOSS && result == ZKS_OK)
			result = ZKS_CONNECTION_LOSS;
	}
	pfree(paths);
	pfree(which);
	pfree(first);
	return result;
}

static void
judge(NodeCheck *c, ZkcVerdict verdict)
{
	c->node->verdict = verdict;
	c->done = true;
}

static int
count_unconfirmed(CheckRound *r)
{
	int			n = 0;

	for (int i = 0; i < r->n; i++)
		if (!r->checks[i].done)
			n++;
	return n;
}

/* The session ended: every node not yet confirmed went with it. */
static bool
all_lost_with_session(CheckRound *r)
{
	for (int i = 0; i < r->n; i++)
		if (!r->checks[i].done)
			judge(&r->checks[i], ZKC_LOST_SESSION);
	return true;
}

/*
 * One round: an exists per unconfirmed node, all sent back to back behind
 * a sync.  Returns false if the round must be repeated after a reconnect,
 * and sets *failure (ZKS_TIMEDOUT if the deadline passed, or an error
 * that asking again would not cure) if it must not.
 *
 * The sync: the server we are connected to may be a follower cut off from
 * the leader, which keeps answering reads from its own copy until it gives
 * up on the leader (syncLimit x tickTime, which can be longer than our
 * session timeout).  Meanwhile the leader may have expired our session and
 * granted the lock to someone else.  A sync makes the server catch up with
 * the leader before it answers the reads queued behind it (a session's
 * requests run in order), and a follower that cannot reach the leader
 * cannot complete it: the check then waits, and fails closed.  So a loss
 * the leader knew of when the sync reached it fails the commit.
 */
static bool
check_round(CheckRound *r, TimestampTz deadline, ZksRc *failure)
{
	int64		sid = zks_session_id();
	bool		complete = true;
	ZksRc		rc;

	if (count_unconfirmed(r) >= ZKC_MULTI_CHECK_MIN)
	{
		/* multi requests are writes: the leader itself answers them */
		rc = check_by_multi(r, deadline);
		if (rc == ZKS_TIMEDOUT)
		{
			*failure = ZKS_TIMEDOUT;
			return false;
		}
		if (rc == ZKS_CONNECTION_LOSS)
			return false;		/* ask again after the reconnect */
		if (rc == ZKS_SESSION_EXPIRED)
			return all_lost_with_session(r);
	}
	if (count_unconfirmed(r) == 0)
		return true;

	/*
	 * A node whose own watch is armed (the recipe set it while waiting,
	 * session/watch.c) needs no exists: its deletion, if the leader had
	 * carried it out when it processed the sync, reaches the watcher
	 * before the sync's reply.
	 */
	r->sync = zks_send_sync(zklock_root);
	for (int i = 0; i < r->n; i++)
	{
		ZksWatchState st;

		if (r->checks[i].done)
			continue;
		st = zks_watch_state(r->checks[i].node->path);
		/* deleted: its watch said so already */
		if (st != ZKS_WATCH_ARMED && st != ZKS_WATCH_DELETED)
			r->checks[i].req = zks_send_exists(r->checks[i].node->path, false);
	}

	rc = zks_wait(r->sync, deadline);
	if (rc == ZKS_CONNECTION_LOSS)
		return false;
	if (rc == ZKS_SESSION_EXPIRED)
		return all_lost_with_session(r);
	if (rc != ZKS_OK)
	{
		*failure = rc;
		return false;
	}

	for (int i = 0; i < r->n; i++)
	{
		NodeCheck  *c = &r->checks[i];
		ZksStat		st;

		if (c->done)
			continue;
		if (c->req == NULL)
		{
			/* confirmed by its watch; spent meanwhile: exists next round */
			ZksWatchState ws = zks_watch_state(c->node->path);

			if (ws == ZKS_WATCH_ARMED || ws == ZKS_WATCH_DELETED)
				judge(c, ws == ZKS_WATCH_ARMED ? ZKC_HELD : ZKC_LOST_DELETED);
			else
				complete = false;
			continue;
		}
		rc = zks_wait(c->req, deadline);
		switch (rc)
		{
			case ZKS_OK:
				zks_get_stat(c->req, &st);
				judge(c, (st.ephemeral_owner != sid ||
						  st.czxid != c->node->token) ?
					  ZKC_LOST_DELETED : ZKC_HELD);
				break;
			case ZKS_NONODE:
				judge(c, ZKC_LOST_DELETED);
				break;
			case ZKS_SESSION_EXPIRED:
				judge(c, ZKC_LOST_SESSION);
				break;
			case ZKS_CONNECTION_LOSS:
				complete = false;	/* ask again after the reconnect */
				break;
			default:
				/* timed out, or an error asking again would not cure */
				*failure = rc;
				return false;
		}
	}
	return complete;
}

ZksRc
zkc_confirm(ZkcNode *nodes, int n, TimestampTz deadline,
			bool wait_for_connection)
{
	CheckRound	r;
	volatile ZksRc result = ZKS_TIMEDOUT;
	ZksActivity was;

	if (n == 0)
		return ZKS_OK;
	if (!wait_for_connection && !zks_is_connected())
		return ZKS_CONNECTION_LOSS;
	was = zks_set_activity(ZKS_ACTIVITY_COMMIT);	/* its wait event */

	r.checks = palloc0(sizeof(NodeCheck) * n);
	r.n = n;
	r.multis = NULL;
	r.nmultis = 0;
	r.sync = NULL;
	for (int i = 0; i < n; i++)
	{
		nodes[i].verdict = ZKC_UNKNOWN;
		r.checks[i].node = &nodes[i];
	}
	PG_TRY();
	{
		for (;;)
		{
			ZksRc		failure = ZKS_OK;
			ZksRc		rc;

			/*
			 * A look (zk_locks) that lost the connection in the middle of
			 * a round does not wait for the next one: it answers at once
			 * with what it knows, as it does when it starts disconnected.
			 */
			if (!wait_for_connection && !zks_is_connected())
			{
				result = ZKS_CONNECTION_LOSS;
				break;
			}
			rc = zks_await_connection(deadline);
			if (rc == ZKS_SESSION_EXPIRED || rc == ZKS_NOAUTH)
			{
				(void) all_lost_with_session(&r);
				result = ZKS_OK;
				break;
			}
			if (rc != ZKS_OK)
			{
				result = rc;
				break;
			}
			if (check_round(&r, deadline, &failure))
			{
				result = ZKS_OK;
				break;
			}
			end_round(&r);
			if (failure != ZKS_OK)
			{
				result = failure;
				break;
			}
		}
	}
	PG_FINALLY();
	{
		end_round(&r);
		zks_set_activity(was);
	}
	PG_END_TRY();
	pfree(r.checks);
	return result;
}


/*
 * The primary message of zkc_unconfirmed_error: the lock it could not
 * confirm, and how many more.
 */
static int
unconfirmed_errmsg(const char *resource, ZkrMode mode, int others)
{
	if (resource == NULL)
		return errmsg("could not confirm zklock locks with ZooKeeper before commit");
	if (others == 0)
		return errmsg("could not confirm %s zklock on \"%s\" with ZooKeeper before commit",
					  zkr_mode_name(mode), resource);
	return errmsg_plural("could not confirm %s zklock on \"%s\" and %d other zklock lock with ZooKeeper before commit",
						 "could not confirm %s zklock on \"%s\" and %d other zklock locks with ZooKeeper before commit",
						 others, zkr_mode_name(mode), resource, others);
}

/*
 * ERROR 40001: the check could not be completed.  The HINT names the safe
 * way out -- run the transaction again once ZooKeeper answers -- and not
 * zklock.verify_at_commit: turning the check off in the middle of an
 * outage is exactly when a lost lock would commit.
 */
void
zkc_unconfirmed_error(ZksRc rc, const char *resource, ZkrMode mode,
					  int others)
{
	TimestampTz since = zks_unreachable_since();

	if (rc == ZKS_TIMEDOUT && since != 0)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 unconfirmed_errmsg(resource, mode, others),
				 errdetail("ZooKeeper ensemble \"%s\" did not confirm the locks within the session timeout (%d ms): no connection since %s (%.1f s). The locks may be lost.",
						   zks_hosts(), zks_negotiated_timeout(),
						   timestamptz_to_str(since),
						   (double) Max(GetCurrentTimestamp() - since, 0) /
						   USECS_PER_SEC),
				 errhint("Retry the transaction once ZooKeeper is reachable; zk_status() shows the state of the connection.")));
	if (rc == ZKS_TIMEDOUT)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 unconfirmed_errmsg(resource, mode, others),
				 errdetail("No server of \"%s\" answered within the session timeout (%d ms); the locks may be lost.",
						   zks_hosts(), zks_negotiated_timeout()),
				 errhint("Retry the transaction once ZooKeeper is reachable; zk_status() shows the state of the connection.")));
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 unconfirmed_errmsg(resource, mode, others),
			 zks_errdetail(rc),
			 errhint("Retry the transaction; if this keeps happening, check the ZooKeeper servers' logs and zk_status().")));
}
