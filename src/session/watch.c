/*-------------------------------------------------------------------------
 *
 * watch.c
 *	  Watched nodes: which node watches this session has set, and which of
 *	  them have fired, and how.
 *
 * The recipe watches its predecessor, and, when the listing shows that
 * predecessor to be the only contender in its way, its own node as well.
 * Both are data watches on the session's connection.  ZooKeeper delivers
 * the watch events of one connection in the order of the changes (zxid
 * order), before any reply to a request sent after them, and libzookeeper
 * hands them to the session watcher in that order, before later
 * completions.  So when the predecessor's deletion arrives and our own
 * node's watch has not fired, our node still existed when the predecessor
 * went: the lock is ours without listing the queue again.  And at COMMIT a
 * sync alone confirms such a node: every deletion the leader had carried
 * out when it processed the sync reaches the watcher before the sync's
 * reply.
 *
 * That ordering argument holds only on one connection.  After a
 * disconnect libzookeeper re-registers the watches on the new connection,
 * and the server fires those for nodes already gone in the order of its
 * list, not of the deletions; so every session event turns the watches
 * still armed into "spent", which tells the callers to ask again (list,
 * or exists) as they would have without the watch.  A deletion event is
 * believed whenever it arrives, and an entry once deleted stays so until
 * it is forgotten: a node's name carries a sequence number and a random
 * id, and the table forgets a path as soon as its wait or its lock is
 * over, so no later node of the same name can meet the old entry.
 *
 * A node this backend holds keeps its watch while it is held
 * (zks_watch_held), and the watcher reports its deletion as a loss, which
 * cancels the statement running under it (session/cancel.c).  A change of
 * its data is read again with a new watch: it may be a request to give
 * the lock back (revokeform.c), which is recorded here and acted on by
 * session/cancel.c (zklock.on_revoke).
 *
 * The table is a fixed array of entries whose paths are malloc'd, under
 * zks_mutex: the session watcher (on libzookeeper's completion thread)
 * only changes the state of an entry the backend made; it never allocates
 * or frees.
 *
 * src/session/watch.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recipe/revokeform.h"
#include "session/session.h"
#include "session/session_int.h"

typedef struct WatchedNode
{
	char	   *path;			/* malloc'd */
	ZksWatchState state;
	bool		held;			/* a node this backend holds: its deletion
								 * is a loss (session/cancel.c) */
	bool		rereading;		/* its data changed: read again, with a
								 * new watch, and not answered yet */
	bool		reread_owed;	/* that read was lost with the connection:
								 * sent again at the next one */
	char	   *owner;			/* a held node's data as we wrote it
								 * (malloc'd; NULL if unknown) */
	bool		revoke_seen;	/* a request to give it back was read */
	bool		revoke_acted;	/* ... and it is given back (a loss) */
	int64		revoke_mtime;	/* when it was written (ms since 1970,
								 * the server's clock) */
	char		revoke_by[ZKS_REVOKE_BY_MAX];	/* its words, raw */
	int64_t		held_due_ns;	/* a held node whose watch is not sent
								 * yet: when it is due (zkn_now_ns());
								 * 0 once sent */
} WatchedNode;

/*
 * A held node's watch is sent this long after the grant, by the session's
 * nudge thread, not at once.  Most locks of a busy job are held for a few
 * milliseconds (lock, work, COMMIT): for them the watch would cost a
 * request, its reply, the deletion's notification and the wake-ups of
 * three threads per cycle -- 13 % of a lock cycle's time with
 * cancel_on_loss on against off, measured alone (bench/failfast) -- and
 * tell nothing the commit check does not.  A lock held longer gets its
 * watch within this delay (plus the thread's own wake-up, which it shares
 * with the reply nudge's), so a loss is still noticed within tens of
 * milliseconds: the read that sets the watch also finds a node already
 * gone (NONODE) or already asked back (its data).  Until the watch is
 * sent the entry says spent, so the commit check confirms the node with
 * an exists, as with cancel_on_loss off.
 */
#define HELD_WATCH_DELAY_MS 20

/*
 * At most this many nodes at once.  The watcher looks an event's path up
 * by a linear search on libzookeeper's thread, so the table stays small:
 * a backend holding thousands of locks simply stops watching its own
 * nodes (zks_watch_room() says so) and confirms them with exists.
 */
#define MAX_WATCHED 256

static WatchedNode watched[MAX_WATCHED];
static int	n_watched = 0;

static void reread_locked(int i);

