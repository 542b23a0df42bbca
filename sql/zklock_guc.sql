--
-- zklock_guc: settings, their defaults, checks and who may change them;
-- EXECUTE is not granted to PUBLIC.
--
LOAD 'zklock';
SHOW zklock.root;
SHOW zklock.connect_timeout;
-- (the server-start settings exist only where zklock is preloaded: left
-- out, so that the suite passes on a server configured either way)
SELECT name, context, unit FROM pg_settings
  WHERE name LIKE 'zklock.%' AND context <> 'postmaster' ORDER BY name;

-- the prefix is reserved
SET zklock.no_such_setting = 1;

-- the root must be an absolute path that cannot climb out
SET zklock.root = 'relative';
SET zklock.root = '/';
SET zklock.root = '/zklock/';
SET zklock.root = '/a/../b';
SET zklock.root = '/zookeeper';
SET zklock.hosts = '';
SET zklock.session_timeout = '10ms';
SET zklock.reply_nudge_delay = '5ms';
SET zklock.reply_nudge_delay = -1;
SHOW zklock.reply_nudge_delay;
SET zklock.reply_nudge_delay = 0;
RESET zklock.reply_nudge_delay;

-- another root: lock parents follow it
SET zklock.root = '/zklock_regress/alt';
BEGIN;
SELECT zk_lock_exclusive('moved') > 0 AS locked;
SELECT regexp_replace(node, '/_c_.*$', '') AS lock_parent FROM zk_locks;
COMMIT;
RESET zklock.root;

-- a user without grants may not lock
CREATE ROLE zklock_regress_job;
SET ROLE zklock_regress_job;
SELECT zk_lock_exclusive('job');
SELECT * FROM zk_locks;
RESET ROLE;

-- superuser-only settings; connect_timeout is the user's own
SET ROLE zklock_regress_job;
SET zklock.hosts = '127.0.0.1:1';
SET zklock.root = '/elsewhere';
SET zklock.session_timeout = '30s';
SELECT set_config('zklock.hosts', '127.0.0.1:1', false);
SET zklock.connect_timeout = '2s';
SHOW zklock.connect_timeout;
RESET ROLE;

-- the administrator grants a job role what it needs
GRANT EXECUTE ON FUNCTION zk_lock_exclusive(text, interval), zk_locks() TO zklock_regress_job;
GRANT SELECT ON zk_locks TO zklock_regress_job;
SET ROLE zklock_regress_job;
BEGIN;
SELECT zk_lock_exclusive('job') > 0 AS locked;
SELECT resource, mode FROM zk_locks;
COMMIT;
RESET ROLE;

REVOKE ALL ON FUNCTION zk_lock_exclusive(text, interval), zk_locks() FROM zklock_regress_job;
REVOKE ALL ON zk_locks FROM zklock_regress_job;

-- node layouts for other clients: any user may choose one
SHOW zklock.protocol;
SET zklock.protocol = 'zookeeper-classic';
SET ROLE zklock_regress_job;
SET zklock.protocol = 'kazoo';
SHOW zklock.protocol;
RESET ROLE;
BEGIN;
SELECT zk_lock_exclusive('proto-x') > 0 AS x, zk_lock_shared('proto-s') > 0 AS s;
SELECT resource, node ~ ('^/zklock/' || resource || '/[0-9a-f]{32}__r?lock__[0-9]{10}$') AS kazoo_layout
  FROM zk_locks ORDER BY resource;
COMMIT;
SET zklock.protocol = 'curator-mutex';
BEGIN;
SELECT zk_lock_exclusive('proto-m') > 0 AS locked;
SELECT node ~ '/_c_[-0-9a-f]{36}-lock-[0-9]{10}$' AS curator_mutex_layout FROM zk_locks;
-- Curator's mutex has no shared mode
SELECT zk_lock_shared('proto-m2');
ROLLBACK;
RESET zklock.protocol;

-- session locks off (for a transaction-pooling connection pooler): every
-- session-scope call is refused, unlocking is not; superuser-only
SHOW zklock.session_locks;
SELECT zk_session_lock_exclusive('held-before') > 0 AS locked;
SET zklock.session_locks = off;
SELECT zk_session_lock_exclusive('off');
SELECT zk_try_session_lock_shared(ARRAY['off', 'off2']);
SELECT zk_try_session_lock_semaphore('off-sem', 2);
SELECT zk_try_session_lock_exclusive('held-before');
SELECT resource, scope, count FROM zk_locks;
SELECT zk_unlock('held-before');
SELECT zk_unlock_semaphore('off-sem');
SELECT zk_unlock_all();
BEGIN;
SELECT zk_lock_exclusive('off') > 0 AS locked;
COMMIT;
SET ROLE zklock_regress_job;
SET zklock.session_locks = on;
RESET ROLE;
RESET zklock.session_locks;

DROP ROLE zklock_regress_job;
