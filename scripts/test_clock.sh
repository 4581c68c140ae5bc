#!/usr/bin/env bash
# make test-clock: pg_regress and the isolation specs on a server whose
# wall clock Debian's libfaketime sets to instants where a test that
# depends on the date or the time of day would fail: half past midnight
# UTC, the last half minute of February 28 and 29 of a leap year, the last
# 15 seconds of a year, and half a minute before each daylight saving
# change of 2025 in Europe/Berlin and America/New_York, with the sessions
# and the server in that zone.  The clock starts at the instant and runs
# on at the real rate, so midnight or the change passes while the suites
# run.
#
# One cluster, restarted for each instant (in time order, so its clock
# never goes back) with libfaketime preloaded into the server only;
# pg_regress and the isolation tester run on the real clock.  A server
# with a process whose clock is not the instant's fails the instant
# (test/clock/real_waits.c says why one might).  The zone reaches the sessions through
# pg_regress --launcher (pg_regress sets PGTZ itself, and libpq's PGTZ
# overrides the server's and the database's TimeZone), and is checked in a
# session started the same way.
#
#   bash scripts/test_clock.sh              build, install, run
#   bash scripts/test_clock.sh --installed  run against the installed build
#                                           (make test, scripts/test.sh)
#   IDEM_CLOCK_INSTANTS="2024-02-29 00:30:00|UTC;..."  other instants
#
# Prints "ok N - ..." / "not ok N - ..." per suite and instant, and
# "N passed, N failed"; exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh

# instant (UTC)|TimeZone of the server and the sessions
default_instants=(
    "2024-02-28 23:59:30|UTC"                # February 28 to 29 of a leap year
    "2024-02-29 00:30:00|UTC"                # half past midnight UTC
    "2024-02-29 23:59:30|UTC"                # the end of February, to March 1
    "2024-12-31 23:59:45|UTC"                # the last second of a year passes early in the run
    "2025-03-09 06:59:30|America/New_York"   # 02:00 EST becomes 03:00 EDT at 07:00 UTC
    "2025-03-30 00:59:30|Europe/Berlin"      # 02:00 CET becomes 03:00 CEST at 01:00 UTC
    "2025-10-26 00:59:30|Europe/Berlin"      # 03:00 CEST becomes 02:00 CET at 01:00 UTC
    "2025-11-02 05:59:30|America/New_York"   # 02:00 EDT becomes 01:00 EST at 06:00 UTC
)
if [ -n "${IDEM_CLOCK_INSTANTS:-}" ]; then
    IFS=';' read -r -a instants <<<"$IDEM_CLOCK_INSTANTS"
else
    instants=("${default_instants[@]}")
fi

ensure_packages "${IDEM_PACKAGES[@]}" libfaketime || exit 1
[ "${1:-}" = --installed ] || build_and_install || exit 1
faketime_lib=$(dpkg -L libfaketime | grep '/libfaketime\.so\.1$' | head -n 1)
[ -f "$faketime_lib" ] || { say "libfaketime.so.1 not found (dpkg -L libfaketime)"; exit 1; }

# the cluster: made and first started on the real clock, with what the
# suites need (the preloaded library, prepared transactions)
cluster_start "shared_preload_libraries = 'idempotency'" || exit 1
data=$CLUSTER_DIR/data
# the server's waits past libfaketime's wrappers (test/clock/real_waits.c)
gcc -shared -fPIC -O2 -o "$CLUSTER_DIR/real_waits.so" test/clock/real_waits.c -ldl || exit 1
chmod 755 "$CLUSTER_DIR/real_waits.so"

checks=0
bad=0
log=$CLUSTER_DIR/suite.log
result() {      # result OK|FAIL TEXT
    checks=$((checks + 1))
    if [ "$1" = OK ]; then echo "ok $checks - $2"; else bad=$((bad + 1)); echo "not ok $checks - $2"; fi
}

