"""The Starlette application the ASGI tests drive (the same routes as the
Node.js package's tests): POST /orders places one order row in the claim's
transaction.  A body with "gate": true waits, after its insert, for the
advisory lock the test holds.  The idempotency scope is the authenticated
user: the test's stand-in for authentication takes the user's name from
"Authorization: Bearer NAME".  Run: uvicorn asgi_app:app (IDEM_APP_DSN);
IDEM_APP_DRIVER=asyncpg: on an asyncpg Pool instead of psycopg_pool's, the
handlers' statements sent through asyncpg (run(), value())."""
import asyncio
import json
import os
import sys

import psycopg
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
from starlette.background import BackgroundTask
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.responses import Response
from starlette.routing import Route

from pg_idempotency_key.asgi import IdempotencyMiddleware
from pg_idempotency_key.core import numbered
from pg_idempotency_key.flights import waiting

GATE = 7401
DSN, SIZE = os.environ["IDEM_APP_DSN"], int(os.environ.get("IDEM_APP_POOL", "4"))
ASYNCPG = os.environ.get("IDEM_APP_DRIVER") == "asyncpg"
if ASYNCPG:
    import asyncpg

    acquired = [0]

    async def count_acquired(conn):  # asyncpg runs it on every acquire()
        acquired[0] += 1

    def asyncpg_settings(dsn):
        """asyncpg's connect arguments of a libpq connection string (asyncpg
        reads only URLs): "options='-c name=value ...'" as server_settings"""
        p = psycopg.conninfo.conninfo_to_dict(dsn)
        settings = dict(pair.split("=", 1) for pair in p.get("options", "").replace("-c ", "").split())
        return {"host": p.get("host"), "port": p.get("port"), "user": p.get("user"), "database": p["dbname"],
                "timeout": float(p.get("connect_timeout", 60)), "server_settings": settings or None}

    # min_size=0: nothing connects before the first request (a database that
    # is down answers 503 then); statement_cache_size=0 through PgBouncer,
    # which before 1.21 keeps no prepared statements
    pool = asyncpg.create_pool(min_size=0, max_size=SIZE, setup=count_acquired,
                               statement_cache_size=0 if os.environ.get("IDEM_APP_POOLED") else 100,
                               **asyncpg_settings(DSN))
else:
    # prepare_threshold=None: PgBouncer before 1.21 keeps no prepared statements
    pool = AsyncConnectionPool(DSN, min_size=1, max_size=SIZE,
                               timeout=float(os.environ.get("IDEM_APP_POOL_TIMEOUT", "30")),
                               open=False, kwargs={"autocommit": True, "prepare_threshold": None})
thrown_once = set()


async def run(conn, text, params=None):
    """the handler's statement (%s placeholders) on either driver; without
    params, as one simple-protocol query (several statements may be in it)"""
    if ASYNCPG:
        return await (conn.execute(numbered(text), *params) if params else conn.execute(text))
    return await conn.execute(text, params)


async def value(conn, text, params=None):
    """the first value the statement returns, on either driver"""
    if ASYNCPG:
        return await conn.fetchval(numbered(text), *(params or ()))
    return (await (await conn.execute(text, params)).fetchone())[0]


async def open_pool():
    await (pool if ASYNCPG else pool.open())


async def close_pool():
    """asyncpg's Pool.close() waits for every connection out, without end:
    bounded as asyncpg's documentation advises (psycopg_pool's close() waits
    5 s), and what was still out said on stderr"""
    if not ASYNCPG:
        return await pool.close()
    try:
        await asyncio.wait_for(pool.close(), 10)
    except asyncio.TimeoutError:
        print(f"asgi_app: {pool.get_size() - pool.get_idle_size()} connections still out 10 s after"
              " Pool.close(): terminated", file=sys.stderr, flush=True)
        pool.terminate()


def connection():
    """a connection of the pool's own, for a background task"""
    return pool.acquire() if ASYNCPG else pool.connection()


async def place_order(conn, key, body, tenant):
    order_id = await value(conn, "INSERT INTO orders (idempotency_key, tenant, sku) VALUES (%s, %s, %s) RETURNING id",
                           [key, tenant, None if body.get("sku") is None else str(body.get("sku"))])
    if body.get("gate"):
        await run(conn, f"SELECT pg_advisory_xact_lock_shared({GATE})")
    return order_id


