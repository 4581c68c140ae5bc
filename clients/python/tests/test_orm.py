"""The ORM integrations: Flask + Flask-SQLAlchemy (FlaskIdempotency, under
gunicorn), FastAPI with SQLAlchemyIdempotencyMiddleware and FastAPI with
SQLAlchemyAsyncIdempotencyMiddleware (an AsyncSession on asyncpg; both
under uvicorn), directly and through PgBouncer.  The handlers write
through the request's SQLAlchemy Session or AsyncSession (orm_orders.py,
orm_async_orders.py) and call session.commit(), as ORM code does: those
writes commit with the stored response, or not at all.  The storm over two processes and the kill -9
also run against the Django app, whose views write through Django's ORM."""
import http.client
import json
import signal
import threading

import pytest

from helpers import (PORT, TARGETS, Gate, framework_of, orders_of, post, problem_type, record, sql, start_app,
                     stop_app, unique_key, until, waiters_at_gate)
from test_http import concurrently
from test_requests import test_two_key_header_lines_are_refused as two_key_lines_refused

ORMS = ["flask", "fastapi", "fastapi-async"]
APPS = [(f, t, dsn) for f in ORMS for t, dsn in TARGETS]
APP_PORTS = [PORT + n for n in (8, 9, 10, 11, 15, 16)]  # PORT + 12 to 14: the tests' own servers


@pytest.fixture(scope="module", params=APPS, ids=[f"{f}-{t}" for f, t, _ in APPS])
def orm_app(request):
    framework, _, dsn = request.param
    proc, url = start_app(framework, dsn, APP_PORTS[APPS.index(request.param)])
    yield url
    stop_app(proc)


def test_session_writes_commit_with_the_stored_response(orm_app):
    key = unique_key("orm")
    s1, h1, b1 = post(orm_app, "/orders", key=key, body={"sku": "a"})
    assert s1 == 201 and "idempotent-replayed" not in h1, b1
    s2, h2, b2 = post(orm_app, "/orders", key=key, body={"sku": "a"})
    assert s2 == 201 and h2["idempotent-replayed"] == "true" and b2 == b1 and h2["location"] == h1["location"]
    assert orders_of([key]) == {key: 1}
    assert json.loads(b1)["order_id"] == sql("SELECT id FROM orders WHERE idempotency_key = %s", [key])[0][0]
    assert record(key)[0] == "succeeded"
    status, _, body = post(orm_app, "/orders", key=key, body={"sku": "b"})
    assert status == 422 and problem_type(body) == "urn:idempotency:key-reused"


def test_answers_before_the_claim(orm_app):
    assert problem_type(post(orm_app, "/orders", body={"sku": "a"})[2]) == "urn:idempotency:key-missing"
    assert problem_type(post(orm_app, "/orders", key="tab\there", body={})[2]) == "urn:idempotency:key-invalid"
    status, _, body = post(orm_app, "/orders", key=unique_key("orm-anon"), body={}, tenant=None)
    assert status == 403 and problem_type(body) == "urn:idempotency:scope-missing"
    two_key_lines_refused(orm_app)  # gunicorn joins them with a comma, uvicorn keeps both


def test_optional_key_runs_in_a_transaction_of_its_own(orm_app):
    sku = unique_key("orm-optional")
    status, headers, _ = post(orm_app, "/orders/optional", body={"sku": sku})
    assert status == 201 and "idempotent-replayed" not in headers
    assert sql("SELECT count(*) FROM orders WHERE sku = %s", [sku])[0][0] == 1


def test_body_and_response_limits(orm_app):
    key = unique_key("orm-limits")
    status, _, body = post(orm_app, "/orders/small", key=key, body={"sku": "x" * 64})
    assert status == 413 and problem_type(body) == "urn:idempotency:body-too-large"
    status, _, body = post(orm_app, "/orders/small", key=key, body={"sku": "y" * 40})  # its answer: > 64 bytes
    assert status == 500 and problem_type(body) == "urn:idempotency:response-too-large"
    assert orders_of([key]) == {} and record(key) is None


