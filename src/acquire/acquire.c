/*-------------------------------------------------------------------------
 *
 * acquire.c
 *	  The run of one acquisition, shared by locks and semaphores: create
 *	  a node (and its parents), find it again after a lost reply, list,
 *	  watch, wait within a deadline, and give up leaving nothing behind.
 *
 * Taking a lock sends the create and the children listing back to back
 * (ZooKeeper answers a session's requests in order, so the listing already
 * contains the new node): one round trip when the lock is free.  A waiter
 * watches only the contender the recipe names (recipe.c) and lists the
 * parent again after every notification.  Whatever ends a wait without
 * the node -- try, timeout, cancel, any ERROR -- deletes the node it
 * created, including one whose create completes only later (session.c).
 *
 * src/acquire/acquire.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

/* get_database_name: dbcommands.h on 15-18, lsyscache.h from 19 on */
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "acquire/acquire.h"
#include "acquire/parents.h"
#include "monitor/waitlog.h"
#include "zklock.h"

/* Longest timeout taken as such (100 years); beyond it, none. */
#define MAX_TIMEOUT_MS (INT64CONST(100) * 366 * 24 * 3600 * 1000)

/* How often a create is retried when its parent keeps vanishing. */
#define MAX_CREATE_TRIES 10

/* ----------------------------------------------------------------
 * Acquisition
 * ----------------------------------------------------------------
 */

/*
 * The data of a contender node: one short line naming its owner, so an
 * operator (or zk_lock_queue) can tell who holds or waits.  Built once per
 * backend (catalog lookups, gethostname) and again only when the role or
 * application_name changes.
 *
 * "sysid=S start=T pid=P" is the backend's name for the deadlock search
 * (zkd_self; zkw_parse_owner reads it): the postmaster's start time tells
 * a standby's or a clone's backend from its original's with the same pid.
 * It stands between the system identifier and the pid, where every
 * zklock before it reads the pid still (" pid=" is looked for anywhere).
 */
char *
zka_owner_line(void)
{
	static char *cached = NULL;
	static Oid	cached_role = InvalidOid;
	static char *cached_app = NULL;
	const char *app = application_name ? application_name : "";
	char		host[256];
	const char *db;
	const char *role;
	ZkwBackend	me;

	if (cached != NULL && cached_role == GetUserId() &&
		strcmp(cached_app, app) == 0)
		return cached;

	db = get_database_name(MyDatabaseId);
	role = GetUserNameFromId(GetUserId(), true);
	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "?", sizeof(host));
	host[sizeof(host) - 1] = '\0';

	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		char	   *line;
		char	   *app_copy;

		zkd_self(&me);
		line = psprintf("zklock host=%s port=%d sysid=" UINT64_FORMAT " start=" UINT64_FORMAT " pid=%d db=%s role=%s application_name=%s",
						host, PostPortNumber, me.sysid, me.start, me.pid,
						db ? db : "?", role ? role : "?", app);
		app_copy = pstrdup(app);

		MemoryContextSwitchTo(old);
		if (cached)
			pfree(cached);
		if (cached_app)
			pfree(cached_app);
		cached = line;
		cached_app = app_copy;
		cached_role = GetUserId();
	}
	return cached;
}

/*
 * ERROR 55P03: the call's own time (its timeout, or lock_timeout) ran
 * out.  It stays 55P03 when ZooKeeper was unreachable meanwhile, as for
 * any lock PostgreSQL could not grant in time, but the DETAIL then says
 * so, with the hosts and since when: an outage must not read like
 * contention, and retrying at once would not help.
 */
