"""The `signoff` CLI as the acceptance tests run it (a forked, already-imported process, or a
new interpreter where a process matters), its results, configs written as TOML, and a
deployment: a working directory, a config and a database."""

from __future__ import annotations

import copy
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

from tests.support import forked_cli
from tests.support.samples import TEST_CONFIG, request_body

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60
HEX64 = re.compile(r"^[0-9a-f]{64}$")


# -- TOML ----------------------------------------------------------------------------------


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _inline(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes (\" \\ \n \uXXXX) are valid TOML basic-string escapes.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_inline(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _table(lines: list[str], path: tuple[str, ...], table: Mapping[str, Any], array: bool) -> None:
    if path:
        dotted = ".".join(_key(p) for p in path)
        lines += ["", f"[[{dotted}]]" if array else f"[{dotted}]"]
    for name, value in table.items():
        if not isinstance(value, dict) and not _is_table_array(value):
            lines.append(f"{_key(name)} = {_inline(value)}")
    for name, value in table.items():
        if isinstance(value, dict):
            _table(lines, (*path, name), value, array=False)
        elif _is_table_array(value):
            for item in value:
                _table(lines, (*path, name), item, array=True)


def to_toml(document: Mapping[str, Any]) -> str:
    """A TOML text for a JSON-like document (checked to read back as the same document)."""
    lines: list[str] = []
    _table(lines, (), document, array=False)
    text = "\n".join(lines).lstrip("\n") + "\n"
    assert tomllib.loads(text) == document, text
    return text


def config_with(database_url: str, **changes: Any) -> dict[str, Any]:
    """TEST_CONFIG (deep-copied) with its database and any top-level sections replaced."""
    config = copy.deepcopy(TEST_CONFIG)
    config.update(copy.deepcopy(changes))
    config["database"] = {"url": database_url}
    return config


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


# -- running the CLI -----------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __str__(self) -> str:
        return (
            f"signoff {' '.join(self.args)} -> exit {self.returncode}\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    if (REPO_ROOT / "bot" / "__init__.py").is_file():
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
        )
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra)
    return env


# Commands that are processes by nature: they serve, fork, install signal handlers or never end.
FRESH_INTERPRETER_COMMANDS = frozenset({"serve", "worker", "demo"})


@dataclass
class Cli:
    cwd: Path
    env: dict[str, str] = field(default_factory=base_env)
    fresh: bool = False  # True: every command is `python -m bot.cli`, a new interpreter

    def fresh_interpreter(self) -> Cli:
        """The same CLI, every command a new interpreter."""
        return replace(self, fresh=True)

    def _command(self, args: Sequence[str]) -> list[str]:
        return [sys.executable, "-m", "bot.cli", *args]

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        return {**self.env, **(env or {})}

    def _forked(self, args: Sequence[str]) -> bool:
        return not self.fresh and not FRESH_INTERPRETER_COMMANDS & set(args)

    def run(self, *args: str, env: Mapping[str, str] | None = None) -> Result:
        return self.launch(*args, env=env).wait()

    def launch(self, *args: str, env: Mapping[str, str] | None = None) -> Running:
        """Start the command; `.wait()` for its result."""
        if self._forked(args):
            return _Forked.start(self, args, env)
        return _Exec(tuple(args), self.start(*args, env=env))

    def start(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self._command(args),
            cwd=self.cwd,
            env=self._env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def run_all(self, commands: Sequence[Sequence[str]]) -> list[Result]:
        """Start every command before waiting for any; results in the order given."""
        return run_together([(self, args) for args in commands])


class Running(Protocol):
    @property
    def pid(self) -> int: ...

    def wait(self) -> Result: ...


@dataclass
class _Exec:
    """A command running as `python -m bot.cli`."""

    args: tuple[str, ...]
    process: subprocess.Popen[str]

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self) -> Result:
        try:
            out, err = self.process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
        return Result(self.args, self.process.returncode, out, err)


@dataclass
class _Forked:
    """A command running in a process forked from the one that preloaded signoff."""

    args: tuple[str, ...]
    process: BaseProcess
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    @classmethod
    def start(cls, cli: Cli, args: Sequence[str], env: Mapping[str, str] | None) -> _Forked:
        out, err = _empty_file(), _empty_file()
        process = forked_cli.start(args, str(cli.cwd), cli._env(env), str(out), str(err))
        return cls(tuple(args), process, out, err)

    def wait(self) -> Result:
        code = forked_cli.exit_code(self.process, TIMEOUT)
        if code is None:
            self.process.kill()
            code = forked_cli.exit_code(self.process, None)
        try:
            assert code is not None
            return Result(self.args, code, _read(self.out), _read(self.err))
        finally:
            self.out.unlink()
            self.err.unlink()


def _empty_file() -> Path:
    fd, name = tempfile.mkstemp(prefix="signoff-cli-")
    os.close(fd)
    return Path(name)


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def run_together(jobs: Sequence[tuple[Cli, Sequence[str]]]) -> list[Result]:
    """Start every (cli, args) job before waiting for any; results in the order given."""
    running = [cli.launch(*args) for cli, args in jobs]
    return [job.wait() for job in running]


def assert_refused(result: Result, *fragments: str, code: int = 1) -> str:
    """A refusal: the exit code, exactly one line on stderr saying why, no traceback, and
    nothing on stdout that could be mistaken for success. Returns the line."""
    assert result.returncode == code, str(result)
    assert "Traceback" not in result.stderr, str(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, str(result)
    assert result.stdout == "", str(result)
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), f"{fragment!r} not in: {lines[0]}"
    return lines[0]


# -- deployments ---------------------------------------------------------------------------


@dataclass
class Deployment:
    """One signoff installation: a config file naming a database, and a CLI using it."""

    cli: Cli
    config_path: Path
    db_path: Path | None
    workdir: Path

    def request_file(self, name: str = "req.json", **overrides: Any) -> Path:
        path = self.workdir / name
        path.write_text(json.dumps(request_body(**overrides), ensure_ascii=False), "utf-8")
        return path

    def request(self, name: str = "req.json", tenant: str = "acme", **overrides: Any) -> Any:
        """Create a request through the CLI; returns the printed record."""
        result = self.cli.run(
            "approvals",
            "request",
            "--tenant",
            tenant,
            "--file",
            str(self.request_file(name, **overrides)),
        )
        assert result.returncode == 0, str(result)
        return result.json()

    def request_all(self, *overrides: dict[str, Any], tenant: str = "acme") -> list[Any]:
        """Create several requests at once (concurrent processes); returns the records."""
        files = [self.request_file(f"req-{i}.json", **o) for i, o in enumerate(overrides)]
        results = self.cli.run_all(
            [["approvals", "request", "--tenant", tenant, "--file", str(f)] for f in files]
        )
        for result in results:
            assert result.returncode == 0, str(result)
        return [result.json() for result in results]

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        assert self.db_path is not None
        with closing(sqlite3.connect(self.db_path)) as conn:
            return conn.execute(sql, params).fetchall()

    def execute(self, sql: str, *params: Any) -> int:
        assert self.db_path is not None
        with closing(sqlite3.connect(self.db_path)) as conn, conn:
            return conn.execute(sql, params).rowcount


def deployment(workdir: Path, database_url: str, db_path: Path | None) -> Deployment:
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "signoff.toml"
    config_path.write_text(to_toml(config_with(database_url)), "utf-8")
    cli = Cli(cwd=workdir, env=base_env(SIGNOFF_CONFIG=str(config_path)))
    return Deployment(cli=cli, config_path=config_path, db_path=db_path, workdir=workdir)
