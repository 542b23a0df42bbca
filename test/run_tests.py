#!/usr/bin/python3
"""
zklock test runner (run by test/run.sh, i.e. `make test`): pytest over
every suite in test/ (see test/conftest.py), with a guaranteed last line.

    /usr/bin/python3 test/run_tests.py [pytest options and arguments]

Without arguments (`make test`) the modules run in LANES pytest processes
side by side (lanes; ZKLOCK_TEST_LANES, default 4), then the SOLO modules
one after the other, alone.  Most of the suite's time is waiting (session
expiries, partitions, stall probes), not CPU, and every lane is a run of
its own: its own work directory, ZooKeeper, PostgreSQL cluster, the
ensembles and clusters its modules start, and a port range of its own
(ZKLOCK_PORT_RANGE, see harness.free_ports).  Modules are dealt to the
lanes longest first (MODULE_SECONDS, measured), each to the lane with the
least work so far.  SOLO modules run after the lanes, alone: test_wakeup
measures every lock cycle against a 500 ms bound while pgbench keeps both
cores busy; test_version replaces the installed zklock.so for a while,
which every other lane's new backends would load.

A lane's output is kept in a file and printed whole when the lane ends
(verbose, its slowest tests, its zklock summary, the reports of its failed
tests, its FIGURES blocks, its count as "lane N: N passed, N failed"); the
solo lane prints as it runs.  At the end
come one line per lane, the slowest tests of every lane, the failed tests,
and the very last line "N passed, N failed", the sum over every lane.  A
lane that ends without its count (it crashed, pytest could not start)
counts as one failed test.

With arguments (`bash test/run.sh test_many.py -k split`, -x, --lf, ...)
everything runs in this one process, as one pytest run, in file order:
arguments select tests, and a selection that parallel lanes split could
leave a lane with no test at all.  Only --keep (keep the work directories)
goes to the lanes.  ZKLOCK_TEST_LANES=1 also runs as one pytest run.
--failed-step (a build step of test/run.sh that failed) always runs one
pytest run: the count of that run includes the step.

Paths given are relative to test/.  The exit status is 1 if anything
failed, else 0.
"""

import fcntl
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.dont_write_bytecode = True          # no __pycache__ in the work tree

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARGS = ['-v', '--durations=15']
# pytest's informational runs: no test runs, no summary line
NO_RUN = ('-h', '--help', '--version', '-V', '--collect-only', '--co',
          '--fixtures', '--markers')
# arguments that keep the lanes (anything else: one pytest run)
LANE_ARGS = ('--keep',)

DEFAULT_LANES = 4
# Run after the lanes, one after the other, with nothing beside them.
SOLO = ('test_wakeup', 'test_version')
# Wall seconds of each module (tests, module hooks, its share of the
# servers' start), from `make test` on PostgreSQL 17, 2 cores, one pytest
# run (--durations=0, summed per module).  Only their order matters: the
# longest modules are dealt first.  A module not listed counts DEFAULT_S.
MODULE_SECONDS = {
    'test_wakeup': 150, 'test_nemesis': 101, 'test_deadlock': 91,
    'test_outage': 63, 'test_ensemble': 61, 'test_multisession': 46,
    'test_failfast': 39, 'test_interop': 35, 'test_semaphore': 32,
    'test_proxy': 30, 'test_lockset': 24, 'test_lockloss': 22,
    'test_upgrade': 20, 'test_holes': 15, 'test_hostile': 13,
    'test_faults': 12, 'test_stats': 10, 'test_many': 8, 'test_version': 7,
    'test_threads': 5, 'test_zoocfg': 4, 'test_config': 4,
    'test_regress': 3, 'test_unit': 2, 'test_pooler': 2, 'test_security': 1,
    'test_package': 1, 'test_cron': 1, 'test_revoke': 15, 'test_tls': 32,
    'test_ensemble_change': 100,
}
# Modules whose time depends on the major: test_cron runs pg_cron's jobs
# only where pg_cron is installed (Debian's 15), about 215 s there, and
# skips elsewhere; test_upgrade runs pg_upgrade from 15 only.
WHERE_PG_CRON = {'test_cron': 215}
DEFAULT_S = 20
# Each lane's ports: PORT_SPAN of them, from 10000 + the run's slot; a
# slot is held (flock) by one run at a time, so that two runs side by side
# on one machine (two work trees, two majors) take different ranges.
PORT_BASE = 10000
PORT_SPAN = 400
SLOT_PORTS = 2000                       # up to 5 lanes a run
SLOTS = 10                              # 10000-29999: below 32768

DURATION_LINE = re.compile(r'^\d+(\.\d+)?s (setup|call|teardown) +\S')
COUNT_LINE = re.compile(r'^(\d+) passed, (\d+) failed$')


# ---------------------------------------------------------------------------
# one pytest run in this process (arguments given, or one lane)
# ---------------------------------------------------------------------------

