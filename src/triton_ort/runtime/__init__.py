"""The runtime: how an execute is answered, classic or in flight, chosen once (execute.py, over
inflight.py), then one model instance (instance.py) and what its executes run on, top down: the lane
(lane.py), the model plan (model_plan.py), gathering (gather.py), the runner and its rooms (runner.py,
arrays.py, run_plan.py, run_plan_cache.py, graph_buckets.py, string_runner.py, output_placement.py,
tensor_checks.py, ort_errors.py, stats.py), the custom metrics (metrics.py), the ORT session and its
providers (session.py, providers.py, distributions.py), and the CUDA context (cuda_context.py,
copy_counter.py). docs/ARCHITECTURE.md draws it."""
