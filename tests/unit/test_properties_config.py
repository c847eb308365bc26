"""Property tests (hypothesis) for config loading: parse_config and load_config answer a config
or a ConfigError whatever they are given, name the unknown keys they refuse, and accept only
notify targets signoff can send to (issue 15, "Suites that stay").

Each property states what must hold for every input hypothesis can generate; a parser may
refuse, but only with signoff's own errors (or the ValueError it documents), never with a
RecursionError, TypeError, KeyError or the like. The inputs that broke a property when it was
written (and the bugs they showed, since fixed) stay as @example so they are tried first
every run.

Settings (no example database, a fixed seed under CI=true, no deadline) and why:
tests/support/json_strategies.py property_settings.
"""

from __future__ import annotations

import copy
import math
import tomllib
import typing
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import BaseModel

from bot.config import (
    Config,
    DatabaseConfig,
    EscalationConfig,
    GroupConfig,
    OutboxConfig,
    RouteConfig,
    ServerConfig,
    SweeperConfig,
    TenantConfig,
    config_model,
    load_config,
    parse_config,
)
from bot.errors import ConfigError
from bot.target import Target
from channels.slack.config import SlackConfig
from channels.telegram.config import TelegramConfig
from channels.web.config import WebConfig
from store.engine import resolve_sqlite_path
from tests.support.json_paths import delete_at as _delete
from tests.support.json_paths import paths_in as _paths
from tests.support.json_paths import set_at as _set
from tests.support.json_paths import value_at as _get
from tests.support.json_strategies import property_settings as _settings
from tests.support.samples import TEST_CONFIG


def _toml_string(text: str) -> str:
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _toml(data: dict[str, Any]) -> str:
    """A TOML document of `data` (inline tables throughout), as tomllib reads it back."""
    return "".join(f"{_toml_string(k)} = {_toml_value(v)}\n" for k, v in data.items())


toml_scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(["10m", "72h", "0s", "25h", "1d12h", "-1", "web", "slack:dm"])
    | st.sampled_from(["127.0.0.1:8700", ":80", "host:99999", "sqlite:///x.db", "http://h/"])
    | st.sampled_from(["alice", "group:finance", "payments.*", "*", "acme", "U0ALICE"])
)


toml_values = st.recursive(
    toml_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=10,
)


_SECTIONS = sorted(config_model().model_fields)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _full_config() -> dict[str, Any]:
    """TEST_CONFIG with every section written out (as the defaults are), so edits reach
    every key of the config; TOML has no null, so unset options are left out."""
    data = _drop_none(Config().model_dump(mode="json"))
    data["slack"] = _drop_none(SlackConfig().model_dump(mode="json"))
    data["telegram"] = _drop_none(TelegramConfig().model_dump(mode="json"))
    data["web"] = _drop_none(WebConfig().model_dump(mode="json"))
    data.update(copy.deepcopy(TEST_CONFIG))
    data["tenants"][1]["webhook_secret_env"] = "GLOBEX_SECRET"
    data["tenants"][1]["api_key_env"] = "GLOBEX_KEY"
    data["routes"][0]["notify"] = ["slack:C0FIN", "telegram:dm", "web"]
    return data


@st.composite
def mutated_configs(draw: st.DrawFn) -> dict[str, Any]:
    data = _full_config()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        operation = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if operation == "set":
            _set(data, path, draw(toml_values))
        elif operation == "delete":
            _delete(data, path)
        else:
            node = _get(data, path[:-1])
            if isinstance(node, dict):
                node[draw(st.text(max_size=10))] = draw(toml_values)
    return data


random_configs = st.dictionaries(st.sampled_from(_SECTIONS) | st.text(max_size=10), toml_values)


@pytest.fixture(autouse=True)
def _no_signoff_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No property here may see the developer's own SIGNOFF_* settings."""
    monkeypatch.delenv("SIGNOFF_CONFIG", raising=False)
    monkeypatch.delenv("SIGNOFF_DATABASE_URL", raising=False)


def _parsed(data: dict[str, Any]) -> Config | ConfigError:
    try:
        return parse_config(data)
    except ConfigError as error:
        assert error.message
        return error


def test_the_full_config_is_valid() -> None:
    assert isinstance(parse_config(_full_config()), Config)


@_settings(150)
@given(data=random_configs | mutated_configs())
def test_parse_config_answers_a_config_or_config_error(data: dict[str, Any]) -> None:
    config = _parsed(data)
    if isinstance(config, Config):
        config.directory()  # what the server builds from it at start


