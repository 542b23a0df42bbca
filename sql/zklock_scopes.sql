--
-- zklock_scopes: transaction and session scope, savepoints, unlocking.
--

-- session-level locks survive ROLLBACK and COMMIT
BEGIN;
SELECT zk_session_lock_exclusive('sess') > 0 AS locked;
ROLLBACK;
SELECT resource, mode, scope, count FROM zk_locks;
BEGIN;
SELECT zk_session_lock_exclusive('sess') > 0 AS again;
COMMIT;
SELECT resource, mode, scope, count FROM zk_locks;

-- zk_unlock releases one level; the last one deletes the node
SELECT zk_unlock('sess') AS unlocked;
SELECT resource, count FROM zk_locks;
SELECT zk_unlock('sess') AS unlocked;
SELECT count(*) AS held FROM zk_locks;

-- unlocking what is not held warns and returns false
SELECT zk_unlock('sess') AS not_held;
SELECT zk_unlock_shared('never-locked') AS not_held;

-- a transaction-level lock cannot be released early
BEGIN;
SELECT zk_lock_exclusive('xact-only') > 0 AS locked;
SELECT zk_unlock('xact-only') AS early_unlock;
SELECT resource, scope, count FROM zk_locks;
COMMIT;

-- both scopes on one resource share the node; each scope ends on its own
BEGIN;
SELECT zk_lock_exclusive('both') AS t \gset
SELECT zk_session_lock_exclusive('both') = :t AS same_token;
SELECT resource, scope, count FROM zk_locks ORDER BY scope;
SELECT count(DISTINCT node) AS nodes FROM zk_locks;
COMMIT;
SELECT resource, scope, count FROM zk_locks;
SELECT zk_unlock('both') AS unlocked;

-- shared session locks and zk_unlock_shared
SELECT zk_try_session_lock_shared('sess-shared') AS locked;
SELECT zk_session_lock_shared('sess-shared') > 0 AS again;
SELECT zk_unlock('sess-shared') AS wrong_mode;
SELECT zk_unlock_shared('sess-shared') AS one, zk_unlock_shared('sess-shared') AS two;
SELECT count(*) AS held FROM zk_locks;

-- zk_unlock_all releases session-level locks only
BEGIN;
SELECT zk_session_lock_exclusive('all-1') > 0, zk_session_lock_shared('all-2') > 0,
       zk_try_session_lock_exclusive('all-3'), zk_lock_exclusive('all-4') > 0;
SELECT zk_unlock_all();
SELECT resource, scope FROM zk_locks;
COMMIT;
SELECT count(*) AS held FROM zk_locks;

-- ROLLBACK TO SAVEPOINT releases what the savepoint took ...
BEGIN;
SELECT zk_lock_exclusive('outer') > 0 AS outer_locked;
SAVEPOINT s1;
SELECT zk_lock_exclusive('inner') > 0 AS inner_locked;
SELECT zk_lock_exclusive('outer') > 0 AS outer_again;
SELECT resource, count FROM zk_locks ORDER BY resource;
ROLLBACK TO SAVEPOINT s1;
SELECT resource, count FROM zk_locks ORDER BY resource;
-- ... and RELEASE SAVEPOINT hands it to the parent
SAVEPOINT s2;
SELECT zk_lock_shared('released') > 0 AS locked;
SAVEPOINT s3;
SELECT zk_lock_shared('released') > 0 AS nested;
RELEASE SAVEPOINT s3;
RELEASE SAVEPOINT s2;
SELECT resource, mode, count FROM zk_locks ORDER BY resource;
COMMIT;
SELECT count(*) AS held FROM zk_locks;

-- a savepoint rollback does not touch session-level locks
BEGIN;
SAVEPOINT s;
SELECT zk_session_lock_exclusive('sess-in-savepoint') > 0 AS locked;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT resource, scope FROM zk_locks;
SELECT zk_unlock_all();

-- an exception block is a subtransaction: its locks go with it
DO $$
BEGIN
    BEGIN
        PERFORM zk_lock_exclusive('in-exception-block');
        RAISE EXCEPTION 'boom';
    EXCEPTION WHEN raise_exception THEN
        RAISE NOTICE 'caught; locks now: %', (SELECT count(*) FROM zk_locks);
    END;
END
$$;
SELECT count(*) AS held FROM zk_locks;
