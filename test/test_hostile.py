"""
Hostile input: resource names nobody should use, bad data other clients
leave in ZooKeeper, and non-superusers trying to point zklock elsewhere.

  * Hostile resource names (control characters, '/', '.', '%', 600-byte
    strings, every Unicode plane, raw non-UTF-8 bytes in a SQL_ASCII
    database) either lock a node under zklock.root, at the path the SPEC's
    encoding gives, or fail with 22023; none crashes the backend, and the
    whole ZooKeeper tree is walked with kazoo before and after to prove
    that no node was created outside the root.
  * Foreign and malformed children of a lock parent (names that are no
    contender, huge and binary data, children with children, thousands of
    them) are ignored; contender-looking nodes of another client
    (persistent, binary owner data, with children of their own, sequence
    numbers that wrapped) are waited for; zk_lock_queue shows every
    owner safely (binary as \\x hex).  A lock parent that is an ephemeral
    node (it cannot have children) gives an ERROR, not a hang.
  * A non-superuser cannot make zklock.hosts, zklock.root,
    zklock.session_timeout or zklock.auth_file stick with ALTER ROLE ... SET or
    ALTER DATABASE ... SET (42501), whether or not the library is loaded.

The property-based counterpart for the pure code is the fuzz corpus
(test/fuzz, replayed by test/unit/test_corpus).

In short, this module checks: hostile resource names through SQL, foreign
and malformed children under a lock parent, settings that only a superuser
may change.
"""

import contextlib
import random
import time

import psycopg2
from kazoo.exceptions import NoNodeError

import harness
from harness import wait_until
from test_multisession import LONG, expect_sqlstate, still_waiting, token_of

TIMEOUT = 300                   # seconds per test (a pytest-timeout bound)

TRY_X = 'SELECT zk_try_lock_exclusive(%s)'
TRY_S = 'SELECT zk_try_lock_shared(%s)'
LOCK_X = 'SELECT zk_lock_exclusive(%s, %s::interval)'
MAX_BYTES = 512
SEED = 20240507                 # fixed: every run tries the same names


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def encode_bytes(raw):
    """The SPEC's encoding of a resource name given as bytes (the harness'
    encode_resource takes str): unsafe bytes and '.'/'..' levels as %XX."""
    levels = []
    for level in raw.split(b'/'):
        whole = level in (b'.', b'..')
        levels.append(''.join(
            chr(c) if not whole and (chr(c).isascii() and chr(c).isalnum()
                                     or chr(c) in '._-')
            else '%%%02X' % c for c in level))
    return '/'.join(levels)


def valid_name(raw):
    """Does the SPEC accept this resource name (bytes)?"""
    return 0 < len(raw) <= MAX_BYTES and all(raw.split(b'/'))


def whole_tree(ctx):
    """Every znode path in the ensemble, '/zookeeper' included."""
    return set(ctx.zi.walk('/'))


def assert_nothing_outside_root(ctx, before):
    root = ctx.root.rstrip('/')
    outside = sorted(p for p in whole_tree(ctx) - before
                     if p != root and not p.startswith(root + '/'))
    assert not outside, 'nodes created outside %s: %r' % (root, outside[:10])


def assert_no_crash(ctx, backends=()):
    """The backends still answer, with their own pid, and the server log
    shows no crashed backend and no sanitizer report."""
    for b in backends:
        assert b.scalar('SELECT pg_backend_pid()') == b.pid, \
            '%r lost its connection' % b
    log = ctx.pg.log_since(ctx.log_offset)
    for bad in ('terminated by signal', 'exited with exit code',
                'AddressSanitizer', 'runtime error:',
                'terminating any other active server processes'):
        assert bad not in log, 'server log: %r\n%s' % (
            bad, '\n'.join(l for l in log.splitlines() if bad in l)[:2000])


