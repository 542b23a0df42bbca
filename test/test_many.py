"""
Many locks in one backend.  Releasing them (COMMIT, zk_unlock_all(),
ROLLBACK TO SAVEPOINT) sends the deletes as ZooKeeper multi requests (at
most 1,000 deletes each, far below the 1 MB packet limit) instead of one
request per lock; a multi that fails (one node already gone) is split into
single deletes, so the other nodes still go.  Confirming them before
COMMIT (zklock.verify_at_commit) uses multi requests of "check" operations
from 16 locks on; one that fails is followed by an exists per node, which
names the lock that was lost.  New lock parents: levels above them
that the backend already knows to exist are not created again, and a known
level that was removed meanwhile does not get in the way.

What ZooKeeper holds is read from the server itself: `dump` lists every
ephemeral node with its session, `mntr` counts the requests it received.

In short, this module checks: thousands of locks in one backend: COMMIT,
`zk_unlock_all()` and `ROLLBACK TO SAVEPOINT` release them in a few multi
requests (counted with `mntr`), a failed multi is split and every node
still goes, the pre-commit check of thousands of locks in a few requests
and a lost one among them named; ancestors of lock parents not created
again, and a removed one not in the way.
"""

import psycopg2

from harness import wait_until

TIMEOUT = 180                   # seconds per test (a pytest-timeout bound)

MANY = "SELECT count(%s(%%s || '/' || i)) FROM generate_series(1, %%s) i"
MANY_X = MANY % 'zk_lock_exclusive'
MANY_SESSION = MANY % 'zk_session_lock_exclusive'


def ephemerals_under(ctx, resource_prefix):
    """Ephemeral nodes the server holds under <root>/<resource_prefix>/."""
    prefix = ctx.zi.parent_path(resource_prefix) + '/'
    dump = ctx.zk.four_letter(1, 'dump', timeout=30)
    return [ln.strip() for ln in dump.splitlines()
            if ln.strip().startswith(prefix)]


def packets_received(ctx):
    mntr = ctx.zk.four_letter(1, 'mntr')
    for line in mntr.splitlines():
        key, _, value = line.partition('\t')
        if key == 'zk_packets_received':
            return int(value)
    raise AssertionError('no zk_packets_received in mntr:\n' + mntr)


def take_many(ctx, b, sql, prefix, n):
    got = b.scalar(sql, [prefix, n], timeout=150)
    assert got == n, got
    wait_until(lambda: len(ephemerals_under(ctx, prefix)) == n, 30,
               '%d nodes of %s in ZooKeeper' % (n, prefix))


def wait_all_gone(ctx, prefix, what):
    last = []

    def gone():
        nonlocal last
        last = ephemerals_under(ctx, prefix)
        return not last
    try:
        wait_until(gone, 30, what)
    except TimeoutError:
        raise AssertionError('%s: %d node(s) left, e.g. %s'
                             % (what, len(last), last[:3])) from None


def requests_to_commit(ctx, prefix, n, verify, before_commit=None):
    """Take n transaction-level locks under prefix in one transaction,
    COMMIT, wait until ZooKeeper has deleted every node; returns how many
    requests ZooKeeper received from the COMMIT on (our own mntr/dump
    polls count as packets too)."""
    b = ctx.backend(prefix)
    b.query('SET zklock.verify_at_commit = %s' % verify)
    b.query('BEGIN')
    take_many(ctx, b, MANY_X, prefix, n)
    if before_commit:
        before_commit()
    before = packets_received(ctx)
    b.query('COMMIT')
    wait_all_gone(ctx, prefix, 'nodes of %s deleted after COMMIT' % prefix)
    return packets_received(ctx) - before


def test_commit_releases_in_few_requests(ctx):
    """2,500 transaction-level locks: COMMIT deletes them all with a
    handful of requests (3 multis), not 2,500."""
    n = 2500
    sent = requests_to_commit(ctx, 'bulk-commit', n, 'off')  # deletes only
    ctx.figure('requests to release %d locks at COMMIT' % n, sent)
    assert sent < 200, '%d requests to release %d locks' % (sent, n)


