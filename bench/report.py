"""
The report of `make bench`: results.json saved and read back (--render),
the targets and references over every part, results.md (the run's header
and machine, the targets table, then each part's section from its module),
the summary printed at the end of a run, and handoffs.png (gnuplot).
"""
import datetime
import json
import os
import subprocess

import arrays_part
import contended_part
import failfast_part
import fresh_part
import herd_part
import latency_part
import many_part
import memory_part
import semaphore_part
import stats_part
import tail_part
import uncontended_part
import waitcost_part
from benchlib import BUILD, fmt, log

# The targets table's order: the tail's, the issues' own parts, issue 18's
# comparisons, then the arrays, many-locks and memory checks.  (fresh's
# targets are in its own section.)
TARGETS = (tail_part, stats_part, waitcost_part, failfast_part, uncontended_part,
           contended_part, latency_part, herd_part, semaphore_part, arrays_part,
           many_part, memory_part)
REFERENCES = (uncontended_part, contended_part, latency_part, semaphore_part)
SUMMARY = (uncontended_part, contended_part, latency_part, semaphore_part,
           herd_part, many_part, memory_part)
# results.md's sections, in this order
SECTIONS = (uncontended_part, contended_part, latency_part, semaphore_part,
            herd_part, many_part, arrays_part, memory_part, fresh_part,
            stats_part, waitcost_part, failfast_part, tail_part)


def targets(res):
    """(label, measured value, met) of every part, in TARGETS' order."""
    return [t for part in TARGETS for t in part.targets(res)]


def references(res):
    """(label, value) that put the targets in proportion: where each bound
    comes from.  rawzk recipe runs zklock's protocol (with the commit check:
    sync + exists) in C with no PostgreSQL, one session per thread: for a
    handoff no zklock can be faster, since zklock's critical path runs the
    same requests plus PostgreSQL's statements; so where rawzk recipe /
    Curator is below 1.2 (or / kazoo below 1.5) the contended target is out
    of reach for this protocol on this machine.  Uncontended, rawzk recipe
    alone is not a bound (its next create waits for the fsync of the delete
    it has just sent, where zklock spends that time in PostgreSQL): rawzk
    recipe with PostgreSQL's time (this round's advisory cycle) slept right
    after each delete is, since that is the only place where a zklock cycle's
    PostgreSQL time can overlap ZooKeeper's work, and a sleep uses no CPU.
    The semaphore's bound is rawzk's semaphore mode (zklock's Curator-layout
    semaphore with the check, in C)."""
    return [r for part in REFERENCES for r in part.references(res)]


def summary_table(res):
    lines = []
    for part in SUMMARY:
        part.summary(res, lines)
    return '\n'.join(lines)


