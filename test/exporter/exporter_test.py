#!/usr/bin/env python3
"""Scrapes Debian's prometheus-postgres-exporter, run with
examples/postgres_exporter_queries.yaml, after a scripted sequence of
claims: new keys, replays, fingerprint mismatches, failures, in_progress
answers, a takeover and a stale fence, tokens, a purge, and three waits
whose least length the server decides, whatever the machine's speed:

- a duplicate blocked on the primary key by an uncommitted claim whose
  transaction then runs pg_sleep(1.1) before it commits (the duplicate was
  seen waiting on the lock before the sleep began);
- a claim answering in_progress at its wait_for_outcome bound of 1.5 s (a
  bound the server measures from the claim's own start);
- a claim sleeping under wait_for_outcome, woken by an outcome recorded
  1.1 s after it was seen asleep.

The exporter connects as a role that only is a member of pg_monitor (the
grant the README documents).  Asserts every metric of the queries file
(exact counts, each labelled with the exporter's database), and each bucket
of idempotency_wait_seconds: none of the three waits at or below 1 s, all
three at or below 60 s (their bound, or woken long before it), the buckets
in between equal to the view's and cumulative.  Prints "ok N - ..." /
"not ok N - ..." per check and "N passed, N failed" at the end.

Usage: exporter_test.py DSN METRICS_URL
(scripts/test.sh starts the database and the exporter.)
"""
import os
import re
import sys
import threading
import time
import urllib.request

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from taplines import check, done  # noqa: E402

DSN, METRICS_URL = sys.argv[1], sys.argv[2]


def connect(name):
    return psycopg.connect(DSN, autocommit=True, application_name=name)


def sqlstate(conn, sql, params=()):
    """the SQLSTATE of a statement that must fail, or None"""
    try:
        conn.execute(sql, params)
    except psycopg.Error as e:
        return e.sqlstate
    return None


def in_thread(fn):
    """run fn in a thread; join() returns what it returned"""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("v", fn()))
    t.start()
    return lambda: (t.join(), box.get("v"))[1]


def until_waiting(ctl, name, wait_event_type):
    """until backend name waits on a lock ('Lock') or in the extension's
    condition variable ('Extension'), polled for up to a minute: the
    server, not a sleep, says so"""
    for _ in range(6000):
        if ctl.execute("""SELECT pg_stat_clear_snapshot(), EXISTS (
                              SELECT FROM pg_stat_activity
                               WHERE application_name = %s AND wait_event_type = %s)""",
                       (name, wait_event_type)).fetchone()[1]:
            return True
        time.sleep(0.01)
    return False


def held_wait(name, claim, wait_event_type, *release):
    """claim in a backend of its own, named name; once the server shows it
    waiting (wait_event_type), hold it 1.1 s more, then run release in
    session a: the claim's answer, or None if it was never seen waiting"""
    waiter = in_thread(lambda: outcome(connect(name), claim))
    seen = until_waiting(ctl, name, wait_event_type)
    a.execute("SELECT pg_sleep(1.1)")
    for sql in release:
        a.execute(sql)
    answer = waiter()
    return answer if seen else None


def outcome(conn, sql, params=()):
    return conn.execute(sql, params).fetchone()[0]


def scrape():
    """{metric name with labels but server and datname: value} of the
    idempotency metrics, and the set of their datname labels"""
    for _ in range(300):
        try:
            with urllib.request.urlopen(METRICS_URL, timeout=30) as r:
                text = r.read().decode()
            break
        except OSError:
            time.sleep(0.1)  # the exporter is still starting
    else:
        raise SystemExit("the exporter never answered on " + METRICS_URL)
    metrics, datnames = {}, set()
    for line in text.splitlines():
        m = re.match(r'^(idempotency_\w+)(?:\{(.*)\})? (\S+)$', line)
        if m:
            labels = [l for l in (m.group(2) or "").split(",") if l and not l.startswith("server=")]
            datnames |= {l for l in labels if l.startswith("datname=")}
            labels = ",".join(l for l in labels if not l.startswith("datname="))
            metrics[m.group(1) + ("{" + labels + "}" if labels else "")] = float(m.group(3))
    return metrics, datnames


ctl = connect("exporter_ctl")
a = connect("exporter_a")
b = connect("exporter_b")
ctl.execute("TRUNCATE idempotent_record, idempotency_token")
ctl.execute("SELECT idem_stats_reset()")