void
zka_timeout_error(ZkaAttempt *a)
{
	TimestampTz since = zks_unreachable_since();
	long long	for_ms;

	if (since == 0)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 a->msg_mode == ZKR_MODE_SEMAPHORE ?
				 errmsg("could not obtain a lease of zklock semaphore \"%s\"",
						a->resource) :
				 errmsg("could not obtain %s zklock on \"%s\"",
						zkr_mode_name(a->msg_mode), a->resource),
				 a->by_lock_timeout ?
				 errdetail("\"lock_timeout\" (%lld ms) expired while waiting.",
						   (long long) a->deadline_ms) :
				 errdetail("The timeout of %lld ms given to the call expired while waiting.",
						   (long long) a->deadline_ms)));

	for_ms = (long long) ((GetCurrentTimestamp() - since) / 1000);
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 a->msg_mode == ZKR_MODE_SEMAPHORE ?
			 errmsg("could not obtain a lease of zklock semaphore \"%s\"",
					a->resource) :
			 errmsg("could not obtain %s zklock on \"%s\"",
					zkr_mode_name(a->msg_mode), a->resource),
			 a->by_lock_timeout ?
			 errdetail("\"lock_timeout\" (%lld ms) expired while ZooKeeper ensemble \"%s\" was unreachable: no connection since %s (%lld ms).",
					   (long long) a->deadline_ms, zks_hosts(),
					   timestamptz_to_str(since), for_ms) :
			 errdetail("The timeout of %lld ms given to the call expired while ZooKeeper ensemble \"%s\" was unreachable: no connection since %s (%lld ms).",
					   (long long) a->deadline_ms, zks_hosts(),
					   timestamptz_to_str(since), for_ms),
			 errhint("Check that the ZooKeeper servers are up and reachable from this host; zk_status() shows the state of the connection.")));
}

/*
 * ERROR for a request ZooKeeper refused.  The messages are whole format
 * strings, marked for translation with gettext_noop and translated by
 * errmsg(), as PostgreSQL's own aclchk.c does.
 */
void
zka_failure(ZkaAttempt *a, ZkaOp op, ZksRc rc)
{
	const char *refused = NULL;
	const char *failed = NULL;

	switch (op)
	{
		case ZKA_OP_CREATE_PARENT:
			refused = gettext_noop("ZooKeeper refused to create lock parent \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not create lock parent \"%s\" for zklock on \"%s\"");
			break;
		case ZKA_OP_CREATE_NODE:
			refused = gettext_noop("ZooKeeper refused to create a node under \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not create a node under \"%s\" for zklock on \"%s\"");
			break;
		case ZKA_OP_LIST:
			refused = gettext_noop("ZooKeeper refused to list \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not list \"%s\" for zklock on \"%s\"");
			break;
		case ZKA_OP_WATCH:
			refused = gettext_noop("ZooKeeper refused to watch a contender under \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not watch a contender under \"%s\" for zklock on \"%s\"");
			break;
		case ZKA_OP_READ:
			refused = gettext_noop("ZooKeeper refused to read \"%s\" for zklock on \"%s\"");
			failed = gettext_noop("could not read \"%s\" for zklock on \"%s\"");
			break;
	}
	if (rc == ZKS_NOAUTH)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg(refused, a->parent, a->resource),
				 errdetail("The node's ACL belongs to another identity."),
				 errhint("Check the identity in \"zklock.auth_file\" against the one that created \"%s\".",
						 a->parent)));
	ereport(ERROR,
			(errcode(rc == ZKS_SESSION_EXPIRED || rc == ZKS_CONNECTION_LOSS ?
					 ERRCODE_CONNECTION_FAILURE : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg(failed, a->parent, a->resource),
			 zks_errdetail(rc)));
}

/*
 * After a connection loss, wait for the session to come back: no longer
 * than the lock's own deadline (55P03) nor zklock.connect_timeout (08001).
 */
