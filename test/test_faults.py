"""
Fault tests: requests whose waiter gave up before ZooKeeper answered.

A create that ZooKeeper carries out after the SQL call has already failed
must not leave a contender behind (it would block the lock until the
backend exits).  The ensemble is frozen with SIGSTOP so that the create
sits in the server's socket while the call times out; after SIGCONT the
server creates the node, and the extension must delete it on its own.

Each test proves the create really happened (the lock parent's cversion
counts child creations and deletions), so that "no node left" is not
satisfied vacuously by a create that never ran.

In short, this module checks: a create that ZooKeeper carries out after the
call timed out (ensemble frozen with SIGSTOP) is deleted; one whose reply
was lost is swept after the reconnect; the call's timeout bounds the wait
for a session.
"""

import time

import harness
from harness import wait_until
from test_multisession import LOCK_X, expect_sqlstate, token_of, stays

TIMEOUT = 120


def parent_cversion(ctx, res):
    stat = ctx.kz.exists(ctx.zi.parent_path(res))
    assert stat is not None, 'lock parent of %s missing' % res
    return stat.cversion


KEEP = 'keep-parent'     # not a contender name: zklock ignores it


def prepare_parent(ctx, b, res):
    """One lock cycle, so the lock parent exists and its cversion is known.
    A plain child keeps the parent from being removed by the server while
    it has no contender (it is a container, reaped when found empty, once
    a minute), which would lose its cversion in the middle of a test."""
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, [res, '10 seconds']), 10)
    b.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)
    ctx.kz.ensure_path(ctx.zi.parent_path(res) + '/' + KEEP)
    return parent_cversion(ctx, res)


def finish_usable(ctx, b, res, timeout, what):
    """The backend still takes the lock afterwards; then the lock parent is
    let go (see prepare_parent)."""
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, [res, '10 seconds']), timeout, what)
    b.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)
    ctx.kz.delete(ctx.zi.parent_path(res) + '/' + KEEP)


def frozen_call(ctx, b, res, freeze_s):
    """Freeze ZooKeeper, make a 1-second lock call that must fail with
    55P03 during the freeze, and thaw after freeze_s seconds."""
    ctx.zk.pause(1)
    try:
        t0 = time.monotonic()
        fut = b.submit(LOCK_X, [res, '1 second'])
        expect_sqlstate(fut, '55P03', 10, 'lock call against a frozen ensemble')
        elapsed = time.monotonic() - t0
        assert 0.9 <= elapsed < 5, \
            'the 1 s timeout ended the call after %.2f s' % elapsed
        time.sleep(max(0.0, freeze_s - elapsed))
    finally:
        ctx.zk.resume(1)


def assert_cleaned_up(ctx, res, before, within, must_create=True):
    """No contender is left and the lock parent saw as many deletions as
    creations since cversion `before`; with must_create, the frozen create
    ran (cversion +1) and its node was deleted (+1).  Returns whether the
    frozen create ran."""
    def settled():
        c = parent_cversion(ctx, res)
        ran = c >= before + 2 if must_create else c % 2 == before % 2
        return ran and not ctx.zi.contenders(res)
    try:
        wait_until(settled, within, 'the late node of %s to be deleted' % res,
                   interval=0.2)
    except TimeoutError:
        raise AssertionError(
            'cversion %d -> %d, contenders %r: the late create was not '
            'cleaned up' % (before, parent_cversion(ctx, res),
                            ctx.zi.contenders(res))) from None
    stays(lambda: not ctx.zi.contenders(res), 1.0, 'no contender of %s' % res)
    return parent_cversion(ctx, res) >= before + 2


def session_and_reconnects(b):
    """(session_id, reconnects) of a backend's zk_status(); the session
    must be connected."""
    state, sid, reconnects = b.query(
        'SELECT state, session_id, reconnects FROM zk_status()')[0]
    assert state == 'connected' and sid, (state, sid)
    return sid, reconnects


def assert_same_session_reconnected(ctx, b, sid, reconnects, what):
    """After a freeze: the backend is connected again with the session it
    had (so its nodes were not removed by an expiry) and counted at least
    one reconnect (so the connection really was dropped)."""
    last = {}

    def back():
        last['row'] = b.query('SELECT state, session_id, reconnects '
                              'FROM zk_status()')[0]
        return last['row'][0] == 'connected'
    try:
        wait_until(back, ctx.session_timeout + 10,
                   '%s: the backend to be connected again' % what,
                   interval=0.2)
    except TimeoutError as e:
        raise AssertionError('%s; zk_status() (state, session_id, '
                             'reconnects) is %r' % (e, last.get('row'))) \
            from None
    state, sid_after, reconnects_after = last['row']
    assert sid_after == sid, (
        '%s: session %s became %s: the session expired, so the clean-up '
        'proves nothing about the sweep' % (what, sid, sid_after))
    assert reconnects_after > reconnects, (
        '%s: reconnects %d -> %d: the connection was never dropped, so no '
        'reply was lost' % (what, reconnects, reconnects_after))


