"""
pg_regress: the single-session SQL suites (sql/<name>.sql,
expected/<name>.out), against the suite's main cluster and ZooKeeper, and
again against a cluster that preloads zklock (shared_preload_libraries,
as the manual's Monitoring section configures a server for the statistics):
`make installcheck` must pass on a server configured either way (issue
42: zklock_guc listed the server-start settings only where preloaded).

Each test that `make -s regress-list` names (the Makefile's REGRESS) is
one test here, test_pg_regress[<name>].  One pg_regress run (--use-existing,
database zklock_regress, created as pg_regress would) covers the selected
ones; each test then reports its own result, with its diff
(regression.diffs) when it failed.  A pg_regress that exits non-zero
although every selected test passed is one more failure (an error at
the module's end); a name pg_regress reported nothing for fails.

In short, this module checks: single-session behaviour: scopes, savepoints,
re-entrancy, unlock warnings, bad input, settings and privileges,
protocols; run on the suite's cluster and again on one that preloads
zklock, so `make installcheck` passes on a server configured either way.
"""

import os
import re
import subprocess

import pytest

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REGRESS_DB = 'zklock_regress'
REGRESS_TIMEOUT = 600
OUTPUT_LINES = 60
DIFF_LINES = 200

NO_LIST = 'regress-list'         # the test that fails without a list
_list_error = []

REGRESS_LINE = re.compile(
    r'^\s*(?:test\s+)?([A-Za-z0-9_.-]+)\s+\.\.\.\s+(ok|FAILED|failed \(ignored\))')
REGRESS_TAP = re.compile(r'^(not )?ok\s+\d+\s+[-+]\s+([A-Za-z0-9_.-]+)')


def clean_make_env():
    """Environment for a nested make without the outer make's flags."""
    env = dict(os.environ)
    for k in ('MAKEFLAGS', 'MAKELEVEL', 'MFLAGS', 'MAKEOVERRIDES'):
        env.pop(k, None)
    return env


def regress_list():
    r = subprocess.run(['make', '-s', '--no-print-directory', 'regress-list',
                        'PG_CONFIG=' + harness.PG_CONFIG],
                       cwd=ROOT, env=clean_make_env(), capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError('make -s regress-list failed: %s' % r.stderr)
    names = [w for w in r.stdout.split()
             if re.fullmatch(r'[A-Za-z0-9_.-]+', w)]
    if not names:
        raise RuntimeError('make -s regress-list named no test')
    return names


def pytest_generate_tests(metafunc):
    if 'name' not in metafunc.fixturenames:
        return
    try:
        names = regress_list()
    except Exception as e:
        # one failing test says why there is no list
        _list_error.append(str(e))
        names = [NO_LIST]
    metafunc.parametrize('name', names)


def create_regress_db(pg):
    """What pg_regress does itself without --use-existing."""
    pg.psql('DROP DATABASE IF EXISTS %s' % REGRESS_DB)
    pg.psql('CREATE DATABASE %s TEMPLATE template0' % REGRESS_DB)
    for setting in ("lc_messages TO 'C'", "lc_monetary TO 'C'",
                    "lc_numeric TO 'C'", "lc_time TO 'C'",
                    "bytea_output TO 'hex'",
                    "timezone_abbreviations TO 'Default'"):
        pg.psql('ALTER DATABASE %s SET %s' % (REGRESS_DB, setting))


def diff_of(diffs, name):
    """The part of regression.diffs about one test."""
    parts = re.split(r'(?m)^(?=diff )', diffs)
    mine = [p for p in parts
            if re.match(r'diff .*[/ ]%s\.out\b' % re.escape(name), p)]
    return '\n'.join(mine)


class RegressRun:
    def __init__(self):
        self.status = None
        self.output = ''
        self.result = {}                # name -> passed (bool)
        self.diffs = ''
        self.outdir = None


@pytest.fixture(scope='module', params=['plain', 'preloaded'])
def regress_cluster(request, pg, zk, workdir):
    """The suite's main cluster, then one of this module's own that
    preloads zklock (same ensemble and root)."""
    if request.param == 'plain':
        yield pg
        return
    cluster = harness.PgCluster('regress-pre', {
        'shared_preload_libraries': 'zklock',
        'zklock.hosts': zk.connect_string,
        'zklock.root': pg.extra_conf['zklock.root'],
        'zklock.session_timeout': pg.extra_conf['zklock.session_timeout'],
    }, base_dir=workdir).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope='module')
def regress_run(request, regress_cluster, workdir):
    """One pg_regress run over the tests of this module that were
    selected (-k, --lf) on one cluster: a RegressRun."""
    pg = regress_cluster
    names = [item.callspec.params['name'] for item in request.session.items
             if getattr(item, 'module', None) is request.module
             and 'name' in getattr(getattr(item, 'callspec', None),
                                   'params', {})
             and item.callspec.params['name'] != NO_LIST]
    names = list(dict.fromkeys(names))     # once each, whatever the cluster
    run = RegressRun()
    if not names:                       # only the failing NO_LIST test
        yield run
        return
    run.outdir = os.path.join(workdir, 'regress-' + pg.name)
    os.makedirs(run.outdir, exist_ok=True)
    create_regress_db(pg)
    cmd = [harness.PG_REGRESS, '--use-existing', '--host=127.0.0.1',
           '--port=%d' % pg.port, '--user=postgres',
           '--dbname=%s' % REGRESS_DB, '--inputdir=%s' % ROOT,
           '--outputdir=%s' % run.outdir, '--bindir=%s' % harness.PG_BIN]
    cmd += names
    try:
        r = subprocess.run(cmd, cwd=run.outdir, capture_output=True,
                           text=True, errors='replace',
                           timeout=REGRESS_TIMEOUT, stdin=subprocess.DEVNULL)
        run.output, run.status = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        run.status = 'timeout (%d s)' % REGRESS_TIMEOUT
    for line in run.output.splitlines():
        m = REGRESS_LINE.match(line)
        if m:
            run.result[m.group(1)] = (m.group(2) != 'FAILED')
            continue
        m = REGRESS_TAP.match(line)
        if m:
            run.result[m.group(2)] = not m.group(1)
    diffs = os.path.join(run.outdir, 'regression.diffs')
    if os.path.exists(diffs):
        with open(diffs, errors='replace') as f:
            run.diffs = f.read()
    yield run
    if run.status != 0 and all(run.result.get(n) for n in names):
        pytest.fail('pg_regress exited with status %s although every test '
                    'passed:\n%s' % (run.status, '\n'.join(
                        run.output.splitlines()[:OUTPUT_LINES])),
                    pytrace=False)


def test_pg_regress(name, regress_run):
    if name == NO_LIST and _list_error:
        pytest.fail(_list_error[0], pytrace=False)
    run = regress_run
    if run.result.get(name):
        return
    text = '\n'.join(run.output.splitlines()[:OUTPUT_LINES])
    if name not in run.result:
        pytest.fail('%s: no result (pg_regress status %s)\n%s'
                    % (name, run.status, text), pytrace=False)
    diff = diff_of(run.diffs, name)
    pytest.fail('%s FAILED\n%s\n--- its part of %s (head):\n%s'
                % (name, text, os.path.join(run.outdir, 'regression.diffs'),
                   '\n'.join(diff.splitlines()[:DIFF_LINES])), pytrace=False)
