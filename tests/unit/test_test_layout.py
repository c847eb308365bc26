"""The suite's own layout: what several test modules share (rigs, constants, helpers) lives in
tests/support/, fixtures in a conftest.py, and no module under tests/ imports a test module
(one named `test_*`) or a conftest. A test module used as a library ties its private helpers
to other files, and whatever tests it defines can be collected a second time where it is
imported; a conftest imported as a module is loaded twice (once by pytest as a plugin), so
its hooks and module state exist twice.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

# Every form of import that can reach a test module or a conftest, each on its own line (line 1
# is blank), and imports of support modules, which are fine.
_SAMPLE = """
import tests.integration.test_api
from tests.integration import test_slack as slack_tests
from tests.integration.test_telegram import Rig
from .test_web import Browser
from . import test_confirm
from ..integration.test_api import Api
import tests.support.slack_rig
from tests.support.api_server import Api
from tests.integration import conftest
from . import edge_rig
from tests.conftest import TEST_CONFIG
import tests.acceptance.conftest
"""


def imported_test_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in `source`, the text of the module named `module`
    ("tests.integration.test_web"), that names a test module or a conftest, or something
    inside one."""
    package = module.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if any(part.startswith("test_") or part == "conftest" for part in name.split(".")):
                found.append((node.lineno, name))
                break
    return found


def test_no_module_under_tests_imports_a_test_module() -> None:
    # The check sees every form of such an import, and nothing else.
    seen = imported_test_modules(_SAMPLE, "tests.integration.test_example")
    assert [line for line, _ in seen] == [2, 3, 4, 5, 6, 7, 10, 12, 13], seen

    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for line, name in imported_test_modules(path.read_text("utf-8"), module):
            offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not offenders, (
        "move what these share into tests/support/ (fixtures into a conftest.py):\n"
        + "\n".join(offenders)
    )
