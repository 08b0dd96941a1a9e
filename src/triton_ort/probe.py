"""Does the server still answer its models? The probe behind the image's healthcheck, Kubernetes' liveness
probe and the container's watchdog (docs/reliability.md, "A safety net").

`/v2/health/live` and `/v2/health/ready` say only that tritonserver runs and loaded its models. When a
python-backend stub dies, Triton 23.12 (2.41) restarts it, and can crash or hang doing so; 24.06 (2.47) and
later restart nothing and refuse every request of that instance until the model is reloaded, while the
server stays live and ready. So this probe sends every ready model one small request (zeros, batch 1, every
open axis 1) and tells a model that answers, with outputs or with its own complaint about the zeros, from
one that does not answer within the timeout or whose stub the python backend reports dead.

    python3 -m triton_ort.probe                     # every ready model, http://127.0.0.1:8000, 5 s each
    python3 -m triton_ort.probe --watch PID         # the watchdog: kill PID after 3 failed probes in a row

Standard library only: it runs in the server image's python3 at every healthcheck, beside no client library.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

# The python backend's words for an instance whose stub is gone (python_be.cc and stub_launcher.cc, r23.12
# and r24.10): "Stub process is not healthy." / "Stub process '<instance>' is not healthy."
DEAD_STUB_WORDS = ("stub process", "not healthy")

# How often the watchdog probes while the models load (until a first probe passes).
ARMING_INTERVAL_S = 1.0

# Bytes per element of each Triton type; a BYTES element is sent as an empty string (its 4-byte length).
ELEMENT_BYTES = {
    "BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2,
    "UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8, "BYTES": 4,
}  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """One model's answer to the probe: `answered` is False only for a model that is not served any more."""

    model: str
    answered: bool
    detail: str


class ProbeError(Exception):
    """The server itself could not be asked (not listening, no repository index)."""