# The tables of the config, each with the model that reads it (principals and groups are
# maps of names to tables; a new key there is a new principal or group, not an unknown key).
# A file's model has a table per registered surface and their accounts in each principal.
_CONFIG = config_model()


_PRINCIPAL = typing.get_args(_CONFIG.model_fields["principals"].annotation)[1]


_TABLES: list[tuple[tuple[Any, ...], type[BaseModel]]] = [
    ((), _CONFIG),
    (("server",), ServerConfig),
    (("database",), DatabaseConfig),
    (("outbox",), OutboxConfig),
    (("sweeper",), SweeperConfig),
    (("slack",), SlackConfig),
    (("telegram",), TelegramConfig),
    (("tenants", 0), TenantConfig),
    (("tenants", 1), TenantConfig),
    (("principals", "alice"), _PRINCIPAL),
    (("principals", "carol"), _PRINCIPAL),
    (("groups", "finance"), GroupConfig),
    (("routes", 0), RouteConfig),
    (("routes", 3), RouteConfig),
    (("routes", 0, "escalation", 0), EscalationConfig),
]


@_settings(120)
@given(table=st.sampled_from(_TABLES), key=st.text(min_size=1, max_size=20), value=toml_values)
@example(table=((), _CONFIG), key="Server", value={})
@example(table=(("server",), ServerConfig), key="listen ", value="127.0.0.1:8700")
def test_an_unknown_key_is_refused_and_named(
    table: tuple[tuple[Any, ...], type[BaseModel]], key: str, value: Any
) -> None:
    path, model = table
    if key in model.model_fields:
        return
    data = _full_config()
    _get(data, path)[key] = value
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert key in info.value.message


@_settings(60)
@given(data=random_configs | mutated_configs())
def test_load_config_reads_toml_as_parse_config_reads_the_data(
    data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = _toml(data)
    assert tomllib.loads(text) == data  # the helper writes what it means to
    path = tmp_path_factory.getbasetemp() / "properties-signoff.toml"
    path.write_text(text, encoding="utf-8")
    # load_config places a relative SQLite path beside the file, as parse_config cannot.
    as_loaded = copy.deepcopy(data)
    database = as_loaded.get("database")
    if isinstance(database, dict) and isinstance(database.get("url"), str):
        database["url"] = resolve_sqlite_path(database["url"], path.parent)
    # And a relative [retention] archive_dir.
    retention = as_loaded.get("retention")
    if isinstance(retention, dict) and isinstance(retention.get("archive_dir"), str):
        retention["archive_dir"] = str(path.parent / retention["archive_dir"])
    expected = _parsed(as_loaded)
    try:
        loaded: Config | ConfigError = load_config(path)
    except ConfigError as error:
        loaded = error
    assert type(loaded) is type(expected)
    if isinstance(expected, Config):
        assert loaded == expected
    else:
        assert str(path) in str(loaded)


def _load_bytes(content: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.getbasetemp() / "properties-signoff.toml"
    path.write_bytes(content)
    try:
        load_config(path)
    except ConfigError as error:
        assert error.message


@_settings(150)
@given(content=st.text(max_size=200), levels=st.integers(min_value=0, max_value=3000))
@example(content="", levels=3000)
def test_load_config_refuses_any_text_only_with_config_error(
    content: str, levels: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _load_bytes(f"a = {'[' * levels}{']' * levels}\n{content}".encode(), tmp_path_factory)


@_settings(100)
@given(content=st.text(max_size=200) | mutated_configs().map(_toml))
def test_load_config_refuses_shallow_text_only_with_config_error(
    content: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _load_bytes(content.encode(), tmp_path_factory)


@_settings(100)
@given(content=st.binary(max_size=200))
@example(content=b"\xff\xfe[server]\n")
def test_load_config_refuses_any_bytes_only_with_config_error(
    content: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _load_bytes(content, tmp_path_factory)


@_settings(200)
@given(
    target=st.tuples(
        st.sampled_from(["slack:dm", "slack:C0FIN", "telegram:dm", "telegram:-100", "web"]),
        st.sampled_from(["", "\n", " ", "x"]),
    ).map("".join)
    | st.text(max_size=15)
)
@example(target="web\n")
def test_an_accepted_notify_target_is_one_signoff_can_send_to(target: str) -> None:
    data = _full_config()
    data["routes"][0]["notify"] = [target]
    config = _parsed(data)
    if isinstance(config, Config):
        parsed = Target.parse(target)
        assert str(parsed) == target
        assert parsed.surface in ("slack", "telegram", "web")
        assert parsed.where == parsed.where.strip()
        assert (parsed.surface == "web") == (parsed.where == "")
