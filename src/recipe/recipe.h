/*-------------------------------------------------------------------------
 *
 * recipe.h
 *	  Pure logic of ZooKeeper's "Locks" and "Shared Locks" recipes: how a
 *	  resource name becomes a znode path, how contender nodes are named and
 *	  recognised, how they are ordered, and which one a waiter watches;
 *	  and of the counting semaphores of Curator and kazoo.
 *
 * Nothing declared here calls PostgreSQL or ZooKeeper.  The same object is
 * linked into the extension and into the unit-test program under
 * test/unit, which runs without any server.  Strings are plain C strings;
 * the caller owns all memory.
 *
 * src/recipe/recipe.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_RECIPE_H
#define ZKLOCK_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest resource name accepted, in bytes, before encoding. */
#define ZKR_MAX_RESOURCE_BYTES 512

/* Worst case of the encoding: every byte becomes "%XX". */
#define ZKR_MAX_ENCODED_BYTES (ZKR_MAX_RESOURCE_BYTES * 3)

/* "8-4-4-4-12" lower-case hex plus NUL */
#define ZKR_UUID_LEN 36

/* Room for the prefix of a node name: "_c_" uuid "-" marker */
#define ZKR_MAX_PREFIX_BYTES 64

typedef enum ZkrMode
{
	ZKR_MODE_NONE = 0,			/* not a contender */
	ZKR_MODE_EXCLUSIVE,
	ZKR_MODE_SHARED,
	ZKR_MODE_SEMAPHORE			/* a semaphore's lease: never a contender
								 * (zkr_parse_child does not return it) */
} ZkrMode;

/* Node-name layouts zklock can write (it always reads all of them). */
typedef enum ZkrProtocol
{
	ZKR_PROTOCOL_CURATOR_RW = 0,	/* Curator InterProcessReadWriteLock */
	ZKR_PROTOCOL_CURATOR_MUTEX,	/* Curator InterProcessMutex */
	ZKR_PROTOCOL_KAZOO			/* kazoo Lock / WriteLock / ReadLock */
} ZkrProtocol;

typedef enum ZkrEncodeResult
{
	ZKR_ENCODE_OK = 0,
	ZKR_ENCODE_EMPTY,			/* zero-length name */
	ZKR_ENCODE_TOO_LONG,		/* more than ZKR_MAX_RESOURCE_BYTES */
	ZKR_ENCODE_EMPTY_LEVEL,		/* leading, trailing or doubled '/' */
	ZKR_ENCODE_NO_ROOM			/* output buffer too small */
} ZkrEncodeResult;

/*
 * Encode a resource name (len bytes, need not be NUL-terminated) into a
 * relative znode path written to out (NUL-terminated).  '/' separates
 * levels; within a level every byte outside [A-Za-z0-9._-] becomes "%XX"
 * (upper-case hex), and a level that is exactly "." or ".." is encoded
 * entirely ("%2E", "%2E%2E"), so the result can never leave the root.
 */
extern ZkrEncodeResult zkr_encode_resource(const char *res, size_t len,
										   char *out, size_t outsize);

/* A child of a lock parent, as recognised by zkr_parse_child. */
typedef struct ZkrContender
{
	const char *name;			/* the child's name (caller's storage) */
	ZkrMode		mode;
	uint32_t	seq;			/* sequence number, as a 32-bit serial */
	size_t		prefix_len;		/* bytes before the recipe marker */
} ZkrContender;

/*
 * Recognise a child name.  A contender matches
 *	 ^(.*)(lock-|__lock__|__rlock__|__WRIT__|__READ__)(SEQ)$
 * where SEQ is ten digits, or a '-' followed by nine or ten digits (the
 * forms ZooKeeper's "%010d" produces once the parent's counter has wrapped
 * past 2^31).  "lock-", "__lock__" and "__WRIT__" are exclusive, "__READ__"
 * and "__rlock__" shared.  Returns false (and mode NONE) for anything else,
 * including a sequence outside what a 32-bit counter prints (above
 * 4294967295 or below -2147483648).
 */
