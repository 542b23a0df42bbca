/*-------------------------------------------------------------------------
 *
 * revoke.h
 *	  Asking a lock's holders to give it back (zk_lock_revoke), and asking
 *	  whether this backend's own locks were asked back (zk_lock_revoked).
 *
 * src/sql/revoke.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_REVOKE_H
#define ZKLOCK_REVOKE_H

#include "postgres.h"

/* One holder asked: its node, its data as read, what was written, and how
 * it went. */
typedef struct ZkvAsked
{
	char	   *node;			/* relative to the lock's path, as
								 * zk_lock_queue shows it */
	char	   *data;			/* its data before the request */
	int			data_len;
	const char *request;		/* "zklock", "__REVOKE__" or "unlock" */
	const char *outcome;
} ZkvAsked;

/*
 * Ask every current holder of the lock on relpath (zk_lock_queue's
 * judgement) to give it back, in the words its layout understands; with
 * wait_ms > 0, wait that long for them to go (-1: until they go, or the
 * call is canceled).  Returns the holders asked.
 */
extern ZkvAsked *zkv_revoke(const char *relpath, int64 wait_ms, int *n);

/* Was a lock this backend holds on resource asked back? */
extern bool zkv_revoke_requested(const char *resource);

#endif							/* ZKLOCK_REVOKE_H */
