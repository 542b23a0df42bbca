"""
Holes found by review (issue 13): each test here failed on the code
before its fix.

  * PREPARE TRANSACTION runs the lost-lock check: a lost session-level
    lock fails the PREPARE with 40001, nothing is prepared; with the lock
    intact, PREPARE (session locks only) works and COMMIT PREPARED from
    another backend commits.
  * A transaction that writes through postgres_fdw (a real loopback
    server) does not commit the remote side before zklock confirmed its
    locks, although postgres_fdw registers its transaction callback after
    zklock's; also when postgres_fdw is first used in the backend by a
    deferred trigger that fires at COMMIT (issue 30: its callback is then
    registered during the commit), with a transaction-level lock, a
    session-level one, in autocommit, with a second server opened before
    the lock, and at PREPARE TRANSACTION; with the lock intact, both sides
    commit, and 200 such transactions leave no memory behind.
  * DISCARD ALL releases every session-level lock (nodes deleted), as it
    does advisory locks, for connection poolers.
  * Shared asked while holding exclusive is granted at once on the
    exclusive node, even with a foreign exclusive waiter queued, and that
    waiter is not granted until both holds are gone; exclusive asked while
    holding shared with a foreign exclusive waiter between is 40P01 at
    once.
  * Messages: the lost-lock HINT names zk_unlock_shared for a shared lock
    and quotes the resource as an SQL literal; the "you don't own" WARNING
    carries 01000; a node deleted by another client while its owner waits
    is 55000, not 55P03 (which means "try again").
  * Re-entrant transaction-level calls cost no memory per call; a timeout
    too large for a timestamp does not expire at once; the settings'
    defaults (pg_settings.boot_val).

These tests run on a cluster of their own (max_prepared_transactions,
postgres_fdw), against the suite's ZooKeeper.
"""

import select
import subprocess
import time

import harness
import rawpq
from test_multisession import LOCK_X, LOCK_S, expect_sqlstate, token_of, \
    still_waiting

TIMEOUT = 120
DB = 'zklock_holes'


def module_setup(ctx):
    pg = harness.PgCluster('holes', {
        'zklock.hosts': ctx.zk.connect_string,
        'zklock.root': ctx.root,
        'zklock.session_timeout': '%ds' % ctx.session_timeout,
        'zklock.connect_timeout': '%ds' % ctx.connect_timeout,
        'max_prepared_transactions': 5,
    }, base_dir=ctx.workdir).start()
    ctx.shared.pg = pg
    ctx.shared.clusters = [pg]
    pg.psql('CREATE DATABASE %s' % DB)
    pg.psql('CREATE EXTENSION zklock', dbname=DB)
    pg.psql('CREATE TABLE t (id int)', dbname=DB)


def module_teardown(ctx):
    pg = getattr(ctx.shared, 'pg', None)
    if pg is not None:
        pg.stop()


def backend(ctx, name):
    return ctx.backend(name, cluster=ctx.shared.pg, dbname=DB)


def node_of(b, res, mode='exclusive'):
    return b.scalar('SELECT node FROM zk_locks WHERE resource = %s '
                    'AND mode = %s LIMIT 1', [res, mode])


def rows_in(b, value):
    return b.scalar('SELECT count(*) FROM t WHERE id = %s', [value])


def wait_gone(ctx, path, what):
    harness.wait_until(lambda: ctx.kz.exists(path) is None, 15,
                       '%s deleted from ZooKeeper' % what)


# ---------------------------------------------------------------------------
# lock loss never commits: PREPARE TRANSACTION, postgres_fdw
# ---------------------------------------------------------------------------

def test_prepare_fails_on_lost_session_lock(ctx):
    """A session lock whose node another client deleted: PREPARE
    TRANSACTION fails with 40001 naming the resource (the COMMIT's
    message: what happened, when, and to acknowledge), and nothing is
    prepared (COMMIT PREPARED could otherwise commit it from elsewhere).
    (zklock.cancel_on_loss off: with it on, the INSERT would be refused
    first, once the node's watch told the backend; test_failfast.py.)"""
    a = backend(ctx, 'holes-prep')
    a.query('SET zklock.cancel_on_loss = off')
    res = 'holes/prepare-lost'
    token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 15)
    node = node_of(a, res)
    ctx.kz.delete(node)
    a.query('BEGIN')
    a.query('INSERT INTO t VALUES (101)')
    e = expect_sqlstate(a.submit("PREPARE TRANSACTION 'zkl_holes_lost'"),
                        '40001', 20, 'PREPARE with a lost session lock')
    # the same error as at COMMIT: the lock, what happened and when, what
    # to do for a session-level lock
    assert e.diag.message_primary == \
        'exclusive zklock on "%s" was lost' % res, str(e)
    assert (e.diag.message_detail or '').startswith(
        'Node "%s" was deleted from ZooKeeper while the lock was held '
        '(noticed at ' % node), e.diag.message_detail
    assert (e.diag.message_hint or '').startswith(
        "Acknowledge the loss with zk_unlock('%s') or zk_unlock_all()"
        % res), e.diag.message_hint
    other = backend(ctx, 'holes-prep-2')
    assert other.scalar("SELECT count(*) FROM pg_prepared_xacts "
                        "WHERE gid = 'zkl_holes_lost'") == 0
    assert rows_in(other, 101) == 0
    a.query('SELECT zk_unlock_all()')


