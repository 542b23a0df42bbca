"""zklock behind a real PgBouncer (issue 29, point 2): zklock.session_locks.

The module starts two PgBouncer processes of its own (Debian's
`pgbouncer`, run as the postgres OS user, which it requires, on
127.0.0.1 and free ports, trust authentication), both in front of the
suite's cluster with default_pool_size = 1, so that every client of one
role shares one server backend: one in transaction pooling, one in
session pooling.  They are stopped at module teardown, and by the
harness at exit whatever happens.

  transaction pooling, session locks on (the default): the hole the
      setting exists for, reproduced: client A's session lock stays with
      the server backend after A disconnects, client B is handed that
      backend and "takes" the lock again (t, by re-entry) while a direct
      client gets f;
  transaction pooling, ALTER ROLE ... SET zklock.session_locks = off:
      every session-scope function fails with 0A000 and the hint, without
      a node in ZooKeeper; unlocking still works; transaction-level locks
      exclude a direct client through the pooler and end at COMMIT;
  session pooling: the pooler's DISCARD ALL (server_reset_query) at the
      client's disconnect releases its session locks, so the next client
      of the same backend takes the lock afresh (count 1, not 2) and a
      direct client sees it released;
  a non-superuser cannot turn the setting back on (42501).
"""

import os
import socket
import subprocess
import time

import psycopg2

import harness
from harness import wait_until

TIMEOUT = 120                   # seconds per test (a pytest-timeout bound)

PGBOUNCER = '/usr/sbin/pgbouncer'
POOL_DB = 'zkt'                 # the pooler's name for ctx.dbname
ROLE_ON = 'zklock_pool_on'      # keeps the default: session locks on
ROLE_OFF = 'zklock_pool_off'    # ALTER ROLE ... SET zklock.session_locks = off

HINT = ('Use the transaction-level functions (zk_lock_exclusive and '
        'friends), which end with the transaction.')

# every session-scope lock function, each form (scalar, timeout, array,
# empty array, semaphore)
SESSION_CALLS = [
    "SELECT zk_session_lock_exclusive('pooler/off')",
    "SELECT zk_session_lock_exclusive('pooler/off', '1s')",
    "SELECT zk_session_lock_shared('pooler/off')",
    "SELECT zk_try_session_lock_exclusive('pooler/off')",
    "SELECT zk_try_session_lock_shared('pooler/off')",
    "SELECT zk_session_lock_exclusive(ARRAY['pooler/off', 'pooler/off2'])",
    "SELECT zk_session_lock_shared(ARRAY['pooler/off', 'pooler/off2'])",
    "SELECT zk_try_session_lock_exclusive(ARRAY['pooler/off', 'pooler/off2'])",
    "SELECT zk_try_session_lock_shared(ARRAY['pooler/off', 'pooler/off2'])",
    "SELECT zk_session_lock_exclusive(ARRAY[]::text[])",
    "SELECT zk_session_lock_semaphore('pooler/off-sem', 2)",
    "SELECT zk_session_lock_semaphore('pooler/off-sem', 2, '1s')",
    "SELECT zk_try_session_lock_semaphore('pooler/off-sem', 2)",
]


