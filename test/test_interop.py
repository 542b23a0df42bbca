"""
Interoperability tests: zklock against the real clients it promises to
share locks with, Apache Curator 5.4 (Debian's libcurator-recipes-java,
run with the machine's Java) and kazoo 2.8 (python3-kazoo).

Curator runs in test/java/LockPeer.java, a small long-running Curator
client that a test drives line by line over stdin/stdout; it is compiled
with javac into a temporary directory the first time a test needs it
(nothing is cached in the work tree) and every peer process is stopped
after its test, whatever happened.  kazoo's recipes run in this process,
each on a KazooClient of its own (its own ZooKeeper session).

For every zklock.protocol and mode, against the matching recipe:
  * the other client waits while SQL holds, and gets the lock promptly
    after the COMMIT;
  * SQL waits (and zk_try_* returns false) while the other client holds,
    and gets the lock promptly after the other client's release;
  * shared modes coexist where the recipe says so;
  * every waiter -- zklock's backend, Curator, kazoo -- blocks on a
    ZooKeeper watch instead of polling: `wchp` shows its session watching
    exactly the node it waits for (nobody watches the lock parent, no
    getChildren watch exists), and `cons` shows the session sending no
    more than its pings while it waits.
Also: which client sees which zklock node (the manual's compatibility
table, checked cell by cell); SQL sessions with different protocols
exclude each other; the lock path is the one the other client uses
(zklock.root '/locks' + resource 'nightly' = '/locks/nightly'); node data
is UTF-8 that kazoo's contenders() decodes; and the known hazards (a stock
Curator mutex and a stock kazoo Lock do not see each other; kazoo 2.8's
read-lock deadlock, kazoo issue #649).

The tests use zklock.root = '/locks' (superuser-only; the tests connect as
the superuser), so paths read as they would in an application.

In short, this module checks: real Curator 5.4 (`InterProcessMutex`,
`InterProcessReadWriteLock`, driven by a Java helper compiled at test time)
and kazoo 2.8 (`Lock`, `WriteLock`, `ReadLock`): each protocol and mode in
both directions, waiters blocking on a watch, the compatibility table cell
by cell.
"""

import atexit
import concurrent.futures
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time

import psycopg2

import harness
from harness import wait_until
from test_multisession import expect_sqlstate, own_nodes, token_of

TIMEOUT = 120                   # seconds per test (a pytest-timeout bound)

HERE = os.path.dirname(os.path.abspath(__file__))
JAVA_SRC = os.path.join(HERE, 'java', 'LockPeer.java')
JARS = '/usr/share/java/'
CURATOR_CP = [JARS + j for j in (
    'curator-recipes.jar', 'curator-framework.jar', 'curator-client.jar',
    'zookeeper.jar', 'zookeeper-jute.jar', 'guava.jar', 'slf4j-api.jar')]
SLF4J_BINDING = JARS + 'slf4j-simple.jar'    # Curator's warnings to stderr

ROOT = '/locks'
LONG = '60 seconds'             # a wait that the test ends well before
PROMPT = 5.0                    # s: bound for a grant after the release
QUIET = 1.0                     # s: a waiter is watched this long
# requests a blocked waiter may send in QUIET: a ping or a wait record's
# beat, and the idle nudges of a wait (session/nudge.c: 100, 200, 400 ms
# ... apart, at most 3 in any second); a poll every 100 ms would be 10
MAX_QUIET_REQUESTS = 5
                                # (pings: every client pings at most every
                                # session timeout / 3 = 2 s here)
PEER_SESSION_MS = 6000
KAZOO_SESSION_S = 6.0

LOCK = {'exclusive': 'SELECT zk_lock_exclusive(%s, %s::interval)',
        'shared': 'SELECT zk_lock_shared(%s, %s::interval)'}
TRY = {'exclusive': 'SELECT zk_try_lock_exclusive(%s)',
       'shared': 'SELECT zk_try_lock_shared(%s)'}

UUID = r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
SEQ = r'(?:[0-9]{10}|-[0-9]{9,10})'
LAYOUT = {      # (protocol, mode) -> the node name zklock must write
    ('curator-rw', 'exclusive'): '_c_' + UUID + '-__WRIT__' + SEQ,
    ('curator-rw', 'shared'): '_c_' + UUID + '-__READ__' + SEQ,
    ('curator-mutex', 'exclusive'): '_c_' + UUID + '-lock-' + SEQ,
    ('kazoo', 'exclusive'): '[0-9a-f]{32}__lock__' + SEQ,
    ('kazoo', 'shared'): '[0-9a-f]{32}__rlock__' + SEQ,
}
PROTOCOLS = ('curator-rw', 'curator-mutex', 'kazoo')


# ---------------------------------------------------------------------------
# the Curator peer (test/java/LockPeer.java)
# ---------------------------------------------------------------------------

_java = {'dir': None, 'error': None}
_java_lock = threading.Lock()
_live_peers = set()
_live_lock = threading.Lock()


def _cleanup_at_exit():
    """Stop every peer still running, then remove the compiled classes."""
    with _live_lock:
        peers = list(_live_peers)
    for p in peers:
        p.stop()
    if _java['dir']:
        shutil.rmtree(_java['dir'], ignore_errors=True)


