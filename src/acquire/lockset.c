/*-------------------------------------------------------------------------
 *
 * lockset.c
 *	  Taking a set of locks in one call: every one or none, in one
 *	  canonical order, with the requests pipelined.
 *
 * The locks are taken in the order of their lock parents' full paths.
 * While nothing is in the way, the creates go out in multi requests (each
 * well under ZooKeeper's 1 MB limit, see session.c) and each lock's
 * listing right behind the multi that made its node, all back to back:
 * 10,000 free locks cost ten multi requests and one read each, in a few
 * round trips.  ZooKeeper runs a session's requests in order, so each
 * listing already contains the node the multi in front of it made.
 *
 * ZooKeeper applies a multi as one transaction: every node it creates
 * gets the multi's zxid as its czxid (DataTree gives each sub-operation
 * the multi's header).  One exists on the first node of each multi is
 * therefore the fencing token of all of them.
 *
 * When a lock of the set is taken by someone else, the nodes of every
 * lock after it in the canonical order are deleted before waiting for it,
 * and created again, pipelined the same way, once it is ours.  So a caller
 * of this function that waits for a lock holds only locks before it in
 * that order, and every other such caller queued ahead of it on that lock
 * either holds it or waits for that same lock: a chain of waits between
 * them only goes up the order and never closes.  Two sessions asking for
 * overlapping sets, in whatever order their arrays give, never deadlock
 * each other.  (Locks the backend held before the call are outside this
 * argument; deadlock.c still watches every wait.)
 *
 * Nodes a create made cannot be found by name when its reply is lost: as
 * for single creates (acquire.c), they are found again by their prefix,
 * one for the whole call, after a sync.  A copy that runs late leaves
 * nodes of that prefix, never in the call's way (acquire.c counts them as
 * its own), deleted by a sweep for the prefix once the call's nodes are
 * released or given up -- never earlier: a sweep listed only after a
 * reconnect could take a node of a later round.
 *
 * src/acquire/lockset.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/guc.h"
#include "utils/hsearch.h"

#include "acquire/acquire.h"
#include "acquire/parents.h"
#include "acquire/lockset.h"
#include "zklock.h"

/* How often a multi is sent again when a parent keeps vanishing. */
#define MAX_CREATE_TRIES 10

/* One multi request: the creates of atts[first .. first + count - 1]. */
typedef struct Batch
{
	int			first;
	int			count;
	ZksRequest *mreq;			/* the multi create, in flight */
	ZksRequest *ereq;			/* exists on its first node: the token */
} Batch;

typedef struct LockSet
{
	ZkaAttempt **atts;			/* in canonical order */
	int			n;
	Batch	   *batches;		/* the current round's */
	int			nbatches;
	List	   *lreqs;			/* LevelReqs: creates sent in front */
	ZkaAttempt *blocked;		/* the lock a try found taken */
} LockSet;

static void send_levels(LockSet *s, int from, int to, bool singly);
static void create_singly(LockSet *s, Batch *b);

static int
compare_parents(const void *x, const void *y)
{
	const ZkaAttempt *a = *(ZkaAttempt *const *) x;
	const ZkaAttempt *b = *(ZkaAttempt *const *) y;

	return strcmp(a->parent, b->parent);
}

/*
 * Name the call's nodes: one prefix for every lock (their parents are
 * distinct) and every round (see the file's comment on lost replies).
 */
static void
name_nodes(LockSet *s)
{
	char		uuid[ZKR_UUID_LEN + 1];
	char		prefix[ZKR_MAX_PREFIX_BYTES];

	zka_new_uuid(uuid);
	if (zkr_protocol_prefix((ZkrProtocol) zklock_protocol, s->atts[0]->mode,
							uuid, prefix, sizeof(prefix)) == 0)
		elog(ERROR, "zklock node prefix does not fit");
	for (int i = 0; i < s->n; i++)
	{
		ZkaAttempt *a = s->atts[i];

		strlcpy(a->prefix, prefix, sizeof(a->prefix));
		a->create_path = psprintf("%s/%s", a->parent, a->prefix);
	}
}

/*
 * Send the multi create of atts[b->first ..] (as many as fit of the limit
 * given) and, right behind it, the listing of each parent.
 */
