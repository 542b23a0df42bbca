#!/usr/bin/env bash
# `make demo`: install the Debian packages that are missing, build and
# install the extension, then play the narrated scenario (demo/demo.py).
# KEEP=1 leaves ZooKeeper and both PostgreSQL clusters running.
set -euo pipefail

cd "$(dirname "$0")/.."
# `make demo PG_CONFIG=...` plays it on another major; Debian's 15 by default
PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
export PG_CONFIG                 # test/lib/harness.py takes its binaries from it
PYTHON=/usr/bin/python3          # Debian's python3, which has kazoo/psycopg2

if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi

# The outer `make demo` must not leak its flags into the builds below.
unset MAKEFLAGS MFLAGS MAKELEVEL

echo "== preparing: Debian packages, build, install"
bash test/install-deps.sh

log=$(mktemp /tmp/zklock-demo-build.XXXXXX.log)
if ! { make PG_CONFIG="$PG_CONFIG" && "${SUDO[@]}" make PG_CONFIG="$PG_CONFIG" install; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "demo: building or installing the extension failed (full log: $log)" >&2
    exit 1
fi
rm -f "$log"
echo "   built and installed zklock $(sed -n "s/^default_version = '\(.*\)'/\1/p" zklock.control) into $("$PG_CONFIG" --pkglibdir)"

exec "$PYTHON" demo/demo.py
