/*-------------------------------------------------------------------------
 *
 * cleanup.c
 *	  The session's clean-up tasks: deletes, and sweeps for nodes whose
 *	  create reply was lost, that libzookeeper's completion thread carries
 *	  out on its own, sends again after every reconnect and forgets once
 *	  the session is gone; and the deletes of a release, collected and
 *	  sent as multi requests.  The nodes its sweeps and stray deletes are
 *	  about to remove are the backend's own, and it says which they are
 *	  (zkt_is_stray_locked).
 *
 * Part of the session layer (see session.c): the task list is shared with
 * the completion thread under zks_mutex, and nothing of PostgreSQL runs
 * on that thread.  Nothing here raises ERROR or waits: releases run inside
 * transaction callbacks.  Without memory for a task, the node simply goes
 * when the session ends.
 *
 * src/session/cleanup.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <string.h>

#include <zookeeper.h>

#include "session/session.h"
#include "session/session_int.h"

/*
 * A clean-up the completion thread carries out on its own: delete a node,
 * or list a parent and delete every child whose name starts with prefix
 * (a create whose reply was lost after its waiter gave up).
 */
typedef struct CleanupTask
{
	struct CleanupTask *next;
	struct CleanupTask *prev;	/* doubly linked: a release of thousands of
								 * locks unlinks each in O(1) */
	bool		in_flight;		/* sent, reply awaited */
	bool		dead;			/* session gone: free at the reply */
	char	   *path;			/* node to delete, or parent to sweep */
	char	   *prefix;			/* non-NULL for a sweep */
	bool		stray;			/* deletes a node no attempt owns */

	/*
	 * A batch (path NULL): deletes sent as one multi request, so that a
	 * COMMIT releasing thousands of locks costs ZooKeeper a few
	 * transactions instead of thousands.  ops/results are what zoo_amulti
	 * is handed; results is written when the reply comes.
	 */
	int			nbatch;
	char	  **batch;
	zoo_op_t   *ops;
	zoo_op_result_t *results;
} CleanupTask;

/* (a batch of deletes: at most BATCH_MAX_OPS, each about 20 bytes of
 * framing beyond its path, within BATCH_MAX_BYTES) */

static void submit_task_locked(CleanupTask *t);

static CleanupTask *tasks = NULL;

/* How many tasks are sweeps or delete strays (zkt_is_stray_locked). */
static int	nstray = 0;

/*
 * The name prefixes of the strays deleted last.  A listing the server ran
 * before a stray's delete may reach the backend after the delete's reply
 * has ended its task; the node must still count as ours there.  Each
 * prefix carries a fresh UUID, so an old entry never matches another
 * node: the ring only bounds the memory.
 */
#define RECENT_STRAYS 32
static char *recent_strays[RECENT_STRAYS];
static int	recent_next = 0;

/* Remember the name prefix of a stray's path (its last component without
 * the sequence number), or a sweep's prefix as it is. */
static void
remember_stray_locked(const char *path, bool is_prefix)
{
	const char *last = strrchr(path, '/');
	size_t		len;
	int			prev = (recent_next + RECENT_STRAYS - 1) % RECENT_STRAYS;
	char	   *copy;

	last = last ? last + 1 : path;
	len = strlen(last);
	if (!is_prefix)
	{
		while (len > 0 && last[len - 1] >= '0' && last[len - 1] <= '9')
			len--;
		if (len > 0 && last[len - 1] == '-')
			len--;
	}
	if (len == 0)
		return;
	if (recent_strays[prev] != NULL &&
		strlen(recent_strays[prev]) == len &&
		strncmp(recent_strays[prev], last, len) == 0)
		return;					/* a batch of one call: one entry */
	copy = strndup(last, len);
	if (copy == NULL)
		return;
	free(recent_strays[recent_next]);
	recent_strays[recent_next] = copy;
	recent_next = (recent_next + 1) % RECENT_STRAYS;
}

static void
free_task(CleanupTask *t)
{
	for (int i = 0; i < t->nbatch; i++)
		free(t->batch[i]);
	free(t->batch);
	free(t->ops);
	free(t->results);
	free(t->path);
	free(t->prefix);
	free(t);
}

