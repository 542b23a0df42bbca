"""
The `waitcost` part of `make bench` (issue 38): what waiting costs the
shared ensemble, and how soon a deadlock ends.

The recipe exists so that waiting is free: a waiter watches its
predecessor and sleeps.  This part counts what K patient waiters send
ZooKeeper beyond their sessions' pings, for whatever zklock is installed
(bench/run.sh installs the tree's build unless BENCH_NO_INSTALL=1), beside
Curator's and kazoo's waiters measured the same way.

Every case, on the bench's ensemble (3 servers by default, warmed up by
the bench; the servers' container reaper as the bench configures it, once
an hour) and its cluster, default settings (deadlock_timeout 1 s,
zklock.session_timeout 10 s, so a session pings every ~3.3 s):

  1. K + H sessions connect (H holders: 1, or the permits of a semaphore):
     zklock: K + H backends (K > 250: the waiters spread over two
     clusters, the bench's and one of this part's, max_connections 300
     each), each with its own ZooKeeper session (opened by a
     zk_try_lock_exclusive on a name of its own, checked distinct with
     zk_status()); Curator: CuratorBench's wait mode, K + 1 threads in one
     JVM, each with its own CuratorFramework (its own session, as zklock
     has one per backend); kazoo: kazoo_bench.py's wait mode, K + 1
     KazooClients (threads of one process, one session each).
  2. The idle baseline: zk_packets_received from mntr of every server
     (summed: each client is connected to one server; the part's own mntr
     calls taken out) over a window of --waitcost-seconds (16 s; QUICK 8),
     5 s after the last session was opened.
  3. The holders take the lock (a name never used before; zklock: in a
     transaction left idle), the K waiters ask for it with a 600 s
     timeout, and the part waits (bounded) until every waiter is queued
     (its node under the lock; a semaphore: the H leases and at least one
     node per waiter in the subtree) and, for zklock, until K wait records
     exist under <zklock.root>/%waits, or deadlock_timeout + 5 s have
     passed since all were queued (a build that publishes no record
     before it must); then 8 x deadlock_timeout more, so that the 1.5
     searches' schedule (1, 2, 4, then every 8 deadlock_timeouts) is in
     its steady state.
  4. The same window again, every waiter still waiting at its end (a
     waiter granted or failed fails the case).  Requests per second beyond
     pings = waiting window's rate - baseline's rate; per waiter = that / K.
     (While a 1.5 waiter sends requests its session sends fewer pings, so
     its figure beyond pings is, if anything, a little low.)
  5. The waiters are cancelled (zklock: PostgreSQL's cancel, 57014;
     Curator: the threads interrupted; kazoo: Lock.cancel()), the holders
     release, every session closes, and the part waits (bounded) until the
     lock and %waits are empty.

Cases, by default (`make bench`, and BENCH_ONLY=waitcost):

  zklock, exclusive, zklock's layout (zklock.protocol curator-rw, the
  default), K = 10, 100, 500; K = 100: shared waiters behind an exclusive
  holder, a semaphore of 3 permits held by 3 and K waiting, exclusive in
  Curator's mutex layout (curator-mutex) and in kazoo's (kazoo); Curator
  InterProcessMutex and kazoo Lock, K = 100.
  BENCH_WAITCOST=full (or --waitcost full) adds the rest of the grid:
  every mode and layout at K = 10, 100 and 500 (shared has no
  curator-mutex node), and the peers at 10 and 500: about 4 times longer.
  BENCH_WAITCOST_CASES=zk-excl-10,kazoo-100 runs only the cases named.

Deadlock: two backends, two locks (names never used before), each holds
one in its transaction and asks for the other (timeout 60 s); the time
from the second ask (the cycle closes) to the 40P01, and exactly one
40P01 per cycle (the other backend then gets its lock).  "closed at
once": the first ask 0.3 s before the second (once queued), 5 times
(QUICK 3); "closed late": the first ask has waited 10 x deadlock_timeout
(its searches backed off), 2 times (QUICK 1).

Time: about 9 minutes with the default cases on this 2-core VM (8.4 in
the run committed in bench/waitcost, against zklock 1.6: 47-50 s per
zklock case at K <= 100, 72 s at K = 500, Curator 62 s, kazoo 48 s, the
deadlock rounds 30 s), plus the bench's start and warm-up; QUICK=1
(8 s windows, fewer deadlock rounds) about 6.

Targets (issue 38): <= 0.2 requests per waiter per second beyond pings in
every zklock case; 40P01 within 2 s of the cycle closing (the maximum).
"""
import hashlib
import os
import select
import statistics
import subprocess
import threading
import time
import queue as queue_mod