def test_failed_batch_is_split(ctx):
    """An operator deletes one held node; the multi that contains it fails
    as a whole, and its other deletes are sent one by one.  (The check is
    off, so the COMMIT goes through despite the loss.  The node deleted is
    the 600th lock's: only the first 16 held nodes are watched, and a
    deletion the backend heard of from a watch fails the COMMIT even with
    the check off, as the manual says and test_lockloss shows.)"""
    n, prefix = 1200, 'bulk-split'

    def delete_one():
        parent = ctx.zi.parent_path('%s/%d' % (prefix, n // 2)) + '/'
        [node] = [p for p in ephemerals_under(ctx, prefix)
                  if p.startswith(parent)]
        ctx.kz.delete(node)
    sent = requests_to_commit(ctx, prefix, n, 'off', delete_one)
    # the failed multi held at least 200 deletes (1,000 + 200 in two
    # batches): each came back as a request of its own
    ctx.figure('requests after a failed multi (%d locks)' % (n - 1), sent)
    assert sent >= 150, \
        'only %d requests: the failed multi was not split' % sent


def test_unlock_all_and_rollback_to_savepoint(ctx):
    """zk_unlock_all() and ROLLBACK TO SAVEPOINT release in bulk too."""
    n = 1500
    b = ctx.backend('bulk-other')
    take_many(ctx, b, MANY_SESSION, 'bulk-session', n)
    before = packets_received(ctx)
    b.query('SELECT zk_unlock_all()')
    wait_all_gone(ctx, 'bulk-session', 'nodes deleted by zk_unlock_all()')
    sent = packets_received(ctx) - before
    assert sent < 200, '%d requests to release %d session locks' % (sent, n)

    ctx.figure('requests to release %d session locks by zk_unlock_all()'
               % n, sent)

    # ROLLBACK TO SAVEPOINT: the locks taken since the savepoint go in a
    # few multis; one taken before it stays
    b.query('BEGIN')
    b.query("SELECT zk_lock_exclusive('bulk-savepoint-kept')")
    [kept] = ctx.zi.wait_contenders('bulk-savepoint-kept', 1)
    b.query('SAVEPOINT s')
    take_many(ctx, b, MANY_X, 'bulk-savepoint', n)
    before = packets_received(ctx)
    b.query('ROLLBACK TO SAVEPOINT s')
    wait_all_gone(ctx, 'bulk-savepoint', 'nodes deleted by ROLLBACK TO')
    sent_sp = packets_received(ctx) - before
    ctx.figure('requests to release %d locks by ROLLBACK TO SAVEPOINT' % n,
               sent_sp)
    assert sent_sp < 200, '%d requests to release %d locks at ROLLBACK TO ' \
        'SAVEPOINT' % (sent_sp, n)
    assert b.query('SELECT resource FROM zk_locks') == \
        [('bulk-savepoint-kept',)]
    assert [c.name for c in ctx.zi.contenders('bulk-savepoint-kept')] == \
        [kept.name]
    b.query('COMMIT')
    ctx.zi.wait_contenders('bulk-savepoint-kept', 0)


def test_verify_many_in_few_requests(ctx):
    """The pre-commit check of 2,500 locks: a few multi "check" requests,
    not 2,500 exists."""
    n = 2500
    sent = requests_to_commit(ctx, 'bulk-verify', n, 'on')
    ctx.figure('requests to confirm and release %d locks at COMMIT' % n, sent)
    assert sent < 200, '%d requests to confirm and release %d locks' \
        % (sent, n)


def session_requests(ctx, b):
    """Requests ZooKeeper has received from backend b's own session
    (`cons`: neither other clients nor four letter words count)."""
    sid = int(b.scalar('SELECT session_id FROM zk_status()'), 16)
    counts = ctx.zk.requests_by_session()
    assert sid in counts, 'session 0x%x not in cons: %r' % (sid, counts)
    return counts[sid]


def test_verify_costs_requests_per_commit(ctx):
    """What zklock.verify_at_commit costs, counted on the backend's own
    session: a COMMIT of 3 locks sends one multi delete with the check
    off, and with it on a sync more and, with zklock.cancel_on_loss off, 3
    exists (with it on, each held node's own watch, sent 20 ms after the
    grant and waited for here, confirms it with the sync alone); of 20
    locks (the multi "check" path), one multi delete
    off and one multi check more on.  Off must cost fewer requests per
    commit than on.  An idle session's ping may land in a window: the
    least of three commits counts."""
    b = ctx.backend('bulk-verify-cost')
    costs = {}
    for n, verify, cancel in ((3, 'off', 'off'), (3, 'on', 'off'),
                              (3, 'on', 'on'), (20, 'off', 'on'),
                              (20, 'on', 'on')):
        prefix = 'bulk-cost-%d' % n
        b.query('SET zklock.verify_at_commit = %s' % verify)
        b.query('SET zklock.cancel_on_loss = %s' % cancel)
        tries = []
        for _ in range(3):
            b.query('BEGIN')
            assert b.scalar(MANY_X, [prefix, n]) == n
            if cancel == 'on':
                # the held nodes' watches (the first 16) are sent 20 ms
                # after the grant: not in the COMMIT's count
                wait_until(lambda: sum(line.count(prefix + '/') for sid in ctx.zk.sids
                                       for line in ctx.zk.four_letter(sid, 'wchc')
                                       .splitlines()) >= min(n, 16),
                           10, 'the held nodes of %s watched' % prefix)
            before = session_requests(ctx, b)
            b.query('COMMIT')
            wait_all_gone(ctx, prefix, 'nodes of %s deleted' % prefix)
            tries.append(session_requests(ctx, b) - before)
        costs[(n, verify, cancel)] = min(tries)
        ctx.figure('requests per COMMIT of %d locks, verify_at_commit '
                   '%s, cancel_on_loss %s' % (n, verify, cancel),
                   min(tries))
    b.query('RESET zklock.verify_at_commit')
    b.query('RESET zklock.cancel_on_loss')
    for n, cancel in ((3, 'off'), (20, 'on')):
        off, on = costs[(n, 'off', cancel)], costs[(n, 'on', cancel)]
        assert off >= 1, 'COMMIT of %d locks sent no request' % n
        assert off < on, ('%d locks: verify_at_commit off cost %d requests '
                          'per COMMIT, on %d: off must cost fewer'
                          % (n, off, on))
    # the expected figures: deletes in one multi; the check is a sync and
    # one exists per unwatched node below 16 locks, and one multi check
    # from 16 on
    assert costs[(3, 'off', 'off')] == 1, costs
    assert costs[(3, 'on', 'off')] == 5, costs
    assert costs[(3, 'on', 'on')] == 2, costs
    assert costs[(20, 'off', 'on')] == 1, costs
    assert costs[(20, 'on', 'on')] == 2, costs


def test_verify_many_names_the_lost_lock(ctx):
    """One of 300 held nodes deleted by an operator: the multi check fails,
    the exists that follow find which, COMMIT fails with 40001 naming it,
    and the other 299 nodes are deleted."""
    n, prefix = 300, 'bulk-lost'
    b = ctx.backend('bulk-lost')
    ctx.admin.query('DROP TABLE IF EXISTS bulk_lost_rows')
    ctx.admin.query('CREATE TABLE bulk_lost_rows (x int)')
    b.query('SET zklock.verify_at_commit = on')
    b.query('BEGIN')
    take_many(ctx, b, MANY_X, prefix, n)
    b.query('INSERT INTO bulk_lost_rows VALUES (1)')
    victim = sorted(ephemerals_under(ctx, prefix))[n // 3]
    lost = victim.rsplit('/', 2)[1]         # the lock parent's last level
    ctx.kz.delete(victim)
    try:
        b.query('COMMIT')
    except psycopg2.Error as e:
        assert e.pgcode == '40001', (e.pgcode, str(e))
        assert '"%s/%s"' % (prefix, lost) in str(e), str(e)
    else:
        raise AssertionError('COMMIT succeeded although a lock was lost')
    assert ctx.admin.scalar('SELECT count(*) FROM bulk_lost_rows') == 0
    wait_all_gone(ctx, prefix, 'the other nodes deleted after the failed COMMIT')


def test_known_levels_not_created_again(ctx):
    """Once 'lvl/one' is locked, the backend knows <root>/lvl exists: the
    next new lock under it costs one create less.  When an operator then
    removes <root>/lvl, the next lock under it still succeeds."""
    b = ctx.backend('bulk-levels')
    b.query('SET zklock.verify_at_commit = off')
    b.query("SELECT zk_lock_exclusive('lvl/one')")      # autocommit: released
    ctx.zi.wait_contenders('lvl/one', 0)

    def requests_for(res):
        """Requests ZooKeeper received while the lock was taken (the
        four letter words that read the counter are not requests)."""
        b.query('BEGIN')
        before = packets_received(ctx)
        b.query('SELECT zk_lock_exclusive(%s)', [res])
        sent = packets_received(ctx) - before
        b.query('COMMIT')
        return sent

    # <root>/lvl/two-N is new: create (NONODE) + listing, then create of
    # the parent + create + listing: 5.  Without the cache the root and
    # <root>/lvl would be created again too (7).  Idle sessions' pings may
    # add one now and then: the least of three tries counts.
    # The server counts the four letter word that reads the counter as a
    # packet too: subtract what an empty window shows.
    empty = min(-packets_received(ctx) + packets_received(ctx)
                for _ in range(3))
    fresh = [requests_for('lvl/two-%d' % i) - empty for i in range(3)]
    ctx.figure('requests to take a lock with a new parent under a known level',
               min(fresh))
    assert min(fresh) <= 5, (fresh, empty)

    # COMMIT sends the releases without waiting for them: the last one may
    # still be on its way, and the parent is not empty until it lands
    for i in range(3):
        ctx.zi.wait_contenders('lvl/two-%d' % i, 0)
    for child in ctx.kz.get_children(ctx.zi.parent_path('lvl')):
        ctx.kz.delete(ctx.zi.parent_path('lvl') + '/' + child)
    ctx.kz.delete(ctx.zi.parent_path('lvl'))
    assert ctx.kz.exists(ctx.zi.parent_path('lvl')) is None
    b.query('BEGIN')
    b.query("SELECT zk_lock_exclusive('lvl/three')")
    assert len(ctx.zi.contenders('lvl/three')) == 1
    b.query('COMMIT')
