"""The benchmark's anchors: what client.bench measures ours against, each served beside ours from the same
ONNX file (scripts/build_models.py --bench copies the model.py files into the benchmark repository).

- naive_model.py      the python-backend model our users start from: as_numpy() in, session.run(), numpy
                      out, with its GPU->CPU->GPU round trips; what the project replaces.
- plain_model.py      the simplest zero-copy model.py a user would write (DLPack in, IO binding, one sync),
                      without the library's plans, gathering, checks or metrics: what the design adds.
- null_model.py       the python backend's own floor: zeros without ONNX Runtime, from the host, the device,
                      or after one small kernel per request; `ours - null` is what our code adds.
- pytriton_server.py  PyTriton serving the same ORT IO-binding function: numpy in and out, as PyTriton
                      serves, the alternative a user would consider.

The model.py files are Triton python-backend models (they import triton_python_backend_utils); only the
benchmark serves them, never ship one.
"""
