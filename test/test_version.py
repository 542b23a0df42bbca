"""
Upgrades (issue 42, point 1): which zklock library a backend runs against
the extension's version (zk_version, 1.7), and ALTER EXTENSION zklock
UPDATE from every released version to the newest (1.9).

This module starts two clusters of its own on the suite's ZooKeeper: one
that preloads zklock (shared_preload_libraries), one that does not.  The
replacement test installs, for a while, a second build of this tree that
differs only in the version it reports (EXTVERSION=9.9-test, so
-DZKLOCK_LIBRARY_VERSION="9.9-test"), by renaming it over the installed
zklock.so as make install and dpkg write a new file; the original file is
put back the same way before the test ends.

In short, this module checks: a preloaded server under a replaced
`zklock.so` (a build of the tree that reports another version, renamed over
the installed file): an existing and a new backend still run the old,
deleted file and `zk_version` says `restart`; without preloading an older
backend says `reconnect` and a new one runs the new file; after the restart
the new version against the extension's says `update`; `ALTER EXTENSION
zklock UPDATE` from every released version (1.0 to 1.8) to 1.9 equal to a
fresh install, keeping the grants on the statistics' functions and views
and on `zk_locks`, the older views read on the 1.9 library before it, the
revocation functions granted to nobody, `zk_waits` and `zk_sessions`
refused (42501) to a role without `pg_read_all_stats`.
"""

import os
import shutil
import subprocess

import harness
from test_multisession import expect_sqlstate
from test_package import control_version
from test_stats import preloaded_cluster

DB = 'zklock_version'
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHER = '9.9-test'
VERSION_SQL = ('SELECT library_version, extension_version, default_version, '
               'preloaded, library_replaced, pending FROM zk_version')
VERSIONS = ['1.0', '1.1', '1.2', '1.3', '1.4', '1.5', '1.6', '1.7', '1.8']


def module_setup(ctx):
    ctx.shared.clusters = []
    ctx.shared.pre = preloaded_cluster(ctx, 'version-pre')
    ctx.shared.pre.psql('CREATE DATABASE %s' % DB)
    ctx.shared.pre.psql('CREATE EXTENSION zklock', dbname=DB)
    ctx.shared.plain = ctx.extra_cluster('version-plain', DB)


def module_teardown(ctx):
    for pg in getattr(ctx.shared, 'clusters', []):
        pg.stop()


def build_other_version(ctx):
    """This tree built again with another EXTVERSION: only version.o is
    compiled again (the copy keeps the objects' times), then linked."""
    dst = os.path.join(ctx.workdir, 'build-%s' % OTHER)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(REPO, dst, symlinks=True, ignore=shutil.ignore_patterns(
        '.git', 'test', 'bench', 'demo', 'debian', 'results', 'log'))
    r = subprocess.run(['make', '-C', dst, 'PG_CONFIG=' + harness.PG_CONFIG,
                        'EXTVERSION=' + OTHER], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    so = os.path.join(dst, 'zklock.so')
    with open(so, 'rb') as f:
        assert OTHER.encode() in f.read()
    return so


def install_library(src, libdir):
    """Put src in place of $libdir/zklock.so as a new file (a rename over
    the old name), as make install and dpkg do."""
    target = os.path.join(libdir, 'zklock.so')
    tmp = target + '.zklock-test'
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o755)
    os.rename(tmp, target)


