"""
Errors during a ZooKeeper outage name the cause and a safe action
(issue 29, point 3), and a DBA can always look at the backend's locks.

  * a commit check that ZooKeeper did not answer fails with 40001 saying
    since when the connection is gone, and suggests retrying once
    ZooKeeper is reachable, never turning zklock.verify_at_commit off;
  * a call whose timeout ran out while ZooKeeper was unreachable (never
    connected, or the connection lost during the wait) says so, naming
    the hosts, instead of the contention text;
  * a host of zklock.hosts that does not resolve is named (08001);
  * a chroot path in zklock.hosts is refused at SET (22023), pointing
    to zklock.root;
  * after a session-level lock is lost, zk_locks and zk_status() are
    readable in autocommit (the lock shown lost), while a transaction
    that wrote under the lost lock still fails with 40001.

The outages are played with a proxy (test/lib/zkproxy.py) between one
backend and the suite's ZooKeeper: stopping it cuts the backend off
(reconnects are refused) while the rest of the suite goes on.

In short, this module checks: a backend cut off by a proxy: the errors of a
commit check, of a timeout and of an unresolvable host name the outage;
`zk_locks` and `zk_status()` readable; the ZooKeeper client's lines over a
20 s outage in the server log's format naming the session, none raw on
stderr, at most 5 written while `zk_status()` counts the rest (201
received, 196 suppressed), the count logged at exit.
"""

import re
import time
import uuid

import zkproxy
import harness
from test_lockloss import clock_detail
from test_multisession import LOCK_X, expect_sqlstate, token_of

TIMEOUT = 120


class Cut:
    """A proxy to the suite's ZooKeeper for one backend; stop() is the
    outage.  Always stopped at exit."""

    def __init__(self, ctx, name):
        self.ctx = ctx
        self.proxy = zkproxy.ZkProxy(ctx.zk.host_port(1),
                                     name='zkproxy-' + name)

    def __enter__(self):
        self.proxy.start()
        return self

    def backend(self, name):
        b = self.ctx.backend(name)
        b.query('SET zklock.hosts = %s', [self.proxy.address])
        return b

    def cut(self):
        self.proxy.stop()

    def __exit__(self, *exc):
        self.proxy.stop()
        return False


def assert_no_verify_off_hint(e):
    text = '%s %s' % (e.diag.message_hint or '', e.diag.message_detail or '')
    assert 'verify_at_commit' not in text, \
        'the error suggests turning the check off: %r' % text


# a timestamptz as timestamptz_to_str writes it, e.g. 2026-11-25 00:31:02.123+00
TS = r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[+-]\d\d'


def test_unconfirmed_commit_names_the_outage(ctx):
    """ZooKeeper unreachable at COMMIT: 40001 naming the locks it could
    not confirm (the first by name, and how many others), the DETAIL says
    since when the connection is lost and for how many seconds, the HINT
    says to retry once ZooKeeper is reachable and to look at
    zk_status(), not to turn zklock.verify_at_commit off.  One lock, then
    two."""
    for n in (1, 2):
        res = 'outage-commit-%s' % uuid.uuid4().hex[:8]
        names = [res + '-%d' % i for i in range(n)]
        with Cut(ctx, 'commit') as c:
            b = c.backend('outage-commit-%d' % n)
            b.query('BEGIN')
            for name in names:
                token_of(b.submit(LOCK_X, [name, '10 seconds']), 10)
            c.cut()
            e = expect_sqlstate(b.submit('COMMIT'), '40001',
                                ctx.session_timeout + 15, 'COMMIT cut off')
        detail = e.diag.message_detail or ''
        hint = e.diag.message_hint or ''
        assert_no_verify_off_hint(e)
        if n == 1:
            want = ('could not confirm exclusive zklock on "%s" with '
                    'ZooKeeper before commit' % names[0])
        else:
            want = ('could not confirm exclusive zklock on "%s" and 1 other '
                    'zklock lock with ZooKeeper before commit' % names[0])
        assert e.diag.message_primary == want, str(e)
        assert c.proxy.address in detail, detail
        m = re.search(r'no connection since %s \((\d+\.\d) s\)' % TS, detail)
        assert m, detail
        # the check waited up to the session timeout for the connection
        assert float(m.group(2)) >= ctx.session_timeout * 0.5, detail
        assert 'zk_status()' in hint and 'reachable' in hint, hint
        # the session expires on the server; its nodes go with it
        for name in names:
            ctx.zi.wait_contenders(name, 0, timeout=ctx.session_timeout + 10)
        b.close(timeout=5)


