"""
Security: ZooKeeper authentication and ACLs (zklock.auth_file), and
keeping the credentials secret.

The credentials live in a file named by the superuser-only setting
zklock.auth_file, owned by the server's OS user and not readable by group
or others; a setting's value is never the secret, since PostgreSQL shows a
placeholder's raw value to any role until the library is loaded.  With it
every node zklock creates (lock parents included) carries "all rights to
this identity, read to everyone": another client can inspect the queue but
cannot delete a contender (delete needs DELETE on the parent), and a
session with other credentials gets a clear 42501 naming the path instead
of a hang.  A changed file takes effect after a reload, at the next call
that holds no lock.  The backend's memory holds the password only in
libzookeeper's copy (found by reading /proc/<pid>/mem), none of zklock's.

In short, this module checks: `zklock.auth_file`: ACLs on every node,
another identity refused with 42501, the password in no setting (not even
to a role in a backend that never loaded zklock), no error and no log line;
file ownership and mode checked; a reload re-reads the file; the backend's
memory holds no copy of zklock's (libzookeeper's alone), open or closed
(`/proc/<pid>/mem` read in 1 MiB pieces, of an anonymous mapping only the
pages that exist, so under `SANITIZE=1` ASan's 14 TiB shadow costs 0.1 s:
88 MiB read).
"""

import ctypes
import os
import time

import psycopg2
from kazoo.exceptions import NoAuthError

import harness
from test_multisession import LOCK_X, expect_sqlstate, token_of

TIMEOUT = 120

SECRET = 'Zk-s3cret-4f1c'
AUTH = 'digest:jobs:' + SECRET


def module_setup(ctx):
    """The suite's root and the records' parent <root>/%waits exist with
    an open ACL before this module's backends authenticate: made by one
    of them, they would carry the jobs identity's ACL, and every later
    backend of the suite, which has no credentials, could neither lock
    under the root nor publish a wait record (its deadlock search would
    then never run) until the server reaped them.  An operator sharing a
    root between identities does the same (see doc/06-security.md)."""
    ctx.kz.ensure_path(ctx.root)
    ctx.kz.ensure_path(ctx.root + '/%waits')


def auth_file(ctx, name, content, mode=0o600, owner_pg=True):
    """Write a credentials file owned by the postgres OS user."""
    d = os.path.join(ctx.workdir or '/tmp', 'auth')
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    path = os.path.join(d, name)
    with open(path, 'w') as f:
        f.write(content)
    os.chmod(path, mode)
    if owner_pg:
        harness.chown_to_pg_user(path)
    return path


def authed(ctx, name, auth=AUTH):
    b = ctx.backend(name)
    path = auth_file(ctx, name, auth + '\n')
    b.query("LOAD 'zklock'")
    b.query('SET zklock.auth_file = %s', [path])
    return b


def test_acl_protects_nodes(ctx):
    """Nodes and parents get digest:jobs ALL + world READ; kazoo (no
    credentials) reads the queue but gets NoAuth deleting a contender."""
    res = 'sec-acl/job'
    parent = ctx.zi.parent_path(res)
    b = authed(ctx, 'sec-owner')
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, [res, '10 seconds']), 15)
    [node] = ctx.zi.wait_contenders(res, 1)

    for path in (parent, node.path):
        acls, _ = ctx.kz.get_acls(path)
        got = sorted((a.id.scheme, a.id.id.split(':')[0], a.perms) for a in acls)
        assert got == [('digest', 'jobs', 31), ('world', 'anyone', 1)], \
            '%s has ACL %r' % (path, acls)
    try:
        ctx.kz.delete(node.path)
        raise AssertionError('another client deleted a held lock node')
    except NoAuthError:
        pass

    # the queue stays readable, from ZooKeeper and from SQL
    data, _ = ctx.kz.get(node.path)
    assert data.startswith(b'zklock '), data
    viewer = ctx.backend('sec-viewer')
    q = viewer.query('SELECT position, holding FROM zk_lock_queue(%s)', [res])
    assert q == [(1, True)], q

    b.query('COMMIT')                   # the owner can delete its node
    ctx.zi.wait_contenders(res, 0)


