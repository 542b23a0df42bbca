"""
Races and lost replies forced at one exact request, through a ZooKeeper
proxy (test/lib/zkproxy.py) between a backend and the server.

Each test points one backend's ZooKeeper session at its own proxy
(`SET zklock.hosts`, before the backend's first lock call) and uses the
runner's kazoo client, connected to the real server, to look on and to
play the other contenders:

  a  a waiter whose predecessor is gone by the time its watch request is
     handled must not leave a watch behind (an `exists` watch on a
     missing node is registered by ZooKeeper and lives as long as the
     session; a getData watch is not registered on NONODE);
  b  the sweep that deletes a node whose create reply was lost syncs the
     server it reads before listing the lock parent;
  c  a release delete answered with ZSESSIONMOVED (the server did not run
     it) is sent again after the reconnect, not dropped;
  d  the pre-commit check answered with an error other than a lost
     connection fails the COMMIT at once, saying so, not after a session
     timeout as if no server had answered;
  e  a waiter with one contender ahead is granted by its watches (its
     own node's and its predecessor's) with no listing, and its COMMIT
     confirms the node with a sync alone;
  f  such a node deleted after the grant fails the COMMIT with 40001;
  g  after a dropped connection the check asks with exists again;
  h  the internal mutex of a kazoo-layout semaphore is never granted by
     the watches alone: a listing comes before the leases are counted;
  i  a deadlock search lists a queue once and reads each node ahead once,
     however many of the waiters ahead it follows (their records make it
     follow every one);
  j  lost locks leave no entry in the watch table: after more lost locks
     than it has room for, a waiter still sets its own-node watch;
  k  a Curator-layout semaphore sends its internal mutex's delete right
     behind its lease's create, before the create's reply;
  l  ... and when that count finds no room, gives the lease back and
     queues on the mutex once more, keeping it this time while it waits;
  m  a request the server leaves unanswered until another one arrives
     (ZooKeeper 3.8.0's lost wake-up, ZOOKEEPER-4537, played by the proxy
     holding it back) is freed by the reply nudge well before the
     receive timeout, at each place zklock waits for a reply (lock call,
     listing, commit check, array call, semaphore lease) and at the one
     where it does not (a release's delete, while the next holder waits);
  n  the nodes of an array call's multi that ran after the call gave up
     (its reply lost) are the backend's own in the next call's listing,
     made before the sweep's deletes went out: not contenders in its way;
  o  the wait record of a wait that ended (its connection cut) closes no
     cycle: its beat does not advance;
  p  a waiter with nothing outstanding sends idle nudges at growing gaps;
  q  a wake (another member writing the waiter's record back) that meets
     the waiter's own beat is not forgotten: the waiter searches at once;
  r  a wake refused for an old version (the waiter beat in between) is
     sent again with the record read anew.
  s  a waiter whose record is gone at its search goes on waiting and
     publishes it again (its backend crashed before);
  t  a semaphore's lease that goes during its waiter's search makes no
     false deadlock of the holder left (both layouts);
  u  a wake that lands after the waiter's beat but before the read that
     sets its watch again is answered with a beat too, not a search
     alone.

Every test proves that its race really happened (the hook fired, the
server answered what the race implies), so that a pass is not vacuous.
"""

import threading
import time
import types
import uuid

import psycopg2

import zkproxy
from harness import wait_until
from test_multisession import LOCK_X, expect_sqlstate, token_of, \
    watched_under
from zkproxy import OP_CREATE2, OP_DELETE, OP_EXISTS, OP_GETCHILDREN, \
    OP_GETCHILDREN2, OP_GETDATA, OP_MULTI, OP_PING, OP_SETDATA, OP_SYNC, \
    ZBADVERSION, ZNONODE, ZOK, ZSESSIONMOVED

TIMEOUT = 180

# Forced watch races in test a: enough that a leak of one watch per race
# stands far above the few watches a session may legitimately hold.
N_RACES = 150
WATCH_SLACK = 3

LISTING_OPS = (OP_GETCHILDREN, OP_GETCHILDREN2)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

class Scene:
    """One test's proxy, backends and kazoo-made lock parents, all undone
    on exit, failed test or not: backends closed first (their sessions
    close through the proxy, so their nodes go at once), then the proxy
    stopped, then the parents deleted once no contender is left.  After a
    passing body, leftovers and proxy errors fail the test."""

    def __init__(self, ctx, name):
        self.ctx = ctx
        self.name = name
        self.proxy = zkproxy.ZkProxy(ctx.zk.host_port(1),
                                     name='zkproxy-' + name)
        self.backends = []
        self.parents = []
        self.holders = []

    def __enter__(self):
        self.proxy.start()
        return self

    def backend(self, name):
        """A backend whose ZooKeeper session goes through the proxy."""
        b = self.ctx.backend(name)
        b.query('SET zklock.hosts = %s', [self.proxy.address])
        self.backends.append(b)
        return b

    def parent(self, res):
        """The lock parent of `res`, made here as a plain persistent node:
        a container made by zklock could be reaped by the server whenever
        it is empty between two rounds."""
        path = self.ctx.zi.parent_path(res)
        self.ctx.kz.ensure_path(path)
        self.parents.append(path)
        return path

    def holder(self, parent):
        """A foreign exclusive contender, named as Curator's
        InterProcessReadWriteLock names it, owned by the kazoo session."""
        path = self.ctx.kz.create(
            parent + '/_c_%s-__WRIT__' % uuid.uuid4(),
            b'zklock test_proxy: foreign holder', ephemeral=True,
            sequence=True)
        self.holders.append(path)
        return path

    def __exit__(self, exc_type, exc, tb):
        from kazoo.exceptions import NoNodeError, NotEmptyError
        kz = self.ctx.kz
        self.proxy.hook = None
        for b in self.backends:
            b.close(timeout=5)
        self.proxy.stop()
        for path in self.holders:
            try:
                kz.delete(path)
            except NoNodeError:
                pass
        left = []
        for parent in self.parents:
            try:
                wait_until(lambda: not self.ctx.zi.contenders(parent=parent),
                           self.ctx.session_timeout + 10,
                           'no contender left under %s' % parent)
                kz.delete(parent)
            except TimeoutError:
                left += [c.path for c in
                         self.ctx.zi.contenders(parent=parent)]
            except (NoNodeError, NotEmptyError):
                pass
        if exc_type is None:
            assert not left, 'nodes left behind: %r' % left
            assert not self.proxy.errors, 'proxy errors:\n%s' \
                % '\n'.join(self.proxy.errors)
        return False


def zk_status(b):
    row = b.query('SELECT state, session_id, server, reconnects '
                  'FROM zk_status()')[0]
    return types.SimpleNamespace(state=row[0], session_id=row[1],
                                 server=row[2], reconnects=row[3])


def wake_waiter(ctx, session_hex):
    """Wake the waiter of a wait record as a member that found a cycle
    whose victim it is does: write its record back unchanged, with the
    version read (read again if the waiter wrote in between)."""
    from kazoo.exceptions import BadVersionError
    path = ctx.root + '/%waits/' + session_hex
    for _ in range(10):
        data, st = ctx.kz.get(path)
        try:
            return ctx.kz.set(path, data, version=st.version)
        except BadVersionError:
            continue
    raise AssertionError('no wake of %s landed in 10 tries' % path)


def lock_cycle(ctx, b, res, what='lock'):
    """BEGIN, an exclusive lock, COMMIT; waits until its node is gone.
    Opens the backend's session the first time."""
    b.query('BEGIN')
    tok = token_of(b.submit(LOCK_X, [res, '10 seconds']), 15, what)
    b.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)
    return tok


def describe(reqs):
    return ', '.join(r.name + (' ' + r.path if r.path else '')
                     for r in reqs) or 'nothing'


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_a_watch_on_vanished_predecessor_registers_nothing(ctx):
    """N times in one backend: a foreign holder is in the way, and the
    proxy deletes it (kazoo, synchronously) just before it forwards the
    backend's watch request on it.  The server answers NONODE, the
    backend lists again and takes the lock.  Afterwards the backend's
    session must hold no watch on those N vanished paths."""
    res = 'proxy-watch-race'
    with Scene(ctx, 'watch') as sc:
        parent = sc.parent(res)
        b = sc.backend('proxy-watch')
        lock_cycle(ctx, b, res, 'warm-up lock')
        session = int(zk_status(b).session_id, 16)
        before = ctx.zk.watch_counts()

        target = {'path': None}
        raced = []

        def hook(req):
            # only the watch request on this round's holder, once
            if (req.op in (OP_EXISTS, OP_GETDATA) and req.watch
                    and req.path is not None and req.path == target['path']):
                target['path'] = None
                ctx.kz.delete(req.path)     # gone before the server reads it
                raced.append(req)

        sc.proxy.hook = hook
        for i in range(N_RACES):
            target['path'] = sc.holder(parent)
            b.query('BEGIN')
            token_of(b.submit(LOCK_X, [res, '20 seconds']), 15,
                     'lock of round %d (the hook fired %d times so far)'
                     % (i + 1, len(raced)))
            b.query('COMMIT')
            assert len(raced) == i + 1, (
                'round %d: the backend got the lock without a watch request '
                'on the holder %s (hook fired %d times)'
                % (i + 1, target['path'], len(raced)))
        sc.proxy.hook = None
        ctx.zi.wait_contenders(res, 0)

        # The race was real every time: the server handled each watch
        # request after the holder was deleted.
        answers = [r.reply.err if r.reply else None for r in raced]
        ops = sorted({r.name for r in raced})
        ctx.figure('a: forced races (hook fired)', len(raced))
        ctx.figure('a: watch request op used', '/'.join(ops))
        assert answers == [ZNONODE] * N_RACES, (
            'every watch request should be answered NONODE (its node '
            'deleted first); answers: %r' % sorted(set(answers), key=str))

        mine = watched_under(ctx.zk.watches_by_path(), parent, session)
        after = ctx.zk.watch_counts()
        growth = after['data'] - before['data']
        ctx.figure('a: data watches of the session under the parent',
                   len(mine))
        ctx.figure('a: server data watches (wchs) growth', growth)
        ctx.figure('a: server watches (mntr zk_watch_count)',
                   after['data'] + after['child'])
        assert len(mine) <= WATCH_SLACK and growth <= WATCH_SLACK, (
            'after %d rounds whose predecessor was gone before the watch '
            'request (%s, watch=1), session %#x still watches %d paths '
            'under %s (server data watches +%d), e.g. %s: a watch request '
            'on a missing node must register nothing'
            % (N_RACES, '/'.join(ops), session, len(mine), parent, growth,
               sorted(mine)[:2]))


