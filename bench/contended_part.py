"""
The `contended` part of `make bench`: N = 2, 4, 16, 64 clients on one lock,
handoffs per second, ZooKeeper requests and CPU per handoff; N = 1 is the
uncontended part's cycle.
"""
from benchlib import at_least, fmt, log, median, paired


CONTENDED = [
    ('zklock-on', 'zklock (verify on)', 'zklock_contended'),
    ('zklock-off', 'zklock (verify off)', 'zklock_contended'),
    ('curator', 'Curator', '/curator-bench/contended'),
    ('kazoo', 'kazoo', '/kazoo-bench/contended'),
    ('raw-recipe', 'rawzk recipe (verify on, no PostgreSQL)', '/rawzk-contended'),
]


CONTENDED_NS = (2, 4, 16, 64)


def run(bench):
    _contended(bench)
    # N = 1: the uncontended cycle, measured in part uncontended
    u = bench.results['uncontended']
    c = bench.results['contended']
    if u and all(k in u for k in c):
        for k, v in c.items():
            v['rate'][1] = [1e6 / x if x else None for x in u[k]['us']]
            v['reqs'][1] = u[k]['reqs']
            v['cpu_client'][1] = u[k]['cpu_client']
            v['cpu_zk'][1] = u[k]['cpu_zk']
            for f, src in (('median', 'rate'), ('median_reqs', 'reqs'),
                           ('median_cpu_client', 'cpu_client'),
                           ('median_cpu_zk', 'cpu_zk')):
                v[f][1] = median(v[src][1])
                v[f] = dict(sorted(v[f].items()))
            for f in ('rate', 'reqs', 'cpu_client', 'cpu_zk'):
                v[f] = dict(sorted(v[f].items()))


def _contended(bench):
    res = {k: {'label': label, 'rate': {n: [] for n in bench.clients},
               'reqs': {n: [] for n in bench.clients},
               'cpu_client': {n: [] for n in bench.clients},
               'cpu_zk': {n: [] for n in bench.clients}}
           for k, label, _ in CONTENDED}
    for r in range(bench.runs):
        for n in bench.clients:
            for key, label, path in CONTENDED:
                rate, reqs, cpu = bench.measure(key, n, path)
                res[key]['rate'][n].append(rate)
                res[key]['reqs'][n].append(reqs)
                res[key]['cpu_client'][n].append(cpu[0] if cpu else None)
                res[key]['cpu_zk'][n].append(cpu[1] if cpu else None)
                log('contended run %d/%d N=%-2d %-11s %8.1f handoffs/s  %.2f requests/cycle  '
                    'CPU us/handoff client %s ZooKeeper %s'
                    % (r + 1, bench.runs, n, key, rate or 0, reqs or 0,
                       fmt(cpu and cpu[0], '%.0f'), fmt(cpu and cpu[1], '%.0f')))
    for v in res.values():
        v['median'] = {n: median(v['rate'][n]) for n in bench.clients}
        v['median_reqs'] = {n: median(v['reqs'][n]) for n in bench.clients}
        v['median_cpu_client'] = {n: median(v['cpu_client'][n]) for n in bench.clients}
        v['median_cpu_zk'] = {n: median(v['cpu_zk'][n]) for n in bench.clients}
    bench.results['contended'] = res


def c_ratio(c, a, b, n):
    """Contended, N clients: a's handoffs per second over b's, paired by run."""
    return paired(c[a]['rate'][n], c[b]['rate'][n])


def table_ns(c):
    """The N of the tables: those measured, and N = 1 when the uncontended
    part ran too."""
    return sorted(next(iter(c.values()))['median'])


def measured_ns(c):
    """The N of CONTENDED_NS that the run measured (none when the part
    did not run)."""
    return [n for n in CONTENDED_NS if n in c['zklock-on']['median']] if c else []


def targets(res):
    c = res['contended']
    out = []
    for n in measured_ns(c):
        at_least(out, 'contended N=%d: zklock (verify on) / Curator >= 1.2' % n,
                      c_ratio(c, 'zklock-on', 'curator', n), 1.2)
        at_least(out, 'contended N=%d: zklock (verify on) / kazoo >= 1.5' % n,
                      c_ratio(c, 'zklock-on', 'kazoo', n), 1.5)
        at_least(out, 'contended N=%d: zklock (verify on) / rawzk recipe >= 0.8' % n,
                      c_ratio(c, 'zklock-on', 'raw-recipe', n), 0.8)
    return out


