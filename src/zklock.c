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

#include "pg_compat.h"

#include "catalog/objectaccess.h"
#include "catalog/pg_proc.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/guc.h"

#include "session/auth.h"
#include "xact/callorder.h"
#include "session/cursessions.h"
#include "monitor/curwaits.h"
#include "xact/failfast.h"
#include "guccheck.h"
#include "xact/locktable.h"
#include "xact/lookonly.h"
#include "recipe/recipe.h"
#include "session/session.h"
#include "monitor/stats.h"
#include "monitor/version.h"
#include "monitor/waitlog.h"
#include "zklock.h"

PG_MODULE_MAGIC;

char	   *zklock_hosts = NULL;
char	   *zklock_root = NULL;
int			zklock_session_timeout = 10000;
int			zklock_connect_timeout = 5000;
bool		zklock_verify_at_commit = true;
int			zklock_protocol = ZKR_PROTOCOL_CURATOR_RW;
char	   *zklock_auth_file = NULL;
int			zklock_reply_nudge_delay = 20;
bool		zklock_session_locks = true;
static int	zklock_zookeeper_log_level = ZKS_LOG_ERROR;
static int	zklock_follow_ensemble = ZKS_FOLLOW_AUTO;

static const struct config_enum_entry follow_ensemble_options[] = {
	{"auto", ZKS_FOLLOW_AUTO, false},
	{"on", ZKS_FOLLOW_ON, false},
	{"off", ZKS_FOLLOW_OFF, false},
	{"true", ZKS_FOLLOW_ON, true},
	{"false", ZKS_FOLLOW_OFF, true},
	{"yes", ZKS_FOLLOW_ON, true},
	{"no", ZKS_FOLLOW_OFF, true},
	{"1", ZKS_FOLLOW_ON, true},
	{"0", ZKS_FOLLOW_OFF, true},
	{NULL, 0, false}
};

/*
 * In the postmaster, a reloaded value is published for the backends'
 * sessions, which follow it even while idle (session/hostslot.c).
 */
static void
assign_hosts(const char *newval, void *extra)
{
	zkhs_publish(newval);
}

/* the session layer keeps its own copy, read on libzookeeper's thread */
static void
assign_follow_ensemble(int newval, void *extra)
{
	zks_follow_setting(newval);
}

/* libzookeeper's levels; "warn" is its own word for "warning" */
static const struct config_enum_entry zookeeper_log_level_options[] = {
	{"off", ZKS_LOG_OFF, false},
	{"error", ZKS_LOG_ERROR, false},
	{"warning", ZKS_LOG_WARN, false},
	{"warn", ZKS_LOG_WARN, true},
	{"info", ZKS_LOG_INFO, false},
	{"debug", ZKS_LOG_DEBUG, false},
	{NULL, 0, false}
};

/* the session layer keeps its own copy, read on libzookeeper's thread */
static void
assign_cancel_on_loss(bool newval, void *extra)
{
	zks_cancel_setting(newval);
}

/* zklock.on_revoke */
static int	zklock_on_revoke = ZKLOCK_ON_REVOKE_CANCEL;

static const struct config_enum_entry on_revoke_options[] = {
	{"cancel", ZKLOCK_ON_REVOKE_CANCEL, false},
	{"ignore", ZKLOCK_ON_REVOKE_IGNORE, false},
	{NULL, 0, false}
};

static void
assign_on_revoke(int newval, void *extra)
{
	zks_revoke_setting(newval == ZKLOCK_ON_REVOKE_CANCEL);
}

static void
assign_zookeeper_log_level(int newval, void *extra)
{
	zks_log_set_level(newval);
}

static ProcessUtility_hook_type prev_process_utility = NULL;
static ExecutorEnd_hook_type prev_executor_end = NULL;
static ExecutorStart_hook_type prev_executor_start = NULL;
static ExecutorRun_hook_type prev_executor_run = NULL;
static ExecutorFinish_hook_type prev_executor_finish = NULL;
static object_access_hook_type prev_object_access = NULL;

