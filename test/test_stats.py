"""
Lock statistics and wait logging (issue 32): zk_stat_locks,
zk_stat_cluster, zk_stat_reset and zklock.log_lock_waits.

The statistics live in shared memory, so this module starts clusters of
its own that preload zklock (shared_preload_libraries), on the suite's
ZooKeeper: "stats" (deadlock_timeout 200 ms, so that waits are logged
quickly) and "stats-small" (zklock.stat_max_names = 40, for eviction).
The suite's main cluster does not preload zklock: there the functions
fail with 55000.  Every figure is checked exactly against a scripted
workload.

In short, this module checks: clusters of the test's own that preload
zklock (`deadlock_timeout` 200 ms; one with `zklock.stat_max_names` = 40):
a scripted workload (2 waits, 2 timeouts, 1 cancel, 1 deadlock, 1 lock lost
by deleting its node, 1 refused commit, a semaphore) checked counter by
counter in `zk_stat_locks` and `zk_stat_cluster`; 8 backends × 25
acquisitions of one name add up to exactly 200; reset of one name and of
all; names a database's encoding cannot hold (a CJK name read from LATIN1,
a SQL_ASCII database's raw bytes read from UTF-8) shown as `\\x` hex exactly
as `zk_lock_queue` shows owner data, not 22P05 or 22021;
least-recently-used eviction; `stats_since` of a fresh cluster; on 18 and
19 every figure kept across a clean restart and discarded after an
immediate stop, on 15-17 started afresh at a restart; the LOG lines (still
waiting with the holder's pid, acquired, timed out; none for a short wait
or with the setting off); a foreign holder's host and application fields
shown as printable ASCII (no newline, no escape); 55000 with its hint on
the suite's cluster, which does not preload (`zk_waits` and `zk_sessions`
too); `zk_waits` showing a wait in progress (pid, database, lock, mode,
start, timeout, deadline) found by the manual's longest-wait and
zklock-waits-alone queries, gone as soon as the wait ends by a grant or a
cancel; `zk_sessions` showing a holder, a waiter and a backend behind a
proxy as their own `zk_status()` shows them (locks held, waiting), the idle
backend's row turned to `connecting` with `unreachable_since` when the
proxy stops while it runs nothing, the ended backend's row gone; `failed`
for a backend whose connect found no server; a role given SELECT sees its
own backend's row alone, a `pg_read_all_stats` member every row; a false
try counted in `failed_tries` (an array try: the name not free), not as a
timeout; the 1.4 → 1.5 update equal to a fresh install, keeping grants, the
new objects for `pg_read_all_stats` only.
"""

import concurrent.futures
import datetime
import os
import re
import time

import psycopg2

import harness
import zkproxy
from harness import wait_until
from test_multisession import (LOCK_X, LONG, TRY_S, TRY_X, expect_sqlstate,
                               token_of)

TIMEOUT = 120
DB = 'zklock_stats'
LOCKS_SQL = ('SELECT kind, acquisitions, waits, timeouts, cancels, '
             'deadlocks, lost, refused_commits FROM zk_stat_locks '
             'WHERE name = %s ORDER BY kind')
CLUSTER_SQL = ('SELECT acquisitions, waits, timeouts, cancels, deadlocks, '
               'lost, refused_commits FROM zk_stat_cluster')


def preloaded_cluster(ctx, name, extra=None):
    conf = {
        'shared_preload_libraries': 'zklock',
        'zklock.hosts': ctx.zk.connect_string,
        'zklock.root': ctx.root,
        'zklock.session_timeout': '%ds' % ctx.session_timeout,
        'zklock.connect_timeout': '%ds' % ctx.connect_timeout,
        'deadlock_timeout': '200ms',
    }
    conf.update(extra or {})
    pg = harness.PgCluster(name, conf, base_dir=ctx.workdir).start()
    ctx.shared.clusters.append(pg)
    pg.psql('CREATE DATABASE %s' % DB)
    pg.psql('CREATE EXTENSION zklock', dbname=DB)
    return pg


def module_setup(ctx):
    ctx.shared.clusters = []
    ctx.shared.pg = preloaded_cluster(ctx, 'stats')
    ctx.shared.small = preloaded_cluster(ctx, 'stats-small',
                                         {'zklock.stat_max_names': '40'})


def module_teardown(ctx):
    for pg in getattr(ctx.shared, 'clusters', []):
        pg.stop()


def on(ctx, name, cluster=None):
    return ctx.backend(name, cluster=cluster or ctx.shared.pg, dbname=DB)


def hold_and_wait(ctx, h, w, res, extra_s=0.0):
    """h holds res in a transaction; w asks for it (60 s) and waits until
    h commits (after extra_s beyond its queueing).  Returns w's future."""
    # the last holder's release (an asynchronous delete) is through:
    # the holder must not wait
    ctx.zi.wait_contenders(res, 0)
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10, 'holder')
    f = w.submit(LOCK_X, [res, LONG])
    ctx.zi.wait_contenders(res, 2)
    time.sleep(extra_s)
    h.query('COMMIT')
    token_of(f, 10, 'waiter')
    return f


def test_unpreloaded_functions_fail_55000(ctx):
    """Without shared_preload_libraries: 55000 with a hint, for the views
    and the reset alike, for the current waits (zk_waits, 1.7) and for
    every backend's session (zk_sessions, 1.8)."""
    for sql in ('SELECT * FROM zk_stat_locks', 'SELECT * FROM zk_stat_cluster',
                'SELECT zk_stat_reset()', 'SELECT * FROM zk_waits',
                'SELECT * FROM zk_sessions'):
        e = expect_sqlstate(ctx.admin.submit(sql), '55000', 10, sql)
        assert 'shared_preload_libraries' in (e.diag.message_hint or ''), e


