"""
Fail fast (issue 39, point 1): a lost lock stops its holder at once.

When zklock learns that a lock a backend holds is gone -- its node deleted
by another client, its session expired -- the statement running in that
backend ends with 40001 naming the lock (not "canceling statement due to
user request"), and no statement that does work starts afterwards: until
the transaction ends (a transaction-level lock) or the loss is
acknowledged (a session-level lock).  Looking at zklock's state,
unlocking, transaction control and settings still run.  A user's own
cancel and statement_timeout read as theirs, before and after a loss.
zklock.cancel_on_loss = off keeps 1.7's behaviour: the loss is found at
COMMIT.

Deletions are made with kazoo, as an operator would; the expiry by
freezing the holder's backend (SIGSTOP) past the session timeout.  Each
test bounds the time from the loss to the error generously (5 s); the
bench measures it.

In short, this module checks: a held node deleted while `pg_sleep`, a
10^10-row join, a row-lock wait, a PL/pgSQL loop with a `WHEN OTHERS`
handler, a `WHEN query_canceled` handler or a wait for another zklock lock
runs: 40001 at once; a session lock's later statements refused until
acknowledged; an idle transaction left alone and refused at its next
statement; an expired session ends the statement on thaw; a holder cut off
(connection closed, or silently) stopped by the loss clock within the
session timeout, with a heartbeat instead of pings; a waiter granted after
a wait longer than the session timeout keeps its lock (the grant's
notification counts as the server's word); a suspended portal's next run
refused; a lost lock released before its cancel was raised still reported
as a loss; user cancels and `statement_timeout` stay theirs, also after a
loss; `zklock.cancel_on_loss = off`.
"""

import socket
import struct
import threading
import time

import zkproxy
from harness import wait_until
from test_lockloss import (RERUN_HINT, ack_hint, after_freeze_detail,
                           assert_lost, clock_detail, deleted_detail,
                           freeze_past_session_timeout)
from test_multisession import LOCK_X, LONG, expect_sqlstate, result, token_of
from test_outage import Cut

TIMEOUT = 120

# from a deletion to the error: generous, the bench measures it
NOTICE_S = 5.0


def hold(ctx, name, res, session=False, protocol=None):
    """A backend holding res exclusively (in a transaction unless
    session; in the node layout of zklock.protocol, if given), and the
    node it holds."""
    b = ctx.backend(name)
    if protocol:
        b.query("SET zklock.protocol = '%s'" % protocol)
    if session:
        token_of(b.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 10)
    else:
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, LONG]), 10)
    [node] = ctx.zi.wait_contenders(res, 1)
    return b, node


def lose_while(ctx, b, node, sql, what, args=None):
    """Start sql on b, delete b's node once it runs, and return the 40001
    it must end with, having checked it came within NOTICE_S."""
    fut = b.submit(sql, args)
    wait_until(lambda: b.busy, 10, '%s running' % what)
    time.sleep(0.2)                     # well inside the statement
    assert not fut.done(), '%s ended before the loss: %r' % (what, fut)
    t0 = time.monotonic()
    ctx.kz.delete(node.path)
    e = expect_sqlstate(fut, '40001', NOTICE_S + 25, what)
    took = time.monotonic() - t0
    assert took < NOTICE_S, '%s ended %.1f s after the loss' % (what, took)
    return e


def main_thread_wakeups(pid):
    """How often a backend's own thread (not libzookeeper's) gave up the
    processor waiting: it grows when the backend wakes from a wait."""
    with open('/proc/%d/task/%d/status' % (pid, pid)) as f:
        for line in f:
            if line.startswith('voluntary_ctxt_switches:'):
                return int(line.split()[1])
    raise AssertionError('no voluntary_ctxt_switches for %d' % pid)


def lost_msg(res):
    return 'exclusive zklock on "%s" was lost' % res


def held_watched(ctx, path):
    """The holder's watch on its node is set (20 ms after the grant): a
    deletion from now on is notified to it at once."""
    wait_until(lambda: ctx.zk.watches_by_path().get(path), 10,
               'the holder\'s watch on %s' % path)


