"""Characters that change what text looks like without being seen, shown as `\\uXXXX`.

Text an agent chose (a title, a field, an argument, the reason) reaches a human on every
surface. Bidirectional controls reorder what is displayed ("Trojan Source": U+202E makes
"€1 0009" read "€9000 1"); zero-width characters hide inside words (`delete_customer` and
`delete_cust\\u200bomer` look alike); C1 controls and line separators move or break lines.
Every surface (the CLI, the web pages, Slack and Telegram cards) shows each of them as the
escape `\\u202e`, so the human sees that something odd was sent. Only what is shown changes:
the request, and the hash the human approves, keep the characters the agent sent.

The price: a zero-width joiner inside an emoji sequence (👩\\u200d💻) or a zero-width
non-joiner in Persian text is shown as its escape too.
"""

from __future__ import annotations

import re
from typing import Any

# Bidirectional controls: U+061C (Arabic letter mark), U+200E/U+200F (LRM, RLM), U+202A-U+202E
# (embeddings and overrides), U+2066-U+2069 (isolates). Zero width: U+200B-U+200D (space,
# non-joiner, joiner), U+2060 (word joiner), U+FEFF (no-break space, the BOM). Also DEL and
# the C1 controls (U+009B is a terminal's CSI) and U+2028/U+2029 (line, paragraph separator).
HIDDEN = "\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff"
# C0 controls but tab, line feed and carriage return, which lay out multi-line text.
_C0_BUT_LAYOUT = "\x00-\x08\x0b\x0c\x0e-\x1f"

_SHOWN = re.compile(f"[{_C0_BUT_LAYOUT}{HIDDEN}]")
_ONE_LINE = re.compile(f"[\\x00-\\x1f{HIDDEN}]")
_HIDDEN = re.compile(f"[{HIDDEN}]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def visible(text: Any) -> str:
    """`text` as a surface shows it: every character that hides, reorders or controls shown
    as `\\uXXXX`; tabs and line breaks kept (pages and chat cards lay out multi-line text)."""
    return _SHOWN.sub(_escape, str(text))


def one_line(text: Any) -> str:
    """`text` for a terminal line: as `visible`, and every C0 control escaped too, so agent
    text can neither drive the terminal (ANSI escapes) nor start a line of its own."""
    return _ONE_LINE.sub(_escape, str(text))


def in_json(text: str) -> str:
    """Serialised JSON with the characters `visible` escapes written as `\\uXXXX` escapes,
    the same JSON value (they occur only inside strings; json.dumps escapes C0 itself)."""
    return _HIDDEN.sub(_escape, text)
