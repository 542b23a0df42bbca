/*
 * rawzk: the ZooKeeper floor of a lock cycle, measured with the plain C
 * client (libzookeeper_mt), for `make bench`.
 *
 *   rawzk MODE HOSTS PARENT WARMUP_S SECONDS
 *
 * MODE
 *   sync       the reference of issue 6: synchronous
 *              zoo_create(EPHEMERAL_SEQUENTIAL) then zoo_delete, in a loop
 *              (two round trips per cycle, each a write)
 *   pipelined  zklock's protocol without PostgreSQL: zoo_acreate and
 *              zoo_aget_children sent back to back, wait for both, then
 *              zoo_adelete sent without waiting (one round trip per cycle;
 *              the delete is executed before the next create, since
 *              ZooKeeper runs a session's requests in order)
 *   read       synchronous zoo_exists of PARENT: one read round trip
 *   write      synchronous zoo_set of PARENT: one write round trip
 *   recipe     zklock's protocol without PostgreSQL, in RAWZK_THREADS
 *              threads (default 1), each its own session, all on PARENT:
 *              create(EPHEMERAL_SEQUENTIAL) and getChildren(PARENT) sent
 *              back to back; decide: the greatest lower node is the
 *              predecessor, none means held; else exists(predecessor,
 *              watch): NONODE lists again at once, otherwise wait for the
 *              watch and ALWAYS list again (a predecessor may have given
 *              up), then decide again.  Held: the commit check, unless
 *              RAWZK_CHECK=0 (zklock.verify_at_commit): sync(PARENT) and
 *              exists(own) back to back (one round trip; the sync makes the
 *              answer reflect the leader's state); then the delete is sent
 *              without waiting and the loop starts over.
 *              RAWZK_OWNWATCH=1 (default 0): the own-watch protocol: when a
 *              listing shows exactly one lower node, exists(own, watch) and
 *              exists(predecessor, watch) back to back; the predecessor's
 *              NodeDeleted with no NodeDeleted of the own node before it is
 *              the grant, without a new listing (any other event: list
 *              again); at commit, with the own watch still armed, sync
 *              alone (the server delivers the own node's NodeDeleted before
 *              the sync's reply), else sync + exists as above.  The own
 *              watch fires once more at the delete: ignored.
 *              RAWZK_GAP_US=G (default 0): after sending each delete, the
 *              thread sleeps G microseconds before its next create: the
 *              place where a zklock cycle spends PostgreSQL's statements
 *              (COMMIT's return, BEGIN, the SELECT up to the create) and
 *              the only place where that time can overlap ZooKeeper's
 *              work (the delete's fsync).  With G = the advisory cycle's
 *              time, the rate is the most a zklock cycle with this
 *              protocol can reach uncontended: PostgreSQL's statements
 *              could only sit elsewhere (in series) and use CPU, where
 *              this sleep uses none (but for its last 100 us, spun so
 *              that it does not overshoot).  Prints the mean gap slept.
 *              RAWZK_SEM=P (default 0): zklock's semaphore instead of its
 *              lock, in Curator's layout (InterProcessSemaphoreV2): the
 *              lock above on PARENT/locks is only the internal mutex; its
 *              holder creates a lease (EPHEMERAL_SEQUENTIAL) under
 *              PARENT/leases and lists the leases, and sends the mutex's
 *              delete right behind them, all three back to back; it holds
 *              when they number at most P.  Otherwise it gives the lease
 *              back, queues on the mutex again and this time lists with a
 *              child watch and waits for it while there is no room, the
 *              mutex kept, before it sends the mutex's delete.  The lease
 *              goes through the commit check (sync + exists) and its
 *              delete as above.  Exits with an error if more than P
 *              threads ever hold at once.  Prints requeues (counts with
 *              no room after the early delete) and lease_waits: how many
 *              times a mutex holder found the leases full and waited
 *              (lease_waits_at_one: with exactly one too many).
 *              RAWZK_TAIL_FILE=F: every cycle started inside the window is
 *              written to F as "START_NS END_NS" (CLOCK_MONOTONIC: before
 *              the create, after the delete is sent, as a zklock COMMIT
 *              returns), and the sessions' reconnects are counted
 *              (printed as reconnects=).  rawzk sends no reply nudge: it
 *              shows the protocol as the server treats it.
 *              A cycle is a grant, so with several threads cycles are
 *              handoffs; it exits with an error if two threads ever hold
 *              at once.  This is what zklock's protocol costs with nothing
 *              else in the way: for a handoff no zklock can be faster (its
 *              critical path runs through PostgreSQL).  Prints also the
 *              listings sent and the grants taken without one (shortcuts).
 *
 *   set        (rawzk set HOSTS PARENT N ROUNDS) zklock's array call without
 *              PostgreSQL: N locks under PARENT/lNNNNN, their
 *              EPHEMERAL_SEQUENTIAL creates in multi requests of 1,000,
 *              each lock's zoo_aget_children right behind the multi that
 *              made its node, all pipelined; then the deletes in multi
 *              requests.  Prints the median time to hold all N and to
 *              release them, over ROUNDS rounds: the protocol's floor for
 *              zk_lock_exclusive(text[]).
 *
 * Node names and data mimic zklock's (Curator's protected name, a ~120
 * byte owner line), so the server does the same work.  Prints one line:
 *   mode=sync cycles=12345 total=14800 seconds=5.000 us_per_cycle=405.1
 * (cycles: in the measured window; total: warm-up included)
 * "window-start" and "window-end" lines mark the measured window (the
 * bench samples CPU time between them; with BENCH_SAMPLER set, rawzk then
 * waits for a line on stdin, so it is still alive when sampled).
 * This is a standalone measuring tool, so the synchronous calls are fine
 * here (the extension itself uses only the asynchronous API).
 *
 * Build: cc -O2 -DTHREADED -I/usr/include/zookeeper rawzk.c -lzookeeper_mt
 */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>

