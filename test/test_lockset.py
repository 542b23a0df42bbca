"""Many locks in one call (issue 17): zk_lock_exclusive(text[]) and the
other array variants.

All or nothing against a holder of one element (try, timeout, both
scopes); no position kept after a lock the call waits for; two sessions
on two clusters taking ARRAY[a..z] and its reverse 200 times without a
deadlock or a timeout; a cancel in the middle of a 10,000-lock call, and
lock_timeout, leave nothing in ZooKeeper; the creates go out in multi
requests (requests per lock counted at the server); tokens in the order
of the input and equal to each node's czxid, and what the manual promises of
fencing tokens; names given twice and locks already held; savepoints and
scalar holds mixed in; bad input; the update from 1.2 keeps the grants.

What ZooKeeper holds is read from the server itself (`dump`, `mntr`) and
with kazoo, not from the extension's own view.

In short, this module checks: many locks in one call: tokens in the order
of the input and equal to each node's czxid; the fencing tokens a
downstream may rely on (one token for a call's multi, a greater one for the
locks after a lock the call waited for, strictly increasing over five
holders of one name by scalar and array calls, exclusive and shared, on two
clusters; not in grant order across names); bad input (22004, 2202E, 22023,
an empty array sends nothing, literals still resolve to the scalar
functions); names given twice and locks already held; all or nothing
against a holder of one element (try and timeout, both scopes); no node
after the lock a call waits for; 1.00 requests per lock for 1,000 locks
(scalar loop: 2.00); 1,000 names never used before at most 2.2 requests per
lock (1.004 measured) and one fresh lock one request more than a warm one
(issue 31: 6.0 and 3 more before); a connection lost right at the parents'
multi (the request lost, or its reply); a cancel in the middle of a
10,000-lock call and at five points of its pipeline, `lock_timeout`,
`statement_timeout` leave nothing; savepoints and scalar holds mixed;
`ARRAY[a..z]` against its reverse, 200 times each, on two clusters, no
deadlock or timeout; the update from 1.2; through the proxy, a multi whose
reply is lost and one that is lost; lock parents reaped by the server
during the call.
"""

import concurrent.futures
import threading
import time

import psycopg2

import harness
from harness import wait_until
from test_many import (ephemerals_under, packets_received, session_requests,
                       wait_all_gone)
from test_multisession import expect_sqlstate, result
from test_package import control_version

TIMEOUT = 300                   # seconds per test (a pytest-timeout bound)
DB = 'zklock_set'


def module_setup(ctx):
    ctx.shared.clusters = []
    ctx.shared.pg_b = ctx.extra_cluster('set-b', DB)


def module_teardown(ctx):
    for pg in getattr(ctx.shared, 'clusters', []):
        pg.stop()


def names(prefix, n):
    return ['%s/%05d' % (prefix, i) for i in range(n)]


def contenders(ctx, res):
    return ctx.zi.contenders(res, with_stat=False)


def held_nodes(ctx, resources):
    """{resource: [contender names]} for every resource with a node."""
    out = {}
    for r in resources:
        cs = [c.name for c in contenders(ctx, r)]
        if cs:
            out[r] = cs
    return out


def test_tokens_in_input_order(ctx):
    """Tokens come back in the order of the input (not the canonical
    order the locks are taken in), each the czxid of its own node; the
    nodes are the recipe's contender nodes, one per lock."""
    b = ctx.backend('set-tokens')
    res = ['set-tok/c', 'set-tok/a', 'set-tok/b']
    b.query('BEGIN')
    [(tokens,)] = b.query('SELECT zk_lock_exclusive(%s::text[])', [res])
    assert len(tokens) == 3 and all(t > 0 for t in tokens), tokens
    rows = dict(b.query('SELECT resource, fencing_token FROM zk_locks'))
    assert [rows[r] for r in res] == tokens, (rows, tokens)
    for r, t in zip(res, tokens):
        [c] = ctx.zi.contenders(r)
        assert c.stat.czxid == t, (r, c.stat.czxid, t)
    b.query('COMMIT')
    wait_until(lambda: not held_nodes(ctx, res), 30, 'nodes released')


def czxids(ctx, res):
    """{resource: czxid of its one contender node}."""
    out = {}
    for r in res:
        [c] = ctx.zi.contenders(r)
        out[r] = c.stat.czxid
    return out


