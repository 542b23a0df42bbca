/*-------------------------------------------------------------------------
 *
 * semaphore.c
 *	  Counting semaphores in the layouts of Curator's InterProcessSemaphoreV2
 *	  and kazoo's Semaphore, built from the steps of acquire.c.
 *
 * Both recipes take an internal mutex first -- an ordinary exclusive lock,
 * run by zka_run_queue on its own parent -- and only a client that has
 * held it counts the leases (in Curator's layout zklock counts once right
 * after letting it go, see below).  So the waiters queue on the mutex,
 * each watching its predecessor, and one waiter at a time (the mutex's
 * holder) watches the lease list: no herd.  Then:
 *
 * Curator (zklock.protocol curator-rw or curator-mutex): create our lease,
 * EPHEMERAL_SEQUENTIAL under <path>/leases, and list the leases (sent back
 * to back: one round trip).  The lease holds when the leases number at
 * most max_holders.  zklock sends the internal mutex's delete right
 * behind the create and the listing (optimistically: one fsync carries
 * both writes, and the next waiter's turn starts a round trip sooner);
 * when the count then shows no room, it gives the lease back and queues
 * on the mutex again, and this time, as Curator always does, keeps the
 * mutex while it waits for the lease list (a child watch) to change.  So
 * an acquisition makes at most one such extra round, and waiters never
 * keep leases that hold each other out (which waiting without the mutex
 * could: two waiting leases alone can exceed max_holders).  An observer
 * can see more than max_holders leases meanwhile: some belong to clients
 * still counting, or giving their lease back.
 *
 * kazoo: list the children of <path> with a child watch; when fewer than
 * max_holders, create our lease there (plain EPHEMERAL, named by random
 * hex); otherwise wait for a change.  The node <path> is PERSISTENT and
 * records max_holders as decimal text, as kazoo's _ensure_path does; a
 * different number recorded there is an error, as kazoo raises one.
 *
 * Why never more than max_holders.  Curator: a lease holds only if the
 * listing read after its own create, on the same session, counted at
 * most max_holders.  ZooKeeper applies a session's requests in order and
 * every server applies transactions in zxid order, so that listing shows
 * every lease created before ours that still exists.  Of the leases held
 * at any moment, the newest one counted all the others (they were
 * created before it and exist still), so they are at most max_holders.
 * The argument needs neither the mutex nor a fresh server (a stale one
 * can only show leases already gone, which makes us count more, never
 * less): the early release of the mutex cannot break it, and Curator's
 * clients, which hold the mutex while they count, see our leases as they
 * see their own.
 *
 * kazoo: only the mutex holder creates, and it counts before it creates,
 * so its count must come from a server that has applied every change the
 * previous mutex holder made before releasing: the mutex is released only
 * after the lease exists, and granted by a reply (the listing after the
 * predecessor's deletion, or the create when the mutex was free) whose
 * zxid is past that deletion.  libzookeeper reconnects only to a server
 * that has applied its session's last zxid, and it takes that zxid from
 * replies, never from watch events, so a mutex granted by the watches
 * alone (acquire.c) could, after a reconnect to a lagging server, count
 * without the previous holder's lease: the kazoo mutex is therefore
 * always granted by a listing (grant_by_listing).  A stale server can
 * only show leases that are already gone, which makes us wait longer,
 * never hold too soon.
 *
 * Deadlock detection (deadlock.c) follows both waits of a semaphore: the
 * wait for the internal mutex is an ordinary lock wait, and a wait for
 * room past deadlock_timeout publishes a record of mode semaphore that
 * names the node held meanwhile and the leases' parent: the waiter waits
 * for any one lease to go, and deadlock.c acts only when every holder of
 * a lease is on the cycle too.
 *
 * src/acquire/semaphore.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "deadlock/deadlock.h"
#include "acquire/semaphore.h"
#include "monitor/waitlog.h"
#include "zklock.h"

/* A path and a prefix for one part of the semaphore at path. */
static void
part_names(ZkrSemPart part, const char *path, const char *uuid,
		   char **parent, char prefix[ZKR_MAX_PREFIX_BYTES])
{
	ZkrProtocol protocol = (ZkrProtocol) zklock_protocol;
	size_t		size = strlen(path) + 16;

	*parent = palloc(size);
	if (zkr_semaphore_parent(protocol, part, path, *parent, size) == 0 ||
		zkr_semaphore_prefix(protocol, part, uuid, prefix,
							 ZKR_MAX_PREFIX_BYTES) == 0)
		elog(ERROR, "zklock semaphore node name does not fit");
}

