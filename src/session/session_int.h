/*-------------------------------------------------------------------------
 *
 * session_int.h
 *	  What the files of the session layer (src/session/) share; nothing
 *	  outside that folder includes it, or zookeeper.h (test_package.py
 *	  checks both).
 *
 * src/session/session_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_SESSION_INT_H
#define ZKLOCK_SESSION_INT_H

#include <pthread.h>

#include <zookeeper.h>

#include "datatype/timestamp.h"

#include "session/cursessions.h"

/*
 * Shared with libzookeeper's threads, under zks_mutex: the handle (NULL
 * when none), set while it is being closed, and the last state the
 * session watcher saw.
 */
extern pthread_mutex_t zks_mutex;
extern zhandle_t *zh;
extern bool zh_closing;
extern int	zk_state;

/*
 * A reply that says nothing about the node: the request may or may not
 * have run.  ZSESSIONMOVED comes from a server our session has left for
 * another one (the request did not run there); like a lost reply, it is
 * answered by asking again on the connection the session has now.
 * ZRUNTIMEINCONSISTENCY is libzookeeper's word for a reply whose xid is
 * not the one its oldest pending request has ("unexpected server
 * response"): it drops the connection and fails every pending request
 * with it, replies received included, so a create so failed may well
 * have happened.  Reported as an error it left the node behind and the
 * call failed with 38000 (test_nemesis's random packet loss on 18, with
 * nothing moving the session; test_dynamic met it when a move kept
 * requests as sent); as a lost reply, the node is found by its prefix.
 */
static inline bool
zks_is_connection_loss(int zrc)
{
	return zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT ||
		zrc == ZSESSIONMOVED || zrc == ZRUNTIMEINCONSISTENCY;
}

/*
 * A multi request stays far below ZooKeeper's 1 MB packet limit
 * (jute.maxbuffer, on server and client): at most this many operations,
 * and about this many bytes.
 */
#define BATCH_MAX_OPS	1000
#define BATCH_MAX_BYTES (256 * 1024)
/* What a delete or check op of a multi costs beside its path */
#define SMALL_OP_OVERHEAD 32

/* session.c */

/* Wake the backend from a completion or watcher: SetLatch only. */
extern void zks_wake_backend(void);

/*
 * With zks_mutex held, after a change nobody waits for by a reply: must
 * the backend be woken (a cancel armed, or zks_wait_event sleeping)?
 */
extern bool zks_take_wake_locked(void);
extern void zks_owe_wake_locked(void);

/* What a sleep waits for: it names the wait event (with the activity). */
typedef enum ZksWaitKind
{
	ZKS_WAIT_CONNECTION,		/* the session, or its authentication */
	ZKS_WAIT_REPLY,				/* a reply to a request */
	ZKS_WAIT_NOTIFICATION		/* a watch notification: a queue */
} ZksWaitKind;

/* The wait events (their names in session.c) */
typedef enum ZksWaitEvent
{
	ZKS_EV_CONNECT,
	ZKS_EV_REPLY,
	ZKS_EV_QUEUE,
	ZKS_EV_SEMAPHORE,
	ZKS_EV_COMMIT_CHECK,
	ZKS_EV_DEADLOCK_SEARCH
} ZksWaitEvent;

/*
 * Sleep on the latch until woken or until the deadline (0: at most a
 * second, to re-check); interrupts are processed here.
 */
extern void zks_sleep_on_latch(TimestampTz deadline, ZksWaitKind kind);
extern bool zks_deadline_passed(TimestampTz deadline);

/* The ACL of every node zklock creates (see zklock.auth_file). */
extern const struct ACL_vector *zks_create_acl(void);

/* session/request.c, with zks_mutex held after zookeeper_close: free the
 * requests whose completion never ran. */
extern void zksr_free_abandoned_locked(void);

/* session/cleanup.c; the _locked ones with zks_mutex held */

/* A delete of path (prefix NULL), or a sweep of parent path for prefix. */
extern void zkt_add_task_locked(const char *path, const char *prefix);

/* A delete of a node no attempt owns (see zkt_is_stray_locked). */
extern void zkt_add_stray_locked(const char *path);

