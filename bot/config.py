"""Configuration: TOML file, environment overrides, validation.

Where it comes from: `--config FILE`, else `$SIGNOFF_CONFIG`, else built-in defaults (SQLite at
./signoff.db, listen 127.0.0.1:8700). `$SIGNOFF_DATABASE_URL` overrides the database URL.
Secrets never sit in the file: keys ending in `_env` name environment variables. An unknown key
or a bad value is a ConfigError naming the key.
"""

from __future__ import annotations

import os
import tomllib
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal, Optional
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from bot import conditions, surfaces
from bot.config_errors import format_errors
from bot.durations import parse_duration
from bot.errors import ConfigError, InvalidRequest
from bot.model import MAX_LEASE
from bot.routing import GROUP_PREFIX, Directory, Escalation, Principal, Route, Tenant
from bot.target import Target
from bot.validation import DurationText, HttpUrl
from store.engine import normalize_url, resolve_sqlite_path

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///signoff.db"

_NAME = r"^[a-z0-9][a-z0-9_.-]*$"
# Names end up in fixed-width columns (tenant, decided_by, assignee = "group:" + name).
Name = Annotated[str, Field(pattern=_NAME, max_length=120)]
_ENV_VAR = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return value


EnvVar = Annotated[str, Field(pattern=_ENV_VAR)]
# Two variables at most: the secret in use and the one replacing it.
SecretRotation = Annotated[list[EnvVar], Field(min_length=1, max_length=2)]


class Strict(BaseModel):
    """A config table. Surfaces build theirs on it (bot.surfaces)."""

    # strict: TOML is typed, so "yes" for a boolean or "2" for a number is a mistake to report.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _seconds(value: Any) -> Any:
    """A number of seconds as written before durations ("1.0"), or a duration ("10s")."""
    if isinstance(value, str):
        try:
            return parse_duration(value).total_seconds()
        except ValueError:
            raise ValueError(
                f"expected a number of seconds (5.0) or a duration ('5s', '2m'), got {value!r}"
            ) from None
    return value


# Seconds as a float; the config may write them as a number (as always) or as "10s", "2m".
Seconds = Annotated[float, BeforeValidator(_seconds)]


def _at_most_a_day(value: str) -> str:
    if parse_duration(value) > MAX_LEASE:
        raise ValueError(f"{value!r} is longer than 24h")
    return value


class ServerConfig(Strict):
    listen: Annotated[str, AfterValidator(_listen)] = "127.0.0.1:8700"
    public_url: HttpUrl = "http://127.0.0.1:8700"
    # Largest request body the API reads (413 beyond it).
    max_body_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 256 * 1024
    # How long a claim holds an approved call before it counts as outcome_unknown.
    claim_lease: Annotated[DurationText, AfterValidator(_at_most_a_day)] = "10m"
    # Humans first (bot.admission): agent creates served at once by this process (unset: by
    # the database, bot.admission.in_flight_for); more wait their turn, up to
    # `max_creates_waiting`, and one more is answered 429 with Retry-After. Also refused (one
    # always served) while the event loop runs more than `create_lag_limit` seconds late:
    # people's requests are waiting.
    max_creates_in_flight: Annotated[int, Field(ge=1, le=10000)] | None = None
    max_creates_waiting: Annotated[int, Field(ge=0, le=100000)] = 100
    create_lag_limit: Annotated[Seconds, Field(gt=0, le=10)] = 0.05
    # The Retry-After of a refused create, in whole seconds.
    overload_retry_after: Annotated[int, Field(ge=1, le=3600)] = 1
    # Waits (`GET /v1/approvals/{id}?wait=`, bot/waits.py) this process holds at once, in all
    # and per tenant; one more is answered 429 with Retry-After. Each is an open connection
    # (a file descriptor) and a few KB; no query while nothing commits.
    max_waits: Annotated[int, Field(ge=1, le=100000)] = 5000
    max_waits_per_tenant: Annotated[int, Field(ge=1, le=100000)] = 2000


