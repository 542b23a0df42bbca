/*-------------------------------------------------------------------------
 *
 * hosts.c
 *	  The connect string of zklock.hosts: the chroot suffix zklock
 *	  refuses, and the name of a host that does not resolve.
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

#include "session/session.h"

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
		char	   *host = entry;
		char	   *port = strrchr(entry, ':');
		struct addrinfo hints;
		struct addrinfo *res = NULL;
		int			rc;

		while (*host == ' ')
			host++;
		if (port == NULL || port < host)
			continue;			/* libzookeeper's own error will do */
		*port++ = '\0';
		if (host[0] == '[' && host[strlen(host) - 1] == ']')
		{
			host[strlen(host) - 1] = '\0';
			host++;
		}
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_protocol = IPPROTO_TCP;
		rc = getaddrinfo(host, port, &hints, &res);
		if (rc == 0)
			freeaddrinfo(res);
		else if (rc != EAI_MEMORY && rc != EAI_SYSTEM)
			result = pstrdup(host);
	}
	pfree(list);
	return result;
}
