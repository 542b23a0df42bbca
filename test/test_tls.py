"""
TLS between zklock and ZooKeeper through a local tunnel (issue 41, point 2).

The recipe of doc/04-operations.md, "Encrypting the wire (TLS)", as this
module runs it on 127.0.0.1 (test/lib/tunnels.py):

  * a 3-server ensemble that serves clients over TLS only: Netty on each
    server's secureClientPort, client certificates required, no plain
    clientPort, the quorum over TLS too (sslQuorum);
  * certificates made once per run with openssl and keytool (a CA, a
    PKCS12 key store per server, the trust store, the database host's
    client certificate, and a second CA for the wrong certificate);
  * one stunnel process with a client service per server (verifyChain,
    checkHost, the client certificate), run in the foreground by the test;
  * a PostgreSQL cluster whose zklock.hosts names the tunnels' local ports.

test_tunnel: nothing listens in clear text; locks, the commit check (the
holder's server killed, COMMIT still succeeds) and deadlock detection
(40P01) work through the tunnels; the tunnel killed under an idle holder
of a session lock and started again within the session timeout costs a
reconnect: same session, lock kept; a reload of the tunnel (SIGHUP, with
a CA file that trusts a second CA too) costs the held connection nothing.

test_wrong_certificate: a tunnel to a server whose certificate another CA
signed fails the lock call with 08001 once zklock.connect_timeout (3 s)
has passed, not a hang, and the error says every connection was reset
before the ZooKeeper handshake, with a hint at the tunnel.

Figures: tunnel restart -> reconnect, server kill -> COMMIT, the
40P01, wrong certificate -> 08001.
"""

import logging
import os
import re
import socket
import time

import psycopg2

import harness
import tunnels
from harness import wait_until
from test_ensemble import wait_contenders
from test_multisession import expect_sqlstate, still_waiting, token_of

TIMEOUT = 150                   # seconds per test (a pytest-timeout bound)
SETUP_TIMEOUT = 240

DB = 'zklock_tls'
ROOT = '/zklock'
SESSION_TIMEOUT_S = 6
# rides out an election when the test kills a server (test_ensemble's)
CONNECT_TIMEOUT_S = 20
WRONG_CONNECT_TIMEOUT_S = 3
MARGIN_S = 6                    # slack on every "within X" bound
TUNNEL_DOWN_S = 1.0             # how long the tunnel stays down (the fault)
DEADLOCK_BOUND_S = 1.0 + 6      # deadlock_timeout plus round trips, generously

LOCK_X = 'SELECT zk_lock_exclusive(%s, %s::interval)'


def module_setup(ctx):
    sh = ctx.shared
    sh.clusters = []
    t0 = time.monotonic()
    sh.certs = tunnels.Certificates(ctx.workdir).make()
    ctx.figure('certificates made in', round(time.monotonic() - t0, 2), 's')
    sh.ens = tunnels.TlsZooKeeper(sh.certs, n=3, base_dir=ctx.workdir,
                                  name='tls')
    sh.ens.start(timeout=120)
    sh.tun = tunnels.Tunnels(
        sh.certs, {'zk%d' % s: (sh.ens.client_ports[s],
                                tunnels.server_name(s))
                   for s in sh.ens.sids},
        ctx.workdir)
    sh.tun.start()
    sh.pg = harness.PgCluster('tls', {
        'zklock.hosts': sh.tun.hosts,
        'zklock.root': ROOT,
        'zklock.session_timeout': '%ds' % SESSION_TIMEOUT_S,
        # zk_sessions: the idle holder's session seen from another backend
        'shared_preload_libraries': 'zklock',
    }, base_dir=ctx.workdir)
    sh.pg.start()
    sh.clusters.append(sh.pg)
    sh.pg.psql('CREATE DATABASE %s' % DB)
    sh.pg.psql("ALTER DATABASE %s SET zklock.connect_timeout = '%ds'"
               % (DB, CONNECT_TIMEOUT_S))
    sh.pg.psql('CREATE EXTENSION zklock', dbname=DB)
    sh.kz = direct_kazoo(sh)
    sh.zi = harness.ZkInspector(sh.kz, ROOT)
    ctx.log('TLS ensemble %s; tunnels %s; cluster port %d'
            % (sh.ens.connect_string, sh.tun.hosts, sh.pg.port))


