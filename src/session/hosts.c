/*-------------------------------------------------------------------------
 *
 * hosts.c
 *	  The connect string of zklock.hosts: the chroot suffix zklock
 *	  refuses, the name of a host that does not resolve, and a reloaded
 *	  list given to the running session (zks_hosts_check).
 *
 * libzookeeper resolves the hosts of the connect string inside
 * zookeeper_init, leaves out those that do not resolve, and fails when
 * none is left, reporting only errno ENOENT ("No such file or
 * directory").  After such a failure
 * the hosts are resolved here, one at a time, to name the culprit.  This
 * runs only on that error path, on the backend's own thread, and once per
 * host: a slow resolver is the operating system's business, and nothing
 * is retried.
 *
 * src/session/hosts.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <netdb.h>
#include <sys/socket.h>

#include <zookeeper.h>

#include "session/session.h"
#include "session/session_int.h"
#include "zklock.h"

/*
 * The reloaded zklock.hosts last refused (malloc'd): warned about once;
 * tried again only by a zklock call, not by every statement, since the
 * name service that failed may be slow to fail again.
 */
static char *refused_hosts = NULL;

static void hosts_check(bool retry);

/*
 * The chroot suffix of a connect string ("host:port/some/path"), or NULL.
 * As for libzookeeper, it starts at the first '/', and a lone "/" is no
 * chroot at all.
 */
const char *
zks_hosts_chroot(const char *hosts)
{
	const char *slash = strchr(hosts, '/');

	if (slash == NULL || slash[1] == '\0')
		return NULL;
	return slash;
}

/*
 * Look up one entry of a connect string, "host:port" or "[v6addr]:port"
 * with blanks (and a lone trailing "/") around, as libzookeeper reads
 * them; the entry is cut up in place (*host and *port point into it).
 * Returns getaddrinfo's code, with *res to free on 0, or
 * ZKS_ENTRY_MALFORMED for an entry without a port.  Plain C: also called
 * on the threads that apply a server list (session/ensemble.c).
 */
int
zks_lookup_entry(char *entry, char **host, char **port,
				 struct addrinfo **res)
{
	char	   *h = entry;
	char	   *p;
	size_t		len;
	struct addrinfo hints;

	while (*h == ' ')
		h++;
	len = strlen(h);
	while (len > 0 && (h[len - 1] == ' ' || h[len - 1] == '/'))
		h[--len] = '\0';
	p = strrchr(h, ':');
	if (p == NULL)
		return ZKS_ENTRY_MALFORMED;
	*p++ = '\0';
	if (h[0] == '[' && h[strlen(h) - 1] == ']')
	{
		h[strlen(h) - 1] = '\0';
		h++;
	}
	*host = h;
	*port = p;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	*res = NULL;
	return getaddrinfo(h, p, &hints, res);
}

/*
 * The first host of the connect string that does not resolve (palloc'd),
 * or NULL if every one does.
 *
 * Called only after zookeeper_init failed to resolve the hosts, to name
 * the one at fault.  getaddrinfo cannot be interrupted (no cancel, no
 * statement_timeout while it runs), as libpq's own name lookup in
 * postgres_fdw or dblink cannot: it is bounded by the resolver's timeouts
 * (resolv.conf: timeout x attempts per name server, 5 s x 2 by default),
 * which zookeeper_init has just spent on the same names in this same
 * thread, and it stops at the first host that fails, which is the one
 * zookeeper_init gave up on.  So the error path at most doubles a wait the
 * call could not avoid, and adds no wait of its own when the failure was
 * quick (NXDOMAIN: no such name).  Entries are "host:port" or "[v6addr]:port",
 * separated by commas, as libzookeeper reads them.
 */
char *
zks_unresolved_host(const char *hosts)
{
	char	   *list = pstrdup(hosts);
	char	   *chroot = strchr(list, '/');
	char	   *save = NULL;
	char	   *entry;
	char	   *result = NULL;

	if (chroot != NULL)
		*chroot = '\0';
	for (entry = strtok_r(list, ",", &save); entry != NULL && result == NULL;
		 entry = strtok_r(NULL, ",", &save))
	{
		char	   *host;
		char	   *port;
		struct addrinfo *res;
		int			rc = zks_lookup_entry(entry, &host, &port, &res);

		if (rc == ZKS_ENTRY_MALFORMED)
			continue;			/* libzookeeper's own error will do */
		if (rc == 0)
			freeaddrinfo(res);
		else if (rc != EAI_MEMORY && rc != EAI_SYSTEM)
			result = pstrdup(host);
	}
	pfree(list);
	return result;
}

static unsigned long long
session_id(void)
{
	const clientid_t *id = zh != NULL ? zoo_client_id(zh) : NULL;

	return id != NULL ? (unsigned long long) id->client_id : 0;
}

/*
 * The reloaded list is refused: true the first time for this value (warn
 * then), false when it was refused already.
 */
static bool
refuse(const char *hosts)
{
	bool		first = refused_hosts == NULL ||
		strcmp(refused_hosts, hosts) != 0;

	free(refused_hosts);
	refused_hosts = strdup(hosts);
	return first;
}

