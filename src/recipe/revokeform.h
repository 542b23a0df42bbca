/*-------------------------------------------------------------------------
 *
 * revokeform.h
 *	  The words that ask a lock's holder to give it back, as they are
 *	  written into the holder's own node: Curator's "__REVOKE__", the
 *	  ZooKeeper recipe's "unlock", and zklock's own form, which keeps the
 *	  holder's owner line first and adds a line naming the requester.
 *
 * Pure C: nothing here calls PostgreSQL or ZooKeeper.  The session
 * watcher parses a held node's data with it on libzookeeper's thread, and
 * the unit tests (test/unit) link it without any server.
 *
 * src/recipe/revokeform.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_REVOKEFORM_H
#define ZKLOCK_REVOKEFORM_H

#include <stdbool.h>
#include <stddef.h>

/* Curator's LockInternals.REVOKE_MESSAGE and the recipe's word */
#define ZKV_CURATOR_WORD "__REVOKE__"
#define ZKV_RECIPE_WORD "unlock"

/* What zklock's form puts at the start of its second line */
#define ZKV_LINE_PREFIX "revoke "

typedef enum ZkvForm
{
	ZKV_NONE = 0,				/* no request in the data */
	ZKV_CURATOR,				/* exactly "__REVOKE__" */
	ZKV_RECIPE,					/* exactly "unlock" */
	ZKV_ZKLOCK					/* "<owner line>\nrevoke <requester>" */
} ZkvForm;

/*
 * Is there a request in a node's data (len bytes, not NUL-terminated)?
 * For zklock's form, *by and *by_len point at the requester's words
 * inside data (the rest of the "revoke " line); for the bare words, at
 * the word.  Nothing is allocated.
 */
extern ZkvForm zkv_parse(const char *data, size_t len, const char **by,
						 size_t *by_len);

/*
 * The data that asks a zklock holder whose node holds data (len bytes)
 * to give the lock back: its first line, then "revoke " and requester.
 * Written into out (outlen bytes, NUL-terminated); returns the length,
 * or 0 if it does not fit or the data is not a zklock owner line.
 */
extern size_t zkv_build(const char *data, size_t len, const char *requester,
						char *out, size_t outlen);

/*
 * The word a holder of that kind of node (by its name) gives it up for,
 * or NULL if it has none (kazoo's nodes, semaphore leases).
 */
extern const char *zkv_word_for_node(const char *name);

#endif							/* ZKLOCK_REVOKEFORM_H */
