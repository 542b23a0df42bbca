/* zklock 1.8 -> 1.9: revocation (zk_lock_revoke, zk_lock_revoked); zk_locks shows a request */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.9'" to load this file. \quit

-- A server that still runs the 1.8 zklock.so (preloaded and not restarted
-- since the install) has no zk_lock_revoke in it: the update stops at the
-- CREATE FUNCTION, changing nothing.
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

-- zk_locks() gains two columns: its OUT columns cannot change in place,
-- so the function and the view over it are dropped and created again,
-- keeping the grants the administrator had given on each (to roles or to
-- PUBLIC, with their grant option), as 1.2 did.
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
        OUT max_holders integer,
        OUT revoke_requested_at timestamptz,
        OUT revoke_requested_by text)
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
