#!/usr/bin/env bash
# make bench: the extension against hand-written SQL and Redis, measured the
# same way on the same machine in the same run.  Builds and installs the
# extension (holding the machine-wide install lock), starts a throwaway
# PostgreSQL 15 cluster with the library preloaded and a loopback-only
# redis-server, runs the pgbench scripts of bench/ several times, and prints
# one table of medians; ratios are taken within each run, then their median.
# Stops both servers on exit, also on failure.  Numbers are measurements,
# never pass/fail: the exit status only says whether every row could run.
#
#   bash scripts/bench.sh [--clients N] [--hot-clients N] [--hot-keys N]
#                         [--threads N] [--duration S] [--runs N]
#                         [--records N,N...] [--b6-records N] [--replay-keys N]
#                         [--purge-rows N] [--protocol prepared|extended]
#                         [--part all|base|http|sizes|server|outbox]
#                         [--outbox-messages N] [--warmup S]
#   make bench BENCH_ARGS="--runs 5 --duration 20"
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh
. scripts/rabbitmq.sh

CLIENTS=8            # B1, B2, B4, B5 clients (pgbench -c)
HOT_CLIENTS=32       # B3 clients
HOT_KEYS=16          # B3 keys per 50 ms time slot
THREADS=2            # pgbench worker threads (-j), redis-benchmark --threads
DURATION=8           # seconds per pgbench run (-T)
RUNS=3               # runs of every row; the table shows medians
WARMUP=8             # B9: seconds of new keys each app serves before it is measured
SIZES=100000,10000000  # size axis: records already in both tables (B1, B2, B5, B6)
B6_RECORDS=200000    # B6 records made or inserted per table
REPLAY_KEYS=10000    # B2 finished keys (base part)
PURGE_ROWS=200000    # B5 expired records to purge
PROTOCOL=prepared    # pgbench -M
PART=all             # base (every row at the base size), sizes (the size axis), http (B9), server (B11), outbox (B12) or all
OUTBOX_MESSAGES=2000 # B12 messages per run and variant
REDIS_PORT=${IDEM_REDIS_PORT:-56379}
DB=idem_bench

usage() { sed -n '11,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --clients) CLIENTS=$2 ;;
        --hot-clients) HOT_CLIENTS=$2 ;;
        --hot-keys) HOT_KEYS=$2 ;;
        --threads) THREADS=$2 ;;
        --duration) DURATION=$2 ;;
        --runs) RUNS=$2 ;;
        --records) SIZES=$2 ;;
        --b6-records) B6_RECORDS=$2 ;;
        --part) PART=$2 ;;
        --replay-keys) REPLAY_KEYS=$2 ;;
        --purge-rows) PURGE_ROWS=$2 ;;
        --protocol) PROTOCOL=$2 ;;
        --outbox-messages) OUTBOX_MESSAGES=$2 ;;
        --warmup) WARMUP=$2 ;;
        *) usage ;;
    esac
    [ $# -ge 2 ] || usage
    shift 2
done
# simple is not offered: pgbench pastes variables into the SQL text there,
# and the scripts pass text values (run tags, keys) as parameters
[[ $PROTOCOL =~ ^(prepared|extended)$ ]] || { say "--protocol must be prepared or extended"; usage; }
for v in CLIENTS HOT_CLIENTS HOT_KEYS THREADS DURATION RUNS B6_RECORDS REPLAY_KEYS PURGE_ROWS OUTBOX_MESSAGES WARMUP; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { say "$v must be a positive integer"; usage; }
done
[[ $SIZES =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { say "--records must be positive integers separated by commas"; usage; }
IFS=, read -r -a SIZE_LIST <<<"$SIZES"
[[ $PART =~ ^(all|base|http|sizes|server|outbox)$ ]] || { say "--part must be all, base, http, sizes, server or outbox"; usage; }
part() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }

ensure_packages "${IDEM_PACKAGES[@]}" redis-server python3-redis python3-psycopg "${JAVA_PACKAGES[@]}" || exit 1
build_and_install || exit 1

PRELOAD="shared_preload_libraries = 'idempotency'"
# fsync on: synchronous_commit = on must mean a real WAL flush.  Big WAL so
# that no checkpoint lands in the middle of a short run.
# Loopback TCP as well, for pgJDBC in B10.
cluster_start "fsync = on" "$PRELOAD" "shared_buffers = 256MB" \
    "max_wal_size = 4GB" "checkpoint_timeout = 30min" "listen_addresses = '127.0.0.1'" || exit 1
WORK=$CLUSTER_DIR/bench
mkdir -p "$WORK" && chmod 777 "$WORK"

# redis-server: loopback TCP on a private port plus a Unix socket (the
# benchmark uses the socket, as pgbench does), no persistence, run as the
# cluster's OS user, stopped with the cluster.
REDIS_DIR=$CLUSTER_DIR/redis
mkdir -p "$REDIS_DIR" && chmod 777 "$REDIS_DIR"
server_register "$REDIS_DIR/redis.pid" redis-server
REDIS_ARGS=(--bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes
    --unixsocket "$REDIS_DIR/redis.sock" --unixsocketperm 777
    --save '' --appendonly no --daemonize yes --dir "$REDIS_DIR"
    --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log")
as_cluster_user redis-server "${REDIS_ARGS[@]}" || exit 1
for _ in $(seq 50); do
    redis-cli -s "$REDIS_DIR/redis.sock" ping >/dev/null 2>&1 && break
    sleep 0.1
done
redis() { redis-cli -s "$REDIS_DIR/redis.sock" "$@"; }
redis ping >/dev/null || { say "redis-server did not start"; cat "$REDIS_DIR/redis.log" >&2; exit 1; }
say "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:$REDIS_PORT and $REDIS_DIR/redis.sock"

sql() { psql -X -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }
sqlv() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }

createdb "$DB" || exit 1
sql -f bench/schema.sql || exit 1
HAS_LEASE=$(sqlv "SELECT count(*) FROM pg_proc WHERE proname = 'idem_claim' AND 'lease' = ANY (proargnames)")

say "B2 setup: $REPLAY_KEYS finished keys in both tables and in Redis"
sql -c "CALL bench_load_replay_keys($REPLAY_KEYS)" -c "VACUUM ANALYZE" || exit 1
# the same ~100-byte value per key; redis-benchmark's __rand_int__ is 12 digits
sqlv "SELECT bench_resp('SET', 'idem:bench:' || lpad(i::text, 12, '0'),
                          bench_result(i, i)::text)
        FROM generate_series(0, $REPLAY_KEYS - 1) AS i" \
    | redis --pipe >/dev/null || exit 1

# B8: the B1 and B2 flows as three application roles: one with table
# grants (invoker mode), one with only a scope grant (delegated mode: the
# table's owner does the work), one under the row level security recipe
# (its policy applies while RLS is on, during its own runs only)
HAS_SCOPE_GRANTS=$(sqlv "SELECT count(*) FROM pg_class WHERE relname = 'idem_scope_grant'")
if [ "$HAS_SCOPE_GRANTS" -gt 0 ]; then
    sql <<'EOF' || exit 1
CREATE ROLE bench_grants LOGIN;
CREATE ROLE bench_delegated LOGIN;
CREATE ROLE bench_rls LOGIN;
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotent_record TO bench_grants, bench_rls;
GRANT SELECT, INSERT, UPDATE ON bench_order TO bench_grants, bench_delegated, bench_rls;
GRANT USAGE ON SEQUENCE bench_order_id_seq TO bench_grants, bench_delegated, bench_rls;
INSERT INTO idem_scope_grant VALUES ('bench_delegated', 'bench');
CREATE POLICY bench_tenant ON idempotent_record TO bench_rls
    USING (scope = current_setting('app.tenant'))
    WITH CHECK (scope = current_setting('app.tenant'));
EOF
fi
# bench_roles: one run of each B8 row
bench_roles() {
    local role
    for role in grants delegated; do
        pgbench_tps "b8_${role}_b1" b1_ext.pgbench "$CLIENTS" "$SC_OFF" -U "bench_$role"
        pgbench_tps "b8_${role}_b2" b2_ext.pgbench "$CLIENTS" "" -U "bench_$role"
    done
    sql -c "ALTER TABLE idempotent_record ENABLE ROW LEVEL SECURITY" || return 1
    pgbench_tps b8_rls_b1 b1_ext.pgbench "$CLIENTS" "$SC_OFF -c app.tenant=bench" -U bench_rls
    pgbench_tps b8_rls_b2 b2_ext.pgbench "$CLIENTS" "-c app.tenant=bench" -U bench_rls
    sql -c "ALTER TABLE idempotent_record DISABLE ROW LEVEL SECURITY"
}

# ---------------------------------------------------------------------------
# Measurements.  R[name.run] holds one number per row and run.
declare -A R
FAILED_ROWS=()

# pgbench_run NAME SCRIPT CLIENTS PGOPTIONS [extra pgbench args...]:
# run one row once, output in $WORK/NAME.RUN.out
pgbench_run() {
    local name=$1 script=$2 clients=$3 opts=$4
    shift 4
    PGOPTIONS=$opts "$PG_BINDIR/pgbench" -n -M "$PROTOCOL" -c "$clients" \
        -j "$((THREADS < clients ? THREADS : clients))" -T "$DURATION" \
        -D run="r$run-$name" -D n=0 -D replay_keys="$REPLAY_KEYS" -D hot_keys="$HOT_KEYS" \
        -f "bench/$script" "$@" "$DB" >"$WORK/$name.$run.out" 2>&1
}

# pgbench_tps NAME SCRIPT CLIENTS [PGOPTIONS [extra pgbench args...]]: run,
# then record its tps
pgbench_tps() {
    pgbench_run "$1" "$2" "$3" "${4:-}" "${@:5}"
    pgbench_parse "$1"
}

# pgbench_parse NAME: R[NAME.run] = the tps of its output
pgbench_parse() {
    local name=$1 out=$WORK/$1.$run.out tps
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out")
    if [ -z "$tps" ] || grep -q 'aborted in command' "$out"; then
        say "$name (run $run) failed; pgbench said:"
        tail -n 5 "$out" | sed 's/^/    /' >&2
        FAILED_ROWS+=("$name")
        return 1
    fi
    R[$name.$run]=$tps
    printf '    %-14s %10.0f tps\n' "$name" "$tps" >&2
}

# server_ticks: the CPU time (clock ticks) the cluster's processes have
# used: the postmaster's own and that of the children it reaped, and its
# live children's
server_ticks() {
    local pm c
    pm=$(head -n 1 "$CLUSTER_DIR/data/postmaster.pid")
    { awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat"
      for c in $(pgrep -P "$pm"); do awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null; done
    } | awk '{s += $1} END {print s}'
}

# pgbench_cpu NAME SCRIPT [extra pgbench args...]: pgbench_tps with
# $CLIENTS clients, and R[NAME_cpu.run] = the server's CPU milliseconds per
# transaction over the run (its backends reaped after it)
pgbench_cpu() {
    local t0 t1 tx i
    t0=$(server_ticks)
    pgbench_tps "$1" "$2" "$CLIENTS" "" "${@:3}" || return 1
    for i in $(seq 50); do
        [ "$(sqlv "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")" -le 1 ] && break
        sleep 0.1
    done
    sleep 0.2
    t1=$(server_ticks)
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$WORK/$1.$run.out")
    R[$1_cpu.$run]=$(awk -v d="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v t="$tx" 'BEGIN {print d * 1000 / hz / t}')
    printf '    %-14s %10.3f ms of server CPU per transaction\n' "$1" "${R[$1_cpu.$run]}" >&2
}

# B11: the packages' statements (a new key) against the hand-written
# record and the bare round trips of the same transaction shape (B9's
# references), server CPU per transaction; the order alternates by run
bench_b11() {
    local args=(-D scope=bench -D ttl=86400 -D 'body=["POST","/orders",{"qty":1,"sku":7}]'
                -D 'headers={"content-type":"application/json"}'
                -D 'response=\x7b226f726465725f6964223a312c22736b75223a377d')
    local order=(package hand round_trips) v
    [ $((run % 2)) -eq 0 ] && order=(round_trips hand package)
    # the hand-written table starts as the record table does, with
    # $REPLAY_KEYS finished records (B2's keys) and statistics
    [ "$(sqlv "SELECT count(*) FROM bench_hand_request")" -eq 0 ] &&
        sql -c "INSERT INTO bench_hand_request
                SELECT md5('b2-' || i)::uuid::text, bench_result(i, i)::text, 201, bench_result(i, i)::text
                  FROM generate_series(0, $REPLAY_KEYS - 1) AS i" -c "VACUUM ANALYZE bench_hand_request"
    for v in "${order[@]}"; do
        pgbench_cpu "b11_$v" "b11_$v.pgbench" "${args[@]}"
    done
}

redis_get_rps() {
    local out=$WORK/redis_get.$run.out rps
    redis-benchmark -s "$REDIS_DIR/redis.sock" -c "$CLIENTS" --threads "$THREADS" \
        -n "$((DURATION * 40000))" -r "$REPLAY_KEYS" --csv \
        GET 'idem:bench:__rand_int__' >"$out" 2>&1
    rps=$(tail -n 1 "$out" | cut -d, -f2 | tr -d '"')
    [[ $rps =~ ^[0-9.]+$ ]] || { say "redis-benchmark failed"; cat "$out" >&2; FAILED_ROWS+=(b2_redis); return 1; }
    R[b2_redis.$run]=$rps
    printf '    %-14s %10.0f GET/s\n' b2_redis "$rps" >&2
}

# restart_cluster PRELOAD?: the same cluster, with or without the library
# in shared_preload_libraries (the command line wins over the file)
restart_cluster() {
    # pg_ctl restart reuses the last -o unless given one: always give it
    local libs=
    [ "$1" = yes ] && libs=idempotency
    as_cluster_user "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" \
        -m fast -w restart -o "-c shared_preload_libraries=$libs" >/dev/null || return 1
}

# B3 duplicates: business rows beyond one per key, from the data
count_duplicates() {
    sqlv "SELECT count(*) - count(DISTINCT key) FROM bench_order WHERE run = 'r$run-$1'"
}

# B5: purge PURGE_ROWS expired records while B1 claims run; p99 of the
# claims from pgbench's per-transaction log, with and without the purge.
# bench_purge PREFIX: rows PREFIXb5_rows, PREFIXb5_p99_quiet, PREFIXb5_p99_purge
p99_of_log() {
    cat "$WORK"/log_"$1".* 2>/dev/null | awk '{print $3}' | sort -n \
        | awk '{a[NR] = $1} END {
            if (NR == 0) exit; i = int(NR * 0.99); if (i < NR * 0.99) i++; print a[i] / 1000 }'
}
bench_purge() {
    local p=$1 t0 t1 before after
    sqlv "INSERT INTO idempotent_record (scope, key, status, result, fence,
                                        created_at, updated_at, expires_at)
          SELECT 'purge', 'r$run-' || i, 'succeeded', bench_result(i, i), 1,
                 now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
            FROM generate_series(1, $PURGE_ROWS) AS i" >/dev/null || return 1
    sql -c "VACUUM ANALYZE idempotent_record" || return 1
    rm -f "$WORK"/log_${p}b5_*
    pgbench_run "${p}b5_quiet" b1_ext.pgbench "$CLIENTS" "$SC_OFF" -l --log-prefix="$WORK/log_${p}b5_quiet"
    pgbench_parse "${p}b5_quiet" || return 1
    before=$(sqlv "SELECT count(*) FROM idempotent_record WHERE scope = 'purge' AND expires_at <= now()")
    pgbench_run "${p}b5_purge" b1_ext.pgbench "$CLIENTS" "$SC_OFF" -l --log-prefix="$WORK/log_${p}b5_purge" &
    local bench_pid=$!
    sleep 1
    t0=$(date +%s.%N)
    sql -c "CALL idem_purge_all()" || { wait "$bench_pid"; return 1; }
    t1=$(date +%s.%N)
    wait "$bench_pid"
    pgbench_parse "${p}b5_purge" || return 1
    after=$(sqlv "SELECT count(*) FROM idempotent_record WHERE scope = 'purge' AND expires_at <= now()")
    R[${p}b5_rows.$run]=$(awk -v n="$((before - after))" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n / (b - a)}')
    R[${p}b5_p99_quiet.$run]=$(p99_of_log "${p}b5_quiet")
    R[${p}b5_p99_purge.$run]=$(p99_of_log "${p}b5_purge")
    printf '    %-14s %10s rows/s, claims p99 %s ms quiet, %s ms with purge\n' "${p}b5" \
        "${R[${p}b5_rows.$run]}" "${R[${p}b5_p99_quiet.$run]}" "${R[${p}b5_p99_purge.$run]}" >&2
}

