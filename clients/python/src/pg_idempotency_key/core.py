"""The framework-independent part: settings, key checks, the SQL of the
claim and of the outcomes, the stored form of a response, and the HTTP
answers (RFC 9457 problems) of the extension's SQLSTATEs.  The stored form
is the one the Node.js package uses, so both can serve the same keys."""
import base64
import dataclasses
import hashlib
import json
import random
import re
from typing import Any, Callable, Optional, Sequence, Union

KEY_CHARACTERS = re.compile(r"[\x20-\x7e]+")  # sf-string: printable ASCII
RETRYABLE = frozenset({"40001", "40P01"})


@dataclasses.dataclass(frozen=True)
class Options:
    """Settings; every one may be given per route (see README)."""
    scope: Union[str, Callable[[Any], str]] = ""
    required: bool = True
    methods: Sequence[str] = ("POST", "PATCH")
    stored_headers: Sequence[str] = ("content-type", "location")
    store_client_errors: bool = True
    ttl: Optional[float] = None          # seconds; None: idempotency.default_ttl
    lease: Optional[float] = None        # seconds; None: in-transaction claim
    heartbeat: Optional[float] = None    # seconds; None: lease / 3; 0: never
    wait_for: float = 0.0                # seconds a duplicate in flight polls before 409
    poll_from: float = 0.025             # first poll's interval, doubling up to the server's retry_after
    retries: int = 3                     # retries after 40001 / 40P01
    max_key_length: int = 255

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def scope_of(self, request):
        return str(self.scope(request) if callable(self.scope) else self.scope)

    @property
    def heartbeat_every(self):
        if self.lease is None or self.heartbeat == 0:
            return None
        return self.heartbeat if self.heartbeat is not None else self.lease / 3


@dataclasses.dataclass
class Response:
    status: int
    headers: list  # [(name, value)] as str, names lower case
    body: bytes
    replaced: bool = False  # an answer of the middleware, not of the handler


def problem(status, kind, title, detail, headers=()):
    body = json.dumps({"type": f"urn:idempotency:{kind}", "title": title,
                       "status": status, "detail": detail}).encode()
    return Response(status, [("content-type", "application/problem+json"), *headers], body, True)


def check_key(key, o):
    """-> a problem for a missing or malformed key, or None"""
    if key is None:
        if not o.required:
            return None
        return problem(400, "key-missing", "Idempotency-Key header missing",
                       "This operation requires an Idempotency-Key header.")
    if not 0 < len(key) <= o.max_key_length or not KEY_CHARACTERS.fullmatch(key):
        return problem(400, "key-invalid", "Invalid Idempotency-Key",
                       f"An Idempotency-Key is 1 to {o.max_key_length} printable ASCII characters.")
    return None


def is_json(content_type):
    media = (content_type or "").split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def fingerprint(method, path, body, content_type):
    """-> (SQL expression, parameters): idem_fingerprint over method, path
    and body for a JSON body (key order and white space do not count), else
    SHA-256 of method, path and the body's bytes."""
    if is_json(content_type):
        try:
            text = body.decode()
            json.loads(text)
            if "\\u0000" not in text:  # jsonb refuses it: hashed as bytes
                return ("idem_fingerprint(jsonb_build_array(%s::text, %s::text, %s::jsonb))",
                        [method, path, text])
        except ValueError:
            pass
    digest = hashlib.sha256(f"{method} {path}\n".encode() + body).digest()
    return "%s::bytea", [digest]


def claim_sql(o, key, scope, fp):
    expression, params = fp
    sql = ("SELECT outcome, result, fence, recovery_point,"
           " extract(epoch FROM retry_after)::float8"
           f" FROM idem_claim(%s, scope => %s, fingerprint => {expression}, wait => false")
    params = [key, scope, *params]
    if o.ttl is not None:
        sql += ", ttl => make_interval(secs => %s)"
        params.append(float(o.ttl))
    if o.lease is not None:
        sql += ", lease => make_interval(secs => %s)"
        params.append(float(o.lease))
    return sql + ")", params


