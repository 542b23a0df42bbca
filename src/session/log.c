/*-------------------------------------------------------------------------
 *
 * log.c
 *	  libzookeeper's own log lines, routed into PostgreSQL's log: in its
 *	  format (log_line_prefix, csvlog, jsonlog), at level LOG, naming the
 *	  ZooKeeper session, and rate-limited.
 *
 * Left alone, libzookeeper writes its lines to the process's stderr in a
 * format of its own ("2026-...,371:15797(0x7f..):ZOO_ERROR@check_events@
 * 2985: Socket ... Connection refused"), from its I/O thread: about ten a
 * second per backend while the ensemble is unreachable.  Here the
 * handle's log callback (and, for the lines the library logs without a
 * handle, its log stream) copies each line into a fixed ring under a
 * mutex of its own.  Those run on the library's threads (and on the
 * backend's, inside zoo_* calls, with zks_mutex held), so they call
 * nothing of PostgreSQL, allocate nothing and take no other lock.  The
 * backend writes the ring out with ereport at safe points
 * (zks_log_drain): after every wait on its latch, at the start of every
 * connection attempt, in zk_status(), at the end of every statement and
 * when the handle closes.  A line logged while the backend is idle waits
 * in the ring until its next statement (or its exit); the line keeps the
 * library's time of it in a DETAIL.
 *
 * The rate limit: at most ZKSL_BURST lines are admitted per connection,
 * from one CONNECTED event to the next (so an outage, whatever its
 * length, writes at most ZKSL_BURST lines).  Lines past the budget, or
 * that find the ring full, are counted as suppressed; when the
 * connection comes back, the session ends or the handle closes, one line
 * says how many.  zk_status() shows the lines received and suppressed.
 *
 * The lines also tell how connections failed, which nothing else of the
 * library's API does: every line is read, suppressed or not, and a
 * socket error ("Socket [host:port] zk retcode=-4, errno=104(Connection
 * reset by peer): ...") logged while no connection was established is
 * counted (recipe/connfail.c reads the line), as a reset (errno 104,
 * ECONNRESET) or as another failure.  A TLS tunnel (stunnel) accepts the
 * TCP connection and resets it when it cannot reach or verify its
 * server, where a server that is down refuses (111) and one that is up
 * but not serving closes (libzookeeper's 112): when zks_connect gives up
 * and every failure was a reset, its 08001 says so (doc/04-operations.md,
 * "Encrypting the wire (TLS)").  The counts start again at every
 * CONNECTED event and new handle; with zklock.zookeeper_log_level = off
 * the library logs nothing and the 08001 keeps its general DETAIL.
 *
 * src/session/log.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <zookeeper.h>

#include "printable.h"
#include "recipe/connfail.h"
#include "session/session.h"
#include "session/session_int.h"

/* Lines admitted per connection (see above); tests rely on the figure. */
#define ZKSL_BURST 5

/* Lines held between two drains, and the room for one line's text. */
#define ZKSL_RING 16
#define ZKSL_TEXT 512
#define ZKSL_TIME 32

typedef struct ZkslLine
{
	ZksLogLevel level;
	int64		session_id;		/* the session's id when it was logged */
	char		time[ZKSL_TIME];	/* the library's time of it, or "" */
	char		text[ZKSL_TEXT];	/* "function@line: message" */
} ZkslLine;

/* Everything below is shared with libzookeeper's threads, under zksl_mutex. */
static pthread_mutex_t zksl_mutex = PTHREAD_MUTEX_INITIALIZER;
static ZkslLine ring[ZKSL_RING];
static int	ring_head = 0;		/* oldest line */
static int	ring_count = 0;
static uint64 lines_received = 0;	/* since the backend started */
static uint64 lines_suppressed = 0;
static int	admitted = 0;		/* lines admitted in this connection */
static uint64 suppressed_now = 0;	/* lines suppressed in this connection */
static uint64 summary_pending = 0;	/* suppressed in one that ended */
static int64 summary_session = 0;
static int64 current_session = 0;	/* set by the session watcher */
static bool connected = false;	/* between CONNECTED and a socket error */
static uint64 resets_now = 0;	/* connections reset before CONNECTED */
static uint64 failures_now = 0; /* other socket errors before CONNECTED */

