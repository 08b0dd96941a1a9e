"""`python -m client.cli`: the CLI client, kept under its old name for scripts and docs that use it. It
lives in the installed package (triton_ort.cli.infer), so that `triton-ort infer` runs from any folder."""

from triton_ort.cli.infer import main, one_line

__all__ = ["main", "one_line"]

if __name__ == "__main__":
    main()
