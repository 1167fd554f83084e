"""A rendered page as the hostile-text tests read it: its tags, comments, link targets and the text outside code,
and Markdown rendered as GitHub renders it (CommonMark, tables, raw HTML passed through)."""

from __future__ import annotations

from html.parser import HTMLParser

from markdown_it import MarkdownIt

LINK_ATTRIBUTES = ("href", "src", "action", "formaction", "xlink:href")


class Page(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.comments: list[str] = []
        self.links: list[str] = []
        self.live: list[str] = []
        self._code = 0
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [v or "" for k, v in attrs if k in LINK_ATTRIBUTES]
        self._code += tag in ("code", "pre")

    def handle_endtag(self, tag: str) -> None:
        self._code -= tag in ("code", "pre")

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def handle_data(self, data: str) -> None:
        if not self._code:
            self.live.append(data)


def github(markdown: str) -> Page:
    """Markdown as GitHub renders it."""
    return Page(MarkdownIt("commonmark").enable("table").render(markdown))
