"""
Multi-session tests: several real backends (psycopg2, one thread each)
contend for zklock locks, and ZooKeeper itself is checked with kazoo and
the `wchp` four letter word, not only the extension's own view.

Run by pytest (make test, see test/conftest.py): each test_*(ctx) is one
test, run in definition order (the last one checks that nothing was left
behind).  See conftest.TestContext for ctx.  Every test uses its own
resource name and bounds every wait.

In short, this module checks: blocking, handoff order, try, timeouts,
cancel, terminated holder, a queue of ten (each waiter watches only its
predecessor, checked with `wchp`), shared/exclusive, session scope,
unreachable ensemble; ZooKeeper itself is inspected with kazoo.
"""

import concurrent.futures
import re
import subprocess
import time

import psycopg2

import harness
from harness import wait_until

TIMEOUT = 120                   # seconds per test (a pytest-timeout bound)

LOCK_X = 'SELECT zk_lock_exclusive(%s, %s::interval)'
LOCK_S = 'SELECT zk_lock_shared(%s, %s::interval)'
TRY_X = 'SELECT zk_try_lock_exclusive(%s)'
TRY_S = 'SELECT zk_try_lock_shared(%s)'
LONG = '60 seconds'             # a wait that the test ends well before

UUID = r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def result(fut, timeout, what='statement'):
    """The rows of a submitted statement, waiting at most `timeout` s."""
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        raise AssertionError('%s still running after %.1f s'
                             % (what, timeout)) from None


def token_of(fut, timeout, what='lock'):
    rows = result(fut, timeout, what)
    tok = rows[0][0]
    assert isinstance(tok, int) and tok > 0, \
        '%s returned %r, expected a positive fencing token' % (what, tok)
    return tok


def expect_sqlstate(fut, sqlstate, timeout, what='statement'):
    """Wait for a submitted statement to fail with `sqlstate`; returns
    the psycopg2 error."""
    try:
        rows = fut.result(timeout)
    except concurrent.futures.TimeoutError:
        raise AssertionError('%s still running after %.1f s, expected '
                             'SQLSTATE %s' % (what, timeout, sqlstate)) \
            from None
    except psycopg2.Error as e:
        assert e.pgcode == sqlstate, (
            '%s failed with SQLSTATE %s, expected %s: %s'
            % (what, e.pgcode, sqlstate, e))
        return e
    raise AssertionError('%s succeeded (%r), expected SQLSTATE %s'
                         % (what, rows, sqlstate))


def still_waiting(futs, settle=0.3, what='waiter'):
    """Assert that none of the futures has finished (after `settle` s, to
    give a wrong grant time to show)."""
    time.sleep(settle)
    for i, f in enumerate(futs):
        if f.done():
            try:
                outcome = 'got %r' % (f.result(0),)
            except Exception as e:
                outcome = 'failed: %s' % e
            raise AssertionError('%s #%d should still wait but %s'
                                 % (what, i + 1, outcome))


def stays(pred, seconds=0.5, what='condition'):
    """Assert that pred() holds now and still holds `seconds` later (a
    late create must not bring a node back)."""
    assert pred(), what
    time.sleep(seconds)
    assert pred(), '%s no longer holds after %.1f s' % (what, seconds)


def node_survives(ctx, b, res, node, what):
    """`node` still exists, checked after every request backend `b` sent
    before: zk_lock_queue() lists the lock parent on b's own ZooKeeper
    session, and ZooKeeper answers a session's requests in order, so a
    delete b sent without waiting (a wrong release) has been carried out
    by the time the listing comes back.  A one-shot kazoo exists() could
    run before such a delete."""
    names = [r[0] for r in b.query(
        'SELECT node FROM zk_lock_queue(%s)', [res])]
    assert node.name in names, '%s: node %s is gone (queue %r)' \
        % (what, node.name, names)
    assert ctx.kz.exists(node.path) is not None, '%s: %s is gone' \
        % (what, node.path)


def only_node(ctx, res, name):
    """True if the lock's only contender is the node called `name`."""
    cs = ctx.zi.contenders(res)
    return len(cs) == 1 and cs[0].name == name


def watched_under(wchp, parent, session):
    """Paths at or under `parent` on which `session` has a watch."""
    return {p for p, sessions in wchp.items()
            if session in sessions
            and (p == parent or p.startswith(parent + '/'))}


def own_nodes(ctx, parent):
    """{session id: paths of its own contender nodes under parent}."""
    own = {}
    for c in ctx.zi.contenders(parent=parent):
        own.setdefault(c.session_id, set()).add(c.path)
    return own


