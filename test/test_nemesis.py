"""
The nemesis (issue 14): real network partitions between ZooKeeper
servers and PostgreSQL clusters, and a judge that checks afterwards that
no lost lock ever committed.

Topology (test/lib/nemesis.py), built once in module_setup and removed
in module_teardown (and at exit) whatever happens:

  * a bridge in a namespace of its own; nftables rules on it (bridge
    family, forward hook) cut, heal and degrade the links;
  * ZooKeeper servers zk1..zk3, each in its own namespace (198.18.0.x,
    ports 2181/2888/3888), tickTime 1000 ms and syncLimit 10: a follower
    cut from the leader keeps serving for 10 s, longer than the session
    timeout;
  * PostgreSQL clusters A (node pga) and B (node pgb), each in its own
    namespace, zklock.session_timeout 4 s, reached by the test through
    their Unix sockets;
  * node obs, never cut: the test's kazoo client and four letter words;
  * the judge: database zklock_nem on the runner's main cluster, in the
    root namespace.  Every critical section writes its record there
    through postgres_fdw, inside the transaction that holds the zklock
    lock, so the record is committed if and only if that transaction
    commits (zklock's pre-commit check runs before postgres_fdw commits
    the remote side).

A critical section (class Load): BEGIN; token = zk_lock_exclusive(res);
t0; INSERT INTO nem_hist (judge, through postgres_fdw) the section's id,
its token and `prev`, the greatest exclusive token already committed for
res; a short pause; t1; COMMIT.  Readers take zk_lock_shared, read that
greatest token twice over a direct judge connection (it must not move
under a shared lock) and record a shared row.  t0 and t1 are taken in
this process on one monotonic clock, inside the hold (t1 before COMMIT is
sent); the wall clock at t1 is kept too.

Checked after every scenario (Judge.check):
  * the judge's committed rows are exactly the sections whose COMMIT
    returned success (a refused COMMIT committed nothing, remotely
    either);
  * no two committed sections of one lock overlap ([t0, t1], a writer
    with anyone);
  * no lost update: ordered by token, each committed exclusive section's
    `prev` is the token of the committed exclusive section before it
    (two sections that read the same `prev` both committed: a lost
    update);
  * fencing tokens grow in grant order; a reader never saw the greatest
    token move;
  * ZooKeeper's own record (the servers' transaction logs): the node of
    every committed section was still there at the leader when its
    COMMIT was sent (its delete, or its session's close or expiry, was
    logged by the leader after t1 on the wall clock);
  * no contender and no watch is left (on any server), the lock is
    usable again within session timeout + a margin after healing, and
    every worker backend still answers.  A healed ensemble must commit a
    write first: ZooKeeper 3.8.0 once wedged after flapping, every
    server serving and nothing committing, and is then restarted and
    logged as such, recovery counted from its first write (see heal).

Figures: critical sections, commits refused with 40001, other errors by
SQLSTATE, recovery times, packets dropped.

On b26fa8f (before the pre-commit `sync`, and before zklock's check ran
ahead of postgres_fdw's commit) test_1 fails (the stale holder's COMMIT
succeeds: overlap, lost update and ZooKeeper's log all flag it) and so
does test_2 (the refused holder's remote work was committed by
postgres_fdw).  test_1b checks the manual's "the next lock call opens a
fresh session by itself" when the call is the one that learns of the
expiry.

In short, this module checks: real network faults (Jepsen-style): each of 3
ZooKeeper servers and 2 PostgreSQL clusters in a network namespace of its
own, joined by a bridge, cut and degraded with nftables (198.18.0.0/24, all
removed at the end): a follower cut from the leader while a holder stays on
it (its COMMIT must fail), a cluster cut from the ensemble past the session
timeout, a minority leader, 30 % packet loss, flapping partitions; a judge
(rows written through postgres_fdw inside the locked transactions, fencing
tokens, ZooKeeper's own transaction logs) finds no overlap, no lost update,
no commit without the lock as the leader saw it, nothing left behind, the
lock usable again after healing.
"""

import logging
import os
import random
import threading
import time

import psycopg2

import harness
import nemesis
from harness import wait_until
from test_ensemble import synced, wait_contenders
from test_multisession import LOCK_X, LOCK_S, token_of

TIMEOUT = 150                   # seconds per test (enforced by the runner)
SETUP_TIMEOUT = 240

DB = 'nem'                      # on A and B
JUDGE_DB = 'zklock_nem'         # on the runner's main cluster
ROOT = '/zklock'
TICK_MS = 1000
SYNC_LIMIT = 10                 # a cut-off follower serves for 10 s
SESSION_TIMEOUT_S = 4           # shorter than SYNC_LIMIT x TICK_MS
CONNECT_TIMEOUT_S = 10
MARGIN_S = 6
# SQLSTATEs a worker may get while the network is broken:
# 40001 lost lock at COMMIT, 55P03 not granted in time, 08001 no session
# in time, 08006 session expired while waiting, 55000 own node gone
# while waiting.  Anything else (XX000, a closed connection) fails.
FAULT_STATES = {'40001', '55P03', '08001', '08006', '55000'}


# ---------------------------------------------------------------------------
# module setup
# ---------------------------------------------------------------------------

