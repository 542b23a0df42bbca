/* zklock 1.5 -> 1.6: zk_status() counts the ZooKeeper client's log lines */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.6'" to load this file. \quit

-- A function's OUT columns cannot be changed in place: drop and create it
-- again, keeping the EXECUTE grants the administrator had given (to roles
-- or to PUBLIC, with their grant option).  Nothing of the extension
-- depends on zk_status().  zookeeper_log_lines: the lines the ZooKeeper
-- client library logged, routed into the server log;
-- zookeeper_log_suppressed: those of them its rate limit kept out.
DO $$
DECLARE
    grants text[];
    g text;
BEGIN
    SELECT coalesce(array_agg(
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE quote_ident(pg_get_userbyid(a.grantee)) END
               || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                       ELSE '' END), '{}')
      INTO grants
      FROM pg_proc p, aclexplode(p.proacl) a
     WHERE p.oid = 'zk_status()'::regprocedure
       AND a.privilege_type = 'EXECUTE'
       AND a.grantee <> p.proowner;

    DROP FUNCTION zk_status();
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
    REVOKE EXECUTE ON FUNCTION zk_status() FROM PUBLIC;
    FOREACH g IN ARRAY grants LOOP
        EXECUTE 'GRANT EXECUTE ON FUNCTION zk_status() TO ' || g;
    END LOOP;
END
$$;
