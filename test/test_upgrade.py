"""
pg_upgrade to the major under test from 15 and from 18 (issues 28, 40).

A DBA moves a cluster that has zklock to a newer major with pg_upgrade:
the extension, its functions and view, the grants given on them and
objects that depend on them must come across, and the upgraded cluster
must take locks at once.  For each older major (Debian's 15, the oldest
supported; 18, the newest release before 19) the test builds and installs
zklock for it from a copy of the tree (as `make install` would), makes a
cluster of that major holding zklock objects, upgrades it with the new
major's pg_upgrade (copy mode) and checks the result on the new major.

The older major's zklock is installed into a private copy of that
PostgreSQL under the test's directory, never into the machine's own
installation: other test runs (another major's, another work tree's) use
the machine's zklock at the same time.  PostgreSQL finds its share and lib
directories relative to its own binaries, so a copy that keeps the
installation's layout works as the original does.

Each pass needs a major newer than the older one under test: under 15 both
are skipped, under 16 to 18 the one from 18, saying so.
"""

import glob
import os
import shutil
import subprocess
import tempfile

import pytest

import harness
from test_package import ROOT, clean_env, copy_tree

TIMEOUT = 600
DB = 'zklock_upg'
ROLE = 'zklock_upg_job'

# the older majors upgraded from, and where their PostgreSQL is: Debian's
# 15; the others from the relocatable kits (test/matrix.sh), installed
# under /opt/zklock-pg/MAJOR by ../shared/pg/install.sh
OLD_MAJORS = (15, 18)
KITS = os.environ.get('ZKLOCK_PG_KITS') or os.path.join(ROOT, '..', 'shared',
                                                        'pg')


def installed_pg_config(major):
    if major == 15:
        return '/usr/lib/postgresql/15/bin/pg_config'
    return '/opt/zklock-pg/%d/bin/pg_config' % major


def run(cmd, cwd, timeout=300, env=None):
    r = subprocess.run(cmd, cwd=cwd, env=env or clean_env(),
                       stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, '%s failed (%d):\n%s%s' % (
        ' '.join(cmd), r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r


def private_postgresql(major, dest):
    """A copy of PostgreSQL `major` of its own under dest, without zklock;
    returns the copy's pg_config.

    A kit's major is extracted afresh from ../shared/pg when that folder is
    there; otherwise (a clone elsewhere) the installed kit or Debian's
    packages are copied, each directory to dest + its absolute path, so
    that the binaries find share/, lib/ and the headers where they expect
    them relative to themselves."""
    os.makedirs(dest)
    if major != 15 and os.path.exists(os.path.join(KITS, 'install.sh')):
        out = run(['bash', os.path.join(KITS, 'install.sh'), str(major),
                   os.path.join(dest, 'pg%d' % major)], dest).stdout
        pg_config = out.strip().splitlines()[-1]
    else:
        source = installed_pg_config(major)
        if not os.path.exists(source):
            pytest.skip('PostgreSQL %d is not installed here (%s) and no kit '
                        'folder %s: nothing to upgrade from' % (
                            major, source, KITS))

        def where(flag):
            return run([source, flag], dest).stdout.strip()
        bindir = where('--bindir')
        copied = []
        # the installation's own directory (bin/ and lib/), then what
        # Debian keeps apart: share/ and the server headers
        for d in (os.path.dirname(bindir), where('--sharedir'),
                  where('--includedir-server')):
            if any(d == c or d.startswith(c + '/') for c in copied):
                continue
            target = dest + d
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copytree(d, target, symlinks=True)
            copied.append(d)
        pg_config = dest + bindir + '/pg_config'
    # whatever zklock the original held (another work tree's make install)
    # is not this tree's: only the one built below may be found
    share = run([pg_config, '--sharedir'], dest).stdout.strip()
    lib = run([pg_config, '--pkglibdir'], dest).stdout.strip()
    for f in (glob.glob(share + '/extension/zklock*') +
              glob.glob(lib + '/zklock.so') +
              glob.glob(lib + '/bitcode/zklock*')):
        if os.path.isdir(f):
            shutil.rmtree(f)
        else:
            os.unlink(f)
    return pg_config


@pytest.mark.parametrize('old_major', [
    pytest.param(m, marks=pytest.mark.skipif(
        harness.PG_MAJOR <= m,
        reason='pg_upgrade from %d needs a newer major under test (now %d)'
        % (m, harness.PG_MAJOR)))
    for m in OLD_MAJORS])
def test_pg_upgrade_keeps_zklock(ctx, old_major):
    work = tempfile.mkdtemp(prefix='zklock-upgrade-', dir=ctx.workdir)
    os.chmod(work, 0o755)
    # the older major, a private copy (see above), and zklock for it,
    # built from this tree (a copy: the tree's objects are the major under
    # test's)
    old_pg_config = private_postgresql(old_major,
                                       os.path.join(work, 'old'))
    src = os.path.join(work, 'src%d' % old_major)
    copy_tree(src)
    run(['make', 'PG_CONFIG=' + old_pg_config], src)
    run(['make', 'PG_CONFIG=' + old_pg_config, 'install'], src)
    old_bin = run([old_pg_config, '--bindir'], work).stdout.strip()

    conf = {'zklock.hosts': ctx.zk.connect_string,
            'zklock.connect_timeout': '%ds' % ctx.connect_timeout}
    # PostgreSQL 18's initdb turns data checksums on by default; earlier
    # majors' do not, and pg_upgrade wants both alike
    new_args = (['--no-data-checksums']
                if harness.PG_MAJOR >= 18 and old_major < 18 else [])
    old = harness.PgCluster('upg%d' % old_major, conf, base_dir=work,
                            bin_dir=old_bin)
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
        assert old.psql("SELECT zk_try_lock_exclusive('upg-%d')" % old_major,
                        dbname=DB).strip() == 't'
        version = old.psql("SELECT extversion FROM pg_extension "
                           "WHERE extname = 'zklock'", dbname=DB).strip()
        old.stop()

        new.init()
        up = os.path.join(work, 'pg_upgrade')
        os.makedirs(up)
        harness.chown_to_pg_user(up)
        r = subprocess.run(harness.as_pg_user([
            harness.PG_BIN + '/pg_upgrade', '-b', old_bin, '-B', harness.PG_BIN,
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
            ctx.log('upgraded zklock %s from PostgreSQL %d to %s'
                    % (version, old_major, cur.fetchone()[0].split(' on ')[0]))
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