def tenant_of(request):
    return request.user.username


class BearerUser(AuthenticationBackend):
    async def authenticate(self, conn):
        auth = conn.headers.get("authorization", "")
        if auth.startswith("Bearer "):
            return AuthCredentials(["authenticated"]), SimpleUser(auth[len("Bearer "):])
        return None


def principal(scope):
    """the idempotency scope: the authenticated user, or None (403)"""
    user = scope.get("user")
    return user.username if user is not None and user.is_authenticated else None


async def order(request):
    idem = request.state.idempotency
    body = json.loads(await request.body() or b"{}")
    order_id = await place_order(await idem.begin(), idem.key, body, tenant_of(request))
    return Response(json.dumps({"order_id": order_id, "sku": body.get("sku"), "note": "ü"}), 201,
                    {"location": f"/orders/{order_id}"}, media_type="application/json")


async def throw_after_insert(request):
    idem = request.state.idempotency
    order_id = await place_order(await idem.begin(), idem.key, await request.json(), tenant_of(request))
    if idem.key not in thrown_once:
        thrown_once.add(idem.key)
        raise RuntimeError("handler failed after its insert")
    return Response(json.dumps({"order_id": order_id}), 201, media_type="application/json")


async def deallocate(request):
    """drops the prepared statements of the claim's connection (DEALLOCATE
    ALL) after its insert, the first time it sees a key"""
    idem = request.state.idempotency
    order_id = await place_order(await idem.begin(), idem.key, await request.json(), tenant_of(request))
    if idem.key not in thrown_once:
        thrown_once.add(idem.key)
        await run(idem.conn, "DEALLOCATE ALL")
    return Response(json.dumps({"order_id": order_id}), 201, media_type="application/json")


async def answer_503(request):
    idem = request.state.idempotency
    await place_order(await idem.begin(), idem.key, await request.json(), tenant_of(request))
    return Response('{"error":"downstream"}', 503, media_type="application/json")


async def answer_404(request):
    idem = request.state.idempotency
    body = await request.json()
    await place_order(await idem.begin(), idem.key, body, tenant_of(request))
    return Response(json.dumps({"missing": body.get("sku"), "n": os.urandom(8).hex()}), 404,
                    media_type="application/json")


# a real 40001 from the server the first time a key is seen: retried; in
# the view, or at COMMIT (a deferred trigger), after the view answered
conflicted_once = {"/orders/conflict": set(), "/orders/conflict-at-commit": set()}


async def conflict(request):
    idem = request.state.idempotency
    conn = await idem.begin()
    order_id = await place_order(conn, idem.key, await request.json(), tenant_of(request))
    seen = conflicted_once[request.url.path]
    if idem.key not in seen or request.query_params.get("always"):
        seen.add(idem.key)
        if request.url.path.endswith("at-commit"):
            await run(conn, "INSERT INTO commit_conflict VALUES (%s)", [idem.key])
        else:
            await run(conn, "DO $$ BEGIN RAISE EXCEPTION 'test conflict' USING ERRCODE = '40001'; END $$")
    return Response(json.dumps({"order_id": order_id}), 201, media_type="application/json")


async def savepoint(request):
    """a savepoint (the driver's own conn.transaction()) rolled back, its order
    gone; then one order, committed with the claim"""
    idem = request.state.idempotency
    conn = await idem.begin()
    try:
        async with conn.transaction():
            await place_order(conn, idem.key, {"sku": "rolled-back"}, tenant_of(request))
            raise LookupError("back to the savepoint")
    except LookupError:
        pass
    order_id = await place_order(conn, idem.key, {"sku": "kept"}, tenant_of(request))
    return Response(json.dumps({"order_id": order_id}), 201, media_type="application/json")


async def binary(request):
    idem = request.state.idempotency
    await place_order(await idem.begin(), idem.key, {}, tenant_of(request))
    return Response(bytes([0, 255, 254, 1]) + await request.body(), 200, media_type="application/octet-stream")


