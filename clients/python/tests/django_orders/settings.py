import os

from psycopg.conninfo import conninfo_to_dict

_dsn = conninfo_to_dict(os.environ["IDEM_APP_DSN"])
SECRET_KEY = "tests only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
INSTALLED_APPS = ["django_orders"]
ROOT_URLCONF = "django_orders.urls"
MIDDLEWARE = ["django_orders.auth.BearerPrincipal", "pg_idempotency_key.django.IdempotencyMiddleware"]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _dsn["dbname"], "USER": _dsn.get("user", "postgres"), "HOST": _dsn.get("host", ""),
    "PORT": _dsn.get("port", ""),
    "OPTIONS": {"options": _dsn["options"]} if "options" in _dsn else {},
    # PgBouncer in transaction pooling: no server-side cursors
    "DISABLE_SERVER_SIDE_CURSORS": True,
}}
IDEMPOTENCY = {
    "scope": "django_orders.views.principal",
    "routes": {"/orders/optional": {"required": False}, "/orders/wait": {"wait_for": 120},
               "/orders/404-not-stored": {"store_client_errors": False}, "/orders/leased": {"lease": 30},
               "/orders/hang": {"lease": 60, "handler_timeout": 0.3},
               "/orders/small": {"max_body_bytes": 1000}, "/orders/large": {"max_response_bytes": 1000}},
}
LOGGING = {"version": 1, "disable_existing_loggers": True}
