#!/usr/bin/python3
"""
zklock demo (`make demo`): two PostgreSQL clusters, "east" and "west",
and one 3-server ZooKeeper ensemble, all on 127.0.0.1, and a narrated
scenario with the real timings of this run:

  1. a job on east takes the lock `nightly-rollup`;
  2. the same job on west waits (pg_stat_activity, zk_lock_queue), and so
     does a Python service using kazoo's Lock on the same znode;
  3. east commits: west proceeds, then the kazoo service;
  4. shared and exclusive: two readers share, a writer waits for them, a
     reader arriving after the writer waits for the writer;
  5. a holder killed with kill -9: the lock passes on after the ZooKeeper
     session timeout (4 s here);
  6. the fencing tokens, and a downstream write rejected for an old token.

Everything started is stopped at the end, unless KEEP=1 is in the
environment: then the servers stay up and the commands to connect and to
stop them are printed.  The extension must be installed (demo/run.sh, run
by `make demo`, installs the packages, builds and installs it first).

Usage: /usr/bin/python3 demo/demo.py [--keep]
"""

import atexit
import datetime
import os
import re
import shlex
import shutil
import signal
import sys
import textwrap
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, 'test', 'lib'))

import harness                                   # noqa: E402

SESSION_TIMEOUT_S = 4           # zklock.session_timeout in this demo
DB = 'jobs'
JOB = 'nightly-rollup'
CATALOG = 'catalog/refresh'
WIDTH = 78

T0 = time.monotonic()


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------

COLOR = (sys.stdout.isatty() and os.environ.get('TERM', 'dumb') != 'dumb'
         and 'NO_COLOR' not in os.environ)


def paint(code, text):
    return '\033[%sm%s\033[0m' % (code, text) if COLOR else text


def bold(t):
    return paint('1', t)


def dim(t):
    return paint('2', t)


def green(t):
    return paint('32', t)


def yellow(t):
    return paint('33', t)


def red(t):
    return paint('31', t)


def cyan(t):
    return paint('36', t)


def out(text=''):
    print(text, flush=True)


def clock():
    return '%6.1fs' % (time.monotonic() - T0)


def heading(title):
    out()
    out(bold('=' * WIDTH))
    out(bold(' ' + title))
    out(bold('=' * WIDTH))


def say(text):
    """A paragraph of narration."""
    out()
    for para in textwrap.dedent(text).strip().split('\n\n'):
        out(textwrap.fill(' '.join(para.split()), WIDTH,
                          initial_indent='  ', subsequent_indent='  '))


def event(text, mark=''):
    """Something that happened, with the time since the demo started."""
    out('%s  %s%s' % (dim(clock()), mark and mark + ' ', text))


def echo_sql(prompt, sql, note=''):
    """Print a statement after its prompt; continuation lines of a
    multi-line statement line up under its first line."""
    lines = sql.split('\n')
    lead = '%s  %s ' % (dim(clock()), prompt)
    width = len(re.sub(r'\033\[[0-9;]*m', '', lead))
    out(lead + bold(lines[0]) + (('   ' + dim(note)) if note and
                                 len(lines) == 1 else ''))
    for i, line in enumerate(lines[1:], 2):
        out(' ' * width + bold(line) + (('   ' + dim(note)) if note and
                                         i == len(lines) else ''))


def pause():
    """A breath between steps when someone watches (DEMO_PACE seconds;
    default 2 on a terminal, 0 otherwise)."""
    try:
        pace = float(os.environ.get('DEMO_PACE',
                                    '2' if sys.stdout.isatty() else '0'))
    except ValueError:
        pace = 0
    if pace > 0:
        time.sleep(pace)


def fmt_cell(v):
    if v is None:
        return ''
    if v is True:
        return 't'
    if v is False:
        return 'f'
    if isinstance(v, datetime.timedelta):
        return '%g s' % v.total_seconds()
    return str(v)