def test_prepare_with_session_lock_allowed(ctx):
    """With only an intact session lock, PREPARE works (the check passes),
    COMMIT PREPARED from another backend commits, and the lock is still
    held afterwards until zk_unlock."""
    a = backend(ctx, 'holes-prep-ok')
    res = 'holes/prepare-ok'
    token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 15)
    node = node_of(a, res)
    a.query('BEGIN')
    a.query('INSERT INTO t VALUES (102)')
    a.query("PREPARE TRANSACTION 'zkl_holes_ok'")
    other = backend(ctx, 'holes-prep-ok-2')
    other.query("COMMIT PREPARED 'zkl_holes_ok'")
    assert rows_in(other, 102) == 1
    assert ctx.kz.exists(node) is not None, 'the session lock went'
    assert a.scalar('SELECT zk_unlock(%s)', [res]) is True
    wait_gone(ctx, node, 'the unlocked node')


def fdw_setup(ctx):
    pg = ctx.shared.pg
    if getattr(ctx.shared, 'fdw_ready', False):
        return
    for sql in (
            'CREATE EXTENSION IF NOT EXISTS postgres_fdw',
            "CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw "
            "OPTIONS (host '%s', port '%d', dbname '%s')"
            % (pg.socket_dir, pg.port, DB),
            'CREATE USER MAPPING FOR postgres SERVER loopback '
            "OPTIONS (user 'postgres')",
            'CREATE TABLE remote_t (id int)',
            "CREATE FOREIGN TABLE ft (id int) SERVER loopback "
            "OPTIONS (table_name 'remote_t')"):
        pg.psql(sql, dbname=DB)
    ctx.shared.fdw_ready = True


def fdw_case(ctx, name, value, lock_sql, session):
    """Lock, write through postgres_fdw, lose the lock, COMMIT: 40001 and
    the remote row absent."""
    fdw_setup(ctx)
    a = backend(ctx, name)
    res = 'holes/' + name
    if session:
        # zklock registers its callback first; postgres_fdw's comes later
        token_of(a.submit(lock_sql, [res]), 15)
        a.query('BEGIN')
    else:
        a.query('BEGIN')
        token_of(a.submit(lock_sql, [res]), 15)
    a.query('INSERT INTO ft VALUES (%s)', [value])
    ctx.kz.delete(node_of(a, res))
    e = expect_sqlstate(a.submit('COMMIT'), '40001', 20,
                        'COMMIT of remote work under a lost lock')
    assert res in str(e), str(e)
    check = backend(ctx, name + '-check')
    assert check.scalar('SELECT count(*) FROM remote_t WHERE id = %s',
                        [value]) == 0, \
        'postgres_fdw committed the remote write before zklock checked'
    if session:
        a.query('SELECT zk_unlock_all()')


def test_fdw_session_lock_checked_before_remote_commit(ctx):
    fdw_case(ctx, 'fdw-session', 201,
             'SELECT zk_session_lock_exclusive(%s)', True)


def test_fdw_xact_lock_checked_before_remote_commit(ctx):
    fdw_case(ctx, 'fdw-xact', 202, 'SELECT zk_lock_exclusive(%s)', False)


def test_fdw_commit_with_intact_lock(ctx):
    """The same with the lock intact commits both sides."""
    fdw_setup(ctx)
    a = backend(ctx, 'fdw-ok')
    a.query('BEGIN')
    token_of(a.submit('SELECT zk_lock_exclusive(%s)', ['holes/fdw-ok']), 15)
    a.query('INSERT INTO ft VALUES (203)')
    a.query('COMMIT')
    assert a.scalar('SELECT count(*) FROM remote_t WHERE id = 203') == 1