def test_b_sweep_after_lost_create_reply_syncs_first(ctx):
    """The backend's create is held in the proxy until the 1-second call
    has given up (55P03); then it goes to the server, which creates the
    node, and its reply is swallowed and the connection dropped.  After
    the reconnect (same session) zklock sweeps: lists the parent and
    deletes the child with the attempt's prefix.  That listing must come
    right after a sync on the same connection: a server the session
    reconnects to may lag the leader and not show the node yet."""
    res = 'proxy-lost-create-reply'
    with Scene(ctx, 'sweep') as sc:
        parent = sc.parent(res)
        b = sc.backend('proxy-sweep')
        lock_cycle(ctx, b, res, 'warm-up lock')
        st0 = zk_status(b)

        release = threading.Event()
        held = []

        def hook(req):
            if (req.op == OP_CREATE2 and not held and req.path
                    and req.path.startswith(parent + '/')):
                held.append(req)
                # Holding the hook holds the connection: the listing sent
                # back to back with the create waits behind it too.
                # Bounded: a failing test still lets it go.
                release.wait(30)
                sc.proxy.on_reply(req.cid, req.xid, swallow=True, drop=True)

        sc.proxy.hook = hook
        t0 = time.monotonic()
        expect_sqlstate(b.submit(LOCK_X, [res, '1 second']), '55P03', 10,
                        'lock call whose create is held')
        gave_up = time.monotonic() - t0
        assert held, 'the create never reached the proxy'
        release.set()

        create = held[0]
        try:
            wait_until(lambda: create.reply is not None and
                       sc.proxy.connection(create.cid).ended, 10,
                       'the reply to the held create, and the drop')
        except TimeoutError as e:
            raise AssertionError('%s: %r, %r' % (
                e, create.reply, sc.proxy.connection(create.cid))) from None
        assert create.reply.fate == 'swallowed' and create.reply.err == ZOK, \
            'the server did not create the node: %r' % create.reply
        node = create.reply.path
        ctx.figure('b: call gave up after', gave_up, 's', '%.2f')

        try:
            wait_until(lambda: ctx.kz.exists(node) is None,
                       ctx.session_timeout + 10,
                       'the sweep to delete %s' % node, interval=0.1)
        except TimeoutError as e:
            raise AssertionError('%s; requests after the drop: %s' % (
                e, describe([r for r in sc.proxy.requests()
                             if r.cid > create.cid and r.op != OP_PING]))) \
                from None

        st1 = zk_status(b)
        assert st1.session_id == st0.session_id, \
            'session changed from %s to %s: it expired' \
            % (st0.session_id, st1.session_id)
        assert st1.reconnects > st0.reconnects, \
            'no reconnect counted (%d -> %d)' \
            % (st0.reconnects, st1.reconnects)

        # The sweep's listing and what came just before it on its
        # connection (pings left out: they may fall anywhere).
        later = [r for r in sc.proxy.requests()
                 if r.cid > create.cid and r.op != OP_PING]
        listings = [r for r in later
                    if r.op in LISTING_OPS and r.path == parent]
        assert listings, 'no listing of %s after the drop: %s' \
            % (parent, describe(later))
        listing = listings[0]
        same_conn = [r for r in later if r.cid == listing.cid]
        prev = same_conn[same_conn.index(listing) - 1] \
            if same_conn.index(listing) > 0 else None
        ctx.figure('b: request before the sweep listing',
                   prev.name if prev else 'none')
        assert prev is not None and prev.op == OP_SYNC, (
            'the sweep listed %s without a sync first (requests on the new '
            'connection: %s)' % (parent, describe(same_conn)))
        assert prev.path == parent, 'the sync went to %s, not %s' \
            % (prev.path, parent)

        lock_cycle(ctx, b, res, 'lock after the reconnect')


def test_c_delete_answered_session_moved_is_retried(ctx):
    """The release delete of a COMMIT is answered ZSESSIONMOVED without
    having run: the proxy forwards a harmless exists in its place (same
    xid, so the answer keeps its place in order) and rewrites the answer
    to -118.  Then the connection drops.  After the reconnect (same
    session) the delete must be sent again and the node go; dropped, the
    node would stay until the backend exits and block the lock.

    Both signals are given because a real server gives either: ZooKeeper
    since 3.3 (ZOOKEEPER-710) closes the connection of a request whose
    session has moved instead of answering -118, and libzookeeper hands
    an -118 answer to the completion and keeps the connection open (so
    only the drop brings the reconnect that a retry waits for).  The
    -118 answer is delivered before the end of stream (see
    ZkProxy.drop), so the completion sees -118, not a connection loss,
    which zklock already retries."""
    res = 'proxy-session-moved'
    with Scene(ctx, 'moved') as sc:
        sc.parent(res)
        b = sc.backend('proxy-moved')
        lock_cycle(ctx, b, res, 'warm-up lock')
        st0 = zk_status(b)

        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, '10 seconds']), 15)
        [node] = ctx.zi.wait_contenders(res, 1)
        faked = []

        def hook(req):
            if req.op == OP_DELETE and req.path == node.path and not faked:
                faked.append(req)
                sc.proxy.on_reply(req.cid, req.xid, err=ZSESSIONMOVED,
                                  strip_body=True, drop=True)
                return zkproxy.Verdict(replace=zkproxy.encode_request(
                    req.xid, OP_EXISTS, req.path, watch=False))

        sc.proxy.hook = hook
        b.query('COMMIT')
        try:
            wait_until(lambda: faked and faked[0].reply is not None, 10,
                       'the release delete of %s to be answered' % node.path)
        except TimeoutError as e:
            raise AssertionError('%s; requests: %s' % (e, describe(
                sc.proxy.requests()[-8:]))) from None
        # The stand-in exists found the node (ZOK) where the delete would
        # have run: the server never deleted it.  (Whether it is still
        # there now depends on how fast a fixed zklock retries.)
        answer = faked[0].reply
        assert answer.sent_err == ZSESSIONMOVED and answer.err == ZOK, \
            'the stand-in exists was not answered as planned: %r' % answer

        wait_until(lambda: zk_status(b).reconnects > st0.reconnects, 20,
                   'the backend to reconnect')
        st1 = zk_status(b)
        assert st1.session_id == st0.session_id, \
            'session changed from %s to %s: it expired' \
            % (st0.session_id, st1.session_id)

        gone = True
        try:
            wait_until(lambda: ctx.kz.exists(node.path) is None, 10,
                       'the delete to be sent again', interval=0.1)
        except TimeoutError:
            gone = False
        ctx.figure('c: node deleted after the reconnect', gone)
        retried = [r for r in sc.proxy.requests(path=node.path)
                   if r.cid > faked[0].cid and r.op == OP_DELETE]
        stat = ctx.kz.exists(node.path)
        assert gone, (
            'the delete answered SESSIONMOVED was not sent again: %s still '
            'exists 10 s after the reconnect (owner %s, backend session %s; '
            'deletes of it on later connections: %d), an orphan until the '
            'backend exits' % (node.path,
                               '%#x' % stat.ephemeralOwner if stat else None,
                               st1.session_id, len(retried)))

        lock_cycle(ctx, b, res, 'lock after the reconnect')


ZBADARGUMENTS = -8


def test_d_commit_check_error_is_reported_as_such(ctx):
    """The commit check's exists is answered ZBADARGUMENTS (an error that
    asking again would not cure): the COMMIT fails with 40001 at once, its
    DETAIL says ZooKeeper answered with an error (it used to say that no
    server answered within the session timeout), and no row commits.
    (zklock.cancel_on_loss off: with it on, the held node's watch
    confirms it with the sync alone, and no exists is sent.)"""
    res = 'proxy-check-error'
    with Scene(ctx, 'check-error') as sc:
        sc.parent(res)
        b = sc.backend('proxy-check-error')
        b.query('SET zklock.cancel_on_loss = off')
        lock_cycle(ctx, b, res, 'warm-up lock')
        b.query('CREATE TEMP TABLE proxy_rows (id int)')
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, '10 seconds']), 15)
        [node] = ctx.zi.wait_contenders(res, 1)
        b.query('INSERT INTO proxy_rows VALUES (1)')
        hit = []

        def hook(req):
            if req.op == OP_EXISTS and req.path == node.path and not hit:
                hit.append(req)
                sc.proxy.on_reply(req.cid, req.xid, err=ZBADARGUMENTS,
                                  strip_body=True)

        sc.proxy.hook = hook
        t0 = time.monotonic()
        e = expect_sqlstate(b.submit('COMMIT'), '40001', 20,
                            'COMMIT whose check got an error')
        took = time.monotonic() - t0
        sc.proxy.hook = None
        assert hit, 'the commit check sent no exists for %s' % node.path
        detail = e.diag.message_detail or ''
        assert 'answered with an error' in detail, detail
        assert took < ctx.session_timeout - 1, \
            'the COMMIT took %.1f s: it waited as for a silent server' % took
        ctx.figure('d: COMMIT failed after', round(took, 2), 's')
        assert b.scalar('SELECT count(*) FROM proxy_rows') == 0
        ctx.zi.wait_contenders(res, 0)