def no_leftovers(ctx, timeout=15):
    """Every contender zklock created is gone again (deletes are sent
    asynchronously, so wait a little)."""
    last = []

    def check():
        nonlocal last
        last = [(p, s) for p, s in ctx.zi.leftovers() if s]   # ephemeral ones
        return not last
    try:
        wait_until(check, timeout, 'zklock nodes to be deleted')
    except TimeoutError:
        raise AssertionError('ephemeral nodes left behind: %r' % last[:10]) \
            from None


def random_char(rng):
    pick = rng.random()
    if pick < 0.15:
        return rng.choice('/./.%')
    if pick < 0.30:
        return chr(rng.choice(list(range(1, 32)) + [127]))   # no NUL in text
    if pick < 0.40:
        return chr(rng.randrange(0x80, 0xA0))              # C1 controls
    if pick < 0.55:
        return rng.choice('abcXYZ019_-~ *?:@+\\\'"`$&;|<>{}[]#!')
    # any plane, 0..16, no surrogates
    plane = rng.randrange(17)
    while True:
        cp = plane * 0x10000 + rng.randrange(0x10000)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def hostile_names(rng, count):
    """Fixed awkward names, then `count` random ones."""
    names = [
        '.', '..', '...', './a', '../a', 'a/..', 'a/../b', '../../zookeeper',
        '../..', './.', 'a/./b', '.../....', '/', '//', '/a', 'a/', 'a//b',
        '%', '%%', '%2E%2E', '%2F', '..%2F..', '%00', '100%', 'a b', ' ',
        '\t', '\n', '\r\n', '\x1b[31mred', '\x7f', '\x01\x02\x03',
        'zookeeper', 'zookeeper/quota', '.zklock', '-', '_', '~', '*',
        '\\..\\..', 'a\\b', 'caf\u00e9', '\u00e9' * 256, '\u00e9' * 256 + 'a',
        '\u200b', '\u202e\u202d', '\ufeff', '\uffff', '\ufffe', '\u2028',
        '\U0001f600' * 128, '\U0001f600' * 129, '\U0010ffff',
        '\U000e0001', '\U000f0000', 'a' * 512, 'a' * 513, 'a' * 600,
        '%' * 512, '.' * 512, '/'.join(['a'] * 40), './' * 100 + 'x',
        ''.join(chr(p * 0x10000 + 0x100) for p in range(17)),
    ]
    for _ in range(count):
        n = rng.choice([1, 2, 3, 5, 8, 13, 21, 40]) if rng.random() < 0.9 \
            else rng.randrange(100, 260)
        names.append(''.join(random_char(rng) for _ in range(n)))
    seen = set()
    return [n for n in names if not (n in seen or seen.add(n))]


def lock_and_check(ctx, b, name, raw, scope):
    """Lock one hostile name (transaction or session scope); check where
    the node is, then release.  Returns 'locked' or 'refused'."""
    parent_rel = encode_bytes(raw)
    expect_valid = valid_name(raw)
    if scope == 'transaction':
        b.query('BEGIN')
    try:
        fn = 'zk_try_lock_exclusive' if scope == 'transaction' \
            else 'zk_try_session_lock_exclusive'
        got = b.scalar('SELECT %s(%%s)' % fn, [name])
    except psycopg2.Error as e:
        if scope == 'transaction':
            b.query('ROLLBACK')
        assert e.pgcode == '22023', \
            '%r: SQLSTATE %s (%s), expected 22023' % (name, e.pgcode, e)
        assert not expect_valid, '%r is a valid name but was refused: %s' % (
            name, e)
        return 'refused'
    try:
        assert expect_valid, '%r should be refused (22023) but locked' % name
        assert got is True, '%r: try lock returned %r' % (name, got)
        [(node,)] = b.query('SELECT node FROM zk_locks WHERE mode = %s',
                            ['exclusive'])
        parent = ctx.root.rstrip('/') + '/' + parent_rel
        assert node.rsplit('/', 1)[0] == parent, \
            '%r: node %s is not under %s' % (name, node, parent)
        assert node.startswith(ctx.root.rstrip('/') + '/'), node
        stat = ctx.kz.exists(node)
        assert stat is not None and stat.ephemeralOwner, \
            '%r: %s does not exist as an ephemeral node' % (name, node)
        if scope == 'session':
            q = b.query('SELECT count(*), bool_and(holding) '
                        'FROM zk_lock_queue(%s)', [name])
            assert q == [(1, True)], '%r: zk_lock_queue says %r' % (name, q)
    finally:
        if scope == 'transaction':
            b.query('ROLLBACK')
        else:
            assert b.scalar('SELECT zk_unlock(%s)', [name]) is True, name
    return 'locked'