class PgBouncer:
    """A PgBouncer in front of `pg`, run in the foreground as the postgres
    OS user (it refuses to run as root) with a generated ini."""

    def __init__(self, name, pg, dbname, pool_mode, users, base_dir=None):
        self.name = name
        self.pool_mode = pool_mode
        self.host = '127.0.0.1'
        self.port = harness.free_port()
        self.dir = os.path.join(base_dir or harness.make_workdir(),
                                'pgbouncer-' + name)
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        harness.chown_to_pg_user(self.dir)
        self.log_path = os.path.join(self.dir, 'pgbouncer.log')
        self.ini = os.path.join(self.dir, 'pgbouncer.ini')
        auth_file = os.path.join(self.dir, 'users.txt')
        # trust: no password is checked, but a user must be listed
        with open(auth_file, 'w') as f:
            for u in users:
                f.write('"%s" ""\n' % u)
        with open(self.ini, 'w') as f:
            f.write('; written by test/test_pooler.py\n'
                    '[databases]\n'
                    '%s = host=%s port=%d dbname=%s\n'
                    '[pgbouncer]\n'
                    'listen_addr = %s\n'
                    'listen_port = %d\n'
                    'unix_socket_dir =\n'
                    'auth_type = trust\n'
                    'auth_file = %s\n'
                    'pool_mode = %s\n'
                    'default_pool_size = 1\n'
                    'min_pool_size = 0\n'
                    'reserve_pool_size = 0\n'
                    'max_client_conn = 50\n'
                    'server_reset_query = DISCARD ALL\n'
                    'server_reset_query_always = 0\n'
                    'ignore_startup_parameters = extra_float_digits\n'
                    'logfile = %s\n'
                    % (POOL_DB, pg.host, pg.port, dbname, self.host,
                       self.port, auth_file, pool_mode, self.log_path))
        for p in (auth_file, self.ini):
            harness.chown_to_pg_user(p)
        self.proc = None

    def __repr__(self):
        return '<PgBouncer %s %s port=%d>' % (self.name, self.pool_mode,
                                              self.port)

    def start(self, timeout=15):
        kw = {}
        if harness.running_as_root():
            kw = dict(user=harness.PG_OS_USER, group=harness.PG_OS_USER,
                      extra_groups=[])
        harness._register(self)
        harness.log('starting pgbouncer %s (%s pooling) on %s:%d'
                    % (self.name, self.pool_mode, self.host, self.port))
        with open(os.path.join(self.dir, 'stderr.log'), 'w') as err:
            self.proc = subprocess.Popen([PGBOUNCER, self.ini], cwd=self.dir,
                                         stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err, **kw)

        def listening():
            if self.proc.poll() is not None:
                raise RuntimeError('pgbouncer %s exited with status %d:\n%s%s'
                                   % (self.name, self.proc.returncode,
                                      harness.tail(self.log_path),
                                      harness.tail(os.path.join(
                                          self.dir, 'stderr.log'))))
            try:
                socket.create_connection((self.host, self.port), 1).close()
                return True
            except OSError:
                return False
        wait_until(listening, timeout, 'pgbouncer %s listening' % self.name)
        return self

    def stop(self):
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()   # SIGTERM: immediate shutdown
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            harness._unregister(self)

    def connect(self, user, autocommit=True):
        conn = psycopg2.connect(host=self.host, port=self.port,
                                dbname=POOL_DB, user=user, connect_timeout=10)
        conn.autocommit = autocommit
        return conn


