#!/usr/bin/env bash
# Starts tritonserver with what the python backend and the zero-copy model need. Runs as the image's CMD
# (behind NVIDIA's /opt/nvidia/nvidia_entrypoint.sh); extra arguments are passed on to tritonserver,
# e.g. `docker run ... triton-ort/server:23.12 /opt/triton-ort/entrypoint.sh --log-verbose=1`.
#
# Settings (environment):
#   TRITON_MODEL_REPOSITORY          /models          read-only model repository: a folder, or s3://,
#                                                     gs://, as:// (docs/kubernetes.md)
#   TRITON_CUDA_MEMORY_POOL_BYTES    268435456        Triton's CUDA memory pool per GPU. GPU tensors between
#                                                     server and stub travel through it; too small and the
#                                                     backend falls back to slower per-buffer CUDA IPC
#                                                     (Triton's default is 64 MiB).
#   TRITON_PINNED_MEMORY_POOL_BYTES  268435456        pinned host memory for host<->device copies
#   TRITON_PYTHON_SHM_PREFIX         (unset)          python-backend shm region prefix: only where servers share /dev/shm
#                                                     when servers share /dev/shm (--ipc=host)
#   TRITON_PYTHON_SHM_DEFAULT_BYTES  16777216         shm region each model instance starts with
#   TRITON_PYTHON_SHM_GROWTH_BYTES   16777216         and grows by (python backend's default is 1 MiB)
#   TRITON_PYTHON_STUB_TIMEOUT_S     120              stub start-up timeout (torch + ORT + CUDA EP load)
#   TRITON_HTTP_PORT, TRITON_GRPC_PORT, TRITON_METRICS_PORT   8000, 8001, 8002 (e.g. with host networking)
#   TRITON_BIND_ADDRESS              (unset: 0.0.0.0) the address all three listen on; 127.0.0.1 with host
#                                                     networking (docker/compose.local.yaml): no auth on them
#   TRITON_EXIT_TIMEOUT_S            30               on SIGTERM, how long in-flight requests may finish
#                                                     (compose's stop_grace_period must be longer)
#   TRITON_ORT_WATCHDOG              1                1: python3 -m triton_ort.probe --watch beside tritonserver:
#                                                     when a model has not answered its probe (one request of
#                                                     zeros) 3 times in a row, 10 s apart, it kills tritonserver,
#                                                     so the container exits and its restart policy starts it
#                                                     again (compose restarts no container for being unhealthy).
#                                                     0 where something else does that (Kubernetes' liveness
#                                                     probe runs the same probe: deploy/kubernetes)
#   TRITON_ORT_WATCHDOG_INTERVAL_S   10               seconds between the watchdog's probes once the models answered
#                                                     (every second before)
#   TRITON_ORT_WATCHDOG_FAILURES     3                failed probes in a row that kill
#   TRITON_ORT_MPS                   0                1: tritonserver and its stubs run as clients of a CUDA
#                                                     MPS daemon of this container's own (one GPU context
#                                                     instead of one per process: docs/benchmarks.md, MPS).
#                                                     Not where the node already shares its GPUs through MPS.
#
# LD_LIBRARY_PATH: Triton's ORT backend folder (ORT 1.16.3's provider libraries) is taken off it before
# tritonserver starts, so the stub's onnxruntime-gpu loads its own providers (docker/library-path.sh).
set -euo pipefail

# shellcheck source=docker/library-path.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/library-path.sh"
LD_LIBRARY_PATH=$(triton_ort_library_path "${LD_LIBRARY_PATH:-}")
export LD_LIBRARY_PATH

model_repository=${TRITON_MODEL_REPOSITORY:-/models}
cuda_pool=${TRITON_CUDA_MEMORY_POOL_BYTES:-268435456}
pinned_pool=${TRITON_PINNED_MEMORY_POOL_BYTES:-268435456}
shm_prefix=${TRITON_PYTHON_SHM_PREFIX:-}
shm_default=${TRITON_PYTHON_SHM_DEFAULT_BYTES:-16777216}
shm_growth=${TRITON_PYTHON_SHM_GROWTH_BYTES:-16777216}
stub_timeout=${TRITON_PYTHON_STUB_TIMEOUT_S:-120}
exit_timeout=${TRITON_EXIT_TIMEOUT_S:-30}
http_port=${TRITON_HTTP_PORT:-8000}
grpc_port=${TRITON_GRPC_PORT:-8001}
metrics_port=${TRITON_METRICS_PORT:-8002}
bind_address=${TRITON_BIND_ADDRESS:-}
admin_key=${TRITON_ADMIN_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}

