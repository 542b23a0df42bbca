/*-------------------------------------------------------------------------
 *
 * session.c
 *	  The backend's ZooKeeper session: with session_cleanup.c, the only code
 *	  that talks to libzookeeper.
 *
 * libzookeeper_mt runs an I/O thread and a completion thread of its own.
 * Watchers and completions run on the completion thread, so they may call
 * nothing of PostgreSQL: no elog, no palloc, no GUC, no interrupts.  They
 * store results in malloc'd memory under zks_mutex and call
 * SetLatch(MyLatch), which is safe from any thread.  The backend waits on
 * its latch (WaitLatch + CHECK_FOR_INTERRUPTS), so every wait can be
 * cancelled, timed out or ended by postmaster death.
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
 * (its ephemeral nodes went with it): see session_cleanup.c, which shares
 * the handle and the mutex through session_int.h.
 *
 * Only the asynchronous zoo_a* API is used: the synchronous calls block in
 * a condition variable that no interrupt can end.
 *
 * src/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

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

#include "auth.h"
#include "session.h"
#include "session_int.h"
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

/* Everything below is shared with libzookeeper's threads. */
pthread_mutex_t zks_mutex = PTHREAD_MUTEX_INITIALIZER;
zhandle_t *zh = NULL;
bool zh_closing = false;
int	zk_state = 0;		/* last state seen by the watcher */
static uint64 state_counter = 0;	/* session events seen */
static uint64 watch_counter = 0;	/* watch events seen */
static uint64 reconnects = 0;	/* connections re-established */
static bool ever_connected = false;	/* a CONNECTED event was seen */

/*
 * Requests the backend gave up on while their reply was outstanding.  Their
 * completion frees them; those whose completion never runs (zookeeper_close
 * does not promise to call them) are freed once the handle is closed and
 * the library's threads are gone.
 */
static ZksRequest *abandoned = NULL;

static int	auth_result = -1;	/* zoo_add_auth reply; -1 while awaited */

/* Backend-only state. */
static char *zh_hosts = NULL;	/* settings the handle was made with */
static int	zh_timeout = 0;
static char *zh_auth = NULL;	/* identity the handle was made with
								 * (malloc'd secret: zka_free) */
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

static void forget_auth(void);
static void sleep_on_latch(TimestampTz deadline);
static bool deadline_passed(TimestampTz deadline);

/* ----------------------------------------------------------------
 * Code that runs on libzookeeper's threads.  Nothing of PostgreSQL but
 * SetLatch.
 * ----------------------------------------------------------------
 */

static void
wake_backend(void)
{
	SetLatch(MyLatch);
}




/* The session watcher: connection state changes and watch notifications. */
static void
session_watcher(zhandle_t *h, int type, int state, const char *path,
				void *ctx)
{
	pthread_mutex_lock(&zks_mutex);
	if (type == ZOO_SESSION_EVENT)
	{
		zk_state = state;
		state_counter++;
		if (state == ZOO_CONNECTED_STATE)
		{
			if (ever_connected)
				reconnects++;
			ever_connected = true;
			zkt_resubmit_tasks_locked();
		}
		else if (state == ZOO_EXPIRED_SESSION_STATE ||
				 state == ZOO_AUTH_FAILED_STATE)
			zkt_drop_tasks_locked();
	}
	else
	{
		watch_counter++;
	}
	pthread_mutex_unlock(&zks_mutex);
	wake_backend();
}

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
			zkt_add_task_locked(created, NULL);
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
				zkt_add_batch_locked(paths, n);
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
	wake_backend();
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
	wake_backend();
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
	wake_backend();
}

