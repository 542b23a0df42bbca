/*-------------------------------------------------------------------------
 *
 * session.c
 *	  The backend's ZooKeeper session: with the other session_*.c files,
 *	  the only code that talks to libzookeeper.
 *
 * libzookeeper_mt runs an I/O thread and a completion thread of its own.
 * Watchers and completions run on the completion thread, so they may call
 * nothing of PostgreSQL: no elog, no palloc, no GUC, no interrupts.  They
 * store results in malloc'd memory under zks_mutex and call
 * SetLatch(MyLatch), which is safe from any thread.  The backend waits on
 * its latch (WaitLatch + CHECK_FOR_INTERRUPTS), so every wait can be
 * cancelled, timed out or ended by postmaster death.
 *
 * This file keeps the connection (the handle, authentication, the session
 * watcher, reconnects and expiry); the requests are session/request.c's,
 * the clean-up tasks session/cleanup.c's.
 *
 * A request object outlives an ERROR in the waiting backend: the backend
 * hands it back with zks_done() and, if the reply is still to come, the
 * completion frees it.  A create that succeeds after its waiter gave up
 * has its node deleted there and then; one whose reply is lost is swept
 * (its parent listed and the node found by its unique prefix) after the
 * next reconnect.  Such clean-up tasks, and the fire-and-forget deletes of
 * releases (grouped into multi requests when many locks go at once), live
 * in a list that the completion thread re-sends whenever
 * the session reconnects, and that is dropped once the session is gone
 * (its ephemeral nodes went with it): see session/cleanup.c, which shares
 * the handle and the mutex through session_int.h.
 *
 * Only the asynchronous zoo_a* API is used: the synchronous calls block in
 * a condition variable that no interrupt can end.
 *
 * src/session/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pg_compat.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include <zookeeper.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "session/auth.h"
#include "session/cursessions.h"
#include "guccheck.h"
#include "session/session.h"
#include "session/session_int.h"
#include "zklock.h"

/* Everything below is shared with libzookeeper's threads. */
pthread_mutex_t zks_mutex = PTHREAD_MUTEX_INITIALIZER;
zhandle_t *zh = NULL;
bool zh_closing = false;
int	zk_state = 0;		/* last state seen by the watcher */
static uint64 state_counter = 0;	/* session events seen */
static uint64 watch_counter = 0;	/* watch events seen */
uint64		zks_reconnects = 0;	/* connections re-established */
uint64		zks_expirations = 0;	/* sessions the server declared expired */
static bool ever_connected = false;	/* a CONNECTED event was seen */
static bool event_waiter = false;	/* zks_wait_event sleeps */
static bool wake_owed = false;	/* a cancel armed since the last wake */

/*
 * When the handle last had no connection to any server (the handle was
 * made, or a CONNECTED state ended): an error raised during an outage
 * says since when, so that a DBA can tell an outage from contention.
 * Set by the watcher with the C library's clock (nothing of PostgreSQL
 * on that thread); zero tv_sec while connected.
 */
struct timespec zks_unreachable_at = {0, 0};

/* When the handle's current connection was made (the watcher's clock). */
static struct timespec connected_at = {0, 0};

static int	auth_result = -1;	/* zoo_add_auth reply; -1 while awaited */

/* Backend-only state. */
char	   *zh_hosts = NULL;	/* settings the handle was made with */
static int	zh_timeout = 0;
static bool zh_auth = false;	/* the handle authenticates with ... */
static uint8 zh_auth_digest[ZKA_DIGEST_LEN];	/* ... the identity of this
												 * digest ... */
static char *zh_auth_file = NULL;	/* ... read from this file ... */
static uint64 zh_auth_generation = 0;	/* ... at this zka_generation */

/*
 * With zklock.auth_file, every node zklock creates gets this ACL: all rights to
 * the identity the session authenticated as (ZooKeeper substitutes the
 * "auth" id), read to everyone.  Deleting a child needs DELETE on its
 * parent, so other clients can read the queue but not remove a contender.
 */
