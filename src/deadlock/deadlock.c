/*-------------------------------------------------------------------------
 *
 * deadlock.c
 *	  Deadlock detection for zklock waits: across clusters, through other
 *	  zklock backends' waits, and through PostgreSQL's own lock waits on
 *	  this cluster.
 *
 * No lock client built on ZooKeeper's recipe detects deadlocks: a waiter
 * only sees its own queue.  zklock waiters make the rest visible.  One
 * that has waited deadlock_timeout (PostgreSQL's setting) publishes a
 * wait record: an ephemeral node <zklock.root>/%waits/<session id>, whose
 * data names its backend (system identifier, postmaster start time and
 * pid: a standby shares its primary's system identifier, see ZkwBackend in
 * waitgraph.h), mode, waiting node and resource ("%" never
 * starts an encoded resource level, so no lock parent can be called
 * that).  Nobody watches these nodes, so publishing wakes nobody; the
 * record goes when the wait ends (or with the session, like every
 * ephemeral node).
 *
 * The search then follows, from our own waiting node, "waits for" edges:
 * a waiting node waits for the conflicting contenders ahead of it in its
 * queue (as the recipe says), and those belong to ZooKeeper sessions
 * (their ephemeralOwner).  A session with a record (written by
 * waitrecord.c) waits itself, for the
 * contenders ahead of its own node.  A session without one is a holder;
 * if it is a backend that waits in PostgreSQL's lock manager for a zklock
 * waiter of its own cluster (directly, or through other backends that
 * wait there), that is an edge too, but only a backend of that cluster
 * can see it.  A path back to our own session is a cycle.  Clients that
 * publish nothing (Curator, kazoo) end a path: they can be part of no
 * cycle that zklock could see.
 *
 * Every member must search the same graph, or the one that must act may
 * not see what another sees (issue 30: X on cluster A waits for H on B, H
 * waits for a row lock of W on B, W waits for X: only W could see H's
 * wait, and the rule below picked X).  So the PostgreSQL-local edges are
 * published too, by their heads: each record lists the backends of its
 * cluster that wait in the lock manager for its waiter ("blocked=", found
 * by walking pg_blocking_pids backwards from our own pid), and while
 * that list is not empty a twin of the record beside it
 * (<session>-blocked, the same data) shows it without the record's being
 * read; a search takes those edges from the twins only, never from what
 * its own cluster alone shows.  A holder is the head of such an edge only if its
 * owner line names the record's very postmaster (zkw_same_backend), not
 * just its system identifier.  Every edge of the graph is then either a queue
 * in ZooKeeper or a line of a record in ZooKeeper, and two searches that
 * read the same state of the ensemble build the same graph, wherever
 * they run.  A waiter looks at the lock manager every deadlock_timeout
 * while it waits (no request unless the list changed, then one setData),
 * so a local edge that closes a cycle late is published within
 * deadlock_timeout, and the waiter then searches at once.
 *
 * Exactly one member of a cycle acts: the one whose record ZooKeeper
 * created last (greatest czxid).  Every member that sees the cycle
 * computes the same one, whatever the clocks of their hosts, and that
 * member published last, so its own search already sees every record of
 * the cycle.  A member that finds a cycle whose victim is another wakes
 * it: it writes the victim's record back unchanged (setData with the
 * version it read, so it never overwrites a newer list), which fires the
 * data watch the victim keeps on its own record, and the victim searches
 * at once (nothing else would make it search: see "When a waiter
 * searches" below).  Two races would lose
 * the wake, and both are closed in waitrecord.c: the victim beats between
 * the waker's read and its write (ZooKeeper refuses the write for its old
 * version: the waker reads again and writes that), or the wake reaches
 * the server just before the victim's beat, and the victim takes the
 * event it fires for its beat's own (it tells the wake by the version its
 * beat, or the read that sets its watch again, finds; in the second case
 * the wake came after the beat, and it beats once more).  Before acting the
 * victim searches again and acts only if the same cycle, with the same
 * records, is still there: a cycle pieced together from moments apart (a
 * member granted or gone meanwhile) is not acted on.  The victim raises
 * ERROR 40P01; its node and record go, and the others proceed.
 *
 * Why no cycle is broken twice, although searchers read the ensemble at
 * different moments: a member acts only on its own search, and only if it
 * is the youngest record of everything on a cycle with it (its strongly
 * connected component, so overlapping cycles give one answer).  If two
 * members A and B both acted, each was the youngest in what it saw; if
 * each had seen the other in its component, each would be younger than
 * the other.  So one of them, say B, did not see A on a cycle with it:
 * B's cycle is another cycle, made of records and queues B read, which A
 * breaking its own leaves intact.  Why none is missed: the victim of a
 * cycle is a member with a record; once every member's record lists its
 * local edges (within deadlock_timeout of the edge closing) every search
 * that starts on the cycle finds it, each such member names the same
 * victim, and the member whose write closed the cycle searches right
 * after it (below); the victim's own search, woken by the first member
 * that sees the cycle, finds it too.  A wait record that lies
 * (written by a client without zklock.auth_file's credentials, see
 * README) is read only as far as it parses, and a record whose waiting
 * node is not its own session's is ignored.
 *
 * A search is a few round trips: one listing of the records and their
 * twins (the twins read, back to back: one per waiter with local edges,
 * most often none), then for each waiter on the path its queue and the
 * owners of its own node and of the queue's holders ahead of it, and the
 * records of the sessions met.  The waiters between a waiter and its
 * queue's holders lead nowhere the holders do not (waitsearch.c), so a
 * waiter behind K others reads about four nodes and records, not 2K as
 * in 1.6.  A queue is listed, and each of its nodes read, once per
 * search.  A lock granted at once or within deadlock_timeout costs
 * nothing.
 *
 * When a waiter searches (issue 38: waiting costs nothing).  zklock 1.6's
 * waiters beat their records every deadlock_timeout and searched again at
 * growing intervals, each search reading every record: 50 waiters on one
 * lock sent 12 requests per waiter per second, and the cost per waiter
 * grew with the queue.  Yet a search can find something new only after
 * the graph changed, and every edge of the graph comes into being by a
 * write to ZooKeeper made by a member on that edge, which searches right
 * after it:
 *	- a waiter's out-edges count once it publishes its record (its node,
 *	  and the nodes ahead of it, exist before the record), and it searches
 *	  then;
 *	- a PostgreSQL-local edge into a waiter counts once the waiter writes
 *	  its blocked list (within deadlock_timeout of the edge closing: the
 *	  lock manager is looked at every deadlock_timeout, which costs
 *	  ZooKeeper nothing), and it searches then;
 *	- a node joins a queue behind everything there, so it adds edges out
 *	  of its own session only, which count when it publishes; a lease
 *	  granted to a semaphore's waiter adds edges into a session that waits
 *	  for nothing at that moment (it was just granted), so they are on a
 *	  cycle only once that session waits again and publishes.
 * So a cycle closes with a write, made by a member of the cycle that
 * searches after it, from a sync: that search sees the write and every
 * earlier one, hence every edge of the cycle (the argument of "the victim
 * published last", for every kind of edge).  An edge that goes away
 * closes no cycle, except where a semaphore's waiter needs only one of
 * its holders to go (a holder free to go keeps it out of every cycle).
 * That answer, like that of a search that failed, left a path out (its
 * tables full), found a cycle it did not break, or met leases it could
 * not count yet, is not final: the waiter searches again at growing
 * intervals (deadlock_timeout, then 2, 4 and every 8 times it).  A final
 * "no cycle through us" ends the searching until another member wakes us
 * or our local edges change.  A record is written only when it is
 * published, when its local edges change and when its waiter is woken
 * (the beat a victim waits for, see beats_advanced); the data watch on
 * it, set once, costs nothing until it fires.  A reconnection fires it
 * too (libzookeeper tells every watcher of a session event), so a waiter
 * whose connection came back beats and searches once.  Without the watch
 * (no room in the watch table, or a write that failed) a wake would go
 * unseen: that waiter beats at every check and searches by the schedule,
 * as 1.6 did.  A waiter in no cycle thus sends one create and one watch
 * when it publishes, one search, and nothing more while nothing changes:
 * its session's pings are all it costs after that.  Waiters of 1.6 still
 * beat and search by their schedule, and wake a newer victim as before;
 * but they write no twins, so a newer search does not see their local
 * edges, and their searches follow every waiter of a queue, so in a
 * rolling upgrade a cycle through both can wait for its timeout, or, when
 * a 1.6 member is the youngest of its larger component, end with two
 * 40P01 (README, Deadlocks).
 *
 * src/deadlock/deadlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "deadlock/deadlock.h"
#include "deadlock/deadlock_int.h"
#include "deadlock/waitrecord.h"
#include "zklock.h"

#define MAX_INTERVAL_FACTOR 8	/* re-search at most every 8 x deadlock_timeout */
#define CONFIRM_NAP_MS	50		/* between a victim's confirming searches */
#define MAX_REBEATS		3		/* beats again for wakes met in one check */