def test_fencing_tokens_what_a_downstream_may_rely_on(ctx):
    """The manual's "Fencing tokens": the locks one array call creates in one
    multi request share one token; a call that waited mid-way created
    the locks after the one it waited for in a later multi, with a greater
    token; successive holders of one name (scalar and array calls,
    exclusive and shared, two clusters) get strictly increasing tokens;
    and tokens of different names are not in grant order (a waiter's node,
    so its token, is as old as its place in the queue)."""
    n, m, o, p, f = ('set-fence/%s' % x for x in 'nmopf')
    a = ctx.backend('set-fence-a')
    b = ctx.backend('set-fence-b')
    c = ctx.backend('set-fence-c')
    d = ctx.backend('set-fence-d', cluster=ctx.shared.pg_b, dbname=DB)
    e = ctx.backend('set-fence-e')

    # one call, one multi: one token, each node's czxid
    a.query('BEGIN')
    [(ta,)] = a.query('SELECT zk_lock_exclusive(%s::text[])', [[p, n, o]])
    assert len(set(ta)) == 1, ta
    assert czxids(ctx, [p, n, o]) == {p: ta[0], n: ta[0], o: ta[0]}

    # queued behind a on n, in this order: b (scalar), c (array: m and n
    # in its first multi, o deleted while it waits), d (shared, cluster b)
    b.query('BEGIN')
    fb = b.submit('SELECT zk_lock_exclusive(%s)', [n])
    ctx.zi.wait_contenders(n, 2)
    c.query('BEGIN')
    fc = c.submit('SELECT zk_lock_exclusive(%s::text[])', [[o, m, n]])
    ctx.zi.wait_contenders(n, 3)
    d.query('BEGIN')
    fd = d.submit('SELECT zk_lock_shared(%s)', [n])
    ctx.zi.wait_contenders(n, 4)
    for w in (b, c):
        ctx.wait_state(w)

    # a lock on another name granted now has a greater token than b's
    # node, which b is granted only later
    [(tf,)] = e.query('SELECT zk_lock_exclusive(%s)', [f])

    a.query('COMMIT')
    tb = result(fb, 30, "b's grant")[0][0]
    assert tf > tb, 'f, granted before b, has the smaller token: %r' % (
        (tf, tb),)
    b.query('COMMIT')
    [(tc,)] = result(fc, 30, "c's grant")
    tc = dict(zip([o, m, n], tc))
    assert tc[m] == tc[n] < tc[o], tc
    assert czxids(ctx, [o, m]) == {o: tc[o], m: tc[m]}
    c.query('COMMIT')
    td = result(fd, 30, "d's grant")[0][0]
    d.query('COMMIT')
    te = e.scalar('SELECT zk_lock_exclusive(%s)', [n])

    holders = [ta[0], tb, tc[n], td, te]
    assert all(x < y for x, y in zip(holders, holders[1:])), holders
    wait_until(lambda: not held_nodes(ctx, [n, m, o, p, f]), 30,
               'every node released')


def test_bad_input(ctx):
    """NULL element and NULL array: 22004; two dimensions: 2202E; an empty
    array: an empty result and no request; a bad name: 22023 as for the
    scalar call, and nothing taken; an untyped literal and NULL still
    resolve to the scalar function."""
    b = ctx.backend('set-bad')
    b.query('BEGIN')
    for sql, state in [
            ("SELECT zk_lock_exclusive(ARRAY['set-bad-a', NULL])", '22004'),
            ("SELECT zk_lock_exclusive(NULL::text[])", '22004'),
            ("SELECT zk_try_lock_shared(ARRAY[NULL]::text[])", '22004'),
            ("SELECT zk_session_lock_exclusive(ARRAY[['a','b'],['c','d']])",
             '2202E'),
            ("SELECT zk_unlock(ARRAY[['a'],['b']])", '2202E'),
            ("SELECT zk_lock_exclusive(ARRAY['set-bad-b', ''])", '22023'),
            ("SELECT zk_lock_shared(ARRAY['set-bad-c', 'x//y'])", '22023'),
            ("SELECT zk_lock_exclusive(ARRAY['set-bad-d'], '-1 s')", '22023'),
            ("SELECT zk_lock_exclusive(NULL)", '22004')]:
        expect_sqlstate(b.submit(sql), state, 30, sql)
        b.query('ROLLBACK')
        b.query('BEGIN')
    assert b.query('SELECT * FROM zk_locks') == []
    assert held_nodes(ctx, ['set-bad-a', 'set-bad-b', 'set-bad-c',
                            'set-bad-d']) == {}

    before = packets_received(ctx)
    assert b.scalar("SELECT zk_lock_exclusive('{}'::text[])") == []
    assert b.scalar("SELECT zk_try_lock_exclusive('{}'::text[])") is True
    assert b.scalar("SELECT zk_unlock('{}'::text[])") is True
    # the mntr polls themselves are the only packets (one each)
    assert packets_received(ctx) - before <= 2
    # an untyped literal is the scalar function: a bigint, not an array
    tok = b.scalar("SELECT zk_lock_exclusive('set-bad-literal')")
    assert isinstance(tok, int) and tok > 0, tok
    b.query('ROLLBACK')