import psycopg2
import psycopg2.extensions as pgx

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
CURATOR_CP = ':'.join([os.path.join(HERE, 'build'), '/usr/share/java/curator-recipes.jar',
                       '/usr/share/java/slf4j-nop.jar'])
KAZOO_BENCH = os.path.join(HERE, 'kazoo_bench.py')
PYTHON = '/usr/bin/python3'
TARGET_PER_WAITER = 0.2     # requests per waiter per second beyond pings
TARGET_DEADLOCK_S = 2.0     # 40P01 at most this long after the cycle closes
WAIT_TIMEOUT_S = 600        # every waiter's lock call timeout
ROOT = '/zklock'
PERMITS = 3                 # semaphore mode: holders = permits
SPLIT_ABOVE = 250           # more waiters than this: two clusters

# (key, implementation, mode, zklock.protocol, K)
DEFAULT_CASES = [
    ('zk-excl-10', 'zklock', 'exclusive', 'curator-rw', 10),
    ('zk-excl-100', 'zklock', 'exclusive', 'curator-rw', 100),
    ('zk-excl-500', 'zklock', 'exclusive', 'curator-rw', 500),
    ('zk-shared-100', 'zklock', 'shared', 'curator-rw', 100),
    ('zk-sem-100', 'zklock', 'semaphore', 'curator-rw', 100),
    ('zk-mutex-100', 'zklock', 'exclusive', 'curator-mutex', 100),
    ('zk-kazoo-100', 'zklock', 'exclusive', 'kazoo', 100),
    ('curator-100', 'curator', 'exclusive', None, 100),
    ('kazoo-100', 'kazoo', 'exclusive', None, 100),
]


def full_cases():
    cases = []
    for k in (10, 100, 500):
        for proto in ('curator-rw', 'curator-mutex', 'kazoo'):
            for mode in ('exclusive', 'shared', 'semaphore'):
                if mode == 'shared' and proto == 'curator-mutex':
                    continue
                cases.append(('zk-%s-%s-%d' % (mode, proto, k), 'zklock', mode,
                              proto, k))
        cases.append(('curator-%d' % k, 'curator', 'exclusive', None, k))
        cases.append(('kazoo-%d' % k, 'kazoo', 'exclusive', None, k))
    return cases


def label(case):
    key, impl, mode, proto, k = case
    if impl == 'curator':
        return 'Curator InterProcessMutex'
    if impl == 'kazoo':
        return 'kazoo Lock'
    layout = {'curator-rw': "zklock's layout", 'curator-mutex': "Curator's mutex layout",
              'kazoo': "kazoo's layout"}[proto]
    what = {'exclusive': 'exclusive', 'shared': 'shared behind an exclusive holder',
            'semaphore': 'semaphore, %d permits held' % PERMITS}[mode]
    return 'zklock %s, %s' % (what, layout)


# ---------------------------------------------------------------------------
# asynchronous psycopg2 connections: hundreds of waiters without a thread each
# ---------------------------------------------------------------------------

