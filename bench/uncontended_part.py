"""
The `uncontended` part of `make bench`: one client's lock cycle, zklock
(pgbench, zklock.verify_at_commit off and on) against rawzk (the floor,
the recipe, one read), Curator, kazoo, pg_advisory_xact_lock and the
protocol's bound (rawzk recipe sleeping the advisory cycle's time); where
a cycle's time goes.
"""
from benchlib import at_least, fmt, log, median, paired


# In this order within a run: what a target compares is measured back
# to back (the floor, zklock, the peers), so the per-run ratios see the
# same host; the references follow.
UNCONTENDED = [
    ('raw-sync', 'rawzk: sync create+delete (the floor)', '/rawzk-bench'),
    ('zklock-off', 'zklock, verify_at_commit = off', None),
    ('zklock-on', 'zklock, verify_at_commit = on', None),
    ('curator', 'Curator InterProcessMutex', '/curator-bench/uncontended'),
    ('kazoo', 'kazoo Lock', '/kazoo-bench/uncontended'),
    ('raw-recipe', 'rawzk: zklock\'s recipe with the check, no PostgreSQL', '/rawzk-bench'),
    ('raw-read', 'rawzk: one read round trip (exists)', '/rawzk-bench'),
    ('advisory', 'pg_advisory_xact_lock (no network)', None),
    # right after advisory: it sleeps this round's advisory cycle time
    ('raw-recipe-gap', 'rawzk: zklock\'s recipe with the check, PostgreSQL\'s '
     'time slept after each delete (the bound)', '/rawzk-bench'),
    # reference-only rows, measured with --all-rows (not by default: the
    # full run must stay near 30 minutes on a 3-server ensemble)
    ('raw-pipelined', 'rawzk: create+children pipelined, delete not awaited', '/rawzk-bench'),
    ('raw-sync-tuned', 'rawzk: sync create+delete, resolution delay -1', '/rawzk-bench'),
    ('raw-read-tuned', 'rawzk: one read round trip, resolution delay -1', '/rawzk-bench'),
]
REFERENCE_ONLY = ('raw-pipelined', 'raw-sync-tuned', 'raw-read-tuned')


def run(bench):
    rows = [r for r in UNCONTENDED
            if bench.args.all_rows or r[0] not in REFERENCE_ONLY]
    res = {k: {'label': label, 'us': [], 'reqs': [], 'cpu_client': [], 'cpu_zk': []}
           for k, label, _ in rows}
    for r in range(bench.runs):
        for key, label, path in rows:
            if key == 'raw-recipe-gap':
                bench.gap_us = res['advisory']['us'][-1] if res['advisory']['us'] else None
                if not bench.gap_us:
                    res[key]['us'].append(None)
                    for f in ('reqs', 'cpu_client', 'cpu_zk'):
                        res[key][f].append(None)
                    continue
            bench.gap_slept = None
            rate, reqs, cpu = bench.measure(key, 1, path)
            if key == 'raw-recipe-gap':
                res[key].setdefault('gap_asked', []).append(bench.gap_us)
                res[key].setdefault('gap_slept', []).append(
                    bench.gap_slept if rate else None)
            res[key]['us'].append(1e6 / rate if rate else None)
            res[key]['reqs'].append(reqs)
            res[key]['cpu_client'].append(cpu[0] if cpu else None)
            res[key]['cpu_zk'].append(cpu[1] if cpu else None)
            log('uncontended run %d/%d %-14s %8.1f us/cycle  %.2f requests/cycle  '
                'CPU us/cycle client %s ZooKeeper %s'
                % (r + 1, bench.runs, key, 1e6 / rate if rate else 0, reqs or 0,
                   fmt(cpu and cpu[0], '%.0f'), fmt(cpu and cpu[1], '%.0f')))
    for v in res.values():
        v['median_us'] = median(v['us'])
        v['median_reqs'] = median(v['reqs'])
        v['median_cpu_client'] = median(v['cpu_client'])
        v['median_cpu_zk'] = median(v['cpu_zk'])
    bench.results['uncontended'] = res