atexit.register(_cleanup_at_exit)


def java_workdir():
    """Compile LockPeer.java (once per run) into a temporary directory;
    returns that directory (classes/ inside, peer logs beside it)."""
    with _java_lock:
        if _java['dir']:
            return _java['dir']
        if _java['error']:
            raise AssertionError(_java['error'])
        missing = [j for j in CURATOR_CP + [SLF4J_BINDING]
                   if not os.path.exists(j)]
        javac = shutil.which('javac')
        if missing or not javac:
            _java['error'] = (
                'cannot build the Curator peer: %s (test/install-deps.sh '
                'installs libcurator-recipes-java and default-jdk-headless)'
                % ('missing ' + ', '.join(missing) if missing
                   else 'no javac on PATH'))
            raise AssertionError(_java['error'])
        work = tempfile.mkdtemp(prefix='zklock-interop-')
        classes = os.path.join(work, 'classes')
        os.makedirs(classes)
        t0 = time.monotonic()
        r = subprocess.run([javac, '-Xlint:all,-path', '-d', classes,
                            '-cp', ':'.join(CURATOR_CP), JAVA_SRC],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=90)
        if r.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            _java['error'] = 'javac LockPeer.java failed:\n%s%s' % (
                r.stdout, r.stderr)
            raise AssertionError(_java['error'])
        harness.log('compiled LockPeer.java in %.1f s' % (time.monotonic() - t0))
        _java['dir'] = work
        return work


class CuratorPeer:
    """One LockPeer JVM: one Curator client, one ZooKeeper session.

        peer = CuratorPeer(ctx, 'svc')        # started, connected
        peer.session_id                       # int
        peer.acquire('write', '/locks/x', 0)  # -> node path or None
        peer.start_acquire('read', '/locks/x', 60000); ...; peer.result(5)
        peer.release(); peer.stop()
    """

    def __init__(self, ctx, name, identity=None):
        work = java_workdir()
        self.name = name
        self.identity = identity or 'curator-peer-%s' % name
        self.log_path = os.path.join(work, 'peer-%s-%d.log'
                                     % (name, os.getpid()))
        self._lines = queue.Queue()
        self._logf = open(self.log_path, 'ab')
        cmd = ['java', '-Xms16m', '-Xmx128m', '-XX:+UseSerialGC',
               '-XX:TieredStopAtLevel=1', '-Djava.net.preferIPv4Stack=true',
               '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
               '-cp', ':'.join(CURATOR_CP + [SLF4J_BINDING,
                                             os.path.join(work, 'classes')]),
               'LockPeer', ctx.zk.connect_string, str(PEER_SESSION_MS),
               self.identity]
        # Own session: a Ctrl-C on the terminal reaches only the runner,
        # which then stops the peer itself.
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._logf, text=True, encoding='utf-8', bufsize=1,
            start_new_session=True)
        with _live_lock:
            _live_peers.add(self)
        threading.Thread(target=self._read, daemon=True,
                         name='peer-%s' % name).start()
        try:
            line = self._answer(60, 'the peer to connect')
            m = re.fullmatch(r'ready 0x([0-9a-f]+)', line)
            if not m:
                raise AssertionError('peer %s: unexpected first line %r'
                                     % (name, line))
            self.session_id = int(m.group(1), 16)
        except BaseException:
            self.stop()
            raise

    def __repr__(self):
        return '<CuratorPeer %s session 0x%x>' % (
            self.name, getattr(self, 'session_id', 0))

    def _read(self):
        try:
            for line in self.proc.stdout:
                self._lines.put(line.rstrip('\n'))
        except (OSError, ValueError):
            pass
        self._lines.put(None)

    def _stderr_tail(self):
        return harness.tail(self.log_path, 15)

    def _answer(self, timeout, what):
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError('Curator peer %s: no answer after %.1f s '
                                 'waiting for %s' % (self.name, timeout,
                                                     what)) from None
        if line is None:
            self._lines.put(None)
            raise AssertionError('Curator peer %s exited (status %s) while '
                                 'waiting for %s; its stderr:\n%s'
                                 % (self.name, self.proc.poll(), what,
                                    self._stderr_tail()))
        if line.startswith('error'):
            raise AssertionError('Curator peer %s: %s' % (self.name, line))
        return line

    def _send(self, command):
        self.proc.stdin.write(command + '\n')
        self.proc.stdin.flush()

    def start_acquire(self, kind, path, timeout_ms=60000):
        """Send `acquire` without waiting for the answer (see result)."""
        self._send('acquire %s %s %d' % (kind, path, timeout_ms))

    def result(self, timeout):
        """The answer to start_acquire: the lock node's path, or None if
        Curator's own timeout ran out."""
        line = self._answer(timeout, 'an acquire')
        if line == 'timeout':
            return None
        m = re.fullmatch(r'acquired (\S+)', line)
        if not m:
            raise AssertionError('Curator peer %s: unexpected answer %r'
                                 % (self.name, line))
        return m.group(1)

    def acquire(self, kind, path, timeout_ms, answer_within=30):
        """acquire and wait: node path, or None on Curator's timeout."""
        self.start_acquire(kind, path, timeout_ms)
        return self.result(answer_within + timeout_ms / 1000.0)

    def pending(self):
        """True if no answer has arrived (the acquire still blocks)."""
        return self._lines.empty()

    def release(self):
        self._send('release')
        line = self._answer(30, 'release')
        assert line == 'released', line

    def stop(self):
        """quit (the peer closes its session, deleting its nodes at once,
        even while an acquire blocks), then SIGKILL if it does not exit.
        Bounded; never raises."""
        try:
            if self.proc.poll() is None:
                try:
                    self._send('quit')
                    self.proc.stdin.close()
                except (OSError, ValueError):
                    pass
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    harness.log('Curator peer %s did not quit; killing pid %d'
                                % (self.name, self.proc.pid))
                    self.proc.kill()
                    self.proc.wait(10)
        except Exception as e:
            harness.log('stopping Curator peer %s: %s' % (self.name, e))
        finally:
            with _live_lock:
                _live_peers.discard(self)
            try:
                self._logf.close()
            except Exception:
                pass


