#!/usr/bin/python3
"""
zklock test runner (run by test/run.sh, i.e. `make test`).

Starts one standalone ZooKeeper and one PostgreSQL cluster on 127.0.0.1,
with the extension's GUCs pointing at that ZooKeeper, then runs every
suite and stops everything it started:

  unit      test/unit/test_recipe, a TAP program (pure recipe logic)
  regress   pg_regress on the tests `make -s regress-list` names
  python    every test/test_*.py: each function test_*(ctx) is one test

Every individual test counts once.  A suite that cannot run or crashes
counts as failed, never as zero tests.  The very last line printed is
exactly "N passed, N failed"; the exit status is 1 if anything failed.

Usage: /usr/bin/python3 test/run_tests.py [--suites unit,regress,python]
       [-k SUBSTRING] [--keep] [--failed-step NAME ...]

A python test module is plain functions:

    def test_something(ctx):          # ctx: TestContext, see below
        a = ctx.backend('a')          # a Backend (closed after the test)
        ...
        assert ...

Tests run in definition order, each in its own thread with a time bound
(module attribute TIMEOUT, default 120 s, or the function's own `timeout`
attribute); an exception, a failed assertion or the time bound makes the
test fail.  Backends a test opened are closed (terminated if stuck) after
it, whatever happened.

A module may also define (both optional):

    def setup_module(ctx):      # once, before its first test
        ctx.shared.ens = harness.ZooKeeper(n=3, base_dir=ctx.workdir, ...)
    def teardown_module(ctx):   # once, after its last test, always
        ...                     # (also after a failed setup_module)

Both get a TestContext like a test's; `ctx.shared` is one namespace per
module that every test of the module sees as `ctx.shared`.  Each is
bounded (module attribute SETUP_TIMEOUT, default 300 s).  A failed
setup_module fails every test of the module (they do not run); a failed
teardown_module counts as one failure.  Whatever either starts through
harness is stopped at exit in any case.  Clusters listed in
`ctx.shared.clusters` have their server logs shown for a failed test, as
the main cluster's is.  `ctx.figure(name, value, unit)` records a
measured figure; a module's figures are printed in a FIGURES block at the
end of its output.

After each module (its teardown included) the runner checks the
suite's ZooKeeper: no contender-named node anywhere, no ephemeral node,
no watch (but the runner's own kazoo client's data watches).  It waits up
to LEFTOVER_WAIT_S for asynchronous releases, then counts one failure for
the module naming what was left.  Modules that start a ZooKeeper of their
own check it themselves before stopping it.
"""

import argparse
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
import types

sys.dont_write_bytecode = True          # no __pycache__ in the work tree

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, 'lib'))

import harness                          # noqa: E402

# Test-friendly extension settings.  ZooKeeper runs with tickTime 500 ms,
# so it grants session timeouts from 1 s to 60 s.
ZK_ROOT = '/zklock'
SESSION_TIMEOUT_S = 6
CONNECT_TIMEOUT_S = 3
REGRESS_DB = 'zklock_regress'
TEST_DB = 'zklock_test'
DEFAULT_TEST_TIMEOUT = 120
UNIT_TIMEOUT = 120
REGRESS_TIMEOUT = 600
UNIT_EXE = os.path.join(HERE, 'unit', 'test_recipe')
# the fuzz corpus (test/fuzz/corpus) replayed through the fuzz checks
CORPUS_EXE = os.path.join(HERE, 'unit', 'test_corpus')
STEP_NAMES = {                  # --failed-step values given by test/run.sh
    'build': 'make (building the extension)',
    'install': 'make install',
    'unit': 'make -C test/unit',
}


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------

class Results:
    """Per-suite pass/fail counts and the names of failed tests."""

    def __init__(self):
        self.suites = {}                 # suite -> {'passed', 'failed'}
        self.failures = []               # 'suite: test'

    def _suite(self, suite):
        return self.suites.setdefault(suite, {'passed': 0, 'failed': 0})

    def ok(self, suite, test):
        self._suite(suite)['passed'] += 1

    def fail(self, suite, test, detail=None):
        self._suite(suite)['failed'] += 1
        self.failures.append('%s: %s' % (suite, test))
        out('  FAIL  %s: %s' % (suite, test))
        if detail:
            out(indent(detail.rstrip('\n')))

    @property
    def passed(self):
        return sum(s['passed'] for s in self.suites.values())

    @property
    def failed(self):
        return sum(s['failed'] for s in self.suites.values())


