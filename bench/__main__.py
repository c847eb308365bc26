"""The one entry point of the benchmarks:

    python -m bench                      # the scenarios, a line each: what it answers
    python -m bench SCENARIO --help      # its options
    python -m bench SCENARIO [OPTIONS] [--out FILE]

Each scenario is a module of bench/scenarios/ (DESCRIPTION, add_arguments, run). Its figures
are printed as a table (figure | unit | runs | min | median | max) and, with --out, written
as one JSON document (bench/results.py says what is in it). Run it from the repository root
with the venv's python; `PYTHONPATH=TREE python -m bench ...` measures TREE's code
(bench/README.md).
`python -m bench chart ...` draws the figures of a results file (not a scenario).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
import time
from pathlib import Path
from types import ModuleType

from bench import results as results_format

HERE = Path(__file__).resolve().parent
TOOLS = {"chart": "bench.chart"}


def scenario_names() -> list[str]:
    return sorted(p.stem for p in (HERE / "scenarios").glob("*.py") if p.stem != "__init__")


def description(path: Path) -> str:
    """A module's DESCRIPTION, read without importing it (the listing stays fast and needs
    none of the scenarios' dependencies)."""
    for node in ast.parse(path.read_text("utf-8")).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "DESCRIPTION" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    return ""


def listing() -> str:
    lines = ["scenarios (python -m bench SCENARIO --help for its options):"]
    for name in scenario_names():
        lines.append(f"  {name:<18} {description(HERE / 'scenarios' / f'{name}.py')}")
    lines.append("tools:")
    lines.append(f"  {'chart':<18} {description(HERE / 'chart.py')}")
    return "\n".join(lines)


def top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="signoff's benchmarks: one scenario per run, one results format.",
        epilog=listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO", choices=[*scenario_names(), *TOOLS])
    p.add_argument("options", nargs=argparse.REMAINDER, help="the scenario's options")
    return p


def load(name: str) -> ModuleType:
    return importlib.import_module(TOOLS.get(name, f"bench.scenarios.{name}"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(listing())
        return 0
    top = top_parser().parse_args(argv[:1])
    name = top.scenario
    module = load(name)
    parser = argparse.ArgumentParser(
        prog=f"python -m bench {name}",
        description=module.DESCRIPTION,
        epilog=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    if name not in TOOLS:
        parser.add_argument(
            "--out", type=Path, help="write the results (bench/results.py's JSON) to this file"
        )
    args = parser.parse_args(argv[1:])
    started = time.time()
    found = module.run(args)
    if name in TOOLS or found is None:
        return 0
    print(f"\n{name}: min / median / max over the runs")
    print(results_format.table(found))
    if args.out:
        command = ["python", "-m", "bench", *argv]
        results_format.write(args.out, results_format.document(name, command, found, started))
        print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
