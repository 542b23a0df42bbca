"""
Deadlock detection (issue 15): a cycle of zklock waits, across clusters
and mixed with PostgreSQL's own lock waits on one cluster, ends within
deadlock_timeout plus a few round trips with ERROR 40P01 for exactly one
member, whose DETAIL names every member; the others proceed.  No false
deadlocks: a long queue, a holder that publishes nothing (kazoo), a cycle
that breaks by itself.  After each test, no wait record and no node is
left in ZooKeeper.

Three clusters: the suite's main one and two of this module's own, all on
the suite's ZooKeeper.

In short, this module checks: three clusters: cycles of 2 and 3 in both
scopes and modes, a row-lock/zklock cycle on one cluster, a cycle whose row
lock is on another cluster than the member that must act and its mirror
image, a cycle through row locks on two clusters, a row-lock wait closing a
cycle long after its zklock waits searched (the victim woken: 40P01 within
2 s of it, 3.7 s without the wake), a cycle through a semaphore's room and
a row lock in Curator's and kazoo's layouts, and none when another lease
holder is free, 32 backends queued on one lock for 30 s with no 40P01, a
cycle broken by a timeout before detection (no victim), a kazoo holder in a
chain (no 40P01), a short wait publishes nothing, a standby holder whose
pid equals a primary backend's waiting in the lock manager (both in PID
namespaces of their own; no 40P01, then the real cycle with that backend is
found); 50 waiters behind an idle holder cost under 1 request per waiter
per second beyond pings (issue 38: 0.002 measured, 12.4 in 1.6); exactly
one victim each time, nothing left in ZooKeeper.
"""

import time

import psycopg2

import harness
from test_package import control_version
from test_multisession import expect_sqlstate, stays, token_of

TIMEOUT = 180
DB = 'zklock_dl'
DEADLOCK_S = 1.0              # PostgreSQL's default deadlock_timeout
BOUND_S = DEADLOCK_S + 6      # plus a few round trips, generously


def module_setup(ctx):
    ctx.shared.clusters = []
    ctx.shared.pgs = [ctx.pg]
    for name in ('dl-b', 'dl-c'):
        ctx.shared.pgs.append(ctx.extra_cluster(name, DB))
    for pg, db in zip(ctx.shared.pgs, (ctx.dbname, DB, DB)):
        pg.psql('CREATE TABLE IF NOT EXISTS dl_rows (id int PRIMARY KEY, v int)',
                dbname=db)
        pg.psql('INSERT INTO dl_rows SELECT g, 0 FROM generate_series(1, 8) g '
                'ON CONFLICT DO NOTHING', dbname=db)


def module_teardown(ctx):
    for pg in getattr(ctx.shared, 'clusters', []):
        pg.stop()


def on(ctx, cluster, name):
    """A backend on cluster 0 (main), 1 or 2."""
    if cluster == 0:
        return ctx.backend(name)
    return ctx.backend(name, cluster=ctx.shared.pgs[cluster], dbname=DB)


def waits_left(ctx):
    path = ctx.root + '/%waits'
    return ctx.kz.get_children(path) if ctx.kz.exists(path) else []


def settle(ctx, resources):
    """Nothing of the test left in ZooKeeper: no wait record, no node."""
    harness.wait_until(lambda: not waits_left(ctx), 15, 'no wait record left')
    for r in resources:
        ctx.zi.wait_contenders(r, 0, timeout=15)


def outcome(fut, timeout):
    """'granted', or the SQLSTATE the statement failed with."""
    try:
        fut.result(timeout)
        return 'granted'
    except psycopg2.Error as e:
        return e.pgcode


def run_cycle(ctx, members, mode='exclusive', scope='xact'):
    """members: list of (cluster, name).  Member i holds res i and then
    asks res i+1 (mod n).  Returns (outcomes, seconds to the 40P01, the
    error)."""
    n = len(members)
    tag = 'dl-%s-%s-%d-%d' % (mode, scope, n, int(time.time() * 1000) % 100000)
    res = ['%s/r%d' % (tag, i) for i in range(n)]
    lock = {('exclusive', 'xact'): 'SELECT zk_lock_exclusive(%s)',
            ('shared', 'xact'): 'SELECT zk_lock_shared(%s)',
            ('exclusive', 'session'): 'SELECT zk_session_lock_exclusive(%s)'}
    hold_sql = lock[('exclusive', scope)]
    ask_sql = lock[(mode, scope)] if (mode, scope) in lock else hold_sql
    bs = [on(ctx, c, '%s-%d' % (name, i)) for i, (c, name) in enumerate(members)]
    for i, b in enumerate(bs):
        if scope == 'xact':
            b.query('BEGIN')
        token_of(b.submit(hold_sql, [res[i]]), 15, 'hold %s' % res[i])
    futs = []
    for i, b in enumerate(bs):
        futs.append(b.submit(ask_sql, [res[(i + 1) % n]]))
        ctx.zi.wait_contenders(res[(i + 1) % n], 2)
    # one member fails with 40P01 within the bound; its ERROR ends its
    # transaction's locks at once, so the others may already be granted
    victim, err, elapsed = first_victim(ctx, dict(enumerate(futs)),
                                        'a cycle of %d' % n, BOUND_S + n)
    outcomes = [None] * n
    outcomes[victim] = '40P01'
    if scope == 'xact':
        bs[victim].query('ROLLBACK')
    else:
        bs[victim].query('SELECT zk_unlock_all()')
    # the others: each gets its lock once its predecessor in the chain ends
    order = [(victim - k) % n for k in range(1, n)]
    for i in order:
        outcomes[i] = outcome(futs[i], BOUND_S + 5)
        assert outcomes[i] == 'granted', \
            'member %d: %s (a second victim?)' % (i, outcomes[i])
        if scope == 'xact':
            bs[i].query('COMMIT')
        else:
            bs[i].query('SELECT zk_unlock_all()')
    settle(ctx, res)
    return outcomes, elapsed, err, bs[victim].pid


def check_detail(err, n):
    detail = err.diag.message_detail or ''
    assert detail.count('\n') == n - 1, detail
    assert detail.count('process ') >= n, detail
    assert err.diag.message_hint, err


