/*-------------------------------------------------------------------------
 *
 * nudge.c
 *	  The reply nudge: a thread of the session layer that, when a reply
 *	  from ZooKeeper is late, sends one harmless read on the same
 *	  connection, so that a server that lost the wake-up of its commit
 *	  processor answers.
 *
 * Why.  ZooKeeper 3.8.0 (Debian 12's server) checks its CommitProcessor's
 * queues without the processor's lock and then waits on it; a request or
 * a commit that arrives in between loses its wake-up, and that server
 * answers nothing more on the connection until some other request or
 * commit reaches its processor (ZOOKEEPER-4537, fixed in 3.8.1 and
 * 3.9.0).  Every request of every session goes through the processor
 * (reads too, on followers and on the leader), so any request wakes it.
 * libzookeeper sends no ping while a reply is outstanding, so on a quiet
 * connection nothing comes: the client gives up on the connection at two
 * thirds of the session timeout, and the lock call, the COMMIT or -- for
 * the fire-and-forget delete of a release, sent while the releasing
 * backend goes idle -- the next holder's grant waits that long.  zklock
 * meets it far more often than sequential clients because it sends
 * requests back to back (the commit check's sync and exists; a release's
 * delete and the next call's create and listing).
 *
 * What.  Every request the session layer sends is counted here when it is
 * sent and when its completion runs.  While some reply is outstanding and
 * none has come for zklock.reply_nudge_delay, this thread sends
 * exists("/") without a watch: a read the server answers from memory,
 * which needs no permission and changes nothing.  Its arrival wakes the
 * stuck processor; the stuck request is then answered, and the nudge
 * after it.  A nudge is sent again after each further delay without a
 * reply, at most NUDGES_IN_FLIGHT at once, so a server that is merely
 * slow (a long fsync, a GC pause) gets a handful of reads, not a stream.
 * Replies that come in time cost two counter updates per request and no
 * request at all; the thread sleeps while nothing is outstanding.
 *
 * Why the count is right.  ZooKeeper answers a session's requests in the
 * order they were sent, and libzookeeper runs their completions in that
 * order (a connection loss fails every outstanding one, in order too).
 * So when a nudge's completion runs, every request sent before the nudge
 * has had its completion: the count of answered requests is set to at
 * least the count of requests sent before it.  That also repairs a
 * request counted as sent whose completion never runs (libzookeeper
 * failing it after it was queued): the count can be too high for one
 * nudge's time, never too low.  A request is counted after zoo_a*
 * returns, so a completion may run before its request is counted; the
 * difference is then briefly negative and is read as nothing outstanding.
 *
 * The thread also applies the server list the ensemble publishes
 * (session/ensemble.c says why here: zoo_set_servers resolves names on the
 * calling thread, which must not be the completion thread), and a
 * reloaded zklock.hosts that the postmaster published (session/hostslot.c):
 * looked at whenever the thread wakes, and with zklock preloaded it wakes
 * at least every three tenths of the session timeout while the session
 * is open, so that a backend waiting for a lock (which holds none, so no
 * loss clock ticks for it) or holding none follows too.
 *
 * The thread rule holds: this thread and the completions here call
 * nothing of PostgreSQL.  The thread is started with every signal blocked
 * (PostgreSQL's handlers assume the main thread), and it calls zoo_aexists
 * under zks_mutex with the handle checked, as the clean-up tasks do; the
 * backend stops and joins it before zookeeper_close.
 *
 * A nudge cannot hide a dead server: libzookeeper's receive timeout counts
 * from the last bytes received, and a server that answers nothing answers
 * no nudge either.
 *
 * The loss clock.  While the backend holds a lock, this thread also tells
 * when the session must count as expired although no server said so: a
 * backend cut off from the ensemble hears of its expiry only when it
 * reaches a server again, which may be never, while the statement under
 * the lock runs on.  The leader expires a session a session timeout after
 * it last heard from it; we cannot see when that was, but we can see when
 * the leader last answered us.  So while holding, the thread sends a sync
 * of "/" after three tenths of the negotiated timeout without any request
 * of ours.  This replaces libzookeeper's ping, which it sends after a
 * third of the timeout without sending anything: ours comes first, so the
 * ping never does (a tenth more requests than the pings, not twice as
 * many).  A sync is answered only once it has reached the leader: a follower cut off from the leader, which
 * keeps answering reads, cannot answer it.  When no reply of any kind
 * has come for the negotiated timeout, the session counts as expired
 * (session/cancel.c cancels the statement under the lock).  The leader
 * touched the session no later than it answered the last sync, plus the
 * time our later requests took to reach it, so this comes at most about
 * a third of the timeout before the leader's own expiry, and no later than
 * the timeout after the cut: before another client can be granted the
 * lock (that takes the expiry, a delete, a notification and a listing).
 * After an outage of the whole ensemble it declares a loss that was not
 * one (no leader expires anything then): safe, and the node is still
 * deleted at the release, since the session may live on.
 *
 * src/session/nudge.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>

#include <zookeeper.h>

#include "session/session_int.h"

/* nudges sent while none has been answered, at most */
#define NUDGES_IN_FLIGHT 4

