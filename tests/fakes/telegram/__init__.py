"""A fake Telegram for tests: the Bot API over real HTTP, and the updates Telegram sends a bot.

`FakeTelegram` is an aiohttp server on 127.0.0.1 that answers ``POST`` (or ``GET``)
``/bot{token}/{method}`` the way https://api.telegram.org does, for the methods signoff uses:
``getMe``, ``sendMessage``, ``editMessageText``, ``editMessageReplyMarkup``,
``answerCallbackQuery``, ``setWebhook``, ``deleteWebhook``, ``getWebhookInfo``, ``getUpdates``,
``setMyCommands``, ``getMyCommands``, ``deleteMyCommands``, ``close`` and ``logOut``.
``fake.base_url`` is the value for ``Bot(token, base_url=...)`` and
``Application.builder().token(token).base_url(...)``: python-telegram-bot ("PTB") appends the
token, then ``/method``.

What is faithful (taken from the Bot API server's source, tdlib/telegram-bot-api Client.cpp,
and tdlib's MessageEntity.cpp, where its HTML parser lives):

- Arguments come from the query string, a form-encoded, multipart or JSON body, and method names
  are case-insensitive. PTB sends every request form-encoded, with integers as decimal text,
  booleans as ``true``/``false`` and objects (``reply_markup``, ``reply_parameters``,
  ``allowed_updates``, ...) as JSON text; each `Call` records them decoded and typed.
- Every answer is ``{"ok": true, "result": ...}`` (setWebhook and deleteWebhook add Telegram's
  ``description``) or ``{"ok": false, "error_code": N, "description": "..."}`` with HTTP status
  N. Descriptions are Telegram's, including its casing rule: after ``Bad Request: `` the first
  letter is lowered unless the message is an upper-case code (``Bad Request:
  BUTTON_DATA_INVALID``). A token of the bot-id form that is not the fake's answers 401
  ``Unauthorized``, a malformed one 404 ``Not Found``; an unknown method 404 ``Not Found``.
- ``sendMessage`` validates in Telegram's order: text (``message text is empty``), entity
  parsing, reply parameters and markup syntax, the chat (``chat_id is empty``, ``chat not
  found``, or a 403 set with `FakeTelegram.block`), the replied message (``message to be
  replied not found`` unless ``allow_sending_without_reply``), then content (``text must be
  non-empty`` for blank text, ``message is too long`` above 4096 UTF-16 code units,
  ``BUTTON_DATA_INVALID`` for callback_data over 64 bytes, bad button URLs).
- ``parse_mode=HTML`` is parsed by a port of tdlib's ``parse_html``: the tags b, strong, i, em,
  u, ins, s, strike, del, span class="tg-spoiler", tg-spoiler, a href, code (class
  "language-x" inside pre), pre, blockquote [expandable] and tg-emoji; the entities ``&lt;``
  ``&gt;`` ``&amp;`` ``&quot;`` and numeric ones (the ``;`` optional). Errors read as
  Telegram's: ``can't parse entities: Unsupported start tag "x" at byte offset N``, ``Can't
  find end tag corresponding to start tag "b"``, ``Unmatched end tag at byte offset N,
  expected "</i>", found "</b>"``... Note that, as in Telegram, a bare ``&`` or ``>`` is kept
  as text; only a ``<`` that opens no supported tag fails. Then, as tdlib's
  ``fix_formatted_text`` does: control characters become spaces, ``\\r`` is dropped, entities
  are sorted, nested ones split where Telegram splits them, adjacent equal ones merged, the text
  trimmed of leading and trailing spaces and newlines, and text_link URLs normalized
  (``https://example.com`` becomes ``https://example.com/``; an invalid URL drops the link).
  Offsets and lengths are in UTF-16 code units.
- Like Telegram, it finds url, email, mention, hashtag, cashtag and bot_command entities in
  sent text (outside code, pre and links) and in the messages `text_message` builds; but URLs
  only with a scheme (``https://``, ``http://``, ``ftp://``, ``tg://``) or ``www.``, where
  Telegram also links bare domains such as ``example.com``.
- The answered Message has ``message_id`` (increasing per chat), ``from`` (the bot; a channel
  post has ``sender_chat`` instead), ``chat`` (private for positive ids, supergroup for
  ``-100...`` ids, group for other negative ids, unless given with `FakeTelegram.add_chat` or
  learnt from an update), ``date``, ``reply_to_message`` (the stored message, without its own
  reply), ``text``, ``entities`` and ``reply_markup`` -- only for an inline keyboard, as
  Telegram echoes no other markup.
- ``editMessageText`` without ``reply_markup`` removes the message's keyboard, as on Telegram;
  an edit that changes neither content nor keyboard fails with ``message is not modified: ...``.
- ``getUpdates`` answers updates given to `FakeTelegram.push_update`, confirming those below
  ``offset`` (a negative offset keeps the last ones), honouring ``limit``, ``allowed_updates``
  (applied when an update is pushed, as Telegram applies it when it creates one) and
  ``timeout`` as a long poll, capped at ``long_poll_cap`` seconds. A second long poll ends the
  first with 409 ``Conflict: terminated by other getUpdates request; ...``, setWebhook ends it
  with ``Conflict: terminated by setWebhook request``, and getUpdates while a webhook is set
  answers 409 ``Conflict: can't use getUpdates method while webhook is active; ...``.
- Forum topics: `FakeTelegram.create_forum_topic` (or the ``createForumTopic`` method) makes a
  supergroup a forum and opens a topic whose root is the ``forum_topic_created`` service
  message, its ``message_id`` the topic's ``message_thread_id``. ``sendMessage`` with
  ``message_thread_id`` posts into the topic (``message thread not found`` for one that does
  not exist), and a reply lands in the topic of the message it replies to; both answer
  ``message_thread_id`` and ``is_topic_message``, as Telegram does in a forum.
- A chat's fate can be set: `FakeTelegram.block` (403, e.g. ``Forbidden: bot was blocked by
  the user``), `FakeTelegram.lose_chat` (400 ``chat not found``), `FakeTelegram.restrict`
  (sendMessage answers 400 ``not enough rights to send text messages to the chat``) and
  `FakeTelegram.migrate` (a basic group upgraded to a supergroup: every call naming the old id
  answers 400 ``group chat was upgraded to a supergroup chat`` with
  ``parameters.migrate_to_chat_id``, and its messages keep their ids under the new one).
- Failures can be injected: `FakeTelegram.rate_limit_next` (HTTP 429 with ``Retry-After`` and
  ``"parameters": {"retry_after": N}``) and `FakeTelegram.fail_next` (HTTP 5xx with nginx's
  HTML page, no JSON).

What is not: setWebhook accepts ``http://`` URLs on any port (Telegram wants HTTPS on port 443,
80, 88 or 8443 and a public address) and does not rate-limit itself to one call a second;
Markdown parse modes answer a 400 that says the fake lacks them; ``tg://user?id=`` links stay
text_link entities (Telegram makes them text_mention); ``input_field_placeholder`` length is not
checked; inline messages and media are not supported; the fake never expires callback queries
(only a second answer to one fails, with ``query is too old and response timeout expired or
query ID is invalid``).

Every request is recorded as a `Call`. Messages the fake sent, edited or was pushed are kept
(`FakeTelegram.message`, `FakeTelegram.messages_in`) as Message dicts plus one non-API key,
`RAW_TEXT` (``"raw_text"``): the text exactly as last sent, e.g. the HTML before parsing. The
builders below drop that key, so a stored message can go straight into a reply or a button
click. Use the fake inside a test's event loop (``async with FakeTelegram() as tg:``) or, for
tests that drive a subprocess, on a loop of its own (``with FakeTelegram.in_thread() as tg:``).

The module functions build what Telegram sends to a bot (`user`, `private_chat`, `group_chat`,
`text_message`, `callback_query`), shaped as Telegram posts them to a webhook; `webhook_body`
and `webhook_headers` give the request (a JSON body, and `SECRET_HEADER` carrying the
secret_token given to setWebhook). `FakeTelegram.deliver` posts an update to the webhook set,
as Telegram would.

The package: `FakeTelegram` is in server.py, its chats, messages and updates (with the webhook)
in chats.py, messages.py and updates.py; the Bot API's reading of arguments is in arguments.py,
of reply markup in markup.py and links.py, of text in formatted_text.py, html_parser.py and
entities.py; the builders of what Telegram sends a bot are in inbound.py.
"""

from tests.fakes.recording import Call
from tests.fakes.telegram.inbound import (
    ANONYMOUS_ADMIN,
    SECRET_HEADER,
    callback_query,
    group_chat,
    media_message,
    private_chat,
    text_message,
    user,
    webhook_body,
    webhook_headers,
)
from tests.fakes.telegram.messages import RAW_TEXT
from tests.fakes.telegram.server import FakeTelegram

__all__ = [
    "ANONYMOUS_ADMIN",
    "RAW_TEXT",
    "SECRET_HEADER",
    "Call",
    "FakeTelegram",
    "callback_query",
    "group_chat",
    "media_message",
    "private_chat",
    "text_message",
    "user",
    "webhook_body",
    "webhook_headers",
]