def waits_stat(ctx):
    """(czxid, cversion) of the records' parent."""
    path = ctx.root + '/%waits'
    ctx.kz.ensure_path(path)
    st = ctx.kz.exists(path)
    return st.czxid, st.cversion


def test_short_wait_publishes_nothing(ctx):
    """A wait shorter than deadlock_timeout publishes no record (the
    records' parent sees no child created); one that lasts longer
    publishes one, and removes it when granted.

    The parent is a container: the server's reaper deletes it, empty,
    once a minute, and the next publisher (or this test) creates it anew,
    with its child count from zero.  A step whose parent was re-created
    between its two reads (another czxid) counted nothing it can compare,
    so that step is measured again, at most three times; a step the reaper
    spoiled three times fails."""
    res = 'dl-cost/r'
    h = on(ctx, 0, 'dl-cost-h')
    w = on(ctx, 1, 'dl-cost-w')
    for hold_s, published in ((DEADLOCK_S * 0.3, False),
                              (DEADLOCK_S * 2.5, True)):
        spoiled = 0
        while True:
            before = waits_stat(ctx)
            h.query('BEGIN')
            token_of(h.submit('SELECT zk_lock_exclusive(%s)', [res]), 15)
            fw = w.submit('SELECT zk_lock_exclusive(%s)', [res])
            ctx.zi.wait_contenders(res, 2)
            if published:
                harness.wait_until(lambda: len(waits_left(ctx)) == 1,
                                   DEADLOCK_S + 5, 'the waiter publishes its record')
            else:
                time.sleep(hold_s)          # the length of the wait under test
            h.query('COMMIT')
            token_of(fw, 10, 'the waiter')
            settle(ctx, [res])
            after = waits_stat(ctx)
            if after[0] == before[0]:
                break
            spoiled += 1
            assert spoiled < 3, 'the reaper re-created %waits in 3 steps running'
        delta = after[1] - before[1]
        assert delta == (2 if published else 0), \
            'wait of %.1f s: %d changes under %%waits' % (hold_s, delta)


def test_two_backends_one_cluster(ctx):
    outcomes, elapsed, err, _ = run_cycle(ctx, [(0, 'dl1a'), (0, 'dl1b')])
    ctx.figure('2-cycle, one cluster: 40P01 after', round(elapsed, 2), 's')
    check_detail(err, 2)


def test_two_clusters(ctx):
    outcomes, elapsed, err, _ = run_cycle(ctx, [(0, 'dl2a'), (1, 'dl2b')])
    ctx.figure('2-cycle, two clusters: 40P01 after', round(elapsed, 2), 's')
    check_detail(err, 2)
    assert 'of cluster' in err.diag.message_detail


def test_three_clusters(ctx):
    outcomes, elapsed, err, _ = run_cycle(
        ctx, [(0, 'dl3a'), (1, 'dl3b'), (2, 'dl3c')])
    ctx.figure('3-cycle, three clusters: 40P01 after', round(elapsed, 2), 's')
    check_detail(err, 3)


def test_session_scope(ctx):
    outcomes, elapsed, err, _ = run_cycle(
        ctx, [(0, 'dl4a'), (1, 'dl4b')], scope='session')
    check_detail(err, 2)


def test_shared_asked_over_exclusive(ctx):
    """Each holds exclusive and asks shared of the other's resource."""
    outcomes, elapsed, err, _ = run_cycle(
        ctx, [(1, 'dl5a'), (2, 'dl5b')], mode='shared')
    check_detail(err, 2)
    assert 'shared zklock' in err.diag.message_detail


def test_mixed_row_lock_cycle(ctx):
    """A holds a row lock and waits for zklock 'm'; B holds 'm' and waits
    for A's row: neither PostgreSQL's detector nor ZooKeeper sees it
    alone.  A (the only zklock waiter) gets 40P01, B then gets the row."""
    res = 'dl-mixed/m'
    a = ctx.backend('dl-mixed-a')
    b = ctx.backend('dl-mixed-b')
    a.query('BEGIN')
    a.query('UPDATE dl_rows SET v = v + 1 WHERE id = 1')
    b.query('BEGIN')
    token_of(b.submit('SELECT zk_lock_exclusive(%s)', [res]), 15)
    fa = a.submit('SELECT zk_lock_exclusive(%s)', [res])
    ctx.zi.wait_contenders(res, 2)
    fb = b.submit('UPDATE dl_rows SET v = v + 1 WHERE id = 1')
    t0 = time.monotonic()
    e = expect_sqlstate(fa, '40P01', BOUND_S + 2, 'zklock waiter in a mixed cycle')
    ctx.figure('mixed cycle: 40P01 after', round(time.monotonic() - t0, 2), 's')
    assert 'PostgreSQL lock' in (e.diag.message_detail or ''), e.diag.message_detail
    a.query('ROLLBACK')
    fb.result(15)
    b.query('COMMIT')
    settle(ctx, [res])


# ---------------------------------------------------------------------------
# cycles through PostgreSQL-local edges of other clusters (issue 30)
# ---------------------------------------------------------------------------

LONG = '60 s'       # each zklock wait's own timeout: a missed cycle ends there


# how long a victim's own error may trail a grant it let through
VICTIM_TRAILS_S = 15


def first_victim(ctx, futs, what, bound=None):
    """Wait for the first statement of futs (name -> future) to end: one
    40P01, and nothing else but grants it let through.  Returns (name,
    error, seconds to the first end).

    A grant the victim let through can reach this test before the victim's
    own error does: the victim's backend sends its ERROR and then aborts,
    which releases its locks (zklock and PostgreSQL alike), and only then
    sends ReadyForQuery, which is when its client returns.  So once one
    statement ended, the victim's error is awaited too, within
    VICTIM_TRAILS_S: a grant with no victim at all still fails."""
    bound = BOUND_S if bound is None else bound
    t0 = time.monotonic()
    deadline = t0 + bound
    while time.monotonic() < deadline and not any(f.done() for f in futs.values()):
        time.sleep(0.01)
    elapsed = time.monotonic() - t0
    assert any(f.done() for f in futs.values()), \
        '%s: nobody ended within %.1f s (a cycle nobody breaks)' % (what, bound)
    trail = time.monotonic() + VICTIM_TRAILS_S
    while True:
        done = {n: outcome(f, 0) for n, f in futs.items() if f.done()}
        victims = [n for n, o in done.items() if o == '40P01']
        settled = victims or any(o != 'granted' for o in done.values())
        if settled or time.monotonic() >= trail:
            break
        time.sleep(0.01)
    assert len(victims) == 1 and \
        all(o in ('40P01', 'granted') for o in done.values()), \
        '%s: %r after %.2f s' % (what, done, elapsed)
    name = victims[0]
    try:
        futs[name].result(0)
    except psycopg2.Error as e:
        return name, e, elapsed


