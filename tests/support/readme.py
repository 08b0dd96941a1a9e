"""The marked code blocks of the user-facing pages (`<!-- readme-test: NAME -->` before the fence): the
recipes tests/integration/test_readme.py runs as written, and the lines other tiers check against (the
README's config, the GPU hosts page's TF32 block)."""

from __future__ import annotations

import re

from tests.support.paths import ROOT

BLOCK = re.compile(r"<!-- readme-test: (?P<name>[\w-]+) -->\n```\w*\n(?P<body>.*?)```", re.DOTALL)


# Where the marked blocks live: the README, the guide it links for serving a model, and the GPU hosts page.
PAGES = ("README.md", "docs/serving-your-model.md", "docs/gpu-hosts.md")
# The guide's blocks that the README's ten lines are made of, in order.
QUICKSTART_BLOCKS = ("layout", "serve", "try")


def blocks_by_page() -> dict[str, dict[str, str]]:
    return {page: {m["name"]: m["body"] for m in BLOCK.finditer((ROOT / page).read_text())} for page in PAGES}


def readme_blocks() -> dict[str, str]:
    """Every marked block of the pages, by name (a name is marked once across them)."""
    blocks: dict[str, str] = {}
    for page, found in blocks_by_page().items():
        twice = set(found) & set(blocks)
        assert not twice, f"{page}: a block name is marked twice: {twice}"
        blocks.update(found)
    return blocks
