"""Who may decide what: principals, groups, tenants, routes, and the eligibility rule.

Pure data and functions, built from validated config (bot.config). Eligibility lives in one
function, `check_eligible`, evaluated inside the deciding transaction; delegation and
escalation (a later issue) extend it there and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from fnmatch import fnmatchcase
from typing import Any

from bot.conditions import Condition
from bot.errors import NoRoute, NotAnApprover, SelfApproval, UnknownPrincipal, UnknownTenant
from bot.target import Target
from store.records import Approval, Candidate, Delegation, HomeChange

GROUP_PREFIX = "group:"


# A principal's identity on one surface: a user id, as that surface writes it.
Account = str | int


def person_key(name: str | None) -> str:
    """A name as the self-approval check compares it: `requested_by` is the agent's free
    text, so "Alice " and "ALICE" name the principal alice; empty when there is none."""
    return (name or "").strip().casefold()


@dataclass(frozen=True, slots=True)
class Principal:
    """A person who can decide, with the identities that prove it is them: their account on
    each surface that has accounts, by surface name (bot.surfaces)."""

    key: str
    name: str
    accounts: Mapping[str, Account] = field(default_factory=dict, hash=False)
    operator: bool = False  # may open the web dashboard

    def account(self, surface: str) -> Account | None:
        """Their identity on `surface`; None if they have none there."""
        return self.accounts.get(surface)


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    api_key_env: str | None = None
    embed_key_env: str | None = None
    webhook_url: str | None = None
    # The variables holding its webhook secrets: one, or two while rotating.
    webhook_secret_env: tuple[str, ...] = ()
    allow_private_callbacks: bool = False


@dataclass(frozen=True, slots=True)
class Escalation:
    after: timedelta
    to: str


@dataclass(frozen=True, slots=True)
class Route:
    tenant: str
    capability: str
    approvers: tuple[str, ...]
    notify: tuple[Target, ...] = ()
    approval_ttl: timedelta = timedelta(hours=72)
    grant_ttl: timedelta = timedelta(hours=24)
    required_approvals: int = 1
    allow_self_approval: bool = False
    confirm: bool = False  # Approve asks for confirmation first
    escalation: tuple[Escalation, ...] = ()
    # How long before a pending request expires its assignees are reminded (None: never).
    remind_before: timedelta | None = None
    # What an approver may change before approving: "none", "any", or these top-level
    # argument keys (changed, added or removed).
    edits: str | tuple[str, ...] = "none"
    # Standing grants from its cards: allowed (config default: unless a quorum is needed),
    # for at most this long, and whether a request a grant approves still posts its cards.
    grants: bool = True
    max_grant_lifetime: timedelta = timedelta(hours=8)
    notify_grant_uses: bool = True
    # Only calls whose arguments meet this condition (None: any call).
    when: Condition | None = None

    def matches(
        self, tenant: str, capability: str, arguments: Mapping[str, Any] | None = None
    ) -> bool:
        """Whether a request of `tenant` for `capability` with these arguments takes this
        route. A route with `when` takes only calls whose arguments are known and meet it."""
        if not (fnmatchcase(tenant, self.tenant) and fnmatchcase(capability, self.capability)):
            return False
        return self.when is None or (arguments is not None and self.when.holds(dict(arguments)))

    def edit_refusal(self, keys: Iterable[str]) -> str | None:
        """Why this route does not let an approver change these top-level argument keys (None:
        it does)."""
        if self.edits == "any":
            return None
        if self.edits == "none":
            return f'the route for {self.capability!r} allows no edits (edits = "none")'
        locked = sorted(k for k in set(keys) if k not in self.edits)
        if not locked:
            return None
        return (
            f"the route for {self.capability!r} lets approvers change only "
            f"{', '.join(self.edits)}; {', '.join(locked)} may not be changed"
        )


@dataclass(frozen=True)
class Directory:
    """The configured people, groups, tenants and routes."""

    principals: dict[str, Principal] = field(default_factory=dict)
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tenants: dict[str, Tenant] = field(default_factory=dict)
    routes: tuple[Route, ...] = ()
    # Each surface's words for where something was done on it ("in Slack"), from its
    # declaration (bot.surfaces, which the config reads): a card's votes say where they were
    # cast in them (bot.card), without the cards importing the surface registry.
    surface_words: dict[str, str] = field(default_factory=dict)
    # (surface, account) -> principal, for the lookup every inbound message makes.
    _by_account: dict[tuple[str, Account], Principal] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {
            (surface, account): principal
            for principal in self.principals.values()
            for surface, account in principal.accounts.items()
        }
        object.__setattr__(self, "_by_account", index)

    def tenant(self, name: str) -> Tenant:
        try:
            return self.tenants[name]
        except KeyError:
            raise UnknownTenant(
                f"unknown tenant {name!r}; configure it under [[tenants]]"
            ) from None

    def principal(self, key: str) -> Principal:
        try:
            return self.principals[key]
        except KeyError:
            raise UnknownPrincipal(
                f"unknown principal {key!r}; configure it under [principals.{key}]"
            ) from None

    def principal_for(self, surface: str, account: Account) -> Principal | None:
        """The principal whose account on `surface` is `account`; None for anyone not
        configured."""
        return self._by_account.get((surface, account))

    def reaches(self, key: str, surface: str) -> bool:
        """Whether principal `key` has an account on `surface` to receive direct messages
        at."""
        principal = self.principals.get(key)
        return principal is not None and principal.account(surface) is not None

    def route_for(
        self, tenant: str, capability: str, arguments: Mapping[str, Any] | None = None
    ) -> Route:
        """The first route matching tenant, capability and (for a route with `when`) the
        call's arguments; NoRoute when none does. Without arguments, routes with `when` are
        passed over."""
        for route in self.routes:
            if route.matches(tenant, capability, arguments):
                return route
        raise NoRoute(
            f"no route matches tenant {tenant!r} and capability {capability!r}; "
            "add a [[routes]] entry for it (requests nobody may decide are refused)"
        )

    def route_of(self, row: Approval) -> Route:
        """The route of a stored request: chosen by the call the agent asked for (an edit
        may not move a request to another route: bot/edits.py)."""
        asked = row.original_args if row.original_hash is not None else row.tool_args
        return self.route_for(row.tenant, row.capability, asked or {})

    def members(self, approver: str) -> frozenset[str]:
        """The principals an approver entry stands for: itself, or a group's members."""
        if approver.startswith(GROUP_PREFIX):
            return frozenset(self.groups.get(approver[len(GROUP_PREFIX) :], ()))
        return frozenset([approver])

    def expand(self, approvers: Iterable[str]) -> frozenset[str]:
        result: set[str] = set()
        for approver in approvers:
            result |= self.members(approver)
        return frozenset(result)

    def describe(self, approver: str) -> str:
        """How a human reads an assignee: "group finance" or "Alice Ng (alice)"."""
        if approver.startswith(GROUP_PREFIX):
            return f"group {approver[len(GROUP_PREFIX) :]}"
        principal = self.principals.get(approver)
        return f"{principal.name} ({approver})" if principal else approver

    def name_of(self, approver: str) -> str:
        """The short form people read in a sentence: "Alice Ng", "group finance"."""
        principal = self.principals.get(approver)
        return principal.name if principal else self.describe(approver)

    def entitled(self, approval: Approval | Candidate | HomeChange) -> frozenset[str]:
        """Who may decide in their own right: the assignee (or its group's members) and the
        original approvers (or their groups' members)."""
        return self.members(approval.assignee) | self.expand(approval.approvers)

    def check_eligible(
        self,
        approval: Approval | Candidate,
        principal: str,
        *,
        approving: bool,
        delegations: Iterable[Delegation] = (),
    ) -> Standing:
        """Raise unless `principal` may decide `approval`; say in whose name they do.

        Entitled: everyone in `entitled(approval)`, and the delegates of any of them through
        `delegations` (those active at the decision's time, as the caller read them) whose
        scope covers the capability. A delegation is one hop: a delegate's own delegate is not
        entitled through it. Never the requester approving their own request, in person or
        through a delegate, unless the route allowed self-approval when the request was
        made. `requested_by` is compared without regard to case, so "Sam" cannot slip past
        the guard for principal "sam".
        """
        entitled = self.entitled(approval)
        if principal in entitled:
            standing = Standing(principal)
        else:
            covering = sorted(
                d.principal
                for d in delegations
                if d.delegate == principal
                and d.principal in entitled
                and covers(d, approval.capability)
            )
            if not covering:
                raise NotAnApprover(assignee=self.describe(approval.assignee))
            standing = Standing(principal, covering[0])
        requester = person_key(approval.requested_by)
        if approving and not approval.allow_self_approval and requester:
            if person_key(principal) == requester:
                raise SelfApproval(
                    f"{principal} requested this and may not approve it; "
                    "the route does not allow self-approval"
                )
            if person_key(standing.on_behalf_of) == requester:
                raise SelfApproval(
                    f"{principal} stands in for {standing.on_behalf_of}, who requested this; "
                    "the route does not allow self-approval"
                )
        return standing


@dataclass(frozen=True, slots=True)
class Standing:
    """Why a principal may decide: in their own right, or as the delegate of someone who is
    entitled (`on_behalf_of`). A delegate and the person they stand in for count as one."""

    principal: str
    on_behalf_of: str | None = None

    @property
    def counted_as(self) -> str:
        return self.on_behalf_of or self.principal


def keeping_authority(approval: Approval) -> list[str]:
    """The approvers list for a request about to change assignee: the current assignee joins
    it, so everyone the request was ever assigned to keeps their authority (and the buttons
    on the card they were sent keep working)."""
    if approval.assignee in approval.approvers:
        return list(approval.approvers)
    return [*approval.approvers, approval.assignee]


def covers(delegation: Delegation, capability: str) -> bool:
    """Whether a delegation's scope (a glob, "*" for everything) covers a capability."""
    return fnmatchcase(capability, delegation.scope)