def fdw_deferred_setup(ctx):
    """Local tables whose deferred constraint triggers (plpgsql) write
    through postgres_fdw: td into ft (server loopback), td2 into ft2
    (server loopback2, a second connection of its own)."""
    fdw_setup(ctx)
    if getattr(ctx.shared, 'fdw_deferred_ready', False):
        return
    pg = ctx.shared.pg
    for sql in (
            "CREATE SERVER loopback2 FOREIGN DATA WRAPPER postgres_fdw "
            "OPTIONS (host '%s', port '%d', dbname '%s')"
            % (pg.socket_dir, pg.port, DB),
            'CREATE USER MAPPING FOR postgres SERVER loopback2 '
            "OPTIONS (user 'postgres')",
            'CREATE TABLE remote_t2 (id int)',
            "CREATE FOREIGN TABLE ft2 (id int) SERVER loopback2 "
            "OPTIONS (table_name 'remote_t2')",
            'CREATE TABLE td (id int)',
            'CREATE TABLE td2 (id int)',
            'CREATE FUNCTION td_to_ft() RETURNS trigger LANGUAGE plpgsql '
            'AS $$BEGIN INSERT INTO ft VALUES (NEW.id); RETURN NULL; END$$',
            'CREATE FUNCTION td2_to_ft2() RETURNS trigger LANGUAGE plpgsql '
            'AS $$BEGIN INSERT INTO ft2 VALUES (NEW.id); RETURN NULL; END$$',
            'CREATE CONSTRAINT TRIGGER td_remote AFTER INSERT ON td '
            'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW '
            'EXECUTE FUNCTION td_to_ft()',
            'CREATE CONSTRAINT TRIGGER td2_remote AFTER INSERT ON td2 '
            'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW '
            'EXECUTE FUNCTION td2_to_ft2()'):
        pg.psql(sql, dbname=DB)
    ctx.shared.fdw_deferred_ready = True


def count_where(b, table, value):
    return b.scalar('SELECT count(*) FROM %s WHERE id = %%s' % table,
                    [value])


def fdw_deferred_case(ctx, name, value, session, explicit=True):
    """A FRESH backend (postgres_fdw never used in it) locks and inserts
    into td; td's deferred trigger writes through postgres_fdw only at
    COMMIT, so postgres_fdw registers its transaction callback during the
    commit, after every statement of the client.  The lock is lost before
    the commit: it must fail with 40001 and leave the remote row absent."""
    fdw_deferred_setup(ctx)
    a = backend(ctx, name)
    res = 'holes/' + name
    if session:
        token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 15)
    if explicit:
        a.query('BEGIN')
    if not session:
        token_of(a.submit('SELECT zk_lock_exclusive(%s)', [res]), 15)
    node = node_of(a, res)
    if explicit:
        a.query('INSERT INTO td VALUES (%s)', [value])
        ctx.kz.delete(node)
        fut = a.submit('COMMIT')
    else:
        # autocommit: the INSERT's own commit fires the trigger
        ctx.kz.delete(node)
        fut = a.submit('INSERT INTO td VALUES (%s)', [value])
    e = expect_sqlstate(fut, '40001', 20,
                        'commit of a deferred remote write under a lost lock')
    assert res in str(e), str(e)
    check = backend(ctx, name + '-check')
    assert count_where(check, 'remote_t', value) == 0, \
        'postgres_fdw, first used at COMMIT, committed the remote write ' \
        'before zklock checked its lock'
    assert count_where(check, 'td', value) == 0
    if session:
        a.query('SELECT zk_unlock_all()')


def test_fdw_first_used_at_commit_xact_lock(ctx):
    fdw_deferred_case(ctx, 'fdw-defer-xact', 301, False)


def test_fdw_first_used_at_commit_session_lock(ctx):
    fdw_deferred_case(ctx, 'fdw-defer-session', 302, True)


def test_fdw_first_used_at_autocommit_session_lock(ctx):
    """The same without BEGIN/COMMIT: no COMMIT statement runs at all."""
    fdw_deferred_case(ctx, 'fdw-defer-auto', 303, True, explicit=False)


def test_fdw_two_servers_one_first_used_at_commit(ctx):
    """Server loopback2 is opened before the lock is taken (postgres_fdw's
    callback exists then) and written in the transaction; server loopback
    is first opened by the deferred trigger at COMMIT.  Lost lock: 40001,
    neither remote row present."""
    fdw_deferred_setup(ctx)
    name = 'fdw-defer-two'
    value = 304
    a = backend(ctx, name)
    res = 'holes/' + name
    a.scalar('SELECT count(*) FROM ft2')
    a.query('BEGIN')
    token_of(a.submit('SELECT zk_lock_exclusive(%s)', [res]), 15)
    a.query('INSERT INTO ft2 VALUES (%s)', [value])
    a.query('INSERT INTO td VALUES (%s)', [value])
    ctx.kz.delete(node_of(a, res))
    e = expect_sqlstate(a.submit('COMMIT'), '40001', 20,
                        'COMMIT of two servers\' writes under a lost lock')
    assert res in str(e), str(e)
    check = backend(ctx, name + '-check')
    assert count_where(check, 'remote_t2', value) == 0, \
        'the server opened before the lock committed its write'
    assert count_where(check, 'remote_t', value) == 0, \
        'the server first opened at COMMIT committed its write'


