"""
The shared pieces of `make bench` (bench/run_bench.py drives them): the
paths of the peers, the statistics helpers, CPU and process accounting,
and Bench: the throwaway ZooKeeper ensemble and PostgreSQL cluster every
part measures on, with the one-measurement primitives (pgbench, the peers,
mntr counters) the parts share.  A part (bench/<name>_part.py) exposes
run(bench), and for the report targets(res) and report(res, L).
"""
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
import harness  # noqa: E402

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


def pct(sorted_xs, p):
    """nearest_rank, as the peers compute it; None for an empty list."""
    return nearest_rank(sorted_xs, p) if sorted_xs else None


def fmt(x, spec='%.1f'):
    return spec % x if x is not None else 'n/a'


def ratio(a, b):
    return a / b if a and b else None


def paired(xs, ys):
    """Median of the per-run ratios xs[i] / ys[i].  Each run measures the
    implementations back to back, so a slow minute on a shared host slows
    both sides of a ratio; the ratio of two separate medians would mix a
    slow run of one with a fast run of the other."""
    return median([ratio(x, y) for x, y in zip(xs, ys)])


def at_least(out, label, x, bound):
    """A target that x be at least bound: appended to out."""
    out.append((label, x, x is not None and x >= bound))


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


def rss_kb(pid):
    """VmRSS (kB) of a process."""
    with open('/proc/%d/status' % pid) as f:
        return int(re.search(r'^VmRSS:\s+(\d+) kB', f.read(), re.M).group(1))


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
