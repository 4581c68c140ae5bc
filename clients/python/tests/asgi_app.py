"""The Starlette application the ASGI tests drive (the same routes as the
Node.js package's tests): POST /orders places one order row in the claim's
transaction.  A body with "gate": true waits, after its insert, for the
advisory lock the test holds.  Run: uvicorn asgi_app:app (IDEM_APP_DSN)."""
import json
import os

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from pg_idempotency_key.asgi import IdempotencyMiddleware, header
from pg_idempotency_key.flights import waiting

GATE = 7401
# prepare_threshold=None: PgBouncer before 1.21 keeps no prepared statements
pool = AsyncConnectionPool(os.environ["IDEM_APP_DSN"], min_size=1, max_size=int(os.environ.get("IDEM_APP_POOL", "4")),
                           open=False, kwargs={"autocommit": True, "prepare_threshold": None})
thrown_once = set()


async def place_order(conn, key, body, tenant):
    cur = await conn.execute("INSERT INTO orders (idempotency_key, tenant, sku) VALUES (%s, %s, %s) RETURNING id",
                             [key, tenant, None if body.get("sku") is None else str(body.get("sku"))])
    order_id = (await cur.fetchone())[0]
    if body.get("gate"):
        await conn.execute(f"SELECT pg_advisory_xact_lock_shared({GATE})")
    return order_id


def tenant_of(request):
    return request.headers.get("x-tenant", "default")


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
            await conn.execute("INSERT INTO commit_conflict VALUES (%s)", [idem.key])
        else:
            await conn.execute("DO $$ BEGIN RAISE EXCEPTION 'test conflict' USING ERRCODE = '40001'; END $$")
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


async def pool_requests(request):
    """connections asked of the pool so far (psycopg_pool's requests_num)"""
    return Response(str(pool.get_stats().get("requests_num", 0)), 200, media_type="text/plain")


async def duplicates_waiting(request):
    """duplicates waiting in memory for a request of this process"""
    return Response(str(waiting(pool)), 200, media_type="text/plain")


ROUTES = {
    "/orders": order, "/orders/optional": order, "/orders/wait": order, "/orders/throw": throw_after_insert,
    "/orders/503": answer_503, "/orders/404": answer_404, "/orders/404-not-stored": answer_404,
    "/orders/conflict": conflict, "/orders/conflict-at-commit": conflict, "/orders/leased": leased, "/binary": binary,
}
app = Starlette(routes=[Route(p, f, methods=["POST"]) for p, f in ROUTES.items()]
               + [Route("/pool-requests", pool_requests, methods=["GET"]),
                  Route("/duplicates-waiting", duplicates_waiting, methods=["GET"])],
                on_startup=[pool.open], on_shutdown=[pool.close])
app.add_middleware(IdempotencyMiddleware, pool=pool, scope=lambda s: header(s, "x-tenant") or "default",
                   routes={"/orders/optional": {"required": False}, "/orders/wait": {"wait_for": 120},
                           "/orders/404-not-stored": {"store_client_errors": False},
                           "/orders/leased": {"lease": 30}})