# ---------------------------------------------------------------------------
# e-g: the grant by the own watch (one contender ahead)
# ---------------------------------------------------------------------------

def wait_behind_one(ctx, sc, res, name, setup=None):
    """A proxied backend W queued behind one foreign holder F, with both
    watches set; returns (W, its lock future, F's path, W's node path)."""
    parent = sc.parent(res)
    w = sc.backend(name)
    lock_cycle(ctx, w, res, 'warm-up lock')
    if setup:
        w.query(setup)
    f = sc.holder(parent)
    w.query('BEGIN')
    fut = w.submit(LOCK_X, [res, '30 seconds'])
    mine = ctx.zi.wait_contenders(res, 2)[-1].path
    # both watches are registered before F goes
    wait_until(lambda: len([r for r in sc.proxy.requests(ops=(OP_GETDATA,))
                            if r.watch and r.path in (f, mine)
                            and r.reply is not None]) >= 2,
               15, 'the watches on %s and on %s' % (f, mine))
    return w, fut, f, mine


def test_e_one_ahead_is_granted_by_the_watches(ctx):
    """One contender ahead: the waiter watches its predecessor and its
    own node; the predecessor's deletion grants the lock with no listing
    in between, and COMMIT confirms the node with a sync alone (its own
    watch is armed), then deletes it."""
    res = 'proxy-own-watch'
    with Scene(ctx, 'own-watch') as sc:
        w, fut, f, mine = wait_behind_one(ctx, sc, res, 'proxy-own-watch')
        mark = len(sc.proxy.requests())
        ctx.kz.delete(f)
        sc.holders.remove(f)
        token_of(fut, 15, 'the waiter, once the holder went')
        granted = sc.proxy.requests()[mark:]
        assert not [r for r in granted if r.op in LISTING_OPS], \
            'listed again before the grant: %s' % describe(granted)
        mark = len(sc.proxy.requests())
        w.query('COMMIT')
        ctx.zi.wait_contenders(res, 0)
        commit = sc.proxy.requests()[mark:]
        ops = [r.op for r in commit if r.op != OP_PING]
        assert OP_SYNC in ops and OP_DELETE in ops, describe(commit)
        assert not [r for r in commit if r.op in (OP_EXISTS, OP_GETDATA)
                    and r.path == mine], \
            'the check asked about the watched node: %s' % describe(commit)
        ctx.figure('e: requests from the grant to the delete',
                   describe([r for r in granted + commit if r.op != OP_PING]))


def test_f_watched_node_deleted_after_the_grant_fails_commit(ctx):
    """Granted by the watches, then another client deletes the node: the
    COMMIT fails with 40001 and nothing commits; it asks with a sync alone
    (the own watch's deletion event comes before the sync's reply), or
    with nothing at all when the event reached the backend before the
    COMMIT began (zklock.cancel_on_loss: the watch stays armed while the
    lock is held); never with a read of the node."""
    res = 'proxy-own-watch-lost'
    with Scene(ctx, 'own-watch-lost') as sc:
        w, fut, f, mine = wait_behind_one(
            ctx, sc, res, 'proxy-own-watch-lost',
            setup='CREATE TEMP TABLE proxy_rows (id int)')
        ctx.kz.delete(f)
        sc.holders.remove(f)
        token_of(fut, 15, 'the waiter, once the holder went')
        w.query('INSERT INTO proxy_rows VALUES (1)')
        ctx.kz.delete(mine)
        mark = len(sc.proxy.requests())
        e = expect_sqlstate(w.submit('COMMIT'), '40001', 20,
                            'COMMIT of a lock whose node was deleted')
        assert 'deleted' in (e.diag.message_detail or '') + str(e), str(e)
        commit = sc.proxy.requests()[mark:]
        assert not [r for r in commit if r.op in (OP_EXISTS, OP_GETDATA)
                    and r.path == mine], describe(commit)
        assert w.scalar('SELECT count(*) FROM proxy_rows') == 0


def test_g_connection_lost_after_the_grant_asks_with_exists(ctx):
    """Granted by the watches, then the connection drops: the own watch's
    events may now come out of order (libzookeeper re-registers it on the
    new connection), so the COMMIT check asks with exists again.  Once
    with the node intact (COMMIT succeeds), once with the node deleted
    while the client reconnects (COMMIT fails with 40001)."""
    for delete in (False, True):
        res = 'proxy-own-watch-drop-%d' % delete
        with Scene(ctx, 'own-watch-drop-%d' % delete) as sc:
            w, fut, f, mine = wait_behind_one(ctx, sc, res,
                                              'proxy-own-watch-drop')
            ctx.kz.delete(f)
            sc.holders.remove(f)
            token_of(fut, 15, 'the waiter, once the holder went')
            [conn] = [c for c in sc.proxy.connections() if not c.ended]
            hit = []

            def hook(req):
                # the reconnect's first requests: delete the node first
                if delete and req.cid != conn.cid and not hit:
                    hit.append(req)
                    ctx.kz.delete(mine)

            sc.proxy.hook = hook
            before = w.scalar('SELECT reconnects FROM zk_status()')
            sc.proxy.drop(conn.cid)
            wait_until(lambda: w.scalar('SELECT reconnects FROM zk_status()')
                       > before, 20, 'the backend to reconnect')
            mark = len(sc.proxy.requests())
            if delete:
                expect_sqlstate(w.submit('COMMIT'), '40001', 20,
                                'COMMIT after the node went during a reconnect')
                assert hit, 'the reconnect sent nothing'
            else:
                w.query('COMMIT')
                commit = sc.proxy.requests()[mark:]
                assert [r for r in commit if r.op == OP_EXISTS
                        and r.path == mine], \
                    'no exists after the reconnect: %s' % describe(commit)
            sc.proxy.hook = None
            ctx.zi.wait_contenders(res, 0)


def test_h_kazoo_semaphore_mutex_is_granted_by_a_listing(ctx):
    """kazoo's semaphore layout counts the leases before it creates its
    own, so the count must come from a server that has applied the
    previous mutex holder's lease.  libzookeeper reconnects only to a
    server that has applied the session's last zxid, which it takes from
    replies, not from watch events: the internal mutex is therefore never
    granted by the watches alone (no own-node watch on it), but by a
    listing after the predecessor's deletion, before the leases are
    counted."""
    res = 'proxy-kazoo-sem'
    base = '%s/%s' % (ctx.root, res)
    mutex_parent = base + '-__lock__'
    with Scene(ctx, 'kazoo-sem') as sc:
        w = sc.backend('proxy-kazoo-sem')
        w.query("SET zklock.protocol = 'kazoo'")
        w.query('BEGIN')
        token_of(w.submit('SELECT zk_lock_semaphore(%s, 1)', [res]), 15,
                 'warm-up lease')
        w.query('COMMIT')
        wait_until(lambda: not ctx.kz.get_children(base), 15,
                   'the warm-up lease to go')
        sc.parents.append(mutex_parent)
        f = ctx.kz.create(mutex_parent + '/%s__lock__' % uuid.uuid4().hex,
                          b'zklock test_proxy: foreign mutex holder',
                          ephemeral=True, sequence=True)
        sc.holders.append(f)
        w.query('BEGIN')
        fut = w.submit('SELECT zk_lock_semaphore(%s, 1)', [res])
        wait_until(lambda: [r for r in sc.proxy.requests(ops=(OP_GETDATA,))
                            if r.watch and r.path == f and r.reply is not None],
                   15, 'the watch on the foreign mutex holder')
        mine = [c for c in ctx.kz.get_children(mutex_parent)
                if mutex_parent + '/' + c != f]
        assert len(mine) == 1, mine
        mine = mutex_parent + '/' + mine[0]
        assert not [r for r in sc.proxy.requests(ops=(OP_GETDATA, OP_EXISTS))
                    if r.watch and r.path == mine], \
            'the kazoo semaphore mutex was watched for a grant by watches'
        mark = len(sc.proxy.requests())
        ctx.kz.delete(f)
        sc.holders.remove(f)
        token_of(fut, 15, 'the lease, once the mutex holder went')
        after = [r for r in sc.proxy.requests()[mark:] if r.op != OP_PING]
        listed = [i for i, r in enumerate(after)
                  if r.op in LISTING_OPS and r.path == mutex_parent]
        counted = [i for i, r in enumerate(after)
                   if r.op in LISTING_OPS and r.path == base]
        assert listed and counted and listed[0] < counted[0], \
            'the mutex was not granted by a listing before the count: %s' \
            % describe(after)
        w.query('COMMIT')
        wait_until(lambda: not ctx.kz.get_children(base), 15,
                   'the lease to go')


# ---------------------------------------------------------------------------
# i: what one deadlock search reads
# ---------------------------------------------------------------------------