# new keys, each with its outcome; replays; a fingerprint mismatch
for k in ("n-1", "n-2", "n-3"):
    with a.transaction():
        outcome(a, "SELECT outcome FROM idem_claim(%s, fingerprint => '\\x01')", (k,))
        a.execute("SELECT idem_finish(%s, '{\"ok\": true}')", (k,))
replays = [outcome(b, "SELECT outcome FROM idem_claim(%s, fingerprint => '\\x01')", (k,))
           for k in ("n-1", "n-2")]
check(replays == ["replay", "replay"], "duplicates of finished keys replay")
check(sqlstate(b, "SELECT idem_claim('n-3', fingerprint => '\\x02')") == "IK001",
      "a key reused for another body: IK001")

# a final failure
with a.transaction():
    outcome(a, "SELECT outcome FROM idem_claim('f-1')")
    a.execute("SELECT idem_fail('f-1', '{\"error\": \"declined\"}', retryable => false)")

# in_progress: wait => false against an uncommitted claim; then a duplicate
# that waits on the primary key for at least 1.1 s and replays
a.execute("BEGIN")
outcome(a, "SELECT outcome FROM idem_claim('w-1')")
check(outcome(b, "SELECT outcome FROM idem_claim('w-1', wait => false)") == "in_progress",
      "wait => false against an uncommitted claim: in_progress")
check(held_wait("exporter_key_waiter", "SELECT outcome FROM idem_claim('w-1')", "Lock",
                "SELECT idem_finish('w-1', '{\"n\": 1}')", "COMMIT") == "replay",
      "the duplicate waits on the primary key, then replays after the commit")

# wait_for_outcome: at its bound (in_progress), and woken by the outcome
outcome(a, "SELECT outcome FROM idem_claim('l-1', lease => '1 hour')")
check(outcome(b, "SELECT outcome FROM idem_claim('l-1', wait_for_outcome => '1.5 s')")
      == "in_progress", "wait_for_outcome at its bound: in_progress")
outcome(a, "SELECT outcome FROM idem_claim('l-2', lease => '1 hour')")
check(held_wait("exporter_outcome_waiter",
                "SELECT outcome FROM idem_claim('l-2', wait_for_outcome => '1 minute')", "Extension",
                "SELECT idem_finish('l-2', '{\"n\": 2}', fence => 1)") == "replay",
      "the wait_for_outcome duplicate sleeps, then is woken by the outcome and replays")

# a takeover of a lease that ended, and the old owner's stale fence
outcome(a, "SELECT outcome FROM idem_claim('t-1', lease => '1 hour')")
ctl.execute("UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second' "
            "WHERE key = 't-1'")
check(b.execute("SELECT outcome, fence FROM idem_claim('t-1', lease => '1 hour')").fetchone()
      == ("claimed", 2), "the ended lease is taken over with fence 2")
check(sqlstate(a, "SELECT idem_finish('t-1', '{}', fence => 1)") == "IK003",
      "the old owner's fence is stale: IK003")

# tokens: two issued, one consumed, then refused
token = outcome(a, "SELECT idem_token_issue('form')")
outcome(a, "SELECT idem_token_issue('form')")
check(outcome(a, "SELECT idem_token_consume(%s, 'form')", (token,)) is True, "a token is consumed once")
check(outcome(a, "SELECT idem_token_consume(%s, 'form')", (token,)) is False, "and refused after")

# purge: three records past their retention
ctl.execute("""INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
               SELECT 'old-' || i, 'succeeded', 1, now(), now(), now() - interval '1 hour'
                 FROM generate_series(1, 3) AS i""")
check(outcome(ctl, "SELECT idem_purge()") == 3, "purge deletes the three expired records")

# messaging: 3 enqueues committed, 2 rolled back; 2 of them sent after
# their enqueue was moved 5 s back (a lag of at least 10 s in all), the
# third left pending 30 s back (the gauge); a delivery and its redelivery
ctl.execute("TRUNCATE idempotency_outbox")
with a.transaction():
    a.execute("SELECT idem_outbox_enqueue('orders', '{}') FROM generate_series(1, 3)")
a.execute("BEGIN")
a.execute("SELECT idem_outbox_enqueue('orders', '{}') FROM generate_series(1, 2)")
a.execute("ROLLBACK")
ctl.execute("UPDATE idempotency_outbox SET created_at = created_at - interval '5 seconds'")
ids, fence = b.execute("SELECT array_agg(message_id), max(fence) FROM idem_outbox_claim(2)").fetchone()
check(outcome(b, "SELECT idem_outbox_mark_sent(%s, %s)", (ids, fence)) == 2, "two messages marked sent")
ctl.execute("UPDATE idempotency_outbox SET created_at = created_at - interval '25 seconds' "
            "WHERE status = 'pending'")
