"""
The `latency` part of `make bench`: handoff latency at N = 2 and 16, median
and p99, zklock (psycopg2 threads, grants ordered by fencing token) against
Curator and kazoo.
"""
import threading
import time

from benchlib import cpu_stat, fmt, log, median, paired, pct, steal_percent


LATENCY = [
    ('zklock-on', 'zklock (verify on)', 'bench-latency'),
    ('curator', 'Curator InterProcessMutex', '/curator-bench/latency'),
    ('kazoo', 'kazoo Lock', '/kazoo-bench/latency'),
]


def run(bench):
    keys = ('p50_ret', 'p99_ret', 'p50_call', 'p99_call', 'rate', 'handoffs')
    res = {k: {'label': label, **{f: {n: [] for n in bench.latency_clients} for f in keys}}
           for k, label, _ in LATENCY}
    for r in range(bench.runs):
        for n in bench.latency_clients:
            for key, label, path in LATENCY:
                s0 = cpu_stat()
                try:
                    if key == 'zklock-on':
                        out = zklock_latency(bench, n, path, bench.lat_secs)
                    else:
                        out = bench.peer(key, n, path + '-%d' % n, 'latency',
                                        bench.lat_secs)[3]
                    if out.get('overlaps'):
                        raise RuntimeError('%d grants before the previous release'
                                           % out['overlaps'])
                    if not out.get('handoffs'):
                        raise RuntimeError('no handoff in the measured window')
                except Exception as e:
                    # a finding, not tried again (see Bench.measure())
                    log('latency %s with %d client(s) FAILED: %s' % (key, n, e))
                    bench.failures.append('latency %s, %d client(s): %s' % (
                        key, n, str(e).splitlines()[0]))
                    out = {}
                st = steal_percent(s0, cpu_stat())
                if st is not None:
                    bench.steal.append(st)
                v = res[key]
                v['p50_ret'][n].append(out.get('lat_ret_p50_us'))
                v['p99_ret'][n].append(out.get('lat_ret_p99_us'))
                v['p50_call'][n].append(out.get('lat_call_p50_us'))
                v['p99_call'][n].append(out.get('lat_call_p99_us'))
                v['rate'][n].append(out['cycles'] / out['seconds'] if out else None)
                v['handoffs'][n].append(out.get('handoffs'))
                log('latency run %d/%d N=%-2d %-10s %s handoffs; from release return: '
                    'median %s p99 %s us; from release call: median %s p99 %s us'
                    % (r + 1, bench.runs, n, key, fmt(out.get('handoffs'), '%d'),
                       fmt(out.get('lat_ret_p50_us'), '%.0f'),
                       fmt(out.get('lat_ret_p99_us'), '%.0f'),
                       fmt(out.get('lat_call_p50_us'), '%.0f'),
                       fmt(out.get('lat_call_p99_us'), '%.0f')))
    for v in res.values():
        for f in keys:
            v['median_' + f] = {n: median(v[f][n]) for n in bench.latency_clients}
    bench.results['latency'] = res


def zklock_latency(bench, n, resource, secs):
    """N psycopg2 connections, one thread each, loop BEGIN; SELECT
    zk_lock_exclusive(resource); COMMIT (zklock.verify_at_commit on),
    recording time.monotonic() right after the lock call returns, right
    before COMMIT is sent and right after it returns, and the fencing
    token.  Grants ordered by token (it grows with every grant); the
    latency of a handoff = lock return of grant i+1 - COMMIT return of
    grant i.  Returns the peers' key=value dict."""
    conns = [bench.pg.connect() for _ in range(n)]
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
        time.sleep(bench.warmup)
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


def l_ratio(lat, a, b, n, fa, fb):
    """Handoff latency, N clients: a's figure fa over b's fb, paired by run."""
    return paired(lat[a][fa][n], lat[b][fb][n])


def latency_ns(lat):
    """The N the run measured (none when the part did not run)."""
    return sorted(lat['zklock-on']['p50_ret']) if lat else []


def targets(res):
    lat = res.get('latency') or {}
    out = []
    for n in latency_ns(lat):
        for q in ('p50', 'p99'):
            x = l_ratio(lat, 'zklock-on', 'curator', n, q + '_ret', q + '_call')
            out.append(('handoff latency N=%d, %s: zklock / Curator (release call) <= 1'
                        % (n, 'median' if q == 'p50' else 'p99'), x,
                        x is not None and x <= 1.0))
    return out


def references(res):
    lat = res.get('latency') or {}
    out = []
    for n in latency_ns(lat):
        for q in ('p50', 'p99'):
            out.append(('handoff latency N=%d, %s: zklock / Curator from release() return'
                        % (n, 'median' if q == 'p50' else 'p99'),
                        l_ratio(lat, 'zklock-on', 'curator', n, q + '_ret', q + '_ret')))
            out.append(('handoff latency N=%d, %s: zklock from COMMIT call / Curator '
                        'from release() call' % (n, 'median' if q == 'p50' else 'p99'),
                        l_ratio(lat, 'zklock-on', 'curator', n, q + '_call', q + '_call')))
    return out


def summary(res, lines):
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


def report(res, L):
    lat = res.get('latency') or {}
    if lat:
        lns = latency_ns(lat)
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
