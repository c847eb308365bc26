"""Acceptance fixtures: the `signoff` command against real databases (the runner and the
configs are tests/support/cli.py).

Every command runs with its working directory in a fresh tmp dir (so a default `./signoff.db`
can never land in the repository) and an environment from which any SIGNOFF_* variable of the
developer's shell has been removed.

Each command is a process of its own. Most are forked from a process that has already
imported signoff (tests/support/forked_cli.py): a new interpreter would spend a second of
CPU importing the same code first. `serve`, `worker` and `demo`, and every command of a
`Cli(..., fresh=True)` (tests of start-up, of signals, of what a new interpreter imports), run
as `python -m bot.cli ...`, with the checkout's root on PYTHONPATH when the tests run from a
checkout, so the subprocess runs the code under test; when signoff is pip-installed and the
tests run elsewhere, the installed package is used.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli import Deployment, deployment, sqlite_url


@pytest.fixture
def fresh_sqlite(tmp_path: Path) -> Deployment:
    """A config pointing at a SQLite file that does not exist yet."""
    path = tmp_path / "fresh.db"
    return deployment(tmp_path, sqlite_url(path), path)


@pytest.fixture
def sqlite_db(tmp_path: Path, sqlite_template: Path) -> Deployment:
    """A config pointing at a migrated, empty SQLite file (a copy of the session template)."""
    path = tmp_path / "signoff.db"
    shutil.copy(sqlite_template, path)
    return deployment(tmp_path, sqlite_url(path), path)