static int
find_locked(const char *path)
{
	/*
	 * No caller may pass a path it no longer has (test_proxy s met one);
	 * should one, a crash would restart the whole cluster, while "not
	 * watched" costs at most a search at its schedule.  (No Assert: the
	 * watcher's thread comes here too, and runs nothing of PostgreSQL.)
	 */
	if (path == NULL)
		return -1;
	for (int i = 0; i < n_watched; i++)
		if (strcmp(watched[i].path, path) == 0)
			return i;
	return -1;
}

static void
remove_locked(int i)
{
	free(watched[i].path);
	free(watched[i].owner);
	watched[i] = watched[--n_watched];
}

/*
 * A new armed entry owning *copy (set to NULL then); false if the table
 * is full or the copy failed (zks_mutex held).
 */
static bool
add_locked(char **copy, bool held)
{
	if (*copy == NULL || n_watched >= MAX_WATCHED)
		return false;
	memset(&watched[n_watched], 0, sizeof(WatchedNode));
	watched[n_watched].path = *copy;
	watched[n_watched].state = ZKS_WATCH_ARMED;
	watched[n_watched].held = held;
	n_watched++;
	*copy = NULL;
	return true;
}

bool
zks_watch_room(void)
{
	bool		room;

	pthread_mutex_lock(&zks_mutex);
	room = n_watched < MAX_WATCHED - 1;
	pthread_mutex_unlock(&zks_mutex);
	return room;
}

ZksRequest *
zks_watch_node(const char *path, bool *tracked)
{
	char	   *copy = strdup(path);
	int			i;

	*tracked = false;
	pthread_mutex_lock(&zks_mutex);
	i = find_locked(path);
	if (i >= 0)
	{
		/* watched again after a listing: armed again, unless deleted */
		if (watched[i].state != ZKS_WATCH_DELETED)
			watched[i].state = ZKS_WATCH_ARMED;
		*tracked = true;
	}
	else
		*tracked = add_locked(&copy, false);
	pthread_mutex_unlock(&zks_mutex);
	free(copy);

	/* untracked, the watch is still set: its event wakes the waiter */
	return zks_send_watch_data(path);
}

void
zks_watch_reply(const char *path, ZksRc rc)
{
	int			i;

	if (rc == ZKS_OK)
		return;
	pthread_mutex_lock(&zks_mutex);
	i = find_locked(path);
	/* not registered: gone already, or unknown (connection lost) */
	if (i >= 0 && watched[i].state == ZKS_WATCH_ARMED)
		watched[i].state = (rc == ZKS_NONODE) ? ZKS_WATCH_DELETED :
			ZKS_WATCH_SPENT;
	pthread_mutex_unlock(&zks_mutex);
}

/*
 * A held node keeps a data watch for as long as it is held.  A waiter that
 * watched its own node keeps that watch; otherwise one is sent now and
 * not waited for: the lock call returns at once, and the reply, handled
 * on the completion thread, tells whether the node was already gone.
 * Until that reply the entry says armed, which the pre-commit check may
 * believe: its sync goes out behind the watch's request, and the reply to
 * that request is handled first.  A watch spent by a reconnect is still
 * registered on the new connection (libzookeeper re-sends its watches);
 * one spent by a change of the node's data is sent again here only if the
 * node is held anew, so that change costs fail-fast on that node, never
 * its loss at COMMIT.
 */
void
zks_watch_held(const char *path, const char *owner)
{
	char	   *copy = strdup(path);
	char	   *owner_copy = owner != NULL ? strdup(owner) : NULL;
	bool		send = false;
	bool		added = false;
	int64_t		due = 0;
	int			i;

	pthread_mutex_lock(&zks_mutex);
	i = find_locked(path);
	if (i < 0 && add_locked(&copy, true))
	{
		i = n_watched - 1;
		added = true;
		if (zkn_running())
		{
			/* sent by the nudge thread once due (HELD_WATCH_DELAY_MS) */
			due = zkn_now_ns() + (int64_t) HELD_WATCH_DELAY_MS * 1000000;
			watched[i].held_due_ns = due;
			watched[i].state = ZKS_WATCH_SPENT;
		}
		else
			send = true;
	}
	if (i >= 0 && watched[i].owner == NULL)
	{
		watched[i].owner = owner_copy;
		owner_copy = NULL;
	}
	if (i >= 0 && !added)
	{
		watched[i].held = true;
		if (watched[i].state == ZKS_WATCH_DELETED)
			zksc_loss_locked();
		else if (watched[i].state == ZKS_WATCH_SPENT &&
				 watched[i].held_due_ns == 0 && !watched[i].rereading)
		{
			watched[i].state = ZKS_WATCH_ARMED;
			send = true;
		}
	}
	pthread_mutex_unlock(&zks_mutex);
	free(copy);
	free(owner_copy);
	if (send)
		zks_send_held_watch(path);
	else if (due != 0)
		zkn_held_watch_due(due);
}