def test_i_deadlock_search_reads_each_queue_once(ctx):
    """A proxied waiter W queued behind a foreign holder and K zklock
    waiters, all past deadlock_timeout, so that each has published a wait
    record.  The K waiters wait in W's own queue for the holder, which W
    waits for too, so nothing is reached through them that the holder
    does not lead to: one search lists that queue once and reads the
    holder's node and W's own, and of the records only W's own (issue 38:
    1.6 read every record and every node ahead, 2K + 3 reads per search;
    before issue 20 it also listed the queue again and read the nodes
    ahead of every member it followed, K + K (K + 1) / 2 more requests,
    so that the searches of a queue's waiters together grew as the cube
    of its length)."""
    k = 6
    res = 'proxy-deadlock-search'
    waits = ctx.root + '/%waits'
    with Scene(ctx, 'deadlock-search') as sc:
        parent = sc.parent(res)
        f = sc.holder(parent)
        ahead = []
        for i in range(k):
            b = ctx.backend('proxy-dl-ahead-%d' % i)
            b.query("SET deadlock_timeout = '100ms'")
            b.query('BEGIN')
            ahead.append((b, b.submit(LOCK_X, [res, '120 seconds'])))
            ctx.zi.wait_contenders(res, i + 2)
        wait_until(lambda: ctx.kz.exists(waits) and
                   len(ctx.kz.get_children(waits)) >= k, 30,
                   'the wait records of the %d waiters ahead' % k)
        w = sc.backend('proxy-dl-tail')
        w.query("SET deadlock_timeout = '100ms'")
        w.query('BEGIN')
        fut = w.submit(LOCK_X, [res, '120 seconds'])

        def searches():
            return [i for i, r in enumerate(sc.proxy.requests())
                    if r.op == OP_SYNC and r.path == waits]
        wait_until(lambda: len(searches()) >= 1, 30,
                   'the deadlock search of the waiter at the tail')
        # a waiter in no cycle searches once (issue 38): wake it, as a
        # member that saw a cycle would, for a second one that ends the
        # slice of the first
        wake_waiter(ctx, '%016x' % sc.proxy.connections()[-1].session_id)
        wait_until(lambda: len(searches()) >= 2, 30,
                   'the search the wake starts')
        first, second = searches()[:2]
        one = sc.proxy.requests()[first:second]
        # (the data watch W keeps on its own record is no read of records)
        records = [r for r in one if r.op == OP_GETDATA and not r.watch and
                   r.path.startswith(waits + '/')]
        listed = [r for r in one if r.op in LISTING_OPS and r.path == parent]
        read = [r.path for r in one if r.op == OP_GETDATA and not r.watch
                and r.path.startswith(parent + '/')]
        ctx.figure('i: one search of the waiter behind %d waiters' % k,
                   '%d records read, queue listed %d times, %d reads of '
                   '%d nodes ahead' % (len(records), len(listed), len(read),
                                       len(set(read))))
        # read: the holder's node, and W's own (a record's waiting node
        # must be its session's, issue 30); W's own record
        assert len(records) == 1, describe(one)
        assert len(set(read)) == 2 and f in read, describe(one)
        assert len(listed) == 1 and len(read) == 2, \
            'one search listed the queue %d times and read %d nodes ' \
            '(%d distinct): %s' % (len(listed), len(read), len(set(read)),
                                   describe(one))
        assert not fut.done()

        # undo: the tail gives up, the holder goes, the others in turn
        w.cancel()
        expect_sqlstate(fut, '57014', 15, 'the cancelled tail waiter')
        w.query('ROLLBACK')
        ctx.kz.delete(f)
        sc.holders.remove(f)
        for b, lock in ahead:
            token_of(lock, 30, 'a waiter ahead, in turn')
            b.query('COMMIT')
        ctx.zi.wait_contenders(res, 0)


# ---------------------------------------------------------------------------
# j: the watch table after lost locks
# ---------------------------------------------------------------------------

def test_j_lost_locks_leave_no_watch_entries(ctx):
    """The watch table (session/watch.c) holds 256 entries, and a waiter
    sets its own-node watch only while there is room.  260 times a proxied
    backend waits behind one foreign holder (so it watches its own node),
    is granted by the watches, another client deletes its node, and its
    COMMIT fails with 40001: each lost lock, once acknowledged, must leave
    the table.  Every round must still set the own-node watch; with the
    entries of lost locks kept, the table has no room after 255 and the watch
    is no longer set."""
    res = 'proxy-lost-entries'
    rounds = 260
    with Scene(ctx, 'lost-entries') as sc:
        parent = sc.parent(res)
        w = sc.backend('proxy-lost-entries')
        lock_cycle(ctx, w, res, 'warm-up lock')

        def watched_since(mark, f):
            got = [r for r in sc.proxy.requests()[mark:]
                   if r.op == OP_GETDATA and r.watch and r.reply is not None]
            return got if any(r.path == f for r in got) else None

        for i in range(rounds):
            mark = len(sc.proxy.requests())
            f = sc.holder(parent)
            w.query('BEGIN')
            fut = w.submit(LOCK_X, [res, '30 seconds'])
            got = wait_until(lambda: watched_since(mark, f), 15,
                             'round %d: the watch on the holder' % i,
                             interval=0.005)
            own = [r.path for r in got if r.path != f]
            assert own, ('round %d: no watch on the own node (the watch table '
                         'is full?): %s' % (i, describe(got)))
            ctx.kz.delete(f)
            sc.holders.remove(f)
            token_of(fut, 15, 'round %d: the grant' % i)
            ctx.kz.delete(own[0])
            expect_sqlstate(w.submit('COMMIT'), '40001', 20,
                            'round %d: COMMIT of the lost lock' % i)
        ctx.figure('j: lost locks, each with its own-node watch', str(rounds))


# ---------------------------------------------------------------------------
# k: a semaphore's internal mutex goes with the lease's create
# ---------------------------------------------------------------------------

def warm_semaphore(ctx, sc, res, permits):
    """A proxied backend that has taken and given back one lease of the
    Curator-layout semaphore res (its session is open); returned with the
    semaphore's lease and mutex parents.  The parents are made here as
    plain persistent nodes (see Scene.parent): as zklock's CONTAINER
    nodes, the server could reap them whenever they are empty."""
    base = '%s/%s' % (ctx.root, res)
    lease_parent, mutex_parent = base + '/leases', base + '/locks'
    for path in (lease_parent, mutex_parent):
        ctx.kz.ensure_path(path)
    sc.parents += [lease_parent, mutex_parent, base]
    w = sc.backend(res)
    w.query('BEGIN')
    token_of(w.submit('SELECT zk_lock_semaphore(%s, %s)', [res, permits]),
             15, 'the warm-up lease')
    w.query('COMMIT')
    wait_until(lambda: not ctx.kz.get_children(lease_parent), 15,
               'the warm-up lease to go')
    return w, lease_parent, mutex_parent


def test_k_semaphore_mutex_delete_rides_with_the_lease_create(ctx):
    """A Curator-layout semaphore sends its internal mutex's delete right
    behind its lease's create and the listing that counts, without
    waiting for the create's reply: one round trip (and one fsync) both
    takes the lease and lets the next waiter in.  The proxy holds the
    lease create's reply, and so every later reply, for HOLD s; the
    mutex's delete must reach it meanwhile, on the same connection."""
    res = 'proxy-sem-early'
    hold = 2.0
    with Scene(ctx, 'sem-early') as sc:
        w, lease_parent, mutex_parent = warm_semaphore(ctx, sc, res, 2)
        held = []

        def hook(req):
            if (req.op in zkproxy.CREATE_OPS and not held and
                    (req.path or '').startswith(lease_parent + '/')):
                held.append(req)
                sc.proxy.on_reply(req.cid, req.xid, delay=hold)
        mark = len(sc.proxy.requests())
        sc.proxy.hook = hook
        w.query('BEGIN')
        t0 = time.monotonic()
        token_of(w.submit('SELECT zk_lock_semaphore(%s, 2)', [res]), 15,
                 'the lease')
        took = time.monotonic() - t0
        sc.proxy.hook = None
        assert took >= hold, ('the lease came in %.2f s: the proxy did not '
                              'hold the reply %.1f s' % (took, hold))
        assert held, 'no lease create seen'
        create = held[0]
        assert create.reply is not None, 'the create was not answered'
        deletes = [r for r in sc.proxy.requests()[mark:]
                   if r.op == OP_DELETE and
                   (r.path or '').startswith(mutex_parent + '/')]
        assert deletes, 'no delete of the internal mutex: %s' % describe(
            sc.proxy.requests()[mark:])
        d = deletes[0]
        assert d.cid == create.cid and d.seq > create.seq, (d, create)
        # the reply left the proxy `hold` s after it came from the server
        assert d.time < create.reply.time + hold / 2, (
            'the internal mutex was deleted %.2f s after the lease create was '
            'answered (the reply was held %.1f s): it waited for the reply'
            % (d.time - create.reply.time, hold))
        ctx.log('k: mutex delete sent %.1f ms after the lease create, '
                'its reply held %.1f s' % ((d.time - create.time) * 1000,
                                           hold))
        w.query('COMMIT')
        wait_until(lambda: not ctx.kz.get_children(lease_parent) and
                   not ctx.kz.get_children(mutex_parent), 15,
                   'the lease and the mutex to go')


# ---------------------------------------------------------------------------
# l: ... and with no room, one more round that keeps the mutex
# ---------------------------------------------------------------------------