# ---------------------------------------------------------------------------
# hostile resource names
# ---------------------------------------------------------------------------

def test_hostile_names_stay_under_root(ctx):
    """Hundreds of hostile names (fixed and seeded random): each locks the
    node the SPEC's encoding names, under zklock.root, or is refused with
    22023; the backend survives all of them and the whole ZooKeeper tree
    gains nothing outside the root."""
    rng = random.Random(SEED)
    names = hostile_names(rng, 300)
    before = whole_tree(ctx)
    b = ctx.backend('hostile-names')
    outcome = {'locked': 0, 'refused': 0}
    for i, name in enumerate(names):
        raw = name.encode('utf-8')
        scope = 'session' if i % 3 == 0 else 'transaction'
        outcome[lock_and_check(ctx, b, name, raw, scope)] += 1

    # the other entry points take the same names the same way
    for name in names[:60]:
        for sql in ('SELECT count(*) FROM zk_lock_queue(%s)',
                    'SELECT zk_try_lock_shared(%s)'):
            try:
                b.scalar(sql, [name])
                assert valid_name(name.encode()), (sql, name)
            except psycopg2.Error as e:
                assert e.pgcode == '22023' and not valid_name(name.encode()), \
                    '%s with %r: %s %s' % (sql, name, e.pgcode, e)
    expect_sqlstate(b.submit(TRY_X, [None]), '22004', 10, 'NULL name')

    ctx.log('%d names: %d locked, %d refused'
            % (len(names), outcome['locked'], outcome['refused']))
    assert outcome['locked'] > 200 and outcome['refused'] > 10, outcome
    assert b.query('SELECT count(*) FROM zk_locks') == [(0,)]
    no_leftovers(ctx)
    assert_nothing_outside_root(ctx, before)
    assert_no_crash(ctx, [b])


def test_raw_bytes_in_sql_ascii_database(ctx):
    """In a SQL_ASCII database text can hold any byte but NUL, invalid
    UTF-8 included: such names are percent-encoded like any other (no
    22021 from zklock: it never interprets the bytes)."""
    db = 'zklock_hostile_ascii'
    ctx.pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
    ctx.pg.psql("CREATE DATABASE %s ENCODING 'SQL_ASCII' LC_COLLATE 'C' "
                "LC_CTYPE 'C' TEMPLATE template0" % db)
    try:
        ctx.pg.psql("ALTER DATABASE %s SET zklock.connect_timeout = '%ds'"
                    % (db, ctx.connect_timeout))
        ctx.pg.psql('CREATE EXTENSION zklock', dbname=db)
        rng = random.Random(SEED + 1)
        samples = [b'\xff', b'\xc3\x28', b'\xed\xa0\x80', b'\xf4\x90\x80\x80',
                   b'\x80/\x81', b'\xc0\xaf..', b'..\xff/..', b'/\xff',
                   b'\xfe' * 600, bytes(range(1, 256)), bytes(range(128, 256))]
        for _ in range(120):
            n = rng.choice([1, 2, 4, 9, 30, 200])
            samples.append(bytes(
                rng.choice(b'/.%') if rng.random() < 0.1
                else rng.randrange(1, 256) for _ in range(n)))
        before = whole_tree(ctx)
        b = ctx.backend('hostile-ascii', dbname=db)
        locked = 0
        for raw in samples:
            b.query('BEGIN')
            try:
                got = b.scalar("SELECT zk_try_lock_exclusive("
                               "convert_from(%s::bytea, 'SQL_ASCII'))",
                               [psycopg2.Binary(raw)])
            except psycopg2.Error as e:
                b.query('ROLLBACK')
                assert e.pgcode == '22023' and not valid_name(raw), \
                    '%r: SQLSTATE %s' % (raw, e.pgcode)
                continue
            assert valid_name(raw) and got is True, (raw, got)
            [(node,)] = b.query('SELECT node FROM zk_locks')
            assert node.rsplit('/', 1)[0] == \
                ctx.root.rstrip('/') + '/' + encode_bytes(raw), (raw, node)
            assert ctx.kz.exists(node) is not None, node
            b.query('ROLLBACK')
            locked += 1
        assert locked > 80, locked
        no_leftovers(ctx)
        assert_nothing_outside_root(ctx, before)
        assert_no_crash(ctx, [b])
        b.close()
    finally:
        ctx.pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)