static void
send_batch(LockSet *s, Batch *b, int limit)
{
	const char **paths = palloc(sizeof(char *) * limit);
	const char *data = s->atts[b->first]->data;

	for (int j = 0; j < limit; j++)
		paths[j] = s->atts[b->first + j]->create_path;
	b->mreq = zks_send_creates(paths, limit, data, strlen(data), &b->count);
	for (int j = 0; j < b->count; j++)
	{
		ZkaAttempt *a = s->atts[b->first + j];

		a->lreq = zks_send_children(a->parent, false);
	}
	pfree(paths);
}

/* Send every create and listing of atts[from..], back to back. */
static void
send_round(LockSet *s, int from)
{
	send_levels(s, from, s->n, false);
	s->nbatches = 0;
	while (from < s->n)
	{
		Batch	   *b = &s->batches[s->nbatches++];

		memset(b, 0, sizeof(Batch));
		b->first = from;
		send_batch(s, b, s->n - from);
		from += b->count;
	}
}

/* One request of levels sent in front of the locks' multis. */
typedef struct LevelReq
{
	ZksRequest *req;
	List	   *paths;			/* what it creates (a multi: all or none) */
} LevelReq;

static void
add_level_req(LockSet *s, ZksRequest *req, List *paths)
{
	LevelReq   *lr = palloc(sizeof(LevelReq));

	lr->req = req;
	lr->paths = paths;
	s->lreqs = lappend(s->lreqs, lr);
}

/*
 * Send, in front of the multis of atts[from .. to - 1], the creates of the
 * levels their locks need and this session does not know to exist (lock
 * parents never used before, or reaped since; new levels above them),
 * each once, as CONTAINER nodes.  ZooKeeper runs a session's requests in
 * order, so every multi behind them finds its parents: names used for
 * the first time cost no round trip more than warm ones (issue 31).
 *
 * The levels above the parents (few, shared) go one create each, first;
 * the parents themselves, if together, in multi requests: one write for
 * a thousand parents instead of a thousand, which is what makes a call
 * on fresh names nearly as cheap as one on warm names.  A multi is all or
 * none: if one of its parents exists after all (names this backend has
 * not seen, used by others), it fails with NODEEXISTS and creates
 * nothing, and a lock multi behind it whose parents are not all there
 * fails with NONODE; collect_batch then sends that batch's levels one
 * create each (singly), which cannot fail that way.
 */