static struct ACL auth_acl_entries[2];
static struct ACL_vector auth_acl = {0, auth_acl_entries};
static bool zh_had_session = false;
static bool shutdown_registered = false;

/*
 * Since when a handle that never connected was trying, kept after
 * zks_connect closed it (the caller reports its own timeout next).
 */
TimestampTz zks_gave_up_since = 0;

static void forget_auth(void);

/* ----------------------------------------------------------------
 * Code that runs on libzookeeper's threads.  Nothing of PostgreSQL but
 * SetLatch.
 * ----------------------------------------------------------------
 */

void
zks_wake_backend(void)
{
	SetLatch(MyLatch);
}

/*
 * Whether the backend must be woken for what a thread just did under
 * zks_mutex (a notification, a reply nobody waits for).  Only when a
 * cancel was armed meanwhile (zks_owe_wake_locked), or when the backend
 * sleeps in zks_wait_event, the one wait whose end a notification decides.
 * A wait for a reply is woken by that reply's own completion, a wait for
 * the connection by the session event.  Everything else would set the
 * latch of a backend that has nothing to do with it: a lock cycle's own
 * release makes the server notify the released node's watch, and the
 * reply to a held node's watch arrives while the lock call has already
 * returned; each woke an idle backend (a signal, two context switches),
 * twice per cycle with cancel_on_loss on.  What the event changed is in
 * the tables, where the backend looks before every decision.
 */
bool
zks_take_wake_locked(void)
{
	bool		wake = wake_owed || event_waiter;

	wake_owed = false;
	return wake;
}

/* A cancel was armed: the backend must be woken, wherever it sleeps. */
void
zks_owe_wake_locked(void)
{
	wake_owed = true;
}




/* A libzookeeper state in zk_status()'s words (any thread). */
ZkcsState
zks_state_of(int state)
{
	if (state == ZOO_CONNECTED_STATE)
		return ZKCS_CONNECTED;
	if (state == ZOO_EXPIRED_SESSION_STATE)
		return ZKCS_EXPIRED;
	if (state == ZOO_AUTH_FAILED_STATE)
		return ZKCS_AUTH_FAILED;
	return ZKCS_CONNECTING;
}

/*
 * Show the session of handle h (NULL: none, or the connect that gave up)
 * in this backend's zk_sessions slot, from what the watcher keeps.  With
 * zks_mutex held, on the backend's thread or the watcher's: nothing of
 * PostgreSQL (the libzookeeper calls only read the handle).
 */
static void
publish_locked(zhandle_t *h)
{
	ZkcsSession s;

	memset(&s, 0, sizeof(s));
	if (h == NULL)
	{
		/* only the backend comes here: zks_gave_up_since is its own */
		s.state = zks_gave_up_since != 0 ? ZKCS_FAILED : ZKCS_NONE;
		s.unreachable_since = zks_gave_up_since;
	}
	else
	{
		const clientid_t *id = zoo_client_id(h);

		s.state = zks_state_of(zk_state);
		s.session_id = id ? id->client_id : 0;
		s.timeout_ms = zoo_recv_timeout(h);
		if (s.state == ZKCS_CONNECTED)
		{
			socklen_t	len = sizeof(s.server);

			if (zookeeper_get_connected_host(h, (struct sockaddr *) &s.server,
											 &len) == NULL)
				memset(&s.server, 0, sizeof(s.server));
			s.connected_since = zkcs_timestamp(&connected_at);
		}
		else if (zks_unreachable_at.tv_sec != 0)
			s.unreachable_since = zkcs_timestamp(&zks_unreachable_at);
	}
	zkcs_write_session_locked(&s);
}

