--
-- zklock_input: bad arguments get the right SQLSTATE, and no resource name
-- can address a node outside zklock.root.
--
CREATE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive(NULL)$$) AS null_name;
SELECT pg_temp.sqlstate_of($$SELECT zk_try_lock_shared(NULL)$$) AS null_try;
SELECT pg_temp.sqlstate_of($$SELECT zk_unlock(NULL)$$) AS null_unlock;
SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive('')$$) AS empty_name;
SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive(repeat('x', 513))$$) AS too_long;
SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive(repeat('é', 257))$$) AS too_long_bytes;
SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive('/leading')$$) AS leading_slash;
SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive('trailing/')$$) AS trailing_slash;
SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive('a//b')$$) AS empty_level;
SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive('/')$$) AS only_slash;
SELECT pg_temp.sqlstate_of($$SELECT zk_lock_exclusive('neg', interval '-1 second')$$) AS negative_timeout;
SELECT count(*) AS held_after_errors FROM zk_locks;

-- the longest name allowed works
SELECT zk_try_lock_exclusive(repeat('x', 512)) AS max_length;

-- names are encoded level by level; nothing escapes the root
BEGIN;
SELECT zk_lock_exclusive(r) > 0 AS locked, r
  FROM unnest(ARRAY['app/nightly', '.', '..', '../../etc', 'a/./b', '...',
                    '100%', 'with space', 'é', 'zookeeper', 'tab	x']) AS r;
SELECT resource, regexp_replace(node, '/_c_.*$', '') AS lock_parent
  FROM zk_locks ORDER BY resource COLLATE "C";
SELECT bool_and(node LIKE '/zklock/%') AS all_under_root FROM zk_locks;
COMMIT;

-- a zero timeout is a try that fails with 55P03 instead of returning false
-- (nothing else holds the lock here, so it succeeds)
SELECT zk_lock_exclusive('zero-timeout', interval '0') > 0 AS granted;
