/*-------------------------------------------------------------------------
 *
 * inspect.h
 *	  Reading a lock's whole queue from ZooKeeper, every client included.
 *
 * src/sql/inspect.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_INSPECT_H
#define ZKLOCK_INSPECT_H

#include "recipe/recipe.h"

typedef struct ZkqEntry
{
	int			position;		/* 1 = first in line */
	ZkrMode		mode;
	char	   *node;			/* child name */
	char	   *data;			/* the node's data: its owner's own words */
	int			data_len;
	bool		holding;		/* granted, by the recipe's rules */
	char	   *waits_for;		/* node it waits for (NULL if holding) */
	int64		session_id;		/* ephemeralOwner */
	int64		czxid;			/* its fencing token */
	int32		version;		/* of its data, as read */
} ZkqEntry;

/* The queue of the lock on relpath (under zklock.root), in order. */
extern ZkqEntry *zkq_queue(const char *relpath, int *n);

#endif							/* ZKLOCK_INSPECT_H */