def scalar(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
        return row[0] if row else None


def sqlstate_of(conn, sql):
    """The psycopg2 error of a statement expected to fail."""
    try:
        scalar(conn, sql)
    except psycopg2.Error as e:
        return e
    raise AssertionError('%s succeeded, expected an error' % sql)


def module_setup(ctx):
    if not os.access(PGBOUNCER, os.X_OK):
        raise RuntimeError('%s not found: test/install-deps.sh installs '
                           "Debian's pgbouncer" % PGBOUNCER)
    pg = ctx.pg
    for role in (ROLE_ON, ROLE_OFF):
        pg.psql('DROP ROLE IF EXISTS %s' % role)
        pg.psql('CREATE ROLE %s LOGIN' % role)
        pg.psql('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO %s; '
                'GRANT SELECT ON zk_locks TO %s' % (role, role),
                dbname=ctx.dbname)
    pg.psql('ALTER ROLE %s SET zklock.session_locks = off' % ROLE_OFF)
    ctx.shared.bouncers = []
    for name, mode in (('tx', 'transaction'), ('sess', 'session')):
        b = PgBouncer(name, pg, ctx.dbname, mode, (ROLE_ON, ROLE_OFF),
                      base_dir=ctx.workdir)
        ctx.shared.bouncers.append(b)
        b.start()
    ctx.shared.tx, ctx.shared.sess = ctx.shared.bouncers


def module_teardown(ctx):
    errors = []
    for b in getattr(ctx.shared, 'bouncers', []):
        try:
            b.stop()
        except Exception as e:
            errors.append('%r: %s' % (b, e))
    for role in (ROLE_ON, ROLE_OFF):
        try:
            ctx.pg.psql('DROP OWNED BY %s' % role, dbname=ctx.dbname,
                        check=False)
            ctx.pg.psql('DROP ROLE IF EXISTS %s' % role)
        except Exception as e:
            errors.append('%s: %s' % (role, e))
    assert not errors, '; '.join(errors)


def contenders(ctx, resource):
    return [c for c in ctx.zi.contenders(resource, with_stat=False)]


def test_transaction_pooling_hands_session_lock_on(ctx):
    """The hole, as the issue reports it: with session locks on, a session
    lock taken through a transaction pooler outlives the client that took
    it, and the next client handed the backend gets t for it too."""
    tx = ctx.shared.tx
    direct = ctx.backend('direct')
    res = 'pooler/migration'
    a = tx.connect(ROLE_ON)
    try:
        pid_a = scalar(a, 'SELECT pg_backend_pid()')
        assert scalar(a, 'SELECT zk_try_session_lock_exclusive(%s)',
                      [res]) is True
    finally:
        a.close()
    # A is gone; its lock is not: the backend went back to the pool
    time.sleep(0.5)
    assert len(contenders(ctx, res)) == 1, \
        'the session lock of a disconnected pooled client was released'
    b = tx.connect(ROLE_ON)
    try:
        assert scalar(b, 'SELECT pg_backend_pid()') == pid_a, \
            'pool_size 1 should hand B the backend A used'
        got_b = scalar(b, 'SELECT zk_try_session_lock_exclusive(%s)', [res])
        got_direct = direct.scalar('SELECT zk_try_lock_exclusive(%s)', [res])
        count = scalar(b, "SELECT count FROM zk_locks WHERE resource = %s "
                          "AND scope = 'session'", [res])
        ctx.log('transaction pooling, session locks on: B got %s, a direct '
                'client got %s, hold count %s' % (got_b, got_direct, count))
        # two unrelated clients "hold" one exclusive lock: B by re-entry on
        # A's hold, while the rest of the world is kept out
        assert got_b is True and got_direct is False and count == 2
        scalar(b, 'SELECT zk_unlock_all()')
    finally:
        b.close()
    wait_until(lambda: not contenders(ctx, res), 10,
               'the leaked session lock released by zk_unlock_all')


def test_transaction_pooling_session_locks_off(ctx):
    """ALTER ROLE ... SET zklock.session_locks = off: every session-scope
    function fails with 0A000 and the hint before any node is made;
    unlocking works; transaction-level locks work through the pooler."""
    tx = ctx.shared.tx
    direct = ctx.backend('direct')
    c = tx.connect(ROLE_OFF)
    try:
        assert scalar(c, 'SHOW zklock.session_locks') == 'off'
        for sql in SESSION_CALLS:
            e = sqlstate_of(c, sql)
            assert e.pgcode == '0A000', '%s: %s %s' % (sql, e.pgcode, e)
            assert e.diag.message_primary == \
                'session-level zklock locks are disabled', sql
            assert 'zklock.session_locks' in (e.diag.message_detail or '')
            assert e.diag.message_hint == HINT, sql
        assert scalar(c, 'SELECT count(*) FROM zk_locks') == 0
        for r in ('pooler/off', 'pooler/off2', 'pooler/off-sem'):
            assert contenders(ctx, r) == [], r
        assert ctx.zi.leftovers() == []
        # unlocking is never refused (nothing held: false, with a WARNING)
        assert scalar(c, "SELECT zk_unlock('pooler/off')") is False
        assert scalar(c, "SELECT zk_unlock_shared('pooler/off')") is False
        assert scalar(c, "SELECT zk_unlock(ARRAY['pooler/off'])") is False
        assert scalar(c, "SELECT zk_unlock_semaphore('pooler/off-sem')") \
            is False
        scalar(c, 'SELECT zk_unlock_all()')
    finally:
        c.close()

    # transaction-level locks through the pooler: mutual exclusion with a
    # direct client while the pooled transaction holds it, none after
    res = 'pooler/tx'
    c = tx.connect(ROLE_OFF, autocommit=False)
    try:
        tok = scalar(c, 'SELECT zk_lock_exclusive(%s)', [res])
        assert tok > 0
        assert len(contenders(ctx, res)) == 1
        assert direct.scalar('SELECT zk_try_lock_exclusive(%s)',
                             [res]) is False
        c.commit()
        # the delete is sent at COMMIT, not waited for
        wait_until(lambda: not contenders(ctx, res), 10,
                   'the transaction-level lock released at COMMIT')
        assert direct.scalar('SELECT zk_try_lock_exclusive(%s)',
                             [res]) is True
        # and a semaphore of transaction scope too
        assert scalar(c, "SELECT zk_try_lock_semaphore('pooler/tx-sem', 1)") \
            is True
        c.commit()
    finally:
        c.close()


def test_session_lock_taken_before_off_can_be_released(ctx):
    """A session lock held when the setting is turned off (a superuser's
    SET) cannot be taken again, but zk_unlock still releases it."""
    res = 'pooler/before-off'
    s = ctx.backend('su')
    assert s.scalar('SELECT zk_session_lock_exclusive(%s)', [res]) > 0
    s.scalar('SET zklock.session_locks = off')
    try:
        s.scalar('SELECT zk_try_session_lock_exclusive(%s)', [res])
        raise AssertionError('re-entry of a session lock succeeded while '
                             'zklock.session_locks is off')
    except psycopg2.Error as e:
        assert e.pgcode == '0A000', e
    assert s.scalar("SELECT count FROM zk_locks WHERE resource = %s", [res]) \
        == 1
    assert s.scalar('SELECT zk_unlock(%s)', [res]) is True
    wait_until(lambda: not contenders(ctx, res), 10,
               'the session lock released by zk_unlock')


def test_session_pooling_discard_all_releases(ctx):
    """Session pooling: the session lock is the client's for its whole
    connection; at its disconnect PgBouncer runs DISCARD ALL, which
    releases it before the backend serves the next client."""
    sess = ctx.shared.sess
    direct = ctx.backend('direct')
    res = 'pooler/session'
    a = sess.connect(ROLE_ON)
    try:
        pid_a = scalar(a, 'SELECT pg_backend_pid()')
        assert scalar(a, 'SELECT zk_session_lock_exclusive(%s)', [res]) > 0
        assert direct.scalar('SELECT zk_try_lock_exclusive(%s)',
                             [res]) is False
    finally:
        a.close()
    # DISCARD ALL runs as the pooler takes the backend back
    wait_until(lambda: not contenders(ctx, res), 10,
               'the session lock released by the pooler\'s DISCARD ALL')
    assert direct.scalar('SELECT zk_try_lock_exclusive(%s)', [res]) is True
    b = sess.connect(ROLE_ON)
    try:
        assert scalar(b, 'SELECT pg_backend_pid()') == pid_a, \
            'pool_size 1 should hand B the backend A used'
        assert scalar(b, 'SELECT zk_try_session_lock_exclusive(%s)',
                      [res]) is True
        # a hold of its own, not one more on A's
        assert scalar(b, "SELECT count FROM zk_locks WHERE resource = %s",
                      [res]) == 1
        assert direct.scalar('SELECT zk_try_lock_exclusive(%s)',
                             [res]) is False
    finally:
        b.close()
    wait_until(lambda: not contenders(ctx, res), 10,
               'B\'s session lock released by the pooler\'s DISCARD ALL')


def test_non_superuser_cannot_turn_it_on(ctx):
    """The setting is superuser-only: the role it was turned off for
    cannot turn it back on, directly or through the pooler.  Before the
    library is loaded PostgreSQL takes a SET of an unknown "zklock."
    setting as a placeholder; loading the library then rejects a
    non-superuser's value, so it never takes effect either."""
    early = ctx.backend('off-role-early', user=ROLE_OFF)
    early.scalar('SET zklock.session_locks = on')       # a placeholder
    # the first zklock call loads the library: the value is rejected
    assert early.scalar("SELECT zk_try_lock_exclusive('pooler/early')") \
        is True
    assert early.scalar('SHOW zklock.session_locks') == 'off'
    try:
        early.scalar("SELECT zk_try_session_lock_exclusive('pooler/early')")
        raise AssertionError('a non-superuser\'s placeholder turned '
                             'session locks on')
    except psycopg2.Error as e:
        assert e.pgcode == '0A000', e

    direct = ctx.backend('off-role', user=ROLE_OFF)
    direct.scalar('SELECT zk_unlock_all()')             # library loaded
    try:
        direct.scalar('SET zklock.session_locks = on')
        raise AssertionError('a non-superuser turned zklock.session_locks on')
    except psycopg2.Error as e:
        assert e.pgcode == '42501', e
    assert direct.scalar('SHOW zklock.session_locks') == 'off'

    c = ctx.shared.tx.connect(ROLE_OFF)
    try:
        scalar(c, 'SELECT zk_unlock_all()')
        e = sqlstate_of(c, 'SET zklock.session_locks = on')
        assert e.pgcode == '42501', e
        assert scalar(c, 'SHOW zklock.session_locks') == 'off'
    finally:
        c.close()