void
zkd_self(ZkwBackend *me)
{
	me->sysid = GetSystemIdentifier();
	/* (set once by the postmaster, inherited by every backend) */
	me->has_start = true;
	me->start = (uint64) PgStartTime;
	me->pid = MyProcPid;
}

void
zkd_wait_begin(ZkdWait *w)
{
	if (w->check_at == 0)
		w->check_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  DeadlockTimeout);
}

TimestampTz
zkd_wake_at(ZkdWait *w, TimestampTz deadline)
{
	if (w->check_at == 0)
		return deadline;
	if (zkwr_woken(w))
		return GetCurrentTimestamp();
	if (deadline == 0 || w->check_at < deadline)
		return w->check_at;
	return deadline;
}

void
zkd_wait_end(ZkdWait *w)
{
	zks_done(w->req);
	w->req = NULL;
	if (w->watching)
		zks_unwatch_node(w->record);	/* (it fires at the delete) */
	w->watching = false;
	if (w->twin != NULL)
		zks_delete_async(w->twin);
	w->twin = NULL;
	if (w->record != NULL)
		zks_delete_async(w->record);
	w->record = NULL;
	w->check_at = 0;
	w->search_at = 0;
	w->checks = 0;
	w->nblocked = 0;
	w->listed = 0;
	w->rewritten = false;
	w->dirty = false;
}

