/*-------------------------------------------------------------------------
 *
 * ensemble.c
 *	  The session follows the ensemble's membership: the servers a
 *	  dynamic reconfiguration publishes in /zookeeper/config, and a
 *	  reload of zklock.hosts made while the backend holds locks, both
 *	  given to libzookeeper with zoo_set_servers() on the same session.
 *
 * Why.  A session lock may be held for days, and the servers it was
 * opened with may all be replaced meanwhile.  A new session would lose
 * every lock; zoo_set_servers() keeps the session (its id, password,
 * ephemeral nodes and watches) and only moves the connection when the
 * server it is on left the list, or, when the list grew, with the
 * probability 1 - old/new that spreads the sessions over the grown
 * ensemble (ZOOKEEPER-1355).  Measured on 3.8.0 (doc/design/
 * issue-41-ensemble-changes-and-tls.md, 1.1 and 1.2): the same session
 * and its nodes survive 3 servers -> 3 new ones -> 5.
 *
 * Reading the config.  Like Curator's EnsembleTracker, the session reads
 * /zookeeper/config with a watch after every CONNECTED event and again
 * on every change notification.  After every CONNECTED, not only after a
 * notification: the read re-armed from a notification can fail in the
 * election that the reconfig itself causes (removing the leader), the
 * watch is then not armed, and the next change would be missed
 * (measured).  The config's version is the zxid of the reconfig that
 * wrote it, so it only grows: a version is applied once, and one not
 * newer than the last applied is ignored, which covers the duplicate
 * notifications 3.8 delivers for one change (measured) and a config read
 * from a server that has not yet seen the newest one (reads may be
 * stale: ZooKeeper orders a session's reads, not reads across servers).
 * A static ensemble (version 0) is never followed (ensconf.c), and not
 * watched either: its config cannot change without restarting its
 * servers (reconfigEnabled is read at start), and a restart costs the
 * session a reconnect, whose CONNECTED reads it again.  So on a static
 * ensemble -- Debian's default -- each connect costs one read and no
 * watch; a dynamic one is read again with a watch once it shows a
 * version (and only by a session that follows it), so that a waiter's
 * session holds its one watch, not two, and the server keeps no watch
 * per session it cannot fire.
 *
 * zklock.follow_ensemble: off never reads the config; on follows every
 * usable config; auto (the default) follows only when every host:port of
 * the session's zklock.hosts is one of the client addresses the first
 * usable config advertises.  A list of local TLS tunnels (127.0.0.1:22181)
 * is then never replaced by the servers' own addresses, nor a list that
 * names the servers otherwise than their config lines do.
 *
 * Which thread calls zoo_set_servers().  Any thread may (measured: the
 * backend, a completion, the getconfig completion of a watch
 * notification; no deadlock: inside libzookeeper only lock_reconfig is
 * taken, and the log callback under it takes only its own leaf mutex).
 * But the call resolves every host with getaddrinfo on the calling
 * thread, and the completion thread that reads the config also runs
 * every lock grant's completion: a slow name service would hold them
 * all.  So the config's list is applied by the session's nudge thread
 * (session/nudge.c, zklock's own thread, which sleeps otherwise), and by
 * the completion thread itself only where the nudge thread could not be
 * started.  A reload seen by the backend is applied by the backend: it
 * has just resolved the names itself (to name one that does not resolve),
 * and a statement that waits for the name service is what any
 * connection setting costs.  The decisions are recorded under zks_mutex
 * (wanted_list, wanted_seq) and applied under apply_mutex, always the
 * newest decision: two appliers never overlap, and whichever decision
 * came last wins (a reload after a reconfig replaces the followed list
 * until the next config version; a reconfig after a reload replaces the
 * reloaded list).  Lock order: apply_mutex, then zks_mutex, then
 * nudge_mutex; libzookeeper's own locks are taken with none of ours held
 * but apply_mutex.
 *
 * After the call, one cheap request (exists of /zookeeper) when the
 * session has to move: zoo_set_servers() closes the socket but does not
 * wake the I/O thread, which then notices only at its next poll timeout,
 * up to a third of the session timeout later (measured 0.7-1.4 s at 6 s);
 * a queued request wakes it, and the move takes 7-9 ms.
 *
 * The call is safe on the handle because the handle outlives every
 * applier: close_handle stops the nudge thread before zookeeper_close,
 * zookeeper_close joins the completion thread, and the backend is the
 * one that closes.  A residual hazard is libzookeeper's own: the socket
 * is closed on the caller's thread while the I/O thread may be about to
 * use its descriptor (design, section 2); zoo_set_servers() is therefore
 * called only when the list really changed, at most once per decision.
 *
 * Thread rule: the watcher and completions here run on libzookeeper's
 * completion thread and call nothing of PostgreSQL: the config is parsed
 * into a fixed buffer (recipe/ensconf.c, pure C), the lists are malloc'd.
 * What the backend should log is kept and logged at its next command.
 *
 * src/session/ensemble.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>

#include <zookeeper.h>

#include "recipe/ensconf.h"
#include "session/session.h"
#include "session/session_int.h"

/* Serialises the appliers (see above); taken before zks_mutex. */
static pthread_mutex_t apply_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Under zks_mutex: the session's view of its server list. */
static int	follow_setting = ZKS_FOLLOW_AUTO;	/* zklock.follow_ensemble */
static char *session_hosts = NULL;	/* zklock.hosts the session opened with */
static char *current_list = NULL;	/* the list the handle uses now */
static int	auto_state = 0;		/* auto: 0 undecided, 1 follow, -1 not */
static uint64 applied_version = 0;	/* newest config version acted on */
static char *wanted_list = NULL;	/* the newest decision ... */
static uint64 wanted_seq = 0;		/* ... its number ... */
static uint64 done_seq = 0;			/* ... and the last one applied */
static uint64 report_version = 0;	/* a followed config not yet logged */
static uint64 reported_version = 0;
static uint64 refused_version = 0;	/* one that could not be followed ... */
static uint64 refused_reported = 0;	/* ... and logged */
static uint64 deciding_version = 0;	/* the version of the newest decision */
static bool follows_file = false;	/* zklock.hosts was the file's ... */
static uint64 file_generation = 0;	/* ... at this generation of it */

