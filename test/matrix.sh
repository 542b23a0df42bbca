#!/usr/bin/env bash
# `make test-matrix` (and CI's .ci/run): `make test` against every
# supported PostgreSQL major, one after the other: Debian's 15, then 16,
# 17, 18 and 19 from the relocatable kits in ../shared/pg (installed under
# /opt/zklock-pg/MAJOR by ../shared/pg/install.sh; only the test and CI
# scripts use them, never the build itself).  19 is tested on its beta
# (19beta3) until a release kit replaces it: install.sh prefers a
# release kit of a major to a beta.  MAJORS="15 18" runs some.
# Majors run one after the other (each `make test` already runs its
# suites in lanes side by side, test/run_tests.py, and installs into that
# major). Each major's output goes to the terminal as it runs; the last lines
# are one "major N: X passed, Y failed" line per major, then the sum,
# "X passed, Y failed".  Exits non-zero if anything failed.
set -uo pipefail

cd "$(dirname "$0")/.."
MAJORS=${MAJORS:-"15 16 17 18 19"}
KITS=${ZKLOCK_PG_KITS:-../shared/pg}
# the outer make's flags must not reach the inner ones
unset MAKEFLAGS MFLAGS MAKELEVEL

total_pass=0
total_fail=0
summary=()
start=$(date +%s)
for major in $MAJORS; do
    t0=$(date +%s)
    if [ "$major" = 15 ]; then
        pg_config=/usr/lib/postgresql/15/bin/pg_config
    elif ! pg_config=$(bash "$KITS/install.sh" "$major" | tail -n 1) ||
            [ ! -x "$pg_config" ]; then
        echo "matrix: installing PostgreSQL $major from $KITS failed" >&2
        summary+=("major $major: 0 passed, 1 failed (no PostgreSQL $major)")
        total_fail=$((total_fail + 1))
        continue
    fi
    echo "== PostgreSQL $major ($pg_config)"
    log=$(mktemp /tmp/zklock-matrix-$major.XXXXXX)
    make test PG_CONFIG="$pg_config" 2>&1 | tee "$log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    rm -f "$log"
    if [ -z "$line" ]; then
        line="0 passed, 1 failed"       # the run printed no count at all
    fi
    pass=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    fail=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    total_pass=$((total_pass + pass))
    total_fail=$((total_fail + fail))
    summary+=("major $major: $pass passed, $fail failed ($(( $(date +%s) - t0 )) s)")
done

echo
echo "== every major ($(( $(date +%s) - start )) s)"
for s in "${summary[@]}"; do
    echo "$s"
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
