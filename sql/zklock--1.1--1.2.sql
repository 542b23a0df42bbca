/* zklock 1.1 -> 1.2: counting semaphores; zk_locks shows max_holders */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.2'" to load this file. \quit

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

REVOKE EXECUTE ON FUNCTION
    zk_lock_semaphore(text, integer, interval),
    zk_try_lock_semaphore(text, integer),
    zk_session_lock_semaphore(text, integer, interval),
    zk_try_session_lock_semaphore(text, integer),
    zk_unlock_semaphore(text)
FROM PUBLIC;

-- zk_locks() gains a column: its OUT columns cannot change in place, so
-- the function and the view over it are dropped and created again,
-- keeping the grants the administrator had given on each (to roles or to
-- PUBLIC, with their grant option).
DO $$
DECLARE
    fn_grants text[];
    view_grants text[];
    g text;
BEGIN
    SELECT coalesce(array_agg(
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE quote_ident(pg_get_userbyid(a.grantee)) END
               || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                       ELSE '' END), '{}')
      INTO fn_grants
      FROM pg_proc p, aclexplode(p.proacl) a
     WHERE p.oid = 'zk_locks()'::regprocedure
       AND a.privilege_type = 'EXECUTE'
       AND a.grantee <> p.proowner;

    SELECT coalesce(array_agg(
               a.privilege_type || ' ON zk_locks TO '
               || CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                       ELSE quote_ident(pg_get_userbyid(a.grantee)) END
               || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                       ELSE '' END), '{}')
      INTO view_grants
      FROM pg_class c, aclexplode(c.relacl) a
     WHERE c.oid = 'zk_locks'::regclass
       AND a.grantee <> c.relowner;

    DROP VIEW zk_locks;
    DROP FUNCTION zk_locks();
    CREATE FUNCTION zk_locks(
        OUT resource text,
        OUT mode text,
        OUT scope text,
        OUT count integer,
        OUT node text,
        OUT fencing_token bigint,
        OUT state text,
        OUT since timestamptz,
        OUT max_holders integer)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'zk_locks'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
    CREATE VIEW zk_locks AS SELECT * FROM zk_locks();
    REVOKE EXECUTE ON FUNCTION zk_locks() FROM PUBLIC;
    FOREACH g IN ARRAY fn_grants LOOP
        EXECUTE 'GRANT EXECUTE ON FUNCTION zk_locks() TO ' || g;
    END LOOP;
    FOREACH g IN ARRAY view_grants LOOP
        EXECUTE 'GRANT ' || g;
    END LOOP;
END
$$;