def test_session_expired_during_outage_says_when(ctx):
    """The connection is gone until the server has expired the session;
    when it comes back, the COMMIT of the transaction that held the lock
    fails with 40001 naming the lock, the DETAIL gives the session, its
    node, when it expired and after how many seconds without a
    connection -- or, when the backend's loss clock ran out first and the
    reconnect has not yet told the expiry, that no reply came for the
    session timeout --, the HINT says to run the transaction again."""
    res = 'outage-expired-%s' % uuid.uuid4().hex[:8]
    with Cut(ctx, 'expired') as c:
        b = c.backend('outage-expired')
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, '10 seconds']), 10)
        sid = b.scalar('SELECT session_id FROM zk_status()')
        [node] = ctx.zi.wait_contenders(res, 1)
        port = c.proxy.port
        c.cut()
        # the server expires the session: its node goes
        harness.wait_until(lambda: ctx.kz.exists(node.path) is None,
                           ctx.session_timeout + 20,
                           'the session to expire on the server',
                           interval=0.2)
        back = zkproxy.ZkProxy(ctx.zk.host_port(1), name='zkproxy-back')
        back.start(port)
        try:
            e = expect_sqlstate(b.submit('COMMIT'), '40001',
                                ctx.session_timeout + 15,
                                'COMMIT after the session expired')
        finally:
            back.stop()
    assert e.diag.message_primary == \
        'exclusive zklock on "%s" was lost' % res, str(e)
    detail = e.diag.message_detail or ''
    m = re.fullmatch(r'The ZooKeeper session %s that held node "%s" '
                     r'expired at %s, after (\d+\.\d) s without a '
                     r'connection to the ensemble\.'
                     % (sid, re.escape(node.path), TS), detail)
    if m:
        assert float(m.group(2)) >= ctx.session_timeout * 0.5, detail
    else:
        assert re.fullmatch(clock_detail(sid, node.path), detail), detail
    assert (e.diag.message_hint or '').startswith(
        'Roll back and run the transaction again'), e.diag.message_hint
    b.close(timeout=5)


def test_timeout_while_never_connected_says_unreachable(ctx):
    """A call with a timeout and no server answering: 55P03 (the call's
    time ran out) with a DETAIL that says ZooKeeper was unreachable and
    names the hosts, unlike contention's."""
    closed = harness.closed_port()
    hosts = '127.0.0.1:%d' % closed
    b = ctx.backend('outage-never')
    b.query('SET zklock.hosts = %s', [hosts])
    b.query("SET zklock.connect_timeout = '10s'")
    e = expect_sqlstate(b.submit(LOCK_X, ['outage-never', '1 second']),
                        '55P03', 15, 'call with a timeout, no server')
    detail = e.diag.message_detail or ''
    assert 'unreachable' in detail and hosts in detail, detail
    assert 'expired while waiting' not in detail, detail
    assert 'zk_status()' in (e.diag.message_hint or ''), e.diag.message_hint
    b.query("SET lock_timeout = '1s'")
    e = expect_sqlstate(b.submit('SELECT zk_lock_exclusive(%s)',
                                 ['outage-never']),
                        '55P03', 15, 'call under lock_timeout, no server')
    detail = e.diag.message_detail or ''
    assert 'lock_timeout' in detail and 'unreachable' in detail, detail


def test_timeout_after_connection_lost_says_since_when(ctx):
    """Waiting behind another client's lock when the connection goes: the
    call's timeout then ends it with a DETAIL that says the ensemble has
    been unreachable since when; contention alone keeps its own text."""
    res = 'outage-wait-%s' % uuid.uuid4().hex[:8]
    parent = ctx.zi.parent_path(res)
    ctx.kz.ensure_path(parent)
    holder = ctx.kz.create(parent + '/_c_%s-__WRIT__' % uuid.uuid4(),
                           b'kazoo', ephemeral=True, sequence=True)
    try:
        with Cut(ctx, 'wait') as c:
            b = c.backend('outage-wait')
            # contention alone: the old text
            e = expect_sqlstate(b.submit(LOCK_X, [res, '1 second']),
                                '55P03', 10, 'contended call')
            assert 'expired while waiting' in (e.diag.message_detail or ''), \
                e.diag.message_detail
            fut = b.submit(LOCK_X, [res, '3 seconds'])
            time.sleep(1)
            c.cut()
            e = expect_sqlstate(fut, '55P03', 15, 'wait cut off')
        detail = e.diag.message_detail or ''
        assert 'unreachable' in detail and 'no connection since' in detail, \
            detail
        assert c.proxy.address in detail, detail
    finally:
        ctx.kz.delete(holder)
        ctx.zi.wait_contenders(res, 0, timeout=ctx.session_timeout + 10)
        ctx.kz.delete(parent)