# ---------------------------------------------------------------------------
# "the other client": one interface over Curator and kazoo lock recipes
# ---------------------------------------------------------------------------

class CuratorSide:
    """A Curator recipe (kind 'mutex', 'write' or 'read') on one path."""

    def __init__(self, peer, kind, path):
        self.peer, self.kind, self.path = peer, kind, path
        self.label = {'mutex': 'Curator InterProcessMutex',
                      'write': 'Curator InterProcessReadWriteLock.writeLock',
                      'read': 'Curator InterProcessReadWriteLock.readLock',
                      }[kind]
        self.session_id = peer.session_id
        self.shared = kind == 'read'

    def start_acquire(self):
        self.peer.start_acquire(self.kind, self.path, 60000)

    def wait_acquired(self, timeout):
        node = self.peer.result(timeout)
        assert node, '%s timed out' % self.label
        return node

    def pending(self):
        return self.peer.pending()

    def try_acquire(self):
        """Non-blocking attempt (acquire with a 0 ms timeout): the node
        path if acquired, else None (Curator deleted its node)."""
        return self.peer.acquire(self.kind, self.path, 0)

    def release(self):
        self.peer.release()


class KazooSide:
    """A kazoo recipe class (Lock, WriteLock, ReadLock) on one path, on a
    kazoo client of its own; a new recipe object per acquisition."""

    def __init__(self, kz, cls, path, identifier='kazoo-side', **kw):
        self.kz, self.cls, self.path = kz, cls, path
        self.identifier, self.kw = identifier, kw
        self.label = 'kazoo %s%s' % (cls.__name__, (
            '(extra_lock_patterns=%r)' % list(kw['extra_lock_patterns'])
            if kw.get('extra_lock_patterns') else ''))
        self.session_id = kz.client_id[0]
        self.shared = cls.__name__ == 'ReadLock'
        self.lock = None
        self.fut = None

    def new_lock(self):
        return self.cls(self.kz, self.path, self.identifier, **self.kw)

    def start_acquire(self):
        self.lock = self.new_lock()
        self.fut = run_async(self.lock.acquire, timeout=60)

    def wait_acquired(self, timeout):
        try:
            got = self.fut.result(timeout)
        except concurrent.futures.TimeoutError:
            raise AssertionError('%s still waiting after %.1f s'
                                 % (self.label, timeout)) from None
        assert got is True, '%s acquire returned %r' % (self.label, got)
        return self.path + '/' + self.lock.node

    def pending(self):
        return not self.fut.done()

    def try_acquire(self):
        self.lock = self.new_lock()
        if self.lock.acquire(blocking=False):
            return self.path + '/' + self.lock.node
        return None

    def release(self):
        self.lock.release()


def run_async(fn, *args, **kw):
    """Run fn in a daemon thread; a Future of its result."""
    fut = concurrent.futures.Future()

    def target():
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn(*args, **kw))
        except BaseException as e:
            fut.set_exception(e)
    threading.Thread(target=target, daemon=True).start()
    return fut


class Clients:
    """The test's Curator peers and kazoo clients, all stopped on exit.

        with Clients(ctx) as cl:
            peer = cl.curator('svc')
            kz = cl.kazoo()
    """

    def __init__(self, ctx):
        self.ctx = ctx
        self._peers = []
        self._kazoos = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self._peers:
            p.stop()
        for kz in self._kazoos:
            try:
                kz.stop()
                kz.close()
            except Exception:
                pass
        return False

    def curator(self, name, identity=None):
        p = CuratorPeer(self.ctx, name, identity)
        self._peers.append(p)
        return p

    def kazoo(self):
        from kazoo.client import KazooClient
        kz = KazooClient(hosts=self.ctx.zk.connect_string,
                         timeout=KAZOO_SESSION_S)
        self._kazoos.append(kz)
        kz.start(timeout=15)
        return kz


# ---------------------------------------------------------------------------
# SQL side and ZooKeeper checks
# ---------------------------------------------------------------------------