# ---------------------------------------------------------------------------
# bad data in ZooKeeper
# ---------------------------------------------------------------------------

BINARY = b'\x00\xff\xfe\xc3\x28owner\x00\x80\n\x1b[2J'


@contextlib.contextmanager
def foreign_parent(ctx, res):
    """The lock parent of `res`, created by kazoo as a persistent node (as
    another client would), empty; deleted with everything below it
    afterwards, whatever happened (later test modules check that nothing
    is left behind)."""
    parent = ctx.zi.parent_path(res)
    if ctx.kz.exists(parent):
        ctx.kz.delete(parent, recursive=True)
    ctx.kz.ensure_path(parent)
    try:
        yield parent
    finally:
        try:
            ctx.kz.delete(parent, recursive=True)
        except NoNodeError:
            pass


def queue_rows(b, res):
    return b.query('SELECT position, mode, node, owner, holding, session_id '
                   'FROM zk_lock_queue(%s) ORDER BY position', [res])


def test_foreign_children_are_ignored(ctx):
    """Children that are no contender (other names, 1 MB of data, binary
    data, a child with children, look-alikes, a thousand of them) do not
    stop a lock, do not show in zk_lock_queue and are left alone."""
    res = 'hostile-data/foreign'
    with foreign_parent(ctx, res) as parent:
        kz = ctx.kz
        junk = {
            'foo': b'x' * 1000000,
            'binary': BINARY,
            'has-children': b'',
            'leader-0000000000': b'',
            'lock-123': b'',
            '__WRIT__00000000x1': b'',
            'lock-0000000000x': b'',
            'lock-00000000001': b'',            # eleven digits
            '__READ__--000000001': b'',
            '_c_0f8fad5b-d9cb-469f-a165-70867728950e-__WRIT__': b'',
            'a__READ__b0000000001': b'',
            '__write__0000000001': b'',
            ' lock-0000000001 ': b'',
            'x' * 4000: b'long name',
        }
        for name, data in junk.items():
            kz.create(parent + '/' + name, data)
        kz.create(parent + '/has-children/a', b'')
        kz.create(parent + '/has-children/lock-0000000000', BINARY)  # a grandchild
        for i in range(1000):
            kz.create_async(parent + '/filler-%04d' % i, b'')
        wait_until(lambda: len(kz.get_children(parent)) == len(junk) + 1000, 30,
                   'the filler children')

        b = ctx.backend('hostile-foreign')
        viewer = ctx.backend('hostile-viewer')
        for try_sql, mode in ((TRY_X, 'exclusive'), (TRY_S, 'shared')):
            b.query('BEGIN')
            t0 = time.monotonic()
            assert b.scalar(try_sql, [res]) is True, \
                '%s lock not granted among non-contenders' % mode
            elapsed = time.monotonic() - t0
            rows = queue_rows(viewer, res)
            assert len(rows) == 1 and rows[0][1] == mode and rows[0][4] is True, \
                'zk_lock_queue shows non-contenders: %r' % ([r[:3] for r in rows],)
            assert rows[0][3].startswith('zklock '), rows[0][3][:200]
            b.query('COMMIT')
            ctx.log('%s try among %d children: %.3f s'
                    % (mode, len(junk) + 1000, elapsed))
        ctx.zi.wait_contenders(res, 0)

        # nothing foreign was touched
        for name, data in junk.items():
            got, _ = kz.get(parent + '/' + name)
            assert got == data, '%s changed' % name[:40]
        assert kz.exists(parent + '/has-children/lock-0000000000')
        assert_no_crash(ctx, [b, viewer])


