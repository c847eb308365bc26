"""What every command that reads or writes the database is handed, and the exit status of a
refusal."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.clock import Clock
    from bot.config import Config
    from bot.delegations import Delegations
    from bot.operator import Operator
    from bot.routing import Directory
    from store.repository import Store

# An expected failure: one line on stderr says what happened and what to do. Usage errors
# exit 2 (argparse's own).
EXIT_REFUSED = 1


@dataclass
class Context:
    config: Config
    store: Store
    directory: Directory
    clock: Clock

    @property
    def operator(self) -> Operator:
        from bot.operator import Operator

        with_outbox()
        return Operator(self.store, self.directory, self.clock)

    @property
    def delegations(self) -> Delegations:
        from bot.delegations import Delegations

        with_outbox()
        return Delegations(self.store, self.directory, self.clock)


def with_outbox() -> None:
    """A command that changes requests queues what the change causes through the outbox
    (bot.effects), which importing bot.outbox installs; only such commands import it, so
    `approvals list` and `show` load nothing of the server."""
    import bot.outbox  # noqa: F401


Handler = Callable[[Context, argparse.Namespace], Awaitable[int]]