async def leased(request):
    idem = request.state.idempotency
    await idem.checkpoint("before-call")
    await idem.extend_lease(60)
    if request.query_params.get("unknown"):
        await idem.mark_unknown({"reason": "provider timed out"})
        return Response('{"error":"unknown"}', 504, media_type="application/json")
    if request.query_params.get("fail"):
        raise RuntimeError("the provider refused")
    order_id = await place_order(await idem.begin(), idem.key, await request.json(), tenant_of(request))
    return Response(json.dumps({"order_id": order_id, "fence": idem.fence, "recovery_point": idem.recovery_point}),
                    201, media_type="application/json")


async def hang(request):
    """leased, with a time limit of 0.3 s: the first claim (fence 1) places
    an order, then does not answer (for 120 s); a takeover answers at once"""
    idem = request.state.idempotency
    order_id = await place_order(await idem.begin(), idem.key, {"sku": "hang"}, tenant_of(request))
    if idem.fence == 1:
        await asyncio.sleep(120)
    return Response(json.dumps({"order_id": order_id, "fence": idem.fence}), 201, media_type="application/json")


async def side_effect(key, what, fail):
    """a background task: records, on a connection of its own, what it saw
    of the request's record (committed before it runs?) once the test's
    gate is free; then fails if asked"""
    async with connection() as conn:
        await run(conn, f"SELECT pg_advisory_lock_shared({GATE})")
        await run(conn, "INSERT INTO side_effects (key, what, record_status)"
                        " SELECT %s, %s, (SELECT status::text FROM idempotent_record WHERE key = %s)",
                  [key, what, key])
        await run(conn, f"SELECT pg_advisory_unlock_shared({GATE})")
    if fail:
        raise RuntimeError("the background task failed after its side effect")


async def with_background_task(request):
    idem = request.state.idempotency
    order_id = await place_order(await idem.begin(), idem.key, await request.json(), tenant_of(request))
    fail = bool(request.query_params.get("fail"))
    return Response(json.dumps({"order_id": order_id}), 201, media_type="application/json",
                    background=BackgroundTask(side_effect, idem.key, "e-mail", fail))


ended_once = set()


async def end_transaction(request):
    """the first time a key is seen: ends the claim's transaction (COMMIT,
    or ?statement=...), then inserts again"""
    idem = request.state.idempotency
    conn = await idem.begin()
    await place_order(conn, idem.key, {"sku": "before"}, tenant_of(request))
    if idem.key not in ended_once:
        ended_once.add(idem.key)
        try:
            await run(conn, request.query_params.get("statement", "COMMIT"))
        except Exception:
            if not request.query_params.get("catch"):
                raise
        await place_order(conn, idem.key, {"sku": "after"}, tenant_of(request))
    return Response(json.dumps({"ok": True}), 201, media_type="application/json")


raised_once = set()


async def raise_sqlstate(request):
    """the first time a key is seen: the database raises ?code= (with
    ?message=) in the claim's transaction, after an insert; ?how=terminate:
    the session is terminated; ?how=timeout: a statement timeout;
    ?how=idle: the idle-in-transaction timeout ends the session"""
    idem = request.state.idempotency
    conn = await idem.begin()
    await place_order(conn, idem.key, {"sku": "raise"}, tenant_of(request))
    if idem.key not in raised_once:
        raised_once.add(idem.key)
        how, q = request.query_params.get("how"), request.query_params
        if how == "terminate":
            await run(conn, "SELECT pg_terminate_backend(pg_backend_pid())")
        elif how == "timeout":
            await run(conn, "SET LOCAL statement_timeout = 1")
            await run(conn, "SELECT pg_sleep(600)")
        elif how == "idle":
            pid = await value(conn, "SELECT pg_backend_pid()")
            await run(conn, "SET LOCAL idle_in_transaction_session_timeout = 1")
            await until_session_gone(pid)
        else:
            await run(conn, "SELECT test_raise(%s, %s)", [q["code"], q.get("message", "raised by the test")])
    return Response(json.dumps({"ok": True}), 201, media_type="application/json")


async def until_session_gone(pid):
    while True:
        async with connection() as other:
            if await value(other, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]) == 0:
                return
        await asyncio.sleep(0.05)


async def cookie(request):
    idem = request.state.idempotency
    await place_order(await idem.begin(), idem.key, {}, tenant_of(request))
    response = Response(json.dumps({"ok": True}), 201, media_type="application/json",
                        headers={"etag": '"v1"', "x-internal": "secret"})
    response.set_cookie("session", "alice-session")
    return response


