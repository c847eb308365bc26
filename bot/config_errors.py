"""Config errors in words an operator can act on: the key's path, the line of the TOML file
it is written on, and for an unknown key the closest known one ("did you mean ...?")."""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError


def _model_at(loc: tuple[int | str, ...], model: type[BaseModel]) -> type[BaseModel] | None:
    """The config table (model) that the key at `loc` sits in, following the path through
    tables, lists of tables (`tenants.0`) and named tables (`principals.alice`)."""
    node: Any = model
    for part in loc[:-1]:
        origin = typing.get_origin(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(part))
            if field is None:
                return None
            node = field.annotation
        elif origin in (list, dict):
            node = typing.get_args(node)[-1]  # the part is an index or a key: skip it
        else:
            return None
        # Unwrap `X | None` (the tables that may be absent) to the table itself.
        while typing.get_origin(node) in (typing.Union, types.UnionType):
            node = next((arg for arg in typing.get_args(node) if arg is not type(None)), None)
    return node if isinstance(node, type) and issubclass(node, BaseModel) else None


def _suggestion(loc: tuple[int | str, ...], config: type[BaseModel]) -> str:
    model = _model_at(loc, config)
    if model is None or not loc:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f", did you mean {close[0]}?" if close else ""


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\"' -]+?)\s*=")


def _dotted(text: str) -> list[str]:
    return [part.strip().strip("\"'") for part in text.split(".")]


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Where each table and key of a TOML text is written: its path as pydantic reports it
    (`("tenants", "0", "name")`, list positions as digits) to its line number. Best effort,
    for error messages: inline tables and multi-line values are not followed."""
    found: dict[tuple[str, ...], int] = {}
    counts: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            parts, path = _dotted(header.group(2)), []
            for i, part in enumerate(parts):
                path.append(part)
                prefix = tuple(parts[: i + 1])
                if header.group(1) == "[[" and i == len(parts) - 1:
                    counts[prefix] = counts.get(prefix, -1) + 1
                    path.append(str(counts[prefix]))
                elif prefix in counts:  # a sub-table of the latest [[entry]]
                    path.append(str(counts[prefix]))
            table = tuple(path)
            found.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            found.setdefault((*table, *_dotted(key.group(1))), number)
    return found


_NAMED_KEY = re.compile(r"^([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*): ")


def _with_line(message: str, where: dict[tuple[str, ...], int]) -> str:
    """A check of the whole config (which names, say, `routes.1.notify` in its message, as
    pydantic gives it no key of its own) with the line of that key, or of the nearest table
    around it that the file writes on a line of its own."""
    named = _NAMED_KEY.match(message)
    if named is None:
        return message
    path = tuple(named.group(1).split("."))
    for end in range(len(path), 0, -1):
        line = where.get(path[:end])
        if line is not None:
            return f"{named.group(1)} (line {line}): {message[named.end() :]}"
    return message


def format_errors(exc: ValidationError, model: type[BaseModel], text: str | None = None) -> str:
    lines = []
    where = key_lines(text) if text is not None else {}
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(part) for part in loc)
        if err["type"] == "extra_forbidden":
            message = "unknown key" + _suggestion(loc, model)
        else:
            message = err["msg"].removeprefix("Value error, ")
        line = where.get(tuple(str(part) for part in loc))
        if line is not None:
            key = f"{key} (line {line})"
        elif not loc:
            message = _with_line(message, where)
        lines.append(f"{key}: {message}" if key else message)
    return "; ".join(lines)
