"""Config (docs/reference.md, "Configuration"): TOML, env overrides, validation, masking."""

from __future__ import annotations

import copy
import json
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.api_keys import check_tenant_keys
from bot.config import Config, load_config, parse_config
from bot.errors import ConfigError
from tests.support.samples import TEST_CONFIG

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "signoff.example.toml"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may see the developer's own SIGNOFF_* settings."""
    monkeypatch.delenv("SIGNOFF_CONFIG", raising=False)
    monkeypatch.delenv("SIGNOFF_DATABASE_URL", raising=False)


def _config(**changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(TEST_CONFIG), **changes}


def _with_route(index: int, **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(TEST_CONFIG)
    data["routes"][index].update(changes)
    return data


# Every built-in surface's table, for a route that notifies them (a target on a surface
# without its table is refused).
SURFACE_TABLES: dict[str, Any] = {
    "slack": {},
    "telegram": {},
    "web": {},
    "email": {"host": "smtp.example.com", "from_address": "signoff@example.com"},
}


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value.message


# -- loading -----------------------------------------------------------------------------


def test_example_config_file_validates_and_means_what_it_says(tmp_path: Path) -> None:
    copied = tmp_path / "signoff.toml"
    copied.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")

    config = load_config(copied)

    assert config.server.listen == "127.0.0.1:8700"
    # A relative SQLite path sits beside the config file, wherever the command runs.
    assert config.database_url == f"sqlite+aiosqlite:///{copied.parent}/signoff.db"
    assert [t.name for t in config.tenants] == ["acme"]
    assert config.tenants[0].api_key_env == "SIGNOFF_ACME_API_KEY"
    # No webhook URL that goes nowhere: the examples resume by approval id.
    assert config.tenants[0].webhook_url is None
    # Every surface ships commented out: the quick start needs no credentials, the CLI decides.
    assert all(config.surface_table(name) is None for name in ("slack", "telegram", "web", "email"))
    assert config.principals["alice"].telegram == 111111
    assert config.groups["finance"].members == ["alice", "bob"]
    directory = config.directory()
    route = directory.route_for("acme", "payments.refund")
    assert route.approvers == ("group:finance",)
    # Nothing is notified until a surface is on (a target without its table is refused).
    assert all(not r.notify for r in directory.routes)
    assert route.edits == ("amount",)
    assert route.approval_ttl == timedelta(hours=72)
    assert route.grant_ttl == timedelta(hours=24)
    assert route.required_approvals == 1
    assert route.allow_self_approval is False
    assert [(e.after, e.to) for e in route.escalation] == [(timedelta(hours=24), "carol")]
    # What the examples ask for has a route; the adapters' tools may be edited before approval.
    assert directory.route_for("acme", "mcp.shop.cancel_order").capability == "mcp.*"
    for tool in ("tools.refund", "tools.email"):
        assert directory.route_for("acme", tool).edits == "any"


def test_the_example_config_with_every_commented_notify_and_surface_on_loads(
    tmp_path: Path,
) -> None:
    """What its comments tell a user to uncomment, once they have the credentials, loads."""
    text = EXAMPLE.read_text(encoding="utf-8")
    for table in ("slack", "telegram", "web", "email"):
        start = text.index(f"# [{table}]\n")
        end = text.index("\n\n", start)
        lines = [line.removeprefix("# ") for line in text[start:end].split("\n")]
        text = text[:start] + "\n".join(lines) + text[end:]
    text = text.replace("# notify = ", "notify = ")
    copied = tmp_path / "signoff.toml"
    copied.write_text(text, encoding="utf-8")
    routes = load_config(copied).directory().routes
    assert [str(t) for t in routes[0].notify] == ["slack:C0FINANCE", "telegram:dm"]
    assert [str(t) for r in routes[1:] for t in r.notify] == ["slack:dm", "telegram:dm", "web"]


def test_example_config_loads_from_the_repository_path() -> None:
    assert load_config(EXAMPLE).tenants[0].name == "acme"


def test_defaults_without_file_or_env() -> None:
    config = load_config()

    assert config.database_url.startswith("sqlite+aiosqlite:///")
    assert config.database_url.endswith("signoff.db")
    assert config.server.listen == "127.0.0.1:8700"
    assert config.slack is None and config.telegram is None


def test_signoff_config_env_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "env.toml"
    path.write_text('[server]\nlisten = "0.0.0.0:9100"\n', encoding="utf-8")
    monkeypatch.setenv("SIGNOFF_CONFIG", str(path))

    assert load_config().server.listen == "0.0.0.0:9100"


def test_explicit_path_wins_over_signoff_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_env = tmp_path / "env.toml"
    from_env.write_text('[server]\nlisten = "0.0.0.0:9100"\n', encoding="utf-8")
    explicit = tmp_path / "explicit.toml"
    explicit.write_text('[server]\nlisten = "0.0.0.0:9200"\n', encoding="utf-8")
    monkeypatch.setenv("SIGNOFF_CONFIG", str(from_env))

    assert load_config(explicit).server.listen == "0.0.0.0:9200"


def test_signoff_database_url_overrides_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db.toml"
    path.write_text('[database]\nurl = "sqlite+aiosqlite:///from-file.db"\n', encoding="utf-8")
    assert load_config(path).database_url == f"sqlite+aiosqlite:///{tmp_path}/from-file.db"

    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "postgresql+asyncpg://app@db.internal/signoff")

    assert load_config(path).database_url == "postgresql+asyncpg://app@db.internal/signoff"
    assert Config().database_url == "postgresql+asyncpg://app@db.internal/signoff"


