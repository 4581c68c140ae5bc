"""Every connection the ASGI middleware takes from an asyncpg pool goes
back to it, whatever the driver raises at the claim or the outcome: a
connection kept would make asyncpg's Pool.close() wait for it for ever
(the server's shutdown hangs).  A stand-in pool and connection, in
process."""
import asyncio
import json

import asyncpg
import pytest

from pg_idempotency_key.asgi import IdempotencyMiddleware


class StandInPool:
    """counts the connections acquired and released"""
    __module__ = "asyncpg.pool"  # the middleware tells asyncpg's pool by its module

    def __init__(self, fail_at, error):
        self.fail_at, self.error = fail_at, error
        self.acquired = self.released = 0

    def get_idle_size(self):
        return 1

    async def acquire(self, timeout=None):
        self.acquired += 1
        return StandInConnection(self)

    async def release(self, conn, timeout=None):
        self.released += 1


class StandInTransaction:
    def __init__(self, conn):
        self.conn = conn

    async def start(self):
        self.conn.open = True

    async def commit(self):
        self.conn.open = False

    async def rollback(self):
        self.conn.open = False


class StandInConnection:
    def __init__(self, pool):
        self.pool, self.open = pool, False

    def transaction(self):
        return StandInTransaction(self)

    def is_in_transaction(self):
        return self.open

    def is_closed(self):
        return False

    async def fetchrow(self, sql, *args):
        if self.pool.fail_at == "claim":
            raise self.pool.error
        return json.dumps(["claimed", None, None, 1]), None

    async def execute(self, sql, *args):
        if self.pool.fail_at == "outcome":
            raise self.pool.error
        return "SELECT 1"


async def created(scope, receive, send):
    await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


def request(pool):
    """one POST with a key through the middleware -> the status sent, or the exception raised"""
    middleware = IdempotencyMiddleware(created, pool=pool, scope="shop")
    scope = {"type": "http", "method": "POST", "path": "/orders", "query_string": b"",
             "headers": [(b"idempotency-key", b"k1"), (b"content-type", b"application/json")]}
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    try:
        asyncio.run(middleware(scope, receive, send))
    except Exception as exc:
        return exc
    return sent[0]["status"]


@pytest.mark.parametrize("fail_at", ["claim", "outcome"])
@pytest.mark.parametrize("error,answer", [
    (asyncpg.InternalClientError("cannot switch to state 11"), 503),
    (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"), 503),
    (asyncpg.exceptions.AdminShutdownError("terminating connection"), 503),
    (RuntimeError("a driver's own bug"), RuntimeError),
], ids=["internal-client", "connection-gone", "admin-shutdown", "other"])
def test_the_connection_goes_back_whatever_the_driver_raises(fail_at, error, answer):
    pool = StandInPool(fail_at, error)
    result = request(pool)
    assert result == answer if isinstance(answer, int) else isinstance(result, answer), result
    assert pool.acquired == pool.released == 1


def test_a_request_that_succeeds_gives_its_connection_back():
    pool = StandInPool(None, None)
    assert request(pool) == 201
    assert pool.acquired == pool.released == 1