def test_replaced_library_shows_restart_then_update(ctx):
    """With a new zklock.so installed under a preloaded server, every
    backend, a new connection too, still runs the old library (its mapping
    is the deleted file): zk_version says library_replaced and pending
    'restart'.  Without preloading, a backend that had loaded the library
    says 'reconnect' and a new connection runs the new file.  After the
    restart the preloaded server runs the new library, whose version is
    not the extension's: pending 'update'.  Nothing is pending before the
    replacement, nor once the original is back and the server restarted."""
    pre, plain = ctx.shared.pre, ctx.shared.plain
    v = control_version()
    libdir = harness._pg_config('--pkglibdir')
    orig = os.path.join(ctx.workdir, 'zklock.so.orig')
    shutil.copyfile(os.path.join(libdir, 'zklock.so'), orig)
    other = build_other_version(ctx)
    backends = []

    def backend(name, pg):
        b = ctx.backend(name, cluster=pg, dbname=DB)
        backends.append(b)
        return b

    a = backend('ver-a', pre)
    assert a.query(VERSION_SQL) == [(v, v, v, True, False, None)]
    p_old = backend('ver-p-old', plain)
    assert p_old.query(VERSION_SQL) == [(v, v, v, False, False, None)]
    try:
        install_library(other, libdir)
        b = backend('ver-b', pre)
        for s in (a, b):
            assert s.query(VERSION_SQL) == [(v, v, v, True, True, 'restart')]
        if harness.running_as_root():
            with open('/proc/%d/maps' % b.pid) as f:
                assert 'zklock.so (deleted)' in f.read()
        assert p_old.query(VERSION_SQL) == \
            [(v, v, v, False, True, 'reconnect')]
        p_new = backend('ver-p-new', plain)
        assert p_new.query(VERSION_SQL) == \
            [(OTHER, v, v, False, False, 'update')]

        for s in backends:
            s.close()
        backends.clear()
        pre.restart()
        c = backend('ver-c', pre)
        assert c.query(VERSION_SQL) == [(OTHER, v, v, True, False, 'update')]
    finally:
        for s in backends:
            s.close()
        backends.clear()
        install_library(orig, libdir)
        pre.restart()
    d = backend('ver-d', pre)
    try:
        assert d.query(VERSION_SQL) == [(v, v, v, True, False, None)]
    finally:
        d.close()


