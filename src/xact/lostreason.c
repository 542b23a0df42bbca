/*-------------------------------------------------------------------------
 *
 * lostreason.c
 *	  What is known about a lost zklock lock -- why it was lost and when --
 *	  and the ERROR that tells the user.
 *
 * A user whose COMMIT fails with 40001 because a lock was lost has to
 * decide what to do: run the transaction again, acknowledge a session-
 * level loss, or look at ZooKeeper.  So the error names the lock, says
 * what happened with the time it happened (the session's expiry, seen by
 * the session layer, with how long the connection had been gone before;
 * or when the deletion of the node was noticed; who asked for it back),
 * and what to do next for the lock's scope.
 *
 * src/xact/lostreason.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "xact/locktable_int.h"
#include "printable.h"
#include "session/session.h"

/*
 * A backend that was frozen (stopped, swapped out) past the session
 * timeout sees its connection go and the expiry announced in the same
 * moment on waking: "after 0.0 s without a connection" would read as if
 * the session expired with no outage at all, so below this the DETAIL
 * says only when it expired.  (A negative span, clocks stepped back, is
 * left out too.)
 */
#define NO_OUTAGE_US	(100 * 1000)

void
zkl_record_loss(ZklLock *lock, ZklLost why)
{
	lock->lost = why;
	lock->lost_at = GetCurrentTimestamp();
	lock->expired_at = 0;
	lock->unreachable_since = 0;
	lock->clock_timeout_ms = 0;
	if (why == ZKL_LOST_CLOCK)
		(void) zks_clock_losses(&lock->expired_at, &lock->clock_timeout_ms);
	if (why == ZKL_LOST_SESSION &&
		zks_session_expiry(lock->session_id, &lock->expired_at,
						   &lock->unreachable_since) &&
		lock->expired_at - lock->unreachable_since < NO_OUTAGE_US)
		lock->unreachable_since = 0;
}

/*
 * A session-level loss first: it fails every commit until acknowledged,
 * so its HINT is the one the user needs.  Then the earliest noticed, then
 * by name, so that the same losses give the same message.
 */
bool
zkl_report_before(const ZklLock *a, const ZklLock *b)
{
	bool		a_session = a->session_count > 0;
	bool		b_session = b->session_count > 0;
	int			cmp;

	if (a_session != b_session)
		return a_session;
	if (a->lost_at != b->lost_at)
		return a->lost_at < b->lost_at;
	cmp = strcmp(a->key.resource, b->key.resource);
	if (cmp != 0)
		return cmp < 0;
	return a->key.mode < b->key.mode;
}

static int
lost_errmsg(ZklLock *lock, int others)
{
	if (others == 0 && lock->lost == ZKL_LOST_REVOKED)
		return errmsg("%s zklock on \"%s\" was revoked",
					  zkr_mode_name(lock->key.mode), lock->key.resource);
	if (others == 0)
		return errmsg("%s zklock on \"%s\" was lost",
					  zkr_mode_name(lock->key.mode), lock->key.resource);
	return errmsg_plural("%s zklock on \"%s\" and %d other zklock lock were lost",
						 "%s zklock on \"%s\" and %d other zklock locks were lost",
						 others,
						 zkr_mode_name(lock->key.mode), lock->key.resource,
						 others);
}

/*
 * Who asked for the lock back, and when, as the node's watch read it: a
 * zklock backend names itself by its owner line, any other client only
 * by the word it wrote.  Both come from ZooKeeper, so they are cleaned
 * (printable.h).
 */
static int
revoked_errdetail(ZklLock *lock)
{
	ZksRevoke	r;
	char		by[ZKS_REVOKE_BY_MAX];
	TimestampTz at;

	if (!zks_watch_revoke(lock->node, &r) || !r.requested)
		return errdetail("Node \"%s\" was asked back and given back (noticed at %s).",
						 lock->node, timestamptz_to_str(lock->lost_at));
	zk_copy_printable(by, sizeof(by), r.by, strlen(r.by));
	at = r.at != 0 ? r.at : lock->lost_at;
	if (strncmp(by, "zklock ", 7) == 0)
		return errdetail("It was asked back at %s by %s; this backend gave node \"%s\" back (zklock.on_revoke is \"cancel\").",
						 timestamptz_to_str(at), by, lock->node);
	return errdetail("A client outside PostgreSQL wrote \"%s\" into node \"%s\" at %s; this backend gave the node back (zklock.on_revoke is \"cancel\").",
					 by, lock->node, timestamptz_to_str(at));
}

