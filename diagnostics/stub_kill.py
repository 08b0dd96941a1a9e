"""How often does tritonserver die when a stub is killed under load: a plain python model against ours.

    python -m diagnostics.stub_kill --trials 6 --json results/stub-kill.json

Each trial starts a server of its own with one model (one CPU instance, so that both models meet the same
python backend path), sends from 8 client threads (HTTP and gRPC), SIGKILLs the model's stub after 1.5 s,
keeps sending for `--after-s` seconds and records what the server did: whether it restarted the stub (2.41
does; from 2.47 on the python backend restarts none), whether a request was answered after the kill, and
whether tritonserver itself died (its exit signal). The models:

  plain             a `backend: "python"` model.py of a few numpy lines, the demo's tensors, no custom metrics
  plain_slow_load   the same, with a 4 s sleep in initialize (about our load time on CPU): does a longer
                    restart make the crash likelier?
  plain_imports     the plain model with torch and onnxruntime imported in initialize (what the libraries'
                    import alone does: their size, their threads)
  plain_ort         the tutorial model.py: an ONNX Runtime session on the demo's model.onnx made in
                    initialize and run on numpy in execute (ORT's threads and allocations, no triton_ort)
  plain_ort_gpu_inputs   plain_ort with the demo's FORCE_CPU_ONLY_INPUT_TENSORS "no" (as ours has it)
  plain_ort_dlpack  plain_ort reading its input and returning its output through DLPack and torch, as ours
                    does (a torch tensor handed to pb_utils.Tensor.from_dlpack)
  ours              the demo served by this project's model.py (ONNX Runtime, custom metrics on: parameter
                    custom_metrics true, which on 2.41 the default leaves off)
  ours_no_metrics   the same on a server started with --allow-metrics=false (the model serves without its
                    custom metrics, but still asks the server for them): do the metrics' messages from the
                    stub make it likelier?
  ours_shipped      the demo as shipped (custom_metrics at its default, auto: off on 2.41, and the one log
                    line at the first execute that says so, through the same queue as the metrics)
  ours_custom_metrics_off   ours with the parameter custom_metrics false: no metric message at all
  ours_quiet        the same, and the library's log at WARNING (TRITON_ORT_LOG_LEVEL): no log message at
                    load either (logs reach the server through the same queue as the metrics)
  ours_fast_load    ours_custom_metrics_off without the warm-up run at load (parameter warmup false): does
                    a shorter restart make it less likely?
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from client.bench_common import ROOT, host_environment, write_report
from triton_ort.harness.processes import alive, stub_processes
from triton_ort.harness.releases import server_release
from triton_ort.harness.repository import pin_one_instance, read_config, write_config
from triton_ort.harness.server import LocalTritonServer, exit_on_termination
from triton_ort.harness.transport import tritonclient_infer

INPUT, OUTPUT = "np_script_embeddings", "np_logits"
MODELS = (
    "plain",
    "plain_slow_load",
    "plain_imports",
    "plain_ort",
    "plain_ort_gpu_inputs",
    "plain_ort_dlpack",
    "ours",
    "ours_no_metrics",
    "ours_shipped",
    "ours_custom_metrics_off",
    "ours_quiet",
    "ours_fast_load",
)
PLAIN_MODEL_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils

INITIALIZE_S = {initialize_s}
VARIANT = "{variant}"


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(INITIALIZE_S)
        self.session = None
        if VARIANT.startswith(("plain_imports", "plain_ort")):
            import onnxruntime
            import torch  # noqa: F401
        if VARIANT.startswith("plain_ort"):
            import os
            onnx = os.path.join(os.path.dirname(__file__), "model.onnx")
            self.session = onnxruntime.InferenceSession(onnx, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "np_script_embeddings")
            if VARIANT == "plain_ort_dlpack":
                import torch

                x = torch.from_dlpack(tensor.to_dlpack())
                (logits,) = self.session.run(["np_logits"], {"np_script_embeddings": x.numpy()})
                output = pb_utils.Tensor.from_dlpack("np_logits", torch.from_numpy(logits))
                responses.append(pb_utils.InferenceResponse([output]))
                continue
            x = tensor.as_numpy()
            if self.session is not None:
                (logits,) = self.session.run(["np_logits"], {"np_script_embeddings": x})
            else:
                logits = np.stack([x.sum(axis=1), x.mean(axis=1)], axis=1).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("np_logits", logits)]))
        return responses
"""


