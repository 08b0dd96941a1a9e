"""python -m triton_ort.cli: the `triton-ort` command without its script."""

from triton_ort.cli import main

main()
