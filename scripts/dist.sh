#!/usr/bin/env bash
# make dist: the PGXN release of the committed tree (see the Makefile's
# dist target for the name), checked by test/pgxn/meta_test.py.  Needs git
# (the archive is git archive of HEAD) and python3, which it installs from
# Debian's archive if they are missing.
#   scripts/dist.sh ZIP PREFIX
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh

zip=$1 prefix=$2
command -v git >/dev/null && command -v python3 >/dev/null || ensure_packages git python3
git rev-parse --verify -q HEAD >/dev/null \
    || { echo "make dist archives the committed tree: run it in a git checkout with a commit" >&2; exit 1; }
git archive --format=zip --prefix="$prefix/" -o "$zip" HEAD
python3 test/pgxn/meta_test.py "$zip" >/dev/null \
    || { python3 test/pgxn/meta_test.py "$zip" | grep '^not ok'; rm -f "$zip"; exit 1; }
