"""
The `fresh` part of `make bench` (issue 31): names never used before, the
normal case, against the same names again at once (warm); 10,000 and 100
locks in one call and single locks.  Its targets are shown in its own
section of results.md, not in the targets table.
"""
import time

import harness
from benchlib import fmt, log, median, nearest_rank


def run(bench):
    """Names never used before, the normal case (issue 31): every
    round takes names no round used, so no lock parent exists whatever
    the reaper does (it is put off for the run, see Bench.start()); then the
    same names again right away, warm (parents there, and known to the
    backend).  10,000 and 100 locks in one call, and single locks: a
    new name for each call against one name over and over.  A new
    connection for each round, as a nightly job has."""
    res = bench.results['fresh']
    rows = {}
    all_singles = {'fresh': [], 'warm': []}
    stamp = int(time.time())
    for r in range(bench.fresh_rounds):
        conn = bench.pg.connect()
        cur = conn.cursor()
        try:
            cur.execute("SELECT zk_lock_exclusive('bench-fresh-session')")
            eph0 = bench.mntr()['zk_ephemerals_count']
            for n in (10000, 100):
                names = ['bench-fresh-%d-%d-%d/%05d' % (stamp, r, n, i)
                         for i in range(n)]
                for phase in ('fresh', 'warm'):
                    ms, commit_ms, rpl = _fresh_call(bench, cur, names, eph0)
                    d = rows.setdefault('%s%d' % (phase, n), [])
                    d.append({'ms': ms, 'commit_ms': commit_ms, 'rpl': rpl})
                    log('fresh round %d/%d: %5d %-5s names: %.1f ms, COMMIT %.1f ms, '
                        '%.2f requests/lock' % (r + 1, bench.fresh_rounds, n, phase,
                                               ms, commit_ms, rpl))
            one_warm = 'bench-fresh-%d-%d-one' % (stamp, r)
            _fresh_call(bench, cur, one_warm, eph0)        # its parent exists now
            singles = {'fresh': [], 'warm': []}
            for i in range(bench.fresh_singles):
                # alternated, so that both see the same load
                singles['fresh'].append(_fresh_call(bench, 
                    cur, 'bench-fresh-%d-%d-one-%d' % (stamp, r, i), eph0))
                singles['warm'].append(_fresh_call(bench, cur, one_warm, eph0))
            for phase in ('fresh', 'warm'):
                ms = sorted(x[0] for x in singles[phase])
                all_singles[phase].extend(ms)
                rows.setdefault('one_' + phase, []).append({
                    'ms': median(ms), 'rpl': median(x[2] for x in singles[phase])})
            log('fresh round %d/%d: one lock, fresh %.2f ms (%.1f requests), '
                'warm %.2f ms (%.1f requests), medians of %d'
                % (r + 1, bench.fresh_rounds, rows['one_fresh'][-1]['ms'],
                   rows['one_fresh'][-1]['rpl'], rows['one_warm'][-1]['ms'],
                   rows['one_warm'][-1]['rpl'], bench.fresh_singles))
        finally:
            conn.close()
    res['rounds'] = bench.fresh_rounds
    res['singles'] = bench.fresh_singles
    for key, xs in rows.items():
        res[key] = {k: median(x[k] for x in xs) for k in xs[0]}
        res[key]['max_ms'] = max(x['ms'] for x in xs)
    for phase, ms in all_singles.items():
        # the tail over every call of every round
        ms.sort()
        res['one_' + phase].update({'p99': nearest_rank(ms, 0.99),
                                    'p999': nearest_rank(ms, 0.999),
                                    'max': ms[-1], 'calls': len(ms)})


def _fresh_call(bench, cur, names, eph0):
    """One transaction taking `names` (a list: one array call; a str:
    one scalar call), then COMMIT; waits until ZooKeeper has deleted the
    nodes.  Returns (call ms, COMMIT ms, requests per lock)."""
    n = len(names) if isinstance(names, list) else 1
    m0 = bench.mntr()
    cur.execute('BEGIN')
    t0 = time.monotonic()
    if isinstance(names, list):
        cur.execute('SELECT zk_lock_exclusive(%s::text[])', [names])
    else:
        cur.execute('SELECT zk_lock_exclusive(%s)', [names])
    t1 = time.monotonic()
    m1 = bench.mntr()
    t2 = time.monotonic()
    cur.execute('COMMIT')
    t3 = time.monotonic()
    harness.wait_until(
        lambda: bench.mntr()['zk_ephemerals_count'] <= eph0, 120,
        'ZooKeeper to delete the %d released nodes' % n, interval=0.01)
    return 1e3 * (t1 - t0), 1e3 * (t3 - t2), bench.requests(m0, m1) / n


def targets(res):
    """Issue 31's targets over the fresh part's medians (in its own
    section of results.md, not in the targets table)."""
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


def report(res, L):
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
        for name, value, ok in targets(res):
            L.append('| %s | %s | %s |' % (name, fmt(value, '%.3f'), 'yes' if ok else '**no**'))