# server_at INSTANT ZONE: restart the server with its clock at INSTANT (UTC)
# and its TimeZone ZONE
server_at() {
    if as_cluster_user "$PG_BINDIR/pg_ctl" -D "$data" status >/dev/null; then
        as_cluster_user "$PG_BINDIR/pg_ctl" -D "$data" -m fast -w stop >/dev/null || return 1
    fi
    as_cluster_user env -u PGTZ TZ=UTC LD_PRELOAD="$CLUSTER_DIR/real_waits.so $faketime_lib" \
        FAKETIME="@$1" FAKETIME_DONT_FAKE_MONOTONIC=1 \
        "$PG_BINDIR/pg_ctl" -D "$data" -l "$CLUSTER_DIR/server.log" \
        -o "-c timezone=$2 -c log_timezone=UTC" -w start >/dev/null
}

# in_zone ZONE: the launcher pg_regress runs each test's psql or isolation
# tester through: it sets the session's TimeZone and counts the runs
in_zone() {
    local launcher=$CLUSTER_DIR/in_zone.sh
    printf '%s\n' '#!/bin/sh' "PGTZ='$1'; export PGTZ" "echo \"\$1\" >>'$CLUSTER_DIR/launched'" \
        'exec "$@"' >"$launcher"
    chmod 755 "$launcher"
    echo "$launcher"
}

# run_suite NAME TARGET DIFFS LAUNCHER WHEN: one suite at the instant, every
# test through the launcher
run_suite() {
    local name=$1 target=$2 diffs=$3 launcher=$4 when=$5 rc ok fail runs began=$SECONDS
    : >"$CLUSTER_DIR/launched"
    EXTRA_REGRESS_OPTS="--launcher=$launcher" make -s PG_CONFIG="$PG_CONFIG" "$target" >"$log" 2>&1
    rc=$?
    ok=$(grep -cE '\.\.\. ok|^ok +[0-9]+ ' "$log")
    fail=$(grep -cE '\.\.\. (FAILED|failed)|^not ok +[0-9]+ ' "$log")
    runs=$(wc -l <"$CLUSTER_DIR/launched")
    if [ "$rc" -eq 0 ] && [ "$fail" -eq 0 ] && [ "$ok" -gt 0 ] && [ "$runs" -eq "$ok" ]; then
        result OK "$name at $when: $ok tests pass ($((SECONDS - began)) s)"
    else
        result FAIL "$name at $when: $ok pass, $fail fail, $runs of them run in the zone (exit $rc)"
        grep -E 'FAILED|failed|^not ok' "$log"
        [ -s "$diffs" ] && cat "$diffs"
    fi
}

start=$(date +%s)
for entry in "${instants[@]}"; do
    instant=${entry%%|*}
    zone=${entry#*|}
    when="$instant UTC, TimeZone $zone"
    say "the clock at $when"
    if ! server_at "$instant" "$zone"; then
        result FAIL "the server did not start at $when"
        tail -n 20 "$CLUSTER_DIR/server.log" >&2
        continue
    fi
    launcher=$(in_zone "$zone")
    # the server's clock is the instant (it has run on for as long as the
    # start took), in every process of the server (the ones the postmaster
    # forks from a signal handler too), and a session started through the
    # launcher is in the zone
    seen=$("$launcher" "$PG_BINDIR/psql" -X -A -t -d postgres -c "SELECT current_setting('TimeZone') || ' ' ||
        (now() >= '$instant+00' AND now() < timestamptz '$instant+00' + interval '10 minutes'
         AND (SELECT bool_and(backend_start >= '$instant+00') FROM pg_stat_activity)) || ' ' ||
        to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')" 2>&1)
    if [[ "$seen" != "$zone true "* ]]; then
        result FAIL "libfaketime did not set the clock of every server process, or the zone did not reach the session: $when; the session saw: $seen"
        "$PG_BINDIR/psql" -X -d postgres -c "SELECT pid, backend_type, backend_start FROM pg_stat_activity" >&2
        continue
    fi
    say "the server's clock: ${seen##"$zone true "} UTC, the session's TimeZone: $zone"
    run_suite "pg_regress" regresscheck regression.diffs "$launcher" "$when"
    run_suite "isolation specs" isolationcheck output_iso/regression.diffs "$launcher" "$when"
done
say "${#instants[@]} instants in $(($(date +%s) - start)) s"
echo "$((checks - bad)) passed, $bad failed"
[ "$bad" -eq 0 ] && [ "$checks" -gt 0 ]
