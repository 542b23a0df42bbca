"""
Revocation (issue 39, point 2): a lock can be asked back.

zk_lock_revoke(resource, wait) writes a request into the node of each
current holder of the lock, in the words that holder understands: a
zklock holder's owner line gets a second line naming the requester, a
Curator holder gets "__REVOKE__" (what Curator's Revoker writes; a lock
made revocable gives itself up); kazoo holders and semaphore leases of
other clients have no revocation and are not written ("not
revocable").  A zklock holder with zklock.on_revoke = cancel (the
default) gives the lock back: the statement running under it ends with
40001 "was revoked" naming the requester; a holder idle between
transactions has its node deleted at once, and its next statement is
refused; one idle in a transaction, or running code at COMMIT, keeps
the node until its transaction ends, which fails.  With
zklock.on_revoke = ignore the request is only shown: zk_lock_revoked(),
zk_locks' revoke_requested_at and revoke_requested_by, zk_lock_queue's
owner.  Nobody may revoke unless granted EXECUTE; with zklock.auth_file
the holder's node ACL refuses other identities ("denied").

Requests from outside PostgreSQL are written with kazoo, as Curator's
Revoker and the recipe write them; the Curator holder is a real
InterProcessReadWriteLock made revocable (test/java/LockPeer.java).
Each wait is bounded generously; the bench measures the time from the
request to the holder's error.

In short, this module checks: a holder running a statement, in each
node layout (40001 "was revoked" naming the requester, the node goes, a
waiter gets the lock); a session-level holder (given back at once,
refused until acknowledged, zk_locks says revoked and by whom); a holder
idle between transactions (given back with no statement of its own) and
one idle in a transaction (still held; its COMMIT fails); a request that
comes while the COMMIT runs a deferred trigger (no give-back under it;
the COMMIT refused, also with verify_at_commit off); a request after the
holder's connection broke and came back; on_revoke = ignore (shown by
zk_lock_revoked(), zk_locks, zk_lock_queue; still held); Curator's word
written over an ignoring holder's node (the owner line put back);
Curator's and the recipe's words against a cancelling holder; a real
revocable Curator write lock (releases) and a kazoo holder (not
revocable, its data untouched); a role without EXECUTE (42501), the own
lock (own), another auth_file identity (denied).
"""

import re
import time

from harness import wait_until
from test_failfast import hold
from test_interop import CuratorPeer
from test_lockloss import TS, ack_hint, assert_lost
from test_multisession import LOCK_X, LONG, expect_sqlstate, token_of

TIMEOUT = 180

NOTICE_S = 5.0                  # from a request to the holder's error
REVOKE = 'SELECT node, request, outcome FROM zk_lock_revoke(%s, %s)'
REVOKED_HINT = ('Roll back; take the lock again once whoever asked for it '
                'is done with it.')


def revoked_msg(res, mode='exclusive'):
    return '%s zklock on "%s" was revoked' % (mode, res)


def by_zklock_detail(node, app):
    """The DETAIL of a lock a zklock backend (application_name app) asked
    back."""
    return (r'It was asked back at %s by zklock host=\S+ port=\d+ '
            r'sysid=\d+ start=\d+ pid=\d+ db=\S+ role=\S+ '
            r'application_name=%s; this backend gave node "%s" back '
            r'\(zklock\.on_revoke is "cancel"\)\.'
            % (TS, re.escape(app), re.escape(node)))


def by_word_detail(word, node):
    return (r'A client outside PostgreSQL wrote "%s" into node "%s" at %s; '
            r'this backend gave the node back \(zklock\.on_revoke is '
            r'"cancel"\)\.' % (re.escape(word), re.escape(node), TS))


def watched(ctx, path):
    """The holder's data watch on its node is registered (set without
    waiting, right after the grant)."""
    wait_until(lambda: ctx.zk.watches_by_path().get(path), 10,
               'the holder\'s watch on %s' % path)


