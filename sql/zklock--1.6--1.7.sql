/* zklock 1.6 -> 1.7: zk_stat_locks and zk_stat_cluster count the tries
   that returned false; zk_version shows the library against the
   extension; zk_waits shows the waits in progress */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.7'" to load this file. \quit

-- The new functions first: a server that still runs an older zklock.so
-- (preloaded and not restarted since the install) has no zk_library or
-- zk_waits in it, and the update stops here, changing nothing.
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

-- failed_tries, at the end of both statistics functions and views (so a
-- table of snapshots taken with SELECT * takes it with ADD COLUMN): their
-- OUT columns cannot change in place, so each view and function is
-- dropped and created again, keeping the grants the administrator had
-- given on each (to roles or to PUBLIC, with their grant option).  A
-- view of the user's over them stops the update with PostgreSQL's
-- "cannot drop view ... because other objects depend on it".
DO $$
DECLARE
    fn text;
    fn_grants text[];
    view_grants text[];
    g text;
BEGIN
    FOREACH fn IN ARRAY ARRAY['zk_stat_locks', 'zk_stat_cluster'] LOOP
        SELECT coalesce(array_agg(
                   CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                        ELSE quote_ident(pg_get_userbyid(a.grantee)) END
                   || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                           ELSE '' END), '{}')
          INTO fn_grants
          FROM pg_proc p, aclexplode(p.proacl) a
         WHERE p.oid = (fn || '()')::regprocedure
           AND a.privilege_type = 'EXECUTE'
           AND a.grantee <> p.proowner;

        SELECT coalesce(array_agg(
                   a.privilege_type || ' ON ' || fn || ' TO '
                   || CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                           ELSE quote_ident(pg_get_userbyid(a.grantee)) END
                   || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                           ELSE '' END), '{}')
          INTO view_grants
          FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.oid = fn::regclass
           AND a.grantee <> c.relowner;

        EXECUTE 'DROP VIEW ' || fn;
        EXECUTE 'DROP FUNCTION ' || fn || '()';
        IF fn = 'zk_stat_locks' THEN
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
        ELSE
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
        END IF;
        EXECUTE 'REVOKE ALL ON FUNCTION ' || fn || '() FROM PUBLIC';
        EXECUTE 'REVOKE ALL ON ' || fn || ' FROM PUBLIC';
        FOREACH g IN ARRAY fn_grants LOOP
            EXECUTE 'GRANT EXECUTE ON FUNCTION ' || fn || '() TO ' || g;
        END LOOP;
        FOREACH g IN ARRAY view_grants LOOP
            EXECUTE 'GRANT ' || g;
        END LOOP;
    END LOOP;
END
$$;
