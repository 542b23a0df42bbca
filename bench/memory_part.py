"""
The `memory` part of `make bench`: VmRSS of a backend before and after
50,000 lock cycles (20,000 QUICK); the 10,000-held-locks figures come from
the many part's backend.
"""
import time

from benchlib import log, rss_kb


def run(bench):
    """RSS of a fresh backend before and after mem_cycles lock cycles
    (the 10,000-held-locks figures come from the many part's backend)."""
    res = bench.results['memory']
    conn = bench.pg.connect()
    cur = conn.cursor()
    try:
        cur.execute('SELECT pg_backend_pid()')
        pid = cur.fetchone()[0]
        if 'held_kb' in res:
            log('memory: connected %d kB, session open %d kB, %d locks held %d kB, '
                'released %d kB' % (res['connected_kb'], res['session_kb'], bench.many,
                                    res['held_kb'], res['released_kb']))
        chunks = 5
        per = bench.mem_cycles // chunks

        def cycle(k):
            return ("DO $$ BEGIN FOR i IN 1..%d LOOP "
                    "PERFORM zk_lock_exclusive('bench-mem-cycle'); COMMIT; "
                    "END LOOP; END $$" % k)
        cur.execute(cycle(bench.mem_warm))   # warm: caches, hash table, library
        series = [rss_kb(pid)]
        t0 = time.monotonic()
        for _ in range(chunks):
            cur.execute(cycle(per))
            series.append(rss_kb(pid))
        secs = time.monotonic() - t0
        res['cycles'] = per * chunks
        res['warm'] = bench.mem_warm
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
    bench.results['memory'] = res


def self_many(res):
    return res['many']['locks'] if res['many'] else 10000


def targets(res):
    out = []
    if res['memory'].get('cycles'):
        out.append(('memory: no per-lock leak over %d cycles (bytes/cycle; < 1 MB in all)'
                    % res['memory']['cycles'],
                    res['memory']['bytes_per_cycle'], res['memory']['leak_ok']))
    return out


def summary(res, lines):
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


def report(res, L):
    mem = res['memory']
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
