/*-------------------------------------------------------------------------
 *
 * request.c
 *	  The session's requests: sending them with the asynchronous zoo_a*
 *	  calls, their completions (on libzookeeper's completion thread), the
 *	  backend's interruptible wait for a reply, their results, and handing
 *	  them back -- a create that succeeds after its waiter gave up has its
 *	  node deleted (session/cleanup.c).
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

#include "recipe/revokeform.h"
#include "session/session.h"
#include "session/session_int.h"
#include "zklock.h"

typedef enum ReqState
{
	REQ_PENDING,				/* sent, no reply yet, backend waits */
	REQ_DONE,					/* reply stored, backend not done with it */
	REQ_ABANDONED				/* backend gave up; the completion frees it */
} ReqState;

typedef enum ReqKind
{
	KIND_CREATE,
	KIND_CHILDREN,
	KIND_EXISTS,
	KIND_GET,
	KIND_SYNC,
	KIND_MULTI,
	KIND_MULTI_CREATE			/* contender creates in one multi request */
} ReqKind;

struct ZksRequest
{
	ReqKind		kind;
	ReqState	state;
	int			zrc;			/* libzookeeper's return code */
	bool		ephemeral;		/* create of a contender node */
	bool		taken;			/* caller took ownership of created node */
	char	   *path;			/* request path (malloc) */
	char	   *created;		/* create: the node's path (malloc) */
	struct Stat stat;
	bool		has_stat;
	char	  **children;		/* children: names (malloc) */
	int			nchildren;
	char	   *value;			/* get: the node's data (malloc) */
	int			value_len;
	zoo_op_result_t *results;	/* multi: written by the reply (malloc) */
	int			nops;			/* multi create: how many nodes ... */
	char	  **prefixes;		/* ... their paths as asked (malloc) ... */
	char	   *names;			/* ... and the created paths, written into
								 * nops slots of name_len bytes by the
								 * library at the reply (malloc) */
	int			name_len;
	struct ZksRequest *prev;	/* in the abandoned list */
	struct ZksRequest *next;
};

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

static void
free_request(ZksRequest *req)
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

static void
link_abandoned_locked(ZksRequest *req)
{
	req->state = REQ_ABANDONED;
	req->prev = NULL;
	req->next = abandoned;
	if (abandoned)
		abandoned->prev = req;
	abandoned = req;
}

static void
unlink_abandoned_locked(ZksRequest *req)
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
static void
finish_abandoned_locked(ZksRequest *req, int rc, const char *created)
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
	free_request(req);
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
		unlink_abandoned_locked(req);
		finish_abandoned_locked(req, rc, value);
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
 * its results and calls completion_end().
 */
static bool
completion_begin(ZksRequest *req, int rc)
{
	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	if (req->state == REQ_ABANDONED)
	{
		unlink_abandoned_locked(req);
		free_request(req);
		pthread_mutex_unlock(&zks_mutex);
		return false;
	}
	req->zrc = rc;
	return true;
}

static void
completion_end(ZksRequest *req)
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

	if (!completion_begin(req, rc))
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
	completion_end(req);
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

	if (!completion_begin(req, rc))
		return;
	store_stat(req, rc, stat);
	completion_end(req);
}

static void
multi_completion(int rc, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (!completion_begin(req, rc))
		return;
	completion_end(req);
}

static void
multi_create_completion(int rc, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	if (req->state == REQ_ABANDONED)
	{
		unlink_abandoned_locked(req);
		finish_abandoned_locked(req, rc, NULL);
	}
	else
	{
		req->zrc = rc;
		req->state = REQ_DONE;
	}
	pthread_mutex_unlock(&zks_mutex);
	zks_wake_backend();
}

static void
get_completion(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (!completion_begin(req, rc))
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
	completion_end(req);
}

static void
sync_completion(int rc, const char *value, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (completion_begin(req, rc))
		completion_end(req);
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

static ZksRequest *
new_request(ReqKind kind, const char *path)
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

/*
 * Every request is sent, and counted by the reply nudge, under zks_mutex:
 * holding it, session/ensemble.c can tell that nothing is in flight and
 * none is being sent before it moves the connection (libzookeeper 3.8.0
 * loses track of requests in flight when zoo_set_servers moves it).  An
 * async call only queues the request, so the mutex is held briefly.
 * SEND(req, call) locks, makes the call (or refuses it without a handle)
 * and hands the code to sent_locked, which counts and unlocks.
 */
#define SEND(req, call) \
	(pthread_mutex_lock(&zks_mutex), \
	 sent_locked((req), zh == NULL ? ZINVALIDSTATE : (call)))

static ZksRequest *sent(ZksRequest *req, int zrc);

static ZksRequest *
sent_locked(ZksRequest *req, int zrc)
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
		link_abandoned_locked(req);
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
	ZksRequest *req = new_request(KIND_CREATE, path);
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
	ZksRequest *req = new_request(KIND_CHILDREN, path);

	return SEND(req, zoo_aget_children(zh, path, watch ? 1 : 0,
									   children_completion, req));
}

