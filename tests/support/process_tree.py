"""The process tree of `signoff serve --workers N` and `--background-process`, read from
/proc and from the server's log, for the tests that start one (tests/acceptance)."""

from __future__ import annotations

import os
import re
from pathlib import Path


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


_STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")


def started_workers(log: str) -> dict[int, int]:
    """Slot -> pid from the "worker N started (pid P)" lines (a restart's pid replaces the
    first)."""
    return {int(slot): int(pid) for slot, pid in _STARTED.findall(log)}