def table(cols, rows, indent=' ' * 10):
    cells = [[fmt_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells])
              for i, c in enumerate(cols)]
    out(indent + ' | '.join(c.center(w) for c, w in zip(cols, widths))
        .rstrip())
    out(indent + '-+-'.join('-' * w for w in widths))
    for raw, r in zip(rows, cells):
        out(indent + ' | '.join(
            c.rjust(w) if isinstance(v, int) and not isinstance(v, bool)
            else c.ljust(w) for v, c, w in zip(raw, r, widths)).rstrip())
    out(indent + dim('(%d row%s)' % (len(rows), '' if len(rows) == 1 else 's')))


def ms(seconds):
    return '%.0f ms' % (seconds * 1000) if seconds < 10 else '%.1f s' % seconds


NODE_RE = re.compile(r'^(.*?)(__WRIT__|__READ__|__lock__|__rlock__|lock-)'
                     r'(-?\d{10})$')


def short_node(path):
    """'_c_6f1d2e4a-...-__WRIT__0000000003' -> '_c_6f1d2e4a…__WRIT__0000000003'"""
    name = path.rsplit('/', 1)[-1]
    m = NODE_RE.match(name)
    if not m or len(m.group(1)) <= 12:
        return name
    return m.group(1)[:11] + '…' + m.group(2) + m.group(3)


def short_owner(owner):
    """zklock's owner line without the long cluster system identifier
    and postmaster start time."""
    return re.sub(r' sysid=\d+( start=\d+)?', '', owner or '')


# ---------------------------------------------------------------------------
# the pieces
# ---------------------------------------------------------------------------

class Session:
    """One PostgreSQL session of the demo, echoing what it runs."""

    def __init__(self, cluster, user, app):
        self.cluster = cluster
        self.user = user
        self.app = app
        self.b = harness.Backend(cluster, app, dbname=DB, user=user)
        self.pid = self.b.pid

    @property
    def prompt(self):
        return '%s %s>' % (cyan('%-4s' % self.cluster.name), self.user)

    def echo(self, sql, note=''):
        echo_sql(self.prompt, sql, note)

    def run(self, sql, note='', timeout=30):
        """Run a statement, wait for it; returns (rows, seconds)."""
        self.echo(sql, note)
        t = time.monotonic()
        rows = self.b.query(sql, timeout=timeout)
        return rows, time.monotonic() - t

    def value(self, sql, note='', timeout=30):
        rows, took = self.run(sql, note, timeout)
        return rows[0][0], took

    def start(self, sql, note=''):
        """Submit a statement that is expected to block; the future gets
        .done_at (monotonic) when it finishes."""
        self.echo(sql, note)
        fut = self.b.submit(sql)

        def done(f):
            f.done_at = time.monotonic()
        fut.add_done_callback(done)
        return fut

    def close(self):
        self.b.close(timeout=5)


def wait_extension(admin, pid, timeout=10):
    """Wait until `pid` waits in the extension (pg_stat_activity)."""
    sql = 'SELECT wait_event_type FROM pg_stat_activity WHERE pid = %d' % pid
    harness.wait_until(lambda: admin.b.scalar(sql) == 'Extension', timeout,
                       'pid %d to wait in zklock' % pid, interval=0.05)


def show_queue(viewer, resource):
    sql = ("SELECT position, mode, holding, node, owner "
           "FROM zk_lock_queue('%s');" % resource)
    rows, _ = viewer.run(sql)
    table(['position', 'mode', 'holding', 'node', 'owner'],
          [(p, m, h, short_node(n), short_owner(o)) for p, m, h, n, o in rows])
    return rows


def show_activity(admin, pid):
    sql = ("SELECT pid, usename, application_name, state, wait_event_type,\n"
           "       wait_event, round(extract(epoch FROM now() - query_start)"
           "::numeric, 1) AS waiting_s,\n"
           "       query\n"
           "  FROM pg_stat_activity WHERE pid = %d;" % pid)
    rows, _ = admin.run(sql)
    table(['pid', 'usename', 'application_name', 'state', 'wait_event_type',
           'wait_event', 'waiting_s', 'query'], rows)
    return rows


