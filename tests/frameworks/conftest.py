"""Fixtures for the agent frameworks' tests: a signoff deployment
(tests/support/agent_deployment.py) on SQLite, or on each database.

A module marked `shared_deployment` shares one deployment per database among its tests,
emptied before each (tests/support/shared_deployment.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_deployment import Deployment, deploy
from tests.support.cli import sqlite_url
from tests.support.shared_deployment import SharedDeployments


@pytest.fixture(scope="module")
def shared_deployments(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_template: Path,
) -> Iterator[SharedDeployments]:
    shared = SharedDeployments(
        tmp_path_factory.mktemp("shared-deployment"),
        sqlite_template,
        # Asked for only when a PostgreSQL case runs (a SQLite-only module needs none).
        lambda: request.getfixturevalue("pg_admin_url"),
    )
    yield shared
    shared.close()


def _shared(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("shared_deployment") is not None


@pytest.fixture
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    """signoff serve on a fresh, migrated SQLite file."""
    if _shared(request):
        yield request.getfixturevalue("shared_deployments").get("sqlite")
        return
    path = tmp_path / "signoff.db"
    shutil.copy(request.getfixturevalue("sqlite_template"), path)
    yield from deploy(tmp_path, sqlite_url(path))


@pytest.fixture
def deployment_on(
    request: pytest.FixtureRequest, tmp_path: Path, db_url: str
) -> Iterator[Deployment]:
    """signoff serve on each database (SQLite and PostgreSQL: the test runs on both)."""
    if _shared(request):
        kind = "sqlite" if db_url.startswith("sqlite") else "postgresql"
        yield request.getfixturevalue("shared_deployments").get(kind)
        return
    yield from deploy(tmp_path, db_url)
