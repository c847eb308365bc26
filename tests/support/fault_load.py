"""The load of tests/acceptance/test_faults.py (kill -9 under load): its plan from a seed, the
two servers it kills and starts again, the agents, CLI deciders and Slack clickers it runs,
and what each was told (`Acked`), for the test to hold against the database afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.slack import FakeSlack
from tests.fakes.slack_inbound import sign
from tests.support.cli import Cli
from tests.support.samples import request_body
from tests.support.service import (
    API_KEYS,
    Fleet,
    ServerProcess,
    WebhookReceiver,
    service_env,
)

APPROVALS = 48
KILLS = 3
LIFECYCLES_AT_ONCE = 4
CLI_AT_ONCE = 3  # `signoff` processes deciding at once
ATTEMPTS = 12  # tries of one request through whichever server is up
CARD_WAIT = 20.0  # for the outbox to post a card (a killed server's job returns after `lease`)
DRAIN_TIMEOUT = 60.0  # for the outbox to deliver everything after the load
LOAD_TIMEOUT = 150.0  # the whole load; far above its usual 15-30 s
RECEIVER_DELAY = 0.25  # the webhook receiver answers this late: kills catch deliveries in flight
OUTBOX = {"poll_interval": 0.1, "backoff_base": "1s", "lease": "3s", "webhook_timeout": 2.0}

SLACK_SECRET = "slack-signing-secret-faults"
SLACK_TOKEN = "xoxb-test"  # FakeSlack's default
SLACK_ENV = {"SLACK_BOT_TOKEN": SLACK_TOKEN, "SLACK_SIGNING_SECRET": SLACK_SECRET}
CHANNEL = "C0FINANCE"
APPROVE, REJECT = "signoff_approve", "signoff_reject"
SLACK_USER = {"alice": "U0ALICE", "bob": "U0BOB"}  # TEST_CONFIG's principals

STATE_OF = {"approve": "approved", "reject": "rejected"}
DECISION_EVENTS = frozenset({"approved", "rejected"})
NOTE_EVENTS = frozenset({"refused", "integrity_failed"})  # trail notes, not transitions
AFTER_APPROVAL = frozenset({"approved", "executing", "executed", "failed", "outcome_unknown"})


class SlowReceiver(WebhookReceiver):
    """The test's webhook receiver, answering each delivery (recorded on arrival) a little
    late, as a real endpoint does: a server killed meanwhile never hears the answer, and its
    job is delivered again after the outbox lease."""

    async def _handle(self, request: web.Request) -> web.Response:
        response = await super()._handle(request)
        await asyncio.sleep(RECEIVER_DELAY)
        return response


# -- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What the load does with one approval, drawn from the seed."""

    index: int
    run_id: str
    how: str  # "cli", "slack" or "race" (the CLI and a Slack click at once, opposite ways)
    click_after: float  # in a race: seconds from the CLI's start to the click (a run takes 1-3 s)
    decision: str  # "approve" or "reject" (in a race: the CLI's; Slack does the other)
    who: str  # alice or bob: who decides (in a race: through the CLI; the other clicks)
    claim: bool
    complete: bool
    outcome: str  # "succeeded" or "failed"
    claim_key: str


def plans(rng: random.Random, seed: int) -> list[Plan]:
    made = []
    for i in range(APPROVALS):
        how = rng.choices(("cli", "slack", "race"), weights=(35, 45, 20))[0]
        made.append(
            Plan(
                index=i,
                run_id=f"fault-{seed}-{i:03d}",
                how=how,
                click_after=rng.uniform(0.5, 3.0),
                decision=rng.choices(("approve", "reject"), weights=(70, 30))[0],
                who=rng.choice(("alice", "bob")),
                claim=rng.random() < 0.9,
                complete=rng.random() < 0.85,
                outcome=rng.choices(("succeeded", "failed"), weights=(80, 20))[0],
                claim_key=f"claim-{seed}-{i:03d}-{rng.getrandbits(48):012x}",
            )
        )
    return made


# -- what the test was told --------------------------------------------------------------------


