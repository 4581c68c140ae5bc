"""ASGI middleware (Starlette, FastAPI) whose handlers write through an
SQLAlchemy Session bound to the claim's transaction:
request.state.idempotency.session.

The same checks and answers as asgi.py; the claim, the handler's run and
the commit go through sqlalchemy_flow.SessionFlow on a thread of the
middleware's own (the driver, psycopg2, blocks), never on the event loop;
the application runs on the event loop as usual.  The Session blocks too:
write through it from synchronous endpoints (FastAPI and Starlette run a
`def` endpoint on their thread pool)."""
import asyncio
from concurrent.futures import ThreadPoolExecutor

from .asgi import TOO_LARGE, _AppRun, admit, send_answer
from .core import Options, refuse_prepare
from .sqlalchemy_flow import TOO_LARGE as FLOW_TOO_LARGE, SessionFlow


class SQLAlchemyIdempotencyMiddleware:
    """app.add_middleware(SQLAlchemyIdempotencyMiddleware, engine=engine, scope=...)

    engine: an SQLAlchemy Engine on psycopg2 (create_engine(..., future=True)
    on SQLAlchemy 1.4); threads: how many requests claim or commit at once
    (each holds one of the engine's connections meanwhile);
    session_options: keyword arguments of the request's Session;
    routes: {path: {option: value, ...}} or {path: False}."""

    def __init__(self, app, engine, routes=None, threads=32, session_options=None, **options):
        self.app = app
        self.options = Options(**options)
        self.routes = {path: (False if v is False else self.options.replace(**(v if isinstance(v, dict) else {})))
                       for path, v in (routes or {}).items()}
        for o in (self.options, *self.routes.values()):
            SessionFlow.refuse_lease(o)
            refuse_prepare(o)
        self.flow = SessionFlow(engine, session_options)
        self.threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="idempotency")

    async def __call__(self, scope, receive, send):
        admitted = await admit(self, scope, receive, send)
        if admitted is None:
            return
        o, body, request = admitted
        loop = asyncio.get_running_loop()
        runs = []  # every run of the application (a 40001 runs it again)

        async def run_app(handle):
            scope.setdefault("state", {})["idempotency"] = handle
            run = _AppRun(self.app, scope, body, o.max_response_bytes)
            runs.append(run)
            response = await run.result()
            return FLOW_TOO_LARGE if response is TOO_LARGE else response

        def run(handle):  # on the flow's thread
            return asyncio.run_coroutine_threadsafe(run_app(handle), loop).result()

        try:
            answer = await loop.run_in_executor(self.threads, self.flow.handle, o, request, run)
        except BaseException:
            for r in runs:
                await r.abandon()
            raise
        await send_answer(send, answer, runs)
