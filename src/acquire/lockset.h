/*-------------------------------------------------------------------------
 *
 * lockset.h
 *	  Taking a set of locks in one call: every one or none, in one
 *	  canonical order, with the requests pipelined.
 *
 * src/acquire/lockset.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_LOCKSET_H
#define ZKLOCK_LOCKSET_H

#include "acquire/acquire.h"

/*
 * Take the n locks of atts (each begun with zka_begin, its parent set
 * with zka_set_node, all in one mode and with one deadline).  Sorts atts
 * into the canonical order (by lock parent path).  Returns true when
 * every node holds; false for a try (try_only) that found one taken,
 * *blocked then being its attempt.  On
 * false, and on ERROR, the caller must zka_abandon() every attempt; the
 * requests this function had in flight are already handed back.
 */
extern bool zkm_acquire_set(ZkaAttempt **atts, int n, ZkaAttempt **blocked);

#endif							/* ZKLOCK_LOCKSET_H */
