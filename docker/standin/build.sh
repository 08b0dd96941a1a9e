#!/usr/bin/env bash
# Builds the stand-in base for TRITON_RELEASE (docker/standin/Dockerfile; 23.12 by default, or 24.10) with
# no registry: a Debian 12 minbase rootfs from debootstrap, imported as $ROOTFS_IMAGE, then the Dockerfile
# on it with the tritonserver of the nvidia-pytriton wheel that carries that release; and the python:3.11
# stand-in. Needs a running engine (docker/engine.sh runs this from `make docker-standin`, with
# ENGINE_STANDIN=1 so that it installs debootstrap). Skips what already exists: the rootfs image, and each
# stand-in while it carries the hash of what it is made from (this folder, the wheels' versions) as a label.
set -euo pipefail
cd "$(dirname "$0")/../.."

DOCKER=${DOCKER:-/usr/bin/docker}
TRITON_RELEASE=${TRITON_RELEASE:-23.12}
case $TRITON_RELEASE in
    # the nvidia-pytriton wheel whose tritonserver is that release's (2.41.0; 2.51.0)
    23.12) PYTRITON=nvidia-pytriton==0.5.0 ;;
    24.10) PYTRITON=nvidia-pytriton==0.7.0 ;;
    *) echo "standin: TRITON_RELEASE $TRITON_RELEASE has no stand-in (23.12 or 24.10)" >&2; exit 2 ;;
esac
ROOTFS_IMAGE=${ROOTFS_IMAGE:-triton-ort/bookworm:minbase}
STANDIN_IMAGE=${STANDIN_IMAGE:-triton-ort/tritonserver-standin:$TRITON_RELEASE}
PYTHON_IMAGE=${PYTHON_IMAGE:-triton-ort/python-standin:3.11-slim-bookworm}
OTHER_ORT=onnxruntime==1.16.3
# The CPU torch for the stand-in (requirements-cpu.txt at the root explains: this machine has it locally).
TORCH_WHEEL=${TORCH_WHEEL:-$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*.whl 2>/dev/null | head -n 1)}
MIRROR=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

LABEL=triton-ort.standin.inputs
hash_of() { { cat docker/standin/* /etc/ssl/certs/ca-certificates.crt; echo "$ROOTFS_IMAGE $*"; } | sha256sum | cut -c1-16; }
standin_inputs=$(hash_of "$PYTRITON $OTHER_ORT ${TORCH_WHEEL##*/} $MIRROR")
python_inputs=$(hash_of "$MIRROR")
current() { [[ $("$DOCKER" image inspect --format "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null) == "$2" ]]; }
if current "$STANDIN_IMAGE" "$standin_inputs" && current "$PYTHON_IMAGE" "$python_inputs"; then
    echo "standin: $STANDIN_IMAGE and $PYTHON_IMAGE are up to date"
    exit 0
fi

work=$(mktemp -d /var/tmp/triton-ort-standin.XXXXXX)
trap 'rm -rf "$work"' EXIT

if ! "$DOCKER" image inspect "$ROOTFS_IMAGE" >/dev/null 2>&1; then
    if ! command -v debootstrap >/dev/null; then
        echo "standin: no debootstrap (make docker-standin installs it: ENGINE_STANDIN=1 docker/engine.sh ...)" >&2
        exit 1
    fi
    echo "standin: debootstrap bookworm (minbase) from $MIRROR"
    debootstrap --variant=minbase bookworm "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" \
        || { tail -n 5 "$work/debootstrap.log"; exit 1; }
    tar -C "$work/rootfs" -c . | "$DOCKER" import - "$ROOTFS_IMAGE" >/dev/null
    rm -rf "$work/rootfs"
fi

if [[ -z $TORCH_WHEEL ]]; then
    echo "standin: no CPU torch wheel (TORCH_WHEEL=/path/to/torch-2.13.0+cpu-cp311-...whl)" >&2
    exit 1
fi
ctx=$work/context
mkdir -p "$ctx/wheels" "$ctx/onnxruntime" "$work/dl"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 -d "$work/dl" "$PYTRITON" "$OTHER_ORT"
python3 -m zipfile -e "$work"/dl/nvidia_pytriton-*.whl "$work/pytriton"
mv "$work/pytriton/pytriton/tritonserver" "$ctx/tritonserver"
mv "$work/pytriton/nvidia_pytriton.libs" "$ctx/tritonserver/lib"
python3 -m zipfile -e "$work"/dl/onnxruntime-*.whl "$work/ort"
cp "$work"/ort/onnxruntime/capi/libonnxruntime_providers_shared.so "$ctx/onnxruntime/"
cp "$TORCH_WHEEL" "$ctx/wheels/"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/"

current "$STANDIN_IMAGE" "$standin_inputs" || DOCKER_BUILDKIT=1 "$DOCKER" build --network host \
    --build-arg ROOTFS_IMAGE="$ROOTFS_IMAGE" --label "$LABEL=$standin_inputs" \
    -f docker/standin/Dockerfile -t "$STANDIN_IMAGE" "$ctx"
current "$PYTHON_IMAGE" "$python_inputs" || DOCKER_BUILDKIT=1 "$DOCKER" build --network host \
    --build-arg ROOTFS_IMAGE="$ROOTFS_IMAGE" --label "$LABEL=$python_inputs" \
    -f docker/standin/python.Dockerfile -t "$PYTHON_IMAGE" "$ctx"