def watch_fired(ctx, path):
    """The server fired (and dropped) every watch on path: its deletion's
    notification is on its way to the watchers."""
    wait_until(lambda: not ctx.zk.watches_by_path().get(path), 10,
               'the watches on %s fired' % path)


class RawPg:
    """The PostgreSQL wire protocol (v3, trust authentication) by hand,
    for what psycopg2 cannot send: an Execute with a row limit, which
    leaves its portal suspended for the next Execute (JDBC's fetch size)."""

    def __init__(self, pg, dbname, user='postgres'):
        self.s = socket.create_connection((pg.host, pg.port), 10)
        self.s.settimeout(60)
        body = struct.pack('!i', 196608)
        for k, v in (('user', user), ('database', dbname),
                     ('application_name', 'ff-raw')):
            body += k.encode() + b'\0' + v.encode() + b'\0'
        body += b'\0'
        self.s.sendall(struct.pack('!i', len(body) + 4) + body)
        self.until(b'Z')

    def msg(self, kind, body=b''):
        self.s.sendall(kind + struct.pack('!i', len(body) + 4) + body)

    def _n(self, n):
        data = b''
        while len(data) < n:
            chunk = self.s.recv(n - len(data))
            if not chunk:
                raise EOFError('the server closed the connection')
            data += chunk
        return data

    def until(self, *kinds):
        """The messages up to the first of one of kinds."""
        out = []
        while True:
            head = self._n(5)
            kind = head[:1]
            out.append((kind, self._n(struct.unpack('!i', head[1:])[0] - 4)))
            if kind in kinds:
                return out

    def query(self, sql):
        self.msg(b'Q', sql.encode() + b'\0')
        return self.until(b'Z')

    def close(self):
        try:
            self.msg(b'X')
        finally:
            self.s.close()


def errors_of(msgs):
    """The SQLSTATEs of the ErrorResponses among msgs."""
    codes = []
    for kind, body in msgs:
        if kind == b'E':
            fields = dict((f[:1], f[1:].decode()) for f in body.split(b'\0')
                          if f)
            codes.append(fields.get(b'C'))
    return codes


def test_sleep_ends_at_deletion(ctx):
    """pg_sleep(60) under a transaction lock whose node is deleted ends at
    once with 40001, the message, DETAIL and HINT of the COMMIT check; the
    transaction is aborted and the next one works."""
    res = 'ff-sleep'
    b, node = hold(ctx, 'ff-sleep', res)
    e = lose_while(ctx, b, node, 'SELECT pg_sleep(60)', 'pg_sleep')
    assert_lost(e, lost_msg(res), deleted_detail(node.path), RERUN_HINT)
    b.query('ROLLBACK')
    assert b.scalar('SELECT count(*) FROM zk_locks') == 0
    assert b.scalar('SELECT 41 + 1') == 42


def test_long_query_ends_at_deletion(ctx):
    """A CPU-bound query (a 10^10-row join) ends with 40001 at the
    deletion of the held node."""
    res = 'ff-query'
    b, node = hold(ctx, 'ff-query', res)
    e = lose_while(ctx, b, node,
                   'SELECT count(*) FROM generate_series(1, 100000) a, '
                   'generate_series(1, 100000) b', 'long query')
    assert_lost(e, lost_msg(res), deleted_detail(node.path), RERUN_HINT)


def test_row_lock_wait_ends_at_deletion(ctx):
    """An UPDATE waiting in PostgreSQL's lock manager for a row another
    transaction locked ends with 40001 when the zklock lock is lost."""
    res = 'ff-rowlock'
    a = ctx.admin
    a.query('DROP TABLE IF EXISTS ff_rows')
    a.query('CREATE TABLE ff_rows (id int PRIMARY KEY, v int)')
    a.query('INSERT INTO ff_rows VALUES (1, 0)')
    other = ctx.backend('ff-row-other')
    other.query('BEGIN')
    other.query('SELECT * FROM ff_rows WHERE id = 1 FOR UPDATE')
    b, node = hold(ctx, 'ff-rowlock', res)
    e = lose_while(ctx, b, node, 'UPDATE ff_rows SET v = 1 WHERE id = 1',
                   'row-lock wait')
    assert_lost(e, lost_msg(res), deleted_detail(node.path), RERUN_HINT)
    other.query('ROLLBACK')


