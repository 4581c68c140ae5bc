"""Pure ASGI middleware for Starlette and FastAPI on psycopg 3's
psycopg_pool.AsyncConnectionPool or on asyncpg's Pool (asgi_drivers.py).

Only the configured methods of paths the application routes (Starlette:
a route matches path and method) are handled; everything else passes
through untouched.  The request body is read first, up to max_body_bytes
(for the fingerprint), and handed to the application again; the
application's response is held back until its outcome is committed with
the claim, so a client never sees an answer that was not recorded, and
the application's background tasks run after that, as they do without
the middleware.  A serialization failure
or deadlock re-runs the application, up to `retries` times.  A duplicate
of a request this process is claiming or running is answered in memory
(flights.py)."""
import asyncio
import json

from .asgi_drivers import driver_of
from .core import (CLAIM_STATEMENT, FINISH_STATEMENT, Options, Response, RetryRequest,
                   answer_of_error, body_too_large, check_key, claim_row, claim_sql, executed, fail_sql,
                   failure_answer, finish_sql, fingerprint, handler_timeout, in_progress, keeps, not_claimed,
                   refuse_prepare, replay_of, response_too_large, scope_missing, sqlstate_of, transaction_ended)
from .flights import TIMED_OUT, await_flight, flight_of, land, take_off

TOO_LARGE = object()
OVERTIME = object()  # what _AppRun.result gives for a handler past its time limit
ENDED = object()  # the application ended without a response


async def send_response(send, r):
    headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in r.headers if n != "content-length"]
    headers.append((b"content-length", str(len(r.body)).encode()))
    await send({"type": "http.response.start", "status": r.status, "headers": headers})
    await send({"type": "http.response.body", "body": r.body})


async def send_answer(send, answer, runs):
    """sends answer; the application's run that made it goes on (to its
    background tasks) once it is sent, every other run is cancelled"""
    sent = [r for r in runs if r.response.done() and not r.response.cancelled() and r.response.result() is answer]
    for r in runs:
        if r not in sent:
            await r.abandon()
    try:
        await send_response(send, answer)
    finally:
        for r in sent:
            await r.release()


async def read_body(receive, limit):
    """-> the request body; None when the client went away before its end
    (nothing may be claimed for a truncated body), TOO_LARGE beyond limit"""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def routes_of(app):
    """the route list of the Starlette router under app (through the
    middleware Starlette stacks), or None for another ASGI application"""
    for _ in range(64):
        routes = getattr(app, "routes", None)
        if isinstance(routes, list):
            return routes
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def routed(routes, scope):
    """does a route take this path and method (a Mount: this path)?"""
    if routes is None:
        return True
    full = _full_match()
    return any(route.matches(scope)[0] == full for route in routes)


def _full_match(cache=[]):
    """Starlette's Match.FULL, imported once (not on every request; other
    ASGI frameworks never import Starlette)"""
    if not cache:
        from starlette.routing import Match
        cache.append(Match.FULL)
    return cache[0]


def request_headers(scope):
    """-> (every Idempotency-Key line, Content-Length, Content-Type) of an
    ASGI scope, in one pass over its headers"""
    keys, length, content_type = [], None, None
    for name, value in scope.get("headers", ()):
        name = name.lower()
        if name == b"idempotency-key":
            keys.append(value.decode("latin-1"))
        elif name == b"content-length" and length is None:
            length = value.decode("latin-1")
        elif name == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
    return keys, length, content_type


async def admit(middleware, scope, receive, send):
    """the checks before a claim, shared by the ASGI middlewares (middleware:
    app, options, routes) -> (options, body, (key, scope name, fingerprint)),
    or None once the request was passed on to the application or answered"""
    if scope["type"] != "http":
        return await middleware.app(scope, receive, send)
    o = middleware.routes.get(scope["path"], middleware.options)
    if "_routes" not in middleware.__dict__:
        middleware._routes = routes_of(middleware.app)
    if o is False or scope["method"] not in o.methods or not routed(middleware._routes, scope):
        return await middleware.app(scope, receive, send)
    keys, length, content_type = request_headers(scope)
    refused = check_key(keys, o)
    if refused:
        return await send_response(send, refused)
    key = keys[0] if keys else None
    scope_name = o.scope_of(scope) if key is not None else None
    if key is not None and scope_name is None:
        return await send_response(send, scope_missing())
    if length is not None and length.isdigit() and int(length) > o.max_body_bytes:
        return await send_response(send, body_too_large(o))
    body = await read_body(receive, o.max_body_bytes)
    if body is None:
        return None  # the client went away before the body ended: nothing to answer, nothing done
    if body is TOO_LARGE:
        return await send_response(send, body_too_large(o))
    path = scope["path"] + ("?" + scope["query_string"].decode("latin-1") if scope.get("query_string") else "")
    return o, body, (key, scope_name, fingerprint(scope["method"], path, body, content_type))


