"""Where a card or a notice goes: a route's notify target, parsed once.

A target is a surface and a place on it: `slack:C0FINANCE` (a channel), `telegram:-100123`
(a group), `telegram:-100123/42` (topic 42 of a forum supergroup), `slack:dm` (each
approver's direct messages, which the outbox expands into one `slack:@alice` per person),
`slack:@alice` (one principal's direct messages) or `web`.
Config checks which surfaces and places are valid; this type only splits them, so no caller
has to know the syntax.
"""

from __future__ import annotations

from dataclasses import dataclass

DM = "dm"


@dataclass(frozen=True, slots=True)
class Target:
    surface: str  # "slack", "telegram", "web": the channel that delivers it
    where: str  # a channel or chat id, "dm", "@principal", or "" (web)

    @classmethod
    def parse(cls, text: str) -> Target:
        surface, _, where = text.partition(":")
        return cls(surface, where)

    @classmethod
    def personal(cls, surface: str, principal: str) -> Target:
        """One principal's direct messages on `surface`."""
        return cls(surface, f"@{principal}")

    @property
    def every_approver(self) -> bool:
        """`slack:dm`: one message per approver, each in their own direct messages."""
        return self.where == DM

    @property
    def chat(self) -> str:
        """The place without a topic: `telegram:-100123/42` -> "-100123"."""
        return self.where.partition("/")[0]

    @property
    def thread(self) -> int | None:
        """The forum topic of `telegram:CHAT_ID/THREAD_ID` (its message_thread_id), else None."""
        _, slash, thread = self.where.partition("/")
        return int(thread) if slash and thread.isdigit() else None

    @property
    def principal(self) -> str | None:
        """The principal of a personal target (`slack:@alice` -> "alice"), else None."""
        return self.where[1:] if self.where.startswith("@") else None

    def __str__(self) -> str:
        return f"{self.surface}:{self.where}" if self.where else self.surface