def suite_line(results, suites):
    for s in suites:
        c = results.suites.get(s, {'passed': 0, 'failed': 0})
        out('  -- %s: %d passed, %d failed' % (s, c['passed'], c['failed']))


def out(text=''):
    print(text, flush=True)


def indent(text, prefix='        '):
    return '\n'.join(prefix + line for line in text.splitlines())


def head(text, lines):
    parts = text.splitlines()
    more = len(parts) - lines
    return '\n'.join(parts[:lines]) + ('\n... (%d more lines)' % more
                                       if more > 0 else '')


def clean_make_env():
    """Environment for a nested make without the outer make's flags."""
    env = dict(os.environ)
    for k in ('MAKEFLAGS', 'MAKELEVEL', 'MFLAGS', 'MAKEOVERRIDES'):
        env.pop(k, None)
    return env


# ---------------------------------------------------------------------------
# suite: unit (TAP)
# ---------------------------------------------------------------------------

TAP_PLAN = re.compile(r'^1\.\.(\d+)')
TAP_RESULT = re.compile(r'^(not )?ok\b\s*(\d*)\s*-?\s*(.*)$')


def parse_tap(text, results, suite):
    """Count TAP results.  `not ok` fails unless marked TODO; a missing or
    short plan, extra results or `Bail out!` are failures too."""
    plan = None
    seen = 0
    failed_any = False
    for line in text.splitlines():
        m = TAP_PLAN.match(line)
        if m and plan is None:
            plan = int(m.group(1))
            continue
        if line.startswith('Bail out!'):
            results.fail(suite, line)
            failed_any = True
            continue
        m = TAP_RESULT.match(line)
        if not m:
            continue
        seen += 1
        desc = m.group(3) or ('test %s' % (m.group(2) or seen))
        todo = re.search(r'#\s*TODO\b', desc, re.I)
        if m.group(1) and not todo:
            results.fail(suite, desc)
            failed_any = True
        else:
            results.ok(suite, desc)
    if plan is None:
        results.fail(suite, 'no TAP plan (1..N) in the output')
        failed_any = True
    elif seen < plan:
        for i in range(seen + 1, plan + 1):
            results.fail(suite, 'test %d of %d never reported' % (i, plan))
        failed_any = True
    elif seen > plan:
        results.fail(suite, '%d results for a plan of %d' % (seen, plan))
        failed_any = True
    return failed_any


def run_unit(results, build_failed, exe=UNIT_EXE):
    suite = 'unit'
    name = os.path.basename(exe)
    out('== unit: %s' % os.path.relpath(exe, ROOT))
    if build_failed:
        # already counted as the failed build step "unit"
        out('  not run: make -C test/unit failed (see above)')
        return
    if not os.access(exe, os.X_OK):
        results.fail(suite, '%s was not built' % exe)
        return
    try:
        r = subprocess.run([exe], cwd=os.path.dirname(exe),
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, errors='replace', timeout=UNIT_TIMEOUT)
        text, status = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b'').decode('utf-8', 'replace') \
            if isinstance(e.stdout, bytes) else (e.stdout or '')
        status = 'timeout'
    failed_any = parse_tap(text, results, suite)
    if status == 'timeout':
        results.fail(suite, '%s did not finish within %d s'
                     % (name, UNIT_TIMEOUT))
        failed_any = True
    elif status != 0 and not failed_any:
        # e.g. a crash after the last "ok": never let it pass silently
        results.fail(suite, '%s exited with status %s' % (name, status))
        failed_any = True
    if failed_any:
        out(indent(head(text + (r.stderr if status != 'timeout' else ''),
                        200)))


# ---------------------------------------------------------------------------
# suite: pg_regress
# ---------------------------------------------------------------------------

