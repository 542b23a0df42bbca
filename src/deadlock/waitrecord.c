/*-------------------------------------------------------------------------
 *
 * waitrecord.c
 *	  A zklock waiter's own wait record: what it publishes, and keeps up to
 *	  date, for the deadlock search of every member (deadlock.c).
 *
 * The record is an ephemeral node <zklock.root>/%waits/<session id> (see
 * deadlock.c for its part in the search).  This file makes it: it finds
 * the PostgreSQL-local edges into this waiter (the backends of its cluster
 * that wait for it in the lock manager), writes them with the beat when
 * they change or when another member wakes it (deadlock.c says when),
 * keeps a data watch on the record so that another member can wake it
 * by writing the record back, and wakes others so.
 *
 * src/deadlock/waitrecord.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "deadlock/deadlock.h"
#include "deadlock/waitrecord.h"
#include "zklock.h"

#define WAITS_DIR		"%waits"
#define WAKE_TRIES		3		/* writes of one wake, refused or not */

/* Has another member written our record since we last looked? */
bool
zkwr_woken(ZkdWait *w)
{
	return w->watching && zks_watch_state(w->record) != ZKS_WATCH_ARMED;
}

char *
zkwr_waits_parent(void)
{
	return psprintf("%s/%s", zklock_root, WAITS_DIR);
}

/*
 * The backends of this cluster that wait in PostgreSQL's lock manager for
 * us, directly or through other backends waiting there: our record's
 * "blocked" list, in ascending order, at most ZKW_MAX_BLOCKED of them.
 *
 * pg_blocking_pids() answers "whom does p wait for"; we need the reverse,
 * so it is asked of every backend that waits for a heavyweight lock now
 * (wait_event_info read without a lock, as pg_stat_activity does: a
 * backend that starts waiting right after is seen at the next check).  A
 * backend waiting for a zklock waits on its latch, not in the lock
 * manager, so a chain never runs through another zklock waiter.
 */
