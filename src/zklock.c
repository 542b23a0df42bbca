/*-------------------------------------------------------------------------
 *
 * zklock.c
 *	  Module entry of zklock: ZooKeeper distributed locks taken from SQL.
 *	  Defines the settings and hooks the lock table into transactions.
 *
 * Nothing here connects to ZooKeeper: _PG_init may run in the postmaster
 * (shared_preload_libraries), whose children inherit its memory but not
 * its threads, so the session is opened lazily by the first lock call of
 * each backend (session.c).
 *
 * src/zklock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "locktable.h"
#include "recipe.h"
#include "zklock.h"

PG_MODULE_MAGIC;

char	   *zklock_hosts = NULL;
char	   *zklock_root = NULL;
int			zklock_session_timeout = 10000;
int			zklock_connect_timeout = 5000;
bool		zklock_verify_at_commit = true;
int			zklock_protocol = ZKR_PROTOCOL_CURATOR_RW;
char	   *zklock_auth = NULL;

static const struct config_enum_entry protocol_options[] = {
	{"curator-rw", ZKR_PROTOCOL_CURATOR_RW, false},
	{"curator-mutex", ZKR_PROTOCOL_CURATOR_MUTEX, false},
	{"kazoo", ZKR_PROTOCOL_KAZOO, false},
	{NULL, 0, false}
};

void		_PG_init(void);

static bool
check_hosts(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
	{
		GUC_check_errdetail("The connect string must name at least one server, as in \"host:port,host:port\".");
		return false;
	}
	return true;
}

/*
 * The root must be an absolute ZooKeeper path that a lock parent can be
 * created under: no empty, "." or ".." component (ZooKeeper rejects them),
 * no trailing slash, and not ZooKeeper's own "/zookeeper" tree.
 */
static bool
check_root(char **newval, void **extra, GucSource source)
{
	const char *p = *newval;

	if (p == NULL || p[0] != '/' || p[1] == '\0')
	{
		GUC_check_errdetail("\"zklock.root\" must be an absolute ZooKeeper path other than \"/\", such as \"/zklock\".");
		return false;
	}
	while (*p == '/')
	{
		const char *start = ++p;
		size_t		len;

		while (*p != '\0' && *p != '/')
		{
			unsigned char c = (unsigned char) *p;

			if (c < 0x20 || c == 0x7F)
			{
				GUC_check_errdetail("\"zklock.root\" must not contain control characters.");
				return false;
			}
			p++;
		}
		len = p - start;
		if (len == 0 || (len == 1 && start[0] == '.') ||
			(len == 2 && start[0] == '.' && start[1] == '.'))
		{
			GUC_check_errdetail("\"zklock.root\" must not have empty, \".\" or \"..\" components, nor a trailing slash.");
			return false;
		}
		if (start == *newval + 1 && len == 9 && strncmp(start, "zookeeper", 9) == 0)
		{
			GUC_check_errdetail("\"/zookeeper\" is reserved by ZooKeeper.");
			return false;
		}
	}
	return true;
}

/*
 * zklock.auth holds a password.  SHOW, pg_settings and current_setting()
 * all go through this hook, so they show the scheme and user only, to
 * superusers too.  (There is deliberately no check hook: PostgreSQL's
 * message for a rejected value quotes the value.)
 */
static const char *
show_auth(void)
{
	static char shown[128];
	const char *a = zklock_auth;
	const char *colon;
	const char *colon2;

	if (a == NULL || a[0] == '\0')
		return "";
	colon = strchr(a, ':');
	colon2 = colon ? strchr(colon + 1, ':') : NULL;
	if (colon2 == NULL || colon2 - a > 100)
		return "********";
	snprintf(shown, sizeof(shown), "%.*s:********", (int) (colon2 - a), a);
	return shown;
}

/*
 * Until the library is loaded, PostgreSQL keeps zklock.auth as a
 * placeholder that anyone may SHOW.  Preloading defines the setting (masked,
 * superuser-only) before any user query runs.
 */
bool
zklock_auth_exposed(void)
{
	const char *lists[] = {shared_preload_libraries_string,
	session_preload_libraries_string};

	for (int i = 0; i < lengthof(lists); i++)
		if (lists[i] != NULL && strstr(lists[i], "zklock") != NULL)
			return false;
	return true;
}

void
_PG_init(void)
{
	DefineCustomStringVariable("zklock.hosts",
							   "ZooKeeper connect string of the ensemble that holds the locks.",
							   "Comma-separated host:port list. Takes effect at the next lock call made while this backend holds no zklock lock.",
							   &zklock_hosts,
							   "127.0.0.1:2181",
							   PGC_SUSET,
							   0,
							   check_hosts, NULL, NULL);

	DefineCustomStringVariable("zklock.root",
							   "ZooKeeper path under which every lock parent is created.",
							   NULL,
							   &zklock_root,
							   "/zklock",
							   PGC_SUSET,
							   0,
							   check_root, NULL, NULL);

	DefineCustomIntVariable("zklock.session_timeout",
							"ZooKeeper session timeout requested for this backend's session.",
							"A frozen or partitioned backend loses its locks after this long. The server may negotiate another value within its own limits.",
							&zklock_session_timeout,
							10000, 1000, 3600000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.connect_timeout",
							"How long a zklock call waits for a ZooKeeper session before failing.",
							NULL,
							&zklock_connect_timeout,
							5000, 100, 3600000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("zklock.verify_at_commit",
							 "Confirms with ZooKeeper before COMMIT that every held zklock lock is still held.",
							 "One round trip per commit while this backend holds a zklock lock; a lock found lost fails the COMMIT with SQLSTATE 40001.",
							 &zklock_verify_at_commit,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("zklock.protocol",
							 "Node-name layout of new lock nodes, for the clients that share the locks.",
							 "curator-rw: Curator InterProcessReadWriteLock; curator-mutex: Curator InterProcessMutex (exclusive only); kazoo: kazoo Lock, WriteLock, ReadLock. zklock itself recognises every layout.",
							 &zklock_protocol,
							 ZKR_PROTOCOL_CURATOR_RW,
							 protocol_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("zklock.auth",
							   "ZooKeeper credentials, as \"digest:user:password\".",
							   "With them the session authenticates first, and every node zklock creates can be changed or deleted by this identity only (others may read). Shown masked. Takes effect at the next lock call made while no zklock lock is held.",
							   &zklock_auth,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL,
							   NULL, NULL, show_auth);

	MarkGUCPrefixReserved("zklock");

	zkl_init();
}
