#!/usr/bin/env bash
# Install the Debian 12 packages zklock's build and tests need, but only
# those that are missing.  `apt-get update` runs at most once, and only
# when something has to be installed.  Runs as root, or through sudo.
set -euo pipefail

PACKAGES=(
    postgresql-15 postgresql-server-dev-15 postgresql-server-dev-all
    libzookeeper-mt-dev zookeeper libcurator-recipes-java
    libslf4j-java                        # slf4j-simple.jar: the test servers' log
    default-jdk-headless                 # javac: test_interop's Curator peer
    libipc-run-perl python3-kazoo python3-psycopg2
    python3-pytest python3-pytest-timeout   # the runner (test/conftest.py)
    gnuplot-nox clang valgrind debhelper make gcc
    build-essential                      # g++, libc6-dev, dpkg-dev: test_package's
                                         # dpkg-buildpackage checks Build-Depends on it
    git                                  # test_package: copy + clean-tree check
    nftables iproute2                    # test_nemesis: network namespaces, links, cuts
    libclang-rt-14-dev                   # make fuzz: libFuzzer + clang's ASan runtime
    libasan8 libubsan1                   # make test SANITIZE=1: gcc's sanitizer runtimes
    pgbouncer                            # test_pooler: started by the test itself,
                                         # never as Debian's service (below)
    postgresql-15-cron                   # test_cron: pg_cron (Debian has it for 15 only;
                                         # under the other majors test_cron is skipped)
    stunnel4                             # test_tls: the TLS tunnel of the recipe in
                                         # doc/04-operations.md, started by the test
                                         # itself (no /etc/stunnel/*.conf: no service)
)

installed() {
    dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

missing=()
for p in "${PACKAGES[@]}"; do
    installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PACKAGES[@]} packages already installed"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2
    exit 1
fi

# Debian's pgbouncer package starts a system-wide pgbouncer (port 6432)
# and enables it at boot.  The tests run their own on free ports; a
# service nobody configured must not be left running.  While installing,
# a policy-rc.d (the Debian way to keep maintainer scripts from starting
# services, honoured by invoke-rc.d and deb-systemd-invoke) refuses to
# start it -- unless the machine has its own policy-rc.d, which is left
# alone (containers usually have one that refuses every start).
new_pgbouncer=false
for p in "${missing[@]}"; do
    [ "$p" = pgbouncer ] && new_pgbouncer=true
done
POLICY=/usr/sbin/policy-rc.d
own_policy=false
if $new_pgbouncer && [ ! -e "$POLICY" ]; then
    trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
    printf '#!/bin/sh\n# install-deps.sh: no pgbouncer service\n[ "$1" = pgbouncer ] && exit 101\nexit 0\n' |
        "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    own_policy=true
fi

echo "install-deps: installing ${missing[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"

if $own_policy; then
    "${SUDO[@]}" rm -f "$POLICY"
    trap - EXIT
fi
if $new_pgbouncer; then
    # not at boot either; and stopped, should another policy have let
    # the package start it
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        "${SUDO[@]}" systemctl disable --now pgbouncer.service pgbouncer.socket \
            >/dev/null 2>&1 || true
    else
        # (where systemctl is installed, update-rc.d also drops the
        # systemd unit's links, for a later boot with systemd)
        "${SUDO[@]}" update-rc.d pgbouncer disable >/dev/null 2>&1 || true
        "${SUDO[@]}" invoke-rc.d pgbouncer stop >/dev/null 2>&1 || true
    fi
fi
