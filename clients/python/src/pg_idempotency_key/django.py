"""Django middleware: the claim, the view (its ORM writes included) and
idem_finish run in one transaction.atomic() on Django's own PostgreSQL
connection, so they commit or roll back together.

settings.py:
    MIDDLEWARE = [..., "pg_idempotency_key.django.IdempotencyMiddleware"]
    IDEMPOTENCY = {"scope": "myapp.tenancy.scope_of",    # or a callable
                   "routes": {"/orders/preview": False}}   # per-path settings

Django has no connection pool to starve: a duplicate that polls sleeps
outside any transaction, on its own thread's connection."""
import json
import time

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.http import HttpResponse
from django.utils.module_loading import import_string

from .core import (RETRYABLE, Options, Response, answer_of, check_key, claim_sql, encode_stored, fail_sql, finish_sql,
                   fingerprint, keeps, not_claimed, sqlstate_of)


class _Retry(Exception):
    def __init__(self, sqlstate):
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


def to_django(r):
    response = HttpResponse(r.body, status=r.status)
    del response["Content-Type"]
    for name, value in r.headers:
        response[name] = value
    return response


def from_django(response):
    body = b"".join(response.streaming_content) if response.streaming else response.content
    headers = [(n.lower(), v) for n, v in response.items()]
    return Response(response.status_code, headers, body)


class Idempotency:
    """What the view sees as request.idempotency; its writes go on Django's
    connection `using` (the ORM's), inside the claim's transaction."""

    def __init__(self, o, using, key, scope, fence=None, recovery_point=None):
        self._o, self.using = o, using
        self.key, self.scope, self.fence, self.recovery_point = key, scope, fence, recovery_point
        self.unknown = False

    def _record(self, call, params):
        # leased claims only: committed at once, on a connection of its own,
        # so that a takeover sees it (Django's connection is in the view's
        # transaction)
        if self._o.lease is None:
            raise RuntimeError("checkpoints, heartbeats and unknown outcomes are for leased routes (lease=...)")
        conn = connections.create_connection(self.using)
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT {call}, scope => %s, fence => %s)", [self.key, *params, self.scope, self.fence])
                value = cur.fetchone()[0]
            conn.commit()
            return value
        finally:
            conn.close()

    def extend_lease(self, seconds=None):
        return self._record("idem_extend_lease(%s, make_interval(secs => %s)",
                            [float(seconds if seconds is not None else self._o.lease)])

    def checkpoint(self, recovery_point):
        self._record("idem_checkpoint(%s, %s", [recovery_point])

    def mark_unknown(self, detail=None):
        self._record("idem_mark_unknown(%s, %s::jsonb", [json.dumps(detail or {})])
        self.unknown = True


class IdempotencyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        config = dict(getattr(settings, "IDEMPOTENCY", {}))
        self.using = config.pop("using", "default")
        routes = config.pop("routes", {})
        if isinstance(config.get("scope"), str) and "." in config["scope"]:
            config["scope"] = import_string(config["scope"])
        self.options = Options(**config)
        self.routes = {path: (False if v is False else self.options.replace(**v)) for path, v in routes.items()}

    def __call__(self, request):
        o = self.routes.get(request.path, self.options)
        if o is False or (request.path not in self.routes and request.method not in o.methods):
            return self.get_response(request)
        key = request.headers.get("Idempotency-Key")
        refused = check_key(key, o)
        if refused:
            return to_django(refused)
        if key is None:
            # unprotected: the view's own transaction, rolled back on a 5xx
            with transaction.atomic(using=self.using):
                request.idempotency = Idempotency(o, self.using, None, None)
                response = self.get_response(request)
                if response.status_code >= 500:
                    transaction.set_rollback(True, using=self.using)
                return response
        request_fp = fingerprint(request.method, request.get_full_path(), request.body, request.content_type)
        scope = o.scope_of(request)
        for attempt in range(o.retries + 1):
            try:
                return to_django(self._attempt(o, request, key, scope, request_fp))
            except _Retry as r:
                if attempt == o.retries:
                    return to_django(answer_of(r.sqlstate))
            except DatabaseError as exc:
                answer = answer_of(sqlstate_of(exc), str(exc))
                if answer is None:
                    raise
                return to_django(answer)

    def _attempt(self, o, request, key, scope, fp):
        if o.lease is not None:
            return self._leased(o, request, key, scope, fp)
        deadline = time.monotonic() + o.wait_for
        polls = 0
        sql, params = claim_sql(o, key, scope, fp)
        while True:
            try:
                with transaction.atomic(using=self.using):
                    with connections[self.using].cursor() as cur:
                        cur.execute(sql, params)
                        outcome, result, fence, recovery_point, retry_after = cur.fetchone()
                    if outcome != "claimed":
                        transaction.set_rollback(True, using=self.using)
                    else:
                        request.idempotency = Idempotency(o, self.using, key, scope, fence, recovery_point)
                        response = from_django(self.get_response(request))
                        if not keeps(o, response.status):
                            transaction.set_rollback(True, using=self.using)
                            return self._conflict_or(request, response)
                        with connections[self.using].cursor() as cur:
                            cur.execute(*finish_sql(key, scope, encode_stored(response, o.stored_headers)))
                        return response
            except DatabaseError as exc:
                if sqlstate_of(exc) in RETRYABLE:
                    raise _Retry(sqlstate_of(exc)) from exc
                raise
            # not claimed: the claim's transaction is over, nothing held
            answer = not_claimed(o, outcome, result, retry_after, polls, deadline, time.monotonic())
            polls += 1
            if isinstance(answer, Response):
                return answer
            time.sleep(answer)

    @staticmethod
    def _conflict_or(request, response):
        # a view's 500 caused by a serialization failure or deadlock:
        # Django turned the exception into the response; retry it
        error = getattr(request, "_idempotency_error", None)
        if response.status >= 500 and sqlstate_of(error) in RETRYABLE:
            raise _Retry(sqlstate_of(error))
        return response

    def process_exception(self, request, exception):
        request._idempotency_error = exception

    def _leased(self, o, request, key, scope, fp):
        deadline = time.monotonic() + o.wait_for
        polls = 0
        sql, params = claim_sql(o, key, scope, fp)
        while True:
            conn = connections[self.using]
            with conn.cursor() as cur:  # outside atomic(): autocommit, the claim commits now
                cur.execute(sql, params)
                outcome, result, fence, recovery_point, retry_after = cur.fetchone()
            if outcome == "claimed":
                break
            answer = not_claimed(o, outcome, result, retry_after, polls, deadline, time.monotonic())
            polls += 1
            if isinstance(answer, Response):
                return answer
            time.sleep(answer)
        handle = Idempotency(o, self.using, key, scope, fence, recovery_point)
        request.idempotency = handle
        try:
            with transaction.atomic(using=self.using):
                response = from_django(self.get_response(request))
                if handle.unknown:
                    transaction.set_rollback(True, using=self.using)
                    return response
                if not keeps(o, response.status):
                    transaction.set_rollback(True, using=self.using)
                else:
                    with conn.cursor() as cur:
                        cur.execute(*finish_sql(key, scope, encode_stored(response, o.stored_headers), fence))
                    return response
        except DatabaseError as exc:
            if sqlstate_of(exc) in ("IK002", "IK003"):
                return answer_of(sqlstate_of(exc))
            self._fail(conn, key, scope, 500, fence)
            raise
        self._fail(conn, key, scope, response.status, fence)
        return response

    @staticmethod
    def _fail(conn, key, scope, status, fence):
        with conn.cursor() as cur:
            cur.execute(*fail_sql(key, scope, status, fence))
