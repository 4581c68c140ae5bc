"""ASGI middleware (Starlette, FastAPI) whose handlers write through an
SQLAlchemy AsyncSession bound to the claim's transaction:
request.state.idempotency.session, on an AsyncEngine with the asyncpg
driver (SQLAlchemy 1.4 has no async dialect for psycopg 3).

The request's connection is one of the engine's, in SQLAlchemy's
AUTOCOMMIT mode, so that the asyncpg dialect starts and commits no
transaction of its own (and sends nothing to set the mode); the
middleware sends BEGIN and the claim on the same asyncpg connection, the
AsyncSession's statements run in that transaction, and idem_finish and
COMMIT end it.  All of it runs on the event loop.  The Session's
behaviour in the claim's transaction (commit() flushes, rollback() and
COMMIT through it answer transaction-ended) is sqlalchemy_flow's; the
answers are those of every middleware of the package."""
import asyncio

from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncSession

from .asgi import TOO_LARGE, _AppRun, admit, send_answer
from .core import (Options, Response, RetryRequest, claim_row, claim_sql, failure_answer, finish_sql, keeps,
                   not_claimed, numbered, refuse_prepare, response_too_large, transaction_ended, unavailable)
from .sqlalchemy_flow import Idempotency, SessionFlow, guard


class SQLAlchemyAsyncIdempotencyMiddleware:
    """app.add_middleware(SQLAlchemyAsyncIdempotencyMiddleware, engine=engine, scope=...)

    engine: an AsyncEngine on asyncpg (create_async_engine("postgresql+asyncpg://...")),
    session_options: keyword arguments of the request's AsyncSession
    (expire_on_commit=False unless given);
    routes: {path: {option: value, ...}} or {path: False}."""

    def __init__(self, app, engine, routes=None, session_options=None, **options):
        self.app, self.engine = app, engine
        self.options = Options(**options)
        self.routes = {path: (False if v is False else self.options.replace(**(v if isinstance(v, dict) else {})))
                       for path, v in (routes or {}).items()}
        for o in (self.options, *self.routes.values()):
            SessionFlow.refuse_lease(o)
            refuse_prepare(o)
        # commit() commits nothing before the stored response, so expiring
        # the objects would only make their next attribute read a lazy load,
        # which an AsyncSession refuses (MissingGreenlet)
        self.session_options = {"expire_on_commit": False, **(session_options or {})}
        guard(engine.sync_engine)

    async def __call__(self, scope, receive, send):
        admitted = await admit(self, scope, receive, send)
        if admitted is None:
            return
        o, body, request = admitted
        runs = []  # every run of the application (a 40001 runs it again)
        try:
            for attempt in range(o.retries + 1):
                try:
                    answer = await self._attempt(o, scope, body, request, runs)
                    break
                except RetryRequest as r:
                    if attempt == o.retries:
                        answer = r.answer()
        except BaseException:
            for r in runs:
                await r.abandon()
            raise
        await send_answer(send, answer, runs)

    async def _attempt(self, o, scope, body, request, runs):
        key, scope_name, fp = request
        try:
            conn = await self.engine.connect()
        except PoolTimeout:  # every connection of the engine's pool is taken, past its pool_timeout
            return unavailable()
        except Exception as exc:
            answer = failure_answer(exc)
            if answer is None and isinstance(exc, (OSError, asyncio.TimeoutError)):
                return unavailable()  # asyncpg could not connect: no driver error, no SQLSTATE
            if answer is None:
                raise
            return answer
        raw = None
        try:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            raw = (await conn.get_raw_connection()).driver_connection  # the asyncpg.Connection
            claimed = await self._claim(o, raw, key, scope_name, fp)
        except BaseException as exc:
            await self._end(conn, raw)
            if not isinstance(exc, Exception):
                raise
            answer = failure_answer(exc)
            if answer is None:
                raise
            return answer
        if claimed is not None:
            await self._end(conn, raw)
            return claimed
        handle = Idempotency(conn.sync_connection, key, scope_name, AsyncSession(bind=conn, **self.session_options))
        return await self._run(o, conn, raw, handle, scope, body, runs)

    @staticmethod
    async def _claim(o, raw, key, scope_name, fp):
        """-> None once raw holds the claim (or, without a key, a
        transaction), or the Response to send"""
        if key is None:
            await raw.execute("BEGIN")
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + o.wait_for
        sql, params = claim_sql(o, key, scope_name, fp)
        polls = 0
        while True:
            await raw.execute("BEGIN")
            outcome, result, _, _, retry_after = claim_row(await raw.fetchrow(numbered(sql), *params))
            if outcome == "claimed":
                return None
            await raw.execute("ROLLBACK")
            answer = not_claimed(o, outcome, result, retry_after, polls, deadline, loop.time())
            polls += 1
            if isinstance(answer, Response):
                return answer
            await asyncio.sleep(answer)

    async def _run(self, o, conn, raw, handle, scope, body, runs):
        scope.setdefault("state", {})["idempotency"] = handle
        run = _AppRun(self.app, scope, body, o.max_response_bytes)
        runs.append(run)
        try:
            response = await run.result()
        except Exception as exc:
            await self._end(conn, raw, handle)
            answer = failure_answer(exc, own=False, ended=handle.ended)
            if answer is None:
                raise
            return answer
        except BaseException:  # cancelled: nothing of the request commits
            await self._end(conn, raw, handle)
            raise
        if response is TOO_LARGE:
            await self._end(conn, raw, handle)
            return response_too_large(o)
        if handle.ended or handle.rolled_back or not raw.is_in_transaction():
            await self._end(conn, raw, handle)
            return transaction_ended()
        if handle.key is None:
            finish, commit = None, response.status < 500
        else:
            finish = finish_sql(handle.key, handle.scope, response, o.stored_headers)
            commit = keeps(o, response.status)
        if not commit:
            await self._end(conn, raw, handle)
            return response
        await self._detach(conn, handle)
        try:
            if finish is not None:
                await raw.execute(numbered(finish[0]), *finish[1])
            await raw.execute("COMMIT")
        except Exception as exc:
            await self._end(conn, raw)
            answer = failure_answer(exc, own=finish is not None, outcome=True)
            if answer is None:
                raise
            return answer
        await conn.close()
        return response

    @staticmethod
    async def _detach(conn, handle):
        """the request's Session is closed (SQLAlchemy then refuses its
        statements) and the connection no longer the request's"""
        try:
            await handle.session.close()
        finally:
            conn.sync_connection.info.pop("idempotency", None)

    async def _end(self, conn, raw, handle=None):
        """rolls back and gives the connection back; one that could not
        roll back is thrown away"""
        try:
            if handle is not None:
                await self._detach(conn, handle)
            if raw is not None and not raw.is_closed() and raw.is_in_transaction():
                await raw.execute("ROLLBACK")
        except Exception:
            await conn.invalidate()
        await conn.close()
