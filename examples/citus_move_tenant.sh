#!/usr/bin/env bash
# examples/citus_move_tenant.sh — move a tenant's shard group to another
# node of a Citus cluster while the application runs, and start the move
# again when Citus's distributed deadlock detection cancels it
# (docs/citus.md, "Moving a tenant").
#
#   citus_move_tenant.sh SCOPE TARGET_HOST TARGET_PORT [ATTEMPTS]
#
# Connects to the coordinator with the usual libpq variables (PGHOST,
# PGPORT, PGDATABASE, PGUSER; a role that owns the tables or a superuser).
# The shard of SCOPE in idempotent_record names the co-location group:
# records, tokens and the tenant's co-located tables move together, with
# citus_move_shard_placement's default shard_transfer_mode ('auto').
#
# A move of a busy tenant may be cancelled as the victim of a distributed
# deadlock (SQLSTATE 40P01): a request whose delegated call holds the
# shard's metadata lock on the source node, and whose next statement waits
# on its own node for the lock the move took there.  Nothing of a
# cancelled move stays (Citus removes its leftovers at the next move); the
# script tries again, at most ATTEMPTS times (default 10).  Any other error
# ends it.  Prints one line per attempt; exits 0 once the shard group is on
# the target (also when it already was), 1 otherwise.
set -uo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 SCOPE TARGET_HOST TARGET_PORT [ATTEMPTS]" >&2
    exit 2
fi
scope=$1 target_host=$2 target_port=$3 attempts=${4:-10}

sql() { psql -X -q -At -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "$@"; }

for attempt in $(seq 1 "$attempts"); do
    # where the shard is now, read again before each attempt
    placement=$(sql -v scope="$scope" <<'SQL'
SELECT s.shardid || ' ' || p.nodename || ' ' || p.nodeport
  FROM (SELECT get_shard_id_for_distribution_column('idempotent_record', :'scope') AS shardid) s
  JOIN pg_dist_shard_placement p USING (shardid)
SQL
    ) || exit 1
    read -r shard source_host source_port <<<"$placement"
    if [ "$source_host" = "$target_host" ] && [ "$source_port" = "$target_port" ]; then
        echo "attempt $attempt: shard $shard of $scope is on $target_host:$target_port"
        exit 0
    fi
    err=$(sql -v shard="$shard" -v sh="$source_host" -v sp="$source_port" \
              -v th="$target_host" -v tp="$target_port" 2>&1 >/dev/null <<'SQL'
SELECT citus_move_shard_placement(:shard, :'sh', :sp, :'th', :tp)
SQL
    )
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "attempt $attempt: moved shard $shard of $scope from $source_host:$source_port to $target_host:$target_port"
        exit 0
    fi
    if ! grep -q 'ERROR:  40P01:' <<<"$err"; then
        echo "attempt $attempt: the move failed: $err" >&2
        exit 1
    fi
    echo "attempt $attempt: cancelled as a deadlock victim (40P01); again"
done
echo "the move of $scope was cancelled $attempts times" >&2
exit 1