def module_teardown(ctx):
    sh = ctx.shared
    errors = []
    if getattr(sh, 'zi', None) is not None:
        last = []

        def clean():
            last[:] = sh.kz.retry(sh.zi.leftovers)
            return not last
        try:
            wait_until(clean, 2 * SESSION_TIMEOUT_S + MARGIN_S,
                       'no contender left under %s' % ROOT, interval=0.2)
        except Exception as e:
            errors.append('%s: %r' % (e, last))
    errors += harness.stop_shared(sh, ('pg', 'tun', 'ens'))
    assert not errors, 'teardown: %s' % '; '.join(errors)


def direct_kazoo(sh):
    """A kazoo client on the servers' secure ports, with the client
    certificate: the test's view of ZooKeeper, independent of the
    tunnels."""
    from kazoo.client import KazooClient
    quiet = logging.getLogger('zklock.test_tls.kazoo')
    quiet.setLevel(logging.ERROR)
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    kz = KazooClient(hosts=sh.ens.connect_string, timeout=30, logger=quiet,
                     **sh.certs.kazoo_args())
    kz.start(timeout=30)
    return kz


def backend(ctx, name):
    return ctx.backend(name, dbname=DB, cluster=ctx.shared.pg)


def status(b):
    rows = b.query('SELECT state, session_id, server, reconnects '
                   'FROM zk_status()')
    return dict(zip(('state', 'session_id', 'server', 'reconnects'), rows[0]))


def plain_answer(port, timeout=2.0):
    """What a server says to a plain four letter word on `port` (b'' if
    it closes, None if nothing comes within `timeout`).  A few more bytes
    follow the word: with fewer than a TLS record header's five, Netty
    waits for the rest (and this for the timeout); with them it closes at
    once."""
    with socket.create_connection(('127.0.0.1', port), timeout=timeout) as s:
        s.sendall(b'ruok\n\n\n\n')
        try:
            return s.recv(100)
        except socket.timeout:
            return None
        except ConnectionResetError:
            return b''


def check_no_clear_text(sh):
    """Every server listens only on its secure client port and its quorum
    ports, and its secure port does not answer a plain four letter
    word."""
    for sid in sh.ens.sids:
        ports = sh.ens.listening_ports(sid)
        allowed = {sh.ens.client_ports[sid], sh.ens.quorum_ports[sid],
                   sh.ens.election_ports[sid]}
        assert sh.ens.client_ports[sid] in ports, (sid, ports)
        assert ports <= allowed, \
            'server %d listens on %s besides its secure and quorum ports' % (
                sid, sorted(ports - allowed))
        answer = plain_answer(sh.ens.client_ports[sid])
        assert not answer or b'imok' not in answer, \
            'server %d answered a plain ruok: %r' % (sid, answer)


def holder_on_a_follower(ctx, sh, res):
    """A backend holding `res` in a transaction whose session is on a
    follower (reached through that server's tunnel).  Returns (backend,
    token, its status, the follower's sid)."""
    for attempt in range(15):
        h = backend(ctx, 'tls-holder-%d' % attempt)
        h.query('BEGIN')
        tok = token_of(h.submit(LOCK_X, [res, '30 seconds']), 30, 'holder')
        st = status(h)
        name = sh.tun.name_of(st['server'])
        assert name is not None, \
            'the session is on %s, not on a tunnel (%s)' % (st['server'],
                                                           sh.tun.hosts)
        sid = int(name[2:])
        if sh.ens.mode(sid) == 'follower':
            return h, tok, st, sid
        h.query('ROLLBACK')
        h.close()
        wait_contenders(sh, res, 0)
    raise AssertionError('no backend ever connected to a follower')


