# zklock: ZooKeeper distributed locks from SQL (PGXS build)

EXTENSION = zklock
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" zklock.control)
MODULE_big = zklock
# src/<module>/: doc/08-development.md, "Architecture"
OBJS = src/zklock.o src/guccheck.o \
	src/session/auth.o src/session/session.o src/session/request.o \
	src/session/multi.o src/session/heldread.o \
	src/session/cleanup.o src/session/watch.o src/session/nudge.o \
	src/session/wait.o src/session/threads.o src/session/hosts.o \
	src/session/expiry.o src/session/status.o src/session/log.o \
	src/session/cancel.o src/session/cursessions.o src/session/ensemble.o \
	src/session/hostslot.o \
	src/recipe/recipe.o src/recipe/waitgraph.o src/recipe/revokeform.o \
	src/recipe/statevict.o src/recipe/connfail.o src/recipe/ensconf.o \
	src/deadlock/deadlock.o src/deadlock/waitsearch.o \
	src/deadlock/waitrecord.o \
	src/acquire/acquire.o src/acquire/parents.o src/acquire/semaphore.o \
	src/acquire/lockset.o \
	src/xact/commitcheck.o src/xact/locktable.o src/xact/lostreason.o \
	src/xact/lockrequest.o src/xact/callorder.o src/xact/lookonly.o \
	src/xact/failfast.o src/xact/precommit.o \
	src/monitor/showtext.o src/monitor/stats.o src/monitor/stats_shmem.o \
	src/monitor/stats_pgstat.o src/monitor/waitlog.o \
	src/monitor/curwaits.o src/monitor/version.o \
	src/sql/inspect.o src/sql/revoke.o src/sql/functions.o
# every install and update script: sql/zklock--<v>.sql, sql/zklock--<a>--<b>.sql
DATA = $(wildcard sql/zklock--*.sql)

# pg_regress suites (sql/<name>.sql, expected/<name>.out); run by make test
# against the throwaway cluster and ZooKeeper that the test run starts
# (test/test_regress.py).
REGRESS = zklock_basic zklock_scopes zklock_input zklock_guc

# the library knows its own version (zk_library, view zk_version): that of
# zklock.control it was built with
PG_CPPFLAGS = -DTHREADED -I/usr/include/zookeeper -Isrc \
	-DZKLOCK_LIBRARY_VERSION='"$(EXTVERSION)"'
# a local variable changed inside PG_TRY and read after it must be volatile
PG_CFLAGS = -Wclobbered -Werror=clobbered
SHLIB_LINK = -lzookeeper_mt -lpthread

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)

# make installcheck (PGXS: pg_regress against the running server) needs a
# ZooKeeper server at that server's zklock.hosts: checked once, up front
installcheck: installcheck-zookeeper
.PHONY: installcheck-zookeeper
installcheck-zookeeper:
	@test/zk_reachable.sh "$(PG_CONFIG)"
endif

# PGXS tracks no header dependencies: rebuild everything when one changes.
$(OBJS): $(wildcard src/*.h src/*/*.h)
# nor the version passed to the compiler: version.o is built again when
# EXTVERSION changes (zklock.control, or EXTVERSION=... on the command line)
VERSION_STAMP := .built-with-version
ifneq ($(shell cat $(VERSION_STAMP) 2>/dev/null),$(EXTVERSION))
$(shell echo '$(EXTVERSION)' > $(VERSION_STAMP))
endif
src/monitor/version.o: $(VERSION_STAMP)

# Objects built against one PostgreSQL major must never be linked for
# another: the tree remembers the pg_config of its last build, and a build
# with another one starts from clean objects.
PG_STAMP := .built-with-pg_config
ifneq ($(PGXS),)
ifneq ($(shell cat $(PG_STAMP) 2>/dev/null),$(PG_CONFIG))
$(shell rm -f $(OBJS) $(OBJS:.o=.bc) $(MODULE_big).so; echo '$(PG_CONFIG)' > $(PG_STAMP))
endif
endif

