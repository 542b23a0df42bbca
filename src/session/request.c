/*-------------------------------------------------------------------------
 *
 * request.c
 *	  The session's requests: sending them with the asynchronous zoo_a*
 *	  calls, their completions (on libzookeeper's completion thread), the
 *	  backend's interruptible wait for a reply, their results, and handing
 *	  them back -- a create that succeeds after its waiter gave up has its
 *	  node deleted (session/cleanup.c).  Requests of many operations are
 *	  session/multi.c's, the held nodes' reads session/heldread.c's; the
 *	  request's insides they share are in request_int.h.
 *
 * Part of the session layer (see session.c): a completion may call
 * nothing of PostgreSQL but SetLatch; it stores what it got in malloc'd
 * memory under zks_mutex.
 *
 * src/session/request.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <string.h>

#include <zookeeper.h>

#include "miscadmin.h"
#include "utils/timestamp.h"

#include "session/request_int.h"
#include "zklock.h"

/*
 * Requests the backend gave up on while their reply was outstanding.  Their
 * completion frees them; those whose completion never runs (zookeeper_close
 * does not promise to call them) are freed once the handle is closed and
 * the library's threads are gone.
 */
static ZksRequest *abandoned = NULL;

/* ----------------------------------------------------------------
 * Completions: on libzookeeper's completion thread.  Nothing of
 * PostgreSQL but SetLatch.
 * ----------------------------------------------------------------
 */

void
zksr_free_request(ZksRequest *req)
{
	free(req->path);
	free(req->created);
	free(req->value);
	free(req->results);
	if (req->prefixes != NULL)
	{
		for (int i = 0; i < req->nops; i++)
			free(req->prefixes[i]);
		free(req->prefixes);
	}
	free(req->names);
	if (req->children != NULL)
	{
		for (int i = 0; i < req->nchildren; i++)
			free(req->children[i]);
		free(req->children);
	}
	free(req);
}

void
zksr_link_abandoned_locked(ZksRequest *req)
{
	req->state = REQ_ABANDONED;
	req->prev = NULL;
	req->next = abandoned;
	if (abandoned)
		abandoned->prev = req;
	abandoned = req;
}

void
zksr_unlink_abandoned_locked(ZksRequest *req)
{
	if (req->prev)
		req->prev->next = req->next;
	else
		abandoned = req->next;
	if (req->next)
		req->next->prev = req->prev;
	req->prev = req->next = NULL;
}


/*
 * The reply to a request whose waiter gave up.  A contender node created
 * for nobody must go at once, or it would block the lock until this
 * backend exits.
 */
void
zksr_finish_abandoned_locked(ZksRequest *req, int rc, const char *created)
{
	if (req->kind == KIND_CREATE && req->ephemeral && !req->taken &&
		!zh_closing)
	{
		if (rc == ZOK && created != NULL)
			zkt_add_stray_locked(created);
		else if (zks_is_connection_loss(rc))
			zkt_sweep_for_create_locked(req->path);
	}

	/*
	 * A multi is all or nothing: after success every node exists (deleted
	 * in multi requests again), after a lost reply every one may (swept),
	 * after a failure none does.
	 */
	if (req->kind == KIND_MULTI_CREATE && !req->taken && !zh_closing)
	{
		if (rc == ZOK && req->names != NULL)
		{
			char	  **paths = malloc(req->nops * sizeof(char *));
			int			n = 0;

			for (int i = 0; paths != NULL && i < req->nops; i++)
				if ((paths[n] = strdup(req->names + (size_t) i * req->name_len)) != NULL)
					n++;
			if (paths != NULL && n > 0)
				zkt_add_batch_locked(paths, n, true);
			free(paths);
		}
		else if (zks_is_connection_loss(rc))
			for (int i = 0; i < req->nops; i++)
				zkt_sweep_for_create_locked(req->prefixes[i]);
	}
	zksr_free_request(req);
}

static void
create_completion(int rc, const char *value, const struct Stat *stat,
				  const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	if (req->state == REQ_ABANDONED)
	{
		zksr_unlink_abandoned_locked(req);
		zksr_finish_abandoned_locked(req, rc, value);
	}
	else
	{
		req->zrc = rc;
		if (rc == ZOK)
		{
			req->created = value ? strdup(value) : NULL;
			if (stat != NULL)
			{
				req->stat = *stat;
				req->has_stat = true;
			}
			/*
			 * Out of memory: the node exists but its name is unknown here.
			 * Report a lost reply, so the node is found by its prefix.
			 */
			if (req->created == NULL)
				req->zrc = ZCONNECTIONLOSS;
		}
		req->state = REQ_DONE;
	}
	pthread_mutex_unlock(&zks_mutex);
	zks_wake_backend();
}

