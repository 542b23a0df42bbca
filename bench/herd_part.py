"""
The `herd` part of `make bench`: N zklock waiters queued on one lock,
released one by one: watch notifications per release, ZooKeeper requests
per release, handoff latency.
"""
import statistics
import time

import harness
from benchlib import log


def run(bench):
    kz = harness.connect_kazoo(bench.zk.connect_string)
    zi = harness.ZkInspector(kz, '/zklock')
    try:
        for n, verify in bench.herd_cases:
            label = 'N=%d' % n if verify == 'on' else 'N=%d, verify off' % n
            h = _herd(bench, n, zi, verify)
            h['n'], h['verify'] = n, verify
            bench.results['herd'][label] = h
            log('herd %-16s watches while queued %d, notifications per release '
                'mean %.2f max %d, requests per release %.2f, handoff %.2f ms'
                % (label, h['watches_queued'], h['notif_mean'], h['notif_max'],
                   h['reqs_mean'], h['handoff_ms_median']))
    finally:
        kz.stop()
        kz.close()


def _herd(bench, n, zi, verify='on'):
    resource = 'bench-herd-%d-%s' % (n, verify)
    backends = []
    setting = 'SET zklock.verify_at_commit = %s' % verify
    try:
        holder = harness.Backend(bench.pg, 'herd-holder')
        backends.append(holder)
        holder.query(setting)
        holder.query('BEGIN')
        holder.query('SELECT zk_lock_exclusive(%s)', [resource])
        waiting = {}
        granted_at = {}

        def on_done(b):
            def cb(fut):
                granted_at[b] = time.monotonic()
            return cb
        for i in range(n):
            b = harness.Backend(bench.pg, 'herd-w%d' % i)
            backends.append(b)
            b.query(setting)
            b.query('BEGIN')
            fut = b.submit('SELECT zk_lock_exclusive(%s)', [resource])
            fut.add_done_callback(on_done(b))
            waiting[b] = fut
            # queue them one by one: the order is the creation order
            zi.wait_contenders(resource, i + 2, timeout=30)
        harness.wait_until(
            lambda: bench.mntr()['zk_watch_count'] >= n, 30,
            '%d watches set' % n)
        time.sleep(0.2)
        watches_queued = int(bench.mntr()['zk_watch_count'])

        current = holder
        notifs, reqs, handoff_ms = [], [], []
        for k in range(n):
            m0 = bench.mntr()
            t0 = time.monotonic()
            current.query('COMMIT')
            nxt = harness.wait_until(
                lambda: [b for b, f in waiting.items() if f.done()], 30,
                'the next waiter of %s to be granted' % resource,
                interval=0.001)
            if len(nxt) != 1:
                raise RuntimeError('%d waiters granted at once' % len(nxt))
            b = nxt[0]
            waiting.pop(b).result()        # raises if the wait failed
            time.sleep(0.05)               # late notifications, if any
            m1 = bench.mntr()
            notifs.append(bench.notifications(m1) - bench.notifications(m0))
            reqs.append(bench.requests(m0, m1))
            handoff_ms.append(1e3 * (granted_at[b] - t0))
            current = b
        m0 = bench.mntr()
        current.query('COMMIT')
        time.sleep(0.05)
        last_notifs = bench.notifications(bench.mntr()) - bench.notifications(m0)
        return {
            'watches_queued': watches_queued,
            'releases': n,
            'notif_per_release': notifs,
            'notif_mean': statistics.mean(notifs),
            'notif_max': max(notifs),
            'notif_min': min(notifs),
            'notif_last_release': last_notifs,
            'reqs_mean': statistics.mean(reqs),
            'handoff_ms_median': statistics.median(handoff_ms),
            'handoff_ms': handoff_ms,
        }
    finally:
        for b in backends:
            b.close()


def targets(res):
    out = []
    if res['herd']:
        worst = max(h['notif_max'] for h in res['herd'].values())
        out.append(('herd: notifications per release <= 2 (max; N=%s)'
                    % ', '.join(sorted(set(str(h['n']) for h in res['herd'].values()),
                                       key=int)), worst,
                    all(h['notif_max'] <= 2 for h in res['herd'].values())))
    return out


def summary(res, lines):
    h = res['herd']
    if h:
        lines.append('')
        lines.append('Herd: notifications delivered per release (mntr watch-trigger sums)')
        for label, v in h.items():
            lines.append('  %-16s watches while queued %3d; per release mean %.2f min %d '
                         'max %d; ZK requests per release %.2f; handoff %.2f ms'
                         % (label, v['watches_queued'], v['notif_mean'], v['notif_min'],
                            v['notif_max'], v['reqs_mean'], v['handoff_ms_median']))


def report(res, L):
    h = res['herd']
    if h:
        L.append('')
        L.append('## Herd effect')
        L.append('')
        L.append('N zklock waiters (each its own backend, `BEGIN; SELECT '
                 'zk_lock_exclusive(...)`) queue behind a holder; then the holder and each '
                 'new holder in turn COMMITs, N releases in all. Method: the server\'s '
                 'watch-trigger summaries in `mntr` (`zk_sum_node_created/deleted/changed/'
                 'children_watch_count`: watchers notified per event, summed over every '
                 'server) read before each COMMIT and after the next waiter is granted '
                 '(+50 ms); "watches while queued" is `mntr` `zk_watch_count` once all N wait. '
                 'Handoff = from the holder\'s COMMIT being sent to the next waiter\'s '
                 'zk_lock_exclusive returning (client side, includes the holder\'s COMMIT). '
                 '"ZK requests per release" counts every client\'s requests from before '
                 'the COMMIT until the next holder is known (the bench\'s own `mntr` '
                 'calls taken out; idle waiters\' pings, one per session every third of '
                 'the session timeout, included).')
        L.append('')
        L.append('| waiters | watches while queued | notifications per release (mean / min / max) '
                 '| after the last release | ZK requests per release | handoff median (ms) |')
        L.append('|---|---:|---|---:|---:|---:|')
        for label, v in h.items():
            L.append('| %s | %d | %.2f / %d / %d | %d | %.2f | %.2f |' % (
                label, v['watches_queued'], v['notif_mean'], v['notif_min'], v['notif_max'],
                v['notif_last_release'], v['reqs_mean'], v['handoff_ms_median']))
