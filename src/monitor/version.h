/*-------------------------------------------------------------------------
 *
 * version.h
 *	  Which zklock library a backend runs (zk_library, view zk_version).
 *
 * src/monitor/version.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_VERSION_H
#define ZKLOCK_VERSION_H

/* Notes how and from where the library was loaded; from _PG_init. */
extern void zkv_init(void);

#endif							/* ZKLOCK_VERSION_H */
