"""make bench, B9: the Express app's POST /orders (one business row, 201)
as a Starlette application under uvicorn with clients/python's ASGI
middleware (pg_idempotency_key.asgi), written as its README shows: a
psycopg_pool.AsyncConnectionPool of 10 connections, direct (psycopg's
default prepare_threshold; prepare=True, as the Node.js app's prepare:
true), one scope for every caller as the Redis variants have.  POST
/orders/throw fails after its insert the first time it sees a key (fault
runs).

BENCH_VARIANT=python-asyncpg runs the same middleware on an asyncpg Pool
of 10 (its default statement cache), the handler's insert through asyncpg.

BENCH_VARIANT=python-hand-record runs instead the Node.js app's
hand-record reference in Python, without the middleware: the same three
round trips on one pooled connection (BEGIN with INSERT ... ON CONFLICT DO
NOTHING of the key and body, the insert, UPDATE of the record with the
response and COMMIT), the statements bound as the middleware binds its
own (psycopg's client-side cursor), so that clients/python can be set
against the least record written in its own language.

BENCH_DSN=... python3 -m uvicorn --app-dir bench/http asgi_app:app --port PORT --loop uvloop --http httptools"""
import json
import os

from psycopg import AsyncClientCursor
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from pg_idempotency_key.asgi import IdempotencyMiddleware
from pg_idempotency_key.core import numbered

INSERT = "INSERT INTO bench_http_order (idempotency_key, sku, qty) VALUES (%s, %s, %s) RETURNING id"
VARIANT = os.environ.get("BENCH_VARIANT")
if VARIANT == "python-asyncpg":
    import asyncpg
    pool = asyncpg.create_pool(os.environ["BENCH_DSN"], min_size=10, max_size=10)
else:
    pool = AsyncConnectionPool(os.environ["BENCH_DSN"], min_size=10, max_size=10, kwargs={"autocommit": True},
                               open=False)
thrown_once = set()


async def insert_order(conn, key, body):
    if VARIANT == "python-asyncpg":
        return await conn.fetchval(numbered(INSERT), key, body["sku"], body["qty"])
    return (await (await conn.execute(INSERT, [key, body["sku"], body["qty"]])).fetchone())[0]


async def open_pool():
    await (pool if VARIANT == "python-asyncpg" else pool.open())


async def order(request):
    idem = request.state.idempotency
    body = json.loads(await request.body())
    order_id = await insert_order(idem.conn, idem.key, body)
    if request.scope["path"] == "/orders/throw" and idem.key not in thrown_once:
        thrown_once.add(idem.key)
        raise RuntimeError("the handler failed after its insert")
    return JSONResponse({"order_id": order_id, "sku": body["sku"], "qty": body["qty"]}, 201)


HAND_CLAIM = ("BEGIN; INSERT INTO bench_http_hand_record (key, request) VALUES (%s, %s)"
              " ON CONFLICT DO NOTHING RETURNING 'claimed'")
HAND_FINISH = "UPDATE bench_http_hand_record SET status = 201, response = %s WHERE key = %s; COMMIT"


async def hand_record_order(request):
    key = request.headers["idempotency-key"]
    raw = await request.body()
    body = json.loads(raw)
    async with pool.connection() as conn:
        try:
            await AsyncClientCursor(conn).execute(HAND_CLAIM, [key, raw.decode()])
            cur = await conn.execute(INSERT, [key, body["sku"], body["qty"]])
            answer = {"order_id": (await cur.fetchone())[0], "sku": body["sku"], "qty": body["qty"]}
            await AsyncClientCursor(conn).execute(HAND_FINISH, [json.dumps(answer), key])
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
    return JSONResponse(answer, 201)


if VARIANT == "python-hand-record":
    app = Starlette(routes=[Route("/orders", hand_record_order, methods=["POST"])],
                    on_startup=[pool.open], on_shutdown=[pool.close])
else:
    app = Starlette(routes=[Route("/orders", order, methods=["POST"]), Route("/orders/throw", order, methods=["POST"])],
                    on_startup=[open_pool], on_shutdown=[pool.close])
    app.add_middleware(IdempotencyMiddleware, pool=pool, scope="bench", prepare=VARIANT != "python-asyncpg")
