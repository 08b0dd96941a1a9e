"""The model's description, read before anything runs and offline alike (`triton-ort config`): the served
config (served_config.py), the options (options.py), the ONNX signature (signature.py, dtypes.py), the ONNX
file read once (onnx_files.py), auto-complete (autocomplete.py), the load's checks (load_checks.py,
custom_ops.py, sequence.py), what the graph mixes and indexes (row_mixing.py, input_ranges.py). Nothing here
imports torch."""