/* entries of a connect string looked at by same_address (more: not checked) */
#define CHECK_ENTRIES 128

typedef struct ResolvedEntry
{
	char		ip[INET6_ADDRSTRLEN];
	int			port;
} ResolvedEntry;

static void config_watcher(zhandle_t *h, int type, int state,
						   const char *path, void *ctx);

/* ----------------------------------------------------------------
 * libzookeeper's threads (and the nudge thread): nothing of PostgreSQL.
 * ----------------------------------------------------------------
 */

static void
wake_completion(int rc, const struct Stat *stat, const void *data)
{
	zkn_answered(rc);
}

/*
 * Resolve the entries of a connect string, every address of each, as
 * libzookeeper does (resolve_hosts).  Returns how many were added to out
 * (from *n on), or -1 if an entry does not resolve or there are too many.
 * Plain C on any thread: getaddrinfo and fixed buffers.
 */
static int
resolve_entries(const char *list, ResolvedEntry *out, int *n)
{
	const char *p = list;

	while (*p != '\0')
	{
		const char *comma = strchr(p, ',');
		size_t		len = comma ? (size_t) (comma - p) : strlen(p);
		char		entry[512];
		char	   *host;
		char	   *port;
		struct addrinfo *res;
		struct addrinfo *ai;
		int			rc;

		if (len >= sizeof(entry))
			return -1;
		memcpy(entry, p, len);
		entry[len] = '\0';
		p = comma ? comma + 1 : p + len;
		if (strspn(entry, " /") == len)
			continue;			/* an empty entry */
		rc = zks_lookup_entry(entry, &host, &port, &res);
		if (rc != 0)
			return -1;
		for (ai = res; ai != NULL; ai = ai->ai_next)
		{
			const void *a;

			if (*n >= CHECK_ENTRIES)
			{
				freeaddrinfo(res);
				return -1;
			}
			if (ai->ai_family == AF_INET)
				a = &((struct sockaddr_in *) ai->ai_addr)->sin_addr;
			else if (ai->ai_family == AF_INET6)
				a = &((struct sockaddr_in6 *) ai->ai_addr)->sin6_addr;
			else
				continue;
			if (inet_ntop(ai->ai_family, a, out[*n].ip,
						  sizeof(out[*n].ip)) == NULL)
				continue;
			out[*n].port = atoi(port);
			(*n)++;
		}
		freeaddrinfo(res);
	}
	return *n;
}

/*
 * Would libzookeeper mistake one server for another?  It tells servers
 * apart by address only, not by port (addrvec_contains and addrvec_eq,
 * 3.8.0 and still in 3.9): a new list whose addresses are those of the
 * old one is taken as unchanged and ignored, and a connection whose
 * address appears in the new list with another port is taken as still
 * in it.  So when some address has two ports among the old and new
 * lists (several servers, or local TLS tunnels, on one host), the move
 * may silently not happen: true then.  False when the lists resolve
 * cleanly and every address has one port; also when a name does not
 * resolve (zoo_set_servers then reports it).
 */
