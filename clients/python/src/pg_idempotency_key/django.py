"""Django middleware: the claim, the view (its ORM writes included) and
idem_finish run in one transaction.atomic() on Django's own PostgreSQL
connection, so they commit or roll back together.

settings.py:
    MIDDLEWARE = [..., "pg_idempotency_key.django.IdempotencyMiddleware"]
    IDEMPOTENCY = {"scope": "myapp.tenancy.scope_of",    # or a callable
                   "routes": {"/orders/preview": False}}   # per-path settings

Only the configured methods of paths the URLconf resolves are handled;
everything else passes through untouched.  The view's response is
returned as the view made it (cookies included); what is stored for a
replay is its status, allowlisted headers and body.

Django has no connection pool to starve: a duplicate that polls sleeps
outside any transaction, on its own thread's connection."""
import hashlib
import io
import json
import time

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.http import HttpResponse
from django.urls import Resolver404, resolve
from django.utils.module_loading import import_string

from .core import (Options, Response, RetryRequest, answer_of, answer_of_error, body_too_large, check_key, claim_row,
                   claim_sql, fail_sql, failure_answer, finish_sql, fingerprint, handler_timeout, keeps, not_claimed,
                   refuse_prepare, response_too_large, scope_missing, sqlstate_of, transaction_ended, with_retries)
from .transaction_control import TransactionEnded, ends_transaction


def to_django(r):
    response = HttpResponse(r.body, status=r.status)
    del response["Content-Type"]
    for name, value in r.headers:
        response[name] = value
    return response


def from_django(response):
    """-> the Response to record (cookies are never recorded); a streaming
    response is read, and given its body again for sending"""
    if response.streaming:
        body = b"".join(response.streaming_content)
        response.streaming_content = [body]
    else:
        body = response.content
    headers = [(n.lower(), v) for n, v in response.items()]
    return Response(response.status_code, headers, body)


def request_fingerprint(request):
    """the fingerprint of method, full path and body, read so that Django's
    own handling still works: multipart/form-data is parsed by Django's
    upload handlers (large files on disk, DATA_UPLOAD_MAX_MEMORY_SIZE for
    the fields only) and fingerprinted from its fields and files, so a
    client's new boundary on a retry does not count; another body is read
    from the stream (not request.body, whose size limit is the view's to
    meet) and put back for the view"""
    path = request.get_full_path()
    if request.content_type == "multipart/form-data":
        digest = hashlib.sha256(f"{request.method} {path}\n".encode())
        for name, values in sorted(request.POST.lists()):
            for value in values:
                digest.update(json.dumps(["field", name, value]).encode())
        for name, files in sorted(request.FILES.lists()):
            for upload in files:
                digest.update(json.dumps(["file", name, upload.name, upload.content_type, upload.size]).encode())
                for chunk in upload.chunks():  # from the start
                    digest.update(chunk)
                upload.seek(0)
        return None, digest.digest()
    if hasattr(request, "_body"):
        body = request._body
    else:
        body = request._stream.read()
        request._stream = io.BytesIO(body)  # request.body and request.read() read it again
    return fingerprint(request.method, path, body, request.content_type)


class _TransactionGuard:
    """a connection.execute_wrapper around the view: refuses a statement
    that would end the claim's transaction (COMMIT, ROLLBACK, BEGIN ...)
    before it runs, and every statement after it"""

    def __init__(self):
        self.ended = False

    def __call__(self, execute, sql, params, many, context):
        if self.ended or ends_transaction(sql):
            self.ended = True
            raise TransactionEnded()
        return execute(sql, params, many, context)