def test_other_identity_refused(ctx):
    """A session with other credentials gets 42501 naming the path, at
    once, and leaves nothing behind; the owner is unaffected."""
    res = 'sec-acl/job'
    owner = authed(ctx, 'sec-owner2')
    owner.query('BEGIN')
    token_of(owner.submit(LOCK_X, [res, '10 seconds']), 15)  # parent exists

    intruder = authed(ctx, 'sec-intruder', 'digest:intruder:guess')
    t0 = time.monotonic()
    e = expect_sqlstate(intruder.submit(LOCK_X, [res, '30 seconds']),
                        '42501', 20, 'lock with other credentials')
    assert time.monotonic() - t0 < 10, 'refusal took too long'
    assert ctx.zi.parent_path(res) in str(e), str(e)
    assert SECRET not in str(e) and 'guess' not in str(e), str(e)
    assert len(ctx.zi.contenders(res)) == 1

    owner.query('COMMIT')
    ctx.zi.wait_contenders(res, 0)


def test_credentials_stay_secret(ctx):
    """The password is in no setting (SHOW, current_setting, pg_settings,
    for superusers too); a non-superuser may neither read nor set
    zklock.auth_file; the old zklock.auth is gone; a malformed file is
    refused without being echoed; the server log never contains it."""
    offset = ctx.pg.log_size()
    b = authed(ctx, 'sec-show')
    path = b.scalar('SHOW zklock.auth_file')
    assert path.endswith('/sec-show'), path
    assert b.query("SELECT count(*) FROM pg_settings "
                   "WHERE setting LIKE %s", ['%' + SECRET + '%']) == [(0,)]
    expect_sqlstate(b.submit('SHOW zklock.auth'), '42704', 10,
                    'SHOW of the removed zklock.auth')

    admin = ctx.admin
    admin.query('DROP ROLE IF EXISTS zklock_sec_user')
    admin.query('CREATE ROLE zklock_sec_user')
    u = ctx.backend('sec-user')
    u.query("LOAD 'zklock'")
    u.query('SET ROLE zklock_sec_user')
    for sql in ('SHOW zklock.auth_file',
                "SELECT current_setting('zklock.auth_file')",
                "SET zklock.auth_file = '/tmp/x'",
                "SELECT set_config('zklock.auth_file', '/tmp/x', false)"):
        expect_sqlstate(u.submit(sql), '42501', 10, sql)
    u.query('RESET ROLE')
    admin.query('DROP ROLE zklock_sec_user')

    for name, content, why in (
            ('sec-bad1', 'digest-without-colon-' + SECRET, 'digest:'),
            ('sec-bad2', 'digest:jobs:' + SECRET + '\nsecond line\n',
             'more than one line'),
            ('sec-bad3', 'digest::' + SECRET, 'no user name'),
            ('sec-bad4', '', 'empty')):
        bad = ctx.backend(name)
        bad.query("LOAD 'zklock'")
        bad.query('SET zklock.auth_file = %s',
                  [auth_file(ctx, name, content)])
        e = expect_sqlstate(bad.submit(LOCK_X, [name, '5 seconds']),
                            'F0000', 15, 'malformed credentials file')
        assert why in str(e), str(e)
        assert SECRET not in str(e), str(e)

    # a lock cycle with credentials, so the log had every chance to see them
    b.query('BEGIN')
    token_of(b.submit(LOCK_X, ['sec-log', '10 seconds']), 15)
    b.query('COMMIT')
    log = ctx.pg.log_since(offset)
    # (the log read is the right one: it holds the malformed-file errors)
    assert 'is not valid' in log, 'server log not captured'
    assert SECRET not in log, 'the password appears in the server log'