extern bool zkr_parse_child(const char *name, ZkrContender *out);

/*
 * RFC 1982 serial-number comparison of 32-bit sequence numbers: negative
 * if a precedes b, 0 if equal, positive if a follows b.  Numbers exactly
 * 2^31 apart (undefined in RFC 1982) are ordered by their raw value so the
 * result is still antisymmetric.
 */
extern int	zkr_seq_cmp(uint32_t a, uint32_t b);

/* Order of contenders: by sequence (zkr_seq_cmp), ties broken by name. */
extern int	zkr_contender_cmp(const ZkrContender *a, const ZkrContender *b);

/* Sort contenders in place into queue order. */
extern void zkr_sort(ZkrContender *c, int n);

/*
 * Parse every name in names[] and store the contenders, sorted, in out[]
 * (which has room for n).  Returns the number of contenders.
 */
extern int	zkr_collect(const char *const *names, int n, ZkrContender *out);

/* Format 16 bytes as a lower-case 8-4-4-4-12 UUID string (37 bytes). */
extern void zkr_format_uuid(const uint8_t bytes[16], char out[ZKR_UUID_LEN + 1]);

/*
 * Build the name prefix of a new node for a protocol; ZooKeeper appends
 * the sequence number.  uuid is a zkr_format_uuid string.
 *
 *	 curator-rw     exclusive "_c_<uuid>-__WRIT__", shared "_c_<uuid>-__READ__"
 *	 curator-mutex  exclusive "_c_<uuid>-lock-" (no shared mode)
 *	 kazoo          exclusive "<32 hex>__lock__", shared "<32 hex>__rlock__"
 *
 * Curator's "_c_<uuid>-" and kazoo's hex prefix both make the name unique,
 * so a create whose reply was lost can be found again.  Returns the length
 * written, or 0 if the protocol has no such mode (see
 * zkr_protocol_has_mode) or the buffer is too small.
 */
extern size_t zkr_protocol_prefix(ZkrProtocol protocol, ZkrMode mode,
								  const char *uuid, char *out, size_t outsize);

extern bool zkr_protocol_has_mode(ZkrProtocol protocol, ZkrMode mode);

/* Does child name start with the given node-name prefix? */
extern bool zkr_has_prefix(const char *name, const char *prefix);

/* What a contender should do, given the queue it sees. */
typedef struct ZkrDecision
{
	bool		found;			/* self is among the contenders */
	bool		held;			/* the lock is granted to self */
	int			self;			/* index of self in the sorted array */
	int			predecessor;	/* index of the node to watch, -1 if held */
	int			blockers;		/* conflicting contenders ahead of self */
} ZkrDecision;

/*
 * Decide for the contender named self, of the given mode, among the
 * contenders c[0..n-1] (any order: each is judged against self with
 * zkr_contender_cmp, so two contenders agree on which precedes the other
 * whatever their listings).  own[0..n_own-1] are other nodes of the same backend
 * under the same parent: they never conflict with self (PostgreSQL's
 * advisory-lock rule).
 *
 * Exclusive: held when no other contender precedes self; otherwise watch
 * the greatest preceding one.  Shared: held when no exclusive contender
 * precedes self; otherwise watch the greatest preceding exclusive one.
 * Only one node is ever watched (no herd effect).
 */
extern ZkrDecision zkr_decide(const ZkrContender *c, int n, const char *self,
							  ZkrMode mode, const char *const *own, int n_own);

/*
 * A backend holding a shared node (held) asks for exclusive with a new node
 * (self).  Returns the index of a contender of another client (not in own)
 * that is exclusive and sorts between the two, or -1 if there is none.
 * Such a contender waits for held, which the backend keeps while its
 * exclusive request waits for that contender: a certain deadlock.
 */
extern int	zkr_foreign_exclusive_between(const ZkrContender *c, int n,
										  const char *held, const char *self,
										  const char *const *own, int n_own);

