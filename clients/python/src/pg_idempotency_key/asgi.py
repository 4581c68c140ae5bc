"""Pure ASGI middleware for Starlette and FastAPI on psycopg 3 and
psycopg_pool.AsyncConnectionPool.

The request body is read first (for the fingerprint) and handed to the
application again; the application's response is held back until its
outcome is committed with the claim, so a client never sees an answer that
was not recorded.  BEGIN travels with the claim and COMMIT with idem_finish
(psycopg's pipeline mode: one round trip each).  A serialization failure
or deadlock re-runs the application, up to `retries` times.  A duplicate
of a request this process is claiming or running is answered in memory
(flights.py)."""
import asyncio
import json

import psycopg
from psycopg.pq import TransactionStatus

from .core import (RETRYABLE, Options, Response, answer_of, check_key, claim_sql, decode_stored, encode_stored,
                   fail_sql, finish_sql, fingerprint, in_progress, keeps, not_claimed, sqlstate_of)
from .flights import TIMED_OUT, await_flight, flight_of, land, take_off


def header(scope, name):
    """the value of request header `name` (lower case) in an ASGI scope, or None"""
    wanted = name.lower().encode("latin-1")
    for k, v in scope.get("headers", ()):
        if k.lower() == wanted:
            return v.decode("latin-1")
    return None


async def send_response(send, r):
    headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in r.headers if n != "content-length"]
    headers.append((b"content-length", str(len(r.body)).encode()))
    await send({"type": "http.response.start", "status": r.status, "headers": headers})
    await send({"type": "http.response.body", "body": r.body})


async def read_body(receive):
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


class _Retry(Exception):
    """the transaction ended with 40001 / 40P01: run the request again"""

    def __init__(self, sqlstate):
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