WAITS_SQL = ('SELECT pid, database, resource, mode, since, timeout, '
             'deadline FROM zk_waits WHERE resource = %s')
# the manual's (doc/04-operations.md) exporter query for the longest wait in progress
LONGEST_SQL = ('SELECT count(*) AS waiting, coalesce(max(extract(epoch FROM '
               'clock_timestamp() - since)), 0) AS longest_wait_seconds '
               'FROM zk_waits')
# the manual's query of the zklock waits alone, on every major
ALONE_SQL = ('SELECT a.pid, a.wait_event_type, a.wait_event, w.resource '
             'FROM zk_waits w JOIN pg_stat_activity a USING (pid)')


def test_current_waits_shown_while_they_last(ctx):
    """zk_waits (1.7) shows a wait in progress: the waiter's pid, database,
    lock, mode, start time (after the call was sent, before it was read),
    timeout and deadline (the call's start plus its timeout; none without
    one); the manual's exporter query gives its age as the longest wait and
    the manual's query of zklock waits finds it in pg_stat_activity, and only
    it (the holder, idle in its transaction, is not there); the row is gone
    as soon as the wait ends, by a grant and by a cancel alike."""
    s = on(ctx, 'cw-admin')
    h = on(ctx, 'cw-h')
    w = on(ctx, 'cw-w')
    res = 'cw-work'
    ctx.zi.wait_contenders(res, 0)
    assert s.query(WAITS_SQL, [res]) == []
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10, 'holder')

    sent = s.scalar('SELECT clock_timestamp()')
    f = w.submit(LOCK_X, [res, LONG])
    rows = wait_until(lambda: s.query(WAITS_SQL, [res]), 10, 'the wait shown')
    seen = s.scalar('SELECT clock_timestamp()')
    assert len(rows) == 1, rows
    pid, db, name, mode, since, timeout, deadline = rows[0]
    assert (pid, db, name, mode) == (w.pid, DB, res, 'exclusive'), rows
    assert sent <= since <= seen, (sent, since, seen)
    assert timeout == datetime.timedelta(seconds=60), timeout
    # the deadline counts from the call's start, a little before the wait
    assert since < deadline <= since + timeout, (since, deadline)
    assert deadline > since + timeout - datetime.timedelta(seconds=5)

    waiting, longest = s.query(LONGEST_SQL)[0]
    now = s.scalar('SELECT clock_timestamp()')
    assert waiting == 1, waiting
    assert 0 < longest <= (now - since).total_seconds(), (longest, now, since)

    alone = s.query(ALONE_SQL)
    event = 'ZklockQueue' if harness.PG_MAJOR >= 17 else 'Extension'
    assert alone == [(w.pid, 'Extension', event, res)], alone

    h.query('COMMIT')
    token_of(f, 10, 'waiter')
    # cleared before the call returned
    assert s.query(WAITS_SQL, [res]) == []
    assert s.query(LONGEST_SQL)[0][0] == 0

    # no timeout: none shown; a shared wait; ended by a cancel
    ctx.zi.wait_contenders(res, 0)
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10, 'holder')
    f = w.submit('SELECT zk_lock_shared(%s)', [res])
    rows = wait_until(lambda: s.query(WAITS_SQL, [res]), 10, 'the wait shown')
    assert [r[:4] + r[5:] for r in rows] == \
        [(w.pid, DB, res, 'shared', None, None)], rows
    w.cancel()
    expect_sqlstate(f, '57014', 10, 'canceled wait')
    assert s.query(WAITS_SQL, [res]) == []
    h.query('COMMIT')


SESSIONS_SQL = ('SELECT pid, database, state, session_id, server, '
                'connected_since, unreachable_since, session_timeout, '
                'locks_held, waiting FROM zk_sessions WHERE pid = ANY(%s) '
                'ORDER BY pid')


def sessions_by_pid(s, pids):
    return {r[0]: r for r in s.query(SESSIONS_SQL, [list(pids)])}


def until_sessions(s, pids, pred, what, timeout=10):
    """Poll zk_sessions until pred({pid: row}) holds; returns the rows."""
    def check():
        rows = sessions_by_pid(s, pids)
        return [rows] if pred(rows) else None
    return wait_until(check, timeout, what)[0]