/* The same members with the same records, in any order? */
static bool
same_cycle(const Cycle *a, const Cycle *b)
{
	if (a->len != b->len)
		return false;
	for (int i = 0; i < a->len; i++)
	{
		bool		found = false;

		for (int j = 0; j < b->len && !found; j++)
			found = a->m[i].session == b->m[j].session &&
				a->m[i].has_record == b->m[j].has_record &&
				a->m[i].czxid == b->m[j].czxid;
		if (!found)
			return false;
	}
	return true;
}

static void
describe_member(StringInfo buf, const Member *m)
{
	/*
	 * A standby and its primary share the system identifier: the start
	 * time tells their members apart (names of 1.5 have none).
	 */
	if (m->known && m->who.has_start)
		appendStringInfo(buf, _("process %d of cluster %llu started at %s"),
						 m->who.pid, (unsigned long long) m->who.sysid,
						 timestamptz_to_str((TimestampTz) m->who.start));
	else if (m->known)
		appendStringInfo(buf, _("process %d of cluster %llu"), m->who.pid,
						 (unsigned long long) m->who.sysid);
	else
		appendStringInfo(buf, _("ZooKeeper session 0x%llx"),
						 (unsigned long long) m->session);
}

static void
deadlock_error(const Cycle *c)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int k = 0; k < c->len; k++)
	{
		const Member *m = &c->m[k];
		const Member *next = &c->m[(k + 1) % c->len];

		if (k > 0)
			appendStringInfoChar(&buf, '\n');
		if (m->has_record && m->leases != NULL)
		{
			describe_member(&buf, m);
			appendStringInfo(&buf, _(" waits for room in zklock semaphore \"%s\", whose holders are all in this cycle; one of them is "),
							 m->resource);
		}
		else if (m->has_record)
		{
			describe_member(&buf, m);
			appendStringInfo(&buf, _(" waits for %s zklock on \"%s\"; blocked by "),
							 zkr_mode_name(m->mode), m->resource);
		}
		else
		{
			describe_member(&buf, m);
			appendStringInfoString(&buf, c->pg_edge[k] ?
								   _(" holds a zklock and waits for a PostgreSQL lock; blocked by ") :
								   _(" holds a zklock; blocked by "));
		}
		describe_member(&buf, next);
		appendStringInfoChar(&buf, '.');
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail_internal("%s", buf.data),
			 errhint("This wait was chosen to end the cycle (the youngest wait in it); the other members proceed.")));
}