/* the first idle nudge of a wait for a watch, after this much quiet */
#define IDLE_NUDGE_FIRST_MS 100

/*
 * Shared by the backend (sending), the completion thread (replies, and
 * the clean-up tasks it sends) and the nudge thread, under nudge_mutex, a
 * leaf lock: nothing else is taken while it is held.  Lock order where
 * both are held: zks_mutex, then nudge_mutex.
 */
static pthread_mutex_t nudge_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nudge_cond;
static bool cond_ready = false;
static int64_t sent_count = 0;		/* requests sent */
static int64_t answered_count = 0;	/* completions run */
static int64_t progress_ns = 0;		/* last reply, or first of a burst */
static int64_t last_nudge_ns = 0;
static int	in_flight = 0;			/* nudges not yet answered */
static int	delay_ms = 0;			/* 0: never nudge */
static bool stopping = false;
static bool idle_waiting = false;	/* the thread sleeps with nothing
									 * outstanding */
static uint64 nudges_sent = 0;		/* for zk_status() */
static int64_t last_sent_ns = 0;	/* the last request sent */
static int64_t last_reply_ns = 0;	/* the last completion of any request */
static int	timeout_ms = 0;			/* negotiated at the last connect */
static bool holding = false;		/* the backend holds a lock */
static bool declared = false;		/* lost by the clock since last_reply_ns */
static bool heartbeat_out = false;	/* a heartbeat sync awaits its reply */
static int64_t idle_gap_ms = IDLE_NUDGE_FIRST_MS;	/* see zkn_idle_tick */
static int64_t held_due_ns = 0;		/* the first held node's watch to send
									 * (session/watch.c); 0: none */
static int64_t sleeping_until = 0;	/* the thread's wake-up while it sleeps
									 * (INT64_MAX: none); 0 while awake */
static bool alive = false;			/* the thread runs and takes requests */
static bool apply_requested = false;	/* a server list to apply */
static bool apply_waiting = false;	/* ... once nothing is in flight */
static uint64 file_generation_seen = 0;	/* the nudge thread's own */

static bool thread_running = false;	/* backend-only */
static pthread_t nudge_thread;

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The thread's clock, for the deadlines given to it (any thread). */
int64_t
zkn_now_ns(void)
{
	return now_ns();
}

/* A request went out (any thread).  Its completion must call zkn_answered. */
void
zkn_sent(void)
{
	pthread_mutex_lock(&nudge_mutex);
	sent_count++;
	last_sent_ns = now_ns();
	idle_gap_ms = IDLE_NUDGE_FIRST_MS;
	if (sent_count - answered_count == 1)
	{
		/* the first of a burst: the clock starts now */
		progress_ns = now_ns();
		if (idle_waiting)
			pthread_cond_signal(&nudge_cond);
	}
	pthread_mutex_unlock(&nudge_mutex);
}

/*
 * A completion ran with this code (nudge_mutex held).  The loss clock
 * counts only what a server said: libzookeeper fails the outstanding
 * requests itself (connection loss, a closing handle) when a connection
 * ends, and a backend that keeps asking through an outage would otherwise
 * keep the clock from ever running out.  (Codes from ZAPIERROR down are
 * the server's answers; those above, but ZOK, the client's own.)
 */