static void
send_levels(LockSet *s, int from, int to, bool singly)
{
	HASHCTL		ctl;
	HTAB	   *sent;
	List	   *parents = NIL;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(uint64);
	ctl.hcxt = CurrentMemoryContext;
	sent = hash_create("zklock levels sent", 64, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	for (int i = from; i < to; i++)
	{
		ListCell   *lc;
		List	   *paths = zkp_needed(s->atts[i], NIL);

		foreach(lc, paths)
		{
			char	   *path = (char *) lfirst(lc);
			uint64		key = hash_bytes_extended((const unsigned char *) path,
												  (int) strlen(path), 0);
			bool		found;

			hash_search(sent, &key, HASH_ENTER, &found);
			if (found)
				continue;		/* an ancestor the locks before share */
			if (!singly && strcmp(path, s->atts[i]->parent) == 0)
				parents = lappend(parents, path);
			else
				add_level_req(s, zks_send_create(path, "", 0, ZKS_CONTAINER),
							  list_make1(path));
		}
	}
	hash_destroy(sent);

	/* the parents, behind every level above them */
	if (list_length(parents) == 1)
		add_level_req(s, zks_send_create(linitial(parents), "", 0,
										 ZKS_CONTAINER), parents);
	else if (parents != NIL)
	{
		int			n = list_length(parents);
		const char **paths = palloc(sizeof(char *) * n);
		int			done = 0;

		for (int i = 0; i < n; i++)
			paths[i] = list_nth(parents, i);
		while (done < n)
		{
			int			taken;
			List	   *covered = NIL;
			ZksRequest *req = zks_send_containers(paths + done, n - done,
												  &taken);

			for (int i = done; i < done + taken; i++)
				covered = lappend(covered, (char *) paths[i]);
			add_level_req(s, req, covered);
			done += taken;
		}
	}
}

static void
done_levels(LockSet *s)
{
	ListCell   *lc;

	foreach(lc, s->lreqs)
		zks_done(((LevelReq *) lfirst(lc))->req);
	list_free(s->lreqs);
	s->lreqs = NIL;
}

/*
 * The levels' answers, which come before the multis': levels made or
 * there are fine; a multi of parents that failed with NODEEXISTS made
 * none, which the lock multi behind it tells (NONODE, handled there);
 * NONODE (a level above went meanwhile) and a lost reply are left to the
 * lock multi too, which fails the same way; anything else ends the call.
 */
static void
check_levels(LockSet *s, ZkaAttempt *lead)
{
	ListCell   *lc;
	ZksRc		failed = ZKS_OK;

	foreach(lc, s->lreqs)
	{
		LevelReq   *lr = (LevelReq *) lfirst(lc);
		ZksRc		rc = zka_await_reply(lead, lr->req);
		ListCell   *pc;

		if (rc == ZKS_NODEEXISTS && list_length(lr->paths) > 1)
			continue;			/* a multi of parents: none made, some there */
		foreach(pc, lr->paths)
			zkp_answered((const char *) lfirst(pc), rc);
		if (rc != ZKS_OK && rc != ZKS_NODEEXISTS && rc != ZKS_NONODE &&
			rc != ZKS_CONNECTION_LOSS && failed == ZKS_OK)
			failed = rc;
	}
	done_levels(s);
	if (failed != ZKS_OK)
		zka_failure(lead, ZKA_OP_CREATE_PARENT, failed);
}

/*
 * The batch's locks one create each, all sent back to back (each behind
 * its parent's create, which the cache, dropped on the NONODE that brought
 * us here, no longer skips), then each completed: zka_complete_create
 * retries a lock whose parent went again.  The listings go behind each
 * create, as in the multi's case, and each create's reply carries its
 * node's czxid.
 */
static void
create_singly(LockSet *s, Batch *b)
{
	for (int j = 0; j < b->count; j++)
	{
		ZkaAttempt *a = s->atts[b->first + j];

		zka_done_req(&a->lreq);
		zka_send_create(a);
	}
	for (int j = 0; j < b->count; j++)
		zka_complete_create(s->atts[b->first + j]);
}

/*
 * Wait for the exists in *req on a->node (sent again after a lost reply)
 * and return the node's czxid, after checking it is this session's.
 */
static int64
node_czxid(ZkaAttempt *a, ZksRequest **req)
{
	ZksStat		st;
	ZksRc		rc;

	for (;;)
	{
		rc = zka_await_reply(a, *req);
		if (rc != ZKS_CONNECTION_LOSS)
			break;
		zka_done_req(req);
		zka_await_reconnect(a);
		*req = zks_send_exists(a->node, false);
	}
	if (rc == ZKS_NONODE)
		zka_vanished_error(a);
	if (rc != ZKS_OK)
		zka_failure(a, ZKA_OP_READ, rc);
	zks_get_stat(*req, &st);
	zka_done_req(req);
	if (st.ephemeral_owner != zks_session_id())
		zka_vanished_error(a);
	return st.czxid;
}

/*
 * The multi's reply was lost: it ran entirely or not at all.  After the
 * session is back, sync the server with the leader (it may not have seen
 * the multi yet) and list every parent for the call's prefix.  Returns
 * true with a node adopted for every lock, and its token read, if each
 * parent has one of ours; false otherwise, and the multi is sent again.
 * A node adopted may come from a copy of an earlier round's multi that
 * ran late rather than from this one: it is ours all the same, but its
 * czxid is its own, so each node's token is read here.  Where only some
 * parents have one, the multi did not run (or someone deleted nodes of
 * it): the ones found are strays, swept when the call ends.
 */
static bool
recover_batch(LockSet *s, Batch *b)
{
	ZkaAttempt *lead = s->atts[b->first];
	int			found = 0;

	for (;;)
	{
		bool		lost;

		zka_await_reconnect(lead);
		lead->ereq = zks_send_sync(lead->parent);
		for (int j = 0; j < b->count; j++)
		{
			ZkaAttempt *a = s->atts[b->first + j];

			a->lreq = zks_send_children(a->parent, false);
		}
		lost = zka_await_reply(lead, lead->ereq) == ZKS_CONNECTION_LOSS;
		zka_done_req(&lead->ereq);
		for (int j = 0; j < b->count; j++)
		{
			ZkaAttempt *a = s->atts[b->first + j];

			if (zka_await_reply(a, a->lreq) == ZKS_CONNECTION_LOSS)
				lost = true;
		}
		if (!lost)
			break;
		for (int j = 0; j < b->count; j++)
			zka_done_req(&s->atts[b->first + j]->lreq);
	}

	for (int j = 0; j < b->count; j++)
	{
		ZkaAttempt *a = s->atts[b->first + j];
		ZksRc		rc = zka_await_reply(a, a->lreq);

		if (rc == ZKS_OK)
		{
			int			n;
			char	  **children = zks_get_children(a->lreq, &n);

			for (int i = 0; i < n && a->node == NULL; i++)
				if (zkr_has_prefix(children[i], a->prefix))
				{
					a->node = psprintf("%s/%s", a->parent, children[i]);
					a->name = strrchr(a->node, '/') + 1;
					found++;
				}
		}
		else if (rc != ZKS_NONODE)
			zka_failure(a, ZKA_OP_LIST, rc);
		zka_done_req(&a->lreq);
	}
	if (found < b->count)
	{
		for (int j = 0; j < b->count; j++)
		{
			s->atts[b->first + j]->node = NULL;
			s->atts[b->first + j]->name = NULL;
		}
		return false;
	}
	for (int j = 0; j < b->count; j++)
	{
		ZkaAttempt *a = s->atts[b->first + j];

		a->ereq = zks_send_exists(a->node, false);
	}
	for (int j = 0; j < b->count; j++)
	{
		ZkaAttempt *a = s->atts[b->first + j];

		a->token = node_czxid(a, &a->ereq);
	}
	return true;
}

/* Wait for a batch's multi; afterwards every node of it exists. */
static void
collect_batch(LockSet *s, Batch *b)
{
	ZkaAttempt *lead = s->atts[b->first];

	for (int tries = 0;; tries++)
	{
		ZksRc		rc = zka_await_reply(lead, b->mreq);

		if (rc == ZKS_OK)
		{
			for (int j = 0; j < b->count; j++)
			{
				ZkaAttempt *a = s->atts[b->first + j];

				a->node = zks_take_created_path_at(b->mreq, j);
				a->name = strrchr(a->node, '/') + 1;
			}
			/* the nodes are the attempts' now: zka_abandon deletes them */
			zks_claim(b->mreq);
			for (int j = 0; j < b->count; j++)
				zkp_answered(s->atts[b->first + j]->parent, ZKS_OK);
			zka_done_req(&b->mreq);
			break;
		}
		if (tries >= MAX_CREATE_TRIES ||
			(rc != ZKS_NONODE && rc != ZKS_CONNECTION_LOSS))
		{
			/* name the lock whose create failed, not the batch's first */
			ZkaAttempt *culprit = s->atts[b->first + zks_failed_op(b->mreq)];

			zka_done_req(&b->mreq);
			zka_failure(culprit, ZKA_OP_CREATE_NODE, rc);
		}

		if (rc == ZKS_NONODE && tries >= 2)
		{
			/*
			 * Parents keep going under us (a reaping pass over many empty
			 * parents: one delete every few milliseconds): a multi of a
			 * thousand needs all of them at one moment.  Go on lock by
			 * lock, each create with its parent's right in front, each
			 * retried on its own (acquire.c), still pipelined.
			 */
			zka_done_req(&b->mreq);
			create_singly(s, b);
			return;				/* the creates' replies gave the tokens */
		}
		if (rc == ZKS_NONODE)
		{
			/*
			 * A parent went between its create (or our knowing it) and
			 * the multi: the server reaped it as an empty container.  The
			 * multi created nothing.  What we knew is dropped, and this
			 * batch's levels go out again in front of the multi (a parent
			 * made that way has had no child yet, which the server never
			 * reaps), with its listings behind it.
			 */
			zka_done_req(&b->mreq);
			for (int j = 0; j < b->count; j++)
				zka_done_req(&s->atts[b->first + j]->lreq);
			zkp_answered(lead->parent, ZKS_NONODE);
			send_levels(s, b->first, b->first + b->count, true);
			send_batch(s, b, b->count);
			check_levels(s, lead);
			continue;
		}

		/*
		 * The reply was lost.  The nodes, if any, are found by prefix
		 * here; until then a give-up sweeps for them.  A multi that runs
		 * only later leaves strays of the same prefix, never in our way
		 * (acquire.c counts them as ours) and swept when the call ends.
		 */
		zks_claim(b->mreq);
		zka_done_req(&b->mreq);
		for (int j = 0; j < b->count; j++)
		{
			ZkaAttempt *a = s->atts[b->first + j];

			zka_done_req(&a->lreq);
			a->uncertain = true;
		}
		if (recover_batch(s, b))
			return;				/* each node's token read there */
		for (int j = 0; j < b->count; j++)
			zka_done_req(&s->atts[b->first + j]->lreq);
		send_batch(s, b, b->count);
	}

	/*
	 * Sent behind the multi's reply: even a server the session moves to
	 * has seen the multi (a client never reconnects to a server behind
	 * the last zxid it saw).
	 */
	b->ereq = zks_send_exists(lead->node, false);
}

/* The fencing token of a batch: the czxid its multi gave every node. */
static void
collect_token(LockSet *s, Batch *b)
{
	int64		czxid;

	if (b->ereq == NULL)
		return;					/* created singly or recovered: known */
	czxid = node_czxid(s->atts[b->first], &b->ereq);
	for (int j = 0; j < b->count; j++)
		s->atts[b->first + j]->token = czxid;
}

/*
 * Give up the queue positions of atts[from..]: delete their nodes.  No
 * sweep for strays yet (the next round creates nodes of the same prefix);
 * it comes when the call ends.
 */
static void
give_up_from(LockSet *s, int from)
{
	zks_batch_begin();
	for (int i = from; i < s->n; i++)
	{
		ZkaAttempt *a = s->atts[i];
		bool		uncertain = a->uncertain;

		a->uncertain = false;
		zka_abandon(a);
		a->uncertain = uncertain;
		a->name = NULL;
		a->token = 0;
	}
	zks_batch_end();
}

/*
 * The rounds: send everything from start on, take the nodes and tokens,
 * look at each lock in order; stop at the first one taken by someone
 * else, give up what follows it, wait for it, and go on after it.
 */
static bool
run_rounds(LockSet *s, bool try_only)
{
	int			start = 0;

	while (start < s->n)
	{
		int			blocked = -1;

		send_round(s, start);
		check_levels(s, s->atts[start]);
		for (int k = 0; k < s->nbatches; k++)
			collect_batch(s, &s->batches[k]);
		for (int k = 0; k < s->nbatches; k++)
			collect_token(s, &s->batches[k]);
		s->nbatches = 0;

		for (int i = start; i < s->n && blocked < 0; i++)
			if (!zka_await_turn(s->atts[i]))
				blocked = i;
		if (blocked < 0)
			return true;
		if (try_only)
		{
			s->blocked = s->atts[blocked];
			return false;
		}

		give_up_from(s, blocked + 1);
		s->atts[blocked]->try_only = false;
		(void) zka_await_turn(s->atts[blocked]);
		zkd_wait_end(&s->atts[blocked]->dl);
		start = blocked + 1;
	}
	return true;
}

bool
zkm_acquire_set(ZkaAttempt **atts, int n, ZkaAttempt **blocked)
{
	LockSet    *s = palloc(sizeof(LockSet));
	bool		try_only = atts[0]->try_only;
	volatile bool all = false;

	qsort(atts, n, sizeof(ZkaAttempt *), compare_parents);
	s->atts = atts;
	s->n = n;
	s->batches = palloc(sizeof(Batch) * n);
	s->nbatches = 0;
	s->lreqs = NIL;
	s->blocked = NULL;

	/* the first look at each lock never waits (run_rounds waits) */
	for (int i = 0; i < n; i++)
		atts[i]->try_only = true;

	PG_TRY();
	{
		name_nodes(s);
		all = run_rounds(s, try_only);
	}
	PG_CATCH();
	{
		done_levels(s);
		for (int k = 0; k < s->nbatches; k++)
		{
			zks_done(s->batches[k].mreq);
			zks_done(s->batches[k].ereq);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	*blocked = s->blocked;
	pfree(s->batches);
	pfree(s);
	return all;
}