def write_chart(res, info, path):
    """bench/handoffs.png: handoffs per second against N (log x), one line
    per implementation; below it, handoff latency (median and p99) against
    N for zklock and the peers."""
    c = res['contended']
    lat = res.get('latency') or {}
    if not c and not lat:
        return False
    keys = ['zklock-on', 'curator', 'kazoo', 'zklock-off', 'raw-recipe']
    dat = os.path.join(BUILD, 'handoffs.dat')
    ns = contended_part.table_ns(c) if c else [1, 2]
    with open(dat, 'w') as f:
        f.write('# N ' + ' '.join(keys) + '\n')
        for n in ns:
            f.write('%d %s\n' % (n, ' '.join(
                fmt(c[k]['median'].get(n) if k in c else None, '%.1f') for k in keys)))
    lkeys = [k for k in ('zklock-on', 'curator', 'kazoo') if k in lat]
    ldat = os.path.join(BUILD, 'latency.dat')
    lns = latency_part.latency_ns(lat) or [2, 16]
    with open(ldat, 'w') as f:
        # zklock: from COMMIT return; peers: from the release() call
        f.write('# N ' + ' '.join('%s_p50 %s_p99' % (k, k) for k in lkeys) + '\n')
        for n in lns:
            cells = []
            for k in lkeys:
                side = 'ret' if k == 'zklock-on' else 'call'
                cells += [fmt(lat[k]['median_p50_' + side][n], '%.1f'),
                          fmt(lat[k]['median_p99_' + side][n], '%.1f')]
            f.write('%d %s\n' % (n, ' '.join(cells)))
    names = {'zklock-on': 'zklock (verify on)', 'curator': 'Curator', 'kazoo': 'kazoo'}
    colors = {'zklock-on': '#1f77b4', 'curator': '#d62728', 'kazoo': '#2ca02c'}
    lplots = []
    # the medians in the key's first column, the p99s in the second
    for i, k in enumerate(lkeys):
        lplots.append('"%s" using 1:%d with linespoints lw 2 pt 7 lc rgb "%s" title "%s median"'
                      % (ldat, 2 + 2 * i, colors[k], names[k]))
    for i, k in enumerate(lkeys):
        lplots.append('"%s" using 1:%d with linespoints lw 1 dt 2 pt 6 lc rgb "%s" title "%s p99"'
                      % (ldat, 3 + 2 * i, colors[k], names[k]))
    panels = []
    if c:
        panels.append('''set title "Lock handoffs per second vs clients on one lock (N = 1: the uncontended cycle)"
set xlabel "clients contending for one lock"
set ylabel "handoffs per second (median of %(runs)d rounds)"
set logscale x 2
set xtics (%(xtics)s)
set xrange [0.8:%(xmax)s]
set yrange [0:*]
set grid
set datafile missing "n/a"
set key bottom right box opaque
plot "%(dat)s" using 1:2 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "zklock (pgbench, verify on)", \\
     "%(dat)s" using 1:5 with linespoints lw 1 dt 2 pt 6 lc rgb "#1f77b4" title "zklock (verify off)", \\
     "%(dat)s" using 1:3 with linespoints lw 2 pt 5 lc rgb "#d62728" title "Curator InterProcessMutex", \\
     "%(dat)s" using 1:4 with linespoints lw 2 pt 9 lc rgb "#2ca02c" title "kazoo Lock", \\
     "%(dat)s" using 1:6 with linespoints lw 1 dt 3 pt 4 lc rgb "#555555" title "rawzk recipe: zklock's protocol in C, no PostgreSQL"
''')
    if lat:
        panels.append('''set logscale x 2
set grid
set datafile missing "n/a"
set yrange [0:*]
set xlabel "clients contending for one lock"
set title "Handoff latency: zklock from COMMIT return, Curator/kazoo from the release() call, to the next acquire's return"
set ylabel "microseconds (median over rounds)"
set xtics (%(lxtics)s)
set xrange [%(lxmin)s:%(lxmax)s]
set offsets 0, 0, graph 0.45, 0
set key top left vertical maxrows %(lkeys)d box opaque
plot %(lplots)s
''')
    gp = ('''set terminal pngcairo size 900,%(height)d font "DejaVu Sans,11"
set output "%(out)s"
set multiplot layout %(panels)d,1 title "%(sub)s" noenhanced
''' + ''.join(panels) + 'unset multiplot\n') % {
       'out': path, 'dat': dat, 'runs': res['runs'], 'height': 120 + 440 * len(panels),
       'xtics': ', '.join('"%d" %d' % (n, n) for n in ns), 'xmax': ns[-1] * 1.25,
       'lxtics': ', '.join('"%d" %d' % (n, n) for n in lns),
       'lxmin': lns[0] / 1.4, 'lxmax': lns[-1] * 1.4,
       'lplots': ', \\\n     '.join(lplots) if lplots else '0 notitle', 'panels': len(panels), 'lkeys': max(1, len(lkeys)),
       'sub': '%s ZooKeeper %s, %s CPUs (%s), kernel %s' % (
           info['ensemble'], info['zookeeper'], info['nproc'], info['cpu'],
           info['kernel'])}
    gpf = os.path.join(BUILD, 'handoffs.gp')
    with open(gpf, 'w') as f:
        f.write(gp)
    r = subprocess.run(['gnuplot', gpf], capture_output=True, text=True)
    if r.returncode != 0:
        log('gnuplot failed: %s' % r.stderr)
        return False
    return True


def int_keys(o):
    """results.json's dicts keyed by numbers (clients, locks) came back
    with string keys: make them numbers again."""
    if isinstance(o, dict):
        return {(int(k) if isinstance(k, str) and k.isdigit() else k): int_keys(v)
                for k, v in o.items()}
    if isinstance(o, list):
        return [int_keys(v) for v in o]
    return o


