/*-------------------------------------------------------------------------
 *
 * session.h
 *	  The backend's ZooKeeper session: asynchronous requests, interruptible
 *	  waits, and the clean-up of nodes nobody waits for any more.
 *
 * The files of src/session/ (the session layer) are the only ones that
 * include zookeeper.h or call libzookeeper; everything the rest of the
 * extension needs is expressed here in terms that do not mention
 * libzookeeper.  Requests are
 * sent with zks_send_*() and complete on the library's threads; the
 * backend collects them with zks_wait(), which waits on its latch and
 * honours interrupts.  A request the backend stops caring
 * about (because an ERROR unwound past it) is handed back with zks_done()
 * whatever its state: if it was a create that succeeds after all, the node
 * is deleted, so no contender is ever left behind.
 *
 * src/session/session.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_SESSION_H
#define ZKLOCK_SESSION_H

#include <sys/socket.h>

#include "datatype/timestamp.h"

/* Outcome of a request, independent of libzookeeper's error codes. */
typedef enum ZksRc
{
	ZKS_OK = 0,
	ZKS_NONODE,					/* the node (or the parent) does not exist */
	ZKS_NODEEXISTS,
	ZKS_CONNECTION_LOSS,		/* reply lost: the request may have executed */
	ZKS_SESSION_EXPIRED,		/* the session is gone, and all its nodes */
	ZKS_NOAUTH,
	ZKS_BADVERSION,				/* a versioned write met a newer version */
	ZKS_ERROR,					/* anything else; see zks_rc_text */
	ZKS_TIMEDOUT				/* our own deadline passed before the reply */
} ZksRc;

/* What kind of node zks_send_create makes. */
typedef enum ZksCreateMode
{
	ZKS_EPHEMERAL_SEQUENTIAL,	/* a contender */
	ZKS_EPHEMERAL,				/* a wait record, a kazoo lease */
	ZKS_CONTAINER,				/* a lock parent */
	ZKS_PERSISTENT				/* a kazoo semaphore's node (semaphore.c) */
} ZksCreateMode;

typedef struct ZksRequest ZksRequest;

/* Stat fields the extension uses. */
typedef struct ZksStat
{
	int64		czxid;
	int64		ephemeral_owner;
	int32		version;		/* of the data */
} ZksStat;

/*
 * Make sure a usable session exists, connecting lazily.  Waits at most
 * zklock.connect_timeout and raises ERROR (08001) naming the hosts if no
 * server answers; if limit (non-zero) comes first, returns false instead
 * so the caller can report its own timeout.  If may_reconnect, a session
 * whose settings (zklock.hosts, zklock.session_timeout, zklock.auth)
 * changed is replaced; the caller passes true only while it holds no lock.
 * Otherwise a changed zklock.hosts alone moves the same session to the
 * new servers (zks_hosts_check).
 */
extern bool zks_connect(bool may_reconnect, TimestampTz limit);

/*
 * Wait until the session is connected again or the deadline passes
 * (returns false then).  Raises ERROR if the session expired.
 */
extern bool zks_reconnect_wait(TimestampTz deadline);

/* The same without ERROR: ZKS_OK, ZKS_TIMEDOUT, ZKS_SESSION_EXPIRED, ZKS_NOAUTH. */
extern ZksRc zks_await_connection(TimestampTz deadline);
extern bool zks_is_connected(void);

/*
 * Since when the session has had no connection to any server (the
 * handle was made, or its connection ended), or 0 while connected or
 * with no handle.  Right after zks_connect gave up on a handle that
 * never connected, the time that handle was made.
 */
extern TimestampTz zks_unreachable_since(void);

/*
 * If session session_id was seen expired (session/expiry.c): true, with
 * when, and since when it had had no connection before (0 if it had
 * one).  Only the last expiry is kept, past the handle's end.
 */
extern bool zks_session_expiry(int64 session_id, TimestampTz *at,
							   TimestampTz *unreachable_since);

/*
 * zklock.follow_ensemble (session/ensemble.c): follow the servers a
 * dynamic reconfiguration publishes in /zookeeper/config never, always,
 * or (auto) when zklock.hosts names the servers as the config does.
 */
typedef enum ZksFollow
{
	ZKS_FOLLOW_OFF,
	ZKS_FOLLOW_ON,
	ZKS_FOLLOW_AUTO
} ZksFollow;
extern void zks_follow_setting(int setting);

/*
 * At the start of a statement (backend): a reloaded zklock.hosts is
 * given to the session now, if it has one (zoo_set_servers: the same
 * session, its locks kept); a name that does not resolve is a WARNING
 * and the old list stays.  Also logs a server list followed from the
 * ensemble since the last command.  Never raises ERROR.
 */
