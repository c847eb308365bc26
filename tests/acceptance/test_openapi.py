"""The agent API against its own OpenAPI description, fuzzed: schemathesis generates requests
from bot/openapi.json (fetched from the server at /v1/openapi.json) and sends them to
`signoff serve` as a real subprocess, on SQLite and on PostgreSQL.

Every operation the document describes gets its boundary cases (schemathesis' coverage
phase: each limit, enum, pattern and required field just inside and just outside, unexpected
methods and content types) and `EXAMPLES` generated valid and `EXAMPLES` generated invalid
requests (the invalid ones on SQLite only: they are refused before any database is opened),
sent with acme's key, or without a key, with a wrong key or with globex's key. The
ids in the paths are seeded approvals (pending, approved, claimed, overdue, another
tenant's) or generated ones, and a renew, release or complete sometimes carries the token of
a claim this run made. Every answer must:

- never be a 5xx (`not_a_server_error`);
- have a status the document lists for the operation, its content type, and a body its schema
  accepts (`status_code_conformance`, `content_type_conformance`,
  `response_schema_conformance`);
- refuse what the document says is invalid (`negative_data_rejection`);
- accept what the document says is valid (`positive_data_acceptance`, schemathesis' "schema-valid
  request rejected" check): a generated valid request may be answered 401 (the wrong key),
  404 (an id that does not exist, or another tenant's), 409 (an approval in the wrong state),
  410 (one whose clock ran out), but never 400, 413 or 422, except for the refusals that hang on
  what no schema can know, each said in the document: a create the configuration refuses
  (no route; approvers, a quorum or a TTL the route does not allow; a callback to a private
  address) and a `cursor` the server did not issue (`CONFIG_REFUSALS`);
- write nothing when it is a refusal (4xx), a read (GET) or a repeated create (200): the
  approvals' rows (state, version, audit position) and the number of audit events are the
  same before and after it, read from the database behind the server's back. The one
  refusal that writes is the documented one: 410 `expired` expires the request whose clock
  ran out first (docs/reference.md, "Asking, claiming, completing").

At the end the database holds exactly the seeded approvals and one per 201.

The run is bounded (10-30 s per database; with CI=true its generated examples are the same on
every run) and quiet: the server's log stays in a pipe
and is printed only when the test fails. Webhooks are never signed here (the tenant has no
secret), so callback URLs schemathesis makes up are never called.

SIGNOFF_OPENAPI_EXAMPLES=N asks for N generated requests per operation and mode instead of
`EXAMPLES` (and 4N for the create body), for a deeper run by hand; MAX_REQUESTS grows with it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy.engine import make_url

from store.engine import normalize_url
from tests.support.cli import Cli
from tests.support.samples import request_body
from tests.support.service import (
    API_KEYS,
    Api,
    Fleet,
    ServerProcess,
    service_config,
    service_env,
    write_config,
)

# Generated requests per operation and generation mode (valid, invalid), on top of the
# coverage phase's boundary cases; more for the create body, the widest door.
# Generating them is most of this test's CPU; the boundary cases find what the fuzzing would.
EXAMPLES = int(os.environ.get("SIGNOFF_OPENAPI_EXAMPLES", "10"))
EXAMPLES_FOR = {"POST /v1/approvals": 4 * EXAMPLES}
# The same examples on every CI run: a failure there is reproducible, not a lucky draw.
DERANDOMIZE = os.environ.get("CI") == "true"
# No single request may take longer (a hang is a failure, not a slow test), and no run may
# send more requests than this per database (about 1,100 at the default: a bound on work that
# holds on any machine, where a bound on seconds failed on a slow one).
REQUEST_TIMEOUT = 10.0
MAX_REQUESTS = int(2500 * max(1.0, EXAMPLES / 10))
# What a valid request may be answered besides a success: schemathesis' default (2xx, 3xx,
# 401, 403, 404, 409, 429, 5xx; a 5xx is caught by not_a_server_error) and 410, the documented
# answer to an action on an approval whose clock ran out.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "410", "429", "5xx"]
# The 422s a schema-valid request may get, because they hang on what no schema can know: the
# configuration (routes, approvers, quorums, TTLs, private callbacks, principals, the origins
# that may frame an approval) and which cursors the server issued. Keyed by error code; for
# `invalid_request`, the failing field and the words of its message. Each is said in the
# document.
CONFIG_REFUSALS: dict[str, dict[str, tuple[str, ...]]] = {
    "no_route": {},
    "approvers_outside_route": {},
    # An embed token's person and parent origin: the principals and `[web] embed_origins`.
    "unknown_person": {},
    "person_not_entitled": {},
    "origin_not_allowed": {},
    "invalid_request": {
        "required_approvals": ("below the route's minimum", "more than available approvers"),
        "approval_ttl": ("longer than the route allows",),
        "grant_ttl": ("longer than the route allows",),
        "callback_url": ("is not a public address", "is this machine"),
        "cursor": ("invalid cursor",),
    },
}


def refused_by_config(case: Any, response: Any, issued_cursors: set[str]) -> bool:
    """Whether a 422 to a schema-valid request is one of `CONFIG_REFUSALS` (for a cursor: one
    the server did not issue)."""
    if response.status_code != 422:
        return False
    error = response.json()["error"]
    if error["code"] not in CONFIG_REFUSALS:
        return False
    allowed = CONFIG_REFUSALS[error["code"]]
    if not allowed:
        return True
    fields = error.get("fields") or [{"field": "?", "message": ""}]
    if any(f["field"] == "cursor" for f in fields):
        if (case.query or {}).get("cursor") in issued_cursors:
            return False
    return all(any(words in f["message"] for words in allowed.get(f["field"], ())) for f in fields)


def checks(issued_cursors: set[str]) -> list[Callable[..., Any]]:
    def schema_valid_request_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
        try:
            return positive_data_acceptance(ctx, response, case)
        except RejectedPositiveData:
            if refused_by_config(case, response, issued_cursors):
                return None
            raise

    return [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
        negative_data_rejection,
        schema_valid_request_accepted,
    ]


# Who sends each generated request: mostly the tenant whose approvals were seeded.
SENDERS = ("acme",) * 6 + ("globex", "no key", "wrong key")


def sender_headers(who: str) -> dict[str, str]:
    if who == "no key":
        return {}
    key = "not-a-tenant-key" if who == "wrong key" else API_KEYS[who]
    return {"Authorization": f"Bearer {key}"}


# -- the deployment --------------------------------------------------------------------------


def deploy(tmp_path: Path, db_url: str) -> Fleet:
    """The acceptance config with: a route for any capability of acme, with the longest TTLs a
    request may ask for (so generated requests are created, not only refused), no webhook
    secret (nothing is ever sent), and no sweeper pass during the run (every write comes from
    a request, so each can be attributed)."""
    config = service_config(db_url, "http://127.0.0.1:9/hooks", sweeper={"interval": 3600.0})
    for tenant in config["tenants"]:
        tenant.pop("webhook_secret_env", None)
    config["routes"].append(
        {
            "tenant": "acme",
            "capability": "*",
            "approvers": ["alice", "bob"],
            "approval_ttl": "365d",
            "grant_ttl": "365d",
        }
    )
    return Fleet(write_config(tmp_path / "signoff.toml", config), tmp_path)


@dataclass
class Seeds:
    """Approvals in the states an agent meets, made before the run."""

    acme: list[str]
    globex: str
    tokens: dict[str, str]  # approval id -> the token of a claim this test made

    @property
    def count(self) -> int:
        return len(self.acme) + 1


def seed(server: ServerProcess, fleet: Fleet) -> Seeds:
    acme = Api(server.url, API_KEYS["acme"])

    def create(run_id: str, **fields: Any) -> dict[str, Any]:
        created = acme.post("/v1/approvals", request_body(run_id=run_id, **fields))
        assert created.status == 201, created
        record: dict[str, Any] = created.body
        return record

    pending = create("seed-pending")
    approved = [create(f"seed-approved-{n}") for n in range(4)]
    # Overdue a second from now: the next agent action on it expires it and answers 410.
    overdue = create("seed-overdue", approval_ttl="1s")
    cli = Cli(cwd=fleet.cwd, env=service_env(fleet.config_path))
    commands = [
        ["approvals", "approve", a["id"], "--hash", a["hash"], "--as", "alice"] for a in approved
    ]
    for result in cli.run_all(commands):
        assert result.returncode == 0, str(result)
    claimed = acme.post(f"/v1/approvals/{approved[0]['id']}/claim", {"lease": "1h"})
    assert claimed.status == 200, claimed
    other = Api(server.url, API_KEYS["globex"]).post(
        "/v1/approvals", request_body(run_id="seed-globex", capability="anything.at.all")
    )
    assert other.status == 201, other
    time.sleep(1.0)  # let the overdue one run out
    return Seeds(
        acme=[pending["id"], overdue["id"], *(a["id"] for a in approved)],
        globex=other.body["id"],
        tokens={approved[0]["id"]: claimed.body["claim_token"]},
    )


# -- the database behind the server's back ---------------------------------------------------

Snapshot = tuple[dict[str, tuple[Any, ...]], int]

_ROWS = "SELECT id, state, version, audit_seq FROM approvals"
_EVENTS = "SELECT count(*) FROM approval_events"


class Database:
    """Reads what the server wrote: every approval's state, version and audit position, and
    the number of audit events. One connection for the whole run."""

    def __init__(self, db_url: str) -> None:
        self._sqlite: sqlite3.Connection | None = None
        self._runner: asyncio.Runner | None = None
        self._pg: asyncpg.Connection | None = None
        if db_url.startswith("sqlite"):
            path = make_url(db_url).database
            assert path
            self._sqlite = sqlite3.connect(path, timeout=10, isolation_level=None)
        else:
            dsn = (
                make_url(normalize_url(db_url))
                .set(drivername="postgresql")
                .render_as_string(hide_password=False)
            )
            self._runner = asyncio.Runner()
            self._pg = self._runner.run(asyncpg.connect(dsn))

    def snapshot(self) -> Snapshot:
        if self._sqlite is not None:
            rows = self._sqlite.execute(_ROWS).fetchall()
            events = self._sqlite.execute(_EVENTS).fetchone()[0]
        else:
            assert self._runner is not None and self._pg is not None
            rows = self._runner.run(self._pg.fetch(_ROWS))
            events = self._runner.run(self._pg.fetchval(_EVENTS))
        return {row[0]: tuple(row[1:]) for row in rows}, int(events)

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._runner is not None:
            if self._pg is not None:
                self._runner.run(self._pg.close())
            self._runner.close()


def refused_write(case: Any, status: int, before: Snapshot, after: Snapshot) -> str | None:
    """What a request that must not write wrote, in words; None if it wrote nothing (or only
    the documented expiry of a 410)."""
    rows_before, events_before = before
    rows_after, events_after = after
    changed = sorted(
        i for i in rows_before.keys() | rows_after.keys() if rows_before.get(i) != rows_after.get(i)
    )
    if status == 410:
        target = (case.path_parameters or {}).get("id")
        expired = [target] if target in changed and rows_after[target][0] == "expired" else []
        if changed == expired and events_after - events_before == len(expired):
            return None
    elif not changed and events_after == events_before:
        return None
    lines = [f"{events_after - events_before:+d} audit events"]
    for approval_id in changed:
        lines.append(
            f"{approval_id}: {rows_before.get(approval_id)} -> {rows_after.get(approval_id)}"
        )
    return "; ".join(lines)


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Run:
    schema: Any
    base_url: str
    db: Database
    seeds: Seeds
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    cursors: set[str] = field(default_factory=set)  # every next_cursor the server answered

    def exercise(self, case: Any, who: str) -> None:
        """Send one case, check the answer, and check that a refusal wrote nothing."""
        headers = sender_headers(who)
        before = self.db.snapshot()
        response = case.call(base_url=self.base_url, headers=headers, timeout=REQUEST_TIMEOUT)
        after = self.db.snapshot()
        status = response.status_code
        self.statuses[(case.operation.label, status)] += 1
        case.validate_response(
            response,
            checks=checks(self.cursors),
            headers=headers,
            transport_kwargs={"base_url": self.base_url, "headers": headers},
        )
        if case.method.upper() == "POST" and status == 200 and case.path.endswith("/claim"):
            self.seeds.tokens[case.path_parameters["id"]] = response.json()["claim_token"]
        if case.method.upper() == "GET" and status == 200 and case.path == "/v1/approvals":
            if response.json()["next_cursor"] is not None:
                self.cursors.add(response.json()["next_cursor"])
        reads = case.method.upper() == "GET" or (case.path == "/v1/approvals" and status == 200)
        if reads or 400 <= status < 500:
            wrote = refused_write(case, status, before, after)
            assert wrote is None, (
                f"{case.method} {case.formatted_path} answered {status} and wrote: {wrote}\n"
                f"Reproduce with:\n    {case.as_curl_command(headers=headers)}\n"
                f"Answer: {response.text[:2000]}"
            )

    def guarded(self, what: str, test: Callable[..., None], *args: Any) -> None:
        """Run one operation's tests; a failure is recorded and the run goes on."""
        try:
            test(self, *args)
        except (Exception, BaseExceptionGroup) as exc:  # failed checks, assertions, timeouts
            notes = "\n".join(getattr(exc, "__notes__", []))
            self.failures.append(f"== {what}\n{exc}\n{notes}".rstrip())

    def path_ids(self) -> list[str]:
        return [*self.seeds.acme, self.seeds.globex]


