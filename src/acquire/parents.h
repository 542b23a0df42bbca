/*-------------------------------------------------------------------------
 *
 * parents.h
 *	  Lock parents and the levels above them (parents.c), for acquire.c and
 *	  lockset.c.
 *
 * src/acquire/parents.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_PARENTS_H
#define ZKLOCK_PARENTS_H

#include "acquire/acquire.h"

/* Is the level at path known to exist in this session? */
extern bool zkp_known(const char *path);

/* It exists (a create into it or of it succeeded). */
extern void zkp_remember(const char *path);

/* What was known was wrong (a NONODE): forget everything. */
extern void zkp_forget_all(void);

/*
 * The answer to a level's create: OK or NODEEXISTS, it exists; NONODE, a
 * level above went (everything is forgotten).
 */
extern void zkp_answered(const char *path, ZksRc rc);

/*
 * Append to paths, top down, every level of a->parent not known to exist,
 * the parent included.
 */
extern List *zkp_needed(ZkaAttempt *a, List *paths);

/*
 * Send the creates (CONTAINER) of the levels of a->parent not known to
 * exist (with include_parent, the parent too) into a->preqs; zkp_check
 * waits for their answers (ERROR for anything but OK, NODEEXISTS, NONODE
 * and a lost reply), zkp_done hands them back.
 */
extern void zkp_send(ZkaAttempt *a, bool include_parent);
extern void zkp_check(ZkaAttempt *a);
extern void zkp_done(ZkaAttempt *a);

#endif							/* ZKLOCK_PARENTS_H */
