/*-------------------------------------------------------------------------
 *
 * parents.c
 *	  Lock parents and the levels above them: which ones exist in this
 *	  session, and creating the missing ones in front of a lock's create.
 *
 * Every lock parent is a CONTAINER node under zklock.root, as are the
 * levels between (a resource "a/b" has the levels <root>/a and the parent
 * <root>/a/b).  acquire.c and lockset.c send the creates of those they do
 * not know to exist right in front of the lock's, in the same round trip.
 *
 * src/acquire/parents.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "acquire/acquire.h"
#include "acquire/parents.h"

/*
 * Levels known to exist in the current session: the ancestors of lock
 * parents (the root, intermediate levels) and the lock parents themselves
 * that this backend created or created a node in.  A create under a known
 * parent is sent alone; under an unknown one, the parent's create (and
 * those of the unknown levels above it) go right in front of it, in the
 * same round trip (issue 31: names never used before are the normal case,
 * because the server reaps an empty lock parent within
 * znode.container.checkIntervalMs, 60 s by default).  That costs a name
 * seen for the first time by this backend one create more, which the
 * server answers NODEEXISTS when the parent is there after all; a fresh
 * name then costs one write more than a warm one, never a round trip.
 *
 * The levels are CONTAINER nodes, which the server removes once empty, so
 * knowing is only a good guess: a level that went shows up as NONODE for
 * the create below it, and then the whole cache is dropped (one level
 * gone usually means a reaping pass).  A new session (expiry, other
 * hosts) starts afresh.  Keys are 64-bit hashes of the paths: two paths
 * with one hash make one of them look known, which costs a NONODE and a
 * retry, never a wrong answer.  At LEVEL_CACHE_MAX entries the cache is
 * dropped and starts again.
 */
#define LEVEL_CACHE_MAX		32768

static HTAB *known_levels = NULL;
static int64 known_levels_session = 0;

void
zkp_forget_all(void)
{
	if (known_levels != NULL)
		hash_destroy(known_levels);
	known_levels = NULL;
}

static uint64
level_key(const char *path)
{
	return hash_bytes_extended((const unsigned char *) path,
							   (int) strlen(path), 0);
}

bool
zkp_known(const char *path)
{
	bool		found = false;
	uint64		key = level_key(path);

	if (known_levels_session != zks_session_id())
		zkp_forget_all();
	if (known_levels != NULL)
		hash_search(known_levels, &key, HASH_FIND, &found);
	return found;
}

void
zkp_remember(const char *path)
{
	uint64		key = level_key(path);

	if (known_levels_session != zks_session_id() ||
		(known_levels != NULL &&
		 hash_get_num_entries(known_levels) >= LEVEL_CACHE_MAX))
		zkp_forget_all();
	if (known_levels == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(uint64);
		ctl.entrysize = sizeof(uint64);
		ctl.hcxt = TopMemoryContext;
		known_levels = hash_create("zklock known levels", 64, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		known_levels_session = zks_session_id();
	}
	hash_search(known_levels, &key, HASH_ENTER, NULL);
}

void
zkp_answered(const char *path, ZksRc rc)
{
	if (rc == ZKS_OK || rc == ZKS_NODEEXISTS)
		zkp_remember(path);
	else if (rc == ZKS_NONODE)
		zkp_forget_all();		/* a level above went: a reaping pass */
}

List *
zkp_needed(ZkaAttempt *a, List *paths)
{
	for (const char *p = a->parent + 1; *p; p++)
	{
		/* every prefix ending before a '/', then the parent itself */
		if (p[1] == '/' || p[1] == '\0')
		{
			char	   *path = pnstrdup(a->parent, p + 1 - a->parent);

			if (zkp_known(path))
				pfree(path);
			else
				paths = lappend(paths, path);
		}
	}
	return paths;
}

/*
 * Create the lock parent and every ancestor, as CONTAINER nodes (the server
 * removes them once empty).  Only sent here: the caller sends its create
 * and listing right behind them, so the whole retry is one round trip
 * (ZooKeeper runs a session's requests in order), then checks them with
 * zkp_check().
 */
void
zkp_send(ZkaAttempt *a, bool include_parent)
{
	for (const char *p = a->parent + 1; *p; p++)
	{
		/* every prefix ending before a '/', then the parent itself */
		if (p[1] == '/' || (p[1] == '\0' && include_parent))
		{
			char	   *path = pnstrdup(a->parent, p + 1 - a->parent);

			if (zkp_known(path))
			{
				pfree(path);
				continue;
			}
			a->preqs = lappend(a->preqs,
							   zks_send_create(path, "", 0, ZKS_CONTAINER));
			a->ppaths = lappend(a->ppaths, path);
		}
	}
}

void
zkp_done(ZkaAttempt *a)
{
	ListCell   *lc;

	foreach(lc, a->preqs)
		zks_done((ZksRequest *) lfirst(lc));
	list_free(a->preqs);
	list_free_deep(a->ppaths);
	a->preqs = NIL;
	a->ppaths = NIL;
}

/*
 * Existing parents are fine; a lost reply is left to the create behind
 * them (it fails the same way); anything else ends the attempt.
 */
void
zkp_check(ZkaAttempt *a)
{
	ListCell   *lc;
	ListCell   *pc;
	ZksRc		failed = ZKS_OK;

	forboth(lc, a->preqs, pc, a->ppaths)
	{
		ZksRc		rc = zka_await_reply(a, (ZksRequest *) lfirst(lc));
		const char *path = (const char *) lfirst(pc);

		zkp_answered(path, rc);
		if (rc != ZKS_OK && rc != ZKS_NODEEXISTS &&
			rc != ZKS_CONNECTION_LOSS && rc != ZKS_NONODE && failed == ZKS_OK)
			failed = rc;
	}
	zkp_done(a);
	if (failed != ZKS_OK)
		zka_failure(a, ZKA_OP_CREATE_PARENT, failed);
}
