"""A model's Python hooks: their contract, the loaded module and what clients send and receive around it
(module.py). The file itself (imported, and what it declares) is model/hooks_file.py's; the runtime runs the
hooks (runtime/hooked_runner.py, which imports torch: only a model with hooks loads it)."""
