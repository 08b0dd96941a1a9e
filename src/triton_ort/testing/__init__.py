"""The project's test and development harness: the local server launcher and what client/ and tests/ share.

Nothing here is imported by the runtime (model.py, instance, runner): a Triton image may ship triton_ort
without the harness's dependencies (tritonclient, psutil)."""