async def large(request):
    idem = request.state.idempotency
    await place_order(await idem.begin(), idem.key, {}, tenant_of(request))
    return Response(b"x" * 2000, 200, media_type="application/octet-stream")


async def answer_as(request):
    """answers with the body's "status" and "headers", as they are"""
    idem = request.state.idempotency
    body = json.loads(await request.body())
    await place_order(await idem.begin(), idem.key, {}, tenant_of(request))
    return Response(b"{}", body["status"], body.get("headers", {}), media_type="application/json")


async def pool_requests(request):
    """connections asked of the pool so far (psycopg_pool's requests_num)"""
    asked = acquired[0] if ASYNCPG else pool.get_stats().get("requests_num", 0)
    return Response(str(asked), 200, media_type="text/plain")


async def pool_returns_bad(request):
    """connections given back to the pool broken (psycopg_pool discards them)"""
    return Response(str(pool.get_stats().get("returns_bad", 0)), 200, media_type="text/plain")


async def prepared_statements_lost(request):
    """every connection of the pool loses its prepared statements (DEALLOCATE
    ALL, what a pool's reset with DISCARD ALL does) -> how many of the
    middleware's (prepare=True) they had"""
    conns = [await pool.getconn() for _ in range(pool.max_size)]
    lost = 0
    try:
        for conn in conns:
            cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements"
                                     " WHERE name LIKE 'pg\\_idempotency\\_key\\_%'")
            lost += (await cur.fetchone())[0]
            await conn.execute("DEALLOCATE ALL")
    finally:
        for conn in conns:
            await pool.putconn(conn)
    return Response(str(lost), 200, media_type="text/plain")


async def duplicates_waiting(request):
    """duplicates waiting in memory for a request of this process"""
    return Response(str(waiting(pool)), 200, media_type="text/plain")


finished_posts = [0]


async def posts_finished(request):
    """POST requests whose handling by the middleware ended"""
    return Response(str(finished_posts[0]), 200, media_type="text/plain")


ROUTES = {
    "/orders": order, "/orders/optional": order, "/orders/wait": order, "/orders/throw": throw_after_insert,
    "/orders/503": answer_503, "/orders/404": answer_404, "/orders/404-not-stored": answer_404,
    "/orders/conflict": conflict, "/orders/conflict-at-commit": conflict, "/orders/leased": leased, "/binary": binary,
    "/orders/hang": hang, "/orders/background": with_background_task, "/orders/end-transaction": end_transaction,
    "/orders/raise": raise_sqlstate, "/orders/cookie": cookie, "/orders/small": order, "/orders/large": large,
    "/orders/answer-as": answer_as, "/orders/deallocate": deallocate, "/orders/savepoint": savepoint,
}
app = Starlette(routes=[Route(p, f, methods=["POST"]) for p, f in ROUTES.items()]
               + [Route("/pool-requests", pool_requests, methods=["GET"]),
                  Route("/pool-returns-bad", pool_returns_bad, methods=["GET"]),
                  Route("/duplicates-waiting", duplicates_waiting, methods=["GET"]),
                  Route("/prepared-statements-lost", prepared_statements_lost, methods=["GET"]),
                  Route("/posts-finished", posts_finished, methods=["GET"])],
                on_startup=[open_pool], on_shutdown=[close_pool])
app.add_middleware(IdempotencyMiddleware, pool=pool, scope=principal, prepare=os.environ.get("IDEM_APP_PREPARE") == "1",
                   routes={"/orders/optional": {"required": False}, "/orders/wait": {"wait_for": 120},
                           "/orders/404-not-stored": {"store_client_errors": False},
                           "/orders/leased": {"lease": 30},
                           "/orders/hang": {"lease": 60, "handler_timeout": 0.3, "heartbeat": 0.1},
                           "/orders/small": {"max_body_bytes": 1000},
                           "/orders/large": {"max_response_bytes": 1000}})
app.add_middleware(AuthenticationMiddleware, backend=BearerUser())


class CountingPosts:
    """counts the POST requests whose handling ended (a state the tests wait for)"""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        try:
            await self.inner(scope, receive, send)
        finally:
            if scope["type"] == "http" and scope["method"] == "POST":
                finished_posts[0] += 1


counted = CountingPosts(app)