def sql(ctx, name, protocol=None):
    """A backend with zklock.root = '/locks' (and the given protocol).
    Its deadlock_timeout is long: past it a waiter publishes a wait record
    and searches for a cycle (a few requests), which would blur the check
    that a waiter otherwise sends nothing while it waits on its watch."""
    b = ctx.backend(name)
    b.query("SET deadlock_timeout = '60s'")
    b.query("SET zklock.root = '%s'" % ROOT)
    if protocol:
        b.query('SET zklock.protocol = %s', [protocol])
    return b


def inspector(ctx):
    return harness.ZkInspector(ctx.kz, ROOT)


def session_of(backend):
    """The backend's ZooKeeper session id (int), from zk_status()."""
    sid = backend.scalar('SELECT session_id FROM zk_status()')
    return int(sid, 16)


def requests_by_session(ctx):
    """{session id: packets the server has received on its connection},
    from the `cons` four letter word."""
    counts = {}
    for m in re.finditer(r'\(([^()]*)\)', ctx.zk.four_letter(1, 'cons')):
        kv = dict(item.split('=', 1) for item in m.group(1).split(',')
                  if '=' in item)
        if 'sid' in kv and 'recved' in kv:
            counts[int(kv['sid'], 16)] = int(kv['recved'])
    return counts


def check_blocked(ctx, parent, session, node, pending, who):
    """`who` (ZooKeeper session `session`) waits for `node`, blocking on a
    watch rather than polling: wchp shows the session watching exactly
    `node` under the lock parent, nobody watches the parent itself, the
    server holds no getChildren watch at all, and during QUIET seconds
    the session sends at most its pings and gets no answer (`pending()`
    stays true).  Its own node may be watched as well."""
    last = {}

    def watching():
        wchp = ctx.zk.watches_by_path()
        last['wchp'] = wchp
        mine = {p for p, ss in wchp.items() if session in ss
                and (p == parent or p.startswith(parent + '/'))}
        last['mine'] = mine
        # besides its own node, which a waiter with one contender ahead
        # watches too (doc/02-how-it-works.md)
        own = own_nodes(ctx, parent).get(session, set())
        return mine - own == {node} and not wchp.get(parent)
    try:
        wait_until(watching, 10, '%s to watch %s' % (who, node), interval=0.1)
    except TimeoutError:
        raise AssertionError(
            '%s (session 0x%x) should watch exactly %s; it watches %s; '
            'watchers of the lock parent itself: %s'
            % (who, session, node, sorted(last.get('mine', ())) or 'nothing',
               sorted(hex(s) for s in last.get('wchp', {}).get(parent, ()))
               or 'none')) from None
    # (two four letter words, read one after the other: a data watch set
    # between them -- a holder's, 20 ms after its grant -- shows as -1 for
    # a moment; a getChildren watch, once set, stays until it fires)
    seen = {}

    def no_child_watch():
        seen['child'] = ctx.zk.watch_counts()['child']
        return seen['child'] == 0
    try:
        wait_until(no_child_watch, 5, 'no getChildren watch', interval=0.1)
    except TimeoutError:
        raise AssertionError('%d getChildren watch(es) on the server while %s '
                             'waits: waiters must watch one node, never the '
                             'children list' % (seen['child'], who)) from None
    before = requests_by_session(ctx).get(session)
    assert before is not None, 'session 0x%x of %s not in cons' % (session,
                                                                   who)
    time.sleep(QUIET)
    after = requests_by_session(ctx).get(session)
    assert pending(), '%s got the lock while %s was held' % (who, node)
    assert after is not None and after - before <= MAX_QUIET_REQUESTS, (
        '%s sent %s requests in %.1f s while waiting: it polls instead of '
        'waiting on its watch' % (who, None if after is None
                                  else after - before, QUIET))


# token_of and expect_sqlstate: the multi-session suite's helpers


def node_name(path):
    return path.rsplit('/', 1)[1]


def check_layout(protocol, mode, name):
    assert re.fullmatch(LAYOUT[(protocol, mode)], name), (
        'zklock.protocol %s, %s: node %r is not %s'
        % (protocol, mode, name, LAYOUT[(protocol, mode)]))


# ---------------------------------------------------------------------------
# the two scenarios every (protocol, mode, recipe) combination runs
# ---------------------------------------------------------------------------

