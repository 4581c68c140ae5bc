"""The routes the ORM tests drive, written once for the Flask app
(flask_orders.py) and the FastAPI app (fastapi_orders.py): each gets the
request's Session and the request's JSON body.  POST /orders places one
Order through the Session and calls session.commit() (which commits
nothing before the stored response); {"gate": true} then waits for the
advisory lock the test holds, between the handler's end and the commit."""
import json

from sqlalchemy import BigInteger, Column, Text, text
from sqlalchemy.orm import Session, declarative_base

GATE = 7401
Base = declarative_base()


class Order(Base):
    __tablename__ = "orders"
    id = Column(BigInteger, primary_key=True)
    idempotency_key = Column(Text)
    tenant = Column(Text)
    sku = Column(Text)


def place(session, key, tenant, body, commit=True):
    order = Order(idempotency_key=key, tenant=tenant, sku=str(body.get("sku")))
    session.add(order)
    if commit:
        session.commit()  # the ORM's idiom: flushes; the commit comes with the stored response
    else:
        session.flush()
    if body.get("gate"):
        session.execute(text("SELECT pg_advisory_xact_lock_shared(:gate)"), {"gate": GATE})
    return order


def order(session, key, tenant, body):
    """-> (status, headers, body) of POST /orders"""
    o = place(session, key, tenant, body)
    return 201, {"location": f"/orders/{o.id}"}, json.dumps({"order_id": o.id, "sku": o.sku})


def throw(session, key, tenant, body):
    place(session, key, tenant, body)
    raise RuntimeError("handler failed after its write")


def rollback(session, key, tenant, body):
    place(session, key, tenant, body, commit=False)
    session.rollback()  # the flushed order would stay: refused, 500 transaction-ended
    return 201, {}, "{}"


def savepoint(session, key, tenant, body):
    """a savepoint rolled back (its order gone), then one order committed"""
    nested = session.begin_nested()
    session.add(Order(idempotency_key=key, tenant=tenant, sku="rolled back"))
    session.flush()
    nested.rollback()
    return order(session, key, tenant, body)


def commit_sql(session, key, tenant, body):
    place(session, key, tenant, body)
    session.execute(text("COMMIT"))
    return 201, {}, "{}"


def outside(session, key, tenant, body, engine):
    """a write through a Session of the engine's own (not the request's),
    then an error: that write is not in the claim's transaction"""
    with Session(engine, future=True) as other:
        other.add(Order(idempotency_key=key, tenant=tenant, sku="outside"))
        other.commit()
    raise RuntimeError("handler failed after a write outside the request's transaction")


def conflict(session, key, tenant, body):
    """its COMMIT fails with 40001 (a deferred trigger), every time"""
    session.execute(text("INSERT INTO commit_conflict VALUES (:key)"), {"key": key})
    return order(session, key, tenant, body)


def raise_sqlstate(session, key, tenant, body):
    """places an order, then its statement fails with body["sqlstate"]"""
    place(session, key, tenant, body)
    code = body["sqlstate"]
    assert code.isalnum() and len(code) == 5
    session.execute(text(f"DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{code}'; END $$"))
    return 201, {}, "{}"


stashed = []


def stash(session, key, tenant, body):
    """keeps the request's Session, as a background job might"""
    stashed.append(session() if callable(session) else session)  # Flask-SQLAlchemy: the scoped proxy's Session
    return order(session, key, tenant, body)


def use_stashed(session, key, tenant, body):
    """writes through a Session kept from an earlier request: refused"""
    try:
        stashed[-1].execute(text("INSERT INTO orders (idempotency_key, sku) VALUES (:key, 'stashed')"), {"key": key})
    except Exception as exc:
        return 409, {}, json.dumps({"refused": type(exc).__name__})
    return 201, {}, "{}"


def answer_as(session, key, tenant, body):
    """answers with the body's "status" and "headers" (Werkzeug refuses CR
    or LF in a header value: the view fails)"""
    place(session, key, tenant, {})
    return body["status"], body.get("headers", {}), "{}"


# /orders/wait, /orders/small and /orders/optional place an order as /orders does
ROUTE_OPTIONS = {"/orders/wait": {"wait_for": 300}, "/orders/small": {"max_body_bytes": 64, "max_response_bytes": 64},
                 "/orders/optional": {"required": False}}
ROUTES = {"/orders": order, "/orders/throw": throw, "/orders/rollback": rollback, "/orders/commit-sql": commit_sql,
          "/orders/savepoint": savepoint, "/orders/conflict": conflict,
          "/orders/raise": raise_sqlstate, "/orders/stash": stash, "/orders/use-stashed": use_stashed,
          "/orders/answer-as": answer_as}