def write_markdown(res, info, path, elapsed, load):
    L = []
    L.append('# zklock benchmark results')
    L.append('')
    L.append('Written by `make bench` (`bench/run_bench.py`) on %s; the run took %.1f min.'
             % (res.get('written') or datetime.datetime.now().strftime('%Y-%m-%d %H:%M'),
                elapsed / 60))
    if res.get('rendered'):
        L.append('(This file was written again from the run\'s results.json on %s, '
                 'after a change to the report alone: %s)' % res['rendered'])
    L.append('Every number is the median of %d rounds (%d s measured after a warm-up '
             'of 1 s, 2 s for Curator\'s JIT; handoff latency: %d s per measurement); '
             'every implementation is interleaved within each round, and every ratio is '
             'the median of the per-round ratios (the two sides of a ratio are measured '
             'seconds to minutes apart, on the same host load). All clients and servers '
             'run on the same machine, over loopback; the clients\' connect strings list '
             'every server. rawzk recipe runs with RAWZK_OWNWATCH=%d (%s).'
             % (res['runs'], res['seconds'], res.get('lat_seconds', res['seconds']),
                res.get('ownwatch', 0),
                'zklock\'s protocol: with one contender ahead, a waiter also '
                'watches its own node, is granted without a listing and '
                'confirms with a sync alone' if res.get('ownwatch') else
                'zklock\'s protocol before issue 18: list again after every '
                'watch'))
    L.append('')
    L.append('## Machine')
    L.append('')
    L.append('| | |')
    L.append('|---|---|')
    for k in ('cpu', 'nproc', 'memory', 'os', 'kernel', 'postgresql', 'zookeeper',
              'libzookeeper-mt', 'curator', 'kazoo', 'java', 'python', 'ensemble',
              'zk_fsync', 'zk_jvm', 'zklock_commit', 'zklock_src_modified', 'zklock_so_md5'):
        L.append('| %s | %s |' % (k, info.get(k, '?')))
    L.append('| load average at start / end | %s / %s |' % load)
    st = res.get('steal') or {}
    L.append('| host CPU steal during the measurements (median / max) | %s %% / %s %% |'
             % (fmt(st.get('median'), '%.1f'), fmt(st.get('max'), '%.1f')))
    L.append('')
    L.append('The machine is a VM on a shared host, so single runs are noisy; '
             'compare the ratios (measured side by side) more than the absolute '
             'numbers. "Host CPU steal" is the share of CPU time the hypervisor gave '
             'to other guests while the figures were measured (/proc/stat): above a '
             'few percent every wake-up and round trip is slower and less regular, '
             'and the ratios move with it. PostgreSQL runs with fsync off (as '
             '`make test`); ZooKeeper with %s.' % info['zk_fsync'])
    L.append('')
    L.append('## Targets (issue 18)')
    L.append('')
    L.append('Each a ratio of two implementations measured side by side in every round '
             '(median of the per-round ratios); rates for throughput (higher is better), '
             'times for latency (lower is better). The arrays, many-locks and memory '
             'checks of issues 6 and 17 follow.')
    L.append('')
    L.append('| target | measured | met |')
    L.append('|---|---|---|')
    for name, value, ok in targets(res):
        L.append('| %s | %s | %s |' % (name, fmt(value, '%.2f'), 'yes' if ok else '**no**'))
    refs = references(res)
    if refs:
        L.append('')
        L.append('Where the bounds come from (not targets). rawzk recipe runs '
                 'zklock\'s whole protocol with the commit check (sync + exists) '
                 'in C with no PostgreSQL, one session per thread: a handoff\'s '
                 'critical path in zklock runs the same requests plus '
                 'PostgreSQL\'s statements, so where rawzk recipe / Curator is '
                 'below 1.2 (or / kazoo below 1.5) that contended target is out of '
                 'reach for the protocol on this machine in this run. Uncontended, '
                 'rawzk recipe alone is not a bound (its next create waits for the '
                 'fsync of the delete it has just sent, where zklock spends that '
                 'time in PostgreSQL); the bound is rawzk recipe sleeping, right after '
                 'each delete, this round\'s advisory cycle time (PostgreSQL\'s '
                 'statements): that is the only place where a zklock cycle\'s '
                 'PostgreSQL time can overlap ZooKeeper\'s work (the delete\'s '
                 'fsync), and a sleep takes hardly any CPU from the servers (it '
                 'spins its last 100 µs so as not to oversleep), where PostgreSQL '
                 'takes its share. Semaphores: rawzk\'s semaphore mode runs zklock\'s '
                 'Curator-layout semaphore (internal mutex with the own watch; '
                 'lease and count with the mutex\'s delete right behind them, '
                 'and a second round that keeps the mutex when there was no '
                 'room; the check on the lease) in C, one session per '
                 'thread. The handoff latency rows show the same '
                 'comparison from the other end of each release.')
        L.append('')
        L.append('| ratio | measured |')
        L.append('|---|---:|')
        for name, value in refs:
            L.append('| %s | %s |' % (name, fmt(value, '%.2f')))
    for part in SECTIONS:
        part.report(res, L)
    if res.get('failures'):
        L.append('')
        L.append('## Failed measurements')
        L.append('')
        L.append('A failed measurement (an error, or no cycle in its window) is not tried '
                 'again: it is left out of the medians, and shown here.')
        L.append('')
        for f in res['failures']:
            L.append('- ' + f)
    L.append('')
    L.append('## How to run')
    L.append('')
    L.append('```sh')
    L.append('make bench                 # full run: 3 servers, 5 rounds, ~30 min on 2 cores')
    L.append('make bench QUICK=1         # 1 round, 2 s measurements, 20,000 memory cycles')
    L.append('make bench ZK_SERVERS=1    # standalone ZooKeeper instead of 3 servers')
    L.append('make bench ZK_FSYNC=0      # ZooKeeper with forceSync=no, as make test')
    L.append('make bench BENCH_ONLY=latency,semaphore BENCH_OUT=/tmp/b   # some parts only')
    L.append('make bench BENCH_ONLY=waitcost BENCH_OUT=bench/waitcost   # the cost of waiting (issue 38)')
    L.append('make bench BENCH_ONLY=failfast BENCH_OUT=bench/failfast   # fail fast (issue 39)')
    L.append('```')
    with open(path, 'w') as f:
        f.write('\n'.join(L) + '\n')


