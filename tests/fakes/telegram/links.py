"""Links as tdlib checks and normalizes them: text_link and button URLs, and the urls
Telegram finds in text."""

from __future__ import annotations

import re


def _check_link(url: str) -> str:
    """tdlib's LinkManager::check_link: the normalized link, or ValueError(reason)."""
    if url.lower().startswith("tg:"):
        rest = url[3:].removeprefix("//")
        if not re.match(r"[A-Za-z0-9_-]+", rest):
            raise ValueError("Wrong tg URL")
        return "tg://" + rest
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "http", url
    if scheme.lower() not in ("http", "https"):
        raise ValueError("Unsupported URL protocol")
    match = re.match(r"(?:[^@/?#]*@)?([^:/?#]*)(:\d+)?(.*)", rest, re.S)
    if match is None or not match.group(1):
        raise ValueError("URL host is empty")
    host, port, tail = match.group(1).lower(), match.group(2) or "", match.group(3)
    if not re.fullmatch(r"[\w.~%-]+", host):
        raise ValueError("Wrong URL host")
    if "." not in host:
        raise ValueError("Wrong HTTP URL")
    if not tail.startswith("/"):
        tail = "/" + tail
    return f"{scheme.lower()}://{host}{port}{tail}"