/* 0 (off), or at least 10 ms: a server is never sent a stream of reads */
static bool
check_reply_nudge_delay(int *newval, void **extra, GucSource source)
{
	if (*newval != 0 && *newval < 10)
	{
		GUC_check_errdetail("\"zklock.reply_nudge_delay\" must be 0 (off) or at least 10 ms.");
		return false;
	}
	return true;
}

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

	/*
	 * A chroot suffix ("host:port/path") would make libzookeeper put every
	 * path under it, while zk_lock_queue, the sweeps and the operator's
	 * view of the nodes all assume zklock.root is the whole path: refuse
	 * it rather than have lock parents fail with "node does not exist".
	 * zklock.root does the same job.
	 */
	if (zks_hosts_chroot(*newval) != NULL)
	{
		GUC_check_errmsg("chroot paths are not supported in \"zklock.hosts\"");
		GUC_check_errdetail("The connect string \"%s\" ends in the chroot path \"%s\".",
							*newval, zks_hosts_chroot(*newval));
		GUC_check_errhint("Remove the path from \"zklock.hosts\" and set \"zklock.root\" to a path under it instead.");
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
 * Runs whenever zklock.auth_file is applied, at every configuration reload
 * too: the session layer then reads the file again at its next chance
 * (a call that holds no lock) and reconnects if the identity changed.
 */
static void
assign_auth_file(const char *newval, void *extra)
{
	zka_generation++;
}

/*
 * DISCARD ALL releases every session-level lock, as PostgreSQL does for
 * advisory locks (connection poolers run it when they hand a server
 * connection to the next client).  It cannot run in a transaction block,
 * so no transaction-level lock is held then.
 */
static void
zklock_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	ErrorContextCallback frame;
	bool		cancellable;

	zkl_activity();
	zko_utility(parsetree);
	/* a reloaded zklock.hosts moves the session now (session/hosts.c) */
	zks_hosts_check();

	/*
	 * Before COMMIT or PREPARE TRANSACTION of a transaction block: put our
	 * transaction callback in front (callorder.c).  This statement only
	 * marks the block's end; the commit, and the callbacks, come after it.
	 */
	if (IsA(parsetree, TransactionStmt) &&
		(((TransactionStmt *) parsetree)->kind == TRANS_STMT_COMMIT ||
		 ((TransactionStmt *) parsetree)->kind == TRANS_STMT_PREPARE))
		zkl_callbacks_first();

	/* after a loss, only what cannot act under the lock (failfast.c) */
	cancellable = zkff_utility_start(parsetree);

	PG_TRY();
	{
		zkff_frame_push(&frame, cancellable);
		if (prev_process_utility)
			prev_process_utility(pstmt, queryString, readOnlyTree, context,
								 params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		zkff_frame_pop();
		PG_RE_THROW();
	}
	PG_END_TRY();
	zkff_frame_end();

	/* after it succeeded: DISCARD ALL refuses to run in a transaction */
	if (IsA(parsetree, DiscardStmt) &&
		((DiscardStmt *) parsetree)->target == DISCARD_ALL)
		zkl_release_all_session();

	/*
	 * A utility statement can open another extension's connection too
	 * (IMPORT FOREIGN SCHEMA, say), also from a trigger at COMMIT.
	 */
	zkl_callbacks_first();
}

/*
 * Before each statement: does this transaction still only look at
 * zklock's state (lookonly.c)?
 */
static void
zklock_executor_start(QueryDesc *queryDesc, int eflags)
{
	zkl_activity();
	/* a reloaded zklock.hosts moves the session now (session/hosts.c) */
	zks_hosts_check();
	if (!(eflags & EXEC_FLAG_EXPLAIN_ONLY))
	{
		zko_statement(queryDesc->plannedstmt);
		/* after a loss, only what cannot act under the lock (failfast.c) */
		(void) zkff_statement_start(queryDesc->plannedstmt);
	}
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

/*
 * After each run of a statement's executor, which may have opened a
 * connection of another extension: a client's statement runs inside its
 * portal, where zklock's callback is moved in front (callorder.c), so that
 * the executor's end outside the portal (a top-level SELECT's, when the
 * portal is dropped) finds it there and adds no guard.
 */
static void
zklock_executor_run(ZK_EXECUTOR_RUN_PARAMS)
{
	ErrorContextCallback frame;
	bool		cancellable;

	/*
	 * A loss while it runs cancels it; one known already refuses it (a
	 * portal's later run starts no statement: failfast.c).
	 */
	cancellable = zkff_statement_start(queryDesc->plannedstmt);
	PG_TRY();
	{
		zkff_frame_push(&frame, cancellable);
		if (prev_executor_run)
			prev_executor_run(ZK_EXECUTOR_RUN_ARGS);
		else
			standard_ExecutorRun(ZK_EXECUTOR_RUN_ARGS);
	}
	PG_CATCH();
	{
		zkff_frame_pop();
		PG_RE_THROW();
	}
	PG_END_TRY();
	zkff_frame_end();
	zkl_callbacks_first();
}

/*
 * The executor's finish runs a statement's AFTER triggers: a loss while
 * they run cancels them too (failfast.c).
 */
static void
zklock_executor_finish(QueryDesc *queryDesc)
{
	ErrorContextCallback frame;
	bool		cancellable;

	cancellable = zkff_cancellable(queryDesc->plannedstmt);
	PG_TRY();
	{
		zkff_frame_push(&frame, cancellable);
		if (prev_executor_finish)
			prev_executor_finish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
	}
	PG_CATCH();
	{
		zkff_frame_pop();
		PG_RE_THROW();
	}
	PG_END_TRY();
	zkff_frame_end();
}

/*
 * After each statement that may have opened a connection of another
 * extension with transaction callbacks of its own (postgres_fdw, say),
 * put a zklock callback first again, so that zklock confirms its locks
 * before anyone commits remote work.  Inside a portal this moves zklock's
 * callback; outside one (a deferred trigger's statement at COMMIT, the
 * end of a top-level SELECT when its portal is dropped) it adds a guard,
 * which is safe while PostgreSQL walks the callback list (callorder.c).
 */
static void
zklock_executor_end(QueryDesc *queryDesc)
{
	if (prev_executor_end)
		prev_executor_end(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
	zkl_callbacks_first();
	/* what libzookeeper logged during the statement, or before it */
	zks_log_drain();
}

/*
 * Before any function runs, also where no plan shows it (the planner's
 * folding, a domain's CHECK at Bind, a fast-path call, a PL/pgSQL simple
 * expression): does this transaction still only look (lookonly.c)?
 */
static void
zklock_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					 int subId, void *arg)
{
	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);
	if (access == OAT_FUNCTION_EXECUTE && classId == ProcedureRelationId)
	{
		zkl_activity();
		zko_function_executed(objectId);
	}
}

void
_PG_init(void)
{
	/* which zklock settings arrive as placeholders, and from where */
	zkg_note_placeholders();

	DefineCustomStringVariable("zklock.hosts",
							   "ZooKeeper connect string of the ensemble that holds the locks.",
							   "Comma-separated host:port list. A reload moves each backend's session to the new list at its next statement, its locks kept.",
							   &zklock_hosts,
							   "127.0.0.1:2181",
							   PGC_SUSET,
							   0,
							   check_hosts, assign_hosts, NULL);

	/*
	 * Superuser-only as zklock.hosts is: it decides which servers the
	 * sessions talk to.
	 */
	DefineCustomEnumVariable("zklock.follow_ensemble",
							 "Follows the servers a dynamic reconfiguration of the ZooKeeper ensemble publishes.",
							 "auto: follow /zookeeper/config when every host of zklock.hosts is one of its client addresses (so local TLS tunnels are kept); on: always; off: never. The same session moves to the new servers, its locks kept. Read when a session connects.",
							 &zklock_follow_ensemble,
							 ZKS_FOLLOW_AUTO,
							 follow_ensemble_options,
							 PGC_SUSET,
							 0,
							 NULL, assign_follow_ensemble, NULL);

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

	/*
	 * Per role, database or session: a job that prefers to learn of a
	 * loss at COMMIT (1.7's behaviour) turns it off.
	 */
	DefineCustomBoolVariable("zklock.cancel_on_loss",
							 "Ends the running statement as soon as a held zklock lock is found lost.",
							 "The statement fails with SQLSTATE 40001 naming the lock, and no statement that does work starts until the transaction ends or a lost session-level lock is acknowledged. Off: the loss is found at COMMIT.",
							 &zklock_cancel_on_loss,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, assign_cancel_on_loss, NULL);

	/*
	 * Per role, database or session too: a job that must end cleanly
	 * asks zk_lock_revoked() at its own checkpoints instead.
	 */
	DefineCustomEnumVariable("zklock.on_revoke",
							 "What a held zklock lock does when another client asks for it back.",
							 "cancel: the lock is given back, and the statement running under it ends with SQLSTATE 40001, as for a lost lock (needs zklock.cancel_on_loss); ignore: the request is only shown, by zk_locks and zk_lock_revoked().",
							 &zklock_on_revoke,
							 ZKLOCK_ON_REVOKE_CANCEL,
							 on_revoke_options,
							 PGC_USERSET,
							 0,
							 NULL, assign_on_revoke, NULL);

	DefineCustomEnumVariable("zklock.protocol",
							 "Node-name layout of new lock nodes, for the clients that share the locks.",
							 "curator-rw: Curator InterProcessReadWriteLock; curator-mutex: Curator InterProcessMutex (exclusive only); kazoo: kazoo Lock, WriteLock, ReadLock. zklock itself recognises every layout.",
							 &zklock_protocol,
							 ZKR_PROTOCOL_CURATOR_RW,
							 protocol_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("zklock.auth_file",
							   "File holding the ZooKeeper credentials zklock authenticates with.",
							   "One line \"digest:user:password\", in a file owned by the server's operating-system user and not readable by group or others. With it, every node zklock creates can be changed or deleted by this identity only. Read again after a configuration reload; a changed identity takes effect at the next lock call made while no zklock lock is held.",
							   &zklock_auth_file,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   NULL, assign_auth_file, NULL);

	DefineCustomIntVariable("zklock.reply_nudge_delay",
							"How long a reply from ZooKeeper may be late before zklock sends a harmless read after it.",
							"ZooKeeper 3.8.0 servers can leave a request unanswered until another request arrives (ZOOKEEPER-4537); the read makes them answer. 0 turns it off. Takes effect at the next zklock call.",
							&zklock_reply_nudge_delay,
							20, 0, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							check_reply_nudge_delay, NULL, NULL);

	/*
	 * Superuser-only so that an administrator can turn session locks off
	 * for the role or database a transaction-pooling connection pooler
	 * logs in with, and its clients cannot turn them back on.
	 */
	DefineCustomBoolVariable("zklock.session_locks",
							 "Allows session-level zklock locks and semaphores.",
							 "Turn it off for the roles or databases reached through a transaction-pooling connection pooler: the server connection, and a session lock held on it, passes to other clients. Unlocking keeps working.",
							 &zklock_session_locks,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	/*
	 * Superuser-only as PostgreSQL's log_lock_waits is: what the server
	 * log records is the administrator's choice.
	 */
	DefineCustomBoolVariable("zklock.log_lock_waits",
							 "Logs zklock waits longer than deadlock_timeout.",
							 "One LOG line when a zklock lock or semaphore call has waited deadlock_timeout (naming the holder), and one when that wait ends.",
							 &zklock_log_lock_waits,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	/*
	 * Superuser-only: what the server log records is the administrator's
	 * choice, and libzookeeper's debug lines name servers and paths.
	 */
	DefineCustomEnumVariable("zklock.zookeeper_log_level",
							 "Sets which lines of the ZooKeeper client library reach the server log.",
							 "off, error, warning, info or debug. The lines are written at level LOG, naming the ZooKeeper session; error and warning lines are limited to a few per connection to ZooKeeper, the rest counted in zk_status().",
							 &zklock_zookeeper_log_level,
							 ZKS_LOG_ERROR,
							 zookeeper_log_level_options,
							 PGC_SUSET,
							 0,
							 NULL, assign_zookeeper_log_level, NULL);

	zkst_init();
	zkcw_init();
	zkcs_init();
	zkhs_init();
	zkv_init();

	/* did each take the value its placeholder held (guccheck.c)? */
	zkg_check_applied();

	MarkGUCPrefixReserved("zklock");

	zkl_init();

	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = zklock_process_utility;
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = zklock_executor_start;
	prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = zklock_executor_run;
	prev_executor_finish = ExecutorFinish_hook;
	ExecutorFinish_hook = zklock_executor_finish;
	prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = zklock_executor_end;
	prev_object_access = object_access_hook;
	object_access_hook = zklock_object_access;
}
