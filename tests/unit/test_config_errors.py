"""Config mistakes explained: an unknown key names the closest valid one and its line, every
duration takes the "10s" form (plain seconds still work), SQLite paths sit beside the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_config
from bot.errors import ConfigError

TYPOS = """\
[server]
listen = "127.0.0.1:8700"
claim_lese = "10m"

[[tenants]]
name = "acme"

[[tenants]]
name = "globex"
api_key_envv = "GLOBEX_KEY"

[principals.alice]
name = "Alice"
slak = "U0ALICE"
"""


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "signoff.toml"
    path.write_text(text, "utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return caught.value.message


def test_an_unknown_key_names_the_closest_valid_one_and_its_line(tmp_path: Path) -> None:
    message = _error(tmp_path, TYPOS)
    assert "server.claim_lese (line 3): unknown key, did you mean claim_lease?" in message
    # A list of tables counts its entries; a named table is found by its header.
    assert "tenants.1.api_key_envv (line 10): unknown key, did you mean api_key_env?" in message
    assert "principals.alice.slak (line 14): unknown key, did you mean slack?" in message


def test_an_unknown_table_and_a_key_nothing_resembles(tmp_path: Path) -> None:
    message = _error(tmp_path, '[servr]\nlisten = "127.0.0.1:1"\n\n[sweeper]\nzzz = 1\n')
    assert "servr (line 1): unknown key, did you mean server?" in message
    assert "sweeper.zzz (line 5): unknown key;" in message or message.endswith(
        "sweeper.zzz (line 5): unknown key"
    )


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("2s", 2.0), ("1m", 60.0), (0.5, 0.5), (3, 3.0)],
)
def test_every_duration_takes_the_same_form(
    tmp_path: Path, written: object, seconds: float
) -> None:
    value = f'"{written}"' if isinstance(written, str) else str(written)
    path = tmp_path / "signoff.toml"
    path.write_text(
        f'[outbox]\nlease = "5m"\npoll_interval = {value}\nwebhook_timeout = {value}\n'
        f"[sweeper]\ninterval = {value}\n",
        "utf-8",
    )
    config = load_config(path)
    assert config.outbox.poll_interval == seconds
    assert config.outbox.webhook_timeout == seconds
    assert config.sweeper.interval == seconds


def test_a_bad_duration_says_both_forms_and_the_limits_still_hold(tmp_path: Path) -> None:
    message = _error(tmp_path, '[sweeper]\ninterval = "5"\n')
    assert "sweeper.interval (line 2)" in message
    assert "number of seconds" in message and "'5s'" in message
    message = _error(tmp_path, '[outbox]\npoll_interval = "2h"\n')
    assert "outbox.poll_interval (line 2)" in message and "60" in message


def test_the_outbox_cannot_keep_more_jobs_in_flight_when_busy_than_when_idle(
    tmp_path: Path,
) -> None:
    message = _error(tmp_path, "[outbox]\nconcurrency = 8\nbusy_concurrency = 9\n")
    assert "busy_concurrency (9) must be at most outbox.concurrency (8)" in message
    message = _error(tmp_path, "[outbox]\nbusy_lag = 0\n")
    assert "outbox.busy_lag (line 2)" in message
    # A config from before the key existed, with fewer slots than its default, still loads.
    path = tmp_path / "signoff.toml"
    path.write_text("[outbox]\nconcurrency = 2\n", "utf-8")
    assert load_config(path).outbox.concurrency == 2


def test_sqlite_paths_resolve_against_the_config_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "etc"
    conf.mkdir()
    monkeypatch.chdir(tmp_path)
    cases = {
        "sqlite+aiosqlite:///data/signoff.db": f"sqlite+aiosqlite:///{conf}/data/signoff.db",
        "sqlite:///signoff.db?timeout=3": f"sqlite:///{conf}/signoff.db?timeout=3",
        "sqlite+aiosqlite:////var/lib/signoff.db": "sqlite+aiosqlite:////var/lib/signoff.db",
        "sqlite+aiosqlite:///:memory:": "sqlite+aiosqlite:///:memory:",
        "postgresql+asyncpg://u@h/db": "postgresql+asyncpg://u@h/db",
    }
    for written, resolved in cases.items():
        (conf / "signoff.toml").write_text(f'[database]\nurl = "{written}"\n', "utf-8")
        assert load_config("etc/signoff.toml").database.url == resolved


UNSERVED = """\
[[tenants]]
name = "acme"

[principals.alice]
name = "Alice"

[[routes]]
capability = "payments.*"
approvers = ["alice"]

[[routes]]
capability = "contracts.*"
approvers = ["alice"]
notify = [{target}]
"""


@pytest.mark.parametrize("target", ["web", "slack:C0FINANCE", "telegram:dm", "email:dm"])
def test_a_route_notifying_a_surface_without_its_table_is_refused_naming_the_line(
    tmp_path: Path, target: str
) -> None:
    """Not skipped card by card in the log: the config never loads, and says where."""
    message = _error(tmp_path, UNSERVED.format(target=f'"{target}"'))
    surface = target.partition(":")[0]
    assert f"routes.1.notify (line 14): '{target}' needs the [{surface}] table" in message


def test_a_route_notifying_a_configured_surface_loads(tmp_path: Path) -> None:
    path = tmp_path / "signoff.toml"
    path.write_text(
        UNSERVED.format(target='"web"') + '\n[web]\nsecret_env = "SIGNOFF_WEB_SECRET"\n', "utf-8"
    )
    assert [str(t) for t in load_config(path).directory().routes[1].notify] == ["web"]
