#!/usr/bin/env bash
# test/sanitize.sh STAGE
#
# `make test SANITIZE=1` (test/run.sh) calls this instead of the regular
# build and install.  It builds zklock with AddressSanitizer and
# UndefinedBehaviorSanitizer (gcc) from a copy of the work tree (the work
# tree's objects are not touched) and prepares STAGE/inside.sh, which
# test/run.sh runs in a private mount namespace (unshare --mount, as
# root): there the sanitizer build is bind-mounted over PostgreSQL's
# $libdir and extension directory, so the test clusters load it at the
# usual paths while every other process on the machine (other test runs
# included) keeps seeing the system's files.  Whole directories are
# mounted, not the files: a `make install` elsewhere unlinks and recreates
# zklock.so, which would silently detach a file mount.
#
# PostgreSQL itself is not instrumented: the ASan runtime must be the first
# library of the process, so the postmaster is started with LD_PRELOAD
# (test/lib/harness.py passes ZKLOCK_PG_ENV to pg_ctl), together with a
# shim that works around a start-up hang (asan_first.c below).  Leak
# detection is off (PostgreSQL frees by memory context and exits without
# freeing), the first error ends the process (the postmaster then reports
# the backend's exit and restarts, which the tests notice), and reports go
# to files STAGE/reports/{asan,ubsan}.<pid> ($ZKLOCK_SANITIZER_LOG_DIR).
set -euo pipefail

stage=${1:?usage: test/sanitize.sh STAGE_DIRECTORY}
cd "$(dirname "$0")/.."
src=$(pwd)
PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
bindir=$("$PG_CONFIG" --bindir)
pkglibdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension

SAN_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -g -O1"
asan_rt=$(readlink -f "$(gcc -print-file-name=libasan.so)")
[ -f "$asan_rt" ] || { echo "sanitize.sh: gcc's libasan not found (apt-get install libasan8)" >&2; exit 1; }

mkdir -p "$stage"
chmod 755 "$stage"
build=$stage/build
root=$stage/root
reports=$stage/reports
rm -rf "$build" "$root"
mkdir -p "$build" "$reports"
chmod 1777 "$reports"            # the postgres OS user writes the reports

echo "sanitize.sh: building zklock with $SAN_FLAGS in $build" >&2
tar -C "$src" --exclude=./.git --exclude='*.o' --exclude='*.so' \
    --exclude='*.bc' --exclude=./test/fuzz/build -cf - . | tar -C "$build" -xf -
make -C "$build" -s PG_CONFIG="$PG_CONFIG" with_llvm=no COPT="$SAN_FLAGS"
if ! readelf -d "$build/zklock.so" | grep libasan >/dev/null; then
    echo "sanitize.sh: $build/zklock.so is not linked with libasan" >&2
    exit 1
fi
make -C "$build" -s PG_CONFIG="$PG_CONFIG" with_llvm=no DESTDIR="$root" install

# The rest of the two directories: links to the system's files, which
# inside the namespace are reached through STAGE/orig (the system
# directories, bind-mounted there before the staged ones cover them).
orig=$stage/orig
link_missing() {        # link_missing SYSTEM_DIR
    mkdir -p "$root$1" "$orig$1"
    for f in "$1"/* "$1"/.[!.]*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        [ -e "$root$1/$(basename "$f")" ] ||
            ln -s "$orig$1/$(basename "$f")" "$root$1/"
    done
}
link_missing "$pkglibdir"
link_missing "$extdir"
chmod -R a+rX "$stage"

# PostgreSQL is not instrumented, so ASan initialises lazily, at the first
# malloc.  With Debian 12's libraries that is inside libgpg-error's
# constructor, in bindtextdomain() with glibc's _nl_state_lock held; ASan's
# initialisation then calls dlerror() -> dcgettext(), which takes the same
# lock again, corrupts it, and the process hangs at the next gettext call
# (postgres -V never returns).  This shim, preloaded right after the
# runtime, initialises ASan at the first bindtextdomain() call, before the
# lock is taken.
cat > "$stage/asan_first.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

extern void __asan_init(void);

char *
bindtextdomain(const char *domain, const char *dir)
{
	static char *(*real) (const char *, const char *);

	__asan_init();
	if (real == NULL)
		real = (char *(*) (const char *, const char *))
			dlsym(RTLD_NEXT, "bindtextdomain");
	return real(domain, dir);
}
EOF
gcc -shared -fPIC -O1 -o "$stage/asan_first.so" "$stage/asan_first.c"
preload="$asan_rt:$stage/asan_first.so"
if ! timeout 20 env LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0 \
        "$bindir/postgres" -V >/dev/null; then
    echo "sanitize.sh: postgres -V fails (or hangs) with the ASan runtime preloaded" >&2
    exit 1
fi

asan_opts="detect_leaks=0:halt_on_error=1:abort_on_error=0:disable_coredump=1"
asan_opts+=":quarantine_size_mb=64:malloc_context_size=20"
asan_opts+=":allocator_may_return_null=1:detect_stack_use_after_return=0"
asan_opts+=":log_path=$reports/asan"
ubsan_opts="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"

# run inside the mount namespace: bash STAGE/inside.sh COMMAND [ARGS...]
cat > "$stage/inside.sh" <<EOF
# written by test/sanitize.sh; run by test/run.sh under unshare --mount
mount --make-rprivate / 2>/dev/null || true
if ! mount --bind '$pkglibdir' '$orig$pkglibdir' ||
   ! mount --bind '$extdir' '$orig$extdir' ||
   ! mount --bind '$root$pkglibdir' '$pkglibdir' ||
   ! mount --bind '$root$extdir' '$extdir'; then
    echo "sanitize: cannot bind-mount the sanitizer build (needs root)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
if ! cmp -s '$build/zklock.so' '$pkglibdir/zklock.so'; then
    echo "sanitize: $pkglibdir/zklock.so is not the sanitizer build" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
export ZKLOCK_PG_ENV='LD_PRELOAD=$preload ASAN_OPTIONS=$asan_opts UBSAN_OPTIONS=$ubsan_opts'
export ZKLOCK_SANITIZER_LOG_DIR='$reports'
exec "\$@"
EOF
echo "sanitize.sh: ready ($stage/inside.sh)" >&2
