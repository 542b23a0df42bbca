/*-------------------------------------------------------------------------
 *
 * threads.c
 *	  Making sure a backend can start libzookeeper's threads before it asks
 *	  the library to.
 *
 * src/session/threads.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <signal.h>

#include "session/session_int.h"

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
 * makes that a narrow race instead of a certainty.)  The third thread,
 * the reply nudge's, is started after them and is optional: the session
 * works without it.
 */
void
zks_check_threads_available(void)
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
