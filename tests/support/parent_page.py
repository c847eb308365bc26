"""A partner's page for the embedded approval's browser tests (tests/browser/test_embed.py):
`GET /parent?src=URL` frames URL in `<iframe id="approval">`, keeps every message the window
receives in `window.messages` ({origin, data}) and counts the frame's loads in
`window.frameLoads`. Served on loopback in a thread (the browser tests run no asyncio in the
main thread), so that one server is two origins: `http://localhost:PORT` and
`http://127.0.0.1:PORT`.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Partner</title>
<style>#approval { width: 100%; height: 420px; border: 1px solid #999; }</style></head>
<body>
<h1>Partner app</h1>
<script>
window.messages = [];
window.frameLoads = 0;
window.addEventListener("message", function (event) {
  window.messages.push({ origin: event.origin, data: event.data });
  if (event.data && event.data.type === "resize") {
    document.getElementById("approval").style.height = event.data.height + "px";
  }
});
</script>
<iframe id="approval" title="Approval" src="{src}"></iframe>
<script>
document.getElementById("approval").addEventListener("load", function () {
  window.frameLoads += 1;
});
</script>
</body>
</html>
"""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path != "/parent":
            self.send_error(404)
            return
        src = parse_qs(parts.query).get("src", [""])[0]
        body = _PAGE.replace("{src}", html.escape(src, quote=True)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None  # quiet


@dataclass(frozen=True)
class ParentPages:
    port: int

    @property
    def allowed(self) -> str:
        """The origin the tests allow in `[web] embed_origins`."""
        return f"http://localhost:{self.port}"

    @property
    def elsewhere(self) -> str:
        """The same page on another origin, which nothing allows."""
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def parent_pages_in_thread() -> Iterator[ParentPages]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ParentPages(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