/* The session watcher: connection state changes and watch notifications. */
static void
session_watcher(zhandle_t *h, int type, int state, const char *path,
				void *ctx)
{
	bool		wake;

	pthread_mutex_lock(&zks_mutex);
	if (type == ZOO_SESSION_EVENT)
	{
		zk_state = state;
		state_counter++;
		zksl_session_event_locked(h, state);
		zkw_session_event_locked(state);
		zkx_session_event_locked(h, state, &zks_unreachable_at);
		if (state == ZOO_CONNECTED_STATE)
			zks_unreachable_at.tv_sec = 0;
		else if (zks_unreachable_at.tv_sec == 0)
			(void) clock_gettime(CLOCK_REALTIME, &zks_unreachable_at);
		if (state == ZOO_CONNECTED_STATE)
		{
			(void) clock_gettime(CLOCK_REALTIME, &connected_at);
			zkn_connected(zoo_recv_timeout(h));
			if (ever_connected)
				zks_reconnects++;
			ever_connected = true;
			zkt_resubmit_tasks_locked();
			/* the ensemble's membership, read again (session/ensemble.c) */
			zke_connected_locked(h);
		}
		else if (state == ZOO_EXPIRED_SESSION_STATE ||
				 state == ZOO_AUTH_FAILED_STATE)
		{
			if (state == ZOO_EXPIRED_SESSION_STATE)
				zks_expirations++;
			zkt_drop_tasks_locked();
			/* every node it held went with it: cancel the statement */
			zksc_session_ended_locked();
		}
		/* zk_sessions shows it at once, however idle the backend */
		publish_locked(h);
	}
	else
	{
		zkw_node_event_locked(type, path);
		watch_counter++;
		/* the server spoke: the loss clock counts it (session/nudge.c) */
		zkn_heard();
	}
	/* a session event always: the connect waits look at the state */
	wake = zks_take_wake_locked() || type == ZOO_SESSION_EVENT;
	pthread_mutex_unlock(&zks_mutex);
	if (wake)
		zks_wake_backend();
}

static void
auth_completion(int rc, const void *data)
{
	pthread_mutex_lock(&zks_mutex);
	auth_result = rc;
	pthread_mutex_unlock(&zks_mutex);
	zks_wake_backend();
}

/* ----------------------------------------------------------------
 * Backend side.
 * ----------------------------------------------------------------
 */

/*
 * Close the handle.  Must not hold zks_mutex: zookeeper_close joins the
 * completion thread, which may be waiting for it.  Completions still
 * running meanwhile see zh_closing and send nothing; those that never run
 * leave their requests in the abandoned list and their tasks in the task
 * list, both freed here once the library's threads are gone.  Closing the
 * session deletes its ephemeral nodes, so nothing is left to clean up in
 * ZooKeeper.
 */
static void
close_handle(void)
{
	zhandle_t  *h;

	pthread_mutex_lock(&zks_mutex);
	h = zh;
	zh_closing = true;
	pthread_mutex_unlock(&zks_mutex);

	/* the nudge thread calls into the handle: it goes first */
	zkn_stop();
	if (h != NULL)
		zookeeper_close(h);

	pthread_mutex_lock(&zks_mutex);
	zh = NULL;
	zh_closing = false;
	zk_state = 0;
	zks_unreachable_at.tv_sec = 0;
	zkx_handle_closed_locked();
	state_counter++;
	zkt_free_all_tasks_locked();
	zksr_free_abandoned_locked();
	zkw_forget_all_locked();
	zke_handle_closed_locked();
	/* no session: no row in zk_sessions (see zks_connect for "failed") */
	zkcs_release_locked();
	pthread_mutex_unlock(&zks_mutex);

	free(zh_hosts);
	zh_hosts = NULL;
	forget_auth();
	zh_had_session = false;
	/* what the library logged until its threads ended, and its count */
	zksl_handle_closed();
}

const struct ACL_vector *
zks_create_acl(void)
{
	return zh_auth ? &auth_acl : &ZOO_OPEN_ACL_UNSAFE;
}

/*
 * Forget the identity of the closed handle.  The password itself is not
 * kept here (see open_handle), and zookeeper_close has freed
 * libzookeeper's copy; the digest is public, but it goes too.
 */
