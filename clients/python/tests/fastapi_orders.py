"""The FastAPI application of the ORM tests (routes: orm_orders.py), with
SQLAlchemyIdempotencyMiddleware, under uvicorn: uvicorn fastapi_orders:app
(IDEM_APP_SA_URL).  Endpoints are `def`: FastAPI runs them on its thread
pool, where the Session may block."""
import os

from fastapi import FastAPI, Request
from fastapi.responses import Response
from sqlalchemy import create_engine

from orm_orders import ROUTE_OPTIONS, ROUTES, outside
from pg_idempotency_key.sqlalchemy_asgi import SQLAlchemyIdempotencyMiddleware

engine = create_engine(os.environ["IDEM_APP_SA_URL"], future=True, pool_size=10)
app = FastAPI()


def user_of(scope):
    auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
    return auth[len("Bearer "):] if auth.startswith("Bearer ") else None


app.add_middleware(SQLAlchemyIdempotencyMiddleware, engine=engine, scope=user_of,
                   routes=ROUTE_OPTIONS)


def endpoint(handler):
    def run(request: Request, body: dict):
        idem = request.state.idempotency
        status, headers, text = handler(idem.session, idem.key, idem.scope, body)
        return Response(text, status, headers, media_type="application/json")
    return run


for path, handler in ROUTES.items():
    app.post(path)(endpoint(handler))
for path in ("/orders/wait", "/orders/small", "/orders/optional"):
    app.post(path)(endpoint(ROUTES["/orders"]))
app.post("/orders/outside")(endpoint(lambda s, k, t, b: outside(s, k, t, b, engine)))
