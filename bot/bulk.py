"""Bulk decisions: several requests approved or rejected together, each against the hash its
decider was shown, one by one.

Nothing is decided as a group: each pair (request, shown hash) is one ordinary decision
through the Operator, in its own transaction, so a request that changed or was decided
meanwhile is refused on its own and the others go through. The result says, for every pair
in the order given, what was decided or why it was refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from bot.decisions import Actor, Decision
from bot.errors import InvalidRequest, SignoffError
from bot.operator import Operator

# One decision per line: "ID HASH" (the hash with or without "sha256:"); blank lines and
# lines starting with # are skipped.
_LINE = re.compile(r"^\s*(\S+)\s+(?:sha256:)?([0-9a-f]{64})\s*$")
MAX_PAIRS = 500


@dataclass(frozen=True, slots=True)
class Outcome:
    approval_id: str
    decision: Decision | None = None
    refused: SignoffError | None = None

    @property
    def ok(self) -> bool:
        return self.refused is None


def read_pairs(text: str) -> list[tuple[str, str]]:
    """The (id, hash) pairs of a bulk file; InvalidRequest naming the first bad line."""
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise InvalidRequest(
                f"line {number}: expected 'ID HASH' (the full 64-hex hash that was shown)"
            )
        pairs.append((match.group(1), match.group(2)))
    if not pairs:
        raise InvalidRequest("no requests to decide: one 'ID HASH' per line")
    if len(pairs) > MAX_PAIRS:
        raise InvalidRequest(f"at most {MAX_PAIRS} requests at once, not {len(pairs)}")
    seen = set()
    for approval_id, _ in pairs:
        if approval_id in seen:
            raise InvalidRequest(f"{approval_id} is named twice")
        seen.add(approval_id)
    return pairs


async def decide_each(
    operator: Operator,
    action: Literal["approve", "reject"],
    pairs: Iterable[tuple[str, str]],
    actor: Actor,
    note: str | None = None,
) -> list[Outcome]:
    """Decide each request against its own shown hash; every outcome, in order."""
    outcomes = []
    for approval_id, shown_hash in pairs:
        try:
            decided = await operator.decide(action, approval_id, shown_hash, actor, note=note)
        except SignoffError as refused:
            outcomes.append(Outcome(approval_id, refused=refused))
        else:
            outcomes.append(Outcome(approval_id, decision=decided))
    return outcomes