def finish_sql(key, scope, stored, fence=None):
    """idem_finish of key with stored, the stored form (encode_stored)"""
    return fenced("SELECT idem_finish(%s, %s::jsonb, scope => %s", [key, json.dumps(stored), scope], fence)


def fail_sql(key, scope, status, fence):
    return fenced("SELECT idem_fail(%s, %s::jsonb, retryable => true, scope => %s",
                  [key, json.dumps({"status": status}), scope], fence)


def fenced(sql, params, fence):
    if fence is None:
        return sql + ")", params
    return sql + ", fence => %s)", [*params, fence]


def encode_stored(response, stored_headers):
    """{"status", "headers", "body" (text) or "body_base64"}: jsonb would
    reorder a JSON body's keys, so the body is kept as a string"""
    headers = {}
    for name, value in response.headers:
        if name in stored_headers:
            headers[name] = value if name not in headers else (
                [*headers[name], value] if isinstance(headers[name], list) else [headers[name], value])
    stored = {"status": response.status, "headers": headers}
    try:
        text = response.body.decode()
        if "\x00" in text:
            raise ValueError
        stored["body"] = text
    except ValueError:
        stored["body_base64"] = base64.b64encode(response.body).decode()
    return stored


def decode_stored(result):
    if isinstance(result, str):  # Django's psycopg2 backend leaves jsonb as text
        result = json.loads(result)
    headers = []
    for name, value in (result.get("headers") or {}).items():
        headers += [(name, v) for v in value] if isinstance(value, list) else [(name, value)]
    headers.append(("idempotent-replayed", "true"))
    if "body_base64" in result:
        body = base64.b64decode(result["body_base64"])
    else:
        body = (result.get("body") or "").encode()
    return Response(result.get("status", 200), headers, body)


def keeps(o, status):
    """is a response with this status stored (else rolled back)?"""
    return status < 400 or (status < 500 and o.store_client_errors)


def in_progress(retry_after):
    return problem(409, "in-progress", "Request in progress",
                   "A request with this Idempotency-Key is still being processed; retry after the delay given.",
                   [("retry-after", str(max(1, int(-(-retry_after // 1)))))])


def not_claimed(o, outcome, result, retry_after, polls, deadline, now):
    """a claim answered 'replay' or 'in_progress' -> the Response to send,
    or the seconds to sleep before claiming again (poll number `polls`),
    while `deadline` (of the clock that gave `now`) allows: from poll_from,
    doubling up to the server's retry_after, with jitter"""
    if outcome == "replay":
        return decode_stored(result)
    wait = min(retry_after, o.poll_from * 2 ** polls) * (0.5 + random.random() / 2)
    if now + wait > deadline:
        return in_progress(retry_after)
    return wait


def answer_of(sqlstate, message=""):
    """the HTTP answer of an error the extension raised, or None"""
    if sqlstate == "IK001":
        return problem(422, "key-reused", "Idempotency-Key reused",
                       "This Idempotency-Key was used with another request (method, path or body).")
    if sqlstate in ("IK002", "IK003"):
        return problem(409, "claim-lost", "Idempotency-Key taken over",
                       "The claim of this request ended before its outcome was recorded; nothing was committed.",
                       [("retry-after", "1")])
    if sqlstate == "42501":
        return problem(403, "scope-forbidden", "Idempotency scope not granted",
                       "The database role may not use this idempotency scope.")
    if sqlstate == "25006":
        return problem(503, "read-only", "Database read-only",
                       "The database is read-only (a standby or a read-only transaction); retry later.",
                       [("retry-after", "1")])
    if sqlstate in RETRYABLE:
        return problem(503, "retry", "Transaction conflict",
                       "The transaction was rolled back by a serialization failure or deadlock; retry the request.",
                       [("retry-after", "1")])
    if sqlstate in ("22023", "22004", "22008"):
        return problem(400, "key-invalid", "Invalid Idempotency-Key", message)
    return None


def sqlstate_of(exc):
    """the SQLSTATE of a psycopg 3, psycopg 2 or Django-wrapped error"""
    for e in (exc, getattr(exc, "__cause__", None)):
        code = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
        if code:
            return code
    return None