def test_plpgsql_handler_cannot_carry_on(ctx):
    """A PL/pgSQL loop whose EXCEPTION WHEN OTHERS handler would count the
    error and go on: the handler catches 40001, but its first statement
    raises the loss again, so the error leaves the function; the handler's
    statement never ran (a sequence, which no rollback undoes, says so)."""
    res = 'ff-plpgsql'
    a = ctx.admin
    a.query('DROP SEQUENCE IF EXISTS ff_handler_ran')
    a.query('CREATE SEQUENCE ff_handler_ran')
    a.query("""
        CREATE OR REPLACE FUNCTION ff_work() RETURNS text
        LANGUAGE plpgsql AS $$
        BEGIN
            FOR i IN 1..600 LOOP
                BEGIN
                    PERFORM pg_sleep(0.1);
                EXCEPTION WHEN OTHERS THEN
                    PERFORM nextval('ff_handler_ran');
                END;
            END LOOP;
            RETURN 'finished';
        END $$""")
    b, node = hold(ctx, 'ff-plpgsql', res)
    e = lose_while(ctx, b, node, 'SELECT ff_work()', 'PL/pgSQL loop')
    assert e.diag.message_primary == lost_msg(res), str(e)
    assert a.scalar('SELECT is_called FROM ff_handler_ran') is False, \
        'the handler ran a statement after the loss'


def test_query_canceled_handler_does_not_catch(ctx):
    """WHEN query_canceled does not catch the loss: it is 40001."""
    res = 'ff-qc'
    ctx.admin.query("""
        CREATE OR REPLACE FUNCTION ff_qc() RETURNS text
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_sleep(60);
            RETURN 'slept';
        EXCEPTION WHEN query_canceled THEN
            RETURN 'caught';
        END $$""")
    b, node = hold(ctx, 'ff-qc', res)
    e = lose_while(ctx, b, node, 'SELECT ff_qc()', 'function with handler')
    assert e.diag.message_primary == lost_msg(res), str(e)


def test_session_lock_refuses_work_until_acknowledged(ctx):
    """A session-level lock lost while pg_sleep runs in autocommit: the
    statement ends with 40001 and the acknowledge HINT; then a statement
    that reads a table is refused before it runs, while looking
    (zk_locks) still runs; zk_unlock acknowledges, and the table can be
    read again."""
    res = 'ff-session'
    b, node = hold(ctx, 'ff-session', res, session=True)
    e = lose_while(ctx, b, node, 'SELECT pg_sleep(60)', 'pg_sleep')
    assert_lost(e, lost_msg(res), deleted_detail(node.path),
                ack_hint('zk_unlock', res))
    e = expect_sqlstate(b.submit('SELECT count(*) FROM pg_class'), '40001',
                        10, 'a statement after the loss')
    assert e.diag.message_primary == lost_msg(res), str(e)
    assert b.query('SELECT state FROM zk_locks WHERE resource = %s',
                   [res]) == [('lost',)]
    b.query('SELECT zk_unlock(%s)', [res])
    assert b.scalar('SELECT count(*) > 0 FROM pg_class') is True


def test_idle_transaction_refused_at_next_statement(ctx):
    """A loss while the transaction is idle: the backend stays idle in
    transaction (nothing is canceled, nothing ends), learns of the loss
    without asking the ensemble (zk_status counts it from the watch), and
    its next statement that does work is refused; COMMIT fails."""
    res = 'ff-idle'
    b, node = hold(ctx, 'ff-idle', res)
    before = b.scalar('SELECT lost_locks FROM zk_status()')
    ctx.kz.delete(node.path)
    wait_until(lambda: b.scalar('SELECT lost_locks FROM zk_status()')
               > before, 10, 'the loss counted from the watch alone')
    state = ctx.admin.scalar('SELECT state FROM pg_stat_activity '
                             'WHERE pid = %s', [b.pid])
    assert state == 'idle in transaction', state
    e = expect_sqlstate(b.submit('SELECT count(*) FROM pg_class'), '40001',
                        10, 'statement after an idle loss')
    assert_lost(e, lost_msg(res), deleted_detail(node.path), RERUN_HINT)
    b.query('ROLLBACK')


