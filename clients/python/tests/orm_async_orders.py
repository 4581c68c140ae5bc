"""The routes of orm_orders.py for an AsyncSession (fastapi_async_orders.py):
the same behaviour, written with await."""
import json

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from orm_orders import GATE, Order


async def place(session, key, tenant, body, commit=True):
    order = Order(idempotency_key=key, tenant=tenant, sku=str(body.get("sku")))
    session.add(order)
    if commit:
        await session.commit()  # flushes; the commit comes with the stored response
    else:
        await session.flush()
    if body.get("gate"):
        await session.execute(text("SELECT pg_advisory_xact_lock_shared(:gate)"), {"gate": GATE})
    return order


async def order(session, key, tenant, body):
    o = await place(session, key, tenant, body)
    return 201, {"location": f"/orders/{o.id}"}, json.dumps({"order_id": o.id, "sku": o.sku})


async def throw(session, key, tenant, body):
    await place(session, key, tenant, body)
    raise RuntimeError("handler failed after its write")


async def rollback(session, key, tenant, body):
    await place(session, key, tenant, body, commit=False)
    await session.rollback()
    return 201, {}, "{}"


async def savepoint(session, key, tenant, body):
    nested = await session.begin_nested()
    session.add(Order(idempotency_key=key, tenant=tenant, sku="rolled back"))
    await session.flush()
    await nested.rollback()
    return await order(session, key, tenant, body)


async def commit_sql(session, key, tenant, body):
    await place(session, key, tenant, body)
    await session.execute(text("COMMIT"))
    return 201, {}, "{}"


async def outside(session, key, tenant, body, engine):
    async with AsyncSession(engine) as other:
        other.add(Order(idempotency_key=key, tenant=tenant, sku="outside"))
        await other.commit()
    raise RuntimeError("handler failed after a write outside the request's transaction")


async def conflict(session, key, tenant, body):
    await session.execute(text("INSERT INTO commit_conflict VALUES (:key)"), {"key": key})
    return await order(session, key, tenant, body)


async def raise_sqlstate(session, key, tenant, body):
    await place(session, key, tenant, body)
    code = body["sqlstate"]
    assert code.isalnum() and len(code) == 5
    await session.execute(text(f"DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{code}'; END $$"))
    return 201, {}, "{}"


stashed = []


async def stash(session, key, tenant, body):
    stashed.append(session)
    return await order(session, key, tenant, body)


async def use_stashed(session, key, tenant, body):
    try:
        await stashed[-1].execute(text("INSERT INTO orders (idempotency_key, sku) VALUES (:key, 'stashed')"),
                                  {"key": key})
    except Exception as exc:
        return 409, {}, json.dumps({"refused": type(exc).__name__})
    return 201, {}, "{}"


async def answer_as(session, key, tenant, body):
    await place(session, key, tenant, {})
    return body["status"], body.get("headers", {}), "{}"


ROUTES = {"/orders": order, "/orders/throw": throw, "/orders/rollback": rollback, "/orders/commit-sql": commit_sql,
          "/orders/savepoint": savepoint, "/orders/conflict": conflict,
          "/orders/raise": raise_sqlstate, "/orders/stash": stash, "/orders/use-stashed": use_stashed,
          "/orders/answer-as": answer_as}