REGRESS_LINE = re.compile(
    r'^\s*(?:test\s+)?([A-Za-z0-9_.-]+)\s+\.\.\.\s+(ok|FAILED|failed \(ignored\))')
REGRESS_TAP = re.compile(r'^(not )?ok\s+\d+\s+[-+]\s+([A-Za-z0-9_.-]+)')


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


def create_regress_db(pg):
    """What pg_regress does itself without --use-existing."""
    pg.psql('DROP DATABASE IF EXISTS %s' % REGRESS_DB)
    pg.psql('CREATE DATABASE %s TEMPLATE template0' % REGRESS_DB)
    for setting in ("lc_messages TO 'C'", "lc_monetary TO 'C'",
                    "lc_numeric TO 'C'", "lc_time TO 'C'",
                    "bytea_output TO 'hex'",
                    "timezone_abbreviations TO 'Default'"):
        pg.psql('ALTER DATABASE %s SET %s' % (REGRESS_DB, setting))


def run_regress(results, pg, workdir):
    suite = 'regress'
    out('== regress: pg_regress')
    try:
        names = regress_list()
        create_regress_db(pg)
    except Exception as e:
        results.fail(suite, 'could not prepare pg_regress: %s' % e)
        return
    outdir = os.path.join(workdir, 'regress')
    os.makedirs(outdir, exist_ok=True)
    cmd = [harness.PG_REGRESS, '--use-existing', '--host=127.0.0.1',
           '--port=%d' % pg.port, '--user=postgres',
           '--dbname=%s' % REGRESS_DB, '--inputdir=%s' % ROOT,
           '--outputdir=%s' % outdir, '--bindir=%s' % harness.PG_BIN] + names
    try:
        r = subprocess.run(cmd, cwd=outdir, capture_output=True, text=True,
                           errors='replace', timeout=REGRESS_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        text, status = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        text, status = '', 'timeout'
    status_of = {}
    for line in text.splitlines():
        m = REGRESS_LINE.match(line)
        if m:
            out('  ' + line.strip())
            status_of[m.group(1)] = (m.group(2) != 'FAILED')
            continue
        m = REGRESS_TAP.match(line)
        if m:
            out('  ' + line.strip())
            status_of[m.group(2)] = not m.group(1)
    failed_any = False
    for name in names:
        if name not in status_of:
            results.fail(suite, '%s: no result (pg_regress status %s)'
                         % (name, status))
            failed_any = True
        elif status_of[name]:
            results.ok(suite, name)
        else:
            results.fail(suite, name)
            failed_any = True
    if status != 0 and not failed_any:
        results.fail(suite, 'pg_regress exited with status %s' % status)
        failed_any = True
    if failed_any:
        out(indent(head(text, 60)))
        diffs = os.path.join(outdir, 'regression.diffs')
        if os.path.exists(diffs):
            out('   --- %s (head):' % diffs)
            with open(diffs, errors='replace') as f:
                out(indent(head(f.read(), 200)))


# ---------------------------------------------------------------------------
# suite: python tests
# ---------------------------------------------------------------------------

class SuiteContext:
    """What every python test shares: the servers and a kazoo client."""

    def __init__(self, zk, pg, kz, workdir=None):
        self.zk = zk
        self.pg = pg
        self.kz = kz
        self.zi = harness.ZkInspector(kz, ZK_ROOT)
        self.root = ZK_ROOT
        self.dbname = TEST_DB
        self.session_timeout = SESSION_TIMEOUT_S
        self.connect_timeout = CONNECT_TIMEOUT_S
        self.workdir = workdir          # None: harness makes its own dirs


ZOO_LOG_LINE = re.compile(r'^\S+ \S+:\d+\(0x[0-9a-f]+\):ZOO_[A-Z]+@')


class TestContext:
    """The `ctx` a test function receives.

    Attributes: pg (PgCluster), zk (ZooKeeper), kz (kazoo client),
    zi (ZkInspector on the root), root, dbname (has the extension),
    session_timeout and connect_timeout (seconds, as configured),
    name (the test's name), workdir (the runner's work directory: put
    servers a module starts itself under it), shared (the module's
    namespace, see setup_module in the module docstring).
    """

    def __init__(self, suite_ctx, name, shared=None, figures=None):
        self.__dict__.update(vars(suite_ctx))
        self.name = name
        self.shared = shared if shared is not None \
            else types.SimpleNamespace()
        self._figures = figures if figures is not None else []
        self._backends = []
        self._admin = None
        self._lock = threading.Lock()
        self.log_offset = self.pg.log_size()
        self.log_offsets = [(c, c.log_size())
                            for c in getattr(self.shared, 'clusters', [])]

    def backend(self, name=None, dbname=None, cluster=None, **kw):
        """A new Backend on the test database (of `cluster`, default the
        main cluster), closed after the test."""
        b = harness.Backend(cluster or self.pg, name or 'zkt-%s' % self.name,
                            dbname=dbname or self.dbname, **kw)
        with self._lock:
            self._backends.append(b)
        return b

    def figure(self, name, value, unit='', fmt='%s'):
        """Record a measured figure (printed in the module's FIGURES block
        at the end of its output); a name recorded again is replaced."""
        with self._lock:
            self._figures[:] = [f for f in self._figures if f[0] != name]
            self._figures.append((name, value, unit, fmt))

    def server_logs(self, lines=30):
        """The tail of what every watched server log got since the test
        began: the main cluster's and those of ctx.shared.clusters."""
        parts = []
        text = self.pg.log_since(self.log_offset)
        if text.strip():
            parts.append('server log during the test (tail):\n'
                         + '\n'.join(text.splitlines()[-lines:]))
        for c, offset in self.log_offsets:
            # libzookeeper's own stderr lines (every refused reconnect
            # while a test breaks servers) would hide PostgreSQL's
            all_lines = c.log_since(offset).splitlines()
            kept = [ln for ln in all_lines if not ZOO_LOG_LINE.match(ln)]
            if kept or all_lines:
                parts.append('server log of %s during the test (tail%s):\n%s'
                             % (c.name, ', %d libzookeeper lines left out'
                                % (len(all_lines) - len(kept))
                                if len(kept) < len(all_lines) else '',
                                '\n'.join(kept[-lines:])))
        return '\n'.join(parts)

    @property
    def admin(self):
        """A Backend for looking on (pg_stat_activity, pg_cancel_backend)."""
        if self._admin is None:
            self._admin = self.backend('zkt-admin')
        return self._admin

    def wait_state(self, backend, timeout=10):
        """Wait until `backend` waits in the extension (pg_stat_activity
        shows wait_event_type 'Extension')."""
        sql = ('SELECT wait_event_type FROM pg_stat_activity '
               'WHERE pid = %s')
        last = [None]

        def waiting():
            last[0] = self.admin.scalar(sql, [backend.pid])
            return last[0] == 'Extension'
        try:
            harness.wait_until(waiting, timeout,
                               '%r to wait in the extension' % backend,
                               interval=0.05)
        except TimeoutError as e:
            raise AssertionError('%s (wait_event_type is %r)'
                                 % (e, last[0])) from None

    def log(self, msg):
        out('        [%s] %s' % (self.name, msg))

    def close(self):
        """Close every backend the test opened; bounded, never raises."""
        with self._lock:
            backends, self._backends = self._backends, []
        for b in backends:
            b.close(timeout=5)


def discover(pattern):
    """[(module name, module or exception, [(test name, function)])]"""
    found = []
    for path in sorted(glob.glob(os.path.join(HERE, 'test_*.py'))):
        modname = os.path.splitext(os.path.basename(path))[0]
        try:
            spec = importlib.util.spec_from_file_location(
                'zklock_tests.' + modname, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except Exception:
            found.append((modname, traceback.format_exc(), []))
            continue
        tests = [(n, f) for n, f in vars(mod).items()
                 if n.startswith('test_') and callable(f)
                 and (not pattern or pattern in '%s.%s' % (modname, n))]
        found.append((modname, mod, tests))
    return found


def run_one(fn, ctx, timeout):
    """Run one test in a daemon thread with a time bound.  Returns None on
    success, or the failure text."""
    box = {}

    def target():
        try:
            fn(ctx)
        except BaseException:
            box['error'] = traceback.format_exc()

    t = threading.Thread(target=target, daemon=True, name=ctx.name)
    t.start()
    t.join(timeout)
    if t.is_alive():
        # End its backends: that unblocks a statement it waits on.
        ctx.close()
        t.join(15)
        return ('timed out after %d s%s' % (
            timeout, '' if not t.is_alive()
            else ' (its thread is still stuck and was abandoned)'))
    return box.get('error')


def print_figures(modname, figures):
    if not figures:
        return
    out('  FIGURES %s' % modname)
    width = max(len(f[0]) for f in figures)
    for name, value, unit, fmt in figures:
        try:
            text = fmt % value
        except (TypeError, ValueError):
            text = str(value)
        out('    %-*s  %s%s' % (width, name, text, ' ' + unit if unit else ''))
    out('  END FIGURES')


# After a module: how long to wait for asynchronous releases (deletes are
# sent without waiting; a backend that died uncleanly loses its nodes
# and watches only when its session expires) before a leftover counts.
LEFTOVER_WAIT_S = 2 * SESSION_TIMEOUT_S + 10


def zk_leftovers(suite_ctx):
    """What no module may leave in the suite's ZooKeeper once its backends
    are closed: a contender-named node anywhere (lock parents are
    containers that may linger empty: not counted), an ephemeral node,
    a data watch of any session but the runner's own kazoo client, or a
    getChildren watch (the server only counts those: see
    harness.ZooKeeper.watch_counts; neither the runner's client nor any
    test sets one).  Returns a list of lines, empty if clean."""
    zk, kz = suite_ctx.zk, suite_ctx.kz
    own = kz.client_id[0] if kz.client_id else None
    problems = []
    for path in harness.ZkInspector(kz, '/').contender_paths('/'):
        stat = kz.exists(path)
        if stat is not None:
            problems.append('contender node %s (owner session 0x%x)'
                            % (path, stat.ephemeralOwner))
    for path, session in sorted(zk.ephemerals().items()):
        if harness.parse_contender(path.rsplit('/', 1)[1]):
            continue                      # already named above
        problems.append('ephemeral node %s (owner session 0x%x)'
                        % (path, session))
    for path, sessions in sorted(zk.watches_by_path().items()):
        for session in sorted(sessions - {own}):
            problems.append('data watch on %s by session 0x%x'
                            % (path, session))
    child = zk.watch_counts()['child']
    if child:
        problems.append('%d getChildren watch(es) on the server' % child)
    return problems


def check_zk_clean(results, suite, test, suite_ctx,
                   timeout=LEFTOVER_WAIT_S):
    """Wait (bounded) until zk_leftovers() is empty; otherwise count one
    failure `suite: test` that names every leftover."""
    last = []

    def clean():
        last[:] = zk_leftovers(suite_ctx)
        return not last
    t0 = time.monotonic()
    try:
        harness.wait_until(clean, timeout, 'nothing left in ZooKeeper',
                           interval=0.5)
    except TimeoutError:
        results.fail(suite, test, 'left in ZooKeeper %s after %d s:\n%s'
                     % (suite_ctx.zk.connect_string, timeout,
                        '\n'.join('  ' + p for p in last[:50])
                        + ('\n  ... and %d more' % (len(last) - 50)
                           if len(last) > 50 else '')))
        return False
    except Exception:
        results.fail(suite, test, 'could not inspect ZooKeeper:\n%s'
                     % traceback.format_exc())
        return False
    out('  ok    %s.%s (%.1f s)' % (suite, test, time.monotonic() - t0))
    return True


def run_module_hook(results, modname, hook, suite_ctx, shared, figures,
                    timeout):
    """Run setup_module/teardown_module like a test (bounded, backends
    closed).  Returns True if it succeeded; a failure is counted."""
    fn = getattr(hook[0], hook[1])
    ctx = TestContext(suite_ctx, hook[1], shared, figures)
    t0 = time.monotonic()
    try:
        error = run_one(fn, ctx, timeout)
    finally:
        ctx.close()
    elapsed = time.monotonic() - t0
    if error is None:
        out('  ok    %s.%s (%.1f s)' % (modname, hook[1], elapsed))
        return True
    logs = ctx.server_logs()
    results.fail(modname, '%s (%.1f s)' % (hook[1], elapsed),
                 error + ('\n' + logs if logs else ''))
    return False


def run_python(results, zk, pg, pattern, workdir=None):
    out('== python: test/test_*.py')
    modules = discover(pattern)
    if not modules:
        results.fail('python', 'no test/test_*.py module found')
        return
    try:
        pg.psql('DROP DATABASE IF EXISTS %s' % TEST_DB)
        pg.psql('CREATE DATABASE %s' % TEST_DB)
        pg.psql("ALTER DATABASE %s SET zklock.connect_timeout = '%ds'"
                % (TEST_DB, CONNECT_TIMEOUT_S))
        pg.psql('CREATE EXTENSION zklock', dbname=TEST_DB)
        kz = harness.connect_kazoo(zk.connect_string)
    except Exception as e:
        setup_error = 'setup failed: %s' % e
        for modname, mod, tests in modules:
            for name, _ in (tests or [('(import)', None)]):
                results.fail(modname, '%s: %s' % (name, setup_error))
        return
    try:
        suite_ctx = SuiteContext(zk, pg, kz, workdir)
        # whatever an earlier suite (pg_regress) left would otherwise be
        # blamed on the first module
        check_zk_clean(results, 'python', 'nothing left in ZooKeeper before '
                       'the first module', suite_ctx)
        for modname, mod, tests in modules:
            if isinstance(mod, str):          # import failed
                results.fail(modname, 'import failed', mod)
                continue
            if not tests:
                if not pattern:
                    results.fail(modname, 'defines no test_* function')
                continue
            timeout = getattr(mod, 'TIMEOUT', DEFAULT_TEST_TIMEOUT)
            setup_timeout = getattr(mod, 'SETUP_TIMEOUT', 300)
            shared = types.SimpleNamespace()
            figures = []
            ready = True
            if callable(getattr(mod, 'setup_module', None)):
                ready = run_module_hook(results, modname,
                                        (mod, 'setup_module'), suite_ctx,
                                        shared, figures, setup_timeout)
            try:
                for name, fn in tests:
                    if not ready:
                        results.fail(modname, '%s: not run, setup_module '
                                     'failed' % name)
                        continue
                    ctx = TestContext(suite_ctx, name, shared, figures)
                    t0 = time.monotonic()
                    try:
                        error = run_one(fn, ctx, getattr(fn, 'timeout',
                                                         timeout))
                    finally:
                        ctx.close()
                    elapsed = time.monotonic() - t0
                    if error is None:
                        results.ok(modname, name)
                        out('  ok    %s.%s (%.1f s)'
                            % (modname, name, elapsed))
                    else:
                        logs = ctx.server_logs()
                        results.fail(modname, '%s (%.1f s)' % (name, elapsed),
                                     error + ('\n' + logs if logs else ''))
            finally:
                if callable(getattr(mod, 'teardown_module', None)):
                    run_module_hook(results, modname,
                                    (mod, 'teardown_module'), suite_ctx,
                                    shared, figures, setup_timeout)
            # every backend of the module is closed by now
            check_zk_clean(results, modname, 'nothing left in ZooKeeper '
                           '(no contender, ephemeral node or watch)',
                           suite_ctx)
            print_figures(modname, figures)
            suite_line(results, [modname])
    finally:
        try:
            kz.stop()
            kz.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------
# sanitizer reports (make test SANITIZE=1, see test/sanitize.sh)
# ---------------------------------------------------------------------------

def check_sanitizer_reports(results):
    """With SANITIZE=1 the postmaster writes ASan/UBSan reports (of any
    process, at any time, shutdown included) to files in
    $ZKLOCK_SANITIZER_LOG_DIR: none is one passed test, each report one
    failed test."""
    d = os.environ.get('ZKLOCK_SANITIZER_LOG_DIR')
    if not d:
        return
    out('== sanitizer: reports in %s' % d)
    reports = sorted(glob.glob(os.path.join(d, '*')))
    if not reports:
        results.ok('sanitizer', 'no ASan/UBSan report')
    for path in reports:
        with open(path, errors='replace') as f:
            results.fail('sanitizer', os.path.basename(path),
                         head(f.read(), 80))
    suite_line(results, ['sanitizer'])


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--suites', default='unit,regress,python',
                    help='comma-separated subset of unit,regress,python')
    ap.add_argument('-k', dest='pattern', default=None,
                    help='only python tests whose module.name contains this')
    ap.add_argument('--keep', action='store_true',
                    help='keep the work directory (logs, data) afterwards')
    ap.add_argument('--failed-step', action='append', default=[],
                    help='a build step that failed before (counts as one '
                         'failure; build/install failures skip the server '
                         'suites)')
    args = ap.parse_args()
    suites = [s.strip() for s in args.suites.split(',') if s.strip()]
    harness.install_signal_handlers()

    results = Results()
    workdir = harness.make_workdir('zklock-test-')
    status = None
    zk = pg = None
    try:
        for step in args.failed_step:
            results.fail('build', STEP_NAMES.get(step, step) + ' failed')
        build_broken = any(s in ('build', 'install')
                           for s in args.failed_step)

        if 'unit' in suites:
            for exe in (UNIT_EXE, CORPUS_EXE):
                run_unit(results, 'unit' in args.failed_step, exe)
            suite_line(results, ['unit'])

        server_suites = [s for s in suites if s in ('regress', 'python')]
        if server_suites and build_broken:
            out('== skipping %s: the extension did not build or install'
                % ', '.join(server_suites))
        elif server_suites:
            try:
                zk = harness.ZooKeeper(n=1, base_dir=workdir).start()
                pg = harness.PgCluster('main', {
                    'zklock.hosts': zk.connect_string,
                    'zklock.root': ZK_ROOT,
                    'zklock.session_timeout': '%ds' % SESSION_TIMEOUT_S,
                    # zklock.connect_timeout keeps its default here: the
                    # pg_regress suite shows it; the python tests' database
                    # sets CONNECT_TIMEOUT_S (see run_python)
                }, base_dir=workdir).start()
            except Exception as e:
                for s in server_suites:
                    results.fail(s, 'could not start ZooKeeper/PostgreSQL',
                                 str(e))
                server_suites = []
            if 'regress' in server_suites:
                try:
                    run_regress(results, pg, workdir)
                except Exception:
                    results.fail('regress', 'suite crashed',
                                 traceback.format_exc())
                suite_line(results, ['regress'])
            if 'python' in server_suites:
                try:
                    run_python(results, zk, pg, args.pattern, workdir)
                except Exception:
                    results.fail('python', 'suite crashed',
                                 traceback.format_exc())
    except KeyboardInterrupt:
        results.fail('runner', 'interrupted')
        status = 130
    except SystemExit as e:
        results.fail('runner', 'terminated by a signal')
        status = e.code if isinstance(e.code, int) else 1
    finally:
        harness.stop_all()              # PostgreSQL, then ZooKeeper
        sys.stderr.flush()
        check_sanitizer_reports(results)

    out()
    out('== summary')
    for suite, c in results.suites.items():
        out('  %-20s %d passed, %d failed' % (suite, c['passed'], c['failed']))
    for f in results.failures:
        out('  failed: %s' % f)
    if not os.listdir(workdir):
        os.rmdir(workdir)               # nothing was started
    elif results.failed or args.keep:
        out('  logs and data kept in %s' % workdir)
        if pg is not None:
            out('  PostgreSQL log: %s' % pg.log_path)
        if zk is not None:
            out('  ZooKeeper log: %s' % zk.log_path(1))
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    if results.passed + results.failed == 0:
        results.fail('runner', 'no test ran at all')
    out('%d passed, %d failed' % (results.passed, results.failed))
    if status is None:
        status = 1 if results.failed else 0
    return status


if __name__ == '__main__':
    sys.exit(main())
