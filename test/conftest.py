"""
pytest configuration of zklock's test suites (test/pytest.ini, `make test`).

`make test` runs test/run.sh, which runs test/run_tests.py: several pytest
runs here (in test/) side by side, each over some modules (a lane), then
the timing-sensitive modules alone.  After `make install` a developer can
run pytest directly, e.g.

    cd test && /usr/bin/python3 -m pytest -k holes        # one module
    cd test && /usr/bin/python3 -m pytest test_faults.py::test_lost_create_reply_is_swept
    cd test && /usr/bin/python3 -m pytest -x --lf          # failed ones again

Every run (every lane) starts one standalone ZooKeeper and one PostgreSQL
cluster on 127.0.0.1 (free ports: with ZKLOCK_PORT_RANGE, set by
run_tests.py, from the lane's own range; under a fresh
/tmp/zklock-test-XXXX) the first time
a test needs them, and stops everything it started, whatever happens
(SIGTERM and SIGHUP end the run as Ctrl-C does: fixtures torn down,
servers stopped, the count printed).  The suites:

  test_unit.py     the C unit tests (test/unit/test_recipe, test_corpus):
                   each TAP result line is one test
  test_regress.py  pg_regress: each test `make -s regress-list` names is one
  test_*.py        python tests: each function test_*(ctx) is one test

Every test counts once.  The very last line printed is exactly
"N passed, N failed", counting every test of every suite: a test that fails
at setup (a failed module_setup, servers that did not start) is failed, an
error after a test (its module's teardown, the leftover check, pg_regress's
exit status) is one more failure, a module that cannot be imported is one
failure, and so is every --failed-step of test/run.sh, every sanitizer
report (make test SANITIZE=1), an interrupted run and a run where no test
ran at all.  pytest's exit status is non-zero if anything failed.

Options added here: --keep (keep the work directory: logs, data), and
--failed-step NAME (a build step of test/run.sh that failed; build and
install failures deselect every test that needs the servers).

A python test module
--------------------
Plain functions:

    def test_something(ctx):          # ctx: TestContext, see below
        a = ctx.backend('a')          # a Backend (closed after the test)
        ...
        assert ...

Tests run in definition order, modules in file-name order (after
test_unit.py and test_regress.py).  Each test is bounded by pytest-timeout
(method signal): the module's TIMEOUT attribute (default 120 s), or the
function's own `timeout` attribute, or an explicit
@pytest.mark.timeout(...).  Backends a test opened are closed after it,
whatever happened (also shortly after its time bound if the test is stuck
in C code that the timeout signal cannot interrupt).  Tests run in
pytest's main thread, and SIGALRM belongs to pytest-timeout (and to the
module hooks' bound): a test must not use signal.alarm() or setitimer().

A module may define two hooks (both optional, both taking a ctx):

    def module_setup(ctx):        # once, before its first test
        ctx.shared.ens = harness.ZooKeeper(n=3, base_dir=ctx.workdir, ...)
    def module_teardown(ctx):     # once, after its last test, always
        ...                       # (also after a failed module_setup)

They are NOT named setup_module/teardown_module: pytest calls functions of
those names itself, with the module object.  A module that still defines
setup_module(ctx)/teardown_module(ctx) fails each of its tests with a
message saying so.  `ctx.shared` is one namespace per module that every
test of the module sees.  Each hook is bounded by the module's
SETUP_TIMEOUT attribute (default 300 s).  A failed module_setup fails
every test of the module (they do not run); a failed module_teardown
counts as one failure.  Whatever either starts through harness is stopped
at exit in any case.  Clusters listed in `ctx.shared.clusters` have their
server logs shown for a failed test, as the main cluster's is.
`ctx.figure(name, value, unit)` records a measured figure; a module's
figures are printed in a FIGURES block when the module ends.
`ctx.log(msg)` prints a line at once (and into the test's captured
output).

After each module (its teardown included) the suite's ZooKeeper is
checked: no contender-named node anywhere, no ephemeral node, no watch
(but this suite's own kazoo client's data watches).  It waits up to
LEFTOVER_WAIT_S for asynchronous releases, then counts one failure for the
module, naming what was left.  Modules that start a ZooKeeper of their own
check it themselves before stopping it (or use the make_zk fixture, which
does).  A module that needs no server sets USES_SERVERS = False.

Fixtures
--------
  ctx        (function) the TestContext above
  backend    (function) ctx.backend: backend(name, cluster=..., dbname=...)
  suite      (session)  SuiteContext: zk, pg, kz, zi, root, dbname, ...
  zk         (session)  the standalone harness.ZooKeeper
  pg         (session)  the main harness.PgCluster (zklock.hosts -> zk)
  kz         (session)  a kazoo client on zk (read-only use)
  zi         (session)  harness.ZkInspector(kz, root)
  workdir    (session)  the run's work directory
  make_zk    (module)   make_zk(n=3, **ZooKeeper kwargs): a started
                        ZooKeeper, checked for leftovers and stopped at
                        the module's end
  make_pg    (module)   make_pg(name, extra_conf): a started PgCluster,
                        stopped at the module's end, its log shown for a
                        failed test
"""