def test_foreign_contenders_are_waited_for(ctx):
    """Persistent contender-looking nodes of another client, one with
    binary owner data and a child of its own, are in the queue: zklock
    waits for them, zk_lock_queue shows them (binary owner as \\x hex,
    session 0x0), and the lock is granted once they are deleted."""
    res = 'hostile-data/contenders'
    with foreign_parent(ctx, res) as parent:
        kz = ctx.kz
        ex = parent + '/3f2a__lock__0000000000'          # kazoo-style exclusive
        sh = parent + '/_c_ab-__READ__0000000001'         # curator-style shared
        kz.create(ex, BINARY)
        kz.create(ex + '/child', b'a child of a contender')
        kz.create(sh, 'billing-service-7 \u2603'.encode())

        a = ctx.backend('hostile-waiter')
        viewer = ctx.backend('hostile-viewer2')
        assert a.scalar(TRY_X, [res]) is False, 'exclusive granted over a ' \
            'foreign exclusive contender'
        assert a.scalar(TRY_S, [res]) is False, 'shared granted behind a ' \
            'foreign exclusive contender'
        no_leftovers(ctx)

        a.query('BEGIN')
        fut = a.submit(LOCK_X, [res, LONG])
        ctx.wait_state(a)
        ctx.zi.wait_contenders(res, 3)
        rows = queue_rows(viewer, res)
        assert [(r[0], r[1], r[2], r[4]) for r in rows[:2]] == [
            (1, 'exclusive', '3f2a__lock__0000000000', True),
            (2, 'shared', '_c_ab-__READ__0000000001', False)], rows
        assert rows[0][3] == '\\x' + BINARY.hex(), \
            'binary owner shown as %r' % rows[0][3]
        assert rows[1][3] == 'billing-service-7 \u2603', rows[1][3]
        assert rows[0][5] == '0x0' and rows[1][5] == '0x0', rows
        assert rows[2][1] == 'exclusive' and rows[2][4] is False and \
            rows[2][3].startswith('zklock '), rows[2]

        kz.delete(ex, recursive=True)          # the shared one still blocks
        still_waiting([fut], settle=1.0, what='waiter behind a foreign shared')
        kz.delete(sh)
        token_of(fut, 15, 'lock after the foreign contenders left')
        a.query('COMMIT')
        ctx.zi.wait_contenders(res, 0)
        assert_no_crash(ctx, [a, viewer])


def test_foreign_sequence_numbers_wrap(ctx):
    """Foreign contenders are ordered as 32-bit serial numbers: '-1'
    (0xFFFFFFFF, just before 0) precedes zklock's node, 1500000000 and
    -2147483648 (ahead of it by less than 2^31) follow it."""
    res = 'hostile-data/wrap'
    with foreign_parent(ctx, res) as parent:
        kz = ctx.kz
        b = ctx.backend('hostile-wrap')
        for name, blocks in (('__WRIT__-000000001', True),
                             ('__WRIT__1500000000', False),
                             ('__WRIT__-2147483648', False),
                             ('lock-4294967295', True)):
            kz.create(parent + '/' + name, b'foreign')
            got = b.scalar(TRY_X, [res])
            assert got is (not blocks), '%s: try returned %r' % (name, got)
            kz.delete(parent + '/' + name)
        no_leftovers(ctx)
        assert_no_crash(ctx, [b])