static int
lost_errdetail(ZklLock *lock)
{
	unsigned long long sid = (unsigned long long) lock->session_id;

	if (lock->lost == ZKL_LOST_CLOCK)
		return errdetail("No reply from the ZooKeeper ensemble to session 0x%llx for %.1f s, its session timeout, until %s: the session that held node \"%s\" counts as expired.",
						 sid, (double) lock->clock_timeout_ms / 1000.0,
						 timestamptz_to_str(lock->expired_at), lock->node);
	if (lock->lost == ZKL_LOST_REVOKED)
		return revoked_errdetail(lock);
	if (lock->lost == ZKL_LOST_DELETED)
		return errdetail("Node \"%s\" was deleted from ZooKeeper while the lock was held (noticed at %s).",
						 lock->node, timestamptz_to_str(lock->lost_at));
	if (lock->expired_at != 0 && lock->unreachable_since != 0)
		return errdetail("The ZooKeeper session 0x%llx that held node \"%s\" expired at %s, after %.1f s without a connection to the ensemble.",
						 sid, lock->node, timestamptz_to_str(lock->expired_at),
						 (double) (lock->expired_at - lock->unreachable_since) /
						 USECS_PER_SEC);
	if (lock->expired_at != 0)
		return errdetail("The ZooKeeper session 0x%llx that held node \"%s\" expired at %s.",
						 sid, lock->node, timestamptz_to_str(lock->expired_at));
	/* the session ended some other way (authentication failed, replaced) */
	return errdetail("The ZooKeeper session 0x%llx that held node \"%s\" ended; the loss was noticed at %s.",
					 sid, lock->node, timestamptz_to_str(lock->lost_at));
}

/*
 * The fields of the loss's ERROR, set on the error being built: by
 * zkl_lost_error's ereport, or by failfast.c's error context callback on a
 * cancel that stood for the loss.
 */
int
zkl_lost_fields(ZklLock *lock, int others)
{
	ZklLock		expired;
	TimestampTz at;
	TimestampTz since;
	const char *unlock_fn;

	/*
	 * A node deleted, by the session's expiry as it turns out: the
	 * ensemble deletes a session's nodes when it expires it, and the
	 * notification of that deletion can reach a client that was cut off
	 * (or frozen) before the reconnect that reports the expiry.  Likewise
	 * a loss by the clock, which the reconnect confirms.  Once the expiry
	 * is known, it is the better account of what happened -- if the
	 * connection was already gone when the loss was noticed: a node an
	 * operator deleted an hour before an outage expired the session was
	 * lost at the deletion.
	 */
	if ((lock->lost == ZKL_LOST_DELETED || lock->lost == ZKL_LOST_CLOCK) &&
		zks_session_expiry(lock->session_id, &at, &since) &&
		since != 0 && since <= lock->lost_at)
	{
		expired = *lock;
		zkl_record_loss(&expired, ZKL_LOST_SESSION);
		expired.lost_at = lock->lost_at;
		lock = &expired;
	}

	unlock_fn = lock->key.mode == ZKR_MODE_SHARED ?
		"zk_unlock_shared" : lock->key.mode == ZKR_MODE_SEMAPHORE ?
		"zk_unlock_semaphore" : "zk_unlock";

	errcode(ERRCODE_T_R_SERIALIZATION_FAILURE);
	lost_errmsg(lock, others);
	lost_errdetail(lock);
	if (lock->session_count > 0)
		errhint("Acknowledge the loss with %s(%s) or zk_unlock_all(), then take the lock again; until then every commit of this session fails.",
				unlock_fn, quote_literal_cstr(lock->key.resource));
	else if (lock->lost == ZKL_LOST_REVOKED)
		errhint("Roll back; take the lock again once whoever asked for it is done with it.");
	else
		errhint("Roll back and run the transaction again: it takes the lock anew, and another holder may have run meanwhile.");
	return 0;
}

void
zkl_lost_error(ZklLock *lock, int others)
{
	ereport(ERROR, (zkl_lost_fields(lock, others)));
}
