#!/usr/bin/env bash
# examples/leased_payment.sh — act two of `make demo`: a leased claim for a
# side effect outside the database (a payment provider).  Run by
# scripts/demo.sh against its cluster (PGHOST/PGPORT/PGUSER set), database
# given as $1.  Prints a timeline; exits non-zero when a check fails.
#
#   worker A   claims pay-1001 with a 3 s lease, charges the provider,
#              saves the recovery point "charged", then its process is
#              killed before it can record the outcome
#   client     retries: in_progress while A's lease lasts, then takes over
#              (fence 2, recovery point "charged"), does not charge again,
#              finishes with fence 2
#   worker A   comes back late and tries to finish with fence 1: IK003
set -uo pipefail
DB=$1
KEY=pay-1001
SCOPE=payments
start=$(date +%s%N)

sql() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" "$@"; }
# one timeline line: seconds since the start, who, what
at() {
    local ms=$(( ($(date +%s%N) - start) / 1000000 ))
    printf '  %3d.%d s  %-8s %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$1" "$2"
}

sql <<'SQL' || exit 1
CREATE TABLE IF NOT EXISTS shop.provider_charges (
    charge_id   text PRIMARY KEY,
    request_key text NOT NULL,
    amount      int  NOT NULL
);
COMMENT ON TABLE shop.provider_charges IS
'stands for an external payment provider: a row is a charge that no database rollback can undo';
SQL

echo
echo "Act two: a leased payment, a crashed worker, a takeover, a stale finish"

# Worker A in a process of its own: claim, charge, checkpoint, then hang
# until it is killed (as if the machine running it died).
work_dir=$(mktemp -d)
psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" >"$work_dir/a.out" 2>&1 <<SQL &
SELECT 'claim ' || outcome || ' fence ' || fence
  FROM idem_claim('$KEY', scope => '$SCOPE', lease => '3 seconds');
INSERT INTO shop.provider_charges VALUES ('ch_1', '$KEY', 4200);
SELECT idem_checkpoint('$KEY', 'charged', scope => '$SCOPE', fence => 1);
SELECT 'checkpointed ' || pg_backend_pid();
SELECT pg_sleep(600);
SQL
worker_a=$!
until grep -q '^checkpointed' "$work_dir/a.out" 2>/dev/null; do
    kill -0 "$worker_a" 2>/dev/null || { cat "$work_dir/a.out"; exit 1; }
    sleep 0.1
done
at "worker A" "$(sed -n 1p "$work_dir/a.out"), lease 3 s; charges the provider (ch_1); checkpoint \"charged\""
backend_a=$(sed -n 's/^checkpointed //p' "$work_dir/a.out")
kill -9 "$worker_a"; wait "$worker_a" 2>/dev/null
sql -c "SELECT pg_terminate_backend($backend_a)" >/dev/null
at "worker A" "killed (process and backend) before recording the outcome"

# The client retries until it gets the key.
while :; do
    answer=$(sql -F ' ' -c "SELECT outcome, fence, coalesce(recovery_point, '-'),
                                   coalesce(extract(epoch FROM retry_after)::numeric(6,1)::text, '-')
                              FROM idem_claim('$KEY', scope => '$SCOPE', lease => '30 seconds')") || exit 1
    read -r outcome fence point retry <<<"$answer"
    if [ "$outcome" = in_progress ]; then
        at "client" "retry: in_progress, retry after $retry s (A's lease)"
        sleep "$retry"
        continue
    fi
    break
done
at "client" "retry: $outcome with fence $fence, recovery point \"$point\""
if [ "$point" = charged ]; then
    at "client" "resumes after the charge: no second charge, records the receipt"
else
    sql -c "INSERT INTO shop.provider_charges VALUES ('ch_2', '$KEY', 4200)"
    at "client" "charges the provider (ch_2)"
fi
sql -c "SELECT idem_finish('$KEY', '{\"charge\": \"ch_1\", \"status\": \"paid\"}', scope => '$SCOPE', fence => $fence)" >/dev/null || exit 1
at "client" "finishes with fence $fence: paid"

# Worker A's late finish: the fence proves it lost the key.
late=$(sql -c "SELECT idem_finish('$KEY', '{\"status\": \"paid by A\"}', scope => '$SCOPE', fence => 1)" 2>&1)
late_state=$(sql -c "SELECT status || ' ' || (result ->> 'status') || ' fence ' || fence FROM idempotent_record WHERE scope = '$SCOPE' AND key = '$KEY'")
at "worker A" "late finish with fence 1: $(echo "$late" | sed -n 's/^ERROR:  //p' | head -n 1)"
replay=$(sql -c "SELECT outcome || ' ' || (result ->> 'status') FROM idem_claim('$KEY', scope => '$SCOPE')")
at "client" "another duplicate: $replay"
rm -rf "$work_dir"

charges=$(sql -c "SELECT count(*) FROM shop.provider_charges WHERE request_key = '$KEY'")
echo
echo "Checks"
status=0
check() { if eval "$2"; then echo "  ok    $1"; else echo "  FAIL  $1"; status=1; fi; }
check "exactly one charge at the provider ($charges)" '[ "$charges" -eq 1 ]'
check "the retry took over with fence 2 and the recovery point" '[ "$fence" = 2 ] && [ "$point" = charged ]'
check "the stale finish was refused (IK003) and changed nothing" \
      '[[ "$late" == *"stale fence"* ]] && [ "$late_state" = "succeeded paid fence 2" ]'
check "duplicates replay the new owner's outcome" '[ "$replay" = "replay paid" ]'
exit $status
