"""A browser for the in-process web tests: an aiohttp client with its own cookie jar (one per
person; a person's second tab shares it), and the pages it gets read through a small DOM built
on the standard library's HTML parser. Used by the web inbox tests and the chat-links tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urlsplit

import aiohttp

# -- reading pages -------------------------------------------------------------------------------

_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta"})


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        parts: list[str] = []

        def walk(node: Node) -> None:
            for child in node.children:
                if isinstance(child, str):
                    parts.append(child)
                else:
                    walk(child)

        walk(self)
        # Elements read as separate words ("Amount €120.00" from <dt>Amount</dt><dd>…).
        return " ".join(" ".join(parts).split())

    def find_all(self, tag: str | None = None, classes: str = "", **attrs: str) -> list[Node]:
        """Descendants by tag, by every class in `classes`, and by exact attributes
        (`data_approval_id=` for data-approval-id)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        found: list[Node] = []

        def walk(node: Node) -> None:
            for child in node.children:
                if isinstance(child, Node):
                    if (
                        (tag is None or child.tag == tag)
                        and set(classes.split()) <= set(child.attrs.get("class", "").split())
                        and all(child.attrs.get(k) == v for k, v in wanted.items())
                    ):
                        found.append(child)
                    walk(child)

        walk(self)
        return found

    def find(self, tag: str | None = None, classes: str = "", **attrs: str) -> Node:
        matches = self.find_all(tag, classes, **attrs)
        assert matches, f"no <{tag} class={classes!r} {attrs}> in the page"
        return matches[0]

    def field(self, name: str) -> str:
        """The value of the form input `name` inside this node."""
        return self.find("input", name=name).attrs["value"]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


@dataclass
class Page:
    status: int
    url: str
    html: str
    doc: Node

    @property
    def alert(self) -> str:
        return self.doc.find(role="alert").text

    @property
    def cards(self) -> list[Node]:
        return self.doc.find_all("article", classes="card")

    def card(self, approval_id: str) -> Node:
        return self.doc.find("article", classes="card", data_approval_id=approval_id)

    def forms(self) -> list[str]:
        """The decision forms on the page: "approve", "reject", "delegate"."""
        return [
            next(c for c in f.attrs["class"].split() if c != "decide")
            for f in self.doc.find_all("form", classes="decide")
        ]


# -- the browser ---------------------------------------------------------------------------------


class Browser:
    """One person's browser: its own cookie jar; tabs of one browser share it."""

    def __init__(self, base: str) -> None:
        self.base = base
        # unsafe: keep cookies for an IP-address host (127.0.0.1)
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))

    def _url(self, path: str) -> str:
        parts = urlsplit(path)  # links name the public URL; the test server is on loopback
        return self.base + parts.path + (f"?{parts.query}" if parts.query else "")

    async def get(self, path: str, *, follow: bool = True) -> Page:
        async with self.http.get(self._url(path), allow_redirects=follow) as response:
            text = await response.text()
            location = response.headers.get("Location", str(response.url))
            return Page(response.status, location, text, parse(text))

    async def post(self, path: str, data: dict[str, str], *, follow: bool = False) -> Page:
        async with self.http.post(self._url(path), data=data, allow_redirects=follow) as response:
            text = await response.text()
            location = response.headers.get("Location", str(response.url))
            return Page(response.status, location, text, parse(text))

    async def sign_in(self, link: str, *, follow: bool = True) -> Page:
        """Open a sign-in link as a person does: the link shows a Continue button (a GET uses
        nothing up), whose form POSTs the token. A link that can no longer open a session is
        refused at the GET: that page is returned."""
        shown = await self.get(link)
        forms = shown.doc.find_all("form", id="sign-in")
        if not forms:
            return shown
        [form] = forms
        return await self.post(form.attrs["action"], {}, follow=follow)

    async def decide(
        self, page: Page, action: str, *, hash_: str | None = None, **fields: str
    ) -> Page:
        """Submit one of the page's decision forms as a browser would (its hidden inputs),
        optionally with another hash than the one it shows."""
        form = page.doc.find("form", classes=f"decide {action}")
        data = {"csrf": form.field("csrf"), "hash": hash_ or form.field("hash"), **fields}
        return await self.post(form.attrs["action"], data)
