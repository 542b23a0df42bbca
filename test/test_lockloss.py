"""
Lock loss never commits; fencing tokens; the queue and the session seen
from SQL.

The Kleppmann scenario is played for real: a holder that has written rows
is frozen (SIGSTOP of its backend process, ZooKeeper client threads
included) past the session timeout, ZooKeeper expires its session and
hands the lock on, and when the holder is resumed its COMMIT must fail
with 40001 and its rows must not be there.

In short, this module checks: the Kleppmann scenario (holder frozen with
SIGSTOP past the session timeout: its COMMIT fails with 40001, its rows are
gone), for both scopes; a node deleted by another client; fencing tokens;
`zk_lock_queue` across two backends and a kazoo client; `zk_status`;
reconnect on a settings change; `ALTER EXTENSION zklock UPDATE` from every
released version to 1.6 equal to a fresh 1.6 install, keeping the grants on
`zk_status()`.
"""

import concurrent.futures
import os
import re
import signal
import threading
import time

import psycopg2

from harness import wait_until
from test_multisession import (LOCK_X, LONG, expect_sqlstate, result,
                               token_of, still_waiting)

TIMEOUT = 120

# a timestamptz as timestamptz_to_str writes it, e.g. 2026-11-25 00:31:02.123+00
TS = r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[+-]\d\d'
RERUN_HINT = ('Roll back and run the transaction again: it takes the lock '
              'anew, and another holder may have run meanwhile.')


def ack_hint(fn, res):
    return ("Acknowledge the loss with %s('%s') or zk_unlock_all(), then "
            "take the lock again; until then every commit of this session "
            "fails." % (fn, res))


def deleted_detail(node, node_re=None):
    """The DETAIL of a lock whose node another client deleted."""
    return (r'Node "%s" was deleted from ZooKeeper while the lock was held '
            r'\(noticed at %s\)\.' % (node_re or re.escape(node), TS))


def expired_detail(sid, node, node_re=None):
    """The DETAIL of a lock lost with its session (the seconds without a
    connection are there when the backend saw the connection go first)."""
    return (r'The ZooKeeper session %s that held node "%s" expired at %s'
            r'(, after \d+\.\d s without a connection to the ensemble)?\.'
            % (sid, node_re or re.escape(node), TS))


def clock_detail(sid, node, node_re=None):
    """The DETAIL of a lock lost by the clock: no reply for the session
    timeout (test_failfast.py)."""
    return (r'No reply from the ZooKeeper ensemble to session %s for '
            r'\d+\.\d s, its session timeout, until %s: the session that '
            r'held node "%s" counts as expired\.'
            % (sid, TS, node_re or re.escape(node)))


def after_freeze_detail(sid, node, node_re=None):
    """The DETAIL of a lock whose holder was frozen past the session
    timeout: the expiry; or the node's deletion, whose notification can
    reach the thawed backend before the reconnect that reports the
    expiry; or the loss clock, which has run out when the backend wakes."""
    return '(%s)|(%s)|(%s)' % (expired_detail(sid, node, node_re),
                               deleted_detail(node, node_re),
                               clock_detail(sid, node, node_re))


def assert_lost(e, primary, detail_re, hint):
    """e names the lock, its DETAIL says what happened and when, its HINT
    what to do."""
    assert e.diag.message_primary == primary, str(e)
    assert re.fullmatch(detail_re, e.diag.message_detail or ''), \
        (e.diag.message_detail, detail_re)
    assert e.diag.message_hint == hint, e.diag.message_hint


def make_table(ctx, name):
    a = ctx.admin
    a.query('DROP TABLE IF EXISTS %s' % name)
    a.query('CREATE TABLE %s (x int)' % name)


def count_rows(ctx, table):
    return ctx.admin.scalar('SELECT count(*) FROM %s' % table)


def expect_error(b, sql, sqlstate, what, args=None):
    """Run sql on backend b; it must fail with sqlstate.  Returns the error."""
    return expect_sqlstate(b.submit(sql, args), sqlstate, 30, what)


