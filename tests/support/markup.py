"""HTML read back as a person would see it: its text, and which tags it used (to prove that
text an agent chose never became markup)."""

from __future__ import annotations

from html.parser import HTMLParser


class ReadHtml(HTMLParser):
    """The text of an HTML fragment (character references decoded) and its tags, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text += data


def read_html(markup: str) -> ReadHtml:
    parser = ReadHtml()
    parser.feed(markup)
    parser.close()
    return parser