def test_duplicate_in_flight_answers_in_progress(orm_app):
    key = unique_key("orm-in-flight")
    first = []
    with Gate():
        t = threading.Thread(target=lambda: first.append(post(orm_app, "/orders", key=key,
                                                              body={"sku": "f", "gate": True})))
        t.start()
        waiters_at_gate(1)
        status, headers, body = post(orm_app, "/orders", key=key, body={"sku": "f", "gate": True})
        assert status == 409 and int(headers["retry-after"]) >= 1
        assert problem_type(body) == "urn:idempotency:in-progress"
    t.join()
    assert first[0][0] == 201
    assert post(orm_app, "/orders", key=key, body={"sku": "f", "gate": True})[2] == first[0][2]
    assert orders_of([key]) == {key: 1}


def test_handler_error_leaves_nothing(orm_app):
    key = unique_key("orm-throw")
    assert post(orm_app, "/orders/throw", key=key, body={"sku": "t"})[0] == 500
    assert orders_of([key]) == {} and record(key) is None


@pytest.mark.parametrize("path", ["/orders/rollback", "/orders/commit-sql"])
def test_session_may_not_end_the_claims_transaction(orm_app, path):
    key = unique_key("orm-ended")
    status, headers, body = post(orm_app, path, key=key, body={"sku": "e"})
    assert status == 500 and headers["content-type"] == "application/problem+json", body
    assert problem_type(body) == "urn:idempotency:transaction-ended"
    assert orders_of([key]) == {} and record(key) is None


def test_savepoints_are_fine(orm_app):
    key = unique_key("orm-savepoint")
    status, _, body = post(orm_app, "/orders/savepoint", key=key, body={"sku": "kept"})
    assert status == 201, body
    assert sql("SELECT sku FROM orders WHERE idempotency_key = %s", [key]) == [("kept",)]
    assert record(key)[0] == "succeeded"


def test_a_conflict_at_commit_runs_again_then_answers_retry(orm_app):
    key = unique_key("orm-conflict")
    status, headers, body = post(orm_app, "/orders/conflict", key=key, body={"sku": "c"})
    assert status == 503 and headers["retry-after"] == "1" and problem_type(body) == "urn:idempotency:retry"
    assert orders_of([key]) == {} and record(key) is None
    # retries=3: four runs, each rolled back (the trigger's row too)
    assert sql("SELECT count(*) FROM commit_conflict WHERE key = %s", [key])[0][0] == 0


@pytest.mark.parametrize("sqlstate,status,kind", [("25006", 503, "read-only"), ("57014", 503, "unavailable"),
                                                  ("40P01", 503, "retry"), ("42501", 500, None), ("22023", 500, None)])
def test_a_database_error_in_the_handler(orm_app, sqlstate, status, kind):
    """the codes that mean "retry" answer as in every package; the view's
    own 42501 or 22023 is the framework's 500; nothing committed"""
    key = unique_key(f"orm-raise-{sqlstate}")
    got, headers, body = post(orm_app, "/orders/raise", key=key, body={"sqlstate": sqlstate})
    assert got == status, body
    if kind:
        assert problem_type(body) == f"urn:idempotency:{kind}" and headers["retry-after"] == "1"
    assert orders_of([key]) == {} and record(key) is None


@pytest.mark.parametrize("answer", [{"status": 99}, {"status": 201, "headers": {"location": "/o/1\r\nx-injected: yes"}}],
                         ids=["status-99", "location-crlf"])
def test_a_response_that_cannot_be_replayed_is_the_frameworks_500(orm_app, answer):
    """refused by idem_finish_response (22023: the response's, not the
    key's) or by the framework before it; nothing committed"""
    key = unique_key("orm-unsendable")
    status, headers, body = post(orm_app, "/orders/answer-as", key=key, body=answer)
    assert status == 500 and headers.get("content-type") != "application/problem+json", body
    assert orders_of([key]) == {} and record(key) is None


