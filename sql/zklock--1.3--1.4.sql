/* zklock 1.3 -> 1.4: zk_status() counts the reply nudges */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.4'" to load this file. \quit

-- A function's result columns cannot be changed in place.  Nothing of
-- the extension depends on zk_status().
DROP FUNCTION zk_status();

-- This backend's ZooKeeper session.  nudges: the harmless reads sent
-- after replies that came late (zklock.reply_nudge_delay).
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
    OUT nudges bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION zk_status() FROM PUBLIC;
