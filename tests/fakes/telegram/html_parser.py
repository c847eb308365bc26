"""parse_mode=HTML: a port of tdlib's parse_html, failing with Telegram's words."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.telegram.entities import _entity, _sort
from tests.fakes.telegram.links import _check_link

_HTML_TAGS = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "s",
        "strike",
        "del",
        "u",
        "ins",
        "tg-spoiler",
        "tg-emoji",
        "span",
        "pre",
        "code",
        "blockquote",
    }
)

_HTML_ENTITIES = {b"lt": 0x3C, b"gt": 0x3E, b"amp": 0x26, b"quot": 0x22}


class _ParseError(Exception):
    pass


def _is_space(c: int) -> bool:
    # tdlib's is_space counts the terminating NUL, which stops every scan at the end.
    return c in (0x20, 0x09, 0x0D, 0x0A, 0x00, 0x0B)


def _is_alpha(c: int) -> bool:
    return 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A


def _is_alnum(c: int) -> bool:
    return _is_alpha(c) or 0x30 <= c <= 0x39


def _decode_html_entity(t: bytes, pos: int) -> tuple[int, int]:
    """(code point, position after it), or (0, pos) when no entity starts at pos."""
    if t[pos] != 0x26:
        return 0, pos
    end = pos + 1
    code = 0
    if t[pos + 1] == 0x23:
        end += 1
        if t[pos + 2] == 0x78:
            end += 1
            while chr(t[end]) in "0123456789abcdefABCDEF":
                code = code * 16 + int(chr(t[end]), 16)
                end += 1
        else:
            while 0x30 <= t[end] <= 0x39:
                code = code * 10 + t[end] - 0x30
                end += 1
        if code == 0 or code >= 0x10FFFF or end - pos >= 10:
            return 0, pos
    else:
        while _is_alpha(t[end]):
            end += 1
        code = _HTML_ENTITIES.get(t[pos + 1 : end], 0)
        if code == 0:
            return 0, pos
    if t[end] == 0x3B:
        end += 1
    return code, end


def _parse_html(text: str) -> tuple[str, list[dict[str, Any]]]:
    """tdlib's parse_html: the plain text and its entities, or _ParseError(Telegram's words)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise _ParseError("Strings must be encoded in UTF-8") from None
    size = len(data)
    t = data + b"\0"
    out = bytearray()
    entities: list[dict[str, Any]] = []
    stack: list[tuple[str, str, int, int]] = []
    utf16 = 0
    has_surrogates = False
    i = 0
    while i < size:
        c = t[i]
        if c == 0x26:
            code, after = _decode_html_entity(t, i)
            if code:
                utf16 += 1 + (code > 0xFFFF)
                has_surrogates = has_surrogates or 0xD800 <= code <= 0xDFFF
                out += chr(code).encode("utf-8", "surrogatepass")
                i = after
                continue
        if c != 0x3C:
            if c & 0xC0 != 0x80:
                utf16 += 1 + (c >= 0xF0)
            out.append(c)
            i += 1
            continue
        begin = i
        i += 1
        if t[i] != 0x2F:
            while not _is_space(t[i]) and t[i] != 0x3E:
                i += 1
            if t[i] == 0:
                raise _ParseError(f"Unclosed start tag at byte offset {begin}")
            tag = t[begin + 1 : i].lower().decode("utf-8", "replace")
            if tag not in _HTML_TAGS:
                raise _ParseError(f'Unsupported start tag "{tag}" at byte offset {begin}')
            argument = ""
            while t[i] != 0x3E:
                while t[i] != 0 and _is_space(t[i]):
                    i += 1
                if t[i] == 0x3E:
                    break
                attr_begin = i
                while not _is_space(t[i]) and t[i] not in (0x3D, 0x3E, 0x2F, 0x22, 0x27):
                    i += 1
                attr = t[attr_begin:i]
                if not attr:
                    raise _ParseError(
                        f'Empty attribute name in the tag "{tag}" at byte offset {begin}'
                    )
                while t[i] != 0 and _is_space(t[i]):
                    i += 1
                if t[i] != 0x3D:
                    if t[i] == 0:
                        raise _ParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                    if tag == "blockquote" and attr == b"expandable":
                        argument = "1"
                    continue
                i += 1
                while t[i] != 0 and _is_space(t[i]):
                    i += 1
                if t[i] == 0:
                    raise _ParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                value = bytearray()
                if t[i] not in (0x22, 0x27):
                    token_begin = i
                    while _is_alnum(t[i]) or t[i] in (0x2E, 0x2D):
                        i += 1
                    value += t[token_begin:i].lower()
                    if not _is_space(t[i]) and t[i] != 0x3E:
                        raise _ParseError(
                            f"Unexpected end of name token at byte offset {token_begin}"
                        )
                else:
                    quote = t[i]
                    i += 1
                    while t[i] != quote and t[i] != 0:
                        if t[i] == 0x26:
                            code, after = _decode_html_entity(t, i)
                            if code:
                                value += chr(code).encode("utf-8", "surrogatepass")
                                i = after
                                continue
                        value.append(t[i])
                        i += 1
                    if t[i] == quote:
                        i += 1
                if t[i] == 0:
                    raise _ParseError(f"Unclosed start tag at byte offset {begin}")
                decoded = bytes(value).decode("utf-8", "replace")
                if tag == "a" and attr == b"href":
                    argument = decoded
                elif tag == "code" and attr == b"class" and decoded.startswith("language-"):
                    argument = decoded[9:]
                elif tag == "span" and attr == b"class" and decoded.startswith("tg-"):
                    argument = decoded[3:]
                elif tag == "tg-emoji" and attr == b"emoji-id":
                    argument = decoded
                elif tag == "blockquote" and attr == b"expandable":
                    argument = "1"
            if tag == "span" and argument != "spoiler":
                raise _ParseError(f'Tag "span" must have class "tg-spoiler" at byte offset {begin}')
            stack.append((tag, argument, utf16, len(out)))
            i += 1
            continue
        if not stack:
            raise _ParseError(f"Unexpected end tag at byte offset {begin}")
        while not _is_space(t[i]) and t[i] != 0x3E:
            i += 1
        end_tag = t[begin + 2 : i].lower().decode("utf-8", "replace")
        while _is_space(t[i]) and t[i] != 0:
            i += 1
        if t[i] != 0x3E:
            raise _ParseError(f"Unclosed end tag at byte offset {begin}")
        tag, argument, offset, out_begin = stack[-1]
        if end_tag and end_tag != tag:
            raise _ParseError(
                f'Unmatched end tag at byte offset {begin}, expected "</{tag}>", '
                f'found "</{end_tag}>"'
            )
        if utf16 > offset:
            entity = _html_entity(tag, argument, offset, utf16 - offset, out, out_begin, entities)
            if entity is not None:
                entities.append(entity)
        stack.pop()
        i += 1
    if stack:
        raise _ParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    for entity in entities:
        entity.pop("_language", None)
    try:
        result = bytes(out).decode("utf-8")
    except UnicodeDecodeError:
        raise _ParseError("Strings must be encoded in UTF-8") from None
    if has_surrogates:
        raise _ParseError(
            "Text contains invalid Unicode characters after decoding HTML entities, check for "
            "unmatched surrogate code units"
        )
    return result, _sort(entities)


