"""Message entities as tdlib orders, fixes and finds them: offsets and lengths in UTF-16
code units, the nesting Telegram allows, bold/italic/... split where they cross other
entities, and the entities Telegram finds itself (url, mention, bot_command, ...)."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.telegram.links import _check_link

_PRIORITY = {
    "bold": 90,
    "italic": 91,
    "underline": 92,
    "strikethrough": 93,
    "spoiler": 94,
    "code": 20,
    "pre": 11,
    "text_link": 49,
    "text_mention": 49,
    "blockquote": 0,
    "expandable_blockquote": 0,
    "custom_emoji": 99,
}

_SPLITTABLE = ("bold", "italic", "underline", "strikethrough", "spoiler")

_BLOCKQUOTES = frozenset({"blockquote", "expandable_blockquote"})

_PRE = frozenset({"pre", "code"})

_CONTINUOUS = frozenset(
    {
        "mention",
        "hashtag",
        "cashtag",
        "bot_command",
        "url",
        "email",
        "phone_number",
        "text_link",
        "text_mention",
        "custom_emoji",
    }
)

_ENTITY_TYPES = frozenset(_PRIORITY) | _CONTINUOUS


def _priority(entity: dict[str, Any]) -> int:
    if entity["type"] == "pre" and entity.get("language"):
        return 10
    return _PRIORITY.get(entity["type"], 50)


def _sort(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entities, key=lambda e: (e["offset"], -e["length"], _priority(e)))


def _end(entity: dict[str, Any]) -> int:
    return entity["offset"] + entity["length"]


def _entity(kind: str, offset: int, length: int, **extra: Any) -> dict[str, Any]:
    return {"offset": offset, "length": length, "type": kind, **extra}


def _u16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _entities_valid(entities: list[dict[str, Any]]) -> bool:
    """tdlib's are_entities_valid: properly nested, and no splittable one needs splitting."""
    last_end = dict.fromkeys(_SPLITTABLE, -1)
    stack: list[dict[str, Any]] = []
    for entity in entities:
        while stack and entity["offset"] >= _end(stack[-1]):
            stack.pop()
        if stack:
            kinds = {e["type"] for e in stack}
            if _end(entity) > _end(stack[-1]) or entity["type"] in kinds:
                return False
            if stack[-1]["type"] in _PRE:
                return False
            if entity["type"] in _PRE and kinds - _BLOCKQUOTES:
                return False
            nested = entity["type"] in _CONTINUOUS or entity["type"] in _BLOCKQUOTES
            if nested and kinds & _CONTINUOUS:
                return False
            if entity["type"] in _BLOCKQUOTES and kinds & _BLOCKQUOTES:
                return False
            if kinds & set(_SPLITTABLE):
                return False
        if entity["type"] in last_end:
            if last_end[entity["type"]] >= entity["offset"]:
                return False
            last_end[entity["type"]] = _end(entity)
        stack.append(entity)
    return True