def test_l_semaphore_without_room_queues_again_once(ctx):
    """The other side of k: the count that follows the early mutex delete
    finds no room (a foreign lease fills a semaphore of 1).  The waiter
    gives that lease back and queues on the internal mutex again, and
    this round, as Curator always does, keeps the mutex while it waits for
    the lease list to change: exactly one extra round (two lease creates,
    one lease delete, two mutex creates, one mutex delete while waiting),
    never a loop.  Once the foreign lease goes it holds, and lets the
    mutex go."""
    res = 'proxy-sem-full'
    with Scene(ctx, 'sem-full') as sc:
        w, lease_parent, mutex_parent = warm_semaphore(ctx, sc, res, 1)
        f = ctx.kz.create(lease_parent + '/_c_%s-lease-' % uuid.uuid4(),
                          b'zklock test_proxy: foreign lease',
                          ephemeral=True, sequence=True)
        sc.holders.append(f)
        mark = len(sc.proxy.requests())

        def mine(op, parent):
            return [r for r in sc.proxy.requests()[mark:]
                    if r.op in op and (r.path or '').startswith(parent + '/')]

        def waiting():
            return [r for r in sc.proxy.requests()[mark:]
                    if r.op in LISTING_OPS and r.path == lease_parent
                    and r.watch and r.reply is not None]
        w.query('BEGIN')
        fut = w.submit('SELECT zk_lock_semaphore(%s, 1, %s)',
                       [res, '60 seconds'])
        wait_until(waiting, 15, 'a watched listing of the leases')
        time_waiting = time.monotonic()
        creates = mine(zkproxy.CREATE_OPS, lease_parent)
        mutexes = mine(zkproxy.CREATE_OPS, mutex_parent)
        assert len(creates) == 2 and len(mutexes) == 2, describe(
            sc.proxy.requests()[mark:])
        first = creates[0].reply.path
        assert [r.path for r in mine((OP_DELETE,), lease_parent)] == \
            [first], describe(sc.proxy.requests()[mark:])
        assert [r.path for r in mine((OP_DELETE,), mutex_parent)] == \
            [mutexes[0].reply.path], describe(sc.proxy.requests()[mark:])
        second = mutexes[1].reply.path
        assert ctx.kz.exists(second), 'the mutex is not kept while waiting'
        assert not fut.done()
        ctx.kz.delete(f)
        sc.holders.remove(f)
        token_of(fut, 15, 'the lease, once the foreign one went')
        wait_until(lambda: not ctx.kz.exists(second), 15,
                   'the mutex to go once the lease holds')
        assert len(mine(zkproxy.CREATE_OPS, lease_parent)) == 2
        assert len(mine(zkproxy.CREATE_OPS, mutex_parent)) == 2
        ctx.log('l: waited %.2f s with the mutex kept'
                % (time.monotonic() - time_waiting))
        w.query('COMMIT')
        wait_until(lambda: not ctx.kz.get_children(lease_parent) and
                   not ctx.kz.get_children(mutex_parent), 15,
                   'the lease and the mutex to go')


# ---------------------------------------------------------------------------
# m: a request held until the next one (ZooKeeper 3.8.0's lost wake-up)
# ---------------------------------------------------------------------------

# generous next to the nudge's 20 ms, far under the receive timeout (2/3
# of the suite's 6 s session timeout: 4 s), after which a call without
# the nudge gets its reply
NUDGED_WITHIN_S = 1.0


def is_nudge(r):
    return r.op == OP_EXISTS and r.path == '/' and not r.watch


def test_m_held_request_is_freed_by_the_nudge(ctx):
    """For each place, the proxy plays a 3.8.0 server that loses every
    wake-up of its commit processor: each request of the backend's
    connection is held until the backend sends another one (the nudge
    itself is passed on).  A burst's requests free each other; the last
    one of a burst is freed only by the reply nudge, since the backend
    sends no ping while a reply is outstanding.  Each statement must end
    within NUDGED_WITHIN_S, the last held request must have been freed by
    a nudge, and the session must not have reconnected.  For a release's
    delete, sent without waiting by a COMMIT that has returned, a second
    backend (not proxied) waits for the lock and must be granted within
    the bound.  (zklock.cancel_on_loss off: the watches it sets on held
    nodes are sent without waiting, after the call's last request, and
    would free that request before any nudge could -- 19 met it once
    with the semaphore's lease watch freeing the mutex node's delete --:
    test_m2 runs with it on.)"""
    res = 'proxy-stuck'
    with Scene(ctx, 'stuck') as sc:
        parent = sc.parent(res)
        arr = ['proxy-stuck-a%d' % i for i in range(3)]
        arr_parents = [sc.parent(r) for r in arr]
        b = sc.backend('proxy-stuck')
        b.query('SET zklock.cancel_on_loss = off')
        lock_cycle(ctx, b, res, 'warm-up lock')
        w, _, _ = warm_semaphore(ctx, sc, 'proxy-stuck-sem', 2)
        w.query('SET zklock.cancel_on_loss = off')  # (as for b, above)
        before = zk_status(b).reconnects, zk_status(w).reconnects
        nudges_before = sum(x.scalar('SELECT nudges FROM zk_status()')
                            for x in (b, w))
        stage = {'on': False, 'held': []}

        def hook(req):
            if stage['on'] and not is_nudge(req) and req.op != OP_PING:
                stage['held'].append(req)
                return zkproxy.Verdict(hold=True)
            return None
        sc.proxy.hook = hook

        def stuck(what, run, after=None):
            stage['held'] = []
            stage['on'] = True
            t0 = time.monotonic()
            try:
                run()
                elapsed = time.monotonic() - t0
                if after is not None:
                    after()
            except Exception as e:
                # what the connections carried meanwhile, with times, to
                # tell a nudge never sent from one that freed nothing (17
                # once: the lease call's connection stopped getting
                # replies and timed out twice, 4 s each, and the call
                # gave up after 10 s; the server was answering others)
                seen = ['%+.3f %s%s%s' % (r.time - t0, r, ' held'
                                          if r in stage['held'] else '',
                                          ' released %+.3f' % (r.released - t0)
                                          if getattr(r, 'released', None)
                                          else '')
                        for r in sc.proxy.requests() if r.time >= t0]
                seen += ['%+.3f %s' % (r.time - t0, r)
                         for r in sc.proxy.replies() if r.time >= t0]
                seen.sort(key=lambda line: float(line.split()[0]))
                raise AssertionError('%s: %s\nrequests since:\n%s'
                                     % (what, e, '\n'.join(seen))) from e
            finally:
                stage['on'] = False
            held = stage['held']
            assert held, '%s: nothing was held' % what
            last = held[-1]
            wait_until(lambda: last.released is not None, 15,
                       '%s: the last held request to go on' % what)
            nxt = [r for r in sc.proxy.requests(cid=last.cid)
                   if r.seq > last.seq][0]
            assert is_nudge(nxt), '%s: the last held %r was freed by %r, ' \
                'not by a nudge' % (what, last, nxt)
            assert elapsed < NUDGED_WITHIN_S, '%s took %.2f s' % (what,
                                                                 elapsed)
            ctx.log('m: %s: %d requests held (%s), the last one %.0f ms; '
                    '%.0f ms in all' % (what, len(held), describe(held),
                                        (last.released - last.time) * 1000,
                                        elapsed * 1000))

        b.query('BEGIN')
        stuck('lock call', lambda: token_of(
            b.submit(LOCK_X, [res, '10 seconds']), 15, 'the lock'))
        stuck('COMMIT with the check', lambda: b.query('COMMIT', timeout=15))
        ctx.zi.wait_contenders(res, 0)

        b.query('BEGIN')
        stuck('array call', lambda: b.query(
            "SELECT zk_lock_exclusive(%s::text[], '10 seconds')", [arr],
            timeout=15))
        b.query('ROLLBACK')
        for p in arr_parents:
            wait_until(lambda: not ctx.zi.contenders(parent=p), 15,
                       'the array call\'s nodes to go')
        w.query('BEGIN')
        stuck('semaphore', lambda: token_of(w.submit(
            'SELECT zk_lock_semaphore(%s, 2, %s)',
            ['proxy-stuck-sem', '10 seconds']), 15, 'the lease'))
        w.query('ROLLBACK')

        # a release's delete: b holds, a direct backend waits, b commits
        waiter = ctx.backend('proxy-stuck-waiter')
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, '10 seconds']), 15, 'the lock')
        waiter.query('BEGIN')
        fut = waiter.submit(LOCK_X, [res, '30 seconds'])
        ctx.zi.wait_contenders(res, 2)
        handoff = {}

        def release():
            b.query('COMMIT', timeout=15)
            t0 = time.monotonic()
            token_of(fut, 15, 'the waiter, once the holder released')
            handoff['s'] = time.monotonic() - t0
        stuck('COMMIT and the release, to the next holder\'s grant', release)
        assert any(r.op == OP_DELETE for r in stage['held']), \
            'the release delete was not held: %s' % describe(stage['held'])
        ctx.log('m: handoff %.0f ms from the COMMIT\'s return'
                % (handoff['s'] * 1000))
        waiter.query('COMMIT')

        after = zk_status(b).reconnects, zk_status(w).reconnects
        assert after == before, 'reconnects %r -> %r' % (before, after)
        nudges = sum(x.scalar('SELECT nudges FROM zk_status()')
                     for x in (b, w)) - nudges_before
        assert nudges >= 5, 'zk_status() counted %d nudges' % nudges