def test_update_from_every_version_to_1_9(ctx):
    """ALTER EXTENSION zklock UPDATE from every released version gives the
    functions and views of a fresh 1.9 install (failed_tries at the end of
    both statistics views, zk_version, zk_waits (1.7), zk_sessions (1.8),
    zk_lock_revoke and zk_lock_revoked, zk_locks' two revocation columns
    (1.9)), keeps the grants given on zk_stat_locks and zk_stat_cluster
    (function and view, with their grant option) and on zk_locks; the
    monitoring objects are for pg_read_all_stats only, the revocation
    functions for nobody until granted; the older statistics views and
    zk_locks keep reading on the 1.9 library until the update; after it,
    zk_version shows nothing pending."""
    pg = ctx.shared.pre
    now = control_version()
    role, mon = 'zklock_v17_viewer', 'zklock_v17_monitor'
    for r in (role, mon):
        pg.psql('DROP ROLE IF EXISTS %s' % r)
        pg.psql('CREATE ROLE %s' % r)
    pg.psql('GRANT pg_read_all_stats TO %s' % mon)
    fns = ("SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid)"
           " || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p "
           "JOIN pg_depend d ON d.objid = p.oid JOIN pg_extension e "
           "ON e.oid = d.refobjid AND e.extname = 'zklock' ORDER BY 1")
    views = ("SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c "
             "JOIN pg_depend d ON d.objid = c.oid "
             "AND d.classid = 'pg_class'::regclass JOIN pg_extension e "
             "ON e.oid = d.refobjid AND e.extname = 'zklock' "
             "WHERE c.relkind = 'v' ORDER BY 1")
    acl = ("SELECT array_agg(coalesce(r.rolname, 'PUBLIC') || ':' || "
           "a.privilege_type || ':' || a.is_grantable ORDER BY 1) "
           "FROM aclexplode((SELECT %s FROM %s WHERE oid = %%s::%s)) a "
           "LEFT JOIN pg_roles r ON r.oid = a.grantee "
           "WHERE r.rolname IS DISTINCT FROM current_user")
    fn_acl = acl % ('proacl', 'pg_proc', 'regprocedure')
    rel_acl = acl % ('relacl', 'pg_class', 'regclass')
    fresh_db = 'zklock_fresh17'
    dbs = {v: 'zklock_upd17_%s' % v.replace('.', '') for v in VERSIONS}
    for db in [fresh_db] + list(dbs.values()):
        pg.psql('DROP DATABASE IF EXISTS %s' % db)
        pg.psql('CREATE DATABASE %s' % db)
    backends = []
    try:
        pg.psql('CREATE EXTENSION zklock', dbname=fresh_db)
        fresh = ctx.backend('v17-fresh', cluster=pg, dbname=fresh_db)
        backends.append(fresh)
        want_fns, want_views = fresh.query(fns), fresh.query(views)
        assert [r[0] for r in want_views] == [
            'zk_locks', 'zk_sessions', 'zk_stat_cluster', 'zk_stat_locks',
            'zk_version', 'zk_waits'], want_views
        for name, q, priv in (('zk_library()', fn_acl, 'EXECUTE'),
                              ('zk_waits()', fn_acl, 'EXECUTE'),
                              ('zk_sessions()', fn_acl, 'EXECUTE'),
                              ('zk_version', rel_acl, 'SELECT'),
                              ('zk_waits', rel_acl, 'SELECT'),
                              ('zk_sessions', rel_acl, 'SELECT')):
            got = fresh.scalar(q, [name])
            assert got == ['pg_read_all_stats:%s:false' % priv], (name, got)
        for name in ('zk_lock_revoke(text,interval)',
                     'zk_lock_revoked(text)'):
            assert fresh.scalar(fn_acl, [name]) is None, name
        for v in VERSIONS:
            db = dbs[v]
            pg.psql("CREATE EXTENSION zklock VERSION '%s'" % v, dbname=db)
            stats = v in ('1.5', '1.6', '1.7', '1.8')
            # zk_locks' grants survive its re-creation (1.2 and 1.9)
            pg.psql('GRANT SELECT ON zk_locks TO %s; GRANT EXECUTE ON '
                    'FUNCTION zk_locks() TO %s' % (role, role), dbname=db)
            if stats:
                for o in ('zk_stat_locks', 'zk_stat_cluster'):
                    pg.psql('GRANT EXECUTE ON FUNCTION %s() TO %s WITH '
                            'GRANT OPTION; GRANT SELECT ON %s TO %s'
                            % (o, role, o, role), dbname=db)
            upd = ctx.backend('v17-upd', cluster=pg, dbname=db)
            backends.append(upd)
            before = {}
            # zk_locks of every version reads on the 1.9 library
            upd.query('SELECT * FROM zk_locks')
            for o, q in (('zk_locks()', fn_acl), ('zk_locks', rel_acl)):
                before[o] = (q, upd.scalar(q, [o]))
                assert role + ':' in str(before[o][1]), (v, o, before)
            if stats:
                # the older functions on the 1.9 library, before the
                # update (failed_tries came in 1.7)
                assert len(upd.query('SELECT * FROM zk_stat_cluster')[0]) \
                    == (16 if v in ('1.7', '1.8') else 15), v
                upd.query('SELECT * FROM zk_stat_locks')
                for o, q in (('zk_stat_locks()', fn_acl),
                             ('zk_stat_cluster()', fn_acl),
                             ('zk_stat_locks', rel_acl),
                             ('zk_stat_cluster', rel_acl)):
                    before[o] = (q, upd.scalar(q, [o]))
                    assert role + ':' in str(before[o][1]), (v, o, before)
            upd.query('ALTER EXTENSION zklock UPDATE')
            assert upd.scalar("SELECT extversion FROM pg_extension "
                              "WHERE extname = 'zklock'") == now, v
            assert upd.query(fns) == want_fns, v
            assert upd.query(views) == want_views, v
            for o, (q, b) in before.items():
                assert upd.scalar(q, [o]) == b, (v, o)
            for name in ('zk_lock_revoke(text,interval)',
                         'zk_lock_revoked(text)'):
                assert upd.scalar(fn_acl, [name]) is None, (v, name)
            assert upd.query(VERSION_SQL) == \
                [(now, now, now, True, False, None)], v
            upd.query('SET ROLE %s' % mon)
            row = upd.query('SELECT failed_tries FROM zk_stat_cluster')
            assert len(row) == 1 and row[0][0] >= 0, (v, row)
            upd.query('SELECT * FROM zk_waits')
            upd.query('SELECT * FROM zk_sessions')
            upd.query('RESET ROLE')
            upd.query('SET ROLE %s' % role)
            for view in ('zk_waits', 'zk_sessions'):
                expect_sqlstate(upd.submit('SELECT * FROM ' + view), '42501',
                                10, view + ' without pg_read_all_stats')
            upd.query('RESET ROLE')
            upd.close()
            backends.remove(upd)
    finally:
        for b in backends:
            b.close()
        for db in [fresh_db] + list(dbs.values()):
            pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
        for r in (role, mon):
            pg.psql('DROP ROLE %s' % r)