void
zka_await_reconnect(ZkaAttempt *a)
{
	TimestampTz limit = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													zklock_connect_timeout);
	bool		lock_deadline_first = (a->deadline != 0 && a->deadline <= limit);
	TimestampTz since;

	if (zks_reconnect_wait(lock_deadline_first ? a->deadline : limit))
		return;
	if (lock_deadline_first)
		zka_timeout_error(a);
	since = zks_unreachable_since();
	if (since == 0)
		since = GetCurrentTimestamp();	/* connected again meanwhile */
	ereport(ERROR,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("lost connection to ZooKeeper ensemble \"%s\" while locking \"%s\"",
					zks_hosts(), a->resource),
			 errdetail("No server answered within \"zklock.connect_timeout\" (%d ms); no connection since %s.",
					   zklock_connect_timeout, timestamptz_to_str(since)),
			 errhint("Check that the ZooKeeper servers are up and reachable from this host; zk_status() shows the state of the connection.")));
}

/* Wait for a reply; a deadline that passes first ends the attempt. */
ZksRc
zka_await_reply(ZkaAttempt *a, ZksRequest *req)
{
	ZksRc		rc = zks_wait(req, a->deadline);

	if (rc == ZKS_TIMEDOUT)
		zka_timeout_error(a);
	return rc;
}

void
zka_done_req(ZksRequest **req)
{
	zks_done(*req);
	*req = NULL;
}

/*
 * After a create whose reply was lost: find the node by its unique prefix
 * and check it belongs to this session.  Adopts it and returns true, or
 * returns false if the create never happened.
 */
static bool
recover_create(ZkaAttempt *a)
{
	int			n;
	char	  **children;
	ZksRc		rc;

	for (;;)
	{
		ZksRc		src;

		zka_await_reconnect(a);

		/*
		 * We may now talk to a follower that has not applied the create
		 * yet (we never saw its zxid): sync it with the leader first, or
		 * the listing could miss the node and we would create a second.
		 */
		a->ereq = zks_send_sync(a->parent);
		a->lreq = zks_send_children(a->parent, a->watch_listing);
		src = zka_await_reply(a, a->ereq);
		zka_done_req(&a->ereq);
		rc = zka_await_reply(a, a->lreq);
		if (rc == ZKS_OK && src == ZKS_CONNECTION_LOSS)
			rc = ZKS_CONNECTION_LOSS;
		if (rc == ZKS_CONNECTION_LOSS)
		{
			zka_done_req(&a->lreq);
			continue;
		}
		break;
	}
	if (rc == ZKS_NONODE)
	{
		zka_done_req(&a->lreq);
		return false;
	}
	if (rc != ZKS_OK)
		zka_failure(a, ZKA_OP_LIST, rc);

	children = zks_get_children(a->lreq, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *path;
		ZksStat		st;

		if (!zkr_has_prefix(children[i], a->prefix))
			continue;
		path = psprintf("%s/%s", a->parent, children[i]);
		a->ereq = zks_send_exists(path, false);
		rc = zka_await_reply(a, a->ereq);
		if (rc == ZKS_OK)
		{
			zks_get_stat(a->ereq, &st);
			if (st.ephemeral_owner == zks_session_id())
			{
				zka_done_req(&a->ereq);
				a->node = path;
				a->name = strrchr(a->node, '/') + 1;
				a->token = st.czxid;
				/* keep a->lreq: it is a listing that contains our node */
				return true;
			}
		}
		zka_done_req(&a->ereq);
		pfree(path);
	}
	zka_done_req(&a->lreq);
	return false;
}

/*
 * Create our node and, with list_after_create, leave a listing of the
 * parent, sent right behind the create, in a->lreq.
 */
void
zka_create_node(ZkaAttempt *a)
{
	zka_send_create(a);
	zka_complete_create(a);
}

void
zka_send_create(ZkaAttempt *a)
{
	/* an unknown parent's create goes in front, in the same round trip */
	if (a->preqs == NIL && !zkp_known(a->parent))
		zkp_send(a, true);
	a->creq = zks_send_create(a->create_path, a->data, strlen(a->data),
							  a->create_mode);
	if (a->list_after_create)
		a->lreq = zks_send_children(a->parent, a->watch_listing);
}

