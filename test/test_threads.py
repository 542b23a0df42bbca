"""
A backend that cannot start threads gets an ERROR, not an abort
(issue 13, item 7).

libzookeeper_mt's zookeeper_init asserts that pthread_create succeeds
(Debian builds keep assertions): a backend at its thread limit would die
by SIGABRT, and PostgreSQL would then end every backend of the cluster
and reinitialise.  zklock must instead refuse the call with SQLSTATE
53000 (insufficient_resources) before libzookeeper is reached.

The limit is real: RLIMIT_NPROC, which the kernel checks on every fork
and clone (threads included) against the number of tasks of the real
uid.  So that this number is known, this module runs its own cluster as
its own OS user, created for it (useradd) and removed at the end:

  1. the cluster is started without a limit, the database and the
     extension are created, and once it is idle (postmaster, checkpointer,
     background writer, walwriter; autovacuum, background workers and WAL
     senders are off) the user's tasks are counted: IDLE;
  2. it is stopped and started again from a shell that ran
     `ulimit -S -u IDLE+3` (the soft limit only: a process of that user
     can later lift it for one backend, see test_one_thread_free);
  3. every test first waits until the cluster is idle again with exactly
     IDLE tasks, then opens its connections (each is one more backend,
     hence one more task) and checks the exact count before the lock call.

Nothing else of that user forks while a test runs: the test's own
connections are its only backends (psql is used only in step 1), and
pg_ctl itself has exited before the first connection.  Under the limit
the start peaks at IDLE+1 tasks (pg_ctl and the startup process, before
the walwriter); a crash restart (unfixed code) peaks at IDLE.

test_no_thread_free leaves no task slot for B's threads; test_one_thread_free
leaves one, so that a check starting fewer than two threads at once
would pass and libzookeeper would still abort on its second thread.
"""

import atexit
import concurrent.futures
import grp
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

import psycopg2

import harness
from harness import wait_until
from test_multisession import LOCK_X, token_of

TIMEOUT = 60
SETUP_TIMEOUT = 120

DB = 'zklock_threads'
RES = 'threads-x'
LOCK = 'SELECT zk_lock_exclusive(%s)'
AUX = ('checkpointer', 'background writer', 'walwriter')
# PostgreSQL 18's asynchronous I/O workers (io_method = worker, three by
# default): "postgres: io worker 0", ...
AUX_PREFIXES = ('io worker ',)


def is_aux(kind):
    return kind is not None and (kind in AUX or kind.startswith(AUX_PREFIXES))
HEADROOM = 3                    # the limit is IDLE + HEADROOM tasks
CRASH_SIGNS = ('terminated by signal', 'terminating any other active server',
               'all server processes terminated')


# ---------------------------------------------------------------------------
# the user's tasks
# ---------------------------------------------------------------------------

def user_tasks(uid):
    """[(pid, threads, state, title)] of every process whose real uid is
    `uid` (RLIMIT_NPROC counts tasks by real uid; zombies count too)."""
    procs = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/status' % name) as f:
                status = f.read()
            with open('/proc/%s/cmdline' % name, 'rb') as f:
                cmdline = f.read()
        except OSError:                 # gone meanwhile
            continue
        fields = dict(line.split(':', 1) for line in status.splitlines()
                      if ':' in line)
        try:
            if int(fields['Uid'].split()[0]) != uid:
                continue
            threads = int(fields['Threads'])
        except (KeyError, ValueError, IndexError):
            continue
        title = cmdline.replace(b'\0', b' ').decode('utf-8', 'replace')
        procs.append((int(name), threads, fields.get('State', '?').strip(),
                      title.strip()))
    return sorted(procs)


def task_count(uid):
    return sum(p[1] for p in user_tasks(uid))


def describe(uid):
    procs = user_tasks(uid)
    return '%d task(s):\n%s' % (
        sum(p[1] for p in procs),
        '\n'.join('  pid %d, %d thread(s), %s: %s' % p for p in procs))


def aux_pids(sh):
    """{title: pid} of the cluster's auxiliary processes (new pids after
    a crash restart)."""
    return {p[3]: p[0] for p in user_tasks(sh.uid)
            if p[3].startswith('postgres: ')
            and is_aux(p[3][len('postgres: '):])}


