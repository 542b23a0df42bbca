/* zklock 1.2 -> 1.3: the lock functions take arrays of resources */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.3'" to load this file. \quit

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

-- as every zklock function: nobody locks unless the administrator grants it
REVOKE EXECUTE ON FUNCTION
    zk_lock_exclusive(text[], interval),
    zk_lock_shared(text[], interval),
    zk_try_lock_exclusive(text[]),
    zk_try_lock_shared(text[]),
    zk_session_lock_exclusive(text[], interval),
    zk_session_lock_shared(text[], interval),
    zk_try_session_lock_exclusive(text[]),
    zk_try_session_lock_shared(text[]),
    zk_unlock(text[]),
    zk_unlock_shared(text[])
FROM PUBLIC;