static void
replied_locked(int zrc)
{
	progress_ns = now_ns();
	if (zrc == ZOK || zrc <= ZAPIERROR)
	{
		last_reply_ns = progress_ns;
		declared = false;
	}
}

/*
 * A watch notification came (the session watcher, zks_mutex held): the
 * server spoke, as a reply does.  A lock granted by a notification (the
 * predecessor's deletion) after a long wait with nothing to reply to
 * would otherwise start the loss clock from the wait's last reply, long
 * past, and be declared lost at once.  The server that sends a
 * notification has just applied the leader's deletion, so it was in
 * touch with the leader then, as a sync's answer shows.
 */
void
zkn_heard(void)
{
	pthread_mutex_lock(&nudge_mutex);
	replied_locked(ZOK);
	pthread_mutex_unlock(&nudge_mutex);
}

/*
 * Nothing in flight any more, and a server list waits for that
 * (nudge_mutex held): the thread applies it now.
 */
static void
quiet_locked(void)
{
	if (apply_waiting && sent_count - answered_count <= 0 && in_flight <= 0)
	{
		apply_waiting = false;
		apply_requested = true;
		if (cond_ready)
			pthread_cond_signal(&nudge_cond);
	}
}

/* A completion ran (completion thread). */
void
zkn_answered(int zrc)
{
	pthread_mutex_lock(&nudge_mutex);
	answered_count++;
	replied_locked(zrc);
	quiet_locked();
	pthread_mutex_unlock(&nudge_mutex);
}

/*
 * Is a request of the session's in flight (sent, or queued, and its
 * completion not yet run)?  With zks_mutex held, under which every
 * request is sent and counted, the answer holds until it is released.
 */
bool
zkn_outstanding(void)
{
	bool		busy;

	pthread_mutex_lock(&nudge_mutex);
	busy = sent_count - answered_count > 0 || in_flight > 0;
	pthread_mutex_unlock(&nudge_mutex);
	return busy;
}

/*
 * The session is connected (again), with this negotiated timeout: a
 * server accepted it, so it was alive a moment ago, and a reply is due
 * from now on.
 */
void
zkn_connected(int negotiated_ms)
{
	pthread_mutex_lock(&nudge_mutex);
	replied_locked(ZOK);
	timeout_ms = negotiated_ms;
	if (cond_ready)
		pthread_cond_signal(&nudge_cond);
	pthread_mutex_unlock(&nudge_mutex);
}

/*
 * The backend holds a lock, or no longer does (backend).  The thread is
 * woken only when the clock must start and the thread would sleep past
 * the clock's first heartbeat: with no deadline, or towards the reply
 * nudge's when zklock.reply_nudge_delay is longer than three tenths of
 * the session timeout.  Any earlier deadline comes no later than the
 * clock needs, and the thread looks again then.  A lock cycle (hold, then
 * release) would otherwise cost two wake-ups of this thread, and every
 * cycle of a busy job pays them (with the wake-ups of the backend that
 * session.c spares, 10-20 % of a lock cycle's time measured alone, on
 * against off).  A clock stopped by the release is noticed at the next
 * deadline, where the thread finds nothing due and sleeps without one.
 */
void
zkn_set_holding(bool now_holding)
{
	pthread_mutex_lock(&nudge_mutex);
	if (holding != now_holding)
	{
		holding = now_holding;
		if (now_holding && cond_ready && sleeping_until != 0 &&
			(sleeping_until == INT64_MAX ||
			 sleeping_until > now_ns() + (int64_t) timeout_ms * 1000000 * 3 / 10))
			pthread_cond_signal(&nudge_cond);
	}
	pthread_mutex_unlock(&nudge_mutex);
}

/*
 * A held node's watch is to be sent at due_ns (backend; see
 * session/watch.c).  The thread is woken only if it would sleep well past
 * that: a backend taking locks wakes it at the first request of every
 * burst (zkn_sent), and it then sleeps for the reply nudge's delay, which
 * ends before a watch asked for after that burst is due.  So a busy job's
 * lock cycles add no wake-up of their own; an idle holder's watch waits
 * at most the slack more.
 */