void
zka_complete_create(ZkaAttempt *a)
{
	for (int tries = 0;; tries++)
	{
		ZksRc		rc;

		if (a->preqs != NIL)
			zkp_check(a);	/* answered first: sent in front */
		rc = zka_await_reply(a, a->creq);
		if (rc == ZKS_OK)
		{
			ZksStat		st;

			zkp_remember(a->parent);
			a->node = zks_take_created_path(a->creq);
			a->name = strrchr(a->node, '/') + 1;
			zks_get_stat(a->creq, &st);
			a->token = st.czxid;
			zka_done_req(&a->creq);
			return;
		}

		zka_done_req(&a->lreq);
		if (tries >= MAX_CREATE_TRIES)
			zka_failure(a, ZKA_OP_CREATE_NODE, rc);

		if (rc == ZKS_NONODE)
		{
			/*
			 * No lock parent (yet, or reaped): send its creates, then the
			 * node's, back to back: the whole retry is one round trip.
			 */
			zka_done_req(&a->creq);
			zkp_forget_all();	/* what we knew was wrong */
			zkp_send(a, true);
			zka_send_create(a);
			zkp_check(a);
		}
		else if (rc == ZKS_CONNECTION_LOSS)
		{
			/*
			 * The create may have happened.  Until we know, the node (if
			 * any) is found by prefix; on give-up it is swept.
			 */
			a->uncertain = true;
			if (recover_create(a))
			{
				zks_claim(a->creq);
				zka_done_req(&a->creq);
				return;
			}

			/*
			 * Not created (as far as the server we reached knows).  Create
			 * again with the same prefix; a late original would then be one
			 * of our own strays, never in our way, and swept when we are
			 * done.  No sweep now: it could take the new node.
			 */
			zks_claim(a->creq);
			zka_done_req(&a->creq);
			zka_send_create(a);
		}
		else
		{
			zka_done_req(&a->creq);
			zka_failure(a, ZKA_OP_CREATE_NODE, rc);
		}
	}
}

/*
 * Run the recipe until the lock is ours (true) or, for a try, until it is
 * known to be taken (false).  Every wait is bounded by a->deadline and
 * interruptible.
 */
bool
zka_run_queue(ZkaAttempt *a)
{
	a->create_mode = ZKS_EPHEMERAL_SEQUENTIAL;
	a->list_after_create = true;
	zka_create_node(a);
	return zka_await_turn(a);
}

/*
 * Tell the wait log (waitlog.c) what this wait is behind: the first
 * foreign contender in the queue (the holder, or one of the holders) and
 * how many foreign contenders are queued ahead of ours.
 */
static void
note_wait(ZkaAttempt *a, const ZkrContender *cs, int self, const char **own,
		  int nown)
{
	const char *holder = NULL;
	int			ahead = 0;

	for (int i = 0; i < self; i++)
	{
		bool		ours = false;

		for (int k = 0; k < nown && !ours; k++)
			ours = (strcmp(cs[i].name, own[k]) == 0);
		if (ours)
			continue;
		if (holder == NULL)
			holder = cs[i].name;
		ahead++;
	}
	if (holder != NULL)
	{
		char	   *path = psprintf("%s/%s", a->parent, holder);

		zkwl_waiting(a->resource, a->msg_mode, path, ahead,
					 a->deadline, a->deadline_ms);
		pfree(path);
	}
	else
		zkwl_waiting(a->resource, a->msg_mode, NULL, ahead,
					 a->deadline, a->deadline_ms);
}

/*
 * The recipe's loop once our node exists: decide from the listing in
 * a->lreq (sent now if there is none), watch, list again.
 */
