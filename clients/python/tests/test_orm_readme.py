"""The README's SQLAlchemy examples run as printed: each ```python block
after "<!-- tested by clients/python/tests/test_orm_readme.py -->" is saved
under the file name of its first line and served by the command that line
gives (uvicorn or gunicorn; on a test port instead of 8000); the README's
curl command places an order, its repetition replays it, one order."""
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from helpers import DIRECT, PORT, sa_url, sql

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
with open(os.path.join(PACKAGE, "README.md"), encoding="utf-8") as f:
    README = f.read()
MARK = "<!-- tested by clients/python/tests/test_orm_readme.py -->"
EXAMPLES = re.findall(re.escape(MARK) + r"\n```python\n(.*?)\n```", README, re.S)
CURL = re.search(r"```sh\n(curl -i -X POST localhost:8000/orders .*?)\n```", README, re.S).group(1)


def test_the_readme_has_the_three_examples():
    assert [e.split()[1] for e in EXAMPLES] == ["shop_fastapi.py", "shop_flask.py", "shop_fastapi_async.py"]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.split()[1] for e in EXAMPLES])
def test_example_runs_as_printed(example, tmp_path):
    name, command = re.match(r"# (\S+) — run: (.*)", example.splitlines()[0]).groups()
    (tmp_path / name).write_text(example + "\n", encoding="utf-8")
    port = str(PORT + 14)
    url = sa_url(DIRECT)
    if "create_async_engine" in example:
        url = url.replace("postgresql+psycopg2:", "postgresql+asyncpg:")
    env = dict(os.environ, DATABASE_URL=url, PYTHONPATH=os.path.join(PACKAGE, "src"))
    argv = [sys.executable, "-m", *command.replace("8000", port).split()]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, start_new_session=True)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
            except urllib.error.HTTPError:
                break
            except OSError:
                assert proc.poll() is None, f"{command} exited"
                time.sleep(0.1)
        key = f"readme-{name}-{os.getpid()}-{time.time()}"
        curl = CURL.replace("\\\n", " ").replace("localhost:8000", f"127.0.0.1:{port}").replace("order-1", key)
        before = sql("SELECT count(*) FROM shop_orders")[0][0]
        first = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, check=True).stdout
        again = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, check=True).stdout
        assert first.startswith("HTTP/1.1 201") and "idempotent-replayed" not in first.lower(), first
        assert again.startswith("HTTP/1.1 201") and "idempotent-replayed: true" in again.lower(), again
        assert first.split("\n\n", 1)[1] == again.split("\n\n", 1)[1] != ""
        assert sql("SELECT count(*) FROM shop_orders")[0][0] == before + 1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
