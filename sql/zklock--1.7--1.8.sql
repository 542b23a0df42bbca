/* zklock 1.7 -> 1.8: zk_sessions shows every backend's ZooKeeper session */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.8'" to load this file. \quit

-- A server that still runs the 1.7 zklock.so (preloaded and not restarted
-- since the install) has no zk_sessions in it: the update stops at the
-- CREATE FUNCTION, changing nothing.
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