def setup_sql():
    grants = ',\n                          '.join([
        'zk_lock_exclusive(text, interval)', 'zk_lock_shared(text, interval)',
        'zk_try_lock_exclusive(text)', 'zk_locks()', 'zk_lock_queue(text)',
        'zk_status()'])
    return [
        'CREATE EXTENSION zklock;',
        'CREATE ROLE etl LOGIN;',
        'GRANT EXECUTE ON FUNCTION %s TO etl;' % grants,
        'GRANT SELECT ON zk_locks TO etl;',
        'CREATE TABLE rollup_runs (cluster text, fencing_token bigint,\n'
        '                          finished_at timestamptz DEFAULT '
        'clock_timestamp());',
        'GRANT INSERT, SELECT ON rollup_runs TO etl;',
    ]


# ---------------------------------------------------------------------------
# the demo
# ---------------------------------------------------------------------------

class Demo:

    def __init__(self, keep):
        self.keep = keep
        self.workdir = harness.make_workdir('zklock-demo-')
        self.logfile = open(os.path.join(self.workdir, 'demo.log'), 'a')
        harness.log = self._log           # harness progress: to demo.log
        self.zk = None
        self.east = self.west = None
        self.kz = None
        self.sessions = []
        self.grants = []                  # (step, who, resource, token)
        self.timings = {}

    def _log(self, msg):
        self.logfile.write('[%s] %s\n' % (time.strftime('%H:%M:%S'), msg))
        self.logfile.flush()

    def session(self, cluster, user='etl', app=JOB):
        s = Session(cluster, user, app)
        self.sessions.append(s)
        return s

    def close(self, *sessions):
        for s in sessions:
            s.close()
            if s in self.sessions:
                self.sessions.remove(s)

    def grant(self, step, who, resource, token):
        self.grants.append((step, who, resource, token))

    # -- step 0 ------------------------------------------------------------

    def start_servers(self):
        heading('Setting up: a 3-server ZooKeeper ensemble, PostgreSQL '
                '"east" and "west"')
        say('''Everything runs on 127.0.0.1 on free ports, under %s (logs
            included). The two PostgreSQL 15 clusters are independent: they
            share nothing but the ZooKeeper ensemble, which is where the
            locks live. Both have zklock.hosts pointing at all three
            ZooKeeper servers and zklock.session_timeout = %d s (the default
            is 10 s; it is short here so that step 5 does not take long).
            shared_preload_libraries is not needed.''' % (self.workdir,
                                                         SESSION_TIMEOUT_S))
        out()
        t = time.monotonic()
        self.zk = harness.ZooKeeper(n=3, base_dir=self.workdir, tick_ms=500)
        zk_box = {}

        def start_zk():
            try:
                self.zk.start(timeout=90)
            except BaseException as e:
                zk_box['error'] = e
        zt = threading.Thread(target=start_zk, daemon=True)
        zt.start()

        conf = {
            'zklock.hosts': self.zk.connect_string,
            'zklock.session_timeout': '%ds' % SESSION_TIMEOUT_S,
            'log_min_messages': 'log',      # the crash in step 5 is logged
        }
        self.east = harness.PgCluster('east', dict(conf, cluster_name='east'),
                                      base_dir=self.workdir)
        self.west = harness.PgCluster('west', dict(conf, cluster_name='west'),
                                      base_dir=self.workdir)
        errors = []

        def start_pg(pg):
            try:
                pg.start()
            except BaseException as e:
                errors.append(e)
        threads = [threading.Thread(target=start_pg, args=(pg,), daemon=True)
                   for pg in (self.east, self.west)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(150)
        if errors:
            raise errors[0]
        event('PostgreSQL east on 127.0.0.1:%d, west on 127.0.0.1:%d '
              '(initdb + start: %s)' % (self.east.port, self.west.port,
                                        ms(time.monotonic() - t)))
        zt.join(120)
        if 'error' in zk_box:
            raise zk_box['error']
        if zt.is_alive():
            raise TimeoutError('ZooKeeper did not start')
        modes = {sid: self.zk.mode(sid) for sid in self.zk.sids}
        event('ZooKeeper ensemble %s serving: %s (%s)' % (
            self.zk.connect_string,
            ', '.join('server %d %s' % (s, m) for s, m in modes.items()),
            ms(time.monotonic() - t)))
        self.timings['servers up'] = time.monotonic() - t

        say('''On each cluster, as the superuser (database "%s"): the
            extension, a job role "etl" with the grants it needs (EXECUTE is
            revoked from PUBLIC), and a table the job writes to.''' % DB)
        out()
        for pg in (self.east, self.west):
            pg.psql('CREATE DATABASE %s' % DB)
        for stmt in setup_sql():
            echo_sql(cyan('both') + ' postgres>', stmt)
            for pg in (self.east, self.west):
                pg.psql(stmt, dbname=DB)
        self.kz = harness.connect_kazoo(self.zk.connect_string)
        self.zi = harness.ZkInspector(self.kz, '/zklock')

    # -- steps ---------------------------------------------------------------

    def step1(self):
        heading('Step 1 of 6 - a job on east takes "%s"' % JOB)
        say('''The nightly rollup is scheduled on both clusters, so that it
            still runs when one of them is down, but it must never run twice
            at the same time. It starts with a transaction-scoped exclusive
            lock: released by COMMIT or ROLLBACK, like
            pg_advisory_xact_lock, but held in ZooKeeper.''')
        out()
        self.ejob = self.session(self.east)
        self.ejob.run('BEGIN;')
        tok, took = self.ejob.value("SELECT zk_lock_exclusive('%s');" % JOB)
        event('granted in %s (first call: opens the ZooKeeper session too); '
              'fencing token %d' % (ms(took), tok), green('✔'))
        self.tok1 = tok
        self.grant(1, 'east job', JOB, tok)
        rows, _ = self.ejob.run('SELECT state, session_id, session_timeout, '
                                'server FROM zk_status();')
        table(['state', 'session_id', 'session_timeout', 'server'], rows)
        say('''The lock is an EPHEMERAL_SEQUENTIAL znode under
            /zklock/%s, owned by this backend's ZooKeeper session; its
            creation zxid is the fencing token.''' % JOB)

    def step2(self):
        heading('Step 2 of 6 - the same job on west waits')
        say('''West's run of the job asks for the same lock. ZooKeeper
            queues it behind east's node, and the backend sleeps on its latch
            until its predecessor's node goes away: visible in
            pg_stat_activity as wait_event_type 'Extension'.''')
        out()
        self.wjob = self.session(self.west)
        self.wadmin = self.session(self.west, 'postgres', 'dba')
        self.wjob.run('BEGIN;')
        self.wfut = self.wjob.start("SELECT zk_lock_exclusive('%s');" % JOB,
                                    '-- blocks')
        wait_extension(self.wadmin, self.wjob.pid)
        time.sleep(1)
        out()
        show_activity(self.wadmin, self.wjob.pid)

        say('''A Python service joins the queue too, with kazoo's own Lock
            recipe on the same znode (told to recognise zklock's Curator-style
            node names). zk_lock_queue() lists the whole queue as ZooKeeper
            has it, every client included; each waiter watches only the
            node just before it. The owner column is each node's data (the
            clusters' system identifiers are left out here).''')
        out()
        from kazoo.recipe.lock import Lock
        self.klock = Lock(self.kz, '/zklock/' + JOB,
                          identifier='billing-service (kazoo)',
                          extra_lock_patterns=('__WRIT__', '__READ__'))
        self.kres = {}
        self.kgot = threading.Event()

        def kazoo_job():
            try:
                self.kres['ok'] = self.klock.acquire(timeout=60)
                self.kres['at'] = time.monotonic()
            except Exception as e:
                self.kres['error'] = e
            self.kgot.set()
        event("billing-service: kazoo Lock('/zklock/%s').acquire()" % JOB,
              cyan('py  '))
        self.kthread = threading.Thread(target=kazoo_job, daemon=True)
        self.kthread.start()
        self.zi.wait_contenders(JOB, 3)
        out()
        show_queue(self.wadmin, JOB)

    def step3(self):
        heading('Step 3 of 6 - east commits, west proceeds')
        say('''East does its work and commits. COMMIT first confirms with
            the ensemble that east still owns its node
            (zklock.verify_at_commit), then deletes it; ZooKeeper notifies
            the next waiter.''')
        out()
        self.ejob.run("INSERT INTO rollup_runs (cluster, fencing_token) "
                      "VALUES ('east', %d);" % self.tok1)
        time.sleep(0.5)
        t_commit = time.monotonic()
        self.ejob.run('COMMIT;')
        tok = self.wfut.result(15)[0][0]
        handoff = self.wfut.done_at - t_commit
        waited = self.wfut.done_at - self.wfut.started_at
        event("west's zk_lock_exclusive returned %s after east's COMMIT "
              "(it waited %s in all); fencing token %d > %d"
              % (ms(handoff), ms(waited), tok, self.tok1), green('✔'))
        self.timings['handoff after COMMIT'] = handoff
        self.grant(3, 'west job', JOB, tok)
        self.tok3 = tok
        self.wjob.run("INSERT INTO rollup_runs (cluster, fencing_token) "
                      "VALUES ('west', %d);" % tok)
        time.sleep(0.3)
        t_commit = time.monotonic()
        self.wjob.run('COMMIT;')
        if not self.kgot.wait(15) or not self.kres.get('ok'):
            raise RuntimeError('the kazoo client did not get the lock: %r'
                               % self.kres)
        kstat = self.kz.exists('/zklock/%s/%s' % (JOB, self.klock.node))
        ktok = kstat.czxid if kstat else None
        event("billing-service (kazoo) got the lock %s after west's COMMIT%s"
              % (ms(self.kres['at'] - t_commit),
                 '; its node\'s czxid %d' % ktok if ktok else ''),
              green('✔'))
        if ktok:
            self.grant(3, 'billing-service (kazoo)', JOB, ktok)
        self.klock.release()
        event('billing-service released it', cyan('py  '))
        self.kthread.join(5)
        self.close(self.ejob, self.wjob)

    def step4(self):
        heading('Step 4 of 6 - shared and exclusive')
        say('''"%s": report readers take it shared, the job that rebuilds
            the catalog takes it exclusive. Readers share with each other;
            the writer waits for the readers before it; a reader that
            arrives after a queued writer waits for the writer (writers are
            not starved).''' % CATALOG)
        out()
        r1 = self.session(self.east, app='report-a')
        r2 = self.session(self.west, app='report-b')
        w = self.session(self.east, app='catalog-writer')
        r3 = self.session(self.west, app='report-c')
        for r in (r1, r2):
            r.run('BEGIN;')
            tok, took = r.value("SELECT zk_lock_shared('%s');" % CATALOG)
            event('%s: shared lock granted in %s (token %d)'
                  % (r.app, ms(took), tok), green('✔'))
            self.grant(4, '%s (%s, shared)' % (r.app, r.cluster.name),
                       CATALOG, tok)
        w.run('BEGIN;')
        wf = w.start("SELECT zk_lock_exclusive('%s');" % CATALOG, '-- blocks')
        wait_extension(self.eadmin, w.pid)
        r3.run('BEGIN;')
        rf = r3.start("SELECT zk_lock_shared('%s');" % CATALOG,
                      '-- blocks: a writer is queued before it')
        wait_extension(self.wadmin, r3.pid)
        out()
        show_queue(self.eadmin, CATALOG)
        out()
        r1.run('COMMIT;')
        time.sleep(0.3)
        if wf.done():
            raise RuntimeError('the writer got the lock while a reader held '
                               'it')
        event('the writer still waits: report-b still reads', yellow('…'))
        t = time.monotonic()
        r2.run('COMMIT;')
        tok = wf.result(15)[0][0]
        event('catalog-writer: exclusive lock granted %s after the last '
              "reader's COMMIT (token %d)" % (ms(wf.done_at - t), tok),
              green('✔'))
        self.grant(4, 'catalog-writer (east, exclusive)', CATALOG, tok)
        time.sleep(0.3)
        if rf.done():
            raise RuntimeError('the late reader got the lock while the writer '
                               'held it')
        event('report-c still waits for the writer', yellow('…'))
        t = time.monotonic()
        w.run('COMMIT;')
        tok = rf.result(15)[0][0]
        event("report-c: shared lock granted %s after the writer's COMMIT "
              '(token %d)' % (ms(rf.done_at - t), tok), green('✔'))
        self.grant(4, 'report-c (west, shared)', CATALOG, tok)
        r3.run('COMMIT;')
        self.close(r1, r2, w, r3)

    def step5(self):
        heading('Step 5 of 6 - the holder is killed with kill -9')
        say('''West's job holds the lock again and east's waits for it. Then
            the west backend holding the lock is killed with SIGKILL: it
            cannot close its ZooKeeper session, so its node stays until
            ZooKeeper expires the session, zklock.session_timeout = %d s
            after it last heard from it. Then the node vanishes and east
            gets the lock. (A backend that exits normally, or is ended with
            pg_terminate_backend, closes its session and hands the lock on
            at once.) PostgreSQL treats a backend killed by SIGKILL as a
            crash: west restarts all its backends and recovers, which is
            also shown.''' % SESSION_TIMEOUT_S)
        out()
        holder = self.session(self.west)
        waiter = self.session(self.east)
        holder.run('BEGIN;')
        tok, _ = holder.value("SELECT zk_lock_exclusive('%s');" % JOB)
        event('west holder (pid %d) has the lock, token %d'
              % (holder.pid, tok), green('✔'))
        self.grant(5, 'west job (then killed)', JOB, tok)
        self.tok_killed = tok
        waiter.run('BEGIN;')
        wf = waiter.start("SELECT zk_lock_exclusive('%s');" % JOB,
                          '-- blocks')
        wait_extension(self.eadmin, waiter.pid)
        [node] = [c for c in self.zi.contenders(JOB) if c.czxid == tok]
        out()
        out('%s  %s %s' % (dim(clock()), cyan('shell') + ' #',
                           bold('kill -9 %d' % holder.pid)))
        t_kill = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        # the killed backend's connection, and every other west session, is
        # gone with the crash restart: close them without waiting
        self.close(holder)
        self.close(self.wadmin)
        self.wadmin = None
        last_report = 0
        while not wf.done():
            now = time.monotonic() - t_kill
            if now > SESSION_TIMEOUT_S * 3 + 10:
                raise TimeoutError('east did not get the lock %.0f s after '
                                   'the kill' % now)
            if now - last_report >= 1.0:
                last_report = now
                present = self.kz.exists(node.path) is not None
                event('+%.1f s: west holder\'s node %s' % (
                    now, 'still in ZooKeeper (session not expired yet)'
                    if present else 'is gone'), yellow('…'))
            time.sleep(0.05)
        tok2 = wf.result(1)[0][0]
        after = wf.done_at - t_kill
        self.timings['handoff after kill -9'] = after
        event('east got the lock %.1f s after the kill '
              '(zklock.session_timeout = %d s); token %d'
              % (after, SESSION_TIMEOUT_S, tok2), green('✔'))
        self.grant(5, 'east job (after the kill)', JOB, tok2)
        self.tok_after_kill = tok2

        def west_back():
            try:
                c = self.west.connect(dbname=DB)
                c.close()
                return True
            except Exception:
                return False
        harness.wait_until(west_back, 60, 'west to accept connections again',
                           interval=0.2)
        self.wadmin = self.session(self.west, 'postgres', 'dba')
        crash = [l for l in self.west.log_tail(200).splitlines()
                 if 'terminated by signal 9' in l]
        if crash:
            event('west server log: %s' % crash[-1].split(' ', 3)[-1].strip(),
                  dim('log '))
        event('west is accepting connections again (crash restart done)',
              green('✔'))
        waiter.run("INSERT INTO rollup_runs (cluster, fencing_token) "
                   "VALUES ('east', %d);" % tok2)
        waiter.run('COMMIT;')
        self.close(waiter)

    def step6(self):
        heading('Step 6 of 6 - fencing tokens')
        say('''Every lock function returns the lock node's creation zxid.
            ZooKeeper's zxid grows with every write in the ensemble, so each
            grant of any lock carries a larger token than every grant before
            it (in hex: the leader's epoch, then a 32-bit counter). Here is
            every grant of this run, in order:''')
        out()
        table(['step', 'granted to', 'resource', 'fencing token',
               'the same in hex'],
              [g + ('0x%x' % g[3],) for g in self.grants])
        toks = [g[3] for g in self.grants]
        assert toks == sorted(toks) and len(set(toks)) == len(toks), toks
        say('''Why it matters: had the west job in step 5 been frozen (a
            long GC pause, a stalled VM) rather than killed, it would wake up
            believing it still holds the lock. Its own COMMIT is refused by
            zklock (the pre-commit check finds the node gone: SQLSTATE
            40001), but writes it sends to other systems are not. A
            downstream store that remembers the highest token it accepted
            rejects them:''')
        out()
        admin = self.eadmin
        admin.run('CREATE TABLE rollup_target (id int PRIMARY KEY, '
                  'result text,\n'
                  '                            fencing_token bigint NOT NULL);')
        admin.run("INSERT INTO rollup_target VALUES (1, 'initial', 0);")
        rows, _ = admin.run(
            "UPDATE rollup_target SET result = 'east run', fencing_token = %d"
            "\n WHERE id = 1 AND fencing_token <= %d RETURNING *;"
            % (self.tok_after_kill, self.tok_after_kill))
        event('accepted: %d row updated, the target now carries token %d'
              % (len(rows), self.tok_after_kill), green('✔'))
        rows, _ = admin.run(
            "UPDATE rollup_target SET result = 'stale west run', "
            "fencing_token = %d\n WHERE id = 1 AND fencing_token <= %d "
            "RETURNING *;" % (self.tok_killed, self.tok_killed))
        event('rejected: %d rows updated - token %d is older than %d'
              % (len(rows), self.tok_killed, self.tok_after_kill), red('✘'))
        say('What the jobs recorded on each cluster:')
        out()
        rows = []
        for s in (self.eadmin, self.wadmin):
            r, _ = s.run("SELECT cluster, fencing_token, "
                         "to_char(finished_at, 'HH24:MI:SS.MS') AS finished_at"
                         "\n  FROM rollup_runs;")
            rows += r
        out()
        table(['cluster', 'fencing_token', 'finished_at'],
              sorted(rows, key=lambda r: r[1]))
        leftovers = self.zi.leftovers()
        assert not leftovers, leftovers

    # -- the end -------------------------------------------------------------

    def run(self):
        self.start_servers()
        self.eadmin = self.session(self.east, 'postgres', 'dba')
        t = time.monotonic()
        for step in (self.step1, self.step2, self.step3, self.step4,
                     self.step5, self.step6):
            pause()
            step()
        self.timings['scenario'] = time.monotonic() - t

    def summary(self):
        heading('Done')
        out()
        for k, v in self.timings.items():
            out('  %-24s %s' % (k, ms(v)))
        out('  %-24s %s' % ('whole demo', ms(time.monotonic() - T0)))

    def leave_running(self):
        """KEEP=1: unregister everything from the harness's stop-at-exit,
        write a stop script and say how to connect."""
        for s in list(self.sessions):
            self.close(s)
        if self.kz is not None:
            self.kz.stop()
            self.kz.close()
        atexit.unregister(harness.stop_all)
        stop = os.path.join(self.workdir, 'stop.sh')
        lines = ['#!/bin/sh',
                 '# Stops the zklock demo started %s and deletes its files.'
                 % time.strftime('%Y-%m-%d %H:%M:%S'),
                 'cd /']
        for pg in (self.east, self.west):
            cmd = harness.as_pg_user([harness.PG_BIN + '/pg_ctl', '-D',
                                      pg.data_dir, '-m', 'fast', '-w', 'stop'])
            lines.append(shlex.join(cmd) + ' || true')
        for sid in self.zk.sids:
            pid = self.zk.pid(sid)
            cfg = os.path.join(self.zk.server_dir(sid), 'zoo.cfg')
            # the pid is only signalled while it is still this server
            lines.append(
                'grep -qF %s /proc/%d/cmdline 2>/dev/null && kill %d'
                % (shlex.quote(cfg), pid, pid))
        pids = ' '.join(str(self.zk.pid(sid)) for sid in self.zk.sids)
        lines += ['for pid in %s; do   # wait (at most 10 s each) until gone'
                  % pids,
                  '    for i in $(seq 50); do kill -0 $pid 2>/dev/null '
                  '|| break; sleep 0.2; done',
                  'done',
                  'rm -rf %s' % shlex.quote(self.workdir),
                  'echo "zklock demo stopped"']
        with open(stop, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        os.chmod(stop, 0o755)
        psql = harness.PG_BIN + '/psql'
        heading('KEEP=1: everything is still running')
        out()
        out('  east:       %s -h 127.0.0.1 -p %d -U etl %s'
            % (psql, self.east.port, DB))
        out('  west:       %s -h 127.0.0.1 -p %d -U etl %s'
            % (psql, self.west.port, DB))
        out('              (-U postgres for the superuser; trust '
            'authentication on 127.0.0.1)')
        out('  ZooKeeper:  /usr/share/zookeeper/bin/zkCli.sh -server %s'
            % self.zk.connect_string)
        out('  logs:       %s/{pg-east,pg-west}/postgresql.log, '
            '%s/zk/server*/zookeeper.log' % (self.workdir, self.workdir))
        out('  stop:       sh %s' % stop)
        out()
        out('  Try it, with one psql on each cluster:')
        out("    east=> BEGIN; SELECT zk_lock_exclusive('%s');" % JOB)
        out("    west=> BEGIN; SELECT zk_lock_exclusive('%s');"
            "   -- waits" % JOB)
        out("    east=> SELECT * FROM zk_lock_queue('%s');" % JOB)
        out("    east=> COMMIT;"
            "                                          -- west proceeds")

    def teardown(self):
        for s in list(self.sessions):
            try:
                self.close(s)
            except Exception:
                pass
        if self.kz is not None:
            try:
                self.kz.stop()
                self.kz.close()
            except Exception:
                pass
        harness.stop_all()


def main():
    try:                    # a terminal that cannot show ✔ gets '?'
        sys.stdout.reconfigure(errors='replace')
    except (AttributeError, ValueError):
        pass
    keep = os.environ.get('KEEP', '') not in ('', '0', 'no', 'false') \
        or '--keep' in sys.argv[1:]
    harness.install_signal_handlers()
    out(bold('zklock demo') + ': ZooKeeper distributed locks taken from SQL, '
        'across two PostgreSQL clusters')
    demo = Demo(keep)
    ok = False
    try:
        demo.run()
        demo.summary()
        ok = True
    except KeyboardInterrupt:
        out(red('\ninterrupted'))
    except SystemExit as e:             # SIGTERM/SIGHUP (harness handlers)
        out(red('\nstopped by signal %s' % (e.code - 128 if isinstance(
            e.code, int) and e.code > 128 else e.code)))
    except BaseException as e:
        out()
        out(red('demo failed: %s: %s' % (type(e).__name__, e)))
        import traceback
        demo._log(traceback.format_exc())
    if ok and keep:
        demo.leave_running()
        return 0
    out()
    out(dim('stopping PostgreSQL east and west, then ZooKeeper ...'))
    demo.teardown()
    demo.logfile.close()
    if ok:
        shutil.rmtree(demo.workdir, ignore_errors=True)
        out('everything the demo started is stopped.  (KEEP=1 make demo '
            'leaves it running.)')
        return 0
    out('logs kept in %s' % demo.workdir)
    return 1


if __name__ == '__main__':
    sys.exit(main())
