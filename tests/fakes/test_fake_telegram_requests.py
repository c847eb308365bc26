"""The fake Telegram against the real python-telegram-bot: tokens, method names and request
bodies, and the injected failures (flood control, server errors)."""

from __future__ import annotations

import datetime as dtm

import aiohttp
import pytest
from telegram import Bot
from telegram.error import BadRequest, EndPointNotFound, InvalidToken, NetworkError, RetryAfter
from telegram.warnings import PTBDeprecationWarning

from tests.fakes.telegram import FakeTelegram


async def test_rate_limit_raises_retry_after(
    tg: FakeTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    tg.rate_limit_next("sendMessage")
    # PTB 22 warns that retry_after will become a timedelta, already while building the error.
    with pytest.warns(PTBDeprecationWarning), pytest.raises(RetryAfter) as limited:
        await bot.send_message(111, "hi")
    with pytest.warns(PTBDeprecationWarning):
        assert limited.value.retry_after == 3
    call = tg.calls_to("sendMessage")[0]
    assert (call.status, call.error) == (429, "Too Many Requests: retry after 3")
    assert call.response == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 3",
        "parameters": {"retry_after": 3},
    }

    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    tg.rate_limit_next(retry_after=7)  # any method
    with pytest.raises(RetryAfter) as limited_again:
        await bot.get_webhook_info()
    assert limited_again.value.retry_after == dtm.timedelta(seconds=7)

    tg.rate_limit_next("sendMessage", retry_after=1)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(tg.api_url + "/sendMessage", data={"chat_id": "1", "text": "x"})
        assert (resp.status, resp.headers["Retry-After"]) == (429, "1")
    assert (await bot.send_message(111, "hi")).text == "hi"


async def test_server_errors_raise_network_error(tg: FakeTelegram, bot: Bot) -> None:
    tg.fail_next("sendMessage", times=2)
    for _ in range(2):
        with pytest.raises(NetworkError) as failed:
            await bot.send_message(111, "hi")
        assert not isinstance(failed.value, BadRequest)
        assert failed.value.message.startswith("Bad Gateway (502). Parsing the server response")
    assert (await bot.send_message(111, "hi")).text == "hi"
    assert [c.status for c in tg.calls_to("sendMessage")] == [502, 502, 200]
    assert [c.error for c in tg.calls_to("sendMessage")][:2] == ["http_502", "http_502"]
    assert len(tg.calls_to("sendMessage", ok=True)) == 1

    tg.fail_next(status=503)
    with pytest.raises(NetworkError, match="Service Unavailable"):
        await bot.get_me()


async def test_tokens_and_methods(tg: FakeTelegram) -> None:
    with pytest.raises(InvalidToken) as rejected:
        async with Bot("123456:WRONG", base_url=tg.base_url):
            pass
    assert "was rejected by the server" in rejected.value.message
    assert isinstance(rejected.value.__cause__, InvalidToken)
    assert rejected.value.__cause__.message == "Unauthorized"

    async with aiohttp.ClientSession() as http:
        resp = await http.get(f"{tg.base_url}123456:WRONG/getMe")
        assert resp.status == 401
        assert await resp.json() == {"ok": False, "error_code": 401, "description": "Unauthorized"}
        resp = await http.get(f"{tg.base_url}not-a-token/getMe")
        assert (resp.status, (await resp.json())["description"]) == (404, "Not Found")
        resp = await http.post(tg.api_url + "/noSuchMethod")
        assert (resp.status, (await resp.json())["description"]) == (404, "Not Found")
        # Method names are case-insensitive; JSON bodies and query strings work too.
        resp = await http.post(tg.api_url + "/SENDMESSAGE", json={"chat_id": 111, "text": "json"})
        assert (await resp.json())["result"]["text"] == "json"
        resp = await http.get(tg.api_url + "/sendmessage?chat_id=111&text=query")
        assert (await resp.json())["result"]["text"] == "query"
    assert [c.args["text"] for c in tg.calls_to("sendMessage")] == ["json", "query"]

    async with Bot(tg.token, base_url=tg.base_url) as bot:
        with pytest.raises(EndPointNotFound):
            await bot.do_api_request("noSuchMethod")
        assert await bot.set_my_commands([("approve", "Approve a request")])
        assert [c.command for c in await bot.get_my_commands()] == ["approve"]
        assert tg.commands() == [{"command": "approve", "description": "Approve a request"}]
        assert await bot.delete_my_commands()
        assert tg.commands() == []
        assert await bot.log_out() and await bot.close()