/*
 * The protocol every completion but the create's follows.  Returns false
 * if the backend gave up on the request (it is freed then); otherwise
 * returns with zks_mutex held and the code stored, and the caller stores
 * its results and calls zksr_completion_end().
 */
bool
zksr_completion_begin(ZksRequest *req, int rc)
{
	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	if (req->state == REQ_ABANDONED)
	{
		zksr_unlink_abandoned_locked(req);
		zksr_free_request(req);
		pthread_mutex_unlock(&zks_mutex);
		return false;
	}
	req->zrc = rc;
	return true;
}

void
zksr_completion_end(ZksRequest *req)
{
	req->state = REQ_DONE;
	pthread_mutex_unlock(&zks_mutex);
	zks_wake_backend();
}

static void
children_completion(int rc, const struct String_vector *strings,
					const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (!zksr_completion_begin(req, rc))
		return;
	if (rc == ZOK && strings != NULL && strings->count > 0)
	{
		req->children = calloc(strings->count, sizeof(char *));
		if (req->children == NULL)
			req->zrc = ZSYSTEMERROR;
		else
		{
			req->nchildren = strings->count;
			for (int i = 0; i < strings->count; i++)
			{
				req->children[i] = strdup(strings->data[i]);
				if (req->children[i] == NULL)
					req->zrc = ZSYSTEMERROR;
			}
		}
	}
	zksr_completion_end(req);
}

static void
store_stat(ZksRequest *req, int rc, const struct Stat *stat)
{
	if (rc == ZOK && stat != NULL)
	{
		req->stat = *stat;
		req->has_stat = true;
	}
}

static void
exists_completion(int rc, const struct Stat *stat, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (!zksr_completion_begin(req, rc))
		return;
	store_stat(req, rc, stat);
	zksr_completion_end(req);
}

static void
get_completion(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (!zksr_completion_begin(req, rc))
		return;
	store_stat(req, rc, stat);
	/* no more than any reader needs (session.h, ZKS_MAX_VALUE_BYTES) */
	if (value_len > ZKS_MAX_VALUE_BYTES)
		value_len = ZKS_MAX_VALUE_BYTES;
	if (rc == ZOK && value != NULL && value_len > 0)
	{
		req->value = malloc(value_len);
		if (req->value == NULL)
			req->zrc = ZSYSTEMERROR;
		else
		{
			memcpy(req->value, value, value_len);
			req->value_len = value_len;
		}
	}
	zksr_completion_end(req);
}

static void
sync_completion(int rc, const char *value, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (zksr_completion_begin(req, rc))
		zksr_completion_end(req);
}

/* ----------------------------------------------------------------
 * Backend side.
 * ----------------------------------------------------------------
 */

static ZksRc
map_rc(int zrc)
{
	if (zrc == ZOK)
		return ZKS_OK;
	if (zrc == ZNONODE)
		return ZKS_NONODE;
	if (zrc == ZNODEEXISTS)
		return ZKS_NODEEXISTS;
	if (zks_is_connection_loss(zrc))
		return ZKS_CONNECTION_LOSS;
	if (zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE || zrc == ZCLOSING)
		return ZKS_SESSION_EXPIRED;
	if (zrc == ZNOAUTH || zrc == ZAUTHFAILED)
		return ZKS_NOAUTH;
	if (zrc == ZBADVERSION)
		return ZKS_BADVERSION;
	return ZKS_ERROR;
}

