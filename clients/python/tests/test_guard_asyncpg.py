"""The asyncpg connection an ASGI handler gets (GuardedAsyncpgConnection):
every statement method refuses transaction control before anything is
sent, and every statement after the transaction ended or the request's
connection went back to the pool; the setting the asyncpg pool refuses;
and asyncpg's errors without a SQLSTATE.  A stand-in connection records
what would reach the server."""
import asyncio

import asyncpg
import pytest

from pg_idempotency_key.asgi import IdempotencyMiddleware
from pg_idempotency_key.core import failure_answer
from pg_idempotency_key.guard import GuardedAsyncpgConnection
from pg_idempotency_key.transaction_control import TransactionEnded

METHODS = ["execute", "fetch", "fetchrow", "fetchval", "executemany", "prepare", "copy_from_query"]


class StandIn:
    """an asyncpg connection in a transaction that records the queries it gets"""

    def __init__(self):
        self.sent, self.in_transaction = [], True

    def is_in_transaction(self):
        return self.in_transaction

    def __getattr__(self, name):
        async def method(query, *args, **kwargs):
            self.sent.append((name, query))
        return method


def guarded():
    conn = StandIn()
    return conn, GuardedAsyncpgConnection(conn, lambda c: not c.is_in_transaction())


def call(guard, method, query):
    args = ([],) if method == "executemany" else ()
    return asyncio.run(getattr(guard, method)(query, *args))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("query", ["COMMIT", "rollback", "SELECT 1; COMMIT", "/* c */ BEGIN", "END", "ABORT",
                                   "PREPARE TRANSACTION 'x'", "START TRANSACTION"])
def test_transaction_control_is_refused_before_it_is_sent(method, query):
    conn, guard = guarded()
    with pytest.raises(TransactionEnded):
        call(guard, method, query)
    with pytest.raises(TransactionEnded):  # and every statement after it
        call(guard, method, "SELECT 1")
    assert conn.sent == [] and guard.ended


@pytest.mark.parametrize("method", METHODS)
def test_statements_and_savepoints_pass(method):
    conn, guard = guarded()
    for query in ("INSERT INTO orders VALUES (1)", "SAVEPOINT a", "ROLLBACK TO SAVEPOINT a", "RELEASE a"):
        call(guard, method, query)
    assert [q for _, q in conn.sent] == ["INSERT INTO orders VALUES (1)", "SAVEPOINT a", "ROLLBACK TO SAVEPOINT a",
                                         "RELEASE a"]
    assert not guard.ended


def test_a_transaction_ended_anyway_refuses_what_follows():
    conn, guard = guarded()
    call(guard, "execute", "SELECT 1")
    conn.in_transaction = False  # ended by a statement the guard could not read (a function's COMMIT, say)
    with pytest.raises(TransactionEnded):
        call(guard, "fetch", "SELECT 2")
    assert [q for _, q in conn.sent] == ["SELECT 1"] and guard.ended


@pytest.mark.parametrize("name", ["close", "terminate", "reset"])
def test_the_connection_cannot_be_closed_or_reset(name):
    conn, guard = guarded()
    with pytest.raises(TransactionEnded):
        result = getattr(guard, name)()
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    assert conn.sent == [] and guard.ended


def test_after_the_request_nothing_runs():
    conn, guard = guarded()
    guard.detached = True
    with pytest.raises(RuntimeError, match="transaction is over"):
        call(guard, "execute", "SELECT 1")
    with pytest.raises(RuntimeError, match="transaction is over"):
        asyncio.run(guard.copy_records_to_table("orders", records=[]))
    assert conn.sent == []


@pytest.mark.parametrize("routes", [{}, {"/orders": {"prepare": True}}], ids=["everywhere", "one-route"])
def test_prepare_is_refused_on_asyncpg(routes):
    async def setup():
        pool = asyncpg.create_pool("postgresql://nobody@127.0.0.1:1/none")  # not opened: nothing connects
        IdempotencyMiddleware(None, pool=pool, scope="shop", prepare=not routes, routes=routes)
    with pytest.raises(ValueError, match="asyncpg prepares every statement itself"):
        asyncio.run(setup())


@pytest.mark.parametrize("error", [asyncpg.InternalClientError("cannot switch to state 11"),
                                   asyncpg.exceptions.ProtocolError("unexpected message"),
                                   asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")],
                         ids=["internal-client", "protocol", "connection-gone"])
def test_a_session_asyncpg_lost_track_of_answers_503(error):
    """asyncpg loses its protocol state when PgBouncer ends an idle session
    under it: nothing of the request committed, so 503 unavailable, as a
    broken connection (not the framework's 500)"""
    answer = failure_answer(error, outcome=True)
    assert answer.status == 503 and b"urn:idempotency:unavailable" in answer.body
