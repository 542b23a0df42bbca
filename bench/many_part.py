"""
The `many` part of `make bench`: 10,000 distinct locks in one transaction,
then COMMIT: acquire time per lock, commit time, time until ZooKeeper has
deleted every node; ZooKeeper's 1 MB packet limit respected.  Also the
memory part's connected / session / held / released figures (its backend).
"""
import re
import time

import harness
from benchlib import fmt, log, median, rss_kb


JUTE_MAXBUFFER = 0xfffff        # ZooKeeper's default jute.maxbuffer (1 MB - 1)


def zk_log_errors(bench):
    bad = []
    for sid in bench.zk.sids:
        for line in harness.tail(bench.zk.log_path(sid), 100000).splitlines():
            if re.search(r'Len error|jute\.maxbuffer|too large|exceeds', line):
                bad.append(line.strip())
    return bad


def run(bench):
    n = bench.many
    conn = bench.pg.connect()
    cur = conn.cursor()
    res = {'locks': n, 'fresh': [], 'existing': [], 'runs': bench.many_runs}
    mem = bench.results['memory']
    try:
        cur.execute('SELECT pg_backend_pid()')
        pid = cur.fetchone()[0]
        mem['connected_kb'] = rss_kb(pid)
        cur.execute("SELECT zk_lock_exclusive('bench-many-first')")  # session opens
        mem['session_kb'] = rss_kb(pid)
        cur.execute('SELECT reconnects FROM zk_status()')
        reconnects0 = cur.fetchone()[0]
        log_errors0 = len(zk_log_errors(bench))
        eph0 = bench.mntr()['zk_ephemerals_count']
        for r in range(bench.many_runs):
            for phase, verify in (('fresh', 'on'), ('existing', 'off')):
                # fresh: lock parents that do not exist yet (created as
                # containers on the way); existing: the same names again
                # right away, parents still there
                m0 = bench.mntr()
                cur.execute('BEGIN')
                cur.execute('SET LOCAL zklock.verify_at_commit = %s' % verify)
                t0 = time.monotonic()
                cur.execute("SELECT count(zk_lock_exclusive('bench-many-%d-' || i)) "
                            "FROM generate_series(1, %d) i" % (r, n))
                t1 = time.monotonic()
                eph_held = bench.mntr()['zk_ephemerals_count'] - eph0
                if r == 0 and phase == 'fresh':
                    mem['held_kb'] = rss_kb(pid)
                t2 = time.monotonic()
                cur.execute('COMMIT')
                t3 = time.monotonic()
                if r == 0 and phase == 'fresh':
                    mem['released_kb'] = rss_kb(pid)
                harness.wait_until(
                    lambda: bench.mntr()['zk_ephemerals_count'] <= eph0, 120,
                    'ZooKeeper to delete the %d released nodes' % n,
                    interval=0.01)
                t4 = time.monotonic()
                m1 = bench.mntr()
                row = {
                    'verify': verify,
                    'acquire_us_per_lock': 1e6 * (t1 - t0) / n,
                    'commit_ms': 1e3 * (t3 - t2),
                    'drain_ms': 1e3 * (t4 - t2),
                    'nodes_held': int(eph_held),
                    'requests_per_lock': bench.requests(m0, m1) / n,
                    'avg_request_bytes': (m1['zk_bytes_received_count'] -
                                          m0['zk_bytes_received_count']) /
                    max(1, bench.requests(m0, m1)),
                }
                res[phase].append(row)
                log('many run %d/%d %-8s verify %-3s: %.1f us/lock acquire, '
                    'COMMIT %.1f ms, all deleted after %.1f ms, %.2f requests/lock'
                    % (r + 1, bench.many_runs, phase, verify,
                       row['acquire_us_per_lock'], row['commit_ms'],
                       row['drain_ms'], row['requests_per_lock']))
        cur.execute('SELECT reconnects FROM zk_status()')
        reconnects1 = cur.fetchone()[0]
        m = bench.mntr()
        res['reconnects'] = reconnects1 - reconnects0
        res['zk_log_errors'] = zk_log_errors(bench)[log_errors0:]
        res['max_response_bytes'] = int(m['zk_max_client_response_size'])
        res['limit_ok'] = limit_respected(res)
        for phase in ('fresh', 'existing'):
            for k in ('acquire_us_per_lock', 'commit_ms', 'drain_ms',
                      'requests_per_lock', 'avg_request_bytes'):
                res['%s_%s' % (phase, k)] = median(r[k] for r in res[phase])
    finally:
        conn.close()
    bench.results['many'] = res