@pytest.mark.parametrize("framework", ORMS)
def test_a_database_that_cannot_be_reached_answers_unavailable(framework):
    proc, url = start_app(framework, f"host=127.0.0.1 port={PORT + 7} dbname=nowhere user=postgres", PORT + 13)
    try:
        status, headers, body = post(url, "/orders", key=unique_key("orm-unreachable"), body={"sku": "u"})
    finally:
        stop_app(proc)
    assert status == 503 and headers["retry-after"] == "1" and problem_type(body) == "urn:idempotency:unavailable"


def test_a_session_kept_past_its_request_writes_nothing(orm_app):
    key = unique_key("orm-stash")
    assert post(orm_app, "/orders/stash", key=key, body={"sku": "s"})[0] == 201
    later = unique_key("orm-stashed")
    status, _, body = post(orm_app, "/orders/use-stashed", key=later, body={})
    assert status == 409 and json.loads(body)["refused"] == "ResourceClosedError", body  # SQLAlchemy's own
    assert orders_of([key, later]) == {key: 1}


def test_a_write_outside_the_requests_session_is_not_covered(orm_app):
    """documents what happens: a Session of the engine's own commits by
    itself, so its write stays although the request failed and stored nothing"""
    key = unique_key("orm-outside")
    assert post(orm_app, "/orders/outside", key=key, body={})[0] == 500
    assert orders_of([key]) == {key: 1} and record(key) is None


def test_django_orm_write_outside_the_requests_transaction_is_not_covered(app, request):
    """Django's ORM writes in the view go in the claim's transaction (the
    suite's Django app places its orders with Order.objects.create: replay,
    storm, throw and kill -9 in test_http.py); a write on another thread has
    a connection of its own: it commits by itself and stays although the
    request failed"""
    if framework_of(request) != "django":
        pytest.skip("Django's ORM")
    key = unique_key("django-outside")
    assert post(app, "/orders/outside", key=key, body={})[0] == 500
    assert orders_of([key]) == {key: 1} and record(key) is None


@pytest.mark.parametrize("framework", ORMS + ["django"])
def test_duplicate_storm_on_two_processes_one_effect_one_answer(framework):
    dsn = TARGETS[-1][1]
    keys = [unique_key(f"{framework}-orm-storm{i}") for i in range(3)]
    procs = []
    try:
        for i in range(2):
            procs.append(start_app(framework, dsn, PORT + 12 + i))

        def copy(i, k):
            return post(procs[i % 2][1], "/orders/wait", key=k, body={"sku": k})
        answers = concurrently([(lambda i=i, k=k: copy(i, k)) for k in keys for i in range(8)])
    finally:
        for proc, _ in procs:
            stop_app(proc)
    assert orders_of(keys) == {k: 1 for k in keys}
    for n, k in enumerate(keys):
        mine = answers[n * 8:(n + 1) * 8]
        assert all(status == 201 for status, _, _ in mine), mine
        assert len({body for _, _, body in mine}) == 1
        assert sum("idempotent-replayed" not in headers for _, headers, _ in mine) == 1


@pytest.mark.parametrize("framework", ORMS + ["django"])
def test_kill_9_between_the_handlers_end_and_the_commit(framework):
    """the handler placed its order and called session.commit() (Django:
    Order.objects.create), then waits at the gate: kill -9 leaves neither
    the order nor the record, and the retry after the restart runs once"""
    dsn = TARGETS[-1][1]
    keys = [unique_key(f"{framework}-orm-crash{i}") for i in range(3)]
    with Gate():
        proc, url = start_app(framework, dsn, PORT + 12)
        try:
            def doomed(k):
                try:
                    post(url, "/orders", key=k, body={"sku": k, "gate": True})
                except (OSError, http.client.HTTPException):  # the server is killed mid-answer
                    pass
            threads = [threading.Thread(target=doomed, args=(k,)) for k in keys]
            for t in threads:
                t.start()
            waiters_at_gate(len(keys))
            assert orders_of(keys) == {}  # flushed by session.commit(), not committed
        finally:
            stop_app(proc, signal.SIGKILL)
        for t in threads:
            t.join()
    until("SELECT count(*) = 0 FROM pg_stat_activity WHERE query LIKE '%%pg_advisory_xact_lock_shared%%'"
          " AND pid <> pg_backend_pid()")
    assert orders_of(keys) == {} and all(record(k) is None for k in keys)
    proc, url = start_app(framework, dsn, PORT + 12)
    try:
        answers = [post(url, "/orders", key=k, body={"sku": k, "gate": True}) for k in keys]
    finally:
        stop_app(proc)
    assert all(status == 201 for status, _, _ in answers), answers
    assert orders_of(keys) == {k: 1 for k in keys}
    assert all(record(k)[0] == "succeeded" for k in keys)


