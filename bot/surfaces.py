"""The registry of surfaces: every chat or web surface the core knows of, by name.

A surface declares itself once, in a light module of its own beside its channel
(`channels/<name>/surface.py`, which imports no SDK): the name that prefixes its notify
targets and names its config table and the principal's account key, the model of that table,
the grammar of its notify targets, how a principal's account on it is written and which
accounts it refuses, the check of its credentials at startup, and the factory of its channel
(which imports the SDK only when a deployment configures the surface). The core reads all of
that here and names no surface itself; `BUILT_IN` lists the declaration modules by import
path, so importing bot/ never imports a channel.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:  # bot/ never imports a channel at run time; factories hand them in
    from bot.chat_memory import ChatMemory
    from bot.clock import Clock
    from bot.delegations import Delegations
    from bot.operator import Operator
    from bot.routing import Directory
    from channels.base import Channel
    from store.repository import Store

# The declaration modules of the surfaces signoff ships, in the order their notify targets
# are listed in error messages. Each defines SURFACE, a `Surface`.
BUILT_IN = (
    "channels.slack.surface",
    "channels.telegram.surface",
    "channels.web.surface",
    "channels.email.surface",
)


@dataclass(frozen=True, slots=True)
class StartupCheck:
    """What a surface's credential check may need besides its table."""

    # Fetch updates instead of serving a webhook (`serve --telegram-polling`, say).
    polling: bool
    database_url: str


@dataclass
class Services:
    """What a surface's factory builds its channel from: the core services, the surface's
    own config table, and the other configured channels (built on demand)."""

    table: Any
    public_url: str
    store: Store
    directory: Directory
    clock: Clock
    operator: Operator
    delegations: Delegations
    memory: ChatMemory
    polling: bool
    channel: Callable[[str], Channel | None]


@dataclass(frozen=True, slots=True, eq=False)
class Surface:
    """One surface's declaration (see the module docstring); equal only to itself."""

    name: str
    # The pydantic model of its `[name]` table: present in the config means served.
    config: type[BaseModel]
    # Builds its channel when its table is configured; imports its SDK only then.
    factory: Callable[[Services], Channel]
    # How each notify target form is written, for the error naming every valid form.
    target_forms: tuple[str, ...]
    # Where something done on it happened, after a time ("... at 10:00 UTC in Slack").
    where: str = ""
    # What may follow `name:` in a notify target (a regular expression); None: the bare name.
    target_pattern: str | None = None
    # Whether a notify target `name:WHERE` other than `name:dm` names a principal by key
    # (`email:alice`): the config then refuses one naming nobody, or someone without an
    # account here, so a route can reach only configured people.
    targets_principals: bool = False
    # The annotation (pydantic) of a principal's account on it (`name = ...` in their
    # table); None: nobody has an account here and no card is personal.
    account: Any = None
    # Why an account that validates must still be refused (None: it is accepted).
    refuse_account: Callable[[Any], str | None] = lambda _account: None
    # Refuses (ConfigError) or warns about its credentials before anything touches the
    # database; called for every registered surface, its table None when not configured.
    check: Callable[[Any, StartupCheck], None] = lambda _table, _options: None
    # What `signoff config check` asks the platform besides (warnings in the log); called
    # only when the surface's table is configured, with the table and the whole Config
    # (bot.config.Config: not named here, as bot.config reads this registry to check a
    # config, and the registry sits below it).
    probe: Callable[[Any, Any], Awaitable[None]] | None = None
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = re.compile(self.target_pattern) if self.target_pattern is not None else None
        object.__setattr__(self, "_pattern", pattern)

    @property
    def personal(self) -> bool:
        """Whether it can reach one principal directly (`name:dm`, `name:@principal`)."""
        return self.account is not None

    def accepts(self, where: str | None) -> bool:
        """Whether `where` (what follows `name:`, None for the bare name) is a valid notify
        target on this surface."""
        if self._pattern is None:
            return where is None
        return where is not None and self._pattern.fullmatch(where) is not None


_extra: list[Surface] = []
_built_in: tuple[Surface, ...] | None = None


def registered() -> tuple[Surface, ...]:
    """Every surface: the built-in ones, then any registered since (a test's)."""
    global _built_in
    if _built_in is None:
        _built_in = tuple(importlib.import_module(path).SURFACE for path in BUILT_IN)
    return (*_built_in, *_extra)


def find(name: str) -> Surface | None:
    return next((s for s in registered() if s.name == name), None)


def personal() -> tuple[Surface, ...]:
    """The surfaces that can reach one principal directly, in registry order."""
    return tuple(s for s in registered() if s.personal)


def valid_target(text: str) -> bool:
    """Whether `text` is a notify target some registered surface accepts."""
    name, colon, where = text.partition(":")
    surface = find(name)
    return surface is not None and surface.accepts(where if colon else None)


def target_forms() -> str:
    """Every valid notify target form, for the error that names them."""
    forms = [form for s in registered() for form in s.target_forms]
    return ", ".join(forms[:-1]) + f" or {forms[-1]}" if len(forms) > 1 else "".join(forms)


@contextmanager
def registering(surface: Surface) -> Iterator[Surface]:
    """A surface added to the registry for a while (a test's, or a plug-in's)."""
    if find(surface.name) is not None:
        raise ValueError(f"surface {surface.name!r} is registered already")
    _extra.append(surface)
    try:
        yield surface
    finally:
        _extra.remove(surface)


class Channels(Mapping[str, "Channel"]):
    """The channels one process runs, by surface name, in registry order."""

    def __init__(self, channels: Mapping[str, Channel] | None = None) -> None:
        self._channels: dict[str, Channel] = dict(channels or {})

    def __getitem__(self, name: str) -> Channel:
        return self._channels[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._channels)

    def __len__(self) -> int:
        return len(self._channels)

    def __repr__(self) -> str:
        return f"Channels({list(self._channels)})"