def freeze_past_session_timeout(ctx, holder, res):
    """SIGSTOP the holder's backend until ZooKeeper has expired its session
    and another backend got the lock; returns that backend (still in its
    transaction, holding the lock)."""
    w = ctx.backend('loss-W-%s' % res)
    w.query('BEGIN')
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        tok = token_of(w.submit(LOCK_X, [res, '%d seconds'
                                         % (ctx.session_timeout + 20)]),
                       ctx.session_timeout + 25, 'waiter while holder frozen')
        waited = time.monotonic() - t0
        # the lock passed on only because the session expired
        assert waited >= ctx.session_timeout * 0.5, \
            'waiter got the lock after %.1f s, before the session ' \
            'timeout: the frozen holder was not holding it' % waited
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    return w, tok


def test_kleppmann_transaction_lock(ctx):
    """Frozen past the session timeout: the transaction-level lock is
    lost, the COMMIT fails with 40001 and the rows are not there."""
    res, table = 'loss-kleppmann-x', 'loss_rows_x'
    make_table(ctx, table)
    h = ctx.backend('loss-H-x')
    h.query('BEGIN')
    tok_h = token_of(h.submit(LOCK_X, [res, LONG]), 10, 'holder lock')
    sid = h.scalar('SELECT session_id FROM zk_status()')
    [node] = ctx.zi.wait_contenders(res, 1)
    h.query('INSERT INTO %s SELECT generate_series(1, 10)' % table)

    w, tok_w = freeze_past_session_timeout(ctx, h, res)
    assert tok_w > tok_h

    e = expect_error(h, 'COMMIT', '40001', 'COMMIT of the frozen holder')
    assert_lost(e, 'exclusive zklock on "%s" was lost' % res,
                after_freeze_detail(sid, node.path), RERUN_HINT)
    assert count_rows(ctx, table) == 0, 'rows of a lost lock committed'

    w.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)

    # the next lock call opens a fresh session by itself
    h.query('BEGIN')
    tok = token_of(h.submit(LOCK_X, [res, '10 seconds']), 15,
                   'lock after the expiry')
    assert tok > tok_w
    state = h.query('SELECT state FROM zk_status()')[0][0]
    assert state == 'connected', state
    h.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_kleppmann_session_lock(ctx):
    """The same with a session-level lock: every commit fails with 40001
    until zk_unlock_all() acknowledges the loss."""
    res, table = 'loss-kleppmann-s', 'loss_rows_s'
    make_table(ctx, table)
    h = ctx.backend('loss-H-s')
    token_of(h.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 10)
    sid_before = h.scalar('SELECT session_id FROM zk_status()')
    h.query('BEGIN')
    h.query('INSERT INTO %s VALUES (1)' % table)

    w, _ = freeze_past_session_timeout(ctx, h, res)

    e = expect_error(h, 'COMMIT', '40001', 'COMMIT after the loss')
    assert e.diag.message_hint == ack_hint('zk_unlock', res), \
        e.diag.message_hint
    assert re.fullmatch(after_freeze_detail(sid_before, None, '[^"]+'),
                        e.diag.message_detail or ''), e.diag.message_detail
    assert count_rows(ctx, table) == 0

    # every commit fails, even one that touches no lock ...
    expect_error(h, 'INSERT INTO %s VALUES (2)' % table, '40001',
                 'autocommit INSERT while the loss is unacknowledged')
    # (even a read's commit fails: look inside a block, then roll back)
    h.query('BEGIN')
    rows = h.query("SELECT state, scope FROM zk_locks WHERE resource = %s",
                   [res])
    h.query('ROLLBACK')
    assert rows == [('lost', 'session')], rows
    assert count_rows(ctx, table) == 0

    # ... until the loss is acknowledged
    h.query('SELECT zk_unlock_all()')
    h.query('INSERT INTO %s VALUES (3)' % table)
    assert count_rows(ctx, table) == 1
    lost = h.scalar('SELECT lost_locks FROM zk_status()')
    assert lost >= 1, lost

    w.query('COMMIT')
    token_of(h.submit('SELECT zk_session_lock_exclusive(%s, %s::interval)',
                      [res, '10 seconds']), 15, 'relock in a new session')
    sid_after = h.scalar('SELECT session_id FROM zk_status()')
    assert sid_after != sid_before, 'still the expired session %s' % sid_before
    assert h.scalar('SELECT zk_unlock(%s)', [res]) is True
    ctx.zi.wait_contenders(res, 0)