def _request(
    url: str, timeout_s: float, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One HTTP call: (status, body). Transport failures raise (URLError, TimeoutError, OSError)."""
    request = urllib.request.Request(
        url, data=body, headers=headers or {}, method="POST" if body is not None else "GET"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def ready_models(base_url: str, timeout_s: float) -> list[str]:
    """The models the repository index lists as READY (every version counted once)."""
    try:
        status, body = _request(
            f"{base_url}/v2/repository/index", timeout_s, json.dumps({"ready": True}).encode()
        )
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise ProbeError(f"{base_url} did not answer the repository index: {_reason(error)}") from error
    if status != 200:
        raise ProbeError(f"{base_url}/v2/repository/index answered HTTP {status}: {_error_text(body)}")
    return sorted({entry["name"] for entry in json.loads(body) if entry.get("state", "READY") == "READY"})


def require_ready(base_url: str, timeout_s: float) -> None:
    """/v2/health/ready: every model loaded (--strict-readiness), and not draining after SIGTERM."""
    try:
        status, _ = _request(f"{base_url}/v2/health/ready", timeout_s)
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise ProbeError(f"{base_url}/v2/health/ready: {_reason(error, timeout_s)}") from error
    if status != 200:
        raise ProbeError(f"{base_url}/v2/health/ready answered HTTP {status}: not ready")


def zeros_request(config: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """A request of zeros for every required input: batch 1 where the model batches, every open axis 1.

    Sent in the binary extension, which every type takes (JSON has no FP16 or BF16), and asking for binary
    outputs, so a large output is not printed as JSON.
    """
    batched = int(config.get("max_batch_size", 0)) > 0
    inputs, payload = [], b""
    for spec in config.get("input", []):
        if spec.get("optional"):
            continue
        dims = [1 if int(d) < 0 else int(d) for d in spec.get("dims", [])]
        shape = [1, *dims] if batched else dims
        data_type = spec["data_type"].removeprefix("TYPE_")
        if data_type == "STRING":  # the model config's name for BYTES
            data_type = "BYTES"
        size = math.prod(shape) * ELEMENT_BYTES[data_type]
        inputs.append(
            {
                "name": spec["name"],
                "shape": shape,
                "datatype": data_type,
                "parameters": {"binary_data_size": size},
            }
        )
        payload += bytes(size)
    header = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode()
    headers = {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }
    return header + payload, headers


def probe_model(base_url: str, model: str, timeout_s: float) -> Verdict:
    """Sends `model` its zeros; answered unless the request times out, cannot connect, or the stub is dead."""
    try:
        status, body = _request(f"{base_url}/v2/models/{model}/config", timeout_s)
        if status != 200:
            return Verdict(model, False, f"its config: HTTP {status}: {_error_text(body)}")
        payload, headers = zeros_request(json.loads(body))
        status, body = _request(f"{base_url}/v2/models/{model}/infer", timeout_s, payload, headers)
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        return Verdict(model, False, _reason(error, timeout_s))
    if status == 200:
        return Verdict(model, True, "answered")
    text = _error_text(body)
    if all(word in text.lower() for word in DEAD_STUB_WORDS):
        return Verdict(model, False, f"its stub is dead: {text}")
    # The model's own complaint (zeros out of its range, a sequence without its start, ...): it is served.
    return Verdict(model, True, f"answered with its own error: {text}")


def probe(base_url: str, models: Sequence[str], timeout_s: float) -> list[Verdict]:
    """Every named model, or every ready one when none is named (none ready is a failure)."""
    models = list(models) or ready_models(base_url, timeout_s)
    if not models:
        raise ProbeError(f"{base_url} has no ready model")
    # At once, so that many models cost one timeout, not one each
    with ThreadPoolExecutor(min(len(models), 16)) as pool:
        return list(pool.map(lambda model: probe_model(base_url, model, timeout_s), models))


def watch(
    base_url: str, models: Sequence[str], timeout_s: float, pid: int, interval_s: float, failures: int
) -> int:
    """Kills `pid` (tritonserver) after `failures` failed probes in a row, so a restart policy brings it back.

    Counting starts once a probe has passed: a server still loading its models is not dead. Until then it
    probes every second, not every interval, so that a server that hangs soon after its load is counted
    too; it says when it starts counting. Returns when `pid` is gone (the exit code is 0) or after killing
    it (1).
    """
    passed_once, failed_in_a_row = False, 0
    while _process_alive(pid):
        try:
            verdicts = probe(base_url, models, timeout_s)
            dead = [v for v in verdicts if not v.answered]
        except ProbeError as error:
            dead = [Verdict("(server)", False, str(error))]
        if not dead:
            if not passed_once:
                print(
                    f"probe: watching tritonserver (pid {pid}): every model answered; {failures} failed "
                    f"probes in a row, {interval_s:g} s apart, end it",
                    file=sys.stderr,
                    flush=True,
                )
            passed_once, failed_in_a_row = True, 0
        elif passed_once:
            failed_in_a_row += 1
            if failed_in_a_row >= failures:
                print(
                    f"probe: {dead[0].model} did not answer {failures} probes in a row ({dead[0].detail}); "
                    f"killing tritonserver (pid {pid}) so that the restart policy starts it again",
                    file=sys.stderr,
                    flush=True,
                )
                _kill(pid)
                return 1
        time.sleep(interval_s if passed_once else min(interval_s, ARMING_INTERVAL_S))
    return 0


def _kill(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL: a server with a hung stub may never finish its graceful exit."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not _process_alive(pid):
                return
            time.sleep(0.2)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our child, exited, not reaped yet) is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _error_text(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", body.decode(errors="replace")))
    except (ValueError, AttributeError):
        return body.decode(errors="replace")[:200]


def _reason(error: BaseException, timeout_s: float | None = None) -> str:
    cause = getattr(error, "reason", error)
    if isinstance(cause, TimeoutError) or isinstance(error, TimeoutError):
        return f"no answer within {timeout_s:g} s" if timeout_s is not None else "timed out"
    return f"{type(cause).__name__}: {cause}"


def default_url() -> str:
    """TRITON_ORT_PROBE_URL, else the port and address docker/entrypoint.sh gave tritonserver."""
    if os.environ.get("TRITON_ORT_PROBE_URL"):
        return os.environ["TRITON_ORT_PROBE_URL"]
    address = os.environ.get("TRITON_BIND_ADDRESS") or "127.0.0.1"
    address = "127.0.0.1" if address == "0.0.0.0" else address
    return f"http://{address}:{os.environ.get('TRITON_HTTP_PORT') or 8000}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m triton_ort.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=default_url(),
        help="the server's HTTP endpoint (default %(default)s: env TRITON_ORT_PROBE_URL, else "
        "TRITON_BIND_ADDRESS and TRITON_HTTP_PORT as docker/entrypoint.sh reads them)",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="probe this model (repeatable; env TRITON_ORT_PROBE_MODELS, comma-separated); "
        "default: every ready model",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds each call may take (default 5)")
    parser.add_argument(
        "--watch",
        type=int,
        metavar="PID",
        help="keep probing; kill PID (tritonserver) after --failures failed probes in a row",
    )
    parser.add_argument("--interval", type=float, default=10.0, help="--watch: seconds between probes (10)")
    parser.add_argument(
        "--failures", type=int, default=3, help="--watch: failed probes in a row that kill (3)"
    )
    parser.add_argument(
        "--require-ready",
        action="store_true",
        help="fail unless /v2/health/ready says yes too (a healthcheck: all models loaded; not liveness, "
        "which a draining server must pass)",
    )
    args = parser.parse_args(argv)
    base_url = args.url if "://" in args.url else f"http://{args.url}"
    models = args.model or [m for m in os.environ.get("TRITON_ORT_PROBE_MODELS", "").split(",") if m]
    if args.watch is not None:
        return watch(base_url, models, args.timeout, args.watch, args.interval, args.failures)
    try:
        if args.require_ready:
            require_ready(base_url, args.timeout)
        verdicts = probe(base_url, models, args.timeout)
    except ProbeError as error:
        print(f"probe: {error}", file=sys.stderr)
        return 1
    for verdict in verdicts:
        print(
            f"probe: {verdict.model}: {verdict.detail}", file=sys.stdout if verdict.answered else sys.stderr
        )
    return 0 if all(v.answered for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