def test_file_permissions_checked(ctx):
    """A credentials file that group or others can read, or that another
    OS user owns, is refused with F0000, as PostgreSQL refuses such an
    ssl_key_file; a missing one with 58P01."""
    for name, mode, owner_pg, msg in (
            ('sec-perm-group', 0o640, True, 'group or world access'),
            ('sec-perm-world', 0o604, True, 'group or world access')):
        b = ctx.backend(name)
        b.query("LOAD 'zklock'")
        b.query('SET zklock.auth_file = %s',
                [auth_file(ctx, name, AUTH, mode, owner_pg)])
        e = expect_sqlstate(b.submit(LOCK_X, [name, '5 seconds']), 'F0000',
                            15, 'credentials file mode %o' % mode)
        assert msg in str(e) and SECRET not in str(e), str(e)
    if harness.running_as_root():
        b = ctx.backend('sec-perm-owner')
        b.query("LOAD 'zklock'")
        path = auth_file(ctx, 'sec-perm-owner', AUTH, 0o644, owner_pg=False)
        os.chown(path, 65534, 65534)            # nobody
        b.query('SET zklock.auth_file = %s', [path])
        e = expect_sqlstate(b.submit(LOCK_X, ['sec-perm-owner', '5 seconds']),
                            'F0000', 15, 'credentials file of another user')
        assert 'must be owned by the database user' in str(e), str(e)
    b = ctx.backend('sec-missing')
    b.query("LOAD 'zklock'")
    b.query("SET zklock.auth_file = '/nonexistent/zklock-auth'")
    expect_sqlstate(b.submit(LOCK_X, ['sec-missing', '5 seconds']), '58P01',
                    15, 'missing credentials file')


def test_unloaded_backend_sees_no_secret(ctx):
    """The reported leak: the administrator configures credentials with
    ALTER SYSTEM, zklock is not preloaded, and a role with no grants in a
    backend that never loaded the library looks at every setting.  It sees
    the file's path at most, never the password; and zklock.auth, the old
    setting, no longer carries anything."""
    path = auth_file(ctx, 'sec-system', AUTH + '\n')
    admin = ctx.admin
    admin.query("LOAD 'zklock'")      # ALTER SYSTEM wants a known setting
    admin.query('ALTER SYSTEM SET zklock.auth_file = %s', [path])
    admin.query('SELECT pg_reload_conf()')
    try:
        admin.query('DROP ROLE IF EXISTS zklock_sec_nobody')
        admin.query('CREATE ROLE zklock_sec_nobody LOGIN')
        # a new backend reads postgresql.auto.conf as it starts
        u = ctx.backend('sec-nobody', user='zklock_sec_nobody')
        assert u.scalar("SELECT current_setting('zklock.auth_file')") == path
        seen = []
        for sql in ("SELECT string_agg(name || '=' || setting, ' ') "
                    "FROM pg_settings",
                    "SELECT current_setting('zklock.auth_file', true)",
                    "SELECT current_setting('zklock.auth', true)"):
            try:
                seen.append(str(u.scalar(sql)))
            except psycopg2.Error as e:
                seen.append(str(e))
        for text in seen:
            assert SECRET not in text, 'password visible: %s' % text
        # the superuser's new backend authenticates from the file
        b = ctx.backend('sec-system-user')
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, ['sec-system/job', '10 seconds']), 15)
        [node] = ctx.zi.wait_contenders('sec-system/job', 1)
        acls, _ = ctx.kz.get_acls(node.path)
        assert ('digest', 'jobs') in [(a.id.scheme, a.id.id.split(':')[0])
                                      for a in acls], acls
        b.query('COMMIT')
    finally:
        admin.query('ALTER SYSTEM RESET zklock.auth_file')
        admin.query('SELECT pg_reload_conf()')
        admin.query('DROP ROLE IF EXISTS zklock_sec_nobody')