def test_expired_session_ends_statement(ctx):
    """The holder is frozen past the session timeout while pg_sleep runs;
    another backend gets the lock; once thawed, the sleep ends with 40001
    (not at its end, 60 s later).  Its DETAIL names the expired session;
    or the deletion of the node: the ensemble deleted it when it expired
    the session, and the notification of that deletion can reach the
    thawed client before the reconnect that reports the expiry; or the
    loss clock, which has run out when the backend wakes."""
    res = 'ff-expired'
    b, node = hold(ctx, 'ff-expired', res)
    sid = b.scalar('SELECT session_id FROM zk_status()')
    fut = b.submit('SELECT pg_sleep(60)')
    wait_until(lambda: b.busy, 10, 'pg_sleep running')
    time.sleep(0.2)                     # inside the sleep
    w, _ = freeze_past_session_timeout(ctx, b, res)
    thawed = time.monotonic()
    e = expect_sqlstate(fut, '40001', 30, 'pg_sleep of the expired holder')
    took = time.monotonic() - thawed
    assert took < NOTICE_S + ctx.session_timeout, \
        'the sleep ended %.1f s after the thaw' % took
    assert_lost(e, lost_msg(res), after_freeze_detail(sid, node.path),
                RERUN_HINT)
    w.query('ROLLBACK')


def cut_while_sleeping(ctx, res, silent):
    """A holder behind a proxy sleeps under a transaction lock; once it
    has sent a heartbeat (a sync, and no ping: the heartbeat stands in
    for libzookeeper's ping), the proxy cuts it off: closing its
    connection (the client sees it at once), or, silent, holding every
    request from then on (the client sees nothing until its receive
    timeout, two thirds of the session timeout later, and its outstanding
    requests then fail on their own).  Reconnects are refused either way.
    The sleep must end with the clock's 40001 within the session timeout
    (plus slack) of the cut."""
    with Cut(ctx, res) as c:
        b = c.backend(res)
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, LONG]), 10)
        sid = b.scalar('SELECT session_id FROM zk_status()')
        [node] = ctx.zi.wait_contenders(res, 1)
        fut = b.submit('SELECT pg_sleep(60)')
        wait_until(lambda: b.busy, 10, 'pg_sleep running')
        mark = len(c.proxy.requests())
        wait_until(lambda: [r for r in c.proxy.requests()[mark:]
                            if r.op == zkproxy.OP_SYNC], ctx.session_timeout,
                   'a heartbeat while holding')
        assert not [r for r in c.proxy.requests()[mark:]
                    if r.op == zkproxy.OP_PING], c.proxy.requests()[mark:]
        release = threading.Event()
        t0 = time.monotonic()
        c.proxy.refuse_new()
        if silent:
            c.proxy.hook = lambda req: release.wait(ctx.session_timeout + 30)
        else:
            c.cut()
        try:
            e = expect_sqlstate(fut, '40001', ctx.session_timeout + 30,
                                'pg_sleep of the cut-off holder')
        finally:
            release.set()
        took = time.monotonic() - t0
        assert took < ctx.session_timeout + 2, \
            'the statement ended %.1f s after the cut (session timeout %d s)' \
            % (took, ctx.session_timeout)
        assert_lost(e, lost_msg(res), clock_detail(sid, node.path),
                    RERUN_HINT)
        b.query('ROLLBACK')


def test_cut_off_holder_stops_by_the_clock(ctx):
    """A holder cut off from the ensemble (its connection closed, no
    server reachable, so nobody tells it of the expiry) while pg_sleep
    runs: a session timeout after the last reply it had, the statement
    ends with 40001 saying that no reply came for the session timeout
    (see cut_while_sleeping)."""
    cut_while_sleeping(ctx, 'ff-clock', silent=False)