ZksRequest *
zksr_new_request(ReqKind kind, const char *path)
{
	ZksRequest *req = calloc(1, sizeof(ZksRequest));

	if (req != NULL)
		req->path = strdup(path);
	if (req == NULL || req->path == NULL)
	{
		free(req);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	req->kind = kind;
	req->state = REQ_PENDING;
	return req;
}


static ZksRequest *sent(ZksRequest *req, int zrc);

ZksRequest *
zksr_sent_locked(ZksRequest *req, int zrc)
{
	/* (a marshalling or system error may still run the completion) */
	if (zrc == ZOK || zrc == ZMARSHALLINGERROR || zrc == ZSYSTEMERROR)
		zkn_sent();
	pthread_mutex_unlock(&zks_mutex);
	return sent(req, zrc);
}

/*
 * A call that libzookeeper refused outright gets no completion: record the
 * outcome as if it had been the reply (zks_mutex not held; counted).
 */
static ZksRequest *
sent(ZksRequest *req, int zrc)
{
	ZksRequest *done;

	if (zrc == ZOK)
		return req;

	/*
	 * Argument and state checks fail before libzookeeper registers the
	 * completion; a marshalling or system error may come after, and then
	 * the completion still runs.  In that case hand the backend a fresh
	 * request and leave the original to its completion (or to the close).
	 */
	done = req;
	pthread_mutex_lock(&zks_mutex);
	if (zrc == ZMARSHALLINGERROR || zrc == ZSYSTEMERROR)
	{
		done = calloc(1, sizeof(ZksRequest));
		if (done != NULL)
		{
			done->kind = req->kind;
			done->path = strdup(req->path);
			done->ephemeral = req->ephemeral;
		}
		zksr_link_abandoned_locked(req);
		if (done == NULL || done->path == NULL)
		{
			pthread_mutex_unlock(&zks_mutex);
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory")));
		}
		/* a create that may have been sent: its node is found by prefix */
		if (done->kind == KIND_CREATE || done->kind == KIND_MULTI_CREATE)
			zrc = ZCONNECTIONLOSS;
	}
	done->zrc = zrc;
	done->state = REQ_DONE;
	pthread_mutex_unlock(&zks_mutex);
	return done;
}

ZksRequest *
zks_send_create(const char *path, const char *data, int datalen,
				ZksCreateMode mode)
{
	ZksRequest *req = zksr_new_request(KIND_CREATE, path);
	int			zmode;

	/* an ephemeral node nobody claims is deleted, whatever it is for */
	req->ephemeral = (mode == ZKS_EPHEMERAL_SEQUENTIAL ||
					  mode == ZKS_EPHEMERAL);
	zmode = mode == ZKS_EPHEMERAL_SEQUENTIAL ? ZOO_EPHEMERAL_SEQUENTIAL :
		mode == ZKS_EPHEMERAL ? ZOO_EPHEMERAL :
		mode == ZKS_PERSISTENT ? ZOO_PERSISTENT : ZOO_CONTAINER;
	return SEND(req, zoo_acreate2(zh, path, data, datalen,
								  zks_create_acl(),
								  zmode, create_completion, req));
}

ZksRequest *
zks_send_children(const char *path, bool watch)
{
	ZksRequest *req = zksr_new_request(KIND_CHILDREN, path);

	return SEND(req, zoo_aget_children(zh, path, watch ? 1 : 0,
									   children_completion, req));
}

ZksRequest *
zks_send_exists(const char *path, bool watch)
{
	ZksRequest *req = zksr_new_request(KIND_EXISTS, path);

	return SEND(req, zoo_aexists(zh, path, watch ? 1 : 0, exists_completion, req));
}

/*
 * Replace a node's data (ZooKeeper's setData), if its version is still
 * version (-1: whatever it is).  The stat of the reply tells the new one.
 */
ZksRequest *
zks_send_set(const char *path, const char *data, int len, int version)
{
	ZksRequest *req = zksr_new_request(KIND_EXISTS, path);

	return SEND(req, zoo_aset(zh, path, data, len, version, exists_completion,
							  req));
}

ZksRequest *
zks_send_watch_data(const char *path)
{
	ZksRequest *req = zksr_new_request(KIND_GET, path);

	/*
	 * A data watch, as Curator sets on its predecessor: the server
	 * registers it only if the node exists (an exists watch is registered
	 * on a missing node too, and a sequential name never comes back, so it
	 * would stay for the life of the session and be re-sent at every
	 * reconnect).  The client registers it only on success as well.
	 */
	return SEND(req, zoo_aget(zh, path, 1, get_completion, req));
}

ZksRequest *
zks_send_get(const char *path)
{
	ZksRequest *req = zksr_new_request(KIND_GET, path);

	return SEND(req, zoo_aget(zh, path, 0, get_completion, req));
}

ZksRequest *
zks_send_sync(const char *path)
{
	ZksRequest *req = zksr_new_request(KIND_SYNC, path);

	return SEND(req, zoo_async(zh, path, sync_completion, req));
}

ZksRc
zks_wait(ZksRequest *req, TimestampTz deadline)
{
	TimestampTz cap;

	/*
	 * libzookeeper answers every request, with a connection loss at worst,
	 * but a wait must be bounded even if it did not: past the session
	 * timeout plus the connect timeout, treat the reply as lost.
	 */
	cap = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
									  (int64) zks_negotiated_timeout() +
									  zklock_connect_timeout);
	if (deadline == 0 || deadline > cap)
		deadline = cap;
	else
		cap = 0;

	for (;;)
	{
		ReqState	st;
		int			zrc;

		pthread_mutex_lock(&zks_mutex);
		st = req->state;
		zrc = req->zrc;
		pthread_mutex_unlock(&zks_mutex);

		if (st == REQ_DONE)
			return map_rc(zrc);
		if (zks_deadline_passed(deadline))
			return cap != 0 ? ZKS_CONNECTION_LOSS : ZKS_TIMEDOUT;
		zks_sleep_on_latch(deadline, ZKS_WAIT_REPLY);
	}
}

