#!/bin/bash
# test/zk_reachable.sh PG_CONFIG
#
# Run before `make installcheck` (PGXS: pg_regress against the running
# server that PGHOST/PGPORT/PGUSER name, as pg_regress itself connects):
# every regression test takes a zklock lock, so without a ZooKeeper server
# at that server's zklock.hosts each would fail on its own after
# zklock.connect_timeout.  Say it once, and why, instead.
set -u
bindir=$("$1" --bindir)
hosts=$("$bindir/psql" -X -q -At -d postgres -c "LOAD 'zklock'" \
        -c "SHOW zklock.hosts" 2>&1) || {
    echo "make installcheck: cannot ask the server for zklock.hosts:" >&2
    echo "$hosts" >&2
    echo "(make install first, and point PGHOST/PGPORT/PGUSER at the server to test)" >&2
    exit 1
}
hosts=$(echo "$hosts" | tail -n 1)
IFS=',' read -ra list <<< "${hosts%%/*}"
for hp in "${list[@]}"; do
    host=${hp%:*}
    port=${hp##*:}
    [ "$host" = "$hp" ] && port=2181
    if timeout 2 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
        exit 0
    fi
done
echo "make installcheck: no ZooKeeper server of zklock.hosts = '$hosts' accepts connections" >&2
echo "(start one, see README \"Quick start\", or set zklock.hosts on the server under test)" >&2
exit 1