static void
forget_auth(void)
{
	zh_auth = false;
	explicit_bzero(zh_auth_digest, sizeof(zh_auth_digest));
	free(zh_auth_file);
	zh_auth_file = NULL;
}

/*
 * Has the identity to authenticate with changed since the handle was made?
 * Only a new zklock.auth_file, or a configuration reload since (which may
 * have rewritten the file), makes us read the file again; the handle is
 * replaced only if what it holds differs.  Raises ERROR if the file has
 * become unreadable or invalid.
 */
static bool
auth_changed(void)
{
	const char *want_file = zklock_auth_file ? zklock_auth_file : "";
	char	   *identity;
	uint8		digest[ZKA_DIGEST_LEN];
	char	   *file_copy;
	bool		changed;

	if (zka_generation == zh_auth_generation &&
		strcmp(want_file, zh_auth_file ? zh_auth_file : "") == 0)
		return false;

	identity = zka_read_identity(want_file);
	if (identity == NULL)
		changed = zh_auth;
	else
	{
		zka_digest(identity, digest);
		zka_free(identity);
		changed = !zh_auth ||
			memcmp(digest, zh_auth_digest, ZKA_DIGEST_LEN) != 0;
	}
	if (!changed)
	{
		file_copy = strdup(want_file);
		if (file_copy == NULL)
			return true;		/* replace the handle: it re-reads all */
		free(zh_auth_file);
		zh_auth_file = file_copy;
		zh_auth_generation = zka_generation;
	}
	return changed;
}

void
zks_shutdown(int code, Datum arg)
{
	close_handle();
}

/*
 * Create the handle.  libzookeeper starts its threads inside
 * zookeeper_init; they inherit the signal mask of the creating thread, so
 * block every signal around it, or PostgreSQL's handlers (which assume the
 * main thread) could run on them.
 */