class _Answer(Exception):
    """the request ends with this answer of the middleware (rolled back)"""

    def __init__(self, response):
        super().__init__(response.status)
        self.response = response


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
        for o in (self.options, *self.routes.values()):
            refuse_prepare(o)

    def __call__(self, request):
        o = self.routes.get(request.path, self.options)
        if o is False or request.method not in o.methods or not self._routed(request):
            return self.get_response(request)
        # Django joins header lines with ","; check_key refuses a comma
        key = request.headers.get("Idempotency-Key")
        refused = check_key([] if key is None else [key], o)
        if refused:
            return to_django(refused)
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > o.max_body_bytes:
            return to_django(body_too_large(o))
        if key is None:
            # unprotected: the view's own transaction, rolled back on a 5xx
            with transaction.atomic(using=self.using):
                request.idempotency = Idempotency(o, self.using, None, None)
                response = self.get_response(request)
                if response.status_code >= 500:
                    transaction.set_rollback(True, using=self.using)
                return response
        scope = o.scope_of(request)
        if scope is None:
            return to_django(scope_missing())
        request_fp = request_fingerprint(request)
        answer = with_retries(o, lambda: self._answer(o, request, key, scope, request_fp))
        # the view's own response object goes out as it is
        return to_django(answer) if isinstance(answer, Response) else answer

    def _answer(self, o, request, key, scope, fp):
        """one run of the request -> the view's response, or the Response
        of the middleware; raises RetryRequest (run it again)"""
        try:
            return self._attempt(o, request, key, scope, fp)
        except _Answer as a:
            return a.response
        except DatabaseError as exc:
            answer = failure_answer(exc)
            if answer is None:
                raise
            return answer

    @staticmethod
    def _routed(request):
        try:
            resolve(request.path_info, getattr(request, "urlconf", None))
            return True
        except Resolver404:
            return False

    def _attempt(self, o, request, key, scope, fp):
        if o.lease is not None:
            return self._leased(o, request, key, scope, fp)
        deadline = time.monotonic() + o.wait_for
        polls = 0
        sql, params = claim_sql(o, key, scope, fp)
        while True:
            with transaction.atomic(using=self.using):
                with connections[self.using].cursor() as cur:
                    cur.execute(sql, params)
                    outcome, result, fence, recovery_point, retry_after = claim_row(cur.fetchone())
                if outcome != "claimed":
                    transaction.set_rollback(True, using=self.using)
                else:
                    request.idempotency = Idempotency(o, self.using, key, scope, fence, recovery_point)
                    response, recorded = self._view(o, request)
                    if not keeps(o, recorded.status):
                        transaction.set_rollback(True, using=self.using)
                        return response
                    with connections[self.using].cursor() as cur:
                        cur.execute(*finish_sql(key, scope, recorded, o.stored_headers))
                    return response
            # not claimed: the claim's transaction is over, nothing held
            answer = not_claimed(o, outcome, result, retry_after, polls, deadline, time.monotonic())
            polls += 1
            if isinstance(answer, Response):
                return answer
            time.sleep(answer)

    def _view(self, o, request):
        """runs the view -> (its response, the Response to record); raises
        RetryRequest or _Answer (in the transaction: it rolls back) for a 500
        Django made of a database error that has an answer of its own, and
        when the view tried to end the claim's transaction"""
        request._idempotency_error = None
        guard = _TransactionGuard()
        with connections[self.using].execute_wrapper(guard):
            response = self.get_response(request)
        if guard.ended:
            raise _Answer(transaction_ended())
        recorded = from_django(response)
        if len(recorded.body) > o.max_response_bytes:
            raise _Answer(response_too_large(o))
        error = request._idempotency_error
        if recorded.status >= 500 and isinstance(error, DatabaseError):
            answer = failure_answer(error, own=False)
            if answer is not None:
                raise _Answer(answer)
        return response, recorded

    def process_exception(self, request, exception):
        # Django makes the view's exception a 500 response; _view needs it
        request._idempotency_error = exception

    def _leased(self, o, request, key, scope, fp):
        deadline = time.monotonic() + o.wait_for
        polls = 0
        sql, params = claim_sql(o, key, scope, fp)
        while True:
            conn = connections[self.using]
            with conn.cursor() as cur:  # outside atomic(): autocommit, the claim commits now
                cur.execute(sql, params)
                outcome, result, fence, recovery_point, retry_after = claim_row(cur.fetchone())
            if outcome == "claimed":
                break
            answer = not_claimed(o, outcome, result, retry_after, polls, deadline, time.monotonic())
            polls += 1
            if isinstance(answer, Response):
                return answer
            time.sleep(answer)
        handle = Idempotency(o, self.using, key, scope, fence, recovery_point)
        request.idempotency = handle
        started = time.monotonic()
        try:
            with transaction.atomic(using=self.using):
                response, recorded = self._view(o, request)
                if o.handler_limit is not None and time.monotonic() - started > o.handler_limit:
                    # a thread cannot be stopped: the late answer is dropped
                    # as an abandoned one is in the other packages; the key
                    # stays claimed until the lease ends
                    transaction.set_rollback(True, using=self.using)
                    return handler_timeout(o)
                if handle.unknown:
                    transaction.set_rollback(True, using=self.using)
                    return response
                if not keeps(o, recorded.status):
                    transaction.set_rollback(True, using=self.using)
                else:
                    with conn.cursor() as cur:
                        cur.execute(*finish_sql(key, scope, recorded, o.stored_headers, fence))
                    return response
        except DatabaseError as exc:
            if sqlstate_of(exc) in ("IK002", "IK003"):
                return answer_of(sqlstate_of(exc))
            self._fail(conn, key, scope, 500, fence)
            raise
        except (_Answer, RetryRequest):
            self._fail(conn, key, scope, 500, fence)
            raise
        self._fail(conn, key, scope, recorded.status, fence)
        return response

    @staticmethod
    def _fail(conn, key, scope, status, fence):
        """the leased claim is free for a retry (if the database is
        reachable; else its lease ends by itself)"""
        try:
            with conn.cursor() as cur:
                cur.execute(*fail_sql(key, scope, status, fence))
        except DatabaseError as exc:
            if answer_of_error(exc) is None:
                raise
