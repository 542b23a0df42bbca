#!/usr/bin/python3
"""
kazoo's Lock recipe, measured for `make bench`.

    /usr/bin/python3 bench/kazoo_bench.py HOSTS PATH CLIENTS WARMUP_S SECONDS

CLIENTS processes (not threads: no shared GIL), each with its own
KazooClient (its own ZooKeeper session) and its own kazoo.recipe.lock.Lock
on PATH, loop acquire()+release().  After WARMUP_S seconds the releases
are counted for SECONDS.  With one client this is the uncontended cycle;
with more, every release hands the lock to the next waiter.  Prints:
    clients=16 cycles=12345 total=15000 seconds=5.000 per_second=2469.0 us_per_cycle=405.0
(cycles: in the measured window; total: warm-up included), after
"window-start" and "window-end" lines that mark the window.
"""
import multiprocessing as mp
import os
import sys
import time


def worker(hosts, path, counter, ready, go, stop, failed):
    try:
        from kazoo.client import KazooClient
        from kazoo.recipe.lock import Lock
        kz = KazooClient(hosts=hosts, timeout=10)
        kz.start(timeout=15)
        lock = Lock(kz, path, 'kazoo-bench')
        ready.release()
        go.wait()
        while not stop.is_set():
            lock.acquire()
            lock.release()
            with counter.get_lock():
                counter.value += 1
        kz.stop()
        kz.close()
    except BaseException as e:          # report, and let the parent fail
        failed.value += 1
        print('kazoo_bench worker: %r' % e, file=sys.stderr)
        ready.release()


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    hosts, path = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3])
    warmup, seconds = float(sys.argv[4]), float(sys.argv[5])

    ctx = mp.get_context('fork')
    counter = ctx.Value('q', 0)
    failed = ctx.Value('i', 0)
    ready = ctx.Semaphore(0)
    go, stop = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=worker,
                         args=(hosts, path, counter, ready, go, stop, failed),
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
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    if failed.value:
        raise SystemExit('kazoo_bench: %d client(s) failed' % failed.value)
    secs, cycles = t1 - t0, c1 - c0
    print('clients=%d cycles=%d total=%d seconds=%.3f per_second=%.1f us_per_cycle=%.1f'
          % (n, cycles, counter.value, secs, cycles / secs,
             1e6 * secs / cycles if cycles else 0.0))


if __name__ == '__main__':
    main()