/*
 * Send the held nodes' watches that are due by now (the nudge thread,
 * zks_mutex held).  Returns when the next one is due, 0 if none waits.
 * Sent as a re-read: the entry stays spent until the read's OK arms it.
 * Not armed before the read is queued, as the backend's own send is:
 * the commit check sends its sync first and reads the states after, so
 * on this thread a read queued between the two would sit behind the
 * sync, and "armed" would let the check confirm a node deleted before
 * the watch was set (the read's NONODE is handled only after the sync's
 * reply).  Armed by the OK instead, the node is shown to have outlived
 * the read, sent before or after the sync.  A read a lost connection
 * took with it is owed, and sent again once connected.
 */
int64_t
zkw_send_due_held_locked(int64_t now)
{
	int64_t		next = 0;

	for (int i = 0; i < n_watched; i++)
	{
		int64_t		due = watched[i].held_due_ns;

		if (due == 0)
			continue;
		if (due > now)
		{
			if (next == 0 || due < next)
				next = due;
			continue;
		}
		watched[i].held_due_ns = 0;
		reread_locked(i);
	}
	return next;
}

/*
 * A held node's data says it is asked back (zks_mutex held; completion
 * thread): record the first request, and let session/cancel.c decide
 * what the backend does about it.  The words are kept raw (bounded); the
 * backend cleans them before anyone sees them.
 */
static void
revoke_request_locked(int i, const char *value, int value_len,
					  const struct Stat *stat)
{
	const char *by;
	size_t		by_len;
	ZkvForm		form;

	if (watched[i].revoke_seen || value == NULL || value_len < 0)
		return;
	form = zkv_parse(value, (size_t) value_len, &by, &by_len);
	if (form == ZKV_NONE)
		return;
	watched[i].revoke_seen = true;
	watched[i].revoke_mtime = stat != NULL ? stat->mtime : 0;
	if (by_len >= ZKS_REVOKE_BY_MAX)
		by_len = ZKS_REVOKE_BY_MAX - 1;
	memcpy(watched[i].revoke_by, by, by_len);
	watched[i].revoke_by[by_len] = '\0';
	switch (zksc_revoked_locked())
	{
		case ZKSC_REVOKE_IGNORED:
			/*
			 * Kept: a bare word (Curator's, the recipe's) took the place
			 * of the owner line, which other backends read to name the
			 * holder and to find it in the deadlock search.  Put the
			 * line back, the word as its request, if nobody changed the
			 * node since (the version read).
			 */
			if (form != ZKV_ZKLOCK && watched[i].owner != NULL &&
				stat != NULL)
				(void) zksr_rewrite_locked(watched[i].path,
										   watched[i].owner,
										   watched[i].revoke_by,
										   stat->version);
			break;
		case ZKSC_REVOKE_NOTED:
		case ZKSC_REVOKE_CANCELED:
			watched[i].revoke_acted = true;
			break;
		case ZKSC_REVOKE_RELEASE:
			/* nothing runs under it: give it back now (session/cancel.c) */
			watched[i].revoke_acted = true;
			zkt_add_task_locked(watched[i].path, NULL);
			break;
	}
}

/*
 * The reply to a held node's watch, or to its re-read after a change
 * (zks_mutex held; completion thread).  A NONODE here needs no sync
 * before it is believed: the getData follows our own create on the same
 * session, so the server answering it has applied that create, and a
 * node it no longer has was deleted since.  The data may ask for the
 * lock back.
 */
void
zkw_held_reply_locked(const char *path, int zrc, const char *value,
					  int value_len, const struct Stat *stat)
{
	int			i = find_locked(path);
	bool		reread;

	if (i < 0)
		return;
	reread = watched[i].rereading;
	watched[i].rereading = false;
	if (zrc == ZOK)
	{
		/*
		 * The re-read's watch is set (a connection lost since would have
		 * answered otherwise): armed again on this connection.
		 */
		if (reread && watched[i].state == ZKS_WATCH_SPENT)
			watched[i].state = ZKS_WATCH_ARMED;
		if (watched[i].held)
			revoke_request_locked(i, value, value_len, stat);
		return;
	}
	if (reread && zrc != ZNONODE)
	{
		/* a change not read: read it once connected again */
		watched[i].reread_owed = true;
		return;
	}
	if (watched[i].state != ZKS_WATCH_ARMED && !reread)
		return;
	if (zrc == ZNONODE)
	{
		if (watched[i].held && watched[i].state != ZKS_WATCH_DELETED &&
			!watched[i].revoke_acted)
			zksc_loss_locked();
		watched[i].state = ZKS_WATCH_DELETED;
	}
	else if (watched[i].state == ZKS_WATCH_ARMED)
		watched[i].state = ZKS_WATCH_SPENT;
}

