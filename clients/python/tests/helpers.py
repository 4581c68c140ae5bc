"""Shared by the tests: the databases (IDEM_TEST_DSN, direct;
IDEM_TEST_POOLED_DSN, through PgBouncer in transaction pooling), raw HTTP
requests, polling of the database for a condition, and the gate (an
advisory lock the test holds; a request with {"gate": true} waits for it)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import psycopg

DIRECT = os.environ["IDEM_TEST_DSN"]
POOLED = os.environ.get("IDEM_TEST_POOLED_DSN")
TARGETS = [("direct", DIRECT)] + ([("pgbouncer", POOLED)] if POOLED else [])
GATE = 7401
PORT = int(os.environ.get("IDEM_TEST_HTTP_PORT", "18090"))  # the apps: PORT + 0..6, 17..18; PORT + 7 stays closed
HERE = os.path.dirname(os.path.abspath(__file__))


def sql(text, params=()):
    with psycopg.connect(DIRECT, autocommit=True) as conn:
        cur = conn.execute(text, params)
        return cur.fetchall() if cur.description else None


def setup_database():
    sql("""CREATE OR REPLACE FUNCTION test_raise(code text, message text) RETURNS void LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message; END $$""")
    sql("CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, idempotency_key text, tenant text, sku text)")
    # what background tasks did, and what they saw of their request's record
    sql("CREATE TABLE IF NOT EXISTS side_effects (key text, what text, record_status text)")
    # a row here makes COMMIT fail with a real 40001 (a deferred trigger)
    sql("""CREATE TABLE IF NOT EXISTS commit_conflict (key text);
           CREATE OR REPLACE FUNCTION commit_conflict() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'conflict at commit' USING ERRCODE = '40001'; END $$;
           DROP TRIGGER IF EXISTS commit_conflict ON commit_conflict;
           CREATE CONSTRAINT TRIGGER commit_conflict AFTER INSERT ON commit_conflict
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_conflict()""")


def post(url, path, key=None, body=None, tenant="default", content_type="application/json", method="POST"):
    """-> (status, headers with lower-case names, body bytes); tenant: the
    authenticated user (the test apps' stand-in for authentication), None
    for none"""
    data = body if isinstance(body, bytes) else json.dumps(body if body is not None else {}).encode()
    req = urllib.request.Request(url + path, data=data if method == "POST" else None, method=method,
                                 headers={"Content-Type": content_type})
    if key is not None:
        req.add_header("Idempotency-Key", key)
    if tenant is not None:
        req.add_header("Authorization", f"Bearer {tenant}")
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def app_number(url, path):
    """the number a test route of the app answers (GET)"""
    with urllib.request.urlopen(url + path, timeout=60) as r:
        return int(r.read())


def framework_of(request):
    """the framework of the app fixture's current parameter"""
    return request.node.callspec.params["app"][0]


def problem_type(body):
    return json.loads(body)["type"]


def until(text, params=()):
    """poll the database (no timing assumption) until text returns true"""
    poll_until(lambda: sql(text, params)[0][0], text)


def poll_until(condition, what):
    """call condition() until it is true (no timing assumption)"""
    for _ in range(2400):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never true: {what}")


class Gate:
    def __enter__(self):
        self.conn = psycopg.connect(DIRECT, autocommit=True)
        self.conn.execute("SELECT pg_advisory_lock(%s)", [GATE])
        return self

    def __exit__(self, *exc):
        self.conn.close()


def waiters_at_gate(n):
    until("SELECT count(*) >= %s FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND NOT granted", [n, GATE])


def orders_of(keys):
    return dict(sql("SELECT idempotency_key, count(*) FROM orders WHERE idempotency_key = ANY(%s) GROUP BY 1",
                    [list(keys)]))


def record(key):
    rows = sql("SELECT status::text, fence, recovery_point FROM idempotent_record WHERE key = %s", [key])
    return rows[0] if rows else None


def raw_request(url, lines, body=b"", close=True):
    """sends a request made by hand (header lines, a body that may be
    shorter than its Content-Length) -> the answer's status line, or b""
    when the server closes without one"""
    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port)), timeout=300) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        if close:
            return b""
        answer = b""
        while b"\r\n" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer.split(b"\r\n")[0]


_n = [0]
RUN = f"{os.getpid()}-{int(time.time() * 1000)}"


def unique_key(label):
    _n[0] += 1
    return f"{label}-{RUN}-{_n[0]}"


FRAMEWORKS = ["asgi", "asgi-asyncpg", "django"]
ASGI = ("asgi", "asgi-asyncpg")  # the ASGI middleware on psycopg_pool's pool, on asyncpg's


def start_app(framework, dsn, port, pool=4, pool_timeout=30, prepare=False):
    """the test application in a server process of its own -> (process, URL):
    asgi_app under uvicorn (prepare: its middleware's option; asgi-asyncpg:
    on an asyncpg pool), or
    django_orders under gunicorn (threads: Django's runserver refuses
    connections beyond a backlog of 10)"""
    env = dict(os.environ, IDEM_APP_DSN=dsn, IDEM_APP_SA_URL=sa_url(dsn), IDEM_APP_POOL=str(pool),
               IDEM_APP_POOL_TIMEOUT=str(pool_timeout), IDEM_APP_PREPARE="1" if prepare else "",
               IDEM_APP_DRIVER="asyncpg" if framework == "asgi-asyncpg" else "",
               IDEM_APP_POOLED="1" if dsn == POOLED else "",
               DJANGO_SETTINGS_MODULE="django_orders.settings",
               PYTHONPATH=os.pathsep.join([HERE, os.path.join(HERE, "..", "src")]))
    if framework in ("asgi", "asgi-asyncpg", "fastapi", "fastapi-async"):
        module = {"asgi": "asgi_app:counted", "asgi-asyncpg": "asgi_app:counted", "fastapi": "fastapi_orders:app",
                  "fastapi-async": "fastapi_async_orders:app"}[framework]
        command = ["-m", "uvicorn", module, "--host", "127.0.0.1", "--port", str(port), "--log-level", "error"]
    else:
        command = ["-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "32",
                   "--log-level", "error", "flask_orders:app" if framework == "flask" else "django_orders.wsgi"]
    # a session of its own: kill -9 reaches gunicorn's worker too
    proc = subprocess.Popen([sys.executable, *command], env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):  # until it answers (a 404 for GET /)
        try:
            urllib.request.urlopen(url + "/", timeout=5)
        except urllib.error.HTTPError:
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the {framework} server exited")
            time.sleep(0.1)
    raise RuntimeError(f"the {framework} server did not start")


def sa_url(dsn):
    """the SQLAlchemy URL (psycopg2) of a libpq connection string"""
    p = psycopg.conninfo.conninfo_to_dict(dsn)
    query = {k: p[k] for k in ("host", "port") if k in p}
    return f"postgresql+psycopg2://{p.get('user', '')}@/{p['dbname']}?" + urllib.parse.urlencode(query)


def stop_app(proc, sig=signal.SIGTERM):
    """stops the app; one that has not exited a minute after SIGTERM (its
    shutdown waits, say for a pooled connection never given back) is
    killed, and the test fails rather than hangs"""
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("the app did not exit within 60 s of SIGTERM")
