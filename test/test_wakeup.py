"""
No reply waits for the client's receive timeout (issue 27).

ZooKeeper 3.8.0, Debian 12's server, has a lost wake-up in its
CommitProcessor (ZOOKEEPER-4537, fixed in 3.8.1 and 3.9.0): a request or
a commit that reaches the processor between its unlocked check of the
queues and its wait() is not processed until some other request or
commit arrives on that server.  libzookeeper sends no ping while a reply
is outstanding, so on a quiet connection nothing arrives, and the client
gives up on the connection at two thirds of the session timeout (1.33 s
here): a lock call, a COMMIT or -- for a release's fire-and-forget
delete -- the next holder's grant freezes for that long, and
zk_status().reconnects counts one.  zklock sends requests back to back
(the commit check's sync and exists, a release's delete followed by the
next create), which is what loses the wake-up; about one cycle in
3,000-5,000 stalled before the fix.

The fix is the session layer's reply nudge (src/session/nudge.c).  These
tests run enough cycles on a 3-server ensemble that, without it
(zklock.reply_nudge_delay = 0), some stall is all but certain, and
require of every cycle and every handoff a time well under the receive
timeout, and no connection that timed out:

  * one pgbench client taking and releasing a lock it never waits for,
  * CONTENDERS pgbench clients on one lock,
  * handoffs: one backend releases while another waits, timed from the
    releasing COMMIT's return to the waiter's grant.

test_proxy.py's test m shows the same, deterministically, at each place
zklock waits for a reply: a proxy plays a server that loses every
wake-up.

The ensemble syncs its transaction log (forceSync=yes), as a production
one does: the longer a commit takes, the wider the race's window.
"""

import glob
import os
import re
import subprocess
import tempfile
import time

import harness
from harness import wait_until

TIMEOUT = 300                   # seconds per test (a pytest-timeout bound)

DB = 'zklock_wakeup'
ROOT = '/zklock'
SESSION_TIMEOUT_MS = 2000       # libzookeeper gives up after 2/3 of it
RECV_TIMEOUT_MS = SESSION_TIMEOUT_MS * 2 // 3
# No cycle may come near the receive timeout: a stall that a nudge ends
# costs the nudge's delay (tens of ms); one that nothing ends costs the
# whole receive timeout, or, with other clients on the server, until one
# of them sends its ping (a third of the session timeout: 0.67 s).
BOUND_MS = 500

# pgbench drives the cycles: a C client with no pause between statements,
# as a batch job's loop (a Python loop, with its own gaps, met the race
# about five times less often).
CYCLE_SQL = "BEGIN;\nSELECT zk_lock_exclusive('%s');\nCOMMIT;\n"
UNCONTENDED_S = 60              # about 27,000 cycles
CONTENDERS = 4
CONTENDED_S = 60                # about 24,000 cycles in all
HANDOFFS = 2500
RUN_LIMIT_S = 90                # the handoff loop stops by then
# libzookeeper's line when it gives up on a connection (in the server log:
# the backends' stderr)
TIMED_OUT_RE = re.compile(r'ZOO_ERROR.*timed out')


def module_setup(ctx):
    sh = ctx.shared
    sh.clusters = []
    # the server's full JIT, as in production (the harness default, the
    # client JIT alone, starts faster but runs other timings)
    sh.ens = harness.ZooKeeper(n=3, base_dir=ctx.workdir, name='wakeup',
                               force_sync=True,
                               jvm_opts=['-XX:TieredStopAtLevel=4'])
    sh.ens.start(timeout=120)
    sh.pg = harness.PgCluster('wakeup', {
        'zklock.hosts': sh.ens.connect_string,
        'zklock.root': ROOT,
        'zklock.session_timeout': '%dms' % SESSION_TIMEOUT_MS,
    }, base_dir=ctx.workdir)
    sh.pg.start()
    sh.clusters.append(sh.pg)
    sh.pg.psql('CREATE DATABASE %s' % DB)
    sh.pg.psql('CREATE EXTENSION zklock', dbname=DB)


def module_teardown(ctx):
    errors = harness.stop_shared(ctx.shared, ('pg', 'ens'))
    assert not errors, 'teardown: %s' % '; '.join(errors)


def quantiles(ms):
    s = sorted(ms)

    def q(p):
        return s[min(len(s) - 1, int(p * len(s)))]
    return {'n': len(s), 'p50': q(0.5), 'p99': q(0.99), 'p999': q(0.999),
            'max': s[-1]}


def report(ctx, what, ms):
    q = quantiles(ms)
    ctx.figure('%s: %d, p50 / p99 / p99.9 / max' % (what, q['n']),
               '%.1f / %.1f / %.1f / %.1f' % (q['p50'], q['p99'], q['p999'],
                                             q['max']), 'ms')
    return q


def check(what, ms, stamps, reconnected):
    slow = [(round(m), round(t, 3)) for m, t in zip(ms, stamps)
            if m > BOUND_MS]
    assert not slow and not reconnected, (
        '%s: %d of %d over %d ms (ms, at s): %r; %d connection(s) timed '
        'out %r; the receive timeout is %d ms'
        % (what, len(slow), len(ms), BOUND_MS, slow[:10], len(reconnected),
           reconnected[:3], RECV_TIMEOUT_MS))