def test_node_deleted_by_operator(ctx):
    """Another ZooKeeper client deletes the held node: zk_locks says lost
    and the COMMIT fails with 40001 naming the resource; rows are gone."""
    res, table = 'loss-deleted', 'loss_rows_d'
    make_table(ctx, table)
    h = ctx.backend('loss-H-d')
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10)
    h.query('INSERT INTO %s VALUES (1)' % table)
    [node] = ctx.zi.wait_contenders(res, 1)
    ctx.kz.delete(node.path)

    rows = h.query('SELECT state FROM zk_locks WHERE resource = %s', [res])
    assert rows == [('lost',)], rows
    e = expect_error(h, 'COMMIT', '40001', 'COMMIT after the node was deleted')
    assert_lost(e, 'exclusive zklock on "%s" was lost' % res,
                deleted_detail(node.path), RERUN_HINT)
    assert count_rows(ctx, table) == 0


def test_deleted_session_lock_fails_read_only_commit(ctx):
    """A session-level lock whose node another client deleted: even a
    read-only transaction (BEGIN; SELECT 1; COMMIT) fails to commit with
    40001, every time, naming the resource, with a HINT to acknowledge;
    zk_unlock_all() acknowledges, and the next commit works."""
    res = 'loss-deleted-session-ro'
    h = ctx.backend('loss-H-ro')
    token_of(h.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 10)
    [node] = ctx.zi.wait_contenders(res, 1)
    ctx.kz.delete(node.path)
    for attempt in (1, 2):
        h.query('BEGIN')
        assert h.scalar('SELECT 1') == 1
        e = expect_error(h, 'COMMIT', '40001',
                         'read-only COMMIT #%d with the lost session lock'
                         % attempt)
        assert_lost(e, 'exclusive zklock on "%s" was lost' % res,
                    deleted_detail(node.path), ack_hint('zk_unlock', res))
    h.query('SELECT zk_unlock_all()')
    assert h.query('SELECT count(*) FROM zk_locks') == [(0,)]
    h.query('BEGIN')
    assert h.scalar('SELECT 1') == 1
    h.query('COMMIT')
    assert h.scalar('SELECT lost_locks FROM zk_status()') >= 1
    ctx.zi.wait_contenders(res, 0)


def test_several_locks_lost_at_once(ctx):
    """Three locks lost at once (their nodes deleted by another client):
    the COMMIT names one and counts the others.  The session-level one is
    named, with its HINT to acknowledge (a rerun alone would fail again);
    once it is acknowledged, the next COMMIT names one of the two
    transaction-level ones (re-taken) with the HINT to run again.  A
    shared lock's HINT names zk_unlock_shared."""
    base = 'loss-several'
    xs = [base + '-a', base + '-b']
    s = base + '-s'
    h = ctx.backend('loss-H-several')
    token_of(h.submit('SELECT zk_session_lock_shared(%s)', [s]), 10)
    h.query('BEGIN')
    for res in xs:
        token_of(h.submit(LOCK_X, [res, LONG]), 10)
    for res in xs + [s]:
        [node] = ctx.zi.wait_contenders(res, 1)
        ctx.kz.delete(node.path)
        if res == s:
            s_node = node.path
    e = expect_error(h, 'COMMIT', '40001', 'COMMIT with three locks lost')
    assert_lost(e, 'shared zklock on "%s" and 2 other zklock locks were lost'
                % s, deleted_detail(s_node), ack_hint('zk_unlock_shared', s))
    h.query('SELECT zk_unlock_all()')

    h.query('BEGIN')
    for res in xs:
        token_of(h.submit(LOCK_X, [res, LONG]), 10)
    nodes = {}
    for res in xs:
        [node] = ctx.zi.wait_contenders(res, 1)
        ctx.kz.delete(node.path)
        nodes[res] = node.path
    e = expect_error(h, 'COMMIT', '40001', 'COMMIT with two locks lost')
    m = re.fullmatch(r'exclusive zklock on "(%s|%s)" and 1 other zklock '
                     r'lock were lost' % tuple(xs),
                     e.diag.message_primary or '')
    assert m, str(e)
    assert_lost(e, e.diag.message_primary, deleted_detail(nodes[m.group(1)]),
                RERUN_HINT)
    for res in xs + [s]:
        ctx.zi.wait_contenders(res, 0)


