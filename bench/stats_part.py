"""
The `stats` part of `make bench` (issue 32): what zklock's cumulative
statistics cost a lock call.

A cluster of its own that preloads zklock (shared_preload_libraries, as a
DBA who wants zk_stat_locks runs it; every other part measures a cluster
that does not), default settings otherwise (zklock.verify_at_commit on,
zklock.stat_max_names 1000).

Statistics on and off are measured in the same pgbench run, mixed
transaction by transaction: two scripts of equal weight, one starting
with SET zklock.track_stats = on, the other with off, pgbench picking one
at random for every transaction.  A lock cycle's time on this machine
drifts by 10-20 % from one 3-second window to the next (ZooKeeper's
fsync on a 3-server ensemble), far more than the 2 % to be shown: run
against run (the first version of this part, on/off windows back to back
in ABBA order) put the per-round differences between -21 % and +17 %.
Mixed within one run, both settings see the same ensemble at the same
moments, and pgbench's per-script latency average and standard deviation
give the difference with its confidence interval.

The overhead is latency on / latency off - 1 per round (per transaction:
SET, BEGIN, the lock call, COMMIT), the median over the rounds, with a
95 % interval pooled over every transaction of every round.

Cases:
  1 client,  one name      the uncontended cycle of one job's lock
  1 client,  fresh names   a name never used before in every call: once
                           the table holds 1000 names, every 50th new name
                           evicts the least recently used 50 (a scan of the
                           table under its lock)
  16 clients, one name     contended handoffs: 16 backends update one row
                           (latency includes the wait in the queue, which
                           the other setting's holders share)
  16 clients, fresh names  16 independent streams of new names: the
                           table's lock at its busiest
"""
import math
import os
import re
import subprocess

import harness

CASES = [
    # (key, clients, script, label, measured seconds per round (full run))
    ('one1', 1, 'one', '1 client, one name', 12),
    ('fresh1', 1, 'fresh', '1 client, fresh names', 12),
    ('one16', 16, 'one', '16 clients, one name', 12),
    # 16 independent streams on 2 cores: a transaction's latency varies
    # about as much as its mean (16 backends and 3 servers share 2 cores),
    # so it takes 4 times the transactions to bound 2 % (12 s per round
    # gave +0.98 % +- 1.57 %)
    ('fresh16', 16, 'fresh', '16 clients, fresh names', 48),
]
TARGET = 0.02       # issue 32: at most 2 % slower with statistics on

LOCK = {
    'one': "SELECT zk_lock_exclusive('bench-stats');\n",
    # a name no call used before: random over 2^31 per client
    'fresh': ("SELECT zk_lock_exclusive("
              "'bench-stats-fresh-' || :client_id || '-' || :n);\n"),
}

SCRIPT_STATS = re.compile(
    r'SQL script \d+: (?P<path>\S+)\n'
    r'(?:.*\n)*?'
    r' - (?P<n>\d+) transactions.*\n'
    r'(?:.*\n)*?'
    r' - latency average = (?P<avg>[\d.]+) ms\n'
    r' - latency stddev = (?P<sd>[\d.]+) ms')


def write_scripts(work):
    """{(script, 'on'|'off'): path}"""
    paths = {}
    for script, lock in LOCK.items():
        for track in ('on', 'off'):
            path = os.path.join(work, 'stats-%s-%s.sql' % (script, track))
            with open(path, 'w') as f:
                if script == 'fresh':
                    f.write('\\set n random(1, 2000000000)\n')
                f.write('SET zklock.track_stats = %s;\nBEGIN;\n%sCOMMIT;\n'
                        % (track, lock))
            os.chmod(path, 0o644)
            paths[(script, track)] = path
    return paths