def conflict(ctx, protocol, mode, side, res):
    """SQL `mode` and the other recipe exclude each other: each waits
    (blocked on a watch) while the other holds; the handoff is prompt in
    both directions; zk_try_* returns false while the other holds."""
    zi = inspector(ctx)
    parent = zi.parent_path(res)
    assert parent == side.path, (parent, side.path)
    a, b = sql(ctx, 'io-A', protocol), sql(ctx, 'io-B', protocol)
    what = '%s %s vs %s' % (protocol, mode, side.label)

    # 1. SQL holds, the other client waits.
    a.query('BEGIN')
    tok_a = token_of(a.submit(LOCK[mode], [res, LONG]), 10, 'A ' + what)
    [na] = zi.wait_contenders(res, 1)
    check_layout(protocol, mode, na.name)
    assert na.czxid == tok_a
    side.start_acquire()
    cs = zi.wait_contenders(res, 2)
    assert cs[0].name == na.name and cs[1].session_id == side.session_id, cs
    check_blocked(ctx, parent, side.session_id, na.path, side.pending,
                  side.label)
    t0 = time.monotonic()
    a.query('COMMIT')
    got = side.wait_acquired(PROMPT)
    to_other = time.monotonic() - t0
    assert got == cs[1].path, (got, cs)

    # 2. The other client holds: try is false, SQL waits.
    assert b.scalar(TRY[mode], [res]) is False, \
        'zk_try (%s) returned true while %s held' % (what, side.label)
    zi.wait_contenders(res, 1)          # the try left no node behind
    b.query('BEGIN')
    fut = b.submit(LOCK[mode], [res, LONG])
    ctx.wait_state(b)
    cs = zi.wait_contenders(res, 2)
    nb = cs[1]
    check_layout(protocol, mode, nb.name)
    check_blocked(ctx, parent, nb.session_id, got, lambda: not fut.done(),
                  'SQL ' + mode)
    t1 = time.monotonic()
    side.release()
    tok_b = token_of(fut, PROMPT, 'B %s after the release' % what)
    to_sql = time.monotonic() - t1
    assert tok_b == nb.czxid and tok_b > tok_a
    b.query('COMMIT')
    zi.wait_contenders(res, 0)
    ctx.log('%s: handoff to the other %.3f s, to SQL %.3f s'
            % (what, to_other, to_sql))


def coexist(ctx, protocol, side, res):
    """SQL shared and the other recipe's shared mode hold together, in
    either order; a SQL exclusive request then waits for both."""
    zi = inspector(ctx)
    parent = zi.parent_path(res)
    a, b = sql(ctx, 'io-A', protocol), sql(ctx, 'io-B', protocol)
    what = '%s shared with %s' % (protocol, side.label)

    # the other holds first, then SQL shared is granted at once
    n1 = side.try_acquire()
    assert n1, '%s could not take a free lock' % side.label
    a.query('BEGIN')
    token_of(a.submit(LOCK['shared'], [res, '10 seconds']), 10,
             'SQL shared while %s holds' % side.label)
    side.release()
    # SQL holds first, then the other's shared mode is granted at once
    side.start_acquire()
    n2 = side.wait_acquired(PROMPT)
    assert b.scalar(TRY['shared'], [res]) is True, what
    assert b.scalar(TRY['exclusive'], [res]) is False, what
    cs = zi.wait_contenders(res, 2)
    assert {c.mode for c in cs} == {'shared'}, cs
    check_layout(protocol, 'shared', [c for c in cs
                                      if c.path != n2][0].name)

    # an exclusive request (another backend, any protocol) waits for both
    b.query('BEGIN')
    fut = b.submit(LOCK['exclusive'], [res, LONG])
    ctx.wait_state(b)
    cs = zi.wait_contenders(res, 3)
    x = cs[2]
    check_blocked(ctx, parent, x.session_id, cs[1].path,
                  lambda: not fut.done(), 'SQL exclusive')
    if cs[1].path == n2:
        side.release()
        time.sleep(0.3)
        assert not fut.done(), 'exclusive granted while SQL shared holds'
        a.query('COMMIT')
    else:                                   # not expected: A's node is older
        a.query('COMMIT')
        time.sleep(0.3)
        assert not fut.done(), 'exclusive granted while %s holds' % side.label
        side.release()
    token_of(fut, PROMPT, 'exclusive after both shared holders left')
    b.query('COMMIT')
    zi.wait_contenders(res, 0)
    ctx.log('%s: ok' % what)


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_curator_rw(ctx):
    """zklock.protocol curator-rw against Curator InterProcessReadWriteLock,
    both modes on both sides."""
    with Clients(ctx) as cl:
        peer = cl.curator('rw')
        p = 'curator-rw'
        for mode, kind in (('exclusive', 'write'), ('exclusive', 'read'),
                           ('shared', 'write')):
            res = 'interop/rw-%s-%s' % (mode, kind)
            conflict(ctx, p, mode, CuratorSide(peer, kind, ROOT + '/' + res),
                     res)
        res = 'interop/rw-shared-read'
        coexist(ctx, p, CuratorSide(peer, 'read', ROOT + '/' + res), res)


def test_curator_mutex(ctx):
    """zklock.protocol curator-mutex against Curator InterProcessMutex (and
    kazoo's Lock told to see `lock-`); shared is an ERROR (22023)."""
    from kazoo.recipe.lock import Lock
    with Clients(ctx) as cl:
        peer = cl.curator('mutex')
        res = 'interop/mutex'
        conflict(ctx, 'curator-mutex', 'exclusive',
                 CuratorSide(peer, 'mutex', ROOT + '/' + res), res)
        res = 'interop/mutex-kazoo'
        conflict(ctx, 'curator-mutex', 'exclusive',
                 KazooSide(cl.kazoo(), Lock, ROOT + '/' + res,
                           extra_lock_patterns=['lock-']), res)

    b = sql(ctx, 'io-mutex-shared', 'curator-mutex')
    for stmt in ("SELECT zk_lock_shared('interop/mutex')",
                 "SELECT zk_try_lock_shared('interop/mutex')",
                 "SELECT zk_session_lock_shared('interop/mutex')"):
        e = expect_sqlstate(b.submit(stmt), '22023', 10, stmt)
        assert 'shared' in str(e) and 'curator-mutex' in str(e), str(e)
    assert inspector(ctx).contenders('interop/mutex') == []