class OutboxConfig(Strict):
    """The outbox runner: leases, retries and backoff of webhooks and card jobs."""

    @model_validator(mode="after")
    def _lease_outlives_a_delivery(self) -> OutboxConfig:
        # A job whose lease runs out while its delivery is still in flight can be taken by
        # another worker and delivered twice at once.
        if parse_duration(self.lease).total_seconds() <= self.webhook_timeout:
            raise ValueError(
                f"outbox.lease ({self.lease}) must be longer than outbox.webhook_timeout "
                f"({self.webhook_timeout} s)"
            )
        # Checked only when set: the default (4) must not refuse a config written before the
        # key existed with a lower `concurrency`; the runner takes the smaller of the two.
        if "busy_concurrency" in self.model_fields_set and self.busy_concurrency > self.concurrency:
            raise ValueError(
                f"outbox.busy_concurrency ({self.busy_concurrency}) must be at most "
                f"outbox.concurrency ({self.concurrency})"
            )
        return self

    lease: DurationText = "60s"
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 10
    backoff_base: DurationText = "2s"
    backoff_max: DurationText = "1h"
    batch: Annotated[int, Field(ge=1, le=1000)] = 20
    concurrency: Annotated[int, Field(ge=1, le=1000)] = 32
    poll_interval: Annotated[Seconds, Field(gt=0, le=60)] = 1.0
    webhook_timeout: Annotated[Seconds, Field(gt=0, le=120)] = 10.0
    keep_done: DurationText = "7d"
    per_destination: Annotated[int, Field(ge=1, le=1000)] = 16
    per_tenant: Annotated[int, Field(ge=1, le=1000)] = 16
    # While the process's event loop runs more than `busy_lag` seconds late (requests are
    # waiting), at most `busy_concurrency` jobs are in flight: card updates yield to clicks.
    busy_lag: Annotated[Seconds, Field(gt=0, le=10)] = 0.01
    busy_concurrency: Annotated[int, Field(ge=1, le=1000)] = 4
    settle_window: Annotated[Seconds, Field(ge=0, le=1)] = 0.005
    # ... and while the loop runs late (`busy_lag`): fewer, larger settles.
    busy_settle_window: Annotated[Seconds, Field(ge=0, le=1)] = 0.05


class WorkerConfig(Strict):
    """`signoff worker`: the outbox runner and the sweeper, without the API."""

    # HOST:PORT where the worker serves /metrics and /healthz for monitoring; unset, none.
    metrics_listen: Annotated[str, AfterValidator(_listen)] | None = None


class SweeperConfig(Strict):
    interval: Annotated[Seconds, Field(gt=0, le=3600)] = 5.0
    batch: Annotated[int, Field(ge=1, le=10_000)] = 200


class RetentionConfig(Strict):
    """`[retention]`: how long decided requests stay in the database before `signoff db
    archive` (or the sweeper, with `sweep`) moves them, with their audit trails, to archive
    files (bot/archive.py). Unset `keep_decided`: nothing is ever archived."""

    # A request whose trail's newest event is older than this, in a final state, is archived.
    keep_decided: DurationText | None = None
    # Where the archive files go; a relative path in a config file is beside that file.
    archive_dir: str = "archive"
    # The sweeper archives too, every `sweep_interval` (one process should: see operations.md).
    sweep: bool = False
    sweep_interval: DurationText = "1h"
    # Requests per archive file (one write transaction each).
    batch: Annotated[int, Field(ge=1, le=10_000)] = 1000

    @model_validator(mode="after")
    def _sweep_needs_retention(self) -> RetentionConfig:
        if self.sweep and self.keep_decided is None:
            raise ValueError("retention.sweep is on but retention.keep_decided is not set")
        return self


class MetricsConfig(Strict):
    # Seconds between reads of the database gauges (each process reads them in the
    # background while it is being scraped; a scrape answers from the last read).
    refresh: Annotated[Seconds, Field(gt=0, le=3600)] = 5.0


def _database_url(value: str) -> str:
    if not normalize_url(value).startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
        raise ValueError(
            f"unsupported database {value!r}; use sqlite+aiosqlite:///PATH or "
            "postgresql+asyncpg://USER@HOST/DB"
        )
    return value


class DatabaseConfig(Strict):
    url: Annotated[str, AfterValidator(_database_url)] = DEFAULT_DATABASE_URL


class TenantConfig(Strict):
    name: Name
    api_key_env: EnvVar | None = None
    # The variable holding the key the tenant's backend mints embed tokens with
    # (`POST /v1/approvals/{id}/embed`): never the agent's API key, so an agent cannot mint a
    # token and decide its own request in a person's name. Unset: no embedding.
    embed_key_env: EnvVar | None = None
    webhook_url: HttpUrl | None = None
    # One variable, or two while rotating the secret (each webhook is then signed with both).
    webhook_secret_env: EnvVar | SecretRotation | None = None
    # Whether a request's callback_url may reach loopback, private or link-local addresses
    # (a development setup, or agents on the same private network).
    allow_private_callbacks: bool = False


