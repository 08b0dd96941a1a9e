"""The deploy/ tests import the manifest renderer (scripts/render_manifests.py runs as a script)."""

from __future__ import annotations

import sys

from tests.support.paths import ROOT

SCRIPTS = ROOT / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
