#!/usr/bin/python3
"""
kazoo's Lock and Semaphore recipes, measured for `make bench`.

    /usr/bin/python3 bench/kazoo_bench.py HOSTS PATH CLIENTS WARMUP_S SECONDS [MODE [LEASES]]

CLIENTS processes (not threads: no shared GIL), each with its own
KazooClient (its own ZooKeeper session) and its own recipe object on PATH.
After WARMUP_S seconds the cycles are counted for SECONDS.  MODE:

  lock       (default) kazoo.recipe.lock.Lock, acquire()+release() loop.
             With one client this is the uncontended cycle; with more,
             every release hands the lock to the next waiter.
  latency    the same loop; every process records time.monotonic() (one
             clock for every process of the machine) after acquire()
             returns, at the release() call and after release() returns.
             The grants in the window, ordered by acquire time, give the
             handoff latency of each consecutive pair, from holder i's
             release() call and from its return to holder i+1's acquire()
             return: median and p99 (nearest rank), microseconds.
  semaphore  kazoo.recipe.lock.Semaphore with max_leases=LEASES (default
             3), acquire()+release() loop; a cycle is an acquisition.
  tail       the lock loop; every cycle started inside the window is
             written to the file named by BENCH_TAIL_FILE as a line
             "START_NS END_NS" (time.monotonic_ns(), CLOCK_MONOTONIC:
             before acquire() and after release() returns), and the
             sessions' suspensions are counted: adds reconnects=.
  wait       what waiting costs (issue 38, bench/waitcost_part.py): no
             loop, and threads, not processes (one process for hundreds of
             sessions).  CLIENTS = K + 1 KazooClients (each its own
             session) connect and "connected" is printed; then a line on
             stdin ("go", within 600 s): client 0 acquires the Lock and
             holds it, the K others call acquire(timeout=SECONDS), one
             thread each, and "waiting" is printed once every acquire()
             has been called (the caller counts the queue's nodes).  The
             next line on stdin (or its end, or 600 s) stops them: every
             waiter's Lock is cancelled (acquire() deletes its node and
             raises CancelledError), the holder releases, every client is
             closed, and one line is printed: clients=N waited=K granted=G
             (G: waiters granted before the stop).  WARMUP_S is ignored.

Prints:
    clients=16 cycles=12345 total=15000 seconds=5.000 per_second=2469.0 us_per_cycle=405.0
(cycles: in the measured window; total: warm-up included; latency mode
adds handoffs= lat_call_p50_us= lat_call_p99_us= lat_ret_p50_us=
lat_ret_p99_us=), after "window-start" and "window-end" lines that mark
the window.
"""
import math
import multiprocessing as mp
import os
import sys
import time

MAX_RECORDS = 100000            # per process, latency mode


def pct(sorted_xs, p):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_xs:
        return 0.0
    k = max(0, min(len(sorted_xs) - 1, int(math.ceil(p * len(sorted_xs))) - 1))
    return sorted_xs[k]


def worker(hosts, path, mode, leases, counter, ready, go, stop, failed, records):
    try:
        from kazoo.client import KazooClient
        from kazoo.recipe.lock import Lock, Semaphore
        kz = KazooClient(hosts=hosts, timeout=10)
        kz.start(timeout=15)
        lost = [0]

        def listener(state):
            if state != 'CONNECTED':        # SUSPENDED or LOST
                lost[0] += 1
        kz.add_listener(listener)
        if mode == 'semaphore':
            lock = Semaphore(kz, path, 'kazoo-bench', max_leases=leases)
        else:
            lock = Lock(kz, path, 'kazoo-bench')
        rec = []
        ready.release()
        go.wait()
        mono = time.monotonic
        while not stop.is_set():
            s = time.monotonic_ns()
            lock.acquire()
            if mode == 'tail':
                lock.release()
                if len(rec) < MAX_RECORDS:
                    rec.append((s, time.monotonic_ns()))
            elif mode == 'latency':
                a = mono()
                c = mono()
                lock.release()
                r = mono()
                if len(rec) < MAX_RECORDS:
                    rec.append((a, c, r))
            else:
                lock.release()
            with counter.get_lock():
                counter.value += 1
        lost_in_loop = lost[0]          # before stop(), which reports LOST
        kz.stop()
        kz.close()
        if mode == 'tail':
            records.put((rec, lost_in_loop))
        elif mode == 'latency':
            records.put(rec)
    except BaseException as e:          # report, and let the parent fail
        failed.value += 1
        print('kazoo_bench worker: %r' % e, file=sys.stderr)
        ready.release()
        if mode == 'tail':
            records.put(([], 0))
        elif mode == 'latency':
            records.put([])


def read_line(timeout):
    """One line of stdin, or '' at its end or after `timeout` seconds."""
    import select
    r, _, _ = select.select([sys.stdin], [], [], timeout)
    return sys.stdin.readline() if r else ''