def pgbench(pg, clients, paths, secs, extra=()):
    """pgbench -c clients -T secs with the scripts at equal weight (extra:
    more options); its output.  Raises on a failed run or a failed
    transaction."""
    cmd = [harness.PG_BIN + '/pgbench', '-n', '-h', '127.0.0.1', '-p', str(pg.port),
           '-U', 'postgres', '-c', str(clients), '-j', '1', '-T', str(secs)]
    cmd += list(extra)
    for path in paths:
        cmd += ['-f', path + '@1']
    out = subprocess.run(harness.as_pg_user(cmd + ['postgres']), capture_output=True,
                         text=True, timeout=secs + 120)
    if out.returncode != 0:
        raise RuntimeError('pgbench failed (status %d):\n%s%s'
                           % (out.returncode, out.stdout, out.stderr))
    failed = re.search(r'number of failed transactions: (\d+)', out.stdout)
    if failed and int(failed.group(1)) > 0:
        raise RuntimeError('pgbench: failed transactions:\n' + out.stdout)
    return out.stdout


def mixed_run(pg, clients, on_path, off_path, secs, extra=()):
    """One pgbench run mixing both scripts; {'on': (n, avg ms, sd ms),
    'off': ...}.  Raises on a failed run or a failed transaction."""
    stdout = pgbench(pg, clients, [on_path, off_path], secs, extra)
    got = {}
    for m in SCRIPT_STATS.finditer(stdout):
        track = 'on' if m.group('path') == on_path else 'off'
        got[track] = (int(m.group('n')), float(m.group('avg')),
                      float(m.group('sd')))
    if set(got) != {'on', 'off'} or not got['on'][0] or not got['off'][0]:
        raise RuntimeError('pgbench printed no per-script latency:\n'
                           + stdout)
    return got


def run(bench):
    """Measure every case, bench.runs rounds; results in
    bench.results['stats']."""
    res = bench.results.setdefault('stats', {})
    pg = harness.PgCluster('bench-stats', base_dir=bench.work, extra_conf={
        'shared_preload_libraries': 'zklock',
        'zklock.hosts': bench.zk.connect_string,
        'max_connections': 100})
    pg.init()
    pg.start()
    try:
        pg.psql('CREATE EXTENSION zklock')
        paths = write_scripts(bench.work)
        rounds = {key: [] for key, *_ in CASES}
        for r in range(bench.runs):
            for key, clients, script, label, full_secs in CASES:
                secs = 5 if bench.quick else full_secs
                try:
                    got = mixed_run(pg, clients, paths[(script, 'on')],
                                    paths[(script, 'off')], secs)
                except Exception as e:
                    harness.log('stats round %d/%d: %s FAILED: %s'
                                % (r + 1, bench.runs, label, e))
                    bench.failures.append('stats, %s: %s'
                                          % (label, str(e).splitlines()[0]))
                    continue
                rounds[key].append(got)
                harness.log('stats round %d/%d: %s: on %d x %.3f ms, off %d x %.3f ms '
                            '(%+.2f %%)'
                            % (r + 1, bench.runs, label, got['on'][0], got['on'][1],
                               got['off'][0], got['off'][1],
                               100 * (got['on'][1] / got['off'][1] - 1)))
        res['rounds'] = bench.runs
        res['quick'] = bench.quick
        cl = pg.psql('SELECT names_tracked, evictions, acquisitions '
                     'FROM zk_stat_cluster').split('|')
        res['names'], res['evictions'], res['counted'] = (int(x) for x in cl)
        for key, clients, script, label, full_secs in CASES:
            res[key] = summarize(rounds[key], label, clients,
                                 5 if bench.quick else full_secs)
    finally:
        pg.stop()


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return None
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _pooled(parts):
    """(n, mean, sd) of the union of groups given as (n, mean, sd)."""
    n = sum(p[0] for p in parts)
    mean = sum(p[0] * p[1] for p in parts) / n
    ss = sum((p[0] - 1) * p[2] ** 2 + p[0] * (p[1] - mean) ** 2 for p in parts)
    return n, mean, math.sqrt(ss / max(n - 1, 1))