def idle_tasks(sh):
    """The user's task count if the cluster is idle (the postmaster and
    its auxiliary processes, the walwriter already running: the startup
    process is done), else None."""
    pm = sh.pgc.postmaster_pid()
    if pm is None:
        return None
    procs = user_tasks(sh.uid)
    seen = set()
    for pid, threads, state, title in procs:
        if pid == pm:
            continue
        kind = title[len('postgres: '):] if title.startswith('postgres: ') \
            else None
        if not is_aux(kind) or state.startswith('Z'):
            return None
        seen.add(kind)
    if 'walwriter' not in seen or pm not in [p[0] for p in procs]:
        return None
    return sum(p[1] for p in procs)


def wait_idle(sh, timeout=30):
    try:
        return wait_until(lambda: idle_tasks(sh), timeout,
                          'the cluster of %s to be idle' % sh.user, 0.05)
    except TimeoutError as e:
        raise AssertionError('%s; %s' % (e, describe(sh.uid))) from None


def expect_tasks(sh, n, what):
    have = task_count(sh.uid)
    assert have == n, ('%s: %s has %d task(s), expected %d (limit %d); %s'
                       % (what, sh.user, have, n, sh.limit,
                          describe(sh.uid)))


# ---------------------------------------------------------------------------
# a cluster run by the dedicated user
# ---------------------------------------------------------------------------

