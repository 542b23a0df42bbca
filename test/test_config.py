"""
Configuration as README's "Installation" documents it (issue 29): every
documented way of pointing zklock at the ensemble works on the major under
test, and an unset zklock.hosts fails at the first call, naming what it
tried.

  * unset: zklock.hosts means 127.0.0.1:2181; a lock call fails with 08001
    and names it (nothing listens there on the test machine: checked).
  * ALTER DATABASE ... SET and ALTER ROLE ... SET: no LOAD needed.
  * ALTER SYSTEM: on 15 and 16 PostgreSQL refuses a setting of a library
    not loaded in the session (42704), and takes it after LOAD 'zklock';
    17 and 18 take it either way.
  * postgresql.conf (a line, then a reload).
  * A connection's own options (libpq's options='-c ...' and PGOPTIONS)
    never make a backend run on a superuser-only setting nobody
    configured (issue 37): with zklock not preloaded, a role that may not
    set one and passes it (even with its configured value) made it fall
    back to its compiled-in default (zklock.root went from the configured
    tree to /zklock, zklock.session_locks back on); now every zklock call
    of that backend fails with 55000 naming the setting, and nothing is
    created in ZooKeeper.  Preloaded, PostgreSQL refuses the connection
    (42501).  A superuser's options, and a role without them, still work.

Each way is checked by a new backend taking a lock on the suite's
ZooKeeper, and by what SHOW says.  The tests run on a cluster of their
own, created without zklock.hosts, in this order (the last ones leave
settings behind).
"""

import os
import socket

import psycopg2

import harness

TIMEOUT = 120
DB = 'zklock_cfg'


def module_setup(ctx):
    pg = harness.PgCluster('cfg', {
        'zklock.root': ctx.root,
        'zklock.session_timeout': '%ds' % ctx.session_timeout,
        'zklock.connect_timeout': '2s',
    }, base_dir=ctx.workdir).start()
    ctx.shared.clusters = [pg]
    ctx.shared.pg = pg
    pg.psql('CREATE DATABASE %s' % DB)
    pg.psql('CREATE DATABASE %s_other' % DB)
    for db in (DB, DB + '_other'):
        pg.psql('CREATE EXTENSION zklock', dbname=db)
    pg.psql('CREATE ROLE cfg_job LOGIN', dbname=DB)
    pg.psql('GRANT EXECUTE ON FUNCTION zk_try_lock_exclusive(text), '
            'zk_status() TO cfg_job', dbname=DB)


def module_teardown(ctx):
    for pg in getattr(ctx.shared, 'clusters', []):
        pg.stop()


def backend(ctx, name, dbname=DB, user='postgres'):
    return ctx.backend(name, cluster=ctx.shared.pg, dbname=dbname, user=user)


def locks_on_the_suite_zk(ctx, b, name):
    """b takes (and releases) a lock on the suite's ZooKeeper."""
    b.query('BEGIN')
    assert b.scalar('SELECT zk_try_lock_exclusive(%s)', [name]) is True
    state, server = b.query('SELECT state, server FROM zk_status()')[0]
    b.query('COMMIT')
    assert state == 'connected', state
    assert server in ctx.zk.connect_string, (server, ctx.zk.connect_string)


def sqlstate_of(fn):
    try:
        fn()
    except psycopg2.Error as e:
        return e.pgcode, str(e)
    return None, None


def test_unset_hosts_fail_at_the_first_call_naming_them(ctx):
    s = socket.socket()
    s.settimeout(1)
    try:
        listening = s.connect_ex(('127.0.0.1', 2181)) == 0
    finally:
        s.close()
    assert not listening, 'something listens on 127.0.0.1:2181 on this machine'
    b = backend(ctx, 'cfg-unset')
    assert b.scalar("SELECT current_setting('zklock.hosts', true)") in \
        (None, '127.0.0.1:2181')
    code, msg = sqlstate_of(
        lambda: b.scalar("SELECT zk_try_lock_exclusive('cfg/unset')"))
    assert code == '08001', (code, msg)
    assert '127.0.0.1:2181' in msg, msg
    assert b.scalar('SHOW zklock.hosts') == '127.0.0.1:2181'