def test_kazoo(ctx):
    """zklock.protocol kazoo against kazoo Lock, WriteLock and ReadLock."""
    from kazoo.recipe.lock import Lock, ReadLock, WriteLock
    with Clients(ctx) as cl:
        kz = cl.kazoo()
        for mode, cls in (('exclusive', Lock), ('exclusive', WriteLock),
                          ('exclusive', ReadLock), ('shared', WriteLock)):
            res = 'interop/kazoo-%s-%s' % (mode, cls.__name__)
            conflict(ctx, 'kazoo', mode,
                     KazooSide(kz, cls, ROOT + '/' + res), res)
        res = 'interop/kazoo-shared-ReadLock'
        coexist(ctx, 'kazoo', KazooSide(kz, ReadLock, ROOT + '/' + res), res)


# Which recipe sees which zklock node: True = the recipe waits while zklock
# holds (protocol, mode); False = it takes the lock anyway.  This is the
# doc/05-interoperability.md's compatibility table.
RECIPES = ('curator-mutex', 'curator-write', 'curator-read', 'kazoo-Lock',
           'kazoo-Lock+lock-', 'kazoo-WriteLock', 'kazoo-ReadLock')
SEES = {
    ('curator-rw', 'exclusive'):
        (False, True, True, False, False, False, False),
    ('curator-rw', 'shared'):
        (False, True, False, False, False, False, False),
    ('curator-mutex', 'exclusive'):
        (True, False, False, False, True, False, False),
    ('kazoo', 'exclusive'):
        (False, False, False, True, True, True, True),
    ('kazoo', 'shared'):
        (False, False, False, False, False, True, False),
}


def test_compatibility_table(ctx):
    """Every cell of the compatibility table: while zklock holds (protocol,
    mode), does each recipe's non-blocking attempt get the lock?  And the
    other way round: whatever its protocol, zklock refuses a conflicting
    mode while any recipe holds."""
    from kazoo.recipe.lock import Lock, ReadLock, WriteLock
    with Clients(ctx) as cl:
        peer = cl.curator('table')
        kz = cl.kazoo()
        res = 'interop/table'
        path = ROOT + '/' + res
        sides = {
            'curator-mutex': CuratorSide(peer, 'mutex', path),
            'curator-write': CuratorSide(peer, 'write', path),
            'curator-read': CuratorSide(peer, 'read', path),
            'kazoo-Lock': KazooSide(kz, Lock, path),
            'kazoo-Lock+lock-': KazooSide(kz, Lock, path,
                                          extra_lock_patterns=['lock-']),
            'kazoo-WriteLock': KazooSide(kz, WriteLock, path),
            'kazoo-ReadLock': KazooSide(kz, ReadLock, path),
        }
        zi = inspector(ctx)
        a = sql(ctx, 'io-table')
        wrong = []
        for (protocol, mode), expect in SEES.items():
            a.query('SET zklock.protocol = %s', [protocol])
            a.query('BEGIN')
            token_of(a.submit(LOCK[mode], [res, '10 seconds']), 10, 'hold')
            for recipe, sees in zip(RECIPES, expect):
                got = sides[recipe].try_acquire()
                if got:
                    sides[recipe].release()
                if bool(got) == sees:
                    wrong.append('%s %s: %s %s' % (
                        protocol, mode, recipe,
                        'took the lock' if got else 'waited'))
                zi.wait_contenders(res, 1)
            a.query('COMMIT')
        assert not wrong, 'compatibility table wrong:\n  ' + '\n  '.join(wrong)

        # zklock sees every recipe's node, whatever its own protocol
        for recipe, side in sides.items():
            assert side.try_acquire(), recipe
            for protocol in PROTOCOLS:
                a.query('SET zklock.protocol = %s', [protocol])
                got = a.scalar(TRY['exclusive'], [res])
                if got:
                    wrong.append('%s exclusive took the lock held by %s'
                                 % (protocol, recipe))
                if protocol == 'curator-mutex':
                    continue
                got = a.scalar(TRY['shared'], [res])
                if got != side.shared:
                    wrong.append('%s shared %s while %s held' % (
                        protocol, 'took the lock' if got else 'was refused',
                        recipe))
            side.release()
            # the refused tries' nodes are deleted without waiting: gone
            # before the next recipe's non-blocking try (a 4-lane run on a
            # loaded machine had kazoo's WriteLock meet one)
            zi.wait_contenders(res, 0)
        assert not wrong, 'zklock vs the recipes:\n  ' + '\n  '.join(wrong)


