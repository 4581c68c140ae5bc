#!/usr/bin/env bash
# make demo: build and install the extension, start a throwaway PostgreSQL 15
# cluster, create a small shop (examples/shop.sql), send it a burst of
# concurrent order requests with duplicates, retries and a reused key
# (pgbench, examples/place_order.pgbench), then print what happened and
# check it (examples/report.sql).  Act two (examples/leased_payment.sh) is a
# leased payment: a worker killed after charging, a takeover from its
# recovery point, the stale worker's late finish refused.  Exits non-zero
# when a check fails: above all, unless every accepted key produced exactly
# one order and the payment was charged once.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh

CLIENTS=16               # concurrent pgbench clients (pgbench -c)
THREADS=2                # pgbench worker threads (-j)
REQUESTS_PER_CLIENT=30   # first tries per client (-t); retries come on top
DB=shop_demo

ensure_packages "${IDEM_PACKAGES[@]}" || exit 1
build_and_install || exit 1
cluster_start || exit 1

# psql on the demo database: no psqlrc, stop at the first error
sql() { psql -X -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }

say "creating the shop: examples/shop.sql, examples/report.sql"
createdb "$DB" || exit 1
sql -f examples/shop.sql -f examples/report.sql || exit 1

say "load: $CLIENTS clients x $REQUESTS_PER_CLIENT requests over 25 keys (examples/place_order.pgbench)"
pgbench_out=$CLUSTER_DIR/pgbench.out
# -n: no vacuum of pgbench's own tables (there are none); -D n=0: the
# script's per-client request counter
"$PG_BINDIR/pgbench" -n -c "$CLIENTS" -j "$THREADS" -t "$REQUESTS_PER_CLIENT" -D n=0 \
    -f examples/place_order.pgbench "$DB" >"$pgbench_out" 2>&1
pgbench_exit=$?
if [ "$pgbench_exit" -eq 0 ]; then
    grep -E '^number of (transactions actually processed|failed transactions)' "$pgbench_out" \
        | sed 's/^/    pgbench: /'
else
    # pgbench prints one line per aborted client: show them
    say "pgbench exited with status $pgbench_exit; its last messages:"
    tail -n 20 "$pgbench_out" | sed 's/^/    /' >&2
fi

# What the load was asked to do: the checks compare the log against it.
sql -c "INSERT INTO shop.demo_load VALUES ($CLIENTS, $REQUESTS_PER_CLIENT, $pgbench_exit)" || exit 1

echo
echo "Report"
sql -At -c "SELECT format('  %-22s %5s   %s', label, value, note)
              FROM shop.demo_figures ORDER BY ord" || exit 1
echo
echo "Checks"
sql -At -c "SELECT format('  %-4s  %s', CASE WHEN ok THEN 'ok' ELSE 'FAIL' END, name)
                   || CASE WHEN ok THEN '' ELSE E'\n          ' || detail END
              FROM shop.demo_checks ORDER BY ord" || exit 1
failed=$(sql -At -c "SELECT count(*) FROM shop.demo_checks WHERE NOT ok") || exit 1
acts_failed=0
echo
if [ "$failed" -eq 0 ]; then
    echo "act one passed: one order and one payment per accepted key; every duplicate got the first answer"
else
    echo "act one FAILED: $failed check(s) failed"
    acts_failed=$((acts_failed + 1))
fi

# Act two: a leased claim for a payment made outside the database.
bash examples/leased_payment.sh "$DB" || acts_failed=$((acts_failed + 1))

# Act three: a transition replayed (already), an illegal one refused
# (IK005), a double-submitted form token refused.
sql -f examples/guards_demo.sql || acts_failed=$((acts_failed + 1))

echo
if [ "$acts_failed" -ne 0 ]; then
    echo "demo FAILED: $acts_failed act(s) failed"
    exit 1
fi
echo "demo passed"
