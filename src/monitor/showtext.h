/*-------------------------------------------------------------------------
 *
 * showtext.h
 *	  UTF-8 bytes that come from outside this database (ZooKeeper node
 *	  data, lock names counted by databases of other encodings) shown as
 *	  text of this database, or as \x hex when it cannot hold them.
 *
 * src/monitor/showtext.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_SHOWTEXT_H
#define ZKLOCK_SHOWTEXT_H

#include "lib/stringinfo.h"

/* "\x" and two lower-case hex digits per byte, bytea's output form. */
extern void zkt_append_hex(StringInfo buf, const char *data, int len);

/*
 * data as text of the database encoding when it is valid UTF-8 whose every
 * character that encoding can hold, otherwise as zkt_append_hex.  Never
 * raises an encoding error.
 */
extern void zkt_append_utf8(StringInfo buf, const char *data, int len);

#endif							/* ZKLOCK_SHOWTEXT_H */
