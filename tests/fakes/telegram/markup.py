"""Reply markup as the Bot API parses it (its get_reply_markup), and the checks Telegram
makes of an inline keyboard once the chat is known."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fakes.telegram.arguments import _bad_request
from tests.fakes.telegram.links import _check_link

MAX_CALLBACK_DATA_BYTES = 64


@dataclass
class _Markup:
    kind: str  # "inline", "keyboard", "remove" or "force_reply"
    rows: list[list[dict[str, Any]]]


_INLINE_ACTIONS = (
    "callback_game",
    "pay",
    "switch_inline_query",
    "switch_inline_query_chosen_chat",
    "switch_inline_query_current_chat",
    "login_url",
    "web_app",
    "copy_text",
)


def _reply_markup(value: Any) -> _Markup | None:
    """The markup as the Bot API parses it (get_reply_markup); syntax errors raise here."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad_request("Object expected as reply markup")
    for name in ("keyboard", "inline_keyboard"):
        if name in value and not isinstance(value[name], list):
            raise _bad_request(f'Field "{name}" must be of type Array')
    rows: list[list[dict[str, Any]]] = []
    for row in value.get("keyboard") or []:
        if not isinstance(row, list):
            raise _bad_request('Field "keyboard" must be an Array of Arrays')
        rows.append([_keyboard_button(b) for b in row])
    inline_rows: list[list[dict[str, Any]]] = []
    for row in value.get("inline_keyboard") or []:
        if not isinstance(row, list):
            raise _bad_request(
                'Field "inline_keyboard" of the InlineKeyboardMarkup must be an Array of Arrays'
            )
        inline_rows.append([_inline_button(b) for b in row])
    flags = {}
    for name in (
        "hide_keyboard",
        "remove_keyboard",
        "personal_keyboard",
        "selective",
        "force_reply_keyboard",
        "force_reply",
        "resize_keyboard",
        "one_time_keyboard",
        "is_persistent",
    ):
        flag = value.get(name, False)
        if not isinstance(flag, bool):
            raise _bad_request(f'Field "{name}" must be of type Boolean')
        flags[name] = flag
    placeholder = value.get("input_field_placeholder", "")
    if not isinstance(placeholder, str):
        raise _bad_request('Field "input_field_placeholder" must be of type String')
    if rows:
        return _Markup("keyboard", rows)
    if inline_rows:
        return _Markup("inline", inline_rows)
    if flags["hide_keyboard"] or flags["remove_keyboard"]:
        return _Markup("remove", [])
    if flags["force_reply"] or flags["force_reply_keyboard"]:
        return _Markup("force_reply", [])
    # An empty inline_keyboard is no markup at all: how a keyboard is removed by an edit.
    return None


def _keyboard_button(button: Any) -> dict[str, Any]:
    if isinstance(button, str):
        return {"text": button}
    if not isinstance(button, dict):
        raise _bad_request(
            "Can't parse keyboard button: KeyboardButton must be a String or an Object"
        )
    if "text" not in button:
        raise _bad_request("Can't parse keyboard button: Can't find field \"text\"")
    if not isinstance(button["text"], str):
        raise _bad_request('Can\'t parse keyboard button: Field "text" must be of type String')
    return dict(button)


def _inline_button(button: Any) -> dict[str, Any]:
    prefix = "Can't parse inline keyboard button: "
    if not isinstance(button, dict):
        raise _bad_request(prefix + "InlineKeyboardButton must be an Object")
    if "text" not in button:
        raise _bad_request(prefix + 'Can\'t find field "text"')
    if not isinstance(button["text"], str):
        raise _bad_request(prefix + 'Field "text" must be of type String')
    # The Bot API takes the first action present in this order and ignores any other.
    for name in ("url", "callback_data"):
        action = button.get(name)
        if action is not None and not isinstance(action, str):
            raise _bad_request(prefix + f'Field "{name}" must be of type String')
        if action:
            return {"text": button["text"], name: action}
    for name in _INLINE_ACTIONS:
        if name in button:
            return {"text": button["text"], name: button[name]}
    raise _bad_request(prefix + "Text buttons are unallowed in the inline keyboard")


def _check_markup_content(markup: _Markup | None) -> dict[str, Any] | None:
    """Checks Telegram makes once the chat is known; the markup a Message echoes, if any."""
    if markup is None or markup.kind != "inline":
        return None
    echoed_rows = []
    for row in markup.rows:
        echoed_row = []
        for button in row:
            echoed = dict(button)
            if "callback_data" in echoed:
                size = len(echoed["callback_data"].encode("utf-8"))
                if size > MAX_CALLBACK_DATA_BYTES:
                    raise _bad_request("BUTTON_DATA_INVALID")
            elif "url" in echoed:
                try:
                    echoed["url"] = _check_link(echoed["url"])
                except ValueError as exc:
                    raise _bad_request(
                        f"Inline keyboard button URL '{echoed['url']}' is invalid: {exc}"
                    ) from None
            elif "web_app" in echoed:
                url = str((echoed["web_app"] or {}).get("url", ""))
                if not url.lower().startswith("https://"):
                    raise _bad_request(
                        f"Inline keyboard button Web App URL '{url}' is invalid: "
                        "Only HTTPS links are allowed"
                    )
            elif "copy_text" in echoed:
                copied = str((echoed["copy_text"] or {}).get("text", ""))
                if not 1 <= len(copied) <= 256:
                    raise _bad_request("BUTTON_COPY_TEXT_INVALID")
            elif "pay" in echoed or "callback_game" in echoed:
                raise _bad_request("BUTTON_TYPE_INVALID")
            echoed_row.append(echoed)
        echoed_rows.append(echoed_row)
    return {"inline_keyboard": echoed_rows}


def _inline_only(markup: _Markup | None) -> dict[str, Any] | None:
    if markup is not None and markup.kind != "inline":
        raise _bad_request("Inline keyboard expected")
    return _check_markup_content(markup)