def check_watches(ctx, parent, expect, timeout=10):
    """Wait until every session in `expect` ({session id: path it should
    watch}) watches exactly that one node under the lock parent, besides
    its own node (a waiter with one contender ahead watches that too: see
    doc/02-how-it-works.md), and nobody watches the lock parent itself
    (no herd effect).

    wchp shows only data watches (exists/getData).  getChildren watches
    are only counted by the server (see ZooKeeper.watch_counts), not
    listed, so "nobody watches the parent's children" is checked as "no
    child watch at all on the server": during these tests the only
    ZooKeeper sessions are the test's own backends and the runner's kazoo
    client, which sets no watch."""
    last = {}

    def ok():
        wchp = ctx.zk.watches_by_path()
        last['wchp'] = wchp
        last['counts'] = counts = ctx.zk.watch_counts()
        if wchp.get(parent) or counts['child']:
            return False
        own = own_nodes(ctx, parent)
        return all(watched_under(wchp, parent, s) - own.get(s, set()) == {p}
                   for s, p in expect.items())
    try:
        wait_until(ok, timeout, 'the expected ZooKeeper watches',
                   interval=0.1)
    except TimeoutError:
        wchp = last.get('wchp', {})
        problems = []
        if wchp.get(parent):
            problems.append('lock parent %s watched by sessions %s' % (
                parent, sorted(hex(s) for s in wchp[parent])))
        child = last.get('counts', {}).get('child')
        if child:
            problems.append('%d getChildren watch(es) on the server (wchp '
                            'cannot say where): waiters must watch their '
                            'predecessor, never the children list' % child)
        own = own_nodes(ctx, parent)
        for s, p in expect.items():
            got = watched_under(wchp, parent, s)
            if got - own.get(s, set()) != {p}:
                problems.append('session %s watches %s, expected only %s'
                                % (hex(s), sorted(got) or 'nothing', p))
        raise AssertionError('wrong watches after %d s:\n  %s'
                             % (timeout, '\n  '.join(problems))) from None


def lock_row(backend, res):
    """This backend's zk_locks rows for one resource."""
    return backend.query(
        'SELECT mode, scope, count, node, fencing_token, state '
        'FROM zk_locks WHERE resource = %s ORDER BY mode', [res])


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_a_blocking_handoff(ctx):
    """A holds; B blocks (wait event Extension); A commits; B gets the
    lock with a greater fencing token."""
    res = 'ms-a-handoff'
    a, b = ctx.backend('ms-a-A'), ctx.backend('ms-a-B')

    a.query('BEGIN')
    tok_a = token_of(a.submit(LOCK_X, [res, LONG]), 10, 'A lock')
    [node_a] = ctx.zi.wait_contenders(res, 1)
    assert node_a.mode == 'exclusive'
    assert node_a.czxid == tok_a, \
        'token %d is not the czxid %d of the node' % (tok_a, node_a.czxid)

    b.query('BEGIN')
    fut = b.submit(LOCK_X, [res, LONG])
    ctx.wait_state(b)
    ctx.zi.wait_contenders(res, 2)
    still_waiting([fut], what='B')

    a.query('COMMIT')
    tok_b = token_of(fut, 10, 'B lock after A committed')
    assert tok_b > tok_a, 'B token %d not > A token %d' % (tok_b, tok_a)
    [node_b] = ctx.zi.wait_contenders(res, 1)     # A's node is gone
    assert node_b.name != node_a.name and node_b.czxid == tok_b

    b.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_a2_znode_layout(ctx):
    """The nodes in ZooKeeper: lock parent path (encoded resource), node
    names, node data, token = czxid, zk_locks row, re-entrancy."""
    res = 'ms-layout/nightly job'
    res_s = 'ms-layout/shared one'
    parent = ctx.root + '/ms-layout/nightly%20job'
    assert ctx.zi.parent_path(res) == parent
    b = ctx.backend('ms-layout')

    b.query('BEGIN')
    tok = token_of(b.submit(LOCK_X, [res, LONG]), 10)
    [c] = ctx.zi.wait_contenders(res, 1)
    assert c.parent == parent
    assert re.fullmatch('_c_' + UUID + r'-__WRIT__\d{10}', c.name), c.name
    assert c.session_id, 'lock node %s is not ephemeral' % c.path
    assert c.czxid == tok
    data = ctx.zi.data(c.path) or ''
    assert data.strip() and '\n' not in data.strip(), \
        'node data should be one line naming the owner: %r' % data
    assert str(b.pid) in data, 'node data %r lacks the pid %d' % (data, b.pid)
    assert lock_row(b, res) == [('exclusive', 'transaction', 1, c.path, tok,
                                 'held')], lock_row(b, res)

    # re-entrant: same node, same token, count 2
    assert token_of(b.submit(LOCK_X, [res, LONG]), 10) == tok
    assert len(ctx.zi.contenders(res)) == 1
    assert lock_row(b, res)[0][2] == 2

    tok_s = token_of(b.submit(LOCK_S, [res_s, LONG]), 10)
    [s] = ctx.zi.wait_contenders(res_s, 1)
    assert re.fullmatch('_c_' + UUID + r'-__READ__\d{10}', s.name), s.name
    assert s.czxid == tok_s and tok_s > tok

    b.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)
    ctx.zi.wait_contenders(res_s, 0)
    assert b.query('SELECT count(*) FROM zk_locks') == [(0,)]