import contextlib
import glob
import inspect
import os
import re
import shutil
import signal
import sys
import threading
import traceback
import types

import pytest

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
TEST_DB = 'zklock_test'
DEFAULT_TEST_TIMEOUT = 120
DEFAULT_SETUP_TIMEOUT = 300
# a test stuck in C code past its time bound: its backends are closed
# this long after the bound (that unblocks a statement it waits on)
WATCHDOG_GRACE_S = 10
# After a module: how long to wait for asynchronous releases (deletes are
# sent without waiting; a backend that died uncleanly loses its nodes
# and watches only when its session expires) before a leftover counts.
LEFTOVER_WAIT_S = 2 * SESSION_TIMEOUT_S + 10
# modules run in this order first, then the others by file name
FIRST_MODULES = ('test_unit', 'test_regress')
STEP_NAMES = {                  # --failed-step values given by test/run.sh
    'build': 'make (building the extension)',
    'install': 'make install',
    'unit': 'make -C test/unit',
}


def head(text, lines):
    parts = text.splitlines()
    more = len(parts) - lines
    return '\n'.join(parts[:lines]) + ('\n... (%d more lines)' % more
                                       if more > 0 else '')


# ---------------------------------------------------------------------------
# options, configuration
# ---------------------------------------------------------------------------

def pytest_addoption(parser):
    group = parser.getgroup('zklock')
    group.addoption('--keep', action='store_true',
                    help='keep the work directory (logs, data) afterwards')
    group.addoption('--failed-step', action='append', default=[],
                    metavar='NAME',
                    help='a build step that failed before (build, install, '
                         'unit: counts as one failure; build/install '
                         'failures deselect the tests that need servers)')


_config = None


def pytest_configure(config):
    global _config
    _config = config
    config._zklock = Tally()
    config.addinivalue_line(
        'markers', 'servers: set by conftest on tests whose module needs '
                   'ZooKeeper and PostgreSQL')
    # SIGTERM/SIGHUP end the run like Ctrl-C: fixtures are torn down,
    # servers stopped, the summary line printed
    if threading.current_thread() is threading.main_thread():
        def interrupt(signum, frame):
            raise KeyboardInterrupt('signal %d' % signum)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, interrupt)


def build_broken(config):
    return any(s in ('build', 'install')
               for s in config.getoption('failed_step'))


def _module_name(item):
    return os.path.splitext(os.path.basename(str(item.fspath)))[0]


def pytest_collection_modifyitems(session, config, items):
    # unit and pg_regress first (as before the move to pytest), then the
    # modules by file name; sorted() is stable, so each module keeps its
    # tests in definition order
    def rank(item):
        name = _module_name(item)
        return FIRST_MODULES.index(name) if name in FIRST_MODULES \
            else len(FIRST_MODULES)
    items[:] = sorted(items, key=rank)

    for item in items:
        module = getattr(item, 'module', None)
        # func_only=True in every marker: pytest-timeout 2.1 lets a marker
        # without it override the ini's timeout_func_only with False (the
        # bound would then cover fixtures: module_setup, the leftover check)
        m = item.get_closest_marker('timeout')
        if m is None:
            fn = getattr(item, 'function', None)
            t = getattr(fn, 'timeout', None) or \
                getattr(module, 'TIMEOUT', DEFAULT_TEST_TIMEOUT)
            item.add_marker(pytest.mark.timeout(t, func_only=True))
        elif 'func_only' not in m.kwargs:
            item.add_marker(pytest.mark.timeout(*m.args, func_only=True,
                                                **m.kwargs), append=False)
        if getattr(module, 'USES_SERVERS', True):
            item.add_marker(pytest.mark.servers)

    steps = config.getoption('failed_step')
    drop = []
    if build_broken(config):
        drop = [i for i in items if i.get_closest_marker('servers')]
    if 'unit' in steps:
        drop += [i for i in items if _module_name(i) == 'test_unit']
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    module = getattr(item, 'module', None)
    for old, new in (('setup_module', 'module_setup'),
                     ('teardown_module', 'module_teardown')):
        fn = getattr(module, old, None)
        if callable(fn) and 'ctx' in _params(fn):
            pytest.fail('%s defines %s(ctx): pytest calls %s itself (with '
                        'the module object); rename it %s(ctx) (see '
                        'test/conftest.py)' % (module.__name__, old, old, new),
                        pytrace=False)