static void
open_handle(void)
{
	sigset_t	all;
	sigset_t	old;
	zhandle_t  *h;
	int			save_errno;

	char	   *identity;
	char	   *identity_file;
	uint8		digest[ZKA_DIGEST_LEN];
	uint64		generation = zka_generation;
	int			scheme_len = 0;
	const char *cred = NULL;

	if (!shutdown_registered)
	{
		before_shmem_exit(zks_shutdown, (Datum) 0);
		shutdown_registered = true;
	}
	/* the row of a connect that gave up goes, as zk_status() forgets it */
	pthread_mutex_lock(&zks_mutex);
	zks_gave_up_since = 0;
	zkcs_release_locked();
	pthread_mutex_unlock(&zks_mutex);
	/* may raise ERROR: nothing is changed before it */
	zks_check_threads_available();
	identity = zka_read_identity(zklock_auth_file);
	if (identity != NULL)
		zka_digest(identity, digest);	/* may raise ERROR, wiping it */
	identity_file = strdup(zklock_auth_file ? zklock_auth_file : "");
	if (identity_file == NULL)
	{
		zka_free(identity);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	if (identity != NULL)
		zka_split(identity, &scheme_len, &cred);
	if (auth_acl.count == 0)
	{
		auth_acl_entries[0].perms = ZOO_PERM_ALL;
		auth_acl_entries[0].id = ZOO_AUTH_IDS;
		auth_acl_entries[1].perms = ZOO_PERM_READ;
		auth_acl_entries[1].id = ZOO_ANYONE_ID_UNSAFE;
		auth_acl.count = 2;
	}

	/* libzookeeper's lines go to the server log (session/log.c) */
	zksl_handle_opening();

	zh_hosts = strdup(zklock_hosts);
	if (zh_hosts == NULL)
	{
		zka_free(identity);
		free(identity_file);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	zh_timeout = zklock_session_timeout;

	pthread_mutex_lock(&zks_mutex);
	zk_state = ZOO_CONNECTING_STATE;
	(void) clock_gettime(CLOCK_REALTIME, &zks_unreachable_at);
	state_counter++;
	pthread_mutex_unlock(&zks_mutex);

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	{
		/* libzookeeper creates its threads with the default attributes */
		pthread_attr_t saved;
		pthread_attr_t small;
		bool		have_saved = (pthread_getattr_default_np(&saved) == 0);

		if (have_saved && pthread_attr_init(&small) == 0)
		{
			if (pthread_attr_setstacksize(&small, ZK_THREAD_STACK) == 0)
				(void) pthread_setattr_default_np(&small);
			pthread_attr_destroy(&small);
		}
		h = zookeeper_init2(zh_hosts, session_watcher, zh_timeout, NULL, NULL,
							0, zksl_callback);
		save_errno = errno;
		if (have_saved)
		{
			(void) pthread_setattr_default_np(&saved);
			pthread_attr_destroy(&saved);
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	if (h == NULL)
	{
		char	   *hosts = pstrdup(zks_hosts());
		char	   *unresolved = NULL;

		free(zh_hosts);
		zh_hosts = NULL;
		zka_free(identity);
		free(identity_file);

		/*
		 * A host that does not resolve fails the whole zookeeper_init with
		 * ENOENT (EINVAL in some builds), which %m would render as "No
		 * such file or directory": name the host instead.
		 */
		if (save_errno == ENOENT || save_errno == EINVAL)
			unresolved = zks_unresolved_host(hosts);
		if (unresolved != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("could not start a ZooKeeper session with \"%s\"",
							hosts),
					 errdetail("Host \"%s\" could not be resolved.", unresolved),
					 errhint("Check the host names in \"zklock.hosts\" and the name service of this host.")));
		errno = save_errno;
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not start a ZooKeeper session with \"%s\": %m",
						hosts),
				 errhint("Check the connect string in \"zklock.hosts\".")));
	}

	/*
	 * By default libzookeeper resolves the host list again every time its
	 * I/O thread polls (getaddrinfo, a netlink dump): a large part of every
	 * round trip.  Resolve only when a connection is lost, which is when a
	 * changed DNS entry matters.
	 */
	(void) zoo_set_servers_resolution_delay(h, -1);

	/*
	 * Authenticate before anything else: requests go out in order, and the
	 * library sends the credentials again after every reconnect.
	 *
	 * zoo_add_auth keeps a copy of the credentials in the handle for those
	 * reconnects, and zookeeper_close frees it (without wiping it; nor does
	 * the library wipe the auth packets it sends).  That copy is the one
	 * the session needs, so ours is wiped at once: to notice a changed
	 * file, the digest is enough.
	 */
	pthread_mutex_lock(&zks_mutex);
	zh = h;
	zke_session_opened_locked(zh_hosts);
	zke_note_file_locked(zh_hosts);
	/* from now on the watcher keeps the row current */
	zkcs_claim_locked();
	publish_locked(h);
	zh_auth = (identity != NULL);
	if (zh_auth)
		memcpy(zh_auth_digest, digest, ZKA_DIGEST_LEN);
	zh_auth_file = identity_file;
	zh_auth_generation = generation;
	auth_result = ZOK;
	if (cred != NULL)
	{
		char		scheme[16];

		/* zka_read_identity accepts only "digest" */
		strlcpy(scheme, identity, Min(scheme_len + 1, (int) sizeof(scheme)));
		auth_result = -1;
		if (zoo_add_auth(h, scheme, cred, strlen(cred), auth_completion, NULL) != ZOK)
			auth_result = ZAUTHFAILED;
	}
	pthread_mutex_unlock(&zks_mutex);
	zka_free(identity);
	zh_had_session = false;

	/*
	 * The reply nudge (session/nudge.c).  Without its thread the session
	 * still works, as it does with a ZooKeeper server that has no lost
	 * wake-up: a warning, once per session opened.
	 */
	if (!zkn_start(zklock_reply_nudge_delay, ZK_THREAD_STACK))
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start the reply nudge thread of the ZooKeeper session"),
				 errdetail("A reply that a ZooKeeper 3.8.0 server leaves unanswered now waits until the connection times out."),
				 errhint("Check the limits on processes and threads (ulimit -u) and memory of the server's operating-system user.")));
}