extern void zks_hosts_check(void);

/*
 * session/hostslot.c: the configuration file's zklock.hosts in shared
 * memory (with zklock preloaded), for idle holders; zkhs_publish is
 * zklock.hosts' assign hook (acts in the postmaster only).
 */
extern void zkhs_init(void);
extern void zkhs_publish(const char *value);

/* The chroot suffix of a connect string, or NULL (session/hosts.c). */
extern const char *zks_hosts_chroot(const char *hosts);

/* The first host of a connect string that does not resolve, or NULL. */
extern char *zks_unresolved_host(const char *hosts);

/*
 * For messages: the servers the session uses now (the ensemble's list it
 * followed, or the zklock.hosts it opened with; zklock.hosts, with none).
 */
extern const char *zks_hosts(void);

/* Requests; the returned object belongs to the caller until zks_done(). */
extern ZksRequest *zks_send_create(const char *path, const char *data,
								   int datalen, ZksCreateMode mode);
/* With watch, a child watch (it fires at the next change of the list). */
extern ZksRequest *zks_send_children(const char *path, bool watch);
extern ZksRequest *zks_send_exists(const char *path, bool watch);
extern ZksRequest *zks_send_get(const char *path);
extern ZksRequest *zks_send_set(const char *path, const char *data,
								int len, int version);

/*
 * Watch a node for deletion (or change) with a data watch: ZKS_NONODE,
 * and nothing registered, if it is already gone.
 */
extern ZksRequest *zks_send_watch_data(const char *path);

/*
 * Watched nodes (session/watch.c): a data watch like zks_send_watch_data,
 * whose events are recorded per node, so a waiter tells its own node's
 * and its predecessor's events from any other and knows which came first.
 * *tracked is false when the table is full: the watch is set all the
 * same, and only the generic event counter tells that something fired.
 * Pass the request's outcome to zks_watch_reply.  A watch is "spent" once
 * it fired for a change other than a deletion or a session event came
 * (its events may then come out of order): ask again, as without it.
 */
typedef enum ZksWatchState
{
	ZKS_WATCH_NONE,				/* not in the table */
	ZKS_WATCH_ARMED,			/* set, not fired, connection unbroken */
	ZKS_WATCH_DELETED,			/* the node was deleted */
	ZKS_WATCH_SPENT				/* fired otherwise, or the connection broke */
} ZksWatchState;

extern ZksRequest *zks_watch_node(const char *path, bool *tracked);
extern void zks_watch_reply(const char *path, ZksRc rc);
extern ZksWatchState zks_watch_state(const char *path);
extern void zks_unwatch_node(const char *path);
/* Room for two more entries (an own node and a predecessor)? */
extern bool zks_watch_room(void);

/*
 * A node this backend now holds: keep a data watch on it (the waiter's own
 * watch if one is armed, else a new one, sent without waiting for its
 * reply), so that its deletion cancels the statement running under it
 * (session/cancel.c).  Never raises; with the table full the node is
 * simply not watched, and its loss is found at COMMIT as before.  owner
 * is the data the node was created with (its owner line): a request
 * written over it is put back under it (session/watch.c).
 */
extern void zks_watch_held(const char *path, const char *owner);

/*
 * A request to give a held node back (revokeform.c), as its watch read it
 * from the node's data: whether one came, whether the backend gives the
 * lock up for it (zklock.on_revoke), when it was written (the server's
 * clock; 0 if not known) and its words (raw: the requester's
 * owner line, or Curator's or the recipe's word).  Returns false, with
 * watched false, for a node not in the table (not watched: ask the node).
 */
#define ZKS_REVOKE_BY_MAX 512
typedef struct ZksRevoke
{
	bool		watched;
	bool		requested;
	bool		acted;
	TimestampTz at;
	char		by[ZKS_REVOKE_BY_MAX];
} ZksRevoke;
extern bool zks_watch_revoke(const char *path, ZksRevoke *r);

/* zklock.on_revoke: whether a request cancels (true) or is only shown. */
extern void zks_revoke_setting(bool cancel);

/*
 * Fail fast (session/cancel.c).  The session layer cancels the running
 * statement when a held node is deleted or the session ends, but only
 * between zks_statement_begin and zks_statement_end (the outermost zklock
 * frame, failfast.c), and only with zklock.cancel_on_loss
 * (zks_cancel_setting).  zks_cancel_take tells whether the cancel being
 * raised is zklock's, and takes it; zks_cancel_disarm takes back one not
 * yet consumed (every transaction end); zks_cancel_rearm cancels again
 * (a subtransaction rolled back while a lost lock stays).
 * zks_note_holding tells how many locks the backend holds (a session
 * expiry cancels only then), zks_loss_count how many losses the session
 * layer has noticed so far.
 */
