/*-------------------------------------------------------------------------
 *
 * heldread.c
 *	  The reads of a held node that nobody waits for: the data watch a
 *	  held node keeps (session/watch.c), read again when its data changed
 *	  (a request to give the lock back, recipe/revokeform.c), and the
 *	  owner line written back over a bare word (zklock.on_revoke = ignore).
 *
 * These are sent from the backend or from libzookeeper's and the nudge
 * thread's side, always under zks_mutex (an async call only queues the
 * request), and their completions run on libzookeeper's completion
 * thread: nothing of PostgreSQL but SetLatch.  Part of the session
 * layer's requests (session/request.c, request_int.h).
 *
 * src/session/heldread.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdlib.h>
#include <string.h>

#include "recipe/revokeform.h"
#include "session/request_int.h"

/*
 * The reply to a held node's watch (zks_watch_held).  Nobody waits for it:
 * the request sits in the abandoned list from the start, so that a close
 * frees it if this never runs.
 */
static void
held_watch_completion(int rc, const char *value, int value_len,
					  const struct Stat *stat, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;
	bool		wake;

	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	zkw_held_reply_locked(req->path, rc, value, value_len, stat);
	zksr_unlink_abandoned_locked(req);
	zksr_free_request(req);
	wake = zks_take_wake_locked();
	pthread_mutex_unlock(&zks_mutex);
	if (wake)
		zks_wake_backend();
}

/*
 * Never raises: the node is already in the lock table.  A watch that
 * cannot be sent leaves the node's entry spent, as after a lost reply.
 */
void
zks_send_held_watch(const char *path)
{
	pthread_mutex_lock(&zks_mutex);
	if (!zksr_reread_held_locked(path))
		zkw_held_reply_locked(path, ZINVALIDSTATE, NULL, 0, NULL);
	pthread_mutex_unlock(&zks_mutex);
}

/* The reply to a rewrite: nobody waits for it. */
static void
rewrite_completion(int rc, const struct Stat *stat, const void *data)
{
	zkn_answered(rc);
}

bool
zksr_rewrite_locked(const char *path, const char *owner, const char *request,
					int version)
{
	char		buf[ZKS_REVOKE_BY_MAX + 4096];
	size_t		len = zkv_build(owner, strlen(owner), request, buf, sizeof(buf));
	int			zrc;

	if (len == 0 || zh == NULL || zh_closing)
		return false;
	/* (a newer version: someone wrote since, and is heard of in turn) */
	zrc = zoo_aset(zh, path, buf, (int) len, version, rewrite_completion,
				   NULL);
	if (zrc == ZOK || zrc == ZMARSHALLINGERROR || zrc == ZSYSTEMERROR)
		zkn_sent();
	return zrc == ZOK;
}

/*
 * The same read, sent by the backend for a node it now holds and by the
 * session watcher when a held node's data changed (zks_mutex held; an
 * async call only queues the request, as the nudge thread's do, so it is
 * made under the mutex from any thread).  False if nothing was sent: no
 * completion will come.
 */
bool
zksr_reread_held_locked(const char *path)
{
	ZksRequest *req;
	int			zrc;

	if (zh == NULL || zh_closing)
		return false;
	req = calloc(1, sizeof(ZksRequest));
	if (req == NULL || (req->path = strdup(path)) == NULL)
	{
		free(req);
		return false;
	}
	req->kind = KIND_GET;
	zksr_link_abandoned_locked(req);
	zrc = zoo_aget(zh, path, 1, held_watch_completion, req);
	if (zrc == ZOK || zrc == ZMARSHALLINGERROR || zrc == ZSYSTEMERROR)
		zkn_sent();
	if (zrc == ZOK)
		return true;
	/* refused before its completion was registered: nobody frees it */
	if (zrc != ZMARSHALLINGERROR && zrc != ZSYSTEMERROR)
	{
		zksr_unlink_abandoned_locked(req);
		zksr_free_request(req);
		return false;
	}
	return true;				/* its completion still comes */
}