def module_setup(ctx):
    sh = ctx.shared
    sh.clusters = []
    sh.net = nemesis.Network().start()
    sh.net.add_node('obs')
    sh.ens = nemesis.NsZooKeeper(sh.net, n=3, tick_ms=TICK_MS,
                                 sync_limit=SYNC_LIMIT, init_limit=10,
                                 base_dir=ctx.workdir, name='nem')
    sh.ens.start(timeout=120)
    sh.ens.wait_synced(60)
    # the judge, outside every namespace
    judge = ctx.pg
    judge.psql('DROP DATABASE IF EXISTS %s' % JUDGE_DB)
    judge.psql('CREATE DATABASE %s' % JUDGE_DB)
    judge.psql('CREATE TABLE nem_hist (id text PRIMARY KEY, res text NOT '
               'NULL, mode text NOT NULL, token bigint NOT NULL, prev bigint '
               'NOT NULL, worker text NOT NULL, cluster text NOT NULL)',
               dbname=JUDGE_DB)
    judge.psql('CREATE INDEX ON nem_hist (res, mode, token)', dbname=JUDGE_DB)
    sh.judge = judge
    conf = {
        'zklock.hosts': sh.ens.connect_string,
        'zklock.root': ROOT,
        'zklock.session_timeout': '%ds' % SESSION_TIMEOUT_S,
    }
    sh.a = nemesis.NsPgCluster(sh.net, 'pga', 'nem-a', conf,
                               base_dir=ctx.workdir)
    sh.b = nemesis.NsPgCluster(sh.net, 'pgb', 'nem-b', conf,
                               base_dir=ctx.workdir)
    for c in (sh.a, sh.b):
        c.start()
        sh.clusters.append(c)
        c.psql('CREATE DATABASE %s' % DB)
        c.psql("ALTER DATABASE %s SET zklock.connect_timeout = '%ds'"
               % (DB, CONNECT_TIMEOUT_S))
        for sql in (
                'CREATE EXTENSION zklock',
                'CREATE EXTENSION postgres_fdw',
                "CREATE SERVER judge FOREIGN DATA WRAPPER postgres_fdw "
                "OPTIONS (host '%s', port '%d', dbname '%s')"
                % (judge.socket_dir, judge.port, JUDGE_DB),
                "CREATE USER MAPPING FOR postgres SERVER judge "
                "OPTIONS (user 'postgres')",
                'IMPORT FOREIGN SCHEMA public LIMIT TO (nem_hist) '
                'FROM SERVER judge INTO public'):
            c.psql(sql, dbname=DB)
    quiet = logging.getLogger('zklock.test_nemesis.kazoo')
    quiet.setLevel(logging.ERROR)
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    sh.kz = nemesis.kazoo_in(sh.net, 'obs', sh.ens.connect_string,
                             logger=quiet)
    sh.zi = harness.ZkInspector(sh.kz, ROOT)
    sh.kz.ensure_path(PROBE)
    sh.wedges = []
    sh.judges = []
    ctx.log('network %s; ensemble %s (leader zk%s); A %s, B %s'
            % (sh.net.prefix, sh.ens.connect_string, sh.ens.leader(),
               sh.a.socket_dir, sh.b.socket_dir))


def module_teardown(ctx):
    sh = ctx.shared
    errors = harness.stop_shared(sh, ('a', 'b', 'ens', 'net'))
    net = getattr(sh, 'net', None)
    if net is not None:
        left = net.leftovers()
        if left:
            errors.append('namespaces left: %s' % left)
    try:
        ctx.pg.psql('DROP DATABASE IF EXISTS %s' % JUDGE_DB)
    except Exception as e:
        errors.append('judge database: %s' % e)
    assert not errors, 'teardown: %s' % '; '.join(errors)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def backend(ctx, cluster, name):
    return ctx.backend(name, dbname=DB, cluster=cluster)




# A healed ensemble whose every server serves and counts its followers
# synced, and yet commits no write for this long, is wedged (see heal).
WEDGE_S = 15
PROBE = '/nemesis-probe'    # outside the root the judges look at


def ensemble_writes(sh, timeout):
    """Whether a write through the ensemble (kazoo's setData on PROBE,
    from the node no fault ever cuts) commits within timeout seconds."""
    from kazoo.exceptions import KazooException
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            sh.kz.set_async(PROBE, b'probe').get(timeout=left)
            return True
        except (KazooException, sh.kz.handler.timeout_exception):
            # a connection loss (kazoo reconnects) or no commit in time:
            # tried again, paced, until the deadline
            time.sleep(0.1)


def heal(sh, timeout=90):
    """No rule left, all three servers serving and synced, kazoo back, and
    a write committed.  Returns None, or when the ensemble was writable
    again after a restart (monotonic), from which recovery is measured.

    ZooKeeper 3.8.0 can wedge after flapping: in a CI run (test_5 on 16,
    seed 837468806) the leader, isolated for 3.1 s (less than syncLimit),
    kept leading; at the heal its followers dropped it, synced again
    within 60 ms (DIFF, every server serving and the leader counting two
    synced followers), and from then on nothing committed for the
    50 s the logs cover: every new session's createSession went
    unanswered (the clients' connects timed out at every server, 08001),
    and the leader's closeSession of each expired session never took
    effect (its nodes stayed).  No client can cause or end that.  So a
    heal that leaves the ensemble unable to commit within WEDGE_S is
    logged as ZooKeeper's and ended as an operator would end it: every
    server restarted; zklock's recovery is then measured from the first
    write the restarted ensemble commits."""
    sh.net.heal()
    sh.ens.start_servers(timeout=timeout)
    wait_until(lambda: sh.kz.connected, 30, 'kazoo to reconnect')
    if ensemble_writes(sh, WEDGE_S):
        return None
    what = ('ZooKeeper wedged after the heal: every server serving and '
            'synced (leader zk%s), no write committed in %d s; every '
            'server restarted' % (sh.ens.leader(), WEDGE_S))
    harness.log(what)
    sh.wedges.append(what)
    for sid in sh.ens.sids:
        sh.ens.stop_server(sid)
    sh.ens.start_servers(timeout=timeout)
    wait_until(lambda: sh.kz.connected, 30, 'kazoo to reconnect')
    assert ensemble_writes(sh, WEDGE_S), \
        'the restarted ensemble commits no write in %d s either' % WEDGE_S
    return time.monotonic()


def wait_no_watches(sh, timeout=SESSION_TIMEOUT_S + MARGIN_S):
    """No data watch under the root on any server, and no watch at all
    (mntr's count: data and child watches) on any server."""
    last = {}

    def none_left():
        w = sh.ens.watches_by_path()
        last['paths'] = {p: s for p, s in w.items()
                         if p.startswith(ROOT + '/') and s}
        try:
            last['counts'] = sh.ens.watch_counts()
        except RuntimeError as e:
            # a server just healed answers "not currently serving
            # requests" until it has rejoined the quorum: not yet
            last['counts'] = str(e)
            return False
        return not last['paths'] and last['counts'] == {'data': 0,
                                                        'child': 0}
    try:
        wait_until(none_left, timeout, 'no watch left', interval=0.2)
    except TimeoutError as e:
        raise AssertionError('%s: %r' % (e, last)) from None