def test_round_trips_are_the_claim_the_orms_own_and_the_commit():
    """every statement the server receives on the request's connection
    (log_statement, sent back to the client as notices), three requests in
    a row: "BEGIN; claim", the INSERT the ORM sends for session.commit(),
    "finish; COMMIT" — nothing for the pool's checkout or reset"""
    from sqlalchemy import create_engine

    from helpers import DIRECT, sa_url
    from orm_orders import Order
    from pg_idempotency_key.core import Options, Response, fingerprint
    from pg_idempotency_key.sqlalchemy_flow import SessionFlow
    received = []

    class Statements(list):
        def append(self, notice):
            received.append(notice.split("statement: ", 1)[-1].split("(")[0].strip())

    engine = create_engine(sa_url(DIRECT), future=True, pool_size=1, max_overflow=0,
                           connect_args={"options": "-c log_statement=all -c client_min_messages=log"})
    with engine.connect() as conn:  # the dialect's first-connect queries
        conn.connection.dbapi_connection.notices = Statements()

    def handler(idem):
        idem.session.add(Order(idempotency_key=idem.key, tenant=idem.scope, sku="rt"))
        idem.session.commit()
        return Response(201, [("content-type", "application/json")], b"{}")
    flow = SessionFlow(engine)
    keys = [unique_key("orm-round-trips") for _ in range(3)]
    for key in keys:
        answer = flow.handle(Options(scope="t"), (key, "t", fingerprint("POST", "/rt", b"{}", "application/json")),
                             handler)
        assert answer.status == 201
    engine.dispose()
    assert orders_of(keys) == {k: 1 for k in keys}
    assert received == ["BEGIN; SELECT jsonb_build_array", "INSERT INTO orders",
                        "SELECT FROM idem_finish_response"] * 3, received


def test_flask_without_flask_sqlalchemy_gives_g_idempotency_session():
    """FlaskIdempotency(engine=...): the view writes on g.idempotency.session
    (Flask's test client, the suite's database)"""
    from flask import Flask, g, request
    from sqlalchemy import create_engine

    from helpers import DIRECT, sa_url
    from orm_orders import Order
    from pg_idempotency_key.flask import FlaskIdempotency
    engine = create_engine(sa_url(DIRECT), future=True)
    app = Flask("engine_only")
    ext = FlaskIdempotency(engine=engine, scope="one-service")
    ext.init_app(app)

    @app.post("/orders")
    def place():
        order = Order(idempotency_key=request.headers["Idempotency-Key"], sku="engine-only")
        g.idempotency.session.add(order)
        g.idempotency.session.commit()
        if request.get_json().get("fail"):
            raise RuntimeError("after its write")
        return {"order_id": order.id}, 201
    key, failing = unique_key("flask-engine"), unique_key("flask-engine-fail")
    client = app.test_client()
    first = client.post("/orders", json={}, headers={"Idempotency-Key": key})
    again = client.post("/orders", json={}, headers={"Idempotency-Key": key})
    assert first.status_code == 201 and again.headers["Idempotent-Replayed"] == "true" and again.data == first.data
    assert client.post("/orders", json={"fail": True}, headers={"Idempotency-Key": failing}).status_code == 500
    engine.dispose()
    assert orders_of([key, failing]) == {key: 1} and record(failing) is None
    with pytest.raises(ValueError):
        FlaskIdempotency(scope="s")  # neither db nor engine
