# zklock: ZooKeeper distributed locks from SQL (PGXS build)

EXTENSION = zklock
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" zklock.control)
MODULE_big = zklock
OBJS = src/zklock.o src/session.o src/recipe.o src/locktable.o src/inspect.o src/functions.o
DATA = sql/zklock--$(EXTVERSION).sql

# pg_regress suites (sql/<name>.sql, expected/<name>.out); run by make test
# against the throwaway cluster and ZooKeeper that test/run_tests.py starts.
REGRESS = zklock_basic zklock_scopes zklock_input zklock_guc

PG_CPPFLAGS = -DTHREADED -I/usr/include/zookeeper -Isrc
SHLIB_LINK = -lzookeeper_mt -lpthread

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
endif

# PGXS tracks no header dependencies: rebuild everything when one changes.
$(OBJS): $(wildcard src/*.h)

.PHONY: test unit regress-list

# The one command: installs missing Debian packages, builds, installs,
# starts ZooKeeper and PostgreSQL on loopback, runs every suite, stops
# everything and ends with "N passed, N failed".
test:
	bash test/run.sh

unit:
	$(MAKE) -C test/unit

regress-list:
	@echo $(REGRESS)
