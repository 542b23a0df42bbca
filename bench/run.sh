#!/usr/bin/env bash
# `make bench`: install missing packages, build and install the extension,
# build the peers (bench/rawzk.c, bench/CuratorBench.java) into bench/build,
# then run bench/run_bench.py, which starts its own ZooKeeper and PostgreSQL,
# prints the table and writes bench/results.md and bench/handoffs.png.
#
#   make bench                  full run: 3-server ensemble, 5 rounds (~22 min on 2 cores)
#   make bench QUICK=1          1 round, short measurements
#   make bench ZK_SERVERS=1     standalone ZooKeeper (default: 3 servers)
#   make bench ZK_FSYNC=0       ZooKeeper with forceSync=no (default: yes)
#   BENCH_RUNS=5 BENCH_SECONDS=6 make bench
#   make bench BENCH_ONLY=latency,semaphore BENCH_OUT=/tmp/b
#                               some parts only, results written elsewhere
#   BENCH_NO_INSTALL=1 bash bench/run.sh --quick --only contended --out /tmp/b
#                               skip building and installing the extension
#                               (measure whatever is installed); only the
#                               peers are built
#   PG_CONFIG=/opt/zklock-pg/17/bin/pg_config bash bench/run.sh --only waitcost --out /tmp/w
#                               another PostgreSQL (default: Debian's 15): the
#                               extension is built and installed for it, and
#                               the bench's clusters and pgbench are its
set -euo pipefail

cd "$(dirname "$0")/.."
PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
export PG_CONFIG
PYTHON=/usr/bin/python3

if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi
unset MAKEFLAGS MFLAGS MAKELEVEL

if [ -z "${BENCH_NO_INSTALL:-}" ] || [ "${BENCH_NO_INSTALL}" = 0 ]; then
    bash test/install-deps.sh

    # The extension, as make test builds it.  A build that fails (someone
    # mid-edit in a shared tree) is retried a few times before giving up.
    for try in 1 2 3 4 5; do
        if make PG_CONFIG="$PG_CONFIG" && "${SUDO[@]}" make PG_CONFIG="$PG_CONFIG" install; then
            break
        fi
        if [ "$try" -eq 5 ]; then
            echo "bench/run.sh: building/installing the extension failed" >&2
            exit 1
        fi
        echo "bench/run.sh: build failed, retrying in 10 s" >&2
        sleep 10
    done
else
    echo "bench/run.sh: BENCH_NO_INSTALL set: measuring the installed extension" >&2
fi

mkdir -p bench/build
cc -O2 -Wall -DTHREADED -I/usr/include/zookeeper -o bench/build/rawzk \
    bench/rawzk.c -lzookeeper_mt -lpthread
javac -nowarn -d bench/build -cp /usr/share/java/curator-recipes.jar \
    bench/CuratorBench.java

exec "$PYTHON" bench/run_bench.py "$@"
