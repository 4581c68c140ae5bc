#!/usr/bin/env bash
# An interrupted make test leaves the install lock free and no server
# running, and the run after a killed one starts at once and stops what
# the killed run left.  Run by make test (scripts/test.sh, run_interrupt_suite)
# after its own suites; alone: bash scripts/interrupt_check.sh, after a make
# install of this tree.
#
# Each "run" is scripts/test.sh with IDEM_TEST_HOLD: it takes the lock,
# starts its cluster, a TAP test's node and PgBouncer, lists them in a file
# and waits.  Once that file is there (polled, never a fixed sleep), the
# run is interrupted as a user or CI would: SIGINT to its process group
# (Ctrl-C), SIGTERM to it, `timeout -k 5` (SIGTERM to the group, SIGKILL 5 s
# later; its timer fired at once with SIGALRM), and SIGKILL to the group.
# The runs use a lock file of their own (IDEM_INSTALL_LOCK), since the
# make test that runs this holds the real one.
# Prints "ok N - ..." / "not ok N - ..." and "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh

work=$(mktemp -d /tmp/idempotency-interrupt.XXXXXX)
chmod 755 "$work"
export IDEM_INSTALL_LOCK=$work/install.lock
checks=0
bad=0
bouncer_port=${IDEM_PGBOUNCER_PORT:-16432}
# the held runs' clusters listen on loopback too (for pgJDBC): not on the
# port of the run that runs this check
held_pgport=$((${IDEM_PGPORT:-54329} + 1))

# this check interrupted in turn: its held run (in a session of its own,
# out of reach of the signal) is interrupted too, and its work removed
RUN_PID=
finish() {
    if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
        kill -INT -- "-$RUN_PID" 2>/dev/null
        wait "$RUN_PID" 2>/dev/null
    fi
    rm -rf "$work"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

check() {   # check DESCRIPTION COMMAND...
    local what=$1
    shift
    checks=$((checks + 1))
    if "$@"; then echo "ok $checks - $what"; else echo "not ok $checks - $what"; bad=$((bad + 1)); fi
}

# start_run NAME [COMMAND PREFIX...]: a held run in a session (and process
# group) of its own; RUN_PID is its leader
start_run() {
    local name=$1
    shift
    # each run's PgBouncer on a port of its own: a killed run's may still
    # be listening when the next one starts
    bouncer_port=$((bouncer_port + 1))
    # (a background job of a script ignores SIGINT, and so would the run:
    # env restores it, as for a command typed at a terminal)
    IDEM_TEST_HOLD=$work/$name.ready IDEM_PGBOUNCER_PORT=$bouncer_port IDEM_PGPORT=$held_pgport \
        setsid env --default-signal=INT "$@" bash scripts/test.sh >"$work/$name.log" 2>&1 &
    RUN_PID=$!
}

# ready NAME: until the run lists its servers (or ends); generous bound
ready() {
    local i
    for i in $(seq 3000); do
        [ -s "$work/$1.ready" ] && return 0
        kill -0 "$RUN_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# the pids of the servers a run listed: postmasters and PgBouncer
server_pids() {
    local kind path
    while read -r kind path; do
        case $kind in
            pgdata) head -n 1 "$path/postmaster.pid" ;;
            pidfile) cat "$path" ;;
        esac
    done <"$work/$1.ready"
}

alive() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
none_alive() { local p; for p in "$@"; do alive "$p" && return 1; done; return 0; }
all_alive() { local p; for p in "$@"; do alive "$p" || return 1; done; return 0; }
# the lock is free: at once after a run whose trap ran; after a SIGKILL, as
# soon as its helper sees the run gone (tail --pid looks every second), so
# allow a generous bound
lock_free() { flock -w 60 "$IDEM_INSTALL_LOCK" true; }
# the processes of session $1 (a run's session: start_run's setsid made its
# leader RUN_PID): their pids, zombies left out.  The servers a run
# starts are in sessions of their own (pg_ctl, pgbouncer -d).
session_procs() {
    cat /proc/[0-9]*/stat 2>/dev/null |
        awk -v sid="$1" '{ pid = $1; sub(/.*\) /, ""); if ($4 == sid && $1 != "Z") print pid }'
}
# nothing of the ended run in session $1 is left: the run's own processes
# end with it (some, like tail --pid, a second later: generous bound)
nothing_left() {
    local until=$((SECONDS + 60)) p
    while [ "$SECONDS" -lt "$until" ]; do
        [ -z "$(session_procs "$1")" ] && return 0
        sleep 0.2
    done
    for p in $(session_procs "$1"); do
        echo "#   left running: $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
    done
    return 1
}
lock_taken() { ! flock -n "$IDEM_INSTALL_LOCK" true; }
no_wait_said() { ! grep -q 'waiting for the install lock' "$work/$1.log"; }
# run NAME's servers, read once it is ready
declare -A PIDS
remember() { PIDS[$1]=$(server_pids "$1" | tr '\n' ' '); }
show_log() { sed 's/^/#   /' "$work/$1.log"; }

