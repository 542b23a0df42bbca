/*-------------------------------------------------------------------------
 *
 * waitrecord.h
 *	  A zklock waiter's own wait record (waitrecord.c), for deadlock.c.
 *
 * src/deadlock/waitrecord.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_WAITRECORD_H
#define ZKLOCK_WAITRECORD_H

#include "deadlock/deadlock.h"

/* <zklock.root>/%waits, the records' parent */
/*
 * A record whose list of PostgreSQL-local edges is not empty has a twin
 * beside it, "<session>-blocked", with the same data: a search reads only
 * the records of the sessions it meets, and these twins for the edges
 * into them (deadlock.c).  1.6 reads the twin as no record of its own.
 */
#define ZKWR_TWIN_SUFFIX "-blocked"

extern char *zkwr_waits_parent(void);

/* Has another member written our record since we last looked? */
extern bool zkwr_woken(ZkdWait *w);

/*
 * The backends of this cluster that wait in PostgreSQL's lock manager for
 * this one (directly or through others waiting there), ascending, at most
 * ZKW_MAX_BLOCKED: written to out[], their number returned.
 */
extern int	zkwr_local_blocked(int *out);

/*
 * Create our record / rewrite it (beat and blocked list from w).  Both
 * return false if ZooKeeper would not have it now; a record found gone
 * is published again at the next check.  Never raise for ZooKeeper's
 * answers (only for interrupts).
 */
extern bool zkwr_publish(ZkdWait *w, const char *resource, const char *node,
						 ZkrMode mode, const char *leases,
						 TimestampTz deadline);
extern bool zkwr_refresh(ZkdWait *w, const char *resource, const char *node,
						 ZkrMode mode, const char *leases,
						 TimestampTz deadline);

/* Our record is found gone: forget it and its watch (published next check). */
extern void zkwr_forget(ZkdWait *w);

/*
 * (Re)set the data watch on our record, after a write of our own.  A
 * write of another member's that came before the watch (it fired no watch
 * of ours) is noticed by the record's version: w->rewritten.
 */
extern bool zkwr_watch_own(ZkdWait *w, TimestampTz deadline);

/*
 * Wake another member: its record written back as read, with the version
 * read; if it wrote the record since, read it again and write that back.
 */
extern void zkwr_wake(ZkdWait *w, const char *path, const char *data,
					  int len, int version, TimestampTz deadline);

#endif							/* ZKLOCK_WAITRECORD_H */
