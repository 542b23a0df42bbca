/*-------------------------------------------------------------------------
 *
 * revokeform.c
 *	  The words that ask a lock's holder to give it back (revokeform.h).
 *
 * Curator's Revoker writes "__REVOKE__" into the holder's node, and a
 * revocable InterProcessMutex gives its lock back when its own node's
 * data equals exactly that (LockInternals).  ZooKeeper's recipe
 * "Revocable Shared Locks" writes "unlock".  A zklock node's data is its
 * owner line ("zklock host=... pid=..."), which other backends read to
 * name a lock's holder (waitlog.c, zk_lock_queue) and to find it in the
 * deadlock search (waitgraph.c): a request from zklock therefore keeps
 * that line first and adds its own second line, "revoke <requester>",
 * which every reader of the owner line ignores (they stop at the first
 * newline, or look for keys that the first line carries first).
 *
 * src/recipe/revokeform.c
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "recipe/revokeform.h"

/* The data of every node zklock creates starts so (acquire.c). */
#define OWNER_PREFIX "zklock "

static bool
equals(const char *data, size_t len, const char *word)
{
	return len == strlen(word) && memcmp(data, word, len) == 0;
}

ZkvForm
zkv_parse(const char *data, size_t len, const char **by, size_t *by_len)
{
	const char *nl;
	const char *line;
	size_t		rest;

	*by = NULL;
	*by_len = 0;
	if (data == NULL)
		return ZKV_NONE;
	if (equals(data, len, ZKV_CURATOR_WORD) || equals(data, len, ZKV_RECIPE_WORD))
	{
		*by = data;
		*by_len = len;
		return data[0] == '_' ? ZKV_CURATOR : ZKV_RECIPE;
	}
	if (len < strlen(OWNER_PREFIX) ||
		memcmp(data, OWNER_PREFIX, strlen(OWNER_PREFIX)) != 0 ||
		(nl = memchr(data, '\n', len)) == NULL)
		return ZKV_NONE;
	line = nl + 1;
	rest = len - (size_t) (line - data);
	if (rest < strlen(ZKV_LINE_PREFIX) ||
		memcmp(line, ZKV_LINE_PREFIX, strlen(ZKV_LINE_PREFIX)) != 0)
		return ZKV_NONE;
	line += strlen(ZKV_LINE_PREFIX);
	rest -= strlen(ZKV_LINE_PREFIX);
	/* the requester's words end at the line's end */
	nl = memchr(line, '\n', rest);
	*by = line;
	*by_len = nl != NULL ? (size_t) (nl - line) : rest;
	return ZKV_ZKLOCK;
}

size_t
zkv_build(const char *data, size_t len, const char *requester,
		  char *out, size_t outlen)
{
	const char *nl;
	size_t		first;
	size_t		total;

	if (data == NULL || len < strlen(OWNER_PREFIX) ||
		memcmp(data, OWNER_PREFIX, strlen(OWNER_PREFIX)) != 0)
		return 0;
	nl = memchr(data, '\n', len);
	first = nl != NULL ? (size_t) (nl - data) : len;
	/* the requester's words are one line: a newline would end them */
	if (strchr(requester, '\n') != NULL)
		return 0;
	total = first + 1 + strlen(ZKV_LINE_PREFIX) + strlen(requester);
	if (total + 1 > outlen)
		return 0;
	memcpy(out, data, first);
	out[first] = '\n';
	memcpy(out + first + 1, ZKV_LINE_PREFIX, strlen(ZKV_LINE_PREFIX));
	memcpy(out + first + 1 + strlen(ZKV_LINE_PREFIX), requester,
		   strlen(requester));
	out[total] = '\0';
	return total;
}

/*
 * Only Curator's lock nodes ("__WRIT__", "__READ__", "lock-"): a lock
 * made revocable gives itself up on "__REVOKE__".  Curator's semaphore
 * leases carry their holder's own data and have no revocation; kazoo has
 * none at all, and reads its nodes' data as their holders' names
 * (contenders(), lease_holders()), which a word written over them would
 * replace.  name may be a path: its last part counts.
 */
const char *
zkv_word_for_node(const char *name)
{
	const char *last = strrchr(name, '/');

	last = last != NULL ? last + 1 : name;
	if (strstr(last, "__lock__") != NULL || strstr(last, "__rlock__") != NULL)
		return NULL;
	if (strstr(last, "__WRIT__") != NULL || strstr(last, "__READ__") != NULL ||
		strstr(last, "-lock-") != NULL || strncmp(last, "lock-", 5) == 0)
		return ZKV_CURATOR_WORD;
	return NULL;
}