/*
 * kazoo's semaphore node: create it PERSISTENT holding max_holders, or
 * read what an existing one records (both requests sent back to back).
 */
static void
ensure_kazoo_node(ZkaAttempt *a, const char *path, int max_holders)
{
	char		data[16];

	snprintf(data, sizeof(data), "%d", max_holders);
	for (int tries = 0;; tries++)
	{
		ZksRc		rc;
		ZksRc		grc;
		char	   *recorded;
		int			len;
		int64		value;

		a->creq = zks_send_create(path, data, strlen(data), ZKS_PERSISTENT);
		a->ereq = zks_send_get(path);
		rc = zka_await_reply(a, a->creq);
		grc = zka_await_reply(a, a->ereq);
		zka_done_req(&a->creq);
		if (rc == ZKS_NONODE && tries < 10)
		{
			zka_done_req(&a->ereq);
			zka_create_ancestors(a);
			continue;
		}
		if (rc == ZKS_CONNECTION_LOSS || grc == ZKS_CONNECTION_LOSS)
		{
			/* created or not, the next try tells: NODEEXISTS and our data */
			zka_done_req(&a->ereq);
			zka_await_reconnect(a);
			continue;
		}
		if (rc != ZKS_OK && rc != ZKS_NODEEXISTS)
			zka_failure(a, ZKA_OP_CREATE_PARENT, rc);
		if (grc != ZKS_OK)
			zka_failure(a, ZKA_OP_READ, grc);

		recorded = zks_get_data(a->ereq, &len);
		zka_done_req(&a->ereq);
		if (zkr_parse_max_leases(recorded, len, &value) &&
			value != max_holders)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock semaphore \"%s\" allows %s holders, not %d",
							a->resource, recorded, max_holders),
					 errdetail("ZooKeeper node \"%s\" records max_leases %s, as kazoo's Semaphore writes it.",
							   path, recorded),
					 errhint("Every holder of a semaphore must give the same max_holders; kazoo raises ValueError for this too.")));
		pfree(recorded);
		return;
	}
}

/*
 * Wait for the watched list to change (or the session to), bounded by
 * the attempt's deadline; then be connected again.  Past deadlock_timeout
 * the wait is one for room, which deadlock.c follows: held is the node we
 * hold meanwhile (our lease, or the internal mutex), and the leases are
 * a->parent's children.
 */
static void
await_change(ZkaAttempt *a, ZksEventMark seen, const char *held, int leases,
			 int listed)
{
	a->waited = true;
	a->dl.listed = listed;		/* (what our own search compares with) */
	zkwl_waiting(a->resource, ZKR_MODE_SEMAPHORE, NULL, leases,
				 a->deadline, a->deadline_ms);
	if (a->follow_deadlocks)
		zkd_wait_begin(&a->dl);
	for (;;)
	{
		TimestampTz wake = zkwl_wake_at(a->follow_deadlocks ?
										zkd_wake_at(&a->dl, a->deadline) :
										a->deadline);

		if (zks_wait_event(seen, wake))
			break;
		if (a->deadline != 0 && GetCurrentTimestamp() >= a->deadline)
			zka_timeout_error(a);
		zkwl_tick(a->deadline);
		if (a->follow_deadlocks)
			zkd_check(&a->dl, a->resource, held, ZKR_MODE_SEMAPHORE,
					  a->parent, a->deadline);
	}
	if (!zks_is_connected())
		zka_await_reconnect(a);
}