def test_fdw_first_used_at_prepare_session_lock(ctx):
    """PREPARE TRANSACTION runs the check ahead of postgres_fdw too: a
    lost session lock is reported (40001), not postgres_fdw's refusal to
    prepare (0A000), and nothing is prepared."""
    fdw_deferred_setup(ctx)
    a = backend(ctx, 'fdw-defer-prep')
    res = 'holes/fdw-defer-prep'
    token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 15)
    a.query('BEGIN')
    a.query('INSERT INTO td VALUES (305)')
    ctx.kz.delete(node_of(a, res))
    e = expect_sqlstate(a.submit("PREPARE TRANSACTION 'zkl_fdw_defer'"),
                        '40001', 20, 'PREPARE under a lost lock')
    assert res in str(e), str(e)
    check = backend(ctx, 'fdw-defer-prep-check')
    assert check.scalar("SELECT count(*) FROM pg_prepared_xacts "
                        "WHERE gid = 'zkl_fdw_defer'") == 0
    assert count_where(check, 'remote_t', 305) == 0
    a.query('SELECT zk_unlock_all()')


def test_fdw_first_used_at_commit_intact_lock(ctx):
    """With the lock intact the deferred remote writes commit, both
    servers and the local rows, in a fresh backend; and the backend goes
    on committing (with and without locks, after a rollback and after a
    failed check) without growing: nothing of a transaction's ordering
    outlives it."""
    fdw_deferred_setup(ctx)
    a = backend(ctx, 'fdw-defer-ok')
    res = 'holes/fdw-defer-ok'
    a.query('BEGIN')
    token_of(a.submit('SELECT zk_lock_exclusive(%s)', [res]), 15)
    a.query('INSERT INTO td VALUES (306)')
    a.query('INSERT INTO td2 VALUES (306)')
    a.query('COMMIT')
    check = backend(ctx, 'fdw-defer-ok-check')
    for table in ('td', 'td2', 'remote_t', 'remote_t2'):
        assert count_where(check, table, 306) == 1, table
    assert a.scalar('SELECT count(*) FROM zk_locks') == 0

    def cycle(i):
        a.query('BEGIN')
        token_of(a.submit('SELECT zk_lock_exclusive(%s)', [res]), 15)
        a.query('SAVEPOINT s')
        a.query('INSERT INTO td SELECT 1000 + g FROM generate_series(1, 3) g')
        a.query('ROLLBACK TO SAVEPOINT s')
        # ten rows: ten statements of the deferred trigger at COMMIT
        a.query('INSERT INTO td SELECT %s + g FROM generate_series(0, 9) g',
                [10000 + 10 * i])
        if i % 10 == 5:
            ctx.kz.delete(node_of(a, res))
            expect_sqlstate(a.submit('COMMIT'), '40001', 20,
                            'COMMIT under a lost lock')
        else:
            a.query('COMMIT' if i % 2 == 0 else 'ROLLBACK')

    for i in range(20):
        cycle(i)
    before = top_context_bytes(a)
    for i in range(20, 220):
        cycle(i)
    grown = top_context_bytes(a) - before
    ctx.figure('TopMemoryContext growth over 200 deferred-trigger '
               'transactions', grown, 'bytes')
    assert grown < 16 * 1024, 'grew %d bytes' % grown
    assert count_where(check, 'remote_t', 10009) == 1    # committed
    assert count_where(check, 'remote_t', 10010) == 0    # rolled back
    assert count_where(check, 'remote_t', 10050) == 0    # lock lost
    assert a.scalar('SELECT count(*) FROM zk_locks') == 0


def test_commit_guards_do_not_outlive_their_transaction(ctx):
    """A top-level SELECT's executor ends outside its portal (when the
    portal is dropped), where zklock adds a guard callback instead of
    moving its own; with a session lock held, 2,000 such statements in one
    transaction, then 2,000 each its own transaction, leave no memory
    behind: each transaction's end drops its guards (no other statement
    runs in between that would move zklock's callback and drop them)."""
    a = backend(ctx, 'holes-guards')
    res = 'holes/guards'
    token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 15)
    for _ in range(50):
        a.query('SELECT 1')
    before = top_context_bytes(a)
    a.query('BEGIN')
    for _ in range(2000):
        a.query('SELECT 1')
    a.query('COMMIT')
    for _ in range(2000):
        a.query('SELECT 1')
    grown = top_context_bytes(a) - before
    ctx.figure('TopMemoryContext growth over 4,000 top-level SELECTs '
               'under a session lock', grown, 'bytes')
    assert grown < 16 * 1024, 'grew %d bytes' % grown
    assert a.scalar('SELECT zk_unlock(%s)', [res]) is True