def u_ratio(u, a, b):
    """Uncontended: a's time per cycle over b's, paired by run."""
    return paired(u[a]['us'], u[b]['us'])


def targets(res):
    u = res['uncontended']
    out = []
    if u:
        # rates: zklock's rate over the peer's = the peer's time over zklock's
        at_least(out, 'uncontended: zklock (verify on) / Curator >= 1.3',
                      u_ratio(u, 'curator', 'zklock-on'), 1.3)
        at_least(out, 'uncontended: zklock (verify on) / kazoo >= 1.6',
                      u_ratio(u, 'kazoo', 'zklock-on'), 1.6)
    return out


def references(res):
    u = res['uncontended']
    out = []
    if u:
        if 'raw-recipe-gap' in u:
            for peer, name, t in (('curator', 'Curator', 1.3), ('kazoo', 'kazoo', 1.6)):
                out.append(('uncontended: rawzk recipe with PostgreSQL\'s time slept / %s: '
                            'the bound of the protocol (target >= %.1f)' % (name, t),
                            u_ratio(u, peer, 'raw-recipe-gap')))
            out.append(('uncontended: zklock (verify on) / rawzk recipe with PostgreSQL\'s '
                        'time slept', u_ratio(u, 'raw-recipe-gap', 'zklock-on')))
        if all(k in u for k in ('raw-sync', 'raw-read', 'advisory')):
            best = [r / 2 + rd + a if r and rd and a else None
                    for r, rd, a in zip(u['raw-sync']['us'], u['raw-read']['us'],
                                        u['advisory']['us'])]
            for peer, name in (('curator', 'Curator'), ('kazoo', 'kazoo')):
                out.append(('uncontended: (floor/2 + read + advisory) / %s: arithmetic, '
                            'not a bound (counts the delete as free)' % name,
                            paired(u[peer]['us'], best)))
        for peer, name in (('curator', 'Curator'), ('kazoo', 'kazoo')):
            out.append(('uncontended: zklock (verify off) / %s' % name,
                        u_ratio(u, peer, 'zklock-off')))
            if 'raw-recipe' in u:
                out.append(('uncontended: rawzk recipe / %s' % name,
                            u_ratio(u, peer, 'raw-recipe')))
            if 'raw-pipelined' in u:
                out.append(('uncontended: rawzk pipelined (no check) / %s' % name,
                            u_ratio(u, peer, 'raw-pipelined')))
        if 'raw-sync' in u:
            out.append(('uncontended: zklock (verify on) time / floor (issue 6: <= 1.25)',
                        u_ratio(u, 'zklock-on', 'raw-sync')))
            out.append(('uncontended: zklock (verify off) time / floor (issue 6: <= 1.0)',
                        u_ratio(u, 'zklock-off', 'raw-sync')))
    return out


def budget(res):
    """Where an uncontended zklock cycle's time goes, from the medians:
    [(label, microseconds or None)]."""
    u = res['uncontended']
    if not u:
        return []
    g = {k: u[k]['median_us'] for k in u}
    for k in REFERENCE_ONLY + ('raw-sync', 'raw-read', 'advisory',
                                     'zklock-on', 'zklock-off'):
        g.setdefault(k, None)

    def sub(a, *bs):
        if a is None or any(b is None for b in bs):
            return None
        return a - sum(bs)
    half = g['raw-sync'] / 2 if g['raw-sync'] else None
    if g['raw-read-tuned'] is None:
        rows = [r for r in budget_rows(g, half, sub) if 'read tuned' not in r[0]]
        return rows
    return budget_rows(g, half, sub)


def budget_rows(g, half, sub):
    return [
        ('PostgreSQL part: BEGIN; SELECT; COMMIT through pgbench (advisory cycle)',
         g['advisory']),
        ('one ZooKeeper read round trip (rawzk read)', g['raw-read']),
        ('one ZooKeeper write round trip (rawzk sync / 2)', half),
        ('  ... libzookeeper host re-resolution per round trip (read - read tuned)',
         sub(g['raw-read'], g['raw-read-tuned'])),
        ('zklock verify off - advisory: ZooKeeper part (floor: 1 write round trip)',
         sub(g['zklock-off'], g['advisory'])),
        ('zklock verify on - off: the pre-commit check (floor: 1 read round trip)',
         sub(g['zklock-on'], g['zklock-off'])),
    ]