/*
 * A batch of n deletes; takes over paths[0..n-1] (malloc'd).  stray: of
 * nodes no attempt owns.
 */
extern void zkt_add_batch_locked(char **paths, int n, bool stray);

/* Is child name of parent a node of ours that a task is about to delete? */
extern bool zkt_is_stray_locked(const char *parent, const char *name);

/* Is path parent/name (or, prefix_only, parent/<a prefix of name>)? */
extern bool zkt_path_names_child(const char *path, const char *parent,
								 const char *name, bool prefix_only);

/* A sweep for the node a create of path (a prefix) may have made. */
extern void zkt_sweep_for_create_locked(const char *path);

/* The session is gone: forget the tasks (those in flight once answered). */
extern void zkt_drop_tasks_locked(void);

/* After zookeeper_close: no completion runs any more. */
extern void zkt_free_all_tasks_locked(void);

/* The session is connected (again): send what waits. */
extern void zkt_resubmit_tasks_locked(void);

/* How many of the n paths go into one multi request (at least one). */
extern int	zkt_batch_fit(const char *const *paths, int n, size_t per_op,
						  size_t *longest);

/*
 * session/nudge.c: the reply nudge (ZOOKEEPER-4537).  zkn_sent after every
 * zoo_a* call that registered a completion, zkn_answered first thing in
 * every such completion; the rest from session.c.
 */
extern void zkn_sent(void);
extern void zkn_answered(int zrc);
extern void zkn_heard(void);
extern void zkn_connected(int negotiated_ms);
extern void zkn_set_holding(bool holding);
extern bool zkn_running(void);
extern int64_t zkn_now_ns(void);
extern void zkn_held_watch_due(int64_t due_ns);
extern bool zkn_start(int delay_ms, size_t stack_size);
extern void zkn_set_delay(int delay_ms);
extern void zkn_stop(void);
extern uint64 zkn_nudges(void);
extern int	zkn_idle_due_ms(int ping_ms);
extern void zkn_idle_tick(int ping_ms);
extern bool zkn_request_apply(void);
extern bool zkn_apply_when_quiet(void);
extern bool zkn_outstanding(void);

/*
 * session/ensemble.c: the server list followed from /zookeeper/config or
 * a reload of zklock.hosts (zoo_set_servers on the same session).
 */
extern int	zke_apply(void);
/* zke_apply's code for a list libzookeeper would not tell from the old */
#define ZKE_SAME_ADDRESS 1
/* ... and while a request is in flight: not moved, try again */
#define ZKE_BUSY 2
extern void zke_connected_locked(zhandle_t *h);
extern void zke_session_opened_locked(const char *hosts);
extern void zke_handle_closed_locked(void);
extern char *zke_hosts_in_use(void);
extern int	zke_use_list(const char *list);
extern uint64 zke_followed_since_report(char **list, bool *refused);

/* session/hostslot.c: the file's zklock.hosts (any thread) */
#define ZKHS_HOSTS_MAX 1024
extern uint64 zkhs_generation(void);
extern bool zkhs_read(char *buf, uint64 *generation);

/*
 * session/ensemble.c: the backend notes whether its zklock.hosts is the
 * file's (zks_mutex held); the nudge thread applies a changed file.
 */
extern void zke_note_file_locked(const char *backend_hosts);
extern int	zke_file_tick(void);

/* session/hosts.c: zks_hosts_check from zks_connect (retries a refusal) */
extern void zks_hosts_check_call(void);

/*
 * session/hosts.c: look up one "host:port" entry in place (any thread);
 * getaddrinfo's code, or ZKS_ENTRY_MALFORMED (no port).
 */
#define ZKS_ENTRY_MALFORMED 1
struct addrinfo;
extern int	zks_lookup_entry(char *entry, char **host, char **port,
							 struct addrinfo **res);

/*
 * session.c's, read by session/status.c: counts kept by the session
 * watcher (under zks_mutex), since when there has been no connection (the
 * watcher's clock, zero tv_sec while connected; zks_gave_up_since for a
 * handle that never connected and was closed), the hosts the handle was
 * made with (backend-only).
 */
