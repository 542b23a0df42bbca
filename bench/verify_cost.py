#!/usr/bin/python3
"""
Cost of zklock.verify_at_commit: one uncontended lock cycle
(BEGIN; SELECT zk_lock_exclusive('x'); COMMIT;) through pgbench, one
client, with the pre-commit check on and off, on a throwaway standalone
ZooKeeper and PostgreSQL cluster on loopback.  Prints the median of the
per-run mean latencies.

    /usr/bin/python3 bench/verify_cost.py [seconds-per-run] [runs]
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', 'test', 'lib'))
import harness  # noqa: E402

PGBENCH = '/usr/lib/postgresql/15/bin/pgbench'


def main():
    secs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    harness.install_signal_handlers()
    zk = harness.ZooKeeper(n=1)
    zk.start()
    pg = harness.PgCluster('bench', extra_conf={
        'zklock.hosts': zk.connect_string})
    pg.init()
    pg.start()
    try:
        pg.psql('CREATE EXTENSION zklock')
        script = tempfile.NamedTemporaryFile('w', suffix='.sql', delete=False)
        script.write("BEGIN;\nSELECT zk_lock_exclusive('bench-cycle');\nCOMMIT;\n")
        script.close()
        os.chmod(script.name, 0o644)
        results = {}
        for verify in ('off', 'on'):
            lat = []
            for _ in range(runs):
                env = dict(os.environ,
                           PGOPTIONS='-c zklock.verify_at_commit=%s' % verify)
                out = subprocess.run(
                    harness.as_pg_user([PGBENCH, '-n', '-h', '127.0.0.1',
                                        '-p', str(pg.port), '-U', 'postgres',
                                        '-c', '1', '-T', str(secs),
                                        '-f', script.name, 'postgres']),
                    env=env, capture_output=True, text=True, check=True).stdout
                lat.append(float(re.search(r'latency average = ([\d.]+) ms',
                                           out).group(1)))
            results[verify] = statistics.median(lat)
        print('zklock lock cycle, 1 client, %d x %d s, standalone ZooKeeper '
              'on loopback' % (runs, secs))
        for verify in ('off', 'on'):
            print('  verify_at_commit = %-3s  %.3f ms per cycle'
                  % (verify, results[verify]))
        print('  cost of the check:      %.3f ms (%.0f%%)'
              % (results['on'] - results['off'],
                 100.0 * (results['on'] / results['off'] - 1)))
    finally:
        pg.stop()
        zk.stop()


if __name__ == '__main__':
    main()
