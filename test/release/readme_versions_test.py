#!/usr/bin/env python3
"""The documentation names the files a build writes as the build names
them, so that its commands work as printed after every release: each
name of a Debian package (postgresql-MAJOR-idempotency_VERSION_ARCH.deb)
or a PGXN archive or its folder (idempotency-VERSION.zip, idempotency-
VERSION/) in README.md, test/README.md and docs/ matches the name for the
control file's default_version (the archive: with ".0" appended, as PGXN
needs), a <placeholder> or * matching anything.  A version written out
drifts at the next release; a placeholder or wildcard does not.
Prints "ok N - ..." / "not ok N - ..." per name, then "N passed, N failed".

Usage: readme_versions_test.py   (from the top of the source tree)
"""
import fnmatch
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from taplines import check, done  # noqa: E402

control = open("idempotency.control").read()
version = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.M).group(1)
semver = version if version.count(".") >= 2 else version + ".0"
# the version in each name the build writes
expected = {"deb": version, "zip": semver, "folder": semver}
NAMES = {
    "deb": re.compile(r"postgresql-[^\s`'\"/]*-idempotency_(?P<v>[^_\s`'\"/]+)_[^\s`'\"/]*\.deb"),
    "zip": re.compile(r"(?<![\w-])idempotency-(?P<v>[^-\s`'\"/][^\s`'\"/]*)\.zip"),
    "folder": re.compile(r"(?<![\w-])idempotency-(?P<v>[0-9<*][^\s`'\"/]*)/"),
}


def matches(written, kind):
    """the written version (a <placeholder> or * matching anything) can be
    the build's"""
    return fnmatch.fnmatchcase(expected[kind], re.sub(r"<[^>]*>", "*", written))


files = ["README.md", "test/README.md"] + sorted(glob.glob("docs/*.md"))
found = 0
for path in files:
    for lineno, line in enumerate(open(path, encoding="utf-8"), 1):
        for kind, regex in NAMES.items():
            for m in regex.finditer(line):
                found += 1
                check(matches(m.group("v"), kind),
                      f"{path}:{lineno}: {m.group(0)}: the version {expected[kind]} of the build's {kind}")
check(found > 0, f"the documentation names the build's files ({found} names found)")
done()
