/* zklock 1.0 -> 1.1: zk_lock_queue shows whom each waiter waits for */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.1'" to load this file. \quit

-- A function's OUT columns cannot be changed in place: drop and create it
-- again, keeping the EXECUTE grants the administrator had given (to roles
-- or to PUBLIC, with their grant option).
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
     WHERE p.oid = 'zk_lock_queue(text)'::regprocedure
       AND a.privilege_type = 'EXECUTE'
       AND a.grantee <> p.proowner;

    DROP FUNCTION zk_lock_queue(text);
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
    REVOKE EXECUTE ON FUNCTION zk_lock_queue(text) FROM PUBLIC;
    FOREACH g IN ARRAY grants LOOP
        EXECUTE 'GRANT EXECUTE ON FUNCTION zk_lock_queue(text) TO ' || g;
    END LOOP;
END
$$;
