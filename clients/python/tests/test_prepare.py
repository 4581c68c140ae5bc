"""prepare=True (IdempotencyMiddleware): the claim and the outcome are
PREPAREd once per connection and run with EXECUTE; statements the server
lost (DEALLOCATE ALL, a pool's reset with DISCARD ALL) are prepared again,
and the request is answered as usual.  prepare=False (the default) prepares
nothing; the middlewares that do not run on psycopg refuse the option."""
import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from helpers import app_number, framework_of, orders_of, post, record, unique_key

from pg_idempotency_key.flask import FlaskIdempotency
from pg_idempotency_key.sqlalchemy_asgi import SQLAlchemyIdempotencyMiddleware
from pg_idempotency_key.sqlalchemy_async import SQLAlchemyAsyncIdempotencyMiddleware

# engines that never connect here
SA_URL, SA_ASYNC_URL = "postgresql+psycopg2://nobody@/nowhere", "postgresql+asyncpg://nobody@/nowhere"


def prepared(request):
    return request.node.callspec.params["app"][1] == "prepared"


def test_statements_prepared_per_connection_and_again_once_lost(app, request):
    if framework_of(request) != "asgi":
        pytest.skip("an option of the ASGI middleware on psycopg")
    first = unique_key("prepared")
    assert post(app, "/orders", first, {"sku": "p1"})[0] == 201
    held = app_number(app, "/prepared-statements-lost")
    if not prepared(request):
        assert held == 0  # the default sends no named statements
        return
    assert held >= 2 and held % 2 == 0, held  # the claim and the outcome, on each connection used
    assert app_number(app, "/prepared-statements-lost") == 0  # every connection lost them
    key = unique_key("prepared-lost")
    status, _, body = post(app, "/orders", key, {"sku": "p2"})
    assert status == 201, body
    assert orders_of([key]) == {key: 1}
    status, headers, again = post(app, "/orders", key, {"sku": "p2"})
    assert (status, headers.get("idempotent-replayed"), again) == (201, "true", body)
    again_held = app_number(app, "/prepared-statements-lost")
    assert again_held >= 2 and again_held % 2 == 0, again_held  # prepared again on the connections used
    # leased: the claim and the outcome on connections of their own, each
    # of which lost its statements
    leased = unique_key("prepared-lost-leased")
    status, _, body = post(app, "/orders/leased", leased, {"sku": "p3"})
    assert status == 201, body
    assert orders_of([leased]) == {leased: 1}
    assert post(app, "/orders/leased", leased, {"sku": "p3"})[2] == body


def test_statements_dropped_by_the_handler_fail_closed(app, request):
    """a handler that drops the claim's connection's statements: with
    prepare=True the outcome cannot be recorded, so nothing commits (500)
    and the retry, prepared again, places the one order"""
    if framework_of(request) != "asgi":
        pytest.skip("an option of the ASGI middleware on psycopg")
    key = unique_key("deallocated")
    status, _, body = post(app, "/orders/deallocate", key, {"sku": "d"})
    if prepared(request):
        assert status == 500, body
        assert orders_of([key]) == {} and record(key) is None
        status, _, body = post(app, "/orders/deallocate", key, {"sku": "d"})
    assert status == 201, body
    assert orders_of([key]) == {key: 1}


@pytest.mark.parametrize("middleware", [
    lambda **o: SQLAlchemyIdempotencyMiddleware(None, engine=create_engine(SA_URL, future=True), **o),
    lambda **o: SQLAlchemyAsyncIdempotencyMiddleware(None, engine=create_async_engine(SA_ASYNC_URL), **o),
    lambda **o: FlaskIdempotency(engine=create_engine(SA_URL, future=True), **o),
], ids=["sqlalchemy", "sqlalchemy-async", "flask"])
def test_prepare_refused_where_it_does_not_apply(middleware):
    for options in ({"prepare": True}, {"routes": {"/orders": {"prepare": True}}}):
        with pytest.raises(ValueError, match="prepare=True is an option of"):
            middleware(scope="s", **options)
    middleware(scope="s")  # and without it, accepted