/*
 * Has every other member with a record beaten since the first search?
 * Only a waiter that is connected and still in its wait advances its
 * beat.  A record that outlives its wait (its owner's connection is down,
 * so the delete waits for the reconnect, or the session expiry) shows a
 * wait that no longer exists; so does the record of a member whose wait
 * ended in an error it caught.  A cycle through such a record is no
 * deadlock, and acting on it would abort a member for nothing (issue 30).
 */
static bool
beats_advanced(const Cycle *first, const Cycle *again)
{
	for (int i = 0; i < again->len; i++)
	{
		const Member *m = &again->m[i];
		bool		beat = false;

		if (!m->has_record || m->session == zks_session_id())
			continue;
		for (int j = 0; j < first->len && !beat; j++)
			beat = first->m[j].session == m->session &&
				m->rec->r.has_beat && first->m[j].rec->r.has_beat &&
				m->rec->r.beat > first->m[j].rec->r.beat;
		if (!beat)
			return false;
	}
	return true;
}

void
zkd_check(ZkdWait *w, const char *resource, const char *node, ZkrMode mode,
		  const char *leases, TimestampTz deadline)
{
	Cycle	   *first;
	int			factor;
	int			blocked[ZKW_MAX_BLOCKED];
	int			nblocked;
	bool		changed;
	bool		due;
	bool		woken;
	bool		wrote;
	bool		found;
	bool		again;
	TimestampTz now = GetCurrentTimestamp();
	MemoryContext cxt;
	MemoryContext old;
	ZksActivity was;

	if (w->check_at == 0 || (now < w->check_at && !zkwr_woken(w)))
		return;
	/* (an ERROR leaves it set: the transaction's end resets it) */
	was = zks_set_activity(ZKS_ACTIVITY_DEADLOCK);
	w->check_at = TimestampTzPlusMilliseconds(now, DeadlockTimeout);
	woken = zkwr_woken(w);

	/* what a check reads is dropped with it (an ERROR drops it too) */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "zklock deadlock search",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);

	/* our PostgreSQL-local edges, as the lock manager shows them now */
	nblocked = zkwr_local_blocked(blocked);
	changed = (nblocked != w->nblocked ||
			   memcmp(blocked, w->blocked, sizeof(int) * nblocked) != 0);
	w->nblocked = nblocked;
	memcpy(w->blocked, blocked, sizeof(int) * nblocked);

	/*
	 * Write the record when it says something new: the local edges
	 * changed, or a member woke us (the beat it waits for, see
	 * beats_advanced).  Without a watch on it (no room in the watch
	 * table, or a write that failed) a wake would go unseen: beat at
	 * every check then, as zklock 1.6 did.
	 */
	if (changed || woken || !w->watching)
		w->dirty = true;
	due = woken || changed || (w->search_at != 0 && now >= w->search_at);
	wrote = false;
	if (w->record == NULL)
	{
		/* the record's path outlives this check */
		MemoryContextSwitchTo(old);
		w->beat++;
		wrote = zkwr_publish(w, resource, node, mode, leases, deadline);
		MemoryContextSwitchTo(cxt);
		due = true;
		if (!wrote)
			goto failed;
	}
	else if (w->dirty)
	{
		w->beat++;
		wrote = zkwr_refresh(w, resource, node, mode, leases, deadline);
		if (!wrote)
			goto failed;
	}
	else if (!due)
		goto out;				/* nothing new: no request at all */
	w->dirty = false;

	/*
	 * Watch the record again.  A wake that landed after our write and
	 * before this read fired no watch of ours; the read's version tells
	 * it, and the waker counts it only once we beat after it
	 * (beats_advanced), so beat again, a few times at most; should wakes
	 * keep coming, the next check beats.
	 */
	if (wrote || !w->watching)
	{
		for (int k = 0; zkwr_watch_own(w, deadline); k++)
		{
			if (k == MAX_REBEATS)
			{
				w->dirty = true;
				break;
			}
			w->beat++;
			if (!zkwr_refresh(w, resource, node, mode, leases, deadline))
				goto failed;
		}
	}
	/* a wake that met our write: its event was spent on the write's */
	due |= w->rewritten;
	w->rewritten = false;
	if (!due)
		goto out;

	w->checks++;
	first = palloc0(sizeof(Cycle));
	found = zkd_search(w, deadline, first);
	again = first->again || !w->watching;
	if (found)
	{
		/*
		 * We are the victim of what we see.  Act only once every other
		 * member has shown that its wait goes on (beats_advanced): wake
		 * them, so that they beat now, and search again until they have,
		 * the same cycle with the same records, for at most
		 * deadlock_timeout; a later search tries again after that.
		 */
		TimestampTz limit;

		/* one round's search is dropped at the next (20 a second) */
		MemoryContext round = AllocSetContextCreate(cxt,
													"zklock deadlock confirmation",
													ALLOCSET_DEFAULT_SIZES);

		for (int k = 0; k < first->len; k++)
			if (first->m[k].has_record && first->m[k].session != zks_session_id())
				zkwr_wake(w, first->m[k].rec->path, first->m[k].rec->data,
						  first->m[k].rec->len, first->m[k].rec->version,
						  deadline);
		/* (the wakes wait for their replies: the time starts after them) */
		limit = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											DeadlockTimeout);
		for (;;)
		{
			Cycle	   *again_seen;
			TimestampTz nap = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  CONFIRM_NAP_MS);
			bool		seen;

			MemoryContextReset(round);
			MemoryContextSwitchTo(round);
			again_seen = palloc0(sizeof(Cycle));
			(void) zks_wait_event(zks_event_mark(), Min(nap, limit));
			seen = zkd_search(w, deadline, again_seen);
			MemoryContextSwitchTo(cxt);
			if (!seen || !same_cycle(first, again_seen))
				break;			/* gone, or no longer ours to break */
			if (beats_advanced(first, again_seen))
				deadlock_error(again_seen);
			if (GetCurrentTimestamp() >= limit)
				break;
		}
	}
	else if (first->other != NULL)
		zkwr_wake(w, first->other->path, first->other->data,
				  first->other->len, first->other->version, deadline);

	/*
	 * A final answer ends the searching: nothing that could close a cycle
	 * through us can happen without waking us or without a search of its
	 * own (the head comment).  Anything else is asked again, at growing
	 * intervals.
	 */
	if (again)
	{
		factor = Min(1 << Min(w->checks, 10), MAX_INTERVAL_FACTOR);
		w->search_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   (int64) DeadlockTimeout * factor);
	}
	else
		w->search_at = 0;
	goto out;

failed:
	/* (a record gone is published next time) */
	if (w->watching)
		zks_unwatch_node(w->record);
	w->watching = false;
	w->search_at = TimestampTzPlusMilliseconds(now, DeadlockTimeout);

out:
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	zks_set_activity(was);
}