def test_relock_of_lost_lock_names_it(ctx):
    """Locking again (re-entrantly) a lock whose node was deleted fails
    with the same 40001 message as the COMMIT would."""
    res = 'loss-relock'
    h = ctx.backend('loss-H-relock')
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10)
    [node] = ctx.zi.wait_contenders(res, 1)
    ctx.kz.delete(node.path)
    rows = h.query('SELECT state FROM zk_locks WHERE resource = %s', [res])
    assert rows == [('lost',)], rows
    e = expect_error(h, LOCK_X, '40001', 're-lock of the lost lock',
                     [res, LONG])
    assert_lost(e, 'exclusive zklock on "%s" was lost' % res,
                deleted_detail(node.path), RERUN_HINT)
    h.query('ROLLBACK')


def test_waiter_loses_its_own_node(ctx):
    """A waiter's own node goes while it waits.  Deleted by another
    client: the waiter must fail with 55000 (object not in prerequisite
    state; 55P03 would mean a timeout), never be granted a lock that has
    no node (anyone could take it then), both when one contender is
    ahead of it (the grant without a new listing, with a watch on its
    own node: it fails at once, while the holder still holds) and when
    two are (no own watch: it fails once the contenders ahead of it have
    released, at the listing that follows).  Frozen past the
    session timeout: it fails with 08006 (connection failure: the
    session expired).  Either way it leaves no node, and the same
    backend locks again afterwards.  (55000 is pinned to the code the C
    is moving to.)"""
    res = 'loss-waiter-node'

    def variant(how, ahead, sqlstate, label, backends):
        hs = [ctx.backend('loss-WN-H%d-%s' % (i, how)) for i in range(ahead)]
        w = ctx.backend('loss-WN-W-%s-%d' % (how, ahead))
        backends.extend(hs + [w])
        hs[0].query('BEGIN')
        token_of(hs[0].submit(LOCK_X, [res, LONG]), 10, 'holder')
        futs = []
        for i, x in enumerate(hs[1:]):
            x.query('BEGIN')
            futs.append(x.submit(LOCK_X, [res, LONG]))
            ctx.wait_state(x)
            ctx.zi.wait_contenders(res, i + 2)
        w.query('BEGIN')
        fut = w.submit(LOCK_X, [res, LONG])
        ctx.wait_state(w)
        mine = ctx.zi.wait_contenders(res, ahead + 1)[-1]
        if how == 'deleted' and ahead == 1:
            # its own watch fires: 55000 at once, the holder still holds
            ctx.kz.delete(mine.path)
            ctx.zi.wait_contenders(res, ahead)
            expect_sqlstate(fut, sqlstate, 15,
                            '%s: waiter, holder still holding' % label)
            hs[0].query('COMMIT')
        elif how == 'deleted':
            ctx.kz.delete(mine.path)
            ctx.zi.wait_contenders(res, ahead)
            still_waiting([fut], what='%s: waiter, holder still holding'
                          % label)
            for i, x in enumerate(hs):
                if i > 0:
                    token_of(futs[i - 1], 10, '%s: contender #%d' % (label, i))
                x.query('COMMIT')
        else:
            os.kill(w.pid, signal.SIGSTOP)
            try:
                # the server expires the frozen waiter's session: its node
                # goes (the holder still holds)
                wait_until(lambda: ctx.kz.exists(mine.path) is None,
                           ctx.session_timeout + 15,
                           'the frozen waiter\'s session to expire',
                           interval=0.2)
            finally:
                os.kill(w.pid, signal.SIGCONT)
        try:
            e = expect_sqlstate(fut, sqlstate, ctx.session_timeout + 15,
                                'waiter whose node was %s' % label)
        except AssertionError as failure:
            if not fut.done() or fut.exception() is not None:
                raise
            # granted: show what that means
            other = ctx.backend('loss-WN-other')
            backends.append(other)
            other.query('BEGIN')
            also = other.scalar('SELECT zk_try_lock_exclusive(%s)', [res])
            rows = w.query('SELECT state, node FROM zk_locks')
            other.query('ROLLBACK')
            raise AssertionError(
                '%s; its zk_locks: %r; another backend\'s try then %s'
                % (failure, rows, 'got the lock too: two holders at once'
                   if also else 'returned false')) from None
        assert (res if how == 'deleted' else 'expired') in str(e), str(e)
        w.query('ROLLBACK')
        if how == 'expired':
            hs[0].query('COMMIT')
        ctx.zi.wait_contenders(res, 0)
        w.query('BEGIN')
        token_of(w.submit(LOCK_X, [res, '10 seconds']), 15,
                 '%s: the same waiter locking afterwards' % label)
        w.query('COMMIT')
        ctx.zi.wait_contenders(res, 0)

    # every variant runs, so that one failure does not hide the others
    failures = []
    for how, ahead, sqlstate in (('deleted', 1, '55000'),
                                 ('deleted', 2, '55000'),
                                 ('expired', 1, '08006')):
        label = '%s, %d ahead' % (how, ahead)
        backends = []
        try:
            variant(how, ahead, sqlstate, label, backends)
        except AssertionError as e:
            failures.append(str(e))
            for b in backends:          # their nodes go with their sessions
                b.close(timeout=5)
            ctx.zi.wait_contenders(res, 0)
    assert not failures, '\n'.join(failures)


