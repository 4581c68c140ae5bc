"""The FastAPI application of the ORM tests with an AsyncSession
(routes: orm_async_orders.py), SQLAlchemyAsyncIdempotencyMiddleware on an
asyncpg AsyncEngine, under uvicorn: uvicorn fastapi_async_orders:app
(IDEM_APP_SA_URL, made postgresql+asyncpg).  For PgBouncer in transaction
pooling, asyncpg's and SQLAlchemy's statement caches are off and the
statements' names unique (the README's recipe)."""
import os
import urllib.parse
import uuid

import asyncpg

from fastapi import FastAPI, Request
from fastapi.responses import Response
from sqlalchemy.ext.asyncio import create_async_engine

from orm_async_orders import ROUTES, outside
from orm_orders import ROUTE_OPTIONS
from pg_idempotency_key.sqlalchemy_async import SQLAlchemyAsyncIdempotencyMiddleware


def asyncpg_url(url):
    """the psycopg2 URL of the suite -> asyncpg's (host and port as asyncpg takes them)"""
    parts = urllib.parse.urlsplit(url.replace("postgresql+psycopg2", "postgresql+asyncpg"))
    query = dict(urllib.parse.parse_qsl(parts.query))
    query["prepared_statement_cache_size"] = "0"
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


class UniqueStatementNames(asyncpg.Connection):
    def _get_unique_id(self, prefix):
        return f"__asyncpg_{prefix}_{uuid.uuid4()}__"


engine = create_async_engine(asyncpg_url(os.environ["IDEM_APP_SA_URL"]), pool_size=10,
                             connect_args={"statement_cache_size": 0, "connection_class": UniqueStatementNames})
app = FastAPI()


def user_of(scope):
    auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
    return auth[len("Bearer "):] if auth.startswith("Bearer ") else None


app.add_middleware(SQLAlchemyAsyncIdempotencyMiddleware, engine=engine, scope=user_of, routes=ROUTE_OPTIONS)


def endpoint(handler):
    async def run(request: Request, body: dict):
        idem = request.state.idempotency
        status, headers, text = await handler(idem.session, idem.key, idem.scope, body)
        return Response(text, status, headers, media_type="application/json")
    return run


for path, handler in ROUTES.items():
    app.post(path)(endpoint(handler))
for path in ("/orders/wait", "/orders/small", "/orders/optional"):
    app.post(path)(endpoint(ROUTES["/orders"]))
app.post("/orders/outside")(endpoint(lambda s, k, t, b: outside(s, k, t, b, engine)))