/* Wait for the reply to zoo_add_auth; ERROR if the server refused it. */
static void
await_auth(TimestampTz deadline)
{
	for (;;)
	{
		int			rc;

		pthread_mutex_lock(&zks_mutex);
		rc = auth_result;
		pthread_mutex_unlock(&zks_mutex);
		if (rc == ZOK)
			return;
		if (rc != -1 || zks_deadline_passed(deadline))
		{
			char	   *hosts = pstrdup(zks_hosts());

			close_handle();
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
					 errmsg("ZooKeeper authentication with the identity in \"zklock.auth_file\" failed on \"%s\"",
							hosts),
					 rc == -1 ? errdetail("No answer within \"zklock.connect_timeout\".") : 0));
		}
		zks_sleep_on_latch(deadline, ZKS_WAIT_CONNECTION);
	}
}

static void
session_expired_error(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("ZooKeeper session expired"),
			 errdetail("Every zklock node of this session is gone, or goes once the ensemble's leader has expired the session (within the session timeout)."),
			 errhint("The next zklock call opens a new session.")));
}

ZksRc
zks_await_connection(TimestampTz deadline)
{
	for (;;)
	{
		int			st = zks_current_state();

		if (zh == NULL || st == ZOO_EXPIRED_SESSION_STATE)
			return ZKS_SESSION_EXPIRED;
		if (st == ZOO_AUTH_FAILED_STATE)
			return ZKS_NOAUTH;
		if (st == ZOO_CONNECTED_STATE)
			return ZKS_OK;
		if (zks_deadline_passed(deadline))
			return ZKS_TIMEDOUT;
		zks_sleep_on_latch(deadline, ZKS_WAIT_CONNECTION);
	}
}

bool
zks_reconnect_wait(TimestampTz deadline)
{
	switch (zks_await_connection(deadline))
	{
		case ZKS_OK:
			return true;
		case ZKS_SESSION_EXPIRED:
			session_expired_error();
			break;
		case ZKS_NOAUTH:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
					 errmsg("ZooKeeper authentication failed for \"%s\"",
							zks_hosts())));
			break;
		default:
			break;
	}
	return false;
}