def test_revoked_statement_ends_in_every_layout(ctx):
    """A holder running a statement under a transaction-level lock, in each
    node layout: zk_lock_revoke(res, '10 s') asks it in zklock's words, its
    statement ends with 40001 "was revoked" naming the requester, the node
    is gone, the revoker reports "released", and a waiter gets the lock."""
    for protocol in ('curator-rw', 'curator-mutex', 'kazoo'):
        res = 'rv-every/%s' % protocol
        h, node = hold(ctx, 'rv-h-%s' % protocol, res, protocol=protocol)
        watched(ctx, node.path)
        waiter = ctx.backend('rv-w-%s' % protocol)
        waiter.query("SET zklock.protocol = '%s'" % protocol)
        got = waiter.submit(LOCK_X, [res, LONG])
        ctx.zi.wait_contenders(res, 2)
        fut = h.submit('SELECT pg_sleep(60)')
        wait_until(lambda: h.busy, 10, 'the holder\'s statement running')
        time.sleep(0.2)
        revoker = ctx.backend('rv-asker-%s' % protocol)
        t0 = time.monotonic()
        rows = revoker.query(REVOKE, [res, '10 seconds'])
        assert rows == [(node.name, 'zklock', 'released')], (protocol, rows)
        e = expect_sqlstate(fut, '40001', NOTICE_S + 25, 'revoked statement')
        assert time.monotonic() - t0 < NOTICE_S, protocol
        assert_lost(e, revoked_msg(res),
                    by_zklock_detail(node.path, 'rv-asker-%s' % protocol),
                    REVOKED_HINT)
        h.query('ROLLBACK')
        token_of(got, 10, 'the waiter after the revocation')
        waiter.close()
        ctx.zi.wait_contenders(res, 0)


def test_revoked_session_lock(ctx):
    """A session-level lock asked back while a statement runs: 40001 with
    the acknowledge HINT, the node deleted at once (not at the
    acknowledgement), zk_locks shows it revoked and by whom, statements
    that do work are refused until zk_unlock acknowledges it."""
    res = 'rv-session'
    h, node = hold(ctx, 'rv-h-session', res, session=True)
    watched(ctx, node.path)
    fut = h.submit('SELECT pg_sleep(60)')
    wait_until(lambda: h.busy, 10, 'the holder\'s statement running')
    time.sleep(0.2)
    rows = ctx.backend('rv-asker-s').query(REVOKE, [res, '10 seconds'])
    assert rows == [(node.name, 'zklock', 'released')], rows
    e = expect_sqlstate(fut, '40001', NOTICE_S + 25, 'revoked statement')
    assert_lost(e, revoked_msg(res),
                by_zklock_detail(node.path, 'rv-asker-s'),
                ack_hint('zk_unlock', res))
    assert ctx.zi.contenders(res) == []
    [(state, at, by)] = h.query(
        'SELECT state, revoke_requested_at, revoke_requested_by '
        'FROM zk_locks WHERE resource = %s', [res])
    assert state == 'revoked' and at is not None, (state, at)
    assert 'application_name=rv-asker-s' in by, by
    assert h.scalar('SELECT zk_lock_revoked(%s)', [res]) is True
    expect_sqlstate(h.submit('SELECT pg_sleep(0)'), '40001', 10,
                    'work after it')
    assert h.scalar('SELECT zk_unlock(%s)', [res]) is True
    assert h.scalar('SELECT 1') == 1


def test_idle_holder_gives_back_at_once(ctx):
    """A holder idle between transactions (a session lock in autocommit)
    runs nothing under the lock: its node is deleted as soon as the
    request is read, with no statement of its own, and its next statement
    is refused until it acknowledges.  A holder idle *in* a transaction
    keeps the node (code may run under the lock at any statement or at
    COMMIT without any hook, deferred triggers say): still held; its
    COMMIT fails with the revocation, and the node goes with the
    transaction."""
    res = 'rv-idle/session'
    h, node = hold(ctx, 'rv-h-idle', res, session=True)
    watched(ctx, node.path)
    t0 = time.monotonic()
    rows = ctx.backend('rv-asker-i').query(REVOKE, [res, '10 seconds'])
    took = time.monotonic() - t0
    assert rows == [(node.name, 'zklock', 'released')], rows
    assert took < NOTICE_S, took
    e = expect_sqlstate(h.submit('SELECT pg_sleep(0)'), '40001', 10,
                        'the idle holder\'s next statement')
    assert e.diag.message_primary == revoked_msg(res), str(e)
    assert h.scalar('SELECT zk_unlock(%s)', [res]) is True
    assert h.scalar('SELECT 1') == 1

    res = 'rv-idle/xact'
    h, node = hold(ctx, 'rv-h-idle-x', res)
    watched(ctx, node.path)
    rows = ctx.backend('rv-asker-ix').query(REVOKE, [res, '1 second'])
    assert rows == [(node.name, 'zklock', 'still held')], rows
    e = expect_sqlstate(h.submit('COMMIT'), '40001', 10, 'the COMMIT')
    assert e.diag.message_primary == revoked_msg(res), str(e)
    ctx.zi.wait_contenders(res, 0)
    assert h.scalar('SELECT 1') == 1