def test_b_handoff_order(ctx):
    """Five waiters queued one after another are granted in arrival
    order, one per release."""
    res = 'ms-b-order'
    h = ctx.backend('ms-b-H')
    h.query('BEGIN')
    prev = token_of(h.submit(LOCK_X, [res, LONG]), 10)
    ctx.zi.wait_contenders(res, 1)

    waiters = []
    for i in range(5):
        w = ctx.backend('ms-b-W%d' % (i + 1))
        w.query('BEGIN')
        f = w.submit(LOCK_X, [res, LONG])
        ctx.zi.wait_contenders(res, i + 2)     # queued before the next
        ctx.wait_state(w)
        waiters.append((w, f))

    h.query('COMMIT')
    for i, (w, f) in enumerate(waiters):
        tok = token_of(f, 10, 'waiter #%d' % (i + 1))
        assert tok > prev, 'tokens out of order: %d after %d' % (tok, prev)
        head = ctx.zi.contenders(res)[0]
        assert head.czxid == tok, 'waiter #%d holds, but the head of the ' \
            'queue is %r' % (i + 1, head)
        still_waiting([g for _, g in waiters[i + 1:]], what='later waiter')
        prev = tok
        w.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_c_try_variants(ctx):
    """zk_try_lock_*: false while an exclusive is held elsewhere, true when
    free; shared+shared coexist; exclusive fails against shared; a failed
    try leaves no contender behind."""
    res = 'ms-c-try'
    a, b, c = (ctx.backend('ms-c-%s' % n) for n in 'ABC')

    a.query('BEGIN')
    assert a.scalar(TRY_X, [res]) is True
    [held] = ctx.zi.wait_contenders(res, 1)
    assert b.scalar(TRY_X, [res]) is False
    assert b.scalar(TRY_S, [res]) is False
    wait_until(lambda: only_node(ctx, res, held.name), 5,
               'the failed tries to remove their nodes')
    stays(lambda: only_node(ctx, res, held.name),
          what='only the holder is left after failed tries')
    a.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)

    # free: try exclusive succeeds and holds until COMMIT
    b.query('BEGIN')
    assert b.scalar(TRY_X, [res]) is True
    ctx.zi.wait_contenders(res, 1)
    b.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)

    # shared + shared coexist, exclusive fails against them
    a.query('BEGIN')
    b.query('BEGIN')
    assert a.scalar(TRY_S, [res]) is True
    assert b.scalar(TRY_S, [res]) is True
    readers = ctx.zi.wait_contenders(res, 2)
    assert [r.mode for r in readers] == ['shared', 'shared']
    assert c.scalar(TRY_X, [res]) is False
    names = sorted(r.name for r in readers)
    wait_until(lambda: sorted(x.name for x in ctx.zi.contenders(res))
               == names, 5, 'the failed try to remove its node')
    a.query('COMMIT')
    assert c.scalar(TRY_X, [res]) is False       # b still reads
    b.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)
    assert c.scalar(TRY_X, [res]) is True        # free (implicit xact)
    ctx.zi.wait_contenders(res, 0)


def test_d_timeouts(ctx):
    """The timeout argument and lock_timeout end a wait with 55P03,
    statement_timeout with 57014, after about 1 s; the waiter leaves no
    node; the same backend locks fine afterwards."""
    res = 'ms-d-timeouts'
    h, w = ctx.backend('ms-d-H'), ctx.backend('ms-d-W')
    variants = [
        ('timeout argument', None,
         "SELECT zk_lock_exclusive(%s, '1 second')", '55P03'),
        ('lock_timeout', 'lock_timeout',
         'SELECT zk_lock_exclusive(%s)', '55P03'),
        ('statement_timeout', 'statement_timeout',
         'SELECT zk_lock_exclusive(%s)', '57014'),
        ('timeout argument, shared', None,
         "SELECT zk_lock_shared(%s, '1 second')", '55P03'),
    ]
    for label, guc, sql, sqlstate in variants:
        h.query('BEGIN')
        token_of(h.submit(LOCK_X, [res, LONG]), 10, 'holder')
        [held] = ctx.zi.wait_contenders(res, 1)
        if guc:
            w.query("SET %s = '1s'" % guc)
        t0 = time.monotonic()
        expect_sqlstate(w.submit(sql, [res]), sqlstate, 15, label)
        elapsed = time.monotonic() - t0
        if guc:
            w.query('RESET %s' % guc)
        assert 0.9 <= elapsed < 10, '%s: wait ended after %.2f s' \
            % (label, elapsed)
        wait_until(lambda: only_node(ctx, res, held.name), 5,
                   '%s: the waiter to remove its node' % label)
        stays(lambda: only_node(ctx, res, held.name),
              what='%s: no node of the waiter' % label)
        assert w.query('SELECT count(*) FROM zk_locks') == [(0,)], label

        h.query('COMMIT')
        w.query('BEGIN')
        token_of(w.submit(LOCK_X, [res, '10 seconds']), 10,
                 '%s: fresh lock by the same backend' % label)
        ctx.zi.wait_contenders(res, 1)
        w.query('COMMIT')
        ctx.zi.wait_contenders(res, 0)