def test_sessions_show_every_backend(ctx):
    """zk_sessions (1.8) shows every backend's session as zk_status() names
    it: a holder (connected, its session id, server and timeout as its own
    zk_status() shows them, connected since before its lock call, one lock
    held, not waiting), a waiter (waiting, no lock), and a backend behind
    a proxy.  When the proxy stops, the idle backend's row turns to
    connecting, without its server, unreachable since the cut, while the
    backend runs nothing; the waiter's row follows its grant; a backend
    that ends leaves no row."""
    s = on(ctx, 'ss-admin')
    h = on(ctx, 'ss-h')
    w = on(ctx, 'ss-w')
    res = 'ss-work'
    proxy = zkproxy.ZkProxy(ctx.zk.host_port(1), name='zkproxy-ss').start()
    try:
        d = on(ctx, 'ss-d')
        d.query('SET zklock.hosts = %s', [proxy.address])
        pids = (h.pid, w.pid, d.pid)
        ctx.zi.wait_contenders(res, 0)
        before = s.scalar('SELECT clock_timestamp()')
        h.query('BEGIN')
        token_of(h.submit(LOCK_X, [res, LONG]), 10, 'holder')
        f = w.submit(LOCK_X, [res, LONG])
        assert d.scalar(TRY_X, ['ss-d-once']) is True
        ctx.zi.wait_contenders(res, 2)
        rows = until_sessions(
            s, pids, lambda r: len(r) == 3 and r[w.pid][9],
            'three sessions, the waiter waiting')
        hs = h.query('SELECT session_id, server, session_timeout '
                     'FROM zk_status()')[0]
        ds = d.query('SELECT session_id, server FROM zk_status()')[0]
        hr, wr, dr = rows[h.pid], rows[w.pid], rows[d.pid]
        assert hr[1:5] == (DB, 'connected', hs[0], hs[1]), (hr, hs)
        assert hs[1] in ctx.zk.connect_string.split(','), hs
        assert before <= hr[5] and hr[6] is None, hr
        assert hr[7] == hs[2] and hr[8:] == (1, False), (hr, hs)
        assert wr[2] == 'connected' and wr[8:] == (0, True), wr
        assert wr[3] not in (None, hr[3]), (wr, hr)
        assert dr[2:5] == ('connected', ds[0], proxy.address), (dr, ds)
        assert dr[8:] == (0, False) and dr[6] is None, dr

        # the proxy goes; d runs nothing, its row changes all the same
        cut = s.scalar('SELECT clock_timestamp()')
        proxy.stop()
        rows = until_sessions(s, [d.pid],
                              lambda r: d.pid in r and
                              r[d.pid][2] == 'connecting',
                              'the idle backend seen disconnected')
        dr = rows[d.pid]
        assert dr[3] == ds[0] and dr[4] is None and dr[5] is None, dr
        assert dr[6] is not None and cut <= dr[6], (cut, dr)
        assert dr[6] <= s.scalar('SELECT clock_timestamp()'), dr

        h.query('COMMIT')
        token_of(f, 10, 'waiter')
        rows = until_sessions(
            s, (h.pid, w.pid),
            lambda r: r[h.pid][8:] == (0, False) and
            r[w.pid][8:] == (0, False),
            'the holder released and the waiter through')
        d.close(timeout=5)
        until_sessions(s, [d.pid], lambda r: not r, 'the ended backend gone')
    finally:
        proxy.stop()


def test_sessions_failed_connect(ctx):
    """A backend whose connect found no server shows `failed` in
    zk_sessions, as in its zk_status(), unreachable since the call began
    to try, with no session id, server or connection time."""
    s = on(ctx, 'sf-admin')
    b = on(ctx, 'sf-b')
    b.query('SET zklock.hosts = %s', ['127.0.0.1:%d' % harness.closed_port()])
    b.query('SET zklock.connect_timeout = %s', ['1s'])
    before = s.scalar('SELECT clock_timestamp()')
    expect_sqlstate(b.submit(TRY_X, ['sf-never']), '08001', 10,
                    'a connect with no server')
    assert b.scalar('SELECT state FROM zk_status()') == 'failed'
    rows = until_sessions(s, [b.pid], lambda r: b.pid in r,
                          'the failed backend shown')
    r = rows[b.pid]
    assert r[2:6] == ('failed', None, None, None), r
    assert before <= r[6] <= before + datetime.timedelta(seconds=5), (before, r)
    assert r[8:] == (0, False), r


def test_sessions_visibility(ctx):
    """A role given SELECT on zk_sessions sees its own backend's row only;
    a member of pg_read_all_stats sees every backend's."""
    pg = ctx.shared.pg
    user, mon = 'zklock_ss_user', 'zklock_ss_monitor'
    for r in (user, mon):
        pg.psql('DROP ROLE IF EXISTS %s' % r, dbname=DB)
        pg.psql('CREATE ROLE %s LOGIN' % r, dbname=DB)
    pg.psql('GRANT pg_read_all_stats TO %s' % mon, dbname=DB)
    pg.psql('GRANT SELECT ON zk_sessions TO %s; GRANT EXECUTE ON FUNCTION '
            'zk_sessions(), zk_try_lock_exclusive(text) TO %s'
            % (user, user), dbname=DB)
    backends = []
    try:
        a = on(ctx, 'vis-a')
        backends.append(a)
        u = ctx.backend('vis-u', cluster=pg, dbname=DB, user=user)
        backends.append(u)
        m = ctx.backend('vis-m', cluster=pg, dbname=DB, user=mon)
        backends.append(m)
        assert a.scalar(TRY_X, ['vis-a']) is True
        assert u.scalar(TRY_X, ['vis-u']) is True
        pids = [a.pid, u.pid]
        rows = until_sessions(m, pids, lambda r: len(r) == 2,
                              'both sessions seen by the monitor')
        assert all(r[2] == 'connected' for r in rows.values()), rows
        seen = u.query('SELECT pid, state FROM zk_sessions')
        assert seen == [(u.pid, 'connected')], seen
        assert a.pid in [r[0] for r in a.query('SELECT pid FROM zk_sessions')]
    finally:
        for b in backends:
            b.close()
        for r in (user, mon):
            pg.psql('DROP OWNED BY %s; DROP ROLE %s' % (r, r), dbname=DB)


def test_false_try_counted(ctx):
    """A zk_try_* call that returns false counts once in failed_tries (1.7)
    of its name and kind, and in zk_stat_cluster's total, never as a
    timeout; an array try that returns false charges the name that was not
    free; a try that returns true counts as an acquisition only."""
    s = on(ctx, 'ft-admin')
    s.query('SELECT zk_stat_reset()')
    h = on(ctx, 'ft-h')
    w = on(ctx, 'ft-w')
    ctx.zi.wait_contenders('ft-a', 0)
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, ['ft-a', LONG]), 10, 'holder')
    assert w.scalar(TRY_X, ['ft-a']) is False
    assert w.scalar(TRY_S, ['ft-a']) is False
    assert w.scalar('SELECT zk_try_lock_exclusive(%s::text[])',
                    [['ft-b', 'ft-a']]) is False
    assert w.scalar(TRY_X, ['ft-b']) is True
    h.query('COMMIT')
    q = ('SELECT name, kind, acquisitions, timeouts, failed_tries '
         'FROM zk_stat_locks WHERE name LIKE %s ORDER BY name, kind')
    assert s.query(q, ['ft-%']) == [('ft-a', 'exclusive', 1, 0, 2),
                                    ('ft-a', 'shared', 0, 0, 1),
                                    ('ft-b', 'exclusive', 1, 0, 0)], \
        s.query(q, ['ft-%'])
    assert s.query('SELECT acquisitions, timeouts, failed_tries '
                   'FROM zk_stat_cluster') == [(2, 0, 3)]


