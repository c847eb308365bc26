"""A Telegram group upgraded to a supergroup: its messages keep their ids under a new chat id.

The card records follow the chat at once (so presses in the new chat find their cards), and
the operator is told when a route still names the old id, which would make every new card
fail there first.
"""

from __future__ import annotations

import logging

from bot.chat_memory import ChatMemory
from bot.routing import Directory

log = logging.getLogger("signoff.telegram")


async def moved(
    memory: ChatMemory,
    directory: Directory,
    old: int | str | None,
    new: int,
    *,
    announce: bool = False,
) -> None:
    """Move the card records of chat `old` to `new`, and tell the operator when a route
    still names the old id (every new card would otherwise first fail there): when cards
    moved, or when `announce` (once per migration, not for each of its two messages)."""
    if old is None or str(old) == str(new):
        return
    moved = await memory.move_cards("telegram", str(old), str(new))
    stale = sorted(
        {
            str(target)
            for route in directory.routes
            for target in route.notify
            if target.surface == "telegram" and target.chat == str(old)
        }
    )
    if moved or (stale and announce):
        log.warning(
            "Telegram group %s was upgraded to a supergroup with chat id %s; %d card(s) "
            "moved there.%s",
            old,
            new,
            moved,
            f" The configured notify target(s) {', '.join(stale)} name the old id: change "
            f"them to telegram:{new}."
            if stale
            else "",
        )