def pgbench_cycles(ctx, res, clients, seconds):
    """pgbench -c clients -T seconds running the lock cycle on res, each
    transaction logged: (latencies in ms, start offsets in s, the server
    log's 'timed out' lines written meanwhile)."""
    sh = ctx.shared
    work = tempfile.mkdtemp(prefix='pgbench-', dir=ctx.workdir)
    script = os.path.join(work, 'cycle.sql')
    with open(script, 'w') as f:
        f.write(CYCLE_SQL % res)
    offset = sh.pg.log_size()
    r = subprocess.run(
        [harness.PG_BIN + '/pgbench', '-n', '-h', sh.pg.host,
         '-p', str(sh.pg.port), '-U', 'postgres', '-c', str(clients),
         '-j', str(clients), '-T', str(seconds), '-f', script, '-l',
         '--log-prefix', os.path.join(work, 'tx'), DB],
        cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=seconds + 120)
    assert r.returncode == 0, 'pgbench failed (%d):\n%s%s' % (
        r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    rows = []
    for path in glob.glob(os.path.join(work, 'tx*')):
        with open(path) as f:
            for line in f:
                # client_id transaction_no time script_no time_epoch time_us
                p = line.split()
                end = int(p[4]) + int(p[5]) / 1e6
                rows.append((end - int(p[2]) / 1e6, int(p[2]) / 1000.0))
    assert rows, 'pgbench logged no transaction:\n%s' % r.stdout[-2000:]
    rows.sort()
    t0 = rows[0][0]
    timed_out = [ln for ln in sh.pg.log_since(offset).splitlines()
                 if TIMED_OUT_RE.search(ln)]
    return [ms for _, ms in rows], [t - t0 for t, _ in rows], timed_out


def test_uncontended_cycles_never_stall(ctx):
    ms, stamps, timed_out = pgbench_cycles(ctx, 'wakeup-u', 1, UNCONTENDED_S)
    report(ctx, 'uncontended cycles', ms)
    assert len(ms) >= 5000, 'only %d cycles in %d s' % (len(ms),
                                                        UNCONTENDED_S)
    check('uncontended cycles', ms, stamps, timed_out)


def test_contended_cycles_never_stall(ctx):
    ms, stamps, timed_out = pgbench_cycles(ctx, 'wakeup-c', CONTENDERS,
                                           CONTENDED_S)
    report(ctx, 'contended cycles (%d clients)' % CONTENDERS, ms)
    assert len(ms) >= 5000, 'only %d cycles in %d s' % (len(ms), CONTENDED_S)
    check('contended cycles', ms, stamps, timed_out)


def test_handoffs_never_stall(ctx):
    """Two backends pass the lock back and forth: the holder commits
    while the other waits in its lock call; the handoff is the time from
    the holder's COMMIT returning to the waiter's lock call returning.
    A release's delete is sent without waiting for its reply, so a stall
    of it shows only here, in the waiter."""
    sh = ctx.shared
    res = 'wakeup-h'
    pair = [ctx.backend('holder-%d' % i, cluster=sh.pg, dbname=DB)
            for i in range(2)]
    watcher = sh.pg.connect(dbname=DB)
    offset = sh.pg.log_size()

    def waiting(pid):
        with watcher.cursor() as cur:
            cur.execute("SELECT wait_event_type FROM pg_stat_activity "
                        "WHERE pid = %s", [pid])
            row = cur.fetchone()
        return row is not None and row[0] == 'Extension'

    try:
        pair[0].query('BEGIN')
        pair[0].query('SELECT zk_lock_exclusive(%s)', [res])
        before = [pair[1].scalar('SELECT reconnects FROM zk_status()'),
                  pair[0].scalar('SELECT reconnects FROM zk_status()')]
        t_start = time.monotonic()
        deadline = t_start + RUN_LIMIT_S
        ms, stamps = [], []
        holder, waiter = pair
        while len(ms) < HANDOFFS and time.monotonic() < deadline:
            waiter.query('BEGIN')
            fut = waiter.submit('SELECT zk_lock_exclusive(%s)', [res])
            # the waiter is in its lock call (queued, or about to be)
            wait_until(lambda: waiting(waiter.pid) or fut.done(), 30,
                       'the waiter to wait for the lock', interval=0.001)
            assert not fut.done(), 'granted while the lock was held: %r' \
                % (fut.result(),)
            t0 = time.monotonic()
            holder.query('COMMIT')
            t1 = time.monotonic()
            fut.result(RECV_TIMEOUT_MS / 1000 * 4)
            t2 = time.monotonic()
            ms.append((t2 - t1) * 1000)
            stamps.append(t0 - t_start)
            holder, waiter = waiter, holder
        holder.query('COMMIT')
        reconnects = sum(b.scalar('SELECT reconnects FROM zk_status()')
                         for b in pair) - sum(before)
    finally:
        watcher.close()
    timed_out = [ln for ln in sh.pg.log_since(offset).splitlines()
                 if TIMED_OUT_RE.search(ln)]
    report(ctx, 'handoffs', ms)
    assert len(ms) >= HANDOFFS // 2, \
        'only %d handoffs in %d s' % (len(ms), RUN_LIMIT_S)
    assert reconnects == 0, '%d reconnect(s) in zk_status()' % reconnects
    check('handoffs', ms, stamps, timed_out)