def summarize(rounds, label, clients, secs):
    """The median of the per-round overheads, and the overhead of every
    transaction pooled, with its 95 % interval (normal approximation:
    thousands of transactions per setting)."""
    if not rounds:
        return {'label': label, 'clients': clients, 'rounds': 0,
                'secs': secs, 'overhead': None}
    per_round = [g['on'][1] / g['off'][1] - 1 for g in rounds]
    on = _pooled([g['on'] for g in rounds])
    off = _pooled([g['off'] for g in rounds])
    se = math.sqrt(on[2] ** 2 / on[0] + off[2] ** 2 / off[0])
    return {
        'label': label, 'clients': clients, 'rounds': len(rounds),
        'secs': secs, 'n_on': on[0], 'n_off': off[0],
        'lat_on': on[1], 'lat_off': off[1],
        'overhead': _median(per_round),
        'overhead_min': min(per_round), 'overhead_max': max(per_round),
        'pooled': on[1] / off[1] - 1,
        'ci95': 1.96 * se / off[1],
    }


def targets(res):
    """(label, overhead in %, met): met when the pooled overhead's upper
    95 % bound is within the target."""
    st = res.get('stats') or {}
    out = []
    for key, clients, script, label, full_secs in CASES:
        x = st.get(key)
        if x and x.get('overhead') is not None:
            out.append(('statistics overhead, %s <= 2 %%' % label,
                        100 * x['pooled'],
                        x['pooled'] + x['ci95'] <= TARGET))
    return out


def report(res, L):
    """The part's section of results.md."""
    st = res.get('stats') or {}
    if not any(st.get(key) for key, *_ in CASES):
        return
    L.append('')
    L.append('## Statistics overhead (issue 32)')
    L.append('')
    L.append('A cluster that preloads zklock (default settings: verify_at_commit on, '
             'stat_max_names 1000). In each pgbench run (seconds per round below) two scripts of equal '
             'weight, `SET zklock.track_stats = on` or `off` then `BEGIN; SELECT '
             'zk_lock_exclusive(...); COMMIT`, are mixed transaction by transaction, '
             'so both settings see the ensemble at the same moments (run against run, '
             'the cycle drifts 10-20 %% between windows). %d rounds. Latency per '
             'transaction in ms (pgbench\'s per-script average); overhead = latency '
             'on / latency off - 1: the median of the rounds, their range, and over '
             'every transaction pooled with its 95 %% interval. Fresh names: a name '
             'never used before in every call (at the end the table held %d names '
             'after %d evictions; %d acquisitions counted with statistics on).'
             % (st.get('rounds', 0), st.get('names', 0),
                st.get('evictions', 0), st.get('counted', 0)))
    L.append('')
    L.append('| case | seconds per round | transactions on / off | latency on | latency off | overhead '
             '(median of rounds) | rounds: min .. max | pooled, 95 % interval |')
    L.append('|---|---|---|---|---|---|---|---|')
    for key, clients, script, label, full_secs in CASES:
        x = st.get(key)
        if not x or x.get('overhead') is None:
            L.append('| %s | failed | | | | | | |' % label)
            continue
        L.append('| %s | %d | %d / %d | %.3f | %.3f | %+.2f %% | %+.2f .. %+.2f %% | '
                 '%+.2f %% ± %.2f %% |'
                 % (label, x['secs'], x['n_on'], x['n_off'], x['lat_on'], x['lat_off'],
                    100 * x['overhead'], 100 * x['overhead_min'],
                    100 * x['overhead_max'], 100 * x['pooled'], 100 * x['ci95']))
    L.append('')
    L.append('| target (issue 32): met when the pooled overhead\'s upper 95 % bound is '
             'within it | measured (%) | met |')
    L.append('|---|---|---|')
    for name, value, ok in targets(res):
        L.append('| %s | %.2f | %s |' % (name, value, 'yes' if ok else '**no**'))