def _params(fn):
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


# ---------------------------------------------------------------------------
# output while tests run
# ---------------------------------------------------------------------------

_live_lock = threading.Lock()


def live(text):
    """Write lines to the terminal at once, past pytest's capture (from any
    thread, as pytest's own live logging does)."""
    config = _config
    tr = config and config.pluginmanager.get_plugin('terminalreporter')
    capman = config and config.pluginmanager.get_plugin('capturemanager')
    if tr is None:
        print(text, flush=True)
        return
    with _live_lock:
        cm = capman.global_and_fixture_disabled() if capman \
            else contextlib.nullcontext()
        with cm:
            for line in text.splitlines() or ['']:
                tr.write_line(line)
            tr.flush()


def print_figures(modname, figures):
    if not figures:
        return
    lines = ['  FIGURES %s' % modname]
    width = max(len(f[0]) for f in figures)
    for name, value, unit, fmt in figures:
        try:
            text = fmt % value
        except (TypeError, ValueError):
            text = str(value)
        lines.append('    %-*s  %s%s' % (width, name, text,
                                          ' ' + unit if unit else ''))
    lines.append('  END FIGURES')
    live('\n'.join(lines))


# ---------------------------------------------------------------------------
# contexts
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


class ModuleState:
    """One module's namespace (ctx.shared), figures and watched clusters."""

    def __init__(self, name):
        self.name = name
        self.shared = types.SimpleNamespace()
        self.figures = []
        self.watched = []               # clusters made by make_pg
        self.hook_logs = {}             # 'setup'/'teardown' -> server logs


class TestContext:
    """The `ctx` a test function (or a module hook) receives.

    Attributes: pg (PgCluster), zk (ZooKeeper), kz (kazoo client),
    zi (ZkInspector on the root), root, dbname (has the extension),
    session_timeout and connect_timeout (seconds, as configured),
    name (the test's name), workdir (the run's work directory: put
    servers a module starts itself under it), shared (the module's
    namespace, see module_setup in the docstring above).
    """

    __test__ = False                    # not a test class

    def __init__(self, suite_ctx, name, shared=None, figures=None,
                 watched=()):
        self.__dict__.update(vars(suite_ctx))
        self.name = name
        self.shared = shared if shared is not None \
            else types.SimpleNamespace()
        self._figures = figures if figures is not None else []
        self._watched = list(watched)
        self._backends = []
        self._admin = None
        self._lock = threading.Lock()
        self.log_offset = self.pg.log_size()
        clusters = list(getattr(self.shared, 'clusters', []))
        clusters += [c for c in self._watched if c not in clusters]
        self.log_offsets = [(c, c.log_size()) for c in clusters]

    def backend(self, name=None, dbname=None, cluster=None, **kw):
        """A new Backend on the test database (of `cluster`, default the
        main cluster), closed after the test."""
        b = harness.Backend(cluster or self.pg, name or 'zkt-%s' % self.name,
                            dbname=dbname or self.dbname, **kw)
        with self._lock:
            self._backends.append(b)
        return b

    def extra_cluster(self, name, dbname):
        """Start (in module_setup) another PostgreSQL cluster set up as the
        main one, on the suite's ZooKeeper, with database `dbname` holding
        the extension; it joins ctx.shared.clusters (watched logs; stop it
        in module_teardown)."""
        pg = harness.PgCluster(name, {
            'zklock.hosts': self.zk.connect_string,
            'zklock.root': self.root,
            'zklock.session_timeout': '%ds' % self.session_timeout,
            'zklock.connect_timeout': '%ds' % self.connect_timeout,
        }, base_dir=self.workdir).start()
        if not hasattr(self.shared, 'clusters'):
            self.shared.clusters = []
        self.shared.clusters.append(pg)
        pg.psql('CREATE DATABASE %s' % dbname)
        pg.psql('CREATE EXTENSION zklock', dbname=dbname)
        return pg

    def figure(self, name, value, unit='', fmt='%s'):
        """Record a measured figure (printed in the module's FIGURES block
        when the module ends); a name recorded again is replaced."""
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
        known = [c for c, _ in self.log_offsets]
        # clusters listed since the test began (by module_setup, say):
        # their whole log
        later = []
        for c in list(getattr(self.shared, 'clusters', [])) + self._watched:
            if c not in known:
                known.append(c)
                later.append((c, 0))
        for c, offset in self.log_offsets + later:
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
        """A progress line: shown at once, and in the test's output."""
        line = '        [%s] %s' % (self.name, msg)
        live(line)
        if _config is None or _config.getoption('capture') != 'no':
            print(line)

    def close(self):
        """Close every backend the test opened; bounded, never raises."""
        with self._lock:
            backends, self._backends = self._backends, []
            self._admin = None
        for b in backends:
            b.close(timeout=5)

    def abort(self):
        """For a test stuck past its time bound, from another thread:
        cancel and terminate every backend it opened (that ends a
        statement the test's own thread waits on, even one it runs on the
        connection directly), then close them."""
        with self._lock:
            backends = list(self._backends)
        for b in backends:
            b.cancel()
            harness.terminate_backend(b.cluster, b.pid)
        self.close()