static bool
same_address(const char *old_list, const char *new_list)
{
	ResolvedEntry entries[CHECK_ENTRIES];
	int			n = 0;

	if (old_list == NULL ||
		resolve_entries(old_list, entries, &n) < 0 ||
		resolve_entries(new_list, entries, &n) < 0)
		return false;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (entries[i].port != entries[j].port &&
				strcmp(entries[i].ip, entries[j].ip) == 0)
				return true;
	return false;
}

/* Record a decision: the handle is to use list (zks_mutex held). */
static bool
want_locked(const char *list)
{
	char	   *copy = strdup(list);

	if (copy == NULL)
		return false;
	free(wanted_list);
	wanted_list = copy;
	wanted_seq++;
	deciding_version = 0;		/* the follower sets its own */
	return true;
}

/*
 * Apply the newest decision not yet applied (any thread; no zklock mutex
 * held).  Returns libzookeeper's code, ZOK if there was nothing to do.
 */
int
zke_apply(void)
{
	zhandle_t  *h;
	char	   *list;
	char	   *old_list;
	uint64		seq;
	uint64		version;
	int			zrc;

	pthread_mutex_lock(&apply_mutex);
	pthread_mutex_lock(&zks_mutex);
	if (zh == NULL || zh_closing || wanted_seq == done_seq ||
		wanted_list == NULL)
	{
		pthread_mutex_unlock(&zks_mutex);
		pthread_mutex_unlock(&apply_mutex);
		return ZOK;
	}
	h = zh;
	seq = wanted_seq;
	version = deciding_version;
	list = strdup(wanted_list);
	old_list = current_list ? strdup(current_list) : NULL;
	pthread_mutex_unlock(&zks_mutex);
	if (list == NULL)
	{
		free(old_list);
		pthread_mutex_unlock(&apply_mutex);
		return ZSYSTEMERROR;
	}

	if (same_address(old_list, list))
		zrc = ZKE_SAME_ADDRESS;
	else
	{
		/*
		 * Only with nothing in flight, and with zks_mutex held, under
		 * which every request is sent (session/request.c): a move drops
		 * the socket without failing the requests sent on it (3.8.0's
		 * update_addrs closes it itself, and the I/O thread then connects
		 * anew keeping them as sent), so their replies never come, and
		 * the next reply is taken for a broken stream
		 * (ZRUNTIMEINCONSISTENCY, "unexpected server response") that
		 * fails a request whose create did happen.  Measured in
		 * test_dynamic before this check.  The resolution inside
		 * zoo_set_servers runs under the mutex: same_address has just
		 * resolved the same names.
		 */
		pthread_mutex_lock(&zks_mutex);
		if (zh != h || zh_closing)
			zrc = ZOK;			/* the handle goes: nothing to move */
		else if (zkn_outstanding())
			zrc = ZKE_BUSY;
		else
		{
			zrc = zoo_set_servers(h, list);
			/* moving: wake the I/O thread now, not at its next poll */
			if (zrc == ZOK && zoo_state(h) != ZOO_CONNECTED_STATE &&
				zoo_aexists(h, "/zookeeper", 0, wake_completion,
							NULL) == ZOK)
				zkn_sent();
		}
		pthread_mutex_unlock(&zks_mutex);
	}
	free(old_list);

	pthread_mutex_lock(&zks_mutex);
	if (zrc == ZKE_BUSY)
	{
		/* not applied: the decision stays wanted */
		pthread_mutex_unlock(&zks_mutex);
		free(list);
		pthread_mutex_unlock(&apply_mutex);
		return zrc;
	}
	done_seq = seq;
	if (zrc == ZOK)
	{
		free(current_list);
		current_list = list;
		list = NULL;
	}
	else if (version != 0)
		refused_version = version;	/* a followed config: logged later */
	pthread_mutex_unlock(&zks_mutex);
	free(list);
	pthread_mutex_unlock(&apply_mutex);
	return zrc;
}

/*
 * Read the config (zks_mutex held, a live handle), with a watch once it is
 * known to be dynamic and followed.
 */
static void read_config_locked(zhandle_t *h, bool watch);
static bool config_watched = false;	/* the session's config read set a
									 * watch: dynamic, followed */