def test_verify_at_commit_catches_unnoticed_deletion(ctx):
    """zk_locks is not consulted: the loss is found by the pre-commit
    check alone (zklock.cancel_on_loss off, so that no watch tells the
    backend first).  With zklock.verify_at_commit off as well the same
    COMMIT goes through (the documented trade-off); with verify_at_commit
    off and cancel_on_loss on, the held node's watch has told the backend,
    and the COMMIT fails without a round trip."""
    res, table = 'loss-verify', 'loss_rows_v'
    make_table(ctx, table)
    h = ctx.backend('loss-H-v')
    for verify, cancel, sqlstate in (('on', 'off', '40001'),
                                     ('off', 'off', None),
                                     ('off', 'on', '40001')):
        h.query('SET zklock.verify_at_commit = %s' % verify)
        h.query('SET zklock.cancel_on_loss = %s' % cancel)
        h.query('BEGIN')
        token_of(h.submit(LOCK_X, [res, LONG]), 10)
        h.query('INSERT INTO %s VALUES (1)' % table)
        [node] = ctx.zi.wait_contenders(res, 1)
        before = h.scalar('SELECT lost_locks FROM zk_status()')
        ctx.kz.delete(node.path)
        if cancel == 'on':
            # the watch's event reached the backend (zk_status counts it)
            wait_until(lambda: h.scalar('SELECT lost_locks FROM '
                                        'zk_status()') > before, 10,
                       'the loss counted from the watch')
        if sqlstate:
            expect_error(h, 'COMMIT', sqlstate,
                         'COMMIT with verify %s, cancel_on_loss %s'
                         % (verify, cancel))
            assert count_rows(ctx, table) == 0
        else:
            h.query('COMMIT')
            assert count_rows(ctx, table) == 1
            h.query('TRUNCATE %s' % table)
    h.query('RESET zklock.verify_at_commit')
    h.query('RESET zklock.cancel_on_loss')


def test_fencing_tokens_increase(ctx):
    """Tokens strictly increase over grants of one lock (handoffs between
    backends) and across locks."""
    a, b = ctx.backend('fence-A'), ctx.backend('fence-B')
    tokens = []
    for i in range(6):
        who = (a, b)[i % 2]
        res = 'fence-one' if i < 4 else 'fence-other-%d' % i
        who.query('BEGIN')
        tokens.append(token_of(who.submit(LOCK_X, [res, '10 seconds']), 15))
        who.query('COMMIT')
    assert all(x < y for x, y in zip(tokens, tokens[1:])), tokens

    # a waiter's token is greater than the token of the holder it waited for
    a.query('BEGIN')
    ta = token_of(a.submit(LOCK_X, ['fence-one', LONG]), 10)
    b.query('BEGIN')
    fb = b.submit(LOCK_X, ['fence-one', LONG])
    ctx.wait_state(b)
    a.query('COMMIT')
    tb = token_of(fb, 10)
    b.query('COMMIT')
    assert tokens[-1] < ta < tb, (tokens[-1], ta, tb)