/*
 * Backend only: whether libzookeeper's stream points here yet, and
 * whether this backend ever made a handle.  Before its first handle the
 * library has logged nothing here, so the drain at every statement's end
 * costs no lock in a backend that never used zklock.
 */
static bool stream_set = false;
static bool handle_made = false;

/* The level asked for (zklock.zookeeper_log_level); read by the threads. */
static volatile int log_level = ZKS_LOG_ERROR;

/* ----------------------------------------------------------------
 * Code that runs on libzookeeper's threads (and on the backend's inside
 * libzookeeper).  Nothing of PostgreSQL; only zksl_mutex.
 * ----------------------------------------------------------------
 */

/*
 * A socket error line (recipe/connfail.c): count it.  The first error of
 * an established connection ends it and is not counted: the counts are of
 * connections that never reached the session handshake's answer.  The
 * CONNECTED event comes from the completion thread, a little after the
 * I/O thread finished the handshake; an error in between is counted, as
 * a failure of a connection that the backend never saw established.
 * Called with zksl_mutex held.
 */
static void
count_failure_locked(const char *msg)
{
	ZkConnFailure f = zkcf_classify(msg);

	if (f == ZKCF_NONE)
		return;
	if (connected)
		connected = false;
	else if (f == ZKCF_RESET)
		resets_now++;
	else
		failures_now++;
}

/*
 * One line as log_message formats it: "<time>:<pid>(0x<tid>):ZOO_<LEVEL>@
 * <function>@<line>: <message>".  The time, pid and thread are
 * PostgreSQL's prefix's business; the time is kept for the DETAIL (the
 * line may be written later).  A line of another shape is kept whole.
 * msg is NUL-terminated, len its length.  Called with zksl_mutex held.
 */
static void
admit_locked(const char *msg, size_t len)
{
	static const struct
	{
		const char *tag;
		ZksLogLevel level;
	}			tags[] = {
		{"):ZOO_ERROR@", ZKS_LOG_ERROR},
		{"):ZOO_WARN@", ZKS_LOG_WARN},
		{"):ZOO_INFO@", ZKS_LOG_INFO},
		{"):ZOO_DEBUG@", ZKS_LOG_DEBUG},
	};
	ZkslLine   *line;
	const char *text = msg;
	ZksLogLevel level = ZKS_LOG_ERROR;

	lines_received++;
	count_failure_locked(msg);
	/* past the budget (only error and warning lines have one), or no room */
	if ((admitted >= ZKSL_BURST && log_level <= ZKS_LOG_WARN) ||
		ring_count == ZKSL_RING)
	{
		lines_suppressed++;
		suppressed_now++;
		return;
	}
	admitted++;

	line = &ring[(ring_head + ring_count) % ZKSL_RING];
	ring_count++;
	line->time[0] = '\0';
	for (int i = 0; i < lengthof(tags); i++)
	{
		const char *at = strstr(msg, tags[i].tag);	/* msg is terminated */

		if (at != NULL)
		{
			/* "2026-11-26 20:10:19,371" */
			if (at - msg > 23 && msg[4] == '-' && msg[10] == ' ')
				zk_copy_printable(line->time, sizeof(line->time), msg, 23);
			level = tags[i].level;
			text = at + strlen(tags[i].tag);
			break;
		}
	}
	line->level = level;
	line->session_id = current_session;
	zk_copy_printable(line->text, sizeof(line->text), text, len - (text - msg));
}