/*
 * A reloaded zklock.hosts while the session lives: the same session is
 * moved to the new list (session/ensemble.c), whether or not locks are
 * held; a new session would lose them.  zklock.session_timeout and
 * zklock.auth_file cannot change on a live session (the timeout is
 * negotiated, the identity sent, when it is created): they still wait for
 * a zklock call made holding no lock (zks_connect).
 *
 * The backend keeps the zklock.hosts text it last acted on (zh_hosts)
 * apart from the list the session uses (ensemble.c's, which following
 * the ensemble changes): only a new text is acted on, so that an
 * unrelated reload never undoes a followed list.
 */
static void
hosts_check(bool retry)
{
	char	   *followed;
	bool		not_followed;
	uint64		version;
	char	   *unresolved;
	char	   *list;
	char	   *copy;
	size_t		len;
	int			zrc;
	bool		deferred = false;

	if (zh == NULL || zh_hosts == NULL)
		return;

	/* a list left waiting where there is no nudge thread (ensemble.c) */
	if (!zkn_running())
		(void) zke_apply();

	version = zke_followed_since_report(&followed, &not_followed);
	if (version != 0 && not_followed)
		ereport(LOG,
				(errmsg("zklock session 0x%llx does not follow the ZooKeeper ensemble's config version 0x%llx",
						session_id(), (unsigned long long) version),
				 errdetail("The ZooKeeper client library tells servers apart by their address only, and an address of \"%s\" has several ports.",
						   followed),
				 errhint("Give each ZooKeeper server an address of its own.")));
	else if (version != 0)
		ereport(LOG,
				(errmsg("zklock session 0x%llx follows the ZooKeeper ensemble: servers now \"%s\" (config version 0x%llx)",
						session_id(), followed,
						(unsigned long long) version)));

	if (strcmp(zh_hosts, zklock_hosts) == 0)
		return;
	if (!retry && refused_hosts != NULL &&
		strcmp(refused_hosts, zklock_hosts) == 0)
		return;

	unresolved = zks_unresolved_host(zklock_hosts);
	if (unresolved != NULL)
	{
		if (refuse(zklock_hosts))
			ereport(WARNING,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("zklock session 0x%llx keeps the ZooKeeper servers \"%s\"",
							session_id(), zks_hosts()),
					 errdetail("Host \"%s\" of the reloaded \"zklock.hosts\" could not be resolved.",
							   unresolved),
					 errhint("Check the host names in \"zklock.hosts\" and the name service of this host.")));
		return;
	}

	/* zoo_set_servers takes host:port pairs only: no lone "/" */
	list = pstrdup(zklock_hosts);
	len = strlen(list);
	if (len > 0 && list[len - 1] == '/')
		list[len - 1] = '\0';
	zrc = zke_use_list(list);
	/* requests in flight: the nudge thread moves it once they are in */
	if (zrc == ZKE_BUSY && zkn_apply_when_quiet())
	{
		zrc = ZOK;
		deferred = true;
	}
	if (zrc == ZKE_BUSY)
	{
		pfree(list);
		return;					/* again at the next statement */
	}
	if (zrc == ZKE_SAME_ADDRESS)
	{
		/* zh_hosts stays: the next session, made holding no lock, moves */
		if (refuse(zklock_hosts))
			ereport(WARNING,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("zklock session 0x%llx keeps the ZooKeeper servers \"%s\" until it holds no lock",
							session_id(), zks_hosts()),
					 errdetail("The ZooKeeper client library tells servers apart by their address only, and an address of the reloaded \"zklock.hosts\" \"%s\" has several ports.",
							   list),
					 errhint("Give each ZooKeeper server an address of its own; otherwise the new list is used by the next session, opened at a zklock call made while no lock is held.")));
		pfree(list);
		return;
	}
	if (zrc != ZOK)
	{
		if (refuse(zklock_hosts))
			ereport(WARNING,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("zklock session 0x%llx keeps the ZooKeeper servers \"%s\"",
							session_id(), zks_hosts()),
					 errdetail("The ZooKeeper client refused the reloaded \"zklock.hosts\" \"%s\": %s.",
							   list, zerror(zrc))));
		pfree(list);
		return;
	}
	pfree(list);
	copy = strdup(zklock_hosts);
	if (copy == NULL)
		return;					/* acted on again at the next check */
	free(zh_hosts);
	zh_hosts = copy;
	free(refused_hosts);
	refused_hosts = NULL;
	pthread_mutex_lock(&zks_mutex);
	zke_note_file_locked(zh_hosts);
	pthread_mutex_unlock(&zks_mutex);
	if (deferred)
		ereport(LOG,
				(errmsg("zklock session 0x%llx moves to the ZooKeeper servers \"%s\"",
						session_id(), zh_hosts),
				 errdetail("\"zklock.hosts\" was reloaded; the session moves once its requests in flight are answered, and keeps its locks.")));
	else
		ereport(LOG,
				(errmsg("zklock session 0x%llx now uses the ZooKeeper servers \"%s\"",
						session_id(), zh_hosts),
				 errdetail("\"zklock.hosts\" was reloaded; the session and its locks are kept.")));
}

void
zks_hosts_check(void)
{
	hosts_check(false);
}

/* From zks_connect: a zklock call tries a refused list again. */
void
zks_hosts_check_call(void)
{
	hosts_check(true);
}