static void
config_completion(int rc, const char *value, int value_len,
				  const struct Stat *stat, const void *data)
{
	char		list[ZKEC_LIST_MAX];
	uint64_t	version = 0;
	ZkecResult	r = ZKEC_BAD;
	bool		apply = false;

	bool		watched = data != NULL;

	zkn_answered(rc);
	/* a failed read: the next CONNECTED reads again */
	if (rc != ZOK || value == NULL || value_len <= 0)
		return;
	r = zkec_parse(value, (size_t) value_len, list, sizeof(list), &version);

	pthread_mutex_lock(&zks_mutex);
	if (zh != NULL && !zh_closing && follow_setting != ZKS_FOLLOW_OFF &&
		r == ZKEC_OK && version > applied_version)
	{
		if (auto_state == 0)
			auto_state = (session_hosts != NULL &&
						  zkec_hosts_covered(session_hosts, list)) ? 1 : -1;
		if (follow_setting == ZKS_FOLLOW_ON || auto_state > 0)
		{
			applied_version = version;
			/* the same servers in another order: nothing to move */
			if (current_list == NULL ||
				!zkec_hosts_covered(list, current_list) ||
				!zkec_hosts_covered(current_list, list))
			{
				apply = want_locked(list);
				if (apply)
					report_version = deciding_version = version;
			}
		}
	}
	/* dynamic and followed: the changes are what it follows, watch them */
	if (!watched && r == ZKEC_OK && zh != NULL && !zh_closing &&
		(follow_setting == ZKS_FOLLOW_ON ||
		 (follow_setting == ZKS_FOLLOW_AUTO && auto_state > 0)))
	{
		config_watched = true;
		read_config_locked(zh, true);
	}
	pthread_mutex_unlock(&zks_mutex);

	/*
	 * The nudge thread applies it; without one, this thread does, if
	 * nothing is in flight (else the backend's next statement does).
	 */
	if (apply && !zkn_request_apply())
		(void) zke_apply();
}

static void
read_config_locked(zhandle_t *h, bool watch)
{
	int			zrc;

	/* (the completion's data says whether this read set a watch) */
	if (watch)
		zrc = zoo_awgetconfig(h, config_watcher, NULL, config_completion,
							  (const void *) 1);
	else
		zrc = zoo_agetconfig(h, 0, config_completion, NULL);
	if (zrc == ZOK)
		zkn_sent();
}

/*
 * The config's watch.  libzookeeper also gives every watcher the session
 * events, which the session watcher handles.
 */
static void
config_watcher(zhandle_t *h, int type, int state, const char *path,
			   void *ctx)
{
	if (type == ZOO_SESSION_EVENT)
		return;
	pthread_mutex_lock(&zks_mutex);
	if (zh == h && !zh_closing && follow_setting != ZKS_FOLLOW_OFF &&
		path != NULL && strcmp(path, ZOO_CONFIG_NODE) == 0)
		read_config_locked(h, true);
	pthread_mutex_unlock(&zks_mutex);
	/* the server spoke: the loss clock counts it (session/nudge.c) */
	zkn_heard();
}

/* The session watcher saw CONNECTED (zks_mutex held). */
void
zke_connected_locked(zhandle_t *h)
{
	if (follow_setting != ZKS_FOLLOW_OFF && !zh_closing)
		read_config_locked(h, config_watched);
}

/*
 * The nudge thread, while the backend holds a lock: the configuration
 * file's zklock.hosts changed (session/hostslot.c), and the backend's own
 * value was the file's when it last looked: the session takes the new
 * value now, the backend's own setting catching up at its next command.
 * Returns zke_apply's code: ZKE_BUSY when a request was in flight, and
 * the decision then waits for the nudge thread to apply it once none is
 * (before, it was dropped: the file's generation is looked at once, so
 * an idle holder whose heartbeat happened to be in flight never moved --
 * the likely cause of a 60 s timeout of test_idle_holder_follows_reload
 * in a four-lane run, which passed alone).
 */
int
zke_file_tick(void)
{
	char		value[ZKHS_HOSTS_MAX];
	uint64		generation;
	size_t		len;
	bool		apply = false;

	pthread_mutex_lock(&zks_mutex);
	if (!follows_file || zkhs_generation() == file_generation ||
		zh == NULL || zh_closing)
	{
		pthread_mutex_unlock(&zks_mutex);
		return ZOK;
	}
	pthread_mutex_unlock(&zks_mutex);
	if (!zkhs_read(value, &generation))
		return ZOK;				/* tried again at the next tick */
	len = strlen(value);
	if (len > 0 && value[len - 1] == '/')
		value[len - 1] = '\0';

	pthread_mutex_lock(&zks_mutex);
	if (follows_file && generation != file_generation && zh != NULL &&
		!zh_closing)
	{
		file_generation = generation;
		if (value[0] != '\0' &&
			(current_list == NULL || strcmp(value, current_list) != 0))
			apply = want_locked(value);
	}
	pthread_mutex_unlock(&zks_mutex);
	/* ZKE_BUSY: the caller applies it once nothing is in flight */
	return apply ? zke_apply() : ZOK;
}

