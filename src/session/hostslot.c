/*-------------------------------------------------------------------------
 *
 * hostslot.c
 *	  The configuration file's zklock.hosts, published by the postmaster
 *	  in shared memory, so that a backend sitting idle with a lock follows
 *	  a reload without a command (zklock in shared_preload_libraries).
 *
 * Why.  PostgreSQL reads a reloaded configuration file in a backend only
 * before its next command: a backend holding a session lock and sending
 * nothing (a migration guard, a leader's lock) would stay on the old
 * server list while an operator replaces the servers of a static
 * ensemble one by one, until the last old server stops and the session
 * expires.  The postmaster reads the file at every reload, and its
 * zklock.hosts assign hook writes the value here, with a generation that
 * grows at every change.  The session's nudge thread, which ticks while
 * the backend holds a lock (the loss clock's heartbeat, every 0.3 session
 * timeouts), reads the generation, and when it changed and the backend's
 * own zklock.hosts was the file's, gives the new value to the session
 * (session/ensemble.c): zoo_set_servers on the same session.  With the
 * slot, the thread also ticks at that pace while the backend holds
 * nothing (session/nudge.c): a backend waiting in a lock call must follow
 * too, or its place in the queue goes with its old servers.  A value set
 * by SET, ALTER ROLE or ALTER DATABASE differs from the file's, and is
 * never overridden.
 *
 * One writer, the postmaster (its assign hook runs only there while the
 * server runs, and in the postmaster only when the slot exists); readers
 * in every backend, on any thread: the change-counter protocol of
 * cursessions.c (odd while written, readers retry a copy a write
 * overlapped), with __atomic fences and memcpy only, nothing of
 * PostgreSQL on the reading side.
 *
 * src/session/hostslot.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "session/session.h"
#include "session/session_int.h"
#include "zklock.h"

typedef struct HostsSlot
{
	uint32		changecount;	/* odd while written; __atomic only */
	uint64		generation;		/* grows at every change of the value */
	bool		fits;			/* false: the value is longer than hosts */
	char		hosts[ZKHS_HOSTS_MAX];
} HostsSlot;

static HostsSlot *slot = NULL;
static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

static void
write_value(const char *value)
{
	size_t		len = strlen(value);

	__atomic_store_n(&slot->changecount,
					 __atomic_load_n(&slot->changecount, __ATOMIC_RELAXED) + 1,
					 __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	slot->fits = len < sizeof(slot->hosts);
	if (slot->fits)
		memcpy(slot->hosts, value, len + 1);
	else
		slot->hosts[0] = '\0';
	__atomic_store_n(&slot->generation,
					 __atomic_load_n(&slot->generation, __ATOMIC_RELAXED) + 1,
					 __ATOMIC_RELAXED);
	__atomic_store_n(&slot->changecount,
					 __atomic_load_n(&slot->changecount, __ATOMIC_RELAXED) + 1,
					 __ATOMIC_RELEASE);
}

static void
hostslot_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	RequestAddinShmemSpace(sizeof(HostsSlot));
}

static void
hostslot_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup)
		prev_shmem_startup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	slot = ShmemInitStruct("zklock hosts", sizeof(HostsSlot), &found);
	if (!found)
	{
		memset(slot, 0, sizeof(HostsSlot));
		/* the value the postmaster read before shared memory existed */
		write_value(zklock_hosts ? zklock_hosts : "");
	}
	LWLockRelease(AddinShmemInitLock);
}

void
zkhs_init(void)
{
	/* shared memory can only be set aside while the server starts */
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = hostslot_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = hostslot_shmem_startup;
}

/* zklock.hosts' assign hook: the postmaster publishes a changed value. */
void
zkhs_publish(const char *value)
{
	if (IsUnderPostmaster || slot == NULL || value == NULL)
		return;
	if (slot->fits && strcmp(slot->hosts, value) == 0)
		return;					/* a reload that left it as it was */
	write_value(value);
}

/* The value's generation now, 0 without the slot (any thread). */
uint64
zkhs_generation(void)
{
	if (slot == NULL)
		return 0;
	return __atomic_load_n(&slot->generation, __ATOMIC_ACQUIRE);
}

/*
 * Copy the value (buf: ZKHS_HOSTS_MAX bytes) and its generation (any
 * thread).  False without the slot, or for a value too long for it.
 */
bool
zkhs_read(char *buf, uint64 *generation)
{
	if (slot == NULL)
		return false;
	for (int tries = 0; tries < 1000; tries++)
	{
		uint32		before = __atomic_load_n(&slot->changecount,
											 __ATOMIC_ACQUIRE);
		bool		fits;

		if (before & 1)
			continue;			/* a write is under way */
		memcpy(buf, slot->hosts, ZKHS_HOSTS_MAX);
		fits = slot->fits;
		*generation = slot->generation;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&slot->changecount, __ATOMIC_RELAXED) == before)
		{
			buf[ZKHS_HOSTS_MAX - 1] = '\0';
			return fits;
		}
	}
	return false;				/* the writer kept writing: next tick */
}