def test_m2_request_sent_while_holding_is_nudged(ctx):
    """With zklock.cancel_on_loss on (the default), the nudge's thread also
    runs the loss clock while the backend holds a lock, sleeping until the
    next heartbeat.  A request sent meanwhile must wake it: the proxy holds
    each request until the next one, and the COMMIT check's sync, the last
    request before the COMMIT can return, must be freed by a nudge within
    NUDGED_WITHIN_S (it waited for the next heartbeat, 0.3 session
    timeouts: test_wakeup saw the whole ensemble idle 608 ms)."""
    res = 'proxy-stuck-clock'
    with Scene(ctx, 'stuck-clock') as sc:
        sc.parent(res)
        b = sc.backend('proxy-stuck-clock')
        lock_cycle(ctx, b, res, 'warm-up lock')
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, '10 seconds']), 15, 'the lock')
        # its watch (sent 20 ms after the grant) confirms it at COMMIT with
        # the sync alone, the last request before the COMMIT returns
        wait_until(lambda: any(res in ctx.zk.four_letter(sid, 'wchc')
                               for sid in ctx.zk.sids),
                   10, 'the held node watched')
        # a look with a round trip, answered: nothing outstanding after it
        b.query('SELECT state FROM zk_locks')
        held = []

        def hook(req):
            if not is_nudge(req) and req.op != OP_PING:
                held.append(req)
                return zkproxy.Verdict(hold=True)
            return None
        sc.proxy.hook = hook
        t0 = time.monotonic()
        b.query('COMMIT', timeout=15)
        elapsed = time.monotonic() - t0
        sc.proxy.hook = None
        assert held and held[0].op == OP_SYNC, describe(held)
        assert elapsed < NUDGED_WITHIN_S, \
            'COMMIT took %.2f s (held: %s)' % (elapsed, describe(held))
        nxt = [r for r in sc.proxy.requests(cid=held[0].cid)
               if r.seq > held[0].seq][0]
        assert is_nudge(nxt), 'the sync was freed by %r' % nxt


def test_n_stray_of_an_abandoned_multi_is_not_a_foreign_contender(ctx):
    """An array call's multi create is held in the proxy until the
    1-second call has given up (55P03); then it reaches the server, which
    creates both nodes, and its reply is swallowed and the connection
    dropped.  Those nodes are this session's strays, swept after the
    reconnect (a sync, a listing, then the deletes).  The backend holds a
    session-level shared lock on the first resource from before, so the
    stray exclusive node there sorts right after its shared node.  The
    proxy holds the sweep's listing reply (and so every reply behind it)
    for a while: the next array call's creates and listings reach the
    server before the sweep's deletes and see the strays.  They are the
    backend's own: the call must be granted at once.  Before the fix it
    took the stray for a foreign exclusive contender: it gave up the
    second lock, waited for its own stray until the sweep deleted it,
    and created the second node again in another multi (had its wait's
    listing still shown the stray, the rule for exclusive over one's own
    shared with a foreign waiter between would have refused it, 40P01)."""
    res = ['proxy-stray-a', 'proxy-stray-b']
    with Scene(ctx, 'stray') as sc:
        parents = [sc.parent(r) for r in res]
        b = sc.backend('proxy-stray')
        lock_cycle(ctx, b, res[0], 'warm-up lock')
        token_of(b.submit('SELECT zk_session_lock_shared(%s, %s::interval)',
                          [res[0], '10 seconds']), 15, 'the shared lock')

        release = threading.Event()
        state = {'multi': None, 'listing': None}

        def hook(req):
            if req.op == OP_MULTI and state['multi'] is None:
                state['multi'] = req
                # holding the hook holds the connection (see test b)
                release.wait(30)
                sc.proxy.on_reply(req.cid, req.xid, swallow=True, drop=True)
            elif (state['multi'] is not None and state['listing'] is None
                  and req.cid > state['multi'].cid
                  and req.op in LISTING_OPS and req.path in parents):
                # the sweep's listing, the first on the new connection
                state['listing'] = req
                sc.proxy.on_reply(req.cid, req.xid, delay=3.0)

        sc.proxy.hook = hook
        b.query('BEGIN')
        expect_sqlstate(b.submit(
            'SELECT zk_lock_exclusive(%s::text[], %s::interval)',
            [res, '1 second']), '55P03', 10, 'array call whose multi is held')
        b.query('ROLLBACK')
        assert state['multi'] is not None, 'the multi never reached the proxy'
        release.set()
        multi = state['multi']
        wait_until(lambda: multi.reply is not None and
                   sc.proxy.connection(multi.cid).ended, 10,
                   'the reply to the held multi, and the drop')
        assert multi.reply.fate == 'swallowed' and multi.reply.err == ZOK, \
            'the server did not run the multi: %r' % multi.reply

        # the strays: this session's, named by the abandoned call's prefix
        stray_prefix = multi.subops[0][1].rsplit('/', 1)[1]
        strays = [c.path for p in parents
                  for c in ctx.zi.contenders(parent=p)
                  if c.path.rsplit('/', 1)[1].startswith(stray_prefix)]
        assert len(strays) == 2, 'strays: %r' % strays

        b.query('BEGIN')
        fut = b.submit('SELECT zk_lock_exclusive(%s::text[], %s::interval)',
                       [res, '10 seconds'])
        try:
            tokens = fut.result(20)
        finally:
            seen = [r for r in sc.proxy.requests()
                    if r.cid > multi.cid and r.op != OP_PING]
            ctx.log('n: requests after the drop: %s' % describe(seen))
        assert isinstance(tokens[0][0], list) and \
            all(t > 0 for t in tokens[0][0]), tokens
        assert state['listing'] is not None, \
            'no sweep listing seen after the drop'

        # the race happened: the call's listing of the first parent went
        # to the server before the sweep's delete of the stray in it
        multis = [r for r in seen if r.op == OP_MULTI]
        assert multis, 'the call sent no multi'
        stray_a = [r for r in seen if r.op == OP_DELETE and r.path
                   and r.path.startswith(parents[0] + '/' + stray_prefix)]
        listed = [r for r in seen if r.op in LISTING_OPS
                  and r.path == parents[0] and r.seq > multis[0].seq]
        assert stray_a and listed and listed[0].seq < stray_a[0].seq, \
            'the strays were gone before the call listed: %s' % describe(seen)
        # ... and the strays were not in its way: no lock given up
        # (deleted and created again in a second multi)
        new_prefix = multis[0].subops[0][1].rsplit('/', 1)[1]
        gave_up = [r for r in seen if r.op == OP_DELETE and r.path
                   and new_prefix in r.path]
        assert len(multis) == 1 and not gave_up, \
            'the call took its own strays for contenders: %s' % describe(seen)
        b.query('COMMIT')
        b.query('SELECT zk_unlock_all()')
        for r in res:
            ctx.zi.wait_contenders(r, 0)

def test_o_record_of_an_ended_wait_closes_no_cycle(ctx):
    """Issue 30: A (through the proxy) holds x and waits for y, held by B,
    past deadlock_timeout, so its wait record is published.  A's connection
    is cut (the proxy stopped, reconnects refused): its wait ends by its
    timeout and it rolls back, but no delete can reach the server, so its
    record, its waiting node and its node on x stay until its session
    expires.  B then asks for x: ZooKeeper shows B -> A -> B, yet A no
    longer waits.  Before the fix B got 40P01 within a few tenths of a
    second; now A's record does not beat, B never acts, and it is granted
    x once A's session has expired."""
    rx, ry = 'proxy-stale/x', 'proxy-stale/y'
    waits = ctx.root + '/%waits'
    with Scene(ctx, 'stale-record') as sc:
        px = sc.parent(rx)
        sc.parent(ry)
        a = sc.backend('proxy-stale-a')
        b = ctx.backend('proxy-stale-b')
        for c in (a, b):
            c.query("SET deadlock_timeout = '100ms'")
            c.query('BEGIN')
        token_of(a.submit(LOCK_X, [rx, '10 seconds']), 15)
        token_of(b.submit(LOCK_X, [ry, '10 seconds']), 15)
        before = set(ctx.kz.get_children(waits)) if ctx.kz.exists(waits) else set()
        fa = a.submit(LOCK_X, [ry, '2 seconds'])
        wait_until(lambda: ctx.kz.exists(waits) and
                   set(ctx.kz.get_children(waits)) - before, 15,
                   "A's wait record")
        record = waits + '/' + (set(ctx.kz.get_children(waits)) - before).pop()
        sc.proxy.stop()
        try:
            fa.result(15)
            raise AssertionError('A was granted y while B holds it')
        except psycopg2.Error as e:
            assert e.pgcode in ('55P03', '08001'), e
        a.query('ROLLBACK')
        a_x = [n for n in ctx.zi.contenders(parent=px)]
        assert ctx.kz.exists(record) and len(a_x) == 1, \
            'the ended wait should still show in ZooKeeper: %r' % a_x
        t0 = time.monotonic()
        fb = b.submit(LOCK_X, [rx, '60 seconds'])
        try:
            fb.result(ctx.session_timeout + 20)
        except psycopg2.Error as e:
            raise AssertionError('B got %s %s after %.2f s: a cycle through '
                                 'a wait that had ended' % (
                                     e.pgcode, e, time.monotonic() - t0))
        ctx.figure('o: B granted after A\'s session expired',
                   round(time.monotonic() - t0, 1), 's')
        assert not ctx.kz.exists(record)
        b.query('COMMIT')


# ---------------------------------------------------------------------------
# p: the idle nudge of a backend that waits for a watch
# ---------------------------------------------------------------------------

