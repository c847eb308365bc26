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

        return Operator(self.store, self.directory, self.clock)

    @property
    def delegations(self) -> Delegations:
        from bot.delegations import Delegations

        return Delegations(self.store, self.directory, self.clock)


Handler = Callable[[Context, argparse.Namespace], Awaitable[int]]
