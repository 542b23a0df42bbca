"""Many locks in one call (issue 17): zk_lock_exclusive(text[]) and the
other array variants.

All or nothing against a holder of one element (try, timeout, both
scopes); no position kept after a lock the call waits for; two sessions
on two clusters taking ARRAY[a..z] and its reverse 200 times without a
deadlock or a timeout; a cancel in the middle of a 10,000-lock call, and
lock_timeout, leave nothing in ZooKeeper; the creates go out in multi
requests (requests per lock counted at the server); tokens in the order
of the input and equal to each node's czxid; names given twice and locks
already held; savepoints and scalar holds mixed in; bad input; the update
from 1.2 keeps the grants.

What ZooKeeper holds is read from the server itself (`dump`, `mntr`) and
with kazoo, not from the extension's own view.
"""

import time

import psycopg2

import harness
from harness import wait_until
from test_many import ephemerals_under, packets_received, wait_all_gone
from test_multisession import expect_sqlstate, result

TIMEOUT = 300                   # seconds per test (a pytest-timeout bound)
DB = 'zklock_set'


def module_setup(ctx):
    ctx.shared.clusters = []
    pg = harness.PgCluster('set-b', {
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
    assert held_nodes(ctx, res) == {res[13]: [c.name for c in
                                              contenders(ctx, res[13])]}
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
