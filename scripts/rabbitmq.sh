# scripts/rabbitmq.sh: a private RabbitMQ for the outbox suites (Debian's
# rabbitmq-server), run as its own OS user on loopback ports with its own
# data, log and Erlang cookie under DIR.  Sourced by test.sh; the suites
# that restart the broker run it as a command:
#   bash scripts/rabbitmq.sh start|stop DIR AMQP_PORT
# The AMQP port is AMQP_PORT, the Erlang distribution port AMQP_PORT + 1,
# epmd AMQP_PORT + 2 (IDEM_RABBITMQ_PORT, default 16436).

RABBITMQ_OS_USER=rabbitmq
RABBITMQ_BIN=/usr/lib/rabbitmq/bin    # Debian's wrappers in /usr/sbin reset HOME

rabbitmq_env() {
    local dir=$1 port=$2
    echo HOME="$dir" RABBITMQ_NODENAME="idem$port@localhost" \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$port" \
        RABBITMQ_DIST_PORT=$((port + 1)) ERL_EPMD_PORT=$((port + 2)) ERL_EPMD_ADDRESS=127.0.0.1 \
        RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
        RABBITMQ_CONFIG_FILE="$dir/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
        RABBITMQ_PID_FILE="$dir/rabbitmq.pid"
}

rabbitmq_as_user() {
    local dir=$1 port=$2; shift 2
    # shellcheck disable=SC2046
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$RABBITMQ_OS_USER" -- env $(rabbitmq_env "$dir" "$port") "$@"
    else
        env $(rabbitmq_env "$dir" "$port") "$@"
    fi
}

# rabbitmq_start DIR PORT: start (DIR is created on first start, kept by a
# restart: durable queues and persistent messages survive) and wait until
# it accepts AMQP connections, up to 3 minutes
rabbitmq_start() {
    local dir=$1 port=$2
    if [ ! -d "$dir" ]; then
        mkdir -p "$dir/log"
        echo '[].' >"$dir/enabled_plugins"
        echo 'loopback_users = none' >"$dir/rabbitmq.conf"
        [ "$(id -u)" -eq 0 ] && chown -R "$RABBITMQ_OS_USER" "$dir"
    fi
    rabbitmq_as_user "$dir" "$port" "$RABBITMQ_BIN/rabbitmq-server" -detached >/dev/null 2>&1
    # the AMQP listener opens last in the boot (rabbitmqctl wait needs an
    # Erlang CLI of its own, seconds per call)
    local i
    for ((i = 0; i < 1800; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            # epmd, which the broker started as a daemon, by its port: for
            # the run's register (install_lock.sh) and rabbitmq_stop
            ss -Hltnp "sport = :$((port + 2))" 2>/dev/null \
                | sed -n 's/.*"epmd",pid=\([0-9]*\).*/\1/p' | head -n 1 >"$dir/epmd.pid"
            return 0
        fi
        sleep 0.1
    done
    echo "RabbitMQ did not start; its log:" >&2
    tail -n 30 "$dir"/log/*.log >&2
    return 1
}

# rabbitmq_stop DIR PORT: stop the broker (SIGTERM: a clean shutdown), wait
# for it, then its epmd (a restart starts another)
rabbitmq_stop() {
    local dir=$1 port=$2 pid i
    pid=$(cat "$dir/rabbitmq.pid" 2>/dev/null) || return 0
    if kill "$pid" 2>/dev/null; then
        for ((i = 0; i < 600; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null
    fi
    rm -f "$dir/rabbitmq.pid"
    pid=$(cat "$dir/epmd.pid" 2>/dev/null)
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = epmd ] && kill "$pid" 2>/dev/null
    rm -f "$dir/epmd.pid"
    return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "$1" in
        start) rabbitmq_start "$2" "$3" ;;
        stop) rabbitmq_stop "$2" "$3" ;;
        *) echo "usage: $0 start|stop DIR AMQP_PORT" >&2; exit 2 ;;
    esac
fi