def save(res, out):
    """results.json into bench/build and into out."""
    for d in {BUILD, os.path.abspath(out)}:
        with open(os.path.join(d, 'results.json'), 'w') as f:
            json.dump(res, f, indent=1, default=str)


def write(res, info, out, elapsed, load):
    """results.md and handoffs.png into out."""
    write_markdown(res, info, os.path.join(out, 'results.md'), elapsed, load)
    write_chart(res, info, os.path.join(out, 'handoffs.png'))


def print_summary(res, info, quick, out, elapsed):
    """The summary, the targets and the failures, on stdout."""
    print()
    print('zklock bench (%s; %s ZooKeeper; %s CPUs, %s, kernel %s; host CPU steal '
          'median %s %%, max %s %%)'
          % ('quick' if quick else 'full', info['ensemble'], info['nproc'],
             info['memory'], info['kernel'], fmt(res['steal']['median'], '%.1f'),
             fmt(res['steal']['max'], '%.1f')))
    print(summary_table(res))
    print()
    print('Targets (issue 18; then issues 6 and 17):')
    for name, value, ok in targets(res):
        print('  %-66s %8s  %s' % (name, fmt(value, '%.2f'), 'met' if ok else 'NOT MET'))
    print('For proportion:')
    for name, value in references(res):
        print('  %-66s %8s' % (name, fmt(value, '%.2f')))
    if res['failures']:
        print()
        print('Failed measurements (not tried again; left out of the medians):')
        for f in res['failures']:
            print('  ' + f)
    print()
    print('Written: %s, %s (%.1f min)' % (os.path.join(out, 'results.md'),
                                         os.path.join(out, 'handoffs.png'),
                                         elapsed / 60))


def render(out, why):
    """--render: results.md and the chart again from out/results.json."""
    path = os.path.join(out, 'results.json')
    with open(path) as f:
        res = int_keys(json.load(f))
    if res.get('many'):
        res['many']['limit_ok'] = many_part.limit_respected(res['many'])
    res['rendered'] = (datetime.datetime.now().strftime('%Y-%m-%d %H:%M'), why)
    write(res, res['machine'], out, res['elapsed_s'], tuple(res['load']))
    print('Written again from %s: %s, %s' % (path, os.path.join(out, 'results.md'),
                                            os.path.join(out, 'handoffs.png')))
