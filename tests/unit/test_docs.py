"""The documentation stands on its own: its links resolve inside the repository, nothing
points at design notes that live outside it, and the module map in docs/architecture.md
matches the tree."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]

# Spelled in two halves so that this file does not contain what it looks for.
FORBIDDEN = ("../" + "shared", "DESIGN" + ".md")
# Never part of the project's own files (local environments, caches, build output).
_SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist"}

# Packages whose modules docs/architecture.md maps, and the one folder it may name as a whole.
PACKAGES = ("bot", "channels", "store", "clients/python/signoff_client")
FOLDER_ROWS = ("store/migrations/versions/", "clients/python/signoff_client/mcp/")

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
# [text](target) or [text](target "title"); images too. The text may hold one level of [].
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked out."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, _CODE_SPAN.sub("", line)


def links(text: str) -> list[tuple[int, str]]:
    """Every link target in a markdown text, with its line number."""
    found: list[tuple[int, str]] = []
    for number, line in _prose_lines(text):
        found += [(number, match.group(1)) for match in _INLINE_LINK.finditer(line)]
        reference = _REFERENCE_LINK.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lowercased, punctuation dropped,
    spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in path.read_text("utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(doc: Path) -> list[str]:
    problems: list[str] = []
    for number, target in links(doc.read_text("utf-8")):
        where = f"{doc.relative_to(ROOT)}:{number}: {target}"
        if not target or _SCHEME.match(target):
            continue  # http(s), mailto and other absolute links are not checked here
        path_part, _, anchor = target.partition("#")
        resolved = (doc.parent / path_part).resolve() if path_part else doc
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{where}: points outside the repository")
        elif not resolved.exists():
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading with the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    problems = broken_links(doc)
    assert not problems, "\n".join(problems)


def test_the_link_checker_sees_links_and_anchors() -> None:
    """The checks above would pass vacuously if the patterns matched nothing."""
    text = "See [a](docs/x.md#one-two) and `[not](code.md)`.\n```\n[no](fence.md)\n```\n"
    assert links(text) == [(1, "docs/x.md#one-two")]
    assert slug("Routing, delegation and `escalation`") == "routing-delegation-and-escalation"
    assert slug("`[slack]` and `[telegram]`") == "slack-and-telegram"
    assert any(target.startswith("docs/") for _, target in links(DOCS[0].read_text("utf-8")))


def project_files() -> list[Path]:
    """The repository's own files: what git tracks or would track (not ignored), else, outside
    a git checkout, every file under the root but local environments and caches."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [
            path
            for path in ROOT.rglob("*")
            if path.is_file()
            and not any(
                part in _SKIP_DIRS or part.endswith(".egg-info")
                for part in path.relative_to(ROOT).parts
            )
        ]
    paths = (ROOT / name for name in listed.decode("utf-8", "surrogateescape").split("\0") if name)
    return sorted({path for path in paths if path.is_file()})


def test_no_file_points_outside_the_repository() -> None:
    here = Path(__file__).resolve()
    offenders = []
    for path in project_files():
        if path.resolve() == here:
            continue
        content = path.read_bytes()
        for needle in FORBIDDEN:
            if needle.encode() in content:
                offenders.append(f"{path.relative_to(ROOT)}: {needle}")
    assert not offenders, "\n".join(offenders)


def modules_in_tree() -> set[str]:
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = path.relative_to(ROOT).as_posix()
            if path.name == "__init__.py" or "__pycache__" in path.parts:
                continue
            folder = next((f for f in FOLDER_ROWS if name.startswith(f)), None)
            found.add(folder or name)
    return found


def module_table_rows() -> list[str]:
    """The first cell of each row of the `| module | holds |` table, without backticks."""
    text = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^\|\s*module\s*\|", line))
    rows: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip().strip("`"))
    return rows


def test_the_architecture_module_table_matches_the_tree() -> None:
    rows = module_table_rows()
    listed = set(rows)
    repeated = sorted({row for row in rows if rows.count(row) > 1})
    assert not repeated, f"modules with several rows: {repeated}"
    in_tree = modules_in_tree()
    missing, unknown = sorted(in_tree - listed), sorted(listed - in_tree)
    assert not missing, f"modules missing from docs/architecture.md: {missing}"
    assert not unknown, f"docs/architecture.md names modules that do not exist: {unknown}"


def defence_tests() -> list[tuple[str, str | None]]:
    """The tests SECURITY.md's table names: (file, test function or None for a whole file).
    A bare name in a cell belongs to the last file named before it in that cell."""
    found: list[tuple[str, str | None]] = []
    for line in (ROOT / "SECURITY.md").read_text("utf-8").splitlines():
        if not line.startswith("| ") or line.startswith("| defence") or line.startswith("| ---"):
            continue
        cell = line.rstrip(" |").split(" | ", 1)[1]
        current: str | None = None
        for token in re.findall(r"`([^`]+)`", cell):
            path, _, name = token.partition("::")
            if path.endswith(".py"):
                current = path
                found.append((path, name or None))
            elif current is not None:
                found.append((current, token))
    return found


def test_every_test_security_md_names_exists() -> None:
    named = defence_tests()
    assert len(named) > 20  # the table was read
    missing = []
    for path, name in named:
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
        elif name is not None and not re.search(
            rf"^(async )?def {re.escape(name)}\(", source.read_text("utf-8"), re.M
        ):
            missing.append(f"{path}::{name}")
    assert not missing, f"SECURITY.md names tests that do not exist: {missing}"