def test_tunnel(ctx):
    """Through stunnel to a TLS-only ensemble: nothing listens in clear
    text; a lock and its waiter, the commit check with the holder's
    server killed (COMMIT succeeds after a reconnect through another
    tunnel, same session), a deadlock (one 40P01); then the tunnel killed
    under an idle holder of a session lock and started again
    TUNNEL_DOWN_S later: the holder reconnects within the session
    timeout with the same session id, its node is the same; the tunnel
    reloaded (SIGHUP, a CA file with a second CA added) leaves that
    connection alone (zk_sessions row unchanged, connected_since
    included); another backend, through the reloaded tunnel, fails to
    take the lock until the holder unlocks, then takes it."""
    sh = ctx.shared
    check_no_clear_text(sh)

    # -- a lock, its waiter and the commit check --------------------------
    res = 'tls/commit'
    h, tok, st, sid = holder_on_a_follower(ctx, sh, res)
    w = backend(ctx, 'tls-waiter')
    w.query('BEGIN')
    fut = w.submit(LOCK_X, [res, '60 seconds'])
    wait_contenders(sh, res, 2)
    still_waiting([fut], what='waiter')
    killed = sid
    try:
        t_kill = time.monotonic()
        sh.ens.kill(sid)
        h.query('COMMIT', timeout=CONNECT_TIMEOUT_S + MARGIN_S)
        commit_s = time.monotonic() - t_kill
        after = status(h)
        assert after['session_id'] == st['session_id'], (st, after)
        assert after['reconnects'] >= st['reconnects'] + 1, (st, after)
        assert sh.tun.name_of(after['server']) not in (None, 'zk%d' % sid), \
            after
        tok_w = token_of(fut, 30, 'waiter after the holder committed')
        assert tok_w > tok
        w.query('COMMIT')
        wait_contenders(sh, res, 0)
        sh.ens.start_servers([sid], timeout=120)
        killed = None
    finally:
        if killed is not None:
            sh.ens.start_servers(timeout=120)
    ctx.figure('server of the holder killed: COMMIT returned after',
               round(commit_s, 2), 's')
    wait_until(lambda: sh.kz.connected, 30, 'kazoo to reconnect')

    # -- deadlock detection ------------------------------------------------
    r0, r1 = 'tls/dl0', 'tls/dl1'
    b0, b1 = backend(ctx, 'tls-dl0'), backend(ctx, 'tls-dl1')
    for b, r in ((b0, r0), (b1, r1)):
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [r, '30 seconds']), 30, 'hold %s' % r)
    f0 = b0.submit(LOCK_X, [r1, '30 seconds'])
    wait_contenders(sh, r1, 2)
    t0 = time.monotonic()
    f1 = b1.submit(LOCK_X, [r0, '30 seconds'])
    # the victim is the youngest wait, as the two waits' records say: either
    wait_until(lambda: f0.done() or f1.done(), DEADLOCK_BOUND_S + MARGIN_S,
               'one member of the cycle to end', interval=0.01)
    dl_s = time.monotonic() - t0
    # The victim's error releases its lock and the survivor is granted at
    # once: the survivor's statement may return first (a four-lane run on
    # 15 saw it), so both are awaited and the victim is the one that
    # failed.
    wait_until(lambda: f0.done() and f1.done(), 30,
               'both members of the cycle to end', interval=0.01)
    victim, survivor = ((b1, f1), (b0, f0)) if f0.exception() is None else \
        ((b0, f0), (b1, f1))
    err = expect_sqlstate(victim[1], '40P01', 1, 'the victim')
    victim[0].query('ROLLBACK')
    token_of(survivor[1], 30, 'the survivor of the cycle')
    survivor[0].query('COMMIT')
    assert err.diag.message_detail, err
    ctx.figure('deadlock through the tunnels: 40P01 after', round(dl_s, 2),
               's')
    wait_contenders(sh, r0, 0)
    wait_contenders(sh, r1, 0)

    # -- the tunnel restarted under an idle holder of a session lock -----
    guard = 'tls/guard'
    a = backend(ctx, 'tls-idle')
    o = backend(ctx, 'tls-observer')
    tok = token_of(a.submit('SELECT zk_session_lock_exclusive(%s)',
                            [guard]), 30, 'session lock')
    node = wait_contenders(sh, guard, 1)[0]

    def session_of_a():
        rows = o.query('SELECT state, session_id, server, connected_since '
                       'FROM zk_sessions WHERE pid = %s', [a.pid])
        assert len(rows) == 1, rows
        return dict(zip(('state', 'session_id', 'server', 'connected_since'),
                        rows[0]))
    before = session_of_a()
    assert before['state'] == 'connected', before
    assert int(before['session_id'], 16) == node.session_id, (before, node)

    t_kill = time.monotonic()
    sh.tun.kill()
    try:
        wait_until(lambda: session_of_a()['state'] != 'connected', 10,
                   'the idle holder to see its connection gone',
                   interval=0.02)
        noticed_s = time.monotonic() - t_kill
        time.sleep(TUNNEL_DOWN_S)       # the length of the outage under test
    finally:
        sh.tun.start()
    restarted_s = time.monotonic() - t_kill
    last = {}

    def reconnected():
        last.update(session_of_a())
        return last['state'] == 'connected'
    wait_until(reconnected, SESSION_TIMEOUT_S + MARGIN_S,
               'the idle holder to reconnect', interval=0.02)
    reconnect_s = time.monotonic() - t_kill
    assert reconnect_s < SESSION_TIMEOUT_S, \
        'reconnected %.2f s after the kill, past the session timeout' \
        % reconnect_s
    assert last['session_id'] == before['session_id'], (before, last)
    assert sh.tun.name_of(last['server']) is not None, last
    cs = wait_contenders(sh, guard, 1)
    assert (cs[0].czxid, cs[0].session_id) == (node.czxid, node.session_id), \
        (node, cs)
    # a reload (SIGHUP) with a CA file that trusts a second CA too, the
    # first step of a CA rotation: the open connection stays
    bundle = os.path.join(sh.tun.dir, 'ca-bundle.pem')
    with open(bundle, 'w') as f:
        for pem in (sh.certs.ca_pem, sh.certs.path('other-ca.pem')):
            with open(pem) as src:
                f.write(src.read())
    t0 = time.monotonic()
    sh.tun.reload(ca_file=bundle)
    reload_s = time.monotonic() - t0
    after_reload = session_of_a()
    assert after_reload == last, (last, after_reload)
    c = backend(ctx, 'tls-try')
    try_x = 'SELECT zk_try_session_lock_exclusive(%s)'
    assert c.scalar(try_x, [guard]) is False, 'the guard was free'
    assert session_of_a() == last, 'the reload moved the idle holder'
    a.query('SELECT zk_unlock_all()')
    # the release's delete is sent without waiting for its reply
    wait_contenders(sh, guard, 0)
    assert c.scalar(try_x, [guard]) is True, 'the guard was not released'
    c.query('SELECT zk_unlock_all()')
    ctx.log('tunnel killed: holder saw it after %.3f s; tunnel back after '
            '%.2f s; holder reconnected after %.2f s (token %d kept)'
            % (noticed_s, restarted_s, reconnect_s, tok))
    ctx.figure('tunnel down %.1f s: idle holder reconnected after'
               % TUNNEL_DOWN_S, round(reconnect_s, 2), 's')
    ctx.figure('tunnel reloaded (SIGHUP) in', round(reload_s, 2), 's')
    wait_contenders(sh, guard, 0)


