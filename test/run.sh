#!/usr/bin/env bash
# `make test`: install missing packages, build and install the extension,
# build the unit tests, then run every suite with test/run_tests.py (pytest
# over test/, see test/conftest.py; in lanes side by side, then the
# timing-sensitive modules alone), whose last line is
# "N passed, N failed".  Exits non-zero if anything failed.  Arguments go
# to pytest, in one pytest process (bash test/run.sh -k holes).
set -uo pipefail

cd "$(dirname "$0")/.."
# the PostgreSQL to build against and test: `make test PG_CONFIG=...`
# (test/matrix.sh runs every supported major); Debian's 15 by default
PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
export PG_CONFIG
PYTHON=/usr/bin/python3          # Debian's python3: kazoo, psycopg2, pytest

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
if [ -n "${SANITIZE:-}" ] && [ "$SANITIZE" != 0 ]; then
    # `make test SANITIZE=1`: an ASan+UBSan build of the extension, seen
    # only by this run (test/sanitize.sh); the system's zklock.so and the
    # work tree's objects stay as they are.
    sanitize_dir=$(mktemp -d /tmp/zklock-sanitize-XXXXXX)
    if ! bash test/sanitize.sh "$sanitize_dir"; then
        failed+=(--failed-step build)
    fi
elif ! make PG_CONFIG="$PG_CONFIG"; then
    failed+=(--failed-step build)
elif ! "${SUDO[@]}" make PG_CONFIG="$PG_CONFIG" install; then
    failed+=(--failed-step install)
fi
if ! make -C test/unit; then
    failed+=(--failed-step unit)
fi

if [ -z "${sanitize_dir:-}" ]; then
    exec "$PYTHON" test/run_tests.py "${failed[@]}" "$@"
fi
if [ -f "$sanitize_dir/inside.sh" ]; then
    # a private mount namespace: the sanitizer build is mounted over
    # PostgreSQL's $libdir and extension directory for this run only
    "${SUDO[@]}" unshare --mount --propagation private -- \
        bash "$sanitize_dir/inside.sh" "$PYTHON" test/run_tests.py "${failed[@]}" "$@"
else
    "$PYTHON" test/run_tests.py "${failed[@]}" "$@"
fi
status=$?
# keep the sanitizer reports (if any), drop the build
rm -rf "$sanitize_dir/build" "$sanitize_dir/root" "$sanitize_dir/orig"
if [ -n "$(ls -A "$sanitize_dir/reports" 2>/dev/null)" ]; then
    echo "run.sh: sanitizer reports in $sanitize_dir/reports" >&2
    status=1
else
    rm -rf "$sanitize_dir"
fi
exit $status
