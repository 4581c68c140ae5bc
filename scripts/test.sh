#!/usr/bin/env bash
# make test: build, install, start a throwaway PostgreSQL cluster, run
# pg_regress, the isolation specs (with the direct path, then with planned
# SQL only), the HTTP example, the pgTAP and TAP suites, interrupted runs,
# stop the cluster.
# Ends with "N passed, N failed"; exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh

ensure_packages "${IDEM_PACKAGES[@]}" pgbouncer python3-psycopg python3-psycopg-pool || exit 1
# IDEM_TEST_HOLD=FILE (scripts/interrupt_check.sh, inside make test, which
# has built and installed): start the servers, write FILE, wait for a signal
[ -n "${IDEM_TEST_HOLD:-}" ] || build_and_install || exit 1
# preloaded and with prepared transactions (cluster.sh sets them), for the
# tests in the Makefile's REGRESS_PRELOAD and ISOLATION_PRELOAD
cluster_start "shared_preload_libraries = 'idempotency'" || exit 1

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

# pgbouncer_start DIR PORT: a transaction-pooling PgBouncer in DIR, as the
# cluster's OS user, on loopback PORT, for database idempotency_http
# (idempotency_http_one: a pool of one server connection)
pgbouncer_start() {
    local dir=$1 port=$2
    mkdir -p "$dir"
    printf '%s\n' '[databases]' \
        "idempotency_http = host=$PGHOST port=$PGPORT dbname=idempotency_http user=postgres" \
        "idempotency_http_one = host=$PGHOST port=$PGPORT dbname=idempotency_http user=postgres pool_size=1" \
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
    pgbouncer_start "$dir" "$bouncer" || { failed=$((failed + 1)); return; }
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
    pgbouncer_start "$CLUSTER_DIR/pgbouncer" "${IDEM_PGBOUNCER_PORT:-16432}" || exit 1
    printf '%s\n' "pgdata $CLUSTER_DIR/data" "pgdata $(cat "$dir/node")" \
        "pidfile $CLUSTER_DIR/pgbouncer/pgbouncer.pid" >"$ready.part"
    mv "$ready.part" "$ready"
    say "holding the servers listed in $ready until interrupted"
    while :; do sleep 3600 & wait $!; done
}
[ -n "${IDEM_TEST_HOLD:-}" ] && hold_until_interrupted "$IDEM_TEST_HOLD"

run_regress_suite "pg_regress" regresscheck regression.diffs
run_regress_suite "isolation specs" isolationcheck output_iso/regression.diffs
# the same specs and expected outputs with the planned-SQL path: the direct
# heap/index path must answer exactly as the SQL it stands in for
PGOPTIONS="-c idempotency.direct_access=off" \
    run_regress_suite "isolation specs, idempotency.direct_access = off" isolationcheck output_iso/regression.diffs
run_http_suite
run_pgtap_suite
run_tap_suite
run_interrupt_suite
rm -f "$log"

if [ "$failed" -ne 0 ]; then
    say "server log (last 40 lines):"
    tail -n 40 "$CLUSTER_DIR/server.log" >&2
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
