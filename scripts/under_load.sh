#!/usr/bin/env bash
# make test-under-load: make test, then make installcheck against a plain
# server, while a CPU hog runs (stress-ng --cpu 4: four busy workers, twice
# the cores of a 2-core CI machine).  The check to run before changing a
# test that could depend on how fast statements run (test/README.md).
#
#   IDEM_LOAD_TEST_RUNS=n          make test n times in a row (default 1)
#   IDEM_LOAD_INSTALLCHECK_RUNS=n  installcheck n times, each on a fresh
#                                  initdb (default 1)
#   IDEM_LOAD_CPU=n                stress-ng --cpu n (default 4)
#
# The hog is stopped when the script ends, however it ends: its watcher
# (tail --pid) outlives this script by at most a second.  The check holds
# the install lock from start to end.  Prints each run's time and result; exits non-zero
# if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh

test_runs=${IDEM_LOAD_TEST_RUNS:-1}
check_runs=${IDEM_LOAD_INSTALLCHECK_RUNS:-1}
cpus=${IDEM_LOAD_CPU:-4}

ensure_packages "${IDEM_PACKAGES[@]}" stress-ng || exit 1

# the machine-wide lock for the whole check, so that the hog runs only
# while this check runs; the make tests inside it take a lock file of their
# own (one run at a time all the same)
# (a file that stays, so that a nested run killed with this one is swept
# by the next)
hold_install_lock || exit 1
nested_lock=$IDEM_LOCK.nested

# the hog, in a session of its own, tied to this script's life
setsid sh -c 'stress-ng --cpu "$1" --quiet & hog=$!
              tail --pid="$2" -f /dev/null >/dev/null
              kill "$hog"' sh "$cpus" "$$" &
say "CPU hog: stress-ng --cpu $cpus on $(nproc) cores"

results=()
failures=0
# timed NAME COMMAND...: run it, note its time and last line
timed() {
    local name=$1 start rc last
    shift
    start=$(date +%s)
    "$@" 2>&1 | tee "$LOAD_LOG"
    rc=${PIPESTATUS[0]}
    last=$(grep -E '[0-9]+ (passed|failed)|tests? (passed|failed)|All [0-9]+ tests passed' "$LOAD_LOG" | tail -n 1)
    results+=("$name: exit $rc, $(($(date +%s) - start)) s, ${last:-no summary line}")
    [ "$rc" -eq 0 ] || failures=$((failures + 1))
}
LOAD_LOG=$(mktemp)

for i in $(seq "$test_runs"); do
    say "make test under load, run $i of $test_runs"
    timed "make test #$i" env IDEM_INSTALL_LOCK="$nested_lock" make -s test
done

if [ "$check_runs" -gt 0 ]; then
    build_and_install || exit 1
    for i in $(seq "$check_runs"); do
        say "make installcheck under load, run $i of $check_runs: fresh plain server"
        # no shared_preload_libraries, no prepared transactions
        cluster_start "max_prepared_transactions = 0" || exit 1
        timed "make installcheck #$i" make -s PG_CONFIG="$PG_CONFIG" installcheck
        cluster_stop
    done
fi
rm -f "$LOAD_LOG"

echo
echo "Under stress-ng --cpu $cpus ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)):"
printf '  %s\n' "${results[@]}"
[ "$failures" -eq 0 ]