def in_lock_wait(ctx, cluster, pid):
    """Does backend pid of cluster wait in PostgreSQL's lock manager?"""
    mon = ctx.shared.monitors.get(cluster) if hasattr(ctx.shared, 'monitors') else None
    if mon is None or mon.conn.closed:
        if not hasattr(ctx.shared, 'monitors'):
            ctx.shared.monitors = {}
        mon = ctx.shared.monitors[cluster] = on(ctx, cluster, 'dl-mon-%d' % cluster)
    return mon.scalar("SELECT wait_event_type = 'Lock' FROM pg_stat_activity "
                      "WHERE pid = %s", [pid]) is True


def row(b, rid):
    return b.submit('UPDATE dl_rows SET v = v + 1 WHERE id = %s', [rid])


def far_cycle(ctx, tag, rid, last):
    """X (cluster 0) waits for zklock r1 held by H (cluster 1); H waits for
    a row lock held by W (cluster 1); W waits for zklock r2 held by X.  The
    member named by `last` ('x' or 'w') asks for its lock last, so its
    record is the youngest and it must be the one 40P01; the others then
    proceed in the chain's order."""
    tag = '%s-%d' % (tag, int(time.time() * 1000) % 100000)
    r1, r2 = tag + '/r1', tag + '/r2'
    x = on(ctx, 0, tag + '-x')
    h = on(ctx, 1, tag + '-h')
    w = on(ctx, 1, tag + '-w')
    for b in (x, h, w):
        b.query('BEGIN')
    w.query('UPDATE dl_rows SET v = v + 1 WHERE id = %s', [rid])
    token_of(x.submit('SELECT zk_lock_exclusive(%s)', [r2]), 15)
    token_of(h.submit('SELECT zk_lock_exclusive(%s)', [r1]), 15)
    asks = {'x': (x, r1), 'w': (w, r2)}
    first = 'w' if last == 'x' else 'x'
    futs = {}
    b, r = asks[first]
    futs[first] = b.submit('SELECT zk_lock_exclusive(%s, %s::interval)', [r, LONG])
    ctx.zi.wait_contenders(r, 2)
    futs['h'] = row(h, rid)
    harness.wait_until(lambda: in_lock_wait(ctx, 1, h.pid),
                       10, 'H waits for the row lock')
    b, r = asks[last]
    futs[last] = b.submit('SELECT zk_lock_exclusive(%s, %s::interval)', [r, LONG])
    ctx.zi.wait_contenders(r, 2)
    name, err, elapsed = first_victim(ctx, futs, '%s waits last' % last.upper())
    assert name == last, name
    assert 'PostgreSQL lock' in (err.diag.message_detail or ''), \
        err.diag.message_detail
    if last == 'x':
        x.query('ROLLBACK')
        token_of(futs['w'], 15, 'W after the victim')
        w.query('COMMIT')
        futs['h'].result(15)
        h.query('COMMIT')
    else:
        w.query('ROLLBACK')
        futs['h'].result(15)
        h.query('COMMIT')
        token_of(futs['x'], 15, 'X after the victim')
        x.query('COMMIT')
    settle(ctx, [r1, r2])
    return elapsed


def test_cycle_through_a_row_lock_of_another_cluster(ctx):
    """X waits last, so its record is the youngest: the old rule named X,
    whose search cannot see H's wait on cluster 1, and nobody acted.  W's
    record now lists H as waiting for it, so X sees the cycle: exactly one
    40P01 (X's), the others proceed."""
    elapsed = far_cycle(ctx, 'dl-far', 2, 'x')
    ctx.figure('cycle through a row lock of another cluster: 40P01 after',
               round(elapsed, 2), 's')


def test_cycle_through_a_row_lock_of_another_cluster_mirrored(ctx):
    """The same cycle with W waiting last: W (which sees H's wait on its
    own cluster) is the youngest and the victim; X proceeds."""
    elapsed = far_cycle(ctx, 'dl-mir', 3, 'w')
    ctx.figure('mirrored: 40P01 after', round(elapsed, 2), 's')


def test_local_edge_closing_late_wakes_the_victim(ctx):
    """The cycle of the first test, but H starts waiting for W's row long
    after both waits published their records: X (the youngest) searched at
    deadlock_timeout and saw no cycle, and its next scheduled search is 6 x
    deadlock_timeout later.  W sees H's wait within deadlock_timeout,
    publishes it, finds the cycle whose victim is X, and wakes X: 40P01
    within deadlock_timeout plus about a second of H's wait, not at X's
    schedule."""
    tag = 'dl-late-%d' % (int(time.time() * 1000) % 100000)
    r1, r2 = tag + '/r1', tag + '/r2'
    x = on(ctx, 0, 'dl-late-x')
    h = on(ctx, 1, 'dl-late-h')
    w = on(ctx, 1, 'dl-late-w')
    for b in (x, h, w):
        b.query('BEGIN')
    w.query('UPDATE dl_rows SET v = v + 1 WHERE id = 5')
    token_of(x.submit('SELECT zk_lock_exclusive(%s)', [r2]), 15)
    token_of(h.submit('SELECT zk_lock_exclusive(%s)', [r1]), 15)
    fw = w.submit('SELECT zk_lock_exclusive(%s, %s::interval)', [r2, LONG])
    ctx.zi.wait_contenders(r2, 2)
    # X the youngest: the victim is the newest record, and each is
    # published deadlock_timeout into its wait, so X waits only once W's
    # is there (a four-lane run on 19 saw W's published after X's when
    # the two waits began a few milliseconds apart: W was the victim)
    harness.wait_until(lambda: record_of(ctx, w.pid), DEADLOCK_S + 5,
                       'W publishes its record')
    fx = x.submit('SELECT zk_lock_exclusive(%s, %s::interval)', [r1, LONG])
    ctx.zi.wait_contenders(r1, 2)
    harness.wait_until(lambda: len(waits_left(ctx)) == 2, DEADLOCK_S + 5,
                       'both waits publish their records')
    # the scenario itself: H's wait comes between X's scheduled searches
    # (at 1, 3 and 7 x deadlock_timeout into its wait)
    time.sleep(DEADLOCK_S * 2.3)
    assert not fx.done() and not fw.done()
    t0 = time.monotonic()
    fh = row(h, 5)
    name, err, _ = first_victim(ctx, {'x': fx, 'w': fw, 'h': fh},
                                'the cycle closed late')
    elapsed = time.monotonic() - t0
    ctx.figure('cycle closed late by a row lock: 40P01 after', round(elapsed, 2), 's')
    assert name == 'x', name
    assert elapsed < DEADLOCK_S + 2, \
        '40P01 %.2f s after the cycle closed: the victim was not woken' % elapsed
    x.query('ROLLBACK')
    token_of(fw, 15, 'W after the victim')
    w.query('COMMIT')
    fh.result(15)
    h.query('COMMIT')
    settle(ctx, [r1, r2])