def run_here(argv):
    fd, result_file = tempfile.mkstemp(prefix='zklock-result-')
    os.close(fd)
    os.unlink(result_file)              # written by conftest.py at the end
    os.environ['ZKLOCK_RESULT_FILE'] = result_file
    try:
        import pytest
        status = int(pytest.main(DEFAULT_ARGS + argv))
    except BaseException:
        traceback.print_exc()
        status = 3
    sys.stdout.flush()
    if any(a in NO_RUN for a in argv):
        return status
    counts = read_counts(result_file)
    if counts is None:
        print('run_tests.py: pytest ended (status %s) without counting the '
              'tests' % status, file=sys.stderr, flush=True)
        print('0 passed, 1 failed', flush=True)
        return 1
    passed, failed = counts
    return 1 if failed or passed == 0 else 0


def read_counts(result_file):
    try:
        with open(result_file) as f:
            passed, failed = (int(x) for x in f.read().split())
        os.unlink(result_file)
        return passed, failed
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------
# lanes
# ---------------------------------------------------------------------------

def modules():
    return sorted(os.path.splitext(os.path.basename(p))[0]
                  for p in glob.glob(os.path.join(HERE, 'test_*.py')))


def has_pg_cron():
    """pg_cron is installed for the major under test (PG_CONFIG)."""
    try:
        share = subprocess.run(
            [os.environ.get('PG_CONFIG', 'pg_config'), '--sharedir'],
            capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return os.path.exists(os.path.join(share, 'extension', 'pg_cron.control'))


def plan(names, lanes):
    """Deal the non-solo modules to `lanes` lanes, longest first, each to
    the lane with the least seconds so far.  Returns [[module, ...], ...]
    (no empty lane) and the solo modules."""
    seconds = dict(MODULE_SECONDS)
    if has_pg_cron():
        seconds.update(WHERE_PG_CRON)
    solo = [m for m in names if m in SOLO]
    rest = sorted((m for m in names if m not in SOLO),
                  key=lambda m: (-seconds.get(m, DEFAULT_S), m))
    bins = [[0, []] for _ in range(min(lanes, len(rest)))]
    for m in rest:
        b = min(bins, key=lambda b: b[0])
        b[0] += seconds.get(m, DEFAULT_S)
        b[1].append(m)
    return [b[1] for b in bins if b[1]], solo


def take_port_slot():
    """flock one of SLOTS files: this run's port slot (kept open until
    the process exits).  Returns (slot, file)."""
    for slot in range(SLOTS):
        f = open(os.path.join(tempfile.gettempdir(),
                              'zklock-test-ports.%d' % slot), 'a')
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return slot, f
        except OSError:
            f.close()
    raise RuntimeError('all %d port slots are taken by other runs' % SLOTS)


class Lane:
    """One pytest process over some modules, with its own port range."""

    def __init__(self, name, mods, port_range, extra_args, live):
        self.name = name
        self.mods = mods
        self.port_range = port_range
        self.extra_args = extra_args
        self.live = live                # print as it runs (else at the end)
        self.proc = None
        self.text = []                  # its output
        self.start = self.end = None
        self.counts = None              # (passed, failed)
        self.crashed = False            # ended without its count
        self._reader = None
        fd, self.result_file = tempfile.mkstemp(prefix='zklock-result-')
        os.close(fd)
        os.unlink(self.result_file)     # written by conftest.py at the end

    def run(self):
        env = dict(os.environ, ZKLOCK_RESULT_FILE=self.result_file,
                   ZKLOCK_PORT_RANGE='%d-%d' % self.port_range)
        cmd = [sys.executable, '-m', 'pytest'] + DEFAULT_ARGS + \
            self.extra_args + ['%s.py' % m for m in self.mods]
        self.start = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=HERE, env=env,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True,
                                     errors='replace')
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            # the lane's own count: named, so that the run's sum is the
            # only line of the form "N passed, N failed"
            if COUNT_LINE.match(line.rstrip('\n')):
                line = 'lane %s: %s' % (self.name, line)
            self.text.append(line)
            if self.live:
                sys.stdout.write(line)
                sys.stdout.flush()

    def done(self):
        if self.end is None and self.proc.poll() is not None:
            self._reader.join()
            self.end = time.monotonic()
            self.counts = read_counts(self.result_file)
            if self.counts is None:     # a lane without its count: failed
                self.counts = (0, 1)
                self.crashed = True
        return self.end is not None

    def output(self):
        return ''.join(self.text)

    def headline(self):
        return 'lane %s: %s' % (self.name, ' '.join(self.mods))

    def result_line(self):
        return 'lane %-4s %4.0f s  %3d passed, %d failed%s' % (
            self.name, self.end - self.start, self.counts[0], self.counts[1],
            ' (pytest ended, status %s, without its count)'
            % self.proc.returncode if self.crashed else '')


def print_flush(text=''):
    sys.stdout.write(text if text.endswith('\n') else text + '\n')
    sys.stdout.flush()