def test_revoked_during_commit_commits_nothing(ctx):
    """A request that arrives while the COMMIT runs a deferred trigger
    (PL/pgSQL expressions only: no executor, no statement frame): the
    node is not given back under the running trigger, and the COMMIT is
    refused with the revocation -- also with zklock.verify_at_commit off,
    which asks the ensemble nothing.  The row is not there."""
    a = ctx.admin
    a.query('DROP TABLE IF EXISTS rv_deferred')
    a.query('CREATE TABLE rv_deferred (x int)')
    a.query("""CREATE OR REPLACE FUNCTION rv_slow() RETURNS trigger
               LANGUAGE plpgsql AS $$
               DECLARE v text;
               BEGIN v := pg_sleep(3)::text; RETURN NULL; END $$""")
    a.query('CREATE CONSTRAINT TRIGGER rv_slow AFTER INSERT ON rv_deferred '
            'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW '
            'EXECUTE FUNCTION rv_slow()')
    res = 'rv-deferred'
    h, node = hold(ctx, 'rv-h-deferred', res)
    h.query('SET zklock.verify_at_commit = off')
    watched(ctx, node.path)
    h.query('INSERT INTO rv_deferred VALUES (1)')
    fut = h.submit('COMMIT')
    wait_until(lambda: a.scalar("SELECT wait_event FROM pg_stat_activity "
                                "WHERE pid = %s", [h.pid]) == 'PgSleep',
               10, 'the deferred trigger sleeping in the COMMIT')
    rows = ctx.backend('rv-asker-d').query(REVOKE, [res, '1 second'])
    assert rows == [(node.name, 'zklock', 'still held')], rows
    e = expect_sqlstate(fut, '40001', 30, 'the COMMIT')
    assert e.diag.message_primary == revoked_msg(res), str(e)
    assert a.scalar('SELECT count(*) FROM rv_deferred') == 0
    ctx.zi.wait_contenders(res, 0)


def test_request_after_a_reconnect(ctx):
    """The holder's connection to ZooKeeper breaks and comes back (the
    session lives on): a request written afterwards is still heard
    (libzookeeper set the node's watch again on the new connection) and
    acted on."""
    from test_outage import Cut
    res = 'rv-reconnect'
    with Cut(ctx, 'rv-reconnect') as cut:
        h = cut.backend('rv-h-reconnect')
        token_of(h.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 10)
        [node] = ctx.zi.wait_contenders(res, 1)
        watched(ctx, node.path)
        sid = h.scalar('SELECT session_id FROM zk_status()')
        cut.proxy.drop_all()
        wait_until(lambda: len([c for c in cut.proxy.connections()
                                if not c.ended]) >= 1 and
                   h.scalar('SELECT state FROM zk_status()') == 'connected',
                   20, 'the holder connected again')
        assert h.scalar('SELECT session_id FROM zk_status()') == sid
        watched(ctx, node.path)
        rows = ctx.backend('rv-asker-r').query(REVOKE, [res, '10 seconds'])
        assert rows == [(node.name, 'zklock', 'released')], rows
        assert h.scalar('SELECT zk_lock_revoked(%s)', [res]) is True
        assert h.scalar('SELECT zk_unlock(%s)', [res]) is True