# 1. Ctrl-C, 2. SIGTERM: the run's traps stop its servers
for sig in INT TERM; do
    name=$(echo "$sig" | tr 'A-Z' 'a-z')
    start_run "$name"
    if ! ready "$name"; then
        check "SIG$sig: the run started its servers" false; show_log "$name"; continue
    fi
    remember "$name"
    check "SIG$sig: the run starts at once: no wait for the lock" no_wait_said "$name"
    check "SIG$sig: while it runs, it holds the lock" lock_taken
    kill -"$sig" -- "-$RUN_PID"
    wait "$RUN_PID" 2>/dev/null
    check "SIG$sig: the run exits with an error status" test $? -ne 0
    check "SIG$sig: the install lock is free" lock_free
    check "SIG$sig: no process of the run outlives it" nothing_left "$RUN_PID"
    # shellcheck disable=SC2086
    check "SIG$sig: the cluster, the TAP node and PgBouncer are stopped (${PIDS[$name]})" none_alive ${PIDS[$name]}
done

# 3. timeout -k 5: SIGTERM to the group, SIGKILL 5 s later if still there
start_run timeout timeout -k 5 1d
if ready timeout; then
    remember timeout
    kill -ALRM "$RUN_PID"   # timeout's own timer: as if the day had passed
    wait "$RUN_PID" 2>/dev/null
    rc=$?
    # 124: the run ended on SIGTERM; 137: its trap was still at work after
    # 5 s and the SIGKILL came (the next run then stops what it left)
    check "timeout -k 5: the run ends with timeout's status 124 or 137 ($rc)" test "$rc" -eq 124 -o "$rc" -eq 137
    check "timeout -k 5: the install lock is free" lock_free
    check "timeout -k 5: no process of the run outlives it" nothing_left "$RUN_PID"
else
    check "timeout -k 5: the run started its servers" false; show_log timeout
fi

# 4. SIGKILL to the whole run: no trap runs, its servers are left
start_run kill
if ready kill; then
    remember kill
    check "SIGKILL: the run after the timeout one starts at once" no_wait_said kill
    check "SIGKILL: while it runs, it holds the lock" lock_taken
    # shellcheck disable=SC2086
    check "SIGKILL: that run stopped what the timed-out run left (${PIDS[timeout]:-})" none_alive ${PIDS[timeout]:-}
    kill -KILL -- "-$RUN_PID"
    wait "$RUN_PID" 2>/dev/null
    check "SIGKILL: the install lock is free" lock_free
    check "SIGKILL: no process of the run outlives it (its servers aside)" nothing_left "$RUN_PID"
    # shellcheck disable=SC2086
    check "SIGKILL: its servers were left running (${PIDS[kill]})" all_alive ${PIDS[kill]}
else
    check "SIGKILL: the run started its servers" false; show_log kill
fi

# 5. the next run: at once, and it stops the killed run's servers
start_run next
if ready next; then
    remember next
    check "next run: it starts at once" no_wait_said next
    check "next run: it says what it stops" grep -q 'stopping what an interrupted run' "$work/next.log"
    # shellcheck disable=SC2086
    check "next run: the killed run's servers are stopped (${PIDS[kill]:-})" none_alive ${PIDS[kill]:-}
    kill -INT -- "-$RUN_PID"
    wait "$RUN_PID" 2>/dev/null
    # shellcheck disable=SC2086
    check "next run: interrupted in turn, it leaves the lock free and no server" \
        eval 'lock_free && none_alive '"${PIDS[next]}"
    check "next run: no process of the run outlives it" nothing_left "$RUN_PID"
else
    check "next run: it started its servers" false; show_log next
fi

# a waiting run says for whom: hold the lock here, start a run, look
flock -o "$IDEM_INSTALL_LOCK" tail --pid=$$ -f /dev/null >/dev/null &
holder=$!
until ! flock -n "$IDEM_INSTALL_LOCK" true; do sleep 0.1; done
start_run waiter
for _ in $(seq 3000); do
    grep -q "pid $holder" "$work/waiter.log" && break
    sleep 0.1
done
check "a run that waits for the lock says so, and names the holder (pid $holder)" \
    grep -q "waiting for the install lock" "$work/waiter.log"
check "... by its pid" grep -q "pid $holder" "$work/waiter.log"
kill -INT -- "-$RUN_PID"
wait "$RUN_PID"
check "a waiting run, interrupted: no process of it outlives it" nothing_left "$RUN_PID"
kill "$holder"
wait "$holder" 2>/dev/null   # its tail ends with this script

echo "$((checks - bad)) passed, $bad failed"
[ "$bad" -eq 0 ]
