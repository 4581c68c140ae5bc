#!/usr/bin/env bash
# make test: build, install, start a throwaway PostgreSQL cluster, run
# pg_regress, the isolation specs (with the direct path, then with planned
# SQL only), both again at adversarial instants of the clock
# (scripts/test_clock.sh), the HTTP example, the Java library, the
# exporter queries in postgres_exporter, META.json and the PGXN archive,
# the pgTAP and TAP suites, interrupted runs, the client packages (the
# Node.js and Python outboxes against a private RabbitMQ), and last the
# Debian package (built, installed, tested, removed); stop the cluster.
# Ends with "N passed, N failed"; exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh
. scripts/rabbitmq.sh

ensure_packages "${IDEM_PACKAGES[@]}" libfaketime pgbouncer python3-psycopg python3-psycopg-pool \
    prometheus-postgres-exporter prometheus "${JAVA_PACKAGES[@]}" || exit 1
# IDEM_TEST_HOLD=FILE (scripts/interrupt_check.sh, inside make test, which
# has built and installed): start the servers, write FILE, wait for a signal
[ -n "${IDEM_TEST_HOLD:-}" ] || build_and_install || exit 1
# preloaded and with prepared transactions (cluster.sh sets them), for the
# tests in the Makefile's REGRESS_PRELOAD and ISOLATION_PRELOAD; on loopback
# TCP too, for the Java suite (pgJDBC has no Unix sockets without
# junixsocket, which Debian does not package)
cluster_start "shared_preload_libraries = 'idempotency'" "listen_addresses = '127.0.0.1'" || exit 1

passed=0
failed=0
log=$(mktemp)

# pg_regress and pg_isolation_regress print one line per test file:
# "test NAME ... ok" / "... FAILED" up to PostgreSQL 15, TAP's "ok N - NAME"
# / "not ok N - NAME" from 16 on.
run_regress_suite() {
    local name=$1 target=$2 diffs=$3 rc ok bad
    say "$name"
    make -s PG_CONFIG="$PG_CONFIG" "$target" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    ok=$(grep -cE '\.\.\. ok|^ok +[0-9]+ ' "$log")
    bad=$(grep -cE '\.\.\. (FAILED|failed)|^not ok +[0-9]+ ' "$log")
    # a suite that died before reporting any test counts as a failure
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
    passed=$((passed + ok)); failed=$((failed + bad))
    if [ -s "$diffs" ]; then say "differences ($diffs):"; cat "$diffs"; fi
}