ZksWatchState
zks_watch_state(const char *path)
{
	ZksWatchState st = ZKS_WATCH_NONE;
	int			i;

	pthread_mutex_lock(&zks_mutex);
	i = find_locked(path);
	if (i >= 0)
		st = watched[i].state;
	pthread_mutex_unlock(&zks_mutex);
	return st;
}

void
zks_unwatch_node(const char *path)
{
	int			i;

	pthread_mutex_lock(&zks_mutex);
	i = find_locked(path);
	if (i >= 0)
		remove_locked(i);
	pthread_mutex_unlock(&zks_mutex);
}

/* The session watcher, for a node event (zks_mutex held). */
void
zkw_node_event_locked(int type, const char *path)
{
	int			i;

	if (path == NULL)
		return;
	i = find_locked(path);
	if (i < 0)
		return;
	if (type == ZOO_DELETED_EVENT)
	{
		/* (a node given back on request was counted lost then) */
		if (watched[i].held && watched[i].state != ZKS_WATCH_DELETED &&
			!watched[i].revoke_acted)
			zksc_loss_locked();
		watched[i].state = ZKS_WATCH_DELETED;
	}
	else
	{
		/*
		 * Fired: watches no more.  A held node's changed data is read
		 * again with a new watch (a request to give it back, most
		 * likely: zklock never changes a contender's data), in whatever
		 * state a reconnect left the entry (libzookeeper set the watch
		 * again on the new connection, and it fired).  Spent until that
		 * read is answered: a deletion meanwhile would reach no watch,
		 * so a sync alone must not confirm the node.
		 */
		if (watched[i].state == ZKS_WATCH_ARMED)
			watched[i].state = ZKS_WATCH_SPENT;
		if (watched[i].held && type == ZOO_CHANGED_EVENT)
			reread_locked(i);
	}
}

/* Read a held node again, unless a read is on its way (zks_mutex held). */
static void
reread_locked(int i)
{
	if (watched[i].rereading || watched[i].state == ZKS_WATCH_DELETED)
		return;
	watched[i].reread_owed = false;
	watched[i].rereading = zksr_reread_held_locked(watched[i].path);
	if (!watched[i].rereading)
		watched[i].reread_owed = true;
}

bool
zks_watch_revoke(const char *path, ZksRevoke *r)
{
	int			i;
	int64		mtime = 0;

	memset(r, 0, sizeof(ZksRevoke));
	pthread_mutex_lock(&zks_mutex);
	i = find_locked(path);
	if (i >= 0)
	{
		r->watched = true;
		r->requested = watched[i].revoke_seen;
		r->acted = watched[i].revoke_acted;
		mtime = watched[i].revoke_mtime;
		memcpy(r->by, watched[i].revoke_by, ZKS_REVOKE_BY_MAX);
	}
	pthread_mutex_unlock(&zks_mutex);
	if (mtime > 0)
	{
		struct timespec ts;

		ts.tv_sec = (time_t) (mtime / 1000);
		ts.tv_nsec = (long) (mtime % 1000) * 1000000;
		r->at = zks_timespec_to_timestamptz(&ts);
	}
	return i >= 0;
}

/*
 * The session watcher, for a session event (zks_mutex held).  Connected
 * again: the reads of changed held nodes that the lost connection took
 * with it are sent now (their watches' events are not sent again).
 */
void
zkw_session_event_locked(int state)
{
	for (int i = 0; i < n_watched; i++)
	{
		if (watched[i].state == ZKS_WATCH_ARMED)
			watched[i].state = ZKS_WATCH_SPENT;
		if (state == ZOO_CONNECTED_STATE && watched[i].reread_owed &&
			watched[i].held)
			reread_locked(i);
	}
}

/* The handle is closed (zks_mutex held): every watch went with it. */
void
zkw_forget_all_locked(void)
{
	while (n_watched > 0)
		remove_locked(n_watched - 1);
}