def test_silently_cut_off_holder_stops_by_the_clock(ctx):
    """The same when the cut is silent (packets dropped, no connection
    closed): the requests libzookeeper fails by itself when it gives up on
    the connection are no reply from the ensemble, and do not move the
    clock (they did: the error came two thirds of a timeout late)."""
    cut_while_sleeping(ctx, 'ff-clock-silent', silent=True)


def test_suspended_portal_refused_after_loss(ctx):
    """A portal read in batches (Execute with a row limit, as JDBC's fetch
    size does): the loss comes while the client works on a batch, outside
    any statement; a later Execute starts no new statement, but runs the
    executor again, and is refused there with 40001.  zklock takes the
    loss in when its client library hands it the deletion's notification,
    a moment after the server sent it (nothing the test can see), so the
    client fetches one row at a time until an Execute is refused, within
    NOTICE_S: the sequence the query advances moved for the rows returned
    only (and at most the one a cancel met being made)."""
    a = ctx.admin
    a.query('DROP SEQUENCE IF EXISTS ff_portal_seq')
    a.query('CREATE SEQUENCE ff_portal_seq')
    res = 'ff-portal'
    r = RawPg(ctx.pg, ctx.dbname)
    try:
        assert not errors_of(r.query('BEGIN'))
        out = r.query("SELECT zk_lock_exclusive('%s', '60 s')" % res)
        assert not errors_of(out), out
        [node] = ctx.zi.wait_contenders(res, 1)
        sql = (b"SELECT nextval('ff_portal_seq') "
               b"FROM generate_series(1, 1000000)")
        r.msg(b'P', b'\0' + sql + b'\0' + struct.pack('!h', 0))
        r.msg(b'B', b'\0\0' + struct.pack('!hhh', 0, 0, 0))
        r.msg(b'E', b'\0' + struct.pack('!i', 1))
        r.msg(b'H')
        out = r.until(b's', b'E')
        assert out[-1][0] == b's', out
        rows = 1
        held_watched(ctx, node.path)
        ctx.kz.delete(node.path)
        watch_fired(ctx, node.path)
        deadline = time.monotonic() + NOTICE_S
        while True:
            r.msg(b'E', b'\0' + struct.pack('!i', 1))
            r.msg(b'H')
            out = r.until(b's', b'E')
            rows += sum(1 for kind, _ in out if kind == b'D')
            if out[-1][0] == b'E':
                break
            assert time.monotonic() < deadline, \
                'no 40001 %.0f s after the loss (%d rows)' % (NOTICE_S, rows)
        assert errors_of(out) == ['40001'], out
        r.msg(b'S')
        r.until(b'Z')
        moved = a.scalar('SELECT last_value FROM ff_portal_seq')
        assert rows <= moved <= rows + 1, (rows, moved)
        r.query('ROLLBACK')
    finally:
        r.close()