class _AppRun:
    """the application running on a request: its response is held back
    (result()); the application (its background tasks) goes on only once
    the response was sent (release()), or is cancelled (abandon())"""

    def __init__(self, app, scope, body, max_response_bytes):
        loop = asyncio.get_running_loop()
        # the Response (or TOO_LARGE); ENDED once the application returned or
        # raised without one, OVERTIME past the time limit: one future to
        # await rather than asyncio.wait's for two
        self.response = loop.create_future()
        self.sent = asyncio.Event()
        self._limit = max_response_bytes
        self._body = body
        self._status, self._headers, self._chunks, self._size = None, [], [], 0
        self.task = loop.create_task(app(scope, self._receive, self._capture))
        self.task.add_done_callback(self._ended)

    def _ended(self, task):
        if not self.response.done():
            self.response.set_result(ENDED)

    async def _receive(self):
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.sent.wait()  # no disconnect before the response is sent
        return {"type": "http.disconnect"}

    async def _capture(self, message):
        if self.response.done():
            raise RuntimeError("the application sent after its response ended")
        if message["type"] == "http.response.start":
            self._status = message["status"]
            self._headers = [(n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in message.get("headers", ())]
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            self._size += len(chunk)
            if self._size > self._limit:
                self._chunks = None
            elif self._chunks is not None:
                self._chunks.append(chunk)
            if not message.get("more_body"):
                self.response.set_result(TOO_LARGE if self._chunks is None else
                                         Response(self._status, self._headers, b"".join(self._chunks)))
                await self.sent.wait()

    async def result(self, timeout=None):
        """-> the complete Response (or TOO_LARGE, or OVERTIME after timeout
        seconds without one); raises what the application raised"""
        overtime = None
        if timeout is not None:
            overtime = asyncio.get_running_loop().call_later(timeout, self._overtime)
        try:
            # cancelled with the request, it cancels the future: the
            # application can send nothing more, as it is abandoned
            response = await self.response
        finally:
            if overtime is not None:
                overtime.cancel()
        if response is ENDED:
            self.task.result()
            raise RuntimeError("the application returned without a response")
        return response

    def _overtime(self):
        if not self.response.done():
            self.response.set_result(OVERTIME)

    async def release(self):
        """the response was sent: the application ends (background tasks)"""
        self.sent.set()
        await self.task

    async def abandon(self):
        """the response is not sent: the application is cancelled"""
        if not self.task.done():
            self.task.cancel()
        await asyncio.wait({self.task})
        if not self.task.cancelled():
            self.task.exception()  # its failure is no longer anyone's answer


class Idempotency:
    """What the application sees as request.state.idempotency (Starlette,
    FastAPI: scope["state"]["idempotency"])."""

    def __init__(self, middleware, o, key, scope, fence=None, recovery_point=None, conn=None):
        self._middleware, self._o = middleware, o
        self.key, self.scope, self.fence, self.recovery_point = key, scope, fence, recovery_point
        self._raw = conn  # the pool's connection in the claim's transaction, or None
        # what the application gets: the same connection, guarded (guard.py)
        self.conn = middleware.driver.guard(conn) if conn is not None else None
        self.unknown = False
        self.flight = None  # this process's duplicates wait on it (flights.py)

    async def begin(self):
        """the connection in the transaction the outcome commits with
        (taken on first use in leased mode, and without a key)"""
        if self._raw is None:
            driver = self._middleware.driver
            conn = await driver.getconn()
            try:
                await driver.begin(conn)
            except BaseException:
                await driver.rollback(conn)
                raise
            self._raw, self.conn = conn, driver.guard(conn)
        return self.conn

    def _take(self):
        """-> the claim's connection, the middleware's alone from now on
        (the application's guarded handle refuses every statement)"""
        conn, self._raw = self._raw, None
        if self.conn is not None:
            self.conn.detached = True
        return conn

    @property
    def transaction_ended(self):
        """did the application end (or try to end) the transaction?"""
        return self.conn is not None and self.conn.ended

    async def _record(self, call, params):
        if self._o.lease is None:
            raise RuntimeError("checkpoints, heartbeats and unknown outcomes are for leased routes (lease=...)")
        driver = self._middleware.driver
        conn = await driver.getconn()
        try:
            return await driver.run(conn, f"SELECT {call}, scope => %s, fence => %s)",
                                    [self.key, *params, self.scope, self.fence])
        finally:
            await driver.putconn(conn)

    async def extend_lease(self, seconds=None):
        """heartbeat: the lease ends at server time + seconds (default: the route's lease)"""
        return await self._record("idem_extend_lease(%s, make_interval(secs => %s)",
                                  [float(seconds if seconds is not None else self._o.lease)])

    async def checkpoint(self, recovery_point):
        await self._record("idem_checkpoint(%s, %s", [recovery_point])

    async def mark_unknown(self, detail=None):
        """the outcome of an outside call is unknown: nothing is stored for this response"""
        await self._record("idem_mark_unknown(%s, %s::jsonb", [json.dumps(detail or {})])
        self.unknown = True


class IdempotencyMiddleware:
    """app = IdempotencyMiddleware(app, pool=AsyncConnectionPool(...), scope=..., routes={...})

    routes: {path: {option: value, ...}} or {path: False}, per-route settings."""

    def __init__(self, app, pool, routes=None, **options):
        self.app, self.pool = app, pool
        self.driver = driver_of(pool)
        self.options = Options(**options)
        self.routes = {path: (False if v is False else self.options.replace(**(v if isinstance(v, dict) else {})))
                       for path, v in (routes or {}).items()}
        if self.driver.prepares_itself:
            for o in (self.options, *self.routes.values()):
                refuse_prepare(o, "asyncpg prepares every statement itself (its statement cache)")

    async def _execute(self, conn, prepared, sql, params):
        """the outcome's sql on conn in autocommit; prepared (an EXECUTE): once
        more after preparing again if the server lost the statements"""
        driver = self.driver
        fresh = prepared and await driver.prepare(conn)
        try:
            await driver.finish(conn, sql, params, commit=False)
        except driver.errors as exc:
            if not prepared or fresh or sqlstate_of(exc) != "26000":
                raise
            driver.lost_prepared(conn)
            await driver.prepare(conn)
            await driver.finish(conn, sql, params, commit=False)

    async def __call__(self, scope, receive, send):
        admitted = await admit(self, scope, receive, send)
        if admitted is None:
            return
        o, body, request = admitted
        for attempt in range(o.retries + 1):
            runs = []  # the application's run, if it answered
            try:
                answer = await self._attempt(o, scope, body, request, runs)
            except RetryRequest as r:
                for run in runs:
                    await run.abandon()
                if attempt < o.retries:
                    continue
                answer = r.answer()
            except BaseException:
                for run in runs:
                    await run.abandon()
                raise
            await send_answer(send, answer, runs)
            return

    async def _attempt(self, o, scope, body, request, runs):
        key, scope_name, fp = request
        if key is None:
            return await self._run(o, scope, body, Idempotency(self, o, None, None), runs)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + o.wait_for
        flight = None
        if o.lease is None:
            local = flight_of(self.pool, scope_name, key, fp)
            if local is not None and (local.claimed or o.wait_for > 0):
                if o.wait_for <= 0:
                    return in_progress(1)
                replay = await await_flight(local, deadline - loop.time())
                if replay is TIMED_OUT:
                    return in_progress(1)
                if replay is not None:
                    return replay
                # nothing committed there: this request claims at the server
            flight = take_off(self.pool, scope_name, key, fp)
        try:
            claimed = await self._claim(o, key, scope_name, fp, deadline)
            if isinstance(claimed, Response):
                if flight is not None:
                    land(flight, None if claimed.replaced else claimed)  # a replay, or nothing committed
                return claimed
            if flight is not None:
                flight.claimed, claimed.flight = True, flight
            return await self._run(o, scope, body, claimed, runs)
        finally:
            if flight is not None:
                land(flight, None)  # unless it landed with what committed

    async def _run(self, o, scope, body, handle, runs):
        """runs the application for a claimed key (or none), -> what to send"""
        scope.setdefault("state", {})["idempotency"] = handle
        heartbeat = None
        if handle.key is not None and o.heartbeat_every:
            heartbeat = asyncio.ensure_future(self._heartbeat(handle, o.heartbeat_every))
        run = _AppRun(self.app, scope, body, o.max_response_bytes)
        runs.append(run)
        try:
            response = await run.result(o.handler_limit if handle.key is not None else None)
        except Exception as exc:
            await self._release(o, handle, 500)
            answer = failure_answer(exc, own=False, ended=handle.transaction_ended)
            if answer is None:
                raise
            return answer
        except BaseException:
            await self._release(o, handle, 500)
            raise
        finally:
            if heartbeat:
                heartbeat.cancel()
        if response is OVERTIME:
            # the heartbeat stopped (above), the handler is cancelled, its
            # transaction rolls back; the key stays claimed until the lease
            # ends, then a retry takes it over (fence + 1)
            await run.abandon()
            if handle._raw is not None:
                await self.driver.rollback(handle._take())
            return handler_timeout(o)
        if response is TOO_LARGE:
            await self._release(o, handle, 500)
            return response_too_large(o)
        if handle.transaction_ended or (handle._raw is not None and self.driver.idle(handle._raw)):
            await self._release(o, handle, 500)
            return transaction_ended()
        return await self._complete(o, handle, response)

    async def _claim(self, o, key, scope_name, fp, deadline):
        """-> an Idempotency handle for a claimed key, or the Response to send;
        a duplicate in flight is polled until deadline (of the loop's clock)"""
        loop = asyncio.get_running_loop()
        driver = self.driver
        polls = 0
        leased = o.lease is not None
        sql, params = claim_sql(o, key, scope_name, fp)
        if o.prepare:
            sql, params = executed(CLAIM_STATEMENT, params)
        while True:
            try:
                conn = await driver.getconn()
            except driver.errors as exc:  # the pool cannot connect
                answer = answer_of_error(exc)
                if answer:
                    return answer
                raise
            fresh = False
            try:
                if o.prepare:
                    fresh = await driver.prepare(conn)
                outcome, result, fence, recovery_point, retry_after = claim_row(
                    await driver.claim(conn, sql, params, begin=not leased))
            except driver.errors as exc:
                # the server lost the statements (DEALLOCATE, DISCARD ALL): they are
                # prepared again, unless they were just now (a transaction-pooling
                # PgBouncer keeps none: the error is the answer)
                lost = sqlstate_of(exc) == "26000"
                if lost:
                    driver.lost_prepared(conn)
                await driver.rollback(conn)
                if lost and o.prepare and not fresh:
                    continue
                answer = failure_answer(exc)
                if answer is None:
                    raise
                return answer
            except BaseException:  # cancelled, or the driver failed otherwise: the connection goes back
                await driver.rollback(conn)
                raise
            if outcome == "claimed":
                if leased:
                    await driver.putconn(conn)
                return Idempotency(self, o, key, scope_name, fence, recovery_point, None if leased else conn)
            await driver.rollback(conn)
            answer = not_claimed(o, outcome, result, retry_after, polls, deadline, loop.time())
            polls += 1
            if isinstance(answer, Response):
                return answer
            await asyncio.sleep(answer)

    async def _heartbeat(self, handle, every):
        while True:
            await asyncio.sleep(every)
            try:
                await handle.extend_lease()
            except self.driver.errors:
                return

    async def _release(self, o, handle, status):
        """the request failed: roll back; a leased claim is failed, retryable"""
        driver = self.driver
        if handle._raw is not None:
            await driver.rollback(handle._take())
        if handle.key is not None and o.lease is not None and not handle.unknown:
            try:
                conn = await driver.getconn()
            except driver.errors:
                return  # the lease ends by itself
            try:
                await driver.run(conn, *fail_sql(handle.key, handle.scope, status, handle.fence))
            except driver.errors as exc:
                if sqlstate_of(exc) not in ("IK002", "IK003") and answer_of_error(exc) is None:
                    raise
            finally:
                await driver.putconn(conn)

    async def _complete(self, o, handle, response):
        """records the outcome of the response; -> what to send"""
        driver = self.driver
        if handle.key is None:
            if handle._raw is not None and response.status < 500:
                conn = handle._take()
                try:
                    await driver.commit(conn)
                except driver.errors as exc:
                    await driver.rollback(conn)
                    answer = failure_answer(exc, own=False)
                    if answer is None:
                        raise
                    return answer
                await driver.putconn(conn)
            else:
                await self._release(o, handle, response.status)
            return response
        if handle.unknown or not keeps(o, response.status):
            await self._release(o, handle, response.status)
            return response
        conn = handle._take()
        in_transaction = conn is not None
        # prepared (prepare=True) on the claim's connection, whose EXECUTE just
        # ran, or on one of the middleware's own; not on the one begin() took
        # (leased), which may have lost them without a statement failing yet
        prepared = o.prepare and not (in_transaction and o.lease is not None)
        sql, params = finish_sql(handle.key, handle.scope, response, o.stored_headers,
                                 handle.fence if o.lease is not None else None)
        if prepared:
            sql, params = executed(FINISH_STATEMENT, params)
        try:
            conn = conn or await driver.getconn()
        except driver.errors as exc:
            await self._release(o, handle, 500)
            answer = answer_of_error(exc)
            if answer is None:
                raise
            return answer
        try:
            if in_transaction:
                await driver.finish(conn, sql, params, commit=True)
            else:
                await self._execute(conn, prepared, sql, params)
        except driver.errors as exc:
            state = sqlstate_of(exc)
            if state == "26000":
                driver.lost_prepared(conn)
            await driver.rollback(conn)
            if o.lease is not None and state not in ("IK002", "IK003"):
                await self._release(o, handle, 500)
            answer = failure_answer(exc, outcome=True)
            if answer is None:
                raise
            return answer
        except BaseException:
            await driver.rollback(conn)
            raise
        await driver.putconn(conn)
        if handle.flight is not None:  # the replay only for duplicates waiting (seldom any)
            land(handle.flight, replay_of(response, o.stored_headers) if handle.flight.waiters else None)
        return response