def status(b):
    rows = b.query('SELECT state, session_id, server, lost_locks '
                   'FROM zk_status()')
    return dict(zip(('state', 'session_id', 'server', 'lost_locks'),
                    rows[0]))


def judge_rows(sh, res):
    c = sh.judge.connect(dbname=JUDGE_DB)
    try:
        with c.cursor() as cur:
            cur.execute('SELECT id, mode, token, prev, worker FROM nem_hist '
                        'WHERE res = %s', [res])
            return cur.fetchall()
    finally:
        c.close()


def judge_max(sh, res):
    c = sh.judge.connect(dbname=JUDGE_DB)
    try:
        with c.cursor() as cur:
            cur.execute("SELECT coalesce(max(token), 0) FROM nem_hist "
                        "WHERE res = %s AND mode = 'exclusive'", [res])
            return cur.fetchone()[0]
    finally:
        c.close()


INSERT_X = ("INSERT INTO nem_hist (id, res, mode, token, prev, worker, "
            "cluster) SELECT %s, %s, 'exclusive', %s, coalesce(max(token), "
            "0), %s, %s FROM nem_hist WHERE res = %s AND mode = 'exclusive'")
INSERT_S = ("INSERT INTO nem_hist (id, res, mode, token, prev, worker, "
            "cluster) VALUES (%s, %s, 'shared', %s, %s, %s, %s)")
MAX_X = ("SELECT coalesce(max(token), 0) FROM nem_hist "
         "WHERE res = %s AND mode = 'exclusive'")


# ---------------------------------------------------------------------------
# the judge's record of critical sections
# ---------------------------------------------------------------------------

class Section:
    """One critical section as its worker saw it."""
    __slots__ = ('id', 'worker', 'mode', 'token', 't0', 't1', 'w1',
                 'outcome', 'error')

    def __init__(self, id, worker, mode, token, t0, t1, w1):
        self.id, self.worker, self.mode, self.token = id, worker, mode, token
        self.t0, self.t1, self.w1 = t0, t1, w1
        self.outcome = None           # 'ok', a SQLSTATE, or 'unknown'
        self.error = None

    def __repr__(self):
        return '<%s %s %s tok=0x%x [%.3f, %.3f] %s>' % (
            self.id, self.worker, self.mode, self.token, self.t0, self.t1,
            self.outcome)


class Judge:
    """Collects sections (from a Load or by hand) of one lock and checks
    them against the judge table and ZooKeeper's transaction logs."""

    def __init__(self, sh, res):
        self.sh = sh
        self.res = res
        self.sections = []
        self.torn = []
        self.base = judge_max(sh, res)
        self._lock = threading.Lock()
        sh.judges.append(self)

    def add(self, sec):
        with self._lock:
            self.sections.append(sec)

    def check(self, ctx, what):
        """Every invariant (all of them are checked, every violation is
        reported at once); returns (committed sections, refused)."""
        problems = []
        rows = judge_rows(self.sh, self.res)
        committed_ids = {r[0] for r in rows}
        by_id = {s.id: s for s in self.sections}
        # 1. the judge agrees with what COMMIT said
        stray = sorted(committed_ids - set(by_id))
        if stray:
            problems.append('judge rows of no known section: %s' % stray[:5])
        lies = [s for s in self.sections
                if (s.outcome == 'ok') != (s.id in committed_ids)
                and s.outcome != 'unknown']
        if lies:
            problems.append(
                'COMMIT outcome and the judge disagree (a refused COMMIT '
                'whose remote work committed, or a success that left no '
                'row): %r' % lies[:5])
        committed = [by_id[i] for i in committed_ids if i in by_id]
        # 2. no two committed sections overlap
        secs = sorted(committed, key=lambda s: s.t0)
        overlaps = []
        for i, s in enumerate(secs):
            for t in secs[i + 1:]:
                if t.t0 >= s.t1:
                    break
                if 'exclusive' in (s.mode, t.mode):
                    overlaps.append((s, t))
        if overlaps:
            problems.append('%d pair(s) of committed critical sections '
                            'overlap (two holders committed): %r'
                            % (len(overlaps), overlaps[:3]))
        # 3. no lost update: the committed exclusive chain is linear
        xrows = sorted((r for r in rows if r[1] == 'exclusive'),
                       key=lambda r: r[2])
        prev = self.base
        forks = []
        for r in xrows:
            if r[3] != prev:
                forks.append('%s (token 0x%x) read prev 0x%x, the committed '
                             'one before it is 0x%x' % (r[0], r[2], r[3],
                                                        prev))
            prev = r[2]
        if forks:
            problems.append('lost update(s): %s' % forks[:3])
        # 4. tokens grow in grant order; readers saw nothing move
        xs = sorted((s for s in committed if s.mode == 'exclusive'),
                    key=lambda s: s.t0)
        back = [(a, b) for a, b in zip(xs, xs[1:]) if b.token <= a.token]
        if back:
            problems.append('fencing token went backwards: %r' % back[:3])
        if self.torn:
            problems.append('the greatest token moved under a shared lock: '
                            '%r' % self.torn[:3])
        # 5. nothing left in the queue, no watch
        for fn, args in ((wait_contenders,
                          (self.sh, self.res, 0,
                           SESSION_TIMEOUT_S + MARGIN_S)),
                         (wait_no_watches, (self.sh,))):
            try:
                fn(*args)
            except AssertionError as e:
                problems.append(str(e))
        # 6. ZooKeeper's record: held, as the leader saw it, at COMMIT
        problems += self.check_txn_logs(committed)
        assert not problems, '%s: %d violation(s):\n  %s' % (
            what, len(problems), '\n  '.join(problems))
        refused = sum(1 for s in self.sections if s.outcome == '40001')
        return committed, refused

    def check_txn_logs(self, committed):
        dirs = [os.path.join(self.sh.ens.server_dir(s), 'data')
                for s in self.sh.ens.sids]
        hist = nemesis.TxnHistory(nemesis.read_txn_logs(dirs))
        bad = []
        for s in committed:
            t, how = hist.removal(s.token)
            if t is None:
                # every node is gone by now (checked above): its end must
                # be in the logs
                bad.append('%r: %s' % (s, how))
                continue
            if t.time_ms < s.w1 * 1000 - 5:
                bad.append('%r: the leader ended its node (%s, zxid 0x%x) '
                           '%.0f ms before its COMMIT was sent'
                           % (s, how, t.zxid, s.w1 * 1000 - t.time_ms))
        return ['committed without holding the lock as the leader saw it '
                '(ZooKeeper\'s transaction log): %s' % b for b in bad[:5]]