def test_lock_queue_across_clients(ctx):
    """zk_lock_queue shows the holder then the waiters in order: two
    backends and a kazoo client (kazoo's Lock told to see zklock's node
    names), each with its own data as owner."""
    from kazoo.recipe.lock import Lock
    res = 'queue-mixed'
    parent = ctx.zi.parent_path(res)
    a, b = ctx.backend('queue-A'), ctx.backend('queue-B')
    viewer = ctx.backend('queue-viewer')

    a.query('BEGIN')
    token_of(a.submit(LOCK_X, [res, LONG]), 10)
    b.query('BEGIN')
    fb = b.submit(LOCK_X, [res, LONG])
    ctx.wait_state(b)
    ctx.zi.wait_contenders(res, 2)

    klock = Lock(ctx.kz, parent, identifier='kazoo-service-42',
                 extra_lock_patterns=('__WRIT__', '__READ__'))
    kfut = concurrent.futures.Future()      # kazoo's acquire, as for SQL

    def kazoo_acquire():
        try:
            kfut.set_result(klock.acquire(timeout=60))
        except BaseException as e:          # reported by the future
            kfut.set_exception(e)
    t = threading.Thread(target=kazoo_acquire, daemon=True)
    t.start()
    kazoo_session = ctx.kz.client_id[0]
    try:
        ctx.zi.wait_contenders(res, 3)
        q = viewer.query('SELECT position, mode, holding, owner, node '
                         'FROM zk_lock_queue(%s) ORDER BY position', [res])
        assert [r[0] for r in q] == [1, 2, 3], q
        assert [r[2] for r in q] == [True, False, False], q
        assert 'pid=%d' % a.pid in q[0][3], q[0]
        assert 'pid=%d' % b.pid in q[1][3], q[1]
        assert q[2][3] == 'kazoo-service-42', q[2]
        assert q[2][4].endswith('__lock__' + q[2][4][-10:]), q[2]
        # kazoo blocks on a watch of its predecessor, B's node
        node_b = parent + '/' + q[1][4]
        watched_by(ctx, kazoo_session, parent, node_b)
        still_waiting([kfut], what='kazoo while A holds')

        a.query('COMMIT')
        token_of(fb, 10, 'B after A')
        q = viewer.query('SELECT position, holding, owner FROM '
                         'zk_lock_queue(%s) ORDER BY position', [res])
        assert [(r[0], r[1]) for r in q] == [(1, True), (2, False)], q
        assert 'pid=%d' % b.pid in q[0][2]
        # A's release is not kazoo's business: it still waits on B's node
        watched_by(ctx, kazoo_session, parent, node_b)
        still_waiting([kfut], what='kazoo while B holds')

        b.query('COMMIT')
        assert result(kfut, 20, 'kazoo acquire after B') is True
        q = viewer.query('SELECT position, holding, owner FROM '
                         'zk_lock_queue(%s)', [res])
        assert q == [(1, True, 'kazoo-service-42')], q
    finally:
        if not kfut.done():
            klock.cancel()                  # acquire raises CancelledError
        try:
            got = kfut.result(30)
        except Exception:
            got = False
        if got:
            klock.release()
        t.join(10)
    ctx.zi.wait_contenders(res, 0)
    assert viewer.query('SELECT * FROM zk_lock_queue(%s)', [res]) == []


def watched_by(ctx, session, parent, node, timeout=10):
    """Wait until ZooKeeper session `session` watches `node` and nothing
    else under the lock parent (wchp); returns True."""
    last = {}

    def ok():
        wchp = ctx.zk.watches_by_path()
        last['mine'] = {p for p, ss in wchp.items() if session in ss
                        and (p == parent or p.startswith(parent + '/'))}
        return last['mine'] == {node}
    try:
        return wait_until(ok, timeout, 'session 0x%x to watch %s'
                          % (session, node), interval=0.1)
    except TimeoutError as e:
        raise AssertionError('%s; it watches %s' % (
            e, sorted(last.get('mine', ())) or 'nothing')) from None


