"""Every HTTP behaviour of the package README, with the ASGI middleware on
Starlette served by uvicorn and with the Django middleware served by
Django's runserver, directly and through PgBouncer (transaction pooling);
duplicate storms; a kill -9 of the application mid-request."""
import http.client
import json
import signal
import threading
import time

import pytest

from helpers import (ASGI, FRAMEWORKS, app_number, framework_of, PORT, TARGETS, Gate, orders_of, poll_until, post,
                     problem_type, record, sql, start_app, stop_app, unique_key, until, waiters_at_gate)


def concurrently(calls):
    """runs the calls on threads started together -> their results in order"""
    results = [None] * len(calls)
    go = threading.Barrier(len(calls))

    def run(i, call):
        go.wait()
        results[i] = call()
    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_missing_and_malformed_keys(app):
    status, headers, body = post(app, "/orders", body={"sku": "a"})
    assert status == 400 and headers["content-type"] == "application/problem+json"
    assert sorted(json.loads(body)) == ["detail", "status", "title", "type"]
    assert problem_type(body) == "urn:idempotency:key-missing"
    for bad in ["x" * 256, "tab\there", ""]:
        status, _, body = post(app, "/orders", key=bad, body={"sku": "a"})
        assert status == 400 and problem_type(body) == "urn:idempotency:key-invalid", repr(bad)


def test_optional_key_runs_unprotected(app):
    sku = unique_key("optional")
    status, headers, _ = post(app, "/orders/optional", body={"sku": sku})
    assert status == 201 and "idempotent-replayed" not in headers
    assert sql("SELECT count(*) FROM orders WHERE sku = %s", [sku])[0][0] == 1


def test_replay_byte_for_byte(app):
    key = unique_key("replay")
    s1, h1, b1 = post(app, "/orders", key=key, body={"sku": "s", "qty": 1})
    assert s1 == 201 and "idempotent-replayed" not in h1
    # another key order and white space: the same JSON body
    s2, h2, b2 = post(app, "/orders", key=key, body=b'{ "qty": 1,  "sku": "s" }')
    assert s2 == 201 and h2["idempotent-replayed"] == "true" and b2 == b1
    assert h2["location"] == h1["location"] and h2["content-type"] == h1["content-type"]
    assert orders_of([key]) == {key: 1}
    assert record(key)[0] == "succeeded"


def test_key_reused_with_another_request(app):
    key = unique_key("reuse")
    assert post(app, "/orders", key=key, body={"sku": "a"})[0] == 201
    status, _, body = post(app, "/orders", key=key, body={"sku": "b"})
    assert status == 422 and problem_type(body) == "urn:idempotency:key-reused"
    assert post(app, "/orders/404", key=key, body={"sku": "a"})[0] == 422
    # another tenant is another scope
    assert post(app, "/orders", key=key, body={"sku": "b"}, tenant="t2")[0] == 201
    assert orders_of([key]) == {key: 2}


def test_bytes_fingerprint_and_binary_replay(app):
    key = unique_key("binary")
    octets = "application/octet-stream"
    s1, _, b1 = post(app, "/binary", key=key, body=bytes([1, 2, 3]), content_type=octets)
    assert s1 == 200 and b1 == bytes([0, 255, 254, 1, 1, 2, 3])
    s2, h2, b2 = post(app, "/binary", key=key, body=bytes([1, 2, 3]), content_type=octets)
    assert h2["idempotent-replayed"] == "true" and b2 == b1
    assert post(app, "/binary", key=key, body=bytes([1, 2, 4]), content_type=octets)[0] == 422


def test_handler_throws_after_its_insert(app):
    key = unique_key("throw")
    assert post(app, "/orders/throw", key=key, body={"sku": "t"})[0] == 500
    assert orders_of([key]) == {} and record(key) is None
    assert post(app, "/orders/throw", key=key, body={"sku": "t"})[0] == 201
    assert orders_of([key]) == {key: 1}
    assert post(app, "/orders/throw", key=key, body={"sku": "t"})[1]["idempotent-replayed"] == "true"


def test_5xx_released_4xx_stored(app):
    key5 = unique_key("503")
    assert post(app, "/orders/503", key=key5)[0] == 503
    assert orders_of([key5]) == {} and record(key5) is None
    key4 = unique_key("404")
    s1, _, b1 = post(app, "/orders/404", key=key4, body={"sku": "x"})
    s2, h2, b2 = post(app, "/orders/404", key=key4, body={"sku": "x"})
    assert s1 == s2 == 404 and h2["idempotent-replayed"] == "true" and b2 == b1
    key_n = unique_key("404-not-stored")
    assert post(app, "/orders/404-not-stored", key=key_n, body={"sku": "x"})[0] == 404
    assert record(key_n) is None and orders_of([key_n]) == {}