def references(res):
    c = res['contended']
    out = []
    for n in measured_ns(c):
        out.append(('contended N=%d: rawzk recipe / Curator: the bound of the protocol '
                    '(target >= 1.2)' % n, c_ratio(c, 'raw-recipe', 'curator', n)))
        out.append(('contended N=%d: rawzk recipe / kazoo: the bound of the protocol '
                    '(target >= 1.5)' % n, c_ratio(c, 'raw-recipe', 'kazoo', n)))
        out.append(('contended N=%d: zklock (verify off) / Curator' % n,
                    c_ratio(c, 'zklock-off', 'curator', n)))
    return out


def summary(res, lines):
    c = res['contended']
    if c:
        ns = table_ns(c)
        lines.append('')
        lines.append('Contended: N clients on one lock, handoffs per second (median)')
        lines.append('  %-22s' % 'N' + ''.join('%9d' % n for n in ns))
        for key, v in c.items():
            lines.append('  %-22s' % v['label'] +
                         ''.join('%9s' % fmt(v['median'][n], '%.0f') for n in ns))
        lines.append('  %-22s' % 'zklock / Curator' +
                     ''.join('%9s' % fmt(c_ratio(c, 'zklock-on', 'curator', n), '%.2f')
                             for n in ns))
        lines.append('  %-22s' % 'zklock / kazoo' +
                     ''.join('%9s' % fmt(c_ratio(c, 'zklock-on', 'kazoo', n), '%.2f')
                             for n in ns))
        lines.append('  CPU us per handoff at N=%d (client / ZooKeeper): %s' % (ns[-1], '; '.join(
            '%s %s/%s' % (v['label'], fmt(v['median_cpu_client'][ns[-1]], '%.0f'),
                          fmt(v['median_cpu_zk'][ns[-1]], '%.0f')) for v in c.values())))


def n_table(ns, rows):
    """Markdown lines of a table with one column per N; rows are
    (label, [cell for each N])."""
    return (['| N | ' + ' | '.join(str(n) for n in ns) + ' |',
             '|---|' + '---:|' * len(ns)] +
            ['| %s | %s |' % (label, ' | '.join(cells)) for label, cells in rows])


def report(res, L):
    c = res['contended']
    if c:
        ns = table_ns(c)
        L.append('')
        L.append('## Contended: N clients on one lock')
        L.append('')
        L.append('Handoffs (= lock cycles) per second. zklock: `pgbench -c N -j 1`; '
                 'Curator: N threads, each its own CuratorFramework; kazoo: N processes, '
                 'each its own KazooClient; rawzk recipe: N threads, each its own '
                 'session; all on one lock path. N = 1 is the uncontended cycle of the '
                 'section above. Ratios: medians of the per-round ratios.')
        L.append('')
        L.append('![handoffs per second](handoffs.png)')
        L.append('')
        L += n_table(ns, [(v['label'], [fmt(v['median'][n], '%.0f') for n in ns])
                          for v in c.values()] +
                     [('zklock (verify on) / %s' % c[peer]['label'],
                       [fmt(c_ratio(c, 'zklock-on', peer, n), '%.2f') for n in ns])
                      for peer in ('curator', 'kazoo', 'raw-recipe')] +
                     [('rawzk recipe / %s (the bound)' % c[peer]['label'],
                       [fmt(c_ratio(c, 'raw-recipe', peer, n), '%.2f') for n in ns])
                      for peer in ('curator', 'kazoo')])
        L.append('')
        L.append('ZooKeeper requests per handoff (all clients):')
        L.append('')
        L += n_table(ns, [(v['label'], [fmt(v['median_reqs'][n], '%.2f') for n in ns])
                          for v in c.values()])
        L.append('')
        L.append('CPU per handoff, client side / ZooKeeper (µs; see the uncontended section):')
        L.append('')
        L += n_table(ns, [(v['label'], ['%s / %s' % (fmt(v['median_cpu_client'][n], '%.0f'),
                                                     fmt(v['median_cpu_zk'][n], '%.0f'))
                                        for n in ns])
                          for v in c.values()])
        L.append('')
        L.append('<details><summary>every run</summary>')
        L.append('')
        for key, v in c.items():
            L.append('- %s: ' % v['label'] + '; '.join(
                'N=%d: %s' % (n, ', '.join(fmt(x, '%.0f') for x in v['rate'][n])) for n in ns))
        L.append('')
        L.append('</details>')