def coverage(run: Run, operation: Any, modes: list[GenerationMode]) -> None:
    """The coverage phase's boundary cases, valid ones aimed at the seeded approvals in turn."""
    ids = itertools.cycle(run.path_ids())
    senders = itertools.cycle(SENDERS)
    for case in run.schema.iter_coverage_cases(
        operation,
        generation_modes=modes,
        generation_config=run.schema.config.generation_for(operation=operation),
    ):
        positive = case.meta is not None and case.meta.generation.mode.is_positive
        if positive and "id" in (case.path_parameters or {}):
            case.path_parameters = {**case.path_parameters, "id": next(ids)}
        run.exercise(case, next(senders) if positive else "acme")


def fuzz(run: Run, operation: Any, mode: GenerationMode) -> None:
    """`EXAMPLES` generated cases (`EXAMPLES_FOR` some operations); valid ones with a path id
    mostly aim at a seeded approval, and carry a known claim token half the time; valid
    pages carry a cursor the server issued half the time."""
    if mode.is_negative and not (any(operation.iter_parameters()) or operation.body):
        return  # nothing to send wrong
    has_id = any(p.name == "id" for p in operation.path_parameters)
    if mode.is_positive and has_id:
        cases = st.sampled_from([*run.path_ids(), None]).flatmap(
            lambda i: operation.as_strategy(
                generation_mode=mode, path_parameters={"id": i} if i else None
            )
        )
    else:
        cases = operation.as_strategy(generation_mode=mode)

    @settings(
        max_examples=EXAMPLES_FOR.get(operation.label, EXAMPLES),
        derandomize=DERANDOMIZE,
        deadline=None,  # each request has REQUEST_TIMEOUT instead
        database=None,
        phases=[Phase.generate],  # no shrinking: the run's requests change the state
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(case=cases, who=st.sampled_from(SENDERS), use_token=st.booleans())
    def test(case: Any, who: str, use_token: bool) -> None:
        token = run.seeds.tokens.get((case.path_parameters or {}).get("id", ""))
        if use_token and token and isinstance(case.body, dict) and "claim_token" in case.body:
            case.body = {**case.body, "claim_token": token}
        if use_token and run.cursors and mode.is_positive and "cursor" in (case.query or {}):
            case.query = {**case.query, "cursor": min(run.cursors)}
        run.exercise(case, who)

    test()


def test_the_agent_api_answers_as_its_openapi_document_says_and_refusals_write_nothing(
    db_url: str, tmp_path: Path
) -> None:
    with deploy(tmp_path, db_url) as fleet:
        server = fleet.start()
        seeds = seed(server, fleet)
        config = schemathesis.Config.from_dict(
            {
                "generation": {"with-security-parameters": False},
                "checks": {
                    "negative_data_rejection": {
                        "expected-statuses": [400, 401, 404, 405, 409, 410, 413, 415, 422]
                    },
                    "positive_data_acceptance": {"expected-statuses": ACCEPTED},
                },
            }
        )
        schema = schemathesis.openapi.from_url(
            f"{server.url}/v1/openapi.json", config=config, timeout=REQUEST_TIMEOUT
        )
        db = Database(db_url)
        run = Run(schema, server.url, db, seeds)
        # Invalid requests (boundary cases just outside a limit, and generated ones) are
        # refused before any database is opened: the database cannot change their answer, so
        # they run on SQLite only. The valid boundary cases and generated requests run on both.
        modes = [GenerationMode.POSITIVE]
        if db_url.startswith("sqlite"):
            modes.append(GenerationMode.NEGATIVE)
        try:
            for result in schema.get_all_operations():
                operation = result.ok()
                run.guarded(f"{operation.label}: coverage", coverage, operation, modes)
                for mode in modes:
                    run.guarded(f"{operation.label}: {mode.value} fuzzing", fuzz, operation, mode)
            rows, _ = db.snapshot()
        finally:
            db.close()
        created = sum(n for (label, status), n in run.statuses.items() if status == 201)
        summary = "\n".join(
            f"  {label}: {status} x{n}" for (label, status), n in sorted(run.statuses.items())
        )
        assert not run.failures, (
            f"{len(run.failures)} failing operations on {db_url.split(':')[0]}:\n\n"
            + "\n\n".join(run.failures)
            + f"\n\nanswers seen:\n{summary}"
        )
        assert len(rows) == seeds.count + created, summary
        assert server.proc is not None and server.proc.poll() is None, "the server died"
    # The boundary cases and the generated requests: a run that grew unbounded shows here.
    sent = sum(run.statuses.values())
    assert sent < MAX_REQUESTS, f"{sent} requests, over {MAX_REQUESTS}\n{summary}"