def readme_exporter_queries():
    """{name: (query, [metric names])} of the manual's postgres_exporter
    queries.yaml block."""
    with open(os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), 'doc', '04-operations.md')) as f:
        text = f.read()
    block = re.search(r'```yaml\n(zklock_locks:.*?)```', text, re.S).group(1)
    out = {}
    for m in re.finditer(r'^(\w+):\n  query: "([^"]+)"\n  metrics:\n'
                         r'((?:    - .*\n)+)', block, re.M):
        out[m.group(1)] = (m.group(2),
                           re.findall(r'^    - (\w+):', m.group(3), re.M))
    return out


def test_readme_exporter_queries_run(ctx):
    """The manual's postgres_exporter queries, as written, run for a member of
    pg_read_all_stats and give every metric they declare, max_wait_time
    and failed_tries among them, and the longest current wait."""
    queries = readme_exporter_queries()
    assert set(queries) == {'zklock_locks', 'zklock_cluster', 'zklock_waits',
                            'zklock_version'}, queries
    assert 'max_wait_seconds' in queries['zklock_locks'][1]
    assert 'failed_tries' in queries['zklock_locks'][1]
    assert 'longest_wait_seconds' in queries['zklock_waits'][1]
    pg = ctx.shared.pg
    mon = 'zklock_st_exporter'
    pg.psql('DROP ROLE IF EXISTS %s' % mon)
    pg.psql('CREATE ROLE %s IN ROLE pg_read_all_stats' % mon)
    s = on(ctx, 'st-exporter')
    try:
        token_of(s.submit(LOCK_X, ['st-exporter', LONG]), 10)
        s.query('SET ROLE %s' % mon)
        for name, (sql, metrics) in queries.items():
            rows = s.query('SELECT to_jsonb(q) FROM (%s) q' % sql)
            assert rows, name
            for (row,) in rows:
                assert sorted(row) == sorted(metrics), (name, row, metrics)
        s.query('RESET ROLE')
    finally:
        s.close()
        pg.psql('DROP ROLE %s' % mon)


def test_since_of_a_fresh_cluster(ctx):
    """Before any reset, stats_since is the server's start (on 18 too,
    where the statistics file initdb wrote has no zklock figures)."""
    s = on(ctx, 'st-fresh', cluster=ctx.shared.small)
    # shared memory is set up just before the postmaster notes its start
    assert s.query('SELECT abs(extract(epoch FROM stats_since - '
                   'pg_postmaster_start_time())) < 60, names_tracked '
                   'FROM zk_stat_cluster') == [(True, 0)]


def test_scripted_workload_exact(ctx):
    """2 waits, 2 timeouts, 1 cancel, 1 deadlock, 1 lost lock with 1
    refused commit, a semaphore: every counter as played."""
    s = on(ctx, 'st-admin')
    s.query('SELECT zk_stat_reset()')
    h = on(ctx, 'st-h')
    w = on(ctx, 'st-w')
    res = 'st-work'
    # 2 waits: 4 acquisitions (2 by h, 2 by w after waiting)
    for _ in range(2):
        hold_and_wait(ctx, h, w, res)
    # 2 timeouts and 1 cancel while h holds: 1 acquisition more
    ctx.zi.wait_contenders(res, 0)
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10, 'holder')
    for _ in range(2):
        expect_sqlstate(w.submit(LOCK_X, [res, '300 ms']), '55P03', 10,
                        'timed-out wait')
    f = w.submit(LOCK_X, [res, LONG])
    ctx.zi.wait_contenders(res, 2)
    w.cancel()
    expect_sqlstate(f, '57014', 10, 'canceled wait')
    h.query('COMMIT')

    # one deadlock between two names
    a, b = on(ctx, 'st-dl-a'), on(ctx, 'st-dl-b')
    a.query('BEGIN')
    b.query('BEGIN')
    token_of(a.submit(LOCK_X, ['st-dl-1', LONG]), 10)
    token_of(b.submit(LOCK_X, ['st-dl-2', LONG]), 10)
    fa = a.submit(LOCK_X, ['st-dl-2', LONG])
    ctx.zi.wait_contenders('st-dl-2', 2)
    fb = b.submit(LOCK_X, ['st-dl-1', LONG])
    # the victim's ERROR aborts its transaction, which releases its lock
    # at once: the other one gets its lock
    concurrent.futures.wait([fa, fb], timeout=20)
    victim = fa if fa.exception(0) is not None else fb
    expect_sqlstate(victim, '40P01', 1, 'deadlock victim')
    token_of(fb if victim is fa else fa, 1, 'survivor')
    outcomes = ['40P01', 'ok'] if victim is fa else ['ok', '40P01']
    a.query('ROLLBACK')
    b.query('ROLLBACK')
    victim_wanted = 'st-dl-2' if outcomes[0] == '40P01' else 'st-dl-1'

    # a session lock lost (its node deleted), the next commit refused
    lo = on(ctx, 'st-lost')
    token_of(lo.submit('SELECT zk_session_lock_exclusive(%s)', ['st-lost']),
             10)
    node = ctx.zi.contenders('st-lost')[0]
    ctx.kz.delete(node.path)
    lo.query('BEGIN')
    lo.query('SELECT 1')
    expect_sqlstate(lo.submit('COMMIT'), '40001', 20, 'commit after loss')
    lo.query('SELECT zk_unlock(%s)', ['st-lost'])

    # a semaphore lease
    lo.query('SELECT zk_lock_semaphore(%s, 2)', ['st-sem'])

    assert s.query(LOCKS_SQL, [res]) == [('exclusive', 5, 2, 2, 1, 0, 0, 0)]
    dl = {n: s.query(LOCKS_SQL, [n]) for n in ('st-dl-1', 'st-dl-2')}
    other = 'st-dl-1' if victim_wanted == 'st-dl-2' else 'st-dl-2'
    # the victim's lock never came; the other waiter got its lock
    assert dl[victim_wanted] == [('exclusive', 1, 0, 0, 0, 1, 0, 0)], dl
    assert dl[other] == [('exclusive', 2, 1, 0, 0, 0, 0, 0)], dl
    assert s.query(LOCKS_SQL, ['st-lost']) == [
        ('exclusive', 1, 0, 0, 0, 0, 1, 1)]
    assert s.query(LOCKS_SQL, ['st-sem']) == [
        ('semaphore', 1, 0, 0, 0, 0, 0, 0)]
    assert s.query(CLUSTER_SQL) == [(5 + 3 + 1 + 1, 3, 2, 1, 1, 1, 1)]
    row = s.query('SELECT total_wait_time, max_wait_time, total_held_time, '
                  'stats_since <= now() FROM zk_stat_locks WHERE name = %s',
                  [res])[0]
    assert 0 < row[1] <= row[0] and row[2] > 0 and row[3], row
    s.query('SELECT zk_stat_reset()')


