"""The framework-independent part: settings, key checks, the SQL of the
claim and of the outcomes, the stored form of a response, and the HTTP
answers (RFC 9457 problems) of the extension's SQLSTATEs.  The stored form
is the one the Node.js package uses, so both can serve the same keys."""
import base64
import dataclasses
import functools
import hashlib
import json
import random
import re
from typing import Any, Callable, Optional, Sequence, Union

KEY_CHARACTERS = re.compile(r"[\x20-\x7e]+")  # sf-string: printable ASCII
RETRYABLE = frozenset({"40001", "40P01"})
MIB = 1024 * 1024
# response headers stored and replayed unless stored_headers says otherwise
STORED_HEADERS = ("content-type", "content-language", "content-location", "location", "etag", "last-modified",
                  "link", "cache-control", "vary")
# one user's session must never be replayed to another
NEVER_STORED = frozenset({"set-cookie", "set-cookie2"})
# the session ended or the database is unavailable: nothing of the request
# committed (except at COMMIT itself), a retry with the same key is safe
UNAVAILABLE = frozenset({"57P01", "57P02", "57P03", "57014", "25P03", "53300"})
# the modules whose OperationalError / InterfaceError is a broken connection
DRIVERS = frozenset({"psycopg", "psycopg2", "psycopg_pool", "asyncpg", "django"})
# Citus right after a shard move: (SQLSTATE, words of the message)
CITUS_MOVED = (("25001", "cannot perform query on placements"),
               ("XX000", "cannot execute a distributed query from a query on a shard"),
               ("XX000", "could not commit transaction"))


@dataclasses.dataclass(frozen=True)
class Options:
    """Settings; every one may be given per route (see README)."""
    scope: Union[str, Callable[[Any], Optional[str]], None] = None  # required
    required: bool = True
    methods: Sequence[str] = ("POST", "PATCH")
    stored_headers: Sequence[str] = STORED_HEADERS
    max_body_bytes: int = 10 * MIB       # a longer request body: 413, nothing claimed
    max_response_bytes: int = 10 * MIB   # a longer response: 500, rolled back
    store_client_errors: bool = True
    ttl: Optional[float] = None          # seconds; None: idempotency.default_ttl
    lease: Optional[float] = None        # seconds; None: in-transaction claim
    heartbeat: Optional[float] = None    # seconds; None: lease / 3; 0: never
    handler_timeout: Optional[float] = 300.0  # seconds; leased mode: a handler that has not answered is abandoned
    wait_for: float = 0.0                # seconds a duplicate in flight polls before 409
    poll_from: float = 0.025             # first poll's interval, doubling up to the server's retry_after
    retries: int = 3                     # retries after 40001 / 40P01
    max_key_length: int = 255
    prepare: bool = False                # IdempotencyMiddleware: the claim and the outcome PREPAREd per connection

    def __post_init__(self):
        if self.scope is None or (isinstance(self.scope, str) and not self.scope):
            raise ValueError("the scope option is required: a function of the request returning the authenticated"
                             " principal (or None: 403), or a non-empty string for one scope shared by all callers")
        names = tuple(name.lower() for name in self.stored_headers)
        if NEVER_STORED.intersection(names):
            raise ValueError("stored_headers may not list set-cookie or set-cookie2: a replay goes to whoever sends"
                             " the key, and one user's cookies must not reach another")
        object.__setattr__(self, "stored_headers", names)
        object.__setattr__(self, "methods", tuple(m.upper() for m in self.methods))

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def scope_of(self, request):
        """-> the scope of the request, or None when the application's
        function found no principal (the request is refused: 403)"""
        scope = self.scope(request) if callable(self.scope) else self.scope
        return str(scope) if scope is not None and scope != "" else None

    @property
    def handler_limit(self):
        """leased mode: seconds a handler may take before it is abandoned (None: no limit)"""
        if self.lease is None or not self.handler_timeout:
            return None
        return self.handler_timeout

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


