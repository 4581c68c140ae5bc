#!/usr/bin/env python3
"""Drives examples/http/orders_service.py for real over HTTP: concurrent
duplicate requests, directly and through a transaction-pooling PgBouncer,
in both modes, and a worker killed mid-request whose key is taken over.
Asserts one order per key and the status codes of the IETF
Idempotency-Key draft.  Prints "ok N - ..." / "not ok N - ..." per check.

Usage: orders_service_test.py DIRECT_DSN POOLED_DSN PORT
(scripts/test.sh starts the database and PgBouncer and passes their DSNs.)
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from taplines import check, done  # noqa: E402

DIRECT_DSN, POOLED_DSN, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
SERVICE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "..", "..", "examples", "http", "orders_service.py")


def start_service(dsn, port):
    proc = subprocess.Popen([sys.executable, SERVICE, str(port)],
                            env=dict(os.environ, ORDERS_DSN=dsn),
                            stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()  # "listening on ..."
    return proc


def post(port, key, body, query=""):
    """-> (status, headers, body bytes)"""
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    req = urllib.request.Request(f"http://127.0.0.1:{port}/orders{query}", data=data,
                                 method="POST", headers={"Content-Type": "application/json"})
    if key is not None:
        req.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def post_unanswered(port, key, body, query):
    """a request whose server is killed before it answers"""
    try:
        post(port, key, body, query)
    except OSError:
        pass


def burst(port, keys, copies, query=""):
    """copies concurrent requests of every key, all started together"""
    results = {k: [] for k in keys}
    lock = threading.Lock()
    go = threading.Barrier(len(keys) * copies)

    def one(key):
        go.wait()
        answer = post(port, key, {"sku": "sku-" + key, "qty": 1}, query)
        with lock:
            results[key].append(answer)
    threads = [threading.Thread(target=one, args=(k,)) for k in keys for _ in range(copies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def orders_of(keys):
    with psycopg.connect(DIRECT_DSN) as conn:
        rows = conn.execute("SELECT idempotency_key, count(*) FROM orders"
                            " WHERE idempotency_key = ANY(%s) GROUP BY 1", (list(keys),)).fetchall()
    return dict(rows)


def wait_until(sql, params):
    """poll the database (no timing assumption) until sql returns true"""
    with psycopg.connect(DIRECT_DSN, autocommit=True) as conn:
        for _ in range(600):
            if conn.execute(sql, params).fetchone()[0]:
                return True
            time.sleep(0.05)
    return False


def record_in_progress(key):
    return wait_until("SELECT EXISTS (SELECT FROM idempotent_record WHERE key = %s"
                      " AND status = 'in_progress')", (key,))


def check_burst(label, port, query):
    keys = [f"{label}-{i}" for i in range(12)]
    results = burst(port, keys, 4, query)
    statuses = sorted({s for answers in results.values() for s, _, _ in answers})
    check(set(statuses) <= {201, 409}, f"{label}: every duplicate answered 201 or 409 ({statuses})")
    counts = orders_of(keys)
    check(all(counts.get(k) == 1 for k in keys), f"{label}: one order per key ({len(counts)} keys with orders)")
    in_progress = [h for answers in results.values() for s, h, _ in answers if s == 409]
    check(all("Retry-After" in h for h in in_progress),
          f"{label}: every 409 carries Retry-After ({len(in_progress)} of them)")
    # every key, asked again now: the first response byte for byte
    same = True
    for k in keys:
        firsts = [b for s, h, b in results[k] if s == 201 and "Idempotent-Replayed" not in h]
        s, h, b = post(port, k, {"sku": "sku-" + k, "qty": 1}, query)
        same &= s == 201 and h.get("Idempotent-Replayed") == "true" and len(firsts) == 1 and \
            firsts[0] == b
    check(same, f"{label}: a retry replays the first response byte for byte, marked Idempotent-Replayed")


# no UNIQUE on idempotency_key (the example's README has one, as a last
# line of defence): here a second order for a key must show up in the
# counts, not be stopped by the constraint
with psycopg.connect(DIRECT_DSN, autocommit=True) as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY,"
                 " idempotency_key text, sku text, qty int)")

services = []
try:
    direct = start_service(DIRECT_DSN, PORT)
    pooled = start_service(POOLED_DSN, PORT + 1)
    services += [direct, pooled]

    check_burst("direct-tx", PORT, "")
    check_burst("direct-leased", PORT, "?mode=leased")
    check_burst("pgbouncer-tx", PORT + 1, "")
    check_burst("pgbouncer-leased", PORT + 1, "?mode=leased")

    s, _, _ = post(PORT, None, {"sku": "a", "qty": 1})
    check(s == 400, f"no Idempotency-Key: 400 (got {s})")
    s, _, _ = post(PORT, "bad-body", b"[1, 2]")
    check(s == 400, f"a body that is not a JSON object: 400 (got {s})")
    post(PORT, "reused", {"sku": "a", "qty": 1})
    s, _, _ = post(PORT, "reused", {"sku": "a", "qty": 2})
    check(s == 422, f"the key reused with another body: 422 (got {s})")

    # a slow leased request: a duplicate meanwhile gets 409 with Retry-After
    # (idempotency.retry_after, 1 s, as the lease has 30 s left); one that
    # may wait for the outcome (wait_for_outcome) gets the first response
    # when it commits; both through PgBouncer
    slow = threading.Thread(target=post, args=(PORT + 1, "slow", {"sku": "s", "qty": 1},
                                               "?mode=leased&lease=30&delay=5"))
    slow.start()
    check(record_in_progress("slow"), "the slow request's claim committed")
    s, h, _ = post(PORT + 1, "slow", {"sku": "s", "qty": 1}, "?mode=leased")
    check(s == 409 and h.get("Retry-After") == "1",
          f"a duplicate of a running leased request: 409, Retry-After {h.get('Retry-After')}")
    s, h, waited = post(PORT + 1, "slow", {"sku": "s", "qty": 1}, "?mode=leased&wait=20")
    check(s == 201 and h.get("Idempotent-Replayed") == "true",
          f"a duplicate that waits for the outcome: the replay as soon as it commits (got {s})")
    slow.join()
    s, h, b = post(PORT + 1, "slow", {"sku": "s", "qty": 1}, "?mode=leased")
    check(s == 201 and h.get("Idempotent-Replayed") == "true" and b == waited,
          f"after it: the same replay (got {s})")

    # a worker killed after its claim: the retry after the lease takes the
    # key over and places the order once
    doomed = start_service(POOLED_DSN, PORT + 2)
    services.append(doomed)
    killed = threading.Thread(target=post_unanswered, args=(PORT + 2, "killed", {"sku": "k", "qty": 1},
                                                 "?mode=leased&lease=1&delay=30"))
    killed.start()
    check(record_in_progress("killed"), "the doomed worker's claim committed")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    killed.join()
    check(orders_of(["killed"]).get("killed") is None, "the killed worker placed no order")
    check(wait_until("SELECT locked_until < now() FROM idempotent_record WHERE key = %s", ("killed",)),
          "its lease ends")
    s, h, _ = post(PORT + 1, "killed", {"sku": "k", "qty": 1}, "?mode=leased")
    check(s == 201 and "Idempotent-Replayed" not in h, f"the retry after the lease takes the key over: 201 (got {s})")
    check(orders_of(["killed"]).get("killed") == 1, "one order for the killed worker's key")

    # least privilege through the pooler: a role without table privileges
    # whose scope comes from a setting ({app.tenant}); a session-level SET
    # by one client stays on the pooled server connection, and the next
    # client on it must not be served in that scope; SET LOCAL is honoured
    with psycopg.connect(DIRECT_DSN, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN CREATE ROLE http_tenant_app; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        conn.execute("INSERT INTO idem_scope_grant VALUES ('http_tenant_app', '{app.tenant}') ON CONFLICT DO NOTHING")
    one = POOLED_DSN.replace("dbname=idempotency_http", "dbname=idempotency_http_one")
    with psycopg.connect(one, autocommit=True, prepare_threshold=None) as first, \
            psycopg.connect(one, autocommit=True, prepare_threshold=None) as second:
        first.execute("SET app.tenant = 'tenant_leak'")
        try:
            with second.transaction():
                second.execute("SET LOCAL ROLE http_tenant_app")
                second.execute("SELECT idem_lookup('k', 'tenant_leak')")
            leaked = True
        except psycopg.Error as e:
            leaked = e.sqlstate != "42501"
        check(not leaked, "a tenant set with a session-level SET by one pooled client is not honoured for the next")
        with second.transaction():
            second.execute("SET LOCAL ROLE http_tenant_app")
            second.execute("SET LOCAL app.tenant = 'tenant_own'")
            row = second.execute("SELECT outcome FROM idem_claim('k', scope => 'tenant_own')").fetchone()
            second.execute("SELECT idem_finish('k', '{}', scope => 'tenant_own')")
        check(row[0] == "claimed", f"a tenant set with SET LOCAL is honoured (got {row[0]})")
finally:
    for p in services:
        if p.poll() is None:
            p.terminate()
            p.wait()

done()