def test_concurrent_backends_add_up(ctx):
    """8 backends lock one name 25 times each, contending: exactly 200
    acquisitions, as many in the cluster row."""
    s = on(ctx, 'st-admin')
    s.query('SELECT zk_stat_reset()')
    bs = [on(ctx, 'st-c%d' % i) for i in range(8)]
    loop = ("DO $$BEGIN FOR i IN 1..25 LOOP "
            "PERFORM zk_session_lock_exclusive('st-conc'); "
            "PERFORM zk_unlock('st-conc'); END LOOP; END$$")
    futs = [b.submit(loop) for b in bs]
    for f in futs:
        f.result(90)
    rows = s.query(LOCKS_SQL, ['st-conc'])
    assert len(rows) == 1 and rows[0][1] == 200, rows
    assert rows[0][3:] == (0, 0, 0, 0, 0), rows
    assert s.query('SELECT acquisitions, waits FROM zk_stat_cluster') == [
        (200, rows[0][2])]
    s.query('SELECT zk_stat_reset()')


def test_reset_one_name_and_all(ctx):
    s = on(ctx, 'st-admin')
    s.query('SELECT zk_stat_reset()')
    for n in ('st-r1', 'st-r2'):
        s.query('SELECT zk_lock_exclusive(%s)', [n])
        s.query('SELECT zk_lock_shared(%s)', [n])
    names = ("SELECT name, kind FROM zk_stat_locks WHERE name LIKE 'st-r%' "
             "ORDER BY 1, 2")
    assert s.query(names) == [('st-r1', 'exclusive'), ('st-r1', 'shared'),
                              ('st-r2', 'exclusive'), ('st-r2', 'shared')]
    since = s.scalar('SELECT stats_since FROM zk_stat_cluster')
    s.query("SELECT zk_stat_reset('st-r1')")
    assert s.query(names) == [('st-r2', 'exclusive'), ('st-r2', 'shared')]
    assert s.scalar('SELECT acquisitions FROM zk_stat_cluster') == 4
    s.query('SELECT zk_stat_reset()')
    assert s.query(names) == []
    assert s.query('SELECT names_tracked, acquisitions, evictions, '
                   'stats_since > %s FROM zk_stat_cluster', [since]) == [
        (0, 0, 0, True)]


def other_encoding_db(ctx, db, encoding):
    """A database of `encoding` on the stats cluster, with the extension."""
    pg = ctx.shared.pg
    pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
    pg.psql("CREATE DATABASE %s ENCODING '%s' LC_COLLATE 'C' LC_CTYPE 'C' "
            "TEMPLATE template0" % (db, encoding))
    pg.psql('CREATE EXTENSION zklock', dbname=db)