static void
get_completion(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	ZksRequest *req = (ZksRequest *) data;

	if (!completion_begin(req, rc))
		return;
	store_stat(req, rc, stat);
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

static void
auth_completion(int rc, const void *data)
{
	pthread_mutex_lock(&zks_mutex);
	auth_result = rc;
	pthread_mutex_unlock(&zks_mutex);
	wake_backend();
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
	return ZKS_ERROR;
}

const char *
zks_rc_text(ZksRc rc)
{
	switch (rc)
	{
		case ZKS_OK:
			return "ok";
		case ZKS_NONODE:
			return "no such node";
		case ZKS_NODEEXISTS:
			return "node exists";
		case ZKS_CONNECTION_LOSS:
			return "connection to ZooKeeper lost";
		case ZKS_SESSION_EXPIRED:
			return "ZooKeeper session expired";
		case ZKS_NOAUTH:
			return "not authorized";
		case ZKS_ERROR:
			return "ZooKeeper error";
		case ZKS_TIMEDOUT:
			return "timed out";
	}
	return "unknown";
}

/*
 * errdetail() for an outcome, as a whole sentence (for translation), to
 * be used inside ereport().
 */
int
zks_errdetail(ZksRc rc)
{
	switch (rc)
	{
		case ZKS_OK:
			break;
		case ZKS_NONODE:
			return errdetail("ZooKeeper answered that the node does not exist.");
		case ZKS_NODEEXISTS:
			return errdetail("ZooKeeper answered that the node already exists.");
		case ZKS_CONNECTION_LOSS:
			return errdetail("The connection to ZooKeeper was lost before the answer came.");
		case ZKS_SESSION_EXPIRED:
			return errdetail("The ZooKeeper session expired.");
		case ZKS_NOAUTH:
			return errdetail("ZooKeeper refused: not authorized.");
		case ZKS_ERROR:
			return errdetail("ZooKeeper answered with an error.");
		case ZKS_TIMEDOUT:
			return errdetail("No answer came in time.");
	}
	return 0;
}

static int
current_state(void)
{
	int			st;

	pthread_mutex_lock(&zks_mutex);
	st = zk_state;
	pthread_mutex_unlock(&zks_mutex);
	return st;
}

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

	if (h != NULL)
		zookeeper_close(h);

	pthread_mutex_lock(&zks_mutex);
	zh = NULL;
	zh_closing = false;
	zk_state = 0;
	state_counter++;
	zkt_free_all_tasks_locked();
	while (abandoned != NULL)
	{
		ZksRequest *req = abandoned;

		unlink_abandoned_locked(req);
		free_request(req);
	}
	pthread_mutex_unlock(&zks_mutex);

	free(zh_hosts);
	zh_hosts = NULL;
	forget_auth();
	zh_had_session = false;
}

/* Drop the copy of the credentials, leaving nothing readable behind. */
static void
forget_auth(void)
{
	zka_free(zh_auth);
	zh_auth = NULL;
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
	char	   *file_copy;
	bool		changed;

	if (zka_generation == zh_auth_generation &&
		strcmp(want_file, zh_auth_file ? zh_auth_file : "") == 0)
		return false;

	identity = zka_read_identity(want_file);
	changed = strcmp(identity ? identity : "", zh_auth ? zh_auth : "") != 0;
	zka_free(identity);
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
 * Stack size of libzookeeper's two threads (and of the probe below).  The
 * default is the process's stack limit (8 MB), which a thread or memory
 * limit meets sooner; the threads only run the client's I/O loop, name
 * resolution and our small completions.
 */
#define ZK_THREAD_STACK (512 * 1024)

static pthread_mutex_t probe_mutex = PTHREAD_MUTEX_INITIALIZER;

static void *
probe_thread(void *arg)
{
	/* wait until the backend has tried to start both threads */
	pthread_mutex_lock(&probe_mutex);
	pthread_mutex_unlock(&probe_mutex);
	return NULL;
}

/*
 * libzookeeper asserts that pthread_create succeeds (Debian builds keep
 * assertions), so a backend at its thread or memory limit would abort, and
 * PostgreSQL would restart every backend of the cluster.  Start two
 * threads that live at the same time, as libzookeeper's do, and raise
 * ERROR if that fails.  (Another process of the same user could still
 * take the last slot between this probe and zookeeper_init; the probe
 * makes that a narrow race instead of a certainty.)
 */
static void
check_threads_available(void)
{
	pthread_attr_t attr;
	pthread_t	threads[2];
	int			started = 0;
	int			rc = 0;
	sigset_t	all;
	sigset_t	old;

	if (pthread_attr_init(&attr) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start the threads of a ZooKeeper session"),
				 errdetail("pthread_attr_init failed.")));
	(void) pthread_attr_setstacksize(&attr, ZK_THREAD_STACK);

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_mutex_lock(&probe_mutex);
	while (started < 2)
	{
		rc = pthread_create(&threads[started], &attr, probe_thread, NULL);
		if (rc != 0)
			break;
		started++;
	}
	pthread_mutex_unlock(&probe_mutex);
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);

	if (rc != 0)
	{
		errno = rc;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start the threads of a ZooKeeper session: %m"),
				 errdetail("A ZooKeeper session needs two threads in this backend; the operating system refused to create them."),
				 errhint("Check the limits on processes and threads (ulimit -u) and memory of the server's operating-system user.")));
	}
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
	uint64		generation = zka_generation;
	int			scheme_len = 0;
	const char *cred = NULL;

	if (!shutdown_registered)
	{
		before_shmem_exit(zks_shutdown, (Datum) 0);
		shutdown_registered = true;
	}
	/* may raise ERROR: nothing is changed before it */
	check_threads_available();
	identity = zka_read_identity(zklock_auth_file);
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

	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);

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
		h = zookeeper_init(zh_hosts, session_watcher, zh_timeout, NULL, NULL, 0);
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
		char	   *hosts = pstrdup(zh_hosts);

		free(zh_hosts);
		zh_hosts = NULL;
		zka_free(identity);
		free(identity_file);
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
	 */
	pthread_mutex_lock(&zks_mutex);
	zh = h;
	zh_auth = identity;
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
	zh_had_session = false;
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
		if (rc != -1 || deadline_passed(deadline))
		{
			char	   *hosts = pstrdup(zh_hosts);

			close_handle();
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
					 errmsg("ZooKeeper authentication with the identity in \"zklock.auth_file\" failed on \"%s\"",
							hosts),
					 rc == -1 ? errdetail("No answer within \"zklock.connect_timeout\".") : 0));
		}
		sleep_on_latch(deadline);
	}
}