# ---------------------------------------------------------------------------
# the load
# ---------------------------------------------------------------------------

class Load:
    """`per_cluster` workers on each of A and B (the first `readers` of
    each cluster take the lock shared), each doing critical sections on
    `res` until told to stop, at most `max_sections` each and never past
    `deadline_s`.  Errors are counted by SQLSTATE and the worker goes on
    (after a short pause), so a scenario sees every error."""

    def __init__(self, ctx, res, per_cluster=3, readers=0,
                 max_sections=3000, deadline_s=100, lock_timeout='20 seconds',
                 pause=(0.001, 0.004), think=(0.002, 0.01)):
        self.ctx = ctx
        self.sh = ctx.shared
        self.res = res
        self.judge = Judge(self.sh, res)
        self.max_sections = max_sections
        self.deadline_s = deadline_s
        self.lock_timeout = lock_timeout
        self.pause = pause
        self.think = think
        self.stop_ev = threading.Event()
        self.done = {}                # worker -> sections attempted
        self.errors = []              # (time, worker, stage, sqlstate, text)
        self.fatal = []
        self.ok_times = {}            # worker -> [t0 of committed sections]
        self.hold_at = None           # (worker name, n): hold the n-th
        self.held = threading.Event()
        self.resume = threading.Event()
        self.held_section = None
        self._lock = threading.Lock()
        self.workers = []
        for cluster, tag in ((self.sh.a, 'A'), (self.sh.b, 'B')):
            for i in range(per_cluster):
                mode = 'shared' if i < readers else 'exclusive'
                self.workers.append(('%s%d%s' % (tag, i, mode[0]), cluster,
                                     mode))
        self.threads = [threading.Thread(target=self._work, args=w,
                                         daemon=True, name='nem-' + w[0])
                        for w in self.workers]

    def start(self):
        self.t_start = time.monotonic()
        self.deadline = self.t_start + self.deadline_s
        for t in self.threads:
            t.start()
        return self

    def committed_since(self, t, cluster_tag=None):
        with self._lock:
            return sum(1 for w, ts in self.ok_times.items()
                       if cluster_tag is None or w[0] == cluster_tag
                       for x in ts if x > t)

    def first_grant_after(self, t, cluster_tag):
        with self._lock:
            xs = [x for w, ts in self.ok_times.items()
                  if w[0] == cluster_tag for x in ts if x > t]
        return min(xs) if xs else None

    def wait_committed(self, n, t, timeout, cluster_tag=None, what=''):
        wait_until(lambda: self.committed_since(t, cluster_tag) >= n,
                   timeout, '%d committed section(s)%s %s'
                   % (n, ' on ' + cluster_tag if cluster_tag else '', what),
                   interval=0.05)

    def wait_all_after(self, t, timeout):
        """Every worker commits a section that began after t."""
        def all_did():
            with self._lock:
                return all(any(x > t for x in self.ok_times.get(w, []))
                           for w, _, _ in self.workers)
        try:
            wait_until(all_did, timeout, 'every worker to commit after the '
                       'heal', interval=0.1)
        except TimeoutError as e:
            with self._lock:
                idle = [w for w, _, _ in self.workers
                        if not any(x > t for x in self.ok_times.get(w, []))]
                errs = [x for x in self.errors if x[0] > t][-10:]
            raise AssertionError('%s: idle %s (sections so far %r); errors '
                                 'since: %r' % (e, idle, self.done, errs)) \
                from None

    def longest_pause(self, since, until):
        """The longest time without a grant (of a committed section)
        overlapping [since, until]."""
        with self._lock:
            ts = sorted(x for v in self.ok_times.values() for x in v)
        gaps = [b - a for a, b in zip(ts, ts[1:]) if b >= since and a <= until]
        return max(gaps, default=0.0)

    def stop(self):
        self.stop_ev.set()
        self.resume.set()
        for t in self.threads:
            t.join(max(1.0, self.deadline + 30 - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        assert not alive, 'load workers still running: %s' % alive
        self.t_end = time.monotonic()

    def _error(self, name, stage, e):
        code = getattr(e, 'pgcode', None)
        text = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        with self._lock:
            self.errors.append((time.monotonic(), name, stage, code, text))
            if code not in FAULT_STATES:
                self.fatal.append((name, stage, code, text))

    def _work(self, name, cluster, mode):
        judge = self.judge
        try:
            lc = cluster.connect(dbname=DB, application_name='nem-' + name)
            jc = self.sh.judge.connect(dbname=JUDGE_DB)
        except Exception as e:
            self._error(name, 'connect', e)
            return
        n = 0
        lock_sql = LOCK_S if mode == 'shared' else LOCK_X
        try:
            lcur, jcur = lc.cursor(), jc.cursor()
            while n < self.max_sections and not self.stop_ev.is_set() \
                    and time.monotonic() < self.deadline:
                sid = '%s-%s-%d' % (self.res, name, n)
                n += 1
                stage = 'begin'
                sec = None
                try:
                    lcur.execute('BEGIN')
                    stage = 'lock'
                    lcur.execute(lock_sql, [self.res, self.lock_timeout])
                    token = lcur.fetchone()[0]
                    t0 = time.monotonic()
                    stage = 'section'
                    if self.hold_at == (name, n - 1):
                        self.held.set()
                        self.resume.wait(60)
                    if mode == 'exclusive':
                        lcur.execute(INSERT_X, [sid, self.res, token, name,
                                                cluster.name, self.res])
                        time.sleep(random.uniform(*self.pause))
                    else:
                        jcur.execute(MAX_X, [self.res])
                        v1 = jcur.fetchone()[0]
                        lcur.execute(INSERT_S, [sid, self.res, token, v1,
                                                name, cluster.name])
                        time.sleep(random.uniform(*self.pause))
                        jcur.execute(MAX_X, [self.res])
                        v2 = jcur.fetchone()[0]
                        if v1 != v2:
                            judge.torn.append((sid, v1, v2))
                    t1, w1 = time.monotonic(), time.time()
                    sec = Section(sid, name, mode, token, t0, t1, w1)
                    if self.hold_at == (name, n - 1):
                        self.held_section = sec
                    judge.add(sec)
                    stage = 'commit'
                    lcur.execute('COMMIT')
                    sec.outcome = 'ok'
                    with self._lock:
                        self.ok_times.setdefault(name, []).append(t0)
                    self.stop_ev.wait(random.uniform(*self.think))
                except psycopg2.Error as e:
                    if sec is None and stage == 'section':
                        # a statement of the section refused or canceled
                        # under a lock found lost (zklock.cancel_on_loss):
                        # a section that must have committed nothing
                        sec = Section(sid, name, mode, token, t0,
                                      time.monotonic(), time.time())
                        if self.hold_at == (name, n - 1):
                            self.held_section = sec
                        judge.add(sec)
                    if sec is not None:
                        sec.outcome = e.pgcode or 'unknown'
                        sec.error = str(e).strip()
                    self._error(name, stage, e)
                    if lc.closed:
                        break
                    try:
                        lcur.execute('ROLLBACK')
                    except psycopg2.Error as e2:
                        self._error(name, 'rollback', e2)
                        if lc.closed:
                            break
                    self.stop_ev.wait(0.1)
            self.done[name] = n
            # every backend still answers
            try:
                lcur.execute('SELECT 1')
            except psycopg2.Error as e:
                self._error(name, 'final SELECT 1', e)
                with self._lock:
                    self.fatal.append((name, 'final', None, str(e)))
        finally:
            for c in (lc, jc):
                try:
                    c.close()
                except Exception:
                    pass

    # -- results ----------------------------------------------------------

    def error_counts(self):
        counts = {}
        for _, _, stage, code, _ in self.errors:
            key = '%s@%s' % (code, stage)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def check(self, ctx, what, t_heal=None):
        assert not self.fatal, '%s: unexpected errors: %r' % (
            what, self.fatal[:10])
        committed, refused = self.judge.check(ctx, what)
        assert committed, '%s: no critical section committed' % what
        if t_heal is not None:
            idle = [w for w, _, _ in self.workers
                    if not any(x > t_heal for x in self.ok_times.get(w, []))]
            assert not idle, '%s: worker(s) %s never committed after the ' \
                'heal' % (what, idle)
        return committed, refused

    def figures(self, ctx, label, committed, refused):
        ctx.figure('%s: critical sections committed' % label, len(committed))
        ctx.figure('%s: commits refused (40001)' % label, refused)
        errs = self.error_counts()
        ctx.figure('%s: errors by SQLSTATE@stage' % label,
                   ', '.join('%s %d' % kv for kv in sorted(errs.items()))
                   or 'none')


def recovery(ctx, load, t_heal, label):
    """Time from the heal (or, if ZooKeeper wedged, from the restarted
    ensemble's first write: see heal) to the first committed section on
    each cluster (bounded by session timeout + margin)."""
    for what in sh_wedges_unreported(ctx):
        ctx.log('%s: %s' % (label, what))
    bound = SESSION_TIMEOUT_S + MARGIN_S
    out = {}
    for tag in ('A', 'B'):
        try:
            load.wait_committed(1, t_heal, bound, tag, 'after the heal')
        except TimeoutError:
            raise AssertionError(
                '%s: no section committed on %s within %d s of the heal; '
                'errors since: %r' % (label, tag, bound,
                                      [e for e in load.errors
                                       if e[0] > t_heal][:10])) from None
        out[tag] = load.first_grant_after(t_heal, tag) - t_heal
        ctx.figure('%s: first grant on %s after the heal' % (label, tag),
                   out[tag], 's', '%.2f')
    return out


def sh_wedges_unreported(ctx):
    """The wedges heal() met since the last call (see heal)."""
    sh = ctx.shared
    new = sh.wedges[getattr(sh, 'wedges_reported', 0):]
    sh.wedges_reported = len(sh.wedges)
    return new


def lock_after_expiry(b, res):
    """Lock `res` in b's open transaction, after b's session expired
    during a partition.  Returns (token, whether the first call failed
    with 08006 'ZooKeeper session expired' and a second one was needed;
    the transaction is then rolled back and begun again)."""
    bound = SESSION_TIMEOUT_S + MARGIN_S
    fut = b.submit(LOCK_X, [res, '%d seconds' % bound])
    try:
        return token_of(fut, bound + 5, '%s locking again' % b.name), False
    except psycopg2.Error as e:
        if e.pgcode != '08006':
            raise
    b.query('ROLLBACK')
    b.query('BEGIN')
    return token_of(b.submit(LOCK_X, [res, '%d seconds' % bound]),
                    bound + 5, '%s locking again (2nd call)' % b.name), True


def lock_again(ctx, sh, res, label):
    """A fresh backend on each cluster takes and releases the lock."""
    for c in (sh.a, sh.b):
        b = backend(ctx, c, 'nem-again-%s' % c.name)
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, '%d seconds'
                                   % (SESSION_TIMEOUT_S + MARGIN_S)]),
                 SESSION_TIMEOUT_S + MARGIN_S + 5,
                 '%s: lock on %s after the heal' % (label, c.name))
        b.query('COMMIT')
        b.close()
    wait_contenders(sh, res, 0)