def test_names_another_encoding_cannot_hold(ctx):
    """Names are counted in UTF-8 from every database.  One that the
    reading database cannot hold (CJK and an emoji read from LATIN1; bytes
    that are no UTF-8, counted from a SQL_ASCII database, read from a UTF-8
    one) is shown as \\x and the hex of its bytes, exactly as
    zk_lock_queue shows such owner data, instead of failing the whole view
    (22P05, 22021) in every such database; a name the database can hold
    ('café' in LATIN1) is shown as text, and a SQL_ASCII database sees its
    own bytes as they are.  zk_lock_queue's owner shows the same bytes the
    same way."""
    cjk = '\u6f22\u5b57-\U0001f512'
    raw = b'st-enc-\xff\xfe'
    pg = ctx.shared.pg
    other_encoding_db(ctx, 'zklock_st_latin1', 'LATIN1')
    other_encoding_db(ctx, 'zklock_st_ascii', 'SQL_ASCII')
    queued = 'st-enc-queue'
    parent = ctx.zi.parent_path(queued)
    try:
        u = on(ctx, 'st-enc-utf8')
        for n in (cjk, 'café'):
            u.query('SELECT zk_stat_reset(%s)', [n])
            u.query('SELECT zk_lock_exclusive(%s)', [n])
        latin = ctx.backend('st-enc-latin1', cluster=pg,
                            dbname='zklock_st_latin1')
        sql = ('SELECT name, kind, acquisitions FROM zk_stat_locks '
               'WHERE kind = %s AND acquisitions > 0 AND (name = %s OR '
               "starts_with(name, '\\x')) ORDER BY name")
        assert latin.query(sql, ['exclusive', 'café']) == [
            ('\\x' + cjk.encode().hex(), 'exclusive', 1),
            ('café', 'exclusive', 1)]

        a = ctx.backend('st-enc-ascii', cluster=pg, dbname='zklock_st_ascii')
        from_bytes = "convert_from(%s::bytea, 'SQL_ASCII')"
        braw = [psycopg2.Binary(raw)]
        a.query('SELECT zk_stat_reset(%s)' % from_bytes, braw)
        a.query('SELECT zk_lock_shared(%s)' % from_bytes, braw)
        assert a.query('SELECT acquisitions FROM zk_stat_locks WHERE name = '
                       + from_bytes, braw) == [(1,)]
        assert u.query(sql, ['shared', 'café']) == [
            ('\\x' + raw.hex(), 'shared', 1)]

        # the same bytes as foreign contenders' data in zk_lock_queue (one
        # piece of code shows both): hex, and text where LATIN1 can hold it
        ctx.kz.ensure_path(parent)
        ctx.kz.create(parent + '/_c_ab-__WRIT__0000000000', cjk.encode())
        ctx.kz.create(parent + '/_c_cd-__READ__0000000001', 'café'.encode())
        assert latin.query('SELECT owner FROM zk_lock_queue(%s) '
                           'ORDER BY position', [queued]) == [
            ('\\x' + cjk.encode().hex(),), ('café',)]
    finally:
        if ctx.kz.exists(parent):
            ctx.kz.delete(parent, recursive=True)
        for db in ('zklock_st_latin1', 'zklock_st_ascii'):
            pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)


def test_eviction_least_recently_used(ctx):
    """stat_max_names = 40: a full table gives up its least recently used
    5 % (2 rows) at once.  42 names keep the 40 last used; a name used
    again stays when the next new ones come."""
    s = on(ctx, 'st-small', cluster=ctx.shared.small)
    s.query('SELECT zk_stat_reset()')
    for i in range(42):
        s.query('SELECT zk_lock_exclusive(%s)', ['st-ev-%02d' % i])
    names = "SELECT name FROM zk_stat_locks ORDER BY 1"
    # the 41st name evicted 00 and 01 at once; the 42nd found room
    assert [r[0] for r in s.query(names)] == \
        ['st-ev-%02d' % i for i in range(2, 42)]
    assert s.query('SELECT names_tracked, evictions, acquisitions '
                   'FROM zk_stat_cluster') == [(40, 2, 42)]
    s.query('SELECT zk_lock_exclusive(%s)', ['st-ev-02'])
    s.query('SELECT zk_lock_exclusive(%s)', ['st-ev-42'])
    s.query('SELECT zk_lock_exclusive(%s)', ['st-ev-43'])
    got = [r[0] for r in s.query(names)]
    assert got == ['st-ev-02'] + ['st-ev-%02d' % i for i in range(5, 44)], got
    assert s.query('SELECT names_tracked, evictions FROM zk_stat_cluster') \
        == [(40, 4)]


def test_concurrent_new_names_over_the_cap(ctx):
    """6 backends lock 25 new names each at once on the 40-row cluster:
    creations and evictions race (on 18, two backends may pick the same
    victim); no error, names_tracked is the number of rows, within the
    cap, and every creation is either tracked or counted as an eviction."""
    s = on(ctx, 'st-small-cc', cluster=ctx.shared.small)
    s.query('SELECT zk_stat_reset()')
    bs = [on(ctx, 'st-cc%d' % i, cluster=ctx.shared.small) for i in range(6)]
    loop = ("DO $$BEGIN FOR i IN 1..25 LOOP "
            "PERFORM zk_lock_exclusive('st-cc-%d-' || i); END LOOP; END$$")
    futs = [b.submit(loop % i) for i, b in enumerate(bs)]
    for f in futs:
        f.result(90)
    tracked, evictions, acquisitions = s.query(
        'SELECT names_tracked, evictions, acquisitions FROM zk_stat_cluster')[0]
    rows = s.scalar('SELECT count(*) FROM zk_stat_locks')
    assert acquisitions == 150
    assert tracked == rows and 0 < rows <= 40, (tracked, rows)
    assert tracked + evictions == 150, (tracked, evictions)
    s.query('SELECT zk_stat_reset()')


def test_release_of_an_evicted_name_counts_in_totals(ctx):
    """A session lock whose row was evicted while it was held: its release
    adds its held time to the totals and makes no row (a release never
    creates one: on 18 it runs at COMMIT, where nothing may raise)."""
    s = on(ctx, 'st-small-rel', cluster=ctx.shared.small)
    s.query('SELECT zk_stat_reset()')
    s.query('SELECT zk_session_lock_exclusive(%s)', ['st-evr'])
    # the 41st name evicts the two least recently used: st-evr, st-evr-00
    for i in range(40):
        s.query('SELECT zk_lock_exclusive(%s)', ['st-evr-%02d' % i])
    cluster = ('SELECT names_tracked, evictions, acquisitions, '
               'total_held_time FROM zk_stat_cluster')
    before = s.query(cluster)[0]
    assert before[:3] == (39, 2, 41), before
    s.query('SELECT zk_unlock(%s)', ['st-evr'])
    after = s.query(cluster)[0]
    assert after[:3] == (39, 2, 41) and after[3] > before[3], (before, after)
    assert s.query('SELECT count(*) FROM zk_stat_locks WHERE name = %s',
                   ['st-evr']) == [(0,)]


def log_after(pg, offset, text, timeout=10):
    found = []

    def check():
        found[:] = [pg.log_since(offset)]
        return text in found[0]
    wait_until(check, timeout=timeout, what='log line %r' % text)
    return found[0]