# updates and HOT updates of idempotent_record so far ("N H"), once the
# backends of the last run have flushed their statistics at exit
record_updates() {
    sleep 1
    sqlv "SELECT n_tup_upd || ' ' || n_tup_hot_upd FROM pg_stat_user_tables
           WHERE relid = 'idempotent_record'::regclass"
}

# B7: the Redis lock pattern against the extension, from one Python client
# program (bench/b7_redis_lock.py) with psycopg and redis-py
B7=(/usr/bin/python3 bench/b7_redis_lock.py)
bench_b7() {
    local mode out
    for mode in redis ext; do
        out=$("${B7[@]}" throughput "$mode" "dbname=$DB" "$REDIS_DIR/redis.sock" "$CLIENTS" "$DURATION" "r$run-b7t-$mode" 2>&1) \
            || { say "B7 throughput ($mode) failed: $out"; FAILED_ROWS+=("b7_$mode"); return 1; }
        R[b7_$mode.$run]=${out#rps }
        printf '    %-14s %10s requests/s\n' "b7_$mode" "${R[b7_$mode.$run]}" >&2
        out=$("${B7[@]}" duplicates "$mode" "dbname=$DB" "$REDIS_DIR/redis.sock" "$HOT_CLIENTS" "$HOT_KEYS" 3 1 "r$run-b7d-$mode" 2>&1) \
            || { say "B7 duplicates ($mode) failed: $out"; FAILED_ROWS+=("b7_dup_$mode"); return 1; }
        R[b7_dup_$mode.$run]=$(echo "$out" | sed -n 's/.*duplicates \([0-9]*\).*/\1/p')
        R[b7_killed_$mode.$run]=$(echo "$out" | sed -n 's/.*killed \([0-9]*\).*/\1/p')
        printf '    %-14s %s\n' "b7_dup_$mode" "$out" >&2
    done
}

# B10: the Spring library of clients/java, one JVM per run: the same payment
# service under the Redis lock aspect (SET NX PX and a compare-and-delete
# script over a minimal RESP client in the test sources: Debian has no Java
# Redis client) and under @Idempotent, in a duplicate storm
bench_b10() {
    local out line mode
    out=$(cd clients/java && mvn -q -o -B -Dstyle.color=never -Dmaven.repo.local=/usr/share/maven-repo \
              test-compile exec:java \
              -Dexec.args="jdbc:postgresql://127.0.0.1:$PGPORT/$DB?user=postgres $REDIS_PORT" 2>"$WORK/b10.$run.err") \
        || { say "B10 failed"; tail -n 30 "$WORK/b10.$run.err" >&2; FAILED_ROWS+=(b10); return 1; }
    for mode in redis_lock idempotent; do
        line=$(grep -o "$mode calls_per_s.*" <<<"$out")
        R[b10_$mode.$run]=$(sed -n 's/.*calls_per_s \([0-9]*\).*/\1/p' <<<"$line")
        R[b10_dup_$mode.$run]=$(sed -n 's/.*duplicates \([0-9]*\).*/\1/p' <<<"$line")
        printf '    %-14s %s\n' "b10_$mode" "$line" >&2
    done
}

SC_ON="-c synchronous_commit=on"
SC_OFF="-c synchronous_commit=off"
say "$RUNS runs of ${DURATION}s per row; $CLIENTS clients ($HOT_CLIENTS for B3), $THREADS threads, -M $PROTOCOL"
part base && for run in $(seq "$RUNS"); do
    say "run $run of $RUNS"
    # counter overhead: B1 right after a restart without and with preloading,
    # in alternating order from run to run so that neither side always runs
    # on the bigger table
    if [ $((run % 2)) -eq 1 ]; then order="no yes"; else order="yes no"; fi
    # the same for B3, hot keys, where duplicates wait: with the library
    # preloaded each wait is also timed into the wait_seconds histogram
    for p in $order; do
        restart_cluster "$p" || exit 1
        if [ "$p" = yes ]; then name=b1_preload; else name=b1_nopreload; fi
        pgbench_tps "$name" b1_ext.pgbench "$CLIENTS" "$SC_OFF"
        if [ "$p" = yes ]; then name=b3_preload; else name=b3_nopreload; fi
        pgbench_tps "$name" b3_ext.pgbench "$HOT_CLIENTS" "$SC_OFF"
        [ "$p" = yes ] && R[b3_waits.$run]=$(sqlv "SELECT wait_seconds_count FROM idempotency_stats")
    done
    upd0=$(record_updates)
    pgbench_tps b1_ext_on b1_ext.pgbench "$CLIENTS" "$SC_ON"
    pgbench_tps b1_hand_on b1_hand.pgbench "$CLIENTS" "$SC_ON"
    pgbench_tps b1_ext_off b1_ext.pgbench "$CLIENTS" "$SC_OFF"
    upd1=$(record_updates)
    # B1's updates of idempotent_record are its outcomes (claims insert)
    R[b1_upd.$run]=$(( ${upd1% *} - ${upd0% *} ))
    R[b1_hot.$run]=$(( ${upd1#* } - ${upd0#* } ))
    [ "${R[b1_upd.$run]}" -gt 0 ] &&
        R[b1_hot_pct.$run]=$(awk -v h="${R[b1_hot.$run]}" -v u="${R[b1_upd.$run]}" 'BEGIN {print 100 * h / u}')
    printf '    %-14s %10s of %s outcome updates HOT\n' b1_hot "${R[b1_hot.$run]}" "${R[b1_upd.$run]}" >&2
    pgbench_tps b1_hand_off b1_hand.pgbench "$CLIENTS" "$SC_OFF"
    pgbench_tps b2_ext b2_ext.pgbench "$CLIENTS"
    pgbench_tps b2_hand b2_hand.pgbench "$CLIENTS"
    pgbench_tps b2_pk b2_pk.pgbench "$CLIENTS"
    redis_get_rps
    pgbench_tps b3_ext b3_ext.pgbench "$HOT_CLIENTS" "$SC_OFF" && R[b3_ext_dup.$run]=$(count_duplicates b3_ext)
    pgbench_tps b3_hand b3_hand.pgbench "$HOT_CLIENTS" "$SC_OFF" && R[b3_hand_dup.$run]=$(count_duplicates b3_hand)
    R[b3_ext_eff.$run]=$(sqlv "SELECT count(*) FROM bench_order WHERE run = 'r$run-b3_ext'")
    if [ "$HAS_LEASE" -gt 0 ]; then
        pgbench_tps b4_ext b4_ext.pgbench "$CLIENTS" "$SC_OFF"
    fi
    bench_b11
    bench_b7
    bench_b10
    if [ "$HAS_SCOPE_GRANTS" -gt 0 ]; then
        bench_roles || FAILED_ROWS+=(b8)
    fi
done
# --part server: B11 alone
[ "$PART" = server ] && for run in $(seq "$RUNS"); do
    say "run $run of $RUNS"
    bench_b11
done

# ---------------------------------------------------------------------------
# b6_parts QUERY-FUNCTION ROWS: where the bytes of each table are, per row:
# heap (with TOAST, FSM, VM) and each index
b6_parts() {
    "$1" "SELECT string_agg(format('%s %s', t, parts), '; ')
            FROM (SELECT c.relname AS t,
                         format('heap %s', round(pg_table_size(c.oid)::numeric / $2))
                         || coalesce(', ' || string_agg(format('%s %s', i.relname,
                                round(pg_relation_size(i.oid)::numeric / $2)), ', '), '') AS parts
                    FROM pg_class c
                    LEFT JOIN pg_index x ON x.indrelid = c.oid
                    LEFT JOIN pg_class i ON i.oid = x.indexrelid
                   WHERE c.relname IN ('idempotent_record', 'hand_record')
                   GROUP BY c.oid, c.relname, c.reltuples ORDER BY c.relname DESC) AS s"
}
# B6: bytes per record of records inserted directly, in a database of its own
bench_b6_inserted() {
    say "B6: $B6_RECORDS records per table (UUID keys, SHA-256 fingerprints, ~100-byte results)"
    B6DB=idem_bench_size
    createdb "$B6DB" || exit 1
    psql -X -q -v ON_ERROR_STOP=1 -d "$B6DB" -f bench/schema.sql || exit 1
    psql -X -q -v ON_ERROR_STOP=1 -d "$B6DB" <<EOF || exit 1
-- random key order, as keys arrive; the same rows in both tables.  Claims
-- come one after the other (t: 1 ms apart), so timestamps differ from row
-- to row, as they do in use (equal ones would let B-tree deduplication
-- shrink the expires_at index to nothing).
CREATE TABLE b6_source AS
SELECT 'acct_' || (i % 1000) AS scope, gen_random_uuid()::text AS key,
       sha256(convert_to(i::text, 'UTF8')) AS fingerprint,
       bench_result(i, i % 1000) AS result,
       now() - interval '1 hour' + i * interval '1 ms' AS t
  FROM generate_series(1, $B6_RECORDS) AS i;
INSERT INTO idempotent_record (scope, key, status, fingerprint, result, fence,
                               created_at, updated_at, expires_at)
SELECT scope, key, 'succeeded', fingerprint, result, 1, t, t, t + interval '1 day'
  FROM b6_source;
INSERT INTO hand_record (scope, key, status, fingerprint, result,
                         created_at, updated_at, expires_at)
SELECT scope, key, 'succeeded', fingerprint, result, t, t, t + interval '1 day'
  FROM b6_source;
VACUUM ANALYZE idempotent_record, hand_record;
EOF
    b6q() { psql -X -At -v ON_ERROR_STOP=1 -d "$B6DB" -c "$1"; }
    B6_EXT_INS=$(b6q "SELECT pg_total_relation_size('idempotent_record')::numeric / $B6_RECORDS")
    B6_HAND_INS=$(b6q "SELECT pg_total_relation_size('hand_record')::numeric / $B6_RECORDS")
    B6_RESULT=$(b6q "SELECT round(avg(octet_length(result::text))) FROM b6_source")
    B6_PARTS=$(b6_parts b6q "$B6_RECORDS")
    # Redis: the same keys, each with status, fingerprint (hex) and result in
    # one string, with the same 1-day expiry (SET ... EX)
    redis flushall >/dev/null
    B6_R0=$(redis info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
    b6q "SELECT bench_resp('SET', 'idem:' || scope || ':' || key,
                          jsonb_build_object('status', 'succeeded',
                                             'fingerprint', encode(fingerprint, 'hex'),
                                             'result', result)::text,
                          'EX', '86400')
           FROM b6_source" | redis --pipe >/dev/null || exit 1
    B6_R1=$(redis info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
    B6_REDIS=$(awk -v a="$B6_R0" -v b="$B6_R1" -v n="$B6_RECORDS" 'BEGIN {print (b - a) / n}')
    B6_KEYS=$(redis dbsize)
    [ "$B6_KEYS" -eq "$B6_RECORDS" ] || say "warning: Redis holds $B6_KEYS keys, expected $B6_RECORDS"
}
part base && bench_b6_inserted

# ---------------------------------------------------------------------------
# The size axis: B1, B2, B5 and B6 with SIZE records already in both tables,
# for each SIZE of --records, in a database of its own per size.  Rows are
# named sSIZE_b1_ext_off and so on.

# size_load SIZE: SIZE finished records in idempotent_record and the same
# rows in hand_record (scope 'bench', the B2 keys md5('b2-' || i) with their
# fingerprints, one ~100-byte result built once, created over the last
# hour, expiring a day after), loaded in bulk: the indexes
# are dropped, the rows inserted in one INSERT ... SELECT each, the indexes
# built after them (one sort each, not SIZE random B-tree inserts), then
# VACUUM sets the visibility map and hint bits, as a table that has lived
# a while has them.  The expiry index is rebuilt from its own
# definition, whatever the installed version made it.
size_load() {
    local t0=$SECONDS
    sql <<EOF || return 1
SET maintenance_work_mem = '512MB';
SELECT pg_get_indexdef('idempotent_record_expires_at_idx'::regclass) AS expiry_index \gset
ALTER TABLE idempotent_record DROP CONSTRAINT idempotent_record_pkey;
DROP INDEX idempotent_record_expires_at_idx;
ALTER TABLE hand_record DROP CONSTRAINT hand_record_pkey;
INSERT INTO idempotent_record (scope, key, status, fingerprint, result,
                               fence, created_at, updated_at, expires_at)
SELECT 'bench', md5('b2-' || i)::uuid::text, 'succeeded',
       bench_fingerprint(i), r.result, 1, t, t, t + interval '1 day'
  FROM (SELECT bench_result(0, 0) AS result OFFSET 0) AS r,
       generate_series(0, $1 - 1) AS i,
       LATERAL (SELECT now() - interval '1 hour' + i * (interval '1 hour' / $1)) AS c(t);
INSERT INTO hand_record (scope, key, status, fingerprint, result,
                         created_at, updated_at, expires_at)
SELECT scope, key, 'succeeded', fingerprint, result, created_at, updated_at, expires_at
  FROM idempotent_record;
ALTER TABLE idempotent_record ADD CONSTRAINT idempotent_record_pkey PRIMARY KEY (scope, key);
:expiry_index;
ALTER TABLE hand_record ADD CONSTRAINT hand_record_pkey PRIMARY KEY (scope, key);
VACUUM ANALYZE idempotent_record, hand_record;
EOF
    say "  loaded $1 records into each table in $((SECONDS - t0)) s"
}

# size_b6 SIZE: B6_RECORDS records made per table as requests make them (a
# claim, then its outcome, committed, $CLIENTS clients at once; new keys,
# 1,000 scopes, SHA-256 fingerprints, the ~100-byte result), then VACUUM;
# bytes per record = growth of pg_total_relation_size / records made.  Run
# right after the load, before any purge leaves free space to fill.
size_b6() {
    local p=s$1_ side table n0 b0 n1 b1
    for side in ext hand; do
        table=idempotent_record
        [ "$side" = hand ] && table=hand_record
        n0=$(sqlv "SELECT count(*) FROM $table")
        b0=$(sqlv "SELECT pg_total_relation_size('$table')")
        PGOPTIONS=$SC_OFF "$PG_BINDIR/pgbench" -n -M "$PROTOCOL" -c "$CLIENTS" -j "$THREADS" \
            -t "$(( (B6_RECORDS + CLIENTS - 1) / CLIENTS ))" -D run="${p}b6" -D n=0 \
            -f "bench/b6_$side.pgbench" "$DB" >"$WORK/${p}b6_$side.out" 2>&1 \
            || { say "B6 ($side, $1 records) failed:"; tail -n 5 "$WORK/${p}b6_$side.out" >&2; return 1; }
        sqlv "VACUUM ANALYZE $table" >/dev/null || return 1
        n1=$(sqlv "SELECT count(*) FROM $table")
        b1=$(sqlv "SELECT pg_total_relation_size('$table')")
        S[${p}b6_$side]=$(awk -v b="$((b1 - b0))" -v n="$((n1 - n0))" 'BEGIN {print b / n}')
    done
    S[${p}b6_parts]=$(b6_parts sqlv "c.reltuples::numeric")
    printf '    %-14s %10.1f bytes per record made, hand-written %.1f\n' "${p}b6" \
        "${S[${p}b6_ext]}" "${S[${p}b6_hand]}" >&2
}

# size_run SIZE: one run of B1 (synchronous_commit on and off), B2 and B5 at
# SIZE records; which side goes first alternates from run to run
size_run() {
    local p=s$1_ first second
    if [ $((run % 2)) -eq 1 ]; then first=ext second=hand; else first=hand second=ext; fi
    pgbench_tps "${p}b1_${first}_on" "b1_$first.pgbench" "$CLIENTS" "$SC_ON"
    pgbench_tps "${p}b1_${second}_on" "b1_$second.pgbench" "$CLIENTS" "$SC_ON"
    pgbench_tps "${p}b1_${first}_off" "b1_$first.pgbench" "$CLIENTS" "$SC_OFF"
    pgbench_tps "${p}b1_${second}_off" "b1_$second.pgbench" "$CLIENTS" "$SC_OFF"
    if [ "$first" = ext ]; then first=b2_ext second=b2_pk; else first=b2_pk second=b2_ext; fi
    pgbench_tps "${p}$first" "$first.pgbench" "$CLIENTS"
    pgbench_tps "${p}$second" "$second.pgbench" "$CLIENTS"
    bench_purge "$p" || FAILED_ROWS+=("${p}b5")
}

# bench_sizes: load every size (and its B6), then the runs, sizes
# alternating within each run
declare -A S
bench_sizes() {
    local size DB REPLAY_KEYS t0=$SECONDS
    for size in "${SIZE_LIST[@]}"; do
        DB=idem_bench_$size
        say "size axis: $size records already in both tables (database $DB)"
        createdb "$DB" && sql -f bench/schema.sql && size_load "$size" || return 1
        size_b6 "$size" || FAILED_ROWS+=("s${size}_b6")
    done
    for run in $(seq "$RUNS"); do
        for size in "${SIZE_LIST[@]}"; do
            DB=idem_bench_$size REPLAY_KEYS=$size
            say "size axis, run $run of $RUNS: $size records"
            size_run "$size"
        done
    done
    SIZE_SECONDS=$((SECONDS - t0))
}
SIZE_SECONDS=
part sizes && { bench_sizes || FAILED_ROWS+=(sizes); }

# ---------------------------------------------------------------------------
# B9: the HTTP middleware of clients/node against the Redis middlewares, on
# one Express 5 app (bench/http/app.js: POST /orders, one business row, pg
# pool of 10), driven by wrk with 50 connections: new keys, then a duplicate
# storm (every key sent 5 times concurrently), the compared apps side by side;
# then each variant's app killed with kill -9 mid-storm (bench/http/fault.js).
# idempotency.retry_after is 20 ms there, the order of the handler's time:
# a duplicate of another process's request would poll every 10-20 ms at most
# (package-wait's duplicates of the app's own requests wait in memory).
# The references run new keys only: the package's transaction shape with
# no idempotency work, and with the least record a hand-written middleware
# keeps (bench/http/app.js). The ORM row: the package with the handler's
# insert through Prisma (package-prisma), new keys and storm, set against
# the package on the raw driver in the same runs.  python: clients/python's
# ASGI middleware on the same request (bench/http/asgi_app.py, Starlette
# under uvicorn with uvloop and httptools, as uvicorn[standard] installs
# it; pool of 10), run right after clients/node and reported as a ratio to it,
# python-asyncpg, the same middleware on an asyncpg pool of 10, and
# python-hand-record, the hand-record reference written in Python in the
# same app (the least record in that language's stack).
B9_VARIANTS=(none express-idempotency node-idempotency package)
B9_ORMS=(package-prisma)
B9_REFERENCES=(round-trips hand-record python-hand-record)
B9_PORT=${IDEM_B9_PORT:-18380}
b9_app_start() {  # VARIANT: the app on B9_PORT, its pid file registered
    local pidfile=$WORK/b9-app.pid i ready='^listening'
    if [[ $1 = python* ]]; then
        ready='Uvicorn running on'  # once bound ("Application startup complete" comes before)
        (BENCH_VARIANT=$1 PYTHONPATH=$PWD/clients/python/src exec /usr/bin/python3 -m uvicorn --app-dir bench/http asgi_app:app \
            --host 127.0.0.1 --port "$B9_PORT" --loop uvloop --http httptools --no-access-log) >"$WORK/b9-app.log" 2>&1 &
    else
        (cd bench/http && exec node app.js "$1" "$B9_PORT") >"$WORK/b9-app.log" 2>&1 &
    fi
    echo $! >"$pidfile"
    server_register "$pidfile" "$([[ $1 = python* ]] && echo python3 || echo node)"
    for i in $(seq 300); do
        grep -q "$ready" "$WORK/b9-app.log" && return 0
        sleep 0.1
    done
    say "B9: the $1 app did not start"; cat "$WORK/b9-app.log" >&2; return 1
}
# b9_app_ticks: the CPU time (clock ticks) the app's process has used
b9_app_ticks() { awk '{print $14 + $15}' "/proc/$(cat "$WORK/b9-app.pid")/stat"; }
b9_wrk() {  # NAME COPIES [SECONDS]: requests/s into R[NAME.run], duplicate rows into R[NAME_dup.run],
            # the app's and the server's CPU ms per request into R[NAME_app_cpu.run], R[NAME_server_cpu.run]
    local tag="r$run-$1" out rps n a0 s0 a1 s1 hz
    a0=$(b9_app_ticks) s0=$(server_ticks)
    out=$(WRK_TAG=$tag WRK_COPIES=$2 wrk -t"$THREADS" -c50 -d"${3:-$DURATION}s" -s bench/http/storm.lua \
          "http://127.0.0.1:$B9_PORT" 2>&1)
    a1=$(b9_app_ticks) s1=$(server_ticks)
    rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' <<<"$out")
    n=$(sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' <<<"$out")
    [[ $rps =~ ^[0-9.]+$ && $n -gt 0 ]] || { say "B9: wrk failed for $1"; echo "$out" >&2; FAILED_ROWS+=("$1"); return 1; }
    R[$1.$run]=$rps
    hz=$(getconf CLK_TCK)
    R[$1_app_cpu.$run]=$(awk -v d="$((a1 - a0))" -v hz="$hz" -v n="$n" 'BEGIN {print d * 1000 / hz / n}')
    R[$1_server_cpu.$run]=$(awk -v d="$((s1 - s0))" -v hz="$hz" -v n="$n" 'BEGIN {print d * 1000 / hz / n}')
    R[$1_dup.$run]=$(psql -X -At -d idem_bench_http -c "SELECT count(*) - count(DISTINCT idempotency_key)
        FROM bench_http_order WHERE idempotency_key LIKE '$tag-%'")
    printf '    %-26s %10.0f requests/s, %s duplicate rows, CPU ms per request: app %.3f, server %.3f\n' \
        "$1" "$rps" "${R[$1_dup.$run]}" "${R[$1_app_cpu.$run]}" "${R[$1_server_cpu.$run]}" >&2
}
bench_http_middlewares() {
    local v out
    say "B9: Express 5 POST /orders, pg pool 10, wrk 50 connections: no idempotency, express-idempotency" \
        "+ Redis, @node-idempotency + Redis, clients/node"
    ensure_node \
        && ensure_packages wrk python3-uvicorn python3-uvloop python3-httptools python3-starlette python3-psycopg-pool \
            python3-asyncpg \
        && (cd clients/node && npm ci --no-audit --no-fund --loglevel=error) \
        && (cd bench/http && npm ci --no-audit --no-fund --loglevel=error) \
        && (cd bench/http && PRISMA_SCHEMA_ENGINE_BINARY=/bin/true CHECKPOINT_DISABLE=1 \
            node_modules/.bin/prisma generate --schema schema.prisma >/dev/null) \
        && createdb idem_bench_http \
        && psql -X -q -v ON_ERROR_STOP=1 -d idem_bench_http -c 'CREATE EXTENSION idempotency' \
            -c 'CREATE TABLE bench_http_order (id bigserial PRIMARY KEY, idempotency_key text, sku text, qty int)' \
            -c 'CREATE TABLE bench_http_hand_record (key text PRIMARY KEY, request text, status int, response text)' \
            -c "ALTER DATABASE idem_bench_http SET idempotency.retry_after = '20ms'" \
        || return 1
    export BENCH_DSN="postgresql://postgres@/idem_bench_http?host=$PGHOST&port=$PGPORT"
    export BENCH_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
    local compared
    for run in $(seq "$RUNS"); do
        # what is compared runs side by side, in the opposite order every
        # other run (a drift of the machine or of the tables' sizes over a
        # run favours neither): the references, clients/node, clients/python
        compared=("${B9_REFERENCES[@]}" package python python-asyncpg)
        [ $((run % 2)) -eq 0 ] && compared=(python-asyncpg python package python-hand-record hand-record round-trips)
        for v in none express-idempotency node-idempotency "${compared[@]}" package-wait "${B9_ORMS[@]}"; do
            b9_app_start "$v" || { FAILED_ROWS+=("b9_$v"); continue; }
            # measured warm: a process's first seconds run its code cold
            # (V8 compiles it as it goes, each pooled connection parses its
            # statements and fills its caches); those seconds are kept apart
            b9_wrk "b9_${v}_cold" 1 "$WARMUP"
            [ "$v" = package-wait ] || b9_wrk "b9_${v}_new" 1
            [[ " ${B9_REFERENCES[*]} " = *" $v "* ]] || b9_wrk "b9_${v}_storm" 5
            server_stop "$WORK/b9-app.pid"
        done
    done
    # "Redis killed": kill -9 of redis-server mid-storm, then the same
    # server started again, empty (no persistence, as in the rest of make bench)
    export BENCH_REDIS_RESTART=$WORK/redis-restart.sh
    {
        echo '#!/bin/sh'
        echo "kill -9 \$(cat $REDIS_DIR/redis.pid)"
        echo "while kill -0 \$(cat $REDIS_DIR/redis.pid) 2>/dev/null; do sleep 0.05; done"
        printf 'runuser -u %s -- redis-server' "$CLUSTER_OS_USER"
        printf ' %q' "${REDIS_ARGS[@]}"
        echo
    } >"$BENCH_REDIS_RESTART"
    [ "$(id -u)" -eq 0 ] || sed -i 's/^runuser -u [^ ]* -- //' "$BENCH_REDIS_RESTART"
    chmod 755 "$BENCH_REDIS_RESTART"
    for mode in kill throw redis; do
        for v in "${B9_VARIANTS[@]}" python python-asyncpg; do
            [ "$mode" = redis ] && [[ $v != *idempotency ]] && continue  # no Redis there
            out=$(cd bench/http && node fault.js "$v" "$B9_PORT" "$mode-$v" "$mode") \
                || { say "B9: $mode fault run of $v failed"; FAILED_ROWS+=("b9_${mode}_$v"); continue; }
            B9_FAULT[$mode.$v]=$out
            printf '    %-32s %s\n' "$mode $v" "$out" >&2
        done
    done
    redis ping >/dev/null || { say "B9: redis-server did not come back"; return 1; }
    # one large response (20 MB, text and bytes), stored, against the
    # transfer alone and a bare bytea INSERT (bench/http/large.js)
    for kind in text binary; do
        B9_LARGE[$kind]=$(cd bench/http && node large.js "$B9_PORT" --rounds "$RUNS" $([ $kind = binary ] && echo --binary)) \
            || { say "B9: the large response ($kind) failed"; FAILED_ROWS+=("b9_large_$kind"); continue; }
        printf '%s\n' "${B9_LARGE[$kind]}" | sed 's/^/    /' >&2
    done
}
declare -A B9_FAULT B9_LARGE
part http && { bench_http_middlewares || FAILED_ROWS+=(b9); }
# --- end of B9 -------------------------------------------------------------

# ---------------------------------------------------------------------------
# B12: messages per second end to end, producer transaction -> relay ->
# RabbitMQ -> consumer effect, with clients/node's outbox relay and inbox
# consumer (bench/outbox/outbox_bench.js) against a plain publish after the
# commit and a consumer with automatic acks (no guarantee), alternated per
# run; $CLIENTS producers, one relay (batches of 100), one consumer
# (prefetch 50), pg pool 20.  The broker: Debian's rabbitmq-server started
# as scripts/rabbitmq.sh does, on IDEM_RABBITMQ_PORT, stopped at the end.
B12_PORT=${IDEM_RABBITMQ_PORT:-16436}
bench_outbox() {
    local dir=$CLUSTER_DIR/rabbitmq v out
    say "B12: outbox -> relay -> RabbitMQ -> inbox consumer against a plain publish and consume," \
        "$OUTBOX_MESSAGES messages per run, $CLIENTS producers"
    ensure_node && ensure_packages rabbitmq-server \
        && (cd clients/node && npm ci --no-audit --no-fund --loglevel=error) \
        && createdb idem_bench_outbox \
        && psql -X -q -v ON_ERROR_STOP=1 -d idem_bench_outbox -c 'CREATE EXTENSION idempotency' \
            -c 'CREATE TABLE bench_outbox_order (n int PRIMARY KEY)' \
            -c 'CREATE TABLE bench_outbox_effect (n int NOT NULL, message_id text NOT NULL)' \
        || return 1
    server_register "$dir/rabbitmq.pid" beam.smp
    server_register "$dir/epmd.pid" epmd
    rabbitmq_start "$dir" "$B12_PORT" || { rabbitmq_stop "$dir" "$B12_PORT"; return 1; }
    export BENCH_DSN="postgresql://postgres@/idem_bench_outbox?host=$PGHOST&port=$PGPORT"
    export BENCH_AMQP_URL="amqp://guest:guest@127.0.0.1:$B12_PORT"
    for run in $(seq "$RUNS"); do
        for v in plain outbox; do
            out=$(cd bench/outbox && node outbox_bench.js "$v" "$OUTBOX_MESSAGES" "$CLIENTS") \
                || { say "B12: the $v run failed"; FAILED_ROWS+=("b12_$v"); continue; }
            printf '    %s\n' "$out" >&2
            R[b12_$v.$run]=$(jq -r .rate <<<"$out")
            R[b12_${v}_extra.$run]=$(jq -r '.effects - .distinct_effects' <<<"$out")
            if [ "$v" = outbox ]; then
                R[b12_lag_max.$run]=$(jq -r .max_lag_seconds <<<"$out")
                R[b12_lag_mean.$run]=$(jq -r .mean_send_lag_seconds <<<"$out")
                R[b12_dup.$run]=$(jq -r .duplicates <<<"$out")
            fi
        done
    done
    rabbitmq_stop "$dir" "$B12_PORT"
}
part outbox && { ensure_packages jq && bench_outbox || FAILED_ROWS+=(b12); }
# --- end of B12 ------------------------------------------------------------

# ---------------------------------------------------------------------------
# The table
median() {
    printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {
        if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2];
        else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
# values NAME: the runs' numbers of a row
values() { local r; for r in $(seq "$RUNS"); do [ -n "${R[$1.$r]:-}" ] && echo "${R[$1.$r]}"; done; }
# total NAME: the sum of its values over the runs (0 when none)
total() { local t; t=$(values "$1" | paste -sd+); echo $(( ${t:-0} )); }
med() { median $(values "$1"); }
# per_run EXPR A B: median over runs of EXPR (awk, of a and b) of A and B
# (both from the same run)
per_run() {
    local r out=()
    for r in $(seq "$RUNS"); do
        [ -n "${R[$2.$r]:-}" ] && [ -n "${R[$3.$r]:-}" ] &&
            out+=("$(awk -v a="${R[$2.$r]}" -v b="${R[$3.$r]}" "BEGIN {print $1}")")
    done
    median "${out[@]}"
}
# ratio A B: median over runs of A/B
ratio() { per_run 'a / b' "$1" "$2"; }
fmt() { [ -n "$1" ] && printf "%.${2:-0}f" "$1" || printf 'n/a'; }
# verdict VALUE OP LIMIT
verdict() {
    [ -n "$1" ] || { echo "n/a"; return; }
    awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
        ok = (op == ">=") ? v >= l : (op == "<=") ? v <= l : v < l;
        print ok ? "met" : "MISSED" }'
}
row() { printf '| %-3s | %-44s | %12s | %-26s | %7s | %-10s | %-6s |\n' "$@"; }

OVER=$(awk -v r="$(ratio b1_preload b1_nopreload)" 'BEGIN {if (r != "") printf "%.4f", (1 - r) * 100}')
WAIT_OVER=$(awk -v r="$(ratio b3_preload b3_nopreload)" 'BEGIN {if (r != "") printf "%.4f", (1 - r) * 100}')
DUPS_EXT=$(total b3_ext_dup)
DUPS_HAND=$(total b3_hand_dup)

part base && {
echo
echo "idempotency bench — PostgreSQL $(sqlv 'SHOW server_version' | cut -d' ' -f1), $(nproc) cores," \
     "$CLIENTS clients ($HOT_CLIENTS for B3), $THREADS pgbench threads, -M $PROTOCOL," \
     "median of $RUNS runs of ${DURATION}s; ratio = extension / baseline, per run, then median"
echo
row row measurement extension baseline ratio target result
row --- -------------------------------------------- ------------ -------------------------- ------- ---------- ------
r=$(ratio b1_ext_on b1_hand_on)
row B1 "new key, synchronous_commit on (tps)" "$(fmt "$(med b1_ext_on)")" "hand-written $(fmt "$(med b1_hand_on)")" "$(fmt "$r" 2)" ">= 1.0" "$(verdict "$r" '>=' 1.0)"
r=$(ratio b1_ext_off b1_hand_off)
row B1 "new key, synchronous_commit off (tps)" "$(fmt "$(med b1_ext_off)")" "hand-written $(fmt "$(med b1_hand_off)")" "$(fmt "$r" 2)" ">= 1.0" "$(verdict "$r" '>=' 1.0)"
m=$(med b1_hot_pct)
row B1 "outcome updates HOT (n_tup_hot_upd, %)" "$(fmt "$m" 1)%" "$(total b1_hot) of $(total b1_upd)" "" ">= 90%" "$(verdict "$m" '>=' 90)"
r=$(ratio b2_ext b2_hand)
row B2 "replay of a finished key (tps)" "$(fmt "$(med b2_ext)")" "hand-written $(fmt "$(med b2_hand)")" "$(fmt "$r" 2)" ">= 1.5" "$(verdict "$r" '>=' 1.5)"
r=$(ratio b2_ext b2_pk)
row B2 "replay vs bare primary-key SELECT" "" "PK SELECT $(fmt "$(med b2_pk)")" "$(fmt "$r" 2)" ">= 0.90" "$(verdict "$r" '>=' 0.90)"
r=$(ratio b2_ext b2_redis)
row B2 "replay vs Redis GET (GET/s)" "" "Redis GET $(fmt "$(med b2_redis)")" "$(fmt "$r" 2)" "" ""
r=$(ratio b3_ext b3_hand)
row B3 "hot keys: $HOT_CLIENTS clients, $HOT_KEYS keys (tps)" "$(fmt "$(med b3_ext)")" "hand-written $(fmt "$(med b3_hand)")" "$(fmt "$r" 2)" ">= 1.0" "$(verdict "$r" '>=' 1.0)"
row B3 "duplicate business effects (all runs)" "$DUPS_EXT" "hand-written $DUPS_HAND" "" "0" "$([ "$DUPS_EXT" -eq 0 ] && echo met || echo MISSED)"
if [ "$HAS_LEASE" -gt 0 ]; then
    r=$(ratio b4_ext b1_ext_off)
    row B4 "leased: claim+commit, finish+commit (tps)" "$(fmt "$(med b4_ext)")" "in-transaction $(fmt "$(med b1_ext_off)")" "$(fmt "$r" 2)" "" ""
else
    row B4 "leased flow" "not yet available" "(idem_claim has no lease)" "" "" ""
fi
r=$(awk -v a="$B6_EXT_INS" -v b="$B6_HAND_INS" 'BEGIN {print a / b}')
row B6 "bytes per record inserted directly" "$(fmt "$B6_EXT_INS")" "hand-written $(fmt "$B6_HAND_INS")" "$(fmt "$r" 2)" "" ""
r=$(awk -v a="$B6_EXT_INS" -v b="$B6_REDIS" 'BEGIN {print a / b}')
row B6 "bytes per record vs Redis used_memory" "" "Redis $(fmt "$B6_REDIS")" "$(fmt "$r" 2)" "" ""
r=$(ratio b7_ext b7_redis)
row B7 "Python client: extension vs Redis lock (req/s)" "$(fmt "$(med b7_ext)")" "Redis lock + PG $(fmt "$(med b7_redis)")" "$(fmt "$r" 2)" ">= 1.5" "$(verdict "$r" '>=' 1.5)"
B7_DUP_EXT=$(total b7_dup_ext)
B7_DUP_REDIS=$(total b7_dup_redis)
row B7 "duplicate effects, client killed (all runs)" "$B7_DUP_EXT" "Redis lock + PG $B7_DUP_REDIS" "" "0" "$([ "$B7_DUP_EXT" -eq 0 ] && echo met || echo MISSED)"
r=$(ratio b10_idempotent b10_redis_lock)
row B10 "Spring: @Idempotent vs Redis lock (calls/s)" "$(fmt "$(med b10_idempotent)")" "Redis lock + PG $(fmt "$(med b10_redis_lock)")" "$(fmt "$r" 2)" "" ""
B10_DUP=$(total b10_dup_idempotent)
row B10 "Spring: duplicate payments, storm (all runs)" "$B10_DUP" "Redis lock + PG $(total b10_dup_redis_lock)" "" "0" "$([ "$B10_DUP" -eq 0 ] && echo met || echo MISSED)"
if [ "$HAS_SCOPE_GRANTS" -gt 0 ]; then
    r=$(ratio b8_delegated_b1 b8_grants_b1)
    row B8 "new key: scope grant (delegated) vs grants" "$(fmt "$(med b8_delegated_b1)")" "table grants $(fmt "$(med b8_grants_b1)")" "$(fmt "$r" 2)" "" ""
    r=$(ratio b8_delegated_b2 b8_grants_b2)
    row B8 "replay: scope grant (delegated) vs grants" "$(fmt "$(med b8_delegated_b2)")" "table grants $(fmt "$(med b8_grants_b2)")" "$(fmt "$r" 2)" "" ""
    r=$(ratio b8_delegated_b1 b8_rls_b1)
    row B8 "new key: delegated vs row level security" "" "RLS recipe $(fmt "$(med b8_rls_b1)")" "$(fmt "$r" 2)" "" ""
    r=$(ratio b8_delegated_b2 b8_rls_b2)
    row B8 "replay: delegated vs row level security" "" "RLS recipe $(fmt "$(med b8_rls_b2)")" "$(fmt "$r" 2)" "" ""
fi
row B1 "counter overhead, sync commit off (tps)" "$(fmt "$(med b1_preload)") counting" "$(fmt "$(med b1_nopreload)") not preloaded" "$(fmt "$OVER" 2)%" "< 2%" "$(verdict "$OVER" '<' 2)"
row B3 "counters + wait histogram, hot keys (tps)" "$(fmt "$(med b3_preload)") counting" "$(fmt "$(med b3_nopreload)") not preloaded" "$(fmt "$WAIT_OVER" 2)%" "< 2%" "$(verdict "$WAIT_OVER" '<' 2)"
echo
echo "B3 effects written by the extension's claimers: $(values b3_ext_eff | paste -sd' ') (per run);" \
     "B6: $B6_RECORDS records inserted directly, results of ~$B6_RESULT bytes as text: $B6_PARTS" \
     "(B5 and B6 made by requests: the size axis below)."
echo "B7: $CLIENTS client processes for requests/s; $HOT_CLIENTS on $HOT_KEYS hot keys per round, 3 rounds per run," \
     "a client killed after its COMMIT before each round (killed: Redis $(values b7_killed_redis | paste -sd' '), extension $(values b7_killed_ext | paste -sd' '))."
echo "B10: Java 17, Spring 4.3 (clients/java), 2000 requests x 5 sends shuffled over 16 threads, a busy answer" \
     "sent again after 1 ms; the lock is SET NX PX + a compare-and-delete Lua script over a minimal RESP client" \
     "in the test sources (Debian has no Java Redis client), ordered outside the transaction."
echo "Runs (tps, GET/s, rows/s or ms, in run order):"
for name in b1_ext_on b1_hand_on b1_ext_off b1_hand_off b2_ext b2_hand b2_pk b2_redis b3_ext b3_hand \
            b4_ext b7_ext b7_redis b10_idempotent b10_redis_lock b1_hot_pct b1_preload b1_nopreload \
            b3_preload b3_nopreload b3_waits; do
    v=$(values "$name" | awk '{printf ($1 >= 100 ? "%s%.0f" : "%s%.2f"), (NR > 1 ? " " : ""), $1}')
    [ -n "$v" ] && printf '  %-13s %s\n' "$name" "$v"
done
}

# --- B11 table -----------------------------------------------------------
{ part base || part server; } && {
echo
echo "B11 — a new key as the packages send it (BEGIN, claim with wait => false and idem_fingerprint of the" \
     "request's JSON, the business insert, idem_finish of the stored response, COMMIT), $CLIENTS clients," \
     "median of $RUNS runs of ${DURATION}s; server CPU = all PostgreSQL processes' CPU time over the run" \
     "per transaction (/proc); load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
row row measurement extension baseline ratio target result
row --- -------------------------------------------- ------------ -------------------------- ------- ---------- ------
r=$(ratio b11_package_cpu b11_hand_cpu)
row B11 "server CPU per request (ms)" "$(fmt "$(med b11_package_cpu)" 3)" "hand-record $(fmt "$(med b11_hand_cpu)" 3)" "$(fmt "$r" 2)" "" ""
d=$(per_run 'a - b' b11_package_cpu b11_hand_cpu)
row B11 "server CPU beyond the hand-written record (ms)" "$(fmt "$d" 3)" "" "" "" ""
r=$(ratio b11_package_cpu b11_round_trips_cpu)
row B11 "server CPU vs the bare round trips" "" "round-trips $(fmt "$(med b11_round_trips_cpu)" 3)" "$(fmt "$r" 2)" "" ""
r=$(ratio b11_package b11_hand)
row B11 "new keys (tps)" "$(fmt "$(med b11_package)")" "hand-record $(fmt "$(med b11_hand)")" "$(fmt "$r" 2)" "" ""
echo
echo "Runs (ms of server CPU per transaction, then tps, in run order):"
for name in b11_package_cpu b11_hand_cpu b11_round_trips_cpu b11_package b11_hand b11_round_trips; do
    v=$(values "$name" | awk '{printf ($1 >= 100 ? "%s%.0f" : "%s%.3f"), (NR > 1 ? " " : ""), $1}')
    [ -n "$v" ] && printf '  %-20s %s\n' "$name" "$v"
done
}

# --- B9 table ------------------------------------------------------------
# b9_runs A B: A / B in each run, for the per-run figures after a median
b9_runs() {
    local r
    for r in $(seq "$RUNS"); do
        [ -n "${R[$1.$r]:-}" ] && [ -n "${R[$2.$r]:-}" ] &&
            printf '%s ' "$(fmt "$(awk -v a="${R[$1.$r]}" -v b="${R[$2.$r]}" 'BEGIN {print a / b}')" 2)"
    done
}
b9_row() { printf '| %-34s | %16s | %16s | %16s | %16s |\n' "$@"; }
b9_field() { sed -n "s/.* $2=\([0-9]*\).*/\1/p; s/^$2=\([0-9]*\).*/\1/p" <<<"${B9_FAULT[$1]:-}"; }
# b9_vs_redis NAME: median over runs of NAME's new keys against the faster
# Redis variant of the same run
b9_vs_redis() {
    local r out=()
    for r in $(seq "$RUNS"); do
        [ -n "${R[b9_$1_new.$r]:-}" ] && [ -n "${R[b9_node-idempotency_new.$r]:-}" ] \
            && [ -n "${R[b9_express-idempotency_new.$r]:-}" ] &&
            out+=("$(awk -v a="${R[b9_$1_new.$r]}" -v b="${R[b9_node-idempotency_new.$r]}" \
                -v c="${R[b9_express-idempotency_new.$r]}" 'BEGIN {print a / (b > c ? b : c)}')")
    done
    median "${out[@]}"
}
part http && {
echo
echo "B9 — Express 5 POST /orders, pg pool 10, wrk -t$THREADS -c50 -d${DURATION}s, median of $RUNS runs;" \
     "ratio = variant / clients/node (package) within each run, then median. A shared, loaded machine:" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
b9_row "" "no idempotency" "express-idempotency" "@node-idempotency" "clients/node"
b9_row --- --- --- --- ---
cells=()
for v in "${B9_VARIANTS[@]}"; do cells+=("$(fmt "$(med "b9_${v}_new")") ($(fmt "$(ratio "b9_${v}_new" b9_package_new)" 2)x)"); done
b9_row "new keys, requests/s" "${cells[@]}"
cells=()
for v in "${B9_VARIANTS[@]}"; do cells+=("$(fmt "$(med "b9_${v}_storm")") ($(fmt "$(ratio "b9_${v}_storm" b9_package_storm)" 2)x)"); done
b9_row "storm (5 copies), requests/s" "${cells[@]}"
cells=()
for v in "${B9_VARIANTS[@]}"; do cells+=("$(total "b9_${v}_storm_dup")"); done
b9_row "storm: duplicate rows (all runs)" "${cells[@]}"
for v in "${B9_ORMS[@]}"; do
    b9_row "new keys, ${v#package-} in the handler" – – – \
        "$(fmt "$(med "b9_${v}_new")") ($(fmt "$(ratio "b9_${v}_new" b9_package_new)" 2)x)"
    b9_row "storm, ${v#package-} in the handler" – – – \
        "$(fmt "$(med "b9_${v}_storm")") ($(fmt "$(ratio "b9_${v}_storm" b9_package_storm)" 2)x)"
    b9_row "storm: duplicate rows, ${v#package-}" – – – "$(total "b9_${v}_storm_dup")"
done
cells=()
for v in "${B9_VARIANTS[@]}"; do cells+=("$(b9_field "kill.$v" duplicated) / $(b9_field "kill.$v" unanswered) / $(b9_field "kill.$v" stuck)"); done
b9_row "kill -9: 2+ rows / no 2xx / 409" "${cells[@]}"
cells=()
for v in "${B9_VARIANTS[@]}"; do
    if [[ $v != *idempotency ]]; then cells+=("not used")
    elif [ "$(b9_field "redis.$v" crashed)" = 1 ]; then cells+=("app died; $(b9_field "redis.$v" duplicated) / $(b9_field "redis.$v" unanswered)")
    else cells+=("$(b9_field "redis.$v" duplicated) / $(b9_field "redis.$v" unanswered)"); fi
done
b9_row "Redis killed: 2+ rows / no 2xx" "${cells[@]}"
cells=()
for v in "${B9_VARIANTS[@]}"; do cells+=("$(b9_field "throw.$v" duplicated) / $(b9_field "throw.$v" stuck) / $(b9_field "throw.$v" failed)"); done
b9_row "handler throws: 2+ rows / 409 / 5xx" "${cells[@]}"
echo
echo "clients/node against the faster Redis variant on new keys: $(fmt "$(b9_vs_redis package)" 2)x (target >= 1.0);" \
     "storm with duplicates waiting (waitFor 10 s) against 409 at once: $(fmt "$(ratio b9_package-wait_storm b9_package_storm)" 2)x (target >= 1.0)."
echo "clients/python (ASGI: Starlette under uvicorn, uvloop, httptools, psycopg pool of 10, run after clients/node): new keys" \
     "$(fmt "$(med b9_python_new)") requests/s, $(fmt "$(ratio b9_python_new b9_package_new)" 2)x clients/node (target >= 0.9;" \
     "per run: $(b9_runs b9_python_new b9_package_new));" \
     "storm (5 copies) $(fmt "$(med b9_python_storm)") requests/s ($(fmt "$(ratio b9_python_storm b9_package_storm)" 2)x)," \
     "duplicate rows (all runs) $(total b9_python_storm_dup); kill -9: 2+ rows / no 2xx / 409" \
     "$(b9_field kill.python duplicated) / $(b9_field kill.python unanswered) / $(b9_field kill.python stuck)" \
     "of $(b9_field kill.python keys) keys; handler throws: 2+ rows / 409 / 5xx" \
     "$(b9_field throw.python duplicated) / $(b9_field throw.python stuck) / $(b9_field throw.python failed)."
echo "clients/python on asyncpg (the same middleware and app on an asyncpg pool of 10, BENCH_VARIANT=python-asyncpg):" \
     "new keys $(fmt "$(med b9_python-asyncpg_new)") requests/s, $(fmt "$(ratio b9_python-asyncpg_new b9_package_new)" 2)x" \
     "clients/node (target >= 0.9; per run: $(b9_runs b9_python-asyncpg_new b9_package_new))," \
     "$(fmt "$(ratio b9_python-asyncpg_new b9_python_new)" 2)x on psycopg ($(b9_runs b9_python-asyncpg_new b9_python_new));" \
     "storm (5 copies) $(fmt "$(med b9_python-asyncpg_storm)") requests/s" \
     "($(fmt "$(ratio b9_python-asyncpg_storm b9_package_storm)" 2)x), duplicate rows (all runs)" \
     "$(total b9_python-asyncpg_storm_dup); kill -9: 2+ rows / no 2xx / 409 $(b9_field kill.python-asyncpg duplicated) /" \
     "$(b9_field kill.python-asyncpg unanswered) / $(b9_field kill.python-asyncpg stuck) of" \
     "$(b9_field kill.python-asyncpg keys) keys; handler throws: 2+ rows / 409 / 5xx" \
     "$(b9_field throw.python-asyncpg duplicated) / $(b9_field throw.python-asyncpg stuck) /" \
     "$(b9_field throw.python-asyncpg failed)."
echo "kill -9: the app killed after 1000 answers of a 50-client storm, restarted, every key sent retried up to 5 times" \
     "(Retry-After honoured, at most 2 s); keys sent: $(for v in "${B9_VARIANTS[@]}"; do printf '%s %s; ' "$v" "$(b9_field "kill.$v" keys)"; done)"
echo "Redis killed: redis-server killed with kill -9 after 1000 answers of the same storm and started again (empty)," \
     "the storm run on for 1000 more answers, then every key retried the same way (app died: the Node.js process" \
     "exited on its own and was started again for the retries)." \
     "Handler throws: 100 keys sent once to a handler that fails after its insert the first time it sees a key," \
     "then retried the same way; 409 / 5xx: keys with an order whose last answer was that (no 2xx)."
echo "References, new keys, on one pooled connection in three round trips as clients/node: with no idempotency" \
     "work $(fmt "$(med b9_round-trips_new)") requests/s ($(fmt "$(b9_vs_redis round-trips)" 2)x the faster Redis variant)," \
     "with a hand-written record (INSERT ... ON CONFLICT DO NOTHING, UPDATE with the response)" \
     "$(fmt "$(med b9_hand-record_new)") ($(fmt "$(b9_vs_redis hand-record)" 2)x); clients/node" \
     "$(fmt "$(ratio b9_package_new b9_hand-record_new)" 2)x the hand-written record (per run: $(b9_runs b9_package_new b9_hand-record_new))," \
     "$(fmt "$(ratio b9_package_new b9_round-trips_new)" 2)x the round trips ($(b9_runs b9_package_new b9_round-trips_new))" \
     "(targets >= 1.0 and >= 0.85); the hand-written record itself $(fmt "$(ratio b9_hand-record_new b9_round-trips_new)" 2)x" \
     "the round trips ($(b9_runs b9_hand-record_new b9_round-trips_new)): what a durable record in this transaction costs."
echo "The same hand-written record in Python (bench/http/asgi_app.py, BENCH_VARIANT=python-hand-record: Starlette" \
     "under uvicorn, psycopg pool of 10, no middleware) $(fmt "$(med b9_python-hand-record_new)") requests/s," \
     "$(fmt "$(ratio b9_python-hand-record_new b9_hand-record_new)" 2)x the Node.js one" \
     "(per run: $(b9_runs b9_python-hand-record_new b9_hand-record_new)): the language's and its stack's share of" \
     "the clients/python / clients/node target; clients/python $(fmt "$(ratio b9_python_new b9_python-hand-record_new)" 2)x" \
     "the Python hand-written record ($(b9_runs b9_python_new b9_python-hand-record_new)), against clients/node's" \
     "$(fmt "$(ratio b9_package_new b9_hand-record_new)" 2)x the Node.js one."
# R[b9_NAME_cpu.run]: the app's and the server's CPU ms per request on new keys, added
for v in "${B9_REFERENCES[@]}" package python python-asyncpg; do
    for r in $(seq "$RUNS"); do
        [ -n "${R[b9_${v}_new_app_cpu.$r]:-}" ] && R[b9_${v}_cpu.$r]=$(awk -v a="${R[b9_${v}_new_app_cpu.$r]}" \
            -v b="${R[b9_${v}_new_server_cpu.$r]}" 'BEGIN {print a + b}')
    done
done
# b9_cpu NAME: "app + server = total" CPU ms per request on new keys (medians)
b9_cpu() {
    printf '%s + %s = %s' "$(fmt "$(med "b9_$1_new_app_cpu")" 3)" "$(fmt "$(med "b9_$1_new_server_cpu")" 3)" \
        "$(fmt "$(med "b9_$1_cpu")" 3)"
}
echo "CPU per request on new keys, ms, the app's process + every PostgreSQL process = total (medians):" \
     "round trips $(b9_cpu round-trips); hand-written record" \
     "$(b9_cpu hand-record); clients/node $(b9_cpu package); Python hand-written record $(b9_cpu python-hand-record);" \
     "clients/python $(b9_cpu python); on asyncpg $(b9_cpu python-asyncpg). Total CPU per request," \
     "clients/node / hand-written record" \
     "$(fmt "$(ratio b9_package_cpu b9_hand-record_cpu)" 2) (per run: $(b9_runs b9_package_cpu b9_hand-record_cpu)), /" \
     "round trips $(fmt "$(ratio b9_package_cpu b9_round-trips_cpu)" 2); clients/python / clients/node" \
     "$(fmt "$(ratio b9_python_cpu b9_package_cpu)" 2) ($(b9_runs b9_python_cpu b9_package_cpu)), on asyncpg" \
     "$(fmt "$(ratio b9_python-asyncpg_cpu b9_package_cpu)" 2) ($(b9_runs b9_python-asyncpg_cpu b9_package_cpu))."
echo "Cold: every app above served ${WARMUP} s of new keys right after its start before it was measured (V8 compiles" \
     "a process's code as it runs it, each pooled connection parses its statements and fills its caches); over those" \
     "first seconds (medians): clients/node $(fmt "$(med b9_package_cold)") requests/s, the hand-written record" \
     "$(fmt "$(med b9_hand-record_cold)") ($(fmt "$(ratio b9_package_cold b9_hand-record_cold)" 2)x), the round trips" \
     "$(fmt "$(med b9_round-trips_cold)") ($(fmt "$(ratio b9_package_cold b9_round-trips_cold)" 2)x), clients/python" \
     "$(fmt "$(med b9_python_cold)") ($(fmt "$(ratio b9_python_cold b9_package_cold)" 2)x clients/node), on asyncpg" \
     "$(fmt "$(med b9_python-asyncpg_cold)") ($(fmt "$(ratio b9_python-asyncpg_cold b9_package_cold)" 2)x)."
echo "A large response (bench/http/large.js, 20 MB, one request at a time, $RUNS rounds): seconds to the last byte" \
     "and the app's longest event-loop block in ms (medians; largest block): the transfer alone (none), node-postgres" \
     "sending it as one bytea parameter of an INSERT (floor), clients/node storing it (package), and its replay."
for kind in text binary; do
    printf '%s\n' "${B9_LARGE[$kind]:-}" | awk -v k=$kind 'NF {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        printf "  %s %-8s %s s, block %s ms (largest %s)\n", k, $1, f["seconds"], f["block_ms"], f["block_max_ms"] }'
done
}
# --- end of B9 table -------------------------------------------------------

# --- B12 table -------------------------------------------------------------
part outbox && {
echo
echo "B12 — producer transaction -> relay -> RabbitMQ -> consumer effect, $OUTBOX_MESSAGES messages per run," \
     "$CLIENTS producers, median of $RUNS runs; ratio within each run, then median. Load average" \
     "$(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
row row measurement extension baseline ratio target result
row --- -------------------------------------------- ------------ -------------------------- ------- ---------- ------
r=$(ratio b12_outbox b12_plain)
row B12 "outbox + inbox, end to end (messages/s)" "$(fmt "$(med b12_outbox)")" "plain pub/sub $(fmt "$(med b12_plain)")" "$(fmt "$r" 2)" "" ""
row B12 "relay lag: oldest unsent message, max (s)" "$(fmt "$(med b12_lag_max)" 2)" "" "" "" ""
row B12 "relay lag: enqueue to mark sent, mean (s)" "$(fmt "$(med b12_lag_mean)" 3)" "" "" "" ""
row B12 "effects doubled (all runs)" "$(total b12_outbox_extra)" "plain $(total b12_plain_extra)" "" "0" "$([ "$(total b12_outbox_extra)" -eq 0 ] && echo met || echo MISSED)"
echo
echo "B12: bench/outbox/outbox_bench.js; clients/node's createRelay (batchSize 100, idleDelayMs 20) and createConsumer" \
     "(prefetch 50; idem_once and the effect row in one transaction, ack after the commit) against a publish after" \
     "the commit (no confirms, not persistent) and automatic acks, the effect row in autocommit; duplicates acked by" \
     "the inbox: $(total b12_dup) (all runs). Lag: idempotency_stats' outbox_lag_seconds sampled every 100 ms, and" \
     "outbox_send_lag_seconds_sum / outbox_sent over the run."
}
# --- end of B12 table ------------------------------------------------------

# --- size axis table -------------------------------------------------------
# one line per measurement, one column per size: value (ratio), then target
size_cell() {  # SIZE A B: "a / b = ratio" of rows sSIZE_A and sSIZE_B
    local p=s$1_ a b
    a=$(med "$p$2") b=$(med "$p$3")
    printf '%s / %s = %s' "$(fmt "$a" "$(decimals "$a")")" "$(fmt "$b" "$(decimals "$b")")" \
        "$(fmt "$(ratio "$p$2" "$p$3")" 2)"
}
decimals() { awk -v v="$1" 'BEGIN {print (v != "" && v < 100) ? 2 : 0}'; }  # tps: 0, ms: 2
size_verdicts() {  # OP LIMIT RATIO...: met when every ratio meets it
    local op=$1 limit=$2 r out=met
    shift 2
    for r in "$@"; do
        [ "$(verdict "$r" "$op" "$limit")" = met ] || out=MISSED
    done
    echo "$out"
}
part sizes && {
echo
echo "Size axis — the same rows with N records already in both tables; $CLIENTS clients, median of $RUNS runs" \
     "of ${DURATION}s, ratio per run then median; sizes alternate within each run and the side that goes" \
     "first alternates from run to run. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" \
     "(a shared machine: other work ran beside it). Loading and running the size axis took ${SIZE_SECONDS:-?} s."
echo
header="| row | measurement"
sep="| --- | ---"
for size in "${SIZE_LIST[@]}"; do header+=" | $size records"; sep+=" | ---"; done
echo "$header | target | result |"
echo "$sep | --- | --- |"
size_line() {  # ROW LABEL A B OP LIMIT TARGET-TEXT
    local line="| $1 | $2" ratios=() size
    for size in "${SIZE_LIST[@]}"; do
        line+=" | $(size_cell "$size" "$3" "$4")"
        ratios+=("$(ratio "s${size}_$3" "s${size}_$4")")
    done
    echo "$line | $7 | $(size_verdicts "$5" "$6" "${ratios[@]}") |"
}
size_line B1 "new key, synchronous_commit on: extension / hand-written (tps)" b1_ext_on b1_hand_on '>=' 1.0 ">= 1.0"
size_line B1 "new key, synchronous_commit off: extension / hand-written (tps)" b1_ext_off b1_hand_off '>=' 1.0 ">= 1.0"
size_line B2 "replay / bare primary-key SELECT (tps)" b2_ext b2_pk '>=' 0.95 ">= 0.95"
line="| B5 | purge beside $CLIENTS claiming clients (rows/s)"
verdicts=()
for size in "${SIZE_LIST[@]}"; do
    m=$(med "s${size}_b5_rows"); line+=" | $(fmt "$m")"; verdicts+=("$m")
done
echo "$line | >= 300000 | $(size_verdicts '>=' 300000 "${verdicts[@]}") |"
size_line B5 "claims' p99 (ms): purging / without purge" b5_p99_purge b5_p99_quiet '<=' 1.5 "<= 1.5"
line="| B6 | bytes per record made by claims and outcomes: extension / hand-written"
verdicts=()
for size in "${SIZE_LIST[@]}"; do
    p=s${size}_
    r=$(awk -v a="${S[${p}b6_ext]:-}" -v b="${S[${p}b6_hand]:-}" 'BEGIN {if (a != "" && b > 0) print a / b}')
    line+=" | $(fmt "${S[${p}b6_ext]:-}" 1) / $(fmt "${S[${p}b6_hand]:-}" 1) = $(fmt "$r" 3)"
    verdicts+=("$r")
done
echo "$line | <= 1.0 | $(size_verdicts '<=' 1.0 "${verdicts[@]}") |"
echo
echo "B6 at each size: $B6_RECORDS records made per table after the load, growth of pg_total_relation_size after VACUUM;" \
     "bytes per record of the whole tables by part:"
for size in "${SIZE_LIST[@]}"; do echo "  $size: ${S[s${size}_b6_parts]:-n/a}"; done
echo "Runs (tps, rows/s or ms, in run order):"
for size in "${SIZE_LIST[@]}"; do
    for name in b1_ext_on b1_hand_on b1_ext_off b1_hand_off b2_ext b2_pk b5_rows b5_p99_quiet b5_p99_purge; do
        v=$(values "s${size}_$name" | awk '{printf ($1 >= 100 ? "%s%.0f" : "%s%.2f"), (NR > 1 ? " " : ""), $1}')
        [ -n "$v" ] && printf '  %-26s %s\n' "s${size}_$name" "$v"
    done
done
}

if [ ${#FAILED_ROWS[@]} -gt 0 ]; then
    say "rows that failed to run: ${FAILED_ROWS[*]}"
    exit 1
fi
