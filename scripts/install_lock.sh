# scripts/install_lock.sh — sourced by scripts/cluster.sh.
#
# The machine-wide install lock, and the register of the servers a run
# starts.  The installed extension is one per machine, so two runs of
# make test, demo or bench (from this tree or another) must not install
# and test at once: each holds an flock(2) lock on IDEM_LOCK for its whole
# run.  The lock is held by a small helper process (flock running `tail
# --pid`), never by a descriptor of the script itself, so no server or other
# child of the run inherits it: when the run ends, however it ends, the
# lock is free at once (or within a second, if only the script was
# killed).  Runs of older scripts, which held it on their descriptor 9,
# exclude these and are excluded by them: same file, same flock(2).
#
# Every server a run starts is registered under IDEM_RUNS/<pid of the run>
# (a cluster directory, the directory of the TAP tests, the pid file of
# PgBouncer or redis-server).  The run's EXIT trap (also on SIGINT and
# SIGTERM) stops them; a run killed before its trap could finish leaves
# its register behind, and the next run, once it holds the lock, stops
# what the register names.

# IDEM_INSTALL_LOCK is for runs nested in a run that holds the machine-wide
# lock (scripts/interrupt_check.sh inside make test, make test inside
# scripts/under_load.sh): they must not wait for it.
IDEM_LOCK=${IDEM_INSTALL_LOCK:-/tmp/idempotency-install.lock}
IDEM_RUNS=$IDEM_LOCK.runs
LOCK_HELPER=     # the flock process holding the lock for this run
RUN_DIR=         # this run's register: $IDEM_RUNS/$$

# proc_start PID: the start time of process PID (clock ticks after boot),
# which tells a live run from a later process that reused its pid
proc_start() {
    sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20
}

# lock_helper_start [-n]: start the helper and wait until it holds the lock
# (with -n: unless someone else holds it).  The helper's first line says it
# has the lock; it then lives as long as this script (its tail writes to
# /dev/null: tail -f ends when the reader of its output goes), in a session
# of its own, so that a Ctrl-C does not free the lock before the run's trap has
# stopped its servers (run_cleanup ends the helper last).
lock_helper_start() {
    local fd line
    exec {fd}< <(exec setsid flock "$@" -o -E 75 "$IDEM_LOCK" \
                     sh -c 'echo locked; exec tail --pid="$0" -f /dev/null >/dev/null' "$$" 2>/dev/null)
    LOCK_HELPER=$!
    read -r line <&"$fd"
    exec {fd}<&-
    [ "$line" = locked ] && return 0
    LOCK_HELPER=
    return 1
}