def test_cancel_for_a_lock_released_meanwhile_is_still_a_loss(ctx):
    """The loss cancels a COPY FROM STDIN that waits for its client (the
    cancel waits for the next row); that row's column DEFAULT releases the
    lost lock before the cancel is raised: the error is still 40001, a
    loss, never "canceling statement due to user request"."""
    a = ctx.admin
    res = 'ff-copy'
    a.query('DROP TABLE IF EXISTS ff_copy')
    a.query("CREATE TABLE ff_copy (a int, b bool DEFAULT zk_unlock('%s'))"
            % res)
    b, node = hold(ctx, 'ff-copy', res, session=True)
    go = threading.Event()

    class Rows:
        sent = False

        def read(self, n=-1):
            if Rows.sent:
                return ''
            go.wait(30)
            Rows.sent = True
            return '1\n'

        readline = read

    box = {}

    def run():
        try:
            with b.conn.cursor() as cur:
                cur.copy_expert('COPY ff_copy (a) FROM STDIN', Rows())
            box['ok'] = True
        except Exception as e:             # the outcome, checked below
            box['e'] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_until(lambda: a.scalar("SELECT wait_event FROM pg_stat_activity "
                                "WHERE pid = %s", [b.pid]) == 'ClientRead'
               and a.scalar("SELECT query FROM pg_stat_activity WHERE pid "
                            "= %s", [b.pid]).startswith('COPY'),
               10, 'COPY waiting for its data')
    woke = main_thread_wakeups(b.pid)
    held_watched(ctx, node.path)
    ctx.kz.delete(node.path)
    watch_fired(ctx, node.path)
    # The row must come after the backend took the notification in (the
    # cancel armed): else the DEFAULT's unlock forgets the node first and
    # the loss is rightly never heard of (seen under a loaded machine).
    # The session watcher sets the backend's latch when the event arms a
    # cancel (COPY runs inside a zklock frame), so the backend's own
    # thread, asleep in ClientRead, wakes only then.
    wait_until(lambda: main_thread_wakeups(b.pid) > woke, 10,
               'the backend woken by the deletion\'s notification')
    go.set()
    t.join(30)
    e = box.get('e')
    assert e is not None and e.pgcode == '40001', \
        'COPY ended with %r (%s)' % (e or box, getattr(e, 'pgcode', None))


def test_grant_after_a_long_quiet_wait_is_not_lost(ctx):
    """A waiter that waited longer than the session timeout without a
    reply to anything (waiting costs nothing: no request, only
    libzookeeper's pings, which the loss clock does not see) is granted by
    its predecessor's deletion: the notification counts as the server's
    word, so the loss clock does not run out at the grant (it did: the
    lock call ended with 40001, "No reply ... for 6.0 s").  The lock is
    held, and the COMMIT goes through."""
    res = 'ff-quiet-wait'
    h, _ = hold(ctx, 'ff-quiet-h', res)
    w = ctx.backend('ff-quiet-w')
    w.query('BEGIN')
    fut = w.submit(LOCK_X, [res, LONG])
    ctx.zi.wait_contenders(res, 2)
    # the scenario itself: a wait longer than the session timeout after
    # the last reply (the idle nudges stop after 3.1 s, the deadlock
    # record and search come at deadlock_timeout)
    time.sleep(2 * ctx.session_timeout)
    h.query('COMMIT')
    token_of(fut, 15, 'the waiter, granted after a quiet wait')
    assert w.query('SELECT state FROM zk_locks WHERE resource = %s',
                   [res]) == [('held',)]
    w.query('COMMIT')


def test_zklock_wait_ends_when_held_lock_lost(ctx):
    """Holding A and waiting for B (held elsewhere): losing A ends the wait
    with 40001 naming A."""
    a_res, b_res = 'ff-wait-a', 'ff-wait-b'
    other = ctx.backend('ff-wait-other')
    other.query('BEGIN')
    token_of(other.submit(LOCK_X, [b_res, LONG]), 10)
    b, node = hold(ctx, 'ff-wait', a_res)
    e = lose_while(ctx, b, node, LOCK_X, 'zklock wait', [b_res, LONG])
    assert_lost(e, lost_msg(a_res), deleted_detail(node.path), RERUN_HINT)
    other.query('ROLLBACK')


def test_users_cancels_stay_theirs(ctx):
    """With a lock held and nothing lost, a user's cancel and a
    statement_timeout read as theirs (57014 and their own messages); and
    after a loss was delivered and rolled back, they still do: no cancel
    of zklock's lingers into a later transaction."""
    res = 'ff-theirs'
    b, node = hold(ctx, 'ff-theirs', res)

    def user_cancel():
        fut = b.submit('SELECT pg_sleep(60)')
        wait_until(lambda: b.busy, 10, 'pg_sleep running')
        time.sleep(0.2)
        b.cancel()
        e = expect_sqlstate(fut, '57014', 10, 'user-canceled pg_sleep')
        assert 'canceling statement due to user request' in str(e), str(e)

    def timeout():
        b.query("SET statement_timeout = '200ms'")
        e = expect_sqlstate(b.submit('SELECT pg_sleep(60)'), '57014', 10,
                            'pg_sleep past statement_timeout')
        assert 'canceling statement due to statement timeout' in str(e), \
            str(e)
        # (the ROLLBACK that follows undoes the SET)

    def under_new_lock(cancel):
        """The lock taken again in a new transaction, cancel() in it."""
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, LONG]), 10)
        cancel()
        b.query('ROLLBACK')

    user_cancel()
    b.query('ROLLBACK')
    under_new_lock(timeout)
    # a loss delivered, then the user's own again
    under_new_lock(lambda: lose_while(
        ctx, b, ctx.zi.wait_contenders(res, 1)[0], 'SELECT pg_sleep(60)',
        'pg_sleep'))
    under_new_lock(user_cancel)
    under_new_lock(timeout)


