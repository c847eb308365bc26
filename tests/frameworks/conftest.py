"""Fixtures for the agent frameworks' tests: a signoff deployment
(tests/support/agent_deployment.py) on SQLite, or on each database."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_deployment import Deployment, deploy
from tests.support.cli import sqlite_url


@pytest.fixture
def deployment(tmp_path: Path, sqlite_template: Path) -> Iterator[Deployment]:
    """signoff serve on a fresh, migrated SQLite file."""
    path = tmp_path / "signoff.db"
    shutil.copy(sqlite_template, path)
    yield from deploy(tmp_path, sqlite_url(path))


@pytest.fixture
def deployment_on(tmp_path: Path, db_url: str) -> Iterator[Deployment]:
    """signoff serve on each database (SQLite and PostgreSQL: the test runs on both)."""
    yield from deploy(tmp_path, db_url)
