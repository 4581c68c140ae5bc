"""The Flask + Flask-SQLAlchemy application of the ORM tests (routes:
orm_orders.py), under gunicorn: gunicorn flask_orders:app (IDEM_APP_SA_URL).
The scope is the user of "Authorization: Bearer NAME" (the test's stand-in
for authentication)."""
import os

from flask import Flask, request
from flask_sqlalchemy import SQLAlchemy

from orm_orders import ROUTE_OPTIONS, ROUTES, Base, outside
from pg_idempotency_key.flask import FlaskIdempotency

app = Flask(__name__)
app.config["SQLALCHEMY_DATABASE_URI"] = os.environ["IDEM_APP_SA_URL"]
app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"pool_size": 10}
db = SQLAlchemy(app, model_class=Base)


def user_of(req):
    auth = req.headers.get("Authorization", "")
    return auth[len("Bearer "):] if auth.startswith("Bearer ") else None


FlaskIdempotency(app, db=db, scope=user_of, routes=ROUTE_OPTIONS)


def view(handler):
    def run():
        status, headers, body = handler(db.session, request.headers.get("Idempotency-Key"), user_of(request),
                                        request.get_json())
        return body, status, {"content-type": "application/json", **headers}
    return run


for path, handler in ROUTES.items():
    app.add_url_rule(path, path, view(handler), methods=["POST"])
for path in ("/orders/wait", "/orders/small", "/orders/optional"):
    app.add_url_rule(path, path, view(ROUTES["/orders"]), methods=["POST"])
app.add_url_rule("/orders/outside", "/orders/outside",
                 view(lambda s, k, t, b: outside(s, k, t, b, db.engine)), methods=["POST"])
