"""Check the GPU hand-off example: uint8 features to preprocess_bls (BLS) and classify_ensemble (ensemble),
both answers against the same pre-processing and ONNX model run in-process. Exits 1 on a wrong answer.

    python examples/gpu_handoff/client.py --url 127.0.0.1:8001
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient

ONNX_FILE = Path(__file__).resolve().parents[2] / "model_repository" / "demo" / "1" / "model.onnx"
MODELS = ("preprocess_bls", "classify_ensemble")
# A GPU instance runs fp32 GEMMs in TF32 (ORT's CUDA EP on Ampere and later): the last bits differ.
TOLERANCE = {"rtol": 2e-3, "atol": 2e-3}


def expected_logits(raw: np.ndarray) -> np.ndarray:
    features = (raw.astype(np.float32) - 127.5) / 127.5
    session = ort.InferenceSession(str(ONNX_FILE), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["np_logits"], {"np_script_embeddings": features})[0])


def ask(client: grpcclient.InferenceServerClient, model: str, raw: np.ndarray) -> np.ndarray:
    item = grpcclient.InferInput("raw_embeddings", list(raw.shape), "UINT8")
    item.set_data_from_numpy(raw)
    result = client.infer(model, [item], outputs=[grpcclient.InferRequestedOutput("np_logits")])
    return np.asarray(result.as_numpy("np_logits"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8001", help="tritonserver's gRPC address")
    parser.add_argument("--rows", type=int, default=8)
    args = parser.parse_args()
    raw = np.random.default_rng(0).integers(0, 256, (args.rows, 2010), dtype=np.uint8)
    want = expected_logits(raw)
    client = grpcclient.InferenceServerClient(args.url)
    failed = False
    for model in MODELS:
        got = ask(client, model, raw)
        ok = got.shape == want.shape and np.allclose(got, want, **TOLERANCE)
        print(f"{model}: {'ok' if ok else 'WRONG'} (max difference {np.abs(got - want).max():.2e})")
        failed = failed or not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