/* ----------------------------------------------------------------
 * Backend side (with zks_mutex where named _locked).
 * ----------------------------------------------------------------
 */

/*
 * Is the backend's zklock.hosts the file's value now (zks_mutex held)?
 * Noted when the session opens and whenever the backend acts on its
 * setting; without the slot (zklock not preloaded), never.
 */
void
zke_note_file_locked(const char *backend_hosts)
{
	char		value[ZKHS_HOSTS_MAX];
	uint64		generation;

	follows_file = zkhs_read(value, &generation) &&
		strcmp(value, backend_hosts) == 0;
	file_generation = follows_file ? generation : 0;
}

/* A new handle made with hosts (zks_mutex held). */
void
zke_session_opened_locked(const char *hosts)
{
	zke_handle_closed_locked();
	session_hosts = strdup(hosts);
	current_list = strdup(hosts);
	/* connected before zh was set: that CONNECTED's read was ignored */
	if (zk_state == ZOO_CONNECTED_STATE && zh != NULL &&
		follow_setting != ZKS_FOLLOW_OFF)
		read_config_locked(zh, false);
}

/*
 * The list the handle uses now (palloc'd), NULL without a handle
 * (backend).  Not zklock.hosts: the session may follow the ensemble's
 * config, and a reloaded list waits for the nudge thread while requests
 * are in flight.  Copied under the mutex with malloc: nothing that can
 * raise an ERROR runs with it held.
 */
char *
zke_hosts_in_use(void)
{
	char	   *copy = NULL;
	char	   *result = NULL;

	pthread_mutex_lock(&zks_mutex);
	if (current_list != NULL)
		copy = strdup(current_list);
	pthread_mutex_unlock(&zks_mutex);
	if (copy != NULL)
	{
		result = pstrdup(copy);
		free(copy);
	}
	return result;
}

/* The handle is gone (zks_mutex held). */
void
zke_handle_closed_locked(void)
{
	free(session_hosts);
	session_hosts = NULL;
	free(current_list);
	current_list = NULL;
	free(wanted_list);
	wanted_list = NULL;
	done_seq = wanted_seq;
	auto_state = 0;
	applied_version = 0;
	config_watched = false;
	report_version = reported_version = 0;
	refused_version = refused_reported = deciding_version = 0;
	follows_file = false;
	file_generation = 0;
}

/* zklock.follow_ensemble's assign hook (backend). */
void
zks_follow_setting(int setting)
{
	pthread_mutex_lock(&zks_mutex);
	follow_setting = setting;
	pthread_mutex_unlock(&zks_mutex);
}

/*
 * The backend asks for list (a reloaded zklock.hosts, its names resolved)
 * and applies it at once.  Returns libzookeeper's code.
 */
int
zke_use_list(const char *list)
{
	bool		ok;

	pthread_mutex_lock(&zks_mutex);
	ok = want_locked(list);
	pthread_mutex_unlock(&zks_mutex);
	if (!ok)
		return ZSYSTEMERROR;
	return zke_apply();
}

/*
 * What the backend logs at its next command: a config followed since
 * (the version, *list gets a palloc'd copy of the list in use), or 0;
 * *refused if that config could not be followed (same_address).
 */
uint64
zke_followed_since_report(char **list, bool *refused)
{
	uint64		v = 0;

	*list = NULL;
	*refused = false;
	pthread_mutex_lock(&zks_mutex);
	if (refused_version != refused_reported)
	{
		/* not followed (same_address) */
		refused_reported = refused_version;
		reported_version = report_version;
		*list = strdup(wanted_list ? wanted_list : "");
		v = refused_version;
		*refused = true;
	}
	else if (report_version != reported_version && current_list != NULL &&
			 done_seq == wanted_seq && report_version != refused_reported)
	{
		v = reported_version = report_version;
		/* palloc under our mutex cannot be: copy with malloc first */
		*list = strdup(current_list);
	}
	pthread_mutex_unlock(&zks_mutex);
	if (*list != NULL)
	{
		char	   *copy = pstrdup(*list);

		free(*list);
		*list = copy;
	}
	return v;
}