class PrincipalConfig(Strict):
    """A principal's table; `config_model` adds a key per surface with accounts (their id
    there), as its surface declares it."""

    name: str
    # May open the web dashboard: every tenant's pending requests, the outbox, the audit trail.
    operator: bool = False


class GroupConfig(Strict):
    members: list[str]


class EscalationConfig(Strict):
    after: DurationText
    to: str


class RouteConfig(Strict):
    tenant: str = "*"
    capability: str
    approvers: Annotated[list[str], Field(min_length=1)]
    notify: list[str] = []
    approval_ttl: DurationText = "72h"
    grant_ttl: DurationText = "24h"
    required_approvals: Annotated[int, Field(ge=1)] = 1
    allow_self_approval: bool = False
    # Approve asks "are you sure?" first (Slack's confirm dialog, a second tap on Telegram).
    confirm: bool = False
    escalation: list[EscalationConfig] = []
    # Nudge the assignees this long before a pending request expires (once, by the sweeper).
    remind_before: DurationText | None = None
    # What an approver may change before approving: "none", "any", or a list of top-level
    # argument keys.
    edits: Literal["none", "any"] | Annotated[list[str], Field(min_length=1)] = "none"
    # Standing grants from its cards ("approve, and allow the same for ..."): None allows them
    # unless the route needs a quorum; how long one may last; whether its uses post cards.
    grants: bool | None = None
    max_grant_lifetime: DurationText = "8h"
    notify_grant_uses: bool = True
    # Only calls whose arguments meet this (bot/conditions.py's text form), e.g.
    # 'amount > 10000'; a request it does not hold for goes on to the next route.
    when: str | None = None

    @field_validator("when")
    @classmethod
    def _when(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                conditions.text(value)
            except InvalidRequest as exc:
                raise ValueError(exc.message.removeprefix("when: ")) from None
        return value

    @model_validator(mode="after")
    def _edit_keys(self) -> RouteConfig:
        keys = self.edits
        if isinstance(keys, list) and (not all(keys) or len(set(keys)) < len(keys)):
            raise ValueError("edits: argument keys must be distinct and not empty")
        return self

    @model_validator(mode="after")
    def _remind_before_ttl(self) -> RouteConfig:
        remind = self.remind_before
        if remind is not None and parse_duration(remind) >= parse_duration(self.approval_ttl):
            raise ValueError(
                f"remind_before {self.remind_before!r} must be shorter than "
                f"approval_ttl {self.approval_ttl!r}"
            )
        return self

    @model_validator(mode="after")
    def _notify_targets(self) -> RouteConfig:
        for target in self.notify:
            if not surfaces.valid_target(target):
                raise ValueError(f"notify target {target!r}: expected {surfaces.target_forms()}")
        return self


class Config(Strict):
    """The config's core tables. The model that reads a file is `config_model()`, this with
    a table per registered surface (`[slack]`, ...) and their accounts in each principal."""

    server: ServerConfig = ServerConfig()
    database: DatabaseConfig = DatabaseConfig()
    outbox: OutboxConfig = OutboxConfig()
    sweeper: SweeperConfig = SweeperConfig()
    worker: WorkerConfig = WorkerConfig()
    metrics: MetricsConfig = MetricsConfig()
    retention: RetentionConfig = RetentionConfig()
    tenants: list[TenantConfig] = []
    principals: dict[Name, PrincipalConfig] = {}
    groups: dict[Name, GroupConfig] = {}
    routes: list[RouteConfig] = []

    @model_validator(mode="after")
    def _references(self) -> Config:
        """Every name a route or group uses must be configured (errors name the key)."""
        names = [t.name for t in self.tenants]
        for name in {n for n in names if names.count(n) > 1}:
            raise ValueError(f"tenants: {name!r} is configured twice")
        # One key must name one tenant, or one tenant's agent would act as the other.
        key_vars = [t.api_key_env for t in self.tenants if t.api_key_env]
        for var in {v for v in key_vars if key_vars.count(v) > 1}:
            raise ValueError(f"tenants: api_key_env {var!r} is shared by several tenants")
        # An embed key mints a person's authority: it must be no agent's key, nor another's.
        embed_vars = [t.embed_key_env for t in self.tenants if t.embed_key_env]
        for var in {v for v in embed_vars if embed_vars.count(v) > 1 or v in key_vars}:
            raise ValueError(
                f"tenants: embed_key_env {var!r} must name a variable of its own, not an "
                "api_key_env or another tenant's embed_key_env"
            )
        for surface in surfaces.personal():
            chat, seen = surface.name, dict[object, str]()
            for key, principal in self.principals.items():
                account = getattr(principal, chat, None)
                if account is not None and account in seen:
                    # One account must prove one person, or a click would decide as whoever
                    # happens to come first.
                    raise ValueError(
                        f"principals.{key}.{chat}: {account!r} is also principals."
                        f"{seen[account]}.{chat}"
                    )
                if account is not None:
                    seen[account] = key
        for group, spec in self.groups.items():
            for member in spec.members:
                if member not in self.principals:
                    raise ValueError(f"groups.{group}.members: unknown principal {member!r}")
        directory = self.directory()
        for i, route in enumerate(self.routes):
            if not any(fnmatchcase(name, route.tenant) for name in names):
                raise ValueError(
                    f"routes.{i}.tenant: {route.tenant!r} matches no configured tenant"
                )
            for approver in route.approvers:
                self._check_approver(approver, f"routes.{i}.approvers")
            for j, step in enumerate(route.escalation):
                self._check_approver(step.to, f"routes.{i}.escalation.{j}.to")
            for target in route.notify:
                self._check_target(Target.parse(target), f"routes.{i}.notify")
            possible = directory.expand(route.approvers)
            if route.required_approvals > len(possible):
                raise ValueError(
                    f"routes.{i}.required_approvals: {route.required_approvals} needed but only "
                    f"{len(possible)} distinct approver(s) exist"
                )
        return self

    def _check_target(self, target: Target, key: str) -> None:
        surface = surfaces.find(target.surface)
        if surface is None:
            return
        if self.surface_table(surface.name) is None:
            # Without its table the surface is not served: every card for this target would
            # be skipped (a log line per card) and its approvers never told.
            raise ValueError(
                f"{key}: {str(target)!r} needs the [{surface.name}] table, which this config "
                f"does not have: add it (docs/reference.md) or remove the target"
            )
        if not surface.targets_principals or target.every_approver:
            return
        name = target.principal or target.where
        principal = self.principals.get(name)
        if principal is None:
            raise ValueError(f"{key}: {str(target)!r} names no configured principal")
        if getattr(principal, surface.name, None) is None:
            raise ValueError(f"{key}: {str(target)!r}: principals.{name} has no {surface.name}")

    def _check_approver(self, approver: str, key: str) -> None:
        if approver.startswith(GROUP_PREFIX):
            if approver[len(GROUP_PREFIX) :] not in self.groups:
                raise ValueError(f"{key}: unknown group {approver!r}")
        elif approver not in self.principals:
            raise ValueError(f"{key}: unknown principal {approver!r}")

    def surface_table(self, name: str) -> BaseModel | None:
        """The `[name]` table of a registered surface; None when the config has none."""
        table = getattr(self, name, None) if surfaces.find(name) is not None else None
        return table if isinstance(table, BaseModel) else None

    @property
    def database_url(self) -> str:
        return os.environ.get("SIGNOFF_DATABASE_URL") or self.database.url

    def directory(self) -> Directory:
        return Directory(
            principals={
                key: Principal(
                    key=key,
                    name=p.name,
                    accounts={
                        s.name: account
                        for s in surfaces.personal()
                        if (account := getattr(p, s.name, None)) is not None
                    },
                    operator=p.operator,
                )
                for key, p in self.principals.items()
            },
            groups={key: tuple(g.members) for key, g in self.groups.items()},
            surface_words={s.name: s.where for s in surfaces.registered() if s.where},
            tenants={
                t.name: Tenant(
                    name=t.name,
                    api_key_env=t.api_key_env,
                    embed_key_env=t.embed_key_env,
                    webhook_url=t.webhook_url,
                    allow_private_callbacks=t.allow_private_callbacks,
                    webhook_secret_env=(
                        (t.webhook_secret_env,)
                        if isinstance(t.webhook_secret_env, str)
                        else tuple(t.webhook_secret_env or ())
                    ),
                )
                for t in self.tenants
            },
            routes=tuple(
                Route(
                    tenant=r.tenant,
                    capability=r.capability,
                    approvers=tuple(r.approvers),
                    notify=tuple(Target.parse(t) for t in r.notify),
                    approval_ttl=parse_duration(r.approval_ttl),
                    grant_ttl=parse_duration(r.grant_ttl),
                    required_approvals=r.required_approvals,
                    allow_self_approval=r.allow_self_approval,
                    confirm=r.confirm,
                    remind_before=(
                        parse_duration(r.remind_before) if r.remind_before is not None else None
                    ),
                    edits=r.edits if isinstance(r.edits, str) else tuple(r.edits),
                    grants=r.grants if r.grants is not None else r.required_approvals == 1,
                    max_grant_lifetime=parse_duration(r.max_grant_lifetime),
                    notify_grant_uses=r.notify_grant_uses,
                    when=conditions.text(r.when) if r.when is not None else None,
                    escalation=tuple(
                        Escalation(after=parse_duration(e.after), to=e.to) for e in r.escalation
                    ),
                )
                for r in self.routes
            ),
        )

    def masked(self) -> dict[str, Any]:
        """The config as data with every secret shown only as its variable and whether it is
        set; the values themselves never leave the process."""
        data = self.model_dump(mode="json")
        data["database"]["url"] = _mask_url(self.database_url)
        _mask(data)
        return data


# By the registered surfaces themselves (equal only to themselves), so a model is never
# reused for surfaces it was not built for.
_models: dict[tuple[surfaces.Surface, ...], type[Config]] = {}


def config_model() -> type[Config]:
    """The model of a config file: `Config`, a `[name]` table per registered surface, and
    in each principal's table a `name` key per surface with accounts (bot.surfaces)."""
    registered = surfaces.registered()
    model = _models.get(registered)
    if model is None:
        for s in registered:
            if s.name in Config.model_fields or s.name in PrincipalConfig.model_fields:
                raise ValueError(f"surface {s.name!r} would shadow a config key of that name")
        principal = create_model(
            "PrincipalConfig",
            __base__=PrincipalConfig,
            **{s.name: (Optional[_account(s)], None) for s in registered if s.personal},  # noqa: UP045
        )
        model = create_model(
            "Config",
            __base__=Config,
            principals=(dict[Name, principal], {}),  # type: ignore[valid-type]
            **{s.name: (Optional[s.config], None) for s in registered},  # noqa: UP045
        )
        _models[registered] = model
    return model


def _account(surface: surfaces.Surface) -> Any:
    """A principal's account on `surface`, as it declares it, refusing what it refuses."""

    def refused(account: Any) -> Any:
        reason = surface.refuse_account(account)
        if reason is not None:
            raise ValueError(reason)
        return account

    return Annotated[surface.account, AfterValidator(refused)]


def _mask_url(url: str) -> str:
    """Hide what a URL can carry as a secret: the password (user:pw@, :pw@) and every query
    value (?password=, ?token=). The rest of the URL is left exactly as written."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        userinfo, host = parts.netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        masked = f"{user}:***@{host}" if ":" in userinfo else parts.netloc
        url = url.replace(parts.netloc, masked, 1)
    if parts.query:
        query = "&".join(
            f"{pair.split('=', 1)[0]}=***" if "=" in pair else pair
            for pair in parts.query.split("&")
        )
        url = url.replace(f"?{parts.query}", f"?{query}", 1)
    return url


def _mask(node: Any) -> None:
    """In place: `*_env` keys show whether their variable is set, `*_url` keys lose secrets."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("_env") and isinstance(value, str):
                node[key] = f"{value} ({'set' if os.environ.get(value) else 'NOT SET'})"
            elif key.endswith("_env") and isinstance(value, list):
                node[key] = [f"{v} ({'set' if os.environ.get(v) else 'NOT SET'})" for v in value]
            elif key.endswith("_url") and isinstance(value, str):
                node[key] = _mask_url(value)
            else:
                _mask(value)
    elif isinstance(node, list):
        for item in node:
            _mask(item)


def parse_config(data: dict[str, Any], source: str = "config", text: str | None = None) -> Config:
    """The validated config; `text`, the TOML it was read from, lets errors name lines."""
    model = config_model()
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_errors(exc, model, text)}") from None


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """The config from `path`, else $SIGNOFF_CONFIG, else the built-in defaults."""
    chosen = path or os.environ.get("SIGNOFF_CONFIG")
    if not chosen:
        return config_model()()
    file = Path(chosen)
    try:
        text = file.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"config file {file} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{file}: not valid TOML: nested too deeply") from None
    database = data.get("database")
    if isinstance(database, dict) and isinstance(database.get("url"), str):
        # A SQLite file named in the config sits beside the config, wherever the command
        # runs from ($SIGNOFF_DATABASE_URL, from the environment, stays as given).
        database["url"] = resolve_sqlite_path(database["url"], file.parent)
    retention = data.get("retention")
    if isinstance(retention, dict) and isinstance(retention.get("archive_dir"), str):
        retention["archive_dir"] = str(file.parent / retention["archive_dir"])  # likewise
    return parse_config(data, str(file), text)