class NprocCluster(harness.PgCluster):
    """A PgCluster run by `user` instead of postgres.  With nproc_limit
    set, `pg_ctl start` runs in a shell that did `ulimit -S -u LIMIT`, so
    the postmaster and all its children have that soft RLIMIT_NPROC.
    Every other command (initdb, pg_ctl stop, ...) runs without it."""

    def __init__(self, user, base_dir, extra_conf):
        super().__init__('nproc', extra_conf, base_dir=base_dir)
        pw = pwd.getpwnam(user)
        self.user, self.uid, self.gid = user, pw.pw_uid, pw.pw_gid
        self.nproc_limit = None

    def as_user(self, cmd, limit=None):
        script = 'exec "$@"' if limit is None \
            else 'ulimit -S -u %d && exec "$@"' % limit
        return ['setpriv', '--reuid=%d' % self.uid, '--regid=%d' % self.gid,
                '--clear-groups', '--', '/bin/bash', '-c', script,
                'bash'] + list(cmd)

    def _run(self, cmd, timeout, check=True):
        limit = self.nproc_limit if cmd[-1] == 'start' else None
        r = subprocess.run(self.as_user(cmd, limit), cwd=self.dir,
                           timeout=timeout, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError('%s failed (status %d):\n%s%s' % (
                ' '.join(cmd), r.returncode, r.stdout, r.stderr))
        return r

    def init(self, timeout=120):
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        os.chown(self.dir, self.uid, self.gid)
        self._run([harness.PG_BIN + '/initdb', '-D', self.data_dir,
                   '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8',
                   '--locale=C'], timeout=timeout)
        path = os.path.join(self.data_dir, 'harness.conf')
        with open(path, 'w') as f:
            f.write('# written by test/test_threads.py\n')
            for k, v in self.extra_conf.items():
                f.write('%s = %s\n' % (k, harness._conf_value(v)))
        os.chown(path, self.uid, self.gid)
        with open(os.path.join(self.data_dir, 'postgresql.conf'), 'a') as f:
            f.write("\ninclude = 'harness.conf'\n")


def lift_limit(sh, pid):
    """Raise the soft RLIMIT_NPROC of one process to its hard limit
    (prlimit run as the same user: root lacks CAP_SYS_RESOURCE here)."""
    with open('/proc/%d/limits' % pid) as f:
        line = [ln for ln in f if ln.startswith('Max processes')][0]
    hard = line.split()[3]
    r = subprocess.run(sh.pgc.as_user(['prlimit', '--pid', str(pid),
                                       '--nproc=%s:' % hard]),
                       cwd=sh.pgc.dir, timeout=30, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    assert r.returncode == 0, 'prlimit failed: %s%s' % (r.stdout, r.stderr)
    with open('/proc/%d/limits' % pid) as f:
        line = [ln for ln in f if ln.startswith('Max processes')][0]
    assert line.split()[2] == hard, line


# ---------------------------------------------------------------------------
# module setup and cleanup
# ---------------------------------------------------------------------------

def module_setup(ctx):
    sh = ctx.shared
    sh.clusters = []
    sh.user = 'zklnproc%d' % os.getpid()
    base = ctx.workdir or tempfile.gettempdir()
    sh.base = tempfile.mkdtemp(prefix='zklock-nproc-', dir=base)
    os.chmod(sh.base, 0o755)
    atexit.register(cleanup, sh)        # if the runner dies before teardown
    r = subprocess.run(['useradd', '--system', '--no-create-home',
                        '--home-dir', '/nonexistent', '--shell',
                        '/usr/sbin/nologin', '--user-group', sh.user],
                       stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, 'useradd %s: %s' % (sh.user, r.stderr)
    sh.user_created = True
    sh.uid = pwd.getpwnam(sh.user).pw_uid
    assert task_count(sh.uid) == 0, describe(sh.uid)

    sh.pgc = NprocCluster(sh.user, sh.base, {
        'listen_addresses': '127.0.0.1',
        'max_connections': 10,
        'shared_buffers': '16MB',
        'fsync': False,
        'synchronous_commit': False,
        'full_page_writes': False,
        # nothing forks on its own: no autovacuum, no background worker
        # (logical replication launcher included), no WAL sender
        'autovacuum': False,
        'max_worker_processes': 0,
        'max_parallel_workers': 0,
        'max_logical_replication_workers': 0,
        'wal_level': 'minimal',
        'max_wal_senders': 0,
        'archive_mode': False,
        'logging_collector': False,
        'log_line_prefix': '%m [%p] %q%a ',
        'log_min_messages': 'warning',
        'zklock.hosts': ctx.zk.connect_string,
        'zklock.root': ctx.root,
        'zklock.session_timeout': '%ds' % ctx.session_timeout,
        'zklock.connect_timeout': '%ds' % ctx.connect_timeout,
    })
    pgc = sh.pgc
    pgc.extra_conf['port'] = pgc.port
    pgc.extra_conf['unix_socket_directories'] = pgc.dir

    # 1. without a limit: database, extension, idle task count
    pgc.start()
    sh.clusters.append(pgc)
    pgc.psql('CREATE DATABASE %s' % DB)
    pgc.psql('CREATE EXTENSION zklock', dbname=DB)
    sh.idle = wait_idle(sh)
    ctx.log('%s (uid %d): idle cluster has %s'
            % (sh.user, sh.uid, describe(sh.uid)))
    pgc.stop()
    wait_until(lambda: task_count(sh.uid) == 0, 30,
               'every process of %s to exit' % sh.user)

    # 2. again under the limit
    sh.limit = sh.idle + HEADROOM
    pgc.nproc_limit = sh.limit
    pgc.start()
    idle = wait_idle(sh)
    assert idle == sh.idle, ('idle cluster under the limit has %d task(s), '
                             'without it %d; %s' % (idle, sh.idle,
                                                    describe(sh.uid)))
    with open('/proc/%d/limits' % pgc.postmaster_pid()) as f:
        line = [ln for ln in f if ln.startswith('Max processes')][0]
    assert int(line.split()[2]) == sh.limit, line
    ctx.figure('idle tasks of the cluster user', sh.idle)
    ctx.figure('RLIMIT_NPROC (soft) of the postmaster', sh.limit)


def cleanup(sh):
    """Stop the cluster, end whatever process of the user is left (by
    pid), delete the user and its files.  Idempotent; returns the errors."""
    if getattr(sh, 'cleaned', False):
        return []
    errors = []
    pgc = getattr(sh, 'pgc', None)
    if pgc is not None:
        try:
            pgc.stop()
        except Exception as e:
            errors.append('stopping the cluster: %s' % e)
    if getattr(sh, 'user_created', False):
        uid = sh.uid
        try:
            for pid, _, _, _ in user_tasks(uid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait_until(lambda: task_count(uid) == 0, 20,
                       'every process of %s to exit' % sh.user)
        except Exception as e:
            errors.append('ending processes of %s: %s' % (sh.user, e))
        r = subprocess.run(['userdel', sh.user], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            errors.append('userdel %s: %s' % (sh.user, r.stderr.strip()))
        try:
            grp.getgrnam(sh.user)
            r = subprocess.run(['groupdel', sh.user],
                               stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=60)
            if r.returncode != 0:
                errors.append('groupdel %s: %s' % (sh.user,
                                                   r.stderr.strip()))
        except KeyError:
            pass
    base = getattr(sh, 'base', None)
    if base:
        shutil.rmtree(base, ignore_errors=True)
        if os.path.exists(base):
            errors.append('%s not removed' % base)
    sh.cleaned = True
    return errors


def module_teardown(ctx):
    errors = cleanup(ctx.shared)
    assert not errors, 'teardown: %s' % '; '.join(errors)


# ---------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------

def connect(ctx, name):
    return ctx.backend(name, dbname=DB, cluster=ctx.shared.pgc)


def lock_fails_contained(ctx, a, b, free):
    """B's lock call must fail with 53000 naming threads; B, A, the
    postmaster and its auxiliary processes must be untouched."""
    sh = ctx.shared
    pgc = sh.pgc
    pm = pgc.postmaster_pid()
    aux = aux_pids(sh)
    started = a.scalar('SELECT pg_postmaster_start_time()')
    offset = pgc.log_size()
    tasks = task_count(sh.uid)
    assert tasks == sh.limit - free, describe(sh.uid)

    fut = b.submit(LOCK, [RES])
    try:
        rows = fut.result(30)
    except concurrent.futures.TimeoutError:
        raise AssertionError('B\'s lock call still running after 30 s, '
                             'expected SQLSTATE 53000') from None
    except psycopg2.Error as e:
        err = e
    else:
        raise AssertionError('B got the lock (%r) with %d task slot(s) free '
                             'for its 2 ZooKeeper threads: the limit did '
                             'not hold' % (rows, free))

    if err.pgcode != '53000':
        # What happened to the cluster?  (The postmaster logs the crash
        # once it has reaped B; give it a moment.)
        try:
            wait_until(lambda: 'terminated by signal'
                       in pgc.log_since(offset), 5, 'the crash log line')
        except TimeoutError:
            pass
        signs = [ln for ln in pgc.log_since(offset).splitlines()
                 if any(s in ln for s in CRASH_SIGNS)]
        try:
            a_state = 'A still answers: %r' % (a.scalar('SELECT 1',
                                                        timeout=10),)
        except Exception as e:
            a_state = 'A lost its connection: %s' % (
                str(e).strip().splitlines() or ['?'])[0]
        raise AssertionError(
            'B\'s lock call failed with SQLSTATE %s, expected 53000: %s\n'
            '%s\nserver log:\n  %s'
            % (err.pgcode, str(err).strip(), a_state,
               '\n  '.join(signs) or '(no crash line)'))

    msg = err.diag.message_primary or ''
    assert 'thread' in msg.lower(), 'message does not name threads: %r' % msg
    ctx.log('B: %s' % msg)

    # B's backend lives on, A's connection too; no crash restart
    assert b.scalar('SELECT pg_backend_pid()') == b.pid
    assert b.scalar('SELECT 1') == 1
    assert a.scalar('SELECT pg_backend_pid()') == a.pid
    assert a.scalar('SELECT pg_postmaster_start_time()') == started
    assert pgc.postmaster_pid() == pm
    assert aux_pids(sh) == aux, 'auxiliary processes changed: %r -> %r' % (
        aux, aux_pids(sh))
    log = pgc.log_since(offset)
    for sign in CRASH_SIGNS:
        assert sign not in log, 'server log: %s' % log
    # whatever threads the failed call started are gone
    wait_until(lambda: task_count(sh.uid) == tasks, 10,
               'the task count to be back at %d' % tasks)
    # and no ZooKeeper handle was left behind
    state = b.scalar('SELECT state FROM zk_status()')
    assert state == 'none', 'B\'s session state after the error: %r' % state


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_no_thread_free(ctx):
    """Every task slot of the user is taken (A, B and a third backend):
    not even one thread can start.  B gets 53000, nothing crashes."""
    sh = ctx.shared
    assert wait_idle(sh) == sh.idle, describe(sh.uid)
    a = connect(ctx, 'threads-A')
    b = connect(ctx, 'threads-B')
    connect(ctx, 'threads-filler')
    lock_fails_contained(ctx, a, b, free=0)


def test_one_thread_free(ctx):
    """One task slot is free: one thread can start, but libzookeeper
    needs two at once.  B gets 53000, nothing crashes; once B's own limit
    is lifted, the same backend takes the lock."""
    sh = ctx.shared
    assert wait_idle(sh) == sh.idle, describe(sh.uid)
    a = connect(ctx, 'threads-A')
    b = connect(ctx, 'threads-B')
    lock_fails_contained(ctx, a, b, free=1)

    lift_limit(sh, b.pid)
    token_of(b.submit(LOCK_X, [RES, '10 seconds']), 20,
             'B\'s lock once its limit is lifted')
    assert b.scalar('SELECT state FROM zk_status()') == 'connected'
    ctx.zi.wait_contenders(RES, 0)
    assert a.scalar('SELECT pg_backend_pid()') == a.pid
