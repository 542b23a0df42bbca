#!/usr/bin/env bash
# `make test`: install missing packages, build and install the extension,
# build the unit tests, then run every suite with test/run_tests.py, whose
# last line is "N passed, N failed".  Exits non-zero if anything failed.
set -uo pipefail

cd "$(dirname "$0")/.."
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PYTHON=/usr/bin/python3          # Debian's python3, which has kazoo/psycopg2

if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi

# The outer `make test` must not leak its flags into the builds below.
unset MAKEFLAGS MFLAGS MAKELEVEL

fail() {   # a step that leaves nothing to test: still end with the count
    echo "run.sh: $1 failed" >&2
    echo "0 passed, 1 failed"
    exit 1
}

bash test/install-deps.sh || fail "installing the packages (test/install-deps.sh)"

failed=()
if ! make PG_CONFIG="$PG_CONFIG"; then
    failed+=(--failed-step build)
elif ! "${SUDO[@]}" make PG_CONFIG="$PG_CONFIG" install; then
    failed+=(--failed-step install)
fi
if ! make -C test/unit; then
    failed+=(--failed-step unit)
fi

exec "$PYTHON" test/run_tests.py "${failed[@]}" "$@"