#define HELD_WATCH_SLACK_NS (10 * (int64_t) 1000000)

void
zkn_held_watch_due(int64_t due)
{
	pthread_mutex_lock(&nudge_mutex);
	if (held_due_ns == 0 || due < held_due_ns)
		held_due_ns = due;
	if (sleeping_until != 0 && sleeping_until > due + HELD_WATCH_SLACK_NS &&
		cond_ready)
		pthread_cond_signal(&nudge_cond);
	pthread_mutex_unlock(&nudge_mutex);
}

/* The earlier of two wake-ups, either -1 (none). */
static int64_t
earlier(int64_t a, int64_t b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return Min(a, b);
}

static void
nudge_completion(int rc, const struct Stat *stat, const void *data)
{
	int64_t		before = (int64_t) (intptr_t) data;

	pthread_mutex_lock(&nudge_mutex);
	in_flight--;
	/* every request sent before the nudge has been answered (see above) */
	if (answered_count < before)
		answered_count = before;
	replied_locked(rc);
	quiet_locked();
	pthread_mutex_unlock(&nudge_mutex);
}

static void
heartbeat_completion(int rc, const char *value, const void *data)
{
	pthread_mutex_lock(&nudge_mutex);
	heartbeat_out = false;
	pthread_mutex_unlock(&nudge_mutex);
	zkn_answered(rc);
}

/*
 * The loss clock's heartbeat: a sync, counted as a request (so a late
 * reply to it is nudged like any other).  Called without nudge_mutex.
 */
static bool
send_heartbeat(void)
{
	int			zrc = ZINVALIDSTATE;

	pthread_mutex_lock(&zks_mutex);
	if (zh != NULL && !zh_closing && zk_state == ZOO_CONNECTED_STATE)
		zrc = zoo_async(zh, "/", heartbeat_completion, NULL);
	/* counted under zks_mutex, as every request (session/request.c) */
	if (zrc == ZOK)
		zkn_sent();
	pthread_mutex_unlock(&zks_mutex);
	return zrc == ZOK;
}

/*
 * What the loss clock asks of the thread now (nudge_mutex held): whether
 * to send a heartbeat or to declare the loss, and otherwise when to look
 * again (*wake, now_ns() time; -1 if the clock is stopped).
 */
typedef enum ClockDue
{
	CLOCK_NOTHING,
	CLOCK_HEARTBEAT,
	CLOCK_LOST
} ClockDue;

static ClockDue
clock_due_locked(int64_t now, int64_t *wake)
{
	int64_t		lost_at;
	int64_t		beat_at;

	*wake = -1;
	if (!holding || timeout_ms <= 0 || last_reply_ns == 0 || declared)
		return CLOCK_NOTHING;
	lost_at = last_reply_ns + (int64_t) timeout_ms * 1000000;
	if (now >= lost_at)
		return CLOCK_LOST;
	beat_at = Max(Max(last_reply_ns, last_sent_ns), last_nudge_ns) +
		(int64_t) timeout_ms * 1000000 * 3 / 10;
	if (!heartbeat_out && now >= beat_at)
		return CLOCK_HEARTBEAT;
	*wake = heartbeat_out ? lost_at : Min(lost_at, beat_at);
	return CLOCK_NOTHING;
}

/*
 * Send one nudge, telling its completion how many requests went before
 * it.  Called without nudge_mutex.
 */
static bool
send_nudge(int64_t before)
{
	bool		ok = false;

	pthread_mutex_lock(&zks_mutex);
	if (zh != NULL && !zh_closing && zk_state == ZOO_CONNECTED_STATE)
		ok = zoo_aexists(zh, "/", 0, nudge_completion,
						 (const void *) (intptr_t) before) == ZOK;
	pthread_mutex_unlock(&zks_mutex);
	return ok;
}

static void
timespec_at(struct timespec *ts, int64_t ns)
{
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
}