def limit_respected(m):
    """The 1 MB packet limit held in part many: no server logged an
    oversized packet and no response came near it.  A reconnect of the
    backend's session alone does not say the limit was crossed: the
    ensemble's stalls (see benchlib.Bench.measure) reconnect sessions whatever
    their traffic, so reconnects are reported beside the verdict, not in
    it."""
    return not m['zk_log_errors'] and m['max_response_bytes'] < JUTE_MAXBUFFER


def targets(res):
    out = []
    if res['many']:
        out.append(('10,000 locks: 1 MB packet limit respected', None,
                    res['many']['limit_ok']))
    return out


def summary(res, lines):
    m = res['many']
    if m:
        lines.append('')
        lines.append('Many locks: %d distinct locks in one transaction' % m['locks'])
        lines.append('  acquire, new lock parents:      %8.1f us/lock  (%.2f ZK requests/lock)'
                     % (m['fresh_acquire_us_per_lock'], m['fresh_requests_per_lock']))
        lines.append('  acquire, existing lock parents: %8.1f us/lock  (%.2f ZK requests/lock)'
                     % (m['existing_acquire_us_per_lock'], m['existing_requests_per_lock']))
        lines.append('  COMMIT, verify on:  %8.1f ms; all nodes deleted %.1f ms after COMMIT began'
                     % (m['fresh_commit_ms'], m['fresh_drain_ms']))
        lines.append('  COMMIT, verify off: %8.1f ms; all nodes deleted %.1f ms after COMMIT began'
                     % (m['existing_commit_ms'], m['existing_drain_ms']))
        lines.append('  1 MB limit: reconnects %d, ZooKeeper log errors %d, largest response %d bytes -> %s'
                     % (m['reconnects'], len(m['zk_log_errors']), m['max_response_bytes'],
                        'ok' if m['limit_ok'] else 'VIOLATED'))


def report(res, L):
    m = res['many']
    if m:
        L.append('')
        L.append('## Many locks in one transaction')
        L.append('')
        L.append('`BEGIN; SELECT count(zk_lock_exclusive(\'bench-many-R-\' || i)) FROM '
                 'generate_series(1, %d) i; COMMIT;` — first with new lock parents '
                 '(`zklock.verify_at_commit` on), then the same names again while the '
                 'parents still exist (verify off). "Deleted" is when `mntr` '
                 '`zk_ephemerals_count` is back to where it was: releases are sent '
                 'without waiting, so COMMIT returns before ZooKeeper has run them. '
                 'Median of %d run(s).' % (m['locks'], m['runs']))
        L.append('')
        L.append('| | new parents, verify on | existing parents, verify off |')
        L.append('|---|---:|---:|')
        for k, label, spec in (('acquire_us_per_lock', 'acquire, µs per lock', '%.1f'),
                               ('requests_per_lock', 'ZK requests per lock (acquire + commit)', '%.2f'),
                               ('avg_request_bytes', 'average request size (bytes)', '%.0f'),
                               ('commit_ms', 'COMMIT (ms)', '%.1f'),
                               ('drain_ms', 'all nodes deleted after (ms)', '%.1f')):
            L.append('| %s | %s | %s |' % (label, fmt(m['fresh_' + k], spec),
                                           fmt(m['existing_' + k], spec)))
        L.append('')
        L.append('1 MB limit (`jute.maxbuffer`, default %d bytes on server and client): '
                 'reconnects of the backend\'s session during the test: %d; ZooKeeper log lines '
                 'about oversized packets: %d; largest response the server sent: %d bytes. '
                 '**%s** (an oversized packet shows as a server log line or a response '
                 'at the limit, and makes the client reconnect; a reconnect alone does '
                 'not tell it: the ensemble\'s stalls, see the failed measurements, '
                 'reconnect sessions whatever their traffic).'
                 % (JUTE_MAXBUFFER, m['reconnects'], len(m['zk_log_errors']),
                    m['max_response_bytes'],
                    'Respected' if m['limit_ok'] else 'Not respected'))