def test_cycle_through_row_locks_of_two_clusters(ctx):
    """Two PostgreSQL-local edges on two clusters: X (0) waits for r1 held
    by H1 (1); H1 waits for W1's row (1); W1 waits for r2 held by H2 (0);
    H2 waits for X's row (0).  No member's own cluster shows the whole
    cycle; the records do: exactly one 40P01, then everyone else ends."""
    tag = 'dl-two-%d' % (int(time.time() * 1000) % 100000)
    r1, r2 = tag + '/r1', tag + '/r2'
    x = on(ctx, 0, 'dl-two-x')
    h2 = on(ctx, 0, 'dl-two-h2')
    h1 = on(ctx, 1, 'dl-two-h1')
    w1 = on(ctx, 1, 'dl-two-w1')
    for b in (x, h2, h1, w1):
        b.query('BEGIN')
    x.query('UPDATE dl_rows SET v = v + 1 WHERE id = 4')
    w1.query('UPDATE dl_rows SET v = v + 1 WHERE id = 4')
    token_of(h1.submit('SELECT zk_lock_exclusive(%s)', [r1]), 15)
    token_of(h2.submit('SELECT zk_lock_exclusive(%s)', [r2]), 15)
    fx = x.submit('SELECT zk_lock_exclusive(%s, %s::interval)', [r1, LONG])
    ctx.zi.wait_contenders(r1, 2)
    fw1 = w1.submit('SELECT zk_lock_exclusive(%s, %s::interval)', [r2, LONG])
    ctx.zi.wait_contenders(r2, 2)
    fh1 = row(h1, 4)
    fh2 = row(h2, 4)
    harness.wait_until(lambda: in_lock_wait(ctx, 1, h1.pid)
                       and in_lock_wait(ctx, 0, h2.pid),
                       10, 'H1 and H2 wait for row locks')
    futs = {'x': fx, 'w1': fw1, 'h1': fh1, 'h2': fh2}
    name, err, elapsed = first_victim(ctx, futs, 'two local edges')
    ctx.figure('cycle through row locks of two clusters: 40P01 after',
               round(elapsed, 2), 's')
    assert name in ('x', 'w1'), name
    assert (err.diag.message_detail or '').count('PostgreSQL lock') == 2, \
        err.diag.message_detail
    bs = {'x': x, 'w1': w1, 'h1': h1, 'h2': h2}
    bs[name].query('ROLLBACK')
    # the chain unwinds from the victim: each ends once its blocker commits
    order = (['h2', 'w1', 'h1'] if name == 'x' else ['h1', 'x', 'h2'])
    for n in order:
        assert outcome(futs[n], 20) == 'granted', n
        bs[n].query('COMMIT')
    settle(ctx, [r1, r2])


# ---------------------------------------------------------------------------
# a primary and its hot standby: one system identifier (issue 37)
# ---------------------------------------------------------------------------

def standby_pair(ctx, name):
    """A primary and its streaming hot standby, each postmaster in a PID
    namespace of its own (as in containers), so that their backends' pids
    collide.  Database DB with the extension and dl_rows on both."""
    conf = {'zklock.hosts': ctx.zk.connect_string,
            'zklock.root': ctx.root,
            'zklock.session_timeout': '%ds' % ctx.session_timeout,
            'zklock.connect_timeout': '%ds' % ctx.connect_timeout}
    primary = harness.PidNsPgCluster(name, conf, base_dir=ctx.workdir)
    standby = harness.PidNsPgCluster(name + '-standby', base_dir=ctx.workdir)
    ctx.shared.clusters.extend([primary, standby])
    primary.start(timeout=120)
    primary.psql('CREATE DATABASE %s' % DB)
    primary.psql('CREATE EXTENSION zklock', dbname=DB)
    primary.psql('CREATE TABLE dl_rows (id int PRIMARY KEY, v int); '
                 'INSERT INTO dl_rows SELECT g, 0 FROM generate_series(1, 8) g',
                 dbname=DB)
    standby.init_standby(primary)
    standby.start(timeout=120)
    return primary, standby


def colliding_backends(primary, standby, limit=500):
    """A backend on each cluster, both with the same pid: pids only grow
    in a namespace, so open a new backend where the pid is behind until
    they meet."""
    bp = harness.Backend(primary, 'dl-ns-b', dbname=DB)
    bs = harness.Backend(standby, 'dl-ns-h', dbname=DB)
    for _ in range(limit):
        if bp.pid == bs.pid:
            return bp, bs
        if bp.pid < bs.pid:
            bp.close()
            bp = harness.Backend(primary, 'dl-ns-b', dbname=DB)
        else:
            bs.close()
            bs = harness.Backend(standby, 'dl-ns-h', dbname=DB)
    raise AssertionError('no pid collision after %d backends (%d, %d): '
                         'are the PID namespaces there?'
                         % (limit, bp.pid, bs.pid))


