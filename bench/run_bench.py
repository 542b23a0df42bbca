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

The code: this file reads the options and runs the parts.  Each part is
bench/<part>_part.py: run(bench) measures into bench.results;
targets(res), references(res), summary(res, lines) and report(res, L) give
its rows of the targets table, of the references, of the printed summary
and its section of results.md (the ones it has).  bench/benchlib.py holds
what the parts share (Bench: the ZooKeeper ensemble and the PostgreSQL
cluster, pgbench and the peers measured, mntr counters, CPU accounting;
the statistics helpers); bench/report.py writes results.json, results.md,
the summary and handoffs.png, and reads results.json back for --render.
"""
import argparse
import datetime
import os
import time

# benchlib first: it puts test/lib (the harness) on sys.path
from benchlib import BUILD, HERE, OWNWATCH, RAWZK, Bench, log, machine, median, sh
import arrays_part
import contended_part
import failfast_part
import fresh_part
import harness
import herd_part
import latency_part
import many_part
import memory_part
import report
import semaphore_part
import stats_part
import tail_part
import uncontended_part
import waitcost_part

# --only's names, in the order of a full run: each part's module
PARTS = {
    'uncontended': uncontended_part, 'contended': contended_part,
    'latency': latency_part, 'semaphore': semaphore_part, 'herd': herd_part,
    'many': many_part, 'arrays': arrays_part, 'memory': memory_part,
    'fresh': fresh_part, 'stats': stats_part, 'tail': tail_part,
    'waitcost': waitcost_part, 'failfast': failfast_part,
}


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
        report.render(args.out, args.render)
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
                PARTS[part].run(bench)
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
    report.save(res, args.out)
    report.write(res, info, args.out, elapsed, (load0, load1))
    report.print_summary(res, info, bench.quick, args.out, elapsed)


if __name__ == '__main__':
    main()