def test_p_waiter_sends_idle_nudges_at_growing_gaps(ctx):
    """A backend waiting on its watch, nothing outstanding, sends
    exists("/") itself (session/nudge.c, the idle nudge): the first 100 ms
    after the last request or reply on its connection, then each after
    twice the gap before, and none once the gap reaches libzookeeper's own
    ping interval (a third of the suite's 6 s session timeout: 2 s, so the
    gaps are 100, 200, 400, 800 and 1600 ms, then pings alone).  A held
    lock makes the wait; it lasts 5 s.  Before 1.5 the waiter sent
    nothing in those 5 s."""
    res = 'proxy-idle'
    with Scene(ctx, 'idle') as sc:
        sc.parent(res)
        w = sc.backend('proxy-idle-w')
        lock_cycle(ctx, w, res, 'warm-up lock')
        h = ctx.backend('proxy-idle-h')
        h.query('BEGIN')
        token_of(h.submit(LOCK_X, [res, '60 seconds']), 10, 'holder')
        # no wait record, its beats or the log line's read in these 5 s:
        # they are requests, which start the series again
        w.query("SET deadlock_timeout = '60s'")
        mark = len(sc.proxy.requests())
        w.query('BEGIN')
        f = w.submit(LOCK_X, [res, '60 seconds'])
        ctx.zi.wait_contenders(res, 2)
        time.sleep(5.0)         # the wait whose requests are looked at
        t_release = time.monotonic()
        h.query('COMMIT')
        token_of(f, 10, 'waiter')
        w.query('COMMIT')
        reqs = sc.proxy.requests()[mark:]
        cid = next(r.cid for r in reqs if r.op == OP_CREATE2)
        mine = [r for r in reqs if r.cid == cid and r.op != OP_PING]
        # the wait: from the watch on the holder's node to the grant
        start = max(i for i, r in enumerate(mine)
                    if r.op in (OP_EXISTS, OP_GETDATA) and r.watch)
        # the nudges of the wait: up to its first other request (a reply
        # nudge may follow the COMMIT's sync, after the wait: CI, 17)
        wait = mine[start + 1:]
        ended = next((i for i, r in enumerate(wait) if not is_nudge(r)),
                     len(wait))
        nudges = wait[:ended]
        described = describe(mine[start:])
        assert len(nudges) == 5, described
        prev = mine[start].time
        for k, r in enumerate(nudges):
            gap = r.time - prev
            want = 0.1 * 2 ** k
            # at least the gap after the last request (and its reply);
            # well under the next one: no nudge skipped or doubled
            assert want - 0.005 <= gap < 2 * want, (k, gap, described)
            prev = r.time
        # and nothing but nudges until the holder let go
        assert ended == len(wait) or wait[ended].time >= t_release, described


# ---------------------------------------------------------------------------
# q, r: waking a deadlock victim (deadlock.c, waitrecord.c)
# ---------------------------------------------------------------------------

WAITS_DT = 0.3      # deadlock_timeout of q and r: the lock manager is
                    # looked at every 0.3 s


def still_waiting_then_cancel(w, f):
    """The lock call f of backend w is still waiting: cancel it (57014)
    and roll back."""
    assert not f.done(), f.exception(0)
    w.cancel()
    expect_sqlstate(f, '57014', 15, 'the cancelled waiter')
    w.query('ROLLBACK')


def rows_table(ctx, table):
    """A table with row 1, for row locks; returns the backend that made it
    (which drops it at the end of the test)."""
    setup = ctx.backend(table.replace('_', '-') + '-setup')
    setup.query('CREATE TABLE IF NOT EXISTS %s (id int PRIMARY KEY, v int)'
                % table)
    setup.query('INSERT INTO %s VALUES (1, 0) ON CONFLICT DO NOTHING' % table)
    return setup


def no_wait_record_left(ctx):
    waits = ctx.root + '/%waits'
    wait_until(lambda: not (ctx.kz.exists(waits) and
                            ctx.kz.get_children(waits)), 15,
               'no wait record left')


def wait_searches(sc, waits, n, what):
    """Wait for the n-th deadlock search on sc's proxy (a search starts
    with a sync of the records' parent); returns their requests."""
    def searches():
        return [r for r in sc.proxy.requests()
                if r.op == OP_SYNC and r.path == waits]
    wait_until(lambda: len(searches()) >= n, 15, what)
    return searches()


def searched_within_beats(sc, waits, record, since, beats, what):
    """After monotonic time `since`, the waiter behind sc's proxy must
    search (sync of the records' parent) before it writes its own record
    more than `beats` times (a check a wake starts beats before it
    searches).  Its schedule would search only after several beats."""
    def after():
        return [r for r in sc.proxy.requests() if r.time > since and
                ((r.op == OP_SYNC and r.path == waits) or
                 (r.op == OP_SETDATA and r.path == record))]
    wait_until(lambda: any(r.op == OP_SYNC for r in after()) or
               len(after()) > beats, 15, what)
    seen = after()
    first_sync = next((i for i, r in enumerate(seen) if r.op == OP_SYNC),
                      len(seen))
    assert first_sync <= beats, '%s: %d beats and no search: %s' % (
        what, first_sync, describe(seen))


def test_q_wake_that_meets_the_waiters_own_write_is_not_lost(ctx):
    """A member that finds a cycle whose victim is another wakes it by
    writing the victim's wait record back unchanged; the victim keeps a
    data watch on its record for that.  Its own writes fire that watch
    too, so it sets the watch again after each and forgets what fired
    before.  Up to 1.6 a waiter beat every deadlock_timeout, and a wake
    that reached the server just before a beat was forgotten with it: the
    victim searched only at its schedule, seconds later.  Since issue 38 a
    waiter writes only when it publishes, when it is woken and when its
    PostgreSQL-local edges change, and it searches after every such write
    in the same check.  Here W holds a row that L then waits for: W's next
    check writes L into its record, and the proxy holds that write while
    the runner writes the record back, as a waking member does.  The wake
    lands first, and W must search in that very check."""
    res = 'proxy-wake-beat'
    waits = ctx.root + '/%waits'
    setup = rows_table(ctx, 'proxy_wake_rows')
    with Scene(ctx, 'wake-beat') as sc:
        sc.holder(sc.parent(res))
        w = sc.backend('proxy-wake-beat-w')
        lb = ctx.backend('proxy-wake-beat-l')
        w.query("SET deadlock_timeout = '%dms'" % (WAITS_DT * 1000))
        w.query('BEGIN')
        w.query('UPDATE proxy_wake_rows SET v = v + 1 WHERE id = 1')
        f = w.submit(LOCK_X, [res, '60 seconds'])
        wait_searches(sc, waits, 1, 'the search when W publishes')
        fired = {}

        def hook(req):
            if fired or req.op != OP_SETDATA or \
                    not (req.path or '').startswith(waits + '/'):
                return None
            data, st = ctx.kz.get(req.path)
            fired.update(read=st.version,
                         woke=ctx.kz.set(req.path, data,
                                         version=st.version).version)
            fired['req'] = req
            return None
        sc.proxy.hook = hook
        fl = lb.submit('UPDATE proxy_wake_rows SET v = v + 1 WHERE id = 1')
        wait_until(lambda: 'req' in fired, 10, "W's write of L's wait")
        sc.proxy.hook = None
        beat = fired['req']
        wait_until(lambda: beat.reply is not None, 10, "the write's reply")
        # the race happened: the wake was written, over the waiter's last
        # write, before its own write went on; that came after it
        assert beat.reply.err == ZOK, beat.reply
        assert fired['woke'] == fired['read'] + 1, fired
        assert ctx.kz.exists(beat.path).version >= fired['woke'] + 1
        searched_within_beats(sc, waits, beat.path, beat.time, 0,
                              'woken during its write')
        still_waiting_then_cancel(w, f)
        fl.result(15)
    setup.query('DROP TABLE proxy_wake_rows')


def test_r_wake_refused_for_an_old_version_is_sent_again(ctx):
    """The cycle of test_deadlock's late-closing test on one cluster: X
    holds r2 and waits for r1, held by H; W waits for r2; H then waits
    for W's row lock, long after X's and W's records were published, so
    only W's check sees the cycle close.  X's record is the youngest, so
    W wakes X, writing X's record back with the version it read.  The
    proxy holds that write until X's own write has changed the version
    (L starts to wait for a row X holds, and X's next check writes L's
    wait into its record): ZooKeeper refuses the wake (BADVERSION).
    Before the fix nobody woke X and it found the cycle at its schedule
    (since issue 38 it has none); now W reads the record again and
    writes it back with the new version, and X searches at once."""
    tag = 'proxy-rewake-%d' % (int(time.time() * 1000) % 100000)
    r1, r2 = tag + '/r1', tag + '/r2'
    waits = ctx.root + '/%waits'
    setup = rows_table(ctx, 'proxy_rows')
    with Scene(ctx, 'rewake-x') as sx, Scene(ctx, 'rewake-w') as sw:
        sx.parent(r1)
        sx.parent(r2)
        x = sx.backend('proxy-rewake-x')
        w = sw.backend('proxy-rewake-w')
        h = ctx.backend('proxy-rewake-h')
        lb = ctx.backend('proxy-rewake-l')
        setup.query('INSERT INTO proxy_rows VALUES (2, 0) '
                    'ON CONFLICT DO NOTHING')
        for b in (x, w, h):
            b.query("SET deadlock_timeout = '%dms'" % (WAITS_DT * 1000))
            b.query('BEGIN')
        w.query('UPDATE proxy_rows SET v = v + 1 WHERE id = 1')
        x.query('UPDATE proxy_rows SET v = v + 1 WHERE id = 2')
        token_of(x.submit(LOCK_X, [r2, '60 seconds']), 15, 'X holds r2')
        token_of(h.submit(LOCK_X, [r1, '60 seconds']), 15, 'H holds r1')
        fw = w.submit(LOCK_X, [r2, '60 seconds'])
        wait_searches(sw, waits, 1, "W's record")
        fx = x.submit(LOCK_X, [r1, '60 seconds'])
        wait_searches(sx, waits, 1, "X's search when it publishes")
        record = '%s/%016x' % (waits, sx.proxy.connections()[-1].session_id)
        assert ctx.kz.exists(record), record
        fired = {}

        def hook(req):
            if fired or req.op != OP_SETDATA or req.path != record:
                return None
            # W's wake: keep it until X's own write has moved the version
            seen = ctx.kz.exists(record).version
            fired['l'] = lb.submit('UPDATE proxy_rows SET v = v + 1 '
                                   'WHERE id = 2')
            deadline = time.monotonic() + 5
            while ctx.kz.exists(record).version == seen and \
                    time.monotonic() < deadline:
                time.sleep(0.005)
            fired['req'] = req
            return None
        sw.proxy.hook = hook
        fh = h.submit('UPDATE proxy_rows SET v = v + 1 WHERE id = 1')
        wait_until(lambda: 'req' in fired, 10, "W's wake of X")
        sw.proxy.hook = None
        wake = fired['req']
        wait_until(lambda: wake.reply is not None, 10, "the wake's reply")
        assert wake.reply.err == ZBADVERSION, wake.reply
        # W reads the record again and writes that back
        wait_until(lambda: any(r.op == OP_SETDATA and r.path == record and
                               r.reply is not None
                               for r in sw.proxy.requests()
                               if r.seq > wake.seq), 10, 'the wake again')
        again = [r for r in sw.proxy.requests() if r.seq > wake.seq and
                 r.path == record]
        assert [r.op for r in again[:2]] == [OP_GETDATA, OP_SETDATA] and \
            not again[0].watch and again[1].reply.err == ZOK, describe(again)
        searched_within_beats(sx, waits, record, wake.reply.time, 1,
                              'X after the refused wake')
        expect_sqlstate(fx, '40P01', 15, 'X, the victim')
        x.query('ROLLBACK')
        fired['l'].result(15)
        token_of(fw, 15, 'W after the victim')
        w.query('COMMIT')
        fh.result(15)
        h.query('COMMIT')
    no_wait_record_left(ctx)
    setup.query('DROP TABLE proxy_rows')


