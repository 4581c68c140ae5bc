# idempotency — PGXS build.  Users type `make demo` and `make test`;
# `make install` / `make installcheck` work as for any PGXS extension.

EXTENSION   = idempotency
EXTVERSION  = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)
MODULE_big  = $(EXTENSION)
OBJS        = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))
DATA        = $(sort $(wildcard $(EXTENSION)--*.sql))

PG_CPPFLAGS = -I$(srcdir)/src
PG_CFLAGS   = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
# make test (development and CI) turns warnings into errors; a user's own
# build against newer headers or another compiler does not
ifdef IDEM_WERROR
PG_CFLAGS  += -Werror
endif

# pg_regress: sql/NAME.sql against expected/NAME.out
# pg_isolation_regress: test/specs/NAME.spec against test/expected/NAME.out
# The *_PRELOAD tests need a configured server: shared_preload_libraries =
# 'idempotency' (shared counters, wait_for_outcome, the settings known before
# the first call) or max_prepared_transactions > 0.  `make installcheck`
# leaves them out, so it passes against any server; regresscheck and
# isolationcheck (make test, on the preloaded server it starts) run them all.
REGRESS_PRELOAD   = prepared_transaction_guard stats wait_for_outcome
ISOLATION_PRELOAD = stats_messaging stats_waits wait_for_outcome
REGRESS_ALL    = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
ISOLATION_ALL  = $(patsubst test/specs/%.spec,%,$(sort $(wildcard test/specs/*.spec)))
REGRESS        = $(filter-out $(REGRESS_PRELOAD),$(REGRESS_ALL))
REGRESS_OPTS   = --load-extension=$(EXTENSION)
ISOLATION      = $(filter-out $(ISOLATION_PRELOAD),$(ISOLATION_ALL))
ISOLATION_OPTS = --inputdir=test --load-extension=$(EXTENSION)

PG_CONFIG ?= pg_config
# make demo, test, deb and dist install PostgreSQL first: on a machine that
# has no pg_config yet they run without PGXS (and without a word about it);
# the PGXS targets say what is missing
PGXS := $(shell command -v $(PG_CONFIG) >/dev/null 2>&1 && $(PG_CONFIG) --pgxs)
ifneq ($(PGXS),)
include $(PGXS)
else ifneq ($(filter-out test demo test-under-load bench dist deb,$(or $(MAKECMDGOALS),all)),)
$(error $(PG_CONFIG) not found: install the server headers (Debian: apt-get install postgresql-server-dev-15), or name one with PG_CONFIG=/path/to/pg_config; make demo and make test install them themselves)
endif

# every object depends on the shared headers (PGXS tracks no dependencies)
$(OBJS): $(wildcard src/*.h)

# The suites one at a time, every test of each, against the server named by
# PGHOST/PGPORT (scripts/test.sh starts one, preloaded); installcheck runs
# the first two together, without the *_PRELOAD tests.
.PHONY: regresscheck isolationcheck pgtapcheck
regresscheck:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS_ALL)
isolationcheck:
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(ISOLATION_ALL)
pgtapcheck:
	pg_prove --failures --dbname $(EXTENSION)_pgtap $(sort $(wildcard test/pgtap/*.sql))

# Crash, replica and pg_cron tests (PostgreSQL::Test::Cluster, shipped with
# the server headers).  Each test starts its own clusters, so this runs as
# a user that may run PostgreSQL (not root); TESTDIR is where they live.
TAP_TESTDIR ?= $(CURDIR)
.PHONY: tapcheck
tapcheck:
	rm -rf '$(TAP_TESTDIR)'/tmp_check && mkdir -p '$(TAP_TESTDIR)'/tmp_check
	TESTDIR='$(TAP_TESTDIR)' PATH="$(bindir):$$PATH" \
	PG_REGRESS='$(top_builddir)/src/test/regress/pg_regress' \
	$(PROVE) -I '$(top_builddir)/src/test/perl' $(PROVE_FLAGS) $(sort $(wildcard test/t/*.pl))

# The two user commands.  Each script installs what is missing, builds and
# installs the extension, runs a throwaway cluster and stops it on exit.
# They use Debian's PostgreSQL 15 unless PG_CONFIG names another server:
# make test PG_CONFIG=/opt/pg18/bin/pg_config
SERVER_ENV = $(if $(filter file,$(origin PG_CONFIG)),,PG_CONFIG='$(PG_CONFIG)')
.PHONY: test demo bench dist deb
test:
	$(SERVER_ENV) bash scripts/test.sh
demo:
	$(SERVER_ENV) bash scripts/demo.sh
# pg_regress and the isolation specs on a server whose clock libfaketime
# sets to midnights, leap days, a year's last second and daylight saving
# changes (scripts/test_clock.sh); make test runs it too
.PHONY: test-clock
test-clock:
	$(SERVER_ENV) bash scripts/test_clock.sh
# make test, then installcheck on a plain server, under a CPU hog
# (stress-ng); IDEM_LOAD_TEST_RUNS / IDEM_LOAD_INSTALLCHECK_RUNS repeat them
.PHONY: test-under-load
test-under-load:
	$(SERVER_ENV) bash scripts/under_load.sh
# The PGXN release of the committed tree: idempotency-VERSION.zip, its files
# under idempotency-VERSION/ with META.json at the root.  PGXN needs semantic
# versions: VERSION is default_version with ".0" appended (1.1 -> 1.1.0),
# and test/pgxn/meta_test.py checks that META.json says the same.
# DIST_DIR: where the archive goes (default: here).
DISTVERSION = $(EXTVERSION)$(if $(word 3,$(subst ., ,$(EXTVERSION))),,.0)
DIST_DIR ?= .
DIST_ZIP = $(DIST_DIR)/$(EXTENSION)-$(DISTVERSION).zip
# (scripts/dist.sh installs git and python3 if they are missing)
dist:
	bash scripts/dist.sh '$(DIST_ZIP)' '$(EXTENSION)-$(DISTVERSION)'
# The Debian packages postgresql-MAJOR-idempotency_VERSION_ARCH.deb, one per
# installed major, in build/deb (debhelper and pg_buildext; debian/)
deb:
	bash scripts/deb.sh
# bench parameters: make bench BENCH_ARGS="--runs 5 --duration 20"
bench:
	$(SERVER_ENV) bash scripts/bench.sh $(BENCH_ARGS)