@contextlib.contextmanager
def watchdog(seconds, what, on_expiry):
    """Call on_expiry() from another thread if the block is still running
    after `seconds` (a stuck statement in the main thread: closing the
    backends ends it)."""
    def fire():
        live('        [watchdog] %s still running after %d s: ending its '
             'backends' % (what, seconds))
        try:
            on_expiry()
        except Exception as e:
            live('        [watchdog] %s' % e)
    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    try:
        yield
    finally:
        t.cancel()


@contextlib.contextmanager
def time_bound(seconds, what):
    """Fail the block (pytest.fail, which `except Exception` does not
    catch) after `seconds`, by SIGALRM in the main thread, as
    pytest-timeout's signal method does for a test."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        pytest.fail('%s did not finish within %d s' % (what, seconds),
                    pytrace=False)
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def item_timeout(item):
    m = item.get_closest_marker('timeout')
    if m is not None:
        t = m.kwargs.get('timeout', m.args[0] if m.args else None)
        if t:
            return float(t)
    return DEFAULT_TEST_TIMEOUT


# ---------------------------------------------------------------------------
# the leftover check
# ---------------------------------------------------------------------------

def zk_leftovers(zk, kz):
    """What no module may leave in a ZooKeeper once its backends are
    closed: a contender-named node anywhere (lock parents are containers
    that may linger empty: not counted), an ephemeral node, a data watch
    of any session but `kz`'s own, or a getChildren watch (the server only
    counts those: see harness.ZooKeeper.watch_counts; neither the suite's
    client nor any test sets one).  Returns a list of lines, empty if
    clean."""
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


def check_zk_clean(zk, kz, timeout=LEFTOVER_WAIT_S):
    """Wait (bounded) until zk_leftovers() is empty.  Returns None, or the
    text naming every leftover (or why ZooKeeper could not be read)."""
    last = []

    def clean():
        last[:] = zk_leftovers(zk, kz)
        return not last
    try:
        harness.wait_until(clean, timeout, 'nothing left in ZooKeeper',
                           interval=0.5)
    except TimeoutError:
        return ('left in ZooKeeper %s after %d s (no contender, ephemeral '
                'node or watch may outlive a module):\n%s'
                % (zk.connect_string, timeout,
                   '\n'.join('  ' + p for p in last[:50])
                   + ('\n  ... and %d more' % (len(last) - 50)
                      if len(last) > 50 else '')))
    except Exception:
        return 'could not inspect ZooKeeper %s:\n%s' % (
            zk.connect_string, traceback.format_exc())
    return None


# ---------------------------------------------------------------------------
# session fixtures: the servers
# ---------------------------------------------------------------------------

@pytest.fixture(scope='session')
def workdir(request):
    """The run's work directory (servers' data and logs); removed at the
    end unless something failed or --keep was given."""
    path = harness.make_workdir('zklock-test-')
    request.config._zklock.workdir = path
    return path


@pytest.fixture(scope='session')
def zk(request, workdir):
    """The suite's standalone ZooKeeper."""
    server = harness.ZooKeeper(n=1, base_dir=workdir)
    request.config._zklock.servers.append(('ZooKeeper log',
                                           server.log_path(1)))
    request.addfinalizer(server.stop)
    return server.start()