@dataclass
class Acked:
    """The acknowledged writes, and everything else worth reporting."""

    created: dict[str, dict[str, Any]] = field(default_factory=dict)  # run_id -> record
    decisions: dict[str, list[tuple[str, str, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # approval id -> [(via, principal, state)]
    claims: dict[str, str] = field(default_factory=dict)  # approval id -> claim token
    completes: dict[str, tuple[str, Any]] = field(default_factory=dict)  # id -> (outcome, result)
    lost: Counter[str] = field(default_factory=Counter)  # unanswered requests, by kind
    counts: Counter[str] = field(default_factory=Counter)  # what happened, for the summary
    problems: list[str] = field(default_factory=list)  # failures found during the load
    finished: int = 0  # lifecycles done (drives the kills)
    kills: list[str] = field(default_factory=list)
    slow: list[tuple[float, str]] = field(default_factory=list)  # (seconds, what) over 3 s


class Lost(Exception):
    """No answer: the server went away (or the connection broke) before answering."""


@dataclass
class Answer:
    status: int
    body: Any
    server: ServerProcess


# -- two servers, killed and restarted ------------------------------------------------------------


class Pair:
    """Two `signoff serve` slots; a slot's server may be dead (killed, not yet restarted)."""

    def __init__(self, fleet: Fleet, rng: random.Random) -> None:
        self.fleet = fleet
        self.rng = rng
        self.slots: list[ServerProcess] = []

    async def start(self) -> None:
        self.slots = [await asyncio.to_thread(self.fleet.start) for _ in range(2)]

    def live(self) -> list[ServerProcess]:
        return [s for s in self.slots if s.proc is not None and s.proc.poll() is None]

    async def pick(self) -> ServerProcess:
        deadline = time.monotonic() + 60
        while not (live := self.live()):
            assert time.monotonic() < deadline, "no server up for 60 s"
            await asyncio.sleep(0.1)
        return self.rng.choice(live)

    async def kill_and_restart(self, slot: int, pause: float) -> None:
        server = self.slots[slot]
        assert server.proc is not None and server.proc.poll() is None
        os.kill(server.pid, signal.SIGKILL)
        await asyncio.to_thread(server.proc.wait, 10)
        assert server.proc.returncode == -signal.SIGKILL, server.proc.returncode
        await asyncio.sleep(pause)
        self.slots[slot] = await asyncio.to_thread(self.fleet.start)


# -- the load ------------------------------------------------------------------------------------


class Load:
    def __init__(
        self,
        pair: Pair,
        slack: FakeSlack,
        config_path: Path,
        cwd: Path,
        rng: random.Random,
        http: aiohttp.ClientSession,
    ) -> None:
        self.pair = pair
        self.slack = slack
        self.cwd = cwd
        self.cli = Cli(cwd, service_env(config_path))
        self.rng = rng
        self.http = http
        self.acked = Acked()
        self.progress = asyncio.Event()  # set whenever a lifecycle finishes
        self.writes_in_flight: Counter[int] = Counter()  # by server pid
        self.cli_slots = asyncio.Semaphore(CLI_AT_ONCE)
        # Threads of their own, so that waiting commands never hold up a server's restart.
        self.cli_threads = ThreadPoolExecutor(CLI_AT_ONCE, thread_name_prefix="faults-cli")
        self._cards: dict[str, tuple[str, str]] = {}  # approval id -> (channel, ts)
        self._cards_scanned = 0
        self._clicks = 0

    # -- HTTP through whichever server is up

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        server = await self.pair.pick()
        began = time.monotonic()
        writing = method == "POST"
        self.writes_in_flight[server.pid] += writing
        try:
            async with self.http.request(
                method, server.url + path, json=json_body, data=data, headers=headers
            ) as response:
                text = await response.read()
                try:
                    body = json.loads(text) if text else None
                except ValueError:
                    body = text.decode("utf-8", "replace")
                answer = Answer(response.status, body, server)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Lost(f"{method} {path} via {server.url}: {exc!r}") from exc
        finally:
            self.writes_in_flight[server.pid] -= writing
            took = time.monotonic() - began
            if took > 3:
                self.acked.slow.append((took, f"{method} {path} via {server.url}"))
        if answer.status == 500:
            self.acked.problems.append(f"{method} {path} answered 500: {answer.body}")
        return answer

    async def api(
        self, kind: str, method: str, path: str, body: Any = None, **headers: str
    ) -> Answer | None:
        """The request, tried through a live server until one answers other than 5xx (each
        try that got no answer, or a 503, counted as lost); None if none did."""
        all_headers = {"Authorization": f"Bearer {API_KEYS['acme']}", **headers}
        for _ in range(ATTEMPTS):
            try:
                answer = await self._send(method, path, json_body=body, headers=all_headers)
            except Lost:
                self.acked.lost[kind] += 1
                await asyncio.sleep(0.2)
                continue
            if answer.status >= 500:
                self.acked.lost[kind] += 1
                await asyncio.sleep(0.2)
                continue
            return answer
        self.acked.problems.append(f"{kind} {path}: no answer in {ATTEMPTS} tries")
        return None

    async def record(self, approval_id: str) -> dict[str, Any]:
        got = await self.api("get", "GET", f"/v1/approvals/{approval_id}")
        assert got is not None and got.status == 200, got
        record: dict[str, Any] = got.body
        return record

    # -- one approval, start to end

    async def lifecycle(self, plan: Plan) -> None:
        try:
            record = await self.create(plan)
            if record is None:
                return
            await self.decide(plan, record)
            state = (await self.record(record["id"]))["state"]
            if state == "approved" and plan.claim:
                token = await self.claim(plan, record["id"])
                if token is not None and plan.complete:
                    await self.complete(plan, record["id"], token)
        finally:
            self.acked.finished += 1
            self.progress.set()

    async def create(self, plan: Plan) -> dict[str, Any] | None:
        body = request_body(
            run_id=plan.run_id,
            tool={
                "name": "stripe.refunds.create",
                "arguments": {"charge": f"ch_{plan.index}", "amount": 1000 + plan.index},
            },
            requested_by="sam",  # neither alice nor bob: both may decide
        )
        got = await self.api("create", "POST", "/v1/approvals", body)
        if got is None:
            return None
        if got.status not in (200, 201):
            self.acked.problems.append(f"create {plan.run_id} answered {got.status}: {got.body}")
            return None
        record: dict[str, Any] = got.body
        self.acked.counts[f"created {got.status}"] += 1
        assert record["run_id"] == plan.run_id, record
        self.acked.created[plan.run_id] = record
        return record

    async def decide(self, plan: Plan, record: dict[str, Any]) -> None:
        other = "bob" if plan.who == "alice" else "alice"
        opposite = "reject" if plan.decision == "approve" else "approve"
        if plan.how == "cli":
            await self.cli_decide(record, plan.decision, plan.who, contested=False)
        elif plan.how == "slack":
            if not await self.slack_decide(record, plan.decision, plan.who, contested=False):
                self.acked.counts["slack fell back to cli"] += 1
                await self.cli_decide(record, plan.decision, plan.who, contested=False)
        else:
            spawned = asyncio.Event()

            async def click_later() -> None:
                await spawned.wait()
                await asyncio.sleep(plan.click_after)
                await self.slack_decide(record, opposite, other, contested=True)

            await asyncio.gather(
                self.cli_decide(record, plan.decision, plan.who, contested=True, spawned=spawned),
                click_later(),
            )

    # -- the CLI

    async def cli_decide(
        self,
        record: dict[str, Any],
        decision: str,
        who: str,
        *,
        contested: bool,
        spawned: asyncio.Event | None = None,
    ) -> None:
        aid = record["id"]
        args = ["approvals", decision, aid, "--hash", record["hash"], "--as", who, "--json"]
        loop = asyncio.get_running_loop()
        async with self.cli_slots:
            running = await loop.run_in_executor(self.cli_threads, lambda: self.cli.launch(*args))
            if spawned is not None:
                spawned.set()
            began = time.monotonic()
            done = await loop.run_in_executor(self.cli_threads, running.wait)
            took = time.monotonic() - began
            if took > 3:
                self.acked.slow.append((took, f"signoff {' '.join(args)}"))
        if done.returncode == 0:
            printed = done.json()
            if (printed["id"], printed["state"], printed["decided_by"]) != (
                aid,
                STATE_OF[decision],
                who,
            ):
                self.acked.problems.append(f"cli {decision} {aid} printed {printed}")
            self.acked.decisions[aid].append(("cli", who, STATE_OF[decision]))
            self.acked.counts[f"cli {STATE_OF[decision]}"] += 1
        elif contested and done.returncode == 1 and "signoff: approval is " in done.stderr:
            self.acked.counts["cli lost the race"] += 1
        else:
            self.acked.problems.append(f"signoff {' '.join(args)} exited {done}")

    # -- Slack

    def _card(self, approval_id: str) -> tuple[str, str] | None:
        """(channel, ts) of the first card the outbox posted for the approval, if any."""
        calls = self.slack.calls
        for call in calls[self._cards_scanned :]:
            if call.method != "chat.postMessage" or not call.ok or call.response is None:
                continue
            for block in call.args.get("blocks") or []:
                for element in block.get("elements", []) if block.get("type") == "actions" else []:
                    if element.get("action_id") == APPROVE:
                        shown = element["value"].split(":", 1)[0]
                        place = (call.response["channel"], call.response["ts"])
                        self._cards.setdefault(shown, place)
        self._cards_scanned = len(calls)
        return self._cards.get(approval_id)

    async def _card_for(self, approval_id: str, *, contested: bool) -> tuple[str, str] | None:
        """The approval's card with its buttons. In a race, the other side may decide before
        the outbox posts the card, which then has no buttons to press: None, as for a person
        who finds it decided."""
        deadline = time.monotonic() + CARD_WAIT
        checked = time.monotonic()
        while (card := self._card(approval_id)) is None:
            if time.monotonic() > deadline:
                self.acked.problems.append(f"no card posted for {approval_id} in {CARD_WAIT} s")
                return None
            if contested and time.monotonic() - checked > 0.5:
                checked = time.monotonic()
                got = await self.api("read", "GET", f"/v1/approvals/{approval_id}")
                if got is not None and got.status == 200 and got.body["state"] != "pending":
                    self.acked.counts["slack found it decided before its card"] += 1
                    return None
            await asyncio.sleep(0.1)
        return card

    async def _post_slack(self, body: bytes) -> Answer:
        headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(SLACK_SECRET, body)}
        answer = await self._send("POST", "/slack/events", data=body, headers=headers)
        if answer.status != 200:
            self.acked.problems.append(f"Slack request answered {answer.status}: {answer.body}")
        return answer

    def _trigger(self, approval_id: str) -> str:
        self._clicks += 1
        return f"{self._clicks}.{approval_id[:8]}.{self.rng.getrandbits(64):016x}"

    async def slack_decide(
        self, record: dict[str, Any], decision: str, who: str, *, contested: bool
    ) -> bool:
        """Click (and for a rejection submit the modal) until a server answers 200 or the
        approval is decided. A 200 means the click was handled before the answer (the
        Slack app acknowledges after deciding): the approval must then be decided, by this
        person unless someone else was first. False if the click never got anywhere (no
        card, no button any more): the caller decides another way."""
        aid = record["id"]
        card = await self._card_for(aid, contested=contested)
        if card is None:
            return False
        channel, ts = card
        user = SLACK_USER[who]
        for _ in range(ATTEMPTS):
            trigger = self._trigger(aid)
            action = APPROVE if decision == "approve" else REJECT
            try:
                click = self.slack.click_body(user, channel, ts, action, trigger_id=trigger)
            except LookupError:  # the card was updated without buttons: decided already
                self.acked.counts["slack found the card decided"] += 1
                break
            try:
                answer = await self._post_slack(click)
                if answer.status != 200:
                    return True
                if decision == "reject":
                    opened = [
                        c.response
                        for c in self.slack.calls_to("views.open", ok=True)
                        if c.args.get("trigger_id") == trigger and c.response is not None
                    ]
                    if not opened:  # refused before the modal: decided by someone else
                        self._judge_click(await self.record(aid), aid, decision, who, contested)
                        return True
                    view_id = opened[0]["view"]["id"]
                    submit = self.slack.submit_body(
                        view_id, user, {"reason": {"reason": "fault test: not this one"}}
                    )
                    answer = await self._post_slack(submit)
                    if answer.status != 200:
                        return True
            except Lost:
                self.acked.lost["slack click"] += 1
                now = await self.record(aid)
                if now["state"] != "pending":
                    self.acked.counts["slack click lost, decided anyway"] += 1
                    return True
                await asyncio.sleep(0.2)
                continue
            self._judge_click(await self.record(aid), aid, decision, who, contested)
            return True
        now = await self.record(aid)
        return now["state"] != "pending"

    def _judge_click(
        self, now: dict[str, Any], aid: str, decision: str, who: str, contested: bool
    ) -> None:
        """After a 200 for a click: the approval is decided, by `who` unless contested."""
        if (now["state"], now["decided_by"]) == (STATE_OF[decision], who):
            self.acked.decisions[aid].append(("slack", who, STATE_OF[decision]))
            self.acked.counts[f"slack {STATE_OF[decision]}"] += 1
        elif contested and now["state"] != "pending":
            self.acked.counts["slack lost the race"] += 1
        else:
            self.acked.problems.append(
                f"Slack {decision} of {aid} by {who} answered 200, but the approval is "
                f"{now['state']} (decided by {now['decided_by']})"
            )

    # -- claim and complete

    async def claim(self, plan: Plan, aid: str) -> str | None:
        got = await self.api(
            "claim", "POST", f"/v1/approvals/{aid}/claim", {}, **{"Idempotency-Key": plan.claim_key}
        )
        if got is None:
            return None
        if got.status != 200:
            self.acked.problems.append(f"claim {aid} answered {got.status}: {got.body}")
            return None
        token: str = got.body["claim_token"]
        assert got.body["approval"]["state"] == "executing", got.body
        self.acked.claims[aid] = token
        self.acked.counts["claimed"] += 1
        return token

    async def complete(self, plan: Plan, aid: str, token: str) -> None:
        result = {"refund": plan.run_id}
        body = {"claim_token": token, "outcome": plan.outcome, "result": result}
        got = await self.api("complete", "POST", f"/v1/approvals/{aid}/complete", body)
        if got is None:
            return
        if got.status != 200:
            self.acked.problems.append(f"complete {aid} answered {got.status}: {got.body}")
            return
        expected = "executed" if plan.outcome == "succeeded" else "failed"
        assert got.body["state"] == expected, got.body
        self.acked.completes[aid] = (plan.outcome, result)
        self.acked.counts["completed"] += 1


async def chaos(load: Load, pair: Pair, rng: random.Random, done: asyncio.Event) -> None:
    """KILLS kills, each when the load has finished a seeded number of approvals, spread over
    the load (so there is always load in flight: the last threshold leaves LIFECYCLES_AT_ONCE
    approvals running),
    at the first moment within 3 s that the chosen server has a write in flight. A threshold
    the load passed while the previous kill's server was down comes as soon as it is back,
    even if the load has ended meanwhile (the outbox may still be delivering)."""
    # One kill in the first half of each of KILLS equal stretches of the load: a kill and the
    # restart after it take a few seconds, in which the load finishes several approvals, so
    # kills drawn close together would all land after the load had ended.
    stretch = (APPROVALS - LIFECYCLES_AT_ONCE - 3) / KILLS
    thresholds = [3 + int(stretch * (k + rng.uniform(0, 0.5))) for k in range(KILLS)]
    for threshold in thresholds:
        slot, delay, pause = rng.randrange(2), rng.uniform(0, 0.5), rng.uniform(0, 1.5)
        while load.acked.finished < threshold and not done.is_set():
            load.progress.clear()
            await load.progress.wait()
        await asyncio.sleep(delay)
        for _ in range(300):
            if load.writes_in_flight[pair.slots[slot].pid] > 0:
                break
            await asyncio.sleep(0.01)
        at, writes = load.acked.finished, load.writes_in_flight[pair.slots[slot].pid]
        await pair.kill_and_restart(slot, pause)
        load.acked.kills.append(
            f"server {slot + 1} at {at}/{APPROVALS} with {writes} writes in flight "
            f"(down {pause:.1f} s+)"
        )


async def run_load(
    pair: Pair, slack: FakeSlack, config_path: Path, cwd: Path, seed: int, rng: random.Random
) -> Acked:
    await pair.start()
    the_plans = plans(rng, seed)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        load = Load(pair, slack, config_path, cwd, random.Random(rng.getrandbits(64)), http)
        slots = asyncio.Semaphore(LIFECYCLES_AT_ONCE)
        done = asyncio.Event()

        async def one(plan: Plan) -> None:
            async with slots:
                await load.lifecycle(plan)

        killer = asyncio.create_task(chaos(load, pair, random.Random(rng.getrandbits(64)), done))
        try:
            async with asyncio.timeout(LOAD_TIMEOUT):
                await asyncio.gather(*(one(plan) for plan in the_plans))
        except BaseException:
            killer.cancel()  # the load failed: report that, not the kills still to come
            raise
        finally:
            done.set()
            load.progress.set()
            with contextlib.suppress(asyncio.CancelledError):
                await killer
            load.cli_threads.shutdown()
    return load.acked