@pytest.mark.parametrize("route", ["/orders/conflict", "/orders/conflict-at-commit"], ids=["in-view", "at-commit"])
def test_serialization_failure_is_retried(app, route):
    key = unique_key(route)
    status, headers, body = post(app, route, key=key, body={"sku": "c"})
    assert status == 201 and "idempotent-replayed" not in headers
    assert orders_of([key]) == {key: 1} and record(key)[0] == "succeeded"
    again = post(app, route, key=key, body={"sku": "c"})
    assert again[1]["idempotent-replayed"] == "true" and again[2] == body
    always = unique_key(route + "-always")
    status, headers, body = post(app, route + "?always=1", key=always, body={"sku": "c"})
    assert status == 503 and headers["retry-after"] == "1" and problem_type(body) == "urn:idempotency:retry"
    assert orders_of([always]) == {} and record(always) is None


def two_in_flight(app, key, polled, results):
    """POST /orders with key and /orders/wait with polled, both held at the
    gate (the caller holds it) -> their threads; answers into results"""
    body = {"gate": True}
    threads = [threading.Thread(target=lambda: results.update(first=post(app, "/orders", key=key, body=body))),
               threading.Thread(target=lambda: results.update(second=post(app, "/orders/wait", key=polled, body=body)))]
    for t in threads:
        t.start()
    waiters_at_gate(2)
    return threads


def test_in_flight_duplicate_409_or_polled_replay(app):
    key, polled = unique_key("inflight"), unique_key("polled")
    results = {}
    with Gate():
        first, second = two_in_flight(app, key, polled, results)
        status, headers, body = post(app, "/orders", key=key, body={"gate": True})
        assert status == 409 and headers["retry-after"] == "1" and problem_type(body) == "urn:idempotency:in-progress"
        # 6 polling duplicates, more than the pool's 2 free connections, and
        # another key still gets through: they hold no connection
        waiting = []
        threads = [threading.Thread(target=lambda: waiting.append(post(app, "/orders/wait", key=polled, body={"gate": True})))
                   for _ in range(6)]
        for t in threads:
            t.start()
        assert post(app, "/orders", key=unique_key("other"), body={"sku": "o"})[0] == 201
    first.join()
    second.join()
    for t in threads:
        t.join()
    assert results["first"][0] == 201 and results["second"][0] == 201
    assert len(waiting) == 6
    assert all(s == 201 and h["idempotent-replayed"] == "true" and b == results["second"][2] for s, h, b in waiting)
    assert orders_of([key, polled]) == {key: 1, polled: 1}


def test_duplicate_of_a_request_this_process_runs_takes_no_pooled_connection(app, request):
    if framework_of(request) not in ASGI:
        pytest.skip("Django runs each request on a thread of its own: its duplicates poll the server")
    key, polled = unique_key("local"), unique_key("local-polled")
    results = {}
    with Gate():
        first, second = two_in_flight(app, key, polled, results)
        before = pool_requests(app)
        assert post(app, "/orders", key=key, body={"gate": True})[0] == 409
        waiting = threading.Thread(target=lambda: results.update(
            waiting=post(app, "/orders/wait", key=polled, body={"gate": True})))
        waiting.start()
        assert post(app, "/orders", key=key, body={"gate": True})[0] == 409
        poll_until(lambda: app_number(app, "/duplicates-waiting") == 1, "a duplicate waiting in memory")
        assert pool_requests(app) == before
    for t in (first, second, waiting):
        t.join()
    # the whole life of the three duplicates, the waiting one's replay included
    assert pool_requests(app) == before
    assert results["first"][0] == 201 and results["second"][0] == 201
    status, headers, body = results["waiting"]
    assert status == 201 and headers["idempotent-replayed"] == "true" and body == results["second"][2]
    assert headers["location"] == results["second"][1]["location"]
    assert orders_of([key, polled]) == {key: 1, polled: 1}


def test_savepoint_in_the_claims_transaction(app, request):
    if framework_of(request) not in ASGI:
        pytest.skip("a route of the ASGI test app")
    key = unique_key("savepoint")
    status, _, body = post(app, "/orders/savepoint", key=key)
    assert status == 201, body
    assert sql("SELECT sku FROM orders WHERE idempotency_key = %s", [key]) == [("kept",)]
    assert record(key)[0] == "succeeded"
    assert post(app, "/orders/savepoint", key=key)[2] == body


def pool_requests(url):
    return app_number(url, "/pool-requests")


def test_duplicate_storm(app):
    keys = [unique_key(f"storm{i}") for i in range(20)]
    calls = [(lambda k=k: (k, post(app, "/orders/wait", key=k, body={"sku": k}))) for k in keys for _ in range(5)]
    answers = concurrently(calls)
    for k in keys:
        mine = [r for kk, r in answers if kk == k]
        assert all(s == 201 for s, _, _ in mine), (k, [s for s, _, _ in mine])
        assert sum("idempotent-replayed" not in h for _, h, _ in mine) == 1
        assert all(b == mine[0][2] for _, _, b in mine)
    orders = orders_of(keys)
    assert all(orders.get(k) == 1 for k in keys), orders