def test_wrong_certificate(ctx):
    """A tunnel to a server whose certificate another CA signed: the
    tunnel rejects the certificate and resets every connection; the lock
    call fails with 08001 after zklock.connect_timeout (3 s), within a
    generous bound (no hang), and the DETAIL says that every connection
    to the tunnel's port was reset before the ZooKeeper handshake, with
    the HINT about a TLS tunnel; the tunnel's log names the rejected
    certificate."""
    sh = ctx.shared
    wrong = tunnels.TlsZooKeeper(
        sh.certs, n=1, key_stores={1: sh.certs.key_store(1, wrong_ca=True)},
        base_dir=ctx.workdir, name='tls-wrong')
    tun = tunnels.Tunnels(
        sh.certs, {'zk1': (wrong.client_ports[1], tunnels.server_name(1))},
        ctx.workdir, name='tunnel-wrong')
    try:
        wrong.start(timeout=120)
        tun.start()
        b = backend(ctx, 'tls-wrong')
        b.query("SET zklock.hosts = '%s'" % tun.hosts)
        b.query("SET zklock.connect_timeout = '%ds'" % WRONG_CONNECT_TIMEOUT_S)
        t0 = time.monotonic()
        fut = b.submit(LOCK_X, ['tls/wrong', '30 seconds'])
        err = expect_sqlstate(fut, '08001',
                              WRONG_CONNECT_TIMEOUT_S + 3 * MARGIN_S,
                              'the lock call through the wrong tunnel')
        elapsed = time.monotonic() - t0
        assert elapsed >= WRONG_CONNECT_TIMEOUT_S - 0.5, \
            '08001 after %.2f s, before the connect timeout' % elapsed
        detail = err.diag.message_detail or ''
        m = re.fullmatch(r'Every connection to "%s" was reset before the '
                         r'ZooKeeper handshake \((\d+) times?\)\.'
                         % re.escape(tun.hosts), detail)
        assert m and int(m.group(1)) >= 1, detail
        assert 'TLS tunnel' in (err.diag.message_hint or ''), err
        log = tun.log_text()
        assert re.search(r'CERT: Pre-verification error|Rejected by CERT',
                         log), log[-2000:]
        # the same session layer, the right tunnels: the backend works
        b.query('RESET zklock.hosts')
        b.query('RESET zklock.connect_timeout')
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, ['tls/wrong', '30 seconds']), 30,
                 'the lock through the right tunnels')
        b.query('COMMIT')
    finally:
        tun.stop()
        wrong.stop()
    ctx.log('wrong certificate: 08001 after %.2f s: %s'
            % (elapsed, detail))
    ctx.figure('wrong certificate (connect_timeout %d s): 08001 after'
               % WRONG_CONNECT_TIMEOUT_S, round(elapsed, 2), 's')