def test_mixed_protocols_exclude(ctx):
    """Two SQL sessions with different zklock.protocol settings exclude
    each other (zklock recognises every layout), in both directions."""
    zi = inspector(ctx)
    res = 'interop/mixed'
    backends = {p: sql(ctx, 'io-%s' % p, p) for p in PROTOCOLS}
    for pa in PROTOCOLS:
        for pb in PROTOCOLS:
            if pa == pb:
                continue
            a, b = backends[pa], backends[pb]
            a.query('BEGIN')
            token_of(a.submit(LOCK['exclusive'], [res, LONG]), 10, pa)
            [na] = zi.wait_contenders(res, 1)
            check_layout(pa, 'exclusive', na.name)
            assert b.scalar(TRY['exclusive'], [res]) is False, (pa, pb)
            if pb != 'curator-mutex':
                assert b.scalar(TRY['shared'], [res]) is False, (pa, pb)
            b.query('BEGIN')
            fut = b.submit(LOCK['exclusive'], [res, LONG])
            ctx.wait_state(b)
            nb = zi.wait_contenders(res, 2)[1]
            check_layout(pb, 'exclusive', nb.name)
            # the node shows before its watch is set: wait for the watch
            wait_until(lambda: nb.session_id in
                       ctx.zk.watches_by_path().get(na.path, ()), 10,
                       '%s waiter to watch the %s holder' % (pb, pa))
            time.sleep(0.2)
            assert not fut.done(), '%s granted while %s holds' % (pb, pa)
            a.query('COMMIT')
            token_of(fut, PROMPT, '%s after %s' % (pb, pa))
            b.query('COMMIT')
            zi.wait_contenders(res, 0)
    # shared across protocols: curator-rw __READ__ and kazoo __rlock__
    # coexist, and a curator-mutex exclusive waits for both
    a, b, c = (backends[p] for p in PROTOCOLS)
    a.query('BEGIN')
    c.query('BEGIN')
    token_of(a.submit(LOCK['shared'], [res, '10 seconds']), 10, 'rw shared')
    token_of(c.submit(LOCK['shared'], [res, '10 seconds']), 10,
             'kazoo shared next to curator-rw shared')
    assert b.scalar(TRY['exclusive'], [res]) is False
    a.query('COMMIT')
    assert b.scalar(TRY['exclusive'], [res]) is False
    c.query('COMMIT')
    # a release is sent, not awaited: wait until ZooKeeper has run it
    zi.wait_contenders(res, 0)
    assert b.scalar(TRY['exclusive'], [res]) is True
    zi.wait_contenders(res, 0)


def test_lock_path_and_node_data(ctx):
    """zklock.root '/locks' + resource 'nightly' is the path Curator and
    kazoo use, '/locks/nightly'; zklock's node data is UTF-8 that kazoo's
    contenders() decodes, and zk_lock_queue shows the other clients'
    data."""
    from kazoo.recipe.lock import Lock
    zi = inspector(ctx)
    role = 'interop_r\u00f4le'            # a non-ASCII name in the data
    ctx.admin.query('DROP ROLE IF EXISTS "%s"' % role)
    ctx.admin.query('CREATE ROLE "%s" SUPERUSER LOGIN' % role)
    try:
        _path_and_data(ctx, zi, role, Lock)
    finally:
        ctx.close()                     # its backends, before DROP ROLE
        ctx.pg.psql('DROP ROLE IF EXISTS "%s"' % role)


def _path_and_data(ctx, zi, role, Lock):
    with Clients(ctx) as cl:
        peer = cl.curator('nightly', identity='billing-service-\u00e9')
        kz = cl.kazoo()
        b = ctx.backend('nightly-job', user=role)
        b.query("SET zklock.root = '/locks'")
        pid = b.pid
        for protocol in PROTOCOLS:
            b.query('SET zklock.protocol = %s', [protocol])
            b.query('BEGIN')
            token_of(b.submit(LOCK['exclusive'], ['nightly', LONG]), 10,
                     protocol)
            [n] = zi.wait_contenders('nightly', 1)
            assert n.parent == '/locks/nightly', n.path
            raw, _ = ctx.kz.get(n.path)
            text = raw.decode('utf-8')          # strict: must be UTF-8
            assert '\n' not in text.strip() and len(raw) < 512, text
            assert text.startswith('zklock ') and ('pid=%d' % pid) in text \
                and role in text and 'application_name=nightly-job' in text, \
                text
            # kazoo's contenders() decodes every contender's data as UTF-8
            if protocol == 'kazoo':
                assert Lock(kz, '/locks/nightly').contenders() == [text]
            elif protocol == 'curator-mutex':
                assert Lock(kz, '/locks/nightly', extra_lock_patterns=[
                    'lock-']).contenders() == [text]
            # the other client's own path is the same lock
            kind = 'mutex' if protocol == 'curator-mutex' else 'write'
            if protocol != 'kazoo':
                assert peer.acquire(kind, '/locks/nightly', 0) is None, \
                    'Curator %s took /locks/nightly while SQL held it' % kind
            else:
                assert not Lock(kz, '/locks/nightly').acquire(blocking=False)
            q = b.query('SELECT position, mode, holding, owner FROM '
                        "zk_lock_queue('nightly')")
            assert q == [(1, 'exclusive', True, text)], q
            b.query('COMMIT')

        # zk_lock_queue shows Curator's and kazoo's own node data
        node = peer.acquire('write', '/locks/nightly', 5000)
        assert node and node.startswith('/locks/nightly/'), node
        klock = Lock(kz, '/locks/nightly', 'kazoo-worker-\u00fc')
        fut = run_async(klock.acquire, timeout=60)
        zi.wait_contenders('nightly', 2)
        q = b.query("SELECT position, mode, holding, owner FROM "
                    "zk_lock_queue('nightly')")
        # (zklock judges other clients' nodes by order; kazoo's Lock does
        # not see Curator's node and in fact holds too, see the hazard test)
        assert q == [(1, 'exclusive', True, 'billing-service-\u00e9'),
                     (2, 'exclusive', False, 'kazoo-worker-\u00fc')], q
        assert fut.result(PROMPT) is True
        klock.release()
        peer.release()
        zi.wait_contenders('nightly', 0)