bool
zks_connect(bool may_reconnect, TimestampTz limit)
{
	TimestampTz deadline;
	bool		limited = false;
	int			st = zks_current_state();

	/* what libzookeeper logged while the backend was idle */
	zks_log_drain();

	/* never on a setting that fell back to a value nobody configured */
	zkg_refuse_unconfigured();

	/* A session that can never come back is replaced. */
	if (zh != NULL &&
		(st == ZOO_EXPIRED_SESSION_STATE || st == ZOO_AUTH_FAILED_STATE))
		close_handle();

	/* New settings take effect when nothing depends on the old session. */
	if (zh != NULL && may_reconnect &&
		(strcmp(zh_hosts, zklock_hosts) != 0 ||
		 zh_timeout != zklock_session_timeout || auth_changed()))
		close_handle();

	/*
	 * Under held locks, a changed zklock.hosts alone moves the same
	 * session (session/hosts.c); the other settings wait.
	 */
	if (zh != NULL)
		zks_hosts_check_call();

	if (zh == NULL)
		open_handle();

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   zklock_connect_timeout);
	if (limit != 0 && limit < deadline)
	{
		deadline = limit;
		limited = true;
	}

	/*
	 * A session found expired only now (the reconnect after a partition
	 * is what tells) is replaced at once when nothing depends on it: the
	 * caller holds no lock, so this call simply goes on with a new one.
	 */
	if (may_reconnect &&
		zks_await_connection(deadline) == ZKS_SESSION_EXPIRED && zh != NULL)
	{
		close_handle();
		open_handle();
	}
	if (!zks_reconnect_wait(deadline))
	{
		char	   *hosts = pstrdup(zks_hosts());
		TimestampTz since = zks_unreachable_since();
		uint64		resets;
		uint64		failures;

		zksl_connect_failures(&resets, &failures);

		/* never connected: do not leave threads retrying in the background */
		if (!zh_had_session)
		{
			close_handle();
			/* zk_status() and zk_sessions say "failed", and since when */
			pthread_mutex_lock(&zks_mutex);
			zks_gave_up_since = since;
			zkcs_claim_locked();
			publish_locked(NULL);
			pthread_mutex_unlock(&zks_mutex);
		}
		if (limited)
			return false;

		/*
		 * Only resets: what a TLS tunnel does when it cannot reach or
		 * verify its server (session/log.c).  Not given up on earlier: a
		 * tunnel also resets while its server restarts, and the connect
		 * timeout is the operator's bound.
		 */
		if (resets > 0 && failures == 0)
			ereport(ERROR,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("could not connect to ZooKeeper ensemble \"%s\"", hosts),
					 errdetail_plural("Every connection to \"%s\" was reset before the ZooKeeper handshake (%llu time).",
									  "Every connection to \"%s\" was reset before the ZooKeeper handshake (%llu times).",
									  (unsigned long) resets,
									  hosts, (unsigned long long) resets),
					 errhint("A TLS tunnel resets the connection when it cannot reach its server or verify its certificate: see the tunnel's log.")));
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to ZooKeeper ensemble \"%s\"", hosts),
				 errdetail("No server answered within \"zklock.connect_timeout\" (%d ms).",
						   zklock_connect_timeout)));
	}
	zh_had_session = true;
	await_auth(deadline);
	zkn_set_delay(zklock_reply_nudge_delay);

	/* clean-ups that missed a reconnect are sent now */
	pthread_mutex_lock(&zks_mutex);
	zkt_resubmit_tasks_locked();
	pthread_mutex_unlock(&zks_mutex);
	return true;
}


ZksEventMark
zks_event_mark(void)
{
	ZksEventMark m;

	pthread_mutex_lock(&zks_mutex);
	m.watches = watch_counter;
	m.states = state_counter;
	pthread_mutex_unlock(&zks_mutex);
	return m;
}

bool
zks_wait_event(ZksEventMark seen, TimestampTz deadline)
{
	for (;;)
	{
		bool		woken;
		bool		expired;

		/*
		 * Marked as sleeping in the same look, under the mutex the
		 * watcher changes the counters under: an event after the look
		 * sets the latch (zks_take_wake_locked), one before it is seen
		 * by it.  A wait ended by an ERROR (a cancel) leaves the mark
		 * set until the next wait ends: a few wake-ups too many, never
		 * one too few.
		 */
		pthread_mutex_lock(&zks_mutex);
		woken = (watch_counter != seen.watches ||
				 state_counter != seen.states ||
				 zk_state == ZOO_EXPIRED_SESSION_STATE ||
				 zk_state == ZOO_AUTH_FAILED_STATE);
		expired = !woken && zks_deadline_passed(deadline);
		event_waiter = !woken && !expired;
		pthread_mutex_unlock(&zks_mutex);
		if (woken)
			return true;
		if (expired)
			return false;

		/*
		 * Waiting with nothing outstanding: the idle nudge (see
		 * session/nudge.c) is sent from here, and the sleep ends when
		 * the next one is due.
		 */
		{
			int			ping_ms = zks_negotiated_timeout() / 3;
			int			due_ms;
			TimestampTz until = deadline;

			zkn_idle_tick(ping_ms);
			due_ms = zkn_idle_due_ms(ping_ms);
			if (due_ms >= 0)
			{
				TimestampTz at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															 Max(due_ms, 1));

				if (until == 0 || at < until)
					until = at;
			}
			zks_sleep_on_latch(until, ZKS_WAIT_NOTIFICATION);
		}
	}
}