def _remove_intersecting(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept, last_end = [], 0
    for entity in entities:
        if entity["offset"] >= last_end:
            kept.append(entity)
            last_end = _end(entity)
    return kept


def _remove_intersecting_blockquote(
    entities: list[dict[str, Any]], blockquotes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    kept = []
    for entity in entities:
        crosses = any(
            entity["offset"] < _end(q)
            and (_end(q) < _end(entity) or entity["offset"] < q["offset"] < _end(entity))
            for q in blockquotes
        )
        if not crosses:
            kept.append(entity)
    return kept


def _split_entities(
    splittable: list[dict[str, Any]], others: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """tdlib's split_entities: merge touching bold/italic/..., cut them at other entities'
    edges, drop them inside code and pre."""
    begin = dict.fromkeys(_SPLITTABLE, 0)
    end = dict.fromkeys(_SPLITTABLE, 0)
    result: list[dict[str, Any]] = []
    position = 0

    def flush(offset: int) -> None:
        for kind in _SPLITTABLE:
            if end[kind] != 0 and begin[kind] < offset:
                if end[kind] <= offset:
                    result.append(_entity(kind, begin[kind], end[kind] - begin[kind]))
                    begin[kind] = end[kind] = 0
                else:
                    result.append(_entity(kind, begin[kind], offset - begin[kind]))
                    begin[kind] = offset

    def add_entities(end_offset: int) -> None:
        nonlocal position
        while position < len(splittable):
            entity = splittable[position]
            if entity["offset"] >= end_offset:
                break
            kind = entity["type"]
            if entity["offset"] <= end[kind] and end[kind] != 0:
                end[kind] = max(end[kind], _end(entity))
            else:
                flush(entity["offset"])
                begin[kind], end[kind] = entity["offset"], _end(entity)
            position += 1
        flush(end_offset)

    stack: list[dict[str, Any]] = []

    def add_offset(offset: int) -> None:
        while stack and offset >= _end(stack[-1]):
            size = len(result)
            add_entities(_end(stack[-1]))
            if stack[-1]["type"] in _PRE:
                del result[size:]
            stack.pop()
        add_entities(offset)

    for other in others:
        add_offset(other["offset"])
        stack.append(other)
    add_offset(2**31 - 1)
    return _sort(result)


def _resplit(
    splittable: list[dict[str, Any]], others: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if not splittable:
        return others
    split = _split_entities(splittable, others)
    return _sort(others + split) if others else split


def _fix_entities(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    entities = _sort(entities)
    if _entities_valid(entities):
        return entities
    splittable = [e for e in entities if e["type"] in _SPLITTABLE]
    blockquotes = [e for e in entities if e["type"] in _BLOCKQUOTES]
    others = _remove_intersecting(
        [e for e in entities if e["type"] not in _SPLITTABLE and e["type"] not in _BLOCKQUOTES]
    )
    if blockquotes:
        blockquotes = _remove_intersecting(blockquotes)
        others = _sort(_remove_intersecting_blockquote(others, blockquotes) + blockquotes)
    return _resplit(splittable, others)


def _merge_new(entities: list[dict[str, Any]], found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tdlib's merge_new_entities: found entities never cross code, pre or links."""
    if not found:
        return entities
    splittable = [e for e in entities if e["type"] in _SPLITTABLE]
    blockquotes = [e for e in entities if e["type"] in _BLOCKQUOTES]
    others = [e for e in entities if e["type"] not in _SPLITTABLE and e["type"] not in _BLOCKQUOTES]
    found = _remove_intersecting_blockquote(found, blockquotes)
    merged = _sort(
        others
        + [
            f
            for f in found
            if not any(f["offset"] < _end(o) and o["offset"] < _end(f) for o in others)
        ]
    )
    if blockquotes:
        merged = _sort(merged + blockquotes)
    return _resplit(splittable, merged)


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


_COMMAND = re.compile(r"/([A-Za-z0-9_]+)(@[A-Za-z0-9_]+)?")

_MENTION = re.compile(r"@([A-Za-z0-9_]+)")

_HASHTAG = re.compile(r"#([\w\u200c]+)")

_CASHTAG = re.compile(r"\$(1INCH|[A-Z]+)")

_URL = re.compile(r"(?:(?:https?|ftp|tg)://|www\.)[^\s<>\"]+", re.IGNORECASE)

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")


def _find_entities(text: str) -> list[dict[str, Any]]:
    """Telegram's automatic entities (a simplified tdlib find_entities); UTF-16 offsets."""
    found: list[tuple[str, int, int]] = []

    def before(i: int) -> str:
        return text[i - 1] if i > 0 else ""

    def after(i: int) -> str:
        return text[i] if i < len(text) else ""

    for m in _COMMAND.finditer(text):
        prev, nxt = before(m.start()), after(m.end())
        if (prev and (_is_word(prev) or prev in "/<>")) or len(m.group(1)) > 64:
            continue
        if m.group(2) and not 3 <= len(m.group(2)) - 1 <= 32:
            continue
        if nxt and (_is_word(nxt) or nxt in "/<>"):
            continue
        found.append(("bot_command", m.start(), m.end()))
    for m in _MENTION.finditer(text):
        prev, nxt = before(m.start()), after(m.end())
        if (prev and _is_word(prev)) or not 5 <= len(m.group(1)) <= 32 or (nxt and _is_word(nxt)):
            continue
        found.append(("mention", m.start(), m.end()))
    for m in _HASHTAG.finditer(text):
        prev, nxt = before(m.start()), after(m.end())
        body = m.group(1)
        if (prev and _is_word(prev)) or nxt == "#" or not any(ch.isalpha() for ch in body):
            continue
        found.append(("hashtag", m.start(), m.start() + 1 + min(len(body), 256)))
    for m in _CASHTAG.finditer(text):
        prev, nxt = before(m.start()), after(m.end())
        if len(m.group(1)) > 8 or (prev and (_is_word(prev) or prev == "$")):
            continue
        if nxt and (_is_word(nxt) or nxt == "$"):
            continue
        found.append(("cashtag", m.start(), m.end()))
    for m in _URL.finditer(text):
        if m.start() > 0 and (_is_word(before(m.start())) or before(m.start()) in "@/."):
            continue
        url = m.group(0).rstrip(".,:;!?'\"")
        while url.endswith(")") and url.count(")") > url.count("("):
            url = url[:-1].rstrip(".,:;!?'\"")
        try:
            _check_link(url if "://" in url else "http://" + url)
        except ValueError:
            continue
        found.append(("url", m.start(), m.start() + len(url)))
    for m in _EMAIL.finditer(text):
        if m.start() > 0 and _is_word(before(m.start())):
            continue
        found.append(("email", m.start(), m.end()))
    prefix = [0]
    for ch in text:
        prefix.append(prefix[-1] + (2 if ord(ch) > 0xFFFF else 1))
    entities = [_entity(kind, prefix[s], prefix[e] - prefix[s]) for kind, s, e in found]
    return _remove_intersecting(_sort(entities))