def _html_entity(
    tag: str,
    argument: str,
    offset: int,
    length: int,
    out: bytearray,
    out_begin: int,
    entities: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """The entity a closed tag makes; pre and code of the same span merge into one pre."""
    simple = {
        "b": "bold",
        "strong": "bold",
        "i": "italic",
        "em": "italic",
        "u": "underline",
        "ins": "underline",
        "s": "strikethrough",
        "strike": "strikethrough",
        "del": "strikethrough",
        "tg-spoiler": "spoiler",
        "span": "spoiler",
    }
    if tag in simple:
        return _entity(simple[tag], offset, length)
    if tag == "tg-emoji":
        if not re.fullmatch(r"\d{1,19}", argument) or not 0 < int(argument) < 2**63:
            raise _ParseError("Invalid custom emoji identifier specified")
        return _entity("custom_emoji", offset, length, custom_emoji_id=argument)
    if tag == "a":
        url = argument or bytes(out[out_begin:]).decode("utf-8", "replace")
        try:
            return _entity("text_link", offset, length, url=_check_link(url))
        except ValueError:
            return None
    last = entities[-1] if entities else None
    same_span = last is not None and last["offset"] == offset and last["length"] == length
    if tag == "pre":
        if same_span and last["type"] == "code" and last.get("_language"):
            entities[-1] = _entity("pre", offset, length, language=last["_language"])
            return None
        return _entity("pre", offset, length)
    if tag == "code":
        if same_span and last["type"] == "pre" and argument:
            last["language"] = argument
            return None
        return _entity("code", offset, length, _language=argument)
    kind = "expandable_blockquote" if argument else "blockquote"
    return _entity(kind, offset, length)
