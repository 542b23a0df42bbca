"""
The `arrays` part of `make bench` (issue 17): N = 100 and 10,000 locks taken
in one call (zk_lock_exclusive(text[])) against the scalar loop over the
same names, then COMMIT; and rawzk set, the array call's requests without
PostgreSQL.
"""
import time

import harness
from benchlib import RAWZK, cpu_ns, kv_line, log, median, run as run_cmd


def run(bench):
    res = {}
    conn = bench.pg.connect()
    cur = conn.cursor()
    try:
        for n, runs, scalar_runs in bench.array_cases:
            names = ['bench-set-%d/%05d' % (n, i) for i in range(n)]
            eph0 = bench.mntr()['zk_ephemerals_count']
            # the lock parents exist from here on, as for a job that
            # takes the same set every few seconds
            _array_round(bench, cur, 'array', names, eph0)
            rows = {'array': [], 'scalar': []}
            raws = []
            for r in range(runs):
                for impl in ('array', 'scalar', 'rawzk'):
                    if impl == 'scalar' and r >= scalar_runs:
                        continue
                    if impl == 'rawzk':
                        raws.append(kv_line(run_cmd(
                            [RAWZK, 'set', bench.zk.connect_string,
                             '/rawzk-set-%d' % n, str(n), '1'],
                            timeout=600).stdout))
                        log('arrays %5d locks run %d/%d rawzk : %.1f ms, release %.1f ms'
                            % (n, r + 1, runs, raws[-1]['acquire_ms'],
                               raws[-1]['release_ms']))
                        continue
                    row = _array_round(bench, cur, impl, names, eph0)
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
    bench.results['arrays'] = res


def _array_round(bench, cur, impl, names, eph0):
    """One transaction taking `names` by one array call or by the
    scalar loop, then COMMIT; waits until ZooKeeper has deleted them."""
    n = len(names)
    cur.execute('SELECT pg_backend_pid()')
    pid = cur.fetchone()[0]
    m0 = bench.mntr()
    cur.execute('BEGIN')
    b0, z0 = cpu_ns([pid]), cpu_ns(bench.zk_pids())
    t0 = time.monotonic()
    if impl == 'array':
        cur.execute('SELECT zk_lock_exclusive(%s::text[])', [names])
    else:
        cur.execute('SELECT count(zk_lock_exclusive(r)) '
                    'FROM unnest(%s::text[]) r', [names])
    t1 = time.monotonic()
    b1, z1 = cpu_ns([pid]), cpu_ns(bench.zk_pids())
    cur.execute('COMMIT')
    t2 = time.monotonic()
    harness.wait_until(
        lambda: bench.mntr()['zk_ephemerals_count'] <= eph0, 120,
        'ZooKeeper to delete the %d released nodes' % n, interval=0.01)
    m1 = bench.mntr()
    return {'acquire_ms': 1e3 * (t1 - t0), 'commit_ms': 1e3 * (t2 - t1),
            'requests_per_lock': bench.requests(m0, m1) / n,
            # CPU while taking them: the backend (libzookeeper's
            # threads included) and the ZooKeeper servers together
            'backend_cpu_ms': (b1 - b0) / 1e6, 'zk_cpu_ms': (z1 - z0) / 1e6}


def targets(res):
    out = []
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
    return out


def report(res, L):
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
