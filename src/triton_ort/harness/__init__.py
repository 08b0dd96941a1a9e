"""tritonserver without Docker, and what the clients and tests use to talk to it: the harness.

    server.py      LocalTritonServer: the launcher behind `triton-ort serve` (its CLI: triton_ort.cli.serve)
    checks.py      what the launcher checks before a start, and the load errors it reads after one
    mps.py         a CUDA MPS daemon of the server's own (--mps)
    processes.py   a server's process tree: stubs, RSS, GPU memory
    repository.py  model repositories from typed specs (config.pbtxt through Triton's ModelConfig)
    transport.py, malformed.py, reference.py, releases.py, waiting.py   requests, answers, release wording

Nothing here is imported by the runtime (model.py, instance, runner): a Triton image may ship triton_ort
without the harness's dependencies (tritonclient, psutil)."""