def record_of(ctx, pid):
    """(path, raw data, stat) of the wait record of backend pid (on any
    cluster: the tests that use it have one waiter), or None."""
    path = ctx.root + '/%waits'
    for name in (ctx.kz.get_children(path) if ctx.kz.exists(path) else []):
        if name.endswith('-blocked'):
            continue                    # the twin of a record (its local edges)
        try:
            raw, st = ctx.kz.get(path + '/' + name)
        except Exception:
            continue                    # gone meanwhile
        data = raw.decode('utf-8', 'replace')
        if ' pid=%d ' % pid in data and ' beat=' in data:
            return path + '/' + name, raw, st
    return None


def own_record(ctx, pid, rec=None):
    """(beat, blocked pids) of the wait record of backend pid (or of rec,
    as record_of read it), or None."""
    rec = rec or record_of(ctx, pid)
    if rec is None:
        return None
    data = rec[1].decode('utf-8', 'replace')
    beat = int(data.split(' beat=')[1].split(' ')[0])
    blocked = []
    if ' blocked=' in data:
        blocked = [int(p) for p in
                   data.split(' blocked=')[1].split(' ')[0].split(',')]
    return beat, blocked


def wake_and_see_it_checked(ctx, pid, what):
    """Wake the waiter of backend pid as a member that found a cycle does
    (its record written back unchanged, with the version read) and wait
    until it has beaten for it.  A waiter checks once per wake, one check
    after the other: once its beat has moved on, every search it started
    before the wake is over.  (Since issue 38 nothing else makes a waiter
    in no cycle write or search again.)"""
    from kazoo.exceptions import BadVersionError
    deadline = time.monotonic() + 30
    while True:
        rec = record_of(ctx, pid)
        assert rec is not None, '%s: no wait record' % what
        path, raw, st = rec
        beat = own_record(ctx, pid, rec)[0]
        try:
            ctx.kz.set(path, raw, version=st.version)
            break
        except BadVersionError:
            # it wrote meanwhile: read it again
            assert time.monotonic() < deadline, '%s: no wake landed' % what
    harness.wait_until(lambda: (own_record(ctx, pid) or (beat, []))[0] > beat,
                       DEADLOCK_S + 10, what)


def test_standby_holder_with_a_colliding_pid_is_no_deadlock(ctx):
    """A hot standby shares its primary's system identifier, and in
    containers (a PID namespace each) their backends' pids collide.  W on
    the primary holds a row and waits for a zklock held by H on the
    standby; B on the primary, whose pid is H's, waits for W's row.  No
    cycle: H waits for nothing.  But W's record lists B's pid as waiting
    for W, and H's owner line named H by (system identifier, pid) alone,
    the same as B's: the search took H for B and found W -> H -> W (the build
    before the fix: 40P01 1.04 s after B's wait began, the DETAIL saying
    the standby backend waits for a PostgreSQL lock).  A backend is now named by its cluster
    instance too (the postmaster's start time): W publishes B, searches
    with it and goes on waiting; when H commits, W gets the lock and B
    its row.  Then B itself holds a zklock that W waits for, while B
    waits for W's row: that real cycle still ends in 40P01 for W, whose
    DETAIL tells the members by their postmaster's start.

    Needs root (unshare --pid); the clusters are the primary and standby
    made here, in namespaces of their own."""
    if not harness.running_as_root():
        raise AssertionError('this test needs root (PID namespaces)')
    primary, standby = standby_pair(ctx, 'dl-ns')
    try:
        res = 'dl-ns/%d' % (int(time.time() * 1000) % 100000)
        b, h = colliding_backends(primary, standby)
        w = harness.Backend(primary, 'dl-ns-w', dbname=DB)
        mon = harness.Backend(primary, 'dl-ns-mon', dbname=DB)
        w.query('BEGIN')
        w.query('UPDATE dl_rows SET v = v + 1 WHERE id = 1')
        h.query('BEGIN')
        token_of(h.submit('SELECT zk_lock_exclusive(%s)', [res]), 15,
                 'H on the standby')
        fw = w.submit('SELECT zk_lock_exclusive(%s, %s::interval)', [res, LONG])
        ctx.zi.wait_contenders(res, 2)
        fb = row(b, 1)
        t0 = time.monotonic()
        harness.wait_until(
            lambda: mon.scalar("SELECT wait_event_type = 'Lock' FROM "
                               "pg_stat_activity WHERE pid = %s", [b.pid]),
            10, 'B waits for W\'s row')

        # W publishes B's wait (its check reads the lock manager, writes
        # the list and then searches with it); a wake answered after it
        # proves that search over, with no 40P01
        def published_b():
            if fw.done():
                return True
            rec = own_record(ctx, w.pid)
            return rec is not None and b.pid in rec[1]
        harness.wait_until(published_b, DEADLOCK_S * 8 + 10,
                           'W publishes B')
        if not fw.done():
            wake_and_see_it_checked(ctx, w.pid, 'W searched with B')
        if fw.done():
            o = outcome(fw, 0)
            detail = ''
            try:
                fw.result(0)
            except psycopg2.Error as e:
                detail = e.diag.message_detail or ''
            raise AssertionError(
                'false deadlock: W got %s %.2f s after B began to wait '
                '(B and H both pid %d, one system identifier): %s'
                % (o, time.monotonic() - t0, b.pid, detail))
        ctx.figure('standby holder with a colliding pid: searched, no 40P01',
                   'ok')
        h.query('COMMIT')
        token_of(fw, 15, 'W once H commits')
        w.query('COMMIT')
        fb.result(15)
        settle(ctx, [res])

        # the real cycle with B itself (the primary's backend of that pid)
        # as the holder is still found, H still connected on the standby
        res2 = res + '-real'
        b.query('BEGIN')
        token_of(b.submit('SELECT zk_lock_exclusive(%s)', [res2]), 15,
                 'B on the primary')
        w.query('BEGIN')
        w.query('UPDATE dl_rows SET v = v + 1 WHERE id = 2')
        fw = w.submit('SELECT zk_lock_exclusive(%s, %s::interval)',
                      [res2, LONG])
        ctx.zi.wait_contenders(res2, 2)
        fb = row(b, 2)
        e = expect_sqlstate(fw, '40P01', BOUND_S + 2,
                            'W in a real cycle with B')
        detail = e.diag.message_detail or ''
        assert 'process %d of cluster' % b.pid in detail and \
            'started at' in detail and 'PostgreSQL lock' in detail, detail
        w.query('ROLLBACK')
        fb.result(15)
        b.query('COMMIT')
        settle(ctx, [res2])
        for x in (b, h, w, mon):
            x.close()
    finally:
        standby.stop()
        primary.stop()