# A repository on object storage (s3://, gs://, as://) is fetched by tritonserver itself.
if [[ "$model_repository" != *://* && ! -d "$model_repository" ]]; then
    echo "entrypoint: model repository $model_repository does not exist" >&2
    exit 2
fi

args=(
    --model-repository="$model_repository"
    # Models are fixed at start; nothing can be loaded or unloaded over the network.
    --model-control-mode=none
    --strict-readiness=true
    --exit-on-error=true
    # On SIGTERM: stop accepting, let in-flight requests finish for up to this long, then exit.
    --exit-timeout-secs="$exit_timeout"
    --http-port="$http_port"
    --grpc-port="$grpc_port"
    --metrics-port="$metrics_port"
    --backend-config=python,shm-default-byte-size="$shm_default"
    --backend-config=python,shm-growth-byte-size="$shm_growth"
    --backend-config=python,stub-timeout-seconds="$stub_timeout"
    # Triton 23.12 lets any client that reaches a port point the server's log and trace files at any
    # path: those APIs answer only requests carrying this header, whose value is random per start
    # (or TRITON_ADMIN_KEY). It keeps out network clients, not users of this container.
    --http-restricted-api="logging,trace:triton-ort-admin=$admin_key"
    --grpc-restricted-protocol="logging,trace:triton-ort-admin=$admin_key"
)
if [[ -n "$bind_address" ]]; then
    args+=(--http-address="$bind_address" --grpc-address="$bind_address" --metrics-address="$bind_address")
fi

# The container's /dev/shm is its own, so Triton's default region names (triton_<backend>_backend_shm_region_N,
# per backend) collide with no other server. An explicit prefix is shared by every python-based backend:
# on 23.12 the stubs of `python` and `onnxruntime_zerocopy` models then open the same regions and die
# (boost::interprocess::lock_exception). Set TRITON_PYTHON_SHM_PREFIX only for a /dev/shm shared between
# servers (--ipc=host) whose repository uses one of the two backends.
if [[ -n "$shm_prefix" ]]; then
    args+=(--backend-config=python,shm-region-prefix-name="$shm_prefix")
fi

# The GPUs this container was given (device nodes /dev/nvidia0, /dev/nvidia1, ...; CUDA numbers them
# from 0 in the container). None on a CPU-only host: then no CUDA pools, and KIND_AUTO instances
# resolve to KIND_CPU.
shopt -s nullglob
gpu_nodes=(/dev/nvidia[0-9]*)
shopt -u nullglob
gpu_count=${#gpu_nodes[@]}
if (( gpu_count > 0 )); then
    for (( gpu = 0; gpu < gpu_count; gpu++ )); do
        args+=(--cuda-memory-pool-byte-size="$gpu:$cuda_pool")
    done
    args+=(--pinned-memory-pool-byte-size="$pinned_pool")
    echo "entrypoint: $gpu_count GPU(s); CUDA memory pool $cuda_pool bytes each"
else
    echo "entrypoint: no GPU in this container; serving on the CPU"
fi

if [[ "${TRITON_ORT_MPS:-0}" == 1 ]]; then
    if (( gpu_count == 0 )); then
        echo "entrypoint: TRITON_ORT_MPS=1, but this container has no GPU (MPS shares a GPU)" >&2
        exit 2
    fi
    if ! command -v nvidia-cuda-mps-control >/dev/null; then
        echo "entrypoint: TRITON_ORT_MPS=1 needs nvidia-cuda-mps-control, which the NVIDIA container" \
            "toolkit mounts with the utility capability (NVIDIA_DRIVER_CAPABILITIES=compute,utility)" >&2
        exit 2
    fi
    if [[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]]; then
        echo "entrypoint: TRITON_ORT_MPS=1, but CUDA_MPS_PIPE_DIRECTORY is set already: this container is" \
            "a client of the node's MPS daemon (NVIDIA's device plugin); leave TRITON_ORT_MPS unset" >&2
        exit 2
    fi
    # MPS servers start lazily: a GPU that another process holds in EXCLUSIVE_PROCESS mode would let the
    # daemon answer and fail tritonserver's first CUDA call later, less clearly.
    if mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null) \
        && grep -qi exclusive <<<"$mode"; then
        echo "entrypoint: TRITON_ORT_MPS=1, but a GPU is in compute mode '$mode'; use the node's MPS" >&2
        exit 2
    fi
    # In /tmp (a tmpfs under compose and Kubernetes): the daemon's sockets, and no other daemon's.
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if ! nvidia-cuda-mps-control -d; then
        echo "entrypoint: the CUDA MPS daemon did not start (its log: $CUDA_MPS_LOG_DIRECTORY)" >&2
        exit 2
    fi
    # -d returns once it has forked: wait until the daemon answers, so that tritonserver's first CUDA
    # call finds it (a CUDA process that finds no daemon runs without MPS, silently).
    answered=
    deadline=$((SECONDS + 10))
    while (( SECONDS < deadline )); do
        if echo get_server_list | timeout 2 nvidia-cuda-mps-control >/dev/null 2>&1; then
            answered=1
            break
        fi
        sleep 0.1
    done
    if [[ -z "$answered" ]]; then
        echo "entrypoint: the CUDA MPS daemon did not answer within 10 s (its log: $CUDA_MPS_LOG_DIRECTORY)" >&2
        exit 2
    fi
    echo "entrypoint: CUDA MPS daemon started (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
fi

# The watchdog (docs/reliability.md, "A safety net"): a server whose stub died can stay live and ready
# while it answers its model no more (2.47+ restarts no stub; 2.41 can hang restarting one). Started
# before the exec with this shell's pid, which tritonserver keeps; it counts only after a first probe
# passes, so the models' load is never a failure.
if [[ "${TRITON_ORT_WATCHDOG:-1}" == 1 ]]; then
    python3 -m triton_ort.probe --url "http://${bind_address:-127.0.0.1}:$http_port" --watch $$ \
        --interval "${TRITON_ORT_WATCHDOG_INTERVAL_S:-10}" --failures "${TRITON_ORT_WATCHDOG_FAILURES:-3}" \
        --timeout "${TRITON_ORT_WATCHDOG_INTERVAL_S:-10}" &
fi

exec tritonserver "${args[@]}" "$@"