static void *
nudge_main(void *arg)
{
	pthread_mutex_lock(&nudge_mutex);
	while (!stopping)
	{
		int64_t		outstanding = sent_count - answered_count;
		int64_t		due;
		int64_t		clock_wake;
		struct timespec ts;

		if (held_due_ns != 0 && now_ns() >= held_due_ns)
		{
			int64_t		next;

			/* lock order: zks_mutex before nudge_mutex */
			held_due_ns = 0;
			pthread_mutex_unlock(&nudge_mutex);
			pthread_mutex_lock(&zks_mutex);
			next = zkw_send_due_held_locked(now_ns());
			pthread_mutex_unlock(&zks_mutex);
			pthread_mutex_lock(&nudge_mutex);
			if (next != 0 && (held_due_ns == 0 || next < held_due_ns))
				held_due_ns = next;
			continue;
		}

		/* a server list the ensemble published (session/ensemble.c) */
		if (apply_requested)
		{
			int			zrc;

			apply_requested = false;
			pthread_mutex_unlock(&nudge_mutex);
			zrc = zke_apply();
			pthread_mutex_lock(&nudge_mutex);
			/* requests in flight: again once they are answered */
			if (zrc == ZKE_BUSY)
			{
				apply_waiting = true;
				quiet_locked();
			}
			continue;
		}

		/* a reloaded configuration file (session/hostslot.c) */
		if (zkhs_generation() != file_generation_seen)
		{
			int			zrc;

			file_generation_seen = zkhs_generation();
			pthread_mutex_unlock(&nudge_mutex);
			zrc = zke_file_tick();
			pthread_mutex_lock(&nudge_mutex);
			/* requests in flight: again once they are answered */
			if (zrc == ZKE_BUSY)
			{
				apply_waiting = true;
				quiet_locked();
			}
			continue;
		}

		switch (clock_due_locked(now_ns(), &clock_wake))
		{
			case CLOCK_LOST:
				declared = true;
				pthread_mutex_unlock(&nudge_mutex);
				zksc_clock_lost(timeout_ms);
				pthread_mutex_lock(&nudge_mutex);
				continue;
			case CLOCK_HEARTBEAT:
				heartbeat_out = true;
				last_nudge_ns = now_ns();	/* (spaces the next one) */
				pthread_mutex_unlock(&nudge_mutex);
				if (!send_heartbeat())
				{
					pthread_mutex_lock(&nudge_mutex);
					heartbeat_out = false;
					/* not connected: no beat until a reply or a connect */
					continue;
				}
				pthread_mutex_lock(&nudge_mutex);
				continue;
			case CLOCK_NOTHING:
				break;
		}

		if (outstanding <= 0 || delay_ms <= 0)
		{
			/*
			 * Nothing to nudge: sleep until a request is sent (zkn_sent
			 * signals while idle_waiting) or the loss clock is due.  The
			 * clock's timed sleep must be woken by a send too: sleeping
			 * through it left a stuck reply un-nudged until the next
			 * heartbeat (test_wakeup met 608 ms with no write anywhere).
			 */
			clock_wake = earlier(clock_wake, held_due_ns != 0 ? held_due_ns : -1);
			idle_waiting = true;
			if (clock_wake < 0 && zkhs_generation() != 0 && timeout_ms > 0)
			{
				/*
				 * No clock, but zklock is preloaded: look at the published
				 * zklock.hosts (session/hostslot.c) at the heartbeat's
				 * pace all the same.  A backend waiting for a lock holds
				 * none, so without this its session stayed on a server
				 * the reload had left out, and lost its place in the
				 * queue once the last server of its old list stopped
				 * (test_static_rolling: the waiter still on its server
				 * 60 s after the reload).  sleeping_until stays "no
				 * deadline": what wakes a sleep without one
				 * (zkn_set_holding, zkn_held_watch_due) still does.
				 */
				timespec_at(&ts, now_ns() +
							(int64_t) timeout_ms * 1000000 * 3 / 10);
				sleeping_until = INT64_MAX;
				(void) pthread_cond_timedwait(&nudge_cond, &nudge_mutex, &ts);
			}
			else if (clock_wake < 0)
			{
				sleeping_until = INT64_MAX;
				pthread_cond_wait(&nudge_cond, &nudge_mutex);
			}
			else
			{
				timespec_at(&ts, clock_wake);
				sleeping_until = clock_wake;
				(void) pthread_cond_timedwait(&nudge_cond, &nudge_mutex, &ts);
			}
			sleeping_until = 0;
			idle_waiting = false;
			continue;
		}
		due = Max(progress_ns, last_nudge_ns) + (int64_t) delay_ms * 1000000;
		if (in_flight < NUDGES_IN_FLIGHT && now_ns() >= due)
		{
			int64_t		before = sent_count;
			bool		ok;

			in_flight++;
			last_nudge_ns = now_ns();
			pthread_mutex_unlock(&nudge_mutex);
			ok = send_nudge(before);
			pthread_mutex_lock(&nudge_mutex);
			if (ok)
				nudges_sent++;
			else
				in_flight--;	/* not connected: tried after the delay */
			continue;
		}
		if (in_flight >= NUDGES_IN_FLIGHT)
			due = now_ns() + (int64_t) delay_ms * 1000000;
		if (clock_wake >= 0)
			due = Min(due, clock_wake);
		if (held_due_ns != 0)
			due = Min(due, held_due_ns);
		timespec_at(&ts, due);
		sleeping_until = due;
		(void) pthread_cond_timedwait(&nudge_cond, &nudge_mutex, &ts);
		sleeping_until = 0;
	}
	pthread_mutex_unlock(&nudge_mutex);
	return NULL;
}