# ---------------------------------------------------------------------------
# s: a search that finds the waiter's own record gone
# ---------------------------------------------------------------------------

def test_s_own_record_gone_at_the_search_is_published_again(ctx):
    """A waiter's record can vanish between its check's write and its
    search's listing (a sweep for an earlier create of it whose reply was
    lost deletes it).  The search then drops the record, to publish it
    again at the next check.  It kept the watch it had on it and, with
    no record, looked that watch up by a null path at the next wake-up:
    the backend died of a segmentation fault and the postmaster restarted
    every backend of the cluster.  Here the runner deletes the record
    right before the waiter's search (its sync of the records' parent)
    goes on: the waiter must go on waiting, publish its record again and
    end by its cancel, with the backend alive."""
    res = 'proxy-record-gone'
    waits = ctx.root + '/%waits'
    with Scene(ctx, 'record-gone') as sc:
        sc.holder(sc.parent(res))
        w = sc.backend('proxy-record-gone-w')
        w.query("SET deadlock_timeout = '%dms'" % (WAITS_DT * 1000))
        lock_cycle(ctx, w, res + '-warm', 'warm-up lock')
        record = '%s/%016x' % (waits, sc.proxy.connections()[-1].session_id)
        fired = {}

        def hook(req):
            if fired or req.op != OP_SYNC or req.path != waits:
                return None
            st = ctx.kz.exists(record)
            ctx.kz.delete(record)
            fired.update(req=req, czxid=st.czxid)
            return None
        sc.proxy.hook = hook
        w.query('BEGIN')
        f = w.submit(LOCK_X, [res, '60 seconds'])
        wait_until(lambda: fired, 10, "the waiter's first search")
        sc.proxy.hook = None
        def republished():
            st = ctx.kz.exists(record)
            return st is not None and st.czxid != fired['czxid']
        # published again, as a new node, at a later check
        wait_until(republished, 10, 'the record published again')
        still_waiting_then_cancel(w, f)
        assert w.scalar('SELECT 1') == 1


# ---------------------------------------------------------------------------
# t: a lease that goes during the search of a semaphore's waiter
# ---------------------------------------------------------------------------

def test_t_lease_gone_during_the_search_is_no_deadlock(ctx):
    """test_deadlock's free-holder semaphore case, with its race forced: a
    semaphore of 2 whose leases A and C hold; A waits for a row lock of
    W; W waits for room.  C, free to go, commits during W's search,
    between the records and the listing of the leases: the listing shows
    A alone, on a cycle with W, so W was a false victim (40P01; matrix
    run of this session, PostgreSQL 15), though C's lease was room for
    it.  A lease fewer than at its own last listing now tells W's search
    that room may have come: no cycle, and W gets the lease.  For both
    layouts (Curator's waiter holds its lease while it waits, kazoo's
    does not)."""
    setup = rows_table(ctx, 'proxy_semrows')
    waits = ctx.root + '/%waits'
    for protocol in ('curator-rw', 'kazoo'):
        sem = 'proxy-semroom-%s-%d' % (protocol,
                                       int(time.time() * 1000) % 100000)
        with Scene(ctx, 'semroom-' + protocol) as sc:
            w = sc.backend('proxy-semroom-w')
            a = ctx.backend('proxy-semroom-a')
            c = ctx.backend('proxy-semroom-c')
            for b in (a, w, c):
                b.query('SET zklock.protocol = %s', [protocol])
                b.query("SET deadlock_timeout = '%dms'" % (WAITS_DT * 1000))
                b.query('BEGIN')
            token_of(a.submit('SELECT zk_lock_semaphore(%s, 2)', [sem]), 15)
            token_of(c.submit('SELECT zk_lock_semaphore(%s, 2)', [sem]), 15)
            w.query('UPDATE proxy_semrows SET v = v + 1 WHERE id = 1')
            fa = a.submit('UPDATE proxy_semrows SET v = v + 1 WHERE id = 1')
            fired = {}

            def hook(req):
                if 'released' in fired:
                    return None
                if req.op == OP_SYNC and req.path == waits:
                    fired['search'] = True
                elif fired.get('search') and req.op in LISTING_OPS and \
                        not req.watch and req.path != waits:
                    # W's search lists the leases: C's goes first (a
                    # release's delete is sent after COMMIT returns)
                    before = len(ctx.kz.get_children(req.path))
                    c.query('COMMIT')
                    wait_until(lambda: len(ctx.kz.get_children(req.path))
                               < before, 10, "C's lease gone")
                    fired['released'] = req
                return None
            sc.proxy.hook = hook
            fw = w.submit('SELECT zk_lock_semaphore(%s, 2, %s::interval)',
                          [sem, '60 seconds'])
            wait_until(lambda: 'released' in fired, 15,
                       "C's release during W's search (%s)" % protocol)
            sc.proxy.hook = None
            token_of(fw, 15, 'W, given the room C left (%s)' % protocol)
            w.query('COMMIT')
            fa.result(15)
            a.query('COMMIT')
        no_wait_record_left(ctx)
    setup.query('DROP TABLE proxy_semrows')


# ---------------------------------------------------------------------------
# u: a wake between the waiter's beat and the read that watches again
# ---------------------------------------------------------------------------

def test_u_wake_after_the_beat_before_the_watch_gets_a_beat(ctx):
    """A member that found a cycle whose victim is another wakes it and
    waits for its beat (deadlock.c, beats_advanced) before it acts.  A
    woken waiter beats, then reads its record with a new watch; a wake
    that reaches the server between the two fires no watch, and the read
    tells it by the version.  That read made the waiter search, but not
    beat: the waker saw no beat, gave up after deadlock_timeout and tried
    again at its growing schedule (the CI run of stop 47 on 18:
    test_deadlock's free-holder semaphore case waited 11 s for a beat
    that never came).  Here the proxy holds W's watching read after the
    beat a first wake caused while the runner wakes W again: W must beat
    once more."""
    res = 'proxy-wake-after-beat'
    waits = ctx.root + '/%waits'
    with Scene(ctx, 'wake-after-beat') as sc:
        sc.holder(sc.parent(res))
        w = sc.backend('proxy-wake-after-beat-w')
        w.query("SET deadlock_timeout = '%dms'" % (WAITS_DT * 1000))
        w.query('BEGIN')
        f = w.submit(LOCK_X, [res, '60 seconds'])
        wait_searches(sc, waits, 1, 'the search when W publishes')
        record = '%s/%016x' % (waits, sc.proxy.connections()[-1].session_id)
        first = ctx.kz.get(record)
        fired = {}

        def hook(req):
            if 'req' in fired or req.path != record:
                return None
            if req.op == OP_SETDATA:
                fired['beat'] = req
            elif req.op == OP_GETDATA and req.watch and 'beat' in fired:
                # the beat is applied (its reply may be on its way): wake
                # W again before its watch is set
                data, st = ctx.kz.get(record)
                fired.update(read=st.version, data=data,
                             woke=ctx.kz.set(record, data,
                                             version=st.version).version,
                             req=req)
            return None
        sc.proxy.hook = hook
        wake_waiter(ctx, record.rsplit('/', 1)[1])
        wait_until(lambda: 'req' in fired, 10, "W's watching read after "
                   "its beat")
        sc.proxy.hook = None
        watch = fired['req']
        wait_until(lambda: watch.reply is not None, 10, "the read's reply")
        # the race happened: the second wake came after W's beat (it read
        # the beat's data) and before the read that sets the watch again
        assert watch.reply.err == ZOK, watch.reply
        assert fired['read'] > first[1].version, (fired, first[1])
        assert fired['woke'] == fired['read'] + 1, fired
        assert fired['beat'].seq < watch.seq
        beat_read = int(fired['data'].decode().split(' beat=')[1].split()[0])

        def beat_now():
            data, _ = ctx.kz.get(record)
            return int(data.decode().split(' beat=')[1].split()[0])
        wait_until(lambda: beat_now() > beat_read, 10,
                   'a beat after the second wake (beat %d read)' % beat_read)
        still_waiting_then_cancel(w, f)
