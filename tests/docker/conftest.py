"""The docker/ tests import the checks' own modules (docker/checks/*.py run as scripts, not a package)."""

from __future__ import annotations

import sys

from tests.support.paths import ROOT

CHECKS = ROOT / "docker" / "checks"
if str(CHECKS) not in sys.path:
    sys.path.insert(0, str(CHECKS))
