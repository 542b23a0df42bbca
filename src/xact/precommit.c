/*-------------------------------------------------------------------------
 *
 * precommit.c
 *	  Before COMMIT or PREPARE TRANSACTION: refusing to commit on a lost
 *	  zklock lock.
 *
 * A transaction that relied on a lock that is gone must not commit.  What
 * the session layer already knows (a watch saw the node go, the session
 * expired, the loss clock ran out) fails the commit at once; with
 * zklock.verify_at_commit every held node is also confirmed with the
 * ensemble (commitcheck.c), failing closed when no answer comes.  The
 * lock table (locktable.c) holds the entries; lostreason.c words the
 * error; callorder.c decides which of zklock's callbacks runs this first.
 *
 * src/xact/precommit.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "monitor/stats.h"
#include "session/session.h"
#include "xact/commitcheck.h"
#include "xact/locktable.h"
#include "xact/locktable_int.h"
#include "xact/lookonly.h"
#include "zklock.h"

/*
 * Confirm every held node with the ensemble (commitcheck.c) and mark the
 * ones found gone.  Returns what zkc_confirm returns; if not ZKS_OK and
 * unconfirmed is not NULL, sets *unconfirmed to the lock to name of those
 * left unjudged and *others to how many more there are.
 */
ZksRc
zkl_confirm_held_nodes(TimestampTz deadline, bool wait_for_connection,
				   ZklLock **unconfirmed, int *others)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;
	ZklLock   **locks;
	ZkcNode    *nodes;
	int			n = 0;
	ZksRc		rc;

	locks = palloc(sizeof(ZklLock *) * (zkl_entry_count() + 1));
	nodes = palloc0(sizeof(ZkcNode) * (zkl_entry_count() + 1));
	zkl_seq_init(&status);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		zkl_mark_if_session_lost(lock);
		if (lock->lost == ZKL_LOST_NONE)
		{
			locks[n] = lock;
			nodes[n].path = lock->node;
			nodes[n].token = lock->token;
			n++;
		}
	}
	rc = zkc_confirm(nodes, n, deadline, wait_for_connection);
	if (unconfirmed != NULL)
	{
		*unconfirmed = NULL;
		*others = -1;
	}
	for (int i = 0; i < n; i++)
	{
		if (nodes[i].verdict == ZKC_LOST_SESSION)
			zkl_mark_lost(locks[i], ZKL_LOST_SESSION);
		else if (nodes[i].verdict == ZKC_LOST_DELETED)
			zkl_mark_lost(locks[i], ZKL_LOST_DELETED);
		else if (nodes[i].verdict == ZKC_UNKNOWN && unconfirmed != NULL)
		{
			if (*unconfirmed == NULL ||
				strcmp(locks[i]->key.resource, (*unconfirmed)->key.resource) < 0)
				*unconfirmed = locks[i];
			(*others)++;
		}
	}
	pfree(locks);
	pfree(nodes);
	return rc;
}

/*
 * Before COMMIT or PREPARE TRANSACTION: a transaction that relied on a
 * lock that is gone must not commit.  Known losses fail at once; with
 * zklock.verify_at_commit, every held node is confirmed with the ensemble
 * first (one round trip), waiting through a suspended connection at most
 * one session timeout, and failing closed if no answer comes.
 */
static void
verify_before_commit(void)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;
	ZklLock    *first = NULL;
	int			nlost = 0;
	ZklLock    *unconfirmed = NULL;
	int			others = 0;
	ZksRc		rc = ZKS_OK;

	/*
	 * What the session layer knows already (a watch saw the node go, or
	 * it was given back on request), also with the check off: code that
	 * ran at COMMIT outside any statement (deferred triggers) ran under
	 * a lock that may be gone.
	 */
	(void) zkl_fold_losses(NULL);
	if (zklock_verify_at_commit)
		rc = zkl_confirm_held_nodes(
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										zks_negotiated_timeout()), true,
			&unconfirmed, &others);

	/* every lost lock is counted; the error names one (lostreason.c) */
	zkl_seq_init(&status);
	while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
	{
		zkl_mark_if_session_lost(lock);
		if (lock->lost != ZKL_LOST_NONE)
		{
			if (first == NULL || zkl_report_before(lock, first))
				first = lock;
			nlost++;
		}
	}
	if (first != NULL)
	{
		/* counted against the lock named, as one refused commit */
		zkst_refused_commit(first->key.resource, first->key.mode);
		zkl_lost_error(first, nlost - 1);
	}
	if (rc != ZKS_OK)
	{
		if (unconfirmed != NULL)
			zkc_unconfirmed_error(rc, unconfirmed->key.resource,
								  unconfirmed->key.mode, others);
		zkc_unconfirmed_error(rc, NULL, ZKR_MODE_EXCLUSIVE, 0);
	}
}

/*
 * Before COMMIT or PREPARE TRANSACTION; run once per commit by whichever
 * zklock callback comes first (callorder.c).  PREPARE cannot take along a
 * transaction-level lock, which lives in this backend's session.
 */
void
zkl_pre_commit_checks(XactEvent event)
{
	HASH_SEQ_STATUS status;
	ZklLock    *lock;

	if (!zkl_have_locks())
		return;

	/*
	 * A transaction that only looked at zklock's state (zk_locks,
	 * zk_status(), zk_lock_queue) and has no transaction id committed
	 * nothing that a lock protects, so a DBA can look at a lost lock in
	 * autocommit; every other commit is checked, read-only ones too
	 * (lookonly.c says why).  It took no lock either: a lock function
	 * is no inspection, wherever it was called from (a fast-path call
	 * too); the test of transaction-level holds stays as a second guard.
	 */
	if (event == XACT_EVENT_PRE_COMMIT && zko_only_looked() &&
		!zkl_have_xact_holds())
		return;
	if (event == XACT_EVENT_PRE_PREPARE)
	{
		zkl_seq_init(&status);
		while ((lock = (ZklLock *) hash_seq_search(&status)) != NULL)
		{
			if (lock->xact_count > 0)
			{
				hash_seq_term(&status);
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds a transaction-level zklock lock"),
						 errdetail("The lock on \"%s\" lives in this backend's ZooKeeper session, which cannot outlive the backend.",
								   lock->key.resource),
						 errhint("Use a session-level lock (zk_session_lock_exclusive) and release it after COMMIT PREPARED.")));
			}
		}
	}
	/* a lost session-level lock must not commit through 2PC either */
	verify_before_commit();
}