class Idempotency:
    """What the application sees as request.state.idempotency (Starlette,
    FastAPI: scope["state"]["idempotency"])."""

    def __init__(self, middleware, o, key, scope, fence=None, recovery_point=None, conn=None):
        self._middleware, self._o = middleware, o
        self.key, self.scope, self.fence, self.recovery_point = key, scope, fence, recovery_point
        self.conn = conn  # psycopg.AsyncConnection in the claim's transaction, or None
        self.unknown = False
        self.flight = None  # this process's duplicates wait on it (flights.py)

    async def begin(self):
        """the connection in the transaction the outcome commits with
        (taken on first use in leased mode, and without a key)"""
        if self.conn is None:
            conn = await self._middleware._getconn()
            await conn.execute("BEGIN")
            self.conn = conn
        return self.conn

    async def _record(self, call, params):
        if self._o.lease is None:
            raise RuntimeError("checkpoints, heartbeats and unknown outcomes are for leased routes (lease=...)")
        conn = await self._middleware._getconn()
        try:
            cur = await conn.execute(f"SELECT {call}, scope => %s, fence => %s)",
                                     [self.key, *params, self.scope, self.fence])
            return (await cur.fetchone())[0]
        finally:
            await self._middleware._putconn(conn)

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
        self.options = Options(**options)
        self.routes = {path: (False if v is False else self.options.replace(**(v if isinstance(v, dict) else {})))
                       for path, v in (routes or {}).items()}

    async def _getconn(self):
        conn = await self.pool.getconn()
        # BEGIN and COMMIT are sent with the claim and the outcome
        if not conn.autocommit:
            await conn.set_autocommit(True)
            conn._idem_set_autocommit = True
        return conn

    async def _putconn(self, conn):
        if getattr(conn, "_idem_set_autocommit", False) and not conn.closed:
            await conn.set_autocommit(False)
            conn._idem_set_autocommit = False
        await self.pool.putconn(conn)

    async def _rollback(self, conn):
        if conn.info.transaction_status != TransactionStatus.IDLE and not conn.closed:
            try:
                await conn.execute("ROLLBACK")
            except psycopg.Error:
                pass
        await self._putconn(conn)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        o = self.routes.get(scope["path"], self.options)
        if o is False or (scope["path"] not in self.routes and scope["method"] not in o.methods):
            return await self.app(scope, receive, send)
        key = header(scope, "idempotency-key")
        refused = check_key(key, o)
        if refused:
            return await send_response(send, refused)
        body = await read_body(receive)
        path = scope["path"] + ("?" + scope["query_string"].decode("latin-1") if scope.get("query_string") else "")
        request = (key, o.scope_of(scope),
                   fingerprint(scope["method"], path, body, header(scope, "content-type")))
        for attempt in range(o.retries + 1):
            try:
                answer = await self._attempt(o, scope, body, request)
            except _Retry as r:
                if attempt < o.retries:
                    continue
                answer = answer_of(r.sqlstate)
            return await send_response(send, answer)

    async def _attempt(self, o, scope, body, request):
        key, scope_name, fp = request
        if key is None:
            return await self._run(o, scope, body, Idempotency(self, o, None, None))
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
            return await self._run(o, scope, body, claimed)
        finally:
            if flight is not None:
                land(flight, None)  # unless it landed with what committed

    async def _run(self, o, scope, body, handle):
        """runs the application for a claimed key (or none), -> what to send"""
        scope.setdefault("state", {})["idempotency"] = handle
        heartbeat = None
        if handle.key is not None and o.heartbeat_every:
            heartbeat = asyncio.ensure_future(self._heartbeat(handle, o.heartbeat_every))
        try:
            response = await self._run_app(scope, body)
        except BaseException as exc:
            await self._release(o, handle, 500)
            if sqlstate_of(exc) in RETRYABLE:
                raise _Retry(sqlstate_of(exc)) from exc
            raise
        finally:
            if heartbeat:
                heartbeat.cancel()
        return await self._complete(o, handle, response)

    async def _claim(self, o, key, scope_name, fp, deadline):
        """-> an Idempotency handle for a claimed key, or the Response to send;
        a duplicate in flight is polled until deadline (of the loop's clock)"""
        loop = asyncio.get_running_loop()
        polls = 0
        leased = o.lease is not None
        sql, params = claim_sql(o, key, scope_name, fp)
        while True:
            conn = await self._getconn()
            try:
                async with conn.pipeline():
                    if not leased:
                        await conn.execute("BEGIN")
                    cur = await conn.execute(sql, params)
                outcome, result, fence, recovery_point, retry_after = await cur.fetchone()
            except psycopg.Error as exc:
                await self._rollback(conn)
                if sqlstate_of(exc) in RETRYABLE:
                    raise _Retry(sqlstate_of(exc)) from exc
                answer = answer_of(sqlstate_of(exc), str(exc))
                if answer:
                    return answer
                raise
            if outcome == "claimed":
                if leased:
                    await self._putconn(conn)
                return Idempotency(self, o, key, scope_name, fence, recovery_point, None if leased else conn)
            await self._rollback(conn)
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
            except psycopg.Error:
                return

    async def _run_app(self, scope, body):
        """runs the application, -> its complete Response (nothing sent)"""
        delivered = False
        status, headers, chunks = None, [], []

        async def receive():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # no disconnect before the response is sent

        async def capture(message):
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in message.get("headers", ())]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        if status is None:
            raise RuntimeError("the application returned without a response")
        return Response(status, headers, b"".join(chunks))

    async def _release(self, o, handle, status):
        """the request failed: roll back; a leased claim is failed, retryable"""
        if handle.conn is not None:
            conn, handle.conn = handle.conn, None
            await self._rollback(conn)
        if handle.key is not None and o.lease is not None and not handle.unknown:
            conn = await self._getconn()
            try:
                await conn.execute(*fail_sql(handle.key, handle.scope, status, handle.fence))
            except psycopg.Error as exc:
                if sqlstate_of(exc) not in ("IK002", "IK003"):
                    raise
            finally:
                await self._putconn(conn)

    async def _complete(self, o, handle, response):
        """records the outcome of the response; -> what to send"""
        if handle.key is None:
            if handle.conn is not None and response.status < 500:
                conn, handle.conn = handle.conn, None
                await conn.execute("COMMIT")
                await self._putconn(conn)
            else:
                await self._release(o, handle, response.status)
            return response
        if handle.unknown or not keeps(o, response.status):
            await self._release(o, handle, response.status)
            return response
        stored = encode_stored(response, o.stored_headers)
        sql, params = finish_sql(handle.key, handle.scope, stored, handle.fence if o.lease is not None else None)
        conn, handle.conn = handle.conn, None
        in_transaction = conn is not None
        conn = conn or await self._getconn()
        try:
            async with conn.pipeline():
                await conn.execute(sql, params)
                if in_transaction:
                    await conn.execute("COMMIT")
        except psycopg.Error as exc:
            await self._rollback(conn)
            state = sqlstate_of(exc)
            if o.lease is not None and state not in ("IK002", "IK003"):
                await self._release(o, handle, 500)
            if state in RETRYABLE:
                raise _Retry(state) from exc
            answer = answer_of(state, str(exc))
            if answer:
                return answer
            raise
        await self._putconn(conn)
        if handle.flight is not None:
            land(handle.flight, decode_stored(stored))
        return response
