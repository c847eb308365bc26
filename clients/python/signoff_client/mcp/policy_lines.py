"""Which line of a policy file sets a key, for the messages of mcp/policy.py (tomllib reports
lines for syntax errors only). A best effort: a line it cannot find is left out, never
guessed.

A tool's rule may be a list, written inline (`refund = [{ ... }, { ... }]`, one item per line
or several on one) or as an array of tables (`[[tools.refund]]`); `item` finds the line of
one of its rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["Lines"]

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_ARRAY_HEADER = re.compile(r"^\s*\[\[\s*([^\[\]]+?)\s*\]\]\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*([=.])""")


class Lines:
    """The lines of one policy file's text."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._lines = text.splitlines()

    def find(self, table: Sequence[str], key: str | None = None) -> int | None:
        current: list[str] = []
        header_line: int | None = None
        inline_parent: int | None = None
        for number, raw in enumerate(self._lines, start=1):
            header = _HEADER.match(raw) or _ARRAY_HEADER.match(raw)
            if header:
                current = _split_dotted(header.group(1))
                if current == list(table):
                    header_line = number
                if key is not None and current == [*table, key]:
                    return number  # `[tools.refund]`, or a whole table that is wrong
                continue
            match = _KEY.match(raw)
            if not match:
                continue
            name = next(g for g in match.groups()[:3] if g is not None)
            if current == list(table) and (key is None or name == key):
                return number if key is not None else header_line
            # `refund = { action = ... }`: the rule's own keys live on the tool's line.
            if len(table) == 2 and current == [table[0]] and name == table[1]:
                inline_parent = number
        return inline_parent or header_line

    def item(self, table: Sequence[str], index: int, key: str | None = None) -> int | None:
        """The line of rule `index` of the list `table[-1]` in `table[:-1]` (its `key`, in an
        array of tables); the list's own line if that item is not found."""
        found = self._array_table(list(table), index, key)
        if found is not None:
            return found
        start = self._value_start(list(table))
        if start is None:
            return self.find(table[:-1], table[-1])
        starts = _item_lines(self._text, start)
        return starts[index] if index < len(starts) else self.find(table[:-1], table[-1])

    def _array_table(self, table: list[str], index: int, key: str | None) -> int | None:
        seen = -1
        inside = False
        header_line: int | None = None
        for number, raw in enumerate(self._lines, start=1):
            array = _ARRAY_HEADER.match(raw)
            if array or _HEADER.match(raw):
                if inside:
                    return header_line  # the item's table ended without the key
                if array and _split_dotted(array.group(1)) == table:
                    seen += 1
                    if seen == index:
                        inside, header_line = True, number
                        if key is None:
                            return number
                continue
            match = _KEY.match(raw) if inside else None
            if match and next(g for g in match.groups()[:3] if g is not None) == key:
                return number
        return header_line if inside else None

    def _value_start(self, table: list[str]) -> int | None:
        """Where the value of `table[-1] = [...]` starts in the text (just after the `=`)."""
        current: list[str] = []
        offset = 0
        for raw in self._text.splitlines(keepends=True):
            header = _HEADER.match(raw) or _ARRAY_HEADER.match(raw)
            if header:
                current = _split_dotted(header.group(1))
            else:
                match = _KEY.match(raw)
                if (
                    match
                    and match.group(4) == "="
                    and current == table[:-1]
                    and next(g for g in match.groups()[:3] if g is not None) == table[-1]
                ):
                    return offset + match.end()
            offset += len(raw)
        return None


def _item_lines(text: str, start: int) -> list[int]:
    """The line each item of the array starting at `start` (after `key =`) begins on. Strings
    and comments are skipped, so a bracket inside one is not counted."""
    lines: list[int] = []
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if depth == 1 and c not in " \t\r\n,]":
            lines.append(text.count("\n", 0, i) + 1)
        if c in "\"'":
            i = _string_end(text, i)
            if depth == 0:
                break  # not an array
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                break
        elif depth == 0 and c not in " \t":
            break  # not an array
        elif depth == 1 and c not in " \t\r\n,":
            while i + 1 < len(text) and text[i + 1] not in ",]#\n":
                i += 1  # a bare value (a number, true): one item
        i += 1
    return lines


def _string_end(text: str, i: int) -> int:
    """The index just past the string that opens at `i` ("...", '...', or either tripled)."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        while quote == '"' and end > 0 and _escaped(text, end):
            end = text.find(quote * 3, end + 1)
        return len(text) if end < 0 else end + 3
    j = i + 1
    while j < len(text) and text[j] != quote and text[j] != "\n":
        j += 2 if quote == '"' and text[j] == "\\" else 1
    return j + 1


def _escaped(text: str, i: int) -> bool:
    backslashes = 0
    while i - 1 - backslashes >= 0 and text[i - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _split_dotted(text: str) -> list[str]:
    parts = re.findall(r"""\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^.\s]+))\s*(?:\.|$)""", text)
    return [next(p for p in part if p) if any(part) else "" for part in parts]