# proc_cmd PID: the command line of process PID, empty if it is gone
proc_cmd() {
    { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null
}

# lock_holders: who holds the lock: the process that took it (as the kernel
# recorded it in /proc/locks) and what its run wrote next to the lock; if
# that process is gone, the lock lives on in a descriptor it passed on (an
# older run's server), so the processes with the lock file open, the first 8
lock_holders() {
    local inode pid cmd gone=0
    inode=$(stat -c %i "$IDEM_LOCK" 2>/dev/null) || return 0
    for pid in $(awk -v inode="$inode" '$2 == "FLOCK" && $3 != "->" && $6 ~ (":" inode "$") { print $5 }' /proc/locks); do
        cmd=$(proc_cmd "$pid")
        printf '  pid %s: %s\n' "$pid" "${cmd:-(exited)}"
        [ -n "$cmd" ] || gone=1
    done
    [ -s "$IDEM_LOCK.holder" ] && printf '  its run: %s\n' "$(cat "$IDEM_LOCK.holder")"
    [ "$gone" -eq 1 ] || return 0
    echo "  the lock file is open in:"
    find /proc/[0-9]*/fd -maxdepth 1 -lname "$IDEM_LOCK" 2>/dev/null | cut -d/ -f3 | sort -un |
    while read -r pid; do
        cmd=$(proc_cmd "$pid")
        [ -n "$cmd" ] && printf '    pid %s: %s\n' "$pid" "${cmd:0:150}"
    done | head -n 8
}

# hold_install_lock: take the lock (saying so, and for whom, when it has to
# wait), stop what killed runs left, and open this run's register.  Held
# until the calling script exits.
hold_install_lock() {
    [ -n "$LOCK_HELPER" ] && return 0
    { [ -e "$IDEM_LOCK" ] || : >>"$IDEM_LOCK"; chmod 666 "$IDEM_LOCK"; } 2>/dev/null
    trap run_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    if ! lock_helper_start -n; then
        say "waiting for the install lock $IDEM_LOCK (another run installs and tests); it is held by:"
        lock_holders >&2
        lock_helper_start || { say "could not take the install lock $IDEM_LOCK"; return 1; }
        say "install lock taken"
    fi
    echo "pid $$, $(date -u '+%F %T UTC'), $PWD: $0" >"$IDEM_LOCK.holder" 2>/dev/null
    chmod 666 "$IDEM_LOCK.holder" 2>/dev/null
    sweep_dead_runs
    RUN_DIR=$IDEM_RUNS/$$
    mkdir -p "$RUN_DIR" && chmod 1777 "$IDEM_RUNS" 2>/dev/null
    proc_start $$ >"$RUN_DIR/owner"
}

# run_register KIND PATH [PROGRAM]: a server this run starts, stopped by
# run_stop_registered.  KIND: tree (a directory: every PostgreSQL server
# whose data directory is below it, then the directory itself), pidfile
# (the process of PROGRAM whose pid PATH holds).
run_register() {
    [ -n "$RUN_DIR" ] && echo "$*" >>"$RUN_DIR/servers"
    return 0
}

# pgdata_stop DIR: stop the PostgreSQL server of data directory DIR, if one
# runs (-m immediate: throwaway data)
pgdata_stop() {
    local pid
    [ -f "$1/postmaster.pid" ] || return 0
    as_cluster_user "$PG_BINDIR/pg_ctl" -D "$1" -m immediate -w stop >/dev/null 2>&1 && return 0
    # a server pg_ctl could not stop (another major's): the postmaster whose
    # working directory is DIR
    pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null)
    [ -n "$pid" ] && [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$(realpath "$1")" ] && kill -QUIT "$pid"
    return 0
}

# run_stop_registered DIR: stop every server the register DIR names (pid
# files first: they may lie in a registered directory), remove their
# directories and the register
run_stop_registered() {
    local kind path program pid d
    if [ -f "$1/servers" ]; then
        while read -r kind path program; do
            [ "$kind" = pidfile ] || continue
            pid=$(cat "$path" 2>/dev/null)
            if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$program" ]; then
                kill "$pid" 2>/dev/null
            fi
            rm -f "$path"
        done <"$1/servers"
        while read -r kind path program; do
            [ "$kind" = tree ] || continue
            for d in $(find "$path" -name postmaster.pid -printf '%h\n' 2>/dev/null); do
                pgdata_stop "$d"
            done
            rm -rf "$path"
        done <"$1/servers"
    fi
    rm -rf "$1"
}

# sweep_dead_runs: the registers of runs that are gone (their pid is dead or
# now another process's): stop what they name
sweep_dead_runs() {
    local run pid
    for run in "$IDEM_RUNS"/*; do
        [ -d "$run" ] || continue
        pid=${run##*/}
        [ "$(proc_start "$pid")" = "$(cat "$run/owner" 2>/dev/null)" ] && continue
        say "stopping what an interrupted run (pid $pid) left running:" \
            "$(cut -d' ' -f2 "$run/servers" 2>/dev/null | tr '\n' ' ')"
        run_stop_registered "$run"
    done
}

# run_cleanup: the EXIT trap of every run: the cluster (cluster.sh), every
# other server the run registered, then the lock
run_cleanup() {
    cluster_stop
    [ -n "$RUN_DIR" ] && run_stop_registered "$RUN_DIR"
    RUN_DIR=
    if [ -n "$LOCK_HELPER" ]; then
        rm -f "$IDEM_LOCK.holder"
        kill "$LOCK_HELPER" 2>/dev/null
        LOCK_HELPER=
    fi
}