def test_d2_zero_timeout(ctx):
    """A timeout of zero never waits: against a holder the call fails at
    once with 55P03 (not false, unlike the try variants), leaves no node
    and holds nothing; on a free lock, or beside shared holders for a
    shared lock, it is granted with a token."""
    res = 'ms-d2-zero'
    h, w = ctx.backend('ms-d2-H'), ctx.backend('ms-d2-W')
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10, 'holder')
    [held] = ctx.zi.wait_contenders(res, 1)
    # a lock_timeout far longer than the test must not turn 0 into a wait
    w.query("SET lock_timeout = '60s'")
    for label, sql in (
            ('exclusive', "SELECT zk_lock_exclusive(%s, '0')"),
            ('shared', "SELECT zk_lock_shared(%s, '0 seconds')"),
            ('session exclusive',
             "SELECT zk_session_lock_exclusive(%s, '0')"),
            ('session shared', "SELECT zk_session_lock_shared(%s, '0')")):
        t0 = time.monotonic()
        e = expect_sqlstate(w.submit(sql, [res]), '55P03', 10,
                            'timeout 0, %s, lock taken' % label)
        elapsed = time.monotonic() - t0
        # "at once": a round trip or two, far below any wait (a waiting
        # call would run into lock_timeout, 60 s)
        assert elapsed < 2, 'timeout 0 (%s) took %.2f s' % (label, elapsed)
        assert res in str(e), str(e)
        wait_until(lambda: only_node(ctx, res, held.name), 5,
                   'timeout 0 (%s): the refused node to go' % label)
        assert w.query('SELECT count(*) FROM zk_locks') == [(0,)], label
    stays(lambda: only_node(ctx, res, held.name),
          what='only the holder after the refused zero-timeout calls')
    h.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)

    # free: granted, with the node's czxid as token
    w.query('BEGIN')
    tok = token_of(w.submit("SELECT zk_lock_exclusive(%s, '0')", [res]), 10,
                   'timeout 0 on a free lock')
    [c] = ctx.zi.wait_contenders(res, 1)
    assert c.czxid == tok, (c, tok)
    w.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)

    # shared beside a shared holder: granted; exclusive: 55P03
    h.query('BEGIN')
    token_of(h.submit(LOCK_S, [res, LONG]), 10, 'shared holder')
    w.query('BEGIN')
    token_of(w.submit("SELECT zk_lock_shared(%s, '0')", [res]), 10,
             'timeout 0, shared beside a shared holder')
    ctx.zi.wait_contenders(res, 2)
    w.query('COMMIT')
    expect_sqlstate(w.submit("SELECT zk_lock_exclusive(%s, '0')", [res]),
                    '55P03', 10, 'timeout 0, exclusive beside a shared holder')
    h.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)
    w.query('RESET lock_timeout')