def test_late_create_is_deleted(ctx):
    """Frozen for less than the client's ping deadline: the reply to the
    create arrives after the call gave up, and the completion deletes the
    node at once."""
    res = 'fault-late-create'
    b = ctx.backend('fault-late')
    before = prepare_parent(ctx, b, res)

    frozen_call(ctx, b, res, freeze_s=1.5)
    assert_cleaned_up(ctx, res, before, 10)

    finish_usable(ctx, b, res, 10, 'lock after the freeze')


def test_lost_create_reply_is_swept(ctx):
    """Frozen long enough for the client to drop the connection (2/3 of
    the session timeout) but not for the session to expire: the create's
    reply is lost, so after the reconnect the extension lists the parent
    and deletes the node it finds by its unique prefix.

    Whether the frozen server still runs the create depends on whether it
    reads it before it replaces the dropped connection (then the sweep
    must delete the node) or discards it (then there is nothing to clean).
    Every attempt must end with no contender and as many deletions as
    creations; the test repeats until the server did run the create, so
    the sweep was really exercised.

    An expired session would delete the node too, without any sweep: each
    attempt checks that the backend kept its ZooKeeper session (same
    zk_status().session_id, connected) and really reconnected (its
    reconnects counter grew)."""
    res = 'fault-lost-reply'
    b = ctx.backend('fault-lost')
    freeze = ctx.session_timeout * 0.8
    exercised = 0
    for attempt in range(4):
        before = prepare_parent(ctx, b, res)
        sid, reconnects = session_and_reconnects(b)
        frozen_call(ctx, b, res, freeze_s=freeze)

        ran = assert_cleaned_up(ctx, res, before, ctx.session_timeout + 10,
                                must_create=False)
        assert_same_session_reconnected(ctx, b, sid, reconnects,
                                        'attempt %d' % (attempt + 1))
        if ran:
            exercised += 1
            break
        ctx.log('attempt %d: the server discarded the frozen create; again'
                % (attempt + 1))
    assert exercised, 'in 4 attempts the server never ran the frozen create'

    finish_usable(ctx, b, res, 15, 'lock after reconnect')


def test_timeout_bounds_the_wait_for_a_session(ctx):
    """The call's timeout (and lock_timeout) bound the wait for a session
    too: with no server answering and connect_timeout 10 s, a call with
    timeout '1 second' fails with 55P03 after about 1 s, not 08001 after
    10 s.  Without a timeout, connect_timeout gives 08001, and zk_status()
    then says 'failed' (not 'none', as before a first call)."""
    closed = harness.closed_port()
    b = ctx.backend('fault-connect-bound')
    b.query("SET zklock.hosts = '127.0.0.1:%d'" % closed)
    b.query("SET zklock.connect_timeout = '10s'")
    for how, sql, args in (
            ('timeout', LOCK_X, ['fault-connect', '1 second']),
            ('lock_timeout', 'SELECT zk_lock_exclusive(%s)', ['fault-connect'])):
        if how == 'lock_timeout':
            b.query("SET lock_timeout = '1s'")
        t0 = time.monotonic()
        expect_sqlstate(b.submit(sql, args), '55P03', 15, 'call with ' + how)
        elapsed = time.monotonic() - t0
        assert 0.9 <= elapsed < 5, '%s of 1 s ended the call after %.2f s' \
            % (how, elapsed)
    b.query('RESET lock_timeout')
    b.query("SET zklock.connect_timeout = '1s'")
    expect_sqlstate(b.submit('SELECT zk_lock_exclusive(%s)', ['fault-connect']),
                    '08001', 15, 'call without a timeout')
    # zk_status() tells a failed connect from a backend that never tried
    # (issue 42: it said 'none' for both), and a connect that works again
    # shows connected
    assert b.scalar('SELECT state FROM zk_status()') == 'failed'
    b.query('RESET zklock.hosts')
    b.query('RESET zklock.connect_timeout')
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, ['fault-connect', '10 seconds']), 15,
             'the lock once the hosts are right again')
    assert b.scalar('SELECT state FROM zk_status()') == 'connected'
    b.query('COMMIT')