def wait_mode(hosts, path, n, seconds):
    """The wait mode (see the head comment)."""
    import threading
    from kazoo.client import KazooClient
    from kazoo.exceptions import CancelledError
    from kazoo.recipe.lock import Lock
    clients = []
    try:
        for _ in range(n):
            kz = KazooClient(hosts=hosts, timeout=10)
            kz.start(timeout=15)
            clients.append(kz)
        print('connected', flush=True)
        read_line(600)
        holder = Lock(clients[0], path, 'kazoo-bench')
        holder.acquire()
        granted, errors = [0], [0]
        called = threading.Semaphore(0)

        def waiter(lock):
            called.release()
            try:
                if lock.acquire(timeout=seconds):
                    granted[0] += 1
                    lock.release()
            except CancelledError:
                pass                    # the stop: its node deleted
            except Exception as e:      # noqa: BLE001 (reported, counted)
                errors[0] += 1
                print('kazoo_bench waiter: %r' % e, file=sys.stderr)
        locks = [Lock(kz, path, 'kazoo-bench') for kz in clients[1:]]
        threads = [threading.Thread(target=waiter, args=(lk,), daemon=True)
                   for lk in locks]
        for t in threads:
            t.start()
        for _ in threads:
            called.acquire(timeout=60)
        print('waiting', flush=True)
        read_line(600)
        for lk in locks:
            lk.cancel()
        for t in threads:
            t.join(20)
        holder.release()
        print('clients=%d waited=%d granted=%d errors=%d'
              % (n, n - 1, granted[0], errors[0]), flush=True)
        if errors[0]:
            raise SystemExit(1)
    finally:
        for kz in clients:
            try:
                kz.stop()
                kz.close()
            except Exception:           # noqa: BLE001 (closing anyway)
                pass


def main():
    if len(sys.argv) == 7 and sys.argv[6] == 'wait':
        wait_mode(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[5]))
        return
    if len(sys.argv) not in (6, 7, 8):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    hosts, path = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3])
    warmup, seconds = float(sys.argv[4]), float(sys.argv[5])
    mode = sys.argv[6] if len(sys.argv) > 6 else 'lock'
    leases = int(sys.argv[7]) if len(sys.argv) > 7 else 3
    if mode not in ('lock', 'latency', 'tail', 'semaphore'):
        raise SystemExit('kazoo_bench: unknown mode %s' % mode)

    ctx = mp.get_context('fork')
    counter = ctx.Value('q', 0)
    failed = ctx.Value('i', 0)
    ready = ctx.Semaphore(0)
    records = ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=worker,
                         args=(hosts, path, mode, leases, counter, ready, go, stop,
                               failed, records),
                         daemon=True)
             for _ in range(n)]
    for p in procs:
        p.start()
    for _ in range(n):
        if not ready.acquire(timeout=60):
            raise SystemExit('kazoo_bench: clients did not connect')
    go.set()
    time.sleep(warmup)
    c0, t0 = counter.value, time.monotonic()
    print('window-start', flush=True)       # for an outside CPU sampler
    time.sleep(seconds)
    c1, t1 = counter.value, time.monotonic()
    print('window-end', flush=True)
    if os.environ.get('BENCH_SAMPLER'):     # hold still until sampled
        sys.stdin.readline()
    stop.set()
    grants = []
    reconnects = 0
    if mode == 'tail':
        w0, w1 = int(t0 * 1e9), int(t1 * 1e9)
        with open(os.environ['BENCH_TAIL_FILE'], 'w') as f:
            for _ in range(n):
                rec, lost = records.get(timeout=60)
                reconnects += lost
                for s, e in rec:
                    if w0 <= s <= w1:
                        f.write('%d %d\n' % (s, e))
    elif mode == 'latency':
        # read before joining: a process with a full pipe would not exit
        for _ in range(n):
            grants += [g for g in records.get(timeout=60) if t0 <= g[0] <= t1]
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    if failed.value:
        raise SystemExit('kazoo_bench: %d client(s) failed' % failed.value)
    secs, cycles = t1 - t0, c1 - c0
    extra = ''
    if mode == 'tail':
        extra = ' reconnects=%d' % reconnects
    if mode == 'latency':
        grants.sort()
        pairs = list(zip(grants, grants[1:]))
        from_call = sorted(1e6 * (b[0] - a[1]) for a, b in pairs)
        from_ret = sorted(1e6 * (b[0] - a[2]) for a, b in pairs)
        overlaps = sum(1 for a, b in pairs if b[0] < a[1])
        extra = (' handoffs=%d overlaps=%d lat_call_p50_us=%.1f lat_call_p99_us=%.1f '
                 'lat_ret_p50_us=%.1f lat_ret_p99_us=%.1f'
                 % (len(pairs), overlaps, pct(from_call, 0.5), pct(from_call, 0.99),
                    pct(from_ret, 0.5), pct(from_ret, 0.99)))
    print('clients=%d cycles=%d total=%d seconds=%.3f per_second=%.1f us_per_cycle=%.1f%s'
          % (n, cycles, counter.value, secs, cycles / secs,
             1e6 * secs / cycles if cycles else 0.0, extra))


if __name__ == '__main__':
    main()
