"""Idempotency-Key middleware on the idempotency PostgreSQL extension:
pg_idempotency_key.asgi.IdempotencyMiddleware (Starlette, FastAPI) and
pg_idempotency_key.django.IdempotencyMiddleware."""
from .core import Options

__all__ = ["Options"]
__version__ = "0.1.0"