def test_long_transaction_under_a_session_lock_keeps_memory_flat(ctx):
    """100,000 top-level SELECTs in one transaction under a session lock
    keep TopMemoryContext flat while the transaction runs: 1.5 added a
    commit guard (about 61 bytes) for each, freed only at its end (6 MB
    here).  zklock now comes first again at the end of each statement's
    run, inside its portal, and adds a guard at the executor's end only if
    a statement began since (a deferred trigger's at COMMIT)."""
    conn = ctx.shared.pg.connect(dbname=DB, application_name='holes-flat')
    cur = conn.cursor()
    res = 'holes/flat'

    def top():
        cur.execute("SELECT sum(used_bytes) FROM pg_backend_memory_contexts "
                    "WHERE name = 'TopMemoryContext'")
        return cur.fetchone()[0]

    try:
        cur.execute('SELECT zk_session_lock_exclusive(%s)', [res])
        cur.execute('BEGIN')
        for _ in range(1000):
            cur.execute('SELECT 1')
        before = top()
        for _ in range(99000):
            cur.execute('SELECT 1')
        grown = top() - before
        cur.execute('COMMIT')
        ctx.figure('TopMemoryContext growth over 99,000 top-level SELECTs '
                   'in one transaction under a session lock', grown, 'bytes')
        assert grown < 64 * 1024, 'grew %d bytes' % grown
        cur.execute('SELECT zk_unlock(%s)', [res])
        assert cur.fetchone()[0] is True
    finally:
        conn.close()


# ---------------------------------------------------------------------------
# a look at zklock's state commits nothing: what the transaction did, not
# what its plans show (issue 37)
# ---------------------------------------------------------------------------

CHANNEL = 'zkl_holes_chan'


def raw_conn(ctx):
    pg = ctx.shared.pg
    return rawpq.RawConn('host=%s port=%s dbname=%s user=postgres '
                         'application_name=holes-raw'
                         % (pg.host, pg.port, DB))


def notifies_before_marker(ctx, listener, marker):
    """The payloads on CHANNEL that the listener receives before `marker`,
    which another backend sends now: notifications are delivered in commit
    order, so one committed before the marker has arrived by then."""
    ctx.shared.pg.psql("SELECT pg_notify('%s', '%s')" % (CHANNEL, marker),
                       dbname=DB)
    seen = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        select.select([listener], [], [], 0.5)
        listener.poll()
        while listener.notifies:
            n = listener.notifies.pop(0)
            if n.payload == marker:
                return seen
            seen.append(n.payload)
    raise AssertionError('marker %r never arrived (seen %r)'
                         % (marker, seen))