def test_e_cancel(ctx):
    """pg_cancel_backend on a waiter gives 57014 and leaves no node."""
    res = 'ms-e-cancel'
    h, w = ctx.backend('ms-e-H'), ctx.backend('ms-e-W')
    h.query('BEGIN')
    token_of(h.submit(LOCK_X, [res, LONG]), 10)
    [held] = ctx.zi.wait_contenders(res, 1)

    fut = w.submit(LOCK_X, [res, LONG])
    ctx.wait_state(w)
    ctx.zi.wait_contenders(res, 2)
    assert ctx.admin.scalar('SELECT pg_cancel_backend(%s)', [w.pid]) is True
    expect_sqlstate(fut, '57014', 10, 'cancelled wait')
    wait_until(lambda: only_node(ctx, res, held.name), 5,
               'the cancelled waiter to remove its node')
    stays(lambda: only_node(ctx, res, held.name),
          what='no node of the cancelled waiter')

    h.query('COMMIT')
    w.query('BEGIN')
    token_of(w.submit(LOCK_X, [res, '10 seconds']), 10, 'lock after cancel')
    w.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_e2_predecessor_gives_up(ctx):
    """H holds, W1 waits behind it and W2 behind W1 (watching W1's node).
    W1 gives up (its timeout, then in a second round pg_cancel_backend):
    W2 keeps waiting, now watches H's node (wchp), and gets the lock as
    soon as H releases."""
    res = 'ms-e2-gives-up'
    parent = ctx.zi.parent_path(res)
    for how in ('timeout', 'cancel'):
        h = ctx.backend('ms-e2-H-' + how)
        w1 = ctx.backend('ms-e2-W1-' + how)
        w2 = ctx.backend('ms-e2-W2-' + how)
        h.query('BEGIN')
        tok_h = token_of(h.submit(LOCK_X, [res, LONG]), 10, 'H')
        [nh] = ctx.zi.wait_contenders(res, 1)
        w1.query('BEGIN')
        # W1's timeout must outlast the set-up below on a slow machine
        f1 = w1.submit(LOCK_X, [res, '6 seconds' if how == 'timeout'
                                else LONG])
        ctx.wait_state(w1)
        n1 = ctx.zi.wait_contenders(res, 2)[1]
        w2.query('BEGIN')
        f2 = w2.submit(LOCK_X, [res, LONG])
        ctx.wait_state(w2)
        n2 = ctx.zi.wait_contenders(res, 3)[2]
        check_watches(ctx, parent, {n1.session_id: nh.path,
                                    n2.session_id: n1.path})
        still_waiting([f1, f2], what='%s: W1/W2' % how)

        if how == 'timeout':
            expect_sqlstate(f1, '55P03', 15, 'W1 (its timeout)')
        else:
            assert ctx.admin.scalar('SELECT pg_cancel_backend(%s)',
                                    [w1.pid]) is True
            expect_sqlstate(f1, '57014', 10, 'W1 (cancelled)')
        w1.query('ROLLBACK')
        wait_until(lambda: [c.name for c in ctx.zi.contenders(res)]
                   == [nh.name, n2.name], 5,
                   '%s: W1 to remove its node' % how)
        # W2 did not take the lock: it now watches the holder
        check_watches(ctx, parent, {n2.session_id: nh.path})
        still_waiting([f2], what='%s: W2 after W1 gave up' % how)
        assert ctx.zi.contenders(res)[0].name == nh.name

        h.query('COMMIT')
        tok_2 = token_of(f2, 10, '%s: W2 after H released' % how)
        assert tok_2 == n2.czxid and tok_2 > tok_h, (tok_2, n2, tok_h)
        [c] = ctx.zi.wait_contenders(res, 1)
        assert c.name == n2.name
        w2.query('COMMIT')
        ctx.zi.wait_contenders(res, 0)


