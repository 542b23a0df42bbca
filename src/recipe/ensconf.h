/*-------------------------------------------------------------------------
 *
 * ensconf.h
 *	  The ensemble's membership as ZooKeeper publishes it in
 *	  /zookeeper/config (dynamic reconfiguration, 3.5+), read into the
 *	  client connect string zklock follows (session/ensemble.c).
 *
 * Pure C: nothing here calls PostgreSQL or ZooKeeper, nothing allocates.
 * The getconfig completion parses the data with it on libzookeeper's
 * completion thread (where nothing of PostgreSQL may run), into a buffer
 * of the caller's; the unit tests (test/unit/test_ensconf.c) link it
 * without any server.
 *
 * src/recipe/ensconf.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_ENSCONF_H
#define ZKLOCK_ENSCONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest connect string zklock builds from a config (bytes, with NUL). */
#define ZKEC_LIST_MAX 4096

typedef enum ZkecResult
{
	ZKEC_OK,					/* *version != 0, out: every client address */
	ZKEC_STATIC,				/* version 0 or none: a static ensemble,
								 * never followed (no order between two
								 * servers' configs) */
	ZKEC_NO_CLIENT,				/* a server line without a client port */
	ZKEC_BAD					/* not a config: no server line, a line
								 * that does not parse, or too long */
} ZkecResult;

/*
 * Parse the data of /zookeeper/config (len bytes, not NUL-terminated)
 * into out (outsz bytes): "host:port,host:port,..." in the order of the
 * server lines, participants and observers alike.  A wildcard client
 * address (0.0.0.0, ::, or a bare port, which ZooKeeper reads as
 * 0.0.0.0) becomes the line's quorum host, as Curator's EnsembleTracker
 * does.  *version gets the config's version (the zxid of the reconfig
 * that wrote it), 0 when there is none.  out is an empty string unless
 * ZKEC_OK.
 */
extern ZkecResult zkec_parse(const char *data, size_t len,
							 char *out, size_t outsz, uint64_t *version);

/*
 * Does every host:port of the connect string hosts appear in list (a
 * zkec_parse result)?  Compared as text, names case-insensitively; a
 * trailing "/" of hosts is ignored.  False for an empty hosts.
 */
extern bool zkec_hosts_covered(const char *hosts, const char *list);

#endif							/* ZKLOCK_ENSCONF_H */