def test_log_lines_still_waiting_acquired_timeout(ctx):
    pg = ctx.shared.pg
    h, w = on(ctx, 'st-log-h'), on(ctx, 'st-log-w')
    res = 'st-log'
    off = pg.log_size()
    hold_and_wait(ctx, h, w, res, extra_s=0.6)
    log = log_after(pg, off, 'process %d acquired exclusive zklock on "%s" '
                    'after ' % (w.pid, res))
    assert ('process %d still waiting for exclusive zklock on "%s" after '
            % (w.pid, res)) in log, log
    # the holder's application_name, from its node
    assert ('Held by process %d of this cluster, application "st-log-h" '
            '(node "' % h.pid) in log, log
    assert '0 contenders are queued' not in log   # the holder is ahead
    assert '1 contender is queued ahead of this one.' in log, log

    # a timeout after the log time
    off = pg.log_size()
    ctx.zi.wait_contenders(res, 0)
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10)
    expect_sqlstate(w.submit(LOCK_X, [res, '700 ms']), '55P03', 10, 'wait')
    log = log_after(pg, off, 'process %d failed to acquire exclusive zklock '
                    'on "%s" after ' % (w.pid, res))
    assert 'The wait timed out.' in log, log
    assert 'still waiting' in log, log

    # shorter than deadlock_timeout, or with the setting off: no line
    off = pg.log_size()
    expect_sqlstate(w.submit(LOCK_X, [res, '100 ms']), '55P03', 10, 'short')
    w.query('SET zklock.log_lock_waits = off')
    expect_sqlstate(w.submit(LOCK_X, [res, '500 ms']), '55P03', 10, 'off')
    w.query('RESET zklock.log_lock_waits')
    h.query('COMMIT')
    # a backend writes its log lines (stderr, no collector) before it
    # returns the error: every line these calls made is in the file now
    log = pg.log_since(off)
    assert 'LOG:  process %d' % w.pid not in log, log


def test_log_line_names_a_client_outside_postgresql(ctx):
    """A holder whose node has no zklock owner line (a Curator client,
    played by kazoo) is named as such, with its node."""
    pg = ctx.shared.pg
    res = 'st-log-ext'
    w = on(ctx, 'st-log-ext-w')
    path = ctx.kz.create(ctx.zi.parent_path(res) + '/_c_curator0-__WRIT__',
                         b'', sequence=True, makepath=True)
    try:
        off = pg.log_size()
        f = w.submit(LOCK_X, [res, LONG])
        log = log_after(pg, off, 'process %d still waiting for exclusive '
                        'zklock on "%s"' % (w.pid, res))
        assert ('Held by a client outside PostgreSQL (node "%s"); 1 '
                'contender is queued ahead of this one.' % path) in log, log
    finally:
        ctx.kz.delete(path)
    token_of(f, 10, 'waiter after the foreign holder went')
    log_after(pg, off, 'process %d acquired exclusive zklock on "%s"'
              % (w.pid, res))


def test_log_line_cleans_a_foreign_host_field(ctx):
    """Another client's node names its host with a newline and terminal
    escape sequences: the log line shows the host as printable ASCII
    ('?' for the rest), as it does the application_name, so the node
    cannot forge a log line or drive the terminal of whoever reads the
    log (issue 37, point 6)."""
    pg = ctx.shared.pg
    res = 'st-log-host'
    w = on(ctx, 'st-log-host-w')
    data = (b'zklock host=evil\x1b[2J\x07\nLOG:\x7f\xc3\xa9x port=5432 '
            b'sysid=1 pid=4242 db=d role=r application_name=a\x1b]0;t\x07')
    path = ctx.kz.create(ctx.zi.parent_path(res) + '/_c_curator0-__WRIT__',
                         data, sequence=True, makepath=True)
    try:
        off = pg.log_size()
        f = w.submit(LOCK_X, [res, LONG])
        log = log_after(pg, off, 'process %d still waiting for exclusive '
                        'zklock on "%s"' % (w.pid, res))
    finally:
        ctx.kz.delete(path)
    token_of(f, 10, 'waiter after the foreign holder went')
    assert ('Held by process 4242 of the cluster with system identifier 1 '
            'on host "evil?[2J??LOG:???x", application "a?]0;t?" (node "%s")'
            % path) in log, log
    assert '\x1b' not in log and '\x07' not in log and '\x7f' not in log
    # no line of the log starts with the forged text
    assert not any(line.startswith('LOG:') for line in log.splitlines()), log


