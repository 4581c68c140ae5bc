"""Views written as a Django developer would: ORM writes, with no
transaction handling of their own; the middleware's transaction holds them."""
import hashlib
import json
import os
import threading
import time

import psycopg
from django.db import connection, connections
from django.http import HttpResponse
from django.views.decorators.http import require_POST

from .models import Order

GATE = 7401
thrown_once = set()
conflicted_once = {"/orders/conflict": set(), "/orders/conflict-at-commit": set()}


def tenant_of(request):
    return request.principal


def principal(request):
    """the idempotency scope: the authenticated user (auth.py), or None (403)"""
    return getattr(request, "principal", None)


def place_order(request, body):
    order = Order.objects.create(idempotency_key=request.idempotency.key, tenant=tenant_of(request),
                                 sku=None if body.get("sku") is None else str(body.get("sku")))
    if body.get("gate"):
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock_shared(%s)", [GATE])
    return order.id


def as_json(data, status, **headers):
    response = HttpResponse(json.dumps(data), status=status, content_type="application/json")
    for name, value in headers.items():
        response[name] = value
    return response


def body_of(request):
    return json.loads(request.body or b"{}")


@require_POST
def order(request):
    body = body_of(request)
    order_id = place_order(request, body)
    return as_json({"order_id": order_id, "sku": body.get("sku"), "note": "ü"}, 201, Location=f"/orders/{order_id}")


@require_POST
def throw_after_insert(request):
    order_id = place_order(request, body_of(request))
    if request.idempotency.key not in thrown_once:
        thrown_once.add(request.idempotency.key)
        raise RuntimeError("handler failed after its insert")
    return as_json({"order_id": order_id}, 201)


@require_POST
def answer_503(request):
    place_order(request, body_of(request))
    return as_json({"error": "downstream"}, 503)


@require_POST
def answer_404(request):
    body = body_of(request)
    place_order(request, body)
    return as_json({"missing": body.get("sku"), "n": os.urandom(8).hex()}, 404)


@require_POST
def conflict(request):
    """a 40001 the first time a key is seen: in the view, or at COMMIT (a deferred trigger)"""
    order_id = place_order(request, body_of(request))
    seen = conflicted_once[request.path]
    if request.idempotency.key not in seen or request.GET.get("always"):
        seen.add(request.idempotency.key)
        with connection.cursor() as cur:
            if request.path.endswith("at-commit"):
                cur.execute("INSERT INTO commit_conflict VALUES (%s)", [request.idempotency.key])
            else:
                cur.execute("DO $$ BEGIN RAISE EXCEPTION 'test conflict' USING ERRCODE = '40001'; END $$")
    return as_json({"order_id": order_id}, 201)


@require_POST
def binary(request):
    place_order(request, {})
    return HttpResponse(bytes([0, 255, 254, 1]) + request.body, status=200, content_type="application/octet-stream")


@require_POST
def leased(request):
    idem = request.idempotency
    idem.checkpoint("before-call")
    idem.extend_lease(60)
    if request.GET.get("unknown"):
        idem.mark_unknown({"reason": "provider timed out"})
        return as_json({"error": "unknown"}, 504)
    if request.GET.get("fail"):
        raise RuntimeError("the provider refused")
    order_id = place_order(request, body_of(request))
    return as_json({"order_id": order_id, "fence": idem.fence, "recovery_point": idem.recovery_point}, 201)


@require_POST
def hang(request):
    """as asgi_app.hang, but a thread cannot be stopped: the first claim
    (fence 1) answers after 1 s, past its time limit of 0.3 s"""
    idem = request.idempotency
    order_id = place_order(request, {"sku": "hang"})
    if idem.fence == 1:
        time.sleep(1)
    return as_json({"order_id": order_id, "fence": idem.fence}, 201)


ended_once = set()