def test_cancel_on_loss_off_learns_at_commit(ctx):
    """zklock.cancel_on_loss = off: a statement under a lost lock runs to
    its end, and the COMMIT fails with 40001, as in 1.7."""
    res = 'ff-off'
    b = ctx.backend('ff-off')
    b.query('SET zklock.cancel_on_loss = off')
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, [res, LONG]), 10)
    [node] = ctx.zi.wait_contenders(res, 1)
    fut = b.submit('SELECT pg_sleep(2)')
    wait_until(lambda: b.busy, 10, 'pg_sleep running')
    ctx.kz.delete(node.path)
    assert result(fut, 20, 'pg_sleep with cancel_on_loss off') == [('',)]
    assert b.scalar('SELECT count(*) FROM pg_class') > 0
    e = expect_sqlstate(b.submit('COMMIT'), '40001', 20, 'COMMIT')
    assert_lost(e, lost_msg(res), deleted_detail(node.path), RERUN_HINT)


def deleted_watch_triggers(zk):
    """Deletes that fired at least one watch, over the servers (mntr)."""
    n = 0
    for sid in zk.sids:
        for line in zk.four_letter(sid, 'mntr').splitlines():
            key, _, value = line.partition('\t')
            if key == 'zk_cnt_node_deleted_watch_count':
                n += int(float(value))
    return n


def test_short_locks_set_no_watch(ctx):
    """Fail fast costs a short lock nothing: a held node's watch is sent
    20 ms after the grant, not at once, so a lock cycle (BEGIN, lock,
    COMMIT) that took the client less than 15 ms leaves the server no
    watch to fire at its delete.  Each cycle is timed from the lock
    statement's start to the COMMIT's return (longer than the hold) and
    the server's count of deletes that fired a watch read after its node
    is gone; cycles a loaded machine stretched past 15 ms are not judged,
    and at least 10 of at most 100 must be short.  When the watch was
    sent at once, every cycle's delete fired it (40 of 40).  A lock held
    longer gets its watch: the server lists it for the holder's session,
    and the node's deletion is then noticed at once (the tests above)."""
    b = ctx.backend('ff-short')
    b.query('SELECT zk_lock_exclusive(%s)', ['ff-short-warm'])
    short = fired = 0
    for i in range(100):
        if short >= 20:
            break
        before = deleted_watch_triggers(ctx.zk)
        b.query('BEGIN')
        t = time.monotonic()
        b.query('SELECT zk_lock_exclusive(%s)', ['ff-short-%d' % i])
        b.query('COMMIT')
        took = time.monotonic() - t
        ctx.zi.wait_contenders('ff-short-%d' % i, 0)
        if took < 0.015:
            short += 1
            fired += deleted_watch_triggers(ctx.zk) - before
    assert short >= 10, 'only %d of 100 lock cycles took under 15 ms' % short
    assert fired == 0, '%d of %d short cycles fired a watch' % (fired, short)

    b.query('BEGIN')
    token_of(b.submit(LOCK_X, ['ff-long', LONG]), 10)
    [node] = ctx.zi.wait_contenders('ff-long', 1)
    wait_until(lambda: any(node.path in ctx.zk.four_letter(sid, 'wchc')
                           for sid in ctx.zk.sids),
               NOTICE_S, 'the held node watched')
    b.query('COMMIT')