# ---------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------

def test_1_follower_cut_from_leader(ctx):
    """Issue 14's scenario.  A's backend is connected to follower F only,
    B's to the leader only.  A holds 'stale' and has written its record;
    B waits.  Every packet between F and the leader is dropped (A's link
    to F stays up).  The leader expires A's session after the session
    timeout and B gets the lock; F, cut off but still serving (for
    syncLimit x tickTime = 10 s), still has A's node.  A's COMMIT must
    fail with 40001: its pre-commit check must reach the leader (sync).
    Fails on b26fa8f, where the check was a plain exists on F."""
    sh = ctx.shared
    res = 'nem/stale'
    judge = Judge(sh, res)
    leader = sh.ens.leader()
    assert leader is not None
    f, g = [s for s in sh.ens.sids if s != leader]
    a = backend(ctx, sh.a, 'nem-stale-A')
    b = backend(ctx, sh.b, 'nem-stale-B')
    a.query("SET zklock.hosts = '%s'" % sh.ens.host_port(f))
    b.query("SET zklock.hosts = '%s'" % sh.ens.host_port(leader))

    def section(be, name, tok, t0):
        sid = '%s-%s' % (res, name)
        be.query(INSERT_X, [sid, res, tok, name, be.cluster.name, res])
        sec = Section(sid, name, 'exclusive', tok, t0, None, None)
        judge.add(sec)
        return sec

    cut = False
    try:
        a.query('BEGIN')
        tok_a = token_of(a.submit(LOCK_X, [res, '30 seconds']), 30,
                         'A taking the lock')
        t0_a = time.monotonic()
        assert sh.ens.sid_of(status(a)['server']) == f, status(a)
        sec_a = section(a, 'A', tok_a, t0_a)
        b.query('BEGIN')
        fut_b = b.submit(LOCK_X, [res, '60 seconds'])
        wait_contenders(sh, res, 2)
        assert not fut_b.done(), 'B got the lock while A holds it'
        assert sh.ens.sid_of(status(a)['server']) == f

        t_cut = time.monotonic()
        sh.net.partition([sh.ens.node(f)], [sh.ens.node(leader)])
        cut = True
        tok_b = token_of(fut_b, SESSION_TIMEOUT_S + MARGIN_S + 5,
                         'B, after A\'s session expired at the leader')
        t_grant = time.monotonic()
        assert tok_b > tok_a
        sec_b = section(b, 'B', tok_b, t_grant)
        # F is still serving from its stale copy, which still holds A's node
        assert sh.ens.mode(f) == 'follower', \
            'F stopped serving before the check could be tested; ' \
            'mode %r' % sh.ens.mode(f)
        sec_a.t1, sec_a.w1 = time.monotonic(), time.time()
        fut_c = a.submit('COMMIT')
        try:
            fut_c.result(SESSION_TIMEOUT_S + MARGIN_S + 5)
            sec_a.outcome = 'ok'
        except psycopg2.Error as e:
            sec_a.outcome = e.pgcode or 'unknown'
            sec_a.error = str(e)
        t_refused = time.monotonic() - sec_a.t1
        sec_b.t1, sec_b.w1 = time.monotonic(), time.time()
        b.query('COMMIT')
        sec_b.outcome = 'ok'
        if sec_a.outcome == 'ok':
            # what the judge and ZooKeeper's own record say about it
            heal(sh)
            cut = False
            try:
                judge.check(ctx, 'follower cut')
                verdict = 'the judge found nothing (!)'
            except AssertionError as e:
                verdict = 'the judge: %s' % e
            raise AssertionError(
                'A\'s COMMIT succeeded %.1f s after B was granted the lock '
                '(token 0x%x > 0x%x): two holders committed.  Follower zk%d, '
                'cut off from the leader, answered the pre-commit check from '
                'its stale copy.  %s' % (sec_a.t1 - t_grant, tok_b, tok_a, f,
                                         verdict))
        assert sec_a.outcome == '40001', \
            'A\'s COMMIT failed with %s, expected 40001: %s' % (
                sec_a.outcome, sec_a.error)
        refusal = sec_a.error.splitlines()[0]
        f_mode_at_commit = sh.ens.mode(f)
        t_heal = time.monotonic()
        sh.net.heal()
        cut = False
        heal(sh)
        ctx.log('cut at 0; B granted after %.2f s; A\'s COMMIT refused '
                'after %.2f s (F %s then): %s'
                % (t_grant - t_cut, t_refused, f_mode_at_commit, refusal))
        # A's backend still answers and locks again (a new session)
        assert a.scalar('SELECT 1') == 1
        # (the first call may learn only then that the old session
        # expired: 08006, see test_1b)
        a.query('BEGIN')
        tok_a2, expired_first = lock_after_expiry(a, res)
        t_again = time.monotonic() - t_heal
        assert tok_a2 > tok_b
        a.query('COMMIT')
        committed, refused = judge.check(ctx, 'follower cut')
        assert [s.worker for s in committed] == ['B'], committed
    finally:
        if cut:
            heal(sh)
    ctx.figure('1 follower cut: B granted after the cut', t_grant - t_cut,
               's', '%.2f')
    ctx.figure('1 follower cut: A\'s COMMIT refused (40001) after', t_refused,
               's', '%.2f')
    ctx.figure('1 follower cut: A locks again after the heal', t_again, 's',
               '%.2f')
    ctx.figure('1 follower cut: A\'s first lock call after the heal got '
               '08006', 'yes' if expired_first else 'no')


