"""The two pools the ASGI middleware (asgi.py) takes, behind one interface:
psycopg_pool.AsyncConnectionPool (psycopg 3) and asyncpg's Pool.

The middleware's statements are written once, with %s placeholders; each
driver sends them its own way.  psycopg: BEGIN travels with the claim and
COMMIT with the outcome, one simple-protocol query each whose values
psycopg's client-side cursor binds (AsyncClientCursor; pipeline mode took
about twice the client's CPU per claim), or EXECUTEs of statements
PREPAREd once per connection (prepare=True).  asyncpg speaks only the
extended protocol, which runs one statement per query: BEGIN, the claim,
the outcome and COMMIT are a round trip each, the claim and the outcome
prepared once per connection by asyncpg's own statement cache."""
import asyncio

import psycopg
from psycopg import AsyncClientCursor
from psycopg.pq import TransactionStatus

from .core import PREPARE_STATEMENTS, numbered
from .guard import GuardedAsyncpgConnection, GuardedConnection


def driver_of(pool):
    """the driver of the middleware's pool"""
    if any(c.__module__.split(".")[0] == "asyncpg" for c in type(pool).__mro__):  # without importing asyncpg
        return AsyncpgDriver(pool)
    return PsycopgDriver(pool)


# how long a request waits for a connection of an asyncpg Pool when every
# one is taken (asyncpg's own acquire() waits without end), seconds: as
# psycopg_pool's default timeout, after which the request answers 503;
# and how long asyncpg may take to reset a connection given back before it
# closes it (unbounded after an acquire() without a timeout; a release
# that never ends keeps Pool.close() waiting for ever)
ACQUIRE_TIMEOUT = 30.0


class ConnectionUnavailable(Exception):
    """asyncpg could not connect or had no free connection in time: no word
    from the server, so no SQLSTATE of its own; counts as 08006,
    connection failure, as psycopg's OperationalError does"""
    sqlstate = "08006"


class PsycopgDriver:
    prepares_itself = False

    errors = (psycopg.Error,)

    def __init__(self, pool):
        self.pool = pool

    async def getconn(self):
        conn = await self.pool.getconn()
        # BEGIN and COMMIT are sent with the claim and the outcome
        if not conn.autocommit:
            await conn.set_autocommit(True)
            conn._idem_set_autocommit = True
        return conn

    async def putconn(self, conn):
        if getattr(conn, "_idem_set_autocommit", False) and not conn.closed:
            await conn.set_autocommit(False)
            conn._idem_set_autocommit = False
        await self.pool.putconn(conn)

    def idle(self, conn):
        """is conn outside any transaction (the handler's transaction ended)?"""
        return conn.pgconn.transaction_status == TransactionStatus.IDLE

    async def rollback(self, conn):
        """rolls back (if anything is open) and gives conn back to the pool"""
        if not conn.closed and not self.idle(conn):
            try:
                await conn.execute("ROLLBACK")
            except psycopg.Error:
                pass
        await self.putconn(conn)

    @staticmethod
    def guard(conn):
        return GuardedConnection(conn)

    async def begin(self, conn):
        await conn.execute("BEGIN")

    async def commit(self, conn):
        await conn.execute("COMMIT")

    async def prepare(self, conn):
        """prepare=True: the claim's and the outcome's statements on conn (idle),
        PREPAREd on its first use, or again once the server lost them;
        -> whether they were PREPAREd now"""
        if getattr(conn, "_idem_prepared", False):
            return False
        for statement in PREPARE_STATEMENTS:
            try:
                await conn.execute(statement)
            except psycopg.errors.DuplicatePreparedStatement:
                pass  # one of the two was, before an error stopped the other
        conn._idem_prepared = True
        return True

    @staticmethod
    def lost_prepared(conn):
        """the server lost conn's prepared statements (26000)"""
        conn._idem_prepared = False

    async def claim(self, conn, sql, params, begin):
        """-> the claim's row; begin: in a transaction begun with it"""
        cur = AsyncClientCursor(conn)
        await cur.execute("BEGIN; " + sql if begin else sql, params)
        if begin:
            cur.nextset()
        return await cur.fetchone()

    async def finish(self, conn, sql, params, commit):
        """the outcome's statement; commit: then COMMIT"""
        await AsyncClientCursor(conn).execute(sql + "; COMMIT" if commit else sql, params)

    async def run(self, conn, sql, params):
        """-> the first value of the statement's first row"""
        cur = await conn.execute(sql, params)
        return (await cur.fetchone())[0]


class AsyncpgDriver:
    prepares_itself = True

    def __init__(self, pool):
        import asyncpg  # only with an asyncpg pool: an optional dependency
        self.pool, self._released = pool, asyncpg.InterfaceError
        self.errors = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, ConnectionUnavailable)
        self._transactions = {}  # connection -> its asyncpg Transaction, that the handler's nest as savepoints

    async def getconn(self):
        try:
            if self.pool.get_idle_size():
                # one is free, so acquire() takes it at once: no timeout (asyncpg's
                # costs a task and a timer, some 17 us of CPU per request)
                return await self.pool.acquire()
            return await self.pool.acquire(timeout=ACQUIRE_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ConnectionUnavailable(f"could not connect: {exc}") from exc

    async def putconn(self, conn):
        self._transactions.pop(conn, None)
        try:
            if conn.is_closed():
                # the session ended under it (PgBouncer closed it): asyncpg 0.27's
                # release() returns early for a closed connection and leaves its
                # slot taken for good (Pool.close() then waits for ever);
                # terminate() frees the slot
                conn.terminate()
                return
            await self.pool.release(conn, timeout=ACQUIRE_TIMEOUT)
        except self.errors:
            pass  # asyncpg closed it (its reset failed), or released it already: the pool connects anew

    def in_transaction(self, conn):
        """is conn in a transaction? (not once asyncpg released it to the
        pool: it does when the session ends)"""
        try:
            return conn.is_in_transaction()
        except self._released:
            return False

    def idle(self, conn):
        """is conn outside any transaction, its session still there?"""
        try:
            return not conn.is_in_transaction()
        except self._released:
            return False

    @staticmethod
    def lost_prepared(conn):
        pass  # asyncpg's statement cache is its own

    async def rollback(self, conn):
        transaction = self._transactions.pop(conn, None)
        if self.in_transaction(conn):
            try:
                if transaction is not None:
                    await transaction.rollback()
                else:
                    await conn.execute("ROLLBACK")
            except self.errors:
                pass
        await self.putconn(conn)

    def guard(self, conn):
        return GuardedAsyncpgConnection(conn, self.idle)

    async def begin(self, conn):
        transaction = conn.transaction()
        await transaction.start()
        self._transactions[conn] = transaction

    async def commit(self, conn):
        transaction = self._transactions.pop(conn, None)
        if transaction is not None:
            await transaction.commit()
        else:
            await conn.execute("COMMIT")

    async def claim(self, conn, sql, params, begin):
        if begin:
            await self.begin(conn)
        return await conn.fetchrow(numbered(sql), *params)

    async def finish(self, conn, sql, params, commit):
        await conn.execute(numbered(sql), *params)
        if commit:
            await self.commit(conn)

    @staticmethod
    async def run(conn, sql, params):
        return await conn.fetchval(numbered(sql), *params)
