"""
pg_upgrade from PostgreSQL 15 to the major under test (issue 28).

A DBA moves a 15 cluster that has zklock to a newer major with
pg_upgrade: the extension, its functions and view, the grants given on
them and objects that depend on them must come across, and the upgraded
cluster must take locks at once.  The test builds and installs zklock for
Debian's PostgreSQL 15 from a copy of the tree (as `make install` would),
makes a 15 cluster holding zklock objects, upgrades it with the new
major's pg_upgrade (--link-free copy mode) and checks the result on the
new major.  It needs a major newer than 15 under test (test/matrix.sh's
16, 17 and 18 passes); under 15 itself it is skipped, saying so.
"""

import os
import shutil
import subprocess
import tempfile

import pytest

import harness
from test_package import clean_env, copy_tree

TIMEOUT = 600
PG15_CONFIG = '/usr/lib/postgresql/15/bin/pg_config'
DB = 'zklock_upg'
ROLE = 'zklock_upg_job'

pytestmark = pytest.mark.skipif(
    harness.PG_MAJOR <= 15 or not os.path.exists(PG15_CONFIG),
    reason='pg_upgrade from 15 needs a newer major under test (now %d) and '
    "Debian's PostgreSQL 15" % harness.PG_MAJOR)


def run(cmd, cwd, timeout=300, env=None):
    r = subprocess.run(cmd, cwd=cwd, env=env or clean_env(),
                       stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, '%s failed (%d):\n%s%s' % (
        ' '.join(cmd), r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r


def test_pg_upgrade_from_15_keeps_zklock(ctx):
    work = tempfile.mkdtemp(prefix='zklock-upgrade-', dir=ctx.workdir)
    os.chmod(work, 0o755)
    # zklock for 15, built from this tree (a copy: the tree's objects are
    # the major under test's)
    src = os.path.join(work, 'src15')
    copy_tree(src)
    run(['make', 'PG_CONFIG=' + PG15_CONFIG], src)
    run(['make', 'PG_CONFIG=' + PG15_CONFIG, 'install'], src)
    bin15 = run([PG15_CONFIG, '--bindir'], work).stdout.strip()

    conf = {'zklock.hosts': ctx.zk.connect_string,
            'zklock.connect_timeout': '%ds' % ctx.connect_timeout}
    # PostgreSQL 18's initdb turns data checksums on by default; 15's
    # does not, and pg_upgrade wants both alike
    new_args = ['--no-data-checksums'] if harness.PG_MAJOR >= 18 else []
    old = harness.PgCluster('upg15', conf, base_dir=work, bin_dir=bin15)
    new = harness.PgCluster('upg%d' % harness.PG_MAJOR, conf, base_dir=work,
                            initdb_args=new_args)
    try:
        old.start()
        old.psql('CREATE DATABASE %s' % DB)
        old.psql('CREATE ROLE %s' % ROLE)
        for sql in (
                'CREATE EXTENSION zklock',
                'GRANT EXECUTE ON FUNCTION zk_try_lock_exclusive(text), '
                'zk_status() TO %s' % ROLE,
                'GRANT SELECT ON zk_locks TO %s' % ROLE,
                'GRANT EXECUTE ON FUNCTION zk_locks() TO %s' % ROLE,
                # an object of the user's that depends on the extension
                "CREATE VIEW my_locks AS SELECT resource, mode FROM zk_locks",
                'GRANT SELECT ON my_locks TO %s' % ROLE,
                "CREATE FUNCTION nightly() RETURNS boolean LANGUAGE sql "
                "AS $$ SELECT zk_try_lock_exclusive('nightly') $$"):
            old.psql(sql, dbname=DB)
        assert old.psql('SELECT zk_try_lock_exclusive(%s)' % "'upg-15'",
                        dbname=DB).strip() == 't'
        version = old.psql("SELECT extversion FROM pg_extension "
                           "WHERE extname = 'zklock'", dbname=DB).strip()
        old.stop()

        new.init()
        up = os.path.join(work, 'pg_upgrade')
        os.makedirs(up)
        harness.chown_to_pg_user(up)
        r = subprocess.run(harness.as_pg_user([
            harness.PG_BIN + '/pg_upgrade', '-b', bin15, '-B', harness.PG_BIN,
            '-d', old.data_dir, '-D', new.data_dir, '-U', 'postgres',
            '-p', str(old.port), '-P', str(new.port)]),
            cwd=up, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=300)
        assert r.returncode == 0, 'pg_upgrade failed (%d):\n%s%s' % (
            r.returncode, r.stdout[-4000:], r.stderr[-2000:])
        new.start()
        assert new.psql("SELECT extversion FROM pg_extension WHERE extname "
                        "= 'zklock'", dbname=DB).strip() == version
        # the upgraded cluster locks at once, through the user's function,
        # as the role that was granted it
        conn = new.connect(dbname=DB)
        try:
            cur = conn.cursor()
            cur.execute('SET ROLE %s' % ROLE)
            cur.execute('BEGIN')
            cur.execute('SELECT nightly()')
            assert cur.fetchone() == (True,)
            cur.execute('SELECT resource, mode FROM my_locks')
            assert cur.fetchall() == [('nightly', 'exclusive')]
            cur.execute('SELECT state FROM zk_status()')
            assert cur.fetchone() == ('connected',)
            # 1.6's counts of the ZooKeeper client's log lines come
            # across (a healthy session: none at level error)
            cur.execute('SELECT zookeeper_log_lines, zookeeper_log_suppressed'
                        ' FROM zk_status()')
            assert cur.fetchone() == (0, 0)
            cur.execute('COMMIT')
            cur.execute('RESET ROLE')
            cur.execute('SELECT version()')
            ctx.log('upgraded zklock %s from PostgreSQL 15 to %s'
                    % (version, cur.fetchone()[0].split(' on ')[0]))
        finally:
            conn.close()
        ctx.zi.wait_contenders('nightly', 0)
    finally:
        for c in (new, old):
            try:
                if c.is_running():
                    c.stop()
            except Exception as e:          # noqa: BLE001 - logged, not fatal
                harness.log('stopping %s: %s' % (c.name, e))
        shutil.rmtree(work, ignore_errors=True)