def test_status(ctx):
    """zk_status: no session before the first call, then connected with a
    hex session id that ZooKeeper also reports, the negotiated timeout,
    the server, and counters."""
    b = ctx.backend('status')
    row = b.query('SELECT state, session_id, locks_held, grants FROM zk_status()')
    assert row == [('none', None, 0, 0)], row

    b.query('BEGIN')
    token_of(b.submit(LOCK_X, ['status-a', '10 seconds']), 10)
    token_of(b.submit('SELECT zk_lock_shared(%s)', ['status-b']), 10)
    (state, sid, timeout, server, held, grants, waits, lost,
     reconnects, nudges, log_lines, log_suppressed) = \
        b.query('SELECT * FROM zk_status()')[0]
    assert state == 'connected'
    assert sid.startswith('0x') and int(sid, 16) == \
        ctx.zi.contenders('status-a')[0].session_id
    assert timeout.total_seconds() == ctx.session_timeout, timeout
    assert server == ctx.zk.connect_string, (server, ctx.zk.connect_string)
    assert (held, grants, waits, lost) == (2, 2, 0, 0)
    # (nudges are counted exactly by test_proxy's test m)
    assert reconnects == 0 and isinstance(nudges, int), (reconnects, nudges)
    # a healthy session: libzookeeper logged nothing at level error
    # (test_outage counts an outage's lines)
    assert (log_lines, log_suppressed) == (0, 0), (log_lines, log_suppressed)
    b.query('COMMIT')
    assert b.scalar('SELECT locks_held FROM zk_status()') == 0


def test_settings_change_reconnects(ctx):
    """A new zklock.session_timeout takes effect at the next call made
    while no lock is held, not while one is."""
    b = ctx.backend('reconnect')
    token_of(b.submit('SELECT zk_session_lock_exclusive(%s)', ['recon']), 10)
    sid1, t1 = b.query('SELECT session_id, session_timeout FROM zk_status()')[0]
    b.query("SET zklock.session_timeout = '%ds'" % (ctx.session_timeout + 2))
    token_of(b.submit('SELECT zk_session_lock_shared(%s)', ['recon-2']), 10)
    sid2 = b.scalar('SELECT session_id FROM zk_status()')
    assert sid2 == sid1, 'reconnected while holding locks'

    b.query('SELECT zk_unlock_all()')
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, ['recon', '10 seconds']), 10)
    sid3, t3 = b.query('SELECT session_id, session_timeout FROM zk_status()')[0]
    b.query('COMMIT')
    assert sid3 != sid1, 'settings change did not open a new session'
    assert t3.total_seconds() == ctx.session_timeout + 2, (t1, t3)
    b.query('RESET zklock.session_timeout')


def test_update_from_1_3_keeps_status_grants(ctx):
    """zklock 1.4 adds the nudges column to zk_status(): the 1.3 function
    keeps working on the new library until the update (nine columns), and
    ALTER EXTENSION zklock UPDATE gives the same functions as a fresh
    install while keeping the EXECUTE grants given on zk_status() (to a
    role with grant option and to PUBLIC)."""
    pg = ctx.pg
    role = 'zklock_status_viewer'
    for db in ('zklock_upd14', 'zklock_fresh14'):
        pg.psql('DROP DATABASE IF EXISTS %s' % db)
        pg.psql('CREATE DATABASE %s' % db)
    pg.psql('DROP ROLE IF EXISTS %s' % role)
    pg.psql('CREATE ROLE %s' % role)
    pg.psql("CREATE EXTENSION zklock VERSION '1.3'", dbname='zklock_upd14')
    pg.psql('GRANT EXECUTE ON FUNCTION zk_status() TO %s WITH GRANT OPTION'
            % role, dbname='zklock_upd14')
    pg.psql('GRANT EXECUTE ON FUNCTION zk_status() TO PUBLIC',
            dbname='zklock_upd14')
    acl = ("SELECT array_agg(coalesce(r.rolname, 'PUBLIC') || ':' || "
           "a.is_grantable ORDER BY 1) FROM pg_proc p, aclexplode(p.proacl) a "
           "LEFT JOIN pg_roles r ON r.oid = a.grantee "
           "WHERE p.oid = 'zk_status()'::regprocedure "
           "AND a.grantee <> p.proowner")
    q = ("SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid) "
         "|| ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p "
         "JOIN pg_depend d ON d.objid = p.oid JOIN pg_extension e "
         "ON e.oid = d.refobjid AND e.extname = 'zklock' ORDER BY 1")
    upd = ctx.backend('status-upd', dbname='zklock_upd14')
    fresh = None
    try:
        old = upd.query('SELECT * FROM zk_status()')
        assert len(old[0]) == 9, old
        before = upd.scalar(acl)
        assert sorted(before) == ['PUBLIC:false', role + ':true'], before
        upd.query("ALTER EXTENSION zklock UPDATE TO '1.4'")
        assert upd.scalar("SELECT extversion FROM pg_extension "
                          "WHERE extname = 'zklock'") == '1.4'
        assert upd.scalar(acl) == before
        pg.psql("CREATE EXTENSION zklock VERSION '1.4'",
                dbname='zklock_fresh14')
        fresh = ctx.backend('status-fresh', dbname='zklock_fresh14')
        assert upd.query(q) == fresh.query(q)
        upd.query('SET ROLE %s' % role)
        row = upd.query('SELECT state, nudges FROM zk_status()')
        assert row == [('none', 0)], row
        upd.query('RESET ROLE')
    finally:
        upd.close()
        if fresh is not None:
            fresh.close()
        for db in ('zklock_upd14', 'zklock_fresh14'):
            pg.psql('DROP DATABASE %s WITH (FORCE)' % db)
        pg.psql('DROP ROLE %s' % role)


