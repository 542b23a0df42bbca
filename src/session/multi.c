/*-------------------------------------------------------------------------
 *
 * multi.c
 *	  Many operations in one multi request: the commit check's version
 *	  checks, the lock parents' containers, and the contenders' creates of
 *	  an array call; and the completions of those requests (on
 *	  libzookeeper's completion thread: nothing of PostgreSQL but SetLatch).
 *
 * A multi is applied all or nothing, and each stays well under
 * ZooKeeper's packet limit (BATCH_MAX_OPS, BATCH_MAX_BYTES): a caller
 * with more operations sends the rest in the next one.  Part of the
 * session layer's requests (session/request.c, request_int.h).
 *
 * src/session/multi.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdlib.h>
#include <string.h>

#include "session/request_int.h"

static void
multi_completion(int rc, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (!zksr_completion_begin(req, rc))
		return;
	zksr_completion_end(req);
}

static void
multi_create_completion(int rc, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	if (req->state == REQ_ABANDONED)
	{
		zksr_unlink_abandoned_locked(req);
		zksr_finish_abandoned_locked(req, rc, NULL);
	}
	else
	{
		req->zrc = rc;
		req->state = REQ_DONE;
	}
	pthread_mutex_unlock(&zks_mutex);
	zks_wake_backend();
}

ZksRequest *
zks_send_checks(const char *const *paths, int n, int *taken)
{
	ZksRequest *req = zksr_new_request(KIND_MULTI, paths[0]);
	zoo_op_t   *ops;

	*taken = zkt_batch_fit(paths, n, SMALL_OP_OVERHEAD, NULL);
	ops = malloc(*taken * sizeof(zoo_op_t));
	req->results = malloc(*taken * sizeof(zoo_op_result_t));
	if (ops == NULL || req->results == NULL)
	{
		free(ops);
		zksr_free_request(req);
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
	ZksRequest *req = zksr_new_request(KIND_MULTI, paths[0]);
	zoo_op_t   *ops;
	size_t		longest;
	int			fit = zkt_batch_fit(paths, n, CONTAINER_OP_OVERHEAD,
									&longest);

	*taken = fit;
	req->name_len = longest + 1;
	ops = malloc(fit * sizeof(zoo_op_t));
	req->results = calloc(fit, sizeof(zoo_op_result_t));
	req->names = calloc(fit, req->name_len);
	if (ops == NULL || req->results == NULL || req->names == NULL)
	{
		free(ops);
		zksr_free_request(req);
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
	ZksRequest *req = zksr_new_request(KIND_MULTI_CREATE, paths[0]);
	zoo_op_t   *ops;
	size_t		longest;
	int			fit = zkt_batch_fit(paths, n, datalen + CREATE_OP_OVERHEAD,
									&longest);

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
		zksr_free_request(req);
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
