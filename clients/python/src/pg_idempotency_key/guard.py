"""The connection handed to an ASGI handler, guarded: the claim, the
handler's writes and the stored response must commit together, so the
handler may not end that transaction itself.  A statement that would
(COMMIT, ROLLBACK, BEGIN, END, ABORT, PREPARE TRANSACTION) is refused
before it is sent, and so is every statement after the transaction ended
anyway; the request then answers 500 transaction-ended with nothing
committed.  Savepoints (conn.transaction(), ROLLBACK TO) are allowed.
GuardedConnection guards a psycopg connection, GuardedAsyncpgConnection
an asyncpg one."""
from psycopg.pq import TransactionStatus

from .transaction_control import TransactionEnded, ends_transaction


def _text(query, conn):
    if isinstance(query, str):
        return query
    if isinstance(query, bytes):
        return query.decode("utf-8", "replace")
    return query.as_string(conn)


class _Guard:
    """what both drivers' guards share: the checks before a statement
    (_ends(query): would it end, or has the transaction ended?) and the
    refusal; attributes other than the guard's are the connection's"""

    def __init__(self, conn):
        self._conn = conn
        self.ended = False
        self.detached = False  # the request's transaction is over: nothing more may run here

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def _before(self, query):
        if self.detached:
            raise RuntimeError("this request's transaction is over (its connection went back to the pool);"
                               " a background task takes a connection of its own")
        if not self.ended and self._ends(query):
            self.ended = True
        if self.ended:
            raise TransactionEnded()

    def _refuse(self):
        self.ended = True
        self._before("")


class GuardedConnection(_Guard):
    """a psycopg.AsyncConnection in the claim's transaction, for the handler"""

    def _ends(self, query):
        return (self._conn.pgconn.transaction_status not in (TransactionStatus.INTRANS, TransactionStatus.INERROR)
                or ends_transaction(_text(query, self._conn)))

    def _after(self):
        if self._conn.pgconn.transaction_status == TransactionStatus.IDLE:
            self.ended = True

    async def execute(self, query, params=None, **kwargs):
        self._before(query)
        try:
            return _GuardedCursor(self, await self._conn.execute(query, params, **kwargs))
        finally:
            self._after()

    def cursor(self, *args, **kwargs):
        return _GuardedCursor(self, self._conn.cursor(*args, **kwargs))

    async def commit(self):
        self._refuse()

    async def rollback(self):
        self._refuse()

    async def set_autocommit(self, value):
        self._refuse()

    async def close(self):
        self._refuse()


class _GuardedCursor:
    def __init__(self, guard, cursor):
        self._guard, self._cursor = guard, cursor

    def __getattr__(self, name):
        return getattr(self._cursor, name)

    def __aiter__(self):
        return self._cursor.__aiter__()

    async def __aenter__(self):
        await self._cursor.__aenter__()
        return self

    async def __aexit__(self, *exc):
        return await self._cursor.__aexit__(*exc)

    async def execute(self, query, params=None, **kwargs):
        self._guard._before(query)
        try:
            await self._cursor.execute(query, params, **kwargs)
            return self
        finally:
            self._guard._after()

    async def executemany(self, query, params_seq, **kwargs):
        self._guard._before(query)
        try:
            return await self._cursor.executemany(query, params_seq, **kwargs)
        finally:
            self._guard._after()

    async def stream(self, query, params=None, **kwargs):
        self._guard._before(query)
        try:
            async for row in self._cursor.stream(query, params, **kwargs):
                yield row
        finally:
            self._guard._after()


class GuardedAsyncpgConnection(_Guard):
    """an asyncpg connection (of the pool) in the claim's transaction, for
    the handler: the statement methods are guarded; conn.transaction()
    nests in the claim's transaction, as a savepoint; the connection's own
    close(), terminate() and reset() are refused"""

    def __init__(self, conn, idle):
        super().__init__(conn)
        self._idle = idle  # idle(conn): the driver's

    def _ends(self, query):
        return self._idle(self._conn) or ends_transaction(query)

    def _after(self):
        if self._idle(self._conn):
            self.ended = True

    async def _guarded(self, method, query, *args, **kwargs):
        self._before(query)
        try:
            return await method(query, *args, **kwargs)
        finally:
            self._after()

    async def execute(self, query, *args, **kwargs):
        return await self._guarded(self._conn.execute, query, *args, **kwargs)

    async def executemany(self, command, args, **kwargs):
        return await self._guarded(self._conn.executemany, command, args, **kwargs)

    async def fetch(self, query, *args, **kwargs):
        return await self._guarded(self._conn.fetch, query, *args, **kwargs)

    async def fetchrow(self, query, *args, **kwargs):
        return await self._guarded(self._conn.fetchrow, query, *args, **kwargs)

    async def fetchval(self, query, *args, **kwargs):
        return await self._guarded(self._conn.fetchval, query, *args, **kwargs)

    async def copy_from_query(self, query, *args, **kwargs):
        return await self._guarded(self._conn.copy_from_query, query, *args, **kwargs)

    async def copy_from_table(self, table_name, **kwargs):
        self._before("")
        return await self._conn.copy_from_table(table_name, **kwargs)

    async def copy_to_table(self, table_name, **kwargs):
        self._before("")
        return await self._conn.copy_to_table(table_name, **kwargs)

    async def copy_records_to_table(self, table_name, **kwargs):
        self._before("")
        return await self._conn.copy_records_to_table(table_name, **kwargs)

    async def prepare(self, query, **kwargs):
        """a prepared statement runs later without this guard: one that would
        end the transaction is refused here"""
        return await self._guarded(self._conn.prepare, query, **kwargs)

    def cursor(self, query, *args, **kwargs):
        self._before(query)
        return self._conn.cursor(query, *args, **kwargs)

    async def close(self, **kwargs):
        self._refuse()

    def terminate(self):
        self._refuse()

    async def reset(self, **kwargs):
        self._refuse()