def summary_parts(text):
    """From a lane's output: its duration lines, its failed-test lines and
    its skipped count."""
    durations, failures, skipped = [], [], 0
    in_summary = False
    for line in text.splitlines():
        if DURATION_LINE.match(line):
            durations.append(line)
        elif line.startswith('=') and 'zklock summary' in line:
            in_summary = True
        elif line.startswith('='):
            in_summary = False
        elif in_summary and line.startswith('  failed: '):
            failures.append(line[len('  failed: '):])
        elif in_summary:
            m = re.match(r'^  \((\d+) skipped', line)
            if m:
                skipped += int(m.group(1))
    return durations, failures, skipped


_stop = threading.Event()               # SIGTERM/SIGHUP came


def wait_lanes(lanes, on_done):
    """Wait until every lane has ended, calling on_done(lane) as each
    does.  Ctrl-C reaches the lanes (one process group): keep waiting."""
    interrupted = False
    pending = list(lanes)
    while pending:
        try:
            time.sleep(0.5)
        except KeyboardInterrupt:
            interrupted = True
        interrupted = interrupted or _stop.is_set()
        for lane in [l for l in pending if l.done()]:
            pending.remove(lane)
            on_done(lane)
    return interrupted


def run_lanes(nlanes, extra_args):
    t0 = time.monotonic()
    slot, slot_file = take_port_slot()
    base = PORT_BASE + slot * SLOT_PORTS
    groups, solo = plan(modules(), nlanes)
    lanes = [Lane(str(i + 1), mods,
                  (base + i * PORT_SPAN, base + (i + 1) * PORT_SPAN - 1),
                  extra_args, live=False)
             for i, mods in enumerate(groups)]
    n = len(lanes)
    solo_lane = Lane('solo', solo,
                     (base + n * PORT_SPAN, base + (n + 1) * PORT_SPAN - 1),
                     extra_args, live=True) if solo else None
    assert (n + 1) * PORT_SPAN <= SLOT_PORTS
    started = []

    def forward(signum, frame):         # SIGTERM/SIGHUP: end every lane
        for lane in started:
            if lane.proc.poll() is None:
                lane.proc.send_signal(signum)
        _stop.set()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)

    print_flush('run_tests.py: %d lanes side by side, then %s alone '
                '(ports %d-%d)' % (n, ', '.join(solo) or 'nothing',
                                   base, base + SLOT_PORTS - 1))
    for lane in lanes:
        print_flush('  ' + lane.headline())
    for lane in lanes:
        started.append(lane.run())
    finished = []

    def show(lane):
        finished.append(lane)
        print_flush('\n' + '#' * 78)
        print_flush('# %s  (%d of %d lanes done)'
                    % (lane.result_line(), len(finished), n))
        print_flush('# ' + lane.headline())
        print_flush('#' * 78)
        print_flush(lane.output())
        print_flush('# end of lane %s' % lane.name)
    interrupted = wait_lanes(lanes, show)
    if solo_lane is not None and not interrupted and not _stop.is_set():
        print_flush('\n' + '#' * 78)
        print_flush('# %s  (alone, after the lanes; as it runs)'
                    % solo_lane.headline())
        print_flush('#' * 78)
        started.append(solo_lane.run())
        interrupted = wait_lanes([solo_lane], finished.append)
        print_flush('# end of lane solo')
    slot_file.close()

    passed = sum(lane.counts[0] for lane in finished)
    failed = sum(lane.counts[1] for lane in finished)
    durations, failures, skipped = [], [], 0
    for lane in finished:
        d, f, s = summary_parts(lane.output())
        durations += d
        failures += ['lane %s: %s' % (lane.name, x) for x in f]
        skipped += s
        if lane.crashed:
            failures.append('lane %s: pytest ended (status %s) without '
                            'counting its tests'
                            % (lane.name, lane.proc.returncode))
    if solo_lane is not None and solo_lane not in finished:
        failed += 1
        failures.append('lane solo: not run (interrupted)')
    print_flush('\n' + '=' * 31 + ' zklock lanes ' + '=' * 33)
    for lane in finished:
        print_flush('  %s  %s' % (lane.result_line(), ' '.join(lane.mods)))
    print_flush('  wall time %.0f s' % (time.monotonic() - t0))
    if skipped:
        print_flush('  (%d skipped: counted neither passed nor failed)'
                    % skipped)
    for line in failures:
        print_flush('  failed: ' + line)
    durations.sort(key=lambda l: -float(l.split('s', 1)[0]))
    if durations:
        print_flush('=' * 21 + ' slowest durations (every lane) ' + '=' * 25)
        for line in durations[:15]:
            print_flush(line)
    print_flush('%d passed, %d failed' % (passed, failed))
    return 1 if failed or passed == 0 else 0


def main(argv):
    os.chdir(HERE)
    try:
        nlanes = int(os.environ.get('ZKLOCK_TEST_LANES') or DEFAULT_LANES)
    except ValueError:
        nlanes = DEFAULT_LANES
    if nlanes <= 1 or any(a not in LANE_ARGS for a in argv):
        return run_here(argv)
    try:
        return run_lanes(min(nlanes, 5), list(argv))
    except Exception:
        traceback.print_exc()
        print('0 passed, 1 failed', flush=True)
        return 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