def test_update_from_every_version_to_1_6(ctx):
    """zklock 1.6 adds zookeeper_log_lines and zookeeper_log_suppressed to
    zk_status(): ALTER EXTENSION zklock UPDATE from every released
    version gives the functions of a fresh install, keeps the EXECUTE
    grants given on zk_status(), and the new columns read; a 1.5
    zk_status() keeps working on the new library until the update."""
    pg = ctx.pg
    role = 'zklock_status_viewer16'
    pg.psql('DROP ROLE IF EXISTS %s' % role)
    pg.psql('CREATE ROLE %s' % role)
    q = ("SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid) "
         "|| ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p "
         "JOIN pg_depend d ON d.objid = p.oid JOIN pg_extension e "
         "ON e.oid = d.refobjid AND e.extname = 'zklock' ORDER BY 1")
    acl = ("SELECT array_agg(coalesce(r.rolname, 'PUBLIC') || ':' || "
           "a.is_grantable ORDER BY 1) FROM pg_proc p, aclexplode(p.proacl) a "
           "LEFT JOIN pg_roles r ON r.oid = a.grantee "
           "WHERE p.oid = 'zk_status()'::regprocedure "
           "AND a.grantee <> p.proowner")
    versions = ['1.0', '1.1', '1.2', '1.3', '1.4', '1.5']
    fresh_db = 'zklock_fresh16'
    dbs = {v: 'zklock_upd16_%s' % v.replace('.', '') for v in versions}
    for db in [fresh_db] + list(dbs.values()):
        pg.psql('DROP DATABASE IF EXISTS %s' % db)
        pg.psql('CREATE DATABASE %s' % db)
    backends = []
    try:
        pg.psql("CREATE EXTENSION zklock VERSION '1.6'", dbname=fresh_db)
        fresh = ctx.backend('status-fresh16', dbname=fresh_db)
        backends.append(fresh)
        want = fresh.query(q)
        for v in versions:
            db = dbs[v]
            pg.psql("CREATE EXTENSION zklock VERSION '%s'" % v, dbname=db)
            pg.psql('GRANT EXECUTE ON FUNCTION zk_status() TO %s WITH '
                    'GRANT OPTION' % role, dbname=db)
            upd = ctx.backend('status-upd16', dbname=db)
            backends.append(upd)
            if v == '1.5':
                assert len(upd.query('SELECT * FROM zk_status()')[0]) == 10
            before = upd.scalar(acl)
            upd.query("ALTER EXTENSION zklock UPDATE TO '1.6'")
            assert upd.scalar("SELECT extversion FROM pg_extension "
                              "WHERE extname = 'zklock'") == '1.6', v
            assert upd.query(q) == want, v
            assert upd.scalar(acl) == before, v
            upd.query('SET ROLE %s' % role)
            row = upd.query('SELECT state, zookeeper_log_lines, '
                            'zookeeper_log_suppressed FROM zk_status()')
            assert row == [('none', 0, 0)], (v, row)
            upd.query('RESET ROLE')
    finally:
        for b in backends:
            b.close()
        for db in [fresh_db] + list(dbs.values()):
            pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
        pg.psql('DROP ROLE %s' % role)