def test_alter_database_set(ctx):
    pg = ctx.shared.pg
    pg.psql("ALTER DATABASE %s SET zklock.hosts = '%s'"
            % (DB, ctx.zk.connect_string))
    try:
        b = backend(ctx, 'cfg-db')
        assert b.scalar('SHOW zklock.hosts') == ctx.zk.connect_string
        locks_on_the_suite_zk(ctx, b, 'cfg/db')
        other = backend(ctx, 'cfg-db-other', dbname=DB + '_other')
        other.query("LOAD 'zklock'")
        assert other.scalar('SHOW zklock.hosts') == '127.0.0.1:2181'
    finally:
        pg.psql('ALTER DATABASE %s RESET zklock.hosts' % DB)


def test_alter_role_set(ctx):
    pg = ctx.shared.pg
    pg.psql("ALTER ROLE cfg_job SET zklock.hosts = '%s'" % ctx.zk.connect_string)
    try:
        b = backend(ctx, 'cfg-role', user='cfg_job')
        assert b.scalar('SHOW zklock.hosts') == ctx.zk.connect_string
        locks_on_the_suite_zk(ctx, b, 'cfg/role')
    finally:
        pg.psql('ALTER ROLE cfg_job RESET zklock.hosts')


def test_alter_system(ctx):
    pg = ctx.shared.pg
    admin = backend(ctx, 'cfg-system', dbname='postgres')
    sql = "ALTER SYSTEM SET zklock.hosts = '%s'" % ctx.zk.connect_string
    code, msg = sqlstate_of(lambda: admin.query(sql))
    if harness.PG_MAJOR <= 16:
        # the documented step: LOAD first (README, "Installation")
        assert code == '42704' and 'zklock.hosts' in msg, (code, msg)
        admin.query("LOAD 'zklock'")
        admin.query(sql)
    else:
        assert code is None, msg
    admin.query('SELECT pg_reload_conf()')
    try:
        harness.wait_until(
            lambda: backend(ctx, 'cfg-system-probe').scalar(
                'SHOW zklock.hosts') == ctx.zk.connect_string,
            15, 'the reload takes ALTER SYSTEM in')
        locks_on_the_suite_zk(ctx, backend(ctx, 'cfg-system-new'), 'cfg/system')
    finally:
        admin.query("LOAD 'zklock'")
        admin.query('ALTER SYSTEM RESET zklock.hosts')
        admin.query('SELECT pg_reload_conf()')


def test_postgresql_conf(ctx):
    pg = ctx.shared.pg
    pg.set_conf({'zklock.hosts': ctx.zk.connect_string})
    harness.wait_until(
        lambda: backend(ctx, 'cfg-conf-probe').scalar(
            'SHOW zklock.hosts') == ctx.zk.connect_string,
        15, 'the reload takes postgresql.conf in')
    locks_on_the_suite_zk(ctx, backend(ctx, 'cfg-conf'), 'cfg/conf')


def superuser_only_settings(ctx):
    """(name, configured value) of every superuser-only zklock setting."""
    admin = backend(ctx, 'cfg-list')
    admin.query("LOAD 'zklock'")
    rows = admin.query("SELECT name, setting FROM pg_settings "
                       "WHERE name LIKE 'zklock.%%' AND context = 'superuser' "
                       "ORDER BY name")
    names = [r[0] for r in rows]
    for expected in ('zklock.hosts', 'zklock.root', 'zklock.session_timeout',
                     'zklock.auth_file', 'zklock.session_locks'):
        assert expected in names, (expected, names)
    return rows


def connect_with_options(pg, options, via, user='cfg_job'):
    """A connection passing `options` in libpq's options or in PGOPTIONS."""
    if via == 'options':
        return pg.connect(dbname=DB, user=user, options=options)
    saved = os.environ.get('PGOPTIONS')
    os.environ['PGOPTIONS'] = options
    try:
        return pg.connect(dbname=DB, user=user)
    finally:
        if saved is None:
            del os.environ['PGOPTIONS']
        else:
            os.environ['PGOPTIONS'] = saved


