"""Idempotency-Key middleware on the idempotency PostgreSQL extension:
pg_idempotency_key.asgi.IdempotencyMiddleware (Starlette, FastAPI) and
pg_idempotency_key.django.IdempotencyMiddleware; with SQLAlchemy sessions,
pg_idempotency_key.sqlalchemy_asgi.SQLAlchemyIdempotencyMiddleware
(Starlette, FastAPI), its AsyncSession counterpart
pg_idempotency_key.sqlalchemy_async.SQLAlchemyAsyncIdempotencyMiddleware
(asyncpg) and pg_idempotency_key.flask.FlaskIdempotency."""
from .core import Options

__all__ = ["Options"]
__version__ = "0.1.0"