def test_missing_file_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    assert str(missing) in info.value.message
    assert "does not exist" in info.value.message


def test_missing_file_named_by_env_is_an_error_not_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere.toml"
    monkeypatch.setenv("SIGNOFF_CONFIG", str(missing))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('[server\nlisten = "127.0.0.1:8700"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in info.value.message
    assert "not valid TOML" in info.value.message


def test_validation_error_from_a_file_names_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[server]\nlisten = "nope"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in info.value.message
    assert "server.listen" in info.value.message


# -- unknown keys ------------------------------------------------------------------------


def test_test_config_itself_is_valid() -> None:
    assert parse_config(copy.deepcopy(TEST_CONFIG)).routes


def test_unknown_top_level_key_is_named() -> None:
    assert "colour" in _error(_config(colour="blue"))


def test_unknown_nested_key_is_named() -> None:
    message = _error(_config(server={"lisen": "127.0.0.1:8700"}))
    assert "server.lisen" in message


def test_misspelled_route_key_is_named() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    route = data["routes"][0]
    route["capabilty"] = route.pop("capability")
    message = _error(data)
    assert "routes.0.capabilty" in message


def test_unknown_key_in_a_principal_is_named() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["principals"]["alice"]["slak"] = "U0ALICE"
    assert "principals.alice.slak" in _error(data)


# -- bad values --------------------------------------------------------------------------


def test_bad_listen_address_is_named() -> None:
    message = _error(_config(server={"listen": "nope"}))
    assert "server.listen" in message
    assert "nope" in message


@pytest.mark.parametrize("listen", ["127.0.0.1:70000", ":8700", "host:http"])
def test_listen_needs_a_host_and_a_real_port(listen: str) -> None:
    assert "server.listen" in _error(_config(server={"listen": listen}))


def test_bad_duration_is_named() -> None:
    message = _error(_with_route(0, approval_ttl="3 fortnights"))
    assert "routes.0.approval_ttl" in message
    assert "3 fortnights" in message


def test_bad_escalation_duration_is_named() -> None:
    message = _error(_with_route(0, escalation=[{"after": "soon", "to": "carol"}]))
    assert "routes.0.escalation.0.after" in message
    assert "soon" in message


def test_absurd_duration_is_a_config_error() -> None:
    message = _error(_with_route(0, approval_ttl="1000000000d"))
    assert "routes.0.approval_ttl" in message


def test_bad_notify_target_is_named() -> None:
    message = _error({**_with_route(0, notify=["slack:dm", "email:x"]), **SURFACE_TABLES})
    assert "routes.0" in message
    assert "email:x" in message


def test_valid_notify_targets_are_accepted() -> None:
    targets = ["slack:C0FINANCE", "slack:dm", "telegram:-100123", "telegram:dm", "web"]
    data = {**_with_route(0, notify=targets), **SURFACE_TABLES}
    route = parse_config(data).directory().routes[0]
    assert [str(t) for t in route.notify] == targets


def test_required_approvals_zero_is_refused() -> None:
    assert "routes.0.required_approvals" in _error(_with_route(0, required_approvals=0))


def test_required_approvals_above_available_approvers_is_refused() -> None:
    # group:finance has three members.
    message = _error(_with_route(0, required_approvals=4))
    assert "routes.0.required_approvals" in message
    assert "3" in message


def test_required_approvals_counts_distinct_people() -> None:
    # alice is named directly and through the group: still three distinct people.
    data = _with_route(0, approvers=["alice", "group:finance"], required_approvals=3)
    assert parse_config(data).routes[0].required_approvals == 3
    data = _with_route(0, approvers=["alice", "group:finance"], required_approvals=4)
    assert "routes.0.required_approvals" in _error(data)


def test_group_member_must_be_a_principal() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["groups"]["finance"]["members"].append("mallory")
    message = _error(data)
    assert "groups.finance.members" in message
    assert "mallory" in message


def test_route_approver_must_be_a_known_principal() -> None:
    message = _error(_with_route(1, approvers=["alice", "mallory"]))
    assert "routes.1.approvers" in message
    assert "mallory" in message


def test_route_approver_group_must_exist() -> None:
    message = _error(_with_route(0, approvers=["group:ops"]))
    assert "routes.0.approvers" in message
    assert "group:ops" in message


def test_route_needs_at_least_one_approver() -> None:
    assert "routes.0.approvers" in _error(_with_route(0, approvers=[]))


def test_escalation_target_must_exist() -> None:
    message = _error(_with_route(0, escalation=[{"after": "24h", "to": "mallory"}]))
    assert "routes.0.escalation.0.to" in message
    assert "mallory" in message


def test_escalation_to_a_group_is_accepted() -> None:
    route = parse_config(_with_route(0, escalation=[{"after": "1h", "to": "group:finance"}]))
    assert route.routes[0].escalation[0].to == "group:finance"


def test_duplicate_tenant_names_are_refused() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["tenants"].append({"name": "acme"})
    message = _error(data)
    assert "tenants" in message
    assert "acme" in message


def test_env_key_must_be_a_variable_name() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["tenants"][0]["api_key_env"] = "sk-live-abc 123"
    assert "tenants.0.api_key_env" in _error(data)


def test_webhook_url_must_be_http() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["tenants"][0]["webhook_url"] = "ftp://hooks.example"
    assert "tenants.0.webhook_url" in _error(data)


def test_wrong_type_is_named() -> None:
    assert "routes.0.approvers" in _error(_with_route(0, approvers="group:finance"))


# -- masking -----------------------------------------------------------------------------


def test_masked_never_shows_secret_values(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-live-VERY-SECRET-0123456789"
    monkeypatch.setenv("SIGNOFF_ACME_API_KEY", secret)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-ALSO-SECRET")
    monkeypatch.delenv("SLACK_SIGNING_SECRET", raising=False)
    monkeypatch.delenv("SIGNOFF_ACME_WEBHOOK_SECRET", raising=False)

    data = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    data["slack"] = {}  # commented out in the example; its defaults name the variables
    masked = parse_config(data).masked()
    text = json.dumps(masked)

    assert secret not in text
    assert "xoxb-ALSO-SECRET" not in text
    assert masked["tenants"][0]["api_key_env"] == "SIGNOFF_ACME_API_KEY (set)"
    assert masked["tenants"][0]["webhook_secret_env"] == "SIGNOFF_ACME_WEBHOOK_SECRET (NOT SET)"
    assert masked["slack"]["bot_token_env"] == "SLACK_BOT_TOKEN (set)"
    assert masked["slack"]["signing_secret_env"] == "SLACK_SIGNING_SECRET (NOT SET)"


def test_masked_is_plain_json_and_keeps_non_secrets() -> None:
    masked = load_config(EXAMPLE).masked()
    assert json.loads(json.dumps(masked)) == masked
    assert masked["server"]["listen"] == "127.0.0.1:8700"
    assert masked["routes"][0]["approvers"] == ["group:finance"]


def test_masked_hides_the_database_password_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pg.toml"
    path.write_text(
        '[database]\nurl = "postgresql+asyncpg://signoff:hunter2pw@db.internal:5432/signoff"\n',
        encoding="utf-8",
    )
    url = load_config(path).masked()["database"]["url"]
    assert "hunter2pw" not in url
    assert "signoff" in url and "db.internal:5432" in url


def test_masked_hides_the_password_of_the_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "postgresql://app:s3cr3t-pw@db.internal/app")
    url = load_config().masked()["database"]["url"]
    assert "s3cr3t-pw" not in url
    assert "db.internal" in url  # it shows the URL actually in use, not the file's


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+asyncpg://:s3cr3t-pw@db.internal/app",
        "postgresql+asyncpg://app@db.internal/app?password=s3cr3t-pw",
    ],
)
def test_masked_hides_every_form_of_database_password(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", url)
    assert "s3cr3t-pw" not in json.dumps(load_config().masked())


def test_route_for_a_tenant_nobody_configured_is_an_error() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["routes"][0]["tenant"] = "acmee"
    with pytest.raises(ConfigError, match=r"routes\.0\.tenant: 'acmee' matches no configured"):
        parse_config(data)


def test_boolean_written_as_a_string_is_refused() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["routes"][0]["allow_self_approval"] = "yes"
    with pytest.raises(ConfigError, match="allow_self_approval"):
        parse_config(data)


def test_masked_hides_webhook_credentials_and_keeps_plain_urls(tmp_path: Path) -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["tenants"][0]["webhook_url"] = "https://hook:s3cret@agents.example/in?token=abc123"
    masked = parse_config(data).masked()
    webhook = masked["tenants"][0]["webhook_url"]
    assert "s3cret" not in webhook and "abc123" not in webhook
    assert webhook == "https://hook:***@agents.example/in?token=***"
    assert masked["database"]["url"] == "sqlite+aiosqlite:///signoff.db"


@pytest.mark.parametrize("url", ["mysql://u@h/db", "oracle://h", "sqlite+pysqlite:///x.db"])
def test_unsupported_database_is_a_config_error(url: str) -> None:
    data = copy.deepcopy(TEST_CONFIG) | {"database": {"url": url}}
    with pytest.raises(ConfigError, match=r"database\.url: unsupported database"):
        parse_config(data)


@pytest.mark.parametrize("url", ["sqlite:///x.db", "postgres://u@h/db", "postgresql://u@h/db"])
def test_plain_database_urls_are_accepted(url: str) -> None:
    data = copy.deepcopy(TEST_CONFIG) | {"database": {"url": url}}
    assert parse_config(data).database_url == url


def test_names_longer_than_the_columns_hold_are_refused() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["principals"]["a" * 121] = {"name": "Too Long"}
    with pytest.raises(ConfigError, match="principals"):
        parse_config(data)


def test_two_tenants_may_not_share_an_api_key_variable() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["tenants"][0]["api_key_env"] = "SHARED_KEY"
    data["tenants"][1]["api_key_env"] = "SHARED_KEY"
    assert "SHARED_KEY" in _error(data)


def test_an_embed_key_must_be_its_own() -> None:
    """An embed key mints a person's authority: naming the agent's key variable (or another
    tenant's embed key's) would let the agent decide its own requests as a person."""
    data = copy.deepcopy(TEST_CONFIG)
    data["tenants"][0]["api_key_env"] = "ACME_KEY"
    data["tenants"][0]["embed_key_env"] = "ACME_KEY"
    assert "embed_key_env 'ACME_KEY'" in _error(data)
    data["tenants"][0]["embed_key_env"] = "SHARED_EMBED"
    data["tenants"][1]["embed_key_env"] = "SHARED_EMBED"
    assert "embed_key_env 'SHARED_EMBED'" in _error(data)
    # The same value in two variables is caught when the keys are read (serve's check).
    data["tenants"][1]["embed_key_env"] = "GLOBEX_EMBED"
    directory = parse_config(data).directory()
    with pytest.raises(ConfigError, match="embed key"):
        check_tenant_keys(directory, {"ACME_KEY": "same-value", "GLOBEX_EMBED": "same-value"})


def test_outbox_lease_must_outlive_a_webhook_attempt() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["outbox"] = {"lease": "10s", "webhook_timeout": 10}
    assert "outbox.lease" in _error(data)


def test_claim_lease_is_at_most_a_day() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["server"] = {"claim_lease": "2d"}
    assert "server.claim_lease" in _error(data)


def test_one_slack_account_may_prove_only_one_principal() -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["principals"]["bob"]["slack"] = data["principals"]["alice"]["slack"]
    assert "principals.bob.slack" in _error(data)