test_1_follower_cut_from_leader.timeout = 120


def test_1b_first_call_after_expiry_opens_a_new_session(ctx):
    """The manual: "After an expired session the next lock call opens a fresh
    session by itself."  A backend holding no lock whose session expired
    while it was cut off (it could not know yet) makes a lock call right
    after the heal: the call must open a new session and lock, not fail
    with 08006 because it was the one that learnt of the expiry."""
    sh = ctx.shared
    res = 'nem/expiry'
    a = backend(ctx, sh.a, 'nem-expiry-A')
    a.query('BEGIN')
    token_of(a.submit(LOCK_X, [res, '30 seconds']), 30, 'opening a session')
    a.query('COMMIT')
    sid = status(a)['session_id']
    zk_nodes = [sh.ens.node(s) for s in sh.ens.sids]
    cut = True
    sh.net.partition(['pga'], zk_nodes)
    try:
        # the session is gone at the leader once no other session can see
        # it: a kazoo check of the session list would need `cons` on every
        # server; the server's own count of sessions is enough here
        wait_until(lambda: sid_gone(sh, sid), SESSION_TIMEOUT_S + MARGIN_S,
                   'session %s to expire' % sid, interval=0.2)
        assert status(a)['state'] in ('connecting', 'connected')
        sh.net.heal()
        cut = False
        a.query('BEGIN')
        fut = a.submit(LOCK_X, [res, '%d seconds'
                                % (SESSION_TIMEOUT_S + MARGIN_S)])
        try:
            token_of(fut, SESSION_TIMEOUT_S + MARGIN_S + 5,
                     'the first lock call after the heal')
        except psycopg2.Error as e:
            raise AssertionError(
                'the first lock call after the heal failed with %s (%s) '
                'although the backend held no lock: it waited for the old '
                'session, learnt that it had expired, and gave up instead '
                'of opening a new one' % (e.pgcode, str(e).splitlines()[0]))
        a.query('COMMIT')
        assert status(a)['session_id'] != sid
    finally:
        if cut:
            heal(sh)
        heal(sh)
    wait_contenders(sh, res, 0)