def test_unresolvable_host_is_named(ctx):
    """A host that does not resolve: 08001, the DETAIL names it (not "No
    such file or directory"), at once.  In a list with a host that does
    resolve, libzookeeper leaves it out and the call goes on."""
    b = ctx.backend('outage-dns')
    b.query("SET zklock.hosts = 'no-such-host.invalid:2181'")
    t0 = time.monotonic()
    e = expect_sqlstate(b.submit(LOCK_X, ['outage-dns', '5 seconds']),
                        '08001', 15, 'lock with an unresolvable host')
    assert time.monotonic() - t0 < 5
    assert 'No such file' not in str(e), str(e)
    assert (e.diag.message_detail or '') == \
        'Host "no-such-host.invalid" could not be resolved.', str(e)
    assert 'zklock.hosts' in (e.diag.message_hint or ''), str(e)
    b.query('SET zklock.hosts = %s',
            ['%s,no-such-host.invalid:2181' % ctx.zk.host_port(1)])
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, ['outage-dns', '10 seconds']), 10)
    b.query('COMMIT')
    b.query('RESET zklock.hosts')
    ctx.zi.wait_contenders('outage-dns', 0)


def test_chroot_in_hosts_is_refused(ctx):
    """A chroot path in zklock.hosts is refused when set (22023), with a
    HINT to use zklock.root; a lone trailing slash is no chroot."""
    b = ctx.backend('outage-chroot')
    # the check runs once the library is loaded (before, zklock.hosts is
    # PostgreSQL's placeholder, checked with a WARNING at load)
    b.query('SELECT count(*) FROM zk_status()')
    for hosts in ('127.0.0.1:2181/some/chroot',
                  '127.0.0.1:2181,127.0.0.2:2181/x'):
        e = expect_sqlstate(b.submit('SET zklock.hosts = %s', [hosts]),
                            '22023', 10, 'SET zklock.hosts = %s' % hosts)
        assert 'chroot' in str(e), str(e)
        assert 'zklock.root' in (e.diag.message_hint or ''), str(e)
    b.query('SET zklock.hosts = %s', [ctx.zk.host_port(1) + '/'])
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, ['outage-chroot', '10 seconds']), 10)
    b.query('COMMIT')
    b.query('RESET zklock.hosts')
    ctx.zi.wait_contenders('outage-chroot', 0)


def test_lost_session_lock_can_be_looked_at(ctx):
    """A session-level lock whose node was deleted: zk_locks (state lost)
    and zk_status() are readable in autocommit, again and again, while an
    autocommit INSERT, a write in a transaction and a transaction that
    called a volatile function besides still fail with 40001."""
    res = 'outage-look-%s' % uuid.uuid4().hex[:8]
    a = ctx.admin
    a.query('DROP TABLE IF EXISTS outage_rows')
    a.query('CREATE TABLE outage_rows (x int)')
    h = ctx.backend('outage-look')
    token_of(h.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 10)
    [node] = ctx.zi.wait_contenders(res, 1)
    ctx.kz.delete(node.path)
    for _ in (1, 2):
        rows = h.query('SELECT resource, state, scope FROM zk_locks')
        assert rows == [(res, 'lost', 'session')], rows
        st = h.query('SELECT state, locks_held, lost_locks FROM zk_status()')
        assert st[0][0] == 'connected', st
        assert h.query('SELECT count(*) FROM zk_locks() '
                       "WHERE state = 'lost'") == [(1,)]
    # what could have done something under the lock still fails
    expect_sqlstate(h.submit('INSERT INTO outage_rows VALUES (1)'),
                    '40001', 10, 'autocommit INSERT')
    h.query('BEGIN')
    h.query('SELECT * FROM zk_locks')
    # (refused before it runs: test_failfast.py)
    expect_sqlstate(h.submit('INSERT INTO outage_rows VALUES (2)'),
                    '40001', 10, 'INSERT in a transaction')
    h.query('ROLLBACK')
    expect_sqlstate(h.submit('SELECT *, random() FROM zk_locks'),
                    '40001', 10, 'a volatile function besides')
    expect_sqlstate(h.submit('SELECT * FROM zk_locks, outage_rows'),
                    '40001', 10, 'a table besides')
    h.query('BEGIN')
    h.query('SELECT * FROM zk_status()')
    h.query('SELECT 1')
    expect_sqlstate(h.submit('COMMIT'), '40001', 10,
                    'a transaction that did more than look')
    assert a.scalar('SELECT count(*) FROM outage_rows') == 0
    h.query('SELECT zk_unlock_all()')
    h.query('INSERT INTO outage_rows VALUES (3)')
    assert a.scalar('SELECT count(*) FROM outage_rows') == 1
    a.query('DROP TABLE outage_rows')