.PHONY: test test-matrix unit regress-list

# The one command: installs missing Debian packages, builds, installs,
# starts ZooKeeper and PostgreSQL on loopback, runs every suite, stops
# everything and ends with "N passed, N failed".
# `make test SANITIZE=1` (as root): the same with the extension built with
# AddressSanitizer + UndefinedBehaviorSanitizer, seen only by this run (a
# private mount namespace covers $libdir; the system install is left
# alone), the ASan runtime preloaded into the test clusters' postmasters;
# reports fail the run (test/sanitize.sh).
# The suites run in 4 pytest processes side by side, then the
# timing-sensitive ones alone (test/run_tests.py); `make test LANES=1`
# runs them all in one, one after the other.
test:
	SANITIZE="$(SANITIZE)" PG_CONFIG="$(PG_CONFIG)" \
	ZKLOCK_TEST_LANES="$(LANES)" bash test/run.sh

# `make test` against every supported major (15, 16, 17, 18, 19), one
# after the other; the last line sums them: "N passed, N failed".
# MAJORS="15 18" for some.  16-19 come from the kits in ../shared/pg (19
# from its beta kit until a release kit is there; test/matrix.sh).
test-matrix:
	MAJORS="$(MAJORS)" bash test/matrix.sh

unit:
	$(MAKE) -C test/unit

regress-list:
	@echo $(REGRESS)

# The other command: installs missing Debian packages, builds, installs,
# starts a 3-server ZooKeeper ensemble and two PostgreSQL clusters on
# loopback and plays a narrated scenario (demo/demo.py), then stops them;
# `make demo KEEP=1` leaves them running and prints how to connect.
.PHONY: demo
demo:
	@KEEP="$(KEEP)" PG_CONFIG="$(PG_CONFIG)" bash demo/run.sh

# Fuzzing of the pure recipe code (resource-name encoder, child-name
# parser, ordering, predecessor choice) with libFuzzer, ASan and UBSan;
# needs clang.  Not part of `make test`, which replays the corpus
# (test/fuzz/corpus, by test/unit/test_corpus).  `make fuzz
# FUZZ_SECONDS=600` fuzzes each target longer (default 180 s each);
# `make -C test/fuzz merge` folds what was found into the corpus.
.PHONY: fuzz
fuzz:
	$(MAKE) -C test/fuzz run

# Performance against the peers and the protocol's bound (issues 6, 18):
# installs missing packages, builds and installs the extension, builds
# bench/rawzk.c and bench/CuratorBench.java, starts its own 3-server
# ZooKeeper ensemble (fsync on) and PostgreSQL, measures zklock, rawzk
# recipe (zklock's protocol in C), Curator and kazoo side by side in 5
# interleaved rounds (uncontended, contended N = 2..64, handoff latency,
# semaphores, herd, many locks, arrays, memory, statistics, tail, the
# cost of waiting), prints the targets of issue 18 and writes
# bench/results.md and bench/handoffs.png.  ~22 min
# on 2 cores (up to 30 on a loaded host); QUICK=1: 1 round, short; ZK_SERVERS=1 for
# standalone; ZK_FSYNC=0 for forceSync=no; BENCH_ONLY=latency,semaphore
# some parts (BENCH_WAITCOST=full: the waitcost part's whole grid);
# BENCH_OUT=dir writes elsewhere; BENCH_NO_INSTALL=1 measures
# the installed extension without building or installing it.
.PHONY: bench
bench:
	QUICK="$(QUICK)" ZK_SERVERS="$(ZK_SERVERS)" ZK_FSYNC="$(ZK_FSYNC)" \
	BENCH_ONLY="$(BENCH_ONLY)" BENCH_OUT="$(BENCH_OUT)" \
	BENCH_NO_INSTALL="$(BENCH_NO_INSTALL)" bash bench/run.sh
