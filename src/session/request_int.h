/*-------------------------------------------------------------------------
 *
 * request_int.h
 *	  A request's insides, shared by the files that send requests and run
 *	  their completions: session/request.c (single requests, the wait and
 *	  the results), session/multi.c (many operations in one multi
 *	  request) and session/heldread.c (the reads of held nodes nobody
 *	  waits for).  Nothing outside the session layer sees them: the rest
 *	  of zklock holds a ZksRequest only by pointer (session/session.h).
 *
 * src/session/request_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_SESSION_REQUEST_INT_H
#define ZKLOCK_SESSION_REQUEST_INT_H

#include <pthread.h>

#include <zookeeper.h>

#include "session/session.h"
#include "session/session_int.h"

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

/* request.c: the shared parts of every request's life */
extern ZksRequest *zksr_new_request(ReqKind kind, const char *path);
extern void zksr_free_request(ZksRequest *req);
extern ZksRequest *zksr_sent_locked(ZksRequest *req, int zrc);
extern void zksr_link_abandoned_locked(ZksRequest *req);
extern void zksr_unlink_abandoned_locked(ZksRequest *req);
extern void zksr_finish_abandoned_locked(ZksRequest *req, int rc,
										 const char *created);
extern bool zksr_completion_begin(ZksRequest *req, int rc);
extern void zksr_completion_end(ZksRequest *req);

/*
 * Every request is sent, and counted by the reply nudge, under zks_mutex:
 * holding it, session/ensemble.c can tell that nothing is in flight and
 * none is being sent before it moves the connection (libzookeeper 3.8.0
 * loses track of requests in flight when zoo_set_servers moves it).  An
 * async call only queues the request, so the mutex is held briefly.
 * SEND(req, call) locks, makes the call (or refuses it without a handle)
 * and hands the code to zksr_sent_locked, which counts and unlocks.
 */
#define SEND(req, call) \
	(pthread_mutex_lock(&zks_mutex), \
	 zksr_sent_locked((req), zh == NULL ? ZINVALIDSTATE : (call)))

#endif							/* ZKLOCK_SESSION_REQUEST_INT_H */