/*
 * Start the thread for a new handle (backend), with the delay in ms (0:
 * the thread never nudges).  Returns false if the thread could not be
 * started: the session then works as it would without the nudge.
 */
bool
zkn_start(int delay, size_t stack_size)
{
	pthread_attr_t attr;
	sigset_t	all;
	sigset_t	old;
	int			rc;

	Assert(!thread_running);
	pthread_mutex_lock(&nudge_mutex);
	if (!cond_ready)
	{
		pthread_condattr_t ca;

		/* the deadlines are on the monotonic clock */
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&nudge_cond, &ca);
		pthread_condattr_destroy(&ca);
		cond_ready = true;
	}
	sent_count = answered_count = 0;
	in_flight = 0;
	progress_ns = last_nudge_ns = 0;
	last_reply_ns = 0;
	timeout_ms = 0;
	declared = heartbeat_out = false;
	held_due_ns = sleeping_until = 0;
	delay_ms = delay;
	stopping = false;
	file_generation_seen = zkhs_generation();
	pthread_mutex_unlock(&nudge_mutex);

	if (pthread_attr_init(&attr) != 0)
		return false;
	(void) pthread_attr_setstacksize(&attr, stack_size);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&nudge_thread, &attr, nudge_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	thread_running = (rc == 0);
	if (thread_running)
	{
		pthread_mutex_lock(&nudge_mutex);
		alive = true;
		pthread_mutex_unlock(&nudge_mutex);
	}
	return thread_running;
}

/*
 * Have the thread apply the newest server list decided (any thread but
 * the nudge thread; zks_mutex may be held).  False if there is no thread
 * to do it: the caller applies it itself.  The thread takes it up
 * however long its own sleep was to be (the condition is signalled).
 */
/*
 * The same, when the caller found requests in flight: the thread applies
 * the list once they are all answered.  False without a thread.
 */
bool
zkn_apply_when_quiet(void)
{
	bool		taken = false;

	pthread_mutex_lock(&nudge_mutex);
	if (alive && !stopping)
	{
		apply_waiting = true;
		quiet_locked();
		taken = true;
	}
	pthread_mutex_unlock(&nudge_mutex);
	return taken;
}

/* Does the thread run (and take lists to apply)?  Any thread. */
bool
zkn_running(void)
{
	bool		running;

	pthread_mutex_lock(&nudge_mutex);
	running = alive && !stopping;
	pthread_mutex_unlock(&nudge_mutex);
	return running;
}

bool
zkn_request_apply(void)
{
	bool		taken = false;

	pthread_mutex_lock(&nudge_mutex);
	if (alive && !stopping)
	{
		apply_requested = true;
		pthread_cond_signal(&nudge_cond);
		taken = true;
	}
	pthread_mutex_unlock(&nudge_mutex);
	return taken;
}