def test_look_does_not_wait_for_a_reconnect(ctx):
    """The connection is lost in the middle of zk_locks' confirmation
    round (its sync is never forwarded; the proxy refuses reconnects from
    then on): zk_locks answers at once with what it knows, instead of
    waiting zklock.connect_timeout for a connection that does not come.
    Before the fix the look took the whole connect_timeout (3 s here); it
    failed test_locks_readable_during_outage once, under load, when the cut
    happened to fall inside the round."""
    res = 'outage-midround-%s' % uuid.uuid4().hex[:8]
    with Cut(ctx, 'midround') as c:
        b = c.backend('outage-midround')
        token_of(b.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 10)
        armed = []

        def hook(req):
            if armed and armed[0] is None and req.op == zkproxy.OP_SYNC:
                armed[0] = req
                c.proxy.refuse_new()
                return zkproxy.Verdict(drop='before')
            return None
        c.proxy.hook = hook
        armed.append(None)
        t0 = time.monotonic()
        rows = b.query('SELECT resource, scope, state FROM zk_locks')
        took = time.monotonic() - t0
        assert armed[0] is not None, 'zk_locks sent no sync'
        # not known lost: shown as held, as in any look while disconnected
        assert rows == [(res, 'session', 'held')], rows
        assert took < ctx.connect_timeout / 2, \
            'zk_locks took %.2f s after losing the connection mid-round' % took
        assert b.scalar('SELECT state FROM zk_status()') == 'connecting'
    ctx.zi.wait_contenders(res, 0, timeout=ctx.session_timeout + 10)


def test_locks_readable_during_outage(ctx):
    """ZooKeeper unreachable while a session-level lock is held: zk_locks
    and zk_status() answer in autocommit at once (no commit check to wait
    for), while an autocommit INSERT fails closed with 40001."""
    res = 'outage-read-%s' % uuid.uuid4().hex[:8]
    a = ctx.admin
    a.query('DROP TABLE IF EXISTS outage_read')
    a.query('CREATE TABLE outage_read (x int)')
    with Cut(ctx, 'read') as c:
        b = c.backend('outage-read')
        token_of(b.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 10)
        c.cut()
        t0 = time.monotonic()
        rows = b.query('SELECT resource, scope FROM zk_locks')
        st = b.query('SELECT state FROM zk_status()')
        took = time.monotonic() - t0
        assert rows == [(res, 'session')], rows
        assert st == [('connecting',)], st
        assert took < ctx.session_timeout / 2, \
            'looking took %.1f s during the outage' % took
        e = expect_sqlstate(b.submit('INSERT INTO outage_read VALUES (1)'),
                            '40001', ctx.session_timeout + 15,
                            'autocommit INSERT during the outage')
        assert_no_verify_off_hint(e)
    assert a.scalar('SELECT count(*) FROM outage_read') == 0
    a.query('DROP TABLE outage_read')
    ctx.zi.wait_contenders(res, 0, timeout=ctx.session_timeout + 10)


# What routes libzookeeper's own lines into the server log (issue 37,
# point 8, with issue 42, point 5): at most this many a backend per
# change of its connection (src/session/log.c's ZKSL_BURST)
ZK_LINES_PER_CHANGE = 5
OUTAGE_S = 20