def test_look_that_acted_does_not_commit_under_lost_lock(ctx):
    """A transaction that only looks at zklock's state (zk_locks, ...)
    commits under a lost session lock, so a DBA can look at the loss; one
    that did anything else is refused, even where its plans show only a
    look.  Three routes to pg_notify (and set_config) that the final plan
    does not show, each with the session lock intact (the notification
    arrives: the route really notifies) and then lost (40001, no
    notification, the setting not kept):
      a. an autocommit look filtered on a PL/pgSQL function labelled
         IMMUTABLE, folded away at plan time;
      b. BEGIN, a look, then a fast-path call (libpq PQfn) of pg_notify,
         COMMIT;
      c. an autocommit look whose parameter is of a domain whose CHECK
         notifies: it runs at Bind, before any plan.
    1.5 committed all three (the notification was received)."""
    admin = backend(ctx, 'holes-look-admin')
    admin.query("CREATE OR REPLACE FUNCTION zkl_holes_imm(p text) "
                "RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ "
                "DECLARE d text; BEGIN "
                "d := pg_notify('%s', p); "
                "d := set_config('zkl_holes.flag', p, false); "
                "RETURN 1; END $$" % CHANNEL)
    admin.query("CREATE OR REPLACE FUNCTION zkl_holes_chk(v int) "
                "RETURNS bool LANGUAGE plpgsql AS $$ "
                "DECLARE d text; BEGIN "
                "d := pg_notify('%s', 'c' || v); RETURN true; END $$"
                % CHANNEL)
    admin.query('DROP DOMAIN IF EXISTS zkl_holes_d')
    admin.query('CREATE DOMAIN zkl_holes_d AS int '
                'CHECK (zkl_holes_chk(VALUE))')
    notify_oid = int(admin.scalar(
        "SELECT 'pg_notify(text,text)'::regprocedure::oid"))
    domain_oid = int(admin.scalar("SELECT 'zkl_holes_d'::regtype::oid"))
    listener = ctx.shared.pg.connect(dbname=DB)
    listener.cursor().execute('LISTEN %s' % CHANNEL)

    raw = raw_conn(ctx)
    res = 'holes/look-acted'

    def route_a(tag):
        return raw.execute("SELECT resource FROM zk_locks "
                           "WHERE zkl_holes_imm('a%s') = 1" % tag)

    def route_b(tag):
        raw.execute('BEGIN')
        raw.execute('SELECT * FROM zk_locks')
        raw.fn(notify_oid, [CHANNEL, 'b%s' % tag])
        return raw.execute('COMMIT')

    def route_c(tag):
        return raw.execute_params(
            'SELECT resource FROM zk_locks WHERE $1 IS NOT NULL',
            [tag], [domain_oid])

    def flag():
        raw.execute('BEGIN')
        [(value,)] = raw.execute(
            "SELECT coalesce(current_setting('zkl_holes.flag', true), '')")
        raw.execute('ROLLBACK')
        return value

    try:
        raw.execute("SELECT zk_session_lock_exclusive('%s')" % res)
        # with the lock intact every route commits its notification
        route_a('1')
        route_b('1')
        route_c('1')
        assert notifies_before_marker(ctx, listener, 'm1') == \
            ['a1', 'b1', 'c1']
        assert flag() == 'a1'

        [(node,)] = raw.execute('SELECT node FROM zk_locks')
        ctx.kz.delete(node)
        # the plain look still commits: the DBA can see the loss
        assert raw.execute("SELECT state FROM zk_locks") == [('lost',)]
        outcomes = {}
        for tag, route in (('a', route_a), ('b', route_b), ('c', route_c)):
            try:
                route('2')
                outcomes[tag] = 'committed'
            except rawpq.PqError as e:
                outcomes[tag] = e.pgcode
            raw.execute('ROLLBACK')     # (a WARNING if none is open)
        received = notifies_before_marker(ctx, listener, 'm2')
        assert outcomes == {'a': '40001', 'b': '40001', 'c': '40001'} \
            and received == [], \
            'under the lost lock: %r, notifications received %r' % (
                outcomes, received)
        assert flag() == 'a1', 'set_config kept under the lost lock'
        raw.execute('SELECT zk_unlock_all()')
    finally:
        raw.close()
        listener.close()
        admin.query('DROP DOMAIN zkl_holes_d')
        admin.query('DROP FUNCTION zkl_holes_chk(int), zkl_holes_imm(text)')


# ---------------------------------------------------------------------------
# connection pools: DISCARD ALL
# ---------------------------------------------------------------------------

def test_discard_all_releases_session_locks(ctx):
    """DISCARD ALL deletes every session-level node (both modes, re-entrant
    counts, a lost one acknowledged); another backend gets the locks."""
    a = backend(ctx, 'holes-discard')
    token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', ['holes/d1']), 15)
    token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', ['holes/d1']), 15)
    token_of(a.submit('SELECT zk_session_lock_shared(%s)', ['holes/d2']), 15)
    token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', ['holes/d3']), 15)
    nodes = [node_of(a, 'holes/d1'), node_of(a, 'holes/d2', 'shared'),
             node_of(a, 'holes/d3')]
    ctx.kz.delete(nodes[2])              # lost: DISCARD ALL acknowledges it
    a.query('DISCARD ALL')
    assert a.scalar('SELECT count(*) FROM zk_locks') == 0
    for n in nodes[:2]:
        wait_gone(ctx, n, 'a discarded session lock')
    b = backend(ctx, 'holes-discard-2')
    assert b.scalar('SELECT zk_try_session_lock_exclusive(%s)',
                    ['holes/d1']) is True
    assert b.scalar('SELECT zk_try_session_lock_exclusive(%s)',
                    ['holes/d2']) is True
    b.query('SELECT zk_unlock_all()')
    # a commit after the DISCARD no longer fails for the lost lock
    a.query('BEGIN')
    a.query('INSERT INTO t VALUES (301)')
    a.query('COMMIT')


# ---------------------------------------------------------------------------
# never hang, never two holders: shared and exclusive in one backend
# ---------------------------------------------------------------------------

def test_shared_while_exclusive_granted_at_once(ctx):
    """A holds exclusive (session), B queues exclusive, A asks shared: it
    is granted at once on A's exclusive node, no new node; B waits while A
    holds either mode and gets the lock when both are gone."""
    res = 'holes/sx'
    a = backend(ctx, 'holes-sx-a')
    b = backend(ctx, 'holes-sx-b')
    tok = token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 15)
    fb = b.submit(LOCK_X, [res, '60 seconds'])
    ctx.zi.wait_contenders(res, 2)
    t0 = time.monotonic()
    a.query('BEGIN')
    tok_s = token_of(a.submit(LOCK_S, [res, '30 seconds']), 10,
                     'shared under exclusive')
    assert time.monotonic() - t0 < 5, 'shared under exclusive waited'
    assert tok_s == tok, 'shared rides on the exclusive node: same token'
    assert len(ctx.zi.contenders(res)) == 2, 'a second node was created'
    # the exclusive goes first: the node stays for the shared hold
    assert a.scalar('SELECT zk_unlock(%s)', [res]) is True
    still_waiting([fb], what='foreign exclusive waiter')
    a.query('COMMIT')                   # the last hold goes
    token_of(fb, 15, 'foreign exclusive after both holds went')
    b.query('SELECT 1')