def test_duplicates_and_held_locks(ctx):
    """A name given twice is two holds on one node; a lock this backend
    already holds counts one more hold without a new node; an exclusive
    lock held lends its node to a shared array call."""
    b = ctx.backend('set-dup')
    b.query("SELECT zk_session_lock_exclusive('set-dup/held')")
    [held] = contenders(ctx, 'set-dup/held')
    tokens = b.scalar("SELECT zk_session_lock_exclusive("
                      "ARRAY['set-dup/a', 'set-dup/held', 'set-dup/a'])")
    assert tokens[0] == tokens[2], tokens
    assert [c.name for c in contenders(ctx, 'set-dup/held')] == [held.name]
    assert len(contenders(ctx, 'set-dup/a')) == 1
    counts = dict((r, c) for r, c in b.query(
        "SELECT resource, count FROM zk_locks WHERE scope = 'session'"))
    assert counts == {'set-dup/a': 2, 'set-dup/held': 2}, counts
    # shared on the exclusive node: no new node
    b.query("SELECT zk_session_lock_shared(ARRAY['set-dup/a'])")
    assert len(contenders(ctx, 'set-dup/a')) == 1
    assert b.scalar("SELECT zk_unlock_shared(ARRAY['set-dup/a'])") is True
    assert b.scalar("SELECT zk_unlock(ARRAY['set-dup/a', 'set-dup/held', "
                    "'set-dup/a'])") is True
    assert [r for r, in b.query('SELECT resource FROM zk_locks')] == \
        ['set-dup/held']
    wait_until(lambda: not contenders(ctx, 'set-dup/a'), 30, 'a released')
    # one not held: false with a warning, the others still released
    assert b.scalar("SELECT zk_unlock(ARRAY['set-dup/held', "
                    "'set-dup/never'])") is False
    assert b.query('SELECT resource FROM zk_locks') == []
    wait_until(lambda: not contenders(ctx, 'set-dup/held'), 30,
               'held released')


def all_or_nothing(ctx, scope):
    """One element of the set is held by another session: a try returns
    false and a timed call fails with 55P03, and neither leaves a node
    on the other elements or a lock in zk_locks; locks held before the
    call stay."""
    fn = {'transaction': 'zk_lock_exclusive',
          'session': 'zk_session_lock_exclusive'}[scope]
    try_fn = {'transaction': 'zk_try_lock_exclusive',
              'session': 'zk_try_session_lock_exclusive'}[scope]
    res = names('set-aon-%s' % scope, 20)
    other = ctx.backend('set-aon-holder-%s' % scope)
    other.query('BEGIN')
    other.query('SELECT zk_lock_exclusive(%s)', [res[13]])
    b = ctx.backend('set-aon-%s' % scope)
    b.query('BEGIN')
    b.query("SELECT zk_session_lock_exclusive('set-aon-before-%s')" % scope)
    b.query("SELECT zk_lock_exclusive('set-aon-before-x-%s')" % scope)
    assert b.scalar('SELECT %s(%%s::text[])' % try_fn, [res]) is False
    # the given-up nodes are deleted without waiting for the replies
    wait_until(lambda: list(held_nodes(ctx, res)) == [res[13]], 30,
               'only the holder\'s node left after the try')
    assert len(contenders(ctx, res[13])) == 1
    t0 = time.monotonic()
    expect_sqlstate(b.submit("SELECT %s(%%s::text[], '1 s')" % fn, [res]),
                    '55P03', 30, 'timed array call')
    assert time.monotonic() - t0 >= 0.9
    b.query('ROLLBACK')     # the error ended the transaction
    wait_until(lambda: len(held_nodes(ctx, res)) == 1, 30,
               'only the holder\'s node left')
    kept = [r for r, in b.query('SELECT resource FROM zk_locks')]
    assert kept == ['set-aon-before-%s' % scope], kept
    # once the holder is gone the same call takes all 20
    other.query('COMMIT')
    b.query('BEGIN')
    tokens = b.scalar("SELECT %s(%%s::text[], '30 s')" % fn, [res])
    assert len(tokens) == 20 and all(tokens)
    assert len(held_nodes(ctx, res)) == 20
    b.query('COMMIT')
    b.query('SELECT zk_unlock_all()')
    wait_until(lambda: not held_nodes(ctx, res), 30, 'all released')