def refuse_prepare(o, why="the other middlewares send their statements through their own driver or ORM"):
    """prepare is IdempotencyMiddleware's on psycopg: refused elsewhere, not ignored"""
    if o is not False and o.prepare:
        raise ValueError("prepare=True is an option of pg_idempotency_key.asgi.IdempotencyMiddleware on psycopg;"
                         f" {why}")


def check_key(keys, o):
    """keys: the values of every Idempotency-Key header line -> a problem
    for a missing or malformed key, or None.  Two lines, or one line with a
    comma (what a server makes of two lines), are refused: which one the
    client meant is unknown."""
    if not keys:
        if not o.required:
            return None
        return problem(400, "key-missing", "Idempotency-Key header missing",
                       "This operation requires an Idempotency-Key header.")
    if len(keys) > 1 or "," in keys[0]:
        return problem(400, "key-invalid", "Invalid Idempotency-Key",
                       "Send exactly one Idempotency-Key header line, with one key (no comma).")
    key = keys[0]
    if not 0 < len(key) <= o.max_key_length or not KEY_CHARACTERS.fullmatch(key):
        return problem(400, "key-invalid", "Invalid Idempotency-Key",
                       f"An Idempotency-Key is 1 to {o.max_key_length} printable ASCII characters.")
    return None


def scope_missing():
    return problem(403, "scope-missing", "No idempotency scope",
                   "The request has no principal to scope its Idempotency-Key to (not authenticated);"
                   " nothing was recorded.")


def body_too_large(o):
    return problem(413, "body-too-large", "Request body too large",
                   f"A request body with an Idempotency-Key may have up to {o.max_body_bytes} bytes;"
                   " nothing was recorded.")


def response_too_large(o):
    return problem(500, "response-too-large", "Response too large to store",
                   f"The response has more than {o.max_response_bytes} bytes, more than can be recorded;"
                   " nothing was committed, the key is free.")


def transaction_ended():
    return problem(500, "transaction-ended", "Transaction ended by the handler",
                   "The handler ended the transaction of the Idempotency-Key's claim (COMMIT, ROLLBACK, BEGIN"
                   " or the like); its later statements were refused and nothing was committed.")


