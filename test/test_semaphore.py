"""Counting semaphores (issue 16): zk_lock_semaphore and its variants.

With real Curator (InterProcessSemaphoreV2, through test/java/LockPeer.java)
and kazoo (Semaphore) clients: SQL sessions on two clusters and the
matching client share one semaphore of 3, for every zklock.protocol, and a
judge counts the holders; a holder killed with SIGKILL frees its lease
after the session timeout; session and transaction scope; a lost lease
fails the COMMIT with 40001; try, timeout, cancel, statement_timeout and
backend exit leave no lease and no internal-mutex node; one waiter at a
time watches the lease list; a semaphore wait publishes no wait record
(deadlock detection does not follow it); bad input; the 1.1 -> 1.2
update keeps the grants on zk_locks.

The judge: every worker reports entering right after its acquire returned
and leaving right before it asks for the release, so each reported
interval lies inside the real hold; more than 3 reported at once would be
more than 3 real holders.
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
from test_multisession import expect_sqlstate, token_of, result

DB = 'zklock_sem'
MAX = 3


def module_setup(ctx):
    ctx.shared.clusters = []
    pg = harness.PgCluster('sem-b', {
        'zklock.hosts': ctx.zk.connect_string,
        'zklock.root': ctx.root,
        'zklock.session_timeout': '%ds' % ctx.session_timeout,
        'zklock.connect_timeout': '%ds' % ctx.connect_timeout,
    }, base_dir=ctx.workdir).start()
    ctx.shared.clusters.append(pg)
    ctx.shared.pg_b = pg
    pg.psql('CREATE DATABASE %s' % DB)
    pg.psql('CREATE EXTENSION zklock', dbname=DB)


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