int
zkwr_local_blocked(int *out)
{
	uint32		nprocs = ProcGlobal->allProcCount;
	int		   *cand = palloc(sizeof(int) * Max(nprocs, 1));
	int		  **blockers = palloc0(sizeof(int *) * Max(nprocs, 1));
	int		   *nblockers = palloc0(sizeof(int) * Max(nprocs, 1));
	bool	   *reached = palloc0(sizeof(bool) * Max(nprocs, 1));
	int			ncand = 0;
	int			n = 0;
	bool		grew = true;

	for (uint32 i = 0; i < nprocs; i++)
	{
		PGPROC	   *proc = &ProcGlobal->allProcs[i];
		int			pid = *(volatile int *) &proc->pid;
		uint32		wei = *(volatile uint32 *) &proc->wait_event_info;

		if (pid != 0 && pid != MyProcPid &&
			(wei & 0xFF000000) == PG_WAIT_LOCK)
			cand[ncand++] = pid;
	}
	for (int c = 0; c < ncand; c++)
	{
		ArrayType  *arr;
		Datum	   *elems;
		int			nelems;

		CHECK_FOR_INTERRUPTS();
		arr = DatumGetArrayTypeP(DirectFunctionCall1(pg_blocking_pids,
													 Int32GetDatum(cand[c])));
		deconstruct_array(arr, INT4OID, 4, true, TYPALIGN_INT,
						  &elems, NULL, &nelems);
		blockers[c] = palloc(sizeof(int) * Max(nelems, 1));
		for (int j = 0; j < nelems; j++)
			blockers[c][j] = DatumGetInt32(elems[j]);
		nblockers[c] = nelems;
	}
	/* backwards from us: whoever waits for someone reached is reached */
	while (grew)
	{
		grew = false;
		for (int c = 0; c < ncand; c++)
		{
			if (reached[c])
				continue;
			for (int j = 0; j < nblockers[c] && !reached[c]; j++)
			{
				int			b = blockers[c][j];

				if (b == MyProcPid)
					reached[c] = true;
				for (int k = 0; k < ncand && !reached[c]; k++)
					if (reached[k] && cand[k] == b)
						reached[c] = true;
			}
			grew |= reached[c];
		}
	}
	for (int c = 0; c < ncand; c++)
		if (reached[c] && n < ZKW_MAX_BLOCKED)
			out[n++] = cand[c];
	/* ascending, so that an unchanged list compares equal */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && out[j - 1] > out[j]; j--)
		{
			int			t = out[j];

			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

/* Our record's data, with w's blocked list. */
static char *
format_own(ZkdWait *w, const char *resource, const char *node, ZkrMode mode,
		   const char *leases, int *len)
{
	ZkwRecord	r;
	ZkwBackend	me;
	size_t		size;
	char	   *data;

	memset(&r, 0, sizeof(r));
	zkd_self(&me);
	r.sysid = me.sysid;
	r.has_start = me.has_start;
	r.start = me.start;
	r.pid = me.pid;
	r.mode = mode;
	r.node = node;
	r.node_len = strlen(node);
	r.resource = resource;
	r.resource_len = strlen(resource);
	r.leases = leases;
	r.leases_len = leases ? strlen(leases) : 0;
	r.beat = w->beat;
	r.nblocked = w->nblocked;
	memcpy(r.blocked, w->blocked, sizeof(int) * w->nblocked);
	size = r.node_len + r.resource_len + r.leases_len + 192 +
		12 * ZKW_MAX_BLOCKED;
	data = palloc(size);
	*len = (int) zkw_format_record(&r, data, size);
	return data;
}

/*
 * Create the records' parent: a container, like a lock parent.  Returns
 * false if ZooKeeper would not have it now.
 */
static bool
make_waits_parent(ZkdWait *w, TimestampTz deadline)
{
	ZksRc		rc;

	w->req = zks_send_create(zkwr_waits_parent(), "", 0, ZKS_CONTAINER);
	rc = zks_wait(w->req, deadline);	/* an ERROR: zkd_wait_end */
	zks_done(w->req);
	w->req = NULL;
	return rc == ZKS_OK || rc == ZKS_NODEEXISTS;
}

/*
 * Keep the twin of our record (waitrecord.h) while our list of local
 * edges is not empty, with the record's data; delete it when the list
 * empties.  Written before the record, on the same connection, so that a
 * search that reads the record's new version (the search of our own that
 * follows, among them) finds the twin as new: ZooKeeper applies one
 * session's requests in order.  A twin whose delete is still on its way
 * lists edges that may be gone, as a record not yet rewritten does: a
 * search uses a twin only if it equals its owner's record as read in the
 * same search (waitsearch.c).  Its path is kept where the record's is.
 * Returns false if ZooKeeper would not have it now.
 */
static bool
write_twin(ZkdWait *w, const char *data, int len, MemoryContext keep,
		   TimestampTz deadline)
{
	ZksRc		rc;
	char	   *path;

	if (w->nblocked == 0)
	{
		if (w->twin != NULL)
			zks_delete_async(w->twin);
		w->twin = NULL;
		return true;
	}
	if (w->twin != NULL)
	{
		w->req = zks_send_set(w->twin, data, len, -1);
		rc = zks_wait(w->req, deadline);
		zks_done(w->req);
		w->req = NULL;
		if (rc != ZKS_NONODE)
			return rc == ZKS_OK;
		w->twin = NULL;			/* gone (a sweep): made again below */
	}
	/* (allocated first: once the create is claimed nothing may fail) */
	path = MemoryContextStrdup(keep,
							   psprintf("%s/%016llx%s", zkwr_waits_parent(),
										(unsigned long long) zks_session_id(),
										ZKWR_TWIN_SUFFIX));
	for (int tries = 0; tries < 3; tries++)
	{
		w->req = zks_send_create(path, data, len, ZKS_EPHEMERAL);
		rc = zks_wait(w->req, deadline);
		if (rc == ZKS_OK)
			zks_claim(w->req);	/* ours now: zkd_wait_end deletes it */
		zks_done(w->req);
		w->req = NULL;
		if (rc == ZKS_NODEEXISTS)
		{
			/* one of an earlier wait of ours, its delete still on its way */
			w->req = zks_send_set(path, data, len, -1);
			rc = zks_wait(w->req, deadline);
			zks_done(w->req);
			w->req = NULL;
			if (rc == ZKS_NONODE)
				continue;		/* the delete landed: create again */
		}
		else if (rc == ZKS_NONODE)
		{
			if (!make_waits_parent(w, deadline))
				return false;
			continue;
		}
		if (rc == ZKS_OK)
			w->twin = path;
		return rc == ZKS_OK;
	}
	return false;
}

/*
 * Has the record been written by someone else since our last write?
 * ZooKeeper's versions grow by one per write, whatever server answers;
 * every write of ours is unconditional, and the only other writes are
 * wakes, so a version other than the one we expect is a wake that our
 * own write (or the watch set after it) hid.  Rarely it is a write of
 * ours whose reply was lost although it ran: that costs one search.
 */
static bool
note_version(ZkdWait *w, int32 version)
{
	bool		other = (version != w->record_version);

	if (other)
		w->rewritten = true;
	w->record_version = version;
	return other;
}

/*
 * Keep a data watch on our own record: another member that finds a cycle
 * whose victim we are writes the record back unchanged to wake us.  Set
 * after each write of our own (whose event has come in before the
 * write's reply), so that only others' writes and session events fire
 * it.  A wake that reached the server between our last look at the watch
 * and that write fired the old watch, whose event is forgotten here; the
 * versions tell it instead (note_version), in the write's reply or in
 * this read's.  Returns true when this read found a write after our
 * last one: a wake that landed after that write, which the waker counts
 * only once we beat again (deadlock.c).  Without room in the watch table
 * we go without: the waiter then beats at every check and searches by
 * the schedule (deadlock.c).
 */
bool
zkwr_watch_own(ZkdWait *w, TimestampTz deadline)
{
	ZksRequest *req;
	bool		tracked;
	ZksRc		rc;
	bool		woken = false;

	if (w->watching)
		zks_unwatch_node(w->record);
	w->watching = false;
	if (!zks_watch_room())
		return false;
	w->req = req = zks_watch_node(w->record, &tracked);
	rc = zks_wait(req, deadline);
	if (rc == ZKS_OK)
	{
		ZksStat		st;

		zks_get_stat(req, &st);
		woken = note_version(w, st.version);
	}
	zks_done(req);
	w->req = NULL;
	zks_watch_reply(w->record, rc);
	if (rc == ZKS_OK && tracked)
		w->watching = true;
	else
		zks_unwatch_node(w->record);
	return woken;
}

/*
 * Our record is gone: drop it and the watch we keep on it (the watch
 * table is looked up by its path, so no watch may outlive it), so that
 * the next check publishes it again.
 */
void
zkwr_forget(ZkdWait *w)
{
	if (w->watching)
		zks_unwatch_node(w->record);
	w->watching = false;
	w->record = NULL;
}

/*
 * Write our record's blocked list.  Returns false if ZooKeeper would not
 * have it now; a record gone (a sweep) is published again next time.
 */
bool
zkwr_refresh(ZkdWait *w, const char *resource, const char *node, ZkrMode mode,
			 const char *leases, TimestampTz deadline)
{
	int			len;
	char	   *data = format_own(w, resource, node, mode, leases, &len);
	ZksRc		rc;

	if (len == 0)
		return false;
	if (!write_twin(w, data, len, GetMemoryChunkContext(w->record), deadline))
		return false;
	w->req = zks_send_set(w->record, data, len, -1);
	rc = zks_wait(w->req, deadline);
	if (rc == ZKS_OK)
	{
		ZksStat		st;

		zks_get_stat(w->req, &st);
		w->record_version++;	/* what our write alone makes it */
		(void) note_version(w, st.version);
	}
	zks_done(w->req);
	w->req = NULL;
	if (rc == ZKS_NONODE)
		zkwr_forget(w);
	return rc == ZKS_OK;
}

/*
 * Publish our record.  Returns false if ZooKeeper would not have it now
 * (the search is then tried again later).
 */
bool
zkwr_publish(ZkdWait *w, const char *resource, const char *node, ZkrMode mode,
			 const char *leases, TimestampTz deadline)
{
	char	   *path = psprintf("%s/%016llx", zkwr_waits_parent(),
								(unsigned long long) zks_session_id());
	char	   *data;
	int			len;

	data = format_own(w, resource, node, mode, leases, &len);
	if (len == 0)
		return false;
	if (!write_twin(w, data, len, CurrentMemoryContext, deadline))
		return false;

	for (int tries = 0; tries < 3; tries++)
	{
		ZksRc		rc;

		w->req = zks_send_create(path, data, len, ZKS_EPHEMERAL);
		rc = zks_wait(w->req, deadline);
		if (rc == ZKS_OK)
		{
			ZksStat		st;

			zks_get_stat(w->req, &st);
			w->record = zks_take_created_path(w->req);
			w->record_czxid = st.czxid;
			w->record_version = st.version;
			zks_done(w->req);
			w->req = NULL;
			return true;
		}
		zks_done(w->req);
		w->req = NULL;
		if (rc == ZKS_NONODE)
		{
			if (!make_waits_parent(w, deadline))
				return false;
		}
		else if (rc == ZKS_NODEEXISTS)
			zks_delete_async(path); /* an old one of ours; sent before */
		else
			return false;
	}
	return false;
}

/*
 * Wake a member: write its record back as we read it, with its version,
 * so a newer record of its own is never overwritten.  Its data watch
 * fires (or, if the wake meets a write of its own, it sees the version
 * jump), and it checks at once: a victim searches, any member beats.
 *
 * ZooKeeper refuses the write if the record changed since we read it.
 * Most often the member itself beat in between, and its own write wakes
 * nobody: so read the record again and write back what it holds now.  If
 * it holds what we read, the change was another member's wake (every
 * write of the owner's changes the beat), which has woken it already.  A
 * member writes only when woken or when its local edges change (at most
 * once per deadlock_timeout), so a second try all but always lands;
 * WAKE_TRIES bounds it.  Any other outcome ends it: a record gone is a
 * wait ended, and without an answer our own search, which saw a cycle
 * and so was not final, is made again later.
 */
void
zkwr_wake(ZkdWait *w, const char *path, const char *data, int len,
		  int version, TimestampTz deadline)
{
	for (int tries = 1;; tries++)
	{
		ZksStat		st;
		ZksRc		rc;
		char	   *now;
		int			now_len;

		w->req = zks_send_set(path, data, len, version);
		rc = zks_wait(w->req, deadline);
		zks_done(w->req);
		w->req = NULL;
		if (rc != ZKS_BADVERSION || tries == WAKE_TRIES)
			return;
		w->req = zks_send_get(path);
		rc = zks_wait(w->req, deadline);
		if (rc != ZKS_OK)
		{
			zks_done(w->req);
			w->req = NULL;
			return;
		}
		now = zks_get_data(w->req, &now_len);
		zks_get_stat(w->req, &st);
		zks_done(w->req);
		w->req = NULL;
		if (now_len == len && memcmp(now, data, len) == 0)
			return;				/* another member's wake */
		data = now;
		len = now_len;
		version = st.version;
	}
}
