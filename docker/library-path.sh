# shellcheck shell=bash
# The LD_LIBRARY_PATH that tritonserver and the python-backend stub run with. Sourced by
# docker/entrypoint.sh and by tests/docker/test_library_path.py, so the test exercises this very code.
#
# Triton's image puts its native ONNX Runtime backend's folder first on LD_LIBRARY_PATH (build.py:
# ENV LD_LIBRARY_PATH /opt/tritonserver/backends/onnxruntime:${LD_LIBRARY_PATH}). That folder holds ORT
# 1.16.3's libonnxruntime_providers_shared.so and libonnxruntime_providers_cuda.so. onnxruntime-gpu in the
# stub dlopen()s those two by bare name, and LD_LIBRARY_PATH is searched before its RUNPATH $ORIGIN, so
# the stub would load 1.16.3's providers into a newer ORT (docs/docker.md, finding 1). The native backend
# does not need the entry: it finds its own libraries through RUNPATH $ORIGIN (checked at build time).

# triton_ort_library_path VALUE: VALUE without the entries that would shadow a pip onnxruntime's
# providers (Triton's ORT backend folder, and any folder holding libonnxruntime* files), without empty
# entries (an empty entry means the current directory) and without repeats; order otherwise kept.
triton_ort_library_path() {
    local -a entries=() kept=()
    local entry seen=":"
    IFS=: read -r -a entries <<<"${1:-}"
    for entry in "${entries[@]}"; do
        [[ -n "$entry" ]] || continue
        [[ "${entry%/}" != /opt/tritonserver/backends/onnxruntime ]] || continue
        if compgen -G "${entry%/}/libonnxruntime*.so*" >/dev/null; then
            continue
        fi
        [[ "$seen" != *":$entry:"* ]] || continue
        seen+="$entry:"
        kept+=("$entry")
    done
    local IFS=:
    printf '%s' "${kept[*]}"
}