def sid_gone(sh, session_id):
    """True once no serving server lists the session in `dump` (the
    leader's list of sessions with ephemerals and its expiry buckets)."""
    want = int(session_id, 16) if isinstance(session_id, str) \
        else session_id
    leader = sh.ens.leader()
    if leader is None:
        return False
    out = sh.ens.four_letter(leader, 'dump')
    return ('0x%x' % want) not in out.lower()


def test_2_cluster_cut_from_ensemble(ctx):
    """Cluster A is cut from all three servers for twice the session
    timeout while a load runs on A and B; a worker on A holds the lock
    when the cut begins.  B's workers get the lock once A's sessions
    expire; the holder's next statement (refused: its loss clock has run
    out by then) or its COMMIT fails with 40001 and it committed nothing;
    after the heal A's workers lock again."""
    sh = ctx.shared
    res = 'nem/cut-a'
    zk_nodes = [sh.ens.node(s) for s in sh.ens.sids]
    load = Load(ctx, res, per_cluster=3, readers=1)
    load.hold_at = ('A1e', 3)
    load.start()
    cut = False
    try:
        assert load.held.wait(30), 'A1e never reached its 4th section'
        t_cut = time.monotonic()
        sh.net.partition(['pga'], zk_nodes)
        cut = True
        load.wait_committed(3, t_cut, SESSION_TIMEOUT_S + MARGIN_S, 'B',
                            'while A is cut')
        t_b = load.first_grant_after(t_cut, 'B') - t_cut
        load.resume.set()
        wait_until(lambda: load.held_section is not None
                   and load.held_section.outcome is not None,
                   SESSION_TIMEOUT_S + MARGIN_S, "the held section's end")
        held = load.held_section
        assert held.outcome == '40001', \
            'the holder cut off with its lock: %s %s' % (
                held.outcome, held.error)
        # the cut lasts twice the session timeout
        load.stop_ev.wait(max(0.0, t_cut + 2 * SESSION_TIMEOUT_S
                              - time.monotonic()))
        t_heal = time.monotonic()
        t_heal = heal(sh) or t_heal
        cut = False
        rec = recovery(ctx, load, t_heal, '2 cluster cut')
        load.wait_all_after(t_heal, SESSION_TIMEOUT_S + MARGIN_S + 10)
    finally:
        load.resume.set()
        load.stop()
        if cut:
            heal(sh)
    committed, refused = load.check(ctx, 'cluster cut', t_heal)
    assert refused >= 1
    ctx.log('B granted %.2f s after the cut; recovery %r; errors %r'
            % (t_b, rec, load.error_counts()))
    ctx.figure('2 cluster cut: B granted after the cut', t_b, 's', '%.2f')
    load.figures(ctx, '2 cluster cut', committed, refused)


def test_3_minority_leader(ctx):
    """The leader is cut from both followers (clients still reach it)
    during a load.  Nothing can be written while the followers wait for
    it (syncLimit x tickTime); then they elect a new leader, the old one
    steps down, clients move over.  Healed, the old leader rejoins as a
    follower.  Exclusion holds throughout.

    Seen with ZooKeeper 3.8.0: the cut-off leader keeps serving for
    syncLimit x tickTime (10 s) and, after the session timeout, "expires"
    the sessions of clients connected to the followers (their pings no
    longer reach it) with closeSession proposals that can never commit.
    When the followers give up and drop their clients, those that
    reconnect to the old leader before it steps down are told that their
    session expired (zklock: 08006), although the session is still alive
    in the committed state: its nodes stay until the new leader expires
    it, one session timeout after it took over.  So the lock is free
    again about syncLimit x tickTime + session timeout after the cut
    (the "longest pause in grants" figure)."""
    sh = ctx.shared
    res = 'nem/minority'
    load = Load(ctx, res, per_cluster=3, readers=1).start()
    cut = False
    try:
        load.wait_committed(20, 0, 30, what='before the fault')
        old = sh.ens.leader()
        t_cut = time.monotonic()
        sh.net.partition([sh.ens.node(old)],
                         [sh.ens.node(s) for s in sh.ens.sids if s != old])
        cut = True

        def new_leader():
            for s in sh.ens.sids:
                if s != old and sh.ens.mode(s) == 'leader':
                    return s
            return None
        new = wait_until(new_leader, 60, 'a new leader among the followers',
                         interval=0.2)
        t_new = time.monotonic() - t_cut
        wait_until(lambda: sh.ens.mode(old) is None, 30,
                   'the old leader to stop serving', interval=0.2)
        t_down = time.monotonic() - t_cut
        load.wait_committed(5, t_cut + t_new, 30, what='with the new leader')
        t_heal = time.monotonic()
        t_heal = heal(sh) or t_heal
        cut = False
        rejoin = time.monotonic() - t_heal
        assert sh.ens.mode(old) == 'follower', sh.ens.mode(old)
        recovery(ctx, load, t_heal, '3 minority leader')
        load.wait_all_after(t_heal, SESSION_TIMEOUT_S + MARGIN_S + 10)
    finally:
        load.stop()
        if cut:
            heal(sh)
    committed, refused = load.check(ctx, 'minority leader', t_heal)
    gap = load.longest_pause(t_cut, t_heal)
    ctx.log('old leader zk%d, new leader zk%d after %.1f s, old one stopped '
            'serving after %.1f s, rejoined %.1f s after the heal; longest '
            'pause in grants %.1f s; errors %r'
            % (old, new, t_new, t_down, rejoin, gap or -1,
               load.error_counts()))
    ctx.figure('3 minority leader: new leader elected after', t_new, 's',
               '%.1f')
    ctx.figure('3 minority leader: old leader stopped serving after', t_down,
               's', '%.1f')
    ctx.figure('3 minority leader: longest pause in grants', gap, 's',
               '%.1f')
    load.figures(ctx, '3 minority leader', committed, refused)