/*
 * List the lease parent (with a child watch unless this is a try) and
 * return its children; *seen is the event mark taken before the listing.
 */
static char **
list_leases(ZkaAttempt *a, int *n, ZksEventMark *seen)
{
	for (;;)
	{
		ZksRc		rc;
		char	  **children;

		if (a->lreq == NULL)
		{
			*seen = zks_event_mark();
			a->lreq = zks_send_children(a->parent, a->watch_listing);
		}
		rc = zka_await_reply(a, a->lreq);
		if (rc == ZKS_CONNECTION_LOSS)
		{
			zka_done_req(&a->lreq);
			zka_await_reconnect(a);
			continue;
		}
		if (rc != ZKS_OK)
			zka_failure(a, ZKA_OP_LIST, rc);
		children = zks_get_children(a->lreq, n);
		zka_done_req(&a->lreq);
		return children;
	}
}

/*
 * Curator: list the leases (or take the listing in flight) and count.
 * True when ours is among at most max_holders; ERROR when it is gone.
 */
static bool
counted_with_room(ZkaAttempt *a, int max_holders, ZksEventMark *seen,
				  int *nleases)
{
	int			n;
	char	  **children = list_leases(a, &n, seen);
	ZkrSemDecision d = zkr_semaphore_decide((const char *const *) children,
											n, a->name, max_holders);

	if (d == ZKR_SEM_MISSING)
		zka_vanished_error(a);
	if (nleases)
		*nleases = n;
	return d == ZKR_SEM_HELD;
}

/*
 * Curator, the round after a count with no room (never a try's): holding
 * the internal mutex and keeping it until the count says we hold, create
 * the lease and list the leases with a child watch (back to back), and
 * wait for the list to change while there is no room.
 */
static void
lease_counted_after_create(ZkaAttempt *a, int max_holders)
{
	ZksEventMark seen = zks_event_mark();
	int			n;

	Assert(!a->try_only);
	a->create_mode = ZKS_EPHEMERAL_SEQUENTIAL;
	a->list_after_create = true;
	a->watch_listing = true;
	zka_create_node(a);			/* leaves the listing in a->lreq */

	while (!counted_with_room(a, max_holders, &seen, &n))
		await_change(a, seen, a->node, Min(n, max_holders), n);
	zkd_wait_end(&a->dl);
}

/*
 * Curator, the optimistic round (see the top of the file): create the
 * lease and list the leases (no watch: nothing waits on this listing),
 * and send the internal mutex's delete right behind them, so that one
 * round trip (one fsync) carries the lease and hands the mutex on.
 * Returns whether the count left room; if not, the caller gives the
 * lease back.
 */
static bool
lease_counted_mutex_released(ZkaAttempt *a, ZkaAttempt *m, int max_holders)
{
	ZksEventMark seen;

	a->create_mode = ZKS_EPHEMERAL_SEQUENTIAL;
	a->list_after_create = true;
	a->watch_listing = false;
	zka_send_create(a);
	zka_abandon(m);				/* the mutex's delete, behind the create */
	zka_complete_create(a);
	return counted_with_room(a, max_holders, &seen, NULL);
}

/* kazoo: count, then create the lease if there is room (m: the mutex). */
static bool
lease_counted_before_create(ZkaAttempt *a, ZkaAttempt *m, int max_holders)
{
	a->create_mode = ZKS_EPHEMERAL;
	a->list_after_create = false;
	a->watch_listing = !a->try_only;

	for (;;)
	{
		int			n;
		ZksEventMark seen;

		(void) list_leases(a, &n, &seen);
		if (zkr_semaphore_has_room(n, max_holders))
		{
			zkd_wait_end(&a->dl);
			zka_create_node(a);
			return true;
		}
		if (a->try_only)
			return false;
		await_change(a, seen, m->node, n, n);
	}
}