# a line the log_line_prefix '%m [%p] %q%a ' begins, then a routed line
ROUTED = re.compile(
    r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ \[(\d+)\] \S* ?LOG:  '
    r'ZooKeeper client (error|warning|info|debug) in session '
    r'(0x[0-9a-f]+): (.*)$')
SUPPRESSED = re.compile(
    r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ \[(\d+)\] \S* ?LOG:  '
    r'(\d+) more lines? of the ZooKeeper client log (?:was|were) '
    r'suppressed in session (0x[0-9a-f]+)$')


def zk_log_counts(b):
    """zk_status()'s counts of libzookeeper's lines (None before 1.6)."""
    row = b.scalar('SELECT to_jsonb(s) FROM zk_status() s')
    return (row.get('zookeeper_log_lines'),
            row.get('zookeeper_log_suppressed'))


def test_zookeeper_client_lines_in_the_server_log_bounded(ctx):
    """A backend cut off from ZooKeeper for 20 s: libzookeeper's own
    lines (a dozen a second as it tries to reconnect) reach the server
    log in PostgreSQL's format (log_line_prefix, level LOG) naming the
    session in hex, never raw on stderr ("ZOO_ERROR@..."); at most
    ZK_LINES_PER_CHANGE of them for the outage, zk_status() counting
    every line received and every line suppressed (rising through the
    outage), and the backend's exit logs how many were suppressed."""
    with Cut(ctx, 'zlog') as c:
        b = c.backend('outage-zlog')
        assert b.scalar('SELECT zk_try_lock_exclusive(%s)',
                        ['outage-zlog']) is True
        sid = b.scalar('SELECT session_id FROM zk_status()')
        before = zk_log_counts(b)
        off = ctx.pg.log_size()
        c.cut()
        t0 = time.monotonic()
        samples = []
        # the outage lasts OUTAGE_S whatever happens: a statement a
        # second meanwhile is where the backend writes what it buffered
        while time.monotonic() - t0 < OUTAGE_S:
            samples.append((time.monotonic() - t0, zk_log_counts(b)))
            time.sleep(1)
        after = zk_log_counts(b)
        text = ctx.pg.log_since(off)
    raw = [line for line in text.splitlines() if 'ZOO_' in line]
    assert not raw, 'libzookeeper wrote outside the log format:\n%s' \
        % '\n'.join(raw[:10])
    routed = [m.groups() for m in map(ROUTED.match, text.splitlines())
              if m and int(m.group(1)) == b.pid]
    assert routed, 'no ZooKeeper client line for the outage:\n%s' % text
    assert all(r[2] == sid for r in routed), (sid, routed)
    assert len(routed) <= ZK_LINES_PER_CHANGE, \
        '%d lines logged for one outage:\n%s' % (len(routed), text)

    assert None not in before + after, (before, after)
    received = after[0] - before[0]
    suppressed = after[1] - before[1]
    assert received - suppressed == len(routed), (before, after, routed)
    # still suppressing in the second half of the outage
    mid = [s for t, s in samples if t >= OUTAGE_S / 2][0]
    assert after[1] > mid[1], samples
    ctx.figure('libzookeeper lines received, cut-off backend',
               received / OUTAGE_S, 'lines/s', '%.1f')
    ctx.figure('lines written to the server log, %d s outage' % OUTAGE_S,
               len(routed), 'lines')
    ctx.log('first routed line: %s' % [line for line in text.splitlines()
                                       if ROUTED.match(line)][0])

    # the backend's exit says how many it suppressed
    off = ctx.pg.log_size()
    pid = b.pid
    b.close(timeout=10)
    found = []

    def summary():
        found[:] = [m.groups() for m in map(SUPPRESSED.match,
                                            ctx.pg.log_since(off).splitlines())
                    if m and int(m.group(1)) == pid]
        return found
    harness.wait_until(summary, 15, 'the suppressed count at exit')
    assert found[0][2] == sid, found
    assert int(found[0][1]) >= suppressed, (found, suppressed)
    ctx.log('at exit: %s more lines suppressed (%d received, %d suppressed '
            'during the %d s outage)' % (found[0][1], received, suppressed,
                                         OUTAGE_S))