static long
ms_until(TimestampTz deadline)
{
	long		secs;
	int			usecs;

	TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
	return secs * 1000 + usecs / 1000 + (usecs % 1000 ? 1 : 0);
}

/*
 * Sleep on the latch until woken or until the deadline (0: at most a
 * second, to re-check).  Interrupts are processed here.
 */
static void
sleep_on_latch(TimestampTz deadline)
{
	long		timeout = 1000;

	if (deadline != 0)
		timeout = Min(timeout, Max(ms_until(deadline), 0));
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

static bool
deadline_passed(TimestampTz deadline)
{
	return deadline != 0 && GetCurrentTimestamp() >= deadline;
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
		int			st = current_state();

		if (zh == NULL || st == ZOO_EXPIRED_SESSION_STATE)
			return ZKS_SESSION_EXPIRED;
		if (st == ZOO_AUTH_FAILED_STATE)
			return ZKS_NOAUTH;
		if (st == ZOO_CONNECTED_STATE)
			return ZKS_OK;
		if (deadline_passed(deadline))
			return ZKS_TIMEDOUT;
		sleep_on_latch(deadline);
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
							zh_hosts)));
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
	int			st = current_state();

	/* A session that can never come back is replaced. */
	if (zh != NULL &&
		(st == ZOO_EXPIRED_SESSION_STATE || st == ZOO_AUTH_FAILED_STATE))
		close_handle();

	/* New settings take effect when nothing depends on the old session. */
	if (zh != NULL && may_reconnect &&
		(strcmp(zh_hosts, zklock_hosts) != 0 ||
		 zh_timeout != zklock_session_timeout || auth_changed()))
		close_handle();

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
		char	   *hosts = pstrdup(zh_hosts);

		/* never connected: do not leave threads retrying in the background */
		if (!zh_had_session)
			close_handle();
		if (limited)
			return false;
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to ZooKeeper ensemble \"%s\"", hosts),
				 errdetail("No server answered within \"zklock.connect_timeout\" (%d ms).",
						   zklock_connect_timeout)));
	}
	zh_had_session = true;
	await_auth(deadline);

	/* clean-ups that missed a reconnect are sent now */
	pthread_mutex_lock(&zks_mutex);
	zkt_resubmit_tasks_locked();
	pthread_mutex_unlock(&zks_mutex);
	return true;
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
 * A call that libzookeeper refused outright gets no completion: record the
 * outcome as if it had been the reply.
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
	if (zh == NULL)
		return sent(req, ZINVALIDSTATE);
	return sent(req, zoo_acreate2(zh, path, data, datalen,
								  zh_auth ? &auth_acl : &ZOO_OPEN_ACL_UNSAFE,
								  zmode, create_completion, req));
}

ZksRequest *
zks_send_children(const char *path, bool watch)
{
	ZksRequest *req = new_request(KIND_CHILDREN, path);

	if (zh == NULL)
		return sent(req, ZINVALIDSTATE);
	return sent(req, zoo_aget_children(zh, path, watch ? 1 : 0,
									   children_completion, req));
}

ZksRequest *
zks_send_exists(const char *path, bool watch)
{
	ZksRequest *req = new_request(KIND_EXISTS, path);

	if (zh == NULL)
		return sent(req, ZINVALIDSTATE);
	return sent(req, zoo_aexists(zh, path, watch ? 1 : 0, exists_completion, req));
}