# pgTAP: one assertion is one test.
run_pgtap_suite() {
    local total bad rc
    if [ ! -f "$("$PG_CONFIG" --sharedir)/extension/pgtap.control" ]; then
        say "pgTAP suites skipped: pgtap is not installed into the server of $PG_CONFIG"
        return
    fi
    say "pgTAP suites"
    createdb idempotency_pgtap && psql -q -X -v ON_ERROR_STOP=1 -d idempotency_pgtap \
        -c 'CREATE EXTENSION pgtap' -c 'CREATE EXTENSION idempotency' || { failed=$((failed + 1)); return; }
    make -s PG_CONFIG="$PG_CONFIG" pgtapcheck 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    total=$(sed -n 's/.*Tests=\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    bad=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
    total=${total:-0}
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
    passed=$((passed + total - (bad > total ? total : bad)))
    failed=$((failed + bad))
}

# TAP (PostgreSQL::Test::Cluster): the tests start clusters of their own,
# so they run as the cluster's OS user from a copy it owns: tap_dir makes
# it.  Their servers (pg_ctl starts each in a session of its own, out of
# reach of Ctrl-C) are stopped by the EXIT trap, or by the next run.
tap_dir() {
    local dir
    dir=$(mktemp -d /tmp/idempotency-tap.XXXXXX) || return 1
    run_register tree "$dir"
    cp -r Makefile README.md docs idempotency.control test examples "$dir/"
    [ "$(id -u)" -eq 0 ] && chown -R "$CLUSTER_OS_USER" "$dir"
    echo "$dir"
}

run_tap_suite() {
    local dir total bad rc
    if [ ! -f "$(dirname "$("$PG_CONFIG" --pgxs)")/../../src/test/perl/PostgreSQL/Test/Cluster.pm" ]; then
        say "TAP tests skipped: the server of $PG_CONFIG was built without TAP support (PostgreSQL::Test::Cluster)"
        return
    fi
    say "TAP tests (leases, pg_cron, crash, failover, model, dump/upgrade)"
    dir=$(tap_dir) || { failed=$((failed + 1)); return; }
    as_cluster_user make -s -C "$dir" PG_CONFIG="$PG_CONFIG" TAP_TESTDIR="$dir" tapcheck 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    total=$(sed -n 's/.*Tests=\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    bad=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
    total=${total:-0}
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
        bad=1
        say "TAP logs:"; tail -n 50 "$dir"/tmp_check/log/regress_log_* 2>/dev/null
    fi
    passed=$((passed + total - (bad > total ? total : bad)))
    failed=$((failed + bad))
    rm -rf "$dir"
}

# pgbouncer_start DIR PORT "NAME = host=... dbname=..."...: a transaction-
# pooling PgBouncer for those databases on a private loopback port, run as
# the cluster's OS user from DIR, stopped with the cluster (or by
# server_stop DIR/pgbouncer.pid).
pgbouncer_start() {
    local dir=$1 port=$2
    shift 2
    mkdir -p "$dir"
    printf '%s\n' '[databases]' "$@" \
        '[pgbouncer]' 'listen_addr = 127.0.0.1' "listen_port = $port" 'unix_socket_dir =' \
        'auth_type = trust' "auth_file = $dir/users.txt" 'pool_mode = transaction' \
        'max_client_conn = 200' 'default_pool_size = 10' \
        "pidfile = $dir/pgbouncer.pid" "logfile = $dir/pgbouncer.log" >"$dir/pgbouncer.ini"
    echo '"postgres" ""' >"$dir/users.txt"
    [ "$(id -u)" -eq 0 ] && chown -R "$CLUSTER_OS_USER" "$dir"
    server_register "$dir/pgbouncer.pid" pgbouncer
    as_cluster_user pgbouncer -d "$dir/pgbouncer.ini" || { cat "$dir/pgbouncer.log" >&2; return 1; }
}

# The HTTP example (examples/http) driven for real, directly and through a
# transaction-pooling PgBouncer that runs as the cluster's OS user on a
# private loopback port; both stop when the suite ends.  Debian's python3,
# which has python3-psycopg, whatever python3 comes first in PATH.
run_http_suite() {
    local dir port=${IDEM_HTTP_PORT:-18080} bouncer=${IDEM_PGBOUNCER_PORT:-16432} ok bad
    say "HTTP example, directly and through PgBouncer (transaction pooling)"
    createdb idempotency_http && psql -q -X -d idempotency_http -c 'CREATE EXTENSION idempotency' \
        || { failed=$((failed + 1)); return; }
    dir=$CLUSTER_DIR/pgbouncer
    pgbouncer_start "$dir" "$bouncer" \
        "idempotency_http = host=$PGHOST port=$PGPORT dbname=idempotency_http user=postgres" \
        "idempotency_http_one = host=$PGHOST port=$PGPORT dbname=idempotency_http user=postgres pool_size=1" \
        || { failed=$((failed + 1)); return; }
    /usr/bin/python3 test/http/orders_service_test.py \
        "host=$PGHOST port=$PGPORT dbname=idempotency_http user=postgres" \
        "host=127.0.0.1 port=$bouncer dbname=idempotency_http user=postgres" "$port" 2>&1 | tee "$log"
    ok=$(grep -cE '^ok [0-9]+ ' "$log")
    bad=$(grep -cE '^not ok [0-9]+ ' "$log")
    # a run that died before its last line counts as a failure
    grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$log" || bad=$((bad + 1))
    passed=$((passed + ok)); failed=$((failed + bad))
    server_stop "$dir/pgbouncer.pid"
}

# The Spring library (clients/java): its JUnit 5 suite through Maven,
# offline against Debian's repository, on a database of its own.
run_java_suite() {
    local counts total bad errors skipped rc build
    say "Java: @Idempotent for Spring (clients/java, JUnit 5 through Maven)"
    createdb idempotency_java && psql -q -X -d idempotency_java -c 'CREATE EXTENSION idempotency' \
        || { failed=$((failed + 1)); return; }
    (cd clients/java && mvn -o -B -Dstyle.color=never -Dmaven.repo.local=/usr/share/maven-repo \
        -Didempotency.jdbcUrl="jdbc:postgresql://127.0.0.1:$PGPORT/idempotency_java?user=postgres" test) 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # surefire's last summary line: "Tests run: 9, Failures: 0, Errors: 0, Skipped: 0"
    counts=$(sed -n 's/^\[[A-Z]*\] Tests run: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\), Skipped: \([0-9]*\)$/\1 \2 \3 \4/p' "$log" | tail -n 1)
    read -r total bad errors skipped <<<"${counts:-0 0 0 0}"
    bad=$((bad + errors))
    # a build that died before reporting any test counts as a failure
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
    passed=$((passed + total - skipped - (bad > total ? total : bad)))
    failed=$((failed + bad))
    # the README's build command, run as printed: it must make the jar
    # (ReadmeTest, in the suite above, runs the README's Java blocks)
    build=$(sed -n '/^<!-- run by scripts\/test.sh -->$/,/^```$/{/^mvn /p}' clients/java/README.md)
    rm -f clients/java/target/idempotency-spring-*.jar
    if [ -n "$build" ] && (cd clients/java && bash -c "$build") >"$log" 2>&1 \
            && ls clients/java/target/idempotency-spring-*.jar >/dev/null 2>&1; then
        echo "ok - clients/java/README.md's build command makes the jar: $build"
        passed=$((passed + 1))
    else
        cat "$log"
        echo "not ok - clients/java/README.md's build command makes the jar: ${build:-(no command found)}"
        failed=$((failed + 1))
    fi
}

# examples/postgres_exporter_queries.yaml through Debian's
# prometheus-postgres-exporter on a private loopback port, scraped over
# HTTP after a scripted sequence (test/exporter/exporter_test.py); the
# exporter stops when the suite ends.
run_exporter_suite() {
    local port=${IDEM_EXPORTER_PORT:-19187} pidfile=$CLUSTER_DIR/exporter.pid ok bad
    say "postgres_exporter with examples/postgres_exporter_queries.yaml"
    # the exporter's role reads the counters as a member of pg_monitor only
    createdb idempotency_exporter && psql -q -X -d idempotency_exporter -c 'CREATE EXTENSION idempotency' \
        -c 'CREATE ROLE idempotency_exporter LOGIN IN ROLE pg_monitor' \
        || { failed=$((failed + 1)); return; }
    DATA_SOURCE_NAME="host=$PGHOST port=$PGPORT user=idempotency_exporter dbname=idempotency_exporter sslmode=disable" \
        prometheus-postgres-exporter --extend.query-path=examples/postgres_exporter_queries.yaml \
        --web.listen-address="127.0.0.1:$port" --disable-default-metrics --disable-settings-metrics \
        >"$CLUSTER_DIR/exporter.log" 2>&1 &
    echo $! >"$pidfile"
    server_register "$pidfile" prometheus-postgres-exporter
    /usr/bin/python3 test/exporter/exporter_test.py \
        "host=$PGHOST port=$PGPORT dbname=idempotency_exporter user=postgres" \
        "http://127.0.0.1:$port/metrics" 2>&1 | tee "$log"
    ok=$(grep -cE '^ok [0-9]+ ' "$log")
    bad=$(grep -cE '^not ok [0-9]+ ' "$log")
    # a run that died before its last line counts as a failure
    grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$log" || { bad=$((bad + 1)); cat "$CLUSTER_DIR/exporter.log" >&2; }
    passed=$((passed + ok)); failed=$((failed + bad))
    server_stop "$pidfile"
    # the alerting rules: the README shows the file, and they fire on these
    # metrics at the rates it states (promtool's unit tests)
    if sed -n '/^  ```yaml$/,/^  ```$/{/```/d;s/^  //;p}' README.md | diff - <(grep -v '^#' examples/prometheus_alerts.yaml) &&
        (cd test/exporter && promtool test rules alerts_test.yaml); then
        passed=$((passed + 1)); say "ok: README shows examples/prometheus_alerts.yaml, and its rules pass promtool test rules"
    else
        failed=$((failed + 1))
    fi
}

# META.json against the PGXN Meta Spec, and the archive of make dist when
# the tree is a git checkout (a copy of it, so the tree gets no archive)
run_pgxn_suite() {
    local dir archive=() ok bad
    say "PGXN: META.json and the make dist archive"
    dir=$(mktemp -d /tmp/idempotency-dist.XXXXXX)
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        make -s PG_CONFIG="$PG_CONFIG" DIST_DIR="$dir" dist >/dev/null 2>&1
        archive=("$dir"/*.zip)
    fi
    python3 test/pgxn/meta_test.py "${archive[@]}" 2>&1 | tee "$log"
    ok=$(grep -cE '^ok [0-9]+ ' "$log")
    bad=$(grep -cE '^not ok [0-9]+ ' "$log")
    grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$log" || bad=$((bad + 1))
    passed=$((passed + ok)); failed=$((failed + bad))
    rm -rf "$dir"
}

# What a first run on a fresh machine meets, each of which once printed an
# alarming line on a run that passed or broke a command as printed: the
# Makefile read before PostgreSQL is installed (make demo and make test
# install it), the cluster's programs started from a directory their user
# cannot enter (/root), and the file names in the documentation's commands
# against the control file's version (test/release/readme_versions_test.py)
run_fresh_machine_suite() {
    local goal dir ok bad
    say "a fresh machine: the Makefile without pg_config, servers started from /root, the documented file names"
    for goal in demo test deb dist; do
        if [ -z "$(make -n "$goal" PG_CONFIG=/nonexistent/pg_config 2>&1 >/dev/null)" ]; then
            passed=$((passed + 1)); say "ok: make $goal reads the Makefile without pg_config, and says nothing about it"
        else
            failed=$((failed + 1)); make -n "$goal" PG_CONFIG=/nonexistent/pg_config 2>&1 >/dev/null | sed 's/^/    /'
        fi
    done
    dir=$(mktemp -d)   # 0700: only its owner may enter
    (cd "$dir" && as_cluster_user "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" status) >"$log" 2>&1
    rmdir "$dir"
    if grep -q 'is running' "$log" && ! grep -qiE 'could not change directory|permission denied' "$log"; then
        passed=$((passed + 1)); say "ok: the cluster's programs, started from a directory their user cannot enter, say nothing about it"
    else
        failed=$((failed + 1)); sed 's/^/    /' "$log"
    fi
    python3 test/release/readme_versions_test.py 2>&1 | tee "$log"
    ok=$(grep -cE '^ok [0-9]+ ' "$log")
    bad=$(grep -cE '^not ok [0-9]+ ' "$log")
    grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$log" || bad=$((bad + 1))
    passed=$((passed + ok)); failed=$((failed + bad))
}

# The Debian package (make deb) from a copy of this checkout in a directory
# the postgres user cannot enter (mktemp -d, 0700, as /root or a private
# home), with the installcheck Debian's tooling runs during the build (a
# new server without shared_preload_libraries: make installcheck on a
# plain server); dpkg -i onto Debian's PostgreSQL, a new preloaded cluster
# that loads the packaged library, CREATE EXTENSION from the packaged files
# and make installcheck against them; then dpkg -r, and every file the
# package had is gone.  The package installs the paths make install did
# (this script holds the install lock): the suite runs last and installs
# the build again when it ends.
run_deb_suite() {
    local copy deb files=() f left=0 pkg="postgresql-$PG_MAJOR-idempotency"
    if [ "$PG_BINDIR" != "/usr/lib/postgresql/$PG_MAJOR/bin" ]; then
        say "Debian package suite skipped: $PG_CONFIG is not Debian's PostgreSQL"
        return
    fi
    say "Debian package: make deb from a directory only its owner may enter, dpkg -i, installcheck against the packaged files, dpkg -r"
    copy=$(mktemp -d /tmp/idempotency-deb-checkout.XXXXXX) || { failed=$((failed + 1)); return; }
    run_register tree "$copy"
    copy_checkout "$copy"
    if (cd "$copy" && make -s deb) >"$log" 2>&1; then
        passed=$((passed + 1))
        say "ok: make deb from a directory of mode $(stat -c %a "$copy"), its installcheck on a plain server included"
    else
        failed=$((failed + 1)); cat "$log"; return
    fi
    deb=$(ls "$copy"/build/deb/"${pkg}"_*.deb)
    if as_root dpkg -i "$deb" >"$log" 2>&1 && [ -z "$(dpkg --verify "$pkg")" ]; then
        passed=$((passed + 1))
        say "ok: $(basename "$deb") installed, its files unchanged on disk (dpkg --verify)"
    else
        failed=$((failed + 1)); cat "$log"; return
    fi
    mapfile -t files < <(dpkg -L "$pkg" | while read -r f; do [ -f "$f" ] && echo "$f"; done)
    # a server started now loads the packaged library
    cluster_stop
    cluster_start "shared_preload_libraries = 'idempotency'" || { failed=$((failed + 1)); return; }
    run_regress_suite "installcheck against $pkg" installcheck regression.diffs
    # the isolation specs' duplicates waited: the preloaded library counted
    # them, in the database the specs ran in (the counters are per database)
    if psql -X -q -At -d isolation_regression \
        -c 'SELECT waits > 0 AND wait_seconds_count >= waits FROM idempotency_stats' | grep -qx t; then
        passed=$((passed + 1)); say "ok: the packaged library, preloaded, counted the installcheck's waits"
    else
        failed=$((failed + 1))
    fi
    as_root dpkg -r "$pkg" >"$log" 2>&1 || { failed=$((failed + 1)); cat "$log"; }
    for f in "${files[@]}"; do
        [ -e "$f" ] && { say "left after dpkg -r: $f"; left=$((left + 1)); }
    done
    if [ "${#files[@]}" -gt 0 ] && [ "$left" -eq 0 ] &&
        [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != installed ]; then
        passed=$((passed + 1)); say "ok: dpkg -r removed all ${#files[@]} files of $pkg"
    else
        failed=$((failed + 1))
    fi
    # back to what build_and_install left for whatever runs after
    as_root make -s PG_CONFIG="$PG_CONFIG" install >/dev/null || failed=$((failed + 1))
    rm -rf "$copy"
}

# --- client packages (clients/node, clients/python) -----------------------

# clients_database DB PORT: a new database with the extension, and a
# PgBouncer for it on PORT (its directory: $CLUSTER_DIR/pgbouncer-DB)
clients_database() {
    createdb "$1" && psql -q -X -d "$1" -c 'CREATE EXTENSION idempotency' \
        && pgbouncer_start "$CLUSTER_DIR/pgbouncer-$1" "$2" "$1 = host=$PGHOST port=$PGPORT dbname=$1 user=postgres"
}

# count_node_summary RC: node --test's summary in $log ("# pass N", "# fail
# N") added to the counts; a runner that exited non-zero without reporting
# a failure counts one
count_node_summary() {
    local rc=$1 ok bad
    ok=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$log" | tail -n 1)
    bad=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$log" | tail -n 1)
    ok=${ok:-0}; bad=${bad:-0}
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
    passed=$((passed + ok)); failed=$((failed + bad))
}

# clients/node: npm ci from the committed lockfile, then node --test against
# the cluster directly and through PgBouncer; counts the runner's summary
# ("# pass N", "# fail N").
run_node_client_suite() {
    local db=idempotency_node bouncer=${IDEM_NODE_PGBOUNCER_PORT:-16434}
    say "clients/node (Express 5, Express 4, Fastify, NestJS on Express and on Fastify, Hono), directly and through PgBouncer"
    ensure_node || { failed=$((failed + 1)); return; }
    (cd clients/node && npm ci --no-audit --no-fund --loglevel=error) \
        && clients_database "$db" "$bouncer" \
        || { failed=$((failed + 1)); return; }
    (cd clients/node && IDEM_TEST_DSN="postgresql://postgres@/$db?host=$PGHOST&port=$PGPORT" \
        IDEM_TEST_POOLED_DSN="postgresql://postgres@127.0.0.1:$bouncer/$db" \
        node --test test/*.test.js) 2>&1 | tee "$log"
    count_node_summary "${PIPESTATUS[0]}"
    server_stop "$CLUSTER_DIR/pgbouncer-$db/pgbouncer.pid"
}

# The private RabbitMQ of the outbox suites (scripts/rabbitmq.sh, ports
# IDEM_RABBITMQ_PORT .. + 2, default 16436): started by the first suite that
# needs it, shared by the next, stopped after the last (outbox_broker_stop)
OUTBOX_BROKER_PORT=${IDEM_RABBITMQ_PORT:-16436}
OUTBOX_BROKER_UP=
outbox_broker_start() {
    [ -n "$OUTBOX_BROKER_UP" ] && return 0
    ensure_packages rabbitmq-server || return 1
    server_register "$CLUSTER_DIR/rabbitmq/rabbitmq.pid" beam.smp
    server_register "$CLUSTER_DIR/rabbitmq/epmd.pid" epmd
    rabbitmq_start "$CLUSTER_DIR/rabbitmq" "$OUTBOX_BROKER_PORT" \
        || { rabbitmq_stop "$CLUSTER_DIR/rabbitmq" "$OUTBOX_BROKER_PORT"; return 1; }
    OUTBOX_BROKER_UP=1
}
outbox_broker_stop() {
    [ -n "$OUTBOX_BROKER_UP" ] && rabbitmq_stop "$CLUSTER_DIR/rabbitmq" "$OUTBOX_BROKER_PORT"
    OUTBOX_BROKER_UP=
}

# clients/node's outbox relay and inbox consumer against the private
# RabbitMQ, which the suite's restart test stops and starts; counts the
# runner's summary as for the HTTP suite.
run_node_outbox_suite() {
    local db=idempotency_outbox port=$OUTBOX_BROKER_PORT dir=$CLUSTER_DIR/rabbitmq
    say "clients/node outbox relay and consumer against RabbitMQ (confirms, kill -9, broker restart, storm)"
    ensure_node || { failed=$((failed + 1)); return; }
    [ -d clients/node/node_modules/amqplib ] \
        || (cd clients/node && npm ci --no-audit --no-fund --loglevel=error) \
        || { failed=$((failed + 1)); return; }
    outbox_broker_start \
        && createdb "$db" && psql -q -X -d "$db" -c 'CREATE EXTENSION idempotency' \
        || { failed=$((failed + 1)); return; }
    (cd clients/node && IDEM_TEST_DSN="postgresql://postgres@/$db?host=$PGHOST&port=$PGPORT" \
        IDEM_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port" \
        IDEM_TEST_RABBITMQ_DIR="$dir" IDEM_TEST_RABBITMQ_PORT="$port" \
        node --test test/outbox/*.test.js) 2>&1 | tee "$log"
    count_node_summary "${PIPESTATUS[0]}"
}

# clients/python's outbox relay and inbox consumer (Debian's python3-pika)
# and its Celery decorator (python3-celery, a real worker) against the same
# RabbitMQ, which its restart test stops and starts; counts pytest's last
# line as for the HTTP suite.
run_python_outbox_suite() {
    local db=idempotency_outbox_python port=$OUTBOX_BROKER_PORT dir=$CLUSTER_DIR/rabbitmq ok bad rc
    say "clients/python outbox relay and consumer against RabbitMQ (confirms, kill -9, broker restart, storm)"
    ensure_packages python3-pika python3-celery python3-psycopg python3-psycopg-pool python3-pytest \
        && outbox_broker_start \
        && createdb "$db" && psql -q -X -d "$db" -c 'CREATE EXTENSION idempotency' \
        || { failed=$((failed + 1)); return; }
    (cd clients/python && IDEM_TEST_DSN="host=$PGHOST port=$PGPORT dbname=$db user=postgres" \
        IDEM_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/%2F" \
        IDEM_TEST_RABBITMQ_DIR="$dir" IDEM_TEST_RABBITMQ_PORT="$port" \
        /usr/bin/python3 -m pytest -p no:cacheprovider -q -rf tests/test_outbox.py) 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    ok=$(tail -n 1 "$log" | sed -n 's/.* \([0-9]*\) passed.*/\1/p; s/^\([0-9]*\) passed.*/\1/p' | head -n 1)
    bad=$(tail -n 1 "$log" | grep -oE '[0-9]+ (failed|error)' | awk '{s += $1} END {print s + 0}')
    ok=${ok:-0}
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
    passed=$((passed + ok)); failed=$((failed + bad))
}

# clients/python: pytest (Debian's python3, which has the packages) of the
# ASGI middleware under uvicorn and the Django middleware under gunicorn,
# the SQLAlchemy ones (FastAPI under uvicorn, Flask under gunicorn),
# directly and through PgBouncer, and of the README's install block (a
# venv: python3-venv, python3-setuptools, python3-wheel); counts pytest's
# last line.
run_python_client_suite() {
    local db=idempotency_python bouncer=${IDEM_PYTHON_PGBOUNCER_PORT:-16435} ok bad rc
    say "clients/python (Starlette and FastAPI under uvicorn, Django and Flask under gunicorn), directly and through PgBouncer"
    ensure_packages python3-psycopg python3-psycopg-pool python3-psycopg2 python3-starlette \
        python3-uvicorn python3-django python3-gunicorn python3-pytest python3-venv python3-setuptools python3-wheel \
        python3-sqlalchemy python3-fastapi python3-flask python3-flask-sqlalchemy python3-asyncpg \
        curl \
        && clients_database "$db" "$bouncer" \
        || { failed=$((failed + 1)); return; }
    (cd clients/python && IDEM_TEST_DSN="host=$PGHOST port=$PGPORT dbname=$db user=postgres" \
        IDEM_TEST_POOLED_DSN="host=127.0.0.1 port=$bouncer dbname=$db user=postgres" \
        IDEM_TEST_HTTP_PORT=${IDEM_PYTHON_HTTP_PORT:-18090} \
        /usr/bin/python3 -m pytest -p no:cacheprovider -q -rf tests) 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    ok=$(tail -n 1 "$log" | sed -n 's/.* \([0-9]*\) passed.*/\1/p; s/^\([0-9]*\) passed.*/\1/p' | head -n 1)
    bad=$(tail -n 1 "$log" | grep -oE '[0-9]+ (failed|error)' | awk '{s += $1} END {print s + 0}')
    ok=${ok:-0}
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
    passed=$((passed + ok)); failed=$((failed + bad))
    server_stop "$CLUSTER_DIR/pgbouncer-$db/pgbouncer.pid"
}
# --- end of client packages -----------------------------------------------

# pg_regress and the isolation specs on a cluster of their own whose clock
# libfaketime sets to half past midnight, the last half minute of a day,
# of February 28 and 29 of a leap year and of a year, and daylight saving
# changes in the sessions' zone (scripts/test_clock.sh, on a lock file of
# its own: this run holds the real one)
run_clock_suite() {
    local ok bad
    say "the clock: pg_regress and the isolation specs at adversarial instants (libfaketime)"
    IDEM_INSTALL_LOCK=$IDEM_LOCK.clock bash scripts/test_clock.sh --installed 2>&1 | tee "$log"
    ok=$(grep -cE '^ok [0-9]+ ' "$log")
    bad=$(grep -cE '^not ok [0-9]+ ' "$log")
    grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$log" || bad=$((bad + 1))
    passed=$((passed + ok)); failed=$((failed + bad))
}

# An interrupted run (SIGINT, SIGTERM, timeout -k 5, SIGKILL) leaves the
# install lock free and its servers stopped, or stopped by the next run,
# which starts at once (scripts/interrupt_check.sh: runs of this script
# with IDEM_TEST_HOLD, on a lock file of their own)
run_interrupt_suite() {
    local ok bad
    say "interrupted runs: the install lock and the servers they leave"
    bash scripts/interrupt_check.sh 2>&1 | tee "$log"
    ok=$(grep -cE '^ok [0-9]+ ' "$log")
    bad=$(grep -cE '^not ok [0-9]+ ' "$log")
    grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$log" || bad=$((bad + 1))
    passed=$((passed + ok)); failed=$((failed + bad))
}

# IDEM_TEST_HOLD: a run with a server of each kind running (the cluster, a
# TAP test's node, PgBouncer), listed in FILE, waiting to be interrupted
hold_until_interrupted() {
    local ready=$1 dir pgxs
    dir=$(tap_dir) || exit 1
    pgxs=$(dirname "$("$PG_CONFIG" --pgxs)")/../..
    as_cluster_user env TESTDIR="$dir" PATH="$PG_BINDIR:$PATH" \
        PG_REGRESS="$pgxs/src/test/regress/pg_regress" \
        perl -I "$pgxs/src/test/perl" "$dir/test/interrupt/hold_node.pl" "$dir/node" &
    until [ -s "$dir/node" ]; do
        kill -0 $! 2>/dev/null || { say "the TAP node did not start"; exit 1; }
        sleep 0.1
    done
    pgbouncer_start "$CLUSTER_DIR/pgbouncer" "${IDEM_PGBOUNCER_PORT:-16432}" \
        "idempotency_http = host=$PGHOST port=$PGPORT dbname=idempotency_http user=postgres" || exit 1
    printf '%s\n' "pgdata $CLUSTER_DIR/data" "pgdata $(cat "$dir/node")" \
        "pidfile $CLUSTER_DIR/pgbouncer/pgbouncer.pid" >"$ready.part"
    mv "$ready.part" "$ready"
    say "holding the servers listed in $ready until interrupted"
    # a waiter that ends with this shell (a background sleep would ignore
    # Ctrl-C and outlive it); wait returns on the signal, and the trap runs
    tail --pid=$$ -f /dev/null &
    wait $!
}
[ -n "${IDEM_TEST_HOLD:-}" ] && hold_until_interrupted "$IDEM_TEST_HOLD"

run_regress_suite "pg_regress" regresscheck regression.diffs
run_regress_suite "isolation specs" isolationcheck output_iso/regression.diffs
# the same specs and expected outputs with the planned-SQL path: the direct
# heap/index path must answer exactly as the SQL it stands in for
PGOPTIONS="-c idempotency.direct_access=off" \
    run_regress_suite "isolation specs, idempotency.direct_access = off" isolationcheck output_iso/regression.diffs
run_clock_suite
run_http_suite
run_java_suite
run_exporter_suite
run_pgxn_suite
run_fresh_machine_suite
run_node_client_suite
run_node_outbox_suite
run_python_outbox_suite
outbox_broker_stop
run_python_client_suite
run_pgtap_suite
run_tap_suite
run_interrupt_suite
# last: it restarts the cluster and swaps the installed files
run_deb_suite
rm -f "$log"

if [ "$failed" -ne 0 ]; then
    say "server log (last 40 lines):"
    tail -n 40 "$CLUSTER_DIR/server.log" >&2
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
