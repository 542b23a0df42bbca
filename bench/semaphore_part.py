"""
The `semaphore` part of `make bench`: 3 permits, 16 clients, acquisitions
per second: zklock (curator-rw and kazoo protocols), Curator
InterProcessSemaphoreV2, kazoo Semaphore and rawzk's semaphore mode (the
bound).
"""
from benchlib import at_least, fmt, log, median, paired


SEMAPHORE = [
    ('zklock-sem-curator-rw', 'zklock, zklock.protocol = curator-rw (default)', None),
    ('zklock-sem-kazoo', 'zklock, zklock.protocol = kazoo', None),
    ('curator-sem', 'Curator InterProcessSemaphoreV2', '/curator-bench/semaphore'),
    ('kazoo-sem', 'kazoo Semaphore', '/kazoo-bench/semaphore'),
    ('raw-sem', 'rawzk: zklock\'s semaphore protocol with the check, no PostgreSQL '
     '(the bound)', '/rawzk-sem'),
]


def run(bench):
    n = bench.sem_clients
    res = {k: {'label': label, 'rate': [], 'reqs': [], 'cpu_client': [], 'cpu_zk': []}
           for k, label, _ in SEMAPHORE}
    for r in range(bench.runs):
        for key, label, path in SEMAPHORE:
            rate, reqs, cpu = bench.measure(key, n, path)
            v = res[key]
            v['rate'].append(rate)
            v['reqs'].append(reqs)
            v['cpu_client'].append(cpu[0] if cpu else None)
            v['cpu_zk'].append(cpu[1] if cpu else None)
            log('semaphore run %d/%d %-22s %8.1f acquisitions/s  %.2f requests each  '
                'CPU us each client %s ZooKeeper %s'
                % (r + 1, bench.runs, key, rate or 0, reqs or 0,
                   fmt(cpu and cpu[0], '%.0f'), fmt(cpu and cpu[1], '%.0f')))
    for v in res.values():
        for f in ('rate', 'reqs', 'cpu_client', 'cpu_zk'):
            v['median_' + f] = median(v[f])
    res['clients'], res['permits'] = n, bench.sem_permits
    bench.results['semaphore'] = res


def targets(res):
    sem = res.get('semaphore') or {}
    out = []
    if sem:
        z = 'zklock-sem-curator-rw'
        at_least(out, 'semaphore (%d permits, %d clients): zklock / Curator >= 1.2'
                      % (sem['permits'], sem['clients']),
                      paired(sem[z]['rate'], sem['curator-sem']['rate']), 1.2)
        at_least(out, 'semaphore (%d permits, %d clients): zklock / kazoo >= 1.2'
                      % (sem['permits'], sem['clients']),
                      paired(sem[z]['rate'], sem['kazoo-sem']['rate']), 1.2)
    return out


def references(res):
    sem = res.get('semaphore') or {}
    out = []
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


def summary(res, lines):
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


def report(res, L):
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
