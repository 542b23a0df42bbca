#!/usr/bin/python3
"""
`make bench`: zklock against its peers and the protocol's bound, side by
side, on one throwaway ZooKeeper ensemble and PostgreSQL cluster (issue 18).

    /usr/bin/python3 bench/run_bench.py [--quick] [--zk-servers 3|1] [--no-fsync]
                                        [--runs N] [--seconds S] [--only PART,...]
                                        [--ownwatch 0|1] [--all-rows] [--out DIR]

(bench/run.sh, which `make bench` calls, installs the packages, builds and
installs the extension (not with BENCH_NO_INSTALL=1) and builds the peers
first; QUICK=1, ZK_SERVERS, ZK_FSYNC=0, BENCH_RUNS, BENCH_SECONDS,
BENCH_ONLY, BENCH_OUT, BENCH_OWNWATCH set the same options.)

Defaults: a 3-server ensemble (what users run; ZK_SERVERS=1 for
standalone), every client's connect string listing all servers; ZooKeeper
with forceSync=yes (every write an fsynced write); 5 rounds, every
implementation interleaved within a round (a burst of background load hits
all alike); every figure the median over the rounds and every ratio the
median of the per-round ratios; host CPU steal recorded (/proc/stat).
QUICK=1: 1 round, 2 s measurements, fewer array and memory cycles.

Time: about 22 minutes on this 2-core VM, plus 8 for the stats part, 28 for the tail part, 9 for the waitcost part and 4 for the failfast part.  To stay under ~35 minutes
with five rounds on three servers, the default run measures 3 s per figure
(4 s per handoff-latency figure) after a 1 s warm-up (2 s for Curator's
JIT), leaves out the reference-only uncontended rows (rawzk pipelined and
the two "resolution delay -1" rows: --all-rows measures them), and runs
50,000 memory cycles (was 100,000) and 2 rounds of the 10,000-lock
transaction.

Parts (--only takes a comma-separated list of these names):

  uncontended  one client, lock cycle latency: zklock through pgbench
               (BEGIN; SELECT zk_lock_exclusive('x'); COMMIT;) with
               zklock.verify_at_commit off and on; rawzk (C client,
               synchronous create(EPHEMERAL_SEQUENTIAL)+delete: the floor);
               Curator InterProcessMutex; kazoo Lock; rawzk recipe;
               one read round trip; pg_advisory_xact_lock through pgbench
               (PostgreSQL without network); rawzk recipe sleeping that
               advisory cycle's time after each delete (RAWZK_GAP_US: the
               bound of the protocol).  ZooKeeper requests and CPU
               (client side, ZooKeeper) per cycle.
  contended    N = 2, 4, 16, 64 clients on one lock (N = 1: the uncontended
               cycle), handoffs per second: zklock verify on and off
               (pgbench -c N); Curator InterProcessMutex (N threads, each its
               own CuratorFramework); kazoo Lock (N processes, each its own
               KazooClient); rawzk recipe (zklock's protocol in C, N
               threads, each its own session; RAWZK_OWNWATCH from
               --ownwatch, OWNWATCH below).  Requests and CPU per handoff.
  latency      handoff latency at N = 2 and 16, median and p99: zklock
               (N psycopg2 connections in threads; grants ordered by fencing
               token; lock return of grant i+1 - COMMIT return of grant i),
               Curator and kazoo (from the release() call, and from its
               return, to the next acquire()'s return).
  semaphore    3 permits, 16 clients, acquisitions per second: zklock
               (BEGIN; SELECT zk_lock_semaphore('bench-sem', 3); COMMIT;
               pgbench -c 16, zklock.protocol curator-rw and kazoo), Curator
               InterProcessSemaphoreV2, kazoo Semaphore, and rawzk's
               semaphore mode (RAWZK_SEM: zklock's curator-rw semaphore
               protocol with the check in C, the mutex let go behind the
               lease's create, 16 threads: the bound).
  herd         N = 2, 16, 64 zklock waiters queued on one lock, released one
               by one: watch notifications the server delivers per release
               (mntr zk_sum_node_{created,deleted,changed,children}_watch_count
               deltas), ZooKeeper requests per release, handoff latency.
  many         10,000 distinct locks in one transaction, then COMMIT:
               acquire time per lock, commit time, time until ZooKeeper has
               deleted every node; ZooKeeper's 1 MB packet limit
               (jute.maxbuffer) respected (no "Len error", no reconnect).
  arrays       N = 100 and 10,000 locks taken in one call
               (zk_lock_exclusive(text[]), issue 17) against the scalar loop
               over the same names, then COMMIT; and rawzk set, the array
               call's requests without PostgreSQL (the protocol's floor).
               Time to hold all, COMMIT time, ZooKeeper requests per lock.
  memory       VmRSS of a backend (/proc/<pg_backend_pid()>/status): open
               session, 10,000 held locks, after their release; before and
               after 50,000 lock cycles (DO loop with COMMIT per cycle).
  stats        what the cumulative statistics cost (issue 32): a cluster
               preloading zklock, zklock.track_stats on against off mixed
               transaction by transaction in one pgbench run, 1 and 16
               clients, one name and names never used before
               (bench/stats_part.py).
  tail         the tail of the lock cycle (issue 27), 1 client and 16 on
               one lock: zklock (pgbench with a per-transaction log, default
               settings: the reply nudge on) for --tail-seconds (600: the
               issue's 10-minute runs), rawzk recipe (no nudge), Curator
               InterProcessMutex and kazoo Lock for --tail-peer-seconds
               (120).  Per cycle (lock call to release return): p50, p99,
               p99.9, max; at 16, the interval between consecutive releases
               (one handoff and one hold: a stalled handoff shows here);
               connections that timed out (zklock: libzookeeper's "timed
               out" lines in the server log) or reconnected (the peers).
  waitcost     what waiting costs the ensemble (issue 38): K waiters on one
               lock behind an idle holder, requests per waiter per second
               beyond the sessions' pings (mntr, the idle baseline
               subtracted): zklock exclusive at K = 10, 100, 500 (500 over
               two clusters), shared, semaphore, Curator's and kazoo's
               layouts at K = 100, Curator InterProcessMutex and kazoo Lock
               waiters at K = 100; and the time from a deadlock cycle's
               closing to its 40P01 (bench/waitcost_part.py; ~9 min;
               --waitcost full: the whole grid).
  failfast     fail fast (issue 39): from a held node's deletion to its
               holder's 40001 (pg_sleep under a transaction lock, 200
               losses; a session-level lock, 100), from a cut (a proxy
               stopped for session timeout + 2 s) to the 40001, 20 runs;
               and a lock cycle (fresh names) with zklock.cancel_on_loss on
               against off, mixed in one pgbench run as in stats, with the
               requests per cycle of each (bench/failfast_part.py; ~4 min).

Writes results.md and handoffs.png (gnuplot: handoffs per second against N,
and handoff latency) into bench/ (or --out), raw numbers in
bench/build/results.json, and prints the summary and the targets.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(HERE, 'build')
sys.path.insert(0, os.path.join(ROOT, 'test', 'lib'))
import failfast_part  # noqa: E402
import harness  # noqa: E402
import stats_part  # noqa: E402
import waitcost_part  # noqa: E402

PGBENCH = harness.PG_BIN + '/pgbench'
RAWZK = os.path.join(BUILD, 'rawzk')
CURATOR_CP = ':'.join([BUILD, '/usr/share/java/curator-recipes.jar',
                       '/usr/share/java/slf4j-nop.jar'])
KAZOO_BENCH = os.path.join(HERE, 'kazoo_bench.py')
PYTHON = '/usr/bin/python3'
# RAWZK_OWNWATCH for rawzk recipe: 1 = zklock's protocol since issue 18 (a
# waiter with one contender ahead also watches its own node, is granted by
# the predecessor's deletion without a listing, and its commit check is a
# sync alone), 0 = the protocol before (list again after every watch, sync
# + exists at commit).  The one place to flip it (or --ownwatch 0|1,
# BENCH_OWNWATCH).
OWNWATCH = 1
JUTE_MAXBUFFER = 0xfffff        # ZooKeeper's default jute.maxbuffer (1 MB - 1)


def log(msg):
    print('[bench %s] %s' % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def nearest_rank(sorted_xs, p):
    """Nearest-rank percentile of a sorted list (p in 0..1)."""
    k = max(0, min(len(sorted_xs) - 1, int(math.ceil(p * len(sorted_xs))) - 1))
    return sorted_xs[k]


def tail_stats(recs, n):
    """p50, p99, p99.9 and max (ms) of the cycles (start_ns, end_ns) and,
    with more than one client, of the interval between consecutive
    releases (ends, in order)."""
    def q(xs):
        xs = sorted(xs)
        return {'p50': nearest_rank(xs, 0.5), 'p99': nearest_rank(xs, 0.99),
                'p999': nearest_rank(xs, 0.999), 'max': xs[-1]}
    out = {'cycles': len(recs), 'cycle': q([(e - s) / 1e6 for s, e in recs])}
    if n > 1 and len(recs) > 1:
        ends = sorted(e for _, e in recs)
        out['gap'] = q([(b - a) / 1e6 for a, b in zip(ends, ends[1:])])
    return out


def descendants(pid):
    """Every living descendant of a process (/proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir('/proc/%d/task' % p):
                with open('/proc/%d/task/%s/children' % (p, t)) as f:
                    kids = [int(x) for x in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            continue
    return out


def cpu_ns(pids):
    """CPU time in ns used so far by every thread of the given processes
    (first field of /proc/<pid>/task/<tid>/schedstat); vanished ones
    count 0."""
    total = 0
    for pid in set(pids):
        try:
            tids = os.listdir('/proc/%d/task' % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open('/proc/%d/task/%s/schedstat' % (pid, tid)) as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total


def reap(proc, f):
    """Make sure proc has ended (kill it if it still runs, as after an
    error or a timeout) and return what it wrote to f, closing f."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    f.seek(0)
    text = f.read()
    f.close()
    return text


def cpu_stat():
    """The machine's CPU time counters (the 'cpu' line of /proc/stat)."""
    with open('/proc/stat') as f:
        return [int(x) for x in f.readline().split()[1:9]]


def steal_percent(a, b):
    """Steal time between two cpu_stat() readings, in percent of all CPU
    time: the share the hypervisor gave this VM's CPUs to other guests.  A
    high figure means a contended host: every wake-up and round trip is
    slower and noisier, whatever is measured."""
    d = [y - x for x, y in zip(a, b)]
    total = sum(d)
    return 100.0 * d[7] / total if total > 0 else None


def kv_line(text):
    """Parse the 'key=value key=value' line a peer prints."""
    line = [l for l in text.strip().splitlines() if '=' in l][-1]
    out = {}
    for tok in line.split():
        k, v = tok.split('=', 1)
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out


def run(cmd, timeout, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=env, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError('%s failed (status %d):\n%s%s'
                           % (' '.join(cmd), r.returncode, r.stdout, r.stderr))
    return r


# ---------------------------------------------------------------------------
# the bench
# ---------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.runs = args.runs or (1 if self.quick else 5)
        self.secs = args.seconds or (2 if self.quick else 3)
        self.warmup = 1                       # seconds, zklock/raw/kazoo
        self.jwarmup = 2                      # seconds, Curator (JIT)
        # N = 1 is the uncontended cycle (part uncontended)
        self.clients = [2, 4, 16, 64]
        self.latency_clients = [2, 16]
        self.lat_secs = args.seconds or (2 if self.quick else 4)
        self.sem_clients, self.sem_permits = 16, 3
        # (waiters, zklock.verify_at_commit): notifications per release
        self.herd_cases = [(2, 'on'), (16, 'on'), (64, 'on')]
        self.many = 10000
        self.mem_cycles = 20000 if self.quick else 50000
        self.mem_warm = 2000 if self.quick else 5000
        self.many_runs = 1 if self.quick else 2
        # (locks, runs of the array call, runs of the scalar loop)
        self.array_cases = [(100, 5 if self.quick else 20, 2 if self.quick else 5),
                            (10000, 2 if self.quick else 5, 1 if self.quick else 2)]
        self.ownwatch = args.ownwatch
        # tail part (issue 27): zklock's and the peers' windows at each N
        self.fresh_rounds = 1 if self.quick else 5
        self.fresh_singles = 50 if self.quick else 200
        self.tail_clients = [1, 16]
        self.tail_secs = 30 if self.quick else args.tail_seconds
        self.tail_peer_secs = 20 if self.quick else args.tail_peer_seconds
        self.gap_us = None      # raw-recipe-gap: this round's advisory cycle
        self.gap_slept = None   # ... and what rawzk reports it slept
        self.results = {'uncontended': {}, 'contended': {}, 'latency': {},
                        'semaphore': {}, 'herd': {},
                        'many': {}, 'arrays': {}, 'memory': {}, 'tail': {},
                        'fresh': {},
                        'runs': self.runs,
                        'seconds': self.secs, 'lat_seconds': self.lat_secs,
                        'ownwatch': self.ownwatch}
        self.zk = None
        self.pg = None
        self.mntr_calls = 0
        self.failures = []
        self.steal = []         # host CPU steal (%) of every measurement
        self.work = harness.make_workdir('zklock-bench-')

    # -- setup --------------------------------------------------------------

    def start(self):
        n = self.args.zk_servers
        # The harness starts ZooKeeper with the client JIT only
        # (-XX:TieredStopAtLevel=1: quick start for tests); a benchmark
        # wants the server as it runs in production: the full JIT.
        jvm = [] if self.args.zk_c1 else ['-XX:TieredStopAtLevel=4', '-Xms256m']
        # Empty lock parents are containers: the server reaps them once a
        # minute by default, which would turn the arrays part's "free locks
        # whose parents exist" into a different case half of the time.
        # Reaping is put off for the run (no part depends on it).
        self.zk = harness.ZooKeeper(n=n, name='zkbench', jvm_opts=jvm,
                                    container_check_ms=3600 * 1000)
        self.zk._configure()
        if self.args.fsync:
            for sid in self.zk.sids:
                cfg = os.path.join(self.zk.server_dir(sid), 'zoo.cfg')
                with open(cfg) as f:
                    text = f.read().replace('forceSync=no', 'forceSync=yes')
                with open(cfg, 'w') as f:
                    f.write(text)
        self.zk.start()
        self.pg = harness.PgCluster('bench', extra_conf={
            'zklock.hosts': self.zk.connect_string,
            'max_connections': 300})
        self.pg.init()
        self.pg.start()
        self.pg.psql('CREATE EXTENSION zklock')
        self.monitor = self.pg.connect()       # finds pgbench's backends
        self.scripts = {}
        for name, sql in [
                ('zklock', "BEGIN;\nSELECT zk_lock_exclusive('bench-cycle');\nCOMMIT;\n"),
                ('zklock_contended', "BEGIN;\nSELECT zk_lock_exclusive('bench-contended');\nCOMMIT;\n"),
                ('advisory', "BEGIN;\nSELECT pg_advisory_xact_lock(42);\nCOMMIT;\n"),
                ('semaphore', "BEGIN;\nSELECT zk_lock_semaphore('bench-sem', %d);\nCOMMIT;\n"
                 % self.sem_permits)]:
            path = os.path.join(self.work, name + '.sql')
            with open(path, 'w') as f:
                f.write(sql)
            os.chmod(path, 0o644)
            self.scripts[name] = path

    def stop(self):
        if getattr(self, 'monitor', None):
            try:
                self.monitor.close()
            except Exception:
                pass
        if self.pg:
            self.pg.stop()
        if self.zk:
            self.zk.stop()
        # the data (ZooKeeper's transaction logs grow by hundreds of MB)
        if not self.args.keep:
            for d in (self.pg and self.pg.base_dir, self.zk and self.zk.base_dir,
                      self.work):
                if d and os.path.basename(d).startswith('zklock-'):
                    shutil.rmtree(d, ignore_errors=True)

    def warm_up(self):
        """Load the fresh servers before measuring: the full JIT compiles
        ZooKeeper's hot paths in its first seconds, on CPU the measurements
        would otherwise be charged with."""
        t = time.monotonic()
        secs, warm = self.secs, self.warmup
        try:
            self.secs, self.warmup = (2, 1) if self.quick else (4, 1)
            self.measure('raw-pipelined', 1, '/rawzk-warmup')
            self.measure('zklock-on', 1)
            self.measure('zklock-on', 4, 'zklock_contended')
        finally:
            self.secs, self.warmup = secs, warm
        log('warm-up done in %.0f s' % (time.monotonic() - t))

    # -- ZooKeeper counters -------------------------------------------------

    def mntr(self):
        """mntr of every server: per-connection counters (packets, watches,
        watch triggers) summed; zk_max_* the maximum; the replicated tree's
        counts (znodes, ephemerals) averaged (every server has the tree)."""
        total = {}
        for sid in self.zk.sids:
            self.mntr_calls += 1
            for line in self.zk.four_letter(sid, 'mntr').splitlines():
                parts = line.split('\t')
                if len(parts) != 2:
                    continue
                try:
                    v = float(parts[1])
                except ValueError:
                    continue
                k = parts[0]
                if k.startswith('zk_max_'):
                    total[k] = max(total.get(k, v), v)
                elif k in ('zk_ephemerals_count', 'zk_znode_count'):
                    total[k] = total.get(k, 0) + v / self.zk.n
                else:
                    total[k] = total.get(k, 0) + v
        # a four letter word counts as a packet received: requests()
        # takes our own mntr calls out again
        total['_mntr_calls'] = self.mntr_calls
        return total

    @staticmethod
    def requests(m0, m1):
        """Client requests the servers received between two mntr()
        snapshots, without the mntr calls themselves."""
        return (m1['zk_packets_received'] - m0['zk_packets_received'] -
                (m1['_mntr_calls'] - m0['_mntr_calls']))

    @staticmethod
    def notifications(m):
        return sum(m.get('zk_sum_node_%s_watch_count' % k, 0)
                   for k in ('created', 'deleted', 'changed', 'children'))

    # -- one measurement of each implementation -----------------------------

    # -- CPU accounting ------------------------------------------------------

    def zk_pids(self):
        return [self.zk.pid(sid) for sid in self.zk.sids if self.zk.is_running(sid)]

    def cpu_snapshot(self, client_pids):
        """CPU time (ns, every thread: /proc/<pid>/task/*/schedstat) of the
        client processes and of the ZooKeeper servers."""
        return cpu_ns(client_pids), cpu_ns(self.zk_pids())

    def pgbench_client_pids(self, proc):
        """pgbench (and runuser) plus the backends serving it."""
        pids = [proc.pid] + descendants(proc.pid)
        with self.monitor.cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity "
                        "WHERE application_name = 'pgbench'")
            pids += [r[0] for r in cur.fetchall()]
        return pids

    # -- one measurement of each implementation -----------------------------

    def pgbench(self, script, clients, verify=None, protocol=None):
        """pgbench -c clients for warmup+secs seconds.  The per-second
        progress lines after the warmup give the rate; CPU is sampled as
        those lines arrive.  Returns (rate, total xacts, cpu) with cpu =
        (client ns, ZooKeeper ns, cycles) over the sampled window."""
        env = dict(os.environ)
        opts = []
        if verify is not None:
            opts.append('-c zklock.verify_at_commit=%s' % verify)
        if protocol is not None:
            opts.append('-c zklock.protocol=%s' % protocol)
        if opts:
            env['PGOPTIONS'] = ' '.join(opts)
        cmd = harness.as_pg_user([
            PGBENCH, '-n', '-h', '127.0.0.1', '-p', str(self.pg.port),
            '-U', 'postgres', '-c', str(clients), '-j', '1',
            # one second more than measured: the last progress line races
            # with the clients disconnecting (threads exiting, CPU vanishing)
            '-T', str(self.warmup + self.secs + 1), '-P', '1',
            '-f', self.scripts[script], 'postgres'])
        out_f = open(os.path.join(self.work, 'pgbench.out'), 'w+')
        proc = subprocess.Popen(cmd, env=env, stdout=out_f, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True)
        rates, err, pids, first, last, window_cycles = [], [], None, None, None, 0.0
        try:
            deadline = time.monotonic() + self.warmup + self.secs + 61
            for line in proc.stderr:
                err.append(line)
                m = re.match(r'progress: ([\d.]+) s, ([\d.]+) tps', line)
                if not m:
                    continue
                t, tps = float(m.group(1)), float(m.group(2))
                if t < self.warmup - 0.01 or t > self.warmup + self.secs + 0.01:
                    continue
                if pids is None:
                    pids = self.pgbench_client_pids(proc)
                snap = self.cpu_snapshot(pids)
                if first is None:
                    first = snap                # start of the window
                else:
                    rates.append(tps)
                    window_cycles += tps        # 1 s intervals
                    last = snap
                if time.monotonic() > deadline:
                    break
            proc.wait(timeout=60)
        finally:
            stdout = reap(proc, out_f)
        if proc.returncode != 0:
            raise RuntimeError('pgbench failed (status %d):\n%s%s'
                               % (proc.returncode, stdout, ''.join(err)))
        failed = re.search(r'number of failed transactions: (\d+)', stdout)
        if failed and int(failed.group(1)) > 0:
            raise RuntimeError('pgbench: failed transactions:\n' + stdout)
        total = int(re.search(r'number of transactions actually processed: (\d+)',
                              stdout).group(1))
        if not rates:
            raise RuntimeError('pgbench printed no progress:\n' + ''.join(err))
        cpu = None
        if first and last and window_cycles:
            cpu = (last[0] - first[0], last[1] - first[1], window_cycles)
        return statistics.mean(rates), total, cpu

    def peer(self, which, clients, path, mode=None, secs=None):
        """rawzk / Curator / kazoo; returns (rate, total cycles, cpu, the
        peer's key=value line).  mode: CuratorBench's / kazoo_bench.py's
        (latency, semaphore); secs: the measured window (self.secs)."""
        secs = secs or self.secs
        cs = self.zk.connect_string
        env = None
        if which.startswith('raw-'):
            mode = which[4:]
            if mode.endswith('-tuned'):
                # the library's per-poll re-resolution of the host list off
                env = dict(os.environ, RAWZK_RESOLVE_DELAY='-1')
                mode = mode[:-len('-tuned')]
            gap, sem = None, None
            if mode == 'sem':
                # zklock's semaphore protocol (Curator layout), see rawzk.c
                mode, sem = 'recipe', self.sem_permits
            if mode == 'recipe-gap':
                # the recipe with PostgreSQL's statement time slept where
                # it can overlap the delete (see bench/rawzk.c)
                mode, gap = 'recipe', self.gap_us
            if mode == 'recipe':
                # zklock's recipe with the check, one session per thread
                env = dict(os.environ, RAWZK_THREADS=str(clients), RAWZK_CHECK='1',
                           RAWZK_OWNWATCH=str(self.ownwatch))
                if gap:
                    env['RAWZK_GAP_US'] = '%.1f' % gap
                if sem:
                    env['RAWZK_SEM'] = str(sem)
            cmd = [RAWZK, mode, cs, path, str(self.warmup), str(secs)]
            warm = self.warmup
        elif which == 'curator':
            cmd = ['java', '-Xms64m', '-XX:+UseSerialGC', '-cp', CURATOR_CP,
                   'CuratorBench', cs, path, str(clients),
                   str(self.jwarmup), str(secs)]
            if mode:
                cmd += [mode, str(self.sem_permits)]
            warm = self.jwarmup
        elif which == 'kazoo':
            cmd = [PYTHON, KAZOO_BENCH, cs, path, str(clients),
                   str(self.warmup), str(secs)]
            if mode:
                cmd += [mode, str(self.sem_permits)]
            warm = self.warmup
        else:
            raise ValueError(which)
        env = dict(env or os.environ, BENCH_SAMPLER='1')
        err_f = open(os.path.join(self.work, 'peer.err'), 'w+')
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err_f,
                                stdin=subprocess.PIPE, text=True)
        lines, first, last, pids = [], None, None, None
        timer = threading.Timer(warm + secs + 120 + clients, proc.kill)
        timer.start()
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith('window-start'):
                    pids = [proc.pid] + descendants(proc.pid)
                    first = self.cpu_snapshot(pids)
                elif line.startswith('window-end'):
                    if pids:
                        last = self.cpu_snapshot(pids)
                    proc.stdin.write('\n')     # the peer waits for this
                    proc.stdin.flush()
            proc.wait()
        finally:
            timer.cancel()
            stderr = reap(proc, err_f)
        if proc.returncode != 0:
            raise RuntimeError('%s failed (status %d):\n%s%s'
                               % (' '.join(cmd), proc.returncode, ''.join(lines), stderr))
        out = kv_line(''.join(lines))
        rate = out['cycles'] / out['seconds']
        # the packet counter sees the warmup too: divide by every cycle
        total = out.get('total') or out['cycles'] * (warm + out['seconds']) / out['seconds']
        cpu = None
        if first and last and out['cycles']:
            cpu = (last[0] - first[0], last[1] - first[1], out['cycles'])
        return rate, total, cpu, out

    def measure(self, impl, clients, path=None):
        """One run of one implementation: (rate, requests per cycle,
        (client CPU, ZooKeeper CPU) us per cycle).  A run that fails or
        counts no cycle at all is a finding: logged, listed in the report's
        "Failed measurements" and left out of the medians (None), never
        tried again (issue 27: such windows were ZooKeeper 3.8.0's lost
        wake-up, retried away for a year)."""
        try:
            s0 = cpu_stat()
            out = self._measure(impl, clients, path)
            if not out[0]:
                raise RuntimeError('no cycle completed in the measured window')
            st = steal_percent(s0, cpu_stat())
            if st is not None:
                self.steal.append(st)
            return out
        except Exception as e:
            log('%s with %d client(s) FAILED: %s' % (impl, clients, e))
            self.failures.append('%s, %d client(s): %s'
                                 % (impl, clients, str(e).splitlines()[0]))
        return None, None, None

    def _measure(self, impl, clients, path=None):
        m0 = self.mntr()
        if impl == 'zklock-off':
            rate, total, cpu = self.pgbench(path or 'zklock', clients, 'off')
        elif impl == 'zklock-on':
            rate, total, cpu = self.pgbench(path or 'zklock', clients, 'on')
        elif impl == 'advisory':
            rate, total, cpu = self.pgbench('advisory', clients)
        elif impl.startswith('zklock-sem-'):
            rate, total, cpu = self.pgbench('semaphore', clients, None,
                                            impl[len('zklock-sem-'):])
        elif impl == 'raw-sem':
            rate, total, cpu, _ = self.peer(impl, clients, path)
        elif impl.endswith('-sem'):
            rate, total, cpu, _ = self.peer(impl[:-4], clients, path, 'semaphore')
        else:
            rate, total, cpu, out = self.peer(impl, clients, path)
            self.gap_slept = out.get('gap_us')
        m1 = self.mntr()
        reqs = self.requests(m0, m1) / total if total else None
        cpu_us = None
        if cpu:
            cpu_us = (cpu[0] / 1e3 / cpu[2], cpu[1] / 1e3 / cpu[2])
        return rate, reqs, cpu_us

    # -- parts --------------------------------------------------------------

    # In this order within a run: what a target compares is measured back
    # to back (the floor, zklock, the peers), so the per-run ratios see the
    # same host; the references follow.
    UNCONTENDED = [
        ('raw-sync', 'rawzk: sync create+delete (the floor)', '/rawzk-bench'),
        ('zklock-off', 'zklock, verify_at_commit = off', None),
        ('zklock-on', 'zklock, verify_at_commit = on', None),
        ('curator', 'Curator InterProcessMutex', '/curator-bench/uncontended'),
        ('kazoo', 'kazoo Lock', '/kazoo-bench/uncontended'),
        ('raw-recipe', 'rawzk: zklock\'s recipe with the check, no PostgreSQL', '/rawzk-bench'),
        ('raw-read', 'rawzk: one read round trip (exists)', '/rawzk-bench'),
        ('advisory', 'pg_advisory_xact_lock (no network)', None),
        # right after advisory: it sleeps this round's advisory cycle time
        ('raw-recipe-gap', 'rawzk: zklock\'s recipe with the check, PostgreSQL\'s '
         'time slept after each delete (the bound)', '/rawzk-bench'),
        # reference-only rows, measured with --all-rows (not by default: the
        # full run must stay near 30 minutes on a 3-server ensemble)
        ('raw-pipelined', 'rawzk: create+children pipelined, delete not awaited', '/rawzk-bench'),
        ('raw-sync-tuned', 'rawzk: sync create+delete, resolution delay -1', '/rawzk-bench'),
        ('raw-read-tuned', 'rawzk: one read round trip, resolution delay -1', '/rawzk-bench'),
    ]
    REFERENCE_ONLY = ('raw-pipelined', 'raw-sync-tuned', 'raw-read-tuned')

    def part_uncontended(self):
        rows = [r for r in self.UNCONTENDED
                if self.args.all_rows or r[0] not in self.REFERENCE_ONLY]
        res = {k: {'label': label, 'us': [], 'reqs': [], 'cpu_client': [], 'cpu_zk': []}
               for k, label, _ in rows}
        for r in range(self.runs):
            for key, label, path in rows:
                if key == 'raw-recipe-gap':
                    self.gap_us = res['advisory']['us'][-1] if res['advisory']['us'] else None
                    if not self.gap_us:
                        res[key]['us'].append(None)
                        for f in ('reqs', 'cpu_client', 'cpu_zk'):
                            res[key][f].append(None)
                        continue
                self.gap_slept = None
                rate, reqs, cpu = self.measure(key, 1, path)
                if key == 'raw-recipe-gap':
                    res[key].setdefault('gap_asked', []).append(self.gap_us)
                    res[key].setdefault('gap_slept', []).append(
                        self.gap_slept if rate else None)
                res[key]['us'].append(1e6 / rate if rate else None)
                res[key]['reqs'].append(reqs)
                res[key]['cpu_client'].append(cpu[0] if cpu else None)
                res[key]['cpu_zk'].append(cpu[1] if cpu else None)
                log('uncontended run %d/%d %-14s %8.1f us/cycle  %.2f requests/cycle  '
                    'CPU us/cycle client %s ZooKeeper %s'
                    % (r + 1, self.runs, key, 1e6 / rate if rate else 0, reqs or 0,
                       fmt(cpu and cpu[0], '%.0f'), fmt(cpu and cpu[1], '%.0f')))
        for v in res.values():
            v['median_us'] = median(v['us'])
            v['median_reqs'] = median(v['reqs'])
            v['median_cpu_client'] = median(v['cpu_client'])
            v['median_cpu_zk'] = median(v['cpu_zk'])
        self.results['uncontended'] = res

    CONTENDED = [
        ('zklock-on', 'zklock (verify on)', 'zklock_contended'),
        ('zklock-off', 'zklock (verify off)', 'zklock_contended'),
        ('curator', 'Curator', '/curator-bench/contended'),
        ('kazoo', 'kazoo', '/kazoo-bench/contended'),
        ('raw-recipe', 'rawzk recipe (verify on, no PostgreSQL)', '/rawzk-contended'),
    ]

    def part_contended(self):
        self._contended()
        # N = 1: the uncontended cycle, measured in part uncontended
        u = self.results['uncontended']
        c = self.results['contended']
        if u and all(k in u for k in c):
            for k, v in c.items():
                v['rate'][1] = [1e6 / x if x else None for x in u[k]['us']]
                v['reqs'][1] = u[k]['reqs']
                v['cpu_client'][1] = u[k]['cpu_client']
                v['cpu_zk'][1] = u[k]['cpu_zk']
                for f, src in (('median', 'rate'), ('median_reqs', 'reqs'),
                               ('median_cpu_client', 'cpu_client'),
                               ('median_cpu_zk', 'cpu_zk')):
                    v[f][1] = median(v[src][1])
                    v[f] = dict(sorted(v[f].items()))
                for f in ('rate', 'reqs', 'cpu_client', 'cpu_zk'):
                    v[f] = dict(sorted(v[f].items()))

    def _contended(self):
        res = {k: {'label': label, 'rate': {n: [] for n in self.clients},
                   'reqs': {n: [] for n in self.clients},
                   'cpu_client': {n: [] for n in self.clients},
                   'cpu_zk': {n: [] for n in self.clients}}
               for k, label, _ in self.CONTENDED}
        for r in range(self.runs):
            for n in self.clients:
                for key, label, path in self.CONTENDED:
                    rate, reqs, cpu = self.measure(key, n, path)
                    res[key]['rate'][n].append(rate)
                    res[key]['reqs'][n].append(reqs)
                    res[key]['cpu_client'][n].append(cpu[0] if cpu else None)
                    res[key]['cpu_zk'][n].append(cpu[1] if cpu else None)
                    log('contended run %d/%d N=%-2d %-11s %8.1f handoffs/s  %.2f requests/cycle  '
                        'CPU us/handoff client %s ZooKeeper %s'
                        % (r + 1, self.runs, n, key, rate or 0, reqs or 0,
                           fmt(cpu and cpu[0], '%.0f'), fmt(cpu and cpu[1], '%.0f')))
        for v in res.values():
            v['median'] = {n: median(v['rate'][n]) for n in self.clients}
            v['median_reqs'] = {n: median(v['reqs'][n]) for n in self.clients}
            v['median_cpu_client'] = {n: median(v['cpu_client'][n]) for n in self.clients}
            v['median_cpu_zk'] = {n: median(v['cpu_zk'][n]) for n in self.clients}
        self.results['contended'] = res

    # -- handoff latency ----------------------------------------------------

    def zklock_latency(self, n, resource, secs):
        """N psycopg2 connections, one thread each, loop BEGIN; SELECT
        zk_lock_exclusive(resource); COMMIT (zklock.verify_at_commit on),
        recording time.monotonic() right after the lock call returns, right
        before COMMIT is sent and right after it returns, and the fencing
        token.  Grants ordered by token (it grows with every grant); the
        latency of a handoff = lock return of grant i+1 - COMMIT return of
        grant i.  Returns the peers' key=value dict."""
        conns = [self.pg.connect() for _ in range(n)]
        stop = threading.Event()
        start = threading.Barrier(n + 1)
        recs = [[] for _ in range(n)]
        errors = []

        def loop(i):
            cur = conns[i].cursor()
            try:
                cur.execute('SET zklock.verify_at_commit = on')
                rec, mono = recs[i], time.monotonic
                start.wait()
                while not stop.is_set():
                    cur.execute('BEGIN')
                    cur.execute('SELECT zk_lock_exclusive(%s)', [resource])
                    a = mono()
                    tok = cur.fetchone()[0]
                    c = mono()
                    cur.execute('COMMIT')
                    r = mono()
                    rec.append((tok, a, c, r))
            except Exception as e:        # noqa: BLE001 (reported below)
                errors.append(repr(e))
                stop.set()
        threads = [threading.Thread(target=loop, args=(i,), daemon=True)
                   for i in range(n)]
        try:
            for t in threads:
                t.start()
            start.wait(timeout=60)
            time.sleep(self.warmup)
            t0 = time.monotonic()
            time.sleep(secs)
            t1 = time.monotonic()
            stop.set()
            for t in threads:
                t.join(60)
        finally:
            stop.set()
            for conn in conns:
                try:
                    conn.close()
                except Exception:
                    pass
        if errors:
            raise RuntimeError('zklock latency driver: ' + errors[0])
        grants = sorted(g for rec in recs for g in rec if t0 <= g[1] <= t1)
        toks = [g[0] for g in grants]
        if len(set(toks)) != len(toks):
            raise RuntimeError('zklock latency driver: a fencing token granted twice')
        pairs = list(zip(grants, grants[1:]))
        from_ret = sorted(1e6 * (b[1] - a[3]) for a, b in pairs)
        from_call = sorted(1e6 * (b[1] - a[2]) for a, b in pairs)
        # a grant whose lock call returned before the previous holder's
        # COMMIT was sent: two holders at once
        overlaps = sum(1 for a, b in pairs if b[1] < a[2])
        return {'cycles': len(grants), 'seconds': t1 - t0, 'handoffs': len(pairs),
                'overlaps': overlaps,
                'lat_ret_p50_us': pct(from_ret, 0.5), 'lat_ret_p99_us': pct(from_ret, 0.99),
                'lat_call_p50_us': pct(from_call, 0.5),
                'lat_call_p99_us': pct(from_call, 0.99)}

    LATENCY = [
        ('zklock-on', 'zklock (verify on)', 'bench-latency'),
        ('curator', 'Curator InterProcessMutex', '/curator-bench/latency'),
        ('kazoo', 'kazoo Lock', '/kazoo-bench/latency'),
    ]

    def part_latency(self):
        keys = ('p50_ret', 'p99_ret', 'p50_call', 'p99_call', 'rate', 'handoffs')
        res = {k: {'label': label, **{f: {n: [] for n in self.latency_clients} for f in keys}}
               for k, label, _ in self.LATENCY}
        for r in range(self.runs):
            for n in self.latency_clients:
                for key, label, path in self.LATENCY:
                    s0 = cpu_stat()
                    try:
                        if key == 'zklock-on':
                            out = self.zklock_latency(n, path, self.lat_secs)
                        else:
                            out = self.peer(key, n, path + '-%d' % n, 'latency',
                                            self.lat_secs)[3]
                        if out.get('overlaps'):
                            raise RuntimeError('%d grants before the previous release'
                                               % out['overlaps'])
                        if not out.get('handoffs'):
                            raise RuntimeError('no handoff in the measured window')
                    except Exception as e:
                        # a finding, not tried again (see measure())
                        log('latency %s with %d client(s) FAILED: %s' % (key, n, e))
                        self.failures.append('latency %s, %d client(s): %s' % (
                            key, n, str(e).splitlines()[0]))
                        out = {}
                    st = steal_percent(s0, cpu_stat())
                    if st is not None:
                        self.steal.append(st)
                    v = res[key]
                    v['p50_ret'][n].append(out.get('lat_ret_p50_us'))
                    v['p99_ret'][n].append(out.get('lat_ret_p99_us'))
                    v['p50_call'][n].append(out.get('lat_call_p50_us'))
                    v['p99_call'][n].append(out.get('lat_call_p99_us'))
                    v['rate'][n].append(out['cycles'] / out['seconds'] if out else None)
                    v['handoffs'][n].append(out.get('handoffs'))
                    log('latency run %d/%d N=%-2d %-10s %s handoffs; from release return: '
                        'median %s p99 %s us; from release call: median %s p99 %s us'
                        % (r + 1, self.runs, n, key, fmt(out.get('handoffs'), '%d'),
                           fmt(out.get('lat_ret_p50_us'), '%.0f'),
                           fmt(out.get('lat_ret_p99_us'), '%.0f'),
                           fmt(out.get('lat_call_p50_us'), '%.0f'),
                           fmt(out.get('lat_call_p99_us'), '%.0f')))
        for v in res.values():
            for f in keys:
                v['median_' + f] = {n: median(v[f][n]) for n in self.latency_clients}
        self.results['latency'] = res

    # -- semaphores ----------------------------------------------------------

    SEMAPHORE = [
        ('zklock-sem-curator-rw', 'zklock, zklock.protocol = curator-rw (default)', None),
        ('zklock-sem-kazoo', 'zklock, zklock.protocol = kazoo', None),
        ('curator-sem', 'Curator InterProcessSemaphoreV2', '/curator-bench/semaphore'),
        ('kazoo-sem', 'kazoo Semaphore', '/kazoo-bench/semaphore'),
        ('raw-sem', 'rawzk: zklock\'s semaphore protocol with the check, no PostgreSQL '
         '(the bound)', '/rawzk-sem'),
    ]

    def part_semaphore(self):
        n = self.sem_clients
        res = {k: {'label': label, 'rate': [], 'reqs': [], 'cpu_client': [], 'cpu_zk': []}
               for k, label, _ in self.SEMAPHORE}
        for r in range(self.runs):
            for key, label, path in self.SEMAPHORE:
                rate, reqs, cpu = self.measure(key, n, path)
                v = res[key]
                v['rate'].append(rate)
                v['reqs'].append(reqs)
                v['cpu_client'].append(cpu[0] if cpu else None)
                v['cpu_zk'].append(cpu[1] if cpu else None)
                log('semaphore run %d/%d %-22s %8.1f acquisitions/s  %.2f requests each  '
                    'CPU us each client %s ZooKeeper %s'
                    % (r + 1, self.runs, key, rate or 0, reqs or 0,
                       fmt(cpu and cpu[0], '%.0f'), fmt(cpu and cpu[1], '%.0f')))
        for v in res.values():
            for f in ('rate', 'reqs', 'cpu_client', 'cpu_zk'):
                v['median_' + f] = median(v[f])
        res['clients'], res['permits'] = n, self.sem_permits
        self.results['semaphore'] = res

    def part_herd(self):
        kz = harness.connect_kazoo(self.zk.connect_string)
        zi = harness.ZkInspector(kz, '/zklock')
        try:
            for n, verify in self.herd_cases:
                label = 'N=%d' % n if verify == 'on' else 'N=%d, verify off' % n
                h = self._herd(n, zi, verify)
                h['n'], h['verify'] = n, verify
                self.results['herd'][label] = h
                log('herd %-16s watches while queued %d, notifications per release '
                    'mean %.2f max %d, requests per release %.2f, handoff %.2f ms'
                    % (label, h['watches_queued'], h['notif_mean'], h['notif_max'],
                       h['reqs_mean'], h['handoff_ms_median']))
        finally:
            kz.stop()
            kz.close()

    def _herd(self, n, zi, verify='on'):
        resource = 'bench-herd-%d-%s' % (n, verify)
        backends = []
        setting = 'SET zklock.verify_at_commit = %s' % verify
        try:
            holder = harness.Backend(self.pg, 'herd-holder')
            backends.append(holder)
            holder.query(setting)
            holder.query('BEGIN')
            holder.query('SELECT zk_lock_exclusive(%s)', [resource])
            waiting = {}
            granted_at = {}

            def on_done(b):
                def cb(fut):
                    granted_at[b] = time.monotonic()
                return cb
            for i in range(n):
                b = harness.Backend(self.pg, 'herd-w%d' % i)
                backends.append(b)
                b.query(setting)
                b.query('BEGIN')
                fut = b.submit('SELECT zk_lock_exclusive(%s)', [resource])
                fut.add_done_callback(on_done(b))
                waiting[b] = fut
                # queue them one by one: the order is the creation order
                zi.wait_contenders(resource, i + 2, timeout=30)
            harness.wait_until(
                lambda: self.mntr()['zk_watch_count'] >= n, 30,
                '%d watches set' % n)
            time.sleep(0.2)
            watches_queued = int(self.mntr()['zk_watch_count'])

            current = holder
            notifs, reqs, handoff_ms = [], [], []
            for k in range(n):
                m0 = self.mntr()
                t0 = time.monotonic()
                current.query('COMMIT')
                nxt = harness.wait_until(
                    lambda: [b for b, f in waiting.items() if f.done()], 30,
                    'the next waiter of %s to be granted' % resource,
                    interval=0.001)
                if len(nxt) != 1:
                    raise RuntimeError('%d waiters granted at once' % len(nxt))
                b = nxt[0]
                waiting.pop(b).result()        # raises if the wait failed
                time.sleep(0.05)               # late notifications, if any
                m1 = self.mntr()
                notifs.append(self.notifications(m1) - self.notifications(m0))
                reqs.append(self.requests(m0, m1))
                handoff_ms.append(1e3 * (granted_at[b] - t0))
                current = b
            m0 = self.mntr()
            current.query('COMMIT')
            time.sleep(0.05)
            last_notifs = self.notifications(self.mntr()) - self.notifications(m0)
            return {
                'watches_queued': watches_queued,
                'releases': n,
                'notif_per_release': notifs,
                'notif_mean': statistics.mean(notifs),
                'notif_max': max(notifs),
                'notif_min': min(notifs),
                'notif_last_release': last_notifs,
                'reqs_mean': statistics.mean(reqs),
                'handoff_ms_median': statistics.median(handoff_ms),
                'handoff_ms': handoff_ms,
            }
        finally:
            for b in backends:
                b.close()

    def _rss_kb(self, pid):
        with open('/proc/%d/status' % pid) as f:
            return int(re.search(r'^VmRSS:\s+(\d+) kB', f.read(), re.M).group(1))

    def _zk_log_errors(self):
        bad = []
        for sid in self.zk.sids:
            for line in harness.tail(self.zk.log_path(sid), 100000).splitlines():
                if re.search(r'Len error|jute\.maxbuffer|too large|exceeds', line):
                    bad.append(line.strip())
        return bad

    def part_many(self):
        n = self.many
        conn = self.pg.connect()
        cur = conn.cursor()
        res = {'locks': n, 'fresh': [], 'existing': [], 'runs': self.many_runs}
        mem = self.results['memory']
        try:
            cur.execute('SELECT pg_backend_pid()')
            pid = cur.fetchone()[0]
            mem['connected_kb'] = self._rss_kb(pid)
            cur.execute("SELECT zk_lock_exclusive('bench-many-first')")  # session opens
            mem['session_kb'] = self._rss_kb(pid)
            cur.execute('SELECT reconnects FROM zk_status()')
            reconnects0 = cur.fetchone()[0]
            log_errors0 = len(self._zk_log_errors())
            eph0 = self.mntr()['zk_ephemerals_count']
            for r in range(self.many_runs):
                for phase, verify in (('fresh', 'on'), ('existing', 'off')):
                    # fresh: lock parents that do not exist yet (created as
                    # containers on the way); existing: the same names again
                    # right away, parents still there
                    m0 = self.mntr()
                    cur.execute('BEGIN')
                    cur.execute('SET LOCAL zklock.verify_at_commit = %s' % verify)
                    t0 = time.monotonic()
                    cur.execute("SELECT count(zk_lock_exclusive('bench-many-%d-' || i)) "
                                "FROM generate_series(1, %d) i" % (r, n))
                    t1 = time.monotonic()
                    eph_held = self.mntr()['zk_ephemerals_count'] - eph0
                    if r == 0 and phase == 'fresh':
                        mem['held_kb'] = self._rss_kb(pid)
                    t2 = time.monotonic()
                    cur.execute('COMMIT')
                    t3 = time.monotonic()
                    if r == 0 and phase == 'fresh':
                        mem['released_kb'] = self._rss_kb(pid)
                    harness.wait_until(
                        lambda: self.mntr()['zk_ephemerals_count'] <= eph0, 120,
                        'ZooKeeper to delete the %d released nodes' % n,
                        interval=0.01)
                    t4 = time.monotonic()
                    m1 = self.mntr()
                    row = {
                        'verify': verify,
                        'acquire_us_per_lock': 1e6 * (t1 - t0) / n,
                        'commit_ms': 1e3 * (t3 - t2),
                        'drain_ms': 1e3 * (t4 - t2),
                        'nodes_held': int(eph_held),
                        'requests_per_lock': self.requests(m0, m1) / n,
                        'avg_request_bytes': (m1['zk_bytes_received_count'] -
                                              m0['zk_bytes_received_count']) /
                        max(1, self.requests(m0, m1)),
                    }
                    res[phase].append(row)
                    log('many run %d/%d %-8s verify %-3s: %.1f us/lock acquire, '
                        'COMMIT %.1f ms, all deleted after %.1f ms, %.2f requests/lock'
                        % (r + 1, self.many_runs, phase, verify,
                           row['acquire_us_per_lock'], row['commit_ms'],
                           row['drain_ms'], row['requests_per_lock']))
            cur.execute('SELECT reconnects FROM zk_status()')
            reconnects1 = cur.fetchone()[0]
            m = self.mntr()
            res['reconnects'] = reconnects1 - reconnects0
            res['zk_log_errors'] = self._zk_log_errors()[log_errors0:]
            res['max_response_bytes'] = int(m['zk_max_client_response_size'])
            res['limit_ok'] = limit_respected(res)
            for phase in ('fresh', 'existing'):
                for k in ('acquire_us_per_lock', 'commit_ms', 'drain_ms',
                          'requests_per_lock', 'avg_request_bytes'):
                    res['%s_%s' % (phase, k)] = median(r[k] for r in res[phase])
        finally:
            conn.close()
        self.results['many'] = res

    def _array_round(self, cur, impl, names, eph0):
        """One transaction taking `names` by one array call or by the
        scalar loop, then COMMIT; waits until ZooKeeper has deleted them."""
        n = len(names)
        cur.execute('SELECT pg_backend_pid()')
        pid = cur.fetchone()[0]
        m0 = self.mntr()
        cur.execute('BEGIN')
        b0, z0 = cpu_ns([pid]), cpu_ns(self.zk_pids())
        t0 = time.monotonic()
        if impl == 'array':
            cur.execute('SELECT zk_lock_exclusive(%s::text[])', [names])
        else:
            cur.execute('SELECT count(zk_lock_exclusive(r)) '
                        'FROM unnest(%s::text[]) r', [names])
        t1 = time.monotonic()
        b1, z1 = cpu_ns([pid]), cpu_ns(self.zk_pids())
        cur.execute('COMMIT')
        t2 = time.monotonic()
        harness.wait_until(
            lambda: self.mntr()['zk_ephemerals_count'] <= eph0, 120,
            'ZooKeeper to delete the %d released nodes' % n, interval=0.01)
        m1 = self.mntr()
        return {'acquire_ms': 1e3 * (t1 - t0), 'commit_ms': 1e3 * (t2 - t1),
                'requests_per_lock': self.requests(m0, m1) / n,
                # CPU while taking them: the backend (libzookeeper's
                # threads included) and the ZooKeeper servers together
                'backend_cpu_ms': (b1 - b0) / 1e6, 'zk_cpu_ms': (z1 - z0) / 1e6}

    def part_arrays(self):
        res = {}
        conn = self.pg.connect()
        cur = conn.cursor()
        try:
            for n, runs, scalar_runs in self.array_cases:
                names = ['bench-set-%d/%05d' % (n, i) for i in range(n)]
                eph0 = self.mntr()['zk_ephemerals_count']
                # the lock parents exist from here on, as for a job that
                # takes the same set every few seconds
                self._array_round(cur, 'array', names, eph0)
                rows = {'array': [], 'scalar': []}
                raws = []
                for r in range(runs):
                    for impl in ('array', 'scalar', 'rawzk'):
                        if impl == 'scalar' and r >= scalar_runs:
                            continue
                        if impl == 'rawzk':
                            raws.append(kv_line(run(
                                [RAWZK, 'set', self.zk.connect_string,
                                 '/rawzk-set-%d' % n, str(n), '1'],
                                timeout=600).stdout))
                            log('arrays %5d locks run %d/%d rawzk : %.1f ms, release %.1f ms'
                                % (n, r + 1, runs, raws[-1]['acquire_ms'],
                                   raws[-1]['release_ms']))
                            continue
                        row = self._array_round(cur, impl, names, eph0)
                        rows[impl].append(row)
                        log('arrays %5d locks run %d/%d %-6s: %.1f ms, COMMIT %.1f ms, '
                            '%.2f requests/lock' % (n, r + 1, runs, impl, row['acquire_ms'],
                                                   row['commit_ms'], row['requests_per_lock']))
                raw = {'acquire_ms': median(x['acquire_ms'] for x in raws),
                       'release_ms': median(x['release_ms'] for x in raws)}
                out = {'locks': n, 'runs': runs, 'scalar_runs': scalar_runs,
                       'raw_acquire_ms': raw['acquire_ms'],
                       'raw_release_ms': raw['release_ms'], 'rows': rows}
                for impl in ('array', 'scalar'):
                    for k in ('acquire_ms', 'commit_ms', 'requests_per_lock',
                              'backend_cpu_ms', 'zk_cpu_ms'):
                        out['%s_%s' % (impl, k)] = median(x[k] for x in rows[impl])
                res[n] = out
        finally:
            conn.close()
        self.results['arrays'] = res

    # -- names never used before (issue 31) ---------------------------------

    def _fresh_call(self, cur, names, eph0):
        """One transaction taking `names` (a list: one array call; a str:
        one scalar call), then COMMIT; waits until ZooKeeper has deleted the
        nodes.  Returns (call ms, COMMIT ms, requests per lock)."""
        n = len(names) if isinstance(names, list) else 1
        m0 = self.mntr()
        cur.execute('BEGIN')
        t0 = time.monotonic()
        if isinstance(names, list):
            cur.execute('SELECT zk_lock_exclusive(%s::text[])', [names])
        else:
            cur.execute('SELECT zk_lock_exclusive(%s)', [names])
        t1 = time.monotonic()
        m1 = self.mntr()
        t2 = time.monotonic()
        cur.execute('COMMIT')
        t3 = time.monotonic()
        harness.wait_until(
            lambda: self.mntr()['zk_ephemerals_count'] <= eph0, 120,
            'ZooKeeper to delete the %d released nodes' % n, interval=0.01)
        return 1e3 * (t1 - t0), 1e3 * (t3 - t2), self.requests(m0, m1) / n

    def part_fresh(self):
        """Names never used before, the normal case (issue 31): every
        round takes names no round used, so no lock parent exists whatever
        the reaper does (it is put off for the run, see start()); then the
        same names again right away, warm (parents there, and known to the
        backend).  10,000 and 100 locks in one call, and single locks: a
        new name for each call against one name over and over.  A new
        connection for each round, as a nightly job has."""
        res = self.results['fresh']
        rows = {}
        all_singles = {'fresh': [], 'warm': []}
        stamp = int(time.time())
        for r in range(self.fresh_rounds):
            conn = self.pg.connect()
            cur = conn.cursor()
            try:
                cur.execute("SELECT zk_lock_exclusive('bench-fresh-session')")
                eph0 = self.mntr()['zk_ephemerals_count']
                for n in (10000, 100):
                    names = ['bench-fresh-%d-%d-%d/%05d' % (stamp, r, n, i)
                             for i in range(n)]
                    for phase in ('fresh', 'warm'):
                        ms, commit_ms, rpl = self._fresh_call(cur, names, eph0)
                        d = rows.setdefault('%s%d' % (phase, n), [])
                        d.append({'ms': ms, 'commit_ms': commit_ms, 'rpl': rpl})
                        log('fresh round %d/%d: %5d %-5s names: %.1f ms, COMMIT %.1f ms, '
                            '%.2f requests/lock' % (r + 1, self.fresh_rounds, n, phase,
                                                   ms, commit_ms, rpl))
                one_warm = 'bench-fresh-%d-%d-one' % (stamp, r)
                self._fresh_call(cur, one_warm, eph0)        # its parent exists now
                singles = {'fresh': [], 'warm': []}
                for i in range(self.fresh_singles):
                    # alternated, so that both see the same load
                    singles['fresh'].append(self._fresh_call(
                        cur, 'bench-fresh-%d-%d-one-%d' % (stamp, r, i), eph0))
                    singles['warm'].append(self._fresh_call(cur, one_warm, eph0))
                for phase in ('fresh', 'warm'):
                    ms = sorted(x[0] for x in singles[phase])
                    all_singles[phase].extend(ms)
                    rows.setdefault('one_' + phase, []).append({
                        'ms': median(ms), 'rpl': median(x[2] for x in singles[phase])})
                log('fresh round %d/%d: one lock, fresh %.2f ms (%.1f requests), '
                    'warm %.2f ms (%.1f requests), medians of %d'
                    % (r + 1, self.fresh_rounds, rows['one_fresh'][-1]['ms'],
                       rows['one_fresh'][-1]['rpl'], rows['one_warm'][-1]['ms'],
                       rows['one_warm'][-1]['rpl'], self.fresh_singles))
            finally:
                conn.close()
        res['rounds'] = self.fresh_rounds
        res['singles'] = self.fresh_singles
        for key, xs in rows.items():
            res[key] = {k: median(x[k] for x in xs) for k in xs[0]}
            res[key]['max_ms'] = max(x['ms'] for x in xs)
        for phase, ms in all_singles.items():
            # the tail over every call of every round
            ms.sort()
            res['one_' + phase].update({'p99': nearest_rank(ms, 0.99),
                                        'p999': nearest_rank(ms, 0.999),
                                        'max': ms[-1], 'calls': len(ms)})

    def part_stats(self):
        """Statistics on against off (issue 32): bench/stats_part.py."""
        stats_part.run(self)

    def part_waitcost(self):
        """What waiting costs (issue 38): bench/waitcost_part.py."""
        waitcost_part.run(self)

    def part_failfast(self):
        """From a loss to the holder's error, and the cost (issue 39):
        bench/failfast_part.py."""
        failfast_part.run(self)

    # -- tail latency (issue 27) ---------------------------------------------

    TAIL = [
        ('zklock', 'zklock (pgbench; the reply nudge on, as by default)', None),
        ('raw-recipe', 'rawzk recipe (zklock\'s protocol in C, no nudge)',
         '/rawzk-tail'),
        ('curator', 'Curator InterProcessMutex', '/curator-bench/tail'),
        ('kazoo', 'kazoo Lock', '/kazoo-bench/tail'),
    ]

    def part_tail(self):
        """Each implementation once per N, its every cycle recorded; a
        window with no cycle, or a run that fails, is a failure the report
        shows (not tried again: a stall is what this part looks for)."""
        res = self.results['tail']
        res['secs'], res['peer_secs'] = self.tail_secs, self.tail_peer_secs
        for n in self.tail_clients:
            for key, label, path in self.TAIL:
                secs = self.tail_secs if key == 'zklock' else self.tail_peer_secs
                row = res.setdefault(key, {'label': label})
                try:
                    recs, lost = self._tail_run(key, n, path, secs)
                    if not recs:
                        raise RuntimeError('no cycle completed in the measured window')
                    row[n] = tail_stats(recs, n)
                    row[n]['lost'] = lost
                    row[n]['seconds'] = secs
                except Exception as e:
                    log('tail %s with %d client(s) FAILED: %s' % (key, n, e))
                    self.failures.append('tail %s, %d client(s): %s'
                                         % (key, n, str(e).splitlines()[0]))
                    row[n] = None
                    continue
                st = row[n]
                log('tail N=%-2d %-10s %7d cycles  p50 %.1f  p99 %.1f  p99.9 %.1f  '
                    'max %.1f ms%s  connections lost %d'
                    % (n, key, st['cycles'], st['cycle']['p50'], st['cycle']['p99'],
                       st['cycle']['p999'], st['cycle']['max'],
                       '  release interval p99.9 %.1f max %.1f ms'
                       % (st['gap']['p999'], st['gap']['max']) if st.get('gap') else '',
                       lost))

    def _tail_run(self, key, n, path, secs):
        """([(start_ns, end_ns), ...] of the cycles started in the window,
        connections lost or timed out)."""
        out_dir = os.path.join(self.work, 'tail-%s-%d' % (key, n))
        os.makedirs(out_dir, exist_ok=True)
        harness.chown_to_pg_user(out_dir)
        if key != 'zklock':
            f = os.path.join(out_dir, 'cycles')
            env_key = 'RAWZK_TAIL_FILE' if key.startswith('raw-') else 'BENCH_TAIL_FILE'
            old = os.environ.get(env_key)
            os.environ[env_key] = f
            try:
                out = self.peer(key, n, path + '-%d' % n,
                                None if key.startswith('raw-') else 'tail', secs)[3]
            finally:
                if old is None:
                    del os.environ[env_key]
                else:
                    os.environ[env_key] = old
            with open(f) as fh:
                recs = [tuple(int(x) for x in line.split()) for line in fh if line.strip()]
            return recs, int(out.get('reconnects') or 0)
        # zklock: pgbench, every transaction logged (its end, epoch us, and
        # its latency); the window starts after the warm-up
        offset = self.pg.log_size()
        script = os.path.join(out_dir, 'cycle.sql')
        with open(script, 'w') as fh:
            fh.write("BEGIN;\nSELECT zk_lock_exclusive('bench-tail-%d');\nCOMMIT;\n" % n)
        os.chmod(script, 0o644)
        warm = self.warmup
        cmd = harness.as_pg_user([
            PGBENCH, '-n', '-h', '127.0.0.1', '-p', str(self.pg.port),
            '-U', 'postgres', '-c', str(n), '-j', str(min(n, 2)),
            '-T', str(warm + secs), '-l', '--log-prefix',
            os.path.join(out_dir, 'tx'), '-f', script, 'postgres'])
        r = subprocess.run(cmd, cwd=out_dir, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=warm + secs + 300)
        if r.returncode != 0:
            raise RuntimeError('pgbench failed (status %d):\n%s%s'
                               % (r.returncode, r.stdout, r.stderr))
        recs = []
        for name in os.listdir(out_dir):
            if not name.startswith('tx'):
                continue
            with open(os.path.join(out_dir, name)) as fh:
                for line in fh:
                    # client_id transaction_no time script_no time_epoch time_us
                    p = line.split()
                    end = int(p[4]) * 1000000000 + int(p[5]) * 1000
                    recs.append((end - int(p[2]) * 1000, end))
        if recs:
            t0 = min(a for a, _ in recs) + int(warm * 1e9)
            recs = [x for x in recs if x[0] >= t0]
        lost = sum(1 for line in self.pg.log_since(offset).splitlines()
                   if re.search(r'ZOO_ERROR.*timed out', line))
        return recs, lost

    def part_memory(self):
        """RSS of a fresh backend before and after mem_cycles lock cycles
        (the 10,000-held-locks figures come from part_many's backend)."""
        res = self.results['memory']
        conn = self.pg.connect()
        cur = conn.cursor()
        try:
            cur.execute('SELECT pg_backend_pid()')
            pid = cur.fetchone()[0]
            if 'held_kb' in res:
                log('memory: connected %d kB, session open %d kB, %d locks held %d kB, '
                    'released %d kB' % (res['connected_kb'], res['session_kb'], self.many,
                                        res['held_kb'], res['released_kb']))
            chunks = 5
            per = self.mem_cycles // chunks

            def cycle(k):
                return ("DO $$ BEGIN FOR i IN 1..%d LOOP "
                        "PERFORM zk_lock_exclusive('bench-mem-cycle'); COMMIT; "
                        "END LOOP; END $$" % k)
            cur.execute(cycle(self.mem_warm))   # warm: caches, hash table, library
            series = [self._rss_kb(pid)]
            t0 = time.monotonic()
            for _ in range(chunks):
                cur.execute(cycle(per))
                series.append(self._rss_kb(pid))
            secs = time.monotonic() - t0
            res['cycles'] = per * chunks
            res['warm'] = self.mem_warm
            res['cycle_series_kb'] = series
            res['before_kb'] = series[0]
            res['after_kb'] = series[-1]
            res['bytes_per_cycle'] = 1024.0 * (series[-1] - series[0]) / res['cycles']
            res['cycle_us_in_do'] = 1e6 * secs / res['cycles']
            res['leak_ok'] = (series[-1] - series[0]) < 1024   # < 1 MB over the run
            log('memory: %d cycles: RSS %d kB -> %d kB (%s), %.1f us per cycle in a DO loop'
                % (res['cycles'], series[0], series[-1],
                   ' '.join(str(s) for s in series), res['cycle_us_in_do']))
        finally:
            conn.close()
        self.results['memory'] = res


# ---------------------------------------------------------------------------
# machine, report, chart
# ---------------------------------------------------------------------------

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except Exception:
        return '?'


def machine(bench):
    info = {}
    info['nproc'] = sh('nproc')
    info['cpu'] = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    mem = sh("grep MemTotal /proc/meminfo | awk '{print $2}'")
    info['memory'] = '%.1f GiB' % (int(mem) / 1048576.0) if mem.isdigit() else mem
    info['kernel'] = platform.release()
    info['os'] = 'Debian ' + sh('cat /etc/debian_version')
    info['postgresql'] = sh(PGBENCH + ' --version').replace('pgbench (PostgreSQL) ', '')
    info['zookeeper'] = sh("dpkg-query -W -f='${Version}' zookeeper")
    info['libzookeeper-mt'] = sh("dpkg-query -W -f='${Version}' libzookeeper-mt2")
    info['curator'] = sh("dpkg-query -W -f='${Version}' libcurator-recipes-java")
    info['kazoo'] = sh("dpkg-query -W -f='${Version}' python3-kazoo")
    info['java'] = sh('java -version 2>&1 | head -1')
    info['python'] = platform.python_version()
    info['zklock_commit'] = sh('cd %s && git rev-parse --short HEAD' % ROOT)
    dirty = sh('cd %s && git status --porcelain -- src sql Makefile' % ROOT)
    info['zklock_src_modified'] = 'yes' if dirty else 'no'
    info['zklock_so_md5'] = sh("md5sum $(%s --pkglibdir)/zklock.so | cut -c1-12"
                               % harness.PG_CONFIG)
    info['ensemble'] = ('standalone' if bench.args.zk_servers == 1
                        else '%d servers' % bench.args.zk_servers)
    info['zk_fsync'] = 'forceSync=yes (the fsynced floor of issue 6)' \
        if bench.args.fsync else 'forceSync=no (as make test)'
    info['zk_jvm'] = ('-XX:TieredStopAtLevel=1 (as make test)' if bench.args.zk_c1
                      else 'full JIT (-XX:TieredStopAtLevel=4), -Xms256m -Xmx256m, SerialGC')
    return info


def ratio(a, b):
    return a / b if a and b else None


def paired(xs, ys):
    """Median of the per-run ratios xs[i] / ys[i].  Each run measures the
    implementations back to back, so a slow minute on a shared host slows
    both sides of a ratio; the ratio of two separate medians would mix a
    slow run of one with a fast run of the other."""
    return median([ratio(x, y) for x, y in zip(xs, ys)])


def u_ratio(u, a, b):
    """Uncontended: a's time per cycle over b's, paired by run."""
    return paired(u[a]['us'], u[b]['us'])


def c_ratio(c, a, b, n):
    """Contended, N clients: a's handoffs per second over b's, paired by run."""
    return paired(c[a]['rate'][n], c[b]['rate'][n])


def pct(sorted_xs, p):
    """Nearest-rank percentile of a sorted list (as the peers compute it)."""
    if not sorted_xs:
        return None
    k = max(0, min(len(sorted_xs) - 1, int(math.ceil(p * len(sorted_xs))) - 1))
    return sorted_xs[k]


def fmt(x, spec='%.1f'):
    return spec % x if x is not None else 'n/a'


CONTENDED_NS = (2, 4, 16, 64)


def l_ratio(lat, a, b, n, fa, fb):
    """Handoff latency, N clients: a's figure fa over b's fb, paired by run."""
    return paired(lat[a][fa][n], lat[b][fb][n])


def fresh_targets(res):
    """Issue 31's targets over the fresh part's medians."""
    fr = res.get('fresh') or {}
    out = []
    if not fr.get('fresh10000'):
        return out
    g = lambda k, f: (fr.get(k) or {}).get(f)
    checks = [
        ('10,000 fresh names in one call <= 1000 ms', g('fresh10000', 'ms'), 1000),
        ('10,000 warm names in one call <= 500 ms', g('warm10000', 'ms'), 500),
        ('COMMIT of 10,000 <= 300 ms', g('fresh10000', 'commit_ms'), 300),
        ('100 fresh names in one call <= 15 ms', g('fresh100', 'ms'), 15),
        ('requests per lock, fresh path <= 2.2', g('fresh10000', 'rpl'), 2.2),
    ]
    for name, v, bound in checks:
        out.append((name, v, v is not None and v <= bound))
    if g('one_fresh', 'ms') and g('one_warm', 'ms'):
        r = g('one_fresh', 'ms') / g('one_warm', 'ms')
        out.append(('one fresh name / one warm name <= 1.5', r, r <= 1.5))
    return out


def tail_targets(res, out):
    """Issue 27's targets: zklock's cycle p99.9 at most 2x Curator's, its
    maximum (cycle, and release interval at 16) at most 150 ms, no
    connection lost, over the tail part's windows."""
    t = res.get('tail') or {}
    z, c = t.get('zklock') or {}, t.get('curator') or {}
    for n in (1, 16):
        zs, cs = z.get(n), c.get(n)
        if not zs:
            continue
        ratio = zs['cycle']['p999'] / cs['cycle']['p999'] if cs else None
        out.append(('tail N=%d: zklock p99.9 / Curator p99.9 <= 2' % n, ratio,
                    ratio is not None and ratio <= 2))
        worst = max(zs['cycle']['max'], (zs.get('gap') or {}).get('max', 0))
        out.append(('tail N=%d: zklock max (cycle, release interval) <= 150 ms' % n,
                    worst, worst <= 150))
        out.append(('tail N=%d: zklock connections timed out = 0' % n, zs['lost'],
                    zs['lost'] == 0))


def targets(res):
    """(label, measured value, met) for every target of issue 18, then the
    arrays (issue 17), many-locks and memory checks that stay, then the
    tail (issue 27)."""
    u = res['uncontended']
    c = res['contended']
    lat = res.get('latency') or {}
    sem = res.get('semaphore') or {}
    out = []
    tail_targets(res, out)
    out.extend(stats_part.targets(res))
    out.extend(waitcost_part.targets(res))
    out.extend(failfast_part.targets(res))

    def at_least(label, x, bound):
        out.append((label, x, x is not None and x >= bound))
    if u:
        # rates: zklock's rate over the peer's = the peer's time over zklock's
        at_least('uncontended: zklock (verify on) / Curator >= 1.3',
                 u_ratio(u, 'curator', 'zklock-on'), 1.3)
        at_least('uncontended: zklock (verify on) / kazoo >= 1.6',
                 u_ratio(u, 'kazoo', 'zklock-on'), 1.6)
    if c:
        for n in CONTENDED_NS:
            if n not in c['zklock-on']['median']:
                continue
            at_least('contended N=%d: zklock (verify on) / Curator >= 1.2' % n,
                     c_ratio(c, 'zklock-on', 'curator', n), 1.2)
            at_least('contended N=%d: zklock (verify on) / kazoo >= 1.5' % n,
                     c_ratio(c, 'zklock-on', 'kazoo', n), 1.5)
            at_least('contended N=%d: zklock (verify on) / rawzk recipe >= 0.8' % n,
                     c_ratio(c, 'zklock-on', 'raw-recipe', n), 0.8)
    if lat:
        for n in sorted(lat['zklock-on']['p50_ret']):
            for q in ('p50', 'p99'):
                x = l_ratio(lat, 'zklock-on', 'curator', n, q + '_ret', q + '_call')
                out.append(('handoff latency N=%d, %s: zklock / Curator (release call) <= 1'
                            % (n, 'median' if q == 'p50' else 'p99'), x,
                            x is not None and x <= 1.0))
    if res['herd']:
        worst = max(h['notif_max'] for h in res['herd'].values())
        out.append(('herd: notifications per release <= 2 (max; N=%s)'
                    % ', '.join(sorted(set(str(h['n']) for h in res['herd'].values()),
                                       key=int)), worst,
                    all(h['notif_max'] <= 2 for h in res['herd'].values())))
    if sem:
        z = 'zklock-sem-curator-rw'
        at_least('semaphore (%d permits, %d clients): zklock / Curator >= 1.2'
                 % (sem['permits'], sem['clients']),
                 paired(sem[z]['rate'], sem['curator-sem']['rate']), 1.2)
        at_least('semaphore (%d permits, %d clients): zklock / kazoo >= 1.2'
                 % (sem['permits'], sem['clients']),
                 paired(sem[z]['rate'], sem['kazoo-sem']['rate']), 1.2)
    arrays = res.get('arrays') or {}
    if 10000 in arrays:
        a = arrays[10000]
        out.append(('arrays: 10,000 free locks in one call < 500 ms',
                    a['array_acquire_ms'], a['array_acquire_ms'] < 500))
        out.append(('arrays: COMMIT releasing them < 200 ms',
                    a['array_commit_ms'], a['array_commit_ms'] < 200))
    if 100 in arrays:
        a = arrays[100]
        out.append(('arrays: 100 free locks in one call < 10 ms',
                    a['array_acquire_ms'], a['array_acquire_ms'] < 10))
    if res['many']:
        out.append(('10,000 locks: 1 MB packet limit respected', None,
                    res['many']['limit_ok']))
    if res['memory'].get('cycles'):
        out.append(('memory: no per-lock leak over %d cycles (bytes/cycle; < 1 MB in all)'
                    % res['memory']['cycles'],
                    res['memory']['bytes_per_cycle'], res['memory']['leak_ok']))
    return out


def references(res):
    """(label, value) that put the targets in proportion: where each bound
    comes from.  rawzk recipe runs zklock's protocol (with the commit check:
    sync + exists) in C with no PostgreSQL, one session per thread: for a
    handoff no zklock can be faster, since zklock's critical path runs the
    same requests plus PostgreSQL's statements; so where rawzk recipe /
    Curator is below 1.2 (or / kazoo below 1.5) the contended target is out
    of reach for this protocol on this machine.  Uncontended, rawzk recipe
    alone is not a bound (its next create waits for the fsync of the delete
    it has just sent, where zklock spends that time in PostgreSQL): rawzk
    recipe with PostgreSQL's time (this round's advisory cycle) slept right
    after each delete is, since that is the only place where a zklock cycle's
    PostgreSQL time can overlap ZooKeeper's work, and a sleep uses no CPU.
    The semaphore's bound is rawzk's semaphore mode (zklock's Curator-layout
    semaphore with the check, in C)."""
    u = res['uncontended']
    c = res['contended']
    lat = res.get('latency') or {}
    sem = res.get('semaphore') or {}
    out = []
    if u:
        if 'raw-recipe-gap' in u:
            for peer, name, t in (('curator', 'Curator', 1.3), ('kazoo', 'kazoo', 1.6)):
                out.append(('uncontended: rawzk recipe with PostgreSQL\'s time slept / %s: '
                            'the bound of the protocol (target >= %.1f)' % (name, t),
                            u_ratio(u, peer, 'raw-recipe-gap')))
            out.append(('uncontended: zklock (verify on) / rawzk recipe with PostgreSQL\'s '
                        'time slept', u_ratio(u, 'raw-recipe-gap', 'zklock-on')))
        if all(k in u for k in ('raw-sync', 'raw-read', 'advisory')):
            best = [r / 2 + rd + a if r and rd and a else None
                    for r, rd, a in zip(u['raw-sync']['us'], u['raw-read']['us'],
                                        u['advisory']['us'])]
            for peer, name in (('curator', 'Curator'), ('kazoo', 'kazoo')):
                out.append(('uncontended: (floor/2 + read + advisory) / %s: arithmetic, '
                            'not a bound (counts the delete as free)' % name,
                            paired(u[peer]['us'], best)))
        for peer, name in (('curator', 'Curator'), ('kazoo', 'kazoo')):
            out.append(('uncontended: zklock (verify off) / %s' % name,
                        u_ratio(u, peer, 'zklock-off')))
            if 'raw-recipe' in u:
                out.append(('uncontended: rawzk recipe / %s' % name,
                            u_ratio(u, peer, 'raw-recipe')))
            if 'raw-pipelined' in u:
                out.append(('uncontended: rawzk pipelined (no check) / %s' % name,
                            u_ratio(u, peer, 'raw-pipelined')))
        if 'raw-sync' in u:
            out.append(('uncontended: zklock (verify on) time / floor (issue 6: <= 1.25)',
                        u_ratio(u, 'zklock-on', 'raw-sync')))
            out.append(('uncontended: zklock (verify off) time / floor (issue 6: <= 1.0)',
                        u_ratio(u, 'zklock-off', 'raw-sync')))
    if c:
        for n in CONTENDED_NS:
            if n not in c['zklock-on']['median']:
                continue
            out.append(('contended N=%d: rawzk recipe / Curator: the bound of the protocol '
                        '(target >= 1.2)' % n, c_ratio(c, 'raw-recipe', 'curator', n)))
            out.append(('contended N=%d: rawzk recipe / kazoo: the bound of the protocol '
                        '(target >= 1.5)' % n, c_ratio(c, 'raw-recipe', 'kazoo', n)))
            out.append(('contended N=%d: zklock (verify off) / Curator' % n,
                        c_ratio(c, 'zklock-off', 'curator', n)))
    if lat:
        for n in sorted(lat['zklock-on']['p50_ret']):
            for q in ('p50', 'p99'):
                out.append(('handoff latency N=%d, %s: zklock / Curator from release() return'
                            % (n, 'median' if q == 'p50' else 'p99'),
                            l_ratio(lat, 'zklock-on', 'curator', n, q + '_ret', q + '_ret')))
                out.append(('handoff latency N=%d, %s: zklock from COMMIT call / Curator '
                            'from release() call' % (n, 'median' if q == 'p50' else 'p99'),
                            l_ratio(lat, 'zklock-on', 'curator', n, q + '_call', q + '_call')))
    if sem:
        if 'raw-sem' in sem:
            for peer, name in (('curator-sem', 'Curator'), ('kazoo-sem', 'kazoo')):
                out.append(('semaphore: rawzk semaphore / %s: the bound of the protocol '
                            '(target >= 1.2)' % name,
                            paired(sem['raw-sem']['rate'], sem[peer]['rate'])))
            out.append(('semaphore: zklock / rawzk semaphore',
                        paired(sem['zklock-sem-curator-rw']['rate'], sem['raw-sem']['rate'])))
        z = 'zklock-sem-kazoo'
        out.append(('semaphore: zklock (zklock.protocol = kazoo) / Curator',
                    paired(sem[z]['rate'], sem['curator-sem']['rate'])))
        out.append(('semaphore: zklock (zklock.protocol = kazoo) / kazoo',
                    paired(sem[z]['rate'], sem['kazoo-sem']['rate'])))
    return out


def budget(res):
    """Where an uncontended zklock cycle's time goes, from the medians:
    [(label, microseconds or None)]."""
    u = res['uncontended']
    if not u:
        return []
    g = {k: u[k]['median_us'] for k in u}
    for k in Bench.REFERENCE_ONLY + ('raw-sync', 'raw-read', 'advisory',
                                     'zklock-on', 'zklock-off'):
        g.setdefault(k, None)

    def sub(a, *bs):
        if a is None or any(b is None for b in bs):
            return None
        return a - sum(bs)
    half = g['raw-sync'] / 2 if g['raw-sync'] else None
    if g['raw-read-tuned'] is None:
        rows = [r for r in budget_rows(g, half, sub) if 'read tuned' not in r[0]]
        return rows
    return budget_rows(g, half, sub)


def budget_rows(g, half, sub):
    return [
        ('PostgreSQL part: BEGIN; SELECT; COMMIT through pgbench (advisory cycle)',
         g['advisory']),
        ('one ZooKeeper read round trip (rawzk read)', g['raw-read']),
        ('one ZooKeeper write round trip (rawzk sync / 2)', half),
        ('  ... libzookeeper host re-resolution per round trip (read - read tuned)',
         sub(g['raw-read'], g['raw-read-tuned'])),
        ('zklock verify off - advisory: ZooKeeper part (floor: 1 write round trip)',
         sub(g['zklock-off'], g['advisory'])),
        ('zklock verify on - off: the pre-commit check (floor: 1 read round trip)',
         sub(g['zklock-on'], g['zklock-off'])),
    ]


def summary_table(res):
    lines = []
    u = res['uncontended']
    if u:
        lines.append('Uncontended lock cycle, 1 client (median of %d runs x %d s)'
                     % (res['runs'], res['seconds']))
        lines.append('  %-50s %9s %6s %7s %9s' % ('', 'us/cycle', 'x raw', 'ZK req',
                                                   'CPU cl/ZK'))
        for key, v in u.items():
            lines.append('  %-50s %9s %6s %7s %9s' % (
                v['label'], fmt(v['median_us']),
                fmt(u_ratio(u, key, 'raw-sync'), '%.2f'),
                fmt(v['median_reqs'], '%.2f'),
                '%s/%s' % (fmt(v['median_cpu_client'], '%.0f'),
                           fmt(v['median_cpu_zk'], '%.0f'))))
    if u:
        lines.append('')
        lines.append('Where an uncontended cycle goes (medians, us)')
        for label, v in budget(res):
            lines.append('  %-72s %8s' % (label, fmt(v)))
    c = res['contended']
    if c:
        ns = sorted(next(iter(c.values()))['median'])
        lines.append('')
        lines.append('Contended: N clients on one lock, handoffs per second (median)')
        lines.append('  %-22s' % 'N' + ''.join('%9d' % n for n in ns))
        for key, v in c.items():
            lines.append('  %-22s' % v['label'] +
                         ''.join('%9s' % fmt(v['median'][n], '%.0f') for n in ns))
        lines.append('  %-22s' % 'zklock / Curator' +
                     ''.join('%9s' % fmt(c_ratio(c, 'zklock-on', 'curator', n), '%.2f')
                             for n in ns))
        lines.append('  %-22s' % 'zklock / kazoo' +
                     ''.join('%9s' % fmt(c_ratio(c, 'zklock-on', 'kazoo', n), '%.2f')
                             for n in ns))
        lines.append('  CPU us per handoff at N=%d (client / ZooKeeper): %s' % (ns[-1], '; '.join(
            '%s %s/%s' % (v['label'], fmt(v['median_cpu_client'][ns[-1]], '%.0f'),
                          fmt(v['median_cpu_zk'][ns[-1]], '%.0f')) for v in c.values())))
    lat = res.get('latency') or {}
    if lat:
        lines.append('')
        lines.append('Handoff latency (median over rounds of each round\'s median / p99, us): '
                     'zklock from COMMIT return, peers from release() call | from return')
        for key, v in lat.items():
            lines.append('  %-28s' % v['label'] + '   '.join(
                'N=%d: %s / %s | %s / %s' % (
                    n, fmt(v['median_p50_' + ('ret' if key == 'zklock-on' else 'call')][n], '%.0f'),
                    fmt(v['median_p99_' + ('ret' if key == 'zklock-on' else 'call')][n], '%.0f'),
                    fmt(v['median_p50_ret'][n], '%.0f'), fmt(v['median_p99_ret'][n], '%.0f'))
                for n in sorted(v['p50_ret'])))
    sem = res.get('semaphore') or {}
    if sem:
        lines.append('')
        lines.append('Semaphore, %d permits, %d clients: acquisitions per second (median), '
                     'ZK requests each, CPU us each client/ZooKeeper'
                     % (sem['permits'], sem['clients']))
        for key, v in sem.items():
            if isinstance(v, dict):
                lines.append('  %-48s %8s %6s %s/%s' % (
                    v['label'], fmt(v['median_rate'], '%.0f'), fmt(v['median_reqs'], '%.2f'),
                    fmt(v['median_cpu_client'], '%.0f'), fmt(v['median_cpu_zk'], '%.0f')))
    h = res['herd']
    if h:
        lines.append('')
        lines.append('Herd: notifications delivered per release (mntr watch-trigger sums)')
        for label, v in h.items():
            lines.append('  %-16s watches while queued %3d; per release mean %.2f min %d '
                         'max %d; ZK requests per release %.2f; handoff %.2f ms'
                         % (label, v['watches_queued'], v['notif_mean'], v['notif_min'],
                            v['notif_max'], v['reqs_mean'], v['handoff_ms_median']))
    m = res['many']
    if m:
        lines.append('')
        lines.append('Many locks: %d distinct locks in one transaction' % m['locks'])
        lines.append('  acquire, new lock parents:      %8.1f us/lock  (%.2f ZK requests/lock)'
                     % (m['fresh_acquire_us_per_lock'], m['fresh_requests_per_lock']))
        lines.append('  acquire, existing lock parents: %8.1f us/lock  (%.2f ZK requests/lock)'
                     % (m['existing_acquire_us_per_lock'], m['existing_requests_per_lock']))
        lines.append('  COMMIT, verify on:  %8.1f ms; all nodes deleted %.1f ms after COMMIT began'
                     % (m['fresh_commit_ms'], m['fresh_drain_ms']))
        lines.append('  COMMIT, verify off: %8.1f ms; all nodes deleted %.1f ms after COMMIT began'
                     % (m['existing_commit_ms'], m['existing_drain_ms']))
        lines.append('  1 MB limit: reconnects %d, ZooKeeper log errors %d, largest response %d bytes -> %s'
                     % (m['reconnects'], len(m['zk_log_errors']), m['max_response_bytes'],
                        'ok' if m['limit_ok'] else 'VIOLATED'))
    mem = res['memory']
    if mem and 'cycles' in mem:
        lines.append('')
        lines.append('Memory (backend VmRSS)')
        if 'held_kb' in mem:
            lines.append('  connected %d kB; session open %d kB; %d locks held %d kB; '
                         'released %d kB' % (mem['connected_kb'], mem['session_kb'],
                                             self_many(res), mem['held_kb'],
                                             mem['released_kb']))
        lines.append('  %d lock cycles: %d kB -> %d kB (%.2f bytes/cycle)'
                     % (mem['cycles'], mem['before_kb'], mem['after_kb'],
                        mem['bytes_per_cycle']))
    return '\n'.join(lines)


def write_chart(res, info, path):
    """bench/handoffs.png: handoffs per second against N (log x), one line
    per implementation; below it, handoff latency (median and p99) against
    N for zklock and the peers."""
    c = res['contended']
    lat = res.get('latency') or {}
    if not c and not lat:
        return False
    keys = ['zklock-on', 'curator', 'kazoo', 'zklock-off', 'raw-recipe']
    dat = os.path.join(BUILD, 'handoffs.dat')
    ns = sorted(next(iter(c.values()))['median']) if c else [1, 2]
    with open(dat, 'w') as f:
        f.write('# N ' + ' '.join(keys) + '\n')
        for n in ns:
            f.write('%d %s\n' % (n, ' '.join(
                fmt(c[k]['median'].get(n) if k in c else None, '%.1f') for k in keys)))
    lkeys = [k for k in ('zklock-on', 'curator', 'kazoo') if k in lat]
    ldat = os.path.join(BUILD, 'latency.dat')
    lns = sorted(lat['zklock-on']['p50_ret']) if lat else [2, 16]
    with open(ldat, 'w') as f:
        # zklock: from COMMIT return; peers: from the release() call
        f.write('# N ' + ' '.join('%s_p50 %s_p99' % (k, k) for k in lkeys) + '\n')
        for n in lns:
            cells = []
            for k in lkeys:
                side = 'ret' if k == 'zklock-on' else 'call'
                cells += [fmt(lat[k]['median_p50_' + side][n], '%.1f'),
                          fmt(lat[k]['median_p99_' + side][n], '%.1f')]
            f.write('%d %s\n' % (n, ' '.join(cells)))
    names = {'zklock-on': 'zklock (verify on)', 'curator': 'Curator', 'kazoo': 'kazoo'}
    colors = {'zklock-on': '#1f77b4', 'curator': '#d62728', 'kazoo': '#2ca02c'}
    lplots = []
    # the medians in the key's first column, the p99s in the second
    for i, k in enumerate(lkeys):
        lplots.append('"%s" using 1:%d with linespoints lw 2 pt 7 lc rgb "%s" title "%s median"'
                      % (ldat, 2 + 2 * i, colors[k], names[k]))
    for i, k in enumerate(lkeys):
        lplots.append('"%s" using 1:%d with linespoints lw 1 dt 2 pt 6 lc rgb "%s" title "%s p99"'
                      % (ldat, 3 + 2 * i, colors[k], names[k]))
    panels = []
    if c:
        panels.append('''set title "Lock handoffs per second vs clients on one lock (N = 1: the uncontended cycle)"
set xlabel "clients contending for one lock"
set ylabel "handoffs per second (median of %(runs)d rounds)"
set logscale x 2
set xtics (%(xtics)s)
set xrange [0.8:%(xmax)s]
set yrange [0:*]
set grid
set datafile missing "n/a"
set key bottom right box opaque
plot "%(dat)s" using 1:2 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "zklock (pgbench, verify on)", \\
     "%(dat)s" using 1:5 with linespoints lw 1 dt 2 pt 6 lc rgb "#1f77b4" title "zklock (verify off)", \\
     "%(dat)s" using 1:3 with linespoints lw 2 pt 5 lc rgb "#d62728" title "Curator InterProcessMutex", \\
     "%(dat)s" using 1:4 with linespoints lw 2 pt 9 lc rgb "#2ca02c" title "kazoo Lock", \\
     "%(dat)s" using 1:6 with linespoints lw 1 dt 3 pt 4 lc rgb "#555555" title "rawzk recipe: zklock's protocol in C, no PostgreSQL"
''')
    if lat:
        panels.append('''set logscale x 2
set grid
set datafile missing "n/a"
set yrange [0:*]
set xlabel "clients contending for one lock"
set title "Handoff latency: zklock from COMMIT return, Curator/kazoo from the release() call, to the next acquire's return"
set ylabel "microseconds (median over rounds)"
set xtics (%(lxtics)s)
set xrange [%(lxmin)s:%(lxmax)s]
set offsets 0, 0, graph 0.45, 0
set key top left vertical maxrows %(lkeys)d box opaque
plot %(lplots)s
''')
    gp = ('''set terminal pngcairo size 900,%(height)d font "DejaVu Sans,11"
set output "%(out)s"
set multiplot layout %(panels)d,1 title "%(sub)s" noenhanced
''' + ''.join(panels) + 'unset multiplot\n') % {
       'out': path, 'dat': dat, 'runs': res['runs'], 'height': 120 + 440 * len(panels),
       'xtics': ', '.join('"%d" %d' % (n, n) for n in ns), 'xmax': ns[-1] * 1.25,
       'lxtics': ', '.join('"%d" %d' % (n, n) for n in lns),
       'lxmin': lns[0] / 1.4, 'lxmax': lns[-1] * 1.4,
       'lplots': ', \\\n     '.join(lplots) if lplots else '0 notitle', 'panels': len(panels), 'lkeys': max(1, len(lkeys)),
       'sub': '%s ZooKeeper %s, %s CPUs (%s), kernel %s' % (
           info['ensemble'], info['zookeeper'], info['nproc'], info['cpu'],
           info['kernel'])}
    gpf = os.path.join(BUILD, 'handoffs.gp')
    with open(gpf, 'w') as f:
        f.write(gp)
    r = subprocess.run(['gnuplot', gpf], capture_output=True, text=True)
    if r.returncode != 0:
        log('gnuplot failed: %s' % r.stderr)
        return False
    return True


def n_table(ns, rows):
    """Markdown lines of a table with one column per N; rows are
    (label, [cell for each N])."""
    return (['| N | ' + ' | '.join(str(n) for n in ns) + ' |',
             '|---|' + '---:|' * len(ns)] +
            ['| %s | %s |' % (label, ' | '.join(cells)) for label, cells in rows])


def limit_respected(m):
    """The 1 MB packet limit held in part many: no server logged an
    oversized packet and no response came near it.  A reconnect of the
    backend's session alone does not say the limit was crossed: the
    ensemble's stalls (see Bench.measure) reconnect sessions whatever
    their traffic, so reconnects are reported beside the verdict, not in
    it."""
    return not m['zk_log_errors'] and m['max_response_bytes'] < JUTE_MAXBUFFER


def int_keys(o):
    """results.json's dicts keyed by numbers (clients, locks) came back
    with string keys: make them numbers again."""
    if isinstance(o, dict):
        return {(int(k) if isinstance(k, str) and k.isdigit() else k): int_keys(v)
                for k, v in o.items()}
    if isinstance(o, list):
        return [int_keys(v) for v in o]
    return o


def write_markdown(res, info, path, elapsed, load):
    u, c, h, m, mem = (res['uncontended'], res['contended'], res['herd'],
                       res['many'], res['memory'])
    L = []
    L.append('# zklock benchmark results')
    L.append('')
    L.append('Written by `make bench` (`bench/run_bench.py`) on %s; the run took %.1f min.'
             % (res.get('written') or datetime.datetime.now().strftime('%Y-%m-%d %H:%M'),
                elapsed / 60))
    if res.get('rendered'):
        L.append('(This file was written again from the run\'s results.json on %s, '
                 'after a change to the report alone: %s)' % res['rendered'])
    L.append('Every number is the median of %d rounds (%d s measured after a warm-up '
             'of 1 s, 2 s for Curator\'s JIT; handoff latency: %d s per measurement); '
             'every implementation is interleaved within each round, and every ratio is '
             'the median of the per-round ratios (the two sides of a ratio are measured '
             'seconds to minutes apart, on the same host load). All clients and servers '
             'run on the same machine, over loopback; the clients\' connect strings list '
             'every server. rawzk recipe runs with RAWZK_OWNWATCH=%d (%s).'
             % (res['runs'], res['seconds'], res.get('lat_seconds', res['seconds']),
                res.get('ownwatch', 0),
                'zklock\'s protocol: with one contender ahead, a waiter also '
                'watches its own node, is granted without a listing and '
                'confirms with a sync alone' if res.get('ownwatch') else
                'zklock\'s protocol before issue 18: list again after every '
                'watch'))
    L.append('')
    L.append('## Machine')
    L.append('')
    L.append('| | |')
    L.append('|---|---|')
    for k in ('cpu', 'nproc', 'memory', 'os', 'kernel', 'postgresql', 'zookeeper',
              'libzookeeper-mt', 'curator', 'kazoo', 'java', 'python', 'ensemble',
              'zk_fsync', 'zk_jvm', 'zklock_commit', 'zklock_src_modified', 'zklock_so_md5'):
        L.append('| %s | %s |' % (k, info.get(k, '?')))
    L.append('| load average at start / end | %s / %s |' % load)
    st = res.get('steal') or {}
    L.append('| host CPU steal during the measurements (median / max) | %s %% / %s %% |'
             % (fmt(st.get('median'), '%.1f'), fmt(st.get('max'), '%.1f')))
    L.append('')
    L.append('The machine is a VM on a shared host, so single runs are noisy; '
             'compare the ratios (measured side by side) more than the absolute '
             'numbers. "Host CPU steal" is the share of CPU time the hypervisor gave '
             'to other guests while the figures were measured (/proc/stat): above a '
             'few percent every wake-up and round trip is slower and less regular, '
             'and the ratios move with it. PostgreSQL runs with fsync off (as '
             '`make test`); ZooKeeper with %s.' % info['zk_fsync'])
    L.append('')
    L.append('## Targets (issue 18)')
    L.append('')
    L.append('Each a ratio of two implementations measured side by side in every round '
             '(median of the per-round ratios); rates for throughput (higher is better), '
             'times for latency (lower is better). The arrays, many-locks and memory '
             'checks of issues 6 and 17 follow.')
    L.append('')
    L.append('| target | measured | met |')
    L.append('|---|---|---|')
    for name, value, ok in targets(res):
        L.append('| %s | %s | %s |' % (name, fmt(value, '%.2f'), 'yes' if ok else '**no**'))
    refs = references(res)
    if refs:
        L.append('')
        L.append('Where the bounds come from (not targets). rawzk recipe runs '
                 'zklock\'s whole protocol with the commit check (sync + exists) '
                 'in C with no PostgreSQL, one session per thread: a handoff\'s '
                 'critical path in zklock runs the same requests plus '
                 'PostgreSQL\'s statements, so where rawzk recipe / Curator is '
                 'below 1.2 (or / kazoo below 1.5) that contended target is out of '
                 'reach for the protocol on this machine in this run. Uncontended, '
                 'rawzk recipe alone is not a bound (its next create waits for the '
                 'fsync of the delete it has just sent, where zklock spends that '
                 'time in PostgreSQL); the bound is rawzk recipe sleeping, right after '
                 'each delete, this round\'s advisory cycle time (PostgreSQL\'s '
                 'statements): that is the only place where a zklock cycle\'s '
                 'PostgreSQL time can overlap ZooKeeper\'s work (the delete\'s '
                 'fsync), and a sleep takes hardly any CPU from the servers (it '
                 'spins its last 100 µs so as not to oversleep), where PostgreSQL '
                 'takes its share. Semaphores: rawzk\'s semaphore mode runs zklock\'s '
                 'Curator-layout semaphore (internal mutex with the own watch; '
                 'lease and count with the mutex\'s delete right behind them, '
                 'and a second round that keeps the mutex when there was no '
                 'room; the check on the lease) in C, one session per '
                 'thread. The handoff latency rows show the same '
                 'comparison from the other end of each release.')
        L.append('')
        L.append('| ratio | measured |')
        L.append('|---|---:|')
        for name, value in refs:
            L.append('| %s | %s |' % (name, fmt(value, '%.2f')))
    if u:
        L.append('')
        L.append('## Uncontended lock cycle (1 client)')
        L.append('')
        L.append('zklock and the advisory lock: pgbench, one client, '
                 '`BEGIN; SELECT zk_lock_exclusive(\'bench-cycle\'); COMMIT;` '
                 '(resp. `pg_advisory_xact_lock(42)`). rawzk: `bench/rawzk.c`. '
                 'Curator / kazoo: acquire()+release() loop, one client. '
                 '"ZK requests" = the server\'s `zk_packets_received` delta divided by the '
                 'cycles of the run. CPU = CPU time of every thread of the client side '
                 '(pgbench + its backends, or the peer\'s process tree) and of the '
                 'ZooKeeper server(s) during the measured window '
                 '(`/proc/<pid>/task/*/schedstat`), divided by the cycles in it. '
                 '"resolution delay -1": the C client with '
                 '`zoo_set_servers_resolution_delay(zh, -1)`, which stops libzookeeper '
                 'from re-resolving the host list (getaddrinfo, a netlink dump) every '
                 'time its I/O thread polls.')
        L.append('')
        L.append('| implementation | µs per cycle | × raw | ZK requests per cycle '
                 '| client CPU µs/cycle | ZooKeeper CPU µs/cycle | runs (µs) |')
        L.append('|---|---:|---:|---:|---:|---:|---|')
        for key, v in u.items():
            L.append('| %s | %s | %s | %s | %s | %s | %s |' % (
                v['label'], fmt(v['median_us']), fmt(u_ratio(u, key, 'raw-sync'), '%.2f'),
                fmt(v['median_reqs'], '%.2f'), fmt(v['median_cpu_client'], '%.0f'),
                fmt(v['median_cpu_zk'], '%.0f'),
                ', '.join(fmt(x, '%.0f') for x in v['us'])))
        g = u.get('raw-recipe-gap')
        if g and g.get('gap_slept'):
            L.append('')
            L.append('The bound\'s sleep after each delete, per round: asked (that round\'s '
                     'advisory cycle) / slept on average, µs: %s.'
                     % ', '.join('%s / %s' % (fmt(a, '%.0f'), fmt(b, '%.0f'))
                                 for a, b in zip(g['gap_asked'], g['gap_slept'])))
    if u:
        L.append('')
        L.append('Where an uncontended cycle goes, from the medians above (differences of '
                 'separately measured medians: indicative, not exact):')
        L.append('')
        L.append('| | µs |')
        L.append('|---|---:|')
        for label, v in budget(res):
            L.append('| %s | %s |' % (label.replace('  ...', '…').replace('  -', '−').strip(),
                                       fmt(v)))
    if c:
        ns = sorted(next(iter(c.values()))['median'])
        L.append('')
        L.append('## Contended: N clients on one lock')
        L.append('')
        L.append('Handoffs (= lock cycles) per second. zklock: `pgbench -c N -j 1`; '
                 'Curator: N threads, each its own CuratorFramework; kazoo: N processes, '
                 'each its own KazooClient; rawzk recipe: N threads, each its own '
                 'session; all on one lock path. N = 1 is the uncontended cycle of the '
                 'section above. Ratios: medians of the per-round ratios.')
        L.append('')
        L.append('![handoffs per second](handoffs.png)')
        L.append('')
        L += n_table(ns, [(v['label'], [fmt(v['median'][n], '%.0f') for n in ns])
                          for v in c.values()] +
                     [('zklock (verify on) / %s' % c[peer]['label'],
                       [fmt(c_ratio(c, 'zklock-on', peer, n), '%.2f') for n in ns])
                      for peer in ('curator', 'kazoo', 'raw-recipe')] +
                     [('rawzk recipe / %s (the bound)' % c[peer]['label'],
                       [fmt(c_ratio(c, 'raw-recipe', peer, n), '%.2f') for n in ns])
                      for peer in ('curator', 'kazoo')])
        L.append('')
        L.append('ZooKeeper requests per handoff (all clients):')
        L.append('')
        L += n_table(ns, [(v['label'], [fmt(v['median_reqs'][n], '%.2f') for n in ns])
                          for v in c.values()])
        L.append('')
        L.append('CPU per handoff, client side / ZooKeeper (µs; see the uncontended section):')
        L.append('')
        L += n_table(ns, [(v['label'], ['%s / %s' % (fmt(v['median_cpu_client'][n], '%.0f'),
                                                     fmt(v['median_cpu_zk'][n], '%.0f'))
                                        for n in ns])
                          for v in c.values()])
        L.append('')
        L.append('<details><summary>every run</summary>')
        L.append('')
        for key, v in c.items():
            L.append('- %s: ' % v['label'] + '; '.join(
                'N=%d: %s' % (n, ', '.join(fmt(x, '%.0f') for x in v['rate'][n])) for n in ns))
        L.append('')
        L.append('</details>')
    lat = res.get('latency') or {}
    if lat:
        lns = sorted(lat['zklock-on']['p50_ret'])
        L.append('')
        L.append('## Handoff latency')
        L.append('')
        L.append('From a holder\'s release to the next holder\'s grant, client side, '
                 'for N clients on one lock. zklock: N psycopg2 connections (threads), '
                 'each looping `BEGIN; SELECT zk_lock_exclusive(..); COMMIT` with '
                 '`zklock.verify_at_commit` on; grants ordered by fencing token; latency = '
                 'the lock call\'s return of grant i+1 minus the COMMIT\'s return of '
                 'grant i (zklock sends its delete inside COMMIT without waiting, so this '
                 'can be negative). Curator / kazoo: acquire()+release() loop (Curator: '
                 'threads, each its own client; kazoo: processes); grants ordered by '
                 'acquire time; latency from holder i\'s release() call (the delete is '
                 'sent then; the target compares this) and from its return, to holder '
                 'i+1\'s acquire() return. Each round\'s median and p99 (nearest rank) '
                 'over %s handoffs; below, the median over rounds, µs.'
                 % '/'.join(fmt(median(lat['zklock-on']['handoffs'][n]), '%.0f')
                            for n in lns))
        L.append('')
        L.append('"Release" is COMMIT for zklock, release() for the peers. The targets '
                 'compare zklock from the release\'s return with Curator from the '
                 'release() call.')
        L.append('')
        L.append('| implementation | N | median from release return | p99 from release return '
                 '| median from release call | p99 from release call | handoffs per s |')
        L.append('|---|---:|---:|---:|---:|---:|---:|')
        for key, v in lat.items():
            for n in lns:
                L.append('| %s | %d | %s | %s | %s | %s | %s |' % (
                    v['label'], n, fmt(v['median_p50_ret'][n], '%.0f'),
                    fmt(v['median_p99_ret'][n], '%.0f'),
                    fmt(v['median_p50_call'][n], '%.0f'),
                    fmt(v['median_p99_call'][n], '%.0f'),
                    fmt(v['median_rate'][n], '%.0f')))
        L.append('')
        L.append('| ratio (median of per-round ratios) | ' +
                 ' | '.join('N=%d median | N=%d p99' % (n, n) for n in lns) + ' |')
        L.append('|---|' + '---:|' * (2 * len(lns)))
        for peer in [k for k in ('curator', 'kazoo') if k in lat]:
            L.append('| zklock (COMMIT return) / %s (release call) | %s |' % (
                lat[peer]['label'], ' | '.join(
                    fmt(l_ratio(lat, 'zklock-on', peer, n, q + '_ret', q + '_call'), '%.2f')
                    for n in lns for q in ('p50', 'p99'))))
            L.append('| zklock (COMMIT return) / %s (release return) | %s |' % (
                lat[peer]['label'], ' | '.join(
                    fmt(l_ratio(lat, 'zklock-on', peer, n, q + '_ret', q + '_ret'), '%.2f')
                    for n in lns for q in ('p50', 'p99'))))
        L.append('')
        L.append('<details><summary>every round (median / p99, µs)</summary>')
        L.append('')
        for key, v in lat.items():
            side = 'ret' if key == 'zklock-on' else 'call'
            L.append('- %s: ' % v['label'] + '; '.join(
                'N=%d: %s' % (n, ', '.join('%s/%s' % (fmt(a, '%.0f'), fmt(b, '%.0f'))
                                          for a, b in zip(v['p50_' + side][n],
                                                          v['p99_' + side][n])))
                for n in lns))
        L.append('')
        L.append('</details>')
    sem = res.get('semaphore') or {}
    if sem:
        L.append('')
        L.append('## Semaphores: %d permits, %d clients' % (sem['permits'], sem['clients']))
        L.append('')
        L.append('zklock: `BEGIN; SELECT zk_lock_semaphore(\'bench-sem\', %d); COMMIT;` '
                 'through `pgbench -c %d -j 1`, with the default `zklock.protocol` '
                 '(curator-rw) and with `-c zklock.protocol=kazoo` in PGOPTIONS. Curator: '
                 '%d threads, each its own client and InterProcessSemaphoreV2 (maxLeases '
                 '%d), acquire()+returnLease() loop. kazoo: %d processes, each its own '
                 'KazooClient and Semaphore (max_leases %d). Acquisitions per second; ZK '
                 'requests and CPU per acquisition as in the sections above.'
                 % (sem['permits'], sem['clients'], sem['clients'], sem['permits'],
                    sem['clients'], sem['permits']))
        L.append('')
        L.append('| implementation | acquisitions per s | × Curator | × kazoo '
                 '| ZK requests each | client CPU µs each | ZooKeeper CPU µs each | rounds |')
        L.append('|---|---:|---:|---:|---:|---:|---:|---|')
        for key, v in sem.items():
            if not isinstance(v, dict):
                continue
            L.append('| %s | %s | %s | %s | %s | %s | %s | %s |' % (
                v['label'], fmt(v['median_rate'], '%.0f'),
                fmt(paired(v['rate'], sem['curator-sem']['rate']), '%.2f'),
                fmt(paired(v['rate'], sem['kazoo-sem']['rate']), '%.2f'),
                fmt(v['median_reqs'], '%.2f'), fmt(v['median_cpu_client'], '%.0f'),
                fmt(v['median_cpu_zk'], '%.0f'),
                ', '.join(fmt(x, '%.0f') for x in v['rate'])))
    if h:
        L.append('')
        L.append('## Herd effect')
        L.append('')
        L.append('N zklock waiters (each its own backend, `BEGIN; SELECT '
                 'zk_lock_exclusive(...)`) queue behind a holder; then the holder and each '
                 'new holder in turn COMMITs, N releases in all. Method: the server\'s '
                 'watch-trigger summaries in `mntr` (`zk_sum_node_created/deleted/changed/'
                 'children_watch_count`: watchers notified per event, summed over every '
                 'server) read before each COMMIT and after the next waiter is granted '
                 '(+50 ms); "watches while queued" is `mntr` `zk_watch_count` once all N wait. '
                 'Handoff = from the holder\'s COMMIT being sent to the next waiter\'s '
                 'zk_lock_exclusive returning (client side, includes the holder\'s COMMIT). '
                 '"ZK requests per release" counts every client\'s requests from before '
                 'the COMMIT until the next holder is known (the bench\'s own `mntr` '
                 'calls taken out; idle waiters\' pings, one per session every third of '
                 'the session timeout, included).')
        L.append('')
        L.append('| waiters | watches while queued | notifications per release (mean / min / max) '
                 '| after the last release | ZK requests per release | handoff median (ms) |')
        L.append('|---|---:|---|---:|---:|---:|')
        for label, v in h.items():
            L.append('| %s | %d | %.2f / %d / %d | %d | %.2f | %.2f |' % (
                label, v['watches_queued'], v['notif_mean'], v['notif_min'], v['notif_max'],
                v['notif_last_release'], v['reqs_mean'], v['handoff_ms_median']))
    if m:
        L.append('')
        L.append('## Many locks in one transaction')
        L.append('')
        L.append('`BEGIN; SELECT count(zk_lock_exclusive(\'bench-many-R-\' || i)) FROM '
                 'generate_series(1, %d) i; COMMIT;` — first with new lock parents '
                 '(`zklock.verify_at_commit` on), then the same names again while the '
                 'parents still exist (verify off). "Deleted" is when `mntr` '
                 '`zk_ephemerals_count` is back to where it was: releases are sent '
                 'without waiting, so COMMIT returns before ZooKeeper has run them. '
                 'Median of %d run(s).' % (m['locks'], m['runs']))
        L.append('')
        L.append('| | new parents, verify on | existing parents, verify off |')
        L.append('|---|---:|---:|')
        for k, label, spec in (('acquire_us_per_lock', 'acquire, µs per lock', '%.1f'),
                               ('requests_per_lock', 'ZK requests per lock (acquire + commit)', '%.2f'),
                               ('avg_request_bytes', 'average request size (bytes)', '%.0f'),
                               ('commit_ms', 'COMMIT (ms)', '%.1f'),
                               ('drain_ms', 'all nodes deleted after (ms)', '%.1f')):
            L.append('| %s | %s | %s |' % (label, fmt(m['fresh_' + k], spec),
                                           fmt(m['existing_' + k], spec)))
        L.append('')
        L.append('1 MB limit (`jute.maxbuffer`, default %d bytes on server and client): '
                 'reconnects of the backend\'s session during the test: %d; ZooKeeper log lines '
                 'about oversized packets: %d; largest response the server sent: %d bytes. '
                 '**%s** (an oversized packet shows as a server log line or a response '
                 'at the limit, and makes the client reconnect; a reconnect alone does '
                 'not tell it: the ensemble\'s stalls, see the failed measurements, '
                 'reconnect sessions whatever their traffic).'
                 % (JUTE_MAXBUFFER, m['reconnects'], len(m['zk_log_errors']),
                    m['max_response_bytes'],
                    'Respected' if m['limit_ok'] else 'Not respected'))
    arrays = res.get('arrays') or {}
    if arrays:
        L.append('')
        L.append('## Many locks in one call (arrays)')
        L.append('')
        L.append('`BEGIN; SELECT zk_lock_exclusive(ARRAY[...]); COMMIT;` against the '
                 'scalar loop `SELECT count(zk_lock_exclusive(r)) FROM unnest(ARRAY[...]) r` '
                 'over the same free locks (their parents exist: a first call made them), '
                 '`zklock.verify_at_commit` on; and rawzk set: the array call\'s requests '
                 '(creates in multi requests of 1,000, each listing right behind its multi) '
                 'from the plain C client without PostgreSQL. '
                 'Requests per lock count the COMMIT\'s too. CPU is what the backend '
                 '(libzookeeper\'s threads included) and the ZooKeeper servers used while '
                 'the array call ran: on 2 cores the servers\' share is the bound. Medians.')
        L.append('')
        L.append('| locks | array call (ms) | µs per lock | COMMIT (ms) | requests per lock '
                 '| scalar loop (ms) | µs per lock | COMMIT (ms) | requests per lock '
                 '| rawzk set (ms) | array / rawzk | array: backend CPU (ms) | ZooKeeper CPU (ms) |')
        L.append('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
        for n, a in sorted(arrays.items(), key=lambda kv: int(kv[0])):
            n = int(n)
            L.append('| %d | %.1f | %.1f | %.1f | %.3f | %.1f | %.1f | %.1f | %.3f | %.1f | %.2f | %.0f | %.0f |' % (
                n, a['array_acquire_ms'], 1e3 * a['array_acquire_ms'] / n,
                a['array_commit_ms'], a['array_requests_per_lock'],
                a['scalar_acquire_ms'], 1e3 * a['scalar_acquire_ms'] / n,
                a['scalar_commit_ms'], a['scalar_requests_per_lock'],
                a['raw_acquire_ms'], a['array_acquire_ms'] / a['raw_acquire_ms'],
                a['array_backend_cpu_ms'], a['array_zk_cpu_ms']))
        L.append('')
        L.append('Runs: %s.' % ', '.join('%d locks: %d array, %d scalar, %d rawzk'
                                          % (int(n), a['runs'], a['scalar_runs'], a['runs'])
                                          for n, a in sorted(arrays.items(),
                                                             key=lambda kv: int(kv[0]))))
    if mem and 'cycles' in mem:
        L.append('')
        L.append('## Memory of a backend (VmRSS)')
        L.append('')
        L.append('| state | VmRSS (kB) |')
        L.append('|---|---:|')
        if 'held_kb' in mem:
            L.append('| connected, extension not yet used | %d |' % mem['connected_kb'])
            L.append('| after one lock cycle (ZooKeeper session open) | %d |'
                     % mem['session_kb'])
            L.append('| %d locks held in one transaction | %d |'
                     % (self_many(res), mem['held_kb']))
            L.append('| after their COMMIT | %d |' % mem['released_kb'])
        L.append('| another backend, before %d lock cycles (after a warm-up of %d) | %d |'
                 % (mem['cycles'], mem['warm'], mem['before_kb']))
        L.append('| after them | %d |' % mem['after_kb'])
        L.append('')
        L.append('Cycles: `DO $$ ... PERFORM zk_lock_exclusive(\'bench-mem-cycle\'); COMMIT; '
                 '...$$` in chunks of %d; VmRSS after each chunk: %s kB (%.2f bytes per cycle; '
                 '%.0f µs per cycle inside PostgreSQL, verify on).'
                 % (mem['cycles'] // 5, ', '.join(str(x) for x in mem['cycle_series_kb']),
                    mem['bytes_per_cycle'], mem['cycle_us_in_do']))
    fr = res.get('fresh') or {}
    if fr.get('fresh10000'):
        L.append('')
        L.append('## Names never used before (issue 31)')
        L.append('')
        L.append('Each of %d rounds, on a new connection, takes names no round used '
                 '(so no lock parent exists, as for a job whose parents the server '
                 'reaped since its last run), then the same names again at once '
                 '(warm: parents there and known to the backend). Medians over the '
                 'rounds (max: the worst round); requests per lock from the servers\' '
                 '`mntr` (zk_packets_received). Single locks: %d calls per round, a new '
                 'name each time against one name over and over, alternated; times '
                 'in ms.' % (fr['rounds'], fr['singles']))
        L.append('')
        L.append('| case | call (median of rounds) | worst round | COMMIT (single locks: the tail of every call) | requests per lock |')
        L.append('|---|---|---|---|---|')
        for key, label in (('fresh10000', '10,000 fresh names, one call'),
                           ('warm10000', '10,000 warm names, one call'),
                           ('fresh100', '100 fresh names, one call'),
                           ('warm100', '100 warm names, one call'),
                           ('one_fresh', 'one fresh name'),
                           ('one_warm', 'one warm name')):
            x = fr.get(key)
            if x:
                L.append('| %s | %.1f | %.1f | %s | %.2f |'
                         % (label, x['ms'], x['max_ms'],
                            '%.1f' % x['commit_ms'] if 'commit_ms' in x else
                            'p99 %.2f, p99.9 %.2f, max %.2f of %d calls'
                            % (x['p99'], x['p999'], x['max'], x['calls']), x['rpl']))
        L.append('')
        L.append('| target (issue 31) | measured | met |')
        L.append('|---|---|---|')
        for name, value, ok in fresh_targets(res):
            L.append('| %s | %s | %s |' % (name, fmt(value, '%.3f'), 'yes' if ok else '**no**'))
    stats_part.report(res, L)
    waitcost_part.report(res, L)
    failfast_part.report(res, L)
    tail = res.get('tail') or {}
    if any(isinstance(v, dict) and any(isinstance(k, int) for k in v)
           for v in tail.values()):
        L.append('')
        L.append('## Tail latency (issue 27)')
        L.append('')
        L.append('One run per implementation and N (not rounds: the tail is what a long '
                 'window shows): zklock for %d s, each peer for %d s, on the same ensemble. '
                 'A cycle is the lock call to the release\'s return (zklock: pgbench\'s '
                 'BEGIN; SELECT zk_lock_exclusive(...); COMMIT, with default settings). At '
                 '16 clients, "release interval" is the time between consecutive releases: '
                 'one handoff and one hold, so a stalled handoff shows there. "Lost" counts '
                 'connections that timed out (zklock: libzookeeper\'s "timed out" lines in '
                 'the server log) or reconnected (the peers). rawzk recipe runs zklock\'s '
                 'protocol without the reply nudge: it shows what ZooKeeper 3.8.0\'s lost '
                 'wake-up (ZOOKEEPER-4537) does to that protocol unmitigated. Times in ms.'
                 % (tail.get('secs', 0), tail.get('peer_secs', 0)))
        L.append('')
        L.append('| N | implementation | cycles | p50 | p99 | p99.9 | max | release interval '
                 'p50 / p99 / p99.9 / max | lost |')
        L.append('|---|---|---|---|---|---|---|---|---|')
        for n in (1, 16):
            for key, row in tail.items():
                if not isinstance(row, dict) or n not in row:
                    continue
                st = row[n]
                if st is None:
                    L.append('| %d | %s | failed (see below) | | | | | | |' % (n, row['label']))
                    continue
                cy, gap = st['cycle'], st.get('gap')
                L.append('| %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %s | %d |'
                         % (n, row['label'], st['cycles'], cy['p50'], cy['p99'],
                            cy['p999'], cy['max'],
                            '%.1f / %.1f / %.1f / %.1f' % (gap['p50'], gap['p99'],
                                                           gap['p999'], gap['max'])
                            if gap else '-', st['lost']))
        L.append('')
        L.append('| target (issue 27) | measured | met |')
        L.append('|---|---|---|')
        tt = []
        tail_targets(res, tt)
        for name, value, ok in tt:
            L.append('| %s | %s | %s |' % (name, fmt(value, '%.2f'), 'yes' if ok else '**no**'))
    if res.get('failures'):
        L.append('')
        L.append('## Failed measurements')
        L.append('')
        L.append('A failed measurement (an error, or no cycle in its window) is not tried '
                 'again: it is left out of the medians, and shown here.')
        L.append('')
        for f in res['failures']:
            L.append('- ' + f)
    L.append('')
    L.append('## How to run')
    L.append('')
    L.append('```sh')
    L.append('make bench                 # full run: 3 servers, 5 rounds, ~30 min on 2 cores')
    L.append('make bench QUICK=1         # 1 round, 2 s measurements, 20,000 memory cycles')
    L.append('make bench ZK_SERVERS=1    # standalone ZooKeeper instead of 3 servers')
    L.append('make bench ZK_FSYNC=0      # ZooKeeper with forceSync=no, as make test')
    L.append('make bench BENCH_ONLY=latency,semaphore BENCH_OUT=/tmp/b   # some parts only')
    L.append('make bench BENCH_ONLY=waitcost BENCH_OUT=bench/waitcost   # the cost of waiting (issue 38)')
    L.append('make bench BENCH_ONLY=failfast BENCH_OUT=bench/failfast   # fail fast (issue 39)')
    L.append('```')
    with open(path, 'w') as f:
        f.write('\n'.join(L) + '\n')


PARTS = ('uncontended', 'contended', 'latency', 'semaphore', 'herd', 'many',
         'arrays', 'memory', 'fresh', 'stats', 'tail', 'waitcost', 'failfast')


def self_many(res):
    return res['many']['locks'] if res['many'] else 10000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--quick', action='store_true',
                    default=os.environ.get('QUICK', '') not in ('', '0'))
    ap.add_argument('--zk-servers', type=int,
                    default=int(os.environ.get('ZK_SERVERS') or 3))
    # The floor issue 6 defines is an fsynced write: forceSync=yes unless
    # ZK_FSYNC=0 (or --no-fsync) asks for make test's forceSync=no.
    ap.add_argument('--fsync', action=argparse.BooleanOptionalAction,
                    default=os.environ.get('ZK_FSYNC', '') != '0')
    ap.add_argument('--zk-c1', action='store_true',
                    help="keep the harness's -XX:TieredStopAtLevel=1 for ZooKeeper")
    ap.add_argument('--runs', type=int, default=int(os.environ.get('BENCH_RUNS') or 0))
    ap.add_argument('--seconds', type=int,
                    default=int(os.environ.get('BENCH_SECONDS') or 0))
    ap.add_argument('--only', default=os.environ.get('BENCH_ONLY') or ','.join(PARTS),
                    help='parts, comma separated, of: ' + ', '.join(PARTS))
    ap.add_argument('--tail-seconds', type=int,
                    default=int(os.environ.get('BENCH_TAIL_SECONDS') or 600),
                    help='tail part: zklock\'s window at each N (default 600)')
    ap.add_argument('--tail-peer-seconds', type=int,
                    default=int(os.environ.get('BENCH_TAIL_PEER_SECONDS') or 120),
                    help='tail part: each peer\'s window at each N (default 120)')
    ap.add_argument('--waitcost', choices=('default', 'full'),
                    default=os.environ.get('BENCH_WAITCOST') or 'default',
                    help='waitcost part: the default cases or the full grid '
                    '(every mode and layout at K = 10, 100, 500)')
    ap.add_argument('--waitcost-seconds', type=int,
                    default=int(os.environ.get('BENCH_WAITCOST_SECONDS') or 0),
                    help='waitcost part: each window (default 16 s, QUICK 8)')
    ap.add_argument('--ownwatch', type=int, choices=(0, 1),
                    default=int(os.environ.get('BENCH_OWNWATCH') or OWNWATCH),
                    help='RAWZK_OWNWATCH for rawzk recipe (default %d)' % OWNWATCH)
    ap.add_argument('--all-rows', action='store_true',
                    help='also the reference-only uncontended rows (rawzk pipelined, '
                    'resolution delay -1)')
    ap.add_argument('--keep', action='store_true',
                    help='keep the ZooKeeper and PostgreSQL data directories')
    ap.add_argument('--out', default=os.environ.get('BENCH_OUT') or HERE,
                    help='directory for results.md and handoffs.png')
    ap.add_argument('--render', metavar='WHY',
                    help='measure nothing: write results.md and handoffs.png in --out '
                    'again from the results.json there (after a change to the report '
                    'alone; WHY says which, in results.md)')
    args = ap.parse_args()
    if args.render:
        render(args.out, args.render)
        return
    for part in args.only.split(','):
        if part not in PARTS:
            ap.error('unknown part %r (parts: %s)' % (part, ', '.join(PARTS)))

    harness.install_signal_handlers()
    os.makedirs(BUILD, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    for tool in (RAWZK, os.path.join(BUILD, 'CuratorBench.class')):
        if not os.path.exists(tool):
            raise SystemExit('%s missing: run `make bench` (bench/run.sh builds it)' % tool)

    t_start = time.monotonic()
    load0 = sh("cut -d' ' -f1-3 /proc/loadavg")
    bench = Bench(args)
    log('%s run: %d run(s) x %d s, ZooKeeper %s%s'
        % ('QUICK' if bench.quick else 'full', bench.runs, bench.secs,
           'standalone' if args.zk_servers == 1 else '%d servers' % args.zk_servers,
           ', forceSync=yes' if args.fsync else ''))
    try:
        bench.start()
        info = machine(bench)
        bench.warm_up()
        for part in args.only.split(','):
            t = time.monotonic()
            try:
                getattr(bench, 'part_' + part)()
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:
                log('part %s FAILED: %r' % (part, e))
                bench.failures.append('part %s: %r' % (part, e))
            log('%s done in %.0f s' % (part, time.monotonic() - t))
    finally:
        bench.stop()
    elapsed = time.monotonic() - t_start
    load1 = sh("cut -d' ' -f1-3 /proc/loadavg")
    res = bench.results
    res['machine'] = info
    res['elapsed_s'], res['load'] = elapsed, [load0, load1]
    res['written'] = datetime.datetime.now().strftime('%Y-%m-%d %H:%M')
    res['failures'] = bench.failures
    res['steal'] = {'median': median(bench.steal),
                    'max': max(bench.steal) if bench.steal else None}
    for d in {BUILD, os.path.abspath(args.out)}:
        with open(os.path.join(d, 'results.json'), 'w') as f:
            json.dump(res, f, indent=1, default=str)
    write_markdown(res, info, os.path.join(args.out, 'results.md'), elapsed,
                   (load0, load1))
    write_chart(res, info, os.path.join(args.out, 'handoffs.png'))

    print()
    print('zklock bench (%s; %s ZooKeeper; %s CPUs, %s, kernel %s; host CPU steal '
          'median %s %%, max %s %%)'
          % ('quick' if bench.quick else 'full', info['ensemble'], info['nproc'],
             info['memory'], info['kernel'], fmt(res['steal']['median'], '%.1f'),
             fmt(res['steal']['max'], '%.1f')))
    print(summary_table(res))
    print()
    print('Targets (issue 18; then issues 6 and 17):')
    for name, value, ok in targets(res):
        print('  %-66s %8s  %s' % (name, fmt(value, '%.2f'), 'met' if ok else 'NOT MET'))
    print('For proportion:')
    for name, value in references(res):
        print('  %-66s %8s' % (name, fmt(value, '%.2f')))
    if res['failures']:
        print()
        print('Failed measurements (not tried again; left out of the medians):')
        for f in res['failures']:
            print('  ' + f)
    print()
    print('Written: %s, %s (%.1f min)' % (os.path.join(args.out, 'results.md'),
                                         os.path.join(args.out, 'handoffs.png'),
                                         elapsed / 60))


def render(out, why):
    """--render: results.md and the chart again from out/results.json."""
    path = os.path.join(out, 'results.json')
    with open(path) as f:
        res = int_keys(json.load(f))
    if res.get('many'):
        res['many']['limit_ok'] = limit_respected(res['many'])
    res['rendered'] = (datetime.datetime.now().strftime('%Y-%m-%d %H:%M'), why)
    write_markdown(res, res['machine'], os.path.join(out, 'results.md'),
                   res['elapsed_s'], tuple(res['load']))
    write_chart(res, res['machine'], os.path.join(out, 'handoffs.png'))
    print('Written again from %s: %s, %s' % (path, os.path.join(out, 'results.md'),
                                            os.path.join(out, 'handoffs.png')))


if __name__ == '__main__':
    main()
