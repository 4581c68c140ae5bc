#!/usr/bin/env bash
# make deb: postgresql-<major>-idempotency_<version>_<arch>.deb for every
# PostgreSQL major whose server headers (postgresql-server-dev-<major>) are
# installed and that debian/pgversions allows, built with Debian's own
# tooling (debhelper, pg_buildext) from a copy of the checkout in a
# temporary directory (below); the packages and build.log land in
# build/deb.
#
# The version is written once: default_version in idempotency.control.
# debian/changelog is made here from it and from that version's section of
# CHANGELOG.md (distribution UNRELEASED while its heading says so), and
# debian/control from debian/control.in by pg_buildext updatecontrol.
#
# DEB_BUILD_OPTIONS=nocheck skips the installcheck that debhelper runs in a
# throwaway cluster after the build (make test installs the package and
# runs the suites against it instead).
#
# The build runs in a temporary directory anyone may enter: that
# installcheck runs as the postgres user, which reads the built files
# there, and the checkout may be where it cannot enter (/root, a 0700 home
# or mktemp -d).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh

# what dpkg-buildpackage checks for (build-essential and debian/control.in's
# Build-Depends), the server headers, and the server its installcheck runs
build_depends=$(sed -n '/^Build-Depends:/,/^[^ ]/{/^ /{s/^ *\([^ ,(]*\).*/\1/;p}}' debian/control.in)
# shellcheck disable=SC2086
ensure_packages build-essential dpkg-dev ${build_depends//debhelper-compat/debhelper} \
    "postgresql-server-dev-$PG_MAJOR" "postgresql-$PG_MAJOR"

version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" idempotency.control)
[ -n "$version" ] || { echo "no default_version in idempotency.control" >&2; exit 1; }
grep -q "^## $version\b" CHANGELOG.md || { echo "CHANGELOG.md has no section \"## $version\"" >&2; exit 1; }

out=build/deb
rm -rf "$out"
mkdir -p "$out"
# (and its files readable, whatever the caller's umask)
umask 022
work=$(mktemp -d /tmp/idempotency-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
src=$work/idempotency-$version
mkdir "$src"
copy_checkout "$src"
# readable by postgres whatever the checkout's modes (tar also gives $src
# the mode of the checkout's top, 0700 under mktemp -d)
chmod -R a+rX "$src"

# debian/changelog: one entry for this version, its bullets from CHANGELOG.md
maintainer=$(sed -n 's/^Maintainer: *//p' debian/control.in)
distribution=unstable
grep -q "^## $version (unreleased)" CHANGELOG.md && distribution=UNRELEASED
when=$(git log -1 --format=%aD -- CHANGELOG.md idempotency.control 2>/dev/null || true)
{
    echo "idempotency ($version) $distribution; urgency=medium"
    echo
    awk -v version="$version" '
        /^## / { inside = ($2 == version); next }
        !inside || /^### / || /^$/ { if (item != "") { print item; item = "" } next }
        /^- / { if (item != "") print item; item = "  * " substr($0, 3); next }
        item != "" { sub(/^ +/, ""); item = item " " $0 }
        END { if (item != "") print item }
    ' CHANGELOG.md | fold -s -w 74 | sed -e '/^  \* /!s/^ */    /' -e 's/ *$//'
    echo
    echo " -- $maintainer  ${when:-$(date -R)}"
} >"$src/debian/changelog"

top=$PWD
cd "$src"
# every installed major (of those debian/pgversions allows)
export PG_SUPPORTED_VERSIONS=installed
pg_buildext updatecontrol
say "building $(sed -n 's/^Package: //p' debian/control | tr '\n' ' ')version $version"
# the installcheck's server is pg_virtualenv's own, on a free port, not the
# one the caller's PG* variables name (make test's cluster: pg_virtualenv
# took its port, and a client could reach that server instead)
unset PGHOST PGPORT PGUSER PGDATABASE PGOPTIONS
# and UTF-8, as the tests are, also where no locale is set (a fresh
# debootstrap: initdb under LANG=C made it SQL_ASCII)
export LC_ALL=C.UTF-8
rc=0
dpkg-buildpackage -b -us -uc -j2 >"$top/$out/build.log" 2>&1 || rc=$?
cd "$top"
if [ "$rc" -ne 0 ]; then
    tail -n 60 "$out/build.log" >&2
    echo "dpkg-buildpackage failed: $out/build.log" >&2
    exit 1
fi
# the packages, .buildinfo and .changes
find "$work" -maxdepth 1 -type f -exec cp -t "$out" {} +
ls "$out"/*.deb