/* The handle's log callback (zookeeper_init2). */
void
zksl_callback(const char *message)
{
	pthread_mutex_lock(&zksl_mutex);
	admit_locked(message, strlen(message));
	pthread_mutex_unlock(&zksl_mutex);
}

/*
 * The library's log stream, for the lines it logs without a handle (and
 * so without its callback): every write is one or more whole lines, not
 * NUL-terminated.  Each is parsed from a terminated copy, cut to what a
 * ring entry keeps (the level tag comes within its first 60 bytes).
 */
static ssize_t
stream_write(void *cookie, const char *buf, size_t size)
{
	char		piece[ZKSL_TIME + ZKSL_TEXT + 64];
	size_t		start = 0;

	pthread_mutex_lock(&zksl_mutex);
	for (size_t i = 0; i <= size; i++)
	{
		if (i == size || buf[i] == '\n')
		{
			size_t		n = Min(i - start, sizeof(piece) - 1);

			if (n > 0)
			{
				memcpy(piece, buf + start, n);
				piece[n] = '\0';
				admit_locked(piece, n);
			}
			start = i + 1;
		}
	}
	pthread_mutex_unlock(&zksl_mutex);
	return size;
}

/*
 * From the session watcher (zks_mutex held): a session event.  A
 * connection made (again) renews the budget; one that ended, or the end
 * of the session, owes the count of what it suppressed.
 */
void
zksl_session_event_locked(zhandle_t *h, int state)
{
	const clientid_t *id = zoo_client_id(h);

	pthread_mutex_lock(&zksl_mutex);
	if (state == ZOO_CONNECTED_STATE ||
		state == ZOO_EXPIRED_SESSION_STATE ||
		state == ZOO_AUTH_FAILED_STATE)
	{
		if (suppressed_now > 0)
		{
			summary_pending += suppressed_now;
			summary_session = current_session;
		}
		suppressed_now = 0;
		admitted = 0;
	}
	if (state == ZOO_CONNECTED_STATE)
	{
		connected = true;
		resets_now = 0;
		failures_now = 0;
	}
	if (id != NULL && id->client_id != 0)
		current_session = id->client_id;
	pthread_mutex_unlock(&zksl_mutex);
}

/* ----------------------------------------------------------------
 * Backend side.
 * ----------------------------------------------------------------
 */

/* zklock.zookeeper_log_level's assign hook: libzookeeper's own filter. */
void
zks_log_set_level(int level)
{
	log_level = level;
	zoo_set_debug_level((ZooLogLevel) level);
}

/*
 * Before a handle is made: a new connection budget, the session id
 * unknown, and (once per backend) the library's stream pointed here.
 * zoo_set_debug_level(0) turns the library's logging off.
 */
void
zksl_handle_opening(void)
{
	handle_made = true;
	if (!stream_set)
	{
		cookie_io_functions_t io = {NULL, stream_write, NULL, NULL};
		FILE	   *f = fopencookie(NULL, "w", io);

		/* without it, lines logged with no handle go to stderr as before */
		if (f != NULL)
		{
			setvbuf(f, NULL, _IOLBF, 0);
			zoo_set_log_stream(f);
			stream_set = true;
		}
	}
	zoo_set_debug_level((ZooLogLevel) log_level);
	pthread_mutex_lock(&zksl_mutex);
	admitted = 0;
	current_session = 0;
	connected = false;
	resets_now = 0;
	failures_now = 0;
	pthread_mutex_unlock(&zksl_mutex);
}

/* After zookeeper_close: what the closed handle suppressed is owed. */
void
zksl_handle_closed(void)
{
	pthread_mutex_lock(&zksl_mutex);
	if (suppressed_now > 0)
	{
		summary_pending += suppressed_now;
		summary_session = current_session;
	}
	suppressed_now = 0;
	admitted = 0;
	pthread_mutex_unlock(&zksl_mutex);
	zks_log_drain();
}

