"""
The C unit tests (test/unit, built by `make -C test/unit`): test_recipe
(hand-written cases of the pure recipe code), test_ensconf (the
/zookeeper/config parser zklock follows the ensemble with) and
test_corpus (the fuzz corpus, test/fuzz/corpus, replayed through the
fuzz targets' property checks).  Each prints TAP.

Each program runs once, when this module is collected (a few
milliseconds), and each TAP result line is one test, named by the program
and its number (test_tap[recipe-17]; the description is in the failure
message).  `not ok` fails unless marked TODO.  What TAP cannot say as a
result line is a failing test of its own: a program that was not built,
did not finish within UNIT_TIMEOUT, printed `Bail out!`, no plan (1..N), a
plan it did not keep (each result never reported is one failure), or
exited non-zero although every result was ok (e.g. a crash after the
last one).  These tests need no server.
"""

import os
import re
import subprocess

import pytest

USES_SERVERS = False

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = [('recipe', os.path.join(HERE, 'unit', 'test_recipe')),
            ('ensconf', os.path.join(HERE, 'unit', 'test_ensconf')),
            ('corpus', os.path.join(HERE, 'unit', 'test_corpus'))]
UNIT_TIMEOUT = 120
OUTPUT_LINES = 200              # of the program's output, in a failure

TAP_PLAN = re.compile(r'^1\.\.(\d+)')
TAP_RESULT = re.compile(r'^(not )?ok\b\s*(\d*)\s*-?\s*(.*)$')


class Case:
    """One test: a TAP result, or a fault of the program."""

    def __init__(self, ident, ok, message, output=None):
        self.id = ident
        self.ok = ok
        self.message = message
        self.output = output            # the program's output, if shown


def run_program(exe):
    """(stdout text, stderr text, exit status or 'timeout')"""
    try:
        r = subprocess.run([exe], cwd=os.path.dirname(exe),
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, errors='replace', timeout=UNIT_TIMEOUT)
        return r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        def text(b):
            if isinstance(b, bytes):
                return b.decode('utf-8', 'replace')
            return b or ''
        return text(e.stdout), text(e.stderr), 'timeout'


def tap_cases(short, exe):
    """The tests of one TAP program (see the module docstring)."""
    name = os.path.basename(exe)
    if not os.access(exe, os.X_OK):
        return [Case('%s-not-built' % short, False,
                     '%s was not built (make -C test/unit)' % exe)]
    stdout, stderr, status = run_program(exe)
    cases = []
    plan = None
    seen = 0
    for line in stdout.splitlines():
        m = TAP_PLAN.match(line)
        if m and plan is None:
            plan = int(m.group(1))
            continue
        if line.startswith('Bail out!'):
            cases.append(Case('%s-bail-out' % short, False, line))
            continue
        m = TAP_RESULT.match(line)
        if not m:
            continue
        seen += 1
        number = int(m.group(2)) if m.group(2) else seen
        desc = m.group(3) or ('test %d' % number)
        todo = re.search(r'#\s*TODO\b', desc, re.I)
        cases.append(Case('%s-%d' % (short, number),
                          not m.group(1) or bool(todo),
                          '%s: %s%s' % (name, 'not ok' if m.group(1)
                                        else 'ok', ' - ' + desc)))
    if plan is None:
        cases.append(Case('%s-plan' % short, False,
                          '%s: no TAP plan (1..N) in the output' % name))
    elif seen < plan:
        for i in range(seen + 1, plan + 1):
            cases.append(Case('%s-%d' % (short, i), False,
                              '%s: test %d of %d never reported'
                              % (name, i, plan)))
    elif seen > plan:
        cases.append(Case('%s-plan' % short, False,
                          '%s: %d results for a plan of %d'
                          % (name, seen, plan)))
    if status == 'timeout':
        cases.append(Case('%s-timeout' % short, False,
                          '%s did not finish within %d s'
                          % (name, UNIT_TIMEOUT)))
    elif status != 0 and all(c.ok for c in cases):
        cases.append(Case('%s-exit-status' % short, False,
                          '%s exited with status %s' % (name, status)))
    failing = [c for c in cases if not c.ok]
    if failing:                 # the whole output, in the first failure
        lines = (stdout + stderr).splitlines()
        failing[0].output = '\n'.join(lines[:OUTPUT_LINES]) + (
            '\n... (%d more lines)' % (len(lines) - OUTPUT_LINES)
            if len(lines) > OUTPUT_LINES else '')
    seen_ids = set()
    for c in cases:             # duplicate numbers: keep the ids apart
        while c.id in seen_ids:
            c.id += '+'
        seen_ids.add(c.id)
    return cases


def pytest_generate_tests(metafunc):
    if 'tap' not in metafunc.fixturenames:
        return
    cases = []
    if 'unit' in metafunc.config.getoption('failed_step'):
        # make -C test/unit failed (counted once as that step); the
        # tests are deselected (conftest.py), a stale build is not run
        cases.append(Case('not-built', False, 'make -C test/unit failed'))
    else:
        for short, exe in PROGRAMS:
            cases += tap_cases(short, exe)
    metafunc.parametrize('tap', cases, ids=[c.id for c in cases])


def test_tap(tap):
    if not tap.ok:
        pytest.fail(tap.message + ('\n' + tap.output if tap.output else ''),
                    pytrace=False)