def test_exclusive_back_on_handed_over_node(ctx):
    """After the exclusive hold went and the shared one kept the exclusive
    node, asking exclusive again is granted at once on that node."""
    res = 'holes/sx2'
    a = backend(ctx, 'holes-sx2-a')
    b = backend(ctx, 'holes-sx2-b')
    tok = token_of(a.submit('SELECT zk_session_lock_exclusive(%s)', [res]), 15)
    token_of(a.submit('SELECT zk_session_lock_shared(%s)', [res]), 10)
    assert a.scalar('SELECT zk_unlock(%s)', [res]) is True
    fb = b.submit(LOCK_X, [res, '60 seconds'])
    ctx.zi.wait_contenders(res, 2)
    again = token_of(a.submit('SELECT zk_session_lock_exclusive(%s, %s)',
                              [res, '10 seconds']), 8, 'exclusive again')
    assert again == tok
    a.query('SELECT zk_unlock_all()')
    token_of(fb, 15, 'foreign waiter after zk_unlock_all')


def test_exclusive_while_shared_with_waiter_between_is_deadlock(ctx):
    """A holds shared (session), B queues exclusive behind it, A asks
    exclusive with no timeout: 40P01 at once (not a wait that never ends),
    A's new node is deleted, A still holds shared, and B gets the lock
    once A lets go."""
    res = 'holes/xs'
    a = backend(ctx, 'holes-xs-a')
    b = backend(ctx, 'holes-xs-b')
    token_of(a.submit('SELECT zk_session_lock_shared(%s)', [res]), 15)
    shared_node = node_of(a, res, 'shared')
    fb = b.submit(LOCK_X, [res, '60 seconds'])
    ctx.zi.wait_contenders(res, 2)
    t0 = time.monotonic()
    e = expect_sqlstate(a.submit('SELECT zk_lock_exclusive(%s)', [res]),
                        '40P01', 10, 'exclusive over own shared')
    assert time.monotonic() - t0 < 5
    assert 'deadlock detected' in str(e), str(e)
    assert e.diag.message_detail and 'shared' in e.diag.message_detail
    harness.wait_until(
        lambda: [c.path for c in ctx.zi.contenders(res)][:1] == [shared_node]
        and len(ctx.zi.contenders(res)) == 2, 10,
        "A's shared node and B's only (A's exclusive node deleted)")
    still_waiting([fb], what='foreign exclusive waiter')
    assert a.scalar('SELECT zk_unlock_shared(%s)', [res]) is True
    token_of(fb, 15, 'foreign exclusive after A let go')


# ---------------------------------------------------------------------------
# messages and SQLSTATEs
# ---------------------------------------------------------------------------

def test_lost_shared_hint_and_quoting(ctx):
    """The HINT for a lost shared session lock names zk_unlock_shared and
    the resource as an SQL literal (quotes doubled)."""
    res = "holes/it's"
    a = backend(ctx, 'holes-hint')
    token_of(a.submit('SELECT zk_session_lock_shared(%s)', [res]), 15)
    ctx.kz.delete(node_of(a, res, 'shared'))
    a.query('BEGIN')
    e = expect_sqlstate(a.submit('COMMIT'), '40001', 20, 'COMMIT')
    hint = e.diag.message_hint or ''
    assert "zk_unlock_shared('holes/it''s')" in hint, hint
    assert a.scalar('SELECT zk_unlock_shared(%s)', [res]) is True


def test_unlock_not_owned_warning_is_class_01(ctx):
    """zk_unlock of a lock not held warns with SQLSTATE 01000 (a warning's
    class), shown by psql with VERBOSITY verbose."""
    pg = ctx.shared.pg
    r = subprocess.run(
        harness.as_pg_user([harness.PG_BIN + '/psql', '-X', '-h', pg.socket_dir,
                            '-p', str(pg.port), '-d', DB, '-v',
                            'VERBOSITY=verbose', '-c',
                            "SELECT zk_unlock('holes/not-mine')"]),
        capture_output=True, text=True, timeout=30)
    assert "WARNING:  01000: you don't own" in r.stderr, r.stderr