/*
 * Name this round's nodes: the lease (in a) and the internal mutex (m,
 * begun here with a's deadline), both with a fresh UUID, so that a node
 * of an earlier round, whose delete may still be on its way, is never
 * taken for ours when a lost create reply is looked for by prefix.
 */
static void
begin_round(ZkaAttempt *a, ZkaAttempt *m, const char *path)
{
	ZkrProtocol protocol = (ZkrProtocol) zklock_protocol;
	char		uuid[ZKR_UUID_LEN + 1];
	char		prefix[ZKR_MAX_PREFIX_BYTES];
	char	   *parent;

	zka_new_uuid(uuid);
	part_names(ZKR_SEM_LEASE, path, uuid, &parent, prefix);
	zka_set_node(a, parent, prefix);

	/* the internal mutex: an exclusive lock with the same deadline */
	zka_begin(m, a->resource, ZKR_MODE_EXCLUSIVE, a->try_only, -1);
	m->msg_mode = ZKR_MODE_SEMAPHORE;
	m->follow_deadlocks = !a->try_only;
	m->deadline = a->deadline;
	m->deadline_ms = a->deadline_ms;
	m->by_lock_timeout = a->by_lock_timeout;
	part_names(ZKR_SEM_MUTEX, path, uuid, &parent, prefix);
	zka_set_node(m, parent, prefix);
	/* kazoo counts before it creates: see the top of this file */
	m->grant_by_listing = !zkr_semaphore_counts_after_create(protocol);
}

bool
zksem_acquire(ZkaAttempt *a, const char *relpath, int max_holders)
{
	ZkrProtocol protocol = (ZkrProtocol) zklock_protocol;
	bool		curator = zkr_semaphore_counts_after_create(protocol);
	char	   *path = psprintf("%s/%s", zklock_root, relpath);
	ZkaAttempt *m = palloc0(sizeof(ZkaAttempt));	/* changed in PG_TRY */
	volatile bool held = false;

	/* waits for room are followed by deadlock detection (above) */
	a->follow_deadlocks = !a->try_only;
	begin_round(a, m, path);

	if (!curator)
		ensure_kazoo_node(a, path, max_holders);

	PG_TRY();
	{
		bool		mutex = zka_run_queue(m);

		/*
		 * The wait for the mutex is over: its wait record and twin go now,
		 * not when the mutex is let go.  The wait for room that may follow
		 * has this session's record and twin paths too, and an old twin
		 * left there would list PostgreSQL-local edges of a moment gone
		 * (the review of issue 38: a false 40P01).
		 */
		zkd_wait_end(&m->dl);
		a->waited = m->waited;
		if (mutex && !curator)
			held = lease_counted_before_create(a, m, max_holders);
		else if (mutex)
		{
			held = lease_counted_mutex_released(a, m, max_holders);
			if (!held && !a->try_only)
			{
				/*
				 * No room: give the lease back (it counted, so it goes
				 * before we queue again), and queue on the mutex anew,
				 * this time keeping it while we wait, as Curator does.
				 * One such round at most per acquisition.
				 */
				zka_abandon(a);
				begin_round(a, m, path);
				(void) zka_run_queue(m);	/* not a try: true or ERROR */
				zkd_wait_end(&m->dl);	/* (as above) */
				a->waited = true;
				lease_counted_after_create(a, max_holders);
				held = true;
			}
		}
	}
	PG_CATCH();
	{
		/* the lease goes before the mutex, so the next one counts less */
		zka_abandon(a);
		zka_abandon(m);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/* held or not, the mutex is only for counting: let the next one in */
	if (!held)
		zka_abandon(a);
	zka_abandon(m);
	return held;
}
