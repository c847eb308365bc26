"""The server's canonical form (bot/canonical.py) for values sent by the Node tests, one JSON
document per line on stdin, answered one line each on stdout: {"text", "sha256"} or
{"refused": reason}. Numbers travel as {"$f": the 16 hex digits of their IEEE 754 bits}, so
every double (-0 included) arrives exactly as JavaScript held it.

With the argument `vectors`, prints instead the golden vectors of tests/unit/test_canonical.py
that survive a JSON round trip unchanged (the Python-only inputs, tuples, Decimals and
non-string keys, have no JavaScript counterpart).
"""

from __future__ import annotations

import json
import struct
import sys
from typing import Any

from bot.canonical import approval_hash, canonical_json, sha256_hex
from bot.errors import NotCanonical


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$f"}:
            return struct.unpack(">d", bytes.fromhex(value["$f"]))[0]
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def answer(line: str) -> dict[str, Any]:
    request = json.loads(line)
    try:
        if "approval" in request:
            doc = decode(request["approval"])
            tool = doc.get("tool") or {}
            return {
                "sha256": approval_hash(
                    doc["kind"],
                    doc["capability"],
                    doc["presentation"],
                    tool.get("name"),
                    tool.get("arguments"),
                    doc.get("question"),
                )
            }
        text = canonical_json(decode(request["value"]))
    except NotCanonical as exc:
        return {"refused": str(exc)}
    return {"text": text.decode("utf-8"), "sha256": sha256_hex(text)}


def survives(value: Any) -> bool:
    try:
        again = json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return False
    return repr(again) == repr(value)


def vectors() -> None:
    from tests.unit import test_canonical as t

    def dump(value: Any) -> str:
        return json.dumps(value)

    out: dict[str, Any] = {"canonical": [], "approval": [], "refused": []}
    for p in t.CANONICAL_VECTORS:
        value, expected, digest = p.values
        if survives(value):
            out["canonical"].append(
                {"id": p.id, "json": dump(value), "text": expected.decode(), "sha256": digest}
            )
    for p in t.APPROVAL_VECTORS:
        kind, capability, presentation, name, arguments, expected, digest = p.values
        out["approval"].append(
            {
                "id": p.id,
                "json": dump(
                    {
                        "kind": kind,
                        "capability": capability,
                        "presentation": presentation,
                        "tool": {"name": name, "arguments": arguments},
                    }
                ),
                "text": expected.decode(),
                "sha256": digest,
            }
        )
    for p in t.REFUSED:
        (value,) = p.values
        if survives(value):
            out["refused"].append({"id": p.id, "json": dump(value)})
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1:] == ["vectors"]:
        vectors()
    else:
        for line in sys.stdin:
            print(json.dumps(answer(line)), flush=True)