bool
zka_await_turn(ZkaAttempt *a)
{
	if (a->lreq == NULL)
		a->lreq = zks_send_children(a->parent, false);

	for (;;)
	{
		ZksRc		rc;
		int			n;
		char	  **children;
		ZkrContender *cs;
		int			ncs;
		const char **own;
		int			nown = 0;
		ZkrDecision d;
		char	   *pred;
		ZksEventMark seen;
		bool		own_watch;
		bool		own_gone = false;
		bool		tracked;

		rc = zka_await_reply(a, a->lreq);
		if (rc == ZKS_CONNECTION_LOSS)
		{
			zka_done_req(&a->lreq);
			zka_await_reconnect(a);
			a->lreq = zks_send_children(a->parent, false);
			continue;
		}
		if (rc != ZKS_OK)
			zka_failure(a, ZKA_OP_LIST, rc);

		children = zks_get_children(a->lreq, &n);
		zka_done_req(&a->lreq);

		cs = palloc(sizeof(ZkrContender) * Max(n, 1));
		ncs = zkr_collect((const char *const *) children, n, cs);

		/*
		 * Ours never conflict: the other mode's node, strays of our prefix,
		 * and strays of earlier attempts of this session that it is about
		 * to delete (a sweep's deletes go out only once its listing is
		 * answered, so a listing of ours can still show them).
		 */
		own = palloc(sizeof(char *) * (ncs + 1));
		if (a->own_other)
			own[nown++] = a->own_other;
		for (int i = 0; i < ncs; i++)
			if ((zkr_has_prefix(cs[i].name, a->prefix) &&
				 strcmp(cs[i].name, a->name) != 0) ||
				(a->own_other_prefix &&
				 zkr_has_prefix(cs[i].name, a->own_other_prefix)) ||
				(strcmp(cs[i].name, a->name) != 0 &&
				 (a->own_other == NULL ||
				  strcmp(cs[i].name, a->own_other) != 0) &&
				 zks_is_own_stray(a->parent, cs[i].name)))
				own[nown++] = cs[i].name;

		d = zkr_decide(cs, ncs, a->name, a->mode, own, nown);
		if (!d.found)
			zka_vanished_error(a);
		if (d.held)
			return true;
		if (a->try_only)
			return false;

		/*
		 * Exclusive asked while this backend holds shared, with a foreign
		 * exclusive contender queued between our two nodes: it waits for
		 * our shared node, which we keep while we wait for it.  That wait
		 * would never end; say so at once.
		 */
		if (a->mode == ZKR_MODE_EXCLUSIVE && a->own_other != NULL)
		{
			int			f = zkr_foreign_exclusive_between(cs, ncs, a->own_other,
														  a->name, own, nown);

			if (f >= 0)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
						 errmsg("deadlock detected"),
						 errdetail("This backend holds a shared zklock on \"%s\" (node \"%s\") and asked for an exclusive one; exclusive contender \"%s\" of another client is queued between them and waits for the shared lock, which this backend keeps while it waits.",
								   a->resource, a->own_other, cs[f].name),
						 errhint("Release the shared lock before asking for the exclusive one, or take the exclusive lock first: a shared lock asked while holding the exclusive one is granted at once.")));
		}

		/*
		 * Watch only the contender the recipe names.  If it is already
		 * gone, list again at once: it may have given up rather than
		 * released, and whoever precedes it is now in our way.
		 *
		 * When it is the only contender in our way, watch our own node
		 * too (sent first, same round trip): its deletion then reaches us
		 * before the predecessor's if it happens first (session/watch.c),
		 * so the predecessor's deletion alone grants the lock, with no
		 * listing in between: a new node always sorts after ours.  The
		 * own watch stays armed while we hold, and lets the pre-commit
		 * check do with a sync alone.  Not when the table is full, nor for
		 * a try (which never waits), nor for an attempt whose caller reads
		 * the tree right after the grant (grant_by_listing: semaphore.c).
		 */
		a->waited = true;
		note_wait(a, cs, d.self, own, nown);
		pred = psprintf("%s/%s", a->parent, cs[d.predecessor].name);
		seen = zks_event_mark();
		own_watch = (d.blockers == 1 && !a->grant_by_listing &&
					 zks_watch_room());
		if (own_watch)
			a->oreq = zks_watch_node(a->node, &own_watch);
		a->watched = pred;
		a->ereq = zks_watch_node(pred, &tracked);
		if (a->oreq != NULL)
		{
			ZksRc		orc = zka_await_reply(a, a->oreq);

			zka_done_req(&a->oreq);
			zks_watch_reply(a->node, orc);
			if (orc != ZKS_OK)
				own_watch = false;	/* the listing below tells why */
			own_gone = (orc == ZKS_NONODE);
		}
		rc = zka_await_reply(a, a->ereq);
		zka_done_req(&a->ereq);
		zks_watch_reply(pred, rc);
		if (rc == ZKS_OK && own_gone)
			rc = ZKS_NONODE;	/* no wait: the listing fails at once */

		if (rc == ZKS_OK)
		{
			/*
			 * Wait for the watch; past deadlock_timeout, look for a cycle
			 * (deadlock.c), which may end this wait with 40P01.  Events
			 * of other nodes (our released nodes' watches firing at their
			 * deletes) do not end the wait.
			 */
			if (a->follow_deadlocks)
				zkd_wait_begin(&a->dl);
			for (;;)
			{
				TimestampTz wake = zkwl_wake_at(a->follow_deadlocks ?
												zkd_wake_at(&a->dl, a->deadline) :
												a->deadline);

				if (!tracked)
				{
					/* no record of the predecessor: any event ends it */
					if (zks_wait_event(seen, wake))
						break;
				}
				else
				{
					if (zks_watch_state(pred) != ZKS_WATCH_ARMED ||
						(own_watch &&
						 zks_watch_state(a->node) != ZKS_WATCH_ARMED))
						break;
					if (zks_wait_event(seen, wake))
					{
						/* a new mark before the states are read again */
						seen = zks_event_mark();
						continue;
					}
				}
				if (a->deadline != 0 && GetCurrentTimestamp() >= a->deadline)
					zka_timeout_error(a);
				zkwl_tick(a->deadline);
				if (a->follow_deadlocks)
					zkd_check(&a->dl, a->resource, a->node, a->mode, NULL,
							  a->deadline);
			}

			/*
			 * The predecessor is deleted and our own watch has not fired:
			 * our node existed when it went, and nothing sorts before it
			 * now.  The own watch stays armed for the pre-commit check.
			 */
			if (own_watch && tracked &&
				zks_watch_state(pred) == ZKS_WATCH_DELETED &&
				zks_watch_state(a->node) == ZKS_WATCH_ARMED)
			{
				zks_unwatch_node(pred);
				a->watched = NULL;
				pfree(pred);
				return true;
			}

			/*
			 * Otherwise list again, even when the only contender in our
			 * way is gone: another client may have deleted our own node
			 * meanwhile, and only the listing shows it (granting without
			 * it handed out a lock that had no node, so a second holder
			 * could take it).
			 */
			if (!zks_is_connected())
				zka_await_reconnect(a);
		}
		else if (rc == ZKS_CONNECTION_LOSS)
			zka_await_reconnect(a);
		else if (rc != ZKS_NONODE)
			zka_failure(a, ZKA_OP_WATCH, rc);

		zks_unwatch_node(a->node);
		zks_unwatch_node(pred);
		a->watched = NULL;
		pfree(pred);
		a->lreq = zks_send_children(a->parent, false);
	}
}