def test_update_1_4_to_1_5_keeps_grants(ctx):
    """ALTER EXTENSION zklock UPDATE from 1.4 adds the statistics (equal to
    a fresh install), keeps the grants on zk_status(), and the new objects
    are for pg_read_all_stats only."""
    pg = ctx.shared.pg
    role, mon = 'zklock_st_viewer', 'zklock_st_monitor'
    for db in ('zklock_upd15', 'zklock_fresh15'):
        pg.psql('DROP DATABASE IF EXISTS %s' % db)
        pg.psql('CREATE DATABASE %s' % db)
    for r in (role, mon):
        pg.psql('DROP ROLE IF EXISTS %s' % r)
        pg.psql('CREATE ROLE %s' % r)
    pg.psql('GRANT pg_read_all_stats TO %s' % mon)
    pg.psql("CREATE EXTENSION zklock VERSION '1.4'", dbname='zklock_upd15')
    pg.psql('GRANT EXECUTE ON FUNCTION zk_status() TO %s WITH GRANT OPTION'
            % role, dbname='zklock_upd15')
    acl = ("SELECT array_agg(coalesce(r.rolname, 'PUBLIC') || ':' || "
           "a.privilege_type ORDER BY 1) FROM pg_proc p, "
           "aclexplode(p.proacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee "
           "WHERE p.oid = %s::regprocedure AND a.grantee <> p.proowner")
    q = ("SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid) "
         "|| ' -> ' || pg_get_function_result(p.oid), p.proacl::text "
         "FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid JOIN "
         "pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock' "
         "WHERE p.proname <> 'zk_status' ORDER BY 1")
    views = ("SELECT c.relname, c.relacl::text FROM pg_class c JOIN "
             "pg_depend d ON d.objid = c.oid JOIN pg_extension e ON "
             "e.oid = d.refobjid AND e.extname = 'zklock' ORDER BY 1")
    upd = ctx.backend('st-upd', cluster=pg, dbname='zklock_upd15')
    fresh = None
    try:
        before = upd.scalar(acl, ['zk_status()'])
        upd.query("ALTER EXTENSION zklock UPDATE TO '1.5'")
        assert upd.scalar("SELECT extversion FROM pg_extension "
                          "WHERE extname = 'zklock'") == '1.5'
        assert upd.scalar(acl, ['zk_status()']) == before
        pg.psql("CREATE EXTENSION zklock VERSION '1.5'",
                dbname='zklock_fresh15')
        fresh = ctx.backend('st-fresh', cluster=pg, dbname='zklock_fresh15')
        assert upd.query(q) == fresh.query(q)
        assert upd.query(views) == fresh.query(views)
        assert sorted(upd.scalar(acl, ['zk_stat_locks()'])) == \
            ['pg_read_all_stats:EXECUTE']
        assert upd.scalar(acl, ['zk_stat_reset(text)']) is None
        upd.query('SET ROLE %s' % mon)
        assert upd.scalar('SELECT count(*) >= 0 FROM zk_stat_locks')
        assert upd.scalar('SELECT names_tracked >= 0 FROM zk_stat_cluster')
        expect_sqlstate(upd.submit('SELECT zk_stat_reset()'), '42501', 10,
                        'reset by a monitoring role')
        upd.query('RESET ROLE')
        upd.query('SET ROLE %s' % role)
        expect_sqlstate(upd.submit('SELECT * FROM zk_stat_locks'), '42501',
                        10, 'a role without pg_read_all_stats')
        upd.query('RESET ROLE')
    finally:
        upd.close()
        if fresh is not None:
            fresh.close()
        for db in ('zklock_upd15', 'zklock_fresh15'):
            pg.psql('DROP DATABASE %s WITH (FORCE)' % db)
        for r in (role, mon):
            pg.psql('DROP ROLE %s' % r)


def stat_figures(s):
    """Every row and every column of both views, in a stable order."""
    return (s.query('SELECT * FROM zk_stat_locks ORDER BY name, kind'),
            s.query('SELECT * FROM zk_stat_cluster'))


def test_restart_keeps_figures_on_18_only(ctx):
    """On 18 the figures are a custom cumulative statistics kind: a clean
    restart (pg_ctl stop -m fast, start) keeps every row and column,
    stats_since, names_tracked and evictions included, and counting goes
    on; after an immediate stop (crash recovery at the next start) they
    start afresh, as PostgreSQL's own do.  On 15-17 they live in shared
    memory only: a clean restart starts them afresh."""
    pg = ctx.shared.small
    s = on(ctx, 'st-rs', cluster=pg)
    h = on(ctx, 'st-rs-h', cluster=pg)
    w = on(ctx, 'st-rs-w', cluster=pg)
    s.query('SELECT zk_stat_reset()')
    # 42 names (cap 40), one wait, one timeout, a shared lock: 4 evictions
    # (2 at the 41st name, 2 at the 43rd)
    for i in range(42):
        s.query('SELECT zk_lock_exclusive(%s)', ['st-rs-%02d' % i])
    hold_and_wait(ctx, h, w, 'st-rs-t')
    ctx.zi.wait_contenders('st-rs-t', 0)
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, ['st-rs-t', LONG]), 10, 'holder')
    expect_sqlstate(w.submit(LOCK_X, ['st-rs-t', '300 ms']), '55P03', 10,
                    'timed-out wait')
    h.query('COMMIT')
    s.query('SELECT zk_lock_shared(%s)', ['st-rs-s'])
    rows, cluster = stat_figures(s)
    assert s.query('SELECT names_tracked, evictions, acquisitions, waits, '
                   'timeouts FROM zk_stat_cluster') == [(40, 4, 46, 1, 1)]
    assert len(rows) == 40, rows
    # by name: failed_tries (1.7) comes after stats_since
    since = s.scalar('SELECT stats_since FROM zk_stat_cluster')
    for b in (s, h, w):
        b.close()

    off = pg.log_size()
    pg.stop(mode='fast')
    pg.start()
    s = on(ctx, 'st-rs-after', cluster=pg)
    if harness.PG_MAJOR >= 18:
        assert stat_figures(s) == (rows, cluster)
        assert 'statistics file' not in pg.log_since(off)
        # counting goes on from the figures read back
        s.query('SELECT zk_lock_exclusive(%s)', ['st-rs-11'])
        assert s.query('SELECT acquisitions FROM zk_stat_locks '
                       'WHERE name = %s', ['st-rs-11']) == [(2,)]
        assert s.query('SELECT names_tracked, acquisitions, stats_since '
                       'FROM zk_stat_cluster') == [(40, 47, since)]
        s.close()
        pg.stop(mode='immediate')
        pg.start()
        s = on(ctx, 'st-rs-crash', cluster=pg)
    # what a start without saved statistics shows
    assert s.query('SELECT * FROM zk_stat_locks') == []
    assert s.query('SELECT names_tracked, acquisitions, evictions, '
                   'stats_since > %s FROM zk_stat_cluster', [since]) == [
        (0, 0, 0, True)]