def test_node_deleted_while_waiting_is_55000(ctx):
    """Another client deletes a waiter's node: when the waiter next lists
    the queue, it fails with 55000 (object not in prerequisite state), not
    55P03, which means "try again".  Two foreign contenders ahead, so the
    waiter lists again when the one it watches goes."""
    res = 'holes/vanish'
    parent = ctx.zi.parent_path(res)
    ahead = [ctx.kz.create(parent + '/_c_foreign%d-__WRIT__' % i,
                           ephemeral=True, sequence=True, makepath=True)
             for i in range(2)]
    w = backend(ctx, 'holes-vanish-w')
    fw = w.submit(LOCK_X, [res, '60 seconds'])
    cs = ctx.zi.wait_contenders(res, 3)
    ctx.kz.delete(cs[2].path)           # the waiter's own node
    ctx.kz.delete(ahead[1])             # the node it watches
    e = expect_sqlstate(fw, '55000', 15, 'waiter whose node was deleted')
    assert 'vanished' in str(e), str(e)
    ctx.kz.delete(ahead[0])


# ---------------------------------------------------------------------------
# resources: memory per re-entrant call, huge timeouts, defaults
# ---------------------------------------------------------------------------

def top_context_bytes(b):
    return b.scalar("SELECT sum(used_bytes) FROM pg_backend_memory_contexts "
                    "WHERE name = 'TopMemoryContext'")


def test_reentrant_calls_cost_no_memory(ctx):
    """200,000 re-entrant transaction-level calls in one transaction keep
    one count, not one array entry each; ROLLBACK TO SAVEPOINT drops
    exactly the holds taken after the savepoint."""
    res = 'holes/reentrant'
    a = backend(ctx, 'holes-reentrant')
    a.query('BEGIN')
    token_of(a.submit('SELECT zk_lock_exclusive(%s)', [res]), 15)
    before = top_context_bytes(a)
    a.query('SELECT count(zk_lock_exclusive(%s)) FROM generate_series(1, 200000)',
            [res], timeout=60)
    grown = top_context_bytes(a) - before
    ctx.figure('TopMemoryContext growth over 200,000 re-entrant calls',
               grown, 'bytes')
    assert grown < 64 * 1024, 'grew %d bytes' % grown
    assert a.scalar('SELECT count FROM zk_locks WHERE resource = %s',
                    [res]) == 200001
    a.query('SAVEPOINT s')
    a.query('SELECT count(zk_lock_exclusive(%s)) FROM generate_series(1, 10)',
            [res])
    a.query('ROLLBACK TO SAVEPOINT s')
    assert a.scalar('SELECT count FROM zk_locks WHERE resource = %s',
                    [res]) == 200001
    a.query('RELEASE SAVEPOINT s')
    a.query('COMMIT')
    assert a.scalar('SELECT count(*) FROM zk_locks') == 0


def test_huge_timeout_does_not_expire_at_once(ctx):
    """A timeout so large that now + timeout overflows a timestamp waits
    like no timeout (it used to expire at once with 55P03)."""
    res = 'holes/huge-timeout'
    a = backend(ctx, 'holes-huge')
    a.query('BEGIN')
    token_of(a.submit(LOCK_X, [res, '106751991 days']), 15,
             'lock with a huge timeout')
    holder_node = node_of(a, res)
    b = backend(ctx, 'holes-huge-2')
    fb = b.submit(LOCK_X, [res, '106751000 days'])
    ctx.zi.wait_contenders(res, 2)
    still_waiting([fb], what='waiter with a huge timeout')
    a.query('COMMIT')
    wait_gone(ctx, holder_node, 'the released node')
    token_of(fb, 15, 'waiter with a huge timeout')


def test_settings_defaults(ctx):
    """Every zklock setting's built-in default (pg_settings.boot_val), and
    that zklock.auth is gone."""
    b = backend(ctx, 'holes-defaults')
    b.query("LOAD 'zklock'")
    got = dict(b.query("SELECT name, boot_val FROM pg_settings "
                       "WHERE name LIKE 'zklock.%'"))
    assert got == {
        'zklock.auth_file': '',
        'zklock.connect_timeout': '5000',
        'zklock.follow_ensemble': 'auto',
        'zklock.hosts': '127.0.0.1:2181',
        'zklock.log_lock_waits': 'on',
        'zklock.protocol': 'curator-rw',
        'zklock.reply_nudge_delay': '20',
        'zklock.root': '/zklock',
        'zklock.session_locks': 'on',
        'zklock.cancel_on_loss': 'on',
        'zklock.on_revoke': 'cancel',
        'zklock.session_timeout': '10000',
        'zklock.track_stats': 'on',
        'zklock.verify_at_commit': 'on',
        'zklock.zookeeper_log_level': 'error',
    }, got