/* A wait that ended by an error leaves its predecessor in the table. */
static void
forget_watched(ZkaAttempt *a)
{
	if (a->watched != NULL)
		zks_unwatch_node(a->watched);
	a->watched = NULL;
}

void
zka_abandon(ZkaAttempt *a)
{
	zks_done(a->creq);
	zks_done(a->lreq);
	zks_done(a->ereq);
	zks_done(a->oreq);
	a->creq = a->lreq = a->ereq = a->oreq = NULL;
	forget_watched(a);
	zkd_wait_end(&a->dl);
	zkp_done(a);
	if (a->node)
		zks_delete_async(a->node);
	if (a->uncertain)
		zks_sweep_async(a->parent, a->prefix);
	/* once is enough: a semaphore's lease may be given up twice */
	a->node = NULL;
	a->uncertain = false;
}

static void
set_deadline(ZkaAttempt *a, int64 timeout_ms)
{
	int64		limit = -1;

	a->by_lock_timeout = false;
	if (timeout_ms >= 0)
		limit = timeout_ms;

	/*
	 * A timeout beyond a century is no timeout: the deadline must stay
	 * within the range of a timestamp, or it would wrap and pass at once.
	 */
	if (limit > MAX_TIMEOUT_MS)
		limit = -1;
	if (LockTimeout > 0 && (limit < 0 || LockTimeout < limit))
	{
		limit = LockTimeout;
		a->by_lock_timeout = true;
	}
	a->deadline_ms = limit;
	a->deadline = limit < 0 ? 0 :
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), limit);
}

