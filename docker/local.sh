#!/usr/bin/env bash
# `make up-local` / `make down-local`: the server image built on the stand-in base (no registry needed),
# run through compose with host networking on 127.0.0.1 (docker/compose.local.yaml), on the CPU.
#
#   docker/local.sh check  the repository is a folder the container can read, the ports are free (no engine
#                          needed: make up-local runs this before it starts or builds anything)
#   docker/local.sh up     start it (the images must be built: make up-local builds them), wait until it is
#                          healthy, print where to send requests and what it serves
#   docker/local.sh down   stop and remove its container
#
# Environment (docker.mk sets it): DOCKER (the CLI, docker/engine.sh's), LOCAL_MODEL_REPOSITORY (a folder
# of the host to serve, read-only at /models; empty: the image's own demo), HTTP_PORT, GRPC_PORT,
# METRICS_PORT (8000-8002), LOCAL_PROJECT (the compose project, triton-ort-local).
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-$(docker/engine.sh cli)}
project=${LOCAL_PROJECT:-triton-ort-local}
repository=${LOCAL_MODEL_REPOSITORY:-}
http=${HTTP_PORT:-8000} grpc=${GRPC_PORT:-8001} metrics=${METRICS_PORT:-8002}
files=(-f docker/compose.yaml -f docker/compose.cpu.yaml -f docker/compose.local.yaml)
[[ -z $repository ]] || files+=(-f docker/compose.models.yaml)

# The most locked memory a container can get is the engine's own hard limit (the shell's that started it).
memlock=$(ulimit -H -l)
[[ $memlock == unlimited ]] && memlock=-1 || memlock=$((memlock * 1024))
export TRITON_ORT_MODEL_REPOSITORY=$repository TRITON_ORT_MEMLOCK=$memlock \
    TRITON_ORT_HTTP_PORT=$http TRITON_ORT_GRPC_PORT=$grpc TRITON_ORT_METRICS_PORT=$metrics

compose() { "$DOCKER" compose -p "$project" "${files[@]}" "$@"; }
fail() { echo "up-local: $*" >&2; exit 2; }

# Before anything starts: the repository is a folder the container's user (uid 1000) can read, and the
# ports are free (tritonserver would exit on a port in use, after the model loads).
check() {
    if [[ -n $repository ]]; then
        [[ -d $repository ]] || fail "MODEL_REPOSITORY=$repository is not a folder"
        local unreadable
        unreadable=$(find "$repository" ! -user 1000 \( \( -type d ! -perm -o=rx \) -o \( ! -type d ! -perm -o=r \) \) \
            -print -quit)
        [[ -z $unreadable ]] \
            || fail "$unreadable is not readable by the container's user (uid 1000): chmod -R a+rX $repository"
    fi
    [[ -n $(compose ps --quiet triton 2>/dev/null) ]] && return 0
    local port
    for port in "$http" "$grpc" "$metrics"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            fail "127.0.0.1:$port is in use: stop what listens there, or pick other ports (HTTP_PORT=18000 GRPC_PORT=18001 METRICS_PORT=18002)"
        fi
    done
}

# The models the server reports (its repository index), asked from inside the container: "NAME STATE" lines.
served_models() {
    compose exec -T triton python3 -c "
import json, urllib.request
request = urllib.request.Request('http://127.0.0.1:$http/v2/repository/index', data=b'{}', method='POST')
for model in json.load(urllib.request.urlopen(request, timeout=10)):
    print(model['name'], model.get('state', '?'))"
}

case "${1:-}" in
    check)
        check
        ;;
    up)
        check
        if ! compose up --no-build --detach --wait triton; then
            echo "up-local: the server did not become healthy; the end of its log:" >&2
            compose logs --no-color --tail 25 triton >&2 || true
            echo "up-local: make down-local removes it" >&2
            exit 1
        fi
        serving="the image's own /models (the demo)"
        [[ -z $repository ]] || serving="$repository (read-only at /models)"
        container=$("$DOCKER" inspect --format '{{.Name}}' "$(compose ps --quiet triton)")
        models=$(served_models || true)
        first=$(head -n 1 <<<"$models" | cut -d' ' -f1)
        listed=$(awk 'NF { printf "%s%s (%s)", sep, $1, $2; sep = ", " }' <<<"$models")
        cat <<TEXT
up-local: tritonserver 2.41.0 on the stand-in base (CPU), serving $serving
  HTTP     http://127.0.0.1:$http      e.g. curl http://127.0.0.1:$http/v2/models/${first:-NAME}
  gRPC     127.0.0.1:$grpc
  metrics  http://127.0.0.1:$metrics/metrics
  models   ${listed:-(the repository index did not answer)}
  logs: docker logs ${container#/}    stop: make down-local
TEXT
        ;;
    down)
        if "$DOCKER" info >/dev/null 2>&1; then
            compose down --remove-orphans --timeout 60
        fi
        ;;
    *)
        echo "usage: docker/local.sh check|up|down" >&2
        exit 2
        ;;
esac
