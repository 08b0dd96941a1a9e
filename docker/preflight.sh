#!/usr/bin/env bash
# Before `make up`, `make docker-build` and `make smoke-docker`: can this machine build and run the images
# the way compose does? Silent when it can; otherwise ONE line on stderr with every cause found and the path
# that works without a registry, and exit 1, in seconds instead of a build that fails minutes later.
#
#   docker/preflight.sh TARGET DOCKERFILE...   the CLI is $DOCKER_CLI (default: docker, as compose runs it)
#
# What it checks, in that order, all of it: a docker CLI; its Compose v2 plugin; an engine that answers;
# BuildKit for compose (the buildx plugin: without it compose builds with the classic builder, which has
# no COPY --chmod and no additional_contexts); and every base image the Dockerfiles name (their FROM lines,
# ARG defaults resolved): present in the engine, or else its registry answers for exactly that manifest.
# The registry probe is `docker manifest inspect` under a 10 s limit: it fetches the one manifest the build
# would pull first (no layers), through the CLI's own proxy settings and credentials, so a refused name, a
# missing tag or a login that is needed fail here too, and a network that drops packets cannot hang it.
# A base already in the engine (pulled earlier, or `docker load`ed on a machine without a registry) is
# used without asking any registry.
set -uo pipefail

target=$1
shift
cli=${DOCKER_CLI:-docker}
probe_s=${DOCKER_PREFLIGHT_TIMEOUT_S:-10}
causes=()

# The base images of the Dockerfiles: FROM's image, with ${ARG} from the ARG default; not the images this
# project builds itself (triton-ort/...), not an earlier stage's name.
bases() {
    awk '
        toupper($1) == "ARG" { split($2, kv, "="); if (kv[2] != "") arg[kv[1]] = kv[2] }
        toupper($1) == "FROM" {
            image = $2
            if (match(image, /^\$\{?[A-Za-z_]+\}?$/)) { name = image; gsub(/[${}]/, "", name); image = arg[name] }
            if (toupper($3) == "AS") stage[$4] = 1
            if (image != "" && image != "scratch" && !(image in stage) && image !~ /^triton-ort\//) print image
        }' "$@" | sort -u
}

# A probe's error, short: the network's own reason where there is one.
reason() {
    local text
    text=$(tr '\n' ' ' <<<"$1" | sed -e 's/  */ /g' -e 's/ *$//')
    case $text in
        *"dial tcp"*) text=${text##*dial tcp: } ;;
        *"error pinging"*) text=${text##*error pinging } ;;
    esac
    echo "${text:0:160}"
}

if ! path=$(command -v "$cli"); then
    causes+=("no docker CLI ($cli) on PATH")
else
    "$cli" compose version >/dev/null 2>&1 \
        || causes+=("no Docker Compose v2 plugin ('$path compose' is not a command)")
    engine=
    if timeout "$probe_s" "$cli" info >/dev/null 2>&1; then
        engine=1
    else
        causes+=("no Docker engine answers $path")
    fi
    "$cli" buildx version >/dev/null 2>&1 \
        || causes+=("no buildx plugin (compose would build with the classic builder, which cannot build docker/Dockerfile: COPY --chmod)")
    for base in $(bases "$@"); do
        [[ -n $engine ]] && "$cli" image inspect "$base" >/dev/null 2>&1 && continue
        if ! out=$(timeout "$probe_s" "$cli" manifest inspect "$base" 2>&1 >/dev/null); then
            [[ -n $out ]] || out="no answer within $probe_s s"
            causes+=("base image $base is not in the engine and cannot be pulled ($(reason "$out"))")
        fi
    done
fi

if ((${#causes[@]})); then
    joined=$(printf '%s; ' "${causes[@]}")
    echo "make $target: cannot build here: ${joined%; }. Without a registry: make up-local [MODEL_REPOSITORY=DIR] (the stand-in base, CPU; docs/docker.md#no-registry-make-up-local)" >&2
    exit 1
fi