extern void zks_cancel_setting(bool enabled);
extern void zks_note_holding(int entries);
extern uint64 zks_loss_count(void);
extern void zks_statement_begin(void);
/*
 * A transaction starts running something (zks_xact_busy, before the
 * statement's look for losses) and ends (zks_xact_idle): a lock asked
 * back is given back at once only between transactions.
 */
extern void zks_xact_busy(void);
extern void zks_xact_idle(void);
extern void zks_statement_end(void);
extern void zks_cancel_disarm(void);
extern bool zks_cancel_take(void);
extern void zks_cancel_rearm(void);

/*
 * How many times the loss clock (session/nudge.c) declared the session
 * lost, the last time when (*at) and for which timeout (*timeout_ms): a
 * lock granted before a declaration is lost.
 */
extern uint64 zks_clock_losses(TimestampTz *at, int *timeout_ms);

/*
 * One multi request of "check" operations on the first *taken of the n
 * paths (as many as fit well under ZooKeeper's 1 MB limit).  ZKS_OK means
 * every one of them exists.  A multi is a write, so the leader answers:
 * worth it only for many nodes, where it replaces one exists each.
 */
extern ZksRequest *zks_send_checks(const char *const *paths, int n,
								   int *taken);

/*
 * One multi request creating CONTAINER nodes at the first *taken of the n
 * paths, all or none (a level there already fails it with NODEEXISTS).
 */
extern ZksRequest *zks_send_containers(const char *const *paths, int n,
									   int *taken);

/*
 * One multi request creating EPHEMERAL_SEQUENTIAL nodes at the first
 * *taken of the n paths (as many as fit well under ZooKeeper's 1 MB
 * limit), all with the same data.  ZooKeeper applies a multi as a whole
 * and gives every node it creates the multi's zxid as czxid.  Until
 * zks_claim(), zks_done() deletes whatever it created (sweeps by prefix
 * after a lost reply), as for a single create.
 */
extern ZksRequest *zks_send_creates(const char *const *paths, int n,
									const char *data, int datalen,
									int *taken);

/* The path the i-th create of a successful zks_send_creates made. */
extern char *zks_take_created_path_at(ZksRequest *req, int i);

/* Which create of a failed zks_send_creates failed (0 if not known). */
extern int	zks_failed_op(ZksRequest *req);

/*
 * Bring the connected server up to date with the leader (ZooKeeper's
 * "sync"), so that the reads sent behind it see every committed change.
 */
extern ZksRequest *zks_send_sync(const char *path);

/*
 * Wait for a request's reply until deadline (0 = no deadline of our own:
 * the library always answers, with a connection loss at worst).  Returns
 * the outcome, ZKS_TIMEDOUT if the deadline passed first.  Interrupts are
 * processed while waiting (an ERROR leaves the request pending: the caller
 * must still zks_done() it).
 */
extern ZksRc zks_wait(ZksRequest *req, TimestampTz deadline);

/* Results of a completed request (palloc'd copies in CurrentMemoryContext). */
extern char *zks_take_created_path(ZksRequest *req);
extern void zks_get_stat(ZksRequest *req, ZksStat *stat);
extern char **zks_get_children(ZksRequest *req, int *count);
/*
 * A node's data as read, NUL-terminated: its first ZKS_MAX_VALUE_BYTES at
 * most.  Whatever zklock writes is far shorter (a wait record, an owner
 * line: a few kB at the longest root and resource name), and every reader
 * of foreign data shows or parses less than that; a client that writes
 * ZooKeeper's maximum (about 1 MB) into thousands of nodes a search or a
 * look reads must not make a backend hold a copy of each.
 */
#define ZKS_MAX_VALUE_BYTES (64 * 1024)
extern char *zks_get_data(ZksRequest *req, int *len);

/*
 * The caller takes charge of whatever node a create made (or may have
 * made): zks_done() will then neither delete nor sweep for it.
 */
extern void zks_claim(ZksRequest *req);

/*
 * Hand a request back.  If it is still in flight it is abandoned: its
 * completion frees it, and a create that succeeds late has its node
 * deleted.  A completed create whose path was never taken with
 * zks_take_created_path() has its node deleted too.  Never raises ERROR.
 */
extern void zks_done(ZksRequest *req);

/*
 * Delete a node without waiting for the reply.  ZooKeeper runs a session's
 * requests in order, so later requests see the node gone.  If the reply is
 * lost the delete is sent again after a reconnect; once the session is gone
 * there is nothing left to delete.  Never raises ERROR and never waits.
 */
extern void zks_delete_async(const char *path);