LOSS_PERCENT = 30
LOSS_S = 20                     # the issue asks a minute; 20 s for runtime


def test_4_random_loss(ctx):
    """30 % of the packets between the PostgreSQL clusters and every
    ZooKeeper server are dropped (both ways, numgen random) for 20 s
    during a load (the issue's minute, shortened for the suite's
    runtime).  Sessions may expire, calls time out, commits may be
    refused; exclusion holds and the lock is usable right after."""
    sh = ctx.shared
    res = 'nem/loss'
    zk_nodes = [sh.ens.node(s) for s in sh.ens.sids]
    load = Load(ctx, res, per_cluster=3, readers=1).start()
    cut = False
    try:
        load.wait_committed(20, 0, 30, what='before the fault')
        t_cut = time.monotonic()
        sh.net.loss(['pga', 'pgb'], zk_nodes, LOSS_PERCENT)
        cut = True
        load.stop_ev.wait(LOSS_S)
        during = load.committed_since(t_cut)
        dropped = sh.net.dropped_packets()
        t_heal = time.monotonic()
        t_heal = heal(sh) or t_heal
        cut = False
        rec = recovery(ctx, load, t_heal, '4 random loss')
        load.wait_all_after(t_heal, SESSION_TIMEOUT_S + MARGIN_S + 10)
    finally:
        load.stop()
        if cut:
            heal(sh)
    committed, refused = load.check(ctx, 'random loss', t_heal)
    ctx.log('%d sections committed during %d s of %d %% loss (%d packets '
            'dropped); recovery %r; errors %r' % (
                during, LOSS_S, LOSS_PERCENT, dropped, rec,
                load.error_counts()))
    ctx.figure('4 random loss: sections committed during %d s of %d %% loss'
               % (LOSS_S, LOSS_PERCENT), during)
    ctx.figure('4 random loss: packets dropped', dropped)
    load.figures(ctx, '4 random loss', committed, refused)


FLAP_ROUNDS = 8
FLAP_SEED = int(os.environ.get('ZKLOCK_NEMESIS_SEED', '0')) or None


def test_5_flapping(ctx):
    """Flapping partitions among the servers during a load: FLAP_ROUNDS
    rounds, each a random fault (two servers cut from each other, a
    one-way drop, a server isolated, the leader isolated) for 1-4 s, then
    healed for 0.5-2 s.  The schedule's seed is printed
    (ZKLOCK_NEMESIS_SEED replays it)."""
    sh = ctx.shared
    res = 'nem/flap'
    seed = FLAP_SEED or random.randrange(1, 1 << 30)
    rng = random.Random(seed)
    load = Load(ctx, res, per_cluster=3, readers=1).start()
    schedule = []
    cut = False
    try:
        load.wait_committed(20, 0, 30, what='before the fault')
        t_start = time.monotonic()
        ctx.log('flapping, seed %d' % seed)
        for _ in range(FLAP_ROUNDS):
            sids = list(sh.ens.sids)
            kind = rng.choice(['pair', 'oneway', 'isolate', 'leader'])
            x, y = rng.sample(sids, 2)
            nx, ny = sh.ens.node(x), sh.ens.node(y)
            if kind == 'pair':
                sh.net.partition([nx], [ny])
                what = 'zk%d x zk%d' % (x, y)
            elif kind == 'oneway':
                sh.net.drop(nx, ny)
                what = 'zk%d -> zk%d' % (x, y)
            else:
                if kind == 'leader':
                    x = sh.ens.leader() or x
                    nx = sh.ens.node(x)
                sh.net.isolate(nx)
                what = 'zk%d isolated%s' % (x, ' (leader)'
                                            if kind == 'leader' else '')
            cut = True
            hold = rng.uniform(1, 4)
            load.stop_ev.wait(hold)
            sh.net.heal()
            cut = False
            rest = rng.uniform(0.5, 2)
            schedule.append('%s %.1fs/%.1fs' % (what, hold, rest))
            ctx.log('flap %d: %s' % (len(schedule), schedule[-1]))
            load.stop_ev.wait(rest)
        during = load.committed_since(t_start)
        t_heal = time.monotonic()
        t_heal = heal(sh) or t_heal
        rec = recovery(ctx, load, t_heal, '5 flapping')
        load.wait_all_after(t_heal, SESSION_TIMEOUT_S + MARGIN_S + 10)
    finally:
        load.stop()
        if cut:
            heal(sh)
    committed, refused = load.check(ctx, 'flapping', t_heal)
    ctx.log('seed %d: %s; %d sections committed while flapping; recovery '
            '%r; errors %r' % (seed, '; '.join(schedule), during, rec,
                               load.error_counts()))
    ctx.figure('5 flapping: seed', seed)
    ctx.figure('5 flapping: sections committed while flapping', during)
    load.figures(ctx, '5 flapping', committed, refused)


def test_z_nothing_left_behind(ctx):
    """All three servers serve; nothing under the root but lock parents;
    no watch on any server; every worker backend is gone."""
    sh = ctx.shared
    modes = {s: sh.ens.mode(s) for s in sh.ens.sids}
    assert sorted(m or 'down' for m in modes.values()) == \
        ['follower', 'follower', 'leader'], modes
    last = []

    def clean():
        synced(sh)
        last[:] = sh.kz.retry(sh.zi.leftovers)
        return not last
    try:
        wait_until(clean, 15, 'no contender left under %s' % ROOT,
                   interval=0.2)
    except TimeoutError:
        raise AssertionError('left behind under %s: %r' % (ROOT, last)) \
            from None
    wait_no_watches(sh)
    for c in (sh.a, sh.b):
        n = int(c.psql("SELECT count(*) FROM pg_stat_activity WHERE "
                       "application_name LIKE 'nem-%'").strip())
        assert n == 0, '%d worker backend(s) left on %s' % (n, c.name)