/* A changed zklock.reply_nudge_delay (backend). */
void
zkn_set_delay(int delay)
{
	pthread_mutex_lock(&nudge_mutex);
	if (delay_ms != delay)
	{
		delay_ms = delay;
		if (cond_ready)
			pthread_cond_signal(&nudge_cond);
	}
	pthread_mutex_unlock(&nudge_mutex);
}

/* Stop and join the thread (backend), before the handle is closed. */
void
zkn_stop(void)
{
	if (!thread_running)
		return;
	pthread_mutex_lock(&nudge_mutex);
	stopping = true;
	alive = false;
	apply_requested = apply_waiting = false;	/* the handle closes */
	pthread_cond_signal(&nudge_cond);
	pthread_mutex_unlock(&nudge_mutex);
	pthread_join(nudge_thread, NULL);
	thread_running = false;
}

/*
 * The idle nudge, for a backend that waits for a watch with no reply
 * outstanding (zks_wait_event).  A stall the reply nudge cannot see: the
 * contended test (test_wakeup) met, about once in ten minutes of cycles,
 * all four clients waiting on their watches for 0.67 s -- a third of the
 * session timeout, the interval at which libzookeeper pings a quiet
 * connection -- with no connection timed out: the notification they
 * waited for came only when some waiting client's ping reached its
 * server, which then ran what it had not yet run.  So a waiting backend
 * sends, itself, what that ping did, sooner: exists("/") after
 * IDLE_NUDGE_FIRST_MS without any request, reply or nudge, then after
 * twice that, and so on while the gap is shorter than libzookeeper's own
 * ping interval (ping_ms).  A long wait thus costs a handful of reads (6
 * for a wait of any length at the default 10 s session timeout), and a
 * request sent starts the series again.  zklock.reply_nudge_delay = 0
 * turns these off too.
 */

/* When the next idle nudge is due (now_ns() time), -1 if none will be. */
static int64_t
idle_due_ns_locked(int ping_ms)
{
	if (delay_ms <= 0 || idle_gap_ms >= ping_ms)
		return -1;
	return Max(Max(progress_ns, last_nudge_ns), last_sent_ns) +
		idle_gap_ms * 1000000;
}

/* Milliseconds until the next idle nudge is due; -1 if none will be. */
int
zkn_idle_due_ms(int ping_ms)
{
	int64_t		due;

	pthread_mutex_lock(&nudge_mutex);
	due = idle_due_ns_locked(ping_ms);
	pthread_mutex_unlock(&nudge_mutex);
	if (due < 0)
		return -1;
	return (int) Max((due - now_ns()) / 1000000, 0);
}

/*
 * Send the idle nudge if it is due (backend).  Nothing while a reply is
 * outstanding: the reply nudge's thread looks after that.
 */
void
zkn_idle_tick(int ping_ms)
{
	int64_t		now = now_ns();
	int64_t		due;
	int64_t		before;
	bool		ok;

	pthread_mutex_lock(&nudge_mutex);
	due = idle_due_ns_locked(ping_ms);
	if (due < 0 || now < due ||
		sent_count - answered_count > 0 || in_flight >= NUDGES_IN_FLIGHT)
	{
		pthread_mutex_unlock(&nudge_mutex);
		return;
	}
	in_flight++;
	last_nudge_ns = now;
	before = sent_count;
	idle_gap_ms *= 2;
	pthread_mutex_unlock(&nudge_mutex);

	ok = send_nudge(before);

	/*
	 * Not counted in zk_status().nudges: every wait longer than 100 ms
	 * sends some, on any server, while that counter tells of late
	 * replies.
	 */
	if (!ok)
	{
		pthread_mutex_lock(&nudge_mutex);
		in_flight--;
		pthread_mutex_unlock(&nudge_mutex);
	}
}

/* Nudges sent by this backend's sessions so far. */
uint64
zkn_nudges(void)
{
	uint64		n;

	pthread_mutex_lock(&nudge_mutex);
	n = nudges_sent;
	pthread_mutex_unlock(&nudge_mutex);
	return n;
}
