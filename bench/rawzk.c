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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zookeeper.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int connected = 0;
static int pending = 0;			/* replies awaited in pipelined mode */
static int outstanding_deletes = 0;
static int failures = 0;

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
die(const char *what, int rc)
{
	fprintf(stderr, "rawzk: %s: %s\n", what, zerror(rc));
	exit(1);
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
		fprintf(stderr, "usage: rawzk sync|pipelined|read|write HOSTS PARENT WARMUP_S SECONDS\n");
		return 2;
	}
	mode = argv[1];
	hosts = argv[2];
	parent = argv[3];
	warmup = atof(argv[4]);
	seconds = atof(argv[5]);

	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
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
