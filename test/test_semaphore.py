"""Counting semaphores (issue 16): zk_lock_semaphore and its variants.

With real Curator (InterProcessSemaphoreV2, through test/java/LockPeer.java)
and kazoo (Semaphore) clients: SQL sessions on two clusters and the
matching client share one semaphore of 3, for every zklock.protocol, and a
judge counts the holders; a holder killed with SIGKILL frees its lease
after the session timeout; session and transaction scope; a lost lease
fails the COMMIT with 40001; try, timeout, cancel, statement_timeout and
backend exit leave no lease and no internal-mutex node; one waiter at a
time watches the lease list; a wait for room publishes a wait record of
mode semaphore (deadlock detection follows it); bad input; the 1.1 -> 1.2
update keeps the grants on zk_locks.

The judge: every worker reports entering right after its acquire returned
and leaving right before it asks for the release, so each reported
interval lies inside the real hold; more than 3 reported at once would be
more than 3 real holders.

In short, this module checks: real Curator `InterProcessSemaphoreV2` and
kazoo `Semaphore` clients share a semaphore of 3 with SQL sessions on two
clusters, for each protocol, 240 acquisitions under a judge (never more
than 3, everyone served); a holder killed with SIGKILL (a Curator JVM, a
kazoo process, a backend) frees its lease after the session timeout; a lost
lease fails COMMIT with 40001 in both scopes; try, timeout, cancel,
`statement_timeout`, `lock_timeout` and backend exit leave no lease and no
internal-mutex node; one child watch for five waiters; a wait for room
publishes a record of mode semaphore, gone with the wait; kazoo's recorded
count; `zk_lock_queue`; the 1.1 to 1.2 update keeps grants.
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg2

import harness
from harness import wait_until
from test_interop import CuratorPeer, PEER_SESSION_MS, KAZOO_SESSION_S
from test_multisession import expect_sqlstate, notice_sqlstates, token_of
from test_package import control_version

DB = 'zklock_sem'
MAX = 3


def module_setup(ctx):
    ctx.shared.clusters = []
    ctx.shared.pg_b = ctx.extra_cluster('sem-b', DB)


def module_teardown(ctx):
    for pg in getattr(ctx.shared, 'clusters', []):
        pg.stop()


def sql(ctx, name, protocol='curator-rw', cluster_b=False):
    if cluster_b:
        b = ctx.backend(name, cluster=ctx.shared.pg_b, dbname=DB)
    else:
        b = ctx.backend(name)
    b.query('SET zklock.protocol = %s', [protocol])
    return b


def paths(ctx, protocol, res):
    """(lease parent, internal mutex parent) of semaphore res."""
    base = '%s/%s' % (ctx.root, res)
    if protocol == 'kazoo':
        return base, base + '-__lock__'
    return base + '/leases', base + '/locks'


def children(ctx, path):
    return ctx.kz.get_children(path) if ctx.kz.exists(path) else []


def settle(ctx, protocol, res, leases=0, timeout=30):
    """Wait until the semaphore has `leases` leases and no mutex node."""
    lease_parent, mutex_parent = paths(ctx, protocol, res)
    seen = {}

    def done():
        seen['leases'] = children(ctx, lease_parent)
        seen['mutex'] = children(ctx, mutex_parent)
        return len(seen['leases']) == leases and not seen['mutex']
    try:
        wait_until(done, timeout, 'semaphore %s to settle' % res)
    except TimeoutError:
        raise AssertionError('semaphore %s: expected %d leases and no mutex '
                             'node, found %r' % (res, leases, seen)) from None


class Judge:
    """Counts holders at once, per worker turns, and the highest count."""

    def __init__(self, limit):
        self.limit = limit
        self.mu = threading.Lock()
        self.now = 0
        self.most = 0
        self.turns = {}
        self.errors = []

    def enter(self, who):
        with self.mu:
            self.now += 1
            self.most = max(self.most, self.now)
            self.turns[who] = self.turns.get(who, 0) + 1
            if self.now > self.limit:
                self.errors.append('%s entered with %d holders' % (who, self.now))

    def leave(self):
        with self.mu:
            self.now -= 1


def sql_worker(b, res, judge, rounds, session_scope, stop):
    who = repr(b)
    for i in range(rounds):
        if stop.is_set():
            return
        if session_scope:
            b.query('SELECT zk_session_lock_semaphore(%s, %s, %s)',
                    [res, MAX, '60s'])
        else:
            b.query('BEGIN')
            b.query('SELECT zk_lock_semaphore(%s, %s, %s)', [res, MAX, '60s'])
        judge.enter(who)
        time.sleep(random.uniform(0.005, 0.02))     # the work while held
        judge.leave()
        if session_scope:
            assert b.scalar('SELECT zk_unlock_semaphore(%s)', [res]) is True
        else:
            b.query('COMMIT')


def curator_worker(peer, path, judge, rounds, stop):
    for i in range(rounds):
        if stop.is_set():
            return
        node = peer.acquire('semaphore:%d' % MAX, path, 60000)
        assert node is not None, 'Curator timed out'
        judge.enter(peer.name)
        time.sleep(random.uniform(0.005, 0.02))
        judge.leave()
        peer.release()


def kazoo_worker(ctx, path, judge, rounds, name, stop):
    from kazoo.client import KazooClient
    kz = KazooClient(hosts=ctx.zk.connect_string, timeout=KAZOO_SESSION_S)
    kz.start(timeout=15)
    try:
        for i in range(rounds):
            if stop.is_set():
                return
            sem = kz.Semaphore(path, identifier=name, max_leases=MAX)
            assert sem.acquire(timeout=60), 'kazoo timed out'
            judge.enter(name)
            time.sleep(random.uniform(0.005, 0.02))
            judge.leave()
            sem.release()
    finally:
        kz.stop()
        kz.close()


def run_workers(targets, timeout):
    errors = []
    stop = threading.Event()

    def wrap(fn, args):
        try:
            fn(*args, stop)
        except BaseException as e:      # report, and stop the others
            errors.append('%s: %r' % (fn.__name__, e))
            stop.set()
    threads = [threading.Thread(target=wrap, args=(fn, args), daemon=True)
               for fn, args in targets]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1, timeout - (time.monotonic() - t0)))
    stop.set()
    alive = [t for t in threads if t.is_alive()]
    assert not alive, '%d workers still running after %d s' % (len(alive),
                                                                 timeout)
    assert not errors, errors
    return time.monotonic() - t0


def shared_semaphore(ctx, protocol, session_scope=False, rounds=40):
    res = 'sem-share-%s-%s' % (protocol, 'session' if session_scope else 'xact')
    judge = Judge(MAX)
    a = [sql(ctx, 'sem-a%d' % i, protocol) for i in range(2)]
    b = [sql(ctx, 'sem-b%d' % i, protocol, cluster_b=True) for i in range(2)]
    targets = [(sql_worker, (x, res, judge, rounds, session_scope))
               for x in a + b]
    peers = []
    try:
        path = '%s/%s' % (ctx.root, res)
        if protocol == 'kazoo':
            targets += [(kazoo_worker, (ctx, path, judge, rounds, 'kazoo-%d' % i))
                        for i in range(2)]
        else:
            peers = [CuratorPeer(ctx, 'sem%d' % i) for i in range(2)]
            targets += [(curator_worker, (p, path, judge, rounds))
                        for p in peers]
        took = run_workers(targets, 240)
    finally:
        for p in peers:
            p.stop()
    n = sum(judge.turns.values())
    ctx.log('%s: %d acquisitions by %d workers in %.1f s, at most %d at once'
            % (protocol, n, len(judge.turns), took, judge.most))
    ctx.figure('%s%s: acquisitions per second (6 workers, %d permits)'
               % (protocol, ' session' if session_scope else '', MAX),
               n / took, '/s', '%.0f')
    assert not judge.errors, judge.errors[:5]
    assert judge.most <= MAX
    assert len(judge.turns) == 6 and min(judge.turns.values()) == rounds, \
        judge.turns
    # a semaphore, not a mutex: several held at once
    assert judge.most >= 2, judge.most
    settle(ctx, protocol, res)


def test_shared_with_curator_rw(ctx):
    shared_semaphore(ctx, 'curator-rw')


def test_shared_with_curator_mutex_session_scope(ctx):
    shared_semaphore(ctx, 'curator-mutex', session_scope=True)


def test_shared_with_kazoo(ctx):
    shared_semaphore(ctx, 'kazoo')


# ---------------------------------------------------------------------------
# single-backend behaviour: bad input, re-entrancy, zk_locks, scopes
# ---------------------------------------------------------------------------

def test_bad_input(ctx):
    b = sql(ctx, 'sem-bad')
    for q, args, state in [
            ('SELECT zk_lock_semaphore(NULL, 3)', None, '22004'),
            ('SELECT zk_lock_semaphore(%s, NULL)', ['sem-bad'], '22004'),
            ('SELECT zk_lock_semaphore(%s, 0)', ['sem-bad'], '22023'),
            ('SELECT zk_try_lock_semaphore(%s, -5)', ['sem-bad'], '22023'),
            ('SELECT zk_session_lock_semaphore(%s, 1, %s)',
             ['sem-bad', '-1s'], '22023'),
            ('SELECT zk_lock_semaphore(%s, 3)', [''], '22023'),
            ('SELECT zk_unlock_semaphore(NULL)', None, '22004')]:
        b.query('BEGIN')
        expect_sqlstate(b.submit(q, args), state, 10, q)
        b.query('ROLLBACK')
    settle(ctx, 'curator-rw', 'sem-bad')


def test_reentrant_and_zk_locks(ctx):
    """A second hold of the same semaphore makes no second lease; a
    different max_holders is refused; zk_locks shows mode and max."""
    res = 'sem-reent'
    lease_parent, _ = paths(ctx, 'curator-rw', res)
    b = sql(ctx, 'sem-reent')
    b.query('BEGIN')
    t1 = b.scalar('SELECT zk_lock_semaphore(%s, 3)', [res])
    t2 = b.scalar('SELECT zk_lock_semaphore(%s, 3)', [res])
    assert t1 == t2 and t1 > 0
    assert len(children(ctx, lease_parent)) == 1
    assert b.scalar('SELECT zk_try_lock_semaphore(%s, 3)', [res]) is True
    rows = b.query('SELECT mode, scope, count, max_holders, state, '
                   'fencing_token, node FROM zk_locks WHERE resource = %s',
                   [res])
    assert len(rows) == 1, rows
    mode, scope, count, mx, state, tok, node = rows[0]
    assert (mode, scope, count, mx, state, tok) == \
        ('semaphore', 'transaction', 3, 3, 'held', t1), rows
    assert node.startswith(lease_parent + '/_c_') and '-lease-' in node, node
    assert ctx.kz.exists(node).czxid == t1
    b.query('SAVEPOINT s')
    expect_sqlstate(b.submit('SELECT zk_lock_semaphore(%s, 4)', [res]),
                    '22023', 10, 'another max_holders')
    b.query('ROLLBACK TO SAVEPOINT s')
    b.query('COMMIT')
    settle(ctx, 'curator-rw', res)
    # a lock on the same resource is another thing: both held at once
    b.query('BEGIN')
    b.scalar('SELECT zk_lock_semaphore(%s, 1)', [res])
    b.scalar('SELECT zk_lock_exclusive(%s)', [res])
    assert sorted(r[0] for r in b.query('SELECT mode FROM zk_locks')) == \
        ['exclusive', 'semaphore']
    b.query('COMMIT')
    settle(ctx, 'curator-rw', res)


def test_scopes_and_unlock(ctx):
    res = 'sem-scope'
    lease_parent, _ = paths(ctx, 'curator-rw', res)
    b = sql(ctx, 'sem-scope')
    b.query('BEGIN')
    b.scalar('SELECT zk_session_lock_semaphore(%s, 2)', [res])
    b.query('ROLLBACK')                 # session scope survives
    assert len(children(ctx, lease_parent)) == 1
    b.query('BEGIN')
    b.query('SAVEPOINT s')
    assert b.scalar('SELECT zk_try_lock_semaphore(%s, 2)', [res]) is True
    b.query('ROLLBACK TO SAVEPOINT s')  # the xact hold goes, the node stays
    b.query('COMMIT')
    assert len(children(ctx, lease_parent)) == 1
    assert b.scalar('SELECT zk_unlock_semaphore(%s)', [res]) is True
    settle(ctx, 'curator-rw', res)
    got = notice_sqlstates(ctx, "SELECT zk_unlock_semaphore('%s')" % res)
    assert len(got) == 1 and got[0][:2] == ('WARNING', '01000') and \
        "you don't own a session-level semaphore" in got[0][2], got
    b.scalar('SELECT zk_session_lock_semaphore(%s, 2)', [res])
    b.scalar('SELECT zk_session_lock_semaphore(%s, 2)', [res])
    b.query('SELECT zk_unlock_all()')
    settle(ctx, 'curator-rw', res)


def test_try_timeout_and_release_order(ctx):
    """Full semaphore: try is false at once, a timeout is 55P03, and a
    waiter gets the lease a holder gives back; nothing stays behind."""
    for protocol in ('curator-rw', 'kazoo'):
        res = 'sem-full-%s' % protocol
        holders = [sql(ctx, 'sem-h%d' % i, protocol) for i in range(2)]
        w = sql(ctx, 'sem-w', protocol)
        for h in holders:
            h.query('BEGIN')
            token_of(h.submit('SELECT zk_lock_semaphore(%s, 2)', [res]), 10)
        w.query('BEGIN')
        assert w.scalar('SELECT zk_try_lock_semaphore(%s, 2)', [res]) is False
        settle(ctx, protocol, res, leases=2)
        t0 = time.monotonic()
        expect_sqlstate(w.submit('SELECT zk_lock_semaphore(%s, 2, %s)',
                                 [res, '300ms']), '55P03', 10, 'timeout')
        assert time.monotonic() - t0 >= 0.3
        w.query('ROLLBACK')
        settle(ctx, protocol, res, leases=2)
        w.query('BEGIN')
        fut = w.submit('SELECT zk_lock_semaphore(%s, 2)', [res])
        ctx.wait_state(w)
        holders[0].query('COMMIT')
        token_of(fut, 20, 'waiter after a release')
        settle(ctx, protocol, res, leases=2)
        w.query('COMMIT')
        holders[1].query('COMMIT')
        settle(ctx, protocol, res)


def test_give_ups_leave_nothing(ctx):
    """cancel, statement_timeout, lock_timeout and backend exit while
    waiting for the lease (or for the internal mutex) leave no lease and
    no internal-mutex node; the holder is unaffected."""
    for protocol in ('curator-rw', 'kazoo'):
        res = 'sem-giveup-%s' % protocol
        h = sql(ctx, 'sem-holder', protocol)
        h.query('BEGIN')
        token_of(h.submit('SELECT zk_lock_semaphore(%s, 1)', [res]), 10)
        # two waiters: the first waits for the lease, the second for the
        # internal mutex
        ws = [sql(ctx, 'sem-gw%d' % i, protocol) for i in range(2)]
        futs = []
        for w in ws:
            futs.append(w.submit('SELECT zk_lock_semaphore(%s, 1)', [res]))
            ctx.wait_state(w)
        _, mutex_parent = paths(ctx, protocol, res)
        wait_until(lambda: len(children(ctx, mutex_parent)) == 2, 10,
                   'both waiters in the internal mutex queue')
        ws[1].cancel()
        expect_sqlstate(futs[1], '57014', 10, 'cancelled mutex waiter')
        ws[0].cancel()
        expect_sqlstate(futs[0], '57014', 10, 'cancelled lease waiter')
        settle(ctx, protocol, res, leases=1)
        ws[0].query("SET statement_timeout = '200ms'")
        expect_sqlstate(ws[0].submit('SELECT zk_lock_semaphore(%s, 1)', [res]),
                        '57014', 10, 'statement_timeout')
        ws[0].query('RESET statement_timeout')
        ws[0].query("SET lock_timeout = '200ms'")
        expect_sqlstate(ws[0].submit('SELECT zk_lock_semaphore(%s, 1)', [res]),
                        '55P03', 10, 'lock_timeout')
        ws[0].query('RESET lock_timeout')
        settle(ctx, protocol, res, leases=1)
        fut = ws[1].submit('SELECT zk_lock_semaphore(%s, 1)', [res])
        ctx.wait_state(ws[1])
        harness.terminate_backend(ctx.pg, ws[1].pid)
        try:
            fut.result(10)
        except psycopg2.Error:
            pass
        settle(ctx, protocol, res, leases=1)
        h.query('COMMIT')
        settle(ctx, protocol, res)


def test_one_waiter_watches_the_leases(ctx):
    """Herd-free: with a full semaphore and five waiters, one child watch
    (the internal mutex's holder, on the lease list) and one data watch
    per other waiter (each on its predecessor in the mutex queue), plus
    one on the own mutex node of the waiter right behind the holder (one
    contender ahead: it watches its own node too, doc/02-how-it-works.md):
    five; six when the holder itself was granted the mutex that
    way, as its own-node watch stays armed while it holds.  (Which one
    depends on how the waiters' first counts, each with no room, and
    their second rounds interleave.)  The holder runs with
    zklock.cancel_on_loss off, so that its lease keeps no watch of its own
    (test_failfast.py covers that watch)."""
    res = 'sem-herd'
    base = ctx.zk.watch_counts()
    h = sql(ctx, 'sem-herd-h')
    h.query('SET zklock.cancel_on_loss = off')
    h.query('BEGIN')
    token_of(h.submit('SELECT zk_lock_semaphore(%s, 1)', [res]), 10)
    ws = [sql(ctx, 'sem-herd-w%d' % i) for i in range(5)]
    futs = []
    for w in ws:
        w.query('BEGIN')
        futs.append(w.submit('SELECT zk_lock_semaphore(%s, 1)', [res]))
        ctx.wait_state(w)
    seen = {}

    def counted():
        c = ctx.zk.watch_counts()
        seen['c'] = c
        return (c['child'] - base['child'] == 1 and
                c['data'] - base['data'] in (5, 6))
    try:
        wait_until(counted, 10, 'one child watch and five or six data '
                   'watches')
    except TimeoutError:
        raise AssertionError('watches: %r (before: %r)' % (seen, base)) \
            from None
    if seen['c']['data'] - base['data'] == 6:
        # the sixth: the mutex holder's watch on its own node
        _, mutex_parent = paths(ctx, 'curator-rw', res)
        holder = '%s/%s' % (mutex_parent, min(children(ctx, mutex_parent),
                                              key=lambda n: n[-10:]))
        owner = ctx.kz.exists(holder).ephemeralOwner
        watchers = ctx.zk.watches_by_path().get(holder, set())
        assert owner in watchers, ('six data watches, and the mutex '
                                   'holder %s (session %#x) does not watch '
                                   'its own node: %r'
                                   % (holder, owner, watchers))
    ctx.log('data watches: %d' % (seen['c']['data'] - base['data']))
    h.query('COMMIT')
    # in whatever order: a waiter that found no room on its first count
    # queues again behind the others (doc/01-sql-reference.md, Semaphores)
    pending = list(zip(ws, futs))
    while pending:
        wait_until(lambda: any(f.done() for _, f in pending), 30,
                   'one of %d waiters to be granted' % len(pending))
        for w, f in [p for p in pending if p[1].done()]:
            token_of(f, 1, 'a waiter')
            w.query('COMMIT')
            pending.remove((w, f))
    settle(ctx, 'curator-rw', res)


def test_semaphore_wait_publishes_a_wait_record(ctx):
    """Deadlock detection follows a wait for room (issue 30): past
    deadlock_timeout the waiter publishes a record of mode semaphore that
    names the leases' parent; with no cycle it ends by its own timeout
    (55P03, no 40P01) and its record goes with the wait."""
    res = 'sem-dl'
    waits = '%s/%%waits' % ctx.root
    h = sql(ctx, 'sem-dl-h')
    h.query('BEGIN')
    token_of(h.submit('SELECT zk_lock_semaphore(%s, 1)', [res]), 10)
    w = sql(ctx, 'sem-dl-w')
    w.query("SET deadlock_timeout = '100ms'")
    before = ctx.kz.exists(waits)
    before = before.cversion if before else 0
    w.query('BEGIN')
    fw = w.submit('SELECT zk_lock_semaphore(%s, 1, %s)', [res, '1500ms'])

    def record():
        for name in (ctx.kz.get_children(waits) if ctx.kz.exists(waits) else []):
            try:
                data = ctx.kz.get(waits + '/' + name)[0]
            except Exception:
                continue
            if b' pid=%d ' % w.pid in data:
                return data
        return None
    wait_until(lambda: record() is not None, 10, "the waiter's record")
    data = record()
    assert b' mode=semaphore ' in data and b' leases=' in data, data
    expect_sqlstate(fw, '55P03', 10, 'semaphore wait past deadlock_timeout')
    wait_until(lambda: record() is None, 10, 'the record gone with the wait')
    assert ctx.kz.exists(waits).cversion - before == 2, 'one create, one delete'
    w.query('ROLLBACK')
    h.query('COMMIT')
    settle(ctx, 'curator-rw', res)


def test_kazoo_count_recorded(ctx):
    """kazoo's layout: the semaphore node is PERSISTENT and records
    max_leases; asking with another count is 22023, as kazoo raises."""
    res = 'sem-kz-count'
    path = '%s/%s' % (ctx.root, res)
    b = sql(ctx, 'sem-kzc', 'kazoo')
    b.query('BEGIN')
    b.scalar('SELECT zk_lock_semaphore(%s, 3)', [res])
    data, stat = ctx.kz.get(path)
    assert data == b'3' and stat.ephemeralOwner == 0, (data, stat)
    b.query('COMMIT')
    b.query('BEGIN')
    e = expect_sqlstate(b.submit('SELECT zk_lock_semaphore(%s, 2)', [res]),
                        '22023', 10, 'another count')
    assert 'max_leases 3' in str(e), e
    b.query('ROLLBACK')
    sem = ctx.kz.Semaphore(path, max_leases=2)
    try:
        sem.acquire(timeout=5)
        raise AssertionError('kazoo accepted max_leases 2 over a recorded 3')
    except ValueError:
        pass
    settle(ctx, 'kazoo', res)
    ctx.kz.delete(path)


# ---------------------------------------------------------------------------
# failures: a killed holder, a lost lease
# ---------------------------------------------------------------------------

KAZOO_HOLDER = r'''
import sys, time
from kazoo.client import KazooClient
kz = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
kz.start(timeout=15)
sem = kz.Semaphore(sys.argv[2], identifier='kazoo-holder', max_leases=1)
assert sem.acquire(timeout=30)
print('held', flush=True)
time.sleep(600)
'''


def killed_holder_frees(ctx, protocol, start_holder, timeout_s):
    res = 'sem-kill-%s' % protocol
    path = '%s/%s' % (ctx.root, res)
    lease_parent, _ = paths(ctx, protocol, res)
    kill = start_holder(path)
    try:
        held = children(ctx, lease_parent)
        assert len(held) == 1, held
        w = sql(ctx, 'sem-kill-w', protocol)
        w.query('BEGIN')
        fut = w.submit('SELECT zk_lock_semaphore(%s, 1)', [res])
        ctx.wait_state(w)
        t0 = time.monotonic()
        kill()
        token_of(fut, timeout_s + 30, 'waiter after the holder was killed')
        took = time.monotonic() - t0
    finally:
        kill()
    now = children(ctx, lease_parent)
    assert held[0] not in now and len(now) == 1, (held, now)
    ctx.figure('%s holder killed -> waiter holds' % protocol, took, 's',
               '%.1f')
    # the dead session's lease went with its session, not before
    assert took >= timeout_s * 0.5, took
    w.query('COMMIT')
    settle(ctx, protocol, res)


def test_killed_curator_holder(ctx):
    peer = CuratorPeer(ctx, 'sem-kill')

    def start(path):
        assert peer.acquire('semaphore:1', path, 30000) is not None

        def kill():
            if peer.proc.poll() is None:
                os.kill(peer.proc.pid, signal.SIGKILL)
                peer.proc.wait(10)
            peer.stop()
        return kill
    killed_holder_frees(ctx, 'curator-rw', start, PEER_SESSION_MS / 1000.0)


def test_killed_kazoo_holder(ctx):
    def start(path):
        p = subprocess.Popen([sys.executable, '-c', KAZOO_HOLDER,
                              ctx.zk.connect_string, path,
                              str(KAZOO_SESSION_S)],
                             stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
        line = p.stdout.readline().strip()
        assert line == 'held', line

        def kill():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        return kill
    killed_holder_frees(ctx, 'kazoo', start, KAZOO_SESSION_S)


def test_killed_backend_holder(ctx):
    """A backend killed with SIGKILL (its cluster restarts, its ZooKeeper
    session is left to expire) frees its lease after the session timeout;
    a backend of the other cluster gets it."""
    def start(path):
        h = sql(ctx, 'sem-kill-h', cluster_b=True)
        h.query('BEGIN')
        h.scalar('SELECT zk_lock_semaphore(%s, 1)',
                 [path[len(ctx.root) + 1:]])
        pid = h.pid
        done = []

        def kill():
            if not done:
                done.append(1)
                os.kill(pid, signal.SIGKILL)
        return kill
    killed_holder_frees(ctx, 'curator-rw', start, ctx.session_timeout)
    pg_b = ctx.shared.pg_b
    wait_until(lambda: pg_b.psql('SELECT 1', dbname=DB) is not None, 60,
               'cluster sem-b back after the crash')


def test_lost_lease_fails_commit(ctx):
    """A lease deleted by another client while held: COMMIT fails with
    40001 (transaction scope); in session scope every commit fails until
    zk_unlock_semaphore acknowledges it."""
    for protocol in ('curator-rw', 'kazoo'):
        res = 'sem-lost-%s' % protocol
        b = sql(ctx, 'sem-lost', protocol)
        b.query('BEGIN')
        b.scalar('SELECT zk_lock_semaphore(%s, 2)', [res])
        node = b.scalar('SELECT node FROM zk_locks WHERE resource = %s', [res])
        ctx.kz.delete(node)
        e = expect_sqlstate(b.submit('COMMIT'), '40001', 20, 'COMMIT')
        assert 'semaphore zklock on "%s" was lost' % res in str(e), e
        b.query('ROLLBACK')

        b.scalar('SELECT zk_session_lock_semaphore(%s, 2)', [res])
        node = b.scalar('SELECT node FROM zk_locks WHERE resource = %s', [res])
        ctx.kz.delete(node)
        b.query('BEGIN')
        e = expect_sqlstate(b.submit('COMMIT'), '40001', 20, 'COMMIT')
        assert 'zk_unlock_semaphore' in str(e), e
        b.query('ROLLBACK')
        assert b.scalar('SELECT zk_unlock_semaphore(%s)', [res]) is True
        b.query('BEGIN')
        b.query('COMMIT')
        settle(ctx, protocol, res)


def test_update_from_1_1_keeps_grants(ctx):
    """ALTER EXTENSION zklock UPDATE from 1.1: the semaphore functions
    come (EXECUTE revoked from PUBLIC, as in a fresh install), zk_locks
    gains max_holders, and the grants given on zk_locks() and on the view
    (to a role with grant option, and to PUBLIC) are kept."""
    pg = ctx.shared.pg_b
    role = 'zklock_sem_viewer'
    for db in ('zklock_upd12', 'zklock_fresh12'):
        pg.psql('DROP DATABASE IF EXISTS %s' % db)
        pg.psql('CREATE DATABASE %s' % db)
    pg.psql('DROP ROLE IF EXISTS %s' % role)
    pg.psql('CREATE ROLE %s' % role)
    pg.psql("CREATE EXTENSION zklock VERSION '1.1'", dbname='zklock_upd12')
    for g in ('GRANT EXECUTE ON FUNCTION zk_locks() TO %s WITH GRANT OPTION'
              % role,
              'GRANT EXECUTE ON FUNCTION zk_locks() TO PUBLIC',
              'GRANT SELECT ON zk_locks TO %s WITH GRANT OPTION' % role,
              'GRANT SELECT ON zk_locks TO PUBLIC'):
        pg.psql(g, dbname='zklock_upd12')
    fn_acl = ("SELECT array_agg(coalesce(r.rolname, 'PUBLIC') || ':' || "
              "a.is_grantable ORDER BY 1) FROM pg_proc p, aclexplode(p.proacl) a "
              "LEFT JOIN pg_roles r ON r.oid = a.grantee "
              "WHERE p.oid = 'zk_locks()'::regprocedure "
              "AND a.grantee <> p.proowner")
    view_acl = ("SELECT array_agg(coalesce(r.rolname, 'PUBLIC') || ':' || "
                "a.privilege_type || ':' || a.is_grantable ORDER BY 1) "
                "FROM pg_class c, aclexplode(c.relacl) a "
                "LEFT JOIN pg_roles r ON r.oid = a.grantee "
                "WHERE c.oid = 'zk_locks'::regclass "
                "AND a.grantee <> c.relowner")
    pg.psql('ALTER EXTENSION zklock UPDATE', dbname='zklock_upd12')
    pg.psql('CREATE EXTENSION zklock', dbname='zklock_fresh12')
    q = ("SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid) "
         "|| ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p "
         "JOIN pg_depend d ON d.objid = p.oid JOIN pg_extension e "
         "ON e.oid = d.refobjid AND e.extname = 'zklock' ORDER BY 1")
    sem_acl = ("SELECT p.oid::regprocedure::text, p.proacl::text FROM pg_proc p "
               "WHERE p.proname LIKE '%semaphore%' ORDER BY 1")
    upd = ctx.backend('sem-upd', cluster=pg, dbname='zklock_upd12')
    fresh = ctx.backend('sem-fresh', cluster=pg, dbname='zklock_fresh12')
    try:
        assert upd.scalar("SELECT extversion FROM pg_extension "
                          "WHERE extname = 'zklock'") == control_version()
        assert upd.query(q) == fresh.query(q)
        assert upd.query(sem_acl) == fresh.query(sem_acl)
        assert len(upd.query(sem_acl)) == 5
        assert sorted(upd.scalar(fn_acl)) == ['PUBLIC:false', role + ':true']
        assert sorted(upd.scalar(view_acl)) == \
            ['PUBLIC:SELECT:false', role + ':SELECT:true']
        cols = [r[0] for r in upd.query(
            "SELECT attname FROM pg_attribute WHERE attrelid = "
            "'zk_locks'::regclass AND attnum > 0 ORDER BY attnum")]
        # (max_holders came in 1.2; 1.9 added the revocation's two after it)
        assert cols[-3:] == ['max_holders', 'revoke_requested_at',
                             'revoke_requested_by'], cols
        upd.query('SET ROLE %s' % role)
        assert upd.query('SELECT * FROM zk_locks') == []
        expect_sqlstate(upd.submit("SELECT zk_try_lock_semaphore('x', 1)"),
                        '42501', 10, 'semaphore without a grant')
        upd.query('RESET ROLE')
    finally:
        upd.close()
        fresh.close()
        for db in ('zklock_upd12', 'zklock_fresh12'):
            pg.psql('DROP DATABASE %s WITH (FORCE)' % db)
        pg.psql('DROP ROLE %s' % role)


def test_lock_queue_shows_a_semaphore(ctx):
    """zk_lock_queue on a semaphore: its leases (holding), then the
    waiters queued on its internal mutex, each naming whom it waits for;
    in Curator's layout the mutex holder's lease is still counting."""
    for protocol in ('curator-rw', 'kazoo'):
        res = 'sem-queue-%s' % protocol
        h = sql(ctx, 'sem-q-h', protocol)
        h.query('BEGIN')
        token_of(h.submit('SELECT zk_lock_semaphore(%s, 1)', [res]), 10)
        ws = [sql(ctx, 'sem-q-w%d' % i, protocol) for i in range(2)]
        sessions = {}
        for name, b in [('h', h)] + [('w%d' % i, w) for i, w in enumerate(ws)]:
            b.query('SELECT count(*) FROM zk_lock_queue(%s)', [res])  # connect
            sessions[b.scalar('SELECT session_id FROM zk_status()')] = name
        futs = []
        lease_parent, mutex_parent = paths(ctx, protocol, res)
        for i, w in enumerate(ws):
            w.query('BEGIN')
            futs.append(w.submit('SELECT zk_lock_semaphore(%s, 1)', [res]))
            # queued in this order: a waiter shows the wait event during
            # its first round trips too (kazoo's semaphore node), so wait
            # for its node on the internal mutex before the next one
            wait_until(lambda: len(children(ctx, mutex_parent)) == i + 1, 10,
                       'waiter %d on the internal mutex' % i)
        # and for the rest of the nodes: in Curator's layout, until the
        # mutex's holder has its lease (the counting waiter's second round,
        # which keeps the mutex and waits); the counts alone also match a
        # moment of the first rounds' churn, when a waiter's optimistic
        # lease is still there and the holder's not yet (seen on a loaded
        # machine: the queue read next showed the holder without a lease)
        n_leases = 1 if protocol == 'kazoo' else 2

        def owner(path):
            st = ctx.kz.exists(path)
            return st.owner_session_id if st else None

        def queued():
            mutex = sorted(children(ctx, mutex_parent),
                           key=lambda name: name[-10:])
            leases = children(ctx, lease_parent)
            if len(mutex) != 2 or len(leases) != n_leases:
                return False
            if protocol == 'kazoo':
                return True
            holder = owner('%s/%s' % (mutex_parent, mutex[0]))
            return holder is not None and holder in \
                [owner('%s/%s' % (lease_parent, x)) for x in leases]
        wait_until(queued, 10, 'both waiters queued, the mutex\'s holder '
                   'counting with its lease')
        rows = h.query('SELECT position, mode, node, holding, waits_for, '
                       'session_id, owner FROM zk_lock_queue(%s) '
                       'ORDER BY position', [res])
        got = [(sessions.get(r[5]), r[1], r[3],
                None if r[4] is None else
                sessions.get(next(x[5] for x in rows if x[2] == r[4])))
               for r in rows]
        if protocol == 'kazoo':
            want = [('h', 'semaphore', True, None),
                    ('w0', 'semaphore', False, None),
                    ('w1', 'semaphore', False, 'w0')]
            assert rows[0][2] == h.scalar(
                'SELECT node FROM zk_locks').rsplit('/', 1)[1], rows
        else:
            # Curator's layout: which waiter ends up holding the internal
            # mutex (and counting, its lease shown) is a race.  The first
            # gives its optimistic lease and the mutex back when it finds
            # no room and queues again, and the second, granted the mutex
            # meanwhile, does the same; the protocol promises no order
            # among waiters that found the semaphore full (the manual).  What
            # the view must show is the same either way.
            first = sessions.get(rows[1][5])
            other = 'w1' if first == 'w0' else 'w0'
            want = [('h', 'semaphore', True, None),
                    (first, 'semaphore', False, None),
                    (first, 'semaphore', False, None),
                    (other, 'semaphore', False, first)]
            assert first in ('w0', 'w1'), rows
            assert rows[0][2].startswith('leases/') and \
                rows[2][2].startswith('locks/'), rows
        assert got == want, (got, rows)
        assert all(r[6].startswith('zklock ') for r in rows), rows
        h.query('COMMIT')
        # one lease: the waiter at the head of the queue (kazoo: w0; Curator:
        # the one holding the internal mutex) is granted first, the other
        # only after it commits
        head = 'w0' if protocol == 'kazoo' else first
        for name in (head, 'w1' if head == 'w0' else 'w0'):
            i = int(name[1])
            token_of(futs[i], 30, 'the lease of %s, next in the queue' % name)
            ws[i].query('COMMIT')
        settle(ctx, protocol, res)
