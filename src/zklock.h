/*-------------------------------------------------------------------------
 *
 * zklock.h
 *	  Settings shared by the parts of the zklock extension.
 *
 * src/zklock.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_H
#define ZKLOCK_H

/* GUC variables, defined in zklock.c */
extern char *zklock_hosts;
extern char *zklock_root;
extern int	zklock_session_timeout;	/* ms */
extern int	zklock_connect_timeout;	/* ms */
extern bool zklock_verify_at_commit;
extern int	zklock_protocol;		/* a ZkrProtocol */
extern char *zklock_auth_file;	/* names the credentials file (auth.c) */
extern int	zklock_reply_nudge_delay;	/* ms; 0: off (session/nudge.c) */
extern bool zklock_session_locks;	/* off: session scope refused (lockrequest.c) */
extern bool zklock_cancel_on_loss;	/* a loss cancels the statement (failfast.c) */

/* zklock.on_revoke: what a held lock does when asked back (session/watch.c) */
typedef enum ZklockOnRevoke
{
	ZKLOCK_ON_REVOKE_CANCEL,
	ZKLOCK_ON_REVOKE_IGNORE
} ZklockOnRevoke;

#endif							/* ZKLOCK_H */