def _drive(conns, timeout, what):
    """Poll asynchronous connections until each has finished its connect or
    statement.  Returns {conn: exception or None}; raises TimeoutError after
    `timeout` s naming `what`."""
    pending = set(conns)
    out = {}
    deadline = time.monotonic() + timeout
    while pending:
        p = select.poll()
        fds = {}
        for c in list(pending):
            try:
                st = c.poll()
            except Exception as e:          # noqa: BLE001 (the statement's error)
                out[c] = e
                pending.discard(c)
                continue
            if st == pgx.POLL_OK:
                out[c] = None
                pending.discard(c)
            elif st == pgx.POLL_READ:
                p.register(c.fileno(), select.POLLIN)
                fds[c.fileno()] = c
            else:
                p.register(c.fileno(), select.POLLOUT)
                fds[c.fileno()] = c
        if not pending:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError('timed out after %.0f s waiting for %s (%d of %d left)'
                               % (timeout, what, len(pending), len(conns)))
        p.poll(min(left, 0.5) * 1000)
    return out


def _busy(c):
    """True while the connection's statement runs (a waiter still waiting)."""
    try:
        st = c.poll()
    except Exception:                   # noqa: BLE001 (finished, with an error)
        return False
    return st != pgx.POLL_OK


class Sessions:
    """K waiters (asynchronous connections) and H holders (ordinary
    connections, autocommit, explicit BEGIN) over one or two clusters, each
    backend with its own ZooKeeper session."""

    def __init__(self, clusters, k, holders, protocol, tag):
        self.clusters, self.k, self.h = clusters, k, holders
        self.protocol, self.tag = protocol, tag
        self.holders, self.waiters = [], []
        self.cursors = {}

    def open(self):
        for i in range(self.h):
            c = self.clusters[0].connect(application_name='waitcost-holder')
            self.holders.append(c)
        for i in range(self.k):
            pg = self.clusters[i % len(self.clusters)]
            self.waiters.append(psycopg2.connect(
                pg.dsn() + ' application_name=waitcost-waiter connect_timeout=30',
                async_=1))
        _drive(self.waiters, 120, '%d waiter connections' % self.k)
        # its own ZooKeeper session for every backend: a try-lock call (in
        # the layout measured) on the case's connect name, granted and
        # released at once or refused, then one parent left, not K
        sids = set()
        for i, c in enumerate(self.holders):
            with c.cursor() as cur:
                cur.execute('SET zklock.protocol = %s', [self.protocol])
                cur.execute('SELECT zk_try_lock_exclusive(%s)',
                            ['bench-waitcost-connect-%s' % self.tag])
                cur.execute('SELECT session_id FROM zk_status()')
                sids.add(cur.fetchone()[0])
        for stmt, args in (
                ('SET zklock.protocol = %s', lambda i: [self.protocol]),
                ('SELECT zk_try_lock_exclusive(%s)',
                 lambda i: ['bench-waitcost-connect-%s' % self.tag]),
                ('SELECT session_id FROM zk_status()', lambda i: None)):
            for i, c in enumerate(self.waiters):
                cur = self.cursors.setdefault(c, c.cursor())
                cur.execute(stmt, args(i))
            errs = _drive(self.waiters, 120, '%d waiters: %s' % (self.k, stmt))
            bad = [e for e in errs.values() if e is not None]
            if bad:
                raise RuntimeError('%d waiter(s) failed %s: %s' % (len(bad), stmt, bad[0]))
        for c in self.waiters:
            sids.add(self.cursors[c].fetchone()[0])
        if len(sids) != self.k + self.h or None in sids:
            raise RuntimeError('%d distinct ZooKeeper sessions for %d backends'
                               % (len(sids), self.k + self.h))

    def hold(self, sql, args):
        for c in self.holders:
            with c.cursor() as cur:
                cur.execute('BEGIN')
                cur.execute(sql, args)

    def ask(self, sql, args):
        for c in self.waiters:
            self.cursors[c].execute(sql, args)

    def still_waiting(self):
        return sum(1 for c in self.waiters if _busy(c))

    def close(self):
        """Cancel the waiters, end the holders' transactions, close every
        connection (and so every session).  Bounded; never raises."""
        for c in self.waiters:
            try:
                if _busy(c):
                    c.cancel()
            except Exception:           # noqa: BLE001 (closing anyway)
                pass
        try:
            _drive(self.waiters, 60, 'the cancelled waiters')
        except Exception as e:          # noqa: BLE001
            harness.log('waitcost: %s' % e)
        for c in self.holders:
            try:
                c.cursor().execute('COMMIT')
            except Exception:           # noqa: BLE001
                pass
        for c in self.waiters + self.holders:
            try:
                c.close()
            except Exception:           # noqa: BLE001
                pass
        self.waiters, self.holders = [], []