def test_on_revoke_ignore_only_shows(ctx):
    """zklock.on_revoke = ignore (set for the session, or as a connection
    option as ALTER ROLE/DATABASE SET would): the holder runs on and
    commits; zk_lock_revoked() is true, zk_locks says when and by whom,
    zk_lock_queue shows the request under the owner line; a second request
    reports "already requested"; the revoker's wait ends "still held"."""
    res = 'rv-ignore'
    h, node = hold(ctx, 'rv-h-ignore', res)
    h.query("SET zklock.on_revoke = 'ignore'")
    watched(ctx, node.path)
    assert h.scalar('SELECT zk_lock_revoked(%s)', [res]) is False
    asker = ctx.backend('rv-asker-ign')
    rows = asker.query(REVOKE, [res, '1 second'])
    assert rows == [(node.name, 'zklock', 'still held')], rows
    wait_until(lambda: h.scalar('SELECT zk_lock_revoked(%s)', [res]), 10,
               'the request seen by the holder')
    [(state, at, by)] = h.query(
        'SELECT state, revoke_requested_at, revoke_requested_by '
        'FROM zk_locks WHERE resource = %s', [res])
    assert state == 'held' and at is not None, (state, at)
    assert 'application_name=rv-asker-ign' in by, by
    [(owner,)] = asker.query('SELECT owner FROM zk_lock_queue(%s)', [res])
    first, second = owner.split('\n')
    assert first.startswith('zklock ') and 'application_name=rv-h-ignore' \
        in first, owner
    assert second.startswith('revoke zklock ') and \
        'application_name=rv-asker-ign' in second, owner
    assert asker.query(REVOKE, [res, '0']) == \
        [(node.name, 'zklock', 'already requested')]
    assert h.scalar('SELECT 1') == 1
    h.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)

    # the setting as a connection option (what ALTER ROLE ... SET gives)
    b = ctx.backend('rv-h-ignore2', options='-c zklock.on_revoke=ignore')
    token_of(b.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 10)
    [node] = ctx.zi.wait_contenders(res, 1)
    watched(ctx, node.path)
    assert asker.query(REVOKE, [res, '1 second']) == \
        [(node.name, 'zklock', 'still held')]
    assert b.scalar('SELECT 1') == 1
    assert b.scalar('SELECT zk_lock_revoked(%s)', [res]) is True
    assert b.scalar('SELECT zk_unlock(%s)', [res]) is True


def test_word_under_ignore_keeps_the_owner_line(ctx):
    """Curator's word written over an ignoring holder's node: the holder
    puts its owner line back, the word as the request's second line, so
    other backends still name it (wait logs, the deadlock search)."""
    res = 'rv-word-ignore'
    h, node = hold(ctx, 'rv-h-wordign', res)
    h.query("SET zklock.on_revoke = 'ignore'")
    watched(ctx, node.path)
    before = ctx.kz.get(node.path)[0]
    ctx.kz.set(node.path, b'__REVOKE__')
    wait_until(lambda: ctx.kz.get(node.path)[0] ==
               before + b'\nrevoke __REVOKE__', 10,
               'the owner line put back under the request')
    assert h.scalar('SELECT zk_lock_revoked(%s)', [res]) is True
    assert h.scalar('SELECT revoke_requested_by FROM zk_locks') == \
        '__REVOKE__'
    h.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_words_of_other_clients(ctx):
    """Curator's Revoker writes "__REVOKE__" into the holder's node, the
    recipe "unlock": a zklock holder gives the lock back for either, and
    its error names the word."""
    for word in ('__REVOKE__', 'unlock'):
        res = 'rv-word/%s' % word.strip('_')
        h, node = hold(ctx, 'rv-h-word', res)
        watched(ctx, node.path)
        fut = h.submit('SELECT pg_sleep(60)')
        wait_until(lambda: h.busy, 10, 'the holder\'s statement running')
        time.sleep(0.2)
        ctx.kz.set(node.path, word.encode())
        e = expect_sqlstate(fut, '40001', NOTICE_S + 25, 'statement')
        assert_lost(e, revoked_msg(res), by_word_detail(word, node.path),
                    REVOKED_HINT)
        h.query('ROLLBACK')
        ctx.zi.wait_contenders(res, 0)
        h.close()