@pytest.fixture(scope='session')
def pg(request, zk, workdir):
    """The main PostgreSQL cluster, zklock.hosts pointing at `zk`."""
    cluster = harness.PgCluster('main', {
        'zklock.hosts': zk.connect_string,
        'zklock.root': ZK_ROOT,
        'zklock.session_timeout': '%ds' % SESSION_TIMEOUT_S,
        # zklock.connect_timeout keeps its default here: the pg_regress
        # suite shows it; the python tests' database sets
        # CONNECT_TIMEOUT_S (see `suite`)
    }, base_dir=workdir)
    request.config._zklock.servers.append(('PostgreSQL log',
                                           cluster.log_path))
    request.addfinalizer(cluster.stop)
    return cluster.start()


@pytest.fixture(scope='session')
def kz(request, zk):
    """A kazoo client on the suite's ZooKeeper (looking on; sets no
    watch)."""
    client = harness.connect_kazoo(zk.connect_string)

    def stop():
        try:
            client.stop()
            client.close()
        except Exception:
            pass
    request.addfinalizer(stop)
    return client


@pytest.fixture(scope='session')
def zi(kz):
    return harness.ZkInspector(kz, ZK_ROOT)


@pytest.fixture(scope='session')
def suite(zk, pg, kz, workdir):
    """The python tests' database (with the extension) on `pg`, and what
    every TestContext shares."""
    pg.psql('DROP DATABASE IF EXISTS %s' % TEST_DB)
    pg.psql('CREATE DATABASE %s' % TEST_DB)
    pg.psql("ALTER DATABASE %s SET zklock.connect_timeout = '%ds'"
            % (TEST_DB, CONNECT_TIMEOUT_S))
    pg.psql('CREATE EXTENSION zklock', dbname=TEST_DB)
    return SuiteContext(zk, pg, kz, workdir)


# ---------------------------------------------------------------------------
# module fixture: hooks, leftover check, figures
# ---------------------------------------------------------------------------

_states = {}                            # module name -> ModuleState


def run_hook(fn, hook_ctx, timeout, modname):
    """Run module_setup/module_teardown in the main thread, bounded by
    `timeout`; the hook's backends are closed afterwards."""
    what = '%s.%s' % (modname, fn.__name__)
    try:
        with watchdog(timeout + WATCHDOG_GRACE_S, what, hook_ctx.abort), \
                time_bound(timeout, what):
            fn(hook_ctx)
    finally:
        hook_ctx.close()


@pytest.fixture(scope='module', autouse=True)
def _zklock_module(request):
    """Per module: module_setup(ctx) before its first test; after its last
    one, module_teardown(ctx), the leftover check and the FIGURES block.
    A failure of the first fails every test of the module; of the others,
    one failure (an error at the teardown of its last test)."""
    mod = request.module
    modname = mod.__name__
    state = ModuleState(modname)
    _states[modname] = state
    if not getattr(mod, 'USES_SERVERS', True):
        request.addfinalizer(lambda: print_figures(modname, state.figures))
        return state
    suite_ctx = request.getfixturevalue('suite')
    timeout = getattr(mod, 'SETUP_TIMEOUT', DEFAULT_SETUP_TIMEOUT)
    setup = getattr(mod, 'module_setup', None)
    teardown = getattr(mod, 'module_teardown', None)

    def finish():
        problems = []
        try:
            if callable(teardown):
                hook_ctx = TestContext(suite_ctx, 'module_teardown',
                                       state.shared, state.figures,
                                       state.watched)
                try:
                    run_hook(teardown, hook_ctx, timeout, modname)
                except (Exception, pytest.fail.Exception):
                    problems.append('module_teardown failed:\n'
                                    + traceback.format_exc())
                    logs = hook_ctx.server_logs()
                    if logs:
                        problems.append(logs)
            # every backend of the module is closed by now
            left = check_zk_clean(suite_ctx.zk, suite_ctx.kz)
            if left:
                problems.append(left)
        finally:
            print_figures(modname, state.figures)
        if problems:
            pytest.fail('after module %s:\n%s' % (modname,
                                                  '\n'.join(problems)),
                        pytrace=False)
    request.addfinalizer(finish)

    if callable(setup):
        hook_ctx = TestContext(suite_ctx, 'module_setup', state.shared,
                               state.figures, state.watched)
        try:
            run_hook(setup, hook_ctx, timeout, modname)
        except BaseException:
            state.hook_logs['setup'] = hook_ctx.server_logs()
            raise
    return state