def test_all_or_nothing_transaction(ctx):
    all_or_nothing(ctx, 'transaction')


def test_all_or_nothing_session(ctx):
    all_or_nothing(ctx, 'session')


def test_no_position_after_a_taken_lock(ctx):
    """While the call waits for element k (held by someone else), it
    holds the locks before k and has no node on any lock after k; once k
    is free it takes k and the rest."""
    res = names('set-pos', 10)
    holder = ctx.backend('set-pos-holder')
    holder.query('BEGIN')
    holder.query('SELECT zk_lock_exclusive(%s)', [res[4]])
    b = ctx.backend('set-pos')
    b.query('BEGIN')
    fut = b.submit("SELECT zk_lock_exclusive(%s::text[], '60 s')",
                   [list(reversed(res))])
    ctx.wait_state(b)

    def waiting_on_4():
        held = held_nodes(ctx, res)
        return sorted(held) == res[:5] and len(held[res[4]]) == 2
    wait_until(waiting_on_4, 30, 'the call to hold 0..3 and queue on 4')
    time.sleep(0.3)
    held = held_nodes(ctx, res)
    assert sorted(held) == res[:5], held
    holder.query('COMMIT')
    tokens = result(fut, 30, 'array call')[0][0]
    assert len(tokens) == 10
    assert sorted(held_nodes(ctx, res)) == res
    b.query('COMMIT')
    wait_until(lambda: not held_nodes(ctx, res), 30, 'all released')


def test_requests_per_lock(ctx):
    """1,000 free locks in one call: the creates go out in a multi
    request, so ZooKeeper receives about one request per lock (its
    listing) plus a few, not two or more per lock as a loop of scalar
    calls; COMMIT releases them in a few multi requests too.  The few
    include the watches zklock.cancel_on_loss sets on the first 16 held
    nodes (no more: the manual, "A lost lock stops its holder at once").  The
    time per lock against the scalar loop is a figure (targets: make
    bench)."""
    n = 1000
    res = names('set-req', n)
    b = ctx.backend('set-req')
    b.query('SELECT zk_status()')           # the session exists
    b.query('BEGIN')
    b.query('SELECT zk_lock_exclusive(%s::text[])', [res[:10]])  # parents
    b.query('ROLLBACK')
    b.query('BEGIN')
    # the parents of all n exist after a first call
    b.query('SELECT zk_lock_exclusive(%s::text[])', [res])
    b.query('ROLLBACK')
    wait_all_gone(ctx, 'set-req', 'first round released')
    b.query('BEGIN')
    before = packets_received(ctx)
    t0 = time.monotonic()
    b.query('SELECT zk_lock_exclusive(%s::text[])', [res])
    took = time.monotonic() - t0
    sent = packets_received(ctx) - before - 1   # our own mntr poll
    ctx.figure('requests per lock, %d locks in one call' % n, sent / n,
               fmt='%.3f')
    ctx.figure('%d locks in one call' % n, took * 1000, 'ms', '%.0f')
    assert len(ephemerals_under(ctx, 'set-req')) == n
    assert sent <= n + 20 + 16, '%d requests for %d locks' % (sent, n)
    before = packets_received(ctx)
    b.query('COMMIT')
    wait_all_gone(ctx, 'set-req', 'released at COMMIT')
    ctx.figure('requests to release them at COMMIT',
               packets_received(ctx) - before)

    b.query('BEGIN')
    before = packets_received(ctx)
    t0 = time.monotonic()
    b.query('SELECT count(zk_lock_exclusive(r)) FROM unnest(%s::text[]) r',
            [res])
    took_loop = time.monotonic() - t0
    sent_loop = packets_received(ctx) - before - 1
    b.query('ROLLBACK')
    ctx.figure('requests per lock, scalar loop', sent_loop / n, fmt='%.3f')
    ctx.figure('%d locks by the scalar loop' % n, took_loop * 1000, 'ms',
               '%.0f')
    assert sent_loop >= 2 * n       # the comparison means something
    wait_all_gone(ctx, 'set-req', 'loop released')