static void
unlink_task_locked(CleanupTask *t)
{
	if (t->prefix != NULL || t->stray)
		nstray--;
	if (t->prefix != NULL)
		remember_stray_locked(t->prefix, true);
	else if (t->stray && t->nbatch > 0)
		for (int i = 0; i < t->nbatch; i++)
			remember_stray_locked(t->batch[i], false);
	else if (t->stray)
		remember_stray_locked(t->path, false);
	if (t->prev)
		t->prev->next = t->next;
	else
		tasks = t->next;
	if (t->next)
		t->next->prev = t->prev;
	free_task(t);
}

/*
 * The session is gone and its nodes with it: forget the clean-ups.  One in
 * flight still has a completion to come that points at it, so it is only
 * marked dead here and freed by that completion.
 */
void
zkt_drop_tasks_locked(void)
{
	CleanupTask *t = tasks;

	while (t != NULL)
	{
		CleanupTask *next = t->next;

		if (t->in_flight)
			t->dead = true;
		else
			unlink_task_locked(t);
		t = next;
	}
}

/* After zookeeper_close: no completion will run any more. */
void
zkt_free_all_tasks_locked(void)
{
	while (tasks != NULL)
	{
		CleanupTask *t = tasks;

		tasks = t->next;
		free_task(t);
	}
	nstray = 0;
}

/* Link a task in and send it if the session can take it now. */
static void
queue_task_locked(CleanupTask *t)
{
	t->prev = NULL;
	t->next = tasks;
	if (tasks)
		tasks->prev = t;
	tasks = t;
	if (t->prefix != NULL || t->stray)
		nstray++;
	submit_task_locked(t);
}

static void
add_task_locked(const char *path, const char *prefix, bool stray)
{
	CleanupTask *t = calloc(1, sizeof(CleanupTask));

	if (t == NULL)
		return;					/* the node goes when the session ends */
	t->stray = stray;
	t->path = strdup(path);
	t->prefix = prefix ? strdup(prefix) : NULL;
	if (t->path == NULL || (prefix != NULL && t->prefix == NULL))
	{
		free_task(t);
		return;
	}
	queue_task_locked(t);
}

/* A delete (prefix NULL) or a sweep. */
void
zkt_add_task_locked(const char *path, const char *prefix)
{
	add_task_locked(path, prefix, false);
}

void
zkt_add_stray_locked(const char *path)
{
	add_task_locked(path, NULL, true);
}

/*
 * A batch of n deletes; takes over paths[0..n-1] (malloc'd).  Without
 * memory for it, each path becomes a task of its own.
 */
void
zkt_add_batch_locked(char **paths, int n, bool stray)
{
	CleanupTask *t = calloc(1, sizeof(CleanupTask));

	if (t != NULL)
	{
		t->batch = malloc(n * sizeof(char *));
		t->ops = malloc(n * sizeof(zoo_op_t));
		t->results = malloc(n * sizeof(zoo_op_result_t));
	}
	if (t == NULL || t->batch == NULL || t->ops == NULL || t->results == NULL)
	{
		if (t != NULL)
			free_task(t);
		for (int i = 0; i < n; i++)
		{
			add_task_locked(paths[i], NULL, stray);
			free(paths[i]);
		}
		return;
	}
	memcpy(t->batch, paths, n * sizeof(char *));
	t->nbatch = n;
	t->stray = stray;
	queue_task_locked(t);
}

static void
delete_task_completion(int rc, const void *data)
{
	CleanupTask *t = (CleanupTask *) data;

	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	if (zks_is_connection_loss(rc) && !zh_closing && !t->dead)
		t->in_flight = false;	/* re-sent after the reconnect */
	else
		unlink_task_locked(t);	/* done, gone, or the session is gone */
	pthread_mutex_unlock(&zks_mutex);
}

/*
 * A multi request is all or nothing: if any delete in it failed (a node an
 * operator removed, say), none was done, so each is sent again on its own.
 */
static void
batch_task_completion(int rc, const void *data)
{
	CleanupTask *t = (CleanupTask *) data;

	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	if (zks_is_connection_loss(rc) && !zh_closing && !t->dead)
		t->in_flight = false;
	else
	{
		if (rc != ZOK && !zh_closing && !t->dead)
			for (int i = 0; i < t->nbatch; i++)
				add_task_locked(t->batch[i], NULL, t->stray);
		unlink_task_locked(t);
	}
	pthread_mutex_unlock(&zks_mutex);
}