#include <zookeeper.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int connected = 0;
static int pending = 0;			/* replies awaited in pipelined mode */
static int outstanding_deletes = 0;
static int failures = 0;

static long
ns_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	if (type == ZOO_SESSION_EVENT)
	{
		pthread_mutex_lock(&mu);
		connected = (state == ZOO_CONNECTED_STATE);
		if (state == ZOO_EXPIRED_SESSION_STATE)
			connected = -1;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
	}
}

static void
reply_done(int rc)
{
	pthread_mutex_lock(&mu);
	if (rc != ZOK)
		failures++;
	pending--;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void
create_completion(int rc, const char *value, const void *data)
{
	if (rc == ZOK)
		strncpy((char *) data, value, 511);
	reply_done(rc);
}

static void
children_completion(int rc, const struct String_vector *strings,
					const void *data)
{
	reply_done(rc);
}

static void
delete_completion(int rc, const void *data)
{
	pthread_mutex_lock(&mu);
	if (rc != ZOK)
		failures++;
	outstanding_deletes--;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void
void_completion(int rc, const void *data)
{
	reply_done(rc);
}

static void
parent_completion(int rc, const char *value, const void *data)
{
	reply_done(rc == ZNODEEXISTS ? ZOK : rc);
}

static void
die(const char *what, int rc)
{
	fprintf(stderr, "rawzk: %s: %s\n", what, zerror(rc));
	exit(1);
}

/* ---- recipe mode: zklock's protocol in N threads, each its own session ---- */

typedef struct Contender
{
	int			id;
	const char *hosts;
	const char *parent;
	zhandle_t  *zh;
	pthread_t	thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int			connected;
	int			pending;		/* replies awaited */
	int			failures;
	char		created[512];	/* own node's full path */
	char		watched[512];	/* predecessor's full path, while watched */
	int			pred_event;		/* an event on the watched predecessor came */
	int			pred_deleted;	/* ... and it was NodeDeleted */
	int			own_armed;		/* own-node watch set and not yet fired */
	int			own_event;		/* the own-node watch fired */
	int			own_deleted;	/* ... with NodeDeleted */
	int			own_deleted_first;	/* own NodeDeleted before the pred's */
	int			exists_rc;		/* exists(predecessor) */
	int			own_exists_rc;	/* exists(own node) */
	int			sync_rc;
	char		leases[512];	/* semaphore mode: the lease parent */
	char		lease[512];		/* ... our lease's full path, while held */
	int			lease_event;	/* ... the lease list's child watch fired */
	char	  **kids;			/* last listing (malloc'd copies) */
	int			nkids;
	int			outstanding_deletes;
	long	   *tail;			/* RAWZK_TAIL_FILE: start, end ns per cycle */
	long		ntail;
	int			reconnects;		/* CONNECTED events after the first */
	int			ever_connected;
} Contender;

/* RAWZK_TAIL_FILE: cycles recorded per thread, at most */
#define TAIL_MAX (1 << 20)
static const char *tail_file = NULL;

static atomic_long grants;
static atomic_long listings;	/* getChildren sent, the first one included */
static atomic_long shortcuts;	/* grants on the own-watch rule, no listing */
static atomic_long lease_waits;	/* semaphore: waits for the lease list to change */
static atomic_long lease_waits_at_one; /* ... with exactly one lease too many */
static atomic_long requeues;	/* semaphore: optimistic counts with no room */
static atomic_int holders;		/* more than one at a time is a bug */
static atomic_int stopping;
static int	check_at_commit = 1;
static int	own_watch = 0;		/* RAWZK_OWNWATCH */
static long gap_ns = 0;			/* RAWZK_GAP_US, in ns */
static int	sem_permits = 0;	/* RAWZK_SEM: permits, 0 = a lock */
static const char *mutex_parent = NULL; /* semaphore mode: PARENT/locks */
static const char *lease_parent = NULL; /* ... and PARENT/leases */
static atomic_long gaps;		/* gaps slept, and their total in ns */
static atomic_long gap_total_ns;

static void
c_session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	Contender  *c = (Contender *) zoo_get_context(zh);

	if (type != ZOO_SESSION_EVENT || c == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	if (state == ZOO_CONNECTED_STATE)
	{
		if (c->ever_connected)
			c->reconnects++;
		c->ever_connected = 1;
	}
	c->connected = (state == ZOO_CONNECTED_STATE) ? 1 :
		(state == ZOO_EXPIRED_SESSION_STATE ? -1 : 0);
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void
c_done(Contender *c, int rc)
{
	if (rc != ZOK)
		c->failures++;
	c->pending--;
	pthread_cond_broadcast(&c->cv);
}

/* a create's reply: the path into dst (c->created or c->lease) */
static void
c_created(Contender *c, int rc, const char *value, char *dst, size_t size)
{
	pthread_mutex_lock(&c->mu);
	if (rc == ZOK)
		snprintf(dst, size, "%s", value);
	c_done(c, rc);
	pthread_mutex_unlock(&c->mu);
}

static void
c_create_done(int rc, const char *value, const void *data)
{
	Contender  *c = (Contender *) data;

	c_created(c, rc, value, c->created, sizeof(c->created));
}

static void
c_lease_done(int rc, const char *value, const void *data)
{
	Contender  *c = (Contender *) data;

	c_created(c, rc, value, c->lease, sizeof(c->lease));
}

/* the lease list's child watch (semaphore mode) */
static void
c_lease_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	Contender  *c = (Contender *) ctx;

	if (type == ZOO_SESSION_EVENT)
		return;
	pthread_mutex_lock(&c->mu);
	c->lease_event = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void
c_children_done(int rc, const struct String_vector *sv, const void *data)
{
	Contender  *c = (Contender *) data;

	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < c->nkids; i++)
		free(c->kids[i]);
	free(c->kids);
	c->kids = NULL;
	c->nkids = 0;
	if (rc == ZOK && sv->count > 0)
	{
		c->kids = malloc(sizeof(char *) * sv->count);
		for (int i = 0; i < sv->count; i++)
			c->kids[i] = strdup(sv->data[i]);
		c->nkids = sv->count;
	}
	c_done(c, rc);
	pthread_mutex_unlock(&c->mu);
}

/* a reply whose outcome the caller reads itself (not a failure count) */
static void
c_answered(Contender *c, int *field, int rc)
{
	pthread_mutex_lock(&c->mu);
	*field = rc;
	c->pending--;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void
c_exists_done(int rc, const struct Stat *st, const void *data)
{
	Contender  *c = (Contender *) data;

	c_answered(c, &c->exists_rc, rc);
}

static void
c_own_exists_done(int rc, const struct Stat *st, const void *data)
{
	Contender  *c = (Contender *) data;

	c_answered(c, &c->own_exists_rc, rc);
}

static void
c_sync_done(int rc, const char *value, const void *data)
{
	Contender  *c = (Contender *) data;

	c_answered(c, &c->sync_rc, rc);
}

/*
 * The one node watcher (predecessor and own node).  An event for a node
 * that is neither the predecessor watched now nor the own node of this
 * cycle (a watch left from an earlier wait, or the own watch firing at
 * the delete) is ignored.
 */
static void
c_node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	Contender  *c = (Contender *) ctx;

	if (type == ZOO_SESSION_EVENT || path == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	if (c->created[0] != '\0' && strcmp(path, c->created) == 0)
	{
		c->own_armed = 0;
		c->own_event = 1;
		if (type == ZOO_DELETED_EVENT)
		{
			c->own_deleted = 1;
			if (!c->pred_deleted)
				c->own_deleted_first = 1;
		}
	}
	else if (c->watched[0] != '\0' && strcmp(path, c->watched) == 0)
	{
		c->pred_event = 1;
		if (type == ZOO_DELETED_EVENT)
			c->pred_deleted = 1;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void
c_delete_done(int rc, const void *data)
{
	Contender  *c = (Contender *) data;

	pthread_mutex_lock(&c->mu);
	if (rc != ZOK)
		c->failures++;
	c->outstanding_deletes--;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/* wait (mutex held) until cond() or stopping; false if stopping */
static int
c_wait(Contender *c, int (*cond) (Contender *))
{
	while (!cond(c))
	{
		struct timespec dl;

		if (atomic_load(&stopping))
			return 0;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_nsec += 100 * 1000 * 1000;
		if (dl.tv_nsec >= 1000000000)
		{
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&c->cv, &c->mu, &dl);
	}
	return 1;
}

static int
c_no_pending(Contender *c)
{
	return c->pending == 0;
}

static int
c_pred_fired(Contender *c)
{
	return c->pred_event;
}

static int
c_lease_fired(Contender *c)
{
	return c->lease_event;
}

static int
c_any_fired(Contender *c)
{
	return c->pred_event || c->own_event;
}

static int
c_connected(Contender *c)
{
	return c->connected != 0;
}

static unsigned
c_seq(const char *name)
{
	size_t		n = strlen(name);

	return n >= 10 ? (unsigned) strtoul(name + n - 10, NULL, 10) : 0;
}

static void
c_fail(Contender *c, const char *what)
{
	fprintf(stderr, "rawzk: thread %d: %s\n", c->id, what);
	exit(1);
}

/*
 * Decide from the last listing: the greatest lower node is the
 * predecessor (its full path into c->watched; *lower = how many nodes are
 * lower).  Returns 0 when nothing is lower (the lock is held).
 */
static int
c_predecessor(Contender *c, int *lower)
{
	unsigned	own = c_seq(c->created),
				best = 0;
	int			found = 0;
	const char *pred = NULL;

	*lower = 0;
	for (int i = 0; i < c->nkids; i++)
	{
		unsigned	s;

		if (strstr(c->kids[i], "__WRIT__") == NULL)
			continue;
		s = c_seq(c->kids[i]);
		if ((int) (s - own) >= 0)
			continue;
		(*lower)++;
		if (!found || (int) (s - best) > 0)
		{
			best = s;
			pred = c->kids[i];
			found = 1;
		}
	}
	if (!found)
		return 0;
	snprintf(c->watched, sizeof(c->watched), "%s/%s", c->parent, pred);
	return 1;
}

/*
 * The requests just sent (rc: how the last send went) are answered: take
 * the mutex back and wait for every reply; false if stopping.
 */
static int
c_replies(Contender *c, int rc, const char *what)
{
	if (rc != ZOK)
		c_fail(c, zerror(rc));
	pthread_mutex_lock(&c->mu);
	if (!c_wait(c, c_no_pending))
		return 0;
	if (c->failures)
		c_fail(c, what);
	return 1;
}

/* send getChildren(parent) and wait for it (mutex held); false if stopping */
static int
c_list(Contender *c)
{
	int			rc;

	c->pending = 1;
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(&listings, 1);
	rc = zoo_aget_children(c->zh, c->parent, 0, c_children_done, c);
	return c_replies(c, rc, "listing failed");
}

/* ns from a to b */
static long
ns_between(const struct timespec *a, const struct timespec *b)
{
	return (b->tv_sec - a->tv_sec) * 1000000000L + (b->tv_nsec - a->tv_nsec);
}

/*
 * Sleep gap_ns from now: to 100 us before the deadline (the thread's timer
 * slack is 1 ns, but a wake-up still comes some tens of microseconds late
 * on this VM), then spin up to it, so that the gap is what was asked and
 * not more; record how long it really took.
 */
#define GAP_SPIN_NS 100000L
static void
sleep_gap(void)
{
	struct timespec t0,
				dl,
				t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (gap_ns > GAP_SPIN_NS)
	{
		dl = t0;
		dl.tv_nsec += gap_ns - GAP_SPIN_NS;
		dl.tv_sec += dl.tv_nsec / 1000000000L;
		dl.tv_nsec %= 1000000000L;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &dl, NULL) == EINTR)
			;
	}
	do
		clock_gettime(CLOCK_MONOTONIC, &t1);
	while (ns_between(&t0, &t1) < gap_ns);
	atomic_fetch_add(&gaps, 1);
	atomic_fetch_add(&gap_total_ns, ns_between(&t0, &t1));
}

/*
 * Take the lock on c->parent (mutex held on entry and on return): create
 * and listing back to back, then wait for the turn as zklock does.
 * Returns 0 when stopping (the own node, if any, is left in c->created).
 */
static int
c_acquire(Contender *c, const char *prefix, const char *data)
{
	int			rc,
				lower = 0;

	c->pending = 2;
	c->created[0] = '\0';
	c->own_armed = c->own_event = c->own_deleted = 0;
	c->own_deleted_first = 0;
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(&listings, 1);
	rc = zoo_acreate(c->zh, prefix, data, strlen(data), &ZOO_OPEN_ACL_UNSAFE,
					 ZOO_EPHEMERAL_SEQUENTIAL, c_create_done, c);
	if (rc == ZOK)
		rc = zoo_aget_children(c->zh, c->parent, 0, c_children_done, c);
	if (!c_replies(c, rc, "create or listing failed"))
		return 0;

	/* wait for the turn: decide, watch, list again */
	while (c_predecessor(c, &lower))
	{
		int			arm_own = own_watch && lower == 1 && !c->own_armed;

		c->pred_event = c->pred_deleted = 0;
		c->own_event = c->own_deleted = c->own_deleted_first = 0;
		c->pending = arm_own ? 2 : 1;
		pthread_mutex_unlock(&c->mu);
		rc = ZOK;
		if (arm_own)
			rc = zoo_awexists(c->zh, c->created, c_node_watcher, c,
							  c_own_exists_done, c);
		if (rc == ZOK)
			rc = zoo_awexists(c->zh, c->watched, c_node_watcher, c,
							  c_exists_done, c);
		if (rc != ZOK)
			c_fail(c, zerror(rc));
		pthread_mutex_lock(&c->mu);
		if (!c_wait(c, c_no_pending))
			return 0;
		if (arm_own)
		{
			if (c->own_exists_rc != ZOK)
				c_fail(c, "own node gone while waiting");
			if (!c->own_event)
				c->own_armed = 1;
		}
		if (c->exists_rc == ZNONODE)
		{
			/* the predecessor is gone already: list again at once */
			c->watched[0] = '\0';
			if (!c_list(c))
				return 0;
			continue;
		}
		if (c->exists_rc != ZOK)
			c_fail(c, zerror(c->exists_rc));
		if (c->own_armed || (arm_own && c->own_event))
		{
			/*
			 * Own watch armed and one contender ahead: the predecessor's
			 * NodeDeleted, with no NodeDeleted for the own node before it,
			 * is the grant; any other event means list again.
			 */
			if (!c_wait(c, c_any_fired))
				return 0;
			if (c->pred_deleted && !c->own_deleted_first && !c->own_deleted)
			{
				atomic_fetch_add(&shortcuts, 1);
				break;
			}
			if (c->own_deleted)
				c_fail(c, "own node deleted while waiting");
		}
		else if (!c_wait(c, c_pred_fired))
			return 0;
		/* always list again: a predecessor may have given up */
		c->watched[0] = '\0';
		if (!c_list(c))
			return 0;
	}
	c->watched[0] = '\0';
	return 1;
}

/* send the delete of path without waiting for it (mutex held) */
static void
c_delete_async(Contender *c, const char *path)
{
	char		copy[512];
	int			rc;

	while (c->outstanding_deletes > 100)
		pthread_cond_wait(&c->cv, &c->mu);
	c->outstanding_deletes++;
	snprintf(copy, sizeof(copy), "%s", path);
	pthread_mutex_unlock(&c->mu);
	rc = zoo_adelete(c->zh, copy, -1, c_delete_done, c);
	if (rc != ZOK)
		c_fail(c, zerror(rc));
	pthread_mutex_lock(&c->mu);
}

/*
 * Semaphore mode, with the mutex (c->created) held, as zklock does it
 * (src/acquire/semaphore.c).  optimistic: create the lease under c->leases and
 * list the leases (no watch), and send the mutex's delete right behind
 * them; when they number more than the permits, give the lease back and
 * return 2 (the caller queues on the mutex again and comes back with
 * optimistic = 0).  Otherwise: create and list with a child watch, and
 * while there is no room, wait for the watch and list again, the mutex
 * kept (as Curator does); then send the mutex's delete.  Returns 1 when
 * the lease holds, 0 when stopping.
 */
static int
c_lease(Contender *c, const char *prefix, const char *data, int optimistic)
{
	int			rc;

	c->pending = 2;
	c->lease[0] = '\0';
	c->lease_event = 0;
	pthread_mutex_unlock(&c->mu);
	rc = zoo_acreate(c->zh, prefix, data, strlen(data), &ZOO_OPEN_ACL_UNSAFE,
					 ZOO_EPHEMERAL_SEQUENTIAL, c_lease_done, c);
	if (rc == ZOK && optimistic)
		rc = zoo_aget_children(c->zh, c->leases, 0, c_children_done, c);
	else if (rc == ZOK)
		rc = zoo_awget_children(c->zh, c->leases, c_lease_watcher, c,
								c_children_done, c);
	if (rc != ZOK)
		c_fail(c, zerror(rc));
	pthread_mutex_lock(&c->mu);
	if (optimistic)
	{
		/* the mutex's delete, right behind the create and the listing */
		c_delete_async(c, c->created);
		c->created[0] = '\0';
		c->own_armed = 0;
	}
	for (;;)
	{
		if (!c_wait(c, c_no_pending))
			return 0;
		if (c->failures)
			c_fail(c, "lease create or listing failed");
		if (c->nkids <= sem_permits)
			break;
		if (optimistic)
		{
			atomic_fetch_add(&requeues, 1);
			c_delete_async(c, c->lease);
			c->lease[0] = '\0';
			return 2;
		}
		atomic_fetch_add(&lease_waits, 1);
		if (c->nkids == sem_permits + 1)
			atomic_fetch_add(&lease_waits_at_one, 1);
		if (!c_wait(c, c_lease_fired))
			return 0;
		c->lease_event = 0;
		c->pending = 1;
		pthread_mutex_unlock(&c->mu);
		rc = zoo_awget_children(c->zh, c->leases, c_lease_watcher, c,
								c_children_done, c);
		if (rc != ZOK)
			c_fail(c, zerror(rc));
		pthread_mutex_lock(&c->mu);
	}
	if (!optimistic)
	{
		/* the mutex only guards the count: let the next one in */
		c_delete_async(c, c->created);
		c->created[0] = '\0';
		c->own_armed = 0;
	}
	return 1;
}

static void *
c_main(void *arg)
{
	Contender  *c = (Contender *) arg;
	char		prefix[600],
				lease_prefix[600],
				data[128];
	int			rc,
				holding = 0,
				most = sem_permits > 0 ? sem_permits : 1;

	snprintf(prefix, sizeof(prefix),
			 "%s/_c_3f2a6c1e-8a4b-4c7d-9e0f-%012d-__WRIT__", c->parent, c->id);
	snprintf(lease_prefix, sizeof(lease_prefix),
			 "%s/_c_3f2a6c1e-8a4b-4c7d-9e0f-%012d-lease-", c->leases, c->id);
	memset(data, 'x', sizeof(data));
	snprintf(data, sizeof(data),
			 "rawzk host=bench port=0 sysid=0 pid=%d db=none role=none application_name=rawzk ",
			 (int) getpid());
	data[120] = '\0';

	if (gap_ns > 0)
		(void) prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	pthread_mutex_lock(&c->mu);
	while (!atomic_load(&stopping))
	{
		const char *held;
		long		started = tail_file ? ns_now() : 0;

		if (!c_acquire(c, prefix, data))
			break;
		if (sem_permits > 0)
		{
			int			r = c_lease(c, lease_prefix, data, 1);

			/* no room: queue once more, and keep the mutex this time */
			if (r == 2 && c_acquire(c, prefix, data))
				r = c_lease(c, lease_prefix, data, 0);
			if (r != 1)
				break;
		}
		held = sem_permits > 0 ? c->lease : c->created;
		if (atomic_fetch_add(&holders, 1) >= most)
			c_fail(c, sem_permits > 0 ? "more holders than permits" :
				   "two holders at once");
		holding = 1;

		/*
		 * Held: the commit check.  sync(parent) makes the server this
		 * session reads from catch up with the leader.  With the own
		 * watch armed, the sync alone: the server delivers a NodeDeleted
		 * of the own node before the sync's reply.  Without it, sync and
		 * exists(own) back to back, one round trip.  (A lease has no own
		 * watch: sync and exists.)
		 */
		if (check_at_commit)
		{
			int			with_exists = sem_permits > 0 || !c->own_armed;

			c->pending = with_exists ? 2 : 1;
			pthread_mutex_unlock(&c->mu);
			rc = zoo_async(c->zh, c->parent, c_sync_done, c);
			if (rc == ZOK && with_exists)
				rc = zoo_aexists(c->zh, held, 0, c_own_exists_done, c);
			if (rc != ZOK)
				c_fail(c, zerror(rc));
			pthread_mutex_lock(&c->mu);
			if (!c_wait(c, c_no_pending))
				goto out;
			if (c->sync_rc != ZOK)
				c_fail(c, zerror(c->sync_rc));
			if (with_exists ? c->own_exists_rc != ZOK : c->own_deleted)
				c_fail(c, "own node gone at the check");
		}
		atomic_fetch_add(&grants, 1);
		atomic_fetch_sub(&holders, 1);	/* before the delete is sent */
		holding = 0;
		/* the own watch, if armed, fires at this delete: ignored */
		c_delete_async(c, held);
		if (tail_file && c->ntail < TAIL_MAX)
		{
			c->tail[2 * c->ntail] = started;
			c->tail[2 * c->ntail + 1] = ns_now();
			c->ntail++;
		}
		c->created[0] = '\0';
		c->lease[0] = '\0';
		c->own_armed = 0;
		if (gap_ns > 0)
		{
			pthread_mutex_unlock(&c->mu);
			sleep_gap();
			pthread_mutex_lock(&c->mu);
		}
	}
out:
	/* stopped while waiting: give the own nodes up, as a cancelled waiter */
	if (holding)
		atomic_fetch_sub(&holders, 1);
	if (c->lease[0] != '\0')
		c_delete_async(c, c->lease);
	if (c->created[0] != '\0')
		c_delete_async(c, c->created);
	c->lease[0] = c->created[0] = '\0';
	while (c->outstanding_deletes > 0 || c->pending > 0)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static int
run_recipe(const char *hosts, const char *parent, double warmup, double seconds)
{
	int			n = getenv("RAWZK_THREADS") ? atoi(getenv("RAWZK_THREADS")) : 1;
	Contender  *cs;
	long		g0,
				g1;
	double		t_start,
				t_end;
	int			failures = 0;

	if (getenv("RAWZK_CHECK"))
		check_at_commit = atoi(getenv("RAWZK_CHECK"));
	if (getenv("RAWZK_OWNWATCH"))
		own_watch = atoi(getenv("RAWZK_OWNWATCH"));
	if (getenv("RAWZK_GAP_US"))
		gap_ns = (long) (atof(getenv("RAWZK_GAP_US")) * 1000.0);
	if (getenv("RAWZK_SEM"))
		sem_permits = atoi(getenv("RAWZK_SEM"));
	tail_file = getenv("RAWZK_TAIL_FILE");
	if (sem_permits > 0)
	{
		/* Curator's semaphore layout: PARENT/locks, PARENT/leases */
		static char locks[512],
					leases[512];

		snprintf(locks, sizeof(locks), "%s/locks", parent);
		snprintf(leases, sizeof(leases), "%s/leases", parent);
		lease_parent = leases;
		mutex_parent = locks;
	}
	if (n < 1 || n > 256)
	{
		fprintf(stderr, "rawzk: RAWZK_THREADS must be 1..256\n");
		return 2;
	}
	cs = calloc(n, sizeof(Contender));
	for (int i = 0; i < n; i++)
	{
		Contender  *c = &cs[i];
		struct timespec dl;

		c->id = i;
		c->hosts = hosts;
		if (tail_file && (c->tail = malloc(2 * TAIL_MAX * sizeof(long))) == NULL)
		{
			perror("malloc");
			return 1;
		}
		c->parent = mutex_parent ? mutex_parent : parent;
		if (lease_parent)
			snprintf(c->leases, sizeof(c->leases), "%s", lease_parent);
		pthread_mutex_init(&c->mu, NULL);
		pthread_cond_init(&c->cv, NULL);
		c->zh = zookeeper_init(hosts, c_session_watcher, 10000, NULL, c, 0);
		if (!c->zh)
		{
			perror("zookeeper_init");
			return 1;
		}
		zoo_set_servers_resolution_delay(c->zh, -1);	/* as zklock does */
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 15;
		pthread_mutex_lock(&c->mu);
		while (!c_connected(c))
			if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) == ETIMEDOUT)
			{
				fprintf(stderr, "rawzk: no session with %s\n", hosts);
				return 1;
			}
		pthread_mutex_unlock(&c->mu);
		if (c->connected < 0)
		{
			fprintf(stderr, "rawzk: session expired at once\n");
			return 1;
		}
		if (i == 0)
		{
			int			rc = zoo_create(c->zh, parent, "", 0, &ZOO_OPEN_ACL_UNSAFE,
										0, NULL, 0);

			if (rc != ZOK && rc != ZNODEEXISTS)
				die("create parent", rc);
			for (int k = 0; k < 2 && lease_parent; k++)
			{
				rc = zoo_create(c->zh, k ? lease_parent : mutex_parent, "", 0,
								&ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
				if (rc != ZOK && rc != ZNODEEXISTS)
					die("create semaphore parent", rc);
			}
		}
	}
	for (int i = 0; i < n; i++)
		pthread_create(&cs[i].thread, NULL, c_main, &cs[i]);

	usleep((useconds_t) (warmup * 1e6));
	g0 = atomic_load(&grants);
	t_start = now();
	printf("window-start\n");
	fflush(stdout);
	usleep((useconds_t) (seconds * 1e6));
	g1 = atomic_load(&grants);
	t_end = now();
	printf("window-end\n");
	fflush(stdout);
	if (getenv("BENCH_SAMPLER"))
	{
		int			ch;

		while ((ch = getchar()) != EOF && ch != '\n')
			;
	}
	atomic_store(&stopping, 1);
	for (int i = 0; i < n; i++)
	{
		pthread_join(cs[i].thread, NULL);
		failures += cs[i].failures;
		zookeeper_close(cs[i].zh);
	}
	if (failures)
		die("recipe", ZSYSTEMERROR);
	if (tail_file)
	{
		/* the cycles started inside the window, and the reconnects */
		FILE	   *f = fopen(tail_file, "w");
		long		w0 = (long) (t_start * 1e9),
					w1 = (long) (t_end * 1e9);
		int			reconnects = 0;

		if (f == NULL)
		{
			perror(tail_file);
			return 1;
		}
		for (int i = 0; i < n; i++)
		{
			reconnects += cs[i].reconnects;
			for (long k = 0; k < cs[i].ntail; k++)
				if (cs[i].tail[2 * k] >= w0 && cs[i].tail[2 * k] <= w1)
					fprintf(f, "%ld %ld\n", cs[i].tail[2 * k], cs[i].tail[2 * k + 1]);
		}
		fclose(f);
		printf("reconnects=%d ", reconnects);
	}
	printf("mode=recipe threads=%d check=%d ownwatch=%d sem=%d requeues=%ld "
		   "lease_waits=%ld lease_waits_at_one=%ld gap_us=%.1f listings=%ld "
		   "shortcuts=%ld cycles=%ld total=%ld seconds=%.3f us_per_cycle=%.1f\n",
		   n, check_at_commit, own_watch, sem_permits, atomic_load(&requeues),
		   atomic_load(&lease_waits),
		   atomic_load(&lease_waits_at_one),
		   atomic_load(&gaps) ? atomic_load(&gap_total_ns) / 1e3 / atomic_load(&gaps) : 0.0,
		   atomic_load(&listings),
		   atomic_load(&shortcuts), g1 - g0, atomic_load(&grants),
		   t_end - t_start,
		   g1 > g0 ? 1e6 * (t_end - t_start) / (g1 - g0) : 0.0);
	return 0;
}

/* ---- set mode: many locks at once, as zk_lock_exclusive(text[]) ---- */

#define SET_BATCH 1000


static void
await_pending(void)
{
	pthread_mutex_lock(&mu);
	while (pending > 0)
		pthread_cond_wait(&cv, &mu);
	if (failures)
		die("set round", ZSYSTEMERROR);
	pthread_mutex_unlock(&mu);
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

static int
run_set(zhandle_t *zh, const char *parent, int n, int rounds, const char *data)
{
	char	  **parents = calloc(n, sizeof(char *));
	char	  **prefixes = calloc(n, sizeof(char *));
	char	   *names = calloc(n, 512);
	zoo_op_t   *ops = calloc(SET_BATCH, sizeof(zoo_op_t));
	zoo_op_result_t *results = calloc(n, sizeof(zoo_op_result_t));
	double	   *acq = calloc(rounds, sizeof(double));
	double	   *rel = calloc(rounds, sizeof(double));

	for (int i = 0; i < n; i++)
	{
		int			rc;

		parents[i] = malloc(strlen(parent) + 16);
		sprintf(parents[i], "%s/l%05d", parent, i);
		prefixes[i] = malloc(strlen(parents[i]) + 64);
		sprintf(prefixes[i], "%s/_c_3f2a6c1e-8a4b-4c7d-9e0f-1a2b3c4d5e6f-__WRIT__",
				parents[i]);
		/* pipelined: the bench runs this once per round, parents kept */
		pthread_mutex_lock(&mu);
		pending++;
		pthread_mutex_unlock(&mu);
		rc = zoo_acreate(zh, parents[i], "", 0, &ZOO_OPEN_ACL_UNSAFE, 0,
						 parent_completion, NULL);
		if (rc != ZOK)
			die("create lock parent", rc);
	}
	await_pending();
	for (int r = 0; r < rounds; r++)
	{
		double		t0 = now();

		for (int first = 0; first < n; first += SET_BATCH)
		{
			int			k = n - first < SET_BATCH ? n - first : SET_BATCH;
			int			rc;

			for (int j = 0; j < k; j++)
				zoo_create_op_init(&ops[j], prefixes[first + j], data,
								   strlen(data), &ZOO_OPEN_ACL_UNSAFE,
								   ZOO_EPHEMERAL_SEQUENTIAL,
								   names + (size_t) (first + j) * 512, 512);
			pthread_mutex_lock(&mu);
			pending += 1 + k;
			pthread_mutex_unlock(&mu);
			rc = zoo_amulti(zh, k, ops, results + first, void_completion, NULL);
			if (rc != ZOK)
				die("amulti", rc);
			for (int j = 0; j < k; j++)
				if ((rc = zoo_aget_children(zh, parents[first + j], 0,
											children_completion, NULL)) != ZOK)
					die("aget_children", rc);
		}
		await_pending();
		acq[r] = now() - t0;

		t0 = now();
		for (int first = 0; first < n; first += SET_BATCH)
		{
			int			k = n - first < SET_BATCH ? n - first : SET_BATCH;
			int			rc;

			for (int j = 0; j < k; j++)
				zoo_delete_op_init(&ops[j], names + (size_t) (first + j) * 512, -1);
			pthread_mutex_lock(&mu);
			pending++;
			pthread_mutex_unlock(&mu);
			if ((rc = zoo_amulti(zh, k, ops, results + first, void_completion,
								 NULL)) != ZOK)
				die("amulti delete", rc);
		}
		await_pending();
		rel[r] = now() - t0;
	}
	qsort(acq, rounds, sizeof(double), cmp_double);
	qsort(rel, rounds, sizeof(double), cmp_double);
	printf("mode=set locks=%d rounds=%d acquire_ms=%.1f release_ms=%.1f\n",
		   n, rounds, 1000 * acq[rounds / 2], 1000 * rel[rounds / 2]);
	return 0;
}

int
main(int argc, char **argv)
{
	const char *mode, *hosts, *parent;
	double		warmup, seconds, t0, t_start = 0, t_end;
	long		cycles = 0,
				total = 0;
	int			measuring = 0;
	zhandle_t  *zh;
	char		prefix[512], created[512], data[128];
	int			rc;
	struct timespec deadline;

	if (argc != 6)
	{
		fprintf(stderr, "usage: rawzk sync|pipelined|read|write|recipe HOSTS PARENT WARMUP_S SECONDS\n"
				"       rawzk set HOSTS PARENT N ROUNDS\n");
		return 2;
	}
	mode = argv[1];
	hosts = argv[2];
	parent = argv[3];
	warmup = atof(argv[4]);
	seconds = atof(argv[5]);
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	if (strcmp(mode, "recipe") == 0)
		return run_recipe(hosts, parent, warmup, seconds);

	zh = zookeeper_init(hosts, watcher, 10000, NULL, NULL, 0);
	if (!zh)
	{
		perror("zookeeper_init");
		return 1;
	}
	/*
	 * By default the library re-resolves the host list (getaddrinfo: a
	 * netlink round trip to the kernel) every time its I/O thread polls.
	 * RAWZK_RESOLVE_DELAY=-1 turns that off, as an application may.
	 */
	if (getenv("RAWZK_RESOLVE_DELAY"))
		zoo_set_servers_resolution_delay(zh, atoi(getenv("RAWZK_RESOLVE_DELAY")));
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 15;
	pthread_mutex_lock(&mu);
	while (connected == 0)
		if (pthread_cond_timedwait(&cv, &mu, &deadline) == ETIMEDOUT)
		{
			fprintf(stderr, "rawzk: no session with %s\n", hosts);
			return 1;
		}
	pthread_mutex_unlock(&mu);

	/* the lock parent (persistent, so the server never reaps it under us) */
	rc = zoo_create(zh, parent, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
	if (rc != ZOK && rc != ZNODEEXISTS)
		die("create parent", rc);

	snprintf(prefix, sizeof(prefix),
			 "%s/_c_3f2a6c1e-8a4b-4c7d-9e0f-1a2b3c4d5e6f-__WRIT__", parent);
	memset(data, 'x', sizeof(data));
	snprintf(data, sizeof(data),
			 "rawzk host=bench port=0 sysid=0 pid=%d db=none role=none application_name=rawzk ",
			 (int) getpid());
	data[120] = '\0';

	if (strcmp(mode, "set") == 0)
		return run_set(zh, parent, atoi(argv[4]), atoi(argv[5]), data);

	t0 = now();
	for (;;)
	{
		double		t = now();

		if (!measuring && t - t0 >= warmup)
		{
			measuring = 1;
			cycles = 0;
			t_start = t;
			printf("window-start\n");	/* for an outside CPU sampler */
			fflush(stdout);
		}
		if (measuring && t - t_start >= seconds)
		{
			printf("window-end\n");
			fflush(stdout);
			if (getenv("BENCH_SAMPLER"))
			{
				/* hold still until the sampler has read our CPU time */
				int			c;

				while ((c = getchar()) != EOF && c != '\n')
					;
			}
			break;
		}

		if (strcmp(mode, "sync") == 0)
		{
			rc = zoo_create(zh, prefix, data, strlen(data), &ZOO_OPEN_ACL_UNSAFE,
							ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof(created));
			if (rc != ZOK)
				die("create", rc);
			rc = zoo_delete(zh, created, -1);
			if (rc != ZOK)
				die("delete", rc);
		}
		else if (strcmp(mode, "pipelined") == 0)
		{
			pthread_mutex_lock(&mu);
			pending = 2;
			pthread_mutex_unlock(&mu);
			rc = zoo_acreate(zh, prefix, data, strlen(data), &ZOO_OPEN_ACL_UNSAFE,
							 ZOO_EPHEMERAL_SEQUENTIAL, create_completion, created);
			if (rc != ZOK)
				die("acreate", rc);
			rc = zoo_aget_children(zh, parent, 0, children_completion, NULL);
			if (rc != ZOK)
				die("aget_children", rc);
			pthread_mutex_lock(&mu);
			while (pending > 0)
				pthread_cond_wait(&cv, &mu);
			if (failures)
				die("pipelined cycle", ZSYSTEMERROR);
			/* never let unanswered deletes pile up without bound */
			while (outstanding_deletes > 100)
				pthread_cond_wait(&cv, &mu);
			outstanding_deletes++;
			pthread_mutex_unlock(&mu);
			rc = zoo_adelete(zh, created, -1, delete_completion, NULL);
			if (rc != ZOK)
				die("adelete", rc);
		}
		else if (strcmp(mode, "read") == 0)
		{
			struct Stat st;

			rc = zoo_exists(zh, parent, 0, &st);
			if (rc != ZOK)
				die("exists", rc);
		}
		else if (strcmp(mode, "write") == 0)
		{
			rc = zoo_set(zh, parent, "x", 1, -1);
			if (rc != ZOK)
				die("set", rc);
		}
		else
		{
			fprintf(stderr, "rawzk: unknown mode %s\n", mode);
			return 2;
		}
		cycles++;
		total++;
	}
	t_end = now();

	/* let the last deletes finish before the session closes */
	pthread_mutex_lock(&mu);
	while (outstanding_deletes > 0)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	if (failures)
		die("delete", ZSYSTEMERROR);

	printf("mode=%s cycles=%ld total=%ld seconds=%.3f us_per_cycle=%.1f\n",
		   mode, cycles, total, t_end - t_start, 1e6 * (t_end - t_start) / cycles);
	zookeeper_close(zh);
	return 0;
}
