/*-------------------------------------------------------------------------
 *
 * status.c
 *	  What the session layer tells the rest of zklock about itself: its
 *	  state, id, server and counts (zk_status(), the statistics), since when
 *	  it has had no connection (the errors of an outage), and its outcomes
 *	  in words.
 *
 * Everything here reads what session.c keeps (under zks_mutex where
 * libzookeeper's threads write it) and changes nothing, so any backend
 * code may call it at any time; none of it runs on a ZooKeeper thread.
 *
 * src/session/status.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>

#include "utils/timestamp.h"

#include "session/session.h"
#include "session/session_int.h"
#include "zklock.h"

/* The last state the session watcher saw. */
int
zks_current_state(void)
{
	int			st;

	pthread_mutex_lock(&zks_mutex);
	st = zk_state;
	pthread_mutex_unlock(&zks_mutex);
	return st;
}

const char *
zks_rc_text(ZksRc rc)
{
	switch (rc)
	{
		case ZKS_OK:
			return "ok";
		case ZKS_NONODE:
			return "no such node";
		case ZKS_NODEEXISTS:
			return "node exists";
		case ZKS_CONNECTION_LOSS:
			return "connection to ZooKeeper lost";
		case ZKS_SESSION_EXPIRED:
			return "ZooKeeper session expired";
		case ZKS_NOAUTH:
			return "not authorized";
		case ZKS_BADVERSION:
			return "bad version";
		case ZKS_ERROR:
			return "ZooKeeper error";
		case ZKS_TIMEDOUT:
			return "timed out";
	}
	return "unknown";
}

/*
 * errdetail() for an outcome, as a whole sentence (for translation), to
 * be used inside ereport().
 */
int
zks_errdetail(ZksRc rc)
{
	switch (rc)
	{
		case ZKS_OK:
			break;
		case ZKS_NONODE:
			return errdetail("ZooKeeper answered that the node does not exist.");
		case ZKS_NODEEXISTS:
			return errdetail("ZooKeeper answered that the node already exists.");
		case ZKS_CONNECTION_LOSS:
			return errdetail("The connection to ZooKeeper was lost before the answer came.");
		case ZKS_SESSION_EXPIRED:
			return errdetail("The ZooKeeper session expired.");
		case ZKS_NOAUTH:
			return errdetail("ZooKeeper refused: not authorized.");
		case ZKS_BADVERSION:
			return errdetail("ZooKeeper refused: the node was changed meanwhile.");
		case ZKS_ERROR:
			return errdetail("ZooKeeper answered with an error.");
		case ZKS_TIMEDOUT:
			return errdetail("No answer came in time.");
	}
	return 0;
}

TimestampTz
zks_unreachable_since(void)
{
	struct timespec at;
	int			st;

	if (zh == NULL)
		return zks_gave_up_since;
	pthread_mutex_lock(&zks_mutex);
	at = zks_unreachable_at;
	st = zk_state;
	pthread_mutex_unlock(&zks_mutex);
	if (st == ZOO_CONNECTED_STATE || at.tv_sec == 0)
		return 0;
	return time_t_to_timestamptz(at.tv_sec) + at.tv_nsec / 1000;
}

/*
 * The servers the session uses now, for messages: the list its handle
 * uses (session/ensemble.c: the ensemble's config it followed, or a
 * reloaded zklock.hosts once applied), else zklock.hosts as the session
 * opened with it, else the setting.  A message about a connection names
 * the servers that were tried, not a list the session has left or not
 * reached yet.
 */
const char *
zks_hosts(void)
{
	char	   *in_use = zke_hosts_in_use();

	if (in_use != NULL)
		return in_use;
	return zh_hosts != NULL ? zh_hosts : zklock_hosts;
}

bool
zks_is_connected(void)
{
	return zh != NULL && zks_current_state() == ZOO_CONNECTED_STATE;
}

void
zks_session_counts(uint64 *reconnects_out, uint64 *expirations_out)
{
	pthread_mutex_lock(&zks_mutex);
	*reconnects_out = zks_reconnects;
	*expirations_out = zks_expirations;
	pthread_mutex_unlock(&zks_mutex);
}

void
zks_get_status(ZksStatus *status)
{
	int			st = zks_current_state();

	/* what zk_status() counts is written first */
	zks_log_drain();
	memset(status, 0, sizeof(ZksStatus));
	zks_log_counts(&status->log_lines, &status->log_suppressed);
	pthread_mutex_lock(&zks_mutex);
	status->reconnects = zks_reconnects;
	pthread_mutex_unlock(&zks_mutex);
	status->nudges = zkn_nudges();

	if (zh == NULL)
	{
		/* no handle: never asked for, or the last connect found no server */
		status->state = zkcs_state_name(zks_gave_up_since != 0 ?
										ZKCS_FAILED : ZKCS_NONE);
		return;
	}
	status->state = zkcs_state_name(zks_state_of(st));
	status->session_id = zks_session_id();
	status->timeout_ms = zoo_recv_timeout(zh);
	if (st == ZOO_CONNECTED_STATE)
	{
		struct sockaddr_storage addr;
		socklen_t	len = sizeof(addr);

		memset(&addr, 0, sizeof(addr));
		if (zookeeper_get_connected_host(zh, (struct sockaddr *) &addr, &len) != NULL)
			zks_format_server(&addr, status->server, sizeof(status->server));
	}
}

void
zks_format_server(const struct sockaddr_storage *addr, char *buf, size_t len)
{
	char		host[INET6_ADDRSTRLEN];

	buf[0] = '\0';
	if (addr->ss_family == AF_INET)
	{
		const struct sockaddr_in *in = (const struct sockaddr_in *) addr;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%d", host, ntohs(in->sin_port));
	}
	else if (addr->ss_family == AF_INET6)
	{
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) addr;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%d", host, ntohs(in6->sin6_port));
	}
}

char *
zks_session_id_text(int64 session_id)
{
	return psprintf("0x%llx", (unsigned long long) session_id);
}

bool
zks_session_expired(void)
{
	int			st = zks_current_state();

	return zh != NULL && (st == ZOO_EXPIRED_SESSION_STATE ||
						  st == ZOO_AUTH_FAILED_STATE);
}

int
zks_negotiated_timeout(void)
{
	int			t = zh != NULL ? zoo_recv_timeout(zh) : 0;

	return t > 0 ? t : zklock_session_timeout;
}

int64
zks_session_id(void)
{
	const clientid_t *id;

	if (zh == NULL)
		return 0;
	id = zoo_client_id(zh);
	return id ? id->client_id : 0;
}