def _repository(model: str, root: Path) -> Path:
    """The demo, one CPU instance: served by our model.py (`ours`) or by the numpy model.py (`plain`)."""
    folder = root / "demo"
    shutil.copytree(ROOT / "model_repository" / "demo", folder)
    pin_one_instance(folder)
    config = read_config(folder)
    for group in config.instance_group:
        group.kind = group.KIND_CPU
    if model in ("ours", "ours_no_metrics"):  # on 2.41 the default (auto) would leave them off
        config.parameters["custom_metrics"].string_value = "true"
    if model in ("ours_custom_metrics_off", "ours_quiet", "ours_fast_load"):
        config.parameters["custom_metrics"].string_value = "false"
    if model.startswith("plain"):
        if not model.startswith("plain_ort"):
            (folder / "1" / "model.onnx").unlink(missing_ok=True)
        initialize_s = 4.0 if model == "plain_slow_load" else 0.0
        model_py = PLAIN_MODEL_PY.replace("{initialize_s}", str(initialize_s)).replace("{variant}", model)
        (folder / "1" / "model.py").write_text(model_py)
        config.ClearField("parameters")
        config.ClearField("optimization")
        if model == "plain_ort_gpu_inputs":
            config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value = "no"
        config.backend = "python"
    write_config(folder, config)
    return root


def _send(
    server: LocalTritonServer, index: int, stop: threading.Event, outcomes: list[tuple[float, str]]
) -> None:
    x = np.random.default_rng(index).standard_normal((2, 2010)).astype(np.float32)
    protocol = "grpc" if index % 2 else "http"
    url = server.grpc_url if protocol == "grpc" else server.http_url
    while not stop.is_set():
        answer = tritonclient_infer(protocol, url, "demo", [(INPUT, x)], [OUTPUT], timeout_s=10)
        outcomes.append((time.monotonic(), "ok" if answer.ok else answer.status))
        if answer.status == "NO_ANSWER":
            time.sleep(0.05)


def trial(model: str, after_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="stub-kill-") as scratch:
        repository = _repository(model, Path(scratch) / "repository")
        no_metrics = ["--allow-metrics=false"] if model == "ours_no_metrics" else []
        quiet = {"TRITON_ORT_LOG_LEVEL": "WARNING"} if model == "ours_quiet" else {}
        server = LocalTritonServer(repository, extra_args=no_metrics, env=quiet).start()
        try:
            assert server.process is not None
            release = server_release(server.http_url).version
            (stub,) = stub_processes(server.process.pid)
            stop = threading.Event()
            outcomes: list[tuple[float, str]] = []
            senders = [
                threading.Thread(target=_send, args=(server, i, stop, outcomes), daemon=True)
                for i in range(8)
            ]
            for sender in senders:
                sender.start()
            time.sleep(1.5)
            killed_at = time.monotonic()
            os.kill(stub, signal.SIGKILL)
            restarted = False
            while time.monotonic() - killed_at < after_s and server.process.poll() is None:
                restarted = restarted or any(pid != stub for pid in stub_processes(server.process.pid))
                time.sleep(0.1)
            stop.set()
            for sender in senders:
                sender.join(15)
            exit_code = server.process.poll()
            answered_after = len([at for at, outcome in outcomes if at > killed_at + 0.5 and outcome == "ok"])
            return {
                "model": model,
                "release": ".".join(map(str, release)),
                "server_died": exit_code is not None,
                "exit_signal": signal.Signals(-exit_code).name
                if exit_code is not None and exit_code < 0
                else None,
                "exit_code": exit_code,
                "stub_restarted": restarted,
                "answered_after_kill": answered_after,
                "outcomes_after_kill": dict(Counter(o for at, o in outcomes if at > killed_at)),
                "stub_alive_after": alive(stub),
            }
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["plain", "ours"], choices=MODELS)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--after-s", type=float, default=8.0, help="how long to send after the kill")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    exit_on_termination()
    results = []
    for number in range(args.trials):
        for model in args.models:  # interleaved: a busy spell of the machine hits both alike
            result = trial(model, args.after_s)
            results.append(result)
            print(f"trial {number + 1} {model}: {result}", flush=True)
    for model in args.models:
        runs = [r for r in results if r["model"] == model]
        died = [r["exit_signal"] or r["exit_code"] for r in runs if r["server_died"]]
        print(f"{model}: tritonserver died in {len(died)} of {len(runs)} kills {died}", flush=True)
    if args.json:
        write_report(args.json, {"host": host_environment(), "trials": results})


if __name__ == "__main__":
    main()