def test_reload_rereads_file(ctx):
    """The file is read again at a reload: a new identity in it is used
    from the next call that holds no lock (a new session, nodes owned by
    the new identity); while a lock is held the session is kept.  (Under
    a root of its own whose levels are open to both identities: a lock
    parent made by one identity is closed to the other.)"""
    root = '/zklock-sec-reload'
    ctx.kz.ensure_path(root + '/new')           # open ACL
    path = auth_file(ctx, 'sec-reload', AUTH + '\n')
    admin = ctx.admin
    admin.query("LOAD 'zklock'")      # ALTER SYSTEM wants a known setting
    admin.query('ALTER SYSTEM SET zklock.auth_file = %s', [path])
    admin.query('SELECT pg_reload_conf()')
    try:
        b = ctx.backend('sec-reload')
        b.query('SET zklock.root = %s', [root])
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, ['a', '10 seconds']), 15)
        sid = b.scalar('SELECT session_id FROM zk_status()')
        with open(path, 'w') as f:
            f.write('digest:jobs2:other-' + SECRET + '\n')
        admin.query('SELECT pg_reload_conf()')
        # held: the same session serves a second lock
        assert b.scalar('SELECT 1') == 1    # the backend takes the reload
        token_of(b.submit(LOCK_X, ['b', '10 seconds']), 15)
        assert b.scalar('SELECT session_id FROM zk_status()') == sid
        b.query('COMMIT')

        def new_identity_used():
            b.query('BEGIN')
            try:
                token_of(b.submit(LOCK_X, ['new', '10 seconds']), 15)
                [name] = ctx.kz.get_children(root + '/new')
                acls, _ = ctx.kz.get_acls(root + '/new/' + name)
                return ('digest', 'jobs2') in [
                    (a.id.scheme, a.id.id.split(':')[0]) for a in acls]
            finally:
                b.query('COMMIT')
                harness.wait_until(
                    lambda: not ctx.kz.get_children(root + '/new'), 10,
                    'the node released')
        # the reload reaches the idle backend before its next command
        harness.wait_until(new_identity_used, 15, 'the new identity in use')
        assert b.scalar('SELECT session_id FROM zk_status()') != sid
    finally:
        admin.query('ALTER SYSTEM RESET zklock.auth_file')
        admin.query('SELECT pg_reload_conf()')
        try:
            ctx.kz.delete(root, recursive=True)
        except Exception:
            pass            # containers made by another identity are reaped


# ---------------------------------------------------------------------------
# the password in the backend's memory
# ---------------------------------------------------------------------------

# /proc/<pid>/mem is read in chunks of this size, so that no mapping is
# ever read whole: ASan's shadow is one mapping of some 15 TiB.
MEM_CHUNK = 1 << 20
# what one scan may read at the most (a backend: its resident memory, its
# libraries and PostgreSQL's shared memory, well under this); more fails
# the test rather than letting it grind
MEM_READ_LIMIT = 4 << 30
PAGE = os.sysconf('SC_PAGE_SIZE')

# PAGEMAP_SCAN (Linux 6.7, include/uapi/linux/fs.h): the ranges of a
# process's pages in given categories, found by walking its page tables
PAGEMAP_SCAN = 0xC0606610       # _IOWR('f', 16, struct pm_scan_arg)
PAGE_IS_PRESENT = 1 << 3
PAGE_IS_SWAPPED = 1 << 4


class _PmScanArg(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint64) for f in (
        'size', 'flags', 'start', 'end', 'walk_end', 'vec', 'vec_len',
        'max_pages', 'category_inverted', 'category_mask',
        'category_anyof_mask', 'return_mask')]


class _PageRegion(ctypes.Structure):
    _fields_ = [('start', ctypes.c_uint64), ('end', ctypes.c_uint64),
                ('categories', ctypes.c_uint64)]


def _populated_by_scan(pagemap, lo, hi):
    """PAGEMAP_SCAN's ranges of present or swapped pages in [lo, hi);
    raises OSError (ENOTTY, EINVAL) where the kernel has no such ioctl."""
    libc = ctypes.CDLL(None, use_errno=True)
    vec = (_PageRegion * 512)()
    want = PAGE_IS_PRESENT | PAGE_IS_SWAPPED
    while lo < hi:
        arg = _PmScanArg(size=ctypes.sizeof(_PmScanArg), start=lo, end=hi,
                         vec=ctypes.addressof(vec), vec_len=len(vec),
                         category_anyof_mask=want, return_mask=want)
        n = libc.ioctl(pagemap.fileno(), ctypes.c_ulong(PAGEMAP_SCAN),
                       ctypes.byref(arg))
        if n < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        for r in vec[:n]:
            yield r.start, r.end
        if arg.walk_end <= lo:
            raise OSError(0, 'PAGEMAP_SCAN made no progress at %#x' % lo)
        lo = arg.walk_end