def test_f_terminate_holder(ctx):
    """pg_terminate_backend(holder): its session closes at backend exit,
    its node vanishes at once and the waiter gets the lock well within
    the session timeout."""
    res = 'ms-f-terminate'
    h, w = ctx.backend('ms-f-H'), ctx.backend('ms-f-W')
    h.query('BEGIN')
    tok_h = token_of(h.submit(LOCK_X, [res, LONG]), 10)
    [held] = ctx.zi.wait_contenders(res, 1)

    w.query('BEGIN')
    fut = w.submit(LOCK_X, [res, LONG])
    ctx.wait_state(w)
    ctx.zi.wait_contenders(res, 2)

    t0 = time.monotonic()
    assert ctx.admin.scalar('SELECT pg_terminate_backend(%s)',
                            [h.pid]) is True
    bound = ctx.session_timeout / 2.0
    tok_w = token_of(fut, ctx.session_timeout + 5, 'waiter after terminate')
    elapsed = time.monotonic() - t0
    assert elapsed < bound, ('the waiter got the lock %.2f s after the '
                             'holder was terminated (session timeout %d s):'
                             ' the node was not deleted at backend exit'
                             % (elapsed, ctx.session_timeout))
    assert tok_w > tok_h
    wait_until(lambda: ctx.kz.exists(held.path) is None, 5,
               'the terminated holder\'s node %s to be gone' % held.path)
    [c] = ctx.zi.wait_contenders(res, 1)
    assert c.czxid == tok_w
    w.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_g_queue_of_ten(ctx):
    """Ten waiters behind one holder: each watches exactly its immediate
    predecessor (wchp), nobody watches the lock parent; each release
    grants exactly the next waiter."""
    res = 'ms-g-queue'
    parent = ctx.zi.parent_path(res)
    h = ctx.backend('ms-g-H')
    h.query('BEGIN')
    prev = token_of(h.submit(LOCK_X, [res, LONG]), 10)
    nodes = ctx.zi.wait_contenders(res, 1)       # nodes[k]: k-th in queue

    waiters = []
    for i in range(10):
        w = ctx.backend('ms-g-W%02d' % (i + 1))
        w.query('BEGIN')
        f = w.submit(LOCK_X, [res, LONG])
        cs = ctx.zi.wait_contenders(res, i + 2)
        known = {n.name for n in nodes}
        new = [c for c in cs if c.name not in known]
        assert len(new) == 1 and new[0].name == cs[-1].name, \
            'waiter #%d: expected one new node at the tail, queue is %r' \
            % (i + 1, cs)
        nodes.append(new[0])
        ctx.wait_state(w)
        waiters.append((w, f))

    sessions = [n.session_id for n in nodes]
    assert len(set(sessions)) == 11, 'backends share ZooKeeper sessions?'
    check_watches(ctx, parent,
                  {sessions[k]: nodes[k - 1].path for k in range(1, 11)})

    h.query('COMMIT')
    for i, (w, f) in enumerate(waiters):
        tok = token_of(f, 10, 'waiter #%d' % (i + 1))
        assert tok > prev and tok == nodes[i + 1].czxid, \
            'waiter #%d got token %d, its node has czxid %d' \
            % (i + 1, tok, nodes[i + 1].czxid)
        still_waiting([g for _, g in waiters[i + 1:]], what='later waiter')
        # the others still watch their predecessors, nobody the parent
        check_watches(ctx, parent, {sessions[k]: nodes[k - 1].path
                                    for k in range(i + 2, 11)})
        prev = tok
        w.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_h_shared_exclusive(ctx):
    """W1 held, R2 waiting, W3 queued: releasing W1 grants R2 (W3 still
    waits), releasing R2 grants W3.  Two shared holders coexist."""
    res = 'ms-h-rw'
    parent = ctx.zi.parent_path(res)
    w1, r2, w3 = (ctx.backend('ms-h-%s' % n) for n in ('W1', 'R2', 'W3'))

    w1.query('BEGIN')
    token_of(w1.submit(LOCK_X, [res, LONG]), 10, 'W1')
    ctx.zi.wait_contenders(res, 1)
    r2.query('BEGIN')
    f2 = r2.submit(LOCK_S, [res, LONG])
    ctx.wait_state(r2)
    ctx.zi.wait_contenders(res, 2)
    w3.query('BEGIN')
    f3 = w3.submit(LOCK_X, [res, LONG])
    ctx.wait_state(w3)
    n1, n2, n3 = ctx.zi.wait_contenders(res, 3)
    assert (n1.mode, n2.mode, n3.mode) == ('exclusive', 'shared',
                                           'exclusive')
    # a reader watches the greatest lower writer; a writer its predecessor
    check_watches(ctx, parent, {n2.session_id: n1.path,
                                n3.session_id: n2.path})

    w1.query('COMMIT')
    token_of(f2, 10, 'R2 after W1 released')
    still_waiting([f3], settle=0.5, what='W3')
    r2.query('COMMIT')
    token_of(f3, 10, 'W3 after R2 released')
    w3.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)

    # two shared holders at once
    ra, rb = ctx.backend('ms-h-Ra'), ctx.backend('ms-h-Rb')
    ra.query('BEGIN')
    rb.query('BEGIN')
    token_of(ra.submit(LOCK_S, [res, '10 seconds']), 10, 'Ra')
    token_of(rb.submit(LOCK_S, [res, '10 seconds']), 10,
             'Rb while Ra holds shared')
    readers = ctx.zi.wait_contenders(res, 2)
    assert [r.mode for r in readers] == ['shared', 'shared']
    ra.query('COMMIT')
    rb.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_i_session_scope(ctx):
    """Session locks survive ROLLBACK and COMMIT, show as scope 'session',
    are re-entrant, and are released by zk_unlock* and by disconnect."""
    res = 'ms-i-session'
    res2 = 'ms-i-session-2'
    s, o = ctx.backend('ms-i-S'), ctx.backend('ms-i-O')

    tok = s.scalar('SELECT zk_session_lock_exclusive(%s)', [res])
    [node] = ctx.zi.wait_contenders(res, 1)
    assert node.czxid == tok
    assert lock_row(s, res) == [('exclusive', 'session', 1, node.path, tok,
                                 'held')], lock_row(s, res)

    s.query('BEGIN')
    s.query('SELECT 1')
    s.query('ROLLBACK')
    node_survives(ctx, s, res, node, 'session lock after ROLLBACK')
    s.query('BEGIN')
    s.query('SELECT 1')
    s.query('COMMIT')
    node_survives(ctx, s, res, node, 'session lock after COMMIT')

    # taken again inside a transaction that rolls back: still counts
    s.query('BEGIN')
    assert s.scalar('SELECT zk_session_lock_exclusive(%s)', [res]) == tok
    s.query('ROLLBACK')
    assert lock_row(s, res) == [('exclusive', 'session', 2, node.path, tok,
                                 'held')], lock_row(s, res)
    assert only_node(ctx, res, node.name), 'a second node was created'

    assert o.scalar(TRY_X, [res]) is False
    assert o.scalar(TRY_S, [res]) is False

    assert s.scalar('SELECT zk_unlock(%s)', [res]) is True
    assert lock_row(s, res)[0][2] == 1
    node_survives(ctx, s, res, node, 'zk_unlock of one of two levels')
    assert s.scalar('SELECT zk_unlock(%s)', [res]) is True
    ctx.zi.wait_contenders(res, 0)
    assert lock_row(s, res) == []
    assert s.scalar('SELECT zk_unlock(%s)', [res]) is False  # none held
    assert o.scalar(TRY_X, [res]) is True

    # zk_unlock_shared and zk_unlock_all
    s.scalar('SELECT zk_session_lock_shared(%s)', [res])
    [sn] = ctx.zi.wait_contenders(res, 1)
    assert sn.mode == 'shared'
    assert lock_row(s, res)[0][:3] == ('shared', 'session', 1)
    assert s.scalar('SELECT zk_unlock_shared(%s)', [res]) is True
    ctx.zi.wait_contenders(res, 0)
    assert s.scalar('SELECT zk_try_session_lock_exclusive(%s)', [res]) is True
    assert s.scalar('SELECT zk_try_session_lock_shared(%s)', [res2]) is True
    ctx.zi.wait_contenders(res, 1)
    ctx.zi.wait_contenders(res2, 1)
    s.query('SELECT zk_unlock_all()')
    ctx.zi.wait_contenders(res, 0)
    ctx.zi.wait_contenders(res2, 0)
    assert s.query('SELECT count(*) FROM zk_locks') == [(0,)]

    # backend exit releases at once
    s.scalar('SELECT zk_session_lock_exclusive(%s)', [res])
    [node] = ctx.zi.wait_contenders(res, 1)
    t0 = time.monotonic()
    s.close()
    ctx.zi.wait_contenders(res, 0, timeout=ctx.session_timeout / 2.0)
    assert time.monotonic() - t0 < ctx.session_timeout / 2.0
    assert o.scalar(TRY_X, [res]) is True