/* The same, keeping the node's watch entry (a lock asked back: its request). */
extern void zks_give_back(const char *path);

/*
 * Between these two, zks_delete_async() only collects; zks_batch_end()
 * sends what was collected as multi requests (each well under ZooKeeper's
 * 1 MB limit), a lone delete as a plain one.  A multi that fails is split
 * into single deletes.  Neither raises ERROR.
 */
extern void zks_batch_begin(void);
extern void zks_batch_end(void);

/*
 * Delete, the same way, every child of parent whose name starts with
 * prefix: for a create whose reply was lost and whose node nobody claims.
 */
extern void zks_sweep_async(const char *parent, const char *prefix);

/*
 * Is child name of parent a node of this session that no attempt owns and
 * that the session is about to delete (a stray of a create given up: swept
 * after a lost reply, or deleted after a late one)?  It is ours, so never
 * another client's contender; it goes without anyone waiting for it.
 */
extern bool zks_is_own_stray(const char *parent, const char *name);

/*
 * Watch notifications and session events.  A waiter takes a mark before it
 * sets its watch, then zks_wait_event() sleeps until a watch fires or the
 * session state changes after the mark (or is already over), or until the
 * deadline passes (returns false only in the last case).
 */
typedef struct ZksEventMark
{
	uint64		watches;
	uint64		states;
} ZksEventMark;

extern ZksEventMark zks_event_mark(void);
extern bool zks_wait_event(ZksEventMark seen, TimestampTz deadline);

/* The current session's id (0 if none), for ownership checks. */
extern int64 zks_session_id(void);

/* Has the server declared the session over (expired, auth failed)? */
extern bool zks_session_expired(void);

/*
 * How often this backend's session reconnected, and how many sessions
 * the server expired, since the backend started (statistics: stats.c).
 */
extern void zks_session_counts(uint64 *reconnects, uint64 *expirations);

/* Session timeout the server granted (the requested one before that). */
extern int	zks_negotiated_timeout(void);

/*
 * What the backend is doing for zklock: names the wait event of its waits
 * (pg_stat_activity.wait_event, PostgreSQL 17 and later).  Returns the
 * activity before; zkl's transaction callback sets NONE at every end.
 */
typedef enum ZksActivity
{
	ZKS_ACTIVITY_NONE,			/* releases, inspection: a plain reply */
	ZKS_ACTIVITY_LOCK,			/* a lock call (scalar or array) */
	ZKS_ACTIVITY_SEMAPHORE,		/* a semaphore call */
	ZKS_ACTIVITY_COMMIT,		/* the commit check */
	ZKS_ACTIVITY_DEADLOCK		/* a deadlock search while waiting */
} ZksActivity;

extern ZksActivity zks_set_activity(ZksActivity a);

/*
 * libzookeeper's own log lines (session/log.c): the level it logs at
 * (zklock.zookeeper_log_level; the values are libzookeeper's), writing
 * what it logged into the server log at a safe point of the backend, and
 * how many lines came and how many the rate limit suppressed.
 */
typedef enum ZksLogLevel
{
	ZKS_LOG_OFF = 0,
	ZKS_LOG_ERROR,
	ZKS_LOG_WARN,
	ZKS_LOG_INFO,
	ZKS_LOG_DEBUG
} ZksLogLevel;

extern void zks_log_set_level(int level);
extern void zks_log_drain(void);
extern void zks_log_counts(uint64 *received, uint64 *suppressed);

/* For zk_status(). */
typedef struct ZksStatus
{
	const char *state;			/* none, connecting, connected, expired,
								 * auth_failed */
	int64		session_id;
	int			timeout_ms;		/* negotiated */
	char		server[64];		/* host:port connected to, or "" */
	uint64		reconnects;
	uint64		nudges;			/* reply nudges sent (session/nudge.c) */
	uint64		log_lines;		/* libzookeeper's lines (session/log.c) */
	uint64		log_suppressed; /* ... of them not written */
} ZksStatus;

extern void zks_get_status(ZksStatus *status);

/* A server's address as zk_status() shows it: host:port, [v6]:port, "". */
extern void zks_format_server(const struct sockaddr_storage *addr,
							  char *buf, size_t len);

/* A session id as zklock shows it: 0x and hex (palloc'd). */
extern char *zks_session_id_text(int64 session_id);

/* Text of an outcome, for messages. */
extern const char *zks_rc_text(ZksRc rc);

/* errdetail() describing an outcome in a whole sentence (in ereport). */
extern int	zks_errdetail(ZksRc rc);

/* before_shmem_exit: close the session, deleting every ephemeral node. */
extern void zks_shutdown(int code, Datum arg);

#endif							/* ZKLOCK_SESSION_H */
