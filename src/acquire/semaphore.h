/*-------------------------------------------------------------------------
 *
 * semaphore.h
 *	  Counting semaphores: at most N holders of a resource at once, across
 *	  every cluster, in the node layout of Curator's InterProcessSemaphoreV2
 *	  or of kazoo's Semaphore (zklock.protocol).
 *
 * src/acquire/semaphore.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_SEMAPHORE_H
#define ZKLOCK_SEMAPHORE_H

#include "acquire/acquire.h"

/*
 * Take a lease of the semaphore on relpath (under zklock.root) that allows
 * max_holders at once.  a is an attempt begun with zka_begin (mode
 * ZKR_MODE_SEMAPHORE) and connected; on true, a->node is our lease and
 * the caller owns it (zka_finish); on false (a try that found no room) or
 * ERROR the caller must zka_abandon(a).  The internal mutex is released
 * here in every case.
 */
extern bool zksem_acquire(ZkaAttempt *a, const char *relpath,
						  int max_holders);

#endif							/* ZKLOCK_SEMAPHORE_H */
