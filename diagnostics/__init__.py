"""Diagnostics a maintainer runs again to answer one question about the library or its serving (what hooks,
gathering, CUDA graphs, instances, memory, many models or a second GPU cost): diagnostics/README.md.
Not installed; run from the repository root as `python -m diagnostics.<name>`."""
