--
-- zklock_basic: single-session locking against a real ZooKeeper.
-- Tokens and node names vary from run to run, so they are checked by
-- comparison and pattern, never printed.
--
CREATE EXTENSION zklock;

-- outside a transaction block the lock lasts for the statement's transaction
SELECT zk_lock_exclusive('basic') > 0 AS locked;
SELECT count(*) AS held_after_autocommit FROM zk_locks;

-- a transaction-level lock is listed until COMMIT
BEGIN;
SELECT zk_lock_exclusive('basic') AS token1 \gset
SELECT resource, mode, scope, count, state,
       node ~ '^/zklock/basic/_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-__WRIT__[0-9]{10}$' AS curator_layout,
       fencing_token = :token1 AS token_is_returned,
       since <= now() + interval '1 minute' AS since_set
  FROM zk_locks;
-- the view shows the same
SELECT resource, mode, scope FROM zk_locks();
COMMIT;
SELECT count(*) AS held_after_commit FROM zk_locks;

-- fencing tokens increase with every grant, on one lock and across locks
BEGIN;
SELECT zk_lock_exclusive('basic') AS token2 \gset
COMMIT;
BEGIN;
SELECT zk_lock_exclusive('basic-other') AS token3 \gset
COMMIT;
SELECT :token2 > :token1 AS same_lock_increases, :token3 > :token2 AS other_lock_increases;

-- re-entrancy: the same resource and mode again counts, same node and token
BEGIN;
SELECT zk_lock_exclusive('reentrant') AS r1 \gset
SELECT zk_lock_exclusive('reentrant') = :r1 AS same_token;
SELECT zk_try_lock_exclusive('reentrant') AS try_again;
SELECT resource, mode, scope, count FROM zk_locks;
COMMIT;

-- shared locks are re-entrant too
BEGIN;
SELECT zk_lock_shared('shared-one') > 0 AS locked;
SELECT zk_try_lock_shared('shared-one') AS try_again;
SELECT resource, mode, count, node ~ '__READ__[0-9]{10}$' AS read_node FROM zk_locks;
COMMIT;

-- a backend never conflicts with its own nodes: shared then exclusive on
-- the same resource (and the other way round) is granted at once
BEGIN;
SELECT zk_lock_shared('own', '5 seconds') > 0 AS shared_locked;
SELECT zk_lock_exclusive('own', '5 seconds') > 0 AS exclusive_locked;
SELECT zk_try_lock_exclusive('own') AS try_exclusive,
       zk_try_lock_shared('own') AS try_shared;
SELECT resource, mode, count FROM zk_locks ORDER BY mode;
COMMIT;

-- shared asked while holding exclusive rides on the exclusive node: no
-- second node that could sort behind a foreign waiter
BEGIN;
SELECT zk_try_lock_exclusive('own2') AS exclusive_first;
SELECT zk_try_lock_shared('own2') AS then_shared;
SELECT count(DISTINCT node) AS nodes, count(*) AS entries FROM zk_locks;
ROLLBACK;
SELECT count(*) AS held_after_rollback FROM zk_locks;

-- a lock cannot outlive the backend's ZooKeeper session: PREPARE refused
BEGIN;
SELECT zk_lock_exclusive('prepared') > 0 AS locked;
PREPARE TRANSACTION 'zklock_regress';
SELECT count(*) AS held_after_failed_prepare FROM zk_locks;
