"""Paths into a JSON document: tuples of object keys and list indexes. The property tests use
them to edit a valid document in place (a create body, a config) and to reach every node of
one."""

from __future__ import annotations

from typing import Any


def value_at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


def set_at(document: Any, path: tuple[Any, ...], value: Any) -> None:
    value_at(document, path[:-1])[path[-1]] = value


def delete_at(document: Any, path: tuple[Any, ...]) -> None:
    del value_at(document, path[:-1])[path[-1]]


def paths_in(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path in `document`, parents before their children."""
    found: list[tuple[Any, ...]] = []
    if isinstance(document, dict):
        for key, value in document.items():
            found.append((*prefix, key))
            found += paths_in(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found.append((*prefix, index))
            found += paths_in(value, (*prefix, index))
    return found