def test_curator_and_kazoo_holders(ctx):
    """A real Curator holder made revocable (InterProcessReadWriteLock's
    write lock) gets "__REVOKE__" and releases: the revoker reports
    "released" and a zklock waiter gets the lock.  A kazoo holder has no
    revocation and reads its node's data as its holder's name: nothing is
    written ("not revocable"), and it keeps the lock."""
    res = 'rv-curator'
    path = ctx.zi.parent_path(res)
    peer = CuratorPeer(ctx, 'rv-cur')
    try:
        peer._send('acquire-revocable write %s -1' % path)
        cnode = peer.result(30)
        assert cnode, 'the Curator peer did not get the lock'
        waiter = ctx.backend('rv-w-cur')
        got = waiter.submit(LOCK_X, [res, LONG])
        ctx.zi.wait_contenders(res, 2)
        rows = ctx.backend('rv-asker-c').query(REVOKE, [res, '10 seconds'])
        assert rows == [(cnode.rsplit('/', 1)[1], '__REVOKE__', 'released')], \
            rows
        assert peer._answer(10, 'the revocation') == 'revoked released'
        token_of(got, 10, 'the zklock waiter after Curator let go')
        waiter.close()
    finally:
        peer.stop()

    from kazoo.recipe.lock import Lock
    res = 'rv-kazoo'
    lock = Lock(ctx.kz, ctx.zi.parent_path(res), 'kazoo-holder')
    assert lock.acquire(timeout=10)
    try:
        [node] = ctx.zi.wait_contenders(res, 1)
        rows = ctx.backend('rv-asker-k').query(REVOKE, [res, '1 second'])
        assert rows == [(node.name, None, 'not revocable')], rows
        assert ctx.kz.get(node.path)[0] == b'kazoo-holder'
        assert lock.contenders() == ['kazoo-holder']
        assert lock.is_acquired
    finally:
        lock.release()


def test_who_may_revoke(ctx):
    """Nobody may revoke unless granted EXECUTE (42501); a backend's own
    lock is reported "own" and left alone; with zklock.auth_file the
    holder's node ACL refuses another identity: "denied" with a WARNING,
    the node's data unchanged, the holder untouched."""
    from test_security import authed
    ctx.kz.ensure_path(ctx.root + '/%waits')
    a = ctx.admin
    a.query('DROP ROLE IF EXISTS zklock_rv_user')
    a.query('CREATE ROLE zklock_rv_user LOGIN')
    try:
        u = ctx.backend('rv-user', user='zklock_rv_user')
        expect_sqlstate(u.submit("SELECT * FROM zk_lock_revoke('x')"),
                        '42501', 10, 'zk_lock_revoke without EXECUTE')
        expect_sqlstate(u.submit("SELECT zk_lock_revoked('x')"),
                        '42501', 10, 'zk_lock_revoked without EXECUTE')
        u.close()
    finally:
        a.query('DROP ROLE zklock_rv_user')

    res = 'rv-own'
    h, node = hold(ctx, 'rv-h-own', res)
    assert h.query(REVOKE, [res, '1 second']) == [(node.name, None, 'own')]
    assert ctx.kz.get(node.path)[0].startswith(b'zklock ')
    assert b'\n' not in ctx.kz.get(node.path)[0]
    assert h.scalar('SELECT 1') == 1
    h.query('COMMIT')

    res = 'rv-auth/job'
    owner = authed(ctx, 'rv-h-auth')
    owner.query('BEGIN')
    token_of(owner.submit(LOCK_X, [res, LONG]), 15)
    [node] = ctx.zi.wait_contenders(res, 1)
    before = ctx.kz.get(node.path)[0]
    other = ctx.backend('rv-asker-auth')
    notices = len(other.conn.notices)
    assert other.query(REVOKE, [res, '0']) == \
        [(node.name, 'zklock', 'denied')]
    assert any('ZooKeeper refused to write the request' in n
               for n in other.conn.notices[notices:]), other.conn.notices
    assert ctx.kz.get(node.path)[0] == before
    assert owner.scalar('SELECT 1') == 1
    owner.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)