def notice_sqlstates(ctx, sql):
    """Run `sql` with psql at VERBOSITY verbose (a session of its own);
    returns [(severity, SQLSTATE, message)] of what the server sent."""
    r = subprocess.run(
        [harness.PG_BIN + '/psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
         '-v', 'VERBOSITY=verbose', '-h', ctx.pg.host,
         '-p', str(ctx.pg.port), '-U', 'postgres', '-d', ctx.dbname,
         '-c', sql],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, 'psql failed: %s%s' % (r.stdout, r.stderr)
    return re.findall(r'^(WARNING|NOTICE|ERROR):\s+([0-9A-Z]{5}):\s+(.*)$',
                      r.stderr, re.M)


def test_i2_unlock_warning_sqlstate(ctx):
    """zk_unlock / zk_unlock_shared of a lock not held at session level
    return false with a WARNING of SQLSTATE 01000 (warning), not an
    error class: never held, and held at transaction level only.
    (Pinned to the code the C is moving to; it was 55P03.)"""
    got = notice_sqlstates(
        ctx, "SELECT zk_unlock('ms-i2-never'); "
             "SELECT zk_unlock_shared('ms-i2-never'); "
             "BEGIN; SELECT zk_lock_exclusive('ms-i2-xact', '10 seconds'); "
             "SELECT zk_unlock('ms-i2-xact'); COMMIT;")
    assert len(got) == 3, got
    for severity, code, msg in got:
        assert severity == 'WARNING' and "you don't own" in msg, got
        assert code == '01000', \
            'the "you don\'t own" WARNING has SQLSTATE %s, expected 01000' \
            ' (warning): %s' % (code, msg)
    ctx.zi.wait_contenders('ms-i2-xact', 0)


def test_j_unreachable_ensemble(ctx):
    """An unreachable ensemble gives 08001 within about connect_timeout,
    naming the hosts; after RESET zklock.hosts the same backend locks."""
    res = 'ms-j-unreachable'
    s = ctx.backend('ms-j-S')
    hosts = '127.0.0.1:%d' % harness.closed_port()

    def unreachable(phase):
        s.query('SET zklock.hosts = %s', [hosts])
        s.query("SET zklock.connect_timeout = '1s'")
        t0 = time.monotonic()
        err = expect_sqlstate(s.submit(LOCK_X, [res, '10 seconds']),
                              '08001', 15, phase)
        elapsed = time.monotonic() - t0
        assert elapsed < 1 + 4, '%s: 08001 after %.2f s, connect_timeout ' \
            'is 1 s' % (phase, elapsed)
        primary = err.diag.message_primary or ''
        assert hosts in primary, '%s: message does not name the hosts ' \
            '%s: %r' % (phase, hosts, str(err))
        s.query('RESET zklock.hosts')
        s.query('RESET zklock.connect_timeout')
        s.query('BEGIN')
        tok = token_of(s.submit(LOCK_X, [res, '10 seconds']), 15,
                       '%s: lock after RESET zklock.hosts' % phase)
        [c] = ctx.zi.wait_contenders(res, 1)
        assert c.czxid == tok
        s.query('COMMIT')
        ctx.zi.wait_contenders(res, 0)

    unreachable('fresh backend')
    # the backend has a live session now: changing zklock.hosts must make
    # the next call (holding no lock) reconnect to the new hosts
    unreachable('backend with a session')


def test_j2_lock_parents_are_reaped(ctx):
    """Lock parents and the levels zklock created above them are CONTAINER
    nodes: a real ZooKeeper (its own server here, checking containers
    every second instead of every minute) deletes them once the last lock
    on the resource is released, and a later lock creates them again."""
    zk = harness.ZooKeeper(n=1, base_dir=ctx.workdir, name='zk-reap',
                           container_check_ms=1000).start()
    kz = b = None
    try:
        kz = harness.connect_kazoo(zk.connect_string)
        zi = harness.ZkInspector(kz, ctx.root)
        b = ctx.backend('ms-j2-reap')
        b.query('SET zklock.hosts = %s', [zk.connect_string])
        res, other = 'ms-reap/a/b', 'ms-reap/a/c'
        levels = [zi.parent_path(r) for r in ('ms-reap/a/b', 'ms-reap/a/c',
                                              'ms-reap/a', 'ms-reap')]
        for rnd in (1, 2):
            b.query('BEGIN')
            token_of(b.submit(LOCK_X, [res, '10 seconds']), 15,
                     'round %d: exclusive' % rnd)
            token_of(b.submit(LOCK_S, [other, '10 seconds']), 15,
                     'round %d: shared' % rnd)
            assert b.scalar('SELECT server FROM zk_status()') == \
                zk.host_port(1)
            assert len(zi.contenders(res)) == 1
            assert len(zi.contenders(other)) == 1
            b.query('COMMIT')
            last = {}

            def reaped():
                last['left'] = [p for p in levels if kz.exists(p)]
                return not last['left']
            try:
                wait_until(reaped, 30, 'round %d: the lock parents to be '
                           'reaped' % rnd, interval=0.2)
            except TimeoutError as e:
                raise AssertionError('%s; still there: %s (children %r)' % (
                    e, last['left'], {p: kz.get_children(p)
                                      for p in last['left']
                                      if kz.exists(p)})) from None
    finally:
        if b is not None:
            b.close()           # its session goes before its server
        if kz is not None:
            kz.stop()
            kz.close()
        zk.stop()


def test_k_nothing_left_behind(ctx):
    """Final check: under the root only (possibly empty) lock parents are
    left; no contender and no ephemeral node from any test."""
    last = []

    def clean():
        last[:] = ctx.zi.leftovers()
        return not last
    try:
        wait_until(clean, 10, 'no contender left under %s' % ctx.root,
                   interval=0.2)
    except TimeoutError:
        raise AssertionError('left behind under %s:\n  %s' % (
            ctx.root, '\n  '.join('%s (owner session %s)' % (p, hex(o))
                                  for p, o in last))) from None


def test_wait_events_name_the_wait(ctx):
    """pg_stat_activity of a backend waiting in a lock's queue, and in a
    semaphore's: wait_event_type Extension, and on PostgreSQL 17 and
    later a wait event of zklock's own (ZklockQueue, ZklockSemaphore),
    listed in pg_wait_events; before 17 the event is "Extension"."""
    holder = ctx.backend('we-holder')
    waiter = ctx.backend('we-waiter')
    custom = harness.PG_MAJOR >= 17
    row_sql = ('SELECT wait_event_type, wait_event, state, query '
               'FROM pg_stat_activity WHERE pid = %s')
    for what, lock, event in (
            ('lock', "SELECT zk_lock_exclusive('we-lock', '30 s')",
             'ZklockQueue'),
            ('semaphore', "SELECT zk_lock_semaphore('we-sem', 1, '30 s')",
             'ZklockSemaphore')):
        holder.query('BEGIN')
        token_of(holder.submit(lock), 15, 'the holder\'s ' + what)
        waiter.query('BEGIN')
        fut = waiter.submit(lock)
        want = event if custom else 'Extension'
        last = [None]

        def shows():
            last[0] = ctx.admin.query(row_sql, [waiter.pid])[0]
            return last[0][:2] == ('Extension', want)
        try:
            wait_until(shows, 15, 'the waiter to show %s' % want,
                       interval=0.05)
        except TimeoutError:
            raise AssertionError('pg_stat_activity of the waiter: %r, '
                                 'expected (Extension, %s)'
                                 % (last[0], want)) from None
        ctx.log('PostgreSQL %d, waiting for a %s: pg_stat_activity '
                '(wait_event_type, wait_event, state, query) = %r'
                % (harness.PG_MAJOR, what, last[0]))
        holder.query('COMMIT')
        token_of(fut, 15, 'the waiter\'s ' + what)
        waiter.query('COMMIT')
    if custom:
        names = [r[0] for r in ctx.admin.query(
            "SELECT name FROM pg_wait_events WHERE type = 'Extension' "
            "AND name LIKE 'Zklock%' ORDER BY name")]
        assert {'ZklockQueue', 'ZklockSemaphore'} <= set(names), names
        ctx.log('pg_wait_events: %s' % ', '.join(names))
