"""One answer per SQLSTATE, the same in every package (issue 30 item 16),
for errors the database raises in the claim's transaction; a session the
server ends mid-request (pg_terminate_backend, statement timeout,
idle-in-transaction timeout) answers 503 unavailable with nothing
committed, and the process and its pool go on; a handler that ends the
claim's transaction itself is refused (item 15)."""
import urllib.parse

import pytest

from helpers import (FRAMEWORKS, PORT, app_number, framework_of, orders_of, post, problem_type, record, start_app,
                     stop_app, unique_key)

CITUS_PLACEMENTS = "cannot perform query on placements: the shard was moved"
CITUS_DISTRIBUTED = "cannot execute a distributed query from a query on a shard"
CITUS_COMMIT = "could not commit transaction for shard 102008 on any active node"
CODES = [  # (SQLSTATE, message, status, problem type)
    ("08006", None, 503, "unavailable"), ("08000", None, 503, "unavailable"), ("08003", None, 503, "unavailable"),
    ("57P01", None, 503, "unavailable"), ("57P02", None, 503, "unavailable"), ("57P03", None, 503, "unavailable"),
    ("57014", None, 503, "unavailable"), ("25P03", None, 503, "unavailable"), ("53300", None, 503, "unavailable"),
    ("25001", CITUS_PLACEMENTS, 503, "unavailable"), ("XX000", CITUS_DISTRIBUTED, 503, "unavailable"),
    ("XX000", CITUS_COMMIT, 503, "unavailable"), ("25006", None, 503, "read-only"), ("40001", None, 503, "retry"),
    ("40P01", None, 503, "retry"),
    # not the extension's: the application's own error, the framework's 500
    ("25001", None, 500, None), ("XX000", None, 500, None), ("23505", None, 500, None),
]


@pytest.mark.parametrize("code,message,status,kind", CODES, ids=[f"{c}-{m is not None}" for c, m, _, _ in CODES])
def test_sqlstate_answer(app, code, message, status, kind):
    key = unique_key(f"raise-{code}")
    query = urllib.parse.urlencode({"code": code, **({"message": message} if message else {})})
    # 40001/40P01: the first run raises, the re-run answers
    answer, headers, body = post(app, f"/orders/raise?{query}", key=key)
    if kind == "retry":
        assert answer == 201 and orders_of([key]) == {key: 1}
        return
    assert answer == status, (code, body)
    if kind is not None:
        assert problem_type(body) == f"urn:idempotency:{kind}" and headers["retry-after"] == "1"
    assert orders_of([key]) == {} and record(key) is None
    # the key is free: the retry runs once
    assert post(app, f"/orders/raise?{query}", key=key)[0] == 201
    assert orders_of([key]) == {key: 1}


@pytest.mark.parametrize("how", ["terminate", "timeout", "idle"])
def test_session_ended_mid_request(app, request, how):
    key = unique_key(f"ended-{how}")
    asgi = framework_of(request) == "asgi"  # psycopg_pool counts the connections it discarded
    bad_before = app_number(app, "/pool-returns-bad") if asgi else None
    status, headers, body = post(app, f"/orders/raise?how={how}", key=key)
    assert status == 503 and problem_type(body) == "urn:idempotency:unavailable" and headers["retry-after"] == "1"
    assert orders_of([key]) == {} and record(key) is None
    if asgi and how != "timeout":  # the ended session's connection went back broken: the pool dropped it
        assert app_number(app, "/pool-returns-bad") == bad_before + 1
    # the process and its pool go on (the broken connection was discarded)
    for _ in range(6):
        assert post(app, "/orders", key=unique_key("after-ended"), body={"sku": "a"})[0] == 201
    assert post(app, f"/orders/raise?how={how}", key=key)[0] == 201
    assert orders_of([key]) == {key: 1}


@pytest.mark.parametrize("statement,catch", [("COMMIT", False), ("COMMIT", True), ("ROLLBACK", False),
                                             ("SELECT 1; COMMIT", False), ("BEGIN", True)],
                         ids=["commit", "commit-caught", "rollback", "commit-in-a-list", "begin-caught"])
def test_handler_ending_the_transaction(app, statement, catch):
    key = unique_key("end-transaction")
    path = "/orders/end-transaction?" + urllib.parse.urlencode({"statement": statement, **({"catch": 1} if catch else {})})
    status, _, body = post(app, path, key=key)
    assert status == 500 and problem_type(body) == "urn:idempotency:transaction-ended"
    assert orders_of([key]) == {} and record(key) is None
    assert post(app, path, key=key)[0] == 201
    assert orders_of([key]) == {key: 1}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_database_unavailable(framework):
    # nothing listens there: the pool (ASGI: after its timeout) or Django cannot connect
    proc, url = start_app(framework, f"host=127.0.0.1 port={PORT + 7} dbname=none user=postgres connect_timeout=5",
                          PORT + 5, pool_timeout=2)
    try:
        status, headers, body = post(url, "/orders", key=unique_key("unavailable"))
    finally:
        stop_app(proc)
    assert status == 503 and problem_type(body) == "urn:idempotency:unavailable" and headers["retry-after"] == "1"