def record_beat(ctx, pid):
    """The beat of the wait record of backend pid (None without one)."""
    rec = own_record(ctx, pid)
    return rec[0] if rec else None


def semaphore_row_cycle(ctx, protocol):
    """A holds the one lease of a semaphore and waits for W's row lock; W
    asks for the semaphore: it waits for room, which only A can make.
    Exactly one 40P01, W's (the only zklock waiter), naming the semaphore;
    then A gets the row."""
    sem = 'dl-sem-%s-%d' % (protocol, int(time.time() * 1000) % 100000)
    a = on(ctx, 0, 'dl-sem-a')
    w = on(ctx, 0, 'dl-sem-w')
    for b in (a, w):
        b.query('SET zklock.protocol = %s', [protocol])
        b.query('BEGIN')
    token_of(a.submit('SELECT zk_lock_semaphore(%s, 1)', [sem]), 15)
    w.query('UPDATE dl_rows SET v = v + 1 WHERE id = 6')
    fa = row(a, 6)
    harness.wait_until(lambda: in_lock_wait(ctx, 0, a.pid), 10,
                       'A waits for the row lock')
    fw = w.submit('SELECT zk_lock_semaphore(%s, 1, %s::interval)', [sem, LONG])
    name, err, elapsed = first_victim(ctx, {'a': fa, 'w': fw},
                                      'semaphore and row lock (%s)' % protocol)
    ctx.figure('cycle through a semaphore (%s) and a row lock: 40P01 after'
               % protocol, round(elapsed, 2), 's')
    assert name == 'w', name
    assert 'semaphore' in (err.diag.message_detail or ''), err.diag.message_detail
    w.query('ROLLBACK')
    fa.result(15)
    a.query('COMMIT')
    harness.wait_until(lambda: not waits_left(ctx), 15, 'no wait record left')


def test_cycle_through_a_semaphore_and_a_row_lock(ctx):
    semaphore_row_cycle(ctx, 'curator-rw')


def test_cycle_through_a_kazoo_semaphore_and_a_row_lock(ctx):
    semaphore_row_cycle(ctx, 'kazoo')


def test_semaphore_holder_outside_the_cycle_is_no_deadlock(ctx):
    """The same with two leases, the other held by C on another cluster,
    which waits for nothing: W waits for A (on a cycle with it) or C (free
    to go), so it is no deadlock.  W searches when it publishes and again
    each time it is woken (as a member that saw a cycle would wake it), and
    gets no 40P01; when C commits, W gets the lease."""
    sem = 'dl-sem-free-%d' % (int(time.time() * 1000) % 100000)
    a = on(ctx, 0, 'dl-semf-a')
    w = on(ctx, 0, 'dl-semf-w')
    c = on(ctx, 1, 'dl-semf-c')
    for b in (a, w, c):
        b.query('BEGIN')
    token_of(a.submit('SELECT zk_lock_semaphore(%s, 2)', [sem]), 15)
    token_of(c.submit('SELECT zk_lock_semaphore(%s, 2)', [sem]), 15)
    w.query('UPDATE dl_rows SET v = v + 1 WHERE id = 7')
    fa = row(a, 7)
    harness.wait_until(lambda: in_lock_wait(ctx, 0, a.pid), 10,
                       'A waits for the row lock')
    fw = w.submit('SELECT zk_lock_semaphore(%s, 2, %s::interval)', [sem, LONG])
    # W's first search already sees A waiting for it; that search and two
    # more, each woken as a member of a cycle would wake it, may not end
    # its wait
    harness.wait_until(lambda: record_beat(ctx, w.pid) is not None,
                       DEADLOCK_S + 10, 'W publishes its record')
    for i in range(2):
        wake_and_see_it_checked(ctx, w.pid, 'W searches again (%d)' % i)
    assert not fw.done(), outcome(fw, 0)
    c.query('COMMIT')
    assert outcome(fw, 15) == 'granted'
    w.query('COMMIT')
    fa.result(15)
    a.query('COMMIT')
    harness.wait_until(lambda: not waits_left(ctx), 15, 'no wait record left')


def test_semaphore_mutex_wait_leaves_no_old_list(ctx):
    """The review of issue 38: a false 40P01 through a list of local edges
    from a wait that was over.  In kazoo's layout, H holds the only lease
    of a semaphore (session scope); a kazoo client K holds its internal
    mutex; W, which holds a row, asks for the semaphore and queues behind
    K.  H then waits for W's row: W's check writes that edge (the twin of
    its record).  H's wait is cancelled (H keeps its lease and waits for
    nothing), K lets the mutex go, and W, now holding the mutex, waits for
    room.  The mutex wait's twin, still listing H, met W's new record: W
    found W -> H -> W, a cycle that no longer existed, and got 40P01 about
    a second after it began to wait for room.  Now the mutex wait's record
    and twin go when the mutex is granted, and a search trusts a twin only
    if it equals its owner's record: W keeps waiting, and is granted when
    H lets its lease go."""
    res = 'dl-semtwin-%d' % (int(time.time() * 1000) % 100000)
    path = '%s/%s' % (ctx.root, res)
    h = on(ctx, 0, 'dl-semtwin-h')
    w = on(ctx, 0, 'dl-semtwin-w')
    for b in (h, w):
        b.query("SET zklock.protocol = 'kazoo'")
    token_of(h.submit('SELECT zk_session_lock_semaphore(%s, 1)', [res]), 15,
             'H holds the lease')
    k = ctx.kz.Lock(path + '-__lock__', 'kazoo-K')
    assert k.acquire(timeout=15), 'K takes the mutex'
    try:
        w.query('BEGIN')
        w.query('UPDATE dl_rows SET v = v + 1 WHERE id = 8')
        fw = w.submit('SELECT zk_lock_semaphore(%s, 1, %s::interval)',
                      [res, LONG])
        fh = row(h, 8)
        harness.wait_until(lambda: in_lock_wait(ctx, 0, h.pid), 10,
                           'H waits for W\'s row')
        # W's mutex wait publishes H in its list (the record's twin)
        harness.wait_until(lambda: (own_record(ctx, w.pid) or (0, []))[1] ==
                           [h.pid], DEADLOCK_S + 10,
                           'W\'s record lists H')
        assert any(n.endswith('-blocked') for n in waits_left(ctx))
        mon = on(ctx, 0, 'dl-semtwin-mon')
        assert mon.scalar('SELECT pg_cancel_backend(%s)', [h.pid]) is True
        expect_sqlstate(fh, '57014', 10, 'H\'s cancelled row wait')
    finally:
        k.release()
    # W now holds the mutex and waits for room, which only H can make
    stays(lambda: not fw.done(), DEADLOCK_S * 4,
          'W waiting for room with no 40P01')
    h.query('SELECT zk_unlock_all()')
    token_of(fw, 15, 'W once H lets its lease go')
    w.query('COMMIT')
    harness.wait_until(lambda: not waits_left(ctx), 15, 'no wait record left')


