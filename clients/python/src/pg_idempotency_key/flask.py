"""Flask extension: FlaskIdempotency(app, db=db, scope=...) or
ext.init_app(app).  It wraps app.wsgi_app: the checks, the claim, the
view's run and the commit of its response go through
sqlalchemy_flow.SessionFlow, with the same answers as the ASGI and Django
middlewares.  During the view, Flask-SQLAlchemy's db.session is the
Session in the claim's transaction (g.idempotency.session without
Flask-SQLAlchemy)."""
import io
from http import HTTPStatus

import flask
from werkzeug.exceptions import HTTPException

from .core import (Options, Response, body_too_large, check_key, fingerprint, has_answer, refuse_prepare,
                   scope_missing)
from .sqlalchemy_flow import TOO_LARGE, SessionFlow
from .transaction_control import TransactionEnded


class FlaskIdempotency:
    """db: a flask_sqlalchemy.SQLAlchemy (its engine, and db.session bound
    for the view), or engine: an SQLAlchemy Engine on psycopg2;
    scope: a function of flask.request -> the authenticated principal (or
    None: 403), or a constant string; routes: {rule path: {option: value}
    or False}; session_options: keyword arguments of the view's Session."""

    def __init__(self, app=None, *, db=None, engine=None, routes=None, session_options=None, **options):
        if (db is None) == (engine is None):
            raise ValueError("give db (Flask-SQLAlchemy) or engine (an SQLAlchemy Engine), one of them")
        self.db, self._engine, self._session_options = db, engine, session_options
        self.options = Options(**options)
        self.routes = {path: (False if v is False else self.options.replace(**(v if isinstance(v, dict) else {})))
                       for path, v in (routes or {}).items()}
        for o in (self.options, *self.routes.values()):
            SessionFlow.refuse_lease(o)
            refuse_prepare(o)
        self._flows = {}
        if app is not None:
            self.init_app(app)

    def init_app(self, app):
        app.extensions["idempotency"] = self
        app.wsgi_app = _Middleware(self, app, app.wsgi_app)
        app.before_request(self._bind)
        app.teardown_request(self._note_error)

    def flow(self, app):
        """the SessionFlow of app's engine"""
        if app.name not in self._flows:
            engine = self._engine
            if engine is None:
                with app.app_context():
                    engine = self.db.engine
            self._flows[app.name] = SessionFlow(engine, self._session_options)
        return self._flows[app.name]

    def _bind(self):
        handle = flask.request.environ.get("idempotency")
        flask.g.idempotency = handle
        if handle is not None and self.db is not None:
            self.db.session.remove()  # a session a before_request function opened
            self.db.session.registry.set(handle.session)

    @staticmethod
    def _note_error(error):
        if error is not None and "idempotency" in flask.request.environ:
            flask.request.environ["idempotency.error"] = error


class _Middleware:
    def __init__(self, ext, app, wsgi_app):
        self.ext, self.app, self.wsgi_app = ext, app, wsgi_app

    def _options(self, environ):
        """-> the options of the request's route, or False (not handled)"""
        try:
            rule, _ = self.app.url_map.bind_to_environ(environ).match(return_rule=True)
        except HTTPException:
            return False
        o = self.ext.routes.get(rule.rule, self.ext.options)
        return o if o is not False and environ["REQUEST_METHOD"] in o.methods else False

    def __call__(self, environ, start_response):
        o = self._options(environ)
        if o is False:
            return self.wsgi_app(environ, start_response)
        value = environ.get("HTTP_IDEMPOTENCY_KEY")
        keys = [] if value is None else [value]  # two lines arrive joined by a comma: refused
        refused = check_key(keys, o)
        if refused:
            return _respond(start_response, refused)
        key = keys[0] if keys else None
        scope_name = None
        if key is not None:
            with self.app.request_context(environ):
                scope_name = o.scope_of(flask.request)
            if scope_name is None:
                return _respond(start_response, scope_missing())
        length = environ.get("CONTENT_LENGTH") or ""
        if length.isdigit() and int(length) > o.max_body_bytes:
            return _respond(start_response, body_too_large(o))
        body = _read_body(environ, o.max_body_bytes)
        if body is None:
            return _respond(start_response, body_too_large(o))
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        if environ.get("QUERY_STRING"):
            path += "?" + environ["QUERY_STRING"]
        request = (key, scope_name, fingerprint(environ["REQUEST_METHOD"], path, body, environ.get("CONTENT_TYPE")))
        answer = self.ext.flow(self.app).handle(o, request, lambda handle: self._run(o, environ, body, handle))
        return _respond(start_response, answer)

    def _run(self, o, environ, body, handle):
        """runs the view on the claim's Session -> its Response (or TOO_LARGE)"""
        environ = dict(environ, **{"wsgi.input": io.BytesIO(body), "idempotency": handle})
        started = []

        def start(status, headers, exc_info=None):
            started[:] = [int(status.split()[0]), [(n.lower(), v) for n, v in headers]]
            return lambda data: None  # write(): not used by Flask
        chunks, size = [], 0
        app_iter = self.wsgi_app(environ, start)
        try:
            for chunk in app_iter:
                size += len(chunk)
                if size > o.max_response_bytes:
                    return TOO_LARGE
                chunks.append(chunk)
        finally:
            if hasattr(app_iter, "close"):
                app_iter.close()
        error = environ.get("idempotency.error")
        # the flow answers it (a re-run, a 503, transaction-ended), not Flask
        if error is not None and has_answer(error, ended=isinstance(error, TransactionEnded)):
            raise error
        return Response(started[0], started[1], b"".join(chunks))


def _read_body(environ, limit):
    """-> the request body, or None beyond limit"""
    stream, chunks, size = environ["wsgi.input"], [], 0
    while True:
        chunk = stream.read(min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


def _respond(start_response, r):
    headers = [(n, v) for n, v in r.headers if n != "content-length"]
    start_response(f"{r.status} {_reason(r.status)}", [*headers, ("content-length", str(len(r.body)))])
    return [r.body]


def _reason(status):
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
