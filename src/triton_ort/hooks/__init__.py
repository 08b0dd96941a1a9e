"""A model's Python hooks: what a hooks module declares its clients send and receive (declared.py), and the
runner with the hooks around it (runner.py, which imports torch: only a model with hooks loads it)."""