static void
sweep_task_completion(int rc, const struct String_vector *strings,
					  const void *data)
{
	CleanupTask *t = (CleanupTask *) data;

	zkn_answered(rc);
	pthread_mutex_lock(&zks_mutex);
	if (zks_is_connection_loss(rc) && !zh_closing && !t->dead)
		t->in_flight = false;
	else
	{
		if (rc == ZOK && !zh_closing && !t->dead)
		{
			size_t		plen = strlen(t->prefix);

			for (int i = 0; i < strings->count; i++)
			{
				if (strncmp(strings->data[i], t->prefix, plen) == 0)
				{
					size_t		plen2 = strlen(t->path);
					size_t		clen = strlen(strings->data[i]);
					char	   *child = malloc(plen2 + clen + 2);

					/* (no snprintf: it is PostgreSQL's here) */
					if (child == NULL)
						continue;
					memcpy(child, t->path, plen2);
					child[plen2] = '/';
					memcpy(child + plen2 + 1, strings->data[i], clen + 1);
					zkt_add_stray_locked(child);
					free(child);
				}
			}
		}
		unlink_task_locked(t);
	}
	pthread_mutex_unlock(&zks_mutex);
}

/* The sync in front of a sweep's listing: the listing's reply decides. */
static void
sync_task_completion(int rc, const char *value, const void *data)
{
	zkn_answered(rc);
}

static void
submit_task_locked(CleanupTask *t)
{
	int			rc;

	if (zh == NULL || zh_closing || t->in_flight || t->dead ||
		zk_state != ZOO_CONNECTED_STATE)
		return;
	t->in_flight = true;
	if (t->nbatch > 0)
	{
		for (int i = 0; i < t->nbatch; i++)
			zoo_delete_op_init(&t->ops[i], t->batch[i], -1);
		rc = zoo_amulti(zh, t->nbatch, t->ops, t->results,
						batch_task_completion, t);
	}
	else if (t->prefix != NULL)
	{
		/*
		 * The server we reach may lag the leader and not show the node
		 * yet: sync it first, sent back to back with the listing (a
		 * session's requests run in order, so the listing waits for the
		 * sync).  A failed sync is followed by a failed listing, as both
		 * travel on the same connection.
		 */
		rc = zoo_async(zh, t->path, sync_task_completion, NULL);
		if (rc == ZOK)
		{
			zkn_sent();
			rc = zoo_aget_children(zh, t->path, 0, sweep_task_completion, t);
		}
	}
	else
		rc = zoo_adelete(zh, t->path, -1, delete_task_completion, t);
	if (rc == ZOK)
		zkn_sent();				/* the reply nudge counts it */
	else
		t->in_flight = false;	/* tried again at the next reconnect */
}

void
zkt_resubmit_tasks_locked(void)
{
	for (CleanupTask *t = tasks; t != NULL; t = t->next)
		submit_task_locked(t);
}

/*
 * Is path parent + "/" + name (whole, or with only a prefix of name as its
 * last component)?
 */
bool
zkt_path_names_child(const char *path, const char *parent, const char *name,
					 bool prefix_only)
{
	size_t		plen = strlen(parent);
	const char *last;

	if (strncmp(path, parent, plen) != 0 || path[plen] != '/')
		return false;
	last = path + plen + 1;
	if (prefix_only)
		return last[0] != '\0' && strncmp(name, last, strlen(last)) == 0;
	return strcmp(last, name) == 0;
}

/*
 * Is child name of parent a node of this session that no attempt owns and
 * that a task here is about to delete, or has just deleted: one a sweep
 * finds (a create whose reply was lost after its waiter gave up), or one
 * a create made after its waiter gave up?  Such a node can still be in a
 * listing the backend makes meanwhile (a sweep's deletes go out only once
 * its listing is answered), and it must not count as another client's
 * contender there.
 */