def test_hazard_curator_mutex_and_kazoo_lock_blind(ctx):
    """Known hazard, not zklock's: a stock Curator InterProcessMutex
    (`lock-`) and a stock kazoo Lock (`__lock__`) do not see each other and
    hold the same path at once.  zklock sees both and waits for both."""
    from kazoo.recipe.lock import Lock
    zi = inspector(ctx)
    res = 'interop/blind'
    path = ROOT + '/' + res
    with Clients(ctx) as cl:
        peer = cl.curator('blind')
        kz = cl.kazoo()
        assert peer.acquire('mutex', path, 5000), 'Curator mutex'
        klock = Lock(kz, path, 'kazoo')
        assert klock.acquire(blocking=False), \
            'kazoo Lock waited for a Curator mutex (expected to be blind)'
        zi.wait_contenders(res, 2)
        b = sql(ctx, 'io-blind', 'curator-mutex')
        c = sql(ctx, 'io-blind-k', 'kazoo')
        assert b.scalar(TRY['exclusive'], [res]) is False
        assert c.scalar(TRY['shared'], [res]) is False
        b.query('BEGIN')
        fut = b.submit(LOCK['exclusive'], [res, LONG])
        ctx.wait_state(b)
        peer.release()
        time.sleep(0.3)
        assert not fut.done(), 'zklock granted while kazoo Lock holds'
        klock.release()
        token_of(fut, PROMPT, 'zklock after both released')
        b.query('COMMIT')
        zi.wait_contenders(res, 0)


def test_hazard_kazoo_readlock_649(ctx):
    """kazoo 2.8's read-lock deadlock (kazoo issue #649) is kazoo's, and
    zklock's timeout is the way out.  A waiting kazoo ReadLock takes the
    *last* `__lock__` node as its predecessor, even one queued after it:
    SQL A holds exclusive, a ReadLock R waits, SQL B asks exclusive (and
    rightly waits for R); when A commits, R watches B's node while B
    watches R's.  B's timeout (55P03) deletes B's node and R gets the
    lock.  (A kazoo with the fix simply grants R when A commits.)"""
    from kazoo.recipe.lock import ReadLock
    zi = inspector(ctx)
    res = 'interop/kazoo-649'
    path = ROOT + '/' + res
    with Clients(ctx) as cl:
        kz = cl.kazoo()
        a, b = sql(ctx, 'io-649-A', 'kazoo'), sql(ctx, 'io-649-B', 'kazoo')
        a.query('BEGIN')
        token_of(a.submit(LOCK['exclusive'], [res, LONG]), 10, 'A')
        rlock = ReadLock(kz, path, 'reader')
        rfut = run_async(rlock.acquire, timeout=60)
        [wa, r] = zi.wait_contenders(res, 2)
        b.query('BEGIN')
        bfut = b.submit(LOCK['exclusive'], [res, '8 seconds'])
        ctx.wait_state(b)
        [_, _, wb] = zi.wait_contenders(res, 3)
        # zklock's B waits for its immediate predecessor, R's node
        check_blocked(ctx, zi.parent_path(res), wb.session_id, r.path,
                      lambda: not bfut.done(), 'SQL B')
        a.query('COMMIT')
        try:
            rfut.result(1.5)
            deadlocked = False
        except concurrent.futures.TimeoutError:
            deadlocked = True
        if deadlocked:
            # kazoo's bug: R now watches B's node, a successor
            wchp = ctx.zk.watches_by_path()
            assert r.session_id in wchp.get(wb.path, ()), \
                'kazoo ReadLock waits, but not on the later writer %s: %r' \
                % (wb.path, wchp)
            expect_sqlstate(bfut, '55P03', 10, 'B (its timeout)')
            assert rfut.result(PROMPT) is True, 'R after B gave up'
            ctx.log('kazoo ReadLock deadlocked with a later zklock writer '
                    '(kazoo #649) until zklock\'s timeout removed the writer')
            rlock.release()
            b.query('ROLLBACK')
        else:
            ctx.log('this kazoo grants the ReadLock correctly (#649 fixed)')
            rlock.release()
            token_of(bfut, PROMPT, 'B after R')
            b.query('COMMIT')
        zi.wait_contenders(res, 0)


def test_z_nothing_left_behind(ctx):
    """No contender or ephemeral node is left under /locks, and no Curator
    peer process is still running."""
    with _live_lock:
        assert not _live_peers, 'Curator peers still running: %r' \
            % _live_peers
    zi = inspector(ctx)
    last = []

    def clean():
        last[:] = zi.leftovers()
        return not last
    try:
        wait_until(clean, 15, 'nothing left under %s' % ROOT)
    except TimeoutError:
        raise AssertionError('left behind under %s: %r' % (ROOT, last)) \
            from None