def _populated_by_pagemap(pagemap, lo, hi):
    """The same from /proc/<pid>/pagemap's 8 bytes per page (bit 63
    present, 62 swapped): slower, for kernels before 6.7."""
    step = (MEM_CHUNK // 8) * PAGE             # a chunk of entries
    for base in range(lo, hi, step):
        top = min(hi, base + step)
        pagemap.seek(base // PAGE * 8)
        entries = pagemap.read((top - base) // PAGE * 8)
        if entries.count(0) == len(entries):
            continue                            # nothing there at all
        for i, e in enumerate(memoryview(entries).cast('Q')):
            if e >> 62:
                yield base + i * PAGE, base + (i + 1) * PAGE


def _runs(ranges):
    """Adjacent ranges joined, so that a match across them is found."""
    cur = None
    for a, b in ranges:
        if cur and a == cur[1]:
            cur[1] = b
            continue
        if cur:
            yield tuple(cur)
        cur = [a, b]
    if cur:
        yield tuple(cur)


def memory_hits(pid, needle, stats=None):
    """Where `needle` is in the memory of process `pid` (every readable
    mapping, libzookeeper's thread stacks and arenas included), as each
    hit with the 96 bytes before it (which say whose copy it is).  Needs root
    (or the same user and ptrace rights) to read /proc/<pid>/mem.

    Read in MEM_CHUNK pieces that overlap by the needle's length and the
    context, so a copy across two pieces is found once, whole.  Of a
    private anonymous mapping only the pages that exist are read (present
    or swapped, from the page tables): a page never touched reads as zeros
    and cannot hold a copy, and ASan's shadow (terabytes, a few MB of them
    touched) would otherwise take hours and page tables for all of it.
    File-backed and shared mappings are read whole (a page of them not
    mapped here may still hold data).  A piece that cannot be read (EIO,
    EFAULT: e.g. a file mapping past the file's end) is skipped page by
    page.  `stats`, a dict, gets the bytes read and the seconds taken."""
    hits = []
    keep = 96 + len(needle) - 1     # the context and a partial match
    total = 0
    mapped = 0
    began = time.monotonic()
    scan = _populated_by_scan

    def search(mem, lo, hi):
        nonlocal total
        carry = b''
        pos = lo
        while pos < hi:
            want = min(MEM_CHUNK, hi - pos)
            try:
                mem.seek(pos)
                data = mem.read(want)
            except OSError:
                data = b''
            if not data:
                carry = b''
                pos += PAGE - pos % PAGE    # skip the page that failed
                continue
            total += len(data)
            assert total <= MEM_READ_LIMIT, (
                'read more than %d bytes of pid %d' % (MEM_READ_LIMIT, pid))
            buf = carry + data
            # a match ending in this piece; one wholly in carry was counted
            at = buf.find(needle, max(0, len(carry) - len(needle) + 1))
            while at >= 0:
                hits.append(buf[max(0, at - 96):at + len(needle)])
                at = buf.find(needle, at + 1)
            carry = buf[-keep:]
            pos += len(data)

    with open('/proc/%d/maps' % pid) as maps, \
            open('/proc/%d/mem' % pid, 'rb', 0) as mem, \
            open('/proc/%d/pagemap' % pid, 'rb', 0) as pagemap:
        for line in maps:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split('-'))
            name = parts[5] if len(parts) > 5 else ''
            if 'r' not in parts[1] or name in ('[vvar]', '[vsyscall]'):
                continue
            mapped += hi - lo
            anonymous = parts[1][3] == 'p' and (
                name in ('', '[heap]', '[stack]') or name.startswith('[anon:'))
            if not anonymous:
                search(mem, lo, hi)
                continue
            try:
                runs = list(_runs(scan(pagemap, lo, hi)))
            except OSError:
                scan = _populated_by_pagemap    # a kernel before 6.7
                runs = list(_runs(scan(pagemap, lo, hi)))
            for a, b in runs:
                search(mem, a, b)
    if stats is not None:
        stats['bytes'] = total
        stats['mapped'] = mapped
        stats['seconds'] = time.monotonic() - began
    return hits


def test_password_copies_in_memory(ctx):
    """While a session is open, the backend's memory holds the password
    once: in libzookeeper's auth list (zoo_add_auth copies it there and
    sends it again after every reconnect, until zookeeper_close).  zklock
    keeps no copy of its own: the file is read into a stack buffer and a
    malloc'd string, both wiped as soon as the credentials are handed to
    libzookeeper; to notice a changed file it keeps only ZooKeeper's
    digest of them, the same one every node's ACL shows to any reader.
    libzookeeper also serializes the password into each auth packet it
    sends and frees those buffers without wiping them, as it frees its
    auth list at zookeeper_close: those leftovers are counted apart
    (a packet carries the "digest" scheme string right before the
    credentials) and are outside zklock's reach.  Once the session is
    closed no copy may be left but those.

    The password is long and the scan looks for its tail: malloc
    overwrites the first 16 bytes of a chunk it frees, which would
    otherwise hide a freed but unwiped copy."""
    if not harness.running_as_root():
        import pytest
        pytest.skip('reading a backend\'s memory needs root')
    import struct
    password = SECRET + '-mem-' + 'q8Rw3ZtL0vKcYp5NhB2mXe7JdGs9UaF4'
    cred = 'jobs:' + password
    needle = password[-24:].encode()
    ours = ('digest:' + cred).encode()
    packet = b'digest' + struct.pack('>i', len(cred)) + cred.encode()

    def copies(when):
        """Copies found, by owner: 'ours' (the identity line), 'lib'
        (libzookeeper's auth list), 'packet' (a serialized auth packet),
        'freed' (a chunk malloc reused the head of)."""
        found = {'ours': 0, 'lib': 0, 'packet': 0, 'freed': 0}
        scanned = {}
        for h in memory_hits(b.pid, needle, scanned):
            if h.endswith(packet):
                found['packet'] += 1
            elif h.endswith(ours):
                found['ours'] += 1
            elif h.endswith(cred.encode()):
                found['lib'] += 1
            else:
                found['freed'] += 1
        ctx.log('%s: %r; %.1f MiB read of %.1f GiB readable in %.2f s' % (
            when, found, scanned['bytes'] / 2**20, scanned['mapped'] / 2**30,
            scanned['seconds']))
        ctx.figure('memory scan, %s' % when, round(scanned['seconds'], 2),
                   's')
        for k, v in found.items():
            ctx.figure('password copies, %s (%s)' % (when, k), v, '')
        return found

    # a root of its own, open to both identities (see test_reload_rereads_file)
    root = '/zklock-sec-mem'
    ctx.kz.ensure_path(root + '/open')
    b = authed(ctx, 'sec-mem', 'digest:' + cred)
    b.query('SET zklock.root = %s', [root])
    try:
        for i in range(3):      # a reread of the file (auth_changed) too
            b.query('BEGIN')
            token_of(b.submit(LOCK_X, ['job', '10 seconds']), 15)
            b.query('COMMIT')
            if i == 1:
                ctx.admin.query('SELECT pg_reload_conf()')
                assert b.scalar('SELECT 1') == 1
        found = copies('session open')
        assert found['ours'] == 0, 'zklock keeps a copy: %r' % found
        assert found['lib'] == 1, 'libzookeeper\'s copy: %r' % found
        assert found['freed'] == 0, 'an unwiped freed copy: %r' % found

        # the session closes: a new one, without credentials, replaces it
        # (in a lock parent open to all: the first one is closed to it)
        b.query('RESET zklock.auth_file')
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, ['open', '10 seconds']), 15)
        b.query('COMMIT')
        harness.wait_until(lambda: not ctx.kz.get_children(root + '/open'),
                           10, 'the node released')
        lib_open = found['lib'] + found['packet']
        found = copies('session closed')
        # what is left is what libzookeeper freed without wiping (its auth
        # list entry and packets, their heads now malloc's): never more
        assert found['ours'] + found['lib'] == 0, found
        assert sum(found.values()) <= lib_open, \
            'more copies than libzookeeper had: %r' % found
    finally:
        try:
            ctx.kz.delete(root, recursive=True)
        except Exception:
            pass            # containers made by another identity are reaped