ZksRequest *
zks_send_exists(const char *path, bool watch)
{
	ZksRequest *req = new_request(KIND_EXISTS, path);

	return SEND(req, zoo_aexists(zh, path, watch ? 1 : 0, exists_completion, req));
}

/*
 * Replace a node's data (ZooKeeper's setData), if its version is still
 * version (-1: whatever it is).  The stat of the reply tells the new one.
 */
ZksRequest *
zks_send_set(const char *path, const char *data, int len, int version)
{
	ZksRequest *req = new_request(KIND_EXISTS, path);

	return SEND(req, zoo_aset(zh, path, data, len, version, exists_completion,
							  req));
}

ZksRequest *
zks_send_checks(const char *const *paths, int n, int *taken)
{
	ZksRequest *req = new_request(KIND_MULTI, paths[0]);
	zoo_op_t   *ops;

	*taken = zkt_batch_fit(paths, n);
	ops = malloc(*taken * sizeof(zoo_op_t));
	req->results = malloc(*taken * sizeof(zoo_op_result_t));
	if (ops == NULL || req->results == NULL)
	{
		free(ops);
		free_request(req);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	for (int i = 0; i < *taken; i++)
		zoo_check_op_init(&ops[i], paths[i], -1);

	/* the request is serialized here: ops need not outlive the call */
	req = SEND(req, zoo_amulti(zh, *taken, ops, req->results,
							   multi_completion, req));
	free(ops);
	return req;
}

/* ZooKeeper's opcode createContainer (OpCode.java; proto.h is not installed) */
#define ZKS_CREATE_CONTAINER_OP 19

/* What one container create of a multi costs: its path, the ACL, framing. */
#define CONTAINER_OP_OVERHEAD 64

/*
 * One multi request creating CONTAINER nodes (empty, with the usual ACL)
 * at the first *taken of the n paths.  Applied as a whole: ZKS_OK means
 * all of them were made, anything else (NODEEXISTS for one that was
 * there) that none was.  Nothing to clean up on zks_done(): containers go
 * when empty.
 */
ZksRequest *
zks_send_containers(const char *const *paths, int n, int *taken)
{
	ZksRequest *req = new_request(KIND_MULTI, paths[0]);
	zoo_op_t   *ops;
	size_t		longest = 0;
	size_t		bytes = 0;
	int			fit = 0;

	while (fit < n && fit < BATCH_MAX_OPS)
	{
		size_t		len = strlen(paths[fit]) + CONTAINER_OP_OVERHEAD;

		if (fit > 0 && bytes + len > BATCH_MAX_BYTES)
			break;
		bytes += len;
		longest = Max(longest, strlen(paths[fit]));
		fit++;
	}
	*taken = fit;
	req->name_len = longest + 1;
	ops = malloc(fit * sizeof(zoo_op_t));
	req->results = calloc(fit, sizeof(zoo_op_result_t));
	req->names = calloc(fit, req->name_len);
	if (ops == NULL || req->results == NULL || req->names == NULL)
	{
		free(ops);
		free_request(req);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	for (int i = 0; i < fit; i++)
	{
		zoo_create_op_init(&ops[i], paths[i], "", 0, zks_create_acl(),
						   ZOO_CONTAINER,
						   req->names + (size_t) i * req->name_len,
						   req->name_len);

		/*
		 * libzookeeper 3.8 gives a multi's create op the plain create
		 * opcode whatever the flags, and the server then makes a
		 * PERSISTENT node, never reaped.  A container needs its own
		 * opcode (createContainer, 19), which the library serializes as
		 * a create (test_lockset checks what the server made).
		 */
		ops[i].type = ZKS_CREATE_CONTAINER_OP;
	}
	req = SEND(req, zoo_amulti(zh, fit, ops, req->results, multi_completion,
							   req));
	free(ops);
	return req;
}

/*
 * What one create of a multi costs in the request: its path, its data and
 * the ACL, plus about 40 bytes of framing.
 */
#define CREATE_OP_OVERHEAD 64

ZksRequest *
zks_send_creates(const char *const *paths, int n, const char *data,
				 int datalen, int *taken)
{
	ZksRequest *req = new_request(KIND_MULTI_CREATE, paths[0]);
	zoo_op_t   *ops;
	size_t		longest = 0;
	size_t		bytes = 0;
	int			fit = 0;

	while (fit < n && fit < BATCH_MAX_OPS)
	{
		size_t		len = strlen(paths[fit]) + datalen + CREATE_OP_OVERHEAD;

		if (fit > 0 && bytes + len > BATCH_MAX_BYTES)
			break;
		bytes += len;
		longest = Max(longest, strlen(paths[fit]));
		fit++;
	}
	*taken = fit;

	/* room for the sequence number ZooKeeper appends (10 digits) */
	req->name_len = longest + 16;
	ops = malloc(fit * sizeof(zoo_op_t));
	req->results = calloc(fit, sizeof(zoo_op_result_t));
	req->prefixes = calloc(fit, sizeof(char *));
	req->names = calloc(fit, req->name_len);
	if (ops != NULL && req->prefixes != NULL)
	{
		for (int i = 0; i < fit; i++)
		{
			req->prefixes[i] = strdup(paths[i]);
			if (req->prefixes[i] == NULL)
				break;
			req->nops++;
		}
	}
	if (ops == NULL || req->results == NULL || req->names == NULL ||
		req->nops < fit)
	{
		free(ops);
		free_request(req);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	req->ephemeral = true;

	/*
	 * The request is serialized here, but the library writes each created
	 * path into its buffer only at the reply: the buffers are the
	 * request's, freed with it.
	 */
	for (int i = 0; i < fit; i++)
		zoo_create_op_init(&ops[i], paths[i], data, datalen,
						   zks_create_acl(),
						   ZOO_EPHEMERAL_SEQUENTIAL,
						   req->names + (size_t) i * req->name_len,
						   req->name_len);
	req = SEND(req, zoo_amulti(zh, fit, ops, req->results,
							   multi_create_completion, req));
	free(ops);
	return req;
}

char *
zks_take_created_path_at(ZksRequest *req, int i)
{
	Assert(req->kind == KIND_MULTI_CREATE && req->state == REQ_DONE &&
		   req->zrc == ZOK && i < req->nops);
	return pstrdup(req->names + (size_t) i * req->name_len);
}

int
zks_failed_op(ZksRequest *req)
{
	Assert(req->state == REQ_DONE);
	/* the ops after the one that failed report a rollback, not a cause */
	for (int i = 0; req->results != NULL && i < req->nops; i++)
		if (req->results[i].err != ZOK &&
			req->results[i].err != ZRUNTIMEINCONSISTENCY)
			return i;
	return 0;
}

ZksRequest *
zks_send_watch_data(const char *path)
{
	ZksRequest *req = new_request(KIND_GET, path);

	/*
	 * A data watch, as Curator sets on its predecessor: the server
	 * registers it only if the node exists (an exists watch is registered
	 * on a missing node too, and a sequential name never comes back, so it
	 * would stay for the life of the session and be re-sent at every
	 * reconnect).  The client registers it only on success as well.
	 */
	return SEND(req, zoo_aget(zh, path, 1, get_completion, req));
}

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
	unlink_abandoned_locked(req);
	free_request(req);
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
	link_abandoned_locked(req);
	zrc = zoo_aget(zh, path, 1, held_watch_completion, req);
	if (zrc == ZOK || zrc == ZMARSHALLINGERROR || zrc == ZSYSTEMERROR)
		zkn_sent();
	if (zrc == ZOK)
		return true;
	/* refused before its completion was registered: nobody frees it */
	if (zrc != ZMARSHALLINGERROR && zrc != ZSYSTEMERROR)
	{
		unlink_abandoned_locked(req);
		free_request(req);
		return false;
	}
	return true;				/* its completion still comes */
}

ZksRequest *
zks_send_get(const char *path)
{
	ZksRequest *req = new_request(KIND_GET, path);

	return SEND(req, zoo_aget(zh, path, 0, get_completion, req));
}

ZksRequest *
zks_send_sync(const char *path)
{
	ZksRequest *req = new_request(KIND_SYNC, path);

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
		link_abandoned_locked(req);
	else
	{
		if (req->kind == KIND_CREATE || req->kind == KIND_MULTI_CREATE)
			finish_abandoned_locked(req, req->zrc, req->created);
		else
			free_request(req);
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

		unlink_abandoned_locked(req);
		free_request(req);
	}
}
