#!/usr/bin/python3
"""
zklock test runner (run by test/run.sh, i.e. `make test`): pytest over
every suite in test/ (see test/conftest.py), with a guaranteed last line.

    /usr/bin/python3 test/run_tests.py [pytest options and arguments]

It runs pytest in this process, from test/ (so paths given are relative
to test/), verbose, with the slowest tests listed; every argument goes to
pytest (e.g. -k holes, -x, --lf, --keep, --failed-step install).  The
suites print the last line "N passed, N failed" themselves
(conftest.py).  If pytest ends without printing it (a conftest that
cannot be imported, a usage error, a crash inside pytest), this prints
"0 passed, 1 failed" instead: a suite that cannot run never counts as zero
tests.  The exit status is 1 if anything failed, else 0.
"""

import os
import sys
import tempfile
import traceback

sys.dont_write_bytecode = True          # no __pycache__ in the work tree

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARGS = ['-v', '--durations=15']
# pytest's informational runs: no test runs, no summary line
NO_RUN = ('-h', '--help', '--version', '-V', '--collect-only', '--co',
          '--fixtures', '--markers')


def main(argv):
    os.chdir(HERE)
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
    try:
        with open(result_file) as f:
            passed, failed = (int(x) for x in f.read().split())
        os.unlink(result_file)
    except (OSError, ValueError):
        print('run_tests.py: pytest ended (status %s) without counting the '
              'tests' % status, file=sys.stderr, flush=True)
        print('0 passed, 1 failed', flush=True)
        return 1
    return 1 if failed or passed == 0 else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
