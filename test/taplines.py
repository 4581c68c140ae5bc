"""What the Python test programs print, which scripts/test.sh counts:
"ok N - what" / "not ok N - what" per check, "N passed, N failed" last."""
import sys

checks = 0
failures = 0


def check(ok, what):
    global checks, failures
    checks += 1
    failures += not ok
    print(("ok" if ok else "not ok"), checks, "-", what, flush=True)


def done():
    """the last line, and the exit status: 1 if any check failed"""
    print(f"{checks - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)