bool
zkt_is_stray_locked(const char *parent, const char *name)
{
	for (int i = 0; i < RECENT_STRAYS; i++)
		if (recent_strays[i] != NULL &&
			strncmp(name, recent_strays[i], strlen(recent_strays[i])) == 0)
			return true;
	if (nstray == 0)
		return false;
	for (CleanupTask *t = tasks; t != NULL; t = t->next)
	{
		if (t->dead)
			continue;
		if (t->prefix != NULL)
		{
			if (strcmp(t->path, parent) == 0 &&
				strncmp(name, t->prefix, strlen(t->prefix)) == 0)
				return true;
		}
		else if (t->stray && t->nbatch > 0)
		{
			for (int i = 0; i < t->nbatch; i++)
				if (zkt_path_names_child(t->batch[i], parent, name, false))
					return true;
		}
		else if (t->stray &&
				 zkt_path_names_child(t->path, parent, name, false))
			return true;
	}
	return false;
}

/* Parent and last component of a path, for a sweep task. */
void
zkt_sweep_for_create_locked(const char *path)
{
	const char *slash = strrchr(path, '/');
	char	   *parent;

	if (slash == NULL || slash == path)
		return;
	parent = strndup(path, slash - path);
	if (parent == NULL)
		return;
	zkt_add_task_locked(parent, slash + 1);
	free(parent);
}

/*
 * How many of the n paths go into one multi request (at least one), each
 * op costing its path and per_op bytes more; *longest (if not NULL) is
 * the longest path's length among them.
 */
int
zkt_batch_fit(const char *const *paths, int n, size_t per_op, size_t *longest)
{
	int			fit = 0;
	size_t		bytes = 0;

	if (longest != NULL)
		*longest = 0;
	while (fit < n && fit < BATCH_MAX_OPS)
	{
		size_t		path_len = strlen(paths[fit]);
		size_t		len = path_len + per_op;

		if (fit > 0 && bytes + len > BATCH_MAX_BYTES)
			break;
		bytes += len;
		if (longest != NULL && path_len > *longest)
			*longest = path_len;
		fit++;
	}
	return fit;
}

/*
 * Deletes collected between zks_batch_begin() and zks_batch_end()
 * (backend only; malloc'd, as they are handed over to tasks).
 */
static bool batching = false;
static char **pending = NULL;
static int	npending = 0;
static int	pending_cap = 0;

static bool
collect_delete(const char *path)
{
	char	   *copy;

	if (npending == pending_cap)
	{
		int			newcap = Max(64, pending_cap * 2);
		char	  **grown = realloc(pending, newcap * sizeof(char *));

		if (grown == NULL)
			return false;
		pending = grown;
		pending_cap = newcap;
	}
	copy = strdup(path);
	if (copy == NULL)
		return false;
	pending[npending++] = copy;
	return true;
}

void
zks_batch_begin(void)
{
	/* a batch left open (it cannot be, but) is sent, not kept back */
	if (npending > 0)
		zks_batch_end();
	batching = true;
}

void
zks_batch_end(void)
{
	int			start = 0;

	batching = false;
	pthread_mutex_lock(&zks_mutex);
	while (start < npending)
	{
		int			n = zkt_batch_fit((const char *const *) pending + start,
									  npending - start, SMALL_OP_OVERHEAD,
									  NULL);

		if (zh == NULL || zh_closing)
		{
			for (int i = start; i < start + n; i++)
				free(pending[i]);
		}
		else if (n == 1)
		{
			zkt_add_task_locked(pending[start], NULL);
			free(pending[start]);
		}
		else
			zkt_add_batch_locked(&pending[start], n, false);
		start += n;
	}
	pthread_mutex_unlock(&zks_mutex);
	npending = 0;
}

void
zks_delete_async(const char *path)
{
	/* its watch fires at the delete: nobody listens for it any more */
	zks_unwatch_node(path);
	if (batching && collect_delete(path))
		return;
	zks_give_back(path);
}

void
zks_give_back(const char *path)
{
	pthread_mutex_lock(&zks_mutex);
	if (zh != NULL && !zh_closing)
		zkt_add_task_locked(path, NULL);
	pthread_mutex_unlock(&zks_mutex);
}

void
zks_sweep_async(const char *parent, const char *prefix)
{
	pthread_mutex_lock(&zks_mutex);
	if (zh != NULL && !zh_closing)
		zkt_add_task_locked(parent, prefix);
	pthread_mutex_unlock(&zks_mutex);
}
