"""bot/openapi.json as the OpenAPI tests read it (tests/unit/test_openapi_document.py,
tests/unit/test_openapi_requests.py): the document, ways through its `$ref`s and operations,
validators for its schemas, and the routes the server registers to hold its paths to.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
from aiohttp import web

from bot import api
from bot.app import build_app
from bot.config import parse_config
from store.repository import Store
from tests.support.samples import TEST_CONFIG

SPEC_PATH = Path(api.__file__).with_name("openapi.json")
SPEC: dict[str, Any] = json.loads(SPEC_PATH.read_text("utf-8"))
COMPONENTS = SPEC["components"]
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def resolve(ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = SPEC
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def deref(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = resolve(node["$ref"])
    return node


def walk(node: Any, path: str = "#") -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}/{index}")


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in SPEC["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield path, method, operation


def validator(schema: dict[str, Any]) -> jsonschema_rs.Draft202012Validator:
    """A validator for a schema that may refer to the document's components."""
    return jsonschema_rs.Draft202012Validator(
        {**schema, "components": COMPONENTS}, validate_formats=True
    )


def component(name: str) -> jsonschema_rs.Draft202012Validator:
    return validator({"$ref": f"#/components/schemas/{name}"})


Routes = dict[tuple[str, str], Any]  # (method, path) -> handler


def _routes(app: web.Application) -> Routes:
    # aiohttp adds a HEAD route beside every GET by itself; it is not part of the contract.
    return {
        (route.method.lower(), route.resource.canonical): route.handler
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }


async def served_routes() -> tuple[Routes, Routes]:
    """The routes `signoff serve` registers without a chat channel, and those of the agent
    API alone (bot.api.add_routes)."""
    store = Store.from_url("sqlite+aiosqlite:///:memory:")
    try:
        app = build_app(parse_config(TEST_CONFIG), store, background=False)
        bare = web.Application()
        api.add_routes(bare, app[api.API])
        return _routes(app), _routes(bare)
    finally:
        await store.close()