def summary(res, lines):
    u = res['uncontended']
    if u:
        lines.append('Uncontended lock cycle, 1 client (median of %d runs x %d s)'
                     % (res['runs'], res['seconds']))
        lines.append('  %-50s %9s %6s %7s %9s' % ('', 'us/cycle', 'x raw', 'ZK req',
                                                   'CPU cl/ZK'))
        for key, v in u.items():
            lines.append('  %-50s %9s %6s %7s %9s' % (
                v['label'], fmt(v['median_us']),
                fmt(u_ratio(u, key, 'raw-sync'), '%.2f'),
                fmt(v['median_reqs'], '%.2f'),
                '%s/%s' % (fmt(v['median_cpu_client'], '%.0f'),
                           fmt(v['median_cpu_zk'], '%.0f'))))
    if u:
        lines.append('')
        lines.append('Where an uncontended cycle goes (medians, us)')
        for label, v in budget(res):
            lines.append('  %-72s %8s' % (label, fmt(v)))


def report(res, L):
    u = res['uncontended']
    if u:
        L.append('')
        L.append('## Uncontended lock cycle (1 client)')
        L.append('')
        L.append('zklock and the advisory lock: pgbench, one client, '
                 '`BEGIN; SELECT zk_lock_exclusive(\'bench-cycle\'); COMMIT;` '
                 '(resp. `pg_advisory_xact_lock(42)`). rawzk: `bench/rawzk.c`. '
                 'Curator / kazoo: acquire()+release() loop, one client. '
                 '"ZK requests" = the server\'s `zk_packets_received` delta divided by the '
                 'cycles of the run. CPU = CPU time of every thread of the client side '
                 '(pgbench + its backends, or the peer\'s process tree) and of the '
                 'ZooKeeper server(s) during the measured window '
                 '(`/proc/<pid>/task/*/schedstat`), divided by the cycles in it. '
                 '"resolution delay -1": the C client with '
                 '`zoo_set_servers_resolution_delay(zh, -1)`, which stops libzookeeper '
                 'from re-resolving the host list (getaddrinfo, a netlink dump) every '
                 'time its I/O thread polls.')
        L.append('')
        L.append('| implementation | µs per cycle | × raw | ZK requests per cycle '
                 '| client CPU µs/cycle | ZooKeeper CPU µs/cycle | runs (µs) |')
        L.append('|---|---:|---:|---:|---:|---:|---|')
        for key, v in u.items():
            L.append('| %s | %s | %s | %s | %s | %s | %s |' % (
                v['label'], fmt(v['median_us']), fmt(u_ratio(u, key, 'raw-sync'), '%.2f'),
                fmt(v['median_reqs'], '%.2f'), fmt(v['median_cpu_client'], '%.0f'),
                fmt(v['median_cpu_zk'], '%.0f'),
                ', '.join(fmt(x, '%.0f') for x in v['us'])))
        g = u.get('raw-recipe-gap')
        if g and g.get('gap_slept'):
            L.append('')
            L.append('The bound\'s sleep after each delete, per round: asked (that round\'s '
                     'advisory cycle) / slept on average, µs: %s.'
                     % ', '.join('%s / %s' % (fmt(a, '%.0f'), fmt(b, '%.0f'))
                                 for a, b in zip(g['gap_asked'], g['gap_slept'])))
    if u:
        L.append('')
        L.append('Where an uncontended cycle goes, from the medians above (differences of '
                 'separately measured medians: indicative, not exact):')
        L.append('')
        L.append('| | µs |')
        L.append('|---|---:|')
        for label, v in budget(res):
            L.append('| %s | %s |' % (label.replace('  ...', '…').replace('  -', '−').strip(),
                                       fmt(v)))