ZksRequest *
zks_send_checks(const char *const *paths, int n, int *taken)
{
	ZksRequest *req = new_request(KIND_MULTI, paths[0]);
	zoo_op_t   *ops;
	int			zrc;

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
	if (zh == NULL)
		zrc = ZINVALIDSTATE;
	else
		zrc = zoo_amulti(zh, *taken, ops, req->results, multi_completion, req);
	free(ops);
	return sent(req, zrc);
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
	int			zrc;

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
						   zh_auth ? &auth_acl : &ZOO_OPEN_ACL_UNSAFE,
						   ZOO_EPHEMERAL_SEQUENTIAL,
						   req->names + (size_t) i * req->name_len,
						   req->name_len);
	if (zh == NULL)
		zrc = ZINVALIDSTATE;
	else
		zrc = zoo_amulti(zh, fit, ops, req->results, multi_create_completion,
						 req);
	free(ops);
	return sent(req, zrc);
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
	if (zh == NULL)
		return sent(req, ZINVALIDSTATE);
	return sent(req, zoo_aget(zh, path, 1, get_completion, req));
}

ZksRequest *
zks_send_get(const char *path)
{
	ZksRequest *req = new_request(KIND_GET, path);

	if (zh == NULL)
		return sent(req, ZINVALIDSTATE);
	return sent(req, zoo_aget(zh, path, 0, get_completion, req));
}

ZksRequest *
zks_send_sync(const char *path)
{
	ZksRequest *req = new_request(KIND_SYNC, path);

	if (zh == NULL)
		return sent(req, ZINVALIDSTATE);
	return sent(req, zoo_async(zh, path, sync_completion, req));
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
		if (deadline_passed(deadline))
			return cap != 0 ? ZKS_CONNECTION_LOSS : ZKS_TIMEDOUT;
		sleep_on_latch(deadline);
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

		pthread_mutex_lock(&zks_mutex);
		woken = (watch_counter != seen.watches ||
				 state_counter != seen.states ||
				 zk_state == ZOO_EXPIRED_SESSION_STATE ||
				 zk_state == ZOO_AUTH_FAILED_STATE);
		pthread_mutex_unlock(&zks_mutex);
		if (woken)
			return true;
		if (deadline_passed(deadline))
			return false;
		sleep_on_latch(deadline);
	}
}

bool
zks_is_connected(void)
{
	return zh != NULL && current_state() == ZOO_CONNECTED_STATE;
}

void
zks_get_status(ZksStatus *status)
{
	int			st = current_state();

	memset(status, 0, sizeof(ZksStatus));
	pthread_mutex_lock(&zks_mutex);
	status->reconnects = reconnects;
	pthread_mutex_unlock(&zks_mutex);

	if (zh == NULL)
	{
		status->state = "none";
		return;
	}
	if (st == ZOO_CONNECTED_STATE)
		status->state = "connected";
	else if (st == ZOO_EXPIRED_SESSION_STATE)
		status->state = "expired";
	else if (st == ZOO_AUTH_FAILED_STATE)
		status->state = "auth_failed";
	else
		status->state = "connecting";
	status->session_id = zks_session_id();
	status->timeout_ms = zoo_recv_timeout(zh);
	if (st == ZOO_CONNECTED_STATE)
	{
		struct sockaddr_storage addr;
		socklen_t	len = sizeof(addr);
		char		host[INET6_ADDRSTRLEN];

		if (zookeeper_get_connected_host(zh, (struct sockaddr *) &addr, &len) != NULL)
		{
			if (addr.ss_family == AF_INET)
			{
				struct sockaddr_in *in = (struct sockaddr_in *) &addr;

				inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
				snprintf(status->server, sizeof(status->server), "%s:%d",
						 host, ntohs(in->sin_port));
			}
			else if (addr.ss_family == AF_INET6)
			{
				struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &addr;

				inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
				snprintf(status->server, sizeof(status->server), "[%s]:%d",
						 host, ntohs(in6->sin6_port));
			}
		}
	}
}

bool
zks_session_expired(void)
{
	int			st = current_state();

	return zh != NULL && (st == ZOO_EXPIRED_SESSION_STATE ||
						  st == ZOO_AUTH_FAILED_STATE);
}

int
zks_negotiated_timeout(void)
{
	int			t = zh != NULL ? zoo_recv_timeout(zh) : 0;

	return t > 0 ? t : zklock_session_timeout;
}

int64
zks_session_id(void)
{
	const clientid_t *id;

	if (zh == NULL)
		return 0;
	id = zoo_client_id(zh);
	return id ? id->client_id : 0;
}