void
zks_log_counts(uint64 *received, uint64 *suppressed)
{
	pthread_mutex_lock(&zksl_mutex);
	*received = lines_received;
	*suppressed = lines_suppressed;
	pthread_mutex_unlock(&zksl_mutex);
}

/*
 * How the connections of this handle failed since it opened or last
 * connected (see count_failure_locked); kept after the handle closed, for
 * the error that closed it.
 */
void
zksl_connect_failures(uint64 *resets, uint64 *failures)
{
	pthread_mutex_lock(&zksl_mutex);
	*resets = resets_now;
	*failures = failures_now;
	pthread_mutex_unlock(&zksl_mutex);
}

/* Write one line at LOG: the server log's, never the client's. */
static void
write_line(const ZkslLine *line)
{
	unsigned long long sid = (unsigned long long) line->session_id;

#define ZKSL_DETAIL (line->time[0] ? errdetail_log("The ZooKeeper client logged it at %s.", line->time) : 0)
	switch (line->level)
	{
		case ZKS_LOG_OFF:
		case ZKS_LOG_ERROR:
			ereport(LOG,
					(errmsg("ZooKeeper client error in session 0x%llx: %s",
							sid, line->text),
					 ZKSL_DETAIL, errhidestmt(true), errhidecontext(true)));
			break;
		case ZKS_LOG_WARN:
			ereport(LOG,
					(errmsg("ZooKeeper client warning in session 0x%llx: %s",
							sid, line->text),
					 ZKSL_DETAIL, errhidestmt(true), errhidecontext(true)));
			break;
		case ZKS_LOG_INFO:
			ereport(LOG,
					(errmsg("ZooKeeper client info in session 0x%llx: %s",
							sid, line->text),
					 ZKSL_DETAIL, errhidestmt(true), errhidecontext(true)));
			break;
		case ZKS_LOG_DEBUG:
			ereport(LOG,
					(errmsg("ZooKeeper client debug in session 0x%llx: %s",
							sid, line->text),
					 ZKSL_DETAIL, errhidestmt(true), errhidecontext(true)));
			break;
	}
#undef ZKSL_DETAIL
}

/*
 * Write what the library logged since the last drain.  Backend only, at
 * a safe point; the ring is never held while writing, and never raises
 * ERROR but for out of memory in ereport itself.
 */
void
zks_log_drain(void)
{
	static bool draining = false;
	ZkslLine	line;
	uint64		summary;
	int64		summary_sid;

	/* an ereport of ours that logs nothing of ZooKeeper's: no re-entry */
	if (draining || !handle_made)
		return;
	draining = true;
	PG_TRY();
	{
		for (;;)
		{
			bool		have = false;

			pthread_mutex_lock(&zksl_mutex);
			if (ring_count > 0)
			{
				line = ring[ring_head];
				ring_head = (ring_head + 1) % ZKSL_RING;
				ring_count--;
				have = true;
			}
			pthread_mutex_unlock(&zksl_mutex);
			if (!have)
				break;
			write_line(&line);
		}
		pthread_mutex_lock(&zksl_mutex);
		summary = summary_pending;
		summary_sid = summary_session;
		summary_pending = 0;
		pthread_mutex_unlock(&zksl_mutex);
		if (summary > 0)
			ereport(LOG,
					(errmsg_plural("%llu more line of the ZooKeeper client log was suppressed in session 0x%llx",
								   "%llu more lines of the ZooKeeper client log were suppressed in session 0x%llx",
								   (unsigned long) summary,
								   (unsigned long long) summary,
								   (unsigned long long) summary_sid),
					 errdetail_log("At most %d lines of the ZooKeeper client log are written per connection to ZooKeeper; zk_status() counts every line received and suppressed.",
								   ZKSL_BURST),
					 errhidestmt(true), errhidecontext(true)));
	}
	PG_FINALLY();
	{
		draining = false;
	}
	PG_END_TRY();
}