def test_fresh_names_requests_per_lock(ctx):
    """Names never used before (issue 31): no lock parent exists, the
    normal case for a job whose parents the server reaped since its last
    run.  1,000 such locks in one call cost at most 2.2 requests per lock
    at the server (the lock's listing, the locks' and the parents' creates
    in multi requests), not one round trip per parent; the parents are
    CONTAINER nodes.  A
    single fresh name costs one request more than the same name warm
    (the parent's create), in the same round trip."""
    n = 1000
    tag = 'set-fresh-%d' % (int(time.time() * 1000) % 10000000)
    res = names(tag, n)
    b = ctx.backend('set-fresh')
    b.query('SELECT zk_status()')           # the session exists
    b.query('BEGIN')
    b.query("SELECT zk_lock_exclusive('set-fresh-warmup')")   # the root exists
    b.query('COMMIT')
    assert not ctx.kz.exists(ctx.zi.parent_path(tag))
    b.query('BEGIN')
    before = packets_received(ctx)
    t0 = time.monotonic()
    tokens = b.scalar('SELECT zk_lock_exclusive(%s::text[])', [res], timeout=120)
    took = time.monotonic() - t0
    sent = packets_received(ctx) - before - 1   # our own mntr poll
    assert len(tokens) == n and all(tokens)
    ctx.figure('requests per lock, %d fresh names in one call' % n, sent / n,
               fmt='%.3f')
    ctx.figure('%d fresh names in one call' % n, took * 1000, 'ms', '%.0f')
    assert len(ephemerals_under(ctx, tag)) == n
    assert sent <= 2.2 * n, '%d requests for %d fresh locks' % (sent, n)

    b.query('COMMIT')
    wait_all_gone(ctx, tag, 'released at COMMIT')

    # Counted on the backend's own session (cons), once the held node's
    # watch (a getData sent without waiting) is registered, the least of
    # three names each: the server's total also counts other clients'
    # pings, the watch's request may not have arrived when the call
    # returns (4-lane runs met both: 4 / 2, then 4 / 2 on the session),
    # and the session's own ping can land in one window.
    counts = {'fresh': [], 'warm': []}
    for i in range(3):
        one = '%s-one-%d' % (tag, i)
        for label in ('fresh', 'warm'):
            b.query('BEGIN')
            before = session_requests(ctx, b)
            b.query('SELECT zk_lock_exclusive(%s)', [one])
            [node] = ctx.zi.wait_contenders(one, 1)
            wait_until(lambda: ctx.zk.watches_by_path().get(node.path), 10,
                       'the held node\'s watch')
            counts[label].append(session_requests(ctx, b) - before)
            b.query('COMMIT')
            wait_all_gone(ctx, one, 'the single lock released')
    fresh, warm = min(counts['fresh']), min(counts['warm'])
    ctx.figure('requests for one lock, fresh / warm', '%d / %d' % (fresh, warm))
    assert fresh <= warm + 1, counts