# ---------------------------------------------------------------------------
# function fixtures
# ---------------------------------------------------------------------------

@pytest.fixture
def ctx(request, suite, _zklock_module):
    """The TestContext of one test; its backends are closed after it."""
    state = _zklock_module
    c = TestContext(suite, request.node.name, state.shared, state.figures,
                    state.watched)
    request.node._zklock_ctx = c
    seconds = item_timeout(request.node) + WATCHDOG_GRACE_S
    with watchdog(seconds, request.node.nodeid, c.abort):
        yield c
        c.close()


@pytest.fixture
def backend(ctx):
    """backend(name=None, dbname=None, cluster=None, **kw): ctx.backend."""
    return ctx.backend


@pytest.fixture(scope='module')
def make_zk(request, workdir, _zklock_module):
    """make_zk(n=1, check_leftovers=True, **ZooKeeper kwargs): a started
    harness.ZooKeeper under the run's work directory.  At the module's
    end it is checked like the suite's (no contender, ephemeral node or
    watch left; a leftover is one failure) and stopped."""
    made = []

    def make(n=1, check_leftovers=True, **kw):
        kw.setdefault('name', 'zk-%s-%d' % (_zklock_module.name,
                                            len(made) + 1))
        server = harness.ZooKeeper(n=n, base_dir=workdir, **kw)
        made.append((server, check_leftovers))
        return server.start()

    yield make
    problems = []
    for server, check in reversed(made):
        try:
            if check and any(server.is_running(s) for s in server.sids):
                server.start_servers()
                client = harness.connect_kazoo(server.connect_string)
                try:
                    left = check_zk_clean(server, client)
                finally:
                    client.stop()
                    client.close()
                if left:
                    problems.append(left)
        except Exception:
            problems.append('checking %r:\n%s'
                            % (server, traceback.format_exc()))
        finally:
            server.stop()
    if problems:
        pytest.fail('\n'.join(problems), pytrace=False)


@pytest.fixture(scope='module')
def make_pg(request, workdir, _zklock_module):
    """make_pg(name, extra_conf=None, **PgCluster kwargs): a started
    harness.PgCluster under the run's work directory, stopped at the
    module's end; its log is shown for a failed test."""
    made = []

    def make(name, extra_conf=None, **kw):
        cluster = harness.PgCluster(name, extra_conf, base_dir=workdir, **kw)
        made.append(cluster)
        _zklock_module.watched.append(cluster)
        return cluster.start()

    yield make
    for cluster in reversed(made):
        cluster.stop()


# ---------------------------------------------------------------------------
# reports: server logs for a failure, and the count
# ---------------------------------------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    logs = ''
    c = getattr(item, '_zklock_ctx', None)
    # (an error at teardown is the module's: module_teardown's failure
    # carries its own logs; the last test's teardown also stops the
    # servers, whose shutdown lines would only be noise)
    if c is not None and call.when == 'call':
        try:
            logs = c.server_logs()
        except Exception:
            pass
    elif call.when == 'setup':
        state = _states.get(getattr(getattr(item, 'module', None),
                                    '__name__', None))
        if state is not None:
            logs = state.hook_logs.pop('setup', '')
    if logs:
        rep.sections.append(('server logs', logs))


