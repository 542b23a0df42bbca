/* zklock 1.4 -> 1.5: lock statistics (zk_stat_locks, zk_stat_cluster, zk_stat_reset) */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.5'" to load this file. \quit

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
    OUT stats_since timestamptz)
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
    OUT stats_since timestamptz)
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