def handler_timeout(o):
    return problem(503, "handler-timeout", "Request took too long",
                   "The request did not finish in time and was abandoned; a retry with the same key takes it over"
                   " after the delay given.", [("retry-after", str(max(1, int(-(-o.lease // 1)))))])


def is_json(content_type):
    media = (content_type or "").split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")  # Python's json reads NaN and Infinity, jsonb refuses them


def fingerprint(method, path, body, content_type):
    """-> (json, digest): for a JSON body json is the text of the array
    [method, path, body], hashed by idem_fingerprint (key order and white
    space do not count), digest None; else json is None and digest the
    SHA-256 of method, path and the body's bytes."""
    if is_json(content_type):
        try:
            text = body.decode()
            json.loads(text, parse_constant=_refuse_constant)
            array = json.dumps([method, path])[:-1] + ", " + text + "]"
            if "\\u0000" not in array:  # jsonb refuses it: hashed as bytes
                return array, None
        except ValueError:
            pass
    return None, hashlib.sha256(f"{method} {path}\n".encode() + body).digest()


@functools.lru_cache(maxsize=64)  # a few statements, each sent again and again
def numbered(sql):
    """the package's SQL (%s placeholders) with $1, $2, ... (asyncpg, PREPARE)"""
    parts = sql.split("%s")
    return parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))


# The claim and the outcome, each of one shape for every request (NULL: the
# server's default ttl, no lease, no fence; the fingerprint's digest, or its
# JSON input), so that prepare=True (ASGI) can PREPARE them once per
# connection and EXECUTE them in the same one round trip as BEGIN and
# COMMIT: the server then neither parses nor plans them again.  The claim's
# row is two values (claim_row), the outcome's none: psycopg's pure-Python
# implementation (Debian's) spends more on each column of a result than
# the server does on building them
CLAIM = ("SELECT jsonb_build_array(outcome, fence, recovery_point, extract(epoch FROM retry_after)), result"
         " FROM idem_claim(%s::text, scope => %s::text, fingerprint => COALESCE(%s::bytea,"
         " idem_fingerprint(%s::jsonb)), wait => false,"
         " ttl => make_interval(secs => %s::float8), lease => make_interval(secs => %s::float8))")
FINISH = ("SELECT FROM idem_finish_response(%s::text, %s::int, %s::jsonb, %s::bytea, scope => %s::text,"
          " fence => %s::bigint)")
CLAIM_STATEMENT, FINISH_STATEMENT = "pg_idempotency_key_claim", "pg_idempotency_key_finish"
PREPARE_STATEMENTS = tuple(f"PREPARE {name} AS {numbered(sql)}"
                           for name, sql in ((CLAIM_STATEMENT, CLAIM), (FINISH_STATEMENT, FINISH)))


def seconds(value):
    return None if value is None else float(value)


def claim_sql(o, key, scope, fp):
    json_input, digest = fp
    return CLAIM, [key, scope, digest, json_input, seconds(o.ttl), seconds(o.lease)]


def claim_row(row):
    """the claim's row (CLAIM) -> (outcome, result, fence, recovery_point,
    retry_after seconds)"""
    state, result = row
    if isinstance(state, str):  # asyncpg and Django's psycopg2 backend leave jsonb as text
        state = json.loads(state)
    outcome, fence, recovery_point, retry_after = state
    return outcome, result, fence, recovery_point, retry_after


def finish_sql(key, scope, response, stored_headers, fence=None):
    """idem_finish_response of key with response: the server builds the
    stored form (its "body" or "body_base64") from the body's bytes"""
    return FINISH, [key, response.status, json.dumps(headers_to_store(response, stored_headers)),
                    bytes(response.body), scope, fence]


def executed(name, params):
    """-> (sql, params): the statement PREPAREd as name (CLAIM or FINISH) with params"""
    return f"EXECUTE {name}({', '.join(['%s'] * len(params))})", params


def fail_sql(key, scope, status, fence):
    return ("SELECT idem_fail(%s, %s::jsonb, retryable => true, scope => %s, fence => %s::bigint)",
            [key, json.dumps({"status": status}), scope, fence])


def headers_to_store(response, stored_headers):
    """the stored form's headers: those listed, a repeated one as a list"""
    headers = {}
    for name, value in response.headers:
        if name in stored_headers and name not in NEVER_STORED:
            headers[name] = value if name not in headers else (
                [*headers[name], value] if isinstance(headers[name], list) else [headers[name], value])
    return headers


def replay_of(response, stored_headers):
    """the response a duplicate waiting in this process gets: the one
    committed, as a replay of its record would give it"""
    return decode_stored({"status": response.status, "headers": headers_to_store(response, stored_headers)},
                         response.body)


def decode_stored(result, body=None):
    """the response a replay answers with, from the stored form {"status",
    "headers", "body" (text) or "body_base64"} (or its body's bytes)"""
    if isinstance(result, str):  # Django's psycopg2 backend leaves jsonb as text
        result = json.loads(result)
    headers = []
    for name, value in (result.get("headers") or {}).items():
        if name.lower() in NEVER_STORED:  # a record another writer made
            continue
        headers += [(name, v) for v in value] if isinstance(value, list) else [(name, value)]
    headers.append(("idempotent-replayed", "true"))
    if body is None and "body_base64" in result:
        body = base64.b64decode(result["body_base64"])
    elif body is None:
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


def unavailable():
    return problem(503, "unavailable", "Database unavailable",
                   "The database session ended or the database is unavailable; nothing of this request was"
                   " committed (unless at COMMIT itself): retry with the same Idempotency-Key.",
                   [("retry-after", "1")])


def is_unavailable(sqlstate, message=""):
    """does the error say the session ended or the database is unavailable?
    (a connection that broke without an error from the server: see sqlstate_of)"""
    if sqlstate is None:
        return False
    if sqlstate.startswith("08") or sqlstate in UNAVAILABLE:
        return True
    return any(sqlstate == code and words in (message or "") for code, words in CITUS_MOVED)


def answer_of(sqlstate, message="", extension=True, outcome=False):
    """the HTTP answer of a database error, or None (the framework's 500).
    extension: the error came from the middleware's own statement (the
    claim, idem_finish), so the extension's codes are the key's; else from
    the application's statements, where only the codes that mean "retry"
    are answered.  outcome: the statement was the outcome's, where a value
    refused (22004, 22023, 22008) is the response's, a status or header a
    replay could not send, not the key's"""
    if sqlstate in RETRYABLE:
        return problem(503, "retry", "Transaction conflict",
                       "The transaction was rolled back by a serialization failure or deadlock; retry the request.",
                       [("retry-after", "1")])
    if sqlstate == "25006":
        return problem(503, "read-only", "Database read-only",
                       "The database is read-only (a standby or a read-only transaction); retry later.",
                       [("retry-after", "1")])
    if is_unavailable(sqlstate, message):
        return unavailable()
    if not extension:
        return None
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
    if sqlstate in ("22023", "22004", "22008") and not outcome:
        return problem(400, "key-invalid", "Invalid Idempotency-Key", message)
    return None


def sqlstate_of(exc):
    """the SQLSTATE of a psycopg 3, psycopg 2, asyncpg, or Django- or
    SQLAlchemy-wrapped error; a connection that broke, closed or could not
    be had without a word from the server (OperationalError,
    InterfaceError, psycopg_pool's PoolTimeout), or whose protocol state
    the driver lost (asyncpg's InternalClientError, say after PgBouncer
    ended an idle session), counts as 08006, connection failure"""
    chain = [exc]
    while len(chain) < 4 and getattr(chain[-1], "__cause__", None) is not None:
        chain.append(chain[-1].__cause__)
    for e in chain:
        code = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
        if code:
            return code
    for e in chain:
        if any(c.__name__ in ("OperationalError", "InterfaceError", "InternalClientError")
               and c.__module__.split(".")[0] in DRIVERS
               for c in type(e).__mro__):
            return "08006"
    return None


def answer_of_error(exc, extension=True):
    """the HTTP answer of a database error exc, or None"""
    return answer_of(sqlstate_of(exc), str(exc), extension)


class RetryRequest(Exception):
    """40001 / 40P01: the request's transaction was rolled back by a
    serialization failure or deadlock, nothing of it committed: it runs
    again with the same key (up to the route's retries), then answers
    503 retry"""

    def __init__(self, sqlstate):
        super().__init__(sqlstate)
        self.sqlstate = sqlstate

    def answer(self):
        return answer_of(self.sqlstate)


def failure_answer(exc, own=True, ended=False, outcome=False):
    """The one classification of an error that failed a request (every
    framework's middleware uses it; nothing of the request committed):
    ended (the handler ended the claim's transaction itself): 500
    transaction-ended; 40001 / 40P01: raises RetryRequest; a code with an
    answer (retry, read-only, unavailable; with own, the extension's
    codes too): that problem; else None, the application's own error, for
    the framework to answer (500).  own: exc came from the middleware's
    statements (the claim, idem_finish, COMMIT), not the handler's;
    outcome: from the outcome's (idem_finish_response, COMMIT)."""
    if ended:
        return transaction_ended()
    sqlstate = sqlstate_of(exc)
    if sqlstate in RETRYABLE:
        raise RetryRequest(sqlstate) from exc
    return answer_of(sqlstate, str(exc), own, outcome)


def has_answer(exc, ended=False):
    """must the middleware, not the framework, answer the handler's error exc?"""
    try:
        return failure_answer(exc, own=False, ended=ended) is not None
    except RetryRequest:
        return True


def with_retries(o, attempt):
    """attempt() -> its answer, run again after RetryRequest up to o.retries
    times; then the 503 retry answer"""
    for n in range(o.retries + 1):
        try:
            return attempt()
        except RetryRequest as r:
            if n == o.retries:
                return r.answer()
    raise AssertionError("unreachable")