char *
zks_take_created_path(ZksRequest *req)
{
	char	   *path;

	Assert(req->state == REQ_DONE && req->zrc == ZOK);
	path = pstrdup(req->created);	/* may fail: then not yet ours */
	req->taken = true;
	return path;
}

void
zks_get_stat(ZksRequest *req, ZksStat *stat)
{
	Assert(req->state == REQ_DONE && req->has_stat);
	stat->czxid = req->stat.czxid;
	stat->ephemeral_owner = req->stat.ephemeralOwner;
	stat->version = req->stat.version;
}

char *
zks_get_data(ZksRequest *req, int *len)
{
	char	   *out;

	Assert(req->state == REQ_DONE && req->zrc == ZOK);
	out = palloc(req->value_len + 1);
	if (req->value_len > 0)
		memcpy(out, req->value, req->value_len);
	out[req->value_len] = '\0';
	*len = req->value_len;
	return out;
}

char **
zks_get_children(ZksRequest *req, int *count)
{
	char	  **out;

	Assert(req->state == REQ_DONE && req->zrc == ZOK);
	out = palloc(sizeof(char *) * Max(req->nchildren, 1));
	for (int i = 0; i < req->nchildren; i++)
		out[i] = pstrdup(req->children[i]);
	*count = req->nchildren;
	return out;
}

void
zks_claim(ZksRequest *req)
{
	pthread_mutex_lock(&zks_mutex);
	req->taken = true;
	pthread_mutex_unlock(&zks_mutex);
}

bool
zks_is_own_stray(const char *parent, const char *name)
{
	bool		stray;

	pthread_mutex_lock(&zks_mutex);
	stray = zkt_is_stray_locked(parent, name);

	/* a create given up with its reply still to come: swept or deleted */
	for (ZksRequest *req = abandoned; req != NULL && !stray; req = req->next)
	{
		if (req->taken)
			continue;
		if (req->kind == KIND_CREATE && req->ephemeral)
			stray = zkt_path_names_child(req->path, parent, name, true);
		else if (req->kind == KIND_MULTI_CREATE)
			for (int i = 0; i < req->nops && !stray; i++)
				stray = zkt_path_names_child(req->prefixes[i], parent, name,
											 true);
	}
	pthread_mutex_unlock(&zks_mutex);
	return stray;
}

void
zks_done(ZksRequest *req)
{
	if (req == NULL)
		return;
	pthread_mutex_lock(&zks_mutex);
	if (req->state == REQ_PENDING)
		zksr_link_abandoned_locked(req);
	else
	{
		if (req->kind == KIND_CREATE || req->kind == KIND_MULTI_CREATE)
			zksr_finish_abandoned_locked(req, req->zrc, req->created);
		else
			zksr_free_request(req);
	}
	pthread_mutex_unlock(&zks_mutex);
}

/* After zookeeper_close: no completion runs any more. */
void
zksr_free_abandoned_locked(void)
{
	while (abandoned != NULL)
	{
		ZksRequest *req = abandoned;

		zksr_unlink_abandoned_locked(req);
		zksr_free_request(req);
	}
}
