"""signoff's benchmarks: `python -m bench SCENARIO ...` (bench/__main__.py); the scenarios are
the modules of bench/scenarios/, the machinery they share the other modules here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def project_from_pythonpath() -> None:
    """Make `bot`, `store` and `tests` come from the tree on $PYTHONPATH, if any, rather than
    this checkout (which `python -m bench` run from the repository root puts first on
    sys.path): for the scenarios that measure the project in their own process (create_cpu,
    home_cpu). Call it before importing the project."""
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not pythonpath:
        return
    here = {"", ".", str(REPO)}
    moved = [p for p in sys.path if p in here or Path(p or ".").resolve() == REPO]
    sys.path[:] = [p for p in sys.path if p not in moved] + moved
    for name in ("bot", "store", "channels", "tests"):
        if name in sys.modules:
            raise RuntimeError(f"{name} was imported before project_from_pythonpath()")
