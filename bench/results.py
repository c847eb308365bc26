"""The one results format and the one percentile method of every bench scenario.

A scenario's `run(args)` returns a `Results`: per figure, one value per run (`add`), raw
samples where it has them (`add_samples`), and its own detailed document (`detail`: what the
orchestrators, side_by_side and run_all, read back). `python -m bench` writes it with
`--out FILE` as one JSON document (`document`) and prints it as a table (`table`):

    {"scenario", "command", "commit", "tree", "pythonpath", "machine", "started", "seconds",
     "figures": {name: {"unit", "runs": [...], "min", "median", "max"}},
     "samples": {name: [...]}, "detail": ...}

Percentiles: `percentile(values, q)` is statistics.quantiles(values, n=100,
method="inclusive")[q - 1], never beyond the largest sample; every scenario uses it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: int) -> float:
    """The q-th percentile (1..99), inclusive method; NaN without samples, the sample itself
    with one."""
    values = list(values)
    if not values:
        return float("nan")
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def p50_p99(values: list[float]) -> tuple[float, float]:
    """(p50, p99) in the values' unit, by `percentile`."""
    return percentile(values, 50), percentile(values, 99)


@dataclass
class Results:
    """What one scenario measured: figures per run, raw samples, and its own document."""

    figures: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    detail: Any = None

    def add(self, name: str, value: float | None, unit: str = "") -> None:
        """One run's value of figure `name` (None and NaN are left out)."""
        if value is None or isinstance(value, bool):
            return
        value = float(value)
        if math.isnan(value):
            return
        self.figures.setdefault(name, []).append(value)
        if unit:
            self.units[name] = unit

    def add_samples(self, name: str, values: list[float]) -> None:
        self.samples.setdefault(name, []).extend(float(v) for v in values)

    def add_document(self, doc: Any, prefix: str = "") -> None:
        """Every number of a scenario's nested document as a figure named by its path: a
        dict's keys join the name; a list of dicts (runs) adds each element under the same
        name, labelled by its text fields (database, path...), so repeated runs gather into
        one figure; a list of numbers is raw samples."""
        if isinstance(doc, dict):
            for key, value in doc.items():
                self.add_document(value, f"{prefix}/{key}" if prefix else str(key))
        elif isinstance(doc, list):
            if doc and all(isinstance(v, int | float) and not isinstance(v, bool) for v in doc):
                self.add_samples(prefix, doc)
                return
            for item in doc:
                if isinstance(item, dict):
                    label = "/".join(str(v) for v in item.values() if isinstance(v, str))
                    numbers = {k: v for k, v in item.items() if not isinstance(v, str)}
                    name = "/".join(filter(None, [prefix, label]))
                    self.add_document(numbers, name)
                else:
                    self.add_document(item, prefix)
        elif isinstance(doc, int | float):
            self.add(prefix or "value", doc)

    def summary(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "unit": self.units.get(name, ""),
                "runs": values,
                "min": min(values),
                "median": statistics.median(values),
                "max": max(values),
            }
            for name, values in self.figures.items()
            if values
        }


def git_commit(tree: Path) -> str | None:
    """The commit checked out at `tree` (with "+dirty" if it has changes), None if no git."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    """Cores, CPU model, memory, load average, OS and Python of this machine."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb = None
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory_gb = round(kb / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gb": memory_gb,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "system": platform.platform(),
        "python": platform.python_version(),
    }


def document(
    scenario: str, command: list[str], results: Results, started: float
) -> dict[str, Any]:
    """The JSON document `--out` writes."""
    pythonpath = os.environ.get("PYTHONPATH", "")
    trees = {p: git_commit(Path(p)) for p in pythonpath.split(os.pathsep) if p}
    return {
        "scenario": scenario,
        "command": " ".join(command),
        "commit": git_commit(REPO),
        "tree": str(REPO),
        "pythonpath": trees,
        "machine": machine(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "figures": results.summary(),
        "samples": results.samples,
        "detail": results.detail,
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n", "utf-8")


def read_detail(path: Path) -> Any:
    """The scenario's own document from a results file (what the orchestrators read)."""
    return json.loads(path.read_text("utf-8"))["detail"]


def _cell(value: float) -> str:
    if value != 0 and abs(value) < 10:
        return f"{value:.2f}"
    return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def table(results: Results) -> str:
    """The figures as a markdown table: figure | unit | runs | min | median | max."""
    rows = ["| figure | unit | runs | min | median | max |", "| --- " * 6 + "|"]
    for name, f in results.summary().items():
        cells = [name, f["unit"], str(len(f["runs"]))]
        cells += [_cell(f["min"]), _cell(f["median"]), _cell(f["max"])]
        rows.append("| " + " | ".join(cells) + " |")
    if len(rows) == 2:
        rows.append("| (no figures) | | | | | |")
    return "\n".join(rows)