def test_huge_foreign_owner_data(ctx):
    """Two shared foreign contenders with 1 MB of data each, one UTF-8
    and one binary: a shared lock is granted beside them, an exclusive one
    is not, and zk_lock_queue shows both owners cut to their first 1024
    bytes (text on a character boundary; hex), with "..." after."""
    res = 'hostile-data/huge'
    with foreign_parent(ctx, res) as parent:
        kz = ctx.kz
        text = '\u00e9' * 500000                      # 1,000,000 bytes of UTF-8
        blob = bytes(range(256)) * 3900                # 998,400 bytes, NULs too
        kz.create(parent + '/t__rlock__0000000000', text.encode())
        kz.create(parent + '/b__READ__0000000001', blob)
        b = ctx.backend('hostile-huge')
        b.query('BEGIN')
        assert b.scalar(TRY_S, [res]) is True
        assert b.scalar(TRY_X, [res]) is False
        rows = b.query('SELECT position, owner, holding FROM zk_lock_queue(%s) '
                       'ORDER BY position', [res], timeout=60)
        assert len(rows) == 3, [(r[0], len(r[1]), r[2]) for r in rows]
        assert rows[0][1] == text[:512] + '...' and rows[0][2] is True
        assert rows[1][1] == '\\x' + blob[:1024].hex() + '...' \
            and rows[1][2] is True
        assert rows[2][1].startswith('zklock ') and rows[2][2] is True
        b.query('COMMIT')
        no_leftovers(ctx)
        assert_no_crash(ctx, [b])


def vm_hwm_kb(pid):
    """A process's peak resident memory (VmHWM), in kB."""
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1])
    raise AssertionError('no VmHWM for pid %d' % pid)


def test_huge_wait_records_are_bounded(ctx):
    """40 foreign nodes of 1 MB each under <root>/%waits, where the
    deadlock search reads every wait record: a waiter that searches
    (deadlock_timeout 100 ms, a 3 s wait that times out with 55P03) keeps
    its peak memory within 20 MB of what it was.  1.5 sent every read at
    once and kept a copy of each reply (and a second of each it read),
    about 80 MB; now at most 64 reads are in flight and a reply is kept
    only up to 64 kB (src/deadlock/deadlock_int.h, src/session/session.h)."""
    waits = ctx.root.rstrip('/') + '/%waits'
    ctx.kz.ensure_path(waits)
    blob = b'x' * 1000000
    made = []
    res = 'hostile-records/huge'
    try:
        for i in range(40):
            path = '%s/%016x' % (waits, 0x7a00000000000000 + i)
            ctx.kz.create(path, blob)
            made.append(path)
        h = ctx.backend('hostile-rec-h')
        w = ctx.backend('hostile-rec-w')
        h.query('BEGIN')
        assert h.scalar(TRY_X, [res]) is True
        w.query("SET deadlock_timeout = '100ms'")
        w.query('SELECT 1')
        before = vm_hwm_kb(w.pid)
        expect_sqlstate(w.submit(LOCK_X, [res, '3 seconds']), '55P03', 60,
                        'the wait beside 40 MB of foreign records')
        grown = vm_hwm_kb(w.pid) - before
        ctx.figure('peak memory growth of a waiter searching 40 foreign '
                   '1 MB records', grown, 'kB')
        assert grown < 20 * 1024, 'peak grew %d kB' % grown
        h.query('COMMIT')
        assert_no_crash(ctx, [h, w])
    finally:
        for path in made:
            ctx.kz.delete(path)
    # (the suite's ZooKeeper has a 256 MB heap: 100 such nodes exhaust it)