def test_no_false_deadlock_in_a_long_queue(ctx):
    """32 backends on two clusters take one lock over and over with short
    holds for 30 s: many waits pass deadlock_timeout, none is a cycle, and
    none gets 40P01."""
    res = 'dl-queue/one'
    bs = [on(ctx, i % 2, 'dl-q%d' % i) for i in range(32)]
    end = time.monotonic() + 30
    counts = {'granted': 0}
    futs = {}
    while time.monotonic() < end:
        for i, b in enumerate(bs):
            f = futs.get(i)
            if f is None:
                futs[i] = b.submit(
                    'SELECT zk_lock_exclusive(%s), pg_sleep(0.05)', [res])
            elif f.done():
                try:
                    f.result(0)
                    counts['granted'] += 1
                except psycopg2.Error as e:
                    raise AssertionError('false deadlock: %s %s' % (e.pgcode, e))
                futs[i] = None
        time.sleep(0.02)
    for i, f in futs.items():
        if f is not None:
            o = outcome(f, 60)
            assert o == 'granted', 'waiter %d: %s' % (i, o)
            counts['granted'] += 1
    ctx.figure('long queue: grants in 30 s, no 40P01', counts['granted'])
    assert counts['granted'] > 32
    settle(ctx, [res])


def packets_received(ctx):
    """zk_packets_received summed over the suite's ZooKeeper servers."""
    total = 0
    for sid in ctx.zk.sids:
        for line in ctx.zk.four_letter(sid, 'mntr').splitlines():
            key, _, value = line.partition('\t')
            if key == 'zk_packets_received':
                total += int(value)
    return total


def requests_per_second(ctx, seconds):
    """Requests per second ZooKeeper receives over `seconds` (its own
    mntr polls are a few packets, within the bounds below)."""
    before, t0 = packets_received(ctx), time.monotonic()
    time.sleep(seconds)             # the measuring window itself
    return (packets_received(ctx) - before) / (time.monotonic() - t0)


def test_waiting_costs_nothing(ctx):
    """Issue 38: K = 50 backends wait for one lock held by a backend idle
    in its transaction, every wait past deadlock_timeout (its record
    published, its first search made).  In steady state they cost
    ZooKeeper less than 1 request per waiter per second beyond their
    sessions' pings (the idle baseline of the same 51 sessions, measured
    first, subtracted).  zklock 1.5 and 1.6 sent 7-12 per waiter per
    second here (each waiter beat its record every deadlock_timeout and
    searched again and again, reading every record).  Then the holder
    commits and every waiter is granted in turn, no 40P01."""
    k = 50
    window_s = 10
    res = 'dl-cost-k/r'
    h = on(ctx, 0, 'dl-costk-h')
    ws = [on(ctx, 0, 'dl-costk-%d' % i) for i in range(k)]
    for i, b in enumerate([h] + ws):     # every backend's session made
        assert b.scalar('SELECT zk_try_lock_exclusive(%s)',
                        ['dl-cost-k/warm-%d' % i]) is True
    harness.wait_until(lambda: not waits_left(ctx), 15, 'no wait record left')
    idle = requests_per_second(ctx, window_s)
    h.query('BEGIN')
    token_of(h.submit('SELECT zk_lock_exclusive(%s)', [res]), 15)
    futs = [b.submit('SELECT zk_lock_exclusive(%s, %s::interval)',
                     [res, '180 s']) for b in ws]
    ctx.zi.wait_contenders(res, k + 1, timeout=60)
    harness.wait_until(lambda: len(waits_left(ctx)) >= k, DEADLOCK_S + 60,
                       'every waiter publishes its record')
    time.sleep(DEADLOCK_S * 3)      # past the first searches: steady state
    waiting = requests_per_second(ctx, window_s)
    per_waiter = (waiting - idle) / k
    ctx.figure('%d waiters: requests per waiter per second beyond pings' % k,
               round(per_waiter, 3))
    assert not any(f.done() for f in futs), \
        [outcome(f, 0) for f in futs if f.done()]
    assert per_waiter < 1.0, \
        '%d waiters cost %.1f requests/s (idle %.1f): %.2f per waiter ' \
        'per second' % (k, waiting, idle, per_waiter)
    h.query('COMMIT')
    for i, f in enumerate(futs):
        o = outcome(f, 60)
        assert o == 'granted', 'waiter %d: %s' % (i, o)
    settle(ctx, [res])
    for b in [h] + ws:
        b.close()


def test_cycle_broken_by_a_timeout_has_no_victim(ctx):
    """A and B close a cycle, but A gives up (its timeout) before
    deadlock_timeout: B then gets its lock; nobody gets 40P01."""
    ra, rb = 'dl-broken/a', 'dl-broken/b'
    a = on(ctx, 0, 'dl-broken-a')
    b = on(ctx, 1, 'dl-broken-b')
    a.query('BEGIN')
    token_of(a.submit('SELECT zk_lock_exclusive(%s)', [ra]), 15)
    b.query('BEGIN')
    token_of(b.submit('SELECT zk_lock_exclusive(%s)', [rb]), 15)
    fa = a.submit('SELECT zk_lock_exclusive(%s, %s::interval)', [rb, '0.6 s'])
    fb = b.submit('SELECT zk_lock_exclusive(%s)', [ra])
    expect_sqlstate(fa, '55P03', 10, 'the member that times out')
    a.query('ROLLBACK')
    assert outcome(fb, 10) == 'granted'
    b.query('COMMIT')
    settle(ctx, [ra, rb])