check([outcome(b, "SELECT idem_once('msg-1', scope => 'inbox:billing')") for _ in range(2)]
      == [True, False], "a delivery, then its redelivery refused by the inbox")

expected = {
    "idempotency_claims_total": 3 + 1 + 1 + 2 + 1 + 1 + 1,   # new, failed, w-1, l-1/l-2, t-1, takeover, msg-1
    "idempotency_replays_total": 2 + 1 + 1 + 1,
    "idempotency_in_progress_total": 1 + 1,
    "idempotency_waits_total": 1,
    "idempotency_outcome_waits_total": 2,
    "idempotency_fingerprint_mismatches_total": 1,
    "idempotency_takeovers_total": 1,
    "idempotency_stale_fences_total": 1,
    "idempotency_failures_total": 1,
    "idempotency_tokens_issued_total": 2,
    "idempotency_tokens_consumed_total": 1,
    "idempotency_tokens_refused_total": 1,
    "idempotency_rows_purged_total": 3,
    "idempotency_wait_seconds_count": 3,
    "idempotency_outbox_enqueued_total": 3,
    "idempotency_outbox_sent_total": 2,
    "idempotency_inbox_duplicates_total": 1,
}
metrics, datnames = scrape()
check(datnames == {'datname="%s"' % outcome(ctl, "SELECT current_database()")},
      "every metric is labelled with the exporter's database: " + " ".join(sorted(datnames)))
covered = set(expected) | {"idempotency_stats_reset_seconds", "idempotency_wait_seconds_bucket",
                           "idempotency_wait_seconds_sum", "idempotency_outbox_send_lag_seconds_total",
                           "idempotency_outbox_lag_seconds"}
check({m.split("{")[0] for m in metrics} == covered,
      "the exporter shows every metric checked here, and no other: "
      + " ".join(sorted({m.split("{")[0] for m in metrics} ^ covered)))
for name, value in expected.items():
    check(metrics.get(name) == value, f"{name} = {value} (scraped {metrics.get(name)})")

reset = outcome(ctl, "SELECT extract(epoch FROM stats_reset) FROM idempotency_stats")
check(metrics.get("idempotency_stats_reset_seconds") == float(reset),
      "idempotency_stats_reset_seconds is the view's stats_reset")

# relay lag: the two sent waited at least 5 s each from enqueue to mark;
# the pending one is at least 30 s old (an hour bounds both: no clock jump)
lag_sum = metrics.get("idempotency_outbox_send_lag_seconds_total")
check(lag_sum is not None and 10 <= lag_sum < 7200,
      f"idempotency_outbox_send_lag_seconds_total >= 10 (scraped {lag_sum})")
lag = metrics.get("idempotency_outbox_lag_seconds")
check(lag is not None and 30 <= lag < 3600, f"idempotency_outbox_lag_seconds >= 30 (scraped {lag})")

# the histogram: each bucket as the view has it; by bound, none of the
# three waits within 1 s, all within 60 s; +Inf is the count; the sum at
# least the 1.1 + 1.5 + 1.1 s the server held them
bounds, buckets, total = ctl.execute(
    "SELECT wait_seconds, wait_seconds_bucket, wait_seconds_sum FROM idempotency_stats").fetchone()
for le, n in zip(bounds, buckets):
    name = 'idempotency_wait_seconds_bucket{le="%s"}' % format(le, "g")
    scraped = metrics.get(name)
    if le <= 1:
        want = 0
    elif le >= 60:
        want = 3
    else:
        want = n  # between the bounds the machine's speed decides
    check(scraped == want == n, f"{name} = {want} (scraped {scraped}, view {n})")
check(metrics.get('idempotency_wait_seconds_bucket{le="+Inf"}') == 3,
      "idempotency_wait_seconds_bucket{le=\"+Inf\"} = 3")
check(all(x <= y for x, y in zip(buckets, buckets[1:])), "the buckets are cumulative")
check(metrics.get("idempotency_wait_seconds_sum") is not None
      and abs(metrics["idempotency_wait_seconds_sum"] - total) < 1e-6 and total >= 3.7,
      f"idempotency_wait_seconds_sum = the view's {total} >= 3.7")

done()
