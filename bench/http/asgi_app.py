"""make bench, B9: the Express app's POST /orders (one business row, 201)
as a Starlette application under uvicorn with clients/python's ASGI
middleware (pg_idempotency_key.asgi), written as its README shows: a
psycopg_pool.AsyncConnectionPool of 10 connections, direct (psycopg's
default prepare_threshold), one scope for every caller as the Redis
variants have.  POST /orders/throw fails after its insert the first time
it sees a key (fault runs).

BENCH_DSN=... python3 -m uvicorn --app-dir bench/http asgi_app:app --port PORT --loop uvloop --http httptools"""
import json
import os

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from pg_idempotency_key.asgi import IdempotencyMiddleware

INSERT = "INSERT INTO bench_http_order (idempotency_key, sku, qty) VALUES (%s, %s, %s) RETURNING id"
pool = AsyncConnectionPool(os.environ["BENCH_DSN"], min_size=10, max_size=10, kwargs={"autocommit": True}, open=False)
thrown_once = set()


async def order(request):
    idem = request.state.idempotency
    body = json.loads(await request.body())
    cur = await idem.conn.execute(INSERT, [idem.key, body["sku"], body["qty"]])
    order_id = (await cur.fetchone())[0]
    if request.url.path == "/orders/throw" and idem.key not in thrown_once:
        thrown_once.add(idem.key)
        raise RuntimeError("the handler failed after its insert")
    return JSONResponse({"order_id": order_id, "sku": body["sku"], "qty": body["qty"]}, 201)


app = Starlette(routes=[Route("/orders", order, methods=["POST"]), Route("/orders/throw", order, methods=["POST"])],
                on_startup=[pool.open], on_shutdown=[pool.close])
app.add_middleware(IdempotencyMiddleware, pool=pool, scope="bench")