def test_foreign_holder_ends_the_search(ctx):
    """A holds r1 and waits for r2, held by a kazoo client that waits for
    r1: a real cycle, but kazoo publishes nothing, so zklock cannot see
    it: no 40P01 (never a false one), the wait goes on until its timeout."""
    r1, r2 = 'dl-kazoo/r1', 'dl-kazoo/r2'
    a = on(ctx, 0, 'dl-kazoo-a')
    a.query('BEGIN')
    token_of(a.submit('SELECT zk_lock_exclusive(%s)', [r1]), 15)
    kparent = ctx.zi.parent_path(r2)
    knode = ctx.kz.create(kparent + '/_c_kazoo0-__WRIT__', ephemeral=True,
                          sequence=True, makepath=True)
    kwait = ctx.kz.create(ctx.zi.parent_path(r1) + '/_c_kazoo1-__WRIT__',
                          ephemeral=True, sequence=True, makepath=True)
    try:
        expect_sqlstate(
            a.submit('SELECT zk_lock_exclusive(%s, %s::interval)',
                     [r2, '%d s' % int(DEADLOCK_S * 4)]),
            '55P03', DEADLOCK_S * 4 + 5, 'waiter behind a kazoo holder')
    finally:
        ctx.kz.delete(kwait)
        ctx.kz.delete(knode)
    a.query('ROLLBACK')
    settle(ctx, [r1, r2])


def test_queue_shows_waits_for(ctx):
    """zk_lock_queue names the node each waiter waits for: the nearest
    conflicting contender ahead (a shared waiter skips shared ones)."""
    res = 'dl-queue-view/r'
    h = on(ctx, 0, 'dl-view-h')
    x = on(ctx, 1, 'dl-view-x')
    s = on(ctx, 2, 'dl-view-s')
    h.query('BEGIN')
    token_of(h.submit('SELECT zk_lock_shared(%s)', [res]), 15)
    fx = x.submit('SELECT zk_lock_exclusive(%s)', [res])
    ctx.zi.wait_contenders(res, 2)
    fs = s.submit('SELECT zk_lock_shared(%s)', [res])
    ctx.zi.wait_contenders(res, 3)
    rows = h.query('SELECT node, mode, holding, waits_for FROM '
                   'zk_lock_queue(%s) ORDER BY position', [res])
    assert [(r[1], r[2]) for r in rows] == [
        ('shared', True), ('exclusive', False), ('shared', False)], rows
    assert rows[0][3] is None
    assert rows[1][3] == rows[0][0], rows     # exclusive waits for the holder
    assert rows[2][3] == rows[1][0], rows     # shared waits for the exclusive
    h.query('COMMIT')
    token_of(fx, 10)
    token_of(fs, 10)
    settle(ctx, [res])


def test_update_from_1_0(ctx):
    """ALTER EXTENSION zklock UPDATE from 1.0: the new column appears, a
    role granted zk_lock_queue keeps its grant, and the functions match a
    fresh install of the current version."""
    pg = ctx.shared.pgs[1]
    for db in ('zklock_upd', 'zklock_fresh'):
        pg.psql('DROP DATABASE IF EXISTS %s' % db)
        pg.psql('CREATE DATABASE %s' % db)
    pg.psql('DROP ROLE IF EXISTS zklock_upd_viewer')
    pg.psql('CREATE ROLE zklock_upd_viewer')
    pg.psql("CREATE EXTENSION zklock VERSION '1.0'", dbname='zklock_upd')
    pg.psql('GRANT EXECUTE ON FUNCTION zk_lock_queue(text) '
            'TO zklock_upd_viewer WITH GRANT OPTION', dbname='zklock_upd')
    pg.psql('GRANT EXECUTE ON FUNCTION zk_lock_queue(text) TO PUBLIC',
            dbname='zklock_upd')
    acl_sql = ("SELECT array_agg(coalesce(r.rolname, 'PUBLIC') || ':' || "
               "a.is_grantable ORDER BY 1) FROM pg_proc p, aclexplode(p.proacl) a "
               "LEFT JOIN pg_roles r ON r.oid = a.grantee "
               "WHERE p.oid = 'zk_lock_queue(text)'::regprocedure "
               "AND a.grantee <> p.proowner")
    pg.psql('ALTER EXTENSION zklock UPDATE', dbname='zklock_upd')
    pg.psql('CREATE EXTENSION zklock', dbname='zklock_fresh')
    q = ("SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid) "
         "|| ' -> ' || pg_get_function_result(p.oid), "
         "p.proacl::text FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid "
         "JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock' "
         "ORDER BY 1")
    upd = ctx.backend('dl-upd', cluster=pg, dbname='zklock_upd')
    fresh = ctx.backend('dl-fresh', cluster=pg, dbname='zklock_fresh')
    assert upd.scalar("SELECT extversion FROM pg_extension "
                      "WHERE extname = 'zklock'") == control_version()
    got = [(r[0], r[1]) for r in upd.query(q)]
    want = [(r[0], r[1]) for r in fresh.query(q)]
    assert got == want, (got, want)
    assert 'waits_for text' in dict(got)['zk_lock_queue(text)']
    acl = upd.scalar(acl_sql)
    assert sorted(acl) == ['PUBLIC:false', 'zklock_upd_viewer:true'], acl
    upd.query('SET ROLE zklock_upd_viewer')
    assert upd.query('SELECT * FROM zk_lock_queue(%s)', ['dl-upd/none']) == []
    upd.query('RESET ROLE')
    upd.close()
    fresh.close()
    for db in ('zklock_upd', 'zklock_fresh'):
        pg.psql('DROP DATABASE %s WITH (FORCE)' % db)
    pg.psql('DROP ROLE zklock_upd_viewer')
