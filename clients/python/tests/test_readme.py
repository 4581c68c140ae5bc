"""The README's install block runs as printed (issue 30 item 18): the
```sh block after "<!-- tested by clients/python/tests/test_readme.py -->",
from a directory laid out as the repository's top, with this Python's
python3 first in PATH."""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)


def test_install_block_runs_as_printed(tmp_path):
    with open(os.path.join(PACKAGE, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"<!-- tested by clients/python/tests/test_readme\.py -->\n```sh\n(.*?)\n```", f.read(), re.S)
    assert len(blocks) == 1, "the README has one tested install block"
    shutil.copytree(PACKAGE, tmp_path / "clients" / "python",
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "build", "*.egg-info"))
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    env.pop("PYTHONPATH", None)
    done = subprocess.run(["bash", "-euc", blocks[0]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    # the venv's Python finds the package it installed, not this checkout
    where = subprocess.run([str(tmp_path / ".venv" / "bin" / "python"), "-c",
                            "import pg_idempotency_key; print(pg_idempotency_key.__file__)"],
                           cwd="/", env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(tmp_path / ".venv")), where
