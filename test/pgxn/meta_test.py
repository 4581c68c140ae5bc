#!/usr/bin/env python3
"""META.json against the PGXN Meta Spec 1.0.0 (https://pgxn.org/spec/):
every required field and the type of every field present, and the
project's own rule for versions: PGXN needs semantic versions, the
control file's default_version has two parts, so META.json's version and
the version of each extension it provides are default_version with ".0"
appended (1.2 -> 1.2.0).  With an archive (make dist) also what PGXN
Manager accepts: every entry under idempotency-<version>/, META.json at
that folder's root, equal to the tree's.
Prints "ok N - ..." / "not ok N - ..." per check, then "N passed, N failed".

Usage: meta_test.py [ARCHIVE.zip]   (from the top of the source tree)
"""
import json
import os
import re
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from taplines import check, done  # noqa: E402



# SemVer 1.0.0, as the spec requires: three integers, an optional
# pre-release made of ASCII letters, digits and hyphens
SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-?[A-Za-z][0-9A-Za-z-]*)?$")
# the spec's license strings
LICENSES = {
    "agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd",
    "freebsd", "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1",
    "lgpl_3_0", "mit", "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5",
    "postgresql", "qpl_1_0", "ssleay", "sun", "zlib", "open_source",
    "restricted", "unrestricted", "unknown",
}
PHASES = {"configure", "build", "test", "runtime", "develop"}
RELATIONS = {"requires", "recommends", "suggests", "conflicts"}


def is_str(v):
    return isinstance(v, str) and v.strip() != ""


def is_str_list(v):
    return isinstance(v, list) and len(v) > 0 and all(is_str(x) for x in v)


def is_version_range(v):
    """0 (any version), a SemVer, or comparisons of SemVers joined by commas"""
    if v == 0 or v == "0":
        return True
    return isinstance(v, str) and all(
        SEMVER.match(re.sub(r"^(==|!=|>=|<=|>|<)?\s*", "", part.strip()))
        for part in v.split(","))


with open("META.json") as f:
    meta = json.load(f)
control = open("idempotency.control").read()
extension = "idempotency"
default_version = re.search(r"^default_version\s*=\s*'([^']*)'", control, re.M).group(1)
semver = default_version + ".0" * (2 - default_version.count("."))

# required fields, with their types
check(is_str(meta.get("name")) and re.match(r"^[^\s/\\]{2,}$", meta["name"]) is not None,
      "name: a string of two or more characters, no white space, slash or backslash")
check(is_str(meta.get("abstract")), "abstract: a non-empty string")
check(is_str(meta.get("maintainer")) or is_str_list(meta.get("maintainer")),
      "maintainer: a string or a list of strings")
lic = meta.get("license")
check((isinstance(lic, str) and lic in LICENSES)
      or (isinstance(lic, list) and lic and all(x in LICENSES for x in lic))
      or (isinstance(lic, dict) and lic and all(is_str(k) and is_str(u) for k, u in lic.items())),
      "license: one of the spec's license strings, a list of them, or {name: URL}")
spec = meta.get("meta-spec")
check(isinstance(spec, dict) and spec.get("version") == "1.0.0"
      and (spec.get("url") is None or is_str(spec["url"])),
      "meta-spec: {version: 1.0.0, url}")
check(is_str(meta.get("version")) and SEMVER.match(meta["version"]) is not None,
      "version: a semantic version")
provides = meta.get("provides")
check(isinstance(provides, dict) and len(provides) > 0, "provides: an object of extensions")
for name, ext in (provides or {}).items():
    check(isinstance(ext, dict) and is_str(ext.get("file")) and is_str(ext.get("version"))
          and SEMVER.match(ext["version"]) is not None,
          f"provides.{name}: file and a semantic version")
    for key in ("file", "docfile"):
        if isinstance(ext, dict) and key in ext:
            try:
                open(ext[key]).close()
                found = True
            except OSError:
                found = False
            check(found, f"provides.{name}.{key} {ext[key]} is in the tree")
    check(set(ext) <= {"file", "version", "abstract", "docfile"},
          f"provides.{name}: only the spec's keys")

# optional fields, when present, with their types
if "description" in meta:
    check(is_str(meta["description"]), "description: a string")
if "tags" in meta:
    check(is_str_list(meta["tags"]) and all(len(t) < 256 for t in meta["tags"]),
          "tags: a list of strings shorter than 256 characters")
if "release_status" in meta:
    check(meta["release_status"] in ("stable", "testing", "unstable"),
          "release_status: stable, testing or unstable")
if "resources" in meta:
    check(isinstance(meta["resources"], dict), "resources: an object")
if "prereqs" in meta:
    pre = meta["prereqs"]
    check(isinstance(pre, dict) and set(pre) <= PHASES
          and all(isinstance(p, dict) and set(p) <= RELATIONS for p in pre.values())
          and all(isinstance(r, dict) and all(is_version_range(v) for v in r.values())
                  for p in pre.values() for r in p.values()),
          "prereqs: phase -> relation -> {name: version or 0}")
known = {"name", "abstract", "maintainer", "license", "meta-spec", "version", "provides",
         "description", "tags", "release_status", "resources", "prereqs", "generated_by",
         "no_index"}
check(all(k in known or k.lower().startswith("x_") for k in meta),
      "no keys outside the spec (custom ones start with x_)")

# the project's versions, written once in the control file
check(meta.get("name") == extension and extension in (provides or {}),
      f"name and provides are the control file's extension, {extension}")
check(meta.get("version") == semver,
      f"version {meta.get('version')} is default_version {default_version} as SemVer ({semver})")
check(all(isinstance(e, dict) and e.get("version") == semver for e in (provides or {}).values()),
      f"every provided version is {semver}")

# the archive PGXN Manager accepts
if len(sys.argv) > 1:
    top = f"{extension}-{semver}/"
    with zipfile.ZipFile(sys.argv[1]) as z:
        names = z.namelist()
        check(names and all(n.startswith(top) for n in names),
              f"every entry of {sys.argv[1]} is under {top}")
        check(top + "META.json" in names and json.loads(z.read(top + "META.json")) == meta,
              f"{top}META.json is the tree's META.json")
        check(top + "idempotency.control" in names and top + "Makefile" in names,
              "the archive has the control file and the Makefile")

done()