/* One contender of a lock's queue as seen from outside (zk_lock_queue). */
typedef struct ZkrQueued
{
	ZkrMode		mode;
	bool		zklock;			/* written by zklock (its data says so) */
	int64_t		session;		/* ephemeralOwner */
	bool		holding;		/* out: granted by the recipe's rules */
	int			waits_for;		/* out: index of the nearest conflicting
								 * contender ahead (the one the recipe
								 * watches), -1 if holding */
} ZkrQueued;

/*
 * Mark which contenders of a queue (in recipe order) hold the lock, and
 * whom each of the others waits for.  Exclusive: nothing ahead of it;
 * shared: no exclusive ahead.  As in the recipe, a zklock backend's own
 * nodes (same session, both zklock's) never conflict; nodes of other
 * clients are judged by order alone, since one of their sessions may
 * serve many threads.  Linear in n.
 */
extern void zkr_mark_holding(ZkrQueued *q, int n);

/*
 * Counting semaphores (Curator InterProcessSemaphoreV2, kazoo Semaphore).
 * Both take an internal mutex (an exclusive lock) first; only a client
 * that has held it counts the leases, and only its holder waits on the
 * lease list, so one waiter at a time watches it (semaphore.c).
 *
 *	 layout    internal mutex (lock parent)   leases (parent, node name)
 *	 curator   <path>/locks, "_c_<uuid>-lock-" <path>/leases, "_c_<uuid>-lease-"
 *	           (sequential)                    EPHEMERAL_SEQUENTIAL
 *	 kazoo     <path>-__lock__, "<hex>__lock__" <path>, "<hex>" EPHEMERAL
 *
 * Both curator protocols (curator-rw, curator-mutex) use Curator's layout.
 */
typedef enum ZkrSemPart
{
	ZKR_SEM_MUTEX,				/* the internal mutex */
	ZKR_SEM_LEASE				/* a lease */
} ZkrSemPart;

/*
 * The parent path of a part of the semaphore at path (full path, no
 * trailing '/').  Returns the length written, 0 if it does not fit.
 */
extern size_t zkr_semaphore_parent(ZkrProtocol protocol, ZkrSemPart part,
								   const char *path, char *out,
								   size_t outsize);

/* The node-name prefix of a part (the whole name of a kazoo lease). */
extern size_t zkr_semaphore_prefix(ZkrProtocol protocol, ZkrSemPart part,
								   const char *uuid, char *out,
								   size_t outsize);

/* Does the layout create its lease first and count after (Curator)? */
extern bool zkr_semaphore_counts_after_create(ZkrProtocol protocol);

typedef enum ZkrSemDecision
{
	ZKR_SEM_HELD,				/* the lease holds */
	ZKR_SEM_WAIT,				/* too many leases: wait for a change */
	ZKR_SEM_MISSING				/* our lease is not among them */
} ZkrSemDecision;

/*
 * Curator's rule, applied after creating the lease self, on a listing of
 * the same session (zklock's first count comes right after it let the
 * internal mutex go): held when the lease parent's children (all of
 * them, whatever their names, as Curator counts) number at most
 * max_holders.
 */
extern ZkrSemDecision zkr_semaphore_decide(const char *const *children,
										   int n, const char *self,
										   int max_holders);

/*
 * kazoo's rule, applied by the holder of the internal mutex before it
 * creates a lease: there is room when fewer than max_holders children
 * exist.
 */
extern bool zkr_semaphore_has_room(int n_children, int max_holders);

/*
 * kazoo records max_leases as decimal text in the semaphore node's data
 * and compares it with int(data): returns true and sets *value if data
 * (len bytes) is an integer by Python's int() (surrounding white space,
 * a sign, digits with single underscores between them), false if it is
 * anything else (kazoo then ignores it).  A number beyond int64 sets
 * *value to INT64_MAX or INT64_MIN.
 */
extern bool zkr_parse_max_leases(const char *data, int len, int64_t *value);

/* "exclusive" / "shared" / "semaphore" / "none" */
extern const char *zkr_mode_name(ZkrMode mode);

#endif							/* ZKLOCK_RECIPE_H */