extern uint64 zks_reconnects;
extern uint64 zks_expirations;
extern struct timespec zks_unreachable_at;
extern TimestampTz zks_gave_up_since;
extern char *zh_hosts;

/* session.c: a libzookeeper state in zk_status()'s words (any thread) */
extern ZkcsState zks_state_of(int state);

/* session/status.c: zk_state, read under zks_mutex */
extern int	zks_current_state(void);

/*
 * session/log.c: libzookeeper's log lines.  zksl_callback is the handle's
 * log callback (any thread); zksl_session_event_locked from the session
 * watcher; the other two from open_handle and close_handle.
 */
extern void zksl_callback(const char *message);
extern void zksl_session_event_locked(zhandle_t *h, int state);
extern void zksl_handle_opening(void);
extern void zksl_handle_closed(void);

/* session/log.c: connections reset / failed otherwise since CONNECTED */
extern void zksl_connect_failures(uint64 *resets, uint64 *failures);

/* session/watch.c, from the session watcher and close_handle */
extern void zkw_node_event_locked(int type, const char *path);
extern void zkw_session_event_locked(int state);
extern void zkw_forget_all_locked(void);

/* A held node's watch was sent (session/request.c): its outcome. */
extern void zkw_held_reply_locked(const char *path, int zrc,
								  const char *value, int value_len,
								  const struct Stat *stat);

/* Send a held node's data watch; its reply goes to zkw_held_reply_locked. */
extern void zks_send_held_watch(const char *path);

/* The nudge thread sends the held nodes' watches due by now. */
extern int64_t zkw_send_due_held_locked(int64_t now_ns);

/* session/cancel.c: a held lock is gone, or the session ended. */
extern void zksc_loss_locked(void);

/*
 * A held node was asked back (session/watch.c; zks_mutex held): what the
 * backend does about it.  RELEASE: the node is to be deleted now, by the
 * caller, since no statement runs under it.
 */
typedef enum ZkscRevoke
{
	ZKSC_REVOKE_IGNORED,		/* zklock.on_revoke = ignore: shown only */
	ZKSC_REVOKE_NOTED,			/* a loss, given back when the
								 * transaction's next statement or its end
								 * takes it in */
	ZKSC_REVOKE_CANCELED,		/* a loss: the running statement canceled */
	ZKSC_REVOKE_RELEASE			/* a loss, and no statement runs */
} ZkscRevoke;
extern ZkscRevoke zksc_revoked_locked(void);

/*
 * Read a held node again with a new watch, after its data changed
 * (session/watch.c; zks_mutex held, any thread).  False if it could not
 * be sent; the reply comes to zkw_held_reply_locked.
 */
extern bool zksr_reread_held_locked(const char *path);

/*
 * Write a held node's data back to its owner line with the request as
 * its second line, if its version is still version (zks_mutex held, any
 * thread; not waited for).
 */
extern bool zksr_rewrite_locked(const char *path, const char *owner,
								const char *request, int version);
extern void zksc_session_ended_locked(void);

/*
 * session/cancel.c: the loss clock ran out (session/nudge.c's thread,
 * without any mutex held): no reply for the negotiated timeout.
 */
extern void zksc_clock_lost(int timeout_ms);

/* session/expiry.c: a CLOCK_REALTIME time as a TimestampTz. */
extern TimestampTz zks_timespec_to_timestamptz(const struct timespec *ts);

/*
 * session/expiry.c, from the session watcher (before it updates
 * unreachable_at, which it passes) and close_handle.
 */
extern void zkx_session_event_locked(zhandle_t *h, int state,
									 const struct timespec *unreachable_at);
extern void zkx_handle_closed_locked(void);

/*
 * Stack size of libzookeeper's two threads (and of the probe in
 * session/threads.c, and of the reply nudge's thread).  The
 * default is the process's stack limit (8 MB), which a thread or memory
 * limit meets sooner; the threads only run the client's I/O loop, name
 * resolution and our small completions.
 */
#define ZK_THREAD_STACK (512 * 1024)

/* ERROR 53000 unless this backend can start two threads (session/threads.c). */
extern void zks_check_threads_available(void);

#endif							/* ZKLOCK_SESSION_INT_H */