class Tally:
    """Passed/failed per module, every failure named, and the extras that
    are not pytest tests (failed build steps, sanitizer reports, ...)."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.modules = {}               # module -> [passed, failed]
        self.failures = []              # lines for the summary
        self.extra_lines = []           # detail printed in the summary
        self.workdir = None
        self.servers = []               # (what, log path)
        self.done = False

    def _module(self, nodeid):
        name = nodeid.split('::', 1)[0]
        return self.modules.setdefault(name, [0, 0])

    def ok(self, nodeid):
        self.passed += 1
        self._module(nodeid)[0] += 1

    def fail(self, nodeid, what=''):
        self.failed += 1
        self._module(nodeid)[1] += 1
        self.failures.append(nodeid + (' (%s)' % what if what else ''))


def pytest_runtest_logreport(report):
    tally = _config._zklock
    if report.when == 'call':
        if report.passed:
            tally.ok(report.nodeid)
        elif report.failed:
            tally.fail(report.nodeid)
        else:
            tally.skipped += 1
    elif report.failed:                 # setup: the test did not run;
        tally.fail(report.nodeid,       # teardown: one more failure
                   'error at %s' % report.when)
    elif report.when == 'setup' and report.skipped:
        tally.skipped += 1


def pytest_collectreport(report):
    if report.failed:
        _config._zklock.fail(report.nodeid or 'collection',
                             'could not be collected')


def check_sanitizer_reports(tally):
    """With SANITIZE=1 the postmaster writes ASan/UBSan reports (of any
    process, at any time, shutdown included) to files in
    $ZKLOCK_SANITIZER_LOG_DIR: none is one passed test, each report one
    failed test."""
    d = os.environ.get('ZKLOCK_SANITIZER_LOG_DIR')
    if not d:
        return
    reports = sorted(glob.glob(os.path.join(d, '*')))
    if not reports:
        tally.ok('sanitizer')
    for path in reports:
        tally.fail('sanitizer', os.path.basename(path))
        with open(path, errors='replace') as f:
            tally.extra_lines.append('sanitizer report %s:\n%s'
                                     % (path, head(f.read(), 80)))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """After every fixture is torn down: stop whatever is left, count what
    is not a pytest test, decide the exit status."""
    config = session.config
    tally = config._zklock
    if config.option.collectonly:
        return
    harness.stop_all()                  # PostgreSQL, then ZooKeeper
    sys.stderr.flush()
    for step in config.getoption('failed_step'):
        tally.fail('build', STEP_NAMES.get(step, step) + ' failed')
    if build_broken(config):
        tally.extra_lines.append('the tests that need ZooKeeper and '
                                 'PostgreSQL were not run: the extension '
                                 'did not build or install')
    check_sanitizer_reports(tally)
    status = int(exitstatus)
    if status == pytest.ExitCode.INTERRUPTED:
        tally.fail('runner', 'interrupted')
    elif status == pytest.ExitCode.INTERNAL_ERROR:
        tally.fail('runner', 'pytest internal error')
    elif status == pytest.ExitCode.USAGE_ERROR:
        tally.fail('runner', 'usage error')
    if tally.passed + tally.failed == 0:
        tally.fail('runner', 'no test ran at all')
    if tally.failed and status in (pytest.ExitCode.OK,
                                   pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif not tally.failed and status == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
    wd = tally.workdir
    if wd and os.path.isdir(wd):
        if not os.listdir(wd):
            os.rmdir(wd)
        elif tally.failed or config.getoption('keep'):
            tally.extra_lines.append('logs and data kept in %s' % wd)
            for what, path in tally.servers:
                tally.extra_lines.append('%s: %s' % (what, path))
        else:
            shutil.rmtree(wd, ignore_errors=True)
    tally.done = True


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tally = config._zklock
    if not tally.done:
        return
    tr = terminalreporter
    tr.section('zklock summary')
    for name, (p, f) in tally.modules.items():
        tr.write_line('  %-30s %d passed, %d failed' % (name, p, f))
    if tally.skipped:
        tr.write_line('  (%d skipped: counted neither passed nor failed)'
                      % tally.skipped)
    for line in tally.failures:
        tr.write_line('  failed: %s' % line)
    for text in tally.extra_lines:
        for line in text.splitlines():
            tr.write_line('  ' + line)


def pytest_unconfigure(config):
    """The very last line: "N passed, N failed"."""
    tally = getattr(config, '_zklock', None)
    if tally is None or not tally.done:
        return
    sys.stdout.flush()
    print('%d passed, %d failed' % (tally.passed, tally.failed), flush=True)
    result_file = os.environ.get('ZKLOCK_RESULT_FILE')
    if result_file:
        with open(result_file, 'w') as f:
            f.write('%d %d\n' % (tally.passed, tally.failed))