void
zka_vanished_error(ZkaAttempt *a)
{
	/* not "lock not available": retrying the same way cannot help */
	if (zks_session_expired())
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ZooKeeper session expired while waiting for zklock on \"%s\"",
						a->resource),
				 errdetail("Node \"%s\" went with the session.", a->node)));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("zklock node \"%s\" vanished while waiting for the lock on \"%s\"",
					a->node, a->resource),
			 errdetail("Another ZooKeeper client deleted it.")));
}

void
zka_begin(ZkaAttempt *a, const char *resource, ZkrMode mode, bool try_only,
		  int64 timeout_ms)
{
	memset(a, 0, sizeof(ZkaAttempt));
	a->resource = resource;
	a->mode = mode;
	a->msg_mode = mode;
	a->follow_deadlocks = true;
	a->create_mode = ZKS_EPHEMERAL_SEQUENTIAL;
	a->list_after_create = true;
	a->data = zka_owner_line();

	/*
	 * A try, and a timeout of zero, never wait for other contenders; only
	 * the round trips to ZooKeeper bound them.  Any other timeout (and
	 * lock_timeout) bounds the whole call, the wait for a session and the
	 * round trips included.
	 */
	a->try_only = try_only || timeout_ms == 0;
	if (a->try_only)
		a->deadline = 0;
	else
		set_deadline(a, timeout_ms);
}

void
zka_connect(ZkaAttempt *a, bool may_reconnect)
{
	if (!zks_connect(may_reconnect, a->deadline))
		zka_timeout_error(a);
}

void
zka_new_uuid(char uuid[ZKR_UUID_LEN + 1])
{
	uint8		bytes[16];

	if (!pg_strong_random(bytes, sizeof(bytes)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random node name")));
	/* a version-4 (random) UUID, as Curator's protected mode uses */
	bytes[6] = (bytes[6] & 0x0F) | 0x40;
	bytes[8] = (bytes[8] & 0x3F) | 0x80;
	zkr_format_uuid(bytes, uuid);
}

void
zka_set_node(ZkaAttempt *a, const char *parent, const char *prefix)
{
	a->parent = pstrdup(parent);
	strlcpy(a->prefix, prefix, sizeof(a->prefix));
	a->create_path = psprintf("%s/%s", a->parent, a->prefix);
}

void
zka_finish(ZkaAttempt *a)
{
	zks_done(a->creq);
	zks_done(a->lreq);
	zks_done(a->ereq);
	zks_done(a->oreq);
	a->creq = a->lreq = a->ereq = a->oreq = NULL;
	forget_watched(a);
	zkd_wait_end(&a->dl);
	zkp_done(a);
}

void
zka_create_ancestors(ZkaAttempt *a)
{
	zkp_send(a, false);
	zkp_check(a);
}

