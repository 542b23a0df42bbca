"""
The `tail` part of `make bench` (issue 27): the tail of the lock cycle, 1
client and 16 on one lock, zklock (pgbench with a per-transaction log)
against rawzk recipe, Curator and kazoo: p50, p99, p99.9 and max per cycle
and of the interval between consecutive releases; connections lost.
"""
import os
import re
import subprocess

import harness
from benchlib import PGBENCH, fmt, log, nearest_rank


TAIL = [
    ('zklock', 'zklock (pgbench; the reply nudge on, as by default)', None),
    ('raw-recipe', 'rawzk recipe (zklock\'s protocol in C, no nudge)',
     '/rawzk-tail'),
    ('curator', 'Curator InterProcessMutex', '/curator-bench/tail'),
    ('kazoo', 'kazoo Lock', '/kazoo-bench/tail'),
]


def run(bench):
    """Each implementation once per N, its every cycle recorded; a
    window with no cycle, or a run that fails, is a failure the report
    shows (not tried again: a stall is what this part looks for)."""
    res = bench.results['tail']
    res['secs'], res['peer_secs'] = bench.tail_secs, bench.tail_peer_secs
    for n in bench.tail_clients:
        for key, label, path in TAIL:
            secs = bench.tail_secs if key == 'zklock' else bench.tail_peer_secs
            row = res.setdefault(key, {'label': label})
            try:
                recs, lost = _tail_run(bench, key, n, path, secs)
                if not recs:
                    raise RuntimeError('no cycle completed in the measured window')
                row[n] = tail_stats(recs, n)
                row[n]['lost'] = lost
                row[n]['seconds'] = secs
            except Exception as e:
                log('tail %s with %d client(s) FAILED: %s' % (key, n, e))
                bench.failures.append('tail %s, %d client(s): %s'
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


def _tail_run(bench, key, n, path, secs):
    """([(start_ns, end_ns), ...] of the cycles started in the window,
    connections lost or timed out)."""
    out_dir = os.path.join(bench.work, 'tail-%s-%d' % (key, n))
    os.makedirs(out_dir, exist_ok=True)
    harness.chown_to_pg_user(out_dir)
    if key != 'zklock':
        f = os.path.join(out_dir, 'cycles')
        env_key = 'RAWZK_TAIL_FILE' if key.startswith('raw-') else 'BENCH_TAIL_FILE'
        old = os.environ.get(env_key)
        os.environ[env_key] = f
        try:
            out = bench.peer(key, n, path + '-%d' % n,
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
    offset = bench.pg.log_size()
    script = os.path.join(out_dir, 'cycle.sql')
    with open(script, 'w') as fh:
        fh.write("BEGIN;\nSELECT zk_lock_exclusive('bench-tail-%d');\nCOMMIT;\n" % n)
    os.chmod(script, 0o644)
    warm = bench.warmup
    cmd = harness.as_pg_user([
        PGBENCH, '-n', '-h', '127.0.0.1', '-p', str(bench.pg.port),
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
    lost = sum(1 for line in bench.pg.log_since(offset).splitlines()
               if re.search(r'ZOO_ERROR.*timed out', line))
    return recs, lost


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


def targets(res):
    """Issue 27's targets: zklock's cycle p99.9 at most 2x Curator's, its
    maximum (cycle, and release interval at 16) at most 150 ms, no
    connection lost, over the tail part's windows."""
    out = []
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
    return out


def report(res, L):
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
        for name, value, ok in targets(res):
            L.append('| %s | %s | %s |' % (name, fmt(value, '%.2f'), 'yes' if ok else '**no**'))
