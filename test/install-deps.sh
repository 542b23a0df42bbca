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

echo "install-deps: installing ${missing[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
