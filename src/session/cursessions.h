/*-------------------------------------------------------------------------
 *
 * cursessions.h
 *	  Every backend's zklock session as it is now (zk_sessions): each
 *	  backend shows its ZooKeeper session's state in a slot of a shared
 *	  table, kept current by the session watcher while the backend is idle.
 *
 * The table exists only when zklock is in shared_preload_libraries (its
 * shared memory is set aside while the server starts); without it every
 * call here does nothing and zk_sessions() raises 55000 with a hint.
 *
 * Two threads of a backend write its slot: the session layer (session.c,
 * on the backend's thread and on libzookeeper's completion thread, both
 * holding zks_mutex) writes the session's part with the _locked calls,
 * and the backend's lock code writes the locks held and whether it waits
 * with the zkcs_set_* calls.  See cursessions.c for why that is safe.
 *
 * src/session/cursessions.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_CURSESSIONS_H
#define ZKLOCK_CURSESSIONS_H

#include <sys/socket.h>
#include <time.h>

#include "datatype/timestamp.h"

/* A session's state, named as zk_status() names it. */
typedef enum ZkcsState
{
	ZKCS_NONE = 0,				/* no handle */
	ZKCS_CONNECTING,
	ZKCS_CONNECTED,
	ZKCS_EXPIRED,
	ZKCS_AUTH_FAILED,
	ZKCS_FAILED					/* the last connect found no server */
} ZkcsState;

/* Its name: none, connecting, connected, expired, auth_failed, failed. */
extern const char *zkcs_state_name(int32 state);

/* What the session layer shows of its session. */
typedef struct ZkcsSession
{
	int32		state;			/* a ZkcsState */
	int32		timeout_ms;		/* negotiated (asked for before); 0: none */
	int64		session_id;		/* 0: none yet */
	TimestampTz connected_since;	/* 0 unless connected */
	TimestampTz unreachable_since;	/* 0 while connected */
	struct sockaddr_storage server; /* ss_family 0: none */
} ZkcsSession;

/* Shared-memory hooks; from _PG_init. */
extern void zkcs_init(void);

/*
 * The session layer's calls, with zks_mutex held.  claim and release on
 * the backend's thread only (the slot gets, and loses, this backend's
 * row); write on any thread, and it calls nothing of PostgreSQL: after a
 * release, until the next claim, it writes nothing.
 */
extern void zkcs_claim_locked(void);
extern void zkcs_release_locked(void);
extern void zkcs_write_session_locked(const ZkcsSession *s);

/* The backend's own calls (its thread, no mutex): what it holds and waits. */
extern void zkcs_set_locks_held(int n);
extern void zkcs_set_waiting(bool waiting);

/*
 * A time of clock_gettime(CLOCK_REALTIME) as a TimestampTz, by plain
 * arithmetic: for any thread.
 */
extern TimestampTz zkcs_timestamp(const struct timespec *ts);

#endif							/* ZKLOCK_CURSESSIONS_H */
