import os
import sys

import pytest

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)),
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")]

from helpers import FRAMEWORKS, PORT, TARGETS, setup_database, start_app, stop_app  # noqa: E402

setup_database()
# and the ASGI middleware with prepare=True (direct: PgBouncer cannot keep them)
APPS = [(f, t, dsn) for f in FRAMEWORKS for t, dsn in TARGETS] + [("asgi", "prepared", TARGETS[0][1])]


@pytest.fixture(scope="session", params=APPS, ids=[f"{f}-{t}" for f, t, _ in APPS])
def app(request):
    """the URL of a test application: each framework, directly and through
    PgBouncer, and the ASGI middleware's prepared statements"""
    framework, target, dsn = request.param
    n = APPS.index(request.param)  # PORT + 5 to 16 are other tests' servers: the apps after the fifth go on 17, 18
    proc, url = start_app(framework, dsn, PORT + (n if n < 5 else 12 + n), prepare=target == "prepared")
    yield url
    stop_app(proc)
