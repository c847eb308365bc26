"""The text of a message as a bot sends it: parse_mode or the entities argument, then
tdlib's fix_formatted_text and Telegram's length limit."""

from __future__ import annotations

from typing import Any

from tests.fakes.telegram.arguments import _bad_request
from tests.fakes.telegram.entities import (
    _ENTITY_TYPES,
    _PRIORITY,
    _end,
    _entity,
    _find_entities,
    _fix_entities,
    _merge_new,
    _sort,
    _u16,
)
from tests.fakes.telegram.html_parser import _parse_html, _ParseError
from tests.fakes.telegram.links import _check_link

MAX_TEXT_LENGTH = 4096


def _input_entities(text: str, value: Any) -> list[dict[str, Any]]:
    """Entities given as the ``entities`` argument, checked as the Bot API checks them."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad_request("Can't parse entities JSON object")
    prefix = "Can't parse MessageEntity: "
    entities = []
    for item in value:
        if not isinstance(item, dict):
            raise _bad_request(prefix + "Object expected as MessageEntity")
        kind = item.get("type")
        if kind not in _ENTITY_TYPES:
            raise _bad_request(prefix + "Unsupported type specified")
        for name in ("offset", "length"):
            if not isinstance(item.get(name), int) or isinstance(item.get(name), bool):
                raise _bad_request(prefix + f'Field "{name}" must be a valid Number')
        entity = _entity(kind, item["offset"], item["length"])
        if kind == "text_link":
            if not isinstance(item.get("url"), str):
                raise _bad_request(prefix + 'Can\'t find field "url"')
            try:
                entity["url"] = _check_link(item["url"])
            except ValueError as exc:
                reason = "URL host is empty" if not item["url"] else str(exc)
                raise _bad_request(f"Entity URL '{item['url']}' is invalid: {reason}") from None
        elif kind == "pre" and item.get("language"):
            entity["language"] = str(item["language"])
        elif kind == "custom_emoji":
            if "custom_emoji_id" not in item:
                raise _bad_request(prefix + 'Can\'t find field "custom_emoji_id"')
            entity["custom_emoji_id"] = str(item["custom_emoji_id"])
        elif kind == "text_mention":
            if not isinstance(item.get("user"), dict):
                raise _bad_request(prefix + 'Can\'t find field "user"')
            entity["user"] = item["user"]
        elif kind not in _PRIORITY:
            continue  # Telegram finds these itself and ignores the ones given.
        entities.append(entity)
    total = _u16(text)
    for entity in entities:
        if entity["offset"] < 0 or entity["offset"] > 1_000_000:
            raise _bad_request(f"Receive an entity with incorrect offset {entity['offset']}")
        if entity["length"] < 0 or entity["length"] > 1_000_000:
            raise _bad_request(f"Receive an entity with incorrect length {entity['length']}")
    for entity in _sort([e for e in entities if e["length"] > 0]):
        if entity["offset"] > total:
            raise _bad_request(
                f"Entity begins after the end of the text at UTF-16 offset {entity['offset']}"
            )
        if _end(entity) > total:
            raise _bad_request(
                f"Entity beginning at UTF-16 offset {entity['offset']} ends after the end of the "
                f"text at UTF-16 offset {_end(entity)}"
            )
    return entities


def _parse_input(text: str, parse_mode: Any, entities: Any) -> tuple[str, list[dict[str, Any]]]:
    """The text and entities of a message as sent: parse_mode wins over entities."""
    mode = str(parse_mode or "").lower()
    if mode and mode != "none":
        if mode == "html":
            try:
                return _parse_html(text)
            except _ParseError as exc:
                raise _bad_request(f"Can't parse entities: {exc}") from None
        if mode in ("markdown", "markdownv2"):
            raise _bad_request(f"FakeTelegram does not implement parse_mode {parse_mode}; use HTML")
        raise _bad_request("Unsupported parse_mode")
    return text, _input_entities(text, entities)


def _finish_text(text: str, entities: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """tdlib's fix_formatted_text for a message a bot sends, then the length limit."""
    entities = [e for e in entities if e["length"] > 0]
    if entities:
        entities = _fix_entities(entities)
    text, entities = _clean_text(text, entities)
    entities = [e for e in entities if e["length"] > 0]
    last = max((i for i, ch in enumerate(text) if ch not in " \n"), default=-1)
    if last < 0:
        raise _bad_request("Text must be non-empty")
    entities = _fix_entities(entities) if entities else entities
    text = text[: last + 1]
    total = _u16(text)
    entities = [e for e in entities if e["offset"] < total]
    for entity in entities:
        entity["length"] = min(_end(entity), total) - entity["offset"]
    entities = _sort(entities)
    first_entity = entities[0]["offset"] if entities else total
    lead = 0
    while lead < first_entity and text[lead] in " \n":
        lead += 1
    if lead:
        text = text[lead:]
        for entity in entities:
            entity["offset"] -= lead
    if _u16(text) > MAX_TEXT_LENGTH:
        raise _bad_request("Message is too long")
    entities = _merge_new(entities, _find_entities(text))
    return text, [_entity_out(e) for e in entities]


def _entity_out(entity: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entity.items() if not k.startswith("_")}


def _clean_text(text: str, entities: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """tdlib's clean_input_string: control characters become spaces, some are dropped."""
    out: list[str] = []
    old_to_new: list[int] = []
    new_pos = 0
    for ch in text:
        code = ord(ch)
        width = 2 if code > 0xFFFF else 1
        if code == 0x0D or 0x2028 <= code <= 0x202E or code in (0x0333, 0x033F, 0x030A):
            old_to_new.extend([new_pos] * width)
            continue
        if code < 0x20 and code != 0x0A:
            ch = " "
        old_to_new.extend(range(new_pos, new_pos + width))
        new_pos += width
        out.append(ch)
    old_to_new.append(new_pos)
    for entity in entities:
        start = old_to_new[min(entity["offset"], len(old_to_new) - 1)]
        stop = old_to_new[min(_end(entity), len(old_to_new) - 1)]
        entity["offset"], entity["length"] = start, stop - start
    return "".join(out), entities