def test_leased_mode(app):
    key = unique_key("leased")
    status, _, body = post(app, "/orders/leased", key=key, body={"sku": "l"})
    assert status == 201 and json.loads(body)["fence"] == 1
    assert record(key)[2] == "before-call"
    assert post(app, "/orders/leased", key=key, body={"sku": "l"})[1]["idempotent-replayed"] == "true"
    unknown = unique_key("unknown")
    assert post(app, "/orders/leased?unknown=1", key=unknown)[0] == 504
    assert record(unknown)[0] == "unknown"
    status, headers, _ = post(app, "/orders/leased?unknown=1", key=unknown)
    assert status == 409 and int(headers["retry-after"]) >= 1
    failed = unique_key("leased-fail")
    assert post(app, "/orders/leased?fail=1", key=failed)[0] == 500
    assert record(failed)[0] == "in_progress"
    assert post(app, "/orders/leased?fail=1", key=failed)[0] == 500
    assert record(failed)[1] == 2  # the retry took the released key over


def test_leased_handler_past_its_time_limit_is_abandoned_and_a_retry_takes_over(app):
    """handler_timeout (0.3 s on /orders/hang, lease 60 s): 503
    handler-timeout with Retry-After = the lease, nothing committed, the
    key still claimed and no longer extended by the heartbeat (every 0.1 s
    there, ASGI); once the lease ends a retry takes it over"""
    key = unique_key("hang")
    status, headers, body = post(app, "/orders/hang", key=key)
    assert status == 503 and problem_type(body) == "urn:idempotency:handler-timeout", (status, body)
    assert headers["retry-after"] == "60"
    assert record(key)[0] == "in_progress" and orders_of([key]) == {}
    lease = "SELECT locked_until FROM idempotent_record WHERE key = %s"
    locked_until = sql(lease, [key])
    time.sleep(1)  # ten heartbeats, were it still running (it could only miss them, never fail)
    assert sql(lease, [key]) == locked_until
    sql("UPDATE idempotent_record SET locked_until = now() - interval '1 second' WHERE key = %s", [key])
    status, _, body = post(app, "/orders/hang", key=key)
    assert status == 201 and json.loads(body)["fence"] == 2, body
    assert post(app, "/orders/hang", key=key)[2] == body
    assert orders_of([key]) == {key: 1} and record(key)[0] == "succeeded"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_scope_not_granted_and_read_only(framework):
    sql("DO $$ BEGIN CREATE ROLE idem_py_noscope LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    sql("GRANT USAGE ON SCHEMA public TO idem_py_noscope")
    _, dsn = TARGETS[0]
    status, _, body = first_answer(framework, dsn + " user=idem_py_noscope")
    assert status == 403 and problem_type(body) == "urn:idempotency:scope-forbidden"
    status, _, body = first_answer(framework, dsn + " options='-c default_transaction_read_only=on'")
    assert status == 503 and problem_type(body) == "urn:idempotency:read-only"


def first_answer(framework, dsn):
    """the answer to one POST /orders of an app on its own connection settings"""
    proc, url = start_app(framework, dsn, PORT + 5)
    try:
        return post(url, "/orders", key=unique_key("settings"))
    finally:
        stop_app(proc)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_kill_9_mid_request_then_every_key_answered_once(framework):
    dsn = TARGETS[-1][1]  # through PgBouncer when there is one
    gated = [unique_key(f"{framework}-crash-gated{i}") for i in range(5)]
    free = [unique_key(f"{framework}-crash-free{i}") for i in range(35)]
    keys = gated + free
    body_of = lambda k: {"sku": k, "gate": k in gated}  # noqa: E731
    with Gate():
        proc, url = start_app(framework, dsn, PORT + 6, pool=10)

        def doomed(k):
            try:
                post(url, "/orders/wait", key=k, body=body_of(k))
            except (OSError, http.client.HTTPException):  # the server is killed mid-answer
                pass
        threads = [threading.Thread(target=doomed, args=(k,)) for k in keys for _ in range(2)]
        for t in threads:
            t.start()
        waiters_at_gate(len(gated))
        until("SELECT count(*) >= 10 FROM idempotent_record WHERE status = 'succeeded' AND key = ANY(%s)", [free])
        stop_app(proc, signal.SIGKILL)
        for t in threads:
            t.join()
    proc, url = start_app(framework, dsn, PORT + 6, pool=10)
    try:
        answers = {}

        def retry(k):
            while True:
                status, headers, body = post(url, "/orders/wait", key=k, body=body_of(k))
                if status != 409:
                    answers[k] = (status, body)
                    return
                threading.Event().wait(int(headers["retry-after"]))
        concurrently([(lambda k=k: retry(k)) for k in keys])
        assert all(answers[k][0] == 201 for k in keys), answers
        orders = orders_of(keys)
        assert all(orders.get(k) == 1 for k in keys), orders
        stored = dict(sql("SELECT key, result ->> 'body' FROM idempotent_record"
                          " WHERE key = ANY(%s) AND status = 'succeeded'", [keys]))
        assert len(stored) == len(keys)
        for k in keys:
            assert answers[k][1].decode() == stored[k]
            assert json.loads(stored[k])["order_id"] == sql("SELECT id FROM orders WHERE idempotency_key = %s", [k])[0][0]
    finally:
        stop_app(proc, signal.SIGKILL)