def test_ephemeral_lock_parent(ctx):
    """A lock parent (or an ancestor) that another client created as an
    ephemeral node cannot have children: the lock fails at once with
    38000 (external routine exception: ZooKeeper refused the create), an
    ERROR naming the path; it neither hangs nor crashes the backend."""
    b = ctx.backend('hostile-ephemeral')
    for res, eph in (('hostile-eph/parent', 'hostile-eph/parent'),
                     ('hostile-eph2/below/lock', 'hostile-eph2')):
        path = ctx.zi.parent_path(eph)
        ctx.kz.create(path, b'ephemeral', ephemeral=True, makepath=True)
        t0 = time.monotonic()
        try:
            b.scalar(LOCK_X, [res, '20 seconds'], timeout=40)
            raise AssertionError('%s locked under an ephemeral node' % res)
        except psycopg2.Error as e:
            ctx.log('%s: SQLSTATE %s: %s' % (res, e.pgcode,
                                             str(e).splitlines()[0]))
            assert e.pgcode == '38000', \
                '%s: SQLSTATE %s, expected 38000: %s' % (res, e.pgcode, e)
            assert ctx.root in str(e), str(e)
        assert time.monotonic() - t0 < 10, 'the refusal took too long'
        ctx.kz.delete(path)
    no_leftovers(ctx)
    assert_no_crash(ctx, [b])


# ---------------------------------------------------------------------------
# settings a non-superuser must not make stick
# ---------------------------------------------------------------------------

SUPERUSER_GUCS = {
    'zklock.hosts': "'127.0.0.1:1'",
    'zklock.root': "'/elsewhere'",
    'zklock.session_timeout': "'60s'",
    'zklock.auth_file': "'/tmp/zklock-hostile-auth'",
}


