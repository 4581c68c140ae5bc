#!/usr/bin/env python3
"""POST /orders with an Idempotency-Key header: a small, real HTTP service on
the idempotency extension, with psycopg 3 and its connection pool (Debian's
python3-psycopg and python3-psycopg-pool).

  400  no Idempotency-Key header, or a body that is not a JSON object
  201  the order was placed (the first request with this key)
  201  + Idempotent-Replayed: true, the first response byte for byte
  409  + Retry-After: a request with this key is still running
  422  the key was used before for another body (IK001)

Two modes (?mode=...):
  transaction (default) the claim, the order and the stored response commit
                        in one transaction; a duplicate waits for nothing
                        (wait => false) and gets 409 while the first runs
  leased                the claim commits on its own with a lease (lease=
                        seconds, default 30); the order
                        and the response commit later with the claim's
                        fence, after a call to a payment provider (delay=
                        seconds, to simulate a slow one); a retry after the
                        lease takes the key over; a duplicate may wait up
                        to wait= seconds for the first request's response
                        (wait_for_outcome) instead of getting 409

A reference without a library, on purpose: every call of the extension in
plain sight.  Applications use clients/python (ASGI, Django) or clients/node
(Express, Fastify), which make the same calls.

Run: ORDERS_DSN='host=/path port=5432 dbname=shop' python3 orders_service.py 8080
The database needs the extension and:
  CREATE TABLE orders (id bigserial PRIMARY KEY, idempotency_key text UNIQUE,
                       sku text, qty int);
"""
import datetime
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import psycopg
from psycopg_pool import ConnectionPool

# autocommit: a leased claim must be a statement of its own (25001 inside a
# transaction block); prepare_threshold=None: no server-side prepared
# statements, which a transaction-pooling PgBouncer before 1.21 cannot keep
pool = ConnectionPool(os.environ.get("ORDERS_DSN", ""), min_size=1, max_size=10, open=False,
                      kwargs={"autocommit": True, "prepare_threshold": None})


class Reply(Exception):
    def __init__(self, status, body, headers=()):
        self.status, self.body, self.headers = status, body, list(headers)


def place_order(cur, key, order):
    cur.execute("INSERT INTO orders (idempotency_key, sku, qty) VALUES (%s, %s, %s) RETURNING id",
                (key, order.get("sku"), order.get("qty")))
    body = json.dumps({"order_id": cur.fetchone()[0], "sku": order.get("sku"), "qty": order.get("qty")})
    # the response is stored as text inside the result: replayed byte for byte
    return json.dumps({"status": 201, "body": body})


def answer(row):
    """An idem_claim row that is not 'claimed' -> the HTTP reply."""
    outcome, result, retry_after = row
    if outcome == "replay":
        raise Reply(result["status"], result["body"], [("Idempotent-Replayed", "true")])
    seconds = max(1, int(retry_after.total_seconds() + 0.999))  # set for every in_progress
    raise Reply(409, json.dumps({"error": "a request with this key is in progress"}),
                [("Retry-After", str(seconds))])


def in_transaction(conn, key, raw, order):
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT outcome, result, retry_after FROM idem_claim(%s,"
                    " fingerprint => idem_fingerprint(%s::jsonb), wait => false)", (key, raw))
        row = cur.fetchone()
        if row[0] != "claimed":
            answer(row)
        response = place_order(cur, key, order)
        cur.execute("SELECT idem_finish(%s, %s::jsonb)", (key, response))
    return json.loads(response)


def leased(key, raw, order, lease, delay, wait):
    with pool.connection() as conn:
        # autocommit: the claim is a statement of its own and commits now;
        # a duplicate waits up to wait seconds for the outcome (None: not at all)
        row = conn.execute("SELECT outcome, result, retry_after, fence FROM idem_claim(%s,"
                           " fingerprint => idem_fingerprint(%s::jsonb), wait => false,"
                           " lease => make_interval(secs => %s), wait_for_outcome => %s)",
                           (key, raw, lease, datetime.timedelta(seconds=wait) if wait > 0 else None)).fetchone()
    outcome, result, retry_after, fence = row
    if outcome != "claimed":
        answer((outcome, result, retry_after))
    # the call to the payment provider, holding no connection: the lease,
    # not a pooled connection, keeps the key while it runs
    time.sleep(delay)
    with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        response = place_order(cur, key, order)
        cur.execute("SELECT idem_finish(%s, %s::jsonb, fence => %s)", (key, response, fence))
    return json.loads(response)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        url = urlparse(self.path)
        query = parse_qs(url.query)
        try:
            if url.path != "/orders":
                raise Reply(404, json.dumps({"error": "not found"}))
            key = self.headers.get("Idempotency-Key")
            if not key:
                raise Reply(400, json.dumps({"error": "Idempotency-Key header is required"}))
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            try:
                order = json.loads(raw)
                assert isinstance(order, dict)
            except (ValueError, AssertionError):
                raise Reply(400, json.dumps({"error": "the body must be a JSON object"}))
            if query.get("mode", ["transaction"])[0] == "leased":
                stored = leased(key, raw, order, float(query.get("lease", ["30"])[0]),
                                float(query.get("delay", ["0"])[0]),
                                float(query.get("wait", ["0"])[0]))
            else:
                with pool.connection() as conn:
                    stored = in_transaction(conn, key, raw, order)
            raise Reply(stored["status"], stored["body"])
        except Reply as r:
            self.reply(r.status, r.body, r.headers)
        except psycopg.Error as e:
            if e.sqlstate == "IK001":
                self.reply(422, json.dumps({"error": "Idempotency-Key reused with another body"}))
            else:
                self.reply(500, json.dumps({"error": e.sqlstate or "database error"}))

    def reply(self, status, body, headers=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of duplicates must not be refused


if __name__ == "__main__":
    pool.open()
    server = Server(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8080), Handler)
    print("listening on", server.server_address, flush=True)
    server.serve_forever()