def blocked_in_the_middle(ctx, tag, n):
    """Another session holds the lock in the middle of n; returns it, the
    names, and the backend (in a transaction) whose array call waits for
    it, holding the first half."""
    res = names('set-%s' % tag, n)
    holder = ctx.backend('set-%s-holder' % tag)
    holder.query('BEGIN')
    holder.query('SELECT zk_lock_exclusive(%s)', [res[n // 2]])
    b = ctx.backend('set-%s' % tag)
    b.query('BEGIN')
    return holder, res, b


def test_cancel_in_the_middle_of_10000(ctx):
    """A 10,000-lock call cancelled while it waits for the lock in the
    middle (holding the 5,000 before it), and cancelled at several points
    while its creates are in flight: nothing of it is left in ZooKeeper,
    and a lock held before the call stays."""
    n = 10000
    holder, res, b = blocked_in_the_middle(ctx, 'cancel', n)
    b.query("SELECT zk_session_lock_exclusive('set-cancel-before')")
    fut = b.submit('SELECT zk_lock_exclusive(%s::text[])', [res])
    wait_until(lambda: len(ephemerals_under(ctx, 'set-cancel')) == n // 2 + 2,
               120, 'the call to hold the first half and queue')
    ctx.wait_state(b)
    b.cancel()
    expect_sqlstate(fut, '57014', 60, 'cancelled call')
    b.query('ROLLBACK')
    wait_until(lambda: len(ephemerals_under(ctx, 'set-cancel')) == 1, 60,
               'only the holder\'s node left')
    holder.query('COMMIT')
    wait_all_gone(ctx, 'set-cancel', 'holder released')

    # cancels while the pipelined creates are in flight (the holder gone):
    # whatever a multi creates after its caller gave up is deleted
    for delay in (0.02, 0.05, 0.1, 0.2, 0.4):
        b.query('BEGIN')
        fut = b.submit('SELECT zk_lock_exclusive(%s::text[])', [res])
        time.sleep(delay)   # a point in the call, not a condition
        b.cancel()
        try:
            fut.result(120)
            done = 'finished'
        except psycopg2.Error as e:
            assert e.pgcode == '57014', e
            done = 'cancelled'
        b.query('ROLLBACK')
        ctx.log('cancel after %.2f s: %s' % (delay, done))
        wait_all_gone(ctx, 'set-cancel', 'nodes after a cancel at %.2f s'
                      % delay)
    assert [r for r, in b.query('SELECT resource FROM zk_locks')] == \
        ['set-cancel-before']
    b.query('SELECT zk_unlock_all()')


def test_lock_timeout_and_statement_timeout(ctx):
    """lock_timeout (55P03) and statement_timeout (57014) end a call that
    waits for one element: no node is left of it."""
    holder, res, b = blocked_in_the_middle(ctx, 'lt', 100)
    for setting, state in [('lock_timeout', '55P03'),
                           ('statement_timeout', '57014')]:
        b.query("SET %s = '500ms'" % setting)
        t0 = time.monotonic()
        expect_sqlstate(b.submit('SELECT zk_lock_shared(%s::text[])', [res]),
                        state, 30, setting)
        assert time.monotonic() - t0 >= 0.45
        b.query('ROLLBACK')
        b.query('RESET %s' % setting)
        wait_until(lambda: len(ephemerals_under(ctx, 'set-lt')) == 1, 30,
                   'only the holder\'s node after %s' % setting)
        b.query('BEGIN')
    b.query('ROLLBACK')
    holder.query('COMMIT')
    wait_all_gone(ctx, 'set-lt', 'holder released')


def test_savepoints_and_scalar_holds(ctx):
    """Array holds belong to the subtransaction that took them: ROLLBACK
    TO SAVEPOINT drops them (and their nodes) and keeps what was taken
    before, by array or scalar calls; RELEASE SAVEPOINT hands them to the
    parent; a scalar call on a lock the array took is re-entrant."""
    b = ctx.backend('set-sp')
    first = names('set-sp/first', 5)
    second = names('set-sp/second', 5)
    b.query('BEGIN')
    b.query('SELECT zk_lock_exclusive(%s::text[])', [first])
    b.query("SELECT zk_lock_exclusive('set-sp/scalar')")
    b.query('SAVEPOINT s1')
    b.query('SELECT zk_lock_exclusive(%s::text[])',
            [second + ['set-sp/scalar', first[0]]])
    assert len(ephemerals_under(ctx, 'set-sp')) == 11
    b.query('ROLLBACK TO SAVEPOINT s1')
    wait_until(lambda: len(ephemerals_under(ctx, 'set-sp')) == 6, 30,
               'second set released by ROLLBACK TO')
    counts = dict(b.query('SELECT resource, count FROM zk_locks'))
    assert counts == dict([(r, 1) for r in first + ['set-sp/scalar']]), \
        counts
    b.query('SAVEPOINT s2')
    b.query('SELECT zk_lock_exclusive(%s::text[])', [second])
    b.query('SELECT zk_lock_exclusive(%s)', [second[2]])
    b.query('RELEASE SAVEPOINT s2')
    counts = dict(b.query('SELECT resource, count FROM zk_locks'))
    assert counts[second[2]] == 2 and len(counts) == 11, counts
    b.query('COMMIT')
    wait_all_gone(ctx, 'set-sp', 'all released at COMMIT')


def test_opposite_orders_never_deadlock(ctx):
    """Two sessions on two clusters take ARRAY[a..z] and the reversed
    array, 200 times each, at the same time (deadlock_timeout 50 ms, so
    the detector looks at every wait): no deadlock, no timeout, never
    both inside at once, and both got their turns."""
    letters = ['set-az/%s' % chr(c) for c in range(ord('a'), ord('z') + 1)]
    rounds = 200
    inside = []
    mu = threading.Lock()
    errors = []

    def worker(b, arr):
        b.query("SET deadlock_timeout = '50ms'")
        for _ in range(rounds):
            b.query('BEGIN')
            tokens = b.scalar("SELECT zk_lock_exclusive(%s::text[], "
                              "'60 s')", [arr], timeout=90)
            if len(tokens) != 26:
                errors.append('%r got %r' % (b, tokens))
            with mu:
                inside.append(b)
                if len(inside) > 1:
                    errors.append('both inside at once')
            with mu:
                inside.remove(b)
            b.query('COMMIT')

    a = ctx.backend('set-az-a')
    z = ctx.backend('set-az-z', cluster=ctx.shared.pg_b, dbname=DB)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futs = [pool.submit(worker, a, letters),
                pool.submit(worker, z, list(reversed(letters)))]
        for f in futs:
            f.result(timeout=TIMEOUT - 30)   # raises the worker's error
    took = time.monotonic() - t0
    assert not errors, errors[:5]
    ctx.figure('2 x %d calls of 26 locks in opposite orders' % rounds,
               took, 's', '%.1f')
    waits = [bk.scalar('SELECT waits FROM zk_status()') for bk in (a, z)]
    ctx.figure('calls that had to wait (A, B)', waits)
    wait_until(lambda: not held_nodes(ctx, letters), 30, 'all released')


def test_update_from_1_2_keeps_grants(ctx):
    """ALTER EXTENSION zklock UPDATE from 1.2 gives the same functions as
    a fresh install, the array functions with EXECUTE revoked from
    PUBLIC (a role without a grant gets 42501), and keeps a grant given
    on a 1.2 function."""
    pg = ctx.shared.pg_b
    role = 'zklock_set_user'
    for db in ('zklock_upd13', 'zklock_fresh13'):
        pg.psql('DROP DATABASE IF EXISTS %s' % db)
        pg.psql('CREATE DATABASE %s' % db)
    pg.psql('DROP ROLE IF EXISTS %s' % role)
    pg.psql('CREATE ROLE %s' % role)
    pg.psql("CREATE EXTENSION zklock VERSION '1.2'", dbname='zklock_upd13')
    pg.psql('GRANT EXECUTE ON FUNCTION zk_lock_exclusive(text, interval) '
            'TO %s' % role, dbname='zklock_upd13')
    pg.psql('ALTER EXTENSION zklock UPDATE', dbname='zklock_upd13')
    pg.psql('CREATE EXTENSION zklock', dbname='zklock_fresh13')
    q = ("SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid) "
         "|| ' -> ' || pg_get_function_result(p.oid), "
         "has_function_privilege('public', p.oid, 'EXECUTE') "
         "FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid "
         "JOIN pg_extension e ON e.oid = d.refobjid "
         "AND e.extname = 'zklock' ORDER BY 1")
    upd = ctx.backend('set-upd', cluster=pg, dbname='zklock_upd13')
    fresh = ctx.backend('set-fresh', cluster=pg, dbname='zklock_fresh13')
    try:
        assert upd.scalar("SELECT extversion FROM pg_extension "
                          "WHERE extname = 'zklock'") == control_version()
        rows = upd.query(q)
        assert rows == fresh.query(q)
        arrays = [r for r in rows if 'text[]' in r[0]]
        assert len(arrays) == 10, arrays
        assert not any(r[2] for r in rows), 'PUBLIC may execute a function'
        upd.query('SET ROLE %s' % role)
        expect_sqlstate(upd.submit("SELECT zk_try_lock_exclusive("
                                   "ARRAY['set-upd'])"), '42501', 10,
                        'array call without a grant')
        assert upd.scalar("SELECT zk_lock_exclusive('set-upd'::text) > 0") \
            is True   # the grant given on 1.2 is kept
        upd.query('RESET ROLE')
    finally:
        upd.close()
        fresh.close()
        for db in ('zklock_upd13', 'zklock_fresh13'):
            pg.psql('DROP DATABASE %s WITH (FORCE)' % db)
        pg.psql('DROP ROLE %s' % role)


def test_lost_multi_reply_and_lost_multi(ctx):
    """Through a proxy: the reply to the multi create is lost after the
    server ran it (the connection dropped), or the multi itself is lost
    before the server saw it.  Either way the call ends holding every
    lock with exactly one node each (nodes found again by prefix after a
    sync, or created again), and COMMIT leaves nothing."""
    from test_proxy import Scene
    from zkproxy import OP_MULTI, ZOK
    import zkproxy
    res = names('set-proxy', 40)
    for how in ('reply lost', 'request lost'):
        with Scene(ctx, 'set-' + how.split()[0]) as sc:
            b = sc.backend('set-proxy')
            b.query('BEGIN')
            b.query('SELECT zk_lock_exclusive(%s::text[])', [res])  # parents
            b.query('COMMIT')
            wait_until(lambda: not held_nodes(ctx, res), 30, 'warm-up gone')
            hit = []

            def hook(req):
                if req.op == OP_MULTI and not hit:
                    hit.append(req)
                    if how == 'reply lost':
                        sc.proxy.on_reply(req.cid, req.xid, swallow=True,
                                          drop=True)
                        return None
                    return zkproxy.Verdict(drop='before')
                return None
            sc.proxy.hook = hook
            b.query('BEGIN')
            tokens = b.scalar("SELECT zk_lock_exclusive(%s::text[], "
                              "'60 s')", [res], timeout=90)
            sc.proxy.hook = None
            assert hit, 'no multi request went through the proxy'
            if how == 'reply lost':
                wait_until(lambda: hit[0].reply is not None, 10, 'reply')
                assert hit[0].reply.err == ZOK and \
                    hit[0].reply.fate == 'swallowed', hit[0].reply
            held = held_nodes(ctx, res)
            assert sorted(held) == res and \
                all(len(v) == 1 for v in held.values()), held
            for r, t in zip(res, tokens):
                [c] = ctx.zi.contenders(r)
                assert c.stat.czxid == t, (r, c.stat.czxid, t)
            ctx.figure('%s: reconnects' % how,
                       b.scalar('SELECT reconnects FROM zk_status()'))
            b.query('COMMIT')
            wait_until(lambda: not held_nodes(ctx, res), 30,
                       'all released after: %s' % how)


def test_connection_lost_while_creating_parents(ctx):
    """Through a proxy, names never used before (issue 31): the call sends
    its lock parents' creates in a multi request in front of the locks'
    multi, and the connection drops right there, either with the parents'
    multi itself lost, or after the server ran it with its reply lost.
    The call ends holding every lock with exactly one node each (the
    parents made again or found), and COMMIT leaves nothing."""
    from test_proxy import Scene
    from zkproxy import OP_MULTI
    import zkproxy
    for how in ('reply lost', 'request lost'):
        res = names('set-lvl-%s-%d' % (how.split()[0],
                                       int(time.time() * 1000) % 100000), 40)
        with Scene(ctx, 'set-lvl-' + how.split()[0]) as sc:
            b = sc.backend('set-lvl')
            seen = []

            def hook(req):
                if req.op != OP_MULTI or seen:
                    return None
                seen.append(req)        # the first multi: the parents'
                if how == 'reply lost':
                    sc.proxy.on_reply(req.cid, req.xid, swallow=True, drop=True)
                    return None
                return zkproxy.Verdict(drop='before')
            sc.proxy.hook = hook
            b.query('BEGIN')
            tokens = b.scalar("SELECT zk_lock_exclusive(%s::text[], "
                              "'60 s')", [res], timeout=90)
            sc.proxy.hook = None
            assert seen, 'no multi went through the proxy'
            if how == 'reply lost':
                wait_until(lambda: seen[0].reply is not None, 10, 'reply')
                assert seen[0].reply.fate == 'swallowed', seen[0].reply
            held = held_nodes(ctx, res)
            assert sorted(held) == res and \
                all(len(v) == 1 for v in held.values()), held
            for r, t in zip(res, tokens):
                [c] = ctx.zi.contenders(r)
                assert c.stat.czxid == t, (r, c.stat.czxid, t)
            assert b.scalar('SELECT reconnects FROM zk_status()') >= 1
            b.query('COMMIT')
            wait_until(lambda: not held_nodes(ctx, res), 30,
                       'all released after: %s' % how)


def test_parents_reaped_during_the_call(ctx, make_zk, make_pg):
    """The server reaps empty lock parents (CONTAINER nodes) while a
    3,000-lock call runs (a check every 200 ms, then one delete every
    6 ms, ZooKeeper's default pace): a multi whose parent went fails as a whole, and
    the call goes on with single creates and new parents instead of
    giving up.  Three rounds, each started once the reaper has begun on
    the last round's parents; all nodes go at COMMIT."""
    zk = make_zk(1, container_check_ms=200)
    pg = make_pg('set-reap', {'zklock.hosts': zk.connect_string,
                              'zklock.root': '/zklock'})
    pg.psql('CREATE EXTENSION zklock')
    kz = harness.connect_kazoo(zk.connect_string)
    try:
        b = ctx.backend('set-reap', cluster=pg, dbname='postgres')
        n = 3000
        res = names('set-reap', n)
        parent = '/zklock/set-reap'

        def parents():
            return len(kz.get_children(parent)) if kz.exists(parent) else 0
        for rnd in range(3):
            b.query('BEGIN')
            tokens = b.scalar('SELECT zk_lock_exclusive(%s::text[])', [res],
                              timeout=120)
            assert len(tokens) == n and all(tokens)
            b.query('COMMIT')
            wait_until(lambda: parents() < n, 60,
                       'the server to start reaping round %d\'s parents' % rnd)
            ctx.log('round %d: %d of %d parents left when the next began'
                    % (rnd, parents(), n))
        wait_until(lambda: not [p for p in zk.ephemerals()], 30,
                   'every node released')
    finally:
        kz.stop()
        kz.close()