def test_guc_alter_role_database_refused(ctx):
    """ALTER ROLE ... SET and ALTER DATABASE ... SET of the superuser-only
    settings by a non-superuser (owner of the database, CREATEROLE) fail
    with 42501 and store nothing, with the library loaded or not; the
    user-level settings may be stored per role once it is loaded."""
    user, other, db = 'zklock_hostile_u', 'zklock_hostile_v', 'zklock_hostile_db'
    admin = ctx.admin
    ctx.pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
    for r in (user, other):
        admin.query('DROP ROLE IF EXISTS %s' % r)
    admin.query('CREATE ROLE %s LOGIN CREATEROLE' % user)
    admin.query('CREATE ROLE %s LOGIN' % other)
    ctx.pg.psql('CREATE DATABASE %s OWNER %s' % (db, user))
    try:
        ctx.pg.psql('CREATE EXTENSION zklock', dbname=db)
        ctx.pg.psql('GRANT EXECUTE ON FUNCTION zk_status() TO %s' % user,
                    dbname=db)
        u = ctx.backend('hostile-guc', dbname=db, user=user)
        for loaded in (False, True):
            if loaded:
                assert u.scalar('SELECT state FROM zk_status()') == 'none'
            for guc, value in SUPERUSER_GUCS.items():
                for target in ('ROLE CURRENT_USER', 'ROLE %s' % other,
                               'ROLE %s IN DATABASE %s' % (user, db),
                               'DATABASE %s' % db):
                    sql = 'ALTER %s SET %s = %s' % (target, guc, value)
                    expect_sqlstate(u.submit(sql), '42501', 10,
                                    '%s (library %sloaded)'
                                    % (sql, '' if loaded else 'not '))
                for sql in ('SET %s = %s' % (guc, value),
                            "SELECT set_config('%s', %s, false)"
                            % (guc, value)):
                    if loaded:
                        expect_sqlstate(u.submit(sql), '42501', 10, sql)
        stored = admin.query(
            "SELECT count(*) FROM pg_db_role_setting s "
            "WHERE (s.setrole IN (SELECT oid FROM pg_roles "
            "                     WHERE rolname IN (%s, %s)) "
            "       OR s.setdatabase = (SELECT oid FROM pg_database "
            "                           WHERE datname = %s)) "
            "  AND array_to_string(s.setconfig, ',') LIKE %s",
            [user, other, db, '%zklock.%'])
        assert stored == [(0,)], 'zklock settings were stored: %r' % stored

        # SET before the library is loaded only makes a placeholder: when
        # the library loads, a non-superuser's values are thrown away, so
        # a lock still goes to the configured ensemble and root
        ctx.pg.psql('GRANT EXECUTE ON FUNCTION zk_try_lock_exclusive(text) '
                    'TO %s' % user, dbname=db)
        w = ctx.backend('hostile-guc-early', dbname=db, user=user)
        for guc, value in SUPERUSER_GUCS.items():
            if guc != 'zklock.auth_file':
                w.query('SET %s = %s' % (guc, value))
        w.query('BEGIN')
        assert w.scalar(TRY_X, ['hostile-guc']) is True
        [c] = ctx.zi.wait_contenders('hostile-guc', 1)
        server = w.scalar('SELECT server FROM zk_status()')
        assert server == ctx.zk.host_port(1), server
        w.query('COMMIT')
        ctx.zi.wait_contenders('hostile-guc', 0)
        w.close()

        # user-level settings: allowed for oneself once the library is in
        u.query("ALTER ROLE CURRENT_USER SET zklock.connect_timeout = '2s'")
        u.query('ALTER ROLE CURRENT_USER RESET zklock.connect_timeout')

        # the superuser can delegate one (PostgreSQL 15 parameter ACLs)
        admin.query('GRANT SET ON PARAMETER zklock.hosts TO %s' % user)
        try:
            u.query("ALTER ROLE CURRENT_USER SET zklock.hosts = '127.0.0.1:2'")
            u.query('ALTER ROLE CURRENT_USER RESET zklock.hosts')
        finally:
            admin.query('REVOKE SET ON PARAMETER zklock.hosts FROM %s' % user)
        expect_sqlstate(u.submit("ALTER ROLE CURRENT_USER SET zklock.hosts "
                                 "= '127.0.0.1:2'"), '42501', 10,
                        'ALTER ROLE after REVOKE SET ON PARAMETER')
        assert_no_crash(ctx, [u])
        u.close()
    finally:
        ctx.pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
        for r in (user, other):
            admin.query('DROP ROLE IF EXISTS %s' % r)


def test_same_name_same_lock_across_encodings(ctx):
    """The lock is named by the name's UTF-8 bytes whatever the database
    encoding: 'café' from a LATIN1 database and from a UTF-8 one is the
    same znode, and the two exclude each other."""
    db = 'zklock_hostile_latin1'
    ctx.pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
    ctx.pg.psql("CREATE DATABASE %s ENCODING 'LATIN1' LC_COLLATE 'C' "
                "LC_CTYPE 'C' TEMPLATE template0" % db)
    try:
        ctx.pg.psql('CREATE EXTENSION zklock', dbname=db)
        latin = ctx.backend('hostile-latin1', dbname=db)
        utf = ctx.backend('hostile-utf8')
        latin.query('BEGIN')
        assert latin.scalar("SELECT zk_try_lock_exclusive('café')") is True
        [(node,)] = latin.query('SELECT node FROM zk_locks')
        assert node.rsplit('/', 1)[0] == ctx.root.rstrip('/') + '/caf%C3%A9', node
        utf.query('BEGIN')
        assert utf.scalar("SELECT zk_try_lock_exclusive('café')") is False
        latin.query('COMMIT')
        # the release's delete is sent without waiting for its reply
        harness.wait_until(lambda: ctx.kz.exists(node) is None, 10,
                           'the LATIN1 backend\'s node released')
        assert utf.scalar("SELECT zk_try_lock_exclusive('café')") is True
        utf.query('COMMIT')
        latin.close()
    finally:
        ctx.pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