@require_POST
def end_transaction(request):
    """as asgi_app.end_transaction: the first time a key is seen, ends the
    claim's transaction (COMMIT, or ?statement=...), then inserts again"""
    place_order(request, {"sku": "before"})
    if request.idempotency.key not in ended_once:
        ended_once.add(request.idempotency.key)
        try:
            with connection.cursor() as cur:
                cur.execute(request.GET.get("statement", "COMMIT"))
        except Exception:
            if not request.GET.get("catch"):
                raise
        place_order(request, {"sku": "after"})
    return as_json({"ok": True}, 201)


raised_once = set()


@require_POST
def raise_sqlstate(request):
    """as asgi_app.raise_sqlstate: the first time a key is seen, the
    database raises ?code=, or ends the session (?how=)"""
    place_order(request, {"sku": "raise"})
    q = request.GET
    if request.idempotency.key not in raised_once:
        raised_once.add(request.idempotency.key)
        with connection.cursor() as cur:
            if q.get("how") == "terminate":
                cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            elif q.get("how") == "timeout":
                cur.execute("SET LOCAL statement_timeout = 1")
                cur.execute("SELECT pg_sleep(600)")
            elif q.get("how") == "idle":
                cur.execute("SELECT pg_backend_pid()")
                pid = cur.fetchone()[0]
                cur.execute("SET LOCAL idle_in_transaction_session_timeout = 1")
                until_session_gone(pid)
            else:
                cur.execute(f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = {quote(q['code'])},"
                            f" MESSAGE = {quote(q.get('message', 'raised by the test'))}; END $$")
    return as_json({"ok": True}, 201)


def quote(text):
    return "'" + text.replace("'", "''") + "'"


def until_session_gone(pid):
    with psycopg.connect(os.environ["IDEM_APP_DSN"], autocommit=True) as other:
        while other.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]:
            other.execute("SELECT pg_sleep(0.05)")


@require_POST
def cookie(request):
    place_order(request, {})
    response = as_json({"ok": True}, 201, ETag='"v1"', **{"X-Internal": "secret"})
    response.set_cookie("session", "alice-session")
    return response


@require_POST
def upload(request):
    """a multipart upload: the order's sku is the file's SHA-256"""
    data = request.FILES["file"].read()
    order_id = place_order(request, {"sku": hashlib.sha256(data).hexdigest()})
    return as_json({"order_id": order_id, "size": len(data), "note": request.POST.get("note")}, 201)


@require_POST
def large(request):
    place_order(request, {})
    return HttpResponse(b"x" * 2000, status=200, content_type="application/octet-stream")


@require_POST
def answer_as(request):
    """answers with the body's "status" and "headers" (Django refuses a
    status outside 100-599 and CR or LF in a header value: the view fails)"""
    body = json.loads(request.body or b"{}")
    place_order(request, {})
    response = HttpResponse(b"{}", status=body["status"], content_type="application/json")
    for name, value in body.get("headers", {}).items():
        response[name] = value
    return response


@require_POST
def outside(request):
    """an ORM write on another thread (Django gives it a connection of its
    own, outside the request's transaction), then an error"""
    def write():
        Order.objects.create(idempotency_key=request.idempotency.key, tenant=tenant_of(request), sku="outside")
        connections.close_all()
    thread = threading.Thread(target=write)
    thread.start()
    thread.join()
    raise RuntimeError("handler failed after a write outside the request's transaction")


ROUTES = {
    "/orders": order, "/orders/optional": order, "/orders/wait": order, "/orders/throw": throw_after_insert,
    "/orders/503": answer_503, "/orders/404": answer_404, "/orders/404-not-stored": answer_404,
    "/orders/conflict": conflict, "/orders/conflict-at-commit": conflict, "/orders/leased": leased, "/binary": binary,
    "/orders/hang": hang, "/orders/raise": raise_sqlstate, "/orders/end-transaction": end_transaction, "/orders/cookie": cookie, "/orders/upload": upload, "/orders/small": order,
    "/orders/large": large, "/orders/outside": outside, "/orders/answer-as": answer_as,
}