# ---------------------------------------------------------------------------
# the peers' wait modes (CuratorBench.java, kazoo_bench.py)
# ---------------------------------------------------------------------------

class Peer:
    """A CuratorBench or kazoo_bench.py process in its wait mode, driven by
    lines on its stdin; its stdout read by a thread into a queue."""

    def __init__(self, impl, hosts, path, clients):
        if impl == 'curator':
            cmd = ['java', '-Xss256k', '-cp', CURATOR_CP, 'CuratorBench',
                   hosts, path, str(clients), '0', str(WAIT_TIMEOUT_S), 'wait']
        else:
            cmd = [PYTHON, KAZOO_BENCH, hosts, path,
                   str(clients), '0', str(WAIT_TIMEOUT_S), 'wait']
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines = queue_mod.Queue()
        self.err = []
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip('\n'))
        self.lines.put(None)            # the end: the process exited

    def _read_err(self):
        for line in self.proc.stderr:
            self.err.append(line.rstrip('\n'))

    def expect(self, prefix, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue_mod.Empty:
                line = ''
            if line is None or (line == '' and time.monotonic() >= deadline):
                raise RuntimeError('peer: no "%s" line (%s); stderr: %s'
                                   % (prefix, 'exited' if line is None else 'timed out',
                                      ' | '.join(self.err[-5:])))
            if line and line.startswith(prefix):
                return line

    def say(self, word):
        self.proc.stdin.write(word + '\n')
        self.proc.stdin.flush()

    def stop(self):
        """Bounded: the stop line, 60 s to exit, then killed (by its pid)."""
        try:
            if self.proc.poll() is None:
                self.say('stop')
        except Exception:               # noqa: BLE001 (a pipe already closed)
            pass
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        try:
            self.proc.stdin.close()
        except Exception:               # noqa: BLE001
            pass


# ---------------------------------------------------------------------------
# ZooKeeper side
# ---------------------------------------------------------------------------

def _sequential(name):
    return len(name) >= 10 and name[-10:].isdigit()


def count_nodes(kz, path, depth=2):
    """Sequential (contender, lease) nodes under path, one level of plain
    children (a semaphore's leases/ and locks/) followed."""
    from kazoo.exceptions import NoNodeError
    try:
        names = kz.get_children(path)
    except NoNodeError:
        return 0
    n = 0
    for name in names:
        if _sequential(name):
            n += 1
        elif depth > 1:
            n += count_nodes(kz, path + '/' + name, depth - 1)
    return n


def count_records(kz):
    from kazoo.exceptions import NoNodeError
    try:
        return len(kz.get_children(ROOT + '/%waits'))
    except NoNodeError:
        return 0


def so_md5():
    path = os.path.join(harness._pg_config('--pkglibdir'), 'zklock.so')
    try:
        with open(path, 'rb') as f:
            return hashlib.md5(f.read()).hexdigest()[:12]
    except OSError:
        return None


# ---------------------------------------------------------------------------
# the part
# ---------------------------------------------------------------------------

def run(bench):
    res = bench.results.setdefault('waitcost', {})
    quick = bench.quick
    grid = getattr(bench.args, 'waitcost', None) or os.environ.get('BENCH_WAITCOST') or 'default'
    cases = full_cases() if grid == 'full' else DEFAULT_CASES
    only = os.environ.get('BENCH_WAITCOST_CASES')      # keys, comma separated
    if only:
        cases = [c for c in cases if c[0] in only.split(',')]
    win = getattr(bench.args, 'waitcost_seconds', None) or (8 if quick else 16)
    dt = float(bench.pg.psql("SELECT setting FROM pg_settings WHERE name = 'deadlock_timeout'")) / 1000
    res.update({'grid': grid, 'window_s': win, 'deadlock_timeout_s': dt,
                'settle_s': 8 * dt, 'so_md5_start': so_md5(),
                'zk_servers': bench.zk.n, 'cases': {}, 'order': []})
    tag = time.strftime('%H%M%S')
    pg2 = None
    kz = harness.connect_kazoo(bench.zk.connect_string)
    try:
        for case in cases:
            key, impl, mode, proto, k = case
            if impl == 'zklock' and k > SPLIT_ABOVE and pg2 is None:
                pg2 = harness.PgCluster('bench-waitcost2', base_dir=bench.work, extra_conf={
                    'zklock.hosts': bench.zk.connect_string, 'max_connections': 300})
                pg2.init()
                pg2.start()
                pg2.psql('CREATE EXTENSION zklock')
            t = time.monotonic()
            try:
                row = measure(bench, kz, case, [bench.pg] + ([pg2] if impl == 'zklock'
                                                              and k > SPLIT_ABOVE else []),
                              win, dt, tag)
            except Exception as e:      # noqa: BLE001 (a failed case is a finding)
                harness.log('waitcost %s FAILED: %s' % (key, e))
                bench.failures.append('waitcost %s: %s' % (key, str(e).splitlines()[0]))
                row = {'failed': str(e).splitlines()[0]}
            row.update({'label': label(case), 'impl': impl, 'mode': mode,
                        'protocol': proto, 'k': k,
                        'case_s': round(time.monotonic() - t, 1)})
            res['cases'][key] = row
            res['order'].append(key)
            if 'per_waiter' in row:
                harness.log('waitcost %-14s K=%-3d baseline %.1f/s, waiting %.1f/s: %.1f/s '
                            'beyond pings, %.3f per waiter per second (records %s; %.0f s)'
                            % (key, k, row['idle_rate'], row['wait_rate'], row['beyond'],
                               row['per_waiter'], row.get('records'), row['case_s']))
            wait_clean(kz, 30)
        res['deadlock'] = deadlocks(bench, kz, quick, dt, tag)
    finally:
        kz.stop()
        kz.close()
        if pg2 is not None:
            pg2.stop()
        res['so_md5_end'] = so_md5()
        if res['so_md5_end'] != res['so_md5_start']:
            bench.failures.append('waitcost: zklock.so changed during the part (%s -> %s): '
                                  'someone installed another build'
                                  % (res['so_md5_start'], res['so_md5_end']))


def wait_clean(kz, timeout):
    """Until no wait record is left (the previous case's sessions gone)."""
    try:
        harness.wait_until(lambda: count_records(kz) == 0, timeout, 'an empty %waits')
    except TimeoutError as e:
        harness.log('waitcost: %s (%d records left)' % (e, count_records(kz)))


def window(bench, secs):
    m0 = bench.mntr()
    t0 = time.monotonic()
    time.sleep(secs)
    m1 = bench.mntr()
    t1 = time.monotonic()
    return bench.requests(m0, m1), t1 - t0


def measure(bench, kz, case, clusters, win, dt, tag):
    key, impl, mode, proto, k = case
    name = 'bench-waitcost-%s-%s' % (key, tag)
    row = {'clusters': len(clusters)}
    if impl != 'zklock':
        return measure_peer(bench, kz, impl, k, '/%s-bench/waitcost-%s-%s'
                            % (impl, key, tag), win, dt, row)
    holders = PERMITS if mode == 'semaphore' else 1
    s = Sessions(clusters, k, holders, proto, '%s-%s' % (key, tag))
    parent = ROOT + '/' + harness.encode_resource(name)
    try:
        t = time.monotonic()
        s.open()
        row['connect_s'] = round(time.monotonic() - t, 1)
        time.sleep(5)     # the sessions' start-up traffic over
        reqs, secs = window(bench, win)
        row['idle_requests'], row['idle_s'] = reqs, secs
        timeout = "'%d s'" % WAIT_TIMEOUT_S
        if mode == 'semaphore':
            s.hold('SELECT zk_lock_semaphore(%s, %s)', [name, PERMITS])
            s.ask('SELECT zk_lock_semaphore(%%s, %%s, %s)' % timeout, [name, PERMITS])
        else:
            s.hold('SELECT zk_lock_exclusive(%s)', [name])
            s.ask('SELECT zk_lock_%s(%%s, %s)' % ('shared' if mode == 'shared' else 'exclusive',
                                                  timeout), [name])
        t_ask = time.monotonic()
        harness.wait_until(lambda: count_nodes(kz, parent) >= k + holders
                           and s.still_waiting() == k,
                           60 + k * 0.2, '%d waiters queued on %s' % (k, name), interval=0.5)
        t_q = time.monotonic()
        row['queue_s'] = round(t_q - t_ask, 1)
        try:
            harness.wait_until(lambda: count_records(kz) >= k, dt + 5 + k * 0.05,
                               '%d wait records' % k, interval=0.5)
        except TimeoutError:
            pass
        row['records_before'] = count_records(kz)
        time.sleep(8 * dt)
        reqs, secs = window(bench, win)
        row['wait_requests'], row['wait_s'] = reqs, secs
        row['records'] = count_records(kz)
        row['nodes'] = count_nodes(kz, parent)
        waiting = s.still_waiting()
        if waiting != k:
            raise RuntimeError('%d of %d waiters were no longer waiting at the end of '
                               'the window' % (k - waiting, k))
    finally:
        t = time.monotonic()
        s.close()
        row['close_s'] = round(time.monotonic() - t, 1)
    return rates(row, k)


def measure_peer(bench, kz, impl, k, path, win, dt, row):
    peer = Peer(impl, bench.zk.connect_string, path, k + 1)
    try:
        t = time.monotonic()
        peer.expect('connected', 120 + k * 0.3)
        row['connect_s'] = round(time.monotonic() - t, 1)
        time.sleep(5)     # the sessions' start-up traffic over
        reqs, secs = window(bench, win)
        row['idle_requests'], row['idle_s'] = reqs, secs
        t_ask = time.monotonic()
        peer.say('go')
        peer.expect('waiting', 120)
        harness.wait_until(lambda: count_nodes(kz, path) >= k + 1, 60 + k * 0.2,
                           '%d waiters queued on %s' % (k, path), interval=0.5)
        row['queue_s'] = round(time.monotonic() - t_ask, 1)
        time.sleep(8 * dt)      # as for zklock: the same measurement
        reqs, secs = window(bench, win)
        row['wait_requests'], row['wait_s'] = reqs, secs
        row['nodes'] = count_nodes(kz, path)
        if row['nodes'] != k + 1:
            raise RuntimeError('%d nodes on %s at the end of the window, not %d'
                               % (row['nodes'], path, k + 1))
        peer.say('stop')
        last = peer.expect('clients=', 90)
        row['peer_line'] = last
        if ' granted=0' not in last:
            raise RuntimeError('a waiter was granted while the holder held: ' + last)
    finally:
        peer.stop()
    if peer.proc.returncode != 0:
        raise RuntimeError('%s wait mode exited with %s: %s'
                           % (impl, peer.proc.returncode, ' | '.join(peer.err[-5:])))
    return rates(row, k)


def rates(row, k):
    row['idle_rate'] = row['idle_requests'] / row['idle_s']
    row['wait_rate'] = row['wait_requests'] / row['wait_s']
    row['beyond'] = row['wait_rate'] - row['idle_rate']
    row['per_waiter'] = row['beyond'] / k
    return row


def deadlocks(bench, kz, quick, dt, tag):
    """Two backends, two locks, each holds one and asks for the other; the
    time from the second ask to the 40P01."""
    out = {'at_once': [], 'late': [], 'errors': []}
    zi = harness.ZkInspector(kz, ROOT)
    plan = [('at_once', 0.3)] * (3 if quick else 5) + [('late', 10 * dt)] * (1 if quick else 2)
    for i, (kind, pre) in enumerate(plan):
        x = 'bench-waitcost-dl-%s-%d-x' % (tag, i)
        y = 'bench-waitcost-dl-%s-%d-y' % (tag, i)
        a = harness.Backend(bench.pg, 'waitcost-dl-a')
        b = harness.Backend(bench.pg, 'waitcost-dl-b')
        try:
            a.query('BEGIN')
            a.query('SELECT zk_lock_exclusive(%s)', [x])
            b.query('BEGIN')
            b.query('SELECT zk_lock_exclusive(%s)', [y])
            done = {}
            fa = a.submit("SELECT zk_lock_exclusive(%s, '60 s')", [y])
            fa.add_done_callback(lambda f: done.setdefault('a', time.monotonic()))
            zi.wait_contenders(y, 2, timeout=10)
            time.sleep(pre)
            t0 = time.monotonic()
            fb = b.submit("SELECT zk_lock_exclusive(%s, '60 s')", [x])
            fb.add_done_callback(lambda f: done.setdefault('b', time.monotonic()))
            harness.wait_until(lambda: fa.done() or fb.done(), 30, 'the 40P01',
                               interval=0.005)
            # the victim's error ends its transaction and lets its lock go,
            # so the other call may be granted before this loop looks:
            # the victim is the call that failed, whichever ended first
            time.sleep(0.2)
            codes = {k: getattr(f.exception(), 'pgcode', None) if f.done() else 'waiting'
                     for k, f in (('a', fa), ('b', fb))}
            victims = [k for k, c in codes.items() if c == '40P01']
            if len(victims) != 1:
                raise RuntimeError('%d calls ended with 40P01 (a: %s, b: %s)'
                                   % (len(victims), codes['a'], codes['b']))
            first = victims[0]
            victim, other = (fa, fb) if first == 'a' else (fb, fa)
            vb, ob = (a, b) if first == 'a' else (b, a)
            secs = done[first] - t0
            vb.query('ROLLBACK')
            other.result(timeout=30)        # granted once the victim let go
            ob.query('COMMIT')
            out[kind].append(round(secs, 3))
            harness.log('waitcost deadlock %-7s %d: 40P01 %.3f s after the cycle closed'
                        % (kind, i, secs))
        except Exception as e:          # noqa: BLE001 (recorded; the next one runs)
            harness.log('waitcost deadlock %s %d FAILED: %s' % (kind, i, e))
            out['errors'].append('%s %d: %s' % (kind, i, str(e).splitlines()[0]))
            bench.failures.append('waitcost deadlock %s %d: %s'
                                  % (kind, i, str(e).splitlines()[0]))
        finally:
            a.close()
            b.close()
    for kind in ('at_once', 'late'):
        xs = out[kind]
        out[kind + '_median'] = statistics.median(xs) if xs else None
        out[kind + '_max'] = max(xs) if xs else None
    return out


# ---------------------------------------------------------------------------
# targets and report
# ---------------------------------------------------------------------------

def targets(res):
    wc = res.get('waitcost') or {}
    out = []
    for key in wc.get('order', []):
        x = wc['cases'][key]
        if x.get('impl') != 'zklock':
            continue
        out.append(('waiting: %s, K = %d: requests per waiter per second beyond pings <= %.1f'
                    % (x['label'], x['k'], TARGET_PER_WAITER),
                    x.get('per_waiter'),
                    x.get('per_waiter') is not None and x['per_waiter'] <= TARGET_PER_WAITER))
    dl = wc.get('deadlock') or {}
    xs = (dl.get('at_once') or []) + (dl.get('late') or [])
    if xs or dl.get('errors'):
        out.append(('deadlock: 40P01 within %.0f s of the cycle closing (max, s)'
                    % TARGET_DEADLOCK_S, max(xs) if xs else None,
                    bool(xs) and max(xs) <= TARGET_DEADLOCK_S and not dl.get('errors')))
    return out


def _f(x, spec):
    return '-' if x is None else spec % x


def report(res, L):
    wc = res.get('waitcost') or {}
    if not wc.get('order'):
        return
    L.append('')
    L.append('## The cost of waiting (issue 38)')
    L.append('')
    L.append('K waiters on one lock (a name never used before) behind holders idle in '
             'their transaction (one; a semaphore\'s %d permits held by %d), every waiter '
             'with its own ZooKeeper session, on the %d-server ensemble with default '
             'settings (deadlock_timeout %.0f s, session timeout 10 s). Requests are '
             '`zk_packets_received` of `mntr`, summed over the servers, over %d s windows: '
             'the idle baseline (the same sessions connected, not waiting: their pings) and, '
             'once every waiter is queued (and, for zklock, its wait record published) '
             'and %.0f s more have passed, the waiting window. "Beyond pings" = waiting - '
             'idle; per waiter = that / K. zklock: backends of this bench\'s cluster '
             '(K = 500: spread over two clusters); Curator: one JVM, a CuratorFramework '
             '(session) per waiter; kazoo: one process, a KazooClient per waiter. '
             'Wait records: under `%s/%%waits` at the end of the window. zklock.so %s.'
             % (PERMITS, PERMITS, wc.get('zk_servers', 3), wc.get('deadlock_timeout_s', 1),
                wc.get('window_s', 0), wc.get('settle_s', 8), ROOT,
                wc.get('so_md5_start')))
    L.append('')
    L.append('| waiters | K | idle (pings) req/s | waiting req/s | beyond pings req/s | '
             'per waiter per second | wait records | target ≤ %.1f |' % TARGET_PER_WAITER)
    L.append('|---|---:|---:|---:|---:|---:|---:|---|')
    for key in wc['order']:
        x = wc['cases'][key]
        if 'per_waiter' not in x:
            L.append('| %s | %d | failed: %s | | | | | |' % (x['label'], x['k'], x.get('failed')))
            continue
        met = ('yes' if x['per_waiter'] <= TARGET_PER_WAITER else '**no**') \
            if x['impl'] == 'zklock' else '(reference)'
        L.append('| %s | %d | %.1f | %.1f | %.1f | %.3f | %s | %s |'
                 % (x['label'], x['k'], x['idle_rate'], x['wait_rate'], x['beyond'],
                    x['per_waiter'], x.get('records', '-'), met))
    dl = wc.get('deadlock') or {}
    if dl:
        L.append('')
        L.append('Deadlock: two backends, two locks, each holds one and asks for the other; '
                 'seconds from the second ask (the cycle closes) to the 40P01 (exactly one). '
                 '"At once": the first ask queued 0.3 s before; "late": it had waited %.0f s.'
                 % (10 * wc.get('deadlock_timeout_s', 1)))
        L.append('')
        L.append('| cycle closed | runs | median | max | each |')
        L.append('|---|---:|---:|---:|---|')
        for kind, name in (('at_once', 'at once'), ('late', 'late')):
            xs = dl.get(kind) or []
            L.append('| %s | %d | %s | %s | %s |'
                     % (name, len(xs), _f(dl.get(kind + '_median'), '%.3f'),
                        _f(dl.get(kind + '_max'), '%.3f'), ', '.join('%.3f' % v for v in xs)))
        for e in dl.get('errors') or []:
            L.append('')
            L.append('- failed: ' + e)
    L.append('')
    L.append('| target (issue 38) | measured | met |')
    L.append('|---|---:|---|')
    for name, value, ok in targets(res):
        L.append('| %s | %s | %s |' % (name, _f(value, '%.3f'), 'yes' if ok else '**no**'))