def lock_outcome(conn, sql, name):
    """SQLSTATE and message of `sql` in a transaction (None if it ran)."""
    cur = conn.cursor()
    try:
        cur.execute('BEGIN')
        cur.execute(sql, [name])
        return None, None
    except psycopg2.Error as e:
        return e.pgcode, str(e)
    finally:
        conn.rollback()


def test_startup_options_never_run_on_unconfigured_values(ctx):
    pg = ctx.shared.pg
    pg.set_conf({'zklock.hosts': ctx.zk.connect_string})
    harness.wait_until(
        lambda: backend(ctx, 'cfg-opt-probe').scalar(
            'SHOW zklock.hosts') == ctx.zk.connect_string,
        15, 'the reload takes postgresql.conf in')
    pg.psql('GRANT EXECUTE ON FUNCTION zk_session_lock_exclusive(text, interval) '
            'TO cfg_job', dbname=DB)
    # the control: the role with no options locks on the suite's ensemble
    locks_on_the_suite_zk(ctx, backend(ctx, 'cfg-opt-none', user='cfg_job'),
                          'cfg/opt-none')
    settings = superuser_only_settings(ctx)
    outcomes = {}
    for via in ('options', 'PGOPTIONS'):
        for name, value in settings:
            conn = connect_with_options(pg, '-c %s=%s' % (name, value), via)
            try:
                code, msg = lock_outcome(
                    conn, 'SELECT zk_try_lock_exclusive(%s)', 'cfg/opt')
            finally:
                conn.close()
            if code == '55000' and ('"%s"' % name) in msg:
                continue
            outcomes['%s via %s' % (name, via)] = (code, msg)
    # the administrator turned session locks off for the pooler's role
    pg.psql('ALTER ROLE cfg_job SET zklock.session_locks = off')
    try:
        conn = connect_with_options(pg, '-c zklock.session_locks=off',
                                    'options')
        try:
            code, msg = lock_outcome(
                conn, 'SELECT zk_session_lock_exclusive(%s)', 'cfg/opt-s')
        finally:
            conn.close()
        if code != '55000':
            outcomes['a session lock, turned off for the role'] = (code, msg)
    finally:
        pg.psql('ALTER ROLE cfg_job RESET zklock.session_locks')
    assert outcomes == {}, 'ran on a value nobody configured: %r' % outcomes
    for path in (ctx.root.rstrip('/') + '/cfg/opt',
                 ctx.root.rstrip('/') + '/cfg/opt-s'):
        assert ctx.kz.exists(path) is None, path + ' was created'

    # a superuser may pass them: they take effect
    su = pg.connect(dbname=DB, user='postgres',
                    options='-c zklock.root=%s' % ctx.root)
    try:
        assert lock_outcome(su, 'SELECT zk_try_lock_exclusive(%s)',
                            'cfg/opt-su') == (None, None)
    finally:
        su.close()


def test_startup_options_refused_when_preloaded(ctx):
    pre = harness.PgCluster('cfgpre', {
        'shared_preload_libraries': 'zklock',
        'zklock.hosts': ctx.zk.connect_string,
        'zklock.root': ctx.root,
    }, base_dir=ctx.workdir).start()
    try:
        pre.psql('CREATE DATABASE %s' % DB)
        pre.psql('CREATE EXTENSION zklock', dbname=DB)
        pre.psql('CREATE ROLE cfg_job LOGIN', dbname=DB)
        admin = pre.connect(dbname=DB)
        cur = admin.cursor()
        cur.execute("SELECT name, setting FROM pg_settings "
                    "WHERE name LIKE 'zklock.%%' AND context = 'superuser'")
        settings = cur.fetchall()
        admin.close()
        assert len(settings) >= 5, settings
        admitted = []
        for via in ('options', 'PGOPTIONS'):
            for name, value in settings:
                try:
                    conn = connect_with_options(
                        pre, '-c %s=%s' % (name, value), via)
                except psycopg2.OperationalError as e:
                    assert 'permission denied to set parameter "%s"' % name \
                        in str(e), str(e)
                    continue
                conn.close()
                admitted.append('%s via %s' % (name, via))
        assert admitted == [], 'connections admitted: %r' % admitted
    finally:
        pre.stop()
