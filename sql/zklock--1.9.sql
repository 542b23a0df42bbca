/* zklock 1.9: ZooKeeper distributed locks and semaphores from SQL */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION zklock" to load this file. \quit

-- Transaction-level locks: released at COMMIT or ROLLBACK (and by
-- ROLLBACK TO SAVEPOINT for a lock taken inside the savepoint).  The
-- result is the fencing token: the lock node's creation zxid.

CREATE FUNCTION zk_lock_exclusive(resource text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_exclusive'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_lock_shared(resource text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_lock_exclusive(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_exclusive'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_lock_shared(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Session-level locks: survive ROLLBACK; released by zk_unlock*,
-- zk_unlock_all() or the end of the backend.

CREATE FUNCTION zk_session_lock_exclusive(resource text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_exclusive'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_session_lock_shared(resource text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_session_lock_exclusive(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_exclusive'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_session_lock_shared(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_unlock(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_unlock_shared(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_unlock_all()
RETURNS void
AS 'MODULE_PATHNAME', 'zk_unlock_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Counting semaphores: at most max_holders holders at once, across every
-- cluster (and Curator's InterProcessSemaphoreV2 or kazoo's Semaphore, by
-- zklock.protocol).  The result is the fencing token: the lease node's
-- creation zxid.

CREATE FUNCTION zk_lock_semaphore(resource text, max_holders integer, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_semaphore'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_lock_semaphore(resource text, max_holders integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_semaphore'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_session_lock_semaphore(resource text, max_holders integer, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_semaphore'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_session_lock_semaphore(resource text, max_holders integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_semaphore'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_unlock_semaphore(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_semaphore'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- This backend's locks and semaphore leases.
CREATE FUNCTION zk_locks(
    OUT resource text,
    OUT mode text,
    OUT scope text,
    OUT count integer,
    OUT node text,
    OUT fencing_token bigint,
    OUT state text,
    OUT since timestamptz,
    OUT max_holders integer,
    OUT revoke_requested_at timestamptz,
    OUT revoke_requested_by text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_locks'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_locks AS SELECT * FROM zk_locks();

-- The lock's whole queue as ZooKeeper has it, every client included;
-- waits_for is the node each waiter waits for (NULL if it holds).  For a
-- semaphore: its leases and the waiters on its internal mutex.
CREATE FUNCTION zk_lock_queue(
    resource text,
    OUT "position" integer,
    OUT mode text,
    OUT node text,
    OUT owner text,
    OUT holding boolean,
    OUT session_id text,
    OUT fencing_token bigint,
    OUT waits_for text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- This backend's ZooKeeper session.  zookeeper_log_lines: the lines the
-- ZooKeeper client library logged (zklock.zookeeper_log_level), of which
-- zookeeper_log_suppressed did not reach the server log (rate limit).
CREATE FUNCTION zk_status(
    OUT state text,
    OUT session_id text,
    OUT session_timeout interval,
    OUT server text,
    OUT locks_held integer,
    OUT grants bigint,
    OUT waits bigint,
    OUT lost_locks bigint,
    OUT reconnects bigint,
    OUT nudges bigint,
    OUT zookeeper_log_lines bigint,
    OUT zookeeper_log_suppressed bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Many locks in one call: all or none, taken in one canonical order
-- (by node path), the requests pipelined.  The fencing tokens come back
-- in the order of the input.
CREATE FUNCTION zk_lock_exclusive(resources text[], timeout interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_lock_exclusive_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_lock_shared(resources text[], timeout interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_lock_shared_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_lock_exclusive(resources text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_exclusive_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_lock_shared(resources text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_shared_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_session_lock_exclusive(resources text[], timeout interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_session_lock_exclusive_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_session_lock_shared(resources text[], timeout interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_session_lock_shared_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_session_lock_exclusive(resources text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_exclusive_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_session_lock_shared(resources text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_shared_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_unlock(resources text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_unlock_shared(resources text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_shared_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- A lock in ZooKeeper is shared by every cluster and service using the
-- ensemble: nobody may take one unless the administrator grants it.
REVOKE EXECUTE ON FUNCTION
    zk_lock_exclusive(text, interval),
    zk_lock_shared(text, interval),
    zk_try_lock_exclusive(text),
    zk_try_lock_shared(text),
    zk_session_lock_exclusive(text, interval),
    zk_session_lock_shared(text, interval),
    zk_try_session_lock_exclusive(text),
    zk_try_session_lock_shared(text),
    zk_unlock(text),
    zk_unlock_shared(text),
    zk_unlock_all(),
    zk_lock_semaphore(text, integer, interval),
    zk_try_lock_semaphore(text, integer),
    zk_session_lock_semaphore(text, integer, interval),
    zk_try_session_lock_semaphore(text, integer),
    zk_unlock_semaphore(text),
    zk_lock_exclusive(text[], interval),
    zk_lock_shared(text[], interval),
    zk_try_lock_exclusive(text[]),
    zk_try_lock_shared(text[]),
    zk_session_lock_exclusive(text[], interval),
    zk_session_lock_shared(text[], interval),
    zk_try_session_lock_exclusive(text[]),
    zk_try_session_lock_shared(text[]),
    zk_unlock(text[]),
    zk_unlock_shared(text[]),
    zk_locks(),
    zk_lock_queue(text),
    zk_status()
FROM PUBLIC;

-- Cumulative statistics (zklock 1.5), kept in shared memory when zklock
-- is in shared_preload_libraries (else the functions raise 55000).  Times
-- are in milliseconds, as in pg_stat_statements.  For monitoring roles:
-- pg_read_all_stats reads them; only superusers reset, unless granted.
CREATE FUNCTION zk_stat_locks(
    OUT name text,
    OUT kind text,
    OUT acquisitions bigint,
    OUT waits bigint,
    OUT total_wait_time double precision,
    OUT max_wait_time double precision,
    OUT timeouts bigint,
    OUT cancels bigint,
    OUT deadlocks bigint,
    OUT lost bigint,
    OUT refused_commits bigint,
    OUT total_held_time double precision,
    OUT stats_since timestamptz,
    OUT failed_tries bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_stat_locks'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_stat_locks AS SELECT * FROM zk_stat_locks();

CREATE FUNCTION zk_stat_cluster(
    OUT names_tracked integer,
    OUT acquisitions bigint,
    OUT waits bigint,
    OUT total_wait_time double precision,
    OUT max_wait_time double precision,
    OUT timeouts bigint,
    OUT cancels bigint,
    OUT deadlocks bigint,
    OUT lost bigint,
    OUT refused_commits bigint,
    OUT total_held_time double precision,
    OUT reconnects bigint,
    OUT session_expirations bigint,
    OUT evictions bigint,
    OUT stats_since timestamptz,
    OUT failed_tries bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_stat_cluster'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_stat_cluster AS SELECT * FROM zk_stat_cluster();

CREATE FUNCTION zk_stat_reset(name text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_stat_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE CALLED ON NULL INPUT;

REVOKE ALL ON FUNCTION zk_stat_locks(), zk_stat_cluster(),
    zk_stat_reset(text) FROM PUBLIC;
REVOKE ALL ON zk_stat_locks, zk_stat_cluster FROM PUBLIC;
GRANT EXECUTE ON FUNCTION zk_stat_locks(), zk_stat_cluster() TO pg_read_all_stats;
GRANT SELECT ON zk_stat_locks, zk_stat_cluster TO pg_read_all_stats;

-- Which library a backend runs against the extension's version here
-- (zklock 1.7): zk_library() is the library's own view of itself, the
-- view adds this database's extension version, the version the installed
-- zklock.control offers, and what an upgrade still needs (README,
-- "Upgrading"): 'restart' (the server runs a zklock.so that was replaced
-- on disk and is preloaded), 'reconnect' (this backend runs a replaced
-- file that it loaded itself), 'update' (ALTER EXTENSION zklock UPDATE:
-- the library is of another version than the extension), else NULL.
-- Parallel restricted: it answers for the process that runs it (a
-- parallel worker loads the library itself).
CREATE FUNCTION zk_library(
    OUT version text,
    OUT preloaded boolean,
    OUT file text,
    OUT file_replaced boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_library'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW zk_version AS
SELECT l.version AS library_version,
       e.extversion AS extension_version,
       a.default_version,
       l.preloaded,
       l.file_replaced AS library_replaced,
       CASE WHEN l.file_replaced AND l.preloaded THEN 'restart'
            WHEN l.file_replaced THEN 'reconnect'
            WHEN e.extversion IS DISTINCT FROM l.version THEN 'update'
       END AS pending
  FROM zk_library() l
  LEFT JOIN pg_extension e ON e.extname = 'zklock'
  LEFT JOIN pg_available_extensions a ON a.name = 'zklock';

-- The zklock waits in progress in the cluster (zklock 1.7): one row per
-- waiting backend, from shared memory when zklock is in
-- shared_preload_libraries (else the function raises 55000).
CREATE FUNCTION zk_waits(
    OUT pid integer,
    OUT database text,
    OUT resource text,
    OUT mode text,
    OUT since timestamptz,
    OUT timeout interval,
    OUT deadline timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_waits'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_waits AS SELECT * FROM zk_waits();

REVOKE ALL ON FUNCTION zk_library(), zk_waits() FROM PUBLIC;
REVOKE ALL ON zk_version, zk_waits FROM PUBLIC;
GRANT EXECUTE ON FUNCTION zk_library(), zk_waits() TO pg_read_all_stats;
GRANT SELECT ON zk_version, zk_waits TO pg_read_all_stats;

-- Every backend's zklock session (zklock 1.8): one row per backend of the
-- cluster that has a ZooKeeper session (or whose last connect found no
-- server), from shared memory when zklock is in shared_preload_libraries
-- (else the function raises 55000).  The session watcher keeps a row
-- current while its backend is idle.  Superusers and pg_read_all_stats
-- see every row; a role given SELECT sees its own backends' rows only.
CREATE FUNCTION zk_sessions(
    OUT pid integer,
    OUT database text,
    OUT state text,
    OUT session_id text,
    OUT server text,
    OUT connected_since timestamptz,
    OUT unreachable_since timestamptz,
    OUT session_timeout interval,
    OUT locks_held integer,
    OUT waiting boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_sessions'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_sessions AS SELECT * FROM zk_sessions();

REVOKE ALL ON FUNCTION zk_sessions() FROM PUBLIC;
REVOKE ALL ON zk_sessions FROM PUBLIC;
GRANT EXECUTE ON FUNCTION zk_sessions() TO pg_read_all_stats;
GRANT SELECT ON zk_sessions TO pg_read_all_stats;

-- Revocation (zklock 1.9): ask a lock's holders to give it back, in the
-- words each of them understands (Curator's "__REVOKE__", the recipe's
-- "unlock", zklock's own second line), written into the holder's node.
-- One row per holder asked; with wait, how each went by then.
CREATE FUNCTION zk_lock_revoke(
    resource text,
    wait interval DEFAULT '0',
    OUT node text,
    OUT owner text,
    OUT request text,
    OUT outcome text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_revoke'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Was a lock this backend holds on resource asked back?  For a job that
-- ends cleanly at its own checkpoints (zklock.on_revoke = ignore).
CREATE FUNCTION zk_lock_revoked(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_revoked'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Taking a lock from another client is an administrator's act: nobody
-- may, unless granted.
REVOKE EXECUTE ON FUNCTION
    zk_lock_revoke(text, interval),
    zk_lock_revoked(text)
FROM PUBLIC;
